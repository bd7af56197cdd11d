/* Reference decompositions of the fused operators into primitive reference
 * ops (loom_op_run at LOOM_ISA_REF): the oracle of the fused kernels' tests and
 * what step_by_step mode computes. Same arguments as the fused ops. */
#ifndef LOOM_FUSED_REF_H
#define LOOM_FUSED_REF_H

#include "fused/fused.h"

/* add -> rms_norm */
loom_status loom_add_rms_norm_ref(const loom_tensor *x, const loom_tensor *residual,
                                  const loom_tensor *gamma, float eps, loom_tensor *y,
                                  loom_tensor *r_out);
/* silu(a) -> mul(., b) on the halves of x (other activations: applied elementwise) */
loom_status loom_swiglu_ref(const loom_tensor *x, loom_act act, loom_tensor *y);
/* matmul(gate), matmul(up) -> act -> mul -> matmul(down) [-> add(residual)] */
loom_status loom_ffn_ref(const loom_tensor *x, const loom_tensor *w_gate, const loom_tensor *w_up,
                         const loom_tensor *w_down, const loom_tensor *residual,
                         const loom_ffn_params *p, loom_tensor *y);

/* Mixture of experts (loom_ops.h). softmax -> top_k -> moe_weights */
loom_status loom_moe_gating_ref(const loom_tensor *logits, const loom_moe_gating_params *p, loom_tensor *weights,
                                loom_tensor *expert_ids);
/* experts in order, each expert's slots in slot order; rows copied */
loom_status loom_moe_init_routing_ref(const loom_tensor *x, const loom_tensor *expert_ids, int64_t n_experts,
                                      loom_tensor *expanded_x, loom_tensor *expanded_row_idx,
                                      loom_tensor *expert_offsets);
/* matmul_id(gate), matmul_id(up) -> silu -> mul -> matmul_id(down), each row by its expert */
loom_status loom_grouped_matmul_swiglu_ref(const loom_tensor *x, const loom_tensor *expert_offsets,
                                           const loom_tensor *w_gate, const loom_tensor *w_up,
                                           const loom_tensor *w_down, loom_tensor *y);
/* un-permute -> moe_sum [-> add(residual)] */
loom_status loom_moe_finalize_routing_ref(const loom_tensor *expanded_y, const loom_tensor *expanded_row_idx,
                                          const loom_tensor *weights, const loom_tensor *residual, loom_tensor *y);

#endif
