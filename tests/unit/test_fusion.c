/* The fusion engine: default rules on Llama graphs, disabled rules, the three
 * execution modes against each other on random small models, rules-file
 * errors, traffic accounting against a hand calculation, and no allocation in
 * decode steps. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "check.h"
#include "graph/profile.h"
#include "test_fusion_common.h"
#include "fused/fused_internal.h"

extern const char loom_fusion_default_yaml[];

static int fired(const loom_fusion_report *r, const char *name) {
    for (int i = 0; i < r->n_rules; i++)
        if (!strcmp(r->rules[i].name, name)) return r->rules[i].fired;
    return -1;
}

/* The shared set-up of the rule tests: a model of L layers (dim 48, GQA
 * 4/2, FFN 100, vocab 37), 24 prompt ids, an empty graph. */
static loom_graph *llama3_setup(tmodel *m, int L, int32_t *ids) {
    tm_init(m, 48, 4, 2, 100, L, 37, 64, 1);
    for (int i = 0; i < 24; i++) ids[i] = (i * 5 + 1) % 37;
    loom_graph *g = NULL;
    CHECK(loom_graph_init(&g) == LOOM_OK);
    return g;
}

/* The default rules on a Llama graph: the norms join the next GEMMs and the
 * residual adds the previous ones' epilogues, so a decode layer is qkv_rope
 * (with the norm), attention, the output projection (+ residual) and the ffn
 * (with the norm and the residual): kernels per layer drop from 18 to 4 (the
 * ffn of one sequence's decode step is one kernel over these f32 weights, on
 * hardware of at most LOOM_FFN_ONE_PASS_AUTO_THREADS threads with the kernels
 * at the AVX2 level; else two, 5; counted
 * on one thread, where decode attention does not split KV). In prefill (20
 * rows) the attention and the output projection are one attention_linear
 * kernel: 4. Rounds 4-5, preset one_pass_ffn: the ffn of a decode step is one
 * kernel on any hardware, so 4 in decode. */
static void test_default_rules_on_llama(void) {
    loom_fusion_rules *rules;
    CHECK(loom_fusion_rules_load(NULL, &rules) == LOOM_OK);
    if (!rules) return;
    tmodel m;
    const int L = 3;
    int32_t ids[24];
    loom_graph *g = llama3_setup(&m, L, ids);
    const loom_fusion_hw hw = loom_fusion_rules_hw(rules);
    const int decode_k = loom_ffn_one_pass_rows_auto(LOOM_F32, LOOM_F32, LOOM_F32, hw.threads, hw.isa) ? 4 : 5;
    /* rounds 6-7 add preset one_kernel_attention: the decode attention and its projection one
     * kernel where two kv heads share out on the rules' threads (groups auto) */
    const int al_hw = loom_incre_attention_linear_groups(2, hw.threads) > 0;
    for (int round = 0; round < 8; round++) {
        int phase = round % 2, n = phase ? 1 : 20, pos = phase ? 20 : 0, al = round >= 6 && al_hw;
        if (round == 4) CHECK(loom_fusion_rules_preset(rules, "one_pass_ffn") == LOOM_OK);
        if (round == 6) CHECK(loom_fusion_rules_preset(rules, "one_kernel_attention") == LOOM_OK);
        tm_build(&m, g, ids, n, pos, 0);
        CHECK(loom_graph_status(g) == LOOM_OK);
        /* rounds 2, 3: data-less graphs (analytic planning) fuse the same way */
        if (round >= 2)
            for (int t = 0; t < g->n_tensors; t++) g->tensors[t].t.data = NULL;
        for (int l = 0; l < L; l++) CHECK(tm_layer_kernels(g, l) >= 11);
        loom_fusion_report rep;
        CHECK(loom_fusion_apply(g, rules, &rep) == LOOM_OK);
        CHECK_MSG(fired(&rep, "norm_qkv_rope_cache") == L, "qkv %d", fired(&rep, "norm_qkv_rope_cache"));
        CHECK(fired(&rep, "qkv_rope_cache") == 0);
        CHECK(fired(&rep, "attention") == (phase && !al ? L : 0));
        CHECK(fired(&rep, "incre_attention_linear_residual") == (phase && al ? L : 0));
        CHECK(fired(&rep, "attention_linear_residual") == (phase ? 0 : L));
        CHECK_MSG(fired(&rep, "norm_ffn_residual") == L, "ffn %d", fired(&rep, "norm_ffn_residual"));
        CHECK_MSG(fired(&rep, "linear_residual") == (phase && !al ? L : 0), "linear %d", fired(&rep, "linear_residual"));
        CHECK_MSG(fired(&rep, "norm_linear") == 1, "head %d", fired(&rep, "norm_linear")); /* the LM head */
        CHECK(fired(&rep, "add_rms_norm") == 0 && fired(&rep, "ffn_residual") == 0 && fired(&rep, "ffn") == 0);
        CHECK(rep.nodes_after < rep.nodes_before);
        for (int l = 0; l < L; l++) {
            int k = tm_layer_kernels(g, l);
            CHECK_MSG(k == (phase ? (round < 4 ? decode_k : 4 - al) : 4), "round %d layer %d: %d kernels", round, l, k);
            if (round == 7) CHECK(al_hw == 0 || k == 3);
            CHECK(tm_layer_ops(g, l, LOOM_OP_QKV_ROPE) == 1);
            CHECK(tm_layer_ops(g, l, LOOM_OP_FFN) == 1);
            CHECK(tm_layer_ops(g, l, LOOM_OP_LINEAR) == (phase && !al));
            CHECK(tm_layer_ops(g, l, LOOM_OP_ATTENTION_LINEAR) == !phase);
            CHECK(tm_layer_ops(g, l, LOOM_OP_INCRE_ATTENTION_LINEAR) == (phase && al));
            CHECK(tm_layer_ops(g, l, LOOM_OP_INCRE_FLASH_ATTENTION) == (phase && !al) &&
                  tm_layer_ops(g, l, LOOM_OP_FLASH_ATTENTION) == 0);
            CHECK(tm_layer_ops(g, l, LOOM_OP_ADD_RMS_NORM) == 0 && tm_layer_ops(g, l, LOOM_OP_RMS_NORM) == 0 &&
                  tm_layer_ops(g, l, LOOM_OP_ADD) == 0 && tm_layer_ops(g, l, LOOM_OP_MATMUL) == 0);
            CHECK(tm_layer_ops(g, l, LOOM_OP_ROPE) == 0 && tm_layer_ops(g, l, LOOM_OP_SILU) == 0 &&
                  tm_layer_ops(g, l, LOOM_OP_KV_APPEND) == 0);
        }
    }
    loom_graph_free(g);
    tm_free(&m);
    loom_fusion_rules_free(rules);
}


/* With the norm and linear rules disabled, the rules of before them apply:
 * add_rms_norm joins each residual add to the next norm (7 kernels a layer
 * in prefill), and the results are the same bits (tested in run_mode's
 * comparisons: every fused kernel equals its decomposition). */
static void test_norm_rules_disabled(void) {
    loom_fusion_rules *rules;
    CHECK(loom_fusion_rules_load(NULL, &rules) == LOOM_OK);
    if (!rules) return;
    const char *off[] = {"norm_qkv_rope_cache", "norm_qkv_rope_cache_i8", "norm_qkv_rope_paged",
                         "norm_qkv_rope_paged_i8", "norm_ffn_residual", "linear_residual", "norm_linear",
                         "attention_linear_residual"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) CHECK(loom_fusion_rules_enable(rules, off[i], 0) == LOOM_OK);
    tmodel m;
    const int L = 3;
    int32_t ids[24];
    loom_graph *g = llama3_setup(&m, L, ids);
    tm_build(&m, g, ids, 20, 0, 0);
    loom_fusion_report rep;
    CHECK(loom_fusion_apply(g, rules, &rep) == LOOM_OK);
    CHECK(fired(&rep, "qkv_rope_cache") == L && fired(&rep, "add_rms_norm") == 2 * L - 1);
    CHECK(fired(&rep, "ffn_residual") == 1 && fired(&rep, "ffn") == L - 1 && fired(&rep, "linear_residual") == 0);
    for (int l = 0; l < L; l++) {
        CHECK_MSG(tm_layer_kernels(g, l) <= 7, "layer %d: %d kernels", l, tm_layer_kernels(g, l));
        CHECK(tm_layer_ops(g, l, LOOM_OP_ADD_RMS_NORM) == (l == 0 ? 1 : 2) && tm_layer_ops(g, l, LOOM_OP_LINEAR) == 0);
    }
    loom_graph_free(g);
    tm_free(&m);
    loom_fusion_rules_free(rules);
}

static void test_disabled_rule(void) {
    const char *ffn_rules[2] = {"  - name: ffn_residual\n    fused_op: ffn\n", "  - name: ffn\n    fused_op: ffn\n"};
    char *t1 = patched(loom_fusion_default_yaml, ffn_rules[0],
                       "  - name: ffn_residual\n    fused_op: ffn\n    enabled: false\n");
    char *t2 = t1 ? patched(t1, ffn_rules[1], "  - name: ffn\n    fused_op: ffn\n    enabled: false\n") : NULL;
    CHECK(t2 != NULL);
    loom_fusion_rules *rules = NULL;
    if (t2) CHECK(loom_fusion_rules_parse(t2, strlen(t2), "t.yaml", &rules) == LOOM_OK);
    free(t1), free(t2);
    if (!rules) return;
    CHECK(loom_fusion_rules_enable(rules, "norm_ffn_residual", 0) == LOOM_OK);
    tmodel m;
    tm_init(&m, 32, 4, 4, 40, 2, 19, 16, 2);
    int32_t ids[3] = {1, 2, 3};
    loom_graph *g;
    loom_graph_init(&g);
    tm_build(&m, g, ids, 3, 0, 0);
    loom_fusion_report rep;
    CHECK(loom_fusion_apply(g, rules, &rep) == LOOM_OK);
    CHECK(fired(&rep, "ffn") == 0 && fired(&rep, "ffn_residual") == 0 && fired(&rep, "norm_qkv_rope_cache") == 2);
    for (int l = 0; l < 2; l++) {
        CHECK(tm_layer_ops(g, l, LOOM_OP_FFN) == 0);
        CHECK(tm_layer_ops(g, l, LOOM_OP_SILU) == 1 && tm_layer_ops(g, l, LOOM_OP_MUL) == 1);
        /* gate, up; wo and down with their residual adds are linear */
        CHECK_MSG(tm_layer_ops(g, l, LOOM_OP_MATMUL) == 2, "%d matmuls", tm_layer_ops(g, l, LOOM_OP_MATMUL));
        CHECK_MSG(tm_layer_ops(g, l, LOOM_OP_LINEAR) == 2, "%d linear", tm_layer_ops(g, l, LOOM_OP_LINEAR));
    }
    /* the API switch does the same */
    loom_fusion_rules *def;
    CHECK(loom_fusion_rules_load(NULL, &def) == LOOM_OK);
    CHECK(loom_fusion_rules_enable(def, "attention", 0) == LOOM_OK);
    CHECK(loom_fusion_rules_enable(def, "no_such_rule", 0) != LOOM_OK);
    tm_build(&m, g, ids, 3, 0, 0);
    CHECK(loom_fusion_apply(g, def, &rep) == LOOM_OK);
    CHECK(fired(&rep, "attention") == 0 && tm_layer_ops(g, 0, LOOM_OP_ATTENTION) == 1);
    loom_fusion_rules_free(def);
    /* attention_linear off: a prefill's attention and output projection are
     * flash_attention_score and linear again (5 kernels a layer, not 4) */
    int32_t ids20[20];
    for (int i = 0; i < 20; i++) ids20[i] = (i * 3 + 1) % 19;
    tmodel m2;
    tm_init(&m2, 32, 4, 2, 40, 2, 19, 32, 2); /* 32 positions */
    for (int off = 0; off < 2; off++) {
        CHECK(loom_fusion_rules_load(NULL, &def) == LOOM_OK);
        if (off) CHECK(loom_fusion_rules_enable(def, "attention_linear_residual", 0) == LOOM_OK);
        tm_build(&m2, g, ids20, 20, 0, 0);
        CHECK(loom_fusion_apply(g, def, &rep) == LOOM_OK);
        for (int l = 0; l < 2; l++) {
            CHECK(tm_layer_ops(g, l, LOOM_OP_ATTENTION_LINEAR) == !off);
            CHECK(tm_layer_ops(g, l, LOOM_OP_FLASH_ATTENTION) == off && tm_layer_ops(g, l, LOOM_OP_LINEAR) == off);
            CHECK_MSG(tm_layer_kernels(g, l) == 4 + off, "rule %s: %d kernels", off ? "off" : "on",
                      tm_layer_kernels(g, l));
        }
        loom_fusion_rules_free(def);
    }
    /* at decode_max_q_len rows and below the attention is the decode kernel's: not
     * attention_linear; incre_attention_linear under preset one_kernel_attention where the
     * two kv heads share out on the rules' threads (4 kernels a layer with the ffn's two
     * phases over 16 rows); with the rule off (the default's groups 0, or enable false
     * under the preset) incre_flash_attention and linear (5) */
    for (int off = 0; off < 3; off++) {
        CHECK(loom_fusion_rules_load(NULL, &def) == LOOM_OK);
        if (off != 1) CHECK(loom_fusion_rules_preset(def, "one_kernel_attention") == LOOM_OK);
        int al = !off && loom_incre_attention_linear_groups(2, loom_fusion_rules_hw(def).threads) > 0;
        if (off == 2) CHECK(loom_fusion_rules_enable(def, "incre_attention_linear_residual", 0) == LOOM_OK);
        tm_build(&m2, g, ids20, 16, 0, 0);
        CHECK(loom_fusion_apply(g, def, &rep) == LOOM_OK);
        CHECK(fired(&rep, "attention_linear_residual") == 0);
        CHECK(fired(&rep, "incre_attention_linear_residual") == (al ? 2 : 0));
        for (int l = 0; l < 2; l++) {
            CHECK(tm_layer_ops(g, l, LOOM_OP_INCRE_ATTENTION_LINEAR) == al);
            CHECK(tm_layer_ops(g, l, LOOM_OP_INCRE_FLASH_ATTENTION) == !al && tm_layer_ops(g, l, LOOM_OP_LINEAR) == !al);
            CHECK_MSG(tm_layer_kernels(g, l) == 5 - al, "rule %s: %d kernels", off ? "off" : "on",
                      tm_layer_kernels(g, l));
        }
        loom_fusion_rules_free(def);
    }
    tm_free(&m2);
    loom_fusion_rules_free(rules);
    loom_graph_free(g);
    tm_free(&m);
}

/* Runs prefill + decode steps of m in mode; logits of every step into out. */
static int run_mode(tmodel *m, loom_exec_mode mode, int threads, const int32_t *ids, int n_prompt,
                    int steps, float *out, loom_executor **keep) {
    int V = m->c.vocab_size;
    tm_clear_kv(m);
    loom_executor *e;
    if (loom_executor_init(&e, threads, mode) != LOOM_OK) return 0;
    if (mode == LOOM_MODE_FUSED_WITH_CHECKPOINTS) e->ckpt_action = LOOM_CHECKPOINT_FAIL;
    loom_graph *g;
    loom_graph_init(&g);
    int ok = 1;
    for (int s = 0; s <= steps && ok; s++) {
        int n = s == 0 ? n_prompt : 1, pos = s == 0 ? 0 : n_prompt + s - 1;
        int lg = tm_build(m, g, ids + pos, n, pos, 0);
        ok = loom_executor_run(e, g) == LOOM_OK;
        if (!ok) fprintf(stderr, "%s: %s\n", loom_mode_name(mode), loom_last_error());
        if (ok) memcpy(out + (size_t)s * V, loom_graph_tensor(g, lg)->data, (size_t)V * sizeof(float));
    }
    loom_graph_free(g);
    if (keep) *keep = e;
    else loom_executor_free(e);
    return ok;
}

/* All three modes agree on random small models (shapes off every tile size). */
static void test_modes_agree(void) {
    const struct { int dim, heads, kv, hidden, layers, vocab, prompt; } cfg[] = {
        {48, 4, 2, 100, 3, 37, 9}, {40, 5, 5, 72, 2, 23, 20}, {64, 8, 2, 172, 2, 61, 33},
    };
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = (i * 7 + 3) % 19;
    for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
        tmodel m;
        tm_init(&m, cfg[k].dim, cfg[k].heads, cfg[k].kv, cfg[k].hidden, cfg[k].layers, cfg[k].vocab, 64,
                100 + k);
        const int steps = 4, V = cfg[k].vocab;
        float *lo[3];
        for (int md = 0; md < 3; md++) {
            lo[md] = calloc((size_t)(steps + 1) * V, sizeof(float));
            loom_executor *e = NULL;
            CHECK_MSG(run_mode(&m, (loom_exec_mode)md, 1 + (int)(k % 2), ids, cfg[k].prompt, steps, lo[md],
                               md == 2 ? &e : NULL),
                      "config %zu mode %d", k, md);
            if (e) {
                /* the layers, and the head (its norm and LM head: norm_linear) */
                CHECK_MSG(e->n_ckpt == cfg[k].layers + 1, "%d checkpoints", e->n_ckpt);
                for (int c = 0; c < e->n_ckpt; c++) CHECK(e->ckpt[c].runs == steps + 1 && e->ckpt[c].failed_runs == 0);
                loom_executor_free(e);
            }
        }
        for (int md = 1; md < 3; md++) {
            int bad = 0;
            for (int i = 0; i < (steps + 1) * V; i++) bad += !check_close(lo[md][i], lo[0][i], 1.0 / 2048);
            CHECK_MSG(bad == 0, "config %zu: mode %d differs from step_by_step in %d logits", k, md, bad);
        }
        for (int md = 0; md < 3; md++) free(lo[md]);
        tm_free(&m);
    }
}

/* The fused graph ops at every kernel level (ref = their reference
 * decomposition) against the unfused graph at the reference level. */
static void test_fused_levels(void) {
    tmodel m;
    tm_init(&m, 40, 5, 5, 72, 2, 23, 48, 77);
    int32_t ids[48];
    for (int i = 0; i < 48; i++) ids[i] = (i * 11 + 5) % 23;
    const int steps = 2, V = 23, n_prompt = 19;
    float *ref = calloc((size_t)(steps + 1) * V, sizeof(float)), *got = calloc((size_t)(steps + 1) * V, sizeof(float));
    loom_isa best = loom_cpu_best_isa();
    CHECK(loom_cpu_set_isa(LOOM_ISA_REF) == LOOM_OK);
    CHECK(run_mode(&m, LOOM_MODE_STEP_BY_STEP, 1, ids, n_prompt, steps, ref, NULL));
    for (int isa = LOOM_ISA_REF; isa <= (int)best; isa++) {
        if (loom_cpu_set_isa((loom_isa)isa) != LOOM_OK) continue;
        CHECK(run_mode(&m, LOOM_MODE_FUSED, 2, ids, n_prompt, steps, got, NULL));
        int bad = 0;
        for (int i = 0; i < (steps + 1) * V; i++) bad += !check_close(got[i], ref[i], 1.0 / 2048);
        CHECK_MSG(bad == 0, "fused at %s: %d logits differ from the reference", loom_isa_name((loom_isa)isa), bad);
    }
    loom_cpu_set_isa(best);
    free(ref), free(got);
    tm_free(&m);
}

static void expect_error(const char *text, const char *want) {
    loom_fusion_rules *r = NULL;
    loom_status s = loom_fusion_rules_parse(text, strlen(text), "bad.yaml", &r);
    CHECK_MSG(s != LOOM_OK && r == NULL, "accepted: %s", text);
    CHECK_MSG(strstr(loom_last_error(), want) != NULL, "got '%s', want '%s'", loom_last_error(), want);
    loom_fusion_rules_free(r);
}

static void test_rules_errors(void) {
    expect_error("rules:\n  - name: x\n    fused_op: ffn\n   pattern: [\n", "bad.yaml:");
    expect_error("rules:\n  - name: a\n    fused_op: add_rms_norm\n    pattern:\n"
                 "      - {name: add, op: addd, inputs: [$a, $b]}\n",
                 "bad.yaml:5:");
    expect_error("rules:\n  - name: a\n    fused_op: add_rms_norm\n    pattern:\n"
                 "      - {name: add, op: addd, inputs: [$a, $b]}\n",
                 "unknown op kind 'addd'");
    expect_error("rules:\n  - name: a\n    fused_op: super_op\n    pattern:\n"
                 "      - {name: add, op: add, inputs: [$a, $b]}\n",
                 "bad.yaml:3:15: rule 'a': unknown fused op 'super_op'");
    const char *ok_pat = "rules:\n  - name: a\n    fused_op: add_rms_norm\n    pattern:\n"
                         "      - {name: add, op: add, inputs: [$a, $b]}\n"
                         "      - {name: norm, op: rms_norm, inputs: [add, $g]}\n";
    char buf[1024];
    snprintf(buf, sizeof buf, "%s    options:\n      tile: 4\n", ok_pat);
    expect_error(buf, "bad.yaml:8:7: rule 'a': unknown option 'tile'");
    snprintf(buf, sizeof buf, "%s    enabled: maybe\n", ok_pat);
    expect_error(buf, "bad.yaml:7:14: enabled: expected true or false");
    expect_error("rules:\n  - name: a\n    fused_op: ffn\n    pattern:\n"
                 "      - {name: gate, op: matmul, inputs: [$x, $w]}\n",
                 "needs the pattern to name node 'up'");
    expect_error("rules:\n  - name: a\n    fused_op: add_rms_norm\n    pattern:\n"
                 "      - {name: add, op: add, inputs: [$a, $b]}\n"
                 "      - {name: norm, op: rms_norm, inputs: [$c, $g]}\n",
                 "not connected");
    /* roles: a pattern that binds a builder's inputs to the wrong nodes matches
     * the graph as well and computed garbage; it is refused by node and binding */
    const char *ffn_head = "rules:\n  - name: f\n    fused_op: ffn\n    pattern:\n";
    snprintf(buf, sizeof buf, "%s%s", ffn_head,
             "      - {name: gate, op: matmul, inputs: [$x, $w_up]}\n"
             "      - {name: up, op: matmul, inputs: [$x, $w_gate]}\n"
             "      - {name: act, op: silu, inputs: [gate]}\n"
             "      - {name: mul, op: mul, inputs: [act, up]}\n"
             "      - {name: down, op: matmul, inputs: [mul, $w_down]}\n");
    expect_error(buf, "bad.yaml:5:9: rule 'f': fused op ffn takes gate = matmul($x, $w_gate); pattern node 'gate' "
                      "binds $w_up as input 2 where $w_gate belongs");
    snprintf(buf, sizeof buf, "%s%s", ffn_head,  /* the activation on up */
             "      - {name: gate, op: matmul, inputs: [$x, $w_gate]}\n"
             "      - {name: up, op: matmul, inputs: [$x, $w_up]}\n"
             "      - {name: act, op: silu, inputs: [up]}\n"
             "      - {name: mul, op: mul, inputs: [act, gate]}\n"
             "      - {name: down, op: matmul, inputs: [mul, $w_down]}\n");
    expect_error(buf, "bad.yaml:7:9: rule 'f': fused op ffn takes act = *(gate); pattern node 'act' binds up");
    snprintf(buf, sizeof buf, "%s%s", ffn_head,  /* the residual on the wrong node */
             "      - {name: gate, op: matmul, inputs: [$x, $w_gate]}\n"
             "      - {name: up, op: matmul, inputs: [$x, $w_up]}\n"
             "      - {name: act, op: silu, inputs: [gate]}\n"
             "      - {name: mul, op: mul, inputs: [act, up]}\n"
             "      - {name: down, op: matmul, inputs: [mul, $w_down]}\n"
             "      - {name: residual, op: add, inputs: [$r, mul]}\n");
    expect_error(buf, "pattern node 'residual' binds mul as input 2 where down belongs");
    /* linear_bias: the activation and the residual take the bias's output */
    const char *lb_head = "rules:\n  - name: l\n    fused_op: linear_bias\n    pattern:\n"
                          "      - {name: mm, op: matmul, inputs: [$x, $w]}\n"
                          "      - {name: bias, op: add_bias, inputs: [mm, $bias]}\n";
    snprintf(buf, sizeof buf, "%s%s", lb_head, "      - {name: residual, op: add, inputs: [$r, mm]}\n");
    expect_error(buf, "pattern node 'residual' binds mm as input 2 where bias belongs");
    snprintf(buf, sizeof buf, "%s%s", lb_head, "      - {name: act, op: gelu, inputs: [mm]}\n");
    expect_error(buf, "fused op linear_bias takes act = *(bias); pattern node 'act' binds mm");
    snprintf(buf, sizeof buf, "rules:\n  - name: l\n    fused_op: linear_bias\n    pattern:\n"
                              "      - {name: mm, op: matmul, inputs: [$x, $w]}\n"
                              "      - {name: bias, op: add_bias, inputs: [$bias, mm]}\n");
    expect_error(buf, "pattern node 'bias' binds $bias as input 1 where mm belongs");
    const char *qkv_head = "rules:\n  - name: q\n    fused_op: qkv_rope\n    pattern:\n"
                           "      - {name: q, op: matmul, inputs: [$x, $wq]}\n";
    snprintf(buf, sizeof buf, "%s%s", qkv_head,
             "      - {name: k, op: matmul, inputs: [$x, $wv]}\n"
             "      - {name: v, op: matmul, inputs: [$x, $wk]}\n"
             "      - {name: q_rope, op: rope, inputs: [q]}\n"
             "      - {name: k_rope, op: rope, inputs: [k]}\n"
             "      - {name: k_cache, op: kv_append, inputs: [$ks, k_rope]}\n"
             "      - {name: v_cache, op: kv_append, inputs: [$vs, v]}\n");
    expect_error(buf, "bad.yaml:6:9: rule 'q': fused op qkv_rope takes k = matmul($x, $wk); pattern node 'k' binds "
                      "$wv as input 2 where $wk belongs");
    snprintf(buf, sizeof buf, "%s%s", qkv_head,  /* V written to the K cache */
             "      - {name: k, op: matmul, inputs: [$x, $wk]}\n"
             "      - {name: v, op: matmul, inputs: [$x, $wv]}\n"
             "      - {name: q_rope, op: rope, inputs: [q]}\n"
             "      - {name: k_rope, op: rope, inputs: [k]}\n"
             "      - {name: k_cache, op: kv_append, inputs: [$ks, v]}\n"
             "      - {name: v_cache, op: kv_append, inputs: [$vs, k_rope]}\n");
    expect_error(buf, "bad.yaml:10:9: rule 'q': fused op qkv_rope takes k_cache = kv_append(_, k_rope, [$k_scale]); "
                      "pattern node 'k_cache' binds v as input 2 where k_rope belongs");
    snprintf(buf, sizeof buf, "%s%s", qkv_head,  /* an op in the wrong role */
             "      - {name: k, op: matmul, inputs: [$x, $wk]}\n"
             "      - {name: v, op: matmul, inputs: [$x, $wv]}\n"
             "      - {name: q_rope, op: silu, inputs: [q]}\n"
             "      - {name: k_rope, op: rope, inputs: [k]}\n"
             "      - {name: k_cache, op: kv_append, inputs: [$ks, k_rope]}\n"
             "      - {name: v_cache, op: kv_append, inputs: [$vs, v]}\n");
    expect_error(buf, "bad.yaml:8:9: rule 'q': fused op qkv_rope takes q_rope = rope(q); pattern node 'q_rope' is op silu");
    snprintf(buf, sizeof buf, "%s%s", qkv_head,  /* a scale store where the i8 scale belongs */
             "      - {name: k, op: matmul, inputs: [$x, $wk]}\n"
             "      - {name: v, op: matmul, inputs: [$x, $wv]}\n"
             "      - {name: q_rope, op: rope, inputs: [q]}\n"
             "      - {name: k_rope, op: rope, inputs: [k]}\n"
             "      - {name: k_cache, op: kv_append, inputs: [$ks, k_rope, $v_scale]}\n"
             "      - {name: v_cache, op: kv_append, inputs: [$vs, v, $k_scale]}\n");
    expect_error(buf, "pattern node 'k_cache' binds $v_scale as input 3 where $k_scale belongs");
    expect_error("rules:\n  - name: a\n    fused_op: fused_infer_attention\n    pattern:\n"
                 "      - {name: attn, op: attention, inputs: [$q, $v, $k]}\n",
                 "bad.yaml:5:9: rule 'a': fused op fused_infer_attention takes attn = attention($q, $k, $v, "
                 "[$k_scale, $v_scale]); pattern node 'attn' binds $v as input 2 where $k belongs");
    /* the same roles written otherwise are fine: mul and add in either order, no residual node */
    const char *fine = "rules:\n  - name: f\n    fused_op: ffn\n    pattern:\n"
                       "      - {name: up, op: matmul, inputs: [$x, $w_up]}\n"
                       "      - {name: gate, op: matmul, inputs: [$x, $w_gate]}\n"
                       "      - {name: act, op: silu, inputs: [gate]}\n"
                       "      - {name: mul, op: mul, inputs: [up, act]}\n"
                       "      - {name: down, op: matmul, inputs: [mul, $w_down]}\n"
                       "      - {name: residual, op: add, inputs: [down, $r]}\n";
    loom_fusion_rules *ok_rules = NULL;
    CHECK_MSG(loom_fusion_rules_parse(fine, strlen(fine), "fine.yaml", &ok_rules) == LOOM_OK, "%s", loom_last_error());
    loom_fusion_rules_free(ok_rules);
    expect_error("", "bad.yaml:1:1");
    expect_error("rules: 3\n", "bad.yaml:1:8: rules: expected a list");
    expect_error("rulez: []\n", "unknown key 'rulez'");
    snprintf(buf, sizeof buf, "%spresets:\n  big:\n    a: {tile: 1}\n", ok_pat);
    expect_error(buf, "unknown option 'tile'");
    loom_fusion_rules *r;
    CHECK(loom_fusion_rules_load(NULL, &r) == LOOM_OK);
    CHECK(loom_fusion_rules_preset(r, "7b") == LOOM_OK);
    CHECK(loom_fusion_rules_preset(r, "1t") != LOOM_OK && strstr(loom_last_error(), "small"));
    loom_fusion_rules_free(r);
    CHECK(loom_fusion_rules_load("/nonexistent/rules.yaml", &r) != LOOM_OK &&
          strstr(loom_last_error(), "/nonexistent/rules.yaml"));
}

/* Presets change options of the fused nodes; the hardware section overrides cpuid. */
static void test_presets_and_hw(void) {
    loom_fusion_rules *r;
    CHECK(loom_fusion_rules_load(NULL, &r) == LOOM_OK);
    if (!r) return;
    loom_fusion_hw hw = loom_fusion_rules_hw(r);
    CHECK(hw.l1_bytes > 0 && hw.l2_bytes > 0 && hw.l3_bytes > 0 && hw.threads >= 1);
    CHECK(loom_fusion_rules_preset(r, "small") == LOOM_OK);
    tmodel m;
    tm_init(&m, 32, 4, 2, 40, 1, 19, 16, 3);
    int32_t ids[4] = {1, 2, 3, 4};
    loom_graph *g;
    loom_graph_init(&g);
    tm_build(&m, g, ids, 4, 0, 0);
    CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
    int seen = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        if (g->nodes[n].op == LOOM_OP_QKV_ROPE) {
            seen++;
            CHECK(((const loom_qkv_rope_attrs *)(const void *)g->nodes[n].attrs)->block_heads == 1);
        }
        if (g->nodes[n].op == LOOM_OP_FFN) {
            seen++;
            CHECK(((const loom_ffn_attrs *)(const void *)g->nodes[n].attrs)->block_n == 64);
        }
    }
    CHECK(seen == 2);
    loom_graph_free(g);
    loom_fusion_rules_free(r);
    /* inner_precise reaches the prefill and decode attention nodes: 0 by default, 1 with the preset */
    tm_free(&m);
    tm_init(&m, 32, 4, 2, 40, 2, 19, 32, 3); /* 2 layers, 32 positions */
    int32_t ids20[20];
    for (int i = 0; i < 20; i++) ids20[i] = i % 19;
    for (int fast = 0; fast < 2; fast++) {
        CHECK(loom_fusion_rules_load(NULL, &r) == LOOM_OK);
        if (!r) break;
        if (fast) CHECK(loom_fusion_rules_preset(r, "fast_attention") == LOOM_OK);
        /* the prefill attention is attention_linear's, which takes inner_precise too; with that
         * rule off, the attention rule's flash_attention_score */
        for (int al_off = 0; al_off < 2; al_off++) {
            if (al_off) CHECK(loom_fusion_rules_enable(r, "attention_linear_residual", 0) == LOOM_OK);
            loom_graph_init(&g);
            tm_build(&m, g, ids20, 20, 0, 0); /* 20 query rows: the prefill kernel */
            CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
            CHECK(tm_ops(g, LOOM_OP_FLASH_ATTENTION) == 2 * al_off && tm_ops(g, LOOM_OP_ATTENTION_LINEAR) == 2 * !al_off);
            for (int n = 0; n < g->n_nodes; n++) {
                const void *at = g->nodes[n].attrs;
                if (g->nodes[n].op == LOOM_OP_FLASH_ATTENTION)
                    CHECK(((const loom_flash_attention_attrs *)at)->inner_precise == fast);
                if (g->nodes[n].op == LOOM_OP_ATTENTION_LINEAR)
                    CHECK(((const loom_attention_linear_attrs *)at)->inner_precise == fast);
            }
            loom_graph_free(g);
        }
        loom_graph_init(&g);
        tm_build(&m, g, ids20, 1, 19, 0); /* one query row at position 19: the decode kernel */
        CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
        for (int n = 0; n < g->n_nodes; n++) {
            const void *at = g->nodes[n].attrs;
            if (g->nodes[n].op == LOOM_OP_INCRE_FLASH_ATTENTION)
                CHECK(((const loom_incre_flash_attention_attrs *)at)->inner_precise == fast);
            if (g->nodes[n].op == LOOM_OP_INCRE_ATTENTION_LINEAR)
                CHECK(((const loom_incre_attention_linear_attrs *)at)->attn.inner_precise == fast);
        }
        CHECK(tm_ops(g, LOOM_OP_INCRE_FLASH_ATTENTION) + tm_ops(g, LOOM_OP_INCRE_ATTENTION_LINEAR) == 2);
        loom_graph_free(g);
        loom_fusion_rules_free(r);
    }
    tm_free(&m);
    const char *t = "hardware: {l1: 4096, l2: 65536, l3: auto, threads: 3}\nmode: fused\nrules: []\n";
    CHECK(loom_fusion_rules_parse(t, strlen(t), "hw.yaml", &r) == LOOM_OK);
    if (!r) return;
    hw = loom_fusion_rules_hw(r);
    CHECK(hw.l1_bytes == 4096 && hw.l2_bytes == 65536 && hw.l3_bytes > 0 && hw.threads == 3);
    CHECK(loom_fusion_rules_mode(r) == LOOM_MODE_FUSED && loom_fusion_rules_count(r) == 0);
    loom_fusion_rules_free(r);
    expect_error("hardware: {l2: lots}\nrules: []\n", "bad.yaml:1:16: l2: expected an integer");
    expect_error("hardware: {isa: avx3}\nrules: []\n",
                 "hardware: isa: expected auto, ref, generic, avx2 or avx512, found 'avx3'");
    expect_error("hardware: {threads: 2, isa: avx2, threads: 3}\nrules: []\n", "hardware: 'threads' given twice");
    expect_error("hardware:\n  isa: avx2\n  isa: auto\nrules: []\n", "bad.yaml:3:3: hardware: 'isa' given twice");
}

/* Traffic of add -> rms_norm on [M, D], by hand: unfused the sum is written
 * and read back; fused it is written once (it is an output) and not re-read. */
static void test_profile_bytes(void) {
    enum { M = 5, D = 24 };
    static float a[M * D], b[M * D], gm[D];
    for (int i = 0; i < M * D; i++) a[i] = (float)(i % 7) - 3.0f, b[i] = 0.5f * (float)(i % 5);
    for (int i = 0; i < D; i++) gm[i] = 1.0f + 0.01f * (float)i;
    double unfused_r = 0, unfused_w = 0, fused_r = 0, fused_w = 0;
    for (int md = 0; md < 2; md++) {
        loom_graph *g;
        loom_graph_init(&g);
        loom_tensor t;
        int64_t s2[2] = {M, D}, s1[1] = {D};
        loom_tensor_init(&t, LOOM_F32, 2, s2, a);
        int ia = loom_graph_external(g, &t);
        loom_tensor_init(&t, LOOM_F32, 2, s2, b);
        int ib = loom_graph_external(g, &t);
        loom_tensor_init(&t, LOOM_F32, 1, s1, gm);
        int ig = loom_graph_external(g, &t);
        loom_graph_set_layer(g, 0);
        int r = loom_g_add(g, ia, ib, "r");
        int y = loom_g_rms_norm(g, r, ig, 1e-5f, "y");
        loom_graph_mark_output(g, r);
        loom_graph_mark_output(g, y);
        loom_executor *e;
        CHECK(loom_executor_init(&e, 1, md ? LOOM_MODE_FUSED : LOOM_MODE_STEP_BY_STEP) == LOOM_OK);
        CHECK(loom_executor_run(e, g) == LOOM_OK);
        loom_profile p;
        CHECK(loom_profile_collect(loom_executor_last_graph(e), 1, "prefill", "x", M, &p) == LOOM_OK);
        *(md ? &fused_r : &unfused_r) = p.total.bytes_read;
        *(md ? &fused_w : &unfused_w) = p.total.bytes_written;
        CHECK(p.total.kernels == (md ? 1 : 2));
        /* the fused results equal the unfused ones */
        const float *yd = loom_graph_tensor(g, y)->data, *rd = loom_graph_tensor(g, r)->data;
        for (int i = 0; i < M; i++) {
            double ss = 0;
            for (int j = 0; j < D; j++) ss += (double)(a[i * D + j] + b[i * D + j]) * (a[i * D + j] + b[i * D + j]);
            double inv = 1.0 / sqrt(ss / D + 1e-5);
            for (int j = 0; j < D; j++) {
                CHECK_CLOSE(rd[i * D + j], a[i * D + j] + b[i * D + j], 1e-6);
                CHECK_CLOSE(yd[i * D + j], (a[i * D + j] + b[i * D + j]) * inv * gm[j], 1.0 / 2048);
            }
        }
        loom_profile_free(&p);
        loom_executor_free(e);
        loom_graph_free(g);
    }
    const double f = 4.0;  /* bytes per f32 */
    CHECK(unfused_r == f * (2 * M * D) + f * (M * D + D));  /* add: a, b; norm: r, gamma */
    CHECK(unfused_w == f * (M * D) * 2);                    /* r, y */
    CHECK(fused_r == f * (2 * M * D + D));                  /* a, b, gamma */
    CHECK(fused_w == f * (M * D) * 2);                      /* r, y */
}

/* Checkpoints catch a difference: a deliberately wrong fused op (add that is
 * off by 1e-3) replaces the residual adds; with action fail the run stops and
 * names the first layer, with warn it completes and records the errors. */
static loom_status bad_add(const loom_tensor *const *in, int n_in, loom_tensor *out, int ith, int nth, void *u) {
    int64_t n = loom_tensor_nelem(out), lo = n * ith / nth, hi = n * (ith + 1) / nth;
    for (int64_t i = lo; i < hi; i++)
        ((float *)out->data)[i] = ((const float *)in[0]->data)[i] + ((const float *)in[1]->data)[i] + 1e-3f;
    return LOOM_OK;
}

static void test_checkpoints_detect(void) {
    loom_fused_op_desc d = {.name = "test_bad_add", .n_inputs = 2, .kernel = bad_add, .decomposition = "add"};
    CHECK(loom_register_fused_op(&d) == LOOM_OK);
    CHECK(loom_register_fused_op(&d) != LOOM_OK);   /* the name is taken now */
    const char *text = "checkpoints: {at: [layer_output, logits], action: warn}\n"
                       "rules:\n  - name: wrong\n    fused_op: test_bad_add\n    pattern:\n"
                       "      - {name: s, op: add, inputs: [$a, $b]}\n";
    tmodel m;
    tm_init(&m, 48, 4, 2, 100, 2, 37, 64, 5);
    int32_t ids[24];
    for (int i = 0; i < 24; i++) ids[i] = (i * 3 + 2) % 37;
    for (int action = 0; action < 2; action++) {
        loom_fusion_rules *r = NULL;
        CHECK(loom_fusion_rules_parse(text, strlen(text), "wrong.yaml", &r) == LOOM_OK);
        loom_executor *e;
        CHECK(loom_executor_init(&e, 1, LOOM_MODE_FUSED_WITH_CHECKPOINTS) == LOOM_OK);
        loom_executor_set_rules(e, r);
        if (action) e->ckpt_action = LOOM_CHECKPOINT_FAIL;
        loom_graph *g;
        loom_graph_init(&g);
        tm_build(&m, g, ids, 20, 0, 0);
        loom_status s = loom_executor_run(e, g);
        if (action) {
            CHECK_MSG(s != LOOM_OK && strstr(loom_last_error(), "checkpoint L0: fused op test_bad_add"), "%s",
                      loom_last_error());
        } else {
            /* one checkpoint per layer with fused ops; the head has none */
            CHECK(s == LOOM_OK && e->n_ckpt == 2);
            for (int c = 0; c < 2 && c < e->n_ckpt; c++)
                CHECK_MSG(e->ckpt[c].runs == 1 && e->ckpt[c].failed_runs == 1 && e->ckpt[c].max_abs > 5e-4 &&
                              e->ckpt[c].max_abs < 1e-2,
                          "%s: %g", e->ckpt[c].name, e->ckpt[c].max_abs);
            CHECK(e->report.rules[0].fired == 4);   /* two residual adds per layer */
            CHECK(e->ckpt_unchecked == 0);
        }
        loom_graph_free(g);
        loom_executor_free(e);
    }
    tm_free(&m);
}

/* Quantized weights (q4_1, q8 activations: a fused op's float-order noise
 * could flip an 8-bit rounding of the next op's input): the default rules'
 * fused ops each equal their decomposition from the same inputs, so a
 * prefill and decode steps pass with action fail, in every KV dtype; the
 * perturbed add (1e-3, registered by test_checkpoints_detect) still fails. */
static void test_checkpoints_quantized(void) {
    tmodel m;
    tm_init(&m, 64, 4, 2, 160, 3, 37, 64, 11);
    tm_quantize_weights(&m, LOOM_Q4_1);
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = (i * 7 + 3) % 37;
    for (int bad = 0; bad < 2; bad++) {
        const char *text = "checkpoints: {at: [layer_output, logits], action: fail}\n"
                           "rules:\n  - name: wrong\n    fused_op: test_bad_add\n    pattern:\n"
                           "      - {name: s, op: add, inputs: [$a, $b]}\n";
        loom_fusion_rules *r = NULL;
        if (bad) CHECK(loom_fusion_rules_parse(text, strlen(text), "wrong.yaml", &r) == LOOM_OK);
        else CHECK(loom_fusion_rules_load(NULL, &r) == LOOM_OK);
        loom_executor *e;
        CHECK(loom_executor_init(&e, 2, LOOM_MODE_FUSED_WITH_CHECKPOINTS) == LOOM_OK);
        loom_executor_set_rules(e, r);
        e->ckpt_action = LOOM_CHECKPOINT_FAIL;
        tm_clear_kv(&m);
        loom_graph *g;
        loom_graph_init(&g);
        loom_status s = LOOM_OK;
        for (int step = 0; step < 6 && s == LOOM_OK; step++) { /* a prefill of 30, then decode steps */
            int pos = step ? 29 + step : 0, n = step ? 1 : 30;
            tm_build(&m, g, ids + pos, n, pos, 0);
            s = loom_executor_run(e, g);
        }
        if (bad) {
            CHECK_MSG(s != LOOM_OK && strstr(loom_last_error(), "fused op test_bad_add"), "%s", loom_last_error());
        } else {
            CHECK_MSG(s == LOOM_OK, "%s", loom_last_error());
            CHECK_MSG(e->n_ckpt == 4 && e->ckpt_unchecked == 0, "%d checkpoints", e->n_ckpt); /* 3 layers, the head (norm_linear) */
            for (int c = 0; c < e->n_ckpt; c++)
                CHECK_MSG(e->ckpt[c].runs == 6 && e->ckpt[c].failed_runs == 0 && e->ckpt[c].max_rel < 1e-4,
                          "%s: %g", e->ckpt[c].name, e->ckpt[c].max_rel);
        }
        loom_graph_free(g);
        loom_executor_free(e);
    }
    tm_free(&m);
}

/* `auto` block sizes come from the rules' hardware section: the same graph
 * fused with l3 = 16 KiB and l3 = 32 MiB gets smaller FFN column blocks and
 * fewer QKV heads per item with the small cache, each equal to the
 * kernels' own formula for that L3; decode (T < 8) uses the decode sizes. */
/* attention_linear from the hardware section's L2: taken while W_o (here 64 x
 * 64 f32, 16 KiB) fits in half the L2, its automatic block_rows the most rows
 * whose attention output takes half the L2 (at most 256); with a smaller L2
 * the rule is refused and flash_attention_score + linear take the layer. */
static void test_attention_linear_from_hw(void) {
    const int64_t l2s[3] = {16 << 10, 64 << 10, 1 << 20};
    const char *base = loom_fusion_default_yaml;
    tmodel m;
    tm_init(&m, 64, 8, 4, 96, 1, 19, 80, 6); /* H * D = 64 */
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = i % 19;
    for (int h = 0; h < 3; h++) {
        char hw[64];
        snprintf(hw, sizeof hw, "hardware:\n  l1: auto\n  l2: %lld\n", (long long)l2s[h]);
        char *text = patched(base, "hardware:\n  l1: auto\n  l2: auto\n", hw);
        CHECK(text != NULL);
        if (!text) continue;
        loom_fusion_rules *r = NULL;
        CHECK_MSG(loom_fusion_rules_parse(text, strlen(text), "hw.yaml", &r) == LOOM_OK, "%s", loom_last_error());
        free(text);
        if (!r) continue;
        loom_graph *g;
        loom_graph_init(&g);
        tm_build(&m, g, ids, 40, 0, 0);
        CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
        int fused = h > 0; /* 16 KiB of W_o: within half of 64 KiB, not of 16 KiB */
        CHECK_MSG(tm_ops(g, LOOM_OP_ATTENTION_LINEAR) == fused && tm_ops(g, LOOM_OP_FLASH_ATTENTION) == !fused,
                  "l2 %lld: %d attention_linear", (long long)l2s[h], tm_ops(g, LOOM_OP_ATTENTION_LINEAR));
        for (int n = 0; n < g->n_nodes; n++)
            if (g->nodes[n].op == LOOM_OP_ATTENTION_LINEAR) {
                const loom_attention_linear_attrs *a = (const void *)g->nodes[n].attrs;
                int64_t want = l2s[h] / 2 / (4 * 64);
                CHECK_MSG(a->block_rows == (want > 256 ? 256 : want) && a->residual == 1,
                          "l2 %lld: block_rows %d", (long long)l2s[h], (int)a->block_rows);
                CHECK(a->sparse_mode == LOOM_SPARSE_RIGHT_DOWN_CAUSAL);
            }
        loom_graph_free(g);
        loom_fusion_rules_free(r);
    }
    tm_free(&m);
}

static void test_auto_blocks_from_hw(void) {
    const char *body =
        "rules:\n"
        "  - name: qkv\n"
        "    fused_op: qkv_rope\n"
        "    pattern:\n"
        "      - {name: q, op: matmul, inputs: [$x, $wq]}\n"
        "      - {name: k, op: matmul, inputs: [$x, $wk]}\n"
        "      - {name: v, op: matmul, inputs: [$x, $wv]}\n"
        "      - {name: q_rope, op: rope, inputs: [q]}\n"
        "      - {name: k_rope, op: rope, inputs: [k]}\n"
        "      - {name: k_cache, op: kv_append, inputs: [$k_store, k_rope]}\n"
        "      - {name: v_cache, op: kv_append, inputs: [$v_store, v]}\n"
        "    options: {block_heads: auto}\n"
        "  - name: ffn\n"
        "    fused_op: ffn\n"
        "    pattern:\n"
        "      - {name: gate, op: matmul, inputs: [$x, $w_gate]}\n"
        "      - {name: up, op: matmul, inputs: [$x, $w_up]}\n"
        "      - {name: act, op: silu, inputs: [gate]}\n"
        "      - {name: mul, op: mul, inputs: [act, up]}\n"
        "      - {name: down, op: matmul, inputs: [mul, $w_down]}\n"
        "      - {name: residual, op: add, inputs: [$res, down]}\n"
        "    options: {block_n: auto}\n";
    const int64_t l3s[2] = {16 << 10, 32 << 20};
    int64_t bn[2][2] = {{0}}, hb[2][2] = {{0}};
    tmodel m;
    tm_init(&m, 64, 8, 4, 1024, 1, 19, 80, 5);  /* head_dim 8, hidden 1024 */
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = i % 19;
    for (int h = 0; h < 2; h++) {
        char text[2048];
        snprintf(text, sizeof text, "hardware: {l3: %lld}\n%s", (long long)l3s[h], body);
        loom_fusion_rules *r = NULL;
        CHECK_MSG(loom_fusion_rules_parse(text, strlen(text), "hw.yaml", &r) == LOOM_OK, "%s", loom_last_error());
        if (!r) continue;
        for (int ph = 0; ph < 2; ph++) { /* prefill of 64 tokens, then a decode step */
            loom_graph *g;
            loom_graph_init(&g);
            tm_build(&m, g, ph ? ids + 63 : ids, ph ? 1 : 63, ph ? 63 : 0, 0);
            CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
            int64_t T = ph ? 1 : 63;
            for (int n = 0; n < g->n_nodes; n++) {
                const void *at = g->nodes[n].attrs;
                if (g->nodes[n].op == LOOM_OP_QKV_ROPE) {
                    hb[h][ph] = ((const loom_qkv_rope_attrs *)at)->block_heads;
                    CHECK(hb[h][ph] == loom_qkv_heads_per_block_for(T, 8, 8, 4, l3s[h]));
                }
                if (g->nodes[n].op == LOOM_OP_FFN) {
                    bn[h][ph] = ((const loom_ffn_attrs *)at)->block_n;
                    CHECK(bn[h][ph] == loom_ffn_block_cols_for(T, 1024, l3s[h]));
                }
            }
            loom_graph_free(g);
        }
        loom_fusion_rules_free(r);
    }
    CHECK_MSG(bn[0][0] < bn[1][0] && bn[0][0] >= 32, "block_n %lld vs %lld", (long long)bn[0][0], (long long)bn[1][0]);
    CHECK_MSG(hb[0][0] < hb[1][0], "block_heads %lld vs %lld", (long long)hb[0][0], (long long)hb[1][0]);
    /* decode: GEMVs of whole heads, at least 64 weight rows an item (8 heads of 8, capped at the 4 kv heads) */
    CHECK(bn[0][1] == 128 && bn[1][1] == 128 && hb[0][1] == 4 && hb[1][1] == 4);
    /* the formulas: equal blocks in multiples of 4 (prefill), divisors of n_kv_heads */
    for (int64_t H = 1; H <= 3000; H += 37) {
        int64_t b = loom_ffn_block_cols_for(512, H, 32 << 20), nb = (H + b - 1) / b;
        CHECK_MSG(b >= 1 && b <= H && (b == H || b % 32 == 0) && (nb % 4 == 0 || nb < 4 || b * (nb - 1) < H),
                  "H %lld: block %lld", (long long)H, (long long)b);
    }
    for (int64_t kv = 1; kv <= 32; kv++) {
        int64_t b = loom_qkv_heads_per_block_for(512, 128, 4 * kv, kv, 32 << 20);
        CHECK_MSG(b >= 1 && kv % b == 0, "kv %lld: %lld heads per item", (long long)kv, (long long)b);
    }
    /* items start at multiples of 32 weight rows where the heads allow (the
     * packed panels' boundaries): head size 80 two heads an item, 40 four, 96
     * one; prefill prefers such a divisor of the kv heads */
    static const int64_t dec[][3] = {{80, 2, 8}, {40, 4, 8}, {96, 1, 8}, {64, 1, 8}, {80, 1, 1}, {48, 2, 8}};
    for (int i = 0; i < 6; i++) {
        int64_t b = loom_qkv_heads_per_block_for(1, dec[i][0], 4 * dec[i][2], dec[i][2], 32 << 20);
        CHECK_MSG(b == dec[i][1], "head size %lld, one row: %lld heads an item", (long long)dec[i][0], (long long)b);
    }
    for (int64_t kv = 2; kv <= 32; kv += 2) {
        int64_t b = loom_qkv_heads_per_block_for(64, 80, 4 * kv, kv, 32 << 20);
        CHECK_MSG(b == 1 || b * 80 % 32 == 0, "kv %lld, head size 80: %lld heads an item", (long long)kv, (long long)b);
    }
    tm_free(&m);
}

int main(void) {
    RUN_TEST(test_checkpoints_detect);
    RUN_TEST(test_checkpoints_quantized);
    RUN_TEST(test_default_rules_on_llama);
    RUN_TEST(test_disabled_rule);
    RUN_TEST(test_norm_rules_disabled);
    RUN_TEST(test_modes_agree);
    RUN_TEST(test_fused_levels);
    RUN_TEST(test_rules_errors);
    RUN_TEST(test_presets_and_hw);
    RUN_TEST(test_auto_blocks_from_hw);
    RUN_TEST(test_attention_linear_from_hw);
    RUN_TEST(test_profile_bytes);
    return TEST_SUMMARY();
}
