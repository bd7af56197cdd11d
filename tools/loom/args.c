#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"

void args_print_help(const char *cmd, const char *usage, const arg_opt *opts, int n_opts) {
    printf("usage: loom %s %s\n\noptions:\n", cmd, usage);
    for (int i = 0; i < n_opts; i++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s %s", opts[i].short_name ? opts[i].short_name : "",
                 opts[i].short_name ? ", " : "", opts[i].long_name,
                 opts[i].metavar ? opts[i].metavar : "");
        printf("  %-28s %s\n", left, opts[i].help);
    }
    printf("  %-28s %s\n", "-h, --help", "show this help");
    printf("  %-28s %s\n", "--version", "print loom's version");
}

static int parse_value(const char *cmd, const arg_opt *o, const char *name, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case ARG_STR:
        *(const char **)o->dst = v;
        return 0;
    case ARG_INT: {
        long x = strtol(v, &end, 10);
        if (*v == '\0' || *end != '\0' || errno || x < -2147483647L || x > 2147483647L) break;
        *(int *)o->dst = (int)x;
        return 0;
    }
    case ARG_FLOAT: {
        float x = strtof(v, &end);
        if (*v == '\0' || *end != '\0' || errno || !isfinite(x)) break;
        *(float *)o->dst = x;
        return 0;
    }
    case ARG_U64:
    case ARG_U64_SET: {
        if (*v == '-' || *v == '+') break;
        unsigned long long x = strtoull(v, &end, 10);
        if (*v == '\0' || *end != '\0' || errno) break;
        if (o->type == ARG_U64) {
            *(uint64_t *)o->dst = (uint64_t)x;
        } else {
            ((arg_u64 *)o->dst)->value = (uint64_t)x;
            ((arg_u64 *)o->dst)->set = 1;
        }
        return 0;
    }
    case ARG_STR_LIST: {
        arg_list *l = o->dst;
        if (l->n == ARG_LIST_MAX) {
            fprintf(stderr, "loom %s: option '%s' given more than %d times\n", cmd, name, ARG_LIST_MAX);
            return -1;
        }
        l->v[l->n++] = v;
        return 0;
    }
    case ARG_FLAG:
        return 0;
    }
    const char *what = o->type == ARG_INT                              ? "an integer"
                       : o->type == ARG_U64 || o->type == ARG_U64_SET ? "a non-negative integer"
                                                                      : "a number";
    fprintf(stderr, "loom %s: option '%s' expects %s, got '%s'\n", cmd, name, what, v);
    return -1;
}

int args_parse(const char *cmd, const char *usage, const arg_opt *opts, int n_opts, int argc,
               char **argv, int first) {
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            args_print_help(cmd, usage, opts, n_opts);
            return 1;
        }
        if (strcmp(a, "--version") == 0) {
            printf("loom %s\n", loom_version());
            return 1;
        }
        /* "--name=value": the name is what precedes the first '=' */
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
        const arg_opt *o = NULL;
        for (int k = 0; k < n_opts && !o; k++)
            if ((!eq && opts[k].short_name && strcmp(a, opts[k].short_name) == 0) ||
                (strlen(opts[k].long_name) == name_len && strncmp(a, opts[k].long_name, name_len) == 0))
                o = &opts[k];
        if (!o) {
            fprintf(stderr, "loom %s: unknown option '%.*s' (see 'loom %s --help')\n", cmd, (int)name_len, a,
                    cmd);
            return -1;
        }
        if (o->type == ARG_FLAG) {
            if (eq) {
                fprintf(stderr, "loom %s: option '%s' takes no value, got '%s'\n", cmd, o->long_name, a);
                return -1;
            }
            *(int *)o->dst = 1;
            continue;
        }
        if (eq) {
            if (parse_value(cmd, o, o->long_name, eq + 1) != 0) return -1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "loom %s: option '%s' needs a value (%s)\n", cmd, a,
                    o->metavar ? o->metavar : "value");
            return -1;
        }
        if (parse_value(cmd, o, a, argv[++i]) != 0) return -1;
    }
    return 0;
}
