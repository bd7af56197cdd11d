/* Mixtures of experts from files: the Mixtral and Qwen3-MoE fixtures
 * (tests/fixtures/families) load from their folders and from loom convert's
 * GGUF with their expert counts, and broken files are refused with the key or
 * tensor named: expert_used_count above expert_count, a missing expert_count,
 * a missing or misshaped expert tensor, a config.json choosing more experts
 * than it has. (The logits against transformers: test_families.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "check.h"
#include "loom.h"
#include "model/llama.h"

static char tmp[] = "/tmp/loom_moe_XXXXXX";

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    if (b && fread(b, 1, *n, f) != *n) free(b), b = NULL;
    fclose(f);
    return b;
}

static void spill(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, n, f) == n);
    if (f) fclose(f);
}

/* The first occurrence of s (as the bytes of a GGUF string) in b. */
static unsigned char *find(unsigned char *b, size_t n, const char *s) {
    size_t l = strlen(s);
    for (size_t i = 0; i + l <= n; i++)
        if (memcmp(b + i, s, l) == 0 && i >= 8) return b + i;
    return NULL;
}

/* Loads path; returns the status, the message into msg. */
static loom_status load(const char *path, char *msg, size_t n) {
    loom_model_params p = loom_model_default_params();
    p.n_threads = 1;
    p.n_ctx = 32;
    loom_model *m = NULL;
    loom_status s = loom_model_load(path, &p, &m);
    snprintf(msg, n, "%s", s == LOOM_OK ? "" : loom_last_error());
    loom_model_free(m);
    return s;
}

static void expect(const char *path, loom_status want, const char *needle) {
    char msg[600];
    loom_status s = load(path, msg, sizeof msg);
    CHECK_MSG(s == want && strstr(msg, needle), "%s: status %d (want %d), message '%s' should name '%s'", path,
              (int)s, (int)want, msg, needle);
}

static void test_family(const char *family, const char *arch) {
    char dir[600], gguf[700], bad[700], key[96];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/families/%s", LOOM_SOURCE_DIR, family);
    snprintf(gguf, sizeof gguf, "%s/%s.gguf", tmp, family);
    snprintf(bad, sizeof bad, "%s/%s_bad.gguf", tmp, family);
    loom_convert_params cp = loom_convert_default_params();
    CHECK_MSG(loom_convert(dir, gguf, &cp) == LOOM_OK, "%s", loom_last_error());
    char msg[600];
    CHECK_MSG(load(dir, msg, sizeof msg) == LOOM_OK, "%s: %s", dir, msg);
    CHECK_MSG(load(gguf, msg, sizeof msg) == LOOM_OK, "%s: %s", gguf, msg);
    size_t n;
    unsigned char *good = slurp(gguf, &n), *b = malloc(n);
    CHECK(good && b);
    if (!good || !b) return;

    /* expert_used_count 5 of 4 experts (the u32 follows the key and its type) */
    memcpy(b, good, n);
    snprintf(key, sizeof key, "%s.expert_used_count", arch);
    unsigned char *k = find(b, n, key);
    CHECK(k != NULL);
    if (k) {
        uint32_t five = 5;
        memcpy(k + strlen(key) + 4, &five, 4);
        spill(bad, b, n);
        expect(bad, LOOM_ERR_FORMAT, "expert_used_count");
    }
    /* no expert_count: Qwen3-MoE needs it; a llama file without it is dense, and its
     * expert tensors are not what a dense layer has */
    memcpy(b, good, n);
    snprintf(key, sizeof key, "%s.expert_count", arch);
    k = find(b, n, key);
    CHECK(k != NULL);
    if (k) {
        k[strlen(key) - 2] = 'X';
        spill(bad, b, n);
        expect(bad, LOOM_ERR_FORMAT, strcmp(arch, "llama") ? "expert_count" : "blk.0.ffn_gate.weight");
    }
    /* a missing expert tensor */
    memcpy(b, good, n);
    k = find(b, n, "blk.1.ffn_up_exps.weight");
    CHECK(k != NULL);
    if (k) {
        k[13] = 'X';
        spill(bad, b, n);
        expect(bad, LOOM_ERR_FORMAT, "missing tensor 'blk.1.ffn_up_exps.weight'");
    }
    /* experts of the wrong shape: down's expert count and rows swapped (same size) */
    memcpy(b, good, n);
    k = find(b, n, "blk.0.ffn_down_exps.weight");
    CHECK(k != NULL);
    if (k) {
        unsigned char *d = k + strlen("blk.0.ffn_down_exps.weight") + 4; /* after n_dims */
        uint64_t ne[3];
        memcpy(ne, d, sizeof ne);
        CHECK(ne[2] == 4);
        uint64_t sw[3] = {ne[0], ne[2], ne[1]};
        memcpy(d, sw, sizeof sw);
        spill(bad, b, n);
        expect(bad, LOOM_ERR_SHAPE, "blk.0.ffn_down_exps.weight");
    }
    free(good), free(b);
}

/* A config.json that chooses more experts than it has. */
static void test_hf_config(void) {
    char dir[700], path[800], src[600];
    snprintf(src, sizeof src, "%s/tests/fixtures/families/mixtral", LOOM_SOURCE_DIR);
    snprintf(dir, sizeof dir, "%s/hf", tmp);
    char cmd[2100];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s'/* '%s'/", dir, src, dir);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t n;
    unsigned char *c = slurp(path, &n);
    CHECK(c != NULL);
    if (!c) return;
    unsigned char *k = find(c, n, "\"num_experts_per_tok\": 2");
    CHECK(k != NULL);
    if (k) {
        k[strlen("\"num_experts_per_tok\": ")] = '6';
        spill(path, c, n);
        expect(dir, LOOM_ERR_FORMAT, "experts used per token");
    }
    free(c);
}

/* The fixture's last-position logits of a model in mode, activations full. */
static int forward(const char *path, loom_exec_mode mode, const int32_t *tok, int n, float *out, int vocab) {
    loom_model_params p = loom_model_default_params();
    p.n_threads = 2;
    p.n_ctx = 32;
    p.mode = mode;
    p.act_precision = LOOM_ACT_PREC_FULL;
    loom_model *m = NULL;
    loom_status s = loom_model_load(path, &p, &m);
    if (s == LOOM_OK && loom_model_get_info(m).vocab_size != vocab) s = LOOM_ERR_SHAPE;
    if (s == LOOM_OK) s = loom_model_forward(m, tok, n, 0, out);
    CHECK_MSG(s == LOOM_OK, "%s: %s", path, loom_last_error());
    loom_model_free(m);
    return s == LOOM_OK;
}

static double rel(const float *a, const float *b, int n) {
    double d = 0, m = 0;
    for (int i = 0; i < n; i++) {
        if (!(fabs((double)a[i] - b[i]) <= d)) d = fabs((double)a[i] - b[i]);
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return m > 0 ? d / m : d;
}

/* Every weight type of loom convert: fused (the MoE ops) equal to step_by_step
 * (the primitives) but for attention's rounding (observed: equal), and near
 * transformers' logits. */
static void test_quantized(void) {
    const char *family = "mixtral";
    char dir[600], p[700];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/families/%s", LOOM_SOURCE_DIR, family);
    int32_t tok[64];
    int n = 0;
    snprintf(p, sizeof p, "%s/tokens.txt", dir);
    FILE *f = fopen(p, "r");
    CHECK(f != NULL);
    if (!f) return;
    while (n < 64 && fscanf(f, "%d", &tok[n]) == 1) n++;
    fclose(f);
    size_t lb;
    snprintf(p, sizeof p, "%s/logits.f32", dir);
    float *ref = (float *)(void *)slurp(p, &lb);
    int vocab = (int)(lb / 4);
    CHECK(ref && vocab > 0);
    if (!ref) return;
    float *a = malloc(sizeof(float) * (size_t)vocab), *b = malloc(sizeof(float) * (size_t)vocab);
    const loom_dtype types[4] = {LOOM_BF16, LOOM_Q8_0, LOOM_Q4_0, LOOM_Q4_1};
    /* against the f16 weights' logits; 4 bits on rows of 32 move this tiny model's router logits
     * enough to switch experts, so there only "not garbage" (observed 0.36, 0.38; all-zero logits
     * would give 1.0) */
    const double bound[4] = {2e-2, 5e-2, 0.6, 0.6};
    for (int t = 0; t < 4; t++) {
        char gguf[700];
        snprintf(gguf, sizeof gguf, "%s/%s_%s.gguf", tmp, family, loom_dtype_name(types[t]));
        loom_convert_params cp = loom_convert_default_params();
        cp.type_set = 1, cp.type = types[t];
        CHECK_MSG(loom_convert(dir, gguf, &cp) == LOOM_OK, "%s", loom_last_error());
        if (!forward(gguf, LOOM_MODE_STEP_BY_STEP, tok, n, a, vocab) || !forward(gguf, LOOM_MODE_FUSED, tok, n, b, vocab))
            continue;
        double e_modes = rel(b, a, vocab), e_ref = rel(b, ref, vocab);
        fprintf(stderr, "  %s %-5s fused vs step_by_step %.2e, vs transformers (f16 weights) %.2e\n", family,
                loom_dtype_name(types[t]), e_modes, e_ref);
        CHECK_MSG(e_modes <= 1e-5, "%s: fused vs step_by_step %.3g", loom_dtype_name(types[t]), e_modes);
        CHECK_MSG(e_ref <= bound[t], "%s: vs transformers %.3g > %g", loom_dtype_name(types[t]), e_ref, bound[t]);
    }
    free(a), free(b), free(ref);
}

int main(void) {
    if (!mkdtemp(tmp)) return 1;
    RUN_TEST(test_hf_config);
    test_family("mixtral", "llama");
    test_family("qwen3moe", "qwen3moe");
    RUN_TEST(test_quantized);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return TEST_SUMMARY();
}
