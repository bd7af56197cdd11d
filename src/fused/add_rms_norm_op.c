/* add_rms_norm as a graph op: r = a + b, y = rms_norm(r) * gamma in one launch.
 * Rows are processed in small chunks: the chunk of r written by the add is
 * read back by the norm from L1, so r crosses the memory bus once (stored,
 * because later nodes read it) instead of stored and loaded again. The
 * per-row work is the primitive add and rms_norm kernels of the same level,
 * so results equal the unfused graph's bit for bit. */
#include "fused/fused_graph_ops.h"

#include "base/status.h"
#include "ops/ref/ref.h"

#define ARN_CHUNK 8  /* rows per chunk: 8 x D floats stay in L1 for D <= 512 */

static loom_status arn_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                             loom_tensor *dst) {
    const char *op = "add_rms_norm";
    LOOM_TRY(loom_ref_check_arity(op, src, n_src, 3, 3));
    for (int i = 0; i < 3; i++)
        LOOM_TRY(loom_ref_check_dtype(op, i, i == 2 ? "gamma" : "x", src[i], LOOM_REF_DT(LOOM_F32)));
    const loom_tensor *a = src[0], *b = src[1], *g = src[2];
    char as[LOOM_REF_SHAPE_BUF], bs[LOOM_REF_SHAPE_BUF];
    LOOM_RETURN_IF(a->ndim != 2 || b->ndim != 2 || a->shape[0] != b->shape[0] ||
                       a->shape[1] != b->shape[1],
                   LOOM_ERR_SHAPE, "%s: inputs 0 and 1 must be equal 2-D shapes, found %s and %s", op,
                   loom_ref_shape_str(a, as, sizeof as), loom_ref_shape_str(b, bs, sizeof bs));
    LOOM_RETURN_IF(g->ndim != 1 || g->shape[0] != a->shape[1], LOOM_ERR_SHAPE,
                   "%s: input 2 (gamma) must be [%lld]", op, (long long)a->shape[1]);
    const loom_add_rms_norm_attrs *at = attrs;
    LOOM_RETURN_IF(!at || !(at->eps > 0.0f), LOOM_ERR_INVALID_ARG, "%s: eps must be > 0", op);
    loom_ref_set_dst(dst, LOOM_F32, 2, a->shape);
    return LOOM_OK;
}

static void arn_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                     const void *attrs, loom_cost *c) {
    double n = (double)loom_tensor_nelem(src[0]), D = (double)src[0]->shape[src[0]->ndim - 1];
    c->flops = 5.0 * n;                     /* add; square+add, scale, gamma */
    c->bytes_read = (LOOM_ES(src[0]) + LOOM_ES(src[1])) * n + 4.0 * D; /* a, b, gamma; r is re-read from L1 */
    c->bytes_written = 2.0 * LOOM_ES(dst) * n; /* y and r (r is used after this node) */
}

static loom_tensor rows(const loom_tensor *t, int64_t r0, int64_t nr) {
    loom_tensor v = *t;
    v.shape[0] = nr;
    v.data = (float *)t->data + r0 * t->stride[0];
    return v;
}

static loom_status arn_kernel(const loom_kernel_args *a, loom_isa isa) {
    LOOM_RETURN_IF(a->n_dst_extra < 1 || !a->dst_extra[0], LOOM_ERR_INVALID_ARG,
                   "add_rms_norm: the r output is missing");
    const loom_add_rms_norm_attrs *at = a->attrs;
    loom_rms_norm_attrs na = {at->eps};
    loom_kernel_fn add = loom_op_kernel(LOOM_OP_ADD, isa), norm = loom_op_kernel(LOOM_OP_RMS_NORM, isa);
    int64_t M = a->src[0]->shape[0], lo, hi;
    loom_ref_split(M, a->ith, a->nth, &lo, &hi);
    for (int64_t r0 = lo; r0 < hi; r0 += ARN_CHUNK) {
        int64_t nr = hi - r0 < ARN_CHUNK ? hi - r0 : ARN_CHUNK;
        loom_tensor x = rows(a->src[0], r0, nr), res = rows(a->src[1], r0, nr);
        loom_tensor r = rows(a->dst_extra[0], r0, nr), y = rows(a->dst, r0, nr);
        loom_kernel_args s = {.src = {&x, &res}, .n_src = 2, .dst = &r, .ith = 0, .nth = 1,
                              .scratch = a->scratch};
        LOOM_TRY(add(&s));
        loom_kernel_args t = {.src = {&r, a->src[2]}, .n_src = 2, .dst = &y, .attrs = &na,
                              .ith = 0, .nth = 1, .scratch = a->scratch};
        LOOM_TRY(norm(&t));
    }
    return LOOM_OK;
}

LOOM_FUSED_LEVELS(arn, arn_kernel)

void loom_register_add_rms_norm_op(loom_op_info *e) {
    e->infer = arn_infer, e->cost = arn_cost, e->ref = arn_ref;
    e->decomposition = "add rms_norm";
    LOOM_FUSED_SET_LEVELS(e, arn);
}
