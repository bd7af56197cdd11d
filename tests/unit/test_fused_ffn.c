/* add_rms_norm, swiglu and ffn against their reference decompositions. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "graph/ops_init.h"
#include "base/rng.h"
#include "check.h"
#include "fused/fused.h"
#include "fused/ref/fused_ref.h"
#include "ops/quant.h"

static loom_rng rng;

static float frand(void) { return loom_rng_uniform(&rng) * 2.0f - 1.0f; }

/* f32 [rows, cols] with row stride ld (>= cols), filled with values in [-amp, amp]. */
static loom_tensor mat(int64_t rows, int64_t cols, int64_t ld, float amp) {
    loom_tensor t;
    int64_t shape[2] = {rows, cols};
    loom_tensor_init(&t, LOOM_F32, 2, shape, NULL);
    t.stride[0] = ld;
    float *p = malloc((size_t)(rows * ld + 1) * sizeof(float));
    for (int64_t i = 0; i < rows * ld; i++) p[i] = amp * frand();
    t.data = p;
    return t;
}

/* Weights [rows, cols] of dtype dt made from f32 values. */
static loom_tensor weights(loom_dtype dt, int64_t rows, int64_t cols, float amp) {
    loom_tensor t;
    int64_t shape[2] = {rows, cols};
    loom_tensor_init(&t, dt, 2, shape, NULL);
    size_t row = loom_dtype_row_bytes(dt, cols);
    unsigned char *p = malloc(row * (size_t)rows + 1);
    float *tmp = malloc((size_t)cols * sizeof(float));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) tmp[c] = amp * frand();
        void *dst = p + row * (size_t)r;
        if (dt == LOOM_F32) memcpy(dst, tmp, row);
        else if (dt == LOOM_F16) for (int64_t c = 0; c < cols; c++) ((uint16_t *)dst)[c] = loom_f32_to_f16(tmp[c]);
        else if (dt == LOOM_BF16) for (int64_t c = 0; c < cols; c++) ((uint16_t *)dst)[c] = loom_f32_to_bf16(tmp[c]);
        else loom_quantize_row(dt, tmp, dst, cols);
    }
    free(tmp);
    t.data = p;
    return t;
}

static int close_all(const loom_tensor *a, const loom_tensor *b, double tol, const char *what) {
    double worst = 0;
    int bad = 0;
    for (int64_t m = 0; m < a->shape[0]; m++)
        for (int64_t j = 0; j < a->shape[1]; j++) {
            double x = ((float *)a->data)[m * a->stride[0] + j], y = ((float *)b->data)[m * b->stride[0] + j];
            if (!check_close(x, y, tol)) bad++;
            double e = fabs(x - y) / (fabs(y) > 1 ? fabs(y) : 1);
            if (e > worst) worst = e;
        }
    CHECK_MSG(bad == 0, "%s: %d elements beyond tol %g (worst rel %g)", what, bad, tol, worst);
    return bad == 0;
}

static int same_bits(const loom_tensor *a, const loom_tensor *b) {
    for (int64_t m = 0; m < a->shape[0]; m++)
        if (memcmp((float *)a->data + m * a->stride[0], (float *)b->data + m * b->stride[0],
                   (size_t)a->shape[1] * sizeof(float)))
            return 0;
    return 1;
}

static const int64_t sizes[] = {1, 2, 3, 7, 16, 17, 31, 64, 67, 100, 257};

static void test_add_rms_norm(void) {
    loom_pool *pools[3] = {NULL, NULL, NULL};
    loom_pool_init(&pools[1], 2);
    loom_pool_init(&pools[2], 3);
    for (int it = 0; it < 40; it++) {
        int64_t M = sizes[it % 11], D = sizes[(it * 7 + 3) % 11] + (it > 30 ? 4000 : 0);
        loom_tensor x = mat(M, D, D + (it % 3), 2.0f), r = mat(M, D, D, 2.0f), g = mat(1, D, D, 1.0f);
        int64_t gs[1] = {D};
        loom_tensor gamma;
        loom_tensor_init(&gamma, LOOM_F32, 1, gs, g.data);
        loom_tensor y_ref = mat(M, D, D, 0), r_ref = mat(M, D, D, 0);
        loom_add_rms_norm_params p = loom_add_rms_norm_default_params();
        p.epsilon = 1e-5f;
        CHECK(loom_add_rms_norm_ref(&x, &r, &gamma, p.epsilon, &y_ref, &r_ref) == LOOM_OK);
        loom_tensor y1 = mat(M, D, D + 1, NAN);
        for (int t = 0; t < 3; t++) {
            loom_tensor y = mat(M, D, D + 1, NAN), ro = mat(M, D, D, NAN);
            CHECK(loom_add_rms_norm(&x, &r, &gamma, &p, &y, &ro, pools[t]) == LOOM_OK);
            close_all(&y, &y_ref, 1.0 / 2048, "add_rms_norm y");
            CHECK(same_bits(&ro, &r_ref));  /* the sum is exact IEEE in both */
            if (t == 0) memcpy(y1.data, y.data, (size_t)(M * (D + 1)) * sizeof(float));
            else CHECK(same_bits(&y, &y1));
            free(y.data);
            free(ro.data);
        }
        /* r_out aliasing the residual */
        loom_tensor y = mat(M, D, D, NAN);
        CHECK(loom_add_rms_norm(&x, &r, &gamma, &p, &y, &r, pools[1]) == LOOM_OK);
        CHECK(same_bits(&r, &r_ref));
        close_all(&y, &y_ref, 1.0 / 2048, "add_rms_norm aliasing");
        free(x.data); free(r.data); free(g.data); free(y_ref.data); free(r_ref.data); free(y1.data); free(y.data);
    }
    /* errors */
    loom_tensor x = mat(4, 8, 8, 1), r = mat(4, 9, 9, 1), y = mat(4, 8, 8, 0), g = mat(1, 8, 8, 1);
    int64_t gs[1] = {8};
    loom_tensor gamma;
    loom_tensor_init(&gamma, LOOM_F32, 1, gs, g.data);
    CHECK(loom_add_rms_norm(&x, &r, &gamma, NULL, &y, &y, NULL) == LOOM_ERR_SHAPE);
    CHECK(strstr(loom_last_error(), "residual") != NULL);
    loom_add_rms_norm_params bad = {0.0f};
    CHECK(loom_add_rms_norm(&x, &x, &gamma, &bad, &y, &y, NULL) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "epsilon") != NULL);
    free(x.data); free(r.data); free(y.data); free(g.data);
    loom_pool_free(pools[1]);
    loom_pool_free(pools[2]);
}

static void test_swiglu(void) {
    loom_pool *pool;
    loom_pool_init(&pool, 2);
    for (int act = LOOM_ACT_SILU; act < LOOM_ACT_COUNT; act++)
        for (int it = 0; it < 8; it++) {
            int64_t M = sizes[it % 11], H = sizes[(it * 5 + 2) % 11];
            loom_tensor x = mat(M, 2 * H, 2 * H + 3, 4.0f), y = mat(M, H, H, NAN), yr = mat(M, H, H, 0);
            CHECK(loom_swiglu_ref(&x, (loom_act)act, &yr) == LOOM_OK);
            CHECK(loom_swiglu(&x, (loom_act)act, &y, it % 2 ? pool : NULL) == LOOM_OK);
            close_all(&y, &yr, 1.0 / 2048, loom_act_name((loom_act)act));
            free(x.data); free(y.data); free(yr.data);
        }
    loom_tensor x = mat(2, 7, 7, 1), y = mat(2, 3, 3, 0);
    CHECK(loom_swiglu(&x, LOOM_ACT_SILU, &y, NULL) == LOOM_ERR_SHAPE);
    free(x.data); free(y.data);
    loom_pool_free(pool);
}

static float leaky(float x, void *user) { return x > 0 ? x : x * *(const float *)user; }

static double tol_for(loom_dtype dt, int64_t K, loom_act_precision act) {
    if (act == LOOM_ACT_PREC_FULL) return 1.0 / 2048;  /* quantized W against f32 x */
    switch (dt) {
    case LOOM_F32: return 1.0 / 2048;
    case LOOM_F16: return 1.0 / 256;
    case LOOM_BF16: return K >= 2048 ? 1.0 / 64 : 1.0 / 128;
    default: return 1.0 / 32;  /* activations quantized to q8 per block of 32 */
    }
}

static void test_ffn(void) {
    loom_pool *pools[3] = {NULL, NULL, NULL};
    loom_pool_init(&pools[1], 2);
    loom_pool_init(&pools[2], 3);
    const loom_dtype dts[] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_Q8_0, LOOM_Q4_0, LOOM_Q4_1};
    float slope = 0.1f;
    for (int it = 0; it < 36; it++) {
        loom_dtype dt = dts[it % 6];
        int quant = loom_dtype_is_quantized(dt);
        int64_t M = (int64_t[]){1, 3, 8, 17, 33, 64}[it % 6 == 0 ? (it / 6) % 6 : it % 6];
        int64_t D = quant ? 32 * (1 + it % 4) : sizes[(it * 3 + 1) % 11];
        int64_t H = quant ? 32 * (1 + (it / 2) % 5) : sizes[(it * 5 + 4) % 11];
        int merged = it % 3 == 0, with_res = it % 2, custom = it % 7 == 3;
        float wamp = 1.0f / sqrtf((float)D), damp = 1.0f / sqrtf((float)H);
        loom_tensor x = mat(M, D, D, 1.0f), res = mat(M, D, D, 1.0f);
        loom_tensor wgu = weights(dt, merged ? 2 * H : H, D, wamp), wu = weights(dt, H, D, wamp);
        loom_tensor wd = weights(dt, D, H, damp);
        loom_ffn_params p = loom_ffn_default_params();
        p.act = (loom_act)(LOOM_ACT_SILU + it % 4);
        if (custom) { p.custom_act = leaky; p.custom_user = &slope; }
        if (it % 5 == 1) p.block_n = 1 + it % 40;
        if (quant && it % 12 >= 6) p.act_precision = LOOM_ACT_PREC_FULL;
        loom_tensor yr = mat(M, D, D, 0), y1 = mat(M, D, D, 0);
        loom_status rs = loom_ffn_ref(&x, &wgu, merged ? NULL : &wu, &wd, with_res ? &res : NULL, &p, &yr);
        CHECK_MSG(rs == LOOM_OK, "reference ffn (%s): %s", loom_dtype_name(dt), loom_last_error());
        for (int t = 0; t < 3 && rs == LOOM_OK; t++) {
            loom_tensor y = mat(M, D, D, NAN);
            loom_status s = loom_ffn(&x, &wgu, merged ? NULL : &wu, &wd, with_res ? &res : NULL, &p, &y, pools[t]);
            CHECK_MSG(s == LOOM_OK, "ffn %s: %s", loom_dtype_name(dt), loom_last_error());
            char what[96];
            snprintf(what, sizeof what, "ffn %s act %s M=%lld D=%lld H=%lld t=%d", loom_dtype_name(dt),
                     loom_act_precision_name(p.act_precision), (long long)M, (long long)D, (long long)H, t);
            close_all(&y, &yr, tol_for(dt, D > H ? D : H, p.act_precision), what);
            if (t == 0) memcpy(y1.data, y.data, (size_t)(M * D) * sizeof(float));
            else CHECK_MSG(same_bits(&y, &y1), "%s: differs from 1 thread", what);
            /* the same call in a caller's workspace (garbage in it) gives the same bits */
            size_t wsb = 0;
            int nth = pools[t] ? loom_pool_size(pools[t]) : 1;
            CHECK(loom_ffn_workspace_size(&x, &wgu, merged ? NULL : &wu, &wd, &p, nth, &wsb) == LOOM_OK);
            void *ws = loom_alloc_aligned(wsb, 64);
            memset(ws, 0xA5, wsb);
            loom_tensor yw = mat(M, D, D, NAN);
            s = loom_ffn_ws(&x, &wgu, merged ? NULL : &wu, &wd, with_res ? &res : NULL, &p, &yw, ws, wsb, pools[t]);
            CHECK_MSG(s == LOOM_OK, "ffn_ws %s: %s", what, loom_last_error());
            CHECK_MSG(same_bits(&yw, &y), "%s: workspace run differs", what);
            loom_free_aligned(ws);
            free(yw.data);
            free(y.data);
        }
        free(x.data); free(res.data); free(wgu.data); free(wu.data); free(wd.data); free(yr.data); free(y1.data);
    }
    /* errors name the tensor */
    loom_tensor x = mat(2, 8, 8, 1), wg = weights(LOOM_F32, 4, 8, 1), wd = weights(LOOM_F32, 8, 5, 1),
                y = mat(2, 8, 8, 0);
    CHECK(loom_ffn(&x, &wg, &wg, &wd, NULL, NULL, &y, NULL) == LOOM_ERR_SHAPE);
    CHECK(strstr(loom_last_error(), "w_gate") != NULL);
    loom_ffn_params bad = loom_ffn_default_params();
    bad.act_precision = LOOM_ACT_PREC_COUNT;
    CHECK(loom_ffn(&x, &wg, &wg, &wd, NULL, &bad, &y, NULL) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "act_precision") != NULL);
    /* workspace: too small, misaligned, bad thread count */
    loom_tensor wg2 = weights(LOOM_F32, 5, 8, 1);
    size_t need = 0;
    CHECK(loom_ffn_workspace_size(&x, &wg2, &wg2, &wd, NULL, 0, &need) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_ffn_workspace_size(&x, &wg2, &wg2, &wd, NULL, 1, NULL) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_ffn_workspace_size(&x, &wg, &wg, &wd, NULL, 1, &need) == LOOM_ERR_SHAPE);
    CHECK(loom_ffn_workspace_size(&x, &wg2, &wg2, &wd, NULL, 1, &need) == LOOM_OK && need > 0);
    unsigned char *ws = loom_alloc_aligned(need + 64, 64);
    CHECK(loom_ffn_ws(&x, &wg2, &wg2, &wd, NULL, NULL, &y, ws, need - 1, NULL) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "workspace") != NULL);
    CHECK(loom_ffn_ws(&x, &wg2, &wg2, &wd, NULL, NULL, &y, ws + 4, need, NULL) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "aligned") != NULL);
    CHECK(loom_ffn_ws(&x, &wg2, &wg2, &wd, NULL, NULL, NULL, ws, need, NULL) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_ffn_ws(&x, &wg2, &wg2, &wd, NULL, NULL, &y, ws, need, NULL) == LOOM_OK);
    loom_free_aligned(ws);
    free(wg2.data);
    free(x.data); free(wg.data); free(wd.data); free(y.data);
    loom_pool_free(pools[1]);
    loom_pool_free(pools[2]);
}

int main(void) {
    loom_ops_init(); /* the fused layer's ops in the op table */
    loom_rng_init(&rng, 7, 0);
    RUN_TEST(test_add_rms_norm);
    RUN_TEST(test_swiglu);
    RUN_TEST(test_ffn);
    return TEST_SUMMARY();
}
