/* Reference matmul and get_rows. */
#include "test_ops_common.h"

static void test_matmul_hand(void) {
    /* y = x . W^T: row 0 = [1-3, 2+2+1.5], row 1 = [4-6, 8+5+3] */
    float x[6] = {1, 2, 3, 4, 5, 6};
    float w[6] = {1, 0, -1, 2, 1, 0.5f};
    float y[5] = {0, 0, 0, 0, 12345.0f}; /* y[4]: guard */
    loom_tensor tx, tw, ty;
    TENSOR(tx, LOOM_F32, x, 2, 3);
    TENSOR(tw, LOOM_F32, w, 2, 3);
    TENSOR(ty, LOOM_F32, y, 2, 2);
    const loom_tensor *src[2] = {&tx, &tw};
    RUN_OK(LOOM_OP_MATMUL, src, 2, NULL, &ty);
    CHECK(y[0] == -2.0f && y[1] == 5.5f && y[2] == -2.0f && y[3] == 16.0f);
    CHECK(y[4] == 12345.0f);

    /* K = 1 and a 1-D x: y[n] = x0 * W[n, 0] */
    float x1[1] = {3}, w1[3] = {1, -2, 0.25f}, y1[3];
    TENSOR(tx, LOOM_F32, x1, 1);
    TENSOR(tw, LOOM_F32, w1, 3, 1);
    TENSOR(ty, LOOM_F32, y1, 3);
    RUN_OK(LOOM_OP_MATMUL, src, 2, NULL, &ty);
    CHECK(y1[0] == 3.0f && y1[1] == -6.0f && y1[2] == 0.75f);
}

/* Naive triple loop: the independent oracle. */
static void naive_matmul(const float *x, const float *w, float *y, int M, int N, int K) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double acc = 0.0;
            for (int k = 0; k < K; k++) acc += (double)x[m * K + k] * (double)w[n * K + k];
            y[m * N + n] = (float)acc;
        }
}

static void test_matmul_random(void) {
    static const int sizes[] = {1, 3, 17, 67};
    loom_rng rng;
    loom_rng_init(&rng, 42, 0);
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 4; c++) {
                int M = sizes[a], N = sizes[b], K = sizes[c];
                float *x = falloc(M * K), *w = falloc(N * K), *y = falloc(M * N),
                      *want = falloc(M * N);
                fill_rand(x, M * K, &rng);
                fill_rand(w, N * K, &rng);
                naive_matmul(x, w, want, M, N, K);
                loom_tensor tx, tw, ty;
                TENSOR(tx, LOOM_F32, x, M, K);
                TENSOR(tw, LOOM_F32, w, N, K);
                TENSOR(ty, LOOM_F32, y, M, N);
                const loom_tensor *src[2] = {&tx, &tw};
                RUN_OK(LOOM_OP_MATMUL, src, 2, NULL, &ty);
                for (int i = 0; i < M * N; i++) CHECK_CLOSE(y[i], want[i], 1e-6);
                check_thread_invariance(LOOM_OP_MATMUL, src, 2, NULL, &ty);
                free(x), free(w), free(y), free(want);
            }
}

/* f16/bf16 weights give exactly what f32 weights converted up front give. */
static void test_matmul_half_weights(void) {
    enum { M = 3, N = 17, K = 67 };
    loom_rng rng;
    loom_rng_init(&rng, 7, 0);
    float x[M * K], w[N * K], wup[N * K], y[M * N], want[M * N];
    uint16_t wh[N * K];
    fill_rand(x, M * K, &rng);
    fill_rand(w, N * K, &rng);
    for (int dt = LOOM_F16; dt <= LOOM_BF16; dt++) {
        for (int i = 0; i < N * K; i++) {
            wh[i] = dt == LOOM_F16 ? loom_f32_to_f16(w[i]) : loom_f32_to_bf16(w[i]);
            wup[i] = dt == LOOM_F16 ? loom_f16_to_f32(wh[i]) : loom_bf16_to_f32(wh[i]);
        }
        naive_matmul(x, wup, want, M, N, K);
        loom_tensor tx, tw, ty;
        TENSOR(tx, LOOM_F32, x, M, K);
        TENSOR(tw, (loom_dtype)dt, wh, N, K);
        TENSOR(ty, LOOM_F32, y, M, N);
        const loom_tensor *src[2] = {&tx, &tw};
        RUN_OK(LOOM_OP_MATMUL, src, 2, NULL, &ty);
        CHECK(memcmp(y, want, sizeof y) == 0);
        check_thread_invariance(LOOM_OP_MATMUL, src, 2, NULL, &ty);
    }
}

/* Leading dims are rows; strided x and a transposed W view give the same result. */
static void test_matmul_views(void) {
    enum { M = 6, N = 5, K = 7, PAD = 3 };
    loom_rng rng;
    loom_rng_init(&rng, 9, 0);
    float x[M * K], w[N * K], want[M * N], y[M * N];
    float xpad[M * (K + PAD)], wt[K * N];
    fill_rand(x, M * K, &rng);
    fill_rand(w, N * K, &rng);
    naive_matmul(x, w, want, M, N, K);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K + PAD; k++) xpad[m * (K + PAD) + k] = k < K ? x[m * K + k] : NAN;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) wt[k * N + n] = w[n * K + k];

    loom_tensor tx, tw, ty, twt;
    /* x [2, 3, K] with padded rows: view of xpad */
    TENSOR(tx, LOOM_F32, xpad, 2, 3, K);
    tx.stride[1] = K + PAD;
    tx.stride[0] = 3 * (K + PAD);
    /* W [N, K] as the transpose of wt [K, N] */
    TENSOR(twt, LOOM_F32, wt, K, N);
    CHECK(loom_tensor_permute(&twt, (const int[]){1, 0}, &tw) == LOOM_OK);
    TENSOR(ty, LOOM_F32, y, 2, 3, N);
    const loom_tensor *src[2] = {&tx, &tw};
    RUN_OK(LOOM_OP_MATMUL, src, 2, NULL, &ty);
    for (int i = 0; i < M * N; i++) CHECK_CLOSE(y[i], want[i], 1e-6);
    check_thread_invariance(LOOM_OP_MATMUL, src, 2, NULL, &ty);
}

static void test_get_rows(void) {
    float table[6] = {1, 2, 3, 4, 5, 6};
    int32_t ids[3] = {2, 0, 2};
    float y[7];
    y[6] = -7.0f; /* guard */
    loom_tensor tt, ti, ty;
    TENSOR(tt, LOOM_F32, table, 3, 2);
    TENSOR(ti, LOOM_I32, ids, 3);
    TENSOR(ty, LOOM_F32, y, 3, 2);
    const loom_tensor *src[2] = {&tt, &ti};
    RUN_OK(LOOM_OP_GET_ROWS, src, 2, NULL, &ty);
    CHECK(y[0] == 5 && y[1] == 6 && y[2] == 1 && y[3] == 2 && y[4] == 5 && y[5] == 6);
    CHECK(y[6] == -7.0f);

    /* half-precision tables: these values are exact in f16 and bf16 */
    uint16_t th[6];
    for (int dt = LOOM_F16; dt <= LOOM_BF16; dt++) {
        for (int i = 0; i < 6; i++)
            th[i] = dt == LOOM_F16 ? loom_f32_to_f16(table[i]) : loom_f32_to_bf16(table[i]);
        TENSOR(tt, (loom_dtype)dt, th, 3, 2);
        memset(y, 0, 6 * sizeof(float));
        RUN_OK(LOOM_OP_GET_ROWS, src, 2, NULL, &ty);
        CHECK(y[0] == 5 && y[1] == 6 && y[2] == 1 && y[3] == 2 && y[4] == 5 && y[5] == 6);
    }

    /* a strided table: column 1 of a [3, 2] buffer seen as [3, 1] */
    TENSOR(tt, LOOM_F32, table + 1, 3, 1);
    tt.stride[0] = 2;
    TENSOR(ty, LOOM_F32, y, 3, 1);
    RUN_OK(LOOM_OP_GET_ROWS, src, 2, NULL, &ty);
    CHECK(y[0] == 6 && y[1] == 2 && y[2] == 6);

    /* out of range ids: error naming the id and V, nothing read out of bounds */
    TENSOR(tt, LOOM_F32, table, 3, 2);
    TENSOR(ty, LOOM_F32, y, 3, 2);
    int32_t bad_hi[3] = {0, 3, 1}, bad_lo[3] = {-1, 0, 0};
    ti.data = bad_hi;
    CHECK_FAILS(loom_op_run(LOOM_OP_GET_ROWS, src, 2, NULL, &ty, LOOM_ISA_REF));
    CHECK(strstr(loom_last_error(), "id 3") && strstr(loom_last_error(), "V = 3"));
    ti.data = bad_lo;
    CHECK_FAILS(loom_op_run(LOOM_OP_GET_ROWS, src, 2, NULL, &ty, LOOM_ISA_REF));
    CHECK(strstr(loom_last_error(), "id -1") != NULL);
    int32_t big[1] = {INT32_MAX};
    TENSOR(ti, LOOM_I32, big, 1);
    TENSOR(ty, LOOM_F32, y, 1, 2);
    CHECK_FAILS(loom_op_run(LOOM_OP_GET_ROWS, src, 2, NULL, &ty, LOOM_ISA_REF));
}

static void test_get_rows_threads(void) {
    enum { V = 11, D = 13, n = 9 };
    loom_rng rng;
    loom_rng_init(&rng, 3, 0);
    float table[V * D], y[n * D];
    int32_t ids[n];
    fill_rand(table, V * D, &rng);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(loom_rng_u32(&rng) % V);
    loom_tensor tt, ti, ty;
    TENSOR(tt, LOOM_F32, table, V, D);
    TENSOR(ti, LOOM_I32, ids, n);
    TENSOR(ty, LOOM_F32, y, n, D);
    const loom_tensor *src[2] = {&tt, &ti};
    check_thread_invariance(LOOM_OP_GET_ROWS, src, 2, NULL, &ty);
    for (int i = 0; i < n; i++)
        CHECK(memcmp(&y[i * D], &table[ids[i] * D], D * sizeof(float)) == 0);
}

int main(void) {
    RUN_TEST(test_matmul_hand);
    RUN_TEST(test_matmul_random);
    RUN_TEST(test_matmul_half_weights);
    RUN_TEST(test_matmul_views);
    RUN_TEST(test_get_rows);
    RUN_TEST(test_get_rows_threads);
    return TEST_SUMMARY();
}
