/* Internal view of a loaded model, for tools that inspect its programs (profile, bench). */
#ifndef LOOM_MODEL_MODEL_H
#define LOOM_MODEL_MODEL_H

#include "graph/program.h"
#include "model/llama.h"

/* The format of a model path: a folder, a .safetensors file or a shard index
 * (.json) is Hugging Face; a file starting with "GGUF" is GGUF; anything else
 * is taken as a llama2.c checkpoint (whose loader validates it). */
loom_model_format loom_model_detect_format(const char *path);

typedef struct loom_safetensors loom_safetensors;

/* What the program builder of a model needs (one per kind of program). */
typedef struct loom_model_trace {
    struct loom_model *m;
    int all_logits;               /* logits of every row, not only the last */
} loom_model_trace;

struct loom_model {
    loom_model_format  format;
    loom_gguf         *gguf;      /* GGUF models: the open file the weights point into */
    loom_safetensors  *st;        /* safetensors models: the same */
    float             *st_owned;  /* safetensors models: converted norm weights */
    loom_llama_config  cfg;
    loom_llama_weights w;
    loom_mapped_file   file;
    loom_model_params  params;
    struct loom_packed_weights *packed; /* the quantized matrices packed once for the GEMM, or NULL */
    int                invariant_engines; /* batch-invariant engines over the model: exec->invariant while > 0 */
    int                n_ctx;
    void              *k_cache;   /* [n_layers, n_ctx, n_kv_heads, head_dim] of params.kv_dtype */
    void              *v_cache;   /* same */
    size_t             cache_bytes;  /* of each of k_cache, v_cache */
    float             *k_scale;   /* i8 caches: [n_layers, n_ctx, n_kv_heads], a scale per cache row */
    float             *v_scale;   /* same; both NULL for float caches */
    size_t             scale_bytes;  /* of each of k_scale, v_scale */
    int32_t           *ids;       /* [prefill_rows] token ids of the step (the programs' input) */
    loom_executor     *exec;
    /* forward programs (graph/program.h), compiled at load; prefill_all at first use */
    loom_program      *decode;      /* one row (NULL when the context holds one position) */
    loom_program      *prefill;     /* chunks of up to prefill_rows rows, logits of the last */
    loom_program      *prefill_all; /* the same, logits of every row */
    int                prefill_rows;
    loom_model_trace   trace[2];    /* builder contexts: last-row and all-row logits */
    int               *kc, *vc;   /* per-layer cache tensor ids while building */
    int               *ksc, *vsc; /* per-layer scale store ids (i8 caches) */
};

/* The program that ran last, with its node stats filled for that step
 * (loom_program_account); NULL before the first forward pass. */
loom_graph *loom_model_last_graph(loom_model *m);
/* Per-node wall times in every program of the model (profiles). */
void loom_model_set_timing(loom_model *m, int on);

#endif
