/* Builders: turn a match of a rule into the fused node (inputs, attributes,
 * outputs), or refuse it when the fused kernel cannot take that case. One per
 * fused op name usable in `fused_op:`; more come from loom_register_fusion. */
#include "graph/fusion_internal.h"

#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "fused/attention.h"
#include "fused/fused_graph_ops.h"
#include "fused/fused_internal.h"
#include "ops/matmul/matmul.h"

int fr_node(const fr_ctx *c, const char *name) {
    for (int i = 0; i < c->rule->n_nodes; i++)
        if (!strcmp(c->rule->nodes[i].name, name)) return c->m->node[i];
    return -1;
}

int fr_var(const fr_ctx *c, const char *name) {
    for (int i = 0; i < c->rule->n_vars; i++)
        if (!strcmp(c->rule->vars[i], name)) return c->m->var[i];
    return -1;
}

int64_t fr_opt(const fr_ctx *c, const char *key, int64_t auto_value) {
    int64_t cap = c->max_block;
    for (int i = 0; i < c->rule->n_opts; i++)
        if (!strcmp(c->rule->opts[i].key, "max_fusion_block_size") && !c->rule->opts[i].is_auto)
            cap = c->rule->opts[i].value;
    for (int i = 0; i < c->rule->n_opts; i++)
        if (!strcmp(c->rule->opts[i].key, key) && !c->rule->opts[i].is_auto) return c->rule->opts[i].value;
    return cap > 0 && auto_value > cap ? cap : auto_value;
}

static const loom_node *gnode(const fr_ctx *c, const char *name) { return &c->g->nodes[fr_node(c, name)]; }
static const loom_tensor *gt(const fr_ctx *c, int id) { return &c->g->tensors[id].t; }

/* 1 when the matmul pattern node name multiplies by f32 activations (its
 * optional loom_matmul_attrs say LOOM_ACT_PREC_FULL). */
static int mm_full(const fr_ctx *c, const char *name) {
    const loom_node *n = gnode(c, name);
    return n->has_attrs && ((const loom_matmul_attrs *)(const void *)n->attrs)->act_precision == LOOM_ACT_PREC_FULL;
}

/* The activation precision the fused op takes from the matmul nodes names
 * (space-separated), or -1 when they differ (the match is then refused: a
 * fused op runs all its matmuls one way). */
static int32_t fused_act(const fr_ctx *c, const char *names) {
    int full = -1;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", names);
    for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        int f = mm_full(c, tok);
        if (full >= 0 && f != full) return -1;
        full = f;
    }
    return full ? LOOM_ACT_PREC_FULL : LOOM_ACT_PREC_Q8;
}

/* ------------------------------------------------------------ RMSNorm on the fly */

/* The rule's pattern node "norm" (rms_norm($x, $gamma)) into the fused op:
 * gamma appended to its inputs, the eps returned; 0 when the fused kernel
 * cannot take it (x not contiguous [M, K] rows, no gamma, gamma not [K]). */
static int take_norm(const fr_ctx *c, fr_fused *f, float *eps) {
    if (fr_node(c, "norm") < 0) return 0;
    const loom_node *n = gnode(c, "norm");
    int gv = fr_var(c, "gamma");
    if (n->n_src != 2 || gv < 0 || n->src[0] != fr_var(c, "x") || f->n_src >= LOOM_MAX_SRC) return 0;
    const loom_tensor *x = gt(c, n->src[0]), *g = gt(c, gv);
    if (x->ndim != 2 || x->stride[1] != 1 || g->dtype != LOOM_F32 || loom_tensor_nelem(g) != x->shape[1] ||
        !loom_tensor_is_contiguous(g))
        return 0;
    f->src[f->n_src++] = gv;
    *eps = ((const loom_rms_norm_attrs *)(const void *)n->attrs)->eps;
    return 1;
}

/* The rule's residual node add(r, prod) into the fused op: r appended to its
 * inputs and the add's output made the fused op's; 0 when r or the sum is not
 * 2-D [rows of prod, cols of prod] with contiguous rows, or the add does not
 * take prod. Returns 1 without a residual node. */
static int take_residual(const fr_ctx *c, fr_fused *f, int prod) {
    int res = fr_node(c, "residual");
    if (res < 0) return 1;
    const loom_node *r = &c->g->nodes[res];
    if (r->src[0] != prod && r->src[1] != prod) return 0; /* the sum of something else */
    int other = r->src[0] == prod ? r->src[1] : r->src[0];
    const loom_tensor *rt = gt(c, other), *rd = gt(c, r->dst), *y = gt(c, prod);
    if (rt->ndim != 2 || rt->stride[1] != 1 || y->ndim != 2 || rt->shape[0] != y->shape[0] ||
        rt->shape[1] != y->shape[1] || rd->ndim != 2 || f->n_src >= LOOM_MAX_SRC)
        return 0;
    f->src[f->n_src++] = other;
    f->dst = r->dst;
    return 1;
}

/* qkv_rope's attributes take the rule's norm node, when it has one. */
static int qkv_norm(const fr_ctx *c, fr_fused *f) {
    if (fr_node(c, "norm") < 0) return 1;
    loom_qkv_rope_attrs a;
    memcpy(&a, f->attrs, sizeof a);
    if (!take_norm(c, f, &a.norm_eps)) return 0;
    a.norm = 1;
    memcpy(f->attrs, &a, sizeof a);
    return 1;
}

/* ------------------------------------------------------------ qkv_rope */

static int build_qkv(const fr_ctx *c, fr_fused *f) {
    const loom_node *qr = gnode(c, "q_rope"), *kr = gnode(c, "k_rope");
    const loom_node *kc = gnode(c, "k_cache"), *vc = gnode(c, "v_cache");
    const loom_rope_attrs *qa = (const void *)qr->attrs, *ka = (const void *)kr->attrs;
    if (memcmp(qa, ka, sizeof *qa) != 0) return 0;   /* one rotation for both */
    const loom_kv_append_attrs *kca = (const void *)kc->attrs, *vca = (const void *)vc->attrs;
    if (kca->pos != qa->pos_offset || vca->pos != qa->pos_offset) return 0;
    const loom_tensor *q = gt(c, qr->dst), *k = gt(c, kr->dst), *x = gt(c, fr_var(c, "x"));
    if (q->ndim != 3 || k->ndim != 3 || x->ndim != 2 || q->shape[0] != x->shape[0]) return 0;
    /* the caches must be the contiguous [S, Hkv, D] tensors the kernel writes */
    const loom_tensor *ks = gt(c, kc->dst), *vs = gt(c, vc->dst);
    if (ks->shape[1] != k->shape[1] || ks->shape[2] != k->shape[2] || vs->ndim != 3 ||
        vs->shape[1] != k->shape[1] || vs->shape[2] != k->shape[2] || vs->dtype != ks->dtype ||
        (ks->dtype != LOOM_F32 && ks->dtype != LOOM_F16 && ks->dtype != LOOM_BF16 && ks->dtype != LOOM_I8))
        return 0;
    /* i8 caches: the kv_append nodes' scale stores (the rule names them $k_scale, $v_scale) */
    int kscale = fr_var(c, "k_scale"), vscale = fr_var(c, "v_scale");
    if ((ks->dtype == LOOM_I8) != (kscale >= 0 && vscale >= 0)) return 0;
    int32_t act = fused_act(c, "q k v");
    if (act < 0) return 0;
    loom_qkv_rope_attrs a = {.rope = *qa, .n_heads = (int32_t)q->shape[1],
                             .n_kv_heads = (int32_t)k->shape[1], .head_dim = (int32_t)q->shape[2],
                             .block_heads = 0, .cache_dtype = ks->dtype, .act_precision = act};
    /* auto: from the hardware section's L3 (cpuid unless the rules file sets it) */
    a.block_heads = (int32_t)fr_opt(c, "block_heads",
                                    loom_qkv_heads_per_block_for(x->shape[0], a.head_dim, a.n_heads,
                                                                 a.n_kv_heads, c->hw.l3_bytes));
    if (k->shape[2] != a.head_dim) return 0;
    f->op = LOOM_OP_QKV_ROPE;
    f->n_src = ks->dtype == LOOM_I8 ? 6 : 4;
    f->src[0] = fr_var(c, "x"), f->src[1] = fr_var(c, "wq"), f->src[2] = fr_var(c, "wk");
    f->src[3] = fr_var(c, "wv");
    f->src[4] = kscale, f->src[5] = vscale;
    memcpy(f->attrs, &a, sizeof a);
    f->dst = qr->dst;
    f->extra[0] = kc->dst, f->extra[1] = vc->dst;
    f->n_extra = 2;
    return qkv_norm(c, f); /* norm_qkv_rope rules */
}

/* The paged form (the engine's graphs): rope at $positions, kv_write to
 * $slots of the whole cache stores [n_slots, Hkv, D]. */
static int build_qkv_paged(const fr_ctx *c, fr_fused *f) {
    const loom_node *qr = gnode(c, "q_rope"), *kr = gnode(c, "k_rope");
    const loom_node *kc = gnode(c, "k_cache"), *vc = gnode(c, "v_cache");
    const loom_rope_attrs *qa = (const void *)qr->attrs, *ka = (const void *)kr->attrs;
    if (memcmp(qa, ka, sizeof *qa) != 0 || qa->pos_offset != 0) return 0; /* one rotation, by positions */
    const loom_tensor *q = gt(c, qr->dst), *k = gt(c, kr->dst), *x = gt(c, fr_var(c, "x"));
    if (q->ndim != 3 || k->ndim != 3 || x->ndim != 2 || q->shape[0] != x->shape[0] || k->shape[2] != q->shape[2])
        return 0;
    const loom_tensor *ks = gt(c, kc->dst), *vs = gt(c, vc->dst);
    if (ks->ndim != 3 || vs->ndim != 3 || ks->shape[0] != vs->shape[0] || !loom_tensor_is_contiguous(ks) ||
        !loom_tensor_is_contiguous(vs))
        return 0;
    for (int d = 1; d < 3; d++)
        if (ks->shape[d] != k->shape[d] || vs->shape[d] != k->shape[d]) return 0;
    if (vs->dtype != ks->dtype ||
        (ks->dtype != LOOM_F32 && ks->dtype != LOOM_F16 && ks->dtype != LOOM_BF16 && ks->dtype != LOOM_I8))
        return 0;
    int kscale = fr_var(c, "k_scale"), vscale = fr_var(c, "v_scale");
    if ((ks->dtype == LOOM_I8) != (kscale >= 0 && vscale >= 0)) return 0;
    int32_t act = fused_act(c, "q k v");
    if (act < 0) return 0;
    loom_qkv_rope_attrs a = {.rope = *qa, .n_heads = (int32_t)q->shape[1], .n_kv_heads = (int32_t)k->shape[1],
                             .head_dim = (int32_t)q->shape[2], .cache_dtype = ks->dtype, .act_precision = act,
                             .paged = 1};
    a.block_heads = (int32_t)fr_opt(c, "block_heads",
                                    loom_qkv_heads_per_block_for(x->shape[0], a.head_dim, a.n_heads,
                                                                 a.n_kv_heads, c->hw.l3_bytes));
    f->op = LOOM_OP_QKV_ROPE;
    f->n_src = ks->dtype == LOOM_I8 ? 8 : 6;
    f->src[0] = fr_var(c, "x"), f->src[1] = fr_var(c, "wq"), f->src[2] = fr_var(c, "wk");
    f->src[3] = fr_var(c, "wv"), f->src[4] = fr_var(c, "positions"), f->src[5] = fr_var(c, "slots");
    f->src[6] = kscale, f->src[7] = vscale;
    memcpy(f->attrs, &a, sizeof a);
    f->dst = qr->dst;
    f->extra[0] = kc->dst, f->extra[1] = vc->dst;
    f->n_extra = 2;
    return qkv_norm(c, f); /* norm_qkv_rope rules */
}

/* ------------------------------------------------------------ linear */

/* The rule's bias and act nodes (an encoder's matmul + add_bias (+ gelu)):
 * the bias appended to the inputs, the activation into *act, *prod moved to
 * the last of them; 0 when they do not chain from the product or the
 * activation has no epilogue form. */
static int take_bias_act(const fr_ctx *c, fr_fused *f, int *prod, int64_t N, int32_t *bias, int32_t *act) {
    int b = fr_node(c, "bias"), a = fr_node(c, "act");
    *bias = 0, *act = LOOM_ACT_NONE;
    if (b >= 0) {
        const loom_node *bn = &c->g->nodes[b];
        int bv = fr_var(c, "bias");
        if (bn->n_src != 2 || bn->src[0] != *prod || bv < 0 || bn->src[1] != bv || f->n_src >= LOOM_MAX_SRC) return 0;
        const loom_tensor *bt = gt(c, bv);
        if (bt->dtype != LOOM_F32 || loom_tensor_nelem(bt) != N || !loom_tensor_is_contiguous(bt)) return 0;
        f->src[f->n_src++] = bv;
        *bias = 1, *prod = bn->dst;
    }
    if (a >= 0) {
        const loom_node *an = &c->g->nodes[a];
        if (an->n_src != 1 || an->src[0] != *prod) return 0;
        if (an->op == LOOM_OP_GELU)
            *act = an->has_attrs && ((const loom_gelu_attrs *)(const void *)an->attrs)->approximate ? LOOM_ACT_GELU_TANH
                                                                                                    : LOOM_ACT_GELU;
        else if (an->op == LOOM_OP_SILU) *act = LOOM_ACT_SILU;
        else return 0;
        *prod = an->dst;
    }
    return 1;
}

/* matmul + residual add (the output projection), rms_norm + matmul (the
 * output norm and the LM head), or all three (fused op linear); matmul +
 * add_bias (+ gelu or silu, or + the residual add: an encoder's projections;
 * fused op linear_bias, whose roles keep the rules to those chains). */
static int build_linear(const fr_ctx *c, fr_fused *f) {
    const loom_node *mm = gnode(c, "mm");
    int res = fr_node(c, "residual"), has_norm = fr_node(c, "norm") >= 0;
    if (res < 0 && !has_norm && fr_node(c, "bias") < 0 && fr_node(c, "act") < 0)
        return 0; /* a plain matmul: nothing to fuse */
    const loom_tensor *x = gt(c, fr_var(c, "x")), *w = gt(c, fr_var(c, "w")), *y = gt(c, mm->dst);
    if (x->ndim != 2 || x->stride[1] != 1 || w->ndim != 2 || w->stride[1] != 1 || y->ndim != 2) return 0;
    int32_t act = fused_act(c, "mm");
    if (act < 0) return 0;
    loom_linear_attrs a = {.act_precision = act};
    f->op = LOOM_OP_LINEAR;
    f->n_src = 2;
    f->src[0] = fr_var(c, "x"), f->src[1] = fr_var(c, "w");
    int prod = mm->dst;
    if (!take_bias_act(c, f, &prod, w->shape[0], &a.bias, &a.act)) return 0;
    f->dst = prod;
    if (!take_residual(c, f, prod)) return 0;
    a.residual = res >= 0;
    if (has_norm) {
        if (!take_norm(c, f, &a.norm_eps)) return 0;
        a.norm = 1;
    }
    memcpy(f->attrs, &a, sizeof a);
    return 1;
}

/* ------------------------------------------------------------ attention */

static int build_attention(const fr_ctx *c, fr_fused *f) {
    const loom_node *at = gnode(c, "attn");
    const loom_attention_attrs *aa = (const void *)at->attrs;
    const loom_tensor *q = gt(c, fr_var(c, "q")), *k = gt(c, fr_var(c, "k"));
    if (q->ndim != 4 || k->ndim != 4) return 0;
    int64_t sq = q->shape[1], skv = k->shape[1];
    /* the fused kernels' causal mask is bottom-right aligned: j <= i + Skv - Sq */
    if (aa->causal && aa->q_pos_offset != skv - sq) return 0;
    f->n_src = 3;
    f->src[0] = fr_var(c, "q"), f->src[1] = fr_var(c, "k"), f->src[2] = fr_var(c, "v");
    if (k->dtype == LOOM_I8) { /* the i8 cache's row scales ($k_scale, $v_scale) follow */
        f->src[3] = fr_var(c, "k_scale"), f->src[4] = fr_var(c, "v_scale");
        if (f->src[3] < 0 || f->src[4] < 0) return 0;
        f->n_src = 5;
    }
    f->dst = at->dst;
    /* a sliding window: the band below the same diagonal, window - 1 keys before it */
    int band = aa->causal && aa->window > 0;
    int decode = !strcmp(c->rule->fused_op, "incre_flash_attention") ||
                 !strcmp(c->rule->fused_op, "incre_attention_linear") || /* its builder checked q_len */
                 (!strcmp(c->rule->fused_op, "fused_infer_attention") && sq <= fr_opt(c, "decode_max_q_len", 16));
    if (decode) {
        loom_incre_flash_attention_attrs a = LOOM_INCRE_FLASH_ATTENTION_ATTRS_DEFAULT;
        a.scale_value = aa->scale;
        a.sparse_mode = aa->causal && sq > 1 ? LOOM_SPARSE_RIGHT_DOWN_CAUSAL : 0;
        if (band) a.sparse_mode = LOOM_SPARSE_BAND, a.pre_tokens = aa->window - 1, a.next_tokens = 0;
        a.kv_chunk = (int32_t)fr_opt(c, "block_kv", 0);
        a.inner_precise = (int32_t)fr_opt(c, "inner_precise", 0); /* a bf16 K: q rounded to bf16 */
        a.softcap = aa->softcap;
        a.out_f32 = gt(c, at->dst)->dtype == LOOM_F32; /* stated, not taken from q (activation_dtype narrows q) */
        f->op = LOOM_OP_INCRE_FLASH_ATTENTION;
        memcpy(f->attrs, &a, sizeof a);
    } else {
        loom_flash_attention_attrs a = LOOM_FLASH_ATTENTION_ATTRS_DEFAULT;
        a.scale_value = aa->scale;
        a.sparse_mode = aa->causal ? LOOM_SPARSE_RIGHT_DOWN_CAUSAL : 0;
        if (band) a.sparse_mode = LOOM_SPARSE_BAND, a.pre_tokens = aa->window - 1, a.next_tokens = 0;
        a.block_q = (int32_t)fr_opt(c, "block_q", 0);
        a.block_kv = (int32_t)fr_opt(c, "block_kv", 0);
        a.inner_precise = (int32_t)fr_opt(c, "inner_precise", 0);
        a.softcap = aa->softcap;
        a.out_f32 = gt(c, at->dst)->dtype == LOOM_F32;
        f->op = LOOM_OP_FLASH_ATTENTION;
        memcpy(f->attrs, &a, sizeof a);
    }
    return 1;
}

/* attention + output projection (+ residual add) in prefill -> one
 * attention_linear kernel (src/fused/attention_linear_op.c). Refused, leaving
 * the attention and linear rules after it to take the match apart, for decode
 * (q_len <= decode_max_q_len), i8 caches (their scales are inputs of their
 * own), and a W larger
 * than half the L2: the kernel reads (and packs) W once per block of rows, and
 * a W from outside the core's L2 costs more than the attention output saves
 * (bench/results/fusion.md: a Llama-3.2-1B-shaped layer, W 8 MB, ran 0.77-0.96x
 * as fast fused). */
_Static_assert(sizeof(loom_attention_linear_attrs) <= LOOM_ATTR_MAX, "attention_linear's attributes fit a node");
_Static_assert(sizeof(loom_flash_attention_attrs) <= LOOM_ATTR_MAX, "flash_attention_score's attributes fit a node");
_Static_assert(sizeof(loom_incre_flash_attention_attrs) <= LOOM_ATTR_MAX, "incre_flash_attention's attributes fit a node");
_Static_assert(sizeof(loom_qkv_rope_attrs) <= LOOM_ATTR_MAX, "qkv_rope's attributes fit a node");

static int build_attention_linear(const fr_ctx *c, fr_fused *f) {
    const loom_node *at = gnode(c, "attn"), *mm = gnode(c, "mm");
    const loom_attention_attrs *aa = (const void *)at->attrs;
    const loom_tensor *q = gt(c, fr_var(c, "q")), *k = gt(c, fr_var(c, "k")), *v = gt(c, fr_var(c, "v"));
    const loom_tensor *w = gt(c, fr_var(c, "w")), *x = gt(c, mm->src[0]);
    if (at->n_src != 3 || q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || q->dtype != LOOM_F32 || q->stride[3] != 1)
        return 0;
    for (int i = 0; i < 2; i++) {
        loom_dtype dt = (i ? v : k)->dtype;
        if (dt != LOOM_F32 && dt != LOOM_F16 && dt != LOOM_BF16) return 0;
    }
    int64_t sq = q->shape[1], skv = k->shape[1];
    if (sq <= fr_opt(c, "decode_max_q_len", 16)) return 0;
    if (aa->causal && aa->q_pos_offset != skv - sq) return 0; /* the kernels' causal mask: bottom-right */
    /* mm multiplies the whole attention output, as [B * S, H * D] rows */
    if (fr_source(c->g, mm->src[0]) != at->dst || x->ndim != 2 || x->shape[0] != q->shape[0] * sq ||
        x->shape[1] != q->shape[2] * q->shape[3])
        return 0;
    if (w->ndim != 2 || w->stride[1] != 1 || w->shape[1] != x->shape[1]) return 0;
    double wbytes = (double)loom_dtype_row_bytes(w->dtype, w->shape[1]) * (double)w->shape[0];
    if (wbytes > c->hw.l2_bytes / 2) return 0;
    int32_t act = fused_act(c, "mm");
    if (act < 0) return 0;
    loom_attention_linear_attrs a = {.scale_value = aa->scale, .act_precision = act,
                                     .pre_tokens = LOOM_ATTN_TOKENS_ALL, .next_tokens = LOOM_ATTN_TOKENS_ALL};
    a.sparse_mode = aa->causal ? LOOM_SPARSE_RIGHT_DOWN_CAUSAL : 0;
    if (aa->causal && aa->window > 0) a.sparse_mode = LOOM_SPARSE_BAND, a.pre_tokens = aa->window - 1, a.next_tokens = 0;
    a.block_q = (int32_t)fr_opt(c, "block_q", 0);
    a.block_kv = (int32_t)fr_opt(c, "block_kv", 0);
    a.softcap = aa->softcap;
    a.inner_precise = (int32_t)fr_opt(c, "inner_precise", 0);
    /* auto: from the hardware section's L2 (cpuid unless the rules file sets it) */
    a.block_rows = (int32_t)fr_opt(c, "block_rows", loom_attention_linear_rows_for(x->shape[1], (int64_t)c->hw.l2_bytes));
    f->op = LOOM_OP_ATTENTION_LINEAR;
    f->n_src = 4;
    f->src[0] = fr_var(c, "q"), f->src[1] = fr_var(c, "k"), f->src[2] = fr_var(c, "v"), f->src[3] = fr_var(c, "w");
    f->dst = mm->dst;
    if (!take_residual(c, f, mm->dst)) return 0;
    a.residual = fr_node(c, "residual") >= 0;
    memcpy(f->attrs, &a, sizeof a);
    return 1;
}

/* decode attention + output projection (+ residual add) -> one
 * incre_attention_linear kernel (src/fused/incre_attention_linear_op.c):
 * each thread's groups of kv heads through the attention and their columns
 * of W, the groups' partials summed in order. Taken where q_len <=
 * decode_max_q_len, over any cache build_attention's decode kernel takes
 * (i8 with its scales too), when the rule's groups option is not 0 (the
 * default rules' is 0). groups auto: for a float W, where whole groups share
 * the kv heads out evenly on the rules' hardware threads
 * (loom_incre_attention_linear_groups: a thread runs its heads' attention
 * whole, without split-KV); a set count for any W whose blocks a kv head's
 * columns hold whole. */
_Static_assert(sizeof(loom_incre_attention_linear_attrs) <= LOOM_ATTR_MAX,
               "incre_attention_linear's attributes fit a node");

static int build_incre_attention_linear(const fr_ctx *c, fr_fused *f) {
    const loom_node *at = gnode(c, "attn"), *mm = gnode(c, "mm");
    const loom_tensor *q = gt(c, fr_var(c, "q")), *k = gt(c, fr_var(c, "k")), *w = gt(c, fr_var(c, "w"));
    const loom_tensor *x = gt(c, mm->src[0]);
    if (q->ndim != 4 || k->ndim != 4 || q->shape[1] > fr_opt(c, "decode_max_q_len", 16)) return 0;
    /* mm multiplies the whole attention output, as [B * S, H * D] rows */
    if (fr_source(c->g, mm->src[0]) != at->dst || x->ndim != 2 || x->dtype != LOOM_F32 ||
        x->shape[0] != q->shape[0] * q->shape[1] || x->shape[1] != q->shape[2] * q->shape[3])
        return 0;
    if (w->ndim != 2 || w->stride[1] != 1 || w->shape[1] != x->shape[1]) return 0;
    int64_t hkv = k->shape[2], blk = loom_dtype_block_elems(w->dtype);
    if (hkv < 1 || q->shape[2] % hkv || (blk > 1 && q->shape[2] / hkv * q->shape[3] % blk)) return 0;
    /* 0: not taken; auto: from the rules' hardware threads, for a float W only (a quantized
     * W's slices are GEMVs over short K called once per 16 rows, which ran the ffn's one pass
     * at 0.76-0.86x: bench/results/fusion.md); a set count is capped at the kv heads */
    int64_t groups = fr_opt(c, "groups", blk > 1 ? 0 : loom_incre_attention_linear_groups(hkv, c->hw.threads));
    groups = groups < hkv ? groups : hkv;
    groups = groups < LOOM_FFN_ONE_PASS_MAX_SLICES ? groups : LOOM_FFN_ONE_PASS_MAX_SLICES;
    int32_t act = fused_act(c, "mm");
    if (groups < 1 || act < 0 || !build_attention(c, f) || f->op != LOOM_OP_INCRE_FLASH_ATTENTION ||
        f->n_src + 2 > LOOM_MAX_SRC)
        return 0;
    loom_incre_attention_linear_attrs a = {.act_precision = act, .groups = (int32_t)groups};
    memcpy(&a.attn, f->attrs, sizeof a.attn);
    if (!a.attn.out_f32) return 0;
    f->op = LOOM_OP_INCRE_ATTENTION_LINEAR;
    f->src[f->n_src++] = fr_var(c, "w");
    f->dst = mm->dst;
    if (!take_residual(c, f, mm->dst)) return 0;
    a.residual = fr_node(c, "residual") >= 0;
    memset(f->attrs, 0, sizeof f->attrs);
    memcpy(f->attrs, &a, sizeof a);
    return 1;
}

/* ------------------------------------------------------------ add_rms_norm */

static int build_add_rms_norm(const fr_ctx *c, fr_fused *f) {
    const loom_node *add = gnode(c, "add"), *norm = gnode(c, "norm");
    if (norm->src[0] != add->dst) return 0;   /* not through a view: same rows */
    const loom_tensor *a = gt(c, add->src[0]), *b = gt(c, add->src[1]);
    if (a->ndim != 2 || b->ndim != 2 || a->stride[1] != 1 || b->stride[1] != 1) return 0;
    loom_add_rms_norm_attrs at = {((const loom_rms_norm_attrs *)(const void *)norm->attrs)->eps};
    f->op = LOOM_OP_ADD_RMS_NORM;
    f->n_src = 3;
    f->src[0] = add->src[0], f->src[1] = add->src[1], f->src[2] = norm->src[1];
    memcpy(f->attrs, &at, sizeof at);
    f->dst = norm->dst;
    f->extra[0] = add->dst;
    f->n_extra = 1;
    return 1;
}

/* ------------------------------------------------------------ ffn */

/* loom_act of an activation node: silu, gelu (erf or tanh form), or a registered user activation op. */
static int act_of(const loom_node *n) {
    if (n->op == LOOM_OP_SILU) return LOOM_ACT_SILU;
    if (n->op == LOOM_OP_GELU) {
        const loom_gelu_attrs *ga = n->has_attrs ? (const loom_gelu_attrs *)(const void *)n->attrs : NULL;
        return ga && ga->approximate ? LOOM_ACT_GELU_TANH : LOOM_ACT_GELU;
    }
    int i = loom_ffn_act_find(loom_op_get(n->op)->name);
    return i >= 0 ? LOOM_FFN_ACT_CUSTOM + i : -1;
}

static int build_ffn(const fr_ctx *c, fr_fused *f) {
    const loom_node *act = gnode(c, "act"), *down = gnode(c, "down");
    const loom_tensor *x = gt(c, fr_var(c, "x"));
    int a = act_of(act);
    int32_t prec = fused_act(c, "gate up down");
    if (a < 0 || prec < 0 || x->ndim != 2 || x->stride[1] != 1 || act->n_src != 1) return 0;
    const loom_tensor *wg = gt(c, fr_var(c, "w_gate"));
    /* auto: from the hardware section's L3 (cpuid unless the rules file sets it) */
    int64_t bn_auto = loom_ffn_block_cols_for(x->shape[0], wg->shape[0], c->hw.l3_bytes);
    loom_ffn_attrs at = {.act = a, .block_n = (int32_t)fr_opt(c, "block_n", bn_auto), .act_precision = prec,
                         .one_pass_rows = (int32_t)fr_opt(c, "one_pass_rows",
                                                          loom_ffn_one_pass_rows_auto(
                                                              wg->dtype, gt(c, fr_var(c, "w_up"))->dtype,
                                                              gt(c, fr_var(c, "w_down"))->dtype, c->hw.threads,
                                                              c->hw.isa)),
                         .row_block = (int32_t)fr_opt(c, "row_block", loom_ffn_row_block_auto(c->hw.isa))};
    /* row_min is a row count, not a block size: its auto is not capped by max_fusion_block_size */
    int64_t row_min = fr_opt(c, "row_min", -1);
    at.row_min = (int32_t)(row_min >= 0 ? row_min : (int64_t)LOOM_FFN_ROW_MIN_PER_THREAD * c->hw.threads);
    at.row_slice = (int32_t)loom_ffn_row_slice(at.row_block, wg->shape[0], c->hw.l3_bytes, c->hw.threads);
    at.one_pass_slices = (int32_t)loom_ffn_one_pass_slices_for(c->hw.threads);
    f->op = LOOM_OP_FFN;
    f->n_src = 4;
    f->src[0] = fr_var(c, "x"), f->src[1] = fr_var(c, "w_gate"), f->src[2] = fr_var(c, "w_up");
    f->src[3] = fr_var(c, "w_down");
    f->dst = down->dst;
    if (!take_residual(c, f, down->dst)) return 0;
    if (fr_node(c, "norm") >= 0) {
        if (!take_norm(c, f, &at.norm_eps)) return 0;
        at.norm = 1;
    }
    memcpy(f->attrs, &at, sizeof at);
    f->n_hidden = 1;
    f->hidden_rows[0] = (int)x->shape[0];
    f->hidden_cols[0] = (int)wg->shape[0];
    return 1;
}

/* ------------------------------------------------------------ moe */

static int build_moe_gating(const fr_ctx *c, fr_fused *f) {
    const loom_node *probs = gnode(c, "probs"), *ids = gnode(c, "ids"), *w = gnode(c, "weights");
    const loom_softmax_attrs *sa = probs->has_attrs ? (const void *)probs->attrs : NULL;
    /* a plain softmax of each row: no scale, mask or causal masking */
    if (probs->n_src != 1 || (sa && ((sa->scale != 0.0f && sa->scale != 1.0f) || sa->causal))) return 0;
    if (gt(c, fr_var(c, "logits"))->ndim != 2) return 0;
    loom_moe_gating_attrs at = {.k = ((const loom_top_k_attrs *)(const void *)ids->attrs)->k,
                                .renorm = w->has_attrs && ((const loom_moe_weights_attrs *)(const void *)w->attrs)->renorm};
    f->op = LOOM_OP_MOE_GATING;
    f->n_src = 1;
    f->src[0] = fr_var(c, "logits");
    memcpy(f->attrs, &at, sizeof at);
    f->dst = w->dst;
    f->extra[0] = ids->dst;
    f->n_extra = 1;
    return 1;
}

static int build_moe_ffn(const fr_ctx *c, fr_fused *f) {
    const loom_node *sum = gnode(c, "sum");
    const loom_tensor *x = gt(c, fr_var(c, "x")), *wg = gt(c, fr_var(c, "w_gate")), *ids = gt(c, fr_var(c, "ids"));
    int32_t prec = fused_act(c, "gate up down");
    if (prec < 0 || x->ndim != 2 || x->stride[1] != 1 || wg->ndim != 3 || ids->ndim != 2) return 0;
    loom_moe_ffn_attrs at = {.block_n = (int32_t)fr_opt(c, "block_n", 0), .act_precision = prec};
    f->op = LOOM_OP_MOE_FFN;
    f->n_src = 6;
    f->src[0] = fr_var(c, "x"), f->src[1] = fr_var(c, "w_gate"), f->src[2] = fr_var(c, "w_up");
    f->src[3] = fr_var(c, "w_down"), f->src[4] = fr_var(c, "ids"), f->src[5] = fr_var(c, "weights");
    f->dst = sum->dst;
    if (!take_residual(c, f, sum->dst)) return 0;
    memcpy(f->attrs, &at, sizeof at);
    /* the phase buffers: x sorted by expert, h, the experts' outputs */
    int rows = (int)(x->shape[0] * ids->shape[1]);
    f->n_hidden = 3;
    f->hidden_rows[0] = f->hidden_rows[1] = f->hidden_rows[2] = rows;
    f->hidden_cols[0] = f->hidden_cols[2] = (int)x->shape[1];
    f->hidden_cols[1] = (int)wg->shape[1];
    return 1;
}

/* ------------------------------------------------------------ roles */

/* Pattern node index of name in r, or -1. */
static int node_index(const fr_rule *r, const char *name) {
    for (int i = 0; i < r->n_nodes; i++)
        if (!strcmp(r->nodes[i].name, name)) return i;
    return -1;
}

/* How pattern input ref reads: "$var" or the node's name. */
static void ref_text(const fr_rule *r, int ref, char *buf, size_t n) {
    if (ref >= FR_VAR_REF) snprintf(buf, n, "$%s", r->vars[ref - FR_VAR_REF]);
    else snprintf(buf, n, "%s", ref >= 0 && ref < r->n_nodes ? r->nodes[ref].name : "?");
}

/* 1 when pattern input ref is what role input want ("$var", a node, "_") names. */
static int ref_is(const fr_rule *r, int ref, const char *want) {
    if (!strcmp(want, "_")) return 1;
    char have[FR_NAME + 1];
    ref_text(r, ref, have, sizeof have);
    return !strcmp(have, want);
}

/* One role entry "node=op(a,b|c)" parsed into its parts (NULL-terminated arrays of
 * pointers into buf). */
typedef struct role {
    char buf[160];
    const char *node, *op;
    const char *in[FR_MAX_IN + 1];
    int n_in, n_required;
} role;

static int parse_role(const char *s, size_t len, role *ro) {
    if (len >= sizeof ro->buf) return -1;
    memcpy(ro->buf, s, len);
    ro->buf[len] = '\0';
    char *eq = strchr(ro->buf, '='), *lp = eq ? strchr(eq, '(') : NULL, *rp = lp ? strchr(lp, ')') : NULL;
    if (!eq || !lp || !rp) return -1;
    *eq = *lp = *rp = '\0';
    ro->node = ro->buf, ro->op = eq + 1;
    ro->n_in = 0, ro->n_required = -1;
    for (char *t = lp + 1; *t && ro->n_in < FR_MAX_IN;) {
        size_t k = strcspn(t, ",|");
        char sep = t[k];
        t[k] = '\0';
        ro->in[ro->n_in++] = t;
        if (sep == '|') ro->n_required = ro->n_in;
        if (!sep) break;
        t += k + 1;
    }
    if (ro->n_required < 0) ro->n_required = ro->n_in;
    return 0;
}

/* "gate = matmul($x, $w_gate)" for messages. */
static void role_text(const role *ro, char *buf, size_t n) {
    int o = snprintf(buf, n, "%s = %s(", ro->node, ro->op);
    for (int i = 0; i < ro->n_in && o > 0 && (size_t)o < n; i++)
        o += snprintf(buf + o, n - (size_t)o, "%s%s%s", i ? ", " : "", i == ro->n_required ? "[" : "", ro->in[i]);
    if (o > 0 && (size_t)o < n) snprintf(buf + o, n - (size_t)o, "%s)", ro->n_required < ro->n_in ? "]" : "");
}

int fr_check_roles(const fr_rule *r, int *bad_node, char *msg, size_t n) {
    const char *s = r->builder->roles;
    while (s && *s) {
        size_t len = strcspn(s, " ");
        role ro;
        if (parse_role(s, len, &ro) != 0) {  /* a bug in the table above */
            snprintf(msg, n, "fused op %s: malformed role '%.*s'", r->builder->name, (int)len, s);
            *bad_node = 0;
            return -1;
        }
        s += len;
        while (*s == ' ') s++;
        int i = node_index(r, ro.node);
        if (i < 0) continue;  /* an optional node (ffn's residual) */
        const fr_pnode *pn = &r->nodes[i];
        char want[160];
        role_text(&ro, want, sizeof want);
        *bad_node = i;
        if (strcmp(ro.op, "*") != 0 && strcmp(loom_op_get((loom_op)pn->op)->name, ro.op) != 0) {
            snprintf(msg, n, "fused op %s takes %s; pattern node '%s' is op %s", r->builder->name, want,
                     pn->name, loom_op_get((loom_op)pn->op)->name);
            return -1;
        }
        if (pn->n_in < ro.n_required || pn->n_in > ro.n_in) {
            snprintf(msg, n, "fused op %s takes %s; pattern node '%s' has %d inputs", r->builder->name, want,
                     pn->name, pn->n_in);
            return -1;
        }
        /* add and mul: the matcher takes the two inputs in either order (a
         * mismatch either way is reported in the order written) */
        int commutes = (!strcmp(ro.op, "add") || !strcmp(ro.op, "mul")) && pn->n_in == 2;
        int swapped = commutes && !(ref_is(r, pn->in[0], ro.in[0]) && ref_is(r, pn->in[1], ro.in[1])) &&
                      ref_is(r, pn->in[0], ro.in[1]) && ref_is(r, pn->in[1], ro.in[0]);
        for (int k = 0; k < pn->n_in; k++) {
            const char *w = ro.in[swapped ? 1 - k : k];
            if (ref_is(r, pn->in[k], w)) continue;
            char have[FR_NAME + 1];
            ref_text(r, pn->in[k], have, sizeof have);
            snprintf(msg, n, "fused op %s takes %s; pattern node '%s' binds %s as input %d where %s belongs",
                     r->builder->name, want, pn->name, have, k + 1, w);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ table */

#define MAX_BUILDERS 24
/* The roles (fusion_internal.h): which matmul's weight each $w is, which node
 * feeds which; a rule that swaps $w_gate and $w_up, or $wk and $wv, matches
 * the graph as well but computes garbage, so it is refused. */
#define QKV_ROLES                                                                                \
    "q=matmul($x,$wq) k=matmul($x,$wk) v=matmul($x,$wv) q_rope=rope(q) k_rope=rope(k) "          \
    "k_cache=kv_append(_,k_rope|$k_scale) v_cache=kv_append(_,v|$v_scale)"
#define QKV_PAGED_ROLES                                                                          \
    "q=matmul($x,$wq) k=matmul($x,$wk) v=matmul($x,$wv) q_rope=rope(q,$positions) "             \
    "k_rope=rope(k,$positions) k_cache=kv_write(_,k_rope,$slots|$k_scale) "                      \
    "v_cache=kv_write(_,v,$slots|$v_scale)"
#define NORM_QKV_ROLES                                                                           \
    "norm=rms_norm($x,$gamma) q=matmul(norm,$wq) k=matmul(norm,$wk) v=matmul(norm,$wv) q_rope=rope(q) " \
    "k_rope=rope(k) k_cache=kv_append(_,k_rope|$k_scale) v_cache=kv_append(_,v|$v_scale)"
#define NORM_QKV_PAGED_ROLES                                                                     \
    "norm=rms_norm($x,$gamma) q=matmul(norm,$wq) k=matmul(norm,$wk) v=matmul(norm,$wv) "         \
    "q_rope=rope(q,$positions) k_rope=rope(k,$positions) k_cache=kv_write(_,k_rope,$slots|$k_scale) " \
    "v_cache=kv_write(_,v,$slots|$v_scale)"
#define NORM_FFN_ROLES                                                                           \
    "norm=rms_norm($x,$gamma) gate=matmul(norm,$w_gate) up=matmul(norm,$w_up) act=*(gate) "      \
    "mul=mul(act,up) down=matmul(mul,$w_down) residual=add(_,down)"
#define LINEAR_ROLES "mm=matmul($x,$w) residual=add(_,mm)"
#define LINEAR_BIAS_ROLES "mm=matmul($x,$w) bias=add_bias(mm,$bias) act=*(bias) residual=add(_,bias)"
#define NORM_LINEAR_ROLES "norm=rms_norm($x,$gamma) mm=matmul(norm,$w) residual=add(_,mm)"
#define ATTN_ROLES "attn=attention($q,$k,$v|$k_scale,$v_scale)"
#define ATTN_LINEAR_ROLES "attn=attention($q,$k,$v) mm=matmul(attn,$w) residual=add(_,mm)"
#define INCRE_ATTN_LINEAR_ROLES "attn=attention($q,$k,$v|$k_scale,$v_scale) mm=matmul(attn,$w) residual=add(_,mm)"
#define ADD_RMS_NORM_ROLES "add=add(_,_) norm=rms_norm(add,_)"
#define FFN_ROLES                                                                                \
    "gate=matmul($x,$w_gate) up=matmul($x,$w_up) act=*(gate) mul=mul(act,up) "                  \
    "down=matmul(mul,$w_down) residual=add(_,down)"
#define MOE_GATING_ROLES "probs=softmax($logits) ids=top_k(probs) weights=moe_weights(probs,ids)"
#define MOE_FFN_ROLES                                                                            \
    "gate=matmul_id($x,$w_gate,$ids) up=matmul_id($x,$w_up,$ids) act=silu(gate) mul=mul(act,up) " \
    "down=matmul_id(mul,$w_down,$ids) sum=moe_sum(down,$weights) residual=add(_,sum)"

static fr_builder builders[MAX_BUILDERS] = {
    {"qkv_rope", "q k v q_rope k_rope k_cache v_cache", "x wq wk wv", "block_heads", build_qkv, QKV_ROLES},
    {"qkv_rope_paged", "q k v q_rope k_rope k_cache v_cache", "x wq wk wv positions slots", "block_heads",
     build_qkv_paged, QKV_PAGED_ROLES},
    {"fused_infer_attention", "attn", "q k v", "decode_max_q_len block_q block_kv inner_precise",
     build_attention, ATTN_ROLES},
    {"flash_attention_score", "attn", "q k v", "block_q block_kv inner_precise", build_attention, ATTN_ROLES},
    {"incre_flash_attention", "attn", "q k v", "block_kv inner_precise", build_attention, ATTN_ROLES},
    {"attention_linear", "attn mm", "q k v w", "decode_max_q_len block_q block_kv block_rows inner_precise",
     build_attention_linear, ATTN_LINEAR_ROLES},
    {"incre_attention_linear", "attn mm", "q k v w", "decode_max_q_len block_kv inner_precise groups",
     build_incre_attention_linear, INCRE_ATTN_LINEAR_ROLES},
    {"add_rms_norm", "add norm", "", "", build_add_rms_norm, ADD_RMS_NORM_ROLES},
    {"ffn", "gate up act mul down", "x w_gate w_up w_down", "block_n one_pass_rows row_block row_min", build_ffn, FFN_ROLES},
    {"norm_qkv_rope", "norm q k v q_rope k_rope k_cache v_cache", "x gamma wq wk wv", "block_heads",
     build_qkv, NORM_QKV_ROLES},
    {"norm_qkv_rope_paged", "norm q k v q_rope k_rope k_cache v_cache", "x gamma wq wk wv positions slots",
     "block_heads", build_qkv_paged, NORM_QKV_PAGED_ROLES},
    {"norm_ffn", "norm gate up act mul down", "x gamma w_gate w_up w_down", "block_n one_pass_rows row_block row_min", build_ffn,
     NORM_FFN_ROLES},
    {"linear", "mm", "x w", "", build_linear, LINEAR_ROLES},
    {"linear_bias", "mm bias", "x w bias", "", build_linear, LINEAR_BIAS_ROLES},
    {"norm_linear", "norm mm", "x gamma w", "", build_linear, NORM_LINEAR_ROLES},
    {"moe_gating_top_k_softmax", "probs ids weights", "logits", "", build_moe_gating, MOE_GATING_ROLES},
    {"moe_ffn", "gate up act mul down sum", "x w_gate w_up w_down ids weights", "block_n", build_moe_ffn,
     MOE_FFN_ROLES},
};
static int n_builders = 17;

const fr_builder *fr_builder_find(const char *name) {
    for (int i = 0; i < n_builders; i++)
        if (!strcmp(builders[i].name, name)) return &builders[i];
    return NULL;
}

void fr_builder_names(char *buf, size_t n) {
    buf[0] = '\0';
    for (int i = 0; i < n_builders; i++) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s%s", i ? ", " : "", builders[i].name);
    }
}

loom_status fr_builder_register(const fr_builder *b) {
    LOOM_RETURN_IF(fr_builder_find(b->name), LOOM_ERR_INVALID_ARG, "fused op '%s' is already registered", b->name);
    LOOM_RETURN_IF(n_builders == MAX_BUILDERS, LOOM_ERR_UNSUPPORTED, "at most %d fused ops", MAX_BUILDERS);
    builders[n_builders++] = *b;
    return LOOM_OK;
}
