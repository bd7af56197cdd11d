/* Kernels of the scale and softcap ops (vec_scale.c). */
#ifndef LOOM_OPS_VEC_VEC_SCALE_H
#define LOOM_OPS_VEC_VEC_SCALE_H

#include "ops/ops.h"

/* scale: one float product per element, as the reference (exact agreement). */
loom_status loom_scale_generic(const loom_kernel_args *a);
/* softcap in float (tanhf); within a few ulp of the cap of the reference's
 * double result. */
loom_status loom_softcap_generic(const loom_kernel_args *a);

#endif
