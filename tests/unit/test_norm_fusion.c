/* The fused graph ops that take an RMSNorm on the fly or a residual add in
 * their GEMM's epilogue, against their decompositions run with the primitive
 * kernels of the same level, bit for bit:
 *   - linear: matmul + add (an output projection and the residual stream),
 *     rms_norm + matmul (the output norm and the LM head), and all three;
 *     matmul + add_bias (+ add, bit for bit; + gelu or silu, within the f32
 *     tolerance: the epilogue's formulas);
 *   - ffn with the norm: rms_norm + gate/up matmuls + silu + mul + down
 *     matmul (+ add);
 *   - the ffn's one pass (a few rows: the hidden dimension in fixed slices,
 *     the partial down projections summed in slice order by the last thread):
 *     within rounding of the same decomposition (its sum is ordered by
 *     slice), and bit-identical for 1-3 threads; batch-invariant runs take
 *     the two phases, bit for bit.
 * Random shapes whose rows and dims are not multiples of any tile (GEMV rows
 * below 8, GEMM rows above; K of several GEMM k blocks), every weight type
 * (f32, f16, bf16, q8_0, q4_0, q4_1; quantized ones with q8 and with full
 * activations), every level, 1-3 threads. Then the ops' argument errors.
 * (qkv_rope with the norm: test_qkv_rope_op.) */
#include <math.h>
#include <string.h>

#include "check.h"
#include "base/alloc.h"
#include "base/cpu.h"
#include "base/rng.h"
#include "graph/ops_init.h"
#include "ops/ops.h"
#include "ops/quant.h"
#include "test_graph_op_common.h"

/* rows x cols values base + U(-1, 1); rows 0: a vector of cols. */
static float *make_f(int64_t rows, int64_t cols, loom_rng *r, float base, loom_tensor *t) {
    int64_t n = (rows > 0 ? rows : 1) * cols;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = base + rnd(r);
    if (rows > 0) loom_tensor_init(t, LOOM_F32, 2, (const int64_t[2]){rows, cols}, x);
    else loom_tensor_init(t, LOOM_F32, 1, (const int64_t[1]){cols}, x);
    return x;
}

typedef struct {
    int64_t M, K, N;          /* linear: x [M, K], w [N, K]; ffn: x [M, K], hidden N */
    loom_dtype wt;
    loom_act_precision act;
    int residual, norm, nth;
} lcase;

static void check_linear(const lcase *c, loom_isa isa, uint64_t seed) {
    loom_rng r;
    loom_rng_init(&r, seed, 9);
    loom_tensor tx, tw, tres, tg, txn, ty[2];
    float *x = make_f(c->M, c->K, &r, 0.3f, &tx), *res = make_f(c->M, c->N, &r, 0.0f, &tres);
    float *g = make_f(0, c->K, &r, 1.0f, &tg), *xn = make_f(c->M, c->K, &r, 0.0f, &txn);
    void *w = make_w(c->wt, c->N, c->K, &r, 0.25f, &tw);
    float *y[2];
    for (int i = 0; i < 2; i++) y[i] = make_f(c->M, c->N, &r, 0.0f, &ty[i]);
    /* decomposition: rms_norm, matmul, add */
    const loom_matmul_attrs ma = {.act_precision = c->act};
    const loom_rms_norm_attrs na = {1e-5f};
    if (c->norm) {
        const loom_tensor *s[2] = {&tx, &tg};
        CHECK(run_op(LOOM_OP_RMS_NORM, isa, s, 2, &na, &txn, c->nth) == LOOM_OK);
    }
    const loom_tensor *sm[2] = {c->norm ? &txn : &tx, &tw};
    CHECK(run_op(LOOM_OP_MATMUL, isa, sm, 2, &ma, &ty[0], c->nth) == LOOM_OK);
    if (c->residual) {
        const loom_tensor *sa[2] = {&tres, &ty[0]};
        CHECK(run_op(LOOM_OP_ADD, isa, sa, 2, NULL, &ty[0], c->nth) == LOOM_OK);
    }
    /* the fused op */
    loom_linear_attrs at = {.act_precision = c->act, .residual = c->residual, .norm = c->norm, .norm_eps = 1e-5f};
    loom_kernel_args a = {.src = {&tx, &tw}, .n_src = 2, .dst = &ty[1], .attrs = &at};
    if (c->residual) a.src[a.n_src++] = &tres;
    if (c->norm) a.src[a.n_src++] = &tg;
    loom_tensor inferred;
    CHECK_MSG(loom_op_get(LOOM_OP_LINEAR)->infer(a.src, a.n_src, &at, &inferred) == LOOM_OK, "%s", loom_last_error());
    CHECK_MSG(run_threads(LOOM_OP_LINEAR, loom_op_kernel(LOOM_OP_LINEAR, isa), a, c->nth) == LOOM_OK, "%s", loom_last_error());
    CHECK_MSG(memcmp(y[0], y[1], sizeof(float) * (size_t)(c->M * c->N)) == 0,
              "linear %s: M=%lld K=%lld N=%lld %s act %s residual %d norm %d nth %d: differs from its decomposition",
              loom_isa_name(isa), (long long)c->M, (long long)c->K, (long long)c->N, loom_dtype_name(c->wt),
              loom_act_precision_name(c->act), c->residual, c->norm, c->nth);
    free(x), free(res), free(g), free(xn), free(w), free(y[0]), free(y[1]);
}

/* linear with a bias (an encoder's projection): matmul + add_bias, then gelu
 * (erf or tanh form: gelu 1, 2) or silu (3), or the residual add: bit for bit
 * against the decomposition without an activation (the epilogue's sums are
 * the add_bias and add kernels'), within 1e-5 of max(1, |y|) with one (the
 * epilogue's formulas against the activation kernels'; tighter than the two
 * GELU forms' largest difference, 4.7e-4, so the wrong form fails). */
static void check_linear_bias(int64_t M, int64_t K, int64_t N, loom_dtype wt, int gelu, int residual, int nth,
                              loom_isa isa, uint64_t seed) {
    loom_rng r;
    loom_rng_init(&r, seed, 13);
    loom_tensor tx, tw, tb, tres, ty[2];
    float *x = make_f(M, K, &r, 0.3f, &tx), *b = make_f(0, N, &r, 0.0f, &tb), *res = make_f(M, N, &r, 0.0f, &tres);
    void *w = make_w(wt, N, K, &r, 0.25f, &tw);
    float *y[2];
    for (int i = 0; i < 2; i++) y[i] = make_f(M, N, &r, 0.0f, &ty[i]);
    const loom_matmul_attrs ma = {.act_precision = LOOM_ACT_PREC_Q8};
    const loom_tensor *sm[2] = {&tx, &tw}, *sb[2] = {&ty[0], &tb}, *sg[1] = {&ty[0]}, *sa[2] = {&tres, &ty[0]};
    CHECK(run_op(LOOM_OP_MATMUL, isa, sm, 2, &ma, &ty[0], nth) == LOOM_OK);
    CHECK(run_op(LOOM_OP_ADD_BIAS, isa, sb, 2, NULL, &ty[0], nth) == LOOM_OK);
    const loom_gelu_attrs ga = {gelu == 2};
    if (gelu == 3) CHECK(run_op(LOOM_OP_SILU, isa, sg, 1, NULL, &ty[0], nth) == LOOM_OK);
    else if (gelu) CHECK(run_op(LOOM_OP_GELU, isa, sg, 1, &ga, &ty[0], nth) == LOOM_OK);
    if (residual) CHECK(run_op(LOOM_OP_ADD, isa, sa, 2, NULL, &ty[0], nth) == LOOM_OK);
    static const loom_act acts[4] = {LOOM_ACT_NONE, LOOM_ACT_GELU, LOOM_ACT_GELU_TANH, LOOM_ACT_SILU};
    loom_linear_attrs at = {.act_precision = LOOM_ACT_PREC_Q8, .residual = residual, .bias = 1, .act = acts[gelu]};
    loom_kernel_args a = {.src = {&tx, &tw, &tb}, .n_src = 3, .dst = &ty[1], .attrs = &at};
    if (residual) a.src[a.n_src++] = &tres;
    loom_tensor inferred;
    CHECK_MSG(loom_op_get(LOOM_OP_LINEAR)->infer(a.src, a.n_src, &at, &inferred) == LOOM_OK, "%s", loom_last_error());
    CHECK_MSG(run_threads(LOOM_OP_LINEAR, loom_op_kernel(LOOM_OP_LINEAR, isa), a, nth) == LOOM_OK, "%s",
              loom_last_error());
    int bad = 0;
    for (int64_t i = 0; i < M * N; i++) {
        float d = fabsf(y[0][i] - y[1][i]), big = fabsf(y[0][i]) > 1.0f ? fabsf(y[0][i]) : 1.0f;
        bad += gelu ? !(d <= 1e-5f * big) : memcmp(&y[0][i], &y[1][i], sizeof(float)) != 0;
    }
    CHECK_MSG(bad == 0, "linear+bias %s: M=%lld K=%lld N=%lld %s act %d residual %d nth %d: %d of %lld values %s",
              loom_isa_name(isa), (long long)M, (long long)K, (long long)N, loom_dtype_name(wt), gelu, residual, nth,
              bad, (long long)(M * N), gelu ? "outside 1e-5" : "differ from the decomposition");
    free(x), free(b), free(res), free(w), free(y[0]), free(y[1]);
}

static void test_linear_bias(void) {
    static const struct { int64_t M, K, N; loom_dtype wt; int gelu, residual, nth; } bc[] = {
        {1, 72, 50, LOOM_F32, 0, 0, 1},     {3, 72, 50, LOOM_F32, 1, 0, 3},   {9, 100, 37, LOOM_F32, 2, 0, 2},
        {45, 384, 70, LOOM_F32, 0, 1, 2},   {45, 384, 70, LOOM_F32, 1, 0, 3}, {21, 90, 33, LOOM_F16, 1, 0, 2},
        {33, 250, 48, LOOM_BF16, 0, 1, 3},  {19, 160, 40, LOOM_Q8_0, 1, 0, 2}, {17, 96, 40, LOOM_Q4_0, 3, 0, 2},
        {2, 96, 40, LOOM_Q4_1, 0, 1, 1},    {30, 1100, 29, LOOM_F32, 3, 1, 2},
    };
    for (int isa = LOOM_ISA_REF; isa <= (int)loom_cpu_best_isa(); isa++)
        for (size_t i = 0; i < sizeof bc / sizeof bc[0]; i++)
            check_linear_bias(bc[i].M, bc[i].K, bc[i].N, bc[i].wt, bc[i].gelu, bc[i].residual, bc[i].nth,
                              (loom_isa)isa, 60 + i);
    /* a bias of the wrong length, an activation out of range */
    loom_tensor tx, tw, tb;
    loom_rng r;
    loom_rng_init(&r, 5, 0);
    float *x = make_f(4, 32, &r, 0.0f, &tx), *b = make_f(0, 7, &r, 0.0f, &tb);
    void *w = make_w(LOOM_F32, 8, 32, &r, 0.25f, &tw);
    loom_linear_attrs at = {.bias = 1};
    const loom_tensor *src[3] = {&tx, &tw, &tb};
    loom_tensor out;
    CHECK(loom_op_get(LOOM_OP_LINEAR)->infer(src, 3, &at, &out) == LOOM_ERR_SHAPE);
    CHECK(loom_op_get(LOOM_OP_LINEAR)->infer(src, 2, &at, &out) == LOOM_ERR_INVALID_ARG);
    at.bias = 0, at.act = LOOM_ACT_COUNT;
    CHECK(loom_op_get(LOOM_OP_LINEAR)->infer(src, 2, &at, &out) == LOOM_ERR_INVALID_ARG);
    free(x), free(b), free(w);
}

/* one_pass 0: the two phases, bit for bit against the decomposition (also
 * with row_block set, for weights the rows pass does not take); else one
 * kernel, within rounding of it, the same bits on 1..3 threads, and with
 * a->invariant the two phases again (bit for bit): one_pass 1, the one pass
 * (one_pass_rows = M) in `slices` slices (0: the default); 2, the rows pass
 * in blocks of at most row_block rows (row_min 0: from 8 rows) and slices of
 * `slices` columns. */
static void check_ffn_mode(const lcase *c, loom_isa isa, uint64_t seed, int one_pass, int32_t block_n,
                           int32_t row_block, int32_t slices) {
    loom_rng r;
    loom_rng_init(&r, seed, 11);
    int64_t M = c->M, D = c->K, H = c->N;
    loom_tensor tx, tg, txn, twg, twu, twd, tgate, tup, tdown, ty;
    float *x = make_f(M, D, &r, 0.3f, &tx), *g = make_f(0, D, &r, 1.0f, &tg), *xn = make_f(M, D, &r, 0.0f, &txn);
    void *wg = make_w(c->wt, H, D, &r, 0.25f, &twg), *wu = make_w(c->wt, H, D, &r, 0.25f, &twu), *wd = make_w(c->wt, D, H, &r, 0.25f, &twd);
    float *gate = make_f(M, H, &r, 0.0f, &tgate), *up = make_f(M, H, &r, 0.0f, &tup);
    float *down = make_f(M, D, &r, 0.0f, &tdown), *y = make_f(M, D, &r, 0.0f, &ty);
    const loom_matmul_attrs ma = {.act_precision = c->act};
    const loom_rms_norm_attrs na = {1e-5f};
    const loom_tensor *sn[2] = {&tx, &tg};
    if (c->norm) CHECK(run_op(LOOM_OP_RMS_NORM, isa, sn, 2, &na, &txn, c->nth) == LOOM_OK);
    else memcpy(xn, x, sizeof(float) * (size_t)(M * D));
    const loom_tensor *s1[2] = {&txn, &twg}, *s2[2] = {&txn, &twu};
    CHECK(run_op(LOOM_OP_MATMUL, isa, s1, 2, &ma, &tgate, c->nth) == LOOM_OK);
    CHECK(run_op(LOOM_OP_MATMUL, isa, s2, 2, &ma, &tup, c->nth) == LOOM_OK);
    const loom_tensor *s3[1] = {&tgate}, *s4[2] = {&tgate, &tup}, *s5[2] = {&tgate, &twd};
    CHECK(run_op(LOOM_OP_SILU, isa, s3, 1, NULL, &tgate, c->nth) == LOOM_OK);
    CHECK(run_op(LOOM_OP_MUL, isa, s4, 2, NULL, &tgate, c->nth) == LOOM_OK);
    CHECK(run_op(LOOM_OP_MATMUL, isa, s5, 2, &ma, &tdown, c->nth) == LOOM_OK);
    if (c->residual) {
        const loom_tensor *s6[2] = {&tx, &tdown};
        CHECK(run_op(LOOM_OP_ADD, isa, s6, 2, NULL, &tdown, c->nth) == LOOM_OK);
    }
    loom_ffn_attrs at = {.act = LOOM_ACT_SILU, .block_n = block_n ? block_n : (int32_t)(H > 40 ? 40 : 0),
                         .act_precision = c->act,
                         .norm = c->norm, .norm_eps = 1e-5f, .one_pass_rows = one_pass == 1 ? (int32_t)M : 0,
                         .row_block = row_block, .row_slice = one_pass == 2 ? slices : 0,
                         .one_pass_slices = one_pass == 1 ? slices : 0};
    loom_tensor th;
    float *h = make_f(M, H, &r, 0.0f, &th);
    loom_kernel_args a = {.src = {&tx, &twg, &twu, &twd}, .n_src = 4, .dst = &ty, .attrs = &at,
                          .dst_extra = {&th}, .n_dst_extra = 1};
    if (c->residual) a.src[a.n_src++] = &tx;
    if (c->norm) a.src[a.n_src++] = &tg;
    const loom_op_info *info = loom_op_get(LOOM_OP_FFN);
    loom_tensor inferred;
    CHECK_MSG(info->infer(a.src, a.n_src, &at, &inferred) == LOOM_OK, "%s", loom_last_error());
    CHECK(loom_op_phases(info, a.src, a.n_src, &at, c->nth, 0) == (one_pass ? 1 : 2));
    CHECK(loom_op_phases(info, a.src, a.n_src, &at, c->nth, 1) == 2);
    CHECK_MSG(run_threads(LOOM_OP_FFN, loom_op_kernel(LOOM_OP_FFN, isa), a, c->nth) == LOOM_OK, "%s", loom_last_error());
    const char *what = one_pass == 2 ? "rows pass" : one_pass ? "one pass" : "two phases";
    if (!one_pass) {
        CHECK_MSG(memcmp(down, y, sizeof(float) * (size_t)(M * D)) == 0,
                  "ffn %s %s: M=%lld D=%lld H=%lld %s act %s residual %d nth %d: differs from its decomposition",
                  what, loom_isa_name(isa), (long long)M, (long long)D, (long long)H, loom_dtype_name(c->wt),
                  loom_act_precision_name(c->act), c->residual, c->nth);
    } else {
        /* the same products, summed by slice: rounding apart (relative to the
         * output's scale), and not bit-equal to the one-dot-product result
         * only by chance */
        float big = 0.0f, err = 0.0f;
        for (int64_t i = 0; i < M * D; i++) {
            float d = y[i] - down[i];
            big = fabsf(down[i]) > big ? fabsf(down[i]) : big;
            err = fabsf(d) > err ? fabsf(d) : err;
        }
        CHECK_MSG(err <= 2e-6f * (big + 1.0f),
                  "ffn %s %s: M=%lld D=%lld H=%lld %s act %s residual %d norm %d nth %d: max error %g (scale %g)",
                  what, loom_isa_name(isa), (long long)M, (long long)D, (long long)H, loom_dtype_name(c->wt),
                  loom_act_precision_name(c->act), c->residual, c->norm, c->nth, (double)err, (double)big);
        /* every thread count gives the same bits */
        float *y2 = malloc(sizeof(float) * (size_t)(M * D));
        loom_tensor ty2 = ty;
        ty2.data = y2;
        a.dst = &ty2;
        for (int nth = 1; nth <= 3; nth++) {
            memset(y2, 0xFF, sizeof(float) * (size_t)(M * D));
            CHECK(run_threads(LOOM_OP_FFN, loom_op_kernel(LOOM_OP_FFN, isa), a, nth) == LOOM_OK);
            CHECK_MSG(memcmp(y, y2, sizeof(float) * (size_t)(M * D)) == 0, "ffn %s %s %s M=%lld H=%lld: %d threads differ",
                      what, loom_isa_name(isa), loom_dtype_name(c->wt), (long long)M, (long long)H, nth);
        }
        /* too little scratch: an error, not an overrun */
        {
            const loom_op_info *fi = loom_op_get(LOOM_OP_FFN);
            size_t sh = fi->shared_size(a.src, a.n_src, a.dst, a.attrs), sb = fi->scratch_size(a.src, a.n_src, a.dst, a.attrs);
            loom_kernel_args b = a;
            b.shared = loom_alloc_aligned(sh + 64, LOOM_ALIGN), b.shared_bytes = sh;
            b.scratch = loom_alloc_aligned(sb + 64, LOOM_ALIGN), b.scratch_bytes = 64;
            b.ith = 0, b.nth = 1, b.phase = 0, b.arrive = NULL;
            CHECK_MSG(loom_op_kernel(LOOM_OP_FFN, isa)(&b) == LOOM_ERR_INVALID_ARG, "ffn %s %s: 64 scratch bytes accepted",
                      what, loom_isa_name(isa));
            loom_free_aligned(b.shared), loom_free_aligned(b.scratch);
        }
        /* batch-invariant: the two phases (the same bits as with one_pass_rows 0), both
         * outputs written afresh */
        a.invariant = 1;
        memset(y2, 0xFF, sizeof(float) * (size_t)(M * D));
        CHECK(run_threads(LOOM_OP_FFN, loom_op_kernel(LOOM_OP_FFN, isa), a, c->nth) == LOOM_OK);
        at.one_pass_rows = 0, at.row_block = 0;
        a.dst = &ty;
        memset(y, 0xFF, sizeof(float) * (size_t)(M * D));
        CHECK(run_threads(LOOM_OP_FFN, loom_op_kernel(LOOM_OP_FFN, isa), a, c->nth) == LOOM_OK);
        CHECK_MSG(memcmp(y, y2, sizeof(float) * (size_t)(M * D)) == 0, "ffn invariant %s %s M=%lld: not the two phases",
                  loom_isa_name(isa), loom_dtype_name(c->wt), (long long)M);
        free(y2);
    }
    free(x), free(g), free(xn), free(wg), free(wu), free(wd), free(gate), free(up), free(down), free(y), free(h);
}

/* The two phases, with or without the norm as the case says; block_n 0: 40
 * columns a block (auto for H <= 40) */
static void check_ffn(const lcase *c, loom_isa isa, uint64_t seed, int32_t block_n) {
    check_ffn_mode(c, isa, seed, 0, block_n, 0, 0);
}

static const lcase cases[] = {
    /* M, K, N, wt, act, residual, norm, nth */
    {1, 72, 50, LOOM_F32, LOOM_ACT_PREC_Q8, 1, 0, 1},
    {3, 72, 50, LOOM_F32, LOOM_ACT_PREC_Q8, 0, 1, 3},
    {7, 100, 37, LOOM_F32, LOOM_ACT_PREC_Q8, 1, 1, 2},
    {9, 100, 37, LOOM_F32, LOOM_ACT_PREC_Q8, 1, 1, 3},
    {45, 1100, 70, LOOM_F32, LOOM_ACT_PREC_Q8, 1, 1, 2},
    {45, 1100, 70, LOOM_F32, LOOM_ACT_PREC_Q8, 0, 1, 1},
    {2, 90, 33, LOOM_F16, LOOM_ACT_PREC_Q8, 1, 1, 2},
    {21, 90, 33, LOOM_F16, LOOM_ACT_PREC_Q8, 1, 1, 3},
    {2, 90, 33, LOOM_BF16, LOOM_ACT_PREC_Q8, 1, 1, 2},
    {33, 250, 48, LOOM_BF16, LOOM_ACT_PREC_Q8, 1, 1, 3},
    {1, 128, 40, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 1, 1, 1},
    {19, 1088, 40, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 1, 1, 3},
    {5, 96, 40, LOOM_Q4_0, LOOM_ACT_PREC_Q8, 0, 1, 2},
    {17, 96, 40, LOOM_Q4_0, LOOM_ACT_PREC_Q8, 1, 1, 2},
    {3, 96, 40, LOOM_Q4_1, LOOM_ACT_PREC_Q8, 1, 1, 3},
    {12, 160, 40, LOOM_Q4_1, LOOM_ACT_PREC_FULL, 1, 1, 3},
    {1, 160, 40, LOOM_Q4_1, LOOM_ACT_PREC_FULL, 1, 1, 1},
    {10, 128, 40, LOOM_Q8_0, LOOM_ACT_PREC_FULL, 0, 1, 2},
};

static void test_linear(void) {
    for (int isa = LOOM_ISA_REF; isa <= (int)loom_cpu_best_isa(); isa++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_linear(&cases[i], (loom_isa)isa, 40 + i);
}

static void test_ffn_norm(void) {
    for (int isa = LOOM_ISA_REF; isa <= (int)loom_cpu_best_isa(); isa++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            lcase c = cases[i];
            if (loom_dtype_is_quantized(c.wt) && c.N % 32) c.N = 64; /* the down projection's K is H */
            check_ffn(&c, (loom_isa)isa, 90 + i, 0);
            /* whole q8 blocks per column block: with q8 activations phase 0 writes h
             * quantized and the down projection reads it so (the same bytes) */
            if (loom_dtype_is_quantized(c.wt)) {
                c.N = 96;
                check_ffn(&c, (loom_isa)isa, 190 + i, 32);
                c.N = 160;
                check_ffn(&c, (loom_isa)isa, 290 + i, 64);
            }
        }
}

/* The ffn's one pass: rows of the GEMV and of the GEMM, hidden sizes cut
 * into several slices with a short last one, D not a multiple of any tile
 * (nor of the down projection's blocks of 16 rows), every weight type, with
 * and without the norm and the residual, in the default 8 slices and in 1 to
 * 4 (fewer, more or as many as the threads). */
static void test_ffn_one_pass(void) {
    static const lcase one[] = {
        /* M, D, H, wt, act, residual, norm, nth */
        {1, 72, 800, LOOM_F32, LOOM_ACT_PREC_Q8, 1, 1, 2},
        {3, 130, 224, LOOM_F32, LOOM_ACT_PREC_Q8, 0, 0, 3},
        {7, 72, 96, LOOM_F16, LOOM_ACT_PREC_Q8, 1, 1, 2},
        {1, 90, 800, LOOM_BF16, LOOM_ACT_PREC_Q8, 1, 0, 3},
        {2, 64, 224, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 1, 1, 2},
        {1, 96, 800, LOOM_Q4_0, LOOM_ACT_PREC_Q8, 1, 1, 3},
        {5, 96, 224, LOOM_Q4_1, LOOM_ACT_PREC_Q8, 0, 1, 2},
        {1, 160, 96, LOOM_Q4_1, LOOM_ACT_PREC_FULL, 1, 1, 3},
        {12, 100, 224, LOOM_F32, LOOM_ACT_PREC_Q8, 1, 1, 2},     /* GEMM rows */
        {9, 128, 800, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 1, 0, 3},
    };
    for (int isa = LOOM_ISA_REF; isa <= (int)loom_cpu_best_isa(); isa++)
        for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
            check_ffn_mode(&one[i], (loom_isa)isa, 300 + i, 1, 0, 0, (int32_t)(i % 5));
}

/* The ffn's rows pass (prefill): blocks of rows that are not multiples of any
 * tile nor of each other (the block count follows the threads, the bits must
 * not), a short last block, float weights, with and without the norm and the
 * residual; slices of 64 or 128 columns, an odd and an even count of them (the
 * running sum alternates between y and scratch), or one (row_slice 0: from L3).
 * Quantized weights keep the two phases, bit for bit. */
static void test_ffn_rows(void) {
    static const struct { lcase c; int32_t row_block, row_slice; } rows[] = {
        /* M, D, H, wt, act, residual, norm, nth; row_block, row_slice */
        {{8, 72, 100, LOOM_F32, LOOM_ACT_PREC_Q8, 1, 1, 2}, 64, 0},
        {{45, 100, 600, LOOM_F32, LOOM_ACT_PREC_Q8, 1, 1, 2}, 256, 64},
        {{45, 100, 300, LOOM_F32, LOOM_ACT_PREC_Q8, 0, 0, 3}, 256, 64},
        {{70, 130, 600, LOOM_F32, LOOM_ACT_PREC_Q8, 1, 0, 3}, 24, 128},
        {{29, 72, 320, LOOM_F16, LOOM_ACT_PREC_Q8, 1, 1, 2}, 256, 64},
        {{33, 90, 608, LOOM_BF16, LOOM_ACT_PREC_Q8, 1, 1, 3}, 10, 128},
        {{26, 96, 200, LOOM_BF16, LOOM_ACT_PREC_Q8, 0, 1, 2}, 9, 0},
    };
    static const lcase quant[] = {
        {21, 64, 608, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 1, 1, 2},
        {40, 96, 320, LOOM_Q4_0, LOOM_ACT_PREC_Q8, 0, 1, 3},
        {26, 160, 320, LOOM_Q4_1, LOOM_ACT_PREC_FULL, 1, 1, 3},
    };
    for (int isa = LOOM_ISA_REF; isa <= (int)loom_cpu_best_isa(); isa++) {
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            check_ffn_mode(&rows[i].c, (loom_isa)isa, 400 + i, 2, 0, rows[i].row_block, rows[i].row_slice);
        for (size_t i = 0; i < sizeof quant / sizeof quant[0]; i++)
            check_ffn_mode(&quant[i], (loom_isa)isa, 450 + i, 0, 32, 16, 64);
    }
}

/* Wrong inputs are errors naming the op and the input, never a crash. */
static void test_errors(void) {
    float buf[64] = {0};
    loom_tensor x, w, res, g, badg, y;
    loom_tensor_init(&x, LOOM_F32, 2, (const int64_t[2]){2, 8}, buf);
    loom_tensor_init(&w, LOOM_F32, 2, (const int64_t[2]){4, 8}, buf);
    loom_tensor_init(&res, LOOM_F32, 2, (const int64_t[2]){2, 4}, buf);
    loom_tensor_init(&g, LOOM_F32, 1, (const int64_t[1]){8}, buf);
    loom_tensor_init(&badg, LOOM_F32, 1, (const int64_t[1]){7}, buf);
    const loom_op_info *info = loom_op_get(LOOM_OP_LINEAR);
    loom_linear_attrs at = {.residual = 1, .norm = 1, .norm_eps = 1e-5f};
    const loom_tensor *ok[4] = {&x, &w, &res, &g}, *bad_g[4] = {&x, &w, &res, &badg}, *bad_r[4] = {&x, &w, &g, &g};
    CHECK(info->infer(ok, 4, &at, &y) == LOOM_OK && y.shape[0] == 2 && y.shape[1] == 4);
    CHECK(info->infer(ok, 3, &at, &y) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "linear"));
    CHECK(info->infer(bad_g, 4, &at, &y) == LOOM_ERR_SHAPE && strstr(loom_last_error(), "gamma"));
    CHECK(info->infer(bad_r, 4, &at, &y) == LOOM_ERR_SHAPE && strstr(loom_last_error(), "residual"));
    at.norm_eps = 0.0f;
    CHECK(info->infer(ok, 4, &at, &y) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "norm_eps"));
    /* ffn: gamma of the wrong length, six inputs without the norm */
    loom_tensor wg, wd;
    loom_tensor_init(&wg, LOOM_F32, 2, (const int64_t[2]){4, 8}, buf);
    loom_tensor_init(&wd, LOOM_F32, 2, (const int64_t[2]){8, 4}, buf);
    loom_ffn_attrs fa = {.act = LOOM_ACT_SILU, .norm = 1, .norm_eps = 1e-5f};
    const loom_tensor *f_ok[6] = {&x, &wg, &wg, &wd, &x, &g}, *f_bad[6] = {&x, &wg, &wg, &wd, &x, &badg};
    CHECK(loom_op_get(LOOM_OP_FFN)->infer(f_ok, 6, &fa, &y) == LOOM_OK);
    CHECK(loom_op_get(LOOM_OP_FFN)->infer(f_bad, 6, &fa, &y) == LOOM_ERR_SHAPE && strstr(loom_last_error(), "gamma"));
    fa.norm = 0;
    CHECK(loom_op_get(LOOM_OP_FFN)->infer(f_ok, 6, &fa, &y) == LOOM_ERR_INVALID_ARG);
}

/* The planner sizes scratch before any data is bound: the norm's staging
 * must be counted from the attributes, not from x's data pointer. */
static void test_scratch_without_data(void) {
    static float buf[64 * 4096];
    loom_tensor x, w, g, y, wg, wd;
    loom_tensor_init(&x, LOOM_F32, 2, (const int64_t[2]){3, 4096}, buf);
    loom_tensor_init(&w, LOOM_F32, 2, (const int64_t[2]){64, 4096}, buf);
    loom_tensor_init(&g, LOOM_F32, 1, (const int64_t[1]){4096}, buf);
    loom_tensor_init(&y, LOOM_F32, 2, (const int64_t[2]){3, 64}, buf);
    loom_tensor_init(&wg, LOOM_F32, 2, (const int64_t[2]){64, 4096}, buf);
    loom_tensor_init(&wd, LOOM_F32, 2, (const int64_t[2]){4096, 64}, buf);
    loom_linear_attrs la = {.norm = 1, .norm_eps = 1e-5f};
    loom_ffn_attrs fa = {.act = LOOM_ACT_SILU, .norm = 1, .norm_eps = 1e-5f};
    const loom_tensor *ls[3] = {&x, &w, &g}, *fs[5] = {&x, &wg, &wg, &wd, &g};
    size_t l1 = loom_op_get(LOOM_OP_LINEAR)->scratch_size(ls, 3, &y, &la);
    size_t f1 = loom_op_get(LOOM_OP_FFN)->scratch_size(fs, 5, &x, &fa);
    la.norm = 0, fa.norm = 0;
    size_t l0 = loom_op_get(LOOM_OP_LINEAR)->scratch_size(ls, 2, &y, &la);
    size_t f0 = loom_op_get(LOOM_OP_FFN)->scratch_size(fs, 4, &x, &fa);
    la.norm = 1, fa.norm = 1;
    x.data = NULL, w.data = NULL, g.data = NULL, y.data = NULL;
    CHECK_MSG(loom_op_get(LOOM_OP_LINEAR)->scratch_size(ls, 3, &y, &la) == l1, "linear: scratch depends on x's data");
    CHECK_MSG(loom_op_get(LOOM_OP_FFN)->scratch_size(fs, 5, &x, &fa) == f1, "ffn: scratch depends on x's data");
    /* 3 rows of 4096 normalised in scratch (the GEMV's stage) */
    CHECK(l1 >= l0 + 3 * 4096 * sizeof(float) && f1 >= f0 + 3 * 4096 * sizeof(float));
}

int main(void) {
    loom_ops_init();
    RUN_TEST(test_scratch_without_data);
    RUN_TEST(test_linear);
    RUN_TEST(test_linear_bias);
    RUN_TEST(test_ffn_norm);
    RUN_TEST(test_ffn_one_pass);
    RUN_TEST(test_ffn_rows);
    RUN_TEST(test_errors);
    return TEST_SUMMARY();
}
