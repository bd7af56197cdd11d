/*
 * llama2.c checkpoints (karpathy/llama2.c), two layouts:
 *  - legacy: 7 int32 header (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
 *    vocab_size, seq_len; negative vocab_size = separate classifier), then f32
 *    weights: embedding, attn norms, wq, wk, wv, wo, ffn norms, w1, w2, w3,
 *    final norm, freq_cis real/imag (ignored: RoPE is computed), [classifier].
 *  - version 1: 256-byte header: magic "ak42" (0x616b3432), int32 version=1,
 *    the 7 ints, uint8 shared_classifier; weights: attn norms, ffn norms,
 *    final norm, embedding, wq, wk, wv, wo, w1, w2, w3, [classifier].
 */
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/llama.h"

#define V1_MAGIC 0x616b3432u
#define V1_HEADER 256
#define MAX_DIM (1 << 20)

loom_status loom_llama_config_check(const loom_llama_config *c, const char *what) {
    const struct { const char *name; int v; } f[] = {
        {"dim", c->dim}, {"hidden_dim", c->hidden_dim}, {"n_layers", c->n_layers},
        {"n_heads", c->n_heads}, {"n_kv_heads", c->n_kv_heads}, {"vocab_size", c->vocab_size},
        {"seq_len", c->seq_len},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        LOOM_RETURN_IF(f[i].v <= 0 || f[i].v > MAX_DIM, LOOM_ERR_FORMAT,
                       "%s: impossible %s = %d (expected 1..%d)", what, f[i].name, f[i].v, MAX_DIM);
    LOOM_RETURN_IF(c->n_layers > 4096, LOOM_ERR_FORMAT, "%s: impossible n_layers = %d", what,
                   c->n_layers);
    LOOM_RETURN_IF(c->dim % c->n_heads != 0, LOOM_ERR_FORMAT,
                   "%s: dim %d is not a multiple of n_heads %d", what, c->dim, c->n_heads);
    LOOM_RETURN_IF(c->n_heads % c->n_kv_heads != 0, LOOM_ERR_FORMAT,
                   "%s: n_heads %d is not a multiple of n_kv_heads %d", what, c->n_heads,
                   c->n_kv_heads);
    LOOM_RETURN_IF(c->head_dim % 2 != 0, LOOM_ERR_FORMAT,
                   "%s: head_dim %d is odd; RoPE needs pairs", what, c->head_dim);
    LOOM_RETURN_IF(c->n_rot < 0 || c->n_rot > c->head_dim || c->n_rot % 2 != 0, LOOM_ERR_FORMAT,
                   "%s: %d rotated dims per head (partial_rotary_factor) with head_dim %d: expected an even "
                   "number up to head_dim", what, c->n_rot, c->head_dim);
    LOOM_RETURN_IF(!(c->rms_eps > 0) || !(c->rope_theta > 0), LOOM_ERR_FORMAT,
                   "%s: rms_eps and rope_theta must be positive", what);
    const struct { const char *name; float v; } g[] = {
        {"attention scale (query_pre_attn_scalar)", c->attn_scale}, {"attn_logit_softcapping", c->attn_softcap},
        {"final_logit_softcapping", c->final_softcap}, {"the sliding layers' rope theta", c->rope_theta_swa},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        LOOM_RETURN_IF(!(g[i].v >= 0.0f) || !isfinite(g[i].v), LOOM_ERR_FORMAT,
                       "%s: impossible %s = %g (expected a positive finite number)", what, g[i].name, (double)g[i].v);
    LOOM_RETURN_IF(c->swa_pattern < 0 || c->swa_pattern > 4096, LOOM_ERR_FORMAT,
                   "%s: impossible sliding-window layer pattern %d", what, c->swa_pattern);
    LOOM_RETURN_IF(c->n_experts < 0 || c->n_experts > 4096, LOOM_ERR_FORMAT,
                   "%s: impossible expert count %d (expected 0..4096)", what, c->n_experts);
    LOOM_RETURN_IF(c->n_experts > 0 && (c->n_experts_used < 1 || c->n_experts_used > c->n_experts),
                   LOOM_ERR_FORMAT, "%s: %d experts used per token of %d experts (expected 1..%d)", what,
                   c->n_experts_used, c->n_experts, c->n_experts);
    return LOOM_OK;
}

/* Hands out consecutive f32 tensors from the mapped weights, checking bounds. */
typedef struct cursor {
    const unsigned char *base;
    size_t off, size;
    const char *path;
} cursor;

static loom_status take(cursor *c, loom_tensor *t, const char *name, int ndim, int64_t d0,
                        int64_t d1) {
    int64_t shape[2] = {d0, d1};
    size_t bytes = (size_t)d0 * (size_t)(ndim > 1 ? d1 : 1) * sizeof(float);
    LOOM_RETURN_IF(bytes > c->size - c->off || c->off > c->size, LOOM_ERR_FORMAT,
                   "%s: truncated: tensor %s needs %zu bytes at offset %zu, file has %zu",
                   c->path, name, bytes, c->off, c->size);
    LOOM_TRY(loom_tensor_init(t, LOOM_F32, ndim, shape, (void *)(c->base + c->off)));
    loom_tensor_set_name(t, "%s", name);
    c->off += bytes;
    return LOOM_OK;
}

/* Takes one tensor per layer (stacked in the file) into the field at offset fo. */
static loom_status take_layers(cursor *c, loom_llama_weights *w, int n_layers, size_t fo,
                               const char *name, int ndim, int64_t d0, int64_t d1) {
    char nm[LOOM_NAME_MAX];
    for (int l = 0; l < n_layers; l++) {
        snprintf(nm, sizeof nm, "blk.%d.%s", l, name);
        LOOM_TRY(take(c, (loom_tensor *)((char *)&w->layers[l] + fo), nm, ndim, d0, d1));
    }
    return LOOM_OK;
}

#define LAYER_FIELD(f) offsetof(loom_llama_layer, f)

static loom_status load_weights(cursor *c, const loom_llama_config *p, loom_llama_weights *w,
                                int version) {
    const int64_t D = p->dim, H = p->hidden_dim, V = p->vocab_size;
    const int64_t QD = (int64_t)p->n_heads * p->head_dim, KVD = (int64_t)p->n_kv_heads * p->head_dim;
    const int L = p->n_layers;
    if (version == 0) {
        LOOM_TRY(take(c, &w->tok_embd, "token_embd", 2, V, D));
        LOOM_TRY(take_layers(c, w, L, LAYER_FIELD(attn_norm), "attn_norm", 1, D, 1));
    } else {
        LOOM_TRY(take_layers(c, w, L, LAYER_FIELD(attn_norm), "attn_norm", 1, D, 1));
        LOOM_TRY(take_layers(c, w, L, LAYER_FIELD(ffn_norm), "ffn_norm", 1, D, 1));
        LOOM_TRY(take(c, &w->out_norm, "output_norm", 1, D, 1));
        LOOM_TRY(take(c, &w->tok_embd, "token_embd", 2, V, D));
    }
    LOOM_TRY(take_layers(c, w, L, LAYER_FIELD(wq), "attn_q", 2, QD, D));
    LOOM_TRY(take_layers(c, w, L, LAYER_FIELD(wk), "attn_k", 2, KVD, D));
    LOOM_TRY(take_layers(c, w, L, LAYER_FIELD(wv), "attn_v", 2, KVD, D));
    LOOM_TRY(take_layers(c, w, L, LAYER_FIELD(wo), "attn_output", 2, D, QD));
    if (version == 0) LOOM_TRY(take_layers(c, w, L, LAYER_FIELD(ffn_norm), "ffn_norm", 1, D, 1));
    LOOM_TRY(take_layers(c, w, L, LAYER_FIELD(w1), "ffn_gate", 2, H, D));
    LOOM_TRY(take_layers(c, w, L, LAYER_FIELD(w2), "ffn_down", 2, D, H));
    LOOM_TRY(take_layers(c, w, L, LAYER_FIELD(w3), "ffn_up", 2, H, D));
    if (version == 0) {
        LOOM_TRY(take(c, &w->out_norm, "output_norm", 1, D, 1));
        loom_tensor freq;  /* freq_cis_real and _imag: seq_len * head_dim/2 each */
        LOOM_TRY(take(c, &freq, "freq_cis", 1, (int64_t)p->seq_len * p->head_dim, 1));
    }
    if (p->shared_classifier) {
        w->output = w->tok_embd;
        loom_tensor_set_name(&w->output, "output (tied to token_embd)");
    } else {
        LOOM_TRY(take(c, &w->output, "output", 2, V, D));
    }
    LOOM_RETURN_IF(c->off != c->size, LOOM_ERR_FORMAT,
                   "%s: size mismatch: the header describes %zu bytes, the file has %zu "
                   "(wrong or corrupt header?)", c->path, c->off, c->size);
    return LOOM_OK;
}

/* What a file that is no checkpoint seems to be, from its first bytes, for
 * the error ("" when nothing is recognised). */
static void looks_like(const unsigned char *d, size_t n, char *buf, size_t cap) {
    buf[0] = '\0';
    uint64_t hl = 0;
    if (n >= 8) memcpy(&hl, d, 8);
    if (n >= 4 && (!memcmp(d, "lmgg", 4) || !memcmp(d, "fmgg", 4) || !memcmp(d, "tjgg", 4) ||
                   !memcmp(d, "ggml", 4) || !memcmp(d, "ggmf", 4) || !memcmp(d, "ggjt", 4))) {
        snprintf(buf, cap, "; it is a GGML/GGMF/GGJT file, llama.cpp's format before GGUF: convert it to GGUF");
    } else if (n >= 4 && !memcmp(d, "PK\x03\x04", 4)) {
        snprintf(buf, cap, "; it is a zip archive (a PyTorch checkpoint? convert it to GGUF or safetensors)");
    } else if (n >= 4 && !memcmp(d, "\x7f" "ELF", 4)) {
        snprintf(buf, cap, "; it is an executable (ELF)");
    } else if (n >= 2 && d[0] == 0x1f && d[1] == 0x8b) {
        snprintf(buf, cap, "; it is gzip-compressed: decompress it first");
    } else if (n >= 10 && hl >= 2 && hl <= n - 8 && d[8] == '{') {
        snprintf(buf, cap, "; it looks like safetensors: name it *.safetensors or give its folder");
    } else {
        size_t k = n < 64 ? n : 64, text = k > 0;
        for (size_t i = 0; i < k && text; i++)
            text = d[i] >= 0x20 || d[i] == '\n' || d[i] == '\r' || d[i] == '\t';
        if (text) {
            char head[28];
            size_t m = 0;
            for (size_t i = 0; i < k && m < 24; i++) head[m++] = d[i] < 0x20 || d[i] >= 0x7f ? '.' : (char)d[i];
            head[m] = '\0';
            snprintf(buf, cap, "; it starts with text: \"%s\"", head);
        }
    }
}

loom_status loom_llama2c_load(const char *path, loom_mapped_file *file, loom_llama_config *cfg,
                              loom_llama_weights *w) {
    memset(cfg, 0, sizeof *cfg);
    memset(w, 0, sizeof *w);
    LOOM_TRY(loom_mapped_file_open(file, path));
    loom_status s = LOOM_OK;
    int32_t hdr[7];
    size_t header_size;
    int version = 0, shared;
    uint32_t magic;
    if (file->size >= 4) memcpy(&magic, file->data, 4);
    if (file->size >= 4 && magic == V1_MAGIC) {
        int32_t ver = 0;
        if (file->size < V1_HEADER) {
            s = loom_set_error(LOOM_ERR_FORMAT, "%s: truncated header: %zu bytes, expected %d",
                               path, file->size, V1_HEADER);
            goto fail;
        }
        memcpy(&ver, file->data + 4, 4);
        if (ver != 1) {
            s = loom_set_error(LOOM_ERR_UNSUPPORTED,
                               "%s: llama2.c checkpoint version %d is not supported (only legacy "
                               "and version 1 f32 exports)", path, ver);
            goto fail;
        }
        memcpy(hdr, file->data + 8, sizeof hdr);
        shared = file->data[8 + sizeof hdr] != 0;
        header_size = V1_HEADER;
        version = 1;
    } else {
        if (file->size < sizeof hdr) {
            s = loom_set_error(LOOM_ERR_FORMAT, "%s: truncated header: %zu bytes, expected %zu",
                               path, file->size, sizeof hdr);
            goto fail;
        }
        memcpy(hdr, file->data, sizeof hdr);
        shared = hdr[5] > 0;
        if (hdr[5] < 0 && hdr[5] != INT32_MIN) hdr[5] = -hdr[5];
        header_size = sizeof hdr;
    }
    cfg->dim = hdr[0];
    cfg->hidden_dim = hdr[1];
    cfg->n_layers = hdr[2];
    cfg->n_heads = hdr[3];
    cfg->n_kv_heads = hdr[4];
    cfg->vocab_size = hdr[5];
    cfg->seq_len = hdr[6];
    cfg->head_dim = cfg->n_heads > 0 ? cfg->dim / cfg->n_heads : 0;
    cfg->rope_theta = 10000.0f;
    cfg->rms_eps = 1e-5f;
    cfg->rope_mode = LOOM_ROPE_INTERLEAVED;
    cfg->shared_classifier = shared;
    if (version == 0 && loom_llama_config_check(cfg, "header") != LOOM_OK) {
        /* no magic and an impossible header: most likely not a checkpoint at all */
        char why[256], seems[160];
        const char *e = loom_last_error();
        snprintf(why, sizeof why, "%s", strncmp(e, "header: ", 8) == 0 ? e + 8 : e);
        looks_like(file->data, file->size, seems, sizeof seems);
        s = loom_set_error(LOOM_ERR_FORMAT, "%s: neither a GGUF file (no \"GGUF\" magic) nor a llama2.c checkpoint "
                           "(its header says: %s)%s", path, why, seems);
        goto fail;
    }
    if ((s = loom_llama_config_check(cfg, path)) != LOOM_OK) goto fail;

    w->layers = calloc((size_t)cfg->n_layers, sizeof *w->layers);
    if (!w->layers) {
        s = loom_set_error(LOOM_ERR_NOMEM, "out of memory");
        goto fail;
    }
    cursor c = {file->data, header_size, file->size, path};
    if ((s = load_weights(&c, cfg, w, version)) != LOOM_OK) goto fail;
    return LOOM_OK;
fail:
    free(w->layers);
    w->layers = NULL;
    loom_mapped_file_close(file);
    return s;
}
