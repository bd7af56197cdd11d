#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "model/model.h"

int cli_fail(const char *cmd, const char *what) {
    const char *msg = loom_last_error();
    fprintf(stderr, "loom %s: %s%s%s\n", cmd, what, *msg ? ": " : "", msg);
    return 1;
}

const char *cli_models_dir(char *buf, size_t n) {
    const char *dir = getenv("LOOM_MODELS_DIR");
    const char *home = getenv("HOME");
    if (dir && *dir) snprintf(buf, n, "%s", dir);
    else snprintf(buf, n, "%s/.cache/loom/models", home && *home ? home : ".");
    return buf;
}

const char *cli_default_model(char *buf, size_t n) {
    char dir[768];
    snprintf(buf, n, "%s/%s", cli_models_dir(dir, sizeof dir), CLI_DEFAULT_LLM);
    return buf;
}

int cli_kv_dtype(const char *cmd, const char *name, loom_dtype *out) {
    static const loom_dtype types[] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I8};
    if (!name) name = "f32";
    if (!strcmp(name, "int8")) name = "i8"; /* loom plan's name for it */
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(name, loom_dtype_name(types[i]))) {
            *out = types[i];
            return 0;
        }
    fprintf(stderr, "loom %s: --kv-dtype expects f32, f16, bf16 or i8, got '%s'\n", cmd, name);
    return 1;
}

int cli_act_precision(const char *cmd, const char *name, loom_act_precision *out) {
    if (!name) {
        *out = LOOM_ACT_PREC_DEFAULT;
        return 0;
    }
    if (loom_act_precision_parse(name, out) == LOOM_OK) return 0;
    fprintf(stderr, "loom %s: --act-precision expects q8 or full, got '%s'\n", cmd, name);
    return 1;
}

int cli_resolve_model(const char *cmd, const char **model_path, char *buf, size_t n) {
    if (*model_path) return 0;
    cli_default_model(buf, n);
    FILE *f = fopen(buf, "rb");
    if (!f) {
        fprintf(stderr, "loom %s: no model given (-m MODEL) and the default model %s is not there "
                        "(run scripts/fetch-models.sh)\n", cmd, buf);
        return 1;
    }
    fclose(f);
    *model_path = buf;
    return 0;
}

int cli_load(const char *cmd, const char *model_path, const char *tok_path,
             const loom_model_params *mp, loom_model **model, loom_tokenizer **tok) {
    *model = NULL;
    *tok = NULL;
    char def[1024];
    if (cli_resolve_model(cmd, &model_path, def, sizeof def)) return 1;
    if (loom_model_load(model_path, mp, model) != LOOM_OK) return cli_fail(cmd, "cannot load model");
    if (!tok_path && (*model)->format == LOOM_MODEL_LLAMA2C) {
        fprintf(stderr, "loom %s: no tokenizer given (-z TOKENIZER); llama2.c checkpoints need one\n",
                cmd);
        loom_model_free(*model);
        *model = NULL;
        return 1;
    }
    /* GGUF: its own vocabulary (from the file already open); Hugging Face:
     * tokenizer.json beside the weights; -z overrides both */
    char hf[1200];
    if (!tok_path && (*model)->format == LOOM_MODEL_SAFETENSORS) {
        struct stat sb;
        int dir = stat(model_path, &sb) == 0 && S_ISDIR(sb.st_mode);
        const char *slash = strrchr(model_path, '/');
        if (dir) snprintf(hf, sizeof hf, "%s/tokenizer.json", model_path);
        else snprintf(hf, sizeof hf, "%.*stokenizer.json", slash ? (int)(slash - model_path + 1) : 0, model_path);
        tok_path = hf;
    }
    /* here no tok_path means a GGUF model (llama2.c returned above, safetensors got one) */
    loom_status ts = tok_path ? loom_tokenizer_load(tok_path, tok) : loom_tokenizer_from_gguf((*model)->gguf, tok);
    if (ts != LOOM_OK) {
        loom_model_free(*model);
        *model = NULL;
        return cli_fail(cmd, "cannot load tokenizer");
    }
    if (!tok_path) tok_path = model_path;
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
    /* BOS as the vocabulary asks (llama2.c: always; SmolLM2: never) */
    int flags = loom_tokenizer_add_bos(tok) ? LOOM_TOK_BOS : 0;
    /* control tokens written in a prompt ("<|im_start|>") are tokens, as in llama.cpp */
    if (strcmp(loom_tokenizer_kind_name(tok), "llama2c") != 0) flags |= LOOM_TOK_PARSE_SPECIAL;
    if (loom_tokenizer_encode_ex(tok, text, len, flags, *ids, cap, n_ids) != LOOM_OK) {
        free(*ids);
        *ids = NULL;
        return cli_fail(cmd, "cannot tokenize the prompt");
    }
    if (*n_ids == 0) {  /* nothing to start from: begin with BOS when there is one */
        int bos = loom_tokenizer_bos(tok);
        if (bos < 0) {
            fprintf(stderr, "loom %s: the prompt is empty and the vocabulary has no BOS token; "
                            "give -p\n", cmd);
            free(*ids);
            *ids = NULL;
            return 1;
        }
        (*ids)[0] = bos;
        *n_ids = 1;
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
