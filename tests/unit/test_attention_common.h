/* Helpers of the attention tests: guarded output buffers, random tensors in
 * any layout and dtype, element access, comparison with the DESIGN.md
 * tolerances, and running the thread-level entry points as nth threads would. */
#ifndef LOOM_TEST_ATTENTION_COMMON_H
#define LOOM_TEST_ATTENTION_COMMON_H

#include "check.h"

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "fused/attention.h"
#include "fused/ref/attention_ref.h"

#include <stdint.h>
#include <string.h>

#define GUARD_BYTES 64
#define GUARD_BYTE 0xC5

/* Output memory with canaries on both sides. */
typedef struct gbuf {
    unsigned char *base;
    size_t bytes;
} gbuf;

static inline void *gbuf_alloc(gbuf *g, size_t bytes) {
    g->bytes = bytes;
    g->base = malloc(bytes + 2 * GUARD_BYTES);
    if (!g->base) abort();
    memset(g->base, GUARD_BYTE, bytes + 2 * GUARD_BYTES);
    return g->base + GUARD_BYTES;
}

static inline int gbuf_intact(const gbuf *g) {
    for (size_t i = 0; i < GUARD_BYTES; i++)
        if (g->base[i] != GUARD_BYTE || g->base[GUARD_BYTES + g->bytes + i] != GUARD_BYTE)
            return 0;
    return 1;
}

static inline void gbuf_free(gbuf *g) { free(g->base), g->base = NULL; }

static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

/* Shape of a q/k/v/out tensor in a layout. TND ignores B. */
static inline int layout_shape(loom_attn_layout L, int64_t B, int64_t S, int64_t N, int64_t D,
                               int64_t *shape) {
    switch (L) {
    case LOOM_ATTN_BSND: shape[0] = B, shape[1] = S, shape[2] = N, shape[3] = D; return 4;
    case LOOM_ATTN_BNSD: shape[0] = B, shape[1] = N, shape[2] = S, shape[3] = D; return 4;
    case LOOM_ATTN_BSH: shape[0] = B, shape[1] = S, shape[2] = N * D; return 3;
    default: shape[0] = S, shape[1] = N, shape[2] = D; return 3;
    }
}

/* A tensor over exactly-sized malloc'd memory (ASan sees any overread). pad > 0
 * leaves pad unused elements after every innermost row (non-contiguous strides). */
static inline void tensor_new(loom_tensor *t, loom_dtype dt, int ndim, const int64_t *shape,
                              int64_t pad) {
    memset(t, 0, sizeof *t);
    t->dtype = dt, t->ndim = ndim;
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t->shape[d] = shape[d];
        t->stride[d] = st;
        st *= shape[d] + (d == ndim - 1 ? pad : 0);
    }
    for (int d = ndim; d < LOOM_MAX_DIMS; d++) t->shape[d] = 1, t->stride[d] = st;
    size_t bytes = (size_t)st * loom_dtype_size(dt);
    t->data = xmalloc(bytes);
    memset(t->data, 0, bytes);
}

static inline int64_t tensor_span(const loom_tensor *t) {
    return t->stride[0] * t->shape[0];
}

/* Element (flat index over the padded span) as f32 / from f32. */
static inline float tget(const loom_tensor *t, int64_t off) {
    switch (t->dtype) {
    case LOOM_F32: return ((const float *)t->data)[off];
    case LOOM_F16: return loom_f16_to_f32(((const uint16_t *)t->data)[off]);
    case LOOM_BF16: return loom_bf16_to_f32(((const uint16_t *)t->data)[off]);
    case LOOM_I8: return (float)((const int8_t *)t->data)[off];
    case LOOM_I32: return (float)((const int32_t *)t->data)[off];
    default: return NAN;
    }
}

static inline void tset(const loom_tensor *t, int64_t off, float v) {
    switch (t->dtype) {
    case LOOM_F32: ((float *)t->data)[off] = v; break;
    case LOOM_F16: ((uint16_t *)t->data)[off] = loom_f32_to_f16(v); break;
    case LOOM_BF16: ((uint16_t *)t->data)[off] = loom_f32_to_bf16(v); break;
    case LOOM_I8: ((int8_t *)t->data)[off] = (int8_t)v; break;
    case LOOM_I32: ((int32_t *)t->data)[off] = (int32_t)v; break;
    default: break;
    }
}

/* Uniform values in [-amp, amp) everywhere (padding included). */
static inline void tensor_fill(const loom_tensor *t, loom_rng *r, float amp) {
    for (int64_t i = 0; i < tensor_span(t); i++) tset(t, i, amp * (2.0f * loom_rng_uniform(r) - 1.0f));
}

static inline void tensor_free(loom_tensor *t) { free(t->data), t->data = NULL; }

/* An output tensor in guarded memory, contiguous. */
static inline void tensor_guarded(loom_tensor *t, gbuf *g, loom_dtype dt, int ndim,
                                  const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    void *p = gbuf_alloc(g, (size_t)n * loom_dtype_size(dt));
    memset(p, 0x7F, (size_t)n * loom_dtype_size(dt)); /* poison: every element must be written */
    if (loom_tensor_init(t, dt, ndim, shape, p) != LOOM_OK) abort();
}

static inline int64_t tensor_count(const loom_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* |a - b| <= tol * max(1, |b|) over contiguous tensors; prints the first miss. */
/* The call expr fails and its error message names what. */
#define CHECK_ERR(expr, what)                                                            \
    do {                                                                                 \
        loom_clear_error();                                                              \
        loom_status s_ = (expr);                                                         \
        CHECK_MSG(s_ != LOOM_OK && strstr(loom_last_error(), what), "%s: \"%s\" lacks %s", \
                  #expr, loom_last_error(), what);                                       \
    } while (0)

static inline int tensors_close(const loom_tensor *a, const loom_tensor *b, double tol,
                                const char *what) {
    int64_t n = tensor_count(a);
    for (int64_t i = 0; i < n; i++) {
        double x = tget(a, i), y = tget(b, i);
        if (!check_close(x, y, tol)) {
            fprintf(stderr, "  %s[%lld]: %.9g vs ref %.9g (tol %g)\n", what, (long long)i, x, y, tol);
            return 0;
        }
    }
    return 1;
}

static inline double dtype_tol(loom_dtype t) {
    return t == LOOM_BF16 ? 1.0 / 128 : t == LOOM_F16 ? 1.0 / 256 : 1.0 / 2048;
}

/* The loosest tolerance of the dtypes involved. */
static inline double case_tol(loom_dtype a, loom_dtype b, loom_dtype c) {
    double t = dtype_tol(a);
    if (dtype_tol(b) > t) t = dtype_tol(b);
    if (dtype_tol(c) > t) t = dtype_tol(c);
    return t;
}

/* Levels this CPU can run, generic first. */
static inline int test_levels(loom_isa *out) {
    int n = 0;
    for (int l = LOOM_ISA_GENERIC; l < LOOM_ISA_COUNT; l++)
        if (l <= (int)loom_cpu_best_isa()) out[n++] = (loom_isa)l;
    return n;
}

#endif
