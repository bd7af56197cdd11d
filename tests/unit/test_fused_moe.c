/* The fused MoE ops (moe_gating_top_k_softmax, moe_init_routing,
 * grouped_matmul_swiglu, moe_finalize_routing) against their reference
 * decompositions (src/fused/ref/moe_ref.c) on random shapes, every weight
 * dtype, 1-3 threads (bit-identical), and a token's result independent of
 * the other tokens of the batch; the graph op moe_ffn against the primitive
 * chain; bad input refused. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/rng.h"
#include "base/status.h"
#include "check.h"
#include "fused/ref/fused_ref.h"
#include "graph/ops_init.h"
#include "ops/quant.h"

static loom_rng rng;

static float frand(void) { return loom_rng_uniform(&rng) * 2.0f - 1.0f; }

static loom_tensor tens(loom_dtype dt, int ndim, int64_t a, int64_t b, int64_t c) {
    loom_tensor t;
    const int64_t shape[3] = {a, b, c};
    loom_tensor_init(&t, dt, ndim, shape, NULL);
    size_t bytes = ndim == 3 ? loom_dtype_row_bytes(dt, c) * (size_t)(a * b) : loom_dtype_row_bytes(dt, b) * (size_t)a;
    t.data = calloc(bytes + 64, 1);
    return t;
}

static loom_tensor fmat(int64_t rows, int64_t cols, float amp) {
    loom_tensor t = tens(LOOM_F32, 2, rows, cols, 0);
    for (int64_t i = 0; i < rows * cols; i++) ((float *)t.data)[i] = amp * frand();
    return t;
}

/* Experts [E, N, K] of dtype dt from random f32 values. */
static loom_tensor experts(loom_dtype dt, int64_t E, int64_t N, int64_t K, float amp) {
    loom_tensor t = tens(dt, 3, E, N, K);
    size_t row = loom_dtype_row_bytes(dt, K);
    float *tmp = malloc((size_t)K * sizeof(float));
    for (int64_t r = 0; r < E * N; r++) {
        for (int64_t c = 0; c < K; c++) tmp[c] = amp * frand();
        void *dst = (char *)t.data + row * (size_t)r;
        if (dt == LOOM_F32) memcpy(dst, tmp, row);
        else if (dt == LOOM_F16) for (int64_t c = 0; c < K; c++) ((uint16_t *)dst)[c] = loom_f32_to_f16(tmp[c]);
        else if (dt == LOOM_BF16) for (int64_t c = 0; c < K; c++) ((uint16_t *)dst)[c] = loom_f32_to_bf16(tmp[c]);
        else loom_quantize_row(dt, tmp, dst, K);
    }
    free(tmp);
    return t;
}

static double worst_rel(const loom_tensor *a, const loom_tensor *b, int64_t n) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = ((float *)a->data)[i], y = ((float *)b->data)[i];
        double e = fabs(x - y) / (fabs(y) > 1 ? fabs(y) : 1);
        if (!(e <= w)) w = e;
    }
    return w;
}

static loom_grouped_matmul_params gm_params; /* the activation precision of the run */

static double tol_of(loom_dtype dt, int64_t K) {
    switch (dt) {
    case LOOM_F32: return 1.0 / 2048;
    case LOOM_F16: return 1.0 / 256;
    case LOOM_BF16: return K >= 2048 ? 1.0 / 64 : 1.0 / 128;
    default: /* full activations: the f32 rule; q8 activations per block of 32, through two GEMMs */
        return gm_params.act_precision == LOOM_ACT_PREC_FULL ? 1.0 / 1024 : 1.0 / 16;
    }
}

static loom_pool *pools[4];

/* Random ids [T, k], each row k distinct experts. */
static loom_tensor random_ids(int64_t T, int64_t k, int64_t E) {
    loom_tensor ids = tens(LOOM_I32, 2, T, k, 0);
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < k; j++) {
            int32_t e, dup;
            do {
                e = (int32_t)(loom_rng_u32(&rng) % (uint32_t)E);
                dup = 0;
                for (int64_t i = 0; i < j; i++) dup |= ((int32_t *)ids.data)[t * k + i] == e;
            } while (dup);
            ((int32_t *)ids.data)[t * k + j] = e;
        }
    return ids;
}

static void test_gating(void) {
    for (int it = 0; it < 40; it++) {
        int64_t T = 1 + (int64_t)(loom_rng_u32(&rng) % 37), E = 2 + (int64_t)(loom_rng_u32(&rng) % 15);
        int k = 1 + (int)(loom_rng_u32(&rng) % (uint64_t)(E < 4 ? E : 4));
        loom_moe_gating_params p = {.top_k = k, .renorm = it % 2};
        loom_tensor lg = fmat(T, E, 4.0f);
        loom_tensor w_ref = fmat(T, k, 0), ids_ref = tens(LOOM_I32, 2, T, k, 0);
        CHECK(loom_moe_gating_ref(&lg, &p, &w_ref, &ids_ref) == LOOM_OK);
        for (int th = 1; th <= 3; th++) {
            loom_tensor w = fmat(T, k, 0), ids = tens(LOOM_I32, 2, T, k, 0);
            CHECK(loom_moe_gating_top_k_softmax(&lg, &p, &w, &ids, pools[th]) == LOOM_OK);
            CHECK(memcmp(ids.data, ids_ref.data, (size_t)(T * k) * 4) == 0);
            CHECK_MSG(worst_rel(&w, &w_ref, T * k) <= 1.0 / 2048, "gating weights T=%lld E=%lld k=%d", (long long)T,
                      (long long)E, k);
            for (int64_t t = 0; t < T && p.renorm; t++) {
                double s = 0;
                for (int j = 0; j < k; j++) s += ((float *)w.data)[t * k + j];
                CHECK_CLOSE(s, 1.0, 1e-6);
            }
            for (int64_t t = 0; t < T; t++) /* largest first */
                for (int j = 1; j < k; j++) CHECK(((float *)w.data)[t * k + j - 1] >= ((float *)w.data)[t * k + j]);
            free(w.data), free(ids.data);
        }
        free(lg.data), free(w_ref.data), free(ids_ref.data);
    }
    /* ties go to the lower id */
    loom_tensor lg = fmat(1, 5, 0), w = fmat(1, 2, 0), ids = tens(LOOM_I32, 2, 1, 2, 0);
    loom_moe_gating_params p = {.top_k = 2, .renorm = 1};
    CHECK(loom_moe_gating_top_k_softmax(&lg, &p, &w, &ids, NULL) == LOOM_OK);
    CHECK(((int32_t *)ids.data)[0] == 0 && ((int32_t *)ids.data)[1] == 1);
    CHECK(((float *)w.data)[0] == 0.5f && ((float *)w.data)[1] == 0.5f);
    p.top_k = 6;
    CHECK(loom_moe_gating_top_k_softmax(&lg, &p, &w, &ids, NULL) == LOOM_ERR_INVALID_ARG);
    free(lg.data), free(w.data), free(ids.data);
}

/* The whole layer through the four ops: y = residual + sum_j w_j expert_j(x). */
typedef struct layer_out {
    loom_tensor y, xs, perm, off, ys;
} layer_out;

static loom_status run_layer(const loom_tensor *x, const loom_tensor *ids, const loom_tensor *w, const loom_tensor *wg,
                             const loom_tensor *wu, const loom_tensor *wd, const loom_tensor *res, loom_pool *pool,
                             layer_out *o) {
    int64_t T = x->shape[0], D = x->shape[1], k = ids->shape[1], E = wg->shape[0];
    o->xs = fmat(T * k, D, 0), o->perm = tens(LOOM_I32, 2, 1, T * k, 0), o->off = tens(LOOM_I32, 2, 1, E + 1, 0);
    o->ys = fmat(T * k, D, 0), o->y = fmat(T, D, 0);
    LOOM_TRY(loom_moe_init_routing(x, ids, E, &o->xs, &o->perm, &o->off, pool));
    LOOM_TRY(loom_grouped_matmul_swiglu(&o->xs, &o->off, wg, wu, wd, &gm_params, &o->ys, pool));
    return loom_moe_finalize_routing(&o->ys, &o->perm, w, res, &o->y, pool);
}

static void free_out(layer_out *o) { free(o->y.data), free(o->xs.data), free(o->perm.data), free(o->off.data), free(o->ys.data); }

static void test_layer(void) {
    const loom_dtype dts[6] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_Q8_0, LOOM_Q4_0, LOOM_Q4_1};
    for (int it = 0; it < 36; it++) {
        loom_dtype dt = dts[it % 6];
        gm_params = loom_grouped_matmul_default_params();
        if (it >= 24) gm_params.act_precision = LOOM_ACT_PREC_FULL;
        int quant = loom_dtype_is_quantized(dt);
        int64_t T = 1 + (int64_t)(loom_rng_u32(&rng) % 21), E = 2 + (int64_t)(loom_rng_u32(&rng) % 7);
        int64_t k = 1 + (int64_t)(loom_rng_u32(&rng) % (uint64_t)(E < 3 ? E : 3));
        int64_t D = quant ? 32 * (1 + (int64_t)(loom_rng_u32(&rng) % 3)) : 5 + (int64_t)(loom_rng_u32(&rng) % 60);
        int64_t H = quant ? 32 * (1 + (int64_t)(loom_rng_u32(&rng) % 4)) : 3 + (int64_t)(loom_rng_u32(&rng) % 90);
        if (it == 5) T = 40, E = 8, k = 2; /* rows of an expert on the GEMM path */
        loom_tensor x = fmat(T, D, 1.0f), res = fmat(T, D, 1.0f), w = fmat(T, k, 0.5f), ids = random_ids(T, k, E);
        loom_tensor wg = experts(dt, E, H, D, 0.3f), wu = experts(dt, E, H, D, 0.3f), wd = experts(dt, E, D, H, 0.3f);
        /* references, op by op */
        loom_tensor xs_r = fmat(T * k, D, 0), perm_r = tens(LOOM_I32, 2, 1, T * k, 0), off_r = tens(LOOM_I32, 2, 1, E + 1, 0);
        CHECK(loom_moe_init_routing_ref(&x, &ids, E, &xs_r, &perm_r, &off_r) == LOOM_OK);
        layer_out o[4];
        for (int th = 1; th <= 3; th++) {
            CHECK(run_layer(&x, &ids, &w, &wg, &wu, &wd, &res, pools[th], &o[th]) == LOOM_OK);
            if (th == 1) continue;
            CHECK_MSG(memcmp(o[th].y.data, o[1].y.data, (size_t)(T * D) * 4) == 0, "%d threads differ (%s)", th,
                      loom_dtype_name(dt));
        }
        CHECK(memcmp(o[1].perm.data, perm_r.data, (size_t)(T * k) * 4) == 0);
        CHECK(memcmp(o[1].off.data, off_r.data, (size_t)(E + 1) * 4) == 0);
        CHECK(memcmp(o[1].xs.data, xs_r.data, (size_t)(T * k * D) * 4) == 0);
        loom_tensor ys_r = fmat(T * k, D, 0), y_r = fmat(T, D, 0);
        CHECK(loom_grouped_matmul_swiglu_ref(&xs_r, &off_r, &wg, &wu, &wd, &ys_r) == LOOM_OK);
        double e = worst_rel(&o[1].ys, &ys_r, T * k * D);
        CHECK_MSG(e <= tol_of(dt, H > D ? H : D), "grouped %s T=%lld E=%lld k=%lld D=%lld H=%lld: rel %g",
                  loom_dtype_name(dt), (long long)T, (long long)E, (long long)k, (long long)D, (long long)H, e);
        /* finalize is exact given the same expert rows */
        CHECK(loom_moe_finalize_routing_ref(&o[1].ys, &perm_r, &w, &res, &y_r) == LOOM_OK);
        CHECK(memcmp(y_r.data, o[1].y.data, (size_t)(T * D) * 4) == 0);
        CHECK(loom_moe_finalize_routing_ref(&o[1].ys, &perm_r, &w, NULL, &y_r) == LOOM_OK);
        loom_tensor y_nr = fmat(T, D, 0);
        CHECK(loom_moe_finalize_routing(&o[1].ys, &o[1].perm, &w, NULL, &y_nr, pools[2]) == LOOM_OK);
        CHECK(memcmp(y_r.data, y_nr.data, (size_t)(T * D) * 4) == 0);
        /* batch independence: each token alone gives its row of the batch, bit for bit */
        for (int64_t t = 0; t < T; t += 1 + T / 4) {
            loom_tensor x1 = x, r1 = res, w1 = w, i1 = ids;
            x1.shape[0] = r1.shape[0] = w1.shape[0] = i1.shape[0] = 1;
            x1.data = (float *)x.data + t * D, r1.data = (float *)res.data + t * D;
            w1.data = (float *)w.data + t * k, i1.data = (int32_t *)ids.data + t * k;
            layer_out one;
            CHECK(run_layer(&x1, &i1, &w1, &wg, &wu, &wd, &r1, pools[2], &one) == LOOM_OK);
            CHECK_MSG(memcmp(one.y.data, (float *)o[1].y.data + t * D, (size_t)D * 4) == 0,
                      "token %lld alone differs from its row in a batch of %lld (%s)", (long long)t, (long long)T,
                      loom_dtype_name(dt));
            free_out(&one);
        }
        for (int th = 1; th <= 3; th++) free_out(&o[th]);
        free(x.data), free(res.data), free(w.data), free(ids.data), free(wg.data), free(wu.data), free(wd.data);
        free(xs_r.data), free(perm_r.data), free(off_r.data), free(ys_r.data), free(y_r.data), free(y_nr.data);
    }
}

/* The graph op moe_ffn against the primitive chain (loom_op_run, one thread). */
static void test_graph_op(void) {
    const loom_dtype dts[3] = {LOOM_F32, LOOM_BF16, LOOM_Q4_1};
    for (int it = 0; it < 6; it++) {
        loom_dtype dt = dts[it % 3];
        int64_t T = it < 3 ? 1 : 13, E = 5, k = 2, D = 64, H = 96;
        loom_tensor x = fmat(T, D, 1.0f), res = fmat(T, D, 1.0f), w = fmat(T, k, 0.5f), ids = random_ids(T, k, E);
        loom_tensor wg = experts(dt, E, H, D, 0.3f), wu = experts(dt, E, H, D, 0.3f), wd = experts(dt, E, D, H, 0.3f);
        loom_tensor g = tens(LOOM_F32, 3, T, k, H), u = tens(LOOM_F32, 3, T, k, H), d = tens(LOOM_F32, 3, T, k, D);
        loom_tensor s = fmat(T, D, 0), y_ref = fmat(T, D, 0), y = fmat(T, D, 0);
        loom_isa isa = loom_cpu_isa();
        const loom_tensor *mg[3] = {&x, &wg, &ids}, *mu[3] = {&x, &wu, &ids};
        CHECK(loom_op_run(LOOM_OP_MATMUL_ID, mg, 3, NULL, &g, isa) == LOOM_OK);
        CHECK(loom_op_run(LOOM_OP_MATMUL_ID, mu, 3, NULL, &u, isa) == LOOM_OK);
        const loom_tensor *sg[1] = {&g}, *mm[2] = {&g, &u};
        CHECK(loom_op_run(LOOM_OP_SILU, sg, 1, NULL, &g, isa) == LOOM_OK);
        CHECK(loom_op_run(LOOM_OP_MUL, mm, 2, NULL, &g, isa) == LOOM_OK);
        const loom_tensor *md[3] = {&g, &wd, &ids}, *ms[2] = {&d, &w}, *ma[2] = {&res, &s};
        CHECK(loom_op_run(LOOM_OP_MATMUL_ID, md, 3, NULL, &d, isa) == LOOM_OK);
        CHECK(loom_op_run(LOOM_OP_MOE_SUM, ms, 2, NULL, &s, isa) == LOOM_OK);
        CHECK(loom_op_run(LOOM_OP_ADD, ma, 2, NULL, &y_ref, isa) == LOOM_OK);
        /* the fused graph op, its four phases by hand */
        loom_moe_ffn_attrs at = {0};
        loom_tensor xs = fmat(T * k, D, 0), h = fmat(T * k, H, 0), ys = fmat(T * k, D, 0);
        const loom_tensor *src[7] = {&x, &wg, &wu, &wd, &ids, &w, &res};
        const loom_op_info *info = loom_op_get(LOOM_OP_MOE_FFN);
        size_t sb = info->scratch_size(src, 7, &y, &at);
        void *scratch = loom_alloc_aligned(sb, 64);
        for (int ph = 0; ph < 4; ph++) {
            loom_kernel_args a = {.n_src = 7, .dst = &y, .attrs = &at, .ith = 0, .nth = 1, .scratch = scratch,
                                  .dst_extra = {&xs, &h, &ys}, .n_dst_extra = 3, .phase = ph};
            for (int i = 0; i < 7; i++) a.src[i] = src[i];
            CHECK(loom_op_kernel(LOOM_OP_MOE_FFN, isa)(&a) == LOOM_OK);
        }
        /* same kernels on the same rows: bit for bit (q4_1's q8 activations included) */
        CHECK_MSG(memcmp(y.data, y_ref.data, (size_t)(T * D) * 4) == 0, "moe_ffn vs primitives (%s, T=%lld): rel %g",
                  loom_dtype_name(dt), (long long)T, worst_rel(&y, &y_ref, T * D));
        loom_cost c;
        info->cost(src, 7, &y, &at, &c);
        double eb = (double)loom_dtype_row_bytes(dt, D) * (double)H * 2 + (double)loom_dtype_row_bytes(dt, H) * (double)D;
        if (T == 1) CHECK(c.bytes_read < eb * (double)k + 1e5 && c.bytes_read > eb * (double)k);
        loom_free_aligned(scratch);
        free(x.data), free(res.data), free(w.data), free(ids.data), free(wg.data), free(wu.data), free(wd.data);
        free(g.data), free(u.data), free(d.data), free(s.data), free(y_ref.data), free(y.data), free(xs.data),
            free(h.data), free(ys.data);
    }
}

static void test_errors(void) {
    loom_tensor x = fmat(3, 32, 1), ids = random_ids(3, 2, 4), xs = fmat(6, 32, 0);
    loom_tensor perm = tens(LOOM_I32, 2, 1, 6, 0), off = tens(LOOM_I32, 2, 1, 5, 0);
    ((int32_t *)ids.data)[3] = 7; /* expert 7 of 4 */
    CHECK(loom_moe_init_routing(&x, &ids, 4, &xs, &perm, &off, NULL) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "token 1") != NULL);
    ((int32_t *)ids.data)[3] = 1;
    CHECK(loom_moe_init_routing(&x, &ids, 4, &xs, &perm, &off, NULL) == LOOM_OK);
    loom_tensor wg = experts(LOOM_F32, 4, 16, 32, 1), wd = experts(LOOM_F32, 4, 32, 16, 1), ys = fmat(6, 32, 0);
    ((int32_t *)off.data)[2] = 99; /* offsets that decrease */
    CHECK(loom_grouped_matmul_swiglu(&xs, &off, &wg, &wg, &wd, NULL, &ys, NULL) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_grouped_matmul_swiglu(&xs, &off, &wg, &wg, &wg, NULL, &ys, NULL) == LOOM_ERR_SHAPE);
    loom_tensor w = fmat(3, 2, 1), y = fmat(3, 32, 0);
    ((int32_t *)perm.data)[0] = ((int32_t *)perm.data)[1]; /* not a permutation */
    CHECK(loom_moe_finalize_routing(&ys, &perm, &w, NULL, &y, NULL) == LOOM_ERR_INVALID_ARG);
    /* the primitives refuse ids out of range too */
    ((int32_t *)ids.data)[0] = -1;
    loom_tensor g = tens(LOOM_F32, 3, 3, 2, 16);
    const loom_tensor *src[3] = {&x, &wg, &ids};
    CHECK(loom_op_run(LOOM_OP_MATMUL_ID, src, 3, NULL, &g, LOOM_ISA_REF) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_op_run(LOOM_OP_MATMUL_ID, src, 3, NULL, &g, loom_cpu_isa()) == LOOM_ERR_INVALID_ARG);
    free(x.data), free(ids.data), free(xs.data), free(perm.data), free(off.data), free(wg.data), free(wd.data);
    free(ys.data), free(w.data), free(y.data), free(g.data);
}

int main(void) {
    loom_ops_init();
    loom_rng_init(&rng, 37, 0);
    for (int t = 2; t <= 3; t++) loom_pool_init(&pools[t], t);
    RUN_TEST(test_gating);
    RUN_TEST(test_layer);
    RUN_TEST(test_graph_op);
    RUN_TEST(test_errors);
    for (int t = 2; t <= 3; t++) loom_pool_free(pools[t]);
    return TEST_SUMMARY();
}
