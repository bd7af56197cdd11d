/* qkv_rope as a graph op (src: x, wq, wk, wv; dst: q; extra dst: the K and V
 * cache views [0, pos+T), which alias the caches: the op writes them in
 * place): Q, K and V projections, RoPE on Q and K, and the
 * K/V cache write, in one launch. Work items are blocks of whole heads of Q,
 * K or V. Each item's GEMM writes its tile straight to where it belongs (Q to
 * the output, K and V to cache rows pos..pos+T) and RoPE rotates the tile in
 * place while it is still in L2: K and V are never stored and re-loaded, and
 * there are no separate rope/kv_append kernels. The GEMM and RoPE are the
 * primitive kernels of the same level on sub-blocks, so results equal the
 * unfused graph's. Caches: [S_max, N_kv, D], contiguous, f32 (the tile is
 * computed in place), f16, bf16 or i8 (computed in scratch, then rounded or
 * quantized into the cache as kv_append does; i8 caches take their scale stores
 * [S_max, N_kv] as inputs 4 and 5 and the op writes rows pos.. of them).
 *
 * Paged (attrs.paged, the engine's graphs: rope with positions, kv_write with
 * slots): inputs 4 and 5 are i32 [T] positions (the RoPE angle of each row)
 * and slots (the cache row it goes to, -1 none); the caches are the whole
 * stores [n_slots, N_kv, D] and i8 scale stores [n_slots, N_kv] are inputs 6
 * and 7. K and V tiles are computed in scratch and copied (rounded,
 * quantized) row by row to their slots, as kv_write does. */
#include "fused/fused_graph_ops.h"
#include "fused/fused_internal.h"

#include "base/cpu.h"
#include "base/status.h"
#include "ops/matmul/matmul.h"
#include "ops/quant.h"
#include "ops/ref/ref.h"
#include "ops/vec/vec.h"

static loom_status qkv_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                             loom_tensor *dst) {
    const char *op = "qkv_rope";
    LOOM_TRY(loom_ref_check_arity(op, src, n_src, 4, 9));
    const loom_qkv_rope_attrs *at = attrs;
    LOOM_RETURN_IF(!at, LOOM_ERR_INVALID_ARG, "%s: attributes missing", op);
    const int base = at->paged ? 6 : 4; /* paged: positions and slots are inputs 4 and 5 */
    LOOM_RETURN_IF((at->cache_dtype == LOOM_I8 ? base + 2 : base) + (at->norm ? 1 : 0) != n_src,
                   LOOM_ERR_INVALID_ARG,
                   "%s: %d inputs with cache_dtype %s%s%s: i8 caches take their scale stores as inputs %d "
                   "and %d, other caches none; the norm takes gamma last", op, n_src,
                   loom_dtype_name((loom_dtype)at->cache_dtype), at->paged ? " (paged)" : "",
                   at->norm ? " and the norm" : "", base, base + 1);
    const int n_cache_src = n_src - (at->norm ? 1 : 0); /* the inputs before gamma */
    int64_t H = at->n_heads, HKV = at->n_kv_heads, D = at->head_dim;
    LOOM_RETURN_IF(H < 1 || HKV < 1 || D < 2 || H % HKV, LOOM_ERR_INVALID_ARG,
                   "%s: heads %lld / kv heads %lld / head_dim %lld invalid", op, (long long)H,
                   (long long)HKV, (long long)D);
    const loom_tensor *x = src[0];
    LOOM_TRY(loom_ref_check_dtype(op, 0, "x", x, LOOM_REF_DT(LOOM_F32)));
    LOOM_RETURN_IF(x->ndim != 2, LOOM_ERR_SHAPE, "%s: input 0 (x) must be 2-D [T, hidden]", op);
    int64_t T = x->shape[0], hid = x->shape[1];
    const int64_t rows[3] = {H * D, HKV * D, HKV * D};
    for (int i = 1; i <= 3; i++) {
        const loom_tensor *w = src[i];
        LOOM_RETURN_IF(w->ndim != 2 || w->shape[0] != rows[i - 1] || w->shape[1] != hid ||
                           w->dtype != src[1]->dtype || w->stride[1] != 1,
                       LOOM_ERR_SHAPE, "%s: input %d (weight) must be [%lld, %lld] of one dtype", op,
                       i, (long long)rows[i - 1], (long long)hid);
    }
    LOOM_RETURN_IF(at->rope.pos_offset < 0 || (at->paged && at->rope.pos_offset), LOOM_ERR_INVALID_ARG,
                   "%s: position offset %d (paged: positions come from input 4, the offset must be 0)", op,
                   at->rope.pos_offset);
    for (int i = 4; at->paged && i < 6; i++)
        LOOM_RETURN_IF(src[i]->dtype != LOOM_I32 || src[i]->ndim != 1 || src[i]->shape[0] != T, LOOM_ERR_SHAPE,
                       "%s: input %d (%s) must be i32 [%lld], one per row of x", op, i,
                       i == 4 ? "positions" : "slots", (long long)T);
    for (int i = base; at->paged && i < n_cache_src; i++) /* one f32 scale per cache slot and head */
        LOOM_RETURN_IF(src[i]->dtype != LOOM_F32 || src[i]->ndim != 2 || src[i]->shape[1] != HKV ||
                           !loom_tensor_is_contiguous(src[i]),
                       LOOM_ERR_SHAPE, "%s: input %d (scale store) must be contiguous f32 [n_slots, %lld]", op, i,
                       (long long)HKV);
    for (int i = base; !at->paged && i < n_cache_src; i++) { /* i8: one f32 scale per cache row, [S_max, N_kv] contiguous */
        const loom_tensor *st = src[i];
        LOOM_RETURN_IF(st->dtype != LOOM_F32 || st->ndim != 2 || st->shape[1] != HKV ||
                           st->shape[0] < at->rope.pos_offset + T || !loom_tensor_is_contiguous(st),
                       LOOM_ERR_SHAPE, "%s: input %d (scale store) must be contiguous f32 [>= %lld, %lld]", op,
                       i, (long long)(at->rope.pos_offset + T), (long long)HKV);
    }
    if (at->norm) {
        const loom_tensor *g = src[n_src - 1];
        LOOM_RETURN_IF(g->dtype != LOOM_F32 || loom_tensor_nelem(g) != hid || !loom_tensor_is_contiguous(g),
                       LOOM_ERR_SHAPE, "%s: input %d (the norm's gamma) must be contiguous f32 [%lld]", op, n_src - 1,
                       (long long)hid);
        LOOM_RETURN_IF(!(at->norm_eps > 0.0f), LOOM_ERR_INVALID_ARG, "%s: norm_eps %g: expected > 0", op,
                       (double)at->norm_eps);
        LOOM_RETURN_IF(x->stride[1] != 1, LOOM_ERR_SHAPE, "%s: x must have contiguous rows", op);
    }
    loom_dtype qt = (loom_dtype)at->q_dtype;
    LOOM_RETURN_IF(qt != LOOM_F32 && qt != LOOM_F16 && qt != LOOM_BF16, LOOM_ERR_INVALID_ARG,
                   "%s: q_dtype %d: expected f32, f16 or bf16", op, (int)at->q_dtype);
    const int64_t shape[3] = {T, H, D};
    loom_ref_set_dst(dst, qt, 3, shape);
    return LOOM_OK;
}

static void qkv_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                     const void *attrs, loom_cost *c) {
    const loom_qkv_rope_attrs *at = attrs;
    double T = (double)src[0]->shape[0], hid = (double)src[0]->shape[1];
    double nq = (double)at->n_heads * at->head_dim, nkv = (double)at->n_kv_heads * at->head_dim;
    c->flops = 2.0 * T * hid * (nq + 2.0 * nkv) + 6.0 * T * (nq + nkv);
    const double ex = LOOM_ES(src[0]);
    c->bytes_read = ex * T * hid;                    /* x, once (stays in cache across items) */
    for (int i = 1; i <= 3; i++)                     /* every weight once */
        c->bytes_read += (double)loom_dtype_row_bytes(src[i]->dtype, src[i]->shape[1]) *
                         (double)src[i]->shape[0];
    /* q and the new cache rows */
    c->bytes_written = LOOM_ES(dst) * T * nq + (double)loom_dtype_size((loom_dtype)at->cache_dtype) * T * 2.0 * nkv;
    if (at->cache_dtype == LOOM_I8) c->bytes_written += 4.0 * T * 2.0 * at->n_kv_heads; /* i8: the rows' scales */
    if (at->paged) c->bytes_read += 8.0 * T;         /* positions and slots */
    if (at->norm) { /* gamma, and x read once more for the rows' statistics unless it is quantized a few
                     * rows at a time with them (quantized weights, q8 activations) */
        int q8 = loom_dtype_is_quantized(src[1]->dtype) && at->act_precision != LOOM_ACT_PREC_FULL;
        c->bytes_read += (q8 ? 0.0 : ex * T * hid) + 4.0 * hid;
        c->flops += 4.0 * T * hid;
    }
    (void)n_src;
}

/* Heads per work item (loom_qkv_heads_per_block unless the rule gives block_heads). */
static int64_t heads_per_block(const loom_qkv_rope_attrs *at, int64_t T) {
    int64_t hb = at->block_heads > 0 ? at->block_heads
                                     : loom_qkv_heads_per_block(T, at->head_dim, at->n_heads, at->n_kv_heads);
    if (hb < 1) hb = 1;
    if (hb > at->n_kv_heads) hb = at->n_kv_heads;
    return hb;
}

/* Scratch: the block GEMM's and RoPE's (they run one after the other), then
 * x quantized once for all items when the weights are quantized (the front
 * part's size decides where that starts). */
static size_t qkv_front(const loom_tensor *const *src, const loom_qkv_rope_attrs *at, int64_t hb) {
    size_t mm = 0;
    for (int i = 1; i <= 3; i++) {
        loom_matmul_args g = loom_fused_block_gemm(src[0], src[i], 0, hb * at->head_dim, NULL, hb * at->head_dim,
                                                   at->act_precision);
        if (at->norm) loom_matmul_norm_for_size(&g); /* sizes only: x's data may not be bound yet */
        size_t s = loom_matmul_scratch_size(&g);
        if (s > mm) mm = s;
    }
    loom_tensor tile;
    const int64_t shape[3] = {1, 1, at->head_dim};
    if (loom_tensor_init(&tile, LOOM_F32, 3, shape, NULL) == LOOM_OK) {
        const loom_tensor *ts[1] = {&tile};
        size_t rope = loom_vec_rope_scratch(ts, 1, &tile, &at->rope);
        if (rope > mm) mm = rope;
    }
    return (mm + 63) & ~(size_t)63;
}

/* Then the cos/sin tables of all T positions, computed once per thread
 * instead of once per item (loom_vec_rope_table), when they fit in
 * ROPE_TABLE_MAX bytes (else every item's RoPE computes its own). */
#define ROPE_TABLE_MAX ((size_t)8 << 20)

static int64_t rope_dims(const loom_qkv_rope_attrs *at) {
    return at->rope.n_rot > 0 ? at->rope.n_rot : at->head_dim;
}

static size_t rope_table_bytes(const loom_qkv_rope_attrs *at, int64_t T) {
    size_t freq = ((size_t)rope_dims(at) / 2 + 15) & ~(size_t)15; /* padded, see qkv_kernel */
    size_t n = (freq + 2 * (size_t)T * (size_t)rope_dims(at)) * sizeof(float);
    return n <= ROPE_TABLE_MAX ? (n + 63) & ~(size_t)63 : 0;
}

static size_t xq_bytes(const loom_tensor *const *src, const loom_qkv_rope_attrs *at, int64_t hb) {
    loom_matmul_args g = loom_fused_block_gemm(src[0], src[1], 0, hb * at->head_dim, NULL, hb * at->head_dim,
                                               at->act_precision);
    return (loom_matmul_xq_bytes(&g) + 63) & ~(size_t)63;
}

/* An item's f32 tile goes through scratch (then rounded into a 16-bit q or
 * cache) unless every output is f32 and in place. */
static int via_tile(const loom_qkv_rope_attrs *at) {
    return at->cache_dtype != LOOM_F32 || at->paged || at->q_dtype != LOOM_F32;
}

/* Then, for f16/bf16/i8 caches, paged ones and a 16-bit q, the f32 tile of an item [T, hb·D]. */
static size_t tile_bytes(const loom_qkv_rope_attrs *at, int64_t T, int64_t hb) {
    if (!via_tile(at)) return 0;
    return ((size_t)T * (size_t)(hb * at->head_dim) * sizeof(float) + 63) & ~(size_t)63;
}

/* Then, with the norm, the rows' 1/rms [T] (doubles). */
static size_t inv_bytes(const loom_qkv_rope_attrs *at, int64_t T) {
    return at->norm ? ((size_t)T * sizeof(double) + 63) & ~(size_t)63 : 0;
}

static size_t qkv_scratch(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                          const void *attrs) {
    const loom_qkv_rope_attrs *at = attrs;
    int64_t T = src[0]->shape[0], hb = heads_per_block(at, T);
    return qkv_front(src, at, hb) + xq_bytes(src, at, hb) + rope_table_bytes(at, T) + tile_bytes(at, T, hb) +
           inv_bytes(at, T) + 64;
}

/* RoPE on an item's Q or K tile [T, nh·D] (rows ldy apart): from the tables
 * when built, else the level's rope kernel on the tile. */
static loom_status rope_item(const loom_qkv_rope_attrs *at, loom_isa isa, loom_kernel_fn rope, const float *tab,
                             const loom_tensor *positions, float *y, int64_t ldy, int64_t T, int64_t nh,
                             void *scratch) {
    int64_t D = at->head_dim;
    if (tab) {
        loom_fused_rope_tile(loom_vec_fns_for(isa), at->rope.mode != LOOM_ROPE_HALF, rope_dims(at), D, tab,
                             tab + rope_dims(at), 2 * rope_dims(at), y, ldy, T, nh);
        return LOOM_OK;
    }
    loom_tensor tile;
    const int64_t shape[3] = {T, nh, D};
    LOOM_TRY(loom_tensor_init(&tile, LOOM_F32, 3, shape, y));
    tile.stride[0] = ldy;
    loom_kernel_args r = {.src = {&tile, positions}, .n_src = positions ? 2 : 1, .dst = &tile,
                          .attrs = &at->rope, .ith = 0, .nth = 1, .scratch = scratch};
    return rope(&r);
}

static loom_status qkv_kernel(const loom_kernel_args *a, loom_isa isa) {
    const loom_qkv_rope_attrs *at = a->attrs;
    LOOM_RETURN_IF(a->n_dst_extra < 2 || !a->dst_extra[0] || !a->dst_extra[1], LOOM_ERR_INVALID_ARG,
                   "qkv_rope: the cache outputs are missing");
    const loom_tensor *x = a->src[0];
    int64_t T = x->shape[0], H = at->n_heads, HKV = at->n_kv_heads, D = at->head_dim;
    for (int i = 0; i < 2; i++) {
        const loom_tensor *c = a->dst_extra[i];
        LOOM_RETURN_IF(c->dtype != (loom_dtype)at->cache_dtype || c->ndim != 3 || c->shape[1] != HKV ||
                           c->shape[2] != D || !loom_tensor_is_contiguous(c) ||
                           (!at->paged && at->rope.pos_offset + T > c->shape[0]) ||
                           (at->paged && c->dtype == LOOM_I8 && a->src[6 + i]->shape[0] != c->shape[0]),
                       LOOM_ERR_SHAPE,
                       "qkv_rope: cache output %d must be contiguous %s [>= %lld, %lld, %lld]", i,
                       loom_dtype_name((loom_dtype)at->cache_dtype), (long long)(at->rope.pos_offset + T),
                       (long long)HKV, (long long)D);
    }
    const loom_tensor *positions = at->paged ? a->src[4] : NULL;
    const int32_t *slots = at->paged ? (const int32_t *)a->src[5]->data : NULL;
    for (int64_t t = 0; slots && t < T; t++) /* every thread checks: all fail alike */
        LOOM_RETURN_IF(slots[t] >= a->dst_extra[0]->shape[0] || ((const int32_t *)positions->data)[t] < 0,
                       LOOM_ERR_INVALID_ARG, "qkv_rope: row %lld has position %d and slot %d (cache of %lld slots)",
                       (long long)t, ((const int32_t *)positions->data)[t], slots[t],
                       (long long)a->dst_extra[0]->shape[0]);
    int64_t hb = heads_per_block(at, T), nq = (H + hb - 1) / hb, nk = (HKV + hb - 1) / hb, lo, hi;
    loom_ref_split(nq + 2 * nk, a->ith, a->nth, &lo, &hi);
    loom_kernel_fn rope = loom_op_kernel(LOOM_OP_ROPE, isa);
    /* Scratch (qkv_scratch): the GEMM's and RoPE's, then x quantized once
     * here for quantized weights (not by every item's GEMM), then the RoPE
     * tables of every position, built once (the items rotate the same
     * positions). */
    unsigned char *front = (unsigned char *)a->scratch + qkv_front(a->src, at, hb);
    /* x made ready once per thread (no barrier; the same values whatever the
     * thread): the norm's 1/rms of all T rows, x quantized (loom_matmul_prepare_x) */
    const float *gamma = at->norm ? (const float *)a->src[a->n_src - 1]->data : NULL;
    double *inv = at->norm ? (double *)(front + xq_bytes(a->src, at, hb) + rope_table_bytes(at, T) +
                                        tile_bytes(at, T, hb))
                           : NULL;
    loom_matmul_args probe = loom_fused_block_gemm(x, a->src[1], 0, hb * D, NULL, hb * D, at->act_precision);
    probe.invariant = a->invariant; /* the GEMM's x layout, as the items below */
    void *xq = lo < hi ? loom_matmul_prepare_x(&probe, isa, gamma, at->norm_eps, inv, front) : NULL;
    const float *tab = NULL;
    int any_rope = lo < nq + nk && hi > lo;
    if (any_rope && isa != LOOM_ISA_REF && rope_table_bytes(at, T) > 0) {
        float *freq = (float *)(front + xq_bytes(a->src, at, hb));
        int64_t n_rot = rope_dims(at);
        float *t0 = freq + ((n_rot / 2 + 15) & ~(int64_t)15);
        loom_vec_rope_freqs(&at->rope, n_rot, freq);
        for (int64_t t = 0; t < T; t++) /* paged: the row's own position (pos_offset is 0) */
            loom_vec_rope_table(&at->rope, n_rot, freq, positions ? ((const int32_t *)positions->data)[t] : t,
                                t0 + (size_t)t * 2 * n_rot, t0 + (size_t)t * 2 * n_rot + n_rot);
        tab = t0;
    }
    /* f16/bf16/i8 caches: K and V tiles go to this f32 buffer, then rounded (i8: quantized
     * row by row, loom_quantize_row_i8 as kv_append) into the cache; a 16-bit q likewise */
    float *tile32 = via_tile(at) ? (float *)(front + xq_bytes(a->src, at, hb) + rope_table_bytes(at, T)) : NULL;
    const int q16 = at->q_dtype != LOOM_F32;
    float *kv_tile = at->cache_dtype != LOOM_F32 || at->paged ? tile32 : NULL; /* f32 caches in place */
    LOOM_RETURN_IF(a->dst->dtype != (loom_dtype)at->q_dtype || a->dst->ndim != 3 || a->dst->shape[0] != T ||
                       a->dst->shape[1] != H || a->dst->shape[2] != D || !loom_tensor_is_contiguous(a->dst),
                   LOOM_ERR_SHAPE, "qkv_rope: q must be contiguous %s [%lld, %lld, %lld]",
                   loom_dtype_name((loom_dtype)at->q_dtype), (long long)T, (long long)H, (long long)D);
    const loom_vec_fns *vec = loom_vec_fns_for(isa);
    for (int64_t it = lo; it < hi; it++) {
        int part = it < nq ? 0 : it < nq + nk ? 1 : 2;
        int64_t h0 = (part == 0 ? it : part == 1 ? it - nq : it - nq - nk) * hb;
        int64_t heads = part == 0 ? H : HKV, nh = heads - h0 < hb ? heads - h0 : hb;
        float *y;
        int64_t ldy;
        if (part == 0 && !q16) {
            y = (float *)a->dst->data + h0 * D, ldy = H * D;
        } else if (part == 0 || kv_tile) {
            y = tile32, ldy = nh * D;
        } else {
            const loom_tensor *cache = a->dst_extra[part - 1];
            y = (float *)cache->data + (int64_t)at->rope.pos_offset * HKV * D + h0 * D, ldy = HKV * D;
        }
        loom_matmul_args g = loom_fused_block_gemm(x, a->src[1 + part], h0 * D, nh * D, y, ldy, at->act_precision);
        g.invariant = a->invariant;
        g.xq = xq;
        g.norm_gamma = gamma, g.norm_inv = inv;
        LOOM_TRY(loom_matmul_run(&g, isa, 0, 1, a->scratch));
        if (part != 2) LOOM_TRY(rope_item(at, isa, rope, tab, positions, y, ldy, T, nh, a->scratch));
        if (part == 0 && q16) { /* rows of the tile rounded into q's */
            uint16_t *q = (uint16_t *)a->dst->data + h0 * D;
            for (int64_t t = 0; t < T; t++)
                loom_vec_convert(vec, LOOM_F32, y + t * ldy, a->dst->dtype, q + t * H * D, nh * D);
        }
        if (part == 0 || !kv_tile) continue;
        const loom_tensor *cache = a->dst_extra[part - 1];
        if (slots) { /* paged: each row to its slot, as kv_write */
            size_t es = loom_dtype_size(cache->dtype);
            for (int64_t t = 0; t < T; t++) {
                if (slots[t] < 0) continue;
                int64_t row0 = (int64_t)slots[t] * HKV + h0;
                const float *yr = y + t * ldy;
                if (cache->dtype == LOOM_I8) {
                    float *sc = (float *)a->src[5 + part]->data + row0;
                    for (int64_t h = 0; h < nh; h++)
                        sc[h] = loom_quantize_row_i8(yr + h * D, D, (int8_t *)cache->data + (row0 + h) * D);
                } else {
                    loom_vec_convert(vec, LOOM_F32, yr, cache->dtype, (char *)cache->data + (size_t)(row0 * D) * es,
                                     nh * D);
                }
            }
            continue;
        }
        int64_t row0 = (int64_t)at->rope.pos_offset * HKV + h0; /* first (token, head) row */
        if (cache->dtype == LOOM_I8) {
            int8_t *c8 = (int8_t *)cache->data + row0 * D;
            float *sc = (float *)a->src[3 + part]->data + row0;
            for (int64_t t = 0; t < T; t++)
                for (int64_t h = 0; h < nh; h++)
                    sc[t * HKV + h] = loom_quantize_row_i8(y + t * ldy + h * D, D, c8 + (t * HKV + h) * D);
            continue;
        }
        uint16_t *c16 = (uint16_t *)cache->data + row0 * D;
        for (int64_t t = 0; t < T; t++)
            loom_vec_convert(vec, LOOM_F32, y + t * ldy, cache->dtype, c16 + t * HKV * D, nh * D);
    }
    return LOOM_OK;
}
LOOM_FUSED_LEVELS(qkv, qkv_kernel)

void loom_register_qkv_rope_op(loom_op_info *e) {
    e->infer = qkv_infer, e->cost = qkv_cost, e->scratch_size = qkv_scratch, e->ref = qkv_ref;
    e->decomposition = "matmul matmul matmul rope rope kv_append kv_append";
    LOOM_FUSED_SET_LEVELS(e, qkv);
}
