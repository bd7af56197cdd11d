/* Helpers shared by the AVX-512 decode kernels, which live in three files:
 * incre_attention_avx512.c (every cache dtype widened to f32: the
 * address-order and side-by-side kernels, the softmax), _i8.c (an i8 K with
 * AVX512_VNNI, an i8 V under inner_precise 1) and _bf16.c (a bf16 cache with
 * AVX512_BF16). Internal to those files. */
#ifndef LOOM_FUSED_INCRE_ATTENTION_AVX512_H
#define LOOM_FUSED_INCRE_ATTENTION_AVX512_H

#if defined(__x86_64__)
#include <float.h>

#include "fused/flash_attention_simd.h"

#define ATTN_T512VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

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

/* The rows of keys c0 .. c0+3 of a four-key block (the last real one, ncv < 4,
 * stands in for the missing), each naming its row of the other stream (pf). */
ATTN_INLINE void dec_keys4(const void **kp, const void *const *rows, int c0, int ncv, const attn_dec_pf *pf) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        kp[k] = rows[c0 + (k < ncv ? k : ncv - 1)];
        attn_dec_pf_row(pf, c0 + k);
    }
}

/* Rows of the tile's cache rows from byte off on (the second half of d = 256). */
ATTN_INLINE void dec_rows_at(const void **dst, const void *const *rows, int nc, int64_t off) {
    for (int c = 0; c < nc; c++) dst[c] = (const char *)rows[c] + off;
}

/* s[r][c] += t[r][c] (t rows ATTN_DEC_TILE_MAX apart): the second half's scores of d = 256. */
ATTN_INLINE void dec_add_scores(float *s, int64_t lds, const float *t, int nr, int nc) {
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) s[r * lds + c] += t[r * ATTN_DEC_TILE_MAX + c];
}

/* Lanes of a 16-wide step at c of n elements that lie before n (none when c >= n). */
ATTN_INLINE __mmask16 attn_tail16(int n, int c) {
    return n - c >= 16 ? (__mmask16)0xFFFF : n > c ? (__mmask16)((1u << (n - c)) - 1) : (__mmask16)0;
}

/* Nonzero if the nr rows of d floats (a multiple of 16, rows ldq apart) are all
 * finite. The prepared forms of q (bf16 parts, 16-bit integers) cannot carry a
 * NaN or an inf: dec_qprep refuses such rows, and the widening kernels keep
 * them as the reference does. */
ATTN_INLINE ATTN_T512 int attn_rows_finite(const float *q, int64_t ldq, int nr, int d) {
    __mmask16 bad = 0;
    for (int r = 0; r < nr; r++)
        for (int x = 0; x < d; x += 16)
            bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(q + r * ldq + x)), _mm512_set1_ps(FLT_MAX),
                                      _CMP_NLE_UQ); /* inf or NaN */
    return !bad;
}

/* Lane r of the result: the sum (max: the maximum) of the 16 lanes of v[r],
 * r = 0..3, in one transposed reduction: rows interleaved within 128-bit
 * lanes first, then the four lanes folded. */
ATTN_INLINE ATTN_T512 __m512 attn_fold_op(int max, __m512 a, __m512 b) {
    return max ? _mm512_max_ps(a, b) : _mm512_add_ps(a, b);
}
ATTN_INLINE ATTN_T512 __m128 attn_fold4_ps(int max, const __m512 *v) {
    __m512 a = attn_fold_op(max, _mm512_unpacklo_ps(v[0], v[1]), _mm512_unpackhi_ps(v[0], v[1])); /* 0 1 0 1 */
    __m512 b = attn_fold_op(max, _mm512_unpacklo_ps(v[2], v[3]), _mm512_unpackhi_ps(v[2], v[3])); /* 2 3 2 3 */
    __m512 c = attn_fold_op(max, _mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xEE));   /* 0 1 2 3 */
    c = attn_fold_op(max, c, _mm512_shuffle_f32x4(c, c, 0x4E));
    c = attn_fold_op(max, c, _mm512_shuffle_f32x4(c, c, 0xB1));
    return _mm512_castps512_ps128(c);
}

/* nr rows of probabilities (nc <= ATTN_DEC_TILE_MAX each) rounded to bf16 into pb
 * (rows ldb apart), zero padded to the next 16: an odd last key pairs with 0. */
ATTN_INLINE ATTN_T512BF void pv_probs_bf16(uint16_t *pb, int64_t ldb, const float *p, int64_t ldp,
                                           int nr, int nc) {
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c += 16) {
            __mmask16 k = attn_tail16(nc, c);
            _mm256_storeu_si256((__m256i *)(pb + r * ldb + c),
                                (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, p + r * ldp + c)));
        }
}

/* The accumulator layout of the P.V kernels over key pairs (vdpbf16ps on a bf16
 * V, vpdpwssd on an i8 V): 32 x values of two keys unpacked lo/hi within
 * 128-bit lanes leave x = 8L + i in lane 4L + i of "lo" and x = 8L + 4 + i in
 * lane 4L + i of "hi" (L = 0..3, i = 0..3). */
ATTN_INLINE ATTN_T512 void pv_to_pairs(__m512 n0, __m512 n1, __m512 *lo, __m512 *hi) {
    const __m512i il = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    const __m512i ih = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    *lo = _mm512_permutex2var_ps(n0, il, n1);
    *hi = _mm512_permutex2var_ps(n0, ih, n1);
}
ATTN_INLINE ATTN_T512 void pv_from_pairs(__m512 lo, __m512 hi, __m512 *n0, __m512 *n1) {
    const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i i1 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    *n0 = _mm512_permutex2var_ps(lo, i0, hi);
    *n1 = _mm512_permutex2var_ps(lo, i1, hi);
}

/* P.V against an i8 V with vpdpwssd (incre_attention_avx512_i8.c; call only
 * on AVX512_VNNI CPUs) for nr <= 4 rows: d a multiple of 64, nc <=
 * ATTN_DEC_TILE_MAX. own: these rows' pass prefetches the V rows ahead (and names
 * pf's). 0 (nothing done) where it does not apply or the rows' p holds a
 * non-finite value. */
int attn_dec_pv_i8w(float *acc, int64_t lda, const float *p, int64_t ldp, int nr,
                    const void *const *rows, int nc, int d, const float *alpha, int own,
                    const attn_dec_pf *pf);

/* The two halves of d = 256 (not i8) through the d = 128 P.V entry point pv,
 * as the Q.K^T kernels run them; the second without the other stream's rows,
 * at the first's prefetch distance. */
void attn_dec_pv_halves(attn_dec_pv_fn *pv, float *acc, int64_t lda, const float *p, int64_t ldp,
                        int nr, const void *const *rows, loom_dtype dt, int nc, const float *alpha,
                        const attn_dec_pf *pf);

#endif /* __x86_64__ */
#endif
