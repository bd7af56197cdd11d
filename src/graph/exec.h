/*
 * The executor: what the programs of one model share — the thread pool, the
 * kernel level, the mode and fusion rules, and the memory every program runs
 * in (one arena for intermediates, per-thread scratch, one shared buffer per
 * launch). Programs (program.h) are compiled against an executor, which grows
 * these buffers at compile time only; running a program never allocates.
 */
#ifndef LOOM_GRAPH_EXEC_H
#define LOOM_GRAPH_EXEC_H

#include <stdio.h>

#include "base/threadpool.h"
#include "graph/fusion.h"
#include "graph/graph.h"

/* One checkpoint of fused_with_checkpoints: the fused ops of one layer (or
 * of the head), each compared with its unfused decomposition; the worst
 * error seen so far. */
typedef struct loom_checkpoint_stat {
    char   name[LOOM_NAME_MAX];   /* "L3", "logits" (the head's fused ops) */
    int    layer;                 /* LOOM_LAYER_POST for the head */
    double max_abs, max_rel;      /* rel = |fused - ref| / max(1, |ref|) */
    int    runs, failed_runs;     /* steps that checked the layer, and those with an op beyond tolerance */
    double tol;                   /* the loosest tolerance applied (check_tolerance) */
} loom_checkpoint_stat;

typedef struct loom_program loom_program;

/* Public (loom.h): loom_executor_init, _free, _set_rules, _run, _last_graph,
 * _rule_fired, _print_report. */
struct loom_executor {
    loom_pool      *pool;       /* owned */
    int             n_threads;
    loom_isa        isa;        /* kernel level (loom_cpu_isa() at init) */
    loom_exec_mode  mode;
    /* memory of the programs, sized at compile time to the largest need */
    unsigned char  *arena;      /* intermediates of the program that runs */
    size_t          arena_cap;
    unsigned char  *ref_arena;  /* fused_with_checkpoints: intermediates of the unfused twin */
    size_t          ref_arena_cap;
    unsigned char  *scratch;    /* n_threads slices of scratch_cap bytes */
    size_t          scratch_cap;
    unsigned char  *shared;     /* one launch's shared buffer (op shared_size), shared_cap bytes */
    size_t          shared_cap;
    unsigned char  *kv_save;    /* checkpoints: cache rows a reference layer overwrites */
    size_t          kv_save_cap;
    unsigned        buffers_gen; /* bumped when a buffer moves: programs bind again before running */
    int             n_allocs;   /* buffer (re)allocations, for tests of "no allocation" */
    int             invariant;  /* batch-invariant kernels (kernel args' invariant) */
    char           *dump_dir;   /* when set, every executed node's output is written there */
    int             dump_seq;   /* steps dumped so far */
    /* fused modes */
    loom_fusion_rules *rules;   /* owned; the built-in default is loaded at the first fused compile */
    loom_fusion_report report;  /* what the last fusion pass did */
    int             ckpt_action;   /* -1: the rules file's; else loom_checkpoint_action */
    loom_checkpoint_stat *ckpt; /* checkpoints (fixed at compile): one per layer with fused ops, the head */
    int             n_ckpt, cap_ckpt;
    int             ckpt_unchecked; /* fused nodes of the last compiled program without a decomposition */
    const loom_program *last;   /* the program that ran last */
    loom_program   *oneshot;    /* the program of loom_executor_run's graph */
};

/* Enables dumping of every node's output to dir (created if absent; an
 * existing path must be a writable directory); NULL disables. */
loom_status loom_executor_set_dump(loom_executor *e, const char *dir);

/* Liveness-based placement of intermediates in one arena (first fit by size). */
loom_status loom_graph_plan(loom_graph *g);
/* loom_executor_run (a fixed graph run once: a program of it compiled by
 * loom_program_compile_graph, fused in place in fused modes, run with no step;
 * for graphs built once per call, BERT batches and tests) and
 * loom_executor_set_rules (NULL: the default) are public: loom.h. */
/* Loads rules from path (NULL: built in) and applies preset (NULL: none). */
loom_status loom_executor_load_rules(loom_executor *e, const char *path, const char *preset);
/* The rules of the fused modes, loading the built-in default the first time. */
loom_status loom_executor_rules(loom_executor *e, const loom_fusion_rules **out);
/* Prints the checkpoint table (worst errors over all runs). */
void loom_executor_print_checkpoints(const loom_executor *e, FILE *f);
/* Mode from, in order: flag (may be NULL), $LOOM_MODE, the rules' `mode:`, fused. */
loom_status loom_mode_resolve(const char *flag, const loom_fusion_rules *rules, loom_exec_mode *out);

/* Grows *buf to at least need bytes (counted in n_allocs; bumps buffers_gen). */
loom_status loom_exec_reserve(loom_executor *e, unsigned char **buf, size_t *cap, size_t need);
/* Grows scratch (per thread) and shared to at least these. */
loom_status loom_exec_reserve_scratch(loom_executor *e, size_t scratch, size_t shared);

#endif
