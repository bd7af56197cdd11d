/* Shared helpers of the fused operators. */
#ifndef LOOM_FUSED_INTERNAL_H
#define LOOM_FUSED_INTERNAL_H

#include "fused/fused.h"
#include "ops/matmul/internal.h"
#include "ops/vec/vec.h"

/* Checks t is f32, 2-D [rows, cols] with a contiguous last dim. */
loom_status loom_fused_check_2d(const char *op, const char *name, const loom_tensor *t,
                                int64_t rows, int64_t cols);

/* Runs fn on pool (or inline with nth = 1 when pool is NULL). */
void loom_fused_run(loom_pool *pool, loom_pool_fn fn, void *arg);

/* The memory of one op call: the caller's workspace (checked: at least need
 * bytes, 64-byte aligned; the error names op and its size query) or, when
 * workspace is NULL, a fresh block. *mem is set; free it with
 * loom_fused_release(workspace, *mem). */
loom_status loom_fused_acquire(const char *op, void *workspace, size_t bytes, size_t need, int nth,
                               unsigned char **mem);
void loom_fused_release(void *workspace, unsigned char *mem);
/* The arguments of an op's workspace-size query: bytes non-NULL, nth >= 1. */
loom_status loom_fused_check_size_query(const char *op, int nth, const size_t *bytes);

/* ffn.c: hidden columns per gate/up work item when not given. Prefill: the
 * up tile (M x block) within an eighth of L3 (it is re-read by the gate
 * epilogue from cache), few blocks because every block's GEMMs repack or
 * convert all of x; the count rounded up to a multiple of 4 and the columns
 * shared evenly, so 1, 2 or 4 threads get equal work. Decode (GEMV): 128, so
 * threads get equal shares of the weights. */
int64_t loom_ffn_block_cols(int64_t M, int64_t H);
/* The same for an L3 of l3_bytes (the fusion rules' hardware section). */
int64_t loom_ffn_block_cols_for(int64_t M, int64_t H, int64_t l3_bytes);

/* qkv_rope.c: heads per work item (Q, K or V heads of one GEMM). Prefill: the
 * T x heads*D tile within an eighth of L3 (RoPE and the cache write re-read
 * it from cache) and few items, because every item's GEMM repacks or
 * converts all of x; a divisor of n_kv_heads, so all items are the same
 * size, and an even count (or at least 12) so 2 threads get equal work.
 * Decode (GEMV): whole heads of at least 64 weight rows an item (1 from head
 * dim 64 up, so threads get equal shares; tiny heads would cost more to set
 * up than to compute). */
int64_t loom_qkv_heads_per_block(int64_t T, int64_t D, int64_t n_heads, int64_t n_kv_heads);
/* The same for an L3 of l3_bytes (the fusion rules' hardware section). */
int64_t loom_qkv_heads_per_block_for(int64_t T, int64_t D, int64_t n_heads, int64_t n_kv_heads,
                                     int64_t l3_bytes);

/* One pass's projections of column slices (the ffn's down projection, the
 * decode attention's output projection): slice i of n takes W's columns
 * [n0, n0 + nb) (n0 on a whole block of a quantized W: the ffn's are
 * multiples of 64, the attention's of a kv head's columns) and its x, [M, nb]
 * rows ldx apart, into its partial part + i * M * N, the projection's [M, N].
 * A float W at a vector level is read in one sweep of its rows, each step's
 * rows through every slice in turn (loom_gemv_slices), so that a thread's
 * columns of a row are read together. Otherwise (where loom_gemv_slices
 * declines: quantized W, the generic level, batch-invariant calls, 8 rows of
 * x or more, a slice of 8192 columns at AVX-512) W's rows are walked in blocks of
 * LOOM_FUSED_SLICE_ROWS with the slices taken in turn in each (one slice
 * over all rows at a time, each row's short segment apart, ran the ffn's
 * decode at 0.87x its two phases); a single slice is one call over all rows. A row's sum does not depend on the rows
 * around it, so the bits are those of one call a slice. Where W takes q8 x
 * each slice's x is quantized once, into dq + i * dq_step (dq_step:
 * loom_fused_slice_dq_bytes of the widest slice; 0: none needed). invariant:
 * the calls run batch-invariant. scratch: loom_matmul_scratch_size of each
 * slice's call. */
#define LOOM_FUSED_SLICE_ROWS 16
typedef struct loom_fused_slice {
    const float *x;
    int64_t ldx, n0, nb;
} loom_fused_slice;
loom_matmul_args loom_fused_slice_gemm(const loom_tensor *w, int64_t M, const loom_fused_slice *s, float *y,
                                       int32_t act);
size_t loom_fused_slice_dq_bytes(const loom_tensor *w, int64_t M, int64_t nb, int32_t act);
loom_status loom_fused_slices_project(loom_isa isa, const loom_tensor *w, int64_t M, int32_t act, int invariant,
                                      const loom_fused_slice *sl, int64_t n, float *part, char *dq, size_t dq_step,
                                      void *scratch);
/* The last step of such a pass: y = ((p_0 + p_1) + ...) (+ residual) row by
 * row, the ns partials [M, N] of part in order (residual: NULL, or f32 rows). */
void loom_fused_sum_partials(loom_isa isa, int64_t M, int64_t N, int64_t ns, const float *part,
                             const loom_tensor *res, loom_tensor *y);

/* The GEMM of x [M, K] against rows n0 .. n0+nn of the weight tensor w
 * (graph-op tensors; w->data may be NULL while sizing scratch), with the
 * fused op's activation precision act (a loom_act_precision). */
loom_matmul_args loom_fused_block_gemm(const loom_tensor *x, const loom_tensor *w, int64_t n0, int64_t nn,
                                       float *y, int64_t ldy, int32_t act);
/* h = act(h) * up on a tile of M x nb (h's rows ldh apart, up's nb): act a
 * loom_act or LOOM_FFN_ACT_CUSTOM + a registered activation; silu and mul
 * run the primitive kernels of level isa, so results equal the unfused
 * graph's (src/fused/ffn_op.c; the ffn's and the MoE experts' tiles). */
loom_status loom_fused_act_mul_tile(int32_t act, loom_isa isa, float *h, int64_t ldh, const float *up, int64_t M,
                                    int64_t nb);

/* qkv_rope.c: RoPE in place on a tile of T rows of nh heads of D floats (row
 * stride ldy); row t's cos/sin at cs/sn + t * ld_tab, laid out as
 * loom_vec_rope_table writes them. */
void loom_fused_rope_tile(const loom_vec_fns *f, int interleaved, int64_t n_rot, int64_t D, const float *cs,
                          const float *sn, int64_t ld_tab, float *y, int64_t ldy, int64_t T, int64_t nh);

/* kv_write.c: writes heads [h0, h0+nh) of T tokens (x row stride ldx) into a cache
 * with n_kv heads; x NULL validates only. */
loom_status loom_kv_write_rows(const loom_kv_write_params *p, loom_tensor *cache, const char *name,
                               int is_value, const float *x, int64_t ldx, int64_t T, int64_t n_kv,
                               int64_t h0, int64_t nh, int64_t D);

#endif
