/*
 * Executor. step_by_step: one kernel per node; fused modes run the graph's
 * fused copy (src/graph/fusion.c), checkpoints in exec_checkpoint.c. All threads walk the node
 * list together (ggml style): each runs its (ith, nth) share of a kernel, then
 * meets the others at a barrier before the next node. Thread 0 does the
 * bookkeeping (timing, dumps) while the others wait at a second barrier.
 */
#include "graph/exec.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/status.h"
#include "base/timer.h"

static const char *const mode_names[] = {
    [LOOM_MODE_STEP_BY_STEP] = "step_by_step",
    [LOOM_MODE_FUSED] = "fused",
    [LOOM_MODE_FUSED_WITH_CHECKPOINTS] = "fused_with_checkpoints",
};
_Static_assert(sizeof mode_names / sizeof mode_names[0] == LOOM_MODE_COUNT, "mode names");

const char *loom_mode_name(loom_exec_mode m) {
    return (unsigned)m < LOOM_MODE_COUNT ? mode_names[m] : "unknown";
}

loom_status loom_mode_parse(const char *name, loom_exec_mode *out) {
    for (int i = 0; i < LOOM_MODE_COUNT; i++)
        if (name && strcmp(name, mode_names[i]) == 0) {
            *out = (loom_exec_mode)i;
            return LOOM_OK;
        }
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "unknown mode '%s' (expected step_by_step, fused or fused_with_checkpoints)",
                          name ? name : "(null)");
}

loom_status loom_executor_init(loom_executor **out, int n_threads, loom_exec_mode mode) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "executor_init: NULL argument");
    LOOM_RETURN_IF(n_threads < 1 || n_threads > 1024, LOOM_ERR_INVALID_ARG,
                   "thread count %d out of range 1..1024", n_threads);
    LOOM_RETURN_IF((unsigned)mode >= LOOM_MODE_COUNT, LOOM_ERR_INVALID_ARG, "unknown mode %d",
                   (int)mode);
    loom_executor *e = calloc(1, sizeof *e);
    LOOM_RETURN_IF(!e, LOOM_ERR_NOMEM, "executor_init: out of memory");
    loom_status s = loom_pool_init(&e->pool, n_threads);
    if (s != LOOM_OK) {
        free(e);
        return s;
    }
    e->n_threads = n_threads;
    e->isa = loom_cpu_isa();
    e->mode = mode;
    e->ckpt_action = -1;
    *out = e;
    return LOOM_OK;
}

void loom_executor_free(loom_executor *e) {
    if (!e) return;
    loom_pool_free(e->pool);
    loom_free_aligned(e->arena);
    loom_free_aligned(e->scratch);
    loom_free_aligned(e->shared);
    free(e->dump_dir);
    loom_fusion_rules_free(e->rules);
    loom_fusion_memo_free(e->memo);
    loom_graph_free(e->fg);
    free(e->saved_nodes);
    loom_graph_free(e->rg);
    loom_free_aligned(e->ref_arena);
    free(e->kv_save);
    free(e->ckpt);
    free(e);
}

loom_status loom_executor_set_dump(loom_executor *e, const char *dir) {
    free(e->dump_dir);
    e->dump_dir = NULL;
    if (!dir) return LOOM_OK;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return loom_set_error(LOOM_ERR_IO, "--dump: cannot create directory '%s': %s", dir,
                              strerror(errno));
    e->dump_dir = strdup(dir);
    LOOM_RETURN_IF(!e->dump_dir, LOOM_ERR_NOMEM, "out of memory");
    return LOOM_OK;
}

/* Grows *buf to at least need bytes (never shrinks: decode steps reuse it). */
loom_status loom_exec_ensure(loom_executor *e, unsigned char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return LOOM_OK;
    loom_free_aligned(*buf);
    *buf = loom_alloc_aligned(need, LOOM_ALIGN);
    *cap = *buf ? need : 0;
    LOOM_RETURN_IF(!*buf, LOOM_ERR_NOMEM, "executor: cannot allocate %zu bytes", need);
    e->n_allocs++;
    return LOOM_OK;
}

/* Points every view at its base + offset (bases precede views). */
void loom_exec_bind_views(loom_graph *g) {
    for (int i = 0; i < g->n_tensors; i++) {
        loom_gtensor *t = &g->tensors[i];
        if (t->kind == LOOM_TK_VIEW) t->t.data = (char *)g->tensors[t->view_of].t.data + t->view_offset;
    }
}

/* Gives every non-external tensor its address: its slot in arena, or (views) base + offset. */
void loom_exec_bind(loom_graph *g, unsigned char *arena) {
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].kind == LOOM_TK_INTERMEDIATE) g->tensors[i].t.data = arena + g->tensors[i].offset;
    loom_exec_bind_views(g);
}

static void dump_node(loom_executor *e, const loom_graph *g, int n) {
    const loom_node *node = &g->nodes[n];
    const loom_tensor *t = &g->tensors[node->dst].t;
    char path[4096], file[256];
    snprintf(file, sizeof file, "x%04d_n%04d_%s.bin", e->dump_seq, n, t->name);
    for (char *c = file; *c; c++)
        if (*c == '/' || *c == ' ') *c = '_';
    snprintf(path, sizeof path, "%s/%s", e->dump_dir, file);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    /* write element by element order of a contiguous copy (views may be strided) */
    size_t es = loom_dtype_size(t->dtype);
    int64_t n_el = loom_tensor_nelem(t);
    for (int64_t i = 0; i < n_el; i++) {
        int64_t rem = i, off = 0;
        for (int d = t->ndim - 1; d >= 0; d--) {
            off += (rem % t->shape[d]) * t->stride[d];
            rem /= t->shape[d];
        }
        fwrite((const char *)t->data + (size_t)off * es, es, 1, f);
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/index.tsv", e->dump_dir);
    FILE *idx = fopen(path, "a");
    if (!idx) return;
    fprintf(idx, "%d\t%d\t%s\t%s\t%s\t", e->dump_seq, n, t->name, loom_op_get(node->op)->name,
            loom_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++) fprintf(idx, "%s%lld", d ? "x" : "", (long long)t->shape[d]);
    fprintf(idx, "\t%s\n", file);
    fclose(idx);
}

typedef struct run_ctx {
    loom_executor *e;
    loom_graph    *g;
    int            only_layer;  /* run only nodes of this layer when filter is set */
    int            filter;
    atomic_int     failed;
    loom_status    status;
    char           error[512];
} run_ctx;

static void run_worker(int ith, int nth, void *arg) {
    run_ctx *rc = arg;
    loom_executor *e = rc->e;
    loom_graph *g = rc->g;
    for (int n = 0; n < g->n_nodes; n++) {
        loom_node *node = &g->nodes[n];
        if (rc->filter && node->layer != rc->only_layer) continue;
        const loom_op_info *info = loom_op_get(node->op);
        loom_kernel_args a;
        loom_graph_node_args(g, n, &a);
        a.ith = ith, a.nth = nth;
        a.scratch = e->scratch ? e->scratch + (size_t)ith * e->scratch_cap : NULL;
        a.shared = e->shared;
        loom_kernel_fn kernel = loom_op_kernel(node->op, e->isa);
        uint64_t t0 = ith == 0 ? loom_time_ns() : 0;
        int phases = loom_op_phases(info, a.src, a.n_src, a.attrs, nth);
        for (int ph = 0; ph < phases; ph++) {
            a.phase = ph;
            loom_status s = kernel(&a);
            if (s != LOOM_OK && atomic_exchange(&rc->failed, 1) == 0) {
                rc->status = s;
                snprintf(rc->error, sizeof rc->error, "%s (node %d '%s'): %s", info->name, n,
                         g->tensors[node->dst].t.name, loom_last_error());
            }
            loom_pool_barrier(e->pool);
            if (atomic_load(&rc->failed)) return;  /* every thread sees it after the barrier */
        }
        if (ith == 0) {
            node->stats.time_ns = (double)(loom_time_ns() - t0);
            if (e->dump_dir && !rc->filter) dump_node(e, g, n);
        }
        if (e->dump_dir && !rc->filter) loom_pool_barrier(e->pool);  /* the next node may reuse this memory */
    }
}

static void fill_static_stats(loom_executor *e, loom_graph *g) {
    for (int n = 0; n < g->n_nodes; n++) {
        loom_node *node = &g->nodes[n];
        const loom_op_info *info = loom_op_get(node->op);
        const loom_tensor *src[LOOM_MAX_SRC] = {0};
        for (int i = 0; i < node->n_src; i++) src[i] = &g->tensors[node->src[i]].t;
        loom_cost c = {0};
        info->cost(src, node->n_src, &g->tensors[node->dst].t,
                   node->has_attrs ? node->attrs : NULL, &c);
        node->stats.kernel = loom_op_kernel_name(node->op, e->isa);
        node->stats.kernels = loom_op_phases(info, src, node->n_src, node->has_attrs ? node->attrs : NULL,
                                             e->n_threads);
        node->stats.flops = c.flops;
        node->stats.bytes_read = c.bytes_read;
        node->stats.bytes_written = c.bytes_written;
        node->stats.time_ns = 0;
    }
}

/* Plans g (if needed) into arena, grows the scratch, binds and runs it. */
loom_status loom_exec_graph(loom_executor *e, loom_graph *g, unsigned char **arena, size_t *arena_cap,
                            int filter, int only_layer) {
    if (!g->planned) LOOM_TRY(loom_graph_plan(g));
    LOOM_TRY(loom_exec_ensure(e, arena, arena_cap, g->arena_bytes));
    if (g->scratch_bytes > e->scratch_cap) {
        size_t per = g->scratch_bytes;
        loom_free_aligned(e->scratch);
        e->scratch = loom_alloc_aligned(per * (size_t)e->n_threads, LOOM_ALIGN);
        e->scratch_cap = e->scratch ? per : 0;
        LOOM_RETURN_IF(!e->scratch, LOOM_ERR_NOMEM, "executor: cannot allocate scratch");
        e->n_allocs++;
    }
    if (g->shared_bytes > e->shared_cap) { /* grows with the context (decode's split-KV partials): by
                                            * doubling, so a long decode reallocates it a few times */
        size_t cap = e->shared_cap ? e->shared_cap : 4096;
        while (cap < g->shared_bytes) cap *= 2;
        loom_free_aligned(e->shared);
        e->shared = loom_alloc_aligned(cap, LOOM_ALIGN);
        e->shared_cap = e->shared ? cap : 0;
        LOOM_RETURN_IF(!e->shared, LOOM_ERR_NOMEM, "executor: cannot allocate %zu shared bytes", cap);
        e->n_allocs++;
    }
    if (!filter) {
        loom_exec_bind(g, *arena);
        fill_static_stats(e, g);
    }
    run_ctx rc = {.e = e, .g = g, .status = LOOM_OK, .filter = filter, .only_layer = only_layer};
    atomic_init(&rc.failed, 0);
    loom_pool_run(e->pool, run_worker, &rc);
    if (atomic_load(&rc.failed)) return loom_set_error(rc.status, "%s", rc.error);
    return LOOM_OK;
}

void loom_executor_set_rules(loom_executor *e, loom_fusion_rules *r) {
    loom_fusion_rules_free(e->rules);
    e->rules = r;
    loom_fusion_memo_free(e->memo); /* it remembers matches of the old rules */
    e->memo = NULL;
}

loom_status loom_executor_load_rules(loom_executor *e, const char *path, const char *preset) {
    loom_fusion_rules *r;
    LOOM_TRY(loom_fusion_rules_load(path, &r));
    if (preset) {
        loom_status s = loom_fusion_rules_preset(r, preset);
        if (s != LOOM_OK) {
            loom_fusion_rules_free(r);
            return s;
        }
    }
    loom_executor_set_rules(e, r);
    return LOOM_OK;
}

const loom_graph *loom_executor_last_graph(const loom_executor *e) { return e->last_run; }

loom_status loom_mode_resolve(const char *flag, const loom_fusion_rules *rules, loom_exec_mode *out) {
    if (flag) return loom_mode_parse(flag, out);
    const char *env = getenv("LOOM_MODE");
    if (env && *env) {
        loom_status s = loom_mode_parse(env, out);
        if (s != LOOM_OK) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s", loom_last_error());
            return loom_set_error(s, "LOOM_MODE: %s", msg);
        }
        return LOOM_OK;
    }
    int m = loom_fusion_rules_mode(rules);
    *out = m >= 0 ? (loom_exec_mode)m : LOOM_MODE_STEP_BY_STEP;
    return LOOM_OK;
}

/* Fused mode fuses the caller's graph in place: fusion keeps every tensor id
 * (it only appends hidden buffers), so the caller reads its results as
 * before, and a decode step no longer copies the whole graph first (7% of a
 * tiny model's step, stories260K). The nodes are kept aside while the memo
 * replays: a replay can stop part way (a match that no longer holds), and the
 * full pass then starts again from the primitive graph. */
static loom_status run_fused_in_place(loom_executor *e, loom_graph *g) {
    int nn = g->n_nodes, nt = g->n_tensors;
    if (e->saved_cap < nn) {
        loom_node *p = realloc(e->saved_nodes, (size_t)nn * sizeof *p);
        LOOM_RETURN_IF(!p, LOOM_ERR_NOMEM, "executor_run: out of memory");
        e->saved_nodes = p, e->saved_cap = nn;
    }
    if (nn) memcpy(e->saved_nodes, g->nodes, (size_t)nn * sizeof *g->nodes);
    int replayed = 0;
    LOOM_TRY(loom_fusion_apply_memo(g, e->rules, &e->report, e->memo, &replayed));
    if (replayed < 0) {
        loom_graph_restore_nodes(g, e->saved_nodes, nn, nt);
        LOOM_TRY(loom_fusion_apply_memo(g, e->rules, &e->report, e->memo, &replayed));
    }
    loom_status s = loom_exec_graph(e, g, &e->arena, &e->arena_cap, 0, 0);
    if (e->dump_dir) e->dump_seq++;
    e->last_run = g;
    return s;
}

loom_status loom_executor_run(loom_executor *e, loom_graph *g) {
    LOOM_RETURN_IF(!e || !g, LOOM_ERR_INVALID_ARG, "executor_run: NULL argument");
    if (e->mode == LOOM_MODE_STEP_BY_STEP) {
        loom_status s = loom_exec_graph(e, g, &e->arena, &e->arena_cap, 0, 0);
        if (e->dump_dir) e->dump_seq++;
        e->last_run = g;
        return s;
    }
    LOOM_TRY(loom_graph_status(g));
    if (!e->rules) LOOM_TRY(loom_fusion_rules_load(NULL, &e->rules));
    if (!e->memo) LOOM_TRY(loom_fusion_memo_init(&e->memo));
    if (e->mode == LOOM_MODE_FUSED) return run_fused_in_place(e, g);
    /* fused_with_checkpoints: the primitive graph is re-run from the fused values, so fuse a copy */
    if (!e->fg) LOOM_TRY(loom_graph_init(&e->fg));
    LOOM_TRY(loom_graph_copy(e->fg, g));
    int replayed = 0;
    LOOM_TRY(loom_fusion_apply_memo(e->fg, e->rules, &e->report, e->memo, &replayed));
    if (replayed < 0) { /* a replay that stopped part way: fuse afresh */
        LOOM_TRY(loom_graph_copy(e->fg, g));
        LOOM_TRY(loom_fusion_apply_memo(e->fg, e->rules, &e->report, e->memo, &replayed));
    }
    if (e->mode == LOOM_MODE_FUSED_WITH_CHECKPOINTS) loom_exec_keep_layer_values(e->fg, g);
    loom_status s = loom_exec_graph(e, e->fg, &e->arena, &e->arena_cap, 0, 0);
    if (e->dump_dir) e->dump_seq++;
    e->last_run = e->fg;
    LOOM_TRY(s);
    /* the caller reads results through g: same tensor ids */
    for (int i = 0; i < g->n_tensors; i++) g->tensors[i].t.data = e->fg->tensors[i].t.data;
    g->arena_bytes = e->fg->arena_bytes;
    if (e->mode == LOOM_MODE_FUSED_WITH_CHECKPOINTS) LOOM_TRY(loom_exec_checkpoints(e, g));
    return LOOM_OK;
}

loom_status loom_model_params_set_mode(loom_model_params *p, const char *flag) {
    LOOM_RETURN_IF(!p, LOOM_ERR_INVALID_ARG, "set_mode: NULL argument");
    const char *env = getenv("LOOM_MODE");
    if (flag || (env && *env)) return loom_mode_resolve(flag, NULL, &p->mode);
    loom_fusion_rules *r = NULL;
    LOOM_TRY(loom_fusion_rules_load(p->rules_path, &r));
    loom_status s = loom_mode_resolve(NULL, r, &p->mode);
    loom_fusion_rules_free(r);
    return s;
}
