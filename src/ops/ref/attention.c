/* Reference attention: out = softmax(q.k^T * scale + mask).v with GQA and an
 * optional causal mask, one query row at a time, f64 throughout. */
#include "ops/ref/ref.h"

#include "base/status.h"

#include <math.h>

static const loom_attention_attrs default_attrs = {0};

/* Keys [*lo, *hi) query row i may see: all, or up to its position (causal),
 * and from window - 1 before it (a sliding window). */
static void visible_keys(const loom_attention_attrs *at, int64_t i, int64_t Skv, int64_t *lo, int64_t *hi) {
    *lo = 0, *hi = Skv;
    if (!at->causal) return;
    int64_t e = (int64_t)at->q_pos_offset + i + 1, a = at->window > 0 ? e - at->window : 0;
    *hi = e < 0 ? 0 : e > Skv ? Skv : e;
    *lo = a < 0 ? 0 : a > *hi ? *hi : a;
}

const loom_tensor *loom_ref_attention_mask(const loom_tensor *const *src, int n_src) {
    int at = src[1]->dtype == LOOM_I8 ? 5 : 3; /* after the scales of an i8 cache */
    return n_src > at ? src[at] : NULL;
}

loom_status loom_ref_attention_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                     loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity("attention", src, n_src, 3, 6));
    const loom_tensor *q = src[0], *k = src[1], *v = src[2];
    LOOM_TRY(loom_ref_check_dtype("attention", 0, "q", q, LOOM_REF_DT(LOOM_F32)));
    /* k and v may be a half-precision or an i8 KV cache */
    LOOM_TRY(loom_ref_check_dtype("attention", 1, "k", k, LOOM_REF_FLOATS | LOOM_REF_DT(LOOM_I8)));
    LOOM_TRY(loom_ref_check_dtype("attention", 2, "v", v, LOOM_REF_FLOATS | LOOM_REF_DT(LOOM_I8)));
    const loom_attention_attrs *at = attrs;
    LOOM_RETURN_IF(at && (!(at->softcap >= 0.0f) || !isfinite(at->softcap)), LOOM_ERR_INVALID_ARG,
                   "attention: softcap = %g: expected 0 (none) or a positive finite cap", (double)at->softcap);
    int q8 = k->dtype == LOOM_I8;
    LOOM_RETURN_IF(q8 != (v->dtype == LOOM_I8), LOOM_ERR_DTYPE,
                   "attention: k is %s, v %s: an i8 cache needs both i8", loom_dtype_name(k->dtype),
                   loom_dtype_name(v->dtype));
    LOOM_RETURN_IF(n_src > (q8 ? 6 : 4) || (q8 && n_src < 5), LOOM_ERR_INVALID_ARG,
                   "attention: %d inputs: expected q, k, v%s and an optional mask", n_src,
                   q8 ? ", k_scale, v_scale (i8 cache)" : "");
    char s0[LOOM_REF_SHAPE_BUF], s1[LOOM_REF_SHAPE_BUF];
    LOOM_RETURN_IF(q->ndim != 4, LOOM_ERR_SHAPE,
                   "attention: input 0 (q) shape %s: expected [B, Sq, Hq, D]",
                   loom_ref_shape_str(q, s0, sizeof s0));
    int64_t B = q->shape[0], Sq = q->shape[1], Hq = q->shape[2], D = q->shape[3];
    LOOM_RETURN_IF(k->ndim != 4 || k->shape[0] != B || k->shape[3] != D || k->shape[2] == 0 ||
                       Hq % k->shape[2] != 0,
                   LOOM_ERR_SHAPE,
                   "attention: input 1 (k) shape %s does not fit q %s: expected [%lld, Skv, Hkv, "
                   "%lld] with Hkv > 0 dividing %lld",
                   loom_ref_shape_str(k, s1, sizeof s1), loom_ref_shape_str(q, s0, sizeof s0),
                   (long long)B, (long long)D, (long long)Hq);
    int same = v->ndim == 4;
    for (int d = 0; same && d < 4; d++) same = v->shape[d] == k->shape[d];
    LOOM_RETURN_IF(!same, LOOM_ERR_SHAPE,
                   "attention: input 2 (v) shape %s does not match input 1 (k) shape %s: expected "
                   "identical shapes",
                   loom_ref_shape_str(v, s0, sizeof s0), loom_ref_shape_str(k, s1, sizeof s1));
    for (int i = 3; q8 && i < 5; i++) { /* one scale per (b, s, kv head) row */
        const loom_tensor *sc = src[i];
        LOOM_TRY(loom_ref_check_dtype("attention", i, i == 3 ? "k_scale" : "v_scale", sc, LOOM_REF_DT(LOOM_F32)));
        LOOM_RETURN_IF(sc->ndim != 3 || sc->shape[0] != k->shape[0] || sc->shape[1] != k->shape[1] ||
                           sc->shape[2] != k->shape[2],
                       LOOM_ERR_SHAPE, "attention: input %d (%s) shape %s: expected [%lld, %lld, %lld]", i,
                       i == 3 ? "k_scale" : "v_scale", loom_ref_shape_str(sc, s0, sizeof s0),
                       (long long)k->shape[0], (long long)k->shape[1], (long long)k->shape[2]);
    }
    const loom_tensor *m = loom_ref_attention_mask(src, n_src);
    if (m) {
        LOOM_TRY(loom_ref_check_dtype("attention", n_src - 1, "mask", m, LOOM_REF_DT(LOOM_F32)));
        LOOM_RETURN_IF(m->ndim != 2 || m->shape[0] != Sq || m->shape[1] != k->shape[1],
                       LOOM_ERR_SHAPE, "attention: input %d (mask) shape %s: expected [%lld, %lld]",
                       n_src - 1, loom_ref_shape_str(m, s0, sizeof s0), (long long)Sq,
                       (long long)k->shape[1]);
    }
    loom_ref_set_dst(dst, LOOM_F32, 4, q->shape);
    return LOOM_OK;
}

void loom_ref_attention_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                             const void *attrs, loom_cost *c) {
    const loom_tensor *q = src[0], *k = src[1], *v = src[2];
    const loom_attention_attrs *at = attrs ? attrs : &default_attrs;
    double B = (double)q->shape[0], Hq = (double)q->shape[2], D = (double)q->shape[3];
    int64_t Sq = q->shape[1], Skv = k->shape[1];
    double pairs = 0.0;      /* (query, visible key) pairs per (b, h) */
    int64_t kv_lo = Skv, kv_hi = 0; /* key rows any query sees: the part of k and v read */
    for (int64_t i = 0; i < Sq; i++) {
        int64_t lo, hi;
        visible_keys(at, i, Skv, &lo, &hi);
        pairs += (double)(hi - lo);
        if (lo < kv_lo) kv_lo = lo;
        if (hi > kv_hi) kv_hi = hi;
    }
    int64_t kv_rows = kv_hi > kv_lo ? kv_hi - kv_lo : 0;
    double kv_elems = B * (double)kv_rows * (double)k->shape[2] * D;
    c->flops = B * Hq * pairs * (4.0 * D + 5.0); /* q.k and p.v, plus the softmax */
    const loom_tensor *m = loom_ref_attention_mask(src, n_src);
    c->bytes_read = (double)loom_tensor_nelem(q) * LOOM_ES(q) +
                    kv_elems * (double)(loom_dtype_size(k->dtype) + loom_dtype_size(v->dtype)) +
                    (m ? (double)loom_tensor_nelem(m) * 4.0 : 0.0);
    if (k->dtype == LOOM_I8) c->bytes_read += 2.0 * 4.0 * kv_elems / D; /* the rows' scales */
    c->bytes_written = (double)loom_tensor_nelem(q) * LOOM_ES(dst);
}

size_t loom_ref_attention_scratch(const loom_tensor *const *src, int n_src,
                                  const loom_tensor *dst, const void *attrs) {
    return (size_t)src[1]->shape[1] * sizeof(double);
}

loom_status loom_ref_attention(const loom_kernel_args *a) {
    const loom_tensor *q = a->src[0], *k = a->src[1], *v = a->src[2];
    const loom_tensor *m = loom_ref_attention_mask(a->src, a->n_src), *y = a->dst;
    const loom_tensor *ks = k->dtype == LOOM_I8 ? a->src[3] : NULL, *vs = ks ? a->src[4] : NULL;
    const loom_attention_attrs *at = a->attrs ? a->attrs : &default_attrs;
    int64_t B = q->shape[0], Sq = q->shape[1], Hq = q->shape[2], D = q->shape[3];
    int64_t Skv = k->shape[1], group = Hq / k->shape[2];
    double scale = at->scale != 0.0f ? (double)at->scale : 1.0 / sqrt((double)D);
    double *sc = a->scratch;
    LOOM_RETURN_IF(Skv > 0 && !sc, LOOM_ERR_INVALID_ARG,
                   "attention: kernel needs %lld bytes of scratch, got none",
                   (long long)(Skv * (int64_t)sizeof(double)));
    const float *qd = q->data, *md = m ? m->data : NULL;
    float *yd = y->data;
    int64_t lo, hi;
    loom_ref_split(B * Sq * Hq, a->ith, a->nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        int64_t h = t % Hq, i = (t / Hq) % Sq, b = t / (Hq * Sq);
        int64_t hk = h / group; /* GQA: each kv head serves `group` query heads */
        int64_t qo = b * q->stride[0] + i * q->stride[1] + h * q->stride[2];
        int64_t yo = b * y->stride[0] + i * y->stride[1] + h * y->stride[2];
        int64_t j0, j1;
        visible_keys(at, i, Skv, &j0, &j1);
        double mx = -INFINITY;
        for (int64_t j = 0; j < Skv; j++) {
            double s = -INFINITY;
            if (j >= j0 && j < j1) {
                int64_t ko = b * k->stride[0] + j * k->stride[1] + hk * k->stride[2];
                double dot = 0.0;
                for (int64_t d = 0; d < D; d++)
                    dot += (double)qd[qo + d * q->stride[3]] *
                           (double)loom_ref_get(k, ko + d * k->stride[3]);
                if (ks) dot *= (double)((const float *)ks->data)[b * ks->stride[0] + j * ks->stride[1] +
                                                                 hk * ks->stride[2]];
                s = dot * scale;
                if (at->softcap > 0.0f) s = (double)at->softcap * tanh(s / (double)at->softcap);
                if (md) s += (double)md[i * m->stride[0] + j * m->stride[1]];
            }
            sc[j] = s;
            if (s > mx || isnan(s)) mx = s; /* a NaN score must reach the output */
        }
        if (mx == -INFINITY) { /* no visible key: zeros, not 0/0 */
            for (int64_t d = 0; d < D; d++) yd[yo + d * y->stride[3]] = 0.0f;
            continue;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < Skv; j++) {
            sc[j] = exp(sc[j] - mx);
            sum += sc[j];
        }
        for (int64_t d = 0; d < D; d++) {
            double acc = 0.0;
            for (int64_t j = 0; j < Skv; j++) {
                /* masked keys: never read (a cache row past the visible ones may hold anything) */
                if (sc[j] == 0.0) continue;
                int64_t vo = b * v->stride[0] + j * v->stride[1] + hk * v->stride[2];
                double x = (double)loom_ref_get(v, vo + d * v->stride[3]);
                if (vs) x *= (double)((const float *)vs->data)[b * vs->stride[0] + j * vs->stride[1] +
                                                               hk * vs->stride[2]];
                acc += sc[j] * x;
            }
            yd[yo + d * y->stride[3]] = (float)(acc / sum);
        }
    }
    return LOOM_OK;
}
