/* Subcommands of the loom CLI. Each returns the process exit status. */
#ifndef LOOM_TOOLS_CLI_H
#define LOOM_TOOLS_CLI_H

#include "loom.h"
#include "model/tokenizer.h"

int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_profile(int argc, char **argv);

/* Prints "loom CMD: <what>: <last error>" to stderr and returns 1. */
int cli_fail(const char *cmd, const char *what);

/* Loads model and tokenizer and checks that their vocabularies agree. */
int cli_load(const char *cmd, const char *model_path, const char *tok_path,
             const loom_model_params *mp, loom_model **model, loom_tokenizer **tok);

/* Encodes text with BOS into a malloc'd array (*ids); checks it fits n_ctx. */
int cli_encode(const char *cmd, const loom_tokenizer *tok, const char *text, int n_ctx,
               int32_t **ids, int *n_ids);

#endif
