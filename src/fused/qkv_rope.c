/*
 * QKV projection + RoPE + KV-cache write in one pass over x. The output heads
 * (Q, then K, then V) are walked in blocks of whole heads; each block is one
 * GEMM of x against those weight rows, and while the block (T x heads*D) is in
 * L2 its Q/K heads are rotated and its K/V heads stored into the caches. K and
 * V never make a round trip through main memory unless k_out/v_out ask for it.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "fused/fused_internal.h"
#include "ops/ref/ref.h"

loom_qkv_rope_params loom_qkv_rope_default_params(void) {
    loom_qkv_rope_params p;
    memset(&p, 0, sizeof p);
    p.rope_mode = LOOM_ROPE_HALF;
    p.theta = 10000.0f;
    p.cache.cache_layout = LOOM_ATTN_BSND;
    return p;
}

typedef struct qkv_ctx {
    const loom_tensor *x;
    const void *w[3];              /* first row of Q, K, V weights */
    loom_dtype wtype;
    int64_t ldw, T, hidden, N, NKV, D, n_rot, hb;   /* hb: heads per block */
    const loom_qkv_rope_params *p;
    loom_tensor *q_out, *k_out, *v_out, *kc, *vc;
    loom_isa isa;
    const loom_vec_fns *f;
    unsigned char *scratch;
    size_t per, mm_bytes, xq_off, xq_bytes;   /* xq: x quantized once (quantized W) */
    loom_status status;
    char error[256];
} qkv_ctx;

static int64_t n_items(const qkv_ctx *c) {
    return (c->N + c->hb - 1) / c->hb + 2 * ((c->NKV + c->hb - 1) / c->hb);
}

/* Item -> (part 0/1/2 = Q/K/V, first head, head count). */
static void item_of(const qkv_ctx *c, int64_t it, int *part, int64_t *h0, int64_t *nh) {
    int64_t nq = (c->N + c->hb - 1) / c->hb, nk = (c->NKV + c->hb - 1) / c->hb;
    int64_t heads = c->N;
    *part = 0;
    if (it >= nq) {
        it -= nq;
        *part = 1 + (int)(it / nk);
        it %= nk;
        heads = c->NKV;
    }
    *h0 = it * c->hb;
    *nh = heads - *h0 < c->hb ? heads - *h0 : c->hb;
}

/* cos/sin of every (token, pair) with the primitive rope op's own functions,
 * so the rotation matches it bit for bit: per token w = n_rot (interleaved,
 * each value twice) or n_rot / 2 (half) entries. freq: n_rot / 2 floats. */
static void angles(const qkv_ctx *c, float *cs, float *sn, float *freq) {
    int64_t w = c->p->rope_mode == LOOM_ROPE_INTERLEAVED ? c->n_rot : c->n_rot / 2;
    loom_rope_attrs ra = {.mode = c->p->rope_mode, .n_rot = (int)c->n_rot, .theta = c->p->theta,
                          .freq_scale = c->p->freq_scale, .pos_offset = 0};
    loom_vec_rope_freqs(&ra, c->n_rot, freq);
    for (int64_t t = 0; t < c->T; t++) {
        int64_t pos = c->p->cache.positions[t] > 0 ? c->p->cache.positions[t] : 0;
        loom_vec_rope_table(&ra, c->n_rot, freq, pos, cs + t * w, sn + t * w);
    }
}

void loom_fused_rope_tile(const loom_vec_fns *f, int interleaved, int64_t n_rot, int64_t D, const float *cs,
                          const float *sn, int64_t ld_tab, float *y, int64_t ldy, int64_t T, int64_t nh) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < nh; h++) {
            float *v = y + t * ldy + h * D;
            if (interleaved) f->rope_interleaved(v, v, cs + t * ld_tab, sn + t * ld_tab, n_rot);
            else f->rope_half(v, v, cs + t * ld_tab, sn + t * ld_tab, n_rot / 2);
        }
}

static void qkv_worker(int ith, int nth, void *arg) {
    qkv_ctx *c = arg;
    int64_t lo, hi;
    loom_matmul_split(n_items(c), 1, ith, nth, &lo, &hi);
    unsigned char *s = c->scratch + c->per * (size_t)ith;
    int64_t aw = c->p->rope_mode == LOOM_ROPE_INTERLEAVED ? c->n_rot : c->n_rot / 2;
    float *cs = (float *)(s + c->mm_bytes), *sn = cs + c->T * aw, *tile = sn + c->T * aw;
    if (lo < hi) angles(c, cs, sn, tile); /* the tile (>= n_rot / 2 floats) is free until the GEMMs */
    size_t wrow = loom_dtype_row_bytes(c->wtype, c->ldw);
    void *xq = NULL;
    if (lo < hi && c->xq_bytes > 0) {
        xq = s + c->xq_off;
        loom_matmul_args g = {.x = c->x->data, .ldx = c->x->stride[0], .w = c->w[0], .ldw = c->ldw,
                              .wtype = c->wtype, .M = c->T, .N = c->hb * c->D, .K = c->hidden,
                              .act = c->p->act_precision};
        loom_matmul_quantize_x(&g, c->isa, 0, c->T, xq);
    }
    for (int64_t it = lo; it < hi; it++) {
        int part;
        int64_t h0, nh;
        item_of(c, it, &part, &h0, &nh);
        loom_tensor *keep = part == 0 ? c->q_out : part == 1 ? c->k_out : c->v_out;
        float *y = keep ? (float *)keep->data + h0 * c->D : tile;
        int64_t ldy = keep ? keep->stride[0] : nh * c->D;
        loom_matmul_args g = {.x = c->x->data, .ldx = c->x->stride[0],
                              .w = (const char *)c->w[part] + wrow * (size_t)(h0 * c->D), .ldw = c->ldw,
                              .wtype = c->wtype, .y = y, .ldy = ldy, .M = c->T, .N = nh * c->D,
                              .K = c->hidden, .xq = xq, .act = c->p->act_precision};
        loom_status st = loom_matmul_run(&g, c->isa, 0, 1, s);
        if (st == LOOM_OK && part < 2) {
            int inter = c->p->rope_mode == LOOM_ROPE_INTERLEAVED;
            loom_fused_rope_tile(c->f, inter, c->n_rot, c->D, cs, sn, inter ? c->n_rot : c->n_rot / 2, y, ldy,
                                 c->T, nh);
        }
        if (st == LOOM_OK && part > 0)
            st = loom_kv_write_rows(&c->p->cache, part == 1 ? c->kc : c->vc, part == 1 ? "key_cache" : "value_cache",
                                    part == 2, y, ldy, c->T, c->NKV, h0, nh, c->D);
        if (st != LOOM_OK) {
            c->status = st;
            snprintf(c->error, sizeof c->error, "%s", loom_last_error());
            return;
        }
    }
}

int64_t loom_qkv_heads_per_block(int64_t T, int64_t D, int64_t n_heads, int64_t n_kv_heads) {
    return loom_qkv_heads_per_block_for(T, D, n_heads, n_kv_heads, loom_cpu_get()->l3_bytes);
}

int64_t loom_qkv_heads_per_block_for(int64_t T, int64_t D, int64_t n_heads, int64_t n_kv_heads,
                                     int64_t l3_bytes) {
    if (n_kv_heads < 1) return 1;
    /* items start every hb * D weight rows: a multiple of 32 where the heads
     * allow, so that each item's rows begin at a panel of the weights packed
     * once (ops/matmul/packed.c) and read them (head sizes that are multiples
     * of 32 always do) */
    if (T < LOOM_GEMM_MIN_M) { /* GEMVs: whole heads of at least 64 weight rows an item (tiny heads: one
                                  item of 8 rows costs more to set up than to compute) */
        int64_t hb = D > 0 && D < 64 ? (64 + D - 1) / D : 1;
        for (int64_t h = hb; D > 0 && h <= n_kv_heads; h++)
            if (h * D % 32 == 0) {
                hb = h;
                break;
            }
        return hb < n_kv_heads ? hb : n_kv_heads;
    }
    int64_t l3 = l3_bytes > 0 ? l3_bytes : (8 << 20);
    int64_t target = l3 / 8 / (4 * T * (D > 0 ? D : 1));
    for (int aligned = 1; aligned >= 0; aligned--)
        for (int64_t hb = target < n_kv_heads ? target : n_kv_heads; hb > 1; hb--) {
            if (n_kv_heads % hb || (aligned && hb * D % 32)) continue;
            int64_t items = (n_heads + hb - 1) / hb + 2 * (n_kv_heads / hb);
            if (items % 2 == 0 || items >= 12) return hb;
        }
    return 1;
}

static loom_status check_w(const char *name, const loom_tensor *w, int64_t rows, int64_t cols) {
    LOOM_RETURN_IF(!w || !w->data, LOOM_ERR_INVALID_ARG, "qkv_rope: %s is missing", name);
    LOOM_RETURN_IF(w->ndim != 2 || w->shape[0] != rows || w->shape[1] != cols || w->stride[1] != 1,
                   LOOM_ERR_SHAPE, "qkv_rope: %s must be [%lld, %lld] with contiguous rows", name,
                   (long long)rows, (long long)cols);
    return LOOM_OK;
}

/* Validates one call and fills c with its shapes and scratch layout; nothing
 * allocated. A size query (query = 1) has no outputs or caches to check. */
static loom_status qkv_prepare(const loom_tensor *x, const loom_tensor *w_q, const loom_tensor *w_k,
                               const loom_tensor *w_v, const loom_qkv_rope_params *p,
                               loom_tensor *q_out, loom_tensor *k_out, loom_tensor *v_out,
                               loom_tensor *key_cache, loom_tensor *value_cache, int query,
                               qkv_ctx *c) {
    LOOM_RETURN_IF(!p, LOOM_ERR_INVALID_ARG, "qkv_rope: params are required");
    LOOM_RETURN_IF(!x || x->ndim != 2, LOOM_ERR_SHAPE, "qkv_rope: x must be 2-D [T, hidden]");
    int64_t T = x->shape[0], hid = x->shape[1], N = p->num_heads, NKV = p->num_key_value_heads, D = p->head_dim;
    LOOM_RETURN_IF(N < 1 || NKV < 1 || N % NKV, LOOM_ERR_INVALID_ARG,
                   "qkv_rope: num_heads %lld must be a positive multiple of num_key_value_heads %lld",
                   (long long)N, (long long)NKV);
    int64_t n_rot = p->n_rot ? p->n_rot : D;
    LOOM_RETURN_IF(p->n_rot < 0 || p->n_rot > D, LOOM_ERR_INVALID_ARG, /* before the narrowing to int */
                   "qkv_rope: n_rot %lld outside [0, head_dim %lld]", (long long)p->n_rot, (long long)D);
    loom_rope_attrs ra = {.mode = p->rope_mode, .n_rot = (int)p->n_rot, .theta = p->theta,
                          .freq_scale = p->freq_scale};
    LOOM_TRY(loom_rope_attrs_check("qkv_rope", &ra, D)); /* the rope op's checks */
    LOOM_RETURN_IF(!query && !p->cache.positions, LOOM_ERR_INVALID_ARG, "qkv_rope: cache.positions are required");
    LOOM_RETURN_IF((unsigned)p->act_precision >= LOOM_ACT_PREC_COUNT, LOOM_ERR_INVALID_ARG,
                   "qkv_rope: unknown act_precision %d", (int)p->act_precision);
    LOOM_TRY(loom_fused_check_2d("qkv_rope", "x", x, T, hid));
    if (!query) LOOM_TRY(loom_fused_check_2d("qkv_rope", "q_out", q_out, T, N * D));
    if (k_out) LOOM_TRY(loom_fused_check_2d("qkv_rope", "k_out", k_out, T, NKV * D));
    if (v_out) LOOM_TRY(loom_fused_check_2d("qkv_rope", "v_out", v_out, T, NKV * D));
    *c = (qkv_ctx){.x = x, .T = T, .hidden = hid, .N = N, .NKV = NKV, .D = D, .n_rot = n_rot, .p = p,
                   .q_out = q_out, .k_out = k_out, .v_out = v_out, .kc = key_cache, .vc = value_cache,
                   .isa = loom_cpu_isa(), .status = LOOM_OK};
    c->f = loom_vec_fns_for(c->isa);
    if (!w_k && !w_v) {
        LOOM_TRY(check_w("w_qkv (merged)", w_q, (N + 2 * NKV) * D, hid));
        size_t row = loom_dtype_row_bytes(w_q->dtype, w_q->stride[0]);
        c->w[0] = w_q->data;
        c->w[1] = (const char *)w_q->data + row * (size_t)(N * D);
        c->w[2] = (const char *)w_q->data + row * (size_t)((N + NKV) * D);
    } else {
        LOOM_TRY(check_w("w_q", w_q, N * D, hid));
        LOOM_TRY(check_w("w_k", w_k, NKV * D, hid));
        LOOM_TRY(check_w("w_v", w_v, NKV * D, hid));
        LOOM_RETURN_IF(w_k->dtype != w_q->dtype || w_v->dtype != w_q->dtype || w_k->stride[0] != w_q->stride[0] ||
                           w_v->stride[0] != w_q->stride[0],
                       LOOM_ERR_DTYPE, "qkv_rope: w_q, w_k and w_v must share dtype and row stride");
        c->w[0] = w_q->data;
        c->w[1] = w_k->data;
        c->w[2] = w_v->data;
    }
    c->wtype = w_q->dtype;
    c->ldw = w_q->stride[0];
    if (!query) { /* validate the caches and every token's slot before any thread writes */
        LOOM_TRY(loom_kv_write_rows(&p->cache, key_cache, "key_cache", 0, NULL, 0, T, NKV, 0, NKV, D));
        LOOM_TRY(loom_kv_write_rows(&p->cache, value_cache, "value_cache", 1, NULL, 0, T, NKV, 0, NKV, D));
    }
    c->hb = loom_qkv_heads_per_block(T, D, N, NKV);
    /* the check reads no data: a size query has no q_out, x stands in */
    loom_matmul_args probe = {.x = x->data, .ldx = x->stride[0], .w = c->w[0], .ldw = c->ldw, .wtype = c->wtype,
                              .y = query ? x->data : q_out->data, .ldy = c->hb * D, .M = T,
                              .N = c->hb * D, .K = hid, .act = p->act_precision};
    LOOM_TRY(loom_matmul_check(&probe));
    c->mm_bytes = (loom_matmul_scratch_size(&probe) + 63) & ~(size_t)63;
    int64_t aw = p->rope_mode == LOOM_ROPE_INTERLEAVED ? n_rot : n_rot / 2;
    c->xq_off = (c->mm_bytes + (size_t)(2 * T * aw + T * c->hb * D) * sizeof(float) + 63) & ~(size_t)63;
    c->xq_bytes = c->isa == LOOM_ISA_REF ? 0 : loom_matmul_xq_bytes(&probe);
    c->per = (c->xq_off + c->xq_bytes + 64 + 63) & ~(size_t)63;
    return LOOM_OK;
}

loom_status loom_qkv_rope_workspace_size(const loom_tensor *x, const loom_tensor *w_q,
                                         const loom_tensor *w_k, const loom_tensor *w_v,
                                         const loom_qkv_rope_params *p, int nth, size_t *bytes) {
    LOOM_TRY(loom_fused_check_size_query("qkv_rope", nth, bytes));
    qkv_ctx c;
    LOOM_TRY(qkv_prepare(x, w_q, w_k, w_v, p, NULL, NULL, NULL, NULL, NULL, 1, &c));
    *bytes = c.per * (size_t)nth;
    return LOOM_OK;
}

loom_status loom_qkv_rope_ws(const loom_tensor *x, const loom_tensor *w_q, const loom_tensor *w_k,
                             const loom_tensor *w_v, const loom_qkv_rope_params *p,
                             loom_tensor *q_out, loom_tensor *k_out, loom_tensor *v_out,
                             loom_tensor *key_cache, loom_tensor *value_cache, void *workspace,
                             size_t bytes, loom_pool *pool) {
    qkv_ctx c;
    LOOM_TRY(qkv_prepare(x, w_q, w_k, w_v, p, q_out, k_out, v_out, key_cache, value_cache, 0, &c));
    int nth = pool ? loom_pool_size(pool) : 1;
    size_t need = c.per * (size_t)nth;
    LOOM_TRY(loom_fused_acquire("qkv_rope", workspace, bytes, need, nth, &c.scratch));
    loom_fused_run(pool, qkv_worker, &c);
    loom_fused_release(workspace, c.scratch);
    if (c.status != LOOM_OK) return loom_set_error(c.status, "%s", c.error);
    return LOOM_OK;
}

loom_status loom_qkv_rope(const loom_tensor *x, const loom_tensor *w_q, const loom_tensor *w_k,
                          const loom_tensor *w_v, const loom_qkv_rope_params *p,
                          loom_tensor *q_out, loom_tensor *k_out, loom_tensor *v_out,
                          loom_tensor *key_cache, loom_tensor *value_cache, loom_pool *pool) {
    return loom_qkv_rope_ws(x, w_q, w_k, w_v, p, q_out, k_out, v_out, key_cache, value_cache, NULL, 0, pool);
}
