/* Copying GGUF metadata entries between files (for requantization). */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/gguf.h"

loom_status loom_convert_copy_kv(const loom_gguf *g, int64_t i, loom_gguf_writer *w);

static loom_status copy_array(const loom_gguf *g, const char *k, loom_gguf_writer *w) {
    loom_gguf_type et;
    uint64_t n;
    LOOM_TRY(loom_gguf_get_arr_info(g, k, &et, &n));
    LOOM_RETURN_IF(n > (1u << 26), LOOM_ERR_UNSUPPORTED, "convert: array '%s' has %llu entries", k,
                   (unsigned long long)n);
    size_t cnt = n ? (size_t)n : 1;
    loom_status s;
    if (et == LOOM_GGUF_STRING) {
        const char **strs = malloc(sizeof *strs * cnt);
        uint64_t *lens = malloc(sizeof *lens * cnt);
        s = strs && lens ? loom_gguf_get_arr_str(g, k, strs, lens, n)
                         : loom_set_error(LOOM_ERR_NOMEM, "convert: out of memory");
        if (s == LOOM_OK) s = loom_gguf_writer_set_arr_str(w, k, strs, lens, n);
        free(strs);
        free(lens);
        return s;
    }
    if (et == LOOM_GGUF_FLOAT32 || et == LOOM_GGUF_FLOAT64) {
        float *v = malloc(sizeof *v * cnt);
        s = v ? loom_gguf_get_arr_f32(g, k, v, n) : loom_set_error(LOOM_ERR_NOMEM, "convert: out of memory");
        if (s == LOOM_OK) s = loom_gguf_writer_set_arr(w, k, LOOM_GGUF_FLOAT32, v, n);
        free(v);
        return s;
    }
    LOOM_RETURN_IF(et == LOOM_GGUF_ARRAY || et == LOOM_GGUF_UINT64 || et == LOOM_GGUF_INT64, LOOM_ERR_UNSUPPORTED,
                   "convert: cannot copy array '%s' of %s", k, loom_gguf_type_name(et));
    int32_t *v = malloc(sizeof *v * cnt);
    unsigned char *raw = malloc(4 * cnt);
    s = v && raw ? loom_gguf_get_arr_i32(g, k, v, n) : loom_set_error(LOOM_ERR_NOMEM, "convert: out of memory");
    for (uint64_t j = 0; s == LOOM_OK && j < n; j++) {
        switch (et) {
        case LOOM_GGUF_UINT8: case LOOM_GGUF_BOOL: ((uint8_t *)raw)[j] = (uint8_t)v[j]; break;
        case LOOM_GGUF_INT8: ((int8_t *)raw)[j] = (int8_t)v[j]; break;
        case LOOM_GGUF_UINT16: ((uint16_t *)raw)[j] = (uint16_t)v[j]; break;
        case LOOM_GGUF_INT16: ((int16_t *)raw)[j] = (int16_t)v[j]; break;
        case LOOM_GGUF_UINT32: ((uint32_t *)raw)[j] = (uint32_t)v[j]; break;
        default: ((int32_t *)raw)[j] = v[j]; break;
        }
    }
    if (s == LOOM_OK) s = loom_gguf_writer_set_arr(w, k, et, raw, n);
    free(v);
    free(raw);
    return s;
}

loom_status loom_convert_copy_kv(const loom_gguf *g, int64_t i, loom_gguf_writer *w) {
    const char *k = loom_gguf_kv_key(g, i);
    LOOM_RETURN_IF(!k, LOOM_ERR_INVALID_ARG, "convert: metadata index %lld out of range", (long long)i);
    uint64_t u;
    int64_t s64;
    double d;
    int b;
    const char *str;
    size_t len;
    switch (loom_gguf_kv_type(g, i)) {
    case LOOM_GGUF_UINT8: LOOM_TRY(loom_gguf_get_u64(g, k, &u)); return loom_gguf_writer_set_u8(w, k, (uint8_t)u);
    case LOOM_GGUF_INT8: LOOM_TRY(loom_gguf_get_i64(g, k, &s64)); return loom_gguf_writer_set_i8(w, k, (int8_t)s64);
    case LOOM_GGUF_UINT16: LOOM_TRY(loom_gguf_get_u64(g, k, &u)); return loom_gguf_writer_set_u16(w, k, (uint16_t)u);
    case LOOM_GGUF_INT16: LOOM_TRY(loom_gguf_get_i64(g, k, &s64)); return loom_gguf_writer_set_i16(w, k, (int16_t)s64);
    case LOOM_GGUF_UINT32: LOOM_TRY(loom_gguf_get_u64(g, k, &u)); return loom_gguf_writer_set_u32(w, k, (uint32_t)u);
    case LOOM_GGUF_INT32: LOOM_TRY(loom_gguf_get_i64(g, k, &s64)); return loom_gguf_writer_set_i32(w, k, (int32_t)s64);
    case LOOM_GGUF_UINT64: LOOM_TRY(loom_gguf_get_u64(g, k, &u)); return loom_gguf_writer_set_u64(w, k, u);
    case LOOM_GGUF_INT64: LOOM_TRY(loom_gguf_get_i64(g, k, &s64)); return loom_gguf_writer_set_i64(w, k, s64);
    case LOOM_GGUF_FLOAT32: LOOM_TRY(loom_gguf_get_f64(g, k, &d)); return loom_gguf_writer_set_f32(w, k, (float)d);
    case LOOM_GGUF_FLOAT64: LOOM_TRY(loom_gguf_get_f64(g, k, &d)); return loom_gguf_writer_set_f64(w, k, d);
    case LOOM_GGUF_BOOL: LOOM_TRY(loom_gguf_get_bool(g, k, &b)); return loom_gguf_writer_set_bool(w, k, b);
    case LOOM_GGUF_STRING: LOOM_TRY(loom_gguf_get_str(g, k, &str, &len)); return loom_gguf_writer_set_str_n(w, k, str, len);
    case LOOM_GGUF_ARRAY: return copy_array(g, k, w);
    default: return loom_set_error(LOOM_ERR_UNSUPPORTED, "convert: metadata '%s' has an unknown type", k);
    }
}
