/*
 * AVX-512 GEMM kernel set with f32 panels: a 14 x 32 register tile (28 zmm
 * accumulators, two B vectors, one broadcast: all 32 registers busy, 16 loads
 * per 28 FMAs, so both FMA pipes stay fed while the B panel streams from L2
 * and the A panel from L3). W rows are transposed into
 * 32-wide k-major panels with 16 x 16 register transposes; f16 rows are
 * widened with vcvtph2ps and bf16 rows by a 16-bit shift while packing, which
 * is amortised over all M rows; so are quantized rows (full activations),
 * dequantized a block of 16 rows at a time.
 */
#include "ops/matmul/gemm_kernels.h"

#if defined(__x86_64__)
#include <string.h>

#include "ops/matmul/gemm_x86.h"

#define MR 14
#define NV 2             /* zmm vectors per tile row */
#define NR (16 * NV)

/* 16 W (or x) values of one row starting at element off, as f32, lanes >= the mask zero. */
LOOM_TARGET_AVX512 static inline __m512 load16(const void *p, int64_t off, __mmask16 m, loom_dtype dt) {
    if (dt == LOOM_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + off));
    if (dt == LOOM_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + off)), 16));
    return _mm512_maskz_loadu_ps(m, (const float *)p + off);
}

LOOM_TARGET_AVX512 static inline void pack_b_any(const void *w, int64_t ldw, int cols, int64_t kc,
                                                 float *d, loom_dtype dt) {
    const int64_t es = (int64_t)loom_dtype_size(dt);
    /* 16 rows at a time, each read front to back: few enough streams for the
     * hardware prefetcher, helped by a software prefetch 8 lines ahead (this
     * halved the packing time of W rows 44 KB apart) */
    for (int g = 0; g < NV; g++) {
        int rows = cols - g * 16 < 16 ? cols - g * 16 : 16;
        for (int64_t k = 0; k < kc; k += 16) {
            int kn = (int)(kc - k < 16 ? kc - k : 16);
            __mmask16 km = (__mmask16)loom_mask16(kn);
            __m512 r[16];
            for (int i = 0; i < 16; i++) {
                int64_t off = (g * 16 + i) * ldw + k;
                if (i < rows) {
                    if (k + 512 / es < kc) _mm_prefetch((const char *)w + off * es + 512, _MM_HINT_T0);
                    r[i] = load16(w, off, km, dt);
                } else {
                    r[i] = _mm512_setzero_ps();
                }
            }
            loom_tr16x16(r);
            for (int i = 0; i < kn; i++) _mm512_store_ps(d + (k + i) * NR + g * 16, r[i]);
        }
    }
}

LOOM_TARGET_AVX512 static void pack_b_f32(const void *w, int64_t ldw, int cols, int64_t kc, void *d) {
    pack_b_any(w, ldw, cols, kc, d, LOOM_F32);
}
LOOM_TARGET_AVX512 static void pack_b_f16(const void *w, int64_t ldw, int cols, int64_t kc, void *d) {
    pack_b_any(w, ldw, cols, kc, d, LOOM_F16);
}
LOOM_TARGET_AVX512 static void pack_b_bf16(const void *w, int64_t ldw, int cols, int64_t kc, void *d) {
    pack_b_any(w, ldw, cols, kc, d, LOOM_BF16);
}

/* Quantized W (full activations): block blk as f32, elements 0..15 in *lo and
 * 16..31 in *hi, rounded as the reference dequantization (loom_row_to_f32)
 * rounds them: d * q, d * (q - 8), d * q + m (a product, then a sum). */
LOOM_TARGET_AVX512 static inline void deq_block(loom_dtype wt, const uint8_t *blk, __m512 *lo, __m512 *hi) {
    uint16_t h[2];
    memcpy(h, blk, sizeof h);
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(h[0]));
    if (wt == LOOM_Q8_0) {
        __m512i q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)));
        __m512i q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 18)));
        *lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(q0));
        *hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(q1));
        return;
    }
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + (wt == LOOM_Q4_1 ? 4 : 2))));
    __m512i ql = _mm512_and_si512(v, _mm512_set1_epi32(0x0F)), qh = _mm512_srli_epi32(v, 4);
    if (wt == LOOM_Q4_0) {
        const __m512i eight = _mm512_set1_epi32(8);
        *lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(ql, eight)));
        *hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(qh, eight)));
        return;
    }
    const __m512 m = _mm512_set1_ps(_cvtsh_ss(h[1]));
    *lo = _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(ql)), m);
    *hi = _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(qh)), m);
}

/* 16 rows at a time, one block (32 k) of each dequantized into registers and
 * transposed as two 16 x 16 halves. */
LOOM_TARGET_AVX512 static inline void pack_b_q(loom_dtype wt, const void *w, int64_t ldw, int cols, int64_t kc,
                                               float *d) {
    const size_t rb = loom_dtype_row_bytes(wt, ldw), bs = loom_dtype_block_bytes(wt);
    const size_t span = (size_t)(kc / LOOM_QBLOCK) * bs; /* bytes of a row this panel reads */
    for (int g = 0; g < NV; g++) {
        int rows = cols - g * 16 < 16 ? cols - g * 16 : 16;
        for (int64_t k = 0; k < kc; k += LOOM_QBLOCK) {
            size_t off = (size_t)(k / LOOM_QBLOCK) * bs;
            __m512 lo[16], hi[16];
            for (int i = 0; i < 16; i++) {
                if (i < rows) {
                    const uint8_t *blk = (const uint8_t *)w + (size_t)(g * 16 + i) * rb + off;
                    if (off + 512 < span) _mm_prefetch((const char *)blk + 512, _MM_HINT_T0);
                    deq_block(wt, blk, &lo[i], &hi[i]);
                } else {
                    lo[i] = hi[i] = _mm512_setzero_ps();
                }
            }
            loom_tr16x16(lo);
            loom_tr16x16(hi);
            for (int i = 0; i < 16; i++) {
                _mm512_store_ps(d + (k + i) * NR + g * 16, lo[i]);
                _mm512_store_ps(d + (k + 16 + i) * NR + g * 16, hi[i]);
            }
        }
    }
}

LOOM_TARGET_AVX512 static void pack_b_q8_0(const void *w, int64_t ldw, int cols, int64_t kc, void *d) {
    pack_b_q(LOOM_Q8_0, w, ldw, cols, kc, d);
}
LOOM_TARGET_AVX512 static void pack_b_q4_0(const void *w, int64_t ldw, int cols, int64_t kc, void *d) {
    pack_b_q(LOOM_Q4_0, w, ldw, cols, kc, d);
}
LOOM_TARGET_AVX512 static void pack_b_q4_1(const void *w, int64_t ldw, int cols, int64_t kc, void *d) {
    pack_b_q(LOOM_Q4_1, w, ldw, cols, kc, d);
}

LOOM_TARGET_AVX512 static void pack_a(const float *x, int64_t ldx, int rows, int64_t kc, void *dst) {
    float *d = dst;
    const __mmask16 rm = (__mmask16)loom_mask16(MR);
    for (int64_t k = 0; k < kc; k += 16) {
        int kn = (int)(kc - k < 16 ? kc - k : 16);
        __mmask16 km = (__mmask16)loom_mask16(kn);
        __m512 r[16];
        for (int i = 0; i < 16; i++)
            r[i] = i < rows ? _mm512_maskz_loadu_ps(km, x + i * ldx + k) : _mm512_setzero_ps();
        loom_tr16x16(r);
        for (int i = 0; i < kn; i++) _mm512_mask_storeu_ps(d + (k + i) * MR, rm, r[i]);
    }
}

LOOM_TARGET_AVX512 static void micro(int64_t kc, const void *ap, const void *bp, float *c,
                                     int64_t ldc, int rows, int cols, int accumulate) {
    const float *a = ap, *b = bp;
    __m512 acc[MR][NV];
    /* the C tile comes from L2/L3: start fetching it now, it is needed at the end */
    for (int i = 0; i < rows; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + NR - 1), _MM_HINT_T0);
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m512 bv[NV];
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) bv[j] = _mm512_load_ps(b + j * 16);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            __m512 av = _mm512_set1_ps(a[i]);
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
        }
        a += MR;
        b += NR;
    }
    if (cols == NR) {
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            if (i >= rows) break;
            float *ci = c + i * ldc;
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++) {
                __m512 v = acc[i][j];
                if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(ci + j * 16), v);
                _mm512_storeu_ps(ci + j * 16, v);
            }
        }
        return;
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

#define KSET(name_, pack_b_)                                                                       \
    {.name = name_, .mr = MR, .nr = NR, .kstep = 1, .elem = 4, .pack_a = pack_a,                   \
     .pack_b = pack_b_, .micro = micro, .epilogue = ep_avx512}

static const loom_gemm_kset kset_f32 = KSET("avx512.f32", pack_b_f32);
static const loom_gemm_kset kset_f16 = KSET("avx512.f16", pack_b_f16);
static const loom_gemm_kset kset_bf16 = KSET("avx512.bf16_as_f32", pack_b_bf16);
static const loom_gemm_kset kset_q8_0 = KSET("avx512.q8_0_as_f32", pack_b_q8_0);
static const loom_gemm_kset kset_q4_0 = KSET("avx512.q4_0_as_f32", pack_b_q4_0);
static const loom_gemm_kset kset_q4_1 = KSET("avx512.q4_1_as_f32", pack_b_q4_1);

const loom_gemm_kset *loom_gemm_kset_avx512(loom_dtype wt) {
    switch (wt) {
    case LOOM_F16: return &kset_f16;
    case LOOM_BF16: return &kset_bf16;
    case LOOM_Q8_0: return &kset_q8_0;
    case LOOM_Q4_0: return &kset_q4_0;
    case LOOM_Q4_1: return &kset_q4_1;
    default: return &kset_f32;
    }
}

#else
const loom_gemm_kset *loom_gemm_kset_avx512(loom_dtype wt) { (void)wt; return NULL; }
#endif
