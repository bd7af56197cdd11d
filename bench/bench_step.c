/* bench_step: where a decode step's time goes. For each mode and thread
 * count, a model's decode program runs STEPS steps at a depth (the KV cache
 * filled by one prompt pass first); each repetition re-runs the same steps
 * from the same position, so every repetition computes the same. Reported:
 * tokens/s and step wall time (medians over repetitions), the kernels' summed
 * wall time (per-node times of the program, thread 0), and the share of the
 * step spent outside kernels: step wall - kernel sum, over step wall (the
 * program's own work per step: the step block, launches, barriers; plus the
 * copy of the logits and the two clock reads per node the timing itself
 * adds). Then the mode ratios measured in the same run.
 *
 *   bench_step -m MODEL [-z TOK] [-t 1,2] [--mode step_by_step,fused] [-d 256] [-n 32] [-r 7]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/timer.h"
#include "bench_util.h"
#include "model/model.h"

#define MAX_LIST 8

static int parse_list(const char *s, int *v, int *n) {
    *n = 0;
    for (const char *p = s; *p && *n < MAX_LIST;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 1 || x > 4096) return 1;
        v[(*n)++] = (int)x;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return 1;
    }
    return *n == 0;
}

typedef struct row {
    loom_exec_mode mode;
    int threads;
    double tps, step_us, kernels_us, outside;
} row;

/* One mode and thread count: median step time with and without per-node timing. */
static int run(const char *path, loom_exec_mode mode, int threads, int depth, int steps, int reps, row *out) {
    loom_model_params p = loom_model_default_params();
    p.n_threads = threads;
    p.mode = mode;
    p.n_ctx = depth + steps + 1;
    loom_model *m;
    if (loom_model_load(path, &p, &m) != LOOM_OK) {
        fprintf(stderr, "bench_step: %s\n", loom_last_error());
        return 1;
    }
    const int V = m->cfg.vocab_size;
    float *lg = malloc(sizeof(float) * (size_t)V);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(depth + steps));
    double *wall = malloc(sizeof(double) * (size_t)reps), *tw = malloc(sizeof(double) * (size_t)reps);
    double *ksum = malloc(sizeof(double) * (size_t)reps);
    int rc = 1;
    if (!lg || !ids || !wall || !tw || !ksum) goto done;
    for (int i = 0; i < depth + steps; i++) ids[i] = 1 + (int32_t)((i * 2654435761u) % (uint32_t)(V - 1));
    if (depth && loom_model_forward(m, ids, depth, 0, lg) != LOOM_OK) goto fail;
    for (int timing = 0; timing < 2; timing++) {
        loom_model_set_timing(m, timing);
        for (int r = -1; r < reps; r++) { /* one warm-up pass */
            double t0 = loom_time_s(), kern = 0;
            for (int s = 0; s < steps; s++) {
                if (loom_model_forward(m, ids + depth + s, 1, depth + s, lg) != LOOM_OK) goto fail;
                if (timing) {
                    const loom_graph *g = loom_model_last_graph(m);
                    for (int k = 0; k < g->n_nodes; k++) kern += g->nodes[k].stats.time_ns;
                }
            }
            double t = (loom_time_s() - t0) / steps;
            if (r < 0) continue;
            if (timing) tw[r] = t, ksum[r] = kern * 1e-9 / steps;
            else wall[r] = t;
        }
    }
    double w = bench_median(wall, reps), wt = bench_median(tw, reps), k = bench_median(ksum, reps);
    *out = (row){mode, threads, 1.0 / w, w * 1e6, k * 1e6, 1.0 - k / wt};
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "bench_step: %s\n", loom_last_error());
done:
    free(lg), free(ids), free(wall), free(tw), free(ksum);
    loom_model_free(m);
    return rc;
}

int main(int argc, char **argv) {
    const char *model = NULL, *t_s = "1,2", *modes_s = "step_by_step,fused";
    int depth = 256, steps = 32, reps = 7;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") && v) model = v, i++;
        else if (!strcmp(a, "-t") && v) t_s = v, i++;
        else if (!strcmp(a, "--mode") && v) modes_s = v, i++;
        else if (!strcmp(a, "-d") && v) depth = atoi(v), i++;
        else if (!strcmp(a, "-n") && v) steps = atoi(v), i++;
        else if (!strcmp(a, "-r") && v) reps = atoi(v), i++;
        else {
            fprintf(stderr, "usage: bench_step -m MODEL [-t 1,2] [--mode step_by_step,fused] [-d DEPTH] "
                            "[-n STEPS] [-r REPS]\n");
            return 2;
        }
    }
    int tv[MAX_LIST], nt;
    if (model && access(model, R_OK) != 0) { /* the smoke test skips visibly without the shared data */
        fprintf(stderr, "bench_step: cannot read %s: skipped\n", model);
        return 77;
    }
    if (!model || parse_list(t_s, tv, &nt) || depth < 0 || steps < 1 || reps < 1) {
        fprintf(stderr, "bench_step: need -m MODEL, a thread list, depth >= 0, steps and reps >= 1\n");
        return 2;
    }
    loom_exec_mode modes[LOOM_MODE_COUNT];
    int nm = 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", modes_s);
    for (char *tok = strtok(buf, ","); tok && nm < LOOM_MODE_COUNT; tok = strtok(NULL, ","))
        if (loom_mode_parse(tok, &modes[nm++]) != LOOM_OK) {
            fprintf(stderr, "bench_step: %s\n", loom_last_error());
            return 2;
        }
    printf("bench_step: %s, decode at depth %d, %d steps per repetition, median of %d\n", model, depth, steps,
           reps);
    bench_print_cpu();
    row rows[LOOM_MODE_COUNT * MAX_LIST];
    int n = 0;
    printf("\n| mode | threads | tok/s | step us | kernels us | outside kernels |\n|---|---:|---:|---:|---:|---:|\n");
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < nm; i++) {
            if (run(model, modes[i], tv[t], depth, steps, reps, &rows[n])) return 1;
            const row *r = &rows[n++];
            printf("| %s | %d | %.1f | %.1f | %.1f | %.1f %% |\n", loom_mode_name(r->mode), r->threads, r->tps,
                   r->step_us, r->kernels_us, 100.0 * r->outside);
            fflush(stdout);
        }
    if (nm > 1) {
        printf("\n| threads | %s / %s |\n|---:|---:|\n", loom_mode_name(modes[nm - 1]), loom_mode_name(modes[0]));
        for (int t = 0; t < nt; t++) printf("| %d | %.3f |\n", tv[t], rows[t * nm + nm - 1].tps / rows[t * nm].tps);
    }
    return 0;
}
