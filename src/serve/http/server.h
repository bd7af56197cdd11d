/*
 * loom serve: an OpenAI-compatible HTTP server over the batch engine
 * (docs/serve.md). HTTP through libmicrohttpd (a thread per connection), JSON
 * through libcjson; one engine thread owns the loom_engine and steps it while
 * requests are pending, routing each step's events to the requests' queues,
 * which the connections' threads read (whole answers or SSE streams); one
 * embeddings thread packs the inputs of all waiting embeddings requests into
 * one call. The HTTP layer uses loom's public API only (include/loom.h) and is
 * not part of libloom, so that library users do not link libmicrohttpd.
 */
#ifndef LOOM_SERVE_HTTP_SERVER_H
#define LOOM_SERVE_HTTP_SERVER_H

#include <stddef.h>

#include "loom.h"

typedef struct serve_params {
    const char *model;          /* a Llama model (GGUF, Hugging Face folder, llama2.c) or a BERT folder */
    const char *tokenizer;      /* the Llama model's tokenizer when it has none (llama2.c); NULL = its own */
    const char *embed_model;    /* a BERT folder for /v1/embeddings beside the chat model; NULL = none */
    const char *alias;          /* the id of `model` in the API; NULL = its file or folder name */
    const char *chat_template;  /* a template name (loom_chat_template_init); NULL = the model's own */
    const char *host;           /* address to bind (default 127.0.0.1) */
    int port;                   /* 0 = any free port (printed) */
    int n_threads;              /* compute threads of each model */
    int parallel;               /* sequences that run at once (the engine's n_seq_max) */
    int n_ctx;                  /* KV positions of all sequences together; 0 = 1024 per sequence */
    int n_batch;                /* token rows per step; 0 = the engine's default */
    int batch_invariant;        /* results independent of the batch (loom_engine_params) */
    loom_dtype kv_dtype;
    const char *api_key;        /* Bearer key every endpoint but /health requires; NULL = none */
    double timeout_s;           /* per request, from its arrival; <= 0 = none */
    int max_queue;              /* requests that may wait beyond the running ones before 429 */
    size_t max_body;            /* request body bytes at most (413 beyond) */
    double grace_s;             /* on stop: how long in-flight requests may finish */
    int quiet;                  /* no access log on stderr */
} serve_params;

serve_params serve_default_params(void);

typedef struct serve_server serve_server;

/* Binds host:port and starts answering (/health: 503 until serve_load is
 * done). Prints "loom serve: listening on http://HOST:PORT" to stderr. Returns
 * 0, or 1 after printing an error. */
int serve_start(const serve_params *p, serve_server **out);
/* Loads the models and starts the engine and embeddings threads; then /health
 * answers 200. Returns 0, or 1 after printing an error. */
int serve_load(serve_server *s);
/* Serves until serve_stop; then stops accepting, lets in-flight requests
 * finish for up to grace_s, cancels the rest and returns. */
void serve_run(serve_server *s);
/* Asks serve_run to drain and return (any thread, not a signal handler). */
void serve_stop(serve_server *s);
/* Stops the listener and the threads and frees everything; NULL is a no-op. */
void serve_free(serve_server *s);

#endif
