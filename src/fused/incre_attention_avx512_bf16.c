/* AVX-512 decode kernels for bf16 caches on AVX512_BF16 CPUs: the scores
 * with vdpbf16ps on q split into bf16 hi and lo parts (prepared once per
 * (batch, kv head); hi only under inner_precise 1), and the P.V with
 * vdpbf16ps over key pairs, P rounded to bf16. Row order and prefetching as
 * described in incre_attention_avx512.c; other dtypes and head dims fall
 * through to its kernels (and an i8 K to the VNNI kernels). */
#include "fused/flash_attention_internal.h"

#if defined(__x86_64__)
#include "fused/incre_attention_avx512.h"


/* The bf16 kernels' own prefetch distance: 4 KiB, half of ATTN_DEC_PF_DIST (16
 * rows of 256 bytes). On a Zen 4 host (L2 prefetches) a bf16 cache went from
 * 48-50 % of the read bandwidth to 53-60 % on one thread and from 71 % to 78-86 %
 * on two; f32 and f16 caches (widening kernels) lost 3-6 points at 4 KiB and
 * i8 caches did not move between 2 and 32 KiB, so they keep 8 KiB
 * (bench/results/attention.md, "Decode: what bounds it on Zen 4"). */
#ifndef DEC_BF16_PF_DIST
#define DEC_BF16_PF_DIST 4096
#endif

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

/* Lane j (j < 8) of the result = sum of the lanes of a[j]: in-lane levels first,
 * then two cross-lane ones, as attn_reduce16_acc. */
ATTN_INLINE ATTN_T512 __m256 reduce8(const __m512 *a) {
    __m512 t[4], u[2];
    for (int k = 0; k < 4; k++)
        t[k] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * k], a[2 * k + 1]), _mm512_unpackhi_ps(a[2 * k], a[2 * k + 1]));
    for (int k = 0; k < 2; k++) { /* block b of u[k]: block b's sums of a[4k .. 4k+3] */
        __m512d x = _mm512_castps_pd(t[2 * k]), y = _mm512_castps_pd(t[2 * k + 1]);
        u[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    /* blocks: u[0] b0+b2, b1+b3, u[1] b0+b2, b1+b3; then their pairs added */
    __m512 w = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x44), _mm512_shuffle_f32x4(u[0], u[1], 0xEE));
    return _mm512_castps512_ps256(_mm512_add_ps(_mm512_shuffle_f32x4(w, w, 0x88), _mm512_shuffle_f32x4(w, w, 0xDD)));
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

/* Four q rows in one sweep over the keys, 4 keys at a time: 16 accumulators
 * (a key's q_hi and q_lo products into the same one: 16 chains of 8, shorter
 * than the block's 128 products), K vectors in registers, q from L1. The tile
 * is read once, front to back; row pairs read it once per pair, and the
 * second pass back over the tile cost the DRAM stream on one thread (bf16 56-59
 * -> 66-67 % of the read bandwidth, inner_precise 1 61 -> 66-68 %; hot Q.K^T
 * 10.3 -> 10.1 and 6.9 -> 6.2 ns per key; Zen 4, bench/results/attention.md).
 * first: the first rows' sweep, which prefetches. */
ATTN_INLINE ATTN_T512BF void dot_bf16_rows4(int HI, int NQ, float *s, int64_t lds, const char *qp,
                                            const void *const *rows, int nc, const attn_dec_pf *pf,
                                            int first, int64_t ahead) {
    for (int c0 = 0; c0 < nc; c0 += 4) {
        int ncv = nc - c0 < 4 ? nc - c0 : 4;
        __m512 acc[16];
        const void *kp[4];
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
        dec_keys4(kp, rows, c0, ncv, pf);
#pragma GCC unroll 4
        for (int v = 0; v < NQ; v++) {
            __m512i kv[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                if (first) attn_dec_prefetch(kp[k], 64 * v, ahead);
                kv[k] = _mm512_loadu_si512((const char *)kp[k] + 64 * v);
            }
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                const char *qr = qp + (size_t)r * ATTN_DEC_QPREP_STRIDE + 64 * v;
                __m512i qh = _mm512_loadu_si512(qr);
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) acc[4 * r + k] = _mm512_dpbf16_ps(acc[4 * r + k], (__m512bh)kv[k], (__m512bh)qh);
                if (!HI) {
                    __m512i ql = _mm512_loadu_si512(qr + BF16_QLO);
#pragma GCC unroll 4
                    for (int k = 0; k < 4; k++)
                        acc[4 * r + k] = _mm512_dpbf16_ps(acc[4 * r + k], (__m512bh)kv[k], (__m512bh)ql);
                }
            }
        }
        store_block(4, attn_reduce16_acc(acc), s + c0, lds, 4, ncv); /* lane 4r + k = s[r][k] */
    }
}

/* Rows in fours (dot_bf16_rows4), then in pairs (q hi + lo of both: 16
 * registers), 4 keys at a time (8 accumulators, reduce8): each K row is loaded
 * once per pair of rows instead of once per row (measured from DRAM,
 * in-process A/B: +2-5 %; hot, the same).
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
    for (; r + 4 <= nr; r += 4)
        dot_bf16_rows4(HI, NQ, s + r * lds, lds, qp + (size_t)r * ATTN_DEC_QPREP_STRIDE, rows, nc, r ? NULL : pf,
                       r == 0, ahead);
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
    const void *hrows[ATTN_DEC_TILE_MAX];
    float t[8 * ATTN_DEC_TILE_MAX];
    dec_rows_at(hrows, rows, nc, 256);
    for (int r0 = 0; r0 < nr; r0 += 8) {
        int n = nr - r0 < 8 ? nr - r0 : 8;
        const char *q0 = qp + (size_t)r0 * ATTN_DEC_QPREP_STRIDE;
        float *sr = s + r0 * lds;
        if (HI) {
            dot_bf16(1, 4, sr, lds, q0, n, rows, nc, r0 ? NULL : pf, ahead);
            dot_bf16(1, 4, t, ATTN_DEC_TILE_MAX, q0 + 256, n, hrows, nc, NULL, ahead);
        } else {
            dot_bf16(0, 4, sr, lds, q0, n, rows, nc, r0 ? NULL : pf, ahead);
            dot_bf16(0, 4, t, ATTN_DEC_TILE_MAX, q0 + 256, n, hrows, nc, NULL, ahead);
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
    if (!attn_rows_finite(q, ldq, nr, d)) return 0;
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
    ATTN_DEC_WITH_AHEAD_AT(pf, DEC_BF16_PF_DIST, loom_attn_dec_dot_prep_avx512bf_a, s, lds, qp, nr, rows, dt, nc, d, pf, hp);
}

ATTN_T512BF void loom_attn_dec_dot_avx512bf(float *s, int64_t lds, const float *q, int64_t ldq,
                                            int nr, const void *const *rows, loom_dtype dt, int nc,
                                            int d, const attn_dec_pf *pf) {
    if (!attn_dec_dot_via_prep(loom_attn_dec_qprep_avx512bf, loom_attn_dec_dot_prep_avx512bf, s, lds,
                               q, ldq, nr, rows, dt, nc, d, pf))
        loom_attn_dec_dot_avx512(s, lds, q, ldq, nr, rows, dt, nc, d, pf);
}

/* Values per pass of pv_bf16_rows: 64, in 2 chunks of 32 (4 rows: 16 accumulators). */
#define PV_BF16_X 64

/* Keys c and c + 1 (the second only if two) into the accumulators of
 * pv_bf16_rows: the PV_BF16_X values from value x0 of the rows. own: the first
 * pass over the rows, which prefetches all NL lines of each. */
ATTN_INLINE ATTN_T512BF void pv_bf16_pair(int RB, int NL, int x0, __m512 (*ac)[4], const uint16_t *pb,
                                          int64_t ldb, const void *const *rows, int c, int two,
                                          int own, const attn_dec_pf *pf, int64_t ahead) {
    const char *v0 = rows[c], *v1 = two ? rows[c + 1] : NULL;
    if (own) {
        attn_dec_pf_row(pf, c);
        attn_dec_pf_row(pf, c + 1);
#pragma GCC unroll 8
        for (int j = 0; j < NL; j++) {
            attn_dec_prefetch(v0, 64 * j, ahead);
            if (two) attn_dec_prefetch(v1, 64 * j, ahead);
        }
    }
    __m512i pp[4];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        uint32_t pair;
        memcpy(&pair, pb + r * ldb + c, sizeof pair);
        pp[r] = _mm512_set1_epi32((int)pair);
    }
#pragma GCC unroll 2
    for (int j = 0; j < PV_BF16_X / 32; j++) {
        __m512i a = _mm512_loadu_si512(v0 + 2 * x0 + 64 * j), b = _mm512_setzero_si512();
        if (two) b = _mm512_loadu_si512(v1 + 2 * x0 + 64 * j);
        __m512i lo = _mm512_unpacklo_epi16(a, b), hi = _mm512_unpackhi_epi16(a, b);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            ac[r][2 * j] = _mm512_dpbf16_ps(ac[r][2 * j], (__m512bh)lo, (__m512bh)pp[r]);
            ac[r][2 * j + 1] = _mm512_dpbf16_ps(ac[r][2 * j + 1], (__m512bh)hi, (__m512bh)pp[r]);
        }
    }
}

/* P.V against a bf16 V with vdpbf16ps over key pairs, P rounded to bf16 (as the
 * prefill kernel's bf16 path: relative error <= 2^-9 per probability): RB
 * (<= 4) rows, values x0 .. x0 + PV_BF16_X - 1 of a row of NL lines. An odd
 * last key pairs with zeros. pb holds the rows' probabilities as bf16, ldb
 * apart, zero padded to even length. Four rows per pass over a half row load
 * and interleave each V line once for all of them; two rows over the whole row
 * (d = 128) did it twice: dec_pv 7.1 -> 6.6 ns per key at d = 128 and 5.2-5.6
 * -> 4.6-4.9 at d = 64 (Zen 4, bench_attention --sets kernels, alternated). */
ATTN_INLINE ATTN_T512BF void pv_bf16_rows(int RB, int NL, int x0, float *acc, int64_t lda,
                                          const uint16_t *pb, int64_t ldb,
                                          const void *const *rows, int nc, const float *alpha,
                                          int own, const attn_dec_pf *pf, int64_t ahead) {
    __m512 ac[4][4];
    acc += x0;
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        __m512 al = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 4
        for (int j = 0; j < PV_BF16_X / 32; j++)
            pv_to_pairs(_mm512_mul_ps(al, _mm512_loadu_ps(acc + r * lda + 32 * j)),
                             _mm512_mul_ps(al, _mm512_loadu_ps(acc + r * lda + 32 * j + 16)),
                             &ac[r][2 * j], &ac[r][2 * j + 1]);
    }
    int c = 0; /* whole pairs, then an odd last key */
    for (; c + 2 <= nc; c += 2) pv_bf16_pair(RB, NL, x0, ac, pb, ldb, rows, c, 1, own, pf, ahead);
    if (c < nc) pv_bf16_pair(RB, NL, x0, ac, pb, ldb, rows, c, 0, own, pf, ahead);
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
        for (int j = 0; j < PV_BF16_X / 32; j++) {
            __m512 n0, n1;
            pv_from_pairs(ac[r][2 * j], ac[r][2 * j + 1], &n0, &n1);
            _mm512_storeu_ps(acc + r * lda + 32 * j, n0);
            _mm512_storeu_ps(acc + r * lda + 32 * j + 16, n1);
        }
}


ATTN_INLINE ATTN_T512BF void loom_attn_dec_pv_avx512bf_a(float *acc, int64_t lda, const float *p, int64_t ldp,
                                           int nr, const void *const *rows, loom_dtype dt, int nc,
                                           int d, const float *alpha, const attn_dec_pf *pf, int64_t ahead) {
    if (dt != LOOM_BF16 || (d != 64 && d != 128) || nc > ATTN_DEC_TILE_MAX) {
        loom_attn_dec_pv_avx512(acc, lda, p, ldp, nr, rows, dt, nc, d, alpha, pf);
        return;
    }
    /* probabilities as bf16, four rows at a time, zero padded to an even count */
    uint16_t pb[4][ATTN_DEC_TILE_MAX + 32];
    const int ldb = ATTN_DEC_TILE_MAX + 32, NL = d / 32;
    for (int r0 = 0; r0 < nr; r0 += 4) {
        int rb = nr - r0 < 4 ? nr - r0 : 4;
        pv_probs_bf16(pb[0], ldb, p + r0 * ldp, ldp, rb, nc);
        float *ar = acc + r0 * lda;
        for (int x0 = 0; x0 < d; x0 += PV_BF16_X) {
            int own = r0 == 0 && x0 == 0; /* the first pass prefetches, and names the next K tile */
#define PV_BF(RB) pv_bf16_rows(RB, NL, x0, ar, lda, pb[0], ldb, rows, nc, alpha + r0, own, own ? pf : NULL, ahead)
            if (rb == 4) PV_BF(4);
            else if (rb == 3) PV_BF(3);
            else if (rb == 2) PV_BF(2);
            else PV_BF(1);
#undef PV_BF
        }
    }
}

ATTN_T512BF void loom_attn_dec_pv_avx512bf(float *acc, int64_t lda, const float *p, int64_t ldp,
                                           int nr, const void *const *rows, loom_dtype dt, int nc,
                                           int d, const float *alpha, const attn_dec_pf *pf) {
    if (d == 256 && dt == LOOM_BF16 && nc <= ATTN_DEC_TILE_MAX) { /* two rows of 256 would need 32 accumulators */
        attn_dec_pv_halves(loom_attn_dec_pv_avx512bf, acc, lda, p, ldp, nr, rows, dt, nc, alpha, pf);
        return;
    }
    ATTN_DEC_WITH_AHEAD_AT(pf, DEC_BF16_PF_DIST, loom_attn_dec_pv_avx512bf_a, acc, lda, p, ldp, nr, rows, dt, nc, d, alpha, pf);
}

#else
typedef int loom_attn_incre_avx512_bf16_unused; /* ISO C wants a non-empty translation unit */
#endif
