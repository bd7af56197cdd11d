/* layer_norm, gelu and add_bias (the encoder ops) against hand-computed
 * values, plus shape/attribute errors and thread-count independence. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "graph/ops_init.h"
#include "ops/ops.h"

static loom_tensor vec(float *d, int ndim, int64_t a, int64_t b) {
    loom_tensor t;
    int64_t shape[2] = {a, b};
    loom_tensor_init(&t, LOOM_F32, ndim, ndim == 1 ? &a : shape, d);
    return t;
}

static void test_layer_norm_hand(void) {
    /* row [1, 2, 3, 4]: mean 2.5, var 1.25 -> (x-2.5)/sqrt(1.25+eps) */
    float x[8] = {1, 2, 3, 4, -2, -2, -2, -2}, g[4] = {1, 2, 1, 0.5f}, b[4] = {0, 1, -1, 0}, y[8];
    loom_tensor tx = vec(x, 2, 2, 4), tg = vec(g, 1, 4, 1), tb = vec(b, 1, 4, 1), ty = vec(y, 2, 2, 4);
    loom_layer_norm_attrs at = {1e-5f};
    const loom_tensor *src[3] = {&tx, &tg, &tb};
    CHECK(loom_op_run(LOOM_OP_LAYER_NORM, src, 3, &at, &ty, LOOM_ISA_REF) == LOOM_OK);
    double s = 1.0 / sqrt(1.25 + 1e-5);
    double want[4] = {-1.5 * s * 1 + 0, -0.5 * s * 2 + 1, 0.5 * s * 1 - 1, 1.5 * s * 0.5};
    for (int i = 0; i < 4; i++) CHECK_CLOSE(y[i], want[i], 1e-6);
    /* a constant row normalises to beta */
    for (int i = 0; i < 4; i++) CHECK_CLOSE(y[4 + i], b[i], 1e-6);
    /* without gamma/beta */
    CHECK(loom_op_run(LOOM_OP_LAYER_NORM, src, 1, &at, &ty, LOOM_ISA_REF) == LOOM_OK);
    CHECK_CLOSE(y[0], -1.5 * s, 1e-6);
    CHECK_CLOSE(y[3], 1.5 * s, 1e-6);
}

static void test_layer_norm_errors(void) {
    float x[8] = {0}, g[3] = {0}, y[8];
    loom_tensor tx = vec(x, 2, 2, 4), tg = vec(g, 1, 3, 1), ty = vec(y, 2, 2, 4);
    loom_layer_norm_attrs at = {1e-5f}, bad = {0.0f};
    const loom_tensor *src[2] = {&tx, &tg};
    CHECK(loom_op_run(LOOM_OP_LAYER_NORM, src, 2, &at, &ty, LOOM_ISA_REF) == LOOM_ERR_SHAPE);
    CHECK(strstr(loom_last_error(), "gamma") != NULL);
    CHECK(loom_op_run(LOOM_OP_LAYER_NORM, src, 1, &bad, &ty, LOOM_ISA_REF) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_op_run(LOOM_OP_LAYER_NORM, src, 1, NULL, &ty, LOOM_ISA_REF) == LOOM_ERR_INVALID_ARG);
}

static void test_gelu_hand(void) {
    /* Phi(1) = 0.8413447460685429, Phi(-1) = 0.15865525393145707, Phi(2) = 0.9772498680518208 */
    float x[5] = {0, 1, -1, 2, -6}, y[5];
    loom_tensor tx = vec(x, 1, 5, 1), ty = vec(y, 1, 5, 1);
    const loom_tensor *src[1] = {&tx};
    CHECK(loom_op_run(LOOM_OP_GELU, src, 1, NULL, &ty, LOOM_ISA_REF) == LOOM_OK);
    CHECK_CLOSE(y[0], 0.0, 1e-7);
    CHECK_CLOSE(y[1], 0.8413447460685429, 1e-6);
    CHECK_CLOSE(y[2], -0.15865525393145707, 1e-6);
    CHECK_CLOSE(y[3], 2 * 0.9772498680518208, 1e-6);
    CHECK(fabs(y[4]) < 1e-7);
    loom_gelu_attrs tanh_form = {1};
    CHECK(loom_op_run(LOOM_OP_GELU, src, 1, &tanh_form, &ty, LOOM_ISA_REF) == LOOM_OK);
    /* 0.5*(1+tanh(sqrt(2/pi)*(1+0.044715))) = 0.8411919906082768 */
    CHECK_CLOSE(y[1], 0.8411919906082768, 1e-6);
    loom_gelu_attrs bad = {3};
    CHECK(loom_op_run(LOOM_OP_GELU, src, 1, &bad, &ty, LOOM_ISA_REF) == LOOM_ERR_INVALID_ARG);
}

static void test_add_bias(void) {
    float x[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30}, y[6];
    loom_tensor tx = vec(x, 2, 2, 3), tb = vec(b, 1, 3, 1), ty = vec(y, 2, 2, 3);
    const loom_tensor *src[2] = {&tx, &tb};
    CHECK(loom_op_run(LOOM_OP_ADD_BIAS, src, 2, NULL, &ty, LOOM_ISA_REF) == LOOM_OK);
    float want[6] = {11, 22, 33, 14, 25, 36};
    for (int i = 0; i < 6; i++) CHECK(y[i] == want[i]);
    loom_tensor tb2 = vec(b, 1, 2, 1);
    src[1] = &tb2;
    CHECK(loom_op_run(LOOM_OP_ADD_BIAS, src, 2, NULL, &ty, LOOM_ISA_REF) == LOOM_ERR_SHAPE);
}

/* Threads split rows: running share by share must give the same bits as one call. */
static void test_thread_split(void) {
    enum { R = 7, D = 37 };
    float x[R * D], g[D], b[D], y1[R * D], y3[R * D];
    for (int i = 0; i < R * D; i++) x[i] = (float)((i * 7919) % 101) / 13.0f - 3.0f;
    for (int i = 0; i < D; i++) g[i] = 1.0f + (float)i / D, b[i] = (float)i / 7.0f;
    loom_tensor tx = vec(x, 2, R, D), tg = vec(g, 1, D, 1), tb = vec(b, 1, D, 1);
    loom_tensor t1 = vec(y1, 2, R, D), t3 = vec(y3, 2, R, D);
    loom_layer_norm_attrs at = {1e-12f};
    const loom_op_info *info = loom_op_get(LOOM_OP_LAYER_NORM);
    loom_kernel_args a = {.src = {&tx, &tg, &tb}, .n_src = 3, .dst = &t1, .attrs = &at, .ith = 0, .nth = 1};
    CHECK(info->ref(&a) == LOOM_OK);
    a.dst = &t3;
    a.nth = 3;
    for (a.ith = 0; a.ith < 3; a.ith++) CHECK(info->ref(&a) == LOOM_OK);
    CHECK(memcmp(y1, y3, sizeof y1) == 0);
}

/* The fast gelu against the reference: random values over [-12, 12], large
 * magnitudes, +-0, +-Inf, NaN; rows of odd lengths; both forms. */
static void test_gelu_fast_vs_ref(void) {
    enum { R = 5, D = 1031 };
    static float x[R * D], y_ref[R * D], y_opt[R * D];
    uint32_t s = 12345;
    for (int i = 0; i < R * D; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 24.0f;
    }
    float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e30f, -1e30f, 3e-39f, -40.0f, 40.0f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) x[i * 7] = specials[i];
    int64_t shape[2] = {R, D};
    loom_tensor tx, tr, to;
    loom_tensor_init(&tx, LOOM_F32, 2, shape, x);
    loom_tensor_init(&tr, LOOM_F32, 2, shape, y_ref);
    loom_tensor_init(&to, LOOM_F32, 2, shape, y_opt);
    const loom_op_info *info = loom_op_get(LOOM_OP_GELU);
    CHECK(info->opt[LOOM_ISA_GENERIC] != NULL);
    for (int form = 0; form <= 1; form++) {
        loom_gelu_attrs at = {form};
        const loom_tensor *src[1] = {&tx};
        CHECK(loom_op_run(LOOM_OP_GELU, src, 1, &at, &tr, LOOM_ISA_REF) == LOOM_OK);
        /* two threads' shares */
        for (int lvl = LOOM_ISA_GENERIC; lvl < LOOM_ISA_COUNT; lvl++) {
            if (!info->opt[lvl] || lvl > (int)loom_cpu_isa()) continue;
            memset(y_opt, 0, sizeof y_opt);
            loom_kernel_args a = {.src = {&tx}, .n_src = 1, .dst = &to, .attrs = &at, .nth = 2};
            for (a.ith = 0; a.ith < 2; a.ith++) CHECK(info->opt[lvl](&a) == LOOM_OK);
            int bad = 0;
            for (int i = 0; i < R * D; i++)
                if (!check_close(y_opt[i], y_ref[i], 1e-5)) { /* the two forms differ by up to 4.7e-4 */
                    if (bad++ < 5)
                        fprintf(stderr, "  gelu(%g) form %d level %s: %g vs ref %g\n", x[i], form,
                                loom_isa_name((loom_isa)lvl), y_opt[i], y_ref[i]);
                }
            CHECK_MSG(bad == 0, "level %s: %d of %d outside 1e-5", loom_isa_name((loom_isa)lvl), bad, R * D);
        }
    }
}

/* The fast layer_norm and add_bias against the reference: rows of lengths
 * that are no multiple of 16 (1..700), values with a large common offset
 * (the two-pass variance must not cancel), with and without gamma/beta, and
 * the same bits whatever the thread split (1, 2, 3 threads). */
static void test_layer_norm_add_bias_fast_vs_ref(void) {
    const loom_op_info *ln = loom_op_get(LOOM_OP_LAYER_NORM), *ab = loom_op_get(LOOM_OP_ADD_BIAS);
    CHECK(ln->opt[LOOM_ISA_GENERIC] && ab->opt[LOOM_ISA_GENERIC]);
    uint32_t s = 777;
    static const int64_t dims[] = {1, 7, 16, 17, 100, 384, 385, 700};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        int64_t D = dims[di], R = 1 + (int64_t)(di % 5);
        float *x = malloc(sizeof(float) * (size_t)(R * D)), *g = malloc(sizeof(float) * (size_t)D);
        float *b = malloc(sizeof(float) * (size_t)D), *yr = malloc(sizeof(float) * (size_t)(R * D));
        float *y1 = malloc(sizeof(float) * (size_t)(R * D)), *yn = malloc(sizeof(float) * (size_t)(R * D));
        float offset = di % 2 ? 1000.0f : 0.0f;
        for (int64_t i = 0; i < R * D; i++) {
            s = s * 1664525u + 1013904223u;
            x[i] = offset + ((float)(s >> 8) / 16777216.0f - 0.5f) * 8.0f;
        }
        for (int64_t i = 0; i < D; i++) {
            s = s * 1664525u + 1013904223u;
            g[i] = (float)(s >> 8) / 16777216.0f + 0.5f;
            b[i] = (float)(s >> 12) / 1048576.0f - 0.5f;
        }
        int64_t shape[2] = {R, D};
        loom_tensor tx, tg, tb, tr, t1, tn;
        loom_tensor_init(&tx, LOOM_F32, 2, shape, x);
        loom_tensor_init(&tg, LOOM_F32, 1, &D, g);
        loom_tensor_init(&tb, LOOM_F32, 1, &D, b);
        loom_tensor_init(&tr, LOOM_F32, 2, shape, yr);
        loom_tensor_init(&t1, LOOM_F32, 2, shape, y1);
        loom_tensor_init(&tn, LOOM_F32, 2, shape, yn);
        loom_layer_norm_attrs at = {1e-5f};
        for (int nsrc = 1; nsrc <= 3; nsrc++) {
            const loom_tensor *src[3] = {&tx, &tg, &tb};
            CHECK(loom_op_run(LOOM_OP_LAYER_NORM, src, nsrc, &at, &tr, LOOM_ISA_REF) == LOOM_OK);
            for (int nth = 1; nth <= 3; nth++) {
                float *out = nth == 1 ? y1 : yn;
                loom_kernel_args a = {.src = {&tx, &tg, &tb}, .n_src = nsrc, .dst = nth == 1 ? &t1 : &tn,
                                      .attrs = &at, .nth = nth};
                for (a.ith = 0; a.ith < nth; a.ith++) CHECK(ln->opt[LOOM_ISA_GENERIC](&a) == LOOM_OK);
                int bad = 0;
                for (int64_t i = 0; i < R * D; i++) bad += !check_close(out[i], yr[i], 1.0 / 2048);
                CHECK_MSG(bad == 0, "layer_norm D=%lld src=%d nth=%d: %d outside 2^-11", (long long)D, nsrc, nth, bad);
                if (nth > 1) CHECK_MSG(memcmp(y1, yn, sizeof(float) * (size_t)(R * D)) == 0, "layer_norm nth=%d", nth);
            }
        }
        const loom_tensor *bs[2] = {&tx, &tb};
        CHECK(loom_op_run(LOOM_OP_ADD_BIAS, bs, 2, NULL, &tr, LOOM_ISA_REF) == LOOM_OK);
        loom_kernel_args a = {.src = {&tx, &tb}, .n_src = 2, .dst = &t1, .nth = 2};
        for (a.ith = 0; a.ith < 2; a.ith++) CHECK(ab->opt[LOOM_ISA_GENERIC](&a) == LOOM_OK);
        CHECK_MSG(memcmp(y1, yr, sizeof(float) * (size_t)(R * D)) == 0, "add_bias D=%lld", (long long)D);
        free(x), free(g), free(b), free(yr), free(y1), free(yn);
    }
}

int main(void) {
    loom_ops_init(); /* the fused layer's ops in the op table */
    RUN_TEST(test_gelu_fast_vs_ref);
    RUN_TEST(test_layer_norm_add_bias_fast_vs_ref);
    RUN_TEST(test_layer_norm_hand);
    RUN_TEST(test_layer_norm_errors);
    RUN_TEST(test_gelu_hand);
    RUN_TEST(test_add_bias);
    RUN_TEST(test_thread_split);
    return TEST_SUMMARY();
}
