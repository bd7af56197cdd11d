/* Reference LayerNorm: y = (x - mean) / sqrt(var + eps) * gamma + beta over
 * the last dim (biased variance, as torch.nn.LayerNorm). */
#include "ops/ref/ref_encoder.h"

#include "base/status.h"

#include <math.h>

static loom_status check_vec(const loom_tensor *v, int idx, const char *what, int64_t D) {
    LOOM_TRY(loom_ref_check_dtype("layer_norm", idx, what, v, LOOM_REF_DT(LOOM_F32)));
    char vs[LOOM_REF_SHAPE_BUF];
    LOOM_RETURN_IF(v->ndim != 1 || v->shape[0] != D, LOOM_ERR_SHAPE,
                   "layer_norm: input %d (%s) shape %s does not match x's last dim: expected [%lld]",
                   idx, what, loom_ref_shape_str(v, vs, sizeof vs), (long long)D);
    return LOOM_OK;
}

loom_status loom_ref_layer_norm_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                      loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity("layer_norm", src, n_src, 1, 3));
    const loom_tensor *x = src[0];
    LOOM_TRY(loom_ref_check_dtype("layer_norm", 0, "x", x, LOOM_REF_DT(LOOM_F32)));
    int64_t D = x->shape[x->ndim - 1];
    if (n_src >= 2) LOOM_TRY(check_vec(src[1], 1, "gamma", D));
    if (n_src >= 3) LOOM_TRY(check_vec(src[2], 2, "beta", D));
    const loom_layer_norm_attrs *at = attrs;
    LOOM_RETURN_IF(!at, LOOM_ERR_INVALID_ARG, "layer_norm: attributes (eps) missing");
    LOOM_RETURN_IF(!(at->eps > 0.0f), LOOM_ERR_INVALID_ARG, "layer_norm: eps %g: expected eps > 0",
                   (double)at->eps);
    loom_ref_set_dst(dst, LOOM_F32, x->ndim, x->shape);
    return LOOM_OK;
}

void loom_ref_layer_norm_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                              const void *attrs, loom_cost *c) {
    const loom_tensor *x = src[0];
    double n = (double)loom_tensor_nelem(x);
    double D = (double)x->shape[x->ndim - 1];
    c->flops = 7.0 * n; /* mean, centre, square+add, scale, gamma, beta */
    c->bytes_read = n * LOOM_ES(x) + (double)(n_src - 1) * D * 4.0;
    c->bytes_written = n * LOOM_ES(dst);
}

loom_status loom_ref_layer_norm(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0];
    const loom_tensor *g = a->n_src >= 2 ? a->src[1] : NULL, *b = a->n_src >= 3 ? a->src[2] : NULL;
    const loom_tensor *y = a->dst;
    const loom_layer_norm_attrs *at = a->attrs;
    int last = x->ndim - 1;
    int64_t D = x->shape[last], xs = x->stride[last], ys = y->stride[last];
    const float *xd = x->data, *gd = g ? g->data : NULL, *bd = b ? b->data : NULL;
    float *yd = y->data;
    int64_t lo, hi;
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t xo = loom_ref_row_offset(x, last, r), yo = loom_ref_row_offset(y, last, r);
        double sum = 0.0;
        for (int64_t d = 0; d < D; d++) sum += xd[xo + d * xs];
        double mean = sum / (double)D, ss = 0.0;
        for (int64_t d = 0; d < D; d++) {
            double v = (double)xd[xo + d * xs] - mean;
            ss += v * v;
        }
        double inv = 1.0 / sqrt(ss / (double)D + (double)at->eps);
        for (int64_t d = 0; d < D; d++) {
            double v = ((double)xd[xo + d * xs] - mean) * inv;
            if (gd) v *= (double)gd[d * g->stride[0]];
            if (bd) v += (double)bd[d * b->stride[0]];
            yd[yo + d * ys] = (float)v;
        }
    }
    return LOOM_OK;
}
