/* Optimised matmul kernels: registered into the op table by level. */
#include "ops/register.h"

void loom_register_matmul_kernels(loom_op_info *table) { (void)table; }
