/*
 * bench_prefix: what the batch engine's prefix cache saves on the time to
 * first token. Each round builds a prompt of P shared tokens plus S tokens of
 * its own, runs it (request A: nothing cached), then runs a second request B
 * with the same P tokens and S others after A finished (its blocks are in the
 * prefix cache): the time from adding a request to its first token event.
 * Every round takes its P tokens from a different offset of the text, so
 * nothing is shared across rounds; a warm-up round (not counted) maps the
 * pool's pages first. Reported: the medians of A and B and their ratio, and
 * the same for B with the prefix cache off (a check: it must cost as A).
 *
 *   bench_prefix -m MODEL [-z TOKENIZER] -f TEXT [-P 1000] [-S 24] [-r 7] [-t THREADS]
 *
 * The engine is the public one (include/loom.h); one sequence at a time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/file.h"
#include "loom.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Seconds from adding prompt[0..n) to its first token (one token asked). */
static int ttft(loom_engine *e, int64_t id, const int32_t *prompt, int n, double *out) {
    loom_request_params rp = loom_request_default_params();
    rp.max_tokens = 1, rp.ignore_eos = 1;
    rp.sampling.temperature = 0.0f;
    double t0 = now_s();
    if (loom_engine_add(e, id, prompt, n, &rp) != LOOM_OK) return 1;
    int got = 0;
    while (loom_engine_pending(e)) {
        const loom_engine_event *ev;
        int n_ev;
        if (loom_engine_step(e, &ev, &n_ev) != LOOM_OK) return 1;
        for (int i = 0; i < n_ev; i++)
            if (!got && ev[i].token >= 0) *out = now_s() - t0, got = 1;
    }
    return !got;
}

int main(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *tok_path = NULL;
    int P = 1000, S = 24, reps = 7, threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "-f")) text = v;
        else if (!strcmp(a, "-z")) tok_path = v;
        else if (!strcmp(a, "-P")) P = atoi(v);
        else if (!strcmp(a, "-S")) S = atoi(v);
        else if (!strcmp(a, "-r")) reps = atoi(v);
        else if (!strcmp(a, "-t")) threads = atoi(v);
        else {
            fprintf(stderr, "bench_prefix: unknown option %s\n", a);
            return 2;
        }
    }
    if (!model || !text || P < 1 || S < 1 || reps < 1 || reps > 64 || threads < 0) {
        fprintf(stderr, "usage: bench_prefix -m MODEL [-z TOKENIZER] -f TEXT [-P 1000] [-S 24] [-r 7] [-t THREADS]\n");
        return 2;
    }
    size_t len = 0;
    char *buf = NULL;
    if (loom_read_file(text, (size_t)64 << 20, &buf, &len) != LOOM_OK) {
        fprintf(stderr, "bench_prefix: %s\n", loom_last_error());
        return 1;
    }
    loom_model_params mp = loom_model_default_params();
    if (threads) mp.n_threads = threads;
    loom_model *m = NULL;
    loom_tokenizer *tok = NULL;
    int32_t *ids = malloc((len + 4) * sizeof *ids);
    int n_ids = 0, rc = 1;
    const int span = P + 2 * S, need = span + (reps + 1) * 37;
    FILE *probe = fopen(model, "rb");
    if (!probe) { /* the shared models are absent: a visible skip */
        fprintf(stderr, "bench_prefix: %s not found: skipped\n", model);
        free(ids), free(buf);
        return 77;
    }
    fclose(probe);
    if (!ids || loom_model_load(model, &mp, &m) != LOOM_OK || (tok_path ? loom_tokenizer_load(tok_path, &tok) : loom_tokenizer_from_model(m, &tok)) != LOOM_OK ||
        loom_tokenizer_encode_ex(tok, buf, len, 0, ids, (int)len + 4, &n_ids) != LOOM_OK) {
        fprintf(stderr, "bench_prefix: %s\n", loom_last_error());
        goto done;
    }
    while (n_ids < need) { /* a short text: repeat it */
        int32_t *p = realloc(ids, sizeof *ids * (size_t)n_ids * 2);
        if (!p) goto done;
        ids = p;
        memcpy(ids + n_ids, ids, sizeof *ids * (size_t)n_ids);
        n_ids *= 2;
    }
    int32_t *prompt = malloc(sizeof *prompt * (size_t)(P + S));
    double *ta = malloc(sizeof(double) * (size_t)reps * 3), *tb = ta + reps, *tc = tb + reps;
    if (!prompt || !ta) {
        free(prompt), free(ta);
        goto done;
    }
    for (int cache = 1; cache >= 0; cache--) {
        loom_engine_params ep = loom_engine_default_params();
        ep.n_seq_max = 1, ep.seq_len = P + S + 1, ep.n_ctx = 4 * (P + S + 1), ep.prefix_cache = cache;
        loom_engine *e = NULL;
        if (loom_engine_create(m, tok, &ep, &e) != LOOM_OK) {
            fprintf(stderr, "bench_prefix: %s\n", loom_last_error());
            free(prompt), free(ta);
            goto done;
        }
        int64_t id = 0;
        for (int r = -1; r < reps; r++) {
            const int32_t *base = ids + (r + 1) * 37; /* this round's text */
            double a = 0, b = 0;
            memcpy(prompt, base, sizeof *prompt * (size_t)(P + S));
            int bad = ttft(e, id++, prompt, P + S, &a);
            memcpy(prompt + P, base + P + S, sizeof *prompt * (size_t)S); /* same P, other S */
            bad = bad || ttft(e, id++, prompt, P + S, &b);
            if (bad) {
                fprintf(stderr, "bench_prefix: %s\n", loom_last_error());
                loom_engine_free(e);
                free(prompt), free(ta);
                goto done;
            }
            if (r < 0) continue; /* warm-up */
            if (cache) ta[r] = a, tb[r] = b;
            else tc[r] = b;
        }
        loom_engine_stats st = loom_engine_get_stats(e);
        if (cache) printf("prefix cache on: %ld block hits, %ld misses\n", st.prefix_hits, st.prefix_misses);
        loom_engine_free(e);
    }
    double ma = median(ta, reps), mb = median(tb, reps), mc = median(tc, reps);
    printf("| prompt | first request (nothing cached) ms | second request, %d tokens shared: ms | ratio | "
           "second with the prefix cache off: ms |\n|---|---:|---:|---:|---:|\n", P);
    printf("| %d shared + %d own | %.2f | %.2f | %.3f | %.2f |\n", P, S, ma * 1e3, mb * 1e3, mb / ma, mc * 1e3);
    printf("threads %d, %d rounds (medians), model %s\n", mp.n_threads, reps, model);
    free(prompt), free(ta);
    rc = 0;
done:
    free(ids);
    free(buf);
    loom_tokenizer_free(tok);
    loom_model_free(m);
    return rc;
}
