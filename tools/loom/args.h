/* Table-driven command-line options shared by the loom subcommands. */
#ifndef LOOM_TOOLS_ARGS_H
#define LOOM_TOOLS_ARGS_H

#include <stdint.h>

typedef enum { ARG_STR, ARG_INT, ARG_FLOAT, ARG_U64, ARG_FLAG, ARG_STR_LIST, ARG_U64_SET } arg_type;

/* A non-negative integer option whose every value is meaningful (a seed), so
 * "not given" cannot be a value (ARG_U64_SET). */
typedef struct arg_u64 {
    uint64_t value;
    int set;      /* 1 when the option was given */
} arg_u64;

/* The values of a repeatable option (ARG_STR_LIST), in command-line order. */
#define ARG_LIST_MAX 16
typedef struct arg_list {
    const char *v[ARG_LIST_MAX];
    int n;
} arg_list;

typedef struct arg_opt {
    const char *short_name;  /* "-m" or NULL */
    const char *long_name;   /* "--model" */
    arg_type    type;
    void       *dst;         /* const char**, int*, float*, uint64_t*, int* (flag), arg_list*, arg_u64* */
    const char *metavar;
    const char *help;
} arg_opt;

/* Parses argv[first..argc) into the options; a long option's value may follow
 * it ("--temp 0.5") or be joined to it ("--temp=0.5"). Returns 0 on success, 1
 * when --help or --version was printed, -1 after printing an error naming the
 * bad option to stderr. */
int args_parse(const char *cmd, const char *usage, const arg_opt *opts, int n_opts, int argc,
               char **argv, int first);
void args_print_help(const char *cmd, const char *usage, const arg_opt *opts, int n_opts);

#endif
