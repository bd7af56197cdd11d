/*
 * Fused attention operators (the ops-transformer part of loom):
 *
 *   loom_flash_attention_score        prefill: tiled FlashAttention, any S_q, S_kv
 *   loom_incre_flash_attention        decode: q_len 1..16 against a KV cache, split-KV
 *   loom_fused_infer_attention_score  either, chosen by the query length
 *
 * Parameter names follow Ascend's FlashAttentionScore / IncreFlashAttention /
 * FusedInferAttentionScore. Tensors are loom_tensor descriptors (dtype, shape,
 * strides in elements, data); nothing is copied and no alignment is required.
 * Each op has a tensors struct, a params struct with defaults from
 * loom_<op>_default_params(), a convenience entry taking a loom_pool (NULL =
 * the calling thread only), and thread-level entry points (ith, nth, scratch)
 * for a graph executor. Every entry returns LOOM_OK or an error status with a
 * message (loom_last_error()) naming the offending tensor or parameter.
 * Results are bit-identical for any thread count. The convenience entries
 * allocate their scratch per call; the thread-level entries take caller
 * memory and allocate nothing. docs/attention.md has the full reference.
 */
#ifndef LOOM_FUSED_ATTENTION_H
#define LOOM_FUSED_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_pool loom_pool;   /* base/threadpool.h */

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
    uint64_t seed, offset;             /* dropout: Philox key and stream (loom_rng_uniform_at) */
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
} loom_flash_attention_params;

/* Defaults: BSND, heads from the shapes, scale 1/sqrt(D), no band, sparse_mode 0,
 * keep_prob 1, no per-batch lengths, automatic blocks. */
loom_flash_attention_params loom_flash_attention_default_params(void);

/* softmax(q.k^T * scale + mask) (with dropout) . v for every (batch, head),
 * without materialising the S_q x S_kv scores; optionally the row log-sum-exp.
 * Uses the kernels of loom_cpu_isa() (LOOM_ISA=ref runs the reference
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
 * Kernels of loom_cpu_isa(). Returns validation errors as above, or
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
} loom_incre_flash_attention_params;

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
 * buffer or ith outside [0, nth). Kernels of loom_cpu_isa(). */
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
} loom_fused_infer_attention_params;

loom_fused_infer_attention_params loom_fused_infer_attention_default_params(void);

/* Runs the decode kernel when S_q <= decode_max_q_len (and not TND), else the prefill
 * kernel, for contiguous and paged caches alike (an i8 cache included: the prefill
 * kernel dequantizes it once per thread and kv head); actual_seq_lengths (query) apply
 * to both. *used_decode (optional) says which ran. Errors as the op that runs. */
loom_status loom_fused_infer_attention_score(const loom_fused_infer_attention_tensors *t,
                                             const loom_fused_infer_attention_params *p,
                                             loom_pool *pool, int *used_decode);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_FUSED_ATTENTION_H */
