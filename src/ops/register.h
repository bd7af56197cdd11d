/* Registration of optimised kernel families into the op table. Each family
 * sets opt[level] (and, if its kernels need more scratch than the reference,
 * scratch_size) for the ops it accelerates. Called once, before first use. */
#ifndef LOOM_OPS_REGISTER_H
#define LOOM_OPS_REGISTER_H

#include "ops/ops.h"

void loom_register_matmul_kernels(loom_op_info *table);  /* src/ops/matmul/ */
void loom_register_matmul_id_kernels(loom_op_info *table); /* src/ops/matmul/matmul_id.c */
void loom_register_vec_kernels(loom_op_info *table);     /* src/ops/vec/ */
/* The op table with the primitive families registered, for the layers above
 * that fill in their ops (src/fused through loom_ops_init in src/graph) and
 * for run-time registration into the custom slots. Entries nobody filled in
 * fail with "not registered" instead of running. */
loom_op_info *loom_op_table_mutable(void);
/* Rebuilds the kernel names of op after its entry was renamed (custom slots). */
void loom_op_refresh_kernel_names(loom_op op);

#endif
