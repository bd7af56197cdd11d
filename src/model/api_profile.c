/* Profiles of a model's forward steps (loom.h, loom profile): each node of
 * the program that ran timed over repetitions, grouped per layer by
 * loom_profile_collect (graph/profile.c); and the sampler after the LM head. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/timer.h"
#include "graph/profile.h"
#include "model/model.h"

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs the step once to warm up, then reps times, and leaves each node's
 * median time in the program's stats; *out is the program's graph. */
static loom_status timed_step(loom_model *m, const int32_t *ids, int n, int pos, int reps, float *logits,
                              loom_graph **out) {
    loom_graph *g = NULL;
    double *t = NULL;
    for (int r = -1; r < reps; r++) {
        loom_status s = loom_model_forward(m, ids, n, pos, logits);
        if (s != LOOM_OK) {
            free(t);
            return s;
        }
        g = loom_model_last_graph(m);
        if (r < 0) continue;
        if (!t && !(t = malloc(sizeof *t * (size_t)reps * (size_t)g->n_nodes)))
            return loom_set_error(LOOM_ERR_NOMEM, "profile: out of memory");
        for (int k = 0; k < g->n_nodes; k++) t[(size_t)k * reps + r] = g->nodes[k].stats.time_ns;
    }
    loom_profile_node_medians(g, t, reps);
    free(t);
    *out = g;
    return LOOM_OK;
}

loom_status loom_model_profile(loom_model *m, const int32_t *tokens, int n, int pos, int reps,
                               float *logits, loom_profile *out) {
    LOOM_RETURN_IF(!m || !out, LOOM_ERR_INVALID_ARG, "model_profile: NULL argument");
    memset(out, 0, sizeof *out);
    LOOM_RETURN_IF(reps < 1 || reps > 1000, LOOM_ERR_INVALID_ARG,
                   "model_profile: repetitions must be in 1..1000, got %d", reps);
    loom_model_set_timing(m, 1);
    loom_graph *g = NULL;
    loom_status s = timed_step(m, tokens, n, pos, reps, logits, &g);
    loom_model_set_timing(m, 0);
    LOOM_TRY(s);
    const char *phase = m->exec->last == m->decode ? "decode" : "prefill";
    return loom_profile_collect(g, m->cfg.n_layers, phase, loom_mode_name(m->params.mode), n, out);
}

loom_status loom_profile_add_sampler(loom_profile *p, const float *logits, int vocab,
                                     const loom_sampler_params *sp) {
    LOOM_RETURN_IF(!p || !logits || !sp, LOOM_ERR_INVALID_ARG, "profile_add_sampler: NULL argument");
    loom_sampler *s;
    LOOM_TRY(loom_sampler_init(&s, vocab, sp));
    double t[5];
    for (int i = 0; i < 5; i++) {
        int32_t tok;
        uint64_t t0 = loom_time_ns();
        loom_status st = loom_sampler_sample(s, logits, &tok);
        t[i] = (double)(loom_time_ns() - t0);
        if (st != LOOM_OK) {
            loom_sampler_free(s);
            return st;
        }
    }
    loom_sampler_free(s);
    qsort(t, 5, sizeof *t, by_value);
    /* it reads the logits once (softmax, then the candidates it sorts) */
    loom_profile_section v = {.kernels = 1, .bytes_read = 4.0 * vocab, .bytes_written = 4.0,
                              .flops = 4.0 * vocab, .time_ns = t[2]};
    return loom_profile_add_section(p, "sample", "sample", &v);
}
