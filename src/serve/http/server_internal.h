/* What the files of loom serve share: the server, its requests and metrics.
 * server.c: the listener, routing, auth, errors, start and stop;
 * generate.c: chat completions and completions, the engine thread;
 * embed.c: embeddings and their batching thread; info.c: models, health,
 * tokenize, detokenize; metrics.c: /metrics. */
#ifndef LOOM_SERVE_HTTP_SERVER_INTERNAL_H
#define LOOM_SERVE_HTTP_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>

#include "serve/http/request.h"
#include "serve/http/server.h"

/* ------------------------------------------------------------ metrics */

enum { EP_CHAT, EP_COMPLETIONS, EP_EMBEDDINGS, EP_MODELS, EP_HEALTH, EP_TOKENIZE, EP_DETOKENIZE, EP_METRICS,
       EP_OTHER, EP_COUNT };
#define N_STATUSES 12
#define N_TTFT_BUCKETS 13
#define N_ITL_BUCKETS 13
#define MAX_PROFILE_SECTIONS 256

typedef struct serve_histogram {
    const double *bounds;  /* upper bounds, the last +Inf */
    int n;
    long count[16];        /* per bucket (not cumulative) */
    double sum;
    long total;
} serve_histogram;

void serve_histogram_add(serve_histogram *h, double v);

/* The per-layer accounting of a recent step (loom_engine_last_profile). */
typedef struct serve_layer_stats {
    char name[24];
    int kernels;
    double bytes_read, bytes_written, flops;
} serve_layer_stats;

typedef struct serve_metrics {
    long requests[EP_COUNT][N_STATUSES];
    long prompt_tokens, generated_tokens, cached_prompt_tokens;
    long embed_inputs, embed_batches, embed_tokens;
    long timeouts, disconnects;
    serve_histogram ttft, itl;
    loom_engine_stats engine;             /* as of the last step */
    serve_layer_stats layers[MAX_PROFILE_SECTIONS];
    int n_layers, profile_tokens;         /* sections of the last profiled step, its rows */
    char profile_phase[16];
} serve_metrics;

/* ------------------------------------------------------------ generation requests */

typedef struct gen_tok {          /* a generated token with its log-probabilities (logprobs asked) */
    int32_t token, prev;
    float logprob;
    int n_top;
    loom_token_logprob top[LOOM_MAX_LOGPROBS];
} gen_tok;

typedef struct serve_server serve_server;

typedef struct gen_job {
    serve_server *srv;
    int64_t id;
    int refs;                     /* the connection's and the engine's (under srv->mu) */
    pthread_cond_t cv;            /* signalled on new events */
    serve_gen_request req;
    const char *model_id;
    char id_str[48];
    long created;
    double t_arrive, t_deadline, t_first, t_last;
    int fd;                       /* the connection's socket (disconnect checks) */
    /* results, under srv->mu */
    char *text;
    size_t n_text, cap_text;
    gen_tok *toks;
    int n_toks, cap_toks;
    int done, n_prompt, n_gen, n_cached;
    loom_finish_reason finish;
    char error[256];
    int32_t last_token;
    /* a stream's progress (its connection's thread only) */
    size_t n_sent;                /* text bytes sent */
    int toks_sent, phase;         /* phase: 0 first chunk, 1 content, 2 done */
    char *out;                    /* SSE bytes ready to write */
    size_t n_out, out_at;
    int timed_out, gone;
} gen_job;

/* ------------------------------------------------------------ embeddings */

typedef struct embed_job {
    char **texts;                 /* borrowed from the request */
    int n;
    float *out;                   /* n * dim */
    int done, failed;
    char error[256];
    struct embed_job *next;
    int refs;
    pthread_cond_t cv;
} embed_job;

/* ------------------------------------------------------------ the server */

struct serve_server {
    serve_params p;
    char host[64];
    int port;
    struct MHD_Daemon *daemon;
    double t_start;
    long created;
    pthread_mutex_t mu;           /* everything below that threads share */
    pthread_cond_t state_cv;      /* ready / stopping / in-flight changes */
    int ready, stopping, load_failed;
    /* the chat model */
    loom_model *model;
    loom_tokenizer *tok;          /* the chat model's, else the embedding model's (tokenize) */
    loom_chat_template *tmpl;
    loom_engine *engine;
    char model_id[128];
    pthread_t engine_thread;
    int engine_running, engine_quit;
    gen_job **active;             /* requests the engine runs, by id */
    int n_active, cap_active;
    int64_t next_id;
    int n_inflight;               /* generation requests admitted and not finished */
    int n_open;                   /* requests whose response is not yet sent (or given up) */
    uint64_t seed_base;
    /* the embedding model */
    loom_bert *bert;
    loom_tokenizer *embed_tok;    /* its tokenizer (usage counts) */
    int embed_dim;
    char embed_id[128];
    pthread_t embed_thread;
    int embed_running, embed_quit;
    pthread_cond_t embed_cv;
    embed_job *embed_head, *embed_tail;
    int n_embed_waiting;
    serve_metrics m;
};

/* A connection's request: its body as it arrives. */
typedef struct serve_conn {
    char *body;
    size_t n_body, cap_body;
    int too_large, answered, endpoint;
    double t0;
} serve_conn;

double serve_now(void);

/* Answers with body (copied) and status; content_type NULL = application/json. */
enum MHD_Result serve_respond(serve_server *s, struct MHD_Connection *c, serve_conn *sc, int status,
                              const char *body, const char *content_type);
/* Answers with OpenAI's error object. */
enum MHD_Result serve_respond_error(serve_server *s, struct MHD_Connection *c, serve_conn *sc, const serve_error *e);
/* Counts an answer in the metrics and logs it (under no lock). */
void serve_count(serve_server *s, serve_conn *sc, int status);
/* A cJSON object as the answer (deleted). */
struct cJSON;
enum MHD_Result serve_respond_json(serve_server *s, struct MHD_Connection *c, serve_conn *sc, int status,
                                   struct cJSON *o);
/* 1 when the client closed its connection (poll on its socket). */
int serve_peer_gone(int fd);
/* A cJSON string of s[0..n) with invalid UTF-8 replaced by U+FFFD. */
struct cJSON *serve_json_text(const char *s, size_t n);
/* The model asked for is served (404 model_not_found otherwise); NULL asks for the default. */
int serve_check_model(const serve_server *s, const char *asked, const char *served, serve_error *err);

/* generate.c */
enum MHD_Result serve_generate(serve_server *s, struct MHD_Connection *c, serve_conn *sc, int chat);
int serve_engine_start(serve_server *s);
void serve_engine_stop(serve_server *s);
void serve_cancel_all(serve_server *s);

/* embed.c */
enum MHD_Result serve_embeddings(serve_server *s, struct MHD_Connection *c, serve_conn *sc);
int serve_embed_start(serve_server *s);
void serve_embed_stop(serve_server *s);

/* info.c */
enum MHD_Result serve_models(serve_server *s, struct MHD_Connection *c, serve_conn *sc, const char *one);
enum MHD_Result serve_tokenize(serve_server *s, struct MHD_Connection *c, serve_conn *sc);
enum MHD_Result serve_detokenize(serve_server *s, struct MHD_Connection *c, serve_conn *sc);

/* metrics.c */
void serve_metrics_init(serve_metrics *m);
enum MHD_Result serve_metrics_answer(serve_server *s, struct MHD_Connection *c, serve_conn *sc);

#endif
