/* GGUF metadata getters: typed access with range and type checks over
 * values that gguf.c validated at open. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "model/gguf_internal.h"

static uint64_t rd_le(const unsigned char *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* An integer of any GGUF width, kept exactly. */
typedef struct ival {
    int is_signed;
    int64_t s;
    uint64_t u;
} ival;

static int read_int(uint32_t type, const unsigned char *p, ival *v) {
    size_t n = loom_gguf_value_size(type);
    uint64_t bits = rd_le(p, n);
    v->is_signed = 0;
    v->u = bits;
    switch (type) {
    case LOOM_GGUF_UINT8: case LOOM_GGUF_UINT16: case LOOM_GGUF_UINT32: case LOOM_GGUF_UINT64:
        return 1;
    case LOOM_GGUF_INT8: v->s = (int8_t)bits; break;
    case LOOM_GGUF_INT16: v->s = (int16_t)bits; break;
    case LOOM_GGUF_INT32: v->s = (int32_t)(uint32_t)bits; break;
    case LOOM_GGUF_INT64: memcpy(&v->s, &bits, sizeof v->s); break;
    default: return 0;
    }
    v->is_signed = 1;
    return 1;
}

static int ival_fits(const ival *v, int64_t min, uint64_t max) {
    if (v->is_signed) return v->s >= min && (v->s < 0 || (uint64_t)v->s <= max);
    return v->u <= max && (min <= 0 || v->u >= (uint64_t)min);
}

static void ival_str(const ival *v, char *buf, size_t cap) {
    if (v->is_signed) snprintf(buf, cap, "%" PRId64, v->s);
    else snprintf(buf, cap, "%" PRIu64, v->u);
}

static loom_status mismatch(const loom_gguf_raw *r, const char *want) {
    return loom_set_error(LOOM_ERR_FORMAT, "gguf '%s': key '%s' (value at offset %zu) is %s, expected %s",
                          r->path, r->key, r->offset, loom_gguf_type_name((loom_gguf_type)r->type), want);
}

static loom_status get_int(const loom_gguf *g, const char *key, int64_t min, uint64_t max,
                           const char *want, ival *v) {
    loom_gguf_raw r;
    LOOM_TRY(loom_gguf_kv_raw(g, key, &r));
    if (!read_int(r.type, r.val, v)) return mismatch(&r, want);
    if (!ival_fits(v, min, max)) {
        char num[32];
        ival_str(v, num, sizeof num);
        return loom_set_error(LOOM_ERR_FORMAT, "gguf '%s': key '%s' (value at offset %zu) holds %s, "
                              "which does not fit in %s", r.path, r.key, r.offset, num, want);
    }
    return LOOM_OK;
}

#define NULL_CHECK(out) \
    LOOM_RETURN_IF(!(out), LOOM_ERR_INVALID_ARG, "gguf: NULL output for key '%s'", key ? key : "")

loom_status loom_gguf_get_u32(const loom_gguf *g, const char *key, uint32_t *out) {
    NULL_CHECK(out);
    ival v;
    LOOM_TRY(get_int(g, key, 0, UINT32_MAX, "uint32", &v));
    *out = v.is_signed ? (uint32_t)v.s : (uint32_t)v.u;
    return LOOM_OK;
}

loom_status loom_gguf_get_i32(const loom_gguf *g, const char *key, int32_t *out) {
    NULL_CHECK(out);
    ival v;
    LOOM_TRY(get_int(g, key, INT32_MIN, INT32_MAX, "int32", &v));
    *out = v.is_signed ? (int32_t)v.s : (int32_t)v.u;
    return LOOM_OK;
}

loom_status loom_gguf_get_u64(const loom_gguf *g, const char *key, uint64_t *out) {
    NULL_CHECK(out);
    ival v;
    LOOM_TRY(get_int(g, key, 0, UINT64_MAX, "uint64", &v));
    *out = v.is_signed ? (uint64_t)v.s : v.u;
    return LOOM_OK;
}

loom_status loom_gguf_get_i64(const loom_gguf *g, const char *key, int64_t *out) {
    NULL_CHECK(out);
    ival v;
    LOOM_TRY(get_int(g, key, INT64_MIN, INT64_MAX, "int64", &v));
    *out = v.is_signed ? v.s : (int64_t)v.u;
    return LOOM_OK;
}

static double read_float(uint32_t type, const unsigned char *p) {
    if (type == LOOM_GGUF_FLOAT32) {
        uint32_t b = (uint32_t)rd_le(p, 4);
        float f;
        memcpy(&f, &b, sizeof f);
        return f;
    }
    uint64_t b = rd_le(p, 8);
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

loom_status loom_gguf_get_f64(const loom_gguf *g, const char *key, double *out) {
    NULL_CHECK(out);
    loom_gguf_raw r;
    LOOM_TRY(loom_gguf_kv_raw(g, key, &r));
    if (r.type != LOOM_GGUF_FLOAT32 && r.type != LOOM_GGUF_FLOAT64) return mismatch(&r, "float32 or float64");
    *out = read_float(r.type, r.val);
    return LOOM_OK;
}

loom_status loom_gguf_get_f32(const loom_gguf *g, const char *key, float *out) {
    NULL_CHECK(out);
    double d = 0;
    LOOM_TRY(loom_gguf_get_f64(g, key, &d));
    *out = (float)d;
    return LOOM_OK;
}

loom_status loom_gguf_get_bool(const loom_gguf *g, const char *key, int *out) {
    NULL_CHECK(out);
    loom_gguf_raw r;
    LOOM_TRY(loom_gguf_kv_raw(g, key, &r));
    if (r.type != LOOM_GGUF_BOOL) return mismatch(&r, "bool");
    *out = r.val[0] != 0;
    return LOOM_OK;
}

loom_status loom_gguf_get_str(const loom_gguf *g, const char *key, const char **s, size_t *len) {
    NULL_CHECK(s && len);
    loom_gguf_raw r;
    LOOM_TRY(loom_gguf_kv_raw(g, key, &r));
    if (r.type != LOOM_GGUF_STRING) return mismatch(&r, "string");
    *len = (size_t)rd_le(r.val, 8);
    *s = (const char *)r.val + 8;
    return LOOM_OK;
}

loom_status loom_gguf_get_arr_info(const loom_gguf *g, const char *key, loom_gguf_type *elem_type,
                                   uint64_t *n) {
    NULL_CHECK(elem_type && n);
    loom_gguf_raw r;
    LOOM_TRY(loom_gguf_kv_raw(g, key, &r));
    if (r.type != LOOM_GGUF_ARRAY) return mismatch(&r, "array");
    *elem_type = (loom_gguf_type)r.arr_type;
    *n = r.arr_n;
    return LOOM_OK;
}

/* key's array with n elements whose type passes ok(); messages say want. */
static loom_status get_arr(const loom_gguf *g, const char *key, uint64_t n, int (*ok)(uint32_t),
                           const char *want, loom_gguf_raw *r) {
    LOOM_TRY(loom_gguf_kv_raw(g, key, r));
    if (r->type != LOOM_GGUF_ARRAY || !ok(r->arr_type)) {
        char found[64];
        snprintf(found, sizeof found, "%s%s%s", loom_gguf_type_name((loom_gguf_type)r->type),
                 r->type == LOOM_GGUF_ARRAY ? " of " : "",
                 r->type == LOOM_GGUF_ARRAY ? loom_gguf_type_name((loom_gguf_type)r->arr_type) : "");
        return loom_set_error(LOOM_ERR_FORMAT, "gguf '%s': key '%s' (value at offset %zu) is %s, "
                              "expected %s", r->path, r->key, r->offset, found, want);
    }
    LOOM_RETURN_IF(r->arr_n != n, LOOM_ERR_FORMAT,
                   "gguf '%s': array '%s' at offset %zu has %" PRIu64 " elements, expected %" PRIu64,
                   r->path, r->key, r->offset, r->arr_n, n);
    return LOOM_OK;
}

static int is_int_type(uint32_t t) {
    return t <= LOOM_GGUF_INT32 || t == LOOM_GGUF_UINT64 || t == LOOM_GGUF_INT64;
}
static int is_float_type(uint32_t t) { return t == LOOM_GGUF_FLOAT32 || t == LOOM_GGUF_FLOAT64; }
static int is_str_type(uint32_t t) { return t == LOOM_GGUF_STRING; }

loom_status loom_gguf_get_arr_i32(const loom_gguf *g, const char *key, int32_t *out, uint64_t n) {
    NULL_CHECK(out || n == 0);
    loom_gguf_raw r;
    LOOM_TRY(get_arr(g, key, n, is_int_type, "an array of integers", &r));
    size_t es = loom_gguf_value_size(r.arr_type);
    for (uint64_t i = 0; i < n; i++) {
        ival v;
        read_int(r.arr_type, r.val + i * es, &v);
        if (!ival_fits(&v, INT32_MIN, INT32_MAX)) {
            char num[32];
            ival_str(&v, num, sizeof num);
            return loom_set_error(LOOM_ERR_FORMAT, "gguf '%s': element %" PRIu64 " of '%s' (offset %zu) "
                                  "is %s, which does not fit in int32", r.path, i, r.key,
                                  r.offset + (size_t)i * es, num);
        }
        out[i] = v.is_signed ? (int32_t)v.s : (int32_t)v.u;
    }
    return LOOM_OK;
}

loom_status loom_gguf_get_arr_f32(const loom_gguf *g, const char *key, float *out, uint64_t n) {
    NULL_CHECK(out || n == 0);
    loom_gguf_raw r;
    LOOM_TRY(get_arr(g, key, n, is_float_type, "an array of floats", &r));
    size_t es = loom_gguf_value_size(r.arr_type);
    for (uint64_t i = 0; i < n; i++) out[i] = (float)read_float(r.arr_type, r.val + i * es);
    return LOOM_OK;
}

loom_status loom_gguf_get_arr_str(const loom_gguf *g, const char *key, const char **strs,
                                  uint64_t *lens, uint64_t n) {
    NULL_CHECK((strs && lens) || n == 0);
    loom_gguf_raw r;
    LOOM_TRY(get_arr(g, key, n, is_str_type, "an array of strings", &r));
    const unsigned char *p = r.val;  /* lengths were checked at open */
    for (uint64_t i = 0; i < n; i++) {
        lens[i] = rd_le(p, 8);
        strs[i] = (const char *)p + 8;
        p += 8 + lens[i];
    }
    return LOOM_OK;
}

/* ------------------------------------------------------------ formatting */

typedef struct sbuf {
    char *p;
    size_t cap, n;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    if (b->n + 1 >= b->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (k > 0) b->n = b->n + (size_t)k < b->cap ? b->n + (size_t)k : b->cap - 1;
}

static void put_string(sbuf *b, const unsigned char *s, uint64_t len) {
    put(b, "\"");
    for (uint64_t i = 0; i < len && i < 48; i++) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\') put(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7f) put(b, "\\x%02x", c);
        else put(b, "%c", c);
    }
    put(b, len > 48 ? "\"..." : "\"");
}

/* Formats one scalar or string at p; returns its encoded size. */
static size_t put_value(sbuf *b, uint32_t type, const unsigned char *p) {
    ival v;
    if (read_int(type, p, &v)) {
        char num[32];
        ival_str(&v, num, sizeof num);
        put(b, "%s", num);
    } else if (is_float_type(type)) {
        put(b, "%.9g", read_float(type, p));
    } else if (type == LOOM_GGUF_BOOL) {
        put(b, "%s", p[0] ? "true" : "false");
    } else if (type == LOOM_GGUF_STRING) {
        uint64_t len = rd_le(p, 8);
        put_string(b, p + 8, len);
        return 8 + (size_t)len;
    }
    return loom_gguf_value_size(type);
}

const char *loom_gguf_kv_format(const loom_gguf *g, int64_t i, char *buf, size_t cap) {
    if (!buf || cap == 0) return buf;
    buf[0] = '\0';
    const char *key = loom_gguf_kv_key(g, i);
    loom_gguf_raw r;
    if (!key || loom_gguf_kv_raw(g, key, &r) != LOOM_OK) return buf;
    sbuf b = {buf, cap, 0};
    if (r.type != LOOM_GGUF_ARRAY) {
        put_value(&b, r.type, r.val);
        return buf;
    }
    put(&b, "[%" PRIu64 " x %s", r.arr_n, loom_gguf_type_name((loom_gguf_type)r.arr_type));
    if (r.arr_type != LOOM_GGUF_ARRAY) {  /* nested arrays: count and type only */
        const unsigned char *p = r.val;
        for (uint64_t k = 0; k < r.arr_n && k < 8; k++) {
            put(&b, k ? ", " : ": ");
            p += put_value(&b, r.arr_type, p);
        }
        if (r.arr_n > 8) put(&b, ", ...");
    }
    put(&b, "]");
    return buf;
}
