/* Model conversion to GGUF (llama.cpp's format and tensor names):
 *   Hugging Face Llama (safetensors + config.json + tokenizer.json) -> GGUF,
 *   llama2.c checkpoint + tokenizer.bin                             -> GGUF,
 *   GGUF -> GGUF with the weight matrices requantized.
 * Llama tensors are written with llama.cpp's names; attn_q/attn_k rows are
 * put in the interleaved RoPE order llama.cpp's "normal" RoPE expects (HF's
 * half-split rows are permuted back, as convert_hf_to_gguf.py does). */
#ifndef LOOM_MODEL_CONVERT_H
#define LOOM_MODEL_CONVERT_H

#include "loom.h"

typedef struct loom_convert_params {
    int type_set;            /* 0: keep each tensor's type (HF/llama2.c: the source dtype) */
    loom_dtype type;         /* f32, f16, bf16, q8_0, q4_0 or q4_1 for the 2-D weight matrices;
                                matrices whose rows are not whole 32-blocks fall back to f16 */
    const char *tokenizer;   /* llama2.c input: its tokenizer.bin (required there) */
} loom_convert_params;

/* Converts in (a folder / .safetensors / .json index, a llama2.c .bin, or a
 * GGUF file) into the GGUF file out. Errors: those of the loaders (naming
 * the file, key or tensor), LOOM_ERR_INVALID_ARG for a missing tokenizer or
 * an unsupported target type, LOOM_ERR_IO when out cannot be written. */
loom_status loom_convert(const char *in, const char *out, const loom_convert_params *p);

/* Parses "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1". */
loom_status loom_convert_parse_type(const char *s, loom_dtype *out);

#endif
