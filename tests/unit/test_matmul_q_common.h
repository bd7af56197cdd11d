/*
 * Harness shared by test_matmul_gemv.c and test_matmul_q.c: a matmul problem
 * with any weight dtype, strided x/W/y, y pre-filled with a NaN sentinel and
 * guarded (including row gaps), epilogues, runs at a level as nth threads
 * would (each ith in turn, own scratch), and the pass rules.
 *
 * Pass rule against the reference (loom_matmul_run at LOOM_ISA_REF: weights
 * dequantized to f32, exact f32 x, f64 sums, reference epilogue):
 *   float weights: |y - ref| <= tol * max(1, |ref|), tol = 2^-11 (f32),
 *     2^-8 (f16), 2^-7 (bf16; 2^-6 when K >= 2048), as in DESIGN.md.
 *   quantized weights: the kernels quantize x per block of 32 to q8 (d =
 *     max|x| / 127, |x - d q| <= d / 2, checked in test_quant.c), which moves
 *     the product by at most Q = sum over blocks b of d_b / 2 * sum_{k in b}
 *     |w_k| (w the dequantized weights). The epilogue scales that by at most
 *     E = |scale| * L_act * max|mul| * L_fn (Lipschitz bounds: silu 1.1,
 *     gelu and gelu_tanh 1.13, relu 1; |mul| < 1 here; the test callback 2):
 *       |y - ref| <= E * Q * (1 + 2^-10) + 2^-11 * max(1, |ref|),
 *     the last term covering f32 rounding of the sums. Q is not loose:
 *     test_matmul_q.c builds inputs whose error is 31/32 of it.
 *   quantized weights with full activations (act = LOOM_ACT_PREC_FULL): x is
 *     not quantized, so the f32 rule, 2^-11 * max(1, |ref|).
 */
#ifndef LOOM_TEST_MATMUL_Q_COMMON_H
#define LOOM_TEST_MATMUL_Q_COMMON_H

#include "test_ops_common.h"

#include <stdint.h>

#include "base/cpu.h"
#include "ops/matmul/matmul.h"
#include "ops/quant.h"


#define GUARD 64
static const uint32_t SENTINEL = 0x7fc0beefu; /* a quiet NaN with a payload */

static loom_isa levels[LOOM_ISA_COUNT];
static int n_levels;

static void find_levels(void) {
    n_levels = 0;
    levels[n_levels++] = LOOM_ISA_GENERIC;
    if (loom_cpu_best_isa() >= LOOM_ISA_AVX2) levels[n_levels++] = LOOM_ISA_AVX2;
    if (loom_cpu_best_isa() >= LOOM_ISA_AVX512) levels[n_levels++] = LOOM_ISA_AVX512;
}

static float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

typedef struct mq {
    int64_t M, N, K, ldx, ldw, ldy;
    loom_dtype wt;
    loom_act_precision act; /* LOOM_ACT_PREC_FULL: f32 x, the f32 tolerance */
    float *x;            /* [M, ldx] */
    void *w;             /* N rows of ldw elements of wt */
    float *wf;           /* W as f32, [N, K] */
    float *ybuf, *y;     /* GUARD + M * ldy + GUARD */
    float *ref;          /* [M, N] */
    float *mul, *res, *bias;
    float *old;          /* [M, N]: y's contents before the call when the epilogue reads y */
    loom_epilogue ep;
    int has_ep;
    int invariant;       /* loom_matmul_args.invariant: the GEMM below LOOM_GEMM_MIN_M rows too */
    double amp;          /* E: how much the epilogue can amplify a product error */
} mq;

/* W values: random in [-1, 1) (through the format), row stride K + pad
 * (rounded to whole blocks for block formats). */
static void mq_init(mq *p, int64_t M, int64_t N, int64_t K, int pad, loom_dtype wt, loom_rng *rng) {
    memset(p, 0, sizeof *p);
    p->M = M, p->N = N, p->K = K, p->wt = wt;
    p->ldx = K + pad, p->ldy = N + pad;
    p->ldw = loom_dtype_is_quantized(wt) ? K + (pad ? 32 : 0) : K + pad;
    p->x = falloc(M * p->ldx);
    fill_rand(p->x, M * p->ldx, rng);
    p->wf = falloc(N * K);
    size_t rb = loom_dtype_row_bytes(wt, p->ldw);
    p->w = calloc((size_t)N * rb + 1, 1);
    float *row = falloc(p->ldw);
    for (int64_t n = 0; n < N; n++) {
        char *dst = (char *)p->w + (size_t)n * rb;
        fill_rand(row, p->ldw, rng);
        if (wt == LOOM_F32) memcpy(dst, row, rb);
        else if (wt == LOOM_F16)
            for (int64_t k = 0; k < p->ldw; k++) ((uint16_t *)dst)[k] = loom_f32_to_f16(row[k]);
        else if (wt == LOOM_BF16)
            for (int64_t k = 0; k < p->ldw; k++) ((uint16_t *)dst)[k] = loom_f32_to_bf16(row[k]);
        else loom_quantize_row(wt, row, dst, p->ldw);
        loom_row_to_f32(wt, dst, p->wf + n * K, K);
    }
    free(row);
    p->ybuf = falloc(2 * GUARD + M * p->ldy);
    p->y = p->ybuf + GUARD;
    p->ref = falloc(M * N);
    p->mul = falloc(M * N), p->res = falloc(M * N), p->bias = falloc(N);
    p->old = falloc(M * N);
    fill_rand(p->mul, M * N, rng), fill_rand(p->res, M * N, rng), fill_rand(p->bias, N, rng);
    fill_rand(p->old, M * N, rng);
    p->amp = 1.0;
}

static void mq_free(mq *p) {
    free(p->x), free(p->w), free(p->wf), free(p->ybuf), free(p->ref);
    free(p->mul), free(p->res), free(p->bias), free(p->old);
}

/* ------------------------------------------------------------ epilogues */

/* EP_MUL_ALIAS / EP_RES_ALIAS: mul / residual is y itself (SwiGLU's up
 * product or the residual stream computed in place), holding p->old. */
enum { EP_SCALE = 1, EP_BIAS = 2, EP_MUL = 4, EP_RES = 8, EP_FN = 16, EP_ALL = 31,
       EP_MUL_ALIAS = 32, EP_RES_ALIAS = 64 };

/* An affine step that depends on the position: catches wrong m0/n0. */
static void ep_callback(float *tile, int64_t ld, int64_t m0, int64_t n0, int64_t mr, int64_t nr,
                        void *user) {
    (void)user;
    for (int64_t r = 0; r < mr; r++)
        for (int64_t c = 0; c < nr; c++)
            tile[r * ld + c] = 2.0f * tile[r * ld + c] + 0.01f * (float)((m0 + r) % 7) -
                               0.02f * (float)((n0 + c) % 5);
}

static void mq_set_ep(mq *p, int flags, loom_act act) {
    static const double lip[LOOM_ACT_COUNT] = {1.0, 1.1, 1.13, 1.13, 1.0};
    memset(&p->ep, 0, sizeof p->ep);
    p->has_ep = flags != 0 || act != LOOM_ACT_NONE;
    p->ep.act = act;
    p->amp = lip[act];
    if (flags & EP_SCALE) p->ep.scale = -1.5f, p->amp *= 1.5;
    if (flags & EP_BIAS) p->ep.bias = p->bias;
    if (flags & EP_MUL) p->ep.mul = p->mul, p->ep.ld_mul = p->N;  /* |mul| < 1 */
    if (flags & EP_RES) p->ep.residual = p->res, p->ep.ld_res = p->N;
    if (flags & EP_FN) p->ep.fn = ep_callback, p->amp *= 2.0;
    if (flags & EP_MUL_ALIAS) p->ep.mul = p->y, p->ep.ld_mul = p->ldy;
    if (flags & EP_RES_ALIAS) p->ep.residual = p->y, p->ep.ld_res = p->ldy;
}

static int mq_reads_y(const mq *p) {
    return p->has_ep && (p->ep.mul == p->y || p->ep.residual == p->y);
}

/* ------------------------------------------------------------ runs */

static loom_matmul_args mq_args(const mq *p, float *y, int64_t ldy) {
    loom_matmul_args a = {.x = p->x, .ldx = p->ldx, .w = p->w, .ldw = p->ldw, .wtype = p->wt,
                          .y = y, .ldy = ldy, .M = p->M, .N = p->N, .K = p->K,
                          .ep = p->has_ep ? &p->ep : NULL, .act = p->act, .invariant = p->invariant};
    return a;
}

static void mq_reference(mq *p) {
    loom_matmul_args a = mq_args(p, p->ref, p->N);
    loom_epilogue e = p->ep;  /* aliased operands read what y held before */
    if (e.mul == p->y) e.mul = p->old, e.ld_mul = p->N;
    if (e.residual == p->y) e.residual = p->old, e.ld_res = p->N;
    if (p->has_ep) a.ep = &e;
    void *s = loom_alloc_aligned(loom_matmul_scratch_size(&a), LOOM_ALIGN);
    CHECK(loom_matmul_run(&a, LOOM_ISA_REF, 0, 1, s) == LOOM_OK);
    loom_free_aligned(s);
}

/* y := sentinel, then every ith of nth in turn with its own scratch (filled
 * with garbage: kernels must not depend on its contents). */
static loom_status mq_run(mq *p, loom_isa isa, int nth) {
    size_t n = (size_t)(2 * GUARD + p->M * p->ldy);
    for (size_t i = 0; i < n; i++) p->ybuf[i] = bits_f(SENTINEL);
    if (mq_reads_y(p))
        for (int64_t m = 0; m < p->M; m++) memcpy(p->y + m * p->ldy, p->old + m * p->N, (size_t)p->N * 4);
    loom_matmul_args a = mq_args(p, p->y, p->ldy);
    size_t bytes = loom_matmul_scratch_size(&a);
    for (int ith = 0; ith < nth; ith++) {
        void *s = loom_alloc_aligned(bytes, LOOM_ALIGN);
        memset(s, 0xA7, bytes);
        loom_status st = loom_matmul_run(&a, isa, ith, nth, s);
        loom_free_aligned(s);
        if (st != LOOM_OK) return st;
    }
    return LOOM_OK;
}

static int mq_guards_intact(const mq *p) {
    for (int i = 0; i < GUARD; i++)
        if (f_bits(p->ybuf[i]) != SENTINEL || f_bits(p->y[p->M * p->ldy + i]) != SENTINEL) return 0;
    for (int64_t m = 0; m < p->M; m++)
        for (int64_t n = p->N; n < p->ldy; n++)
            if (f_bits(p->y[m * p->ldy + n]) != SENTINEL) return 0;
    return 1;
}

static double float_tol(loom_dtype wt, int64_t K) {
    if (wt == LOOM_BF16) return K >= 2048 ? 1.0 / 64 : 1.0 / 128;
    return wt == LOOM_F16 ? 1.0 / 256 : 1.0 / 2048;
}

/* Q for output (m, n): the activation quantization bound of the header. */
static double mq_qbound(const mq *p, int64_t m, int64_t n) {
    double q = 0.0;
    for (int64_t b = 0; b < p->K / 32; b++) {
        const float *xb = p->x + m * p->ldx + 32 * b;
        const float *wb = p->wf + n * p->K + 32 * b;
        float amax = 0.0f;
        double sw = 0.0;
        for (int j = 0; j < 32; j++) {
            amax = fmaxf(amax, fabsf(xb[j]));
            sw += fabs(wb[j]);
        }
        q += (double)(amax / 127.0f) * 0.5 * sw;
    }
    return q;
}

static int max_report = 12;

/* Compares y with ref; returns the largest |y - ref| / allowed seen (<= 1 passes). */
static double mq_compare(const mq *p, const char *what) {
    int quant = loom_dtype_is_quantized(p->wt) && p->act != LOOM_ACT_PREC_FULL;
    double worst = 0.0;
    for (int64_t m = 0; m < p->M; m++)
        for (int64_t n = 0; n < p->N; n++) {
            double o = p->y[m * p->ldy + n], r = p->ref[m * p->N + n];
            double rel = fabs(r) > 1.0 ? fabs(r) : 1.0;
            double allowed = quant ? p->amp * mq_qbound(p, m, n) * (1.0 + 1.0 / 1024) + rel / 2048
                                   : float_tol(loom_dtype_is_quantized(p->wt) ? LOOM_F32 : p->wt, p->K) * rel;
            double e = isnan(o) && isnan(r) ? 0.0 : fabs(o - r) / allowed;
            if (!(e <= 1.0)) {
                if (max_report-- > 0)
                    fprintf(stderr, "%s: M=%lld N=%lld K=%lld %s: y[%lld][%lld] = %.9g, ref %.9g, allowed %.3g\n",
                            what, (long long)p->M, (long long)p->N, (long long)p->K,
                            loom_dtype_name(p->wt), (long long)m, (long long)n, o, r, allowed);
                e = isnan(e) ? 1e30 : e;
            }
            if (e > worst) worst = e;
        }
    return worst;
}

/* One problem at one level: correct within the bound, guards intact, and
 * bit-identical bytes for nth = 2, 3, 5. Returns the worst error ratio. */
static double mq_check(mq *p, loom_isa isa) {
    char what[64];
    snprintf(what, sizeof what, "%s %s%s", loom_isa_name(isa), loom_dtype_name(p->wt),
             p->act == LOOM_ACT_PREC_FULL ? " full" : "");
    loom_status s = mq_run(p, isa, 1);
    CHECK_MSG(s == LOOM_OK, "%s: %s", what, loom_last_error());
    double worst = mq_compare(p, what);
    CHECK_MSG(worst <= 1.0, "%s: M=%lld N=%lld K=%lld: error %.3g of the allowed", what,
              (long long)p->M, (long long)p->N, (long long)p->K, worst);
    CHECK_MSG(mq_guards_intact(p), "%s: M=%lld N=%lld K=%lld: write outside y", what,
              (long long)p->M, (long long)p->N, (long long)p->K);
    size_t bytes = (size_t)(2 * GUARD + p->M * p->ldy) * sizeof(float);
    float *one = malloc(bytes);
    memcpy(one, p->ybuf, bytes);
    static const int nths[] = {2, 3, 5};
    for (int t = 0; t < 3; t++) {
        CHECK(mq_run(p, isa, nths[t]) == LOOM_OK);
        CHECK_MSG(memcmp(one, p->ybuf, bytes) == 0, "%s: M=%lld N=%lld K=%lld: nth=%d differs from nth=1",
                  what, (long long)p->M, (long long)p->N, (long long)p->K, nths[t]);
    }
    free(one);
    return worst;
}

/* A NaN in x row m makes row m NaN and leaves the others exact to the rule,
 * as in the reference. (An Inf in x gives NaN where the reference may give
 * +-Inf on the quantized paths: its block scale is not finite.) */
static void mq_check_nan_row(mq *p, loom_isa isa) {
    int64_t m = p->M / 2;
    p->x[m * p->ldx + p->K / 2] = NAN;
    mq_reference(p);
    CHECK(mq_run(p, isa, 2) == LOOM_OK);
    int ok = 1;
    for (int64_t n = 0; n < p->N; n++) ok &= isnan(p->y[m * p->ldy + n]) && isnan(p->ref[m * p->N + n]);
    CHECK_MSG(ok, "%s %s: NaN in x row %lld must make that row NaN", loom_isa_name(isa),
              loom_dtype_name(p->wt), (long long)m);
    for (int64_t n = 0; n < p->N; n++) p->y[m * p->ldy + n] = p->ref[m * p->N + n];
    CHECK(mq_compare(p, "nan row") <= 1.0);
}

#endif
