/* libFuzzer target: the fusion rules parser (YAML) on arbitrary bytes; rules
 * that parse are applied, with each preset, to a small data-less Llama graph
 * so the matcher and builders see arbitrary patterns too. A pass that
 * succeeds must leave a valid graph and a consistent report (a disabled rule
 * never fires), and fusing the same graph again must give the same node list
 * (the pass is deterministic: a forward program fuses each of its traces so). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph/fusion.h"
#include "model/llama.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static loom_graph *base_graph(void) {
    static loom_graph *g;
    static loom_llama_layer layers[2];
    static loom_llama_weights w;
    if (g) return g;
    loom_llama_config c = {.dim = 16, .hidden_dim = 24, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                           .vocab_size = 11, .seq_len = 8, .head_dim = 4, .rope_theta = 10000.0f,
                           .rms_eps = 1e-5f, .rope_mode = LOOM_ROPE_INTERLEAVED};
    const int64_t d1[1] = {16}, vd[2] = {11, 16};
    loom_tensor_init(&w.tok_embd, LOOM_F32, 2, vd, NULL);
    loom_tensor_init(&w.out_norm, LOOM_F32, 1, d1, NULL);
    loom_tensor_init(&w.output, LOOM_F32, 2, vd, NULL);
    for (int l = 0; l < 2; l++) /* the shapes of every layer tensor from the loaders' table */
        for (int i = 0; i < LOOM_LLAMA_LAYER_TENSORS; i++) {
            const loom_llama_layer_tensor *lt = &loom_llama_layer_tensors[i];
            int64_t sh[2] = {loom_llama_dim_size(&c, lt->rows), loom_llama_dim_size(&c, lt->cols)};
            loom_tensor_init(loom_llama_layer_field(&layers[l], lt), LOOM_F32, lt->norm ? 1 : 2, sh, NULL);
        }
    w.layers = layers;
    if (loom_graph_init(&g) != LOOM_OK) abort();
    loom_tensor t;
    const int64_t n[1] = {3}, cs[3] = {8, 2, 4};
    loom_tensor_init(&t, LOOM_I32, 1, n, NULL);
    int ids = loom_graph_external(g, &t), kc[2], vc[2];
    for (int l = 0; l < 2; l++) {
        loom_tensor_init(&t, LOOM_F32, 3, cs, NULL);
        kc[l] = loom_graph_external(g, &t);
        vc[l] = loom_graph_external(g, &t);
    }
    loom_llama_build(g, &c, &w, ids, kc, vc, NULL, NULL, 3, 2, 0);
    if (loom_graph_status(g) != LOOM_OK) abort();
    return g;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *copy = malloc(size ? size : 1);  /* exact size: ASan flags reads past the end */
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    loom_fusion_rules *r = NULL;
    if (loom_fusion_rules_parse(copy, size, "fuzz.yaml", &r) == LOOM_OK) {
        static const char *presets[] = {NULL, "small", "7b", "13b", "70b"};
        loom_graph *g = NULL, *g2 = NULL;
        if (loom_graph_init(&g) == LOOM_OK && loom_graph_init(&g2) == LOOM_OK) {
            for (int p = 0; p < 5; p++) {
                if (presets[p] && loom_fusion_rules_preset(r, presets[p]) != LOOM_OK) continue;
                loom_fusion_report rep;
                if (loom_graph_copy(g, base_graph()) != LOOM_OK || loom_fusion_apply(g, r, &rep) != LOOM_OK) continue;
                if (loom_graph_status(g) != LOOM_OK || rep.n_rules != loom_fusion_rules_count(r)) abort();
                for (int i = 0; i < rep.n_rules; i++)
                    if (rep.rules[i].fired < 0 || (rep.rules[i].fired > 0 && !rep.rules[i].enabled)) abort();
                if (loom_graph_copy(g2, base_graph()) != LOOM_OK || loom_fusion_apply(g2, r, &rep) != LOOM_OK) abort();
                if (g2->n_nodes != g->n_nodes || g2->n_tensors != g->n_tensors) abort();
                for (int n = 0; n < g->n_nodes; n++)
                    if (g2->nodes[n].op != g->nodes[n].op || g2->nodes[n].dst != g->nodes[n].dst ||
                        memcmp(g2->nodes[n].attrs, g->nodes[n].attrs, sizeof g->nodes[n].attrs))
                        abort();
            }
        }
        loom_graph_free(g);
        loom_graph_free(g2);
        (void)loom_fusion_rules_hw(r);
        (void)loom_fusion_rules_mode(r);
        loom_fusion_rules_free(r);
    }
    free(copy);
    return 0;
}
