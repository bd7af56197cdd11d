/* safetensors reader and config.json parser: valid files (single, folder,
 * sharded) and every kind of bad input (clear error, no crash). */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/hf_config.h"
#include "model/llama_st.h"
#include "model/safetensors.h"

/* 8-byte length + header (padded with spaces to a multiple of 8) + data. */
static unsigned char *image(const char *hdr, const void *data, size_t dsize, size_t *size) {
    size_t hn = strlen(hdr), pad = (8 - hn % 8) % 8;
    *size = 8 + hn + pad + dsize;
    unsigned char *p = malloc(*size);
    uint64_t n = hn + pad;
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(n >> (8 * i));
    memcpy(p + 8, hdr, hn);
    memset(p + 8 + hn, ' ', pad);
    if (dsize) memcpy(p + 8 + hn + pad, data, dsize);
    return p;
}

static const char *GOOD =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
    "\"ids\":{\"dtype\":\"I64\",\"shape\":[1,2],\"data_offsets\":[32,48]},"
    "\"s\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[48,50]}}";

static void good_data(unsigned char *d) {
    float w[6] = {1, 2, 3, 4, 5, 6};
    memcpy(d, w, 24);
    uint16_t b[4] = {loom_f32_to_bf16(0.5f), loom_f32_to_bf16(-1.0f), loom_f32_to_bf16(2.0f), 0};
    memcpy(d + 24, b, 8);
    int64_t ids[2] = {7, 9};
    memcpy(d + 32, ids, 16);
    uint16_t h = loom_f32_to_f16(1.5f);
    memcpy(d + 48, &h, 2);
}

static void test_valid(void) {
    unsigned char d[50];
    good_data(d);
    size_t size;
    unsigned char *img = image(GOOD, d, sizeof d, &size);
    loom_safetensors *st = NULL;
    CHECK(loom_safetensors_open_memory(img, size, "good", &st) == LOOM_OK);
    CHECK(loom_safetensors_n_tensors(st) == 4);
    loom_tensor t;
    CHECK(loom_safetensors_get(st, "w", &t) == LOOM_OK);
    CHECK(t.dtype == LOOM_F32 && t.ndim == 2 && t.shape[0] == 2 && t.shape[1] == 3);
    CHECK(((const float *)t.data)[5] == 6.0f);
    CHECK(loom_safetensors_get(st, "b", &t) == LOOM_OK);
    CHECK(t.dtype == LOOM_BF16 && t.shape[0] == 4);
    CHECK(loom_bf16_to_f32(((const uint16_t *)t.data)[1]) == -1.0f);
    CHECK(loom_safetensors_get(st, "s", &t) == LOOM_OK);
    CHECK(t.dtype == LOOM_F16 && t.ndim == 1 && t.shape[0] == 1);
    CHECK(loom_f16_to_f32(*(const uint16_t *)t.data) == 1.5f);
    /* I64 is listed, but not computable: the error names the tensor */
    CHECK(loom_safetensors_get(st, "ids", &t) == LOOM_ERR_UNSUPPORTED);
    CHECK(strstr(loom_last_error(), "'ids'") && strstr(loom_last_error(), "I64"));
    loom_st_tensor_info info;
    int64_t i = loom_safetensors_find(st, "ids");
    CHECK(i >= 0 && loom_safetensors_info_at(st, i, &info) == LOOM_OK);
    CHECK(!info.dtype_ok && strcmp(info.dtype_str, "I64") == 0 && info.nbytes == 16);
    CHECK(loom_safetensors_get(st, "missing", &t) == LOOM_ERR_FORMAT);
    CHECK(strstr(loom_last_error(), "missing") != NULL);
    CHECK(loom_safetensors_find(st, "__metadata__") < 0);
    loom_safetensors_close(st);
    free(img);
}

/* Each bad header must fail with LOOM_ERR_FORMAT (or UNSUPPORTED) and a message containing want. */
static void expect_bad(const char *hdr, size_t dsize, loom_status want_st, const char *want) {
    unsigned char d[64] = {0};
    size_t size;
    unsigned char *img = image(hdr, d, dsize, &size);
    loom_safetensors *st = (loom_safetensors *)1;
    loom_status s = loom_safetensors_open_memory(img, size, "bad", &st);
    CHECK_MSG(s == want_st, "%s: got %s (%s)", hdr, loom_status_str(s), loom_last_error());
    CHECK(st == NULL);
    CHECK_MSG(strstr(loom_last_error(), want) != NULL, "'%s' not in '%s'", want, loom_last_error());
    free(img);
}

static void test_bad_headers(void) {
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 20, LOOM_ERR_FORMAT,
               "outside the data section");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24, LOOM_ERR_FORMAT,
               "need 24");
    expect_bad("{\"w\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, LOOM_ERR_FORMAT,
               "unknown dtype 'Q4'");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, LOOM_ERR_FORMAT,
               "shape entry 0");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,8]}}", 8,
               LOOM_ERR_UNSUPPORTED, "5 dims");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, LOOM_ERR_FORMAT,
               "outside");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, LOOM_ERR_FORMAT, "data_offsets");
    expect_bad("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, LOOM_ERR_FORMAT, "dtype");
    expect_bad("{\"w\":[1,2]}", 8, LOOM_ERR_FORMAT, "not a JSON object");
    expect_bad("[1,2]", 8, LOOM_ERR_FORMAT, "not a JSON object");
    expect_bad("{\"w\":{\"dtype\":\"F32\",", 8, LOOM_ERR_FORMAT, "not valid JSON");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 16, LOOM_ERR_FORMAT,
               "overlap");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, LOOM_ERR_FORMAT,
               "appears twice");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
               LOOM_ERR_FORMAT, "'w'");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0.5,8]}}", 8, LOOM_ERR_FORMAT,
               "data_offsets");
}

static void test_truncated(void) {
    unsigned char d[50];
    good_data(d);
    size_t size;
    unsigned char *img = image(GOOD, d, sizeof d, &size);
    loom_safetensors *st;
    /* every prefix fails cleanly */
    for (size_t n = 0; n < size; n++) {
        loom_status s = loom_safetensors_open_memory(img, n, "cut", &st);
        CHECK_MSG(s == LOOM_ERR_FORMAT, "prefix %zu: %s", n, loom_status_str(s));
    }
    /* a header length far beyond the file */
    img[5] = 0x7f;
    CHECK(loom_safetensors_open_memory(img, size, "long", &st) == LOOM_ERR_FORMAT);
    CHECK(strstr(loom_last_error(), "header length") != NULL);
    free(img);
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(p, 1, n, f) == n);
    fclose(f);
}

static void test_files_and_shards(void) {
    char dir[] = "/tmp/loom_st_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    unsigned char d[50];
    good_data(d);
    size_t size;
    unsigned char *img = image(GOOD, d, sizeof d, &size);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_file(path, img, size);
    loom_safetensors *st;
    CHECK(loom_safetensors_open(path, &st) == LOOM_OK);
    loom_safetensors_close(st);
    CHECK(loom_safetensors_open(dir, &st) == LOOM_OK);  /* folder */
    CHECK(loom_safetensors_n_tensors(st) == 4);
    loom_safetensors_close(st);
    unlink(path);
    free(img);
    /* two shards + index */
    float a[2] = {1, 2}, b[3] = {3, 4, 5};
    img = image("{\"x.a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", a, 8, &size);
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    write_file(path, img, size);
    free(img);
    img = image("{\"x.b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}", b, 12, &size);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    write_file(path, img, size);
    free(img);
    const char *idx = "{\"metadata\":{},\"weight_map\":{\"x.a\":\"model-00001-of-00002.safetensors\","
                      "\"x.b\":\"model-00002-of-00002.safetensors\"}}";
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_file(path, idx, strlen(idx));
    CHECK(loom_safetensors_open(dir, &st) == LOOM_OK);
    loom_tensor t;
    CHECK(loom_safetensors_get(st, "x.b", &t) == LOOM_OK && ((const float *)t.data)[2] == 5.0f);
    CHECK(loom_safetensors_get(st, "x.a", &t) == LOOM_OK && ((const float *)t.data)[1] == 2.0f);
    loom_safetensors_close(st);
    /* an index naming a tensor its shard lacks, and a shard outside the folder */
    const char *bad1 = "{\"weight_map\":{\"x.c\":\"model-00001-of-00002.safetensors\"}}";
    write_file(path, bad1, strlen(bad1));
    CHECK(loom_safetensors_open(path, &st) == LOOM_ERR_FORMAT);
    CHECK(strstr(loom_last_error(), "x.c") != NULL);
    const char *bad2 = "{\"weight_map\":{\"x.a\":\"../evil.safetensors\"}}";
    write_file(path, bad2, strlen(bad2));
    CHECK(loom_safetensors_open(path, &st) == LOOM_ERR_FORMAT);
    const char *bad3 = "{\"weight_map\":{\"x.a\":\"absent.safetensors\"}}";
    write_file(path, bad3, strlen(bad3));
    CHECK(loom_safetensors_open(path, &st) == LOOM_ERR_IO);
    unlink(path);
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    unlink(path);
    CHECK(loom_safetensors_open(dir, &st) == LOOM_ERR_IO);  /* empty folder */
    CHECK(strstr(loom_last_error(), "model.safetensors") != NULL);
    rmdir(dir);
    CHECK(loom_safetensors_open("/nonexistent/x.safetensors", &st) == LOOM_ERR_IO);
}

static void test_hf_config(void) {
    const char *llama = "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\","
                        "\"hidden_size\":576,\"intermediate_size\":1536,\"num_hidden_layers\":30,"
                        "\"num_attention_heads\":9,\"num_key_value_heads\":3,\"rms_norm_eps\":1e-05,"
                        "\"rope_theta\":100000,\"rope_scaling\":null,\"tie_word_embeddings\":true,"
                        "\"vocab_size\":49152,\"max_position_embeddings\":8192,\"bos_token_id\":1,"
                        "\"eos_token_id\":[2, 3]}";
    loom_hf_config c;
    CHECK(loom_hf_config_parse(llama, strlen(llama), "llama", &c) == LOOM_OK);
    CHECK(strcmp(c.model_type, "llama") == 0 && strcmp(c.architecture, "LlamaForCausalLM") == 0);
    CHECK(c.hidden_size == 576 && c.num_key_value_heads == 3 && c.head_dim == 64);
    CHECK(c.tie_word_embeddings == 1 && c.vocab_size == 49152 && c.max_position_embeddings == 8192);
    CHECK(c.rope_theta == 100000.0f && c.rms_norm_eps == 1e-5f && c.rope_scaling_type[0] == '\0');
    CHECK(c.bos_token_id == 1 && c.eos_token_id == 2 && strcmp(c.hidden_act, "silu") == 0);
    const char *bert = "{\"model_type\":\"bert\",\"hidden_size\":384,\"intermediate_size\":1536,"
                       "\"num_hidden_layers\":6,\"num_attention_heads\":12,\"vocab_size\":30522,"
                       "\"hidden_act\":\"gelu\",\"layer_norm_eps\":1e-12,\"type_vocab_size\":2}";
    CHECK(loom_hf_config_parse(bert, strlen(bert), "bert", &c) == LOOM_OK);
    CHECK(c.num_key_value_heads == 12 && c.max_position_embeddings == 512 && c.head_dim == 32);
    CHECK(c.layer_norm_eps == 1e-12f && c.type_vocab_size == 2);
    const char *scaled = "{\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
                         "\"num_attention_heads\":4,\"vocab_size\":100,"
                         "\"rope_scaling\":{\"type\":\"linear\",\"factor\":4.0}}";
    CHECK(loom_hf_config_parse(scaled, strlen(scaled), "s", &c) == LOOM_OK);
    CHECK(strcmp(c.rope_scaling_type, "linear") == 0 && c.rope_scaling_factor == 4.0f);
    struct { const char *json, *want; } bad[] = {
        {"{\"hidden_size\":64}", "intermediate_size"},
        {"{\"hidden_size\":\"64\",\"intermediate_size\":1,\"num_hidden_layers\":1,"
         "\"num_attention_heads\":1,\"vocab_size\":1}", "hidden_size"},
        {"{\"hidden_size\":64,\"intermediate_size\":1,\"num_hidden_layers\":0,"
         "\"num_attention_heads\":1,\"vocab_size\":1}", "num_hidden_layers"},
        {"{\"hidden_size\":64,\"intermediate_size\":1,\"num_hidden_layers\":1,"
         "\"num_attention_heads\":4,\"num_key_value_heads\":3,\"vocab_size\":1}", "multiple"},
        {"{\"hidden_size\":64,\"intermediate_size\":1,\"num_hidden_layers\":1,"
         "\"num_attention_heads\":4,\"vocab_size\":1,\"rms_norm_eps\":-1}", "rms_norm_eps"},
        /* positive as a double, 0 as a float */
        {"{\"hidden_size\":64,\"intermediate_size\":1,\"num_hidden_layers\":1,"
         "\"num_attention_heads\":4,\"vocab_size\":1,\"rope_theta\":1e-60}", "rope_theta"},
        {"{\"hidden_size\":64,\"intermediate_size\":1,\"num_hidden_layers\":1,"
         "\"num_attention_heads\":4,\"vocab_size\":1,\"rope_scaling\":{\"factor\":2}}", "rope_type"},
        {"{\"hidden_size\":64,", "not valid JSON"},
        {"[]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(loom_hf_config_parse(bad[i].json, strlen(bad[i].json), "bad", &c) == LOOM_ERR_FORMAT,
                  "%s", bad[i].json);
        CHECK_MSG(strstr(loom_last_error(), bad[i].want) != NULL, "'%s' not in '%s'", bad[i].want,
                  loom_last_error());
    }
    CHECK(loom_hf_config_load("/nonexistent/config.json", &c) == LOOM_ERR_IO);
}

/* transformers 5's rope_parameters: theta, type and scaling in one object. */
#define TINY "\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4," \
             "\"vocab_size\":100"
static void test_hf_rope_parameters(void) {
    loom_hf_config c;
    const char *p5 = "{" TINY ",\"rope_parameters\":{\"rope_theta\":1000000.0,\"rope_type\":\"default\"}}";
    CHECK(loom_hf_config_parse(p5, strlen(p5), "p5", &c) == LOOM_OK);
    CHECK(c.rope_theta == 1e6f && strcmp(c.rope_scaling_type, "default") == 0 && c.rope_scaling_factor == 1.0f);
    const char *both = "{" TINY ",\"rope_theta\":5e5,\"rope_parameters\":{\"rope_theta\":500000}}";
    CHECK(loom_hf_config_parse(both, strlen(both), "both", &c) == LOOM_OK);
    CHECK(c.rope_theta == 5e5f && strcmp(c.rope_scaling_type, "default") == 0);
    const char *lin = "{" TINY ",\"rope_parameters\":{\"rope_type\":\"linear\",\"factor\":2,\"rope_theta\":1e4}}";
    CHECK(loom_hf_config_parse(lin, strlen(lin), "lin", &c) == LOOM_OK);
    CHECK(strcmp(c.rope_scaling_type, "linear") == 0 && c.rope_scaling_factor == 2.0f && c.rope_theta == 1e4f);
    const char *differ = "{" TINY ",\"rope_theta\":10000,\"rope_parameters\":{\"rope_theta\":1e6}}";
    CHECK(loom_hf_config_parse(differ, strlen(differ), "differ", &c) == LOOM_ERR_FORMAT);
    CHECK_MSG(strstr(loom_last_error(), "differ") != NULL, "%s", loom_last_error());
    /* Gemma 3's per layer type: the full layers' object is the model's, the sliding layers' base apart */
    const char *per_layer = "{" TINY ",\"rope_parameters\":{\"full_attention\":{\"rope_theta\":1e6,\"rope_type\":"
                            "\"linear\",\"factor\":8},\"sliding_attention\":{\"rope_theta\":1e4,\"rope_type\":\"default\"}}}";
    CHECK(loom_hf_config_parse(per_layer, strlen(per_layer), "gemma3", &c) == LOOM_OK);
    CHECK(c.rope_theta == 1e6f && c.rope_local_theta == 1e4f && strcmp(c.rope_scaling_type, "linear") == 0 &&
          c.rope_scaling_factor == 8.0f);
    const char *other_type = "{" TINY ",\"rope_parameters\":{\"chunked_attention\":{\"rope_theta\":1e6}}}";
    CHECK(loom_hf_config_parse(other_type, strlen(other_type), "x", &c) == LOOM_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(loom_last_error(), "chunked_attention") != NULL, "%s", loom_last_error());
    const char *slide_lin = "{" TINY ",\"rope_parameters\":{\"full_attention\":{\"rope_theta\":1e6},"
                            "\"sliding_attention\":{\"rope_theta\":1e4,\"rope_type\":\"linear\",\"factor\":2}}}";
    CHECK(loom_hf_config_parse(slide_lin, strlen(slide_lin), "x", &c) == LOOM_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(loom_last_error(), "sliding_attention.rope_type") != NULL, "%s", loom_last_error());

    /* what the Llama-family loader makes of them */
    loom_llama_config lc;
    struct { const char *json; loom_status want; const char *msg; int bias, norm, head_dim; float theta; } cases[] = {
        {"{\"model_type\":\"qwen2\"," TINY ",\"rope_parameters\":{\"rope_theta\":1e6,\"rope_type\":\"default\"}}",
         LOOM_OK, NULL, 1, 0, 16, 1e6f},
        {"{\"architectures\":[\"Qwen3ForCausalLM\"]," TINY ",\"head_dim\":32}", LOOM_OK, NULL, 0, 1, 32, 1e4f},
        {"{\"model_type\":\"llama\"," TINY ",\"rope_scaling\":{\"rope_type\":\"default\"}}", LOOM_OK, NULL, 0, 0,
         16, 1e4f},
        {"{\"model_type\":\"qwen3\"," TINY ",\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":4}}",
         LOOM_ERR_UNSUPPORTED, "rope type 'yarn'", 0, 0, 0, 0},
        {"{\"model_type\":\"llama\"," TINY ",\"rope_parameters\":{\"rope_type\":\"llama3\",\"factor\":8}}",
         LOOM_ERR_UNSUPPORTED, "rope type 'llama3'", 0, 0, 0, 0},
        {"{\"model_type\":\"llama\"," TINY ",\"attention_bias\":true}", LOOM_ERR_UNSUPPORTED, "attention_bias", 0, 0,
         0, 0},
        {"{\"model_type\":\"qwen2\"," TINY ",\"use_sliding_window\":true}", LOOM_ERR_UNSUPPORTED,
         "use_sliding_window", 0, 0, 0, 0},
        {"{\"model_type\":\"gemma\"," TINY "}", LOOM_ERR_UNSUPPORTED, "model_type 'gemma'", 0, 0, 0, 0},
        {"{\"model_type\":\"gemma2\"," TINY ",\"hidden_activation\":\"relu\"}", LOOM_ERR_UNSUPPORTED,
         "hidden_activation 'relu'", 0, 0, 0, 0},
    };
    /* Gemma 2: the scale from query_pre_attn_scalar, the soft-caps, every other layer sliding (no
     * layer_types: Gemma 2's rule); Gemma 3: layer_types as a pattern, its own RoPE for sliding layers */
    const char *g2 = "{\"model_type\":\"gemma2\"," TINY ",\"hidden_activation\":\"gelu_pytorch_tanh\","
                     "\"query_pre_attn_scalar\":144,\"attn_logit_softcapping\":50.0,\"final_logit_softcapping\":30.0,"
                     "\"sliding_window\":4096}";
    CHECK(loom_hf_config_parse(g2, strlen(g2), "gemma2", &c) == LOOM_OK);
    CHECK(loom_llama_config_from_hf(&c, "gemma2", &lc) == LOOM_OK && lc.family == LOOM_FAMILY_GEMMA2 &&
          fabsf(lc.attn_scale - 1.0f / 12.0f) < 1e-7f && lc.attn_softcap == 50.0f && lc.final_softcap == 30.0f &&
          lc.swa_pattern == 2 && loom_llama_layer_window(&lc, 0) == 4096 && loom_llama_layer_window(&lc, 1) == 0 &&
          !lc.qk_norm && lc.rope_theta_swa == 0.0f);
    const char *g3 = "{\"architectures\":[\"Gemma3ForCausalLM\"]," TINY ",\"sliding_window\":512,"
                     "\"layer_types\":[\"sliding_attention\",\"full_attention\"],\"rope_local_base_freq\":1e4,"
                     "\"rope_theta\":1e6,\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":8}}";
    CHECK(loom_hf_config_parse(g3, strlen(g3), "gemma3", &c) == LOOM_OK && c.swa_pattern == 2);
    CHECK(loom_llama_config_from_hf(&c, "gemma3", &lc) == LOOM_OK && lc.family == LOOM_FAMILY_GEMMA3 && lc.qk_norm &&
          lc.rope_theta_swa == 1e4f && lc.rope_theta == 1e6f && lc.rope_freq_scale == 0.125f &&
          loom_llama_layer_window(&lc, 0) == 512 && loom_llama_layer_window(&lc, 1) == 0 && lc.attn_scale == 0.0f);
    const struct { const char *json; loom_status st; const char *msg; } gbad[] = {
        {"{\"model_type\":\"gemma3_text\"," TINY ",\"layer_types\":[\"full_attention\",\"sliding_attention\"]}",
         LOOM_ERR_UNSUPPORTED, "not a repeating pattern"},
        {"{\"model_type\":\"gemma3_text\"," TINY ",\"layer_types\":[\"sliding_attention\"]}", LOOM_ERR_FORMAT,
         "one type for each of the 2 layers"},
        {"{\"model_type\":\"gemma3_text\"," TINY ",\"layer_types\":[\"sliding_attention\",\"chunked\"]}",
         LOOM_ERR_UNSUPPORTED, "layer_types[1]"},
        {"{\"model_type\":\"gemma2\"," TINY ",\"query_pre_attn_scalar\":-1}", LOOM_ERR_FORMAT, "query_pre_attn_scalar"},
        {"{\"model_type\":\"gemma2\"," TINY ",\"attn_logit_softcapping\":\"x\"}", LOOM_ERR_FORMAT,
         "attn_logit_softcapping"},
        {"{\"model_type\":\"gemma2\"," TINY ",\"sliding_window_pattern\":0}", LOOM_ERR_FORMAT,
         "sliding_window_pattern"},
    };
    for (size_t i = 0; i < sizeof gbad / sizeof gbad[0]; i++) {
        loom_status st = loom_hf_config_parse(gbad[i].json, strlen(gbad[i].json), "cfg", &c);
        CHECK_MSG(st == gbad[i].st && strstr(loom_last_error(), gbad[i].msg) != NULL, "%s: %d '%s'", gbad[i].json,
                  (int)st, loom_last_error());
    }
    /* Mistral's window: kept as the model's sliding window, the context is the model's */
    const char *mistral = "{\"model_type\":\"mistral\"," TINY ",\"max_position_embeddings\":32768,"
                          "\"sliding_window\":4096}";
    CHECK(loom_hf_config_parse(mistral, strlen(mistral), "mistral", &c) == LOOM_OK && c.sliding_window == 4096);
    CHECK(loom_llama_config_from_hf(&c, "mistral", &lc) == LOOM_OK && lc.seq_len == 32768 && lc.sliding_window == 4096);
    /* Phi-3: merged weights, its window, a partial rotation (Phi-4-mini's form, top level or in
     * rope_parameters) as int(head_dim * factor) dims */
    const char *phi3 = "{\"model_type\":\"phi3\"," TINY ",\"sliding_window\":2047,\"partial_rotary_factor\":0.75}";
    CHECK(loom_hf_config_parse(phi3, strlen(phi3), "phi3", &c) == LOOM_OK);
    CHECK(loom_llama_config_from_hf(&c, "phi3", &lc) == LOOM_OK && lc.merged && lc.sliding_window == 2047 &&
          lc.n_rot == 12 && lc.family == LOOM_FAMILY_PHI3);
    const char *phi3p = "{\"model_type\":\"phi3\"," TINY ",\"rope_parameters\":{\"rope_theta\":1e4,"
                        "\"partial_rotary_factor\":0.5}}";
    CHECK(loom_hf_config_parse(phi3p, strlen(phi3p), "phi3", &c) == LOOM_OK);
    CHECK(loom_llama_config_from_hf(&c, "phi3", &lc) == LOOM_OK && lc.n_rot == 8 && lc.sliding_window == 0);
    const char *odd = "{\"model_type\":\"phi3\"," TINY ",\"partial_rotary_factor\":0.35}";  /* 5 dims: odd */
    CHECK(loom_hf_config_parse(odd, strlen(odd), "phi3", &c) == LOOM_OK);
    CHECK(loom_llama_config_from_hf(&c, "odd", &lc) == LOOM_ERR_FORMAT && strstr(loom_last_error(), "rotated dims"));
    const char *no_window = "{\"model_type\":\"mistral\"," TINY ",\"sliding_window\":null}";
    CHECK(loom_hf_config_parse(no_window, strlen(no_window), "m", &c) == LOOM_OK && c.sliding_window == 0);
    CHECK(loom_llama_config_from_hf(&c, "m", &lc) == LOOM_OK && lc.seq_len == 2048 && lc.sliding_window == 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_MSG(loom_hf_config_parse(cases[i].json, strlen(cases[i].json), "cfg", &c) == LOOM_OK, "%s",
                  loom_last_error());
        loom_status s = loom_llama_config_from_hf(&c, "cfg", &lc);
        CHECK_MSG(s == cases[i].want, "%s: status %d: %s", cases[i].json, (int)s, loom_last_error());
        if (cases[i].msg)
            CHECK_MSG(strstr(loom_last_error(), cases[i].msg) != NULL, "'%s' not in '%s'", cases[i].msg,
                      loom_last_error());
        else if (s == LOOM_OK)
            CHECK_MSG(lc.qkv_bias == cases[i].bias && lc.qk_norm == cases[i].norm && lc.head_dim == cases[i].head_dim &&
                      lc.rope_theta == cases[i].theta && lc.rope_mode == LOOM_ROPE_HALF, "%s", cases[i].json);
    }
}
#undef TINY

int main(void) {
    RUN_TEST(test_valid);
    RUN_TEST(test_bad_headers);
    RUN_TEST(test_truncated);
    RUN_TEST(test_files_and_shards);
    RUN_TEST(test_hf_config);
    RUN_TEST(test_hf_rope_parameters);
    return TEST_SUMMARY();
}
