/* Tensor descriptors and views. Descriptors never own memory. */
#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const struct { const char *name; int block; size_t bytes; } dtype_info[] = {
    [LOOM_F32] = {"f32", 1, 4},     [LOOM_F16] = {"f16", 1, 2},     [LOOM_BF16] = {"bf16", 1, 2},
    [LOOM_I32] = {"i32", 1, 4},     [LOOM_I8] = {"i8", 1, 1},       [LOOM_Q8_0] = {"q8_0", 32, 34},
    [LOOM_Q4_0] = {"q4_0", 32, 18}, [LOOM_Q4_1] = {"q4_1", 32, 20},
};
_Static_assert(sizeof(dtype_info) / sizeof(dtype_info[0]) == LOOM_DTYPE_COUNT,
               "dtype_info must describe every loom_dtype");

const char *loom_dtype_name(loom_dtype t) {
    return (unsigned)t < LOOM_DTYPE_COUNT ? dtype_info[t].name : "unknown";
}

size_t loom_dtype_size(loom_dtype t) {
    return (unsigned)t < LOOM_DTYPE_COUNT && dtype_info[t].block == 1 ? dtype_info[t].bytes : 0;
}

int loom_dtype_is_quantized(loom_dtype t) {
    return (unsigned)t < LOOM_DTYPE_COUNT && dtype_info[t].block > 1;
}

int loom_dtype_block_elems(loom_dtype t) {
    return (unsigned)t < LOOM_DTYPE_COUNT ? dtype_info[t].block : 1;
}

size_t loom_dtype_block_bytes(loom_dtype t) {
    return (unsigned)t < LOOM_DTYPE_COUNT ? dtype_info[t].bytes : 0;
}

size_t loom_dtype_row_bytes(loom_dtype t, int64_t n) {
    if ((unsigned)t >= LOOM_DTYPE_COUNT || n <= 0) return 0;
    return (size_t)(n / dtype_info[t].block) * dtype_info[t].bytes;
}

static void set_contiguous_strides(loom_tensor *t) {
    int64_t s = 1;
    for (int i = LOOM_MAX_DIMS - 1; i >= 0; i--) {
        t->stride[i] = s;
        if (i < t->ndim) s *= t->shape[i];
    }
}

loom_status loom_tensor_init(loom_tensor *t, loom_dtype dtype, int ndim,
                             const int64_t *shape, void *data) {
    LOOM_RETURN_IF(!t || !shape, LOOM_ERR_INVALID_ARG, "tensor_init: NULL argument");
    LOOM_RETURN_IF((unsigned)dtype >= LOOM_DTYPE_COUNT, LOOM_ERR_DTYPE,
                   "tensor_init: unknown dtype %d", (int)dtype);
    LOOM_RETURN_IF(ndim < 1 || ndim > LOOM_MAX_DIMS, LOOM_ERR_SHAPE,
                   "tensor_init: ndim %d out of range 1..%d", ndim, LOOM_MAX_DIMS);
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < LOOM_MAX_DIMS; i++) {
        if (i < ndim) {
            LOOM_RETURN_IF(shape[i] < 0, LOOM_ERR_SHAPE,
                           "tensor_init: negative size %lld in dim %d", (long long)shape[i], i);
            t->shape[i] = shape[i];
        } else {
            t->shape[i] = 1;
        }
    }
    set_contiguous_strides(t);
    t->data = data;
    LOOM_RETURN_IF(loom_dtype_is_quantized(dtype) && t->shape[ndim - 1] % LOOM_QBLOCK != 0,
                   LOOM_ERR_SHAPE, "tensor_init: %s rows must be a multiple of %d elements, got %lld",
                   loom_dtype_name(dtype), LOOM_QBLOCK, (long long)t->shape[ndim - 1]);
    return LOOM_OK;
}

int64_t loom_tensor_nelem(const loom_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t loom_tensor_nbytes(const loom_tensor *t) {
    int64_t n = loom_tensor_nelem(t);
    if (n == 0) return 0;
    /* span from the first to the last element, plus one element */
    int64_t last = 0;
    for (int i = 0; i < t->ndim; i++) last += (t->shape[i] - 1) * t->stride[i];
    if (loom_dtype_is_quantized(t->dtype))  /* rows are whole blocks */
        return loom_dtype_row_bytes(t->dtype, last + 1 + (LOOM_QBLOCK - 1));
    return (size_t)(last + 1) * loom_dtype_size(t->dtype);
}

int loom_tensor_is_contiguous(const loom_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return 0;
        s *= t->shape[i];
    }
    return 1;
}

loom_status loom_tensor_view_rows(const loom_tensor *t, int64_t row0, int64_t nrows,
                                  loom_tensor *view) {
    LOOM_RETURN_IF(row0 < 0 || nrows < 0 || row0 + nrows > t->shape[0], LOOM_ERR_SHAPE,
                   "view_rows: rows [%lld, %lld) outside tensor '%s' with %lld rows",
                   (long long)row0, (long long)(row0 + nrows), t->name, (long long)t->shape[0]);
    loom_tensor v = *t;
    v.shape[0] = nrows;
    if (t->data)
        v.data = (char *)t->data + loom_dtype_row_bytes(t->dtype, row0 * t->stride[0]);
    *view = v;
    return LOOM_OK;
}

loom_status loom_tensor_permute(const loom_tensor *t, const int *perm, loom_tensor *view) {
    int seen[LOOM_MAX_DIMS] = {0};
    loom_tensor v = *t;
    for (int i = 0; i < t->ndim; i++) {
        LOOM_RETURN_IF(perm[i] < 0 || perm[i] >= t->ndim || seen[perm[i]], LOOM_ERR_INVALID_ARG,
                       "permute: perm is not a permutation of 0..%d", t->ndim - 1);
        seen[perm[i]] = 1;
        v.shape[i] = t->shape[perm[i]];
        v.stride[i] = t->stride[perm[i]];
    }
    *view = v;
    return LOOM_OK;
}

loom_status loom_tensor_reshape(const loom_tensor *t, int ndim, const int64_t *shape,
                                loom_tensor *view) {
    LOOM_RETURN_IF(!loom_tensor_is_contiguous(t), LOOM_ERR_SHAPE,
                   "reshape: tensor '%s' is not contiguous", t->name);
    loom_tensor v;
    LOOM_TRY(loom_tensor_init(&v, t->dtype, ndim, shape, t->data));
    LOOM_RETURN_IF(loom_tensor_nelem(&v) != loom_tensor_nelem(t), LOOM_ERR_SHAPE,
                   "reshape: '%s' has %lld elements, new shape has %lld", t->name,
                   (long long)loom_tensor_nelem(t), (long long)loom_tensor_nelem(&v));
    memcpy(v.name, t->name, sizeof v.name);
    *view = v;
    return LOOM_OK;
}

void loom_tensor_set_name(loom_tensor *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
}
