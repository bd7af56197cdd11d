/* Reference RMSNorm: y = x / sqrt(mean(x^2) + eps) * gamma over the last dim. */
#include "ops/ref/ref.h"

#include "base/status.h"

#include <math.h>

loom_status loom_ref_rms_norm_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                    loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity("rms_norm", src, n_src, 1, 2));
    const loom_tensor *x = src[0];
    LOOM_TRY(loom_ref_check_dtype("rms_norm", 0, "x", x, LOOM_REF_DT(LOOM_F32)));
    int64_t D = x->shape[x->ndim - 1];
    if (n_src == 2) {
        const loom_tensor *g = src[1];
        LOOM_TRY(loom_ref_check_dtype("rms_norm", 1, "gamma", g, LOOM_REF_DT(LOOM_F32)));
        char gs[LOOM_REF_SHAPE_BUF];
        LOOM_RETURN_IF(g->ndim != 1 || g->shape[0] != D, LOOM_ERR_SHAPE,
                       "rms_norm: input 1 (gamma) shape %s does not match x's last dim: "
                       "expected [%lld]",
                       loom_ref_shape_str(g, gs, sizeof gs), (long long)D);
    }
    const loom_rms_norm_attrs *at = attrs;
    LOOM_RETURN_IF(!at, LOOM_ERR_INVALID_ARG, "rms_norm: attributes (eps) missing");
    /* also rejects NaN */
    LOOM_RETURN_IF(!(at->eps > 0.0f), LOOM_ERR_INVALID_ARG, "rms_norm: eps %g: expected eps > 0",
                   (double)at->eps);
    loom_ref_set_dst(dst, LOOM_F32, x->ndim, x->shape);
    return LOOM_OK;
}

void loom_ref_rms_norm_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                            const void *attrs, loom_cost *c) {
    const loom_tensor *x = src[0];
    double n = (double)loom_tensor_nelem(x);
    double D = (double)x->shape[x->ndim - 1];
    c->flops = 4.0 * n; /* square+add, scale, gamma */
    c->bytes_read = n * LOOM_ES(x) + (n_src == 2 ? D * 4.0 : 0.0);
    c->bytes_written = n * LOOM_ES(dst);
}

loom_status loom_ref_rms_norm(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *g = a->n_src == 2 ? a->src[1] : NULL;
    const loom_tensor *y = a->dst;
    const loom_rms_norm_attrs *at = a->attrs;
    int last = x->ndim - 1;
    int64_t D = x->shape[last];
    const float *xd = x->data, *gd = g ? g->data : NULL;
    float *yd = y->data;
    int64_t lo, hi;
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t xo = loom_ref_row_offset(x, last, r), yo = loom_ref_row_offset(y, last, r);
        double ss = 0.0;
        for (int64_t d = 0; d < D; d++) {
            double v = xd[xo + d * x->stride[last]];
            ss += v * v;
        }
        double inv = 1.0 / sqrt(ss / (double)D + (double)at->eps);
        for (int64_t d = 0; d < D; d++) {
            double v = (double)xd[xo + d * x->stride[last]] * inv;
            if (gd) v *= (double)gd[d * g->stride[0]];
            yd[yo + d * y->stride[last]] = (float)v;
        }
    }
    return LOOM_OK;
}
