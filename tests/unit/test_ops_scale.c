/* The scale and softcap ops (Gemma's embedding scale and final logit
 * soft-capping): hand values, attribute and dtype errors, the float kernels
 * against the reference on sizes that are no multiple of a vector, strided
 * views, and the same bits for 1-3 threads. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "base/rng.h"
#include "graph/ops_init.h"
#include "ops/ops.h"

static loom_tensor t2(float *d, int64_t a, int64_t b) {
    loom_tensor t;
    const int64_t shape[2] = {a, b};
    loom_tensor_init(&t, LOOM_F32, 2, shape, d);
    return t;
}

static void test_hand(void) {
    float x[4] = {1.0f, -2.0f, 0.0f, 1000.0f}, y[4];
    loom_tensor tx = t2(x, 1, 4), ty = t2(y, 1, 4);
    const loom_tensor *src[1] = {&tx};
    loom_scale_attrs sa = {.scale = 5.656854249f};
    CHECK(loom_op_run(LOOM_OP_SCALE, src, 1, &sa, &ty, LOOM_ISA_REF) == LOOM_OK);
    CHECK(y[0] == 5.656854249f && y[1] == -2.0f * 5.656854249f && y[2] == 0.0f);
    loom_softcap_attrs ca = {.cap = 30.0f};
    CHECK(loom_op_run(LOOM_OP_SOFTCAP, src, 1, &ca, &ty, LOOM_ISA_REF) == LOOM_OK);
    CHECK_CLOSE(y[0], 30.0 * tanh(1.0 / 30.0), 1e-6);
    CHECK_CLOSE(y[1], 30.0 * tanh(-2.0 / 30.0), 1e-6);
    CHECK(y[2] == 0.0f && y[3] == 30.0f);
}

static void test_errors(void) {
    float x[4] = {0}, y[4];
    loom_tensor tx = t2(x, 2, 2), ty = t2(y, 2, 2);
    const loom_tensor *src[1] = {&tx};
    const float bad[] = {0.0f, -1.0f, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        loom_scale_attrs sa = {.scale = bad[i]};
        loom_softcap_attrs ca = {.cap = bad[i]};
        CHECK(loom_op_run(LOOM_OP_SCALE, src, 1, &sa, &ty, LOOM_ISA_REF) == LOOM_ERR_INVALID_ARG);
        CHECK(loom_op_run(LOOM_OP_SOFTCAP, src, 1, &ca, &ty, LOOM_ISA_REF) == LOOM_ERR_INVALID_ARG);
    }
    CHECK(loom_op_run(LOOM_OP_SOFTCAP, src, 1, NULL, &ty, LOOM_ISA_REF) == LOOM_ERR_INVALID_ARG);
    uint16_t h[4] = {0};
    loom_tensor th;
    const int64_t shape[1] = {4};
    loom_tensor_init(&th, LOOM_F16, 1, shape, h);
    const loom_tensor *hs[1] = {&th};
    loom_softcap_attrs ca = {.cap = 1.0f};
    CHECK(loom_op_run(LOOM_OP_SOFTCAP, hs, 1, &ca, &ty, LOOM_ISA_REF) == LOOM_ERR_DTYPE);
}

/* Every level against the reference, and the optimised kernel split over 1-3 threads. */
static void test_levels_and_threads(void) {
    loom_rng r;
    loom_rng_init(&r, 17, 0);
    const int64_t sizes[][2] = {{1, 1}, {3, 17}, {1, 300}, {5, 33}, {2, 1000}};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int64_t R = sizes[k][0], C = sizes[k][1], n = R * C;
        float *x = malloc(sizeof(float) * (size_t)(2 * n)), *ref = malloc(sizeof(float) * (size_t)n);
        float *out = malloc(sizeof(float) * (size_t)n), *first = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < 2 * n; i++) x[i] = (loom_rng_uniform(&r) * 2.0f - 1.0f) * 80.0f;
        loom_tensor tx = t2(x, R, C), tr = t2(ref, R, C), to = t2(out, R, C);
        if (k % 2) tx.stride[0] = 2 * C; /* a strided view: every other row of x */
        const loom_tensor *src[1] = {&tx};
        for (int op = 0; op < 2; op++) {
            loom_scale_attrs sa = {.scale = 7.3f};
            loom_softcap_attrs ca = {.cap = 15.0f};
            loom_op o = op ? LOOM_OP_SOFTCAP : LOOM_OP_SCALE;
            const void *at = op ? (const void *)&ca : (const void *)&sa;
            CHECK(loom_op_run(o, src, 1, at, &tr, LOOM_ISA_REF) == LOOM_OK);
            for (int isa = LOOM_ISA_GENERIC; isa <= (int)loom_cpu_isa(); isa++) {
                memset(out, 0xA5, sizeof(float) * (size_t)n);
                CHECK(loom_op_run(o, src, 1, at, &to, (loom_isa)isa) == LOOM_OK);
                int bad = 0;
                for (int64_t i = 0; i < n; i++)
                    bad += op ? !(fabsf(out[i] - ref[i]) <= 4.0f * 15.0f * 0x1p-23f) : out[i] != ref[i];
                CHECK_MSG(bad == 0, "%s level %d, %lldx%lld: %d values off", op ? "softcap" : "scale", isa,
                          (long long)R, (long long)C, bad);
            }
            loom_kernel_fn fn = loom_op_kernel(o, loom_cpu_isa());
            for (int nth = 1; nth <= 3; nth++) {
                memset(out, 0x5A, sizeof(float) * (size_t)n);
                for (int ith = 0; ith < nth; ith++) {
                    loom_kernel_args a = {.src = {&tx}, .n_src = 1, .dst = &to, .attrs = at, .ith = ith, .nth = nth};
                    CHECK(fn(&a) == LOOM_OK);
                }
                if (nth == 1) memcpy(first, out, sizeof(float) * (size_t)n);
                else CHECK_MSG(memcmp(first, out, sizeof(float) * (size_t)n) == 0, "nth %d differs", nth);
            }
        }
        free(x), free(ref), free(out), free(first);
    }
}

int main(void) {
    loom_ops_init();
    RUN_TEST(test_hand);
    RUN_TEST(test_errors);
    RUN_TEST(test_levels_and_threads);
    return TEST_SUMMARY();
}
