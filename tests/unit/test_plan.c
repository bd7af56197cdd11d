/* loom plan: per-layer bytes and flops of data-less graphs against hand
 * calculations, batch handling, hardware profiles (parsing, errors, roofline)
 * and the SVG chart. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "check.h"
#include "graph/fusion.h"
#include "graph/hw.h"
#include "graph/profile.h"
#include "model/planner.h"

static loom_hw_profile test_hw(void) {
    loom_hw_profile hw;
    memset(&hw, 0, sizeof hw);
    snprintf(hw.name, sizeof hw.name, "test");
    hw.peak_flops[LOOM_HW_F32] = 1e12;
    hw.peak_flops[LOOM_HW_F16] = 4e12;
    hw.vector_flops = 1e11;
    hw.bandwidth = 1e11;
    return hw;
}

/* The tiny model: dim 64, ffn 96, 4 heads of 16 (2 kv heads), 3 layers. */
static loom_llama_config tiny(void) {
    loom_llama_config c = {.dim = 64, .hidden_dim = 96, .n_layers = 3, .n_heads = 4,
                           .n_kv_heads = 2, .vocab_size = 100, .seq_len = 256, .head_dim = 16,
                           .rope_theta = 10000.0f, .rms_eps = 1e-5f};
    return c;
}

typedef struct { double rd, wr, fl; int kernels; } hand;

/* One layer, step_by_step, by hand: activations f32 (4 bytes), weights e
 * bytes, cache c bytes per element (c = 1: int8, which also reads and writes
 * one f32 scale per row of HD); T tokens in B sequences of s new tokens after
 * pos cached ones. */
static hand hand_layer(const loom_llama_config *m, int B, int s, int pos, double e, double c) {
    const double D = m->dim, F = m->hidden_dim, HD = m->head_dim, Q = m->n_heads * HD,
                 KV = m->n_kv_heads * HD, T = (double)B * s;
    hand h = {0, 0, 0, 18};
    /* two rms_norms */
    h.rd += 2 * (T * D * 4 + D * 4);
    h.wr += 2 * T * D * 4;
    h.fl += 2 * 4 * T * D;
    /* matmuls: q, k, v, o, gate, up, down: x read, W read once, y written */
    const double mm[7][2] = {{Q, D}, {KV, D}, {KV, D}, {D, Q}, {F, D}, {F, D}, {D, F}};
    for (int i = 0; i < 7; i++) {
        double N = mm[i][0], K = mm[i][1];
        h.rd += T * K * 4 + N * K * e;
        h.wr += T * N * 4;
        h.fl += 2 * T * N * K;
    }
    /* rope on q and k */
    h.rd += T * (Q + KV) * 4;
    h.wr += T * (Q + KV) * 4;
    h.fl += 3 * T * (Q + KV);
    const double sc = c == 1 ? 4 / HD : 0; /* int8: a scale's bytes per cache element */
    /* kv_append of k and v: f32 rows in, cache rows out */
    h.rd += 2 * T * KV * 4;
    h.wr += 2 * T * KV * (c + sc);
    /* attention: q in, out written, each sequence's visible cache rows read once */
    double pairs = 0;
    for (int i = 0; i < s; i++) pairs += pos + i + 1;
    h.rd += T * Q * 4 + B * (pos + s) * KV * 2 * (c + sc);
    h.wr += T * Q * 4;
    h.fl += B * m->n_heads * pairs * (4 * HD + 5);
    /* two residual adds, silu, mul */
    h.rd += 2 * (2 * T * D * 4) + T * F * 4 + 2 * T * F * 4;
    h.wr += 2 * T * D * 4 + T * F * 4 + T * F * 4;
    h.fl += 2 * T * D + 4 * T * F + T * F;
    return h;
}

static void check_layer(const char *what, const loom_llama_config *m, loom_plan_params p, hand h) {
    loom_hw_profile hw = test_hw();
    loom_graph *g;
    CHECK(loom_graph_init(&g) == LOOM_OK);
    loom_plan_info info;
    loom_status s = loom_plan_build(g, &p, &hw, &info);
    CHECK_MSG(s == LOOM_OK, "%s: %s", what, loom_last_error());
    CHECK(s != LOOM_OK || info.uncosted == 0);
    loom_profile prof;
    loom_status cs = s == LOOM_OK ? loom_profile_collect(g, info.n_layers, "x", "step_by_step", info.n_tokens, &prof)
                                  : s;
    CHECK_MSG(s != LOOM_OK || cs == LOOM_OK, "%s: profile: %s", what, loom_last_error());
    if (cs == LOOM_OK) {
        CHECK(prof.n_sections == m->n_layers + 2);
        for (int l = 1; l <= m->n_layers; l++) {
            const loom_profile_section *L = &prof.sections[l];
            CHECK_MSG(L->kernels == h.kernels, "%s: kernels %d", what, L->kernels);
            CHECK_MSG(L->bytes_read == h.rd, "%s: L%d read %.0f, hand %.0f", what, l - 1, L->bytes_read, h.rd);
            CHECK_MSG(L->bytes_written == h.wr, "%s: L%d written %.0f, hand %.0f", what, l - 1,
                      L->bytes_written, h.wr);
            CHECK_MSG(L->flops == h.fl, "%s: L%d flops %.0f, hand %.0f", what, l - 1, L->flops, h.fl);
        }
        /* the roofline time of every node is max(flops / peak, bytes / bandwidth) */
        double t = 0;
        for (int n = 0; n < g->n_nodes; n++) {
            const loom_node_stats *st = &g->nodes[n].stats;
            double bytes = st->bytes_read + st->bytes_written;
            CHECK(st->time_ns >= bytes / hw.bandwidth * 1e9 * (1 - 1e-12));
            t += st->time_ns;
        }
        CHECK_CLOSE(prof.total.time_ns, t, 1e-12);
        loom_profile_free(&prof);
    }
    loom_graph_free(g);
}

static void test_tiny_prefill_and_decode(void) {
    loom_llama_config m = tiny();
    loom_plan_params p = {.custom = &m, .batch = 1, .seq = 7, .kv_dtype = LOOM_F16, .wtype = LOOM_F32};
    check_layer("prefill b1", &m, p, hand_layer(&m, 1, 7, 0, 4, 2));
    p.batch = 3;
    check_layer("prefill b3", &m, p, hand_layer(&m, 3, 7, 0, 4, 2));
    p.decode = 1;
    p.seq = 11;
    check_layer("decode b3", &m, p, hand_layer(&m, 3, 1, 11, 4, 2));
    p.wtype = LOOM_F16;
    p.kv_dtype = LOOM_I8;
    check_layer("decode b3 f16 weights, int8 cache", &m, p, hand_layer(&m, 3, 1, 11, 2, 1));
    p.wtype = LOOM_Q8_0;  /* 34 bytes per 32 weights */
    p.kv_dtype = LOOM_F32;
    p.batch = 2;
    check_layer("decode b2 q8_0", &m, p, hand_layer(&m, 2, 1, 11, 34.0 / 32.0, 4));
}

/* Llama2-7B, f16: the weights a layer reads are 2 * (4 * 4096^2 + 3 * 4096 * 11008). */
static void test_7b_weight_bytes(void) {
    loom_hw_profile hw = test_hw();
    loom_plan_params p = {.config = "llama2-7b", .batch = 1, .seq = 1, .decode = 1,
                          .kv_dtype = LOOM_F16, .wtype = LOOM_F16};
    loom_graph *g;
    CHECK(loom_graph_init(&g) == LOOM_OK);
    loom_plan_info info;
    CHECK_MSG(loom_plan_build(g, &p, &hw, &info) == LOOM_OK, "%s", loom_last_error());
    CHECK(info.n_layers == 32 && info.n_tokens == 1 && info.pos == 1);
    double w = 0;
    int n_mm = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        if (g->nodes[n].layer != 5 || g->nodes[n].op != LOOM_OP_MATMUL) continue;
        const loom_tensor *x = &g->tensors[g->nodes[n].src[0]].t;
        w += g->nodes[n].stats.bytes_read - 4.0 * (double)loom_tensor_nelem(x);
        n_mm++;
    }
    CHECK(n_mm == 7);
    CHECK_MSG(w == 2.0 * (4.0 * 4096 * 4096 + 3.0 * 4096 * 11008), "weights %.0f", w);
    loom_graph_free(g);
}

static void test_errors(void) {
    loom_hw_profile hw = test_hw();
    loom_graph *g;
    CHECK(loom_graph_init(&g) == LOOM_OK);
    loom_plan_info info;
    loom_plan_params p = {.config = "bert-base", .batch = 1, .seq = 8, .kv_dtype = LOOM_F16,
                          .wtype = LOOM_F16, .decode = 1};
    CHECK(loom_plan_build(g, &p, &hw, &info) == LOOM_ERR_INVALID_ARG);
    CHECK_MSG(strstr(loom_last_error(), "no decode phase"), "%s", loom_last_error());
    p.decode = 0;
    p.seq = 513;
    CHECK(loom_plan_build(g, &p, &hw, &info) == LOOM_ERR_INVALID_ARG);
    CHECK_MSG(strstr(loom_last_error(), "512 positions"), "%s", loom_last_error());
    p.config = "llama9-1t";
    CHECK(loom_plan_build(g, &p, &hw, &info) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "llama2-7b") != NULL);
    p.config = "tinyllama";
    p.batch = 0;
    CHECK(loom_plan_build(g, &p, &hw, &info) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "--batch") != NULL);
    p.batch = 1;
    p.wtype = LOOM_I32;
    CHECK(loom_plan_build(g, &p, &hw, &info) == LOOM_ERR_INVALID_ARG);
    p.wtype = LOOM_F16;
    p.kv_dtype = LOOM_Q4_0;
    CHECK(loom_plan_build(g, &p, &hw, &info) == LOOM_ERR_INVALID_ARG);
    loom_graph_free(g);
}

static void expect_hw_error(const char *text, const char *want) {
    loom_hw_profile hw;
    loom_status s = loom_hw_parse(text, strlen(text), "t.yaml", 0, &hw);
    CHECK_MSG(s != LOOM_OK && strstr(loom_last_error(), want), "want '%s', got '%s'", want,
              s == LOOM_OK ? "OK" : loom_last_error());
}

static void test_hw_profiles(void) {
    loom_hw_profile hw;
    CHECK_MSG(loom_hw_load("h200", 0, &hw) == LOOM_OK, "%s", loom_last_error());
    CHECK(strcmp(hw.name, "h200") == 0);
    CHECK(hw.bandwidth == 4.8e12 && hw.peak_flops[LOOM_HW_F16] == 989.5e12);
    CHECK(hw.l1_bytes == 256 * 1024.0 && hw.l2_bytes == 50e6 && hw.cores == 132);
    CHECK_MSG(loom_hw_load("ascend-910b", 0, &hw) == LOOM_OK, "%s", loom_last_error());
    CHECK(hw.bandwidth > 0 && hw.peak_flops[LOOM_HW_F16] > 0 && hw.l2_bytes == 192.0 * 1048576);
    /* cpu without measuring: the auto values stay 0 */
    CHECK_MSG(loom_hw_load("cpu", 0, &hw) == LOOM_OK, "%s", loom_last_error());
    CHECK(hw.bandwidth == 0 && !hw.measured);
    CHECK(loom_hw_load("/nonexistent/hw.yaml", 0, &hw) == LOOM_ERR_IO);
    CHECK(strstr(loom_last_error(), "h200") != NULL);

    const char *ok = "name: x\nbandwidth: 2T\npeak_flops:\n  f16: 100T\n";
    CHECK(loom_hw_parse(ok, strlen(ok), "t.yaml", 0, &hw) == LOOM_OK);
    CHECK(hw.bandwidth == 2e12 && hw.peak_flops[LOOM_HW_F16] == 1e14);
    /* roofline: memory bound, compute bound, fallbacks */
    CHECK_CLOSE(loom_hw_time(&hw, 1, LOOM_HW_F16, 1e12, 4e12), 2.0, 1e-12);
    CHECK_CLOSE(loom_hw_time(&hw, 1, LOOM_HW_F16, 1e15, 2e12), 10.0, 1e-12);
    CHECK_CLOSE(loom_hw_time(&hw, 1, LOOM_HW_BF16, 1e15, 0), 10.0, 1e-12);  /* bf16 -> f16 */

    /* auto values are measured, given ones kept */
    const char *mixed = "name: mine\nbandwidth: 5e9\npeak_flops: auto\ncache: auto\n";
    CHECK_MSG(loom_hw_parse(mixed, strlen(mixed), "m.yaml", 1, &hw) == LOOM_OK, "%s", loom_last_error());
    CHECK(hw.measured && hw.bandwidth == 5e9 && hw.cores >= 1);
    CHECK_MSG(hw.peak_flops[LOOM_HW_F32] > 1e8 && hw.vector_flops == hw.peak_flops[LOOM_HW_F32],
              "%g", hw.peak_flops[LOOM_HW_F32]);
    CHECK(hw.peak_flops[LOOM_HW_INT8] >= hw.peak_flops[LOOM_HW_F32]);

    expect_hw_error("name: x\nbandwidth: 1e9\nbogus: 3\n", "t.yaml:3:1: unknown key 'bogus'");
    expect_hw_error("name: x\nbandwidth: fast\n", "t.yaml:2:12: bandwidth: bad value 'fast'");
    expect_hw_error("bandwidth: 1e9\npeak_flops:\n  f16: 1e12\n  fp4: 2e12\n",
                    "t.yaml:4:3: peak_flops: unknown key 'fp4'");
    expect_hw_error("bandwidth: -5\npeak_flops: {f16: 1}\n", "t.yaml:1:12: bandwidth: bad value");
    expect_hw_error("bandwidth: 1e9\ncache: [1, 2]\n", "t.yaml:2:8: cache: expected a mapping");
    expect_hw_error("name: x\n  bandwidth: 1e9\n", "t.yaml:2:12: YAML syntax error");
    expect_hw_error("name: [x\n", "t.yaml:");
    expect_hw_error("name: x\npeak_flops: {f32: 1e12}\n", "bandwidth missing");
    expect_hw_error("name: x\nbandwidth: 1e12\n", "no peak given");
    expect_hw_error("- 1\n- 2\n", "t.yaml:1:1: expected a mapping");
    expect_hw_error("cores: 1.5\n", "t.yaml:1:8: cores: bad value");
    /* absurd values: out of range, naming the file, position and field (they printed inf / nan) */
    expect_hw_error("name: x\nbandwidth: 1e-300\npeak_flops: {f16: 1e12}\n",
                    "t.yaml:2:12: bandwidth: 1e-300 = 1e-300 bytes/s is out of range: expected 1e+06..1e+16");
    expect_hw_error("name: x\nbandwidth: 0\npeak_flops: {f16: 1e12}\n", "t.yaml:2:12: bandwidth: 0 = 0 bytes/s is out of range");
    expect_hw_error("bandwidth: 1e12\npeak_flops:\n  f16: 1e-300\n", "t.yaml:3:8: f16: 1e-300 = 1e-300 FLOP/s is out of range");
    expect_hw_error("bandwidth: 1e12\npeak_flops:\n  int8: 1e300\n", "t.yaml:3:9: int8: 1e300");
    expect_hw_error("bandwidth: 1e12\nvector_flops: 3\n", "t.yaml:2:15: vector_flops: 3 = 3 FLOP/s is out of range");
    expect_hw_error("bandwidth: 1e12\nvector_flops: 1e12\ncache: {l2: 5}\n", "t.yaml:3:13: l2: 5 = 5 bytes is out of range");
    expect_hw_error("bandwidth: 1e12\nvector_flops: 1e12\ncache: {l3: 2Ti}\n", "l3: 2Ti");
    expect_hw_error("bandwidth: 1e12\nvector_flops: 1e12\ncores: 0\n", "t.yaml:3:8: cores: 0 = 0 cores is out of range");
    expect_hw_error("bandwidth: 1e12\nvector_flops: 1e12\ncores: 2e6\n", "cores: 2e6");
    expect_hw_error("bandwidth: nan\nvector_flops: 1e12\n", "t.yaml:1:12: bandwidth: bad value 'nan'");
    /* the edges of the ranges are accepted; 0 means "not given" for peaks and caches */
    const char *edges = "bandwidth: 1M\nvector_flops: 1e19\npeak_flops: {f32: 0, f16: 1e6}\ncache: {l1: 256, l2: 0, l3: 1Ti}\n"
                        "cores: 1000000\n";
    CHECK_MSG(loom_hw_parse(edges, strlen(edges), "t.yaml", 0, &hw) == LOOM_OK, "%s", loom_last_error());
    CHECK(isfinite(loom_hw_time(&hw, 1, LOOM_HW_F32, 1e30, 1e30)));
}

/* Counts occurrences of needle in hay. */
static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* Minimal well-formedness: every <tag> is closed in order, comments/PI skipped. */
static int xml_balanced(const char *s) {
    char stack[64][32];
    int depth = 0, roots = 0;
    for (const char *p = strchr(s, '<'); p; p = strchr(p, '<')) {
        if (p[1] == '?' || p[1] == '!') {
            p = strchr(p, '>');
            if (!p) return 0;
            continue;
        }
        const char *end = strchr(p, '>');
        if (!end) return 0;
        int closing = p[1] == '/', selfclose = end[-1] == '/';
        const char *name = p + 1 + closing;
        size_t len = strcspn(name, " />");
        if (len == 0 || len >= 32) return 0;
        if (closing) {
            if (depth == 0 || strncmp(stack[depth - 1], name, len) != 0 || stack[depth - 1][len]) return 0;
            depth--;
        } else if (!selfclose) {
            if (depth == 64) return 0;
            if (depth == 0) roots++;
            memcpy(stack[depth], name, len);
            stack[depth++][len] = '\0';
        }
        p = end;
    }
    return depth == 0 && roots == 1;
}

static void test_svg(void) {
    loom_profile a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    snprintf(a.phase, sizeof a.phase, "prefill");
    b = a;
    a.mode = "step_by_step";
    b.mode = "fused";
    a.n_tokens = b.n_tokens = 5;
    const char *ka[] = {"matmul.avx512", "rms_norm.ref", "matmul.avx512", "add.avx2", "a<b&c"};
    for (int i = 0; i < 5; i++) {
        loom_profile_section one = {.kernels = 1, .bytes_read = 1e6 * (i + 1), .bytes_written = 5e5,
                                    .time_ns = 1e5 * (i + 1)};
        loom_profile_add_kind(&a, ka[i], &one);
    }
    CHECK(a.n_kinds == 4 && strcmp(a.kinds[0].name, "matmul") == 0 && a.kinds[0].kernels == 2);
    CHECK(a.kinds[0].bytes_read == 4e6);
    {   /* more kinds than the table holds: the last slot is "other" and holds only the overflow */
        loom_profile c;
        memset(&c, 0, sizeof c);
        loom_profile_section unit = {.kernels = 1};
        char nm[32];
        for (int i = 0; i < LOOM_PROFILE_MAX_KINDS + 8; i++) {
            snprintf(nm, sizeof nm, "op%d.avx512", i);
            loom_profile_add_kind(&c, nm, &unit);
        }
        CHECK(c.n_kinds == LOOM_PROFILE_MAX_KINDS);
        CHECK(strcmp(c.kinds[LOOM_PROFILE_MAX_KINDS - 2].name, "op30") == 0 &&
              c.kinds[LOOM_PROFILE_MAX_KINDS - 2].kernels == 1);
        CHECK(strcmp(c.kinds[LOOM_PROFILE_MAX_KINDS - 1].name, "other") == 0 &&
              c.kinds[LOOM_PROFILE_MAX_KINDS - 1].kernels == 9);
    }
    loom_profile_section one = {.kernels = 2, .bytes_read = 3e6, .time_ns = 2e5};
    loom_profile_add_kind(&b, "qkv_rope.avx512", &one);
    loom_profile_add_kind(&b, "matmul.avx512", &one);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL);
    if (!f) return;
    loom_profile_write_svg(f, &a, &b);
    fclose(f);
    CHECK(strncmp(buf, "<?xml", 5) == 0 && strstr(buf, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    CHECK(xml_balanced(buf));
    /* 5 op kinds (union), one step and one fused bar each, in 2 panels */
    CHECK_MSG(count(buf, "class=\"bar step\"") == 5 * 2, "%d", count(buf, "class=\"bar step\""));
    CHECK(count(buf, "class=\"bar fused\"") == 5 * 2);
    const char *kinds[] = {"matmul", "rms_norm", "add", "a&lt;b&amp;c", "qkv_rope"};
    for (int i = 0; i < 5; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "class=\"bar step\" data-kind=\"%s\"", kinds[i]);
        CHECK_MSG(count(buf, needle) == 2, "%s", kinds[i]);
    }
    CHECK(strstr(buf, "a<b") == NULL);  /* escaped */
    CHECK(strstr(buf, "Memory traffic") && strstr(buf, "Time per op kind") && strstr(buf, ">MB<"));
    free(buf);

    /* step only: no fused bars, still well formed */
    f = open_memstream(&buf, &len);
    if (!f) return;
    loom_profile_write_svg(f, &a, NULL);
    fclose(f);
    CHECK(xml_balanced(buf) && count(buf, "class=\"bar fused\"") == 0 &&
          count(buf, "class=\"bar step\"") == 4 * 2);
    free(buf);

    /* fused only: no step bars */
    f = open_memstream(&buf, &len);
    if (!f) return;
    loom_profile_write_svg(f, NULL, &b);
    fclose(f);
    CHECK(xml_balanced(buf) && count(buf, "class=\"bar step\"") == 0 &&
          count(buf, "class=\"bar fused\"") == 2 * 2 && strstr(buf, "): fused<"));
    free(buf);
}

/* With the fusion engine built in, the fused plan of a layer needs fewer
 * kernels and less traffic than step_by_step. */
static void test_fused_plan(void) {
    if (!loom_plan_have_fusion()) {
        fprintf(stderr, "note: no fusion engine in this build, fused plan not tested\n");
        return;
    }
    loom_hw_profile hw = test_hw();
    loom_llama_config m = tiny();
    loom_plan_params p = {.custom = &m, .batch = 2, .seq = 9, .kv_dtype = LOOM_F16, .wtype = LOOM_F16};
    loom_graph *g[2];
    loom_profile prof[2];
    memset(prof, 0, sizeof prof);
    for (int i = 0; i < 2; i++) {
        p.fused = i;
        loom_plan_info info;
        CHECK(loom_graph_init(&g[i]) == LOOM_OK);
        CHECK_MSG(loom_plan_build(g[i], &p, &hw, &info) == LOOM_OK, "%s", loom_last_error());
        CHECK_MSG(info.uncosted == 0, "%d", info.uncosted);
        CHECK(loom_profile_collect(g[i], info.n_layers, "prefill", i ? "fused" : "step_by_step",
                                   info.n_tokens, &prof[i]) == LOOM_OK);
    }
    if (prof[0].sections && prof[1].sections) {
        const loom_profile_section *a = &prof[0].sections[1], *b = &prof[1].sections[1];
        CHECK_MSG(b->kernels < a->kernels, "%d vs %d", b->kernels, a->kernels);
        CHECK(b->bytes_read + b->bytes_written < a->bytes_read + a->bytes_written);
    }
    for (int i = 0; i < 2; i++) {
        loom_profile_free(&prof[i]);
        loom_graph_free(g[i]);
    }
}

/* A rules file with `activation_dtype: f16` (the default rules plus the key):
 * a prefill layer's q (qkv_rope -> attention_linear, or with that rule off
 * qkv_rope -> flash_attention_score, whose output stays f32) is costed at 2
 * bytes a value where it was 4, written once and read once: the fused
 * traffic of a layer falls by 2 * 2 * T * H*D bytes, with the same kernels. */
static int write_rules(const char *path, int f16, int al_off) {
    extern const char loom_fusion_default_yaml[];
    const char *al = "    fused_op: attention_linear\n", *at = strstr(loom_fusion_default_yaml, al);
    CHECK(at != NULL);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f || !at) return 0;
    fprintf(f, "%s%.*s%s%s", f16 ? "activation_dtype: f16\n" : "", (int)(at - loom_fusion_default_yaml) + (int)strlen(al),
            loom_fusion_default_yaml, al_off ? "    enabled: false\n" : "", at + strlen(al));
    fclose(f);
    return 1;
}

static void test_activation_dtype_plan(void) {
    if (!loom_plan_have_fusion()) return;
    const char *path = "test_plan_act.yaml";
    loom_hw_profile hw = test_hw();
    loom_llama_config m = tiny();
    loom_plan_params p = {.custom = &m, .batch = 1, .seq = 40, .kv_dtype = LOOM_F16, .wtype = LOOM_F16, .fused = 1};
    for (int al_off = 0; al_off < 2; al_off++) {
        loom_profile prof[2];
        memset(prof, 0, sizeof prof);
        for (int i = 0; i < 2; i++) {
            if (!write_rules(path, i, al_off)) return;
            p.rules_path = path;
            loom_graph *g;
            loom_plan_info info;
            CHECK(loom_graph_init(&g) == LOOM_OK);
            CHECK_MSG(loom_plan_build(g, &p, &hw, &info) == LOOM_OK, "%s", loom_last_error());
            CHECK(loom_profile_collect(g, info.n_layers, "prefill", "fused", info.n_tokens, &prof[i]) == LOOM_OK);
            loom_graph_free(g);
        }
        remove(path);
        if (prof[0].sections && prof[1].sections) {
            const loom_profile_section *a = &prof[0].sections[1], *b = &prof[1].sections[1];
            double saved = (a->bytes_read + a->bytes_written) - (b->bytes_read + b->bytes_written);
            double want = 2.0 * 2.0 * 40 * (m.n_heads * m.head_dim);
            CHECK_MSG(saved == want, "attention_linear %s: saved %g bytes, expected %g", al_off ? "off" : "on", saved,
                      want);
            CHECK(a->kernels == b->kernels && a->kernels == 4 + al_off);
        }
        for (int i = 0; i < 2; i++) loom_profile_free(&prof[i]);
    }
}

/* An int8 cache is planned as the engine runs it: i8 caches with their f32
 * scale stores in the graph, so the fused prefill's qkv_rope writes q (f32),
 * K and V at a byte a value and one 4-byte scale per cache row, and the
 * attention stays flash_attention_score + linear (attention_linear does not
 * take an i8 cache), every node costed. */
static void test_int8_cache_plan(void) {
    if (!loom_plan_have_fusion()) return;
    loom_hw_profile hw = test_hw();
    loom_llama_config m = tiny();
    const int T = 40;
    loom_plan_params p = {.custom = &m, .batch = 1, .seq = T, .kv_dtype = LOOM_I8, .wtype = LOOM_Q8_0, .fused = 1};
    loom_graph *g;
    loom_plan_info info;
    CHECK(loom_graph_init(&g) == LOOM_OK);
    CHECK_MSG(loom_plan_build(g, &p, &hw, &info) == LOOM_OK, "%s", loom_last_error());
    CHECK_MSG(info.uncosted == 0, "%d", info.uncosted);
    int qkv = 0, fa = 0, al = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        const loom_node *nd = &g->nodes[n];
        fa += nd->op == LOOM_OP_FLASH_ATTENTION;
        al += nd->op == LOOM_OP_ATTENTION_LINEAR;
        if (nd->op != LOOM_OP_QKV_ROPE) continue;
        qkv++;
        double want = 4.0 * T * m.n_heads * m.head_dim + 2.0 * T * m.n_kv_heads * m.head_dim + 4.0 * 2 * T * m.n_kv_heads;
        CHECK_MSG(nd->stats.bytes_written == want, "qkv_rope writes %g bytes, expected %g", nd->stats.bytes_written, want);
    }
    CHECK(qkv == m.n_layers && fa == m.n_layers && al == 0);
    loom_graph_free(g);
}

/* bert-base (12 layers, 768, ffn 3072), batch 2 x 16 tokens, f16 weights: the
 * weights of a layer are read once; matmul flops are 2 * T * (4 * 768^2 + 2 * 768 * 3072). */
static void test_bert(void) {
    loom_hw_profile hw = test_hw();
    loom_plan_params p = {.config = "bert-base", .batch = 2, .seq = 16, .kv_dtype = LOOM_F16,
                          .wtype = LOOM_F16};
    loom_graph *g;
    CHECK(loom_graph_init(&g) == LOOM_OK);
    loom_plan_info info;
    loom_status s = loom_plan_build(g, &p, &hw, &info);
    CHECK_MSG(s == LOOM_OK, "%s", loom_last_error());
    if (s == LOOM_OK) {
        CHECK(info.n_layers == 12 && info.n_tokens == 32 && info.uncosted == 0);
        double w = 0, mm_flops = 0, T = 32, D = 768, F = 3072;
        for (int n = 0; n < g->n_nodes; n++) {
            if (g->nodes[n].layer != 3 || g->nodes[n].op != LOOM_OP_MATMUL) continue;
            w += g->nodes[n].stats.bytes_read - 4.0 * T * (double)g->tensors[g->nodes[n].src[0]].t.shape[1];
            mm_flops += g->nodes[n].stats.flops;
        }
        CHECK_MSG(w == 2.0 * (4 * D * D + 2 * D * F), "%.0f", w);
        CHECK(mm_flops == 2.0 * T * (4 * D * D + 2 * D * F));
        /* the default rules: every projection takes its bias in the GEMM's
         * epilogue, the FFN's up projection its GELU and the output ones
         * their residual add; a layer is 6 linear + attention + 2 layer_norm */
        loom_fusion_rules *rules = NULL;
        CHECK(loom_fusion_rules_load(NULL, &rules) == LOOM_OK);
        loom_fusion_report rep;
        CHECK_MSG(loom_fusion_apply(g, rules, &rep) == LOOM_OK, "%s", loom_last_error());
        int fired[3] = {0, 0, 0};
        static const char *const names[3] = {"linear_bias_gelu", "linear_bias_residual", "linear_bias"};
        for (int i = 0; i < rep.n_rules; i++)
            for (int k = 0; k < 3; k++)
                if (!strcmp(rep.rules[i].name, names[k])) fired[k] = rep.rules[i].fired;
        CHECK_MSG(fired[0] == 12 && fired[1] == 24 && fired[2] == 36, "fired %d %d %d", fired[0], fired[1], fired[2]);
        int ops[LOOM_OP_COUNT] = {0}, kernels = 0, with[3] = {0, 0, 0}; /* bias, gelu (erf form), residual */
        for (int n = 0; n < g->n_nodes; n++)
            if (g->nodes[n].layer == 3) {
                ops[g->nodes[n].op]++, kernels++;
                if (g->nodes[n].op != LOOM_OP_LINEAR) continue;
                const loom_linear_attrs *la = (const void *)g->nodes[n].attrs;
                with[0] += la->bias, with[1] += la->act == LOOM_ACT_GELU, with[2] += la->residual;
                CHECK(la->act == LOOM_ACT_NONE || la->act == LOOM_ACT_GELU);
                CHECK(!(la->act && la->residual) && !la->norm);
            }
        CHECK_MSG(with[0] == 6 && with[1] == 1 && with[2] == 2, "bias %d gelu %d residual %d", with[0], with[1],
                  with[2]);
        CHECK_MSG(ops[LOOM_OP_LINEAR] == 6 && ops[LOOM_OP_ADD_BIAS] == 0 && ops[LOOM_OP_GELU] == 0 &&
                      ops[LOOM_OP_ADD] == 0 && ops[LOOM_OP_LAYER_NORM] == 2 && kernels == 9,
                  "layer 3: %d linear, %d add_bias, %d gelu, %d add, %d nodes", ops[LOOM_OP_LINEAR],
                  ops[LOOM_OP_ADD_BIAS], ops[LOOM_OP_GELU], ops[LOOM_OP_ADD], kernels);
        loom_fusion_rules_free(rules);
    }
    loom_graph_free(g);
}

int main(void) {
    RUN_TEST(test_bert);
    RUN_TEST(test_tiny_prefill_and_decode);
    RUN_TEST(test_7b_weight_bytes);
    RUN_TEST(test_errors);
    RUN_TEST(test_hw_profiles);
    RUN_TEST(test_svg);
    RUN_TEST(test_fused_plan);
    RUN_TEST(test_activation_dtype_plan);
    RUN_TEST(test_int8_cache_plan);
    return TEST_SUMMARY();
}
