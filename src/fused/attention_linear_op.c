/* attention_linear as a graph op: prefill attention, the output projection
 * and the residual add in one kernel,
 *     y = attention(q, k, v) . W^T (+ residual)
 * The fusion pass puts it in place of attention + matmul (+ add) in prefill.
 *
 * Work unit = (batch entry, block of R query positions). A thread runs the
 * prefill FlashAttention (its items: every kv head and head group) over the
 * unit's rows into its own buffer [R, H*D], then multiplies that block by W
 * with the residual in the GEMM's epilogue, while the block is still in its
 * cache: the attention output never reaches main memory. A unit is a
 * FlashAttention problem of its own: its queries, and (causal or band masks,
 * aligned bottom-right) the keys up to its last row's, so the same items and
 * the same tiles run as in the whole problem when R is a multiple of the
 * kernel's query block (attn_prefill_block_q). The GEMM runs batch-invariant
 * (its order over K depends on K alone), so every row is the same bits as
 * flash_attention_score followed by linear, whatever R and the thread count.
 *
 * W is read (and packed) once per unit: the builder fuses only when W fits in
 * half the L2, where those re-reads stay in the core's cache. K and V are f32,
 * f16 or bf16 (an i8 cache, whose scales are inputs of their own, is left to
 * the unfused pair). Caches the FlashAttention widens or rounds once per thread
 * and kv head (f16, bf16; any with inner_precise 1) are converted once per
 * unit here: the unit's keys (from the first, even under a band) for each kv
 * head, against its rows x group products a key, about 1 / (rows x group) of
 * the attention's work (1.5 % at 64 rows of one head a kv head).
 *
 * A launch of fewer than LOOM_GEMM_MIN_M rows (outside batch-invariant runs)
 * is one unit and one GEMM over all its rows, as linear runs it (the GEMV, or
 * the GEMM, by the matmul's own choice), so those bits match too. */
#include "fused/fused_graph_ops.h"

#include <limits.h>
#include <stdatomic.h>
#include <string.h>

#include "base/cpu.h"
#include "base/status.h"
#include "fused/flash_attention_internal.h"
#include "fused/ref/attention_ref.h"
#include "ops/matmul/matmul.h"
#include "ops/ref/ref.h"

static const char OP[] = "attention_linear";
static char placeholder;

/* The attention's params (BSND, no dropout). */
static loom_flash_attention_params al_fa_params(const loom_attention_linear_attrs *at) {
    loom_flash_attention_attrs fa = LOOM_FLASH_ATTENTION_ATTRS_DEFAULT;
    fa.scale_value = at->scale_value, fa.sparse_mode = at->sparse_mode;
    fa.pre_tokens = at->pre_tokens, fa.next_tokens = at->next_tokens;
    fa.block_q = at->block_q, fa.block_kv = at->block_kv, fa.softcap = at->softcap;
    fa.inner_precise = at->inner_precise;
    return attn_fa_params(&fa);
}

typedef struct al_shape {
    int64_t B, S, H, D, Skv, Hkv, HD, N, M;
    int causal; /* keys cut at the unit's last row (masks aligned bottom-right) */
} al_shape;

static loom_status al_check(const loom_tensor *const *src, int n_src, const loom_attention_linear_attrs *at,
                            al_shape *s) {
    memset(s, 0, sizeof *s);
    LOOM_TRY(loom_ref_check_arity(OP, src, n_src, 4, 5));
    LOOM_RETURN_IF(!at, LOOM_ERR_INVALID_ARG, "%s: attributes missing", OP);
    LOOM_RETURN_IF((at->residual & ~1) || n_src != 4 + at->residual, LOOM_ERR_INVALID_ARG,
                   "%s: %d inputs with residual = %d: expected q, k, v, w%s", OP, n_src, (int)at->residual,
                   at->residual ? ", residual" : "");
    LOOM_RETURN_IF(at->block_rows < 0, LOOM_ERR_INVALID_ARG, "%s: block_rows %d < 0", OP, (int)at->block_rows);
    const loom_attention_linear_attrs *fa = at;
    LOOM_RETURN_IF(fa->sparse_mode != 0 && fa->sparse_mode != LOOM_SPARSE_RIGHT_DOWN_CAUSAL &&
                       fa->sparse_mode != LOOM_SPARSE_BAND,
                   LOOM_ERR_UNSUPPORTED, "%s: sparse_mode %d: 0, right-down causal or band only", OP,
                   (int)fa->sparse_mode);
    /* a block sees the keys up to its last row's diagonal (masks aligned bottom-right), so no
     * band may reach past the diagonal, and mode 0's band (aligned top-left) must be all keys */
    LOOM_RETURN_IF(fa->sparse_mode == 0 && (fa->pre_tokens < LOOM_ATTN_TOKENS_ALL || fa->next_tokens < LOOM_ATTN_TOKENS_ALL),
                   LOOM_ERR_UNSUPPORTED, "%s: sparse_mode 0 with pre/next_tokens %lld/%lld: only all keys (%d)", OP,
                   (long long)fa->pre_tokens, (long long)fa->next_tokens, LOOM_ATTN_TOKENS_ALL);
    LOOM_RETURN_IF(fa->sparse_mode == LOOM_SPARSE_BAND && (fa->next_tokens != 0 || fa->pre_tokens < 0),
                   LOOM_ERR_UNSUPPORTED, "%s: a band with next_tokens %lld, pre_tokens %lld: next_tokens 0 and pre_tokens >= 0 only",
                   OP, (long long)fa->next_tokens, (long long)fa->pre_tokens);
    LOOM_RETURN_IF(at->inner_precise & ~1, LOOM_ERR_INVALID_ARG, "%s: inner_precise %d: 0 or 1", OP,
                   (int)at->inner_precise);
    const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        const loom_tensor *t = src[i];
        int dt_ok = t->dtype == LOOM_F32 || t->dtype == LOOM_F16 || t->dtype == LOOM_BF16;
        LOOM_RETURN_IF(!dt_ok || t->ndim != 4 || t->stride[3] != 1, LOOM_ERR_SHAPE,
                       "%s: input %d (%s) must be f32, f16 or bf16 [B, S, heads, D] with contiguous rows", OP, i,
                       names[i]);
    }
    const loom_tensor *q = src[0], *k = src[1], *v = src[2], *w = src[3];
    s->B = q->shape[0], s->S = q->shape[1], s->H = q->shape[2], s->D = q->shape[3];
    s->Skv = k->shape[1], s->Hkv = k->shape[2];
    for (int d = 0; d < 4; d++)
        LOOM_RETURN_IF(v->shape[d] != k->shape[d], LOOM_ERR_SHAPE, "%s: v's shape differs from k's", OP);
    LOOM_RETURN_IF(k->shape[0] != s->B || k->shape[3] != s->D, LOOM_ERR_SHAPE,
                   "%s: k must be [%lld, S_kv, H_kv, %lld]", OP, (long long)s->B, (long long)s->D);
    LOOM_RETURN_IF(s->Hkv < 1 || s->H % s->Hkv, LOOM_ERR_SHAPE, "%s: %lld heads over %lld kv heads", OP,
                   (long long)s->H, (long long)s->Hkv);
    s->causal = fa->sparse_mode != 0;
    LOOM_RETURN_IF(s->causal && s->Skv < s->S, LOOM_ERR_SHAPE,
                   "%s: a causal mask aligned bottom-right needs S_kv (%lld) >= S (%lld)", OP, (long long)s->Skv,
                   (long long)s->S);
    s->HD = s->H * s->D, s->M = s->B * s->S;
    LOOM_RETURN_IF(w->ndim != 2 || w->shape[1] != s->HD || w->stride[1] != 1, LOOM_ERR_SHAPE,
                   "%s: input 3 (w) must be [N, %lld] with contiguous rows", OP, (long long)s->HD);
    s->N = w->shape[0];
    if (at->residual) {
        const loom_tensor *r = src[4];
        LOOM_RETURN_IF(r->dtype != LOOM_F32 || r->ndim != 2 || r->shape[0] != s->M || r->shape[1] != s->N ||
                           r->stride[1] != 1,
                       LOOM_ERR_SHAPE, "%s: input 4 (residual) must be f32 [%lld, %lld] with contiguous rows", OP,
                       (long long)s->M, (long long)s->N);
    }
    return LOOM_OK;
}

/* The whole problem's attention (for its cost, its query block and the
 * scratch it needs), with placeholder data where none is bound. */
static loom_status al_problem(const loom_tensor *const *src, const loom_attention_linear_attrs *at,
                              loom_tensor *o, attn_problem *pr) {
    loom_tensor q = *src[0], k = *src[1], v = *src[2];
    loom_tensor *all[3] = {&q, &k, &v};
    for (int i = 0; i < 3; i++)
        if (!all[i]->data) all[i]->data = &placeholder;
    loom_tensor_init(o, LOOM_F32, 4, q.shape, &placeholder);
    loom_flash_attention_params p = al_fa_params(at);
    loom_flash_attention_tensors t = {.query = &q, .key = &k, .value = &v, .attention_out = o};
    return attn_resolve_prefill(&t, &p, pr);
}

int64_t loom_attention_linear_rows_for(int64_t hd, int64_t l2_bytes) {
    double l2 = l2_bytes > 0 ? (double)l2_bytes : (double)(1 << 20);
    int64_t r = (int64_t)(l2 / 2 / (4.0 * (double)(hd > 0 ? hd : 1)));
    return r > 256 ? 256 : r < 1 ? 1 : r;
}

/* Query positions per unit: a multiple of the attention's query block br; the
 * attribute, else loom_attention_linear_rows_for this CPU's L2. */
static int64_t al_rows(const loom_attention_linear_attrs *at, const al_shape *s, int64_t br) {
    int64_t r = at->block_rows > 0 ? at->block_rows : loom_attention_linear_rows_for(s->HD, loom_cpu_get()->l2_bytes);
    r = r / br * br;
    return r < br ? br : r;
}

static size_t al_align(size_t n) { return (n + 63) & ~(size_t)63; }

static loom_matmul_args al_gemm(const loom_tensor *const *src, const loom_attention_linear_attrs *at,
                                const al_shape *s, int64_t rows) {
    const loom_tensor *w = src[3];
    loom_matmul_args g = {.x = NULL, .ldx = s->HD, .w = w->data, .ldw = w->stride[0], .wtype = w->dtype,
                          .y = NULL, .ldy = s->N, .M = rows, .N = s->N, .K = s->HD,
                          .act = (loom_act_precision)at->act_precision, .invariant = 1};
    return g;
}

static loom_status al_infer(const loom_tensor *const *src, int n_src, const void *attrs, loom_tensor *dst) {
    al_shape s;
    LOOM_TRY(al_check(src, n_src, attrs, &s));
    loom_tensor o;
    attn_problem pr;
    LOOM_TRY(al_problem(src, attrs, &o, &pr));
    const int64_t shape[2] = {s.M, s.N};
    loom_ref_set_dst(dst, LOOM_F32, 2, shape);
    return LOOM_OK;
}

/* The attention's reads (q, each K/V row once) and flops, W once (it stays in
 * the L2 across the units: the builder's condition), the residual, y written;
 * the attention's output is neither written nor read. */
static void al_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs,
                    loom_cost *c) {
    const loom_attention_linear_attrs *at = attrs;
    loom_tensor o;
    attn_problem pr;
    c->flops = c->bytes_read = c->bytes_written = 0.0;
    /* no dtype checks: the planner costs 16-bit activations (--act-dtype) on the same nodes */
    if (!at || n_src < 4 + at->residual || src[3]->ndim != 2 || al_problem(src, at, &o, &pr) != LOOM_OK) return;
    attn_cost(&pr, c);
    double M = (double)src[0]->shape[0] * (double)src[0]->shape[1], N = (double)src[3]->shape[0];
    double K = (double)src[3]->shape[1];
    c->flops += 2.0 * M * N * K;
    c->bytes_read += (double)loom_dtype_row_bytes(src[3]->dtype, src[3]->shape[1]) * N;
    c->bytes_written = LOOM_ES(dst) * M * N;
    if (at->residual) c->bytes_read += LOOM_ES(src[4]) * M * N, c->flops += M * N;
}

/* Per-thread scratch: the attention's, the unit's output block [R, H*D] (at
 * least LOOM_GEMM_MIN_M - 1 rows: a small launch's), the GEMM's. */
typedef struct al_layout { size_t fa, obuf, mm, total; int64_t rows, br; } al_layout;

/* The GEMM's scratch for rows rows (invariant or not), with the residual taken
 * to be y itself (the epilogue's saved chunk counted): the most it may need. */
static size_t al_mm_scratch(const loom_tensor *const *src, const loom_attention_linear_attrs *at, const al_shape *s,
                            int64_t rows, int invariant) {
    static float same;
    loom_matmul_args g = al_gemm(src, at, s, rows);
    loom_epilogue ep = {0};
    g.invariant = invariant;
    if (at->residual) ep.residual = &same, ep.ld_res = s->N, g.y = &same, g.ldy = s->N, g.ep = &ep;
    return loom_matmul_scratch_size(&g);
}

static loom_status al_layout_of(const loom_tensor *const *src, int n_src, const loom_attention_linear_attrs *at,
                                al_shape *s, attn_problem *pr, al_layout *l) {
    loom_tensor o;
    LOOM_TRY(al_check(src, n_src, at, s));
    LOOM_TRY(al_problem(src, at, &o, pr));
    l->br = attn_prefill_block_q(pr);
    l->rows = al_rows(at, s, l->br);
    int64_t small = LOOM_GEMM_MIN_M - 1, ob = l->rows > small ? l->rows : small;
    size_t mm1 = al_mm_scratch(src, at, s, l->rows, 1), mm0 = al_mm_scratch(src, at, s, small, 0);
    l->fa = al_align(attn_prefill_scratch_all(pr));
    l->obuf = al_align((size_t)ob * (size_t)s->HD * sizeof(float));
    l->mm = al_align(mm1 > mm0 ? mm1 : mm0);
    l->total = l->fa + l->obuf + l->mm;
    return LOOM_OK;
}

static size_t al_scratch(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs) {
    al_shape s;
    attn_problem pr;
    al_layout l;
    (void)dst;
    return al_layout_of(src, n_src, attrs, &s, &pr, &l) == LOOM_OK ? l.total + 64 : 0;
}

typedef struct al_units { const al_shape *s; int64_t rows, per_b; } al_units;

/* A unit's cost in units of 2 H*D flops a row: its attention (2 x visible
 * keys: QK^T and PV) and its GEMM (N). */
static double al_unit_cost(const void *ctx, int64_t u) {
    const al_units *c = ctx;
    const al_shape *s = c->s;
    int64_t r0 = u % c->per_b * c->rows, r1 = r0 + c->rows < s->S ? r0 + c->rows : s->S;
    double keys = s->causal ? (double)(s->Skv - s->S) + 0.5 * (double)(r0 + r1) : (double)s->Skv;
    return (double)(r1 - r0) * (2.0 * keys + (double)s->N);
}

/* The attention of rows [r0, r0 + rows) of batch entry b into out [rows, H*D]. */
static loom_status al_attend(const loom_kernel_args *a, loom_isa isa, const al_shape *s, const al_layout *l, int64_t b,
                             int64_t r0, int64_t rows, float *out) {
    const loom_attention_linear_attrs *at = a->attrs;
    int64_t kv = s->causal ? s->Skv - s->S + r0 + rows : s->Skv; /* the last row's keys */
    const loom_tensor *q = a->src[0], *k = a->src[1], *v = a->src[2];
    loom_tensor qs, ks, vs, os;
    const int64_t qshape[4] = {1, rows, s->H, s->D}, kvshape[4] = {1, kv, s->Hkv, s->D};
    loom_tensor_init(&qs, q->dtype, 4, qshape,
                     (char *)q->data + (size_t)(b * q->stride[0] + r0 * q->stride[1]) * loom_dtype_size(q->dtype));
    loom_tensor_init(&ks, k->dtype, 4, kvshape, (char *)k->data + (size_t)(b * k->stride[0]) * loom_dtype_size(k->dtype));
    loom_tensor_init(&vs, v->dtype, 4, kvshape, (char *)v->data + (size_t)(b * v->stride[0]) * loom_dtype_size(v->dtype));
    for (int d = 1; d < 4; d++) qs.stride[d] = q->stride[d], ks.stride[d] = k->stride[d], vs.stride[d] = v->stride[d];
    loom_tensor_init(&os, LOOM_F32, 4, qshape, out);
    loom_flash_attention_params p = al_fa_params(at);
    loom_flash_attention_tensors t = {.query = &qs, .key = &ks, .value = &vs, .attention_out = &os};
    if (isa == LOOM_ISA_REF) return loom_attn_ref_flash(&t, &p, 0, 1, a->scratch, l->fa);
    attn_problem pr;
    LOOM_TRY(attn_resolve_prefill(&t, &p, &pr));
    return attn_prefill_run(&pr, loom_attn_kernels_for(isa), 0, 1, a->scratch, l->fa);
}

/* obuf [rows, H*D] . W^T (+ residual) into y's rows [m0, m0 + rows). */
static loom_status al_project(const loom_kernel_args *a, loom_isa isa, const al_shape *s, const al_layout *l,
                              int64_t m0, int64_t rows, int invariant) {
    const loom_attention_linear_attrs *at = a->attrs;
    char *scratch = a->scratch;
    loom_epilogue ep = {0};
    if (at->residual) {
        const loom_tensor *r = a->src[4];
        ep.residual = (const float *)r->data + m0 * r->stride[0], ep.ld_res = r->stride[0];
    }
    loom_matmul_args g = al_gemm(a->src, at, s, rows);
    g.x = (const float *)(scratch + l->fa), g.y = (float *)a->dst->data + m0 * a->dst->stride[0];
    g.ldy = a->dst->stride[0], g.invariant = invariant;
    g.ep = at->residual ? &ep : NULL;
    return loom_matmul_run(&g, isa, 0, 1, scratch + l->fa + l->obuf);
}

/* Unit u: the attention of its rows, then their projection (batch-invariant
 * GEMM: a row's bits whatever the unit's rows). */
static loom_status al_unit(const loom_kernel_args *a, loom_isa isa, const al_shape *s, const al_layout *l,
                           const al_units *un, int64_t u) {
    int64_t b = u / un->per_b, r0 = u % un->per_b * un->rows;
    int64_t rows = r0 + un->rows < s->S ? un->rows : s->S - r0;
    LOOM_TRY(al_attend(a, isa, s, l, b, r0, rows, (float *)((char *)a->scratch + l->fa)));
    return al_project(a, isa, s, l, b * s->S + r0, rows, 1);
}

static loom_status al_kernel(const loom_kernel_args *a, loom_isa isa) {
    al_shape s;
    attn_problem pr;
    al_layout l;
    LOOM_TRY(al_layout_of(a->src, a->n_src, a->attrs, &s, &pr, &l));
    LOOM_RETURN_IF(!a->scratch || a->scratch_bytes < l.total, LOOM_ERR_INVALID_ARG, "%s: scratch of %zu bytes, need %zu",
                   OP, a->scratch_bytes, l.total);
    LOOM_RETURN_IF(a->dst->ndim != 2 || a->dst->shape[0] != s.M || a->dst->shape[1] != s.N || a->dst->stride[1] != 1,
                   LOOM_ERR_SHAPE, "%s: y must be [%lld, %lld] with contiguous rows", OP, (long long)s.M,
                   (long long)s.N);
    if (s.M < LOOM_GEMM_MIN_M && !a->invariant) { /* a small launch: one unit, linear's GEMM (or GEMV) */
        if (a->ith != 0) return LOOM_OK;
        float *obuf = (float *)((char *)a->scratch + l.fa);
        for (int64_t b = 0; b < s.B; b++) LOOM_TRY(al_attend(a, isa, &s, &l, b, 0, s.S, obuf + b * s.S * s.HD));
        return al_project(a, isa, &s, &l, 0, s.M, 0);
    }
    /* fewer rows a unit when that gives each thread four or more units (the
     * causal units differ in cost): results do not depend on the rows */
    al_units un = {&s, l.rows, 0};
    while (a->nth > 1 && un.rows > l.br && s.B * ((s.S + un.rows - 1) / un.rows) < 4 * (int64_t)a->nth)
        un.rows = (un.rows / 2 + l.br - 1) / l.br * l.br;
    un.per_b = (s.S + un.rows - 1) / un.rows;
    int64_t n = s.B * un.per_b;
    if (a->nth <= 1 || !a->arrive || n + a->nth >= INT_MAX) {
        int64_t lo, hi;
        attn_split_cost(n, a->ith, a->nth, al_unit_cost, &un, &lo, &hi);
        for (int64_t u = lo; u < hi; u++) LOOM_TRY(al_unit(a, isa, &s, &l, &un, u));
        return LOOM_OK;
    }
    /* Units taken from the launch's counter as threads come free, the costly
     * ones first (a causal block's cost grows with its last row): a static
     * split of a few units of unequal cost left one thread waiting for the
     * other (perf: 3 % of a SmolLM2 prefill in sched_yield). Which thread
     * runs a unit never changes its result. Every thread claims until a claim
     * fails, even after an error, so the claims total n + nth; the one that
     * makes the last claim resets the counter for the node's next launch
     * (every other thread has made its last claim by then). */
    loom_status st = LOOM_OK;
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(a->arrive, 1, memory_order_relaxed);
        if (i >= n) {
            if (i == n + a->nth - 1) atomic_store_explicit(a->arrive, 0, memory_order_relaxed);
            break;
        }
        /* claim i: block per_b - 1 - i / B of batch entry i % B */
        int64_t u = (i % s.B) * un.per_b + (un.per_b - 1 - i / s.B);
        if (st == LOOM_OK) st = al_unit(a, isa, &s, &l, &un, u);
    }
    return st;
}

LOOM_FUSED_LEVELS(attention_linear, al_kernel)

void loom_register_attention_linear_op(loom_op_info *e) {
    e->infer = al_infer, e->cost = al_cost, e->scratch_size = al_scratch, e->ref = attention_linear_ref;
    e->decomposition = "attention matmul add";
    LOOM_FUSED_SET_LEVELS(e, attention_linear);
}
