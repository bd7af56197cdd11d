/* Graph builder, memory planner and step_by_step executor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "check.h"
#include "graph/exec.h"
#include "graph/graph.h"

static float buf_x[6 * 4], buf_w[5 * 4], buf_g[4];

static void fill(float *p, int n, float base) {
    for (int i = 0; i < n; i++) p[i] = base + 0.25f * (float)((i * 7) % 11) - 1.0f;
}

static int ext(loom_graph *g, float *data, int ndim, int64_t d0, int64_t d1, const char *name) {
    loom_tensor t;
    int64_t shape[2] = {d0, d1};
    loom_tensor_init(&t, LOOM_F32, ndim, shape, data);
    loom_tensor_set_name(&t, "%s", name);
    return loom_graph_external(g, &t);
}

static void test_shape_errors(void) {
    loom_graph *g;
    CHECK(loom_graph_init(&g) == LOOM_OK);
    int x = ext(g, buf_x, 2, 6, 4, "x");
    int w = ext(g, buf_w, 2, 5, 3, "w_bad");  /* K mismatch: 3 vs 4 */
    int y = loom_g_matmul(g, x, w, "y");
    CHECK(y == -1);
    CHECK(loom_graph_status(g) == LOOM_ERR_SHAPE);
    CHECK_MSG(strstr(loom_last_error(), "matmul") != NULL, "message: %s", loom_last_error());
    /* sticky: later calls fail too and keep the first error */
    CHECK(loom_g_silu(g, y, "z") == -1);
    CHECK_MSG(strstr(loom_last_error(), "matmul") != NULL, "message: %s", loom_last_error());
    loom_graph_reset(g);
    CHECK(loom_graph_status(g) == LOOM_OK);
    x = ext(g, buf_x, 2, 6, 4, "x");
    int a = ext(g, buf_w, 2, 5, 4, "a");
    CHECK(loom_g_add(g, x, a, "bad_add") == -1);
    CHECK(loom_graph_status(g) == LOOM_ERR_SHAPE);
    CHECK(strlen(loom_last_error()) > 0);
    loom_graph_reset(g);
    int64_t shape[1] = {5};
    loom_tensor ti;
    loom_tensor_init(&ti, LOOM_I32, 1, shape, NULL);
    int ids = loom_graph_external(g, &ti);
    x = ext(g, buf_x, 2, 6, 4, "x");
    CHECK(loom_g_silu(g, ids, "silu_of_ints") == -1);
    CHECK(loom_graph_status(g) == LOOM_ERR_DTYPE);
    loom_graph_free(g);
}

/* y = rms_norm(silu(x) * x) . W^T, run by the executor vs ops run one by one. */
static void test_exec_matches_ops(void) {
    fill(buf_x, 24, 0.1f);
    fill(buf_w, 20, -0.3f);
    fill(buf_g, 4, 1.0f);
    float ref_s[24], ref_m[24], ref_n[24], ref_y[30];
    loom_tensor tx, tw, tg, ts, tm, tn, ty;
    int64_t s64[2] = {6, 4}, sw[2] = {5, 4}, sg[1] = {4}, sy[2] = {6, 5};
    loom_tensor_init(&tx, LOOM_F32, 2, s64, buf_x);
    loom_tensor_init(&tw, LOOM_F32, 2, sw, buf_w);
    loom_tensor_init(&tg, LOOM_F32, 1, sg, buf_g);
    loom_tensor_init(&ts, LOOM_F32, 2, s64, ref_s);
    loom_tensor_init(&tm, LOOM_F32, 2, s64, ref_m);
    loom_tensor_init(&tn, LOOM_F32, 2, s64, ref_n);
    loom_tensor_init(&ty, LOOM_F32, 2, sy, ref_y);
    loom_rms_norm_attrs ra = {1e-5f};
    const loom_tensor *a1[1] = {&tx}, *a2[2] = {&ts, &tx}, *a3[2] = {&tm, &tg}, *a4[2] = {&tn, &tw};
    CHECK(loom_op_run(LOOM_OP_SILU, a1, 1, NULL, &ts, LOOM_ISA_REF) == LOOM_OK);
    CHECK(loom_op_run(LOOM_OP_MUL, a2, 2, NULL, &tm, LOOM_ISA_REF) == LOOM_OK);
    CHECK(loom_op_run(LOOM_OP_RMS_NORM, a3, 2, &ra, &tn, LOOM_ISA_REF) == LOOM_OK);
    CHECK(loom_op_run(LOOM_OP_MATMUL, a4, 2, NULL, &ty, LOOM_ISA_REF) == LOOM_OK);

    /* At the reference ISA the executor must reproduce the ops bit for bit; at
     * the machine's best ISA the optimised kernels may reassociate sums, so
     * they match within 2^-11 relative, and every thread count gives the same
     * bits (rows are split, never sums). */
    loom_isa saved = loom_cpu_isa();
    loom_isa isas[2] = {LOOM_ISA_REF, saved};
    for (int ii = 0; ii < 2; ii++) {
        CHECK(loom_cpu_set_isa(isas[ii]) == LOOM_OK);
        float first_y[30];
        for (int nth = 1; nth <= 3; nth++) {
            loom_graph *g;
            loom_executor *e;
            CHECK(loom_graph_init(&g) == LOOM_OK);
            CHECK(loom_executor_init(&e, nth, LOOM_MODE_STEP_BY_STEP) == LOOM_OK);
            int x = ext(g, buf_x, 2, 6, 4, "x"), w = ext(g, buf_w, 2, 5, 4, "w"), gm = ext(g, buf_g, 1, 4, 1, "g");
            int s = loom_g_silu(g, x, "s");
            int m = loom_g_mul(g, s, x, "m");
            int n = loom_g_rms_norm(g, m, gm, 1e-5f, "n");
            int y = loom_g_matmul(g, n, w, "y");
            loom_graph_mark_output(g, y);
            CHECK(loom_graph_status(g) == LOOM_OK);
            CHECK(loom_executor_run(e, g) == LOOM_OK);
            const float *out = loom_graph_tensor(g, y)->data;
            if (ii == 0) {
                CHECK(memcmp(out, ref_y, sizeof ref_y) == 0);
            } else {
                for (int i = 0; i < 30; i++)
                    CHECK(fabsf(out[i] - ref_y[i]) <= 0x1p-11f * (1.0f + fabsf(ref_y[i])));
            }
            if (nth == 1) memcpy(first_y, out, sizeof first_y);
            else CHECK(memcmp(out, first_y, sizeof first_y) == 0);
            CHECK(g->n_nodes == 4);
            for (int i = 0; i < g->n_nodes; i++) {
                CHECK(g->nodes[i].stats.kernels == 1);
                CHECK(g->nodes[i].stats.bytes_written > 0);
                CHECK(g->nodes[i].stats.kernel != NULL);
            }
            CHECK(g->nodes[3].stats.flops == 2.0 * 6 * 5 * 4);
            /* re-running the same graph allocates nothing and gives the same bits */
            int allocs = e->n_allocs;
            CHECK(loom_executor_run(e, g) == LOOM_OK);
            CHECK(e->n_allocs == allocs);
            CHECK(memcmp(loom_graph_tensor(g, y)->data, first_y, sizeof first_y) == 0);
            loom_executor_free(e);
            loom_graph_free(g);
        }
    }
    CHECK(loom_cpu_set_isa(saved) == LOOM_OK);
}

/* A chain a->b->c->d: a and c may share memory, b and d may share; live pairs may not. */
static void test_planner_reuse(void) {
    loom_graph *g;
    CHECK(loom_graph_init(&g) == LOOM_OK);
    int x = ext(g, buf_x, 2, 6, 4, "x");
    int t[6];
    t[0] = loom_g_silu(g, x, "t0");
    for (int i = 1; i < 6; i++) t[i] = loom_g_silu(g, t[i - 1], "t");
    loom_graph_mark_output(g, t[5]);
    CHECK(loom_graph_plan(g) == LOOM_OK);
    size_t one = 6 * 4 * sizeof(float);
    one = (one + LOOM_ALIGN - 1) / LOOM_ALIGN * LOOM_ALIGN;
    CHECK_MSG(g->arena_bytes == 2 * one, "arena %zu, expected %zu", g->arena_bytes, 2 * one);
    for (int i = 1; i < 6; i++)  /* producer and consumer are live at once */
        CHECK(g->tensors[t[i]].offset != g->tensors[t[i - 1]].offset);
    /* an output stays alive to the end: nothing after it may take its place */
    loom_graph_reset(g);
    x = ext(g, buf_x, 2, 6, 4, "x");
    int keep = loom_g_silu(g, x, "keep");
    loom_graph_mark_output(g, keep);
    int u = loom_g_silu(g, x, "u");
    for (int i = 0; i < 4; i++) u = loom_g_silu(g, u, "u");
    CHECK(loom_graph_plan(g) == LOOM_OK);
    for (int i = 0; i < g->n_tensors; i++)
        if (i != keep && g->tensors[i].kind == LOOM_TK_INTERMEDIATE)
            CHECK(g->tensors[i].offset != g->tensors[keep].offset);
    loom_graph_free(g);
}

static void test_views(void) {
    loom_graph *g;
    loom_executor *e;
    CHECK(loom_graph_init(&g) == LOOM_OK);
    CHECK(loom_executor_init(&e, 2, LOOM_MODE_STEP_BY_STEP) == LOOM_OK);
    fill(buf_x, 24, 0.5f);
    int x = ext(g, buf_x, 2, 6, 4, "x");
    int s = loom_g_silu(g, x, "s");
    int last = loom_graph_view_rows(g, s, 5, 1);
    int64_t shp[1] = {4};
    int flat = loom_graph_reshape(g, last, 1, shp);
    int y = loom_g_silu(g, flat, "y");
    loom_graph_mark_output(g, y);
    CHECK(loom_graph_view_rows(g, s, 5, 2) == -1);  /* out of range */
    CHECK(loom_graph_status(g) == LOOM_ERR_SHAPE);
    loom_graph_reset(g);
    x = ext(g, buf_x, 2, 6, 4, "x");
    s = loom_g_silu(g, x, "s");
    last = loom_graph_view_rows(g, s, 5, 1);
    flat = loom_graph_reshape(g, last, 1, shp);
    y = loom_g_silu(g, flat, "y");
    loom_graph_mark_output(g, y);
    CHECK(loom_executor_run(e, g) == LOOM_OK);
    const float *out = loom_graph_tensor(g, y)->data;
    for (int i = 0; i < 4; i++) {
        double v = buf_x[20 + i];
        v = v / (1 + exp(-v));
        v = v / (1 + exp(-v));
        CHECK_CLOSE(out[i], v, 1e-6);
    }
    loom_executor_free(e);
    loom_graph_free(g);
}

static void test_modes(void) {
    loom_exec_mode m;
    CHECK(loom_mode_parse("step_by_step", &m) == LOOM_OK && m == LOOM_MODE_STEP_BY_STEP);
    CHECK(loom_mode_parse("fused", &m) == LOOM_OK && m == LOOM_MODE_FUSED);
    CHECK(loom_mode_parse("turbo", &m) == LOOM_ERR_INVALID_ARG);
    loom_executor *e = NULL;
    CHECK(loom_executor_init(&e, 0, LOOM_MODE_STEP_BY_STEP) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_executor_init(&e, 1, (loom_exec_mode)LOOM_MODE_COUNT) == LOOM_ERR_INVALID_ARG);
    /* the fused modes exist (the fusion engine: tests/unit/test_fusion.c) */
    CHECK(loom_executor_init(&e, 1, LOOM_MODE_FUSED) == LOOM_OK);
    loom_executor_free(e);
    /* mode precedence: flag, LOOM_MODE, rules file, fused (the default) */
    CHECK(loom_mode_resolve("fused", NULL, &m) == LOOM_OK && m == LOOM_MODE_FUSED);
    if (!getenv("LOOM_MODE")) CHECK(loom_mode_resolve(NULL, NULL, &m) == LOOM_OK && m == LOOM_MODE_FUSED);
}

int main(void) {
    RUN_TEST(test_shape_errors);
    RUN_TEST(test_exec_matches_ops);
    RUN_TEST(test_planner_reuse);
    RUN_TEST(test_views);
    RUN_TEST(test_modes);
    return TEST_SUMMARY();
}
