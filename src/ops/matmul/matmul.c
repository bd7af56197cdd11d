/* Matmul family entry: argument checks, path choice, reference product and epilogue. */
#include "ops/matmul/internal.h"
#include "ops/matmul/gemm_q_kernels.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "ops/quant.h"
#include "ops/vec/vec.h"

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

/* The path of a below LOOM_GEMM_MIN_M rows: the GEMV, except in
 * batch-invariant runs and for quantized weights with q8 activations at a
 * level whose GEMM reads weights packed once (VNNI). There the GEMM takes two
 * rows and more whatever the packing (it reads W once for up to six rows and
 * beats the GEMV's row groups: SmolLM2 Q4_1 decode of 2 / 4 / 6 sequences,
 * 1.3-1.6x the tokens/s), and one row when W is packed: over the panels it
 * reads what the GEMV reads, as fast (the file's bytes), so a packed model
 * needs its file's copy of the matrix no more (model.c). Unpacked, one row
 * takes the GEMV (laying the panels out per call would cost 3x); its sums are
 * ordered otherwise, so one row differs in the last bits between a packed and
 * an unpacked matrix (LOOM_PACK_WEIGHTS=0, a matrix not packed by default
 * such as a K-quant converted at load, a row range not starting at a panel
 * boundary, a packing failure). packed: a's panels (packed_for) or NULL. */
static int int8_products(const loom_matmul_args *a, loom_isa isa) {
    return loom_dtype_is_quantized(a->wtype) && !loom_matmul_full_act(a) && isa != LOOM_ISA_REF;
}

static int use_gemv(const loom_matmul_args *a, loom_isa isa, const uint8_t *packed) {
    if (a->M >= LOOM_GEMM_MIN_M || a->invariant) return 0;
    if (!int8_products(a, isa) || loom_gemm_q_kset_for(isa)->micro_packed == NULL) return 1;
    return a->M < 2 && !packed;
}

/* The panels of a's weights packed once for its level's GEMM, or NULL (no
 * int8 products, nothing packed). */
static const uint8_t *packed_for(const loom_matmul_args *a, loom_isa isa, int ith) {
    return int8_products(a, isa) ? loom_gemm_q_packed_find(a, loom_gemm_q_kset_for(isa), ith == 0) : NULL;
}

/* ------------------------------------------------------------ RMSNorm of x */

/* The reference kernel's formulas at LOOM_ISA_REF (ops/ref/norm.c), the
 * vector functions' at other levels (ops/vec/vec_ops.c). */
void loom_matmul_norm_inv(loom_isa isa, const float *x, int64_t ldx, int64_t K, float eps, int64_t m0,
                          int64_t m1, double *inv) {
    const loom_vec_fns *f = isa == LOOM_ISA_REF ? NULL : loom_vec_fns_for(isa);
    for (int64_t m = m0; m < m1; m++) {
        const float *r = x + m * ldx;
        double ss = 0.0;
        if (f) ss = f->sumsq(r, K);
        else
            for (int64_t k = 0; k < K; k++) ss += (double)r[k] * (double)r[k];
        inv[m] = 1.0 / sqrt(ss / (double)K + (double)eps);
    }
}

void loom_matmul_norm_for_size(loom_matmul_args *a) {
    static const float gamma_marker;
    static const double inv_marker;
    a->norm_gamma = &gamma_marker, a->norm_inv = &inv_marker;
}

void loom_matmul_norm_row(const loom_matmul_args *a, loom_isa isa, int64_t m, int64_t k0, int64_t n,
                          float *out) {
    const float *x = a->x + m * a->ldx + k0, *g = a->norm_gamma + k0;
    if (isa == LOOM_ISA_REF) {
        for (int64_t k = 0; k < n; k++) out[k] = (float)((double)x[k] * a->norm_inv[m] * (double)g[k]);
        return;
    }
    loom_vec_fns_for(isa)->scale_row(x, g, a->norm_inv[m], out, n);
}

/* Columns [k0, ...) of a quantized x row (k0 a multiple of 32). */
static loom_q8_act q8_cols(loom_q8_act r, int64_t k0) {
    loom_q8_act c = {r.qs + k0, r.d + k0 / 32, r.bias + k0 / 32, r.s + k0 / 32};
    return c;
}

void loom_matmul_quantize_norm_rows(const loom_matmul_args *a, loom_isa isa, int32_t bias_mul, int64_t m0,
                                    int64_t m1, void *dst) {
    size_t rb = loom_q8_act_bytes(a->K);
    _Alignas(64) float stage[512]; /* blocks of 32 quantize on their own: a row goes in pieces */
    for (int64_t m = m0; m < m1; m++) {
        loom_q8_act row = loom_q8_act_view((char *)dst + (size_t)(m - m0) * rb, a->K);
        for (int64_t k0 = 0; k0 < a->K; k0 += 512) {
            int64_t n = a->K - k0 < 512 ? a->K - k0 : 512;
            loom_matmul_norm_row(a, isa, m, k0, n, stage);
            loom_quantize_act(isa, stage, n, bias_mul, q8_cols(row, k0));
        }
    }
}

/* The GEMV reads x whole: with the norm it takes its few rows normalised in
 * the scratch, this many bytes before its own. */
static size_t norm_stage_bytes(const loom_matmul_args *a) {
    if (!a->norm_gamma) return 0;
    return ((size_t)a->M * (size_t)a->K * sizeof(float) + 63) & ~(size_t)63;
}

size_t loom_matmul_scratch_size(const loom_matmul_args *a) {
    /* reference: a W row and an output row (and a normalised x row) */
    int64_t k16 = (a->K + 15) & ~(int64_t)15;
    size_t s = (size_t)(k16 + a->N + (a->norm_gamma ? k16 : 0)) * sizeof(float) + 64;
    /* the GEMM's, also below LOOM_GEMM_MIN_M rows: a batch-invariant run takes it there */
    size_t p = loom_dtype_is_quantized(a->wtype) && !loom_matmul_full_act(a) ? loom_gemm_q_scratch_size(a)
                                                                            : loom_gemm_scratch_size(a);
    /* the GEMV's, after x's few rows normalised when it takes the norm */
    if (a->M < LOOM_GEMM_MIN_M && loom_gemv_scratch_size(a) + norm_stage_bytes(a) > p)
        p = loom_gemv_scratch_size(a) + norm_stage_bytes(a);
    return s > p ? s : p;
}

size_t loom_matmul_xq_bytes(const loom_matmul_args *a) {
    if (!loom_dtype_is_quantized(a->wtype) || loom_matmul_full_act(a)) return 0;
    return (size_t)a->M * loom_q8_act_bytes(a->K);
}

/* The bias_mul pre-quantized x is made with: the GEMM's, whatever path a takes.
 * The GEMVs read it too: the AVX2 and VNNI ones take no bias, and the generic
 * one wants the generic GEMM's (-8 for q4_0, 0 otherwise). So x quantized once
 * serves matmuls over several matrices (a fused QKV or FFN) even where some
 * take the GEMV and others the GEMM (weights packed or not, use_gemv). */
static int32_t xq_bias_mul(const loom_matmul_args *a, loom_isa isa) { return loom_gemm_q_bias_mul(a, isa); }

void loom_matmul_quantize_x(const loom_matmul_args *a, loom_isa isa, int64_t m0, int64_t m1, void *xq) {
    if (loom_matmul_xq_bytes(a) == 0 || isa == LOOM_ISA_REF) return;
    if (a->norm_gamma) {
        loom_matmul_quantize_norm_rows(a, isa, xq_bias_mul(a, isa), m0, m1,
                                       (char *)xq + (size_t)m0 * loom_q8_act_bytes(a->K));
        return;
    }
    loom_gemm_q_quantize_x(a, isa, m0, m1, xq);
}

void *loom_matmul_prepare_x(loom_matmul_args *a, loom_isa isa, const float *gamma, float eps, double *inv,
                            void *xq) {
    a->norm_gamma = gamma, a->norm_inv = gamma ? inv : NULL;
    if (isa != LOOM_ISA_REF && loom_matmul_xq_bytes(a) > 0) {
        if (!gamma) {
            loom_matmul_quantize_x(a, isa, 0, a->M, xq);
            return xq;
        }
        /* eight rows at a time: their 1/rms, then the same rows normalised and
         * quantized while they are in cache, so x comes from memory once */
        for (int64_t r = 0; r < a->M; r += 8) {
            int64_t r1 = r + 8 < a->M ? r + 8 : a->M;
            loom_matmul_norm_inv(isa, a->x, a->ldx, a->K, eps, r, r1, inv);
            loom_matmul_quantize_x(a, isa, r, r1, xq);
        }
        return xq;
    }
    if (gamma) loom_matmul_norm_inv(isa, a->x, a->ldx, a->K, eps, 0, a->M, inv);
    return NULL;
}

void loom_matmul_quantize_x_cols(const loom_matmul_args *a, loom_isa isa, int64_t k0, int64_t n, const float *v,
                                 int64_t ldv, void *xq) {
    const int32_t bias_mul = xq_bias_mul(a, isa);
    const size_t rb = loom_q8_act_bytes(a->K);
    for (int64_t m = 0; m < a->M; m++)
        loom_quantize_act(isa, v + m * ldv, n, bias_mul, q8_cols(loom_q8_act_view((char *)xq + (size_t)m * rb, a->K), k0));
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
    float *xn = saved + a->N; /* the normalised x row (norm_gamma) */
    loom_epilogue ep = {0};
    int alias = 0;
    if (a->ep) {
        ep = *a->ep;
        if (ep.mul == a->y && ep.ld_mul == a->ldy) ep.mul = saved, ep.ld_mul = 0, alias = 1;
        if (ep.residual == a->y && ep.ld_res == a->ldy) ep.residual = saved, ep.ld_res = 0, alias = 1;
    }
    for (int64_t m = m0; m < m1; m++) {
        const float *x = a->x + m * a->ldx;
        if (a->norm_gamma) {
            loom_matmul_norm_row(a, LOOM_ISA_REF, m, 0, a->K, xn);
            x = xn;
        }
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

/* a with rows [0, M) of x normalised into stage (M x K) and no norm. */
static loom_matmul_args staged(const loom_matmul_args *a, loom_isa isa, float *stage) {
    for (int64_t m = 0; m < a->M; m++) loom_matmul_norm_row(a, isa, m, 0, a->K, stage + m * a->K);
    loom_matmul_args c = *a;
    c.x = stage, c.ldx = a->K, c.norm_gamma = NULL, c.norm_inv = NULL;
    return c;
}

loom_status loom_matmul_run(const loom_matmul_args *a, loom_isa isa, int ith, int nth,
                            void *scratch) {
    LOOM_TRY(loom_matmul_check(a));
    LOOM_RETURN_IF(a->norm_gamma && !a->norm_inv, LOOM_ERR_INVALID_ARG, "matmul: norm_gamma without norm_inv");
    if (a->M == 0 || a->N == 0) return LOOM_OK;
    const uint8_t *packed = packed_for(a, isa, ith);
    const int gemv = use_gemv(a, isa, packed);
    if (a->norm_gamma && isa != LOOM_ISA_REF && gemv) {
        if (a->xq && loom_matmul_xq_bytes(a) > 0) { /* x normalised and quantized already: never read */
            loom_matmul_args c = *a;
            c.norm_gamma = NULL, c.norm_inv = NULL;
            return loom_gemv_run(&c, isa, ith, nth, scratch);
        }
        loom_matmul_args c = staged(a, isa, (float *)scratch);
        return loom_gemv_run(&c, isa, ith, nth, (char *)scratch + norm_stage_bytes(a));
    }
    if (isa == LOOM_ISA_REF) {
        int64_t lo, hi;
        loom_matmul_split(a->N, 1, ith, nth, &lo, &hi);
        loom_matmul_ref_block(a, 0, a->M, lo, hi, scratch);
        return LOOM_OK;
    }
    if (gemv) return loom_gemv_run(a, isa, ith, nth, scratch);
    if (loom_dtype_is_quantized(a->wtype) && !loom_matmul_full_act(a))
        return loom_gemm_q_run(a, isa, ith, nth, scratch, packed);
    return loom_gemm_run(a, isa, ith, nth, scratch);
}
