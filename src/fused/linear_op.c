/* linear as a graph op: y = act(x'.W^T + bias) (+ residual), x' = rms_norm(x)
 * * gamma when the norm is on, else x; one launch. The fusion pass puts it in
 * place of matmul + add (an output projection and the residual stream: the sum
 * is made in the GEMM's epilogue while the tile is in L1, instead of a separate
 * add that reads both operands back), of rms_norm + matmul (the output norm and
 * the LM head: the norm is applied to x as the GEMM packs it, so x' never
 * reaches memory), and of an encoder's matmul + add_bias (+ gelu, or + add:
 * BERT's projections, the bias and activation in the epilogue). src: x [M, K],
 * w [N, K] (any matmul weight type), then the bias [N] (attrs.bias), then the
 * residual [M, N] (attrs.residual), then gamma [K] (attrs.norm); dst: y [M, N].
 * The matmul family's own kernels (ops/matmul), so results equal the unfused
 * graph's bit for bit: the epilogue's acc + bias and + residual are the
 * add_bias and add kernels' sums, and the norm rounds x' as the rms_norm
 * kernels do (loom_matmul_norm_row); an activation is the epilogue's (the
 * reference formulas, vectorised), within the f32 tolerance of the gelu or
 * silu kernels'. */
#include "fused/fused_graph_ops.h"

#include <string.h>

#include "base/status.h"
#include "ops/matmul/matmul.h"
#include "ops/ref/ref.h"

static loom_status linear_infer(const loom_tensor *const *src, int n_src, const void *attrs, loom_tensor *dst) {
    const char *op = "linear";
    LOOM_TRY(loom_ref_check_arity(op, src, n_src, 2, 5));
    const loom_linear_attrs *at = attrs;
    LOOM_RETURN_IF(!at, LOOM_ERR_INVALID_ARG, "%s: attributes missing", op);
    int want = 2 + (at->bias ? 1 : 0) + (at->residual ? 1 : 0) + (at->norm ? 1 : 0);
    LOOM_RETURN_IF(n_src != want, LOOM_ERR_INVALID_ARG,
                   "%s: %d inputs, expected %d: x, w%s%s%s", op, n_src, want, at->bias ? ", bias" : "",
                   at->residual ? ", residual" : "", at->norm ? ", gamma" : "");
    LOOM_RETURN_IF(at->act < LOOM_ACT_NONE || at->act >= LOOM_ACT_COUNT, LOOM_ERR_INVALID_ARG,
                   "%s: activation %d out of range", op, (int)at->act);
    LOOM_RETURN_IF((at->bias | at->residual | at->norm) & ~1, LOOM_ERR_INVALID_ARG,
                   "%s: bias, residual and norm are 0 or 1 (%d, %d, %d)", op, (int)at->bias, (int)at->residual,
                   (int)at->norm);
    const loom_tensor *x = src[0], *w = src[1];
    LOOM_TRY(loom_ref_check_dtype(op, 0, "x", x, LOOM_REF_DT(LOOM_F32)));
    LOOM_RETURN_IF(x->ndim != 2 || x->stride[1] != 1, LOOM_ERR_SHAPE,
                   "%s: input 0 (x) must be 2-D [M, K] with contiguous rows", op);
    int64_t M = x->shape[0], K = x->shape[1];
    LOOM_RETURN_IF(w->ndim != 2 || w->shape[1] != K || w->stride[1] != 1, LOOM_ERR_SHAPE,
                   "%s: input 1 (w) must be [N, %lld] with contiguous rows", op, (long long)K);
    int64_t N = w->shape[0];
    if (at->bias) {
        const loom_tensor *b = src[2];
        LOOM_RETURN_IF(b->dtype != LOOM_F32 || loom_tensor_nelem(b) != N || !loom_tensor_is_contiguous(b),
                       LOOM_ERR_SHAPE, "%s: input 2 (bias) must be contiguous f32 [%lld]", op, (long long)N);
    }
    if (at->residual) {
        const loom_tensor *r = src[2 + at->bias];
        LOOM_RETURN_IF(r->dtype != LOOM_F32 || r->ndim != 2 || r->shape[0] != M || r->shape[1] != N ||
                           r->stride[1] != 1,
                       LOOM_ERR_SHAPE, "%s: input %d (residual) must be f32 [%lld, %lld] with contiguous rows", op,
                       2 + at->bias, (long long)M, (long long)N);
    }
    if (at->norm) {
        const loom_tensor *g = src[n_src - 1];
        LOOM_RETURN_IF(g->dtype != LOOM_F32 || loom_tensor_nelem(g) != K || !loom_tensor_is_contiguous(g),
                       LOOM_ERR_SHAPE, "%s: input %d (the norm's gamma) must be contiguous f32 [%lld]", op, n_src - 1,
                       (long long)K);
        LOOM_RETURN_IF(!(at->norm_eps > 0.0f), LOOM_ERR_INVALID_ARG, "%s: norm_eps %g: expected > 0", op,
                       (double)at->norm_eps);
    }
    const int64_t shape[2] = {M, N};
    loom_ref_set_dst(dst, LOOM_F32, 2, shape);
    return LOOM_OK;
}

static void linear_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs,
                        loom_cost *c) {
    const loom_linear_attrs *at = attrs;
    double M = (double)src[0]->shape[0], K = (double)src[0]->shape[1], N = (double)src[1]->shape[0];
    c->flops = 2.0 * M * N * K;
    const double ex = LOOM_ES(src[0]), ey = LOOM_ES(dst);
    c->bytes_read = ex * M * K + (double)loom_dtype_row_bytes(src[1]->dtype, src[1]->shape[1]) * N;
    c->bytes_written = ey * M * N;
    if (at->bias) c->bytes_read += 4.0 * N, c->flops += M * N;
    if (at->act != LOOM_ACT_NONE) c->flops += 8.0 * M * N; /* about what the gelu op counts */
    if (at->residual) c->bytes_read += LOOM_ES(src[2 + at->bias]) * M * N, c->flops += M * N;
    if (at->norm) { /* x once more for the rows' statistics, gamma */
        c->bytes_read += ex * M * K + 4.0 * K;
        c->flops += 4.0 * M * K;
    }
    (void)n_src;
}

static loom_matmul_args linear_args(const loom_kernel_args *a, const loom_linear_attrs *at, loom_epilogue *ep,
                                    const loom_tensor *const *src, const loom_tensor *dst) {
    const loom_tensor *x = src[0], *w = src[1];
    memset(ep, 0, sizeof *ep);
    if (at->bias) ep->bias = src[2]->data;
    ep->act = (loom_act)at->act;
    if (at->residual) ep->residual = src[2 + at->bias]->data, ep->ld_res = src[2 + at->bias]->stride[0];
    int any = at->bias || at->act != LOOM_ACT_NONE || at->residual;
    loom_matmul_args g = {.x = x->data, .ldx = x->stride[0], .w = w->data, .ldw = w->stride[0],
                          .wtype = w->dtype, .y = dst->data, .ldy = dst->stride[0], .M = x->shape[0],
                          .N = w->shape[0], .K = x->shape[1], .ep = any ? ep : NULL,
                          .act = (loom_act_precision)at->act_precision, .invariant = a ? a->invariant : 0};
    return g;
}

/* Scratch: with the norm, the rows' 1/rms [M] (doubles) first, so the kernel
 * finds the matmul's part without sizing it again; then the matmul's. */
static size_t inv_bytes(const loom_linear_attrs *at, int64_t M) {
    return at->norm ? ((size_t)M * sizeof(double) + 63) & ~(size_t)63 : 0;
}

static size_t linear_scratch(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                             const void *attrs) {
    const loom_linear_attrs *at = attrs;
    loom_epilogue ep;
    loom_matmul_args g = linear_args(NULL, at, &ep, src, dst);
    if (at->norm) loom_matmul_norm_for_size(&g); /* sizes only: x's data may not be bound yet */
    (void)n_src;
    return inv_bytes(at, src[0]->shape[0]) + loom_matmul_scratch_size(&g) + 64;
}

static loom_status linear_kernel(const loom_kernel_args *a, loom_isa isa) {
    const loom_linear_attrs *at = a->attrs;
    loom_epilogue ep;
    loom_matmul_args g = linear_args(a, at, &ep, a->src, a->dst);
    if (at->norm) {
        /* every thread computes the 1/rms of all rows (a pass over x; no
         * barrier, and the same values whatever the thread) */
        double *inv = a->scratch;
        const loom_tensor *x = a->src[0];
        loom_matmul_norm_inv(isa, x->data, x->stride[0], x->shape[1], at->norm_eps, 0, x->shape[0], inv);
        g.norm_gamma = a->src[a->n_src - 1]->data, g.norm_inv = inv;
    }
    return loom_matmul_run(&g, isa, a->ith, a->nth, (char *)a->scratch + inv_bytes(at, a->src[0]->shape[0]));
}

LOOM_FUSED_LEVELS(linear, linear_kernel)

void loom_register_linear_op(loom_op_info *e) {
    e->infer = linear_infer, e->cost = linear_cost, e->scratch_size = linear_scratch, e->ref = linear_ref;
    e->decomposition = "rms_norm matmul add_bias gelu add";
    LOOM_FUSED_SET_LEVELS(e, linear);
}
