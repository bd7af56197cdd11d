/* loom tokenize: token ids of a text, space-separated on one line. BOS/EOS
 * follow the vocabulary (llama2.c: BOS; GGUF: tokenizer.ggml.add_bos_token /
 * add_eos_token; BERT: [CLS] ... [SEP]) unless switched off. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"

int cmd_tokenize(int argc, char **argv) {
    const char *tok_path = NULL, *text = NULL, *file = NULL;
    int pieces = 0, no_bos = 0, no_eos = 0, special = 0;
    const arg_opt opts[] = {
        {"-z", "--tokenizer", ARG_STR, &tok_path, "TOKENIZER",
         "llama2.c tokenizer (.bin) or GGUF file (vocabulary or model)"},
        {"-p", "--prompt", ARG_STR, &text, "TEXT", "text to tokenize"},
        {"-f", "--file", ARG_STR, &file, "FILE", "the text from FILE ('-': stdin) instead of -p"},
        {NULL, "--pieces", ARG_FLAG, &pieces, NULL, "also print each token's piece on stderr"},
        {NULL, "--no-bos", ARG_FLAG, &no_bos, NULL, "no BOS / [CLS] even if the vocabulary asks for it"},
        {NULL, "--no-eos", ARG_FLAG, &no_eos, NULL, "no EOS / [SEP] even if the vocabulary asks for it"},
        {NULL, "--parse-special", ARG_FLAG, &special, NULL,
         "control tokens written in the text (e.g. <|im_start|>) become their ids"},
    };
    const char *usage = "-z TOKENIZER (-p TEXT | -f FILE) [--pieces] [--no-bos] [--no-eos] [--parse-special]";
    int r = args_parse("tokenize", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 2);
    if (r != 0) return r > 0 ? 0 : 2;
    if (!tok_path || (!text && !file) || (text && file)) {
        fprintf(stderr, "loom tokenize: %s\n", !tok_path ? "no tokenizer given (-z TOKENIZER)"
                                               : text    ? "-p and -f both give the text; use one"
                                                         : "no text given (-p TEXT or -f FILE)");
        return 1;
    }
    char *file_text = NULL;
    if (file && cli_read_text("tokenize", "-f", file, &file_text)) return 1;
    if (file_text) text = file_text;
    loom_tokenizer *tok;
    if (loom_tokenizer_load(tok_path, &tok) != LOOM_OK) {
        free(file_text);
        return cli_fail("tokenize", "cannot load tokenizer");
    }
    int flags = (loom_tokenizer_add_bos(tok) && !no_bos ? LOOM_TOK_BOS : 0) |
                (loom_tokenizer_add_eos(tok) && !no_eos ? LOOM_TOK_EOS : 0) |
                (special ? LOOM_TOK_PARSE_SPECIAL : 0);
    size_t len = strlen(text);
    if (len > (size_t)1 << 28) {
        fprintf(stderr, "loom tokenize: text of %zu bytes is too long\n", len);
        loom_tokenizer_free(tok);
        free(file_text);
        return 1;
    }
    /* At most one id per byte, plus BOS, a dummy prefix and EOS. */
    int cap = (int)len + 4, n = 0;
    int32_t *ids = malloc(sizeof *ids * (size_t)cap);
    loom_status st = ids ? loom_tokenizer_encode_ex(tok, text, len, flags, ids, cap, &n) : LOOM_ERR_NOMEM;
    if (st != LOOM_OK) {
        free(ids);
        free(file_text);
        loom_tokenizer_free(tok);
        return st == LOOM_ERR_NOMEM && !ids ? (fprintf(stderr, "loom tokenize: out of memory\n"), 1)
                                            : cli_fail("tokenize", "cannot tokenize the text");
    }
    for (int i = 0; i < n; i++) {
        printf("%s%d", i ? " " : "", ids[i]);
        if (pieces) fprintf(stderr, "%d\t'%s'\n", ids[i], loom_tokenizer_piece(tok, ids[i]));
    }
    printf("\n");
    free(ids);
    free(file_text);
    loom_tokenizer_free(tok);
    return 0;
}
