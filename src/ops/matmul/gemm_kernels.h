/*
 * Private interface between the GEMM driver (gemm.c) and its per-ISA kernel
 * sets (gemm_generic.c, gemm_avx2.c, gemm_avx512.c, gemm_bf16_avx512.c).
 *
 * A kernel set is one register tile (mr x nr) with the packing routines that
 * feed it. Packed layouts, with g = ceil(kc / kstep) groups of kstep k-values:
 *   A panel: x rows r < mr, for each group: mr * kstep values (k fastest inside a group)
 *   B panel: W rows c < nr, for each group: nr * kstep values
 * Rows/columns beyond the edge and k beyond kc are packed as zeros, so the
 * micro-kernel always computes a full tile and only its stores are masked.
 */
#ifndef LOOM_OPS_MATMUL_GEMM_KERNELS_H
#define LOOM_OPS_MATMUL_GEMM_KERNELS_H

#include "ops/matmul/internal.h"

/* One finished output tile and the epilogue operands positioned at its corner. */
typedef struct loom_gemm_tile_ep {
    float       *tile;  int64_t ld;      /* [rows, cols] of y */
    int          rows, cols;
    float        scale;                  /* 1 when unset */
    const float *bias;                   /* at column n0, or NULL */
    loom_act     act;
    const float *mul;   int64_t ld_mul;  /* at (m0, n0), or NULL */
    const float *res;   int64_t ld_res;  /* at (m0, n0), or NULL */
} loom_gemm_tile_ep;

typedef struct loom_gemm_kset {
    const char *name;
    int mr, nr;        /* register tile: mr rows of x/y by nr rows of W (columns of y) */
    int kstep;         /* k values per packed group: 1 (f32 panels) or 2 (bf16 pairs) */
    int elem;          /* bytes per packed value */
    /* x[rows][kc] (rows <= mr, x at (m0, k0)) -> A panel */
    void (*pack_a)(const float *x, int64_t ldx, int rows, int64_t kc, void *dst);
    /* W[cols][kc] (cols <= nr, w at (n0, k0), ldw in elements) -> B panel */
    void (*pack_b)(const void *w, int64_t ldw, int cols, int64_t kc, void *dst);
    /* c[rows][cols] = (or += when accumulate) A panel . B panel over kc values */
    void (*micro)(int64_t kc, const void *a, const void *b, float *c, int64_t ldc, int rows,
                  int cols, int accumulate);
    /* scale, bias, act, mul, residual on one tile (the callback is the driver's) */
    void (*epilogue)(const loom_gemm_tile_ep *t);
} loom_gemm_kset;

/* Overrides the block sizes kc, mc, nc (0: derived from the cache sizes), so
 * that tests reach every loop edge with small matrices; also for tuning.
 * Process-wide and not synchronised: set it while no GEMM runs. */
void loom_gemm_set_blocks(int64_t kc, int64_t mc, int64_t nc);

/* Scalar tile epilogue with the reference formulas (gemm.c). */
void loom_gemm_tile_ep_scalar(const loom_gemm_tile_ep *t);

/* The element steps of e on tile [rows, cols] (row stride ld), the outputs at
 * (m, n): its bias, mul and residual positioned there. Returns 0 when e has
 * no element step (only a callback, or nothing). */
int loom_gemm_tile_ep_init(loom_gemm_tile_ep *t, const loom_epilogue *e, float *tile, int64_t ld,
                           int rows, int cols, int64_t m, int64_t n);

/* The tile epilogue of level isa's f32 kernel set (vectorised on AVX2 and
 * AVX-512), for drivers that finish tiles of their own (gemm_q, gemv). */
void loom_gemm_tile_epilogue(loom_isa isa, const loom_gemm_tile_ep *t);

/* Kernel sets for weight dtype wt: f32, f16, bf16, or q8_0 / q4_0 / q4_1 with
 * full activations (blocks dequantized to f32 as B is packed; then kc is a
 * multiple of 32 and pack_b's w starts on a block). A set is only returned
 * for a level the build supports; callers check the CPU first, except for
 * reading mr/nr/kstep/elem (scratch sizing), which is always safe. */
const loom_gemm_kset *loom_gemm_kset_generic(loom_dtype wt);
const loom_gemm_kset *loom_gemm_kset_avx2(loom_dtype wt);    /* NULL off x86-64 */
const loom_gemm_kset *loom_gemm_kset_avx512(loom_dtype wt);  /* f32 panels; NULL off x86-64 */
const loom_gemm_kset *loom_gemm_kset_avx512_bf16(void);      /* bf16 W and x; NULL off x86-64 */

#endif
