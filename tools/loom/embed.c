/* loom embed: sentence embeddings with a BERT encoder (safetensors folder),
 * one vector per input line, as JSON (an array of arrays) or TSV. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "cli.h"
#include "model/bert.h"

#define EMBED_DEFAULT_MODEL "all-MiniLM-L6-v2"

/* Reads lines from f (without their newline; a final line without one counts). */
static int read_lines(FILE *f, char ***out, int *n_out) {
    char **v = NULL, *line = NULL;
    size_t cap = 0;
    int n = 0, vcap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (n == vcap) {
            vcap = vcap ? vcap * 2 : 64;
            char **nv = realloc(v, sizeof *v * (size_t)vcap);
            if (!nv) break;
            v = nv;
        }
        v[n] = strdup(line);
        if (!v[n]) break;
        n++;
    }
    free(line);
    *out = v;
    *n_out = n;
    return 0;
}

int cmd_embed(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *prompt = NULL, *format = "json";
    int threads = loom_model_default_params().n_threads, no_norm = 0;
    const arg_opt opts[] = {
        {"-m", "--model", ARG_STR, &model, "MODEL",
         "model folder (config.json, model.safetensors, tokenizer.json); default: "
         EMBED_DEFAULT_MODEL " in the models folder"},
        {"-f", "--file", ARG_STR, &file, "FILE", "one input per line (default: stdin, or -p)"},
        {"-p", "--prompt", ARG_STR, &prompt, "TEXT", "a single input text"},
        {NULL, "--format", ARG_STR, &format, "json|tsv", "output format (default json)"},
        {"-t", "--threads", ARG_INT, &threads, "N", "threads (default: the CPUs loom may run on)"},
        {NULL, "--no-normalize", ARG_FLAG, &no_norm, NULL, "mean pooling without L2 normalisation"},
    };
    const char *usage = "[-m MODEL] [-f FILE | -p TEXT] [--format json|tsv] [-t N] [--no-normalize]";
    int r = args_parse("embed", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 2);
    if (r != 0) return r > 0 ? 0 : 2;
    int tsv = strcmp(format, "tsv") == 0;
    if (!tsv && strcmp(format, "json") != 0) {
        fprintf(stderr, "loom embed: --format %s: expected json or tsv\n", format);
        return 2;
    }
    if (threads < 1 || threads > 1024) {
        fprintf(stderr, "loom embed: -t %d: expected 1..1024 threads\n", threads);
        return 2;
    }
    char buf[1024];
    if (!model) {
        char dir[768];
        snprintf(buf, sizeof buf, "%s/%s", cli_models_dir(dir, sizeof dir), EMBED_DEFAULT_MODEL);
        struct stat sb;
        if (stat(buf, &sb) != 0) {
            fprintf(stderr, "loom embed: no model given (-m MODEL) and the default model %s is not there "
                            "(run scripts/fetch-models.sh)\n", buf);
            return 1;
        }
        model = buf;
    }
    char **lines = NULL;
    int n = 0;
    if (prompt) {
        lines = malloc(sizeof *lines);
        if (lines) lines[n++] = strdup(prompt);
    } else {
        FILE *f = file ? fopen(file, "r") : stdin;
        if (!f) {
            fprintf(stderr, "loom embed: cannot open '%s'\n", file);
            return 1;
        }
        read_lines(f, &lines, &n);
        if (file) fclose(f);
    }
    loom_bert *m = NULL;
    int rc = 0;
    float *out = NULL;
    if (loom_bert_load(model, threads, &m) != LOOM_OK) {
        rc = cli_fail("embed", "cannot load the model");
        goto done;
    }
    int D = loom_bert_dim(m);
    out = malloc(sizeof(float) * (size_t)D * (size_t)(n ? n : 1));
    if (!out || loom_bert_embed(m, (const char *const *)lines, n, !no_norm, out) != LOOM_OK) {
        rc = cli_fail("embed", "cannot embed the input");
        goto done;
    }
    if (!tsv) printf("[");
    for (int i = 0; i < n; i++) {
        if (!tsv) printf("%s\n  [", i ? "," : "");
        for (int d = 0; d < D; d++)
            printf(tsv ? "%s%.8g" : "%s%.8g", d ? (tsv ? "\t" : ", ") : "", (double)out[(size_t)i * D + d]);
        if (tsv) printf("\n");
        else printf("]");
    }
    if (!tsv) printf("%s]\n", n ? "\n" : "");
done:
    free(out);
    loom_bert_free(m);
    for (int i = 0; i < n; i++) free(lines[i]);
    free(lines);
    return rc;
}
