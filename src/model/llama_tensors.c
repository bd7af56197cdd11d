/* The one list of a Llama layer's tensors (llama.h), used by the GGUF and
 * safetensors loaders, loom convert and loom plan. */
#include "model/llama.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"

#define F(x) offsetof(loom_llama_layer, x)
#define D LOOM_LLAMA_D
const loom_llama_layer_tensor loom_llama_layer_tensors[LOOM_LLAMA_LAYER_TENSORS] = {
    {F(attn_norm), "attn_norm.weight", "input_layernorm.weight", 1, D, D, 0, LOOM_LLAMA_ALWAYS, 0},
    {F(wqkv), "attn_qkv.weight", "self_attn.qkv_proj.weight", 0, LOOM_LLAMA_QKVD, D, 0, LOOM_LLAMA_IF_MERGED, 0},
    {F(wq), "attn_q.weight", "self_attn.q_proj.weight", 0, LOOM_LLAMA_QD, D, 1, LOOM_LLAMA_IF_SPLIT, 0},
    {F(bq), "attn_q.bias", "self_attn.q_proj.bias", 1, LOOM_LLAMA_QD, D, 0, LOOM_LLAMA_IF_QKV_BIAS, 0},
    {F(wk), "attn_k.weight", "self_attn.k_proj.weight", 0, LOOM_LLAMA_KVD, D, 1, LOOM_LLAMA_IF_SPLIT, 0},
    {F(bk), "attn_k.bias", "self_attn.k_proj.bias", 1, LOOM_LLAMA_KVD, D, 0, LOOM_LLAMA_IF_QKV_BIAS, 0},
    {F(wv), "attn_v.weight", "self_attn.v_proj.weight", 0, LOOM_LLAMA_KVD, D, 0, LOOM_LLAMA_IF_SPLIT, 0},
    {F(bv), "attn_v.bias", "self_attn.v_proj.bias", 1, LOOM_LLAMA_KVD, D, 0, LOOM_LLAMA_IF_QKV_BIAS, 0},
    {F(q_norm), "attn_q_norm.weight", "self_attn.q_norm.weight", 1, LOOM_LLAMA_HD, D, 0, LOOM_LLAMA_IF_QK_NORM, 0},
    {F(k_norm), "attn_k_norm.weight", "self_attn.k_norm.weight", 1, LOOM_LLAMA_HD, D, 0, LOOM_LLAMA_IF_QK_NORM, 0},
    {F(wo), "attn_output.weight", "self_attn.o_proj.weight", 0, D, LOOM_LLAMA_QD, 0, LOOM_LLAMA_ALWAYS, 0},
    {F(ffn_norm), "ffn_norm.weight", "post_attention_layernorm.weight", 1, D, D, 0, LOOM_LLAMA_IF_NOT_GEMMA, 0},
    /* Gemma: four norms a layer; its post_attention_layernorm normalises the attention's output */
    {F(attn_post_norm), "post_attention_norm.weight", "post_attention_layernorm.weight", 1, D, D, 0,
     LOOM_LLAMA_IF_GEMMA, 0},
    {F(ffn_norm), "ffn_norm.weight", "pre_feedforward_layernorm.weight", 1, D, D, 0, LOOM_LLAMA_IF_GEMMA, 0},
    {F(ffn_post_norm), "post_ffw_norm.weight", "post_feedforward_layernorm.weight", 1, D, D, 0,
     LOOM_LLAMA_IF_GEMMA, 0},
    {F(w1), "ffn_gate.weight", "mlp.gate_proj.weight", 0, LOOM_LLAMA_H, D, 0, LOOM_LLAMA_IF_SPLIT_FFN, 0},
    {F(w2), "ffn_down.weight", "mlp.down_proj.weight", 0, D, LOOM_LLAMA_H, 0, LOOM_LLAMA_IF_DENSE, 0},
    {F(w3), "ffn_up.weight", "mlp.up_proj.weight", 0, LOOM_LLAMA_H, D, 0, LOOM_LLAMA_IF_SPLIT_FFN, 0},
    /* llama.cpp's phi3 keeps the merged gate/up under ffn_up's name, [2 H, D] */
    {F(w13), "ffn_up.weight", "mlp.gate_up_proj.weight", 0, LOOM_LLAMA_H2, D, 0, LOOM_LLAMA_IF_MERGED_FFN, 0},
    /* mixtures of experts: Qwen3-MoE's names (Mixtral's: loom_llama_hf_name) */
    {F(ffn_gate_inp), "ffn_gate_inp.weight", "mlp.gate.weight", 0, LOOM_LLAMA_E, D, 0, LOOM_LLAMA_IF_MOE, 0},
    {F(ffn_gate_exps), "ffn_gate_exps.weight", "mlp.experts.%d.gate_proj.weight", 0, LOOM_LLAMA_H, D, 0,
     LOOM_LLAMA_IF_MOE, 1},
    {F(ffn_down_exps), "ffn_down_exps.weight", "mlp.experts.%d.down_proj.weight", 0, D, LOOM_LLAMA_H, 0,
     LOOM_LLAMA_IF_MOE, 1},
    {F(ffn_up_exps), "ffn_up_exps.weight", "mlp.experts.%d.up_proj.weight", 0, LOOM_LLAMA_H, D, 0,
     LOOM_LLAMA_IF_MOE, 1},
};
#undef D

int loom_llama_layer_has(const loom_llama_config *c, const loom_llama_layer_tensor *t) {
    switch (t->cond) {
    case LOOM_LLAMA_IF_QKV_BIAS: return c->qkv_bias;
    case LOOM_LLAMA_IF_QK_NORM: return c->qk_norm;
    case LOOM_LLAMA_IF_SPLIT: return !c->merged;
    case LOOM_LLAMA_IF_MERGED: return c->merged;
    case LOOM_LLAMA_IF_SPLIT_FFN: return !c->merged && !c->n_experts;
    case LOOM_LLAMA_IF_DENSE: return !c->n_experts;
    case LOOM_LLAMA_IF_MERGED_FFN: return c->merged && !c->n_experts;
    case LOOM_LLAMA_IF_MOE: return c->n_experts > 0;
    case LOOM_LLAMA_IF_GEMMA: return loom_llama_gemma(c);
    case LOOM_LLAMA_IF_NOT_GEMMA: return !loom_llama_gemma(c);
    default: return 1;
    }
}

int64_t loom_llama_dim_size(const loom_llama_config *c, loom_llama_dim d) {
    switch (d) {
    case LOOM_LLAMA_QD: return (int64_t)c->n_heads * c->head_dim;
    case LOOM_LLAMA_KVD: return (int64_t)c->n_kv_heads * c->head_dim;
    case LOOM_LLAMA_H: return c->hidden_dim;
    case LOOM_LLAMA_HD: return c->head_dim;
    case LOOM_LLAMA_QKVD: return (int64_t)(c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
    case LOOM_LLAMA_H2: return 2 * (int64_t)c->hidden_dim;
    case LOOM_LLAMA_E: return c->n_experts;
    default: return c->dim;
    }
}

loom_status loom_llama_layer_views(const loom_llama_config *c, loom_llama_layer *y) {
    if (!c->merged) return LOOM_OK;
    const int64_t qd = loom_llama_dim_size(c, LOOM_LLAMA_QD), kvd = loom_llama_dim_size(c, LOOM_LLAMA_KVD);
    LOOM_TRY(loom_tensor_view_rows(&y->wqkv, 0, qd, &y->wq));
    LOOM_TRY(loom_tensor_view_rows(&y->wqkv, qd, kvd, &y->wk));
    LOOM_TRY(loom_tensor_view_rows(&y->wqkv, qd + kvd, kvd, &y->wv));
    LOOM_TRY(loom_tensor_view_rows(&y->w13, 0, c->hidden_dim, &y->w1));
    return loom_tensor_view_rows(&y->w13, c->hidden_dim, c->hidden_dim, &y->w3);
}

void loom_llama_hf_name(const loom_llama_config *c, const loom_llama_layer_tensor *t, int layer, int expert,
                        char *buf, size_t n) {
    const char *hf = t->hf;
    if (c->hf_block_sparse_moe) { /* Mixtral: block_sparse_moe.gate, block_sparse_moe.experts.N.w1/w2/w3 */
        if (t->field == F(ffn_gate_inp)) hf = "block_sparse_moe.gate.weight";
        else if (t->field == F(ffn_gate_exps)) hf = "block_sparse_moe.experts.%d.w1.weight";
        else if (t->field == F(ffn_down_exps)) hf = "block_sparse_moe.experts.%d.w2.weight";
        else if (t->field == F(ffn_up_exps)) hf = "block_sparse_moe.experts.%d.w3.weight";
    }
    const char *pc = t->experts ? strstr(hf, "%d") : NULL;
    if (pc) snprintf(buf, n, "model.layers.%d.%.*s%d%s", layer, (int)(pc - hf), hf, expert, pc + 2);
    else snprintf(buf, n, "model.layers.%d.%s", layer, hf);
}

const char *loom_llama_family_name(loom_llama_family f) {
    static const char *names[LOOM_FAMILY_COUNT] = {"llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3",
                                                   "qwen3moe"};
    return (unsigned)f < LOOM_FAMILY_COUNT ? names[f] : "?";
}
#undef F
