/* Reference elementwise ops: add, mul (identical shapes) and silu. */
#include "ops/ref/ref.h"

#include "base/status.h"

#include <math.h>

static loom_status binary_infer(const char *op, const loom_tensor *const *src, int n_src,
                                loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity(op, src, n_src, 2, 2));
    const loom_tensor *x = src[0], *y = src[1];
    LOOM_TRY(loom_ref_check_dtype(op, 0, "a", x, LOOM_REF_DT(LOOM_F32)));
    LOOM_TRY(loom_ref_check_dtype(op, 1, "b", y, LOOM_REF_DT(LOOM_F32)));
    int same = x->ndim == y->ndim;
    for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == y->shape[d];
    char xs[LOOM_REF_SHAPE_BUF], ys[LOOM_REF_SHAPE_BUF];
    LOOM_RETURN_IF(!same, LOOM_ERR_SHAPE,
                   "%s: input 1 (b) shape %s does not match input 0 (a) shape %s: expected "
                   "identical shapes",
                   op, loom_ref_shape_str(y, ys, sizeof ys), loom_ref_shape_str(x, xs, sizeof xs));
    loom_ref_set_dst(dst, LOOM_F32, x->ndim, x->shape);
    return LOOM_OK;
}

static void binary_cost(const loom_tensor *const *src, const loom_tensor *dst, loom_cost *c) {
    double n = (double)loom_tensor_nelem(src[0]);
    c->flops = n;
    c->bytes_read = n * (LOOM_ES(src[0]) + LOOM_ES(src[1]));
    c->bytes_written = n * LOOM_ES(dst);
}

/* Work split over flat elements so a single long row still uses every thread. */
static loom_status binary_run(const loom_kernel_args *a, int is_mul) {
    const loom_tensor *x = a->src[0], *y = a->src[1], *z = a->dst;
    const float *xd = x->data, *yd = y->data;
    float *zd = z->data;
    int64_t lo, hi;
    loom_ref_split(loom_tensor_nelem(x), a->ith, a->nth, &lo, &hi);
    for (int64_t e = lo; e < hi; e++) {
        float u = xd[loom_ref_row_offset(x, x->ndim, e)];
        float v = yd[loom_ref_row_offset(y, y->ndim, e)];
        zd[loom_ref_row_offset(z, z->ndim, e)] = is_mul ? u * v : u + v;
    }
    return LOOM_OK;
}

loom_status loom_ref_add_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                               loom_tensor *dst) {
    return binary_infer("add", src, n_src, dst);
}

void loom_ref_add_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                       const void *attrs, loom_cost *c) {
    binary_cost(src, dst, c);
}

loom_status loom_ref_add(const loom_kernel_args *a) { return binary_run(a, 0); }

loom_status loom_ref_mul_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                               loom_tensor *dst) {
    return binary_infer("mul", src, n_src, dst);
}

void loom_ref_mul_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                       const void *attrs, loom_cost *c) {
    binary_cost(src, dst, c);
}

loom_status loom_ref_mul(const loom_kernel_args *a) { return binary_run(a, 1); }

loom_status loom_ref_silu_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity("silu", src, n_src, 1, 1));
    LOOM_TRY(loom_ref_check_dtype("silu", 0, "x", src[0], LOOM_REF_DT(LOOM_F32)));
    loom_ref_set_dst(dst, LOOM_F32, src[0]->ndim, src[0]->shape);
    return LOOM_OK;
}

void loom_ref_silu_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                        const void *attrs, loom_cost *c) {
    double n = (double)loom_tensor_nelem(src[0]);
    c->flops = 4.0 * n; /* negate, exp, add, divide */
    c->bytes_read = n * LOOM_ES(src[0]);
    c->bytes_written = n * LOOM_ES(dst);
}

loom_status loom_ref_silu(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *y = a->dst;
    const float *xd = x->data;
    float *yd = y->data;
    int64_t lo, hi;
    loom_ref_split(loom_tensor_nelem(x), a->ith, a->nth, &lo, &hi);
    for (int64_t e = lo; e < hi; e++) {
        double v = xd[loom_ref_row_offset(x, x->ndim, e)];
        /* exp(-v) overflows to +inf for v < -709: v / inf = -0, the right limit */
        yd[loom_ref_row_offset(y, y->ndim, e)] = (float)(v / (1.0 + exp(-v)));
    }
    return LOOM_OK;
}
