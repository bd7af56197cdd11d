/*
 * Portable GEMM kernel set: a 4 x 8 tile written with GCC/Clang vector
 * extensions (4-lane vectors: SSE2 on baseline x86-64, NEON elsewhere; eight
 * accumulators fit the 16 registers of SSE2), scalar packing (quantized W
 * dequantized block by block, for full activations), and the reference-formula
 * epilogue. The fallback for CPUs without AVX2.
 */
#include "ops/matmul/gemm_kernels.h"

#include <string.h>

#include "ops/quant.h"

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

/* Quantized W (full activations): each block dequantized as the reference
 * does (loom_row_to_f32), so the panel holds exactly the reference's weights. */
static void pack_b_q(loom_dtype wt, const void *w, int64_t ldw, int cols, int64_t kc, float *d) {
    size_t rb = loom_dtype_row_bytes(wt, ldw), bb = loom_dtype_block_bytes(wt);
    memset(d, 0, (size_t)kc * NR * sizeof(float));
    for (int j = 0; j < cols; j++)
        for (int64_t k = 0; k < kc; k += LOOM_QBLOCK) {
            float v[LOOM_QBLOCK];
            loom_row_to_f32(wt, (const char *)w + (size_t)j * rb + (size_t)(k / LOOM_QBLOCK) * bb, v, LOOM_QBLOCK);
            for (int i = 0; i < LOOM_QBLOCK; i++) d[(k + i) * NR + j] = v[i];
        }
}

static void pack_b_q8_0(const void *w, int64_t ldw, int cols, int64_t kc, void *d) {
    pack_b_q(LOOM_Q8_0, w, ldw, cols, kc, d);
}
static void pack_b_q4_0(const void *w, int64_t ldw, int cols, int64_t kc, void *d) {
    pack_b_q(LOOM_Q4_0, w, ldw, cols, kc, d);
}
static void pack_b_q4_1(const void *w, int64_t ldw, int cols, int64_t kc, void *d) {
    pack_b_q(LOOM_Q4_1, w, ldw, cols, kc, d);
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
static const loom_gemm_kset kset_q8_0 = KSET("generic.q8_0_as_f32", pack_b_q8_0);
static const loom_gemm_kset kset_q4_0 = KSET("generic.q4_0_as_f32", pack_b_q4_0);
static const loom_gemm_kset kset_q4_1 = KSET("generic.q4_1_as_f32", pack_b_q4_1);

const loom_gemm_kset *loom_gemm_kset_generic(loom_dtype wt) {
    switch (wt) {
    case LOOM_F16: return &kset_f16;
    case LOOM_BF16: return &kset_bf16;
    case LOOM_Q8_0: return &kset_q8_0;
    case LOOM_Q4_0: return &kset_q4_0;
    case LOOM_Q4_1: return &kset_q4_1;
    default: return &kset_f32;
    }
}
