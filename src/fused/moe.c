/*
 * Fused mixture-of-experts operators (the ops-transformer MoE family):
 * gating (softmax + top-k + renormalisation per row), routing (the token rows
 * grouped by expert), the grouped SwiGLU matmul over all experts in one launch
 * (each expert's weights read once for all rows routed to it) and the
 * finalisation (weighted un-permute + residual). Thread-level pieces in
 * moe.h; the op-level calls below validate, allocate and run them on a pool.
 */
#include "fused/moe.h"

#include <stdatomic.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/status.h"
#include "fused/fused_internal.h"
#include "ops/ref/ref.h"

/* ------------------------------------------------------------ thread-level pieces */

loom_status loom_moe_gating_rows(const loom_tensor *logits, int64_t k, int renorm, loom_tensor *weights,
                                 loom_tensor *ids, loom_isa isa, int ith, int nth, float *scratch) {
    int64_t T = logits->shape[0], E = logits->shape[1], lo, hi;
    loom_ref_split(T, ith, nth, &lo, &hi);
    const int64_t row_shape[2] = {1, E};
    loom_tensor xr, pr;
    LOOM_TRY(loom_tensor_init(&pr, LOOM_F32, 2, row_shape, scratch));
    for (int64_t t = lo; t < hi; t++) {
        LOOM_TRY(loom_tensor_init(&xr, LOOM_F32, 2, row_shape, (float *)logits->data + t * logits->stride[0]));
        xr.stride[1] = logits->stride[1];
        loom_kernel_args s = {.src = {&xr}, .n_src = 1, .dst = &pr, .ith = 0, .nth = 1};
        LOOM_TRY(loom_op_kernel(LOOM_OP_SOFTMAX, isa)(&s));
        int32_t *id = (int32_t *)ids->data + t * ids->stride[0];
        float *w = (float *)weights->data + t * weights->stride[0];
        loom_moe_top_k_row(scratch, E, k, id);
        loom_moe_weights_row(scratch, id, k, renorm, w);
    }
    return LOOM_OK;
}

void loom_moe_gather_rows(const loom_moe_routing *r, const float *x, int64_t ldx, int64_t D, float *xs,
                          int64_t ldxs, int ith, int nth) {
    int64_t lo, hi;
    loom_ref_split(r->n_tokens * r->top_k, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++)
        memcpy(xs + i * ldxs, x + (r->perm[i] / r->top_k) * ldx, (size_t)D * sizeof(float));
}

/* Columns per unit: the rule's; else, where an expert gets fewer rows than
 * the GEMM path takes on average (decode), blocks of 128 that share out over
 * the threads; else the FFN's choice for all the rows, which keeps a unit's
 * up tile (rows x block, the bound of any expert's rows) within an eighth of
 * L3. From the shapes only, never the routing: every thread picks the same. */
static int64_t block_of(const loom_moe_experts *g, int64_t N) {
    int64_t used = g->rows < g->n_experts ? g->rows : g->n_experts;
    int64_t per_expert = used > 0 ? (g->rows + used - 1) / used : 1;
    int64_t bn = g->block_n > 0              ? g->block_n
                 : per_expert < LOOM_GEMM_MIN_M ? 128
                                              : loom_ffn_block_cols(g->rows, N);
    return bn < N ? bn : (N > 0 ? N : 1);
}

size_t loom_moe_experts_scratch(const loom_moe_experts *g, int64_t rows_bound) {
    int64_t bh = block_of(g, g->H), bd = block_of(g, g->D);
    size_t up = loom_align64((size_t)(rows_bound * bh) * sizeof(float));
    size_t a = up + loom_moe_gemm_scratch(rows_bound, g->D, bh, g->wtype, g->act);
    size_t b = loom_moe_gemm_scratch(rows_bound, g->H, bd, g->dtype_down, g->act);
    return a > b ? a : b;
}

/* The GEMM of expert e's rows against columns [n0, n0 + nb) of w ([E, N, K]). */
static loom_matmul_args unit_gemm(const loom_moe_experts *g, int64_t e, const float *x, int64_t ldx, const void *w,
                                  loom_dtype wt, int64_t N, int64_t K, int64_t n0, int64_t nb, float *y,
                                  int64_t ldy) {
    int64_t r0 = g->offsets[e];
    loom_matmul_args a = {.x = x + r0 * ldx, .ldx = ldx,
                          .w = (const char *)w + (size_t)e * loom_moe_expert_bytes(wt, N, K) +
                               (size_t)n0 * loom_dtype_row_bytes(wt, K),
                          .ldw = K, .wtype = wt, .y = y, .ldy = ldy, .M = g->offsets[e + 1] - r0, .N = nb, .K = K,
                          .act = g->act, .invariant = g->invariant};
    return a;
}

loom_status loom_moe_experts_gate_up(const loom_moe_experts *g, loom_isa isa, int ith, int nth, void *scratch) {
    int64_t bn = block_of(g, g->H), lo, hi;
    loom_ref_split(loom_moe_units(g->offsets, g->n_experts, g->H, bn), ith, nth, &lo, &hi);
    float *up = scratch;
    int64_t rows_bound = g->rows;
    void *mm = (char *)scratch + loom_align64((size_t)(rows_bound * bn) * sizeof(float));
    for (int64_t i = lo; i < hi; i++) {
        int64_t e, n0;
        loom_moe_unit_at(g->offsets, g->n_experts, g->H, bn, i, &e, &n0);
        int64_t nb = g->H - n0 < bn ? g->H - n0 : bn, r0 = g->offsets[e], M = g->offsets[e + 1] - r0;
        float *hb = g->h + r0 * g->ldh + n0;
        loom_matmul_args u = unit_gemm(g, e, g->x, g->ldx, g->w_up, g->wtype, g->H, g->D, n0, nb, up, nb);
        LOOM_TRY(loom_matmul_run(&u, isa, 0, 1, mm));
        loom_matmul_args gt = unit_gemm(g, e, g->x, g->ldx, g->w_gate, g->wtype, g->H, g->D, n0, nb, hb, g->ldh);
        LOOM_TRY(loom_matmul_run(&gt, isa, 0, 1, mm));
        LOOM_TRY(loom_fused_act_mul_tile(LOOM_ACT_SILU, isa, hb, g->ldh, up, M, nb));
    }
    return LOOM_OK;
}

loom_status loom_moe_experts_down(const loom_moe_experts *g, loom_isa isa, int ith, int nth, void *scratch) {
    int64_t bn = block_of(g, g->D), lo, hi;
    loom_ref_split(loom_moe_units(g->offsets, g->n_experts, g->D, bn), ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        int64_t e, n0;
        loom_moe_unit_at(g->offsets, g->n_experts, g->D, bn, i, &e, &n0);
        int64_t nb = g->D - n0 < bn ? g->D - n0 : bn;
        loom_matmul_args d = unit_gemm(g, e, g->h, g->ldh, g->w_down, g->dtype_down, g->D, g->H, n0, nb,
                                       g->y + g->offsets[e] * g->ldy + n0, g->ldy);
        LOOM_TRY(loom_matmul_run(&d, isa, 0, 1, scratch));
    }
    return LOOM_OK;
}

void loom_moe_finalize_rows(const float *ys, int64_t ldys, const int32_t *inv, const float *w, int64_t ldw,
                            const float *res, int64_t ldres, float *y, int64_t ldy, int64_t T, int64_t k,
                            int64_t D, int ith, int nth) {
    int64_t lo, hi;
    loom_ref_split(T, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        /* the k rows of token t are anywhere in ys: summed by rank with moe_sum's row function */
        const float *rows[k];
        for (int64_t j = 0; j < k; j++) rows[j] = ys + inv[t * k + j] * ldys;
        loom_moe_sum_row(rows, w + t * ldw, k, D, res ? res + t * ldres : NULL, y + t * ldy);
    }
}

/* ------------------------------------------------------------ op-level calls */

typedef struct moe_call {
    int                phase;
    loom_isa           isa;
    _Atomic int        status;
    /* gating */
    const loom_tensor *logits; loom_tensor *weights, *ids; int64_t k; int renorm;
    /* routing */
    const loom_moe_routing *r; const loom_tensor *x; loom_tensor *xs;
    /* experts */
    const loom_moe_experts *g;
    /* finalize */
    const loom_tensor *ys, *res, *w; const int32_t *inv; loom_tensor *y;
    unsigned char     *scratch; size_t per;
} moe_call;

static void moe_worker(int ith, int nth, void *arg) {
    moe_call *c = arg;
    void *s = c->scratch ? c->scratch + c->per * (size_t)ith : NULL; /* routing and finalize need none */
    loom_status st = LOOM_OK;
    switch (c->phase) {
    case 0: st = loom_moe_gating_rows(c->logits, c->k, c->renorm, c->weights, c->ids, c->isa, ith, nth, s); break;
    case 1:
        loom_moe_gather_rows(c->r, c->x->data, c->x->stride[0], c->x->shape[1], c->xs->data, c->xs->stride[0], ith, nth);
        break;
    case 2: st = loom_moe_experts_gate_up(c->g, c->isa, ith, nth, s); break;
    case 3: st = loom_moe_experts_down(c->g, c->isa, ith, nth, s); break;
    default:
        loom_moe_finalize_rows(c->ys->data, c->ys->stride[0], c->inv, c->w->data, c->w->stride[0],
                               c->res ? c->res->data : NULL, c->res ? c->res->stride[0] : 0, c->y->data,
                               c->y->stride[0], c->y->shape[0], c->w->shape[1], c->y->shape[1], ith, nth);
    }
    if (st != LOOM_OK) atomic_store(&c->status, (int)st);
}

static int pool_threads(loom_pool *pool) { return pool ? loom_pool_size(pool) : 1; }

static loom_status check_i32(const char *op, const char *name, const loom_tensor *t, int64_t rows, int64_t cols) {
    LOOM_RETURN_IF(!t || t->dtype != LOOM_I32 || t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols ||
                       !loom_tensor_is_contiguous(t),
                   LOOM_ERR_SHAPE, "%s: %s must be contiguous i32 [%lld, %lld]", op, name, (long long)rows,
                   (long long)cols);
    return LOOM_OK;
}

loom_status loom_moe_gating_top_k_softmax(const loom_tensor *logits, const loom_moe_gating_params *p,
                                          loom_tensor *weights, loom_tensor *expert_ids, loom_pool *pool) {
    const char *op = "moe_gating_top_k_softmax";
    LOOM_RETURN_IF(!logits || !p || !weights || !expert_ids, LOOM_ERR_INVALID_ARG, "%s: argument missing", op);
    LOOM_RETURN_IF(logits->ndim != 2, LOOM_ERR_SHAPE, "%s: logits must be f32 [T, E]", op);
    int64_t T = logits->shape[0], E = logits->shape[1];
    LOOM_TRY(loom_fused_check_2d(op, "logits", logits, T, E));
    LOOM_RETURN_IF(p->top_k < 1 || p->top_k > E, LOOM_ERR_INVALID_ARG, "%s: top_k %d must be in [1, %lld]", op,
                   p->top_k, (long long)E);
    LOOM_TRY(loom_fused_check_2d(op, "weights", weights, T, p->top_k));
    LOOM_TRY(check_i32(op, "expert_ids", expert_ids, T, p->top_k));
    int nth = pool_threads(pool);
    size_t per = loom_align64((size_t)E * sizeof(float));
    unsigned char *mem = loom_alloc_aligned(per * (size_t)nth, 64);
    LOOM_RETURN_IF(!mem, LOOM_ERR_NOMEM, "%s: out of memory", op);
    moe_call c = {.phase = 0, .isa = loom_cpu_isa(), .logits = logits, .weights = weights, .ids = expert_ids,
                  .k = p->top_k, .renorm = p->renorm, .scratch = mem, .per = per};
    loom_fused_run(pool, moe_worker, &c);
    loom_free_aligned(mem);
    return (loom_status)atomic_load(&c.status);
}

loom_status loom_moe_init_routing(const loom_tensor *x, const loom_tensor *expert_ids, int64_t n_experts,
                                  loom_tensor *expanded_x, loom_tensor *expanded_row_idx,
                                  loom_tensor *expert_offsets, loom_pool *pool) {
    const char *op = "moe_init_routing";
    LOOM_RETURN_IF(!x || !expert_ids || !expanded_x || !expanded_row_idx || !expert_offsets, LOOM_ERR_INVALID_ARG,
                   "%s: argument missing", op);
    LOOM_RETURN_IF(x->ndim != 2 || expert_ids->ndim != 2, LOOM_ERR_SHAPE, "%s: x [T, D] and expert_ids [T, k]", op);
    int64_t T = x->shape[0], D = x->shape[1], k = expert_ids->shape[1];
    LOOM_RETURN_IF(n_experts < 1 || n_experts > INT32_MAX, LOOM_ERR_INVALID_ARG, "%s: n_experts %lld", op,
                   (long long)n_experts);
    LOOM_TRY(loom_fused_check_2d(op, "x", x, T, D));
    LOOM_TRY(check_i32(op, "expert_ids", expert_ids, T, k));
    LOOM_TRY(loom_fused_check_2d(op, "expanded_x", expanded_x, T * k, D));
    LOOM_TRY(check_i32(op, "expanded_row_idx", expanded_row_idx, 1, T * k));
    LOOM_TRY(check_i32(op, "expert_offsets", expert_offsets, 1, n_experts + 1));
    unsigned char *mem = loom_alloc_aligned(loom_moe_routing_bytes(T, k, n_experts), 64);
    LOOM_RETURN_IF(!mem, LOOM_ERR_NOMEM, "%s: out of memory", op);
    loom_moe_routing r;
    loom_status st = loom_moe_route(expert_ids->data, k, T, k, n_experts, mem, &r);
    if (st == LOOM_OK) {
        memcpy(expanded_row_idx->data, r.perm, (size_t)(T * k) * sizeof(int32_t));
        memcpy(expert_offsets->data, r.offsets, (size_t)(n_experts + 1) * sizeof(int32_t));
        moe_call c = {.phase = 1, .r = &r, .x = x, .xs = expanded_x};
        loom_fused_run(pool, moe_worker, &c);
    }
    loom_free_aligned(mem);
    return st;
}

static loom_status check_experts(const char *op, const char *name, const loom_tensor *w, int64_t E, int64_t N,
                                 int64_t K) {
    LOOM_RETURN_IF(!w || w->ndim != 3 || w->shape[0] != E || w->shape[1] != N || w->shape[2] != K ||
                       !loom_tensor_is_contiguous(w),
                   LOOM_ERR_SHAPE, "%s: %s must be contiguous [%lld, %lld, %lld]", op, name, (long long)E,
                   (long long)N, (long long)K);
    LOOM_RETURN_IF(loom_dtype_is_quantized(w->dtype) && K % 32, LOOM_ERR_SHAPE,
                   "%s: %s of dtype %s needs rows of whole blocks of 32 (%lld)", op, name,
                   loom_dtype_name(w->dtype), (long long)K);
    return LOOM_OK;
}

loom_grouped_matmul_params loom_grouped_matmul_default_params(void) {
    loom_grouped_matmul_params p = {.block_n = 0, .act_precision = LOOM_ACT_PREC_Q8, .invariant = 1};
    return p;
}

loom_status loom_grouped_matmul_swiglu(const loom_tensor *x, const loom_tensor *expert_offsets,
                                       const loom_tensor *w_gate, const loom_tensor *w_up, const loom_tensor *w_down,
                                       const loom_grouped_matmul_params *p, loom_tensor *y, loom_pool *pool) {
    const char *op = "grouped_matmul_swiglu";
    LOOM_RETURN_IF(!x || !expert_offsets || !w_gate || !w_up || !w_down || !y, LOOM_ERR_INVALID_ARG,
                   "%s: argument missing", op);
    loom_grouped_matmul_params prm = p ? *p : loom_grouped_matmul_default_params();
    LOOM_RETURN_IF(x->ndim != 2 || w_gate->ndim != 3, LOOM_ERR_SHAPE, "%s: x [R, D] and w_gate [E, H, D]", op);
    int64_t R = x->shape[0], D = x->shape[1], E = w_gate->shape[0], H = w_gate->shape[1];
    LOOM_TRY(loom_fused_check_2d(op, "x", x, R, D));
    LOOM_TRY(loom_fused_check_2d(op, "y", y, R, D));
    LOOM_TRY(check_i32(op, "expert_offsets", expert_offsets, 1, E + 1));
    LOOM_TRY(check_experts(op, "w_gate", w_gate, E, H, D));
    LOOM_TRY(check_experts(op, "w_up", w_up, E, H, D));
    LOOM_TRY(check_experts(op, "w_down", w_down, E, D, H));
    LOOM_RETURN_IF(w_up->dtype != w_gate->dtype, LOOM_ERR_DTYPE, "%s: w_gate and w_up dtypes differ", op);
    const int32_t *off = expert_offsets->data;
    LOOM_RETURN_IF(off[0] != 0 || off[E] != R, LOOM_ERR_INVALID_ARG,
                   "%s: expert_offsets must run from 0 to the rows of x (%lld), found %d .. %d", op, (long long)R,
                   (int)off[0], (int)off[E]);
    for (int64_t e = 0; e < E; e++)
        LOOM_RETURN_IF(off[e + 1] < off[e], LOOM_ERR_INVALID_ARG, "%s: expert_offsets decrease at expert %lld", op,
                       (long long)e);
    size_t hb = loom_align64((size_t)(R * H) * sizeof(float));
    loom_moe_experts g = {.offsets = off, .n_experts = E, .rows = R, .D = D, .H = H, .x = x->data,
                          .ldx = x->stride[0], .w_gate = w_gate->data, .w_up = w_up->data, .wtype = w_gate->dtype,
                          .w_down = w_down->data, .dtype_down = w_down->dtype, .ldh = H, .y = y->data,
                          .ldy = y->stride[0], .block_n = prm.block_n, .act = prm.act_precision,
                          .invariant = prm.invariant};
    int nth = pool_threads(pool);
    size_t per = loom_align64(loom_moe_experts_scratch(&g, R));
    unsigned char *mem = loom_alloc_aligned(hb + per * (size_t)nth, 64);
    LOOM_RETURN_IF(!mem, LOOM_ERR_NOMEM, "%s: out of memory", op);
    g.h = (float *)(void *)mem;
    moe_call c = {.phase = 2, .isa = loom_cpu_isa(), .g = &g, .scratch = mem + hb, .per = per};
    loom_fused_run(pool, moe_worker, &c);
    c.phase = 3;
    if (atomic_load(&c.status) == LOOM_OK) loom_fused_run(pool, moe_worker, &c);
    loom_free_aligned(mem);
    return (loom_status)atomic_load(&c.status);
}

loom_status loom_moe_finalize_routing(const loom_tensor *expanded_y, const loom_tensor *expanded_row_idx,
                                      const loom_tensor *weights, const loom_tensor *residual, loom_tensor *y,
                                      loom_pool *pool) {
    const char *op = "moe_finalize_routing";
    LOOM_RETURN_IF(!expanded_y || !expanded_row_idx || !weights || !y, LOOM_ERR_INVALID_ARG, "%s: argument missing",
                   op);
    LOOM_RETURN_IF(weights->ndim != 2 || y->ndim != 2, LOOM_ERR_SHAPE, "%s: weights [T, k] and y [T, D]", op);
    int64_t T = weights->shape[0], k = weights->shape[1], D = y->shape[1];
    LOOM_TRY(loom_fused_check_2d(op, "weights", weights, T, k));
    LOOM_TRY(loom_fused_check_2d(op, "y", y, T, D));
    LOOM_TRY(loom_fused_check_2d(op, "expanded_y", expanded_y, T * k, D));
    LOOM_TRY(check_i32(op, "expanded_row_idx", expanded_row_idx, 1, T * k));
    if (residual) LOOM_TRY(loom_fused_check_2d(op, "residual", residual, T, D));
    int32_t *inv = loom_alloc_aligned((size_t)(T * k + 1) * sizeof(int32_t), 64);
    LOOM_RETURN_IF(!inv, LOOM_ERR_NOMEM, "%s: out of memory", op);
    for (int64_t i = 0; i < T * k; i++) inv[i] = -1;
    const int32_t *perm = expanded_row_idx->data;
    loom_status st = LOOM_OK;
    for (int64_t i = 0; i < T * k && st == LOOM_OK; i++) {
        if (perm[i] < 0 || perm[i] >= T * k || inv[perm[i]] >= 0)
            st = loom_set_error(LOOM_ERR_INVALID_ARG, "%s: expanded_row_idx is not a permutation of [0, %lld) (at %lld)",
                                op, (long long)(T * k), (long long)i);
        else inv[perm[i]] = (int32_t)i;
    }
    if (st == LOOM_OK) {
        moe_call c = {.phase = 4, .ys = expanded_y, .inv = inv, .w = weights, .res = residual, .y = y};
        loom_fused_run(pool, moe_worker, &c);
    }
    loom_free_aligned(inv);
    return st;
}
