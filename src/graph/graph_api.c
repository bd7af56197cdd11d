/* The public calls on graphs and executors that the internal API has no
 * equivalent of (loom.h): ops by name, what ran, what the fusion pass did. */
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "graph/exec.h"
#include "graph/graph.h"

/* Records msg as g's sticky error (as the builders do) and returns -1. */
static int graph_fail(loom_graph *g, loom_status s, const char *msg) {
    if (g->status == LOOM_OK) {
        g->status = s;
        snprintf(g->error, sizeof g->error, "%s", msg);
    }
    loom_set_error(s, "%s", g->error);
    return -1;
}

int loom_graph_add_op(loom_graph *g, const char *op, const int *src, int n_src, const char *name) {
    if (!g) return -1;
    if (g->status != LOOM_OK) return -1;
    char msg[256];
    if (!op || (n_src > 0 && !src)) return graph_fail(g, LOOM_ERR_INVALID_ARG, "graph_add_op: NULL argument");
    for (int i = 0; i < LOOM_OP_COUNT; i++) {
        const loom_op_info *info = loom_op_get((loom_op)i);
        if (!info || !info->name || strcmp(info->name, op) != 0) continue;
        if (info->attr_size) {
            snprintf(msg, sizeof msg, "graph_add_op: op '%s' takes attributes; it cannot be added by name", op);
            return graph_fail(g, LOOM_ERR_INVALID_ARG, msg);
        }
        return loom_graph_op(g, (loom_op)i, src, n_src, NULL, "%s", name ? name : op);
    }
    snprintf(msg, sizeof msg, "graph_add_op: unknown op '%s'", op);
    return graph_fail(g, LOOM_ERR_INVALID_ARG, msg);
}

int loom_graph_n_nodes(const loom_graph *g) { return g ? g->n_nodes : 0; }

const char *loom_graph_node_kernel(const loom_graph *g, int i) {
    return g && i >= 0 && i < g->n_nodes ? g->nodes[i].stats.kernel : NULL;
}

int loom_executor_rule_fired(const loom_executor *e, const char *rule) {
    if (!e || !rule) return -1;
    for (int i = 0; i < e->report.n_rules && i < LOOM_FUSION_MAX_RULES; i++)
        if (strcmp(e->report.rules[i].name, rule) == 0) return e->report.rules[i].fired;
    return -1;
}

void loom_executor_print_report(const loom_executor *e, FILE *f) {
    if (e && f) loom_fusion_report_print(f, &e->report);
}
