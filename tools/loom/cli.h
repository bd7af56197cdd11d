/* Subcommands of the loom CLI. Each returns the process exit status. The CLI
 * uses loom as a library: the public headers only (include/). */
#ifndef LOOM_TOOLS_CLI_H
#define LOOM_TOOLS_CLI_H

#include <stddef.h>

#include "loom.h"

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_batch(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* Prints "loom CMD: <what>: <last error>" to stderr and returns 1. */
int cli_fail(const char *cmd, const char *what);

/* File name of the default chat model under the models folder (scripts/fetch-models.sh). */
#define CLI_DEFAULT_LLM "SmolLM2-135M-Instruct.Q4_1.gguf"
/* The models folder: $LOOM_MODELS_DIR, else $HOME/.cache/loom/models. Returns buf. */
const char *cli_models_dir(char *buf, size_t n);
/* The default chat model's path (which may not exist). Returns buf. */
const char *cli_default_model(char *buf, size_t n);
/* When *model_path is NULL, points it at the default model in buf (size n), or
 * prints an error and returns 1 when that file is missing. */
int cli_resolve_model(const char *cmd, const char **model_path, char *buf, size_t n);

/* Loads model and tokenizer and checks that their vocabularies agree. The
 * model defaults to cli_default_model(); the tokenizer (tok_path NULL) to the
 * GGUF model's own vocabulary. */
int cli_load(const char *cmd, const char *model_path, const char *tok_path,
             const loom_model_params *mp, loom_model **model, loom_tokenizer **tok);

/* The KV cache type of --kv-dtype: "f32" (also NULL), "f16" or "bf16".
 * Prints an error naming the value and returns 1 otherwise. */
int cli_kv_dtype(const char *cmd, const char *name, loom_dtype *out);
#define CLI_KV_DTYPE_HELP "KV cache element type: f32, f16, bf16 or i8 (default f32)"

/* Seconds of the monotonic clock, from an arbitrary start: for speeds. */
double cli_time_s(void);

/* A seed from the clock for runs given none: nanoseconds of the real-time
 * clock, so two runs in one second differ. */
uint64_t cli_clock_seed(void);

/* Reads the text of option opt's file (path "-": stdin) into a malloc'd,
 * NUL-terminated *text, without one final newline (as llama.cpp's -f). Prints
 * an error naming the option and the file and returns 1 when it cannot be
 * read (missing, a directory, a read error) or holds a NUL byte. */
int cli_read_text(const char *cmd, const char *opt, const char *path, char **text);

/* Loads the fusion rules file (NULL: nothing to check) and applies the preset
 * (NULL: none), so that their errors are reported as theirs ("--rules: FILE:
 * LINE:COL: ...", "--fusion-preset: ...") before a model is loaded. Returns 1
 * after printing the error. */
int cli_check_rules(const char *cmd, const char *rules, const char *preset);

/* The activation precision of --act-precision: "q8" or "full"; NULL gives
 * LOOM_ACT_PREC_DEFAULT (the rules file's, else loom's default). Prints an
 * error naming the value and returns 1 otherwise. */
int cli_act_precision(const char *cmd, const char *name, loom_act_precision *out);
#define CLI_ACT_PRECISION_HELP \
    "activations against quantized weights: q8 (8-bit, int8 products) or full (f32) " \
    "(default: the rules' act_precision:, else loom's; docs/models.md)"

/* Encodes text with BOS into a malloc'd array (*ids); checks it fits n_ctx. */
int cli_encode(const char *cmd, const loom_tokenizer *tok, const char *text, int n_ctx,
               int32_t **ids, int *n_ids);

#endif
