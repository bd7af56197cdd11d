/* Chat templates: how a conversation becomes the text a chat model was
 * trained on. The formats of the families loom loads, each rendered as the
 * model's own Jinja template renders it (transformers' apply_chat_template):
 *   chatml   <|im_start|>ROLE\nCONTENT<|im_end|>\n ... <|im_start|>assistant\n
 *            (SmolLM2-Instruct, Qwen2/2.5 with their default system message)
 *   qwen3    chatml; an assistant message after the last user message gets
 *            an empty <think></think> block, earlier ones lose their thinking
 *   llama2   <s>[INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nUSER [/INST] REPLY </s><s>[INST] USER [/INST]
 *   llama3   <|begin_of_text|><|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
 *            ... <|start_header_id|>assistant<|end_header_id|>\n\n (3.1/3.2: a dated system turn)
 *   mistral  <s>[INST] USER[/INST] REPLY</s>[INST] SYSTEM\n\nUSER[/INST] (Mistral-7B-Instruct-v0.3:
 *            the system message goes with the last user message)
 *   phi3     <|system|>\nSYSTEM<|end|>\n<|user|>\nUSER<|end|>\n<|assistant|>\n
 * A model names its template in GGUF tokenizer.chat_template, or in a Hugging
 * Face folder's chat_template.jinja or tokenizer_config.json (Jinja source);
 * loom recognises the format from marker strings in it, as llama.cpp's
 * llm_chat_detect_template does, rather than running Jinja. Rendering is per
 * turn so that a chat keeps its KV cache: the text of turn k is what the
 * whole-conversation rendering adds after turn k-1's reply (two exceptions,
 * where the template rewrites earlier turns: mistral keeps the system message
 * in the first turn, qwen3 keeps a reply's thinking). */
#ifndef LOOM_MODEL_CHAT_H
#define LOOM_MODEL_CHAT_H

#include <stddef.h>
#include "loom.h"
#include "model/gguf.h"

typedef enum {
    LOOM_CHAT_CHATML = 0,
    LOOM_CHAT_LLAMA2,
    LOOM_CHAT_LLAMA3,
    LOOM_CHAT_MISTRAL,
    LOOM_CHAT_PHI3,
    LOOM_CHAT_QWEN3,
    LOOM_CHAT_GEMMA,   /* Gemma 2 and 3: <start_of_turn>user ... <end_of_turn>, replies as "model" */
    LOOM_CHAT_COUNT
} loom_chat_format;

/* llama3's system turn: only when a system message is given, or always,
 * opening with "Cutting Knowledge Date: December 2023\nToday Date: DATE\n\n". */
typedef enum { LOOM_CHAT_UNDATED = 0, LOOM_CHAT_DATED_FIXED, LOOM_CHAT_DATED_TODAY } loom_chat_dating;

/* The public handle (loom.h) is this struct; loom code also keeps it by value. */
struct loom_chat_template {
    loom_chat_format format;
    char default_system[512];  /* system message the template adds when none is given ("" = none) */
    loom_chat_dating dating;   /* llama3: Llama 3.1's fixed "26 Jul 2024", Llama 3.2's date of today */
};

/* "chatml", "llama2", "llama3", "mistral", "phi3", "qwen3". */
const char *loom_chat_format_name(loom_chat_format f);
/* By name into caller storage (loom_chat_template_init allocates); LOOM_ERR_INVALID_ARG
 * naming the accepted names otherwise. */
loom_status loom_chat_template_from_name(const char *name, loom_chat_template *out);
/* From a Jinja template's source, by llama.cpp's markers: <|im_start|> is
 * chatml (qwen3 when it also handles reasoning_content; Phi-4's <|im_sep|>
 * and SmolVLM's <end_of_utterance> are refused); a template starting with
 * "mistral" or using [INST] is mistral when it is Mistral's "v3" template
 * ([AVAILABLE_TOOLS] or "' [INST] ' + system_message", without " [INST]" or
 * "\"[INST]\"") and llama2 otherwise; <|assistant|> with <|end|> is phi3;
 * <|start_header_id|> with <|end_header_id|> is llama3 (dated when it writes
 * "Cutting Knowledge Date", today's date when it calls strftime_now).
 * LOOM_ERR_UNSUPPORTED otherwise. A default system message written literally
 * in a chatml template (SmolLM2's, Qwen2's, Qwen2.5's) is kept. */
loom_status loom_chat_template_from_jinja(const char *src, size_t len, loom_chat_template *out);
/* From a GGUF file: its tokenizer.chat_template, else llama2 for
 * SentencePiece vocabularies ("llama") and chatml otherwise. */
loom_status loom_chat_template_from_gguf(const loom_gguf *g, loom_chat_template *out);
/* The Jinja source a Hugging Face folder dir carries, as transformers reads it:
 * chat_template.jinja, else tokenizer_config.json's "chat_template" (a string,
 * or the entry named "default" of a list of {name, template}); malloc'd *src
 * (free()) of *len bytes. LOOM_ERR_UNSUPPORTED when the folder has none;
 * LOOM_ERR_IO, LOOM_ERR_FORMAT (not JSON), LOOM_ERR_NOMEM. */
loom_status loom_chat_template_source_hf(const char *dir, char **src, size_t *len);
/* From a Hugging Face folder: loom_chat_template_source_hf, then _from_jinja. */
loom_status loom_chat_template_from_hf(const char *dir, loom_chat_template *out);

/* A heap copy of t into *out (loom_chat_template_free releases it): the
 * public handles of loom_chat_template_init / _from_model. LOOM_ERR_NOMEM. */
loom_status loom_chat_template_dup(const loom_chat_template *t, loom_chat_template **out);

/* Rendering (loom_chat_render, loom_chat_render_turn) is public: loom.h. */

#endif
