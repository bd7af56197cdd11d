/*
 * Memory planner: every intermediate lives from the node that produces it to
 * the last node that reads it (directly or through a view). Intermediates
 * whose lifetimes do not overlap share arena space. Placement is greedy
 * first-fit in decreasing size order, which is simple and close to optimal
 * for the chain-shaped graphs of transformer layers.
 */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "graph/exec.h"

static size_t align_up(size_t x) { return (x + LOOM_ALIGN - 1) & ~(size_t)(LOOM_ALIGN - 1); }

typedef struct { size_t size; int id; } plan_item;

static int by_size_desc(const void *a, const void *b) {
    const plan_item *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->id - y->id;  /* deterministic */
}

loom_status loom_graph_plan(loom_graph *g) {
    LOOM_TRY(loom_graph_status(g));
    for (int i = 0; i < g->n_tensors; i++) {
        g->tensors[i].first_use = g->tensors[i].producer;
        g->tensors[i].last_use = g->tensors[i].producer;
        g->tensors[i].offset = 0;
    }
    size_t scratch = 0, shared = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        const loom_node *node = &g->nodes[n];
        for (int i = 0; i < node->n_src; i++) {
            int s = loom_graph_storage(g, node->src[i]);
            if (g->tensors[s].last_use < n) g->tensors[s].last_use = n;
        }
        /* an in-place output keeps its storage alive as well */
        int d = loom_graph_storage(g, node->dst);
        if (g->tensors[d].last_use < n) g->tensors[d].last_use = n;
        for (int e = 0; e < node->n_dst_extra; e++) {
            d = loom_graph_storage(g, node->dst_extra[e]);
            if (g->tensors[d].last_use < n) g->tensors[d].last_use = n;
        }
        const loom_op_info *info = loom_op_get(node->op);
        const loom_tensor *src[LOOM_MAX_SRC] = {0};
        for (int i = 0; i < node->n_src; i++) src[i] = &g->tensors[node->src[i]].t;
        const loom_tensor *dst = &g->tensors[node->dst].t;
        const void *attrs = node->has_attrs ? node->attrs : NULL;
        size_t need = info->scratch_size ? info->scratch_size(src, node->n_src, dst, attrs) : 0;
        if (need > scratch) scratch = need;
        need = info->shared_size ? info->shared_size(src, node->n_src, dst, attrs) : 0;
        if (need > shared) shared = need;
    }
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].is_output) g->tensors[loom_graph_storage(g, i)].last_use = g->n_nodes;

    size_t n_alloc = g->n_tensors > 0 ? (size_t)g->n_tensors : 1;
    plan_item *items = malloc(n_alloc * sizeof(plan_item));
    LOOM_RETURN_IF(!items, LOOM_ERR_NOMEM, "plan: out of memory");
    int n_inter = 0;
    for (int i = 0; i < g->n_tensors; i++)
        /* intermediates without a producer were removed by fusion */
        if (g->tensors[i].kind == LOOM_TK_INTERMEDIATE && g->tensors[i].producer >= 0) {
            items[n_inter].size = loom_tensor_nbytes(&g->tensors[i].t);
            items[n_inter++].id = i;
        }
    g->scratch_bytes = align_up(scratch);
    g->shared_bytes = align_up(shared);
    plan_item *sorted = items;
    qsort(sorted, (size_t)n_inter, sizeof *sorted, by_size_desc);

    size_t total = 0;
    for (int a = 0; a < n_inter; a++) {
        loom_gtensor *t = &g->tensors[sorted[a].id];
        size_t size = align_up(sorted[a].size);
        size_t off = 0;
        /* move past every placed tensor that overlaps in time and space, until stable */
        for (int moved = 1; moved;) {
            moved = 0;
            for (int b = 0; b < a; b++) {
                const loom_gtensor *p = &g->tensors[sorted[b].id];
                if (p->last_use < t->first_use || t->last_use < p->first_use) continue;
                size_t psize = align_up(sorted[b].size);
                if (off < p->offset + psize && p->offset < off + size) {
                    off = p->offset + psize;
                    moved = 1;
                }
            }
        }
        t->offset = off;
        if (off + size > total) total = off + size;
    }
    g->arena_bytes = total;
    g->planned = 1;
    free(items);
    return LOOM_OK;
}
