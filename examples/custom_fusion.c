/*
 * Extending the fusion engine from user code, without changing loom:
 *   1. a custom activation (squared ReLU) that the built-in FFN fusion takes
 *      into its GEMM epilogue, and
 *   2. a new fused op, scale_shift: y = a * s + b (mul -> add in one pass),
 *      with its kernel, cost and decomposition, and a rule (YAML) for it.
 * The program builds a small graph of primitive ops that uses both, runs it
 * step_by_step and fused, checks that the results agree and that both rules
 * fired, and prints the fusion report. Exit status 0 on success.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom.h>

static float sq_relu(float x, void *user) {
    (void)user;
    return x > 0.0f ? x * x : 0.0f;
}

/* scale_shift kernel: rows split over threads; inputs a, s, b of one shape. */
static loom_status scale_shift(const loom_tensor *const *in, int n_in, loom_tensor *out, int ith, int nth,
                               void *user) {
    (void)n_in, (void)user;
    int64_t n = loom_tensor_nelem(out), lo = n * ith / nth, hi = n * (ith + 1) / nth;
    const float *a = in[0]->data, *s = in[1]->data, *b = in[2]->data;
    float *y = out->data;
    for (int64_t i = lo; i < hi; i++) y[i] = a[i] * s[i] + b[i];
    return LOOM_OK;
}

static void scale_shift_cost(const loom_tensor *const *in, int n_in, const loom_tensor *out, double *flops,
                             double *bytes_read, double *bytes_written, void *user) {
    (void)in, (void)n_in, (void)user;
    double n = (double)loom_tensor_nelem(out);
    *flops = 2 * n, *bytes_read = 3 * 4 * n, *bytes_written = 4 * n;  /* a*s never reaches memory */
}

static const char *rules_yaml =
    "rules:\n"
    "  - name: ffn_sq_relu\n"
    "    fused_op: ffn\n"
    "    pattern:\n"
    "      - {name: gate, op: matmul, inputs: [$x, $w_gate]}\n"
    "      - {name: up, op: matmul, inputs: [$x, $w_up]}\n"
    "      - {name: act, op: sq_relu, inputs: [gate]}\n"
    "      - {name: mul, op: mul, inputs: [act, up]}\n"
    "      - {name: down, op: matmul, inputs: [mul, $w_down]}\n"
    "    conditions: {single_use: true}\n"
    "  - name: scale_shift\n"
    "    fused_op: scale_shift\n"
    "    pattern:\n"
    "      - {name: m, op: mul, inputs: [$a, $s]}\n"
    "      - {name: y, op: add, inputs: [m, $b]}\n"
    "    conditions: {single_use: true, same_dtype: [$a, $s, $b]}\n";

static float *randn(int64_t n, unsigned seed, float scale) {
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = scale * ((float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f);
    }
    return p;
}

static int ext(loom_graph *g, float *data, int64_t d0, int64_t d1) {
    loom_tensor t;
    int64_t shape[2] = {d0, d1};
    loom_tensor_init(&t, LOOM_F32, 2, shape, data);
    return loom_graph_external(g, &t);
}

/* A node of a two-input op; -1 once the graph has an error. */
static int op2(loom_graph *g, const char *op, int a, int b, const char *name) {
    int src[2] = {a, b};
    return loom_graph_add_op(g, op, src, 2, name);
}

int main(void) {
    enum { T = 7, D = 24, H = 40 };
    if (loom_register_activation("sq_relu", sq_relu, NULL) != LOOM_OK ||
        loom_register_fused_op(&(loom_fused_op_desc){.name = "scale_shift", .n_inputs = 3,
                                                     .kernel = scale_shift, .cost = scale_shift_cost,
                                                     .decomposition = "mul add"}) != LOOM_OK) {
        fprintf(stderr, "custom_fusion: %s\n", loom_last_error());
        return 1;
    }
    loom_fusion_rules *rules;
    if (loom_fusion_rules_parse(rules_yaml, strlen(rules_yaml), "custom.yaml", &rules) != LOOM_OK) {
        fprintf(stderr, "custom_fusion: %s\n", loom_last_error());
        return 1;
    }
    float *x = randn(T * D, 1, 1.0f), *wg = randn(H * D, 2, 0.2f), *wu = randn(H * D, 3, 0.2f);
    float *wd = randn(D * H, 4, 0.15f), *s = randn(T * D, 5, 1.0f), *b = randn(T * D, 6, 1.0f);
    float *out[2] = {malloc(T * D * sizeof(float)), malloc(T * D * sizeof(float))};
    int rc = 0;
    for (int mode = 0; mode < 2; mode++) {
        loom_graph *g;
        if (loom_graph_init(&g) != LOOM_OK) {
            fprintf(stderr, "custom_fusion: %s\n", loom_last_error());
            return 1;
        }
        /* the FFN with the activation (an op of the registry now, by name) */
        int ix = ext(g, x, T, D);  /* one tensor: the rule's $x feeds both matmuls */
        int gate = op2(g, "matmul", ix, ext(g, wg, H, D), "gate");
        int up = op2(g, "matmul", ix, ext(g, wu, H, D), "up");
        int act = loom_graph_add_op(g, "sq_relu", &gate, 1, "act");
        int h = op2(g, "mul", act, up, "h");
        int down = op2(g, "matmul", h, ext(g, wd, D, H), "down");
        /* then y = down * s + b: the scale_shift pattern */
        int y = op2(g, "add", op2(g, "mul", down, ext(g, s, T, D), "scaled"), ext(g, b, T, D), "y");
        loom_graph_mark_output(g, y);
        loom_exec_mode m = mode ? LOOM_MODE_FUSED : LOOM_MODE_STEP_BY_STEP;
        loom_executor *e;
        if (loom_graph_status(g) != LOOM_OK || loom_executor_init(&e, 2, m) != LOOM_OK) {
            fprintf(stderr, "custom_fusion: %s\n", loom_last_error());
            return 1;
        }
        if (mode) loom_executor_set_rules(e, rules);  /* e owns them now */
        if (loom_executor_run(e, g) != LOOM_OK) {
            fprintf(stderr, "custom_fusion: %s\n", loom_last_error());
            return 1;
        }
        memcpy(out[mode], loom_graph_tensor(g, y)->data, T * D * sizeof(float));
        const loom_graph *ran = loom_executor_last_graph(e);
        printf("%s: %d nodes:", loom_mode_name(m), loom_graph_n_nodes(ran));
        for (int n = 0; n < loom_graph_n_nodes(ran); n++) printf(" %s", loom_graph_node_kernel(ran, n));
        printf("\n");
        if (mode) {
            loom_executor_print_report(e, stdout);
            if (loom_executor_rule_fired(e, "ffn_sq_relu") != 1 || loom_executor_rule_fired(e, "scale_shift") != 1)
                rc = 1;
        }
        loom_executor_free(e);  /* frees the rules it was given */
        loom_graph_free(g);
    }
    double worst = 0;
    for (int i = 0; i < T * D; i++) {
        double d = fabs(out[0][i] - out[1][i]) / fmax(1.0, fabs(out[0][i]));
        if (d > worst) worst = d;
    }
    printf("max relative difference fused vs step_by_step: %.3g\n", worst);
    if (worst > 1.0 / 2048) rc = 1;
    free(x), free(wg), free(wu), free(wd), free(s), free(b), free(out[0]), free(out[1]);
    printf("%s\n", rc ? "FAILED" : "ok");
    return rc;
}
