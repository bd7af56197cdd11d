/* Chat templates: how a conversation becomes the text a chat model was
 * trained on. Two formats, the ones small open models use:
 *   chatml  <|im_start|>ROLE\nCONTENT<|im_end|>\n ... <|im_start|>assistant\n
 *           (SmolLM2-Instruct, Qwen, ...)
 *   llama2  <s>[INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nUSER [/INST] REPLY </s><s>[INST] USER [/INST]
 * A GGUF model names its template in tokenizer.chat_template (Jinja source);
 * loom recognises the format from it rather than running Jinja. Rendering is
 * per turn so that a chat keeps its KV cache: the text of turn k is what the
 * whole-conversation rendering adds after turn k-1's reply. */
#ifndef LOOM_MODEL_CHAT_H
#define LOOM_MODEL_CHAT_H

#include <stddef.h>
#include "loom.h"
#include "model/gguf.h"

typedef enum { LOOM_CHAT_CHATML = 0, LOOM_CHAT_LLAMA2, LOOM_CHAT_COUNT } loom_chat_format;

/* The public handle (loom.h) is this struct; loom code also keeps it by value. */
struct loom_chat_template {
    loom_chat_format format;
    char default_system[512];  /* system message the template adds when none is given ("" = none) */
};

/* "chatml", "llama2". */
const char *loom_chat_format_name(loom_chat_format f);
/* By name into caller storage (loom_chat_template_init allocates); LOOM_ERR_INVALID_ARG
 * naming the accepted names otherwise. */
loom_status loom_chat_template_from_name(const char *name, loom_chat_template *out);
/* From a Jinja template's source (tokenizer.chat_template): chatml when it
 * uses <|im_start|>, llama2 when it uses [INST]; LOOM_ERR_UNSUPPORTED
 * otherwise. A default system message written literally in a chatml template
 * (SmolLM2's) is kept. */
loom_status loom_chat_template_from_jinja(const char *src, size_t len, loom_chat_template *out);
/* From a GGUF file: its tokenizer.chat_template, else llama2 for
 * SentencePiece vocabularies ("llama") and chatml otherwise. */
loom_status loom_chat_template_from_gguf(const loom_gguf *g, loom_chat_template *out);

/* A heap copy of t into *out (loom_chat_template_free releases it): the
 * public handles of loom_chat_template_init / _from_model. LOOM_ERR_NOMEM. */
loom_status loom_chat_template_dup(const loom_chat_template *t, loom_chat_template **out);

/* Rendering (loom_chat_render, loom_chat_render_turn) is public: loom.h. */

#endif
