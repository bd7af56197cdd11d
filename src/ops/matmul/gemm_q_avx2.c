/*
 * AVX2 kernel set of the quantized GEMM: a 4 x 8 register tile. Lanes are W
 * rows; per 4 k, vpmaddubsw multiplies the weight bytes (unsigned) by the
 * broadcast x quad (signed) into 16-bit pair sums.
 *   q4: nibbles <= 15 and |x| <= 127 keep the 16 products of a block's 8
 *       quads below 32767 per 16-bit lane, so they add up in 16 bits and
 *       one vpmaddwd per block widens them.
 *   q8_0: both signed, so |w| meets x with w's sign (vpsignb); pairs reach
 *       32512 and are widened each quad.
 * The f32 scale product d_w * d_x is applied per block; q4_1 adds m_w * s_x.
 */
#include "ops/matmul/gemm_q_kernels.h"

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

enum { MR = 4, NR = 8 };

static void pack_avx2(loom_dtype wt, const void *w, size_t row_bytes, int cols, int64_t nb, void *panel) {
    loom_gemm_q_pack_generic(wt, w, row_bytes, cols, nb, panel, NR, 0);
}

INLINE __m256i bcast_quad(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

INLINE void micro_body(loom_dtype wt, int64_t b0, int64_t nblk, const loom_q8_act *xr,
                       const uint8_t *panel, float *c, int64_t ldc, int rows, int cols,
                       int accumulate) {
    const size_t bb = loom_gemm_q_panel_block_bytes(NR);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[MR];
UNROLL
    for (int i = 0; i < MR; i++) {
        acc[i] = _mm256_setzero_ps();
        if (accumulate && i < rows) {
            float t[NR] = {0};
            memcpy(t, c + i * ldc, (size_t)cols * sizeof(float));
            acc[i] = _mm256_loadu_ps(t);
        }
    }
    for (int64_t b = b0; b < b0 + nblk; b++) {
        const uint8_t *q = panel + (size_t)(b - b0) * bb;
        const float *d = (const float *)(q + 32 * NR);
        __m256i s[MR];
        if (wt == LOOM_Q8_0) {
UNROLL
            for (int i = 0; i < MR; i++) s[i] = _mm256_setzero_si256();
UNROLL
            for (int j = 0; j < 8; j++) {
                __m256i w = _mm256_load_si256((const __m256i *)(q + j * 32)), wa = _mm256_abs_epi8(w);
UNROLL
                for (int i = 0; i < MR; i++) {
                    __m256i p = _mm256_maddubs_epi16(wa, _mm256_sign_epi8(bcast_quad(xr[i].qs + b * 32 + 4 * j), w));
                    s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(p, ones));
                }
            }
        } else {
            __m256i s16[MR];
UNROLL
            for (int i = 0; i < MR; i++) s16[i] = _mm256_setzero_si256();
UNROLL
            for (int j = 0; j < 8; j++) {
                __m256i w = _mm256_load_si256((const __m256i *)(q + j * 32));
UNROLL
                for (int i = 0; i < MR; i++)
                    s16[i] = _mm256_add_epi16(s16[i], _mm256_maddubs_epi16(w, bcast_quad(xr[i].qs + b * 32 + 4 * j)));
            }
UNROLL
            for (int i = 0; i < MR; i++)
                s[i] = _mm256_add_epi32(_mm256_madd_epi16(s16[i], ones), _mm256_set1_epi32(xr[i].bias[b]));
        }
        __m256 dw = _mm256_load_ps(d);
UNROLL
        for (int i = 0; i < MR; i++)
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i]), _mm256_mul_ps(dw, _mm256_set1_ps(xr[i].d[b])), acc[i]);
        if (wt == LOOM_Q4_1) {
            __m256 mw = _mm256_load_ps(d + NR);
UNROLL
            for (int i = 0; i < MR; i++) acc[i] = _mm256_fmadd_ps(mw, _mm256_set1_ps(xr[i].s[b]), acc[i]);
        }
    }
UNROLL
    for (int i = 0; i < MR; i++)
        if (i < rows) {
            if (cols == NR) {
                _mm256_storeu_ps(c + i * ldc, acc[i]);
            } else {
                float t[NR];
                _mm256_storeu_ps(t, acc[i]);
                memcpy(c + i * ldc, t, (size_t)cols * sizeof(float));
            }
        }
}

__attribute__((target(TGT)))
static void micro_avx2(loom_dtype wt, int64_t b0, int64_t nblk, const loom_q8_act *xr,
                       const void *panel, float *c, int64_t ldc, int rows, int cols, int accumulate) {
    switch (wt) {
    case LOOM_Q8_0: micro_body(LOOM_Q8_0, b0, nblk, xr, panel, c, ldc, rows, cols, accumulate); break;
    case LOOM_Q4_1: micro_body(LOOM_Q4_1, b0, nblk, xr, panel, c, ldc, rows, cols, accumulate); break;
    default: micro_body(LOOM_Q4_0, b0, nblk, xr, panel, c, ldc, rows, cols, accumulate); break;
    }
}

static const loom_gemm_q_kset kset = {"avx2", MR, NR, 0, pack_avx2, micro_avx2, NULL};

const loom_gemm_q_kset *loom_gemm_q_kset_avx2(void) { return &kset; }

#endif
