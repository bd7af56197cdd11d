/*
 * Portable GEMM kernel set: a 4 x 8 tile written with GCC/Clang vector
 * extensions (4-lane vectors: SSE2 on baseline x86-64, NEON elsewhere; eight
 * accumulators fit the 16 registers of SSE2), scalar packing, and the
 * reference-formula epilogue. The fallback for CPUs without AVX2.
 */
#include "ops/matmul/gemm_kernels.h"

#include <string.h>

#define MR 4
#define NR 8

typedef float v4f __attribute__((vector_size(16)));

static void pack_a(const float *x, int64_t ldx, int rows, int64_t kc, void *dst) {
    float *d = dst;
    for (int64_t k = 0; k < kc; k++)
        for (int i = 0; i < MR; i++) d[k * MR + i] = i < rows ? x[i * ldx + k] : 0.0f;
}

static void pack_b_f32(const void *w, int64_t ldw, int cols, int64_t kc, void *dst) {
    const float *s = w;
    float *d = dst;
    memset(d, 0, (size_t)kc * NR * sizeof(float));
    for (int j = 0; j < cols; j++)
        for (int64_t k = 0; k < kc; k++) d[k * NR + j] = s[j * ldw + k];
}

static void pack_b_f16(const void *w, int64_t ldw, int cols, int64_t kc, void *dst) {
    const uint16_t *s = w;
    float *d = dst;
    memset(d, 0, (size_t)kc * NR * sizeof(float));
    for (int j = 0; j < cols; j++)
        for (int64_t k = 0; k < kc; k++) d[k * NR + j] = loom_f16_to_f32(s[j * ldw + k]);
}

static void pack_b_bf16(const void *w, int64_t ldw, int cols, int64_t kc, void *dst) {
    const uint16_t *s = w;
    float *d = dst;
    memset(d, 0, (size_t)kc * NR * sizeof(float));
    for (int j = 0; j < cols; j++)
        for (int64_t k = 0; k < kc; k++) d[k * NR + j] = loom_bf16_to_f32(s[j * ldw + k]);
}

static void micro(int64_t kc, const void *ap, const void *bp, float *c, int64_t ldc, int rows,
                  int cols, int accumulate) {
    const float *a = ap, *b = bp;
    v4f acc[MR][2];
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = (v4f){0, 0, 0, 0};
    for (int64_t k = 0; k < kc; k++) {
        v4f b0, b1;
        memcpy(&b0, b + k * NR, sizeof b0);
        memcpy(&b1, b + k * NR + 4, sizeof b1);
        for (int i = 0; i < MR; i++) {
            float s = a[k * MR + i];
            v4f av = {s, s, s, s};
            acc[i][0] += av * b0;
            acc[i][1] += av * b1;
        }
    }
    float t[MR][NR];
    memcpy(t, acc, sizeof t);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) c[i * ldc + j] = accumulate ? c[i * ldc + j] + t[i][j] : t[i][j];
}

#define KSET(name_, pack_b_)                                                                       \
    {.name = name_, .mr = MR, .nr = NR, .kstep = 1, .elem = 4, .pack_a = pack_a,                   \
     .pack_b = pack_b_, .micro = micro, .epilogue = loom_gemm_tile_ep_scalar}

static const loom_gemm_kset kset_f32 = KSET("generic.f32", pack_b_f32);
static const loom_gemm_kset kset_f16 = KSET("generic.f16", pack_b_f16);
static const loom_gemm_kset kset_bf16 = KSET("generic.bf16", pack_b_bf16);

const loom_gemm_kset *loom_gemm_kset_generic(loom_dtype wt) {
    return wt == LOOM_F16 ? &kset_f16 : wt == LOOM_BF16 ? &kset_bf16 : &kset_f32;
}
