/* AVX2 decode micro-kernels. For head dims that are multiples of 8 (every
 * cache dtype): Q.K^T takes up to four q rows per sweep over a tile's keys,
 * three keys at a time for four rows (dot_keys: twelve accumulators, K
 * vectors in registers, q from L1 as FMA operands; 16 ymm registers cannot
 * hold a 128-wide q row), and P.V (f32, bf16 and i8 V) four rows per pass
 * over 16 columns (pv_cols), so a GQA group's K and V elements are loaded
 * and widened once. Both read the rows in address order, prefetch their own
 * lines at the distance and name the other stream's rows (attn_dec_pf), as
 * the AVX-512 kernels do. An f16 V, other head dims and the tails keep the
 * side-by-side kernels (dot_all, pv_rows), with bounce-buffer loads for the
 * tails (AVX2 has no masked 8/16-bit loads). Against the earlier kernels
 * (rows in pairs, an f32-only address-order Q.K^T whose accumulators GCC
 * kept in memory), hot on Zen 4, four rows, best of 30 runs: Q.K^T f32
 * 24.7 -> 13.4 ns per key, f16 17.7 -> 12.9, bf16 17.0 -> 14.1. */
#include "fused/flash_attention_internal.h"

#if defined(__x86_64__)
#include "fused/flash_attention_simd.h"


/* Reduces the 8 accumulators (acc[r*KB + k] for row r, key k) and stores the
 * nrv x ncv real scores s[r][k]. */
ATTN_INLINE ATTN_T256 void store_scores8(const __m256 *acc, int KB, float *s, int64_t lds, int nrv,
                                         int ncv) {
    static const int order[8] = {0, 4, 1, 5, 2, 6, 3, 7}; /* a[2t + L] = acc[4L + t] */
    __m256 a[8];
    for (int i = 0; i < 8; i++) a[i] = acc[order[i]];
    float out[8];
    _mm256_storeu_ps(out, attn_reduce8(a));
    for (int r = 0; r < nrv; r++)
        for (int k = 0; k < ncv; k++) s[r * lds + k] = out[r * KB + k];
}

ATTN_INLINE ATTN_T256 void dot_block(int RB, loom_dtype DT, float *s, int64_t lds,
                                     const float *const *qr, const void *const *kp, int d,
                                     int nrv, int ncv, int64_t ahead) {
    const int KB = 8 / RB;
    __m256 acc[8];
    for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();
    const int64_t es = DT == LOOM_F32 ? 4 : DT == LOOM_I8 ? 1 : 2;
    for (int x = 0; x < d; x += 8) {
        int n = d - x >= 8 ? 8 : d - x; /* q rows are zero padded beyond d */
        __m256 qv[4];
        for (int r = 0; r < RB; r++) qv[r] = _mm256_loadu_ps(qr[r] + x);
        if ((x * es) % 64 == 0) /* once per cache line of each row (see the AVX-512 kernels) */
            for (int k = 0; k < KB; k++) attn_dec_prefetch(kp[k], x * es, ahead);
        for (int k = 0; k < KB; k++) {
            __m256 kv = attn_load8(kp[k], x, DT, n);
            for (int r = 0; r < RB; r++) acc[r * KB + k] = _mm256_fmadd_ps(qv[r], kv, acc[r * KB + k]);
        }
    }
    store_scores8(acc, KB, s, lds, nrv, ncv);
}

ATTN_INLINE ATTN_T256 void dot_all(int RB, loom_dtype DT, float *s, int64_t lds, const float *q,
                                   int64_t ldq, int nr, const void *const *rows, int nc, int d, int64_t ahead) {
    const int KB = 8 / RB;
    for (int r0 = 0; r0 < nr; r0 += RB) {
        const float *qr[4];
        for (int r = 0; r < RB; r++) qr[r] = q + (r0 + r < nr ? r0 + r : nr - 1) * ldq;
        int nrv = nr - r0 < RB ? nr - r0 : RB;
        for (int c0 = 0; c0 < nc; c0 += KB) {
            const void *kp[8];
            for (int k = 0; k < KB; k++) kp[k] = rows[c0 + k < nc ? c0 + k : nc - 1];
            dot_block(RB, DT, s + r0 * lds + c0, lds, qr, kp, d, nrv, nc - c0 < KB ? nc - c0 : KB, ahead);
        }
    }
}

ATTN_INLINE ATTN_T256 void dot_dt(loom_dtype DT, float *s, int64_t lds, const float *q,
                                  int64_t ldq, int nr, const void *const *rows, int nc, int d, int64_t ahead) {
    if (nr >= 4) dot_all(4, DT, s, lds, q, ldq, nr, rows, nc, d, ahead);
    else if (nr >= 2) dot_all(2, DT, s, lds, q, ldq, nr, rows, nc, d, ahead);
    else dot_all(1, DT, s, lds, q, ldq, nr, rows, nc, d, ahead);
}

/* Lane r of the result: the sum of the lanes of a[r], r < 4. */
ATTN_INLINE ATTN_T256 __m128 reduce4(const __m256 *a) {
    __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

/* Keys c0 .. c0+KB-1 (ncv real) of RB rows of q, RB * KB = 12 accumulators
 * (RB 4, 2, 1; KB 3, 6, 12). Twelve chains of FMAs, not eight: at two FMAs a
 * cycle and a latency of four, eight chains leave no slack, and the Q.K^T ran
 * 21.7 -> 13.1 ns per key hot with twelve (f32, four rows, Zen 4). The x loop
 * runs over whole vectors only (d % 8 == 0), unrolled, so the accumulators
 * stay in registers. Four rows hold the KB K vectors and take q from L1 (row
 * r, key k in acc[4k + r]: with acc[3r + k] GCC's allocation ran 1.5 ns per
 * key slower); one or two hold q and stream K. Each K vector is loaded and
 * widened once for the RB rows. */
ATTN_INLINE ATTN_T256 void dot_keys(int RB, loom_dtype DT, float *s, int64_t lds, const float *q, int64_t ldq,
                                    const void *const *rows, int c0, int ncv, int d, int own,
                                    const attn_dec_pf *pf, int64_t ahead) {
    const int KB = 12 / RB;
    const int64_t es = DT == LOOM_F32 ? 4 : DT == LOOM_I8 ? 1 : 2;
    const void *kp[12];
    __m256 acc[12];
#pragma GCC unroll 12
    for (int k = 0; k < KB; k++) {
        kp[k] = rows[c0 + (k < ncv ? k : ncv - 1)];
        if (own) attn_dec_pf_row(pf, c0 + k);
    }
#pragma GCC unroll 12
    for (int j = 0; j < 12; j++) acc[j] = _mm256_setzero_ps();
#pragma GCC unroll 2
    for (int x = 0; x < d; x += 8) {
        if (own && (x * es) % 64 == 0) /* once per cache line of each row */
#pragma GCC unroll 12
            for (int k = 0; k < KB; k++) attn_dec_prefetch(kp[k], x * es, ahead);
        if (RB == 4) {
            __m256 kv[3];
#pragma GCC unroll 3
            for (int k = 0; k < 3; k++) kv[k] = attn_load8(kp[k], x, DT, 8);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                __m256 qv = _mm256_loadu_ps(q + r * ldq + x);
#pragma GCC unroll 3
                for (int k = 0; k < 3; k++) acc[4 * k + r] = _mm256_fmadd_ps(qv, kv[k], acc[4 * k + r]);
            }
        } else {
            __m256 qv[2];
#pragma GCC unroll 2
            for (int r = 0; r < RB; r++) qv[r] = _mm256_loadu_ps(q + r * ldq + x);
#pragma GCC unroll 12
            for (int k = 0; k < KB; k++) {
                __m256 kv = attn_load8(kp[k], x, DT, 8);
#pragma GCC unroll 2
                for (int r = 0; r < RB; r++) acc[r * KB + k] = _mm256_fmadd_ps(qv[r], kv, acc[r * KB + k]);
            }
        }
    }
    float out[12]; /* out[J(r, k)] = s[r][k]: the accumulator's index */
#pragma GCC unroll 3
    for (int j = 0; j < 3; j++) _mm_storeu_ps(out + 4 * j, reduce4(acc + 4 * j));
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
        for (int k = 0; k < ncv; k++) s[r * lds + c0 + k] = out[RB == 4 ? 4 * k + r : r * KB + k];
}

/* d % 8 == 0: up to four rows per sweep over the keys (a GQA group's four rows
 * read each K tile once), the keys in address order a block at a time. */
ATTN_INLINE ATTN_T256 void dot_rows(loom_dtype DT, float *s, int64_t lds, const float *q, int64_t ldq,
                                    int nr, const void *const *rows, int nc, int d,
                                    const attn_dec_pf *pf, int64_t ahead) {
    int r = 0;
#define DOT_KEYS(RB)                                                                                    \
    for (int c0 = 0; c0 < nc; c0 += 12 / (RB))                                                          \
    dot_keys(RB, DT, s + r * lds, lds, q + r * ldq, ldq, rows, c0, nc - c0 < 12 / (RB) ? nc - c0 : 12 / (RB), \
             d, !r, r ? NULL : pf, ahead)
    for (; r + 4 <= nr; r += 4) DOT_KEYS(4);
    for (; r + 2 <= nr; r += 2) DOT_KEYS(2);
    for (; r < nr; r++) DOT_KEYS(1);
#undef DOT_KEYS
}

ATTN_INLINE ATTN_T256 void loom_attn_dec_dot_avx2_a(float *s, int64_t lds, const float *q, int64_t ldq, int nr,
                                      const void *const *rows, loom_dtype dt, int nc, int d,
                                      const attn_dec_pf *pf, int64_t ahead) {
    if (attn_dec_dot_via_prep(loom_attn_dec_qprep_avx2, loom_attn_dec_dot_prep_avx2, s, lds, q, ldq, nr, rows,
                              dt, nc, d, pf))
        return; /* an i8 K in 16-bit integers (incre_attention_avx2_i8.c) */
    if (d % 8 == 0) { /* the first sweep over the keys prefetches the other stream */
        switch (dt) {
        case LOOM_F32: dot_rows(LOOM_F32, s, lds, q, ldq, nr, rows, nc, d, pf, ahead); break;
        case LOOM_F16: dot_rows(LOOM_F16, s, lds, q, ldq, nr, rows, nc, d, pf, ahead); break;
        case LOOM_BF16: dot_rows(LOOM_BF16, s, lds, q, ldq, nr, rows, nc, d, pf, ahead); break;
        default: dot_rows(LOOM_I8, s, lds, q, ldq, nr, rows, nc, d, pf, ahead); break;
        }
        return;
    }
    switch (dt) {
    case LOOM_F32: dot_dt(LOOM_F32, s, lds, q, ldq, nr, rows, nc, d, ahead); break;
    case LOOM_F16: dot_dt(LOOM_F16, s, lds, q, ldq, nr, rows, nc, d, ahead); break;
    case LOOM_BF16: dot_dt(LOOM_BF16, s, lds, q, ldq, nr, rows, nc, d, ahead); break;
    default: dot_dt(LOOM_I8, s, lds, q, ldq, nr, rows, nc, d, ahead); break;
    }
}

ATTN_T256 void loom_attn_dec_dot_avx2(float *s, int64_t lds, const float *q, int64_t ldq, int nr,
                                      const void *const *rows, loom_dtype dt, int nc, int d,
                                      const attn_dec_pf *pf) {
    ATTN_DEC_WITH_AHEAD(pf, loom_attn_dec_dot_avx2_a, s, lds, q, ldq, nr, rows, dt, nc, d, pf);
}

/* RB rows, NV vectors of 8 from x0; n = valid elements of the last vector. */
ATTN_INLINE ATTN_T256 void pv_block(int RB, int NV, loom_dtype DT, float *acc, int64_t lda,
                                    const float *p, int64_t ldp, const void *const *rows, int nc,
                                    int x0, int n, const float *alpha, int64_t ahead) {
    __m256 ac[2][4];
    for (int r = 0; r < RB; r++) {
        __m256 al = _mm256_set1_ps(alpha[r]);
        for (int v = 0; v < NV; v++)
            ac[r][v] = _mm256_mul_ps(al, _mm256_loadu_ps(acc + r * lda + x0 + 8 * v));
    }
    const int64_t es = DT == LOOM_F32 ? 4 : DT == LOOM_I8 ? 1 : 2;
    for (int c = 0; c < nc; c++) {
        __m256 kv[4];
        for (int64_t off = x0 * es; off < (x0 + 8 * NV) * es; off += 64) attn_dec_prefetch(rows[c], off, ahead);
        for (int v = 0; v < NV; v++) kv[v] = attn_load8(rows[c], x0 + 8 * v, DT, v == NV - 1 ? n : 8);
        for (int r = 0; r < RB; r++) {
            __m256 pb = _mm256_set1_ps(p[r * ldp + c]);
            for (int v = 0; v < NV; v++) ac[r][v] = _mm256_fmadd_ps(pb, kv[v], ac[r][v]);
        }
    }
    for (int r = 0; r < RB; r++) /* rows are padded to 16 floats: whole-vector stores */
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(acc + r * lda + x0 + 8 * v, ac[r][v]);
}

ATTN_INLINE ATTN_T256 void pv_rows(int RB, loom_dtype DT, float *acc, int64_t lda, const float *p,
                                   int64_t ldp, const void *const *rows, int nc, int d,
                                   const float *alpha, int64_t ahead) {
    int x0 = 0;
    for (; x0 + 32 <= d; x0 += 32) pv_block(RB, 4, DT, acc, lda, p, ldp, rows, nc, x0, 8, alpha, ahead);
    for (; x0 < d; x0 += 8)
        pv_block(RB, 1, DT, acc, lda, p, ldp, rows, nc, x0, d - x0 >= 8 ? 8 : d - x0, alpha, ahead);
}

ATTN_INLINE ATTN_T256 void pv_all(loom_dtype DT, float *acc, int64_t lda, const float *p,
                                  int64_t ldp, int nr, const void *const *rows, int nc, int d,
                                  const float *alpha, int64_t ahead) {
    int r = 0;
    for (; r + 2 <= nr; r += 2) pv_rows(2, DT, acc + r * lda, lda, p + r * ldp, ldp, rows, nc, d, alpha + r, ahead);
    if (r < nr) pv_rows(1, DT, acc + r * lda, lda, p + r * ldp, ldp, rows, nc, d, alpha + r, ahead);
}

/* Rows r < RB of acc, columns x0 .. x0 + 8 NV - 1, over the tile's keys:
 * RB * NV <= 12 accumulators. Four rows
 * hold the NV V vectors of a key and broadcast each row's p in turn; one or
 * two hold their p and stream V. Each V vector is loaded and widened once for
 * the RB rows. own: these rows prefetch every line of their columns at the
 * distance; pf (the first columns' pass only) names the other stream. */
ATTN_INLINE ATTN_T256 void pv_cols(int RB, int NV, loom_dtype DT, float *acc, int64_t lda, const float *p,
                                   int64_t ldp, const void *const *rows, int nc, int x0, const float *alpha,
                                   int own, const attn_dec_pf *pf, int64_t ahead) {
    const int64_t es = DT == LOOM_F32 ? 4 : DT == LOOM_I8 ? 1 : 2;
    __m256 ac[12];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        __m256 al = _mm256_set1_ps(alpha[r]);
#pragma GCC unroll 12
        for (int v = 0; v < NV; v++) ac[r * NV + v] = _mm256_mul_ps(al, _mm256_loadu_ps(acc + r * lda + x0 + 8 * v));
    }
    for (int c = 0; c < nc; c++) {
        const void *vr = rows[c];
        attn_dec_pf_row(pf, c);
        if (RB == 4) {
            __m256 vv[3];
#pragma GCC unroll 3
            for (int v = 0; v < NV; v++) {
                if (own && ((x0 + 8 * v) * es) % 64 == 0) attn_dec_prefetch(vr, (x0 + 8 * v) * es, ahead);
                vv[v] = attn_load8(vr, x0 + 8 * v, DT, 8);
            }
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                __m256 pb = _mm256_broadcast_ss(p + r * ldp + c);
#pragma GCC unroll 3
                for (int v = 0; v < NV; v++) ac[r * NV + v] = _mm256_fmadd_ps(pb, vv[v], ac[r * NV + v]);
            }
        } else {
            __m256 pb[2];
#pragma GCC unroll 2
            for (int r = 0; r < RB; r++) pb[r] = _mm256_broadcast_ss(p + r * ldp + c);
#pragma GCC unroll 12
            for (int v = 0; v < NV; v++) {
                if (own && ((x0 + 8 * v) * es) % 64 == 0) attn_dec_prefetch(vr, (x0 + 8 * v) * es, ahead);
                __m256 vv = attn_load8(vr, x0 + 8 * v, DT, 8);
#pragma GCC unroll 2
                for (int r = 0; r < RB; r++) ac[r * NV + v] = _mm256_fmadd_ps(pb[r], vv, ac[r * NV + v]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 12
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(acc + r * lda + x0 + 8 * v, ac[r * NV + v]);
}

/* RB rows over all d columns (d % 8 == 0): passes of 12 / RB vectors (four
 * rows: two, eight accumulators; three, 12, ran the hot P.V at 13.2-15.9
 * against 11.9-13.6 ns per key, Zen 4), then of two and of one. */
ATTN_INLINE ATTN_T256 void pv_cols_all(int RB, loom_dtype DT, float *acc, int64_t lda, const float *p,
                                       int64_t ldp, const void *const *rows, int nc, int d, const float *alpha,
                                       int own, const attn_dec_pf *pf, int64_t ahead) {
    const int NVM = RB == 4 ? 2 : 12 / RB;
    int x0 = 0;
    for (; x0 + 8 * NVM <= d; x0 += 8 * NVM)
        pv_cols(RB, NVM, DT, acc, lda, p, ldp, rows, nc, x0, alpha, own, x0 ? NULL : pf, ahead);
    for (; x0 + 16 <= d; x0 += 16)
        pv_cols(RB, 2, DT, acc, lda, p, ldp, rows, nc, x0, alpha, own, x0 ? NULL : pf, ahead);
    for (; x0 < d; x0 += 8) pv_cols(RB, 1, DT, acc, lda, p, ldp, rows, nc, x0, alpha, own, x0 ? NULL : pf, ahead);
}

/* d % 8 == 0: four rows per pass where there are four (each V vector widened
 * once for the GQA group), then pairs, then one. */
ATTN_INLINE ATTN_T256 void pv_rows8(loom_dtype DT, float *acc, int64_t lda, const float *p, int64_t ldp, int nr,
                                    const void *const *rows, int nc, int d, const float *alpha,
                                    const attn_dec_pf *pf, int64_t ahead) {
    int r = 0;
#define PV_COLS(RB) \
    pv_cols_all(RB, DT, acc + r * lda, lda, p + r * ldp, ldp, rows, nc, d, alpha + r, !r, r ? NULL : pf, ahead)
    for (; r + 4 <= nr; r += 4) PV_COLS(4);
    for (; r + 2 <= nr; r += 2) PV_COLS(2);
    for (; r < nr; r++) PV_COLS(1);
#undef PV_COLS
}

ATTN_INLINE ATTN_T256 void loom_attn_dec_pv_avx2_a(float *acc, int64_t lda, const float *p, int64_t ldp, int nr,
                                     const void *const *rows, loom_dtype dt, int nc, int d,
                                     const float *alpha, const attn_dec_pf *pf, int64_t ahead) {
    /* an f16 V keeps the row pairs' 32-column passes (pv_all): with the four
     * rows' 16-column passes its hot P.V ran 14.6 against 11.5 ns per key
     * (Zen 4), while f32 and bf16 gained (12.6 -> 11.5, 13.7 -> 12.9) */
    if (d % 8 == 0 && dt != LOOM_F16) {
        switch (dt) {
        case LOOM_F32: pv_rows8(LOOM_F32, acc, lda, p, ldp, nr, rows, nc, d, alpha, pf, ahead); break;
        case LOOM_BF16: pv_rows8(LOOM_BF16, acc, lda, p, ldp, nr, rows, nc, d, alpha, pf, ahead); break;
        default: pv_rows8(LOOM_I8, acc, lda, p, ldp, nr, rows, nc, d, alpha, pf, ahead); break;
        }
        return;
    }
    switch (dt) {
    case LOOM_F32: pv_all(LOOM_F32, acc, lda, p, ldp, nr, rows, nc, d, alpha, ahead); break;
    case LOOM_F16: pv_all(LOOM_F16, acc, lda, p, ldp, nr, rows, nc, d, alpha, ahead); break;
    case LOOM_BF16: pv_all(LOOM_BF16, acc, lda, p, ldp, nr, rows, nc, d, alpha, ahead); break;
    default: pv_all(LOOM_I8, acc, lda, p, ldp, nr, rows, nc, d, alpha, ahead); break;
    }
}

ATTN_T256 void loom_attn_dec_pv_avx2(float *acc, int64_t lda, const float *p, int64_t ldp, int nr,
                                     const void *const *rows, loom_dtype dt, int nc, int d,
                                     const float *alpha, const attn_dec_pf *pf) {
    if (dt == LOOM_I8 && d % 16 == 0 && d <= 256 && nc <= ATTN_DEC_TILE_MAX) {
        /* four rows at a time in 16-bit integers; rows whose p it cannot take
         * (NaN or inf, a vanishing largest p, or rounding errors over
         * ATTN_DEC_PQ_ERR) through the widening kernel */
        for (int r = 0; r < nr; r += 4) {
            int rb = nr - r < 4 ? nr - r : 4;
            const attn_dec_pf *f = r ? NULL : pf;
            if (!attn_dec_pv_i8w_avx2(acc + r * lda, lda, p + r * ldp, ldp, rb, rows, nc, d, alpha + r, !r, f))
                ATTN_DEC_WITH_AHEAD(pf, loom_attn_dec_pv_avx2_a, acc + r * lda, lda, p + r * ldp, ldp, rb, rows,
                                    dt, nc, d, alpha + r, f);
        }
        return;
    }
    ATTN_DEC_WITH_AHEAD(pf, loom_attn_dec_pv_avx2_a, acc, lda, p, ldp, nr, rows, dt, nc, d, alpha, pf);
}

/* Four rows of nc scores (a multiple of 8, at most 32) whose reference max
 * stays, side by side, as the AVX-512 level's softmax_rows4_keep_n: hot
 * softmax 2.32 -> 2.12 ns per key (32-key tiles, Zen 4). 64-key i8 tiles keep
 * the rows one by one (2.14 against 2.22 ns per key this way, also with the
 * rows in pairs). 0 if some row needs a new reference (nothing written). */
ATTN_INLINE ATTN_T256 int softmax_rows4_keep(float *s, int64_t lds, int nc, float *m, float *l, float *alpha) {
    __m256 over = _mm256_setzero_ps(), sum[4];
    for (int c = 0; c < nc; c += 8)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) /* (NLE_UQ: a NaN score is "over" too) */
            over = _mm256_or_ps(over, _mm256_cmp_ps(_mm256_loadu_ps(s + r * lds + c),
                                                    _mm256_set1_ps(m[r] + ATTN_DEC_MAX_SLACK), _CMP_NLE_UQ));
    if (_mm256_movemask_ps(over) || _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(m), _mm_set1_ps(-INFINITY))))
        return 0; /* or an empty row */
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) sum[r] = _mm256_setzero_ps();
    for (int c = 0; c < nc; c += 8)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            __m256 e = attn_exp2_256(_mm256_sub_ps(_mm256_loadu_ps(s + r * lds + c), _mm256_set1_ps(m[r])));
            _mm256_storeu_ps(s + r * lds + c, e);
            sum[r] = _mm256_add_ps(sum[r], e);
        }
    _mm_storeu_ps(l, _mm_add_ps(_mm_loadu_ps(l), reduce4(sum)));
    _mm_storeu_ps(alpha, _mm_set1_ps(1.0f));
    return 1;
}

/* As the AVX-512 kernel: the reference max moves only by more than ATTN_DEC_MAX_SLACK. */
ATTN_T256 void loom_attn_softmax_rows_avx2(float *s, int64_t lds, int nr, int nc, float *m,
                                           float *l, float *alpha) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    int r0 = 0; /* groups of four together while their references stay */
    while (nc % 8 == 0 && nc <= 32 && r0 + 4 <= nr &&
           softmax_rows4_keep(s + r0 * lds, lds, nc, m + r0, l + r0, alpha + r0))
        r0 += 4;
    for (int r = r0; r < nr; r++) {
        float *sr = s + r * lds, tmp[8], mo = m[r], sub = mo, al = 1.0f;
        int c8 = nc & ~7; /* whole vectors in place; the tail through tmp, padded with -inf */
        if (c8 < nc)
            for (int j = 0; j < 8; j++) tmp[j] = c8 + j < nc ? sr[c8 + j] : -INFINITY;
        __m256 lim = _mm256_set1_ps(mo + ATTN_DEC_MAX_SLACK), over = _mm256_setzero_ps();
        for (int c = 0; c < c8; c += 8) over = _mm256_or_ps(over, _mm256_cmp_ps(_mm256_loadu_ps(sr + c), lim, _CMP_NLE_UQ));
        if (c8 < nc) over = _mm256_or_ps(over, _mm256_cmp_ps(_mm256_loadu_ps(tmp), lim, _CMP_NLE_UQ));
        if (_mm256_movemask_ps(over) || mo == -INFINITY) {
            __m256 mx = ninf;
            for (int c = 0; c < c8; c += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(sr + c));
            if (c8 < nc) mx = _mm256_max_ps(mx, _mm256_loadu_ps(tmp));
            float mn = attn_hmax8(mx);
            if (mo > mn) mn = mo;
            sub = mn == -INFINITY ? 0.0f : mn; /* a row that saw nothing stays empty */
            al = _mm256_cvtss_f32(attn_exp2_256(_mm256_set1_ps(mo - sub)));
            m[r] = mn;
        }
        __m256 vs = _mm256_set1_ps(sub), sum = _mm256_setzero_ps();
        for (int c = 0; c < c8; c += 8) {
            __m256 e = attn_exp2_256(_mm256_sub_ps(_mm256_loadu_ps(sr + c), vs));
            _mm256_storeu_ps(sr + c, e);
            sum = _mm256_add_ps(sum, e);
        }
        if (c8 < nc) {
            __m256 e = attn_exp2_256(_mm256_sub_ps(_mm256_loadu_ps(tmp), vs));
            _mm256_storeu_ps(tmp, e);
            memcpy(sr + c8, tmp, (size_t)(nc - c8) * sizeof(float));
            sum = _mm256_add_ps(sum, e);
        }
        l[r] = l[r] * al + attn_hsum8(sum);
        alpha[r] = al;
    }
}
#else
typedef int loom_attn_incre_avx2_unused; /* ISO C wants a non-empty translation unit */
#endif
