/* Generic-C level of the vectorised ops: portable loops without strides or
 * per-element index arithmetic, written so the compiler can vectorise them
 * for the baseline ISA. Semantics as in vec.h. */
#include "ops/vec/vec.h"

/* GCC will not if-convert the clamps and selects below (so not vectorise the
 * loops) while FP exceptions count as side effects; loom never reads FP
 * exception flags, and the values computed are the same. Clang's default.
 * The pragma resets -ffp-contract to its default, so it repeats "off": the
 * RoPE rotation must not become an FMA (bit-exactness with the reference). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=off")
#endif

#include "loom.h"

#include <math.h>
#include <string.h>

static inline uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Range reduction and polynomial of exp (vec.h): returns p ~ exp(r) and sets
 * *n with exp(x) = p * 2^n. No FMA (the build forbids contraction); the split
 * ln2 keeps n*ln2_hi exact anyway. NaN input gives finite values: callers
 * propagate NaN themselves. */
static inline float exp_reduce(float x, int32_t *n) {
    /* comparisons, not fminf/fmaxf (library calls): NaN becomes LO */
    x = x > LOOM_VEC_EXP_LO ? x : LOOM_VEC_EXP_LO;
    x = x < LOOM_VEC_EXP_HI ? x : LOOM_VEC_EXP_HI;
    /* round to nearest by the 1.5*2^23 trick: the low mantissa bits then hold n */
    float t = x * LOOM_VEC_LOG2E + 12582912.0f;
    *n = (int32_t)(f2u(t) - 0x4B400000u);
    float nf = t - 12582912.0f;
    float r = x - nf * LOOM_VEC_LN2_HI;
    r = r - nf * LOOM_VEC_LN2_LO;
    float p = LOOM_VEC_EXP_C7;
    p = p * r + LOOM_VEC_EXP_C6;
    p = p * r + LOOM_VEC_EXP_C5;
    p = p * r + LOOM_VEC_EXP_C4;
    p = p * r + LOOM_VEC_EXP_C3;
    p = p * r + LOOM_VEC_EXP_C2;
    p = p * r + 1.0f;
    return p * r + 1.0f;
}

/* v * 2^n for n in [-159, 129]: two factors with normal exponents, so a
 * subnormal result rounds once and 2^128 overflows to Inf. */
static inline float scale2(float v, int32_t n) {
    int32_t n1 = n / 2, n2 = n - n1;
    return v * u2f((uint32_t)(n1 + 127) << 23) * u2f((uint32_t)(n2 + 127) << 23);
}

static inline float exp_poly(float x) {
    int32_t n;
    float p = exp_reduce(x, &n);
    return scale2(p, n);
}

static void add_g(const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

static void mul_g(const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];
}

/* x / (1 + exp(-x)), or x*exp(x) where exp(-x) would overflow (vec.h) */
static inline float silu1(float x) {
    int small = (x < LOOM_VEC_SILU_SPLIT) & (x > LOOM_VEC_EXP_LO); /* no branch: vectorisable */
    int32_t k;
    float p = exp_reduce(small ? x : -x, &k);
    return small ? scale2(x * p, k) : x / (1.0f + scale2(p, k));
}

static void silu_g(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = silu1(x[i]);
}

static double sumsq_g(const float *x, int64_t n) {
    double s[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) s[k] += (double)x[i + k] * (double)x[i + k];
    for (; i < n; i++) s[0] += (double)x[i] * (double)x[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

static void scale_row_g(const float *x, const float *g, double inv, float *y, int64_t n) {
    if (g)
        for (int64_t i = 0; i < n; i++) y[i] = (float)((double)x[i] * inv * (double)g[i]);
    else
        for (int64_t i = 0; i < n; i++) y[i] = (float)((double)x[i] * inv);
}

static void softmax_g(const float *x, const float *mask, float *y, int64_t C, int64_t n_valid,
                      float scale) {
    float mx = -INFINITY;
    int bad = 0; /* a NaN or +Inf logit: the reference's row is all NaN */
    for (int64_t j = 0; j < n_valid; j++) {
        float z = x[j] * scale;
        if (mask) z += mask[j];
        bad |= !(z < INFINITY);
        mx = z > mx ? z : mx;
    }
    if (bad || mx == -INFINITY) {
        float v = bad ? NAN : 0.0f;
        for (int64_t j = 0; j < C; j++) y[j] = v;
        return;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < n_valid; j++) {
        float z = x[j] * scale;
        if (mask) z += mask[j];
        float e = exp_poly(z - mx);
        y[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < n_valid; j++) y[j] *= inv;
    for (int64_t j = n_valid; j < C; j++) y[j] = 0.0f;
}

static void rope_interleaved_g(const float *x, float *y, const float *c2, const float *s2,
                               int64_t n_rot) {
    for (int64_t i = 0; i < n_rot; i += 2) {
        float v0 = x[i], v1 = x[i + 1], c = c2[i], s = s2[i];
        y[i] = v0 * c - v1 * s;
        y[i + 1] = v0 * s + v1 * c;
    }
}

static void rope_half_g(const float *x, float *y, const float *c, const float *s, int64_t half) {
    for (int64_t i = 0; i < half; i++) {
        float v0 = x[i], v1 = x[i + half];
        y[i] = v0 * c[i] - v1 * s[i];
        y[i + half] = v0 * s[i] + v1 * c[i];
    }
}

static void f16_to_f32_g(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = loom_f16_to_f32(x[i]);
}

static void f32_to_f16_g(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = loom_f32_to_f16(x[i]);
}

static void bf16_to_f32_g(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = loom_bf16_to_f32(x[i]);
}

static void f32_to_bf16_g(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = loom_f32_to_bf16(x[i]);
}

const loom_vec_fns loom_vec_generic = {
    .add = add_g,
    .mul = mul_g,
    .silu = silu_g,
    .sumsq = sumsq_g,
    .scale_row = scale_row_g,
    .softmax = softmax_g,
    .rope_interleaved = rope_interleaved_g,
    .rope_half = rope_half_g,
    .f16_to_f32 = f16_to_f32_g,
    .f32_to_f16 = f32_to_f16_g,
    .bf16_to_f32 = bf16_to_f32_g,
    .f32_to_bf16 = f32_to_bf16_g,
};
