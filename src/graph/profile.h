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

typedef struct loom_profile {
    char   phase[16];      /* "prefill" or "decode" */
    const char *mode;      /* "step_by_step", ... */
    int    n_tokens;       /* tokens processed by this pass */
    int    n_sections;     /* n_layers + 2 */
    loom_profile_section *sections;
    loom_profile_section total;
    size_t arena_bytes;    /* planned intermediate memory */
} loom_profile;

/* Groups the stats of an executed graph. Sections: embed, L0..L{n_layers-1}, head. */
loom_status loom_profile_collect(const loom_graph *g, int n_layers, const char *phase,
                                 const char *mode, int n_tokens, loom_profile *out);
void loom_profile_free(loom_profile *p);
/* Readable table; profs[0..n_modes) are the same phase under different modes. */
void loom_profile_print_table(FILE *f, const loom_profile *profs, int n_modes);
/* JSON object for all given profiles: {"profiles": [...]}. */
void loom_profile_print_json(FILE *f, const char *model, const loom_profile *profs, int n);

#endif
