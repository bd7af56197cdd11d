/* AVX2 + FMA + F16C level of the vectorised ops (semantics in vec.h). Every
 * function carries its own target attribute so the library still runs on any
 * x86-64; the registry only picks these on CPUs that have the features. */
#include "ops/vec/vec.h"

#if defined(__x86_64__)

#include "loom.h"

#include <immintrin.h>
#include <math.h>

#include "ops/vec/vec_exp_avx2.h"

#define TARGET __attribute__((target("avx2,fma,f16c")))

/* Lane mask with the first n (0..8) lanes set, for maskload/maskstore tails. */
TARGET static inline __m256i tail_mask(int64_t n) {
    static const int32_t ramp[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(ramp + 8 - n));
}

TARGET static void add_avx2(const float *a, const float *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++) y[i] = a[i] + b[i];
}

TARGET static void mul_avx2(const float *a, const float *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++) y[i] = a[i] * b[i];
}

/* x / (1 + exp(-x)), or x*exp(x) where exp(-x) would overflow (vec.h) */
TARGET static inline __m256 silu8(__m256 x) {
    __m256 small = _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(LOOM_VEC_SILU_SPLIT), _CMP_LT_OQ),
                                 _mm256_cmp_ps(x, _mm256_set1_ps(LOOM_VEC_EXP_LO), _CMP_GT_OQ));
    __m256 z = _mm256_blendv_ps(_mm256_sub_ps(_mm256_setzero_ps(), x), x, small);
    __m256 n, p = loom_exp_reduce8(z, &n);
    __m256 big = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), loom_scale2_8(p, n)));
    return _mm256_blendv_ps(big, loom_scale2_8(_mm256_mul_ps(x, p), n), small);
}

TARGET static void silu_avx2(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, silu8(_mm256_loadu_ps(x + i)));
    if (i < n) { /* the same arithmetic on the tail: results do not depend on the split */
        __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(y + i, m, silu8(_mm256_maskload_ps(x + i, m)));
    }
}

TARGET static double sumsq_avx2(const float *x, int64_t n) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), hi = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        s0 = _mm256_fmadd_pd(lo, lo, s0); /* the square is exact in double: fma = mul + add */
        s1 = _mm256_fmadd_pd(hi, hi, s1);
    }
    double t[4];
    _mm256_storeu_pd(t, _mm256_add_pd(s0, s1));
    double s = (t[0] + t[1]) + (t[2] + t[3]);
    for (; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

TARGET static void scale_row_avx2(const float *x, const float *g, double inv, float *y, int64_t n) {
    __m256d vi = _mm256_set1_pd(inv);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m256d v = _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), vi);
        if (g) v = _mm256_mul_pd(v, _mm256_cvtps_pd(_mm_loadu_ps(g + i)));
        _mm_storeu_ps(y + i, _mm256_cvtpd_ps(v));
    }
    for (; i < n; i++) {
        double v = (double)x[i] * inv;
        if (g) v *= (double)g[i];
        y[i] = (float)v;
    }
}

/* z = x*scale (+ mask) for 8 lanes: mul then add, as the reference rounds.
 * Whole vectors use plain loads (full = 1, a constant after inlining), the
 * tail maskload: vmaskmov is slow on some CPUs, so only where needed. */
TARGET static inline __m256 logits8(const float *x, const float *mask, __m256 scale, __m256i m,
                                    int full) {
    __m256 z = _mm256_mul_ps(full ? _mm256_loadu_ps(x) : _mm256_maskload_ps(x, m), scale);
    if (mask) z = _mm256_add_ps(z, full ? _mm256_loadu_ps(mask) : _mm256_maskload_ps(mask, m));
    return z;
}

/* Running max of z (tail lanes as -Inf); lanes holding NaN or +Inf, which make
 * the reference's whole row NaN, are or-ed into *bad. */
TARGET static inline __m256 max_block(const float *x, const float *mask, __m256 scale,
                                      __m256 vmax, __m256 *bad, __m256i m, int full) {
    __m256 z = logits8(x, mask, scale, m, full);
    if (!full) z = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), z, _mm256_castsi256_ps(m));
    *bad = _mm256_or_ps(*bad, _mm256_cmp_ps(z, _mm256_set1_ps(INFINITY), _CMP_NLT_UQ));
    return _mm256_max_ps(vmax, z);
}

/* y = exp(z - max); returns the running sum */
TARGET static inline __m256 exp_block(const float *x, const float *mask, float *y, __m256 scale,
                                      __m256 vmax, __m256 sum, __m256i m, int full) {
    __m256 e = loom_exp8(_mm256_sub_ps(logits8(x, mask, scale, m, full), vmax));
    if (full) {
        _mm256_storeu_ps(y, e);
    } else {
        e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(y, m, e);
    }
    return _mm256_add_ps(sum, e);
}

TARGET static void softmax_avx2(const float *x, const float *mask, float *y, int64_t C,
                                int64_t n_valid, float scale) {
    const __m256 vs = _mm256_set1_ps(scale), all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    const __m256i tail = tail_mask(n_valid % 8);
    int64_t body = n_valid - n_valid % 8, j;
    const float *mk = mask ? mask + body : NULL;
    __m256 vmax = _mm256_set1_ps(-INFINITY), bad = _mm256_setzero_ps();
    for (j = 0; j < body; j += 8)
        vmax = max_block(x + j, mask ? mask + j : NULL, vs, vmax, &bad, _mm256_castps_si256(all), 1);
    if (body < n_valid) vmax = max_block(x + body, mk, vs, vmax, &bad, tail, 0);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    float mx = _mm_cvtss_f32(h);
    int any_bad = _mm256_movemask_ps(bad) != 0;
    if (any_bad || mx == -INFINITY) {
        float v = any_bad ? NAN : 0.0f;
        for (j = 0; j + 8 <= C; j += 8) _mm256_storeu_ps(y + j, _mm256_set1_ps(v));
        for (; j < C; j++) y[j] = v;
        return;
    }
    __m256 vm = _mm256_set1_ps(mx), sum = _mm256_setzero_ps();
    for (j = 0; j < body; j += 8)
        sum = exp_block(x + j, mask ? mask + j : NULL, y + j, vs, vm, sum, _mm256_castps_si256(all), 1);
    if (body < n_valid) sum = exp_block(x + body, mk, y + body, vs, vm, sum, tail, 0);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1));
    float inv = 1.0f / _mm_cvtss_f32(s4);
    for (j = 0; j + 8 <= n_valid; j += 8)
        _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_loadu_ps(y + j), _mm256_set1_ps(inv)));
    for (; j < n_valid; j++) y[j] *= inv;
    for (j = n_valid; j < C; j++) y[j] = 0.0f;
}

TARGET static void rope_interleaved_avx2(const float *x, float *y, const float *c2,
                                         const float *s2, int64_t n_rot) {
    int64_t i = 0;
    for (; i + 8 <= n_rot; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 sw = _mm256_permute_ps(v, 0xB1); /* (v1, v0) in each pair */
        __m256 t1 = _mm256_mul_ps(v, _mm256_loadu_ps(c2 + i));
        __m256 t2 = _mm256_mul_ps(sw, _mm256_loadu_ps(s2 + i));
        /* even lanes v0*c - v1*s, odd lanes v1*c + v0*s: no FMA, as the reference */
        _mm256_storeu_ps(y + i, _mm256_addsub_ps(t1, t2));
    }
    for (; i < n_rot; i += 2) {
        float v0 = x[i], v1 = x[i + 1];
        y[i] = v0 * c2[i] - v1 * s2[i];
        y[i + 1] = v0 * s2[i] + v1 * c2[i];
    }
}

TARGET static void rope_half_avx2(const float *x, float *y, const float *c, const float *s,
                                  int64_t half) {
    int64_t i = 0;
    for (; i + 8 <= half; i += 8) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + half);
        __m256 vc = _mm256_loadu_ps(c + i), vs = _mm256_loadu_ps(s + i);
        __m256 y0 = _mm256_sub_ps(_mm256_mul_ps(v0, vc), _mm256_mul_ps(v1, vs));
        __m256 y1 = _mm256_add_ps(_mm256_mul_ps(v0, vs), _mm256_mul_ps(v1, vc));
        _mm256_storeu_ps(y + i, y0);
        _mm256_storeu_ps(y + i + half, y1);
    }
    for (; i < half; i++) {
        float v0 = x[i], v1 = x[i + half];
        y[i] = v0 * c[i] - v1 * s[i];
        y[i + half] = v0 * s[i] + v1 * c[i];
    }
}

/* vcvtph2ps quiets a signalling NaN and converts subnormals exactly, as loom_f16_to_f32 */
TARGET static void f16_to_f32_avx2(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = loom_f16_to_f32(x[i]);
}

/* vcvtps2ph with round-to-nearest-even; NaN keeps sign and top payload, quiet bit set */
TARGET static void f32_to_f16_avx2(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = loom_f32_to_f16(x[i]);
}

TARGET static void bf16_to_f32_avx2(const uint16_t *x, float *y, int64_t n) {
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x400000);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i))), 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, abs), inf);
        v = _mm256_or_si256(v, _mm256_and_si256(nan, quiet));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(v));
    }
    for (; i < n; i++) y[i] = loom_bf16_to_f32(x[i]);
}

/* Round to nearest even on the bit pattern; NaN becomes (x >> 16) | quiet bit */
TARGET static void f32_to_bf16_avx2(const float *x, uint16_t *y, int64_t n) {
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i one = _mm256_set1_epi32(1), round = _mm256_set1_epi32(0x7fff);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int k = 0; k < 2; k++) {
            __m256i v = _mm256_castps_si256(_mm256_loadu_ps(x + i + 8 * k));
            __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, abs), inf);
            __m256i odd = _mm256_and_si256(_mm256_srli_epi32(v, 16), one);
            __m256i rn = _mm256_srli_epi32(_mm256_add_epi32(v, _mm256_add_epi32(round, odd)), 16);
            __m256i qn = _mm256_or_si256(_mm256_srli_epi32(v, 16), quiet);
            r[k] = _mm256_blendv_epi8(rn, qn, nan);
        }
        /* packus works per 128-bit lane: reorder the 64-bit quarters afterwards */
        __m256i p = _mm256_packus_epi32(r[0], r[1]);
        _mm256_storeu_si256((__m256i *)(y + i), _mm256_permute4x64_epi64(p, 0xD8));
    }
    for (; i < n; i++) y[i] = loom_f32_to_bf16(x[i]);
}

const loom_vec_fns loom_vec_avx2 = {
    .add = add_avx2,
    .mul = mul_avx2,
    .silu = silu_avx2,
    .sumsq = sumsq_avx2,
    .scale_row = scale_row_avx2,
    .softmax = softmax_avx2,
    .rope_interleaved = rope_interleaved_avx2,
    .rope_half = rope_half_avx2,
    .f16_to_f32 = f16_to_f32_avx2,
    .f32_to_f16 = f32_to_f16_avx2,
    .bf16_to_f32 = bf16_to_f32_avx2,
    .f32_to_bf16 = f32_to_bf16_avx2,
};

#endif /* __x86_64__ */
