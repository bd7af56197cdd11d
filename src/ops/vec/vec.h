/*
 * Vectorised primitive ops, internal interface.
 *
 * Each ISA level (generic C, AVX2+FMA+F16C, AVX-512 F/BW/VL) provides the same
 * set of contiguous-row functions in one table. The drivers in vec_ops.c are
 * shared by all levels: they check layouts (falling back to the reference
 * kernel for layouts the row functions do not cover), split rows by (ith, nth)
 * and call the table. So every level gets the same threading, error handling
 * and per-row set-up (RMSNorm's 1/rms, RoPE's cos/sin), and only the inner
 * loops differ.
 */
#ifndef LOOM_OPS_VEC_VEC_H
#define LOOM_OPS_VEC_VEC_H

#include <stdint.h>

#include "ops/ops.h"

typedef struct loom_vec_fns {
    /* y[i] = a[i] + b[i] / a[i] * b[i]: exact IEEE, bit-identical to the reference */
    void (*add)(const float *a, const float *b, float *y, int64_t n);
    void (*mul)(const float *a, const float *b, float *y, int64_t n);
    /* y[i] = x[i] / (1 + exp(-x[i])). Each element's result depends on its value
     * only (tails use the same arithmetic as the body), so any split agrees. */
    void (*silu)(const float *x, float *y, int64_t n);
    /* Sum of x[i]^2 accumulated in double (each square is exact in double). */
    double (*sumsq)(const float *x, int64_t n);
    /* y[i] = (float)((double)x[i] * inv * (double)g[i]); g NULL means 1.
     * The reference's rounding sequence, so equal inv gives equal bits. */
    void (*scale_row)(const float *x, const float *g, double inv, float *y, int64_t n);
    /* One softmax row: z[j] = x[j]*scale (+ mask[j]) for j < n_valid (columns at
     * or beyond n_valid are causally masked); y = exp(z - max) / sum. NaN or +Inf
     * in z makes the row NaN, a row with every z = -Inf is zeros (as the reference). */
    void (*softmax)(const float *x, const float *mask, float *y, int64_t C, int64_t n_valid,
                    float scale);
    /* RoPE rotation of pairs, separate multiply and subtract/add (no FMA) so it
     * matches the reference bit for bit given the same cos/sin.
     * Interleaved: pairs (2i, 2i+1) for 2i < n_rot; c2/s2 hold each pair's
     * cos/sin twice (c2[2i] = c2[2i+1] = cos_i). Half: pairs (i, i + half). */
    void (*rope_interleaved)(const float *x, float *y, const float *c2, const float *s2,
                             int64_t n_rot);
    void (*rope_half)(const float *x, float *y, const float *c, const float *s, int64_t half);
    /* Conversions, bit-identical to loom_f16_to_f32 / loom_f32_to_f16 /
     * loom_bf16_to_f32 / loom_f32_to_bf16 (round to nearest even, NaN kept quiet). */
    void (*f16_to_f32)(const uint16_t *x, float *y, int64_t n);
    void (*f32_to_f16)(const float *x, uint16_t *y, int64_t n);
    void (*bf16_to_f32)(const uint16_t *x, float *y, int64_t n);
    void (*f32_to_bf16)(const float *x, uint16_t *y, int64_t n);
} loom_vec_fns;

extern const loom_vec_fns loom_vec_generic;
#if defined(__x86_64__)
extern const loom_vec_fns loom_vec_avx2;
extern const loom_vec_fns loom_vec_avx512;
#endif
/* The row-function table of the vector level to use for isa (the best this
 * CPU has at or below it). */
const loom_vec_fns *loom_vec_fns_for(loom_isa isa);

/* n elements from xp (dtype xt) to yp (dtype yt), both f32/f16/bf16, with
 * the table's conversions (a bit copy when the dtypes agree): the copy op's
 * row, also the cache writes of kv_append and qkv_rope. */
void loom_vec_convert(const loom_vec_fns *f, loom_dtype xt, const void *xp, loom_dtype yt, void *yp,
                      int64_t n);

/* Drivers (vec_ops.c): one per op, parameterised by the level's table. */
loom_status loom_vec_rms_norm(const loom_kernel_args *a, const loom_vec_fns *f);
loom_status loom_vec_add(const loom_kernel_args *a, const loom_vec_fns *f);
loom_status loom_vec_mul(const loom_kernel_args *a, const loom_vec_fns *f);
loom_status loom_vec_silu(const loom_kernel_args *a, const loom_vec_fns *f);
loom_status loom_vec_softmax(const loom_kernel_args *a, const loom_vec_fns *f);
loom_status loom_vec_rope(const loom_kernel_args *a, const loom_vec_fns *f);
loom_status loom_vec_get_rows(const loom_kernel_args *a, const loom_vec_fns *f);
loom_status loom_vec_copy(const loom_kernel_args *a, const loom_vec_fns *f);

/* Scratch bytes per thread of loom_vec_rope: frequencies and a position's cos/sin. */
size_t loom_vec_rope_scratch(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                             const void *attrs);
/* The pieces of loom_vec_rope's angle computation, for fused kernels that
 * rotate many tiles of the same positions and must match it bit for bit:
 * freq[n_rot / 2], then the cos/sin table of position s (pos_offset + s):
 * n_rot entries each, duplicated per pair in interleaved mode, the first
 * n_rot / 2 in half mode (the layout rope_interleaved / rope_half take). */
void loom_vec_rope_freqs(const loom_rope_attrs *at, int64_t n_rot, float *freq);
void loom_vec_rope_table(const loom_rope_attrs *at, int64_t n_rot, const float *freq, int64_t s,
                         float *cs, float *sn);

/* Polynomial exp shared in spirit by all levels: x clamped to [-110, 88.8]
 * (beyond, exp is 0 or +Inf in f32), n = round(x / ln2), r = x - n ln2 in two
 * parts, degree-7 Taylor series on |r| <= ln2/2 (truncation < 0.1 ulp), and
 * 2^n applied in two halves (or by scalef) so results that are subnormal
 * round once. */
#define LOOM_VEC_EXP_LO (-110.0f)
#define LOOM_VEC_EXP_HI 88.8f
/* silu(x) for x in (-110, -87) is x*exp(x): there exp(-x) would overflow but
 * 1 + exp(x) == 1, and x*p*2^n keeps full precision down to subnormals. */
#define LOOM_VEC_SILU_SPLIT (-87.0f)
#define LOOM_VEC_LOG2E 1.44269504088896341f
#define LOOM_VEC_LN2_HI 0.693145751953125f        /* 15 significant bits: n*hi is exact */
#define LOOM_VEC_LN2_LO 1.428606765330187045e-06f
#define LOOM_VEC_EXP_C2 (1.0f / 2.0f)
#define LOOM_VEC_EXP_C3 (1.0f / 6.0f)
#define LOOM_VEC_EXP_C4 (1.0f / 24.0f)
#define LOOM_VEC_EXP_C5 (1.0f / 120.0f)
#define LOOM_VEC_EXP_C6 (1.0f / 720.0f)
#define LOOM_VEC_EXP_C7 (1.0f / 5040.0f)

#endif
