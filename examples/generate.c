/*
 * Text generation with loom as a library: load a model, tokenize a prompt,
 * run it through the model, then sample and print one token at a time.
 *
 *   generate MODEL TOKENIZER PROMPT [N [TEMP]]
 *
 * MODEL is a GGUF file, a Hugging Face folder or a llama2.c checkpoint;
 * TOKENIZER is a tokenizer file, or "-" for the model's own vocabulary (GGUF,
 * Hugging Face). N tokens are generated (default 64) at temperature TEMP
 * (default 0: greedy, the same text every run). Exit status 0 on success.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom.h>

static int fail(const char *what) {
    fprintf(stderr, "generate: %s: %s\n", what, loom_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: generate MODEL TOKENIZER|- PROMPT [N [TEMP]]\n");
        return 2;
    }
    const char *prompt = argv[3];
    int n_new = argc > 4 ? atoi(argv[4]) : 64;
    float temp = argc > 5 ? (float)atof(argv[5]) : 0.0f;

    /* 1. the model (weights mapped, KV cache, forward programs compiled once) */
    loom_model_params mp = loom_model_default_params();
    mp.n_ctx = 256;  /* a short context: a small KV cache */
    loom_model *model = NULL;
    if (loom_model_load(argv[1], &mp, &model) != LOOM_OK) return fail("cannot load the model");
    loom_model_info info = loom_model_get_info(model);

    /* 2. its tokenizer */
    loom_tokenizer *tok = NULL;
    loom_status s = strcmp(argv[2], "-") == 0 ? loom_tokenizer_from_model(model, &tok)
                                              : loom_tokenizer_load(argv[2], &tok);
    if (s != LOOM_OK) {
        loom_model_free(model);
        return fail("cannot load the tokenizer");
    }

    /* 3. the prompt as token ids: BOS when the vocabulary asks for it; len + 4
     * ids always suffice */
    size_t len = strlen(prompt);
    int cap = (int)len + 4, n_prompt = 0, rc = 1;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    float *logits = malloc((size_t)info.vocab_size * sizeof *logits);
    loom_sampler *sampler = NULL;
    loom_sampler_params sp = loom_sampler_default_params();
    sp.temperature = temp;
    sp.seed = 42;
    int flags = loom_tokenizer_add_bos(tok) ? LOOM_TOK_BOS : 0;
    if (!ids || !logits) {
        fprintf(stderr, "generate: out of memory\n");
        goto done;
    }
    if (loom_tokenizer_encode_ex(tok, prompt, len, flags, ids, cap, &n_prompt) != LOOM_OK) {
        fail("cannot tokenize the prompt");
        goto done;
    }
    if (n_prompt == 0 || n_prompt + n_new > info.n_ctx) {
        fprintf(stderr, "generate: the prompt (%d tokens) and %d new tokens do not fit %d positions\n", n_prompt,
                n_new, info.n_ctx);
        goto done;
    }
    if (loom_sampler_init(&sampler, info.vocab_size, &sp) != LOOM_OK) {
        fail("cannot set up the sampler");
        goto done;
    }

    /* 4. the prompt in one forward pass (positions 0..n_prompt-1): the logits
     * of its last token; then one token at a time */
    if (loom_model_forward(model, ids, n_prompt, 0, logits) != LOOM_OK) {
        fail("forward pass failed");
        goto done;
    }
    printf("%s", prompt);
    int prev = ids[n_prompt - 1];
    for (int i = 0, pos = n_prompt; i < n_new; i++, pos++) {
        int32_t next;
        if (loom_sampler_sample(sampler, logits, &next) != LOOM_OK) {
            fail("sampling failed");
            goto done;
        }
        /* the end of the text: EOS, BOS (llama2.c separates stories with it),
         * or any control token (an end of turn) */
        if (next == loom_tokenizer_eos(tok) || next == loom_tokenizer_bos(tok) ||
            loom_tokenizer_is_control(tok, next))
            break;
        size_t n_bytes;
        const char *piece = loom_tokenizer_decode(tok, prev, next, &n_bytes);
        fwrite(piece, 1, n_bytes, stdout);
        fflush(stdout);
        prev = next;
        if (i + 1 < n_new && loom_model_forward(model, &next, 1, pos, logits) != LOOM_OK) {
            fail("forward pass failed");
            goto done;
        }
    }
    printf("\n");
    rc = 0;
done:
    loom_sampler_free(sampler);
    free(logits);
    free(ids);
    loom_tokenizer_free(tok);
    loom_model_free(model);
    return rc;
}
