/* loom run: prompt -> generated text, printed as llama2.c's run.c prints it. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"

/* The text of token after prev (NULL when nothing is to be printed). Like
 * run.c, skips pieces that are a single unprintable, non-space byte. */
static const char *piece_text(const loom_tokenizer *tok, int prev, int token, size_t *len) {
    const char *p = loom_tokenizer_decode(tok, prev, token, len);
    if (!p || *len == 0) return NULL;
    /* byte-level BPE pieces may be parts of a UTF-8 sequence: print them all */
    int llama2c = strcmp(loom_tokenizer_kind_name(tok), "llama2c") == 0;
    if (llama2c && *len == 1 && !isprint((unsigned char)p[0]) && !isspace((unsigned char)p[0])) return NULL;
    return p;
}

int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *tok_path = NULL, *prompt = NULL, *prompt_file = NULL, *mode = NULL,
               *dump = NULL;
    const char *rules = NULL, *preset = NULL, *ckpt_action = NULL;  /* fusion (docs/fusion.md) */
    const char *kv_dtype = NULL, *act = NULL;
    int n_new = 256, threads = loom_model_default_params().n_threads, n_ctx = 0, top_k = 0, last_n = 64;
    float temp = 1.0f, top_p = 0.9f, min_p = 0.0f, penalty = 1.0f;
    arg_u64 seed = {0};  /* not given: taken from the clock */
    arg_list stops = {0};
    const arg_opt opts[] = {
        {"-m", "--model", ARG_STR, &model_path, "MODEL",
         "GGUF model or llama2.c checkpoint (default: SmolLM2-135M-Instruct from scripts/fetch-models.sh)"},
        {"-z", "--tokenizer", ARG_STR, &tok_path, "TOKENIZER",
         "tokenizer (GGUF or llama2.c .bin); default: the GGUF model's own"},
        {"-p", "--prompt", ARG_STR, &prompt, "PROMPT", "prompt text (default: start from BOS)"},
        {"-f", "--file", ARG_STR, &prompt_file, "FILE", "read the prompt from FILE ('-': stdin) instead of -p"},
        {"-n", "--n-predict", ARG_INT, &n_new, "N", "number of tokens to generate (default 256)"},
        {NULL, "--temp", ARG_FLOAT, &temp, "T", "temperature, 0 = greedy (default 1.0)"},
        {NULL, "--top-k", ARG_INT, &top_k, "K", "keep the K most likely tokens, 0 = off (default 0)"},
        {NULL, "--top-p", ARG_FLOAT, &top_p, "P", "nucleus sampling mass in (0,1] (default 0.9)"},
        {NULL, "--min-p", ARG_FLOAT, &min_p, "P", "keep tokens with p >= P * p_max, 0 = off (default 0)"},
        {NULL, "--repeat-penalty", ARG_FLOAT, &penalty, "X",
         "penalize the tokens of the last --repeat-last-n, 1 = off (default 1.0)"},
        {NULL, "--repeat-last-n", ARG_INT, &last_n, "N", "tokens the penalty looks back at, -1 = the context (default 64)"},
        {NULL, "--stop", ARG_STR_LIST, &stops, "TEXT",
         "stop when the generated text contains TEXT, which is not printed (repeatable)"},
        {NULL, "--seed", ARG_U64_SET, &seed, "S", "random seed (default: from the clock)"},
        {"-t", "--threads", ARG_INT, &threads, "N", "threads (default: the CPUs loom may run on)"},
        {"-c", "--ctx-size", ARG_INT, &n_ctx, "N", "context length (default: the model's)"},
        {NULL, "--kv-dtype", ARG_STR, &kv_dtype, "TYPE", CLI_KV_DTYPE_HELP},
        {NULL, "--act-precision", ARG_STR, &act, "q8|full", CLI_ACT_PRECISION_HELP},
        {NULL, "--mode", ARG_STR, &mode, "MODE",
         "step_by_step, fused or fused_with_checkpoints (default: $LOOM_MODE, the rules' mode:, "
         "fused)"},
        {NULL, "--rules", ARG_STR, &rules, "FILE", "fusion rules YAML (default: built in)"},
        {NULL, "--fusion-preset", ARG_STR, &preset, "NAME", "preset of the rules: small, 7b, 13b, 70b"},
        {NULL, "--checkpoint-action", ARG_STR, &ckpt_action, "ACTION",
         "warn or fail when a checkpoint exceeds tolerance (default: the rules')"},
        {NULL, "--dump", ARG_STR, &dump, "DIR", "write every intermediate tensor to DIR"},
    };
    const char *usage = "[-m MODEL] [-z TOKENIZER] [-p PROMPT | -f FILE] [-n N] [--temp T] [--top-k K] "
                        "[--top-p P] [--min-p P] [--repeat-penalty X] [--repeat-last-n N] [--stop TEXT].. "
                        "[--seed S] [-t N] [-c N] [--kv-dtype T] [--act-precision q8|full] [--mode MODE] [--dump DIR] "
                        "[--rules FILE] [--fusion-preset NAME] [--checkpoint-action warn|fail]";
    int r = args_parse("run", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 2);
    if (r != 0) return r > 0 ? 0 : 2;
    if (!seed.set) seed.value = cli_clock_seed();
    if (threads <= 0) {
        fprintf(stderr, "loom run: -t must be >= 1, got %d\n", threads);
        return 1;
    }
    if (n_new < 0) {
        fprintf(stderr, "loom run: -n must be >= 0, got %d\n", n_new);
        return 1;
    }
    if (n_ctx < 0) {
        fprintf(stderr, "loom run: -c must be >= 0, got %d\n", n_ctx);
        return 1;
    }
    if (prompt && prompt_file) {
        fprintf(stderr, "loom run: -p and -f both give the prompt; use one\n");
        return 1;
    }
    if (!(penalty > 0.0f) || last_n < -1) {
        fprintf(stderr, "loom run: %s\n", last_n < -1 ? "--repeat-last-n must be >= -1"
                                                      : "--repeat-penalty must be > 0 (1 = off)");
        return 1;
    }
    loom_model_params mp = loom_model_default_params();
    mp.n_threads = threads;
    mp.n_ctx = n_ctx;
    if (cli_kv_dtype("run", kv_dtype, &mp.kv_dtype)) return 1;
    if (cli_act_precision("run", act, &mp.act_precision)) return 1;
    mp.dump_dir = dump;
    mp.rules_path = rules;
    mp.fusion_preset = preset;
    if (ckpt_action) {
        if (strcmp(ckpt_action, "warn") && strcmp(ckpt_action, "fail")) {
            fprintf(stderr, "loom run: --checkpoint-action expects warn or fail, got '%s'\n", ckpt_action);
            return 1;
        }
        mp.checkpoint_action = strcmp(ckpt_action, "warn") ? 2 : 1;
    }
    if (cli_check_rules("run", rules, preset)) return 1;
    if (loom_model_params_set_mode(&mp, mode) != LOOM_OK) return cli_fail("run", "--mode");
    /* --repeat-last-n -1 (the context) is set once the context is known */
    loom_sampler_params sp = {.temperature = temp, .top_k = top_k, .top_p = top_p, .seed = seed.value,
                              .min_p = min_p, .repeat_penalty = penalty, .repeat_last_n = last_n < 0 ? 1 : last_n};
    loom_sampler *sampler = NULL;
    if (loom_sampler_init(&sampler, 1, &sp) != LOOM_OK) return cli_fail("run", "bad sampling option");
    loom_sampler_free(sampler);
    sampler = NULL;
    loom_stop_filter *stop = NULL;
    if (loom_stop_filter_init(&stop, stops.v, stops.n) != LOOM_OK) return cli_fail("run", "--stop");
    char *file_text = NULL;
    if (prompt_file && cli_read_text("run", "-f", prompt_file, &file_text)) {
        loom_stop_filter_free(stop);
        return 1;
    }
    if (file_text) prompt = file_text;

    loom_model *model = NULL;
    loom_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    int n_prompt = 0, rc = 1;
    float *logits = NULL;
    if (cli_load("run", model_path, tok_path, &mp, &model, &tok)) goto done;
    loom_model_info info = loom_model_get_info(model);
    if (cli_encode("run", tok, prompt ? prompt : "", info.n_ctx, &ids, &n_prompt)) goto done;
    /* the last generated token is printed, not run: n_prompt + n_new - 1 positions */
    if ((long)n_prompt + n_new - 1 > info.n_ctx) {
        fprintf(stderr, "loom run: -n %d with a %d-token prompt needs %ld positions, beyond the "
                        "context of %d (-c)\n", n_new, n_prompt, (long)n_prompt + n_new - 1, info.n_ctx);
        goto done;
    }
    sp.repeat_last_n = last_n < 0 ? info.n_ctx : last_n;
    logits = malloc((size_t)info.vocab_size * sizeof *logits);
    if (!logits || loom_sampler_init(&sampler, info.vocab_size, &sp) != LOOM_OK) {
        cli_fail("run", "cannot set up sampling");
        goto done;
    }
    int bos = loom_tokenizer_bos(tok), eos = loom_tokenizer_eos(tok);
    int llama2c = strcmp(loom_tokenizer_kind_name(tok), "llama2c") == 0;
    for (int i = 0; i < n_prompt; i++) {
        size_t len;
        const char *p = i > 0 || ids[0] != bos ? piece_text(tok, i ? ids[i - 1] : -1, ids[i], &len) : NULL;
        if (p) fwrite(p, 1, len, stdout);
        if (loom_sampler_accept(sampler, ids[i]) != LOOM_OK) {
            cli_fail("run", "sampling failed");
            goto done;
        }
    }
    fflush(stdout);

    double t0 = cli_time_s();
    if (loom_model_forward(model, ids, n_prompt, 0, logits) != LOOM_OK) {
        cli_fail("run", "forward pass failed");
        goto done;
    }
    double t1 = cli_time_s();
    int prev = ids[n_prompt - 1], pos = n_prompt, n_gen = 0;
    for (int i = 0; i < n_new; i++) {
        int32_t next;
        if (loom_sampler_sample(sampler, logits, &next) != LOOM_OK ||
            loom_sampler_accept(sampler, next) != LOOM_OK) {
            cli_fail("run", "sampling failed");
            goto done;
        }
        /* llama2.c: BOS delimits sequences; GGUF vocabularies: any control token
         * (end of turn, end of text) ends the text */
        if (next == bos || next == eos || (!llama2c && loom_tokenizer_is_control(tok, next))) break;
        size_t len = 0, n_out = 0;
        const char *p = piece_text(tok, prev, next, &len), *out = "";
        int stopped = p && loom_stop_filter_push(stop, p, len, &out, &n_out);
        fwrite(out, 1, n_out, stdout);
        fflush(stdout);
        n_gen++;
        prev = next;
        if (stopped || i + 1 == n_new) break;
        if (loom_model_forward(model, &next, 1, pos++, logits) != LOOM_OK) {
            cli_fail("run", "forward pass failed");
            goto done;
        }
    }
    const char *rest;
    size_t n_rest;
    loom_stop_filter_flush(stop, &rest, &n_rest);
    fwrite(rest, 1, n_rest, stdout);
    double t2 = cli_time_s();
    printf("\n");
    fflush(stdout); /* the statistics start on their own line, after the text */
    fprintf(stderr, "prompt: %d tokens, %.2f tok/s | generation: %d tokens, %.2f tok/s | "
                    "threads %d, mode %s, activations %s, seed %llu\n",
            n_prompt, n_prompt / (t1 - t0 > 0 ? t1 - t0 : 1e-9), n_gen,
            n_gen > 1 ? (n_gen - 1) / (t2 - t1 > 0 ? t2 - t1 : 1e-9) : 0.0, threads,
            loom_mode_name(mp.mode), loom_act_precision_name(loom_model_act_precision(model)),
            (unsigned long long)seed.value);
    if (mp.mode == LOOM_MODE_FUSED_WITH_CHECKPOINTS) loom_model_report_checkpoints(model);
    rc = 0;
done:
    free(logits);
    free(ids);
    free(file_text);
    loom_stop_filter_free(stop);
    loom_sampler_free(sampler);
    loom_tokenizer_free(tok);
    loom_model_free(model);
    return rc;
}
