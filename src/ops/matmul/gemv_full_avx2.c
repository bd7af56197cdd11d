/*
 * AVX2 GEMV with full activations: block-quantized W against f32 x, as the
 * AVX-512 kernel (gemv_full_avx512.c) with 8-lane vectors: a block's 32
 * weights become four vectors of f32 integers, four multiply-adds with x give
 * its partial sums, one FMA scales them by d; q4's offsets come from x's
 * block sums per chunk of blocks. Up to 3 x rows two accumulator sets
 * alternate blocks; more rows have one each (16 ymm registers).
 *
 * Each row is summed alone by an instruction sequence that depends only on
 * M, so results do not depend on the split.
 */
#include "ops/matmul/gemv_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#define TGT "avx2,fma,f16c"
#define INLINE static inline __attribute__((always_inline, target(TGT)))

#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 8")
#endif

#define CB 64             /* blocks whose scales are converted ahead */
#define PREFETCH 4096

INLINE float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* Scales d (and q4_1's mins) of the nb <= CB blocks at blk, bs bytes apart, as
 * f32, zero-padded to a multiple of 8. */
INLINE void row_scales(loom_dtype t, const uint8_t *blk, size_t bs, int nb, float *d, float *mn) {
    uint16_t hd[CB] = {0}, hm[CB] = {0};
    for (int i = 0; i < nb; i++) {
        memcpy(&hd[i], blk + (size_t)i * bs, 2);
        if (t == LOOM_Q4_1) memcpy(&hm[i], blk + (size_t)i * bs + 2, 2);
    }
    for (int i = 0; i < nb; i += 8) {
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(hd + i))));
        if (t == LOOM_Q4_1) _mm256_storeu_ps(mn + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(hm + i))));
    }
}

/* y[m][n] for m < M: row n of W against the M rows of x; U accumulator sets. */
INLINE void full_row(const loom_matmul_args *a, const float *sxo, loom_dtype t, int M, int U, int64_t n) {
    const size_t bs = loom_dtype_block_bytes(t), qoff = t == LOOM_Q4_1 ? 4 : 2;
    const int64_t nb = a->K / 32;
    const uint8_t *row = (const uint8_t *)a->w + (size_t)n * loom_dtype_row_bytes(t, a->ldw);
    __m256 acc[2][LOOM_GEMM_MIN_M], off[LOOM_GEMM_MIN_M];
UNROLL
    for (int m = 0; m < M; m++) acc[0][m] = acc[1][m] = off[m] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += CB) {
        int cb = (int)(nb - b0 < CB ? nb - b0 : CB);
        float d[CB], mn[CB];
        row_scales(t, row + (size_t)b0 * bs, bs, cb, d, mn);
        for (int i = 0; i < cb; i++) {
            const uint8_t *blk = row + (size_t)(b0 + i) * bs;
            _mm_prefetch((const char *)blk + PREFETCH, _MM_HINT_T0);
            __m256 w[4];  /* the block's q as f32, k 8j .. 8j+7 in w[j] */
            if (t == LOOM_Q8_0) {
UNROLL
                for (int j = 0; j < 4; j++)
                    w[j] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + 8 * j))));
            } else {
                __m128i q = _mm_loadu_si128((const __m128i *)(blk + qoff));
                __m256i v0 = _mm256_cvtepu8_epi32(q), v1 = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(q, q));
                const __m256i low4 = _mm256_set1_epi32(0x0F);
                w[0] = _mm256_cvtepi32_ps(_mm256_and_si256(v0, low4));
                w[1] = _mm256_cvtepi32_ps(_mm256_and_si256(v1, low4));
                w[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(v0, 4));
                w[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(v1, 4));
            }
            const __m256 dv = _mm256_set1_ps(d[i]);
            const float *x = a->x + (b0 + i) * 32;
            const int u = U == 2 ? i & 1 : 0;
UNROLL
            for (int m = 0; m < M; m++) {
                const float *xm = x + m * a->ldx;
                __m256 s = _mm256_mul_ps(w[0], _mm256_loadu_ps(xm));
                s = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xm + 8), s);
                s = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xm + 16), s);
                s = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xm + 24), s);
                acc[u][m] = _mm256_fmadd_ps(s, dv, acc[u][m]);
            }
        }
        if (t == LOOM_Q8_0) continue;
        /* offsets: sum over blocks of (q4_0: d, q4_1: m) times sxo; the
         * coefficients past cb are zeros (row_scales pads them) */
        const float *c = t == LOOM_Q4_1 ? mn : d;
        for (int i = 0; i < cb; i += 8) {
            float sv[8] = {0};
            int k = cb - i < 8 ? cb - i : 8;
UNROLL
            for (int m = 0; m < M; m++) {
                memcpy(sv, sxo + m * nb + b0 + i, (size_t)k * sizeof(float));
                off[m] = _mm256_fmadd_ps(_mm256_loadu_ps(c + i), _mm256_loadu_ps(sv), off[m]);
            }
        }
    }
UNROLL
    for (int m = 0; m < M; m++)
        a->y[m * a->ldy + n] = hsum256(_mm256_add_ps(_mm256_add_ps(acc[0][m], acc[1][m]), off[m]));
}

#define FULL_ROWS(T, M_)                                            \
    for (int64_t n = n0; n < n1; n++) full_row(a, sxo, T, M_, (M_) <= 3 ? 2 : 1, n)

#define BY_M(T)                                                     \
    switch (a->M) {                                                 \
    case 1: FULL_ROWS(T, 1); break;                                 \
    case 2: FULL_ROWS(T, 2); break;                                 \
    case 3: FULL_ROWS(T, 3); break;                                 \
    case 4: FULL_ROWS(T, 4); break;                                 \
    case 5: FULL_ROWS(T, 5); break;                                 \
    case 6: FULL_ROWS(T, 6); break;                                 \
    default: FULL_ROWS(T, 7); break;                                \
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

void loom_gemv_full_avx2(const loom_matmul_args *a, const float *sxo, int64_t n0, int64_t n1) {
    switch (a->wtype) {
    case LOOM_Q8_0: full_q8_0(a, sxo, n0, n1); break;
    case LOOM_Q4_0: full_q4_0(a, sxo, n0, n1); break;
    case LOOM_Q4_1: full_q4_1(a, sxo, n0, n1); break;
    default: break;
    }
}

#endif
