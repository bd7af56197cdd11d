/*
 * Helpers shared by the x86 GEMM kernel sets: per-function ISA attributes
 * (the build has no global -m flags) and the register transposes that turn
 * K-contiguous rows of x and W into k-major packed panels.
 */
#ifndef LOOM_OPS_MATMUL_GEMM_X86_H
#define LOOM_OPS_MATMUL_GEMM_X86_H

#if defined(__x86_64__)
#include <immintrin.h>

#define LOOM_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define LOOM_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define LOOM_TARGET_AVX512_BF16 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

/* 16 x 16 transpose of 32-bit lanes: r[i][j] -> r[j][i]. 48 shuffles. */
LOOM_TARGET_AVX512 static inline void loom_tr16x16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* r[4g + j], 128-bit lane L: column 4L + j of rows 4g .. 4g+3 */
    for (int g = 0; g < 4; g++) {
        __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 2]);
        __m512d c = _mm512_castps_pd(t[4 * g + 1]), d = _mm512_castps_pd(t[4 * g + 3]);
        r[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    for (int j = 0; j < 4; j++) {
        __m512 u0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
        __m512 u1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
        __m512 u2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        __m512 u3 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
        t[j] = _mm512_shuffle_f32x4(u0, u2, 0x88);
        t[8 + j] = _mm512_shuffle_f32x4(u0, u2, 0xDD);
        t[4 + j] = _mm512_shuffle_f32x4(u1, u3, 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(u1, u3, 0xDD);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* 8 x 8 transpose of 32-bit lanes. */
LOOM_TARGET_AVX2 static inline void loom_tr8x8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) {
        u[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
        u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
        u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
        u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
        r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
    }
}

/* Lanes [0, n) of a 16-lane mask, n clamped to 0..16. */
static inline unsigned loom_mask16(int64_t n) {
    return n >= 16 ? 0xFFFFu : n <= 0 ? 0u : (1u << n) - 1u;
}

/* Vectorised epilogue on one tile (gemm_avx512_ep.c). */
struct loom_gemm_tile_ep;
void loom_gemm_tile_ep_avx512(const struct loom_gemm_tile_ep *t);

#endif /* __x86_64__ */
#endif
