/*
 * Weights packed once for the quantized GEMM (src/ops/matmul/packed.c): the
 * GEMM over registered weights reads their compact panels, and every result is
 * the same bytes as packing on the call (and within the reference bound, for
 * nth 1, 2, 3, 5: test_matmul_q_common.h). Row ranges hit at panel
 * boundaries and fall back elsewhere; freeing unregisters; overlaps and bad
 * arguments are errors.
 */
#include "test_matmul_q_common.h"

static const loom_dtype qtypes[3] = {LOOM_Q8_0, LOOM_Q4_0, LOOM_Q4_1};

/* y of p at level isa on one thread, unpacked, into a fresh copy of ybuf. */
static float *run_copy(mq *p, loom_isa isa) {
    CHECK(mq_run(p, isa, 1) == LOOM_OK);
    size_t bytes = (size_t)(2 * GUARD + p->M * p->ldy) * sizeof(float);
    float *c = malloc(bytes);
    memcpy(c, p->ybuf, bytes);
    return c;
}

static loom_pack_desc desc_of(const mq *p) {
    loom_pack_desc d = {p->w, p->wt, p->N, p->K, p->ldw};
    return d;
}

typedef struct seen {
    int calls;
    const void *w;
    size_t bytes;
} seen;

static void on_packed(const void *w, size_t bytes, void *ctx) {
    seen *s = ctx;
    s->calls++, s->w = w, s->bytes = bytes;
}

static void test_same_bits(void) {
    loom_rng rng;
    loom_rng_init(&rng, 71, 0);
    int packed_runs = 0;
    for (int l = 0; l < n_levels; l++)
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < 8; i++) {
                mq p;
                int64_t M = 1 + (int64_t)(loom_rng_u32(&rng) % 40);
                int64_t N = 1 + (int64_t)(loom_rng_u32(&rng) % 150);
                int64_t K = 32 * (1 + (int64_t)(loom_rng_u32(&rng) % 40)); /* past one 512-k chunk */
                mq_init(&p, M, N, K, (int)(loom_rng_u32(&rng) % 4), qtypes[d], &rng);
                p.invariant = M < LOOM_GEMM_MIN_M; /* the GEMM at every row count */
                mq_set_ep(&p, i % 2 ? EP_BIAS | EP_RES : 0, i % 3 == 1 ? LOOM_ACT_SILU : LOOM_ACT_NONE);
                mq_reference(&p);
                float *want = run_copy(&p, levels[l]);
                loom_pack_desc dd = desc_of(&p);
                loom_packed_weights *pw = NULL;
                /* nth 1..4 (one unit of 64 panels at these sizes: test_threads runs several) */
                seen s = {0};
                CHECK(loom_packed_weights_create_cb(&dd, 1, levels[l], 1 + i % 4, on_packed, &s, &pw) == LOOM_OK);
                size_t expect = loom_matmul_packed_bytes(p.wt, N, K, levels[l]);
                CHECK(loom_packed_weights_bytes(pw) == expect);
                CHECK(loom_packed_weights_count(pw) == (expect > 0));
                const void *src = NULL;
                CHECK(expect == 0 || (loom_packed_weights_source(pw, 0, &src) == N * loom_dtype_row_bytes(p.wt, p.ldw) &&
                                      src == p.w));
                CHECK_MSG(s.calls == (expect > 0) && (expect == 0 || (s.w == p.w && s.bytes == N * loom_dtype_row_bytes(p.wt, p.ldw))),
                          "packed %d times", s.calls);
                uint64_t h0 = loom_matmul_packed_hits();
                mq_check(&p, levels[l]);
                uint64_t h1 = loom_matmul_packed_hits();
                /* a hit per call (nth 1, 2, 3, 5), counted by its thread 0 */
                CHECK_MSG(expect == 0 ? h1 == h0 : h1 > h0, "%s %s: packed panels %s", loom_isa_name(levels[l]),
                          loom_dtype_name(p.wt), expect ? "not read" : "read without a packed form");
                packed_runs += expect > 0;
                CHECK(mq_run(&p, levels[l], 1) == LOOM_OK);
                size_t bytes = (size_t)(2 * GUARD + M * p.ldy) * sizeof(float);
                CHECK_MSG(memcmp(want, p.ybuf, bytes) == 0, "%s %s M=%lld N=%lld K=%lld: packed differs",
                          loom_isa_name(levels[l]), loom_dtype_name(p.wt), (long long)M, (long long)N, (long long)K);
                uint64_t h2 = loom_matmul_packed_hits();
                loom_packed_weights_free(pw); /* unregistered: packing on the call again */
                CHECK(mq_run(&p, levels[l], 1) == LOOM_OK);
                CHECK(loom_matmul_packed_hits() == h2);
                free(want);
                mq_free(&p);
            }
    if (loom_matmul_packed_bytes(LOOM_Q4_0, 32, 32, loom_cpu_best_isa()) == 0)
        printf("  (this CPU's quantized GEMM has no compact form: packing skips every matrix)\n");
    else CHECK(packed_runs > 0);
}

/* 2..7 rows of quantized weights take the GEMM at a level with packed
 * weights (VNNI), packed or not: within the reference bound, the bytes of the
 * batch-invariant GEMM (which takes the GEMM at every row count), the same
 * bytes with the weights packed. One row takes the GEMV unpacked and the GEMM
 * over the packed panels: then the batch-invariant GEMM's bytes too. */
static void test_few_rows(void) {
    loom_isa isa = loom_cpu_best_isa();
    int vnni = loom_matmul_packed_bytes(LOOM_Q4_0, 32, 32, isa) > 0;
    loom_rng rng;
    loom_rng_init(&rng, 75, 0);
    for (int d = 0; d < 3; d++)
        for (int64_t M = 1; M < LOOM_GEMM_MIN_M; M++) {
            mq p;
            mq_init(&p, M, 70 + 13 * M, 32 * (3 + M), (int)(M % 3), qtypes[d], &rng);
            mq_set_ep(&p, M % 2 ? EP_RES : 0, LOOM_ACT_NONE);
            mq_reference(&p);
            p.invariant = 1;
            float *gemm = run_copy(&p, isa);
            p.invariant = 0;
            float *plain = run_copy(&p, isa);
            size_t bytes = (size_t)(2 * GUARD + M * p.ldy) * sizeof(float);
            if (M >= 2 && vnni)
                CHECK_MSG(memcmp(gemm, plain, bytes) == 0, "%s M=%lld: not the GEMM", loom_dtype_name(p.wt),
                          (long long)M);
            loom_pack_desc dd = desc_of(&p);
            loom_packed_weights *pw = NULL;
            CHECK(loom_packed_weights_create(&dd, 1, isa, &pw) == LOOM_OK);
            uint64_t h0 = loom_matmul_packed_hits();
            mq_check(&p, isa);
            CHECK(mq_run(&p, isa, 1) == LOOM_OK);
            CHECK_MSG(memcmp(vnni ? gemm : plain, p.ybuf, bytes) == 0, "%s M=%lld: packed, not the GEMM's bytes",
                      loom_dtype_name(p.wt), (long long)M);
            CHECK_MSG(vnni ? loom_matmul_packed_hits() > h0 : loom_matmul_packed_hits() == h0,
                      "%s M=%lld: packed panels %s", loom_dtype_name(p.wt), (long long)M,
                      vnni ? "not read" : "read without a packed form");
            loom_packed_weights_free(pw);
            free(gemm), free(plain);
            mq_free(&p);
        }
}

/* x quantized once (loom_matmul_quantize_x) and given to matmuls over two
 * matrices that take different paths, as a fused QKV or FFN shares it across
 * its matrices: p's packed and batch-invariant (the GEMM at every row count),
 * o's unpacked and not (the GEMV at one row; the GEMV for 2..7 rows where the
 * level has no packed form), x quantized for o's path. Each gives the bytes of
 * quantizing x itself, for 1..7 rows, every format and level. */
static void test_shared_xq(void) {
    loom_rng rng;
    loom_rng_init(&rng, 76, 0);
    for (int l = 0; l < n_levels; l++)
        for (int d = 0; d < 3; d++)
            for (int64_t M = 1; M < LOOM_GEMM_MIN_M; M += 2) {
                mq p, o; /* p's W packed, o's not; o takes p's x */
                mq_init(&p, M, 96, 160, 0, qtypes[d], &rng);
                mq_init(&o, M, 64, 160, 0, qtypes[d], &rng);
                memcpy(o.x, p.x, (size_t)(M * p.ldx) * sizeof(float));
                loom_pack_desc dd = desc_of(&p);
                loom_packed_weights *pw = NULL;
                CHECK(loom_packed_weights_create(&dd, 1, levels[l], &pw) == LOOM_OK);
                p.invariant = 1;
                float *wp = run_copy(&p, levels[l]), *wo = run_copy(&o, levels[l]);
                loom_matmul_args a = mq_args(&p, p.y, p.ldy), b = mq_args(&o, o.y, o.ldy);
                void *xq = loom_alloc_aligned(loom_matmul_xq_bytes(&a), LOOM_ALIGN);
                loom_matmul_quantize_x(&b, levels[l], 0, M, xq); /* as for the unpacked (GEMV) one */
                a.xq = b.xq = xq;
                void *s = loom_alloc_aligned(loom_matmul_scratch_size(&a) + loom_matmul_scratch_size(&b), LOOM_ALIGN);
                CHECK(loom_matmul_run(&a, levels[l], 0, 1, s) == LOOM_OK);
                CHECK(loom_matmul_run(&b, levels[l], 0, 1, s) == LOOM_OK);
                CHECK_MSG(memcmp(wp + GUARD, p.y, (size_t)(M * p.ldy) * sizeof(float)) == 0 &&
                              memcmp(wo + GUARD, o.y, (size_t)(M * o.ldy) * sizeof(float)) == 0,
                          "%s %s M=%lld: x quantized once differs on the %s matrix", loom_isa_name(levels[l]),
                          loom_dtype_name(p.wt), (long long)M,
                          memcmp(wp + GUARD, p.y, (size_t)(M * p.ldy) * sizeof(float)) ? "packed" : "unpacked");
                loom_free_aligned(s), loom_free_aligned(xq);
                loom_packed_weights_free(pw);
                free(wp), free(wo);
                mq_free(&p), mq_free(&o);
            }
}

/* Rows [r0, r0 + n) of a packed matrix: the same bytes as those rows unpacked;
 * the packed panels are read when r0 is a multiple of the panel rows (32). */
static void test_row_ranges(void) {
    loom_isa isa = loom_cpu_best_isa();
    loom_rng rng;
    loom_rng_init(&rng, 72, 0);
    static const int64_t ranges[][2] = {{0, 200}, {32, 168}, {96, 40}, {64, 1}, {5, 100}, {33, 31}, {192, 8}};
    for (int d = 0; d < 3; d++) {
        mq p;
        mq_init(&p, 12, 200, 96, 1, qtypes[d], &rng);
        int has = loom_matmul_packed_bytes(p.wt, p.N, p.K, isa) > 0;
        size_t rb = loom_dtype_row_bytes(p.wt, p.ldw);
        float *want = falloc(p.M * p.N), *got = falloc(p.M * p.N);
        for (int r = 0; r < 7; r++) {
            int64_t r0 = ranges[r][0], n = ranges[r][1];
            loom_matmul_args a = {.x = p.x, .ldx = p.ldx, .w = (const char *)p.w + (size_t)r0 * rb, .ldw = p.ldw,
                                  .wtype = p.wt, .y = want, .ldy = n, .M = p.M, .N = n, .K = p.K};
            void *s = loom_alloc_aligned(loom_matmul_scratch_size(&a), LOOM_ALIGN);
            CHECK(loom_matmul_run(&a, isa, 0, 1, s) == LOOM_OK);
            loom_pack_desc dd = desc_of(&p);
            loom_packed_weights *pw = NULL;
            CHECK(loom_packed_weights_create(&dd, 1, isa, &pw) == LOOM_OK);
            uint64_t h0 = loom_matmul_packed_hits();
            a.y = got;
            CHECK(loom_matmul_run(&a, isa, 0, 1, s) == LOOM_OK);
            int hit = loom_matmul_packed_hits() > h0;
            CHECK_MSG(hit == (has && r0 % 32 == 0), "%s rows [%lld, +%lld): packed panels %s", loom_dtype_name(p.wt),
                      (long long)r0, (long long)n, hit ? "read at an unaligned start" : "not read");
            CHECK_MSG(memcmp(want, got, (size_t)(p.M * n) * sizeof(float)) == 0, "%s rows [%lld, +%lld) differ",
                      loom_dtype_name(p.wt), (long long)r0, (long long)n);
            loom_packed_weights_free(pw);
            loom_free_aligned(s);
        }
        free(want), free(got);
        mq_free(&p);
    }
}

/* Packing shared among threads (units of 64 panels, several per matrix): the
 * same results on 1 and 3 threads as unpacked, each matrix reported once with
 * its source bytes. */
typedef struct seen_all {
    int calls;
    size_t bytes;
} seen_all;

static void on_packed_all(const void *w, size_t bytes, void *ctx) {
    seen_all *s = ctx;
    (void)w;
    __atomic_fetch_add(&s->calls, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&s->bytes, bytes, __ATOMIC_RELAXED);
}

static void test_threads(void) {
    loom_isa isa = loom_cpu_best_isa();
    loom_rng rng;
    loom_rng_init(&rng, 77, 0);
    static const int64_t Ns[3] = {2100, 4200 + 17, 40}; /* 2, 3 and 1 units */
    mq p[3];
    loom_pack_desc dd[3];
    float *want[3];
    size_t src = 0;
    for (int i = 0; i < 3; i++) {
        mq_init(&p[i], 3, Ns[i], 64, i, qtypes[i], &rng);
        p[i].invariant = 1; /* the GEMM at 3 rows on every level */
        want[i] = run_copy(&p[i], isa);
        dd[i] = desc_of(&p[i]);
        src += (size_t)Ns[i] * loom_dtype_row_bytes(p[i].wt, p[i].ldw);
    }
    int has = loom_matmul_packed_bytes(LOOM_Q4_0, 32, 32, isa) > 0;
    for (int nth = 1; nth <= 3; nth += 2) {
        seen_all s = {0, 0};
        loom_packed_weights *pw = NULL;
        CHECK(loom_packed_weights_create_cb(dd, 3, isa, nth, on_packed_all, &s, &pw) == LOOM_OK);
        CHECK_MSG(has ? s.calls == 3 && s.bytes == src : s.calls == 0, "nth %d: %d matrices reported", nth, s.calls);
        for (int i = 0; i < 3; i++) {
            uint64_t h0 = loom_matmul_packed_hits();
            CHECK(mq_run(&p[i], isa, 1) == LOOM_OK);
            CHECK(loom_matmul_packed_hits() > h0 || !has);
            size_t bytes = (size_t)(2 * GUARD + p[i].M * p[i].ldy) * sizeof(float);
            CHECK_MSG(memcmp(want[i], p[i].ybuf, bytes) == 0, "nth %d, matrix %d: packed differs", nth, i);
        }
        loom_packed_weights_free(pw);
    }
    for (int i = 0; i < 3; i++) free(want[i]), mq_free(&p[i]);
}

/* A NaN in x row m: that row NaN, the others right, over packed panels too. */
static void test_nan_rows(void) {
    loom_rng rng;
    loom_rng_init(&rng, 74, 0);
    for (int d = 0; d < 3; d++) {
        mq p;
        mq_init(&p, 19, 45, 96, 1, qtypes[d], &rng);
        loom_pack_desc dd = desc_of(&p);
        loom_packed_weights *pw = NULL;
        CHECK(loom_packed_weights_create(&dd, 1, loom_cpu_best_isa(), &pw) == LOOM_OK);
        mq_check_nan_row(&p, loom_cpu_best_isa());
        loom_packed_weights_free(pw);
        mq_free(&p);
    }
}

static void test_errors(void) {
    loom_isa isa = loom_cpu_best_isa();
    loom_rng rng;
    loom_rng_init(&rng, 73, 0);
    mq p;
    mq_init(&p, 8, 64, 64, 0, LOOM_Q4_1, &rng);
    loom_pack_desc dd = desc_of(&p);
    loom_packed_weights *pw = NULL, *again = (loom_packed_weights *)&dd;
    CHECK(loom_packed_weights_create(&dd, 1, isa, &pw) == LOOM_OK);
    if (loom_packed_weights_count(pw) == 1) {
        /* the same matrix, or rows of it, twice */
        CHECK(loom_packed_weights_create(&dd, 1, isa, &again) == LOOM_ERR_INVALID_ARG && again == NULL);
        loom_pack_desc half = {(const char *)p.w + 32 * loom_dtype_row_bytes(p.wt, p.ldw), p.wt, 32, p.K, p.ldw};
        CHECK(loom_packed_weights_create(&half, 1, isa, &again) == LOOM_ERR_INVALID_ARG && again == NULL);
        /* two in one call that share rows */
        loom_packed_weights_free(pw);
        loom_pack_desc two[2] = {dd, half};
        CHECK(loom_packed_weights_create(two, 2, isa, &pw) == LOOM_ERR_INVALID_ARG && pw == NULL);
        /* the failures left nothing registered: one packs again */
        CHECK(loom_packed_weights_create(&dd, 1, isa, &pw) == LOOM_OK && loom_packed_weights_count(pw) == 1);
        /* the size: ceil(64 / 32) panels x 2 blocks x the file's bytes a row of a
         * block (q4_1 16 + 2 + 2, q4_0 16 + 2, q8_0 32 + 2), 32 rows */
        CHECK(loom_matmul_packed_bytes(LOOM_Q4_1, 64, 64, isa) == 2 * 2 * 20 * 32);
        CHECK(loom_matmul_packed_bytes(LOOM_Q4_0, 33, 64, isa) == 2 * 2 * 18 * 32);
        CHECK(loom_matmul_packed_bytes(LOOM_Q8_0, 1, 32, isa) == 34 * 32);
    }
    loom_packed_weights_free(pw);
    /* no packed form: float weights, the reference, K not whole blocks */
    CHECK(loom_matmul_packed_bytes(LOOM_F32, 64, 64, isa) == 0);
    CHECK(loom_matmul_packed_bytes(LOOM_Q4_0, 64, 64, LOOM_ISA_REF) == 0);
    loom_pack_desc f = {p.x, LOOM_F32, 8, 64, 64};
    CHECK(loom_packed_weights_create(&f, 1, isa, &pw) == LOOM_OK && loom_packed_weights_count(pw) == 0);
    loom_packed_weights_free(pw);
    loom_pack_desc none = {NULL, LOOM_Q4_0, 8, 64, 64};
    CHECK(loom_packed_weights_create(&none, 1, isa, &pw) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_packed_weights_create(NULL, 1, isa, &pw) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_packed_weights_create(&dd, 1, isa, NULL) == LOOM_ERR_INVALID_ARG);
    loom_packed_weights_free(NULL);
    mq_free(&p);
}

int main(void) {
    find_levels();
    RUN_TEST(test_same_bits);
    RUN_TEST(test_few_rows);
    RUN_TEST(test_shared_xq);
    RUN_TEST(test_row_ranges);
    RUN_TEST(test_threads);
    RUN_TEST(test_nan_rows);
    RUN_TEST(test_errors);
    return TEST_SUMMARY();
}
