/*
 * fused_with_checkpoints: a program keeps its graph's unfused twin (the same
 * trace before fusion: fusion keeps the ids of every value visible outside a
 * match, so both name the same values alike). The fused pass runs node by
 * node; right after each fused node, its decomposition (the twin nodes that
 * compute the fused node's outputs from its inputs) runs unfused, from the
 * very values the fused node read, and the outputs are compared.
 *
 * Comparing one fused op with its own decomposition, from the same inputs, is
 * what makes the check compare like with like: both computations quantize the
 * same activations (q8 x for quantized weights) the same way. Comparing whole
 * layers, as loom did before, re-ran every op of a layer from the layer's
 * input, so float-order noise of one op (a fused RMSNorm's sum, a split-KV
 * attention) could flip an 8-bit rounding of the next op's activations and
 * show up as a relative error of 1e-2 .. 1e-1 in a correct layer.
 *
 * A fused op that no rule made (the builder placed it: the batch engine's
 * paged attention, which has no unfused form over a ragged batch) is its own
 * twin node: the twin runs it with its reference kernel (program.c), and the
 * check compares the optimised kernel with the reference from the same inputs.
 *
 * K/V cache rows a decomposition writes (kv_append: rows pos..; kv_write: its
 * slots) are the fused op's too: they are saved before the reference runs,
 * compared with what it wrote (dequantized for i8 caches, with one rounding
 * step of the cache dtype allowed), and restored, so the fused results stay
 * the model's state. Everything is sized at compile time.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "graph/program_internal.h"

extern int loom_fusion_rules_checkpoints(const loom_fusion_rules *r, int *layers, int *logits);

/* The stat of layer in e->ckpt, made now (at compile time) when absent. */
static int stat_for(loom_executor *e, int layer) {
    for (int i = 0; i < e->n_ckpt; i++)
        if (e->ckpt[i].layer == layer) return i;
    if (e->n_ckpt == e->cap_ckpt) {
        int cap = e->cap_ckpt ? 2 * e->cap_ckpt : 16;
        loom_checkpoint_stat *p = realloc(e->ckpt, (size_t)cap * sizeof *p);
        if (!p) return -1;
        e->ckpt = p, e->cap_ckpt = cap;
    }
    loom_checkpoint_stat *c = &e->ckpt[e->n_ckpt];
    memset(c, 0, sizeof *c);
    c->layer = layer;
    if (layer == LOOM_LAYER_POST) snprintf(c->name, sizeof c->name, "logits");
    else if (layer == LOOM_LAYER_PRE) snprintf(c->name, sizeof c->name, "embeddings");
    else snprintf(c->name, sizeof c->name, "L%d", layer);
    return e->n_ckpt++;
}

static int is_kv(const loom_node *n) { return n->op == LOOM_OP_KV_APPEND || n->op == LOOM_OP_KV_WRITE; }

/* Bytes of the cache rows (and i8 scale rows) the kv nodes of a check write
 * for n rows (n < 0: the rows they were built with). */
static size_t kv_rows_bytes(const loom_graph *g, const prog_check *c, int64_t rows) {
    size_t total = 0;
    for (int j = 0; j < c->n_twin; j++) {
        const loom_node *node = &g->nodes[c->twin[j]];
        if (!is_kv(node)) continue;
        int64_t n = rows >= 0 ? rows : g->tensors[node->src[1]].t.shape[0];
        int scale = node->op == LOOM_OP_KV_WRITE ? 3 : 2;
        for (int i = 0; i < node->n_src; i = i ? node->n_src : scale) { /* the cache, then its scales */
            const loom_tensor *store = &g->tensors[node->src[i]].t;
            total += (size_t)store->stride[0] * loom_dtype_size(store->dtype) * (size_t)n;
        }
    }
    return total;
}

/* The tensor id's producing node in g, through views (-1: none). */
static int producer_of(const loom_graph *g, int id) {
    while (id >= 0 && g->tensors[id].producer < 0 && g->tensors[id].kind == LOOM_TK_VIEW) id = g->tensors[id].view_of;
    return id >= 0 ? g->tensors[id].producer : -1;
}

/* The decomposition of fused node n: the twin nodes reached backwards from
 * its outputs without passing its inputs. 0 when it cannot be checked (no
 * twin node computes it, or the walk goes beyond MAX_DECOMPOSITION nodes:
 * the node's inputs do not bound it). */
#define MAX_DECOMPOSITION 64
static int decompose(const loom_graph *fg, const loom_graph *rg, int n, prog_check *c, unsigned char *mark) {
    const loom_node *fn = &fg->nodes[n];
    int stop[LOOM_MAX_SRC], n_stop = 0;
    for (int i = 0; i < fn->n_src; i++) stop[n_stop++] = loom_graph_storage(fg, fn->src[i]);
    int outs[1 + LOOM_MAX_EXTRA_DST], n_out = 0;
    outs[n_out++] = fn->dst;
    for (int i = 0; i < fn->n_dst_extra; i++) outs[n_out++] = fn->dst_extra[i];
    int *stack = malloc(sizeof(int) * (size_t)(rg->n_nodes + 1));
    if (!stack) return -1;
    memset(mark, 0, (size_t)rg->n_nodes);
    int sp = 0, ok = 1;
    for (int o = 0; o < n_out; o++) {
        if (outs[o] >= rg->n_tensors) continue; /* made by fusion (ffn's hidden buffer) */
        int p = producer_of(rg, outs[o]);
        if (p >= 0 && !mark[p]) mark[p] = 1, stack[sp++] = p;
    }
    int n_seen = sp;
    while (sp > 0 && ok) {
        const loom_node *tn = &rg->nodes[stack[--sp]];
        for (int i = 0; i < tn->n_src && ok; i++) {
            int s = loom_graph_storage(rg, tn->src[i]), at_input = 0;
            for (int k = 0; k < n_stop; k++) at_input |= stop[k] == s;
            if (at_input) continue;
            int p = rg->tensors[s].kind == LOOM_TK_INTERMEDIATE ? producer_of(rg, tn->src[i]) : -1;
            if (p >= 0 && !mark[p]) mark[p] = 1, stack[sp++] = p, n_seen++;
        }
        if (n_seen > MAX_DECOMPOSITION) ok = 0; /* its inputs do not bound it: not a decomposition */
    }
    free(stack);
    c->n_twin = 0;
    for (int k = 0; k < rg->n_nodes; k++) c->n_twin += mark[k];
    if (!ok || c->n_twin == 0) return 0;
    c->twin = malloc(sizeof(int) * (size_t)c->n_twin);
    c->inputs = malloc(sizeof(int) * (size_t)(c->n_twin * LOOM_MAX_SRC));
    if (!c->twin || !c->inputs) return -1;
    c->n_twin = 0;
    for (int k = 0; k < rg->n_nodes; k++)
        if (mark[k]) c->twin[c->n_twin++] = k;
    /* what it reads from the fused pass: intermediates no node of its own produces */
    for (int j = 0; j < c->n_twin; j++) {
        const loom_node *tn = &rg->nodes[c->twin[j]];
        for (int i = 0; i < tn->n_src; i++) {
            int s = loom_graph_storage(rg, tn->src[i]), p = rg->tensors[s].producer;
            if (rg->tensors[s].kind != LOOM_TK_INTERMEDIATE || (p >= 0 && mark[p])) continue;
            if (s >= fg->n_tensors) return 0;
            c->inputs[c->n_inputs++] = s;
        }
    }
    return 1;
}

loom_status prog_checkpoints_compile(loom_program *p) {
    loom_executor *e = p->e;
    const loom_graph *rg = p->twin.g, *fg = p->main.g;
    int want_layers = 1, want_logits = 1;
    loom_fusion_rules_checkpoints(e->rules, &want_layers, &want_logits);
    int n_fused = 0;
    for (int n = 0; n < fg->n_nodes; n++) n_fused += fg->nodes[n].rule >= 0 || loom_op_get(fg->nodes[n].op)->decomposition;
    p->checks = calloc((size_t)n_fused + 1, sizeof *p->checks);
    unsigned char *mark = malloc((size_t)rg->n_nodes + 1);
    LOOM_RETURN_IF(!p->checks || !mark, LOOM_ERR_NOMEM, "checkpoints: out of memory");
    size_t kv_bytes = 0;
    const int64_t rows = p->is_static ? -1 : p->max_rows;
    loom_status st = LOOM_OK;
    for (int n = 0; n < fg->n_nodes && st == LOOM_OK; n++) {
        const loom_node *fn = &fg->nodes[n];
        int placed = fn->rule < 0 && loom_op_get(fn->op)->decomposition; /* a fused op, no rule */
        if ((fn->rule < 0 && !placed) || (fn->layer == LOOM_LAYER_POST ? !want_logits : !want_layers)) continue;
        prog_check *c = &p->checks[p->n_checks];
        memset(c, 0, sizeof *c);
        c->node = n;
        int r = decompose(fg, rg, n, c, mark);
        if (r < 0) st = loom_set_error(LOOM_ERR_NOMEM, "checkpoints: out of memory");
        if (r <= 0) { /* cannot be checked: no decomposition within its layer (counted, reported) */
            p->n_unchecked++;
            free(c->twin), free(c->inputs);
            memset(c, 0, sizeof *c);
            continue;
        }
        c->stat = stat_for(e, fn->layer);
        if (c->stat < 0) st = loom_set_error(LOOM_ERR_NOMEM, "checkpoints: out of memory");
        size_t b = kv_rows_bytes(rg, c, rows);
        if (b > kv_bytes) kv_bytes = b;
        p->n_checks++;
    }
    free(mark);
    LOOM_TRY(st);
    e->ckpt_unchecked = p->n_unchecked;
    p->seen = calloc((size_t)e->n_ckpt + 1, sizeof *p->seen); /* its checks' stats are < n_ckpt */
    LOOM_RETURN_IF(!p->seen, LOOM_ERR_NOMEM, "checkpoints: out of memory");
    if (kv_bytes > e->kv_save_cap) {
        unsigned char *buf = realloc(e->kv_save, kv_bytes);
        LOOM_RETURN_IF(!buf, LOOM_ERR_NOMEM, "checkpoints: out of memory");
        e->kv_save = buf, e->kv_save_cap = kv_bytes;
        e->n_allocs++;
    }
    return LOOM_OK;
}

void prog_checks_free(loom_program *p) {
    for (int i = 0; i < p->n_checks; i++) free(p->checks[i].twin), free(p->checks[i].inputs);
    free(p->checks);
    free(p->seen);
    p->seen = NULL;
    p->checks = NULL;
    p->n_checks = 0;
}

/* The cache rows of a kv node, in the order kv_rows saves them: calls fn for
 * each written row of the cache (i = 0) and of the scale store (i > 0). */
typedef void (*kv_row_fn)(void *ctx, const loom_node *node, int i, size_t t, char *row, size_t off, size_t bytes);

static size_t kv_walk(const loom_graph *rg, const prog_check *c, kv_row_fn fn, void *ctx) {
    size_t off = 0;
    for (int j = 0; j < c->n_twin; j++) {
        const loom_node *node = &rg->nodes[c->twin[j]];
        if (!is_kv(node)) continue;
        int append = node->op == LOOM_OP_KV_APPEND;
        size_t rows = (size_t)rg->tensors[node->src[1]].t.shape[0];
        const loom_tensor *slots = append ? NULL : &rg->tensors[node->src[2]].t;
        int pos = append ? ((const loom_kv_append_attrs *)(const void *)node->attrs)->pos : 0;
        int scale = append ? 2 : 3;
        for (int i = 0; i < node->n_src; i = i ? node->n_src : scale) {
            const loom_tensor *store = &rg->tensors[node->src[i]].t;
            size_t row = (size_t)store->stride[0] * loom_dtype_size(store->dtype);
            for (size_t t = 0; t < rows; t++) {
                int64_t at = append ? pos + (int64_t)t : ((const int32_t *)slots->data)[t * (size_t)slots->stride[0]];
                if (at >= 0 && at < store->shape[0]) fn(ctx, node, i, t, (char *)store->data + row * (size_t)at, off, row);
                off += row;
            }
        }
    }
    return off;
}

static void save_row(void *ctx, const loom_node *node, int i, size_t t, char *row, size_t off, size_t bytes) {
    (void)node, (void)i, (void)t;
    memcpy((unsigned char *)ctx + off, row, bytes);
}

static void restore_row(void *ctx, const loom_node *node, int i, size_t t, char *row, size_t off, size_t bytes) {
    (void)node, (void)i, (void)t;
    memcpy(row, (unsigned char *)ctx + off, bytes);
}

/* The worst difference so far, and whether any element is beyond tolerance. */
typedef struct diff {
    double max_abs, max_rel;
    int bad;
} diff;

/* One element: fused a, reference b, allowed |a - b| <= allow + tol * max(1, |b|). */
static void diff_add(diff *d, double a, double b, double tol, double allow) {
    if (isnan(a) || isnan(b) || isinf(a) || isinf(b)) {
        if (!(isnan(a) && isnan(b)) && a != b) d->bad = 1, d->max_abs = d->max_rel = INFINITY;
        return;
    }
    double x = fabs(a - b), den = fabs(b) > 1.0 ? fabs(b) : 1.0, rel = x / den;
    if (x > d->max_abs) d->max_abs = x;
    if (rel > d->max_rel) d->max_rel = rel;
    if (x > allow + tol * den) d->bad = 1;
}

static double elem(const void *row, loom_dtype dt, int64_t k) {
    switch (dt) {
    case LOOM_F32: return ((const float *)row)[k];
    case LOOM_F16: return loom_f16_to_f32(((const uint16_t *)row)[k]);
    case LOOM_BF16: return loom_bf16_to_f32(((const uint16_t *)row)[k]);
    case LOOM_I8: return ((const int8_t *)row)[k];
    default: return 0.0;
    }
}

/* Compares the cache rows the reference wrote (in the store) with the fused
 * ones (saved): the values, dequantized for i8 with each side's scale; one
 * rounding step of the cache dtype is allowed (both round their own f32). */
typedef struct kv_cmp {
    const loom_graph *rg;
    const unsigned char *saved;
    double tol;
    diff d;
} kv_cmp;

static void cmp_row(void *ctx, const loom_node *node, int i, size_t t, char *row, size_t off, size_t bytes) {
    kv_cmp *k = ctx;
    if (i > 0) return; /* scale rows: compared through the values they scale */
    const loom_tensor *store = &k->rg->tensors[node->src[0]].t;
    const loom_dtype dt = store->dtype;
    const void *fused = k->saved + off;
    int64_t n = (int64_t)(bytes / loom_dtype_size(dt));
    if (dt != LOOM_I8) {
        double step = dt == LOOM_BF16 ? 1.0 / 128 : dt == LOOM_F16 ? 1.0 / 1024 : 0.0;
        for (int64_t e = 0; e < n; e++) {
            double a = elem(fused, dt, e), b = elem(row, dt, e);
            diff_add(&k->d, a, b, k->tol, step * fabs(b));
        }
        return;
    }
    /* i8: the scale store follows the cache rows of this node (kv_walk's order):
     * row t's scales are at off + rows * row bytes + t * scale row bytes */
    int scale_in = node->op == LOOM_OP_KV_WRITE ? 3 : 2;
    const loom_tensor *sst = &k->rg->tensors[node->src[scale_in]].t;
    size_t rows = (size_t)k->rg->tensors[node->src[1]].t.shape[0];
    size_t srow = (size_t)sst->stride[0] * sizeof(float);
    size_t cache_off0 = off - t * bytes;
    const float *fs = (const float *)(k->saved + cache_off0 + rows * bytes + t * srow);
    const int64_t at = (int64_t)((row - (char *)store->data) / (ptrdiff_t)bytes);
    const float *rs = (const float *)((const char *)sst->data + srow * (size_t)at);
    int64_t D = store->shape[store->ndim - 1], heads = n / D;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t e = 0; e < D; e++) {
            double a = elem(fused, dt, h * D + e) * fs[h], b = elem(row, dt, h * D + e) * rs[h];
            diff_add(&k->d, a, b, k->tol, fs[h] > rs[h] ? fs[h] : rs[h]);
        }
}

/* The tolerance of a check: the rules' (the f32 paths'), or DESIGN.md's for
 * f16 / bf16 where its attention reads a cache of that dtype (the fused
 * decode kernel rounds P to bf16 for a bf16 V, the unfused kernel in its own
 * tiling): 2^-8 / 2^-7, twice that over 2048 keys or more. An i8 cache gets
 * f16's: the decode kernel's integer products round q and each tile's P to
 * 16 bits against their maxima (docs/ops.md: a tile's share of the output
 * may move by 2^-12 of the largest |v|, which exceeds 2^-11 of an output
 * below 1 when |v| reaches 2). */
static double check_tolerance(const loom_graph *rg, const prog_check *c, double tol) {
    for (int j = 0; j < c->n_twin; j++) {
        const loom_node *node = &rg->nodes[c->twin[j]];
        if (node->op != LOOM_OP_ATTENTION && node->op != LOOM_OP_PAGED_ATTENTION) continue;
        for (int i = 1; i <= 2 && i < node->n_src; i++) {
            const loom_tensor *kv = &rg->tensors[node->src[i]].t;
            double t = kv->dtype == LOOM_BF16 ? 1.0 / 128 : kv->dtype == LOOM_F16 || kv->dtype == LOOM_I8 ? 1.0 / 256 : 0.0;
            int64_t keys = node->op == LOOM_OP_ATTENTION ? (kv->ndim >= 2 ? kv->shape[1] : 0) /* [B, S_kv, H, D] */
                                                         : ((const loom_paged_attention_attrs *)(const void *)node->attrs)->max_kv;
            if (keys >= 2048) t *= 2.0;
            if (t > tol) tol = t;
        }
    }
    return tol;
}

/* DESIGN.md's tolerance of a 16-bit activation dtype (f16 2^-8, bf16 2^-7), 0 for others. */
static double half_tol(loom_dtype dt) { return dt == LOOM_BF16 ? 1.0 / 128 : dt == LOOM_F16 ? 1.0 / 256 : 0.0; }

/* Runs the check of fused node c->node (just run) and records it. */
static loom_status run_check(loom_program *p, const prog_check *c, const loom_step *st, int *seen) {
    loom_executor *e = p->e;
    prog_graph *tw = &p->twin;
    loom_graph *rg = tw->g;
    const loom_graph *fg = p->main.g;
    const loom_node *fn = &fg->nodes[c->node];
    /* the reference arena, then the inputs at the fused values */
    prog_bind(tw, e->ref_arena);
    double wide_tol = 0.0; /* 2^-8 / 2^-7 when an input is 16-bit in the fused pass (activation_dtype) */
    for (int i = 0; i < c->n_inputs; i++) {
        loom_tensor *rt = &rg->tensors[c->inputs[i]].t;
        const loom_tensor *ft = &fg->tensors[c->inputs[i]].t;
        if (ft->dtype == rt->dtype) {
            rt->data = ft->data;
        } else { /* a 16-bit activation (activation_dtype) the twin holds in f32: widened into its own place */
            LOOM_RETURN_IF(rt->dtype != LOOM_F32 || (ft->dtype != LOOM_F16 && ft->dtype != LOOM_BF16) ||
                               !rt->data || loom_tensor_nelem(rt) != loom_tensor_nelem(ft),
                           LOOM_ERR_INTERNAL, "checkpoint: input %s is %s fused, %s unfused", rt->name,
                           loom_dtype_name(ft->dtype), loom_dtype_name(rt->dtype));
            const uint16_t *h = ft->data;
            float *w = rt->data;
            for (int64_t j = 0, n = loom_tensor_nelem(rt); j < n; j++)
                w[j] = ft->dtype == LOOM_F16 ? loom_f16_to_f32(h[j]) : loom_bf16_to_f32(h[j]);
            if (half_tol(ft->dtype) > wide_tol) wide_tol = half_tol(ft->dtype);
        }
    }
    for (int i = 0; i < rg->n_tensors; i++) {
        loom_gtensor *t = &rg->tensors[i];
        if (t->kind == LOOM_TK_VIEW) t->t.data = (char *)rg->tensors[t->view_of].t.data + t->view_offset;
    }
    kv_walk(rg, c, save_row, e->kv_save);
    loom_status s = LOOM_OK;
    for (int j = 0; j < c->n_twin && s == LOOM_OK;) { /* runs of consecutive nodes at once */
        int k = j;
        while (k + 1 < c->n_twin && c->twin[k + 1] == c->twin[k] + 1) k++;
        s = prog_exec(p, tw, c->twin[j], c->twin[k], 0, st->batch);
        j = k + 1;
    }
    double tol = check_tolerance(rg, c, loom_fusion_rules_checkpoint_tol(e->rules));
    if (wide_tol > tol) tol = wide_tol;
    kv_cmp kc = {.rg = rg, .saved = e->kv_save, .tol = tol};
    if (s == LOOM_OK) kv_walk(rg, c, cmp_row, &kc);
    kv_walk(rg, c, restore_row, e->kv_save);
    LOOM_TRY(s);
    /* the outputs the reference computes (not the cache views: compared above) */
    diff d = kc.d;
    int outs[1 + LOOM_MAX_EXTRA_DST], n_out = 0;
    outs[n_out++] = fn->dst;
    for (int i = 0; i < fn->n_dst_extra; i++) outs[n_out++] = fn->dst_extra[i];
    const char *what = rg->tensors[fn->dst].t.name;
    double cs_tol_seen = 0.0;
    for (int o = 0; o < n_out; o++) {
        int id = outs[o], prod = id < rg->n_tensors ? producer_of(rg, id) : -1;
        if (prod < 0 || is_kv(&rg->nodes[prod])) continue;
        const loom_tensor *ft = &fg->tensors[id].t, *rt = &rg->tensors[id].t;
        /* a 16-bit output (q under activation_dtype) against the reference's f32: one rounding
         * step of its dtype allowed, at that dtype's tolerance */
        double otol = half_tol(ft->dtype) > tol ? half_tol(ft->dtype) : tol;
        if ((ft->dtype != LOOM_F32 && otol == 0.0) || rt->dtype != LOOM_F32 || !loom_tensor_is_contiguous(ft) ||
            !loom_tensor_is_contiguous(rt) || loom_tensor_nelem(ft) != loom_tensor_nelem(rt))
            continue;
        if (otol > cs_tol_seen) cs_tol_seen = otol;
        int64_t n = loom_tensor_nelem(rt);
        diff one = {0};
        for (int64_t i = 0; i < n; i++) diff_add(&one, elem(ft->data, ft->dtype, i), ((const float *)rt->data)[i], otol, 0.0);
        if (one.max_rel > d.max_rel || (one.bad && !d.bad)) what = rt->name;
        if (one.max_abs > d.max_abs) d.max_abs = one.max_abs;
        if (one.max_rel > d.max_rel) d.max_rel = one.max_rel;
        d.bad |= one.bad;
    }
    loom_checkpoint_stat *cs = &e->ckpt[c->stat];
    if (!(seen[c->stat] & 1)) seen[c->stat] |= 1, cs->runs++; /* a run: a step that checked the layer */
    if (cs_tol_seen > tol) tol = cs_tol_seen; /* reported: the widest tolerance the check applied */
    if (tol > cs->tol) cs->tol = tol;
    if (d.max_abs > cs->max_abs) cs->max_abs = d.max_abs;
    if (d.max_rel > cs->max_rel) cs->max_rel = d.max_rel;
    if (!d.bad) return LOOM_OK;
    int first = 0;
    if (!(seen[c->stat] & 2)) seen[c->stat] |= 2, first = ++cs->failed_runs == 1;
    const char *op = loom_op_get(fn->op)->name;
    int action = e->ckpt_action >= 0 ? e->ckpt_action : (int)loom_fusion_rules_checkpoint_action(e->rules);
    if (action == LOOM_CHECKPOINT_FAIL)
        return loom_set_error(LOOM_ERR_INTERNAL,
                              "checkpoint %s: fused op %s (%s) differs from its unfused decomposition by %.3g "
                              "(relative %.3g > tolerance %.3g)", cs->name, op, what, d.max_abs, d.max_rel, tol);
    if (first)
        fprintf(stderr, "loom: warning: checkpoint %s: fused op %s (%s) differs from its unfused decomposition by "
                        "%.3g (relative %.3g > tolerance %.3g)\n", cs->name, op, what, d.max_abs, d.max_rel, tol);
    return LOOM_OK;
}

loom_status prog_checkpoints_exec(loom_program *p, const loom_step *st, int dump) {
    loom_executor *e = p->e;
    const loom_graph *fg = p->main.g;
    prog_apply_step(e, &p->twin, e->ref_arena, st);
    prog_count_phases(&p->twin, e->n_threads, e->invariant);
    int *seen = p->seen; /* per stat, this step: 1 checked, 2 failed */
    for (int i = 0; i < p->n_checks; i++) seen[p->checks[i].stat] = 0;
    loom_status s = LOOM_OK;
    int next = 0;
    for (int i = 0; i <= p->n_checks && s == LOOM_OK; i++) {
        int upto = i < p->n_checks ? p->checks[i].node : fg->n_nodes - 1;
        if (upto >= next) s = prog_exec(p, &p->main, next, upto, dump, st->batch);
        next = upto + 1;
        if (s == LOOM_OK && i < p->n_checks) s = run_check(p, &p->checks[i], st, seen);
    }
    p->twin.bound = 0; /* bound per check above: bind afresh next time */
    return s;
}
