/* safetensors (Hugging Face's tensor file), read by mmap.
 *
 * Layout: uint64 little-endian header length N, N bytes of JSON, then the
 * data section. The JSON is an object: "__metadata__" (ignored) and, per
 * tensor, {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} with
 * offsets relative to the data section.
 *
 * The reader validates everything before returning: the header length against
 * the file, the JSON (parsed with libcjson), known dtype strings, shapes of at
 * most 4 non-negative dims, offsets inside the data section, byte sizes equal
 * to shape x element size, no two tensors overlapping. Errors name the file
 * and the tensor. A folder or a "*.index.json" opens a sharded checkpoint
 * (model.safetensors.index.json's weight_map) as one set of tensors. */
#ifndef LOOM_MODEL_SAFETENSORS_H
#define LOOM_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

typedef struct loom_safetensors loom_safetensors;  /* opaque: mapped shards + tensor table */

#define LOOM_ST_MAX_DIMS 4

typedef struct loom_st_tensor_info {
    const char *name;        /* NUL-terminated, lives as long as the handle */
    const char *dtype_str;   /* "F32", "BF16", "I64", ... as in the file */
    int dtype_ok;            /* 1 when dtype is F32/F16/BF16 (loom can compute with it) */
    loom_dtype dtype;        /* valid when dtype_ok */
    int ndim;                /* 0..4 (0 for a scalar) */
    int64_t shape[LOOM_ST_MAX_DIMS];  /* outermost first; unused dims 1 */
    uint64_t nbytes;
    const void *data;        /* in the mapping (read-only) */
} loom_st_tensor_info;

/* Opens path: a .safetensors file, a sharded checkpoint's *.index.json, or a
 * folder holding model.safetensors or model.safetensors.index.json.
 * Errors: LOOM_ERR_IO (missing, unreadable), LOOM_ERR_FORMAT (truncated,
 * bad JSON, bad entries: the message names the tensor and the field),
 * LOOM_ERR_NOMEM. *out is NULL on error. */
loom_status loom_safetensors_open(const char *path, loom_safetensors **out);
/* The same over one file image data[0..size) (must outlive the handle). */
loom_status loom_safetensors_open_memory(const void *data, size_t size, const char *name,
                                         loom_safetensors **out);
/* Unmaps and frees; NULL is a no-op. */
void loom_safetensors_close(loom_safetensors *st);
/* Every shard's pages replaced by anonymous huge pages at the same addresses
 * (loom_mapped_file_resident); the number of shards made resident. */
int loom_safetensors_make_resident(loom_safetensors *st);

const char *loom_safetensors_path(const loom_safetensors *st);
int64_t loom_safetensors_n_tensors(const loom_safetensors *st);
/* Index of the tensor called name, or -1. */
int64_t loom_safetensors_find(const loom_safetensors *st, const char *name);
/* Describes tensor i (sorted by name). LOOM_ERR_INVALID_ARG out of range. */
loom_status loom_safetensors_info_at(const loom_safetensors *st, int64_t i, loom_st_tensor_info *out);
/* A contiguous loom_tensor view of the tensor called name (a scalar becomes
 * shape [1]). Errors: LOOM_ERR_FORMAT for a missing name; LOOM_ERR_UNSUPPORTED
 * naming the tensor for a dtype other than F32/F16/BF16 or data not aligned to
 * its element size. */
loom_status loom_safetensors_get(const loom_safetensors *st, const char *name, loom_tensor *out);

/* Element size of a safetensors dtype string (0 when unknown). */
size_t loom_st_dtype_size(const char *dtype);

#endif
