/* GGUF (llama.cpp's model format), versions 2 and 3, little-endian.
 *
 * Layout: "GGUF", uint32 version, uint64 tensor count, uint64 metadata count;
 * metadata entries (string key, uint32 value type, value); tensor infos
 * (string name, uint32 n_dims, uint64 dims[n_dims] innermost first, uint32
 * ggml type, uint64 offset into the data section); padding to the alignment
 * (general.alignment, default 32); the data section. Strings are uint64 length
 * + bytes (no NUL); arrays are uint32 element type + uint64 count + elements.
 *
 * The reader maps the file and validates everything before returning: every
 * count and length is bounded by the bytes left, strings lie inside the file,
 * keys and tensor names are unique, tensors lie inside the data section at
 * aligned offsets without overlapping, and their byte sizes follow from shape
 * and type. Errors name the file, the key or tensor and the byte offset. */
#ifndef LOOM_MODEL_GGUF_H
#define LOOM_MODEL_GGUF_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include "loom.h"
#include "model/mapped_file.h"

typedef struct loom_gguf loom_gguf;                 /* an open (mapped) GGUF file */
typedef struct loom_gguf_writer loom_gguf_writer;   /* builds a GGUF file */

#define LOOM_GGUF_DEFAULT_ALIGNMENT 32
#define LOOM_GGUF_MAX_DIMS 4
#define LOOM_GGUF_MAX_NAME 63   /* bytes of a tensor name (ggml's limit, less the NUL) */

/* Metadata value types (numbering of the format). */
typedef enum loom_gguf_type {
    LOOM_GGUF_UINT8 = 0,
    LOOM_GGUF_INT8 = 1,
    LOOM_GGUF_UINT16 = 2,
    LOOM_GGUF_INT16 = 3,
    LOOM_GGUF_UINT32 = 4,
    LOOM_GGUF_INT32 = 5,
    LOOM_GGUF_FLOAT32 = 6,
    LOOM_GGUF_BOOL = 7,
    LOOM_GGUF_STRING = 8,
    LOOM_GGUF_ARRAY = 9,
    LOOM_GGUF_UINT64 = 10,
    LOOM_GGUF_INT64 = 11,
    LOOM_GGUF_FLOAT64 = 12,
    LOOM_GGUF_TYPE_COUNT
} loom_gguf_type;

/* ggml tensor type ids used by loom (the full list is known by name). */
enum {
    LOOM_GGML_F32 = 0,
    LOOM_GGML_F16 = 1,
    LOOM_GGML_Q4_0 = 2,
    LOOM_GGML_Q4_1 = 3,
    LOOM_GGML_Q5_0 = 6,
    LOOM_GGML_Q5_1 = 7,
    LOOM_GGML_Q8_0 = 8,
    LOOM_GGML_Q4_K = 12,
    LOOM_GGML_Q5_K = 13,
    LOOM_GGML_Q6_K = 14,
    LOOM_GGML_IQ4_NL = 20,
    LOOM_GGML_IQ4_XS = 23,
    LOOM_GGML_BF16 = 30,
};

/* "uint32", "string", ...; "unknown" out of range. */
const char *loom_gguf_type_name(loom_gguf_type t);
/* "f32", "q4_K", ...; NULL for an id that is not a ggml type. */
const char *loom_ggml_type_name(uint32_t ggml_type);
/* Elements and bytes per block of a ggml type; 0 when unknown. */
int loom_ggml_block_elems(uint32_t ggml_type);
size_t loom_ggml_block_bytes(uint32_t ggml_type);
/* loom dtype of a ggml type: LOOM_ERR_UNSUPPORTED for known types loom cannot
 * compute with (K-quants, ...), LOOM_ERR_FORMAT for unknown ids. */
loom_status loom_ggml_type_to_dtype(uint32_t ggml_type, loom_dtype *out);
/* Types loom converts at load into one it computes with (gguf_kquant.c):
 * q4_K -> q4_1 (near exact: each sub-block's scale and min rounded to half),
 * q5_0, iq4_nl -> q8_0 (exact), iq4_xs -> q8_0 (near exact: each sub-block's
 * scale rounded to half), q5_1, q5_K, q6_K -> q8_0 (requantized per block of
 * 32, within half a q8_0 step and the half rounding of the step). Returns 1
 * and sets *to (may be NULL), or 0. */
int loom_ggml_convert_target(uint32_t ggml_type, loom_dtype *to);
/* n elements (a multiple of the type's block) of a convertible type into
 * dst, in the target's blocks. LOOM_ERR_FORMAT naming the block when a scale
 * or value is not finite, or a target scale would overflow its half;
 * LOOM_ERR_INVALID_ARG for another type or n. */
loom_status loom_ggml_convert_row(uint32_t ggml_type, const void *src, int64_t n, void *dst);
/* The f32 values of n elements of a convertible type (ggml's dequantization). */
loom_status loom_ggml_dequantize(uint32_t ggml_type, const void *src, int64_t n, float *dst);
/* ggml type id of a loom dtype; -1 when GGUF has none (i8). */
int loom_ggml_type_from_dtype(loom_dtype t);

/* ---------------------------------------------------------------- reader */

/* Opens and validates path. Errors: LOOM_ERR_IO (missing, unreadable),
 * LOOM_ERR_FORMAT (bad magic, truncation, impossible counts or lengths,
 * duplicates, bad offsets, sizes), LOOM_ERR_UNSUPPORTED (version other than
 * 2/3, unknown tensor type id), LOOM_ERR_NOMEM. *out is NULL on error. */
loom_status loom_gguf_open(const char *path, loom_gguf **out);
/* 1 when the file at path starts with the GGUF magic (0 also when it cannot be read). */
int loom_gguf_file_is_gguf(const char *path);
/* The same over data[0..size), which must outlive the handle (not copied);
 * name is used in messages. */
loom_status loom_gguf_open_memory(const void *data, size_t size, const char *name,
                                  loom_gguf **out);
/* Unmaps and frees; NULL is a no-op. Tensor views and strings die with it. */
void loom_gguf_close(loom_gguf *g);
/* The file's pages replaced by anonymous huge pages at the same addresses
 * (loom_mapped_file_resident); 1 when done. A GGUF opened from memory: 0. */
int loom_gguf_make_resident(loom_gguf *g);
/* The same, except the whole pages inside the ranges, which stay the file's
 * (loom_mapped_file_resident_except: -1 with the error set when the mapping is
 * unusable). */
int loom_gguf_make_resident_except(loom_gguf *g, const loom_byte_range *skip, int n);
/* 1 when [p, p + n) lies in the file's mapping (not in memory the loader
 * converted a tensor into). */
int loom_gguf_maps(const loom_gguf *g, const void *p, size_t n);
/* The whole pages inside the ranges dropped from the process while they are
 * the file's (loom_mapped_file_drop). */
void loom_gguf_drop(const loom_gguf *g, const loom_byte_range *skip, int n);

const char *loom_gguf_path(const loom_gguf *g);
uint32_t loom_gguf_version(const loom_gguf *g);
uint32_t loom_gguf_alignment(const loom_gguf *g);
/* Byte offset of the data section in the file. */
size_t loom_gguf_data_offset(const loom_gguf *g);

/* ---- metadata. Keys are NUL-terminated; values stay in the mapping. */

int64_t loom_gguf_n_kv(const loom_gguf *g);
/* Index of key, or -1 when absent. */
int64_t loom_gguf_find_key(const loom_gguf *g, const char *key);
/* Key, type, and for arrays element type and count of entry i (0..n_kv-1);
 * NULL / LOOM_GGUF_TYPE_COUNT / 0 out of range. */
const char *loom_gguf_kv_key(const loom_gguf *g, int64_t i);
loom_gguf_type loom_gguf_kv_type(const loom_gguf *g, int64_t i);
loom_gguf_type loom_gguf_kv_arr_type(const loom_gguf *g, int64_t i);
uint64_t loom_gguf_kv_arr_n(const loom_gguf *g, int64_t i);
/* Formats entry i's value for people ("32000", "\"llama\"", "[3 x int32: 1, 2, 3]");
 * long strings and arrays are shortened. Returns buf. */
const char *loom_gguf_kv_format(const loom_gguf *g, int64_t i, char *buf, size_t cap);

/* Typed getters. Integer getters accept any integer type whose value fits
 * (LOOM_ERR_FORMAT naming the value otherwise); float getters accept float32
 * and float64; bool and string need exactly that type. Errors: LOOM_ERR_FORMAT
 * for a missing key or a type mismatch (the message names key, found type and
 * offset); LOOM_ERR_INVALID_ARG for NULL arguments. */
loom_status loom_gguf_get_u32(const loom_gguf *g, const char *key, uint32_t *out);
loom_status loom_gguf_get_i32(const loom_gguf *g, const char *key, int32_t *out);
loom_status loom_gguf_get_u64(const loom_gguf *g, const char *key, uint64_t *out);
loom_status loom_gguf_get_i64(const loom_gguf *g, const char *key, int64_t *out);
loom_status loom_gguf_get_f32(const loom_gguf *g, const char *key, float *out);
loom_status loom_gguf_get_f64(const loom_gguf *g, const char *key, double *out);
loom_status loom_gguf_get_bool(const loom_gguf *g, const char *key, int *out);
/* *s points into the mapping and is not NUL-terminated; *len its bytes. */
loom_status loom_gguf_get_str(const loom_gguf *g, const char *key, const char **s, size_t *len);

/* Element type and count of an array. */
loom_status loom_gguf_get_arr_info(const loom_gguf *g, const char *key,
                                   loom_gguf_type *elem_type, uint64_t *n);
/* Copies the n elements of an integer / float array (converting, with range
 * checks). LOOM_ERR_FORMAT when the key is not such an array or its count is
 * not n. */
loom_status loom_gguf_get_arr_i32(const loom_gguf *g, const char *key, int32_t *out, uint64_t n);
loom_status loom_gguf_get_arr_f32(const loom_gguf *g, const char *key, float *out, uint64_t n);
/* Pointers into the mapping (not NUL-terminated) and lengths of the n strings
 * of a string array. */
loom_status loom_gguf_get_arr_str(const loom_gguf *g, const char *key, const char **strs,
                                  uint64_t *lens, uint64_t n);

/* ---- tensors */

typedef struct loom_gguf_tensor_info {
    const char *name;     /* NUL-terminated */
    uint32_t ggml_type;
    int n_dims;           /* 1..4 */
    int64_t ne[LOOM_GGUF_MAX_DIMS];  /* GGUF order: ne[0] is the innermost (contiguous) dim; unused 1 */
    uint64_t offset;      /* from the start of the data section */
    uint64_t nbytes;
    const void *data;     /* in the mapping */
} loom_gguf_tensor_info;

/* Its element count, and its shape in loom's order (outermost first: GGUF's
 * ne reversed) into shape[0 .. n_dims). */
int64_t loom_gguf_tensor_nelem(const loom_gguf_tensor_info *info);
void loom_gguf_tensor_shape(const loom_gguf_tensor_info *info, int64_t *shape);

int64_t loom_gguf_n_tensors(const loom_gguf *g);
/* Index of the tensor called name, or -1. */
int64_t loom_gguf_find_tensor(const loom_gguf *g, const char *name);
/* Describes tensor i. LOOM_ERR_INVALID_ARG out of range. */
loom_status loom_gguf_tensor_info_at(const loom_gguf *g, int64_t i, loom_gguf_tensor_info *info);
/* A loom_tensor view of tensor i or of the tensor called name: shape is
 * outermost-first (GGUF's dims reversed), contiguous, data in the read-only
 * mapping (do not write). Errors: LOOM_ERR_FORMAT for a missing name;
 * LOOM_ERR_UNSUPPORTED (naming the tensor and its type) for a type loom
 * cannot compute with, or data not aligned to its element size. */
loom_status loom_gguf_tensor_at(const loom_gguf *g, int64_t i, loom_tensor *out);
loom_status loom_gguf_get_tensor(const loom_gguf *g, const char *name, loom_tensor *out);
/* Drops the whole pages of tensor i's data from the process (madvise
 * MADV_DONTNEED on the read-only mapping; the page cache keeps them and a later
 * read maps them again): for a tensor converted at load. No-op for a GGUF
 * opened from memory. */
void loom_gguf_release_tensor_pages(const loom_gguf *g, int64_t i);

/* ---------------------------------------------------------------- writer */

/* A writer for version 3 with alignment 32. Keys and tensor names must be
 * unique (LOOM_ERR_INVALID_ARG otherwise). Values and names are copied;
 * tensor data is borrowed until the file is written. */
loom_status loom_gguf_writer_init(loom_gguf_writer **out);
void loom_gguf_writer_free(loom_gguf_writer *w);
/* 2 or 3 (the layouts are identical; only the number differs). */
loom_status loom_gguf_writer_set_version(loom_gguf_writer *w, uint32_t version);
/* Sets the alignment (a power of two) and stores it as general.alignment.
 * Setting general.alignment with loom_gguf_writer_set_u32 does the same. */
loom_status loom_gguf_writer_set_alignment(loom_gguf_writer *w, uint32_t alignment);

loom_status loom_gguf_writer_set_u8(loom_gguf_writer *w, const char *key, uint8_t v);
loom_status loom_gguf_writer_set_i8(loom_gguf_writer *w, const char *key, int8_t v);
loom_status loom_gguf_writer_set_u16(loom_gguf_writer *w, const char *key, uint16_t v);
loom_status loom_gguf_writer_set_i16(loom_gguf_writer *w, const char *key, int16_t v);
loom_status loom_gguf_writer_set_u32(loom_gguf_writer *w, const char *key, uint32_t v);
loom_status loom_gguf_writer_set_i32(loom_gguf_writer *w, const char *key, int32_t v);
loom_status loom_gguf_writer_set_u64(loom_gguf_writer *w, const char *key, uint64_t v);
loom_status loom_gguf_writer_set_i64(loom_gguf_writer *w, const char *key, int64_t v);
loom_status loom_gguf_writer_set_f32(loom_gguf_writer *w, const char *key, float v);
loom_status loom_gguf_writer_set_f64(loom_gguf_writer *w, const char *key, double v);
loom_status loom_gguf_writer_set_bool(loom_gguf_writer *w, const char *key, int v);
loom_status loom_gguf_writer_set_str(loom_gguf_writer *w, const char *key, const char *s);
loom_status loom_gguf_writer_set_str_n(loom_gguf_writer *w, const char *key, const char *s, size_t len);
/* An array of n fixed-size elements (not string, not array) from a C array
 * of the matching type (bool: one byte each). */
loom_status loom_gguf_writer_set_arr(loom_gguf_writer *w, const char *key, loom_gguf_type elem_type,
                                     const void *data, uint64_t n);
/* An array of n strings; lens may be NULL for NUL-terminated strings. */
loom_status loom_gguf_writer_set_arr_str(loom_gguf_writer *w, const char *key,
                                         const char *const *strs, const uint64_t *lens, uint64_t n);
/* An array whose n elements of elem_type are already encoded in payload
 * (for nested arrays). The payload is copied as is. */
loom_status loom_gguf_writer_set_arr_raw(loom_gguf_writer *w, const char *key, loom_gguf_type elem_type,
                                         uint64_t n, const void *payload, size_t size);

/* Adds a tensor of ggml type with a loom-order shape (outermost first; the
 * last dim a multiple of the type's block). nbytes must equal the size the
 * shape implies; data is borrowed. */
loom_status loom_gguf_writer_add_tensor(loom_gguf_writer *w, const char *name, uint32_t ggml_type,
                                        int ndim, const int64_t *shape, const void *data,
                                        size_t nbytes);
/* The same, with the bytes produced at write time by fill(ctx, name, dst,
 * nbytes) (for conversions too large to hold twice). */
typedef loom_status (*loom_gguf_fill_fn)(void *ctx, const char *name, void *dst, size_t nbytes);
loom_status loom_gguf_writer_add_tensor_fn(loom_gguf_writer *w, const char *name, uint32_t ggml_type,
                                           int ndim, const int64_t *shape, loom_gguf_fill_fn fill,
                                           void *ctx);

/* Writes the file (LOOM_ERR_IO naming path on failure). */
loom_status loom_gguf_writer_write_file(loom_gguf_writer *w, const char *path);
/* Writes to an open stream (not closed); name is used in messages. */
loom_status loom_gguf_writer_write_stream(loom_gguf_writer *w, FILE *f, const char *name);
/* Writes into a malloc'd buffer (*data, *size); the caller frees it. */
loom_status loom_gguf_writer_write_memory(loom_gguf_writer *w, void **data, size_t *size);

#endif
