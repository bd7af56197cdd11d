/* Reference rotary position embedding over x[S, H, D] or x[B, S, H, D].
 *
 * The angle is computed in float exactly as llama2.c does
 * (freq = 1/powf(theta, 2i/n_rot), angle = pos * freq, cosf/sinf), because
 * greedy output must match llama2.c byte for byte; a double-precision angle
 * would differ in the last bits and can flip a token. */
#include "ops/ref/ref.h"

#include "base/status.h"

#include <math.h>

loom_status loom_rope_attrs_check(const char *op, const loom_rope_attrs *at, int64_t D) {
    int64_t n_rot = at->n_rot ? at->n_rot : D;
    LOOM_RETURN_IF(at->mode != LOOM_ROPE_INTERLEAVED && at->mode != LOOM_ROPE_HALF,
                   LOOM_ERR_INVALID_ARG, "%s: mode %d: expected 0 (interleaved) or 1 (half)", op,
                   (int)at->mode);
    LOOM_RETURN_IF(n_rot <= 0 || n_rot % 2 != 0 || n_rot > D, LOOM_ERR_INVALID_ARG,
                   "%s: n_rot %lld with head dim %lld: expected an even n_rot in [2, %lld] "
                   "(0 means D)",
                   op, (long long)n_rot, (long long)D, (long long)D);
    LOOM_RETURN_IF(!(at->theta > 0.0f) || !isfinite(at->theta), LOOM_ERR_INVALID_ARG,
                   "%s: theta %g: expected finite and > 0", op, (double)at->theta);
    LOOM_RETURN_IF(!(at->freq_scale >= 0.0f) || !isfinite(at->freq_scale), LOOM_ERR_INVALID_ARG,
                   "%s: freq_scale %g: expected finite and >= 0 (0 means 1)", op, (double)at->freq_scale);
    LOOM_RETURN_IF(at->pos_offset < 0, LOOM_ERR_INVALID_ARG, "%s: pos_offset %d: expected >= 0", op,
                   at->pos_offset);
    return LOOM_OK;
}

loom_status loom_ref_rope_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity("rope", src, n_src, 1, 2));
    const loom_tensor *x = src[0];
    LOOM_TRY(loom_ref_check_dtype("rope", 0, "x", x, LOOM_REF_DT(LOOM_F32)));
    char xs[LOOM_REF_SHAPE_BUF];
    LOOM_RETURN_IF(x->ndim != 3 && x->ndim != 4, LOOM_ERR_SHAPE,
                   "rope: input 0 (x) shape %s: expected [S, H, D] or [B, S, H, D]",
                   loom_ref_shape_str(x, xs, sizeof xs));
    const loom_rope_attrs *at = attrs;
    LOOM_RETURN_IF(!at, LOOM_ERR_INVALID_ARG, "rope: attributes missing");
    LOOM_TRY(loom_rope_attrs_check("rope", at, x->shape[x->ndim - 1]));
    if (n_src == 2) { /* a position per row s (a ragged batch's rows) */
        const loom_tensor *p = src[1];
        LOOM_TRY(loom_ref_check_dtype("rope", 1, "positions", p, LOOM_REF_DT(LOOM_I32)));
        LOOM_RETURN_IF(p->ndim != 1 || p->shape[0] != x->shape[x->ndim - 3], LOOM_ERR_SHAPE,
                       "rope: input 1 (positions) must be i32 [%lld], one per row of x",
                       (long long)x->shape[x->ndim - 3]);
    }
    loom_ref_set_dst(dst, LOOM_F32, x->ndim, x->shape);
    return LOOM_OK;
}

void loom_ref_rope_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                        const void *attrs, loom_cost *c) {
    const loom_tensor *x = src[0];
    const loom_rope_attrs *at = attrs;
    double n = (double)loom_tensor_nelem(x);
    double D = (double)x->shape[x->ndim - 1];
    double n_rot = at && at->n_rot ? (double)at->n_rot : D;
    c->flops = D > 0 ? 3.0 * n * n_rot / D : 0.0; /* 2 mul + 1 add per rotated element */
    c->bytes_read = n * LOOM_ES(x);
    c->bytes_written = n * LOOM_ES(dst);
}

loom_status loom_ref_rope(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *y = a->dst;
    const loom_rope_attrs *at = a->attrs;
    int nd = x->ndim, last = nd - 1;
    int64_t S = x->shape[nd - 3], H = x->shape[nd - 2], D = x->shape[last];
    int64_t n_rot = at->n_rot ? at->n_rot : D, half = n_rot / 2;
    float fscale = at->freq_scale != 0.0f ? at->freq_scale : 1.0f;
    const float *xd = x->data;
    float *yd = y->data;
    int64_t xs = x->stride[last], ys = y->stride[last];
    int64_t lo, hi;
    /* a row is one head vector: (b, s, h) */
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    const loom_tensor *pt = a->n_src > 1 ? a->src[1] : NULL;
    for (int64_t r = lo; r < hi; r++) {
        int64_t s = (r / H) % S;
        int64_t pos = pt ? ((const int32_t *)pt->data)[s * pt->stride[0]] : at->pos_offset + s;
        LOOM_RETURN_IF(pos < 0, LOOM_ERR_INVALID_ARG, "rope: row %lld has position %lld", (long long)s,
                       (long long)pos);
        float p = (float)pos * fscale;
        int64_t xo = loom_ref_row_offset(x, last, r), yo = loom_ref_row_offset(y, last, r);
        for (int64_t i = 0; i < half; i++) {
            float freq = 1.0f / powf(at->theta, (float)(2 * i) / (float)n_rot);
            float angle = p * freq;
            float c = cosf(angle), sn = sinf(angle);
            int64_t i0 = at->mode == LOOM_ROPE_HALF ? i : 2 * i;
            int64_t i1 = at->mode == LOOM_ROPE_HALF ? i + half : 2 * i + 1;
            float v0 = xd[xo + i0 * xs], v1 = xd[xo + i1 * xs];
            yd[yo + i0 * ys] = v0 * c - v1 * sn;
            yd[yo + i1 * ys] = v0 * sn + v1 * c;
        }
        for (int64_t d = n_rot; d < D; d++) yd[yo + d * ys] = xd[xo + d * xs];
    }
    return LOOM_OK;
}
