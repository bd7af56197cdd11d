/* Reference kernels of the primitive ops encoder models (BERT) need beyond
 * the decoder set: layer_norm (with gamma and beta), gelu, add_bias.
 * Same conventions as ref.h: f32 activations, f64 accumulation, rows split
 * by (ith, nth), strided inputs honoured. */
#ifndef LOOM_OPS_REF_REF_ENCODER_H
#define LOOM_OPS_REF_REF_ENCODER_H

#include "ops/ref/ref.h"

/* layer_norm.c */
loom_status loom_ref_layer_norm_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                      loom_tensor *dst);
void loom_ref_layer_norm_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                              const void *attrs, loom_cost *c);
loom_status loom_ref_layer_norm(const loom_kernel_args *a);

/* gelu.c: gelu and add_bias */
loom_status loom_ref_gelu_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                loom_tensor *dst);
void loom_ref_gelu_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                        const void *attrs, loom_cost *c);
loom_status loom_ref_gelu(const loom_kernel_args *a);

loom_status loom_ref_add_bias_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                    loom_tensor *dst);
void loom_ref_add_bias_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                            const void *attrs, loom_cost *c);
loom_status loom_ref_add_bias(const loom_kernel_args *a);

#endif
