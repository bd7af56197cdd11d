/* Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy
 * as 1, 2, 3", SC 2011). A keyed bijection on 128-bit counters: the n-th number
 * of a stream is computed directly, so results do not depend on how work is
 * split across threads.
 *
 * Streams: the key is the seed XOR a bijective 64-bit mix of the stream id
 * (loom_rng has no room to carry the stream in the counter). For one seed,
 * distinct streams therefore always get distinct keys, and stream 0 uses the
 * seed itself. The 128-bit counter is {block lo, block hi, 0, 0}; word w of a
 * stream is word w % 4 of block w / 4. */
#include "base/rng.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u  /* golden ratio */
#define PHILOX_W1 0xBB67AE85u  /* sqrt(3) - 1 */

static inline void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

loom_philox_ctr loom_philox4x32(loom_philox_ctr ctr, loom_philox_key key) {
    uint32_t c0 = ctr.v[0], c1 = ctr.v[1], c2 = ctr.v[2], c3 = ctr.v[3];
    uint32_t k0 = key.v[0], k1 = key.v[1];
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(PHILOX_M0, c0, &hi0, &lo0);
        mulhilo(PHILOX_M1, c2, &hi1, &lo1);
        uint32_t n0 = hi1 ^ c1 ^ k0;
        uint32_t n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += PHILOX_W0;  /* the key bump after the last round is unused: harmless */
        k1 += PHILOX_W1;
    }
    loom_philox_ctr out = {{c0, c1, c2, c3}};
    return out;
}

/* splitmix64's finaliser: a bijection on 64 bits with mix(0) = 0. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static loom_philox_key stream_key(uint64_t seed, uint64_t stream) {
    uint64_t k = seed ^ mix64(stream);
    loom_philox_key key = {{(uint32_t)k, (uint32_t)(k >> 32)}};
    return key;
}

static loom_philox_ctr block_ctr(uint64_t block) {
    loom_philox_ctr c = {{(uint32_t)block, (uint32_t)(block >> 32), 0, 0}};
    return c;
}

/* 24 random bits scaled by 2^-24: exactly representable, so the result is < 1. */
static inline float u32_to_uniform(uint32_t x) {
    return (float)(x >> 8) * 0x1.0p-24f;
}

void loom_rng_init(loom_rng *r, uint64_t seed, uint64_t stream) {
    r->key = stream_key(seed, stream);
    r->counter = 0;
    for (int i = 0; i < 4; i++) r->buf[i] = 0;
    r->avail = 0;
}

uint32_t loom_rng_u32(loom_rng *r) {
    if (r->avail <= 0) {
        loom_philox_ctr out = loom_philox4x32(block_ctr(r->counter), r->key);
        for (int i = 0; i < 4; i++) r->buf[i] = out.v[i];
        r->counter++;
        r->avail = 4;
    }
    return r->buf[4 - r->avail--];
}

float loom_rng_uniform(loom_rng *r) {
    return u32_to_uniform(loom_rng_u32(r));
}

float loom_rng_uniform_at(uint64_t seed, uint64_t offset, uint64_t i) {
    loom_philox_ctr out = loom_philox4x32(block_ctr(i / 4), stream_key(seed, offset));
    return u32_to_uniform(out.v[i % 4]);
}
