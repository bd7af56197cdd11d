/* Shared by the GGUF reader (gguf.c), its metadata getters (gguf_meta.c) and
 * the writer (gguf_write.c); not for other modules. */
#ifndef LOOM_MODEL_GGUF_INTERNAL_H
#define LOOM_MODEL_GGUF_INTERNAL_H

#include "model/gguf.h"

/* A validated value in the mapping. */
typedef struct loom_gguf_raw {
    uint32_t type;
    uint32_t arr_type;            /* arrays only */
    uint64_t arr_n;               /* arrays only */
    const unsigned char *val;     /* the value; for arrays the first element */
    const unsigned char *end;     /* end of the file */
    size_t offset;                /* file offset of val, for messages */
    const char *path, *key;
} loom_gguf_raw;

/* Locates key's value; LOOM_ERR_FORMAT when absent. */
loom_status loom_gguf_kv_raw(const loom_gguf *g, const char *key, loom_gguf_raw *raw);
/* Bytes of a fixed-size value type; 0 for string, array and unknown types. */
size_t loom_gguf_value_size(uint32_t type);
/* Bytes of a tensor of a ggml type with dims ne[0..n_dims) (GGUF order);
 * LOOM_ERR_FORMAT for a row that is not whole blocks or a size overflow,
 * LOOM_ERR_UNSUPPORTED for an unknown type. */
loom_status loom_ggml_nbytes(uint32_t type, const int64_t *ne, int n_dims, uint64_t *nbytes);

#endif
