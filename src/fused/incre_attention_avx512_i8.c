/* AVX-512 decode kernels for i8 caches with AVX512_VNNI: the scores against an
 * i8 K (vpdpwssd on q rounded to 16-bit integers, prepared once per (batch, kv
 * head)), and the P.V against an i8 V (vpdpwssd on P rounded to 16-bit
 * integers per row and tile). Row order and prefetching as described in
 * incre_attention_avx512.c. */
#include "fused/flash_attention_internal.h"

#include "base/cpu.h"

#if defined(__x86_64__)
#include "fused/incre_attention_avx512.h"


/* Scores against an i8 K with vpdpwssd, d = 32 NQ (64, 96 or 128; 256 in two
 * halves of 128, dot_i8_prep). Widening
 * every K element to f32 cost as much as the FMAs themselves (an i8 cache is
 * compute-bound); instead each q row (its per-channel K scales already folded
 * in) is rounded to 16-bit integers against its own max, q ~ sq * qi with
 * |qi| <= 32767 (relative error <= 2^-16 of the row's largest element), K
 * is sign-extended to 16 bits, and the products accumulate exactly in 32-bit
 * lanes (8 products of <= 2^15 * 2^7 per lane: no overflow).
 *
 * The rounded rows are prepared once per (batch, kv head) by the driver
 * (loom_attn_dec_qprep_avx512, ATTN_DEC_QPREP_STRIDE bytes a row: the NQ
 * vectors, then sq at byte 512), not once per tile: the rounding (a max, a division and
 * the conversions, a long dependency chain in front of the first product)
 * cost 0.95 of 5.3 ns per key of the tile's Q.K^T. */
ATTN_INLINE ATTN_T512VNNI float i8_quant_row(int NQ, const float *qr, __m512i *qi) {
    __m512 mx = _mm512_setzero_ps();
    for (int v = 0; v < 2 * NQ; v++) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(qr + 16 * v)));
    float m = _mm512_reduce_max_ps(mx);
    __m512 inv = _mm512_set1_ps(m > 0.0f ? 32767.0f / m : 0.0f);
    for (int v = 0; v < NQ; v++) {
        __m256i a = _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(qr + 32 * v), inv)));
        __m256i b = _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(qr + 32 * v + 16), inv)));
        qi[v] = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
    }
    return m > 0.0f ? m / 32767.0f : 0.0f;
}

static ATTN_T512VNNI void i8_prep_rows(char *qp, const float *q, int64_t ldq, int nr, int NQ) {
    for (int r = 0; r < nr; r++) {
        __m512i qi[8];
        char *row = qp + (size_t)r * ATTN_DEC_QPREP_STRIDE;
        float sq = i8_quant_row(NQ, q + r * ldq, qi);
        for (int v = 0; v < NQ; v++) _mm512_storeu_si512(row + 64 * v, qi[v]);
        memcpy(row + 512, &sq, sizeof sq);
    }
}

/* RB (1 or 2) prepared rows against the keys; their q vectors from byte qoff
 * of the prepared row (256: the second half of d = 256). */
ATTN_INLINE ATTN_T512VNNI void dot_i8(int RB, int NQ, float *s, int64_t lds, const char *qp, int qoff,
                                      const void *const *rows, int nc, int own,
                                      const attn_dec_pf *pf, int64_t ahead) {
    const int KB = 16 / RB;
    __m512i qi[2][4];
    float sq[2];
    for (int r = 0; r < RB; r++) {
        const char *row = qp + (size_t)r * ATTN_DEC_QPREP_STRIDE;
        for (int v = 0; v < NQ; v++) qi[r][v] = _mm512_loadu_si512(row + qoff + 64 * v);
        memcpy(&sq[r], row + 512, sizeof sq[r]);
    }
    __m512 scale = _mm512_set1_ps(sq[0]);
    if (RB == 2) scale = _mm512_mask_blend_ps((__mmask16)0xFF00, scale, _mm512_set1_ps(sq[1]));
    for (int c0 = 0; c0 < nc; c0 += KB) {
        int ncv = nc - c0 < KB ? nc - c0 : KB;
        __m512i acc[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_si512();
#pragma GCC unroll 16
        for (int k = 0; k < KB; k++) {
            const char *kp = rows[c0 + (k < ncv ? k : ncv - 1)];
            if (own) attn_dec_pf_row(pf, c0 + k);
#pragma GCC unroll 4
            for (int v = 0; v < NQ; v++) {
                if (own && v % 2 == 0) attn_dec_prefetch(kp, 32 * v, ahead);
                __m512i kv = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(kp + 32 * v)));
#pragma GCC unroll 2
                for (int r = 0; r < RB; r++) acc[r * KB + k] = _mm512_dpwssd_epi32(acc[r * KB + k], qi[r][v], kv);
            }
        }
        /* lane r*KB + k = s[r][k]: summed exactly in 32 bits, converted once */
        __m512 z = _mm512_cvtepi32_ps(attn_reduce16_epi32(acc));
        store_block(RB, _mm512_mul_ps(z, scale), s + c0, lds, RB, ncv);
    }
}

#define DEC_I8_D(d) ((d) == 64 || (d) == 96 || (d) == 128 || (d) == 256) /* the head dims dot_i8_prep takes */

ATTN_INLINE ATTN_T512VNNI void dot_i8_rows_b(float *s, int64_t lds, const char *qp, int qoff, int nr,
                                             const void *const *rows, int nc, int d,
                                             const attn_dec_pf *pf, int64_t ahead) {
    int r = 0;
#define DOT_I8(RB, NQ) dot_i8(RB, NQ, s + r * lds, lds, qp + (size_t)r * ATTN_DEC_QPREP_STRIDE, qoff, rows, nc, !r, r ? NULL : pf, ahead)
#define DOT_I8_D(RB)                      \
    do {                                  \
        if (d == 128) DOT_I8(RB, 4);      \
        else if (d == 96) DOT_I8(RB, 3);  \
        else DOT_I8(RB, 2);               \
    } while (0)
    for (; r + 2 <= nr; r += 2) DOT_I8_D(2);
    if (r < nr) DOT_I8_D(1);
#undef DOT_I8_D
#undef DOT_I8
}

/* The rows in pairs, one function per prefetch distance (a constant in its loops;
 * inlined into its callers instead, the i8 Q.K^T ran 4.1 -> 4.7 ns per key). */
static ATTN_T512VNNI void dot_i8_rows_far(float *s, int64_t lds, const char *qp, int qoff, int nr,
                                          const void *const *rows, int nc, int d, const attn_dec_pf *pf) {
    dot_i8_rows_b(s, lds, qp, qoff, nr, rows, nc, d, pf, ATTN_DEC_PF_DIST);
}
static ATTN_T512VNNI void dot_i8_rows_none(float *s, int64_t lds, const char *qp, int qoff, int nr,
                                           const void *const *rows, int nc, int d, const attn_dec_pf *pf) {
    dot_i8_rows_b(s, lds, qp, qoff, nr, rows, nc, d, pf, 0);
}
ATTN_INLINE void dot_i8_rows(float *s, int64_t lds, const char *qp, int qoff, int nr,
                             const void *const *rows, int nc, int d, const attn_dec_pf *pf, int64_t ahead) {
    if (ahead) dot_i8_rows_far(s, lds, qp, qoff, nr, rows, nc, d, pf);
    else dot_i8_rows_none(s, lds, qp, qoff, nr, rows, nc, d, pf);
}

/* d = 256 as two halves of 128 (q rounded against the whole row's max, so the
 * halves' scores share a scale), as dot_halves does for the other caches. */
ATTN_INLINE ATTN_T512VNNI void dot_i8_prep_a(float *s, int64_t lds, const char *qp, int nr,
                                      const void *const *rows, int nc, int d,
                                      const attn_dec_pf *pf, int64_t ahead) {
    if (d != 256) {
        dot_i8_rows(s, lds, qp, 0, nr, rows, nc, d, pf, ahead);
        return;
    }
    const void *hrows[ATTN_DEC_TILE_MAX];
    float t[8 * ATTN_DEC_TILE_MAX];
    dec_rows_at(hrows, rows, nc, 128);
    for (int r0 = 0; r0 < nr; r0 += 8) {
        int n = nr - r0 < 8 ? nr - r0 : 8;
        const char *q0 = qp + (size_t)r0 * ATTN_DEC_QPREP_STRIDE;
        float *sr = s + r0 * lds;
        dot_i8_rows(sr, lds, q0, 0, n, rows, nc, 128, r0 ? NULL : pf, ahead);
        dot_i8_rows(t, ATTN_DEC_TILE_MAX, q0, 256, n, hrows, nc, 128, NULL, ahead);
        dec_add_scores(sr, lds, t, n, nc);
    }
}

static ATTN_T512VNNI void dot_i8_prep(float *s, int64_t lds, const char *qp, int nr,
                                      const void *const *rows, int nc, int d,
                                      const attn_dec_pf *pf) {
    ATTN_DEC_WITH_AHEAD(pf, dot_i8_prep_a, s, lds, qp, nr, rows, nc, d, pf);
}


ATTN_T512 int loom_attn_dec_qprep_avx512(void *qp, const float *q, int64_t ldq, int nr,
                                         loom_dtype kdt, int d, int hp) {
    (void)hp; /* an i8 K keeps its 16-bit q either way */
    if (kdt != LOOM_I8 || !DEC_I8_D(d) || !loom_attn_i8_vnni() || !attn_rows_finite(q, ldq, nr, d))
        return 0;
    i8_prep_rows(qp, q, ldq, nr, d / 32);
    return 1;
}

ATTN_T512 void loom_attn_dec_dot_prep_avx512(float *s, int64_t lds, const void *qp, int nr,
                                             const void *const *rows, loom_dtype dt, int nc, int d,
                                             const attn_dec_pf *pf, int hp) {
    (void)dt, (void)hp; /* only i8 rows are prepared here */
    dot_i8_prep(s, lds, qp, nr, rows, nc, d, pf);
}


/* P.V against an i8 V with vpdpwssd over key pairs (AVX512_VNNI), the mirror of
 * dot_i8: each row's probabilities in the tile are rounded to 16-bit integers
 * against the row's largest |p| (pq = round(p * 32767 / pmax), relative error
 * <= 2^-16 of pmax, as q's rounding for an i8 K; a row whose errors add up
 * to more than ATTN_DEC_PQ_ERR of its sum takes the widening kernel), V is sign-extended to 16
 * bits, and a key pair's products sum exactly in 32-bit lanes (at most
 * ATTN_DEC_TILE_MAX products of <= 2^15 * 2^7 per lane: no overflow); the tile's
 * sums are converted and scaled by pmax / 32767 once. 16 multiply instructions
 * per key for four rows at d = 128, against 32 FMAs plus 16 conversions when
 * every element is widened to f32. */

/* acc + the pairwise products of a and b (vpdpwssd). In asm with acc tied to
 * its register: GCC 12 copied the intrinsic's accumulator to another register
 * and back around every instruction (two moves per product instruction). */
ATTN_INLINE ATTN_T512VNNI __m512i dpwssd_tied(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* Lane r: the sum of |y - round(y)| over row r's lanes of y = p * inv[r] (the
 * rounding errors of pv_probs_i16 in its units), for nr <= 4 rows of nc; 0 in
 * lanes nr and up. */
ATTN_INLINE ATTN_T512 __m128 pv_round_err(const float *p, int64_t ldp, int nr, int nc, const __m512 *inv) {
    __m512 e[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) e[r] = _mm512_setzero_ps();
    for (int c = 0; c < nc; c += 16)
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            __m512 y = _mm512_mul_ps(_mm512_maskz_loadu_ps(attn_tail16(nc, c), p + r * ldp + c), inv[r]);
            e[r] = _mm512_add_ps(e[r], _mm512_abs_ps(_mm512_sub_ps(y, _mm512_cvtepi32_ps(_mm512_cvtps_epi32(y)))));
        }
    return attn_fold4_ps(0, e);
}

/* nr (<= 4) rows of p as 16-bit integers into pq (rows ldb apart, zero padded
 * to the next 16: an odd last key pairs with 0) and their scales into ps. 0
 * (nothing usable) if some |p| is not finite, the largest is too small to
 * scale up (the f32 kernel then keeps NaN and Inf where they are), or a row's
 * rounding errors add up to more than ATTN_DEC_PQ_ERR of its sum.
 * The rows' maxima (and sums of |p|) meet in one transposed reduction and
 * their scales in one division, instead of a reduction and a division per row
 * in front of the first product (hot P.V, four rows, 32-key tiles on Zen 4:
 * 7.41 -> 7.13 ns per key). The rounding errors are added up only where the
 * sums do not bound them already: each is at most half a unit, so a row whose
 * sum is at least nc / 2 / ATTN_DEC_PQ_ERR units passes whatever they are
 * (always adding them up cost 0.45 ns per key in 128-key tiles). */
ATTN_INLINE ATTN_T512VNNI int pv_probs_i16(int16_t *pq, int64_t ldb, float *ps, const float *p,
                                           int64_t ldp, int nr, int nc) {
    const __m512 big = _mm512_set1_ps(FLT_MAX);
    const int rows = (1 << nr) - 1; /* lanes of the real rows */
    __m512 mx[4], a[4], inv[4];
    __mmask16 bad = 0;
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) mx[r] = a[r] = _mm512_setzero_ps();
    for (int c = 0; c < nc; c += 16) {
        const __mmask16 k = attn_tail16(nc, c);
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            __m512 x = _mm512_abs_ps(_mm512_maskz_loadu_ps(k, p + r * ldp + c));
            bad |= _mm512_cmp_ps_mask(x, big, _CMP_NLE_UQ); /* inf or NaN */
            mx[r] = _mm512_max_ps(mx[r], x);
            a[r] = _mm512_add_ps(a[r], x);
        }
    }
    __m128 m4 = attn_fold4_ps(1, mx); /* row r in lane r */
    __m128 pos = _mm_cmpgt_ps(m4, _mm_setzero_ps());
    if (bad || _mm_movemask_ps(_mm_and_ps(pos, _mm_cmplt_ps(m4, _mm_set1_ps(0x1p-100f))))) return 0;
    __m128 inv4 = _mm_and_ps(pos, _mm_div_ps(_mm_set1_ps(32767.0f), m4)); /* 0 where the row is all 0 */
    float s4[4];
    _mm_storeu_ps(s4, _mm_div_ps(m4, _mm_set1_ps(32767.0f)));
    for (int r = 0; r < nr; r++) ps[r] = s4[r];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) inv[r] = _mm512_permutexvar_ps(_mm512_set1_epi32(r), _mm512_castps128_ps512(inv4));
    for (int c = 0; c < nc; c += 16) {
        const __mmask16 k = attn_tail16(nc, c);
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            __m512 y = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + r * ldp + c), inv[r]);
            _mm256_storeu_si256((__m256i *)(pq + r * ldb + c), _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(y)));
        }
    }
    __m128 tol = _mm_mul_ps(_mm_mul_ps(attn_fold4_ps(0, a), inv4), _mm_set1_ps(ATTN_DEC_PQ_ERR)); /* units */
    if (!(_mm_movemask_ps(_mm_cmplt_ps(tol, _mm_set1_ps(0.5f * (float)nc))) & rows)) return 1;
    return !(_mm_movemask_ps(_mm_cmpgt_ps(pv_round_err(p, ldp, nr, nc, inv), tol)) & rows);
}

/* RB (<= 4) rows x values x0 .. x0 + 63 of the V rows: 16 accumulators. own:
 * the first rows' pass, which prefetches its line of each row and names the
 * other stream's rows (pf). */
ATTN_INLINE ATTN_T512VNNI void pv_i8w_pass(int RB, float *acc, int64_t lda, const int16_t *pq, int64_t ldb,
                                           const float *ps, const void *const *rows, int nc, int x0,
                                           const float *alpha, int own, const attn_dec_pf *pf,
                                           int64_t ahead) {
    __m512i ac[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) ac[r][j] = _mm512_setzero_si512();
    for (int c = 0; c < nc; c += 2) { /* an odd last key pairs with zeros */
        /* an odd last key pairs with its own row again: its partner's rounded p is 0 */
        const int8_t *v0 = (const int8_t *)rows[c] + x0;
        const int8_t *v1 = (const int8_t *)rows[c + 1 < nc ? c + 1 : c] + x0;
        if (own) {
            attn_dec_pf_row(pf, c);
            attn_dec_pf_row(pf, c + 1);
            attn_dec_prefetch(v0, 0, ahead);
            attn_dec_prefetch(v1, 0, ahead);
        }
        __m512i pp[4];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            uint32_t pair;
            memcpy(&pair, pq + r * ldb + c, sizeof pair);
            pp[r] = _mm512_set1_epi32((int)pair);
        }
#pragma GCC unroll 2
        for (int j = 0; j < 2; j++) {
            __m512i a = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(v0 + 32 * j)));
            __m512i b = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(v1 + 32 * j)));
            __m512i lo = _mm512_unpacklo_epi16(a, b), hi = _mm512_unpackhi_epi16(a, b);
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) {
                ac[r][2 * j] = dpwssd_tied(ac[r][2 * j], lo, pp[r]);
                ac[r][2 * j + 1] = dpwssd_tied(ac[r][2 * j + 1], hi, pp[r]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        __m512 al = _mm512_set1_ps(alpha[r]), sc = _mm512_set1_ps(ps[r]);
        float *ar = acc + r * lda + x0;
#pragma GCC unroll 2
        for (int j = 0; j < 2; j++) {
            __m512 n0, n1;
            pv_from_pairs(_mm512_cvtepi32_ps(ac[r][2 * j]), _mm512_cvtepi32_ps(ac[r][2 * j + 1]), &n0, &n1);
            _mm512_storeu_ps(ar + 32 * j, _mm512_fmadd_ps(n0, sc, _mm512_mul_ps(al, _mm512_loadu_ps(ar + 32 * j))));
            _mm512_storeu_ps(ar + 32 * j + 16,
                             _mm512_fmadd_ps(n1, sc, _mm512_mul_ps(al, _mm512_loadu_ps(ar + 32 * j + 16))));
        }
    }
}

/* RB (<= 4) rows: 0 (nothing done) if their p is not usable (pv_probs_i16). */
ATTN_INLINE ATTN_T512VNNI int pv_i8w_a(int RB, float *acc, int64_t lda, const float *p, int64_t ldp,
                                       const void *const *rows, int nc, int d, const float *alpha,
                                       int own, const attn_dec_pf *pf, int64_t ahead) {
    int16_t pq[4][ATTN_DEC_TILE_MAX + 32];
    float ps[4];
    const int ldb = ATTN_DEC_TILE_MAX + 32;
    if (!pv_probs_i16(pq[0], ldb, ps, p, ldp, RB, nc)) return 0;
    for (int x0 = 0; x0 < d; x0 += 64)
        pv_i8w_pass(RB, acc, lda, pq[0], ldb, ps, rows, nc, x0, alpha, own, x0 ? NULL : pf, ahead);
    return 1;
}

ATTN_T512VNNI int attn_dec_pv_i8w(float *acc, int64_t lda, const float *p, int64_t ldp, int nr,
                                  const void *const *rows, int nc, int d, const float *alpha,
                                  int own, const attn_dec_pf *pf) {
    if (d % 64 != 0 || nc > ATTN_DEC_TILE_MAX || nr > 4) return 0;
#define PV_I8W(RB, AHEAD) pv_i8w_a(RB, acc, lda, p, ldp, rows, nc, d, alpha, own, pf, AHEAD)
    return ATTN_DEC_BY_RB_AHEAD(nr, pf, PV_I8W);
#undef PV_I8W
}

#else
typedef int loom_attn_incre_avx512_i8_unused; /* ISO C wants a non-empty translation unit */
#endif
