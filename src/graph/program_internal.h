/* Internals of forward programs, shared by program.c (compile),
 * program_run.c (run, dump, accounting) and program_checkpoint.c. */
#ifndef LOOM_GRAPH_PROGRAM_INTERNAL_H
#define LOOM_GRAPH_PROGRAM_INTERNAL_H

#include "graph/program.h"

/* The numbers of a tensor descriptor that can change from step to step, each
 * a * rows + b * pos + c: extents, strides (elements), and for views the byte
 * offset from the base. */
enum { PV_SHAPE = 0, PV_STRIDE = LOOM_MAX_DIMS, PV_OFFSET = 2 * LOOM_MAX_DIMS, PV_COUNT };

typedef struct prog_dyn {
    int     id;                 /* tensor id */
    int     data;               /* 1: a view whose address moves (its offset, or its base's, changes) */
    int64_t a[PV_COUNT], b[PV_COUNT], e[PV_COUNT], c[PV_COUNT]; /* rows, position, output rows, constant */
} prog_dyn;

/* An attribute written from the step: the int32 at byte off of node's attrs = pos + c. */
typedef struct prog_pos {
    int     node;
    size_t  off;
    int32_t c;
} prog_pos;

typedef struct prog_node {
    loom_kernel_args     args;   /* src/dst point at the graph's descriptors, attrs at the node's */
    loom_kernel_fn       kernel;
    const loom_op_info  *info;
    int                  phases; /* launches; 0: from info->phases at each step */
    int                  cur;    /* launches this step */
    _Atomic int          arrive; /* the kernel args' arrival counter (loom_kernel_arrive) */
} prog_node;

/* One compiled graph: the program's own, or its unfused twin (checkpoints). */
typedef struct prog_graph {
    loom_graph *g;
    int         owns;            /* 0: borrowed from the caller (loom_program_compile_graph) */
    prog_dyn   *dyn;
    int         n_dyn;
    prog_pos   *pos;
    int         n_pos;
    prog_node  *nodes;
    int         n_dyn_phases;    /* nodes whose launch count is computed per step */
    unsigned    bound_gen;       /* e->buffers_gen when the addresses were bound */
    int         bound;
} prog_graph;

/* fused_with_checkpoints: a fused node of the program and its decomposition in the twin. */
typedef struct prog_check {
    int  node;                   /* the fused node in the program's graph */
    int *twin;                   /* the twin nodes that compute its outputs from its inputs, ascending */
    int  n_twin;
    int *inputs;                 /* intermediates they read from the fused pass (storage ids) */
    int  n_inputs;
    int  stat;                   /* index into e->ckpt (the node's layer) */
} prog_check;

struct loom_program {
    loom_executor *e;
    char           name[32];
    int            is_static;    /* a fixed graph: no step */
    int            max_rows, max_end, max_out;
    int            out_id;
    prog_graph     main;
    prog_graph     twin;         /* g NULL unless fused_with_checkpoints */
    prog_check    *checks;
    int            n_checks;
    int            n_unchecked;  /* fused nodes without a decomposition */
    int           *seen;         /* per checkpoint stat, during a step: checked, failed */
    loom_step      last;         /* the last step run */
    int            timing;
};

/* Sets every dynamic descriptor of pg for (rows, pos) and writes the position
 * attributes; addresses are bound again first when the executor's buffers
 * moved. */
void prog_apply_step(loom_executor *e, prog_graph *pg, unsigned char *arena, const loom_step *s);
/* Binds every intermediate to arena + its planned offset and every view to
 * its base + offset. */
void prog_bind(prog_graph *pg, unsigned char *arena);
/* Launch counts of the nodes whose count depends on the step. */
void prog_count_phases(prog_graph *pg, int nth, int invariant);
/* Runs nodes [first, last] of pg on the executor's pool. */
loom_status prog_exec(loom_program *p, prog_graph *pg, int first, int last, int dump, const loom_batch *batch);

/* fused_with_checkpoints (program_checkpoint.c). */
loom_status prog_checkpoints_compile(loom_program *p);
/* Runs the program's graph node by node, each fused node followed by its check. */
loom_status prog_checkpoints_exec(loom_program *p, const loom_step *s, int dump);
void prog_checks_free(loom_program *p);

#endif
