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
 * With -np B (llama-batched-bench's -npl), every test runs through the batch
 * engine with B sequences at once, each with its own prompt: ppN times the
 * steps until every sequence has processed its N prompt tokens (B x N tokens,
 * under the engine's -b budget per step); tgN the N decode steps of B rows
 * after a one-token prompt; tokens/s are aggregate (B x N / time). At depth d
 * each sequence's d tokens are computed once before the timed runs and found
 * in the prefix cache (all but the last partial block).
 * One warm-up run per test, then -r repetitions: median, mean, min, max,
 * stdev. -o md (a table), json, jsonl or csv with llama-bench's field names.
 * Also peak RSS of the process so far and the planned intermediate memory
 * (the arena the planner assigned to the graph). Rows name the model as
 * llama-bench's do: type, size and parameter count of its weights as loaded,
 * and the backend (CPU, with the kernels' instruction set). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

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
    int threads, depth, parallel, n_batch, invariant;
    char test[32];
    int n_prompt, n_gen;             /* per sequence */
    double median, mean, min, max, stdev;  /* tokens/s */
    double *samples;                 /* tokens/s of each repetition (reps of them) */
    double peak_rss_mib, planned_mib;
    char time[32];                   /* when it ran, ISO 8601 UTC */
    char variants[192]; /* kernel variants in use (loom_variants_describe) */
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
    memcpy(r->samples, tps, sizeof *tps * (size_t)n); /* in run order */
    qsort(tps, (size_t)n, sizeof *tps, cmp_double);
    r->median = n % 2 ? tps[n / 2] : 0.5 * (tps[n / 2 - 1] + tps[n / 2]);
    r->min = tps[0];
    r->max = tps[n - 1];
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += tps[i] / n;
    for (int i = 0; i < n; i++) var += (tps[i] - mean) * (tps[i] - mean) / (n > 1 ? n - 1 : 1);
    r->mean = mean;
    r->stdev = sqrt(var);
}

/* The prompt of sequence seq for repetition rep: its depth tokens (the same
 * in every repetition: found in the prefix cache), then n tokens of this
 * repetition (never cached). Pseudo-random ids, 1 (BOS-like) first. */
static void seq_prompt(int32_t *ids, int depth, int n, int seq, int rep, int vocab) {
    uint32_t s = 2654435761u * (uint32_t)(seq + 1);
    for (int i = 0; i < depth + n; i++) {
        if (i == depth) s ^= 40503u * (uint32_t)(rep + 7);
        s = s * 1103515245u + 12345u;
        ids[i] = i == 0 ? 1 % vocab : (int32_t)((s >> 8) % (uint32_t)vocab);
    }
}

/* One run of B sequences through the engine: the seconds of the timed phase
 * (pp > 0: from the start until every sequence has its first token, i.e. has
 * processed its prompt; else the tg decode steps after that), < 0 on error.
 * depth > 0 (warm = 1): only the depth tokens, to fill the prefix cache. */
static double run_engine(loom_engine *e, int32_t *ids, int B, int depth, int pp, int tg, int rep, int vocab,
                         int warm) {
    int n = warm ? 0 : pp > 0 ? pp : 1;
    loom_request_params rp = loom_request_default_params();
    rp.sampling.temperature = 0.0f;
    rp.ignore_eos = 1;
    rp.max_tokens = warm || pp > 0 ? 1 : tg + 1;
    for (int b = 0; b < B; b++) {
        seq_prompt(ids, depth, n, b, rep, vocab);
        if (loom_engine_add(e, b, ids, depth + n, &rp) != LOOM_OK) return -1;
    }
    double t0 = cli_time_s(), t_first = 0;
    int firsts = 0;
    while (loom_engine_pending(e)) {
        const loom_engine_event *ev;
        int k;
        if (loom_engine_step(e, &ev, &k) != LOOM_OK) return -1;
        for (int i = 0; i < k; i++) {
            if (ev[i].finish == LOOM_FINISH_ERROR) {
                fprintf(stderr, "loom bench: a sequence failed: %s\n", ev[i].error ? ev[i].error : "");
                return -1;
            }
            if (ev[i].token >= 0 && ev[i].n_generated == 1 && ++firsts == B) t_first = cli_time_s();
        }
    }
    double t1 = cli_time_s();
    return pp > 0 || warm ? t_first - t0 : t1 - t_first;
}

static void iso_now(char *buf, size_t n) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* "AMD EPYC 9R14 96-Core Processor" from /proc/cpuinfo, or "". */
static void cpu_name(char *buf, size_t n) {
    buf[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *c = strchr(line, ':');
        if (!c) break;
        for (c++; *c == ' '; c++) {}
        snprintf(buf, n, "%s", c);
        buf[strcspn(buf, "\n")] = '\0';
        break;
    }
    if (f) fclose(f);
}

/* A JSON string (the characters a path or name may hold). */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') fputc('\\', f), fputc(*c, f);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    fputc('"', f);
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


/* One value of a row for the CSV and JSON outputs. */
typedef enum { F_STR, F_INT, F_NUM } fkind;

/* Prints one result in json (an object), or a CSV header (hdr) or row. */
static void print_record(FILE *f, int csv, int hdr, const result *re, int reps, const char *model_path,
                         const model_desc *desc, const char *cpu) {
    char num[64];
    struct { const char *name; fkind kind; const char *s; double v; } fld[] = {
        {"model_filename", F_STR, model_path, 0}, {"model_type", F_STR, desc->type, 0},
        {"model_size", F_INT, NULL, desc->bytes}, {"model_n_params", F_INT, NULL, desc->params},
        {"backends", F_STR, "CPU", 0}, {"cpu_info", F_STR, cpu, 0}, {"isa", F_STR, loom_cpu_isa_name(), 0},
        {"kernel_variants", F_STR, re->variants, 0},
        {"n_threads", F_INT, NULL, re->threads}, {"n_batch", F_INT, NULL, re->n_batch},
        {"n_parallel", F_INT, NULL, re->parallel}, {"type_k", F_STR, re->kv_dtype, 0},
        {"type_v", F_STR, re->kv_dtype, 0}, {"mode", F_STR, re->mode, 0}, {"act_precision", F_STR, re->act, 0},
        {"batch_invariant", F_INT, NULL, re->invariant}, {"n_prompt", F_INT, NULL, re->n_prompt},
        {"n_gen", F_INT, NULL, re->n_gen}, {"n_depth", F_INT, NULL, re->depth}, {"test_time", F_STR, re->time, 0},
        {"avg_ns", F_INT, NULL, re->mean > 0 ? 1e9 * (re->n_prompt + re->n_gen) * re->parallel / re->mean : 0},
        {"stddev_ns", F_INT, NULL, re->mean > 0 ? 1e9 * (re->n_prompt + re->n_gen) * re->parallel * re->stdev /
                                                      (re->mean * re->mean) : 0},
        {"avg_ts", F_NUM, NULL, re->mean}, {"stddev_ts", F_NUM, NULL, re->stdev},
        {"median_ts", F_NUM, NULL, re->median}, {"min_ts", F_NUM, NULL, re->min}, {"max_ts", F_NUM, NULL, re->max},
        {"peak_rss_mib", F_NUM, NULL, re->peak_rss_mib}, {"planned_intermediate_mib", F_NUM, NULL, re->planned_mib},
    };
    const int n = (int)(sizeof fld / sizeof fld[0]);
    if (!csv) fputc('{', f);
    for (int i = 0; i < n; i++) {
        if (i) fputs(csv ? "," : ", ", f);
        if (hdr) {
            fputs(fld[i].name, f);
            continue;
        }
        if (!csv) fprintf(f, "\"%s\": ", fld[i].name);
        if (fld[i].kind == F_STR) json_str(f, fld[i].s ? fld[i].s : ""); /* CSV: quoted the same way */
        else {
            snprintf(num, sizeof num, fld[i].kind == F_INT ? "%.0f" : "%.3f", fld[i].v);
            fputs(num, f);
        }
    }
    if (hdr) fputs(csv ? ",samples_ts\n" : "", f);
    else if (csv) {
        fputs(",\"", f);
        for (int i = 0; i < reps; i++) fprintf(f, "%s%.3f", i ? " " : "", re->samples[i]);
        fputs("\"\n", f);
    } else {
        fputs(", \"samples_ts\": [", f);
        for (int i = 0; i < reps; i++) fprintf(f, "%s%.3f", i ? ", " : "", re->samples[i]);
        fputs("]}", f);
    }
}

int cmd_bench(int argc, char **argv) {
    const char *model_path = NULL, *p_s = "512", *n_s = "128", *t_s = NULL, *mode_s = NULL, *d_s = "0",
               *ct_s = "f32", *rules = NULL, *preset = NULL, *act_s = NULL, *np_s = NULL, *out_s = "md",
               *inv_s = "0", *tok_path = NULL;
    int reps = 5, json = 0, n_batch = 512;
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
        {"-np", "--n-parallel", ARG_STR, &np_s, "N[,N..]",
         "sequences at once through the batch engine, aggregate tokens/s (default: one, without the engine)"},
        {"-b", "--batch-size", ARG_INT, &n_batch, "N", "with -np: token rows one engine step may run (default 512)"},
        {"-z", "--tokenizer", ARG_STR, &tok_path, "TOKENIZER",
         "with -np: the tokenizer the engine detokenizes with (default: the model's own)"},
        {NULL, "--batch-invariant", ARG_STR, &inv_s, "0|1[,..]",
         "with -np: batch-invariant kernels off (0, default) or on (1)"},
        {NULL, "--kv-dtype", ARG_STR, &ct_s, "T[,T..]", "KV cache dtypes: f32, f16, bf16, i8 (default f32)"},
        {NULL, "--act-precision", ARG_STR, &act_s, "A[,A..]",
         "activations against quantized weights: q8, full (default: the rules', else loom's)"},
        {NULL, "--mode", ARG_STR, &mode_s, "M[,M..]",
         "execution modes (default: $LOOM_MODE, the rules', fused)"},
        {NULL, "--rules", ARG_STR, &rules, "FILE", "fusion rules YAML (default: built in)"},
        {NULL, "--fusion-preset", ARG_STR, &preset, "NAME", "preset of the rules (e.g. fast_attention)"},
        {"-r", "--repetitions", ARG_INT, &reps, "N", "timed runs per test after one warm-up (default 5)"},
        {"-o", "--output", ARG_STR, &out_s, "FORMAT", "md (a table, default), json, jsonl or csv"},
        {NULL, "--json", ARG_FLAG, &json, NULL, "the same as -o json"},
    };
    const char *usage = "[-m MODEL] [-p 512] [-n 128] [-t 1,2] [-d 0,2048] [-np 1,4,16] [-b 512] [-z TOKENIZER] "
                        "[--batch-invariant 0,1] [--kv-dtype f32,bf16] [--act-precision q8,full] "
                        "[--mode fused,step_by_step] [--rules FILE] [--fusion-preset NAME] [-r 5] "
                        "[-o md|json|jsonl|csv]";
    int r = args_parse("bench", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 2);
    if (r != 0) return r > 0 ? 0 : 2;
    int fmt = json ? 1 : !strcmp(out_s, "md") ? 0 : !strcmp(out_s, "json") ? 1 : !strcmp(out_s, "jsonl") ? 2
                                                 : !strcmp(out_s, "csv") ? 3 : -1;
    if (fmt < 0) {
        fprintf(stderr, "loom bench: -o expects md, json, jsonl or csv, got '%s'\n", out_s);
        return 1;
    }
    int pv[MAX_LIST], nv[MAX_LIST], tv[MAX_LIST], dv[MAX_LIST], bv[MAX_LIST] = {1}, iv[MAX_LIST], np, nn, nt, nd,
        nb = 1, ni, nm = 0, nc = 0;
    if (parse_int_list("-p", p_s, pv, &np, 0) || parse_int_list("-n", n_s, nv, &nn, 0) ||
        parse_int_list("-t", t_s ? t_s : t_default, tv, &nt, 1) || parse_int_list("-d", d_s, dv, &nd, 0) ||
        (np_s && parse_int_list("-np", np_s, bv, &nb, 1)) || parse_int_list("--batch-invariant", inv_s, iv, &ni, 0))
        return 1;
    for (int i = 0; i < ni; i++)
        if (iv[i] > 1) {
            fprintf(stderr, "loom bench: --batch-invariant expects 0 or 1, got %d\n", iv[i]);
            return 1;
        }
    if (!np_s && (ni > 1 || iv[0])) {
        fprintf(stderr, "loom bench: --batch-invariant applies to the batch engine: give -np too\n");
        return 1;
    }
    if (n_batch < 1) {
        fprintf(stderr, "loom bench: -b must be >= 1, got %d\n", n_batch);
        return 1;
    }
    const int engine = np_s != NULL;
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
    int max_test = 1, max_depth = 0, max_b = 1;
    for (int i = 0; i < np; i++) max_test = pv[i] > max_test ? pv[i] : max_test;
    for (int i = 0; i < nn; i++) max_test = nv[i] + 1 > max_test ? nv[i] + 1 : max_test;
    for (int i = 0; i < nd; i++) max_depth = dv[i] > max_depth ? dv[i] : max_depth;
    for (int i = 0; i < nb; i++) max_b = bv[i] > max_b ? bv[i] : max_b;
    int max_tokens = max_depth + max_test + 1;
    char cpu[256];
    cpu_name(cpu, sizeof cpu);

    const size_t n_slots = (size_t)nm * nc * na * nt * nd * nb * ni * (np + nn);
    result *res = calloc(n_slots, sizeof *res);
    double *tps = malloc((size_t)reps * sizeof *tps), *samples = malloc(n_slots * (size_t)reps * sizeof *samples);
    int32_t *toks = malloc((size_t)max_tokens * sizeof *toks);
    float *logits = NULL;
    int n_res = 0, failed = 0, rc = 1;
    loom_model_info info = {0};
    model_desc desc = {0};
    loom_tokenizer *tok = NULL;
    if (!res || !tps || !toks || !samples) goto done;
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
                if (engine && !tok &&
                    (tok_path ? loom_tokenizer_load(tok_path, &tok) : loom_tokenizer_from_model(m, &tok)) != LOOM_OK) {
                    tok = NULL;
                    cli_fail("bench", tok_path ? "-z" : "-np: the model has no tokenizer of its own (give -z)");
                    loom_model_free(m);
                    goto done;
                }
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
                for (int bi = 0; bi < nb * ni; bi++) {
                    int B = bv[bi % nb], inv = iv[bi / nb];
                    loom_engine *eng = NULL;
                    if (engine) {
                        loom_engine_params ep = loom_engine_default_params();
                        ep.n_seq_max = B, ep.n_batch = n_batch, ep.batch_invariant = inv;
                        ep.seq_len = max_tokens;
                        ep.n_ctx = B * (max_tokens + 64); /* and room for rounding up to blocks */
                        if (loom_engine_create(m, tok, &ep, &eng) != LOOM_OK) {
                            fprintf(stderr, "loom bench: -np %d: cannot start the engine: %s\n", B, loom_last_error());
                            failed++;
                            continue;
                        }
                    }
                    for (int di = 0; di < nd; di++) {
                        int depth = dv[di];
                        int filled = !engine ? depth == 0 || run_once(m, toks, 0, depth, 0, logits) >= 0
                                             : depth == 0 || run_engine(eng, toks, B, depth, 0, 0, 0, info.vocab_size, 1) >= 0;
                        if (!filled) {
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
                            re->samples = samples + (size_t)n_res * (size_t)reps;
                            re->mode = loom_mode_name(modes[mi]);
                            re->kv_dtype = loom_dtype_name(ctv[ci]);
                            re->act = loom_act_precision_name(loom_model_act_precision(m)); /* as resolved */
                            re->threads = tv[ti];
                            re->depth = depth;
                            re->parallel = B, re->invariant = inv;
                            re->n_batch = engine ? n_batch : pp > 0 ? pp : 1;
                            re->n_prompt = pp, re->n_gen = tg;
                            loom_variants_describe(re->variants, sizeof re->variants);
                            iso_now(re->time, sizeof re->time);
                            snprintf(re->test, sizeof re->test, "%s%d", pp ? "pp" : "tg", pp ? pp : tg);
                            int ok = engine ? run_engine(eng, toks, B, depth, pp, pp ? 0 : (tg < 2 ? tg : 1), 0,
                                                         info.vocab_size, 0) >= 0
                                            : run_once(m, toks, depth, pp, pp ? 0 : (tg < 2 ? tg : 1), logits) >= 0;
                            for (int i = 0; ok && i < reps; i++) {
                                double t = engine ? run_engine(eng, toks, B, depth, pp, tg, i + 1, info.vocab_size, 0)
                                                  : run_once(m, toks, depth, pp, tg, logits);
                                ok = t >= 0;
                                tps[i] = (double)B * (pp ? pp : tg) / (t > 0 ? t : 1e-9);
                            }
                            if (!ok) {
                                fprintf(stderr, "loom bench: mode %s, cache %s, %d threads, np %d, %s @ d%d: %s\n",
                                        re->mode, re->kv_dtype, re->threads, B, re->test, depth, loom_last_error());
                                failed++;
                                continue;
                            }
                            summarise(re, tps, reps);
                            re->peak_rss_mib = peak_rss_mib();
                            re->planned_mib = loom_model_arena_bytes(m) / (1024.0 * 1024.0);
                            n_res++;
                        }
                    }
                    loom_engine_free(eng);
                }
                loom_model_free(m);
            }
        }
    }
    if (n_res == 0) goto done;  /* the errors are above: no empty table */
    char size_s[32], params_s[32];
    human_bytes(desc.bytes, size_s, sizeof size_s);
    human_params(desc.params, params_s, sizeof params_s);
    if (fmt == 1) printf("[");
    if (fmt == 3) print_record(stdout, 1, 1, &res[0], reps, model_path, &desc, cpu);
    for (int i = 0; fmt && i < n_res; i++) {
        if (fmt == 1) printf("%s\n  ", i ? "," : "");
        print_record(stdout, fmt == 3, 0, &res[i], reps, model_path, &desc, cpu);
        if (fmt == 2) printf("\n");
    }
    if (fmt == 1) printf("\n]\n");
    if (fmt == 0) {
        printf("model %s: %d layers, dim %d, vocab %d; %d repetitions after a warm-up\n", model_path,
               info.n_layers, info.dim, info.vocab_size, reps);
        if (converted[0]) printf("weights converted at load: %s\n", converted);
        printf("kernel variants: %s\n", res[n_res - 1].variants);
        if (engine) printf("batch engine: -np sequences at once, aggregate tokens/s, steps of up to %d rows\n", n_batch);
        printf("\n");
        printf("| model | size | params | backend | mode | kv | threads | test |%s t/s (median) | min .. max | "
               "stdev | peak RSS MiB | planned MiB | act |\n", engine ? " np | inv |" : "");
        printf("|---|---:|---:|---|---|---|---:|---|%s---:|---:|---:|---:|---:|---|\n", engine ? "---:|---:|" : "");
        for (int i = 0; i < n_res; i++) {
            const result *re = &res[i];
            char test[64], npc[32] = "";
            if (re->depth) snprintf(test, sizeof test, "%s @ d%d", re->test, re->depth);
            else snprintf(test, sizeof test, "%s", re->test);
            if (engine) snprintf(npc, sizeof npc, " %d | %d |", re->parallel, re->invariant);
            printf("| %s | %s | %s | %s | %s | %s | %d | %s |%s %.2f | %.2f .. %.2f | %.2f | %.1f | %.2f | %s |\n",
                   desc.type, size_s, params_s, desc.backend, re->mode, re->kv_dtype, re->threads, test, npc,
                   re->median, re->min, re->max, re->stdev, re->peak_rss_mib, re->planned_mib, re->act);
        }
    }
    rc = n_res > 0 ? 0 : 1;
    if (failed && n_res > 0) fprintf(stderr, "loom bench: %d configuration(s) failed (see above)\n", failed);
done:
    free(res);
    free(tps);
    free(samples);
    free(toks);
    free(logits);
    loom_tokenizer_free(tok);
    return rc;
}
