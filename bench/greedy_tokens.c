/*
 * greedy_tokens: the first N greedy token ids a model generates after each
 * prompt, for comparisons with another implementation on the same prompt ids
 * (bench/check_act_precision.py compares them with transformers').
 *
 *   greedy_tokens -m MODEL [-n 32] [-t THREADS] [--act-precision q8|full]
 *                 [--mode step_by_step|fused] < PROMPTS
 *
 * Each input line is one prompt as space-separated token ids (the chat
 * template applied by the caller); each output line holds the N ids
 * generated after it: argmax of the logits (lowest id on ties), exactly N
 * tokens, not stopping at an end-of-turn token, every prompt from an empty
 * cache. Errors go to stderr with exit status 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

#define MAX_PROMPT 4096

static int usage(void) {
    fprintf(stderr, "usage: greedy_tokens -m MODEL [-n 32] [-t THREADS] [--act-precision q8|full] "
                    "[--mode step_by_step|fused] < PROMPTS (one line of token ids each)\n");
    return 2;
}

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

int main(int argc, char **argv) {
    const char *model = NULL, *act = NULL, *mode = "step_by_step";
    int n_gen = 32, threads = 1;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "-n")) n_gen = atoi(v);
        else if (!strcmp(a, "-t")) threads = atoi(v);
        else if (!strcmp(a, "--act-precision")) act = v;
        else if (!strcmp(a, "--mode")) mode = v;
        else return usage();
    }
    if (!model || n_gen < 1 || threads < 1) return usage();
    loom_model_params p = loom_model_default_params();
    p.n_threads = threads;
    p.n_ctx = MAX_PROMPT + n_gen;
    p.n_ctx_clamp = 1;
    if ((act && loom_act_precision_parse(act, &p.act_precision) != LOOM_OK) ||
        loom_mode_parse(mode, &p.mode) != LOOM_OK) {
        fprintf(stderr, "greedy_tokens: %s\n", loom_last_error());
        return 2;
    }
    loom_model *m = NULL;
    if (loom_model_load(model, &p, &m) != LOOM_OK) {
        fprintf(stderr, "greedy_tokens: %s\n", loom_last_error());
        return 1;
    }
    loom_model_info info = loom_model_get_info(m);
    float *logits = malloc((size_t)info.vocab_size * sizeof *logits);
    int32_t *ids = malloc(MAX_PROMPT * sizeof *ids);
    static char line[1 << 16];
    int rc = logits && ids ? 0 : 1;
    while (rc == 0 && fgets(line, sizeof line, stdin)) {
        int n = 0;
        for (char *save = NULL, *tok = strtok_r(line, " \t\n", &save); tok && n < MAX_PROMPT;
             tok = strtok_r(NULL, " \t\n", &save))
            ids[n++] = (int32_t)atoi(tok);
        if (n == 0) continue;
        if (n + n_gen > info.n_ctx) {
            fprintf(stderr, "greedy_tokens: a prompt of %d tokens and %d more exceed the context of %d\n", n, n_gen,
                    info.n_ctx);
            rc = 1;
            break;
        }
        loom_status s = loom_model_forward(m, ids, n, 0, logits);
        for (int i = 0; s == LOOM_OK && i < n_gen; i++) {
            int32_t next = argmax(logits, info.vocab_size);
            printf("%s%d", i ? " " : "", next);
            if (i + 1 < n_gen) s = loom_model_forward(m, &next, 1, n + i, logits);
        }
        printf("\n");
        fflush(stdout);
        if (s != LOOM_OK) {
            fprintf(stderr, "greedy_tokens: %s\n", loom_last_error());
            rc = 1;
        }
    }
    free(logits);
    free(ids);
    loom_model_free(m);
    return rc;
}
