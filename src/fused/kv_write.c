/* loom_reshape_and_cache: new K/V rows into contiguous or paged caches of the
 * decode attention's layouts, converting to the cache dtype on the way. */
#include <math.h>
#include <string.h>

#include "base/status.h"
#include "fused/fused_internal.h"
#include "ops/quant.h"

/* Validated view of one cache for row addressing. */
typedef struct cache_ref {
    loom_tensor *t;
    int64_t nblk, slots, heads, D;     /* blocks (or batches), slots per block, N_kv, D */
    int64_t s_blk, s_slot, s_head;     /* strides in elements */
    loom_tensor *scale, *offset;       /* i8 only */
} cache_ref;

static loom_status cache_open(const char *name, loom_tensor *t, loom_attn_layout lay, int64_t heads,
                              int64_t D, cache_ref *c) {
    LOOM_RETURN_IF(!t || !t->data, LOOM_ERR_INVALID_ARG, "reshape_and_cache: %s is missing", name);
    LOOM_RETURN_IF(t->dtype != LOOM_F32 && t->dtype != LOOM_F16 && t->dtype != LOOM_BF16 &&
                       t->dtype != LOOM_I8,
                   LOOM_ERR_DTYPE, "reshape_and_cache: %s dtype %s: expected f32, f16, bf16 or i8",
                   name, loom_dtype_name(t->dtype));
    memset(c, 0, sizeof *c);
    c->t = t;
    c->heads = heads;
    c->D = D;
    int ok;
    if (lay == LOOM_ATTN_BSND || lay == LOOM_ATTN_BNSD) {
        int bnsd = lay == LOOM_ATTN_BNSD;
        ok = t->ndim == 4 && t->shape[bnsd ? 1 : 2] == heads && t->shape[3] == D && t->stride[3] == 1;
        c->nblk = t->shape[0];
        c->slots = t->shape[bnsd ? 2 : 1];
        c->s_blk = t->stride[0];
        c->s_slot = t->stride[bnsd ? 2 : 1];
        c->s_head = t->stride[bnsd ? 1 : 2];
    } else if (lay == LOOM_ATTN_BSH) {
        ok = t->ndim == 3 && t->shape[2] == heads * D && t->stride[2] == 1;
        c->nblk = t->shape[0];
        c->slots = t->shape[1];
        c->s_blk = t->stride[0];
        c->s_slot = t->stride[1];
        c->s_head = D;
    } else {
        return loom_set_error(LOOM_ERR_INVALID_ARG,
                              "reshape_and_cache: cache_layout %s: expected BSND, BNSD or BSH",
                              loom_attn_layout_name(lay));
    }
    LOOM_RETURN_IF(!ok, LOOM_ERR_SHAPE,
                   "reshape_and_cache: %s does not have layout %s with N_kv=%lld, D=%lld (contiguous D)",
                   name, loom_attn_layout_name(lay), (long long)heads, (long long)D);
    return LOOM_OK;
}

static loom_status check_scale(const char *name, const loom_tensor *s, int mode, const cache_ref *c) {
    LOOM_RETURN_IF(!s || !s->data || s->dtype != LOOM_F32 || !loom_tensor_is_contiguous(s),
                   LOOM_ERR_INVALID_ARG, "reshape_and_cache: i8 cache needs a contiguous f32 %s", name);
    int64_t want = mode == LOOM_ANTIQUANT_PER_CHANNEL ? c->heads * c->D : c->nblk * c->heads * c->slots;
    LOOM_RETURN_IF(loom_tensor_nelem(s) != want, LOOM_ERR_SHAPE,
                   "reshape_and_cache: %s has %lld elements, expected %lld (%s)", name,
                   (long long)loom_tensor_nelem(s), (long long)want,
                   mode == LOOM_ANTIQUANT_PER_CHANNEL ? "[N_kv, D]" : "[blocks, N_kv, slots]");
    return LOOM_OK;
}

/* Stores one head row x[D] at (blk, slot, h). */
static void store_row(const cache_ref *c, int mode, int64_t blk, int64_t slot, int64_t h, const float *x) {
    int64_t off = blk * c->s_blk + slot * c->s_slot + h * c->s_head;
    switch (c->t->dtype) {
    case LOOM_F32: memcpy((float *)c->t->data + off, x, (size_t)c->D * sizeof(float)); break;
    case LOOM_F16:
        for (int64_t d = 0; d < c->D; d++) ((uint16_t *)c->t->data)[off + d] = loom_f32_to_f16(x[d]);
        break;
    case LOOM_BF16:
        for (int64_t d = 0; d < c->D; d++) ((uint16_t *)c->t->data)[off + d] = loom_f32_to_bf16(x[d]);
        break;
    default: {  /* i8: q = round(x / scale - offset) */
        int8_t *q = (int8_t *)c->t->data + off;
        float *sc = c->scale->data, *of = c->offset ? c->offset->data : NULL;
        if (mode == LOOM_ANTIQUANT_PER_TOKEN) {
            int64_t si = (blk * c->heads + h) * c->slots + slot;
            sc[si] = loom_quantize_row_i8(x, c->D, q);
            if (of) of[si] = 0.0f;
        } else {
            for (int64_t d = 0; d < c->D; d++) {
                int64_t ci = h * c->D + d;
                float v = x[d] / sc[ci] - (of ? of[ci] : 0.0f);
                q[d] = (int8_t)lrintf(fminf(127.0f, fmaxf(-128.0f, v)));
            }
        }
    }
    }
}

/* Resolves token t to (block, slot); returns 0 for a token to skip. */
static loom_status locate(const loom_kv_write_params *p, const cache_ref *c, int64_t t, int64_t *blk,
                          int64_t *slot, int *skip) {
    int64_t b = p->batch_ids ? p->batch_ids[t] : 0, s = p->positions[t];
    *skip = s < 0;
    if (*skip) return LOOM_OK;
    if (p->block_table) {
        const loom_tensor *bt = p->block_table;
        LOOM_RETURN_IF(b < 0 || b >= bt->shape[0], LOOM_ERR_INVALID_ARG,
                       "reshape_and_cache: batch_ids[%lld] = %lld outside the block table's %lld rows",
                       (long long)t, (long long)b, (long long)bt->shape[0]);
        int64_t j = s / c->slots;
        LOOM_RETURN_IF(j >= bt->shape[1], LOOM_ERR_INVALID_ARG,
                       "reshape_and_cache: position %lld needs block %lld, block table has %lld",
                       (long long)s, (long long)j, (long long)bt->shape[1]);
        int64_t id = ((const int32_t *)bt->data)[b * bt->stride[0] + j * bt->stride[1]];
        LOOM_RETURN_IF(id < 0 || id >= c->nblk, LOOM_ERR_INVALID_ARG,
                       "reshape_and_cache: block_table[%lld][%lld] = %lld outside [0, %lld)",
                       (long long)b, (long long)j, (long long)id, (long long)c->nblk);
        *blk = id;
        *slot = s % c->slots;
    } else {
        LOOM_RETURN_IF(b < 0 || b >= c->nblk, LOOM_ERR_INVALID_ARG,
                       "reshape_and_cache: batch_ids[%lld] = %lld outside the cache's batch of %lld",
                       (long long)t, (long long)b, (long long)c->nblk);
        LOOM_RETURN_IF(s >= c->slots, LOOM_ERR_INVALID_ARG,
                       "reshape_and_cache: positions[%lld] = %lld beyond the cache length %lld",
                       (long long)t, (long long)s, (long long)c->slots);
        *blk = b;
        *slot = s;
    }
    return LOOM_OK;
}

/* Internal entry used by qkv_rope too: x row t holds heads [h0, h0 + nh) of token t
 * (nh*D floats); the cache has n_kv heads. With x NULL only validates. Every
 * token is located before anything is written, so an error leaves the cache as it was. */
loom_status loom_kv_write_rows(const loom_kv_write_params *p, loom_tensor *cache, const char *name,
                               int is_value, const float *x, int64_t ldx, int64_t T, int64_t n_kv,
                               int64_t h0, int64_t nh, int64_t D) {
    cache_ref c;
    LOOM_TRY(cache_open(name, cache, p->cache_layout, n_kv, D, &c));
    if (cache->dtype == LOOM_I8) {
        c.scale = is_value ? p->value_scale : p->key_scale;
        c.offset = is_value ? p->value_offset : p->key_offset;
        LOOM_TRY(check_scale(is_value ? "value_scale" : "key_scale", c.scale, p->antiquant_mode, &c));
        if (c.offset) LOOM_TRY(check_scale(is_value ? "value_offset" : "key_offset", c.offset, p->antiquant_mode, &c));
    }
    for (int pass = 0; pass < (x ? 2 : 1); pass++)
        for (int64_t t = 0; t < T; t++) {
            int64_t blk = 0, slot = 0;
            int skip = 1;
            LOOM_TRY(locate(p, &c, t, &blk, &slot, &skip));
            if (skip || pass == 0) continue;
            for (int64_t h = 0; h < nh; h++)
                store_row(&c, p->antiquant_mode, blk, slot, h0 + h, x + t * ldx + h * D);
        }
    return LOOM_OK;
}

loom_status loom_reshape_and_cache(const loom_tensor *key, const loom_tensor *value,
                                   loom_tensor *key_cache, loom_tensor *value_cache,
                                   const loom_kv_write_params *p) {
    LOOM_RETURN_IF(!p || !p->positions, LOOM_ERR_INVALID_ARG, "reshape_and_cache: positions are required");
    const loom_tensor *src[2] = {key, value};
    for (int i = 0; i < 2; i++) {
        const loom_tensor *s = src[i];
        LOOM_RETURN_IF(!s || !s->data || s->dtype != LOOM_F32 || s->ndim != 3 || s->stride[2] != 1 ||
                           s->stride[1] != s->shape[2],
                       LOOM_ERR_SHAPE, "reshape_and_cache: %s must be f32 [T, N_kv, D] with contiguous heads",
                       i ? "value" : "key");
    }
    LOOM_RETURN_IF(value->shape[0] != key->shape[0] || value->shape[1] != key->shape[1] ||
                       value->shape[2] != key->shape[2],
                   LOOM_ERR_SHAPE, "reshape_and_cache: key and value shapes differ");
    int64_t T = key->shape[0], N = key->shape[1], D = key->shape[2];
    LOOM_TRY(loom_kv_write_rows(p, value_cache, "value_cache", 1, NULL, 0, T, N, 0, N, D));
    LOOM_TRY(loom_kv_write_rows(p, key_cache, "key_cache", 0, key->data, key->stride[0], T, N, 0, N, D));
    return loom_kv_write_rows(p, value_cache, "value_cache", 1, value->data, value->stride[0], T, N, 0, N, D);
}
