/*
 * Running a forward program: set the step's descriptors and position
 * attributes (a few hundred integer updates), then every thread of the pool
 * walks the resolved nodes together (ggml's scheme): each runs its (ith, nth)
 * share of a kernel and meets the others at a barrier before the next launch.
 * Thread 0 does the bookkeeping (timing, dumps) while the others wait.
 */
#include "graph/program_internal.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "base/timer.h"

void prog_bind(prog_graph *pg, unsigned char *arena) {
    loom_graph *g = pg->g;
    for (int i = 0; i < g->n_tensors; i++) {
        loom_gtensor *t = &g->tensors[i];
        if (t->kind == LOOM_TK_INTERMEDIATE) t->t.data = arena + t->offset;
        else if (t->kind == LOOM_TK_VIEW) t->t.data = (char *)g->tensors[t->view_of].t.data + t->view_offset;
    }
}

void prog_apply_step(loom_executor *e, prog_graph *pg, unsigned char *arena, const loom_step *s) {
    loom_graph *g = pg->g;
    const int64_t rows = s->n_rows, pos = s->pos, outs = s->n_out;
    for (int k = 0; k < pg->n_dyn; k++) {
        const prog_dyn *dd = &pg->dyn[k];
        loom_gtensor *t = &g->tensors[dd->id];
        int64_t v[PV_COUNT];
        for (int j = 0; j < PV_COUNT; j++) v[j] = dd->a[j] * rows + dd->b[j] * pos + dd->e[j] * outs + dd->c[j];
        for (int d = 0; d < t->t.ndim; d++) t->t.shape[d] = v[PV_SHAPE + d], t->t.stride[d] = v[PV_STRIDE + d];
        if (t->kind == LOOM_TK_VIEW) {
            t->view_offset = (size_t)v[PV_OFFSET];
            if (dd->data && arena) t->t.data = (char *)g->tensors[t->view_of].t.data + t->view_offset;
        }
    }
    for (int k = 0; k < pg->n_pos; k++) {
        int32_t v = (int32_t)pos + pg->pos[k].c;
        memcpy(g->nodes[pg->pos[k].node].attrs + pg->pos[k].off, &v, sizeof v);
    }
    if (e && arena && (!pg->bound || pg->bound_gen != e->buffers_gen)) {
        prog_bind(pg, arena);
        pg->bound = 1, pg->bound_gen = e->buffers_gen;
    }
}

void prog_count_phases(prog_graph *pg, int nth, int invariant) {
    if (!pg->n_dyn_phases) return;
    for (int n = 0; n < pg->g->n_nodes; n++) {
        prog_node *pn = &pg->nodes[n];
        if (!pn->phases)
            pn->cur = loom_op_phases(pn->info, pn->args.src, pn->args.n_src, pn->args.attrs, nth, invariant);
    }
}

/* ------------------------------------------------------------ dumps */

/* Writes node n's output (elements in index order, views included) and its
 * line in index.tsv. Errors name the file. */
static loom_status dump_node(loom_executor *e, const loom_graph *g, int n) {
    const loom_node *node = &g->nodes[n];
    const loom_tensor *t = &g->tensors[node->dst].t;
    char path[4096], file[256];
    snprintf(file, sizeof file, "x%04d_n%04d_%s.bin", e->dump_seq, n, t->name);
    for (char *c = file; *c; c++)
        if (*c == '/' || *c == ' ') *c = '_';
    snprintf(path, sizeof path, "%s/%s", e->dump_dir, file);
    FILE *f = fopen(path, "wb");
    LOOM_RETURN_IF(!f, LOOM_ERR_IO, "--dump: cannot create '%s'", path);
    size_t es = loom_dtype_size(t->dtype);
    int64_t n_el = loom_tensor_nelem(t);
    int ok = 1;
    for (int64_t i = 0; i < n_el && ok; i++) {
        int64_t rem = i, off = 0;
        for (int d = t->ndim - 1; d >= 0; d--) {
            off += (rem % t->shape[d]) * t->stride[d];
            rem /= t->shape[d];
        }
        ok = fwrite((const char *)t->data + (size_t)off * es, es, 1, f) == 1;
    }
    ok &= fclose(f) == 0;
    LOOM_RETURN_IF(!ok, LOOM_ERR_IO, "--dump: cannot write '%s' (disk full?)", path);
    snprintf(path, sizeof path, "%s/index.tsv", e->dump_dir);
    FILE *idx = fopen(path, "a");
    LOOM_RETURN_IF(!idx, LOOM_ERR_IO, "--dump: cannot open '%s'", path);
    fprintf(idx, "%d\t%d\t%s\t%s\t%s\t", e->dump_seq, n, t->name, loom_op_get(node->op)->name,
            loom_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++) fprintf(idx, "%s%lld", d ? "x" : "", (long long)t->shape[d]);
    fprintf(idx, "\t%s\n", file);
    ok = !ferror(idx);
    ok &= fclose(idx) == 0;
    LOOM_RETURN_IF(!ok, LOOM_ERR_IO, "--dump: cannot write '%s' (disk full?)", path);
    return LOOM_OK;
}

/* ------------------------------------------------------------ execution */

typedef struct run_ctx {
    loom_program *p;
    prog_graph   *pg;
    const loom_batch *batch;
    int           first, last, dump;
    atomic_int    failed;
    /* The barrier after which every thread stops: the next one the first
     * failing thread reaches. A thread that passed a barrier checks only for
     * failures before it; one that went on and failed already (thread 0's
     * dump) counts for a later barrier, so no thread leaves one that the
     * others still wait at. */
    atomic_int    stop_at;
    loom_status   status;
    char          error[512];
} run_ctx;

/* Records a failure of node n before barrier number step. */
static void fail(run_ctx *rc, loom_status s, const char *what, int n, int step) {
    int cur = atomic_load(&rc->stop_at);
    while (step < cur && !atomic_compare_exchange_weak(&rc->stop_at, &cur, step)) {}
    if (atomic_exchange(&rc->failed, 1) == 0) {
        rc->status = s;
        const loom_graph *g = rc->pg->g;
        snprintf(rc->error, sizeof rc->error, "%s (node %d '%s'): %s", what, n, g->tensors[g->nodes[n].dst].t.name,
                 loom_last_error());
    }
}

static void run_worker(int ith, int nth, void *arg) {
    run_ctx *rc = arg;
    loom_executor *e = rc->p->e;
    const prog_graph *pg = rc->pg;
    loom_graph *g = pg->g;
    const int timing = rc->p->timing;
    unsigned char *scratch = e->scratch ? e->scratch + (size_t)ith * e->scratch_cap : NULL;
    int step = 0;  /* barriers passed: the same sequence in every thread */
    for (int n = rc->first; n <= rc->last; n++) {
        prog_node *pn = &pg->nodes[n];
        loom_kernel_args a = pn->args;
        a.ith = ith, a.nth = nth;
        a.scratch = scratch;
        a.shared = e->shared;
        a.scratch_bytes = e->scratch_cap, a.shared_bytes = e->shared_cap;
        a.batch = rc->batch;
        a.invariant = e->invariant;
        a.arrive = &pn->arrive;
        uint64_t t0 = timing && ith == 0 ? loom_time_ns() : 0;
        for (int ph = 0; ph < pn->cur; ph++) {
            a.phase = ph;
            loom_status s = pn->kernel(&a);
            if (s != LOOM_OK) fail(rc, s, pn->info->name, n, step);
            loom_pool_barrier(e->pool);
            if (atomic_load_explicit(&rc->stop_at, memory_order_relaxed) <= step++) return; /* all alike */
        }
        if (ith == 0) {
            if (timing) g->nodes[n].stats.time_ns = (double)(loom_time_ns() - t0);
            if (rc->dump) {
                loom_status s = dump_node(e, g, n);
                if (s != LOOM_OK) fail(rc, s, "dump", n, step);
            }
        }
        if (rc->dump) { /* the next node may reuse this memory; a failed dump stops everyone */
            loom_pool_barrier(e->pool);
            if (atomic_load_explicit(&rc->stop_at, memory_order_relaxed) <= step++) return;
        }
    }
}

loom_status prog_exec(loom_program *p, prog_graph *pg, int first, int last, int dump, const loom_batch *batch) {
    run_ctx rc = {.p = p, .pg = pg, .batch = batch, .first = first, .last = last, .dump = dump, .status = LOOM_OK};
    atomic_init(&rc.failed, 0);
    atomic_init(&rc.stop_at, INT_MAX);
    loom_pool_run(p->e->pool, run_worker, &rc);
    if (atomic_load(&rc.failed)) return loom_set_error(rc.status, "%s", rc.error);
    return LOOM_OK;
}

loom_status loom_program_run(loom_program *p, const loom_step *s) {
    LOOM_RETURN_IF(!p, LOOM_ERR_INVALID_ARG, "program_run: NULL program");
    loom_executor *e = p->e;
    loom_step st = {0, 0, 1, NULL};
    if (!p->is_static) {
        LOOM_RETURN_IF(!s, LOOM_ERR_INVALID_ARG, "program %s: a step is required", p->name);
        st = *s;
        int outs_max = p->max_out ? p->max_out : 1;
        if (!p->max_out) st.n_out = 1;
        LOOM_RETURN_IF(st.n_rows < 1 || st.n_rows > p->max_rows || st.pos < 0 ||
                           (p->max_end ? st.pos > p->max_end - st.n_rows : st.pos != 0) ||
                           st.n_out < 1 || st.n_out > outs_max || st.n_out > st.n_rows,
                       LOOM_ERR_INVALID_ARG,
                       "program %s: a step of %d rows at position %d with %d output rows does not fit its bucket "
                       "(1..%d rows, positions within %d, 1..%d output rows)", p->name, st.n_rows, st.pos,
                       st.n_out, p->max_rows, p->max_end, outs_max);
        p->last = st;
    }
    prog_apply_step(e, &p->main, e->arena, &st);
    prog_count_phases(&p->main, e->n_threads, e->invariant);
    const loom_graph *g = p->main.g;
    loom_status rs = !g->n_nodes ? LOOM_OK
                     : p->twin.g ? prog_checkpoints_exec(p, &st, e->dump_dir != NULL)
                                 : prog_exec(p, &p->main, 0, g->n_nodes - 1, e->dump_dir != NULL, st.batch);
    if (e->dump_dir) e->dump_seq++;
    e->last = p;
    return rs;
}

void loom_program_account(loom_program *p) {
    loom_graph *g = p->main.g;
    for (int n = 0; n < g->n_nodes; n++) {
        loom_node *node = &g->nodes[n];
        const prog_node *pn = &p->main.nodes[n];
        loom_cost c = {0};
        pn->info->cost(pn->args.src, pn->args.n_src, pn->args.dst, pn->args.attrs, &c); /* at the last step's shapes */
        node->stats.kernel = loom_op_kernel_name(node->op, p->e->isa);
        node->stats.kernels = pn->cur;
        node->stats.flops = c.flops;
        node->stats.bytes_read = c.bytes_read;
        node->stats.bytes_written = c.bytes_written;
        if (!p->timing) node->stats.time_ns = 0;
    }
}
