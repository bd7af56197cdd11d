/* f16 / bf16 conversions: exhaustive over all 16-bit patterns, rounding at
 * every midpoint, and (when the CPU has them) bit-exact agreement with the
 * F16C and AVX512_BF16 conversion instructions. */
#include "check.h"
#include "loom.h"
#include "base/cpu.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

static uint32_t bits(float f) { uint32_t x; memcpy(&x, &f, 4); return x; }
static float from_bits(uint32_t x) { float f; memcpy(&f, &x, 4); return f; }

static int f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
static int bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }

/* Independent value of an f16 pattern: sign * mantissa * 2^exponent in doubles. */
static double f16_formula(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0x1f) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -24);
    else v = ldexp((double)(m | 0x400), e - 25);
    return s ? -v : v;
}

static double bf16_formula(uint16_t h) {
    int s = h >> 15, e = (h >> 7) & 0xff, m = h & 0x7f;
    double v;
    if (e == 0xff) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -133);
    else v = ldexp((double)(m | 0x80), e - 134);
    return s ? -v : v;
}

static void test_f16_exhaustive(void) {
    int bad_value = 0, bad_trip = 0, bad_nan = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = loom_f16_to_f32(h);
        double ref = f16_formula(h);
        if (f16_is_nan(h)) {
            uint16_t back = loom_f32_to_f16(f);
            if (!isnan(f) || !f16_is_nan(back) || (back & 0x8000) != (h & 0x8000) ||
                (bits(f) >> 31) != (uint32_t)(h >> 15) || !(bits(f) & 0x400000))
                bad_nan++;
            continue;
        }
        if ((double)f != ref || (bits(f) >> 31) != (uint32_t)(h >> 15)) bad_value++;
        if (loom_f32_to_f16(f) != h) bad_trip++;
    }
    CHECK_MSG(bad_value == 0, "%d f16 values differ from the formula", bad_value);
    CHECK_MSG(bad_trip == 0, "%d f16 round trips not identity", bad_trip);
    CHECK_MSG(bad_nan == 0, "%d f16 NaN patterns not kept as signed quiet NaN", bad_nan);
}

static void test_bf16_exhaustive(void) {
    int bad_value = 0, bad_trip = 0, bad_nan = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = loom_bf16_to_f32(h);
        if (bf16_is_nan(h)) {
            uint16_t back = loom_f32_to_bf16(f);
            if (!isnan(f) || !bf16_is_nan(back) || (back & 0x8000) != (h & 0x8000)) bad_nan++;
            continue;
        }
        if ((double)f != bf16_formula(h) || bits(f) != (uint32_t)h << 16) bad_value++;
        if (loom_f32_to_bf16(f) != h) bad_trip++;
    }
    CHECK_MSG(bad_value == 0, "%d bf16 values wrong", bad_value);
    CHECK_MSG(bad_trip == 0, "%d bf16 round trips not identity", bad_trip);
    CHECK_MSG(bad_nan == 0, "%d bf16 NaN patterns not kept as NaN", bad_nan);
}

/* For each adjacent pair (lo, lo+1) of finite patterns of one sign, the exact
 * midpoint (representable in f32: 12 or 9 significant bits) goes to the even
 * pattern; the next f32 towards either side goes to that side. */
static void test_midpoints(const char *what, uint16_t (*to)(float), float (*from)(uint16_t),
                           uint16_t max_finite) {
    int bad = 0;
    for (int sign = 0; sign < 2; sign++) {
        for (uint32_t p = 0; p < max_finite; p++) {
            uint16_t lo = (uint16_t)(p | (sign ? 0x8000u : 0)), hi = (uint16_t)(lo + 1);
            double a = from(lo), b = from(hi);
            float mid = (float)((a + b) / 2);
            if ((double)mid != (a + b) / 2) { bad++; continue; }
            uint16_t even = (lo & 1) ? hi : lo;
            float toward_lo = nextafterf(mid, (float)a), toward_hi = nextafterf(mid, (float)b);
            if (to(mid) != even || to(toward_lo) != lo || to(toward_hi) != hi) {
                if (bad++ < 5)
                    fprintf(stderr, "%s midpoint %04x/%04x: got %04x %04x %04x\n", what, lo, hi,
                            to(toward_lo), to(mid), to(toward_hi));
            }
        }
    }
    CHECK_MSG(bad == 0, "%s: %d midpoint pairs round wrongly", what, bad);
}

static void test_f16_midpoints(void) {
    test_midpoints("f16", loom_f32_to_f16, loom_f16_to_f32, 0x7bff);
}
static void test_bf16_midpoints(void) {
    test_midpoints("bf16", loom_f32_to_bf16, loom_bf16_to_f32, 0x7f7f);
}

static void test_f16_boundaries(void) {
    CHECK(loom_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(loom_f32_to_f16(65519.99609375f) == 0x7bff);      /* just below the midpoint */
    CHECK(loom_f32_to_f16(65520.0f) == 0x7c00);             /* midpoint: ties to even = Inf */
    CHECK(loom_f32_to_f16(-65520.0f) == 0xfc00);
    CHECK(loom_f32_to_f16(1e10f) == 0x7c00);
    CHECK(loom_f32_to_f16(3.4028235e38f) == 0x7c00);
    CHECK(loom_f32_to_f16(INFINITY) == 0x7c00);
    CHECK(loom_f32_to_f16(-INFINITY) == 0xfc00);
    CHECK(loom_f16_to_f32(0x7c00) == INFINITY);
    CHECK(loom_f16_to_f32(0xfc00) == -INFINITY);
    CHECK(loom_f32_to_f16(0.0f) == 0x0000);
    CHECK(loom_f32_to_f16(-0.0f) == 0x8000);
    CHECK(bits(loom_f16_to_f32(0x8000)) == 0x80000000u);
    /* denormals: smallest 2^-24, largest (1023 * 2^-24), smallest normal 2^-14 */
    CHECK(loom_f32_to_f16(ldexpf(1.0f, -24)) == 0x0001);
    CHECK(loom_f32_to_f16(ldexpf(1023.0f, -24)) == 0x03ff);
    CHECK(loom_f32_to_f16(ldexpf(1.0f, -14)) == 0x0400);
    CHECK(loom_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000);    /* tie with 0: even */
    CHECK(loom_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(loom_f32_to_f16(ldexpf(3.0f, -25)) == 0x0002);    /* tie 1|2: even */
    CHECK(loom_f32_to_f16(-ldexpf(1.0f, -26)) == 0x8000);
    CHECK(loom_f32_to_f16(from_bits(0x00000001u)) == 0x0000); /* f32 denormal -> 0 */
    CHECK(loom_f32_to_f16(-from_bits(0x007fffffu)) == 0x8000);
    CHECK(loom_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    CHECK(loom_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24));
    CHECK(loom_f32_to_f16(1.0f) == 0x3c00);
    CHECK(loom_f32_to_f16(1.0f + ldexpf(1.0f, -11)) == 0x3c00);  /* tie to even */
    CHECK(loom_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)) == 0x3c02);
    CHECK(loom_f32_to_f16(2047.0f / 1024.0f + ldexpf(1.0f, -11)) == 0x4000); /* carry into exp */
    /* NaN: quiet, sign kept, a payload only in low bits still gives NaN */
    CHECK(f16_is_nan(loom_f32_to_f16(NAN)));
    CHECK(f16_is_nan(loom_f32_to_f16(from_bits(0x7f800001u))));
    CHECK(loom_f32_to_f16(from_bits(0xff800001u)) & 0x8000);
    CHECK(loom_f32_to_f16(from_bits(0x7f800001u)) & 0x0200);
}

static void test_bf16_boundaries(void) {
    CHECK(loom_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(loom_f32_to_bf16(-0.0f) == 0x8000);
    CHECK(loom_f32_to_bf16(from_bits(0x7f7fffffu)) == 0x7f80);  /* FLT_MAX rounds to Inf */
    CHECK(loom_f32_to_bf16(from_bits(0x7f7f8000u)) == 0x7f80);  /* midpoint: even = Inf */
    CHECK(loom_f32_to_bf16(from_bits(0x7f7f7fffu)) == 0x7f7f);
    CHECK(loom_f32_to_bf16(INFINITY) == 0x7f80);
    CHECK(loom_f32_to_bf16(-INFINITY) == 0xff80);
    CHECK(loom_f32_to_bf16(from_bits(0x00008000u)) == 0x0000); /* denormal tie to even 0 */
    CHECK(loom_f32_to_bf16(from_bits(0x00018000u)) == 0x0002); /* tie 1|2: even */
    CHECK(loom_f32_to_bf16(from_bits(0x007fffffu)) == 0x0080); /* to smallest normal */
    CHECK(bf16_is_nan(loom_f32_to_bf16(from_bits(0x7f800001u))));
    CHECK(bf16_is_nan(loom_f32_to_bf16(from_bits(0xffffffffu))));
    CHECK(loom_f32_to_bf16(from_bits(0xff800001u)) & 0x8000);
}

/* Random f32 bit patterns, weighted so about half land near the f16 range. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float random_f32(int i) {
    uint32_t x = next_u32();
    if (i & 1) x = (x & 0x807fffffu) | ((uint32_t)(96 + (next_u32() % 48)) << 23);
    return from_bits(x);
}

#ifdef HAVE_X86
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f) {
    __m128i r = _mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT);
    return (uint16_t)_mm_extract_epi16(r, 0);
}
__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
__attribute__((target("avx512f,avx512vl,avx512bf16"))) static uint16_t hw_f32_to_bf16(float f) {
    __m128bh r = _mm_cvtneps_pbh(_mm_set_ss(f));
    uint16_t out[8];
    memcpy(out, &r, sizeof out);
    return out[0];
}

static void test_f16c_oracle(void) {
    if (!loom_cpu_get()->f16c) {
        fprintf(stderr, "  (no F16C: hardware oracle skipped)\n");
        return;
    }
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        if (bits(hw_f16_to_f32(h)) != bits(loom_f16_to_f32(h))) bad++;
        /* every f16 value and its neighbours in f32 */
        float f = loom_f16_to_f32(h);
        float probes[5] = {f, nextafterf(f, INFINITY), nextafterf(f, -INFINITY),
                           (float)(f16_formula(h) + f16_formula((uint16_t)(h + 1))) / 2, 0};
        probes[4] = nextafterf(probes[3], 0.0f);
        for (int k = 0; k < 5; k++)
            if (hw_f32_to_f16(probes[k]) != loom_f32_to_f16(probes[k])) {
                if (bad++ < 5)
                    fprintf(stderr, "f16 %08x: hw %04x loom %04x\n", bits(probes[k]),
                            hw_f32_to_f16(probes[k]), loom_f32_to_f16(probes[k]));
            }
    }
    for (int i = 0; i < (1 << 20); i++) {
        float f = random_f32(i);
        if (hw_f32_to_f16(f) != loom_f32_to_f16(f)) {
            if (bad++ < 5)
                fprintf(stderr, "f16 %08x: hw %04x loom %04x\n", bits(f), hw_f32_to_f16(f),
                        loom_f32_to_f16(f));
        }
    }
    CHECK_MSG(bad == 0, "%d conversions differ from F16C", bad);
}

static void test_bf16_oracle(void) {
    const loom_cpu_features *c = loom_cpu_get();
    if (!(c->avx512_bf16 && c->avx512vl)) {
        fprintf(stderr, "  (no AVX512_BF16: hardware oracle skipped)\n");
        return;
    }
    /* vcvtneps2bf16 flushes denormal inputs to zero: compare normal, Inf and NaN only. */
    int bad = 0, n = 0;
    for (int i = 0; i < (1 << 20) + 65536; i++) {
        float f = i < 65536 ? loom_bf16_to_f32((uint16_t)i) : random_f32(i);
        if (i < 65536 && (i & 1)) f = nextafterf(f, 0.0f);
        if (fpclassify(f) == FP_SUBNORMAL || f == 0.0f) continue;
        n++;
        if (hw_f32_to_bf16(f) != loom_f32_to_bf16(f)) {
            if (bad++ < 5)
                fprintf(stderr, "bf16 %08x: hw %04x loom %04x\n", bits(f), hw_f32_to_bf16(f),
                        loom_f32_to_bf16(f));
        }
    }
    CHECK_MSG(bad == 0, "%d of %d conversions differ from vcvtneps2bf16", bad, n);
}
#endif

int main(void) {
    RUN_TEST(test_f16_exhaustive);
    RUN_TEST(test_bf16_exhaustive);
    RUN_TEST(test_f16_midpoints);
    RUN_TEST(test_bf16_midpoints);
    RUN_TEST(test_f16_boundaries);
    RUN_TEST(test_bf16_boundaries);
#ifdef HAVE_X86
    RUN_TEST(test_f16c_oracle);
    RUN_TEST(test_bf16_oracle);
#endif
    return TEST_SUMMARY();
}
