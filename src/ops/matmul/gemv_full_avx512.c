/*
 * AVX-512 GEMV with full activations: block-quantized W against f32 x. Each
 * block's 32 weights become two vectors of f32 integers (q8_0 sign-extended;
 * q4 nibbles zero-extended, the low ones masked, the high ones shifted down),
 * two multiply-adds with x give the block's 16 partial sums, and one FMA
 * scales them by the block's d into the row's accumulator (two accumulator
 * sets, alternate blocks). q4's offsets (q4_0's -8, q4_1's min m) are added
 * per chunk of blocks as a dot product of the offset coefficients (d or m)
 * with x's block sums (sxo, gemv_kernels.h). A row's scales are converted
 * to f32 a chunk at a time before its blocks are read.
 *
 * Each row is summed alone (W is one sequential stream) by an instruction
 * sequence that depends only on M, so results do not depend on the split.
 */
#include "ops/matmul/gemv_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#define TGT "avx512f,avx512bw,avx512vl,avx2,fma,f16c"
#define INLINE static inline __attribute__((always_inline, target(TGT)))

#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 8")
#endif

#define CB 64             /* blocks whose scales are converted ahead */
#define PREFETCH 4096     /* bytes ahead that a row is prefetched (as the q8 GEMV) */

/* Scales d (and q4_1's mins) of the nb <= CB blocks at blk, bs bytes apart, as
 * f32: one gather of the first 4 bytes of 16 blocks at a time (d, then q4_1's
 * m), so no narrow stores are read back as a vector. */
INLINE void row_scales(loom_dtype t, const uint8_t *blk, size_t bs, int nb, float *d, float *mn) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)bs));
    for (int i = 0; i < nb; i += 16) {
        __mmask16 mk = (__mmask16)(nb - i >= 16 ? 0xFFFF : (1u << (nb - i)) - 1);
        __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mk, idx, blk + (size_t)i * bs, 1);
        _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g)));
        if (t == LOOM_Q4_1) _mm512_storeu_ps(mn + i, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16))));
    }
}

/* Block blk's 32 products with the M rows of x at x (row stride ldx), scaled
 * by the block's d, added to acc[m]. */
INLINE void full_block(loom_dtype t, const uint8_t *blk, float d, const float *x, int64_t ldx, int M,
                       __m512 *acc) {
    _mm_prefetch((const char *)blk + PREFETCH, _MM_HINT_T0);
    __m512 wl, wh;  /* the block's q (k 0..15, 16..31) as f32 */
    if (t == LOOM_Q8_0) {
        wl = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2))));
        wh = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 18))));
    } else {
        __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + (t == LOOM_Q4_1 ? 4 : 2))));
        wl = _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(0x0F)));
        wh = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
    }
    const __m512 dv = _mm512_set1_ps(d);
UNROLL
    for (int m = 0; m < M; m++) {
        __m512 s = _mm512_mul_ps(wl, _mm512_loadu_ps(x + m * ldx));
        s = _mm512_fmadd_ps(wh, _mm512_loadu_ps(x + m * ldx + 16), s);
        acc[m] = _mm512_fmadd_ps(s, dv, acc[m]);
    }
}

/* y[m][n] for m < M: row n of W against the M rows of x; two accumulator
 * sets take alternate blocks. */
INLINE void full_row(const loom_matmul_args *a, const float *sxo, loom_dtype t, int M, int64_t n) {
    const size_t bs = t == LOOM_Q8_0 ? 34 : t == LOOM_Q4_0 ? 18 : 20;
    const int64_t nb = a->K / 32;
    const uint8_t *row = (const uint8_t *)a->w + (size_t)n * (size_t)(a->ldw / 32) * bs;
    __m512 acc0[LOOM_GEMM_MIN_M], acc1[LOOM_GEMM_MIN_M], off[LOOM_GEMM_MIN_M];
UNROLL
    for (int m = 0; m < M; m++) acc0[m] = acc1[m] = off[m] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += CB) {
        int cb = (int)(nb - b0 < CB ? nb - b0 : CB), i = 0;
        float d[CB], mn[CB];
        const uint8_t *blk = row + (size_t)b0 * bs;
        const float *x = a->x + b0 * 32;
        row_scales(t, blk, bs, cb, d, mn);
        for (; i + 2 <= cb; i += 2) {
            full_block(t, blk + (size_t)i * bs, d[i], x + 32 * i, a->ldx, M, acc0);
            full_block(t, blk + (size_t)(i + 1) * bs, d[i + 1], x + 32 * (i + 1), a->ldx, M, acc1);
        }
        if (i < cb) full_block(t, blk + (size_t)i * bs, d[i], x + 32 * i, a->ldx, M, acc0);
        if (t == LOOM_Q8_0) continue;
        /* offsets: sum over blocks of (q4_0: d, q4_1: m) times sxo */
        const float *c = t == LOOM_Q4_1 ? mn : d;
        for (i = 0; i < cb; i += 16) {
            __mmask16 mk = (__mmask16)(cb - i >= 16 ? 0xFFFF : (1u << (cb - i)) - 1);
            __m512 cv = _mm512_maskz_loadu_ps(mk, c + i);
UNROLL
            for (int m = 0; m < M; m++)
                off[m] = _mm512_fmadd_ps(cv, _mm512_maskz_loadu_ps(mk, sxo + m * nb + b0 + i), off[m]);
        }
    }
UNROLL
    for (int m = 0; m < M; m++)
        a->y[m * a->ldy + n] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0[m], acc1[m]), off[m]));
}

#define FULL_ROWS(T, M_)                                       \
    for (int64_t n = n0; n < n1; n++) full_row(a, sxo, T, M_, n)

/* One instantiation per x row count, so the loops over m unroll. */
#define BY_M(T)                                                \
    switch (a->M) {                                            \
    case 1: FULL_ROWS(T, 1); break;                            \
    case 2: FULL_ROWS(T, 2); break;                            \
    case 3: FULL_ROWS(T, 3); break;                            \
    case 4: FULL_ROWS(T, 4); break;                            \
    case 5: FULL_ROWS(T, 5); break;                            \
    case 6: FULL_ROWS(T, 6); break;                            \
    default: FULL_ROWS(T, 7); break;                           \
    }

__attribute__((target(TGT))) static void full_q8_0(const loom_matmul_args *a, const float *sxo, int64_t n0,
                                                   int64_t n1) {
    BY_M(LOOM_Q8_0)
}
__attribute__((target(TGT))) static void full_q4_0(const loom_matmul_args *a, const float *sxo, int64_t n0,
                                                   int64_t n1) {
    BY_M(LOOM_Q4_0)
}
__attribute__((target(TGT))) static void full_q4_1(const loom_matmul_args *a, const float *sxo, int64_t n0,
                                                   int64_t n1) {
    BY_M(LOOM_Q4_1)
}

void loom_gemv_full_avx512(const loom_matmul_args *a, const float *sxo, int64_t n0, int64_t n1) {
    switch (a->wtype) {
    case LOOM_Q8_0: full_q8_0(a, sxo, n0, n1); break;
    case LOOM_Q4_0: full_q4_0(a, sxo, n0, n1); break;
    case LOOM_Q4_1: full_q4_1(a, sxo, n0, n1); break;
    default: break;
    }
}

#endif
