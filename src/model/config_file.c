/* Model configurations read from files for `loom plan --config FILE`: a
 * Hugging Face config.json (or a folder holding one), Llama or BERT, or the
 * metadata of a Llama GGUF file. Only shapes are read, never weights. */
#include "model/configs.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/status.h"
#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/llama_st.h"

/* What a file starts with: 'G' for the GGUF magic, '{' for a JSON object
 * (after white space), 0 for anything else. */
static int file_kind(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return '{';  /* the JSON reader reports why it cannot be opened */
    char m[4] = {0};
    int kind = fread(m, 1, 4, f) == 4 && memcmp(m, "GGUF", 4) == 0 ? 'G' : 0;
    if (!kind) {
        rewind(f);
        int c;
        while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r') {}
        kind = c == '{' ? '{' : 0;
    }
    fclose(f);
    return kind;
}

static loom_status from_gguf(const char *path, loom_file_config *out) {
    loom_gguf *g;
    LOOM_TRY(loom_gguf_open(path, &g));
    loom_status s = loom_llama_config_from_gguf(g, &out->nc.cfg);
    loom_gguf_close(g);
    LOOM_TRY(s);
    out->nc.arch = LOOM_ARCH_LLAMA;
    snprintf(out->source, sizeof out->source, "GGUF metadata");
    return LOOM_OK;
}

static loom_status from_hf(const char *path, loom_file_config *out) {
    loom_hf_config h;
    LOOM_TRY(loom_hf_config_load(path, &h));
    int bert = strcmp(h.model_type, "bert") == 0 || strncmp(h.architecture, "Bert", 4) == 0;
    if (!bert) {
        LOOM_TRY(loom_llama_config_from_hf(&h, path, &out->nc.cfg));
        out->nc.arch = LOOM_ARCH_LLAMA;
    } else {
        /* the BERT planner reads these fields (configs.h) */
        LOOM_RETURN_IF(h.head_dim * h.num_attention_heads != h.hidden_size, LOOM_ERR_UNSUPPORTED,
                       "'%s': head_dim %d x %d heads differs from hidden_size %d", path, h.head_dim,
                       h.num_attention_heads, h.hidden_size);
        out->nc.arch = LOOM_ARCH_BERT;
        out->nc.cfg = (loom_llama_config){.dim = h.hidden_size, .hidden_dim = h.intermediate_size,
                                          .n_layers = h.num_hidden_layers, .n_heads = h.num_attention_heads,
                                          .n_kv_heads = h.num_attention_heads, .vocab_size = h.vocab_size,
                                          .seq_len = h.max_position_embeddings, .head_dim = h.head_dim,
                                          .rms_eps = h.layer_norm_eps};
    }
    snprintf(out->source, sizeof out->source, "Hugging Face config.json, model_type '%s'",
             h.model_type[0] ? h.model_type : "?");
    return LOOM_OK;
}

loom_status loom_config_from_file(const char *path, loom_file_config *out) {
    LOOM_RETURN_IF(!path || !out, LOOM_ERR_INVALID_ARG, "config_from_file: NULL argument");
    memset(out, 0, sizeof *out);
    struct stat sb;
    LOOM_RETURN_IF(stat(path, &sb) != 0, LOOM_ERR_IO, "'%s': no such file or folder", path);
    snprintf(out->name, sizeof out->name, "%s", path);
    out->nc.name = out->name;
    out->nc.source = out->source;
    if (S_ISDIR(sb.st_mode)) return from_hf(path, out);  /* its config.json */
    int kind = file_kind(path);
    LOOM_RETURN_IF(!kind, LOOM_ERR_FORMAT, "'%s' is neither a GGUF file (no \"GGUF\" magic) nor a Hugging Face "
                   "config.json (no JSON object)", path);
    return kind == 'G' ? from_gguf(path, out) : from_hf(path, out);
}
