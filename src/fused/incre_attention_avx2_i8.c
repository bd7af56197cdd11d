/* AVX2 decode kernels for i8 caches in 16-bit integer arithmetic (vpmaddwd:
 * 16 products in pairs per instruction, summed exactly in 32-bit lanes), the
 * AVX2 form of incre_attention_avx512_i8.c. Widening every K and V element to
 * f32 cost a conversion per element on top of the FMAs, and an i8 cache is
 * compute-bound. Head dims that are multiples of 16, up to 256.
 *
 * Q.K^T: each q row (its per-channel K scales folded in) is rounded once per
 * (batch, kv head) to 16-bit integers against its own max, q ~ sq * qi with
 * |qi| <= 32767 (error <= 2^-16 of the row's largest element), the values the
 * AVX-512 level gets; K is sign-extended to 16 bits. A score's sum is at most
 * 256 * 2^15 * 2^7 = 2^30: exact in 32 bits, converted once.
 *
 * P.V: each row's probabilities in the tile are rounded to 16-bit integers
 * against the row's largest |p| (error <= 2^-16 of it per probability; a row
 * whose errors add up to more than ATTN_DEC_PQ_ERR of its sum takes the
 * widening kernel), V is sign-extended and two keys' values interleaved, so
 * one vpmaddwd multiplies a key pair; the tile's sums (at most
 * ATTN_DEC_TILE_MAX products of <= 2^15 * 2^7 per lane) are converted and
 * scaled once. */
#include "fused/flash_attention_internal.h"

#if defined(__x86_64__)
#include <float.h>

#include "fused/flash_attention_simd.h"

#define DEC_I8_D(d) ((d) % 16 == 0 && (d) >= 16 && (d) <= 256)

/* The largest |x[i]| of n floats into *m (and the sum of the |x[i]| into *sum,
 * if given); 0 if some x[i] is inf or NaN. */
ATTN_INLINE ATTN_T256 int absmax_finite(const float *x, int n, float *m, float *sum) {
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), big = _mm256_set1_ps(FLT_MAX);
    __m256 mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps(), s = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) {
        __m256 a = _mm256_and_ps(attn_load8(x, i, LOOM_F32, n - i < 8 ? n - i : 8), abs);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ));
        mx = _mm256_max_ps(mx, a);
        s = _mm256_add_ps(s, a);
    }
    *m = attn_hmax8(mx);
    if (sum) *sum = attn_hsum8(s);
    return !_mm256_movemask_ps(bad);
}

/* Each row of q as 16-bit integers into qp (ATTN_DEC_QPREP_STRIDE bytes a row:
 * d values, then the scale sq at byte 512). 0 if a value is not finite. */
static ATTN_T256 int i8_prep_rows(char *qp, const float *q, int64_t ldq, int nr, int d) {
    for (int r = 0; r < nr; r++) {
        const float *qr = q + r * ldq;
        float m;
        if (!absmax_finite(qr, d, &m, NULL)) return 0;
        __m256 inv = _mm256_set1_ps(m > 0.0f ? 32767.0f / m : 0.0f);
        int16_t *row = (int16_t *)(void *)(qp + (size_t)r * ATTN_DEC_QPREP_STRIDE);
        for (int x = 0; x < d; x += 16) {
            __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(qr + x), inv));
            __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(qr + x + 8), inv));
            /* packs interleaves the 128-bit halves: a0-3 b0-3 a4-7 b4-7 */
            __m256i v = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
            _mm256_storeu_si256((__m256i *)(void *)(row + x), v);
        }
        float sq = m > 0.0f ? m / 32767.0f : 0.0f;
        memcpy(qp + (size_t)r * ATTN_DEC_QPREP_STRIDE + 512, &sq, sizeof sq);
    }
    return 1;
}

ATTN_T256 int loom_attn_dec_qprep_avx2(void *qp, const float *q, int64_t ldq, int nr, loom_dtype kdt, int d,
                                       int hp) {
    (void)hp; /* an i8 K keeps its 16-bit q either way */
    if (kdt != LOOM_I8 || !DEC_I8_D(d)) return 0;
    return i8_prep_rows(qp, q, ldq, nr, d);
}

/* Lane r of the result: the sum of the lanes of a[r], r < 4 (exact). */
ATTN_INLINE ATTN_T256 __m128i reduce4_epi32(const __m256i *a) {
    __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}

/* Keys c0 .. c0+KB-1 (ncv real) of RB prepared rows, KB = 8 / RB: row r, key k
 * in acc[k * RB + r], so each group of four accumulators holds whole keys. q
 * comes from L1 as the multiplies' operand; each K vector is loaded and
 * sign-extended once for the RB rows. */
ATTN_INLINE ATTN_T256 void dot_i8_keys(int RB, float *s, int64_t lds, const char *qp, __m128 sc4,
                                       const void *const *rows, int c0, int ncv, int d, int own,
                                       const attn_dec_pf *pf, int64_t ahead) {
    const int KB = 8 / RB;
    const int8_t *kp[8];
    __m256i acc[8];
#pragma GCC unroll 8
    for (int k = 0; k < KB; k++) {
        kp[k] = (const int8_t *)rows[c0 + (k < ncv ? k : ncv - 1)];
        if (own) attn_dec_pf_row(pf, c0 + k);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int x = 0; x < d; x += 16) {
#pragma GCC unroll 8
        for (int k = 0; k < KB; k++) {
            if (own && x % 64 == 0) attn_dec_prefetch(kp[k], x, ahead);
            __m256i kv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(kp[k] + x)));
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) {
                const char *qr = qp + (size_t)r * ATTN_DEC_QPREP_STRIDE + 2 * x;
                __m256i qv = _mm256_loadu_si256((const __m256i *)(const void *)qr);
                acc[k * RB + r] = _mm256_add_epi32(acc[k * RB + r], _mm256_madd_epi16(qv, kv));
            }
        }
    }
    float out[8]; /* out[k * RB + r] = s[r][k]; sc4 lane j holds the scale of row j % RB */
#pragma GCC unroll 2
    for (int g = 0; g < 2; g++)
        _mm_storeu_ps(out + 4 * g, _mm_mul_ps(_mm_cvtepi32_ps(reduce4_epi32(acc + 4 * g)), sc4));
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
        for (int k = 0; k < ncv; k++) s[r * lds + c0 + k] = out[k * RB + r];
}

/* Up to four prepared rows per sweep over the keys, then pairs, then one. */
ATTN_INLINE ATTN_T256 void dot_i8_rows(float *s, int64_t lds, const char *qp, int nr, const void *const *rows,
                                       int nc, int d, const attn_dec_pf *pf, int64_t ahead) {
    int r = 0;
#define DOT_I8(RB)                                                                                          \
    do {                                                                                                    \
        float sq[4];                                                                                        \
        for (int i = 0; i < 4; i++)                                                                         \
            memcpy(&sq[i], qp + (size_t)(r + i % (RB)) * ATTN_DEC_QPREP_STRIDE + 512, sizeof sq[i]);         \
        __m128 sc4 = _mm_loadu_ps(sq);                                                                      \
        for (int c0 = 0; c0 < nc; c0 += 8 / (RB))                                                           \
            dot_i8_keys(RB, s + r * lds, lds, qp + (size_t)r * ATTN_DEC_QPREP_STRIDE, sc4, rows, c0,         \
                        nc - c0 < 8 / (RB) ? nc - c0 : 8 / (RB), d, !r, r ? NULL : pf, ahead);             \
    } while (0)
    for (; r + 4 <= nr; r += 4) DOT_I8(4);
    for (; r + 2 <= nr; r += 2) DOT_I8(2);
    for (; r < nr; r++) DOT_I8(1);
#undef DOT_I8
}

ATTN_T256 void loom_attn_dec_dot_prep_avx2(float *s, int64_t lds, const void *qp, int nr, const void *const *rows,
                                           loom_dtype dt, int nc, int d, const attn_dec_pf *pf, int hp) {
    (void)dt, (void)hp; /* only i8 rows are prepared here */
    ATTN_DEC_WITH_AHEAD(pf, dot_i8_rows, s, lds, qp, nr, rows, nc, d, pf);
}

/* The sum of |y - round(y)| over y = x[i] * inv, i < n (the rounding errors of
 * pv_probs_i16 in its units). */
ATTN_INLINE ATTN_T256 float round_err(const float *x, int n, __m256 inv) {
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 e = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) {
        __m256 y = _mm256_mul_ps(attn_load8(x, i, LOOM_F32, n - i < 8 ? n - i : 8), inv);
        e = _mm256_add_ps(e, _mm256_and_ps(_mm256_sub_ps(y, _mm256_cvtepi32_ps(_mm256_cvtps_epi32(y))), abs));
    }
    return attn_hsum8(e);
}

/* nr (<= 4) rows of p as 16-bit integers into pq (rows ldb apart, zero padded
 * to the next even count: an odd last key pairs with 0) and their scales into
 * ps. 0 (nothing usable) if some |p| is not finite, a row's largest is too
 * small to scale up (the widening kernel then keeps NaN and inf as they are),
 * or a row's rounding errors add up to more than ATTN_DEC_PQ_ERR of its sum
 * (added up only where the sum does not bound them already: each is at most
 * half a unit). */
ATTN_INLINE ATTN_T256 int pv_probs_i16(int16_t *pq, int64_t ldb, float *ps, const float *p, int64_t ldp, int nr,
                                       int nc) {
    for (int r = 0; r < nr; r++) {
        const float *pr = p + r * ldp;
        float m, sum;
        if (!absmax_finite(pr, nc, &m, &sum) || (m > 0.0f && m < 0x1p-100f)) return 0;
        float invs = m > 0.0f ? 32767.0f / m : 0.0f, tol = sum * invs * ATTN_DEC_PQ_ERR; /* units */
        __m256 inv = _mm256_set1_ps(invs);
        ps[r] = m / 32767.0f;
        for (int c = 0; c < nc; c += 16) {
            __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(attn_load8(pr, c, LOOM_F32, nc - c < 8 ? nc - c : 8), inv));
            __m256i b = nc - c > 8 ? _mm256_cvtps_epi32(_mm256_mul_ps(
                                         attn_load8(pr, c + 8, LOOM_F32, nc - c < 16 ? nc - c - 8 : 8), inv))
                                   : _mm256_setzero_si256();
            /* packs interleaves the 128-bit halves: a0-3 b0-3 a4-7 b4-7 */
            __m256i v = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
            _mm256_storeu_si256((__m256i *)(void *)(pq + r * ldb + c), v);
        }
        if (tol < 0.5f * (float)nc && round_err(pr, nc, inv) > tol) return 0;
    }
    return 1;
}

/* RB (<= 4) rows x values x0 .. x0 + 15 of the V rows over the tile's key
 * pairs: 2 RB accumulators. The unpacked pairs leave x0 + i in lane i of lo
 * and x0 + 4 + i in lane i of hi for i < 4, x0 + 8 + i and x0 + 12 + i in
 * lane 4 + i. own: these rows prefetch their lines at the distance; pf (the
 * first pass only) names the other stream. */
ATTN_INLINE ATTN_T256 void pv_i8w_pass(int RB, float *acc, int64_t lda, const int16_t *pq, int64_t ldb,
                                       const float *ps, const void *const *rows, int nc, int x0,
                                       const float *alpha, int own, const attn_dec_pf *pf, int64_t ahead) {
    __m256i ac[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) ac[r][0] = ac[r][1] = _mm256_setzero_si256();
    for (int c = 0; c < nc; c += 2) {
        const int8_t *v0 = (const int8_t *)rows[c] + x0;
        const int8_t *v1 = c + 1 < nc ? (const int8_t *)rows[c + 1] + x0 : NULL;
        attn_dec_pf_row(pf, c);
        attn_dec_pf_row(pf, c + 1);
        if (own && x0 % 64 == 0) {
            attn_dec_prefetch(v0, 0, ahead);
            if (v1) attn_dec_prefetch(v1, 0, ahead);
        }
        __m256i a = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)v0));
        __m256i b = v1 ? _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)v1))
                       : _mm256_setzero_si256();
        __m256i lo = _mm256_unpacklo_epi16(a, b), hi = _mm256_unpackhi_epi16(a, b);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            int32_t pair;
            memcpy(&pair, pq + r * ldb + c, sizeof pair);
            __m256i pp = _mm256_set1_epi32(pair);
            ac[r][0] = _mm256_add_epi32(ac[r][0], _mm256_madd_epi16(lo, pp));
            ac[r][1] = _mm256_add_epi32(ac[r][1], _mm256_madd_epi16(hi, pp));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        __m256 al = _mm256_set1_ps(alpha[r]), sc = _mm256_set1_ps(ps[r]);
        float *ar = acc + r * lda + x0;
        __m256 n0 = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(ac[r][0], ac[r][1], 0x20)); /* x0 .. x0+7 */
        __m256 n1 = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(ac[r][0], ac[r][1], 0x31)); /* x0+8 .. x0+15 */
        _mm256_storeu_ps(ar, _mm256_fmadd_ps(n0, sc, _mm256_mul_ps(al, _mm256_loadu_ps(ar))));
        _mm256_storeu_ps(ar + 8, _mm256_fmadd_ps(n1, sc, _mm256_mul_ps(al, _mm256_loadu_ps(ar + 8))));
    }
}

ATTN_INLINE ATTN_T256 int pv_i8w_a(int RB, float *acc, int64_t lda, const float *p, int64_t ldp,
                                   const void *const *rows, int nc, int d, const float *alpha, int own,
                                   const attn_dec_pf *pf, int64_t ahead) {
    int16_t pq[4][ATTN_DEC_TILE_MAX + 16];
    float ps[4];
    const int ldb = ATTN_DEC_TILE_MAX + 16;
    if (!pv_probs_i16(pq[0], ldb, ps, p, ldp, RB, nc)) return 0;
    for (int x0 = 0; x0 < d; x0 += 16)
        pv_i8w_pass(RB, acc, lda, pq[0], ldb, ps, rows, nc, x0, alpha, own, x0 ? NULL : pf, ahead);
    return 1;
}

/* (flash_attention_internal.h) */
ATTN_T256 int attn_dec_pv_i8w_avx2(float *acc, int64_t lda, const float *p, int64_t ldp, int nr,
                                   const void *const *rows, int nc, int d, const float *alpha, int own,
                                   const attn_dec_pf *pf) {
    if (!DEC_I8_D(d) || nc > ATTN_DEC_TILE_MAX || nr > 4) return 0;
#define PV_I8W(RB, AHEAD) pv_i8w_a(RB, acc, lda, p, ldp, rows, nc, d, alpha, own, pf, AHEAD)
    return ATTN_DEC_BY_RB_AHEAD(nr, pf, PV_I8W);
#undef PV_I8W
}

#else
typedef int loom_attn_incre_avx2_i8_unused; /* ISO C wants a non-empty translation unit */
#endif
