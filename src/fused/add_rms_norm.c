/* add + RMSNorm: r = x + residual, y = rmsnorm(r) * gamma, one pass per row:
 * the row sum is written once (r) and re-read from L1 for the norm. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "fused/fused_internal.h"

loom_status loom_fused_check_2d(const char *op, const char *name, const loom_tensor *t,
                                int64_t rows, int64_t cols) {
    LOOM_RETURN_IF(!t || !t->data, LOOM_ERR_INVALID_ARG, "%s: %s is missing", op, name);
    LOOM_RETURN_IF(t->dtype != LOOM_F32, LOOM_ERR_DTYPE, "%s: %s must be f32, found %s", op, name,
                   loom_dtype_name(t->dtype));
    LOOM_RETURN_IF(t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols || t->stride[1] != 1 ||
                       t->stride[0] < cols,
                   LOOM_ERR_SHAPE, "%s: %s must be [%lld, %lld] with contiguous rows, found %dD [%lld, %lld]",
                   op, name, (long long)rows, (long long)cols, t->ndim, (long long)t->shape[0],
                   (long long)(t->ndim > 1 ? t->shape[1] : 1));
    return LOOM_OK;
}

void loom_fused_run(loom_pool *pool, loom_pool_fn fn, void *arg) {
    if (pool) loom_pool_run(pool, fn, arg);
    else fn(0, 1, arg);
}

loom_status loom_fused_acquire(const char *op, void *workspace, size_t bytes, size_t need, int nth,
                               unsigned char **mem) {
    *mem = workspace;
    if (workspace) {
        LOOM_RETURN_IF(bytes < need, LOOM_ERR_INVALID_ARG,
                       "%s: workspace of %zu bytes, need %zu (loom_%s_workspace_size for %d threads)", op,
                       bytes, need, op, nth);
        LOOM_RETURN_IF((uintptr_t)workspace % 64 != 0, LOOM_ERR_INVALID_ARG,
                       "%s: workspace must be 64-byte aligned", op);
        return LOOM_OK;
    }
    *mem = loom_alloc_aligned(need, LOOM_ALIGN);
    LOOM_RETURN_IF(!*mem, LOOM_ERR_NOMEM, "%s: cannot allocate %zu bytes of working memory", op, need);
    return LOOM_OK;
}

void loom_fused_release(void *workspace, unsigned char *mem) {
    if (!workspace) loom_free_aligned(mem);
}

loom_status loom_fused_check_size_query(const char *op, int nth, const size_t *bytes) {
    LOOM_RETURN_IF(!bytes, LOOM_ERR_INVALID_ARG, "%s: bytes is NULL", op);
    LOOM_RETURN_IF(nth < 1, LOOM_ERR_INVALID_ARG, "%s: nth must be >= 1, got %d", op, nth);
    return LOOM_OK;
}

loom_add_rms_norm_params loom_add_rms_norm_default_params(void) {
    loom_add_rms_norm_params p = {.epsilon = 1e-6f};
    return p;
}

typedef struct {
    const loom_tensor *x, *res, *gamma;
    loom_tensor *y, *r;
    float eps;
    const loom_vec_fns *f;
} arn_ctx;

static void arn_worker(int ith, int nth, void *arg) {
    arn_ctx *c = arg;
    int64_t M = c->x->shape[0], D = c->x->shape[1], lo, hi;
    loom_matmul_split(M, 1, ith, nth, &lo, &hi);
    const float *g = c->gamma->data;
    for (int64_t m = lo; m < hi; m++) {
        const float *x = (const float *)c->x->data + m * c->x->stride[0];
        const float *res = (const float *)c->res->data + m * c->res->stride[0];
        float *r = (float *)c->r->data + m * c->r->stride[0];
        float *y = (float *)c->y->data + m * c->y->stride[0];
        c->f->add(x, res, r, D);
        double inv = 1.0 / sqrt(c->f->sumsq(r, D) / (double)D + (double)c->eps);
        c->f->scale_row(r, g, inv, y, D);
    }
}

loom_status loom_add_rms_norm(const loom_tensor *x, const loom_tensor *residual,
                              const loom_tensor *gamma, const loom_add_rms_norm_params *p,
                              loom_tensor *y, loom_tensor *r_out, loom_pool *pool) {
    const char *op = "add_rms_norm";
    loom_add_rms_norm_params prm = p ? *p : loom_add_rms_norm_default_params();
    LOOM_RETURN_IF(!x || x->ndim != 2, LOOM_ERR_SHAPE, "%s: x must be 2-D [M, D]", op);
    int64_t M = x->shape[0], D = x->shape[1];
    LOOM_TRY(loom_fused_check_2d(op, "x", x, M, D));
    LOOM_TRY(loom_fused_check_2d(op, "residual", residual, M, D));
    LOOM_TRY(loom_fused_check_2d(op, "y", y, M, D));
    LOOM_TRY(loom_fused_check_2d(op, "r_out", r_out, M, D));
    LOOM_RETURN_IF(!gamma || gamma->dtype != LOOM_F32 || loom_tensor_nelem(gamma) != D ||
                       !loom_tensor_is_contiguous(gamma),
                   LOOM_ERR_SHAPE, "%s: gamma must be contiguous f32 [%lld]", op, (long long)D);
    LOOM_RETURN_IF(!(prm.epsilon > 0.0f), LOOM_ERR_INVALID_ARG, "%s: epsilon must be > 0, got %g",
                   op, (double)prm.epsilon);
    arn_ctx c = {x, residual, gamma, y, r_out, prm.epsilon, loom_vec_fns_for(loom_cpu_isa())};
    loom_fused_run(pool, arn_worker, &c);
    return LOOM_OK;
}
