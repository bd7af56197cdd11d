/* loom profile: per-layer op chain, kernels, traffic and time of one prefill
 * and one decode step. */
#include <stdio.h>
#include <stdlib.h>

#include "args.h"
#include "cli.h"
#include "graph/profile.h"
#include "model/model.h"

int cmd_profile(int argc, char **argv) {
    const char *model_path = NULL, *tok_path = NULL, *prompt = NULL, *mode = "step_by_step";
    int threads = 1, n_ctx = 0, prompt_len = 0, json = 0;
    const arg_opt opts[] = {
        {"-m", "--model", ARG_STR, &model_path, "MODEL", "llama2.c checkpoint (.bin)"},
        {"-z", "--tokenizer", ARG_STR, &tok_path, "TOKENIZER", "llama2.c tokenizer (.bin)"},
        {"-p", "--prompt", ARG_STR, &prompt, "PROMPT", "prompt for the prefill pass"},
        {NULL, "--prompt-len", ARG_INT, &prompt_len, "N",
         "use a synthetic prompt of N tokens instead of -p (default: 'Once upon a time')"},
        {"-t", "--threads", ARG_INT, &threads, "N", "threads (default 1)"},
        {"-c", "--ctx-size", ARG_INT, &n_ctx, "N", "context length (default: the model's)"},
        {NULL, "--mode", ARG_STR, &mode, "MODE", "execution mode: step_by_step"},
        {NULL, "--json", ARG_FLAG, &json, NULL, "print JSON instead of tables"},
    };
    const char *usage = "-m MODEL -z TOKENIZER [-p PROMPT | --prompt-len N] [-t N] [-c N] "
                        "[--mode MODE] [--json]";
    int r = args_parse("profile", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 2);
    if (r != 0) return r > 0 ? 0 : 2;
    if (threads <= 0) {
        fprintf(stderr, "loom profile: -t must be >= 1, got %d\n", threads);
        return 1;
    }
    if (prompt_len < 0 || (prompt && prompt_len)) {
        fprintf(stderr, "loom profile: give either -p or a --prompt-len >= 1\n");
        return 1;
    }
    loom_model_params mp = loom_model_default_params();
    mp.n_threads = threads;
    mp.n_ctx = n_ctx;
    if (loom_mode_parse(mode, &mp.mode) != LOOM_OK) return cli_fail("profile", "--mode");
    loom_model *m;
    loom_tokenizer *tok;
    if (cli_load("profile", model_path, tok_path, &mp, &m, &tok)) return 1;
    loom_model_info info = loom_model_get_info(m);
    int32_t *ids = NULL;
    int n = 0, rc = 1;
    float *logits = malloc((size_t)info.vocab_size * sizeof *logits);
    loom_profile prof[2] = {0};
    if (!logits) goto done;
    if (prompt_len > 0) {
        if (prompt_len + 1 > info.n_ctx) {
            fprintf(stderr, "loom profile: --prompt-len %d leaves no room for a decode step in "
                            "the context of %d\n", prompt_len, info.n_ctx);
            goto done;
        }
        ids = malloc((size_t)prompt_len * sizeof *ids);
        if (!ids) goto done;
        /* BOS then cycling ordinary tokens: the cost does not depend on which */
        for (int i = 0; i < prompt_len; i++) ids[i] = i == 0 ? loom_tokenizer_bos(tok) : 3 + (i % (info.vocab_size - 3));
        n = prompt_len;
    } else if (cli_encode("profile", tok, prompt ? prompt : "Once upon a time", info.n_ctx - 1, &ids, &n)) {
        goto done;
    }
    if (loom_model_forward(m, ids, n, 0, logits) != LOOM_OK) {
        cli_fail("profile", "prefill failed");
        goto done;
    }
    if (loom_profile_collect(m->graph, info.n_layers, "prefill", loom_mode_name(mp.mode), n, &prof[0]) != LOOM_OK)
        goto done;
    int32_t next = 0;
    for (int i = 1; i < info.vocab_size; i++)
        if (logits[i] > logits[next]) next = i;
    if (loom_model_forward(m, &next, 1, n, logits) != LOOM_OK) {
        cli_fail("profile", "decode step failed");
        goto done;
    }
    if (loom_profile_collect(m->graph, info.n_layers, "decode", loom_mode_name(mp.mode), 1, &prof[1]) != LOOM_OK)
        goto done;
    if (json) {
        loom_profile_print_json(stdout, model_path, prof, 2);
    } else {
        printf("model %s: %d layers, dim %d, %d heads (%d kv), vocab %d; %d thread%s\n\n", model_path,
               info.n_layers, info.dim, info.n_heads, info.n_kv_heads, info.vocab_size, threads,
               threads == 1 ? "" : "s");
        loom_profile_print_table(stdout, &prof[0], 1);
        printf("\n");
        loom_profile_print_table(stdout, &prof[1], 1);
    }
    rc = 0;
done:
    loom_profile_free(&prof[0]);
    loom_profile_free(&prof[1]);
    free(ids);
    free(logits);
    loom_tokenizer_free(tok);
    loom_model_free(m);
    return rc;
}
