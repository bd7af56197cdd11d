/*
 * AVX512_BF16 GEMM kernel set for bf16 weights: W stays bf16, x is rounded to
 * bf16 (nearest-even) while packing A, and vdpbf16ps accumulates pairs of
 * products in f32. Both panels hold k in pairs, so a 32-bit broadcast of an x
 * pair meets 16 W pairs per zmm: same 14 x 32 tile as the f32 set, twice the
 * flops per instruction and half the packed bytes. Odd K is zero-padded.
 * Accuracy: inputs rounded to bf16 (rel 2^-9 each), f32 accumulation.
 */
#include "ops/matmul/gemm_kernels.h"

#if defined(__x86_64__)
#include "ops/matmul/gemm_x86.h"

#define MR 14
#define NV 2
#define NR (16 * NV)

static inline unsigned mask32(int64_t n) { return n >= 32 ? 0xFFFFFFFFu : n <= 0 ? 0u : (1u << n) - 1u; }

/* W[cols][kc] bf16 -> for each k pair: NR columns x 2 bf16 (one dword per
 * column). 16 rows at a time, prefetched ahead, as in gemm_avx512.c. */
LOOM_TARGET_AVX512_BF16 static void pack_b(const void *wv, int64_t ldw, int cols, int64_t kc, void *dst) {
    const uint16_t *w = wv;
    uint16_t *d = dst;
    for (int g = 0; g < NV; g++) {
        int rows = cols - g * 16 < 16 ? cols - g * 16 : 16;
        for (int64_t k = 0; k < kc; k += 32) {
            int kn = (int)(kc - k < 32 ? kc - k : 32), np = (kn + 1) / 2;
            __mmask32 km = (__mmask32)mask32(kn);
            __m512 r[16];
            for (int i = 0; i < 16; i++) {
                const uint16_t *row = w + (g * 16 + i) * ldw + k;
                if (i < rows) {
                    if (k + 256 < kc) _mm_prefetch((const char *)(row + 256), _MM_HINT_T0);
                    r[i] = _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(km, row));
                } else {
                    r[i] = _mm512_setzero_ps();
                }
            }
            loom_tr16x16(r);  /* dword transpose: row i = pair k/2 + i of 16 columns */
            for (int i = 0; i < np; i++) _mm512_store_ps((float *)(d + (k / 2 + i) * NR * 2 + g * 32), r[i]);
        }
    }
}

/* x[rows][kc] f32 -> bf16, for each k pair: MR rows x 2 bf16 */
LOOM_TARGET_AVX512_BF16 static void pack_a(const float *x, int64_t ldx, int rows, int64_t kc, void *dst) {
    uint16_t *d = dst;
    const __mmask16 rm = (__mmask16)loom_mask16(MR);
    for (int64_t k = 0; k < kc; k += 32) {
        int kn = (int)(kc - k < 32 ? kc - k : 32), np = (kn + 1) / 2;
        __mmask16 mlo = (__mmask16)loom_mask16(kn), mhi = (__mmask16)loom_mask16(kn - 16);
        __m512 r[16];
        for (int i = 0; i < 16; i++) {
            if (i < rows) {
                __m512 lo = _mm512_maskz_loadu_ps(mlo, x + i * ldx + k);
                __m512 hi = _mm512_maskz_loadu_ps(mhi, x + i * ldx + k + 16);
                r[i] = _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(hi, lo));
            } else {
                r[i] = _mm512_setzero_ps();
            }
        }
        loom_tr16x16(r);
        for (int i = 0; i < np; i++) _mm512_mask_storeu_ps((float *)(d + (k / 2 + i) * MR * 2), rm, r[i]);
    }
}

LOOM_TARGET_AVX512_BF16 static void micro(int64_t kc, const void *ap, const void *bp, float *c,
                                          int64_t ldc, int rows, int cols, int accumulate) {
    const int32_t *a = ap;   /* one x pair per dword */
    const uint16_t *b = bp;
    for (int i = 0; i < rows; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + NR - 1), _MM_HINT_T0);
    }
    __m512 acc[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t kp = 0; kp < (kc + 1) / 2; kp++) {
        __m512bh bv[NV];
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) bv[j] = (__m512bh)_mm512_load_si512(b + j * 32);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32(a[i]);
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
        }
        a += MR;
        b += NR * 2;
    }
    __mmask16 cm[NV];
    for (int j = 0; j < NV; j++) cm[j] = (__mmask16)loom_mask16(cols - 16 * j);
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
        if (i >= rows) break;
        float *ci = c + i * ldc;
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) {
            __m512 v = acc[i][j];
            if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(cm[j], ci + j * 16), v);
            _mm512_mask_storeu_ps(ci + j * 16, cm[j], v);
        }
    }
}

static void ep_avx512(const loom_gemm_tile_ep *t) { loom_gemm_tile_ep_avx512(t); }

static const loom_gemm_kset kset = {.name = "avx512.bf16", .mr = MR, .nr = NR, .kstep = 2, .elem = 2,
                                    .pack_a = pack_a, .pack_b = pack_b, .micro = micro,
                                    .epilogue = ep_avx512};

const loom_gemm_kset *loom_gemm_kset_avx512_bf16(void) { return &kset; }

#else
const loom_gemm_kset *loom_gemm_kset_avx512_bf16(void) { return NULL; }
#endif
