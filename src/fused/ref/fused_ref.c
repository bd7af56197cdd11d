#include "fused/ref/fused_ref.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

/* A contiguous f32 scratch tensor [rows, cols]. */
static loom_status scratch2d(loom_tensor *t, int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    LOOM_TRY(loom_tensor_init(t, LOOM_F32, 2, shape, NULL));
    t->data = malloc((size_t)(rows * cols) * sizeof(float) + 1);
    LOOM_RETURN_IF(!t->data, LOOM_ERR_NOMEM, "reference: out of memory");
    return LOOM_OK;
}

static loom_status run2(loom_op op, const loom_tensor *a, const loom_tensor *b, const void *attrs,
                        loom_tensor *y) {
    const loom_tensor *src[2] = {a, b};
    return loom_op_run(op, src, b ? 2 : 1, attrs, y, LOOM_ISA_REF);
}

loom_status loom_add_rms_norm_ref(const loom_tensor *x, const loom_tensor *residual,
                                  const loom_tensor *gamma, float eps, loom_tensor *y,
                                  loom_tensor *r_out) {
    loom_rms_norm_attrs at = {eps};
    LOOM_TRY(run2(LOOM_OP_ADD, x, residual, NULL, r_out));
    return run2(LOOM_OP_RMS_NORM, r_out, gamma, &at, y);
}

/* act(x) elementwise; silu through the primitive op, the others by formula. */
static loom_status apply_act(loom_act act, const loom_tensor *x, loom_tensor *y) {
    if (act == LOOM_ACT_SILU) return run2(LOOM_OP_SILU, x, NULL, NULL, y);
    for (int64_t m = 0; m < x->shape[0]; m++)
        for (int64_t j = 0; j < x->shape[1]; j++)
            ((float *)y->data)[m * y->stride[0] + j] =
                loom_act_apply(act, ((const float *)x->data)[m * x->stride[0] + j]);
    return LOOM_OK;
}

loom_status loom_swiglu_ref(const loom_tensor *x, loom_act act, loom_tensor *y) {
    int64_t M = x->shape[0], H = x->shape[1] / 2;
    loom_tensor a = *x, b = *x, t;
    a.shape[1] = H;
    b.shape[1] = H;
    b.data = (float *)x->data + H;
    LOOM_TRY(scratch2d(&t, M, H));
    loom_status s = apply_act(act, &a, &t);
    if (s == LOOM_OK) s = run2(LOOM_OP_MUL, &t, &b, NULL, y);
    free(t.data);
    return s;
}

loom_status loom_ffn_ref(const loom_tensor *x, const loom_tensor *w_gate, const loom_tensor *w_up,
                         const loom_tensor *w_down, const loom_tensor *residual,
                         const loom_ffn_params *p, loom_tensor *y) {
    int64_t M = x->shape[0], H = w_down->shape[1];
    loom_tensor wg = *w_gate, wu;
    if (w_up) {
        wu = *w_up;
    } else {  /* merged [2H, D]: gate rows, then up rows */
        wg.shape[0] = H;
        wu = wg;
        wu.data = (char *)w_gate->data + loom_dtype_row_bytes(w_gate->dtype, w_gate->stride[0]) * (size_t)H;
    }
    loom_tensor g, u, h, d;
    memset(&g, 0, sizeof g);
    u = h = d = g;
    LOOM_TRY(scratch2d(&g, M, H));
    loom_status s = scratch2d(&u, M, H);
    if (s == LOOM_OK) s = scratch2d(&h, M, H);
    if (s == LOOM_OK) s = scratch2d(&d, M, w_down->shape[0]);
    if (s == LOOM_OK) s = run2(LOOM_OP_MATMUL, x, &wg, NULL, &g);
    if (s == LOOM_OK) s = run2(LOOM_OP_MATMUL, x, &wu, NULL, &u);
    if (s == LOOM_OK) {
        if (p && p->custom_act) {
            for (int64_t i = 0; i < M * H; i++)
                ((float *)h.data)[i] = p->custom_act(((float *)g.data)[i], p->custom_user);
        } else {
            s = apply_act(p ? p->act : LOOM_ACT_SILU, &g, &h);
        }
    }
    if (s == LOOM_OK) s = run2(LOOM_OP_MUL, &h, &u, NULL, &g);
    if (s == LOOM_OK) s = run2(LOOM_OP_MATMUL, &g, w_down, NULL, residual ? &d : y);
    if (s == LOOM_OK && residual) s = run2(LOOM_OP_ADD, &d, residual, NULL, y);
    free(g.data);
    free(u.data);
    free(h.data);
    free(d.data);
    return s;
}
