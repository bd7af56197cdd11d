/* Hugging Face config.json: the fields loom's Llama and BERT loaders need.
 * Parsed with libcjson; absent optional fields keep the documented defaults. */
#ifndef LOOM_MODEL_HF_CONFIG_H
#define LOOM_MODEL_HF_CONFIG_H

#include <stddef.h>

#include "loom.h"

typedef struct loom_hf_config {
    char model_type[32];         /* "llama", "bert", "mistral", ... ("" if absent) */
    char architecture[64];       /* architectures[0], e.g. "LlamaForCausalLM" ("" if absent) */
    int  hidden_size;            /* required */
    int  intermediate_size;      /* required */
    int  num_hidden_layers;      /* required */
    int  num_attention_heads;    /* required */
    int  num_key_value_heads;    /* default num_attention_heads */
    int  head_dim;               /* default hidden_size / num_attention_heads */
    int  vocab_size;             /* required */
    int  max_position_embeddings;/* default 2048 (Llama), 512 (BERT) */
    int  type_vocab_size;        /* BERT, default 2 */
    int  tie_word_embeddings;    /* default 1 for BERT-like, 0 for Llama (HF's defaults) */
    float rms_norm_eps;          /* Llama, default 1e-6 */
    float layer_norm_eps;        /* BERT, default 1e-12 */
    float rope_theta;            /* rope_theta or rope_parameters.rope_theta; default 10000 */
    char hidden_act[32];         /* "silu", "gelu", "gelu_new", ... */
    /* The RoPE type: rope_parameters.rope_type (transformers 5), else
     * rope_scaling's rope_type or type; "" when neither is given. */
    char  rope_scaling_type[32]; /* "default", "linear", "dynamic", "llama3", "yarn", ... */
    float rope_scaling_factor;   /* its "factor"; default 1 */
    float partial_rotary_factor; /* the share of a head RoPE rotates (top level or in
                                    rope_parameters, which wins); default 1 */
    int   attention_bias;        /* default 0 */
    int   use_sliding_window;    /* Qwen2/3's switch; default 0 */
    int   sliding_window;        /* attention window (Mistral); 0 when absent or null */
    int   bos_token_id, eos_token_id, pad_token_id;  /* -1 when absent */
    /* Gemma 2/3 */
    char  hidden_activation[32]; /* Gemma's activation ("gelu_pytorch_tanh"); "" if absent */
    float query_pre_attn_scalar; /* the q.k scale is its -1/2 power; 0 when absent */
    float attn_logit_softcapping;  /* Gemma 2; 0 when absent or null */
    float final_logit_softcapping; /* 0 when absent or null */
    /* Which layers slide: layer l when l % swa_pattern < swa_pattern - 1 (0: every
     * layer, 1: none), from layer_types (which must be such a pattern), else
     * sliding_window_pattern; -1 when the config gives neither */
    int   swa_pattern;
    /* The sliding layers' RoPE base: rope_parameters.sliding_attention.rope_theta
     * (transformers 5, whose type must be default), else rope_local_base_freq; 0 when absent */
    float rope_local_theta;
    /* mixtures of experts (Mixtral, Qwen3-MoE); 0 when absent */
    int   num_experts;           /* num_local_experts, or num_experts */
    int   num_experts_per_tok;
    int   moe_intermediate_size; /* Qwen3-MoE: the experts' width (intermediate_size is a dense FFN's) */
    int   norm_topk_prob;        /* Qwen3-MoE: renormalise the top-k weights; -1 when absent */
    int   decoder_sparse_step;   /* Qwen3-MoE: every n-th layer is sparse; default 1 */
    int   n_mlp_only_layers;     /* Qwen3-MoE: the length of mlp_only_layers (dense layers) */
    int   shared_expert_intermediate_size; /* Qwen2-MoE's shared expert */
} loom_hf_config;

/* Parses config.json text[0..len); name is used in messages. Errors:
 * LOOM_ERR_FORMAT for invalid JSON, a missing required field, a field of the
 * wrong type or range (the message names the field), or rope_theta and
 * rope_parameters.rope_theta that differ, layer_types that are no repeating
 * pattern; LOOM_ERR_UNSUPPORTED for rope_parameters per layer type other than
 * Gemma 3's full_attention / sliding_attention, or a sliding RoPE type other
 * than default. */
loom_status loom_hf_config_parse(const char *text, size_t len, const char *name, loom_hf_config *out);
/* Reads and parses path (a config.json, or a folder holding one). Errors as
 * above, plus LOOM_ERR_IO. */
loom_status loom_hf_config_load(const char *path, loom_hf_config *out);

/* Reads a whole file (at most 512 MiB) into a malloc'd NUL-terminated buffer. */
loom_status loom_read_text_file(const char *path, char **buf, size_t *len);

#endif
