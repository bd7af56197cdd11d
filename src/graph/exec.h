/* Executor: plans a graph's memory and runs its nodes on the thread pool. */
#ifndef LOOM_GRAPH_EXEC_H
#define LOOM_GRAPH_EXEC_H

#include "base/threadpool.h"
#include "graph/fusion.h"
#include "graph/graph.h"

/* One checkpoint of fused_with_checkpoints: the worst error seen so far. */
typedef struct loom_checkpoint_stat {
    char   name[LOOM_NAME_MAX];   /* "L3 output (L3.ffn_residual)", "logits" */
    int    layer;                 /* LOOM_LAYER_POST for the logits */
    double max_abs, max_rel;      /* rel = |fused - ref| / max(1, |ref|) */
    int    runs, failed_runs;     /* comparisons made, and those beyond tolerance */
    double tol;                   /* the loosest tolerance applied (layer_tolerance) */
} loom_checkpoint_stat;


typedef struct loom_executor {
    loom_pool      *pool;       /* owned */
    int             n_threads;
    loom_isa        isa;        /* kernel level (loom_cpu_isa() at init) */
    loom_exec_mode  mode;
    unsigned char  *arena;      /* intermediates; grows only when a plan needs more */
    size_t          arena_cap;
    unsigned char  *scratch;    /* n_threads slices of scratch_cap bytes */
    size_t          scratch_cap;
    unsigned char  *shared;     /* one launch's shared buffer (op shared_size), shared_cap bytes */
    size_t          shared_cap;
    char           *dump_dir;   /* when set, every executed node's output is written there */
    int             dump_seq;   /* executions dumped so far */
    int             n_allocs;   /* arena/scratch (re)allocations, for tests of "no allocation" */
    /* fused modes */
    loom_fusion_rules *rules;   /* owned; the built-in default is loaded at the first fused run */
    loom_graph     *fg;         /* fused_with_checkpoints: the fused copy of the last graph run */
    loom_node      *saved_nodes; /* fused: the primitive nodes, kept while a memo replay runs */
    int             saved_cap;
    loom_fusion_memo *memo;     /* decode steps re-fuse without searching (fusion.h) */
    loom_fusion_report report;  /* what the last fusion pass did */
    int             ckpt_action;   /* -1: the rules file's; else loom_checkpoint_action */
    /* checkpoints: the primitive graph re-run layer by layer from the fused values */
    loom_graph     *rg;
    unsigned char  *ref_arena;
    size_t          ref_arena_cap;
    unsigned char  *kv_save;    /* cache rows a reference layer overwrites, restored after */
    size_t          kv_save_cap;
    loom_checkpoint_stat *ckpt;
    int             n_ckpt, cap_ckpt;
    const loom_graph *last_run; /* the graph whose stats describe the last run */
} loom_executor;

loom_status loom_executor_init(loom_executor **e, int n_threads, loom_exec_mode mode);
void loom_executor_free(loom_executor *e);
/* Enables dumping of every intermediate to dir (created if absent); NULL disables. */
loom_status loom_executor_set_dump(loom_executor *e, const char *dir);

/* Liveness-based placement of intermediates in one arena (first fit by size). */
loom_status loom_graph_plan(loom_graph *g);
/* Runs g in the executor's mode. step_by_step: plans if needed, binds memory,
 * runs every node, fills node stats. fused: copies g, applies the fusion rules
 * to the copy, runs it and points g's tensors at the results (tensor ids are
 * kept by fusion). fused_with_checkpoints: as fused, then re-runs each layer
 * (and the head) of g unfused from the fused inputs and compares its output. */
loom_status loom_executor_run(loom_executor *e, loom_graph *g);

/* Replaces the fusion rules (taken over: freed by the executor); NULL = default. */
void loom_executor_set_rules(loom_executor *e, loom_fusion_rules *r);
/* Loads rules from path (NULL: built in) and applies preset (NULL: none). */
loom_status loom_executor_load_rules(loom_executor *e, const char *path, const char *preset);
/* The graph whose node stats describe the last run (g itself, fused in place in
 * `fused` mode, or its fused copy in `fused_with_checkpoints`). */
const loom_graph *loom_executor_last_graph(const loom_executor *e);
/* Prints the checkpoint table (worst errors over all runs). */
void loom_executor_print_checkpoints(const loom_executor *e, FILE *f);
/* Mode from, in order: flag (may be NULL), $LOOM_MODE, the rules' `mode:`, step_by_step. */
loom_status loom_mode_resolve(const char *flag, const loom_fusion_rules *rules, loom_exec_mode *out);

/* Between exec.c and exec_checkpoint.c. */
/* Plans g if needed into *arena (grown), binds (unless filter), runs its nodes
 * (with filter: only those of layer only_layer, no stats). */
loom_status loom_exec_graph(loom_executor *e, loom_graph *g, unsigned char **arena, size_t *arena_cap,
                            int filter, int only_layer);
/* Intermediates at their arena slots, then views at base + offset; views only. */
void loom_exec_bind(loom_graph *g, unsigned char *arena);
void loom_exec_bind_views(loom_graph *g);
/* Grows *buf to at least need bytes (counted in n_allocs). */
loom_status loom_exec_ensure(loom_executor *e, unsigned char **buf, size_t *cap, size_t need);
/* fused_with_checkpoints: keep layer inputs alive in the fused graph; compare layers. */
void loom_exec_keep_layer_values(loom_graph *fg, const loom_graph *g);
loom_status loom_exec_checkpoints(loom_executor *e, loom_graph *g);

#endif
