/*
 * Graph IR: tensors and nodes in topological order (nodes are appended after
 * their inputs exist). Model code builds graphs of primitive ops with the
 * builder below; fusion passes (later) rewrite them; the executor runs them.
 *
 * The builder uses a sticky error, like a stream: a failed call records the
 * first error in the graph and returns -1, calls given -1 return -1, and the
 * model code checks loom_graph_status() once at the end. This keeps model
 * code straight-line.
 */
#ifndef LOOM_GRAPH_GRAPH_H
#define LOOM_GRAPH_GRAPH_H

#include "loom.h"
#include "ops/ops.h"

typedef enum loom_tensor_kind {
    LOOM_TK_EXTERNAL = 0,  /* memory owned by the caller (weights, inputs, KV cache) */
    LOOM_TK_INTERMEDIATE,  /* produced by a node, placed in the arena by the planner */
    LOOM_TK_VIEW,          /* aliases another tensor (reshape / row range / in-place op output) */
} loom_tensor_kind;

/* Layer tags for accounting: nodes before the first layer and after the last. */
#define LOOM_LAYER_PRE  (-1)
#define LOOM_LAYER_POST (-2)

#define LOOM_ATTR_MAX 80   /* bytes of inline attribute storage per node */

typedef struct loom_gtensor {
    loom_tensor t;          /* t.data resolved by the executor for non-external tensors */
    loom_tensor_kind kind;
    int    producer;        /* node index, -1 for external */
    int    view_of;         /* base tensor id for views, else -1 */
    size_t view_offset;     /* bytes from the base tensor's data */
    int    is_output;       /* kept alive to the end of the graph */
    /* planner results */
    int    first_use, last_use;
    size_t offset;          /* arena offset of intermediates */
} loom_gtensor;

typedef struct loom_node_stats {
    const char *kernel;     /* kernel name that ran, e.g. "matmul.ref" */
    int    kernels;         /* kernel launches (1 per node unfused) */
    double flops, bytes_read, bytes_written;
    double time_ns;
} loom_node_stats;

#define LOOM_MAX_EXTRA_DST 3  /* outputs of a multi-output (fused) node beyond dst */

typedef struct loom_node {
    loom_op op;
    int     src[LOOM_MAX_SRC];
    int     n_src;
    int     dst;
    /* Further outputs of fused nodes (add_rms_norm's r, qkv_rope's cache views,
     * ffn's hidden buffer): tensor ids whose producer is this node. */
    int     dst_extra[LOOM_MAX_EXTRA_DST];
    int     n_dst_extra;
    int     rule;           /* fusion rule that made this node, -1 for primitives */
    int     layer;          /* LOOM_LAYER_PRE/POST or 0..n_layers-1 */
    _Alignas(16) unsigned char attrs[LOOM_ATTR_MAX];
    int     has_attrs;
    loom_node_stats stats;
} loom_node;

/* Public (loom.h): loom_graph_init, _free, _external, _add_op, _mark_output,
 * _status, _tensor, _n_nodes, _node_kernel. */
struct loom_graph {
    loom_gtensor *tensors; int n_tensors, cap_tensors;
    loom_node    *nodes;   int n_nodes,   cap_nodes;
    int           cur_layer;
    loom_status   status;   /* first builder error */
    char          error[512];
    /* planner results */
    size_t arena_bytes;     /* bytes the intermediates need */
    size_t scratch_bytes;   /* per-thread scratch the kernels need */
    size_t shared_bytes;    /* the largest buffer one launch's threads share (op shared_size) */
    int    planned;
    int    fused;           /* 1 after a fusion pass rewrote the graph */
};

/* Empties the graph, keeping its memory (no allocation when rebuilt no larger). */
void loom_graph_reset(loom_graph *g);
/* Recomputes every tensor's producer from the node list (after a rewrite of
 * it); the graph counts as unplanned. */
void loom_graph_set_producers(loom_graph *g);
/* The tensor that owns the memory of id (follows view chains; -1 stays -1). */
int loom_graph_storage(const loom_graph *g, int id);
void loom_graph_set_layer(loom_graph *g, int layer);

/* Appends a node computing op(src...) and returns its output tensor id.
 * Shapes are inferred and checked now; name is printf-style. */
int loom_graph_op(loom_graph *g, loom_op op, const int *src, int n_src, const void *attrs,
                  const char *name_fmt, ...) __attribute__((format(printf, 6, 7)));
/* Zero-cost views (no node): new shape over a contiguous tensor; row range of dim 0. */
int loom_graph_reshape(loom_graph *g, int id, int ndim, const int64_t *shape);
int loom_graph_view_rows(loom_graph *g, int id, int64_t row0, int64_t nrows);

/* Copies src into dst (tensors, nodes, no planner results); dst keeps its
 * memory when large enough. */
loom_status loom_graph_copy(loom_graph *dst, const loom_graph *src);
/* A new intermediate tensor with t's dtype, shape and name and no producer
 * yet (the fusion pass gives it one). */
int loom_graph_intermediate(loom_graph *g, const loom_tensor *t);
/* Arguments of node n for its kernel (ith 0, nth 1: the caller sets them). */
void loom_graph_node_args(const loom_graph *g, int n, loom_kernel_args *a);

/* Convenience builders for the primitive ops. */
int loom_g_matmul(loom_graph *g, int x, int w, const char *name);
int loom_g_get_rows(loom_graph *g, int table, int ids, const char *name);
int loom_g_rms_norm(loom_graph *g, int x, int gamma, float eps, const char *name);
int loom_g_add(loom_graph *g, int a, int b, const char *name);
int loom_g_mul(loom_graph *g, int a, int b, const char *name);
int loom_g_silu(loom_graph *g, int x, const char *name);
int loom_g_rope(loom_graph *g, int x, const loom_rope_attrs *a, const char *name);
/* RoPE with a position per row s of x (positions: i32 [S]) instead of pos_offset + s. */
int loom_g_rope_at(loom_graph *g, int x, int positions, const loom_rope_attrs *a, const char *name);
/* Rows of x to the cache slots slots names (i32 [T], < 0 skips a row); an i8
 * cache's scale store (< 0: a float cache) gets each row's scales. Returns the
 * view of the whole cache, for the readers that must come after the write. */
int loom_g_kv_write(loom_graph *g, int cache, int x, int slots, int scale, const char *name);
int loom_g_attention(loom_graph *g, int q, int k, int v, int mask,
                     const loom_attention_attrs *a, const char *name);
int loom_g_kv_append(loom_graph *g, int cache, int x, int pos, const char *name);
/* An i8 cache: scale is its f32 store [S_max, ...] (the cache's dims but the last),
 * whose rows pos.. the node writes too. Readers take k_scale / v_scale views of
 * rows [0, pos + n) of the stores, reshaped to [B, S, Hkv], next to the views the
 * kv_append nodes return (which order them after the writes). A scale id < 0:
 * a float cache (the nodes of loom_g_kv_append / loom_g_attention). */
int loom_g_kv_append_i8(loom_graph *g, int cache, int x, int scale, int pos, const char *name);
int loom_g_attention_i8(loom_graph *g, int q, int k, int v, int k_scale, int v_scale, int mask,
                        const loom_attention_attrs *a, const char *name);

#endif
