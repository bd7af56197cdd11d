/* Reference softmax: hand cases, masks, causal, properties. */
#include "test_ops_common.h"

static void run_softmax(float *x, float *mask, float *y, int ndim, const int64_t *shape,
                        const loom_softmax_attrs *at) {
    loom_tensor tx, tm, ty;
    CHECK(loom_tensor_init(&tx, LOOM_F32, ndim, shape, x) == LOOM_OK);
    CHECK(loom_tensor_init(&ty, LOOM_F32, ndim, shape, y) == LOOM_OK);
    int64_t R = ndim >= 2 ? shape[ndim - 2] : 1, C = shape[ndim - 1];
    TENSOR(tm, LOOM_F32, mask, R, C);
    const loom_tensor *src[2] = {&tx, &tm};
    RUN_OK(LOOM_OP_SOFTMAX, src, mask ? 2 : 1, at, &ty);
}

static void test_softmax_hand(void) {
    /* exp of [0, ln2, ln3] is [1, 2, 3]: probabilities 1/6, 2/6, 3/6 */
    float x[3] = {0.0f, logf(2.0f), logf(3.0f)}, y[4];
    y[3] = 77.0f; /* guard */
    loom_softmax_attrs plain = {0};
    run_softmax(x, NULL, y, 1, (const int64_t[]){3}, &plain);
    CHECK_CLOSE(y[0], 1.0 / 6, 1e-6);
    CHECK_CLOSE(y[1], 2.0 / 6, 1e-6);
    CHECK_CLOSE(y[2], 3.0 / 6, 1e-6);
    CHECK(y[3] == 77.0f);
    /* NULL attrs: scale 1, no causal */
    run_softmax(x, NULL, y, 1, (const int64_t[]){3}, NULL);
    CHECK_CLOSE(y[2], 3.0 / 6, 1e-6);

    /* scale multiplies before the exp: 0.5 * [0, 2 ln2, 2 ln3] */
    float x2[3] = {0.0f, 2.0f * logf(2.0f), 2.0f * logf(3.0f)};
    loom_softmax_attrs half = {0.5f, 0, 0};
    run_softmax(x2, NULL, y, 1, (const int64_t[]){3}, &half);
    CHECK_CLOSE(y[0], 1.0 / 6, 1e-6);
    CHECK_CLOSE(y[2], 3.0 / 6, 1e-6);

    /* additive mask [0, -inf, ln3] on equal logits: 1/4, 0, 3/4 */
    float ones[3] = {1, 1, 1}, mask[3] = {0.0f, -INFINITY, logf(3.0f)};
    run_softmax(ones, mask, y, 2, (const int64_t[]){1, 3}, &plain);
    CHECK_CLOSE(y[0], 0.25, 1e-6);
    CHECK(y[1] == 0.0f);
    CHECK_CLOSE(y[2], 0.75, 1e-6);

    /* large logits do not overflow */
    float big[2] = {1000.0f, 1000.0f};
    run_softmax(big, NULL, y, 1, (const int64_t[]){2}, &plain);
    CHECK(y[0] == 0.5f && y[1] == 0.5f);
}

static void test_softmax_causal(void) {
    float x[6] = {0}, y[6];
    const int64_t shape[2] = {2, 3};
    loom_softmax_attrs c0 = {0, 1, 0}, c1 = {0, 1, 1}, cm1 = {0, 1, -1};
    /* row i sees columns 0..pos_offset+i */
    run_softmax(x, NULL, y, 2, shape, &c0);
    CHECK(y[0] == 1.0f && y[1] == 0.0f && y[2] == 0.0f);
    CHECK(y[3] == 0.5f && y[4] == 0.5f && y[5] == 0.0f);
    run_softmax(x, NULL, y, 2, shape, &c1);
    CHECK(y[0] == 0.5f && y[1] == 0.5f && y[2] == 0.0f);
    CHECK_CLOSE(y[3], 1.0 / 3, 1e-7);
    CHECK_CLOSE(y[5], 1.0 / 3, 1e-7);
    /* pos_offset -1: row 0 sees nothing -> zeros, never NaN */
    run_softmax(x, NULL, y, 2, shape, &cm1);
    CHECK(y[0] == 0.0f && y[1] == 0.0f && y[2] == 0.0f);
    CHECK(y[3] == 1.0f && y[4] == 0.0f && y[5] == 0.0f);

    /* a mask of all -inf on one row: zeros too */
    float mask[6] = {-INFINITY, -INFINITY, -INFINITY, 0, 0, 0};
    loom_softmax_attrs plain = {0};
    run_softmax(x, mask, y, 2, shape, &plain);
    CHECK(y[0] == 0.0f && y[1] == 0.0f && y[2] == 0.0f);
    CHECK_CLOSE(y[4], 1.0 / 3, 1e-7);

    /* a NaN input stays NaN */
    float xn[3] = {0.0f, NAN, 1.0f};
    run_softmax(xn, NULL, y, 1, (const int64_t[]){3}, &plain);
    CHECK(isnan(y[0]) && isnan(y[1]) && isnan(y[2]));
}

/* The mask and the causal index follow the row within R, not the batch. */
static void test_softmax_batched_mask(void) {
    float x[2 * 2 * 3], y[2 * 2 * 3];
    for (int i = 0; i < 12; i++) x[i] = (float)i; /* distinct logits; the mask dominates */
    float mask[6] = {0, -INFINITY, -INFINITY, -INFINITY, 0, -INFINITY};
    loom_softmax_attrs plain = {0};
    run_softmax(x, mask, y, 3, (const int64_t[]){2, 2, 3}, &plain);
    for (int b = 0; b < 2; b++) {
        const float *r0 = y + b * 6, *r1 = y + b * 6 + 3;
        CHECK(r0[0] == 1.0f && r0[1] == 0.0f && r0[2] == 0.0f);
        CHECK(r1[0] == 0.0f && r1[1] == 1.0f && r1[2] == 0.0f);
    }
}

static void test_softmax_properties(void) {
    enum { B = 3, R = 4, C = 17, N = B * R * C };
    loom_rng rng;
    loom_rng_init(&rng, 21, 0);
    float x[N], xs[N], y[N], ys[N];
    for (int i = 0; i < N; i++) x[i] = 8.0f * frand(&rng);
    const int64_t shape[3] = {B, R, C};
    loom_softmax_attrs at = {0.75f, 0, 0};
    run_softmax(x, NULL, y, 3, shape, &at);
    for (int r = 0; r < B * R; r++) {
        double s = 0.0;
        for (int j = 0; j < C; j++) {
            CHECK(y[r * C + j] > 0.0f && y[r * C + j] < 1.0f);
            s += y[r * C + j];
        }
        CHECK_CLOSE(s, 1.0, 1e-6);
    }
    /* adding a constant to a row (exactly representable: small integers) changes nothing */
    for (int i = 0; i < N; i++) xs[i] = x[i] + 16.0f;
    run_softmax(xs, NULL, ys, 3, shape, &at);
    for (int i = 0; i < N; i++) CHECK_CLOSE(ys[i], y[i], 1e-5);

    /* causal rows still sum to 1; masked entries are exact zeros */
    loom_softmax_attrs causal = {1.0f, 1, 2};
    run_softmax(x, NULL, y, 3, shape, &causal);
    for (int r = 0; r < B * R; r++) {
        int i = r % R;
        double s = 0.0;
        for (int j = 0; j < C; j++) {
            if (j > 2 + i) CHECK(y[r * C + j] == 0.0f);
            s += y[r * C + j];
        }
        CHECK_CLOSE(s, 1.0, 1e-6);
    }

    /* in place (dst is x) gives the same numbers */
    memcpy(xs, x, sizeof xs);
    run_softmax(xs, NULL, xs, 3, shape, &causal);
    CHECK(memcmp(xs, y, sizeof y) == 0);

    /* thread split, with a mask */
    float mask[R * C];
    fill_rand(mask, R * C, &rng);
    loom_tensor tx, tm, ty;
    TENSOR(tx, LOOM_F32, x, B, R, C);
    TENSOR(tm, LOOM_F32, mask, R, C);
    TENSOR(ty, LOOM_F32, y, B, R, C);
    const loom_tensor *src[2] = {&tx, &tm};
    check_thread_invariance(LOOM_OP_SOFTMAX, src, 2, &causal, &ty);
}

/* x as a transposed view: softmax over the columns of the original. */
static void test_softmax_strided(void) {
    float xt[3 * 2] = {0.0f, 5.0f, logf(2.0f), 5.0f, logf(3.0f), 5.0f}; /* stored [3, 2] */
    float y[6];
    loom_tensor txt, tx, ty;
    TENSOR(txt, LOOM_F32, xt, 3, 2);
    CHECK(loom_tensor_permute(&txt, (const int[]){1, 0}, &tx) == LOOM_OK); /* [2, 3] */
    TENSOR(ty, LOOM_F32, y, 2, 3);
    loom_softmax_attrs plain = {0};
    const loom_tensor *src[1] = {&tx};
    RUN_OK(LOOM_OP_SOFTMAX, src, 1, &plain, &ty);
    CHECK_CLOSE(y[0], 1.0 / 6, 1e-6);
    CHECK_CLOSE(y[2], 3.0 / 6, 1e-6);
    CHECK_CLOSE(y[3], 1.0 / 3, 1e-7);
}

int main(void) {
    RUN_TEST(test_softmax_hand);
    RUN_TEST(test_softmax_causal);
    RUN_TEST(test_softmax_batched_mask);
    RUN_TEST(test_softmax_properties);
    RUN_TEST(test_softmax_strided);
    return TEST_SUMMARY();
}
