/* loom profile: per-layer op chain, kernels, traffic and time of one prefill
 * and one decode step, step_by_step and fused side by side. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"

typedef struct prof_opts {
    const char *model_path, *tok_path, *prompt, *rules, *preset;
    int threads, n_ctx, prompt_len, decode_steps, reps, parallel;
    loom_dtype kv_dtype;
    loom_act_precision act;
} prof_opts;

/* The model's tensors converted at load (K-quants), for the header. */
static char converted[256];

/* The sampler after the LM head, as `loom run` samples by default
 * (temperature, top-p). */
static loom_status add_sampling(loom_profile *p, const float *logits, int vocab) {
    loom_sampler_params sp = loom_sampler_default_params();
    sp.top_p = 0.9f; /* loom run's default (the library's is 1: no nucleus) */
    return loom_profile_add_sampler(p, logits, vocab, &sp);
}

/* -np N: N sequences on the batch engine, each prompt its own (ids shifted, so
 * no prefix is shared), run into decode; then the decode step of all N is
 * profiled (loom_engine_profile_steps) into *dec. */
static int profile_batch(const prof_opts *o, loom_model *m, const loom_tokenizer *tok, const int32_t *ids, int n,
                         loom_profile *dec) {
    loom_model_info info = loom_model_get_info(m);
    int N = o->parallel;
    loom_engine_params ep = loom_engine_default_params();
    /* room for every sequence to decode through the others' prompt chunks, the
     * --decode-steps and the profiled steps without reaching its limit */
    int chunks = (int)(((long)N * n + ep.n_batch - 1) / ep.n_batch);
    int budget = n + chunks + o->decode_steps + o->reps + 2;
    ep.n_seq_max = N, ep.seq_len = budget, ep.n_ctx = N * (budget + 32);
    loom_engine *e = NULL;
    if (loom_engine_create(m, tok, &ep, &e) != LOOM_OK) return cli_fail("profile", "-np: the engine");
    loom_request_params rp = loom_request_default_params();
    rp.sampling.temperature = 0.0f, rp.max_tokens = budget - n, rp.ignore_eos = 1;
    int32_t *own = malloc((size_t)n * sizeof *own);
    int *made = calloc((size_t)N, sizeof *made); /* tokens each sequence has generated */
    int rc = !own || !made;
    for (int q = 0; q < N && !rc; q++) {
        for (int i = 0; i < n; i++) own[i] = i == 0 ? ids[0] : 3 + (ids[i] + 7 * q) % (info.vocab_size - 3);
        if (loom_engine_add(e, q, own, n, &rp) != LOOM_OK) rc = cli_fail("profile", "-np: adding a request");
    }
    /* prompts (in chunks), then decode until every sequence has made --decode-steps tokens */
    for (int guard = 0; !rc && guard < budget + 4; guard++) {
        int least = made[0];
        for (int q = 1; q < N; q++) least = made[q] < least ? made[q] : least;
        if (least >= o->decode_steps) break;
        const loom_engine_event *ev;
        int n_ev;
        if (loom_engine_step(e, &ev, &n_ev) != LOOM_OK) rc = cli_fail("profile", "-np: a step");
        for (int k = 0; !rc && k < n_ev; k++)
            if (ev[k].token >= 0 && ev[k].id >= 0 && ev[k].id < N) made[ev[k].id] = ev[k].n_generated;
    }
    if (!rc && loom_engine_profile_steps(e, o->reps, dec) != LOOM_OK) rc = cli_fail("profile", "-np: the batch step");
    free(own), free(made);
    loom_engine_free(e);
    return rc;
}

/* Loads the model in mode, runs the prefill and decode steps, collects profiles. */
static int profile_mode(const prof_opts *o, loom_exec_mode mode, loom_profile *pre, loom_profile *dec,
                        loom_model_info *info_out) {
    loom_model_params mp = loom_model_default_params();
    mp.n_threads = o->threads;
    mp.n_ctx = o->n_ctx;
    mp.kv_dtype = o->kv_dtype;
    mp.act_precision = o->act;
    mp.mode = mode;
    mp.rules_path = o->rules;
    mp.fusion_preset = o->preset;
    loom_model *m;
    loom_tokenizer *tok;
    if (cli_load("profile", o->model_path, o->tok_path, &mp, &m, &tok)) return 1;
    loom_model_info info = loom_model_get_info(m);
    *info_out = info;
    loom_model_desc desc;
    if (loom_model_describe(m, &desc) == LOOM_OK) snprintf(converted, sizeof converted, "%s", desc.converted);
    int32_t *ids = NULL;
    int n = 0, rc = 1;
    float *logits = malloc((size_t)info.vocab_size * sizeof *logits);
    if (!logits) goto done;
    if (o->prompt_len > 0) {
        if (o->prompt_len + o->decode_steps > info.n_ctx) {
            fprintf(stderr, "loom profile: --prompt-len %d and %d decode steps do not fit the context of %d\n",
                    o->prompt_len, o->decode_steps, info.n_ctx);
            goto done;
        }
        ids = malloc((size_t)o->prompt_len * sizeof *ids);
        if (!ids) goto done;
        /* BOS then cycling ordinary tokens: the cost does not depend on which */
        for (int i = 0; i < o->prompt_len; i++)
            ids[i] = i == 0 && loom_tokenizer_bos(tok) >= 0 ? loom_tokenizer_bos(tok) /* none: a plain id */
                                                             : 3 + (i % (info.vocab_size - 3));
        n = o->prompt_len;
    } else if (cli_encode("profile", tok, o->prompt ? o->prompt : "Once upon a time",
                          info.n_ctx - o->decode_steps, &ids, &n)) {
        goto done;
    }
    if (o->parallel > 0) { /* the batch's decode step; the prefill table is one sequence's */
        if (loom_model_profile(m, ids, n, 0, o->reps, logits, pre) != LOOM_OK) {
            cli_fail("profile", "prefill failed");
            goto done;
        }
        rc = profile_batch(o, m, tok, ids, n, dec);
        goto done;
    }
    if (loom_model_profile(m, ids, n, 0, o->reps, logits, pre) != LOOM_OK) {
        cli_fail("profile", "prefill failed");
        goto done;
    }
    if (add_sampling(pre, logits, info.vocab_size) != LOOM_OK) {
        cli_fail("profile", "sampling failed");
        goto done;
    }
    for (int s = 0; s < o->decode_steps; s++) {
        int32_t next = 0;
        for (int i = 1; i < info.vocab_size; i++)
            if (logits[i] > logits[next]) next = i;
        /* the last decode step (the longest cache) is the one profiled */
        loom_status st = s + 1 < o->decode_steps ? loom_model_forward(m, &next, 1, n + s, logits)
                                                 : loom_model_profile(m, &next, 1, n + s, o->reps, logits, dec);
        if (st != LOOM_OK) {
            cli_fail("profile", "decode step failed");
            goto done;
        }
    }
    if (add_sampling(dec, logits, info.vocab_size) != LOOM_OK) {
        cli_fail("profile", "sampling failed");
        goto done;
    }
    rc = 0;
done:
    free(ids);
    free(logits);
    loom_tokenizer_free(tok);
    loom_model_free(m);
    return rc;
}

int cmd_profile(int argc, char **argv) {
    prof_opts o = {.threads = loom_model_default_params().n_threads, .decode_steps = 1, .reps = 5};
    const char *mode = NULL, *svg = NULL, *kv_dtype = NULL, *act = NULL, *prompt_file = NULL;
    int json = 0;
    const arg_opt opts[] = {
        {"-m", "--model", ARG_STR, &o.model_path, "MODEL", "GGUF model or llama2.c checkpoint"},
        {"-z", "--tokenizer", ARG_STR, &o.tok_path, "TOKENIZER", "tokenizer (GGUF or llama2.c .bin)"},
        {"-p", "--prompt", ARG_STR, &o.prompt, "PROMPT", "prompt for the prefill pass"},
        {"-f", "--file", ARG_STR, &prompt_file, "FILE", "read the prompt from FILE ('-': stdin) instead of -p"},
        {NULL, "--prompt-len", ARG_INT, &o.prompt_len, "N",
         "use a synthetic prompt of N tokens instead of -p (default: 'Once upon a time')"},
        {NULL, "--decode-steps", ARG_INT, &o.decode_steps, "N",
         "decode steps after the prefill; the last one is profiled (default 1)"},
        {"-np", "--parallel", ARG_INT, &o.parallel, "N",
         "profile the decode step of N sequences at once on the batch engine (default: one sequence)"},
        {"-r", "--repetitions", ARG_INT, &o.reps, "N",
         "timed runs of each profiled step after a warm-up run; times are medians (default 5)"},
        {"-t", "--threads", ARG_INT, &o.threads, "N", "threads (default: the CPUs loom may run on)"},
        {"-c", "--ctx-size", ARG_INT, &o.n_ctx, "N", "context length (default: the model's)"},
        {NULL, "--kv-dtype", ARG_STR, &kv_dtype, "TYPE", CLI_KV_DTYPE_HELP},
        {NULL, "--act-precision", ARG_STR, &act, "q8|full", CLI_ACT_PRECISION_HELP},
        {NULL, "--mode", ARG_STR, &mode, "MODE",
         "profile only this mode (default: step_by_step and fused side by side)"},
        {NULL, "--rules", ARG_STR, &o.rules, "FILE", "fusion rules YAML (default: built in)"},
        {NULL, "--fusion-preset", ARG_STR, &o.preset, "NAME", "preset of the rules"},
        {NULL, "--json", ARG_FLAG, &json, NULL, "print JSON instead of tables"},
        {NULL, "--svg", ARG_STR, &svg, "FILE", "write a bar chart of traffic and time per op kind"},
    };
    const char *usage = "[-m MODEL] [-z TOKENIZER] [-p PROMPT | -f FILE | --prompt-len N] [--decode-steps N] [-np N] [-r N] "
                        "[-t N] [-c N] [--kv-dtype T] [--act-precision q8|full] [--mode MODE] [--rules FILE] "
                        "[--fusion-preset NAME] [--json] "
                        "[--svg FILE]";
    int r = args_parse("profile", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 2);
    if (r != 0) return r > 0 ? 0 : 2;
    char def[1024];  /* the default model, named in the header */
    if (cli_resolve_model("profile", &o.model_path, def, sizeof def) || cli_check_rules("profile", o.rules, o.preset))
        return 1;
    if (o.threads <= 0) {
        fprintf(stderr, "loom profile: -t must be >= 1, got %d\n", o.threads);
        return 1;
    }
    if (o.prompt && prompt_file) {
        fprintf(stderr, "loom profile: -p and -f both give the prompt; use one\n");
        return 1;
    }
    if (o.prompt_len < 0 || ((o.prompt || prompt_file) && o.prompt_len)) {
        fprintf(stderr, "loom profile: give either -p, -f or a --prompt-len >= 1\n");
        return 1;
    }
    if (cli_kv_dtype("profile", kv_dtype, &o.kv_dtype) || cli_act_precision("profile", act, &o.act)) return 1;
    if (o.reps < 1 || o.reps > 1000) {
        fprintf(stderr, "loom profile: -r must be in 1..1000, got %d\n", o.reps);
        return 1;
    }
    if (o.parallel < 0 || o.parallel > 256) {
        fprintf(stderr, "loom profile: -np must be in 1..256, got %d\n", o.parallel);
        return 1;
    }
    if (o.decode_steps < 1) {
        fprintf(stderr, "loom profile: --decode-steps must be >= 1, got %d\n", o.decode_steps);
        return 1;
    }
    loom_exec_mode modes[2] = {LOOM_MODE_STEP_BY_STEP, LOOM_MODE_FUSED};
    int n_modes = 2;
    if (mode) {
        if (loom_mode_parse(mode, &modes[0]) != LOOM_OK) return cli_fail("profile", "--mode");
        n_modes = 1;
    }
    char *file_text = NULL;  /* -f: read once, for both modes */
    if (prompt_file && cli_read_text("profile", "-f", prompt_file, &file_text)) return 1;
    if (file_text) o.prompt = file_text;
    loom_profile pre[2], dec[2];
    memset(pre, 0, sizeof pre);
    memset(dec, 0, sizeof dec);
    loom_model_info info = {0};
    int rc = 1;
    for (int i = 0; i < n_modes; i++)
        if (profile_mode(&o, modes[i], &pre[i], &dec[i], &info)) goto done;
    int cmp = n_modes == 2;
    if (json) {
        loom_profile all[4];
        int k = 0;
        for (int i = 0; i < n_modes; i++) all[k++] = pre[i];
        for (int i = 0; i < n_modes; i++) all[k++] = dec[i];
        /* one mode: the report itself; two: {"report": ..., "comparison": [prefill, decode]} */
        if (cmp) printf("{\"report\":");
        loom_profile_print_json(stdout, o.model_path, all, k);
        if (cmp) {
            printf(",\"comparison\":[");
            loom_profile_print_compare_json(stdout, &pre[0], &pre[1]);
            printf(",");
            loom_profile_print_compare_json(stdout, &dec[0], &dec[1]);
            printf("]}\n");
        }
    } else {
        printf("model %s: %d layers, dim %d, %d heads (%d kv), vocab %d; %d thread%s\n", o.model_path,
               info.n_layers, info.dim, info.n_heads, info.n_kv_heads, info.vocab_size, o.threads,
               o.threads == 1 ? "" : "s");
        if (converted[0]) printf("weights converted at load: %s\n", converted);
        char variants[256];
        loom_variants_describe(variants, sizeof variants);
        printf("kernels: isa %s; variants %s\n", loom_cpu_isa_name(), variants);
        printf("\n");
        loom_profile_print_table(stdout, pre, n_modes);
        printf("\n");
        if (cmp) {
            loom_profile_print_compare(stdout, &pre[0], &pre[1]);
            printf("\n");
        }
        loom_profile_print_table(stdout, dec, n_modes);
        if (cmp) {
            printf("\n");
            loom_profile_print_compare(stdout, &dec[0], &dec[1]);
        }
    }
    if (svg) {
        FILE *f = fopen(svg, "w");
        if (!f) {
            fprintf(stderr, "loom profile: --svg: cannot write '%s'\n", svg);
            goto done;
        }
        loom_profile_write_svg(f, &pre[0], cmp ? &pre[1] : NULL);
        if (fclose(f) != 0) {
            fprintf(stderr, "loom profile: --svg: cannot write '%s'\n", svg);
            goto done;
        }
    }
    rc = 0;
done:
    for (int i = 0; i < 2; i++) {
        loom_profile_free(&pre[i]);
        loom_profile_free(&dec[i]);
    }
    free(file_text);
    return rc;
}
