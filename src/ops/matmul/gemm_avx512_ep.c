/*
 * AVX-512 tile epilogue: scale, bias, activation, mul, residual on 16 columns
 * at a time, in the reference order. The activations use polynomial exp/erf
 * (abs error ~1e-7, far inside the f32 tolerance 2^-11) and keep the
 * reference's NaN/Inf behaviour: NaN in gives NaN out (relu gives 0, as the
 * reference's x > 0 ? x : 0 does), silu(-inf) and gelu(-inf) are NaN.
 */
#include "ops/matmul/gemm_kernels.h"

#if defined(__x86_64__)
#include "ops/matmul/gemm_x86.h"

#define V(x) _mm512_set1_ps(x)

/* e^x: x = n ln2 + r, |r| <= ln2/2, degree-6 Taylor polynomial (rel err
 * 1.2e-7), scaled by 2^n with vscalefps, which overflows to inf and
 * underflows to 0 like expf. min/max take x second so a NaN passes through. */
LOOM_TARGET_AVX512 static inline __m512 exp16(__m512 x) {
    x = _mm512_max_ps(V(-104.0f), _mm512_min_ps(V(89.0f), x));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, V(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, V(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, V(1.428606765330187e-06f), r);
    __m512 p = V(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, V(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, V(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, V(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, V(0.5f));
    p = _mm512_fmadd_ps(p, r, V(1.0f));
    p = _mm512_fmadd_ps(p, r, V(1.0f));
    return _mm512_scalef_ps(p, n);
}

LOOM_TARGET_AVX512 static inline __m512 abs16(__m512 x) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
}

/* sign of s applied to |m| (m >= 0) */
LOOM_TARGET_AVX512 static inline __m512 copysign16(__m512 m, __m512 s) {
    __m512i sign = _mm512_and_si512(_mm512_castps_si512(s), _mm512_set1_epi32((int)0x80000000u));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(m), sign));
}

/* erf, Abramowitz & Stegun 7.1.26 (abs err 1.5e-7); exactly +-1 at +-inf. */
LOOM_TARGET_AVX512 static inline __m512 erf16(__m512 z) {
    __m512 a = abs16(z);
    __m512 t = _mm512_div_ps(V(1.0f), _mm512_fmadd_ps(a, V(0.3275911f), V(1.0f)));
    __m512 p = V(1.061405429f);
    p = _mm512_fmadd_ps(p, t, V(-1.453152027f));
    p = _mm512_fmadd_ps(p, t, V(1.421413741f));
    p = _mm512_fmadd_ps(p, t, V(-0.284496736f));
    p = _mm512_fmadd_ps(p, t, V(0.254829592f));
    p = _mm512_mul_ps(p, t);
    __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(a, a)));
    return copysign16(_mm512_fnmadd_ps(p, e, V(1.0f)), z);
}

/* tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2|u|): no overflow, +-1 at +-inf. */
LOOM_TARGET_AVX512 static inline __m512 tanh16(__m512 u) {
    __m512 e = exp16(_mm512_mul_ps(abs16(u), V(-2.0f)));
    return copysign16(_mm512_div_ps(_mm512_sub_ps(V(1.0f), e), _mm512_add_ps(V(1.0f), e)), u);
}

LOOM_TARGET_AVX512 static inline __m512 act16(loom_act act, __m512 x) {
    switch (act) {
    case LOOM_ACT_SILU:
        return _mm512_div_ps(x, _mm512_add_ps(V(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    case LOOM_ACT_GELU:
        return _mm512_mul_ps(_mm512_mul_ps(V(0.5f), x),
                             _mm512_add_ps(V(1.0f), erf16(_mm512_mul_ps(x, V(0.70710678118654752f)))));
    case LOOM_ACT_GELU_TANH: {
        __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(V(0.044715f), x), x), x);
        __m512 u = _mm512_mul_ps(V(0.79788456080286536f), _mm512_add_ps(x, x3));
        return _mm512_mul_ps(_mm512_mul_ps(V(0.5f), x), _mm512_add_ps(V(1.0f), tanh16(u)));
    }
    case LOOM_ACT_RELU: return _mm512_max_ps(x, _mm512_setzero_ps()); /* NaN -> 0, as the reference */
    default: return x;
    }
}

LOOM_TARGET_AVX512 void loom_gemm_tile_ep_avx512(const loom_gemm_tile_ep *t) {
    const __m512 scale = V(t->scale);
    for (int c = 0; c < t->cols; c += 16) {
        __mmask16 m = (__mmask16)loom_mask16(t->cols - c);
        __m512 bias = t->bias ? _mm512_maskz_loadu_ps(m, t->bias + c) : _mm512_setzero_ps();
        for (int r = 0; r < t->rows; r++) {
            float *p = t->tile + r * t->ld + c;
            __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p), scale);
            if (t->bias) v = _mm512_add_ps(v, bias);
            v = act16(t->act, v);
            if (t->mul) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, t->mul + r * t->ld_mul + c));
            if (t->res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, t->res + r * t->ld_res + c));
            _mm512_mask_storeu_ps(p, m, v);
        }
    }
}

#else
typedef int loom_gemm_avx512_ep_unused; /* ISO C: no empty translation unit */
#endif
