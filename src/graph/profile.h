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

/* The report structs (loom_profile, its sections and kinds), loom_profile_free
 * and the printers are public: loom.h. */

/* Groups the stats of an executed graph. Sections: embed, L0..L{n_layers-1}, head. */
/* Each node's time as the median of reps timed runs of one program:
 * t[k * reps + r] is node k's time in run r (sorted in place). */
void loom_profile_node_medians(loom_graph *g, double *t, int reps);
loom_status loom_profile_collect(const loom_graph *g, int n_layers, const char *phase,
                                 const char *mode, int n_tokens, loom_profile *out);
/* s as a JSON string (quotes, backslashes and control characters escaped). */
void loom_json_str(FILE *f, const char *s);
/* One section as a JSON object: kernels, bytes_read, bytes_written, flops,
 * the time (time_s when time_in_s, else time_ms), chain; "name" first when
 * with_name. Shared by loom profile and loom plan. */
void loom_profile_json_section(FILE *f, const loom_profile_section *s, int with_name, int time_in_s);

/* Adds one kernel launch's numbers (one.kernels etc.) to p's per-kind totals;
 * kinds beyond LOOM_PROFILE_MAX_KINDS are summed under "other". */
void loom_profile_add_kind(loom_profile *p, const char *kernel, const loom_profile_section *one);
/* Appends a section of work done outside the graph (the sampler after the
 * LM head): one step named kernel with the counts in vals, added to the total
 * and to the per-kind totals. */
loom_status loom_profile_add_section(loom_profile *p, const char *name, const char *kernel,
                                     const loom_profile_section *vals);

#endif
