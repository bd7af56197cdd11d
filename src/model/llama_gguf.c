/*
 * Llama-family models from GGUF (llama.cpp's format and tensor names).
 *
 * Metadata: general.architecture = "llama", "qwen2", "qwen3", "phi3", "gemma2" or "gemma3" (the family,
 * loom_llama_family_name), then keys prefixed with it ("qwen2.context_length"):
 * context_length, embedding_length, block_count, feed_forward_length,
 * attention.head_count, attention.head_count_kv (default head_count),
 * attention.key_length / value_length (default width / heads; equal),
 * attention.layer_norm_rms_epsilon, rope.freq_base (default 10000),
 * rope.dimension_count (default head_dim), rope.scaling.type/factor (none or
 * linear), attention.sliding_window (default 0: none; the same window in every
 * layer, so a per-layer attention.sliding_window_pattern is refused), vocab_size
 * (default: rows of token_embd); Gemma's keys as llama.cpp reads them (read_gemma).
 *
 * Tensors: token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output,
 * ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm, output (absent: tied to
 * token_embd); qwen2 also blk.N.attn_{q,k,v}.bias, qwen3 blk.N.attn_{q,k}_norm;
 * phi3 has blk.N.attn_qkv (Q, K, V rows) instead of attn_{q,k,v} and ffn_up of
 * [2 H, D] (gate rows, then up) instead of ffn_gate and ffn_up, used through
 * row views (loom_llama_layer_views); gemma2/gemma3 add blk.N.post_attention_norm and
 * blk.N.post_ffw_norm (ffn_norm is the pre-FFN norm), gemma3 blk.N.attn_{q,k}_norm, and
 * their norm weights hold 1 + w (llama.cpp's converter adds the 1).
 * llama.cpp's converter permutes the rows of a llama model's attn_q/attn_k so
 * that RoPE rotates adjacent pairs (ggml's "normal" RoPE), which is loom's
 * LOOM_ROPE_INTERLEAVED; qwen2 and qwen3 keep Hugging Face's rows and rotate
 * the two halves of a head (ggml's NeoX RoPE, LOOM_ROPE_HALF), as do phi3 and gemma. Weights stay in
 * the mapping; nothing is copied.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "model/gguf.h"
#include "model/llama.h"

#define MAX_DIM (1 << 20)

/* Key "<arch>.<suffix>" (arch: the family's name, c->family) into key;
 * *present = 0 when g lacks it, an error when it is required. */
static loom_status meta_key(const loom_gguf *g, const loom_llama_config *c, const char *suffix, int required,
                            char key[128], int *present) {
    snprintf(key, 128, "%s.%s", loom_llama_family_name(c->family), suffix);
    *present = loom_gguf_find_key(g, key) >= 0;
    LOOM_RETURN_IF(!*present && required, LOOM_ERR_FORMAT, "%s: missing metadata key '%s'", loom_gguf_path(g),
                   key);
    return LOOM_OK;
}

/* Integer key "<arch>.<suffix>" in 1..MAX_DIM; def < 0 means required. */
static loom_status get_int(const loom_gguf *g, const loom_llama_config *c, const char *suffix, int64_t def,
                           int *out) {
    char key[128];
    int present;
    LOOM_TRY(meta_key(g, c, suffix, def < 0, key, &present));
    int64_t v = def;
    if (present) LOOM_TRY(loom_gguf_get_i64(g, key, &v));
    LOOM_RETURN_IF(present && (v <= 0 || v > MAX_DIM), LOOM_ERR_FORMAT,
                   "%s: impossible %s = %lld (expected 1..%d)", loom_gguf_path(g), key, (long long)v, MAX_DIM);
    *out = (int)v;
    return LOOM_OK;
}

/* Positive float key "<arch>.<suffix>"; def < 0 means required. */
static loom_status get_float(const loom_gguf *g, const loom_llama_config *c, const char *suffix, float def,
                             float *out) {
    char key[128];
    int present;
    LOOM_TRY(meta_key(g, c, suffix, def < 0, key, &present));
    *out = def;
    if (present) LOOM_TRY(loom_gguf_get_f32(g, key, out));
    LOOM_RETURN_IF(present && (!(*out > 0) || *out > 1e30f), LOOM_ERR_FORMAT, "%s: impossible %s = %g",
                   loom_gguf_path(g), key, (double)*out);
    return LOOM_OK;
}

static int str_is(const char *s, size_t n, const char *lit) {
    return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* Float key "<arch>.<suffix>" >= 0 into *out when present (else def). */
static loom_status get_float0(const loom_gguf *g, const loom_llama_config *c, const char *suffix, float def,
                              float *out) {
    char key[128];
    int present;
    LOOM_TRY(meta_key(g, c, suffix, 0, key, &present));
    *out = def;
    if (present) LOOM_TRY(loom_gguf_get_f32(g, key, out));
    LOOM_RETURN_IF(!(*out >= 0) || *out > 1e30f, LOOM_ERR_FORMAT, "%s: impossible %s = %g", loom_gguf_path(g), key,
                   (double)*out);
    return LOOM_OK;
}

/* Gemma 2/3 as llama.cpp reads them (src/models/gemma2.cpp, gemma3.cpp):
 * attention.sliding_window_pattern, an integer n (layer l slides when
 * l % n < n - 1) or one bool a layer, default 2 (Gemma 2) or 6 (Gemma 3);
 * Gemma 2's window defaults to 4096 and its soft-caps to 50 and 30; Gemma 3's
 * sliding layers take rope.freq_base_swa (default 10000) without the scaling;
 * the q.k scale, which llama.cpp derives from the size (1/sqrt(width / heads)
 * for the 27B models, 46 or 62 layers, else 1/sqrt(head_dim)), is
 * attention.scale when the file has it (loom convert writes it). */
static loom_status read_gemma(const loom_gguf *g, loom_llama_config *c, int has_window) {
    const char *path = loom_gguf_path(g);
    int gemma2 = c->family == LOOM_FAMILY_GEMMA2;
    if (!has_window && gemma2) c->sliding_window = 4096;
    char key[128];
    int present;
    c->swa_pattern = gemma2 ? 2 : 6;
    LOOM_TRY(meta_key(g, c, "attention.sliding_window_pattern", 0, key, &present));
    if (present && loom_gguf_kv_type(g, loom_gguf_find_key(g, key)) == LOOM_GGUF_ARRAY) {
        loom_gguf_type et;
        uint64_t n;
        LOOM_TRY(loom_gguf_get_arr_info(g, key, &et, &n));
        LOOM_RETURN_IF(n != (uint64_t)c->n_layers || (et != LOOM_GGUF_BOOL && et != LOOM_GGUF_UINT8 &&
                       et != LOOM_GGUF_INT32 && et != LOOM_GGUF_UINT32), LOOM_ERR_FORMAT,
                       "%s: %s must hold one bool for each of the %d layers", path, key, c->n_layers);
        int32_t *sl = malloc(sizeof(int32_t) * (size_t)c->n_layers);
        LOOM_RETURN_IF(!sl, LOOM_ERR_NOMEM, "%s: out of memory", path);
        loom_status s = loom_gguf_get_arr_i32(g, key, sl, n);
        int p = -1, all = 1;
        for (int l = 0; s == LOOM_OK && l < c->n_layers; l++) all &= sl[l] != 0;
        for (int q = 1; s == LOOM_OK && !all && p < 0 && q <= c->n_layers + 1; q++) {
            int fits = 1;
            for (int l = 0; l < c->n_layers && fits; l++) fits = (sl[l] != 0) == (l % q < q - 1);
            if (fits) p = q;
        }
        free(sl);
        LOOM_TRY(s);
        LOOM_RETURN_IF(!all && p < 0, LOOM_ERR_UNSUPPORTED, "%s: %s is not a repeating pattern of sliding layers "
                       "followed by one full-attention layer", path, key);
        c->swa_pattern = all ? 0 : p;
    } else if (present) {
        int64_t v;
        LOOM_TRY(loom_gguf_get_i64(g, key, &v));
        LOOM_RETURN_IF(v < 0 || v > 4096, LOOM_ERR_FORMAT, "%s: impossible %s = %lld", path, key, (long long)v);
        c->swa_pattern = (int)v;
    }
    LOOM_TRY(get_float0(g, c, "attn_logit_softcapping", gemma2 ? 50.0f : 0.0f, &c->attn_softcap));
    LOOM_TRY(get_float0(g, c, "final_logit_softcapping", gemma2 ? 30.0f : 0.0f, &c->final_softcap));
    if (!gemma2) LOOM_TRY(get_float0(g, c, "rope.freq_base_swa", 10000.0f, &c->rope_theta_swa));
    int big = c->n_layers == (gemma2 ? 46 : 62);
    c->attn_scale = 1.0f / sqrtf((float)(big ? c->dim / c->n_heads : c->head_dim));
    LOOM_TRY(get_float0(g, c, "attention.scale", c->attn_scale, &c->attn_scale));
    return LOOM_OK;
}

static loom_status read_config(const loom_gguf *g, loom_llama_config *c) {
    const char *path = loom_gguf_path(g), *arch;
    size_t alen;
    LOOM_TRY(loom_gguf_get_str(g, "general.architecture", &arch, &alen));
    c->family = LOOM_FAMILY_COUNT;
    for (int f = 0; f < LOOM_FAMILY_COUNT; f++)
        if (str_is(arch, alen, loom_llama_family_name((loom_llama_family)f))) c->family = (loom_llama_family)f;
    LOOM_RETURN_IF(c->family == LOOM_FAMILY_COUNT, LOOM_ERR_UNSUPPORTED,
                   "%s: unsupported architecture '%.*s' (general.architecture); loom runs 'llama' "
                   "(Llama 2/3, SmolLM2, TinyLlama, Mistral, Mixtral), 'qwen2', 'qwen3', 'phi3', 'gemma2', 'gemma3' and 'qwen3moe' "
                   "models", path,
                   (int)(alen > 64 ? 64 : alen), arch);
    const char *fam = loom_llama_family_name(c->family);
    LOOM_TRY(get_int(g, c, "embedding_length", -1, &c->dim));
    LOOM_TRY(get_int(g, c, "feed_forward_length", -1, &c->hidden_dim));
    LOOM_TRY(get_int(g, c, "block_count", -1, &c->n_layers));
    LOOM_TRY(get_int(g, c, "attention.head_count", -1, &c->n_heads));
    LOOM_TRY(get_int(g, c, "attention.head_count_kv", c->n_heads, &c->n_kv_heads));
    LOOM_TRY(get_int(g, c, "context_length", -1, &c->seq_len));
    LOOM_TRY(get_int(g, c, "attention.key_length", c->dim / c->n_heads, &c->head_dim));
    int vlen;
    LOOM_TRY(get_int(g, c, "attention.value_length", c->head_dim, &vlen));
    LOOM_RETURN_IF(vlen != c->head_dim, LOOM_ERR_UNSUPPORTED,
                   "%s: head sizes key %d / value %d differ (loom needs them equal)", path, c->head_dim, vlen);
    LOOM_TRY(get_int(g, c, "rope.dimension_count", c->head_dim, &c->n_rot));
    LOOM_RETURN_IF(c->n_rot > c->head_dim || c->n_rot % 2, LOOM_ERR_FORMAT,
                   "%s: %s.rope.dimension_count %d must be even and <= head size %d", path, fam,
                   c->n_rot, c->head_dim);
    LOOM_TRY(get_float(g, c, "rope.freq_base", 10000.0f, &c->rope_theta));
    LOOM_TRY(get_float(g, c, "attention.layer_norm_rms_epsilon", -1.0f, &c->rms_eps));
    /* linear RoPE scaling: type "linear", or (older files) a factor alone */
    c->rope_freq_scale = 1.0f;
    char key[128];
    int linear, typed;
    LOOM_TRY(meta_key(g, c, "rope.scaling.factor", 0, key, &linear));
    LOOM_TRY(meta_key(g, c, "rope.scaling.type", 0, key, &typed));
    if (typed) {
        const char *t;
        size_t tl;
        LOOM_TRY(loom_gguf_get_str(g, key, &t, &tl));
        linear = str_is(t, tl, "linear");
        LOOM_RETURN_IF(!linear && !str_is(t, tl, "none"), LOOM_ERR_UNSUPPORTED,
                       "%s: %s '%.*s' is not supported (none, linear)", path, key, (int)(tl > 32 ? 32 : tl), t);
    }
    if (linear) {
        float f;
        LOOM_TRY(get_float(g, c, "rope.scaling.factor", -1.0f, &f));
        c->rope_freq_scale = 1.0f / f;
    }
    /* a sliding window (Mistral as loom convert writes it; 0 is llama.cpp's "none") */
    int window;
    LOOM_TRY(meta_key(g, c, "attention.sliding_window", 0, key, &window));
    int64_t w = 0;
    if (window) LOOM_TRY(loom_gguf_get_i64(g, key, &w));
    LOOM_RETURN_IF(w < 0 || w > MAX_DIM, LOOM_ERR_FORMAT, "%s: impossible %s = %lld (expected 0..%d)", path, key,
                   (long long)w, MAX_DIM);
    c->sliding_window = (int)w;
    if (c->family == LOOM_FAMILY_GEMMA2 || c->family == LOOM_FAMILY_GEMMA3) {
        LOOM_TRY(read_gemma(g, c, window));
    } else {
        LOOM_TRY(meta_key(g, c, "attention.sliding_window_pattern", 0, key, &window));
        LOOM_RETURN_IF(window, LOOM_ERR_UNSUPPORTED,
                       "%s: %s (sliding-window attention in some layers only) is not supported", path, key);
    }
    LOOM_RETURN_IF(loom_gguf_find_tensor(g, "rope_freqs.weight") >= 0, LOOM_ERR_UNSUPPORTED,
                   "%s: tensor rope_freqs.weight (Llama 3.1 frequency factors) is not supported", path);
    LOOM_RETURN_IF(loom_gguf_find_tensor(g, "rope_factors_long.weight") >= 0, LOOM_ERR_UNSUPPORTED,
                   "%s: tensor rope_factors_long.weight (Phi-3's long-context RoPE, longrope) is not supported",
                   path);
    /* llama.cpp permutes a llama model's Q/K rows for adjacent pairs; Qwen's and Gemma's keep HF's halves */
    c->rope_mode = c->family == LOOM_FAMILY_LLAMA ? LOOM_ROPE_INTERLEAVED : LOOM_ROPE_HALF;
    c->qkv_bias = c->family == LOOM_FAMILY_QWEN2;
    c->qk_norm = c->family == LOOM_FAMILY_QWEN3 || c->family == LOOM_FAMILY_GEMMA3 || c->family == LOOM_FAMILY_QWEN3MOE;
    c->merged = c->family == LOOM_FAMILY_PHI3; /* blk.N.attn_qkv, blk.N.ffn_up of [2 H, D] */
    /* a mixture of experts: Mixtral under "llama", Qwen3-MoE */
    LOOM_TRY(get_int(g, c, "expert_count", 0, &c->n_experts));
    if (c->family == LOOM_FAMILY_QWEN3MOE)
        LOOM_RETURN_IF(c->n_experts < 1, LOOM_ERR_FORMAT, "%s: missing key 'qwen3moe.expert_count'", path);
    if (c->n_experts > 0) {
        LOOM_TRY(get_int(g, c, "expert_used_count", -1, &c->n_experts_used));
        LOOM_RETURN_IF(c->n_experts_used > c->n_experts, LOOM_ERR_FORMAT,
                       "%s: %s.expert_used_count %d is larger than %s.expert_count %d", path, fam,
                       c->n_experts_used, fam, c->n_experts);
        /* the experts' width (Qwen3-MoE; feed_forward_length is then a dense FFN's) */
        LOOM_TRY(get_int(g, c, "expert_feed_forward_length", c->hidden_dim, &c->hidden_dim));
        /* llama.cpp renormalises the top-k weights of both unless the file says otherwise */
        int norm;
        LOOM_TRY(meta_key(g, c, "expert_weights_norm", 0, key, &norm));
        c->moe_renorm = 1;
        if (norm) LOOM_TRY(loom_gguf_get_bool(g, key, &c->moe_renorm));
        LOOM_RETURN_IF(loom_gguf_find_tensor(g, "blk.0.ffn_gate_inp_shexp.weight") >= 0, LOOM_ERR_UNSUPPORTED,
                       "%s: shared experts (blk.N.ffn_*_shexp) are not supported", path);
    }
    return LOOM_OK;
}

/* Where the tensors converted at load go: one block sized by conv_bytes; the
 * conversions run on n_threads threads. */
typedef struct {
    uint8_t *base;
    size_t used, cap;
    int n_threads;
    loom_llama_weights *w; /* counts what is converted */
} conv_buf;

/* A run of whole blocks of one tensor, converted by one thread. */
typedef struct {
    uint32_t type;
    const uint8_t *src;
    uint8_t *dst;
    int64_t n;
    loom_status st;
} conv_part;

static void *conv_part_run(void *arg) {
    conv_part *c = arg;
    c->st = loom_ggml_convert_row(c->type, c->src, c->n, c->dst);
    return NULL;
}

/* loom_ggml_convert_row of the whole tensor, its blocks split over up to nth
 * threads (the caller's is one). A failure is converted again on this thread,
 * whole, so that the error (thread-local) names the tensor's own block. */
static loom_status convert_parallel(uint32_t type, loom_dtype to, const void *src, int64_t n, void *dst, int nth) {
    enum { MAX_PARTS = 64 };
    int parts = nth < MAX_PARTS ? nth : MAX_PARTS;
    if (n < (1 << 17) || parts < 2) return loom_ggml_convert_row(type, src, n, dst); /* small: not worth a thread */
    const int64_t be = loom_ggml_block_elems(type), nb = n / be;
    const size_t sbb = loom_ggml_block_bytes(type), dbb = (size_t)(be / 32) * loom_dtype_block_bytes(to);
    conv_part c[MAX_PARTS];
    pthread_t th[MAX_PARTS];
    int started[MAX_PARTS] = {0};
    for (int p = 0; p < parts; p++) {
        int64_t b0 = nb * p / parts, b1 = nb * (p + 1) / parts;
        c[p] = (conv_part){type, (const uint8_t *)src + (size_t)b0 * sbb, (uint8_t *)dst + (size_t)b0 * dbb,
                           (b1 - b0) * be, LOOM_OK};
        if (p > 0) started[p] = pthread_create(&th[p], NULL, conv_part_run, &c[p]) == 0;
    }
    conv_part_run(&c[0]);
    int ok = c[0].st == LOOM_OK;
    for (int p = 1; p < parts; p++) {
        if (started[p]) pthread_join(th[p], NULL);
        else conv_part_run(&c[p]); /* no thread: this one converts it */
        ok = ok && c[p].st == LOOM_OK;
    }
    return ok ? LOOM_OK : loom_ggml_convert_row(type, src, n, dst);
}

/* Bytes a tensor takes once converted (0: its type is used in place). */
static size_t conv_bytes(const loom_gguf_tensor_info *info) {
    loom_dtype to;
    if (!loom_ggml_convert_target(info->ggml_type, &to)) return 0;
    return ((size_t)loom_gguf_tensor_nelem(info) / 32 * loom_dtype_block_bytes(to) + 63) & ~(size_t)63;
}

/* Tensor i as loom_gguf_tensor_at gives it, or, for a type loom converts at
 * load (loom_ggml_convert_target), converted into cv. */
static loom_status get_tensor(const loom_gguf *g, int64_t i, conv_buf *cv, loom_tensor *t) {
    loom_gguf_tensor_info info;
    LOOM_TRY(loom_gguf_tensor_info_at(g, i, &info));
    loom_dtype to;
    if (!loom_ggml_convert_target(info.ggml_type, &to)) return loom_gguf_tensor_at(g, i, t);
    size_t bytes = conv_bytes(&info);
    LOOM_RETURN_IF(!cv->base || cv->used + bytes > cv->cap, LOOM_ERR_INVALID_ARG,
                   "%s: no room to convert tensor '%s'", loom_gguf_path(g), info.name);
    uint8_t *dst = cv->base + cv->used;
    if (convert_parallel(info.ggml_type, to, info.data, loom_gguf_tensor_nelem(&info), dst, cv->n_threads) !=
        LOOM_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", loom_last_error());
        return loom_set_error(LOOM_ERR_FORMAT, "%s: tensor '%s' (%s): %s", loom_gguf_path(g), info.name,
                              loom_ggml_type_name(info.ggml_type), why);
    }
    cv->used += bytes;
    if (info.ggml_type < 32) cv->w->n_converted[info.ggml_type]++;
    cv->w->converted_bytes += bytes;
    loom_gguf_release_tensor_pages(g, i); /* the converted copy is what stays resident */
    int64_t shape[LOOM_MAX_DIMS];
    loom_gguf_tensor_shape(&info, shape);
    LOOM_TRY(loom_tensor_init(t, to, info.n_dims, shape, dst));
    loom_tensor_set_name(t, "%s", info.name);
    return LOOM_OK;
}

/* Takes tensor name, checking its shape (outermost first) and dtype class. */
static loom_status take3(const loom_gguf *g, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                         int norm, conv_buf *cv, loom_tensor *t);
static loom_status take(const loom_gguf *g, const char *name, int ndim, int64_t d0, int64_t d1,
                        int norm, conv_buf *cv, loom_tensor *t) {
    return take3(g, name, ndim, d0, d1, 0, norm, cv, t);
}

/* Takes tensor name, checking its shape (outermost first: [d0], [d0, d1] or,
 * experts, [d0, d1, d2]) and dtype class. */
static loom_status take3(const loom_gguf *g, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                         int norm, conv_buf *cv, loom_tensor *t) {
    const char *path = loom_gguf_path(g);
    int64_t ti = loom_gguf_find_tensor(g, name);
    LOOM_RETURN_IF(ti < 0, LOOM_ERR_FORMAT, "%s: missing tensor '%s'", path, name);
    LOOM_TRY(get_tensor(g, ti, cv, t));
    int ok = ndim == 1   ? loom_tensor_nelem(t) == d0 && (t->ndim == 1 || t->shape[0] == 1)
             : ndim == 2 ? t->ndim == 2 && t->shape[0] == d0 && t->shape[1] == d1
                         : t->ndim == 3 && t->shape[0] == d0 && t->shape[1] == d1 && t->shape[2] == d2;
    if (!ok) {
        char got[96];
        int o = 0;
        for (int i = 0; i < t->ndim && o < (int)sizeof got - 24; i++)
            o += snprintf(got + o, sizeof got - (size_t)o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        if (ndim == 1)
            return loom_set_error(LOOM_ERR_SHAPE, "%s: tensor '%s' has shape [%s], expected [%lld]",
                                  path, name, got, (long long)d0);
        if (ndim == 3)
            return loom_set_error(LOOM_ERR_SHAPE, "%s: tensor '%s' has shape [%s], expected [%lld, %lld, %lld]",
                                  path, name, got, (long long)d0, (long long)d1, (long long)d2);
        return loom_set_error(LOOM_ERR_SHAPE, "%s: tensor '%s' has shape [%s], expected [%lld, %lld]",
                              path, name, got, (long long)d0, (long long)d1);
    }
    if (norm) {
        LOOM_RETURN_IF(t->dtype != LOOM_F32, LOOM_ERR_DTYPE,
                       "%s: tensor '%s' is %s; vectors (norms, biases) must be f32", path, name,
                       loom_dtype_name(t->dtype));
        if (t->ndim != 1) {
            const int64_t s1[1] = {d0};
            LOOM_TRY(loom_tensor_init(t, LOOM_F32, 1, s1, t->data));
            loom_tensor_set_name(t, "%s", name);
        }
    } else {
        LOOM_RETURN_IF(t->dtype == LOOM_I32 || t->dtype == LOOM_I8, LOOM_ERR_DTYPE,
                       "%s: tensor '%s' is %s; weights must be f32, f16, bf16, q8_0, q4_0 or q4_1",
                       path, name, loom_dtype_name(t->dtype));
    }
    return LOOM_OK;
}

static loom_status take_weights(const loom_gguf *g, const loom_llama_config *c, loom_llama_weights *w,
                                int n_threads) {
    const int64_t D = c->dim, V = c->vocab_size;
    conv_buf cv = {.n_threads = n_threads, .w = w};
    for (int64_t i = 0; i < loom_gguf_n_tensors(g); i++) { /* the block for every tensor to convert */
        loom_gguf_tensor_info info;
        LOOM_TRY(loom_gguf_tensor_info_at(g, i, &info));
        cv.cap += conv_bytes(&info);
    }
    if (cv.cap) {
        w->owned = cv.base = loom_alloc_aligned(cv.cap, LOOM_ALIGN);
        LOOM_RETURN_IF(!cv.base, LOOM_ERR_NOMEM, "%s: cannot allocate %zu bytes for the tensors converted "
                       "at load", loom_gguf_path(g), cv.cap);
    }
    LOOM_TRY(take(g, "token_embd.weight", 2, V, D, 0, &cv, &w->tok_embd));
    char nm[LOOM_NAME_MAX];
    for (int l = 0; l < c->n_layers; l++) {
        for (int i = 0; i < LOOM_LLAMA_LAYER_TENSORS; i++) {
            const loom_llama_layer_tensor *lt = &loom_llama_layer_tensors[i];
            if (!loom_llama_layer_has(c, lt)) continue;
            snprintf(nm, sizeof nm, "blk.%d.%s", l, lt->gguf);
            int64_t rows = loom_llama_dim_size(c, lt->rows), cols = lt->norm ? 1 : loom_llama_dim_size(c, lt->cols);
            if (lt->experts) /* [n_experts, rows, cols] */
                LOOM_TRY(take3(g, nm, 3, c->n_experts, rows, cols, 0, &cv, loom_llama_layer_field(&w->layers[l], lt)));
            else
                LOOM_TRY(take(g, nm, lt->norm ? 1 : 2, rows, cols, lt->norm, &cv,
                              loom_llama_layer_field(&w->layers[l], lt)));
        }
        LOOM_TRY(loom_llama_layer_views(c, &w->layers[l]));
    }
    LOOM_TRY(take(g, "output_norm.weight", 1, D, 1, 1, &cv, &w->out_norm));
    if (loom_gguf_find_tensor(g, "output.weight") >= 0) {
        LOOM_TRY(take(g, "output.weight", 2, V, D, 0, &cv, &w->output));
    } else {
        w->output = w->tok_embd;
        loom_tensor_set_name(&w->output, "output (tied to token_embd)");
    }
    return LOOM_OK;
}

loom_status loom_llama_weights_from_gguf(const loom_gguf *g, const loom_llama_config *c, loom_llama_weights *w,
                                        int n_threads) {
    LOOM_RETURN_IF(!g || !c || !w || !w->layers, LOOM_ERR_INVALID_ARG, "llama_weights_from_gguf: NULL argument");
    return take_weights(g, c, w, n_threads);
}

int loom_llama_converted_summary(const loom_llama_weights *w, char *buf, size_t n) {
    size_t o = 0;
    int any = 0;
    if (n) buf[0] = '\0';
    for (uint32_t t = 0; w && t < 32; t++) {
        loom_dtype to;
        if (!w->n_converted[t] || !loom_ggml_convert_target(t, &to) || o >= n) continue;
        o += (size_t)snprintf(buf + o, n - o, "%s%s -> %s x%d", any ? ", " : "", loom_ggml_type_name(t),
                              loom_dtype_name(to), w->n_converted[t]);
        any = 1;
    }
    if (any && o < n) snprintf(buf + o, n - o, " (%.1f MiB)", (double)w->converted_bytes / (1 << 20));
    return any;
}

loom_status loom_llama_config_from_gguf(const loom_gguf *g, loom_llama_config *cfg) {
    LOOM_RETURN_IF(!g || !cfg, LOOM_ERR_INVALID_ARG, "llama_config_from_gguf: NULL argument");
    memset(cfg, 0, sizeof *cfg);
    const char *path = loom_gguf_path(g);
    LOOM_TRY(read_config(g, cfg));
    /* vocabulary: the metadata count when present, else the embedding's rows */
    int64_t ti = loom_gguf_find_tensor(g, "token_embd.weight");
    LOOM_RETURN_IF(ti < 0, LOOM_ERR_FORMAT, "%s: missing tensor 'token_embd.weight'", path);
    loom_gguf_tensor_info info;
    LOOM_TRY(loom_gguf_tensor_info_at(g, ti, &info));
    int64_t rows = info.n_dims >= 2 ? info.ne[1] : 0;
    LOOM_TRY(get_int(g, cfg, "vocab_size", rows > 0 && rows <= MAX_DIM ? rows : -1, &cfg->vocab_size));
    cfg->shared_classifier = loom_gguf_find_tensor(g, "output.weight") < 0;
    return loom_llama_config_check(cfg, path);
}

loom_status loom_llama_load_gguf(const char *path, int n_threads, loom_gguf **gguf, loom_llama_config *cfg,
                                 loom_llama_weights *w) {
    LOOM_RETURN_IF(!path || !gguf || !cfg || !w, LOOM_ERR_INVALID_ARG, "llama_load_gguf: NULL argument");
    memset(cfg, 0, sizeof *cfg);
    memset(w, 0, sizeof *w);
    *gguf = NULL;
    loom_gguf *g;
    LOOM_TRY(loom_gguf_open(path, &g));
    loom_status s = loom_llama_config_from_gguf(g, cfg);
    if (s != LOOM_OK) goto fail;
    w->layers = calloc((size_t)cfg->n_layers, sizeof *w->layers);
    if (!w->layers) {
        s = loom_set_error(LOOM_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((s = take_weights(g, cfg, w, n_threads)) != LOOM_OK) goto fail;
    *gguf = g;
    return LOOM_OK;
fail:
    free(w->layers);
    w->layers = NULL;
    loom_free_aligned(w->owned);
    w->owned = NULL;
    loom_gguf_close(g);
    return s;
}
