/* Fast kernels of the encoder ops: GELU with a polynomial erf (Abramowitz &
 * Stegun 7.1.26, |error| <= 1.5e-7) in float, LayerNorm with float sums, and
 * add_bias, loops the compiler vectorises. Registered at the generic level (so
 * every ISA level uses them; GELU has AVX2 and AVX-512 kernels too, the same
 * polynomial on 8 and 16 lanes: with the scalar expf, GELU took a fifth of
 * `loom embed` at the AVX2 level); tested against
 * the reference in tests/unit/test_ops_encoder.c. Rows are independent, each
 * summed in one fixed order: results do not depend on the thread split. */
#include <math.h>
#include <string.h>

#include "ops/ref/ref_encoder.h"
#include "ops/vec/vec_encoder.h"

static float erf_as(float x) {
    float a = fabsf(x);
    float t = 1.0f / (1.0f + 0.3275911f * a);
    float p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    float r = 1.0f - p * expf(-a * a);
    return x < 0 ? -r : r;
}

loom_status loom_gelu_generic(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *y = a->dst;
    const loom_gelu_attrs *at = a->attrs;
    int tanh_form = at && at->approximate;
    int last = x->ndim - 1;
    int64_t D = x->shape[last], xs = x->stride[last], ys = y->stride[last];
    const float *xd = x->data;
    float *yd = y->data;
    int64_t lo, hi;
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = xd + loom_ref_row_offset(x, last, r);
        float *yr = yd + loom_ref_row_offset(y, last, r);
        if (tanh_form) {
            for (int64_t d = 0; d < D; d++) {
                float v = xr[d * xs];
                yr[d * ys] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
            }
        } else {
            for (int64_t d = 0; d < D; d++) {
                float v = xr[d * xs];
                yr[d * ys] = 0.5f * v * (1.0f + erf_as(v * 0.70710678f));
            }
        }
    }
    return LOOM_OK;
}

/* LayerNorm over contiguous rows (else the reference): mean and variance in
 * float over 16 lanes (two passes: no cancellation of a large mean), then
 * (x - mean) * inv * gamma + beta. */
loom_status loom_layer_norm_generic(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *y = a->dst;
    const loom_tensor *g = a->n_src >= 2 ? a->src[1] : NULL, *b = a->n_src >= 3 ? a->src[2] : NULL;
    int last = x->ndim - 1;
    if (x->stride[last] != 1 || y->stride[last] != 1 || (g && g->stride[0] != 1) || (b && b->stride[0] != 1))
        return loom_ref_layer_norm(a);
    const loom_layer_norm_attrs *at = a->attrs;
    int64_t D = x->shape[last];
    const float *gd = g ? g->data : NULL, *bd = b ? b->data : NULL;
    int64_t lo, hi;
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = (const float *)x->data + loom_ref_row_offset(x, last, r);
        float *yr = (float *)y->data + loom_ref_row_offset(y, last, r);
        float acc[16] = {0}, sum = 0.0f, ss = 0.0f;
        int64_t d = 0;
        for (; d + 16 <= D; d += 16)
            for (int l = 0; l < 16; l++) acc[l] += xr[d + l];
        for (int l = 0; l < 16; l++) sum += acc[l];
        for (; d < D; d++) sum += xr[d];
        float mean = sum / (float)D;
        for (int l = 0; l < 16; l++) acc[l] = 0.0f;
        for (d = 0; d + 16 <= D; d += 16)
            for (int l = 0; l < 16; l++) {
                float v = xr[d + l] - mean;
                acc[l] += v * v;
            }
        for (int l = 0; l < 16; l++) ss += acc[l];
        for (; d < D; d++) ss += (xr[d] - mean) * (xr[d] - mean);
        float inv = 1.0f / sqrtf(ss / (float)D + at->eps);
        if (gd && bd)
            for (d = 0; d < D; d++) yr[d] = (xr[d] - mean) * inv * gd[d] + bd[d];
        else
            for (d = 0; d < D; d++) {
                float v = (xr[d] - mean) * inv;
                if (gd) v *= gd[d];
                if (bd) v += bd[d];
                yr[d] = v;
            }
    }
    return LOOM_OK;
}

/* x + bias over contiguous rows (else the reference). */
loom_status loom_add_bias_generic(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *b = a->src[1], *y = a->dst;
    int last = x->ndim - 1;
    if (x->stride[last] != 1 || y->stride[last] != 1 || b->stride[0] != 1) return loom_ref_add_bias(a);
    int64_t N = x->shape[last];
    const float *bd = b->data;
    int64_t lo, hi;
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = (const float *)x->data + loom_ref_row_offset(x, last, r);
        float *yr = (float *)y->data + loom_ref_row_offset(y, last, r);
        for (int64_t d = 0; d < N; d++) yr[d] = xr[d] + bd[d];
    }
    return LOOM_OK;
}

#if defined(__x86_64__)
#include <immintrin.h>

#include "ops/vec/vec_exp_avx2.h"
#include "ops/vec/vec_exp_avx512.h"

#define TARGET256 __attribute__((target("avx2,fma")))

/* 8 lanes of gelu, as gelu16 below (loom_exp8 for exp). */
TARGET256 static inline __m256 gelu8(__m256 x, int tanh_form) {
    __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    if (tanh_form) {
        __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608f),
                                 _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), x), _mm256_mul_ps(x, x), x));
        __m256 e = loom_exp8(_mm256_add_ps(u, u));
        __m256 th = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
        return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, th));
    }
    __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678f));
    __m256 sign = _mm256_and_ps(z, _mm256_set1_ps(-0.0f)), a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), z);
    __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), a, one));
    __m256 p = _mm256_set1_ps(1.061405429f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
    p = _mm256_mul_ps(p, t);
    __m256 r = _mm256_fnmadd_ps(p, loom_exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_setzero_ps(), a), a)), one);
    /* erf(z) = sign(z) * r */
    return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, _mm256_or_ps(r, sign)));
}

/* The vector gelu kernels: this thread's rows of contiguous x and y through
 * row(), else the generic kernel. */
static loom_status gelu_rows(const loom_kernel_args *a, void (*row)(const float *, float *, int64_t, int)) {
    const loom_tensor *x = a->src[0], *y = a->dst;
    const loom_gelu_attrs *at = a->attrs;
    int tanh_form = at && at->approximate;
    int last = x->ndim - 1;
    if (x->stride[last] != 1 || y->stride[last] != 1) return loom_gelu_generic(a);
    int64_t lo, hi;
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++)
        row((const float *)x->data + loom_ref_row_offset(x, last, r),
            (float *)y->data + loom_ref_row_offset(y, last, r), x->shape[last], tanh_form);
    return LOOM_OK;
}

/* One row of gelu at AVX2: 8 lanes, the tail through a zero-padded vector. */
TARGET256 static void gelu_row_avx2(const float *xr, float *yr, int64_t D, int tanh_form) {
    int64_t i = 0;
    for (; i + 8 <= D; i += 8) _mm256_storeu_ps(yr + i, gelu8(_mm256_loadu_ps(xr + i), tanh_form));
    if (i < D) {
        float in[8] = {0}, out[8];
        memcpy(in, xr + i, (size_t)(D - i) * sizeof(float));
        _mm256_storeu_ps(out, gelu8(_mm256_loadu_ps(in), tanh_form));
        memcpy(yr + i, out, (size_t)(D - i) * sizeof(float));
    }
}

loom_status loom_gelu_avx2(const loom_kernel_args *a) { return gelu_rows(a, gelu_row_avx2); }

#define TARGET512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

/* 16 lanes of gelu: erf form (A&S 7.1.26) or tanh form (tanh u = 1 - 2/(e^{2u}+1)). */
TARGET512 static inline __m512 gelu16(__m512 x, int tanh_form) {
    __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    if (tanh_form) {
        __m512 u = _mm512_mul_ps(_mm512_set1_ps(0.7978845608f),
                                 _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), x), _mm512_mul_ps(x, x), x));
        __m512 e = loom_exp16(_mm512_add_ps(u, u));
        __m512 th = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
        return _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, th));
    }
    __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678f));
    __m512 a = _mm512_abs_ps(z);
    __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), a, one));
    __m512 p = _mm512_set1_ps(1.061405429f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
    p = _mm512_mul_ps(p, t);
    __m512 r = _mm512_fnmadd_ps(p, loom_exp16(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), a), a)), one);
    /* erf(z) = sign(z) * r */
    __m512i sign = _mm512_and_si512(_mm512_castps_si512(z), _mm512_set1_epi32((int)0x80000000u));
    __m512 erf = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign));
    return _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, erf));
}

/* One row of gelu at AVX-512: 16 lanes, a masked tail. */
TARGET512 static void gelu_row_avx512(const float *xr, float *yr, int64_t D, int tanh_form) {
    int64_t i = 0;
    for (; i + 16 <= D; i += 16) _mm512_storeu_ps(yr + i, gelu16(_mm512_loadu_ps(xr + i), tanh_form));
    if (i < D) {
        __mmask16 m = (__mmask16)((1u << (D - i)) - 1u);
        _mm512_mask_storeu_ps(yr + i, m, gelu16(_mm512_maskz_loadu_ps(m, xr + i), tanh_form));
    }
}

loom_status loom_gelu_avx512(const loom_kernel_args *a) { return gelu_rows(a, gelu_row_avx512); }
#endif
