/* Reference add, mul, silu and rms_norm. */
#include "test_ops_common.h"

static void test_add_mul(void) {
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0.5f, -2, 10, 0, -1, 0.25f}, y[7];
    y[6] = 42.0f; /* guard */
    loom_tensor ta, tb, ty;
    TENSOR(ta, LOOM_F32, a, 2, 3);
    TENSOR(tb, LOOM_F32, b, 2, 3);
    TENSOR(ty, LOOM_F32, y, 2, 3);
    const loom_tensor *src[2] = {&ta, &tb};
    RUN_OK(LOOM_OP_ADD, src, 2, NULL, &ty);
    static const float sum[6] = {1.5f, 0, 13, 4, 4, 6.25f};
    CHECK(memcmp(y, sum, sizeof sum) == 0);
    RUN_OK(LOOM_OP_MUL, src, 2, NULL, &ty);
    static const float prod[6] = {0.5f, -4, 30, 0, -5, 1.5f};
    CHECK(memcmp(y, prod, sizeof prod) == 0);
    CHECK(y[6] == 42.0f);

    /* b as a transposed view: a[i][j] + bt[j][i] */
    float bt[6] = {0.5f, 0, -2, -1, 10, 0.25f}; /* b transposed, stored [3, 2] */
    loom_tensor tbt;
    TENSOR(tbt, LOOM_F32, bt, 3, 2);
    CHECK(loom_tensor_permute(&tbt, (const int[]){1, 0}, &tb) == LOOM_OK);
    RUN_OK(LOOM_OP_ADD, src, 2, NULL, &ty);
    CHECK(memcmp(y, sum, sizeof sum) == 0);

    /* in place: y = a + b written over a */
    float a2[6];
    memcpy(a2, a, sizeof a2);
    TENSOR(ta, LOOM_F32, a2, 2, 3);
    TENSOR(tb, LOOM_F32, b, 2, 3);
    RUN_OK(LOOM_OP_ADD, src, 2, NULL, &ta);
    CHECK(memcmp(a2, sum, sizeof sum) == 0);

    /* thread split over one long row */
    enum { N = 101 };
    loom_rng rng;
    loom_rng_init(&rng, 5, 0);
    float x[N], z[N], out[N];
    fill_rand(x, N, &rng);
    fill_rand(z, N, &rng);
    TENSOR(ta, LOOM_F32, x, N);
    TENSOR(tb, LOOM_F32, z, N);
    TENSOR(ty, LOOM_F32, out, N);
    check_thread_invariance(LOOM_OP_ADD, src, 2, NULL, &ty);
    for (int i = 0; i < N; i++) CHECK(out[i] == x[i] + z[i]);
    check_thread_invariance(LOOM_OP_MUL, src, 2, NULL, &ty);
    for (int i = 0; i < N; i++) CHECK(out[i] == x[i] * z[i]);
}

static void test_silu(void) {
    float x[7] = {0.0f, 1.0f, -1.0f, 100.0f, -1000.0f, 2.0f, -20.0f}, y[7];
    loom_tensor tx, ty;
    TENSOR(tx, LOOM_F32, x, 7);
    TENSOR(ty, LOOM_F32, y, 7);
    const loom_tensor *src[1] = {&tx};
    RUN_OK(LOOM_OP_SILU, src, 1, NULL, &ty);
    CHECK(y[0] == 0.0f);
    CHECK_CLOSE(y[1], 0.7310585786300049, 1e-7);  /* 1 / (1 + e^-1) */
    CHECK_CLOSE(y[2], -0.2689414213699951, 1e-7); /* -1 / (1 + e) */
    CHECK(y[3] == 100.0f);
    CHECK(y[4] == 0.0f && signbit(y[4])); /* -1000 / (1 + e^1000): -0, no NaN */
    CHECK_CLOSE(y[5], 1.7615941559557649, 1e-7); /* 2 / (1 + e^-2) */
    /* -20 / (1 + e^20) = -20 / 485165196.4097903 */
    CHECK(fabs(y[6] - -4.122307236380407e-08) <= 1e-6 * 4.122307236380407e-08);
    check_thread_invariance(LOOM_OP_SILU, src, 1, NULL, &ty);
}

static void test_rms_norm_hand(void) {
    /* x = [2, -2, 2, -2]: mean(x^2) = 4; eps = 5 -> divide by sqrt(9) = 3 */
    float x[4] = {2, -2, 2, -2}, g[4] = {1, 2, 3, 4}, y[5];
    y[4] = 8.0f; /* guard */
    loom_tensor tx, tg, ty;
    TENSOR(tx, LOOM_F32, x, 1, 4);
    TENSOR(tg, LOOM_F32, g, 4);
    TENSOR(ty, LOOM_F32, y, 1, 4);
    loom_rms_norm_attrs at = {5.0f};
    const loom_tensor *src[2] = {&tx, &tg};
    RUN_OK(LOOM_OP_RMS_NORM, src, 2, &at, &ty);
    CHECK(y[0] == (float)(2.0 / 3) && y[1] == (float)(-4.0 / 3) && y[2] == 2.0f &&
          y[3] == (float)(-8.0 / 3));
    CHECK(y[4] == 8.0f);
    /* without gamma */
    RUN_OK(LOOM_OP_RMS_NORM, src, 1, &at, &ty);
    CHECK(y[0] == (float)(2.0 / 3) && y[1] == (float)(-2.0 / 3));

    /* x = [3, 4], eps = 0.5: mean = 12.5, sqrt(13) */
    float x2[2] = {3, 4}, y2[2];
    TENSOR(tx, LOOM_F32, x2, 2);
    TENSOR(ty, LOOM_F32, y2, 2);
    loom_rms_norm_attrs half = {0.5f};
    RUN_OK(LOOM_OP_RMS_NORM, src, 1, &half, &ty);
    CHECK_CLOSE(y2[0], 3.0 / sqrt(13.0), 1e-7);
    CHECK_CLOSE(y2[1], 4.0 / sqrt(13.0), 1e-7);
}

/* A constant vector c normalises to sign(c) * gamma (up to eps); rows independent. */
static void test_rms_norm_properties(void) {
    enum { R = 5, D = 67 };
    float x[R * D], g[D], y[R * D];
    static const float consts[R] = {1.0f, -3.0f, 1000.0f, 1e-3f, 7.5f};
    loom_rng rng;
    loom_rng_init(&rng, 11, 0);
    fill_rand(g, D, &rng);
    for (int r = 0; r < R; r++)
        for (int d = 0; d < D; d++) x[r * D + d] = consts[r];
    loom_tensor tx, tg, ty;
    TENSOR(tx, LOOM_F32, x, R, D);
    TENSOR(tg, LOOM_F32, g, D);
    TENSOR(ty, LOOM_F32, y, R, D);
    loom_rms_norm_attrs at = {1e-12f};
    const loom_tensor *src[2] = {&tx, &tg};
    RUN_OK(LOOM_OP_RMS_NORM, src, 2, &at, &ty);
    for (int r = 0; r < R; r++)
        for (int d = 0; d < D; d++)
            CHECK_CLOSE(y[r * D + d], (consts[r] > 0 ? 1.0 : -1.0) * g[d], 1e-6);
    check_thread_invariance(LOOM_OP_RMS_NORM, src, 2, &at, &ty);

    /* scale invariance: rms_norm(k x) = rms_norm(x) when eps is negligible */
    float x1[D], x2[D], y1[D], y2[D];
    fill_rand(x1, D, &rng);
    for (int d = 0; d < D; d++) x2[d] = 4.0f * x1[d];
    TENSOR(tx, LOOM_F32, x1, D);
    TENSOR(ty, LOOM_F32, y1, D);
    RUN_OK(LOOM_OP_RMS_NORM, src, 2, &at, &ty);
    TENSOR(tx, LOOM_F32, x2, D);
    TENSOR(ty, LOOM_F32, y2, D);
    RUN_OK(LOOM_OP_RMS_NORM, src, 2, &at, &ty);
    for (int d = 0; d < D; d++) CHECK_CLOSE(y2[d], y1[d], 1e-6);
}

/* 3-D input with a strided (padded) row layout: rows are all leading dims. */
static void test_rms_norm_strided(void) {
    enum { A = 2, B = 3, D = 5, PAD = 2 };
    float xp[A * B * (D + PAD)], x[A * B * D], y[A * B * D], want[A * B * D];
    loom_rng rng;
    loom_rng_init(&rng, 12, 0);
    fill_rand(x, A * B * D, &rng);
    for (int r = 0; r < A * B; r++)
        for (int d = 0; d < D + PAD; d++) xp[r * (D + PAD) + d] = d < D ? x[r * D + d] : NAN;
    loom_tensor tx, ty;
    loom_rms_norm_attrs at = {1e-5f};
    const loom_tensor *src[1] = {&tx};
    TENSOR(tx, LOOM_F32, x, A, B, D);
    TENSOR(ty, LOOM_F32, want, A, B, D);
    RUN_OK(LOOM_OP_RMS_NORM, src, 1, &at, &ty);
    TENSOR(tx, LOOM_F32, xp, A, B, D);
    tx.stride[1] = D + PAD;
    tx.stride[0] = B * (D + PAD);
    TENSOR(ty, LOOM_F32, y, A, B, D);
    RUN_OK(LOOM_OP_RMS_NORM, src, 1, &at, &ty);
    CHECK(memcmp(y, want, sizeof y) == 0);
}

int main(void) {
    RUN_TEST(test_add_mul);
    RUN_TEST(test_silu);
    RUN_TEST(test_rms_norm_hand);
    RUN_TEST(test_rms_norm_properties);
    RUN_TEST(test_rms_norm_strided);
    return TEST_SUMMARY();
}
