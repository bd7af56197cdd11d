/*
 * GEMV with full activations at M = 1 for q4_0 / q4_1 weights on AVX512_BF16:
 * bf16 products instead of f32 ones, with x kept to f32-like precision.
 *
 * x is split once per call into two bf16 halves, hi = bf16(x) and
 * lo = bf16(x - hi), so hi + lo holds x to about 2^-17 of its magnitude; every
 * weight is multiplied by both. A nibble becomes the bf16 of its integer (q4_1:
 * q, q4_0: q - 8, both exact) by two byte lookups (vpshufb: the word's low and
 * high byte) and an interleave, so its products with hi and lo are exact in
 * f32; the block adds d * sum(q x) (+ m * sum(x) for q4_1, through x's block
 * sums). An offset folded into the weights instead (the word 0x43qq is
 * 128 + q, one interleave) cancels against 128 * sum(x): with an activation
 * outlier that lost 2^-11 of the result. Four blocks go per step as in the q8
 * kernel (quant_step_q4, gemv_avx512.c): one word permute compacts their 16
 * nibble bytes each, another gathers their scales; eight vdpbf16ps give each
 * block's sum in four lanes of one vector.
 *
 * Against the f32 kernel (gemv_full_avx512.c) a step takes about two thirds
 * of the instructions. Rows are summed alone, one stream each, in an order
 * that depends on K only.
 */
#include "ops/matmul/gemv_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#define TGT "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c"
#define INLINE static inline __attribute__((always_inline, target(TGT)))

#define PREFETCH 4096

/* Bytes of x prepared for K: per group of four blocks, eight vectors of 32
 * bf16 (hi: elements 0-7, 8-15, 16-23, 24-31 of each block, block L in 128-bit
 * lane L; then lo the same), then one f32 sum of hi + lo per block. */
size_t loom_gemv_bf16_x_bytes(int64_t K) {
    int64_t groups = (K / 32 + 3) / 4;
    return (size_t)groups * 8 * 64 + (size_t)groups * 4 * sizeof(float) + 64;
}

__attribute__((target(TGT))) void loom_gemv_bf16_prepare_x(const float *x, int64_t K, void *buf) {
    int64_t nb = K / 32, groups = (nb + 3) / 4;
    uint16_t *w = buf;
    float *sums = (float *)((char *)buf + (size_t)groups * 8 * 64);
    memset(buf, 0, (size_t)groups * 8 * 64 + (size_t)groups * 4 * sizeof(float));
    for (int64_t b = 0; b < nb; b++) {
        int64_t g = b / 4, L = b % 4;
        __m512 xv[2] = {_mm512_loadu_ps(x + 32 * b), _mm512_loadu_ps(x + 32 * b + 16)};
        __m512 s = _mm512_setzero_ps();
        for (int h = 0; h < 2; h++) {
            __m256bh hi = _mm512_cvtneps_pbh(xv[h]);
            __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)hi), 16));
            __m256bh lo = _mm512_cvtneps_pbh(_mm512_sub_ps(xv[h], hf));
            __m512 lf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)lo), 16));
            s = _mm512_add_ps(s, _mm512_add_ps(hf, lf));
            /* quarters 2h and 2h + 1 (8 values each) to vectors 2h, 2h + 1 of the group, lane L */
            for (int q = 0; q < 2; q++) {
                __m128i vh = q ? _mm256_extracti128_si256((__m256i)hi, 1) : _mm256_castsi256_si128((__m256i)hi);
                __m128i vl = q ? _mm256_extracti128_si256((__m256i)lo, 1) : _mm256_castsi256_si128((__m256i)lo);
                size_t v = (size_t)(2 * h + q);
                _mm_storeu_si128((__m128i *)(w + ((size_t)g * 8 + v) * 32 + L * 8), vh);
                _mm_storeu_si128((__m128i *)(w + ((size_t)g * 8 + 4 + v) * 32 + L * 8), vl);
            }
        }
        sums[b] = _mm512_reduce_add_ps(s);
    }
}

/* Row n (of type t, ldw elements per row) against the prepared x. */
INLINE float bf16_row(const uint8_t *row, loom_dtype t, int64_t nb, const uint16_t *xw, const float *sums) {
    const size_t bs = t == LOOM_Q4_1 ? 20 : 18;
    __m512i iq, is;
    if (t == LOOM_Q4_1) {
        iq = _mm512_set_epi16(39, 38, 37, 36, 35, 34, 33, 32, 29, 28, 27, 26, 25, 24, 23, 22,
                              19, 18, 17, 16, 15, 14, 13, 12, 9, 8, 7, 6, 5, 4, 3, 2);
        is = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                              0, 0, 0, 0, 0, 0, 0, 0, 31, 21, 11, 1, 30, 20, 10, 0);
    } else {
        iq = _mm512_set_epi16(35, 34, 33, 32, 31, 30, 29, 28, 26, 25, 24, 23, 22, 21, 20, 19,
                              17, 16, 15, 14, 13, 12, 11, 10, 8, 7, 6, 5, 4, 3, 2, 1);
        is = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                              0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 27, 18, 9, 0);
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    /* low and high bytes of the bf16 of each nibble's integer */
    const __m512i tlo = t == LOOM_Q4_1
        ? _mm512_broadcast_i32x4(_mm_setr_epi8(0x00, (char)0x80, 0x00, 0x40, (char)0x80, (char)0xA0, (char)0xC0,
                                               (char)0xE0, 0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70))
        : _mm512_broadcast_i32x4(_mm_setr_epi8(0x00, (char)0xE0, (char)0xC0, (char)0xA0, (char)0x80, 0x40, 0x00,
                                               (char)0x80, 0x00, (char)0x80, 0x00, 0x40, (char)0x80, (char)0xA0,
                                               (char)0xC0, (char)0xE0));
    const __m512i thi = t == LOOM_Q4_1
        ? _mm512_broadcast_i32x4(_mm_setr_epi8(0x00, 0x3F, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x41, 0x41, 0x41,
                                               0x41, 0x41, 0x41, 0x41, 0x41))
        : _mm512_broadcast_i32x4(_mm_setr_epi8((char)0xC1, (char)0xC0, (char)0xC0, (char)0xC0, (char)0xC0,
                                               (char)0xC0, (char)0xC0, (char)0xBF, 0x00, 0x3F, 0x40, 0x40, 0x40,
                                               0x40, 0x40, 0x40));
    const __m512i sel = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512 acc = _mm512_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b += 4) {
        const int n = nb - b < 4 ? (int)(nb - b) : 4;
        const uint8_t *blk = row + (size_t)b * bs;
        _mm_prefetch((const char *)blk + PREFETCH, _MM_HINT_T0);
        _mm_prefetch((const char *)blk + 64 + PREFETCH, _MM_HINT_T0);
        __m512i lo, hi = _mm512_setzero_si512();
        if (n == 4) {
            lo = _mm512_loadu_si512(blk);
            hi = t == LOOM_Q4_1 ? _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(blk + 64)))
                                : _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(blk + 64)));
        } else {
            lo = _mm512_maskz_loadu_epi16((__mmask32)((1ull << (n * (int)bs / 2)) - 1), blk);
        }
        const __m512i raw = _mm512_permutex2var_epi16(lo, iq, hi);
        const __m512i wl = _mm512_and_si512(raw, m4), wh = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
        /* [d0 d1 d2 d3 m0 m1 m2 m3] as f32; missing blocks read as zeros */
        const __m256 dm = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(is, lo)));
        const __m128 d4 = _mm256_castps256_ps128(dm);
        const __m512i ll = _mm512_shuffle_epi8(tlo, wl), lh = _mm512_shuffle_epi8(thi, wl);
        const __m512i hl = _mm512_shuffle_epi8(tlo, wh), hh = _mm512_shuffle_epi8(thi, wh);
        const __m512i w[4] = {_mm512_unpacklo_epi8(ll, lh), _mm512_unpackhi_epi8(ll, lh),
                              _mm512_unpacklo_epi8(hl, hh), _mm512_unpackhi_epi8(hl, hh)};
        const uint16_t *xg = xw + (size_t)(b / 4) * 8 * 32;
        __m512 th = _mm512_setzero_ps(), tl = _mm512_setzero_ps();
        for (int v = 0; v < 4; v++) {
            th = _mm512_dpbf16_ps(th, (__m512bh)w[v], (__m512bh)_mm512_loadu_si512(xg + v * 32));
            tl = _mm512_dpbf16_ps(tl, (__m512bh)w[v], (__m512bh)_mm512_loadu_si512(xg + (4 + v) * 32));
        }
        acc = _mm512_fmadd_ps(_mm512_add_ps(th, tl), _mm512_permutexvar_ps(sel, _mm512_castps128_ps512(d4)), acc);
        if (t == LOOM_Q4_1) accm = _mm_fmadd_ps(_mm256_extractf128_ps(dm, 1), _mm_loadu_ps(sums + b), accm);
    }
    accm = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    accm = _mm_add_ss(accm, _mm_movehdup_ps(accm));
    return _mm512_reduce_add_ps(acc) + _mm_cvtss_f32(accm);
}

__attribute__((target(TGT))) void loom_gemv_full_bf16(const loom_matmul_args *a, const void *xp, int64_t n0,
                                                      int64_t n1) {
    const int64_t nb = a->K / 32, groups = (nb + 3) / 4;
    const size_t rb = (size_t)(a->ldw / 32) * (a->wtype == LOOM_Q4_1 ? 20 : 18);
    const uint16_t *xw = xp;
    const float *sums = (const float *)((const char *)xp + (size_t)groups * 8 * 64);
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *row = (const uint8_t *)a->w + (size_t)n * rb;
        a->y[n] = a->wtype == LOOM_Q4_1 ? bf16_row(row, LOOM_Q4_1, nb, xw, sums)
                                        : bf16_row(row, LOOM_Q4_0, nb, xw, sums);
    }
}

#endif
