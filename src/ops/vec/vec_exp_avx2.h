/* exp on 8 f32 lanes (AVX2 + FMA): vec.h's range reduction and Taylor
 * polynomial, shared by the vectorised ops (vec_avx2.c) and the encoder ops
 * (vec_encoder.c) so both compute the same bits. */
#ifndef LOOM_OPS_VEC_EXP_AVX2_H
#define LOOM_OPS_VEC_EXP_AVX2_H

#if defined(__x86_64__)
#include <immintrin.h>

#include "ops/vec/vec.h"

#define LOOM_VEC_EXP8_TARGET __attribute__((target("avx2,fma")))

/* Range reduction and polynomial of exp (vec.h): returns p ~ exp(r) and sets
 * *n (integer-valued) with exp(x) = p * 2^n. NaN lanes give finite values:
 * callers propagate NaN themselves. */
LOOM_VEC_EXP8_TARGET static inline __m256 loom_exp_reduce8(__m256 x, __m256 *n) {
    x = _mm256_max_ps(x, _mm256_set1_ps(LOOM_VEC_EXP_LO));
    x = _mm256_min_ps(x, _mm256_set1_ps(LOOM_VEC_EXP_HI));
    *n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOOM_VEC_LOG2E)),
                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(LOOM_VEC_LN2_HI), x);
    r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(LOOM_VEC_LN2_LO), r);
    __m256 p = _mm256_set1_ps(LOOM_VEC_EXP_C7);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LOOM_VEC_EXP_C6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LOOM_VEC_EXP_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LOOM_VEC_EXP_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LOOM_VEC_EXP_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LOOM_VEC_EXP_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    return _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
}

/* v * 2^n for n in [-159, 129]: two factors with normal exponents, so a
 * subnormal result rounds once and 2^128 overflows to Inf. */
LOOM_VEC_EXP8_TARGET static inline __m256 loom_scale2_8(__m256 v, __m256 n) {
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(v, s1), s2);
}

LOOM_VEC_EXP8_TARGET static inline __m256 loom_exp8(__m256 x) {
    __m256 n, p = loom_exp_reduce8(x, &n);
    return loom_scale2_8(p, n);
}
#endif

#endif
