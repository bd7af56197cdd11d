/* Registration of the fused graph ops and the empty custom slots, and the
 * sub-GEMM helper the graph ops share. */
#include "fused/fused_graph_ops.h"
#include "fused/fused_internal.h"

#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "ops/matmul/matmul.h"
#include "ops/ref/ref.h"

#define SLOT_INFER(i)                                                                              \
    static loom_status slot_infer##i(const loom_tensor *const *src, int n_src, const void *attrs,   \
                                     loom_tensor *dst) {                                          \
        return loom_set_error(LOOM_ERR_UNSUPPORTED, "custom%d: no fused op is registered in this " \
                              "slot", i);                                                         \
    }
SLOT_INFER(0) SLOT_INFER(1) SLOT_INFER(2) SLOT_INFER(3)
SLOT_INFER(4) SLOT_INFER(5) SLOT_INFER(6) SLOT_INFER(7)
static loom_status (*const slot_infer[8])(const loom_tensor *const *, int, const void *, loom_tensor *) = {
    slot_infer0, slot_infer1, slot_infer2, slot_infer3, slot_infer4, slot_infer5, slot_infer6, slot_infer7};

static void empty_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                       const void *attrs, loom_cost *c) {
    c->flops = c->bytes_read = c->bytes_written = 0.0;
}

static loom_status empty_kernel(const loom_kernel_args *a) {
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "custom op slot: no fused op is registered here");
}

void loom_register_custom_slot(loom_op_info *e, int slot) {
    e->infer = slot_infer[slot & 7], e->cost = empty_cost, e->ref = empty_kernel;
    for (int l = 0; l < LOOM_ISA_COUNT; l++) e->opt[l] = NULL;
    e->scratch_size = NULL;
    e->n_phases = 0;
    e->decomposition = NULL;
}

void loom_fused_register_ops(loom_op_info *table) {
    loom_register_attention_kernels(table);
    loom_register_attention_primitive_kernels(table);
    loom_register_qkv_rope_op(&table[LOOM_OP_QKV_ROPE]);
    loom_register_add_rms_norm_op(&table[LOOM_OP_ADD_RMS_NORM]);
    loom_register_paged_attention_op(&table[LOOM_OP_PAGED_ATTENTION]);
    loom_register_ffn_op(&table[LOOM_OP_FFN]);
    loom_register_linear_op(&table[LOOM_OP_LINEAR]);
    loom_register_attention_linear_op(&table[LOOM_OP_ATTENTION_LINEAR]);
    loom_register_incre_attention_linear_op(&table[LOOM_OP_INCRE_ATTENTION_LINEAR]);
    loom_register_moe_gating_op(&table[LOOM_OP_MOE_GATING]);
    loom_register_moe_ffn_op(&table[LOOM_OP_MOE_FFN]);
    for (int op = LOOM_OP_CUSTOM0; op <= LOOM_OP_CUSTOM_LAST; op++)
        loom_register_custom_slot(&table[op], op - LOOM_OP_CUSTOM0);
}

loom_matmul_args loom_fused_block_gemm(const loom_tensor *x, const loom_tensor *w, int64_t n0, int64_t nn,
                                       float *y, int64_t ldy, int32_t act) {
    size_t row = loom_dtype_row_bytes(w->dtype, w->stride[0]);
    loom_matmul_args g = {.x = x->data, .ldx = x->stride[0],
                          .w = w->data ? (const char *)w->data + row * (size_t)n0 : NULL,
                          .ldw = w->stride[0], .wtype = w->dtype, .y = y, .ldy = ldy,
                          .M = x->shape[0], .N = nn, .K = x->shape[1], .act = (loom_act_precision)act};
    return g;
}

loom_matmul_args loom_fused_slice_gemm(const loom_tensor *w, int64_t M, const loom_fused_slice *s, float *y,
                                       int32_t act) {
    loom_matmul_args d = {.x = s->x, .ldx = s->ldx,
                          .w = w->data ? (const char *)w->data + loom_dtype_row_bytes(w->dtype, s->n0) : NULL,
                          .ldw = w->stride[0], .wtype = w->dtype, .y = y, .ldy = w->shape[0], .M = M,
                          .N = w->shape[0], .K = s->nb, .act = (loom_act_precision)act};
    return d;
}

size_t loom_fused_slice_dq_bytes(const loom_tensor *w, int64_t M, int64_t nb, int32_t act) {
    loom_fused_slice s = {NULL, nb, 0, nb};
    loom_matmul_args d = loom_fused_slice_gemm(w, M, &s, NULL, act);
    return loom_align64(loom_matmul_xq_bytes(&d));
}

loom_status loom_fused_slices_project(loom_isa isa, const loom_tensor *w, int64_t M, int32_t act, int invariant,
                                      const loom_fused_slice *sl, int64_t n, float *part, char *dq, size_t dq_step,
                                      void *scratch) {
    const int64_t N = w->shape[0];
    int dq_on = 0; /* slice i's quantized x at dq + i * dq_step */
    for (int64_t i = 0; i < n && dq_step; i++) {
        loom_matmul_args d = loom_fused_slice_gemm(w, M, &sl[i], NULL, act);
        d.invariant = invariant;
        dq_on = loom_matmul_prepare_x(&d, isa, NULL, 0.0f, NULL, dq + (size_t)i * dq_step) != NULL;
    }
    loom_status st = LOOM_OK;
    if (n > 1 && !dq_on && n <= LOOM_FFN_ONE_PASS_MAX_SLICES) {
        /* float W: every row's slices in turn, in one sweep (loom_gemv_slices) */
        loom_matmul_args d[LOOM_FFN_ONE_PASS_MAX_SLICES];
        for (int64_t i = 0; i < n; i++) {
            d[i] = loom_fused_slice_gemm(w, M, &sl[i], part + i * M * N, act);
            d[i].invariant = invariant;
        }
        int done = 0;
        LOOM_TRY(loom_gemv_slices(d, (int)n, isa, &done));
        if (done) return LOOM_OK;
    }
    /* one slice: one call over every row (nothing to take in turn) */
    const int64_t rows = n > 1 ? LOOM_FUSED_SLICE_ROWS : N;
    for (int64_t r0 = 0; r0 < N && st == LOOM_OK; r0 += rows)
        for (int64_t i = 0; i < n && st == LOOM_OK; i++) {
            loom_matmul_args d = loom_fused_slice_gemm(w, M, &sl[i], part + i * M * N + r0, act);
            if (d.w) d.w = (const char *)d.w + (size_t)r0 * loom_dtype_row_bytes(w->dtype, d.ldw);
            d.N = N - r0 < rows ? N - r0 : rows;
            d.xq = dq_on ? dq + (size_t)i * dq_step : NULL, d.invariant = invariant;
            st = loom_matmul_run(&d, isa, 0, 1, scratch);
        }
    return st;
}

void loom_fused_sum_partials(loom_isa isa, int64_t M, int64_t N, int64_t ns, const float *part,
                             const loom_tensor *res, loom_tensor *y) {
    const loom_vec_fns *f = loom_vec_fns_for(isa);
    for (int64_t m = 0; m < M; m++) {
        float *ym = (float *)y->data + m * y->stride[0];
        memcpy(ym, part + m * N, (size_t)N * sizeof(float));
        for (int64_t s = 1; s < ns; s++) f->add(ym, part + (s * M + m) * N, ym, N);
        if (res) f->add(ym, (const float *)res->data + m * res->stride[0], ym, N);
    }
}
