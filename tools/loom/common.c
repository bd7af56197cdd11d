#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_fail(const char *cmd, const char *what) {
    const char *msg = loom_last_error();
    fprintf(stderr, "loom %s: %s%s%s\n", cmd, what, *msg ? ": " : "", msg);
    return 1;
}

int cli_load(const char *cmd, const char *model_path, const char *tok_path,
             const loom_model_params *mp, loom_model **model, loom_tokenizer **tok) {
    *model = NULL;
    *tok = NULL;
    if (!model_path) {
        fprintf(stderr, "loom %s: no model given (-m MODEL)\n", cmd);
        return 1;
    }
    if (!tok_path) {
        fprintf(stderr, "loom %s: no tokenizer given (-z TOKENIZER)\n", cmd);
        return 1;
    }
    if (loom_model_load(model_path, mp, model) != LOOM_OK) return cli_fail(cmd, "cannot load model");
    if (loom_tokenizer_load(tok_path, tok) != LOOM_OK) {
        loom_model_free(*model);
        *model = NULL;
        return cli_fail(cmd, "cannot load tokenizer");
    }
    int mv = loom_model_get_info(*model).vocab_size, tv = loom_tokenizer_vocab_size(*tok);
    if (mv != tv) {
        fprintf(stderr, "loom %s: tokenizer/vocab mismatch: tokenizer '%s' has %d tokens, "
                        "model '%s' has a vocabulary of %d\n", cmd, tok_path, tv, model_path, mv);
        loom_tokenizer_free(*tok);
        loom_model_free(*model);
        *tok = NULL;
        *model = NULL;
        return 1;
    }
    return 0;
}

int cli_encode(const char *cmd, const loom_tokenizer *tok, const char *text, int n_ctx,
               int32_t **ids, int *n_ids) {
    size_t len = strlen(text);
    /* worst case: BOS, dummy prefix, one id per byte, EOS */
    if (len > (size_t)1 << 28) {
        fprintf(stderr, "loom %s: prompt of %zu bytes is too long\n", cmd, len);
        return 1;
    }
    int cap = (int)len + 3;
    *ids = malloc((size_t)cap * sizeof **ids);
    if (!*ids) {
        fprintf(stderr, "loom %s: out of memory\n", cmd);
        return 1;
    }
    if (loom_tokenizer_encode(tok, text, 1, 0, *ids, cap, n_ids) != LOOM_OK) {
        free(*ids);
        *ids = NULL;
        return cli_fail(cmd, "cannot tokenize the prompt");
    }
    if (*n_ids > n_ctx) {
        fprintf(stderr, "loom %s: prompt is %d tokens, longer than the context of %d (-c)\n", cmd,
                *n_ids, n_ctx);
        free(*ids);
        *ids = NULL;
        return 1;
    }
    return 0;
}
