/* loom — command-line entry point: dispatches to one file per subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"chat", cmd_chat, "talk with a chat model (interactive; Ctrl-D ends)"},
    {"bench", cmd_bench, "prompt and generation speed (llama-bench semantics)"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"profile", cmd_profile, "per-layer kernels, memory traffic and time of a forward pass"},
    {"plan", cmd_plan, "per-layer kernels, traffic and roofline time of a model config, no weights"},
    {"embed", cmd_embed, "sentence embeddings with a BERT model (one vector per input line)"},
    {"convert", cmd_convert, "safetensors / llama2.c / GGUF -> GGUF, optionally requantized"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: loom COMMAND [options]   (loom COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].fn(argc, argv);
    fprintf(stderr, "loom: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
