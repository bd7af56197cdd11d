/* GGUF reader: parse and validate once at open, then serve lookups from
 * small index arrays; values and tensor data stay in the mapping. */
#include "model/gguf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "model/gguf_internal.h"
#include "model/mapped_file.h"

/* Nested arrays deeper than this are refused: the parser recurses per level. */
#define GGUF_MAX_DEPTH 8
#define GGUF_MAX_KEY 65535

typedef struct gguf_kv {
    const char *key;     /* NUL-terminated, in names */
    size_t key_off;      /* file offset of the key string (for messages) */
    uint64_t key_len;
    uint32_t type;
    uint32_t arr_type;   /* arrays: element type */
    uint64_t arr_n;      /* arrays: element count */
    size_t val_off;      /* file offset of the value (arrays: of the first element) */
} gguf_kv;

typedef struct gguf_tensor {
    const char *name;
    size_t info_off;     /* file offset of the tensor info */
    size_t name_off;
    uint64_t name_len;
    uint32_t type;
    int n_dims;
    int64_t ne[LOOM_GGUF_MAX_DIMS];
    uint64_t offset, nbytes;
} gguf_tensor;

struct loom_gguf {
    loom_mapped_file file;
    int mapped;
    const unsigned char *data;
    size_t size;
    char path[1024];
    uint32_t version, alignment;
    int64_t n_kv, n_tensors;
    gguf_kv *kv;          /* (n_kv) */
    gguf_tensor *tensors; /* (n_tensors) */
    char *names;          /* all keys and tensor names, NUL-terminated */
    int32_t *kv_slot, *t_slot;  /* open-addressing indices, -1 empty */
    uint32_t kv_mask, t_mask;
    size_t data_off;
};

/* ------------------------------------------------------------ type tables */

static const struct { const char *name; int blck; size_t size; } ggml_types[] = {
    [0] = {"f32", 1, 4},       [1] = {"f16", 1, 2},        [2] = {"q4_0", 32, 18},
    [3] = {"q4_1", 32, 20},    [6] = {"q5_0", 32, 22},     [7] = {"q5_1", 32, 24},
    [8] = {"q8_0", 32, 34},    [9] = {"q8_1", 32, 36},     [10] = {"q2_K", 256, 84},
    [11] = {"q3_K", 256, 110}, [12] = {"q4_K", 256, 144},  [13] = {"q5_K", 256, 176},
    [14] = {"q6_K", 256, 210}, [15] = {"q8_K", 256, 292},  [16] = {"iq2_xxs", 256, 66},
    [17] = {"iq2_xs", 256, 74}, [18] = {"iq3_xxs", 256, 98}, [19] = {"iq1_s", 256, 50},
    [20] = {"iq4_nl", 32, 18}, [21] = {"iq3_s", 256, 110}, [22] = {"iq2_s", 256, 82},
    [23] = {"iq4_xs", 256, 136}, [24] = {"i8", 1, 1},      [25] = {"i16", 1, 2},
    [26] = {"i32", 1, 4},      [27] = {"i64", 1, 8},       [28] = {"f64", 1, 8},
    [29] = {"iq1_m", 256, 56}, [30] = {"bf16", 1, 2},      [34] = {"tq1_0", 256, 54},
    [35] = {"tq2_0", 256, 66}, [39] = {"mxfp4", 32, 17},
};
#define N_GGML_TYPES (sizeof ggml_types / sizeof ggml_types[0])

static const char *const value_type_names[] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};
_Static_assert(sizeof value_type_names / sizeof value_type_names[0] == LOOM_GGUF_TYPE_COUNT,
               "value_type_names must name every loom_gguf_type");

/* Bytes of a fixed-size value type; 0 for string, array and unknown types. */
size_t loom_gguf_value_size(uint32_t t) {
    static const unsigned char sizes[LOOM_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < LOOM_GGUF_TYPE_COUNT ? sizes[t] : 0;
}

const char *loom_gguf_type_name(loom_gguf_type t) {
    return (unsigned)t < LOOM_GGUF_TYPE_COUNT ? value_type_names[t] : "unknown";
}

const char *loom_ggml_type_name(uint32_t t) { return t < N_GGML_TYPES ? ggml_types[t].name : NULL; }
int loom_ggml_block_elems(uint32_t t) { return t < N_GGML_TYPES ? ggml_types[t].blck : 0; }
size_t loom_ggml_block_bytes(uint32_t t) { return t < N_GGML_TYPES ? ggml_types[t].size : 0; }

static const struct { uint32_t ggml; loom_dtype dtype; } dtype_map[] = {
    {LOOM_GGML_F32, LOOM_F32},   {LOOM_GGML_F16, LOOM_F16},   {LOOM_GGML_BF16, LOOM_BF16},
    {LOOM_GGML_Q8_0, LOOM_Q8_0}, {LOOM_GGML_Q4_0, LOOM_Q4_0}, {LOOM_GGML_Q4_1, LOOM_Q4_1},
};

loom_status loom_ggml_type_to_dtype(uint32_t t, loom_dtype *out) {
    for (size_t i = 0; i < sizeof dtype_map / sizeof dtype_map[0]; i++) {
        if (dtype_map[i].ggml == t) {
            *out = dtype_map[i].dtype;
            return LOOM_OK;
        }
    }
    LOOM_RETURN_IF(!loom_ggml_type_name(t), LOOM_ERR_FORMAT, "unknown ggml type id %" PRIu32, t);
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "ggml type %s is not supported by loom "
                          "(supported: f32, f16, bf16, q8_0, q4_0, q4_1; the Llama loader converts q4_K, q5_K, q6_K, "
                          "q5_0, q5_1, iq4_nl and iq4_xs)", loom_ggml_type_name(t));
}

int loom_ggml_type_from_dtype(loom_dtype d) {
    for (size_t i = 0; i < sizeof dtype_map / sizeof dtype_map[0]; i++)
        if (dtype_map[i].dtype == d) return (int)dtype_map[i].ggml;
    return -1;
}

loom_status loom_ggml_nbytes(uint32_t type, const int64_t *ne, int n_dims, uint64_t *nbytes) {
    const char *name = loom_ggml_type_name(type);
    LOOM_RETURN_IF(!name, LOOM_ERR_UNSUPPORTED, "unknown ggml type id %" PRIu32, type);
    uint64_t blck = (uint64_t)ggml_types[type].blck, n = 1;
    for (int d = 0; d < n_dims; d++) {
        LOOM_RETURN_IF(ne[d] < 1, LOOM_ERR_FORMAT, "dimension %d is %" PRId64 ", must be >= 1", d, ne[d]);
        uint64_t e = (uint64_t)ne[d];
        if (d == 0) {
            LOOM_RETURN_IF(e % blck != 0, LOOM_ERR_FORMAT, "row of %" PRIu64 " elements is not a "
                           "multiple of the %s block of %" PRIu64, e, name, blck);
            e = e / blck;
        }
        LOOM_RETURN_IF(e > INT64_MAX / n, LOOM_ERR_FORMAT, "element count overflows");
        n *= e;
    }
    LOOM_RETURN_IF(n > INT64_MAX / ggml_types[type].size, LOOM_ERR_FORMAT, "byte size overflows");
    *nbytes = n * ggml_types[type].size;
    return LOOM_OK;
}

/* ------------------------------------------------------------- reading */

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const unsigned char *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

typedef struct cursor {
    const loom_gguf *g;
    size_t pos;
} cursor;

static loom_status need(cursor *c, uint64_t n, const char *what, const char *name) {
    size_t left = c->g->size - c->pos;
    LOOM_RETURN_IF(n > left, LOOM_ERR_FORMAT,
                   "gguf '%s': truncated at offset %zu: %s%s%s%s needs %" PRIu64 " bytes, %zu left",
                   c->g->path, c->pos, what, name ? " '" : "", name ? name : "", name ? "'" : "", n, left);
    return LOOM_OK;
}

static loom_status rd_u32(cursor *c, uint32_t *v, const char *what, const char *name) {
    LOOM_TRY(need(c, 4, what, name));
    *v = le32(c->g->data + c->pos);
    c->pos += 4;
    return LOOM_OK;
}

static loom_status rd_u64(cursor *c, uint64_t *v, const char *what, const char *name) {
    LOOM_TRY(need(c, 8, what, name));
    *v = le64(c->g->data + c->pos);
    c->pos += 8;
    return LOOM_OK;
}

/* A string: its bytes stay in the file; *off and *len locate them. */
static loom_status rd_str(cursor *c, size_t *off, uint64_t *len, const char *what, const char *name) {
    LOOM_TRY(rd_u64(c, len, what, name));
    LOOM_TRY(need(c, *len, what, name));
    *off = c->pos;
    c->pos += (size_t)*len;
    return LOOM_OK;
}

/* Skips over one value of type t, checking every length against the file. */
static loom_status skip_value(cursor *c, uint32_t t, int depth, const char *key) {
    const loom_gguf *g = c->g;
    size_t fixed = loom_gguf_value_size(t);
    if (fixed) {
        LOOM_TRY(need(c, fixed, "value of key", key));
        c->pos += fixed;
        return LOOM_OK;
    }
    if (t == LOOM_GGUF_STRING) {
        size_t off;
        uint64_t len;
        return rd_str(c, &off, &len, "string value of key", key);
    }
    LOOM_RETURN_IF(t != LOOM_GGUF_ARRAY, LOOM_ERR_FORMAT,
                   "gguf '%s': key '%s' at offset %zu has unknown value type %" PRIu32,
                   g->path, key, c->pos - 4, t);
    LOOM_RETURN_IF(depth >= GGUF_MAX_DEPTH, LOOM_ERR_FORMAT,
                   "gguf '%s': key '%s' at offset %zu nests arrays deeper than %d",
                   g->path, key, c->pos, GGUF_MAX_DEPTH);
    uint32_t et;
    uint64_t n;
    size_t at = c->pos;
    LOOM_TRY(rd_u32(c, &et, "array header of key", key));
    LOOM_TRY(rd_u64(c, &n, "array header of key", key));
    LOOM_RETURN_IF(et >= LOOM_GGUF_TYPE_COUNT, LOOM_ERR_FORMAT,
                   "gguf '%s': array of key '%s' at offset %zu has unknown element type %" PRIu32,
                   g->path, key, at, et);
    /* Bound the count by the bytes left before looping or multiplying. */
    size_t esize = loom_gguf_value_size(et), min = esize ? esize : et == LOOM_GGUF_STRING ? 8 : 12;
    LOOM_RETURN_IF(n > (g->size - c->pos) / min, LOOM_ERR_FORMAT,
                   "gguf '%s': array of key '%s' at offset %zu claims %" PRIu64 " %s elements, "
                   "more than the %zu bytes left can hold", g->path, key, at, n,
                   loom_gguf_type_name((loom_gguf_type)et), g->size - c->pos);
    if (esize) {
        c->pos += (size_t)n * esize;
        return LOOM_OK;
    }
    for (uint64_t i = 0; i < n; i++) LOOM_TRY(skip_value(c, et, depth + 1, key));
    return LOOM_OK;
}

static uint32_t str_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* Builds an index over n names; returns the index of a duplicate or -1. */
static int64_t build_index(int32_t **slot, uint32_t *mask, int64_t n,
                           const char *(*name_of)(const loom_gguf *, int64_t), const loom_gguf *g,
                           loom_status *st) {
    if (n > (1 << 29)) {  /* keeps the table's size and int32 slots in range */
        *st = loom_set_error(LOOM_ERR_FORMAT, "gguf '%s': %" PRId64 " entries is too many", g->path, n);
        return -1;
    }
    uint32_t cap = 16;
    while (cap < 2 * (uint64_t)n) cap <<= 1;
    *slot = malloc(sizeof(int32_t) * cap);
    if (!*slot) {
        *st = loom_set_error(LOOM_ERR_NOMEM, "gguf '%s': out of memory for an index of %" PRId64,
                             g->path, n);
        return -1;
    }
    memset(*slot, 0xff, sizeof(int32_t) * cap);
    *mask = cap - 1;
    for (int64_t i = 0; i < n; i++) {
        const char *s = name_of(g, i);
        uint32_t h = str_hash(s) & *mask;
        while ((*slot)[h] >= 0) {
            if (strcmp(name_of(g, (*slot)[h]), s) == 0) return i;
            h = (h + 1) & *mask;
        }
        (*slot)[h] = (int32_t)i;
    }
    return -1;
}

static int64_t lookup(const int32_t *slot, uint32_t mask, const char *s,
                      const char *(*name_of)(const loom_gguf *, int64_t), const loom_gguf *g) {
    if (!slot || !s) return -1;
    uint32_t h = str_hash(s) & mask;
    while (slot[h] >= 0) {
        if (strcmp(name_of(g, slot[h]), s) == 0) return slot[h];
        h = (h + 1) & mask;
    }
    return -1;
}

static const char *kv_name(const loom_gguf *g, int64_t i) { return g->kv[i].key; }
static const char *tensor_name(const loom_gguf *g, int64_t i) { return g->tensors[i].name; }

/* arr resized to hold n+1 elements, or NULL (arr untouched) when out of
 * memory. Arrays grow as entries parse, so a corrupt count costs memory only
 * for the entries that really exist. */
static void *grow(void *arr, size_t *cap, size_t n, size_t elem) {
    if (n < *cap) return arr;
    size_t ncap = *cap ? *cap * 2 : 64;
    char *p = realloc(arr, ncap * elem);
    if (!p) return NULL;
    memset(p + *cap * elem, 0, (ncap - *cap) * elem);
    *cap = ncap;
    return p;
}

static loom_status parse_kv(loom_gguf *g, cursor *c) {
    size_t cap = 0;
    for (int64_t i = 0; i < g->n_kv; i++) {
        gguf_kv *grown = grow(g->kv, &cap, (size_t)i, sizeof *g->kv);
        LOOM_RETURN_IF(!grown, LOOM_ERR_NOMEM, "gguf '%s': out of memory", g->path);
        g->kv = grown;
        gguf_kv *kv = &g->kv[i];
        char label[32];
        snprintf(label, sizeof label, "%" PRId64, i);
        LOOM_TRY(rd_str(c, &kv->key_off, &kv->key_len, "key of metadata entry", label));
        const char *k = (const char *)g->data + kv->key_off;
        LOOM_RETURN_IF(kv->key_len == 0 || kv->key_len > GGUF_MAX_KEY ||
                       memchr(k, 0, (size_t)kv->key_len), LOOM_ERR_FORMAT,
                       "gguf '%s': metadata entry %" PRId64 " at offset %zu has an invalid key "
                       "(%" PRIu64 " bytes; must be 1..%d without NUL)",
                       g->path, i, kv->key_off - 8, kv->key_len, GGUF_MAX_KEY);
        char key[96];
        snprintf(key, sizeof key, "%.*s", (int)(kv->key_len < 80 ? kv->key_len : 80), k);
        LOOM_TRY(rd_u32(c, &kv->type, "value type of key", key));
        LOOM_RETURN_IF(kv->type >= LOOM_GGUF_TYPE_COUNT, LOOM_ERR_FORMAT,
                       "gguf '%s': key '%s' at offset %zu has unknown value type %" PRIu32,
                       g->path, key, kv->key_off - 8, kv->type);
        size_t start = c->pos;
        LOOM_TRY(skip_value(c, kv->type, 0, key));
        kv->val_off = start;
        if (kv->type == LOOM_GGUF_ARRAY) {
            kv->arr_type = le32(g->data + start);
            kv->arr_n = le64(g->data + start + 4);
            kv->val_off = start + 12;
        }
    }
    return LOOM_OK;
}

static loom_status parse_tensor_infos(loom_gguf *g, cursor *c) {
    size_t cap = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *grown = grow(g->tensors, &cap, (size_t)i, sizeof *g->tensors);
        LOOM_RETURN_IF(!grown, LOOM_ERR_NOMEM, "gguf '%s': out of memory", g->path);
        g->tensors = grown;
        gguf_tensor *t = &g->tensors[i];
        char label[32];
        snprintf(label, sizeof label, "%" PRId64, i);
        t->info_off = c->pos;
        LOOM_TRY(rd_str(c, &t->name_off, &t->name_len, "name of tensor", label));
        const char *nm = (const char *)g->data + t->name_off;
        LOOM_RETURN_IF(t->name_len == 0 || t->name_len > LOOM_GGUF_MAX_NAME ||
                       memchr(nm, 0, (size_t)t->name_len), LOOM_ERR_FORMAT,
                       "gguf '%s': tensor %" PRId64 " at offset %zu has an invalid name "
                       "(%" PRIu64 " bytes; must be 1..%d without NUL)",
                       g->path, i, t->info_off, t->name_len, LOOM_GGUF_MAX_NAME);
        char name[LOOM_GGUF_MAX_NAME + 1];
        snprintf(name, sizeof name, "%.*s", (int)t->name_len, nm);
        uint32_t nd;
        LOOM_TRY(rd_u32(c, &nd, "n_dims of tensor", name));
        LOOM_RETURN_IF(nd < 1 || nd > LOOM_GGUF_MAX_DIMS, LOOM_ERR_FORMAT,
                       "gguf '%s': tensor '%s' at offset %zu has %" PRIu32 " dims, must be 1..%d",
                       g->path, name, t->info_off, nd, LOOM_GGUF_MAX_DIMS);
        t->n_dims = (int)nd;
        for (int d = 0; d < LOOM_GGUF_MAX_DIMS; d++) {
            uint64_t v = 1;
            if (d < t->n_dims) LOOM_TRY(rd_u64(c, &v, "dims of tensor", name));
            LOOM_RETURN_IF(v < 1 || v > INT64_MAX, LOOM_ERR_FORMAT,
                           "gguf '%s': tensor '%s' at offset %zu: dim %d is %" PRIu64 ", must be >= 1",
                           g->path, name, t->info_off, d, v);
            t->ne[d] = (int64_t)v;
        }
        LOOM_TRY(rd_u32(c, &t->type, "type of tensor", name));
        LOOM_TRY(rd_u64(c, &t->offset, "offset of tensor", name));
    }
    return LOOM_OK;
}

/* Copies keys and names out of the file so that lookups can use C strings. */
static loom_status copy_names(loom_gguf *g) {
    size_t total = 1;
    for (int64_t i = 0; i < g->n_kv; i++) total += (size_t)g->kv[i].key_len + 1;
    for (int64_t i = 0; i < g->n_tensors; i++) total += (size_t)g->tensors[i].name_len + 1;
    g->names = malloc(total);
    LOOM_RETURN_IF(!g->names, LOOM_ERR_NOMEM, "gguf '%s': out of memory for %zu bytes of names",
                   g->path, total);
    char *p = g->names;
    for (int64_t i = 0; i < g->n_kv; i++) {
        memcpy(p, g->data + g->kv[i].key_off, (size_t)g->kv[i].key_len);
        g->kv[i].key = p;
        p += g->kv[i].key_len;
        *p++ = '\0';
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        memcpy(p, g->data + g->tensors[i].name_off, (size_t)g->tensors[i].name_len);
        g->tensors[i].name = p;
        p += g->tensors[i].name_len;
        *p++ = '\0';
    }
    return LOOM_OK;
}

static loom_status read_alignment(loom_gguf *g) {
    g->alignment = LOOM_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = loom_gguf_find_key(g, "general.alignment");
    if (i < 0) return LOOM_OK;
    const gguf_kv *kv = &g->kv[i];
    LOOM_RETURN_IF(kv->type != LOOM_GGUF_UINT32, LOOM_ERR_FORMAT,
                   "gguf '%s': key 'general.alignment' at offset %zu is %s, must be uint32",
                   g->path, kv->key_off - 8, loom_gguf_type_name((loom_gguf_type)kv->type));
    uint32_t a = le32(g->data + kv->val_off);
    LOOM_RETURN_IF(a == 0 || (a & (a - 1)) != 0, LOOM_ERR_FORMAT,
                   "gguf '%s': general.alignment at offset %zu is %" PRIu32 ", must be a power of two",
                   g->path, kv->val_off, a);
    g->alignment = a;
    return LOOM_OK;
}

typedef struct span { uint64_t offset; int64_t idx; } span;
static int cmp_span(const void *a, const void *b) {
    uint64_t x = ((const span *)a)->offset, y = ((const span *)b)->offset;
    return (x > y) - (x < y);
}

static loom_status check_tensors(loom_gguf *g, size_t infos_end) {
    if (g->n_tensors == 0) {
        g->data_off = infos_end;
        return LOOM_OK;
    }
    size_t pad = (g->alignment - infos_end % g->alignment) % g->alignment;
    LOOM_RETURN_IF(pad > g->size - infos_end, LOOM_ERR_FORMAT,
                   "gguf '%s': truncated: the data section would start at offset %zu, "
                   "past the end of the %zu-byte file", g->path, infos_end + pad, g->size);
    g->data_off = infos_end + pad;
    uint64_t data_size = g->size - g->data_off;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        const char *tn = loom_ggml_type_name(t->type);
        LOOM_RETURN_IF(!tn, LOOM_ERR_UNSUPPORTED, "gguf '%s': tensor '%s' at offset %zu has "
                       "unknown ggml type id %" PRIu32, g->path, t->name, t->info_off, t->type);
        if (loom_ggml_nbytes(t->type, t->ne, t->n_dims, &t->nbytes) != LOOM_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", loom_last_error());
            return loom_set_error(LOOM_ERR_FORMAT, "gguf '%s': tensor '%s' (%s) at offset %zu: %s",
                                  g->path, t->name, tn, t->info_off, why);
        }
        LOOM_RETURN_IF(t->offset % g->alignment != 0, LOOM_ERR_FORMAT,
                       "gguf '%s': tensor '%s' at offset %zu: data offset %" PRIu64
                       " is not a multiple of the alignment %" PRIu32,
                       g->path, t->name, t->info_off, t->offset, g->alignment);
        LOOM_RETURN_IF(t->offset > data_size || t->nbytes > data_size - t->offset, LOOM_ERR_FORMAT,
                       "gguf '%s': tensor '%s' at offset %zu: its %" PRIu64 " bytes at data offset "
                       "%" PRIu64 " extend past the %" PRIu64 "-byte data section (file offset %zu)",
                       g->path, t->name, t->info_off, t->nbytes, t->offset, data_size, g->data_off);
    }
    span *order = malloc(sizeof *order * (size_t)g->n_tensors);
    LOOM_RETURN_IF(!order, LOOM_ERR_NOMEM, "gguf '%s': out of memory", g->path);
    for (int64_t i = 0; i < g->n_tensors; i++) order[i] = (span){g->tensors[i].offset, i};
    qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_span);
    loom_status st = LOOM_OK;
    for (int64_t i = 0; i + 1 < g->n_tensors; i++) {
        const gguf_tensor *a = &g->tensors[order[i].idx], *b = &g->tensors[order[i + 1].idx];
        if (a->offset + a->nbytes > b->offset) {
            st = loom_set_error(LOOM_ERR_FORMAT, "gguf '%s': tensors '%s' (data offset %" PRIu64
                                ", %" PRIu64 " bytes) and '%s' (data offset %" PRIu64 ") overlap",
                                g->path, a->name, a->offset, a->nbytes, b->name, b->offset);
            break;
        }
    }
    free(order);
    return st;
}

static loom_status parse(loom_gguf *g) {
    cursor c = {g, 0};
    LOOM_TRY(need(&c, 4, "magic", NULL));
    LOOM_RETURN_IF(memcmp(g->data, "GGUF", 4) != 0, LOOM_ERR_FORMAT,
                   "gguf '%s': bad magic %02x %02x %02x %02x at offset 0 (expected \"GGUF\")",
                   g->path, g->data[0], g->data[1], g->data[2], g->data[3]);
    c.pos = 4;
    LOOM_TRY(rd_u32(&c, &g->version, "version", NULL));
    LOOM_RETURN_IF(g->version != 2 && g->version != 3, LOOM_ERR_UNSUPPORTED,
                   "gguf '%s': version %" PRIu32 " at offset 4 is not supported (2 and 3 are%s)",
                   g->path, g->version,
                   (g->version & 0xFFFF) == 0 ? "; this looks like a big-endian file" : "");
    uint64_t nt, nkv;
    LOOM_TRY(rd_u64(&c, &nt, "tensor count", NULL));
    LOOM_TRY(rd_u64(&c, &nkv, "metadata count", NULL));
    /* Smallest possible entries: a key-value is 8+1+4+1 bytes, a tensor info
     * 8+1+4+8+4+8; larger counts cannot fit in what is left. */
    size_t left = g->size - c.pos;
    LOOM_RETURN_IF(nkv > left / 14, LOOM_ERR_FORMAT, "gguf '%s': metadata count %" PRIu64
                   " at offset 16 cannot fit in the %zu bytes left", g->path, nkv, left);
    LOOM_RETURN_IF(nt > left / 33, LOOM_ERR_FORMAT, "gguf '%s': tensor count %" PRIu64
                   " at offset 8 cannot fit in the %zu bytes left", g->path, nt, left);
    g->n_kv = (int64_t)nkv;
    g->n_tensors = (int64_t)nt;
    LOOM_TRY(parse_kv(g, &c));
    LOOM_TRY(parse_tensor_infos(g, &c));
    LOOM_TRY(copy_names(g));
    loom_status st = LOOM_OK;
    int64_t dup = build_index(&g->kv_slot, &g->kv_mask, g->n_kv, kv_name, g, &st);
    LOOM_TRY(st);
    LOOM_RETURN_IF(dup >= 0, LOOM_ERR_FORMAT, "gguf '%s': duplicate key '%s' at offset %zu",
                   g->path, g->kv[dup].key, g->kv[dup].key_off - 8);
    dup = build_index(&g->t_slot, &g->t_mask, g->n_tensors, tensor_name, g, &st);
    LOOM_TRY(st);
    LOOM_RETURN_IF(dup >= 0, LOOM_ERR_FORMAT, "gguf '%s': duplicate tensor name '%s' at offset %zu",
                   g->path, g->tensors[dup].name, g->tensors[dup].info_off);
    LOOM_TRY(read_alignment(g));
    return check_tensors(g, c.pos);
}

static loom_status open_common(loom_gguf *g, loom_gguf **out) {
    loom_status st = parse(g);
    if (st != LOOM_OK) {
        loom_gguf_close(g);
        return st;
    }
    *out = g;
    return LOOM_OK;
}

loom_status loom_gguf_open_memory(const void *data, size_t size, const char *name, loom_gguf **out) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "gguf: out is NULL");
    *out = NULL;
    LOOM_RETURN_IF(!data && size, LOOM_ERR_INVALID_ARG, "gguf: data is NULL");
    loom_gguf *g = calloc(1, sizeof *g);
    LOOM_RETURN_IF(!g, LOOM_ERR_NOMEM, "gguf: out of memory");
    g->data = data;
    g->size = size;
    snprintf(g->path, sizeof g->path, "%s", name ? name : "<memory>");
    return open_common(g, out);
}

int loom_gguf_file_is_gguf(const char *path) {
    unsigned char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    int gguf = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    if (f) fclose(f);
    return gguf;
}

loom_status loom_gguf_open(const char *path, loom_gguf **out) {
    LOOM_RETURN_IF(!out || !path, LOOM_ERR_INVALID_ARG, "gguf: path and out must not be NULL");
    *out = NULL;
    loom_gguf *g = calloc(1, sizeof *g);
    LOOM_RETURN_IF(!g, LOOM_ERR_NOMEM, "gguf: out of memory");
    loom_status st = loom_mapped_file_open(&g->file, path);
    if (st != LOOM_OK) {
        free(g);
        return st;
    }
    g->mapped = 1;
    g->data = g->file.data;
    g->size = g->file.size;
    snprintf(g->path, sizeof g->path, "%s", path);
    return open_common(g, out);
}

int loom_gguf_make_resident(loom_gguf *g) { return loom_gguf_make_resident_except(g, NULL, 0); }

int loom_gguf_make_resident_except(loom_gguf *g, const loom_byte_range *skip, int n) {
    return g && g->mapped ? loom_mapped_file_resident_except(&g->file, skip, n) : 0;
}

int loom_gguf_maps(const loom_gguf *g, const void *p, size_t n) {
    if (!g || !g->mapped || !p) return 0;
    const unsigned char *a = p, *lo = g->file.data;
    return a >= lo && (size_t)(a - lo) <= g->file.size && n <= g->file.size - (size_t)(a - lo);
}

void loom_gguf_drop(const loom_gguf *g, const loom_byte_range *skip, int n) {
    if (g && g->mapped) loom_mapped_file_drop(&g->file, skip, n);
}

void loom_gguf_close(loom_gguf *g) {
    if (!g) return;
    if (g->mapped) loom_mapped_file_close(&g->file);
    free(g->kv);
    free(g->tensors);
    free(g->names);
    free(g->kv_slot);
    free(g->t_slot);
    free(g);
}

const char *loom_gguf_path(const loom_gguf *g) { return g ? g->path : ""; }
uint32_t loom_gguf_version(const loom_gguf *g) { return g ? g->version : 0; }
uint32_t loom_gguf_alignment(const loom_gguf *g) { return g ? g->alignment : 0; }
size_t loom_gguf_data_offset(const loom_gguf *g) { return g ? g->data_off : 0; }
int64_t loom_gguf_n_kv(const loom_gguf *g) { return g ? g->n_kv : 0; }
int64_t loom_gguf_n_tensors(const loom_gguf *g) { return g ? g->n_tensors : 0; }

int64_t loom_gguf_find_key(const loom_gguf *g, const char *key) {
    return g ? lookup(g->kv_slot, g->kv_mask, key, kv_name, g) : -1;
}

int64_t loom_gguf_find_tensor(const loom_gguf *g, const char *name) {
    return g ? lookup(g->t_slot, g->t_mask, name, tensor_name, g) : -1;
}

/* ------------------------------------------------ internal value access */

loom_status loom_gguf_kv_raw(const loom_gguf *g, const char *key, loom_gguf_raw *raw) {
    LOOM_RETURN_IF(!g || !key || !raw, LOOM_ERR_INVALID_ARG, "gguf: NULL argument");
    int64_t i = loom_gguf_find_key(g, key);
    LOOM_RETURN_IF(i < 0, LOOM_ERR_FORMAT, "gguf '%s': key '%s' not found", g->path, key);
    const gguf_kv *kv = &g->kv[i];
    raw->type = kv->type;
    raw->arr_type = kv->arr_type;
    raw->arr_n = kv->arr_n;
    raw->val = g->data + kv->val_off;
    raw->end = g->data + g->size;
    raw->offset = kv->val_off;
    raw->path = g->path;
    raw->key = kv->key;
    return LOOM_OK;
}

const char *loom_gguf_kv_key(const loom_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

loom_gguf_type loom_gguf_kv_type(const loom_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_kv ? (loom_gguf_type)g->kv[i].type : LOOM_GGUF_TYPE_COUNT;
}

loom_gguf_type loom_gguf_kv_arr_type(const loom_gguf *g, int64_t i) {
    if (!g || i < 0 || i >= g->n_kv || g->kv[i].type != LOOM_GGUF_ARRAY) return LOOM_GGUF_TYPE_COUNT;
    return (loom_gguf_type)g->kv[i].arr_type;
}

uint64_t loom_gguf_kv_arr_n(const loom_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_kv && g->kv[i].type == LOOM_GGUF_ARRAY ? g->kv[i].arr_n : 0;
}

/* ------------------------------------------------------------- tensors */

loom_status loom_gguf_tensor_info_at(const loom_gguf *g, int64_t i, loom_gguf_tensor_info *info) {
    LOOM_RETURN_IF(!g || !info, LOOM_ERR_INVALID_ARG, "gguf: NULL argument");
    LOOM_RETURN_IF(i < 0 || i >= g->n_tensors, LOOM_ERR_INVALID_ARG,
                   "gguf '%s': tensor index %" PRId64 " out of range [0, %" PRId64 ")",
                   g->path, i, g->n_tensors);
    const gguf_tensor *t = &g->tensors[i];
    info->name = t->name;
    info->ggml_type = t->type;
    info->n_dims = t->n_dims;
    memcpy(info->ne, t->ne, sizeof info->ne);
    info->offset = t->offset;
    info->nbytes = t->nbytes;
    info->data = g->data + g->data_off + t->offset;
    return LOOM_OK;
}

int64_t loom_gguf_tensor_nelem(const loom_gguf_tensor_info *info) {
    int64_t n = 1;
    for (int d = 0; d < info->n_dims; d++) n *= info->ne[d]; /* validated at open: no overflow */
    return n;
}

void loom_gguf_tensor_shape(const loom_gguf_tensor_info *info, int64_t *shape) {
    for (int d = 0; d < info->n_dims; d++) shape[d] = info->ne[info->n_dims - 1 - d];
}

loom_status loom_gguf_tensor_at(const loom_gguf *g, int64_t i, loom_tensor *out) {
    loom_gguf_tensor_info info;
    LOOM_TRY(loom_gguf_tensor_info_at(g, i, &info));
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "gguf: out is NULL");
    loom_dtype dt = LOOM_F32;
    if (loom_ggml_type_to_dtype(info.ggml_type, &dt) != LOOM_OK) {
        return loom_set_error(LOOM_ERR_UNSUPPORTED, "gguf '%s': tensor '%s' has type %s, which loom "
                              "does not support (supported: f32, f16, bf16, q8_0, q4_0, q4_1; the Llama loader "
                              "converts q4_K, q5_K, q6_K, q5_0, q5_1, iq4_nl and iq4_xs)",
                              g->path, info.name, loom_ggml_type_name(info.ggml_type));
    }
    /* Element alignment: a file with a tiny general.alignment could misplace data. */
    size_t need_align = dt == LOOM_F32 ? 4 : 2;
    LOOM_RETURN_IF((uintptr_t)info.data % need_align != 0, LOOM_ERR_UNSUPPORTED,
                   "gguf '%s': tensor '%s' data at file offset %zu is not %zu-byte aligned",
                   g->path, info.name, g->data_off + (size_t)info.offset, need_align);
    int64_t shape[LOOM_MAX_DIMS];
    loom_gguf_tensor_shape(&info, shape);
    LOOM_TRY(loom_tensor_init(out, dt, info.n_dims, shape, (void *)(uintptr_t)info.data));
    snprintf(out->name, sizeof out->name, "%s", info.name);
    return LOOM_OK;
}

void loom_gguf_release_tensor_pages(const loom_gguf *g, int64_t i) {
    if (!g || !g->mapped || i < 0 || i >= g->n_tensors) return;
    const gguf_tensor *t = &g->tensors[i];
    loom_byte_range r = {g->data + g->data_off + t->offset, (size_t)t->nbytes};
    loom_gguf_drop(g, &r, 1); /* whole pages of the file mapping: read again if touched */
}

loom_status loom_gguf_get_tensor(const loom_gguf *g, const char *name, loom_tensor *out) {
    LOOM_RETURN_IF(!g || !name, LOOM_ERR_INVALID_ARG, "gguf: NULL argument");
    int64_t i = loom_gguf_find_tensor(g, name);
    LOOM_RETURN_IF(i < 0, LOOM_ERR_FORMAT, "gguf '%s': no tensor named '%s'", g->path, name);
    return loom_gguf_tensor_at(g, i, out);
}
