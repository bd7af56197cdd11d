/* Vector helpers shared by the AVX2 / AVX-512 attention kernels: exp2, dtype
 * loads, and the transpose-reductions of the decode dot products. Each function
 * carries its own target attribute (no global -m flags). */
#ifndef LOOM_FUSED_FLASH_ATTENTION_SIMD_H
#define LOOM_FUSED_FLASH_ATTENTION_SIMD_H

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "fused/flash_attention_internal.h"
#include "loom.h"

#define ATTN_T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define ATTN_T512BF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
#define ATTN_T256 __attribute__((target("avx2,fma,f16c")))
#define ATTN_INLINE static inline __attribute__((always_inline))

/* Line byte_off of the row ahead bytes further on in memory (ahead 0: none).
 * The address is formed as an integer: it may lie past the cache's end, where
 * a prefetch is harmless but pointer arithmetic would not be valid C. */
static inline __attribute__((always_inline)) void attn_dec_prefetch(const void *row, int64_t byte_off,
                                                                    int64_t ahead) {
    if (ahead) _mm_prefetch((const char *)((uintptr_t)row + (uintptr_t)(byte_off + ahead)), LOOM_PF_STREAM);
}

/* The distance of a kernel call's own prefetch: pf's, ATTN_DEC_PF_DIST when the
 * caller gives no pf (the kernels' entry points read it once). */
static inline int64_t attn_dec_ahead(const attn_dec_pf *pf) { return pf ? pf->ahead : ATTN_DEC_PF_DIST; }

/* Calls F(args..., ahead) with the prefetch distance as a constant, DIST where pf
 * asks for one (one inlined copy of F per distance, so it folds into the loops):
 * the entry points' dispatch. ATTN_DEC_WITH_AHEAD: at ATTN_DEC_PF_DIST. */
#define ATTN_DEC_WITH_AHEAD_AT(pf, DIST, F, ...) \
    do {                                         \
        if (attn_dec_ahead(pf)) F(__VA_ARGS__, DIST); \
        else F(__VA_ARGS__, 0);                  \
    } while (0)
#define ATTN_DEC_WITH_AHEAD(pf, F, ...) ATTN_DEC_WITH_AHEAD_AT(pf, ATTN_DEC_PF_DIST, F, __VA_ARGS__)
/* CALL(RB, AHEAD) with RB = nr (1..4) and the prefetch distance as constants:
 * the dispatch of the i8 P.V entry points, an expression. */
#define ATTN_DEC_BY_RB(nr, CALL, A) \
    ((nr) == 4 ? CALL(4, A) : (nr) == 3 ? CALL(3, A) : (nr) == 2 ? CALL(2, A) : CALL(1, A))
#define ATTN_DEC_BY_RB_AHEAD(nr, pf, CALL) \
    (attn_dec_ahead(pf) ? ATTN_DEC_BY_RB(nr, CALL, ATTN_DEC_PF_DIST) : ATTN_DEC_BY_RB(nr, CALL, 0))

/* Every line of row c of the other stream (attn_dec_pf), if there is one, and
 * of row c of the own stream's next tile (paged caches). */
ATTN_INLINE void attn_dec_pf_row(const attn_dec_pf *pf, int c) {
    if (!pf) return;
    if (c < pf->n)
        for (int64_t off = 0; off < pf->bytes; off += 64)
            _mm_prefetch((const char *)pf->rows[c] + off, LOOM_PF_STREAM);
    if (pf->own && c < pf->own_n)
        for (int64_t off = 0; off < pf->own_bytes; off += 64)
            _mm_prefetch((const char *)pf->own[c] + off, LOOM_PF_STREAM);
}

/* 2^x for x <= 0; -inf gives exactly 0, NaN stays NaN (max keeps its 2nd operand). */
ATTN_INLINE ATTN_T512 __m512 attn_exp2_512(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-150.0f), x);
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(ATTN_EXP2_C6);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ATTN_EXP2_C5));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ATTN_EXP2_C4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ATTN_EXP2_C3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ATTN_EXP2_C2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ATTN_EXP2_C1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n); /* 2^-150 * p rounds to 0 */
}

/* As above; below -127 the result is exactly 0 (the exponent field becomes 0). */
ATTN_INLINE ATTN_T256 __m256 attn_exp2_256(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(-127.0f), x);
    __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(ATTN_EXP2_C6);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(ATTN_EXP2_C5));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(ATTN_EXP2_C4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(ATTN_EXP2_C3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(ATTN_EXP2_C2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(ATTN_EXP2_C1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* 16 elements of dtype dt (f32/f16/bf16/i8) at element x of row p, as f32;
 * lanes outside mask k are 0 and their memory is not touched. */
ATTN_INLINE ATTN_T512 __m512 attn_load16(const void *p, int64_t x, loom_dtype dt, __mmask16 k) {
    switch (dt) {
    case LOOM_F32: return _mm512_maskz_loadu_ps(k, (const float *)p + x);
    case LOOM_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)p + x));
    case LOOM_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)p + x)), 16));
    default:
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, (const int8_t *)p + x)));
    }
}

/* The sum (max) of the 8 lanes of v. */
ATTN_INLINE ATTN_T256 float attn_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

ATTN_INLINE ATTN_T256 float attn_hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* 8 elements as f32; n < 8 loads only n (the rest 0) through a bounce buffer. */
ATTN_INLINE ATTN_T256 __m256 attn_load8(const void *p, int64_t x, loom_dtype dt, int n) {
    unsigned char tmp[32];
    int64_t es = dt == LOOM_F32 ? 4 : dt == LOOM_I8 ? 1 : 2;
    const unsigned char *src = (const unsigned char *)p + x * es;
    if (n < 8) {
        memset(tmp, 0, sizeof tmp);
        memcpy(tmp, src, (size_t)(n * es));
        src = tmp;
    }
    switch (dt) {
    case LOOM_F32: return _mm256_loadu_ps((const float *)src);
    case LOOM_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)src));
    case LOOM_BF16:
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)src)), 16));
    default: {
        long long v;
        memcpy(&v, src, 8);
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(v)));
    }
    }
}

/* Lane j of the result = sum of the lanes of acc[j], j < 16. The in-lane
 * levels come first (unpacks of 32- then 64-bit elements: 24 of them), the
 * cross-lane ones last (6 128-bit shuffles): on Zen 4 a zmm cross-lane shuffle
 * takes the one port the K conversions also need, while in-lane unpacks
 * issue elsewhere (24 cross-lane + 6 in-lane before: the i8 Q.K^T went 7.85 ->
 * 7.35 ns per key, bf16hp 7.13 -> 6.82). After the unpacks, 128-bit block b of u[k]
 * holds block b's sums of acc[4k .. 4k+3]; the shuffles add the blocks. */
ATTN_INLINE ATTN_T512 __m512 attn_reduce16_acc(const __m512 *acc) {
    __m512 t[8], u[4], w[2];
    for (int k = 0; k < 8; k++) /* per block: a0+a2, b0+b2, a1+a3, b1+b3 of (acc[2k], acc[2k+1]) */
        t[k] = _mm512_add_ps(_mm512_unpacklo_ps(acc[2 * k], acc[2 * k + 1]),
                             _mm512_unpackhi_ps(acc[2 * k], acc[2 * k + 1]));
    for (int k = 0; k < 4; k++) {
        __m512d a = _mm512_castps_pd(t[2 * k]), b = _mm512_castps_pd(t[2 * k + 1]);
        u[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    for (int k = 0; k < 2; k++) /* blocks: u[2k] b0+b2, b1+b3, u[2k+1] b0+b2, b1+b3 */
        w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], 0x44),
                             _mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], 0x88), _mm512_shuffle_f32x4(w[0], w[1], 0xDD));
}

/* attn_reduce16_acc on 32-bit integers (exact): the same shuffles, integer adds. */
ATTN_INLINE ATTN_T512 __m512i attn_reduce16_epi32(const __m512i *acc) {
    __m512i t[8], u[4], w[2];
    for (int k = 0; k < 8; k++)
        t[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(acc[2 * k], acc[2 * k + 1]),
                                _mm512_unpackhi_epi32(acc[2 * k], acc[2 * k + 1]));
    for (int k = 0; k < 4; k++)
        u[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * k], t[2 * k + 1]),
                                _mm512_unpackhi_epi64(t[2 * k], t[2 * k + 1]));
    for (int k = 0; k < 2; k++)
        w[k] = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2 * k], u[2 * k + 1], 0x44),
                                _mm512_shuffle_i32x4(u[2 * k], u[2 * k + 1], 0xEE));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(w[0], w[1], 0x88), _mm512_shuffle_i32x4(w[0], w[1], 0xDD));
}

/* Lane j = sum of acc[j], where the caller passes a[2t + L] = acc[4L + t]. */
ATTN_INLINE ATTN_T256 __m256 attn_reduce8(const __m256 *a) {
    __m256 w[4], y[2];
    for (int k = 0; k < 4; k++)
        w[k] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x31));
    for (int k = 0; k < 2; k++)
        y[k] = _mm256_add_ps(_mm256_unpacklo_ps(w[2 * k], w[2 * k + 1]),
                             _mm256_unpackhi_ps(w[2 * k], w[2 * k + 1]));
    return _mm256_add_ps(_mm256_shuffle_ps(y[0], y[1], 0x44), _mm256_shuffle_ps(y[0], y[1], 0xEE));
}

#endif /* __x86_64__ */
#endif
