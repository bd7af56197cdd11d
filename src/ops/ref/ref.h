/*
 * Reference kernels of the primitive ops: naive, obviously correct, f64
 * accumulation. They are the oracle every optimised kernel is tested against.
 * Per op: shape inference, cost model, kernel (and scratch size where needed);
 * the registry (src/ops/registry.c) wires them into loom_op_info.
 */
#ifndef LOOM_OPS_REF_REF_H
#define LOOM_OPS_REF_REF_H

#include "ops/ops.h"

/* ---------------------------------------------------------- helpers (common.c) */

/* Bit flags of accepted dtypes for loom_ref_check_dtype. */
#define LOOM_REF_DT(t) (1u << (t))
#define LOOM_REF_FLOATS (LOOM_REF_DT(LOOM_F32) | LOOM_REF_DT(LOOM_F16) | LOOM_REF_DT(LOOM_BF16))
/* GGUF block formats (weights, embedding tables): rows of whole 32-element blocks. */
#define LOOM_REF_QUANTS (LOOM_REF_DT(LOOM_Q8_0) | LOOM_REF_DT(LOOM_Q4_0) | LOOM_REF_DT(LOOM_Q4_1))

/* Buffer size that holds any shape written by loom_ref_shape_str. */
#define LOOM_REF_SHAPE_BUF 96

/* Writes "[2, 3, 4]" into buf and returns buf. */
const char *loom_ref_shape_str(const loom_tensor *t, char *buf, size_t n);
/* Checks n_src against [lo, hi], that src[0..n_src) are non-NULL and have a
 * valid ndim and dtype. */
loom_status loom_ref_check_arity(const char *op, const loom_tensor *const *src, int n_src,
                                 int lo, int hi);
/* Checks t->dtype is in the allowed set; the error names op, input index and what. */
loom_status loom_ref_check_dtype(const char *op, int idx, const char *what,
                                 const loom_tensor *t, unsigned allowed);
/* Sets dst->dtype, ndim and shape (unused dims 1); strides and data untouched. */
void loom_ref_set_dst(loom_tensor *dst, loom_dtype dtype, int ndim, const int64_t *shape);

/* Element at element offset off from t->data, converted to f32 (f32/f16/bf16/i32/i8). */
float loom_ref_get(const loom_tensor *t, int64_t off);
/* Stores v, converted to t's dtype (f32/f16/bf16), at element offset off. */
void loom_ref_put(const loom_tensor *t, int64_t off, float v);
/* Product of the first n_lead dims: the number of "rows". */
int64_t loom_ref_rows(const loom_tensor *t, int n_lead);
/* Element offset of row r, where rows enumerate the first n_lead dims row-major.
 * With n_lead = ndim this is the offset of flat element r. */
int64_t loom_ref_row_offset(const loom_tensor *t, int n_lead, int64_t r);
/* Thread ith's share [*lo, *hi) of n items: contiguous, balanced, independent of data. */
void loom_ref_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi);

/* ---------------------------------------------------------- matmul.c */

loom_status loom_ref_matmul_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                  loom_tensor *dst);
void loom_ref_matmul_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                          const void *attrs, loom_cost *c);
loom_status loom_ref_matmul(const loom_kernel_args *a);

/* ---------------------------------------------------------- rows.c */

loom_status loom_ref_get_rows_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                    loom_tensor *dst);
void loom_ref_get_rows_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                            const void *attrs, loom_cost *c);
loom_status loom_ref_get_rows(const loom_kernel_args *a);

loom_status loom_ref_copy_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                loom_tensor *dst);
void loom_ref_copy_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                        const void *attrs, loom_cost *c);
loom_status loom_ref_copy(const loom_kernel_args *a);

loom_status loom_ref_kv_append_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                     loom_tensor *dst);
void loom_ref_kv_append_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                             const void *attrs, loom_cost *c);
loom_status loom_ref_kv_append(const loom_kernel_args *a);
loom_status loom_ref_kv_write_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                    loom_tensor *dst);
void loom_ref_kv_write_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                            const void *attrs, loom_cost *c);
loom_status loom_ref_kv_write(const loom_kernel_args *a);
/* The cache slot of kv_write's row t (-1: skipped); an error for a slot beyond the cache. */
loom_status loom_kv_write_slot(const loom_tensor *slots, const loom_tensor *cache, int64_t t, int64_t *slot);

/* ---------------------------------------------------------- elementwise.c */

loom_status loom_ref_add_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                               loom_tensor *dst);
void loom_ref_add_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                       const void *attrs, loom_cost *c);
loom_status loom_ref_add(const loom_kernel_args *a);

loom_status loom_ref_mul_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                               loom_tensor *dst);
void loom_ref_mul_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                       const void *attrs, loom_cost *c);
loom_status loom_ref_mul(const loom_kernel_args *a);

loom_status loom_ref_silu_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                loom_tensor *dst);
void loom_ref_silu_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                        const void *attrs, loom_cost *c);
loom_status loom_ref_silu(const loom_kernel_args *a);

/* ---------------------------------------------------------- scale.c */

loom_status loom_ref_scale_infer(const loom_tensor *const *src, int n_src, const void *attrs, loom_tensor *dst);
void loom_ref_scale_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs,
                         loom_cost *c);
loom_status loom_ref_scale(const loom_kernel_args *a);
loom_status loom_ref_softcap_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                   loom_tensor *dst);
void loom_ref_softcap_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs,
                           loom_cost *c);
loom_status loom_ref_softcap(const loom_kernel_args *a);

/* ---------------------------------------------------------- norm.c */

loom_status loom_ref_rms_norm_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                    loom_tensor *dst);
void loom_ref_rms_norm_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                            const void *attrs, loom_cost *c);
loom_status loom_ref_rms_norm(const loom_kernel_args *a);

/* ---------------------------------------------------------- softmax.c */

loom_status loom_ref_softmax_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                   loom_tensor *dst);
void loom_ref_softmax_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                           const void *attrs, loom_cost *c);
loom_status loom_ref_softmax(const loom_kernel_args *a);

/* ---------------------------------------------------------- rope.c */

/* RoPE attributes for head dim D: mode, an even n_rot in [2, D] (0 = D), finite
 * theta > 0 and freq_scale >= 0, pos_offset >= 0. Errors name op and the
 * attribute. Shared by the rope op and the fused qkv_rope. */
loom_status loom_rope_attrs_check(const char *op, const loom_rope_attrs *at, int64_t D);

loom_status loom_ref_rope_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                loom_tensor *dst);
void loom_ref_rope_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                        const void *attrs, loom_cost *c);
loom_status loom_ref_rope(const loom_kernel_args *a);

/* ---------------------------------------------------------- attention.c */

/* attention's mask input, or NULL (after k_scale, v_scale when k is i8). */
const loom_tensor *loom_ref_attention_mask(const loom_tensor *const *src, int n_src);
loom_status loom_ref_attention_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                     loom_tensor *dst);
void loom_ref_attention_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                             const void *attrs, loom_cost *c);
/* Skv doubles (the score row of one query). */
size_t loom_ref_attention_scratch(const loom_tensor *const *src, int n_src,
                                  const loom_tensor *dst, const void *attrs);
loom_status loom_ref_attention(const loom_kernel_args *a);

/* ---------------------------------------------------------- moe.c */

/* Row functions shared with the fused MoE ops (src/fused/moe.c). */
/* ids[0..k) = the k largest of x[0..E), largest first, ties to the lower index. */
void loom_moe_top_k_row(const float *x, int64_t E, int64_t k, int32_t *ids);
/* w[j] = p[ids[j]], divided by their sum (in f64) when renorm. */
void loom_moe_weights_row(const float *p, const int32_t *ids, int64_t k, int renorm, float *w);
/* y[d] = (res[d] +) sum_j w[j] * rows[j][d], summed in f64 in rank order j = 0, 1, ..;
 * res NULL: the sum alone (moe_sum's rows, and moe_finalize_routing's scattered ones). */
void loom_moe_sum_row(const float *const *rows, const float *w, int64_t k, int64_t D, const float *res, float *y);
#define LOOM_REF_DECL(op)                                                                                 \
    loom_status loom_ref_##op##_infer(const loom_tensor *const *src, int n_src, const void *attrs,       \
                                      loom_tensor *dst);                                                 \
    void loom_ref_##op##_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,           \
                              const void *attrs, loom_cost *c);                                          \
    loom_status loom_ref_##op(const loom_kernel_args *a);
LOOM_REF_DECL(top_k)
LOOM_REF_DECL(moe_weights)
LOOM_REF_DECL(matmul_id)
LOOM_REF_DECL(moe_sum)
#undef LOOM_REF_DECL

#endif
