/*
 * fused_with_checkpoints: a program keeps its graph's unfused twin (the same
 * trace before fusion: fusion keeps the ids of every value visible outside a
 * match, so both name the same values alike). After the fused pass, each
 * layer of the twin (and the head, which yields the logits) runs again,
 * unfused, from the values the fused pass produced at the layer's inputs, and
 * the layer's output is compared with the fused one. Errors are therefore per
 * layer, not accumulated over layers. K/V cache rows a reference layer writes
 * are saved before and restored after, so the fused results stay the model's
 * state. Everything is sized at compile time.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "graph/program_internal.h"

/* The layer of the node producing tensor id, or -1000 (no layer) for none. */
static int producer_layer(const loom_graph *g, int id) {
    int p = g->tensors[id].producer;
    return p >= 0 ? g->nodes[p].layer : -1000;
}

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
    else snprintf(c->name, sizeof c->name, "L%d output", layer);
    return e->n_ckpt++;
}

/* Bytes of the cache rows (and i8 scale rows) the kv_append nodes in
 * [first, last] write for n rows (n < 0: the rows they were built with). */
static size_t kv_rows_bytes(const loom_graph *g, int first, int last, int64_t rows) {
    size_t total = 0;
    for (int k = first; k <= last; k++) {
        const loom_node *node = &g->nodes[k];
        if (node->op != LOOM_OP_KV_APPEND && node->op != LOOM_OP_KV_WRITE) continue;
        int64_t n = rows >= 0 ? rows : g->tensors[node->src[1]].t.shape[0];
        int scale = node->op == LOOM_OP_KV_WRITE ? 3 : 2;
        for (int i = 0; i < node->n_src; i = i ? node->n_src : scale) { /* the cache, then its scales */
            const loom_tensor *store = &g->tensors[node->src[i]].t;
            total += (size_t)store->stride[0] * loom_dtype_size(store->dtype) * (size_t)n;
        }
    }
    return total;
}

loom_status prog_checkpoints_compile(loom_program *p) {
    loom_executor *e = p->e;
    const loom_graph *rg = p->twin.g;
    int n_layers = 0;
    for (int n = 0, prev = -1000; n < rg->n_nodes; n++)
        if (rg->nodes[n].layer != prev) prev = rg->nodes[n].layer, n_layers++;
    p->layers = calloc((size_t)n_layers + 1, sizeof *p->layers);
    LOOM_RETURN_IF(!p->layers, LOOM_ERR_NOMEM, "checkpoints: out of memory");
    size_t kv_bytes = 0;
    const int64_t rows = p->is_static ? -1 : p->max_rows;
    for (int n = 0; n < rg->n_nodes;) {
        prog_layer *L = &p->layers[p->n_layers];
        L->layer = rg->nodes[n].layer;
        L->first = n;
        while (n + 1 < rg->n_nodes && rg->nodes[n + 1].layer == L->layer) n++;
        L->last = n++;
        if (L->layer == LOOM_LAYER_PRE) continue;
        L->inputs = malloc(sizeof *L->inputs * (size_t)(8 * (L->last - L->first + 1)));
        LOOM_RETURN_IF(!L->inputs, LOOM_ERR_NOMEM, "checkpoints: out of memory");
        for (int k = L->first; k <= L->last; k++)
            for (int i = 0; i < rg->nodes[k].n_src; i++) {
                int s = loom_graph_storage(rg, rg->nodes[k].src[i]);
                if (rg->tensors[s].kind == LOOM_TK_INTERMEDIATE && producer_layer(rg, s) != L->layer)
                    L->inputs[L->n_inputs++] = s;
            }
        L->stat = stat_for(e, L->layer);
        LOOM_RETURN_IF(L->stat < 0, LOOM_ERR_NOMEM, "checkpoints: out of memory");
        size_t b = kv_rows_bytes(rg, L->first, L->last, rows);
        if (b > kv_bytes) kv_bytes = b;
        p->n_layers++;
    }
    p->kv_save_bytes = kv_bytes;
    if (kv_bytes > e->kv_save_cap) {
        unsigned char *buf = realloc(e->kv_save, kv_bytes);
        LOOM_RETURN_IF(!buf, LOOM_ERR_NOMEM, "checkpoints: out of memory");
        e->kv_save = buf, e->kv_save_cap = kv_bytes;
        e->n_allocs++;
    }
    return LOOM_OK;
}

void prog_layers_free(loom_program *p) {
    for (int i = 0; i < p->n_layers; i++) free(p->layers[i].inputs);
    free(p->layers);
    p->layers = NULL;
    p->n_layers = 0;
}

/* Saves (save = 1) or restores the cache rows the kv_append and kv_write
 * nodes of a layer write (kv_append: rows pos.. of the cache; kv_write: the
 * slots its third input names), with their i8 scales. */
static void kv_rows(loom_executor *e, const loom_graph *rg, const prog_layer *L, int save) {
    size_t off = 0;
    for (int k = L->first; k <= L->last; k++) {
        const loom_node *node = &rg->nodes[k];
        int append = node->op == LOOM_OP_KV_APPEND;
        if (!append && node->op != LOOM_OP_KV_WRITE) continue;
        size_t rows = (size_t)rg->tensors[node->src[1]].t.shape[0];
        const loom_tensor *slots = append ? NULL : &rg->tensors[node->src[2]].t;
        int pos = append ? ((const loom_kv_append_attrs *)(const void *)node->attrs)->pos : 0;
        int scale = append ? 2 : 3;
        for (int i = 0; i < node->n_src; i = i ? node->n_src : scale) {
            const loom_tensor *store = &rg->tensors[node->src[i]].t;
            size_t row = (size_t)store->stride[0] * loom_dtype_size(store->dtype);
            for (size_t t = 0; t < rows; t++) {
                int64_t at = append ? pos + (int64_t)t : ((const int32_t *)slots->data)[t * (size_t)slots->stride[0]];
                if (at >= 0 && at < store->shape[0]) {
                    char *base = (char *)store->data + row * (size_t)at;
                    if (save) memcpy(e->kv_save + off, base, row);
                    else memcpy(base, e->kv_save + off, row);
                }
                off += row;
            }
        }
    }
}

static void compare(const loom_tensor *f, const loom_tensor *r, double tol, double *max_abs, double *max_rel,
                    int *bad) {
    int64_t n = loom_tensor_nelem(r);
    const float *fd = f->data, *rd = r->data;
    *max_abs = *max_rel = 0.0;
    *bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = fd[i], b = rd[i];
        if (isnan(a) || isnan(b) || isinf(a) || isinf(b)) {
            if (!(isnan(a) && isnan(b)) && a != b) *bad = 1, *max_abs = *max_rel = INFINITY;
            continue;
        }
        double d = fabs(a - b), rel = d / (fabs(b) > 1.0 ? fabs(b) : 1.0);
        if (d > *max_abs) *max_abs = d;
        if (rel > *max_rel) *max_rel = rel;
        if (rel > tol) *bad = 1;
    }
}

/* The tolerance of a layer: the rules' (the f32 paths'), or DESIGN.md's for
 * f16 / bf16 where the layer's attention reads a cache of that dtype (the
 * fused decode kernel rounds P to bf16 for a bf16 V, the unfused kernel in
 * its own tiling): 2^-8 / 2^-7, twice that over 2048 keys or more. */
static double layer_tolerance(const loom_graph *rg, const prog_layer *L, double tol) {
    for (int k = L->first; k <= L->last; k++) {
        const loom_node *node = &rg->nodes[k];
        if (node->op != LOOM_OP_ATTENTION) continue;
        for (int i = 1; i <= 2 && i < node->n_src; i++) {
            const loom_tensor *kv = &rg->tensors[node->src[i]].t;
            double t = kv->dtype == LOOM_BF16 ? 1.0 / 128 : kv->dtype == LOOM_F16 ? 1.0 / 256 : 0.0;
            if (kv->ndim >= 2 && kv->shape[1] >= 2048) t *= 2.0;  /* [B, S_kv, H, D] */
            if (t > tol) tol = t;
        }
    }
    return tol;
}

extern int loom_fusion_rules_checkpoints(const loom_fusion_rules *r, int *layers, int *logits);

loom_status prog_checkpoints_run(loom_program *p, const loom_step *st) {
    loom_executor *e = p->e;
    const loom_fusion_rules *rules = e->rules;
    int want_layers = 1, want_logits = 1;
    loom_fusion_rules_checkpoints(rules, &want_layers, &want_logits);
    const double rules_tol = loom_fusion_rules_checkpoint_tol(rules);
    int action = e->ckpt_action >= 0 ? e->ckpt_action : (int)loom_fusion_rules_checkpoint_action(rules);
    prog_graph *tw = &p->twin;
    loom_graph *rg = tw->g;
    const loom_graph *fg = p->main.g;
    prog_apply_step(e, tw, e->ref_arena, st);
    prog_count_phases(tw, e->n_threads);
    for (int li = 0; li < p->n_layers; li++) {
        const prog_layer *L = &p->layers[li];
        if (L->layer == LOOM_LAYER_PRE || (L->layer == LOOM_LAYER_POST ? !want_logits : !want_layers)) continue;
        /* the reference arena, then the layer's inputs at the fused values */
        prog_bind(tw, e->ref_arena);
        for (int i = 0; i < L->n_inputs; i++) rg->tensors[L->inputs[i]].t.data = fg->tensors[L->inputs[i]].t.data;
        for (int i = 0; i < rg->n_tensors; i++) {
            loom_gtensor *t = &rg->tensors[i];
            if (t->kind == LOOM_TK_VIEW) t->t.data = (char *)rg->tensors[t->view_of].t.data + t->view_offset;
        }
        kv_rows(e, rg, L, 1);
        loom_status s = prog_exec(p, tw, L->first, L->last, 0, st->batch);
        kv_rows(e, rg, L, 0);
        LOOM_TRY(s);
        int out = rg->nodes[L->last].dst;
        double tol = layer_tolerance(rg, L, rules_tol);
        loom_checkpoint_stat *c = &e->ckpt[L->stat];
        double ma, mr;
        int bad;
        compare(&fg->tensors[out].t, &rg->tensors[out].t, tol, &ma, &mr, &bad);
        c->runs++;
        if (tol > c->tol) c->tol = tol;
        if (ma > c->max_abs) c->max_abs = ma;
        if (mr > c->max_rel) c->max_rel = mr;
        if (bad) {
            c->failed_runs++;
            if (action == LOOM_CHECKPOINT_FAIL)
                return loom_set_error(LOOM_ERR_INTERNAL,
                                      "checkpoint %s (%s): fused differs from unfused by %.3g "
                                      "(relative %.3g > tolerance %.3g)",
                                      c->name, rg->tensors[out].t.name, ma, mr, tol);
            if (c->failed_runs == 1)
                fprintf(stderr, "loom: warning: checkpoint %s (%s): fused differs from unfused by %.3g "
                                "(relative %.3g > tolerance %.3g)\n",
                        c->name, rg->tensors[out].t.name, ma, mr, tol);
        }
    }
    tw->bound = 0; /* bound per layer above: bind afresh next time */
    return LOOM_OK;
}
