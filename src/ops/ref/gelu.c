/* Reference GELU (erf form as torch's default, or the tanh approximation of
 * "gelu_new" / "gelu_pytorch_tanh") and the row-broadcast bias add of
 * Linear layers with bias. */
#include "ops/ref/ref_encoder.h"

#include "base/status.h"

#include <math.h>

loom_status loom_ref_gelu_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity("gelu", src, n_src, 1, 1));
    LOOM_TRY(loom_ref_check_dtype("gelu", 0, "x", src[0], LOOM_REF_DT(LOOM_F32)));
    const loom_gelu_attrs *at = attrs;
    LOOM_RETURN_IF(at && (at->approximate < 0 || at->approximate > 1), LOOM_ERR_INVALID_ARG,
                   "gelu: approximate %d: expected 0 (erf) or 1 (tanh)", at->approximate);
    loom_ref_set_dst(dst, LOOM_F32, src[0]->ndim, src[0]->shape);
    return LOOM_OK;
}

void loom_ref_gelu_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                        const void *attrs, loom_cost *c) {
    double n = (double)loom_tensor_nelem(src[0]);
    c->flops = 8.0 * n;
    c->bytes_read = n * LOOM_ES(src[0]);
    c->bytes_written = n * LOOM_ES(dst);
}

loom_status loom_ref_gelu(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *y = a->dst;
    const loom_gelu_attrs *at = a->attrs;
    int tanh_form = at && at->approximate;
    const float *xd = x->data;
    float *yd = y->data;
    int last = x->ndim - 1;
    int64_t D = x->shape[last];
    int64_t lo, hi;
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t xo = loom_ref_row_offset(x, last, r), yo = loom_ref_row_offset(y, last, r);
        for (int64_t d = 0; d < D; d++) {
            double v = xd[xo + d * x->stride[last]], o;
            if (tanh_form)
                o = 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
            else
                o = 0.5 * v * (1.0 + erf(v * 0.7071067811865476));
            yd[yo + d * y->stride[last]] = (float)o;
        }
    }
    return LOOM_OK;
}

loom_status loom_ref_add_bias_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                    loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity("add_bias", src, n_src, 2, 2));
    const loom_tensor *x = src[0], *b = src[1];
    LOOM_TRY(loom_ref_check_dtype("add_bias", 0, "x", x, LOOM_REF_DT(LOOM_F32)));
    LOOM_TRY(loom_ref_check_dtype("add_bias", 1, "b", b, LOOM_REF_DT(LOOM_F32)));
    int64_t N = x->shape[x->ndim - 1];
    char bs[LOOM_REF_SHAPE_BUF];
    LOOM_RETURN_IF(b->ndim != 1 || b->shape[0] != N, LOOM_ERR_SHAPE,
                   "add_bias: input 1 (b) shape %s does not match x's last dim: expected [%lld]",
                   loom_ref_shape_str(b, bs, sizeof bs), (long long)N);
    loom_ref_set_dst(dst, LOOM_F32, x->ndim, x->shape);
    return LOOM_OK;
}

void loom_ref_add_bias_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                            const void *attrs, loom_cost *c) {
    double n = (double)loom_tensor_nelem(src[0]);
    c->flops = n;
    c->bytes_read = n * LOOM_ES(src[0]) + (double)src[1]->shape[0] * 4.0;
    c->bytes_written = n * LOOM_ES(dst);
}

loom_status loom_ref_add_bias(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *b = a->src[1], *y = a->dst;
    const float *xd = x->data, *bd = b->data;
    float *yd = y->data;
    int last = x->ndim - 1;
    int64_t N = x->shape[last];
    int64_t lo, hi;
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t xo = loom_ref_row_offset(x, last, r), yo = loom_ref_row_offset(y, last, r);
        for (int64_t d = 0; d < N; d++)
            yd[yo + d * y->stride[last]] = xd[xo + d * x->stride[last]] + bd[d * b->stride[0]];
    }
    return LOOM_OK;
}
