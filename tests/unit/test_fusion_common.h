/* A small random Llama built in the test: weights, caches, one graph per call. */
#ifndef LOOM_TEST_FUSION_COMMON_H
#define LOOM_TEST_FUSION_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "graph/exec.h"
#include "graph/fusion.h"
#include "model/llama.h"
#include "ops/quant.h"

typedef struct tmodel {
    loom_llama_config c;
    loom_llama_weights w;
    float *store;       /* all weights */
    float *kc, *vc;     /* [L][ctx][kv_dim] */
    int ctx;
    void *qbuf[7 * 16 + 1]; /* tm_quantize's weights */
    int n_qbuf;
} tmodel;

/* Replaces the first occurrence of `what` in text by `with`. */
static inline char *patched(const char *text, const char *what, const char *with) {
    const char *at = strstr(text, what);
    if (!at) return NULL;
    size_t n = strlen(text) + strlen(with) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(at - text), text, with, at + strlen(what));
    return out;
}

/* text with the first `what1` replaced by `with1` and, when what2 is not
 * NULL, the first `what2` by `with2`, parsed as rules into *out (NULL on
 * failure). LOOM_ERR_INVALID_ARG when a piece to replace is missing; else the
 * parser's status. */
static inline loom_status rules_patched(const char *text, const char *what1, const char *with1, const char *what2,
                                        const char *with2, loom_fusion_rules **out) {
    *out = NULL;
    char *t1 = patched(text, what1, with1), *t2 = t1 && what2 ? patched(t1, what2, with2) : NULL;
    const char *t = what2 ? t2 : t1;
    loom_status st = t ? loom_fusion_rules_parse(t, strlen(t), "patched.yaml", out) : LOOM_ERR_INVALID_ARG;
    free(t1), free(t2);
    return st;
}

static float *tm_take(float **p, size_t n) {
    float *r = *p;
    *p += (n + 15) / 16 * 16;
    return r;
}

static void tm_tensor(loom_tensor *t, float **p, int64_t d0, int64_t d1, loom_rng *r, float scale, float base) {
    int64_t shape[2] = {d0, d1};
    size_t n = (size_t)(d1 > 0 ? d0 * d1 : d0);
    float *d = tm_take(p, n);
    for (size_t i = 0; i < n; i++) d[i] = base + scale * (2.0f * loom_rng_uniform(r) - 1.0f);
    loom_tensor_init(t, LOOM_F32, d1 > 0 ? 2 : 1, shape, d);
}

static void tm_init(tmodel *m, int dim, int heads, int kv_heads, int hidden, int layers, int vocab,
                    int ctx, uint64_t seed) {
    memset(m, 0, sizeof *m);
    loom_llama_config *c = &m->c;
    c->dim = dim, c->hidden_dim = hidden, c->n_layers = layers, c->n_heads = heads;
    c->n_kv_heads = kv_heads, c->vocab_size = vocab, c->seq_len = ctx, c->head_dim = dim / heads;
    c->rope_theta = 10000.0f, c->rms_eps = 1e-5f, c->rope_mode = LOOM_ROPE_INTERLEAVED;
    m->ctx = ctx;
    int kvd = kv_heads * c->head_dim;
    size_t per = (size_t)(2 * dim * dim + 2 * kvd * dim + 3 * hidden * dim + 2 * dim + 64 * 9);
    size_t total = (size_t)layers * per + 2 * (size_t)vocab * dim + dim + 256;
    m->store = calloc(total, sizeof(float));
    m->kc = calloc((size_t)layers * ctx * kvd, sizeof(float));
    m->vc = calloc((size_t)layers * ctx * kvd, sizeof(float));
    m->w.layers = calloc((size_t)layers, sizeof *m->w.layers);
    loom_rng r;
    loom_rng_init(&r, seed, 7);
    float *p = m->store, s = 1.0f / sqrtf((float)dim);
    tm_tensor(&m->w.tok_embd, &p, vocab, dim, &r, 1.0f, 0.0f);
    for (int l = 0; l < layers; l++) {
        loom_llama_layer *L = &m->w.layers[l];
        tm_tensor(&L->attn_norm, &p, dim, 0, &r, 0.2f, 1.0f);
        tm_tensor(&L->wq, &p, dim, dim, &r, s, 0);
        tm_tensor(&L->wk, &p, kvd, dim, &r, s, 0);
        tm_tensor(&L->wv, &p, kvd, dim, &r, s, 0);
        tm_tensor(&L->wo, &p, dim, dim, &r, s, 0);
        tm_tensor(&L->ffn_norm, &p, dim, 0, &r, 0.2f, 1.0f);
        tm_tensor(&L->w1, &p, hidden, dim, &r, s, 0);
        tm_tensor(&L->w2, &p, dim, hidden, &r, 1.0f / sqrtf((float)hidden), 0);
        tm_tensor(&L->w3, &p, hidden, dim, &r, s, 0);
    }
    tm_tensor(&m->w.out_norm, &p, dim, 0, &r, 0.2f, 1.0f);
    tm_tensor(&m->w.output, &p, vocab, dim, &r, s, 0);
}

/* Quantizes every projection weight (and the classifier) of m to wt (dims
 * multiples of 32); the buffers are m->qbuf[..]. */
static inline void tm_quantize_weights(tmodel *m, loom_dtype wt) {
    for (int l = 0; l <= m->c.n_layers; l++) {
        loom_llama_layer *L = l < m->c.n_layers ? &m->w.layers[l] : NULL;
        loom_tensor *ws[7] = {NULL};
        if (L) ws[0] = &L->wq, ws[1] = &L->wk, ws[2] = &L->wv, ws[3] = &L->wo, ws[4] = &L->w1, ws[5] = &L->w2,
               ws[6] = &L->w3;
        else ws[0] = &m->w.output;
        for (int i = 0; i < 7 && ws[i]; i++) {
            loom_tensor *t = ws[i];
            int64_t rows = t->shape[0], k = t->shape[1];
            size_t rb = loom_dtype_row_bytes(wt, k);
            char *q = malloc((size_t)rows * rb);
            for (int64_t r = 0; r < rows; r++) loom_quantize_row(wt, (const float *)t->data + r * k, q + (size_t)r * rb, k);
            loom_tensor_init(t, wt, 2, (const int64_t[2]){rows, k}, q);
            m->qbuf[m->n_qbuf++] = q;
        }
    }
}

static void tm_free(tmodel *m) {
    for (int i = 0; i < m->n_qbuf; i++) free(m->qbuf[i]);
    free(m->store), free(m->kc), free(m->vc), free(m->w.layers);
}

/* Builds the graph of n tokens at pos into g; returns the logits id. */
static int tm_build(tmodel *m, loom_graph *g, const int32_t *ids, int n, int pos, int all_logits) {
    loom_graph_reset(g);
    const loom_llama_config *c = &m->c;
    int kvd = c->n_kv_heads * c->head_dim;
    loom_tensor t;
    int64_t s1[1] = {n};
    loom_tensor_init(&t, LOOM_I32, 1, s1, (void *)ids);
    int idt = loom_graph_external(g, &t);
    int kc[16], vc[16];
    int64_t cs[3] = {m->ctx, c->n_kv_heads, c->head_dim};
    for (int l = 0; l < c->n_layers; l++) {
        loom_tensor_init(&t, LOOM_F32, 3, cs, m->kc + (size_t)l * m->ctx * kvd);
        kc[l] = loom_graph_external(g, &t);
        loom_tensor_init(&t, LOOM_F32, 3, cs, m->vc + (size_t)l * m->ctx * kvd);
        vc[l] = loom_graph_external(g, &t);
    }
    return loom_llama_build(g, c, &m->w, idt, kc, vc, NULL, NULL, n, pos, all_logits);
}

/* Kernels, and nodes of op, in layer l of an executed graph. */
static inline int tm_layer_kernels(const loom_graph *g, int l) {
    int k = 0;
    for (int n = 0; n < g->n_nodes; n++)
        if (g->nodes[n].layer == l) {
            loom_kernel_args a;
            loom_graph_node_args(g, n, &a);
            k += loom_op_phases(loom_op_get(g->nodes[n].op), a.src, a.n_src, a.attrs, 1, 0);
        }
    return k;
}

static inline int tm_layer_ops(const loom_graph *g, int l, loom_op op) {
    int k = 0;
    for (int n = 0; n < g->n_nodes; n++) k += g->nodes[n].layer == l && g->nodes[n].op == op;
    return k;
}

/* Nodes of op in the whole graph. */
static inline int tm_ops(const loom_graph *g, loom_op op) {
    int k = 0;
    for (int n = 0; n < g->n_nodes; n++) k += g->nodes[n].op == op;
    return k;
}

/* Bytes of each of the K and V caches of m; tm_clear_kv zeroes both. */
static size_t tm_kv_bytes(const tmodel *m) {
    return (size_t)m->c.n_layers * m->ctx * m->c.n_kv_heads * m->c.head_dim * sizeof(float);
}
static void tm_clear_kv(tmodel *m) {
    memset(m->kc, 0, tm_kv_bytes(m));
    memset(m->vc, 0, tm_kv_bytes(m));
}

#endif
