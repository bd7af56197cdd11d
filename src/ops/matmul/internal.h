/* Paths of the matmul family, chosen by loom_matmul_run (matmul.c). Each runs
 * thread ith's share of a at level isa (>= LOOM_ISA_GENERIC) and applies the
 * epilogue to its own tiles. */
#ifndef LOOM_OPS_MATMUL_INTERNAL_H
#define LOOM_OPS_MATMUL_INTERNAL_H

#include <stdint.h>

#include "ops/matmul/matmul.h"

/* GEMV (gemv*.c): M < LOOM_GEMM_MIN_M, any weight dtype. */
loom_status loom_gemv_run(const loom_matmul_args *a, loom_isa isa, int ith, int nth, void *scratch);
size_t loom_gemv_scratch_size(const loom_matmul_args *a);

/* GEMM with float weights (gemm*.c): f32, f16, bf16. */
loom_status loom_gemm_run(const loom_matmul_args *a, loom_isa isa, int ith, int nth, void *scratch);
size_t loom_gemm_scratch_size(const loom_matmul_args *a);

/* GEMM with block-quantized weights (gemm_q*.c): q8_0, q4_0, q4_1. packed:
 * a's panels packed once (loom_gemm_q_packed_find for isa's set), or NULL. */
loom_status loom_gemm_q_run(const loom_matmul_args *a, loom_isa isa, int ith, int nth, void *scratch,
                            const uint8_t *packed);
size_t loom_gemm_q_scratch_size(const loom_matmul_args *a);
/* The bias_mul (ops/quant.h) the quantized GEMM quantizes x with at level isa
 * (pre-quantized x is made with it for either path: matmul.c, xq_bias_mul). */
int32_t loom_gemm_q_bias_mul(const loom_matmul_args *a, loom_isa isa);
/* Rows [m0, m1) of a's x normalised (norm_gamma) and quantized with bias_mul,
 * row m at dst + (m - m0) * loom_q8_act_bytes(K). */
void loom_matmul_quantize_norm_rows(const loom_matmul_args *a, loom_isa isa, int32_t bias_mul, int64_t m0,
                                    int64_t m1, void *dst);
void loom_gemm_q_quantize_x(const loom_matmul_args *a, loom_isa isa, int64_t m0, int64_t m1, void *xq);

/* Reference product for rows/columns [m0, m1) x [n0, n1) (f64 accumulation,
 * weights converted with loom_row_to_f32) followed by the reference epilogue.
 * rowbuf: K floats. */
void loom_matmul_ref_block(const loom_matmul_args *a, int64_t m0, int64_t m1, int64_t n0,
                           int64_t n1, float *rowbuf);

/* [lo, hi) share of n items for thread ith of nth, in multiples of align. */
void loom_matmul_split(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi);

#endif
