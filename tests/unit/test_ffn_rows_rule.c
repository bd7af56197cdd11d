/* The ffn's rows pass in the rules (docs/fusion.md: row_block, row_min): the
 * kernels a prefill layer takes with it and without it, and the numbers of a
 * small random Llama run with it against step_by_step. The kernel itself is
 * tested against its decomposition in test_norm_fusion.c (test_ffn_rows). */
#include <stdio.h>
#include <string.h>

#include "base/cpu.h"
#include "check.h"
#include "test_fusion_common.h"

extern const char loom_fusion_default_yaml[];

/* The default rules with row_min and row_block 256 (the rows pass at any
 * kernel level; its auto is 256 only at AVX2: test_row_block_auto). */
static loom_fusion_rules *rules_with_row_min(int row_min) {
    char with[64];
    snprintf(with, sizeof with, "      row_min: %d\n", row_min);
    loom_fusion_rules *r;
    CHECK_MSG(rules_patched(loom_fusion_default_yaml, "      row_min: auto\n", with, "      row_block: auto\n",
                            "      row_block: 256\n", &r) == LOOM_OK,
              "%s", loom_last_error());
    return r;
}

/* Logits of a prefill of 20 rows and `steps` decode steps in mode (rules r,
 * NULL: built in) on nth threads, into out; fused_with_checkpoints fails on
 * a checkpoint out of tolerance. */
static void run(tmodel *m, const int32_t *ids, loom_exec_mode mode, loom_fusion_rules *r, int nth, int steps,
                float *out) {
    tm_clear_kv(m);
    loom_executor *e;
    CHECK(loom_executor_init(&e, nth, mode) == LOOM_OK);
    if (r) loom_executor_set_rules(e, r);
    e->ckpt_action = LOOM_CHECKPOINT_FAIL;
    loom_graph *g;
    loom_graph_init(&g);
    for (int st = 0; st <= steps; st++) {
        int n = st == 0 ? 20 : 1, pos = st == 0 ? 0 : 20 + st - 1;
        int lg = tm_build(m, g, ids + pos, n, pos, 0);
        CHECK_MSG(loom_executor_run(e, g) == LOOM_OK, "%s: %s", loom_mode_name(mode), loom_last_error());
        memcpy(out + (size_t)st * m->c.vocab_size, loom_graph_tensor(g, lg)->data,
               (size_t)m->c.vocab_size * sizeof(float));
    }
    loom_graph_free(g);
    loom_executor_free(e);
}

/* fn at each kernel level this CPU runs (from the reference level), the
 * level in use restored after. */
static void at_each_level(void (*fn)(void)) {
    const loom_isa best = loom_cpu_isa();
    for (int lv = LOOM_ISA_REF; lv <= (int)loom_cpu_best_isa(); lv++) {
        CHECK(loom_cpu_set_isa((loom_isa)lv) == LOOM_OK);
        fn();
    }
    CHECK(loom_cpu_set_isa(best) == LOOM_OK);
}

/* The graphs of test_one_pass_auto at the kernel level in use. */
static void one_pass_graphs(void) {
    int32_t ids[4] = {1, 5, 7, 3};
    loom_graph *g;
    loom_graph_init(&g);
    const int one = loom_cpu_isa() == LOOM_ISA_AVX2; /* the one pass by default at this level */
    for (int k = 0; k < 4; k++) {
        /* f32 on 2 threads; f32 on 16; q8_0 on 2; f32 on 2 with one_pass_rows 0 */
        tmodel m;
        tm_init(&m, 64, 4, 2, 96, 2, 19, 32, 5);
        if (k == 2) tm_quantize_weights(&m, LOOM_Q8_0);
        loom_fusion_rules *r = NULL;
        CHECK(rules_patched(loom_fusion_default_yaml, "  threads: auto\n", k == 1 ? "  threads: 16\n" : "  threads: 2\n",
                            k == 3 ? "      one_pass_rows: auto\n" : NULL, "      one_pass_rows: 0\n", &r) == LOOM_OK);
        if (r) {
            tm_build(&m, g, ids, 1, 3, 0);
            CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
            CHECK(loom_graph_plan(g) == LOOM_OK);
            int want = k == 0 && one ? 1 : 0, seen = 0;
            for (int n = 0; n < g->n_nodes; n++)
                if (g->nodes[n].op == LOOM_OP_FFN) {
                    const loom_ffn_attrs *fa = (const void *)g->nodes[n].attrs;
                    CHECK_MSG(fa->one_pass_rows == want, "case %d: one_pass_rows %d", k, fa->one_pass_rows);
                    CHECK(fa->one_pass_slices == (k == 1 ? 16 : 8));
                    seen++;
                }
            CHECK(seen == 2);
            for (int l = 0; l < 2; l++)
                CHECK_MSG(tm_layer_kernels(g, l) == (want ? 4 : 5), "%s case %d layer %d: %d kernels",
                          loom_isa_name(loom_cpu_isa()), k, l, tm_layer_kernels(g, l));
            CHECK(tm_ops(g, LOOM_OP_INCRE_ATTENTION_LINEAR) == 0); /* not by default */
            /* preset one_kernel_attention (groups auto): the decode attention and its projection one
             * kernel where 2 kv heads share out on the rules' threads (2: yes, 16: no) over float
             * weights (q8_0: no); groups set to 8 (capped at the 2 kv heads): any weights */
            CHECK(loom_fusion_rules_preset(r, "one_kernel_attention") == LOOM_OK);
            tm_build(&m, g, ids, 1, 3, 0);
            CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
            int al = k == 0 || k == 3;
            CHECK_MSG(tm_ops(g, LOOM_OP_INCRE_ATTENTION_LINEAR) == 2 * al && tm_layer_kernels(g, 0) == (want ? 4 : 5) - al,
                      "case %d: %d kernels with one_kernel_attention", k, tm_layer_kernels(g, 0));
            if (k == 2) {
                loom_fusion_rules *r8 = NULL;
                CHECK(rules_patched(loom_fusion_default_yaml, "  threads: auto\n", "  threads: 2\n", "      groups: 0\n",
                                    "      groups: 8\n", &r8) == LOOM_OK);
                tm_build(&m, g, ids, 1, 3, 0);
                CHECK(r8 && loom_fusion_apply(g, r8, NULL) == LOOM_OK);
                CHECK(tm_ops(g, LOOM_OP_INCRE_ATTENTION_LINEAR) == 2 && tm_layer_kernels(g, 0) == 4);
                for (int n = 0; n < g->n_nodes; n++)
                    if (g->nodes[n].op == LOOM_OP_INCRE_ATTENTION_LINEAR)
                        CHECK(((const loom_incre_attention_linear_attrs *)(const void *)g->nodes[n].attrs)->groups == 2);
                loom_fusion_rules_free(r8);
            }
            loom_fusion_rules_free(r);
        }
        tm_free(&m);
    }
    loom_graph_free(g);
}

/* The ffn rules' one_pass_rows auto: one row (decode of one sequence) for
 * float weights on hardware of at most LOOM_FFN_ONE_PASS_AUTO_THREADS threads
 * with the kernels at the AVX2 level, else the two phases; in the graph, at
 * every level this CPU runs, 4 decode kernels a layer with it, 5 without
 * (AVX-512, more hardware threads, quantized weights, or one_pass_rows: 0),
 * one fewer with preset one_kernel_attention where the decode attention and
 * its projection become one kernel (2 kv heads on 2 threads over float
 * weights; not on 16 threads, nor over q8_0 weights but with groups set). */
static void test_one_pass_auto(void) {
    const int a2 = LOOM_ISA_AVX2;
    CHECK(loom_ffn_one_pass_rows_auto(LOOM_F32, LOOM_F32, LOOM_F32, 2, a2) == 1);
    CHECK(loom_ffn_one_pass_rows_auto(LOOM_F16, LOOM_BF16, LOOM_F16, LOOM_FFN_ONE_PASS_AUTO_THREADS, a2) == 1);
    CHECK(loom_ffn_one_pass_rows_auto(LOOM_F32, LOOM_F32, LOOM_F32, LOOM_FFN_ONE_PASS_AUTO_THREADS + 1, a2) == 0);
    CHECK(loom_ffn_one_pass_rows_auto(LOOM_Q4_0, LOOM_Q4_0, LOOM_Q4_0, 2, a2) == 0);
    CHECK(loom_ffn_one_pass_rows_auto(LOOM_F16, LOOM_F16, LOOM_Q8_0, 1, a2) == 0);
    CHECK(loom_ffn_one_pass_rows_auto(LOOM_F32, LOOM_F32, LOOM_F32, 2, LOOM_ISA_AVX512) == 0);
    CHECK(loom_ffn_one_pass_rows_auto(LOOM_F16, LOOM_F16, LOOM_F16, 1, LOOM_ISA_GENERIC) == 0);
    /* slices: about 8, a multiple of the threads */
    CHECK(loom_ffn_one_pass_slices_for(1) == 8 && loom_ffn_one_pass_slices_for(2) == 8);
    CHECK(loom_ffn_one_pass_slices_for(3) == 9 && loom_ffn_one_pass_slices_for(5) == 10);
    CHECK(loom_ffn_one_pass_slices_for(8) == 8 && loom_ffn_one_pass_slices_for(16) == 16);
    at_each_level(one_pass_graphs);
}

/* row_block auto: the rows pass (256) at the AVX2 level, else the two phases;
 * a prefill of 20 rows with row_min 8 and row_block auto is 3 kernels a layer
 * at AVX2 and 4 at every other level this CPU runs. */
static void row_block_graphs(void) {
    tmodel m;
    tm_init(&m, 32, 4, 2, 40, 2, 19, 32, 2);
    int32_t ids[20];
    for (int i = 0; i < 20; i++) ids[i] = (i * 3 + 1) % 19;
    loom_fusion_rules *r = NULL;
    CHECK(rules_patched(loom_fusion_default_yaml, "      row_min: auto\n", "      row_min: 8\n", NULL, NULL, &r) == LOOM_OK);
    loom_graph *g;
    loom_graph_init(&g);
    if (r) {
        tm_build(&m, g, ids, 20, 0, 0);
        CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
        int want = loom_cpu_isa() == LOOM_ISA_AVX2 ? 3 : 4;
        for (int l = 0; l < 2; l++)
            CHECK_MSG(tm_layer_kernels(g, l) == want, "%s layer %d: %d kernels", loom_isa_name(loom_cpu_isa()), l,
                      tm_layer_kernels(g, l));
    }
    loom_graph_free(g);
    loom_fusion_rules_free(r);
    tm_free(&m);
}

static void test_row_block_auto(void) {
    CHECK(loom_ffn_row_block_auto(LOOM_ISA_AVX2) == LOOM_FFN_ROW_BLOCK);
    CHECK(loom_ffn_row_block_auto(LOOM_ISA_AVX512) == 0 && loom_ffn_row_block_auto(LOOM_ISA_GENERIC) == 0 &&
          loom_ffn_row_block_auto(LOOM_ISA_REF) == 0);
    at_each_level(row_block_graphs);
}

/* The hardware section's isa key pins the level the defaults are chosen for,
 * whatever the CPU and the level in use (`loom plan` of another machine):
 * avx2 gives the one pass (4 decode kernels) and the rows pass (3 prefill
 * kernels), avx512 and generic neither (5 and 4); auto is the level in use;
 * other names are refused. */
static void test_isa_key(void) {
    const char *names[4] = {"avx2", "avx512", "generic", "auto"};
    const int levels[4] = {LOOM_ISA_AVX2, LOOM_ISA_AVX512, LOOM_ISA_GENERIC, (int)loom_cpu_isa()};
    int32_t ids[20];
    for (int i = 0; i < 20; i++) ids[i] = (i * 3 + 1) % 19;
    loom_graph *g;
    loom_graph_init(&g);
    for (int k = 0; k < 4; k++) {
        char with[64];
        snprintf(with, sizeof with, "  threads: 2\n  isa: %s\n", names[k]);
        loom_fusion_rules *r = NULL;
        CHECK(rules_patched(loom_fusion_default_yaml, "  threads: auto\n  isa: auto\n", with, "      row_min: auto\n",
                            "      row_min: 8\n", &r) == LOOM_OK);
        if (!r) continue;
        CHECK_MSG(loom_fusion_rules_hw(r).isa == levels[k], "isa: %s resolved to %d", names[k],
                  loom_fusion_rules_hw(r).isa);
        int a2 = levels[k] == LOOM_ISA_AVX2;
        tmodel m;
        tm_init(&m, 64, 4, 2, 96, 2, 19, 32, 5);
        tm_build(&m, g, ids, 1, 3, 0); /* decode */
        CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
        CHECK_MSG(tm_layer_kernels(g, 0) == (a2 ? 4 : 5), "isa: %s, decode: %d kernels", names[k],
                  tm_layer_kernels(g, 0));
        tm_clear_kv(&m);
        tm_build(&m, g, ids, 20, 0, 0); /* prefill */
        CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
        CHECK_MSG(tm_layer_kernels(g, 0) == (a2 ? 3 : 4), "isa: %s, prefill: %d kernels", names[k],
                  tm_layer_kernels(g, 0));
        tm_free(&m);
        loom_fusion_rules_free(r);
    }
    loom_graph_free(g);
    loom_fusion_rules *r = NULL;
    CHECK(rules_patched(loom_fusion_default_yaml, "  isa: auto\n", "  isa: avx1024\n", NULL, NULL, &r) != LOOM_OK &&
          r == NULL);
    CHECK_MSG(strstr(loom_last_error(), "isa: expected auto, ref, generic, avx2 or avx512") != NULL, "%s",
              loom_last_error());
    loom_fusion_rules_free(r);
}

/* A prefill of 20 rows: 3 kernels a layer with row_min 8 (qkv_rope,
 * attention_linear, the ffn as one kernel), 4 with the default row_min (128
 * rows a thread of the machine) or row_block 0 (the ffn's two phases); a
 * decode step: the ffn's one pass where the rules' hardware allows (4, or 5
 * without). The rows pass's logits are within
 * 2^-11 of step_by_step's, fused_with_checkpoints passes, and 1 and 3
 * threads give the same bits. */
static void test_rows_rule(void) {
    tmodel m;
    tm_init(&m, 32, 4, 2, 40, 2, 19, 32, 2);
    int32_t ids[24];
    for (int i = 0; i < 24; i++) ids[i] = (i * 3 + 1) % 19;
    loom_fusion_rules *rows = rules_with_row_min(8), *def = NULL;
    CHECK(loom_fusion_rules_load(NULL, &def) == LOOM_OK);
    if (!rows || !def) return;
    loom_graph *g;
    loom_graph_init(&g);
    for (int k = 0; k < 3; k++) {
        loom_fusion_rules *r = k == 1 ? def : rows;
        if (k == 2) {
            loom_fusion_rules_free(rows);
            CHECK(rules_patched(loom_fusion_default_yaml, "      row_min: auto\n", "      row_min: 8\n",
                                "      row_block: auto\n", "      row_block: 0\n", &rows) == LOOM_OK);
            if (!(r = rows)) break;
        }
        tm_build(&m, g, ids, 20, 0, 0);
        CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
        CHECK(loom_graph_plan(g) == LOOM_OK);
        for (int l = 0; l < 2; l++)
            CHECK_MSG(tm_layer_kernels(g, l) == (k == 0 ? 3 : 4), "rules %d layer %d: %d kernels", k, l,
                      tm_layer_kernels(g, l));
        tm_build(&m, g, ids, 1, 20, 0);
        CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
        CHECK(loom_graph_plan(g) == LOOM_OK);
        /* decode: the ffn in one pass where the rules' hardware allows (auto, f32 weights) */
        loom_fusion_hw hw = loom_fusion_rules_hw(r);
        int dk = loom_ffn_one_pass_rows_auto(LOOM_F32, LOOM_F32, LOOM_F32, hw.threads, hw.isa) ? 4 : 5;
        for (int l = 0; l < 2; l++) CHECK_MSG(tm_layer_kernels(g, l) == dk, "rules %d decode: %d kernels", k, tm_layer_kernels(g, l));
    }
    /* row_min auto: 128 rows a thread of the hardware section (not capped by
     * max_fusion_block_size); the slice from its l3; row_block auto at the
     * kernel level in use */
    loom_fusion_rules *rh;
    CHECK(rules_patched(loom_fusion_default_yaml, "  threads: auto\n", "  threads: 48\n", "  l3: auto\n",
                        "  l3: 4194304\n", &rh) == LOOM_OK);
    if (rh) {
        tm_build(&m, g, ids, 20, 0, 0);
        CHECK(loom_fusion_apply(g, rh, NULL) == LOOM_OK);
        int seen = 0, rb = loom_ffn_row_block_auto(loom_fusion_rules_hw(rh).isa);
        for (int n = 0; n < g->n_nodes; n++)
            if (g->nodes[n].op == LOOM_OP_FFN) {
                const loom_ffn_attrs *fa = (const void *)g->nodes[n].attrs;
                CHECK_MSG(fa->row_min == 128 * 48 && fa->row_block == rb, "row_min %d row_block %d", fa->row_min,
                          fa->row_block);
                CHECK(fa->row_slice == loom_ffn_row_slice(rb, 40, 4194304, 48));
                CHECK(fa->one_pass_rows == 0); /* more threads than the one pass's slices */
                seen++;
            }
        CHECK(seen == 2);
        loom_fusion_rules_free(rh);
    }
    loom_graph_free(g);
    loom_fusion_rules_free(rows);
    loom_fusion_rules_free(def);
    const int steps = 3, V = m.c.vocab_size;
    float *lo[4];
    for (int i = 0; i < 4; i++) lo[i] = calloc((size_t)(steps + 1) * V, sizeof(float));
    run(&m, ids, LOOM_MODE_STEP_BY_STEP, NULL, 2, steps, lo[0]);
    /* the executor takes the rules it is given and frees them */
    run(&m, ids, LOOM_MODE_FUSED, rules_with_row_min(8), 1, steps, lo[1]);
    run(&m, ids, LOOM_MODE_FUSED, rules_with_row_min(8), 3, steps, lo[2]);
    run(&m, ids, LOOM_MODE_FUSED_WITH_CHECKPOINTS, rules_with_row_min(8), 2, steps, lo[3]);
    int bad = 0, moved = 0;
    for (int i = 0; i < (steps + 1) * V; i++) {
        bad += !check_close(lo[1][i], lo[0][i], 1.0 / 2048) || !check_close(lo[3][i], lo[0][i], 1.0 / 2048);
        moved += lo[0][i] != 0.0f;
    }
    CHECK_MSG(bad == 0, "rows pass: %d logits out of tolerance", bad);
    CHECK(moved > 0);
    CHECK_MSG(memcmp(lo[1], lo[2], sizeof(float) * (size_t)((steps + 1) * V)) == 0, "rows pass: 1 and 3 threads differ");
    for (int i = 0; i < 4; i++) free(lo[i]);
    tm_free(&m);
}

int main(void) {
    RUN_TEST(test_one_pass_auto);
    RUN_TEST(test_row_block_auto);
    RUN_TEST(test_isa_key);
    RUN_TEST(test_rows_rule);
    return TEST_SUMMARY();
}
