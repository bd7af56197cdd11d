/*
 * Fused transformer operators (the ops-transformer part), op-level API:
 * add + RMSNorm, SwiGLU and the whole FFN block. Each op has
 *   - a params struct with defaults (loom_<op>_default_params),
 *   - a thread-level kernel (ith, nth, scratch) for the graph executor, whose
 *     results are bit-identical for any nth,
 *   - a convenience wrapper that validates tensors and runs on a loom_pool
 *     (NULL = the calling thread only),
 *   - a reference decomposition into primitive reference ops (src/fused/ref/).
 */
#ifndef LOOM_FUSED_FUSED_H
#define LOOM_FUSED_FUSED_H

#include "base/cpu.h"
#include "base/threadpool.h"
#include "fused/attention.h"
#include "loom.h"
#include "ops/matmul/matmul.h"

/* ------------------------------------------------------ add + RMSNorm */

typedef struct loom_add_rms_norm_params {
    float epsilon;          /* > 0; default 1e-6 */
} loom_add_rms_norm_params;

loom_add_rms_norm_params loom_add_rms_norm_default_params(void);

/* r = x + residual; y = r * rsqrt(mean(r^2) + eps) * gamma, one pass per row.
 * x, residual, y, r_out: f32 [M, D] (row-contiguous, any row stride); gamma f32 [D].
 * r_out may alias x or residual (the sum is formed before it is stored).
 * Errors: shape/dtype mismatches (naming the tensor), eps <= 0. */
loom_status loom_add_rms_norm(const loom_tensor *x, const loom_tensor *residual,
                              const loom_tensor *gamma, const loom_add_rms_norm_params *p,
                              loom_tensor *y, loom_tensor *r_out, loom_pool *pool);

/* ------------------------------------------------------ SwiGLU */

/* y = act(a) * b where [a | b] = x split in halves along the last dim:
 * x f32 [M, 2H], y f32 [M, H]. act default silu. */
loom_status loom_swiglu(const loom_tensor *x, loom_act act, loom_tensor *y, loom_pool *pool);

/* ------------------------------------------------------ FFN */

/* A user activation for the FFN (applied to the gate before the multiply). */
typedef float (*loom_act_fn)(float x, void *user);

typedef struct loom_ffn_params {
    loom_act    act;          /* default LOOM_ACT_SILU; ignored when custom_act is set */
    loom_act_fn custom_act;   /* a user activation, or NULL */
    void       *custom_user;
    int64_t     block_n;      /* hidden columns per work item (0 = auto); up tile stays in cache */
    loom_act_precision act_precision; /* quantized weights: LOOM_ACT_PREC_FULL (f32 x) or q8 (default) */
} loom_ffn_params;

loom_ffn_params loom_ffn_default_params(void);

/* y = down(act(gate(x)) * up(x)) (+ residual):
 *   x f32 [M, D]; w_gate, w_up [H, D] (or w_gate = merged [2H, D] with the gate
 *   rows first and w_up = NULL: no copy is made); w_down [D, H]; any weight dtype
 *   of the matmul family; residual f32 [M, D] or NULL, added in the down GEMM's
 *   epilogue; y f32 [M, D].
 * Two kernels: gate/up (the up tile of a column block never leaves the cache:
 * it is the `mul` operand of the gate GEMM's epilogue) and down. */
loom_status loom_ffn(const loom_tensor *x, const loom_tensor *w_gate, const loom_tensor *w_up,
                     const loom_tensor *w_down, const loom_tensor *residual,
                     const loom_ffn_params *p, loom_tensor *y, loom_pool *pool);

/* loom_ffn allocates h [M, H] and per-thread scratch on every call (fresh pages
 * at prefill sizes). For calls in a loop: ask once how much memory a call
 * needs for these shapes on nth threads (the pool's size; 1 without a pool),
 * then pass it to loom_ffn_ws. workspace must be 64-byte aligned and at least
 * that big; NULL makes loom_ffn_ws allocate as loom_ffn does. */
loom_status loom_ffn_workspace_size(const loom_tensor *x, const loom_tensor *w_gate,
                                    const loom_tensor *w_up, const loom_tensor *w_down,
                                    const loom_ffn_params *p, int nth, size_t *bytes);
loom_status loom_ffn_ws(const loom_tensor *x, const loom_tensor *w_gate, const loom_tensor *w_up,
                        const loom_tensor *w_down, const loom_tensor *residual,
                        const loom_ffn_params *p, loom_tensor *y, void *workspace, size_t bytes,
                        loom_pool *pool);

/* Thread-level pieces of loom_ffn, for the graph executor. */
typedef struct loom_ffn_args {
    const float *x;   int64_t ldx;      /* [M, D] */
    const void  *w_gate, *w_up;         /* [H, D] rows, row stride ldw (elements) */
    loom_dtype   wtype; int64_t ldw;
    float       *h;   int64_t ldh;      /* [M, H] */
    int64_t      M, D, H;
    loom_ffn_params p;
} loom_ffn_args;

size_t loom_ffn_gate_up_scratch(const loom_ffn_args *a);
loom_status loom_ffn_gate_up_kernel(const loom_ffn_args *a, loom_isa isa, int ith, int nth,
                                    void *scratch);


/* ------------------------------------------------------ KV cache write, QKV + RoPE */


/*
 * Where new K/V rows go. Caches follow the decode attention's conventions
 * (src/fused/attention.h): layout BSND [B, S_max, N_kv, D], BNSD [B, N_kv, S_max, D]
 * or BSH [B, S_max, N_kv*D]; paged when block_table (i32 [B, max_blocks]) is given,
 * with B -> num_blocks and S_max -> block_size. Token t belongs to sequence
 * batch_ids[t] (NULL: 0) at position positions[t]; a negative position skips the
 * token (padding). dtypes f32, f16, bf16, or i8 quantized with
 * x = (q + offset) * scale: per-channel scales [N_kv, D] are given; per-token
 * scales (shape [B or num_blocks, N_kv, S_max or block_size]) are computed here as
 * max|x| / 127 per (token, head) and written, offsets (if given) set to 0.
 */
typedef struct loom_kv_write_params {
    loom_attn_layout   cache_layout;      /* BSND (default), BNSD or BSH */
    const int64_t     *positions;         /* [T], required */
    const int64_t     *batch_ids;         /* [T] or NULL */
    const loom_tensor *block_table;       /* paged cache, or NULL */
    int                antiquant_mode;    /* loom_antiquant_mode, for i8 caches */
    loom_tensor       *key_scale, *key_offset;      /* i8 key cache: see above */
    loom_tensor       *value_scale, *value_offset;  /* i8 value cache */
} loom_kv_write_params;

/* Writes key/value f32 [T, N_kv, D] into the caches. Errors: positions beyond the
 * cache or the block table, block ids out of range, shape/dtype mismatches. */
loom_status loom_reshape_and_cache(const loom_tensor *key, const loom_tensor *value,
                                   loom_tensor *key_cache, loom_tensor *value_cache,
                                   const loom_kv_write_params *p);

typedef struct loom_qkv_rope_params {
    int64_t        num_heads, num_key_value_heads, head_dim;
    loom_rope_mode rope_mode;       /* default LOOM_ROPE_HALF */
    int64_t        n_rot;           /* 0 = head_dim */
    float          theta;           /* default 10000 */
    float          freq_scale;      /* positions multiplied by this; 0 = 1 */
    loom_kv_write_params cache;     /* positions also give the RoPE angle */
    loom_act_precision act_precision; /* quantized weights: LOOM_ACT_PREC_FULL (f32 x) or q8 (default) */
} loom_qkv_rope_params;

loom_qkv_rope_params loom_qkv_rope_default_params(void);

/*
 * One pass over x [T, hidden] computes Q, K and V, rotates Q and K in place while
 * each head block is still in cache, writes Q to q_out f32 [T, N*D] and K, V into
 * the caches (loom_reshape_and_cache semantics). Weights: merged w_qkv
 * [(N + 2*N_kv)*D, hidden] (Q rows, then K, then V) passed as w_q with w_k = w_v =
 * NULL, or three separate weights (no copy). k_out / v_out (f32 [T, N_kv*D],
 * optional) also receive the rotated K and V, for prefill attention over them.
 */
loom_status loom_qkv_rope(const loom_tensor *x, const loom_tensor *w_q, const loom_tensor *w_k,
                          const loom_tensor *w_v, const loom_qkv_rope_params *p,
                          loom_tensor *q_out, loom_tensor *k_out, loom_tensor *v_out,
                          loom_tensor *key_cache, loom_tensor *value_cache, loom_pool *pool);

/* As loom_ffn_workspace_size / loom_ffn_ws: the per-thread scratch of one
 * loom_qkv_rope call for these shapes on nth threads, and the call in a
 * caller's 64-byte aligned workspace (NULL: allocated per call). */
loom_status loom_qkv_rope_workspace_size(const loom_tensor *x, const loom_tensor *w_q,
                                         const loom_tensor *w_k, const loom_tensor *w_v,
                                         const loom_qkv_rope_params *p, int nth, size_t *bytes);
loom_status loom_qkv_rope_ws(const loom_tensor *x, const loom_tensor *w_q, const loom_tensor *w_k,
                             const loom_tensor *w_v, const loom_qkv_rope_params *p,
                             loom_tensor *q_out, loom_tensor *k_out, loom_tensor *v_out,
                             loom_tensor *key_cache, loom_tensor *value_cache, void *workspace,
                             size_t bytes, loom_pool *pool);

#endif
