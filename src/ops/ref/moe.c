/* Reference kernels of the mixture-of-experts primitives: top_k, moe_weights,
 * matmul_id and moe_sum (ops.h). The fused MoE ops (src/fused/moe.c) call the
 * row functions below, so fused and unfused results agree bit for bit. */
#include "ops/ref/ref.h"

#include <math.h>
#include <string.h>

#include "base/status.h"
#include "ops/matmul/matmul_id.h"
#include "ops/quant.h"

/* ------------------------------------------------------------ row functions */

void loom_moe_top_k_row(const float *x, int64_t E, int64_t k, int32_t *ids) {
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t i = 0; i < j && !taken; i++) taken = ids[i] == e;
            if (taken) continue;
            /* the first largest; a NaN loses to every number, and is taken only when nothing else is left */
            if (best < 0 || x[e] > x[best] || (isnan(x[best]) && !isnan(x[e]))) best = e;
        }
        ids[j] = (int32_t)best;
    }
}

void loom_moe_weights_row(const float *p, const int32_t *ids, int64_t k, int renorm, float *w) {
    double sum = 0.0;
    for (int64_t j = 0; j < k; j++) sum += (double)p[ids[j]];
    for (int64_t j = 0; j < k; j++) w[j] = renorm ? (float)((double)p[ids[j]] / sum) : p[ids[j]];
}

void loom_moe_sum_row(const float *const *rows, const float *w, int64_t k, int64_t D, const float *res, float *y) {
    for (int64_t d = 0; d < D; d++) {
        double acc = 0.0;
        for (int64_t j = 0; j < k; j++) acc += (double)w[j] * (double)rows[j][d];
        y[d] = res ? res[d] + (float)acc : (float)acc;
    }
}

/* ------------------------------------------------------------ top_k */

loom_status loom_ref_top_k_infer(const loom_tensor *const *src, int n_src, const void *attrs, loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity("top_k", src, n_src, 1, 1));
    const loom_tensor *x = src[0];
    LOOM_TRY(loom_ref_check_dtype("top_k", 0, "x", x, LOOM_REF_DT(LOOM_F32)));
    const loom_top_k_attrs *at = attrs;
    LOOM_RETURN_IF(x->ndim != 2, LOOM_ERR_SHAPE, "top_k: input 0 (x) must be 2-D [T, E]");
    LOOM_RETURN_IF(!at || at->k < 1 || at->k > x->shape[1], LOOM_ERR_INVALID_ARG,
                   "top_k: k (%d) must be in [1, %lld] (the columns of x)", at ? at->k : 0, (long long)x->shape[1]);
    const int64_t shape[2] = {x->shape[0], at->k};
    loom_ref_set_dst(dst, LOOM_I32, 2, shape);
    return LOOM_OK;
}

void loom_ref_top_k_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs,
                         loom_cost *c) {
    (void)n_src, (void)attrs;
    double n = (double)loom_tensor_nelem(src[0]);
    c->flops = n * (double)dst->shape[1];
    c->bytes_read = LOOM_ES(src[0]) * n;
    c->bytes_written = 4.0 * (double)loom_tensor_nelem(dst);
}

loom_status loom_ref_top_k(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *y = a->dst;
    int64_t E = x->shape[1], k = y->shape[1], lo, hi;
    loom_ref_split(x->shape[0], a->ith, a->nth, &lo, &hi);
    float row[E > 0 ? E : 1];
    for (int64_t t = lo; t < hi; t++) {
        for (int64_t e = 0; e < E; e++) row[e] = ((const float *)x->data)[t * x->stride[0] + e * x->stride[1]];
        int32_t ids[k];
        loom_moe_top_k_row(row, E, k, ids);
        for (int64_t j = 0; j < k; j++) ((int32_t *)y->data)[t * y->stride[0] + j * y->stride[1]] = ids[j];
    }
    return LOOM_OK;
}

/* ------------------------------------------------------------ moe_weights */

static loom_status check_ids(const char *op, int idx, const loom_tensor *ids, int64_t T) {
    LOOM_TRY(loom_ref_check_dtype(op, idx, "ids", ids, LOOM_REF_DT(LOOM_I32)));
    LOOM_RETURN_IF(ids->ndim != 2 || ids->shape[0] != T || ids->shape[1] < 1, LOOM_ERR_SHAPE,
                   "%s: input %d (ids) must be i32 [%lld, k]", op, idx, (long long)T);
    return LOOM_OK;
}

loom_status loom_ref_moe_weights_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                       loom_tensor *dst) {
    (void)attrs;
    LOOM_TRY(loom_ref_check_arity("moe_weights", src, n_src, 2, 2));
    const loom_tensor *p = src[0];
    LOOM_TRY(loom_ref_check_dtype("moe_weights", 0, "p", p, LOOM_REF_DT(LOOM_F32)));
    LOOM_RETURN_IF(p->ndim != 2, LOOM_ERR_SHAPE, "moe_weights: input 0 (p) must be 2-D [T, E]");
    LOOM_TRY(check_ids("moe_weights", 1, src[1], p->shape[0]));
    loom_ref_set_dst(dst, LOOM_F32, 2, src[1]->shape);
    return LOOM_OK;
}

void loom_ref_moe_weights_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                               const void *attrs, loom_cost *c) {
    (void)n_src, (void)attrs, (void)src;
    double n = (double)loom_tensor_nelem(dst);
    c->flops = 2.0 * n;
    c->bytes_read = 8.0 * n; /* the ids and the probabilities they pick */
    c->bytes_written = 4.0 * n;
}

loom_status loom_ref_moe_weights(const loom_kernel_args *a) {
    const loom_tensor *p = a->src[0], *ids = a->src[1], *y = a->dst;
    const loom_moe_weights_attrs *at = a->attrs;
    int64_t E = p->shape[1], k = ids->shape[1], lo, hi;
    loom_ref_split(p->shape[0], a->ith, a->nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        float row[E], w[k];
        int32_t id[k];
        for (int64_t e = 0; e < E; e++) row[e] = ((const float *)p->data)[t * p->stride[0] + e * p->stride[1]];
        for (int64_t j = 0; j < k; j++) {
            id[j] = ((const int32_t *)ids->data)[t * ids->stride[0] + j * ids->stride[1]];
            LOOM_RETURN_IF(id[j] < 0 || id[j] >= E, LOOM_ERR_INVALID_ARG,
                           "moe_weights: expert id %d of token %lld is outside [0, %lld)", (int)id[j], (long long)t,
                           (long long)E);
        }
        loom_moe_weights_row(row, id, k, at && at->renorm, w);
        for (int64_t j = 0; j < k; j++) ((float *)y->data)[t * y->stride[0] + j * y->stride[1]] = w[j];
    }
    return LOOM_OK;
}

/* ------------------------------------------------------------ matmul_id */

loom_status loom_ref_matmul_id_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                     loom_tensor *dst) {
    (void)attrs;
    const char *op = "matmul_id";
    LOOM_TRY(loom_ref_check_arity(op, src, n_src, 3, 3));
    const loom_tensor *x = src[0], *w = src[1], *ids = src[2];
    LOOM_TRY(loom_ref_check_dtype(op, 0, "x", x, LOOM_REF_DT(LOOM_F32)));
    LOOM_TRY(loom_ref_check_dtype(op, 1, "W", w, LOOM_REF_FLOATS | LOOM_REF_QUANTS));
    LOOM_RETURN_IF(x->ndim != 2 && x->ndim != 3, LOOM_ERR_SHAPE, "%s: input 0 (x) must be [T, K] or [T, k, K]", op);
    int64_t T = x->shape[0], K = x->shape[x->ndim - 1];
    LOOM_TRY(check_ids(op, 2, ids, T));
    int64_t k = ids->shape[1];
    LOOM_RETURN_IF(x->ndim == 3 && x->shape[1] != k, LOOM_ERR_SHAPE,
                   "%s: input 0 (x) has %lld ranks, ids %lld", op, (long long)x->shape[1], (long long)k);
    char ws[LOOM_REF_SHAPE_BUF];
    LOOM_RETURN_IF(w->ndim != 3 || w->shape[2] != K || !loom_tensor_is_contiguous(w), LOOM_ERR_SHAPE,
                   "%s: input 1 (W) shape %s: expected contiguous [E, N, %lld]", op,
                   loom_ref_shape_str(w, ws, sizeof ws), (long long)K);
    LOOM_RETURN_IF(loom_dtype_is_quantized(w->dtype) && K % LOOM_QBLOCK, LOOM_ERR_SHAPE,
                   "%s: input 1 (W) of dtype %s needs K (%lld) to be a multiple of %d", op,
                   loom_dtype_name(w->dtype), (long long)K, LOOM_QBLOCK);
    const int64_t shape[3] = {T, k, w->shape[1]};
    loom_ref_set_dst(dst, LOOM_F32, 3, shape);
    return LOOM_OK;
}

void loom_ref_matmul_id_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs,
                             loom_cost *c) {
    (void)n_src, (void)attrs;
    const loom_tensor *x = src[0], *w = src[1], *ids = src[2];
    double T = (double)ids->shape[0], k = (double)ids->shape[1], N = (double)w->shape[1], K = (double)w->shape[2];
    c->flops = 2.0 * T * k * N * K;
    /* only the experts the step routes rows to are read: min(E, T k) of them */
    c->bytes_read = LOOM_ES(x) * (double)loom_tensor_nelem(x) + 4.0 * T * k +
                    loom_moe_experts_read(ids->shape[0], ids->shape[1], w->shape[0]) *
                        (double)loom_moe_expert_bytes(w->dtype, w->shape[1], w->shape[2]);
    c->bytes_written = LOOM_ES(dst) * (double)loom_tensor_nelem(dst);
}

loom_status loom_ref_matmul_id(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *w = a->src[1], *ids = a->src[2], *y = a->dst;
    int64_t T = ids->shape[0], k = ids->shape[1], E = w->shape[0], N = w->shape[1], K = w->shape[2];
    size_t eb = loom_moe_expert_bytes(w->dtype, N, K), rb = loom_dtype_row_bytes(w->dtype, K);
    int quant = loom_dtype_is_quantized(w->dtype);
    int64_t lo, hi;
    loom_ref_split(T * k * N, a->ith, a->nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        int64_t t = i / (k * N), j = i / N % k, n = i % N;
        int32_t e = ((const int32_t *)ids->data)[t * ids->stride[0] + j * ids->stride[1]];
        LOOM_RETURN_IF(e < 0 || e >= E, LOOM_ERR_INVALID_ARG,
                       "matmul_id: expert id %d of token %lld, rank %lld, is outside [0, %lld)", (int)e,
                       (long long)t, (long long)j, (long long)E);
        const float *xr = (const float *)x->data + t * x->stride[0] + (x->ndim == 3 ? j * x->stride[1] : 0);
        int64_t xs = x->stride[x->ndim - 1];
        const char *row = (const char *)w->data + (size_t)e * eb + (size_t)n * rb;
        double acc = 0.0;
        float blk[LOOM_QBLOCK];
        for (int64_t k0 = 0; k0 < K; k0 += LOOM_QBLOCK) {
            int64_t nk = K - k0 < LOOM_QBLOCK ? K - k0 : LOOM_QBLOCK;
            if (quant) loom_row_to_f32(w->dtype, row + (size_t)(k0 / LOOM_QBLOCK) * loom_dtype_block_bytes(w->dtype), blk, LOOM_QBLOCK);
            else loom_row_to_f32(w->dtype, row + loom_dtype_row_bytes(w->dtype, k0), blk, nk);
            for (int64_t kk = 0; kk < nk; kk++) acc += (double)xr[(k0 + kk) * xs] * (double)blk[kk];
        }
        ((float *)y->data)[t * y->stride[0] + j * y->stride[1] + n * y->stride[2]] = (float)acc;
    }
    return LOOM_OK;
}

/* ------------------------------------------------------------ moe_sum */

loom_status loom_ref_moe_sum_infer(const loom_tensor *const *src, int n_src, const void *attrs, loom_tensor *dst) {
    (void)attrs;
    LOOM_TRY(loom_ref_check_arity("moe_sum", src, n_src, 2, 2));
    const loom_tensor *x = src[0], *w = src[1];
    LOOM_TRY(loom_ref_check_dtype("moe_sum", 0, "x", x, LOOM_REF_DT(LOOM_F32)));
    LOOM_TRY(loom_ref_check_dtype("moe_sum", 1, "w", w, LOOM_REF_DT(LOOM_F32)));
    LOOM_RETURN_IF(x->ndim != 3 || w->ndim != 2 || w->shape[0] != x->shape[0] || w->shape[1] != x->shape[1],
                   LOOM_ERR_SHAPE, "moe_sum: inputs must be x [T, k, D] and w [T, k]");
    const int64_t shape[2] = {x->shape[0], x->shape[2]};
    loom_ref_set_dst(dst, LOOM_F32, 2, shape);
    return LOOM_OK;
}

void loom_ref_moe_sum_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs,
                           loom_cost *c) {
    (void)n_src, (void)attrs;
    double n = (double)loom_tensor_nelem(src[0]);
    c->flops = 2.0 * n;
    c->bytes_read = LOOM_ES(src[0]) * n + 4.0 * (double)loom_tensor_nelem(src[1]);
    c->bytes_written = LOOM_ES(dst) * (double)loom_tensor_nelem(dst);
}

loom_status loom_ref_moe_sum(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *w = a->src[1], *y = a->dst;
    int64_t k = x->shape[1], D = x->shape[2], lo, hi;
    LOOM_RETURN_IF(x->stride[2] != 1 || y->stride[1] != 1, LOOM_ERR_UNSUPPORTED,
                   "moe_sum: rows must be contiguous");
    loom_ref_split(x->shape[0], a->ith, a->nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        float wr[k];
        const float *rows[k];
        for (int64_t j = 0; j < k; j++) {
            wr[j] = ((const float *)w->data)[t * w->stride[0] + j * w->stride[1]];
            rows[j] = (const float *)x->data + t * x->stride[0] + j * x->stride[1];
        }
        loom_moe_sum_row(rows, wr, k, D, NULL, (float *)y->data + t * y->stride[0]);
    }
    return LOOM_OK;
}
