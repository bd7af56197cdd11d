/* Thread-level pieces of the fused mixture-of-experts ops (loom_ops.h:
 * loom_moe_gating_top_k_softmax, loom_moe_init_routing,
 * loom_grouped_matmul_swiglu, loom_moe_finalize_routing), shared by the
 * op-level calls (src/fused/moe.c) and the graph ops (src/fused/moe_op.c).
 * Each takes (ith, nth) and splits by rows or by (expert, column block) units
 * fixed by the shapes and the routing, never by nth. */
#ifndef LOOM_FUSED_MOE_H
#define LOOM_FUSED_MOE_H

#include "ops/matmul/matmul_id.h"

/* Gating of rows [lo, hi) of thread ith: softmax of each logits row at level
 * isa (the softmax op's kernel, so the probabilities are the unfused graph's),
 * then top_k and the weights (renormalised when renorm). scratch: E floats. */
loom_status loom_moe_gating_rows(const loom_tensor *logits, int64_t k, int renorm, loom_tensor *weights,
                                 loom_tensor *ids, loom_isa isa, int ith, int nth, float *scratch);

/* Copies thread ith's share of the expanded rows: xs[i] = x[perm[i] / k]. */
void loom_moe_gather_rows(const loom_moe_routing *r, const float *x, int64_t ldx, int64_t D, float *xs,
                          int64_t ldxs, int ith, int nth);

/* The experts' SwiGLU FFNs over rows sorted by expert (moe_init_routing's
 * expanded rows): expert e owns rows offsets[e] .. offsets[e + 1]. */
typedef struct loom_moe_experts {
    const int32_t *offsets; int64_t n_experts;   /* [E + 1] */
    int64_t        rows, D, H;                   /* rows = offsets[E] */
    const float   *x;  int64_t ldx;              /* [rows, D] */
    const void    *w_gate, *w_up;                /* [E, H, D], contiguous, of wtype */
    loom_dtype     wtype;
    const void    *w_down;  loom_dtype dtype_down; /* [E, D, H], contiguous */
    float         *h;  int64_t ldh;              /* [rows, H]: silu(gate) * up */
    float         *y;  int64_t ldy;              /* [rows, D]: the experts' outputs */
    int64_t        block_n;                      /* columns per unit of both GEMMs, 0 = auto */
    loom_act_precision act;
    int            invariant;                    /* the GEMM for every row count (matmul.h) */
} loom_moe_experts;

/* Per-thread scratch of both phases; rows_bound >= the rows of any expert. */
size_t loom_moe_experts_scratch(const loom_moe_experts *g, int64_t rows_bound);
/* Phase 1: per (expert, hidden block) unit, up into scratch, gate into h, then
 * silu and mul (the primitive kernels of level isa) on the tile in cache. */
loom_status loom_moe_experts_gate_up(const loom_moe_experts *g, loom_isa isa, int ith, int nth, void *scratch);
/* Phase 2: per (expert, output block) unit, y = h . w_down[e]^T. */
loom_status loom_moe_experts_down(const loom_moe_experts *g, loom_isa isa, int ith, int nth, void *scratch);

/* Rows [lo, hi) of thread ith: y[t] = (res[t] +) sum_j w[t, j] * ys[inv[t k + j]],
 * j in rank order (loom_moe_sum_row). */
void loom_moe_finalize_rows(const float *ys, int64_t ldys, const int32_t *inv, const float *w, int64_t ldw,
                            const float *res, int64_t ldres, float *y, int64_t ldy, int64_t T, int64_t k,
                            int64_t D, int ith, int nth);

#endif
