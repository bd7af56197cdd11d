/* Chat completions and completions (server_internal.h): a request joins the
 * engine, the engine thread steps it with the others and appends its events to
 * the request's queue, and the connection's thread answers once it finished
 * or streams it as server-sent events. A client that goes away, a timeout or a
 * stop cancels the request in the engine, which frees its KV blocks at the
 * next step. */
#include "serve/http/server_internal.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_SLICE_S 0.05   /* how often a waiting connection checks its client and deadline */
#define PROFILE_EVERY_S 1.0 /* per-layer accounting of a step for /metrics at most this often */
#define KEEPALIVE_S 15.0    /* a stream waiting this long for a token sends an SSE comment (MHD closes
                               connections idle for 60 s) */

static void abs_time(struct timespec *ts, double from_now) {
    clock_gettime(CLOCK_REALTIME, ts);
    long ns = ts->tv_nsec + (long)(from_now * 1e9);
    ts->tv_sec += ns / 1000000000L;
    ts->tv_nsec = ns % 1000000000L;
}

/* ------------------------------------------------------------ jobs */

static void job_release(serve_server *s, gen_job *j) { /* under s->mu */
    if (--j->refs > 0) return;
    pthread_cond_destroy(&j->cv);
    serve_gen_request_free(&j->req);
    free(j->text), free(j->toks), free(j->out);
    free(j);
}

static int text_append(gen_job *j, const char *t, size_t n) {
    if (j->n_text + n + 1 > j->cap_text) {
        size_t cap = j->cap_text ? 2 * j->cap_text : 256;
        while (cap < j->n_text + n + 1) cap *= 2;
        char *p = realloc(j->text, cap);
        if (!p) return 0;
        j->text = p, j->cap_text = cap;
    }
    memcpy(j->text + j->n_text, t, n);
    j->n_text += n;
    j->text[j->n_text] = '\0';
    return 1;
}

static void remove_active(serve_server *s, gen_job *j) { /* under s->mu */
    for (int i = 0; i < s->n_active; i++)
        if (s->active[i] == j) {
            s->active[i] = s->active[--s->n_active];
            return;
        }
}

/* The engine is done with j (finished, failed or cancelled). Under s->mu. */
static void job_finish(serve_server *s, gen_job *j, loom_finish_reason why, const char *error) {
    if (j->done) return;
    j->done = 1;
    j->finish = why;
    if (error) snprintf(j->error, sizeof j->error, "%s", error);
    remove_active(s, j);
    s->n_inflight--;
    pthread_cond_signal(&j->cv);
    pthread_cond_broadcast(&s->state_cv);
    job_release(s, j);
}

/* One event of the engine for j. Under s->mu. */
static void job_event(serve_server *s, gen_job *j, const loom_engine_event *ev, double now) {
    if (ev->token >= 0) {
        if (j->n_gen == 0) {
            j->t_first = now;
            serve_histogram_add(&s->m.ttft, now - j->t_arrive);
        } else
            serve_histogram_add(&s->m.itl, now - j->t_last);
        j->t_last = now;
        s->m.generated_tokens++;
        if (j->req.want_logprobs) {
            if (j->n_toks == j->cap_toks) {
                int cap = j->cap_toks ? 2 * j->cap_toks : 16;
                gen_tok *t = realloc(j->toks, sizeof *t * (size_t)cap);
                if (t) j->toks = t, j->cap_toks = cap;
            }
            if (j->n_toks < j->cap_toks) {
                gen_tok *t = &j->toks[j->n_toks++];
                t->token = ev->token, t->prev = j->last_token, t->logprob = ev->logprob.logprob;
                t->n_top = ev->n_top < j->req.top_logprobs ? ev->n_top : j->req.top_logprobs;
                if (t->n_top > 0) memcpy(t->top, ev->top, sizeof *t->top * (size_t)t->n_top);
            }
        }
        j->last_token = ev->token;
    }
    if (ev->text_len && !text_append(j, ev->text, ev->text_len)) {
        loom_engine_cancel(s->engine, j->id);
        snprintf(j->error, sizeof j->error, "out of memory");
    }
    if (!j->n_prompt && ev->n_prompt) {
        s->m.prompt_tokens += ev->n_prompt;
        s->m.cached_prompt_tokens += ev->n_cached;
    }
    j->n_prompt = ev->n_prompt, j->n_gen = ev->n_generated, j->n_cached = ev->n_cached;
    if (ev->finish) job_finish(s, j, ev->finish, ev->error);
    else pthread_cond_signal(&j->cv);
}

static gen_job *find_active(serve_server *s, int64_t id) {
    for (int i = 0; i < s->n_active; i++)
        if (s->active[i]->id == id) return s->active[i];
    return NULL;
}

/* ------------------------------------------------------------ the engine thread */

static void take_profile(serve_server *s) {
    loom_profile prof;
    if (loom_engine_last_profile(s->engine, &prof) != LOOM_OK) return;
    pthread_mutex_lock(&s->mu);
    int n = prof.n_sections < MAX_PROFILE_SECTIONS ? prof.n_sections : MAX_PROFILE_SECTIONS;
    for (int i = 0; i < n; i++) {
        serve_layer_stats *l = &s->m.layers[i];
        snprintf(l->name, sizeof l->name, "%s", prof.sections[i].name);
        l->kernels = prof.sections[i].kernels;
        l->bytes_read = prof.sections[i].bytes_read;
        l->bytes_written = prof.sections[i].bytes_written;
        l->flops = prof.sections[i].flops;
    }
    s->m.n_layers = n;
    s->m.profile_tokens = prof.n_tokens;
    snprintf(s->m.profile_phase, sizeof s->m.profile_phase, "%s", prof.phase);
    pthread_mutex_unlock(&s->mu);
    loom_profile_free(&prof);
}

static void *engine_main(void *arg) {
    serve_server *s = arg;
    double last_profile = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int quit = s->engine_quit;
        pthread_mutex_unlock(&s->mu);
        if (quit) break;
        if (!loom_engine_pending(s->engine)) {
            loom_engine_wait(s->engine, 200);
            continue;
        }
        const loom_engine_event *ev;
        int n_ev = 0;
        loom_status st = loom_engine_step(s->engine, &ev, &n_ev);
        if (st != LOOM_OK && !n_ev) fprintf(stderr, "loom serve: engine step: %s\n", loom_last_error());
        double now = serve_now();
        loom_engine_stats es = loom_engine_get_stats(s->engine);
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < n_ev; i++) {
            gen_job *j = find_active(s, ev[i].id);
            if (j) job_event(s, j, &ev[i], now);
        }
        s->m.engine = es;
        pthread_mutex_unlock(&s->mu);
        if (now - last_profile >= PROFILE_EVERY_S && es.steps > 0) {
            take_profile(s);
            last_profile = now;
        }
    }
    return NULL;
}

int serve_engine_start(serve_server *s) {
    if (pthread_create(&s->engine_thread, NULL, engine_main, s) != 0) {
        fprintf(stderr, "loom serve: cannot start the engine thread\n");
        return 1;
    }
    s->engine_running = 1;
    return 0;
}

void serve_cancel_all(serve_server *s) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_active; i++) loom_engine_cancel(s->engine, s->active[i]->id);
    pthread_mutex_unlock(&s->mu);
}

void serve_engine_stop(serve_server *s) {
    if (!s->engine_running) return;
    pthread_mutex_lock(&s->mu);
    s->engine_quit = 1;
    pthread_mutex_unlock(&s->mu);
    loom_engine_wake(s->engine);
    pthread_join(s->engine_thread, NULL);
    s->engine_running = 0;
    pthread_mutex_lock(&s->mu); /* requests the engine will not step again end cancelled */
    while (s->n_active) job_finish(s, s->active[0], LOOM_FINISH_CANCELLED, "the server stopped");
    pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------ answers */

static cJSON *token_text(const serve_server *s, int prev, int token) {
    size_t n = 0;
    const char *t = loom_tokenizer_decode(s->tok, prev, token, &n);
    return serve_json_text(t ? t : "", t ? n : 0);
}

static cJSON *token_bytes(const serve_server *s, int prev, int token) {
    size_t n = 0;
    const char *t = loom_tokenizer_decode(s->tok, prev, token, &n);
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; t && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)t[i]));
    return a;
}

/* Log-probabilities of tokens [from, to) in the chat shape ({"content": [...]})
 * or the completions shape ({"tokens", "token_logprobs", "top_logprobs", "text_offset"}). */
static cJSON *logprobs_json(const serve_server *s, const gen_job *j, int from, int to, size_t text_off) {
    cJSON *o = cJSON_CreateObject();
    if (j->req.chat) {
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        for (int i = from; i < to; i++) {
            const gen_tok *t = &j->toks[i];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddItemToObject(e, "token", token_text(s, t->prev, t->token));
            cJSON_AddNumberToObject(e, "logprob", t->logprob);
            cJSON_AddItemToObject(e, "bytes", token_bytes(s, t->prev, t->token));
            cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
            for (int k = 0; k < t->n_top; k++) {
                cJSON *a = cJSON_CreateObject();
                cJSON_AddItemToObject(a, "token", token_text(s, t->prev, t->top[k].token));
                cJSON_AddNumberToObject(a, "logprob", t->top[k].logprob);
                cJSON_AddItemToObject(a, "bytes", token_bytes(s, t->prev, t->top[k].token));
                cJSON_AddItemToArray(top, a);
            }
            cJSON_AddItemToArray(content, e);
        }
        return o;
    }
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    size_t off = text_off;
    for (int i = from; i < to; i++) {
        const gen_tok *t = &j->toks[i];
        cJSON_AddItemToArray(tokens, token_text(s, t->prev, t->token));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(t->logprob));
        cJSON *top = cJSON_CreateObject();
        for (int k = 0; k < t->n_top; k++) {
            size_t n = 0;
            const char *txt = loom_tokenizer_decode(s->tok, t->prev, t->top[k].token, &n);
            cJSON *key = serve_json_text(txt ? txt : "", txt ? n : 0);
            if (key && !cJSON_GetObjectItemCaseSensitive(top, key->valuestring))
                cJSON_AddNumberToObject(top, key->valuestring, t->top[k].logprob);
            cJSON_Delete(key);
        }
        cJSON_AddItemToArray(tops, top);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        size_t n = 0;
        loom_tokenizer_decode(s->tok, t->prev, t->token, &n);
        off += n;
    }
    return o;
}

static cJSON *usage_json(const gen_job *j) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", j->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", j->n_prompt + j->n_gen);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", j->n_cached);
    return u;
}

static cJSON *envelope(const serve_server *s, const gen_job *j, int chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id_str);
    cJSON_AddStringToObject(o, "object", j->req.chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                     : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->model_id);
    char fp[48];
    snprintf(fp, sizeof fp, "loom-%s", loom_version());
    cJSON_AddStringToObject(o, "system_fingerprint", fp);
    return o;
}

static const char *finish_name(loom_finish_reason f) { return f == LOOM_FINISH_LENGTH ? "length" : "stop"; }

/* The whole answer of a finished request. */
static cJSON *full_answer(const serve_server *s, const gen_job *j) {
    cJSON *o = envelope(s, j, 0), *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (j->req.chat) {
        cJSON *msg = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        cJSON_AddItemToObject(msg, "content", serve_json_text(j->text ? j->text : "", j->n_text));
    } else
        cJSON_AddItemToObject(c, "text", serve_json_text(j->text ? j->text : "", j->n_text));
    if (j->req.want_logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs_json(s, j, 0, j->n_toks, 0));
    else cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", finish_name(j->finish));
    cJSON_AddItemToArray(choices, c);
    cJSON_AddItemToObject(o, "usage", usage_json(j));
    return o;
}

/* One SSE chunk: text (may be empty), the tokens [from, to) with their
 * log-probabilities, finish (NULL while running); role in the first. */
static cJSON *chunk_json(const serve_server *s, const gen_job *j, const char *text, size_t n, int from, int to,
                         const char *finish, int first) {
    cJSON *o = envelope(s, j, 1), *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (j->req.chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (first) cJSON_AddStringToObject(d, "role", "assistant");
        if (n || first) cJSON_AddItemToObject(d, "content", serve_json_text(text, n));
    } else
        cJSON_AddItemToObject(c, "text", serve_json_text(text, n));
    if (j->req.want_logprobs && to > from) cJSON_AddItemToObject(c, "logprobs", logprobs_json(s, j, from, to, 0));
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    if (j->req.include_usage) cJSON_AddNullToObject(o, "usage");
    return o;
}

static int out_append(gen_job *j, const char *t, size_t n) {
    char *p = realloc(j->out, j->n_out + n + 1);
    if (!p) return 0;
    memcpy(p + j->n_out, t, n);
    j->out = p, j->n_out += n;
    return 1;
}

static int sse_event(gen_job *j, cJSON *o) {
    char *t = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!t) return 0;
    int ok = out_append(j, "data: ", 6) && out_append(j, t, strlen(t)) && out_append(j, "\n\n", 2);
    cJSON_free(t);
    return ok;
}

static cJSON *error_json(const char *message, const char *type, const char *code) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    cJSON_AddStringToObject(e, "code", code);
    return o;
}

/* Waits (under s->mu) until j has news (text, tokens), finished, its deadline
 * passed, its client left (cancelling it in the engine in these two cases) or
 * max_wait seconds passed. */
static void wait_news(serve_server *s, gen_job *j, size_t had_text, int had_toks, double max_wait) {
    double until = serve_now() + max_wait;
    while (!j->done && j->n_text == had_text && j->n_toks == had_toks && !j->timed_out && !j->gone) {
        double now = serve_now();
        if (now >= until) return;
        if (j->t_deadline > 0 && now >= j->t_deadline) {
            j->timed_out = 1;
            s->m.timeouts++;
        } else if (serve_peer_gone(j->fd)) {
            j->gone = 1;
            s->m.disconnects++;
        } else {
            struct timespec ts;
            abs_time(&ts, WAIT_SLICE_S);
            pthread_cond_timedwait(&j->cv, &s->mu, &ts);
            continue;
        }
        loom_engine_cancel(s->engine, j->id);
    }
}

/* Builds the next SSE events of a stream into j->out (under s->mu). */
static void stream_next(serve_server *s, gen_job *j) {
    if (j->phase == 0) { /* the role first, as OpenAI's streams begin */
        j->phase = 1;
        sse_event(j, chunk_json(s, j, "", 0, 0, 0, NULL, 1));
        return;
    }
    size_t avail = j->n_text - j->n_sent;
    size_t rel = j->done || j->timed_out ? avail : serve_utf8_complete(j->text + j->n_sent, avail);
    if (!rel && j->n_toks == j->toks_sent && !j->done && !j->timed_out) { /* nothing to send yet */
        size_t had = j->n_text;
        int had_toks = j->n_toks;
        wait_news(s, j, had, had_toks, KEEPALIVE_S);
        if (j->gone) return;
        if (!j->done && !j->timed_out && j->n_text == had && j->n_toks == had_toks) {
            static const char keepalive[] = ": keep-alive\n\n"; /* an SSE comment: the connection is not idle */
            out_append(j, keepalive, sizeof keepalive - 1);
            return;
        }
        avail = j->n_text - j->n_sent;
        rel = j->done || j->timed_out ? avail : serve_utf8_complete(j->text + j->n_sent, avail);
    }
    if (rel || j->n_toks > j->toks_sent)
        sse_event(j, chunk_json(s, j, j->text ? j->text + j->n_sent : "", rel, j->toks_sent, j->n_toks, NULL, 0));
    j->n_sent += rel, j->toks_sent = j->n_toks;
    if (!j->done && !j->timed_out) return;
    if (j->timed_out)
        sse_event(j, error_json("the request took longer than the server's --timeout", "timeout_error", "timeout"));
    else if (j->finish == LOOM_FINISH_ERROR || j->finish == LOOM_FINISH_CANCELLED)
        sse_event(j, error_json(j->finish == LOOM_FINISH_ERROR ? j->error : "the server is shutting down",
                                "server_error", j->finish == LOOM_FINISH_ERROR ? "engine_error" : "shutting_down"));
    else {
        sse_event(j, chunk_json(s, j, "", 0, 0, 0, finish_name(j->finish), 0));
        if (j->req.include_usage) {
            cJSON *o = envelope(s, j, 1);
            cJSON_AddArrayToObject(o, "choices");
            cJSON_AddItemToObject(o, "usage", usage_json(j));
            sse_event(j, o);
        }
    }
    static const char done[] = "data: [DONE]\n\n";
    out_append(j, done, sizeof done - 1);
    j->phase = 2;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    gen_job *j = cls;
    serve_server *s = j->srv;
    for (;;) {
        if (j->out_at < j->n_out) {
            size_t n = j->n_out - j->out_at < max ? j->n_out - j->out_at : max;
            memcpy(buf, j->out + j->out_at, n);
            j->out_at += n;
            return (ssize_t)n;
        }
        j->n_out = j->out_at = 0;
        if (j->phase == 2) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&s->mu);
        stream_next(s, j);
        int gone = j->gone;
        pthread_mutex_unlock(&s->mu);
        if (gone) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls) {
    gen_job *j = cls;
    serve_server *s = j->srv;
    pthread_mutex_lock(&s->mu);
    if (!j->done) { /* the client went away or the connection failed: free its blocks now */
        if (!j->gone && !j->timed_out) s->m.disconnects++;
        loom_engine_cancel(s->engine, j->id);
    }
    job_release(s, j);
    pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------ the handler */

/* The engine's message without its "request N: " prefix (the id is the server's). */
static const char *engine_message(void) {
    const char *m = loom_last_error();
    if (!strncmp(m, "request ", 8)) {
        const char *c = strstr(m, ": ");
        if (c) return c + 2;
    }
    return m;
}

enum MHD_Result serve_generate(serve_server *s, struct MHD_Connection *c, serve_conn *sc, int chat) {
    serve_error e;
    gen_job *j = calloc(1, sizeof *j);
    if (!j) {
        serve_fail(&e, 500, NULL, NULL, "out of memory");
        return serve_respond_error(s, c, sc, &e);
    }
    j->srv = s;
    j->refs = 1;
    pthread_cond_init(&j->cv, NULL);
    char *rendered = NULL;
    enum MHD_Result ret;
    if (!serve_parse_generate(sc->body ? sc->body : "", sc->n_body, chat, &j->req, &e)) goto fail;
    if (!serve_check_model(s, j->req.model, s->engine ? s->model_id : NULL, &e)) goto fail;
    if (chat && !s->tmpl) {
        serve_fail(&e, 400, "messages", "no_chat_template",
                   "the model has no chat template (start the server with --chat-template)");
        goto fail;
    }
    if (chat && loom_chat_render(s->tmpl, j->req.msgs, j->req.n_msgs, 1, &rendered) != LOOM_OK) {
        serve_fail(&e, 400, "messages", "invalid_value", "'messages': %s", loom_last_error());
        goto fail;
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? (int)ci->connect_fd : -1;
    j->model_id = s->model_id;
    j->created = (long)time(NULL);
    j->t_arrive = sc->t0;
    j->t_deadline = s->p.timeout_s > 0 ? sc->t0 + s->p.timeout_s : 0;
    j->last_token = -1;
    /* admission: the running sequences plus a bounded queue */
    pthread_mutex_lock(&s->mu);
    if (s->n_inflight >= s->p.parallel + s->p.max_queue) {
        pthread_mutex_unlock(&s->mu);
        serve_fail(&e, 429, NULL, "queue_full", "the server is busy (%d requests running or queued); retry later",
                   s->p.parallel + s->p.max_queue);
        goto fail;
    }
    if (s->n_active == s->cap_active) {
        int cap = s->cap_active ? 2 * s->cap_active : 64;
        gen_job **a = realloc(s->active, sizeof *a * (size_t)cap);
        if (!a) {
            pthread_mutex_unlock(&s->mu);
            serve_fail(&e, 500, NULL, NULL, "out of memory");
            goto fail;
        }
        s->active = a, s->cap_active = cap;
    }
    j->id = s->next_id++;
    snprintf(j->id_str, sizeof j->id_str, "%s-%llx%08llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)s->created,
             (unsigned long long)j->id);
    j->refs = 2; /* the engine's until its finish event */
    s->active[s->n_active++] = j;
    s->n_inflight++;
    pthread_mutex_unlock(&s->mu);
    if (!j->req.has_seed) j->req.params.sampling.seed = s->seed_base + (uint64_t)j->id;
    /* the engine adds BOS when the vocabulary asks: not a second one from the template */
    const char *text = chat ? rendered + (loom_tokenizer_add_bos(s->tok) ? loom_chat_bos_length(s->tmpl, rendered) : 0)
                            : j->req.prompt;
    loom_status st = j->req.prompt_ids
                         ? loom_engine_add(s->engine, j->id, j->req.prompt_ids, j->req.n_prompt_ids, &j->req.params)
                         : loom_engine_add_text(s->engine, j->id, text, strlen(text), &j->req.params, NULL);
    free(rendered);
    rendered = NULL;
    if (st != LOOM_OK) {
        const char *msg = engine_message();
        serve_fail(&e, st == LOOM_ERR_NOMEM ? 500 : 400, chat ? "messages" : "prompt",
                   strstr(msg, "does not fit") ? "context_length_exceeded" : "invalid_value", "%s", msg);
        pthread_mutex_lock(&s->mu);
        remove_active(s, j);
        s->n_inflight--;
        j->refs--; /* the engine never had it */
        pthread_mutex_unlock(&s->mu);
        goto fail;
    }
    if (j->req.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, j, stream_free);
        if (!r) {
            pthread_mutex_lock(&s->mu);
            loom_engine_cancel(s->engine, j->id);
            job_release(s, j);
            pthread_mutex_unlock(&s->mu);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        sc->answered = 1;
        serve_count(s, sc, 200);
        return ret;
    }
    pthread_mutex_lock(&s->mu);
    while (!j->done && !j->timed_out && !j->gone) wait_news(s, j, j->n_text, j->n_toks, 3600);
    cJSON *answer = NULL;
    int gone = j->gone;
    if (j->timed_out) serve_fail(&e, 504, NULL, "timeout", "the request took longer than the server's --timeout");
    else if (j->finish == LOOM_FINISH_ERROR) serve_fail(&e, 500, NULL, "engine_error", "%s", j->error);
    else if (j->finish == LOOM_FINISH_CANCELLED) serve_fail(&e, 503, NULL, "shutting_down", "the server is shutting down");
    else answer = full_answer(s, j);
    job_release(s, j);
    pthread_mutex_unlock(&s->mu);
    if (gone) return MHD_NO; /* nobody to answer: close the connection */
    if (!answer) return serve_respond_error(s, c, sc, &e);
    return serve_respond_json(s, c, sc, 200, answer);
fail:
    free(rendered);
    ret = serve_respond_error(s, c, sc, &e);
    pthread_mutex_lock(&s->mu);
    job_release(s, j);
    pthread_mutex_unlock(&s->mu);
    return ret;
}
