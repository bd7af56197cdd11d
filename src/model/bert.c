/* BERT weights from safetensors + config.json: names, shapes, f32 vectors. */
#include "model/bert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "fused/attention.h"
#include "model/hf_config.h"

typedef struct loader {
    const loom_safetensors *st;
    const char *prefix;   /* "" or "bert." */
    float *next;          /* next free f32 slot of w->owned */
} loader;

static loom_status get(loader *L, const char *name, loom_tensor *t) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", L->prefix, name);
    return loom_safetensors_get(L->st, full, t);
}

static loom_status check_shape(const loom_tensor *t, const char *name, int ndim, int64_t d0, int64_t d1) {
    int ok = t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1);
    if (ok) return LOOM_OK;
    char found[96];
    int k = snprintf(found, sizeof found, "[");
    for (int d = 0; d < t->ndim && k < 80; d++) k += snprintf(found + k, sizeof found - (size_t)k, "%s%lld",
                                                               d ? ", " : "", (long long)t->shape[d]);
    snprintf(found + k, sizeof found - (size_t)k, "]");
    if (ndim == 1)
        return loom_set_error(LOOM_ERR_SHAPE, "bert: tensor '%s' has shape %s: expected [%lld]", name,
                              found, (long long)d0);
    return loom_set_error(LOOM_ERR_SHAPE, "bert: tensor '%s' has shape %s: expected [%lld, %lld]", name,
                          found, (long long)d0, (long long)d1);
}

/* A matrix [d0, d1] (f32/f16/bf16 view into the file). */
static loom_status matrix(loader *L, const char *name, int64_t d0, int64_t d1, loom_tensor *t) {
    LOOM_TRY(get(L, name, t));
    return check_shape(t, name, 2, d0, d1);
}

/* A vector [d0], as f32 (copied into the owned buffer). */
static loom_status vector(loader *L, const char *name, int64_t d0, loom_tensor *t) {
    loom_tensor src;
    LOOM_TRY(get(L, name, &src));
    LOOM_TRY(check_shape(&src, name, 1, d0, 1));
    float *dst = L->next;
    L->next += d0;
    for (int64_t i = 0; i < d0; i++) {
        const void *p = src.data;
        dst[i] = src.dtype == LOOM_F32    ? ((const float *)p)[i]
                 : src.dtype == LOOM_F16 ? loom_f16_to_f32(((const uint16_t *)p)[i])
                                         : loom_bf16_to_f32(((const uint16_t *)p)[i]);
    }
    LOOM_TRY(loom_tensor_init(t, LOOM_F32, 1, &d0, dst));
    loom_tensor_set_name(t, "%.63s", name);
    return LOOM_OK;
}

static loom_status config_from_hf(const loom_hf_config *h, const char *path, loom_bert_config *c) {
    int bert = strcmp(h->model_type, "bert") == 0 || strncmp(h->architecture, "Bert", 4) == 0;
    LOOM_RETURN_IF(!bert, LOOM_ERR_UNSUPPORTED, "bert: '%s' describes architecture '%s' (model_type '%s'), "
                   "not a BERT encoder", path, h->architecture[0] ? h->architecture : "?",
                   h->model_type[0] ? h->model_type : "?");
    memset(c, 0, sizeof *c);
    c->dim = h->hidden_size;
    c->hidden_dim = h->intermediate_size;
    c->n_layers = h->num_hidden_layers;
    c->n_heads = h->num_attention_heads;
    c->head_dim = h->hidden_size / h->num_attention_heads;
    c->vocab_size = h->vocab_size;
    c->max_pos = h->max_position_embeddings;
    c->type_vocab = h->type_vocab_size;
    c->ln_eps = h->layer_norm_eps;
    LOOM_RETURN_IF(c->head_dim * c->n_heads != c->dim, LOOM_ERR_FORMAT,
                   "bert: '%s': hidden_size %d is not a multiple of num_attention_heads %d", path, c->dim,
                   c->n_heads);
    LOOM_RETURN_IF(c->head_dim > 256, LOOM_ERR_UNSUPPORTED, "bert: '%s': head size %d (at most 256)", path,
                   c->head_dim);
    LOOM_RETURN_IF(c->type_vocab < 1, LOOM_ERR_FORMAT, "bert: '%s': type_vocab_size must be >= 1", path);
    if (strcmp(h->hidden_act, "gelu") == 0) c->gelu_tanh = 0;
    else if (strcmp(h->hidden_act, "gelu_new") == 0 || strcmp(h->hidden_act, "gelu_pytorch_tanh") == 0)
        c->gelu_tanh = 1;
    else
        return loom_set_error(LOOM_ERR_UNSUPPORTED, "bert: '%s': hidden_act '%s' is not supported (gelu, "
                              "gelu_new, gelu_pytorch_tanh are)", path, h->hidden_act);
    return LOOM_OK;
}

loom_status loom_bert_load_weights(const char *config_path, const loom_safetensors *st,
                                   loom_bert_config *c, loom_bert_weights *w) {
    LOOM_RETURN_IF(!config_path || !st || !c || !w, LOOM_ERR_INVALID_ARG, "bert: NULL argument");
    memset(w, 0, sizeof *w);
    loom_hf_config h;
    LOOM_TRY(loom_hf_config_load(config_path, &h));
    LOOM_TRY(config_from_hf(&h, config_path, c));
    loader L = {st, "", NULL};
    if (loom_safetensors_find(st, "embeddings.word_embeddings.weight") < 0 &&
        loom_safetensors_find(st, "bert.embeddings.word_embeddings.weight") >= 0)
        L.prefix = "bert.";
    int64_t D = c->dim, H = c->hidden_dim;
    size_t n_vec = (size_t)(2 * D + c->n_layers * (9 * D + H));
    w->owned = malloc(sizeof(float) * n_vec);
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->owned || !w->layers) {
        loom_bert_weights_free(w);
        return loom_set_error(LOOM_ERR_NOMEM, "bert: out of memory");
    }
    L.next = w->owned;
    loom_status s = matrix(&L, "embeddings.word_embeddings.weight", c->vocab_size, D, &w->tok_embd);
    if (s == LOOM_OK) s = matrix(&L, "embeddings.position_embeddings.weight", c->max_pos, D, &w->pos_embd);
    if (s == LOOM_OK) s = matrix(&L, "embeddings.token_type_embeddings.weight", c->type_vocab, D, &w->type_embd);
    if (s == LOOM_OK) s = vector(&L, "embeddings.LayerNorm.weight", D, &w->emb_ln_g);
    if (s == LOOM_OK) s = vector(&L, "embeddings.LayerNorm.bias", D, &w->emb_ln_b);
    for (int l = 0; l < c->n_layers && s == LOOM_OK; l++) {
        loom_bert_layer *y = &w->layers[l];
        char n[160];
#define P(suffix) (snprintf(n, sizeof n, "encoder.layer.%d.%s", l, suffix), n)
        s = matrix(&L, P("attention.self.query.weight"), D, D, &y->wq);
        if (s == LOOM_OK) s = vector(&L, P("attention.self.query.bias"), D, &y->bq);
        if (s == LOOM_OK) s = matrix(&L, P("attention.self.key.weight"), D, D, &y->wk);
        if (s == LOOM_OK) s = vector(&L, P("attention.self.key.bias"), D, &y->bk);
        if (s == LOOM_OK) s = matrix(&L, P("attention.self.value.weight"), D, D, &y->wv);
        if (s == LOOM_OK) s = vector(&L, P("attention.self.value.bias"), D, &y->bv);
        if (s == LOOM_OK) s = matrix(&L, P("attention.output.dense.weight"), D, D, &y->wo);
        if (s == LOOM_OK) s = vector(&L, P("attention.output.dense.bias"), D, &y->bo);
        if (s == LOOM_OK) s = vector(&L, P("attention.output.LayerNorm.weight"), D, &y->ln1_g);
        if (s == LOOM_OK) s = vector(&L, P("attention.output.LayerNorm.bias"), D, &y->ln1_b);
        if (s == LOOM_OK) s = matrix(&L, P("intermediate.dense.weight"), H, D, &y->w_up);
        if (s == LOOM_OK) s = vector(&L, P("intermediate.dense.bias"), H, &y->b_up);
        if (s == LOOM_OK) s = matrix(&L, P("output.dense.weight"), D, H, &y->w_down);
        if (s == LOOM_OK) s = vector(&L, P("output.dense.bias"), D, &y->b_down);
        if (s == LOOM_OK) s = vector(&L, P("output.LayerNorm.weight"), D, &y->ln2_g);
        if (s == LOOM_OK) s = vector(&L, P("output.LayerNorm.bias"), D, &y->ln2_b);
#undef P
    }
    if (s != LOOM_OK) loom_bert_weights_free(w);
    return s;
}

void loom_bert_weights_free(loom_bert_weights *w) {
    if (!w) return;
    free(w->layers);
    free(w->owned);
    w->layers = NULL;
    w->owned = NULL;
}

int loom_bert_build(loom_graph *g, const loom_bert_config *c, const loom_bert_weights *w, int ids,
                    int pos, int types, int cu, int64_t T) {
    loom_layer_norm_attrs ln = {c->ln_eps};
    loom_gelu_attrs ga = {c->gelu_tanh};
    loom_flash_attention_attrs fa = LOOM_FLASH_ATTENTION_ATTRS_DEFAULT;  /* 1/sqrt(D), no band */
    fa.input_layout = LOOM_ATTN_TND;
    int64_t tnd[3] = {T, c->n_heads, c->head_dim}, flat[2] = {T, c->dim};
#define EXT(t) loom_graph_external(g, &(t))
    loom_graph_set_layer(g, LOOM_LAYER_PRE);
    int x = loom_g_add(g, loom_g_get_rows(g, EXT(w->tok_embd), ids, "tok_embd"),
                       loom_g_get_rows(g, EXT(w->pos_embd), pos, "pos_embd"), "emb_tok_pos");
    x = loom_g_add(g, x, loom_g_get_rows(g, EXT(w->type_embd), types, "type_embd"), "emb");
    int src[4] = {x, EXT(w->emb_ln_g), EXT(w->emb_ln_b)};
    x = loom_graph_op(g, LOOM_OP_LAYER_NORM, src, 3, &ln, "emb_norm");
    for (int l = 0; l < c->n_layers; l++) {
        const loom_bert_layer *y = &w->layers[l];
        loom_graph_set_layer(g, l);
        int s2[2];
#define LINEAR(out, in, W, b, nm)                                                  \
    s2[0] = loom_g_matmul(g, in, EXT(W), nm);                                       \
    s2[1] = EXT(b);                                                                 \
    out = loom_graph_op(g, LOOM_OP_ADD_BIAS, s2, 2, NULL, "%s_bias.%d", nm, l)
        int q, k, v, o, h;
        LINEAR(q, x, y->wq, y->bq, "q");
        LINEAR(k, x, y->wk, y->bk, "k");
        LINEAR(v, x, y->wv, y->bv, "v");
        int at[4] = {loom_graph_reshape(g, q, 3, tnd), loom_graph_reshape(g, k, 3, tnd),
                     loom_graph_reshape(g, v, 3, tnd), cu};
        int a = loom_graph_op(g, LOOM_OP_FLASH_ATTENTION, at, 4, &fa, "attn.%d", l);
        LINEAR(o, loom_graph_reshape(g, a, 2, flat), y->wo, y->bo, "attn_out");
        src[0] = loom_g_add(g, o, x, "attn_res");
        src[1] = EXT(y->ln1_g);
        src[2] = EXT(y->ln1_b);
        x = loom_graph_op(g, LOOM_OP_LAYER_NORM, src, 3, &ln, "attn_norm.%d", l);
        LINEAR(h, x, y->w_up, y->b_up, "ffn_up");
        h = loom_graph_op(g, LOOM_OP_GELU, &h, 1, &ga, "ffn_gelu.%d", l);
        LINEAR(o, h, y->w_down, y->b_down, "ffn_down");
        src[0] = loom_g_add(g, o, x, "ffn_res");
        src[1] = EXT(y->ln2_g);
        src[2] = EXT(y->ln2_b);
        x = loom_graph_op(g, LOOM_OP_LAYER_NORM, src, 3, &ln, "ffn_norm.%d", l);
#undef LINEAR
    }
#undef EXT
    loom_graph_set_layer(g, LOOM_LAYER_POST);
    if (x >= 0) loom_graph_mark_output(g, x);
    return x;
}
