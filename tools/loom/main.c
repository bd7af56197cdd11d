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
    {"chat", cmd_chat, "talk with a chat model (interactive; Ctrl-C stops a reply, Ctrl-D ends)"},
    {"bench", cmd_bench, "prompt and generation speed (llama-bench semantics)"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"profile", cmd_profile, "per-layer kernels, memory traffic and time of a forward pass"},
    {"plan", cmd_plan, "per-layer kernels, traffic and roofline time of a model config, no weights"},
    {"batch", cmd_batch, "offline batch inference: JSONL requests through the batch engine"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server (chat, completions, embeddings; continuous batching)"},
    {"perplexity", cmd_perplexity, "perplexity of a model on a text (llama-perplexity's scoring)"},
    {"embed", cmd_embed, "sentence embeddings with a BERT model (one vector per input line)"},
    {"tune", cmd_tune, "kernel variants chosen by measurement on this CPU (the wisdom file)"},
    {"convert", cmd_convert, "safetensors / llama2.c / GGUF -> GGUF, optionally requantized"},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(f, "usage: loom COMMAND [options]   (loom help COMMAND, or loom COMMAND --help, for its "
               "options)\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n  --version  print loom's version\n");
}

static int find_command(const char *name) {
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0) return (int)i;
    fprintf(stderr, "loom: unknown command '%s'\n", name);
    usage(stderr);
    return -1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("loom %s\n", loom_version());
        return 0;
    }
    if (strcmp(argv[1], "help") == 0 && argc == 3) {  /* loom help CMD = loom CMD --help */
        int c = find_command(argv[2]);
        if (c < 0) return 2;
        char *args[] = {argv[0], argv[2], "--help", NULL};
        return commands[c].fn(3, args);
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        (strcmp(argv[1], "help") == 0 && argc == 2)) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "help") == 0) {
        fprintf(stderr, "loom help: expected one command, e.g. 'loom help run'\n");
        return 2;
    }
    int c = find_command(argv[1]);
    return c < 0 ? 2 : commands[c].fn(argc, argv);
}
