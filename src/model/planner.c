/* The analytic planner: data-less graphs of named configs, costed per node. */
#include "model/planner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/bert.h"
#if defined(LOOM_HAVE_FUSION)
#include "graph/fusion.h"
#endif

int loom_plan_have_fusion(void) {
#if defined(LOOM_HAVE_FUSION)
    return 1;
#else
    return 0;
#endif
}

static int valid_wtype(loom_dtype t) {
    return t == LOOM_F32 || t == LOOM_F16 || t == LOOM_BF16 || t == LOOM_Q8_0 || t == LOOM_Q4_0 ||
           t == LOOM_Q4_1;
}

static loom_status tensor2(loom_tensor *t, loom_dtype dt, int64_t rows, int64_t cols,
                           const char *name) {
    const int64_t shape[2] = {rows, cols};
    LOOM_TRY(loom_tensor_init(t, dt, 2, shape, NULL));
    snprintf(t->name, sizeof t->name, "%s", name);
    return LOOM_OK;
}

/* Experts [n_experts, rows, cols]. */
static loom_status tensor3(loom_tensor *t, loom_dtype dt, int64_t e, int64_t rows, int64_t cols, const char *name) {
    const int64_t shape[3] = {e, rows, cols};
    LOOM_TRY(loom_tensor_init(t, dt, 3, shape, NULL));
    snprintf(t->name, sizeof t->name, "%s", name);
    return LOOM_OK;
}

static loom_status tensor1(loom_tensor *t, int64_t n, const char *name) {
    LOOM_TRY(loom_tensor_init(t, LOOM_F32, 1, &n, NULL));
    snprintf(t->name, sizeof t->name, "%s", name);
    return LOOM_OK;
}

/* Weight descriptors (no data) in the dtype wt; norms stay f32. */
static loom_status make_weights(const loom_llama_config *c, loom_dtype wt, loom_llama_weights *w) {
    memset(w, 0, sizeof *w);
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    LOOM_RETURN_IF(!w->layers, LOOM_ERR_NOMEM, "plan: out of memory");
    const int64_t D = c->dim;
    LOOM_TRY(tensor2(&w->tok_embd, wt, c->vocab_size, D, "tok_embd"));
    LOOM_TRY(tensor1(&w->out_norm, D, "output_norm"));
    LOOM_TRY(tensor2(&w->output, wt, c->vocab_size, D, "output"));
    for (int l = 0; l < c->n_layers; l++)
        for (int i = 0; i < LOOM_LLAMA_LAYER_TENSORS; i++) {
            const loom_llama_layer_tensor *lt = &loom_llama_layer_tensors[i];
            if (!loom_llama_layer_has(c, lt)) continue;
            loom_tensor *t = loom_llama_layer_field(&w->layers[l], lt);
            int64_t rows = loom_llama_dim_size(c, lt->rows);
            int64_t cols = loom_llama_dim_size(c, lt->cols);
            LOOM_TRY(lt->norm      ? tensor1(t, rows, lt->gguf)
                     : lt->experts ? tensor3(t, wt, c->n_experts, rows, cols, lt->gguf)
                                   : tensor2(t, wt, rows, cols, lt->gguf));
        }
    for (int l = 0; l < c->n_layers; l++) LOOM_TRY(loom_llama_layer_views(c, &w->layers[l]));
    return LOOM_OK;
}

static loom_status build_llama(loom_graph *g, const loom_llama_config *c, const loom_plan_params *p,
                               loom_plan_info *info) {
    loom_llama_weights w;
    loom_status s = make_weights(c, p->wtype, &w);
    const int i8 = p->kv_dtype == LOOM_I8, L = c->n_layers;
    int *kc = calloc((size_t)L * 4, sizeof *kc); /* K, V caches, then (i8) their scale stores */
    if (s == LOOM_OK && !kc) s = loom_set_error(LOOM_ERR_NOMEM, "plan: out of memory");
    if (s == LOOM_OK) {
        const int n = info->n_tokens, pos = info->pos;
        /* the caches as the engine makes them: of the KV dtype, and for int8 with a store of f32
         * scales, one per cache row (model.c) */
        const int64_t ids_shape[1] = {n};
        const int64_t cshape[3] = {(int64_t)pos + n, c->n_kv_heads, c->head_dim};
        const int64_t sshape[2] = {(int64_t)pos + n, c->n_kv_heads};
        loom_tensor ids, cache, scale;
        s = loom_tensor_init(&ids, LOOM_I32, 1, ids_shape, NULL);
        if (s == LOOM_OK) s = loom_tensor_init(&cache, p->kv_dtype, 3, cshape, NULL);
        if (s == LOOM_OK) s = loom_tensor_init(&scale, LOOM_F32, 2, sshape, NULL);
        if (s == LOOM_OK) {
            snprintf(ids.name, sizeof ids.name, "ids");
            int ids_id = loom_graph_external(g, &ids);
            for (int l = 0; l < L; l++) {
                snprintf(cache.name, sizeof cache.name, "kv_cache.k.%d", l);
                kc[l] = loom_graph_external(g, &cache);
                snprintf(cache.name, sizeof cache.name, "kv_cache.v.%d", l);
                kc[L + l] = loom_graph_external(g, &cache);
                if (!i8) continue;
                snprintf(scale.name, sizeof scale.name, "kv_cache.k_scale.%d", l);
                kc[2 * L + l] = loom_graph_external(g, &scale);
                snprintf(scale.name, sizeof scale.name, "kv_cache.v_scale.%d", l);
                kc[3 * L + l] = loom_graph_external(g, &scale);
            }
            loom_llama_build(g, c, &w, ids_id, kc, kc + L, i8 ? kc + 2 * L : NULL, i8 ? kc + 3 * L : NULL, n, pos,
                             p->decode);
            s = loom_graph_status(g);
        }
    }
    free(kc);
    free(w.layers);
    return s;
}

/* BERT encoder (model/bert.h): B sequences of S tokens, packed (TND). */
static loom_status build_bert(loom_graph *g, const loom_llama_config *nc, const loom_plan_params *p) {
    loom_bert_config c = {.dim = nc->dim, .hidden_dim = nc->hidden_dim, .n_layers = nc->n_layers,
                          .n_heads = nc->n_heads, .head_dim = nc->head_dim,
                          .vocab_size = nc->vocab_size, .max_pos = nc->seq_len, .type_vocab = 2,
                          .ln_eps = nc->rms_eps};
    LOOM_RETURN_IF(p->seq > c.max_pos, LOOM_ERR_INVALID_ARG,
                   "--seq %d exceeds the model's %d positions", p->seq, c.max_pos);
    loom_bert_weights w;
    memset(&w, 0, sizeof w);
    w.layers = calloc((size_t)c.n_layers, sizeof *w.layers);
    LOOM_RETURN_IF(!w.layers, LOOM_ERR_NOMEM, "plan: out of memory");
    const int64_t D = c.dim, F = c.hidden_dim;
    loom_dtype wt = p->wtype;
    loom_status s = LOOM_OK;
#define T2(t, r, k, nm) if (s == LOOM_OK) s = tensor2(&(t), wt, r, k, nm)
#define T1(t, n, nm) if (s == LOOM_OK) s = tensor1(&(t), n, nm)
    T2(w.tok_embd, c.vocab_size, D, "tok_embd");
    T2(w.pos_embd, c.max_pos, D, "pos_embd");
    T2(w.type_embd, c.type_vocab, D, "type_embd");
    T1(w.emb_ln_g, D, "emb_ln_g");
    T1(w.emb_ln_b, D, "emb_ln_b");
    for (int l = 0; l < c.n_layers; l++) {
        loom_bert_layer *y = &w.layers[l];
        T2(y->wq, D, D, "wq"); T2(y->wk, D, D, "wk"); T2(y->wv, D, D, "wv"); T2(y->wo, D, D, "wo");
        T1(y->bq, D, "bq"); T1(y->bk, D, "bk"); T1(y->bv, D, "bv"); T1(y->bo, D, "bo");
        T1(y->ln1_g, D, "ln1_g"); T1(y->ln1_b, D, "ln1_b");
        T1(y->ln2_g, D, "ln2_g"); T1(y->ln2_b, D, "ln2_b");
        T2(y->w_up, F, D, "w_up"); T1(y->b_up, F, "b_up");
        T2(y->w_down, D, F, "w_down"); T1(y->b_down, D, "b_down");
    }
#undef T1
#undef T2
    if (s == LOOM_OK) {
        /* B sequences of S tokens packed (TND); no data: equal lengths */
        const int64_t n = (int64_t)p->batch * p->seq, nseq = p->batch;
        loom_tensor ids, cu;
        s = loom_tensor_init(&ids, LOOM_I32, 1, &n, NULL);
        if (s == LOOM_OK) s = loom_tensor_init(&cu, LOOM_I32, 1, &nseq, NULL);
        if (s == LOOM_OK) {
            int id = loom_graph_external(g, &ids), pos = loom_graph_external(g, &ids);
            int types = loom_graph_external(g, &ids), m = loom_graph_external(g, &cu);
            loom_bert_build(g, &c, &w, id, pos, types, m, n);
            s = loom_graph_status(g);
        }
    }
    free(w.layers);
    return s;
}

loom_status loom_plan_build(loom_graph *g, const loom_plan_params *p, const loom_hw_profile *hw,
                            loom_plan_info *info) {
    LOOM_RETURN_IF(!g || !p || !info, LOOM_ERR_INVALID_ARG, "plan: NULL argument");
    memset(info, 0, sizeof *info);
    loom_named_config custom;
    const loom_named_config *nc = &custom;
    if (p->custom) {
        LOOM_TRY(loom_llama_config_check(p->custom, "plan"));
        custom = (loom_named_config){.name = "custom", .arch = LOOM_ARCH_LLAMA, .source = "custom",
                                     .cfg = *p->custom};
    } else if (p->named) {
        nc = p->named;
        if (nc->arch == LOOM_ARCH_LLAMA) LOOM_TRY(loom_llama_config_check(&nc->cfg, nc->name));
    } else {
        nc = loom_named_config_find(p->config);
        if (!nc) return LOOM_ERR_INVALID_ARG;
    }
    LOOM_RETURN_IF(nc->arch == LOOM_ARCH_BERT && p->decode, LOOM_ERR_INVALID_ARG,
                   "BERT is an encoder: it has no decode phase");
    LOOM_RETURN_IF(p->batch < 1 || p->batch > 4096, LOOM_ERR_INVALID_ARG,
                   "plan: --batch %d out of range 1..4096", p->batch);
    LOOM_RETURN_IF(p->seq < 1 || p->seq > (1 << 20), LOOM_ERR_INVALID_ARG,
                   "plan: --seq %d out of range 1..%d", p->seq, 1 << 20);
    LOOM_RETURN_IF((int64_t)p->batch * p->seq > (1 << 24), LOOM_ERR_INVALID_ARG,
                   "plan: batch x seq = %lld tokens is more than %d",
                   (long long)p->batch * p->seq, 1 << 24);
    LOOM_RETURN_IF(p->kv_dtype != LOOM_F32 && p->kv_dtype != LOOM_F16 && p->kv_dtype != LOOM_BF16 &&
                       p->kv_dtype != LOOM_I8,
                   LOOM_ERR_INVALID_ARG, "plan: KV cache dtype %s: expected f32, f16, bf16 or int8",
                   loom_dtype_name(p->kv_dtype));
    LOOM_RETURN_IF(!valid_wtype(p->wtype), LOOM_ERR_INVALID_ARG,
                   "plan: weight dtype %s: expected f32, f16, bf16, q8_0, q4_0 or q4_1",
                   loom_dtype_name(p->wtype));
    LOOM_RETURN_IF(p->act_dtype != LOOM_F32 && p->act_dtype != LOOM_F16 && p->act_dtype != LOOM_BF16,
                   LOOM_ERR_INVALID_ARG, "plan: activation dtype %s: expected f32, f16 or bf16",
                   loom_dtype_name(p->act_dtype));
#if !defined(LOOM_HAVE_FUSION)
    LOOM_RETURN_IF(p->fused, LOOM_ERR_UNSUPPORTED,
                   "plan: fused mode needs the fusion engine, which this build does not have");
#endif
    info->config = p->custom ? NULL : nc;
    info->n_layers = nc->cfg.n_layers;
    info->decode = p->decode;
    info->act_dtype = p->act_dtype;
    info->pos = p->decode ? p->seq : 0;
    info->n_tokens = p->decode ? p->batch : p->batch * p->seq;
    /* the Llama graph is one flat sequence (batch fixed up in costing); BERT's is batched */
    info->flat_batch = nc->arch == LOOM_ARCH_LLAMA ? p->batch : 1;
    loom_graph_reset(g);
    if (nc->arch == LOOM_ARCH_BERT) LOOM_TRY(build_bert(g, &nc->cfg, p));
    else LOOM_TRY(build_llama(g, &nc->cfg, p, info));
#if defined(LOOM_HAVE_FUSION)
    if (p->fused) {
        loom_fusion_rules *r = NULL;
        LOOM_TRY(loom_fusion_rules_load(p->rules_path, &r));
        loom_fusion_report rep;
        memset(&rep, 0, sizeof rep);
        loom_status s = p->preset ? loom_fusion_rules_preset(r, p->preset) : LOOM_OK;
        if (s == LOOM_OK) s = loom_fusion_apply(g, r, &rep);
        loom_fusion_rules_free(r);
        LOOM_TRY(s);
        info->fusion_applied = 1;
        for (int i = 0; i < rep.n_rules && i < LOOM_FUSION_MAX_RULES; i++)
            info->rules_fired += rep.rules[i].fired;
    }
#endif
    LOOM_TRY(loom_graph_plan(g));
    for (int n = 0; n < g->n_nodes; n++) {
        loom_plan_node_cost c;
        loom_plan_node(g, n, info, hw, &c);
        loom_node *node = &g->nodes[n];
        const loom_op_info *op = loom_op_get(node->op);
        node->stats.kernel = op->name;
        loom_kernel_args ka;
        loom_graph_node_args(g, n, &ka); /* launches at these shapes, one thread, not batch-invariant */
        node->stats.kernels = loom_op_phases(op, ka.src, ka.n_src, ka.attrs, 1, 0);
        node->stats.flops = c.flops;
        node->stats.bytes_read = c.bytes_read;
        node->stats.bytes_written = c.bytes_written;
        node->stats.time_ns = c.seconds * 1e9;
        if (c.bytes_read + c.bytes_written <= 0) info->uncosted++;
    }
    return LOOM_OK;
}

/* ------------------------------------------------------------ costing */

/* The descriptor the cost function sees: B sequences instead of one flat one. */
static void fix_tensor(const loom_graph *g, int id, const loom_plan_info *info, int batch, int post,
                       loom_tensor *t) {
    *t = g->tensors[id].t;
    const int64_t n = info->n_tokens, pos = info->pos;
    /* [1, S, H, D] (q, k, v, the caches' views) and [1, S, H_kv] (the views of an int8 cache's
     * scale stores, build_llama's kv_cache.*_scale.*) */
    int r0 = loom_graph_storage(g, id);
    int scales = t->ndim == 3 && r0 >= 0 && strstr(g->tensors[r0].t.name, "_scale.") &&
                 !strncmp(g->tensors[r0].t.name, "kv_cache.", 9);
    if (batch > 1 && (t->ndim == 4 || scales) && t->shape[0] == 1) {
        if (t->shape[1] == n) {
            t->shape[0] = batch;
            t->shape[1] = n / batch;
        } else if (t->shape[1] == pos + n) {
            t->shape[0] = batch;
            t->shape[1] = pos + n / batch;
        }
    }
    /* the prefill head sees the last token of every sequence */
    if (batch > 1 && post && !info->decode && t->ndim == 2 && t->shape[0] == 1) t->shape[0] = batch;
    /* 16-bit activations: every f32 tensor a node produces (not the weights,
     * caches or other inputs the caller owns) at act_dtype */
    int r = loom_graph_storage(g, id);
    if (info->act_dtype != LOOM_F32 && t->dtype == LOOM_F32 && r >= 0 && g->tensors[r].kind != LOOM_TK_EXTERNAL)
        t->dtype = info->act_dtype;
    int64_t st = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        t->stride[d] = st;
        st *= t->shape[d];
    }
}

static loom_hw_prec prec_of(loom_dtype t) {
    switch (t) {
    case LOOM_F16: return LOOM_HW_F16;
    case LOOM_BF16: return LOOM_HW_BF16;
    case LOOM_F32: return LOOM_HW_F32;
    default: return LOOM_HW_INT8;   /* i8 caches and the q* block formats */
    }
}

/* Ops whose work is matrix products (run on the matrix engine / FMA units). */
static int is_matrix_op(const loom_op_info *op) {
    static const char *const names[] = {"matmul", "attention", "flash_attention_score",
                                        "incre_flash_attention", "qkv_rope", "ffn", "matmul_id"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(op->name, names[i]) == 0) return 1;
    return op->decomposition && (strstr(op->decomposition, "matmul") ||
                                 strstr(op->decomposition, "attention"));
}

void loom_plan_node(const loom_graph *g, int n, const loom_plan_info *info, const loom_hw_profile *hw,
                    loom_plan_node_cost *out) {
    memset(out, 0, sizeof *out);
    const int batch = info->flat_batch > 0 ? info->flat_batch : 1;
    const loom_node *node = &g->nodes[n];
    const loom_op_info *op = loom_op_get(node->op);
    int post = node->layer == LOOM_LAYER_POST;
    loom_tensor src[LOOM_MAX_SRC], dst;
    const loom_tensor *sp[LOOM_MAX_SRC] = {0};
    loom_cost c = {0};
    /* the graph's caches are the engine's (an int8 one with its scale stores, inputs of the nodes
     * that write and read it), so every op costs them itself */
    for (int i = 0; i < node->n_src; i++) {
        fix_tensor(g, node->src[i], info, batch, post, &src[i]);
        sp[i] = &src[i];
    }
    fix_tensor(g, node->dst, info, batch, post, &dst);
    if (op->cost) op->cost(sp, node->n_src, &dst, node->has_attrs ? node->attrs : NULL, &c);
    out->flops = c.flops;
    out->bytes_read = c.bytes_read;
    out->bytes_written = c.bytes_written;
    out->matrix = is_matrix_op(op);
    /* precision: the weight (2-D external, 3-D experts) or cache operand, else f32 */
    loom_dtype dt = LOOM_F32;
    for (int i = 0; i < node->n_src; i++) {
        const loom_gtensor *gt = &g->tensors[loom_graph_storage(g, node->src[i])];
        loom_dtype d = gt->t.dtype;
        if (gt->kind == LOOM_TK_EXTERNAL && d != LOOM_I32 && d != LOOM_F32 && (gt->t.ndim == 2 || gt->t.ndim == 3)) {
            dt = d;
            break;
        }
    }
    out->prec = prec_of(dt);
    if (hw) {
        out->seconds = loom_hw_time(hw, out->matrix, out->prec, c.flops, c.bytes_read + c.bytes_written);
        double peak_t = loom_hw_time(hw, out->matrix, out->prec, c.flops, 0.0);
        out->compute_bound = peak_t >= out->seconds && c.flops > 0;
    }
}
