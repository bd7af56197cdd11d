/*
 * The Llama forward pass as a graph of primitive ops. Straight-line, one layer
 * at a time, in the order of the reference implementations; fusion is a pass
 * over this graph, never a change here. A model builds it once per forward
 * program (graph/program.h), not per token.
 */
#include <math.h>
#include <stdio.h>

#include "model/llama.h"

/* "L<layer>.<s>" in nm (LOOM_NAME_MAX bytes). */
static const char *layer_name(char *nm, int layer, const char *s) {
    snprintf(nm, LOOM_NAME_MAX, "L%d.%s", layer, s);
    return nm;
}

/* The feed-forward block of layer l after the attention: x + down(silu(gate(n)) * up(n)),
 * n = rms_norm(x); Gemma: gelu (tanh form) for silu, and the down projection's
 * output normalised (ffn_post_norm) before the residual add. */
/* A mixture of experts instead (Mixtral, Qwen3-MoE): the router's softmax, the
 * top-k experts of each row and their weights, each row's k expert FFNs
 * (matmul_id: row by row with its expert's matrices), and their sum weighted
 * by rank, then the residual. The fusion rules make it two kernels' worth of
 * ops: moe_gating_top_k_softmax and moe_ffn (docs/fusion.md). */
static int moe_block(loom_graph *g, const loom_llama_config *c, const loom_llama_layer *L, int l, int x, int xn,
                     int pos) {
    char nm[LOOM_NAME_MAX];
#define NAME(s) layer_name(nm, l, s)
    int logits = loom_g_matmul(g, xn, loom_graph_external(g, &L->ffn_gate_inp), NAME("ffn_router"));
    const loom_softmax_attrs sa = {.pos_offset = pos}; /* not causal: the position is only carried along */
    int probs = loom_graph_op(g, LOOM_OP_SOFTMAX, &logits, 1, &sa, "L%d.ffn_router_probs", l);
    const loom_top_k_attrs ka = {.k = c->n_experts_used};
    int ids = loom_graph_op(g, LOOM_OP_TOP_K, &probs, 1, &ka, "L%d.ffn_experts", l);
    const loom_moe_weights_attrs wa = {.renorm = c->moe_renorm};
    const int pw[2] = {probs, ids};
    int w = loom_graph_op(g, LOOM_OP_MOE_WEIGHTS, pw, 2, &wa, "L%d.ffn_expert_weights", l);
    const int gs[3] = {xn, loom_graph_external(g, &L->ffn_gate_exps), ids};
    int gate = loom_graph_op(g, LOOM_OP_MATMUL_ID, gs, 3, NULL, "L%d.ffn_gate_exps", l);
    const int us[3] = {xn, loom_graph_external(g, &L->ffn_up_exps), ids};
    int up = loom_graph_op(g, LOOM_OP_MATMUL_ID, us, 3, NULL, "L%d.ffn_up_exps", l);
    int act = loom_g_silu(g, gate, NAME("ffn_silu"));
    int h = loom_g_mul(g, act, up, NAME("ffn_swiglu"));
    const int ds[3] = {h, loom_graph_external(g, &L->ffn_down_exps), ids};
    int d = loom_graph_op(g, LOOM_OP_MATMUL_ID, ds, 3, NULL, "L%d.ffn_down_exps", l);
    const int ss[2] = {d, w};
    int sum = loom_graph_op(g, LOOM_OP_MOE_SUM, ss, 2, NULL, "L%d.ffn_moe_sum", l);
    return loom_g_add(g, x, sum, NAME("ffn_residual"));
#undef NAME
}

static int ffn_block(loom_graph *g, const loom_llama_config *c, const loom_llama_layer *L, int l, int x, int pos) {
    char nm[LOOM_NAME_MAX];
#define NAME(s) layer_name(nm, l, s) /* one per statement: the names share nm */
    int xn = loom_g_rms_norm(g, x, loom_graph_external(g, &L->ffn_norm), c->rms_eps, NAME("ffn_norm"));
    if (c->n_experts > 0) return moe_block(g, c, L, l, x, xn, pos);
    int gate = loom_g_matmul(g, xn, loom_graph_external(g, &L->w1), NAME("ffn_gate"));
    int up = loom_g_matmul(g, xn, loom_graph_external(g, &L->w3), NAME("ffn_up"));
    int act;
    if (loom_llama_gemma(c)) {
        loom_gelu_attrs ga = {.approximate = 1};
        act = loom_graph_op(g, LOOM_OP_GELU, &gate, 1, &ga, "L%d.ffn_gelu", l);
    } else {
        act = loom_g_silu(g, gate, NAME("ffn_silu"));
    }
    int h = loom_g_mul(g, act, up, NAME("ffn_swiglu"));
    int d = loom_g_matmul(g, h, loom_graph_external(g, &L->w2), NAME("ffn_down"));
    if (loom_llama_gemma(c))
        d = loom_g_rms_norm(g, d, loom_graph_external(g, &L->ffn_post_norm), c->rms_eps, NAME("ffn_post_norm"));
    return loom_g_add(g, x, d, NAME("ffn_residual"));
#undef NAME
}

/* The embeddings of the rows ids names; Gemma multiplies them by sqrt(dim),
 * rounded to f32 as transformers' f32 model and llama.cpp round it. */
static int embed(loom_graph *g, const loom_llama_config *c, const loom_llama_weights *w, int ids) {
    int x = loom_g_get_rows(g, loom_graph_external(g, &w->tok_embd), ids, "embd");
    if (!loom_llama_gemma(c)) return x;
    loom_scale_attrs sa = {.scale = sqrtf((float)c->dim)};
    return loom_graph_op(g, LOOM_OP_SCALE, &x, 1, &sa, "embd_scale");
}

/* The RoPE of layer l: Gemma 3's sliding layers take their own base, unscaled. */
static loom_rope_attrs layer_rope(const loom_llama_config *c, int l, int pos) {
    loom_rope_attrs r = {.mode = c->rope_mode, .n_rot = c->n_rot ? c->n_rot : c->head_dim, .theta = c->rope_theta,
                         .freq_scale = c->rope_freq_scale > 0 ? c->rope_freq_scale : 1.0f, .pos_offset = pos};
    if (c->rope_theta_swa > 0 && loom_llama_layer_window(c, l) > 0) r.theta = c->rope_theta_swa, r.freq_scale = 1.0f;
    return r;
}

/* The attention's output of layer l added to the residual x (Gemma: normalised first). */
static int attn_residual(loom_graph *g, const loom_llama_config *c, const loom_llama_layer *L, int l, int x, int o) {
    char nm[LOOM_NAME_MAX];
    if (loom_llama_gemma(c))
        o = loom_g_rms_norm(g, o, loom_graph_external(g, &L->attn_post_norm), c->rms_eps,
                            layer_name(nm, l, "attn_post_norm"));
    return loom_g_add(g, x, o, layer_name(nm, l, "attn_residual"));
}

/* Q, K and V of layer l over the n rows of xn, as heads [n, H, HD] and
 * [n, HKV, HD], before RoPE: the projections, plus their biases (Qwen2) and
 * the per-head RMSNorm of Q and K (Qwen3). Without either the graph is the
 * plain Llama one, matmul -> rope, which the qkv_rope fusion rules match;
 * with them those rules do not match and the projections, RoPE and cache
 * writes run as primitive kernels (docs/models.md). */
static void qkv_heads(loom_graph *g, const loom_llama_config *c, const loom_llama_layer *L, int l, int xn,
                      int n, int out[3]) {
    char nm[LOOM_NAME_MAX];
    const loom_tensor *w[3] = {&L->wq, &L->wk, &L->wv}, *b[3] = {&L->bq, &L->bk, &L->bv};
    const loom_tensor *norm[2] = {&L->q_norm, &L->k_norm};
    static const char *names[3][3] = {{"q", "q_bias", "q_norm"}, {"k", "k_bias", "k_norm"},
                                      {"v", "v_bias", ""}};
    for (int i = 0; i < 3; i++) {
        const int64_t heads[3] = {n, i == 0 ? c->n_heads : c->n_kv_heads, c->head_dim};
        int y = loom_g_matmul(g, xn, loom_graph_external(g, w[i]), layer_name(nm, l, names[i][0]));
        if (c->qkv_bias) {
            const int src[2] = {y, loom_graph_external(g, b[i])};
            y = loom_graph_op(g, LOOM_OP_ADD_BIAS, src, 2, NULL, "L%d.%s", l, names[i][1]);
        }
        y = loom_graph_reshape(g, y, 3, heads);
        if (c->qk_norm && i < 2)
            y = loom_g_rms_norm(g, y, loom_graph_external(g, norm[i]), c->rms_eps, layer_name(nm, l, names[i][2]));
        out[i] = y;
    }
}

/* The final norm and the classifier over the rows of x. */
static int head(loom_graph *g, const loom_llama_config *c, const loom_llama_weights *w, int x) {
    loom_graph_set_layer(g, LOOM_LAYER_POST);
    int xn = loom_g_rms_norm(g, x, loom_graph_external(g, &w->out_norm), c->rms_eps, "output_norm");
    int logits = loom_g_matmul(g, xn, loom_graph_external(g, &w->output), "logits");
    if (c->final_softcap > 0) {
        loom_softcap_attrs sa = {.cap = c->final_softcap};
        logits = loom_graph_op(g, LOOM_OP_SOFTCAP, &logits, 1, &sa, "logits_softcap");
    }
    loom_graph_mark_output(g, logits);
    return logits;
}

int loom_llama_build(loom_graph *g, const loom_llama_config *c, const loom_llama_weights *w,
                     int ids, const int *kc, const int *vc, const int *ksc, const int *vsc, int n,
                     int pos, int all_logits) {
    const int H = c->n_heads, HKV = c->n_kv_heads, HD = c->head_dim;
    char nm[LOOM_NAME_MAX];

    loom_graph_set_layer(g, LOOM_LAYER_PRE);
    int x = embed(g, c, w, ids);

    const int64_t q4[4] = {1, n, H, HD}, kv4[4] = {1, pos + n, HKV, HD}, flat[2] = {n, (int64_t)H * HD};
    const int64_t sc3[3] = {1, pos + n, HKV}; /* i8 caches: the scales of rows [0, pos + n) */

    for (int l = 0; l < c->n_layers; l++) {
        const loom_llama_layer *L = &w->layers[l];
        loom_graph_set_layer(g, l);
#define NAME(s) layer_name(nm, l, s) /* one per statement: the names share nm */
        int xn = loom_g_rms_norm(g, x, loom_graph_external(g, &L->attn_norm), c->rms_eps, NAME("attn_norm"));
        int qkv[3];
        qkv_heads(g, c, L, l, xn, n, qkv);
        loom_rope_attrs rope = layer_rope(c, l, pos);
        loom_attention_attrs att = {.scale = c->attn_scale, .causal = 1, .q_pos_offset = pos,
                                    .window = loom_llama_layer_window(c, l), .softcap = c->attn_softcap};
        int q = loom_g_rope(g, qkv[0], &rope, NAME("q_rope"));
        int k = loom_g_rope(g, qkv[1], &rope, NAME("k_rope"));
        int v = qkv[2];
        q = loom_graph_reshape(g, q, 4, q4);
        /* i8 caches: each append writes its rows' scales too, and attention reads them */
        int kst = ksc ? ksc[l] : -1, vst = vsc ? vsc[l] : -1, kscale = -1, vscale = -1;
        int ks = loom_g_kv_append_i8(g, kc[l], k, kst, pos, NAME("k_cache"));
        int vs = loom_g_kv_append_i8(g, vc[l], v, vst, pos, NAME("v_cache"));
        if (ksc) {
            kscale = loom_graph_reshape(g, loom_graph_view_rows(g, kst, 0, pos + n), 3, sc3);
            vscale = loom_graph_reshape(g, loom_graph_view_rows(g, vst, 0, pos + n), 3, sc3);
        }
        int a = loom_g_attention_i8(g, q, loom_graph_reshape(g, ks, 4, kv4), loom_graph_reshape(g, vs, 4, kv4),
                                    kscale, vscale, -1, &att, NAME("attn"));
        int o = loom_g_matmul(g, loom_graph_reshape(g, a, 2, flat), loom_graph_external(g, &L->wo),
                              NAME("attn_out"));
        x = attn_residual(g, c, L, l, x, o);
#undef NAME
        x = ffn_block(g, c, L, l, x, pos);
    }
    if (!all_logits) x = loom_graph_view_rows(g, x, n - 1, 1);
    return head(g, c, w, x);
}

int loom_llama_build_paged(loom_graph *g, const loom_llama_config *c, const loom_llama_weights *w,
                           const loom_llama_paged_io *io, int n, int n_out) {
    const int H = c->n_heads, HKV = c->n_kv_heads, HD = c->head_dim;
    const int64_t flat[2] = {n, (int64_t)H * HD};
    const int64_t paged[4] = {io->n_blocks, io->block_size, HKV, HD}, paged_sc[3] = {io->n_blocks, io->block_size, HKV};
    char nm[LOOM_NAME_MAX];
    loom_graph_set_layer(g, LOOM_LAYER_PRE);
    int x = embed(g, c, w, io->ids);
    for (int l = 0; l < c->n_layers; l++) {
        const loom_llama_layer *L = &w->layers[l];
        loom_graph_set_layer(g, l);
#define NAME(s) layer_name(nm, l, s) /* one per statement: the names share nm */
        int xn = loom_g_rms_norm(g, x, loom_graph_external(g, &L->attn_norm), c->rms_eps, NAME("attn_norm"));
        int qkv[3];
        qkv_heads(g, c, L, l, xn, n, qkv);
        loom_rope_attrs rope = layer_rope(c, l, 0);
        loom_paged_attention_attrs att = {.scale = c->attn_scale, .max_seqs = io->max_seqs, .max_kv = io->max_kv,
                                          .window = loom_llama_layer_window(c, l), .softcap = c->attn_softcap};
        int q = loom_g_rope_at(g, qkv[0], io->positions, &rope, NAME("q_rope"));
        int k = loom_g_rope_at(g, qkv[1], io->positions, &rope, NAME("k_rope"));
        int v = qkv[2];
        int i8 = io->k_scale != NULL;
        int kc = loom_g_kv_write(g, io->k_cache[l], k, io->slots, i8 ? io->k_scale[l] : -1, NAME("k_cache"));
        int vc = loom_g_kv_write(g, io->v_cache[l], v, io->slots, i8 ? io->v_scale[l] : -1, NAME("v_cache"));
        int src[5] = {q, loom_graph_reshape(g, kc, 4, paged), loom_graph_reshape(g, vc, 4, paged), -1, -1};
        if (i8) {
            src[3] = loom_graph_reshape(g, io->k_scale[l], 3, paged_sc);
            src[4] = loom_graph_reshape(g, io->v_scale[l], 3, paged_sc);
        }
        int a = loom_graph_op(g, LOOM_OP_PAGED_ATTENTION, src, i8 ? 5 : 3, &att, "L%d.attn", l);
        int o = loom_g_matmul(g, loom_graph_reshape(g, a, 2, flat), loom_graph_external(g, &L->wo), NAME("attn_out"));
        x = attn_residual(g, c, L, l, x, o);
#undef NAME
        x = ffn_block(g, c, L, l, x, 0);
    }
    (void)n_out; /* the out_rows tensor has n_out rows */
    return head(g, c, w, loom_g_get_rows(g, x, io->out_rows, "out_rows"));
}
