/* Drivers of the vectorised primitive ops, shared by every ISA level: layout
 * checks (anything the row functions do not cover goes to the reference
 * kernel), the (ith, nth) split and per-row set-up. See vec.h. */
#include "ops/vec/vec.h"

#include "base/status.h"
#include "ops/quant.h"
#include "ops/ref/ref.h"

#include <math.h>
#include <string.h>

/* The last dim is unit-stride (or has at most one element). */
static int unit_last(const loom_tensor *t) {
    return t->stride[t->ndim - 1] == 1 || t->shape[t->ndim - 1] <= 1;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Offsets of consecutive rows (the first n_lead dims enumerated row-major),
 * advanced like an odometer: loom_ref_row_offset's divisions per row cost
 * more than rotating or normalising a 128-float row. */
typedef struct {
    const loom_tensor *t;
    int n_lead;
    int64_t idx[LOOM_MAX_DIMS]; /* index of the current row in each leading dim */
    int64_t off;                /* its element offset */
} row_iter;

static void row_iter_init(row_iter *it, const loom_tensor *t, int n_lead, int64_t r) {
    it->t = t;
    it->n_lead = n_lead;
    it->off = loom_ref_row_offset(t, n_lead, r);
    for (int d = n_lead - 1; d >= 0; d--) {
        it->idx[d] = r % t->shape[d];
        r /= t->shape[d];
    }
}

static void row_iter_next(row_iter *it) {
    const loom_tensor *t = it->t;
    for (int d = it->n_lead - 1; d >= 0; d--) {
        it->off += t->stride[d];
        if (++it->idx[d] < t->shape[d]) return;
        it->off -= t->shape[d] * t->stride[d];
        it->idx[d] = 0;
    }
}

/* ---------------------------------------------------------- elementwise */

typedef void (*binary_fn)(const float *, const float *, float *, int64_t);

/* Contiguous operands split over flat elements (a single long row still uses
 * every thread); otherwise rows of the unit-stride last dim. Elementwise
 * results do not depend on the split either way. */
static loom_status binary(const loom_kernel_args *a, binary_fn fn, loom_kernel_fn ref) {
    const loom_tensor *x = a->src[0], *y = a->src[1], *z = a->dst;
    const float *xd = x->data, *yd = y->data;
    float *zd = z->data;
    int64_t lo, hi;
    if (loom_tensor_is_contiguous(x) && loom_tensor_is_contiguous(y) &&
        loom_tensor_is_contiguous(z)) {
        loom_ref_split(loom_tensor_nelem(x), a->ith, a->nth, &lo, &hi);
        if (hi > lo) fn(xd + lo, yd + lo, zd + lo, hi - lo);
        return LOOM_OK;
    }
    if (!unit_last(x) || !unit_last(y) || !unit_last(z)) return ref(a);
    int last = x->ndim - 1;
    int64_t D = x->shape[last];
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    if (hi <= lo) return LOOM_OK;
    row_iter ix, iy, iz;
    row_iter_init(&ix, x, last, lo);
    row_iter_init(&iy, y, last, lo);
    row_iter_init(&iz, z, last, lo);
    for (int64_t r = lo; r < hi; r++) {
        fn(xd + ix.off, yd + iy.off, zd + iz.off, D);
        row_iter_next(&ix);
        row_iter_next(&iy);
        row_iter_next(&iz);
    }
    return LOOM_OK;
}

loom_status loom_vec_add(const loom_kernel_args *a, const loom_vec_fns *f) {
    return binary(a, f->add, loom_ref_add);
}

loom_status loom_vec_mul(const loom_kernel_args *a, const loom_vec_fns *f) {
    return binary(a, f->mul, loom_ref_mul);
}

loom_status loom_vec_silu(const loom_kernel_args *a, const loom_vec_fns *f) {
    const loom_tensor *x = a->src[0], *y = a->dst;
    const float *xd = x->data;
    float *yd = y->data;
    int64_t lo, hi;
    if (loom_tensor_is_contiguous(x) && loom_tensor_is_contiguous(y)) {
        loom_ref_split(loom_tensor_nelem(x), a->ith, a->nth, &lo, &hi);
        if (hi > lo) f->silu(xd + lo, yd + lo, hi - lo);
        return LOOM_OK;
    }
    if (!unit_last(x) || !unit_last(y)) return loom_ref_silu(a);
    int last = x->ndim - 1;
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    if (hi <= lo) return LOOM_OK;
    row_iter ix, iy;
    row_iter_init(&ix, x, last, lo);
    row_iter_init(&iy, y, last, lo);
    for (int64_t r = lo; r < hi; r++) {
        f->silu(xd + ix.off, yd + iy.off, x->shape[last]);
        row_iter_next(&ix);
        row_iter_next(&iy);
    }
    return LOOM_OK;
}

/* ---------------------------------------------------------- rms_norm */

loom_status loom_vec_rms_norm(const loom_kernel_args *a, const loom_vec_fns *f) {
    const loom_tensor *x = a->src[0], *g = a->n_src == 2 ? a->src[1] : NULL, *y = a->dst;
    const loom_rms_norm_attrs *at = a->attrs;
    LOOM_RETURN_IF(!at, LOOM_ERR_INVALID_ARG, "rms_norm: attributes (eps) missing");
    if (!unit_last(x) || !unit_last(y) || (g && !unit_last(g))) return loom_ref_rms_norm(a);
    int last = x->ndim - 1;
    int64_t D = x->shape[last];
    const float *xd = x->data, *gd = g ? g->data : NULL;
    float *yd = y->data;
    int64_t lo, hi;
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    if (hi <= lo) return LOOM_OK;
    row_iter ix, iy;
    row_iter_init(&ix, x, last, lo);
    row_iter_init(&iy, y, last, lo);
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = xd + ix.off;
        /* the reference's formula, in double, on a double sum of squares */
        double inv = 1.0 / sqrt(f->sumsq(xr, D) / (double)D + (double)at->eps);
        f->scale_row(xr, gd, inv, yd + iy.off, D);
        row_iter_next(&ix);
        row_iter_next(&iy);
    }
    return LOOM_OK;
}

/* ---------------------------------------------------------- softmax */

loom_status loom_vec_softmax(const loom_kernel_args *a, const loom_vec_fns *f) {
    static const loom_softmax_attrs defaults = {0};
    const loom_tensor *x = a->src[0], *m = a->n_src == 2 ? a->src[1] : NULL, *y = a->dst;
    const loom_softmax_attrs *at = a->attrs ? a->attrs : &defaults;
    if (!unit_last(x) || !unit_last(y) || (m && !unit_last(m))) return loom_ref_softmax(a);
    int nd = x->ndim, last = nd - 1;
    int64_t C = x->shape[last];
    float scale = at->scale != 0.0f ? at->scale : 1.0f;
    const float *xd = x->data, *md = m ? m->data : NULL;
    float *yd = y->data;
    int64_t lo, hi;
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    if (hi <= lo) return LOOM_OK;
    row_iter ix, iy;
    row_iter_init(&ix, x, last, lo);
    row_iter_init(&iy, y, last, lo);
    for (int64_t r = lo; r < hi; r++) {
        /* row within [R, C]: indexes the mask and the causal limit */
        int64_t i = nd >= 2 ? ix.idx[nd - 2] : 0;
        const float *mr = md ? md + (m->ndim == 2 ? i * m->stride[0] : 0) : NULL;
        int64_t n_valid = at->causal ? clamp64((int64_t)at->pos_offset + i + 1, 0, C) : C;
        f->softmax(xd + ix.off, mr, yd + iy.off, C, n_valid, scale);
        row_iter_next(&ix);
        row_iter_next(&iy);
    }
    return LOOM_OK;
}

/* ---------------------------------------------------------- rope */

static int64_t rope_n_rot(const loom_tensor *x, const loom_rope_attrs *at) {
    int64_t D = x->shape[x->ndim - 1];
    return at && at->n_rot ? at->n_rot : D;
}

size_t loom_vec_rope_scratch(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                             const void *attrs) {
    int64_t n_rot = rope_n_rot(src[0], attrs);
    /* freq[n_rot/2], cos[n_rot], sin[n_rot] (cos/sin duplicated per pair when interleaved) */
    return (size_t)(n_rot / 2 + 2 * n_rot) * sizeof(float) + 64;
}

void loom_vec_rope_freqs(const loom_rope_attrs *at, int64_t n_rot, float *freq) {
    for (int64_t i = 0; i < n_rot / 2; i++)
        freq[i] = 1.0f / powf(at->theta, (float)(2 * i) / (float)n_rot);
}

void loom_vec_rope_table(const loom_rope_attrs *at, int64_t n_rot, const float *freq, int64_t s,
                         float *cs, float *sn) {
    int64_t half = n_rot / 2;
    int interleaved = at->mode != LOOM_ROPE_HALF;
    float fscale = at->freq_scale != 0.0f ? at->freq_scale : 1.0f;
    float p = (float)(at->pos_offset + s) * fscale;
    for (int64_t i = 0; i < half; i++) {
        float angle = p * freq[i];
        float c = cosf(angle), sv = sinf(angle);
        if (interleaved) {
            cs[2 * i] = cs[2 * i + 1] = c;
            sn[2 * i] = sn[2 * i + 1] = sv;
        } else {
            cs[i] = c;
            sn[i] = sv;
        }
    }
}

loom_status loom_vec_rope(const loom_kernel_args *a, const loom_vec_fns *f) {
    const loom_tensor *x = a->src[0], *y = a->dst;
    const loom_rope_attrs *at = a->attrs;
    LOOM_RETURN_IF(!at, LOOM_ERR_INVALID_ARG, "rope: attributes missing");
    if (!unit_last(x) || !unit_last(y) || !a->scratch) return loom_ref_rope(a);
    int nd = x->ndim, last = nd - 1;
    int64_t D = x->shape[last];
    int64_t n_rot = rope_n_rot(x, at), half = n_rot / 2;
    int interleaved = at->mode != LOOM_ROPE_HALF;
    float *freq = a->scratch, *cs = freq + half, *sn = cs + n_rot;
    /* The same float expressions as the reference (and llama2.c): the angles
     * must agree to the last bit for greedy output to match byte for byte. */
    loom_vec_rope_freqs(at, n_rot, freq);
    const float *xd = x->data;
    float *yd = y->data;
    int64_t lo, hi, cur_s = -1;
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    if (hi <= lo) return LOOM_OK;
    /* positions per row (input 1): the table of position p is that of row p at offset 0 */
    const loom_tensor *pt = a->n_src > 1 ? a->src[1] : NULL;
    loom_rope_attrs at0 = *at;
    at0.pos_offset = 0;
    row_iter ix, iy;
    row_iter_init(&ix, x, last, lo);
    row_iter_init(&iy, y, last, lo);
    for (int64_t r = lo; r < hi; r++, row_iter_next(&ix), row_iter_next(&iy)) {
        int64_t s = ix.idx[nd - 3];
        if (s != cur_s) { /* rows run over heads first: one table per position */
            if (pt) {
                int64_t p = ((const int32_t *)pt->data)[s * pt->stride[0]];
                LOOM_RETURN_IF(p < 0, LOOM_ERR_INVALID_ARG, "rope: row %lld has position %lld", (long long)s,
                               (long long)p);
                loom_vec_rope_table(&at0, n_rot, freq, p, cs, sn);
            } else {
                loom_vec_rope_table(at, n_rot, freq, s, cs, sn);
            }
            cur_s = s;
        }
        const float *xr = xd + ix.off;
        float *yr = yd + iy.off;
        if (interleaved)
            f->rope_interleaved(xr, yr, cs, sn, n_rot);
        else
            f->rope_half(xr, yr, cs, sn, half);
        if (yr != xr && D > n_rot) memmove(yr + n_rot, xr + n_rot, (size_t)(D - n_rot) * sizeof(float));
    }
    return LOOM_OK;
}

/* ---------------------------------------------------------- get_rows */

loom_status loom_vec_get_rows(const loom_kernel_args *a, const loom_vec_fns *f) {
    const loom_tensor *table = a->src[0], *ids = a->src[1], *y = a->dst;
    loom_dtype dt = table->dtype;
    int quant = loom_dtype_is_quantized(dt);
    /* block formats are row-contiguous by construction */
    if (!unit_last(y) || (!quant && !unit_last(table))) return loom_ref_get_rows(a);
    int64_t V = table->shape[0], D = table->shape[1];
    const int32_t *idd = ids->data;
    int64_t lo, hi;
    loom_ref_split(ids->shape[0], a->ith, a->nth, &lo, &hi);
    /* ids come from user input (token ids): check them all before writing */
    for (int64_t i = lo; i < hi; i++) {
        int32_t id = idd[i * ids->stride[0]];
        LOOM_RETURN_IF(id < 0 || id >= V, LOOM_ERR_INVALID_ARG,
                       "get_rows: id %d at position %lld is outside [0, V) with V = %lld", (int)id,
                       (long long)i, (long long)V);
    }
    for (int64_t i = lo; i < hi; i++) {
        int64_t off = (int64_t)idd[i * ids->stride[0]] * table->stride[0];
        float *yr = (float *)y->data + i * y->stride[0];
        if (quant) {
            loom_dequantize_row(dt, (const char *)table->data + loom_dtype_row_bytes(dt, off), yr, D);
        } else if (dt == LOOM_F32) {
            memcpy(yr, (const float *)table->data + off, (size_t)D * sizeof(float));
        } else if (dt == LOOM_F16) {
            f->f16_to_f32((const uint16_t *)table->data + off, yr, D);
        } else if (dt == LOOM_BF16) {
            f->bf16_to_f32((const uint16_t *)table->data + off, yr, D);
        } else {
            return loom_ref_get_rows(a); /* a dtype added to the reference later */
        }
    }
    return LOOM_OK;
}

/* ---------------------------------------------------------- copy */

void loom_vec_convert(const loom_vec_fns *f, loom_dtype xt, const void *xp, loom_dtype yt, void *yp,
                    int64_t n) {
    if (xt == yt) { /* bit copy: keeps NaN payloads, as the reference does */
        memcpy(yp, xp, (size_t)n * loom_dtype_size(xt));
        return;
    }
    if (xt == LOOM_F32) {
        (yt == LOOM_F16 ? f->f32_to_f16 : f->f32_to_bf16)(xp, yp, n);
        return;
    }
    void (*widen)(const uint16_t *, float *, int64_t) =
        xt == LOOM_F16 ? f->f16_to_f32 : f->bf16_to_f32;
    if (yt == LOOM_F32) {
        widen(xp, yp, n);
        return;
    }
    /* f16 <-> bf16 goes through f32 (exact), in cache-sized pieces */
    float tmp[512];
    const uint16_t *xs = xp;
    uint16_t *ys = yp;
    for (int64_t i = 0; i < n; i += 512) {
        int64_t k = n - i < 512 ? n - i : 512;
        widen(xs + i, tmp, k);
        (yt == LOOM_F16 ? f->f32_to_f16 : f->f32_to_bf16)(tmp, ys + i, k);
    }
}

loom_status loom_vec_copy(const loom_kernel_args *a, const loom_vec_fns *f) {
    const loom_tensor *x = a->src[0], *y = a->dst;
    size_t xs = loom_dtype_size(x->dtype), ys = loom_dtype_size(y->dtype);
    if (!xs || !ys) return loom_ref_copy(a);
    int64_t lo, hi;
    if (loom_tensor_is_contiguous(x) && loom_tensor_is_contiguous(y)) {
        loom_ref_split(loom_tensor_nelem(x), a->ith, a->nth, &lo, &hi);
        if (hi > lo)
            loom_vec_convert(f, x->dtype, (const char *)x->data + (size_t)lo * xs, y->dtype,
                    (char *)y->data + (size_t)lo * ys, hi - lo);
        return LOOM_OK;
    }
    /* a permuted view with a unit-stride last dim: row by row */
    if (!unit_last(x) || !unit_last(y)) return loom_ref_copy(a);
    int last = x->ndim - 1;
    loom_ref_split(loom_ref_rows(x, last), a->ith, a->nth, &lo, &hi);
    if (hi <= lo) return LOOM_OK;
    row_iter ix, iy;
    row_iter_init(&ix, x, last, lo);
    row_iter_init(&iy, y, last, lo);
    for (int64_t r = lo; r < hi; r++) {
        loom_vec_convert(f, x->dtype, (const char *)x->data + (size_t)ix.off * xs, y->dtype,
                (char *)y->data + (size_t)iy.off * ys, x->shape[last]);
        row_iter_next(&ix);
        row_iter_next(&iy);
    }
    return LOOM_OK;
}
