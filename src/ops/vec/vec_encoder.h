/* Fast kernels of the encoder ops (vec_encoder.c). */
#ifndef LOOM_OPS_VEC_VEC_ENCODER_H
#define LOOM_OPS_VEC_VEC_ENCODER_H

#include "ops/ops.h"

/* gelu in float (polynomial erf); within 2^-20 of the reference's output scale. */
loom_status loom_gelu_generic(const loom_kernel_args *a);

/* layer_norm with float sums over 16 lanes (two passes); within the f32
 * tolerance (2^-11) of the reference. */
loom_status loom_layer_norm_generic(const loom_kernel_args *a);
/* add_bias; exact (one float addition, as the reference). */
loom_status loom_add_bias_generic(const loom_kernel_args *a);

#if defined(__x86_64__)
/* The same with AVX2 + FMA and with AVX-512 F/BW/VL + FMA (same polynomial
 * erf, vec.h's exp on 8 and 16 lanes). */
loom_status loom_gelu_avx2(const loom_kernel_args *a);
loom_status loom_gelu_avx512(const loom_kernel_args *a);
#endif

#endif
