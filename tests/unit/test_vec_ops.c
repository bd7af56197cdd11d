/* Vectorised rms_norm, add, mul, silu, softmax and rope against the reference
 * at every level this CPU runs, over widths with every tail length, strided
 * views, special values, and thread counts 1..3. */
#include "test_vec_common.h"

#define TOL_DESIGN (1.0 / 2048.0) /* DESIGN.md, f32 paths */
/* What the kernels actually reach: RMSNorm works in double like the
 * reference, softmax/silu use a ~1 ulp polynomial exp. */
#define TOL_RMS (1.0 / (1 << 22))
#define TOL_EXP (1.0 / (1 << 20))

static loom_isa levels[LOOM_ISA_COUNT];
static int n_levels;

/* t over data with explicit shape and strides (elements). */
static void strided(loom_tensor *t, float *data, int ndim, const int64_t *shape,
                    const int64_t *stride) {
    tensor_init_(t, LOOM_F32, data, shape, ndim);
    for (int d = 0; d < ndim; d++) t->stride[d] = stride[d];
}

static void fill_scaled(float *p, int64_t n, loom_rng *r, double mag) {
    for (int64_t i = 0; i < n; i++) p[i] = (float)(frand(r) * mag);
}

static int64_t rows_for(loom_rng *r, int64_t D) {
    return 1 + (int64_t)(loom_rng_u32(r) % (D >= 511 ? 4 : 67));
}

static void test_rms_norm(void) {
    loom_rng r;
    loom_rng_init(&r, 11, 0);
    loom_rms_norm_attrs at = {1e-5f};
    char what[96];
    for (int wi = 0; wi < N_SWEEP; wi++) {
        int64_t D = sweep_width(wi, &r), rows = rows_for(&r, D);
        float *x = falloc(rows * (D + 5)), *g = falloc(D);
        fill_scaled(x, rows * (D + 5), &r, wi % 3 == 0 ? 1e3 : wi % 3 == 1 ? 1e-3 : 1.0);
        fill_scaled(g, D, &r, 2.0);
        loom_tensor tx, tg, tp;
        TENSOR(tx, LOOM_F32, x, rows, D);
        TENSOR(tg, LOOM_F32, g, D);
        /* rows padded to D + 5: the last dim stays unit-stride (fast path) */
        strided(&tp, x, 2, (const int64_t[]){rows, D}, (const int64_t[]){D + 5, 1});
        loom_tensor tmpl = f32_tmpl(2, (const int64_t[]){rows, D});
        const loom_tensor *src[2] = {&tx, &tg}, *srcp[2] = {&tp, &tg};
        for (int l = 0; l < n_levels; l++) {
            snprintf(what, sizeof what, "rms_norm [%lld, %lld]", (long long)rows, (long long)D);
            compare_op(LOOM_OP_RMS_NORM, src, 2, &at, &tmpl, levels[l], TOL_RMS, what);
            compare_op(LOOM_OP_RMS_NORM, src, 1, &at, &tmpl, levels[l], TOL_RMS, what);
            compare_op(LOOM_OP_RMS_NORM, srcp, 2, &at, &tmpl, levels[l], TOL_RMS, what);
        }
        free(x);
        free(g);
    }
    /* a transposed x (last dim not unit-stride) goes to the reference: bit-exact */
    float x[6 * 9], g[6];
    loom_rng_init(&r, 12, 0);
    fill_rand(x, 6 * 9, &r);
    fill_rand(g, 6, &r);
    loom_tensor tx, tt, tg;
    TENSOR(tx, LOOM_F32, x, 6, 9);
    CHECK(loom_tensor_permute(&tx, (const int[]){1, 0}, &tt) == LOOM_OK);
    TENSOR(tg, LOOM_F32, g, 6);
    loom_tensor tmpl = f32_tmpl(2, (const int64_t[]){9, 6});
    const loom_tensor *src[2] = {&tt, &tg};
    for (int l = 0; l < n_levels; l++)
        compare_op(LOOM_OP_RMS_NORM, src, 2, &at, &tmpl, levels[l], -1, "rms_norm transposed");
}

static void test_add_mul(void) {
    loom_rng r;
    loom_rng_init(&r, 21, 0);
    static const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, 3e38f};
    char what[96];
    for (int wi = 0; wi < N_SWEEP; wi++) {
        int64_t D = sweep_width(wi, &r), rows = rows_for(&r, D), n = rows * (D + 3);
        float *a = falloc(n), *b = falloc(n);
        fill_scaled(a, n, &r, 10.0);
        fill_scaled(b, n, &r, 10.0);
        for (int k = 0; k < 7 && k < n; k++) { /* IEEE specials must pass through unchanged */
            a[loom_rng_u32(&r) % n] = specials[k];
            b[loom_rng_u32(&r) % n] = specials[(k + 3) % 7];
        }
        loom_tensor ta, tb, tpa, tpb;
        TENSOR(ta, LOOM_F32, a, rows, D);
        TENSOR(tb, LOOM_F32, b, rows, D);
        strided(&tpa, a, 2, (const int64_t[]){rows, D}, (const int64_t[]){D + 3, 1});
        strided(&tpb, b, 2, (const int64_t[]){rows, D}, (const int64_t[]){D + 1, 1});
        loom_tensor tmpl = f32_tmpl(2, (const int64_t[]){rows, D});
        /* a strided dst: row stride D + 2, the gaps must stay untouched */
        loom_tensor tsd = tmpl;
        tsd.stride[0] = D + 2;
        const loom_tensor *src[2] = {&ta, &tb}, *srcp[2] = {&tpa, &tpb};
        for (int l = 0; l < n_levels; l++) {
            snprintf(what, sizeof what, "add/mul [%lld, %lld]", (long long)rows, (long long)D);
            compare_op(LOOM_OP_ADD, src, 2, NULL, &tmpl, levels[l], -1, what);
            compare_op(LOOM_OP_MUL, src, 2, NULL, &tmpl, levels[l], -1, what);
            compare_op(LOOM_OP_ADD, srcp, 2, NULL, &tsd, levels[l], -1, what);
            compare_op(LOOM_OP_MUL, srcp, 2, NULL, &tmpl, levels[l], -1, what);
        }
        free(a);
        free(b);
    }
    /* transposed operands: reference fallback */
    float a[35], b[35];
    fill_rand(a, 35, &r);
    fill_rand(b, 35, &r);
    loom_tensor ta, tat, tb;
    TENSOR(ta, LOOM_F32, a, 5, 7);
    CHECK(loom_tensor_permute(&ta, (const int[]){1, 0}, &tat) == LOOM_OK);
    TENSOR(tb, LOOM_F32, b, 7, 5);
    loom_tensor tmpl = f32_tmpl(2, (const int64_t[]){7, 5});
    const loom_tensor *src[2] = {&tat, &tb};
    for (int l = 0; l < n_levels; l++) {
        compare_op(LOOM_OP_ADD, src, 2, NULL, &tmpl, levels[l], -1, "add transposed");
        compare_op(LOOM_OP_MUL, src, 2, NULL, &tmpl, levels[l], -1, "mul transposed");
    }
}

static void test_silu(void) {
    loom_rng r;
    loom_rng_init(&r, 31, 0);
    char what[96];
    for (int wi = 0; wi < N_SWEEP; wi++) {
        int64_t D = sweep_width(wi, &r), rows = rows_for(&r, D), n = rows * D;
        float *x = falloc(n);
        fill_scaled(x, n, &r, wi % 2 ? 8.0 : 120.0); /* 120: exp over- and underflow */
        loom_tensor tx;
        TENSOR(tx, LOOM_F32, x, rows, D);
        loom_tensor tmpl = f32_tmpl(2, (const int64_t[]){rows, D});
        const loom_tensor *src[1] = {&tx};
        for (int l = 0; l < n_levels; l++) {
            snprintf(what, sizeof what, "silu [%lld, %lld]", (long long)rows, (long long)D);
            compare_op(LOOM_OP_SILU, src, 1, NULL, &tmpl, levels[l], TOL_EXP, what);
        }
        free(x);
    }
    /* the edges of exp's range, subnormals and IEEE specials */
    static const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-40f,
                               1e-30f, -1e-30f, 87.0f, -87.0f, 88.7f, -88.7f, 88.8f,
                               -88.8f, 89.0f, -89.0f, 103.0f, -103.0f, 104.0f, -104.0f,
                               105.0f, -105.0f, 3e38f, -3e38f, 0.5f, -0.5f, 17.0f, -17.0f};
    int n = (int)(sizeof sp / sizeof sp[0]);
    loom_tensor tx;
    TENSOR(tx, LOOM_F32, (void *)sp, n);
    loom_tensor tmpl = f32_tmpl(1, (const int64_t[]){n});
    const loom_tensor *src[1] = {&tx};
    for (int l = 0; l < n_levels; l++)
        compare_op(LOOM_OP_SILU, src, 1, NULL, &tmpl, levels[l], TOL_EXP, "silu specials");
}

/* One softmax case at every level: x [B, R, C], optional mask [R, C]. */
static void softmax_case(int64_t B, int64_t R, int64_t C, const float *x, const float *mask,
                         const loom_softmax_attrs *at, const char *what) {
    loom_tensor tx, tm;
    TENSOR(tx, LOOM_F32, (void *)x, B, R, C);
    TENSOR(tm, LOOM_F32, (void *)mask, R, C);
    loom_tensor tmpl = f32_tmpl(3, (const int64_t[]){B, R, C});
    const loom_tensor *src[2] = {&tx, &tm};
    for (int l = 0; l < n_levels; l++)
        compare_op(LOOM_OP_SOFTMAX, src, mask ? 2 : 1, at, &tmpl, levels[l], TOL_EXP, what);
}

static void test_softmax(void) {
    loom_rng r;
    loom_rng_init(&r, 41, 0);
    char what[128];
    for (int wi = 0; wi < N_SWEEP; wi++) {
        int64_t C = sweep_width(wi, &r), R = 1 + (int64_t)(loom_rng_u32(&r) % (C >= 511 ? 3 : 9));
        int64_t B = 1 + (int64_t)(loom_rng_u32(&r) % 3), n = B * R * C;
        float *x = falloc(n), *mask = falloc(R * C);
        fill_scaled(x, n, &r, wi % 2 ? 4.0 : 60.0);
        for (int64_t i = 0; i < R * C; i++) /* a sparse -inf mask plus small biases */
            mask[i] = loom_rng_u32(&r) % 5 == 0 ? -INFINITY : (float)(frand(&r) * 2.0);
        if (R > 1) /* one row masked out entirely: zeros */
            for (int64_t j = 0; j < C; j++) mask[C + j] = -INFINITY;
        if (n > 2) { /* specials in the last batch: NaN and +inf rows become NaN */
            x[n - 1 - (int64_t)(loom_rng_u32(&r) % C)] = -INFINITY;
            if (B > 1) x[(B - 1) * R * C] = NAN;
            if (B > 2) x[R * C + C / 2] = INFINITY;
        }
        static const loom_softmax_attrs cases[] = {
            {0, 0, 0}, {0.125f, 0, 0}, {3.0f, 1, 0}, {0, 1, -1}, {0.5f, 1, 5}, {1, 1, 1000}};
        for (int k = 0; k < 6; k++) {
            snprintf(what, sizeof what, "softmax [%lld, %lld, %lld] scale %g causal %d off %d",
                     (long long)B, (long long)R, (long long)C, (double)cases[k].scale,
                     cases[k].causal, cases[k].pos_offset);
            softmax_case(B, R, C, x, k % 2 ? mask : NULL, &cases[k], what);
        }
        free(x);
        free(mask);
    }
    /* 1-D x with a 1-D mask; in place (y == x) */
    float x[37], m[37], y[37];
    fill_scaled(x, 37, &r, 5.0);
    fill_scaled(m, 37, &r, 1.0);
    loom_tensor tx, tm, ty;
    TENSOR(tx, LOOM_F32, x, 37);
    TENSOR(tm, LOOM_F32, m, 37);
    loom_tensor tmpl = f32_tmpl(1, (const int64_t[]){37});
    const loom_tensor *src[2] = {&tx, &tm};
    loom_softmax_attrs plain = {0};
    for (int l = 0; l < n_levels; l++) {
        compare_op(LOOM_OP_SOFTMAX, src, 2, &plain, &tmpl, levels[l], TOL_EXP, "softmax 1-D");
        float xi[37];
        memcpy(xi, x, sizeof x);
        loom_tensor ti;
        TENSOR(ti, LOOM_F32, xi, 37);
        TENSOR(ty, LOOM_F32, y, 37);
        const loom_tensor *si[2] = {&ti, &tm};
        CHECK(loom_op_run(LOOM_OP_SOFTMAX, si, 2, &plain, &ty, levels[l]) == LOOM_OK);
        CHECK(loom_op_run(LOOM_OP_SOFTMAX, si, 2, &plain, &ti, levels[l]) == LOOM_OK);
        CHECK_MSG(memcmp(xi, y, sizeof y) == 0, "softmax in place differs at %s",
                  loom_isa_name(levels[l]));
    }
}

/* One rope case at every level, out of place and in place; bit-exact. */
static void rope_case(int ndim, const int64_t *shape, const float *x, const loom_rope_attrs *at,
                      const char *what) {
    loom_tensor tx;
    tensor_init_(&tx, LOOM_F32, (void *)x, shape, ndim);
    loom_tensor tmpl = f32_tmpl(ndim, shape);
    const loom_tensor *src[1] = {&tx};
    int64_t n = loom_tensor_nelem(&tx);
    float *a = falloc(n), *b = falloc(n);
    for (int l = 0; l < n_levels; l++) {
        compare_op(LOOM_OP_ROPE, src, 1, at, &tmpl, levels[l], -1, what);
        /* in place at the level vs out of place at the reference */
        memcpy(a, x, (size_t)n * sizeof(float));
        loom_tensor ta, tb;
        tensor_init_(&ta, LOOM_F32, a, shape, ndim);
        tensor_init_(&tb, LOOM_F32, b, shape, ndim);
        const loom_tensor *sa[1] = {&ta};
        CHECK(loom_op_run(LOOM_OP_ROPE, src, 1, at, &tb, LOOM_ISA_REF) == LOOM_OK);
        CHECK(loom_op_run(LOOM_OP_ROPE, sa, 1, at, &ta, levels[l]) == LOOM_OK);
        CHECK_MSG(memcmp(a, b, (size_t)n * sizeof(float)) == 0, "%s: in place differs at %s",
                  what, loom_isa_name(levels[l]));
    }
    free(a);
    free(b);
}

static void test_rope(void) {
    loom_rng r;
    loom_rng_init(&r, 51, 0);
    static const int64_t dims[] = {2, 4, 6, 8, 14, 16, 18, 30, 32, 34, 48, 64, 66, 96, 128, 130};
    char what[160];
    for (int di = 0; di < (int)(sizeof dims / sizeof dims[0]); di++) {
        int64_t D = dims[di];
        int64_t S = 1 + (int64_t)(loom_rng_u32(&r) % 7), H = 1 + (int64_t)(loom_rng_u32(&r) % 5);
        int64_t B = di % 3 == 0 ? 2 : 1;
        int64_t n = B * S * H * D;
        float *x = falloc(n);
        fill_scaled(x, n, &r, 3.0);
        int64_t n_rots[3] = {0, D > 2 ? D - 2 : 0, D >= 8 ? (D / 4) * 2 : 0};
        for (int k = 0; k < 3; k++) {
            for (int mode = 0; mode < 2; mode++) {
                loom_rope_attrs at = {.mode = (loom_rope_mode)mode, .n_rot = (int)n_rots[k],
                                      .theta = k == 2 ? 500000.0f : 10000.0f,
                                      .freq_scale = k == 1 ? 0.25f : 0.0f,
                                      .pos_offset = (int)(loom_rng_u32(&r) % 2 ? 0 : 1 + loom_rng_u32(&r) % 3000)};
                snprintf(what, sizeof what, "rope B%lld S%lld H%lld D%lld n_rot %d mode %d off %d",
                         (long long)B, (long long)S, (long long)H, (long long)D, at.n_rot, mode,
                         at.pos_offset);
                if (B == 2)
                    rope_case(4, (const int64_t[]){B, S, H, D}, x, &at, what);
                else
                    rope_case(3, (const int64_t[]){S, H, D}, x, &at, what);
            }
        }
        free(x);
    }
    /* x as a head-major view (permuted [H, S, D] -> [S, H, D]), last dim unit-stride */
    enum { S = 5, H = 3, D = 20 };
    float x[S * H * D];
    fill_rand(x, S * H * D, &r);
    loom_tensor th, tp;
    TENSOR(th, LOOM_F32, x, H, S, D);
    CHECK(loom_tensor_permute(&th, (const int[]){1, 0, 2}, &tp) == LOOM_OK);
    loom_tensor tmpl = f32_tmpl(3, (const int64_t[]){S, H, D});
    const loom_tensor *src[1] = {&tp};
    loom_rope_attrs at = {.mode = LOOM_ROPE_HALF, .n_rot = 12, .theta = 10000.0f, .pos_offset = 3};
    for (int l = 0; l < n_levels; l++)
        compare_op(LOOM_OP_ROPE, src, 1, &at, &tmpl, levels[l], -1, "rope permuted view");
}

int main(void) {
    n_levels = vec_levels(levels);
    fprintf(stderr, "levels:");
    for (int l = 0; l < n_levels; l++) fprintf(stderr, " %s", loom_isa_name(levels[l]));
    fputc('\n', stderr);
    RUN_TEST(test_rms_norm);
    RUN_TEST(test_add_mul);
    RUN_TEST(test_silu);
    RUN_TEST(test_softmax);
    RUN_TEST(test_rope);
    static const loom_op ops[] = {LOOM_OP_RMS_NORM, LOOM_OP_SILU, LOOM_OP_SOFTMAX};
    for (int k = 0; k < 3; k++)
        fprintf(stderr, "worst relative error %s: %.3g (%.2f ulp of 1)\n",
                loom_op_get(ops[k])->name, worst_err[ops[k]], worst_err[ops[k]] * 8388608.0);
    CHECK(worst_err[LOOM_OP_SILU] <= TOL_DESIGN && worst_err[LOOM_OP_SOFTMAX] <= TOL_DESIGN);
    return TEST_SUMMARY();
}
