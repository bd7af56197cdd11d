/* The op registry: one table, one entry per op, and the single-op runner. */
#include "ops/ops.h"

#include "base/alloc.h"
#include "base/status.h"
#include "ops/ref/ref.h"
#include "ops/ref/ref_encoder.h"
#include "ops/vec/vec_encoder.h"
#include "ops/vec/vec_scale.h"
#include "ops/register.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define REF(op) .infer = loom_ref_##op##_infer, .cost = loom_ref_##op##_cost, .ref = loom_ref_##op

/* Reference entries; optimised kernels are added once at first use by the
 * register functions of each kernel family (BLIS-style: load the reference
 * set, then override what a family has optimised). */
static loom_op_info op_table[] = {
    [LOOM_OP_MATMUL] = {.name = "matmul", .n_src_min = 2, .n_src_max = 2, REF(matmul)},
    [LOOM_OP_GET_ROWS] = {.name = "get_rows", .n_src_min = 2, .n_src_max = 2, REF(get_rows)},
    [LOOM_OP_RMS_NORM] = {.name = "rms_norm", .n_src_min = 1, .n_src_max = 2,
                          .attr_size = sizeof(loom_rms_norm_attrs), REF(rms_norm)},
    [LOOM_OP_ADD] = {.name = "add", .n_src_min = 2, .n_src_max = 2, REF(add)},
    [LOOM_OP_MUL] = {.name = "mul", .n_src_min = 2, .n_src_max = 2, REF(mul)},
    [LOOM_OP_SILU] = {.name = "silu", .n_src_min = 1, .n_src_max = 1, REF(silu)},
    [LOOM_OP_SOFTMAX] = {.name = "softmax", .n_src_min = 1, .n_src_max = 2,
                         .attr_size = sizeof(loom_softmax_attrs), REF(softmax),
                         .pos_attr = LOOM_POS_ATTR(loom_softmax_attrs, pos_offset)},
    [LOOM_OP_ROPE] = {.name = "rope", .n_src_min = 1, .n_src_max = 2,
                      .attr_size = sizeof(loom_rope_attrs), REF(rope),
                      .pos_attr = LOOM_POS_ATTR(loom_rope_attrs, pos_offset)},
    [LOOM_OP_ATTENTION] = {.name = "attention", .n_src_min = 3, .n_src_max = 6,
                           .attr_size = sizeof(loom_attention_attrs),
                           .scratch_size = loom_ref_attention_scratch, REF(attention),
                           .pos_attr = LOOM_POS_ATTR(loom_attention_attrs, q_pos_offset)},
    [LOOM_OP_COPY] = {.name = "copy", .n_src_min = 1, .n_src_max = 1,
                      .attr_size = sizeof(loom_copy_attrs), REF(copy)},
    [LOOM_OP_KV_APPEND] = {.name = "kv_append", .n_src_min = 2, .n_src_max = 3,
                           .attr_size = sizeof(loom_kv_append_attrs), REF(kv_append),
                           .dst_views_src0 = 1, .pos_attr = LOOM_POS_ATTR(loom_kv_append_attrs, pos)},
    [LOOM_OP_LAYER_NORM] = {.name = "layer_norm", .n_src_min = 1, .n_src_max = 3,
                            .attr_size = sizeof(loom_layer_norm_attrs), REF(layer_norm),
                            .opt = {[LOOM_ISA_GENERIC] = loom_layer_norm_generic}},
    [LOOM_OP_GELU] = {.name = "gelu", .n_src_min = 1, .n_src_max = 1,
                      .attr_size = sizeof(loom_gelu_attrs), REF(gelu),
                      .opt = {[LOOM_ISA_GENERIC] = loom_gelu_generic,
#if defined(__x86_64__)
                              [LOOM_ISA_AVX2] = loom_gelu_avx2,
                              [LOOM_ISA_AVX512] = loom_gelu_avx512,
#endif
                      }},
    [LOOM_OP_ADD_BIAS] = {.name = "add_bias", .n_src_min = 2, .n_src_max = 2, REF(add_bias),
                          .opt = {[LOOM_ISA_GENERIC] = loom_add_bias_generic}},
    [LOOM_OP_KV_WRITE] = {.name = "kv_write", .n_src_min = 3, .n_src_max = 4, REF(kv_write), .dst_views_src0 = 1},
    [LOOM_OP_SCALE] = {.name = "scale", .n_src_min = 1, .n_src_max = 1, .attr_size = sizeof(loom_scale_attrs),
                       REF(scale)}, /* one f32 product an element: the reference kernel at every level */
    [LOOM_OP_SOFTCAP] = {.name = "softcap", .n_src_min = 1, .n_src_max = 1,
                         .attr_size = sizeof(loom_softcap_attrs), REF(softcap),
                         .opt = {[LOOM_ISA_GENERIC] = loom_softcap_generic}},
    [LOOM_OP_TOP_K] = {.name = "top_k", .n_src_min = 1, .n_src_max = 1, .attr_size = sizeof(loom_top_k_attrs),
                       REF(top_k)},
    [LOOM_OP_MOE_WEIGHTS] = {.name = "moe_weights", .n_src_min = 2, .n_src_max = 2,
                             .attr_size = sizeof(loom_moe_weights_attrs), REF(moe_weights)},
    /* optional loom_matmul_attrs, as matmul's (set by the activation precision pass) */
    [LOOM_OP_MATMUL_ID] = {.name = "matmul_id", .n_src_min = 3, .n_src_max = 3, REF(matmul_id)},
    [LOOM_OP_MOE_SUM] = {.name = "moe_sum", .n_src_min = 2, .n_src_max = 2, REF(moe_sum)},
    /* infer, cost, scratch and kernels come from src/fused (loom_fused_register_ops) */
    [LOOM_OP_FLASH_ATTENTION] = {.name = "flash_attention_score", .n_src_min = 3, .n_src_max = 6,
                                 .attr_size = sizeof(loom_flash_attention_attrs)},
    [LOOM_OP_INCRE_FLASH_ATTENTION] = {.name = "incre_flash_attention", .n_src_min = 3,
                                       .n_src_max = 6,
                                       .attr_size = sizeof(loom_incre_flash_attention_attrs)},
    /* fused graph ops: the rest comes from src/fused (loom_fused_register_ops) */
    [LOOM_OP_QKV_ROPE] = {.name = "qkv_rope", .n_src_min = 4, .n_src_max = 9,
                          .attr_size = sizeof(loom_qkv_rope_attrs),
                          .pos_attr = LOOM_POS_ATTR(loom_qkv_rope_attrs, rope.pos_offset)},
    [LOOM_OP_PAGED_ATTENTION] = {.name = "paged_attention", .n_src_min = 3, .n_src_max = 5,
                                 .attr_size = sizeof(loom_paged_attention_attrs)},
    [LOOM_OP_ADD_RMS_NORM] = {.name = "add_rms_norm", .n_src_min = 3, .n_src_max = 3,
                              .attr_size = sizeof(loom_add_rms_norm_attrs)},
    [LOOM_OP_FFN] = {.name = "ffn", .n_src_min = 4, .n_src_max = 6,
                     .attr_size = sizeof(loom_ffn_attrs)},
    [LOOM_OP_LINEAR] = {.name = "linear", .n_src_min = 2, .n_src_max = 4,
                        .attr_size = sizeof(loom_linear_attrs)},
    [LOOM_OP_MOE_GATING] = {.name = "moe_gating_top_k_softmax", .n_src_min = 1, .n_src_max = 1,
                            .attr_size = sizeof(loom_moe_gating_attrs)},
    [LOOM_OP_ATTENTION_LINEAR] = {.name = "attention_linear", .n_src_min = 4, .n_src_max = 5,
                                  .attr_size = sizeof(loom_attention_linear_attrs)},
    [LOOM_OP_MOE_FFN] = {.name = "moe_ffn", .n_src_min = 6, .n_src_max = 7, .attr_size = sizeof(loom_moe_ffn_attrs)},
    [LOOM_OP_INCRE_ATTENTION_LINEAR] = {.name = "incre_attention_linear", .n_src_min = 4, .n_src_max = 7,
                                        .attr_size = sizeof(loom_incre_attention_linear_attrs)},
    [LOOM_OP_CUSTOM0 + 0] = {.name = "custom0", .n_src_min = 1, .n_src_max = LOOM_MAX_SRC},
    [LOOM_OP_CUSTOM0 + 1] = {.name = "custom1", .n_src_min = 1, .n_src_max = LOOM_MAX_SRC},
    [LOOM_OP_CUSTOM0 + 2] = {.name = "custom2", .n_src_min = 1, .n_src_max = LOOM_MAX_SRC},
    [LOOM_OP_CUSTOM0 + 3] = {.name = "custom3", .n_src_min = 1, .n_src_max = LOOM_MAX_SRC},
    [LOOM_OP_CUSTOM0 + 4] = {.name = "custom4", .n_src_min = 1, .n_src_max = LOOM_MAX_SRC},
    [LOOM_OP_CUSTOM0 + 5] = {.name = "custom5", .n_src_min = 1, .n_src_max = LOOM_MAX_SRC},
    [LOOM_OP_CUSTOM0 + 6] = {.name = "custom6", .n_src_min = 1, .n_src_max = LOOM_MAX_SRC},
    [LOOM_OP_CUSTOM0 + 7] = {.name = "custom7", .n_src_min = 1, .n_src_max = LOOM_MAX_SRC},
};
_Static_assert(sizeof op_table / sizeof op_table[0] == LOOM_OP_COUNT,
               "op_table must have an entry for every loom_op");

static pthread_once_t register_once = PTHREAD_ONCE_INIT;

/* An entry the layers above have not filled in (loom_ops_init not called). */
static loom_status unregistered_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                      loom_tensor *dst) {
    (void)src, (void)n_src, (void)attrs, (void)dst;
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "op not registered (its layer's registration, "
                                                "loom_ops_init, has not run)");
}
static void unregistered_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                              const void *attrs, loom_cost *c) {
    (void)src, (void)n_src, (void)dst, (void)attrs;
    c->flops = c->bytes_read = c->bytes_written = 0.0;
}
static loom_status unregistered_kernel(const loom_kernel_args *a) {
    (void)a;
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "op not registered (loom_ops_init has not run)");
}

/* The primitive families of this layer; the fused layer fills its entries
 * from above (src/graph/ops_init.c). */
static void register_optimised(void) {
    for (int op = 0; op < LOOM_OP_COUNT; op++) {
        if (!op_table[op].infer) op_table[op].infer = unregistered_infer;
        if (!op_table[op].cost) op_table[op].cost = unregistered_cost;
        if (!op_table[op].ref) op_table[op].ref = unregistered_kernel;
    }
    loom_register_matmul_kernels(op_table);
    loom_register_matmul_id_kernels(op_table);
    loom_register_vec_kernels(op_table);
}

loom_op_info *loom_op_table_mutable(void) {
    pthread_once(&register_once, register_optimised);
    return op_table;
}

const loom_op_info *loom_op_get(loom_op op) {
    pthread_once(&register_once, register_optimised);
    return (unsigned)op < LOOM_OP_COUNT ? &op_table[op] : NULL;
}

/* Level of the kernel picked for isa: the highest provided opt level <= isa,
 * or LOOM_ISA_REF for the reference kernel. */
static loom_isa picked_level(const loom_op_info *info, loom_isa isa) {
    if ((int)isa >= LOOM_ISA_COUNT) isa = (loom_isa)(LOOM_ISA_COUNT - 1);
    for (int l = (int)isa; l > LOOM_ISA_REF; l--)
        if (info->opt[l]) return (loom_isa)l;
    return LOOM_ISA_REF;
}

loom_kernel_fn loom_op_kernel(loom_op op, loom_isa isa) {
    const loom_op_info *info = loom_op_get(op);
    if (!info) return NULL;
    loom_isa l = picked_level(info, isa);
    return l == LOOM_ISA_REF ? info->ref : info->opt[l];
}

/* "<op>.<isa>" for every pair, built once so callers get stable strings. */
static char kernel_names[LOOM_OP_COUNT][LOOM_ISA_COUNT][48];
static pthread_once_t kernel_names_once = PTHREAD_ONCE_INIT;

static void build_kernel_names(void) {
    pthread_once(&register_once, register_optimised);
    for (int op = 0; op < LOOM_OP_COUNT; op++)
        for (int l = 0; l < LOOM_ISA_COUNT; l++)
            snprintf(kernel_names[op][l], sizeof kernel_names[op][l], "%s.%s", op_table[op].name,
                     loom_isa_name((loom_isa)l));
}

void loom_op_refresh_kernel_names(loom_op op) {
    pthread_once(&kernel_names_once, build_kernel_names);
    if ((unsigned)op >= LOOM_OP_COUNT) return;
    for (int l = 0; l < LOOM_ISA_COUNT; l++)
        snprintf(kernel_names[op][l], sizeof kernel_names[op][l], "%s.%s", op_table[op].name,
                 loom_isa_name((loom_isa)l));
}

int loom_op_phases(const loom_op_info *info, const loom_tensor *const *src, int n_src, const void *attrs,
                   int nth, int invariant) {
    int p = info->phases ? info->phases(src, n_src, attrs, nth, invariant) : info->n_phases;
    return p > 1 ? p : 1;
}

/* The counter's low 16 bits count arrivals, the bits above count failed
 * shares. The last thread resets it for the node's next launch, which starts
 * after the executor's barrier. */
int loom_kernel_arrive(const loom_kernel_args *a, int *failed) {
    int f = *failed ? 1 : 0;
    if (a->nth <= 1 || !a->arrive) return 1;
    int v = atomic_fetch_add_explicit(a->arrive, 1 + (f << 16), memory_order_acq_rel) + 1 + (f << 16);
    if ((v & 0xffff) != a->nth) return 0;
    *failed = (v >> 16) != 0;
    atomic_store_explicit(a->arrive, 0, memory_order_relaxed);
    return 1;
}

const char *loom_op_kernel_name(loom_op op, loom_isa isa) {
    const loom_op_info *info = loom_op_get(op);
    if (!info) return "unknown";
    pthread_once(&kernel_names_once, build_kernel_names);
    return kernel_names[op][picked_level(info, isa)];
}

/* Checks that the caller's dst has the inferred dtype and shape. */
static loom_status check_dst(const char *name, const loom_tensor *want, const loom_tensor *dst) {
    int ok = dst->dtype == want->dtype && dst->ndim == want->ndim;
    for (int d = 0; ok && d < want->ndim; d++) ok = dst->shape[d] == want->shape[d];
    if (ok) return LOOM_OK;
    char ws[LOOM_REF_SHAPE_BUF], ds[LOOM_REF_SHAPE_BUF] = "[?]";
    if (dst->ndim >= 1 && dst->ndim <= LOOM_MAX_DIMS) loom_ref_shape_str(dst, ds, sizeof ds);
    return loom_set_error(LOOM_ERR_SHAPE, "%s: dst is %s %s: expected %s %s", name,
                          loom_dtype_name(dst->dtype), ds, loom_dtype_name(want->dtype),
                          loom_ref_shape_str(want, ws, sizeof ws));
}

loom_status loom_op_run(loom_op op, const loom_tensor *const *src, int n_src,
                        const void *attrs, loom_tensor *dst, loom_isa isa) {
    const loom_op_info *info = loom_op_get(op);
    LOOM_RETURN_IF(!info, LOOM_ERR_INVALID_ARG, "op_run: unknown op %d", (int)op);
    LOOM_RETURN_IF((unsigned)isa >= LOOM_ISA_COUNT, LOOM_ERR_INVALID_ARG,
                   "%s: unknown isa level %d", info->name, (int)isa);
    LOOM_RETURN_IF(n_src < info->n_src_min || n_src > info->n_src_max, LOOM_ERR_INVALID_ARG,
                   "%s: expected %d..%d inputs, found %d", info->name, info->n_src_min,
                   info->n_src_max, n_src);
    LOOM_RETURN_IF(!dst, LOOM_ERR_INVALID_ARG, "%s: dst is NULL", info->name);
    loom_tensor want;
    memset(&want, 0, sizeof want);
    LOOM_TRY(info->infer(src, n_src, attrs, &want));
    LOOM_TRY(check_dst(info->name, &want, dst));
    for (int i = 0; i < n_src; i++)
        LOOM_RETURN_IF(!src[i]->data && loom_tensor_nelem(src[i]) > 0, LOOM_ERR_INVALID_ARG,
                       "%s: input %d has no data", info->name, i);
    LOOM_RETURN_IF(!dst->data && loom_tensor_nelem(dst) > 0, LOOM_ERR_INVALID_ARG,
                   "%s: dst has no data", info->name);
    /* the kernel writes through dst: it must be the view of input 0 it claims to be */
    LOOM_RETURN_IF(info->dst_views_src0 && dst->data != src[0]->data, LOOM_ERR_INVALID_ARG,
                   "%s: dst must be a view of input 0 (same data pointer)", info->name);

    size_t scratch_bytes = info->scratch_size ? info->scratch_size(src, n_src, dst, attrs) : 0;
    void *scratch = NULL;
    if (scratch_bytes) {
        scratch = loom_alloc_aligned(scratch_bytes, LOOM_ALIGN);
        LOOM_RETURN_IF(!scratch, LOOM_ERR_NOMEM, "%s: cannot allocate %zu bytes of scratch",
                       info->name, scratch_bytes);
    }
    size_t shared_bytes = info->shared_size ? info->shared_size(src, n_src, dst, attrs) : 0;
    void *shared = shared_bytes ? loom_alloc_aligned(shared_bytes, LOOM_ALIGN) : NULL;
    if (shared_bytes && !shared) {
        loom_free_aligned(scratch);
        return loom_set_error(LOOM_ERR_NOMEM, "%s: cannot allocate %zu shared bytes", info->name, shared_bytes);
    }
    loom_kernel_args a = {.n_src = n_src, .dst = dst, .attrs = attrs, .ith = 0, .nth = 1,
                          .scratch = scratch, .shared = shared, .scratch_bytes = scratch_bytes,
                          .shared_bytes = shared_bytes};
    for (int i = 0; i < n_src; i++) a.src[i] = src[i];
    loom_kernel_fn fn = loom_op_kernel(op, isa);
    loom_status s = LOOM_OK;
    int phases = loom_op_phases(info, src, n_src, attrs, 1, 0);
    for (int ph = 0; ph < phases && s == LOOM_OK; ph++) {
        a.phase = ph;
        s = fn(&a);
    }
    loom_free_aligned(scratch);
    loom_free_aligned(shared);
    return s;
}
