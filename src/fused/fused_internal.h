/* Shared helpers of the fused operators. */
#ifndef LOOM_FUSED_INTERNAL_H
#define LOOM_FUSED_INTERNAL_H

#include "fused/fused.h"
#include "ops/matmul/internal.h"
#include "ops/vec/vec.h"

/* The row-function table of the vector level to use for isa. */
const loom_vec_fns *loom_fused_vec(loom_isa isa);

/* Checks t is f32, 2-D [rows, cols] with a contiguous last dim. */
loom_status loom_fused_check_2d(const char *op, const char *name, const loom_tensor *t,
                                int64_t rows, int64_t cols);

/* Runs fn on pool (or inline with nth = 1 when pool is NULL). */
void loom_fused_run(loom_pool *pool, loom_pool_fn fn, void *arg);

/* kv_write.c: writes heads [h0, h0+nh) of T tokens (x row stride ldx) into a cache
 * with n_kv heads; x NULL validates only. */
loom_status loom_kv_write_rows(const loom_kv_write_params *p, loom_tensor *cache, const char *name,
                               int is_value, const float *x, int64_t ldx, int64_t T, int64_t n_kv,
                               int64_t h0, int64_t nh, int64_t D);

#endif
