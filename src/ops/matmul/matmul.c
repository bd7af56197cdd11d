/* Matmul family entry: argument checks, path choice, reference product and epilogue. */
#include "ops/matmul/internal.h"

#include <math.h>
#include <string.h>

#include "base/status.h"
#include "ops/quant.h"

static const char *const act_names[] = {
    [LOOM_ACT_NONE] = "none", [LOOM_ACT_SILU] = "silu", [LOOM_ACT_GELU] = "gelu",
    [LOOM_ACT_GELU_TANH] = "gelu_tanh", [LOOM_ACT_RELU] = "relu",
};
_Static_assert(sizeof act_names / sizeof act_names[0] == LOOM_ACT_COUNT, "act names");

const char *loom_act_name(loom_act act) {
    return (unsigned)act < LOOM_ACT_COUNT ? act_names[act] : "unknown";
}

float loom_act_apply(loom_act act, float x) {
    switch (act) {
    case LOOM_ACT_SILU: return x / (1.0f + expf(-x));
    case LOOM_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case LOOM_ACT_GELU_TANH:
        return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case LOOM_ACT_RELU: return x > 0.0f ? x : 0.0f;
    default: return x;
    }
}

void loom_epilogue_apply(const loom_epilogue *e, float *tile, int64_t ld, int64_t m0, int64_t n0,
                         int64_t mr, int64_t nr) {
    if (!e) return;
    float scale = e->scale != 0.0f ? e->scale : 1.0f;
    for (int64_t r = 0; r < mr; r++) {
        float *row = tile + r * ld;
        for (int64_t c = 0; c < nr; c++) {
            float v = row[c] * scale;
            if (e->bias) v += e->bias[n0 + c];
            v = loom_act_apply(e->act, v);
            if (e->mul) v *= e->mul[(m0 + r) * e->ld_mul + n0 + c];
            if (e->residual) v += e->residual[(m0 + r) * e->ld_res + n0 + c];
            row[c] = v;
        }
    }
    if (e->fn) e->fn(tile, ld, m0, n0, mr, nr, e->user);
}

loom_status loom_matmul_check(const loom_matmul_args *a) {
    LOOM_RETURN_IF(!a || !a->x || !a->w || !a->y, LOOM_ERR_INVALID_ARG, "matmul: NULL pointer");
    LOOM_RETURN_IF(a->M < 0 || a->N < 0 || a->K < 1, LOOM_ERR_SHAPE,
                   "matmul: invalid sizes M=%lld N=%lld K=%lld", (long long)a->M, (long long)a->N,
                   (long long)a->K);
    LOOM_RETURN_IF(a->ldx < a->K || a->ldw < a->K || a->ldy < a->N, LOOM_ERR_SHAPE,
                   "matmul: row strides (x %lld, w %lld, y %lld) smaller than K=%lld / N=%lld",
                   (long long)a->ldx, (long long)a->ldw, (long long)a->ldy, (long long)a->K,
                   (long long)a->N);
    switch (a->wtype) {
    case LOOM_F32: case LOOM_F16: case LOOM_BF16: break;
    case LOOM_Q8_0: case LOOM_Q4_0: case LOOM_Q4_1:
        LOOM_RETURN_IF(a->K % LOOM_QBLOCK || a->ldw % LOOM_QBLOCK, LOOM_ERR_SHAPE,
                       "matmul: %s weights need K and the row stride to be multiples of %d (K=%lld)",
                       loom_dtype_name(a->wtype), LOOM_QBLOCK, (long long)a->K);
        break;
    default:
        return loom_set_error(LOOM_ERR_DTYPE, "matmul: weight dtype %s is not supported",
                              loom_dtype_name(a->wtype));
    }
    LOOM_RETURN_IF(a->ep && (unsigned)a->ep->act >= LOOM_ACT_COUNT, LOOM_ERR_INVALID_ARG,
                   "matmul: unknown activation %d", (int)a->ep->act);
    return LOOM_OK;
}

static const char *const prec_names[] = {
    [LOOM_ACT_PREC_DEFAULT] = "default", [LOOM_ACT_PREC_Q8] = "q8", [LOOM_ACT_PREC_FULL] = "full",
};
_Static_assert(sizeof prec_names / sizeof prec_names[0] == LOOM_ACT_PREC_COUNT, "act precision names");

const char *loom_act_precision_name(loom_act_precision p) {
    return (unsigned)p < LOOM_ACT_PREC_COUNT ? prec_names[p] : "unknown";
}

loom_status loom_act_precision_parse(const char *name, loom_act_precision *out) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "act_precision_parse: NULL argument");
    for (int i = LOOM_ACT_PREC_Q8; i < LOOM_ACT_PREC_COUNT; i++)
        if (name && strcmp(name, prec_names[i]) == 0) {
            *out = (loom_act_precision)i;
            return LOOM_OK;
        }
    return loom_set_error(LOOM_ERR_INVALID_ARG, "unknown activation precision '%s' (expected q8 or full)",
                          name ? name : "(null)");
}

static int use_gemv(const loom_matmul_args *a) { return a->M < LOOM_GEMM_MIN_M && !a->invariant; }

size_t loom_matmul_scratch_size(const loom_matmul_args *a) {
    /* reference: a W row and an output row */
    size_t s = (size_t)(((a->K + 15) & ~(int64_t)15) + a->N) * sizeof(float) + 64;
    /* the GEMM's, also below LOOM_GEMM_MIN_M rows: a batch-invariant run takes it there */
    size_t p = loom_dtype_is_quantized(a->wtype) && !loom_matmul_full_act(a) ? loom_gemm_q_scratch_size(a)
                                                                            : loom_gemm_scratch_size(a);
    if (a->M < LOOM_GEMM_MIN_M && loom_gemv_scratch_size(a) > p) p = loom_gemv_scratch_size(a);
    return s > p ? s : p;
}

size_t loom_matmul_xq_bytes(const loom_matmul_args *a) {
    if (!loom_dtype_is_quantized(a->wtype) || loom_matmul_full_act(a)) return 0;
    return (size_t)a->M * loom_q8_act_bytes(a->K);
}

void loom_matmul_quantize_x(const loom_matmul_args *a, loom_isa isa, int64_t m0, int64_t m1, void *xq) {
    if (loom_matmul_xq_bytes(a) == 0 || isa == LOOM_ISA_REF) return;
    if (use_gemv(a)) loom_gemv_quantize_x(a, isa, m0, m1, xq);
    else loom_gemm_q_quantize_x(a, isa, m0, m1, xq);
}

void loom_matmul_split(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t units = (n + align - 1) / align;
    int64_t u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    *lo = u0 * align < n ? u0 * align : n;
    *hi = u1 * align < n ? u1 * align : n;
}

/* One output row at a time: the products go to y, then the epilogue runs on
 * the row in place (the callback sees tiles inside y, matmul.h). When mul or
 * residual alias y, the row's old values are saved first and the epilogue
 * reads them from there. W rows are converted again for every output row;
 * this path is the reference, not the fast one. Scratch: a W row, then a
 * saved y row of N floats. */
void loom_matmul_ref_block(const loom_matmul_args *a, int64_t m0, int64_t m1, int64_t n0,
                           int64_t n1, float *scratch) {
    if (m1 <= m0 || n1 <= n0) return;
    size_t wrow = loom_dtype_row_bytes(a->wtype, a->ldw);
    float *wbuf = scratch, *saved = scratch + ((a->K + 15) & ~(int64_t)15);
    loom_epilogue ep = {0};
    int alias = 0;
    if (a->ep) {
        ep = *a->ep;
        if (ep.mul == a->y && ep.ld_mul == a->ldy) ep.mul = saved, ep.ld_mul = 0, alias = 1;
        if (ep.residual == a->y && ep.ld_res == a->ldy) ep.residual = saved, ep.ld_res = 0, alias = 1;
    }
    for (int64_t m = m0; m < m1; m++) {
        const float *x = a->x + m * a->ldx;
        float *y = a->y + m * a->ldy;
        if (alias) memcpy(saved + n0, y + n0, (size_t)(n1 - n0) * sizeof(float));
        for (int64_t n = n0; n < n1; n++) {
            loom_row_to_f32(a->wtype, (const char *)a->w + (size_t)n * wrow, wbuf, a->K);
            double acc = 0.0;
            for (int64_t k = 0; k < a->K; k++) acc += (double)x[k] * (double)wbuf[k];
            y[n] = (float)acc;
        }
        if (a->ep) loom_epilogue_apply(&ep, y + n0, a->ldy, m, n0, 1, n1 - n0);
    }
}

loom_status loom_matmul_run(const loom_matmul_args *a, loom_isa isa, int ith, int nth,
                            void *scratch) {
    LOOM_TRY(loom_matmul_check(a));
    if (a->M == 0 || a->N == 0) return LOOM_OK;
    if (isa == LOOM_ISA_REF) {
        int64_t lo, hi;
        loom_matmul_split(a->N, 1, ith, nth, &lo, &hi);
        loom_matmul_ref_block(a, 0, a->M, lo, hi, scratch);
        return LOOM_OK;
    }
    if (use_gemv(a)) return loom_gemv_run(a, isa, ith, nth, scratch);
    if (loom_dtype_is_quantized(a->wtype) && !loom_matmul_full_act(a))
        return loom_gemm_q_run(a, isa, ith, nth, scratch);
    return loom_gemm_run(a, isa, ith, nth, scratch);
}
