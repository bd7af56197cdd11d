/* Internal view of a loaded model, for tools that inspect its graph (profile). */
#ifndef LOOM_MODEL_MODEL_H
#define LOOM_MODEL_MODEL_H

#include "model/llama.h"

struct loom_model {
    loom_llama_config  cfg;
    loom_llama_weights w;
    loom_mapped_file   file;
    loom_model_params  params;
    int                n_ctx;
    float             *k_cache;   /* [n_layers, n_ctx, n_kv_heads, head_dim] */
    float             *v_cache;   /* same */
    int32_t           *ids;       /* [n_ctx] token ids of the current call */
    loom_graph        *graph;     /* the graph of the last forward pass */
    loom_executor     *exec;
    int               *kc, *vc;   /* per-layer cache tensor ids while building */
};

/* Builds (but does not run) the graph for n tokens at pos; returns the logits id. */
loom_status loom_model_build(loom_model *m, const int32_t *tokens, int n, int pos, int *logits_id);

#endif
