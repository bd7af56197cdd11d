/* libFuzzer target: the Hugging Face file parsers on arbitrary bytes. The
 * first byte picks the parser (mod 3): 0 a safetensors image (every tensor
 * that opens is read and must lie inside the image, with a sane shape, be
 * found again by its name, and view exactly its bytes), 1 config.json (a
 * config that parses has positive sizes and finite positive constants),
 * 2 tokenizer.json (loaded as a tokenizer and fed a fixed text: ids inside
 * the vocabulary, every id decodes). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/hf_config.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void safetensors(const uint8_t *p, size_t n) {
    loom_safetensors *st = NULL;
    if (loom_safetensors_open_memory(p, n, "fuzz.safetensors", &st) != LOOM_OK) return;
    volatile unsigned sum = 0;
    for (int64_t i = 0; i < loom_safetensors_n_tensors(st); i++) {
        loom_st_tensor_info info;
        if (loom_safetensors_info_at(st, i, &info) != LOOM_OK) continue;
        const uint8_t *d = info.data;
        if (info.nbytes && (d < p || (size_t)(d - p) > n || info.nbytes > n - (size_t)(d - p)))
            abort(); /* outside the image */
        if (info.ndim < 0 || info.ndim > LOOM_ST_MAX_DIMS) abort();
        for (int k = 0; k < info.ndim; k++)
            if (info.shape[k] < 0) abort();
        if (loom_safetensors_find(st, info.name) != i) abort();
        for (uint64_t b = 0; b < info.nbytes; b++) sum += d[b];
        loom_tensor t;
        if (loom_safetensors_get(st, info.name, &t) == LOOM_OK &&
            (loom_tensor_nbytes(&t) != info.nbytes || t.data != info.data))
            abort();  /* the view must cover exactly the tensor's bytes */
    }
    (void)sum;
    loom_safetensors_close(st);
}

static void config(const uint8_t *p, size_t n) {
    loom_hf_config c;
    if (loom_hf_config_parse((const char *)p, n, "fuzz.json", &c) != LOOM_OK) return;
    if (c.hidden_size < 1 || c.intermediate_size < 1 || c.num_hidden_layers < 1 || c.num_attention_heads < 1 ||
        c.num_key_value_heads < 1 || c.num_attention_heads % c.num_key_value_heads || c.head_dim < 1 ||
        c.vocab_size < 1 || c.max_position_embeddings < 1)
        abort();
    const float f[] = {c.rms_norm_eps, c.layer_norm_eps, c.rope_theta, c.rope_scaling_factor};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!(f[i] > 0.0f) || !isfinite(f[i])) abort();
}

static void tokenizer(const uint8_t *p, size_t n) {
    loom_tokenizer *t = NULL;
    if (loom_tokenizer_load_hf_json_memory((const char *)p, n, NULL, 0, "fuzz.json", &t) != LOOM_OK) return;
    static const char text[] = "Hello, world! caf\xc3\xa9 \xe4\xb8\xad 123";
    int32_t ids[256];
    int n_ids = 0;
    if (loom_tokenizer_encode_ex(t, text, sizeof text - 1, LOOM_TOK_BOS | LOOM_TOK_EOS, ids, 256, &n_ids) ==
        LOOM_OK)
        for (int i = 0; i < n_ids; i++) {
            if (ids[i] < 0 || ids[i] >= loom_tokenizer_vocab_size(t)) abort();
            if (!loom_tokenizer_decode(t, i ? ids[i - 1] : -1, ids[i], NULL)) abort();
        }
    loom_tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    /* An exact-size copy: ASan then flags any read past the end. */
    size_t n = size - 1;
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) return 0;
    if (n) memcpy(copy, data + 1, n);
    switch (data[0] % 3) {
    case 0: safetensors(copy, n); break;
    case 1: config(copy, n); break;
    default: tokenizer(copy, n); break;
    }
    free(copy);
    return 0;
}
