/* loom bench: prompt processing and generation speed with llama-bench's
 * semantics. For every mode x KV cache type x activation precision x thread
 * count x depth x test:
 *   ppN  N prompt tokens (BOS then pseudo-random ids) in one forward pass;
 *        tokens/s = N / time.
 *   tgN  N tokens generated one at a time; tokens/s = N / time.
 * At depth d (-d) the cache first holds d tokens (one untimed forward pass;
 * the tests write only the positions after them, so it is filled once), and
 * the test runs at positions d, d + 1, ...: "tg128 @ d2048" is the speed of
 * generation with 2048 to 2175 tokens of context.
 * One warm-up run per test, then -r repetitions: median, min, max, stdev.
 * Also peak RSS of the process so far and the planned intermediate memory
 * (the arena the planner assigned to the graph). Rows name the model as
 * llama-bench's do: type, size and parameter count of its weights as loaded,
 * and the backend (CPU, with the kernels' instruction set). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "args.h"
#include "cli.h"

#define MAX_LIST 16

/* The model's tensors converted at load (K-quants), for the header. */
static char converted[256];

/* What llama-bench's model, size and params columns say about a model. */
typedef struct model_desc {
    char   type[64];    /* "llama 135M q4_1": architecture, parameters, the type of most weight bytes */
    double bytes;       /* of the weights as loaded (converted K-quants included) */
    double params;      /* weight elements; a tied output matrix counts once */
    char   backend[32]; /* "CPU (avx512)" */
} model_desc;

static void describe_model(const loom_model *m, model_desc *d) {
    loom_model_desc md;
    if (loom_model_describe(m, &md) != LOOM_OK) memset(&md, 0, sizeof md);
    d->bytes = (double)md.weight_bytes;
    d->params = (double)md.n_params;
    double p = d->params;
    char count[16];
    if (p >= 1e9) snprintf(count, sizeof count, "%.1fB", p / 1e9);
    else if (p >= 1e6) snprintf(count, sizeof count, "%.0fM", p / 1e6);
    else snprintf(count, sizeof count, "%.0fK", p / 1e3);
    snprintf(d->type, sizeof d->type, "llama %s %s", count, loom_dtype_name(md.main_dtype));
    snprintf(d->backend, sizeof d->backend, "CPU (%s)", loom_cpu_isa_name());
    snprintf(converted, sizeof converted, "%s", md.converted);
}

/* "85.82 MiB" / "1.23 GiB" as llama-bench prints sizes; "134.52 M" / "6.74 B" for parameters. */
static void human_bytes(double b, char *buf, size_t n) {
    if (b >= 1024.0 * 1024 * 1024) snprintf(buf, n, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else snprintf(buf, n, "%.2f MiB", b / (1024.0 * 1024));
}
static void human_params(double p, char *buf, size_t n) {
    if (p >= 1e9) snprintf(buf, n, "%.2f B", p / 1e9);
    else snprintf(buf, n, "%.2f M", p / 1e6);
}

/* "1,2,4" -> values; 0 on success. */
static int parse_int_list(const char *opt, const char *s, int *v, int *n, int min) {
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || x < min || x > 1000000 || *n >= MAX_LIST) {
            fprintf(stderr, "loom bench: option '%s' expects a comma-separated list of integers >= %d, "
                            "got '%s'\n", opt, min, s);
            return 1;
        }
        v[(*n)++] = (int)x;
        p = *end ? end + 1 : end;
    }
    if (*n == 0) {
        fprintf(stderr, "loom bench: option '%s' is empty\n", opt);
        return 1;
    }
    return 0;
}

typedef struct result {
    const char *mode, *kv_dtype, *act;
    int threads, depth;
    char test[32];
    int n_tokens;
    double median, min, max, stdev;  /* tokens/s */
    double peak_rss_mib, planned_mib;
} result;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double peak_rss_mib(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss / 1024.0 : 0.0;
}

static void summarise(result *r, double *tps, int n) {
    qsort(tps, (size_t)n, sizeof *tps, cmp_double);
    r->median = n % 2 ? tps[n / 2] : 0.5 * (tps[n / 2 - 1] + tps[n / 2]);
    r->min = tps[0];
    r->max = tps[n - 1];
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += tps[i] / n;
    for (int i = 0; i < n; i++) var += (tps[i] - mean) * (tps[i] - mean) / (n > 1 ? n - 1 : 1);
    r->stdev = sqrt(var);
}

/* One timed run of a test after `depth` cached tokens; returns seconds or < 0 on error. */
static double run_once(loom_model *m, const int32_t *toks, int depth, int pp, int tg, float *logits) {
    double t0 = cli_time_s();
    if (pp > 0) {
        if (loom_model_forward(m, toks + depth, pp, depth, logits) != LOOM_OK) return -1;
    } else {
        for (int i = 0; i < tg; i++)
            if (loom_model_forward(m, &toks[depth + i], 1, depth + i, logits) != LOOM_OK) return -1;
    }
    return cli_time_s() - t0;
}


int cmd_bench(int argc, char **argv) {
    const char *model_path = NULL, *p_s = "512", *n_s = "128", *t_s = NULL, *mode_s = NULL, *d_s = "0",
               *ct_s = "f32", *rules = NULL, *preset = NULL, *act_s = NULL;
    int reps = 5, json = 0;
    char t_default[16]; /* the CPUs loom may run on */
    snprintf(t_default, sizeof t_default, "%d", loom_model_default_params().n_threads);
    const arg_opt opts[] = {
        {"-m", "--model", ARG_STR, &model_path, "MODEL",
         "GGUF model or llama2.c checkpoint (default: SmolLM2-135M-Instruct)"},
        {"-p", "--n-prompt", ARG_STR, &p_s, "N[,N..]", "prompt lengths, 0 = none (default 512)"},
        {"-n", "--n-gen", ARG_STR, &n_s, "N[,N..]", "generated tokens, 0 = none (default 128)"},
        {"-t", "--threads", ARG_STR, &t_s, "N[,N..]", "thread counts (default: the CPUs loom may run on)"},
        {"-d", "--n-depth", ARG_STR, &d_s, "N[,N..]",
         "tokens already in the KV cache when a test starts (default 0)"},
        {NULL, "--kv-dtype", ARG_STR, &ct_s, "T[,T..]", "KV cache dtypes: f32, f16, bf16, i8 (default f32)"},
        {NULL, "--act-precision", ARG_STR, &act_s, "A[,A..]",
         "activations against quantized weights: q8, full (default: the rules', else loom's)"},
        {NULL, "--mode", ARG_STR, &mode_s, "M[,M..]",
         "execution modes (default: $LOOM_MODE, the rules', fused)"},
        {NULL, "--rules", ARG_STR, &rules, "FILE", "fusion rules YAML (default: built in)"},
        {NULL, "--fusion-preset", ARG_STR, &preset, "NAME", "preset of the rules (e.g. fast_attention)"},
        {"-r", "--repetitions", ARG_INT, &reps, "N", "timed runs per test after one warm-up (default 5)"},
        {NULL, "--json", ARG_FLAG, &json, NULL, "print JSON instead of a table"},
    };
    const char *usage = "[-m MODEL] [-p 512] [-n 128] [-t 1,2] [-d 0,2048] [--kv-dtype f32,bf16] "
                        "[--act-precision q8,full] [--mode fused,step_by_step] [--rules FILE] "
                        "[--fusion-preset NAME] [-r 5] [--json]";
    int r = args_parse("bench", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 2);
    if (r != 0) return r > 0 ? 0 : 2;
    int pv[MAX_LIST], nv[MAX_LIST], tv[MAX_LIST], dv[MAX_LIST], np, nn, nt, nd, nm = 0, nc = 0;
    if (parse_int_list("-p", p_s, pv, &np, 0) || parse_int_list("-n", n_s, nv, &nn, 0) ||
        parse_int_list("-t", t_s ? t_s : t_default, tv, &nt, 1) || parse_int_list("-d", d_s, dv, &nd, 0))
        return 1;
    loom_dtype ctv[MAX_LIST];
    char ct_buf[256];
    snprintf(ct_buf, sizeof ct_buf, "%s", ct_s);
    for (char *save = NULL, *tok = strtok_r(ct_buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (nc >= MAX_LIST || cli_kv_dtype("bench", tok, &ctv[nc])) return 1;
        nc++;
    }
    if (nc == 0) {
        fprintf(stderr, "loom bench: --kv-dtype is empty\n");
        return 1;
    }
    loom_act_precision av[MAX_LIST] = {LOOM_ACT_PREC_DEFAULT};
    int na = 1;
    if (act_s) {
        char act_buf[256];
        snprintf(act_buf, sizeof act_buf, "%s", act_s);
        na = 0;
        for (char *save = NULL, *tok = strtok_r(act_buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (na >= MAX_LIST || cli_act_precision("bench", tok, &av[na])) return 1;
            na++;
        }
        if (na == 0) {
            fprintf(stderr, "loom bench: --act-precision is empty\n");
            return 1;
        }
    }
    if (reps < 1 || reps > 1000) {
        fprintf(stderr, "loom bench: -r must be in 1..1000, got %d\n", reps);
        return 1;
    }
    loom_exec_mode modes[MAX_LIST];
    char mode_buf[256];
    if (!mode_s) {  /* as loom run chooses it */
        loom_model_params dp = loom_model_default_params();
        if (loom_model_params_set_mode(&dp, NULL) != LOOM_OK) return cli_fail("bench", "mode");
        mode_s = loom_mode_name(dp.mode);
    }
    snprintf(mode_buf, sizeof mode_buf, "%s", mode_s);
    for (char *save = NULL, *tok = strtok_r(mode_buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (nm >= MAX_LIST || loom_mode_parse(tok, &modes[nm]) != LOOM_OK) return cli_fail("bench", "--mode");
        nm++;
    }
    if (nm == 0) {
        fprintf(stderr, "loom bench: --mode is empty\n");
        return 1;
    }
    int any = 0;
    for (int i = 0; i < np; i++) any |= pv[i] > 0;
    for (int i = 0; i < nn; i++) any |= nv[i] > 0;
    if (!any) {
        fprintf(stderr, "loom bench: nothing to run: -p and -n are all 0\n");
        return 1;
    }
    char def[1024];
    if (cli_resolve_model("bench", &model_path, def, sizeof def)) return 1;
    if (cli_check_rules("bench", rules, preset)) return 1;
    int max_test = 1, max_depth = 0;
    for (int i = 0; i < np; i++) max_test = pv[i] > max_test ? pv[i] : max_test;
    for (int i = 0; i < nn; i++) max_test = nv[i] > max_test ? nv[i] : max_test;
    for (int i = 0; i < nd; i++) max_depth = dv[i] > max_depth ? dv[i] : max_depth;
    int max_tokens = max_depth + max_test;

    result *res = calloc((size_t)nm * nc * na * nt * nd * (np + nn), sizeof *res);
    double *tps = malloc((size_t)reps * sizeof *tps);
    int32_t *toks = malloc((size_t)max_tokens * sizeof *toks);
    float *logits = NULL;
    int n_res = 0, failed = 0, rc = 1;
    loom_model_info info = {0};
    model_desc desc = {0};
    if (!res || !tps || !toks) goto done;
    for (int mi = 0; mi < nm; mi++) {
        for (int ci = 0; ci < nc; ci++) {
            for (int ai = 0; ai < na * nt; ai++) {
                int ti = ai % nt;
                loom_model_params mp = loom_model_default_params();
                mp.act_precision = av[ai / nt];
                mp.n_threads = tv[ti];
                mp.n_ctx = max_tokens;
                mp.mode = modes[mi];
                mp.kv_dtype = ctv[ci];
                mp.rules_path = rules;
                mp.fusion_preset = preset;
                loom_model *m = NULL;
                loom_status ls = loom_model_load(model_path, &mp, &m);
                if (ls == LOOM_ERR_IO || ls == LOOM_ERR_FORMAT) {  /* the file itself: no configuration loads it */
                    cli_fail("bench", "cannot load model");
                    goto done;
                }
                if (ls != LOOM_OK) {
                    fprintf(stderr, "loom bench: mode %s, cache %s, %d threads: cannot load model: %s\n",
                            loom_mode_name(modes[mi]), loom_dtype_name(ctv[ci]), tv[ti], loom_last_error());
                    failed++;
                    continue;
                }
                info = loom_model_get_info(m);
                describe_model(m, &desc);
                if (!logits) logits = malloc((size_t)info.vocab_size * sizeof *logits);
                if (!logits) {
                    loom_model_free(m);
                    goto done;
                }
                /* BOS-like first id, then a fixed pseudo-random sequence (llama-bench: rand() % vocab) */
                uint32_t s = 12345;
                for (int i = 0; i < max_tokens; i++) {
                    s = s * 1103515245u + 12345u;
                    toks[i] = i == 0 ? 1 % info.vocab_size : (int32_t)((s >> 8) % (uint32_t)info.vocab_size);
                }
                for (int di = 0; di < nd; di++) {
                    int depth = dv[di];
                    if (depth > 0 && run_once(m, toks, 0, depth, 0, logits) < 0) {
                        fprintf(stderr, "loom bench: mode %s, cache %s, %d threads: filling %d tokens: %s\n",
                                loom_mode_name(modes[mi]), loom_dtype_name(ctv[ci]), tv[ti], depth,
                                loom_last_error());
                        failed++;
                        continue;
                    }
                    for (int k = 0; k < np + nn; k++) {
                        int pp = k < np ? pv[k] : 0, tg = k < np ? 0 : nv[k - np];
                        if (pp == 0 && tg == 0) continue;
                        result *re = &res[n_res];
                        re->mode = loom_mode_name(modes[mi]);
                        re->kv_dtype = loom_dtype_name(ctv[ci]);
                        re->act = loom_act_precision_name(loom_model_act_precision(m)); /* as resolved */
                        re->threads = tv[ti];
                        re->depth = depth;
                        re->n_tokens = pp ? pp : tg;
                        snprintf(re->test, sizeof re->test, "%s%d", pp ? "pp" : "tg", re->n_tokens);
                        int ok = run_once(m, toks, depth, pp, pp ? 0 : (tg < 2 ? tg : 1), logits) >= 0;
                        for (int i = 0; ok && i < reps; i++) {
                            double t = run_once(m, toks, depth, pp, tg, logits);
                            ok = t >= 0;
                            tps[i] = re->n_tokens / (t > 0 ? t : 1e-9);
                        }
                        if (!ok) {
                            fprintf(stderr, "loom bench: mode %s, cache %s, %d threads, %s @ d%d: %s\n", re->mode,
                                    re->kv_dtype, re->threads, re->test, depth, loom_last_error());
                            failed++;
                            continue;
                        }
                        summarise(re, tps, reps);
                        re->peak_rss_mib = peak_rss_mib();
                        re->planned_mib = loom_model_arena_bytes(m) / (1024.0 * 1024.0);
                        n_res++;
                    }
                }
                loom_model_free(m);
            }
        }
    }
    if (n_res == 0) goto done;  /* the errors are above: no empty table */
    char size_s[32], params_s[32];
    human_bytes(desc.bytes, size_s, sizeof size_s);
    human_params(desc.params, params_s, sizeof params_s);
    if (json) {
        printf("{\"model\": \"");
        for (const char *c = model_path; *c; c++) {  /* a JSON string */
            if (*c == '"' || *c == '\\') putchar('\\');
            if ((unsigned char)*c >= 0x20) putchar(*c);
        }
        printf("\", \"model_type\": \"%s\", \"model_size\": %.0f, \"model_n_params\": %.0f, \"backend\": \"%s\", "
               "\"n_layers\": %d, \"dim\": %d, \"vocab\": %d, \"repetitions\": %d, \"results\": [",
               desc.type, desc.bytes, desc.params, desc.backend, info.n_layers, info.dim, info.vocab_size, reps);
        for (int i = 0; i < n_res; i++) {
            const result *re = &res[i];
            printf("%s\n  {\"mode\": \"%s\", \"kv_dtype\": \"%s\", \"act_precision\": \"%s\", \"threads\": %d, "
                   "\"test\": \"%s\", \"n_tokens\": %d, \"n_depth\": %d, "
                   "\"tps_median\": %.3f, \"tps_min\": %.3f, \"tps_max\": %.3f, \"tps_stdev\": %.3f, "
                   "\"peak_rss_mib\": %.1f, \"planned_intermediate_mib\": %.3f}",
                   i ? "," : "", re->mode, re->kv_dtype, re->act, re->threads, re->test, re->n_tokens, re->depth,
                   re->median, re->min,
                   re->max, re->stdev, re->peak_rss_mib, re->planned_mib);
        }
        printf("\n]}\n");
    } else {
        printf("model %s: %d layers, dim %d, vocab %d; %d repetitions after a warm-up\n", model_path,
               info.n_layers, info.dim, info.vocab_size, reps);
        if (converted[0]) printf("weights converted at load: %s\n", converted);
        printf("\n");
        printf("| model | size | params | backend | mode | kv | threads | test | t/s (median) | min .. max | "
               "stdev | peak RSS MiB | planned MiB | act |\n");
        printf("|---|---:|---:|---|---|---|---:|---|---:|---:|---:|---:|---:|---|\n");
        for (int i = 0; i < n_res; i++) {
            const result *re = &res[i];
            char test[64];
            if (re->depth) snprintf(test, sizeof test, "%s @ d%d", re->test, re->depth);
            else snprintf(test, sizeof test, "%s", re->test);
            printf("| %s | %s | %s | %s | %s | %s | %d | %s | %.2f | %.2f .. %.2f | %.2f | %.1f | %.2f | %s |\n",
                   desc.type, size_s, params_s, desc.backend, re->mode, re->kv_dtype, re->threads, test, re->median,
                   re->min, re->max, re->stdev, re->peak_rss_mib, re->planned_mib, re->act);
        }
    }
    rc = n_res > 0 ? 0 : 1;
    if (failed && n_res > 0) fprintf(stderr, "loom bench: %d configuration(s) failed (see above)\n", failed);
done:
    free(res);
    free(tps);
    free(toks);
    free(logits);
    return rc;
}
