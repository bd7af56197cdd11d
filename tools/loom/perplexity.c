/* loom perplexity: a model's perplexity on a text, scored as llama.cpp's
 * llama-perplexity scores it, so the numbers of the two engines on one file
 * compare. The text is tokenized once (with BOS when the vocabulary adds
 * one), cut into non-overlapping chunks of -c tokens (a partial last chunk is
 * dropped), each chunk's first token set to BOS (when the vocabulary adds
 * one) and evaluated from position 0 with every position's logits, and the
 * second half of each chunk scored: the negative log-likelihood of token j+1
 * from the logits at j, for j from c/2 to c-2. Prints the running estimate
 * after each chunk ("[1]12.3456,[2]...") and ends with llama-perplexity's
 * line "Final estimate: PPL = X +/- Y" (Y: the standard error of the mean
 * NLL, times PPL). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"

/* -log p(target) from one row of logits (double sums). */
static double nll_of(const float *l, int V, int target) {
    double mx = l[0], s = 0;
    for (int k = 1; k < V; k++) mx = l[k] > mx ? l[k] : mx;
    for (int k = 0; k < V; k++) s += exp((double)l[k] - mx);
    return -((double)l[target] - mx - log(s));
}

int cmd_perplexity(int argc, char **argv) {
    const char *model_path = NULL, *tok_path = NULL, *file = NULL, *mode = NULL, *kv_dtype = NULL, *act = NULL;
    int ctx = 512, chunks = 0, threads = loom_model_default_params().n_threads, n_batch = 0;
    const arg_opt opts[] = {
        {"-m", "--model", ARG_STR, &model_path, "MODEL", "GGUF, safetensors folder or llama2.c checkpoint "
                                                         "(default: SmolLM2-135M-Instruct)"},
        {"-z", "--tokenizer", ARG_STR, &tok_path, "TOKENIZER", "tokenizer (default: the model's own)"},
        {"-f", "--file", ARG_STR, &file, "FILE", "the text to score ('-': stdin)"},
        {"-c", "--ctx-size", ARG_INT, &ctx, "N", "tokens per chunk (default 512)"},
        {NULL, "--chunks", ARG_INT, &chunks, "K", "score the first K chunks only (default: all)"},
        {"-b", "--batch-size", ARG_INT, &n_batch, "N", "tokens per forward pass (default 512)"},
        {"-t", "--threads", ARG_INT, &threads, "N", "threads (default: the CPUs loom may run on)"},
        {NULL, "--kv-dtype", ARG_STR, &kv_dtype, "TYPE", CLI_KV_DTYPE_HELP},
        {NULL, "--act-precision", ARG_STR, &act, "q8|full", CLI_ACT_PRECISION_HELP},
        {NULL, "--mode", ARG_STR, &mode, "MODE", "step_by_step, fused or fused_with_checkpoints (default fused)"},
    };
    const char *usage = "-f FILE [-m MODEL] [-z TOKENIZER] [-c N] [--chunks K] [-b N] [-t N] [--kv-dtype T] "
                        "[--act-precision q8|full] [--mode MODE]";
    int r = args_parse("perplexity", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 2);
    if (r != 0) return r > 0 ? 0 : 2;
    if (!file) {
        fprintf(stderr, "loom perplexity: give the text with -f FILE (- for stdin)\n");
        return 2;
    }
    if (ctx < 4 || chunks < 0 || threads < 1 || n_batch < 0) {
        fprintf(stderr, "loom perplexity: -c must be >= 4, --chunks and -b >= 0, -t >= 1\n");
        return 1;
    }
    loom_model_params mp = loom_model_default_params();
    mp.n_threads = threads;
    mp.n_ctx = ctx;
    mp.n_batch = n_batch;
    if (cli_kv_dtype("perplexity", kv_dtype, &mp.kv_dtype) || cli_act_precision("perplexity", act, &mp.act_precision))
        return 1;
    if (loom_model_params_set_mode(&mp, mode) != LOOM_OK) return cli_fail("perplexity", "--mode");
    char *text = NULL;
    if (cli_read_text("perplexity", "-f", file, &text)) return 1;
    loom_model *model = NULL;
    loom_tokenizer *tok = NULL;
    int32_t *ids = NULL, *chunk = NULL;
    float *logits = NULL;
    int rc = 1;
    if (cli_load("perplexity", model_path, tok_path, &mp, &model, &tok)) goto done;
    size_t len = strlen(text);
    int bos = loom_tokenizer_bos(tok), add_bos = loom_tokenizer_add_bos(tok) && bos >= 0, n = 0;
    if (len > (size_t)1 << 30 || !(ids = malloc(sizeof *ids * (len + 4)))) {
        fprintf(stderr, "loom perplexity: -f: the text of %zu bytes is too long\n", len);
        goto done;
    }
    if (loom_tokenizer_encode_ex(tok, text, len, add_bos ? LOOM_TOK_BOS : 0, ids, (int)len + 4, &n) != LOOM_OK) {
        cli_fail("perplexity", "cannot tokenize the text");
        goto done;
    }
    int have = n / ctx;
    if (have == 0) {
        fprintf(stderr, "loom perplexity: the text is %d tokens, fewer than one chunk of %d (-c)\n", n, ctx);
        goto done;
    }
    if (chunks == 0 || chunks > have) chunks = have;
    const int V = loom_model_get_info(model).vocab_size;
    logits = malloc(sizeof *logits * (size_t)ctx * (size_t)V);
    chunk = malloc(sizeof *chunk * (size_t)ctx);
    if (!logits || !chunk) {
        fprintf(stderr, "loom perplexity: out of memory for %d x %d logits\n", ctx, V);
        goto done;
    }
    fprintf(stderr, "loom perplexity: %d tokens, %d chunks of %d, %d scored per chunk\n", n, chunks, ctx,
            ctx - 1 - ctx / 2);
    double sum = 0, sum2 = 0, t0 = cli_time_s();
    long cnt = 0;
    for (int c = 0; c < chunks; c++) {
        memcpy(chunk, ids + (size_t)c * ctx, sizeof *chunk * (size_t)ctx);
        if (add_bos) chunk[0] = bos;
        if (loom_model_forward_all(model, chunk, ctx, 0, logits) != LOOM_OK) {
            cli_fail("perplexity", "forward pass failed");
            goto done;
        }
        for (int j = ctx / 2; j < ctx - 1; j++) {
            double v = nll_of(logits + (size_t)j * V, V, chunk[j + 1]);
            if (!isfinite(v)) {
                fprintf(stderr, "\nloom perplexity: chunk %d, token %d: the logits are not finite\n", c + 1, j + 1);
                goto done;
            }
            sum += v, sum2 += v * v, cnt++;
        }
        printf("[%d]%.4f,", c + 1, exp(sum / (double)cnt));
        fflush(stdout);
    }
    double mean = sum / (double)cnt, var = sum2 / (double)cnt - mean * mean;
    double se = cnt > 1 && var > 0 ? sqrt(var / (double)(cnt - 1)) : 0.0;
    printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", exp(mean), se * exp(mean));
    fprintf(stderr, "loom perplexity: %ld tokens scored in %.2f s (%d threads, mode %s)\n", cnt,
            cli_time_s() - t0, threads, loom_mode_name(mp.mode));
    rc = 0;
done:
    free(logits), free(chunk), free(ids), free(text);
    loom_tokenizer_free(tok);
    loom_model_free(model);
    return rc;
}
