/*
 * Compiling a forward program (program.h): trace the builder at a few
 * (rows, position) points, fuse each trace with the same rules, check that
 * they have one structure, derive the affine descriptors of everything that
 * moves with the step, plan the largest size once, resolve every node, and
 * size the executor's buffers for the worst step of the bucket.
 */
#include "graph/program_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/status.h"

/* The trace points, (rows, position, output rows). A = (R, 0, O) is the
 * graph that runs; B = (R - 1, 0, O') gives the slope in rows (O' = O, or
 * R - 1 when O is larger), C = (R - 1, 1, O') the slope in the position, X =
 * (R - 1, 0, O' - 1) the slope in output rows, and D checks the fit at
 * (R, 1, O), where the context leaves room for it. With R = 1 there is no row
 * slope (every step has one row): C = (1, 1, 1), D = (1, 2, 1). E = (R, end
 * of the context, O) checks that nothing the rules decide depends on the
 * position (a condition on the KV length would hold for some steps and not
 * others: a compiled program cannot honour it, so it is refused). */
enum { PA = 0, PB, PC, PX, PD, PE, N_PROBES };

typedef struct probe {
    int rows, pos, outs, used;
    loom_graph *g;      /* fused in fused modes */
    loom_graph *twin;   /* fused_with_checkpoints: the unfused trace */
} probe;

static void probes_free(probe *pr) {
    for (int i = 0; i < N_PROBES; i++) {
        loom_graph_free(pr[i].g);
        loom_graph_free(pr[i].twin);
        pr[i].g = pr[i].twin = NULL;
    }
}

static loom_status trace(loom_executor *e, const loom_program_desc *d, probe *pr, int *out) {
    LOOM_TRY(loom_graph_init(&pr->g));
    loom_step st = {.n_rows = pr->rows, .pos = pr->pos, .n_out = pr->outs, .batch = NULL};
    loom_status s = d->build(d->ctx, pr->g, &st, out);
    if (s == LOOM_OK) s = loom_graph_status(pr->g);
    if (s != LOOM_OK) return s;
    LOOM_RETURN_IF(*out < 0 || *out >= pr->g->n_tensors, LOOM_ERR_INTERNAL,
                   "program %s: the builder named no output tensor", d->name);
    if (e->mode == LOOM_MODE_STEP_BY_STEP) return LOOM_OK;
    if (e->mode == LOOM_MODE_FUSED_WITH_CHECKPOINTS) {
        LOOM_TRY(loom_graph_init(&pr->twin));
        LOOM_TRY(loom_graph_copy(pr->twin, pr->g));
    }
    const loom_fusion_rules *rules;
    LOOM_TRY(loom_executor_rules(e, &rules));
    return loom_fusion_apply(pr->g, rules, &e->report);
}

/* ------------------------------------------------------------ comparing traces */

/* Same nodes, same tensors (kinds, dtypes, ranks, views, producers, external
 * memory); only extents, strides, offsets and attributes may differ. */
static int same_structure(const loom_graph *x, const loom_graph *y, char *why, size_t n) {
    if (x->n_tensors != y->n_tensors || x->n_nodes != y->n_nodes) {
        snprintf(why, n, "%d nodes and %d tensors against %d and %d", x->n_nodes, x->n_tensors, y->n_nodes,
                 y->n_tensors);
        return 0;
    }
    for (int i = 0; i < x->n_nodes; i++) {
        const loom_node *a = &x->nodes[i], *b = &y->nodes[i];
        int same = a->op == b->op && a->n_src == b->n_src && a->dst == b->dst && a->n_dst_extra == b->n_dst_extra &&
                   a->layer == b->layer && a->rule == b->rule && a->has_attrs == b->has_attrs;
        for (int k = 0; same && k < a->n_src; k++) same = a->src[k] == b->src[k];
        for (int k = 0; same && k < a->n_dst_extra; k++) same = a->dst_extra[k] == b->dst_extra[k];
        if (!same) {
            snprintf(why, n, "node %d is %s '%s' in one and %s '%s' in the other", i, loom_op_get(a->op)->name,
                     x->tensors[a->dst].t.name, loom_op_get(b->op)->name, y->tensors[b->dst].t.name);
            return 0;
        }
    }
    for (int i = 0; i < x->n_tensors; i++) {
        const loom_gtensor *a = &x->tensors[i], *b = &y->tensors[i];
        int same = a->kind == b->kind && a->t.dtype == b->t.dtype && a->t.ndim == b->t.ndim &&
                   a->view_of == b->view_of && a->producer == b->producer && a->is_output == b->is_output;
        if (same && a->kind == LOOM_TK_EXTERNAL) same = a->t.data == b->t.data;
        if (!same) {
            snprintf(why, n, "tensor %d ('%s') differs in kind, type, rank, producer or memory", i, a->t.name);
            return 0;
        }
    }
    return 1;
}

/* Attributes of two traces of one row count at positions px and py: equal
 * but for the position attributes, which move with the position. */
static int same_attrs(const loom_graph *x, int px, const loom_graph *y, int py, char *why, size_t n) {
    for (int i = 0; i < x->n_nodes; i++) {
        const loom_node *a = &x->nodes[i], *b = &y->nodes[i];
        const loom_op_info *info = loom_op_get(a->op);
        if (!a->has_attrs || !info->attr_size) continue;
        size_t size = info->attr_size, off = info->pos_attr ? info->pos_attr - 1 : size;
        int32_t va = 0, vb = 0;
        if (off + sizeof va <= size) {
            memcpy(&va, a->attrs + off, sizeof va);
            memcpy(&vb, b->attrs + off, sizeof vb);
        }
        int same = vb - va == (off < size ? py - px : 0) && memcmp(a->attrs, b->attrs, off < size ? off : size) == 0;
        if (same && off + sizeof va < size) same = memcmp(a->attrs + off + 4, b->attrs + off + 4, size - off - 4) == 0;
        if (!same) {
            snprintf(why, n, "the attributes of %s '%s' change with the position beyond the position of its "
                             "first row", info->name, x->tensors[a->dst].t.name);
            return 0;
        }
    }
    return 1;
}

static void tensor_vals(const loom_gtensor *t, int64_t v[PV_COUNT]) {
    for (int d = 0; d < LOOM_MAX_DIMS; d++) {
        v[PV_SHAPE + d] = d < t->t.ndim ? t->t.shape[d] : 0;
        v[PV_STRIDE + d] = d < t->t.ndim ? t->t.stride[d] : 0;
    }
    v[PV_OFFSET] = t->kind == LOOM_TK_VIEW ? (int64_t)t->view_offset : 0;
}

/* The affine descriptors of pg->g (trace A) from the traces in pr (graphs
 * selected by twin), and the position attributes. */
static loom_status derive(const char *name, prog_graph *pg, const probe *pr, int twin) {
#define TG(i) (twin ? pr[i].twin : pr[i].g)
    const loom_graph *A = TG(PA);
    char why[256];
    for (int i = PB; i < N_PROBES; i++) {
        if (!pr[i].used) continue;
        if (!same_structure(A, TG(i), why, sizeof why))
            return loom_set_error(LOOM_ERR_UNSUPPORTED,
                                  "program %s: the graph of %d rows at position %d (%d output rows) is not the "
                                  "graph of %d rows at position 0 (%d) (%s): the rules fuse steps of this bucket "
                                  "differently", name, pr[i].rows, pr[i].pos, pr[i].outs, pr[PA].rows, pr[PA].outs,
                                  why);
    }
    /* position attributes: C against the trace of its row count at position 0 */
    const int base_c = pr[PB].used ? PB : PA;
    if (pr[PC].used && !same_attrs(TG(base_c), 0, TG(PC), 1, why, sizeof why))
        return loom_set_error(LOOM_ERR_UNSUPPORTED, "program %s: %s", name, why);
    for (int i = PD; i <= PE; i++)
        if (pr[i].used && !same_attrs(A, 0, TG(i), pr[i].pos, why, sizeof why))
            return loom_set_error(LOOM_ERR_UNSUPPORTED, "program %s: %s", name, why);
    int nt = A->n_tensors;
    pg->dyn = calloc((size_t)nt + 1, sizeof *pg->dyn);
    int *moves = calloc((size_t)nt + 1, sizeof *moves); /* address moves */
    if (!pg->dyn || !moves) {
        free(moves);
        return loom_set_error(LOOM_ERR_NOMEM, "program %s: out of memory", name);
    }
    loom_status s = LOOM_OK;
    for (int id = 0; id < nt && s == LOOM_OK; id++) {
        int64_t v[N_PROBES][PV_COUNT];
        for (int i = 0; i < N_PROBES; i++)
            if (pr[i].used) tensor_vals(&TG(i)->tensors[id], v[i]);
        prog_dyn dd = {.id = id};
        int any = 0;
        for (int k = 0; k < PV_COUNT; k++) {
            /* output rows first (X and B differ in them alone), then rows (A and B differ in rows and
             * perhaps output rows), then the position (C against its row count at position 0) */
            dd.e[k] = pr[PX].used ? v[base_c][k] - v[PX][k] : 0;
            dd.a[k] = pr[PB].used ? v[PA][k] - v[PB][k] - dd.e[k] * (pr[PA].outs - pr[PB].outs) : 0;
            dd.b[k] = pr[PC].used ? v[PC][k] - v[base_c][k] : 0;
            dd.c[k] = v[PA][k] - dd.a[k] * pr[PA].rows - dd.e[k] * pr[PA].outs;
            for (int i = PD; i <= PE; i++)
                if (pr[i].used &&
                    dd.a[k] * pr[i].rows + dd.b[k] * pr[i].pos + dd.e[k] * pr[i].outs + dd.c[k] != v[i][k])
                    s = loom_set_error(LOOM_ERR_UNSUPPORTED, "program %s: tensor '%s' does not grow linearly with the "
                                                         "rows, the position and the output rows", name,
                                       A->tensors[id].t.name);
            any |= dd.a[k] != 0 || dd.b[k] != 0 || dd.e[k] != 0;
        }
        const loom_gtensor *t = &A->tensors[id];
        if (t->kind == LOOM_TK_INTERMEDIATE && t->producer >= 0)
            for (int k = 0; k < PV_OFFSET && s == LOOM_OK; k++)
                if (dd.b[k] != 0 || (k < PV_STRIDE && (dd.a[k] < 0 || dd.e[k] < 0)))
                    s = loom_set_error(LOOM_ERR_UNSUPPORTED,
                                       "program %s: intermediate '%s' grows with the position (or shrinks with "
                                       "the rows), so one plan cannot hold it", name, t->t.name);
        dd.data = t->kind == LOOM_TK_VIEW && (dd.a[PV_OFFSET] || dd.b[PV_OFFSET] || dd.e[PV_OFFSET] || moves[t->view_of]);
        moves[id] = dd.data;
        if (any || dd.data) pg->dyn[pg->n_dyn++] = dd;
    }
    free(moves);
    LOOM_TRY(s);
    /* every position attribute is written at each step */
    pg->pos = calloc((size_t)A->n_nodes + 1, sizeof *pg->pos);
    LOOM_RETURN_IF(!pg->pos, LOOM_ERR_NOMEM, "program %s: out of memory", name);
    for (int n = 0; n < A->n_nodes; n++) {
        const loom_op_info *info = loom_op_get(A->nodes[n].op);
        if (!info->pos_attr || !A->nodes[n].has_attrs) continue;
        prog_pos pp = {.node = n, .off = info->pos_attr - 1};
        memcpy(&pp.c, A->nodes[n].attrs + pp.off, sizeof pp.c); /* A is at position 0 */
        pg->pos[pg->n_pos++] = pp;
    }
    return LOOM_OK;
#undef TG
}

/* ------------------------------------------------------------ resolving nodes */

/* The twin (the unfused graph of fused_with_checkpoints) runs a fused op that
 * no rule made (the builder placed it: the batch engine's paged attention)
 * with its reference kernel: the check of that node compares the two. */
static loom_status prepare_nodes(loom_executor *e, prog_graph *pg, int twin) {
    loom_graph *g = pg->g;
    pg->nodes = calloc((size_t)g->n_nodes + 1, sizeof *pg->nodes);
    LOOM_RETURN_IF(!pg->nodes, LOOM_ERR_NOMEM, "program: out of memory");
    pg->n_dyn_phases = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        prog_node *pn = &pg->nodes[n];
        loom_graph_node_args(g, n, &pn->args);
        pn->info = loom_op_get(g->nodes[n].op);
        pn->kernel = loom_op_kernel(g->nodes[n].op, e->isa);
        if (twin && pn->info->decomposition && g->nodes[n].rule < 0) pn->kernel = pn->info->ref;
        pn->phases = pn->info->phases ? 0 : (pn->info->n_phases > 1 ? pn->info->n_phases : 1);
        pn->cur = pn->phases;
        pg->n_dyn_phases += pn->phases == 0;
    }
    return LOOM_OK;
}

/* Scratch and shared bytes the nodes need at the current descriptors. */
static void buffer_needs(const prog_graph *pg, size_t *scratch, size_t *shared) {
    const loom_graph *g = pg->g;
    for (int n = 0; n < g->n_nodes; n++) {
        const prog_node *pn = &pg->nodes[n];
        const loom_kernel_args *a = &pn->args;
        size_t s = pn->info->scratch_size ? pn->info->scratch_size(a->src, a->n_src, a->dst, a->attrs) : 0;
        if (s > *scratch) *scratch = s;
        s = pn->info->shared_size ? pn->info->shared_size(a->src, a->n_src, a->dst, a->attrs) : 0;
        if (s > *shared) *shared = s;
    }
}

static size_t align_up(size_t x) { return (x + LOOM_ALIGN - 1) & ~(size_t)(LOOM_ALIGN - 1); }

/* Plans pg's graph (at trace A's sizes, the largest), reserves its arena,
 * resolves its nodes, and grows scratch and shared for the corners of the
 * bucket: the sizes the kernels ask for grow with the rows and the keys. */
static loom_status finish(loom_program *p, prog_graph *pg, unsigned char **arena, size_t *cap) {
    loom_executor *e = p->e;
    LOOM_TRY(loom_graph_plan(pg->g));
    LOOM_TRY(loom_exec_reserve(e, arena, cap, pg->g->arena_bytes));
    LOOM_TRY(prepare_nodes(e, pg, pg == &p->twin));
    size_t scratch = 0, shared = 0;
    if (p->is_static) {
        buffer_needs(pg, &scratch, &shared);
    } else {
        const int R = p->max_rows, E = p->max_end, O = p->max_out ? p->max_out : 1;
        const loom_step corners[4] = {{R, 0, O, NULL}, {1, 0, 1, NULL}, {R, E - R, O, NULL}, {1, E - 1, 1, NULL}};
        for (int i = 0; i < (E ? 4 : 2); i++) {
            prog_apply_step(NULL, pg, NULL, &corners[i]);
            buffer_needs(pg, &scratch, &shared);
        }
        prog_apply_step(NULL, pg, NULL, &corners[0]);
    }
    return loom_exec_reserve_scratch(e, align_up(scratch), align_up(shared));
}

static loom_status program_alloc(loom_executor *e, const char *name, loom_program **out) {
    loom_program *p = calloc(1, sizeof *p);
    LOOM_RETURN_IF(!p, LOOM_ERR_NOMEM, "program: out of memory");
    p->e = e;
    snprintf(p->name, sizeof p->name, "%s", name ? name : "graph");
    *out = p;
    return LOOM_OK;
}

/* Both graphs planned and resolved, checkpoints set up. */
static loom_status complete(loom_program *p) {
    loom_executor *e = p->e;
    LOOM_TRY(finish(p, &p->main, &e->arena, &e->arena_cap));
    if (p->twin.g) {
        LOOM_TRY(finish(p, &p->twin, &e->ref_arena, &e->ref_arena_cap));
        LOOM_TRY(prog_checkpoints_compile(p));
    }
    return LOOM_OK;
}

loom_status loom_program_compile(loom_executor *e, const loom_program_desc *d, loom_program **out) {
    LOOM_RETURN_IF(!e || !d || !d->build || !out, LOOM_ERR_INVALID_ARG, "program_compile: NULL argument");
    *out = NULL;
    const char *name = d->name ? d->name : "program";
    const int R = d->max_rows, E = d->max_end, O = d->max_out ? d->max_out : 1;
    LOOM_RETURN_IF(R < 1 || (E != 0 && E < R), LOOM_ERR_INVALID_ARG,
                   "program %s: a bucket of %d rows does not fit a context of %d", name, R, E);
    LOOM_RETURN_IF(d->max_out < 0 || O > R, LOOM_ERR_INVALID_ARG,
                   "program %s: %d output rows in a bucket of %d rows", name, d->max_out, R);
    probe pr[N_PROBES] = {{R, 0, O, 1, NULL, NULL}};
    int rows_c = R > 1 ? R - 1 : 1, outs_c = O < rows_c ? O : rows_c;
    if (R > 1) pr[PB] = (probe){R - 1, 0, outs_c, 1, NULL, NULL};
    if (E && rows_c + 1 <= E) pr[PC] = (probe){rows_c, 1, outs_c, 1, NULL, NULL};
    if (outs_c > 1) pr[PX] = (probe){rows_c, 0, outs_c - 1, 1, NULL, NULL};
    if (R > 1 && R + 1 <= E) pr[PD] = (probe){R, 1, O, 1, NULL, NULL};
    if (R == 1 && 3 <= E) pr[PD] = (probe){1, 2, 1, 1, NULL, NULL};
    if (E && E - R >= 3) pr[PE] = (probe){R, E - R, O, 1, NULL, NULL};
    loom_program *p = NULL;
    loom_status s = program_alloc(e, name, &p);
    int outs[N_PROBES] = {-1, -1, -1, -1, -1, -1};
    for (int i = 0; i < N_PROBES && s == LOOM_OK; i++)
        if (pr[i].used) s = trace(e, d, &pr[i], &outs[i]);
    if (s == LOOM_OK) s = derive(name, &p->main, pr, 0);
    if (s == LOOM_OK && pr[PA].twin) s = derive(name, &p->twin, pr, 1);
    for (int i = 1; i < N_PROBES && s == LOOM_OK; i++)
        if (pr[i].used && outs[i] != outs[PA])
            s = loom_set_error(LOOM_ERR_INTERNAL, "program %s: the builder names different outputs", name);
    if (s == LOOM_OK) {
        /* trace A becomes the program's graph (and its twin) */
        p->main.g = pr[PA].g, p->main.owns = 1, pr[PA].g = NULL;
        p->twin.g = pr[PA].twin, p->twin.owns = 1, pr[PA].twin = NULL;
        p->max_rows = R, p->max_end = E, p->max_out = d->max_out, p->out_id = outs[PA];
        s = complete(p);
    }
    probes_free(pr);
    if (s != LOOM_OK) {
        loom_program_free(p);
        return s;
    }
    *out = p;
    return LOOM_OK;
}

loom_status loom_program_compile_graph(loom_executor *e, loom_graph *g, loom_program **out) {
    LOOM_RETURN_IF(!e || !g || !out, LOOM_ERR_INVALID_ARG, "program_compile_graph: NULL argument");
    *out = NULL;
    LOOM_TRY(loom_graph_status(g));
    loom_program *p = NULL;
    LOOM_TRY(program_alloc(e, "graph", &p));
    p->is_static = 1;
    p->main.g = g;
    p->out_id = -1;
    for (int i = g->n_tensors - 1; i >= 0 && p->out_id < 0; i--)
        if (g->tensors[i].is_output) p->out_id = i;
    loom_status s = LOOM_OK;
    if (e->mode == LOOM_MODE_FUSED_WITH_CHECKPOINTS) {
        s = loom_graph_init(&p->twin.g);
        if (s == LOOM_OK) p->twin.owns = 1, s = loom_graph_copy(p->twin.g, g);
    }
    if (s == LOOM_OK && e->mode != LOOM_MODE_STEP_BY_STEP) {
        const loom_fusion_rules *rules;
        s = loom_executor_rules(e, &rules);
        if (s == LOOM_OK) s = loom_fusion_apply(g, rules, &e->report);
    }
    if (s == LOOM_OK) s = complete(p);
    if (s != LOOM_OK) {
        loom_program_free(p);
        return s;
    }
    *out = p;
    return LOOM_OK;
}

static void prog_graph_free(prog_graph *pg) {
    if (pg->owns) loom_graph_free(pg->g);
    free(pg->dyn);
    free(pg->pos);
    free(pg->nodes);
    memset(pg, 0, sizeof *pg);
}

void loom_program_free(loom_program *p) {
    if (!p) return;
    if (p->e && p->e->last == p) p->e->last = NULL;
    prog_checks_free(p);
    prog_graph_free(&p->main);
    prog_graph_free(&p->twin);
    free(p);
}

const loom_graph *loom_program_graph(const loom_program *p) { return p->main.g; }
const loom_tensor *loom_program_output(const loom_program *p) {
    return p->out_id >= 0 ? &p->main.g->tensors[p->out_id].t : NULL;
}
const char *loom_program_name(const loom_program *p) { return p->name; }
int loom_program_max_rows(const loom_program *p) { return p->max_rows; }
size_t loom_program_arena_bytes(const loom_program *p) { return p->main.g->arena_bytes; }
void loom_program_set_timing(loom_program *p, int on) { p->timing = on; }
