/* libFuzzer target: a line of `loom batch`'s JSONL input (serve/batch_request.c)
 * on arbitrary bytes. A line either parses into a request whose fields are in
 * range (a prompt or messages with valid roles, at most LOOM_MAX_STOPS
 * non-empty stop strings, sampling values the engine accepts), or fails with
 * LOOM_ERR_FORMAT (or NOMEM) and a message naming the line. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/batch_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *copy = malloc(size ? size : 1); /* exact size: ASan flags reads past the end */
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    loom_batch_request r;
    loom_status s = loom_batch_request_parse(copy, size, 42, &r);
    if (s == LOOM_OK) {
        if (!r.prompt == !r.msgs) abort();
        for (int i = 0; i < r.n_msgs; i++)
            if (strcmp(r.msgs[i].role, "system") && strcmp(r.msgs[i].role, "user") && strcmp(r.msgs[i].role, "assistant"))
                abort();
        if (r.params.n_stops < 0 || r.params.n_stops > LOOM_MAX_STOPS) abort();
        for (int i = 0; i < r.params.n_stops; i++)
            if (!r.params.stops[i] || !r.params.stops[i][0]) abort();
        const loom_sampler_params *sp = &r.params.sampling;
        if (r.params.max_tokens < 1 || !(sp->temperature >= 0) || !(sp->top_p > 0 && sp->top_p <= 1) ||
            sp->top_k < 0 || !(sp->min_p >= 0 && sp->min_p <= 1))
            abort();
        /* the engine's sampler takes these parameters */
        loom_sampler *smp;
        if (loom_sampler_init(&smp, 16, sp) != LOOM_OK) abort();
        loom_sampler_free(smp);
    } else if ((s != LOOM_ERR_FORMAT && s != LOOM_ERR_NOMEM) || !strstr(loom_last_error(), "line 42")) {
        if (s != LOOM_ERR_NOMEM) abort();
    }
    loom_batch_request_free(&r);
    free(copy);
    return 0;
}
