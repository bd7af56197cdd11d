/* The fused op attention_linear (prefill attention, its output projection and
 * the residual add, a block of query rows at a time) against its
 * decomposition run with the kernels of the same level: flash_attention_score
 * into a [B, S, H, D] output, then linear (+ residual) over it as [B*S, H*D]
 * rows, bit for bit. Random shapes whose dims are not multiples of any tile,
 * MHA and GQA (1, 3, 4, 6 query heads a kv head), head dims 40-96, queries
 * after earlier keys (S_kv > S), causal, band and unmasked attention, f32,
 * f16 and bf16 K/V, inner_precise 0 and 1, every
 * weight type (quantized ones with q8 and with full activations), block rows
 * of 1 (one query block), 50 and auto, launches of fewer than 8 rows, every
 * level, 1-3 threads; the residual given as y itself; threads running at
 * once over the launch's counter. Then the op's argument errors and its cost. (The rule that makes it: test_fusion, test_plan.) */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "check.h"
#include "base/cpu.h"
#include "base/rng.h"
#include "graph/ops_init.h"
#include "ops/ops.h"
#include "test_graph_op_common.h"

typedef struct {
    int64_t B, S, Skv, H, Hkv, D, N;
    loom_dtype wt;
    loom_act_precision act;
    int mode;                 /* 0 causal, 1 none, 2 band (window 17) */
    int residual, block_rows, nth;
    loom_dtype kv;            /* K and V: f32 (0 here), f16 or bf16 */
    int inner_precise;
} acase;

/* t (f32, filled) as a copy of dtype dt (f16 or bf16) */
static void *as_dtype(const loom_tensor *t, loom_dtype dt, loom_tensor *out) {
    int64_t n = loom_tensor_nelem(t);
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        float x = ((const float *)t->data)[i];
        h[i] = dt == LOOM_F16 ? loom_f32_to_f16(x) : loom_f32_to_bf16(x);
    }
    loom_tensor_init(out, dt, t->ndim, t->shape, h);
    return h;
}

static float *make_t(int ndim, const int64_t *shape, loom_rng *r, float scale, loom_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = scale * rnd(r);
    loom_tensor_init(t, LOOM_F32, ndim, shape, x);
    return x;
}

/* Modes of check_case beyond the case: the residual given as y itself (y
 * holds it before the call), and the threads run at once (not one after
 * another) sharing the launch's counter, twice, which must be 0 after each. */
static int g_alias, g_concurrent;
/* q's dtype for the fused op (the rules' activation_dtype: qkv_rope stores q
 * at 16 bits); the decomposition reads the same values widened to f32 */
static loom_dtype g_qt = LOOM_F32;

static loom_status run_concurrent(loom_kernel_fn fn, loom_kernel_args a, int nth) {
    int bad = 0;
    loom_status st = run_concurrent_op(LOOM_OP_ATTENTION_LINEAR, fn, a, nth, &bad);
    CHECK_MSG(bad == 0, "the launch's counter is not 0 after %d of its launches", bad);
    return st;
}

static void check_case(const acase *c, loom_isa isa, uint64_t seed) {
    loom_rng r;
    loom_rng_init(&r, seed, 21);
    int64_t M = c->B * c->S, HD = c->H * c->D;
    loom_tensor tq, tk, tv, tw, tres, to, to2, ty[2];
    float *q = make_t(4, (const int64_t[4]){c->B, c->S, c->H, c->D}, &r, 1.5f, &tq);
    loom_tensor tq16 = tq;
    void *q16 = NULL;
    if (g_qt != LOOM_F32) {
        for (int64_t i = 0; i < loom_tensor_nelem(&tq); i++)
            q[i] = g_qt == LOOM_F16 ? loom_f16_to_f32(loom_f32_to_f16(q[i])) : loom_bf16_to_f32(loom_f32_to_bf16(q[i]));
        q16 = as_dtype(&tq, g_qt, &tq16);
    }
    float *k = make_t(4, (const int64_t[4]){c->B, c->Skv, c->Hkv, c->D}, &r, 1.5f, &tk);
    float *v = make_t(4, (const int64_t[4]){c->B, c->Skv, c->Hkv, c->D}, &r, 1.0f, &tv);
    void *k16 = NULL, *v16 = NULL;
    if (c->kv == LOOM_F16 || c->kv == LOOM_BF16) {
        loom_tensor t16;
        k16 = as_dtype(&tk, c->kv, &t16), tk = t16;
        v16 = as_dtype(&tv, c->kv, &t16), tv = t16;
    }
    float *res = make_t(2, (const int64_t[2]){M, c->N}, &r, 1.0f, &tres);
    float *o = make_t(4, (const int64_t[4]){c->B, c->S, c->H, c->D}, &r, 0.0f, &to);
    void *w = make_w(c->wt, c->N, HD, &r, 0.25f, &tw);
    float *y[2];
    for (int i = 0; i < 2; i++) y[i] = make_t(2, (const int64_t[2]){M, c->N}, &r, 0.0f, &ty[i]);
    static const int32_t modes[3] = {LOOM_SPARSE_RIGHT_DOWN_CAUSAL, 0, LOOM_SPARSE_BAND};
    loom_attention_linear_attrs at = {.scale_value = 0.0f, .sparse_mode = modes[c->mode],
                                      .pre_tokens = c->mode == 2 ? 16 : LOOM_ATTN_TOKENS_ALL,
                                      .next_tokens = c->mode == 2 ? 0 : LOOM_ATTN_TOKENS_ALL,
                                      .act_precision = c->act, .residual = c->residual,
                                      .block_rows = c->block_rows, .inner_precise = c->inner_precise};
    /* decomposition: flash_attention_score, then linear over its output's rows */
    loom_flash_attention_attrs fa = LOOM_FLASH_ATTENTION_ATTRS_DEFAULT;
    fa.sparse_mode = at.sparse_mode, fa.pre_tokens = at.pre_tokens, fa.next_tokens = at.next_tokens;
    fa.inner_precise = c->inner_precise;
    const loom_tensor *sa[3] = {&tq, &tk, &tv};
    CHECK_MSG(run_op(LOOM_OP_FLASH_ATTENTION, isa, sa, 3, &fa, &to, c->nth) == LOOM_OK, "%s", loom_last_error());
    loom_tensor_init(&to2, LOOM_F32, 2, (const int64_t[2]){M, HD}, o);
    loom_linear_attrs la = {.act_precision = c->act, .residual = c->residual};
    const loom_tensor *sl[3] = {&to2, &tw, &tres};
    if (c->residual) {
        CHECK_MSG(run_op(LOOM_OP_LINEAR, isa, sl, 3, &la, &ty[0], c->nth) == LOOM_OK, "%s", loom_last_error());
    } else {
        const loom_matmul_attrs ma = {.act_precision = c->act};
        CHECK_MSG(run_op(LOOM_OP_MATMUL, isa, sl, 2, &ma, &ty[0], c->nth) == LOOM_OK, "%s", loom_last_error());
    }
    /* the fused op */
    loom_kernel_args a = {.src = {&tq16, &tk, &tv, &tw, &tres}, .n_src = 4 + c->residual, .dst = &ty[1], .attrs = &at};
    if (g_alias && c->residual) { /* y holds the residual and is read as it */
        memcpy(y[1], res, sizeof(float) * (size_t)(M * c->N));
        a.src[4] = &ty[1];
    }
    loom_tensor inferred;
    CHECK_MSG(loom_op_get(LOOM_OP_ATTENTION_LINEAR)->infer(a.src, a.n_src, &at, &inferred) == LOOM_OK, "%s",
              loom_last_error());
    CHECK(inferred.ndim == 2 && inferred.shape[0] == M && inferred.shape[1] == c->N);
    loom_kernel_fn fn = loom_op_kernel(LOOM_OP_ATTENTION_LINEAR, isa);
    loom_status st = g_concurrent && c->nth > 1 ? run_concurrent(fn, a, c->nth)
                                                : run_threads(LOOM_OP_ATTENTION_LINEAR, fn, a, c->nth);
    CHECK_MSG(st == LOOM_OK, "%s", loom_last_error());
    int64_t bad = 0, first = -1;
    /* a bf16 q over a bf16 cache takes the kernels' bf16-q path (bf16 products where the level has
     * them: exact, summed in f32 in another order): bf16's tolerance, not the same bits */
    int approx = g_qt == LOOM_BF16 && c->kv == LOOM_BF16;
    for (int64_t i = 0; i < M * c->N; i++)
        if (approx ? !check_close(y[1][i], y[0][i], 1.0 / 128) : memcmp(&y[0][i], &y[1][i], sizeof(float)) != 0)
            bad++, first = first < 0 ? i : first;
    CHECK_MSG(bad == 0,
              "attention_linear %s: B=%lld S=%lld Skv=%lld H=%lld/%lld D=%lld N=%lld %s act %s mode %d residual %d "
              "block_rows %d nth %d kv %s inner_precise %d q %s: %lld of %lld values differ from the decomposition "
              "(first %lld: %g vs %g)",
              loom_isa_name(isa), (long long)c->B, (long long)c->S, (long long)c->Skv, (long long)c->H,
              (long long)c->Hkv, (long long)c->D, (long long)c->N, loom_dtype_name(c->wt),
              loom_act_precision_name(c->act), c->mode, c->residual, c->block_rows, c->nth,
              loom_dtype_name(c->kv), c->inner_precise, loom_dtype_name(g_qt), (long long)bad,
              (long long)(M * c->N), (long long)first, first >= 0 ? (double)y[0][first] : 0.0,
              first >= 0 ? (double)y[1][first] : 0.0);
    free(q), free(q16), free(k), free(v), free(k16), free(v16), free(res), free(o), free(w), free(y[0]), free(y[1]);
}

static const acase cases[] = {
    /* B  S   Skv  H  Hkv D   N    wt        act               mode res rows nth kv      inner_precise */
    {1, 37, 37, 9, 3, 64, 70, LOOM_F32, LOOM_ACT_PREC_Q8, 0, 1, 0, 2, LOOM_F32, 0},
    {1, 100, 100, 9, 3, 64, 96, LOOM_Q4_1, LOOM_ACT_PREC_Q8, 0, 1, 0, 3, LOOM_F32, 0},
    {2, 45, 68, 4, 4, 40, 33, LOOM_F16, LOOM_ACT_PREC_Q8, 0, 1, 1, 2, LOOM_F32, 0},
    {1, 131, 131, 6, 1, 48, 64, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 0, 1, 50, 3, LOOM_F32, 0},
    {1, 70, 70, 8, 2, 96, 128, LOOM_Q4_0, LOOM_ACT_PREC_FULL, 0, 1, 0, 1, LOOM_F32, 0},
    {2, 29, 29, 4, 1, 64, 50, LOOM_BF16, LOOM_ACT_PREC_Q8, 1, 0, 0, 2, LOOM_F32, 0},
    {1, 90, 103, 4, 4, 80, 45, LOOM_Q4_1, LOOM_ACT_PREC_FULL, 2, 1, 1, 3, LOOM_F32, 0},
    {1, 64, 64, 9, 3, 64, 31, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 2, 0, 50, 2, LOOM_F32, 0},
    {3, 17, 40, 2, 1, 64, 20, LOOM_F32, LOOM_ACT_PREC_Q8, 0, 1, 0, 3, LOOM_F32, 0},
    /* f16 and bf16 caches (widened, or rounded, per block), inner_precise 1 (bf16 products where
     * the level has them; f32 ones elsewhere) */
    {1, 150, 150, 9, 3, 64, 40, LOOM_Q4_1, LOOM_ACT_PREC_Q8, 0, 1, 1, 3, LOOM_F16, 0},
    {2, 61, 77, 8, 2, 48, 36, LOOM_F32, LOOM_ACT_PREC_Q8, 2, 1, 0, 2, LOOM_BF16, 0},
    {1, 99, 99, 4, 4, 64, 64, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 0, 1, 0, 2, LOOM_F32, 1},
    {1, 83, 83, 6, 2, 32, 50, LOOM_F16, LOOM_ACT_PREC_Q8, 0, 0, 1, 3, LOOM_BF16, 1},
    /* launches of fewer than 8 rows: linear's own GEMV or GEMM over all rows */
    {1, 5, 5, 9, 3, 64, 40, LOOM_Q4_1, LOOM_ACT_PREC_Q8, 0, 1, 0, 2, LOOM_F32, 0},
    {2, 3, 11, 4, 2, 32, 37, LOOM_F32, LOOM_ACT_PREC_Q8, 0, 1, 0, 3, LOOM_F16, 0},
    {1, 7, 7, 4, 4, 64, 64, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 2, 0, 0, 2, LOOM_F32, 0},
    {1, 1, 9, 2, 1, 64, 32, LOOM_Q4_0, LOOM_ACT_PREC_FULL, 0, 1, 0, 1, LOOM_F32, 0},
};

static void test_against_decomposition(void) {
    for (int isa = LOOM_ISA_REF; isa <= (int)loom_cpu_best_isa(); isa++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            check_case(&cases[i], (loom_isa)isa, 100 + i);
            acase one = cases[i];
            one.nth = 1; /* and the same bits on one thread */
            check_case(&one, (loom_isa)isa, 100 + i);
        }
}

/* q at 16 bits (what qkv_rope stores under activation_dtype f16 / bf16): the
 * same bits as the decomposition over q's values in f32, since the attention
 * widens each q row as it loads it; a bf16 q over a bf16 cache within bf16's
 * tolerance (check_case: the bf16-q path). */
static void test_q16(void) {
    for (int d = 0; d < 2; d++) {
        g_qt = d ? LOOM_BF16 : LOOM_F16;
        for (int isa = LOOM_ISA_REF; isa <= (int)loom_cpu_best_isa(); isa++)
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i], (loom_isa)isa, 500 + i);
    }
    g_qt = LOOM_F32;
}

/* The residual given as y itself, and threads that run at once over the
 * launch's counter (twice: it must return to 0), at the best level. */
static void test_alias_and_threads(void) {
    for (int mode = 0; mode < 2; mode++) {
        g_alias = mode == 0, g_concurrent = mode == 1;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i], loom_cpu_best_isa(), 300 + i);
    }
    g_alias = g_concurrent = 0;
}

static void test_errors(void) {
    float buf[4096] = {0};
    loom_tensor q, k, v, w, res, y, k16, wbad, rbad, kshort;
    loom_tensor_init(&q, LOOM_F32, 4, (const int64_t[4]){1, 8, 4, 8}, buf);
    loom_tensor_init(&k, LOOM_F32, 4, (const int64_t[4]){1, 8, 2, 8}, buf);
    loom_tensor_init(&v, LOOM_F32, 4, (const int64_t[4]){1, 8, 2, 8}, buf);
    loom_tensor_init(&kshort, LOOM_F32, 4, (const int64_t[4]){1, 5, 2, 8}, buf);
    loom_tensor_init(&k16, LOOM_I8, 4, (const int64_t[4]){1, 8, 2, 8}, buf);
    loom_tensor_init(&w, LOOM_F32, 2, (const int64_t[2]){6, 32}, buf);
    loom_tensor_init(&wbad, LOOM_F32, 2, (const int64_t[2]){6, 31}, buf);
    loom_tensor_init(&res, LOOM_F32, 2, (const int64_t[2]){8, 6}, buf);
    loom_tensor_init(&rbad, LOOM_F32, 2, (const int64_t[2]){8, 5}, buf);
    const loom_op_info *info = loom_op_get(LOOM_OP_ATTENTION_LINEAR);
    loom_attention_linear_attrs at = LOOM_ATTENTION_LINEAR_ATTRS_DEFAULT;
    at.sparse_mode = LOOM_SPARSE_RIGHT_DOWN_CAUSAL, at.residual = 1;
    const loom_tensor *ok[5] = {&q, &k, &v, &w, &res};
    CHECK(info->infer(ok, 5, &at, &y) == LOOM_OK && y.shape[0] == 8 && y.shape[1] == 6);
    CHECK(info->infer(ok, 4, &at, &y) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "attention_linear"));
    const loom_tensor *s1[5] = {&q, &k, &v, &wbad, &res}, *s2[5] = {&q, &k, &v, &w, &rbad};
    const loom_tensor *s3[5] = {&q, &k16, &v, &w, &res}, *s4[5] = {&q, &kshort, &kshort, &w, &res};
    CHECK(info->infer(s1, 5, &at, &y) == LOOM_ERR_SHAPE && strstr(loom_last_error(), "(w)"));
    CHECK(info->infer(s2, 5, &at, &y) == LOOM_ERR_SHAPE && strstr(loom_last_error(), "residual"));
    CHECK(info->infer(s3, 5, &at, &y) == LOOM_ERR_SHAPE && strstr(loom_last_error(), "(k)"));
    CHECK(info->infer(s4, 5, &at, &y) == LOOM_ERR_SHAPE && strstr(loom_last_error(), "S_kv"));
    at.sparse_mode = LOOM_SPARSE_LEFT_UP_CAUSAL;
    CHECK(info->infer(ok, 5, &at, &y) == LOOM_ERR_UNSUPPORTED && strstr(loom_last_error(), "sparse_mode"));
    /* bands a block of rows cannot cut at its last row's diagonal: mode 0's (aligned top-left) and
     * one reaching past the diagonal */
    at.sparse_mode = 0, at.pre_tokens = 5;
    CHECK(info->infer(ok, 5, &at, &y) == LOOM_ERR_UNSUPPORTED && strstr(loom_last_error(), "pre/next_tokens"));
    at.sparse_mode = LOOM_SPARSE_BAND, at.next_tokens = 2;
    CHECK(info->infer(ok, 5, &at, &y) == LOOM_ERR_UNSUPPORTED && strstr(loom_last_error(), "band"));
    at.next_tokens = 0;
    CHECK(info->infer(ok, 5, &at, &y) == LOOM_OK);
    at.sparse_mode = 0, at.pre_tokens = LOOM_ATTN_TOKENS_ALL, at.next_tokens = LOOM_ATTN_TOKENS_ALL, at.block_rows = -1;
    CHECK(info->infer(ok, 5, &at, &y) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "block_rows"));
    at.block_rows = 0, at.residual = 2;
    CHECK(info->infer(ok, 5, &at, &y) == LOOM_ERR_INVALID_ARG);
}

/* The op's accounting: flash_attention_score's and linear's, less the
 * attention output (written by the one, read by the other), at f32 and at
 * the 16-bit activations the planner costs (--act-dtype: q and y f16). */
static void test_cost(void) {
    for (int half = 0; half < 2; half++) {
        loom_dtype act = half ? LOOM_F16 : LOOM_F32;
        loom_tensor q, k, v, w, res, y, o, o2;
        loom_tensor_init(&q, act, 4, (const int64_t[4]){1, 300, 9, 64}, NULL);
        loom_tensor_init(&k, LOOM_F16, 4, (const int64_t[4]){1, 300, 3, 64}, NULL);
        loom_tensor_init(&v, LOOM_F16, 4, (const int64_t[4]){1, 300, 3, 64}, NULL);
        loom_tensor_init(&w, LOOM_Q4_1, 2, (const int64_t[2]){576, 576}, NULL);
        loom_tensor_init(&res, act, 2, (const int64_t[2]){300, 576}, NULL);
        loom_tensor_init(&y, act, 2, (const int64_t[2]){300, 576}, NULL);
        loom_tensor_init(&o, act, 4, (const int64_t[4]){1, 300, 9, 64}, NULL);
        loom_tensor_init(&o2, act, 2, (const int64_t[2]){300, 576}, NULL);
        loom_attention_linear_attrs at = {.sparse_mode = LOOM_SPARSE_RIGHT_DOWN_CAUSAL, .residual = 1,
                                          .pre_tokens = LOOM_ATTN_TOKENS_ALL, .next_tokens = LOOM_ATTN_TOKENS_ALL};
        loom_flash_attention_attrs fa = LOOM_FLASH_ATTENTION_ATTRS_DEFAULT;
        fa.sparse_mode = LOOM_SPARSE_RIGHT_DOWN_CAUSAL;
        loom_linear_attrs la = {.residual = 1};
        const loom_tensor *sa[5] = {&q, &k, &v, &w, &res}, *sf[3] = {&q, &k, &v}, *sl[3] = {&o2, &w, &res};
        loom_cost ca, cf, cl;
        loom_op_get(LOOM_OP_ATTENTION_LINEAR)->cost(sa, 5, &y, &at, &ca);
        loom_op_get(LOOM_OP_FLASH_ATTENTION)->cost(sf, 3, &o, &fa, &cf);
        loom_op_get(LOOM_OP_LINEAR)->cost(sl, 3, &y, &la, &cl);
        double out = 300.0 * 576 * (half ? 2 : 4);
        CHECK_MSG(cf.bytes_written == out && ca.flops > 0, "%s: flash attention writes %g", half ? "f16" : "f32",
                  cf.bytes_written);
        CHECK_MSG(ca.bytes_read == cf.bytes_read + cl.bytes_read - out, "%s: read %g vs %g", half ? "f16" : "f32",
                  ca.bytes_read, cf.bytes_read + cl.bytes_read - out);
        CHECK(ca.bytes_written == cl.bytes_written && ca.bytes_written == out);
        CHECK(ca.flops == cf.flops + cl.flops);
    }
}

int main(void) {
    loom_ops_init();
    RUN_TEST(test_errors);
    RUN_TEST(test_cost);
    RUN_TEST(test_against_decomposition);
    RUN_TEST(test_alias_and_threads);
    RUN_TEST(test_q16);
    return TEST_SUMMARY();
}
