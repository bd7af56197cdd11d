/* Llama-architecture models from Hugging Face safetensors + config.json. */
#ifndef LOOM_MODEL_LLAMA_ST_H
#define LOOM_MODEL_LLAMA_ST_H

#include "model/hf_config.h"
#include "model/llama.h"
#include "model/safetensors.h"

/* Loads path (a folder with config.json and model.safetensors or a sharded
 * index, or a .safetensors file with config.json beside it). model_type (or
 * architectures[0]) must be Llama's or Mistral's (LOOM_FAMILY_LLAMA), Qwen2's
 * (q/k/v biases) or Qwen3's (q/k norms); others are LOOM_ERR_UNSUPPORTED, as
 * are attention_bias outside Qwen2 and use_sliding_window. HF's q/k
 * projections use the NeoX ("half") RoPE pairing, so cfg->rope_mode =
 * LOOM_ROPE_HALF. A linear rope type (rope_parameters or rope_scaling) sets
 * rope_freq_scale = 1/factor; rope types other than default and linear are
 * LOOM_ERR_UNSUPPORTED. Matrices are f32/f16/bf16 views into *st (close it
 * after use); the vectors (norms, biases) are f32 copies in *owned (free());
 * layers is malloc'd. Errors name the missing tensor or the one with the wrong
 * shape (LOOM_ERR_SHAPE). */
loom_status loom_llama_load_safetensors(const char *path, loom_safetensors **st, float **owned,
                                        loom_llama_config *cfg, loom_llama_weights *w);

/* The Llama configuration a parsed config.json describes (named cfg_path in
 * errors): the checks and defaults loom_llama_load_safetensors applies, without
 * the weights. */
loom_status loom_llama_config_from_hf(const loom_hf_config *h, const char *cfg_path, loom_llama_config *cfg);

/* Row permutation between HF's half-split rotary layout and the interleaved
 * one of llama2.c / Meta / GGUF, for a [n_head * head_dim, cols] projection
 * with element size es: to_half = 1 maps interleaved -> half (as HF's
 * convert_llama_weights_to_hf), 0 the inverse. dst and src must not overlap. */
void loom_rope_permute_rows(void *dst, const void *src, int n_head, int head_dim, int64_t cols, size_t es,
                            int to_half);

#endif
