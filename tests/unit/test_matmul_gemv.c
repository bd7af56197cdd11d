/*
 * GEMV path of the matmul family (M < LOOM_GEMM_MIN_M; src/ops/matmul/gemv*.c)
 * at every level this CPU runs, for every weight dtype, against the reference
 * (pass rules in test_matmul_q_common.h): random shapes with strides and
 * epilogues, long rows, every epilogue step, y read in place by the epilogue,
 * column slices in one sweep (loom_gemv_slices), and the op registry.
 */
#include "test_matmul_q_common.h"

#include "ops/matmul/gemv_kernels.h"

static const loom_dtype all_types[6] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_Q8_0, LOOM_Q4_0, LOOM_Q4_1};

/* K for dtype t: any for float weights (incl. 1, 3, 17, 67, 511), whole
 * blocks (odd and even counts) for block formats. */
static int64_t pick_k(loom_dtype t, loom_rng *rng) {
    static const int64_t ks[] = {1, 3, 17, 67, 511, 16, 33, 129};
    if (loom_dtype_is_quantized(t)) return 32 * (1 + (int64_t)(loom_rng_u32(rng) % 13));
    return loom_rng_u32(rng) % 2 ? ks[loom_rng_u32(rng) % 8] : 1 + (int64_t)(loom_rng_u32(rng) % 300);
}

static void test_random_shapes(void) {
    loom_rng rng;
    loom_rng_init(&rng, 21, 0);
    for (int l = 0; l < n_levels; l++)
        for (int d = 0; d < 6; d++)
            for (int i = 0; i < 14; i++) {
                mq p;
                int64_t M = 1 + i % 7, N = 1 + (int64_t)(loom_rng_u32(&rng) % 150);
                mq_init(&p, M, N, pick_k(all_types[d], &rng), (int)(loom_rng_u32(&rng) % 4), all_types[d], &rng);
                mq_set_ep(&p, i % 2 ? (int)(loom_rng_u32(&rng) % 32) : 0,
                          i % 4 == 1 ? (loom_act)(1 + loom_rng_u32(&rng) % (LOOM_ACT_COUNT - 1)) : LOOM_ACT_NONE);
                mq_reference(&p);
                mq_check(&p, levels[l]);
                mq_free(&p);
            }
}

/* Decode-like rows: K = 4096 (the bf16 tolerance widens to 2^-6), rows past
 * one 64-row chunk, and a long odd number of blocks. */
static void test_long_rows(void) {
    static const int64_t shapes[][3] = {{1, 130, 4096}, {3, 67, 4096}, {7, 33, 2080}, {2, 200, 1056}};
    int n = SANITIZED ? 2 : 4;
    loom_rng rng;
    loom_rng_init(&rng, 22, 0);
    for (int l = 0; l < n_levels; l++)
        for (int d = 0; d < 6; d++)
            for (int i = 0; i < n; i++) {
                mq p;
                mq_init(&p, shapes[i][0], shapes[i][1], shapes[i][2], i % 2, all_types[d], &rng);
                mq_set_ep(&p, i == 1 ? EP_BIAS | EP_RES : 0, LOOM_ACT_NONE);
                mq_reference(&p);
                mq_check(&p, levels[l]);
                mq_free(&p);
            }
}

/* M = 1 with quantized q4 W reads x reordered once a call (K <= 16384, kept on
 * the stack) or, past that, shuffles it per step: both sides of the limit,
 * tails of 1-3 rows (rows go in groups of four), odd block counts. */
static void test_m1_long_k(void) {
    static const int64_t shapes[][2] = {{7, 16384}, {6, 16416}, {5, 16352}, {9, 20000 / 32 * 32}};
    loom_rng rng;
    loom_rng_init(&rng, 26, 0);
    for (int l = 0; l < n_levels; l++)
        for (int d = 3; d < 6; d++)
            for (int i = 0; i < 4; i++) {
                mq p;
                mq_init(&p, 1, shapes[i][0], shapes[i][1], i % 2, all_types[d], &rng);
                mq_reference(&p);
                mq_check(&p, levels[l]);
                mq_free(&p);
            }
}

/* M = 1 with float W: rows of K >= 8192 go two at a time (gemv_avx512.c), the
 * rest one by one: both sides of the limit, odd K, an odd row count (the last
 * row alone), with y past one 64-row chunk. */
static void test_m1_long_float_rows(void) {
    static const int64_t shapes[][2] = {{3, 8191}, {5, 8192}, {7, 8193}, {67, 11008}};
    loom_rng rng;
    loom_rng_init(&rng, 27, 0);
    for (int l = 0; l < n_levels; l++)
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < (SANITIZED ? 2 : 4); i++) {
                mq p;
                mq_init(&p, 1, shapes[i][0], shapes[i][1], i % 2, all_types[d], &rng);
                mq_set_ep(&p, i == 3 ? EP_BIAS | EP_RES : 0, LOOM_ACT_NONE);
                mq_reference(&p);
                mq_check(&p, levels[l]);
                mq_free(&p);
            }
}

/* Float W whose rows are segments of much longer rows (ldw several times K,
 * the ffn one pass's column slices): the kernels fetch such rows ahead by row
 * (loom_gemv_segment_ahead), past the last row too; the results are those of
 * the reference. */
static void test_row_segments(void) {
    /* rows fetched ahead: about 4 KiB, only for rows skipping 256 bytes or more */
    loom_matmul_args sa = {.K = 1408, .ldw = 11008};
    CHECK(loom_gemv_segment_ahead(&sa, 2) == 2 && loom_gemv_segment_ahead(&sa, 4) == 1);
    sa.K = 67, sa.ldw = 2067;
    CHECK(loom_gemv_segment_ahead(&sa, 4) == 16);
    sa.ldw = 67 + 63;
    CHECK(loom_gemv_segment_ahead(&sa, 4) == 0); /* padded rows: along the row */
    sa.ldw = 67 + 64;
    CHECK(loom_gemv_segment_ahead(&sa, 4) == 16);
    sa.ldw = 67;
    CHECK(loom_gemv_segment_ahead(&sa, 4) == 0);
    static const int64_t shapes[][4] = {{1, 70, 67, 2000}, {2, 40, 1376, 9632}, {3, 33, 200, 600}, {1, 130, 512, 3584}};
    loom_rng rng;
    loom_rng_init(&rng, 28, 0);
    for (int l = 0; l < n_levels; l++)
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < 4; i++) {
                mq p;
                mq_init(&p, shapes[i][0], shapes[i][1], shapes[i][2], (int)shapes[i][3], all_types[d], &rng);
                mq_reference(&p);
                mq_check(&p, levels[l]);
                mq_free(&p);
            }
}

/* loom_gemv_slices: n adjacent (or gapped) column slices of one float W, each
 * with its own x and y, in one sweep of the rows: every slice's values the
 * same bits as loom_matmul_run on it alone, at every vector level, M 1-7,
 * odd N (rows past a group of four) and K, spans of the whole row and spans
 * that are a segment of it (fetched ahead by row); and the calls it declines
 * (nothing written): the generic level, quantized W, batch-invariant calls,
 * an epilogue, slices differing in N, M, ldw or dtype, M of 0 or 8, more
 * than 256 slices, a slice of 8192 columns at AVX-512; and a failing check. */
static void test_slices(void) {
    loom_rng rng;
    loom_rng_init(&rng, 29, 0);
    for (int l = 0; l < n_levels; l++)
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < 7; i++) {
                loom_dtype t = all_types[d];
                int ns = 1 + (int)(loom_rng_u32(&rng) % 9), gap = i % 3 == 2 ? 5 : 0;
                /* odd i: the span a segment of the row (other columns before and after it) */
                int64_t M = 1 + i, N = 1 + (int64_t)(loom_rng_u32(&rng) % 70), k[9], k0[9];
                int64_t ldw = i % 2 ? 100 : 0;
                for (int j = 0; j < ns; j++) {
                    k[j] = 1 + (int64_t)(loom_rng_u32(&rng) % 300);
                    k0[j] = ldw, ldw += k[j] + gap;
                }
                ldw += i % 2 ? 300 : (int64_t)(loom_rng_u32(&rng) % 40);
                size_t es = t == LOOM_F32 ? 4 : 2;
                char *w = malloc((size_t)(N * ldw) * es);
                for (int64_t e = 0; e < N * ldw; e++) {
                    float v = 2.0f * loom_rng_uniform(&rng) - 1.0f;
                    if (t == LOOM_F32) memcpy(w + (size_t)e * 4, &v, 4);
                    else {
                        uint16_t h = t == LOOM_F16 ? loom_f32_to_f16(v) : loom_f32_to_bf16(v);
                        memcpy(w + (size_t)e * 2, &h, 2);
                    }
                }
                float *x = malloc(sizeof(float) * (size_t)(M * ldw)), *y = malloc(sizeof(float) * (size_t)(2 * ns * M * N));
                for (int64_t e = 0; e < M * ldw; e++) x[e] = 2.0f * loom_rng_uniform(&rng) - 1.0f;
                loom_matmul_args a[9];
                for (int j = 0; j < ns; j++)
                    a[j] = (loom_matmul_args){.x = x + k0[j], .ldx = ldw, .w = w + (size_t)k0[j] * es, .ldw = ldw,
                                              .wtype = t, .y = y + j * M * N, .ldy = N, .M = M, .N = N, .K = k[j]};
                int done = -1;
                CHECK(loom_gemv_slices(a, ns, levels[l], &done) == LOOM_OK);
                CHECK_MSG(done == (levels[l] >= LOOM_ISA_AVX2), "level %s: done %d", loom_isa_name(levels[l]), done);
                for (int j = 0; j < ns; j++) {
                    loom_matmul_args b = a[j];
                    b.y = y + (ns + j) * M * N;
                    CHECK(loom_matmul_run(&b, levels[l], 0, 1, NULL) == LOOM_OK);
                }
                if (done)
                    CHECK_MSG(memcmp(y, y + ns * M * N, sizeof(float) * (size_t)(ns * M * N)) == 0,
                              "%s %s: %d slices of M %lld N %lld: not the bits of one call a slice",
                              loom_isa_name(levels[l]), loom_dtype_name(t), ns, (long long)M, (long long)N);
                free(w), free(x), free(y);
            }
    /* declined: nothing written */
    float x[64] = {0}, w[64 * 4] = {0}, y[64];
    loom_matmul_args s[2] = {{.x = x, .ldx = 64, .w = w, .ldw = 64, .wtype = LOOM_F32, .y = y, .ldy = 4, .M = 1, .N = 4, .K = 32},
                             {.x = x + 32, .ldx = 64, .w = w + 32, .ldw = 64, .wtype = LOOM_F32, .y = y + 4, .ldy = 4, .M = 1, .N = 4, .K = 32}};
    loom_isa best = loom_cpu_best_isa();
    int done = -1;
    for (int c = 0; c < 9 && best >= LOOM_ISA_AVX2; c++) {
        loom_matmul_args b[2] = {s[0], s[1]};
        loom_epilogue ep = {.scale = 2.0f};
        if (c == 0) b[1].wtype = LOOM_Q8_0, b[0].wtype = LOOM_Q8_0;
        if (c == 1) b[1].invariant = 1;
        if (c == 2) b[0].ep = &ep;
        if (c == 3) b[1].N = 3;
        if (c == 4) b[0].M = b[1].M = LOOM_GEMM_MIN_M;
        if (c == 5) b[1].M = 2;
        if (c == 6) b[1].ldw = 48;
        if (c == 7) b[1].wtype = LOOM_F16;
        if (c == 8) b[0].M = b[1].M = 0;
        memset(y, 0x7f, sizeof y);
        uint32_t y0;
        CHECK(loom_gemv_slices(b, 2, best, &done) == LOOM_OK && done == 0);
        memcpy(&y0, y, sizeof y0);
        CHECK(y0 == 0x7f7f7f7fu);
    }
    CHECK(loom_gemv_slices(s, 2, LOOM_ISA_GENERIC, &done) == LOOM_OK && done == 0);
    loom_matmul_args *many = malloc(sizeof *many * 257);
    for (int j = 0; j < 257; j++) many[j] = s[0];
    CHECK(loom_gemv_slices(many, 257, best, &done) == LOOM_OK && done == 0);
    free(many);
    if (best >= LOOM_ISA_AVX512) {
        loom_matmul_args b[1] = {s[0]};
        b[0].K = 8192, b[0].ldw = 8192 + 64;
        CHECK(loom_gemv_slices(b, 1, LOOM_ISA_AVX512, &done) == LOOM_OK && done == 0);
    }
    if (best >= LOOM_ISA_AVX2) { /* a check failing: x too short for ldx */
        loom_matmul_args b[2] = {s[0], s[1]};
        b[1].ldx = 16;
        CHECK(loom_gemv_slices(b, 2, best, &done) != LOOM_OK && done == 0);
    }
}

/* Each epilogue step alone and all together, with every activation; the
 * epilogue reading y in place (SwiGLU's y = silu(x.Wg^T) * y). */
static void test_epilogue_steps(void) {
    static const int steps[] = {EP_SCALE, EP_BIAS, EP_MUL, EP_RES, EP_FN, EP_ALL,
                                EP_MUL_ALIAS, EP_RES_ALIAS | EP_SCALE, EP_MUL_ALIAS | EP_RES | EP_FN};
    loom_rng rng;
    loom_rng_init(&rng, 23, 0);
    for (int l = 0; l < n_levels; l++)
        for (int a = 0; a < LOOM_ACT_COUNT; a++)
            for (int s = 0; s < (int)(sizeof steps / sizeof steps[0]); s++) {
                mq p;
                loom_dtype t = all_types[(a + s) % 6];
                mq_init(&p, 1 + (a + s) % 7, 70, loom_dtype_is_quantized(t) ? 96 : 45, 2, t, &rng);
                mq_set_ep(&p, steps[s], (loom_act)a);
                mq_reference(&p);
                mq_check(&p, levels[l]);
                mq_free(&p);
            }
}

/* Through the op table: matmul with quantized W (and 3-D x: M = 2 * 3) at
 * every level gives the reference within the bound. */
static void test_registry(void) {
    loom_rng rng;
    loom_rng_init(&rng, 24, 0);
    for (int d = 3; d < 6; d++) {
        mq p;
        mq_init(&p, 6, 40, 160, 0, all_types[d], &rng);
        mq_reference(&p);
        loom_tensor tx, tw, ty;
        TENSOR(tx, LOOM_F32, p.x, 2, 3, 160);
        TENSOR(tw, all_types[d], p.w, 40, 160);
        TENSOR(ty, LOOM_F32, p.y, 2, 3, 40);
        const loom_tensor *src[2] = {&tx, &tw};
        for (int l = 0; l < n_levels; l++) {
            for (int64_t i = 0; i < 6 * 40; i++) p.y[i] = bits_f(SENTINEL);
            loom_status s = loom_op_run(LOOM_OP_MATMUL, src, 2, NULL, &ty, levels[l]);
            CHECK_MSG(s == LOOM_OK, "%s", loom_last_error());
            CHECK(mq_compare(&p, loom_isa_name(levels[l])) <= 1.0);
        }
        /* the reference kernel of the op table agrees with the family's */
        CHECK(loom_op_run(LOOM_OP_MATMUL, src, 2, NULL, &ty, LOOM_ISA_REF) == LOOM_OK);
        CHECK(memcmp(p.y, p.ref, 6 * 40 * sizeof(float)) == 0);
        mq_free(&p);
    }
}

static void test_nan_rows(void) {
    loom_rng rng;
    loom_rng_init(&rng, 25, 0);
    for (int l = 0; l < n_levels; l++)
        for (int d = 0; d < 6; d++) {
            mq p;
            mq_init(&p, 5, 37, 96, 1, all_types[d], &rng);
            mq_check_nan_row(&p, levels[l]);
            mq_free(&p);
        }
}

int main(void) {
    find_levels();
    RUN_TEST(test_random_shapes);
    RUN_TEST(test_long_rows);
    RUN_TEST(test_m1_long_k);
    RUN_TEST(test_m1_long_float_rows);
    RUN_TEST(test_row_segments);
    RUN_TEST(test_slices);
    RUN_TEST(test_epilogue_steps);
    RUN_TEST(test_registry);
    RUN_TEST(test_nan_rows);
    return TEST_SUMMARY();
}
