/* AVX-512 decode kernels for i8 caches: the scores against an i8 K with
 * AVX512_VNNI (vpdpwssd on q rounded to 16-bit integers, prepared once per
 * (batch, kv head)), and the P.V against an i8 V under inner_precise 1
 * (vdpbf16ps, P rounded to bf16). An i8 V under inner_precise 0 goes through
 * the widening kernels of incre_attention_avx512.c. Row order and prefetching
 * as described there. */
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
    const void *hrows[ATTN_DEC_TILE];
    float t[8 * ATTN_DEC_TILE];
    dec_rows_at(hrows, rows, nc, 128);
    for (int r0 = 0; r0 < nr; r0 += 8) {
        int n = nr - r0 < 8 ? nr - r0 : 8;
        const char *q0 = qp + (size_t)r0 * ATTN_DEC_QPREP_STRIDE;
        float *sr = s + r0 * lds;
        dot_i8_rows(sr, lds, q0, 0, n, rows, nc, 128, r0 ? NULL : pf, ahead);
        dot_i8_rows(t, ATTN_DEC_TILE, q0, 256, n, hrows, nc, 128, NULL, ahead);
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
    if (kdt != LOOM_I8 || !DEC_I8_D(d) || !loom_cpu_get()->avx512_vnni) return 0;
    i8_prep_rows(qp, q, ldq, nr, d / 32);
    return 1;
}

ATTN_T512 void loom_attn_dec_dot_prep_avx512(float *s, int64_t lds, const void *qp, int nr,
                                             const void *const *rows, loom_dtype dt, int nc, int d,
                                             const attn_dec_pf *pf, int hp) {
    (void)dt, (void)hp; /* only i8 rows are prepared here */
    dot_i8_prep(s, lds, qp, nr, rows, nc, d, pf);
}


/* P.V against an i8 V with vdpbf16ps over key pairs (inner_precise 1): every
 * i8 value is exact in bf16 and so are the products, so P's rounding to bf16
 * (as pv_bf16_rows) is the only new error. An i8 widened to f32 has its low 16
 * bits zero, so its bf16 is the f32's upper half: a key pair's lane is
 * (f32(v_c) >> 16) | f32(v_c+1). RB rows x a half row of 64 values (16
 * accumulators), which widens each element once for all the rows, as pv_rows
 * does for inner_precise 0. Half the multiply instructions of the f32 FMAs:
 * hot, 5.2 -> 4.0 ns per key for the four rows of GQA 32/8 at d = 128. */
ATTN_INLINE ATTN_T512BF void pv_i8_half(int RB, float *acc, int64_t lda, const uint16_t *pb,
                                        int64_t ldb, const void *const *rows, int nc, int x0,
                                        const float *alpha, const attn_dec_pf *pf, int64_t ahead) {
    __m512 ac[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        __m512 al = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) ac[r][j] = _mm512_mul_ps(al, _mm512_loadu_ps(acc + r * lda + x0 + 16 * j));
    }
    for (int c = 0; c < nc; c += 2) { /* an odd last key pairs with zeros */
        const int8_t *v0 = (const int8_t *)rows[c] + x0;
        const int8_t *v1 = c + 1 < nc ? (const int8_t *)rows[c + 1] + x0 : NULL;
        attn_dec_pf_row(pf, c);
        attn_dec_pf_row(pf, c + 1);
        attn_dec_prefetch(v0, 0, ahead);
        if (v1) attn_dec_prefetch(v1, 0, ahead);
        __m512i pp[4];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            uint32_t pair;
            memcpy(&pair, pb + r * ldb + c, sizeof pair);
            pp[r] = _mm512_set1_epi32((int)pair);
        }
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m512i a = _mm512_castps_si512(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(v0 + 16 * j)))));
            __m512i b = v1 ? _mm512_castps_si512(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(v1 + 16 * j)))))
                           : _mm512_setzero_si512();
            __m512i pr = _mm512_or_si512(_mm512_srli_epi32(a, 16), b);
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) ac[r][j] = _mm512_dpbf16_ps(ac[r][j], (__m512bh)pr, (__m512bh)pp[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) _mm512_storeu_ps(acc + r * lda + x0 + 16 * j, ac[r][j]);
}

ATTN_INLINE ATTN_T512BF void loom_attn_dec_pv_hp_avx512bf_a(float *acc, int64_t lda, const float *p, int64_t ldp,
                                              int nr, const void *const *rows, loom_dtype dt,
                                              int nc, int d, const float *alpha,
                                              const attn_dec_pf *pf, int64_t ahead) {
    if (dt != LOOM_I8 || (d != 128 && d != 64 && d != 256) || nc > ATTN_DEC_TILE) {
        loom_attn_dec_pv_avx512bf(acc, lda, p, ldp, nr, rows, dt, nc, d, alpha, pf);
        return;
    }
    /* probabilities as bf16, four rows at a time, zero padded to an even count */
    uint16_t pb[4][ATTN_DEC_TILE + 32];
    const int ldb = ATTN_DEC_TILE + 32;
    for (int r0 = 0; r0 < nr; r0 += 4) {
        int rb = nr - r0 < 4 ? nr - r0 : 4;
        pv_probs_bf16(pb[0], ldb, p + r0 * ldp, ldp, rb, nc);
        float *ar = acc + r0 * lda;
        for (int x0 = 0; x0 < d; x0 += 64) {
            const attn_dec_pf *f = r0 == 0 && x0 == 0 ? pf : NULL; /* the next K tile, once */
#define PV_I8(RB) pv_i8_half(RB, ar, lda, pb[0], ldb, rows, nc, x0, alpha + r0, f, ahead)
            if (rb == 4) PV_I8(4);
            else if (rb == 3) PV_I8(3);
            else if (rb == 2) PV_I8(2);
            else PV_I8(1);
#undef PV_I8
        }
    }
}

ATTN_T512BF void loom_attn_dec_pv_hp_avx512bf(float *acc, int64_t lda, const float *p, int64_t ldp,
                                              int nr, const void *const *rows, loom_dtype dt,
                                              int nc, int d, const float *alpha,
                                              const attn_dec_pf *pf) {
    ATTN_DEC_WITH_AHEAD(pf, loom_attn_dec_pv_hp_avx512bf_a, acc, lda, p, ldp, nr, rows, dt, nc, d, alpha, pf);
}

#else
typedef int loom_attn_incre_avx512_i8_unused; /* ISO C wants a non-empty translation unit */
#endif
