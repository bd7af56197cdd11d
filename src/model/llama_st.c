/* Llama from Hugging Face safetensors + config.json. */
#include "model/llama_st.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/status.h"
#include "model/hf_config.h"

void loom_rope_permute_rows(void *dst, const void *src, int n_head, int head_dim, int64_t cols, size_t es,
                            int to_half) {
    size_t row = (size_t)cols * es;
    int half = head_dim / 2;
    for (int h = 0; h < n_head; h++)
        for (int i = 0; i < half; i++)
            for (int p = 0; p < 2; p++) {
                /* interleaved row 2i+p of the head <-> half row p*half + i */
                size_t inter = (size_t)h * head_dim + 2 * (size_t)i + p;
                size_t hrow = (size_t)h * head_dim + (size_t)p * half + i;
                size_t d = to_half ? hrow : inter, s = to_half ? inter : hrow;
                memcpy((char *)dst + d * row, (const char *)src + s * row, row);
            }
}

/* The family a config.json describes (model_type, else architectures[0]);
 * LOOM_FAMILY_COUNT when none. */
static loom_llama_family family_of(const loom_hf_config *h) {
    static const struct { const char *type, *arch; loom_llama_family f; } known[] = {
        {"llama", "LlamaForCausalLM", LOOM_FAMILY_LLAMA},
        {"mistral", "MistralForCausalLM", LOOM_FAMILY_LLAMA},
        {"qwen2", "Qwen2ForCausalLM", LOOM_FAMILY_QWEN2},
        {"qwen3", "Qwen3ForCausalLM", LOOM_FAMILY_QWEN3},
        {"phi3", "Phi3ForCausalLM", LOOM_FAMILY_PHI3},
        {"gemma2", "Gemma2ForCausalLM", LOOM_FAMILY_GEMMA2},
        {"gemma3_text", "Gemma3ForCausalLM", LOOM_FAMILY_GEMMA3},
        {"mixtral", "MixtralForCausalLM", LOOM_FAMILY_LLAMA},
        {"qwen3_moe", "Qwen3MoeForCausalLM", LOOM_FAMILY_QWEN3MOE},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(h->model_type, known[i].type) == 0 || strcmp(h->architecture, known[i].arch) == 0)
            return known[i].f;
    return LOOM_FAMILY_COUNT;
}

static loom_status shape_is(const loom_tensor *t, const char *name, int64_t d0, int64_t d1) {
    int ok = t->ndim == (d1 ? 2 : 1) && t->shape[0] == d0 && (!d1 || t->shape[1] == d1);
    if (ok) return LOOM_OK;
    if (d1)
        return loom_set_error(LOOM_ERR_SHAPE, "llama: tensor '%s' has shape [%lld, %lld] (ndim %d): expected "
                              "[%lld, %lld]", name, (long long)t->shape[0],
                              (long long)(t->ndim > 1 ? t->shape[1] : 1), t->ndim, (long long)d0, (long long)d1);
    return loom_set_error(LOOM_ERR_SHAPE, "llama: tensor '%s' has shape [%lld] (ndim %d): expected [%lld]", name,
                          (long long)t->shape[0], t->ndim, (long long)d0);
}

static loom_status mat(const loom_safetensors *st, const char *name, int64_t d0, int64_t d1, loom_tensor *t) {
    LOOM_TRY(loom_safetensors_get(st, name, t));
    return shape_is(t, name, d0, d1);
}

/* A vector (norm or bias) copied to f32; plus_one: 1 + w (a Gemma norm, as
 * transformers computes it in f32 and llama.cpp's converter stores it). */
static loom_status vec(const loom_safetensors *st, const char *name, int64_t d0, int plus_one, float **next,
                       loom_tensor *t) {
    loom_tensor s;
    LOOM_TRY(loom_safetensors_get(st, name, &s));
    LOOM_TRY(shape_is(&s, name, d0, 0));
    float *dst = *next;
    *next += d0;
    for (int64_t i = 0; i < d0; i++) {
        dst[i] = s.dtype == LOOM_F32   ? ((const float *)s.data)[i]
                 : s.dtype == LOOM_F16 ? loom_f16_to_f32(((const uint16_t *)s.data)[i])
                                       : loom_bf16_to_f32(((const uint16_t *)s.data)[i]);
        if (plus_one) dst[i] = 1.0f + dst[i];
    }
    LOOM_TRY(loom_tensor_init(t, LOOM_F32, 1, &d0, dst));
    loom_tensor_set_name(t, "%.63s", name);
    return LOOM_OK;
}

/* Bytes of the per-expert tensors of t in layer l (each [rows, cols], one dtype),
 * or an error naming the missing or misshaped one. */
static loom_status experts_bytes(const loom_safetensors *st, const loom_llama_config *c,
                                 const loom_llama_layer_tensor *t, int l, size_t *bytes, loom_dtype *dt) {
    int64_t rows = loom_llama_dim_size(c, t->rows), cols = loom_llama_dim_size(c, t->cols);
    for (int e = 0; e < c->n_experts; e++) {
        char n[160];
        loom_tensor x;
        loom_llama_hf_name(c, t, l, e, n, sizeof n);
        LOOM_TRY(mat(st, n, rows, cols, &x));
        LOOM_RETURN_IF(e > 0 && x.dtype != *dt, LOOM_ERR_DTYPE, "llama: tensor '%s' is %s, expert 0's is %s", n,
                       loom_dtype_name(x.dtype), loom_dtype_name(*dt));
        LOOM_RETURN_IF(loom_dtype_is_quantized(x.dtype), LOOM_ERR_DTYPE, "llama: tensor '%s' is %s", n,
                       loom_dtype_name(x.dtype));
        *dt = x.dtype;
    }
    *bytes = loom_align64((size_t)c->n_experts * (size_t)(rows * cols) * loom_dtype_size(*dt));
    return LOOM_OK;
}

/* The experts of t in layer l stacked into one contiguous [n_experts, rows, cols]
 * tensor at *next (Hugging Face stores one tensor per expert); their shapes and
 * one dtype were checked by experts_bytes when the block was sized. */
static loom_status experts_stack(const loom_safetensors *st, const loom_llama_config *c,
                                 const loom_llama_layer_tensor *t, int l, unsigned char **next, loom_tensor *out) {
    int64_t rows = loom_llama_dim_size(c, t->rows), cols = loom_llama_dim_size(c, t->cols);
    loom_dtype dt = LOOM_F32;
    size_t one = 0;
    for (int e = 0; e < c->n_experts; e++) {
        char n[160];
        loom_tensor x;
        loom_llama_hf_name(c, t, l, e, n, sizeof n);
        LOOM_TRY(mat(st, n, rows, cols, &x));
        LOOM_RETURN_IF(!loom_tensor_is_contiguous(&x), LOOM_ERR_FORMAT, "llama: tensor '%s' is not contiguous", n);
        if (e == 0) dt = x.dtype, one = (size_t)(rows * cols) * loom_dtype_size(dt);
        memcpy(*next + one * (size_t)e, x.data, one);
    }
    const int64_t shape[3] = {c->n_experts, rows, cols};
    LOOM_TRY(loom_tensor_init(out, dt, 3, shape, *next));
    loom_tensor_set_name(out, "model.layers.%d.%s", l, t->gguf);
    *next += loom_align64((size_t)c->n_experts * one);
    return LOOM_OK;
}

static loom_status config(const char *cfg_path, loom_llama_config *c) {
    loom_hf_config h;
    LOOM_TRY(loom_hf_config_load(cfg_path, &h));
    return loom_llama_config_from_hf(&h, cfg_path, c);
}

loom_status loom_llama_config_from_hf(const loom_hf_config *hc, const char *cfg_path, loom_llama_config *c) {
    const loom_hf_config h = *hc;
    loom_llama_family fam = family_of(&h);
    LOOM_RETURN_IF(fam == LOOM_FAMILY_COUNT, LOOM_ERR_UNSUPPORTED, "llama: '%s' describes architecture '%s' "
                   "(model_type '%s'); the models that load from safetensors are Llama, Mistral, "
                   "Qwen2/2.5, Qwen3, Phi-3, Gemma 2 and Gemma 3 (text), Mixtral and Qwen3-MoE", cfg_path,
                   h.architecture[0] ? h.architecture : "?", h.model_type[0] ? h.model_type : "?");
    /* Llama's and Qwen3's attention_bias adds a bias to the output projection too */
    LOOM_RETURN_IF(h.attention_bias && fam != LOOM_FAMILY_QWEN2, LOOM_ERR_UNSUPPORTED,
                   "llama: '%s': attention_bias (biases on the Q, K, V and output projections) is not "
                   "supported for model_type '%s'", cfg_path, h.model_type[0] ? h.model_type : "?");
    LOOM_RETURN_IF(h.use_sliding_window, LOOM_ERR_UNSUPPORTED,
                   "llama: '%s': use_sliding_window (sliding-window attention) is not supported", cfg_path);
    int gemma = fam == LOOM_FAMILY_GEMMA2 || fam == LOOM_FAMILY_GEMMA3;
    /* Gemma's MLP takes hidden_activation (hidden_act is Gemma 1's), by default the tanh form of gelu */
    const char *act = !gemma ? h.hidden_act : h.hidden_activation[0] ? h.hidden_activation : "gelu_pytorch_tanh";
    LOOM_RETURN_IF(!gemma && strcmp(act, "silu") != 0, LOOM_ERR_UNSUPPORTED,
                   "llama: '%s': hidden_act '%s' (only silu is supported)", cfg_path, act);
    LOOM_RETURN_IF(gemma && strcmp(act, "gelu_pytorch_tanh") != 0 && strcmp(act, "gelu_new") != 0,
                   LOOM_ERR_UNSUPPORTED, "llama: '%s': hidden_activation '%s' (Gemma: only gelu_pytorch_tanh is "
                   "supported)", cfg_path, act);
    memset(c, 0, sizeof *c);
    c->family = fam;
    c->qkv_bias = fam == LOOM_FAMILY_QWEN2;
    c->qk_norm = fam == LOOM_FAMILY_QWEN3 || fam == LOOM_FAMILY_QWEN3MOE;
    c->merged = fam == LOOM_FAMILY_PHI3; /* qkv_proj, gate_up_proj */
    int mixtral = strcmp(h.model_type, "mixtral") == 0 || strcmp(h.architecture, "MixtralForCausalLM") == 0;
    if (mixtral || fam == LOOM_FAMILY_QWEN3MOE) {
        LOOM_RETURN_IF(h.num_experts < 1 || h.num_experts_per_tok < 1, LOOM_ERR_FORMAT,
                       "llama: '%s': a mixture of experts needs num_local_experts (or num_experts) and "
                       "num_experts_per_tok", cfg_path);
        LOOM_RETURN_IF(h.decoder_sparse_step != 1 || h.n_mlp_only_layers > 0, LOOM_ERR_UNSUPPORTED,
                       "llama: '%s': dense layers between the sparse ones (decoder_sparse_step %d, "
                       "mlp_only_layers of %d) are not supported", cfg_path, h.decoder_sparse_step,
                       h.n_mlp_only_layers);
        LOOM_RETURN_IF(h.shared_expert_intermediate_size > 0, LOOM_ERR_UNSUPPORTED,
                       "llama: '%s': shared experts (shared_expert_intermediate_size) are not supported", cfg_path);
        c->n_experts = h.num_experts;
        c->n_experts_used = h.num_experts_per_tok;
        /* Mixtral always renormalises; Qwen3-MoE when norm_topk_prob (transformers' default: false) */
        c->moe_renorm = mixtral ? 1 : h.norm_topk_prob == 1;
        c->hf_block_sparse_moe = mixtral;
    }
    c->dim = h.hidden_size;
    c->hidden_dim = fam == LOOM_FAMILY_QWEN3MOE && h.moe_intermediate_size > 0 ? h.moe_intermediate_size
                                                                                : h.intermediate_size;
    c->n_layers = h.num_hidden_layers;
    c->n_heads = h.num_attention_heads;
    c->n_kv_heads = h.num_key_value_heads;
    c->vocab_size = h.vocab_size;
    c->seq_len = h.max_position_embeddings;
    /* Mistral's and Phi-3's sliding window (Qwen2/3 configs carry one too, used only
     * under use_sliding_window, refused above) */
    if (strcmp(h.model_type, "mistral") == 0 || strcmp(h.architecture, "MistralForCausalLM") == 0 ||
        fam == LOOM_FAMILY_PHI3)
        c->sliding_window = h.sliding_window;
    if (gemma) {
        c->qk_norm = fam == LOOM_FAMILY_GEMMA3;
        /* transformers: query_pre_attn_scalar ** -0.5 (its default: head_dim) */
        if (h.query_pre_attn_scalar > 0) c->attn_scale = (float)pow((double)h.query_pre_attn_scalar, -0.5);
        c->attn_softcap = h.attn_logit_softcapping;
        c->final_softcap = h.final_logit_softcapping;
        c->sliding_window = h.sliding_window;
        /* Gemma 2 without layer_types slides every other layer; Gemma 3 without a pattern, 5 of 6 */
        c->swa_pattern = h.swa_pattern >= 0 ? h.swa_pattern : fam == LOOM_FAMILY_GEMMA2 ? 2 : 6;
        if (fam == LOOM_FAMILY_GEMMA3) c->rope_theta_swa = h.rope_local_theta > 0 ? h.rope_local_theta : 10000.0f;
    }
    c->head_dim = h.head_dim;
    c->rope_theta = h.rope_theta;
    c->rms_eps = h.rms_norm_eps;
    c->rope_mode = LOOM_ROPE_HALF;
    /* a partial rotation (Phi-4-mini): the first int(head_dim * factor) dims, as transformers */
    if (h.partial_rotary_factor != 1.0f) {
        c->n_rot = (int)((float)h.head_dim * h.partial_rotary_factor);
        LOOM_RETURN_IF(c->n_rot < 2, LOOM_ERR_FORMAT, "llama: '%s': partial_rotary_factor %g rotates no pair of "
                       "a head of %d", cfg_path, (double)h.partial_rotary_factor, h.head_dim);
    }
    c->shared_classifier = h.tie_word_embeddings;
    if (h.rope_scaling_type[0] && strcmp(h.rope_scaling_type, "default") != 0) {
        LOOM_RETURN_IF(strcmp(h.rope_scaling_type, "linear") != 0, LOOM_ERR_UNSUPPORTED,
                       "llama: '%s': rope type '%s' is not supported (default and linear are)", cfg_path,
                       h.rope_scaling_type);
        c->rope_freq_scale = 1.0f / h.rope_scaling_factor;
    }
    return loom_llama_config_check(c, cfg_path);
}

loom_status loom_llama_load_safetensors(const char *path, loom_safetensors **st, float **owned,
                                        loom_llama_config *c, loom_llama_weights *w) {
    LOOM_RETURN_IF(!path || !st || !owned || !c || !w, LOOM_ERR_INVALID_ARG, "llama: NULL argument");
    *st = NULL;
    *owned = NULL;
    memset(w, 0, sizeof *w);
    char dir[1024];
    struct stat sb;
    LOOM_RETURN_IF(stat(path, &sb) != 0, LOOM_ERR_IO, "llama: cannot open '%s'", path);
    snprintf(dir, sizeof dir, "%s", path);
    if (!S_ISDIR(sb.st_mode)) {
        char *sl = strrchr(dir, '/');
        if (sl) *sl = '\0';
        else snprintf(dir, sizeof dir, ".");
    }
    LOOM_TRY(config(dir, c));
    LOOM_TRY(loom_safetensors_open(path, st));
    int64_t D = c->dim, vec_elems = D; /* the vectors, copied to f32: output norm, then the layers' */
    for (int i = 0; i < LOOM_LLAMA_LAYER_TENSORS; i++)
        if (loom_llama_layer_tensors[i].norm && loom_llama_layer_has(c, &loom_llama_layer_tensors[i]))
            vec_elems += loom_llama_dim_size(c, loom_llama_layer_tensors[i].rows) * c->n_layers;
    float *buf = malloc(sizeof(float) * (size_t)vec_elems);
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    loom_status s = buf && w->layers ? LOOM_OK : loom_set_error(LOOM_ERR_NOMEM, "llama: out of memory");
    float *next = buf;
    if (s == LOOM_OK) s = mat(*st, "model.embed_tokens.weight", c->vocab_size, D, &w->tok_embd);
    if (s == LOOM_OK) s = vec(*st, "model.norm.weight", D, loom_llama_gemma(c), &next, &w->out_norm);
    if (s == LOOM_OK) {
        int has_head = loom_safetensors_find(*st, "lm_head.weight") >= 0;
        if (has_head && !c->shared_classifier) s = mat(*st, "lm_head.weight", c->vocab_size, D, &w->output);
        else if (!has_head && !c->shared_classifier)
            s = loom_set_error(LOOM_ERR_FORMAT, "llama: '%s': lm_head.weight is missing and "
                               "tie_word_embeddings is false", path);
        else w->output = w->tok_embd;
    }
    /* the experts, copied into one block (w->owned): stacked per layer and weight */
    size_t expert_bytes = 0;
    for (int l = 0; l < c->n_layers && s == LOOM_OK && c->n_experts; l++)
        for (int i = 0; i < LOOM_LLAMA_LAYER_TENSORS && s == LOOM_OK; i++) {
            size_t b = 0;
            loom_dtype dt = LOOM_F32;
            if (loom_llama_layer_tensors[i].experts && loom_llama_layer_has(c, &loom_llama_layer_tensors[i]))
                s = experts_bytes(*st, c, &loom_llama_layer_tensors[i], l, &b, &dt);
            expert_bytes += b;
        }
    unsigned char *next_expert = NULL;
    if (s == LOOM_OK && expert_bytes) {
        w->owned = next_expert = loom_alloc_aligned(expert_bytes, 64);
        if (!w->owned) s = loom_set_error(LOOM_ERR_NOMEM, "llama: cannot allocate %zu bytes for the experts", expert_bytes);
    }
    for (int l = 0; l < c->n_layers && s == LOOM_OK; l++) {
        for (int i = 0; i < LOOM_LLAMA_LAYER_TENSORS && s == LOOM_OK; i++) {
            const loom_llama_layer_tensor *lt = &loom_llama_layer_tensors[i];
            if (!loom_llama_layer_has(c, lt)) continue;
            loom_tensor *t = loom_llama_layer_field(&w->layers[l], lt);
            if (lt->experts) {
                s = experts_stack(*st, c, lt, l, &next_expert, t);
                continue;
            }
            char n[160];
            loom_llama_hf_name(c, lt, l, 0, n, sizeof n);
            int64_t rows = loom_llama_dim_size(c, lt->rows);
            /* Gemma's norms (not its biases: it has none) hold 1 + w */
            s = lt->norm ? vec(*st, n, rows, loom_llama_gemma(c) && strstr(lt->hf, "norm") != NULL, &next, t)
                         : mat(*st, n, rows, loom_llama_dim_size(c, lt->cols), t);
        }
        if (s == LOOM_OK) s = loom_llama_layer_views(c, &w->layers[l]); /* merged: row views */
    }
    if (s != LOOM_OK) {
        free(buf);
        loom_free_aligned(w->owned);
        w->owned = NULL;
        free(w->layers);
        w->layers = NULL;
        loom_safetensors_close(*st);
        *st = NULL;
        return s;
    }
    *owned = buf;
    return LOOM_OK;
}
