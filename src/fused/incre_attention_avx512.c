/* AVX-512 decode micro-kernels. Few query rows meet many cached keys, so the
 * dot products run along D: (row, key) pairs accumulate in 16 registers and
 * one transpose-reduction turns them into 16 scores. K/V rows are read in
 * their cache dtype (f32, f16, bf16, i8) and widened in registers, except
 * for d = 64/128/256: bf16 caches on AVX512_BF16 CPUs multiply with vdpbf16ps
 * (dot_bf16, pv_bf16_rows), an i8 K on AVX512_VNNI CPUs with vpdpwssd
 * (dot_i8, also d = 96); see docs/ops.md for their accuracy.
 *
 * Decode streams the cache from DRAM once, so the order of the reads matters
 * as much as the arithmetic. For d = 64/128 the kernels read every K and V
 * row front to back, one row after the other (dot_seq, pv_seq and the bf16 /
 * i8 kernels; an i8 V keeps the half-row kernel pv_rows, which widens each
 * element once): up to four q rows (or accumulator rows) stay in registers
 * and the tile is walked in address order once per row group, which the
 * hardware prefetcher follows. Reading four rows side by side, 64 bytes of
 * each in turn, looks to the prefetcher like four interleaved strided
 * streams: in a synthetic test the same loads and FMAs streamed 6.6 GB/s in
 * that order against 30 GB/s in address order (one core, Zen 5), and in the
 * kernel the loads stopped overlapping with the arithmetic (time = compute
 * + transfer). d = 256 runs as two halves of 128 (dot_halves, dot_bf16_halves
 * and dot_i8_prep for Q.K^T; pv_halves through the d = 128 P.V entry points;
 * an i8 V keeps pv_rows). Other head sizes use the side-by-side kernels
 * (dot_all, pv_rows).
 *
 * On top of that, on its first pass over a tile each kernel prefetches every
 * cache line of the rows it reads ATTN_DEC_PF_DIST bytes further on
 * (attn_dec_prefetch, flash_attention_simd.h: in a contiguous BNSD or paged
 * cache, the rows half a tile to a few tiles ahead), and the rows of the
 * other stream the driver names (attn_dec_pf: the tile's V rows during Q.K^T,
 * the next tile's K rows during P.V). Prefetches never fault, so reading
 * past a cache's end is harmless. */
#include "fused/flash_attention_internal.h"

#include "base/cpu.h"

#if defined(__x86_64__)
#include "fused/flash_attention_simd.h"


/* Lane r*KB + k of z is s[r][k]: row by row with masked stores (KB = 16/RB). */
ATTN_INLINE ATTN_T512 void store_block(int RB, __m512 z, float *s, int64_t lds, int nrv, int ncv) {
    __mmask16 k = (__mmask16)((1u << ncv) - 1);
    if (RB == 1) {
        _mm512_mask_storeu_ps(s, k, z);
    } else if (RB == 2) {
        _mm256_mask_storeu_ps(s, (__mmask8)k, _mm512_castps512_ps256(z));
        if (nrv > 1)
            _mm256_mask_storeu_ps(s + lds, (__mmask8)k,
                                  _mm512_castps512_ps256(_mm512_shuffle_f32x4(z, z, 0xEE)));
    } else { /* 4 or 2 keys per row: through a small buffer (store forwarding) */
        float out[20];
        _mm512_storeu_ps(out, z);
        _mm_storeu_ps(out + 16, _mm_setzero_ps()); /* read (masked off) by the last row of RB = 8 */
        for (int r = 0; r < nrv; r++)
            _mm_mask_storeu_ps(s + r * lds, (__mmask8)k, _mm_loadu_ps(out + r * (16 / RB)));
    }
}

/* RB query rows x 16/RB keys; nrv x ncv of the results are real. */
ATTN_INLINE ATTN_T512 void dot_block(int RB, loom_dtype DT, float *s, int64_t lds,
                                     const float *const *qr, const void *const *kp, int d,
                                     int nrv, int ncv, int64_t ahead) {
    const int KB = 16 / RB;
    __m512 acc[16];
    for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
    const int64_t es = DT == LOOM_F32 ? 4 : DT == LOOM_I8 ? 1 : 2;
    int x = 0;
    for (; x + 16 <= d; x += 16) {
        __m512 qv[8];
        for (int r = 0; r < RB; r++) qv[r] = _mm512_loadu_ps(qr[r] + x);
        if ((x * es) % 64 == 0) /* once per cache line of each row */
            for (int k = 0; k < KB; k++) attn_dec_prefetch(kp[k], x * es, ahead);
        for (int k = 0; k < KB; k++) {
            __m512 kv = attn_load16(kp[k], x, DT, 0xFFFF);
            for (int r = 0; r < RB; r++) acc[r * KB + k] = _mm512_fmadd_ps(qv[r], kv, acc[r * KB + k]);
        }
    }
    if (x < d) { /* q rows are zero padded; the K tail is a masked load */
        __mmask16 km = (__mmask16)((1u << (d - x)) - 1);
        __m512 qv[8];
        for (int r = 0; r < RB; r++) qv[r] = _mm512_loadu_ps(qr[r] + x);
        for (int k = 0; k < KB; k++) {
            __m512 kv = attn_load16(kp[k], x, DT, km);
            for (int r = 0; r < RB; r++) acc[r * KB + k] = _mm512_fmadd_ps(qv[r], kv, acc[r * KB + k]);
        }
    }
    store_block(RB, attn_reduce16_acc(acc), s, lds, nrv, ncv);
}

ATTN_INLINE ATTN_T512 void dot_all(int RB, loom_dtype DT, float *s, int64_t lds, const float *q,
                                   int64_t ldq, int nr, const void *const *rows, int nc, int d, int64_t ahead) {
    const int KB = 16 / RB;
    for (int r0 = 0; r0 < nr; r0 += RB) {
        const float *qr[8];
        for (int r = 0; r < RB; r++) qr[r] = q + (r0 + r < nr ? r0 + r : nr - 1) * ldq;
        int nrv = nr - r0 < RB ? nr - r0 : RB;
        for (int c0 = 0; c0 < nc; c0 += KB) {
            const void *kp[16];
            for (int k = 0; k < KB; k++) kp[k] = rows[c0 + k < nc ? c0 + k : nc - 1];
            dot_block(RB, DT, s + r0 * lds + c0, lds, qr, kp, d, nrv, nc - c0 < KB ? nc - c0 : KB, ahead);
        }
    }
}

/* Keys c0 .. c0+KB-1 (ncv of them real) of dot_seq. */
ATTN_INLINE ATTN_T512 void dot_seq_keys(int RB, int NQ, loom_dtype DT, float *s, int64_t lds,
                                        const __m512 (*qv)[16], const void *const *rows, int c0,
                                        int ncv, int own, const attn_dec_pf *pf, int64_t ahead) {
    const int64_t es = DT == LOOM_F32 ? 4 : DT == LOOM_I8 ? 1 : 2;
    const int KB = 16 / RB;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int k = 0; k < KB; k++) {
        const void *kp = rows[c0 + (k < ncv ? k : ncv - 1)];
        attn_dec_pf_row(pf, c0 + k);
#pragma GCC unroll 16
        for (int v = 0; v < NQ; v++) {
            if (own && (16 * v * es) % 64 == 0) attn_dec_prefetch(kp, 16 * v * es, ahead);
            __m512 kv = attn_load16(kp, 16 * v, DT, 0xFFFF);
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) acc[r * KB + k] = _mm512_fmadd_ps(qv[r][v], kv, acc[r * KB + k]);
        }
    }
    store_block(RB, attn_reduce16_acc(acc), s + c0, lds, RB, ncv); /* lane r*KB + k = s[r][k] */
}

/* RB rows of q (NQ vectors each, d = 16 NQ, held in registers) against every
 * key: each K row is read front to back, one after the other, so the tile
 * streams through memory in address order (the hardware prefetcher follows
 * that; reading a few rows side by side defeats it). KB keys at a time give
 * RB*KB <= 16 accumulators, reduced 16 at once. Whole blocks run in a loop
 * of their own: with the partial block's key clamping inside the hot loop,
 * GCC kept a branch per key and spilled vectors to the stack (f32 Q.K^T
 * 8.70 -> 8.35 ns per key, f16 8.7 -> 7.5, hot, without it). */
ATTN_INLINE ATTN_T512 void dot_seq(int RB, int NQ, loom_dtype DT, float *s, int64_t lds,
                                   const float *q, int64_t ldq, const void *const *rows, int nc,
                                   int own, const attn_dec_pf *pf, int64_t ahead) {
    const int KB = 16 / RB;
    __m512 qv[2][16];
#pragma GCC unroll 16
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 16
        for (int v = 0; v < NQ; v++) qv[r][v] = _mm512_loadu_ps(q + r * ldq + 16 * v);
    int c0 = 0; /* whole blocks without per-key clamping, then the partial one */
    for (; c0 + KB <= nc; c0 += KB) dot_seq_keys(RB, NQ, DT, s, lds, qv, rows, c0, KB, own, pf, ahead);
    if (c0 < nc) dot_seq_keys(RB, NQ, DT, s, lds, qv, rows, c0, nc - c0, own, pf, ahead);
}

/* Head dims whose q rows (or accumulator rows) the address-order kernels keep
 * in registers: 16 NQ floats, NQ = 4, 5, 6, 8. For f32 caches also d = 80
 * and 96, where the side-by-side kernels read DRAM 15-45 % slower. A 16-bit
 * cache at those head dims stays side by side, which widens each element
 * once for four rows: the row-pair kernels widen it twice and measured
 * 17-40 % slower (bf16, d = 80), the vdpbf16ps kernels at d = 96 5-9 %
 * slower. Other head dims use the side-by-side kernels. */
#define DEC_SEQ_80_96(DT) ((DT) == LOOM_F32)
#define DEC_SEQ_D(DT, d) ((d) == 64 || (d) == 128 || (DEC_SEQ_80_96(DT) && ((d) == 80 || (d) == 96)))
/* CALL(NQ) for d = 16 NQ; the 80/96 cases exist only where DEC_SEQ_D admits them */
#define DEC_BY_NQ(DT, d, CALL)                              \
    do {                                                    \
        switch ((d) / 16) {                                 \
        case 4: CALL(4); break;                             \
        case 5: if (DEC_SEQ_80_96(DT)) CALL(5); break;      \
        case 6: if (DEC_SEQ_80_96(DT)) CALL(6); break;      \
        default: CALL(8); break;                            \
        }                                                   \
    } while (0)

/* Rows of the tile's cache rows from byte off on (the second half of d = 256). */
ATTN_INLINE void dec_rows_at(const void **dst, const void *const *rows, int nc, int64_t off) {
    for (int c = 0; c < nc; c++) dst[c] = (const char *)rows[c] + off;
}

/* s[r][c] += t[r][c] (t rows ATTN_DEC_TILE apart): the second half's scores of d = 256. */
ATTN_INLINE void dec_add_scores(float *s, int64_t lds, const float *t, int nr, int nc) {
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) s[r * lds + c] += t[r * ATTN_DEC_TILE + c];
}

ATTN_INLINE ATTN_T512 void dot_dt_d(loom_dtype DT, float *s, int64_t lds, const float *q,
                                    int64_t ldq, int nr, const void *const *rows, int nc, int d,
                                    const attn_dec_pf *pf, int64_t ahead) {
    if (DEC_SEQ_D(DT, d)) { /* the first pass over the keys prefetches the other stream */
        int r = 0;
#define DOT_SEQ(RB, NQ) dot_seq(RB, NQ, DT, s + r * lds, lds, q + r * ldq, ldq, rows, nc, !r, r ? NULL : pf, ahead)
#define DOT_SEQ2(NQ) DOT_SEQ(2, NQ)
#define DOT_SEQ1(NQ) DOT_SEQ(1, NQ)
        for (; r + 2 <= nr; r += 2) DEC_BY_NQ(DT, d, DOT_SEQ2);
        for (; r < nr; r++) DEC_BY_NQ(DT, d, DOT_SEQ1);
#undef DOT_SEQ1
#undef DOT_SEQ2
#undef DOT_SEQ
        return;
    }
    if (nr >= 8) dot_all(8, DT, s, lds, q, ldq, nr, rows, nc, d, ahead);
    else if (nr >= 4) dot_all(4, DT, s, lds, q, ldq, nr, rows, nc, d, ahead);
    else if (nr >= 2) dot_all(2, DT, s, lds, q, ldq, nr, rows, nc, d, ahead);
    else dot_all(1, DT, s, lds, q, ldq, nr, rows, nc, d, ahead);
}

/* d = 256 (not i8) as two halves of 128 through the address-order kernels, the
 * second half's scores added to the first's, eight rows at a time: a q row of
 * 256 floats takes 16 registers, the side-by-side kernel read four rows
 * interleaved. */
ATTN_INLINE ATTN_T512 void dot_halves(loom_dtype DT, float *s, int64_t lds, const float *q,
                                      int64_t ldq, int nr, const void *const *rows, int nc,
                                      const attn_dec_pf *pf, int64_t ahead) {
    const void *hrows[ATTN_DEC_TILE];
    float t[8 * ATTN_DEC_TILE];
    const int64_t es = DT == LOOM_F32 ? 4 : 2;
    dec_rows_at(hrows, rows, nc, 128 * es);
    for (int r0 = 0; r0 < nr; r0 += 8) {
        int n = nr - r0 < 8 ? nr - r0 : 8;
        float *sr = s + r0 * lds;
        dot_dt_d(DT, sr, lds, q + r0 * ldq, ldq, n, rows, nc, 128, r0 ? NULL : pf, ahead);
        dot_dt_d(DT, t, ATTN_DEC_TILE, q + r0 * ldq + 128, ldq, n, hrows, nc, 128, NULL, ahead);
        dec_add_scores(sr, lds, t, n, nc);
    }
}

ATTN_INLINE ATTN_T512 void dot_dt(loom_dtype DT, float *s, int64_t lds, const float *q,
                                  int64_t ldq, int nr, const void *const *rows, int nc, int d,
                                  const attn_dec_pf *pf, int64_t ahead) {
    if (d == 256 && DT != LOOM_I8) dot_halves(DT, s, lds, q, ldq, nr, rows, nc, pf, ahead);
    else dot_dt_d(DT, s, lds, q, ldq, nr, rows, nc, d, pf, ahead);
}

/* ---------------------------------------------------------- i8 caches with AVX512_VNNI */

#define ATTN_T512VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

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
    /* the prefetch distance as a constant in each copy: it folds into the loops */
    if (attn_dec_ahead(pf)) dot_i8_prep_a(s, lds, qp, nr, rows, nc, d, pf, ATTN_DEC_PF_DIST);
    else dot_i8_prep_a(s, lds, qp, nr, rows, nc, d, pf, 0);
}

/* dec_dot through a level's prepared form, for a direct call that has no
 * prepared q: rows converted four at a time on the stack. 0 if qprep does not
 * take this K dtype and head dim (nothing done). */
static int dot_via_prep(int (*qprep)(void *, const float *, int64_t, int, loom_dtype, int, int),
                        void (*dot_prep)(float *, int64_t, const void *, int, const void *const *,
                                         loom_dtype, int, int, const attn_dec_pf *, int),
                        float *s, int64_t lds, const float *q, int64_t ldq, int nr,
                        const void *const *rows, loom_dtype dt, int nc, int d,
                        const attn_dec_pf *pf) {
    _Alignas(64) char qp[4 * ATTN_DEC_QPREP_STRIDE];
    for (int r = 0; r < nr; r += 4) {
        int n = nr - r < 4 ? nr - r : 4;
        if (!qprep(qp, q + r * ldq, ldq, n, dt, d, 0)) return 0;
        dot_prep(s + r * lds, lds, qp, n, rows, dt, nc, d, r ? NULL : pf, 0);
    }
    return 1;
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

ATTN_INLINE ATTN_T512 void loom_attn_dec_dot_avx512_a(float *s, int64_t lds, const float *q, int64_t ldq,
                                        int nr, const void *const *rows, loom_dtype dt, int nc,
                                        int d, const attn_dec_pf *pf, int64_t ahead) {
    if (dot_via_prep(loom_attn_dec_qprep_avx512, loom_attn_dec_dot_prep_avx512, s, lds, q, ldq, nr,
                     rows, dt, nc, d, pf))
        return; /* an i8 K on AVX512_VNNI CPUs */
    switch (dt) {
    case LOOM_F32: dot_dt(LOOM_F32, s, lds, q, ldq, nr, rows, nc, d, pf, ahead); break;
    case LOOM_F16: dot_dt(LOOM_F16, s, lds, q, ldq, nr, rows, nc, d, pf, ahead); break;
    case LOOM_BF16: dot_dt(LOOM_BF16, s, lds, q, ldq, nr, rows, nc, d, pf, ahead); break;
    default: dot_dt(LOOM_I8, s, lds, q, ldq, nr, rows, nc, d, pf, ahead); break;
    }
}

ATTN_T512 void loom_attn_dec_dot_avx512(float *s, int64_t lds, const float *q, int64_t ldq,
                                        int nr, const void *const *rows, loom_dtype dt, int nc,
                                        int d, const attn_dec_pf *pf) {
    /* the prefetch distance as a constant in each copy: it folds into the loops */
    if (attn_dec_ahead(pf)) loom_attn_dec_dot_avx512_a(s, lds, q, ldq, nr, rows, dt, nc, d, pf, ATTN_DEC_PF_DIST);
    else loom_attn_dec_dot_avx512_a(s, lds, q, ldq, nr, rows, dt, nc, d, pf, 0);
}

/* acc rows r0..r0+RB-1, NV vectors from element x0 (masks km) */
ATTN_INLINE ATTN_T512 void pv_block(int RB, int NV, loom_dtype DT, float *acc, int64_t lda,
                                    const float *p, int64_t ldp, const void *const *rows, int nc,
                                    int x0, const __mmask16 *km, const float *alpha,
                                    const attn_dec_pf *pf, int64_t ahead) {
    __m512 ac[4][4];
    for (int r = 0; r < RB; r++) {
        __m512 al = _mm512_set1_ps(alpha[r]);
        for (int v = 0; v < NV; v++)
            ac[r][v] = _mm512_mul_ps(al, _mm512_loadu_ps(acc + r * lda + x0 + 16 * v));
    }
    const int64_t es = DT == LOOM_F32 ? 4 : DT == LOOM_I8 ? 1 : 2;
    for (int c = 0; c < nc; c++) {
        attn_dec_pf_row(pf, c);
        __m512 kv[4];
        for (int64_t off = x0 * es; off < (x0 + 16 * NV) * es; off += 64) attn_dec_prefetch(rows[c], off, ahead);
        for (int v = 0; v < NV; v++) kv[v] = attn_load16(rows[c], x0 + 16 * v, DT, km[v]);
        for (int r = 0; r < RB; r++) {
            __m512 pb = _mm512_set1_ps(p[r * ldp + c]);
            for (int v = 0; v < NV; v++) ac[r][v] = _mm512_fmadd_ps(pb, kv[v], ac[r][v]);
        }
    }
    for (int r = 0; r < RB; r++) /* rows are padded to 16 floats: whole-vector stores */
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(acc + r * lda + x0 + 16 * v, ac[r][v]);
}

ATTN_INLINE ATTN_T512 void pv_rows(int RB, loom_dtype DT, float *acc, int64_t lda, const float *p,
                                   int64_t ldp, const void *const *rows, int nc, int d,
                                   const float *alpha, const attn_dec_pf *pf, int64_t ahead) {
    const __mmask16 full[4] = {0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF};
    int x0 = 0;
    for (; x0 + 64 <= d; x0 += 64) pv_block(RB, 4, DT, acc, lda, p, ldp, rows, nc, x0, full, alpha, x0 ? NULL : pf, ahead);
    for (; x0 < d; x0 += 16) {
        __mmask16 km = d - x0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (d - x0)) - 1);
        pv_block(RB, 1, DT, acc, lda, p, ldp, rows, nc, x0, &km, alpha, x0 ? NULL : pf, ahead);
    }
}

/* RB rows x whole V rows of d = 16 NV floats: each V row is read front to back,
 * one after the other (address order, which the hardware prefetcher follows). */
ATTN_INLINE ATTN_T512 void pv_seq(int RB, int NV, loom_dtype DT, float *acc, int64_t lda,
                                  const float *p, int64_t ldp, const void *const *rows, int nc,
                                  const float *alpha, int own, const attn_dec_pf *pf, int64_t ahead) {
    __m512 ac[4][16];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        __m512 al = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) ac[r][v] = _mm512_mul_ps(al, _mm512_loadu_ps(acc + r * lda + 16 * v));
    }
    const int64_t es = DT == LOOM_F32 ? 4 : DT == LOOM_I8 ? 1 : 2;
    for (int c = 0; c < nc; c++) {
        attn_dec_pf_row(pf, c);
        __m512 pb[4];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) pb[r] = _mm512_set1_ps(p[r * ldp + c]);
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) {
            if (own && (16 * v * es) % 64 == 0) attn_dec_prefetch(rows[c], 16 * v * es, ahead);
            __m512 kv = attn_load16(rows[c], 16 * v, DT, 0xFFFF);
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) ac[r][v] = _mm512_fmadd_ps(pb[r], kv, ac[r][v]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(acc + r * lda + 16 * v, ac[r][v]);
}

ATTN_INLINE ATTN_T512 void pv_all(loom_dtype DT, float *acc, int64_t lda, const float *p,
                                  int64_t ldp, int nr, const void *const *rows, int nc, int d,
                                  const float *alpha, const attn_dec_pf *pf, int64_t ahead) {
    int r = 0;
    if (DEC_SEQ_D(DT, d) && DT != LOOM_I8) { /* i8: half rows, each element widened once */
        for (; d == 64 && r + 4 <= nr; r += 4)
            pv_seq(4, 4, DT, acc + r * lda, lda, p + r * ldp, ldp, rows, nc, alpha + r, !r, r ? NULL : pf, ahead);
#define PV_SEQ(RB, NV) pv_seq(RB, NV, DT, acc + r * lda, lda, p + r * ldp, ldp, rows, nc, alpha + r, !r, r ? NULL : pf, ahead)
#define PV_SEQ2(NV) PV_SEQ(2, NV)
#define PV_SEQ1(NV) PV_SEQ(1, NV)
        for (; r + 2 <= nr; r += 2) DEC_BY_NQ(DT, d, PV_SEQ2);
        if (r < nr) DEC_BY_NQ(DT, d, PV_SEQ1);
#undef PV_SEQ1
#undef PV_SEQ2
#undef PV_SEQ
        return;
    }
    /* an i8 V prefetches the next K tile here (the driver passes pf with two or more
     * threads); other caches at these head dims leave it to the hardware */
    const attn_dec_pf *pf8 = DT == LOOM_I8 ? pf : NULL;
    for (; r + 4 <= nr; r += 4) pv_rows(4, DT, acc + r * lda, lda, p + r * ldp, ldp, rows, nc, d, alpha + r, r ? NULL : pf8, ahead);
    if (r + 2 <= nr) {
        pv_rows(2, DT, acc + r * lda, lda, p + r * ldp, ldp, rows, nc, d, alpha + r, r ? NULL : pf8, ahead);
        r += 2;
    }
    if (r < nr) pv_rows(1, DT, acc + r * lda, lda, p + r * ldp, ldp, rows, nc, d, alpha + r, r ? NULL : pf8, ahead);
}

/* The two halves of d = 256 (not i8) through the d = 128 kernels, as dot_halves;
 * the second without the other stream's rows, at the first's prefetch distance. */
static void pv_halves(attn_dec_pv_fn *pv, float *acc, int64_t lda, const float *p, int64_t ldp,
                      int nr, const void *const *rows, loom_dtype dt, int nc, const float *alpha,
                      const attn_dec_pf *pf) {
    const void *hrows[ATTN_DEC_TILE];
    const attn_dec_pf none = {NULL, 0, 0, attn_dec_ahead(pf)};
    dec_rows_at(hrows, rows, nc, 128 * (int64_t)loom_dtype_size(dt));
    pv(acc, lda, p, ldp, nr, rows, dt, nc, 128, alpha, pf);
    pv(acc + 128, lda, p, ldp, nr, hrows, dt, nc, 128, alpha, &none);
}

ATTN_T512 void loom_attn_dec_pv_avx512(float *acc, int64_t lda, const float *p, int64_t ldp,
                                       int nr, const void *const *rows, loom_dtype dt, int nc,
                                       int d, const float *alpha, const attn_dec_pf *pf) {
    if (d == 256 && dt != LOOM_I8 && nc <= ATTN_DEC_TILE) {
        pv_halves(loom_attn_dec_pv_avx512, acc, lda, p, ldp, nr, rows, dt, nc, alpha, pf);
        return;
    }
#define PV_ALL(DT, A) pv_all(DT, acc, lda, p, ldp, nr, rows, nc, d, alpha, pf, A)
#define PV_DT(A)                                   \
    switch (dt) {                                  \
    case LOOM_F32: PV_ALL(LOOM_F32, A); break;     \
    case LOOM_F16: PV_ALL(LOOM_F16, A); break;     \
    case LOOM_BF16: PV_ALL(LOOM_BF16, A); break;   \
    default: PV_ALL(LOOM_I8, A); break;            \
    }
    /* the prefetch distance as a constant in each copy: it folds into the loops */
    if (attn_dec_ahead(pf)) PV_DT(ATTN_DEC_PF_DIST)
    else PV_DT(0)
#undef PV_DT
#undef PV_ALL
}

/* ---------------------------------------------------------- bf16 caches with AVX512_BF16 */

/* Head dims of the vdpbf16ps kernels, and the byte of a prepared row where q_lo begins */
#define DEC_BF16_D(d) ((d) == 64 || (d) == 128 || (d) == 256)
#define BF16_QLO 512

/* Scores against a bf16 K with vdpbf16ps, d = 32 NQ (64 or 128). Each q row is
 * split into q_hi = bf16(q) and q_lo = bf16(q - q_hi), so q keeps ~16 bits
 * (relative error <= 2^-17) and every product is exact in f32: the scores stay
 * as accurate as the widening kernel's at half the instructions (no widening). */
ATTN_INLINE ATTN_T512BF void bf16_split_q(int NQ, const float *qr, __m512i *qh, __m512i *ql) {
#pragma GCC unroll 8
    for (int v = 0; v < NQ; v++) {
        __m512 a = _mm512_loadu_ps(qr + 32 * v), b = _mm512_loadu_ps(qr + 32 * v + 16);
        __m256i ha = (__m256i)_mm512_cvtneps_pbh(a), hb = (__m256i)_mm512_cvtneps_pbh(b);
        __m512 ra = _mm512_sub_ps(a, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(ha), 16)));
        __m512 rb = _mm512_sub_ps(b, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hb), 16)));
        qh[v] = _mm512_inserti64x4(_mm512_castsi256_si512(ha), hb, 1);
        ql[v] = _mm512_inserti64x4(_mm512_castsi256_si512((__m256i)_mm512_cvtneps_pbh(ra)),
                                   (__m256i)_mm512_cvtneps_pbh(rb), 1);
    }
}

/* One q row (the last of an odd count), 16 keys at a time. HI: q_hi only
 * (inner_precise 1, q rounded to bf16). */
ATTN_INLINE ATTN_T512BF void dot_bf16_row(int HI, int NQ, float *s, const char *qp,
                                          const void *const *rows, int nc, const attn_dec_pf *pf,
                                          int first, int64_t ahead) {
    __m512i qh[4], ql[4];
    for (int v = 0; v < NQ; v++) {
        qh[v] = _mm512_loadu_si512(qp + 64 * v);
        ql[v] = HI ? _mm512_setzero_si512() : _mm512_loadu_si512(qp + BF16_QLO + 64 * v);
    }
    for (int c0 = 0; c0 < nc; c0 += 16) {
        int ncv = nc - c0 < 16 ? nc - c0 : 16;
        __m512 acc[16];
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) {
            const void *kp = rows[c0 + (k < ncv ? k : ncv - 1)];
            if (first) attn_dec_pf_row(pf, c0 + k);
            acc[k] = _mm512_setzero_ps();
#pragma GCC unroll 4
            for (int v = 0; v < NQ; v++) {
                if (first) attn_dec_prefetch(kp, 64 * v, ahead);
                __m512i kv = _mm512_loadu_si512((const char *)kp + 64 * v);
                acc[k] = _mm512_dpbf16_ps(acc[k], (__m512bh)qh[v], (__m512bh)kv);
                if (!HI) acc[k] = _mm512_dpbf16_ps(acc[k], (__m512bh)ql[v], (__m512bh)kv);
            }
        }
        _mm512_mask_storeu_ps(s + c0, (__mmask16)((1u << ncv) - 1), attn_reduce16_acc(acc));
    }
}

/* Lane j (j < 8) of the result = sum of the lanes of a[j]: three shuffle+add
 * levels and a fold, the cost per sum of attn_reduce16. */
ATTN_INLINE ATTN_T512 __m256 reduce8(const __m512 *a) {
    __m512 w[4], x[2];
    for (int k = 0; k < 4; k++) /* 256-bit half 0: a[2k] folded, half 1: a[2k + 1] */
        w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xEE));
    for (int k = 0; k < 2; k++) /* 128-bit block b of x[k]: a[4k + b] */
        x[k] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], 0x88),
                             _mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], 0xDD));
    __m512 y = _mm512_add_ps(_mm512_unpacklo_ps(x[0], x[1]), _mm512_unpackhi_ps(x[0], x[1]));
    y = _mm512_add_ps(y, _mm512_permute_ps(y, 0x4E)); /* lane 4b: a[b], lane 4b + 1: a[4 + b] */
    const __m512i ix = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(ix, y));
}

/* Keys c0 .. c0+3 (ncv of them real) against the two rows' q parts. */
ATTN_INLINE ATTN_T512BF void dot_bf16_keys4(int HI, int NQ, float *s, int64_t lds, const __m512i (*qh)[4],
                                            const __m512i (*ql)[4], const void *const *rows,
                                            int c0, int ncv, const attn_dec_pf *pf, int first, int64_t ahead) {
    __m512 acc[8], accl[8]; /* acc[k]: row r, acc[4 + k]: row r + 1; accl: their q_lo products */
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const void *kp = rows[c0 + (k < ncv ? k : ncv - 1)];
        if (first) attn_dec_pf_row(pf, c0 + k);
        acc[k] = _mm512_setzero_ps();
        acc[4 + k] = _mm512_setzero_ps();
        accl[k] = _mm512_setzero_ps();
        accl[4 + k] = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int v = 0; v < NQ; v++) {
            if (first) attn_dec_prefetch(kp, 64 * v, ahead);
            __m512i kv = _mm512_loadu_si512((const char *)kp + 64 * v);
            acc[k] = _mm512_dpbf16_ps(acc[k], (__m512bh)qh[0][v], (__m512bh)kv);
            acc[4 + k] = _mm512_dpbf16_ps(acc[4 + k], (__m512bh)qh[1][v], (__m512bh)kv);
            if (!HI) {
                accl[k] = _mm512_dpbf16_ps(accl[k], (__m512bh)ql[0][v], (__m512bh)kv);
                accl[4 + k] = _mm512_dpbf16_ps(accl[4 + k], (__m512bh)ql[1][v], (__m512bh)kv);
            }
        }
    }
    if (!HI) /* the q_lo products in accumulators of their own: chains half as long */
        for (int j = 0; j < 8; j++) acc[j] = _mm512_add_ps(acc[j], accl[j]);
    __m256 z = reduce8(acc);
    __mmask8 m = (__mmask8)((1u << ncv) - 1);
    _mm_mask_storeu_ps(s + c0, m, _mm256_castps256_ps128(z));
    _mm_mask_storeu_ps(s + lds + c0, m, _mm256_extractf128_ps(z, 1));
}

/* Rows in pairs (q hi + lo of both: 16 registers), 4 keys at a time (8
 * accumulators, reduce8): each K row is loaded once per pair of rows instead
 * of once per row (measured from DRAM, in-process A/B: +2-5 %; hot, the same).
 * The q_lo products go to 8 accumulators of their own, added before the
 * reduction: one chain of 8 dependent vdpbf16ps per (row, key) was longer than
 * the block's throughput (hot 6.7 -> 5.9 ns per key; bench_attention --ab, a
 * temporary variant: +1.5..+3.5 points on one thread, -0.2..+2.5 on two).
 * The first pass over the keys prefetches. Whole blocks of 4 keys take a loop
 * of their own (no per-key clamping), the last partial block a second one:
 * with the clamping in the hot loop GCC reloaded six q vectors from the stack
 * in every block. */
ATTN_INLINE ATTN_T512BF void dot_bf16(int HI, int NQ, float *s, int64_t lds, const char *qp, int nr,
                                      const void *const *rows, int nc, const attn_dec_pf *pf, int64_t ahead) {
    int r = 0;
    for (; r + 2 <= nr; r += 2) {
        __m512i qh[2][4], ql[2][4];
#pragma GCC unroll 2
        for (int i = 0; i < 2; i++) {
            const char *row = qp + (size_t)(r + i) * ATTN_DEC_QPREP_STRIDE;
#pragma GCC unroll 4
            for (int v = 0; v < NQ; v++) {
                qh[i][v] = _mm512_loadu_si512(row + 64 * v);
                ql[i][v] = HI ? _mm512_setzero_si512() : _mm512_loadu_si512(row + BF16_QLO + 64 * v);
            }
        }
        int c0 = 0;
        if (r == 0)
            for (; c0 + 4 <= nc; c0 += 4) dot_bf16_keys4(HI, NQ, s, lds, qh, ql, rows, c0, 4, pf, 1, ahead);
        else
            for (; c0 + 4 <= nc; c0 += 4) dot_bf16_keys4(HI, NQ, s + r * lds, lds, qh, ql, rows, c0, 4, pf, 0, ahead);
        if (c0 < nc) dot_bf16_keys4(HI, NQ, s + r * lds, lds, qh, ql, rows, c0, nc - c0, pf, r == 0, ahead);
    }
    if (r < nr) dot_bf16_row(HI, NQ, s + r * lds, qp + (size_t)r * ATTN_DEC_QPREP_STRIDE, rows, nc, pf, r == 0, ahead);
}

/* d = 256 as two halves of 128 through dot_bf16 (a prepared row's halves
 * start 256 bytes apart in both its q_hi and q_lo parts), the second half's
 * scores added to the first's, eight rows at a time. Two rows' q parts at 256
 * would take 32 registers; one row at a time (q_lo read from memory, 8 keys,
 * reduce8) measured 13.5 ns per key hot against 12.4 this way (four rows). */
ATTN_INLINE ATTN_T512BF void dot_bf16_halves(int HI, float *s, int64_t lds, const char *qp, int nr,
                                        const void *const *rows, int nc, const attn_dec_pf *pf, int64_t ahead) {
    const void *hrows[ATTN_DEC_TILE];
    float t[8 * ATTN_DEC_TILE];
    dec_rows_at(hrows, rows, nc, 256);
    for (int r0 = 0; r0 < nr; r0 += 8) {
        int n = nr - r0 < 8 ? nr - r0 : 8;
        const char *q0 = qp + (size_t)r0 * ATTN_DEC_QPREP_STRIDE;
        float *sr = s + r0 * lds;
        if (HI) {
            dot_bf16(1, 4, sr, lds, q0, n, rows, nc, r0 ? NULL : pf, ahead);
            dot_bf16(1, 4, t, ATTN_DEC_TILE, q0 + 256, n, hrows, nc, NULL, ahead);
        } else {
            dot_bf16(0, 4, sr, lds, q0, n, rows, nc, r0 ? NULL : pf, ahead);
            dot_bf16(0, 4, t, ATTN_DEC_TILE, q0 + 256, n, hrows, nc, NULL, ahead);
        }
        dec_add_scores(sr, lds, t, n, nc);
    }
}

/* q rows split into bf16 hi and lo parts (ATTN_DEC_QPREP_STRIDE bytes a row: q_hi
 * vectors from byte 0, q_lo from byte BF16_QLO), once per (batch, kv head) by the
 * driver: the split in front of every tile cost as the i8 rounding did. With
 * hp (inner_precise 1) only q_hi, q rounded to bf16 as the prefill kernel's
 * inner_precise 1 rounds it: one vdpbf16ps per product instead of two (hot,
 * 6.7 -> 4.3 ns per key for the four rows of GQA 32/8 at d = 128). */
static ATTN_T512BF void bf16_prep_rows(char *qp, const float *q, int64_t ldq, int nr, int NQ, int hp) {
    for (int r = 0; r < nr; r++) {
        __m512i qh[8], ql[8];
        char *row = qp + (size_t)r * ATTN_DEC_QPREP_STRIDE;
        bf16_split_q(NQ, q + r * ldq, qh, ql);
        for (int v = 0; v < NQ; v++) {
            _mm512_storeu_si512(row + 64 * v, qh[v]);
            if (!hp) _mm512_storeu_si512(row + BF16_QLO + 64 * v, ql[v]);
        }
    }
}

ATTN_T512BF int loom_attn_dec_qprep_avx512bf(void *qp, const float *q, int64_t ldq, int nr,
                                             loom_dtype kdt, int d, int hp) {
    if (kdt != LOOM_BF16 || !DEC_BF16_D(d))
        return loom_attn_dec_qprep_avx512(qp, q, ldq, nr, kdt, d, hp);
    bf16_prep_rows(qp, q, ldq, nr, d / 32, hp);
    return 1;
}

ATTN_INLINE ATTN_T512BF void loom_attn_dec_dot_prep_avx512bf_a(float *s, int64_t lds, const void *qp, int nr,
                                                 const void *const *rows, loom_dtype dt, int nc,
                                                 int d, const attn_dec_pf *pf, int hp, int64_t ahead) {
    if (dt != LOOM_BF16) loom_attn_dec_dot_prep_avx512(s, lds, qp, nr, rows, dt, nc, d, pf, hp);
    else if (d == 256) dot_bf16_halves(hp, s, lds, qp, nr, rows, nc, pf, ahead);
    else if (hp && d == 128) dot_bf16(1, 4, s, lds, qp, nr, rows, nc, pf, ahead);
    else if (hp) dot_bf16(1, 2, s, lds, qp, nr, rows, nc, pf, ahead);
    else if (d == 128) dot_bf16(0, 4, s, lds, qp, nr, rows, nc, pf, ahead);
    else dot_bf16(0, 2, s, lds, qp, nr, rows, nc, pf, ahead);
}

ATTN_T512BF void loom_attn_dec_dot_prep_avx512bf(float *s, int64_t lds, const void *qp, int nr,
                                                 const void *const *rows, loom_dtype dt, int nc,
                                                 int d, const attn_dec_pf *pf, int hp) {
    /* the prefetch distance as a constant in each copy: it folds into the loops */
    if (attn_dec_ahead(pf)) loom_attn_dec_dot_prep_avx512bf_a(s, lds, qp, nr, rows, dt, nc, d, pf, hp, ATTN_DEC_PF_DIST);
    else loom_attn_dec_dot_prep_avx512bf_a(s, lds, qp, nr, rows, dt, nc, d, pf, hp, 0);
}

ATTN_T512BF void loom_attn_dec_dot_avx512bf(float *s, int64_t lds, const float *q, int64_t ldq,
                                            int nr, const void *const *rows, loom_dtype dt, int nc,
                                            int d, const attn_dec_pf *pf) {
    if (!dot_via_prep(loom_attn_dec_qprep_avx512bf, loom_attn_dec_dot_prep_avx512bf, s, lds, q, ldq,
                      nr, rows, dt, nc, d, pf))
        loom_attn_dec_dot_avx512(s, lds, q, ldq, nr, rows, dt, nc, d, pf);
}

/* The accumulator layout of pv_bf16: vdpbf16ps over key pairs of 32 x values
 * (unpacked lo/hi within 128-bit lanes) leaves x = 8L + i in lane 4L + i of
 * "lo" and x = 8L + 4 + i in lane 4L + i of "hi" (L = 0..3, i = 0..3). */
ATTN_INLINE ATTN_T512BF void pv_bf16_to_pairs(__m512 n0, __m512 n1, __m512 *lo, __m512 *hi) {
    const __m512i il = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    const __m512i ih = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    *lo = _mm512_permutex2var_ps(n0, il, n1);
    *hi = _mm512_permutex2var_ps(n0, ih, n1);
}
ATTN_INLINE ATTN_T512BF void pv_bf16_from_pairs(__m512 lo, __m512 hi, __m512 *n0, __m512 *n1) {
    const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i i1 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    *n0 = _mm512_permutex2var_ps(lo, i0, hi);
    *n1 = _mm512_permutex2var_ps(lo, i1, hi);
}

/* Keys c and c + 1 (the second only if two) into the accumulators of pv_bf16_rows. */
ATTN_INLINE ATTN_T512BF void pv_bf16_pair(int RB, int NC, __m512 (*ac)[8], const uint16_t *pb,
                                          int64_t ldb, const void *const *rows, int c, int two,
                                          int own, const attn_dec_pf *pf, int64_t ahead) {
    const char *v0 = rows[c], *v1 = two ? rows[c + 1] : NULL;
    attn_dec_pf_row(pf, c);
    attn_dec_pf_row(pf, c + 1);
    __m512i pp[2];
#pragma GCC unroll 2
    for (int r = 0; r < RB; r++) {
        uint32_t pair;
        memcpy(&pair, pb + r * ldb + c, sizeof pair);
        pp[r] = _mm512_set1_epi32((int)pair);
    }
#pragma GCC unroll 4
    for (int j = 0; j < NC; j++) {
        if (own) attn_dec_prefetch(v0, 64 * j, ahead);
        __m512i a = _mm512_loadu_si512(v0 + 64 * j), b = _mm512_setzero_si512();
        if (two) {
            if (own) attn_dec_prefetch(v1, 64 * j, ahead);
            b = _mm512_loadu_si512(v1 + 64 * j);
        }
        __m512i lo = _mm512_unpacklo_epi16(a, b), hi = _mm512_unpackhi_epi16(a, b);
#pragma GCC unroll 2
        for (int r = 0; r < RB; r++) {
            ac[r][2 * j] = _mm512_dpbf16_ps(ac[r][2 * j], (__m512bh)lo, (__m512bh)pp[r]);
            ac[r][2 * j + 1] = _mm512_dpbf16_ps(ac[r][2 * j + 1], (__m512bh)hi, (__m512bh)pp[r]);
        }
    }
}

/* P.V against a bf16 V with vdpbf16ps over key pairs, P rounded to bf16 (as the
 * prefill kernel's bf16 path: relative error <= 2^-9 per probability), d = 32 NC.
 * RB rows (2 NC accumulators each); an odd last key pairs with zeros. pb holds
 * the rows' probabilities as bf16, ldb apart, zero padded to even length. */
ATTN_INLINE ATTN_T512BF void pv_bf16_rows(int RB, int NC, float *acc, int64_t lda,
                                          const uint16_t *pb, int64_t ldb,
                                          const void *const *rows, int nc, const float *alpha,
                                          int own, const attn_dec_pf *pf, int64_t ahead) {
    __m512 ac[2][8];
#pragma GCC unroll 2
    for (int r = 0; r < RB; r++) {
        __m512 al = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 4
        for (int j = 0; j < NC; j++)
            pv_bf16_to_pairs(_mm512_mul_ps(al, _mm512_loadu_ps(acc + r * lda + 32 * j)),
                             _mm512_mul_ps(al, _mm512_loadu_ps(acc + r * lda + 32 * j + 16)),
                             &ac[r][2 * j], &ac[r][2 * j + 1]);
    }
    int c = 0; /* whole pairs, then an odd last key */
    for (; c + 2 <= nc; c += 2) pv_bf16_pair(RB, NC, ac, pb, ldb, rows, c, 1, own, pf, ahead);
    if (c < nc) pv_bf16_pair(RB, NC, ac, pb, ldb, rows, c, 0, own, pf, ahead);
#pragma GCC unroll 2
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
        for (int j = 0; j < NC; j++) {
            __m512 n0, n1;
            pv_bf16_from_pairs(ac[r][2 * j], ac[r][2 * j + 1], &n0, &n1);
            _mm512_storeu_ps(acc + r * lda + 32 * j, n0);
            _mm512_storeu_ps(acc + r * lda + 32 * j + 16, n1);
        }
}

/* nr rows of probabilities (nc <= ATTN_DEC_TILE each) rounded to bf16 into pb
 * (rows ldb apart), zero padded to the next 16: an odd last key pairs with 0. */
ATTN_INLINE ATTN_T512BF void pv_probs_bf16(uint16_t *pb, int64_t ldb, const float *p, int64_t ldp,
                                           int nr, int nc) {
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c += 16) {
            __mmask16 k = nc - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nc - c)) - 1);
            _mm256_storeu_si256((__m256i *)(pb + r * ldb + c),
                                (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, p + r * ldp + c)));
        }
}

ATTN_INLINE ATTN_T512BF void loom_attn_dec_pv_avx512bf_a(float *acc, int64_t lda, const float *p, int64_t ldp,
                                           int nr, const void *const *rows, loom_dtype dt, int nc,
                                           int d, const float *alpha, const attn_dec_pf *pf, int64_t ahead) {
    if (dt != LOOM_BF16 || (d != 64 && d != 128) || nc > ATTN_DEC_TILE) {
        loom_attn_dec_pv_avx512(acc, lda, p, ldp, nr, rows, dt, nc, d, alpha, pf);
        return;
    }
    /* probabilities as bf16, two rows at a time, zero padded to an even count */
    uint16_t pb[2][ATTN_DEC_TILE + 32];
    const int ldb = ATTN_DEC_TILE + 32;
    for (int r0 = 0; r0 < nr; r0 += 2) {
        int rb = nr - r0 < 2 ? nr - r0 : 2;
        pv_probs_bf16(pb[0], ldb, p + r0 * ldp, ldp, rb, nc);
        float *ar = acc + r0 * lda;
#define PV_BF(RB, NC) pv_bf16_rows(RB, NC, ar, lda, pb[0], ldb, rows, nc, alpha + r0, !r0, r0 ? NULL : pf, ahead)
        if (rb == 2) {
            if (d == 128) PV_BF(2, 4);
            else PV_BF(2, 2);
        } else {
            if (d == 128) PV_BF(1, 4);
            else PV_BF(1, 2);
        }
#undef PV_BF
    }
}

ATTN_T512BF void loom_attn_dec_pv_avx512bf(float *acc, int64_t lda, const float *p, int64_t ldp,
                                           int nr, const void *const *rows, loom_dtype dt, int nc,
                                           int d, const float *alpha, const attn_dec_pf *pf) {
    if (d == 256 && dt == LOOM_BF16 && nc <= ATTN_DEC_TILE) { /* two rows of 256 would need 32 accumulators */
        pv_halves(loom_attn_dec_pv_avx512bf, acc, lda, p, ldp, nr, rows, dt, nc, alpha, pf);
        return;
    }
    /* the prefetch distance as a constant in each copy: it folds into the loops */
    if (attn_dec_ahead(pf)) loom_attn_dec_pv_avx512bf_a(acc, lda, p, ldp, nr, rows, dt, nc, d, alpha, pf, ATTN_DEC_PF_DIST);
    else loom_attn_dec_pv_avx512bf_a(acc, lda, p, ldp, nr, rows, dt, nc, d, alpha, pf, 0);
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
    /* the prefetch distance as a constant in each copy: it folds into the loops */
    if (attn_dec_ahead(pf)) loom_attn_dec_pv_hp_avx512bf_a(acc, lda, p, ldp, nr, rows, dt, nc, d, alpha, pf, ATTN_DEC_PF_DIST);
    else loom_attn_dec_pv_hp_avx512bf_a(acc, lda, p, ldp, nr, rows, dt, nc, d, alpha, pf, 0);
}

/* Online softmax along each row. The running max m[r] moves only when a score
 * passes it by more than ATTN_DEC_MAX_SLACK, so most tiles skip the max
 * reduction and the rescale (alpha = 1) and go straight to the exponentials,
 * which then reach up to 2^ATTN_DEC_MAX_SLACK: m[r] is the reference the
 * row's l and accumulator are kept against, not always the largest score. */
ATTN_T512 void loom_attn_softmax_rows_avx512(float *s, int64_t lds, int nr, int nc, float *m,
                                             float *l, float *alpha) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int r = 0; r < nr; r++) {
        float *sr = s + r * lds, mo = m[r], sub = mo, al = 1.0f;
        __m512 lim = _mm512_set1_ps(mo + ATTN_DEC_MAX_SLACK);
        __mmask16 over = 0; /* scores above the slack (or NaN) */
        for (int c = 0; c < nc; c += 16) {
            __mmask16 k = nc - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nc - c)) - 1);
            over |= _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, sr + c), lim, _CMP_NLE_UQ);
        }
        if (over || mo == -INFINITY) { /* a new reference: the max, as without slack */
            __m512 mx = ninf;
            for (int c = 0; c < nc; c += 16) {
                __mmask16 k = nc - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nc - c)) - 1);
                mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(ninf, k, sr + c));
            }
            float mn = _mm512_reduce_max_ps(mx);
            if (mo > mn) mn = mo;
            sub = mn == -INFINITY ? 0.0f : mn; /* a row that saw nothing stays empty */
            al = _mm512_cvtss_f32(attn_exp2_512(_mm512_set1_ps(mo - sub)));
            m[r] = mn;
        }
        __m512 vs = _mm512_set1_ps(sub), sum = _mm512_setzero_ps();
        for (int c = 0; c < nc; c += 16) {
            __mmask16 k = nc - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nc - c)) - 1);
            __m512 e = attn_exp2_512(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, k, sr + c), vs));
            _mm512_mask_storeu_ps(sr + c, k, e);
            sum = _mm512_add_ps(sum, e);
        }
        l[r] = l[r] * al + _mm512_reduce_add_ps(sum);
        alpha[r] = al;
    }
}
#else
typedef int loom_attn_incre_avx512_unused; /* ISO C wants a non-empty translation unit */
#endif
