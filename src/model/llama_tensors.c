/* The one list of a Llama layer's tensors (llama.h), used by the GGUF and
 * safetensors loaders and by loom convert. */
#include "model/llama.h"

#include <stddef.h>

#define F(x) offsetof(loom_llama_layer, x)
const loom_llama_layer_tensor loom_llama_layer_tensors[LOOM_LLAMA_LAYER_TENSORS] = {
    {F(attn_norm), "attn_norm", "input_layernorm.weight", 1, LOOM_LLAMA_D, LOOM_LLAMA_D, 0},
    {F(wq), "attn_q", "self_attn.q_proj.weight", 0, LOOM_LLAMA_QD, LOOM_LLAMA_D, 1},
    {F(wk), "attn_k", "self_attn.k_proj.weight", 0, LOOM_LLAMA_KVD, LOOM_LLAMA_D, 1},
    {F(wv), "attn_v", "self_attn.v_proj.weight", 0, LOOM_LLAMA_KVD, LOOM_LLAMA_D, 0},
    {F(wo), "attn_output", "self_attn.o_proj.weight", 0, LOOM_LLAMA_D, LOOM_LLAMA_QD, 0},
    {F(ffn_norm), "ffn_norm", "post_attention_layernorm.weight", 1, LOOM_LLAMA_D, LOOM_LLAMA_D, 0},
    {F(w1), "ffn_gate", "mlp.gate_proj.weight", 0, LOOM_LLAMA_H, LOOM_LLAMA_D, 0},
    {F(w2), "ffn_down", "mlp.down_proj.weight", 0, LOOM_LLAMA_D, LOOM_LLAMA_H, 0},
    {F(w3), "ffn_up", "mlp.up_proj.weight", 0, LOOM_LLAMA_H, LOOM_LLAMA_D, 0},
};
#undef F

int64_t loom_llama_dim_size(const loom_llama_config *c, loom_llama_dim d) {
    switch (d) {
    case LOOM_LLAMA_QD: return (int64_t)c->n_heads * c->head_dim;
    case LOOM_LLAMA_KVD: return (int64_t)c->n_kv_heads * c->head_dim;
    case LOOM_LLAMA_H: return c->hidden_dim;
    default: return c->dim;
    }
}
