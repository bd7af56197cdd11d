/* Registration of optimised kernel families into the op table. Each family
 * sets opt[level] (and, if its kernels need more scratch than the reference,
 * scratch_size) for the ops it accelerates. Called once, before first use. */
#ifndef LOOM_OPS_REGISTER_H
#define LOOM_OPS_REGISTER_H

#include "ops/ops.h"

void loom_register_matmul_kernels(loom_op_info *table);  /* src/ops/matmul/ */
void loom_register_vec_kernels(loom_op_info *table);     /* src/ops/vec/ */
/* Fused attention ops: fills infer, cost, scratch, ref and opt (src/fused/). */
void loom_register_attention_kernels(loom_op_info *table);

#endif
