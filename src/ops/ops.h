/*
 * The op registry: one table, one entry per op (primitive now, fused later).
 * Each entry: name, arity, attribute struct size, shape inference, cost model,
 * the reference kernel and per-ISA optimised kernels (NULL = not provided).
 *
 * Layout conventions: shape[0] outermost, last dim contiguous. Activations are
 * [tokens, features] or [B, S, H, D] ("BSND"). Weights use the LLM layout
 * W[out, in]. All reference kernels work in f32 with f32/f64 accumulation.
 */
#ifndef LOOM_OPS_OPS_H
#define LOOM_OPS_OPS_H

#include <stddef.h>

#include "loom.h"
#include "loom_ops.h"
#include "base/cpu.h"

typedef enum loom_op {
    LOOM_OP_MATMUL = 0, /* y[..., N] = x[..., K] . W[N, K]^T        src: x, W           */
    LOOM_OP_GET_ROWS,   /* y[n, D] = table[ids[i], :]              src: table[V,D], ids i32[n] */
    LOOM_OP_RMS_NORM,   /* y = x * rsqrt(mean(x^2) + eps) * gamma  src: x[..., D], gamma[D] (optional) */
    LOOM_OP_ADD,        /* y = a + b, same shape                   src: a, b           */
    LOOM_OP_MUL,        /* y = a * b, same shape                   src: a, b           */
    LOOM_OP_SILU,       /* y = x * sigmoid(x)                      src: x              */
    LOOM_OP_SOFTMAX,    /* softmax over last dim of x*scale + mask, causal optional
                                                                   src: x[..., R, C], mask f32[R, C] (optional) */
    LOOM_OP_ROPE,       /* rotary embedding, per head              src: x[S, H, D] or [B, S, H, D],
                                                                        positions i32 [S] (optional: the
                                                                        position of each s, else pos_offset + s) */
    LOOM_OP_ATTENTION,  /* softmax(q.k^T*scale + mask).v with GQA  src: q[B,Sq,Hq,D], k[B,Skv,Hkv,D],
                                                                        v[B,Skv,Hkv,D], mask f32[Sq,Skv] (optional);
                           i8 k and v: q, k, v, k_scale, v_scale f32 [B,Skv,Hkv] (one per row, x ~ q*scale),
                           then the optional mask */
    LOOM_OP_COPY,       /* y = x as a contiguous tensor (x may be a strided/permuted view);
                           dtype conversion f32<->f16/bf16 allowed src: x          */
    LOOM_OP_KV_APPEND,  /* cache[pos : pos+n, ...] = x; the output is the view cache[0 : pos+n]
                                                                   src: cache[S_max, ...], x[n, ...];
                           an i8 cache also takes scale f32 [S_max, ...] (the cache's dims but the last)
                           and writes each last-dim row quantized (loom_quantize_row_i8) with its scale */
    LOOM_OP_LAYER_NORM, /* y = (x - mean) * rsqrt(var + eps) * gamma + beta over the last dim
                                                                   src: x[..., D], gamma[D], beta[D] (optional) */
    LOOM_OP_GELU,       /* y = x * Phi(x) (erf form), or its tanh approximation
                                                                   src: x              */
    LOOM_OP_ADD_BIAS,   /* y[..., N] = x[..., N] + b[N] (b broadcast over rows)
                                                                   src: x, b[N]        */
    LOOM_OP_KV_WRITE,   /* cache[slots[t], ...] = x[t, ...]: rows to the slots of a paged cache; the
                           output is the whole cache (a view)  src: cache[n_slots, ...], x[T, ...],
                                                                    slots i32 [T] (< 0: row skipped);
                           an i8 cache also takes scale f32 [n_slots, ...] (the cache's dims but the
                           last) and writes each last-dim row quantized with its scale */
    LOOM_OP_SCALE,      /* y = x * scale (Gemma: embeddings times sqrt(width))  src: x */
    LOOM_OP_SOFTCAP,    /* y = cap * tanh(x / cap) (Gemma 2: final logit soft-capping)  src: x */
    /* Mixture of experts (src/ops/ref/moe.c, grouped kernels in src/ops/matmul/matmul_id.c) */
    LOOM_OP_TOP_K,      /* ids of the k largest values of each row, largest first, ties to the lower
                           index                              src: x f32 [T, E]; dst: i32 [T, k] */
    LOOM_OP_MOE_WEIGHTS,/* w[t, j] = p[t, ids[t, j]], divided by their sum when renorm
                                                                   src: p f32 [T, E], ids i32 [T, k];
                                                                   dst: f32 [T, k] */
    LOOM_OP_MATMUL_ID,  /* y[t, j, :] = x[t(, j), :] . W[ids[t, j]]^T: each row by its expert's matrix
                                                                   src: x f32 [T, K] or [T, k, K],
                                                                   W [E, N, K], ids i32 [T, k];
                                                                   dst: f32 [T, k, N] */
    LOOM_OP_MOE_SUM,    /* y[t, :] = sum_j w[t, j] * x[t, j, :], j = 0, 1, .. in order
                                                                   src: x f32 [T, k, D], w f32 [T, k];
                                                                   dst: f32 [T, D] */
    /* fused (src/fused/attention.h; kernels registered by loom_register_attention_kernels) */
    LOOM_OP_FLASH_ATTENTION,       /* prefill FlashAttention      src: q, k, v, atten_mask (optional)
                                      in input_layout; dst: like q */
    LOOM_OP_INCRE_FLASH_ATTENTION, /* decode (S_q <= 16) against contiguous caches k, v [B, S_kv, ..];
                                      src: q, k, v, atten_mask (optional); dst: like q */
    /* fused graph ops made by the fusion pass (src/fused/..._op.c, src/graph/fusion*.c) */
    LOOM_OP_QKV_ROPE,     /* x.Wq/Wk/Wv^T, RoPE on Q and K, K/V written into the caches in place
                             src: x[T, hidden], wq, wk, wv; dst: q [T, Hq, D];
                             extra dst: the cache views k_cache[0:pos+T], v_cache[0:pos+T]
                             [S, Hkv, D] f32/f16/bf16/i8, written in place (made by the fusion pass);
                             i8 caches: src 4, 5 are their scale stores [S_max, Hkv], written in place */
    LOOM_OP_ADD_RMS_NORM, /* r = a + b; y = rms_norm(r) * gamma     src: a, b, gamma;
                             dst: y; extra dst: r */
    LOOM_OP_PAGED_ATTENTION, /* attention of a ragged batch over a paged KV cache (src/fused/
                             paged_attention_op.c): src q [T, H, D], k, v [blocks, block_size, H_kv, D]
                             (i8: k_scale, v_scale [blocks, block_size, H_kv]); each row's sequence,
                             keys and block table come from the step's batch (kernel args) */
    LOOM_OP_FFN,          /* y = down(act(x.Wg^T) * x.Wu^T) (+ residual), 2 phases
                             src: x[M, D], w_gate[H, D], w_up[H, D], w_down[D, H] (+ residual);
                             dst: y; extra dst: h [M, H] (the phase-0 buffer) */
    LOOM_OP_LINEAR,       /* y = x'.W^T (+ residual), x' = rms_norm(x) * gamma with the norm, else x
                             src: x [M, K], w [N, K] (+ residual [M, N]) (+ gamma [K]); dst: y [M, N] */
    LOOM_OP_MOE_GATING,   /* moe_gating_top_k_softmax: softmax -> top_k -> moe_weights, per row
                             src: logits f32 [T, E]; dst: weights f32 [T, k]; extra dst: ids i32 [T, k] */
    LOOM_OP_ATTENTION_LINEAR, /* prefill attention, its output projection and the residual add, per
                             block of query rows while the block's attention output is in cache
                             (src/fused/attention_linear_op.c): src q [B, S, H, D], k, v [B, S_kv,
                             H_kv, D] (q f32; k, v f32, f16 or bf16), w [N, H*D] (+ residual [B*S, N]);
                             dst: y [B*S, N] */
    LOOM_OP_MOE_FFN,      /* experts' SwiGLU FFNs over the routed rows, 3 phases (src/fused/moe_op.c):
                             src: x [T, D], w_gate, w_up [E, H, D], w_down [E, D, H], ids i32 [T, k],
                             weights f32 [T, k] (+ residual [T, D]); dst: y [T, D];
                             extra dst: h [T*k, H], down rows [T*k, D] (the phase buffers) */
    LOOM_OP_INCRE_ATTENTION_LINEAR, /* decode attention, its output projection and the residual add in
                             one kernel, a thread's kv-head groups' outputs multiplied into W's
                             columns while in cache, the groups' partials summed in order
                             (src/fused/incre_attention_linear_op.c): src q [B, S, H, D], k, v
                             [B, S_kv, H_kv, D] (+ k_scale, v_scale for an i8 cache), w [N, H*D]
                             (+ residual [B*S, N]); dst: y [B*S, N] */
    /* slots for fused ops registered at run time (loom_register_fused_op) */
    LOOM_OP_CUSTOM0,
    LOOM_OP_CUSTOM_LAST = LOOM_OP_CUSTOM0 + 7,
    LOOM_OP_COUNT
} loom_op;

/* ---------------------------------------------------------- attributes */

/* Node attributes have no padding: a compiled program compares a node's
 * attributes at two positions byte for byte (src/graph/program.c), and padding
 * bytes are indeterminate (stack garbage once made a decode program of
 * incre_attention_linear fail to load). Structs that would be padded carry a
 * `reserved` field, 0; padding is an error up to the end of this section. */
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wpadded"

/* Optional (NULL = all fields zero): act_precision is a loom_act_precision;
 * LOOM_ACT_PREC_FULL multiplies block-quantized W by f32 x, anything else
 * quantizes x to q8 (src/ops/matmul/matmul.h). Float W ignore it. */
typedef struct { int32_t act_precision; } loom_matmul_attrs;

typedef struct { float eps; } loom_rms_norm_attrs;                 /* eps > 0 */

typedef struct {
    float scale;        /* multiplies x before the mask; 0 means 1 */
    int   causal;       /* mask column j of row i when j > pos_offset + i (i = index in dim R) */
    int   pos_offset;
} loom_softmax_attrs;

/* loom_rope_mode (LOOM_ROPE_INTERLEAVED, LOOM_ROPE_HALF) is public: loom_ops.h. */

typedef struct {
    loom_rope_mode mode;
    int   n_rot;        /* rotated dims per head (even, <= D); 0 means D */
    float theta;        /* base, e.g. 10000 */
    float freq_scale;   /* positions are multiplied by this (linear scaling); 0 means 1 */
    int   pos_offset;   /* position of row s is pos_offset + s */
} loom_rope_attrs;

typedef struct {
    float scale;        /* 0 means 1/sqrt(D) */
    int   causal;       /* key j is masked for query i when j > q_pos_offset + i */
    int   q_pos_offset; /* absolute position of query row 0 (keys start at 0) */
    int   window;       /* causal only: > 0 also masks j <= q_pos_offset + i - window (sliding
                           window: each query sees its last `window` keys, itself included); 0: none */
    float softcap;      /* > 0: each score s = scale * q.k becomes softcap * tanh(s / softcap)
                           before the mask (Gemma 2's attention logit soft-capping); 0: none */
} loom_attention_attrs;

/* Attributes of the fused attention ops (<= LOOM_ATTR_MAX = 80 bytes, graph nodes store them
 * inline: asserted in src/graph/fusion_builders.c). Field meanings are those of loom_flash_attention_params /
 * loom_incre_flash_attention_params; per-batch lengths, paged and i8 caches,
 * softmax_lse are op-level API only. Prefill TND (self-attention of packed
 * sequences) takes the i32 cumulative sequence ends as its fourth input
 * instead of a mask (fused/flash_attention_op.c). Start from the _DEFAULT
 * initialiser (zero pre/next_tokens would be a diagonal band); NULL attrs =
 * defaults. */
typedef struct {
    int32_t  input_layout;         /* loom_attn_layout: 0 BSND, 1 BNSD, 2 BSH, 3 TND */
    int32_t  num_heads;            /* 0: from q (required for BSH) */
    int32_t  num_key_value_heads;  /* 0: from k */
    int32_t  sparse_mode;          /* 0..4 */
    float    scale_value;          /* 0: 1/sqrt(D) */
    float    keep_prob;            /* 0 or 1: no dropout */
    int64_t  pre_tokens, next_tokens;
    uint64_t seed, offset;         /* dropout Philox key and stream */
    int32_t  block_q, block_kv;    /* 0: automatic */
    int32_t  inner_precise;        /* 1: f32/f16 inputs use bf16 products (AVX512_BF16) */
    float    softcap;              /* > 0: score soft-capping (loom_flash_attention_params) */
    int32_t  out_f32;              /* 1: the output is f32 whatever q's dtype, else q's (the fusion
                                      builders set it for an f32 output: a q the rules' activation_dtype
                                      narrows to 16 bits leaves it f32) */
    int32_t  reserved;             /* 0: no padding (a program compares attributes byte for byte) */
} loom_flash_attention_attrs;
#define LOOM_FLASH_ATTENTION_ATTRS_DEFAULT {0, 0, 0, 0, 0.0f, 1.0f, 2147483647, 2147483647, 0, 0, 0, 0, 0, 0.0f, 0, 0}

typedef struct {
    int32_t  input_layout;         /* 0 BSND, 1 BNSD, 2 BSH */
    int32_t  num_heads, num_key_value_heads;
    int32_t  sparse_mode;          /* 0..4; 3 = causal for multi-token decode */
    float    scale_value;          /* 0: 1/sqrt(D) */
    int32_t  kv_chunk;             /* split-KV chunk; 0: 512 */
    int64_t  pre_tokens, next_tokens;
    int32_t  inner_precise;        /* 1: a bf16 K's Q.K^T takes q rounded to bf16 (AVX512_BF16) */
    float    softcap;              /* > 0: score soft-capping (loom_flash_attention_params) */
    int32_t  out_f32;              /* as loom_flash_attention_attrs' */
    int32_t  reserved;             /* 0: no padding (a program compares attributes byte for byte) */
} loom_incre_flash_attention_attrs;
#define LOOM_INCRE_FLASH_ATTENTION_ATTRS_DEFAULT {0, 0, 0, 0, 0.0f, 0, 2147483647, 2147483647, 0, 0.0f, 0, 0}

/* Attributes of the fused graph ops. */
typedef struct {
    loom_rope_attrs rope;   /* as the rope nodes it replaced (pos_offset = first cache row) */
    int32_t n_heads, n_kv_heads, head_dim;
    int32_t block_heads;    /* heads per work item, 0 = auto (loom_qkv_heads_per_block) */
    int32_t cache_dtype;    /* loom_dtype of both caches: LOOM_F32 (0), LOOM_F16, LOOM_BF16 or LOOM_I8 */
    int32_t act_precision;  /* loom_act_precision of the three matmuls (as loom_matmul_attrs) */
    int32_t paged;          /* 1: inputs 4, 5 are i32 positions and cache slots [T] (rope_at, kv_write) */
    int32_t norm;           /* 1: x is RMS-normalised on the fly (gamma: the last input, norm_eps) */
    float   norm_eps;
    int32_t q_dtype;        /* loom_dtype of q, the output: LOOM_F32 (0), LOOM_F16 or LOOM_BF16 (the rules'
                               activation_dtype: computed in f32, rounded once as it is stored) */
} loom_qkv_rope_attrs;
typedef struct { float eps; } loom_add_rms_norm_attrs;
#define LOOM_PAGED_ATTENTION_MAX_SEQS 1024  /* sequences one step can hold */
typedef struct {
    float   scale;          /* 0: 1/sqrt(D) */
    int32_t kv_chunk;       /* decode split-KV chunk, 0: 512 */
    int32_t inner_precise;  /* as the fused attention ops' */
    int32_t max_seqs;       /* sequences of a step, at most (scratch bounds) */
    int32_t max_kv;         /* keys of a sequence, at most (scratch bounds) */
    int32_t window;         /* > 0: a row sees its sequence's last `window` keys, itself
                               included (sliding-window attention); 0: every earlier key */
    float   softcap;        /* > 0: score soft-capping, as loom_attention_attrs */
} loom_paged_attention_attrs;
typedef struct {
    int32_t act;            /* loom_act (matmul.h) or LOOM_FFN_ACT_CUSTOM + registered index */
    int32_t block_n;        /* hidden columns per work item, 0 = auto */
    int32_t act_precision;  /* loom_act_precision of the three matmuls (as loom_matmul_attrs) */
    int32_t norm;           /* 1: x is RMS-normalised on the fly (gamma: the last input, norm_eps) */
    float   norm_eps;
    int32_t one_pass_rows;  /* launches of at most this many rows run as one kernel (the hidden
                               dimension in fixed slices, partial down projections summed in
                               slice order; not in batch-invariant runs); 0: always two */
    int32_t row_block;      /* launches of at least row_min rows (float weights) run as one
                               kernel in blocks of at most this many rows: each thread takes
                               whole blocks through every hidden slice of row_slice columns,
                               the down projection summed into y in slice order (not in
                               batch-invariant runs); 0: two phases */
    int32_t row_min;        /* the rows a launch needs for that (at least LOOM_GEMM_MIN_M) */
    int32_t row_slice;      /* hidden columns a slice (the builder: loom_ffn_row_slice from the rules'
                               hardware section), 0: from this CPU's L3 as for one thread */
    int32_t one_pass_slices; /* slices of the hidden dimension in one pass (the builder:
                                loom_ffn_one_pass_slices_for the rules' hardware threads),
                                0: LOOM_FFN_ONE_PASS_SLICES */
} loom_ffn_attrs;
#define LOOM_FFN_ACT_CUSTOM 100
/* The one pass's slices of the hidden dimension when the attributes carry
 * none (the builder rounds it up to a multiple of the rules' hardware
 * threads); the count is fixed before a launch, so its bits do not depend on
 * the threads it runs on; at most LOOM_FFN_ONE_PASS_MAX_SLICES, and one a
 * 64-column group. */
#define LOOM_FFN_ONE_PASS_SLICES 8
#define LOOM_FFN_ONE_PASS_MAX_SLICES 256
/* The rules' default one_pass_rows (loom_ffn_one_pass_rows_auto): 1 (decode of
 * one sequence) where the three weights are float, the rules' hardware has at
 * most LOOM_FFN_ONE_PASS_AUTO_THREADS threads (measured on 1 and 2; more slices
 * make each thread's run of a Wd row shorter) and the kernels run at the AVX2
 * level (isa, a loom_isa), else 0 (two phases). Measured where it is the
 * default: Zen 3 (AVX2), 1.02-1.06x the two phases. Not at AVX-512: on Zen 4
 * the one pass decoded at 0.94-0.96x on one thread (a lone thread's sweep of
 * eight short slices against the long rows' two streams) and within noise on
 * two, where a thread's columns of Wd's rows read 1.34x slower than whole
 * rows; the generic and reference levels were not measured. Quantized weights: each slice's down
 * projection is a GEMV over a shorter K, whose per-row costs ran SmolLM2 Q4_1
 * decode at 0.76-0.86x (bench/results/fusion.md). Preset one_pass_ffn sets 7
 * (the GEMV's rows) for every weight type and level. */
#define LOOM_FFN_ONE_PASS_AUTO_THREADS 8
/* The builder's one_pass_slices: about LOOM_FFN_ONE_PASS_SLICES, a multiple of
 * the rules' hardware threads (threads taking whole slices get even shares). */
int loom_ffn_one_pass_slices_for(int threads);
int32_t loom_ffn_one_pass_rows_auto(loom_dtype w_gate, loom_dtype w_up, loom_dtype w_down, int threads, int isa);
/* The rows pass's block: prefill launches as one kernel, in blocks of at
 * most this many rows (each block reads the weights once more: 2 * 256 flops
 * a weight value), and the default row_min, per thread of the rules' hardware
 * section: a block of fewer rows would read the weights too often for its
 * flops. */
#define LOOM_FFN_ROW_BLOCK 256
#define LOOM_FFN_ROW_MIN_PER_THREAD 128
/* The rules' default row_block at kernel level isa (a loom_isa):
 * LOOM_FFN_ROW_BLOCK at the AVX2 level, where the rows pass was measured at
 * parity with the two phases (Zen 3: 0.91-1.12x over three runs), else 0 (the
 * two phases): on a Zen 4 at AVX-512 it ran prefill at 0.93x (512 tokens) and
 * 0.96x (2048), every round slower (bench/results/fusion.md); the generic and
 * reference levels were not measured. */
int32_t loom_ffn_row_block_auto(int isa);
/* Hidden columns a slice of the rows pass for blocks of row_block rows: an f32
 * tile of about an eighth of a thread's share of l3_bytes (the block's x rows,
 * running sum and its two tiles then stay in L3 with every thread's), whole
 * 64-column groups, the slices of H about even. */
int64_t loom_ffn_row_slice(int64_t row_block, int64_t H, int64_t l3_bytes, int threads);
typedef struct {
    int32_t act_precision;  /* loom_act_precision of the matmul (as loom_matmul_attrs) */
    int32_t residual;       /* 1: input 2 is added to the product (the GEMM's epilogue) */
    int32_t norm;           /* 1: x is RMS-normalised on the fly (gamma: the last input, norm_eps) */
    float   norm_eps;
    int32_t bias;           /* 1: input 2 (before the residual) is a bias [N] added to the product */
    int32_t act;            /* loom_act applied after the bias (LOOM_ACT_NONE: none) */
} loom_linear_attrs;

/* attention_linear: prefill attention and the output projection (+ residual)
 * in one kernel (src/fused/attention_linear_op.c). */
typedef struct {
    float   scale_value;           /* the attention's, as loom_flash_attention_attrs */
    int32_t sparse_mode;           /* 0, LOOM_SPARSE_RIGHT_DOWN_CAUSAL or LOOM_SPARSE_BAND */
    int64_t pre_tokens, next_tokens;
    int32_t block_q, block_kv;     /* 0: automatic */
    float   softcap;
    int32_t inner_precise;         /* 1: bf16 products (loom_flash_attention_attrs) */
    int32_t act_precision;         /* the projection's loom_act_precision (as loom_linear_attrs) */
    int32_t residual;              /* 1: input 4 is added to the product in the GEMM's epilogue */
    int32_t block_rows;            /* query positions per unit; 0: automatic (the L2 size) */
    int32_t reserved;              /* 0: no padding (a program compares attributes byte for byte) */
} loom_attention_linear_attrs;
#define LOOM_ATTENTION_LINEAR_ATTRS_DEFAULT {0.0f, 0, 2147483647, 2147483647, 0, 0, 0.0f, 0, 0, 0, 0, 0}

/* incre_attention_linear: decode attention and the output projection (+
 * residual) in one kernel (src/fused/incre_attention_linear_op.c). */
typedef struct {
    loom_incre_flash_attention_attrs attn; /* the attention's (BSND; its output f32) */
    int32_t act_precision;                 /* the projection's loom_act_precision (as loom_linear_attrs) */
    int32_t residual;                      /* 1: the last input is added to the product */
    int32_t groups;                        /* groups of kv heads, each one partial of the projection,
                                              summed in order (1..N_kv; the builder:
                                              loom_incre_attention_linear_groups) */
    int32_t reserved;                      /* 0: no padding (as the attention's) */
} loom_incre_attention_linear_attrs;
/* The builder's groups for n_kv kv heads on the rules' hardware threads:
 * about LOOM_FFN_ONE_PASS_SLICES, a multiple of threads, at most n_kv, and
 * every thread's share of whole groups within 1/8 of the others' kv heads;
 * 0 when no count does that (the attention and linear stay two kernels). */
int loom_incre_attention_linear_groups(int64_t n_kv, int threads);

typedef struct { int32_t k; } loom_top_k_attrs;                    /* 1 <= k <= E */
typedef struct { int32_t renorm; } loom_moe_weights_attrs;         /* 1: the k weights sum to 1 */
typedef struct { int32_t k, renorm; } loom_moe_gating_attrs;       /* as top_k's and moe_weights' */
typedef struct {
    int32_t block_n;        /* output columns per work item of both grouped GEMMs, 0 = auto */
    int32_t act_precision;  /* loom_act_precision of the three matmul_id (as loom_matmul_attrs) */
} loom_moe_ffn_attrs;

typedef struct { float eps; } loom_layer_norm_attrs;               /* eps > 0 */
typedef struct { int approximate; } loom_gelu_attrs;  /* 0: x*Phi(x) with erf (HF "gelu"); 1: tanh form */
typedef struct { loom_dtype dtype; } loom_copy_attrs;   /* output dtype */
typedef struct { int pos; } loom_kv_append_attrs;       /* first cache row written */
typedef struct { float scale; } loom_scale_attrs;       /* > 0, finite */
typedef struct { float cap; } loom_softcap_attrs;       /* > 0, finite */
#pragma GCC diagnostic pop

/* ---------------------------------------------------------- kernels */

#define LOOM_MAX_SRC 10  /* qkv_rope over a paged i8 cache with the norm: x, 3 weights, positions, slots,
                            2 scale stores, gamma */

/* The ragged batch of one step of a forward program (graph/program.h), for the
 * kernels whose work depends on which sequence each row belongs to (the batch
 * engine's paged attention, cache writes and per-row positions). Rows are
 * grouped by sequence: sequence s owns rows [row_start[s], row_start[s + 1]).
 * NULL for programs of one sequence (their positions are attributes). */
typedef struct loom_batch {
    int            n_seqs;
    const int64_t *row_start;    /* [n_seqs + 1] cumulative row ends, from 0 */
    const int64_t *positions;    /* [n_rows] position of each row in its sequence */
    const int64_t *seq_of_row;   /* [n_rows] the sequence of each row */
    const int64_t *kv_len;       /* [n_seqs] keys each sequence's attention reads (its last row's position + 1) */
    const loom_tensor *block_table; /* i32 [n_seqs, max_blocks]: the paged cache blocks of each sequence */
    int            n_decode;     /* sequences 0..n_decode-1 have one row each (rows 0..n_decode-1) */
    const int32_t *out_rows;     /* [n_out] rows whose output the caller reads (logits) */
} loom_batch;

typedef struct loom_kernel_args {
    const loom_tensor *src[LOOM_MAX_SRC]; /* unused entries NULL */
    int                n_src;
    loom_tensor       *dst;
    const void        *attrs;             /* the op's attribute struct, or NULL */
    int                ith, nth;          /* this thread, thread count */
    void              *scratch;           /* this thread's scratch (scratch_size bytes), LOOM_ALIGN-aligned */
    loom_tensor       *dst_extra[3];      /* further outputs of multi-output (fused) nodes */
    int                n_dst_extra;
    int                phase;             /* 0..n_phases-1; the executor meets at a barrier between phases */
    void              *shared;            /* shared_size bytes every thread of the launch sees, kept
                                             across its phases (LOOM_ALIGN-aligned; NULL if none) */
    const loom_batch  *batch;             /* the step's ragged batch, or NULL */
    int                invariant;         /* 1: batch-invariant kernels: a row's result does not depend
                                             on the other rows of the launch (matmul: the GEMM for every
                                             row count; paged_attention: one kernel for every row) */
    size_t             scratch_bytes;     /* the bytes of scratch and of shared (what was planned) */
    size_t             shared_bytes;
    /* This launch's arrival counter (0 when a launch starts; the executor
     * keeps one per node): a one-pass kernel whose last step needs every
     * thread's work counts its threads in with loom_kernel_arrive and lets
     * the last one finish (the ffn's fixed-order sum of its partials); or
     * a kernel takes work units from it as its threads come free
     * (attention_linear: every thread claims until a claim fails, and the
     * thread whose claim is the last resets it to 0). NULL on one thread. */
    _Atomic int       *arrive;
} loom_kernel_args;

/* Counts thread a->ith in at the end of its share of a one-pass launch
 * (failed: its share failed). Returns 1 in exactly one thread, the last to
 * arrive, after every other thread's writes are visible to it, with *failed
 * set when any thread's share failed; 0 in the others. Every thread of the
 * launch must call it exactly once, whatever happened before. */
int loom_kernel_arrive(const loom_kernel_args *a, int *failed);

/* Kernels split their own work by (ith, nth), write only their share of dst,
 * and return LOOM_OK or an error set with loom_set_error. Results must not
 * depend on nth (bit-identical for any thread count). */
typedef loom_status (*loom_kernel_fn)(const loom_kernel_args *a);

/* Bytes of one element of t. Cost functions count activations at their
 * tensors' element size (f32 in every graph loom runs), so `loom plan
 * --act-dtype f16` can model 16-bit activations between kernels. */
#define LOOM_ES(t) ((double)loom_dtype_size((t)->dtype))

typedef struct loom_cost {
    double flops;
    double bytes_read;      /* every input read once from main memory */
    double bytes_written;
} loom_cost;

typedef struct loom_op_info {
    const char *name;       /* "matmul", "rms_norm", ... */
    int n_src_min, n_src_max;
    size_t attr_size;       /* sizeof the attribute struct, 0 if none */
    /* Checks dtypes and shapes of src and attrs; sets dst->dtype, ndim, shape
     * (the caller sets strides and data). Errors name the op, the input index,
     * and expected vs found. */
    loom_status (*infer)(const loom_tensor *const *src, int n_src, const void *attrs,
                         loom_tensor *dst);
    void (*cost)(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                 const void *attrs, loom_cost *c);
    /* Scratch bytes each thread needs (NULL: none). */
    size_t (*scratch_size)(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                           const void *attrs);
    loom_kernel_fn ref;                     /* reference kernel, always present */
    loom_kernel_fn opt[LOOM_ISA_COUNT];     /* optimised kernels by level; NULL = none */
    int dst_views_src0;                     /* dst aliases src[0]'s memory (kv_append) */
    /* Fused ops: kernel phases per launch (0 = 1); every phase is one kernel
     * launch in the accounting. decomposition names the primitive ops it
     * replaces, in order, e.g. "add rms_norm" (NULL for primitives). */
    int n_phases;
    const char *decomposition;
    /* Ops whose launch depends on the thread count or the shapes (decode
     * attention: split-KV and a merge where whole units do not share out; the
     * ffn: one pass for a few rows): the phases a launch on nth threads takes
     * (invariant: the executor's batch-invariant flag, kernel args'
     * invariant), overriding n_phases; its kernels see the same nth, shapes
     * and flag and decide alike. NULL: n_phases. */
    int (*phases)(const loom_tensor *const *src, int n_src, const void *attrs, int nth, int invariant);
    /* Bytes of the one buffer all threads of a launch share (kernel args'
     * shared). NULL: none. */
    size_t (*shared_size)(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                          const void *attrs);
    /* Ops whose attributes carry the position of their first row (rope's
     * pos_offset, kv_append's pos, attention's q_pos_offset, softmax's
     * pos_offset, qkv_rope's rope.pos_offset): LOOM_POS_ATTR(struct, field),
     * 0 for none. A forward program writes that int32 from its step block
     * (graph/program.h). */
    size_t pos_attr;
} loom_op_info;
#define LOOM_POS_ATTR(type, field) (1 + offsetof(type, field))

/* Entry for op; NULL for an out-of-range value. */
const loom_op_info *loom_op_get(loom_op op);
/* The kernel to run at level isa: the highest opt[l] with l <= isa, else ref. */
loom_kernel_fn loom_op_kernel(loom_op op, loom_isa isa);
/* Phases (kernel launches) of op on nth threads: its phases callback, else n_phases (at least 1). */
int loom_op_phases(const loom_op_info *info, const loom_tensor *const *src, int n_src, const void *attrs,
                   int nth, int invariant);
/* Name of the kernel loom_op_kernel would pick, e.g. "matmul.ref". Never NULL. */
const char *loom_op_kernel_name(loom_op op, loom_isa isa);

/* Runs one op single-threaded on given tensors (tests, small tools):
 * infers and checks shapes against dst, allocates scratch, runs the ref or
 * selected kernel on nth=1. */
loom_status loom_op_run(loom_op op, const loom_tensor *const *src, int n_src,
                        const void *attrs, loom_tensor *dst, loom_isa isa);

#endif
