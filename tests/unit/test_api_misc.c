/* The public API that needs no model file (loom.h): plan reports, graphs
 * with ops by name, chat templates by name, defaults and names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loom.h"

/* What printer f wrote for r, malloc'd. */
static char *printed(loom_status (*printer)(const loom_plan_report *, FILE *), const loom_plan_report *r,
                     loom_status *st) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    *st = printer(r, f);
    fclose(f);
    return buf;
}

static void test_plan(void) {
    loom_plan_report *r = (loom_plan_report *)1;
    CHECK(loom_plan_report_init("llama9", &r) == LOOM_ERR_INVALID_ARG && r == NULL);
    CHECK(strstr(loom_last_error(), "llama9") && strstr(loom_last_error(), "llama2-7b"));
    CHECK(loom_plan_report_init("tinyllama", &r) == LOOM_OK && r);
    if (!r) return;
    CHECK(strcmp(loom_plan_report_config_name(r), "tinyllama") == 0 && strcmp(loom_plan_report_arch(r), "llama") == 0);
    loom_status st;
    char *text = printed(loom_plan_report_print, r, &st);
    CHECK(st == LOOM_ERR_INVALID_ARG);  /* nothing planned yet */
    free(text);
    CHECK(loom_plan_report_set_hw(r, "nope") != LOOM_OK && strstr(loom_last_error(), "h200"));
    CHECK(loom_plan_report_set_hw(r, "h200") == LOOM_OK);
    loom_plan_report_params p = loom_plan_report_default_params();
    CHECK(p.batch == 1 && p.kv_dtype == LOOM_F16 && p.wtype == LOOM_F16 && p.step_by_step == 1);
    CHECK(loom_plan_report_run(r, &p) == LOOM_ERR_INVALID_ARG);  /* seq not set */
    p.seq = 16;
    CHECK(loom_plan_report_run(r, &p) == LOOM_OK);
    int fused = loom_plan_have_fusion();
    CHECK(loom_plan_report_n_modes(r) == 1 + fused);
    const loom_profile *step = loom_plan_report_profile(r, 0);
    CHECK(step && step->n_sections == 22 + 2 && strcmp(step->mode, "step_by_step") == 0);
    CHECK(step && step->n_tokens == 16 && strcmp(step->phase, "prefill") == 0 && step->total.time_ns > 0);
    CHECK(loom_plan_report_uncosted(r, 0) == 0 && loom_plan_report_profile(r, 2) == NULL);
    if (fused) {
        const loom_profile *fu = loom_plan_report_profile(r, 1);
        CHECK(fu && strcmp(fu->mode, "fused") == 0 && fu->total.kernels < step->total.kernels);
        CHECK(fu && fu->total.bytes_read + fu->total.bytes_written <
                        step->total.bytes_read + step->total.bytes_written);
    }
    text = printed(loom_plan_report_print, r, &st);
    CHECK(st == LOOM_OK && text && strncmp(text, "tinyllama: 22 layers", 20) == 0);
    CHECK(text && strstr(text, "\nper layer") && strstr(text, "kernels of layer 1, step_by_step:") &&
          strstr(text, "hardware h200"));
    free(text);
    text = printed(loom_plan_report_print_json, r, &st);
    CHECK(st == LOOM_OK && text && strncmp(text, "{\"config\":\"tinyllama\",\"phase\":\"prefill\"", 39) == 0);
    free(text);
    text = printed(loom_plan_report_write_svg, r, &st);
    CHECK(st == LOOM_OK && text && strstr(text, "<svg"));
    free(text);
    /* a failed run leaves nothing planned */
    p.decode = 1;
    p.batch = 0;
    CHECK(loom_plan_report_run(r, &p) == LOOM_ERR_INVALID_ARG && loom_plan_report_n_modes(r) == 0);
    loom_plan_report_free(r);

    CHECK(loom_plan_report_init("bert-base", &r) == LOOM_OK && strcmp(loom_plan_report_arch(r), "bert") == 0);
    p = loom_plan_report_default_params();
    p.seq = 8;
    p.decode = 1;
    CHECK(loom_plan_report_run(r, &p) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "no decode phase"));
    p.decode = 0;
    CHECK(loom_plan_report_run(r, &p) == LOOM_OK);
    loom_plan_report_free(r);
    loom_plan_report_free(NULL);
}

static int ext(loom_graph *g, float *data, int64_t d0, int64_t d1) {
    loom_tensor t;
    int64_t shape[2] = {d0, d1};
    loom_tensor_init(&t, LOOM_F32, 2, shape, data);
    return loom_graph_external(g, &t);
}

static void test_graph(void) {
    enum { M = 3, K = 8, N = 5 };
    float x[M * K], w[N * K];
    for (int i = 0; i < M * K; i++) x[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < N * K; i++) w[i] = (float)(i % 5) * 0.25f;
    loom_graph *g = NULL;
    CHECK(loom_graph_init(&g) == LOOM_OK && g);
    if (!g) return;
    int src[2] = {ext(g, x, M, K), ext(g, w, N, K)};
    int y = loom_graph_add_op(g, "matmul", src, 2, "y");
    int z = loom_graph_add_op(g, "silu", &y, 1, NULL);
    loom_graph_mark_output(g, z);
    CHECK(y >= 0 && z >= 0 && loom_graph_status(g) == LOOM_OK);
    const loom_tensor *ty = loom_graph_tensor(g, y);
    CHECK(ty && ty->shape[0] == M && ty->shape[1] == N && strcmp(ty->name, "y") == 0);
    CHECK(loom_graph_tensor(g, 99) == NULL && loom_graph_node_kernel(g, 0) == NULL);
    loom_executor *e = NULL;
    CHECK(loom_executor_init(&e, 2, LOOM_MODE_STEP_BY_STEP) == LOOM_OK && e);
    CHECK(loom_executor_run(e, g) == LOOM_OK);
    const loom_graph *ran = loom_executor_last_graph(e);
    CHECK(loom_graph_n_nodes(ran) == 2 && strncmp(loom_graph_node_kernel(ran, 0), "matmul", 6) == 0);
    CHECK(strncmp(loom_graph_node_kernel(ran, 1), "silu", 4) == 0);
    CHECK(loom_executor_rule_fired(e, "ffn") == -1);  /* no fusion pass in step_by_step */
    const float *out = loom_graph_tensor(g, z)->data;
    int close = 1;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)x[i * K + k] * w[j * K + k];
            close &= check_close(out[i * N + j], s / (1.0 + exp(-s)), 1e-5);
        }
    CHECK(close);
    /* errors are sticky: an unknown op, then any call, returns -1 */
    CHECK(loom_graph_add_op(g, "nope", &y, 1, "bad") == -1 && loom_graph_status(g) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "unknown op 'nope'"));
    CHECK(loom_graph_add_op(g, "silu", &y, 1, NULL) == -1);
    loom_graph_free(g);
    CHECK(loom_graph_init(&g) == LOOM_OK);
    int a = ext(g, x, M, K);
    CHECK(loom_graph_add_op(g, "rms_norm", &a, 1, NULL) == -1 && strstr(loom_last_error(), "takes attributes"));
    loom_graph_free(g);
    loom_executor_free(e);
    loom_graph_free(NULL);
    loom_executor_free(NULL);
}

static void test_chat(void) {
    loom_chat_template *t = (loom_chat_template *)1;
    CHECK(loom_chat_template_init("vicuna", &t) == LOOM_ERR_INVALID_ARG && t == NULL);
    CHECK(strstr(loom_last_error(), "chatml"));
    CHECK(loom_chat_template_init("llama2", &t) == LOOM_OK && strcmp(loom_chat_template_name(t), "llama2") == 0);
    loom_chat_msg msgs[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
    char *text = NULL;
    CHECK(loom_chat_render(t, msgs, 4, 1, &text) == LOOM_OK);
    CHECK_MSG(text && strcmp(text, "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello </s>"
                                   "<s>[INST] Bye [/INST]") == 0, "'%s'", text ? text : "");
    free(text);
    /* the turns of a conversation, each after the reply before it, make the same text */
    char *t1 = NULL, *t2 = NULL;
    CHECK(loom_chat_render_turn(t, 1, "Be brief.", "Hi", &t1) == LOOM_OK);
    CHECK(loom_chat_render_turn(t, 0, NULL, "Bye", &t2) == LOOM_OK);
    char joined[256];
    snprintf(joined, sizeof joined, "%s Hello%s", t1 ? t1 : "", t2 ? t2 : "");
    CHECK_MSG(strcmp(joined, "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Bye [/INST]") == 0,
              "'%s'", joined);
    free(t1), free(t2);
    loom_chat_msg bad[] = {{"user", "Hi"}, {"system", "late"}};
    CHECK(loom_chat_render(t, bad, 2, 1, &text) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "message 1"));
    loom_chat_template_free(t);
    loom_chat_template_free(NULL);
}

static void test_names_and_defaults(void) {
    const char *isa = loom_cpu_isa_name();
    CHECK(!strcmp(isa, "ref") || !strcmp(isa, "generic") || !strcmp(isa, "avx2") || !strcmp(isa, "avx512"));
    loom_convert_params cp = loom_convert_default_params();
    CHECK(cp.type_set == 0 && cp.tokenizer == NULL);
    loom_dtype dt;
    CHECK(loom_convert_parse_type("q4_1", &dt) == LOOM_OK && dt == LOOM_Q4_1);
    CHECK(loom_convert_parse_type("q4_K", &dt) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "q4_K"));
    CHECK(strcmp(loom_model_format_name(LOOM_MODEL_GGUF), "gguf") == 0);
    CHECK(strcmp(loom_model_format_name((loom_model_format)7), "unknown") == 0);
    loom_fusion_rules *r = NULL;
    CHECK(loom_fusion_rules_load(NULL, &r) == LOOM_OK && r);
    CHECK(loom_fusion_rules_preset(r, "no-such-preset") != LOOM_OK && strstr(loom_last_error(), "no-such-preset"));
    loom_fusion_rules_free(r);
    CHECK(loom_fusion_rules_parse("rules: 3\n", 9, "x.yaml", &r) != LOOM_OK && r == NULL);
    CHECK(strstr(loom_last_error(), "x.yaml:1:"));
}

int main(void) {
    RUN_TEST(test_plan);
    RUN_TEST(test_graph);
    RUN_TEST(test_chat);
    RUN_TEST(test_names_and_defaults);
    return TEST_SUMMARY();
}
