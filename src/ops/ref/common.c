/* Helpers shared by the reference kernels: checks, messages, strided element access. */
#include "ops/ref/ref.h"

#include "base/status.h"

#include <math.h>
#include <stdio.h>

const char *loom_ref_shape_str(const loom_tensor *t, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    len += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? ", " : "",
                                (long long)t->shape[i]);
    if (len < n) snprintf(buf + len, n - len, "]");
    return buf;
}

loom_status loom_ref_check_arity(const char *op, const loom_tensor *const *src, int n_src,
                                 int lo, int hi) {
    if (lo == hi)
        LOOM_RETURN_IF(n_src != lo, LOOM_ERR_INVALID_ARG, "%s: expected %d inputs, found %d",
                       op, lo, n_src);
    else
        LOOM_RETURN_IF(n_src < lo || n_src > hi, LOOM_ERR_INVALID_ARG,
                       "%s: expected %d..%d inputs, found %d", op, lo, hi, n_src);
    LOOM_RETURN_IF(!src, LOOM_ERR_INVALID_ARG, "%s: input array is NULL", op);
    for (int i = 0; i < n_src; i++) {
        LOOM_RETURN_IF(!src[i], LOOM_ERR_INVALID_ARG, "%s: input %d is NULL", op, i);
        LOOM_RETURN_IF(src[i]->ndim < 1 || src[i]->ndim > LOOM_MAX_DIMS, LOOM_ERR_SHAPE,
                       "%s: input %d has ndim %d: expected 1..%d", op, i, src[i]->ndim,
                       LOOM_MAX_DIMS);
        LOOM_RETURN_IF((unsigned)src[i]->dtype >= LOOM_DTYPE_COUNT, LOOM_ERR_DTYPE,
                       "%s: input %d has unknown dtype %d", op, i, (int)src[i]->dtype);
        for (int d = 0; d < src[i]->ndim; d++)
            LOOM_RETURN_IF(src[i]->shape[d] < 0, LOOM_ERR_SHAPE,
                           "%s: input %d has negative size %lld in dim %d", op, i,
                           (long long)src[i]->shape[d], d);
    }
    return LOOM_OK;
}

loom_status loom_ref_check_dtype(const char *op, int idx, const char *what,
                                 const loom_tensor *t, unsigned allowed) {
    if ((unsigned)t->dtype < LOOM_DTYPE_COUNT && (allowed & LOOM_REF_DT(t->dtype))) return LOOM_OK;
    char list[64] = "";
    size_t len = 0;
    for (int d = 0; d < LOOM_DTYPE_COUNT; d++)
        if (allowed & LOOM_REF_DT(d))
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", len ? "/" : "",
                                    loom_dtype_name((loom_dtype)d));
    return loom_set_error(LOOM_ERR_DTYPE, "%s: input %d (%s) has dtype %s: expected %s", op, idx,
                          what, loom_dtype_name(t->dtype), list);
}

void loom_ref_set_dst(loom_tensor *dst, loom_dtype dtype, int ndim, const int64_t *shape) {
    dst->dtype = dtype;
    dst->ndim = ndim;
    for (int i = 0; i < LOOM_MAX_DIMS; i++) dst->shape[i] = i < ndim ? shape[i] : 1;
}

float loom_ref_get(const loom_tensor *t, int64_t off) {
    switch (t->dtype) {
    case LOOM_F32: return ((const float *)t->data)[off];
    case LOOM_F16: return loom_f16_to_f32(((const uint16_t *)t->data)[off]);
    case LOOM_BF16: return loom_bf16_to_f32(((const uint16_t *)t->data)[off]);
    case LOOM_I32: return (float)((const int32_t *)t->data)[off];
    case LOOM_I8: return (float)((const int8_t *)t->data)[off];
    default: return NAN;
    }
}

void loom_ref_put(const loom_tensor *t, int64_t off, float v) {
    switch (t->dtype) {
    case LOOM_F32: ((float *)t->data)[off] = v; break;
    case LOOM_F16: ((uint16_t *)t->data)[off] = loom_f32_to_f16(v); break;
    case LOOM_BF16: ((uint16_t *)t->data)[off] = loom_f32_to_bf16(v); break;
    default: break; /* infer never lets another dtype reach a store */
    }
}

int64_t loom_ref_rows(const loom_tensor *t, int n_lead) {
    int64_t n = 1;
    for (int d = 0; d < n_lead; d++) n *= t->shape[d];
    return n;
}

int64_t loom_ref_row_offset(const loom_tensor *t, int n_lead, int64_t r) {
    int64_t off = 0;
    for (int d = n_lead - 1; d >= 0; d--) {
        off += (r % t->shape[d]) * t->stride[d];
        r /= t->shape[d];
    }
    return off;
}

void loom_ref_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    if (nth < 1) nth = 1;
    *lo = n * ith / nth;
    *hi = n * (ith + 1) / nth;
}
