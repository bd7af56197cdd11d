/*
 * The fusion pass: finds each enabled rule's pattern in the graph and replaces
 * every match by one fused node.
 *
 * Matching follows data edges through reshape views: a pattern input naming an
 * earlier pattern node matches a graph input whose storage source is that
 * node's output; a `$variable` binds to any tensor and must then be the same
 * tensor wherever it appears. add and mul match their inputs in either order.
 * A match is accepted when the rule's conditions hold and every value that
 * leaves the match (read by a node outside it, or a graph output) is an output
 * of the fused node and is read only after the fused node's position (the
 * position of the match's last node). Tensor ids of such values are kept, so
 * the rest of the graph is untouched.
 */
#include "graph/fusion_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/status.h"

int fr_source(const loom_graph *g, int id) {
    while (id >= 0 && g->tensors[id].kind == LOOM_TK_VIEW && g->tensors[id].producer < 0)
        id = g->tensors[id].view_of;
    return id;
}

typedef struct fr_state {
    loom_graph *g;
    const loom_fusion_rules *rs;
    const fr_rule *rule;
    int *cons_start, *cons;      /* consumers of each source tensor (CSR) */
    int *out_src;                /* 1 where a graph output has this source */
    unsigned char *taken;        /* nodes already in a match of this pass */
    fr_match m;
    unsigned char *in_match;
} fr_state;

typedef struct fr_pending { int last; loom_node node; } fr_pending;

/* Working memory of one rule's pass (one block): the consumer index, the
 * match state and the pending fused nodes. */
typedef struct fr_mem {
    void *block;
    int *fill;
    fr_pending *pend;
} fr_mem;

static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }

static loom_status build_index(fr_state *st, fr_mem *mem) {
    loom_graph *g = st->g;
    int nt = g->n_tensors, nn = g->n_nodes, total = 0;
    for (int n = 0; n < nn; n++) total += g->nodes[n].n_src;
    size_t ti = up64(((size_t)nt + 1) * sizeof(int)), tc = up64(((size_t)total + 1) * sizeof(int));
    size_t nb = up64((size_t)nn + 1), np = up64(((size_t)nn + 1) * sizeof(fr_pending));
    unsigned char *w = mem->block = loom_alloc_aligned(3 * ti + tc + 2 * nb + np, 64);
    LOOM_RETURN_IF(!w, LOOM_ERR_NOMEM, "fusion: out of memory");
    st->cons_start = (int *)w, w += ti;
    st->out_src = (int *)w, w += ti;
    mem->fill = (int *)w, w += ti;
    st->cons = (int *)w, w += tc;
    st->taken = w, w += nb;
    st->in_match = w, w += nb;
    mem->pend = (fr_pending *)w;
    memset(st->cons_start, 0, ((size_t)nt + 1) * sizeof(int));
    memset(st->out_src, 0, ((size_t)nt + 1) * sizeof(int));
    memset(mem->fill, 0, ((size_t)nt + 1) * sizeof(int));
    memset(st->taken, 0, (size_t)nn + 1);
    memset(st->in_match, 0, (size_t)nn + 1);
    for (int n = 0; n < nn; n++)
        for (int i = 0; i < g->nodes[n].n_src; i++) st->cons_start[fr_source(g, g->nodes[n].src[i]) + 1]++;
    for (int t = 0; t < nt; t++) st->cons_start[t + 1] += st->cons_start[t];
    for (int n = 0; n < nn; n++)
        for (int i = 0; i < g->nodes[n].n_src; i++) {
            int s = fr_source(g, g->nodes[n].src[i]);
            st->cons[st->cons_start[s] + mem->fill[s]++] = n;
        }
    for (int t = 0; t < nt; t++)
        if (g->tensors[t].is_output) st->out_src[fr_source(g, t)] = 1;
    return LOOM_OK;
}

/* Does graph input id satisfy pattern reference ref? Binds unbound variables. */
static int input_ok(fr_state *st, int ref, int id) {
    const loom_graph *g = st->g;
    if (ref < FR_VAR_REF) return fr_source(g, id) == g->nodes[st->m.node[ref]].dst;
    int *v = &st->m.var[ref - FR_VAR_REF];
    if (*v < 0) {
        *v = id;
        return 1;
    }
    return *v == id || fr_source(g, *v) == fr_source(g, id);
}

static int node_ok(fr_state *st, int i, int n) {
    const fr_pnode *pn = &st->rule->nodes[i];
    const loom_node *node = &st->g->nodes[n];
    if (st->taken[n] || st->in_match[n] || (int)node->op != pn->op || node->n_src != pn->n_in) return 0;
    int saved[FR_MAX_VARS];
    memcpy(saved, st->m.var, sizeof saved);
    st->m.node[i] = n;
    int ok = 1;
    for (int k = 0; k < pn->n_in && ok; k++) ok = input_ok(st, pn->in[k], node->src[k]);
    if (!ok && pn->n_in == 2 && (pn->op == LOOM_OP_ADD || pn->op == LOOM_OP_MUL)) {
        memcpy(st->m.var, saved, sizeof saved);
        ok = input_ok(st, pn->in[0], node->src[1]) && input_ok(st, pn->in[1], node->src[0]);
    }
    if (!ok) memcpy(st->m.var, saved, sizeof saved);
    return ok;
}

static int match_from(fr_state *st, int i);

static int try_node(fr_state *st, int i, int n) {
    int saved[FR_MAX_VARS];
    memcpy(saved, st->m.var, sizeof saved);
    if (!node_ok(st, i, n)) return 0;
    st->in_match[n] = 1;
    if (match_from(st, i + 1)) return 1;
    st->in_match[n] = 0;
    memcpy(st->m.var, saved, sizeof saved);
    return 0;
}

static int match_from(fr_state *st, int i) {
    const fr_rule *r = st->rule;
    if (i == r->n_nodes) return 1;
    const fr_pnode *pn = &r->nodes[i];
    /* candidates: consumers of an input that is already known */
    int src_tensor = -1;
    for (int k = 0; k < pn->n_in && src_tensor < 0; k++) {
        int ref = pn->in[k];
        if (ref < FR_VAR_REF) src_tensor = st->g->nodes[st->m.node[ref]].dst;
        else if (st->m.var[ref - FR_VAR_REF] >= 0) src_tensor = fr_source(st->g, st->m.var[ref - FR_VAR_REF]);
    }
    if (src_tensor < 0) return 0;  /* the parser guarantees connectivity */
    for (int c = st->cons_start[src_tensor]; c < st->cons_start[src_tensor + 1]; c++)
        if (try_node(st, i, st->cons[c])) return 1;
    return 0;
}

static int ref_tensor(const fr_state *st, int ref) {
    return ref < FR_VAR_REF ? st->g->nodes[st->m.node[ref]].dst : st->m.var[ref - FR_VAR_REF];
}

/* The rules' shape ranges: the only conditions that can change between graphs
 * of the same structure (view lengths). */
static int dims_hold(const fr_state *st) {
    const fr_rule *r = st->rule;
    const loom_graph *g = st->g;
    for (int i = 0; i < r->n_dims; i++) {
        const loom_tensor *t = &g->tensors[ref_tensor(st, r->dims[i].ref)].t;
        int d = r->dims[i].dim < 0 ? t->ndim + r->dims[i].dim : r->dims[i].dim;
        if (d < 0 || d >= t->ndim || t->shape[d] < r->dims[i].min || t->shape[d] > r->dims[i].max) return 0;
    }
    return 1;
}

/* The rules' other conditions: dtypes and single use, fixed by the structure. */
static int structure_holds(const fr_state *st) {
    const fr_rule *r = st->rule;
    const loom_graph *g = st->g;
    for (int i = 1; i < r->n_same_dtype; i++)
        if (g->tensors[ref_tensor(st, r->same_dtype[i])].t.dtype !=
            g->tensors[ref_tensor(st, r->same_dtype[0])].t.dtype)
            return 0;
    if (r->single_use)
        for (int i = 0; i < r->n_nodes; i++) {
            int d = g->nodes[st->m.node[i]].dst, inside = 0, used_inside = 0;
            for (int j = 0; j < r->n_nodes; j++)
                for (int k = 0; k < r->nodes[j].n_in; k++)
                    if (r->nodes[j].in[k] == i) used_inside = 1;
            if (!used_inside) continue;
            for (int c = st->cons_start[d]; c < st->cons_start[d + 1]; c++) inside += st->in_match[st->cons[c]];
            if (inside != st->cons_start[d + 1] - st->cons_start[d] || st->out_src[d]) return 0;
        }
    return 1;
}

/* Every value leaving the match is a fused output and is read after `last`. */
static int escapes_ok(const fr_state *st, const fr_fused *f, int last) {
    const loom_graph *g = st->g;
    for (int i = 0; i < st->rule->n_nodes; i++) {
        int d = g->nodes[st->m.node[i]].dst, is_out = d == f->dst;
        for (int e = 0; e < f->n_extra; e++) is_out |= d == f->extra[e];
        for (int c = st->cons_start[d]; c < st->cons_start[d + 1]; c++) {
            int n = st->cons[c];
            if (st->in_match[n]) continue;
            if (!is_out || n < last) return 0;
        }
        if (st->out_src[d] && !is_out) return 0;
    }
    return 1;
}

/* Op `op` with attributes attrs accepts tensors src (ids) and yields tensor dst's dtype and shape. */
static int infer_gives(const loom_graph *g, loom_op op, const int *src_ids, int n_src, const void *attrs, int dst) {
    const loom_op_info *info = loom_op_get(op);
    if (!info || n_src < info->n_src_min || n_src > info->n_src_max) return 0;
    const loom_tensor *src[LOOM_MAX_SRC] = {0};
    for (int i = 0; i < n_src; i++) src[i] = &g->tensors[src_ids[i]].t;
    loom_tensor want;
    memset(&want, 0, sizeof want);
    if (info->infer(src, n_src, attrs, &want) != LOOM_OK) {
        loom_clear_error();
        return 0;
    }
    const loom_tensor *d = &g->tensors[dst].t;
    if (want.dtype != d->dtype || want.ndim != d->ndim) return 0;
    for (int i = 0; i < d->ndim; i++)
        if (want.shape[i] != d->shape[i]) return 0;
    return 1;
}

/* The fused op accepts these inputs and yields the dst the pattern had. */
static int fused_valid(const loom_graph *g, const fr_fused *f) {
    return infer_gives(g, f->op, f->src, f->n_src, f->attrs, f->dst);
}

static int by_last(const void *a, const void *b) {
    return ((const fr_pending *)a)->last - ((const fr_pending *)b)->last;
}

/* Rebuilds the node list in place: unmatched nodes in order, each fused node
 * at the position of its match's last node (pend is sorted by it here);
 * producers recomputed. The write index never passes the read index: a fused
 * node goes where the last node of its match was, and its match took that
 * node (one fused node per last node, since a node is taken once; checked).
 * Copying the node list out and back was most of a decode step's fusion time. */
static loom_status rewrite(loom_graph *g, const unsigned char *taken, fr_pending *pend, int n_pend) {
    qsort(pend, (size_t)n_pend, sizeof *pend, by_last);
    for (int p = 0; p < n_pend; p++)
        LOOM_RETURN_IF(!taken[pend[p].last] || (p && pend[p].last == pend[p - 1].last), LOOM_ERR_INTERNAL,
                       "fusion: fused nodes end at node %d, untaken or twice", pend[p].last);
    int out = 0, p = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        if (!taken[n]) {
            if (out != n) g->nodes[out] = g->nodes[n];
            out++;
        }
        if (p < n_pend && pend[p].last == n) g->nodes[out++] = pend[p++].node;
    }
    g->n_nodes = out;
    loom_graph_set_producers(g);
    return LOOM_OK;
}

/* Turns an accepted match into a pending fused node (and its hidden buffer,
 * if the builder asks for one). Returns 0 when that is impossible; *s is set
 * on an error of the graph. */
static int commit_match(loom_graph *g, fr_state *st, int ri, int last, fr_fused *fp, fr_pending *pend,
                        int *n_pend, loom_status *s) {
    fr_fused f = *fp;
    const fr_rule *r = st->rule;
    for (int i = 0; i < f.n_hidden; i++) {
        loom_tensor h;
        const int64_t shape[2] = {f.hidden_rows[i], f.hidden_cols[i]};
        if (loom_tensor_init(&h, LOOM_F32, 2, shape, NULL) != LOOM_OK) return 0;
        size_t nl = strnlen(g->tensors[f.dst].t.name, 40); /* "<name, 40 at most>.hidden[i]" */
        memcpy(h.name, g->tensors[f.dst].t.name, nl);
        memcpy(h.name + nl, ".hidden", sizeof ".hidden");
        if (i > 0) h.name[nl + 7] = (char)('0' + i), h.name[nl + 8] = '\0';
        int id = loom_graph_intermediate(g, &h);
        if (id < 0 || f.n_extra >= LOOM_MAX_EXTRA_DST) {
            *s = loom_graph_status(g);
            return 0;
        }
        f.extra[f.n_extra++] = id;
    }
    loom_node *fn = &pend[*n_pend].node;
    memset(fn, 0, sizeof *fn);
    fn->op = f.op;
    fn->n_src = f.n_src;
    memcpy(fn->src, f.src, sizeof fn->src);
    fn->dst = f.dst;
    fn->n_dst_extra = f.n_extra;
    memcpy(fn->dst_extra, f.extra, sizeof fn->dst_extra);
    fn->layer = g->nodes[last].layer;
    fn->rule = ri;
    const loom_op_info *info = loom_op_get(f.op);
    if (info->attr_size) {
        memcpy(fn->attrs, f.attrs, info->attr_size);
        fn->has_attrs = 1;
    }
    pend[(*n_pend)++].last = last;
    for (int i = 0; i < r->n_nodes; i++) st->taken[st->m.node[i]] = 1;
    return 1;
}

/* One rule over the whole graph: every match that holds becomes a fused node. */
static loom_status apply_rule(loom_graph *g, const loom_fusion_rules *rs, int ri, int *fired) {
    fr_state st = {.g = g, .rs = rs, .rule = &rs->rules[ri]};
    fr_mem mem = {0};
    *fired = 0;
    loom_status bs = build_index(&st, &mem);
    if (bs != LOOM_OK) {
        loom_free_aligned(mem.block);
        return bs;
    }
    fr_pending *pend = mem.pend;
    int n_pend = 0;
    loom_status s = LOOM_OK;
    const fr_rule *r = st.rule;
    loom_fusion_hw hw = loom_fusion_rules_hw(rs);
    int64_t max_block = rs->max_fusion_block_size;
    int n0 = g->n_nodes;  /* nodes made during this rule (ffn's h) are not matched */
    for (int n = 0; n < n0 && s == LOOM_OK; n++) {
        for (int i = 0; i < FR_MAX_VARS; i++) st.m.var[i] = -1;
        if (!try_node(&st, 0, n)) continue;
        int ok = dims_hold(&st) && structure_holds(&st);
        int last = -1;
        for (int i = 0; i < r->n_nodes; i++)
            if (st.m.node[i] > last) last = st.m.node[i];
        fr_fused f;
        memset(&f, 0, sizeof f);
        fr_ctx ctx = {.g = g, .rule = r, .m = &st.m, .hw = hw, .max_block = max_block};
        if (ok) ok = r->builder->build(&ctx, &f);
        if (ok) ok = fused_valid(g, &f);
        if (ok) ok = escapes_ok(&st, &f, last);
        if (ok) ok = commit_match(g, &st, ri, last, &f, pend, &n_pend, &s);
        if (ok) (*fired)++;
        for (int i = 0; i < r->n_nodes; i++) st.in_match[st.m.node[i]] = 0;
    }
    if (s == LOOM_OK && n_pend) s = rewrite(g, st.taken, pend, n_pend);
    loom_free_aligned(mem.block);
    return s;
}

static void report_begin(loom_fusion_report *rep, const loom_graph *g, const loom_fusion_rules *r) {
    if (!rep) return;
    memset(rep, 0, sizeof *rep);
    rep->n_rules = r->n_rules;
    rep->nodes_before = g->n_nodes;
}

static void report_rule(loom_fusion_report *rep, const loom_fusion_rules *r, int i, int fired) {
    if (!rep) return;
    snprintf(rep->rules[i].name, sizeof rep->rules[i].name, "%s", r->rules[i].name);
    snprintf(rep->rules[i].fused_op, sizeof rep->rules[i].fused_op, "%s", r->rules[i].fused_op);
    rep->rules[i].fired = fired;
    rep->rules[i].enabled = r->rules[i].enabled;
}

/* Every reader of storage `root` (nodes after `producer`) still accepts its
 * inputs and yields the output it had. */
static int readers_hold(const loom_graph *g, const int *roots, int root, int producer) {
    for (int m = producer + 1; m < g->n_nodes; m++) {
        const loom_node *nd = &g->nodes[m];
        int reads = 0;
        for (int i = 0; i < nd->n_src; i++) reads |= nd->src[i] >= 0 && roots[nd->src[i]] == root;
        if (reads && !infer_gives(g, nd->op, nd->src, nd->n_src, nd->has_attrs ? nd->attrs : NULL, nd->dst))
            return 0;
    }
    return 1;
}

/* Sets the dtype of storage `root` and of its views (their byte offsets
 * scaled to the new element size). */
static void retype(loom_graph *g, const int *roots, int root, loom_dtype from, loom_dtype to) {
    for (int t = 0; t < g->n_tensors; t++) {
        if (roots[t] != root) continue;
        g->tensors[t].t.dtype = to;
        g->tensors[t].view_offset = g->tensors[t].view_offset / loom_dtype_size(from) * loom_dtype_size(to);
    }
}

/* The rules' activation_dtype (16 bits): every qkv_rope's q, f32 in the
 * graph the rules matched, is stored at that dtype where each node that
 * reads it takes it (its infer run again gives the output it had:
 * attention_linear and incre_attention_linear do, and so do
 * flash_attention_score and incre_flash_attention, whose builder states
 * their f32 output (out_f32)
 * rather than letting it follow q; paged_attention takes f32 q only, so the
 * batch engine's q stays f32). qkv_rope computes q in f32 and rounds it once as it
 * stores it; the attention kernels widen each q row as they load it. */
static loom_status narrow_activations(loom_graph *g, loom_dtype dt) {
    if (dt == LOOM_F32) return LOOM_OK;
    int *roots = malloc((size_t)(g->n_tensors > 0 ? g->n_tensors : 1) * sizeof *roots);
    LOOM_RETURN_IF(!roots, LOOM_ERR_NOMEM, "fusion: out of memory");
    for (int t = 0; t < g->n_tensors; t++) roots[t] = loom_graph_storage(g, t);
    for (int n = 0; n < g->n_nodes; n++) {
        loom_node *qn = &g->nodes[n];
        if (qn->op != LOOM_OP_QKV_ROPE || !qn->has_attrs) continue;
        int root = roots[qn->dst];
        const loom_gtensor *q = &g->tensors[root];
        if (root != qn->dst || q->t.dtype != LOOM_F32 || q->kind != LOOM_TK_INTERMEDIATE) continue;
        int keep = 0; /* a graph output (q or a view of it) stays as the caller reads it */
        for (int t = 0; t < g->n_tensors; t++) keep |= roots[t] == root && g->tensors[t].is_output;
        if (keep) continue;
        retype(g, roots, root, LOOM_F32, dt);
        loom_qkv_rope_attrs a;
        memcpy(&a, qn->attrs, sizeof a);
        a.q_dtype = dt;
        if (infer_gives(g, qn->op, qn->src, qn->n_src, &a, qn->dst) && readers_hold(g, roots, root, n)) {
            memcpy(qn->attrs, &a, sizeof a);
        } else {
            retype(g, roots, root, dt, LOOM_F32);
        }
    }
    free(roots);
    return LOOM_OK;
}

static loom_status apply_all(loom_graph *g, const loom_fusion_rules *r, loom_fusion_report *rep) {
    report_begin(rep, g, r);
    for (int i = 0; i < r->n_rules; i++) {
        int fired = 0;
        if (r->rules[i].enabled) LOOM_TRY(apply_rule(g, r, i, &fired));
        report_rule(rep, r, i, fired);
    }
    LOOM_TRY(narrow_activations(g, r->act_dtype));
    g->fused = 1;
    if (rep) rep->nodes_after = g->n_nodes;
    return LOOM_OK;
}

loom_status loom_fusion_apply(loom_graph *g, const loom_fusion_rules *r, loom_fusion_report *rep) {
    LOOM_RETURN_IF(!g || !r, LOOM_ERR_INVALID_ARG, "fusion_apply: NULL argument");
    LOOM_TRY(loom_graph_status(g));
    return apply_all(g, r, rep);
}

void loom_fusion_report_print(FILE *f, const loom_fusion_report *rep) {
    fprintf(f, "fusion: %d nodes -> %d nodes\n", rep->nodes_before, rep->nodes_after);
    for (int i = 0; i < rep->n_rules; i++)
        fprintf(f, "  %-20s -> %-24s %s fired %d time%s\n", rep->rules[i].name, rep->rules[i].fused_op,
                rep->rules[i].enabled ? "enabled, " : "disabled,", rep->rules[i].fired,
                rep->rules[i].fired == 1 ? "" : "s");
}
