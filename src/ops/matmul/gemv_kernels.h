/*
 * Private interface between the GEMV driver (gemv.c) and its per-ISA kernels
 * (gemv.c generic, gemv_avx2.c, gemv_avx512.c).
 *
 * A kernel computes y[m][n] for all m < M (M < LOOM_GEMM_MIN_M) and rows n in
 * [n0, n1) of W, reading each W row once (the driver passes args whose w, y
 * and N cover just its chunk, with n0 = 0). Float weights use a->x directly;
 * block-quantized weights use xq[m], the rows of x quantized to q8 by the
 * driver with the activation bias the kernel expects (gemv.c, pick_kernel).
 * No epilogue: the driver applies it per chunk while the chunk is in L1.
 *
 * Every row's sum is computed by the same instruction sequence whatever
 * [n0, n1) is, so results do not depend on the thread split.
 */
#ifndef LOOM_OPS_MATMUL_GEMV_KERNELS_H
#define LOOM_OPS_MATMUL_GEMV_KERNELS_H

#include "ops/matmul/internal.h"
#include "ops/quant.h"

typedef void (*loom_gemv_kernel)(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0,
                                 int64_t n1);

void loom_gemv_generic(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0, int64_t n1);
/* Finishes a tile computed into scratch t[mr][ldt], the outputs (m0.., n0..):
 * the epilogue's element steps on t with level isa's tile epilogue (mul /
 * residual may alias y, which still holds the old values), a copy into y,
 * then the callback on y itself. */
void loom_matmul_finish_tile(const loom_matmul_args *a, loom_isa isa, float *t, int64_t ldt,
                             int64_t m0, int64_t n0, int64_t mr, int64_t nr);

/* Full activations (loom_matmul_full_act): quantized W against f32 x, each
 * block's scale applied to its 32 products. sxo[m * nb + b] (nb = K / 32) is
 * the sum of x row m over block b times the format's offset factor (q4_0: -8,
 * the nibbles' offset; q4_1: 1, for the min), computed by the driver
 * (loom_gemv_x_block_sums); NULL for q8_0. */
typedef void (*loom_gemv_full_kernel)(const loom_matmul_args *a, const float *sxo, int64_t n0, int64_t n1);

/* sxo for the M rows of a->x (the driver's; kernels of every level read it). */
void loom_gemv_x_block_sums(const loom_matmul_args *a, float *sxo);

/* Float rows that are segments of longer rows (each row skipping 256 bytes or
 * more: the column slices of the one-pass projections, the ffn's and
 * incre_attention_linear's, not a padded row) are
 * fetched ahead in the order the kernel reads them: the same offset in the
 * row this many rows below, about 4 KiB ahead (a prefetch along the row would
 * land in other slices' columns, and the hardware prefetchers restart at
 * every segment). 0 for whole rows, which the kernels fetch along the row as
 * before. Kernels take it once a call, and fetch only rows of their call
 * (loom_gemv_slices passes the one of its slices' span). */
static inline int64_t loom_gemv_segment_ahead(const loom_matmul_args *a, size_t es) {
    size_t seg = (size_t)a->K * es;
    return a->ldw > a->K && (size_t)(a->ldw - a->K) * es >= 256 && seg > 0 ? (int64_t)((4096 + seg - 1) / seg) : 0;
}

/* Float W, several column slices of the same rows (loom_gemv_slices): rows
 * [n0, n1) of every slice s[0..ns), each step's rows through every slice in
 * turn. pf_rows: loom_gemv_segment_ahead of the slices' span, for all. Each
 * slice's sums are those of the plain kernel on it alone (the same rows a
 * step and accumulator sets: the slices share M, and at the AVX-512 level
 * every K is below its two-rows cut). */
#define LOOM_GEMV_SLICES_MAX 256

#if defined(__x86_64__)
void loom_gemv_slices_avx2(const loom_matmul_args *s, int ns, int64_t pf_rows, int64_t n0, int64_t n1);
void loom_gemv_slices_avx512(const loom_matmul_args *s, int ns, int64_t pf_rows, int64_t n0, int64_t n1);
void loom_gemv_full_avx2(const loom_matmul_args *a, const float *sxo, int64_t n0, int64_t n1);
void loom_gemv_full_avx512(const loom_matmul_args *a, const float *sxo, int64_t n0, int64_t n1);
/* M = 1, q4_0 / q4_1, AVX512_BF16 (gemv_full_bf16.c): bf16 products with x
 * split in two bf16 halves, prepared once per call by loom_gemv_bf16_prepare_x
 * into loom_gemv_bf16_x_bytes(K) bytes (64-byte aligned). */
size_t loom_gemv_bf16_x_bytes(int64_t K);
void loom_gemv_bf16_prepare_x(const float *x, int64_t K, void *buf);
void loom_gemv_full_bf16(const loom_matmul_args *a, const void *xp, int64_t n0, int64_t n1);
void loom_gemv_avx2(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0, int64_t n1);
/* Quantized weights need AVX512-VNNI here; without it the driver uses the AVX2 kernel. */
void loom_gemv_avx512(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0, int64_t n1);
#endif

#endif
