/* The Llama architecture: configuration, weights (views into a mapped file),
 * KV cache and the graph of one forward pass. */
#ifndef LOOM_MODEL_LLAMA_H
#define LOOM_MODEL_LLAMA_H

#include "graph/exec.h"
#include "graph/graph.h"
#include "model/gguf.h"
#include "model/mapped_file.h"

/* The families that share the Llama forward pass, told apart by what they add
 * to the attention's inputs or how their weights are stored. The GGUF
 * architecture name (general.architecture, the metadata prefix) is
 * loom_llama_family_name's. */
typedef enum {
    LOOM_FAMILY_LLAMA,  /* "llama": Llama 2/3, SmolLM2, TinyLlama, Mistral (sliding_window) */
    LOOM_FAMILY_QWEN2,  /* "qwen2": Qwen2, Qwen2.5: a bias on Q, K and V */
    LOOM_FAMILY_QWEN3,  /* "qwen3": Qwen3 dense: per-head RMSNorm on Q and K before RoPE */
    LOOM_FAMILY_PHI3,   /* "phi3": Phi-3: Q, K, V in one matrix, gate and up in another */
    LOOM_FAMILY_GEMMA2, /* "gemma2": Gemma 2 (loom_llama_gemma), soft-capped scores and logits */
    LOOM_FAMILY_GEMMA3, /* "gemma3": Gemma 3 text (loom_llama_gemma), Q/K norms as Qwen3 */
    LOOM_FAMILY_QWEN3MOE, /* "qwen3moe": Qwen3-MoE: Qwen3's attention, a mixture of experts per layer
                             (Mixtral is "llama" with n_experts) */
    LOOM_FAMILY_COUNT
} loom_llama_family;

/* "llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "qwen3moe" ("?" out of range). */
const char *loom_llama_family_name(loom_llama_family f);

typedef struct loom_llama_config {
    loom_llama_family family;
    int   dim;          /* model width */
    int   hidden_dim;   /* FFN width */
    int   n_layers;
    int   n_heads;      /* query heads */
    int   n_kv_heads;   /* key/value heads (GQA when < n_heads) */
    int   vocab_size;
    int   seq_len;      /* maximum context the model was trained for */
    int   head_dim;     /* per head; dim / n_heads unless the model says otherwise (Qwen3) */
    float rope_theta;
    float rms_eps;
    loom_rope_mode rope_mode;
    int   n_rot;        /* rotated dims per head; 0 = head_dim */
    float rope_freq_scale;  /* linear RoPE scaling: positions times this; 0 = 1 */
    int   shared_classifier;  /* output projection is the token embedding */
    int   qkv_bias;     /* Q, K and V projections add a bias (Qwen2) */
    int   qk_norm;      /* RMSNorm (eps rms_eps) of each Q and K head before RoPE (Qwen3) */
    int   sliding_window; /* > 0: every layer's queries see their last sliding_window keys,
                             themselves included (Mistral, Phi-3); 0: all earlier keys */
    int   merged;       /* the weights hold Q/K/V as one matrix (wqkv) and gate/up as one (w13),
                           and wq, wk, wv, w1, w3 are row views into them (Phi-3) */
    int   n_experts;    /* > 0: every layer's FFN is a mixture of n_experts SwiGLU experts of width
                           hidden_dim (Mixtral, Qwen3-MoE); 0: one dense FFN */
    int   n_experts_used; /* experts per token (top-k of the router's softmax) */
    int   moe_renorm;   /* the top-k weights are divided by their sum (Mixtral; Qwen3-MoE's norm_topk_prob) */
    int   hf_block_sparse_moe; /* Hugging Face names under block_sparse_moe. (Mixtral), else mlp. */
    /* Gemma 2/3 (loom_llama_gemma) */
    float attn_scale;   /* q.k multiplier; 0: 1/sqrt(head_dim) (Gemma: query_pre_attn_scalar^-0.5) */
    float attn_softcap; /* > 0: each attention score s becomes cap * tanh(s / cap) (Gemma 2) */
    float final_softcap;/* > 0: the logits likewise (Gemma 2) */
    int   swa_pattern;  /* with sliding_window: 0 every layer slides; n >= 1: layer l slides when
                           l % n < n - 1 (Gemma 2: 2, Gemma 3: 6; 1: none), the others see every key
                           (llama.cpp's attention.sliding_window_pattern) */
    float rope_theta_swa; /* > 0: the sliding layers' RoPE base, unscaled (Gemma 3's local base);
                             0: the same RoPE as the other layers */
} loom_llama_config;

/* Gemma 2 and 3: embeddings times sqrt(dim), GeGLU (gelu, tanh form) instead of
 * SwiGLU, and an RMSNorm of the attention's and the FFN's outputs before their
 * residual adds. Every Gemma norm multiplies by 1 + w: loom keeps 1 + w in the
 * norm weights (the Hugging Face loader adds the 1, as llama.cpp's converter
 * does when it writes a GGUF). */
static inline int loom_llama_gemma(const loom_llama_config *c) {
    return c->family == LOOM_FAMILY_GEMMA2 || c->family == LOOM_FAMILY_GEMMA3;
}

/* The sliding window of layer l: c->sliding_window where the layer slides
 * (swa_pattern), else 0 (every earlier key). */
static inline int loom_llama_layer_window(const loom_llama_config *c, int l) {
    if (c->sliding_window <= 0) return 0;
    if (c->swa_pattern <= 0) return c->sliding_window;
    return l % c->swa_pattern < c->swa_pattern - 1 ? c->sliding_window : 0;
}

typedef struct loom_llama_layer {
    loom_tensor attn_norm;  /* [dim] */
    loom_tensor wq;         /* [n_heads*head_dim, dim] */
    loom_tensor wk;         /* [n_kv_heads*head_dim, dim] */
    loom_tensor wv;         /* [n_kv_heads*head_dim, dim] */
    loom_tensor bq, bk, bv; /* qkv_bias: [n_heads*head_dim], [n_kv_heads*head_dim] x 2 */
    loom_tensor q_norm;     /* qk_norm: [head_dim], shared by the heads */
    loom_tensor k_norm;     /* qk_norm: [head_dim] */
    loom_tensor wo;         /* [dim, n_heads*head_dim] */
    loom_tensor ffn_norm;   /* [dim] */
    loom_tensor w1;         /* gate [hidden_dim, dim] */
    loom_tensor w2;         /* down [dim, hidden_dim] */
    loom_tensor w3;         /* up   [hidden_dim, dim] */
    loom_tensor wqkv;       /* merged: [(n_heads + 2*n_kv_heads)*head_dim, dim]: wq, wk, wv rows */
    loom_tensor w13;        /* merged: [2*hidden_dim, dim]: w1 (gate) rows, then w3 (up) rows */
    loom_tensor ffn_gate_inp;  /* n_experts: the router [n_experts, dim] */
    loom_tensor ffn_gate_exps; /* n_experts: [n_experts, hidden_dim, dim], contiguous */
    loom_tensor ffn_up_exps;   /* n_experts: [n_experts, hidden_dim, dim] */
    loom_tensor ffn_down_exps; /* n_experts: [n_experts, dim, hidden_dim] */
    loom_tensor attn_post_norm; /* Gemma: [dim], the attention output's norm */
    loom_tensor ffn_post_norm;  /* Gemma: [dim], the FFN output's norm */
} loom_llama_layer;

typedef struct loom_llama_weights {
    loom_tensor tok_embd;   /* [vocab_size, dim] */
    loom_llama_layer *layers;  /* [n_layers] */
    loom_tensor out_norm;   /* [dim] */
    loom_tensor output;     /* [vocab_size, dim]; same memory as tok_embd when shared */
    void *owned;            /* GGUF: the tensors converted at load (K-quants, q5, iq4), one block
                             * (loom_free_aligned); NULL when none */
    int n_converted[32];    /* of those, how many of each ggml type (ids below 32) */
    size_t converted_bytes; /* and the bytes they take converted */
} loom_llama_weights;

/* "q4_K -> q4_1 x16, q5_0 -> q8_0 x166 (100.1 MiB)" into buf for the tensors
 * converted at load; returns 0 (buf "") when there are none. */
int loom_llama_converted_summary(const loom_llama_weights *w, char *buf, size_t n);

/* The tensors of one layer, for every format: the field of loom_llama_layer,
 * the GGUF name (blk.N.<gguf>), the Hugging Face name (model.layers.N.<hf>),
 * and the shape in config dims: matrices [rows, cols], vectors (norms, biases)
 * [rows]. In the order loom convert writes them and the GGUF loader checks
 * them (the first missing or misshaped one is the one reported). A tensor
 * with a condition exists only in the models whose config sets it
 * (loom_llama_layer_has). */
typedef enum {
    LOOM_LLAMA_D, LOOM_LLAMA_QD, LOOM_LLAMA_KVD, LOOM_LLAMA_H, LOOM_LLAMA_HD,
    LOOM_LLAMA_QKVD, /* QD + 2 KVD: merged Q/K/V */
    LOOM_LLAMA_H2,   /* 2 H: merged gate/up */
    LOOM_LLAMA_E,    /* n_experts: the router's rows */
} loom_llama_dim;
typedef enum {
    LOOM_LLAMA_ALWAYS, LOOM_LLAMA_IF_QKV_BIAS, LOOM_LLAMA_IF_QK_NORM,
    LOOM_LLAMA_IF_SPLIT,  /* separate Q, K, V, gate and up matrices (all but merged models) */
    LOOM_LLAMA_IF_MERGED, /* the merged ones (config.merged) */
    LOOM_LLAMA_IF_SPLIT_FFN,  /* separate gate and up matrices of a dense FFN */
    LOOM_LLAMA_IF_DENSE,      /* a dense FFN (n_experts 0) */
    LOOM_LLAMA_IF_MERGED_FFN, /* merged gate/up of a dense FFN */
    LOOM_LLAMA_IF_MOE,        /* a mixture of experts (n_experts > 0) */
    LOOM_LLAMA_IF_GEMMA,  /* Gemma 2/3 (loom_llama_gemma) */
    LOOM_LLAMA_IF_NOT_GEMMA,
} loom_llama_cond;
typedef struct loom_llama_layer_tensor {
    size_t field;              /* offsetof(loom_llama_layer, ...) */
    const char *gguf, *hf;     /* with their suffix: "attn_q.weight", "self_attn.q_proj.bias" */
    int norm;                  /* 1: a vector [rows] (a norm or a bias), kept in f32 */
    loom_llama_dim rows, cols;
    int rope;                  /* 1: the rows are RoPE'd heads (rows / head_dim of them) */
    loom_llama_cond cond;
    int experts;               /* 1: [n_experts, rows, cols], one matrix per expert; the HF name has a %d
                                  for the expert (one tensor each), GGUF's is the stacked 3-D tensor */
} loom_llama_layer_tensor;
#define LOOM_LLAMA_LAYER_TENSORS 23
extern const loom_llama_layer_tensor loom_llama_layer_tensors[LOOM_LLAMA_LAYER_TENSORS];
/* The Hugging Face name of tensor t of layer `layer` (expert `expert` of an
 * experts tensor) into buf: model.layers.N.<hf>, Mixtral's block_sparse_moe
 * names when c->hf_block_sparse_moe. */
void loom_llama_hf_name(const loom_llama_config *c, const loom_llama_layer_tensor *t, int layer, int expert,
                        char *buf, size_t n);
/* 1 when the models of config c have tensor t. */
int loom_llama_layer_has(const loom_llama_config *c, const loom_llama_layer_tensor *t);
/* The size of dim d under config c. */
int64_t loom_llama_dim_size(const loom_llama_config *c, loom_llama_dim d);
/* The tensor of layer y that t describes. */
static inline loom_tensor *loom_llama_layer_field(loom_llama_layer *y, const loom_llama_layer_tensor *t) {
    return (loom_tensor *)(void *)((char *)y + t->field);
}

/* A merged model's layer (config.merged): wq, wk, wv and w1, w3 set as row
 * views of wqkv and w13 (no copy); other models' layers are left as they are.
 * Errors: a merged tensor without the rows the config implies. */
loom_status loom_llama_layer_views(const loom_llama_config *c, loom_llama_layer *y);

/* Checks a configuration for impossible values; the message names the field. */
loom_status loom_llama_config_check(const loom_llama_config *c, const char *what);

/* Loads a llama2.c checkpoint (legacy or version 1) by mmap; weights point into
 * the mapping. layers is malloc'd (free with free()). */
loom_status loom_llama2c_load(const char *path, loom_mapped_file *file, loom_llama_config *cfg,
                              loom_llama_weights *w);

/* Loads a Llama-architecture GGUF (general.architecture = "llama") by mmap;
 * weights point into the mapping owned by *gguf (close it after use); layers
 * is malloc'd. Everything is validated first: errors name the missing or
 * malformed key (LOOM_ERR_FORMAT), the tensor with the wrong shape
 * (LOOM_ERR_SHAPE) or type (LOOM_ERR_DTYPE / LOOM_ERR_UNSUPPORTED), or the
 * unsupported architecture (LOOM_ERR_UNSUPPORTED). Tensors of the types loom
 * converts at load (K-quants, q5, iq4) are converted on n_threads threads into
 * w->owned. */
loom_status loom_llama_load_gguf(const char *path, int n_threads, loom_gguf **gguf, loom_llama_config *cfg,
                                 loom_llama_weights *w);
/* The weights of an open Llama GGUF for config c (loom_llama_config_from_gguf's),
 * each checked as loom_llama_load_gguf checks it; w->layers must hold
 * c->n_layers layers; tensors converted at load go to w->owned (free it with
 * loom_free_aligned). */
loom_status loom_llama_weights_from_gguf(const loom_gguf *g, const loom_llama_config *c, loom_llama_weights *w,
                                        int n_threads);
/* The configuration of an open Llama GGUF, from its metadata (the vocabulary
 * size, else token_embd's rows; tied when output.weight is absent), checked
 * as loom_llama_load_gguf checks it; no tensor data is read. */
loom_status loom_llama_config_from_gguf(const loom_gguf *g, loom_llama_config *cfg);

/* Appends the graph of one forward pass over n tokens at positions pos..pos+n-1:
 * ids is an I32 [n] tensor id, kc/vc are per-layer cache tensor ids
 * [n_ctx, n_kv_heads, head_dim]; for i8 caches ksc/vsc are the per-layer scale
 * stores [n_ctx, n_kv_heads] (f32, one per cache row), else NULL. Returns the
 * logits tensor id [1, vocab] of the last token (or [n, vocab] when all_logits). */
int loom_llama_build(loom_graph *g, const loom_llama_config *c, const loom_llama_weights *w,
                     int ids, const int *kc, const int *vc, const int *ksc, const int *vsc, int n,
                     int pos, int all_logits);

/* The tensors of the batch engine's forward pass (ids in the graph): the step's
 * rows and where they go, and the paged KV cache. */
typedef struct loom_llama_paged_io {
    int ids;                 /* i32 [T] tokens */
    int positions;           /* i32 [T] each row's position in its sequence */
    int slots;               /* i32 [T] each row's cache slot (block * block_size + offset) */
    int out_rows;            /* i32 [n_out] the rows whose logits are computed */
    const int *k_cache, *v_cache; /* per layer [n_blocks * block_size, n_kv_heads, head_dim] */
    const int *k_scale, *v_scale; /* i8 caches: per layer f32 [n_blocks * block_size, n_kv_heads]; else NULL */
    int64_t n_blocks, block_size;
    int max_seqs, max_kv;    /* bounds of a step: sequences, and keys of one sequence */
} loom_llama_paged_io;

/* Appends the forward pass of a ragged batch of n rows: RoPE at each row's
 * position, K/V written to each row's slot (kv_write), attention per sequence
 * over its blocks (paged_attention, reading the step's batch), and the logits
 * of the n_out rows out_rows names. Returns the logits id [n_out, vocab]. */
int loom_llama_build_paged(loom_graph *g, const loom_llama_config *c, const loom_llama_weights *w,
                           const loom_llama_paged_io *io, int n, int n_out);

#endif
