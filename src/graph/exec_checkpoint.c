/*
 * fused_with_checkpoints: after the fused graph ran, each layer of the
 * primitive graph (and the head, which yields the logits) is run again,
 * unfused, from the values the fused graph produced at the layer's inputs, and
 * the layer's output is compared with the fused output. Errors are therefore
 * per layer (not accumulated over layers). K/V cache rows that a reference
 * layer writes are saved before and restored after, so the fused results stay
 * the model's state.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "graph/exec.h"

/* The layer of the node producing tensor id, or -1000 (no layer) for none. */
static int producer_layer(const loom_graph *g, int id) {
    int p = g->tensors[id].producer;
    return p >= 0 ? g->nodes[p].layer : -1000;
}

void loom_exec_keep_layer_values(loom_graph *fg, const loom_graph *g) {
    for (int n = 0; n < g->n_nodes; n++)
        for (int i = 0; i < g->nodes[n].n_src; i++) {
            int s = loom_graph_storage(g, g->nodes[n].src[i]);
            if (g->tensors[s].kind == LOOM_TK_INTERMEDIATE && producer_layer(g, s) != g->nodes[n].layer)
                fg->tensors[s].is_output = 1;
        }
    fg->planned = 0;
}

static loom_checkpoint_stat *stat_for(loom_executor *e, int layer, const char *name) {
    for (int i = 0; i < e->n_ckpt; i++)
        if (e->ckpt[i].layer == layer) return &e->ckpt[i];
    if (e->n_ckpt == e->cap_ckpt) {
        int cap = e->cap_ckpt ? 2 * e->cap_ckpt : 16;
        loom_checkpoint_stat *p = realloc(e->ckpt, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        e->ckpt = p, e->cap_ckpt = cap;
    }
    loom_checkpoint_stat *c = &e->ckpt[e->n_ckpt++];
    memset(c, 0, sizeof *c);
    c->layer = layer;
    snprintf(c->name, sizeof c->name, "%s", name);
    return c;
}

/* Saves (save = 1) or restores the cache rows the kv_append nodes of layer write
 * (and, for an i8 cache, the rows of its scale store). */
static loom_status kv_rows(loom_executor *e, loom_graph *rg, int layer, int save) {
    size_t off = 0;
    for (int n = 0; n < rg->n_nodes; n++) {
        const loom_node *node = &rg->nodes[n];
        if (node->layer != layer || node->op != LOOM_OP_KV_APPEND) continue;
        int pos = ((const loom_kv_append_attrs *)(const void *)node->attrs)->pos;
        size_t rows = (size_t)rg->tensors[node->src[1]].t.shape[0];
        for (int i = 0; i < node->n_src; i += 2) { /* src 0: the cache, src 2: its scales */
            const loom_tensor *store = &rg->tensors[node->src[i]].t;
            size_t row = (size_t)store->stride[0] * loom_dtype_size(store->dtype), bytes = row * rows;
            char *base = (char *)store->data + row * (size_t)pos;
            if (save && off + bytes > e->kv_save_cap) {
                unsigned char *p = realloc(e->kv_save, off + bytes);
                LOOM_RETURN_IF(!p, LOOM_ERR_NOMEM, "checkpoints: out of memory");
                e->kv_save = p, e->kv_save_cap = off + bytes;
            }
            if (save) memcpy(e->kv_save + off, base, bytes);
            else memcpy(base, e->kv_save + off, bytes);
            off += bytes;
        }
    }
    return LOOM_OK;
}

static void compare(const loom_tensor *f, const loom_tensor *r, double tol, double *max_abs,
                    double *max_rel, int *bad) {
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

/* The tolerance of layer [n, last] of rg: the rules' (the f32 paths'), or
 * DESIGN.md's for f16 / bf16 where the layer's attention reads a cache of that
 * dtype (the fused decode kernel rounds P to bf16 for a bf16 V, the unfused
 * kernel in its own tiling): 2^-8 / 2^-7, twice that over 2048 keys or more. */
static double layer_tolerance(const loom_graph *rg, int n, int last, double tol) {
    for (int k = n; k <= last; k++) {
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

loom_status loom_exec_checkpoints(loom_executor *e, loom_graph *g) {
    const loom_fusion_rules *rules = e->rules;
    extern int loom_fusion_rules_checkpoints(const loom_fusion_rules *r, int *layers, int *logits);
    int want_layers = 1, want_logits = 1;
    loom_fusion_rules_checkpoints(rules, &want_layers, &want_logits);
    const double rules_tol = loom_fusion_rules_checkpoint_tol(rules);
    int action = e->ckpt_action >= 0 ? e->ckpt_action : (int)loom_fusion_rules_checkpoint_action(rules);
    if (!e->rg) LOOM_TRY(loom_graph_init(&e->rg));
    loom_graph *rg = e->rg;
    LOOM_TRY(loom_graph_copy(rg, g));
    LOOM_TRY(loom_graph_plan(rg));
    int prev_layer = -1000;
    for (int n = 0; n < rg->n_nodes; n++) {
        int layer = rg->nodes[n].layer;
        if (layer == prev_layer || layer == LOOM_LAYER_PRE) continue;
        prev_layer = layer;
        if (layer == LOOM_LAYER_POST ? !want_logits : !want_layers) continue;
        int last = n;
        while (last + 1 < rg->n_nodes && rg->nodes[last + 1].layer == layer) last++;
        double tol = layer_tolerance(rg, n, last, rules_tol);
        /* bind to the reference arena, then point the layer's inputs at the fused values */
        LOOM_TRY(loom_exec_ensure(e, &e->ref_arena, &e->ref_arena_cap, rg->arena_bytes));
        loom_exec_bind(rg, e->ref_arena);
        for (int k = n; k <= last; k++)
            for (int i = 0; i < rg->nodes[k].n_src; i++) {
                int s = loom_graph_storage(rg, rg->nodes[k].src[i]);
                if (rg->tensors[s].kind == LOOM_TK_INTERMEDIATE && producer_layer(rg, s) != layer)
                    rg->tensors[s].t.data = e->fg->tensors[s].t.data;
            }
        loom_exec_bind_views(rg);
        LOOM_TRY(kv_rows(e, rg, layer, 1));
        loom_status s = loom_exec_graph(e, rg, &e->ref_arena, &e->ref_arena_cap, 1, layer);
        LOOM_TRY(kv_rows(e, rg, layer, 0));
        LOOM_TRY(s);
        int out = rg->nodes[last].dst;
        char name[LOOM_NAME_MAX];
        if (layer == LOOM_LAYER_POST) snprintf(name, sizeof name, "logits");
        else snprintf(name, sizeof name, "L%d output", layer);
        loom_checkpoint_stat *c = stat_for(e, layer, name);
        LOOM_RETURN_IF(!c, LOOM_ERR_NOMEM, "checkpoints: out of memory");
        double ma, mr;
        int bad;
        compare(&e->fg->tensors[out].t, &rg->tensors[out].t, tol, &ma, &mr, &bad);
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
                                      name, rg->tensors[out].t.name, ma, mr, tol);
            if (c->failed_runs == 1)
                fprintf(stderr, "loom: warning: checkpoint %s (%s): fused differs from unfused by %.3g "
                                "(relative %.3g > tolerance %.3g)\n",
                        name, rg->tensors[out].t.name, ma, mr, tol);
        }
    }
    return LOOM_OK;
}

void loom_executor_print_checkpoints(const loom_executor *e, FILE *f) {
    fprintf(f, "checkpoints (fused vs unfused from the same inputs; tolerance relative to max(1, |ref|): "
               "%.3g, or f16's / bf16's where attention reads such a KV cache):\n",
            loom_fusion_rules_checkpoint_tol(e->rules));
    fprintf(f, "  %-12s %6s %12s %12s %10s %8s\n", "checkpoint", "runs", "max abs", "max rel", "tolerance",
            "beyond");
    for (int i = 0; i < e->n_ckpt; i++)
        fprintf(f, "  %-12s %6d %12.3e %12.3e %10.3g %8d\n", e->ckpt[i].name, e->ckpt[i].runs,
                e->ckpt[i].max_abs, e->ckpt[i].max_rel, e->ckpt[i].tol, e->ckpt[i].failed_runs);
}
