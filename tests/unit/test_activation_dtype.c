/* The rules' activation_dtype (docs/fusion.md, "Activation dtype"): which
 * activations the fusion pass narrows to 16 bits, and the numbers of a small
 * random Llama run with it against step_by_step's f32. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "fused/fused_internal.h"
#include "test_fusion_common.h"

extern const char loom_fusion_default_yaml[];

/* Nodes of attention op `op` (flash_attention_score or incre_flash_attention)
 * whose output is f32 and stated so (out_f32), whatever their q. */
static int outputs_f32(const loom_graph *g, loom_op op) {
    int k = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        const loom_node *nd = &g->nodes[n];
        if (nd->op != op) continue;
        int32_t f = op == LOOM_OP_FLASH_ATTENTION ? ((const loom_flash_attention_attrs *)(const void *)nd->attrs)->out_f32
                                                  : ((const loom_incre_flash_attention_attrs *)(const void *)nd->attrs)->out_f32;
        k += f == 1 && g->tensors[nd->dst].t.dtype == LOOM_F32;
    }
    return k;
}

/* The default rules with `activation_dtype: dt` (NULL: the parse error test). */
static loom_fusion_rules *rules_with_act(const char *dt) {
    char line[64];
    snprintf(line, sizeof line, "version: 1\nactivation_dtype: %s\n", dt);
    loom_fusion_rules *r;
    CHECK(rules_patched(loom_fusion_default_yaml, "version: 1\n", line, NULL, NULL, &r) != LOOM_ERR_INVALID_ARG);
    return r;
}

/* The q of qkv_rope in graph g: its dtype, and the node's q_dtype (must agree). */
static loom_dtype q_dtype_of(const loom_graph *g) {
    loom_dtype d = LOOM_DTYPE_COUNT;
    for (int n = 0; n < g->n_nodes; n++) {
        if (g->nodes[n].op != LOOM_OP_QKV_ROPE) continue;
        const loom_qkv_rope_attrs *a = (const void *)g->nodes[n].attrs;
        loom_dtype t = g->tensors[g->nodes[n].dst].t.dtype;
        CHECK((loom_dtype)a->q_dtype == t);
        CHECK(d == LOOM_DTYPE_COUNT || d == t); /* every layer alike */
        d = t;
    }
    return d;
}

/* activation_dtype f16 / bf16: q (qkv_rope -> attention_linear in prefill,
 * -> incre_flash_attention in decode, -> flash_attention_score with
 * attention_linear off) is stored at 16 bits and its views with it, the
 * attention kernels' outputs staying f32 (out_f32); a reader that takes f32
 * only (the primitive attention) keeps it f32. The logits of
 * a prefill and decode steps stay within the 16-bit tolerance of
 * step_by_step's f32 ones, and fused_with_checkpoints (action fail) passes at
 * that tolerance. Unknown dtypes are refused when the rules are read. */
static void test_activation_dtype(void) {
    CHECK(rules_with_act("f8") == NULL && strstr(loom_last_error(), "activation_dtype: expected f32, f16 or bf16"));
    CHECK(rules_with_act("[f16]") == NULL);
    loom_fusion_rules *r32 = rules_with_act("f32");
    CHECK(r32 && loom_fusion_rules_activation_dtype(r32) == LOOM_F32);
    loom_fusion_rules_free(r32);
    tmodel m;
    tm_init(&m, 32, 4, 2, 40, 2, 19, 32, 2);
    int32_t ids[24];
    for (int i = 0; i < 24; i++) ids[i] = (i * 3 + 1) % 19;
    for (int d = 0; d < 2; d++) {
        loom_dtype dt = d ? LOOM_BF16 : LOOM_F16;
        loom_fusion_rules *r = rules_with_act(d ? "bf16" : "f16");
        CHECK(r && loom_fusion_rules_activation_dtype(r) == dt);
        if (!r) continue;
        loom_graph *g;
        loom_graph_init(&g);
        tm_build(&m, g, ids, 20, 0, 0);
        CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
        CHECK(tm_ops(g, LOOM_OP_ATTENTION_LINEAR) == 2 && q_dtype_of(g) == dt);
        for (int n = 0; n < g->n_nodes; n++) /* attention_linear reads q's view, retyped with it */
            if (g->nodes[n].op == LOOM_OP_ATTENTION_LINEAR) CHECK(g->tensors[g->nodes[n].src[0]].t.dtype == dt);
        CHECK(loom_graph_plan(g) == LOOM_OK);
        tm_build(&m, g, ids, 1, 20, 0); /* decode */
        CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
        CHECK(tm_ops(g, LOOM_OP_INCRE_FLASH_ATTENTION) == 2 && q_dtype_of(g) == dt);
        CHECK(outputs_f32(g, LOOM_OP_INCRE_FLASH_ATTENTION) == 2);
        /* and incre_attention_linear (preset one_kernel_attention, where the two kv heads share
         * out on the rules' threads) reads q at 16 bits too */
        if (loom_incre_attention_linear_groups(2, loom_fusion_rules_hw(r).threads) > 0) {
            loom_fusion_rules *ra = rules_with_act(d ? "bf16" : "f16");
            CHECK(ra && loom_fusion_rules_preset(ra, "one_kernel_attention") == LOOM_OK);
            tm_build(&m, g, ids, 1, 20, 0);
            CHECK(ra && loom_fusion_apply(g, ra, NULL) == LOOM_OK);
            CHECK(tm_ops(g, LOOM_OP_INCRE_ATTENTION_LINEAR) == 2 && q_dtype_of(g) == dt);
            loom_fusion_rules_free(ra);
        }
        CHECK(loom_fusion_rules_enable(r, "attention_linear_residual", 0) == LOOM_OK);
        tm_build(&m, g, ids, 20, 0, 0);
        CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
        CHECK(tm_ops(g, LOOM_OP_FLASH_ATTENTION) == 2 && q_dtype_of(g) == dt);
        CHECK(outputs_f32(g, LOOM_OP_FLASH_ATTENTION) == 2);
        /* a reader that takes f32 only keeps q at f32: the primitive attention (its rule off) */
        CHECK(loom_fusion_rules_enable(r, "attention", 0) == LOOM_OK);
        tm_build(&m, g, ids, 20, 0, 0);
        CHECK(loom_fusion_apply(g, r, NULL) == LOOM_OK);
        CHECK(tm_ops(g, LOOM_OP_ATTENTION) == 2 && q_dtype_of(g) == LOOM_F32);
        CHECK(loom_fusion_rules_enable(r, "attention", 1) == LOOM_OK);
        CHECK(loom_fusion_rules_enable(r, "attention_linear_residual", 1) == LOOM_OK);
        loom_graph_free(g);
        /* numbers: prefill of 20 and 3 decode steps against step_by_step (f32) */
        const int steps = 3, V = m.c.vocab_size;
        float *lo[4]; /* step_by_step, fused, fused_with_checkpoints, fused without attention_linear */
        for (int md = 0; md < 4; md++) {
            lo[md] = calloc((size_t)(steps + 1) * V, sizeof(float));
            tm_clear_kv(&m);
            loom_executor *e;
            CHECK(loom_executor_init(&e, 2, md == 3 ? LOOM_MODE_FUSED : (loom_exec_mode)md) == LOOM_OK);
            if (md) {
                loom_fusion_rules *rm = rules_with_act(d ? "bf16" : "f16");
                if (md == 3 && rm) CHECK(loom_fusion_rules_enable(rm, "attention_linear_residual", 0) == LOOM_OK);
                loom_executor_set_rules(e, rm);
                e->ckpt_action = LOOM_CHECKPOINT_FAIL;
            }
            loom_graph_init(&g);
            for (int st = 0; st <= steps; st++) {
                int n = st == 0 ? 20 : 1, pos = st == 0 ? 0 : 20 + st - 1;
                int lg = tm_build(&m, g, ids + pos, n, pos, 0);
                CHECK_MSG(loom_executor_run(e, g) == LOOM_OK, "%s: %s", loom_mode_name((loom_exec_mode)md),
                          loom_last_error());
                if (st == 0 && md) CHECK(q_dtype_of(g) == dt);
                memcpy(lo[md] + (size_t)st * V, loom_graph_tensor(g, lg)->data, (size_t)V * sizeof(float));
            }
            if (md == 2) { /* the layers' checks read or write q at 16 bits: that dtype's tolerance; the head's
                            * do not: the rules' */
                CHECK(e->n_ckpt == m.c.n_layers + 1);
                for (int c = 0; c < e->n_ckpt; c++)
                    CHECK_MSG(e->ckpt[c].tol == (e->ckpt[c].layer >= 0 ? (d ? 1.0 / 128 : 1.0 / 256) : 1.0 / 2048),
                              "%s: tolerance %g", e->ckpt[c].name, e->ckpt[c].tol);
            }
            loom_graph_free(g);
            loom_executor_free(e);
        }
        double tol = d ? 1.0 / 128 : 1.0 / 256;
        for (int md = 1; md < 4; md++) {
            int bad = 0, moved = 0;
            for (int i = 0; i < (steps + 1) * V; i++) {
                bad += !check_close(lo[md][i], lo[0][i], tol);
                moved += lo[md][i] != lo[0][i];
            }
            CHECK_MSG(bad == 0, "%s: mode %d: %d logits beyond %g of step_by_step", loom_dtype_name(dt), md, bad, tol);
            CHECK(moved > 0); /* q was rounded: the prefill's logits moved */
        }
        for (int md = 0; md < 4; md++) free(lo[md]);
        loom_fusion_rules_free(r);
    }
    tm_free(&m);
}

int main(void) {
    RUN_TEST(test_activation_dtype);
    return TEST_SUMMARY();
}
