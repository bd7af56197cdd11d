/* GGUF writer: metadata is encoded as it is set; tensor data is borrowed (or
 * produced by a callback) and streamed out at write time. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/gguf_internal.h"

typedef struct wtensor {
    char name[LOOM_GGUF_MAX_NAME + 1];
    uint32_t type;
    int n_dims;
    int64_t ne[LOOM_GGUF_MAX_DIMS];   /* GGUF order, innermost first */
    uint64_t nbytes, offset;
    const void *data;
    loom_gguf_fill_fn fill;
    void *ctx;
} wtensor;

struct loom_gguf_writer {
    uint32_t version, alignment;
    unsigned char *kv;      /* encoded metadata entries */
    size_t kv_len, kv_cap;
    char **keys;            /* (n_kv) copies, for duplicate checks */
    uint64_t n_kv;
    size_t keys_cap;
    wtensor *tensors;
    int64_t n_tensors;
    size_t tensors_cap;
};

loom_status loom_gguf_writer_init(loom_gguf_writer **out) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "gguf writer: out is NULL");
    *out = calloc(1, sizeof **out);
    LOOM_RETURN_IF(!*out, LOOM_ERR_NOMEM, "gguf writer: out of memory");
    (*out)->version = 3;
    (*out)->alignment = LOOM_GGUF_DEFAULT_ALIGNMENT;
    return LOOM_OK;
}

void loom_gguf_writer_free(loom_gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    free(w->kv);
    free(w->tensors);
    free(w);
}

loom_status loom_gguf_writer_set_version(loom_gguf_writer *w, uint32_t version) {
    LOOM_RETURN_IF(!w, LOOM_ERR_INVALID_ARG, "gguf writer: NULL writer");
    LOOM_RETURN_IF(version != 2 && version != 3, LOOM_ERR_INVALID_ARG,
                   "gguf writer: version %" PRIu32 " (only 2 and 3 are written)", version);
    w->version = version;
    return LOOM_OK;
}

/* ------------------------------------------------------------ encoding */

static loom_status kv_put(loom_gguf_writer *w, const void *p, size_t n) {
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 256;
        while (cap < w->kv_len + n) cap *= 2;
        unsigned char *grown = realloc(w->kv, cap);
        LOOM_RETURN_IF(!grown, LOOM_ERR_NOMEM, "gguf writer: out of memory for %zu bytes", cap);
        w->kv = grown;
        w->kv_cap = cap;
    }
    if (n) memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return LOOM_OK;
}

static void le_bytes(unsigned char *b, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static loom_status kv_u32(loom_gguf_writer *w, uint32_t v) {
    unsigned char b[4];
    le_bytes(b, v, 4);
    return kv_put(w, b, 4);
}

static loom_status kv_u64(loom_gguf_writer *w, uint64_t v) {
    unsigned char b[8];
    le_bytes(b, v, 8);
    return kv_put(w, b, 8);
}

static loom_status kv_str(loom_gguf_writer *w, const char *s, uint64_t len) {
    LOOM_TRY(kv_u64(w, len));
    return kv_put(w, s, (size_t)len);
}

/* Checks key, records it, and writes the key and the value type. On a later
 * failure the entry is rolled back by the caller via kv_len. */
static loom_status begin_kv(loom_gguf_writer *w, const char *key, uint32_t type) {
    LOOM_RETURN_IF(!w || !key, LOOM_ERR_INVALID_ARG, "gguf writer: NULL writer or key");
    size_t len = strlen(key);
    LOOM_RETURN_IF(len == 0 || len > 65535, LOOM_ERR_INVALID_ARG,
                   "gguf writer: key of %zu bytes (must be 1..65535)", len);
    for (uint64_t i = 0; i < w->n_kv; i++)
        LOOM_RETURN_IF(strcmp(w->keys[i], key) == 0, LOOM_ERR_INVALID_ARG,
                       "gguf writer: duplicate key '%s'", key);
    if (w->n_kv == w->keys_cap) {
        size_t cap = w->keys_cap ? w->keys_cap * 2 : 16;
        char **grown = realloc(w->keys, cap * sizeof *grown);
        LOOM_RETURN_IF(!grown, LOOM_ERR_NOMEM, "gguf writer: out of memory");
        w->keys = grown;
        w->keys_cap = cap;
    }
    char *copy = malloc(len + 1);
    LOOM_RETURN_IF(!copy, LOOM_ERR_NOMEM, "gguf writer: out of memory");
    memcpy(copy, key, len + 1);
    size_t mark = w->kv_len;
    loom_status st = kv_str(w, key, len);
    if (st == LOOM_OK) st = kv_u32(w, type);
    if (st != LOOM_OK) {
        w->kv_len = mark;
        free(copy);
        return st;
    }
    w->keys[w->n_kv++] = copy;
    return LOOM_OK;
}

/* Drops the entry begun last (after a failure while writing its value). */
static void abort_kv(loom_gguf_writer *w, size_t mark) {
    w->kv_len = mark;
    free(w->keys[--w->n_kv]);
}

static loom_status set_scalar(loom_gguf_writer *w, const char *key, uint32_t type, uint64_t bits) {
    if (w && key && strcmp(key, "general.alignment") == 0) {
        LOOM_RETURN_IF(type != LOOM_GGUF_UINT32, LOOM_ERR_INVALID_ARG,
                       "gguf writer: general.alignment must be uint32");
        LOOM_RETURN_IF(bits == 0 || (bits & (bits - 1)) != 0, LOOM_ERR_INVALID_ARG,
                       "gguf writer: alignment %" PRIu64 " is not a power of two", bits);
    }
    size_t mark = w ? w->kv_len : 0;
    LOOM_TRY(begin_kv(w, key, type));
    unsigned char b[8];
    size_t n = loom_gguf_value_size(type);
    le_bytes(b, bits, n);
    loom_status st = kv_put(w, b, n);
    if (st != LOOM_OK) {
        abort_kv(w, mark);
        return st;
    }
    if (strcmp(key, "general.alignment") == 0) w->alignment = (uint32_t)bits;
    return LOOM_OK;
}

loom_status loom_gguf_writer_set_alignment(loom_gguf_writer *w, uint32_t alignment) {
    return set_scalar(w, "general.alignment", LOOM_GGUF_UINT32, alignment);
}

static uint64_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static uint64_t f64_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

loom_status loom_gguf_writer_set_u8(loom_gguf_writer *w, const char *k, uint8_t v) {
    return set_scalar(w, k, LOOM_GGUF_UINT8, v);
}
loom_status loom_gguf_writer_set_i8(loom_gguf_writer *w, const char *k, int8_t v) {
    return set_scalar(w, k, LOOM_GGUF_INT8, (uint8_t)v);
}
loom_status loom_gguf_writer_set_u16(loom_gguf_writer *w, const char *k, uint16_t v) {
    return set_scalar(w, k, LOOM_GGUF_UINT16, v);
}
loom_status loom_gguf_writer_set_i16(loom_gguf_writer *w, const char *k, int16_t v) {
    return set_scalar(w, k, LOOM_GGUF_INT16, (uint16_t)v);
}
loom_status loom_gguf_writer_set_u32(loom_gguf_writer *w, const char *k, uint32_t v) {
    return set_scalar(w, k, LOOM_GGUF_UINT32, v);
}
loom_status loom_gguf_writer_set_i32(loom_gguf_writer *w, const char *k, int32_t v) {
    return set_scalar(w, k, LOOM_GGUF_INT32, (uint32_t)v);
}
loom_status loom_gguf_writer_set_u64(loom_gguf_writer *w, const char *k, uint64_t v) {
    return set_scalar(w, k, LOOM_GGUF_UINT64, v);
}
loom_status loom_gguf_writer_set_i64(loom_gguf_writer *w, const char *k, int64_t v) {
    return set_scalar(w, k, LOOM_GGUF_INT64, (uint64_t)v);
}
loom_status loom_gguf_writer_set_f32(loom_gguf_writer *w, const char *k, float v) {
    return set_scalar(w, k, LOOM_GGUF_FLOAT32, f32_bits(v));
}
loom_status loom_gguf_writer_set_f64(loom_gguf_writer *w, const char *k, double v) {
    return set_scalar(w, k, LOOM_GGUF_FLOAT64, f64_bits(v));
}
loom_status loom_gguf_writer_set_bool(loom_gguf_writer *w, const char *k, int v) {
    return set_scalar(w, k, LOOM_GGUF_BOOL, v != 0);
}

loom_status loom_gguf_writer_set_str_n(loom_gguf_writer *w, const char *key, const char *s, size_t len) {
    LOOM_RETURN_IF(!s && len, LOOM_ERR_INVALID_ARG, "gguf writer: NULL string for key '%s'", key ? key : "");
    size_t mark = w ? w->kv_len : 0;
    LOOM_TRY(begin_kv(w, key, LOOM_GGUF_STRING));
    loom_status st = kv_str(w, s, len);
    if (st != LOOM_OK) abort_kv(w, mark);
    return st;
}

loom_status loom_gguf_writer_set_str(loom_gguf_writer *w, const char *key, const char *s) {
    LOOM_RETURN_IF(!s, LOOM_ERR_INVALID_ARG, "gguf writer: NULL string for key '%s'", key ? key : "");
    return loom_gguf_writer_set_str_n(w, key, s, strlen(s));
}

/* Begins an array entry: key, type ARRAY, element type, count. */
static loom_status begin_arr(loom_gguf_writer *w, const char *key, loom_gguf_type et, uint64_t n) {
    LOOM_RETURN_IF((unsigned)et >= LOOM_GGUF_TYPE_COUNT, LOOM_ERR_INVALID_ARG,
                   "gguf writer: array '%s' has unknown element type %d", key ? key : "", (int)et);
    size_t mark = w ? w->kv_len : 0;
    LOOM_TRY(begin_kv(w, key, LOOM_GGUF_ARRAY));
    loom_status st = kv_u32(w, (uint32_t)et);
    if (st == LOOM_OK) st = kv_u64(w, n);
    if (st != LOOM_OK) abort_kv(w, mark);
    return st;
}

loom_status loom_gguf_writer_set_arr(loom_gguf_writer *w, const char *key, loom_gguf_type et,
                                     const void *data, uint64_t n) {
    size_t es = loom_gguf_value_size((uint32_t)et);
    LOOM_RETURN_IF(es == 0, LOOM_ERR_INVALID_ARG, "gguf writer: array '%s': element type %s is not "
                   "fixed-size (use set_arr_str or set_arr_raw)", key ? key : "",
                   loom_gguf_type_name(et));
    LOOM_RETURN_IF(!data && n, LOOM_ERR_INVALID_ARG, "gguf writer: NULL data for '%s'", key ? key : "");
    LOOM_RETURN_IF(n > SIZE_MAX / 8, LOOM_ERR_INVALID_ARG, "gguf writer: array too long");
    size_t mark = w ? w->kv_len : 0;
    LOOM_TRY(begin_arr(w, key, et, n));
    loom_status st = LOOM_OK;
    const unsigned char *p = data;
    for (uint64_t i = 0; i < n && st == LOOM_OK; i++) {
        /* From host order to little-endian, one element at a time. */
        uint64_t v = 0;
        if (es == 1) v = p[i];
        else if (es == 2) { uint16_t x; memcpy(&x, p + i * 2, 2); v = x; }
        else if (es == 4) { uint32_t x; memcpy(&x, p + i * 4, 4); v = x; }
        else memcpy(&v, p + i * 8, 8);
        unsigned char b[8];
        le_bytes(b, v, es);
        st = kv_put(w, b, es);
    }
    if (st != LOOM_OK) abort_kv(w, mark);
    return st;
}

loom_status loom_gguf_writer_set_arr_str(loom_gguf_writer *w, const char *key,
                                         const char *const *strs, const uint64_t *lens, uint64_t n) {
    LOOM_RETURN_IF(!strs && n, LOOM_ERR_INVALID_ARG, "gguf writer: NULL strings for '%s'", key ? key : "");
    for (uint64_t i = 0; i < n; i++)
        LOOM_RETURN_IF(!strs[i] && (!lens || lens[i]), LOOM_ERR_INVALID_ARG,
                       "gguf writer: string %" PRIu64 " of '%s' is NULL", i, key ? key : "");
    size_t mark = w ? w->kv_len : 0;
    LOOM_TRY(begin_arr(w, key, LOOM_GGUF_STRING, n));
    loom_status st = LOOM_OK;
    for (uint64_t i = 0; i < n && st == LOOM_OK; i++)
        st = kv_str(w, strs[i] ? strs[i] : "", lens ? lens[i] : strlen(strs[i]));
    if (st != LOOM_OK) abort_kv(w, mark);
    return st;
}

loom_status loom_gguf_writer_set_arr_raw(loom_gguf_writer *w, const char *key, loom_gguf_type et,
                                         uint64_t n, const void *payload, size_t size) {
    LOOM_RETURN_IF(!payload && size, LOOM_ERR_INVALID_ARG, "gguf writer: NULL payload for '%s'",
                   key ? key : "");
    size_t mark = w ? w->kv_len : 0;
    LOOM_TRY(begin_arr(w, key, et, n));
    loom_status st = kv_put(w, payload, size);
    if (st != LOOM_OK) abort_kv(w, mark);
    return st;
}

/* ------------------------------------------------------------- tensors */

static loom_status add_tensor(loom_gguf_writer *w, const char *name, uint32_t type, int ndim,
                              const int64_t *shape, wtensor *t) {
    LOOM_RETURN_IF(!w || !name || !shape, LOOM_ERR_INVALID_ARG, "gguf writer: NULL argument");
    size_t len = strlen(name);
    LOOM_RETURN_IF(len == 0 || len > LOOM_GGUF_MAX_NAME, LOOM_ERR_INVALID_ARG,
                   "gguf writer: tensor name '%s' has %zu bytes (must be 1..%d)", name, len,
                   LOOM_GGUF_MAX_NAME);
    LOOM_RETURN_IF(!loom_ggml_type_name(type), LOOM_ERR_INVALID_ARG,
                   "gguf writer: tensor '%s' has unknown ggml type %" PRIu32, name, type);
    LOOM_RETURN_IF(ndim < 1 || ndim > LOOM_GGUF_MAX_DIMS, LOOM_ERR_INVALID_ARG,
                   "gguf writer: tensor '%s' has %d dims (must be 1..%d)", name, ndim, LOOM_GGUF_MAX_DIMS);
    for (int64_t i = 0; i < w->n_tensors; i++)
        LOOM_RETURN_IF(strcmp(w->tensors[i].name, name) == 0, LOOM_ERR_INVALID_ARG,
                       "gguf writer: duplicate tensor '%s'", name);
    memset(t, 0, sizeof *t);
    memcpy(t->name, name, len + 1);
    t->type = type;
    t->n_dims = ndim;
    for (int d = 0; d < LOOM_GGUF_MAX_DIMS; d++) t->ne[d] = d < ndim ? shape[ndim - 1 - d] : 1;
    if (loom_ggml_nbytes(type, t->ne, ndim, &t->nbytes) != LOOM_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", loom_last_error());
        return loom_set_error(LOOM_ERR_SHAPE, "gguf writer: tensor '%s': %s", name, why);
    }
    LOOM_RETURN_IF(t->nbytes > SIZE_MAX / 2, LOOM_ERR_SHAPE, "gguf writer: tensor '%s' too large", name);
    return LOOM_OK;
}

static loom_status push_tensor(loom_gguf_writer *w, const wtensor *t) {
    if ((size_t)w->n_tensors == w->tensors_cap) {
        size_t cap = w->tensors_cap ? w->tensors_cap * 2 : 16;
        wtensor *grown = realloc(w->tensors, cap * sizeof *grown);
        LOOM_RETURN_IF(!grown, LOOM_ERR_NOMEM, "gguf writer: out of memory");
        w->tensors = grown;
        w->tensors_cap = cap;
    }
    w->tensors[w->n_tensors++] = *t;
    return LOOM_OK;
}

loom_status loom_gguf_writer_add_tensor(loom_gguf_writer *w, const char *name, uint32_t type, int ndim,
                                        const int64_t *shape, const void *data, size_t nbytes) {
    wtensor t;
    LOOM_TRY(add_tensor(w, name, type, ndim, shape, &t));
    LOOM_RETURN_IF(t.nbytes != nbytes, LOOM_ERR_SHAPE, "gguf writer: tensor '%s' of type %s "
                   "and this shape has %" PRIu64 " bytes, %zu given", name, loom_ggml_type_name(type),
                   t.nbytes, nbytes);
    LOOM_RETURN_IF(!data, LOOM_ERR_INVALID_ARG, "gguf writer: tensor '%s' has no data", name);
    t.data = data;
    return push_tensor(w, &t);
}

loom_status loom_gguf_writer_add_tensor_fn(loom_gguf_writer *w, const char *name, uint32_t type,
                                           int ndim, const int64_t *shape, loom_gguf_fill_fn fill,
                                           void *ctx) {
    wtensor t;
    LOOM_TRY(add_tensor(w, name, type, ndim, shape, &t));
    LOOM_RETURN_IF(!fill, LOOM_ERR_INVALID_ARG, "gguf writer: tensor '%s' has no fill function", name);
    t.fill = fill;
    t.ctx = ctx;
    return push_tensor(w, &t);
}

/* --------------------------------------------------------------- output */

typedef struct sink {
    FILE *f;                 /* file output, or */
    unsigned char *buf;      /* memory output */
    size_t n, cap;
    const char *path;
} sink;

static loom_status emit(sink *s, const void *p, size_t n) {
    if (n == 0) return LOOM_OK;
    if (s->f) {
        LOOM_RETURN_IF(fwrite(p, 1, n, s->f) != n, LOOM_ERR_IO, "gguf writer: cannot write '%s': %s",
                       s->path, strerror(errno));
        return LOOM_OK;
    }
    if (s->n + n > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->n + n) cap *= 2;
        unsigned char *grown = realloc(s->buf, cap);
        LOOM_RETURN_IF(!grown, LOOM_ERR_NOMEM, "gguf writer: out of memory for %zu bytes", cap);
        s->buf = grown;
        s->cap = cap;
    }
    memcpy(s->buf + s->n, p, n);
    s->n += n;
    return LOOM_OK;
}

static loom_status emit_le(sink *s, uint64_t v, size_t n) {
    unsigned char b[8];
    le_bytes(b, v, n);
    return emit(s, b, n);
}

static loom_status emit_pad(sink *s, uint64_t written, uint32_t alignment) {
    static const unsigned char zeros[256];
    uint64_t pad = (alignment - written % alignment) % alignment;
    while (pad > 0) {
        size_t k = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        LOOM_TRY(emit(s, zeros, k));
        pad -= k;
    }
    return LOOM_OK;
}

static loom_status write_all(loom_gguf_writer *w, sink *s) {
    LOOM_RETURN_IF(!w, LOOM_ERR_INVALID_ARG, "gguf writer: NULL writer");
    uint64_t a = w->alignment, off = 0;
    for (int64_t i = 0; i < w->n_tensors; i++) {
        w->tensors[i].offset = off;
        off += w->tensors[i].nbytes + (a - w->tensors[i].nbytes % a) % a;
    }
    uint64_t pos = 24 + w->kv_len;
    LOOM_TRY(emit(s, "GGUF", 4));
    LOOM_TRY(emit_le(s, w->version, 4));
    LOOM_TRY(emit_le(s, (uint64_t)w->n_tensors, 8));
    LOOM_TRY(emit_le(s, w->n_kv, 8));
    LOOM_TRY(emit(s, w->kv, w->kv_len));
    for (int64_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        size_t len = strlen(t->name);
        LOOM_TRY(emit_le(s, len, 8));
        LOOM_TRY(emit(s, t->name, len));
        LOOM_TRY(emit_le(s, (uint64_t)t->n_dims, 4));
        for (int d = 0; d < t->n_dims; d++) LOOM_TRY(emit_le(s, (uint64_t)t->ne[d], 8));
        LOOM_TRY(emit_le(s, t->type, 4));
        LOOM_TRY(emit_le(s, t->offset, 8));
        pos += 8 + len + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
    }
    if (w->n_tensors == 0) return LOOM_OK;
    LOOM_TRY(emit_pad(s, pos, w->alignment));
    for (int64_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        if (t->data) {
            LOOM_TRY(emit(s, t->data, (size_t)t->nbytes));
        } else {
            void *tmp = malloc(t->nbytes ? (size_t)t->nbytes : 1);
            LOOM_RETURN_IF(!tmp, LOOM_ERR_NOMEM, "gguf writer: out of memory for tensor '%s' "
                           "(%" PRIu64 " bytes)", t->name, t->nbytes);
            loom_status st = t->fill(t->ctx, t->name, tmp, (size_t)t->nbytes);
            if (st == LOOM_OK) st = emit(s, tmp, (size_t)t->nbytes);
            free(tmp);
            LOOM_TRY(st);
        }
        LOOM_TRY(emit_pad(s, t->nbytes, w->alignment));
    }
    return LOOM_OK;
}

loom_status loom_gguf_writer_write_memory(loom_gguf_writer *w, void **data, size_t *size) {
    LOOM_RETURN_IF(!data || !size, LOOM_ERR_INVALID_ARG, "gguf writer: NULL output");
    *data = NULL;
    *size = 0;
    sink s = {0};
    loom_status st = write_all(w, &s);
    if (st != LOOM_OK) {
        free(s.buf);
        return st;
    }
    *data = s.buf;
    *size = s.n;
    return LOOM_OK;
}

loom_status loom_gguf_writer_write_stream(loom_gguf_writer *w, FILE *f, const char *name) {
    LOOM_RETURN_IF(!f || !name, LOOM_ERR_INVALID_ARG, "gguf writer: NULL stream or name");
    sink s = {.f = f, .path = name};
    return write_all(w, &s);
}

loom_status loom_gguf_writer_write_file(loom_gguf_writer *w, const char *path) {
    LOOM_RETURN_IF(!path, LOOM_ERR_INVALID_ARG, "gguf writer: NULL path");
    sink s = {.path = path};
    s.f = fopen(path, "wb");
    LOOM_RETURN_IF(!s.f, LOOM_ERR_IO, "gguf writer: cannot create '%s': %s", path, strerror(errno));
    loom_status st = write_all(w, &s);
    if (fclose(s.f) != 0 && st == LOOM_OK)
        st = loom_set_error(LOOM_ERR_IO, "gguf writer: cannot write '%s': %s", path, strerror(errno));
    return st;
}
