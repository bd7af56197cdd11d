/* loom convert: Llama weights (HF safetensors or llama2.c) and GGUF files to
 * GGUF, with tensors re-encoded row by row at write time. */
#include "model/convert.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/status.h"
#include "model/chat.h"
#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/llama.h"
#include "model/model.h"
#include "model/llama_st.h"
#include "model/tokenizer.h"
#include "model/tokenizer_hfjson.h"
#include "ops/quant.h"

/* One output tensor: source view, optional RoPE row permutation, target type.
 * A GGUF tensor of a type the Llama loader converts (K-quants, q5) has gsrc
 * set to its ggml type, src.dtype to the type it converts into, and src.data
 * on its blocks as stored. */
typedef struct conv_job {
    loom_tensor src;
    loom_dtype dst;
    int heads, head_dim;   /* > 0: permute rows half -> interleaved */
    uint32_t gsrc;         /* 0, or the ggml type of src.data's blocks */
} conv_job;

typedef struct conv_list {
    conv_job *jobs;
    int n, cap;
} conv_list;

loom_convert_params loom_convert_default_params(void) {
    loom_convert_params p = {.type_set = 0, .type = LOOM_F32, .tokenizer = NULL};
    return p;
}

loom_status loom_convert_parse_type(const char *s, loom_dtype *out) {
    static const struct { const char *n; loom_dtype t; } types[] = {
        {"f32", LOOM_F32}, {"f16", LOOM_F16}, {"bf16", LOOM_BF16},
        {"q8_0", LOOM_Q8_0}, {"q4_0", LOOM_Q4_0}, {"q4_1", LOOM_Q4_1}};
    for (size_t i = 0; s && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(s, types[i].n) == 0) {
            *out = types[i].t;
            return LOOM_OK;
        }
    return loom_set_error(LOOM_ERR_INVALID_ARG, "convert: type '%s' is not one of f32, f16, bf16, q8_0, q4_0, "
                          "q4_1", s ? s : "(null)");
}

/* llama.cpp's general.file_type for the matrices' type. */
static uint32_t file_type(loom_dtype t) {
    switch (t) {
    case LOOM_F16: return 1;
    case LOOM_Q4_0: return 2;
    case LOOM_Q4_1: return 3;
    case LOOM_Q8_0: return 7;
    case LOOM_BF16: return 32;
    default: return 0;
    }
}

static loom_status fill(void *ctx, const char *name, void *dst, size_t nbytes) {
    const conv_job *j = ctx;
    const loom_tensor *s = &j->src;
    int64_t cols = s->shape[s->ndim - 1], rows = loom_tensor_nelem(s) / (cols ? cols : 1);
    size_t src_row = j->gsrc ? (size_t)(cols / loom_ggml_block_elems(j->gsrc)) * loom_ggml_block_bytes(j->gsrc)
                             : loom_dtype_row_bytes(s->dtype, cols);
    size_t dst_row = loom_dtype_row_bytes(j->dst, cols);
    LOOM_RETURN_IF(dst_row * (size_t)rows != nbytes, LOOM_ERR_INTERNAL, "convert: '%s': size mismatch", name);
    float *tmp = malloc(sizeof(float) * (size_t)(cols ? cols : 1));
    LOOM_RETURN_IF(!tmp, LOOM_ERR_NOMEM, "convert: out of memory");
    int half = j->head_dim / 2;
    for (int64_t r = 0; r < rows; r++) {
        int64_t sr = r;
        if (j->heads > 0) {  /* interleaved row 2i+p of a head comes from half row p*half + i */
            int64_t h = r / j->head_dim, k = r % j->head_dim;
            sr = h * j->head_dim + (k % 2) * half + k / 2;
        }
        const unsigned char *sp = (const unsigned char *)s->data + (size_t)sr * src_row;
        unsigned char *dp = (unsigned char *)dst + (size_t)r * dst_row;
        const int kept = s->dtype == j->dst;
        if (kept && !j->gsrc) {
            memcpy(dp, sp, dst_row);
            continue;
        }
        if (!j->gsrc) {
            loom_row_to_f32(s->dtype, sp, tmp, cols);
        } else { /* kept: the loader's own conversion (q4_K -> q4_1 near exact); else its exact values */
            loom_status st = kept ? loom_ggml_convert_row(j->gsrc, sp, cols, dp)
                                  : loom_ggml_dequantize(j->gsrc, sp, cols, tmp);
            if (st != LOOM_OK) {
                char why[256];
                snprintf(why, sizeof why, "%s", loom_last_error());
                free(tmp);
                return loom_set_error(LOOM_ERR_FORMAT, "convert: '%s' row %lld: %s", name, (long long)sr, why);
            }
            if (kept) continue;
        }
        if (j->dst == LOOM_F32) memcpy(dp, tmp, sizeof(float) * (size_t)cols);
        else if (j->dst == LOOM_F16)
            for (int64_t c = 0; c < cols; c++) ((uint16_t *)dp)[c] = loom_f32_to_f16(tmp[c]);
        else if (j->dst == LOOM_BF16)
            for (int64_t c = 0; c < cols; c++) ((uint16_t *)dp)[c] = loom_f32_to_bf16(tmp[c]);
        else loom_quantize_row(j->dst, tmp, dp, cols);
    }
    free(tmp);
    return LOOM_OK;
}

/* The type a tensor is written as: vectors stay f32 (as llama.cpp keeps norms,
 * and as loom's loaders want them), matrices take the requested type, f16
 * where rows are not whole blocks. A vector is one row, whatever its unit
 * dims: a norm stored as [1, 1, 1, 576] (ggml's [576, 1, 1, 1]) is one. */
static loom_dtype target(const loom_tensor *t, const loom_convert_params *p) {
    if (t->ndim < 2 || loom_tensor_nelem(t) == t->shape[t->ndim - 1])
        return t->dtype == LOOM_F32 || !loom_dtype_is_quantized(t->dtype) ? LOOM_F32 : t->dtype;
    if (!p->type_set) return t->dtype;
    if (loom_dtype_is_quantized(p->type) && t->shape[t->ndim - 1] % LOOM_QBLOCK != 0) return LOOM_F16;
    return p->type;
}

static loom_status add(loom_gguf_writer *w, conv_list *L, const char *name, const loom_tensor *t,
                       const loom_convert_params *p, int heads, int head_dim) {
    LOOM_RETURN_IF(L->n == L->cap, LOOM_ERR_INTERNAL, "convert: too many tensors");
    conv_job *j = &L->jobs[L->n++];
    j->src = *t;
    j->dst = target(t, p);
    j->heads = heads;
    j->head_dim = head_dim;
    LOOM_RETURN_IF(loom_dtype_is_quantized(t->dtype) && heads > 0, LOOM_ERR_UNSUPPORTED,
                   "convert: '%s' is quantized and would need a row permutation", name);
    int gt = loom_ggml_type_from_dtype(j->dst);
    LOOM_RETURN_IF(gt < 0, LOOM_ERR_UNSUPPORTED, "convert: '%s': type %s has no GGUF id", name,
                   loom_dtype_name(j->dst));
    return loom_gguf_writer_add_tensor_fn(w, name, (uint32_t)gt, t->ndim, t->shape, fill, j);
}

/* "<arch>.<suffix>" for the family's GGUF architecture name. */
static const char *arch_key(char key[96], const loom_llama_config *c, const char *suffix) {
    snprintf(key, 96, "%s.%s", loom_llama_family_name(c->family), suffix);
    return key;
}

static loom_status llama_meta(loom_gguf_writer *w, const loom_llama_config *c, const char *name,
                              const loom_convert_params *p, loom_dtype src_type) {
    char k[96];
    LOOM_TRY(loom_gguf_writer_set_str(w, "general.architecture", loom_llama_family_name(c->family)));
    LOOM_TRY(loom_gguf_writer_set_str(w, "general.name", name));
    LOOM_TRY(loom_gguf_writer_set_u32(w, arch_key(k, c, "context_length"), (uint32_t)c->seq_len));
    LOOM_TRY(loom_gguf_writer_set_u32(w, arch_key(k, c, "embedding_length"), (uint32_t)c->dim));
    LOOM_TRY(loom_gguf_writer_set_u32(w, arch_key(k, c, "block_count"), (uint32_t)c->n_layers));
    LOOM_TRY(loom_gguf_writer_set_u32(w, arch_key(k, c, "feed_forward_length"), (uint32_t)c->hidden_dim));
    LOOM_TRY(loom_gguf_writer_set_u32(w, arch_key(k, c, "attention.head_count"), (uint32_t)c->n_heads));
    LOOM_TRY(loom_gguf_writer_set_u32(w, arch_key(k, c, "attention.head_count_kv"), (uint32_t)c->n_kv_heads));
    if ((int64_t)c->head_dim * c->n_heads != c->dim) { /* as llama.cpp's converter: only when not width / heads */
        LOOM_TRY(loom_gguf_writer_set_u32(w, arch_key(k, c, "attention.key_length"), (uint32_t)c->head_dim));
        LOOM_TRY(loom_gguf_writer_set_u32(w, arch_key(k, c, "attention.value_length"), (uint32_t)c->head_dim));
    }
    LOOM_TRY(loom_gguf_writer_set_f32(w, arch_key(k, c, "attention.layer_norm_rms_epsilon"), c->rms_eps));
    LOOM_TRY(loom_gguf_writer_set_f32(w, arch_key(k, c, "rope.freq_base"), c->rope_theta));
    LOOM_TRY(loom_gguf_writer_set_u32(w, arch_key(k, c, "rope.dimension_count"),
                                      (uint32_t)(c->n_rot ? c->n_rot : c->head_dim)));
    LOOM_TRY(loom_gguf_writer_set_u32(w, arch_key(k, c, "vocab_size"), (uint32_t)c->vocab_size));
    if (c->rope_freq_scale > 0 && c->rope_freq_scale != 1.0f) {
        LOOM_TRY(loom_gguf_writer_set_str(w, arch_key(k, c, "rope.scaling.type"), "linear"));
        LOOM_TRY(loom_gguf_writer_set_f32(w, arch_key(k, c, "rope.scaling.factor"), 1.0f / c->rope_freq_scale));
    }
    if (c->sliding_window > 0) /* llama.cpp's key; its own converter writes none for Mistral */
        LOOM_TRY(loom_gguf_writer_set_u32(w, arch_key(k, c, "attention.sliding_window"), (uint32_t)c->sliding_window));
    if (loom_llama_gemma(c)) { /* llama.cpp's keys (read_gemma), and the q.k scale, which llama.cpp derives */
        LOOM_TRY(loom_gguf_writer_set_u32(w, arch_key(k, c, "attention.sliding_window_pattern"),
                                          (uint32_t)c->swa_pattern));
        if (c->family == LOOM_FAMILY_GEMMA2 || c->attn_softcap > 0)
            LOOM_TRY(loom_gguf_writer_set_f32(w, arch_key(k, c, "attn_logit_softcapping"), c->attn_softcap));
        if (c->family == LOOM_FAMILY_GEMMA2 || c->final_softcap > 0)
            LOOM_TRY(loom_gguf_writer_set_f32(w, arch_key(k, c, "final_logit_softcapping"), c->final_softcap));
        if (c->rope_theta_swa > 0)
            LOOM_TRY(loom_gguf_writer_set_f32(w, arch_key(k, c, "rope.freq_base_swa"), c->rope_theta_swa));
        LOOM_TRY(loom_gguf_writer_set_f32(w, arch_key(k, c, "attention.scale"),
                                          c->attn_scale > 0 ? c->attn_scale : 1.0f / sqrtf((float)c->head_dim)));
    }
    if (c->n_experts > 0) { /* llama.cpp's keys; the experts' width is feed_forward_length too */
        LOOM_TRY(loom_gguf_writer_set_u32(w, arch_key(k, c, "expert_count"), (uint32_t)c->n_experts));
        LOOM_TRY(loom_gguf_writer_set_u32(w, arch_key(k, c, "expert_used_count"), (uint32_t)c->n_experts_used));
        LOOM_TRY(loom_gguf_writer_set_u32(w, arch_key(k, c, "expert_feed_forward_length"), (uint32_t)c->hidden_dim));
        LOOM_TRY(loom_gguf_writer_set_bool(w, arch_key(k, c, "expert_weights_norm"), c->moe_renorm));
    }
    loom_dtype ft = p->type_set ? p->type : src_type;
    return loom_gguf_writer_set_u32(w, "general.file_type", file_type(ft));
}

static loom_status llama_tensors(loom_gguf_writer *w, conv_list *L, const loom_llama_config *c,
                                 const loom_llama_weights *lw, int from_half, const loom_convert_params *p) {
    L->cap = 3 + LOOM_LLAMA_LAYER_TENSORS * c->n_layers;
    L->jobs = calloc((size_t)L->cap, sizeof *L->jobs);
    LOOM_RETURN_IF(!L->jobs, LOOM_ERR_NOMEM, "convert: out of memory");
    LOOM_TRY(add(w, L, "token_embd.weight", &lw->tok_embd, p, 0, 0));
    LOOM_TRY(add(w, L, "output_norm.weight", &lw->out_norm, p, 0, 0));
    if (!c->shared_classifier) LOOM_TRY(add(w, L, "output.weight", &lw->output, p, 0, 0));
    /* llama.cpp's llama models rotate adjacent pairs: HF's half-split Q/K rows
     * are permuted to that order; its qwen2/qwen3 models keep HF's rows */
    int permute = from_half && c->family == LOOM_FAMILY_LLAMA;
    for (int l = 0; l < c->n_layers; l++)
        for (int i = 0; i < LOOM_LLAMA_LAYER_TENSORS; i++) {
            const loom_llama_layer_tensor *lt = &loom_llama_layer_tensors[i];
            if (!loom_llama_layer_has(c, lt)) continue;
            char n[64];
            snprintf(n, sizeof n, "blk.%d.%s", l, lt->gguf);
            int heads = permute && lt->rope ? (int)(loom_llama_dim_size(c, lt->rows) / c->head_dim) : 0;
            LOOM_TRY(add(w, L, n, loom_llama_layer_field(&lw->layers[l], lt), p, heads,
                         heads ? c->head_dim : 0));
        }
    return LOOM_OK;
}

/* SentencePiece metadata from a llama2.c tokenizer.bin: spaces become U+2581,
 * <0xXX> pieces are byte tokens, 0/1/2 are <unk>/<s>/</s>. */
static loom_status llama2c_vocab(loom_gguf_writer *w, const char *path, int vocab_size) {
    loom_tokenizer *t;
    LOOM_TRY(loom_tokenizer_load_llama2c(path, &t));
    int n = loom_tokenizer_vocab_size(t);
    loom_status s = LOOM_OK;
    if (n != vocab_size) {
        loom_tokenizer_free(t);
        return loom_set_error(LOOM_ERR_FORMAT, "convert: tokenizer '%s' has %d tokens, the model %d", path, n,
                              vocab_size);
    }
    char **pieces = calloc((size_t)n, sizeof *pieces);
    float *scores = malloc(sizeof(float) * (size_t)n);
    int32_t *types = malloc(sizeof(int32_t) * (size_t)n);
    if (!pieces || !scores || !types) s = loom_set_error(LOOM_ERR_NOMEM, "convert: out of memory");
    for (int i = 0; i < n && s == LOOM_OK; i++) {
        const char *p = loom_tokenizer_piece(t, i);
        size_t len = strlen(p), k = 0;
        pieces[i] = malloc(len * 3 + 1);
        if (!pieces[i]) {
            s = loom_set_error(LOOM_ERR_NOMEM, "convert: out of memory");
            break;
        }
        for (size_t c = 0; c < len; c++) {
            if (p[c] == ' ') {
                memcpy(pieces[i] + k, "\xe2\x96\x81", 3);
                k += 3;
            } else {
                pieces[i][k++] = p[c];
            }
        }
        pieces[i][k] = '\0';
        scores[i] = loom_tokenizer_score(t, i);
        unsigned b;
        char tail;
        types[i] = i == 0 ? 2 : (i == 1 || i == 2) ? 3
                   : (len == 6 && sscanf(p, "<0x%2X%c", &b, &tail) == 2 && tail == '>') ? 6 : 1;
    }
    if (s == LOOM_OK) s = loom_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (s == LOOM_OK)
        s = loom_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)pieces, NULL, (uint64_t)n);
    if (s == LOOM_OK) s = loom_gguf_writer_set_arr(w, "tokenizer.ggml.scores", LOOM_GGUF_FLOAT32, scores, (uint64_t)n);
    if (s == LOOM_OK)
        s = loom_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LOOM_GGUF_INT32, types, (uint64_t)n);
    if (s == LOOM_OK) s = loom_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (s == LOOM_OK) s = loom_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (s == LOOM_OK) s = loom_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (s == LOOM_OK) s = loom_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
    if (s == LOOM_OK) s = loom_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", 0);
    for (int i = 0; pieces && i < n; i++) free(pieces[i]);
    free(pieces);
    free(scores);
    free(types);
    loom_tokenizer_free(t);
    return s;
}

/* tokenizer.json (+ tokenizer_config.json) of an HF folder; the chat
 * template also from chat_template.jinja or tokenizer_config.json's list form
 * when tokenizer_config.json has no string one (which the tokenizer writes). */
static loom_status hf_vocab(loom_gguf_writer *w, const char *dir) {
    char path[1100];
    char *text = NULL, *cfg = NULL;
    size_t len = 0, cfg_len = 0;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    LOOM_TRY(loom_read_text_file(path, &text, &len));
    char cpath[1100];
    snprintf(cpath, sizeof cpath, "%s/tokenizer_config.json", dir);
    struct stat sb;
    if (stat(cpath, &sb) == 0 && loom_read_text_file(cpath, &cfg, &cfg_len) != LOOM_OK) loom_clear_error();
    loom_status s = loom_tokenizer_hf_json_to_gguf(text, len, cfg, cfg_len, path, w);
    int has_string_template = 0;
    if (cfg) {
        cJSON *c = cJSON_ParseWithLength(cfg, cfg_len);
        has_string_template = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "chat_template"));
        cJSON_Delete(c);
    }
    char *tmpl = NULL;
    size_t tmpl_len = 0;
    if (s == LOOM_OK && !has_string_template) {
        if (loom_chat_template_source_hf(dir, &tmpl, &tmpl_len) == LOOM_OK)
            s = loom_gguf_writer_set_str_n(w, "tokenizer.chat_template", tmpl, tmpl_len);
        else
            loom_clear_error();  /* no template: the GGUF has none either */
    }
    free(tmpl);
    free(text);
    free(cfg);
    return s;
}

/* Metadata entry i of g copied to w (general.alignment and file_type excepted). */
loom_status loom_convert_copy_kv(const loom_gguf *g, int64_t i, loom_gguf_writer *w);

static loom_status requant(const char *in, loom_gguf_writer *w, conv_list *L, const loom_convert_params *p,
                           loom_gguf **g) {
    LOOM_TRY(loom_gguf_open(in, g));
    for (int64_t i = 0; i < loom_gguf_n_kv(*g); i++) {
        const char *k = loom_gguf_kv_key(*g, i);
        if (strcmp(k, "general.alignment") == 0 || strcmp(k, "general.file_type") == 0) continue;
        LOOM_TRY(loom_convert_copy_kv(*g, i, w));
    }
    if (p->type_set) LOOM_TRY(loom_gguf_writer_set_u32(w, "general.file_type", file_type(p->type)));
    int64_t n = loom_gguf_n_tensors(*g);
    L->cap = (int)n;
    L->jobs = calloc((size_t)(n ? n : 1), sizeof *L->jobs);
    LOOM_RETURN_IF(!L->jobs, LOOM_ERR_NOMEM, "convert: out of memory");
    for (int64_t i = 0; i < n; i++) {
        loom_tensor t;
        loom_gguf_tensor_info info;
        LOOM_TRY(loom_gguf_tensor_info_at(*g, i, &info));
        loom_dtype to;
        if (loom_ggml_convert_target(info.ggml_type, &to)) { /* K-quants, q5: as the loader converts them */
            int64_t shape[LOOM_MAX_DIMS];
            loom_gguf_tensor_shape(&info, shape);
            LOOM_TRY(loom_tensor_init(&t, to, info.n_dims, shape, (void *)(uintptr_t)info.data));
            LOOM_TRY(add(w, L, info.name, &t, p, 0, 0));
            L->jobs[L->n - 1].gsrc = info.ggml_type;
            continue;
        }
        LOOM_TRY(loom_gguf_tensor_at(*g, i, &t));
        LOOM_TRY(add(w, L, info.name, &t, p, 0, 0));
    }
    return LOOM_OK;
}

static const char *file_kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
         : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

/* The file the output replaces: out, or the file out links to. Only regular
 * files are written: a device or a directory there is refused (as root a
 * rename would have replaced /dev/full with a regular file). */
static loom_status output_path(const char *out, char *real, size_t n) {
    struct stat sb, lb;
    if (stat(out, &sb) != 0) {
        LOOM_RETURN_IF(errno != ENOENT, LOOM_ERR_IO, "convert: cannot write '%s': %s", out, strerror(errno));
        snprintf(real, n, "%s", out);  /* a new file */
        return LOOM_OK;
    }
    LOOM_RETURN_IF(!S_ISREG(sb.st_mode), LOOM_ERR_IO, "convert: '%s' is %s; loom convert writes only regular files",
                   out, file_kind(sb.st_mode));
    if (lstat(out, &lb) == 0 && S_ISLNK(lb.st_mode)) {  /* replace the file, keep the link */
        char *r = realpath(out, NULL);
        LOOM_RETURN_IF(!r, LOOM_ERR_IO, "convert: cannot resolve '%s': %s", out, strerror(errno));
        int fits = strlen(r) < n;
        if (fits) snprintf(real, n, "%s", r);
        free(r);
        LOOM_RETURN_IF(!fits, LOOM_ERR_IO, "convert: the path '%s' links to is too long", out);
    } else {
        snprintf(real, n, "%s", out);
    }
    return LOOM_OK;
}

/* Writes the GGUF to a new file beside out (created, never opened through an
 * existing name), then renames it over out, so out is whole or untouched. */
static loom_status write_output(loom_gguf_writer *w, const char *out) {
    char real[4096], tmp[4200];
    LOOM_TRY(output_path(out, real, sizeof real));
    snprintf(tmp, sizeof tmp, "%s.part.%ld", real, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
    LOOM_RETURN_IF(fd < 0, LOOM_ERR_IO, "convert: cannot create '%s': %s", tmp, strerror(errno));
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        unlink(tmp);
        return loom_set_error(LOOM_ERR_IO, "convert: cannot write '%s': %s", tmp, strerror(errno));
    }
    loom_status s = loom_gguf_writer_write_stream(w, f, tmp);
    if (fclose(f) != 0 && s == LOOM_OK)
        s = loom_set_error(LOOM_ERR_IO, "convert: cannot write '%s': %s", tmp, strerror(errno));
    if (s == LOOM_OK && rename(tmp, real) != 0)
        s = loom_set_error(LOOM_ERR_IO, "convert: cannot rename '%s' to '%s': %s", tmp, real, strerror(errno));
    if (s != LOOM_OK) unlink(tmp);
    return s;
}

loom_status loom_convert(const char *in, const char *out, const loom_convert_params *p) {
    LOOM_RETURN_IF(!in || !out || !p, LOOM_ERR_INVALID_ARG, "convert: NULL argument");
    LOOM_RETURN_IF(p->type_set && !(p->type == LOOM_F32 || p->type == LOOM_F16 || p->type == LOOM_BF16 ||
                                    loom_dtype_is_quantized(p->type)), LOOM_ERR_INVALID_ARG,
                   "convert: target type %s is not supported", loom_dtype_name(p->type));
    struct stat sb;
    LOOM_RETURN_IF(stat(in, &sb) != 0, LOOM_ERR_IO, "convert: cannot open '%s': %s", in, strerror(errno));
    char real_out[4096];  /* refused now, not after the conversion */
    LOOM_TRY(output_path(out, real_out, sizeof real_out));
    loom_gguf_writer *w;
    LOOM_TRY(loom_gguf_writer_init(&w));
    conv_list L = {0};
    loom_gguf *g = NULL;
    loom_safetensors *st = NULL;
    float *owned = NULL;
    loom_mapped_file mf = {0};
    loom_llama_config c;
    loom_llama_weights lw = {0};
    loom_status s;
    const char *base = strrchr(in, '/') ? strrchr(in, '/') + 1 : in;
    loom_model_format fmt = loom_model_detect_format(in);
    if (fmt == LOOM_MODEL_GGUF) {
        s = requant(in, w, &L, p, &g);
    } else if (fmt == LOOM_MODEL_SAFETENSORS) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", in);
        if (!S_ISDIR(sb.st_mode)) {
            char *sl = strrchr(dir, '/');
            if (sl) *sl = '\0';
            else snprintf(dir, sizeof dir, ".");
        }
        s = loom_llama_load_safetensors(in, &st, &owned, &c, &lw);
        if (s == LOOM_OK) s = llama_meta(w, &c, base, p, lw.layers[0].wq.dtype);
        if (s == LOOM_OK) s = hf_vocab(w, dir);
        if (s == LOOM_OK) s = llama_tensors(w, &L, &c, &lw, 1, p);
    } else {
        s = p->tokenizer ? LOOM_OK
                         : loom_set_error(LOOM_ERR_INVALID_ARG, "convert: a llama2.c checkpoint needs its "
                                          "tokenizer.bin (--tokenizer) for the GGUF vocabulary");
        if (s == LOOM_OK) s = loom_llama2c_load(in, &mf, &c, &lw);
        if (s == LOOM_OK) s = llama_meta(w, &c, base, p, lw.layers[0].wq.dtype);
        if (s == LOOM_OK) s = llama2c_vocab(w, p->tokenizer, c.vocab_size);
        if (s == LOOM_OK) s = llama_tensors(w, &L, &c, &lw, 0, p);
    }
    if (s == LOOM_OK) s = write_output(w, out);
    loom_gguf_writer_free(w);
    free(L.jobs);
    free(lw.layers);
    loom_free_aligned(lw.owned); /* experts stacked from a Hugging Face folder */
    free(owned);
    loom_safetensors_close(st);
    loom_gguf_close(g);
    if (mf.data) loom_mapped_file_close(&mf);
    return s;
}
