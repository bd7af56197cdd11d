/* libFuzzer target: the Hugging Face file parsers on arbitrary bytes. The
 * first byte picks the parser (mod 3): 0 a safetensors image (every tensor
 * that opens is viewed and read), 1 config.json, 2 tokenizer.json (loaded
 * as a tokenizer and fed a fixed text). */
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
        for (uint64_t b = 0; b < info.nbytes; b++) sum += ((const uint8_t *)info.data)[b];
        loom_tensor t;
        if (loom_safetensors_get(st, info.name, &t) == LOOM_OK && loom_tensor_nbytes(&t) != info.nbytes &&
            info.ndim > 0)
            abort();  /* the view must cover exactly the tensor's bytes */
    }
    (void)sum;
    loom_safetensors_close(st);
}

static void config(const uint8_t *p, size_t n) {
    loom_hf_config c;
    loom_hf_config_parse((const char *)p, n, "fuzz.json", &c);
}

static void tokenizer(const uint8_t *p, size_t n) {
    loom_tokenizer *t = NULL;
    if (loom_tokenizer_load_hf_json_memory((const char *)p, n, NULL, 0, "fuzz.json", &t) != LOOM_OK) return;
    static const char text[] = "Hello, world! caf\xc3\xa9 \xe4\xb8\xad 123";
    int32_t ids[256];
    int n_ids = 0;
    if (loom_tokenizer_encode_ex(t, text, sizeof text - 1, LOOM_TOK_BOS | LOOM_TOK_EOS, ids, 256, &n_ids) ==
        LOOM_OK)
        for (int i = 0; i < n_ids; i++) loom_tokenizer_decode(t, i ? ids[i - 1] : -1, ids[i], NULL);
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
