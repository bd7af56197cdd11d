/* Philox4x32-10: Random123 known-answer vectors, stream behaviour, uniform floats. */
#include "check.h"
#include "base/rng.h"

#include <stdint.h>

static void test_known_answers(void) {
    /* From Random123's kat_vectors (philox4x32 10 rounds): counter, key, expected. */
    static const struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t t = 0; t < sizeof kat / sizeof kat[0]; t++) {
        loom_philox_ctr c = {{kat[t].ctr[0], kat[t].ctr[1], kat[t].ctr[2], kat[t].ctr[3]}};
        loom_philox_key k = {{kat[t].key[0], kat[t].key[1]}};
        loom_philox_ctr r = loom_philox4x32(c, k);
        for (int i = 0; i < 4; i++)
            CHECK_MSG(r.v[i] == kat[t].out[i], "vector %zu word %d: %08x, expected %08x", t, i,
                      r.v[i], kat[t].out[i]);
    }
}

/* Stream 0 uses the seed as key and block index as counter: words come out in order. */
static void test_stream_layout(void) {
    uint64_t seed = 0x0123456789abcdefull;
    loom_rng r;
    loom_rng_init(&r, seed, 0);
    loom_philox_key k = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
    for (uint32_t block = 0; block < 5; block++) {
        loom_philox_ctr c = {{block, 0, 0, 0}};
        loom_philox_ctr want = loom_philox4x32(c, k);
        for (int i = 0; i < 4; i++) CHECK(loom_rng_u32(&r) == want.v[i]);
    }
}

static void test_reproducible(void) {
    loom_rng a, b, c, d;
    loom_rng_init(&a, 42, 7);
    loom_rng_init(&b, 42, 7);
    loom_rng_init(&c, 43, 7);
    loom_rng_init(&d, 42, 8);
    int same_ab = 1, same_ac = 0, same_ad = 0;
    for (int i = 0; i < 1000; i++) {
        uint32_t x = loom_rng_u32(&a), y = loom_rng_u32(&b), z = loom_rng_u32(&c),
                 w = loom_rng_u32(&d);
        same_ab &= x == y;
        same_ac += x == z;
        same_ad += x == w;
    }
    CHECK(same_ab);
    CHECK_MSG(same_ac < 3, "seeds 42 and 43 agree on %d of 1000 words", same_ac);
    CHECK_MSG(same_ad < 3, "streams 7 and 8 agree on %d of 1000 words", same_ad);

    /* seed/stream swapped must not alias */
    loom_rng e, f;
    loom_rng_init(&e, 1, 0);
    loom_rng_init(&f, 0, 1);
    int same_ef = 0;
    for (int i = 0; i < 100; i++) same_ef += loom_rng_u32(&e) == loom_rng_u32(&f);
    CHECK(same_ef < 3);
}

static void test_uniform_moments(void) {
    loom_rng r;
    loom_rng_init(&r, 2024, 0);
    const int n = 1000000;
    double sum = 0, sum2 = 0;
    float lo = 1, hi = 0;
    int out_of_range = 0;
    int hist[16] = {0};
    for (int i = 0; i < n; i++) {
        float u = loom_rng_uniform(&r);
        if (!(u >= 0.0f && u < 1.0f)) out_of_range++;
        if (u < lo) lo = u;
        if (u > hi) hi = u;
        sum += u;
        sum2 += (double)u * u;
        hist[(int)(u * 16)]++;
    }
    double mean = sum / n, var = sum2 / n - mean * mean;
    CHECK(out_of_range == 0);
    /* std error of the mean is 0.29/1000; 5 sigma bounds */
    CHECK_MSG(fabs(mean - 0.5) < 0.0015, "mean %f", mean);
    CHECK_MSG(fabs(var - 1.0 / 12) < 0.0015, "variance %f", var);
    CHECK(lo < 1e-4f && hi > 1 - 1e-4f);
    for (int b = 0; b < 16; b++)
        CHECK_MSG(abs(hist[b] - n / 16) < 1500, "bin %d has %d", b, hist[b]);

    /* the mapping itself: 24 top bits times 2^-24, so all-ones stays below 1 */
    CHECK((float)(0xffffffffu >> 8) * 0x1.0p-24f < 1.0f);
}

static void test_stateless_matches_stream(void) {
    uint64_t seeds[] = {0, 1, 0xdeadbeefcafef00dull};
    uint64_t offsets[] = {0, 3, 1ull << 40};
    for (int s = 0; s < 3; s++) {
        for (int o = 0; o < 3; o++) {
            loom_rng r;
            loom_rng_init(&r, seeds[s], offsets[o]);
            int bad = 0;
            for (uint64_t i = 0; i < 1001; i++)
                bad += loom_rng_uniform(&r) != loom_rng_uniform_at(seeds[s], offsets[o], i);
            CHECK_MSG(bad == 0, "seed %d offset %d: %d mismatches", s, o, bad);
        }
    }
    /* order independence: element i is the same whether or not others were drawn */
    CHECK(loom_rng_uniform_at(5, 6, 123457) == loom_rng_uniform_at(5, 6, 123457));
}

int main(void) {
    RUN_TEST(test_known_answers);
    RUN_TEST(test_stream_layout);
    RUN_TEST(test_reproducible);
    RUN_TEST(test_uniform_moments);
    RUN_TEST(test_stateless_matches_stream);
    return TEST_SUMMARY();
}
