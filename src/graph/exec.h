/* Executor: plans a graph's memory and runs its nodes on the thread pool. */
#ifndef LOOM_GRAPH_EXEC_H
#define LOOM_GRAPH_EXEC_H

#include "base/threadpool.h"
#include "graph/graph.h"


typedef struct loom_executor {
    loom_pool      *pool;       /* owned */
    int             n_threads;
    loom_isa        isa;        /* kernel level (loom_cpu_isa() at init) */
    loom_exec_mode  mode;
    unsigned char  *arena;      /* intermediates; grows only when a plan needs more */
    size_t          arena_cap;
    unsigned char  *scratch;    /* n_threads slices of scratch_cap bytes */
    size_t          scratch_cap;
    char           *dump_dir;   /* when set, every executed node's output is written there */
    int             dump_seq;   /* executions dumped so far */
    int             n_allocs;   /* arena/scratch (re)allocations, for tests of "no allocation" */
} loom_executor;

loom_status loom_executor_init(loom_executor **e, int n_threads, loom_exec_mode mode);
void loom_executor_free(loom_executor *e);
/* Enables dumping of every intermediate to dir (created if absent); NULL disables. */
loom_status loom_executor_set_dump(loom_executor *e, const char *dir);

/* Liveness-based placement of intermediates in one arena (first fit by size). */
loom_status loom_graph_plan(loom_graph *g);
/* Plans if needed, binds memory, runs every node; fills node stats. */
loom_status loom_executor_run(loom_executor *e, loom_graph *g);

#endif
