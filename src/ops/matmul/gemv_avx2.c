/*
 * AVX2 GEMV kernels. Float weights: 8 k per step, f16 through F16C, bf16 by a
 * 16-bit shift (exact), FMA against f32 x. Quantized weights: one 32-byte
 * block per ymm, vpmaddubsw (unsigned x signed bytes) + vpmaddwd into int32.
 * q8_0 uses the sign trick (|w| times x with w's sign) since both operands are
 * signed; |w| <= 128 and |x| <= 127 keep the 16-bit pair sums below 32767.
 * q4 takes two blocks per ymm (quant_step2_q4), its nibbles (0..15) multiplied
 * directly and its offsets (q4_0's -8, q4_1's min) corrected in f32 through
 * the activation sums s_x, so no kernel here takes an activation bias.
 *
 * For M = 1 float rows go four at a time with one accumulator set each, q8_0
 * rows alone with four sets; for M > 1, R rows share each x load. The per-row
 * instruction sequence depends only on M and the weight type.
 */
#include "ops/matmul/gemv_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#define TGT "avx2,fma,f16c"
#define INLINE static inline __attribute__((always_inline, target(TGT)))

/* Loops over registers must unroll fully so the arrays stay in registers. */
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 8")
#endif

/* ------------------------------------------------------------ float weights */

INLINE float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

INLINE __m256 load_w8(loom_dtype t, const char *w, int64_t k) {
    if (t == LOOM_F32) return _mm256_loadu_ps((const float *)w + k);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + k));
    if (t == LOOM_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* y[m][n + r] for m < M, r < R: 8 k per step, U steps interleaved over U
 * accumulator sets per row. */
INLINE void float_rows(const loom_matmul_args *a, loom_dtype t, int M, int R, int U, int64_t n, int64_t pf_rows) {
    size_t es = t == LOOM_F32 ? 4 : 2;
    int64_t K = a->K, k = 0;
    const char *w[4];
    __m256 acc[4][LOOM_GEMM_MIN_M];  /* [r * U + u][m] */
UNROLL
    for (int r = 0; r < R; r++) w[r] = (const char *)a->w + (size_t)((n + r) * a->ldw) * es;
UNROLL
    for (int i = 0; i < R * U; i++)
UNROLL
        for (int m = 0; m < M; m++) acc[i][m] = _mm256_setzero_ps();
    /* segments of longer rows: their lines pf_rows rows below (within the
     * call), one per 64 bytes read (loom_gemv_segment_ahead) */
    const uintptr_t ahead = pf_rows && n + R - 1 + pf_rows < a->N ? (uintptr_t)(pf_rows * a->ldw) * es : 0;
    for (; k + 8 * U <= K; k += 8 * U) {
        if (ahead && ((k * (int64_t)es) & 63) < 8 * U * (int64_t)es)
UNROLL
            for (int r = 0; r < R; r++)
                for (int64_t o = 0; o < 8 * U * (int64_t)es; o += 64)
                    _mm_prefetch((const char *)((uintptr_t)w[r] + ahead + (uintptr_t)(k * (int64_t)es + o)), _MM_HINT_T0);
UNROLL
        for (int u = 0; u < U; u++) {
            __m256 xv[LOOM_GEMM_MIN_M];
UNROLL
            for (int m = 0; m < M; m++) xv[m] = _mm256_loadu_ps(a->x + m * a->ldx + k + 8 * u);
UNROLL
            for (int r = 0; r < R; r++) {
                __m256 wv = load_w8(t, w[r], k + 8 * u);
UNROLL
                for (int m = 0; m < M; m++) acc[r * U + u][m] = _mm256_fmadd_ps(wv, xv[m], acc[r * U + u][m]);
            }
        }
    }
    for (; k + 8 <= K; k += 8)
UNROLL
        for (int r = 0; r < R; r++) {
            __m256 wv = load_w8(t, w[r], k);
UNROLL
            for (int m = 0; m < M; m++)
                acc[r * U][m] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(a->x + m * a->ldx + k), acc[r * U][m]);
        }
    if (k < K) {
        /* the last K % 8 values, zero-padded through small buffers */
        size_t rem = (size_t)(K - k);
        float xt[LOOM_GEMM_MIN_M][8] = {{0}};
        for (int m = 0; m < M; m++) memcpy(xt[m], a->x + m * a->ldx + k, rem * sizeof(float));
        for (int r = 0; r < R; r++) {
            char wt[32] = {0};
            memcpy(wt, w[r] + (size_t)k * es, rem * es);
            __m256 wv = load_w8(t, wt, 0);
            for (int m = 0; m < M; m++)
                acc[r * U][m] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xt[m]), acc[r * U][m]);
        }
    }
UNROLL
    for (int r = 0; r < R; r++)
UNROLL
        for (int m = 0; m < M; m++) {
            __m256 v = acc[r * U][m];
UNROLL
            for (int u = 1; u < U; u++) v = _mm256_add_ps(v, acc[r * U + u][m]);
            a->y[m * a->ldy + n + r] = hsum256(v);
        }
}

/* ------------------------------------------------------------ quantized weights */

INLINE uint16_t load_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

INLINE uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* q8_0 block b of the row at w against x, into acc[m]. */
INLINE void quant_step_q8(const loom_q8_act *xq, int M, const uint8_t *w, int64_t b, __m256 *acc) {
    const uint8_t *blk = w + (size_t)b * 34;
    /* too few blocks fit the out-of-order window to cover DRAM latency */
    _mm_prefetch((const char *)blk + 4096, _MM_HINT_T0);
    __m256i wq = _mm256_loadu_si256((const __m256i *)(blk + 2)), wabs = _mm256_abs_epi8(wq);
    __m256 dw = _mm256_cvtph_ps(_mm_set1_epi16((short)load_u16(blk)));
UNROLL
    for (int m = 0; m < M; m++) {
        __m256i xv = _mm256_loadu_si256((const __m256i *)(xq[m].qs + b * 32));
        __m256i ai = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(xv, wq)), _mm256_set1_epi16(1));
        __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(xq[m].d[b]));
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai), sc, acc[m]);
    }
}

/* q4 weights: blocks b and b + 1 (two = 0: b alone) against x's M rows. The two
 * blocks' nibble bytes share one register ([qs_b | qs_b+1]), whose low
 * nibbles are elements 0..15 of each block and high nibbles 16..31, so x is
 * taken in that order (xr: x_reorder's at M = 1, for whole pairs; else two
 * lane permutes), one vpmaddubsw per nibble half and one vpmaddwd sum both blocks,
 * four lanes each, and their scales come in one conversion. The offsets
 * (q4_0's -8, q4_1's min) come back in f32 through s_x, as in the AVX-512
 * kernel. Against one block per step (a conversion, a broadcast and an
 * unpack per block) the q4 GEMV runs 1.4-1.6x faster from L2 (q4_1, q4_0). */
INLINE void quant_step2_q4(const loom_q8_act *xq, const int8_t *xr, loom_dtype t, int M, const uint8_t *w,
                           int64_t b, int two, __m256 *acc, __m128 *accm) {
    const size_t bs = t == LOOM_Q4_1 ? 20 : 18, off = t == LOOM_Q4_1 ? 4 : 2;
    const uint8_t *blk = w + (size_t)b * bs;
    _mm_prefetch((const char *)blk + 4096, _MM_HINT_T0);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m128i q0 = _mm_loadu_si128((const __m128i *)(blk + off));
    __m256i raw = two ? _mm256_inserti128_si256(_mm256_castsi128_si256(q0),
                                                _mm_loadu_si128((const __m128i *)(blk + bs + off)), 1)
                      : _mm256_zextsi128_si256(q0);
    __m256i wl = _mm256_and_si256(raw, low4), wh = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
    /* d (and q4_1's m) of the two blocks as f32: lanes [d0 d1 . .], [m0 m1 . .] */
    __m128 dw, cw;
    if (t == LOOM_Q4_1) {
        __m128 dm = _mm_cvtph_ps(_mm_setr_epi32((int)load_u32(blk), two ? (int)load_u32(blk + bs) : 0, 0, 0));
        dw = _mm_shuffle_ps(dm, dm, _MM_SHUFFLE(2, 2, 2, 0));
        cw = _mm_shuffle_ps(dm, dm, _MM_SHUFFLE(3, 3, 3, 1));
    } else {
        dw = _mm_cvtph_ps(_mm_cvtsi32_si128((int)(load_u16(blk) | (two ? (uint32_t)load_u16(blk + bs) << 16 : 0))));
        cw = dw;
    }
UNROLL
    for (int m = 0; m < M; m++) {
        __m256i xl, xh;
        if (two && xr) {
            xl = _mm256_loadu_si256((const __m256i *)(xr + b * 32));
            xh = _mm256_loadu_si256((const __m256i *)(xr + b * 32 + 32));
        } else {
            __m256i x0 = _mm256_loadu_si256((const __m256i *)(xq[m].qs + b * 32));
            __m256i x1 = two ? _mm256_loadu_si256((const __m256i *)(xq[m].qs + b * 32 + 32)) : _mm256_setzero_si256();
            xl = _mm256_permute2x128_si256(x0, x1, 0x20), xh = _mm256_permute2x128_si256(x0, x1, 0x31);
        }
        /* four products of <= 15 * 127 per 16-bit lane: no saturation */
        __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(wl, xl), _mm256_maddubs_epi16(wh, xh));
        __m256i s32 = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
        /* the activation scales and sums of the two blocks, one 64-bit load each */
        __m128 xd = two ? _mm_castpd_ps(_mm_load_sd((const double *)(xq[m].d + b))) : _mm_load_ss(xq[m].d + b);
        __m128 xs = two ? _mm_castpd_ps(_mm_load_sd((const double *)(xq[m].s + b))) : _mm_load_ss(xq[m].s + b);
        __m256 sc = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_mul_ps(dw, xd)),
                                             _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), sc, acc[m]);
        accm[m] = _mm_fmadd_ps(cw, xs, accm[m]);
    }
}

/* x's whole block pairs as quant_step2_q4 reads them: elements 0..15 of both
 * blocks, then 16..31 */
static void __attribute__((target(TGT))) x_reorder(const int8_t *qs, int64_t K, int8_t *xr) {
    for (int64_t k = 0; k + 64 <= K; k += 64) {
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(qs + k));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(qs + k + 32));
        _mm256_storeu_si256((__m256i *)(xr + k), _mm256_permute2x128_si256(x0, x1, 0x20));
        _mm256_storeu_si256((__m256i *)(xr + k + 32), _mm256_permute2x128_si256(x0, x1, 0x31));
    }
}

/* M = 1, q4: row n summed alone over four accumulator sets (two blocks each). */
INLINE void quant_row1_q4(const loom_matmul_args *a, const loom_q8_act *xq, const int8_t *xr, loom_dtype t,
                          int64_t n) {
    size_t bs = t == LOOM_Q4_0 ? 18 : 20, rb = (size_t)(a->ldw / 32) * bs;
    const uint8_t *w = (const uint8_t *)a->w + (size_t)n * rb;
    int64_t nb = a->K / 32, b = 0;
    __m256 acc[4];
    __m128 accm[4];
UNROLL
    for (int u = 0; u < 4; u++) acc[u] = _mm256_setzero_ps(), accm[u] = _mm_setzero_ps();
    for (; b + 8 <= nb; b += 8)
UNROLL
        for (int u = 0; u < 4; u++) quant_step2_q4(xq, xr, t, 1, w, b + 2 * u, 1, &acc[u], &accm[u]);
    for (; b < nb; b += 2) quant_step2_q4(xq, xr, t, 1, w, b, nb - b >= 2, &acc[0], &accm[0]);
    __m256 v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    __m128 h = _mm_add_ps(_mm_add_ps(accm[0], accm[1]), _mm_add_ps(accm[2], accm[3]));
    h = _mm_add_ss(h, _mm_movehdup_ps(h)); /* lanes 0 and 1: the two blocks of a step */
    a->y[n] = hsum256(v) + (t == LOOM_Q4_1 ? 1.0f : -8.0f) * _mm_cvtss_f32(h);
}

/* q4, M x rows (or M = 1 past XR_MAX): row n alone, its x loads shared by
 * nothing but its M accumulators (AVX2's 16 registers hold no more). */
INLINE void quant_rowm_q4(const loom_matmul_args *a, const loom_q8_act *xq, loom_dtype t, int M, int64_t n) {
    size_t bs = t == LOOM_Q4_0 ? 18 : 20, rb = (size_t)(a->ldw / 32) * bs;
    const uint8_t *w = (const uint8_t *)a->w + (size_t)n * rb;
    int64_t nb = a->K / 32;
    __m256 acc[LOOM_GEMM_MIN_M];
    __m128 accm[LOOM_GEMM_MIN_M];
UNROLL
    for (int m = 0; m < M; m++) acc[m] = _mm256_setzero_ps(), accm[m] = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) quant_step2_q4(xq, NULL, t, M, w, b, nb - b >= 2, acc, accm);
UNROLL
    for (int m = 0; m < M; m++) {
        __m128 h = _mm_add_ss(accm[m], _mm_movehdup_ps(accm[m]));
        a->y[m * a->ldy + n] = hsum256(acc[m]) + (t == LOOM_Q4_1 ? 1.0f : -8.0f) * _mm_cvtss_f32(h);
    }
}

/* q8_0 rows n .. n+R-1, one block per step, U steps interleaved over U
 * accumulator sets per row. */
INLINE void quant_rows_q8(const loom_matmul_args *a, const loom_q8_act *xq, int M, int R, int U, int64_t n) {
    size_t rb = (size_t)(a->ldw / 32) * 34;
    int64_t nb = a->K / 32, b = 0;
    const uint8_t *w[4];
    __m256 acc[4][LOOM_GEMM_MIN_M];  /* [r * U + u][m] */
UNROLL
    for (int r = 0; r < R; r++) w[r] = (const uint8_t *)a->w + (size_t)(n + r) * rb;
UNROLL
    for (int i = 0; i < R * U; i++)
UNROLL
        for (int m = 0; m < M; m++) acc[i][m] = _mm256_setzero_ps();
    for (; b + U <= nb; b += U)
UNROLL
        for (int u = 0; u < U; u++)
UNROLL
            for (int r = 0; r < R; r++) quant_step_q8(xq, M, w[r], b + u, acc[r * U + u]);
    for (; b < nb; b++)
UNROLL
        for (int r = 0; r < R; r++) quant_step_q8(xq, M, w[r], b, acc[r * U]);
UNROLL
    for (int r = 0; r < R; r++)
UNROLL
        for (int m = 0; m < M; m++) {
            __m256 v = acc[r * U][m];
UNROLL
            for (int u = 1; u < U; u++) v = _mm256_add_ps(v, acc[r * U + u][m]);
            a->y[m * a->ldy + n + r] = hsum256(v);
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

/* M = 1 (q8_0): one row at a time, 4 accumulator sets. M > 1: R rows share
 * each x load; 16 ymm registers bound R * M. */
#define BY_M(FN, T) BY_M_1(FN, T, ROWS(FN, T, 1, 1, 4))
/* Float W at M = 1: four rows at a time, one accumulator set each. Four
 * streams keep more lines in flight than one row with four sets: on Zen 3,
 * one thread, f32, 0.73-0.86x OpenBLAS's sgemv became 0.97-1.19x, and a
 * Llama2-7B-shaped f16 model decodes 1.17x faster (bench/results/matmul.md). */
#define BY_M_F(FN, T) BY_M_1(FN, T, ROWS(FN, T, 1, 4, 1))
#define BY_M_1(FN, T, M1)                                                 \
    switch (a->M) {                                                       \
    case 1: M1; break;                                                    \
    case 2: ROWS(FN, T, 2, 3, 1); break;                                  \
    case 3: ROWS(FN, T, 3, 2, 1); break;                                  \
    case 4: ROWS(FN, T, 4, 2, 1); break;                                  \
    case 5: ROWS(FN, T, 5, 1, 1); break;                                  \
    case 6: ROWS(FN, T, 6, 1, 1); break;                                  \
    default: ROWS(FN, T, 7, 1, 1); break;                                 \
    }

#define FLOAT_ROWS(T, M_, R_, U_, n) float_rows(a, T, M_, R_, U_, n, pf_rows)
#define QUANT_ROWS(T, M_, R_, U_, n) quant_rows_q8(a, xq, M_, R_, U_, n)

#define XR_MAX 16384 /* the longest K whose reordered x is kept on the stack */

/* q4 weights: M = 1 through quant_row1_q4 (x reordered once per call), other
 * M (and longer rows) through quant_rowm_q4, both two blocks a step. */
#define Q4_ROWM(T, M_) for (int64_t n_ = n0; n_ < n1; n_++) quant_rowm_q4(a, xq, T, M_, n_)
#define Q4_BY_M(T)                                                        \
    if (a->M == 1 && a->K <= XR_MAX) {                                    \
        _Alignas(32) int8_t xr[XR_MAX];                                   \
        x_reorder(xq[0].qs, a->K, xr);                                    \
        for (int64_t n_ = n0; n_ < n1; n_++) quant_row1_q4(a, xq, xr, T, n_); \
    } else {                                                              \
        switch (a->M) {                                                   \
        case 1: Q4_ROWM(T, 1); break;                                     \
        case 2: Q4_ROWM(T, 2); break;                                     \
        case 3: Q4_ROWM(T, 3); break;                                     \
        case 4: Q4_ROWM(T, 4); break;                                     \
        case 5: Q4_ROWM(T, 5); break;                                     \
        case 6: Q4_ROWM(T, 6); break;                                     \
        default: Q4_ROWM(T, 7); break;                                    \
        }                                                                 \
    }

__attribute__((target(TGT))) static void gemv_f32(const loom_matmul_args *a, int64_t n0, int64_t n1) {
    const int64_t pf_rows = loom_gemv_segment_ahead(a, 4);
    BY_M_F(FLOAT_ROWS, LOOM_F32)
}
__attribute__((target(TGT))) static void gemv_f16(const loom_matmul_args *a, int64_t n0, int64_t n1) {
    const int64_t pf_rows = loom_gemv_segment_ahead(a, 2);
    BY_M_F(FLOAT_ROWS, LOOM_F16)
}
__attribute__((target(TGT))) static void gemv_bf16(const loom_matmul_args *a, int64_t n0, int64_t n1) {
    const int64_t pf_rows = loom_gemv_segment_ahead(a, 2);
    BY_M_F(FLOAT_ROWS, LOOM_BF16)
}

__attribute__((target(TGT))) static void gemv_q8_0(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0, int64_t n1) { BY_M(QUANT_ROWS, LOOM_Q8_0) }
__attribute__((target(TGT))) static void gemv_q4_0(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0,
                                                int64_t n1) {
    Q4_BY_M(LOOM_Q4_0)
}
__attribute__((target(TGT))) static void gemv_q4_1(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0,
                                                int64_t n1) {
    Q4_BY_M(LOOM_Q4_1)
}

/* Column slices of the same rows (gemv_kernels.h): the float kernels' rows
 * a step, each step's rows through every slice before the next rows. */
#define SLICE_ROWS(T, M_, R_, U_, n) \
    for (int i_ = 0; i_ < ns; i_++) float_rows(&s[i_], T, M_, R_, U_, n, pf_rows)
#define SLICES_FN(NAME, T)                                                                            \
    __attribute__((target(TGT))) static void NAME(const loom_matmul_args *s, int ns, int64_t pf_rows, \
                                                 int64_t n0, int64_t n1) {                            \
        const loom_matmul_args *a = &s[0];                                                            \
        BY_M_F(SLICE_ROWS, T)                                                                          \
    }
SLICES_FN(slices_f32, LOOM_F32)
SLICES_FN(slices_f16, LOOM_F16)
SLICES_FN(slices_bf16, LOOM_BF16)

void loom_gemv_slices_avx2(const loom_matmul_args *s, int ns, int64_t pf_rows, int64_t n0, int64_t n1) {
    switch (s[0].wtype) {
    case LOOM_F32: slices_f32(s, ns, pf_rows, n0, n1); break;
    case LOOM_F16: slices_f16(s, ns, pf_rows, n0, n1); break;
    case LOOM_BF16: slices_bf16(s, ns, pf_rows, n0, n1); break;
    default: break;
    }
}

void loom_gemv_avx2(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0, int64_t n1) {
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
