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
/* Optimised kernels of the primitive attention op (the FlashAttention driver
 * under the primitive op's semantics; src/fused/attention_primitive.c). */
void loom_register_attention_primitive_kernels(loom_op_info *table);
/* Fused graph ops qkv_rope, add_rms_norm, ffn and the empty custom slots
 * (src/fused/..._op.c). */
void loom_register_fused_graph_ops(loom_op_info *table);
/* The op table, for run-time registration into the custom slots. */
loom_op_info *loom_op_table_mutable(void);
/* Rebuilds the kernel names of op after its entry was renamed (custom slots). */
void loom_op_refresh_kernel_names(loom_op op);

#endif
