/* The softcap op's float kernel (vec_scale.c). */
#ifndef LOOM_OPS_VEC_VEC_SCALE_H
#define LOOM_OPS_VEC_VEC_SCALE_H

#include "ops/ops.h"

/* softcap in float (tanhf); within a few ulp of the cap of the reference's
 * double result. */
loom_status loom_softcap_generic(const loom_kernel_args *a);

#endif
