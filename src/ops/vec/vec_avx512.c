/* AVX-512 (F/BW/VL) level of the vectorised ops (semantics in vec.h). Tails
 * use mask registers, so a tail element goes through exactly the arithmetic of
 * the body. Per-function target attributes keep the library runnable on any
 * x86-64; only F/BW/VL (+FMA/F16C) are used, the set loom_cpu_isa() checks. */
#include "ops/vec/vec.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <math.h>

#include "ops/vec/vec_exp_avx512.h"

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

static inline __mmask16 first_n(int64_t n) { return (__mmask16)((1u << n) - 1u); }
static inline __mmask8 first_n8(int64_t n) { return (__mmask8)((1u << n) - 1u); }

TARGET static void add_avx512(const float *a, const float *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    if (i < n) {
        __mmask16 m = first_n(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i),
                                                      _mm512_maskz_loadu_ps(m, b + i)));
    }
}

TARGET static void mul_avx512(const float *a, const float *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    if (i < n) {
        __mmask16 m = first_n(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + i),
                                                      _mm512_maskz_loadu_ps(m, b + i)));
    }
}

/* x / (1 + exp(-x)), or x*exp(x) where exp(-x) would overflow (vec.h) */
TARGET static inline __m512 silu16(__m512 x) {
    __mmask16 small = _mm512_cmp_ps_mask(x, _mm512_set1_ps(LOOM_VEC_SILU_SPLIT), _CMP_LT_OQ) &
                      _mm512_cmp_ps_mask(x, _mm512_set1_ps(LOOM_VEC_EXP_LO), _CMP_GT_OQ);
    __m512 z = _mm512_mask_blend_ps(small, _mm512_sub_ps(_mm512_setzero_ps(), x), x);
    __m512 n, p = loom_exp_reduce16(z, &n);
    __m512 big = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_scalef_ps(p, n)));
    return _mm512_mask_blend_ps(small, big, _mm512_scalef_ps(_mm512_mul_ps(x, p), n));
}

TARGET static void silu_avx512(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, silu16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = first_n(n - i);
        _mm512_mask_storeu_ps(y + i, m, silu16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

TARGET static double sumsq_avx512(const float *x, int64_t n) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    __m512d s2 = _mm512_setzero_pd(), s3 = _mm512_setzero_pd();
    int64_t i = 0;
    /* four accumulators hide the FMA latency; each square is exact in double */
    for (; i + 32 <= n; i += 32) {
        __m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        __m512d b = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
        __m512d c = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 16));
        __m512d d = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 24));
        s0 = _mm512_fmadd_pd(a, a, s0);
        s1 = _mm512_fmadd_pd(b, b, s1);
        s2 = _mm512_fmadd_pd(c, c, s2);
        s3 = _mm512_fmadd_pd(d, d, s3);
    }
    for (; i < n; i += 8) {
        __m512d a = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(n - i >= 8 ? 0xff : first_n8(n - i), x + i));
        s0 = _mm512_fmadd_pd(a, a, s0);
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(s0, s1), _mm512_add_pd(s2, s3)));
}

TARGET static inline __m256 scale8(__m256 x, const float *g, __mmask8 m, __m512d inv) {
    __m512d v = _mm512_mul_pd(_mm512_cvtps_pd(x), inv);
    if (g) v = _mm512_mul_pd(v, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, g)));
    return _mm512_cvtpd_ps(v);
}

TARGET static void scale_row_avx512(const float *x, const float *g, double inv, float *y,
                                    int64_t n) {
    __m512d vi = _mm512_set1_pd(inv);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, scale8(_mm256_loadu_ps(x + i), g ? g + i : NULL, 0xff, vi));
    if (i < n) {
        __mmask8 m = first_n8(n - i);
        _mm256_mask_storeu_ps(y + i, m,
                              scale8(_mm256_maskz_loadu_ps(m, x + i), g ? g + i : NULL, m, vi));
    }
}

/* Loads and stores of 16 lanes: plain in loop bodies (full is a constant
 * there after inlining), masked on tails. Masked loads with an all-ones mask
 * measured slower than plain ones on Zen 5. */
TARGET static inline __m512 load16(const float *p, __mmask16 m, int full) {
    return full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

TARGET static inline void store16(float *p, __mmask16 m, int full, __m512 v) {
    if (full)
        _mm512_storeu_ps(p, v);
    else
        _mm512_mask_storeu_ps(p, m, v);
}

TARGET static inline __m256i load16h(const uint16_t *p, __mmask16 m, int full) {
    return full ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(m, p);
}

TARGET static inline void store16h(uint16_t *p, __mmask16 m, int full, __m256i v) {
    if (full)
        _mm256_storeu_si256((__m256i *)p, v);
    else
        _mm256_mask_storeu_epi16(p, m, v);
}

/* Each loop below runs a block function on whole vectors (full = 1, a
 * constant after inlining) and once more on the masked tail. */

/* z = x*scale (+ mask): mul then add, as the reference rounds */
TARGET static inline __m512 logits16(const float *x, const float *mask, __m512 scale,
                                     __mmask16 m, int full) {
    __m512 z = _mm512_mul_ps(load16(x, m, full), scale);
    if (mask) z = _mm512_add_ps(z, load16(mask, m, full));
    return z;
}

/* Running max of z, and in *bad the lanes holding NaN or +Inf (which make
 * the reference's whole row NaN). */
TARGET static inline __m512 max_block(const float *x, const float *mask, __m512 scale,
                                      __m512 vmax, __mmask16 *bad, __mmask16 m, int full) {
    __m512 z = logits16(x, mask, scale, m, full);
    *bad |= _mm512_mask_cmp_ps_mask(m, z, _mm512_set1_ps(INFINITY), _CMP_NLT_UQ);
    return _mm512_mask_max_ps(vmax, m, vmax, z);
}

/* y = exp(z - max); returns the running sum */
TARGET static inline __m512 exp_block(const float *x, const float *mask, float *y, __m512 scale,
                                      __m512 vmax, __m512 sum, __mmask16 m, int full) {
    __m512 e = loom_exp16(_mm512_sub_ps(logits16(x, mask, scale, m, full), vmax));
    store16(y, m, full, e);
    return _mm512_mask_add_ps(sum, m, sum, e);
}

TARGET static void softmax_avx512(const float *x, const float *mask, float *y, int64_t C,
                                  int64_t n_valid, float scale) {
    const __m512 vs = _mm512_set1_ps(scale);
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    __mmask16 bad = 0, tail = first_n(n_valid % 16);
    int64_t body = n_valid - n_valid % 16, j;
    const float *mk = mask ? mask + body : NULL;
    for (j = 0; j < body; j += 16)
        vmax = max_block(x + j, mask ? mask + j : NULL, vs, vmax, &bad, 0xffff, 1);
    if (tail) vmax = max_block(x + body, mk, vs, vmax, &bad, tail, 0);
    float mx = _mm512_reduce_max_ps(vmax);
    if (bad || mx == -INFINITY) {
        __m512 v = _mm512_set1_ps(bad ? NAN : 0.0f);
        for (j = 0; j + 16 <= C; j += 16) _mm512_storeu_ps(y + j, v);
        if (j < C) _mm512_mask_storeu_ps(y + j, first_n(C - j), v);
        return;
    }
    __m512 vm = _mm512_set1_ps(mx), sum = _mm512_setzero_ps();
    for (j = 0; j < body; j += 16)
        sum = exp_block(x + j, mask ? mask + j : NULL, y + j, vs, vm, sum, 0xffff, 1);
    if (tail) sum = exp_block(x + body, mk, y + body, vs, vm, sum, tail, 0);
    __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (j = 0; j < body; j += 16) _mm512_storeu_ps(y + j, _mm512_mul_ps(_mm512_loadu_ps(y + j), inv));
    if (tail)
        _mm512_mask_storeu_ps(y + body, tail,
                              _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, y + body), inv));
    /* causally masked columns */
    for (j = n_valid; j + 16 <= C; j += 16) _mm512_storeu_ps(y + j, _mm512_setzero_ps());
    if (j < C) _mm512_mask_storeu_ps(y + j, first_n(C - j), _mm512_setzero_ps());
}

/* even lanes v0*c - v1*s, odd lanes v1*c + v0*s: no FMA, as the reference */
TARGET static inline void rot_block(const float *x, float *y, const float *c2, const float *s2,
                                    __mmask16 m, int full) {
    __m512 v = load16(x, m, full);
    __m512 sw = _mm512_permute_ps(v, 0xB1); /* (v1, v0) in each pair */
    __m512 t1 = _mm512_mul_ps(v, load16(c2, m, full)), t2 = _mm512_mul_ps(sw, load16(s2, m, full));
    store16(y, m, full, _mm512_mask_sub_ps(_mm512_add_ps(t1, t2), 0x5555, t1, t2));
}

TARGET static void rope_interleaved_avx512(const float *x, float *y, const float *c2,
                                           const float *s2, int64_t n_rot) {
    int64_t i = 0;
    for (; i + 16 <= n_rot; i += 16) rot_block(x + i, y + i, c2 + i, s2 + i, 0xffff, 1);
    if (i < n_rot) rot_block(x + i, y + i, c2 + i, s2 + i, first_n(n_rot - i), 0);
}

TARGET static inline void half_block(const float *x, float *y, const float *c, const float *s,
                                     int64_t half, __mmask16 m, int full) {
    __m512 v0 = load16(x, m, full), v1 = load16(x + half, m, full);
    __m512 vc = load16(c, m, full), vs = load16(s, m, full);
    store16(y, m, full, _mm512_sub_ps(_mm512_mul_ps(v0, vc), _mm512_mul_ps(v1, vs)));
    store16(y + half, m, full, _mm512_add_ps(_mm512_mul_ps(v0, vs), _mm512_mul_ps(v1, vc)));
}

TARGET static void rope_half_avx512(const float *x, float *y, const float *c, const float *s,
                                    int64_t half) {
    int64_t i = 0;
    for (; i + 16 <= half; i += 16) half_block(x + i, y + i, c + i, s + i, half, 0xffff, 1);
    if (i < half) half_block(x + i, y + i, c + i, s + i, half, first_n(half - i), 0);
}

/* vcvtph2ps quiets a signalling NaN and converts subnormals exactly, as loom_f16_to_f32 */
TARGET static void f16_to_f32_avx512(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) store16(y + i, 0xffff, 1, _mm512_cvtph_ps(load16h(x + i, 0xffff, 1)));
    if (i < n) {
        __mmask16 m = first_n(n - i);
        store16(y + i, m, 0, _mm512_cvtph_ps(load16h(x + i, m, 0)));
    }
}

/* vcvtps2ph with round-to-nearest-even; NaN keeps sign and top payload, quiet bit set */
TARGET static inline __m256i f16_narrow(__m512 v) {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

TARGET static void f32_to_f16_avx512(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) store16h(y + i, 0xffff, 1, f16_narrow(load16(x + i, 0xffff, 1)));
    if (i < n) {
        __mmask16 m = first_n(n - i);
        store16h(y + i, m, 0, f16_narrow(load16(x + i, m, 0)));
    }
}

TARGET static inline __m512 bf16_widen(__m256i h) {
    __m512i v = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(v, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    return _mm512_castsi512_ps(_mm512_mask_or_epi32(v, nan, v, _mm512_set1_epi32(0x400000)));
}

TARGET static void bf16_to_f32_avx512(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) store16(y + i, 0xffff, 1, bf16_widen(load16h(x + i, 0xffff, 1)));
    if (i < n) {
        __mmask16 m = first_n(n - i);
        store16(y + i, m, 0, bf16_widen(load16h(x + i, m, 0)));
    }
}

/* Round to nearest even on the bit pattern; NaN becomes (x >> 16) | quiet bit */
TARGET static inline __m256i bf16_narrow(__m512 f) {
    __m512i v = _mm512_castps_si512(f);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(v, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __m512i hi = _mm512_srli_epi32(v, 16);
    __m512i odd = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i rn = _mm512_srli_epi32(
        _mm512_add_epi32(v, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
    return _mm512_cvtepi32_epi16(_mm512_mask_or_epi32(rn, nan, hi, _mm512_set1_epi32(0x40)));
}

TARGET static void f32_to_bf16_avx512(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) store16h(y + i, 0xffff, 1, bf16_narrow(load16(x + i, 0xffff, 1)));
    if (i < n) {
        __mmask16 m = first_n(n - i);
        store16h(y + i, m, 0, bf16_narrow(load16(x + i, m, 0)));
    }
}

const loom_vec_fns loom_vec_avx512 = {
    .add = add_avx512,
    .mul = mul_avx512,
    .silu = silu_avx512,
    .sumsq = sumsq_avx512,
    .scale_row = scale_row_avx512,
    .softmax = softmax_avx512,
    .rope_interleaved = rope_interleaved_avx512,
    .rope_half = rope_half_avx512,
    .f16_to_f32 = f16_to_f32_avx512,
    .f32_to_f16 = f32_to_f16_avx512,
    .bf16_to_f32 = bf16_to_f32_avx512,
    .f32_to_bf16 = f32_to_bf16_avx512,
};

#endif /* __x86_64__ */
