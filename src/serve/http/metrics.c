/* GET /metrics in Prometheus' text format (docs/serve.md lists the metrics). */
#include "serve/http/server_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double ttft_bounds[N_TTFT_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, -1};
static const double itl_bounds[N_ITL_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06,
                                                 0.08,  0.1,    0.25,  0.5,  1,    -1};

void serve_metrics_init(serve_metrics *m) {
    memset(m, 0, sizeof *m);
    m->ttft.bounds = ttft_bounds, m->ttft.n = N_TTFT_BUCKETS;
    m->itl.bounds = itl_bounds, m->itl.n = N_ITL_BUCKETS;
}

void serve_histogram_add(serve_histogram *h, double v) {
    int b = 0;
    while (b < h->n - 1 && v > h->bounds[b]) b++;
    h->count[b]++;
    h->sum += v;
    h->total++;
}

typedef struct text {
    char *p;
    size_t n, cap;
    int failed;
} text;

__attribute__((format(printf, 2, 3))) static void put(text *t, const char *fmt, ...) {
    for (int tries = 0; tries < 2 && !t->failed; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->p ? t->p + t->n : NULL, t->p ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            t->failed = 1;
            return;
        }
        if (t->p && t->n + (size_t)k < t->cap) {
            t->n += (size_t)k;
            return;
        }
        size_t cap = t->cap ? t->cap : 8192;
        while (cap < t->n + (size_t)k + 1) cap *= 2;
        char *q = realloc(t->p, cap);
        if (!q) {
            t->failed = 1;
            return;
        }
        t->p = q, t->cap = cap;
    }
}

static void head(text *t, const char *name, const char *type, const char *help) {
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A metric of one unlabelled integer value: its HELP and TYPE lines, then the value. */
static void metric(text *t, const char *name, const char *type, const char *help, long v) {
    head(t, name, type, help);
    put(t, "%s %ld\n", name, v);
}

static void histogram(text *t, const char *name, const char *help, const serve_histogram *h) {
    head(t, name, "histogram", help);
    long cum = 0;
    for (int b = 0; b < h->n; b++) {
        cum += h->count[b];
        if (h->bounds[b] < 0) put(t, "%s_bucket{le=\"+Inf\"} %ld\n", name, cum);
        else put(t, "%s_bucket{le=\"%g\"} %ld\n", name, h->bounds[b], cum);
    }
    put(t, "%s_sum %.6f\n%s_count %ld\n", name, h->sum, name, h->total);
}

static const char *const ep_names[EP_COUNT] = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings",
                                               "/v1/models", "/health", "/tokenize", "/detokenize", "/metrics",
                                               "other"};
static const char *const status_names[N_STATUSES] = {"200", "400", "401", "404", "405", "413",
                                                     "429", "500", "503", "504", "", "other"};

enum MHD_Result serve_metrics_answer(serve_server *s, struct MHD_Connection *c, serve_conn *sc) {
    text t = {0};
    pthread_mutex_lock(&s->mu);
    serve_metrics m = s->m; /* a consistent copy */
    int inflight = s->n_inflight, embed_waiting = s->n_embed_waiting;
    pthread_mutex_unlock(&s->mu);
    head(&t, "loom_requests_total", "counter", "HTTP requests answered, by endpoint and status");
    for (int e = 0; e < EP_COUNT; e++)
        for (int k = 0; k < N_STATUSES; k++)
            if (m.requests[e][k])
                put(&t, "loom_requests_total{endpoint=\"%s\",status=\"%s\"} %ld\n", ep_names[e], status_names[k],
                    m.requests[e][k]);
    metric(&t, "loom_prompt_tokens_total", "counter", "prompt tokens of generation requests", m.prompt_tokens);
    metric(&t, "loom_prompt_tokens_cached_total", "counter", "prompt tokens found in the prefix cache", m.cached_prompt_tokens);
    metric(&t, "loom_generation_tokens_total", "counter", "tokens generated", m.generated_tokens);
    metric(&t, "loom_requests_in_flight", "gauge", "generation requests admitted and not finished", inflight);
    metric(&t, "loom_queue_depth", "gauge", "generation requests waiting for a sequence slot (as of the last step)", m.engine.waiting);
    metric(&t, "loom_running_sequences", "gauge", "sequences in the running batch (as of the last step)", m.engine.running);
    metric(&t, "loom_kv_blocks_used", "gauge", "KV cache blocks held by sequences", m.engine.blocks_used);
    metric(&t, "loom_kv_blocks_free", "gauge", "KV cache blocks free and holding nothing reusable", m.engine.blocks_free);
    metric(&t, "loom_kv_blocks_cached", "gauge", "free KV blocks that keep a prompt prefix for reuse", m.engine.blocks_cached);
    metric(&t, "loom_kv_blocks_total", "gauge", "KV cache blocks of the pool", m.engine.n_blocks);
    metric(&t, "loom_kv_block_size", "gauge", "positions per KV block", m.engine.block_size);
    metric(&t, "loom_prefix_cache_hits_total", "counter", "full prompt blocks found in the prefix cache", m.engine.prefix_hits);
    metric(&t, "loom_prefix_cache_misses_total", "counter", "full prompt blocks not in the prefix cache", m.engine.prefix_misses);
    long looked = m.engine.prefix_hits + m.engine.prefix_misses;
    head(&t, "loom_prefix_cache_hit_rate", "gauge", "hits / (hits + misses) of the prefix cache");
    put(&t, "loom_prefix_cache_hit_rate %.6f\n", looked ? (double)m.engine.prefix_hits / (double)looked : 0.0);
    metric(&t, "loom_preemptions_total", "counter", "sequences preempted (recomputed later) when the KV pool ran short", m.engine.preemptions);
    metric(&t, "loom_engine_steps_total", "counter", "forward steps of the batch engine", m.engine.steps);
    metric(&t, "loom_engine_rows_total", "counter", "token rows the steps ran (decode rows and prompt chunks)", m.engine.rows);
    histogram(&t, "loom_time_to_first_token_seconds", "from a request's arrival to its first token", &m.ttft);
    histogram(&t, "loom_inter_token_latency_seconds", "between two tokens of one request", &m.itl);
    metric(&t, "loom_request_timeouts_total", "counter", "requests cancelled by --timeout", m.timeouts);
    metric(&t, "loom_client_disconnects_total", "counter", "requests cancelled because their client went away", m.disconnects);
    metric(&t, "loom_embedding_inputs_total", "counter", "texts embedded", m.embed_inputs);
    metric(&t, "loom_embedding_batches_total", "counter", "encoder calls (the inputs of all waiting requests in one)", m.embed_batches);
    metric(&t, "loom_embedding_tokens_total", "counter", "tokens of the texts embedded", m.embed_tokens);
    metric(&t, "loom_embedding_queue_depth", "gauge", "embeddings requests waiting or running", embed_waiting);
    /* loom's own accounting: a recent step's kernels and main-memory traffic per layer */
    head(&t, "loom_step_rows", "gauge", "token rows of the step the per-layer metrics describe (sampled once a second)");
    put(&t, "loom_step_rows{phase=\"%s\"} %d\n", m.profile_phase[0] ? m.profile_phase : "none", m.profile_tokens);
    static const char *const names[4] = {"loom_step_layer_kernels", "loom_step_layer_bytes_read",
                                         "loom_step_layer_bytes_written", "loom_step_layer_flops"};
    static const char *const helps[4] = {"kernel launches per layer of a recent step",
                                         "bytes read from main memory per layer of a recent step",
                                         "bytes written to main memory per layer of a recent step",
                                         "floating-point operations per layer of a recent step"};
    for (int k = 0; k < 4; k++) {
        head(&t, names[k], "gauge", helps[k]);
        for (int i = 0; i < m.n_layers; i++) {
            const serve_layer_stats *l = &m.layers[i];
            double v = k == 0 ? l->kernels : k == 1 ? l->bytes_read : k == 2 ? l->bytes_written : l->flops;
            put(&t, "%s{layer=\"%s\"} %.0f\n", names[k], l->name, v);
        }
    }
    enum MHD_Result r;
    if (t.failed || !t.p) {
        serve_error e;
        serve_fail(&e, 500, NULL, NULL, "out of memory");
        r = serve_respond_error(s, c, sc, &e);
    } else
        r = serve_respond(s, c, sc, 200, t.p, "text/plain; version=0.0.4; charset=utf-8");
    free(t.p);
    return r;
}
