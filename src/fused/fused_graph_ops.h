/* The fused ops of the graph (made by the fusion pass): registration helpers
 * shared by src/fused/..._op.c. Each op's kernel takes the isa level and calls
 * the primitive kernels of that level on tiles, so the reference level of a
 * fused op is its reference decomposition. */
#ifndef LOOM_FUSED_GRAPH_OPS_H
#define LOOM_FUSED_GRAPH_OPS_H

#include "ops/ops.h"
#include "ops/register.h"

/* Defines name_ref, name_generic, name_avx2, name_avx512 calling fn(a, level). */
#if defined(__x86_64__)
#define LOOM_FUSED_LEVELS(name, fn)                                                              \
    static loom_status name##_ref(const loom_kernel_args *a) { return fn(a, LOOM_ISA_REF); }     \
    static loom_status name##_generic(const loom_kernel_args *a) { return fn(a, LOOM_ISA_GENERIC); } \
    static loom_status name##_avx2(const loom_kernel_args *a) { return fn(a, LOOM_ISA_AVX2); }   \
    static loom_status name##_avx512(const loom_kernel_args *a) { return fn(a, LOOM_ISA_AVX512); }
#define LOOM_FUSED_SET_LEVELS(e, name)                                                           \
    ((e)->opt[LOOM_ISA_GENERIC] = name##_generic, (e)->opt[LOOM_ISA_AVX2] = name##_avx2,         \
     (e)->opt[LOOM_ISA_AVX512] = name##_avx512)
#else
#define LOOM_FUSED_LEVELS(name, fn)                                                              \
    static loom_status name##_ref(const loom_kernel_args *a) { return fn(a, LOOM_ISA_REF); }     \
    static loom_status name##_generic(const loom_kernel_args *a) { return fn(a, LOOM_ISA_GENERIC); }
#define LOOM_FUSED_SET_LEVELS(e, name) ((e)->opt[LOOM_ISA_GENERIC] = name##_generic)
#endif

/* Fills the fused layer's entries of the op table: the fused attention ops
 * (infer, cost, scratch, reference and optimised kernels), the optimised
 * kernels of the primitive attention op (the FlashAttention driver under the
 * primitive op's semantics), the fused graph ops qkv_rope, add_rms_norm, ffn
 * and the empty custom slots. Called once, by loom_ops_init (src/graph). */
void loom_fused_register_ops(loom_op_info *table);
void loom_register_attention_kernels(loom_op_info *table);
void loom_register_attention_primitive_kernels(loom_op_info *table);
void loom_register_add_rms_norm_op(loom_op_info *e);
void loom_register_paged_attention_op(loom_op_info *e);
void loom_register_qkv_rope_op(loom_op_info *e);
void loom_register_ffn_op(loom_op_info *e);
void loom_register_linear_op(loom_op_info *e);
void loom_register_attention_linear_op(loom_op_info *e);
void loom_register_incre_attention_linear_op(loom_op_info *e);
/* attention_linear's automatic block_rows for heads of hd = H*D values and an
 * L2 of l2_bytes (0: 1 MiB): the most rows whose f32 attention output takes
 * half the L2, 1..256 (the kernel rounds it to its query blocks). */
int64_t loom_attention_linear_rows_for(int64_t hd, int64_t l2_bytes);
void loom_register_moe_gating_op(loom_op_info *e);
void loom_register_moe_ffn_op(loom_op_info *e);
void loom_register_custom_slot(loom_op_info *e, int slot);

/* User activations for the FFN (index = attrs.act - LOOM_FFN_ACT_CUSTOM). */
typedef float (*loom_ffn_act_fn)(float x, void *user);
/* Registers an activation; returns its index >= 0 or -1 when the table is full. */
int loom_ffn_act_register(const char *name, loom_ffn_act_fn fn, void *user);
/* Index of a registered activation by name, or -1. */
int loom_ffn_act_find(const char *name);

#endif
