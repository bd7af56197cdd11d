/* Internal view of a loaded model, for tools that inspect its graph (profile). */
#ifndef LOOM_MODEL_MODEL_H
#define LOOM_MODEL_MODEL_H

#include "model/llama.h"

typedef enum { LOOM_MODEL_LLAMA2C = 0, LOOM_MODEL_GGUF, LOOM_MODEL_SAFETENSORS } loom_model_format;

/* The format of a model path: a folder, a .safetensors file or a shard index
 * (.json) is Hugging Face; a file starting with "GGUF" is GGUF; anything else
 * is taken as a llama2.c checkpoint (whose loader validates it). */
loom_model_format loom_model_detect_format(const char *path);

typedef struct loom_safetensors loom_safetensors;

struct loom_model {
    loom_model_format  format;
    loom_gguf         *gguf;      /* GGUF models: the open file the weights point into */
    loom_safetensors  *st;        /* safetensors models: the same */
    float             *st_owned;  /* safetensors models: converted norm weights */
    loom_llama_config  cfg;
    loom_llama_weights w;
    loom_mapped_file   file;
    loom_model_params  params;
    int                n_ctx;
    void              *k_cache;   /* [n_layers, n_ctx, n_kv_heads, head_dim] of params.kv_dtype */
    void              *v_cache;   /* same */
    size_t             cache_bytes;  /* of each of k_cache, v_cache */
    float             *k_scale;   /* i8 caches: [n_layers, n_ctx, n_kv_heads], a scale per cache row */
    float             *v_scale;   /* same; both NULL for float caches */
    size_t             scale_bytes;  /* of each of k_scale, v_scale */
    int32_t           *ids;       /* [n_ctx] token ids of the current call */
    loom_graph        *graph;     /* the graph of the last forward pass */
    loom_executor     *exec;
    int               *kc, *vc;   /* per-layer cache tensor ids while building */
    int               *ksc, *vsc; /* per-layer scale store ids (i8 caches) */
};

/* Builds (but does not run) the graph for n tokens at pos; returns the logits id. */
loom_status loom_model_build(loom_model *m, const int32_t *tokens, int n, int pos, int *logits_id);

/* The same, with all_logits: logits of every token ([n, vocab]) instead of the last. */
loom_status loom_model_build_ex(loom_model *m, const int32_t *tokens, int n, int pos, int all_logits,
                                int *logits_id);

/* Like loom_model_forward, writing the logits of all n tokens to logits[n * vocab]. */
loom_status loom_model_forward_all(loom_model *m, const int32_t *tokens, int n, int pos, float *logits);

#endif
