/* Vectorised primitive-op kernels: registered into the op table by level. */
#include "ops/register.h"

void loom_register_vec_kernels(loom_op_info *table) { (void)table; }
