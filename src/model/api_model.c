/* The public calls about a loaded model that look inside it (loom.h): its
 * description, its tokenizer and chat template, and KV cache control. Thin
 * wrappers: loading and running are model.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/status.h"
#include "model/chat.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"

const char *loom_model_format_name(loom_model_format f) {
    static const char *const names[] = {[LOOM_MODEL_LLAMA2C] = "llama2c", [LOOM_MODEL_GGUF] = "gguf",
                                        [LOOM_MODEL_SAFETENSORS] = "safetensors"};
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "unknown";
}

static void add_weight(const loom_tensor *t, loom_model_desc *d, double *by_type) {
    if (!t->data) return;
    size_t b = loom_tensor_nbytes(t);
    d->weight_bytes += b;
    d->n_params += loom_tensor_nelem(t);
    if ((unsigned)t->dtype < LOOM_DTYPE_COUNT) by_type[t->dtype] += (double)b;
}

loom_status loom_model_describe(const loom_model *m, loom_model_desc *out) {
    LOOM_RETURN_IF(!m || !out, LOOM_ERR_INVALID_ARG, "model_describe: NULL argument");
    memset(out, 0, sizeof *out);
    double by_type[LOOM_DTYPE_COUNT] = {0};
    loom_llama_weights *w = (loom_llama_weights *)&m->w;  /* the layer accessor is not const */
    out->format = m->format;
    add_weight(&w->tok_embd, out, by_type);
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int i = 0; i < LOOM_LLAMA_LAYER_TENSORS; i++)
            if (loom_llama_layer_has(&m->cfg, &loom_llama_layer_tensors[i]))
                add_weight(loom_llama_layer_field(&w->layers[l], &loom_llama_layer_tensors[i]), out, by_type);
    add_weight(&w->out_norm, out, by_type);
    if (w->output.data != w->tok_embd.data) add_weight(&w->output, out, by_type);
    int main_type = 0;
    for (int t = 1; t < LOOM_DTYPE_COUNT; t++)
        if (by_type[t] > by_type[main_type]) main_type = t;
    out->main_dtype = (loom_dtype)main_type;
    for (int t = 0; t < 32; t++) out->n_converted += w->n_converted[t];
    loom_llama_converted_summary(w, out->converted, sizeof out->converted);
    return LOOM_OK;
}

/* Zeroes bytes [from, to) of a cache mapping: whole pages are given back to
 * the system (they read as zeros again), the partial pages at the ends are
 * cleared. */
static void drop_bytes(unsigned char *base, size_t from, size_t to) {
    if (!base || from >= to) return;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t a = (from + page - 1) / page * page, b = to / page * page;
    /* the mapping starts on a page: offsets and addresses align alike */
    if (a < b && madvise(base + a, b - a, MADV_DONTNEED) == 0) {
        memset(base + from, 0, a - from);
        memset(base + b, 0, to - b);
    } else {
        memset(base + from, 0, to - from);
    }
}

loom_status loom_model_kv_rewind(loom_model *m, int pos) {
    LOOM_RETURN_IF(!m, LOOM_ERR_INVALID_ARG, "kv_rewind: NULL model");
    LOOM_RETURN_IF(pos < 0 || pos > m->n_ctx, LOOM_ERR_INVALID_ARG,
                   "kv_rewind: position %d outside the context of %d tokens", pos, m->n_ctx);
    const loom_llama_config *c = &m->cfg;
    /* per layer, positions are contiguous rows of n_kv_heads * head_dim elements
     * (and, for i8 caches, rows of n_kv_heads scales) */
    const size_t row = (size_t)c->n_kv_heads * (size_t)c->head_dim * loom_dtype_size(m->params.kv_dtype);
    const size_t srow = m->k_scale ? (size_t)c->n_kv_heads * sizeof(float) : 0;
    for (int l = 0; l < c->n_layers; l++) {
        size_t layer0 = (size_t)l * (size_t)m->n_ctx;
        drop_bytes(m->k_cache, (layer0 + (size_t)pos) * row, (layer0 + (size_t)m->n_ctx) * row);
        drop_bytes(m->v_cache, (layer0 + (size_t)pos) * row, (layer0 + (size_t)m->n_ctx) * row);
        drop_bytes((unsigned char *)m->k_scale, (layer0 + (size_t)pos) * srow, (layer0 + (size_t)m->n_ctx) * srow);
        drop_bytes((unsigned char *)m->v_scale, (layer0 + (size_t)pos) * srow, (layer0 + (size_t)m->n_ctx) * srow);
    }
    return LOOM_OK;
}

loom_status loom_model_kv_reset(loom_model *m) { return loom_model_kv_rewind(m, 0); }

size_t loom_model_arena_bytes(const loom_model *m) {
    if (!m || !m->exec || !m->exec->last) return 0;
    return loom_program_graph(m->exec->last)->arena_bytes;
}

loom_status loom_tokenizer_from_model(const loom_model *m, loom_tokenizer **out) {
    LOOM_RETURN_IF(!m || !out, LOOM_ERR_INVALID_ARG, "tokenizer_from_model: NULL argument");
    *out = NULL;
    switch (m->format) {
    case LOOM_MODEL_GGUF: return loom_tokenizer_from_gguf(m->gguf, out);
    case LOOM_MODEL_SAFETENSORS: {
        /* tokenizer.json in the folder opened, or beside the file or index opened */
        const char *path = loom_safetensors_path(m->st);
        const char *slash = strrchr(path, '/');
        struct stat sb;
        int dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
        char json[1200];
        int n = dir ? snprintf(json, sizeof json, "%s/tokenizer.json", path)
                    : snprintf(json, sizeof json, "%.*stokenizer.json", slash ? (int)(slash - path + 1) : 0, path);
        LOOM_RETURN_IF(n < 0 || (size_t)n >= sizeof json, LOOM_ERR_INVALID_ARG,
                       "tokenizer_from_model: the path '%s' is too long", path);
        return loom_tokenizer_load_hf_json(json, out);
    }
    default:
        return loom_set_error(LOOM_ERR_UNSUPPORTED, "a llama2.c checkpoint has no vocabulary of its own: "
                                                    "load its tokenizer.bin with loom_tokenizer_load");
    }
}

loom_status loom_chat_template_from_model(const loom_model *m, loom_chat_template **out) {
    LOOM_RETURN_IF(!m || !out, LOOM_ERR_INVALID_ARG, "chat_template_from_model: NULL argument");
    *out = NULL;
    loom_chat_template t;
    if (m->format == LOOM_MODEL_SAFETENSORS) {
        /* the folder opened, or the one holding the file or index opened */
        const char *path = loom_safetensors_path(m->st);
        const char *slash = strrchr(path, '/');
        struct stat sb;
        char dir[1200];
        int n = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)
                    ? snprintf(dir, sizeof dir, "%s", path)
                    : snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
        LOOM_RETURN_IF(n < 0 || (size_t)n >= sizeof dir, LOOM_ERR_INVALID_ARG,
                       "chat_template_from_model: the path '%s' is too long", path);
        LOOM_TRY(loom_chat_template_from_hf(dir, &t));
        return loom_chat_template_dup(&t, out);
    }
    LOOM_RETURN_IF(m->format != LOOM_MODEL_GGUF, LOOM_ERR_UNSUPPORTED,
                   "a %s model has no chat template; choose one by name (chatml, llama2, llama3, "
                   "mistral, phi3, qwen3 or gemma)", loom_model_format_name(m->format));
    LOOM_TRY(loom_chat_template_from_gguf(m->gguf, &t));
    return loom_chat_template_dup(&t, out);
}

loom_act_precision loom_model_act_precision(const loom_model *m) { return m->params.act_precision; }
