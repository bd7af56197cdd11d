/*
 * How the activation precision is chosen and how it reaches the kernels:
 * names and parsing, the rules file's `act_precision:` key (and its errors),
 * the resolution order (caller, rules file, LOOM_ACT_PREC_BUILTIN), the
 * attributes of a graph's quantized matmul nodes, their copy into the fused
 * qkv_rope and ffn nodes (a match whose matmuls differ is not fused), and a
 * small q4_1 Llama run step_by_step and fused on 1 and 3 threads: with full
 * activations the two modes agree to the f32 rule and the threads bit for
 * bit, against the f64 reference kernels to the f32 rule, and q8 moves the
 * logits by more (the setting took effect).
 */
#include <stdio.h>
#include <unistd.h>

#include "check.h"
#include "graph/act_precision.h"
#include "ops/quant.h"
#include "test_fusion_common.h"

/* A rules file with the given extra top-level text, in a temporary file. */
static void write_rules(char *path, const char *extra) {
    strcpy(path, "/tmp/loom_act_rules_XXXXXX");
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    CHECK(f != NULL);
    if (!f) return;
    fprintf(f, "version: 1\n%srules: []\n", extra);
    fclose(f);
}

static void test_names_and_rules_key(void) {
    loom_act_precision p;
    CHECK(loom_act_precision_parse("full", &p) == LOOM_OK && p == LOOM_ACT_PREC_FULL);
    CHECK(loom_act_precision_parse("q8", &p) == LOOM_OK && p == LOOM_ACT_PREC_Q8);
    CHECK(loom_act_precision_parse("default", &p) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "'default'") && strstr(loom_last_error(), "q8 or full"));
    CHECK(loom_act_precision_parse(NULL, &p) == LOOM_ERR_INVALID_ARG);
    CHECK(!strcmp(loom_act_precision_name(LOOM_ACT_PREC_FULL), "full"));
    CHECK(!strcmp(loom_act_precision_name(LOOM_ACT_PREC_COUNT), "unknown"));

    static const struct { const char *text; loom_act_precision want; } ok[] = {
        {"rules: []\nact_precision: full\n", LOOM_ACT_PREC_FULL},
        {"act_precision: q8\nrules: []\n", LOOM_ACT_PREC_Q8},
        {"rules: []\n", LOOM_ACT_PREC_DEFAULT},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        loom_fusion_rules *r = NULL;
        CHECK_MSG(loom_fusion_rules_parse(ok[i].text, strlen(ok[i].text), "t.yaml", &r) == LOOM_OK, "%s",
                  loom_last_error());
        CHECK(loom_fusion_rules_act_precision(r) == ok[i].want);
        loom_fusion_rules_free(r);
    }
    CHECK(loom_fusion_rules_act_precision(NULL) == LOOM_ACT_PREC_DEFAULT);
    const char *bad = "rules: []\nact_precision: f16\n";
    loom_fusion_rules *r = NULL;
    CHECK(loom_fusion_rules_parse(bad, strlen(bad), "t.yaml", &r) == LOOM_ERR_FORMAT);
    CHECK_MSG(strstr(loom_last_error(), "t.yaml:2:16: act_precision: expected q8 or full, found 'f16'"), "%s",
              loom_last_error());
    /* the built-in rules leave the choice to LOOM_ACT_PREC_BUILTIN */
    CHECK(loom_fusion_rules_load(NULL, &r) == LOOM_OK);
    CHECK(loom_fusion_rules_act_precision(r) == LOOM_ACT_PREC_DEFAULT);
    loom_fusion_rules_free(r);
}

/* The caller's value, else the rules file's, else LOOM_ACT_PREC_BUILTIN. */
static void test_resolve(void) {
    char q8[64], none[64];
    write_rules(q8, "act_precision: q8\n");
    write_rules(none, "");
    loom_act_precision p = LOOM_ACT_PREC_COUNT;
    CHECK(loom_act_precision_resolve(LOOM_ACT_PREC_FULL, q8, &p) == LOOM_OK && p == LOOM_ACT_PREC_FULL);
    CHECK(loom_act_precision_resolve(LOOM_ACT_PREC_DEFAULT, q8, &p) == LOOM_OK && p == LOOM_ACT_PREC_Q8);
    CHECK(loom_act_precision_resolve(LOOM_ACT_PREC_DEFAULT, none, &p) == LOOM_OK && p == LOOM_ACT_PREC_BUILTIN);
    CHECK(loom_act_precision_resolve(LOOM_ACT_PREC_DEFAULT, NULL, &p) == LOOM_OK && p == LOOM_ACT_PREC_BUILTIN);
    CHECK(loom_act_precision_resolve((loom_act_precision)9, NULL, &p) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "activation precision 9") != NULL);
    CHECK(loom_act_precision_resolve(LOOM_ACT_PREC_DEFAULT, "/nonexistent/rules.yaml", &p) == LOOM_ERR_IO);
    unlink(q8);
    unlink(none);
}

/* m's matrices in dtype wt, each from its f32 values (kept for nothing else);
 * returns the block storage to free. The output matrix stays f32. */
static void *tm_quantize(tmodel *m, loom_dtype wt) {
    loom_tensor *ts[16 * 7];
    int n = 0;
    for (int l = 0; l < m->c.n_layers; l++) {
        loom_llama_layer *L = &m->w.layers[l];
        loom_tensor *lt[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w2, &L->w3};
        for (int i = 0; i < 7; i++) ts[n++] = lt[i];
    }
    size_t total = 0;
    for (int i = 0; i < n; i++) total += loom_dtype_row_bytes(wt, ts[i]->shape[1]) * (size_t)ts[i]->shape[0];
    char *store = malloc(total), *p = store;
    for (int i = 0; i < n; i++) {
        loom_tensor *t = ts[i];
        int64_t shape[2] = {t->shape[0], t->shape[1]};
        size_t rb = loom_dtype_row_bytes(wt, shape[1]);
        for (int64_t r = 0; r < shape[0]; r++)
            loom_quantize_row(wt, (const float *)t->data + r * shape[1], p + (size_t)r * rb, shape[1]);
        loom_tensor_init(t, wt, 2, shape, p);
        p += rb * (size_t)shape[0];
    }
    return store;
}

static int count_attr(const loom_graph *g, loom_op op, loom_act_precision want) {
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const loom_node *n = &g->nodes[i];
        if (n->op != op || !n->has_attrs) continue;
        int32_t a = op == LOOM_OP_MATMUL    ? ((const loom_matmul_attrs *)(const void *)n->attrs)->act_precision
                    : op == LOOM_OP_FFN      ? ((const loom_ffn_attrs *)(const void *)n->attrs)->act_precision
                                             : ((const loom_qkv_rope_attrs *)(const void *)n->attrs)->act_precision;
        k += a == (int32_t)want;
    }
    return k;
}

/* The matmul nodes with quantized weights get the attribute, the f32 output
 * matmul none; the fusion rules carry it into qkv_rope and ffn, and refuse a
 * layer whose Q, K, V matmuls disagree. */
static void test_graph_attributes(void) {
    const int L = 3;
    tmodel m;
    tm_init(&m, 64, 4, 2, 96, L, 37, 32, 5);
    void *store = tm_quantize(&m, LOOM_Q4_1);
    loom_fusion_rules *rules;
    CHECK(loom_fusion_rules_load(NULL, &rules) == LOOM_OK);
    loom_graph *g;
    CHECK(loom_graph_init(&g) == LOOM_OK);
    int32_t ids[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    for (int n_tok = 1; n_tok <= 12; n_tok += 11) {
        tm_build(&m, g, ids, n_tok, 0, 0);
        loom_graph_set_act_precision(g, LOOM_ACT_PREC_FULL);
        CHECK(count_attr(g, LOOM_OP_MATMUL, LOOM_ACT_PREC_FULL) == 7 * L);
        CHECK(tm_ops(g, LOOM_OP_MATMUL) == 7 * L + 1);  /* + the f32 logits matmul, no attribute */
        loom_fusion_report rep;
        CHECK(loom_fusion_apply(g, rules, &rep) == LOOM_OK);
        CHECK(count_attr(g, LOOM_OP_QKV_ROPE, LOOM_ACT_PREC_FULL) == L);
        CHECK(count_attr(g, LOOM_OP_FFN, LOOM_ACT_PREC_FULL) == L);
        for (int l = 0; l < L; l++) CHECK(tm_layer_kernels(g, l) <= 7);
        /* q8, then one layer's K matmul full: that layer keeps its matmuls */
        tm_build(&m, g, ids, n_tok, 0, 0);
        loom_graph_set_act_precision(g, LOOM_ACT_PREC_Q8);
        for (int i = 0; i < g->n_nodes; i++) {
            loom_node *nd = &g->nodes[i];
            if (nd->op == LOOM_OP_MATMUL && nd->layer == 1 && strstr(g->tensors[nd->dst].t.name, ".k"))
                ((loom_matmul_attrs *)(void *)nd->attrs)->act_precision = LOOM_ACT_PREC_FULL;
        }
        CHECK(loom_fusion_apply(g, rules, &rep) == LOOM_OK);
        CHECK(count_attr(g, LOOM_OP_QKV_ROPE, LOOM_ACT_PREC_Q8) == L - 1);
        CHECK(tm_layer_ops(g, 1, LOOM_OP_QKV_ROPE) == 0 && tm_layer_ops(g, 1, LOOM_OP_MATMUL) >= 3);
        CHECK(count_attr(g, LOOM_OP_FFN, LOOM_ACT_PREC_Q8) == L);
    }
    loom_graph_free(g);
    loom_fusion_rules_free(rules);
    free(store);
    tm_free(&m);
}

/* Prefill + decode steps of m in mode with activation precision act; the
 * logits of every step into out. */
static int run_act(tmodel *m, loom_exec_mode mode, int threads, loom_act_precision act, const int32_t *ids,
                   int n_prompt, int steps, float *out) {
    int V = m->c.vocab_size;
    tm_clear_kv(m);
    loom_executor *e;
    if (loom_executor_init(&e, threads, mode) != LOOM_OK) return 0;
    loom_graph *g;
    loom_graph_init(&g);
    int ok = 1;
    for (int s = 0; s <= steps && ok; s++) {
        int n = s == 0 ? n_prompt : 1, pos = s == 0 ? 0 : n_prompt + s - 1;
        int lg = tm_build(m, g, ids + pos, n, pos, 0);
        loom_graph_set_act_precision(g, act);
        ok = loom_executor_run(e, g) == LOOM_OK;
        if (!ok) fprintf(stderr, "%s: %s\n", loom_mode_name(mode), loom_last_error());
        if (ok) memcpy(out + (size_t)s * V, loom_graph_tensor(g, lg)->data, (size_t)V * sizeof(float));
    }
    loom_graph_free(g);
    loom_executor_free(e);
    return ok;
}

static int count_far(const float *a, const float *b, int n, double tol) {
    int bad = 0;
    for (int i = 0; i < n; i++) bad += !check_close(a[i], b[i], tol);
    return bad;
}

static void test_model_runs(void) {
    const loom_dtype wts[2] = {LOOM_Q4_1, LOOM_Q8_0};
    const int steps = 3, V = 37, n_prompt = 11, N = (steps + 1) * V;
    int32_t ids[32];
    for (int i = 0; i < 32; i++) ids[i] = (i * 7 + 3) % V;
    for (int d = 0; d < 2; d++) {
        tmodel m;
        tm_init(&m, 64, 4, 2, 96, 2, V, 32, 11 + d);
        /* large activations in a few channels (as real models have) make q8's error visible */
        for (int64_t i = 0; i < m.w.tok_embd.shape[0]; i++) ((float *)m.w.tok_embd.data)[i * 64 + 5] = 40.0f;
        void *store = tm_quantize(&m, wts[d]);
        float *lg[5];
        for (int k = 0; k < 5; k++) lg[k] = calloc((size_t)N, sizeof(float));
        loom_isa best = loom_cpu_best_isa();
        CHECK(loom_cpu_set_isa(LOOM_ISA_REF) == LOOM_OK); /* f64 sums, x exact: the oracle */
        CHECK(run_act(&m, LOOM_MODE_STEP_BY_STEP, 1, LOOM_ACT_PREC_FULL, ids, n_prompt, steps, lg[0]));
        CHECK(loom_cpu_set_isa(best) == LOOM_OK);
        CHECK(run_act(&m, LOOM_MODE_STEP_BY_STEP, 1, LOOM_ACT_PREC_FULL, ids, n_prompt, steps, lg[1]));
        CHECK(run_act(&m, LOOM_MODE_FUSED, 1, LOOM_ACT_PREC_FULL, ids, n_prompt, steps, lg[2]));
        CHECK(run_act(&m, LOOM_MODE_FUSED, 3, LOOM_ACT_PREC_FULL, ids, n_prompt, steps, lg[3]));
        CHECK(run_act(&m, LOOM_MODE_FUSED, 1, LOOM_ACT_PREC_Q8, ids, n_prompt, steps, lg[4]));
        const char *wn = loom_dtype_name(wts[d]);
        int far1 = count_far(lg[1], lg[0], N, 1.0 / 2048), far2 = count_far(lg[2], lg[1], N, 1.0 / 2048);
        CHECK_MSG(far1 == 0, "%s: full step_by_step: %d logits off the reference", wn, far1);
        CHECK_MSG(far2 == 0, "%s: full fused: %d logits off step_by_step", wn, far2);
        CHECK_MSG(memcmp(lg[2], lg[3], (size_t)N * sizeof(float)) == 0, "%s: full fused, 3 threads differ", wn);
        double worst_q8 = 0.0;
        for (int i = 0; i < N; i++) {
            double e = fabs(lg[4][i] - lg[0][i]);
            worst_q8 = e > worst_q8 ? e : worst_q8;
        }
        CHECK_MSG(worst_q8 > 1e-3, "%s: q8 logits within %g of the reference: the setting did nothing?", wn,
                  worst_q8);
        for (int k = 0; k < 5; k++) free(lg[k]);
        free(store);
        tm_free(&m);
    }
}

int main(void) {
    RUN_TEST(test_names_and_rules_key);
    RUN_TEST(test_resolve);
    RUN_TEST(test_graph_attributes);
    RUN_TEST(test_model_runs);
    return TEST_SUMMARY();
}
