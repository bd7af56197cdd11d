/* loom serve's listener (server.h): libmicrohttpd with a thread per
 * connection, routing, the API key, error answers, loading, and the drain on
 * stop. */
#define _GNU_SOURCE /* POLLRDHUP: the peer closed its side */
#include "serve/http/server_internal.h"

#include <arpa/inet.h>
#include <cJSON.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

serve_params serve_default_params(void) {
    serve_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.n_threads = 1;
    p.parallel = 16;
    p.kv_dtype = LOOM_F32;
    p.timeout_s = 600;
    p.max_queue = 256;
    p.max_body = 8u << 20;
    p.grace_s = 30;
    return p;
}

double serve_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------ answers */

static const int statuses[N_STATUSES] = {200, 400, 401, 404, 405, 413, 429, 500, 503, 504, 0, 0};
static const char *const endpoint_names[EP_COUNT] = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings",
                                                     "/v1/models", "/health", "/tokenize", "/detokenize",
                                                     "/metrics", "other"};

void serve_count(serve_server *s, serve_conn *sc, int status) {
    int k = N_STATUSES - 1; /* other statuses */
    for (int i = 0; i < N_STATUSES - 2; i++)
        if (statuses[i] == status) k = i;
    pthread_mutex_lock(&s->mu);
    s->m.requests[sc->endpoint][k]++;
    pthread_mutex_unlock(&s->mu);
    if (!s->p.quiet && sc->endpoint != EP_HEALTH && sc->endpoint != EP_METRICS)
        fprintf(stderr, "loom serve: %s %d %.3fs\n", endpoint_names[sc->endpoint], status, serve_now() - sc->t0);
}

enum MHD_Result serve_respond(serve_server *s, struct MHD_Connection *c, serve_conn *sc, int status,
                              const char *body, const char *content_type) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", content_type ? content_type : "application/json");
    if (status == 429) MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    pthread_mutex_lock(&s->mu);
    int ready = s->ready, stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (status == 503 && !ready) MHD_add_response_header(r, "Retry-After", "1");
    if (stopping) MHD_add_response_header(r, "Connection", "close");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    sc->answered = 1;
    serve_count(s, sc, status);
    return ret;
}

enum MHD_Result serve_respond_json(serve_server *s, struct MHD_Connection *c, serve_conn *sc, int status, cJSON *o) {
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!text) {
        serve_error e;
        serve_fail(&e, 500, NULL, NULL, "out of memory");
        return serve_respond_error(s, c, sc, &e);
    }
    enum MHD_Result r = serve_respond(s, c, sc, status, text, NULL);
    cJSON_free(text);
    return r;
}

enum MHD_Result serve_respond_error(serve_server *s, struct MHD_Connection *c, serve_conn *sc, const serve_error *e) {
    cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param);
    else cJSON_AddNullToObject(err, "param");
    if (e->code[0]) cJSON_AddStringToObject(err, "code", e->code);
    else cJSON_AddNullToObject(err, "code");
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    enum MHD_Result r = serve_respond(s, c, sc, e->status, text ? text : "{\"error\":{}}", NULL);
    cJSON_free(text);
    return r;
}

int serve_peer_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd pf = {.fd = fd, .events = POLLRDHUP};
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

cJSON *serve_json_text(const char *t, size_t n) {
    if (serve_utf8_valid(t, n)) {
        char *c = malloc(n + 1);
        if (!c) return NULL;
        memcpy(c, t, n);
        c[n] = '\0';
        cJSON *o = cJSON_CreateString(c);
        free(c);
        return o;
    }
    char *c = malloc(3 * n + 1); /* each bad byte becomes U+FFFD (3 bytes) */
    if (!c) return NULL;
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        size_t good = 0;
        /* the longest valid sequence here (1..4 bytes) */
        for (size_t len = 1; len <= 4 && i + len <= n; len++)
            if (serve_utf8_valid(t + i, len)) good = len;
        if (good) {
            memcpy(c + w, t + i, good);
            w += good, i += good;
        } else {
            memcpy(c + w, "\xEF\xBF\xBD", 3);
            w += 3, i++;
        }
    }
    c[w] = '\0';
    cJSON *o = cJSON_CreateString(c);
    free(c);
    return o;
}

int serve_check_model(const serve_server *s, const char *asked, const char *served, serve_error *err) {
    if (!served || !served[0]) {
        serve_fail(err, 404, "model", "model_not_found", "this server has no model for this endpoint");
        return 0;
    }
    if (!asked || !asked[0] || !strcmp(asked, served)) return 1;
    /* the other served model names an existing id, just not one for this endpoint */
    serve_fail(err, 404, "model", "model_not_found",
               "the model '%.100s' does not exist here; this endpoint serves '%.100s'", asked, served);
    return 0;
}

/* ------------------------------------------------------------ routing */

/* Bearer key check in time independent of where the keys differ. */
static int key_ok(const char *want, const char *header) {
    static const char prefix[] = "Bearer ";
    if (!header || strncmp(header, prefix, sizeof prefix - 1) != 0) return 0;
    const char *got = header + sizeof prefix - 1;
    size_t nw = strlen(want), ng = strlen(got);
    unsigned diff = (unsigned)(nw ^ ng);
    for (size_t i = 0; i < ng; i++) diff |= (unsigned char)got[i] ^ (unsigned char)want[i % (nw ? nw : 1)];
    return nw > 0 && diff == 0;
}

static int endpoint_of(const char *url) {
    static const struct { const char *url; int ep; } routes[] = {
        {"/v1/chat/completions", EP_CHAT}, {"/chat/completions", EP_CHAT}, {"/v1/completions", EP_COMPLETIONS},
        {"/completions", EP_COMPLETIONS}, {"/v1/embeddings", EP_EMBEDDINGS}, {"/embeddings", EP_EMBEDDINGS},
        {"/v1/models", EP_MODELS}, {"/models", EP_MODELS}, {"/health", EP_HEALTH}, {"/v1/health", EP_HEALTH},
        {"/tokenize", EP_TOKENIZE}, {"/detokenize", EP_DETOKENIZE}, {"/metrics", EP_METRICS},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].url)) return routes[i].ep;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) return EP_MODELS;
    return EP_OTHER;
}

static enum MHD_Result dispatch(serve_server *s, struct MHD_Connection *c, serve_conn *sc, const char *url,
                                const char *method) {
    serve_error e;
    int ep = sc->endpoint;
    pthread_mutex_lock(&s->mu);
    int ready = s->ready, stopping = s->stopping, load_failed = s->load_failed;
    pthread_mutex_unlock(&s->mu);
    if (ep == EP_OTHER) {
        serve_fail(&e, 404, NULL, "not_found", "no such endpoint: %s %.200s", method, url);
        return serve_respond_error(s, c, sc, &e);
    }
    int post = ep == EP_CHAT || ep == EP_COMPLETIONS || ep == EP_EMBEDDINGS || ep == EP_TOKENIZE ||
               ep == EP_DETOKENIZE;
    if (strcmp(method, post ? "POST" : "GET") != 0 && !(!post && !strcmp(method, "HEAD"))) {
        serve_fail(&e, 405, NULL, "method_not_allowed", "%s %.200s: use %s", method, url, post ? "POST" : "GET");
        struct MHD_Response *r;
        cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(err, "message", e.message);
        cJSON_AddStringToObject(err, "type", e.type);
        cJSON_AddNullToObject(err, "param");
        cJSON_AddStringToObject(err, "code", e.code);
        char *text = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (!text) return MHD_NO;
        r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_COPY);
        cJSON_free(text);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "application/json");
        MHD_add_response_header(r, "Allow", post ? "POST" : "GET, HEAD");
        enum MHD_Result ret = MHD_queue_response(c, 405, r);
        MHD_destroy_response(r);
        sc->answered = 1;
        serve_count(s, sc, 405);
        return ret;
    }
    if (ep == EP_HEALTH) {
        if (!ready) {
            serve_fail(&e, 503, NULL, "loading", load_failed ? "the model could not be loaded" : "Loading model");
            return serve_respond_error(s, c, sc, &e);
        }
        return serve_respond(s, c, sc, 200, "{\"status\":\"ok\"}", NULL);
    }
    if (s->p.api_key && s->p.api_key[0] &&
        !key_ok(s->p.api_key, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"))) {
        serve_fail(&e, 401, NULL, "invalid_api_key", "a valid API key is required (Authorization: Bearer KEY)");
        return serve_respond_error(s, c, sc, &e);
    }
    if (sc->too_large) {
        serve_fail(&e, 413, NULL, "request_too_large", "the request body is larger than %zu bytes", s->p.max_body);
        return serve_respond_error(s, c, sc, &e);
    }
    if (!ready || stopping) {
        serve_fail(&e, 503, NULL, stopping ? "shutting_down" : "loading",
                   stopping ? "the server is shutting down" : "Loading model");
        return serve_respond_error(s, c, sc, &e);
    }
    switch (ep) {
    case EP_CHAT: return serve_generate(s, c, sc, 1);
    case EP_COMPLETIONS: return serve_generate(s, c, sc, 0);
    case EP_EMBEDDINGS: return serve_embeddings(s, c, sc);
    case EP_MODELS: return serve_models(s, c, sc, strlen(url) > 11 ? url + 11 : NULL);
    case EP_TOKENIZE: return serve_tokenize(s, c, sc);
    case EP_DETOKENIZE: return serve_detokenize(s, c, sc);
    case EP_METRICS: return serve_metrics_answer(s, c, sc);
    default: break;
    }
    serve_fail(&e, 404, NULL, "not_found", "no such endpoint");
    return serve_respond_error(s, c, sc, &e);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    serve_server *s = cls;
    serve_conn *sc = *con_cls;
    if (!sc) { /* the headers: the body follows */
        if (!(sc = calloc(1, sizeof *sc))) return MHD_NO;
        pthread_mutex_lock(&s->mu);
        s->n_open++; /* until on_completed: the response written, or the connection gone */
        pthread_mutex_unlock(&s->mu);
        sc->t0 = serve_now();
        sc->endpoint = endpoint_of(url);
        *con_cls = sc;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->p.max_body) { /* answer now; MHD closes the connection after */
            sc->too_large = 1;
            serve_error e;
            serve_fail(&e, 413, NULL, "request_too_large", "the request body is larger than %zu bytes",
                       s->p.max_body);
            return serve_respond_error(s, c, sc, &e);
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (sc->answered || sc->too_large) return MHD_YES;
        if (sc->n_body + n > s->p.max_body) {
            sc->too_large = 1;
            free(sc->body);
            sc->body = NULL, sc->n_body = sc->cap_body = 0;
            return MHD_YES;
        }
        if (sc->n_body + n + 1 > sc->cap_body) {
            size_t cap = sc->cap_body ? sc->cap_body : 4096;
            while (cap < sc->n_body + n + 1) cap *= 2;
            char *b = realloc(sc->body, cap);
            if (!b) return MHD_NO;
            sc->body = b, sc->cap_body = cap;
        }
        memcpy(sc->body + sc->n_body, upload_data, n);
        sc->n_body += n;
        sc->body[sc->n_body] = '\0';
        return MHD_YES;
    }
    if (sc->answered) return MHD_YES;
    return dispatch(s, c, sc, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    serve_conn *sc = *con_cls;
    if (!sc) return;
    serve_server *s = cls;
    pthread_mutex_lock(&s->mu);
    s->n_open--; /* serve_run polls it */
    pthread_mutex_unlock(&s->mu);
    free(sc->body);
    free(sc);
    *con_cls = NULL;
}

/* ------------------------------------------------------------ start, load, run, stop */

int serve_start(const serve_params *p, serve_server **out) {
    *out = NULL;
    serve_server *s = calloc(1, sizeof *s);
    if (!s) return fprintf(stderr, "loom serve: out of memory\n"), 1;
    s->p = *p;
    s->t_start = serve_now();
    s->created = (long)time(NULL);
    s->next_id = 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->state_cv, NULL);
    pthread_cond_init(&s->embed_cv, NULL);
    serve_metrics_init(&s->m);
    snprintf(s->host, sizeof s->host, "%s", p->host ? p->host : "127.0.0.1");
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", p->port);
    if (p->port < 0 || p->port > 65535 || getaddrinfo(s->host, port, &hints, &ai) != 0 || !ai) {
        fprintf(stderr, "loom serve: --host %s --port %d: expected a numeric IPv4 or IPv6 address and a port 0..65535\n",
                s->host, p->port);
        free(s);
        return 1;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* a connection idle for 60 s (slow headers or body, an unused keep-alive) is closed, so idle
     * clients cannot hold the 1024 connections; a request that waits for its answer is not idle
     * (MHD does not time a handler out) and a stream sends a comment every 15 s (generate.c) */
    s->daemon = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                                 ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024, MHD_OPTION_CONNECTION_TIMEOUT,
                                 (unsigned)60, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 << 10),
                                 MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        fprintf(stderr, "loom serve: cannot listen on %s:%d (in use, or not an address of this machine)\n", s->host,
                p->port);
        free(s);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : p->port;
    fprintf(stderr, "loom serve: listening on http://%s%s%s:%d\n", strchr(s->host, ':') ? "[" : "", s->host,
            strchr(s->host, ':') ? "]" : "", s->port);
    *out = s;
    return 0;
}

/* The id of a model path: its file or folder name without the extension. */
static void model_id_of(const char *path, char *id, size_t n) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && path[start - 1] != '/') start--;
    size_t end = len;
    const char *dot = NULL;
    for (size_t i = start + 1; i < len; i++)
        if (path[i] == '.') dot = path + i;
    struct stat st;
    int dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (dot && !dir) end = (size_t)(dot - path);
    snprintf(id, n, "%.*s", (int)(end - start), path + start);
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int load_bert(serve_server *s, const char *path, const char *flag) {
    if (!s->bert && loom_bert_load(path, s->p.n_threads, &s->bert) != LOOM_OK) {
        fprintf(stderr, "loom serve: %s %s: %s\n", flag, path, loom_last_error());
        return 1;
    }
    s->embed_dim = loom_bert_dim(s->bert);
    model_id_of(path, s->embed_id, sizeof s->embed_id);
    if (loom_tokenizer_load(path, &s->embed_tok) != LOOM_OK) {
        fprintf(stderr, "loom serve: %s %s: its tokenizer: %s\n", flag, path, loom_last_error());
        return 1;
    }
    return 0;
}

int serve_load(serve_server *s) {
    const serve_params *p = &s->p;
    int rc = 1;
    /* -m: a BERT folder makes an embeddings-only server */
    int bert_only = is_dir(p->model) && loom_bert_load(p->model, p->n_threads, &s->bert) == LOOM_OK;
    if (bert_only) {
        if (load_bert(s, p->model, "-m")) goto done; /* the tokenizer and the id */
        if (p->alias) snprintf(s->embed_id, sizeof s->embed_id, "%s", p->alias);
        if (p->embed_model) {
            fprintf(stderr, "loom serve: -m %s is an embedding model already; --embed-model needs a chat model in -m\n",
                    p->model);
            goto done;
        }
        if (loom_tokenizer_load(p->model, &s->tok) != LOOM_OK) {
            fprintf(stderr, "loom serve: -m %s: its tokenizer: %s\n", p->model, loom_last_error());
            goto done;
        }
    } else {
        loom_model_params mp = loom_model_default_params();
        mp.n_threads = p->n_threads;
        mp.kv_dtype = p->kv_dtype;
        if (loom_model_load(p->model, &mp, &s->model) != LOOM_OK) {
            fprintf(stderr, "loom serve: -m %s: %s\n", p->model, loom_last_error());
            goto done;
        }
        loom_status st = p->tokenizer ? loom_tokenizer_load(p->tokenizer, &s->tok)
                                      : loom_tokenizer_from_model(s->model, &s->tok);
        if (st != LOOM_OK) {
            fprintf(stderr, "loom serve: %s: %s%s\n", p->tokenizer ? p->tokenizer : p->model, loom_last_error(),
                    p->tokenizer ? "" : " (give its tokenizer with -z)");
            goto done;
        }
        loom_model_info info = loom_model_get_info(s->model);
        if (loom_tokenizer_vocab_size(s->tok) != info.vocab_size) {
            fprintf(stderr, "loom serve: the tokenizer has %d tokens, the model %d\n", loom_tokenizer_vocab_size(s->tok),
                    info.vocab_size);
            goto done;
        }
        if (p->chat_template ? loom_chat_template_init(p->chat_template, &s->tmpl) != LOOM_OK
                             : loom_chat_template_from_model(s->model, &s->tmpl) != LOOM_OK) {
            if (p->chat_template) {
                fprintf(stderr, "loom serve: --chat-template: %s\n", loom_last_error());
                goto done;
            }
            s->tmpl = NULL; /* /v1/chat/completions answers that the model has no template */
        }
        model_id_of(p->model, s->model_id, sizeof s->model_id);
        if (p->alias) snprintf(s->model_id, sizeof s->model_id, "%s", p->alias);
        loom_engine_params ep = loom_engine_default_params();
        ep.n_seq_max = p->parallel;
        ep.n_ctx = p->n_ctx ? p->n_ctx : 1024 * p->parallel;
        ep.seq_len = ep.n_ctx < info.n_ctx ? ep.n_ctx : info.n_ctx;
        if (p->n_batch) ep.n_batch = p->n_batch;
        ep.batch_invariant = p->batch_invariant;
        if (loom_engine_create(s->model, s->tok, &ep, &s->engine) != LOOM_OK) {
            fprintf(stderr, "loom serve: cannot start the engine: %s\n", loom_last_error());
            goto done;
        }
        if (p->embed_model && load_bert(s, p->embed_model, "--embed-model")) goto done;
        if (serve_engine_start(s)) goto done;
    }
    if (s->bert && serve_embed_start(s)) goto done;
    fprintf(stderr, "loom serve: ready:%s%s%s%s (%d threads, %d parallel)\n", s->model_id[0] ? " " : "", s->model_id,
            s->embed_id[0] ? " " : "", s->embed_id, p->n_threads, p->parallel);
    rc = 0;
done:
    pthread_mutex_lock(&s->mu);
    s->ready = rc == 0;
    s->load_failed = rc != 0;
    pthread_cond_broadcast(&s->state_cv);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void serve_stop(serve_server *s) {
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->state_cv);
    pthread_mutex_unlock(&s->mu);
}

void serve_run(serve_server *s) {
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) pthread_cond_wait(&s->state_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    /* stop accepting: new connections are refused, requests on open ones get 503 */
    MHD_socket ls = MHD_quiesce_daemon(s->daemon);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    double until = serve_now() + s->p.grace_s;
    pthread_mutex_lock(&s->mu);
    fprintf(stderr, "loom serve: stopping: %d requests in flight, %.0f s to finish\n", s->n_inflight, s->p.grace_s);
    /* until the in-flight requests are done and their responses written out (a stream's last
     * chunks are sent after the engine finishes it) */
    while ((s->n_inflight > 0 || s->n_embed_waiting > 0 || s->n_open > 0) && serve_now() < until) {
        pthread_mutex_unlock(&s->mu);
        usleep(20000);
        pthread_mutex_lock(&s->mu);
    }
    int left = s->n_inflight;
    pthread_mutex_unlock(&s->mu);
    if (left) {
        fprintf(stderr, "loom serve: cancelling %d requests\n", left);
        serve_cancel_all(s);
        until = serve_now() + 5;
        pthread_mutex_lock(&s->mu);
        while ((s->n_inflight > 0 || s->n_open > 0) && serve_now() < until) {
            pthread_mutex_unlock(&s->mu);
            usleep(20000);
            pthread_mutex_lock(&s->mu);
        }
        pthread_mutex_unlock(&s->mu);
    }
}

void serve_free(serve_server *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_mutex_unlock(&s->mu);
    serve_engine_stop(s); /* before the daemon: streams waiting for tokens end */
    serve_embed_stop(s);
    if (s->daemon) MHD_stop_daemon(s->daemon);
    loom_engine_free(s->engine);
    loom_chat_template_free(s->tmpl);
    loom_tokenizer_free(s->tok);
    loom_model_free(s->model);
    loom_bert_free(s->bert);
    loom_tokenizer_free(s->embed_tok);
    free(s->active);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->state_cv);
    pthread_cond_destroy(&s->embed_cv);
    free(s);
}
