/*
 * Reference decompositions of the fused attention ops: plain, obviously
 * correct code with double accumulation, the oracle of the attention tests.
 * Each output row (batch, head, query) is computed exactly as the unfused
 * primitive graph would:
 *
 *   scores = q . k^T * scale          (matmul; ops/ref LOOM_OP_MATMUL / ATTENTION)
 *   scores += mask, masked -> -inf    (sparse_mode / band / atten_mask; LOOM_OP_ADD)
 *   p = softmax(scores)               (LOOM_OP_SOFTMAX), lse = max + ln(sum)
 *   p *= dropout(keep_prob) / keep_prob   (Philox: loom_rng_uniform_at)
 *   out = p . v                       (matmul)
 *
 * Decode reads K/V through the block table (paged) and dequantizes i8 caches
 * element by element ((x + offset) * scale) before the same steps.
 * Addressing and masks are written independently of the optimised kernels
 * (per-element layout offsets, per-element visibility predicates); only the
 * input validation is shared, so both reject the same inputs.
 */
#ifndef LOOM_FUSED_REF_ATTENTION_REF_H
#define LOOM_FUSED_REF_ATTENTION_REF_H

#include "fused/attention.h"
#include "fused/flash_attention_internal.h"

/* Scratch bytes per thread for either reference kernel of a resolved problem. */
size_t loom_attn_ref_scratch(const attn_problem *pr);

/* Prefill reference: thread ith of nth computes its share of the output rows.
 * Returns validation errors (as loom_flash_attention_score) or
 * LOOM_ERR_INVALID_ARG for missing or short scratch. */
loom_status loom_attn_ref_flash(const loom_flash_attention_tensors *t,
                                const loom_flash_attention_params *p, int ith, int nth,
                                void *scratch, size_t scratch_bytes);

/* Decode reference; q_lens (optional, [B]) are per-batch query lengths as
 * fused_infer_attention_score passes them. */
loom_status loom_attn_ref_incre(const loom_incre_flash_attention_tensors *t,
                                const loom_incre_flash_attention_params *p,
                                const int64_t *q_lens, int ith, int nth, void *scratch,
                                size_t scratch_bytes);

#endif
