/* Named model configurations (published shapes) for `loom plan`, which builds
 * graphs of models too large for this machine without their weights. */
#ifndef LOOM_MODEL_CONFIGS_H
#define LOOM_MODEL_CONFIGS_H

#include "model/llama.h"

typedef enum loom_arch { LOOM_ARCH_LLAMA = 0, LOOM_ARCH_BERT } loom_arch;

typedef struct loom_named_config {
    const char *name;        /* "llama2-7b", ... */
    loom_arch   arch;
    const char *source;      /* where the numbers come from */
    loom_llama_config cfg;   /* for BERT: dim, hidden_dim, n_layers, n_heads, vocab, seq_len */
} loom_named_config;

/* The entry called name, or NULL (loom_set_error lists the known names). */
const loom_named_config *loom_named_config_find(const char *name);
/* Number of entries and entry i (for listings). */
int loom_named_config_count(void);
const loom_named_config *loom_named_config_at(int i);

/* A configuration read from a file (`loom plan --config FILE`); nc's name and
 * source point into the buffers. */
typedef struct loom_file_config {
    loom_named_config nc;
    char name[256];    /* the path */
    char source[96];   /* "GGUF metadata", "Hugging Face config.json, model_type 'llama'" */
} loom_file_config;

/* Reads a Llama GGUF's metadata (a file starting with "GGUF") or a Hugging
 * Face config.json (a file or a folder holding one; Llama or BERT). Errors
 * name the file and the missing or impossible field, or the unsupported
 * architecture. */
loom_status loom_config_from_file(const char *path, loom_file_config *out);

#endif
