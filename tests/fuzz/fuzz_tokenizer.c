/* libFuzzer target: tokenizer loading and encoding.
 *
 * Input layout: the first byte modulo 3 selects the mode; the rest is
 *   0: a GGUF image, loaded as a tokenizer and, when that works, fed a few
 *      fixed strings;
 *   1: text, encoded (and decoded back) with each of the real vocabularies in
 *      LOOM_FUZZ_VOCAB_DIR (default ../shared/vocab), loaded once;
 *   2: a llama2.c tokenizer.bin (through a scratch file), loaded and fed the
 *      same fixed strings. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const vocab_names[] = {
    "ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-bert-bge.gguf",
};
#define N_VOCABS (sizeof vocab_names / sizeof vocab_names[0])
static loom_tokenizer *vocabs[N_VOCABS];
static int vocabs_loaded;

static void load_vocabs(void) {
    vocabs_loaded = 1;
    const char *dir = getenv("LOOM_FUZZ_VOCAB_DIR");
    if (!dir) dir = "../shared/vocab";
    for (size_t i = 0; i < N_VOCABS; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, vocab_names[i]);
        if (loom_tokenizer_load(path, &vocabs[i]) != LOOM_OK) vocabs[i] = NULL;
    }
}

static void exercise(const loom_tokenizer *t, const char *text, size_t len) {
    static int32_t ids[1 << 15];  /* more than -max_len=8192 bytes can need */
    int n = 0;
    int flags[] = {0, LOOM_TOK_BOS | LOOM_TOK_EOS | LOOM_TOK_PARSE_SPECIAL};
    for (int f = 0; f < 2; f++) {
        if (loom_tokenizer_encode_ex(t, text, len, flags[f], ids, 1 << 15, &n) != LOOM_OK) continue;
        for (int i = 0; i < n; i++) {
            size_t l;
            const char *p = loom_tokenizer_decode(t, i ? ids[i - 1] : -1, ids[i], &l);
            if (!p || ids[i] < 0 || ids[i] >= loom_tokenizer_vocab_size(t)) abort();
        }
    }
}

static void exercise_fixed(const loom_tokenizer *t) {
    static const char *texts[] = {"Hello world", " <s>x</s> \xe2\x96\x81 caf\xc3\xa9 123",
                                  "\t\n  ", "", "[CLS] a##b [UNK]"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) exercise(t, texts[i], strlen(texts[i]));
}

/* Loads data[0..size) through a per-process scratch file. */
static void llama2c_file(const uint8_t *data, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/loom_fuzz_tok_%d.bin", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return;
    size_t wrote = fwrite(data, 1, size, f);
    fclose(f);
    loom_tokenizer *t = NULL;
    if (wrote == size && loom_tokenizer_load(path, &t) == LOOM_OK) exercise_fixed(t);
    loom_tokenizer_free(t);
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data + 1, size - 1);
    if (data[0] % 3 == 0) {
        loom_tokenizer *t = NULL;
        if (loom_tokenizer_load_gguf_memory(copy, size - 1, "fuzz.gguf", &t) == LOOM_OK) exercise_fixed(t);
        loom_tokenizer_free(t);
    } else if (data[0] % 3 == 2) {
        llama2c_file(copy, size - 1);
    } else {
        if (!vocabs_loaded) load_vocabs();
        for (size_t i = 0; i < N_VOCABS; i++)
            if (vocabs[i]) exercise(vocabs[i], (const char *)copy, size - 1);
    }
    free(copy);
    return 0;
}
