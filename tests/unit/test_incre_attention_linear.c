/* The fused op incre_attention_linear (decode attention, its output
 * projection and the residual add in one kernel: each thread's groups of kv
 * heads through the attention and their columns of W, the groups' partials
 * summed in order) against its decomposition run with the kernels of the
 * same level: incre_flash_attention into an f32 [B, S, H, D] output, then
 * linear (+ residual) or matmul over it as [B*S, H*D] rows, within the f32
 * tolerance (the fused sum goes by groups); and the same bits on 1, 2 and 3
 * threads. Random shapes: q_len 1-5 (causal within the step), 1-2 batch
 * entries, MHA and GQA (1, 2, 3, 4 query heads a kv head), head dims 32-128
 * and odd N, groups from 1 to every kv head, f32, f16, bf16 and i8 caches,
 * every weight type (quantized ones with q8 and with full activations),
 * every level; threads running at once over the launch's counter. Then the
 * op's argument errors, its cost, the scratch it checks, and the builder's
 * group counts. (The rule that makes it: test_fusion.) */
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
    int residual, groups;
    loom_dtype kv; /* f32, f16, bf16 or i8 (with per-row scales) */
} icase;

static const icase cases[] = {
    /* B  S  Skv  H   Hkv D    N    wt          act                res groups kv */
    {1, 1, 37, 8, 8, 64, 70, LOOM_F32, LOOM_ACT_PREC_Q8, 1, 4, LOOM_F32},
    {1, 1, 100, 9, 3, 64, 96, LOOM_Q4_1, LOOM_ACT_PREC_Q8, 1, 3, LOOM_F16},
    {2, 1, 68, 4, 4, 40, 33, LOOM_F16, LOOM_ACT_PREC_Q8, 1, 2, LOOM_F32},
    {1, 3, 131, 6, 2, 48, 64, LOOM_F32, LOOM_ACT_PREC_Q8, 0, 2, LOOM_BF16},
    {1, 1, 70, 8, 2, 96, 128, LOOM_Q4_0, LOOM_ACT_PREC_FULL, 1, 2, LOOM_F32},
    {2, 2, 29, 4, 1, 64, 50, LOOM_BF16, LOOM_ACT_PREC_Q8, 1, 1, LOOM_F32},
    {1, 1, 603, 12, 6, 128, 45, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 1, 4, LOOM_F16},
    {1, 1, 90, 8, 4, 32, 31, LOOM_Q8_0, LOOM_ACT_PREC_FULL, 0, 3, LOOM_I8},
    {1, 5, 40, 6, 3, 64, 20, LOOM_F16, LOOM_ACT_PREC_Q8, 1, 3, LOOM_I8},
    {1, 1, 1, 16, 16, 64, 77, LOOM_F32, LOOM_ACT_PREC_Q8, 1, 8, LOOM_F32}, /* the first token */
    {1, 1, 1500, 32, 32, 64, 64, LOOM_F16, LOOM_ACT_PREC_Q8, 1, 8, LOOM_F16}, /* several kv chunks */
};

/* Modes beyond the case: threads run at once (not one after another) over
 * the launch's counter, twice; then it must be 0. */
static int g_concurrent;

static float *make_t(int ndim, const int64_t *shape, loom_rng *r, float scale, loom_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) x[i] = scale * rnd(r);
    loom_tensor_init(t, LOOM_F32, ndim, shape, x);
    return x;
}

/* t (f32, filled) as dtype dt: f16, bf16, or i8 with one scale a row of D (scale: [B, S, Hkv]) */
static void *as_dtype(const loom_tensor *t, loom_dtype dt, loom_tensor *out, float **scale, loom_tensor *ts) {
    int64_t n = loom_tensor_nelem(t), D = t->shape[3];
    const float *x = t->data;
    if (dt == LOOM_I8) {
        int8_t *q = malloc((size_t)n);
        *scale = malloc(sizeof(float) * (size_t)(n / D));
        for (int64_t r = 0; r < n / D; r++) {
            float m = 0.0f;
            for (int64_t d = 0; d < D; d++) m = fmaxf(m, fabsf(x[r * D + d]));
            float s = m > 0.0f ? m / 127.0f : 1.0f;
            (*scale)[r] = s;
            for (int64_t d = 0; d < D; d++) q[r * D + d] = (int8_t)lrintf(x[r * D + d] / s);
        }
        loom_tensor_init(out, LOOM_I8, 4, t->shape, q);
        loom_tensor_init(ts, LOOM_F32, 3, t->shape, *scale);
        return q;
    }
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = dt == LOOM_F16 ? loom_f32_to_f16(x[i]) : loom_f32_to_bf16(x[i]);
    loom_tensor_init(out, dt, 4, t->shape, h);
    return h;
}

static loom_status run_concurrent(loom_kernel_fn fn, loom_kernel_args a, int nth) {
    int bad = 0;
    loom_status st = run_concurrent_op(LOOM_OP_INCRE_ATTENTION_LINEAR, fn, a, nth, &bad);
    CHECK_MSG(bad == 0, "the launch's counter is not 0 after %d of its launches", bad);
    return st;
}

static loom_incre_attention_linear_attrs attrs_of(const icase *c) {
    loom_incre_attention_linear_attrs at = {.attn = LOOM_INCRE_FLASH_ATTENTION_ATTRS_DEFAULT,
                                            .act_precision = c->act, .residual = c->residual, .groups = c->groups};
    at.attn.sparse_mode = c->S > 1 ? LOOM_SPARSE_RIGHT_DOWN_CAUSAL : 0;
    at.attn.out_f32 = 1;
    return at;
}

static void check_case(const icase *c, loom_isa isa, uint64_t seed) {
    loom_rng r;
    loom_rng_init(&r, seed, 23);
    int64_t M = c->B * c->S, HD = c->H * c->D;
    loom_tensor tq, tk, tv, tw, tres, to, to2, ty[4], tks = {0}, tvs = {0};
    float *q = make_t(4, (const int64_t[4]){c->B, c->S, c->H, c->D}, &r, 1.5f, &tq);
    float *k = make_t(4, (const int64_t[4]){c->B, c->Skv, c->Hkv, c->D}, &r, 1.5f, &tk);
    float *v = make_t(4, (const int64_t[4]){c->B, c->Skv, c->Hkv, c->D}, &r, 1.0f, &tv);
    void *k2 = NULL, *v2 = NULL;
    float *ks = NULL, *vs = NULL;
    if (c->kv != LOOM_F32) {
        loom_tensor t2;
        k2 = as_dtype(&tk, c->kv, &t2, &ks, &tks), tk = t2;
        v2 = as_dtype(&tv, c->kv, &t2, &vs, &tvs), tv = t2;
    }
    float *res = make_t(2, (const int64_t[2]){M, c->N}, &r, 1.0f, &tres);
    float *o = make_t(4, (const int64_t[4]){c->B, c->S, c->H, c->D}, &r, 0.0f, &to);
    void *w = make_w(c->wt, c->N, HD, &r, 0.25f, &tw);
    float *y[4];
    for (int i = 0; i < 4; i++) y[i] = make_t(2, (const int64_t[2]){M, c->N}, &r, 0.0f, &ty[i]);
    loom_incre_attention_linear_attrs at = attrs_of(c);
    int na = c->kv == LOOM_I8 ? 5 : 3;
    /* decomposition: incre_flash_attention, then linear (or matmul) over its output's rows */
    const loom_tensor *sa[5] = {&tq, &tk, &tv, &tks, &tvs};
    CHECK_MSG(run_op(LOOM_OP_INCRE_FLASH_ATTENTION, isa, sa, na, &at.attn, &to, 2) == LOOM_OK, "%s",
              loom_last_error());
    loom_tensor_init(&to2, LOOM_F32, 2, (const int64_t[2]){M, HD}, o);
    const loom_tensor *sl[3] = {&to2, &tw, &tres};
    if (c->residual) {
        loom_linear_attrs la = {.act_precision = c->act, .residual = 1};
        CHECK_MSG(run_op(LOOM_OP_LINEAR, isa, sl, 3, &la, &ty[0], 2) == LOOM_OK, "%s", loom_last_error());
    } else {
        const loom_matmul_attrs ma = {.act_precision = c->act};
        CHECK_MSG(run_op(LOOM_OP_MATMUL, isa, sl, 2, &ma, &ty[0], 2) == LOOM_OK, "%s", loom_last_error());
    }
    /* the fused op on 1, 2 and 3 threads */
    loom_kernel_args a = {.n_src = na + 1 + c->residual, .attrs = &at};
    for (int i = 0; i < na; i++) a.src[i] = sa[i];
    a.src[na] = &tw;
    if (c->residual) a.src[na + 1] = &tres;
    loom_tensor inferred;
    CHECK_MSG(loom_op_get(LOOM_OP_INCRE_ATTENTION_LINEAR)->infer(a.src, a.n_src, &at, &inferred) == LOOM_OK, "%s",
              loom_last_error());
    CHECK(inferred.ndim == 2 && inferred.shape[0] == M && inferred.shape[1] == c->N);
    loom_kernel_fn fn = loom_op_kernel(LOOM_OP_INCRE_ATTENTION_LINEAR, isa);
    for (int nth = 1; nth <= 3; nth++) {
        a.dst = &ty[nth];
        loom_status st = g_concurrent && nth > 1 ? run_concurrent(fn, a, nth)
                                                 : run_threads(LOOM_OP_INCRE_ATTENTION_LINEAR, fn, a, nth);
        CHECK_MSG(st == LOOM_OK, "%s", loom_last_error());
    }
    int64_t bad = 0, first = -1, diff = 0;
    for (int64_t i = 0; i < M * c->N; i++) {
        if (!check_close(y[1][i], y[0][i], 1e-4)) bad++, first = first < 0 ? i : first;
        diff += memcmp(&y[1][i], &y[2][i], sizeof(float)) != 0 || memcmp(&y[1][i], &y[3][i], sizeof(float)) != 0;
    }
    CHECK_MSG(bad == 0 && diff == 0,
              "incre_attention_linear %s: B=%lld S=%lld Skv=%lld H=%lld/%lld D=%lld N=%lld %s act %s residual %d "
              "groups %d kv %s: %lld of %lld values off the decomposition (first %lld: %.9g vs %.9g), %lld differ "
              "between thread counts",
              loom_isa_name(isa), (long long)c->B, (long long)c->S, (long long)c->Skv, (long long)c->H,
              (long long)c->Hkv, (long long)c->D, (long long)c->N, loom_dtype_name(c->wt),
              loom_act_precision_name(c->act), c->residual, c->groups, loom_dtype_name(c->kv), (long long)bad,
              (long long)(M * c->N), (long long)first, first >= 0 ? (double)y[1][first] : 0.0,
              first >= 0 ? (double)y[0][first] : 0.0, (long long)diff);
    free(q), free(k), free(v), free(k2), free(v2), free(ks), free(vs), free(res), free(o), free(w);
    for (int i = 0; i < 4; i++) free(y[i]);
}

static void test_against_decomposition(void) {
    for (int isa = LOOM_ISA_REF; isa <= (int)loom_cpu_best_isa(); isa++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i], (loom_isa)isa, 100 + i);
}

static void test_concurrent(void) {
    g_concurrent = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i], loom_cpu_best_isa(), 300 + i);
    g_concurrent = 0;
}

static void test_errors(void) {
    float buf[8192] = {0};
    loom_tensor q, k, v, w, res, y, k8, wbad, rbad, wq, qbad;
    loom_tensor_init(&q, LOOM_F32, 4, (const int64_t[4]){1, 1, 4, 8}, buf);
    loom_tensor_init(&qbad, LOOM_F32, 4, (const int64_t[4]){1, 1, 3, 8}, buf);
    loom_tensor_init(&k, LOOM_F32, 4, (const int64_t[4]){1, 8, 2, 8}, buf);
    loom_tensor_init(&v, LOOM_F32, 4, (const int64_t[4]){1, 8, 2, 8}, buf);
    loom_tensor_init(&k8, LOOM_I8, 4, (const int64_t[4]){1, 8, 2, 8}, buf);
    loom_tensor_init(&w, LOOM_F32, 2, (const int64_t[2]){6, 32}, buf);
    loom_tensor_init(&wq, LOOM_Q8_0, 2, (const int64_t[2]){6, 32}, buf); /* a kv head's 16 columns: half a block */
    loom_tensor_init(&wbad, LOOM_F32, 2, (const int64_t[2]){6, 31}, buf);
    loom_tensor_init(&res, LOOM_F32, 2, (const int64_t[2]){1, 6}, buf);
    loom_tensor_init(&rbad, LOOM_F32, 2, (const int64_t[2]){1, 5}, buf);
    const loom_op_info *info = loom_op_get(LOOM_OP_INCRE_ATTENTION_LINEAR);
    icase c = {.residual = 1, .groups = 2};
    loom_incre_attention_linear_attrs at = attrs_of(&c);
    const loom_tensor *ok[5] = {&q, &k, &v, &w, &res};
    CHECK(info->infer(ok, 5, &at, &y) == LOOM_OK && y.shape[0] == 1 && y.shape[1] == 6);
    CHECK(info->infer(ok, 4, &at, &y) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "incre_attention_linear"));
    const loom_tensor *s1[5] = {&q, &k, &v, &wbad, &res}, *s2[5] = {&q, &k, &v, &w, &rbad};
    const loom_tensor *s3[5] = {&q, &k8, &v, &w, &res}, *s4[5] = {&q, &k, &v, &wq, &res};
    const loom_tensor *s5[5] = {&qbad, &k, &v, &w, &res};
    CHECK(info->infer(s1, 5, &at, &y) == LOOM_ERR_SHAPE && strstr(loom_last_error(), "(w)"));
    CHECK(info->infer(s2, 5, &at, &y) == LOOM_ERR_SHAPE && strstr(loom_last_error(), "residual"));
    CHECK(info->infer(s3, 5, &at, &y) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "k_scale"));
    CHECK(info->infer(s4, 5, &at, &y) == LOOM_ERR_UNSUPPORTED && strstr(loom_last_error(), "blocks"));
    CHECK(info->infer(s5, 5, &at, &y) == LOOM_ERR_SHAPE && strstr(loom_last_error(), "kv heads"));
    at.groups = 3; /* more than the kv heads */
    CHECK(info->infer(ok, 5, &at, &y) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "groups"));
    at.groups = 0;
    CHECK(info->infer(ok, 5, &at, &y) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "groups"));
    at.groups = 2, at.residual = 2;
    CHECK(info->infer(ok, 5, &at, &y) == LOOM_ERR_INVALID_ARG);
    at.residual = 1, at.attn.input_layout = 1;
    CHECK(info->infer(ok, 5, &at, &y) == LOOM_ERR_UNSUPPORTED && strstr(loom_last_error(), "BSND"));
    at.attn.input_layout = 0;
    /* a kernel given less scratch or shared buffer than it asks for: an error, not an overrun */
    float out[6];
    loom_tensor_init(&y, LOOM_F32, 2, (const int64_t[2]){1, 6}, out);
    char small[64] __attribute__((aligned(64)));
    _Atomic int arrive = 0;
    for (int which = 0; which < 2; which++) {
        loom_kernel_args a = {.src = {&q, &k, &v, &w, &res}, .n_src = 5, .dst = &y, .attrs = &at, .ith = 0, .nth = 1,
                              .arrive = &arrive};
        size_t sb = info->scratch_size(a.src, 5, &y, &at), hb = info->shared_size(a.src, 5, &y, &at);
        void *s = loom_alloc_aligned(sb, LOOM_ALIGN), *h = loom_alloc_aligned(hb, LOOM_ALIGN);
        a.scratch = which ? small : s, a.scratch_bytes = which ? sizeof small : sb;
        a.shared = which ? h : small, a.shared_bytes = which ? hb : 16; /* two groups' partials take 48 */
        CHECK_MSG(loom_op_kernel(LOOM_OP_INCRE_ATTENTION_LINEAR, loom_cpu_best_isa())(&a) == LOOM_ERR_INVALID_ARG &&
                      strstr(loom_last_error(), which ? "scratch" : "shared"),
                  "%s", loom_last_error());
        loom_free_aligned(s), loom_free_aligned(h);
    }
    /* two threads, the second one short of scratch: the first finishes its share, the second (the
     * last to arrive) reports the error, and the launch's counter is back at 0 */
    {
        loom_kernel_args a = {.src = {&q, &k, &v, &w, &res}, .n_src = 5, .dst = &y, .attrs = &at, .nth = 2,
                              .arrive = &arrive};
        size_t sb = info->scratch_size(a.src, 5, &y, &at), hb = info->shared_size(a.src, 5, &y, &at);
        void *s = loom_alloc_aligned(sb, LOOM_ALIGN), *h = loom_alloc_aligned(hb, LOOM_ALIGN);
        a.shared = h, a.shared_bytes = hb;
        loom_kernel_fn fn = loom_op_kernel(LOOM_OP_INCRE_ATTENTION_LINEAR, loom_cpu_best_isa());
        a.ith = 0, a.scratch = s, a.scratch_bytes = sb;
        CHECK(fn(&a) == LOOM_OK);
        a.ith = 1, a.scratch = small, a.scratch_bytes = sizeof small;
        CHECK(fn(&a) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "scratch"));
        CHECK_MSG(atomic_load(&arrive) == 0, "the counter is %d", atomic_load(&arrive));
        /* a thread whose inputs are wrong arrives too */
        a.ith = 0, a.scratch = s, a.scratch_bytes = sb;
        CHECK(fn(&a) == LOOM_OK);
        a.ith = 1, a.n_src = 4;
        CHECK(fn(&a) == LOOM_ERR_INVALID_ARG);
        CHECK_MSG(atomic_load(&arrive) == 0, "the counter is %d", atomic_load(&arrive));
        loom_free_aligned(s), loom_free_aligned(h);
    }
}

/* The op's accounting: incre_flash_attention's and linear's, less the
 * attention output (written by the one, read by the other). */
static void test_cost(void) {
    loom_tensor q, k, v, w, res, y, o, o2;
    loom_tensor_init(&q, LOOM_F32, 4, (const int64_t[4]){1, 1, 32, 128}, NULL);
    loom_tensor_init(&k, LOOM_F16, 4, (const int64_t[4]){1, 4096, 32, 128}, NULL);
    loom_tensor_init(&v, LOOM_F16, 4, (const int64_t[4]){1, 4096, 32, 128}, NULL);
    loom_tensor_init(&w, LOOM_F16, 2, (const int64_t[2]){4096, 4096}, NULL);
    loom_tensor_init(&res, LOOM_F32, 2, (const int64_t[2]){1, 4096}, NULL);
    loom_tensor_init(&y, LOOM_F32, 2, (const int64_t[2]){1, 4096}, NULL);
    loom_tensor_init(&o, LOOM_F32, 4, (const int64_t[4]){1, 1, 32, 128}, NULL);
    loom_tensor_init(&o2, LOOM_F32, 2, (const int64_t[2]){1, 4096}, NULL);
    icase c = {.residual = 1, .groups = 8};
    loom_incre_attention_linear_attrs at = attrs_of(&c);
    loom_linear_attrs la = {.residual = 1};
    const loom_tensor *sa[5] = {&q, &k, &v, &w, &res}, *sl[3] = {&o2, &w, &res};
    loom_cost ca, cf, cl;
    loom_op_get(LOOM_OP_INCRE_ATTENTION_LINEAR)->cost(sa, 5, &y, &at, &ca);
    loom_op_get(LOOM_OP_INCRE_FLASH_ATTENTION)->cost(sa, 3, &o, &at.attn, &cf);
    loom_op_get(LOOM_OP_LINEAR)->cost(sl, 3, &y, &la, &cl);
    double out = 4096.0 * 4;
    CHECK_MSG(cf.bytes_written == out && ca.flops > 0, "the attention writes %g", cf.bytes_written);
    CHECK_MSG(ca.bytes_read == cf.bytes_read + cl.bytes_read - out, "read %g vs %g", ca.bytes_read,
              cf.bytes_read + cl.bytes_read - out);
    CHECK(ca.bytes_written == cl.bytes_written && ca.bytes_written == out);
    CHECK(ca.flops == cf.flops + cl.flops);
}

/* The builder's group counts: about 8, a multiple of the threads, at most the
 * kv heads, and even shares of kv heads (within 1/8) or none. */
static void test_groups(void) {
    CHECK(loom_incre_attention_linear_groups(32, 1) == 8);
    CHECK(loom_incre_attention_linear_groups(32, 2) == 8);
    CHECK(loom_incre_attention_linear_groups(8, 2) == 8);
    CHECK(loom_incre_attention_linear_groups(4, 2) == 4);
    CHECK(loom_incre_attention_linear_groups(3, 1) == 3);
    CHECK(loom_incre_attention_linear_groups(32, 3) == 9);  /* 10, 11 and 11 kv heads */
    CHECK(loom_incre_attention_linear_groups(3, 2) == 0);   /* 1 and 2 kv heads */
    CHECK(loom_incre_attention_linear_groups(1, 2) == 0);   /* one kv head (MQA) on two threads */
    CHECK(loom_incre_attention_linear_groups(8, 16) == 0);  /* fewer kv heads than threads */
    CHECK(loom_incre_attention_linear_groups(64, 16) == 16);
    CHECK(loom_incre_attention_linear_groups(5, 5) == 5);
}

int main(void) {
    loom_ops_init();
    RUN_TEST(test_groups);
    RUN_TEST(test_errors);
    RUN_TEST(test_cost);
    RUN_TEST(test_against_decomposition);
    RUN_TEST(test_concurrent);
    return TEST_SUMMARY();
}
