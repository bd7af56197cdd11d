/* Philox4x32-10: a counter-based RNG. Same (key, counter) -> same numbers on any
 * thread or machine, so sampling and dropout are reproducible. */
#ifndef LOOM_BASE_RNG_H
#define LOOM_BASE_RNG_H

#include <stdint.h>

typedef struct { uint32_t v[4]; } loom_philox_ctr;
typedef struct { uint32_t v[2]; } loom_philox_key;

/* One Philox4x32-10 block: 4 random 32-bit words for (ctr, key). */
loom_philox_ctr loom_philox4x32(loom_philox_ctr ctr, loom_philox_key key);

/* A convenience stream over Philox: key from a 64-bit seed, counter advanced per call. */
typedef struct loom_rng {
    loom_philox_key key;
    uint64_t counter;     /* block index */
    uint32_t buf[4];
    int      avail;       /* words left in buf */
} loom_rng;

void     loom_rng_init(loom_rng *r, uint64_t seed, uint64_t stream);
uint32_t loom_rng_u32(loom_rng *r);
/* Uniform float in [0, 1) with 24 random bits. */
float    loom_rng_uniform(loom_rng *r);
/* Stateless: uniform [0,1) for element index i of (seed, offset); for dropout masks. */
float    loom_rng_uniform_at(uint64_t seed, uint64_t offset, uint64_t i);

#endif
