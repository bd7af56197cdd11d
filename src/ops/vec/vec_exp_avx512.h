/* exp on 16 f32 lanes (AVX-512): vec.h's range reduction and Taylor
 * polynomial, shared by the vectorised ops (vec_avx512.c) and the encoder
 * ops (vec_encoder.c) so both compute the same bits. */
#ifndef LOOM_OPS_VEC_EXP_AVX512_H
#define LOOM_OPS_VEC_EXP_AVX512_H

#if defined(__x86_64__)
#include <immintrin.h>

#include "ops/vec/vec.h"

#define LOOM_VEC_EXP_TARGET __attribute__((target("avx512f,fma")))

/* Range reduction and polynomial of exp (vec.h): returns p ~ exp(r) and sets
 * *n (integer-valued) with exp(x) = p * 2^n. NaN lanes give finite values:
 * callers propagate NaN themselves. */
LOOM_VEC_EXP_TARGET static inline __m512 loom_exp_reduce16(__m512 x, __m512 *n) {
    x = _mm512_max_ps(x, _mm512_set1_ps(LOOM_VEC_EXP_LO));
    x = _mm512_min_ps(x, _mm512_set1_ps(LOOM_VEC_EXP_HI));
    *n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOOM_VEC_LOG2E)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(LOOM_VEC_LN2_HI), x);
    r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(LOOM_VEC_LN2_LO), r);
    __m512 p = _mm512_set1_ps(LOOM_VEC_EXP_C7);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LOOM_VEC_EXP_C6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LOOM_VEC_EXP_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LOOM_VEC_EXP_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LOOM_VEC_EXP_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LOOM_VEC_EXP_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
}

/* scalef applies 2^n with one rounding, subnormals and overflow included */
LOOM_VEC_EXP_TARGET static inline __m512 loom_exp16(__m512 x) {
    __m512 n, p = loom_exp_reduce16(x, &n);
    return _mm512_scalef_ps(p, n);
}
#endif

#endif
