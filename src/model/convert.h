/* Model conversion to GGUF (llama.cpp's format and tensor names):
 *   Hugging Face Llama (safetensors + config.json + tokenizer.json) -> GGUF,
 *   llama2.c checkpoint + tokenizer.bin                             -> GGUF,
 *   GGUF -> GGUF with the weight matrices requantized.
 * Llama tensors are written with llama.cpp's names; attn_q/attn_k rows are
 * put in the interleaved RoPE order llama.cpp's "normal" RoPE expects (HF's
 * half-split rows are permuted back, as convert_hf_to_gguf.py does).
 * The API (loom_convert, loom_convert_params, loom_convert_parse_type) is
 * public: loom.h. */
#ifndef LOOM_MODEL_CONVERT_H
#define LOOM_MODEL_CONVERT_H

#include "loom.h"

#endif
