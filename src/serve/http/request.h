/*
 * The request layer of loom serve: the JSON bodies of the OpenAI-compatible
 * endpoints (chat completions, completions, embeddings) and of llama-server's
 * /tokenize and /detokenize, parsed with libcjson into the engine's request
 * parameters. No sockets here: the fuzz target (tests/fuzz/fuzz_serve_request.c)
 * and the unit test call it on bytes. A bad body gives a serve_error naming the
 * parameter (OpenAI's error object, status 400).
 */
#ifndef LOOM_SERVE_HTTP_REQUEST_H
#define LOOM_SERVE_HTTP_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

/* An error answer: OpenAI's {"error": {"message", "type", "param", "code"}}. */
typedef struct serve_error {
    int status;          /* HTTP status: 400, 401, 404, ... */
    const char *type;    /* "invalid_request_error", "authentication_error", ... */
    char message[320];
    char param[64];      /* "" = null */
    char code[48];       /* "" = null */
} serve_error;

/* Fills e and returns 0 (so that a parser can `return serve_fail(...)` as its failure). */
int serve_fail(serve_error *e, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Completions' default max_tokens (OpenAI's); chat completions run until a stop
 * or the sequence context by default. */
#define SERVE_COMPLETION_DEFAULT_MAX_TOKENS 16
/* Inputs of one embeddings request, and ids of one /detokenize request, at most. */
#define SERVE_MAX_EMBED_INPUTS 2048
#define SERVE_MAX_TOKEN_IDS (1 << 20)

/* POST /v1/chat/completions (chat = 1) or /v1/completions (chat = 0). */
typedef struct serve_gen_request {
    int chat;
    char *model;                /* the "model" asked for; NULL when absent */
    loom_chat_msg *msgs;        /* chat: the conversation (roles static, contents owned) */
    int n_msgs;
    char *prompt;               /* completions: a text prompt, or NULL when token ids are given */
    int32_t *prompt_ids;        /* completions: a prompt of token ids (not yet checked against a vocabulary) */
    int n_prompt_ids;
    loom_request_params params; /* stops point into stop_text; logprobs = the top n asked (0 none) */
    char *stop_text;
    int has_seed;               /* a seed was given (else the server picks one) */
    int want_logprobs;          /* chat: "logprobs": true; completions: "logprobs": n given */
    int top_logprobs;           /* alternatives shown per token (chat: top_logprobs; completions: logprobs) */
    int stream, include_usage;  /* SSE; stream_options.include_usage */
} serve_gen_request;

/* Parses body[0..len) (need not be NUL-terminated). Returns 1 on success; 0
 * with *err set (status 400 naming the parameter) otherwise, *out then holding
 * nothing to free. */
int serve_parse_generate(const char *body, size_t len, int chat, serve_gen_request *out, serve_error *err);
void serve_gen_request_free(serve_gen_request *r);

/* POST /v1/embeddings: "input" a string or a list of strings. */
typedef struct serve_embed_request {
    char *model;                /* NULL when absent */
    char **texts;
    int n_texts;
    int base64;                 /* encoding_format "base64" (float32 little-endian), else "float" */
    int dimensions;             /* asked for; 0 = not given */
} serve_embed_request;

int serve_parse_embeddings(const char *body, size_t len, serve_embed_request *out, serve_error *err);
void serve_embed_request_free(serve_embed_request *r);

/* POST /tokenize {"content": "...", "add_special": bool, "with_pieces": bool}
 * and POST /detokenize {"tokens": [ids]} (llama-server's shapes). */
typedef struct serve_tokenize_request {
    char *content;
    int add_special;            /* BOS (and EOS where the vocabulary adds one); default 0 */
    int with_pieces;            /* answer [{"id", "piece"}] instead of ids */
} serve_tokenize_request;

int serve_parse_tokenize(const char *body, size_t len, serve_tokenize_request *out, serve_error *err);
void serve_tokenize_request_free(serve_tokenize_request *r);

typedef struct serve_detokenize_request {
    int32_t *tokens;
    int n_tokens;
} serve_detokenize_request;

int serve_parse_detokenize(const char *body, size_t len, serve_detokenize_request *out, serve_error *err);
void serve_detokenize_request_free(serve_detokenize_request *r);

/* 1 when s[0..n) is valid UTF-8 (no overlong forms, surrogates or code
 * points beyond U+10FFFF). */
int serve_utf8_valid(const char *s, size_t n);
/* The length of the longest prefix of s[0..n) that does not end inside a
 * UTF-8 sequence that later bytes could complete (streamed text holds the
 * rest back). */
size_t serve_utf8_complete(const char *s, size_t n);

#endif
