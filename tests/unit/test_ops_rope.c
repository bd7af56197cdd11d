/* Reference rope: hand cases, invariants, modes, llama2.c's formula bit for bit. */
#include "test_ops_common.h"

static loom_rope_attrs rope_attrs(loom_rope_mode mode, int n_rot, int pos_offset) {
    loom_rope_attrs a = {mode, n_rot, 10000.0f, 0.0f, pos_offset};
    return a;
}

/* x and y contiguous [S, H, D]. */
static void run_rope(float *x, float *y, int S, int H, int D, const loom_rope_attrs *at) {
    loom_tensor tx, ty;
    TENSOR(tx, LOOM_F32, x, S, H, D);
    TENSOR(ty, LOOM_F32, y, S, H, D);
    const loom_tensor *src[1] = {&tx};
    RUN_OK(LOOM_OP_ROPE, src, 1, at, &ty);
}

static void test_rope_hand(void) {
    /* D = 2: one pair with freq 1; position 1 rotates by 1 radian */
    float x[2] = {1, 0}, y[3];
    y[2] = 5.0f; /* guard */
    loom_rope_attrs a = rope_attrs(LOOM_ROPE_INTERLEAVED, 0, 1);
    run_rope(x, y, 1, 1, 2, &a);
    CHECK_CLOSE(y[0], 0.5403023058681398, 1e-7); /* cos 1 */
    CHECK_CLOSE(y[1], 0.8414709848078965, 1e-7); /* sin 1 */
    CHECK(y[2] == 5.0f);
    float x2[2] = {0, 1};
    run_rope(x2, y, 1, 1, 2, &a);
    CHECK_CLOSE(y[0], -0.8414709848078965, 1e-7);
    CHECK_CLOSE(y[1], 0.5403023058681398, 1e-7);

    /* D = 4, theta 1e4: pair 1 has freq 1/10000^(2/4) = 0.01 */
    float x4[4] = {1, 0, 1, 0}, y4[4];
    run_rope(x4, y4, 1, 1, 4, &a);
    CHECK_CLOSE(y4[0], 0.5403023058681398, 1e-7);
    CHECK_CLOSE(y4[1], 0.8414709848078965, 1e-7);
    CHECK_CLOSE(y4[2], 0.9999500004166653, 1e-7);  /* cos 0.01 */
    CHECK_CLOSE(y4[3], 0.009999833334166664, 1e-7); /* sin 0.01 */

    /* half mode pairs (0, 2) and (1, 3) */
    float xh[4] = {1, 1, 0, 0};
    loom_rope_attrs h = rope_attrs(LOOM_ROPE_HALF, 0, 1);
    run_rope(xh, y4, 1, 1, 4, &h);
    CHECK_CLOSE(y4[0], 0.5403023058681398, 1e-7);
    CHECK_CLOSE(y4[1], 0.9999500004166653, 1e-7);
    CHECK_CLOSE(y4[2], 0.8414709848078965, 1e-7);
    CHECK_CLOSE(y4[3], 0.009999833334166664, 1e-7);

    /* row s has position pos_offset + s: rows 0 and 1 of S = 2 at offset 0 */
    float xs[4] = {1, 0, 1, 0}, ys[4];
    loom_rope_attrs z = rope_attrs(LOOM_ROPE_INTERLEAVED, 0, 0);
    run_rope(xs, ys, 2, 1, 2, &z);
    CHECK(ys[0] == 1.0f && ys[1] == 0.0f);
    CHECK_CLOSE(ys[2], 0.5403023058681398, 1e-7);
    CHECK_CLOSE(ys[3], 0.8414709848078965, 1e-7);

    /* n_rot = 2 of D = 4: dims 2, 3 pass through */
    float xp[4] = {1, 0, 7, -3}, yp[4];
    loom_rope_attrs p = rope_attrs(LOOM_ROPE_INTERLEAVED, 2, 1);
    run_rope(xp, yp, 1, 1, 4, &p);
    CHECK_CLOSE(yp[0], 0.5403023058681398, 1e-7);
    CHECK(yp[2] == 7.0f && yp[3] == -3.0f);
}

static void test_rope_invariants(void) {
    enum { S = 5, H = 3, D = 16, N = S * H * D };
    loom_rng rng;
    loom_rng_init(&rng, 31, 0);
    float x[N], y[N];
    fill_rand(x, N, &rng);
    for (int mode = 0; mode <= 1; mode++) {
        /* position 0 is the identity, bit for bit */
        loom_rope_attrs a0 = rope_attrs((loom_rope_mode)mode, 0, 0);
        run_rope(x, y, 1, H, D, &a0);
        CHECK(memcmp(x, y, H * D * sizeof(float)) == 0);

        /* every head vector keeps its norm */
        loom_rope_attrs a = rope_attrs((loom_rope_mode)mode, 0, 7);
        run_rope(x, y, S, H, D, &a);
        for (int r = 0; r < S * H; r++) {
            double nx = 0, ny = 0;
            for (int d = 0; d < D; d++) {
                nx += (double)x[r * D + d] * x[r * D + d];
                ny += (double)y[r * D + d] * y[r * D + d];
            }
            CHECK_CLOSE(sqrt(ny), sqrt(nx), 1e-6);
        }
    }

    /* rotating unit pairs (1, 0) reads back cos/sin of p * theta^(-2i/D) */
    float u[S * D], v[S * D];
    for (int i = 0; i < S * D; i++) u[i] = (i % 2 == 0) ? 1.0f : 0.0f;
    loom_rope_attrs a = rope_attrs(LOOM_ROPE_INTERLEAVED, 0, 20);
    run_rope(u, v, S, 1, D, &a);
    for (int s = 0; s < S; s++)
        for (int i = 0; i < D / 2; i++) {
            double ang = (20.0 + s) * pow(10000.0, -2.0 * i / D);
            CHECK_CLOSE(v[s * D + 2 * i], cos(ang), 2e-5);
            CHECK_CLOSE(v[s * D + 2 * i + 1], sin(ang), 2e-5);
        }
}

/* Half mode is interleaved mode with dims permuted: half index i <-> 2i,
 * i + n_rot/2 <-> 2i + 1, dims >= n_rot in place. */
static void test_rope_half_vs_interleaved(void) {
    enum { S = 3, H = 2, D = 10, NROT = 6, N = S * H * D };
    loom_rng rng;
    loom_rng_init(&rng, 32, 0);
    float xh[N], xi[N], yh[N], yi[N];
    fill_rand(xh, N, &rng);
    int perm[D]; /* interleaved position of half-mode dim d */
    for (int d = 0; d < D; d++)
        perm[d] = d >= NROT ? d : d < NROT / 2 ? 2 * d : 2 * (d - NROT / 2) + 1;
    for (int r = 0; r < S * H; r++)
        for (int d = 0; d < D; d++) xi[r * D + perm[d]] = xh[r * D + d];
    loom_rope_attrs ah = rope_attrs(LOOM_ROPE_HALF, NROT, 4);
    loom_rope_attrs ai = rope_attrs(LOOM_ROPE_INTERLEAVED, NROT, 4);
    run_rope(xh, yh, S, H, D, &ah);
    run_rope(xi, yi, S, H, D, &ai);
    int bad = 0;
    for (int r = 0; r < S * H; r++)
        for (int d = 0; d < D; d++) bad += memcmp(&yi[r * D + perm[d]], &yh[r * D + d], 4) != 0;
    CHECK(bad == 0);
}

/* llama2.c's loop, written from its description: the whole q vector
 * (n_heads * head_size), one pos, pairs (i, i+1), freq from i % head_size. */
static void llama2c_rope(float *vec, int dim, int head_size, int pos) {
    for (int i = 0; i < dim; i += 2) {
        int head_dim = i % head_size;
        float freq = 1.0f / powf(10000.0f, head_dim / (float)head_size);
        float val = pos * freq;
        float fcr = cosf(val), fci = sinf(val);
        float v0 = vec[i], v1 = vec[i + 1];
        vec[i] = v0 * fcr - v1 * fci;
        vec[i + 1] = v0 * fci + v1 * fcr;
    }
}

static void test_rope_llama2c_bits(void) {
    enum { H = 6, D = 48, S = 4 };
    loom_rng rng;
    loom_rng_init(&rng, 33, 0);
    float x[S * H * D], y[S * H * D], want[S * H * D];
    fill_rand(x, S * H * D, &rng);
    static const int offsets[] = {0, 1, 255, 1000, 4093};
    for (int k = 0; k < 5; k++) {
        memcpy(want, x, sizeof x);
        for (int s = 0; s < S; s++) llama2c_rope(want + s * H * D, H * D, D, offsets[k] + s);
        loom_rope_attrs a = rope_attrs(LOOM_ROPE_INTERLEAVED, 0, offsets[k]);
        run_rope(x, y, S, H, D, &a);
        CHECK_MSG(memcmp(y, want, sizeof y) == 0, "pos_offset %d", offsets[k]);
    }
}

static void test_rope_layouts(void) {
    enum { B = 2, S = 3, H = 2, D = 8, N = B * S * H * D };
    loom_rng rng;
    loom_rng_init(&rng, 34, 0);
    float x[N], y[N], want[N];
    fill_rand(x, N, &rng);
    loom_rope_attrs a = rope_attrs(LOOM_ROPE_HALF, 0, 2);
    /* 4-D: each batch is the 3-D case (position depends on s, not b) */
    for (int b = 0; b < B; b++) run_rope(x + b * S * H * D, want + b * S * H * D, S, H, D, &a);
    loom_tensor tx, ty;
    TENSOR(tx, LOOM_F32, x, B, S, H, D);
    TENSOR(ty, LOOM_F32, y, B, S, H, D);
    const loom_tensor *src[1] = {&tx};
    RUN_OK(LOOM_OP_ROPE, src, 1, &a, &ty);
    CHECK(memcmp(y, want, sizeof y) == 0);
    check_thread_invariance(LOOM_OP_ROPE, src, 1, &a, &ty);

    /* in place */
    float xi[N];
    memcpy(xi, x, sizeof xi);
    TENSOR(tx, LOOM_F32, xi, B, S, H, D);
    RUN_OK(LOOM_OP_ROPE, src, 1, &a, &tx);
    CHECK(memcmp(xi, want, sizeof xi) == 0);

    /* a permuted view: buffer [H, S, D] seen as [S, H, D] */
    float xb[H * S * D], yv[S * H * D], wv[S * H * D];
    for (int s = 0; s < S; s++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++) xb[(h * S + s) * D + d] = x[(s * H + h) * D + d];
    run_rope(x, wv, S, H, D, &a);
    loom_tensor tb;
    TENSOR(tb, LOOM_F32, xb, H, S, D);
    CHECK(loom_tensor_permute(&tb, (const int[]){1, 0, 2}, &tx) == LOOM_OK);
    TENSOR(ty, LOOM_F32, yv, S, H, D);
    RUN_OK(LOOM_OP_ROPE, src, 1, &a, &ty);
    CHECK(memcmp(yv, wv, sizeof yv) == 0);

    /* freq_scale 0.5 at position 6 is position 3 (6 * 0.5 is exact) */
    float y1[H * D], y2[H * D];
    loom_rope_attrs s6 = rope_attrs(LOOM_ROPE_INTERLEAVED, 0, 6), s3 = s6;
    s6.freq_scale = 0.5f;
    s3.pos_offset = 3;
    run_rope(x, y1, 1, H, D, &s6);
    run_rope(x, y2, 1, H, D, &s3);
    CHECK(memcmp(y1, y2, sizeof y1) == 0);
    /* theta changes the frequencies of every pair but the first */
    loom_rope_attrs t = s3;
    t.theta = 500000.0f;
    run_rope(x, y1, 1, H, D, &t);
    CHECK(memcmp(y1, y2, 2 * sizeof(float)) == 0 && memcmp(y1 + 2, y2 + 2, 2 * sizeof(float)) != 0);
}

int main(void) {
    RUN_TEST(test_rope_hand);
    RUN_TEST(test_rope_invariants);
    RUN_TEST(test_rope_half_vs_interleaved);
    RUN_TEST(test_rope_llama2c_bits);
    RUN_TEST(test_rope_layouts);
    return TEST_SUMMARY();
}
