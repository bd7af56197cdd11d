#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"

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
    loom_model_desc desc;
    if (loom_model_describe(*model, &desc) != LOOM_OK) {
        loom_model_free(*model);
        *model = NULL;
        return cli_fail(cmd, "cannot load model");
    }
    if (!tok_path && desc.format == LOOM_MODEL_LLAMA2C) {
        fprintf(stderr, "loom %s: no tokenizer given (-z TOKENIZER); llama2.c checkpoints need one\n",
                cmd);
        loom_model_free(*model);
        *model = NULL;
        return 1;
    }
    /* GGUF: its own vocabulary (from the file already open); Hugging Face:
     * tokenizer.json beside the weights; -z overrides both */
    loom_status ts = tok_path ? loom_tokenizer_load(tok_path, tok) : loom_tokenizer_from_model(*model, tok);
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

int cli_read_text(const char *cmd, const char *opt, const char *path, char **text) {
    *text = NULL;
    int is_stdin = strcmp(path, "-") == 0;
    const char *name = is_stdin ? "stdin" : path;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "loom %s: %s %s: cannot open: %s\n", cmd, opt, path, strerror(errno));
        return 1;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "loom %s: %s %s: is a directory, not a text file\n", cmd, opt, path);
        if (!is_stdin) fclose(f);
        return 1;
    }
    /* read as a stream: pipes and terminals have no size */
    const size_t max = (size_t)1 << 28;
    size_t len = 0, cap = 0;
    char *buf = NULL;
    int err = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            char *p = cap < max ? realloc(buf, cap = cap ? 2 * cap : 65536) : NULL;
            if (!p) {
                err = cap >= max ? E2BIG : ENOMEM;
                break;
            }
            buf = p;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) err = errno ? errno : EIO;
            break;
        }
    }
    if (!is_stdin) fclose(f);
    if (err) {
        fprintf(stderr, "loom %s: %s %s: %s\n", cmd, opt, name,
                err == E2BIG ? "larger than 256 MiB" : err == ENOMEM ? "out of memory" : strerror(err));
        free(buf);
        return 1;
    }
    if (!buf && !(buf = malloc(1))) {
        fprintf(stderr, "loom %s: out of memory\n", cmd);
        return 1;
    }
    buf[len] = '\0';
    const char *nul = memchr(buf, '\0', len);
    if (nul) {
        fprintf(stderr, "loom %s: %s %s: a NUL byte at offset %zu; expected text\n", cmd, opt, name,
                (size_t)(nul - buf));
        free(buf);
        return 1;
    }
    if (len > 0 && buf[len - 1] == '\n') buf[--len] = '\0';
    *text = buf;
    return 0;
}

int cli_check_rules(const char *cmd, const char *rules, const char *preset) {
    if (!rules && !preset) return 0;
    loom_fusion_rules *r = NULL;
    if (loom_fusion_rules_load(rules, &r) != LOOM_OK) return cli_fail(cmd, "--rules");
    int rc = preset && loom_fusion_rules_preset(r, preset) != LOOM_OK ? cli_fail(cmd, "--fusion-preset") : 0;
    loom_fusion_rules_free(r);
    return rc;
}

double cli_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t cli_clock_seed(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (uint64_t)time(NULL);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
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
