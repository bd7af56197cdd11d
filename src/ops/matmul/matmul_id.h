/*
 * Mixture of experts, the matmul side: rows grouped by expert (routing) and
 * one expert's GEMM over the rows routed to it (a unit of a grouped matmul).
 * Used by the matmul_id primitive (src/ops/matmul/matmul_id.c) and the fused
 * MoE ops (src/fused/moe.c).
 *
 * A slot s = t * k + j is rank j of token t (ids[t, j], rank 0 the largest
 * router weight). Routing sorts the slots by expert, stably, so the rows an
 * expert sees are in slot order: its GEMM's rows, and so its results, do not
 * depend on the thread count.
 */
#ifndef LOOM_OPS_MATMUL_MATMUL_ID_H
#define LOOM_OPS_MATMUL_MATMUL_ID_H

#include "ops/matmul/matmul.h"

typedef struct loom_moe_routing {
    int64_t  n_tokens, top_k, n_experts;
    int32_t *offsets;   /* [E + 1]: the slots of expert e are perm[offsets[e] .. offsets[e + 1]) */
    int32_t *perm;      /* [T * k]: slots sorted by expert, in slot order within an expert */
    int32_t *inv;       /* [T * k]: inv[perm[i]] = i */
} loom_moe_routing;

/* Bytes of the arrays of a routing (64-byte multiple). */
size_t loom_moe_routing_bytes(int64_t n_tokens, int64_t top_k, int64_t n_experts);
/* Routes ids (i32 [T, k], row stride ld_ids) into r, whose arrays are laid out
 * in mem (loom_moe_routing_bytes). Errors: an id outside [0, E) (the message
 * names the token and rank). */
loom_status loom_moe_route(const int32_t *ids, int64_t ld_ids, int64_t n_tokens, int64_t top_k,
                           int64_t n_experts, void *mem, loom_moe_routing *r);

/* One work item of a grouped matmul: expert e's rows times columns [n0, n0 + nb)
 * of its matrix. x's row of slot s is x + (s / x_div) * ldx (x_div = k: x per
 * token, 1: per slot). */
typedef struct loom_moe_unit {
    const loom_moe_routing *r;
    int64_t      e, n0, nb;
    const float *x;  int64_t ldx, x_div, K;
    const void  *w;  loom_dtype wtype; int64_t N;   /* [E, N, K], contiguous */
    loom_act_precision act;
    int          invariant;   /* as loom_matmul_args' */
} loom_moe_unit;

/* The rows of unit u (its expert's slot count). */
static inline int64_t loom_moe_unit_rows(const loom_moe_unit *u) {
    return u->r->offsets[u->e + 1] - u->r->offsets[u->e];
}
/* Scratch bytes of a GEMM of at most max_rows rows (any count from 1), K, nb columns. */
size_t loom_moe_gemm_scratch(int64_t max_rows, int64_t K, int64_t nb, loom_dtype wtype, loom_act_precision act);
/* Scratch bytes of loom_moe_unit_run for at most max_rows rows, K and nb columns. */
size_t loom_moe_unit_scratch(int64_t max_rows, int64_t K, int64_t nb, loom_dtype wtype, loom_act_precision act);
/* Gathers the unit's rows of x and writes their product with the columns into
 * tile (rows in the expert's slot order, row stride nb), at level isa. */
loom_status loom_moe_unit_run(const loom_moe_unit *u, loom_isa isa, float *tile, void *scratch);

/* The non-empty (expert, column block) units of the experts' row offsets
 * ([E + 1], as loom_moe_routing's) for N columns in blocks of bn: the count,
 * and unit i's expert and first column (i < count). */
int64_t loom_moe_units(const int32_t *offsets, int64_t E, int64_t N, int64_t bn);
void loom_moe_unit_at(const int32_t *offsets, int64_t E, int64_t N, int64_t bn, int64_t i, int64_t *e, int64_t *n0);

/* Bytes of one expert's [N, K] matrix of wtype. */
static inline size_t loom_moe_expert_bytes(loom_dtype wtype, int64_t N, int64_t K) {
    return (size_t)N * loom_dtype_row_bytes(wtype, K);
}
/* Experts a step of T tokens choosing k each can read: min(E, T * k). */
static inline double loom_moe_experts_read(int64_t T, int64_t k, int64_t E) {
    double n = (double)T * (double)k;
    return n < (double)E ? n : (double)E;
}

#endif
