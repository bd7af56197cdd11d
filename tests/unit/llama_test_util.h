/* Helpers of the Llama format tests: a safetensors writer, a Hugging Face
 * folder written from llama2.c weights, and a forward pass giving all logits. */
#ifndef LOOM_TEST_LLAMA_UTIL_H
#define LOOM_TEST_LLAMA_UTIL_H

#include <string.h>

#include "check.h"
#include "graph/exec.h"
#include "model/llama_st.h"

typedef struct st_out { char hdr[1 << 16]; size_t hn; unsigned char *data; size_t dn, dcap; } st_out;

static inline void st_add(st_out *o, const char *name, const char *dt, int ndim, const int64_t *shape, const void *p,
                   size_t n) {
    if (o->dn + n > o->dcap) {
        o->dcap = (o->dn + n) * 2;
        o->data = realloc(o->data, o->dcap);
    }
    memcpy(o->data + o->dn, p, n);
    o->hn += (size_t)snprintf(o->hdr + o->hn, sizeof o->hdr - o->hn, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                              o->hn > 1 ? "," : "", name, dt);
    for (int d = 0; d < ndim; d++)
        o->hn += (size_t)snprintf(o->hdr + o->hn, sizeof o->hdr - o->hn, "%s%lld", d ? "," : "", (long long)shape[d]);
    o->hn += (size_t)snprintf(o->hdr + o->hn, sizeof o->hdr - o->hn, "],\"data_offsets\":[%zu,%zu]}", o->dn, o->dn + n);
    o->dn += n;
}

static inline void st_write(st_out *o, const char *path) {
    o->hn += (size_t)snprintf(o->hdr + o->hn, sizeof o->hdr - o->hn, "}");
    while (o->hn % 8) o->hdr[o->hn++] = ' ';
    FILE *f = fopen(path, "wb");
    uint64_t n = o->hn;
    fwrite(&n, 8, 1, f);
    fwrite(o->hdr, 1, o->hn, f);
    fwrite(o->data, 1, o->dn, f);
    fclose(f);
}

/* Adds t (f32) as name, rows permuted to the half layout when heads > 0, as dt. */
static inline void add_t(st_out *o, const char *name, const loom_tensor *t, int heads, int hd, int bf16, int skip) {
    if (skip) return;
    int64_t n = loom_tensor_nelem(t), cols = t->ndim == 2 ? t->shape[1] : n;
    float *tmp = malloc(sizeof(float) * (size_t)n);
    if (heads) loom_rope_permute_rows(tmp, t->data, heads, hd, cols, 4, 1);
    else memcpy(tmp, t->data, sizeof(float) * (size_t)n);
    if (bf16) {
        uint16_t *b = malloc(2 * (size_t)n);
        for (int64_t i = 0; i < n; i++) b[i] = loom_f32_to_bf16(tmp[i]);
        st_add(o, name, "BF16", t->ndim, t->shape, b, 2 * (size_t)n);
        free(b);
    } else {
        st_add(o, name, "F32", t->ndim, t->shape, tmp, 4 * (size_t)n);
    }
    free(tmp);
}

/* Writes dir/config.json and dir/model.safetensors from a llama2.c model.
 * skip: a tensor name to leave out; bad_shape: write q_proj of layer 0 transposed-shaped. */
static inline void write_hf(const char *dir, const loom_llama_config *c, const loom_llama_weights *w, int bf16,
                     const char *skip, const char *arch) {
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"architectures\":[\"%s\"],\"model_type\":\"%s\",\"hidden_size\":%d,\"intermediate_size\":%d,"
               "\"num_hidden_layers\":%d,\"num_attention_heads\":%d,\"num_key_value_heads\":%d,"
               "\"vocab_size\":%d,\"max_position_embeddings\":%d,\"rms_norm_eps\":%g,\"rope_theta\":%g,"
               "\"tie_word_embeddings\":true,\"hidden_act\":\"silu\"}",
            arch, strcmp(arch, "LlamaForCausalLM") == 0 ? "llama" : "gpt2", c->dim, c->hidden_dim, c->n_layers,
            c->n_heads, c->n_kv_heads, c->vocab_size, c->seq_len, (double)c->rms_eps, (double)c->rope_theta);
    fclose(f);
    st_out *o = calloc(1, sizeof *o);
    o->hn = (size_t)snprintf(o->hdr, sizeof o->hdr, "{");
    add_t(o, "model.embed_tokens.weight", &w->tok_embd, 0, 0, bf16, skip && strstr(skip, "embed"));
    add_t(o, "model.norm.weight", &w->out_norm, 0, 0, bf16, 0);
    for (int l = 0; l < c->n_layers; l++) {
        const loom_llama_layer *y = &w->layers[l];
        char n[128];
#define ADD(x, t, h) (snprintf(n, sizeof n, "model.layers.%d.%s", l, x), \
                      add_t(o, n, &y->t, h, c->head_dim, bf16, skip && strcmp(skip, n) == 0))
        ADD("input_layernorm.weight", attn_norm, 0);
        ADD("self_attn.q_proj.weight", wq, c->n_heads);
        ADD("self_attn.k_proj.weight", wk, c->n_kv_heads);
        ADD("self_attn.v_proj.weight", wv, 0);
        ADD("self_attn.o_proj.weight", wo, 0);
        ADD("post_attention_layernorm.weight", ffn_norm, 0);
        ADD("mlp.gate_proj.weight", w1, 0);
        ADD("mlp.down_proj.weight", w2, 0);
        ADD("mlp.up_proj.weight", w3, 0);
#undef ADD
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_write(o, path);
    free(o->data);
    free(o);
}

/* Logits of all n tokens at positions 0..n-1. */
static inline void forward(const loom_llama_config *c, const loom_llama_weights *w, const int32_t *tok, int n,
                    float *logits) {
    size_t per = (size_t)n * (size_t)c->n_kv_heads * (size_t)c->head_dim;
    float *kc = calloc(per * (size_t)c->n_layers, sizeof(float)), *vc = calloc(per * (size_t)c->n_layers, sizeof(float));
    int *kid = malloc(sizeof(int) * (size_t)c->n_layers), *vid = malloc(sizeof(int) * (size_t)c->n_layers);
    loom_graph *g;
    loom_executor *e;
    loom_graph_init(&g);
    loom_executor_init(&e, 1, LOOM_MODE_STEP_BY_STEP);
    loom_tensor t;
    int64_t s1 = n, cs[3] = {n, c->n_kv_heads, c->head_dim};
    loom_tensor_init(&t, LOOM_I32, 1, &s1, (void *)tok);
    int ids = loom_graph_external(g, &t);
    for (int l = 0; l < c->n_layers; l++) {
        loom_tensor_init(&t, LOOM_F32, 3, cs, kc + l * per);
        kid[l] = loom_graph_external(g, &t);
        loom_tensor_init(&t, LOOM_F32, 3, cs, vc + l * per);
        vid[l] = loom_graph_external(g, &t);
    }
    int out = loom_llama_build(g, c, w, ids, kid, vid, NULL, NULL, n, 0, 1);
    CHECK_MSG(loom_graph_status(g) == LOOM_OK, "%s", loom_last_error());
    CHECK_MSG(loom_executor_run(e, g) == LOOM_OK, "%s", loom_last_error());
    memcpy(logits, loom_graph_tensor(g, out)->data, sizeof(float) * (size_t)n * (size_t)c->vocab_size);
    loom_executor_free(e);
    loom_graph_free(g);
    free(kc);
    free(vc);
    free(kid);
    free(vid);
}

#endif
