/* Published shapes of the models `loom plan` knows by name. */
#include "model/configs.h"

#include <stdio.h>
#include <string.h>

#include "base/status.h"

#define LLAMA(d, hid, L, H, KV, V, S, theta, shared)                                         \
    {.dim = d, .hidden_dim = hid, .n_layers = L, .n_heads = H, .n_kv_heads = KV,             \
     .vocab_size = V, .seq_len = S, .head_dim = (d) / (H), .rope_theta = theta,              \
     .rms_eps = 1e-5f, .rope_mode = LOOM_ROPE_HALF, .shared_classifier = shared}

static const loom_named_config table[] = {
    {"llama2-7b", LOOM_ARCH_LLAMA, "meta-llama/Llama-2-7b-hf config.json",
     LLAMA(4096, 11008, 32, 32, 32, 32000, 4096, 10000.0f, 0)},
    {"llama2-13b", LOOM_ARCH_LLAMA, "meta-llama/Llama-2-13b-hf config.json",
     LLAMA(5120, 13824, 40, 40, 40, 32000, 4096, 10000.0f, 0)},
    {"llama2-70b", LOOM_ARCH_LLAMA, "meta-llama/Llama-2-70b-hf config.json (GQA, 8 kv heads)",
     LLAMA(8192, 28672, 80, 64, 8, 32000, 4096, 10000.0f, 0)},
    {"tinyllama", LOOM_ARCH_LLAMA, "TinyLlama/TinyLlama-1.1B-Chat-v1.0 config.json",
     LLAMA(2048, 5632, 22, 32, 4, 32000, 2048, 10000.0f, 0)},
    {"smollm2-135m", LOOM_ARCH_LLAMA, "HuggingFaceTB/SmolLM2-135M config.json (tied embeddings)",
     LLAMA(576, 1536, 30, 9, 3, 49152, 8192, 100000.0f, 1)},
    {"bert-base", LOOM_ARCH_BERT, "google-bert/bert-base-uncased config.json",
     {.dim = 768, .hidden_dim = 3072, .n_layers = 12, .n_heads = 12, .n_kv_heads = 12,
      .vocab_size = 30522, .seq_len = 512, .head_dim = 64, .rms_eps = 1e-12f}},
};

int loom_named_config_count(void) { return (int)(sizeof table / sizeof table[0]); }

const loom_named_config *loom_named_config_at(int i) {
    return i >= 0 && i < loom_named_config_count() ? &table[i] : NULL;
}

const loom_named_config *loom_named_config_find(const char *name) {
    char known[256] = "";
    for (int i = 0; i < loom_named_config_count(); i++) {
        if (name && strcmp(name, table[i].name) == 0) return &table[i];
        size_t len = strlen(known);
        snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", table[i].name);
    }
    loom_set_error(LOOM_ERR_INVALID_ARG, "unknown model config '%s' (known: %s; or the path of a "
                   "config.json, a folder holding one, or a GGUF file)", name ? name : "(null)", known);
    return NULL;
}
