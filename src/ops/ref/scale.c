/* Reference scale (y = x * scale: Gemma's embeddings times sqrt(width)) and
 * softcap (y = cap * tanh(x / cap), in double: Gemma 2's final logit
 * soft-capping), f32 elementwise, any shape. The float kernels are in
 * ops/vec/vec_scale.c. */
#include "ops/ref/ref.h"

#include "base/status.h"

#include <math.h>

static loom_status unary_infer(const char *op, const loom_tensor *const *src, int n_src, float v,
                               const char *what, loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity(op, src, n_src, 1, 1));
    LOOM_TRY(loom_ref_check_dtype(op, 0, "x", src[0], LOOM_REF_DT(LOOM_F32)));
    LOOM_RETURN_IF(!(v > 0.0f) || !isfinite(v), LOOM_ERR_INVALID_ARG, "%s: %s = %g: expected a positive finite "
                   "number", op, what, (double)v);
    loom_ref_set_dst(dst, LOOM_F32, src[0]->ndim, src[0]->shape);
    return LOOM_OK;
}

static void unary_cost(const loom_tensor *const *src, const loom_tensor *dst, double flops_each, loom_cost *c) {
    double n = (double)loom_tensor_nelem(src[0]);
    c->flops = flops_each * n;
    c->bytes_read = n * LOOM_ES(src[0]);
    c->bytes_written = n * LOOM_ES(dst);
}

loom_status loom_ref_scale_infer(const loom_tensor *const *src, int n_src, const void *attrs, loom_tensor *dst) {
    const loom_scale_attrs *at = attrs;
    return unary_infer("scale", src, n_src, at ? at->scale : 0.0f, "scale", dst);
}

void loom_ref_scale_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs,
                         loom_cost *c) {
    unary_cost(src, dst, 1.0, c);
}

loom_status loom_ref_scale(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *y = a->dst;
    const float s = ((const loom_scale_attrs *)a->attrs)->scale;
    const float *xd = x->data;
    float *yd = y->data;
    int64_t lo, hi;
    loom_ref_split(loom_tensor_nelem(x), a->ith, a->nth, &lo, &hi);
    for (int64_t e = lo; e < hi; e++) /* one f32 product, as transformers' f32 model computes it */
        yd[loom_ref_row_offset(y, y->ndim, e)] = xd[loom_ref_row_offset(x, x->ndim, e)] * s;
    return LOOM_OK;
}

loom_status loom_ref_softcap_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                   loom_tensor *dst) {
    const loom_softcap_attrs *at = attrs;
    return unary_infer("softcap", src, n_src, at ? at->cap : 0.0f, "cap", dst);
}

void loom_ref_softcap_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs,
                           loom_cost *c) {
    unary_cost(src, dst, 12.0, c); /* two divisions or products and a tanh */
}

loom_status loom_ref_softcap(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *y = a->dst;
    const double cap = ((const loom_softcap_attrs *)a->attrs)->cap;
    const float *xd = x->data;
    float *yd = y->data;
    int64_t lo, hi;
    loom_ref_split(loom_tensor_nelem(x), a->ith, a->nth, &lo, &hi);
    for (int64_t e = lo; e < hi; e++)
        yd[loom_ref_row_offset(y, y->ndim, e)] = (float)(cap * tanh(xd[loom_ref_row_offset(x, x->ndim, e)] / cap));
    return LOOM_OK;
}
