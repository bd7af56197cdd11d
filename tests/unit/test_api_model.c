/* The public API around a loaded model (loom.h): description, tokenizer from
 * the model, decoding a sequence, KV rewind / reset, all-position logits, the
 * planned arena and profiles; on stories260K (llama2.c) and, when present,
 * the default SmolLM2 GGUF. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/model.h"

/* RUN_TEST for a test taking arguments. */
#define RUN_WITH(fn, ...)                                                     \
    do {                                                                      \
        int before_ = check_failures_;                                        \
        fn(__VA_ARGS__);                                                      \
        fprintf(stderr, "%s %s\n", check_failures_ == before_ ? "ok  " : "FAIL", #fn); \
    } while (0)

static const char *shared_path(const char *rel, char *buf, size_t n) {
    const char *dir = getenv("LOOM_SHARED_DIR");
    snprintf(buf, n, "%s/%s", dir ? dir : "../shared", rel);
    return buf;
}

static const int32_t A[6] = {1, 403, 407, 261, 378, 300};  /* BOS, then ids of the 512-token vocabulary */
static const int32_t B[6] = {1, 403, 407, 100, 200, 301};  /* A with other tokens from position 3 */

/* Every byte of layer l's K and V rows from position pos on is zero. */
static int rows_zero_from(const loom_model *m, int pos) {
    const loom_llama_config *c = &m->cfg;
    size_t row = (size_t)c->n_kv_heads * (size_t)c->head_dim * loom_dtype_size(m->params.kv_dtype);
    for (int l = 0; l < c->n_layers; l++) {
        const unsigned char *k = (const unsigned char *)m->k_cache + ((size_t)l * m->n_ctx + pos) * row;
        const unsigned char *v = (const unsigned char *)m->v_cache + ((size_t)l * m->n_ctx + pos) * row;
        for (size_t i = 0; i < (size_t)(m->n_ctx - pos) * row; i++)
            if (k[i] || v[i]) return 0;
    }
    return 1;
}

static void test_describe(loom_model *m) {
    loom_model_desc d;
    CHECK(loom_model_describe(m, &d) == LOOM_OK);
    loom_model_info in = loom_model_get_info(m);
    /* embedding, per layer 2 norms + q, k, v, o + 3 FFN matrices, the final
     * norm; the classifier is the embedding (llama2.c's positive vocab size) */
    int64_t D = in.dim, kvd = (int64_t)in.n_kv_heads * in.head_dim;
    int64_t want = in.vocab_size * D + in.n_layers * (2 * D + 2 * D * D + 2 * kvd * D + 3 * in.hidden_dim * D) + D;
    CHECK(d.format == LOOM_MODEL_LLAMA2C && strcmp(loom_model_format_name(d.format), "llama2c") == 0);
    CHECK_MSG(d.n_params == want, "%lld params, want %lld", (long long)d.n_params, (long long)want);
    CHECK(d.weight_bytes == (uint64_t)d.n_params * 4 && d.main_dtype == LOOM_F32);
    CHECK(d.n_converted == 0 && d.converted[0] == '\0');
    CHECK(loom_model_describe(NULL, &d) == LOOM_ERR_INVALID_ARG);
}

static void test_tokenizer(loom_model *m, const char *tok_path) {
    loom_tokenizer *t = (loom_tokenizer *)1;
    CHECK(loom_tokenizer_from_model(m, &t) == LOOM_ERR_UNSUPPORTED && t == NULL);
    CHECK(strstr(loom_last_error(), "tokenizer.bin") != NULL);
    loom_chat_template *ct = (loom_chat_template *)1;
    CHECK(loom_chat_template_from_model(m, &ct) == LOOM_ERR_UNSUPPORTED && ct == NULL);
    CHECK(loom_tokenizer_load(tok_path, &t) == LOOM_OK);
    if (!t) return;
    const char *text = "Once upon a time, a cat sat.";
    int32_t ids[64];
    int n = 0;
    CHECK(loom_tokenizer_encode_ex(t, text, strlen(text), LOOM_TOK_BOS, ids, 64, &n) == LOOM_OK && n > 3);
    CHECK(ids[0] == loom_tokenizer_bos(t) && loom_tokenizer_vocab_size(t) == 512);
    char *back = NULL;
    size_t len = 0;
    CHECK(loom_tokenizer_decode_tokens(t, ids, n, &back, &len) == LOOM_OK);
    CHECK_MSG(back && strcmp(back, text) == 0 && len == strlen(text), "'%s'", back ? back : "(null)");
    free(back);
    CHECK(loom_tokenizer_decode_tokens(t, ids, 0, &back, &len) == LOOM_OK && back && back[0] == '\0' && len == 0);
    free(back);
    int32_t bad[3] = {1, 600, 5};
    back = (char *)1;
    CHECK(loom_tokenizer_decode_tokens(t, bad, 3, &back, NULL) == LOOM_ERR_INVALID_ARG && back == NULL);
    CHECK(strstr(loom_last_error(), "index 1") != NULL);
    loom_tokenizer_free(t);
}

static void test_kv(loom_model *m) {
    const int V = loom_model_get_info(m).vocab_size, n_ctx = loom_model_get_info(m).n_ctx;
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V), *all = malloc(sizeof(float) * V * 6);
    CHECK(loom_model_arena_bytes(m) == 0);  /* nothing ran yet */
    CHECK(loom_model_forward(m, A, 6, 0, la) == LOOM_OK);
    CHECK(loom_model_arena_bytes(m) > 0);
    /* other tokens at positions 3..5, then back to 3 and A's tokens again:
     * the logits of A, bit for bit */
    CHECK(loom_model_forward(m, B, 6, 0, lb) == LOOM_OK && memcmp(la, lb, sizeof(float) * V) != 0);
    CHECK(loom_model_kv_rewind(m, 3) == LOOM_OK);
    CHECK(rows_zero_from(m, 3) && !rows_zero_from(m, 2));
    CHECK(loom_model_forward(m, A + 3, 3, 3, lb) == LOOM_OK && memcmp(la, lb, sizeof(float) * V) == 0);
    CHECK(loom_model_kv_reset(m) == LOOM_OK && rows_zero_from(m, 0));
    CHECK(loom_model_forward(m, A, 6, 0, lb) == LOOM_OK && memcmp(la, lb, sizeof(float) * V) == 0);
    CHECK(loom_model_kv_rewind(m, -1) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_model_kv_rewind(m, n_ctx + 1) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_model_kv_rewind(m, n_ctx) == LOOM_OK);
    /* every position's logits: row i is the last logits of tokens[0..i] */
    CHECK(loom_model_forward_all(m, A, 6, 0, all) == LOOM_OK);
    int close = 1;
    for (int i = 0; i < V; i++) close &= check_close(all[5 * V + i], la[i], 1e-5);
    CHECK(loom_model_forward(m, A, 3, 0, lb) == LOOM_OK);
    for (int i = 0; i < V; i++) close &= check_close(all[2 * V + i], lb[i], 1e-5);
    CHECK(close);
    free(la), free(lb), free(all);
}

static void test_profile(loom_model *m) {
    const loom_model_info in = loom_model_get_info(m);
    float *logits = malloc(sizeof(float) * in.vocab_size);
    loom_profile p;
    CHECK(loom_model_profile(m, A, 6, 0, 3, logits, &p) == LOOM_OK);
    CHECK(p.n_sections == in.n_layers + 2 && strcmp(p.phase, "prefill") == 0 && p.n_tokens == 6);
    CHECK(strcmp(p.sections[0].name, "embed") == 0 && strcmp(p.sections[in.n_layers + 1].name, "head") == 0);
    int kernels = 0;
    for (int i = 0; i < p.n_sections; i++) kernels += p.sections[i].kernels;
    CHECK(kernels == p.total.kernels && kernels > 0 && p.total.bytes_read > 0 && p.total.time_ns > 0);
    loom_sampler_params sp = loom_sampler_default_params();
    CHECK(loom_profile_add_sampler(&p, logits, in.vocab_size, &sp) == LOOM_OK);
    CHECK(p.n_sections == in.n_layers + 3 && strcmp(p.sections[p.n_sections - 1].name, "sample") == 0);
    CHECK(p.total.kernels == kernels + 1);
    loom_profile_free(&p);
    CHECK(p.n_sections == 0 && p.sections == NULL);
    CHECK(loom_model_profile(m, A + 5, 1, 5, 1, logits, &p) == LOOM_OK && strcmp(p.phase, "decode") == 0);
    loom_profile_free(&p);
    CHECK(loom_model_profile(m, A, 6, 0, 0, logits, &p) == LOOM_ERR_INVALID_ARG);
    free(logits);
}

/* The default chat model (scripts/fetch-models.sh): its own vocabulary and template. */
static void test_gguf(const char *path) {
    loom_model_params mp = loom_model_default_params();
    mp.n_ctx = 64;
    mp.n_threads = 1;
    loom_model *m = NULL;
    CHECK(loom_model_load(path, &mp, &m) == LOOM_OK);
    if (!m) return;
    loom_model_desc d;
    CHECK(loom_model_describe(m, &d) == LOOM_OK && d.format == LOOM_MODEL_GGUF && d.main_dtype == LOOM_Q4_1);
    loom_tokenizer *t = NULL;
    CHECK(loom_tokenizer_from_model(m, &t) == LOOM_OK && t);
    CHECK(t && loom_tokenizer_vocab_size(t) == loom_model_get_info(m).vocab_size);
    loom_chat_template *ct = NULL;
    CHECK(loom_chat_template_from_model(m, &ct) == LOOM_OK && strcmp(loom_chat_template_name(ct), "chatml") == 0);
    loom_chat_msg msgs[] = {{"user", "Hi"}};
    char *text = NULL;
    CHECK(loom_chat_render(ct, msgs, 1, 1, &text) == LOOM_OK);
    /* SmolLM2's template carries a default system message */
    CHECK(text && strstr(text, "<|im_start|>system\n") && strstr(text, "<|im_start|>user\nHi<|im_end|>\n") &&
          strcmp(text + strlen(text) - 22, "<|im_start|>assistant\n") == 0);
    free(text);
    loom_chat_template_free(ct);
    loom_tokenizer_free(t);
    loom_model_free(m);
}

int main(void) {
    char mpath[512], tpath[512];
    shared_path("models/stories260K/stories260K.bin", mpath, sizeof mpath);
    shared_path("models/stories260K/tok512.bin", tpath, sizeof tpath);
    CHECK_NEED_FILE(mpath, "the shared models");
    loom_model_params mp = loom_model_default_params();
    mp.n_threads = 2;
    mp.n_ctx = 64;
    loom_model *m = NULL;
    CHECK(loom_model_load(mpath, &mp, &m) == LOOM_OK);
    if (!m) return TEST_SUMMARY();
    RUN_WITH(test_describe, m);
    RUN_WITH(test_tokenizer, m, tpath);
    RUN_WITH(test_kv, m);
    RUN_WITH(test_profile, m);
    loom_model_free(m);

    const char *dir = getenv("LOOM_MODELS_DIR"), *home = getenv("HOME");
    char gguf[768];
    if (dir && *dir) snprintf(gguf, sizeof gguf, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    else snprintf(gguf, sizeof gguf, "%s/.cache/loom/models/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : ".");
    CHECK_NEED_FILE(gguf, "the default models: scripts/fetch-models.sh");
    RUN_WITH(test_gguf, gguf);
    return TEST_SUMMARY();
}
