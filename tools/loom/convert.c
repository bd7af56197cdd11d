/* loom convert IN OUT [--type T]: Hugging Face Llama (safetensors folder),
 * llama2.c checkpoints (with --tokenizer) or GGUF files to GGUF. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cli.h"

int cmd_convert(int argc, char **argv) {
    const char *type = NULL, *tok = NULL;
    const arg_opt opts[] = {
        {NULL, "--type", ARG_STR, &type, "f32|f16|bf16|q8_0|q4_0|q4_1",
         "type of the weight matrices (default: as in the input)"},
        {"-z", "--tokenizer", ARG_STR, &tok, "TOKENIZER", "llama2.c input: its tokenizer.bin"},
    };
    const char *usage = "IN OUT [--type f32|f16|bf16|q8_0|q4_0|q4_1] [-z tokenizer.bin]\n"
                        "  IN: a Hugging Face Llama folder (config.json, model.safetensors, tokenizer.json),\n"
                        "      a llama2.c checkpoint (with -z), or a GGUF file (requantization)";
    /* positional IN OUT first, options after them */
    if (argc >= 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0 ||
                      strcmp(argv[2], "--version") == 0))
        return args_parse("convert", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 2) < 0 ? 2 : 0;
    if (argc < 4 || argv[2][0] == '-' || argv[3][0] == '-') {
        fprintf(stderr, "loom convert: expected IN and OUT (usage: loom convert %s)\n", usage);
        return 2;
    }
    int r = args_parse("convert", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 4);
    if (r != 0) return r > 0 ? 0 : 2;
    loom_convert_params p = loom_convert_default_params();
    p.tokenizer = tok;
    if (type) {
        if (loom_convert_parse_type(type, &p.type) != LOOM_OK) return cli_fail("convert", "bad --type");
        p.type_set = 1;
    }
    if (loom_convert(argv[2], argv[3], &p) != LOOM_OK) return cli_fail("convert", "conversion failed");
    fprintf(stderr, "loom convert: wrote %s\n", argv[3]);
    return 0;
}
