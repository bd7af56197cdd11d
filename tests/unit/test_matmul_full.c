/*
 * Quantized weights with full activations (loom_matmul_args.act =
 * LOOM_ACT_PREC_FULL: x stays f32, W's blocks dequantized in the kernel) on
 * the GEMV (M < 8) and GEMM paths at every level this CPU runs, against the
 * reference (dequantized W times f32 x summed in f64) with the f32 rule
 * 2^-11 * max(1, |ref|) (test_matmul_q_common.h): random shapes whose sizes
 * are multiples of no tile, strided operands, epilogues, rows past the
 * kernels' chunks of scales, forced GEMM blocks, NaN rows, the registry with
 * and without the matmul attribute, guards around y and byte-identical
 * results for 1, 2, 3 and 5 threads. Also: on activations with an outlier
 * per block, the q8 path's error is far above the f32 rule and full's within
 * it (what the option is for). The M = 1 q4 cases run both GEMV kernels of
 * the AVX-512 level: bf16 products (AVX512_BF16 CPUs) and f32.
 */
#include "test_matmul_q_common.h"

#include "ops/matmul/gemm_kernels.h"

#include "base/variants.h"

/* gemv.q4_full: 1 the bf16-product kernel (where the CPU has AVX512_BF16;
 * elsewhere the choice is refused and the f32 kernel runs), 0 the f32 one. */
static void force_q4_variant(int bf16) {
    (void)loom_variant_set(LOOM_VF_GEMV_Q4_FULL, bf16 ? 0 : 1, LOOM_VS_FORCED);
}

static const loom_dtype qtypes[3] = {LOOM_Q8_0, LOOM_Q4_0, LOOM_Q4_1};

static void check_full(int64_t M, int64_t N, int64_t K, int pad, loom_dtype wt, int ep_flags, loom_act act,
                       loom_isa isa, loom_rng *rng) {
    mq p;
    mq_init(&p, M, N, K, pad, wt, rng);
    p.act = LOOM_ACT_PREC_FULL;
    mq_set_ep(&p, ep_flags, act);
    mq_reference(&p);
    mq_check(&p, isa);
    mq_free(&p);
}

/* GEMV rows (M 1..7) and GEMM rows (8..67): N, K and the strides random;
 * at M = 1 with q4 weights both the bf16-product kernel (AVX512_BF16 CPUs)
 * and the f32 one. */
static void test_random_shapes(void) {
    loom_rng rng;
    loom_rng_init(&rng, 61, 0);
    for (int bf16 = 1; bf16 >= 0; bf16--) {
        force_q4_variant(bf16);
        for (int l = 0; l < n_levels; l++)
            for (int d = 0; d < 3; d++)
                for (int i = 0; i < 16; i++) {
                    int64_t M = i < 8 ? 1 + i % 7 : 8 + (int64_t)(loom_rng_u32(&rng) % 60);
                    int64_t N = 1 + (int64_t)(loom_rng_u32(&rng) % 100);
                    int64_t K = 32 * (1 + (int64_t)(loom_rng_u32(&rng) % 13));
                    int ep = i % 2 ? (int)(loom_rng_u32(&rng) % 128) & ~(EP_MUL_ALIAS | EP_RES_ALIAS) : 0;
                    loom_act act =
                        i % 3 == 1 ? (loom_act)(1 + loom_rng_u32(&rng) % (LOOM_ACT_COUNT - 1)) : LOOM_ACT_NONE;
                    check_full(M, N, K, (int)(loom_rng_u32(&rng) % 4), qtypes[d], ep, act, levels[l], &rng);
                }
    }
    force_q4_variant(1);
}

/* Rows longer than the GEMV's chunks of 64 scales (K = 2080, 4128: 65 and
 * 129 blocks), past one 64-row output chunk, and GEMM shapes over several K
 * blocks and panels, with y read in place by the epilogue. */
static void test_long_shapes(void) {
    static const int64_t shapes[][3] = {{1, 130, 4128}, {3, 67, 2080}, {7, 33, 2048}, {9, 70, 4128},
                                        {67, 97, 1056}, {130, 40, 2080}};
    static const int eps[] = {0, EP_BIAS | EP_RES, EP_MUL_ALIAS, EP_RES_ALIAS | EP_SCALE, EP_ALL, EP_MUL | EP_RES_ALIAS};
    int n = SANITIZED ? 3 : 6;
    loom_rng rng;
    loom_rng_init(&rng, 62, 0);
    for (int bf16 = 1; bf16 >= 0; bf16--) {
        force_q4_variant(bf16);
        for (int l = 0; l < n_levels; l++)
            for (int d = 0; d < 3; d++)
                for (int i = 0; i < n; i++)
                    check_full(shapes[i][0], shapes[i][1], shapes[i][2], i % 2 ? 3 : 0, qtypes[d], eps[i],
                               i == 4 ? LOOM_ACT_SILU : LOOM_ACT_NONE, levels[l], &rng);
    }
    force_q4_variant(1);
}

/* Forced GEMM blocks: kc 40 (rounded up to whole blocks: 64), several row
 * and column blocks, so packing starts at every block offset of a row. */
static void test_forced_blocks(void) {
    loom_rng rng;
    loom_rng_init(&rng, 63, 0);
    loom_gemm_set_blocks(40, 20, 40);
    for (int l = 0; l < n_levels; l++)
        for (int d = 0; d < 3; d++) {
            check_full(45, 77, 224, 1, qtypes[d], 0, LOOM_ACT_NONE, levels[l], &rng);
            check_full(29, 50, 160, 0, qtypes[d], EP_BIAS | EP_RES_ALIAS, LOOM_ACT_SILU, levels[l], &rng);
        }
    loom_gemm_set_blocks(0, 0, 0);
}

static void test_nan_rows(void) {
    loom_rng rng;
    loom_rng_init(&rng, 64, 0);
    static const int64_t Ms[3] = {1, 3, 19};
    for (int bf16 = 1; bf16 >= 0; bf16--) {
        force_q4_variant(bf16);
        for (int l = 0; l < n_levels; l++)
            for (int d = 0; d < 3; d++)
                for (int i = 0; i < 3; i++) {
                    mq p;
                    mq_init(&p, Ms[i], 45, 96, 1, qtypes[d], &rng);
                    p.act = LOOM_ACT_PREC_FULL;
                    mq_check_nan_row(&p, levels[l]);
                    mq_free(&p);
                }
    }
    force_q4_variant(1);
}

/* The op table: no attributes (or q8) is the q8 path, the attribute full
 * gives the full path's bytes; both paths' x scratch queries. */
static void test_registry(void) {
    loom_rng rng;
    loom_rng_init(&rng, 65, 0);
    for (int d = 0; d < 3; d++)
        for (int64_t M = 5; M <= 37; M += 32) {
            mq p;
            mq_init(&p, M, 50, 192, 0, qtypes[d], &rng);
            p.act = LOOM_ACT_PREC_FULL;
            mq_reference(&p);
            loom_tensor tx, tw, ty;
            TENSOR(tx, LOOM_F32, p.x, M, 192);
            TENSOR(tw, qtypes[d], p.w, 50, 192);
            TENSOR(ty, LOOM_F32, p.y, M, 50);
            const loom_tensor *src[2] = {&tx, &tw};
            const loom_matmul_attrs full = {.act_precision = LOOM_ACT_PREC_FULL};
            const loom_matmul_attrs q8 = {.act_precision = LOOM_ACT_PREC_Q8};
            for (int l = 0; l < n_levels; l++) {
                CHECK(mq_run(&p, levels[l], 1) == LOOM_OK);
                float *want = falloc(M * 50);
                memcpy(want, p.y, (size_t)(M * 50) * sizeof(float));
                CHECK(loom_op_run(LOOM_OP_MATMUL, src, 2, &full, &ty, levels[l]) == LOOM_OK);
                CHECK_MSG(memcmp(want, p.y, (size_t)(M * 50) * sizeof(float)) == 0,
                          "%s %s M=%lld: the registry with act_precision full differs from the full path",
                          loom_isa_name(levels[l]), loom_dtype_name(qtypes[d]), (long long)M);
                /* q8: NULL attributes and LOOM_ACT_PREC_Q8 give the q8 path */
                p.act = LOOM_ACT_PREC_Q8;
                CHECK(mq_run(&p, levels[l], 1) == LOOM_OK);
                memcpy(want, p.y, (size_t)(M * 50) * sizeof(float));
                CHECK(loom_op_run(LOOM_OP_MATMUL, src, 2, NULL, &ty, levels[l]) == LOOM_OK);
                CHECK(memcmp(want, p.y, (size_t)(M * 50) * sizeof(float)) == 0);
                CHECK(loom_op_run(LOOM_OP_MATMUL, src, 2, &q8, &ty, levels[l]) == LOOM_OK);
                CHECK(memcmp(want, p.y, (size_t)(M * 50) * sizeof(float)) == 0);
                p.act = LOOM_ACT_PREC_FULL;
                free(want);
            }
            loom_matmul_args a = mq_args(&p, p.y, p.ldy);
            CHECK(loom_matmul_xq_bytes(&a) == 0);  /* full: x is not pre-quantized */
            a.act = LOOM_ACT_PREC_Q8;
            CHECK(loom_matmul_xq_bytes(&a) == (size_t)M * loom_q8_act_bytes(192));
            mq_free(&p);
        }
}

/* What full activations are for: each block of x holds one large value (an
 * activation outlier) and small ones, which q8 rounds to a few levels. The
 * q8 path's error then exceeds the f32 rule by far; full stays within it. */
static void test_outliers(void) {
    enum { K = 512, N = 24 };
    loom_rng rng;
    loom_rng_init(&rng, 66, 0);
    for (int bf16 = 1; bf16 >= 0; bf16--)
    for (int l = 0; l < n_levels; l++)
        for (int d = 0; d < 3; d++)
            for (int64_t M = 1; M <= 9; M += 8) {
                mq p;
                mq_init(&p, M, N, K, 0, qtypes[d], &rng);
                for (int64_t m = 0; m < M; m++)
                    for (int64_t k = 0; k < K; k++) p.x[m * K + k] = k % 32 == 5 ? 60.0f : 0.01f * frand(&rng);
                /* W without the outlier column, so the exact result is small */
                for (int64_t n = 0; n < N; n++) {
                    float row[K];
                    for (int64_t k = 0; k < K; k++) row[k] = k % 32 == 5 ? 0.0f : frand(&rng);
                    char *dst = (char *)p.w + (size_t)n * loom_dtype_row_bytes(p.wt, K);
                    loom_quantize_row(p.wt, row, dst, K);
                    loom_row_to_f32(p.wt, dst, p.wf + n * K, K);
                }
                mq_reference(&p);
                force_q4_variant(bf16);
                double worst[2];
                for (int f = 0; f < 2; f++) {
                    p.act = f ? LOOM_ACT_PREC_FULL : LOOM_ACT_PREC_Q8;
                    CHECK(mq_run(&p, levels[l], 1) == LOOM_OK);
                    worst[f] = 0.0;
                    for (int64_t i = 0; i < M * N; i++) {
                        double r = p.ref[i], e = fabs(p.y[i] - r) / (fabs(r) > 1.0 ? fabs(r) : 1.0);
                        worst[f] = e > worst[f] ? e : worst[f];
                    }
                }
                CHECK_MSG(worst[0] > 8.0 / 2048 && worst[1] <= 1.0 / 2048,
                          "%s %s M=%lld: relative error q8 %.3g, full %.3g (expected q8 > 2^-8, full <= 2^-11)",
                          loom_isa_name(levels[l]), loom_dtype_name(p.wt), (long long)M, worst[0], worst[1]);
                mq_free(&p);
            }
    force_q4_variant(1);
}

int main(void) {
    find_levels();
    RUN_TEST(test_random_shapes);
    RUN_TEST(test_long_shapes);
    RUN_TEST(test_forced_blocks);
    RUN_TEST(test_nan_rows);
    RUN_TEST(test_registry);
    RUN_TEST(test_outliers);
    return TEST_SUMMARY();
}
