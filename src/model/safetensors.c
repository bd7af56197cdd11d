/* safetensors reader: header parsing and validation (libcjson), sharded
 * checkpoints, tensor views into the mapping. */
#include "model/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/file.h"
#include "base/status.h"
#include "model/hf_config.h"
#include "model/mapped_file.h"

#define ST_MAX_HEADER (256u << 20)  /* a header larger than this is not a real checkpoint */
#define ST_MAX_SHARDS 1024

typedef struct st_entry {
    char *name;
    const char *dtype_str;  /* static, from the dtype table */
    int dtype_ok;
    loom_dtype dtype;
    int ndim;
    int64_t shape[LOOM_ST_MAX_DIMS];
    uint64_t begin, nbytes;
    const unsigned char *data;
} st_entry;

struct loom_safetensors {
    char path[1024];
    loom_mapped_file *files;
    int n_files;
    st_entry *t;
    int64_t n, cap;
};

static const struct {
    const char *name;
    size_t size;
    int ok;
    loom_dtype dt;
} st_dtypes[] = {
    {"F32", 4, 1, LOOM_F32},  {"F16", 2, 1, LOOM_F16},   {"BF16", 2, 1, LOOM_BF16},
    {"F64", 8, 0, LOOM_F32},  {"I64", 8, 0, LOOM_F32},   {"U64", 8, 0, LOOM_F32},
    {"I32", 4, 0, LOOM_F32},  {"U32", 4, 0, LOOM_F32},   {"I16", 2, 0, LOOM_F32},
    {"U16", 2, 0, LOOM_F32},  {"I8", 1, 0, LOOM_F32},    {"U8", 1, 0, LOOM_F32},
    {"BOOL", 1, 0, LOOM_F32}, {"F8_E4M3", 1, 0, LOOM_F32}, {"F8_E5M2", 1, 0, LOOM_F32},
};
#define ST_N_DTYPES (sizeof st_dtypes / sizeof st_dtypes[0])

static int dtype_index(const char *s) {
    for (size_t i = 0; i < ST_N_DTYPES; i++)
        if (strcmp(s, st_dtypes[i].name) == 0) return (int)i;
    return -1;
}

size_t loom_st_dtype_size(const char *dtype) {
    int i = dtype ? dtype_index(dtype) : -1;
    return i < 0 ? 0 : st_dtypes[i].size;
}

/* A JSON number that is a non-negative integer below 2^53. */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || floor(d) != d) return 0;
    *out = (uint64_t)d;
    return 1;
}

static loom_status push_entry(loom_safetensors *st, st_entry *e) {
    if (st->n == st->cap) {
        int64_t cap = st->cap ? st->cap * 2 : 64;
        st_entry *p = realloc(st->t, sizeof *p * (size_t)cap);
        LOOM_RETURN_IF(!p, LOOM_ERR_NOMEM, "safetensors: out of memory for %lld tensors", (long long)cap);
        st->t = p;
        st->cap = cap;
    }
    st->t[st->n++] = *e;
    return LOOM_OK;
}

/* Validates one tensor entry of file name whose data section is data[0..dsize). */
static loom_status parse_entry(const char *name, const cJSON *item, const unsigned char *data,
                               uint64_t dsize, st_entry *e) {
    const char *tn = item->string;
    memset(e, 0, sizeof *e);
    LOOM_RETURN_IF(!cJSON_IsObject(item), LOOM_ERR_FORMAT,
                   "safetensors '%s': tensor '%.80s' is not a JSON object", name, tn);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    LOOM_RETURN_IF(!cJSON_IsString(dt), LOOM_ERR_FORMAT,
                   "safetensors '%s': tensor '%.80s' has no \"dtype\" string", name, tn);
    int di = dtype_index(dt->valuestring);
    LOOM_RETURN_IF(di < 0, LOOM_ERR_FORMAT, "safetensors '%s': tensor '%.80s' has unknown dtype '%.16s'",
                   name, tn, dt->valuestring);
    LOOM_RETURN_IF(!cJSON_IsArray(sh), LOOM_ERR_FORMAT,
                   "safetensors '%s': tensor '%.80s' has no \"shape\" array", name, tn);
    int nd = cJSON_GetArraySize(sh);
    LOOM_RETURN_IF(nd > LOOM_ST_MAX_DIMS, LOOM_ERR_UNSUPPORTED,
                   "safetensors '%s': tensor '%.80s' has %d dims (at most %d supported)", name, tn, nd,
                   LOOM_ST_MAX_DIMS);
    e->dtype_str = st_dtypes[di].name;
    e->dtype_ok = st_dtypes[di].ok;
    e->dtype = st_dtypes[di].dt;
    e->ndim = nd;
    for (int d = 0; d < LOOM_ST_MAX_DIMS; d++) e->shape[d] = 1;
    uint64_t nelem = 1;
    int overflow = 0;
    for (int d = 0; d < nd; d++) {
        uint64_t v;
        LOOM_RETURN_IF(!json_uint(cJSON_GetArrayItem(sh, d), &v) || v > (uint64_t)INT64_MAX / 2,
                       LOOM_ERR_FORMAT, "safetensors '%s': tensor '%.80s' shape entry %d is not a "
                       "non-negative integer", name, tn, d);
        e->shape[d] = (int64_t)v;
        if (v && nelem > UINT64_MAX / v) overflow = 1;
        nelem *= v;
    }
    LOOM_RETURN_IF(!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2, LOOM_ERR_FORMAT,
                   "safetensors '%s': tensor '%.80s' needs \"data_offsets\": [begin, end]", name, tn);
    uint64_t b, en;
    LOOM_RETURN_IF(!json_uint(cJSON_GetArrayItem(off, 0), &b) || !json_uint(cJSON_GetArrayItem(off, 1), &en),
                   LOOM_ERR_FORMAT, "safetensors '%s': tensor '%.80s' data_offsets are not "
                   "non-negative integers", name, tn);
    LOOM_RETURN_IF(b > en || en > dsize, LOOM_ERR_FORMAT,
                   "safetensors '%s': tensor '%.80s' data_offsets [%llu, %llu] lie outside the data "
                   "section of %llu bytes (file truncated?)", name, tn, (unsigned long long)b,
                   (unsigned long long)en, (unsigned long long)dsize);
    size_t es = st_dtypes[di].size;
    LOOM_RETURN_IF(overflow || nelem > UINT64_MAX / es || nelem * es != en - b, LOOM_ERR_FORMAT,
                   "safetensors '%s': tensor '%.80s' has %llu bytes but its shape and dtype %s "
                   "need %llu", name, tn, (unsigned long long)(en - b), e->dtype_str,
                   overflow ? 0ull : (unsigned long long)(nelem * es));
    e->begin = b;
    e->nbytes = en - b;
    e->data = data + b;
    e->name = strdup(tn);
    LOOM_RETURN_IF(!e->name, LOOM_ERR_NOMEM, "safetensors: out of memory");
    return LOOM_OK;
}

static int by_begin(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}
static int by_name(const void *a, const void *b) {
    return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

/* Parses one file image, appending its tensors to st. */
static loom_status parse_file(loom_safetensors *st, const unsigned char *p, size_t size, const char *name) {
    LOOM_RETURN_IF(size < 8, LOOM_ERR_FORMAT,
                   "safetensors '%s': %zu bytes is too short for the 8-byte header length", name, size);
    uint64_t hn = 0;
    for (int i = 7; i >= 0; i--) hn = hn << 8 | p[i];
    LOOM_RETURN_IF(hn > size - 8 || hn > ST_MAX_HEADER, LOOM_ERR_FORMAT,
                   "safetensors '%s': header length %llu does not fit the file of %zu bytes "
                   "(truncated or not a safetensors file)", name, (unsigned long long)hn, size);
    LOOM_RETURN_IF(hn < 2, LOOM_ERR_FORMAT, "safetensors '%s': header of %llu bytes is too short",
                   name, (unsigned long long)hn);
    cJSON *root = cJSON_ParseWithLength((const char *)p + 8, (size_t)hn);
    LOOM_RETURN_IF(!root, LOOM_ERR_FORMAT, "safetensors '%s': the header is not valid JSON", name);
    loom_status s = LOOM_OK;
    if (!cJSON_IsObject(root)) {
        s = loom_set_error(LOOM_ERR_FORMAT, "safetensors '%s': the header is not a JSON object", name);
        goto done;
    }
    const unsigned char *data = p + 8 + hn;
    uint64_t dsize = size - 8 - hn;
    int64_t first = st->n;
    for (const cJSON *it = root->child; it && s == LOOM_OK; it = it->next) {
        if (!it->string) continue;
        if (strcmp(it->string, "__metadata__") == 0) continue;
        st_entry e;
        s = parse_entry(name, it, data, dsize, &e);
        if (s == LOOM_OK) s = push_entry(st, &e);
        if (s != LOOM_OK) free(e.name);
    }
    if (s != LOOM_OK) goto done;
    /* tensors of one file must not share bytes */
    int64_t nt = st->n - first;
    st_entry *tmp = nt ? malloc(sizeof *tmp * (size_t)nt) : NULL;
    if (nt && !tmp) {
        s = loom_set_error(LOOM_ERR_NOMEM, "safetensors: out of memory");
        goto done;
    }
    if (nt) memcpy(tmp, st->t + first, sizeof *tmp * (size_t)nt);
    if (nt) qsort(tmp, (size_t)nt, sizeof *tmp, by_begin);
    uint64_t end = 0;
    const char *prev = NULL;
    for (int64_t i = 0; i < nt && s == LOOM_OK; i++) {
        if (tmp[i].nbytes == 0) continue;
        if (tmp[i].begin < end)
            s = loom_set_error(LOOM_ERR_FORMAT, "safetensors '%s': tensors '%.80s' and '%.80s' overlap",
                               name, prev, tmp[i].name);
        end = tmp[i].begin + tmp[i].nbytes;
        prev = tmp[i].name;
    }
    free(tmp);
done:
    cJSON_Delete(root);
    return s;
}

/* Sorts by name and rejects duplicates (within a file or across shards). */
static loom_status finish(loom_safetensors *st) {
    if (st->n) qsort(st->t, (size_t)st->n, sizeof *st->t, by_name);
    for (int64_t i = 1; i < st->n; i++)
        LOOM_RETURN_IF(strcmp(st->t[i - 1].name, st->t[i].name) == 0, LOOM_ERR_FORMAT,
                       "safetensors '%s': tensor '%.80s' appears twice", st->path, st->t[i].name);
    return LOOM_OK;
}

static loom_status create(const char *path, loom_safetensors **out) {
    *out = calloc(1, sizeof **out);
    LOOM_RETURN_IF(!*out, LOOM_ERR_NOMEM, "safetensors: out of memory");
    snprintf((*out)->path, sizeof (*out)->path, "%s", path ? path : "(memory)");
    return LOOM_OK;
}

loom_status loom_safetensors_open_memory(const void *data, size_t size, const char *name,
                                         loom_safetensors **out) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "safetensors: out is NULL");
    *out = NULL;
    LOOM_RETURN_IF(!data && size, LOOM_ERR_INVALID_ARG, "safetensors: data is NULL");
    loom_safetensors *st;
    LOOM_TRY(create(name, &st));
    loom_status s = parse_file(st, data, size, st->path);
    if (s == LOOM_OK) s = finish(st);
    if (s != LOOM_OK) loom_safetensors_close(st);
    else *out = st;
    return s;
}

static loom_status add_file(loom_safetensors *st, const char *path) {
    LOOM_RETURN_IF(st->n_files >= ST_MAX_SHARDS, LOOM_ERR_FORMAT, "safetensors '%s': more than %d shards",
                   st->path, ST_MAX_SHARDS);
    loom_mapped_file *f = realloc(st->files, sizeof *f * (size_t)(st->n_files + 1));
    LOOM_RETURN_IF(!f, LOOM_ERR_NOMEM, "safetensors: out of memory");
    st->files = f;
    LOOM_TRY(loom_mapped_file_open(&st->files[st->n_files], path));
    st->n_files++;
    const loom_mapped_file *m = &st->files[st->n_files - 1];
    return parse_file(st, m->data, m->size, path);
}

/* Opens every shard named in an index file's weight_map. */
static loom_status open_index(loom_safetensors *st, const char *index) {
    char *text;
    size_t len;
    LOOM_TRY(loom_read_text_file(index, &text, &len));
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    LOOM_RETURN_IF(!root, LOOM_ERR_FORMAT, "safetensors index '%s' is not valid JSON", index);
    loom_status s = LOOM_OK;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", index);
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = '\0';
    else dir[0] = '\0';
    if (!cJSON_IsObject(wm)) {
        s = loom_set_error(LOOM_ERR_FORMAT, "safetensors index '%s' has no \"weight_map\" object", index);
        goto done;
    }
    /* each distinct shard once, in order of first mention */
    for (const cJSON *it = wm->child; it && s == LOOM_OK; it = it->next) {
        if (!cJSON_IsString(it) || !it->valuestring[0] || strstr(it->valuestring, "..") ||
            it->valuestring[0] == '/') {
            s = loom_set_error(LOOM_ERR_FORMAT, "safetensors index '%s': entry '%.80s' does not name "
                               "a shard file in the same folder", index, it->string ? it->string : "?");
            break;
        }
        int seen = 0;
        for (const cJSON *p = wm->child; p != it; p = p->next)
            if (strcmp(p->valuestring, it->valuestring) == 0) seen = 1;
        if (seen) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s%s", dir, it->valuestring);
        s = add_file(st, path);
    }
    if (s != LOOM_OK) goto done;
    s = finish(st);
    for (const cJSON *it = wm->child; it && s == LOOM_OK; it = it->next)
        if (loom_safetensors_find(st, it->string) < 0)
            s = loom_set_error(LOOM_ERR_FORMAT, "safetensors index '%s': tensor '%.80s' is not in "
                               "its shard '%.80s'", index, it->string, it->valuestring);
done:
    cJSON_Delete(root);
    return s;
}

static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

loom_status loom_safetensors_open(const char *path, loom_safetensors **out) {
    LOOM_RETURN_IF(!out || !path, LOOM_ERR_INVALID_ARG, "safetensors: path and out must not be NULL");
    *out = NULL;
    struct stat sb;
    LOOM_RETURN_IF(stat(path, &sb) != 0, LOOM_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    loom_safetensors *st;
    LOOM_TRY(create(path, &st));
    loom_status s;
    char buf[1100];
    if (S_ISDIR(sb.st_mode)) {
        snprintf(buf, sizeof buf, "%s/model.safetensors", path);
        if (is_file(buf)) {
            s = add_file(st, buf);
            if (s == LOOM_OK) s = finish(st);
        } else {
            snprintf(buf, sizeof buf, "%s/model.safetensors.index.json", path);
            s = is_file(buf) ? open_index(st, buf)
                             : loom_set_error(LOOM_ERR_IO, "folder '%s' has neither model.safetensors nor "
                                              "model.safetensors.index.json", path);
        }
    } else if (loom_path_ends_with(path, ".json")) {
        s = open_index(st, path);
    } else {
        s = add_file(st, path);
        if (s == LOOM_OK) s = finish(st);
    }
    if (s != LOOM_OK) loom_safetensors_close(st);
    else *out = st;
    return s;
}

int loom_safetensors_make_resident(loom_safetensors *st) {
    int n = 0;
    for (int i = 0; st && i < st->n_files; i++) n += loom_mapped_file_resident(&st->files[i]);
    return n;
}

void loom_safetensors_close(loom_safetensors *st) {
    if (!st) return;
    for (int64_t i = 0; i < st->n; i++) free(st->t[i].name);
    free(st->t);
    for (int i = 0; i < st->n_files; i++) loom_mapped_file_close(&st->files[i]);
    free(st->files);
    free(st);
}

const char *loom_safetensors_path(const loom_safetensors *st) { return st ? st->path : ""; }
int64_t loom_safetensors_n_tensors(const loom_safetensors *st) { return st ? st->n : 0; }

int64_t loom_safetensors_find(const loom_safetensors *st, const char *name) {
    if (!st || !name) return -1;
    int64_t lo = 0, hi = st->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->t[mid].name, name);
        if (c == 0) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

loom_status loom_safetensors_info_at(const loom_safetensors *st, int64_t i, loom_st_tensor_info *out) {
    LOOM_RETURN_IF(!st || !out || i < 0 || i >= st->n, LOOM_ERR_INVALID_ARG,
                   "safetensors: tensor index %lld out of range", (long long)i);
    const st_entry *e = &st->t[i];
    out->name = e->name;
    out->dtype_str = e->dtype_str;
    out->dtype_ok = e->dtype_ok;
    out->dtype = e->dtype;
    out->ndim = e->ndim;
    memcpy(out->shape, e->shape, sizeof out->shape);
    out->nbytes = e->nbytes;
    out->data = e->data;
    return LOOM_OK;
}

loom_status loom_safetensors_get(const loom_safetensors *st, const char *name, loom_tensor *out) {
    LOOM_RETURN_IF(!st || !name || !out, LOOM_ERR_INVALID_ARG, "safetensors: NULL argument");
    int64_t i = loom_safetensors_find(st, name);
    LOOM_RETURN_IF(i < 0, LOOM_ERR_FORMAT, "safetensors '%s': tensor '%.80s' is missing", st->path, name);
    const st_entry *e = &st->t[i];
    LOOM_RETURN_IF(!e->dtype_ok, LOOM_ERR_UNSUPPORTED,
                   "safetensors '%s': tensor '%.80s' has dtype %s (F32, F16 and BF16 are supported)",
                   st->path, name, e->dtype_str);
    size_t es = loom_dtype_size(e->dtype);
    LOOM_RETURN_IF((uintptr_t)e->data % es != 0, LOOM_ERR_UNSUPPORTED,
                   "safetensors '%s': tensor '%.80s' data is not aligned to its %zu-byte elements",
                   st->path, name, es);
    int nd = e->ndim ? e->ndim : 1;
    LOOM_TRY(loom_tensor_init(out, e->dtype, nd, e->shape, (void *)e->data));
    loom_tensor_set_name(out, "%.63s", name);
    return LOOM_OK;
}
