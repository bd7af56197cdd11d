/* Hugging Face tokenizer.json as GGUF tokenizer metadata (for loaders and
 * `loom convert`). The loading entry points are declared in tokenizer.h. */
#ifndef LOOM_MODEL_TOKENIZER_HFJSON_H
#define LOOM_MODEL_TOKENIZER_HFJSON_H

#include <stddef.h>

#include "model/gguf.h"

/* Adds tokenizer.ggml.* keys (model, pre, tokens, token_type, merges, special
 * ids, add_bos/eos, chat_template) for tokenizer.json text[0..len) to w;
 * config_text (may be NULL) is tokenizer_config.json. Errors: LOOM_ERR_FORMAT
 * for invalid JSON or vocabularies (message names the entry),
 * LOOM_ERR_UNSUPPORTED for other tokenizer models or pre-tokenizers. */
loom_status loom_tokenizer_hf_json_to_gguf(const char *text, size_t len, const char *config_text,
                                           size_t config_len, const char *name, loom_gguf_writer *w);

#endif
