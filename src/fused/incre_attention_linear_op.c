/* incre_attention_linear as a graph op: decode attention, the output
 * projection and the residual add in one kernel,
 *     y = attention(q, k, v) . W^T (+ residual)
 * The fusion pass puts it in place of attention + matmul (+ add) where the
 * queries are a decode step's (q_len <= the rule's decode_max_q_len).
 *
 * The kv heads are cut into `groups` fixed groups (the builder: about 8, a
 * multiple of the rules' hardware threads, loom_incre_attention_linear_groups).
 * A thread takes whole groups: it runs the decode attention of its groups'
 * kv heads (every batch entry; each unit folded whole, the decode kernel's
 * own tiles) into its scratch, then multiplies each group's output columns
 * [M, heads * D] into W's matching columns while they are in its cache,
 * group g's partial [M, N] into the launch's shared buffer, W's rows in
 * blocks with the thread's groups in turn (loom_fused_slices_project, as the
 * ffn's one pass). The last thread to arrive sums the partials in group order
 * (+ residual) into y. The attention output never reaches memory and there
 * is no barrier inside: one kernel.
 *
 * The sum's order is fixed by the shapes and groups, so results are the same
 * bits for any thread count; against incre_flash_attention followed by linear
 * (one dot product over all H*D) they differ by rounding only. The attention
 * of a thread's heads is the decode kernel's whole-unit path (no split-KV):
 * groups auto is taken only where whole groups share out evenly on the rules'
 * threads (a set count, or a launch on other threads, may leave shares
 * uneven). Batch-invariant launches run the projections batch-invariant
 * (the GEMM for every row count), as linear does. */
#include "fused/fused_graph_ops.h"
#include "fused/fused_internal.h"

#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "fused/flash_attention_internal.h"
#include "ops/matmul/matmul.h"
#include "ops/ref/ref.h"

static const char OP[] = "incre_attention_linear";
static char placeholder;

typedef struct ial_shape {
    int n_attn;                            /* 3, or 5 with an i8 cache's scales */
    loom_incre_flash_attention_attrs attn; /* out_f32 always */
    int64_t M, H, Hkv, D, HD, N, groups;
    const loom_tensor *w, *res;
} ial_shape;

/* The first kv head of group g (groups as even as they go; group g's heads
 * end where group g + 1's begin). */
static int64_t ial_head(const ial_shape *s, int64_t g) { return g * s->Hkv / s->groups; }

static loom_status ial_check(const loom_tensor *const *src, int n_src, const loom_incre_attention_linear_attrs *at,
                             ial_shape *s) {
    memset(s, 0, sizeof *s);
    LOOM_TRY(loom_ref_check_arity(OP, src, n_src, 4, 7));
    LOOM_RETURN_IF(!at, LOOM_ERR_INVALID_ARG, "%s: attributes missing", OP);
    LOOM_RETURN_IF(at->residual & ~1, LOOM_ERR_INVALID_ARG, "%s: residual %d: 0 or 1", OP, (int)at->residual);
    s->n_attn = src[1]->dtype == LOOM_I8 ? 5 : 3;
    LOOM_RETURN_IF(n_src != s->n_attn + 1 + at->residual, LOOM_ERR_INVALID_ARG,
                   "%s: %d inputs with a %s cache and residual = %d: expected q, k, v%s, w%s", OP, n_src,
                   loom_dtype_name(src[1]->dtype), (int)at->residual, s->n_attn == 5 ? ", k_scale, v_scale" : "",
                   at->residual ? ", residual" : "");
    LOOM_RETURN_IF(at->attn.input_layout != 0, LOOM_ERR_UNSUPPORTED, "%s: input_layout %d: BSND (0) only", OP,
                   (int)at->attn.input_layout);
    const loom_tensor *q = src[0], *k = src[1];
    LOOM_RETURN_IF(q->ndim != 4 || k->ndim != 4, LOOM_ERR_SHAPE, "%s: q and k must be [B, S, heads, D]", OP);
    s->attn = at->attn;
    s->attn.out_f32 = 1;
    s->M = q->shape[0] * q->shape[1], s->H = q->shape[2], s->D = q->shape[3], s->Hkv = k->shape[2];
    s->HD = s->H * s->D;
    LOOM_RETURN_IF(s->Hkv < 1 || s->H % s->Hkv, LOOM_ERR_SHAPE, "%s: %lld heads over %lld kv heads", OP,
                   (long long)s->H, (long long)s->Hkv);
    int64_t gmax = s->Hkv < LOOM_FFN_ONE_PASS_MAX_SLICES ? s->Hkv : LOOM_FFN_ONE_PASS_MAX_SLICES;
    LOOM_RETURN_IF(at->groups < 1 || at->groups > gmax, LOOM_ERR_INVALID_ARG,
                   "%s: groups %d: 1 to %lld (the kv heads, at most %d)", OP, (int)at->groups, (long long)gmax,
                   LOOM_FFN_ONE_PASS_MAX_SLICES);
    s->groups = at->groups;
    s->w = src[s->n_attn];
    s->res = at->residual ? src[s->n_attn + 1] : NULL;
    LOOM_RETURN_IF(s->w->ndim != 2 || s->w->shape[1] != s->HD || s->w->stride[1] != 1, LOOM_ERR_SHAPE,
                   "%s: input %d (w) must be [N, %lld] with contiguous rows", OP, s->n_attn, (long long)s->HD);
    s->N = s->w->shape[0];
    /* a group's columns start on a whole block of a quantized W */
    int64_t blk = loom_dtype_block_elems(s->w->dtype), cols = s->H / s->Hkv * s->D;
    LOOM_RETURN_IF(blk > 1 && cols % blk, LOOM_ERR_UNSUPPORTED,
                   "%s: a kv head's %lld output columns are not whole %s blocks of %lld", OP, (long long)cols,
                   loom_dtype_name(s->w->dtype), (long long)blk);
    if (s->res)
        LOOM_RETURN_IF(s->res->dtype != LOOM_F32 || s->res->ndim != 2 || s->res->shape[0] != s->M ||
                           s->res->shape[1] != s->N || s->res->stride[1] != 1,
                       LOOM_ERR_SHAPE, "%s: input %d (residual) must be f32 [%lld, %lld] with contiguous rows", OP,
                       s->n_attn + 1, (long long)s->M, (long long)s->N);
    return LOOM_OK;
}

/* The attention output [B, S, H, D] f32 (data: out, or a placeholder). */
static void ial_out(const loom_tensor *const *src, float *out, loom_tensor *o) {
    loom_tensor_init(o, LOOM_F32, 4, src[0]->shape, out ? (void *)out : (void *)&placeholder);
}

static loom_status ial_infer(const loom_tensor *const *src, int n_src, const void *attrs, loom_tensor *dst) {
    ial_shape s;
    loom_tensor o;
    LOOM_TRY(ial_check(src, n_src, attrs, &s));
    LOOM_TRY(loom_op_get(LOOM_OP_INCRE_FLASH_ATTENTION)->infer(src, s.n_attn, &s.attn, &o));
    const int64_t shape[2] = {s.M, s.N};
    loom_ref_set_dst(dst, LOOM_F32, 2, shape);
    return LOOM_OK;
}

/* The attention's cost and the projection's, less the attention output's
 * write and its read back. */
static void ial_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs,
                     loom_cost *c) {
    ial_shape s;
    loom_tensor o;
    loom_cost ca = {0};
    c->flops = c->bytes_read = c->bytes_written = 0.0;
    if (ial_check(src, n_src, attrs, &s) != LOOM_OK) return;
    ial_out(src, NULL, &o);
    loom_op_get(LOOM_OP_INCRE_FLASH_ATTENTION)->cost(src, s.n_attn, &o, &s.attn, &ca);
    double M = (double)s.M, N = (double)s.N;
    c->flops = ca.flops + 2.0 * M * N * (double)s.HD;
    c->bytes_read = ca.bytes_read + (double)loom_dtype_row_bytes(s.w->dtype, s.HD) * N;
    c->bytes_written = LOOM_ES(dst) * M * N;
    if (s.res) c->bytes_read += LOOM_ES(s.res) * M * N, c->flops += M * N;
}

/* Group g's slice of the projection: its columns of the output (rows HD
 * apart) and of W. */
static loom_fused_slice ial_slice(const ial_shape *s, const float *out, int64_t g) {
    int64_t h0 = ial_head(s, g), h1 = ial_head(s, g + 1), cols = s->H / s->Hkv * s->D;
    loom_fused_slice sl = {out ? out + h0 * cols : NULL, s->HD, h0 * cols, (h1 - h0) * cols};
    return sl;
}

/* Per-thread scratch: the attention output [M, H*D], each of the thread's
 * groups' output quantized for its projection (q8 x for a quantized W;
 * dq_step apart, at most all groups), then the attention's or the
 * projection's scratch (one after the other, never both). */
typedef struct ial_layout { size_t dq, dq_step, work, end; } ial_layout;

static ial_layout ial_layout_of(const loom_tensor *const *src, const ial_shape *s, int32_t act) {
    loom_tensor o;
    ial_out(src, NULL, &o);
    size_t work = loom_op_get(LOOM_OP_INCRE_FLASH_ATTENTION)->scratch_size(src, s->n_attn, &o, &s->attn);
    int64_t widest = 0;
    for (int64_t g = 0, seen[2] = {0, 0}; g < s->groups; g++) { /* at most two widths */
        loom_fused_slice sl = ial_slice(s, NULL, g);
        if (sl.nb == seen[0] || sl.nb == seen[1]) continue;
        seen[seen[0] ? 1 : 0] = sl.nb;
        loom_matmul_args d = loom_fused_slice_gemm(s->w, s->M, &sl, NULL, act);
        for (int inv = 0; inv < 2; inv++) { /* batch-invariant launches too */
            d.invariant = inv;
            size_t b = loom_matmul_scratch_size(&d);
            work = work > b ? work : b;
        }
        widest = sl.nb > widest ? sl.nb : widest;
    }
    ial_layout L;
    L.dq = loom_align64((size_t)(s->M * s->HD) * sizeof(float));
    L.dq_step = loom_fused_slice_dq_bytes(s->w, s->M, widest, act);
    L.work = L.dq + (size_t)s->groups * L.dq_step;
    L.end = L.work + loom_align64(work) + 64;
    return L;
}

static size_t ial_scratch(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs) {
    ial_shape s;
    (void)dst;
    if (ial_check(src, n_src, attrs, &s) != LOOM_OK) return 0;
    return ial_layout_of(src, &s, ((const loom_incre_attention_linear_attrs *)attrs)->act_precision).end;
}

/* Shared: the groups' partials [groups, M, N]. */
static size_t ial_shared(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs) {
    ial_shape s;
    (void)dst;
    if (ial_check(src, n_src, attrs, &s) != LOOM_OK) return 0;
    return (size_t)(s.groups * s.M * s.N) * sizeof(float) + 64;
}

static loom_status ial_kernel(const loom_kernel_args *a, loom_isa isa) {
    const loom_incre_attention_linear_attrs *at = a->attrs;
    ial_shape s;
    /* every thread goes on to arrive, failed or not: the last one must be counted in */
    loom_status st = ial_check(a->src, a->n_src, at, &s);
    if (st == LOOM_OK &&
        (a->dst->ndim != 2 || a->dst->shape[0] != s.M || a->dst->shape[1] != s.N || a->dst->stride[1] != 1))
        st = loom_set_error(LOOM_ERR_SHAPE, "%s: y must be [%lld, %lld] with contiguous rows", OP, (long long)s.M,
                            (long long)s.N);
    if (st != LOOM_OK) {
        int failed = 1;
        loom_kernel_arrive(a, &failed);
        return st;
    }
    ial_layout L = ial_layout_of(a->src, &s, at->act_precision);
    float *part = a->shared;
    size_t need = (size_t)(s.groups * s.M * s.N) * sizeof(float);
    if (!part || a->shared_bytes < need || (a->nth > 1 && !a->arrive))
        st = loom_set_error(LOOM_ERR_INVALID_ARG, "%s: needs %zu shared bytes%s, has %zu", OP, need,
                            a->nth > 1 && !a->arrive ? " and a counter" : "", part ? a->shared_bytes : 0);
    else if (!a->scratch || a->scratch_bytes < L.end)
        st = loom_set_error(LOOM_ERR_INVALID_ARG, "%s: scratch of %zu bytes, need %zu", OP,
                            a->scratch ? a->scratch_bytes : 0, L.end);
    int64_t g0, g1;
    loom_ref_split(s.groups, a->ith, a->nth, &g0, &g1);
    if (st == LOOM_OK && g0 < g1) {
        char *sc = a->scratch;
        float *out = (float *)sc;
        loom_tensor o;
        ial_out(a->src, out, &o);
        st = attn_incre_node_heads(a->src, s.n_attn, &s.attn, &o, isa, ial_head(&s, g0), ial_head(&s, g1), sc + L.work,
                                   a->scratch_bytes - L.work);
        loom_fused_slice sl[LOOM_FFN_ONE_PASS_MAX_SLICES];
        for (int64_t g = g0; g < g1; g++) sl[g - g0] = ial_slice(&s, out, g);
        if (st == LOOM_OK)
            st = loom_fused_slices_project(isa, s.w, s.M, at->act_precision, a->invariant, sl, g1 - g0,
                                           part + g0 * s.M * s.N, sc + L.dq, L.dq_step, sc + L.work);
    }
    int failed = st != LOOM_OK;
    if (!loom_kernel_arrive(a, &failed) || failed) return st;
    loom_fused_sum_partials(isa, s.M, s.N, s.groups, part, s.res, a->dst);
    return LOOM_OK;
}

LOOM_FUSED_LEVELS(incre_attention_linear, ial_kernel)

int loom_incre_attention_linear_groups(int64_t n_kv, int threads) {
    int t = threads > 0 ? threads : 1;
    int64_t g = loom_ffn_one_pass_slices_for(t);
    g = g < n_kv ? g : n_kv;
    g -= g % t;
    if (g < 1) return 0;
    /* kv heads of the thread with the most and the fewest (whole groups each) */
    int64_t most = 0, fewest = n_kv;
    for (int i = 0; i < t; i++) {
        int64_t a = (int64_t)i * g / t, b = (int64_t)(i + 1) * g / t;
        int64_t heads = b * n_kv / g - a * n_kv / g;
        most = heads > most ? heads : most, fewest = heads < fewest ? heads : fewest;
    }
    return 8 * most <= 9 * fewest ? (int)g : 0;
}

void loom_register_incre_attention_linear_op(loom_op_info *e) {
    e->infer = ial_infer, e->cost = ial_cost, e->scratch_size = ial_scratch, e->ref = incre_attention_linear_ref;
    e->shared_size = ial_shared;
    e->decomposition = "attention matmul add";
    LOOM_FUSED_SET_LEVELS(e, incre_attention_linear);
}
