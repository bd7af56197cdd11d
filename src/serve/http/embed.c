/* Embeddings (server_internal.h): each request's inputs wait in a queue; the
 * embeddings thread takes every request waiting when it wakes (after a short
 * gathering window) and embeds all their inputs with one loom_bert_embed call,
 * which packs them into variable-length batches through the TND flash
 * attention, without padding. */
#include "serve/http/server_internal.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GATHER_US 2000 /* how long the thread waits for more requests once one arrived */

static void embed_release(embed_job *j) { /* under s->mu */
    if (--j->refs > 0) return;
    pthread_cond_destroy(&j->cv);
    free(j->out);
    for (int i = 0; i < j->n; i++) free(j->texts[i]);
    free(j->texts);
    free(j);
}

static void run_batch(serve_server *s, embed_job *list) {
    int total = 0;
    for (embed_job *j = list; j; j = j->next) total += j->n;
    const char **texts = malloc(sizeof *texts * (size_t)(total ? total : 1));
    float *out = malloc(sizeof *out * (size_t)(total ? total : 1) * (size_t)s->embed_dim);
    int ok = 0;
    if (texts && out) {
        int k = 0;
        for (embed_job *j = list; j; j = j->next)
            for (int i = 0; i < j->n; i++) texts[k++] = j->texts[i];
        ok = loom_bert_embed(s->bert, texts, total, 1, out) == LOOM_OK;
    }
    if (ok) {
        size_t at = 0, d = (size_t)s->embed_dim;
        for (embed_job *j = list; j; j = j->next) {
            memcpy(j->out, out + at * d, sizeof *out * (size_t)j->n * d);
            at += (size_t)j->n;
        }
    } else /* one request's input failed the whole call: each on its own, so the others still get theirs */
        for (embed_job *j = list; j; j = j->next)
            if (loom_bert_embed(s->bert, (const char *const *)j->texts, j->n, 1, j->out) != LOOM_OK) {
                j->failed = 1;
                snprintf(j->error, sizeof j->error, "%s", loom_last_error());
            }
    free(texts), free(out);
    pthread_mutex_lock(&s->mu);
    s->m.embed_inputs += total;
    s->m.embed_batches++;
    while (list) {
        embed_job *next = list->next;
        list->done = 1;
        s->n_embed_waiting--;
        pthread_cond_signal(&list->cv);
        embed_release(list);
        list = next;
    }
    pthread_cond_broadcast(&s->state_cv);
    pthread_mutex_unlock(&s->mu);
}

static void *embed_main(void *arg) {
    serve_server *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->embed_head && !s->embed_quit) pthread_cond_wait(&s->embed_cv, &s->mu);
        if (s->embed_quit) break;
        pthread_mutex_unlock(&s->mu);
        usleep(GATHER_US); /* requests sent together arrive within this window */
        pthread_mutex_lock(&s->mu);
        embed_job *list = s->embed_head;
        s->embed_head = s->embed_tail = NULL;
        pthread_mutex_unlock(&s->mu);
        run_batch(s, list);
        pthread_mutex_lock(&s->mu);
    }
    /* stopping: the requests still queued fail */
    for (embed_job *j = s->embed_head, *next; j; j = next) {
        next = j->next;
        j->done = j->failed = 1;
        snprintf(j->error, sizeof j->error, "the server is shutting down");
        s->n_embed_waiting--;
        pthread_cond_signal(&j->cv);
        embed_release(j);
    }
    s->embed_head = s->embed_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int serve_embed_start(serve_server *s) {
    if (pthread_create(&s->embed_thread, NULL, embed_main, s) != 0) {
        fprintf(stderr, "loom serve: cannot start the embeddings thread\n");
        return 1;
    }
    s->embed_running = 1;
    return 0;
}

void serve_embed_stop(serve_server *s) {
    if (!s->embed_running) return;
    pthread_mutex_lock(&s->mu);
    s->embed_quit = 1;
    pthread_cond_broadcast(&s->embed_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->embed_thread, NULL);
    s->embed_running = 0;
}

static char *base64_floats(const float *v, int n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *b = (const unsigned char *)v; /* float32 little-endian, as OpenAI's */
    size_t len = sizeof *v * (size_t)n, w = 0;
    char *out = malloc(4 * ((len + 2) / 3) + 1);
    if (!out) return NULL;
    for (size_t i = 0; i < len; i += 3) {
        unsigned x = (unsigned)b[i] << 16 | (i + 1 < len ? (unsigned)b[i + 1] << 8 : 0) | (i + 2 < len ? b[i + 2] : 0);
        out[w++] = tab[x >> 18 & 63];
        out[w++] = tab[x >> 12 & 63];
        out[w++] = i + 1 < len ? tab[x >> 6 & 63] : '=';
        out[w++] = i + 2 < len ? tab[x & 63] : '=';
    }
    out[w] = '\0';
    return out;
}

enum MHD_Result serve_embeddings(serve_server *s, struct MHD_Connection *c, serve_conn *sc) {
    serve_error e;
    serve_embed_request req;
    if (!serve_parse_embeddings(sc->body ? sc->body : "", sc->n_body, &req, &e)) return serve_respond_error(s, c, sc, &e);
    if (!serve_check_model(s, req.model, s->bert ? s->embed_id : NULL, &e)) goto fail;
    if (req.dimensions && req.dimensions != s->embed_dim) {
        serve_fail(&e, 400, "dimensions", "invalid_value", "'dimensions' must be %d (the model's)", s->embed_dim);
        goto fail;
    }
    long tokens = 0;
    for (int i = 0; i < req.n_texts; i++) {
        size_t len = strlen(req.texts[i]);
        int32_t *ids = malloc(sizeof *ids * (len + 4));
        int n = 0;
        if (ids && loom_tokenizer_encode_ex(s->embed_tok, req.texts[i], len, LOOM_TOK_BOS | LOOM_TOK_EOS, ids,
                                            (int)(len + 4), &n) == LOOM_OK)
            tokens += n < 512 ? n : 512; /* the encoder truncates longer inputs */
        free(ids);
    }
    embed_job *j = calloc(1, sizeof *j);
    if (j) j->out = malloc(sizeof *j->out * (size_t)req.n_texts * (size_t)s->embed_dim);
    if (!j || !j->out) {
        free(j);
        serve_fail(&e, 500, NULL, NULL, "out of memory");
        goto fail;
    }
    pthread_cond_init(&j->cv, NULL);
    j->texts = req.texts, j->n = req.n_texts;
    req.texts = NULL, req.n_texts = 0;
    j->refs = 2;
    pthread_mutex_lock(&s->mu);
    if (s->n_embed_waiting >= s->p.parallel + s->p.max_queue) {
        j->refs = 1;
        embed_release(j);
        pthread_mutex_unlock(&s->mu);
        serve_fail(&e, 429, NULL, "queue_full", "the server is busy; retry later");
        goto fail;
    }
    s->n_embed_waiting++;
    if (s->embed_tail) s->embed_tail->next = j;
    else s->embed_head = j;
    s->embed_tail = j;
    s->m.embed_tokens += tokens;
    pthread_cond_signal(&s->embed_cv);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int fd = ci ? (int)ci->connect_fd : -1, gone = 0, timed_out = 0;
    while (!j->done && !gone && !timed_out) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &s->mu, &ts);
        if (j->done) break;
        gone = serve_peer_gone(fd);
        timed_out = s->p.timeout_s > 0 && serve_now() > sc->t0 + s->p.timeout_s;
    }
    cJSON *o = NULL;
    if (gone) s->m.disconnects++;
    else if (timed_out) {
        s->m.timeouts++;
        serve_fail(&e, 504, NULL, "timeout", "the request took longer than the server's --timeout");
    } else if (j->failed)
        serve_fail(&e, strstr(j->error, "shutting down") ? 503 : 400, "input", "invalid_value", "%s", j->error);
    else {
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON *data = cJSON_AddArrayToObject(o, "data");
        for (int i = 0; i < j->n; i++) {
            cJSON *d = cJSON_CreateObject();
            cJSON_AddStringToObject(d, "object", "embedding");
            cJSON_AddNumberToObject(d, "index", i);
            const float *v = j->out + (size_t)i * (size_t)s->embed_dim;
            if (req.base64) {
                char *b = base64_floats(v, s->embed_dim);
                cJSON_AddStringToObject(d, "embedding", b ? b : "");
                free(b);
            } else {
                cJSON *a = cJSON_AddArrayToObject(d, "embedding");
                for (int k = 0; k < s->embed_dim; k++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[k]));
            }
            cJSON_AddItemToArray(data, d);
        }
        cJSON_AddStringToObject(o, "model", s->embed_id);
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "prompt_tokens", (double)tokens);
        cJSON_AddNumberToObject(u, "total_tokens", (double)tokens);
    }
    embed_release(j);
    pthread_mutex_unlock(&s->mu);
    serve_embed_request_free(&req);
    if (gone) return MHD_NO;
    return o ? serve_respond_json(s, c, sc, 200, o) : serve_respond_error(s, c, sc, &e);
fail:
    serve_embed_request_free(&req);
    return serve_respond_error(s, c, sc, &e);
}
