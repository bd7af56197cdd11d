/*
 * AVX-512 GEMV kernels. Float weights: 16 k per step, f16 through vcvtph2ps,
 * bf16 by a 16-bit shift (exact), FMA against f32 x. Quantized weights (needs
 * AVX512-VNNI): two blocks per zmm, vpdpbusd of the weight bytes as unsigned
 * values (q8_0 + 128, or the q4 nibble) with the signed q8 activation, then
 * one FMA with the block scale products d_w * d_x; the weight offsets (and
 * q4_1's min) are corrected in f32 through the activation sums s_x.
 *
 * For M = 1 a row is summed alone with U accumulator sets; for M > 1, R rows
 * share each x load. The per-row instruction sequence depends only on M, so
 * results do not depend on the split.
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
INLINE_F void float_rows(const loom_matmul_args *a, loom_dtype t, int M, int R, int U, int64_t n) {
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
    for (; k + 16 * U <= K; k += 16 * U) {
        /* 16-bit weights take twice the instructions per line: fetch ahead
         * (for f32 the hardware prefetchers do better alone), into L2
         * (LOOM_PF_STREAM, base/cpu.h). The quantized blocks below keep T0:
         * into L2, q8_0 lost in every row and q4_1 was mixed. */
        if (t != LOOM_F32)
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

INLINE_Q uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The weight bytes of blocks b (bytes 0..31) and b + 1 (32..63) as unsigned
 * values in element order; blk points at block b. two = 0 for a lone last
 * block: the upper half is then zero and block b + 1 is not read. */
INLINE_Q __m512i load_wq2(loom_dtype t, const uint8_t *blk, size_t bs, int two) {
    if (t == LOOM_Q8_0) {
        __m256i lo = _mm256_loadu_si256((const __m256i *)(blk + 2));
        __m512i v = two ? _mm512_inserti64x4(_mm512_castsi256_si512(lo),
                                             _mm256_loadu_si256((const __m256i *)(blk + bs + 2)), 1)
                        : _mm512_zextsi256_si512(lo);
        return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    }
    /* byte j of qs holds element j (low nibble) and j + 16 (high nibble):
     * 128-bit lanes [qs_b, qs_b, qs_b1, qs_b1] shifted by [0, 4, 0, 4] */
    size_t off = t == LOOM_Q4_0 ? 2 : 4;
    __m128i q0 = _mm_loadu_si128((const __m128i *)(blk + off));
    __m256i raw = two ? _mm256_inserti128_si256(_mm256_castsi128_si256(q0),
                                                _mm_loadu_si128((const __m128i *)(blk + bs + off)), 1)
                      : _mm256_zextsi128_si256(q0);
    __m512i z = _mm512_castsi256_si512(raw);
    z = _mm512_shuffle_i64x2(z, z, 0x50);
    const __m512i shifts = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0,
                                            0x0004000400040004, 0x0004000400040004, 0, 0);
    return _mm512_and_si512(_mm512_srlv_epi16(z, shifts), _mm512_set1_epi8(0x0F));
}

INLINE_Q uint32_t load_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* Blocks b .. b+nb-1 (nb <= 4) of the row at w against x, into acc[m] (the
 * scaled block sums) and accm[m] (the offset terms d_w * s_x, or q4_1's
 * m_w * s_x, one lane per block). Four blocks share one conversion of the
 * weight scales and one product with the activation scales. */
INLINE_Q void quant_step(const loom_q8_act *xq, loom_dtype t, int M, const uint8_t *w, size_t bs,
                         int64_t b, int nb, __m512 *acc, __m128 *accm) {
    const __m512i sel01 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i sel23 = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
    const uint8_t *blk = w + (size_t)b * bs;
    _mm_prefetch((const char *)blk + GEMV_PREFETCH, _MM_HINT_T0);
    _mm_prefetch((const char *)blk + 64 + GEMV_PREFETCH, _MM_HINT_T0);
    __m512i wq0 = load_wq2(t, blk, bs, nb >= 2);
    __m512i wq1 = nb >= 3 ? load_wq2(t, blk + 2 * bs, bs, nb >= 4) : _mm512_setzero_si512();
    /* the four weight scales (and q4_1's mins) as f32 lanes 0..3 */
    __m128 dw, mw = _mm_setzero_ps();
    if (t == LOOM_Q4_1) {
        uint32_t h[4];
        for (int i = 0; i < 4; i++) h[i] = i < nb ? load_u32(blk + i * bs) : 0;  /* [d, m] halves */
        __m256 dm = _mm256_cvtph_ps(_mm_setr_epi32((int)h[0], (int)h[1], (int)h[2], (int)h[3]));
        __m128 lo = _mm256_castps256_ps128(dm), hi = _mm256_extractf128_ps(dm, 1);
        dw = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
        mw = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
    } else {
        uint32_t h01 = load_u16(blk) | (nb >= 2 ? load_u16(blk + bs) << 16 : 0);
        uint32_t h23 = (nb >= 3 ? load_u16(blk + 2 * bs) : 0) | (nb >= 4 ? load_u16(blk + 3 * bs) << 16 : 0);
        dw = _mm_cvtph_ps(_mm_setr_epi32((int)h01, (int)h23, 0, 0));
    }
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
        accm[m] = _mm_fmadd_ps(t == LOOM_Q4_1 ? mw : dw, xsum, accm[m]);
    }
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
                quant_step(xq, t, M, w[r], bs, b + 4 * u, 4, acc[r * U + u], accm[r * U + u]);
    for (; b < nb; b += 4)
UNROLL
        for (int r = 0; r < R; r++)
            quant_step(xq, t, M, w[r], bs, b, nb - b < 4 ? (int)(nb - b) : 4, acc[r * U], accm[r * U]);
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
 * sequential stream (interleaved short rows defeat the hardware prefetcher).
 * M > 1: R rows share each x load; R * M accumulators stay in registers. */
#define BY_M(FN, T)                                                       \
    switch (a->M) {                                                       \
    case 1: ROWS(FN, T, 1, 1, 4); break;                                  \
    case 2: ROWS(FN, T, 2, 4, 1); break;                                  \
    case 3: ROWS(FN, T, 3, 4, 1); break;                                  \
    case 4: ROWS(FN, T, 4, 3, 1); break;                                  \
    case 5: ROWS(FN, T, 5, 2, 1); break;                                  \
    case 6: ROWS(FN, T, 6, 2, 1); break;                                  \
    default: ROWS(FN, T, 7, 2, 1); break;                                 \
    }

#define FLOAT_ROWS(T, M_, R_, U_, n) float_rows(a, T, M_, R_, U_, n)
#define QUANT_ROWS(T, M_, R_, U_, n) quant_rows(a, xq, T, M_, R_, U_, n)

__attribute__((target(TGT_F))) static void gemv_f32(const loom_matmul_args *a, int64_t n0, int64_t n1) { BY_M(FLOAT_ROWS, LOOM_F32) }
__attribute__((target(TGT_F))) static void gemv_f16(const loom_matmul_args *a, int64_t n0, int64_t n1) { BY_M(FLOAT_ROWS, LOOM_F16) }
__attribute__((target(TGT_F))) static void gemv_bf16(const loom_matmul_args *a, int64_t n0, int64_t n1) { BY_M(FLOAT_ROWS, LOOM_BF16) }

__attribute__((target(TGT_Q))) static void gemv_q8_0(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0, int64_t n1) { BY_M(QUANT_ROWS, LOOM_Q8_0) }
__attribute__((target(TGT_Q))) static void gemv_q4_0(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0, int64_t n1) { BY_M(QUANT_ROWS, LOOM_Q4_0) }
__attribute__((target(TGT_Q))) static void gemv_q4_1(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0, int64_t n1) { BY_M(QUANT_ROWS, LOOM_Q4_1) }

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
