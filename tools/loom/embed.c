/* loom embed: sentence embeddings with a BERT encoder (safetensors folder),
 * one vector per input line, as JSON (an array of arrays) or TSV. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "cli.h"

#define EMBED_DEFAULT_MODEL "all-MiniLM-L6-v2"

/* Reads the lines of f (name: for messages) without their newline (a final
 * line without one counts). Returns 1 after printing an error: a read error
 * (a directory, an I/O error), a NUL byte (it would cut the line short), or
 * out of memory. */
static int read_lines(FILE *f, const char *name, char ***out, int *n_out) {
    char **v = NULL, *line = NULL;
    size_t cap = 0;
    int n = 0, vcap = 0, rc = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        const char *nul = memchr(line, '\0', (size_t)len);
        if (nul) {
            fprintf(stderr, "loom embed: %s:%d: a NUL byte at column %zu; expected text\n", name, n + 1,
                    (size_t)(nul - line) + 1);
            rc = 1;
            break;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (n == vcap) {
            vcap = vcap ? vcap * 2 : 64;
            char **nv = realloc(v, sizeof *v * (size_t)vcap);
            if (!nv) {
                rc = 1;
                fprintf(stderr, "loom embed: %s: out of memory at line %d\n", name, n + 1);
                break;
            }
            v = nv;
        }
        if (!(v[n] = strdup(line))) {
            rc = 1;
            fprintf(stderr, "loom embed: %s: out of memory at line %d\n", name, n + 1);
            break;
        }
        n++;
    }
    if (!rc && ferror(f)) {
        fprintf(stderr, "loom embed: %s: cannot read: %s\n", name, strerror(errno));
        rc = 1;
    }
    free(line);
    *out = v;
    *n_out = n;
    return rc;
}

int cmd_embed(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *prompt = NULL, *format = "json";
    int threads = loom_model_default_params().n_threads, no_norm = 0;
    const arg_opt opts[] = {
        {"-m", "--model", ARG_STR, &model, "MODEL",
         "model folder (config.json, model.safetensors, tokenizer.json); default: "
         EMBED_DEFAULT_MODEL " in the models folder"},
        {"-f", "--file", ARG_STR, &file, "FILE", "one input per line, '-' = stdin (default: stdin, or -p)"},
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
    if (prompt && file) {
        fprintf(stderr, "loom embed: -p and -f both give the input; use one\n");
        return 1;
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
    int n = 0, rc = 0;
    float *out = NULL;
    loom_bert *m = NULL;
    if (prompt) {
        lines = malloc(sizeof *lines);
        if (!lines || !(lines[0] = strdup(prompt))) {
            fprintf(stderr, "loom embed: out of memory\n");
            free(lines);
            return 1;
        }
        n = 1;
    } else {
        int use_stdin = !file || strcmp(file, "-") == 0;
        FILE *f = use_stdin ? stdin : fopen(file, "r");
        struct stat sb;
        if (!f) {
            fprintf(stderr, "loom embed: -f %s: cannot open: %s\n", file, strerror(errno));
            return 1;
        }
        if (!use_stdin && fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "loom embed: -f %s: is a directory, not a text file\n", file);
            fclose(f);
            return 1;
        }
        rc = read_lines(f, use_stdin ? "stdin" : file, &lines, &n);
        if (!use_stdin) fclose(f);
        if (rc) goto done;
    }
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
