/* The fused MoE ops as graph ops (made by the fusion pass):
 *   moe_gating_top_k_softmax: softmax -> top_k -> moe_weights, one pass per row
 *     (the probabilities stay in scratch);
 *   moe_ffn: matmul_id (gate, up) -> silu -> mul -> matmul_id (down) -> moe_sum
 *     (-> add), four phases, each one launch for all experts:
 *     0 moe_init_routing (rows grouped by expert, gathered into x sorted),
 *     1 grouped gate/up GEMMs with silu * up on each tile,
 *     2 grouped down GEMMs, 3 moe_finalize_routing (weighted sum by rank,
 *     residual). Each thread routes the step's ids itself in every phase (a
 *     counting sort of T k ids), so no routing crosses a phase boundary. */
#include "fused/fused_graph_ops.h"

#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "fused/fused_internal.h"
#include "fused/moe.h"
#include "ops/ref/ref.h"

/* ------------------------------------------------------------ moe_gating_top_k_softmax */

static loom_status gating_infer(const loom_tensor *const *src, int n_src, const void *attrs, loom_tensor *dst) {
    const char *op = "moe_gating_top_k_softmax";
    LOOM_TRY(loom_ref_check_arity(op, src, n_src, 1, 1));
    const loom_moe_gating_attrs *at = attrs;
    const loom_tensor *x = src[0];
    LOOM_TRY(loom_ref_check_dtype(op, 0, "logits", x, LOOM_REF_DT(LOOM_F32)));
    LOOM_RETURN_IF(x->ndim != 2, LOOM_ERR_SHAPE, "%s: input 0 (logits) must be 2-D [T, E]", op);
    LOOM_RETURN_IF(!at || at->k < 1 || at->k > x->shape[1], LOOM_ERR_INVALID_ARG, "%s: k must be in [1, %lld]", op,
                   (long long)x->shape[1]);
    const int64_t shape[2] = {x->shape[0], at->k};
    loom_ref_set_dst(dst, LOOM_F32, 2, shape);
    return LOOM_OK;
}

static void gating_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs,
                        loom_cost *c) {
    (void)n_src, (void)attrs;
    double n = (double)loom_tensor_nelem(src[0]), nk = (double)loom_tensor_nelem(dst);
    c->flops = 5.0 * n + n * (double)dst->shape[1] + 2.0 * nk;
    c->bytes_read = LOOM_ES(src[0]) * n;
    c->bytes_written = 8.0 * nk; /* weights and ids */
}

static size_t gating_scratch(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs) {
    (void)n_src, (void)dst, (void)attrs;
    return loom_align64((size_t)src[0]->shape[1] * sizeof(float));
}

static loom_status gating_kernel(const loom_kernel_args *a, loom_isa isa) {
    LOOM_RETURN_IF(a->n_dst_extra < 1 || !a->dst_extra[0], LOOM_ERR_INVALID_ARG,
                   "moe_gating_top_k_softmax: the ids output is missing");
    const loom_moe_gating_attrs *at = a->attrs;
    return loom_moe_gating_rows(a->src[0], at->k, at->renorm, a->dst, a->dst_extra[0], isa, a->ith, a->nth,
                                a->scratch);
}

LOOM_FUSED_LEVELS(moe_gating, gating_kernel)

void loom_register_moe_gating_op(loom_op_info *e) {
    e->infer = gating_infer, e->cost = gating_cost, e->scratch_size = gating_scratch, e->ref = moe_gating_ref;
    e->decomposition = "softmax top_k moe_weights";
    LOOM_FUSED_SET_LEVELS(e, moe_gating);
}

/* ------------------------------------------------------------ moe_ffn */

static loom_status ffn_infer(const loom_tensor *const *src, int n_src, const void *attrs, loom_tensor *dst) {
    const char *op = "moe_ffn";
    LOOM_TRY(loom_ref_check_arity(op, src, n_src, 6, 7));
    LOOM_RETURN_IF(!attrs, LOOM_ERR_INVALID_ARG, "%s: attributes missing", op);
    const loom_tensor *x = src[0], *wg = src[1], *wu = src[2], *wd = src[3], *ids = src[4], *w = src[5];
    LOOM_TRY(loom_ref_check_dtype(op, 0, "x", x, LOOM_REF_DT(LOOM_F32)));
    LOOM_RETURN_IF(x->ndim != 2 || x->stride[1] != 1, LOOM_ERR_SHAPE, "%s: input 0 (x) must be [T, D], rows contiguous",
                   op);
    int64_t T = x->shape[0], D = x->shape[1], E = wg->ndim == 3 ? wg->shape[0] : 0, H = wg->ndim == 3 ? wg->shape[1] : 0;
    LOOM_RETURN_IF(wg->ndim != 3 || wu->ndim != 3 || wd->ndim != 3 || wg->shape[2] != D || wu->shape[0] != E ||
                       wu->shape[1] != H || wu->shape[2] != D || wd->shape[0] != E || wd->shape[1] != D ||
                       wd->shape[2] != H || wg->dtype != wu->dtype || !loom_tensor_is_contiguous(wg) ||
                       !loom_tensor_is_contiguous(wu) || !loom_tensor_is_contiguous(wd),
                   LOOM_ERR_SHAPE, "%s: experts must be contiguous gate/up [E, H, %lld] (one dtype) and down [E, %lld, H]",
                   op, (long long)D, (long long)D);
    LOOM_RETURN_IF(ids->dtype != LOOM_I32 || ids->ndim != 2 || ids->shape[0] != T || !loom_tensor_is_contiguous(ids),
                   LOOM_ERR_SHAPE, "%s: input 4 (ids) must be contiguous i32 [%lld, k]", op, (long long)T);
    LOOM_RETURN_IF(w->dtype != LOOM_F32 || w->ndim != 2 || w->shape[0] != T || w->shape[1] != ids->shape[1],
                   LOOM_ERR_SHAPE, "%s: input 5 (weights) must be f32 [%lld, %lld]", op, (long long)T,
                   (long long)ids->shape[1]);
    if (n_src == 7)
        LOOM_RETURN_IF(src[6]->dtype != LOOM_F32 || src[6]->ndim != 2 || src[6]->shape[0] != T ||
                           src[6]->shape[1] != D || src[6]->stride[1] != 1,
                       LOOM_ERR_SHAPE, "%s: input 6 (residual) must be f32 [%lld, %lld]", op, (long long)T,
                       (long long)D);
    loom_ref_set_dst(dst, LOOM_F32, 2, x->shape);
    return LOOM_OK;
}

static double expert_bytes(const loom_tensor *w) {
    return (double)loom_moe_expert_bytes(w->dtype, w->shape[1], w->shape[2]);
}

static void ffn_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs,
                     loom_cost *c) {
    (void)attrs;
    const loom_tensor *wg = src[1];
    double T = (double)src[0]->shape[0], D = (double)src[0]->shape[1], H = (double)wg->shape[1];
    const double e = LOOM_ES(dst); /* the activations: x, its sorted rows, h, the expert rows, y */
    double k = (double)src[4]->shape[1], R = T * k;
    double experts = loom_moe_experts_read(src[0]->shape[0], src[4]->shape[1], wg->shape[0]);
    c->flops = 2.0 * R * D * H * 3.0 + 5.0 * R * H + 2.0 * R * D + (n_src == 7 ? T * D : 0.0);
    /* phase 0: x, ids; 1: x sorted, the routed experts' gate and up; 2: h, their down;
     * 3: the expert rows, weights (and the residual) */
    c->bytes_read = e * T * D + 4.0 * R + e * R * D + experts * (expert_bytes(wg) + expert_bytes(src[2]) +
                                                                  expert_bytes(src[3])) +
                    e * R * H + e * R * D + 4.0 * R + (n_src == 7 ? e * T * D : 0.0);
    c->bytes_written = e * R * D + e * R * H + e * R * D + e * T * D;
}

static loom_moe_experts experts_of(const loom_tensor *const *src, const loom_moe_ffn_attrs *at,
                                   loom_tensor *const *extra, const int32_t *offsets) {
    const loom_tensor *x = src[0], *wg = src[1], *ids = src[4];
    int64_t R = x->shape[0] * ids->shape[1];
    loom_moe_experts g = {.offsets = offsets, .n_experts = wg->shape[0], .rows = R, .D = x->shape[1],
                          .H = wg->shape[1], .x = extra ? extra[0]->data : NULL, .ldx = x->shape[1],
                          .w_gate = wg->data, .w_up = src[2]->data, .wtype = wg->dtype, .w_down = src[3]->data,
                          .dtype_down = src[3]->dtype, .h = extra ? extra[1]->data : NULL, .ldh = wg->shape[1],
                          .y = extra ? extra[2]->data : NULL, .ldy = x->shape[1], .block_n = at->block_n,
                          .act = (loom_act_precision)at->act_precision};
    return g;
}

static size_t ffn_scratch(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs) {
    (void)n_src, (void)dst;
    const loom_tensor *ids = src[4];
    int64_t T = src[0]->shape[0], k = ids->shape[1];
    loom_moe_experts g = experts_of(src, attrs, NULL, NULL);
    return loom_moe_routing_bytes(T, k, src[1]->shape[0]) + loom_align64(loom_moe_experts_scratch(&g, T * k));
}

static loom_status ffn_kernel(const loom_kernel_args *a, loom_isa isa) {
    LOOM_RETURN_IF(a->n_dst_extra < 3, LOOM_ERR_INVALID_ARG, "moe_ffn: the phase buffers are missing");
    const loom_tensor *x = a->src[0], *ids = a->src[4];
    int64_t T = x->shape[0], k = ids->shape[1], E = a->src[1]->shape[0];
    loom_moe_routing r;
    LOOM_TRY(loom_moe_route(ids->data, k, T, k, E, a->scratch, &r));
    void *s = (char *)a->scratch + loom_moe_routing_bytes(T, k, E);
    loom_moe_experts g = experts_of(a->src, a->attrs, a->dst_extra, r.offsets);
    g.invariant = a->invariant;
    switch (a->phase) {
    case 0:
        loom_moe_gather_rows(&r, x->data, x->stride[0], x->shape[1], a->dst_extra[0]->data, x->shape[1], a->ith,
                             a->nth);
        return LOOM_OK;
    case 1: return loom_moe_experts_gate_up(&g, isa, a->ith, a->nth, s);
    case 2: return loom_moe_experts_down(&g, isa, a->ith, a->nth, s);
    default: {
        const loom_tensor *w = a->src[5], *res = a->n_src == 7 ? a->src[6] : NULL;
        loom_moe_finalize_rows(g.y, g.ldy, r.inv, w->data, w->stride[0], res ? res->data : NULL,
                               res ? res->stride[0] : 0, a->dst->data, a->dst->stride[0], T, k, x->shape[1], a->ith,
                               a->nth);
        return LOOM_OK;
    }
    }
}

LOOM_FUSED_LEVELS(moe_ffn, ffn_kernel)

void loom_register_moe_ffn_op(loom_op_info *e) {
    e->infer = ffn_infer, e->cost = ffn_cost, e->scratch_size = ffn_scratch, e->ref = moe_ffn_ref;
    e->n_phases = 4;
    e->decomposition = "matmul_id matmul_id silu mul matmul_id moe_sum add";
    LOOM_FUSED_SET_LEVELS(e, moe_ffn);
}
