/* Helpers shared by the test_ops_*.c tests: tensor set-up, random data,
 * running an op single-threaded or as nth threads would. */
#ifndef LOOM_TEST_OPS_COMMON_H
#define LOOM_TEST_OPS_COMMON_H

#include "check.h"

#include "base/alloc.h"
#include "base/rng.h"
#include "ops/ops.h"

#include <string.h>

/* Fills t as a contiguous tensor: TENSOR(t, LOOM_F32, data, 2, 3). */
#define TENSOR(t, dt, data, ...)                                                         \
    tensor_init_(&(t), (dt), (data), (const int64_t[]){__VA_ARGS__},                     \
                 (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

static inline void tensor_init_(loom_tensor *t, loom_dtype dt, void *data, const int64_t *shape,
                                int ndim) {
    loom_status s = loom_tensor_init(t, dt, ndim, shape, data);
    if (s != LOOM_OK) {
        fprintf(stderr, "tensor_init failed: %s\n", loom_last_error());
        abort(); /* a broken test set-up, not a result */
    }
}

/* Uniform in [-1, 1). */
static inline float frand(loom_rng *r) { return 2.0f * loom_rng_uniform(r) - 1.0f; }

static inline void fill_rand(float *p, int64_t n, loom_rng *r) {
    for (int64_t i = 0; i < n; i++) p[i] = frand(r);
}

static inline float *falloc(int64_t n) {
    float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!p) abort();
    return p;
}

/* Runs op through loom_op_run at the reference level; CHECKs success. */
#define RUN_OK(op, src, n_src, attrs, dst)                                               \
    do {                                                                                 \
        loom_status s_ = loom_op_run((op), (src), (n_src), (attrs), (dst), LOOM_ISA_REF); \
        CHECK_MSG(s_ == LOOM_OK, "%s: %s", loom_status_str(s_), loom_last_error());      \
    } while (0)

/* Runs the op's reference kernel as nth threads would, one ith after another,
 * each with its own scratch. */
static inline loom_status run_split(loom_op op, const loom_tensor *const *src, int n_src,
                                    const void *attrs, loom_tensor *dst, int nth) {
    const loom_op_info *info = loom_op_get(op);
    size_t bytes = info->scratch_size ? info->scratch_size(src, n_src, dst, attrs) : 0;
    for (int ith = 0; ith < nth; ith++) {
        void *scratch = bytes ? loom_alloc_aligned(bytes, LOOM_ALIGN) : NULL;
        loom_kernel_args a = {.n_src = n_src, .dst = dst, .attrs = attrs, .ith = ith,
                              .nth = nth, .scratch = scratch};
        for (int i = 0; i < n_src; i++) a.src[i] = src[i];
        loom_status s = info->ref(&a);
        loom_free_aligned(scratch);
        if (s != LOOM_OK) return s;
    }
    return LOOM_OK;
}

/* Checks the op gives bit-identical output for nth = 1, 2, 3 and 7.
 * dst must be contiguous; its contents are left as computed with nth = 7. */
static inline void check_thread_invariance(loom_op op, const loom_tensor *const *src, int n_src,
                                           const void *attrs, loom_tensor *dst) {
    size_t bytes = loom_tensor_nbytes(dst);
    unsigned char *ref = malloc(bytes ? bytes : 1);
    if (!ref) abort();
    memset(dst->data, 0xA5, bytes);
    CHECK(run_split(op, src, n_src, attrs, dst, 1) == LOOM_OK);
    memcpy(ref, dst->data, bytes);
    static const int nths[] = {2, 3, 7};
    for (int k = 0; k < 3; k++) {
        memset(dst->data, 0x5A, bytes); /* a different poison: every byte must be rewritten */
        CHECK(run_split(op, src, n_src, attrs, dst, nths[k]) == LOOM_OK);
        CHECK_MSG(memcmp(ref, dst->data, bytes) == 0, "%s differs for nth = %d",
                  loom_op_get(op)->name, nths[k]);
    }
    free(ref);
}

/* Expects status != OK with a non-empty message. */
#define CHECK_FAILS(expr)                                                                \
    do {                                                                                 \
        loom_clear_error();                                                              \
        loom_status s_ = (expr);                                                         \
        CHECK_MSG(s_ != LOOM_OK && loom_last_error()[0] != '\0', "%s should fail", #expr); \
    } while (0)

#endif
