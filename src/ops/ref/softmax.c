/* Reference softmax over the last dim of x*scale (+ mask), causal optional. */
#include "ops/ref/ref.h"

#include "base/status.h"

#include <math.h>

static const loom_softmax_attrs default_attrs = {0};

loom_status loom_ref_softmax_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                   loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity("softmax", src, n_src, 1, 2));
    const loom_tensor *x = src[0];
    LOOM_TRY(loom_ref_check_dtype("softmax", 0, "x", x, LOOM_REF_DT(LOOM_F32)));
    int nd = x->ndim;
    int64_t C = x->shape[nd - 1], R = nd >= 2 ? x->shape[nd - 2] : 1;
    if (n_src == 2) {
        const loom_tensor *m = src[1];
        LOOM_TRY(loom_ref_check_dtype("softmax", 1, "mask", m, LOOM_REF_DT(LOOM_F32)));
        /* a 1-D x has one row, so a 1-D mask [C] is accepted for it as well */
        int ok = (m->ndim == 2 && m->shape[0] == R && m->shape[1] == C) ||
                 (m->ndim == 1 && R == 1 && m->shape[0] == C);
        char ms[LOOM_REF_SHAPE_BUF];
        LOOM_RETURN_IF(!ok, LOOM_ERR_SHAPE,
                       "softmax: input 1 (mask) shape %s does not match x's last two dims: "
                       "expected [%lld, %lld]",
                       loom_ref_shape_str(m, ms, sizeof ms), (long long)R, (long long)C);
    }
    loom_ref_set_dst(dst, LOOM_F32, nd, x->shape);
    return LOOM_OK;
}

void loom_ref_softmax_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                           const void *attrs, loom_cost *c) {
    double n = (double)loom_tensor_nelem(src[0]);
    c->flops = 5.0 * n; /* scale, mask, max, exp, sum, divide */
    c->bytes_read = n * LOOM_ES(src[0]) + (n_src == 2 ? (double)loom_tensor_nelem(src[1]) * 4.0 : 0.0);
    c->bytes_written = n * LOOM_ES(dst);
}

loom_status loom_ref_softmax(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *m = a->n_src == 2 ? a->src[1] : NULL;
    const loom_tensor *y = a->dst;
    const loom_softmax_attrs *at = a->attrs ? a->attrs : &default_attrs;
    int nd = x->ndim, last = nd - 1;
    int64_t C = x->shape[last], R = nd >= 2 ? x->shape[nd - 2] : 1;
    float scale = at->scale != 0.0f ? at->scale : 1.0f;
    const float *xd = x->data, *md = m ? m->data : NULL;
    float *yd = y->data;
    int64_t lo, hi;
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t i = r % R; /* row within the [R, C] matrix: the mask and causal index */
        int64_t xo = loom_ref_row_offset(x, last, r), yo = loom_ref_row_offset(y, last, r);
        int64_t mo = m ? (m->ndim == 2 ? i * m->stride[0] : 0) : 0;
        int64_t ms = m ? m->stride[m->ndim - 1] : 0;
        /* pass 1: z into y (works in place too), and the row max */
        double mx = -INFINITY;
        for (int64_t j = 0; j < C; j++) {
            float z = xd[xo + j * x->stride[last]] * scale;
            if (md) z += md[mo + j * ms];
            if (at->causal && j > (int64_t)at->pos_offset + i) z = -INFINITY;
            yd[yo + j * y->stride[last]] = z;
            if (z > mx || isnan(z)) mx = z; /* a NaN input must come out as NaN */
        }
        if (mx == -INFINITY) { /* every column masked: zeros, not 0/0 */
            for (int64_t j = 0; j < C; j++) yd[yo + j * y->stride[last]] = 0.0f;
            continue;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < C; j++) sum += exp((double)yd[yo + j * y->stride[last]] - mx);
        for (int64_t j = 0; j < C; j++) {
            float *p = &yd[yo + j * y->stride[last]];
            *p = (float)(exp((double)*p - mx) / sum);
        }
    }
    return LOOM_OK;
}
