/*
 * Quantized GEMM path of the matmul family (M >= LOOM_GEMM_MIN_M, W in q8_0,
 * q4_0, q4_1; src/ops/matmul/gemm_q*.c) at every level this CPU runs, against
 * the dequantize-then-f32 reference within the activation quantization bound
 * (test_matmul_q_common.h): random shapes across tile edges, K chunks and
 * x blocks, epilogues, the op registry, and inputs built to reach the bound.
 */
#include "test_matmul_q_common.h"

static const loom_dtype qtypes[3] = {LOOM_Q8_0, LOOM_Q4_0, LOOM_Q4_1};

static void test_random_shapes(void) {
    loom_rng rng;
    loom_rng_init(&rng, 31, 0);
    for (int l = 0; l < n_levels; l++)
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < 10; i++) {
                mq p;
                int64_t M = 8 + (int64_t)(loom_rng_u32(&rng) % 60);     /* 8..67 */
                int64_t N = 1 + (int64_t)(loom_rng_u32(&rng) % 100);
                int64_t K = 32 * (1 + (int64_t)(loom_rng_u32(&rng) % 12));
                mq_init(&p, M, N, K, (int)(loom_rng_u32(&rng) % 4), qtypes[d], &rng);
                mq_set_ep(&p, i % 2 ? (int)(loom_rng_u32(&rng) % 128) & ~(EP_MUL_ALIAS | EP_RES_ALIAS) : 0,
                          i % 3 == 1 ? (loom_act)(1 + loom_rng_u32(&rng) % (LOOM_ACT_COUNT - 1)) : LOOM_ACT_NONE);
                mq_reference(&p);
                mq_check(&p, levels[l]);
                mq_free(&p);
            }
}

/* Past every blocking step: K over one 512-k chunk (partial sums through y
 * or the tile), N over several panels with a ragged edge, M over the x block
 * (4 MiB of quantized rows: 1489 rows at K = 2048, loom_q8_act_bytes). */
static void test_large_shapes(void) {
    static const int64_t shapes[][3] = {{67, 70, 1056}, {130, 97, 544}, {9, 300, 2048}, {1540, 40, 2048}};
    int n = SANITIZED ? 2 : 4;
    loom_rng rng;
    loom_rng_init(&rng, 32, 0);
    for (int l = 0; l < n_levels; l++)
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < n; i++) {
                mq p;
                mq_init(&p, shapes[i][0], shapes[i][1], shapes[i][2], i % 2 ? 3 : 0, qtypes[d], &rng);
                /* the last shape spans two x blocks: its epilogue operands are read
                 * at rows past the first block (a mul of its own, y as residual) */
                mq_set_ep(&p, i == 1 ? EP_ALL : i == 2 ? EP_RES_ALIAS | EP_BIAS : i == 3 ? EP_MUL | EP_RES_ALIAS | EP_SCALE : 0,
                          i == 1 || i == 3 ? LOOM_ACT_SILU : LOOM_ACT_NONE);
                mq_reference(&p);
                mq_check(&p, levels[l]);
                mq_free(&p);
            }
}

static void test_epilogue_steps(void) {
    static const int steps[] = {EP_SCALE, EP_BIAS, EP_MUL, EP_RES, EP_FN, EP_ALL,
                                EP_MUL_ALIAS, EP_RES_ALIAS | EP_SCALE, EP_MUL_ALIAS | EP_RES | EP_FN};
    loom_rng rng;
    loom_rng_init(&rng, 33, 0);
    for (int l = 0; l < n_levels; l++)
        for (int a = 0; a < LOOM_ACT_COUNT; a++)
            for (int s = 0; s < (int)(sizeof steps / sizeof steps[0]); s++) {
                mq p;
                mq_init(&p, 8 + (a * 7 + s) % 30, 45, 128, 1, qtypes[(a + s) % 3], &rng);
                mq_set_ep(&p, steps[s], (loom_act)a);
                mq_reference(&p);
                mq_check(&p, levels[l]);
                mq_free(&p);
            }
}

/* Through the op table at every level. */
static void test_registry(void) {
    loom_rng rng;
    loom_rng_init(&rng, 34, 0);
    for (int d = 0; d < 3; d++) {
        mq p;
        mq_init(&p, 37, 50, 192, 0, qtypes[d], &rng);
        mq_reference(&p);
        loom_tensor tx, tw, ty;
        TENSOR(tx, LOOM_F32, p.x, 37, 192);
        TENSOR(tw, qtypes[d], p.w, 50, 192);
        TENSOR(ty, LOOM_F32, p.y, 37, 50);
        const loom_tensor *src[2] = {&tx, &tw};
        for (int l = 0; l < n_levels; l++) {
            for (int64_t i = 0; i < 37 * 50; i++) p.y[i] = bits_f(SENTINEL);
            loom_status s = loom_op_run(LOOM_OP_MATMUL, src, 2, NULL, &ty, levels[l]);
            CHECK_MSG(s == LOOM_OK, "%s", loom_last_error());
            CHECK(mq_compare(&p, loom_isa_name(levels[l])) <= 1.0);
        }
        CHECK(loom_op_run(LOOM_OP_MATMUL, src, 2, NULL, &ty, LOOM_ISA_REF) == LOOM_OK);
        CHECK(memcmp(p.y, p.ref, 37 * 50 * sizeof(float)) == 0);
        mq_free(&p);
    }
}

/* The bound is reached: each block of x has one element 127/64 (so d = 1/64
 * and x / d is exact) and the others on ties (q + 1/2) / 64 with q even,
 * which round down by d / 2; with W > 0 the errors add up to 31/32 of Q (the
 * max element is exact). Both paths (M = 3: GEMV, M = 9: GEMM). */
static void test_bound_reached(void) {
    enum { K = 256, N = 20 };
    for (int path = 0; path < 2; path++)
        for (int d = 0; d < 3; d++) {
            loom_rng rng;
            loom_rng_init(&rng, 35, 0);
            mq p;
            int64_t M = path ? 9 : 3;
            mq_init(&p, M, N, K, 0, qtypes[d], &rng);
            for (int64_t m = 0; m < M; m++)
                for (int64_t k = 0; k < K; k++)
                    p.x[m * K + k] = k % 32 == (m % 32) ? 127.0f / 64.0f
                                                        : ((float)(2 * ((k * 7 + m) % 60)) + 0.5f) / 64.0f;
            float row[K];
            for (int64_t n = 0; n < N; n++) {
                for (int64_t k = 0; k < K; k++) row[k] = 0.5f + 0.01f * (float)n;
                char *dst = (char *)p.w + (size_t)n * loom_dtype_row_bytes(p.wt, K);
                loom_quantize_row(p.wt, row, dst, K);
                loom_row_to_f32(p.wt, dst, p.wf + n * K, K);
            }
            mq_reference(&p);
            for (int l = 0; l < n_levels; l++) {
                CHECK(mq_run(&p, levels[l], 1) == LOOM_OK);
                double lo = 1.0, hi = 0.0;
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < N; n++) {
                        double r = fabs((double)p.y[m * N + n] - p.ref[m * N + n]) / mq_qbound(&p, m, n);
                        lo = r < lo ? r : lo;
                        hi = r > hi ? r : hi;
                    }
                CHECK_MSG(lo > 31.0 / 32 - 1e-3 && hi < 31.0 / 32 + 1e-3,
                          "%s %s M=%lld: error %.5f..%.5f of the bound, expected 31/32",
                          loom_isa_name(levels[l]), loom_dtype_name(p.wt), (long long)M, lo, hi);
            }
            mq_free(&p);
        }
}

static void test_nan_rows(void) {
    loom_rng rng;
    loom_rng_init(&rng, 36, 0);
    for (int l = 0; l < n_levels; l++)
        for (int d = 0; d < 3; d++) {
            mq p;
            mq_init(&p, 19, 45, 96, 1, qtypes[d], &rng);
            mq_check_nan_row(&p, levels[l]);
            mq_free(&p);
        }
}

/* x quantized once by loom_matmul_quantize_x and passed as xq (as the fused
 * FFN and QKV kernels do for their column blocks) gives exactly the output of
 * the GEMM quantizing x itself, for every format, level, thread split and
 * column block, with an epilogue, on the GEMM (M >= 8) and GEMV (M < 8)
 * paths; f32 weights need none. */
static void test_prequantized_x(void) {
    loom_rng rng;
    loom_rng_init(&rng, 37, 0);
    const int64_t Ms[5] = {8, 37, 130, 1, 5}, Ns[2] = {45, 96};
    for (int l = 0; l < n_levels; l++)
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < 5; i++) {
                mq p;
                mq_init(&p, Ms[i], Ns[i % 2], 32 * (1 + i * 3), 1, qtypes[d], &rng);
                mq_set_ep(&p, EP_BIAS | EP_RES, LOOM_ACT_SILU);
                CHECK(mq_run(&p, levels[l], 2) == LOOM_OK);
                float *want = falloc(p.M * p.ldy);
                memcpy(want, p.y, (size_t)(p.M * p.ldy) * sizeof(float));
                loom_matmul_args a = mq_args(&p, p.y, p.ldy);
                size_t xb = loom_matmul_xq_bytes(&a);
                CHECK(xb == (size_t)p.M * loom_q8_act_bytes(p.K));
                void *xq = loom_alloc_aligned(xb, LOOM_ALIGN);
                memset(xq, 0x5A, xb);
                loom_matmul_quantize_x(&a, levels[l], 0, p.M / 2, xq);  /* in two pieces */
                loom_matmul_quantize_x(&a, levels[l], p.M / 2, p.M, xq);
                /* column blocks of 16, one thread each, like a fused kernel's items */
                for (int64_t n0 = 0; n0 < p.N; n0 += 16) {
                    loom_matmul_args b = a;
                    int64_t nb = p.N - n0 < 16 ? p.N - n0 : 16;
                    b.w = (const char *)p.w + (size_t)n0 * loom_dtype_row_bytes(p.wt, p.ldw);
                    b.y = p.y + n0, b.N = nb, b.xq = xq;
                    loom_epilogue e = p.ep;
                    e.bias = p.bias + n0, e.residual = p.res + n0;
                    b.ep = &e;
                    for (int64_t m = 0; m < p.M; m++)
                        for (int64_t n = 0; n < nb; n++) p.y[m * p.ldy + n0 + n] = bits_f(SENTINEL);
                    size_t sb = loom_matmul_scratch_size(&b);
                    void *s = loom_alloc_aligned(sb, LOOM_ALIGN);
                    memset(s, 0xA7, sb);
                    CHECK(loom_matmul_run(&b, levels[l], 0, 1, s) == LOOM_OK);
                    loom_free_aligned(s);
                }
                int same = memcmp(want, p.y, (size_t)(p.M * p.ldy) * sizeof(float)) == 0;
                CHECK_MSG(same, "%s %s M=%lld: prequantized x changes the output",
                          loom_isa_name(levels[l]), loom_dtype_name(p.wt), (long long)p.M);
                loom_free_aligned(xq);
                free(want);
                mq_free(&p);
            }
    /* f32 weights: nothing to pre-quantize */
    loom_matmul_args f = {.M = 64, .N = 8, .K = 64, .wtype = LOOM_F32};
    CHECK(loom_matmul_xq_bytes(&f) == 0);
}

int main(void) {
    find_levels();
    RUN_TEST(test_random_shapes);
    RUN_TEST(test_large_shapes);
    RUN_TEST(test_epilogue_steps);
    RUN_TEST(test_registry);
    RUN_TEST(test_bound_reached);
    RUN_TEST(test_nan_rows);
    RUN_TEST(test_prequantized_x);
    return TEST_SUMMARY();
}
