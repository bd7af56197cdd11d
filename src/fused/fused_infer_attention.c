/* fused_infer_attention_score: one entry for inference attention that picks
 * the decode kernel for short queries and the prefill kernel otherwise (both
 * read contiguous and paged caches), mapping the union of parameters onto each. */
#include "fused/flash_attention_internal.h"

#include "base/status.h"

#include <string.h>

loom_fused_infer_attention_params loom_fused_infer_attention_default_params(void) {
    loom_fused_infer_attention_params p;
    memset(&p, 0, sizeof p);
    p.input_layout = LOOM_ATTN_BSND;
    p.pre_tokens = p.next_tokens = LOOM_ATTN_TOKENS_ALL;
    p.decode_max_q_len = LOOM_INCRE_MAX_Q_LEN;
    return p;
}

loom_status loom_fused_infer_attention_score(const loom_fused_infer_attention_tensors *t,
                                             const loom_fused_infer_attention_params *p,
                                             loom_pool *pool, int *used_decode) {
    static const char op[] = "fused_infer_attention_score";
    LOOM_RETURN_IF(!t || !p, LOOM_ERR_INVALID_ARG, "%s: tensors or params is NULL", op);
    LOOM_RETURN_IF(!t->query || !t->key, LOOM_ERR_INVALID_ARG, "%s: query or key is NULL", op);
    LOOM_RETURN_IF(p->decode_max_q_len < 0 || p->decode_max_q_len > LOOM_INCRE_MAX_Q_LEN,
                   LOOM_ERR_INVALID_ARG, "%s: decode_max_q_len = %lld outside 0..%d", op,
                   (long long)p->decode_max_q_len, LOOM_INCRE_MAX_Q_LEN);
    LOOM_TRY(attn_check_inner_precise(op, p->inner_precise)); /* whichever kernel runs */
    const loom_tensor *q = t->query;
    int tnd = p->input_layout == LOOM_ATTN_TND;
    int64_t q_len = p->input_layout == LOOM_ATTN_BNSD ? (q->ndim > 2 ? q->shape[2] : 0)
                                                      : (q->ndim > 1 ? q->shape[1] : 0);
    int decode = !tnd && q_len <= p->decode_max_q_len;
    if (used_decode) *used_decode = decode;
    if (decode) {
        LOOM_RETURN_IF(p->actual_seq_qlen || p->actual_seq_kvlen, LOOM_ERR_INVALID_ARG,
                       "%s: actual_seq_qlen/kvlen are for input_layout TND", op);
        loom_incre_flash_attention_tensors ti = {
            .query = t->query, .key = t->key, .value = t->value, .atten_mask = t->atten_mask,
            .block_table = t->block_table, .key_antiquant_scale = t->key_antiquant_scale,
            .key_antiquant_offset = t->key_antiquant_offset,
            .value_antiquant_scale = t->value_antiquant_scale,
            .value_antiquant_offset = t->value_antiquant_offset,
            .attention_out = t->attention_out, .softmax_lse = t->softmax_lse};
        loom_incre_flash_attention_params pi = loom_incre_flash_attention_default_params();
        pi.input_layout = p->input_layout;
        pi.num_heads = p->num_heads, pi.num_key_value_heads = p->num_key_value_heads;
        pi.scale_value = p->scale_value, pi.sparse_mode = p->sparse_mode;
        pi.pre_tokens = p->pre_tokens, pi.next_tokens = p->next_tokens;
        pi.actual_seq_lengths = p->actual_seq_lengths_kv;
        pi.block_size = p->block_size;
        pi.key_antiquant_mode = p->key_antiquant_mode;
        pi.value_antiquant_mode = p->value_antiquant_mode;
        pi.inner_precise = p->inner_precise;
        pi.softcap = p->softcap;
        return attn_decode_pool(&ti, &pi, p->actual_seq_lengths, pool);
    }
    loom_flash_attention_tensors tf = {t->query, t->key, t->value, t->atten_mask,
                                       t->attention_out, t->softmax_lse,
                                       t->key_antiquant_scale, t->key_antiquant_offset,
                                       t->value_antiquant_scale, t->value_antiquant_offset,
                                       t->block_table};
    loom_flash_attention_params pf = loom_flash_attention_default_params();
    pf.input_layout = p->input_layout;
    pf.num_heads = p->num_heads, pf.num_key_value_heads = p->num_key_value_heads;
    pf.scale_value = p->scale_value, pf.sparse_mode = p->sparse_mode;
    pf.pre_tokens = p->pre_tokens, pf.next_tokens = p->next_tokens;
    pf.actual_seq_lengths = p->actual_seq_lengths;
    pf.actual_seq_lengths_kv = p->actual_seq_lengths_kv;
    pf.actual_seq_qlen = p->actual_seq_qlen, pf.actual_seq_kvlen = p->actual_seq_kvlen;
    pf.num_seqs = p->num_seqs;
    pf.block_size = p->block_size;
    pf.inner_precise = p->inner_precise;
    pf.softcap = p->softcap;
    pf.key_antiquant_mode = p->key_antiquant_mode;
    pf.value_antiquant_mode = p->value_antiquant_mode;
    return loom_flash_attention_score(&tf, &pf, pool);
}
