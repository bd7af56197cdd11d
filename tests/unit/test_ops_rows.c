/* Reference copy (views, dtype conversion) and kv_append. */
#include "test_ops_common.h"

static void test_copy_permuted(void) {
    float x[6] = {0, 1, 2, 3, 4, 5}, y[7];
    y[6] = 99.0f; /* guard */
    loom_tensor tx, tp, ty;
    TENSOR(tx, LOOM_F32, x, 2, 3);
    CHECK(loom_tensor_permute(&tx, (const int[]){1, 0}, &tp) == LOOM_OK);
    TENSOR(ty, LOOM_F32, y, 3, 2);
    loom_copy_attrs ca = {LOOM_F32};
    const loom_tensor *src[1] = {&tp};
    RUN_OK(LOOM_OP_COPY, src, 1, &ca, &ty);
    static const float want[6] = {0, 3, 1, 4, 2, 5};
    CHECK(memcmp(y, want, sizeof want) == 0);
    CHECK(y[6] == 99.0f);

    /* 3-D: [2, 3, 4] permuted (2, 0, 1) -> [4, 2, 3]; y[a][b][c] = x[b][c][a] */
    enum { A = 2, B = 3, C = 4 };
    float x3[A * B * C], y3[A * B * C];
    for (int i = 0; i < A * B * C; i++) x3[i] = (float)i;
    TENSOR(tx, LOOM_F32, x3, A, B, C);
    CHECK(loom_tensor_permute(&tx, (const int[]){2, 0, 1}, &tp) == LOOM_OK);
    TENSOR(ty, LOOM_F32, y3, C, A, B);
    RUN_OK(LOOM_OP_COPY, src, 1, &ca, &ty);
    int bad = 0;
    for (int a = 0; a < C; a++)
        for (int b = 0; b < A; b++)
            for (int c = 0; c < B; c++) bad += y3[(a * A + b) * B + c] != x3[(b * B + c) * C + a];
    CHECK(bad == 0);
    check_thread_invariance(LOOM_OP_COPY, src, 1, &ca, &ty);

    /* and to f16 through the same permuted view: thread split must not matter */
    uint16_t h3[A * B * C];
    TENSOR(ty, LOOM_F16, h3, C, A, B);
    loom_copy_attrs ch = {LOOM_F16};
    check_thread_invariance(LOOM_OP_COPY, src, 1, &ch, &ty);
    CHECK(loom_f16_to_f32(h3[1 * A * B + 1 * B + 2]) == x3[(1 * B + 2) * C + 1]);
}

static void test_copy_convert(void) {
    float x[5] = {1.0f, -2.0f, 0.5f, 65504.0f, 1e6f};
    uint16_t h[5], b[5];
    loom_tensor tx, th, tb;
    TENSOR(tx, LOOM_F32, x, 5);
    TENSOR(th, LOOM_F16, h, 5);
    TENSOR(tb, LOOM_BF16, b, 5);
    loom_copy_attrs to_h = {LOOM_F16}, to_b = {LOOM_BF16}, to_f = {LOOM_F32};
    const loom_tensor *sx[1] = {&tx}, *sh[1] = {&th}, *sb[1] = {&tb};
    RUN_OK(LOOM_OP_COPY, sx, 1, &to_h, &th);
    /* IEEE half bit patterns worked out by hand; 1e6 overflows to +Inf */
    CHECK(h[0] == 0x3C00 && h[1] == 0xC000 && h[2] == 0x3800 && h[3] == 0x7BFF && h[4] == 0x7C00);
    RUN_OK(LOOM_OP_COPY, sx, 1, &to_b, &tb);
    CHECK(b[0] == 0x3F80 && b[1] == 0xC000 && b[2] == 0x3F00);

    /* f16 -> bf16 and bf16 -> f32 */
    uint16_t b2[5];
    loom_tensor tb2;
    TENSOR(tb2, LOOM_BF16, b2, 5);
    RUN_OK(LOOM_OP_COPY, sh, 1, &to_b, &tb2);
    CHECK(b2[0] == 0x3F80 && b2[1] == 0xC000 && b2[2] == 0x3F00);
    b[0] = 0x4049; /* 1.5703125 * 2 = 3.140625 */
    float f[5];
    loom_tensor tf;
    TENSOR(tf, LOOM_F32, f, 5);
    RUN_OK(LOOM_OP_COPY, sb, 1, &to_f, &tf);
    CHECK(f[0] == 3.140625f && f[1] == -2.0f);

    /* same dtype is a bit copy: a NaN payload survives */
    uint16_t hn[2] = {0x7E01, 0xFC00}, ho[2];
    loom_tensor thn, tho;
    TENSOR(thn, LOOM_F16, hn, 2);
    TENSOR(tho, LOOM_F16, ho, 2);
    const loom_tensor *shn[1] = {&thn};
    RUN_OK(LOOM_OP_COPY, shn, 1, &to_h, &tho);
    CHECK(ho[0] == 0x7E01 && ho[1] == 0xFC00);
}

static void test_kv_append(void) {
    /* cache [4, 2] full of 9s; append 2 rows at pos 1 */
    float cache[8], x[4] = {1, 2, 3, 4};
    for (int i = 0; i < 8; i++) cache[i] = 9.0f;
    loom_tensor tc, tx, tv;
    TENSOR(tc, LOOM_F32, cache, 4, 2);
    TENSOR(tx, LOOM_F32, x, 2, 2);
    CHECK(loom_tensor_view_rows(&tc, 0, 3, &tv) == LOOM_OK);
    loom_kv_append_attrs ka = {1};
    const loom_tensor *src[2] = {&tc, &tx};
    RUN_OK(LOOM_OP_KV_APPEND, src, 2, &ka, &tv);
    static const float want[8] = {9, 9, 1, 2, 3, 4, 9, 9};
    CHECK(memcmp(cache, want, sizeof want) == 0);

    /* overflow and negative pos: errors, cache untouched */
    loom_kv_append_attrs over = {3}, neg = {-1};
    CHECK_FAILS(loom_op_run(LOOM_OP_KV_APPEND, src, 2, &over, &tc, LOOM_ISA_REF));
    CHECK(strstr(loom_last_error(), "kv_append") != NULL);
    CHECK_FAILS(loom_op_run(LOOM_OP_KV_APPEND, src, 2, &neg, &tv, LOOM_ISA_REF));
    CHECK(memcmp(cache, want, sizeof want) == 0);
    /* the kernel itself refuses rows past its output view, too */
    loom_kernel_args a = {.src = {&tc, &tx}, .n_src = 2, .dst = &tc, .attrs = &over, .nth = 1};
    CHECK_FAILS(loom_op_get(LOOM_OP_KV_APPEND)->ref(&a));
    CHECK(memcmp(cache, want, sizeof want) == 0);

    /* f16 cache: x converted */
    uint16_t hc[8] = {0};
    float xs[2] = {0.5f, -3.0f};
    TENSOR(tc, LOOM_F16, hc, 4, 2);
    TENSOR(tx, LOOM_F32, xs, 1, 2);
    CHECK(loom_tensor_view_rows(&tc, 0, 4, &tv) == LOOM_OK);
    loom_kv_append_attrs last = {3};
    RUN_OK(LOOM_OP_KV_APPEND, src, 2, &last, &tv);
    CHECK(hc[6] == 0x3800 && hc[7] == 0xC200 && hc[5] == 0 && hc[0] == 0);
}

/* A bf16 cache [5, 2, 3] that is itself a strided view (K rows interleaved with
 * V rows), filled from a permuted x view; V half and other rows untouched. */
static void test_kv_append_views(void) {
    enum { SMAX = 5, H = 2, D = 3, n = 2, POS = 3, ROW = H * D };
    uint16_t buf[SMAX * 2 * ROW];
    for (int i = 0; i < SMAX * 2 * ROW; i++) buf[i] = 0x1234;
    loom_tensor tc, tv, txb, tx;
    TENSOR(tc, LOOM_BF16, buf, SMAX, H, D);
    tc.stride[0] = 2 * ROW; /* K part of each [K | V] row */
    float xb[H * n * D]; /* stored as [H, n, D] */
    for (int i = 0; i < H * n * D; i++) xb[i] = (float)(i + 1);
    TENSOR(txb, LOOM_F32, xb, H, n, D);
    CHECK(loom_tensor_permute(&txb, (const int[]){1, 0, 2}, &tx) == LOOM_OK);
    CHECK(loom_tensor_view_rows(&tc, 0, POS + n, &tv) == LOOM_OK);
    loom_kv_append_attrs ka = {POS};
    const loom_tensor *src[2] = {&tc, &tx};

    uint16_t want[SMAX * 2 * ROW];
    memcpy(want, buf, sizeof want);
    for (int s = 0; s < n; s++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++)
                want[(POS + s) * 2 * ROW + h * D + d] = loom_f32_to_bf16(xb[(h * n + s) * D + d]);
    RUN_OK(LOOM_OP_KV_APPEND, src, 2, &ka, &tv);
    CHECK(memcmp(buf, want, sizeof want) == 0);

    /* same bytes for any thread count */
    for (int nth = 2; nth <= 5; nth++) {
        for (int i = 0; i < SMAX * 2 * ROW; i++) buf[i] = 0x1234;
        CHECK(run_split(LOOM_OP_KV_APPEND, src, 2, &ka, &tv, nth) == LOOM_OK);
        CHECK_MSG(memcmp(buf, want, sizeof want) == 0, "nth = %d", nth);
    }
}

int main(void) {
    RUN_TEST(test_copy_permuted);
    RUN_TEST(test_copy_convert);
    RUN_TEST(test_kv_append);
    RUN_TEST(test_kv_append_views);
    return TEST_SUMMARY();
}
