/*
 * loom_ops.h — loom's op-level API: fused transformer operators called
 * directly on tensors, as with Ascend's aclnn operators (names and parameters
 * follow ops-transformer): FlashAttention prefill, split-KV decode attention
 * and their dispatcher, the KV-cache write, QKV projection + RoPE, add +
 * RMSNorm, SwiGLU and the FFN block.
 *
 * Conventions (those of loom.h): tensors are loom_tensor descriptors (dtype,
 * shape, strides in elements, data); nothing is copied and no alignment is
 * required. Each op takes a params struct with defaults from
 * loom_<op>_default_params() and runs on a loom_pool (NULL = the calling
 * thread only); results are bit-identical for any thread count. Every entry
 * returns LOOM_OK or an error status whose message (loom_last_error()) names
 * the offending tensor or parameter; outputs are untouched on a validation
 * error. docs/attention.md and docs/fused.md are the full reference.
 */
#ifndef LOOM_OPS_H
#define LOOM_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

/* Declarations here are exported from libloom.so (see loom.h). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- thread pool */

/* A persistent pool of threads that the ops split their work over; the
 * calling thread is thread 0. One call at a time per pool. */
typedef struct loom_pool loom_pool;

/* Creates a pool of n_threads (>= 1; n_threads - 1 workers are started).
 * LOOM_ERR_INVALID_ARG for a count < 1, LOOM_ERR_NOMEM when memory or threads
 * cannot be had (LOOM_ERR_INTERNAL for other pthread failures); *pool is NULL
 * on error. */
loom_status loom_pool_init(loom_pool **pool, int n_threads);
/* Stops the workers and releases the pool; NULL is a no-op. */
void loom_pool_free(loom_pool *pool);
/* Threads of the pool (the caller included); 0 for NULL. */
int  loom_pool_size(const loom_pool *pool);

/* ---------------------------------------------------------------- shared enums */

/* Activations of the FFN (and of the matmul epilogue inside it). */
typedef enum loom_act {
    LOOM_ACT_NONE = 0,
    LOOM_ACT_SILU,        /* x * sigmoid(x) */
    LOOM_ACT_GELU,        /* x * Phi(x), erf form */
    LOOM_ACT_GELU_TANH,   /* tanh approximation */
    LOOM_ACT_RELU,
    LOOM_ACT_COUNT
} loom_act;

/* A user activation (loom_ffn_params.custom_act), applied to the gate. */
typedef float (*loom_act_fn)(float x, void *user);

/* Which dims of a head RoPE rotates together. */
typedef enum loom_rope_mode {
    LOOM_ROPE_INTERLEAVED = 0, /* GPT-J / llama2.c / Meta Llama: pairs (2i, 2i+1) */
    LOOM_ROPE_HALF = 1,        /* GPT-NeoX / HF Llama: pairs (i, i + n_rot/2) */
} loom_rope_mode;

/* ================================================================ attention */

/* ---------------------------------------------------------------- layouts */

/* How q, k, v and the output are laid out. B batch, S sequence, N heads,
 * D head dim, H = N*D, T = total tokens of a packed variable-length batch. */
typedef enum loom_attn_layout {
    LOOM_ATTN_BSND = 0,   /* [B, S, N, D] */
    LOOM_ATTN_BNSD,       /* [B, N, S, D] */
    LOOM_ATTN_BSH,        /* [B, S, N*D]: num_heads (and num_key_value_heads) give N */
    LOOM_ATTN_TND,        /* [T, N, D]: sequences packed; actual_seq_qlen/kvlen give bounds */
    LOOM_ATTN_LAYOUT_COUNT
} loom_attn_layout;

/* Parses "BSND", "BNSD", "BSH" or "TND" (Ascend's input_layout strings).
 * Returns LOOM_ERR_INVALID_ARG naming the string for anything else. */
loom_status loom_attn_layout_parse(const char *s, loom_attn_layout *out);
/* "BSND", ...; "?" for an invalid value. Never NULL. */
const char *loom_attn_layout_name(loom_attn_layout l);

/* sparse_mode: which (query i, key j) pairs are visible. i and j count from 0
 * within one sequence of S_q queries and S_kv keys (actual lengths). */
typedef enum loom_attn_sparse_mode {
    LOOM_SPARSE_DEFAULT = 0,   /* atten_mask if given; band i-pre_tokens <= j <= i+next_tokens */
    LOOM_SPARSE_ALL_MASK = 1,  /* atten_mask (required) alone; pre/next_tokens ignored */
    LOOM_SPARSE_LEFT_UP_CAUSAL = 2,    /* j <= i */
    LOOM_SPARSE_RIGHT_DOWN_CAUSAL = 3, /* j <= i + S_kv - S_q (the usual causal mask) */
    LOOM_SPARSE_BAND = 4,      /* band around the bottom-right diagonal: with c = i + S_kv - S_q,
                                  c - pre_tokens <= j <= c + next_tokens */
    LOOM_SPARSE_MODE_COUNT
} loom_attn_sparse_mode;

/* inner_precise (Ascend's name): the precision of the two products. */
typedef enum loom_attn_inner_precise {
    LOOM_ATTN_HIGH_PRECISION = 0,   /* products in the inputs' precision */
    LOOM_ATTN_HIGH_PERFORMANCE = 1, /* prefill, f32/f16 inputs: bf16 products, f32 accumulation;
                                       decode: an i8 V's P and a bf16 K's q rounded to bf16 */
} loom_attn_inner_precise;

#define LOOM_ATTN_MAX_HEAD_DIM 256   /* D in 1..256 */
#define LOOM_ATTN_MAX_BLOCK 1024     /* explicit block_q / block_kv / kv_chunk limit */
#define LOOM_ATTN_TOKENS_ALL 2147483647  /* Ascend's default pre/next_tokens: no band */
#define LOOM_INCRE_MAX_Q_LEN 16      /* decode handles 1..16 queries per sequence */

/* atten_mask (all ops, optional): dtype LOOM_I8 (boolean: nonzero = masked,
 * Ascend's convention) or LOOM_F32 (added to the scaled scores; -inf masks).
 * Shape [S_q, S_kv] or [B or 1, N or 1, S_q, S_kv]; a dim of 1 broadcasts.
 * For TND and decode the last two dims must cover the longest sequence (at
 * least) and are indexed by positions within each sequence. In sparse modes 2..4 it applies on top
 * of the computed mask. Rows with no visible key give 0 (and lse = -inf). */

/* ---------------------------------------------------------- prefill */

typedef struct loom_flash_attention_tensors {
    const loom_tensor *query;          /* [B, S_q, N, D] per input_layout; f32/f16/bf16 */
    const loom_tensor *key;            /* [B, S_kv, N_kv, D] or a paged cache (block_table);
                                          f32/f16/bf16, or i8 (not TND unless paged) */
    const loom_tensor *value;          /* same shape and dtype as key */
    const loom_tensor *atten_mask;     /* optional, see above */
    loom_tensor       *attention_out;  /* shape of query; f32/f16/bf16 */
    loom_tensor       *softmax_lse;    /* optional f32: [B, N, S_q]; TND: [T_q, N].
                                          ln(sum_j exp(score_ij)), -inf where nothing is visible */
    /* i8 key and value (a quantized KV cache read by a prefill): x = (q + offset) * scale,
     * shapes and modes as the decode op's (key_antiquant_mode below); offsets optional */
    const loom_tensor *key_antiquant_scale, *key_antiquant_offset;
    const loom_tensor *value_antiquant_scale, *value_antiquant_offset;
    /* optional i32 [B (TND: num_seqs), max_blocks]: key and value are a paged KV cache, as the
     * decode op's (below): [num_blocks, block_size, N_kv, D] in BSND and TND, [num_blocks, N_kv,
     * block_size, D] in BNSD, [num_blocks, block_size, N_kv*D] in BSH; position j of sequence b
     * is slot j % block_size of block block_table[b][j / block_size]. The KV lengths are then
     * required: actual_seq_lengths_kv (padded layouts) or actual_seq_kvlen (TND: cumulative
     * ends; each sequence's keys start at position 0 of its own blocks). i8 per-token scales
     * are [num_blocks, N_kv or 1, block_size] (TND included). The chunked prefill of a serving
     * engine: a chunk of queries against everything its sequence has cached. */
    const loom_tensor *block_table;
} loom_flash_attention_tensors;

typedef struct loom_flash_attention_params {
    loom_attn_layout input_layout;     /* default BSND */
    int64_t num_heads;                 /* N; 0 = from query (required for BSH) */
    int64_t num_key_value_heads;       /* N_kv; 0 = from key (BSH: num_heads); N % N_kv == 0 */
    float   scale_value;               /* multiplies q.k; 0 = 1/sqrt(D) (default) */
    int64_t pre_tokens, next_tokens;   /* band limits, modes 0 and 4; default LOOM_ATTN_TOKENS_ALL */
    int     sparse_mode;               /* loom_attn_sparse_mode, default 0 */
    float   keep_prob;                 /* dropout keep probability in (0, 1]; default 1 = none */
    uint64_t seed, offset;             /* dropout: Philox key and stream (counter-based) */
    /* padded layouts (BSND, BNSD, BSH): per-batch valid lengths, [B] entries or NULL (= all).
     * Rows i >= actual_seq_lengths[b] give zeros; keys j >= actual_seq_lengths_kv[b] are not read. */
    const int64_t *actual_seq_lengths;
    const int64_t *actual_seq_lengths_kv;
    /* TND: cumulative end offsets of each sequence in T_q / T_kv, num_seqs entries each,
     * non-decreasing (Ascend's actual_seq_qlen/kvlen). Rows after the last end give zeros. */
    const int64_t *actual_seq_qlen;
    const int64_t *actual_seq_kvlen;
    int64_t num_seqs;
    /* tiling: query positions and keys per tile; 0 = chosen from the cache sizes.
     * Changes rounding only, never results beyond the tolerance. */
    int64_t block_q, block_kv;
    /* loom_attn_inner_precise: 0 (default) computes Q.K^T and P.V in the
     * inputs' precision (f32 inputs: f32 FMAs); 1 lets f32/f16 inputs use bf16
     * products with f32 accumulation where the CPU has AVX512_BF16 (about twice
     * the f32 rate; bf16 accuracy, the tolerance of bf16 inputs). bf16 inputs
     * use bf16 products either way. An i8 key and value compute in f32 (dequantized once
     * per thread and kv head), except at 1 with per-token scales and no offsets on
     * AVX512_BF16 CPUs: bf16 products of their integers, each key's scale applied to
     * its column of scores and of P. */
    int     inner_precise;
    int     key_antiquant_mode, value_antiquant_mode;  /* i8 key/value: loom_antiquant_mode */
    int64_t block_size;                /* paged cache: 0 = from the cache shape, else must match */
    /* > 0: logit soft-capping (Gemma 2): each score s = scale * q.k becomes
     * softcap * tanh(s / softcap) before the masks and the softmax; 0 (default): none */
    float   softcap;
} loom_flash_attention_params;

/* Defaults: BSND, heads from the shapes, scale 1/sqrt(D), no band, sparse_mode 0,
 * keep_prob 1, no per-batch lengths, automatic blocks. */
loom_flash_attention_params loom_flash_attention_default_params(void);

/* softmax(q.k^T * scale + mask) (with dropout) . v for every (batch, head),
 * without materialising the S_q x S_kv scores; optionally the row log-sum-exp.
 * Uses the kernels of loom_cpu_isa_name() (LOOM_ISA=ref runs the reference
 * decomposition). Outputs must not overlap inputs.
 * Returns LOOM_ERR_SHAPE / LOOM_ERR_DTYPE / LOOM_ERR_INVALID_ARG for inputs that
 * do not fit (message names the tensor or parameter), LOOM_ERR_NOMEM if scratch
 * cannot be allocated. Outputs are untouched on a validation error. */
loom_status loom_flash_attention_score(const loom_flash_attention_tensors *t,
                                       const loom_flash_attention_params *p, loom_pool *pool);

/* Thread level: the scratch bytes each thread needs for (t, p) (the same for
 * every ith, nth and kernel level). Depends on the sequence lengths in p (the
 * bf16 K/V caches hold the longest sequence), so size again when they grow.
 * Validates like loom_flash_attention_score. */
loom_status loom_flash_attention_score_scratch_size(const loom_flash_attention_tensors *t,
                                                    const loom_flash_attention_params *p,
                                                    size_t *bytes);
/* Thread ith of nth computes its share with its own scratch (64-byte aligned,
 * at least scratch_size bytes); all nth calls together produce the whole output.
 * Kernels of loom_cpu_isa_name(). Returns validation errors as above, or
 * LOOM_ERR_INVALID_ARG if scratch is missing or too small or ith is not in [0, nth). */
loom_status loom_flash_attention_score_thread(const loom_flash_attention_tensors *t,
                                              const loom_flash_attention_params *p, int ith,
                                              int nth, void *scratch, size_t scratch_bytes);

/* ---------------------------------------------------------- decode */

typedef enum loom_antiquant_mode {
    LOOM_ANTIQUANT_PER_CHANNEL = 0,  /* scale/offset [N_kv, D] (N_kv may be 1: shared) */
    LOOM_ANTIQUANT_PER_TOKEN = 1,    /* scale/offset [B or num_blocks, N_kv or 1, S_max or block_size] */
} loom_antiquant_mode;

/*
 * KV caches follow input_layout (TND is not accepted):
 *   contiguous: BSND [B, S_max, N_kv, D], BNSD [B, N_kv, S_max, D], BSH [B, S_max, N_kv*D];
 *   paged (block_table given): the same with B -> num_blocks and S_max -> block_size;
 *     position s of batch b is slot s % block_size of block block_table[b][s / block_size].
 * dtypes f32/f16/bf16, or i8 with antiquant scales: x = (q + offset) * scale.
 */
typedef struct loom_incre_flash_attention_tensors {
    const loom_tensor *query;          /* [B, S_q, N, D] per input_layout, S_q 1..16; f32/f16/bf16 */
    const loom_tensor *key;            /* cache, see above */
    const loom_tensor *value;          /* cache of the same shape and dtype as key */
    const loom_tensor *atten_mask;     /* optional, [.., S_q, >= longest KV length] */
    const loom_tensor *block_table;    /* optional i32 [B, max_blocks]: paged cache */
    const loom_tensor *key_antiquant_scale;    /* i8 key: f32, shape per key_antiquant_mode */
    const loom_tensor *key_antiquant_offset;   /* optional, shape of the scale */
    const loom_tensor *value_antiquant_scale;
    const loom_tensor *value_antiquant_offset;
    loom_tensor       *attention_out;  /* shape of query; f32/f16/bf16 */
    loom_tensor       *softmax_lse;    /* optional f32 [B, N, S_q] */
} loom_incre_flash_attention_tensors;

typedef struct loom_incre_flash_attention_params {
    loom_attn_layout input_layout;     /* BSND (default), BNSD or BSH */
    int64_t num_heads;                 /* 0 = from query (required for BSH) */
    int64_t num_key_value_heads;       /* 0 = from key (BSH: num_heads) */
    float   scale_value;               /* 0 = 1/sqrt(D) */
    int     sparse_mode;               /* as prefill; 3 is the causal mask of multi-token decode */
    int64_t pre_tokens, next_tokens;
    /* [B] valid KV length per batch (Ascend IFA naming); NULL = S_max. Required when paged. */
    const int64_t *actual_seq_lengths;
    int64_t block_size;                /* paged: 0 = from the cache shape, else must match */
    int     key_antiquant_mode, value_antiquant_mode;  /* loom_antiquant_mode */
    int64_t kv_chunk;                  /* split-KV chunk length; 0 = 512. Fixed, never from nth */
    /* loom_attn_inner_precise: 0 (default) as documented per cache; 1 on
     * AVX512_BF16 CPUs at head dims 64, 128 and 256: a bf16 K's Q.K^T takes q
     * rounded to bf16 (one product instead of the hi/lo pair; as the prefill
     * kernel's inner_precise 1). Other caches (i8 included), head dims and CPUs
     * compute as with 0. */
    int     inner_precise;
    float   softcap;                   /* > 0: scores capped as in loom_flash_attention_params */
} loom_incre_flash_attention_params;

/* Defaults: BSND, heads from the shapes, scale 1/sqrt(D), no band, sparse_mode 0,
 * KV lengths S_max, block size from the cache shape, per-channel antiquant,
 * kv_chunk 512, inner_precise 0. */
loom_incre_flash_attention_params loom_incre_flash_attention_default_params(void);

/* Decode attention with split-KV: the KV length is cut into chunks of kv_chunk
 * positions whose partial (max, sum, acc) are merged in chunk order, so one
 * sequence uses every thread and the result does not depend on their number.
 * Errors as loom_flash_attention_score, plus block_table entries outside
 * [0, num_blocks), lengths beyond the cache, missing antiquant scales. */
loom_status loom_incre_flash_attention(const loom_incre_flash_attention_tensors *t,
                                       const loom_incre_flash_attention_params *p,
                                       loom_pool *pool);

/* Thread level, two launches (split-KV across threads):
 *   1. every thread: loom_incre_flash_attention_split(.., ith, nth, scratch, workspace)
 *   2. after all have finished: loom_incre_flash_attention_merge(.., ith, nth, workspace)
 * or one launch, where each thread owns whole (batch, kv head) units:
 *   loom_incre_flash_attention_thread(.., ith, nth, scratch).
 * Both give bit-identical results. workspace is shared by all threads; scratch is per
 * thread (64-byte aligned). Sizes are the same for every nth and kernel level; the
 * functions return validation errors, or LOOM_ERR_INVALID_ARG for a missing or short
 * buffer or ith outside [0, nth). Kernels of loom_cpu_isa_name(). */
loom_status loom_incre_flash_attention_sizes(const loom_incre_flash_attention_tensors *t,
                                             const loom_incre_flash_attention_params *p,
                                             size_t *scratch_bytes, size_t *workspace_bytes);
loom_status loom_incre_flash_attention_split(const loom_incre_flash_attention_tensors *t,
                                             const loom_incre_flash_attention_params *p, int ith,
                                             int nth, void *scratch, size_t scratch_bytes,
                                             void *workspace, size_t workspace_bytes);
loom_status loom_incre_flash_attention_merge(const loom_incre_flash_attention_tensors *t,
                                             const loom_incre_flash_attention_params *p,
                                             int ith, int nth, void *workspace,
                                             size_t workspace_bytes);
loom_status loom_incre_flash_attention_thread(const loom_incre_flash_attention_tensors *t,
                                              const loom_incre_flash_attention_params *p, int ith,
                                              int nth, void *scratch, size_t scratch_bytes);

/* ---------------------------------------------------------- dispatch */

/* Union of both ops' inputs. key/value follow input_layout: a sequence [B, S_kv, ..]
 * for prefill, or a cache (contiguous or paged) for decode. */
typedef struct loom_fused_infer_attention_tensors {
    const loom_tensor *query, *key, *value;
    const loom_tensor *atten_mask;
    const loom_tensor *block_table;                    /* paged cache: read by either kernel */
    const loom_tensor *key_antiquant_scale, *key_antiquant_offset;
    const loom_tensor *value_antiquant_scale, *value_antiquant_offset;
    loom_tensor *attention_out;
    loom_tensor *softmax_lse;                          /* [B, N, S_q]; TND [T_q, N] */
} loom_fused_infer_attention_tensors;

typedef struct loom_fused_infer_attention_params {
    loom_attn_layout input_layout;
    int64_t num_heads, num_key_value_heads;
    float   scale_value;
    int64_t pre_tokens, next_tokens;
    int     sparse_mode;
    const int64_t *actual_seq_lengths;     /* [B] query lengths (prefill, padded layouts) */
    const int64_t *actual_seq_lengths_kv;  /* [B] KV lengths (both kernels) */
    const int64_t *actual_seq_qlen, *actual_seq_kvlen;  /* TND (prefill) */
    int64_t num_seqs;
    int64_t block_size;
    int     key_antiquant_mode, value_antiquant_mode;
    int64_t decode_max_q_len;  /* S_q <= this (and not TND) -> decode kernel; default 16, max 16 */
    int     inner_precise;     /* passed to the kernel that runs (loom_flash_attention_params,
                                  loom_incre_flash_attention_params) */
    float   softcap;           /* > 0: score soft-capping, passed on as inner_precise is */
} loom_fused_infer_attention_params;

/* Defaults: those of both ops (BSND, no band, no per-batch lengths), decode
 * kernel for S_q <= 16. */
loom_fused_infer_attention_params loom_fused_infer_attention_default_params(void);

/* Runs the decode kernel when S_q <= decode_max_q_len (and not TND), else the prefill
 * kernel, for contiguous and paged caches alike (an i8 cache included: the prefill
 * kernel dequantizes it once per thread and kv head); actual_seq_lengths (query) apply
 * to both. *used_decode (optional) says which ran. Errors as the op that runs. */
loom_status loom_fused_infer_attention_score(const loom_fused_infer_attention_tensors *t,
                                             const loom_fused_infer_attention_params *p,
                                             loom_pool *pool, int *used_decode);

/* ================================================================ row ops and the FFN */

/* ------------------------------------------------------ add + RMSNorm */

typedef struct loom_add_rms_norm_params {
    float epsilon;          /* > 0; default 1e-6 */
} loom_add_rms_norm_params;

/* Defaults: epsilon 1e-6. */
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

typedef struct loom_ffn_params {
    loom_act    act;          /* default LOOM_ACT_SILU; ignored when custom_act is set */
    loom_act_fn custom_act;   /* a user activation, or NULL */
    void       *custom_user;
    int64_t     block_n;      /* hidden columns per work item (0 = auto); up tile stays in cache */
    loom_act_precision act_precision; /* quantized weights: LOOM_ACT_PREC_FULL (f32 x) or q8 (default) */
} loom_ffn_params;

/* Defaults: SiLU, no custom activation, automatic block_n. */
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

/* ================================================================ Mixture of experts */

/*
 * The MoE family of ops-transformer: gating, routing, grouped matmul and
 * finalisation. A slot s = t * k + j is rank j of token t (rank 0 the largest
 * router weight); routing sorts the slots by expert, in slot order within an
 * expert, so every result is bit-identical for any thread count, and a row's
 * result depends only on that row (with params.invariant, the default) — not
 * on which other tokens are in the batch.
 */
typedef struct loom_moe_gating_params {
    int top_k;      /* experts per token, 1..E */
    int renorm;     /* 1: the top_k weights are divided by their sum (Mixtral; Qwen3-MoE's norm_topk_prob) */
} loom_moe_gating_params;

/* Router logits f32 [T, E] -> softmax per row -> the top_k experts (largest
 * first, ties to the lower id) in expert_ids i32 [T, top_k] and their
 * probabilities (renormalised if asked) in weights f32 [T, top_k]. */
loom_status loom_moe_gating_top_k_softmax(const loom_tensor *logits, const loom_moe_gating_params *p,
                                          loom_tensor *weights, loom_tensor *expert_ids, loom_pool *pool);

/* Groups the token rows by expert: x f32 [T, D], expert_ids i32 [T, k] (each in
 * [0, n_experts), else LOOM_ERR_INVALID_ARG naming the token) -> expanded_x f32
 * [T*k, D] (row i = x[expanded_row_idx[i] / k]), expanded_row_idx i32 [1, T*k]
 * (the slot of each expanded row), expert_offsets i32 [1, E+1] (expert e owns
 * expanded rows offsets[e] .. offsets[e+1]). */
loom_status loom_moe_init_routing(const loom_tensor *x, const loom_tensor *expert_ids, int64_t n_experts,
                                  loom_tensor *expanded_x, loom_tensor *expanded_row_idx,
                                  loom_tensor *expert_offsets, loom_pool *pool);

typedef struct loom_grouped_matmul_params {
    int64_t block_n;                  /* output columns per work item, 0 = auto */
    loom_act_precision act_precision; /* quantized weights: LOOM_ACT_PREC_FULL (f32 x) or q8 (default) */
    int     invariant;                /* 1 (default): each expert's GEMM path does not depend on its row count */
} loom_grouped_matmul_params;
loom_grouped_matmul_params loom_grouped_matmul_default_params(void);

/* The experts' SwiGLU FFNs over rows grouped by expert, all experts in one
 * call: y[i] = down_e(silu(gate_e(x[i])) * up_e(x[i])) for the rows i of expert
 * e. x, y f32 [R, D]; expert_offsets i32 [1, E+1] from 0 to R; w_gate, w_up
 * [E, H, D] (one dtype), w_down [E, D, H], contiguous, any weight dtype of the
 * matmul family. Each expert's weights are read once for all its rows;
 * experts without rows are not read. p NULL: defaults. */
loom_status loom_grouped_matmul_swiglu(const loom_tensor *x, const loom_tensor *expert_offsets,
                                       const loom_tensor *w_gate, const loom_tensor *w_up, const loom_tensor *w_down,
                                       const loom_grouped_matmul_params *p, loom_tensor *y, loom_pool *pool);

/* y[t] = residual[t] + sum_j weights[t, j] * expanded_y[row of slot t*k+j],
 * summed in rank order j = 0, 1, ..: expanded_y f32 [T*k, D], expanded_row_idx
 * i32 [1, T*k] (a permutation, else LOOM_ERR_INVALID_ARG), weights f32 [T, k],
 * residual f32 [T, D] or NULL, y f32 [T, D]. */
loom_status loom_moe_finalize_routing(const loom_tensor *expanded_y, const loom_tensor *expanded_row_idx,
                                      const loom_tensor *weights, const loom_tensor *residual, loom_tensor *y,
                                      loom_pool *pool);

/* ================================================================ KV cache write, QKV + RoPE */

/*
 * Where new K/V rows go. Caches follow the decode attention's conventions
 * (above): layout BSND [B, S_max, N_kv, D], BNSD [B, N_kv, S_max, D]
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

/* Defaults: no heads (set num_heads, num_key_value_heads, head_dim), half-split
 * RoPE over the whole head, theta 10000, freq_scale 1, a BSND cache and no
 * positions (set cache.positions). */
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

#ifdef __cplusplus
}
#endif

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#endif /* LOOM_OPS_H */
