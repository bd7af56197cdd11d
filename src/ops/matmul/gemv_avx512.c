/*
 * AVX-512 GEMV kernels. Float weights: 16 k per step, f16 through vcvtph2ps,
 * bf16 by a 16-bit shift (exact), FMA against f32 x. Quantized weights (needs
 * AVX512-VNNI): vpdpbusd of the weight bytes as unsigned values (q8_0 + 128,
 * or the q4 nibble) with the signed q8 activation, then one FMA with the block
 * scale products d_w * d_x; the weight offsets (and q4_1's min) are corrected
 * in f32 through the activation sums s_x. q8_0 takes two blocks per zmm in
 * element order; q4 four blocks, their nibble bytes compacted by a word
 * permute and x reordered to match (quant_step_q4).
 *
 * For M = 1 a row is summed alone with U accumulator sets, and rows are
 * reduced to y four at a time (quantized W); for M > 1, R rows share each x
 * load. The per-row instruction sequence depends only on M, so results do not
 * depend on the split.
 */
#include "ops/matmul/gemv_kernels.h"

#include "base/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#define TGT_F "avx512f,avx512bw,avx512vl,avx2,fma,f16c"
#define TGT_Q "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
#define INLINE_F static inline __attribute__((always_inline, target(TGT_F)))
#define INLINE_Q static inline __attribute__((always_inline, target(TGT_Q)))

/* Loops over registers (rows, accumulator sets, x rows) must unroll fully so
 * the arrays stay in registers. */
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 8")
#endif

/* Bytes ahead of the current position that rows of W are prefetched. */
#define GEMV_PREFETCH 4096

/* ------------------------------------------------------------ float weights */

INLINE_F __m512 load_w16(loom_dtype t, const char *w, int64_t k) {
    if (t == LOOM_F32) return _mm512_loadu_ps((const float *)w + k);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k));
    if (t == LOOM_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INLINE_F __m512 load_w16_mask(loom_dtype t, const char *w, int64_t k, __mmask16 mk) {
    if (t == LOOM_F32) return _mm512_maskz_loadu_ps(mk, (const float *)w + k);
    __m256i h = _mm256_maskz_loadu_epi16(mk, (const uint16_t *)w + k);
    if (t == LOOM_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* y[m][n + r] for m < M, r < R: 16 k per step, U steps interleaved over U
 * accumulator sets per row. */
INLINE_F void float_rows(const loom_matmul_args *a, loom_dtype t, int M, int R, int U, int64_t n, int64_t pf_rows) {
    size_t es = t == LOOM_F32 ? 4 : 2;
    int64_t K = a->K, k = 0;
    const char *w[4];
    __m512 acc[4][LOOM_GEMM_MIN_M];  /* [r * U + u][m] */
UNROLL
    for (int r = 0; r < R; r++) w[r] = (const char *)a->w + (size_t)((n + r) * a->ldw) * es;
UNROLL
    for (int i = 0; i < R * U; i++)
UNROLL
        for (int m = 0; m < M; m++) acc[i][m] = _mm512_setzero_ps();
    /* segments of longer rows: the same offset pf_rows rows below instead
     * (within the call; loom_gemv_segment_ahead) */
    const uintptr_t ahead = pf_rows && n + R - 1 + pf_rows < a->N ? (uintptr_t)(pf_rows * a->ldw) * es : 0;
    for (; k + 16 * U <= K; k += 16 * U) {
        /* 16-bit weights take twice the instructions per line: fetch ahead
         * (for f32 the hardware prefetchers do better alone), into L2
         * (LOOM_PF_STREAM, base/cpu.h). The quantized blocks below keep T0:
         * into L2, q8_0 lost in every row and q4_1 was mixed. */
        if (ahead)
UNROLL
            for (int r = 0; r < R; r++)
UNROLL
                for (int u = 0; u < U; u += t == LOOM_F32 ? 1 : 2)
                    _mm_prefetch((const char *)((uintptr_t)w[r] + ahead + (uintptr_t)(k + 16 * u) * es), LOOM_PF_STREAM);
        else if (t != LOOM_F32)
UNROLL
            for (int r = 0; r < R; r++)
UNROLL
                for (int u = 0; u < U; u += 2)
                    _mm_prefetch(w[r] + (size_t)(k + 16 * u) * es + GEMV_PREFETCH, LOOM_PF_STREAM);
UNROLL
        for (int u = 0; u < U; u++) {
            __m512 xv[LOOM_GEMM_MIN_M];
UNROLL
            for (int m = 0; m < M; m++) xv[m] = _mm512_loadu_ps(a->x + m * a->ldx + k + 16 * u);
UNROLL
            for (int r = 0; r < R; r++) {
                __m512 wv = load_w16(t, w[r], k + 16 * u);
UNROLL
                for (int m = 0; m < M; m++) acc[r * U + u][m] = _mm512_fmadd_ps(wv, xv[m], acc[r * U + u][m]);
            }
        }
    }
    for (; k < K; k += 16) {
        __mmask16 mk = K - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (K - k)) - 1);
        __m512 xv[LOOM_GEMM_MIN_M];
UNROLL
        for (int m = 0; m < M; m++) xv[m] = _mm512_maskz_loadu_ps(mk, a->x + m * a->ldx + k);
UNROLL
        for (int r = 0; r < R; r++) {
            __m512 wv = load_w16_mask(t, w[r], k, mk);
UNROLL
            for (int m = 0; m < M; m++) acc[r * U][m] = _mm512_fmadd_ps(wv, xv[m], acc[r * U][m]);
        }
    }
UNROLL
    for (int r = 0; r < R; r++)
UNROLL
        for (int m = 0; m < M; m++) {
            __m512 v = acc[r * U][m];
UNROLL
            for (int u = 1; u < U; u++) v = _mm512_add_ps(v, acc[r * U + u][m]);
            a->y[m * a->ldy + n + r] = _mm512_reduce_add_ps(v);
        }
}

/* ------------------------------------------------------------ quantized weights */

/* The q8_0 weight bytes of blocks b (bytes 0..31) and b + 1 (32..63) + 128,
 * as unsigned values; blk points at block b. two = 0 for a lone last block:
 * the upper half is then zero and block b + 1 is not read. */
INLINE_Q __m512i load_wq2(const uint8_t *blk, size_t bs, int two) {
    __m256i lo = _mm256_loadu_si256((const __m256i *)(blk + 2));
    __m512i v = two ? _mm512_inserti64x4(_mm512_castsi256_si512(lo),
                                         _mm256_loadu_si256((const __m256i *)(blk + bs + 2)), 1)
                    : _mm512_zextsi256_si512(lo);
    return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
}

INLINE_Q uint32_t load_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* q8_0 blocks b .. b+nb-1 (nb <= 4) of the row at w against x, into acc[m]
 * (the scaled block sums) and accm[m] (the offset terms d_w * s_x, one lane
 * per block). Four blocks share one conversion of the weight scales and one
 * product with the activation scales. */
INLINE_Q void quant_step_q8(const loom_q8_act *xq, int M, const uint8_t *w, int64_t b, int nb, __m512 *acc,
                            __m128 *accm) {
    const size_t bs = 34;
    const __m512i sel01 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i sel23 = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
    const uint8_t *blk = w + (size_t)b * bs;
    _mm_prefetch((const char *)blk + GEMV_PREFETCH, _MM_HINT_T0);
    _mm_prefetch((const char *)blk + 64 + GEMV_PREFETCH, _MM_HINT_T0);
    __m512i wq0 = load_wq2(blk, bs, nb >= 2);
    __m512i wq1 = nb >= 3 ? load_wq2(blk + 2 * bs, bs, nb >= 4) : _mm512_setzero_si512();
    /* the four weight scales as f32 lanes 0..3 */
    uint32_t h01 = load_u16(blk) | (nb >= 2 ? load_u16(blk + bs) << 16 : 0);
    uint32_t h23 = (nb >= 3 ? load_u16(blk + 2 * bs) : 0) | (nb >= 4 ? load_u16(blk + 3 * bs) << 16 : 0);
    __m128 dw = _mm_cvtph_ps(_mm_setr_epi32((int)h01, (int)h23, 0, 0));
    __mmask8 mk = (__mmask8)((1u << nb) - 1);
UNROLL
    for (int m = 0; m < M; m++) {
        const int8_t *xs = xq[m].qs + b * 32;
        __m512i x0, x1 = _mm512_setzero_si512();
        if (nb == 4) {
            x0 = _mm512_loadu_si512(xs);
            x1 = _mm512_loadu_si512(xs + 64);
        } else {
            /* a short last step: only the blocks that exist */
            x0 = _mm512_maskz_loadu_epi8(nb >= 2 ? ~0ull : 0xFFFFFFFFull, xs);
            if (nb >= 3) x1 = _mm512_maskz_loadu_epi8(nb >= 4 ? ~0ull : 0xFFFFFFFFull, xs + 64);
        }
        __m128 xd = _mm_maskz_loadu_ps(mk, xq[m].d + b), xsum = _mm_maskz_loadu_ps(mk, xq[m].s + b);
        __m512 sc = _mm512_castps128_ps512(_mm_mul_ps(dw, xd));  /* d_w d_x, one lane per block */
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wq0, x0)),
                                 _mm512_permutexvar_ps(sel01, sc), acc[m]);
        if (nb >= 3)
            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wq1, x1)),
                                     _mm512_permutexvar_ps(sel23, sc), acc[m]);
        accm[m] = _mm_fmadd_ps(dw, xsum, accm[m]);
    }
}

/* q4 blocks b .. b+nb-1 (nb <= 4) of the row at w against x, as quant_step_q8
 * does for q8_0. Every offset in a q4_0 (18-byte) or q4_1 (20-byte) block is
 * even, so one word permute compacts the four blocks' nibble bytes into
 * [qs0 qs1 qs2 qs3] (16 bytes each, reading nothing past the blocks) and
 * another gathers their scales d (and q4_1's mins m). Byte j of qs holds
 * element j (low nibble) and j + 16 (high nibble), so x is taken with its
 * blocks' elements 0..15 and 16..31 in 128-bit lanes (two shuffles, or from
 * xr[m], x_reorder's, for whole steps), and one pair of vpdpbusd sums all
 * four blocks, four lanes each. Against two blocks per register unpacked in
 * place (scalar scale loads, inserts, a variable shift per pair) the q4_1
 * GEMV at M = 1 runs 1.45-1.55x faster from L2: it was shuffle-bound at about
 * 15 GB/s a core, below DRAM bandwidth. */
INLINE_Q void quant_step_q4(const loom_q8_act *xq, const int8_t *const *xr, loom_dtype t, int M, const uint8_t *w,
                            int64_t b, int nb, __m512 *acc, __m128 *accm) {
    const size_t bs = t == LOOM_Q4_1 ? 20 : 18;
    const uint8_t *blk = w + (size_t)b * bs;
    _mm_prefetch((const char *)blk + GEMV_PREFETCH, _MM_HINT_T0);
    _mm_prefetch((const char *)blk + 64 + GEMV_PREFETCH, _MM_HINT_T0);
    const int words = nb * (int)bs / 2;
    const __m512i lo = nb == 4 ? _mm512_loadu_si512(blk)
                               : _mm512_maskz_loadu_epi16((__mmask32)((1ull << words) - 1), blk);
    __m512i hi = _mm512_setzero_si512(), iq, is;
    if (t == LOOM_Q4_1) {
        if (nb == 4) hi = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(blk + 64)));
        iq = _mm512_set_epi16(39, 38, 37, 36, 35, 34, 33, 32, 29, 28, 27, 26, 25, 24, 23, 22,
                              19, 18, 17, 16, 15, 14, 13, 12, 9, 8, 7, 6, 5, 4, 3, 2);
        is = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                              0, 0, 0, 0, 0, 0, 0, 0, 31, 21, 11, 1, 30, 20, 10, 0);
    } else {
        if (nb == 4) hi = _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(blk + 64)));
        iq = _mm512_set_epi16(35, 34, 33, 32, 31, 30, 29, 28, 26, 25, 24, 23, 22, 21, 20, 19,
                              17, 16, 15, 14, 13, 12, 11, 10, 8, 7, 6, 5, 4, 3, 2, 1);
        is = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                              0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 27, 18, 9, 0);
    }
    const __m512i raw = _mm512_permutex2var_epi16(lo, iq, hi), m4 = _mm512_set1_epi8(0x0F);
    const __m512i wl = _mm512_and_si512(raw, m4), wh = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
    /* [d0 d1 d2 d3 m0 m1 m2 m3] as f32 */
    const __m256 dm = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(is, lo)));
    const __m128 dw = _mm256_castps256_ps128(dm), mw = t == LOOM_Q4_1 ? _mm256_extractf128_ps(dm, 1) : dw;
    const __m512i sel = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    const __mmask8 mk = (__mmask8)((1u << nb) - 1);
UNROLL
    for (int m = 0; m < M; m++) {
        __m512i xl, xh;
        if (xr && nb == 4) {
            xl = _mm512_loadu_si512(xr[m] + b * 32);
            xh = _mm512_loadu_si512(xr[m] + b * 32 + 64);
        } else {
            const int8_t *xs = xq[m].qs + b * 32;
            __m512i x0 = nb == 4 ? _mm512_loadu_si512(xs)
                                 : _mm512_maskz_loadu_epi8(nb >= 2 ? ~0ull : 0xFFFFFFFFull, xs);
            __m512i x1 = nb == 4   ? _mm512_loadu_si512(xs + 64)
                         : nb == 3 ? _mm512_maskz_loadu_epi8(0xFFFFFFFFull, xs + 64)
                                   : _mm512_setzero_si512();
            xl = _mm512_shuffle_i64x2(x0, x1, 0x88), xh = _mm512_shuffle_i64x2(x0, x1, 0xDD);
        }
        __m128 xd = _mm_maskz_loadu_ps(mk, xq[m].d + b), xsum = _mm_maskz_loadu_ps(mk, xq[m].s + b);
        __m512 sc = _mm512_castps128_ps512(_mm_mul_ps(dw, xd));  /* d_w d_x, one lane per block */
        __m512i d = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wl, xl), wh, xh);
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(sel, sc), acc[m]);
        accm[m] = _mm_fmadd_ps(mw, xsum, accm[m]);
    }
}

/* One step of either format; xr: x reordered for whole q4 steps, or NULL. */
INLINE_Q void quant_step(const loom_q8_act *xq, const int8_t *const *xr, loom_dtype t, int M, const uint8_t *w,
                         int64_t b, int nb, __m512 *acc, __m128 *accm) {
    if (t == LOOM_Q8_0) quant_step_q8(xq, M, w, b, nb, acc, accm);
    else quant_step_q4(xq, xr, t, M, w, b, nb, acc, accm);
}

/* Rows n .. n+R-1, four blocks per step, U steps interleaved over U
 * accumulator sets per row. */
INLINE_Q void quant_rows(const loom_matmul_args *a, const loom_q8_act *xq, loom_dtype t, int M,
                         int R, int U, int64_t n) {
    size_t bs = t == LOOM_Q8_0 ? 34 : t == LOOM_Q4_0 ? 18 : 20, rb = (size_t)(a->ldw / 32) * bs;
    int64_t nb = a->K / 32, b = 0;
    const uint8_t *w[4];
    __m512 acc[4][LOOM_GEMM_MIN_M];  /* [r * U + u][m] */
    __m128 accm[4][LOOM_GEMM_MIN_M];
UNROLL
    for (int r = 0; r < R; r++) w[r] = (const uint8_t *)a->w + (size_t)(n + r) * rb;
UNROLL
    for (int i = 0; i < R * U; i++)
UNROLL
        for (int m = 0; m < M; m++) {
            acc[i][m] = _mm512_setzero_ps();
            accm[i][m] = _mm_setzero_ps();
        }
    for (; b + 4 * U <= nb; b += 4 * U)
UNROLL
        for (int u = 0; u < U; u++)
UNROLL
            for (int r = 0; r < R; r++)
                quant_step(xq, NULL, t, M, w[r], b + 4 * u, 4, acc[r * U + u], accm[r * U + u]);
    for (; b < nb; b += 4)
UNROLL
        for (int r = 0; r < R; r++)
            quant_step(xq, NULL, t, M, w[r], b, nb - b < 4 ? (int)(nb - b) : 4, acc[r * U], accm[r * U]);
UNROLL
    for (int r = 0; r < R; r++)
UNROLL
        for (int m = 0; m < M; m++) {
            __m512 v = acc[r * U][m];
            __m128 h = accm[r * U][m];
UNROLL
            for (int u = 1; u < U; u++) {
                v = _mm512_add_ps(v, acc[r * U + u][m]);
                h = _mm_add_ps(h, accm[r * U + u][m]);
            }
            /* offset terms x q4_1's 1, q4_0's -8 (nibbles carry +8) or
             * q8_0's -128 (bytes carry +128) */
            h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            h = _mm_add_ss(h, _mm_movehdup_ps(h));
            float off = t == LOOM_Q4_1 ? 1.0f : t == LOOM_Q4_0 ? -8.0f : -128.0f;
            a->y[m * a->ldy + n + r] = _mm512_reduce_add_ps(v) + off * _mm_cvtss_f32(h);
        }
}

/* M = 1: rows n .. n+R-1 (R <= 4), each summed alone over four accumulator
 * sets, so W is read as one sequential stream (interleaved short rows defeat
 * the hardware prefetcher), then the R sums reduced together: a row's 16 lanes
 * are folded in a fixed order that does not depend on the other rows. One
 * reduction per row cost about a third of a 576-long q4 row. xr: x reordered
 * for the q4 steps (x_reorder), or NULL (q8_0, or K past XR_MAX). */
INLINE_Q void quant_rows1(const loom_matmul_args *a, const loom_q8_act *xq, const int8_t *xr, loom_dtype t, int R,
                          int64_t n) {
    size_t bs = t == LOOM_Q8_0 ? 34 : t == LOOM_Q4_0 ? 18 : 20, rb = (size_t)(a->ldw / 32) * bs;
    const int64_t nb = a->K / 32;
    const float off = t == LOOM_Q4_1 ? 1.0f : t == LOOM_Q4_0 ? -8.0f : -128.0f;
    const int8_t *const *xrs = xr ? &xr : NULL;
    __m512 v[4];
UNROLL
    for (int r = 0; r < 4; r++) {
        v[r] = _mm512_setzero_ps();
        if (r >= R) continue;
        const uint8_t *w = (const uint8_t *)a->w + (size_t)(n + r) * rb;
        __m512 acc[4][1];
        __m128 accm[4][1];
UNROLL
        for (int u = 0; u < 4; u++) acc[u][0] = _mm512_setzero_ps(), accm[u][0] = _mm_setzero_ps();
        int64_t b = 0;
        for (; b + 16 <= nb; b += 16)
UNROLL
            for (int u = 0; u < 4; u++) quant_step(xq, xrs, t, 1, w, b + 4 * u, 4, acc[u], accm[u]);
        for (; b < nb; b += 4) quant_step(xq, xrs, t, 1, w, b, nb - b < 4 ? (int)(nb - b) : 4, acc[0], accm[0]);
        __m512 s = _mm512_add_ps(_mm512_add_ps(acc[0][0], acc[1][0]), _mm512_add_ps(acc[2][0], acc[3][0]));
        __m128 h = _mm_add_ps(_mm_add_ps(accm[0][0], accm[1][0]), _mm_add_ps(accm[2][0], accm[3][0]));
        /* offset terms x q4_1's 1, q4_0's -8 (nibbles carry +8) or q8_0's -128 (bytes carry +128) */
        v[r] = _mm512_add_ps(s, _mm512_zextps128_ps512(_mm_mul_ps(h, _mm_set1_ps(off))));
    }
    /* 128-bit block r of z: row r's four partial sums */
    __m512 w01 = _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x44), _mm512_shuffle_f32x4(v[0], v[1], 0xEE));
    __m512 w23 = _mm512_add_ps(_mm512_shuffle_f32x4(v[2], v[3], 0x44), _mm512_shuffle_f32x4(v[2], v[3], 0xEE));
    __m512 z = _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xDD));
    z = _mm512_add_ps(z, _mm512_permute_ps(z, 0x4E));
    z = _mm512_add_ps(z, _mm512_permute_ps(z, 0xB1));
    __m128 out = _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0,
                                                                                 0, 0, 0, 0), z));
    _mm_mask_storeu_ps(a->y + n, (__mmask8)((1u << R) - 1), out);
}

/* ------------------------------------------------------------ dispatch */

/* Rows [n0, n1) in groups of R, the rest one by one with the same U: each
 * row's sum then runs the same way whatever the split. */
#define ROWS(FN, T, M_, R_, U_)                                           \
    do {                                                                  \
        int64_t n_ = n0;                                                  \
        for (; n_ + (R_) <= n1; n_ += (R_)) FN(T, M_, R_, U_, n_);        \
        for (; n_ < n1; n_++) FN(T, M_, 1, U_, n_);                       \
    } while (0)

/* M = 1: one row at a time with 4 accumulator sets, so W is read as one
 * sequential stream (interleaved short rows defeat the hardware prefetcher);
 * rows of K >= 8192 two at a time with 2 sets each: two long streams keep
 * more lines in flight than one (Zen 4, one thread, 4096 x 11008: f32 0.93-0.99
 * -> 1.15x OpenBLAS, f16 9.96 -> 7.62 ms, bf16 5.46 -> 4.61 ms; software
 * prefetching of the one stream instead was slower, 0.89x).
 * M > 1: R rows share each x load; R * M accumulators stay in registers. */
#define BY_M(FN, T)                                                       \
    switch (a->M) {                                                       \
    case 1:                                                               \
        if (a->K >= 8192) ROWS(FN, T, 1, 2, 2);                           \
        else ROWS(FN, T, 1, 1, 4);                                        \
        break;                                                            \
    case 2: ROWS(FN, T, 2, 4, 1); break;                                  \
    case 3: ROWS(FN, T, 3, 4, 1); break;                                  \
    case 4: ROWS(FN, T, 4, 3, 1); break;                                  \
    case 5: ROWS(FN, T, 5, 2, 1); break;                                  \
    case 6: ROWS(FN, T, 6, 2, 1); break;                                  \
    default: ROWS(FN, T, 7, 2, 1); break;                                 \
    }

#define FLOAT_ROWS(T, M_, R_, U_, n) float_rows(a, T, M_, R_, U_, n, pf_rows)
#define QUANT_ROWS(T, M_, R_, U_, n) quant_rows(a, xq, T, M_, R_, U_, n)

/* x's whole 4-block groups as quant_step_q4 reads them: per group the
 * elements 0..15 of its blocks, then 16..31 (128-bit lanes) */
static void __attribute__((target(TGT_Q))) x_reorder(const int8_t *qs, int64_t K, int8_t *xr) {
    for (int64_t k = 0; k + 128 <= K; k += 128) {
        __m512i x0 = _mm512_loadu_si512(qs + k), x1 = _mm512_loadu_si512(qs + k + 64);
        _mm512_storeu_si512(xr + k, _mm512_shuffle_i64x2(x0, x1, 0x88));
        _mm512_storeu_si512(xr + k + 64, _mm512_shuffle_i64x2(x0, x1, 0xDD));
    }
}

#define XR_MAX 16384 /* the longest K whose reordered x is kept on the stack */

/* Quantized W: M = 1 in groups of four rows (quant_rows1; q4 with x reordered
 * once per call when K fits XR_MAX), the rest by BY_M. */
#define QUANT_BY_M(T)                                                     \
    if (a->M == 1) {                                                      \
        _Alignas(64) int8_t xr_buf[(T) == LOOM_Q8_0 ? 64 : XR_MAX];        \
        const int8_t *xr = NULL;                                          \
        if ((T) != LOOM_Q8_0 && a->K <= XR_MAX) {                         \
            x_reorder(xq[0].qs, a->K, xr_buf);                            \
            xr = xr_buf;                                                  \
        }                                                                 \
        int64_t n_ = n0;                                                  \
        for (; n_ + 4 <= n1; n_ += 4) quant_rows1(a, xq, xr, T, 4, n_);   \
        if (n_ < n1) quant_rows1(a, xq, xr, T, (int)(n1 - n_), n_);       \
    } else {                                                              \
        BY_M(QUANT_ROWS, T)                                               \
    }

__attribute__((target(TGT_F))) static void gemv_f32(const loom_matmul_args *a, int64_t n0, int64_t n1) {
    const int64_t pf_rows = loom_gemv_segment_ahead(a, 4);
    BY_M(FLOAT_ROWS, LOOM_F32)
}
__attribute__((target(TGT_F))) static void gemv_f16(const loom_matmul_args *a, int64_t n0, int64_t n1) {
    const int64_t pf_rows = loom_gemv_segment_ahead(a, 2);
    BY_M(FLOAT_ROWS, LOOM_F16)
}
__attribute__((target(TGT_F))) static void gemv_bf16(const loom_matmul_args *a, int64_t n0, int64_t n1) {
    const int64_t pf_rows = loom_gemv_segment_ahead(a, 2);
    BY_M(FLOAT_ROWS, LOOM_BF16)
}

__attribute__((target(TGT_Q))) static void gemv_q8_0(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0,
                                                    int64_t n1) {
    QUANT_BY_M(LOOM_Q8_0)
}
__attribute__((target(TGT_Q))) static void gemv_q4_0(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0,
                                                    int64_t n1) {
    QUANT_BY_M(LOOM_Q4_0)
}
__attribute__((target(TGT_Q))) static void gemv_q4_1(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0,
                                                    int64_t n1) {
    QUANT_BY_M(LOOM_Q4_1)
}

/* Column slices of the same rows (gemv_kernels.h): the float kernels' rows
 * a step, each step's rows through every slice before the next rows. */
#define SLICE_ROWS(T, M_, R_, U_, n) \
    for (int i_ = 0; i_ < ns; i_++) float_rows(&s[i_], T, M_, R_, U_, n, pf_rows)
#define SLICES_FN(NAME, T)                                                                            \
    __attribute__((target(TGT_F))) static void NAME(const loom_matmul_args *s, int ns, int64_t pf_rows, \
                                                 int64_t n0, int64_t n1) {                            \
        const loom_matmul_args *a = &s[0];                                                            \
        BY_M(SLICE_ROWS, T)                                                                          \
    }
SLICES_FN(slices_f32, LOOM_F32)
SLICES_FN(slices_f16, LOOM_F16)
SLICES_FN(slices_bf16, LOOM_BF16)

void loom_gemv_slices_avx512(const loom_matmul_args *s, int ns, int64_t pf_rows, int64_t n0, int64_t n1) {
    switch (s[0].wtype) {
    case LOOM_F32: slices_f32(s, ns, pf_rows, n0, n1); break;
    case LOOM_F16: slices_f16(s, ns, pf_rows, n0, n1); break;
    case LOOM_BF16: slices_bf16(s, ns, pf_rows, n0, n1); break;
    default: break;
    }
}

void loom_gemv_avx512(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0, int64_t n1) {
    switch (a->wtype) {
    case LOOM_F32: gemv_f32(a, n0, n1); break;
    case LOOM_F16: gemv_f16(a, n0, n1); break;
    case LOOM_BF16: gemv_bf16(a, n0, n1); break;
    case LOOM_Q8_0: gemv_q8_0(a, xq, n0, n1); break;
    case LOOM_Q4_0: gemv_q4_0(a, xq, n0, n1); break;
    case LOOM_Q4_1: gemv_q4_1(a, xq, n0, n1); break;
    default: break;
    }
}

#endif
