/* IEEE binary16 and bfloat16 conversions in portable C.
 *
 * Both directions work on bit patterns so the result does not depend on the
 * FPU rounding mode, flush-to-zero settings or compiler contraction. Rounding
 * is to nearest, ties to even; overflow gives Inf; NaN stays a quiet NaN with
 * its sign and top payload bits (what the F16C / AVX512_BF16 instructions do). */
#include "loom.h"

#include <string.h>

static inline uint32_t f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static inline float bits_f32(uint32_t x) {
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* Rounds m / 2^shift to nearest even integer (1 <= shift <= 31). */
static inline uint32_t shift_round_even(uint32_t m, int shift) {
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return q;
}

uint16_t loom_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;

    if (ax >= 0x7f800000u) {
        if (ax == 0x7f800000u) return sign | 0x7c00u;
        /* NaN: force the quiet bit so a payload that only had low bits stays NaN. */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    }
    if (ax >= 0x38800000u) {
        /* Normal f16 range or above (>= 2^-14): rebias 127 -> 15 and round away
         * 13 mantissa bits. A carry out of the mantissa bumps the exponent, and
         * past 65504 it lands on 0x7c00 (Inf), which is the correct result. */
        uint32_t r = ax - 0x38000000u;
        if (r >= 0x0f800000u) return sign | 0x7c00u;  /* exponent beyond f16 range */
        r += 0x0fffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    /* f16 subnormal or zero: the result counts units of 2^-24. The f32 value is
     * m * 2^(e-150) with the implicit bit in m (f32 denormals have e = 0 but
     * the same unit as e = 1). */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffffu) | (e ? 0x800000u : 0);
    int shift = 126 - (int)(e ? e : 1);  /* >= 14 here */
    if (shift > 24) return sign;         /* below half of 2^-24 (m < 2^24) */
    return (uint16_t)(sign | shift_round_even(m, shift));
}

float loom_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;

    if (e == 0x1f) {
        /* Inf, or NaN made quiet (as vcvtph2ps does). */
        return bits_f32(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
    }
    if (e == 0) {
        if (m == 0) return bits_f32(sign);
        /* Subnormal m * 2^-24: normalise so the leading one becomes implicit. */
        int ee = 1;
        while (!(m & 0x400u)) {
            m <<= 1;
            ee--;
        }
        return bits_f32(sign | ((uint32_t)(ee + 112) << 23) | ((m & 0x3ffu) << 13));
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t loom_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        /* Truncating could drop every payload bit and make Inf: keep it a quiet NaN. */
        return (uint16_t)((x >> 16) | 0x40u);
    }
    /* Round away 16 bits; a carry into the exponent is correct, including up to Inf.
     * f32 denormals round the same way since they share the bit layout. */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float loom_bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    if ((x & 0x7fffffffu) > 0x7f800000u) x |= 0x400000u;  /* quiet a signalling NaN */
    return bits_f32(x);
}
