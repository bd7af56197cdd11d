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

#endif
