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

/* Declared in include/loom.h: loom_batch_request, loom_batch_request_parse, loom_batch_request_free. */

#endif
