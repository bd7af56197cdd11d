/* Reference matmul: y[..., N] = x[..., K] . W[N, K]^T, W in f32/f16/bf16, f64 accumulation. */
#include "ops/ref/ref.h"

#include "base/status.h"

#include <string.h>

loom_status loom_ref_matmul_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                  loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity("matmul", src, n_src, 2, 2));
    const loom_tensor *x = src[0], *w = src[1];
    LOOM_TRY(loom_ref_check_dtype("matmul", 0, "x", x, LOOM_REF_DT(LOOM_F32)));
    LOOM_TRY(loom_ref_check_dtype("matmul", 1, "W", w, LOOM_REF_FLOATS));
    int64_t K = x->shape[x->ndim - 1];
    char ws[LOOM_REF_SHAPE_BUF];
    LOOM_RETURN_IF(w->ndim != 2 || w->shape[1] != K, LOOM_ERR_SHAPE,
                   "matmul: input 1 (W) shape %s does not match x's last dim %lld: "
                   "expected [N, %lld]",
                   loom_ref_shape_str(w, ws, sizeof ws), (long long)K, (long long)K);
    int64_t shape[LOOM_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = w->shape[0];
    loom_ref_set_dst(dst, LOOM_F32, x->ndim, shape);
    return LOOM_OK;
}

void loom_ref_matmul_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                          const void *attrs, loom_cost *c) {
    const loom_tensor *x = src[0], *w = src[1];
    double K = (double)w->shape[1], N = (double)w->shape[0];
    double M = (double)loom_ref_rows(x, x->ndim - 1);
    c->flops = 2.0 * M * N * K;
    c->bytes_read = M * K * 4.0 + N * K * (double)loom_dtype_size(w->dtype);
    c->bytes_written = M * N * 4.0;
}

loom_status loom_ref_matmul(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *w = a->src[1];
    const loom_tensor *y = a->dst;
    int last = x->ndim - 1;
    int64_t K = x->shape[last], N = w->shape[0];
    int64_t M = loom_ref_rows(x, last);
    const float *xd = x->data;
    float *yd = y->data;
    /* One work item per output element, so decode (M = 1) still spreads over
     * all threads; each element's sum runs k = 0..K-1 whatever the split. */
    int64_t lo, hi;
    loom_ref_split(M * N, a->ith, a->nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        int64_t m = t / N, n = t % N;
        int64_t xo = loom_ref_row_offset(x, last, m);
        int64_t yo = loom_ref_row_offset(y, last, m);
        double acc = 0.0;
        for (int64_t k = 0; k < K; k++)
            acc += (double)xd[xo + k * x->stride[last]] *
                   (double)loom_ref_get(w, n * w->stride[0] + k * w->stride[1]);
        yd[yo + n * y->stride[last]] = (float)acc;
    }
    return LOOM_OK;
}
