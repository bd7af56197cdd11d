/* loom run: prompt -> generated text, printed as llama2.c's run.c prints it. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"

/* Whether a piece is printed. Like llama2.c's run.c, a llama2.c vocabulary's
 * piece that is one unprintable, non-space byte is skipped; byte-level BPE
 * pieces may be parts of a UTF-8 sequence, so every one of them is printed. */
static int printable(int llama2c, const char *text, size_t len) {
    if (!llama2c || len != 1) return len > 0;
    return isprint((unsigned char)text[0]) || isspace((unsigned char)text[0]);
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
        {NULL, "--fusion-preset", ARG_STR, &preset, "NAME", "preset of the rules: small, 7b, 13b, 70b, fast_attention, one_pass_ffn"},
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
    loom_stop_filter *stop = NULL; /* checks the stop strings: the engine takes up to LOOM_MAX_STOPS */
    if (loom_stop_filter_init(&stop, stops.v, stops.n) != LOOM_OK) return cli_fail("run", "--stop");
    loom_stop_filter_free(stop);
    if (stops.n > LOOM_MAX_STOPS) {
        fprintf(stderr, "loom run: at most %d --stop strings, got %d\n", LOOM_MAX_STOPS, stops.n);
        return 1;
    }
    char *file_text = NULL;
    if (prompt_file && cli_read_text("run", "-f", prompt_file, &file_text)) return 1;
    if (file_text) prompt = file_text;

    loom_model *model = NULL;
    loom_tokenizer *tok = NULL;
    loom_engine *eng = NULL;
    int32_t *ids = NULL;
    int n_prompt = 0, rc = 1;
    if (cli_load("run", model_path, tok_path, &mp, &model, &tok)) goto done;
    loom_model_info info = loom_model_get_info(model);
    if (cli_encode("run", tok, prompt ? prompt : "", info.n_ctx, &ids, &n_prompt)) goto done;
    /* the last generated token is printed, not run: n_prompt + n_new - 1 positions */
    if ((long)n_prompt + n_new - 1 > info.n_ctx) {
        fprintf(stderr, "loom run: -n %d with a %d-token prompt needs %ld positions, beyond the "
                        "context of %d (-c)\n", n_new, n_prompt, (long)n_prompt + n_new - 1, info.n_ctx);
        goto done;
    }
    /* one generation path: the batch engine, with one sequence */
    loom_engine_params ep = loom_engine_default_params();
    ep.n_seq_max = 1, ep.seq_len = info.n_ctx;
    if (loom_engine_create(model, tok, &ep, &eng) != LOOM_OK) {
        cli_fail("run", "cannot start the engine");
        goto done;
    }
    loom_request_params rp = loom_request_default_params();
    rp.sampling = sp;
    rp.sampling.repeat_last_n = last_n < 0 ? info.n_ctx : last_n;
    rp.max_tokens = n_new;
    for (int i = 0; i < stops.n && i < LOOM_MAX_STOPS; i++) rp.stops[rp.n_stops++] = stops.v[i];
    if (n_new > 0 && loom_engine_add(eng, 0, ids, n_prompt, &rp) != LOOM_OK) {
        cli_fail("run", "cannot run the prompt");
        goto done;
    }
    const int bos = loom_tokenizer_bos(tok), llama2c = strcmp(loom_tokenizer_kind_name(tok), "llama2c") == 0;
    for (int i = 0; i < n_prompt; i++) {
        if (i == 0 && ids[0] == bos) continue;
        size_t len = 0;
        const char *p = loom_tokenizer_decode(tok, i ? ids[i - 1] : -1, ids[i], &len);
        if (p && printable(llama2c, p, len)) fwrite(p, 1, len, stdout);
    }
    fflush(stdout);

    double t0 = cli_time_s(), t1 = t0;
    int n_gen = 0, first = 1;
    while (loom_engine_pending(eng)) {
        const loom_engine_event *ev;
        int n_ev;
        if (loom_engine_step(eng, &ev, &n_ev) != LOOM_OK) {
            cli_fail("run", "forward pass failed");
            goto done;
        }
        for (int i = 0; i < n_ev; i++) {
            if (first) t1 = cli_time_s(), first = 0;
            if (ev[i].finish == LOOM_FINISH_ERROR) {
                fprintf(stderr, "loom run: %s\n", ev[i].error ? ev[i].error : "generation failed");
                goto done;
            }
            n_gen = ev[i].n_generated;
            if (printable(llama2c && ev[i].token >= 0, ev[i].text, ev[i].text_len))
                fwrite(ev[i].text, 1, ev[i].text_len, stdout);
            fflush(stdout);
        }
    }
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
    loom_engine_free(eng);
    free(ids);
    free(file_text);
    loom_tokenizer_free(tok);
    loom_model_free(model);
    return rc;
}
