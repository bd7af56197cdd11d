/* Reference decompositions of the fused MoE ops into the primitive reference
 * ops (loom_op_run at LOOM_ISA_REF): softmax, top_k, moe_weights, matmul_id,
 * silu, mul, moe_sum, add. The oracle of tests/unit/test_fused_moe.c. */
#include "fused/ref/fused_ref.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

/* A malloc'd tensor of dt and shape (free its data). */
static loom_status tmp(loom_tensor *t, loom_dtype dt, int ndim, const int64_t *shape) {
    LOOM_TRY(loom_tensor_init(t, dt, ndim, shape, NULL));
    t->data = calloc((size_t)loom_tensor_nelem(t) + 1, 4);
    LOOM_RETURN_IF(!t->data, LOOM_ERR_NOMEM, "moe ref: out of memory");
    return LOOM_OK;
}

static loom_status run(loom_op op, const loom_tensor *a, const loom_tensor *b, const loom_tensor *c,
                       const void *attrs, loom_tensor *y) {
    const loom_tensor *src[3] = {a, b, c};
    return loom_op_run(op, src, c ? 3 : b ? 2 : 1, attrs, y, LOOM_ISA_REF);
}

loom_status loom_moe_gating_ref(const loom_tensor *logits, const loom_moe_gating_params *p, loom_tensor *weights,
                                loom_tensor *expert_ids) {
    loom_tensor probs;
    LOOM_TRY(tmp(&probs, LOOM_F32, 2, logits->shape));
    loom_top_k_attrs ka = {.k = p->top_k};
    loom_moe_weights_attrs wa = {.renorm = p->renorm};
    loom_status s = run(LOOM_OP_SOFTMAX, logits, NULL, NULL, NULL, &probs);
    if (s == LOOM_OK) s = run(LOOM_OP_TOP_K, &probs, NULL, NULL, &ka, expert_ids);
    if (s == LOOM_OK) s = run(LOOM_OP_MOE_WEIGHTS, &probs, expert_ids, NULL, &wa, weights);
    free(probs.data);
    return s;
}

loom_status loom_moe_init_routing_ref(const loom_tensor *x, const loom_tensor *expert_ids, int64_t n_experts,
                                      loom_tensor *expanded_x, loom_tensor *expanded_row_idx,
                                      loom_tensor *expert_offsets) {
    int64_t T = x->shape[0], D = x->shape[1], k = expert_ids->shape[1], i = 0;
    const int32_t *ids = expert_ids->data;
    int32_t *perm = expanded_row_idx->data, *off = expert_offsets->data;
    /* experts in order, and each expert's slots in slot order */
    for (int64_t e = 0; e < n_experts; e++) {
        off[e] = (int32_t)i;
        for (int64_t s = 0; s < T * k; s++)
            if (ids[s] == e) perm[i++] = (int32_t)s;
    }
    off[n_experts] = (int32_t)i;
    LOOM_RETURN_IF(i != T * k, LOOM_ERR_INVALID_ARG, "moe_init_routing ref: an expert id is out of range");
    for (int64_t r = 0; r < T * k; r++)
        memcpy((float *)expanded_x->data + r * expanded_x->stride[0],
               (const float *)x->data + (perm[r] / k) * x->stride[0], (size_t)D * sizeof(float));
    return LOOM_OK;
}

loom_status loom_grouped_matmul_swiglu_ref(const loom_tensor *x, const loom_tensor *expert_offsets,
                                           const loom_tensor *w_gate, const loom_tensor *w_up,
                                           const loom_tensor *w_down, loom_tensor *y) {
    int64_t R = x->shape[0], D = x->shape[1], E = w_gate->shape[0], H = w_gate->shape[1];
    const int32_t *off = expert_offsets->data;
    /* each row's expert as ids [R, 1]: matmul_id over rank 1 */
    loom_tensor ids, g, u, h, d, xr = *x;
    const int64_t ids_shape[2] = {R, 1}, hs[3] = {R, 1, H}, ds[3] = {R, 1, D};
    LOOM_TRY(tmp(&ids, LOOM_I32, 2, ids_shape));
    for (int64_t e = 0; e < E; e++)
        for (int64_t r = off[e]; r < off[e + 1]; r++) ((int32_t *)ids.data)[r] = (int32_t)e;
    loom_status s = tmp(&g, LOOM_F32, 3, hs);
    if (s == LOOM_OK) s = tmp(&u, LOOM_F32, 3, hs);
    if (s == LOOM_OK) s = tmp(&h, LOOM_F32, 3, hs);
    if (s == LOOM_OK) s = tmp(&d, LOOM_F32, 3, ds);
    if (s == LOOM_OK) s = run(LOOM_OP_MATMUL_ID, &xr, w_gate, &ids, NULL, &g);
    if (s == LOOM_OK) s = run(LOOM_OP_MATMUL_ID, &xr, w_up, &ids, NULL, &u);
    if (s == LOOM_OK) s = run(LOOM_OP_SILU, &g, NULL, NULL, NULL, &h);
    if (s == LOOM_OK) s = run(LOOM_OP_MUL, &h, &u, NULL, NULL, &g);
    if (s == LOOM_OK) s = run(LOOM_OP_MATMUL_ID, &g, w_down, &ids, NULL, &d);
    for (int64_t r = 0; s == LOOM_OK && r < R; r++)
        memcpy((float *)y->data + r * y->stride[0], (float *)d.data + r * D, (size_t)D * sizeof(float));
    free(ids.data), free(g.data), free(u.data), free(h.data), free(d.data);
    return s;
}

loom_status loom_moe_finalize_routing_ref(const loom_tensor *expanded_y, const loom_tensor *expanded_row_idx,
                                          const loom_tensor *weights, const loom_tensor *residual, loom_tensor *y) {
    int64_t T = weights->shape[0], k = weights->shape[1], D = y->shape[1];
    const int32_t *perm = expanded_row_idx->data;
    loom_tensor per_rank, sum;
    const int64_t ps[3] = {T, k, D}, ss[2] = {T, D};
    LOOM_TRY(tmp(&per_rank, LOOM_F32, 3, ps));
    loom_status s = tmp(&sum, LOOM_F32, 2, ss);
    for (int64_t i = 0; s == LOOM_OK && i < T * k; i++) /* un-permute: slot perm[i] gets row i */
        memcpy((float *)per_rank.data + (int64_t)perm[i] * D, (const float *)expanded_y->data + i * expanded_y->stride[0],
               (size_t)D * sizeof(float));
    if (s == LOOM_OK) s = run(LOOM_OP_MOE_SUM, &per_rank, weights, NULL, NULL, residual ? &sum : y);
    if (s == LOOM_OK && residual) s = run(LOOM_OP_ADD, residual, &sum, NULL, NULL, y);
    free(per_rank.data), free(sum.data);
    return s;
}
