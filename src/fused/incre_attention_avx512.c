/* AVX-512 decode micro-kernels. Few query rows meet many cached keys, so the
 * dot products run along D: (row, key) pairs accumulate in 16 registers and
 * one transpose-reduction turns them into 16 scores. K/V rows are read in
 * their cache dtype (f32, f16, bf16, i8) and widened in registers, except
 * for d = 64/128/256: bf16 caches on AVX512_BF16 CPUs multiply with vdpbf16ps
 * (dot_bf16, pv_bf16_rows in incre_attention_avx512_bf16.c), i8 caches on
 * AVX512_VNNI CPUs with vpdpwssd (dot_i8, also d = 96, and pv_i8w_pass, any
 * multiple of 64, in incre_attention_avx512_i8.c); see docs/ops.md for their
 * accuracy. This file holds the kernels
 * that widen every dtype to f32, the entry points of the plain AVX-512 level
 * and the softmax.
 *
 * Decode streams the cache from DRAM once, so the order of the reads matters
 * as much as the arithmetic. For d = 64/128 the kernels read every K and V
 * row front to back, one row after the other (dot_seq, pv_seq and the bf16 /
 * i8 kernels; the i8 and bf16 V kernels take half rows of 64 values, and
 * without VNNI an i8 V keeps the half-row kernel pv_rows, which widens each
 * element once): up to four q rows (or accumulator rows) stay in registers
 * and the tile is walked in address order once per row group, which the
 * hardware prefetcher follows. Reading four rows side by side, 64 bytes of
 * each in turn, looks to the prefetcher like four interleaved strided
 * streams: in a synthetic test the same loads and FMAs streamed 6.6 GB/s in
 * that order against 30 GB/s in address order (one core, Zen 5), and in the
 * kernel the loads stopped overlapping with the arithmetic (time = compute
 * + transfer). d = 256 runs as two halves of 128 (dot_halves, dot_bf16_halves
 * and dot_i8_prep for Q.K^T; pv_halves through the d = 128 P.V entry points;
 * an i8 V takes its 64-value passes over the whole row). Other head sizes use the side-by-side kernels
 * (dot_all, pv_rows).
 *
 * On top of that, on its first pass over a tile each kernel prefetches every
 * cache line of the rows it reads ATTN_DEC_PF_DIST bytes further on (the bf16
 * kernels DEC_BF16_PF_DIST; attn_dec_prefetch, flash_attention_simd.h: in a contiguous BNSD or paged
 * cache, the rows half a tile to a few tiles ahead), and the rows of the
 * other stream the driver names (attn_dec_pf: the tile's V rows during Q.K^T,
 * the next tile's K rows during P.V). Prefetches never fault, so reading
 * past a cache's end is harmless. */
#include "fused/flash_attention_internal.h"

#include "base/cpu.h"

#if defined(__x86_64__)
#include "fused/incre_attention_avx512.h"

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

/* Four rows of q in one sweep over the keys, 4 keys at a time (16
 * accumulators): each K line is loaded once for the four rows, and the tile
 * is read once, front to back, instead of once per row pair (dot_seq), whose
 * second pass back over the tile cost the DRAM stream; q comes from L1. Hot
 * Q.K^T 14.3 -> 11.1 ns per key (f32) and 14.4 -> 12.5 (f16), from DRAM on one
 * thread 65 -> 68-70 % and 53 -> 55-58 % (Zen 4, bench/results/attention.md).
 * own: the first rows' sweep, which prefetches. */
ATTN_INLINE ATTN_T512 void dot_seq4(int NQ, loom_dtype DT, float *s, int64_t lds, const float *q,
                                    int64_t ldq, const void *const *rows, int nc, int own,
                                    const attn_dec_pf *pf, int64_t ahead) {
    const int64_t es = DT == LOOM_F32 ? 4 : DT == LOOM_I8 ? 1 : 2;
    for (int c0 = 0; c0 < nc; c0 += 4) {
        int ncv = nc - c0 < 4 ? nc - c0 : 4;
        __m512 acc[16];
        const void *kp[4];
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
        dec_keys4(kp, rows, c0, ncv, pf);
#pragma GCC unroll 16
        for (int v = 0; v < NQ; v++) {
            __m512 kv[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                if (own && (16 * v * es) % 64 == 0) attn_dec_prefetch(kp[k], 16 * v * es, ahead);
                kv[k] = attn_load16(kp[k], 16 * v, DT, 0xFFFF);
            }
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                __m512 qv = _mm512_loadu_ps(q + r * ldq + 16 * v);
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) acc[4 * r + k] = _mm512_fmadd_ps(qv, kv[k], acc[4 * r + k]);
            }
        }
        store_block(4, attn_reduce16_acc(acc), s + c0, lds, 4, ncv); /* lane 4r + k = s[r][k] */
    }
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


/* Head dims up to 8 (tiny models): two keys per register, key c in lanes
 * 0..7 and key c + 1 in lanes 8..15, against the q row repeated in both
 * halves. A block is RB (1, 2 or 4) rows x 16 / RB key pairs (16
 * accumulators, 32 scores), reduced over each half in three levels instead
 * of the side-by-side kernel's four levels per 16 scores, of which a d <= 8
 * row used at most half the lanes. Output vector o of the reduction holds the
 * block's scores 16 o .. 16 o + 15 in row-major order after one permute. */
ATTN_INLINE ATTN_T512 void dot_pairs_block(int RB, loom_dtype DT, float *s, int64_t lds, const __m512 *qv,
                                           const void *const *rows, int c0, int nc, int nrv, int d) {
    const int KP = 16 / RB, KEYS = 2 * KP;
    const __mmask16 km = (__mmask16)((1u << d) - 1);
    __m512 acc[16];
#pragma GCC unroll 16
    for (int kp = 0; kp < KP; kp++) {
        int c = c0 + 2 * kp;
        __m512 lo = attn_load16(rows[c < nc ? c : nc - 1], 0, DT, km);
        __m512 hi = attn_load16(rows[c + 1 < nc ? c + 1 : nc - 1], 0, DT, km);
        __m512 kv = _mm512_shuffle_f32x4(lo, hi, 0x44); /* [lo.L0 lo.L1 hi.L0 hi.L1] */
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) acc[r * KP + kp] = _mm512_mul_ps(qv[r], kv);
    }
    /* level 1: a pair of accumulators -> [a.h0 a.h1 b.h0 b.h1], 4 partial sums per 128-bit lane */
    __m512 l1[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        l1[i] = _mm512_add_ps(_mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], 0x88),
                              _mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], 0xDD));
    /* levels 2 and 3: four such vectors -> lane 4 m + p = the sum of quarter m of vector p */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const int ncv = nc - c0 < KEYS ? nc - c0 : KEYS;
#pragma GCC unroll 2
    for (int o = 0; o < 2; o++) {
        const __m512 *v = l1 + 4 * o;
        __m512 u = _mm512_add_ps(_mm512_unpacklo_ps(v[0], v[1]), _mm512_unpackhi_ps(v[0], v[1]));
        __m512 w = _mm512_add_ps(_mm512_unpacklo_ps(v[2], v[3]), _mm512_unpackhi_ps(v[2], v[3]));
        __m512 t = _mm512_permutexvar_ps(
            order, _mm512_add_ps(_mm512_shuffle_ps(u, w, 0x44), _mm512_shuffle_ps(u, w, 0xEE)));
        if (RB == 1) { /* keys 16 o .. 16 o + 15 of the row */
            int n = ncv - 16 * o;
            if (n > 0) _mm512_mask_storeu_ps(s + c0 + 16 * o, (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1), t);
        } else if (RB == 2) { /* row o */
            if (o < nrv) _mm512_mask_storeu_ps(s + o * lds + c0, (__mmask16)((1u << ncv) - 1), t);
        } else { /* RB = 4: rows 2 o and 2 o + 1, eight keys each */
            __mmask8 k8 = (__mmask8)((1u << ncv) - 1);
            if (2 * o < nrv) _mm256_mask_storeu_ps(s + 2 * o * lds + c0, k8, _mm512_castps512_ps256(t));
            if (2 * o + 1 < nrv)
                _mm256_mask_storeu_ps(s + (2 * o + 1) * lds + c0, k8,
                                      _mm512_castps512_ps256(_mm512_shuffle_f32x4(t, t, 0xEE)));
        }
    }
}

ATTN_INLINE ATTN_T512 void dot_pairs(int RB, loom_dtype DT, float *s, int64_t lds, const float *q, int64_t ldq,
                                     int nr, const void *const *rows, int nc, int d) {
    for (int r0 = 0; r0 < nr; r0 += RB) {
        __m512 qv[4];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) { /* rows are zero padded to 16 floats: lanes 0..7 twice */
            __m512 z = _mm512_loadu_ps(q + (r0 + r < nr ? r0 + r : nr - 1) * ldq);
            qv[r] = _mm512_shuffle_f32x4(z, z, 0x44);
        }
        int nrv = nr - r0 < RB ? nr - r0 : RB;
        for (int c0 = 0; c0 < nc; c0 += 32 / RB)
            dot_pairs_block(RB, DT, s + r0 * lds, lds, qv, rows, c0, nc, nrv, d);
    }
}

ATTN_INLINE ATTN_T512 void dot_dt_d(loom_dtype DT, float *s, int64_t lds, const float *q,
                                    int64_t ldq, int nr, const void *const *rows, int nc, int d,
                                    const attn_dec_pf *pf, int64_t ahead) {
    if (DEC_SEQ_D(DT, d)) { /* the first pass over the keys prefetches the other stream */
        int r = 0;
#define DOT_SEQ(RB, NQ) dot_seq(RB, NQ, DT, s + r * lds, lds, q + r * ldq, ldq, rows, nc, !r, r ? NULL : pf, ahead)
#define DOT_SEQ2(NQ) DOT_SEQ(2, NQ)
#define DOT_SEQ1(NQ) DOT_SEQ(1, NQ)
#define DOT_SEQ4(NQ) dot_seq4(NQ, DT, s + r * lds, lds, q + r * ldq, ldq, rows, nc, !r, r ? NULL : pf, ahead)
        for (; r + 4 <= nr; r += 4) DEC_BY_NQ(DT, d, DOT_SEQ4);
#undef DOT_SEQ4
        for (; r + 2 <= nr; r += 2) DEC_BY_NQ(DT, d, DOT_SEQ2);
        for (; r < nr; r++) DEC_BY_NQ(DT, d, DOT_SEQ1);
#undef DOT_SEQ1
#undef DOT_SEQ2
#undef DOT_SEQ
        return;
    }
    if (d <= 8) {
        if (nr >= 4) dot_pairs(4, DT, s, lds, q, ldq, nr, rows, nc, d);
        else if (nr >= 2) dot_pairs(2, DT, s, lds, q, ldq, nr, rows, nc, d);
        else dot_pairs(1, DT, s, lds, q, ldq, nr, rows, nc, d);
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
    const void *hrows[ATTN_DEC_TILE_MAX];
    float t[8 * ATTN_DEC_TILE_MAX];
    const int64_t es = DT == LOOM_F32 ? 4 : 2;
    dec_rows_at(hrows, rows, nc, 128 * es);
    for (int r0 = 0; r0 < nr; r0 += 8) {
        int n = nr - r0 < 8 ? nr - r0 : 8;
        float *sr = s + r0 * lds;
        dot_dt_d(DT, sr, lds, q + r0 * ldq, ldq, n, rows, nc, 128, r0 ? NULL : pf, ahead);
        dot_dt_d(DT, t, ATTN_DEC_TILE_MAX, q + r0 * ldq + 128, ldq, n, hrows, nc, 128, NULL, ahead);
        dec_add_scores(sr, lds, t, n, nc);
    }
}

ATTN_INLINE ATTN_T512 void dot_dt(loom_dtype DT, float *s, int64_t lds, const float *q,
                                  int64_t ldq, int nr, const void *const *rows, int nc, int d,
                                  const attn_dec_pf *pf, int64_t ahead) {
    if (d == 256 && DT != LOOM_I8) dot_halves(DT, s, lds, q, ldq, nr, rows, nc, pf, ahead);
    else dot_dt_d(DT, s, lds, q, ldq, nr, rows, nc, d, pf, ahead);
}

ATTN_INLINE ATTN_T512 void loom_attn_dec_dot_avx512_a(float *s, int64_t lds, const float *q, int64_t ldq,
                                        int nr, const void *const *rows, loom_dtype dt, int nc,
                                        int d, const attn_dec_pf *pf, int64_t ahead) {
    if (attn_dec_dot_via_prep(loom_attn_dec_qprep_avx512, loom_attn_dec_dot_prep_avx512, s, lds, q, ldq,
                              nr, rows, dt, nc, d, pf))
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
    ATTN_DEC_WITH_AHEAD(pf, loom_attn_dec_dot_avx512_a, s, lds, q, ldq, nr, rows, dt, nc, d, pf);
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

/* n <= 8 elements of a row of dtype DT at p, as f32 (the rest zero). */
ATTN_INLINE ATTN_T512 __m256 load8(const void *p, loom_dtype DT, __mmask8 k) {
    switch (DT) {
    case LOOM_F32: return _mm256_maskz_loadu_ps(k, p);
    case LOOM_F16: return _mm256_cvtph_ps(_mm_maskz_loadu_epi16(k, p));
    case LOOM_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_maskz_loadu_epi16(k, p)), 16));
    default: return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, p)));
    }
}

/* Head dims up to 8: RB rows of 8 floats, four keys at a time into four
 * accumulators per row (one FMA chain per key of the group: a single chain
 * waits out the FMA latency at every key), summed in a fixed order at the end. */
ATTN_INLINE ATTN_T512 void pv_small(int RB, loom_dtype DT, float *acc, int64_t lda, const float *p, int64_t ldp,
                                    const void *const *rows, int nc, int d, const float *alpha) {
    const __mmask8 km = (__mmask8)((1u << d) - 1);
    __m256 a[4][4];
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++)
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) a[u][r] = _mm256_setzero_ps();
    int c = 0;
    for (; c + 4 <= nc; c += 4) {
        __m256 v[4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) v[u] = load8(rows[c + u], DT, km);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) a[u][r] = _mm256_fmadd_ps(_mm256_set1_ps(p[r * ldp + c + u]), v[u], a[u][r]);
    }
    for (; c < nc; c++) { /* the last keys into the first chain */
        __m256 v = load8(rows[c], DT, km);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) a[0][r] = _mm256_fmadd_ps(_mm256_set1_ps(p[r * ldp + c]), v, a[0][r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        __m256 sum = _mm256_add_ps(_mm256_add_ps(a[0][r], a[1][r]), _mm256_add_ps(a[2][r], a[3][r]));
        __m256 old = _mm256_mul_ps(_mm256_set1_ps(alpha[r]), _mm256_loadu_ps(acc + r * lda));
        _mm256_storeu_ps(acc + r * lda, _mm256_add_ps(old, sum)); /* rows are padded to 16 floats */
    }
}

ATTN_INLINE ATTN_T512 void pv_all(loom_dtype DT, float *acc, int64_t lda, const float *p,
                                  int64_t ldp, int nr, const void *const *rows, int nc, int d,
                                  const float *alpha, const attn_dec_pf *pf, int64_t ahead) {
    int r = 0;
    if (DEC_SEQ_D(DT, d) && DT != LOOM_I8) { /* i8: half rows, each element widened once */
        /* d = 128: four rows over half rows (16 accumulators), each V element
         * loaded and widened once for the four, instead of row pairs over whole
         * rows: hot P.V 13.6 -> 10.6 ns per key (f32), 13.0 -> 11.4 (f16); from
         * DRAM the same or 2-4 points better (Zen 4, bench/results/attention.md) */
        if (d == 128 && nr >= 4 && nc <= ATTN_DEC_TILE_MAX) { /* the half-row list only where it is used */
            const void *hrows[ATTN_DEC_TILE_MAX];
            dec_rows_at(hrows, rows, nc, 64 * (DT == LOOM_F32 ? 4 : 2));
            for (; r + 4 <= nr; r += 4) {
                pv_seq(4, 4, DT, acc + r * lda, lda, p + r * ldp, ldp, rows, nc, alpha + r, !r, r ? NULL : pf, ahead);
                pv_seq(4, 4, DT, acc + r * lda + 64, lda, p + r * ldp, ldp, hrows, nc, alpha + r, !r, NULL, ahead);
            }
        }
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
    if (d <= 8) {
        for (; r + 4 <= nr; r += 4) pv_small(4, DT, acc + r * lda, lda, p + r * ldp, ldp, rows, nc, d, alpha + r);
        for (; r < nr; r++) pv_small(1, DT, acc + r * lda, lda, p + r * ldp, ldp, rows, nc, d, alpha + r);
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

/* (incre_attention_avx512.h) */
void attn_dec_pv_halves(attn_dec_pv_fn *pv, float *acc, int64_t lda, const float *p, int64_t ldp,
                        int nr, const void *const *rows, loom_dtype dt, int nc, const float *alpha,
                        const attn_dec_pf *pf) {
    const void *hrows[ATTN_DEC_TILE_MAX];
    const attn_dec_pf none = {NULL, 0, 0, attn_dec_ahead(pf), NULL, 0, 0};
    dec_rows_at(hrows, rows, nc, 128 * (int64_t)loom_dtype_size(dt));
    pv(acc, lda, p, ldp, nr, rows, dt, nc, 128, alpha, pf);
    pv(acc + 128, lda, p, ldp, nr, hrows, dt, nc, 128, alpha, &none);
}

ATTN_INLINE ATTN_T512 void loom_attn_dec_pv_avx512_a(float *acc, int64_t lda, const float *p, int64_t ldp,
                                                     int nr, const void *const *rows, loom_dtype dt, int nc,
                                                     int d, const float *alpha, const attn_dec_pf *pf,
                                                     int64_t ahead) {
    switch (dt) {
    case LOOM_F32: pv_all(LOOM_F32, acc, lda, p, ldp, nr, rows, nc, d, alpha, pf, ahead); break;
    case LOOM_F16: pv_all(LOOM_F16, acc, lda, p, ldp, nr, rows, nc, d, alpha, pf, ahead); break;
    case LOOM_BF16: pv_all(LOOM_BF16, acc, lda, p, ldp, nr, rows, nc, d, alpha, pf, ahead); break;
    default: pv_all(LOOM_I8, acc, lda, p, ldp, nr, rows, nc, d, alpha, pf, ahead); break;
    }
}

ATTN_T512 void loom_attn_dec_pv_avx512(float *acc, int64_t lda, const float *p, int64_t ldp,
                                       int nr, const void *const *rows, loom_dtype dt, int nc,
                                       int d, const float *alpha, const attn_dec_pf *pf) {
    if (d == 256 && dt != LOOM_I8 && nc <= ATTN_DEC_TILE_MAX) {
        attn_dec_pv_halves(loom_attn_dec_pv_avx512, acc, lda, p, ldp, nr, rows, dt, nc, alpha, pf);
        return;
    }
    if (dt == LOOM_I8 && loom_attn_i8_vnni() && d % 64 == 0 && nc <= ATTN_DEC_TILE_MAX) {
        /* four rows at a time with vpdpwssd; rows whose p it cannot take (NaN or
         * inf, a vanishing largest p, or rounding errors over ATTN_DEC_PQ_ERR)
         * through the widening kernel */
        for (int r = 0; r < nr; r += 4) {
            int rb = nr - r < 4 ? nr - r : 4;
            const attn_dec_pf *f = r ? NULL : pf;
            if (!attn_dec_pv_i8w(acc + r * lda, lda, p + r * ldp, ldp, rb, rows, nc, d, alpha + r, !r, f))
                ATTN_DEC_WITH_AHEAD(pf, loom_attn_dec_pv_avx512_a, acc + r * lda, lda, p + r * ldp, ldp, rb,
                                    rows, dt, nc, d, alpha + r, f);
        }
        return;
    }
    ATTN_DEC_WITH_AHEAD(pf, loom_attn_dec_pv_avx512_a, acc, lda, p, ldp, nr, rows, dt, nc, d, alpha, pf);
}


/* softmax_rows4_keep for tiles of more than 32 keys (an i8 cache's): the
 * scores loaded twice, the rows side by side so that their chains of sums run
 * in parallel (hot softmax at 64 keys 2.11 -> 1.91 ns per key against the rows
 * one by one; at 32 keys 2.24, against 2.13 with the scores in registers). */
ATTN_INLINE ATTN_T512 int softmax_rows4_keep_n(float *s, int64_t lds, int nc, float *m, float *l, float *alpha) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 lim[4], vs[4], sum[4];
    __mmask16 over = 0;
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        lim[r] = _mm512_set1_ps(m[r] + ATTN_DEC_MAX_SLACK);
        vs[r] = _mm512_set1_ps(m[r]);
        sum[r] = _mm512_setzero_ps();
    }
    for (int c = 0; c < nc; c += 16) {
        const __mmask16 k = attn_tail16(nc, c);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) /* (NLE_UQ: a NaN score is "over" too) */
            over |= _mm512_cmp_ps_mask(_mm512_mask_loadu_ps(ninf, k, s + r * lds + c), lim[r], _CMP_NLE_UQ);
    }
    if (over || _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(m), _mm_set1_ps(-INFINITY)))) return 0; /* or empty */
    for (int c = 0; c < nc; c += 16) {
        const __mmask16 k = attn_tail16(nc, c);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            __m512 e = attn_exp2_512(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, k, s + r * lds + c), vs[r]));
            _mm512_mask_storeu_ps(s + r * lds + c, k, e);
            sum[r] = _mm512_add_ps(sum[r], e);
        }
    }
    __m128 t = attn_fold4_ps(0, sum);
    _mm_storeu_ps(l, _mm_add_ps(_mm_loadu_ps(l), t));
    _mm_storeu_ps(alpha, _mm_set1_ps(1.0f));
    return 1;
}

/* Four rows of scores whose reference max stays (no score above m[r] +
 * ATTN_DEC_MAX_SLACK, no NaN, no empty row): the common tile. The four rows'
 * sums meet in one transposed reduction instead of four reductions to
 * scalars: softmax_rows 2.48 -> 2.13 ns per key hot (four rows, Zen 4). Up to
 * 32 scores a row stay in registers; longer rows take softmax_rows4_keep_n. 0
 * if some row needs a new reference (nothing written); the caller then takes
 * the rows one by one. */
ATTN_INLINE ATTN_T512 int softmax_rows4_keep(float *s, int64_t lds, int nc, float *m, float *l, float *alpha) {
    if (nc > 32) return softmax_rows4_keep_n(s, lds, nc, m, l, alpha);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __mmask16 k0 = attn_tail16(nc, 0), k1 = attn_tail16(nc, 16);
    __m512 x[8];
    __mmask16 over = 0;
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        __m512 lim = _mm512_set1_ps(m[r] + ATTN_DEC_MAX_SLACK);
        x[2 * r] = _mm512_mask_loadu_ps(ninf, k0, s + r * lds);
        x[2 * r + 1] = _mm512_mask_loadu_ps(ninf, k1, s + r * lds + 16);
        over |= _mm512_cmp_ps_mask(x[2 * r], lim, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(x[2 * r + 1], lim, _CMP_NLE_UQ);
    } /* (NLE_UQ: a NaN score is "over" too) */
    if (over || _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(m), _mm_set1_ps(-INFINITY)))) return 0; /* or empty */
    __m512 sum[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        __m512 vs = _mm512_set1_ps(m[r]);
        __m512 e0 = attn_exp2_512(_mm512_sub_ps(x[2 * r], vs));
        __m512 e1 = attn_exp2_512(_mm512_sub_ps(x[2 * r + 1], vs));
        _mm512_mask_storeu_ps(s + r * lds, k0, e0);
        _mm512_mask_storeu_ps(s + r * lds + 16, k1, e1);
        sum[r] = _mm512_add_ps(e0, e1);
    }
    __m128 t = attn_fold4_ps(0, sum);
    _mm_storeu_ps(l, _mm_add_ps(_mm_loadu_ps(l), t));
    _mm_storeu_ps(alpha, _mm_set1_ps(1.0f));
    return 1;
}

/* Online softmax along each row. The running max m[r] moves only when a score
 * passes it by more than ATTN_DEC_MAX_SLACK, so most tiles skip the max
 * reduction and the rescale (alpha = 1) and go straight to the exponentials,
 * which then reach up to 2^ATTN_DEC_MAX_SLACK: m[r] is the reference the
 * row's l and accumulator are kept against, not always the largest score. */
ATTN_T512 void loom_attn_softmax_rows_avx512(float *s, int64_t lds, int nr, int nc, float *m,
                                             float *l, float *alpha) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    int r0 = 0; /* groups of four together while their references stay */
    while (r0 + 4 <= nr && softmax_rows4_keep(s + r0 * lds, lds, nc, m + r0, l + r0, alpha + r0)) r0 += 4;
    for (int r = r0; r < nr; r++) {
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
