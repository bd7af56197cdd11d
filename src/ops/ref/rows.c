/* Reference data-movement ops: get_rows (embedding lookup from an f32/f16/bf16 or
 * GGUF block table), copy (contiguous, with dtype conversion) and kv_append (write
 * rows into a KV cache in place). */
#include "ops/ref/ref.h"

#include "base/status.h"
#include "ops/quant.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------- get_rows */

loom_status loom_ref_get_rows_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                    loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity("get_rows", src, n_src, 2, 2));
    const loom_tensor *table = src[0], *ids = src[1];
    char s[LOOM_REF_SHAPE_BUF];
    LOOM_TRY(loom_ref_check_dtype("get_rows", 0, "table", table, LOOM_REF_FLOATS | LOOM_REF_QUANTS));
    LOOM_TRY(loom_ref_check_dtype("get_rows", 1, "ids", ids, LOOM_REF_DT(LOOM_I32)));
    LOOM_RETURN_IF(table->ndim != 2, LOOM_ERR_SHAPE,
                   "get_rows: input 0 (table) shape %s: expected [V, D]",
                   loom_ref_shape_str(table, s, sizeof s));
    LOOM_RETURN_IF(ids->ndim != 1, LOOM_ERR_SHAPE, "get_rows: input 1 (ids) shape %s: expected [n]",
                   loom_ref_shape_str(ids, s, sizeof s));
    /* block rows are only addressable whole: contiguous, starting on block boundaries */
    LOOM_RETURN_IF(loom_dtype_is_quantized(table->dtype) &&
                       (table->shape[1] % LOOM_QBLOCK || table->stride[1] != 1 ||
                        table->stride[0] % LOOM_QBLOCK),
                   LOOM_ERR_SHAPE,
                   "get_rows: input 0 (table) of dtype %s needs D (%lld) and its row stride (%lld) "
                   "to be multiples of %d and contiguous rows",
                   loom_dtype_name(table->dtype), (long long)table->shape[1],
                   (long long)table->stride[0], LOOM_QBLOCK);
    int64_t shape[2] = {ids->shape[0], table->shape[1]};
    loom_ref_set_dst(dst, LOOM_F32, 2, shape);
    return LOOM_OK;
}

void loom_ref_get_rows_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                            const void *attrs, loom_cost *c) {
    double n = (double)src[1]->shape[0], D = (double)src[0]->shape[1];
    c->flops = 0.0;
    c->bytes_read = n * 4.0 + n * (double)loom_dtype_row_bytes(src[0]->dtype, (int64_t)D);
    c->bytes_written = n * D * LOOM_ES(dst);
}

loom_status loom_ref_get_rows(const loom_kernel_args *a) {
    const loom_tensor *table = a->src[0], *ids = a->src[1];
    const loom_tensor *y = a->dst;
    int64_t V = table->shape[0], D = table->shape[1];
    const int32_t *idd = ids->data;
    float *yd = y->data;
    int64_t lo, hi;
    loom_ref_split(ids->shape[0], a->ith, a->nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        int32_t id = idd[i * ids->stride[0]];
        /* ids come from user input (token ids): check before touching the table */
        LOOM_RETURN_IF(id < 0 || id >= V, LOOM_ERR_INVALID_ARG,
                       "get_rows: id %d at position %lld is outside [0, V) with V = %lld", (int)id,
                       (long long)i, (long long)V);
        if (loom_dtype_is_quantized(table->dtype)) {
            /* dequantize the row one block of 32 at a time */
            const char *row = (const char *)table->data +
                              loom_dtype_row_bytes(table->dtype, id * table->stride[0]);
            size_t bb = loom_dtype_block_bytes(table->dtype);
            float blk[LOOM_QBLOCK];
            for (int64_t d0 = 0; d0 < D; d0 += LOOM_QBLOCK) {
                loom_row_to_f32(table->dtype, row + (size_t)(d0 / LOOM_QBLOCK) * bb, blk, LOOM_QBLOCK);
                for (int64_t d = d0; d < d0 + LOOM_QBLOCK; d++)
                    yd[i * y->stride[0] + d * y->stride[1]] = blk[d - d0];
            }
            continue;
        }
        for (int64_t d = 0; d < D; d++)
            yd[i * y->stride[0] + d * y->stride[1]] =
                loom_ref_get(table, id * table->stride[0] + d * table->stride[1]);
    }
    return LOOM_OK;
}

/* ---------------------------------------------------------- copy */

loom_status loom_ref_copy_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity("copy", src, n_src, 1, 1));
    LOOM_TRY(loom_ref_check_dtype("copy", 0, "x", src[0], LOOM_REF_FLOATS));
    const loom_copy_attrs *at = attrs;
    LOOM_RETURN_IF(!at, LOOM_ERR_INVALID_ARG, "copy: attributes (output dtype) missing");
    LOOM_RETURN_IF((unsigned)at->dtype >= LOOM_DTYPE_COUNT ||
                       !(LOOM_REF_FLOATS & LOOM_REF_DT(at->dtype)),
                   LOOM_ERR_DTYPE,
                   "copy: output dtype %s: expected f32/f16/bf16", loom_dtype_name(at->dtype));
    loom_ref_set_dst(dst, at->dtype, src[0]->ndim, src[0]->shape);
    return LOOM_OK;
}

void loom_ref_copy_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                        const void *attrs, loom_cost *c) {
    double n = (double)loom_tensor_nelem(src[0]);
    c->flops = 0.0;
    c->bytes_read = n * (double)loom_dtype_size(src[0]->dtype);
    c->bytes_written = n * (double)loom_dtype_size(dst->dtype);
}

loom_status loom_ref_copy(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0];
    const loom_tensor *y = a->dst;
    size_t es = loom_dtype_size(x->dtype);
    int same = x->dtype == y->dtype;
    int64_t lo, hi;
    loom_ref_split(loom_tensor_nelem(x), a->ith, a->nth, &lo, &hi);
    for (int64_t e = lo; e < hi; e++) {
        int64_t xo = loom_ref_row_offset(x, x->ndim, e);
        int64_t yo = loom_ref_row_offset(y, y->ndim, e);
        if (same) /* bit copy: keeps NaN payloads and avoids a rounding round trip */
            memcpy((char *)y->data + (size_t)yo * es, (const char *)x->data + (size_t)xo * es, es);
        else
            loom_ref_put(y, yo, loom_ref_get(x, xo));
    }
    return LOOM_OK;
}

/* ---------------------------------------------------------- kv_append */

loom_status loom_ref_kv_append_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                     loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity("kv_append", src, n_src, 2, 3));
    const loom_tensor *cache = src[0], *x = src[1];
    LOOM_TRY(loom_ref_check_dtype("kv_append", 0, "cache", cache, LOOM_REF_FLOATS | LOOM_REF_DT(LOOM_I8)));
    LOOM_TRY(loom_ref_check_dtype("kv_append", 1, "x", x, LOOM_REF_DT(LOOM_F32)));
    const loom_kv_append_attrs *at = attrs;
    LOOM_RETURN_IF(!at, LOOM_ERR_INVALID_ARG, "kv_append: attributes (pos) missing");
    char cs[LOOM_REF_SHAPE_BUF], xs[LOOM_REF_SHAPE_BUF];
    int q8 = cache->dtype == LOOM_I8;
    LOOM_RETURN_IF(q8 != (n_src == 3), LOOM_ERR_INVALID_ARG,
                   "kv_append: %s cache with %d inputs: an i8 cache takes a third input (its scales), "
                   "other caches two", loom_dtype_name(cache->dtype), n_src);
    if (q8) {
        const loom_tensor *sc = src[2];
        LOOM_TRY(loom_ref_check_dtype("kv_append", 2, "scale", sc, LOOM_REF_DT(LOOM_F32)));
        int fits = cache->ndim >= 2 && sc->ndim == cache->ndim - 1;
        for (int d = 0; fits && d < sc->ndim; d++) fits = sc->shape[d] == cache->shape[d];
        LOOM_RETURN_IF(!fits, LOOM_ERR_SHAPE,
                       "kv_append: input 2 (scale) shape %s does not fit the i8 cache %s: expected its "
                       "dims but the last", loom_ref_shape_str(sc, xs, sizeof xs),
                       loom_ref_shape_str(cache, cs, sizeof cs));
    }
    int same = x->ndim == cache->ndim;
    for (int d = 1; same && d < x->ndim; d++) same = x->shape[d] == cache->shape[d];
    LOOM_RETURN_IF(!same, LOOM_ERR_SHAPE,
                   "kv_append: input 1 (x) shape %s does not match input 0 (cache) shape %s: "
                   "expected [n] followed by the cache's trailing dims",
                   loom_ref_shape_str(x, xs, sizeof xs), loom_ref_shape_str(cache, cs, sizeof cs));
    int64_t n = x->shape[0], smax = cache->shape[0];
    LOOM_RETURN_IF(at->pos < 0 || at->pos + n > smax, LOOM_ERR_INVALID_ARG,
                   "kv_append: rows [%d, %lld) do not fit the cache of %lld rows: expected "
                   "0 <= pos and pos + n <= %lld",
                   at->pos, (long long)(at->pos + n), (long long)smax, (long long)smax);
    int64_t shape[LOOM_MAX_DIMS];
    memcpy(shape, cache->shape, sizeof shape);
    shape[0] = at->pos + n;
    loom_ref_set_dst(dst, cache->dtype, cache->ndim, shape);
    return LOOM_OK;
}

void loom_ref_kv_append_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                             const void *attrs, loom_cost *c) {
    double n = (double)loom_tensor_nelem(src[1]);
    c->flops = 0.0;
    c->bytes_read = n * LOOM_ES(src[1]);
    c->bytes_written = n * (double)loom_dtype_size(src[0]->dtype);
    if (n_src == 3) /* i8: a scale per row of the last dim */
        c->bytes_written += 4.0 * n / (double)src[1]->shape[src[1]->ndim - 1];
}

loom_status loom_ref_kv_append(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[1];
    const loom_tensor *y = a->dst; /* aliases the cache: rows [0, pos + n) */
    const loom_kv_append_attrs *at = a->attrs;
    int64_t n = x->shape[0];
    LOOM_RETURN_IF(!at || at->pos < 0 || at->pos + n > y->shape[0], LOOM_ERR_INVALID_ARG,
                   "kv_append: pos %d with %lld rows does not fit the output view of %lld rows",
                   at ? at->pos : -1, (long long)n, (long long)y->shape[0]);
    /* x row i goes to view row pos + i; the other dims map one to one */
    loom_tensor shifted = *y;
    shifted.shape[0] = n;
    shifted.data = (char *)y->data +
                   (size_t)(at->pos * y->stride[0]) * loom_dtype_size(y->dtype);
    int64_t lo, hi;
    if (y->dtype == LOOM_I8) { /* row by row of the last dim: scale, then the quantized row */
        const loom_tensor *st = a->src[2];
        int64_t D = x->shape[x->ndim - 1], rows = loom_tensor_nelem(x) / (D ? D : 1);
        loom_tensor ss = *st; /* the scales of rows pos.. */
        ss.shape[0] = n;
        ss.data = (float *)st->data + at->pos * st->stride[0];
        loom_ref_split(rows, a->ith, a->nth, &lo, &hi);
        for (int64_t r = lo; r < hi; r++) {
            int64_t xo = loom_ref_row_offset(x, x->ndim - 1, r), yo = loom_ref_row_offset(&shifted, x->ndim - 1, r);
            int64_t xd = x->stride[x->ndim - 1], yd = shifted.stride[x->ndim - 1];
            float amax = 0.0f;
            for (int64_t d = 0; d < D; d++) {
                float v = fabsf(loom_ref_get(x, xo + d * xd));
                amax = v > amax ? v : amax;
            }
            float sc = loom_i8_row_scale(amax);
            for (int64_t d = 0; d < D; d++)
                ((int8_t *)shifted.data)[yo + d * yd] = loom_i8_quant(loom_ref_get(x, xo + d * xd), sc);
            ((float *)ss.data)[loom_ref_row_offset(&ss, ss.ndim, r)] = sc;
        }
        return LOOM_OK;
    }
    loom_ref_split(loom_tensor_nelem(x), a->ith, a->nth, &lo, &hi);
    for (int64_t e = lo; e < hi; e++)
        loom_ref_put(&shifted, loom_ref_row_offset(&shifted, x->ndim, e),
                     loom_ref_get(x, loom_ref_row_offset(x, x->ndim, e)));
    return LOOM_OK;
}

/* ---------------------------------------------------------- kv_write */

loom_status loom_ref_kv_write_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                    loom_tensor *dst) {
    (void)attrs;
    LOOM_TRY(loom_ref_check_arity("kv_write", src, n_src, 3, 4));
    const loom_tensor *cache = src[0], *x = src[1], *slots = src[2];
    LOOM_TRY(loom_ref_check_dtype("kv_write", 0, "cache", cache, LOOM_REF_FLOATS | LOOM_REF_DT(LOOM_I8)));
    LOOM_TRY(loom_ref_check_dtype("kv_write", 1, "x", x, LOOM_REF_DT(LOOM_F32)));
    LOOM_TRY(loom_ref_check_dtype("kv_write", 2, "slots", slots, LOOM_REF_DT(LOOM_I32)));
    char cs[LOOM_REF_SHAPE_BUF], xs[LOOM_REF_SHAPE_BUF];
    int ok = cache->ndim == x->ndim && slots->ndim == 1 && slots->shape[0] == x->shape[0];
    for (int d = 1; ok && d < x->ndim; d++) ok = cache->shape[d] == x->shape[d];
    LOOM_RETURN_IF(!ok, LOOM_ERR_SHAPE, "kv_write: cache %s and x %s with %lld slots: expected [n_slots, ...] "
                   "and [T, ...] alike but for the first dim, and one slot per row of x",
                   loom_ref_shape_str(cache, cs, sizeof cs), loom_ref_shape_str(x, xs, sizeof xs),
                   (long long)slots->shape[0]);
    LOOM_RETURN_IF((cache->dtype == LOOM_I8) != (n_src == 4), LOOM_ERR_INVALID_ARG,
                   "kv_write: %s cache with %d inputs: an i8 cache takes a fourth input (its scales), "
                   "other caches none", loom_dtype_name(cache->dtype), n_src);
    if (n_src == 4) {
        const loom_tensor *sc = src[3];
        LOOM_TRY(loom_ref_check_dtype("kv_write", 3, "scale", sc, LOOM_REF_DT(LOOM_F32)));
        ok = sc->ndim == cache->ndim - 1;
        for (int d = 0; ok && d < sc->ndim; d++) ok = sc->shape[d] == cache->shape[d];
        LOOM_RETURN_IF(!ok, LOOM_ERR_SHAPE, "kv_write: input 3 (scale) must have the cache's dims but the last");
    }
    loom_ref_set_dst(dst, cache->dtype, cache->ndim, cache->shape);
    return LOOM_OK;
}

void loom_ref_kv_write_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs,
                            loom_cost *c) {
    (void)dst, (void)attrs;
    const loom_tensor *x = src[1];
    double n = (double)loom_tensor_nelem(x), T = (double)x->shape[0];
    c->flops = 0.0;
    c->bytes_read = LOOM_ES(x) * n + 4.0 * T;
    c->bytes_written = (double)loom_dtype_size(src[0]->dtype) * n;
    if (n_src == 4) c->bytes_written += 4.0 * n / (double)x->shape[x->ndim - 1];
}

/* The slot of row t, checked against the cache: -1 skips the row. */
loom_status loom_kv_write_slot(const loom_tensor *slots, const loom_tensor *cache, int64_t t, int64_t *slot) {
    int64_t s = ((const int32_t *)slots->data)[t * slots->stride[0]];
    LOOM_RETURN_IF(s >= cache->shape[0], LOOM_ERR_INVALID_ARG, "kv_write: row %lld goes to slot %lld of a cache "
                   "of %lld", (long long)t, (long long)s, (long long)cache->shape[0]);
    *slot = s < 0 ? -1 : s;
    return LOOM_OK;
}

loom_status loom_ref_kv_write(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[1], *slots = a->src[2], *y = a->dst; /* y aliases the cache */
    const int nd = x->ndim;
    const int64_t T = x->shape[0], D = x->shape[nd - 1], per_row = loom_tensor_nelem(x) / (T ? T : 1);
    int64_t lo, hi;
    loom_ref_split(T, a->ith, a->nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        int64_t slot = -1;
        LOOM_TRY(loom_kv_write_slot(slots, y, t, &slot));
        if (slot < 0) continue;
        loom_tensor xr, yr;
        LOOM_TRY(loom_tensor_view_rows(x, t, 1, &xr));
        LOOM_TRY(loom_tensor_view_rows(y, slot, 1, &yr));
        if (y->dtype != LOOM_I8) {
            for (int64_t e = 0; e < per_row; e++)
                loom_ref_put(&yr, loom_ref_row_offset(&yr, nd, e), loom_ref_get(&xr, loom_ref_row_offset(&xr, nd, e)));
            continue;
        }
        loom_tensor sr; /* the scales of this slot: one per last-dim row */
        LOOM_TRY(loom_tensor_view_rows(a->src[3], slot, 1, &sr));
        for (int64_t r = 0; r < per_row / D; r++) {
            int64_t xo = loom_ref_row_offset(&xr, nd - 1, r), yo = loom_ref_row_offset(&yr, nd - 1, r);
            int64_t xd = xr.stride[nd - 1], yd = yr.stride[nd - 1];
            float amax = 0.0f;
            for (int64_t d = 0; d < D; d++) {
                float v = fabsf(loom_ref_get(&xr, xo + d * xd));
                amax = v > amax ? v : amax;
            }
            float sc = loom_i8_row_scale(amax);
            for (int64_t d = 0; d < D; d++) ((int8_t *)yr.data)[yo + d * yd] = loom_i8_quant(loom_ref_get(&xr, xo + d * xd), sc);
            ((float *)sr.data)[loom_ref_row_offset(&sr, sr.ndim, r)] = sc;
        }
    }
    return LOOM_OK;
}
