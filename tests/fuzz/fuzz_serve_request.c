/* libFuzzer target: loom serve's request bodies (src/serve/http/request.c) on
 * arbitrary bytes. The first byte picks the endpoint ('c' chat completions,
 * 'p' completions, 'e' embeddings, 't' tokenize, 'd' detokenize; other bytes
 * by their value mod 5), the rest is the body. A body either parses into
 * values the engine accepts (a conversation with known roles and valid UTF-8,
 * a prompt, at most LOOM_MAX_STOPS non-empty stop strings, sampling values in
 * range), or fails with a 400 (500 for out of memory) naming a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/http/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_error(int ok, const serve_error *e) {
    if (ok) return;
    if ((e->status != 400 && e->status != 500) || !e->message[0] || !e->type) abort();
}

static void check_text(const char *s) {
    if (!s || !serve_utf8_valid(s, strlen(s))) abort();
}

static void fuzz_generate(const char *body, size_t n, int chat) {
    serve_gen_request r;
    serve_error e;
    int ok = serve_parse_generate(body, n, chat, &r, &e);
    check_error(ok, &e);
    if (!ok) return;
    if (chat) {
        if (r.n_msgs < 1 || r.prompt || r.prompt_ids) abort();
        for (int i = 0; i < r.n_msgs; i++) {
            if (strcmp(r.msgs[i].role, "system") && strcmp(r.msgs[i].role, "user") &&
                strcmp(r.msgs[i].role, "assistant"))
                abort();
            check_text(r.msgs[i].content);
        }
    } else {
        if (!r.prompt == !r.prompt_ids || r.msgs) abort();
        if (r.prompt) check_text(r.prompt);
        for (int i = 0; i < r.n_prompt_ids; i++)
            if (r.prompt_ids[i] < 0) abort();
    }
    if (r.params.n_stops < 0 || r.params.n_stops > LOOM_MAX_STOPS) abort();
    for (int i = 0; i < r.params.n_stops; i++)
        if (!r.params.stops[i] || !r.params.stops[i][0]) abort();
    if (r.params.max_tokens < 0 || r.params.logprobs < 0 || r.params.logprobs > LOOM_MAX_LOGPROBS) abort();
    if (r.top_logprobs < 0 || r.top_logprobs > r.params.logprobs) abort();
    if (r.include_usage && !r.stream) abort();
    loom_sampler *smp; /* the engine's sampler takes these parameters */
    if (loom_sampler_init(&smp, 16, &r.params.sampling) != LOOM_OK) abort();
    loom_sampler_free(smp);
    serve_gen_request_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int kind = data[0] == 'c' ? 0 : data[0] == 'p' ? 1 : data[0] == 'e' ? 2 : data[0] == 't' ? 3
             : data[0] == 'd' ? 4 : data[0] % 5;
    size_t n = size - 1;
    char *body = malloc(n ? n : 1); /* exact size: ASan flags reads past the end */
    if (!body) return 0;
    if (n) memcpy(body, data + 1, n);
    serve_error e;
    if (kind <= 1) fuzz_generate(body, n, kind == 0);
    else if (kind == 2) {
        serve_embed_request r;
        int ok = serve_parse_embeddings(body, n, &r, &e);
        check_error(ok, &e);
        if (ok) {
            if (r.n_texts < 1 || r.n_texts > SERVE_MAX_EMBED_INPUTS || r.dimensions < 0) abort();
            for (int i = 0; i < r.n_texts; i++) check_text(r.texts[i]);
            serve_embed_request_free(&r);
        }
    } else if (kind == 3) {
        serve_tokenize_request r;
        int ok = serve_parse_tokenize(body, n, &r, &e);
        check_error(ok, &e);
        if (ok) {
            check_text(r.content);
            serve_tokenize_request_free(&r);
        }
    } else {
        serve_detokenize_request r;
        int ok = serve_parse_detokenize(body, n, &r, &e);
        check_error(ok, &e);
        if (ok) {
            for (int i = 0; i < r.n_tokens; i++)
                if (r.tokens[i] < 0) abort();
            serve_detokenize_request_free(&r);
        }
    }
    /* the streaming hold-back never cuts a valid text short and never runs past it */
    size_t k = serve_utf8_complete(body, n);
    if (k > n || (serve_utf8_valid(body, n) && k != n)) abort();
    free(body);
    return 0;
}
