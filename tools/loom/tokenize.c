/* loom tokenize: token ids of a text, with BOS, space-separated on one line. */
#include <stdio.h>
#include <stdlib.h>

#include "args.h"
#include "cli.h"

int cmd_tokenize(int argc, char **argv) {
    const char *tok_path = NULL, *text = NULL;
    int pieces = 0;
    const arg_opt opts[] = {
        {"-z", "--tokenizer", ARG_STR, &tok_path, "TOKENIZER", "llama2.c tokenizer (.bin)"},
        {"-p", "--prompt", ARG_STR, &text, "TEXT", "text to tokenize"},
        {NULL, "--pieces", ARG_FLAG, &pieces, NULL, "also print each token's piece on stderr"},
    };
    const char *usage = "-z TOKENIZER -p TEXT [--pieces]";
    int r = args_parse("tokenize", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 2);
    if (r != 0) return r > 0 ? 0 : 2;
    if (!tok_path || !text) {
        fprintf(stderr, "loom tokenize: %s\n", !tok_path ? "no tokenizer given (-z TOKENIZER)"
                                                         : "no text given (-p TEXT)");
        return 1;
    }
    loom_tokenizer *tok;
    if (loom_tokenizer_load_llama2c(tok_path, &tok) != LOOM_OK)
        return cli_fail("tokenize", "cannot load tokenizer");
    int32_t *ids;
    int n;
    if (cli_encode("tokenize", tok, text, 1 << 30, &ids, &n)) {
        loom_tokenizer_free(tok);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        printf("%s%d", i ? " " : "", ids[i]);
        if (pieces) fprintf(stderr, "%d\t'%s'\n", ids[i], loom_tokenizer_piece(tok, ids[i]));
    }
    printf("\n");
    free(ids);
    loom_tokenizer_free(tok);
    return 0;
}
