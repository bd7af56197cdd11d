/* Graph builder: tensors, nodes, shape inference at build time, views. */
#include "graph/graph.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "graph/ops_init.h"

loom_status loom_graph_init(loom_graph **g) {
    LOOM_RETURN_IF(!g, LOOM_ERR_INVALID_ARG, "graph_init: NULL argument");
    loom_ops_init();
    *g = calloc(1, sizeof **g);
    LOOM_RETURN_IF(!*g, LOOM_ERR_NOMEM, "graph_init: out of memory");
    (*g)->cur_layer = LOOM_LAYER_PRE;
    return LOOM_OK;
}

void loom_graph_free(loom_graph *g) {
    if (!g) return;
    free(g->tensors);
    free(g->nodes);
    free(g);
}

int loom_graph_storage(const loom_graph *g, int id) {
    while (id >= 0 && g->tensors[id].kind == LOOM_TK_VIEW) id = g->tensors[id].view_of;
    return id;
}

void loom_graph_reset(loom_graph *g) {
    g->n_tensors = 0;
    g->n_nodes = 0;
    g->cur_layer = LOOM_LAYER_PRE;
    g->status = LOOM_OK;
    g->error[0] = '\0';
    g->arena_bytes = 0;
    g->scratch_bytes = g->shared_bytes = 0;
    g->planned = 0;
    g->fused = 0;
}

loom_status loom_graph_status(const loom_graph *g) {
    if (g->status != LOOM_OK) return loom_set_error(g->status, "%s", g->error);
    return LOOM_OK;
}

void loom_graph_set_layer(loom_graph *g, int layer) { g->cur_layer = layer; }

static int fail(loom_graph *g, loom_status s, const char *msg) {
    if (g->status == LOOM_OK) {
        g->status = s;
        snprintf(g->error, sizeof g->error, "%s", msg);
    }
    return -1;
}

/* Records the thread's last error (set by a callee) as the graph's error. */
static int fail_last(loom_graph *g, loom_status s) { return fail(g, s, loom_last_error()); }

static int valid_id(const loom_graph *g, int id) { return id >= 0 && id < g->n_tensors; }

static int new_tensor(loom_graph *g, const loom_tensor *t, loom_tensor_kind kind) {
    if (g->n_tensors == g->cap_tensors) {
        int cap = g->cap_tensors ? 2 * g->cap_tensors : 256;
        loom_gtensor *p = realloc(g->tensors, (size_t)cap * sizeof *p);
        if (!p) return fail(g, LOOM_ERR_NOMEM, "graph: out of memory for tensors");
        g->tensors = p;
        g->cap_tensors = cap;
    }
    loom_gtensor *gt = &g->tensors[g->n_tensors];
    memset(gt, 0, sizeof *gt);
    gt->t = *t;
    gt->kind = kind;
    gt->producer = -1;
    gt->view_of = -1;
    g->planned = 0;
    return g->n_tensors++;
}

int loom_graph_external(loom_graph *g, const loom_tensor *t) {
    if (g->status != LOOM_OK) return -1;
    if (!t || t->ndim < 1 || t->ndim > LOOM_MAX_DIMS || (unsigned)t->dtype >= LOOM_DTYPE_COUNT)
        return fail(g, LOOM_ERR_INVALID_ARG, "graph_external: invalid tensor descriptor");
    return new_tensor(g, t, LOOM_TK_EXTERNAL);
}

/* loom_graph_op with its name already made (the loom_g_* wrappers pass
 * theirs). NULL: no name. */
static int graph_op_named(loom_graph *g, loom_op op, const int *src, int n_src, const void *attrs,
                          const char *name) {
    if (g->status != LOOM_OK) return -1;
    const loom_op_info *info = loom_op_get(op);
    char msg[512];
    if (!info) {
        snprintf(msg, sizeof msg, "graph: unknown op %d", (int)op);
        return fail(g, LOOM_ERR_INVALID_ARG, msg);
    }
    if (n_src < info->n_src_min || n_src > info->n_src_max) {
        snprintf(msg, sizeof msg, "%s: expected %d..%d inputs, found %d", info->name,
                 info->n_src_min, info->n_src_max, n_src);
        return fail(g, LOOM_ERR_INVALID_ARG, msg);
    }
    const loom_tensor *srcs[LOOM_MAX_SRC] = {0};
    for (int i = 0; i < n_src; i++) {
        if (!valid_id(g, src[i])) {
            snprintf(msg, sizeof msg, "%s: input %d is not a tensor of this graph (id %d)",
                     info->name, i, src[i]);
            return fail(g, LOOM_ERR_INVALID_ARG, msg);
        }
        srcs[i] = &g->tensors[src[i]].t;
    }
    if (info->attr_size > LOOM_ATTR_MAX || (info->attr_size && !attrs)) {
        snprintf(msg, sizeof msg, "%s: missing or oversized attributes", info->name);
        return fail(g, LOOM_ERR_INVALID_ARG, msg);
    }
    loom_tensor dst;
    memset(&dst, 0, sizeof dst);
    loom_status s = info->infer(srcs, n_src, attrs, &dst);
    if (s != LOOM_OK) return fail_last(g, s);

    loom_tensor_kind kind = LOOM_TK_INTERMEDIATE;
    if (info->dst_views_src0) {
        /* In-place op: the output is a view over input 0's memory with its strides. */
        kind = LOOM_TK_VIEW;
        for (int i = 0; i < LOOM_MAX_DIMS; i++) dst.stride[i] = srcs[0]->stride[i];
        dst.data = srcs[0]->data;
    } else {
        int64_t shape[LOOM_MAX_DIMS];
        memcpy(shape, dst.shape, sizeof shape);
        if (loom_tensor_init(&dst, dst.dtype, dst.ndim, shape, NULL) != LOOM_OK)
            return fail_last(g, LOOM_ERR_SHAPE);
    }
    size_t len = name ? strnlen(name, sizeof dst.name - 1) : 0;
    memcpy(dst.name, name ? name : "", len);
    dst.name[len] = '\0';

    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? 2 * g->cap_nodes : 128;
        loom_node *p = realloc(g->nodes, (size_t)cap * sizeof *p);
        if (!p) return fail(g, LOOM_ERR_NOMEM, "graph: out of memory for nodes");
        g->nodes = p;
        g->cap_nodes = cap;
    }
    int id = new_tensor(g, &dst, kind);
    if (id < 0) return -1;
    loom_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->n_src = n_src;
    for (int i = 0; i < n_src; i++) n->src[i] = src[i];
    n->dst = id;
    n->layer = g->cur_layer;
    n->rule = -1;
    if (info->attr_size) {
        memcpy(n->attrs, attrs, info->attr_size);
        n->has_attrs = 1;
    }
    g->tensors[id].producer = g->n_nodes;
    if (kind == LOOM_TK_VIEW) g->tensors[id].view_of = src[0];
    g->n_nodes++;
    return id;
}

/* Creates a view tensor over base with descriptor v (data relative to base). */
static int new_view(loom_graph *g, int base, const loom_tensor *v, size_t offset) {
    int id = new_tensor(g, v, LOOM_TK_VIEW);
    if (id < 0) return -1;
    g->tensors[id].view_of = base;
    g->tensors[id].view_offset = offset;
    return id;
}

int loom_graph_reshape(loom_graph *g, int id, int ndim, const int64_t *shape) {
    if (g->status != LOOM_OK) return -1;
    if (!valid_id(g, id)) return fail(g, LOOM_ERR_INVALID_ARG, "reshape: invalid tensor id");
    loom_tensor v;
    loom_status s = loom_tensor_reshape(&g->tensors[id].t, ndim, shape, &v);
    if (s != LOOM_OK) return fail_last(g, s);
    return new_view(g, id, &v, 0);
}

int loom_graph_view_rows(loom_graph *g, int id, int64_t row0, int64_t nrows) {
    if (g->status != LOOM_OK) return -1;
    if (!valid_id(g, id)) return fail(g, LOOM_ERR_INVALID_ARG, "view_rows: invalid tensor id");
    const loom_tensor *t = &g->tensors[id].t;
    loom_tensor v;
    loom_status s = loom_tensor_view_rows(t, row0, nrows, &v);
    if (s != LOOM_OK) return fail_last(g, s);
    size_t off = (size_t)(row0 * t->stride[0]) * loom_dtype_size(t->dtype);
    return new_view(g, id, &v, off);
}

void loom_graph_mark_output(loom_graph *g, int id) {
    if (valid_id(g, id)) {
        g->tensors[id].is_output = 1;
        g->planned = 0;
    }
}

const loom_tensor *loom_graph_tensor(const loom_graph *g, int id) {
    return valid_id(g, id) ? &g->tensors[id].t : NULL;
}

/* ------------------------------------------------------------ builders */

int loom_graph_op(loom_graph *g, loom_op op, const int *src, int n_src, const void *attrs,
                  const char *name_fmt, ...) {
    char name[LOOM_NAME_MAX];
    va_list ap;
    va_start(ap, name_fmt);
    vsnprintf(name, sizeof name, name_fmt, ap);
    va_end(ap);
    return graph_op_named(g, op, src, n_src, attrs, name);
}

int loom_g_matmul(loom_graph *g, int x, int w, const char *name) {
    int src[2] = {x, w};
    return graph_op_named(g, LOOM_OP_MATMUL, src, 2, NULL, name);
}

int loom_g_get_rows(loom_graph *g, int table, int ids, const char *name) {
    int src[2] = {table, ids};
    return graph_op_named(g, LOOM_OP_GET_ROWS, src, 2, NULL, name);
}

int loom_g_rms_norm(loom_graph *g, int x, int gamma, float eps, const char *name) {
    int src[2] = {x, gamma};
    loom_rms_norm_attrs a = {eps};
    return graph_op_named(g, LOOM_OP_RMS_NORM, src, gamma >= 0 ? 2 : 1, &a, name);
}

int loom_g_add(loom_graph *g, int a, int b, const char *name) {
    int src[2] = {a, b};
    return graph_op_named(g, LOOM_OP_ADD, src, 2, NULL, name);
}

int loom_g_mul(loom_graph *g, int a, int b, const char *name) {
    int src[2] = {a, b};
    return graph_op_named(g, LOOM_OP_MUL, src, 2, NULL, name);
}

int loom_g_silu(loom_graph *g, int x, const char *name) {
    return graph_op_named(g, LOOM_OP_SILU, &x, 1, NULL, name);
}

int loom_g_rope(loom_graph *g, int x, const loom_rope_attrs *a, const char *name) {
    return graph_op_named(g, LOOM_OP_ROPE, &x, 1, a, name);
}

int loom_g_rope_at(loom_graph *g, int x, int positions, const loom_rope_attrs *a, const char *name) {
    int src[2] = {x, positions};
    return graph_op_named(g, LOOM_OP_ROPE, src, 2, a, name);
}

int loom_g_kv_write(loom_graph *g, int cache, int x, int slots, int scale, const char *name) {
    int src[4] = {cache, x, slots, scale};
    return graph_op_named(g, LOOM_OP_KV_WRITE, src, scale >= 0 ? 4 : 3, NULL, name);
}

int loom_g_attention(loom_graph *g, int q, int k, int v, int mask,
                     const loom_attention_attrs *a, const char *name) {
    return loom_g_attention_i8(g, q, k, v, -1, -1, mask, a, name);
}

int loom_g_kv_append(loom_graph *g, int cache, int x, int pos, const char *name) {
    return loom_g_kv_append_i8(g, cache, x, -1, pos, name);
}

int loom_g_kv_append_i8(loom_graph *g, int cache, int x, int scale, int pos, const char *name) {
    int src[3] = {cache, x, scale};
    loom_kv_append_attrs a = {pos};
    return graph_op_named(g, LOOM_OP_KV_APPEND, src, scale >= 0 ? 3 : 2, &a, name);
}

int loom_g_attention_i8(loom_graph *g, int q, int k, int v, int k_scale, int v_scale, int mask,
                        const loom_attention_attrs *a, const char *name) {
    int src[6] = {q, k, v, k_scale, v_scale, mask}, n = 3;
    if (k_scale >= 0) n = 5;            /* the scales follow v */
    else src[3] = mask;
    return graph_op_named(g, LOOM_OP_ATTENTION, src, n + (mask >= 0), a, name);
}

/* ------------------------------------------------------------ copies, args */

int loom_graph_intermediate(loom_graph *g, const loom_tensor *t) {
    if (g->status != LOOM_OK) return -1;
    loom_tensor c = *t;
    int64_t shape[LOOM_MAX_DIMS];
    memcpy(shape, c.shape, sizeof shape);
    if (loom_tensor_init(&c, t->dtype, t->ndim, shape, NULL) != LOOM_OK) return fail_last(g, LOOM_ERR_SHAPE);
    memcpy(c.name, t->name, sizeof c.name);
    return new_tensor(g, &c, LOOM_TK_INTERMEDIATE);
}

loom_status loom_graph_copy(loom_graph *dst, const loom_graph *src) {
    LOOM_RETURN_IF(!dst || !src, LOOM_ERR_INVALID_ARG, "graph_copy: NULL argument");
    if (dst->cap_tensors < src->n_tensors) {
        loom_gtensor *p = realloc(dst->tensors, (size_t)src->n_tensors * sizeof *p);
        LOOM_RETURN_IF(!p, LOOM_ERR_NOMEM, "graph_copy: out of memory");
        dst->tensors = p, dst->cap_tensors = src->n_tensors;
    }
    if (dst->cap_nodes < src->n_nodes) {
        loom_node *p = realloc(dst->nodes, (size_t)src->n_nodes * sizeof *p);
        LOOM_RETURN_IF(!p, LOOM_ERR_NOMEM, "graph_copy: out of memory");
        dst->nodes = p, dst->cap_nodes = src->n_nodes;
    }
    if (src->n_tensors) memcpy(dst->tensors, src->tensors, (size_t)src->n_tensors * sizeof *dst->tensors);
    if (src->n_nodes) memcpy(dst->nodes, src->nodes, (size_t)src->n_nodes * sizeof *dst->nodes);
    dst->n_tensors = src->n_tensors;
    dst->n_nodes = src->n_nodes;
    dst->cur_layer = src->cur_layer;
    dst->status = src->status;
    memcpy(dst->error, src->error, sizeof dst->error);
    dst->arena_bytes = dst->scratch_bytes = dst->shared_bytes = 0;
    dst->planned = 0;
    dst->fused = src->fused;
    return LOOM_OK;
}

void loom_graph_set_producers(loom_graph *g) {
    for (int t = 0; t < g->n_tensors; t++) g->tensors[t].producer = -1;
    for (int n = 0; n < g->n_nodes; n++) {
        g->tensors[g->nodes[n].dst].producer = n;
        for (int e = 0; e < g->nodes[n].n_dst_extra; e++) g->tensors[g->nodes[n].dst_extra[e]].producer = n;
    }
    g->planned = 0;
}

void loom_graph_node_args(const loom_graph *g, int n, loom_kernel_args *a) {
    const loom_node *node = &g->nodes[n];
    memset(a, 0, sizeof *a);
    a->n_src = node->n_src;
    for (int i = 0; i < node->n_src; i++) a->src[i] = &g->tensors[node->src[i]].t;
    a->dst = &g->tensors[node->dst].t;
    a->attrs = node->has_attrs ? node->attrs : NULL;
    a->n_dst_extra = node->n_dst_extra;
    for (int i = 0; i < node->n_dst_extra; i++) a->dst_extra[i] = &g->tensors[node->dst_extra[i]].t;
    a->nth = 1;
}
