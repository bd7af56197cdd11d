/* One line of `loom batch`'s JSONL input: a request object
 *   {"id": ..., "prompt": "..." | "messages": [{"role", "content"}, ...],
 *    "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
 *    "stop": "..." | ["...", ...]}
 * parsed with libcjson into the engine's request parameters. Unknown keys are
 * ignored (OpenAI batch lines carry more); a known key of the wrong type or
 * out of range is an error naming the line and the key. */
#ifndef LOOM_SERVE_BATCH_REQUEST_H
#define LOOM_SERVE_BATCH_REQUEST_H

#include <stddef.h>

#include "model/chat.h"
#include "serve/engine.h"

#define LOOM_BATCH_DEFAULT_MAX_TOKENS 256

typedef struct loom_batch_request {
    char *id_json;              /* the id as JSON text (number or string), echoed in the output */
    char *prompt;               /* the prompt, or NULL when messages are given */
    loom_chat_msg *msgs;        /* the conversation (roles and contents owned) */
    int n_msgs;
    loom_request_params params; /* stops point into stop_text */
    char *stop_text;
    int has_seed;               /* a seed was given (else the caller picks one) */
} loom_batch_request;

/* Parses one line (len bytes, need not be NUL-terminated); line_no names it
 * in errors (LOOM_ERR_FORMAT: "line N: ..."). On error *out holds nothing to
 * free but id_json, which is set when the line had a usable id (the error is
 * reported under it). */
loom_status loom_batch_request_parse(const char *line, size_t len, long line_no, loom_batch_request *out);
void loom_batch_request_free(loom_batch_request *r);

#endif
