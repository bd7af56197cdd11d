/*
 * Accounting report: the executed graph's node statistics grouped by section
 * (embedding, each layer, head). One loom_profile per (phase, mode); the
 * printers take several modes side by side so step_by_step and fused compare
 * in one table.
 */
#ifndef LOOM_GRAPH_PROFILE_H
#define LOOM_GRAPH_PROFILE_H

#include <stdio.h>

#include "graph/graph.h"

typedef struct loom_profile_section {
    char   name[24];       /* "embed", "L0", ..., "head" */
    int    kernels;
    double bytes_read, bytes_written, flops, time_ns;
    char  *chain;          /* kernel names in execution order, space-separated (malloc'd) */
} loom_profile_section;

/* Totals per op kind (kernel name without its ".isa" suffix), for the SVG chart. */
#define LOOM_PROFILE_MAX_KINDS 32
typedef struct loom_profile_kind {
    char   name[40];
    int    kernels;
    double bytes_read, bytes_written, flops, time_ns;
} loom_profile_kind;

typedef struct loom_profile {
    char   phase[16];      /* "prefill" or "decode" */
    const char *mode;      /* "step_by_step", ... */
    int    n_tokens;       /* tokens processed by this pass */
    int    n_sections;     /* embed, n_layers layers, head, then appended ones (sample) */
    loom_profile_section *sections;
    loom_profile_section total;
    size_t arena_bytes;    /* planned intermediate memory */
    int    n_kinds;        /* per op kind, in order of first appearance (profile_svg.c) */
    loom_profile_kind kinds[LOOM_PROFILE_MAX_KINDS];
} loom_profile;

/* Groups the stats of an executed graph. Sections: embed, L0..L{n_layers-1}, head. */
loom_status loom_profile_collect(const loom_graph *g, int n_layers, const char *phase,
                                 const char *mode, int n_tokens, loom_profile *out);
void loom_profile_free(loom_profile *p);
/* Readable table; profs[0..n_modes) are the same phase under different modes. */
void loom_profile_print_table(FILE *f, const loom_profile *profs, int n_modes);
/* s as a JSON string (quotes, backslashes and control characters escaped). */
void loom_json_str(FILE *f, const char *s);
/* One section as a JSON object: kernels, bytes_read, bytes_written, flops,
 * the time (time_s when time_in_s, else time_ms), chain; "name" first when
 * with_name. Shared by loom profile and loom plan. */
void loom_profile_json_section(FILE *f, const loom_profile_section *s, int with_name, int time_in_s);
/* JSON object for all given profiles: {"profiles": [...]}. */
void loom_profile_print_json(FILE *f, const char *model, const loom_profile *profs, int n);

/* step_by_step vs fused for one phase: kernels, traffic and time per section
 * with the % reductions, and the totals (profile_compare.c). */
void loom_profile_print_compare(FILE *f, const loom_profile *step, const loom_profile *fused);
/* The totals of that comparison as one JSON object. */
void loom_profile_print_compare_json(FILE *f, const loom_profile *step, const loom_profile *fused);

/* Adds one kernel launch's numbers (one.kernels etc.) to p's per-kind totals;
 * kinds beyond LOOM_PROFILE_MAX_KINDS are summed under "other". */
void loom_profile_add_kind(loom_profile *p, const char *kernel, const loom_profile_section *one);
/* Appends a section of work done outside the graph (the sampler after the
 * LM head): one step named kernel with the counts in vals, added to the total
 * and to the per-kind totals. */
loom_status loom_profile_add_section(loom_profile *p, const char *name, const char *kernel,
                                     const loom_profile_section *vals);
/* SVG bar chart of traffic (MB read + written) and time per op kind,
 * step_by_step vs fused side by side; either may be NULL. Axes, labels and a
 * legend; bars carry class="bar step|fused" and data-kind="NAME". */
void loom_profile_write_svg(FILE *f, const loom_profile *step, const loom_profile *fused);

#endif
