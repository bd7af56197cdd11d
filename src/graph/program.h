/*
 * Forward programs: compile once, run many (DESIGN.md).
 *
 * A program is the graph of one forward pass for a phase and a size bucket
 * ("decode of 1 row", "prefill chunk of up to 512 rows"), built once with its
 * weights bound, fused once by the executor's rules (fused modes), planned
 * once into the executor's arena, and with every node's kernel, arguments and
 * launch count resolved once. A step then writes only its inputs (the token
 * ids, in memory the builder bound) and a step block: how many rows run and
 * the position of the first. Running a program allocates nothing.
 *
 * What changes from step to step is found by tracing the builder: it is called
 * at several (rows, position) points, and every extent, stride and view
 * offset that differs is recorded as an affine function of the two
 * (a * rows + b * pos + e * outs + c), checked on further points where they fit. This
 * is how torch.compile's "automatic dynamic shapes" marks dims dynamic after
 * seeing two sizes; here the model code stays plain C with concrete shapes.
 * Attributes that carry the position of an op's first row (rope, kv_append,
 * attention, qkv_rope: the ops' pos_attr in ops.h) are written from the step
 * block; any other attribute that changed with the position, or any
 * difference in the graphs' structure (a rule that fires for one size of the
 * bucket and not for another), is a compile error. Attributes that depend on
 * the row count alone are tiling choices (heads or columns per work item)
 * and are taken at the bucket's largest size.
 */
#ifndef LOOM_GRAPH_PROGRAM_H
#define LOOM_GRAPH_PROGRAM_H

#include "graph/exec.h"

/* The step block: what one run of a program computes. */
typedef struct loom_step {
    int n_rows;   /* token rows of this step: 1..max_rows */
    int pos;      /* position of row 0: the KV cache holds 0..pos-1; pos + n_rows <= max_end
                     (programs of one sequence; 0 for a ragged batch) */
    int n_out;    /* output rows (the rows whose logits are read): 1..max_out; 1 when max_out is 0 */
    const loom_batch *batch; /* the ragged batch the kernels read (ops.h), or NULL */
} loom_step;

/* Appends to the empty graph g the forward pass of step s (its n_rows, pos
 * and n_out; s->batch is NULL while tracing) and sets *out to the id of the
 * tensor the caller reads (the logits). Must build the same structure for
 * every step of the bucket, bind the same external memory each time, and set
 * no graph error. */
typedef loom_status (*loom_program_build_fn)(void *ctx, loom_graph *g, const loom_step *s, int *out);

typedef struct loom_program_desc {
    const char *name;             /* "decode", "prefill", ...: messages and profile */
    loom_program_build_fn build;
    void *ctx;
    int max_rows;                 /* the bucket: steps run 1..max_rows rows */
    int max_end;                  /* pos + n_rows never exceeds this (the context); 0: no position
                                     dimension (steps at pos 0: a ragged batch's rows carry their own) */
    int max_out;                  /* output rows vary 1..max_out (<= max_rows); 0: always 1 */
} loom_program_desc;

typedef struct loom_program loom_program;

/* Compiles a program for e's mode and rules: traces d->build, fuses, plans,
 * resolves every node, and grows e's buffers to what it needs. Errors name the
 * program and what could not be compiled. */
loom_status loom_program_compile(loom_executor *e, const loom_program_desc *d, loom_program **out);
/* A program of the fixed graph g (borrowed, fused in place in fused modes:
 * tensor ids are kept, so the caller reads results through g as before). It
 * runs with a NULL step. For graphs built once per call (BERT batches, tests). */
loom_status loom_program_compile_graph(loom_executor *e, loom_graph *g, loom_program **out);
void loom_program_free(loom_program *p);

/* Runs one step (NULL for a program of a fixed graph). Checks the step
 * against the bucket; kernel errors name the node. Allocates nothing. */
loom_status loom_program_run(loom_program *p, const loom_step *s);

/* The graph the program runs (fused in fused modes); tensor descriptors hold
 * the last step's shapes and addresses. */
const loom_graph *loom_program_graph(const loom_program *p);
/* The tensor the builder named as output, at the last step's shape. */
const loom_tensor *loom_program_output(const loom_program *p);
const char *loom_program_name(const loom_program *p);
int loom_program_max_rows(const loom_program *p);
/* Bytes of intermediates the plan placed (the arena this program uses). */
size_t loom_program_arena_bytes(const loom_program *p);

/* Per-node wall time of every step (for profiles; off by default: two clock
 * reads per node). */
void loom_program_set_timing(loom_program *p, int on);
/* Fills the node stats of the program's graph for the last step run: kernel
 * name, launches, flops and bytes from the ops' cost functions, and time when
 * timing is on. For profiles; not needed to run. */
void loom_program_account(loom_program *p);

#endif
