/* Hugging Face config.json parsing (libcjson). */
#include "model/hf_config.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/file.h"
#include "base/status.h"

loom_status loom_read_text_file(const char *path, char **buf, size_t *len) {
    return loom_read_file(path, (size_t)512 << 20, buf, len);
}

/* An integer field in [lo, hi]: absent -> *out unchanged unless required. */
static loom_status get_int(const cJSON *root, const char *name, const char *key, int required, int lo,
                           int hi, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        LOOM_RETURN_IF(required, LOOM_ERR_FORMAT, "config '%s': required field \"%s\" is missing", name, key);
        return LOOM_OK;
    }
    LOOM_RETURN_IF(!cJSON_IsNumber(v) || floor(v->valuedouble) != v->valuedouble ||
                   v->valuedouble < lo || v->valuedouble > hi, LOOM_ERR_FORMAT,
                   "config '%s': field \"%s\" must be an integer in [%d, %d]", name, key, lo, hi);
    *out = (int)v->valuedouble;
    return LOOM_OK;
}

static loom_status get_float(const cJSON *root, const char *name, const char *key, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return LOOM_OK;
    /* checked after the conversion: a tiny positive double becomes float 0 */
    float f = cJSON_IsNumber(v) ? (float)v->valuedouble : 0.0f;
    LOOM_RETURN_IF(!(f > 0.0f) || f > 1e30f, LOOM_ERR_FORMAT,
                   "config '%s': field \"%s\" must be a positive number", name, key);
    *out = f;
    return LOOM_OK;
}

static loom_status get_str(const cJSON *root, const char *name, const char *key, char *out, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return LOOM_OK;
    LOOM_RETURN_IF(!cJSON_IsString(v) || strlen(v->valuestring) >= cap, LOOM_ERR_FORMAT,
                   "config '%s': field \"%s\" must be a string of fewer than %zu bytes", name, key, cap);
    snprintf(out, cap, "%s", v->valuestring);
    return LOOM_OK;
}

/* A token id field: an integer, or (some configs) a list whose first entry counts. */
static loom_status get_token_id(const cJSON *root, const char *name, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (cJSON_IsArray(v)) v = cJSON_GetArrayItem(v, 0);
    if (!v || cJSON_IsNull(v)) return LOOM_OK;
    LOOM_RETURN_IF(!cJSON_IsNumber(v) || floor(v->valuedouble) != v->valuedouble || v->valuedouble < 0 ||
                   v->valuedouble > 1e9, LOOM_ERR_FORMAT,
                   "config '%s': field \"%s\" must be a non-negative integer", name, key);
    *out = (int)v->valuedouble;
    return LOOM_OK;
}

static loom_status get_bool(const cJSON *root, const char *name, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return LOOM_OK;
    LOOM_RETURN_IF(!cJSON_IsBool(v), LOOM_ERR_FORMAT, "config '%s': field \"%s\" must be true or false", name,
                   key);
    *out = cJSON_IsTrue(v);
    return LOOM_OK;
}

/* The RoPE object key, "rope_scaling" (transformers 4: the scaling alone) or
 * "rope_parameters" (transformers 5: theta, type and scaling in one; read
 * second, it wins): its type, factor and, in rope_parameters, rope_theta,
 * which must agree with a top-level rope_theta. A type is required in
 * rope_scaling and defaults to "default" in rope_parameters. */
static loom_status rope_params(const cJSON *root, const char *name, const char *key, loom_hf_config *c) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!rp || cJSON_IsNull(rp)) return LOOM_OK;
    LOOM_RETURN_IF(!cJSON_IsObject(rp), LOOM_ERR_FORMAT, "config '%s': field \"%s\" must be an object or null",
                   name, key);
    /* Gemma 3 (transformers 5): {"full_attention": {...}, "sliding_attention": {...}}: the
     * full layers' object is read as the model's, the sliding layers' gives their base */
    const cJSON *full = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
    const cJSON *slide = cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention");
    for (const cJSON *it = rp->child; it; it = it->next)
        LOOM_RETURN_IF(cJSON_IsObject(it) && it != full && it != slide, LOOM_ERR_UNSUPPORTED,
                       "config '%s': %s per layer type \"%s\" is not supported (full_attention and "
                       "sliding_attention are)", name, key, it->string ? it->string : "?");
    if (cJSON_IsObject(slide)) {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(slide, "rope_type");
        LOOM_RETURN_IF(st && !(cJSON_IsString(st) && strcmp(st->valuestring, "default") == 0), LOOM_ERR_UNSUPPORTED,
                       "config '%s': %s.sliding_attention.rope_type must be \"default\"", name, key);
        LOOM_TRY(get_float(slide, name, "rope_theta", &c->rope_local_theta));
    }
    if (cJSON_IsObject(full)) rp = full;
    else if (full || slide) /* one of them without the other's object */
        LOOM_RETURN_IF(!cJSON_IsObject(slide) || (full && !cJSON_IsNull(full)), LOOM_ERR_FORMAT,
                       "config '%s': %s.full_attention must be an object", name, key);
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
    if (!ty) ty = cJSON_GetObjectItemCaseSensitive(rp, "type");
    int params = strcmp(key, "rope_parameters") == 0;
    LOOM_RETURN_IF(!(params && !ty) && (!cJSON_IsString(ty) || strlen(ty->valuestring) >= sizeof c->rope_scaling_type),
                   LOOM_ERR_FORMAT, "config '%s': %s needs a \"rope_type\" string", name, key);
    snprintf(c->rope_scaling_type, sizeof c->rope_scaling_type, "%s", ty ? ty->valuestring : "default");
    c->rope_scaling_factor = 1.0f;
    LOOM_TRY(get_float(rp, name, "factor", &c->rope_scaling_factor));
    if (!params) return LOOM_OK;
    LOOM_TRY(get_float(rp, name, "partial_rotary_factor", &c->partial_rotary_factor));
    float theta = 0.0f;
    LOOM_TRY(get_float(rp, name, "rope_theta", &theta));
    if (theta == 0.0f) return LOOM_OK;
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(root, "rope_theta");
    LOOM_RETURN_IF(top && !cJSON_IsNull(top) && c->rope_theta != theta, LOOM_ERR_FORMAT,
                   "config '%s': rope_theta %g and rope_parameters.rope_theta %g differ", name,
                   (double)c->rope_theta, (double)theta);
    c->rope_theta = theta;
    return LOOM_OK;
}

/* Which layers slide (Gemma): layer_types, a list of "sliding_attention" and
 * "full_attention" that must repeat n - 1 sliding layers and one full one (the
 * smallest such n; 0 when every layer slides, 1 when none does), else the
 * integer sliding_window_pattern; -1 when neither is given. */
static loom_status layer_pattern(const cJSON *root, const char *name, loom_hf_config *c) {
    c->swa_pattern = -1;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (!lt || cJSON_IsNull(lt)) {
        int p = -1;
        LOOM_TRY(get_int(root, name, "sliding_window_pattern", 0, 1, 4096, &p));
        c->swa_pattern = p;
        return LOOM_OK;
    }
    int n = cJSON_GetArraySize(lt);
    LOOM_RETURN_IF(!cJSON_IsArray(lt) || n != c->num_hidden_layers, LOOM_ERR_FORMAT,
                   "config '%s': layer_types must list one type for each of the %d layers", name,
                   c->num_hidden_layers);
    unsigned char slides[4096];
    int n_slide = 0, i = 0;
    for (const cJSON *it = lt->child; it; it = it->next, i++) {
        int sl = cJSON_IsString(it) && strcmp(it->valuestring, "sliding_attention") == 0;
        LOOM_RETURN_IF(!sl && !(cJSON_IsString(it) && strcmp(it->valuestring, "full_attention") == 0),
                       LOOM_ERR_UNSUPPORTED, "config '%s': layer_types[%d] is not \"sliding_attention\" or "
                       "\"full_attention\"", name, i);
        slides[i] = (unsigned char)sl;
        n_slide += sl;
    }
    if (n_slide == n) return c->swa_pattern = 0, LOOM_OK;
    for (int p = 1; p <= n + 1; p++) {
        int fits = 1;
        for (int l = 0; l < n && fits; l++) fits = slides[l] == (l % p < p - 1);
        if (fits) return c->swa_pattern = p, LOOM_OK;
    }
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "config '%s': layer_types is not a repeating pattern of sliding "
                          "layers followed by one full-attention layer", name);
}

static loom_status parse_root(const cJSON *root, const char *name, loom_hf_config *c) {
    LOOM_RETURN_IF(!cJSON_IsObject(root), LOOM_ERR_FORMAT, "config '%s' is not a JSON object", name);
    LOOM_TRY(get_str(root, name, "model_type", c->model_type, sizeof c->model_type));
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (cJSON_IsArray(archs) && cJSON_GetArraySize(archs) > 0) {
        const cJSON *a0 = cJSON_GetArrayItem(archs, 0);
        LOOM_RETURN_IF(!cJSON_IsString(a0), LOOM_ERR_FORMAT,
                       "config '%s': \"architectures\" must list strings", name);
        snprintf(c->architecture, sizeof c->architecture, "%s", a0->valuestring);
    }
    int bert = strcmp(c->model_type, "bert") == 0 || strncmp(c->architecture, "Bert", 4) == 0;
    const int big = 1 << 24;
    LOOM_TRY(get_int(root, name, "hidden_size", 1, 1, big, &c->hidden_size));
    LOOM_TRY(get_int(root, name, "intermediate_size", 1, 1, big, &c->intermediate_size));
    LOOM_TRY(get_int(root, name, "num_hidden_layers", 1, 1, 4096, &c->num_hidden_layers));
    LOOM_TRY(get_int(root, name, "num_attention_heads", 1, 1, 4096, &c->num_attention_heads));
    c->num_key_value_heads = c->num_attention_heads;
    LOOM_TRY(get_int(root, name, "num_key_value_heads", 0, 1, 4096, &c->num_key_value_heads));
    LOOM_TRY(get_int(root, name, "vocab_size", 1, 1, big, &c->vocab_size));
    c->max_position_embeddings = bert ? 512 : 2048;
    LOOM_TRY(get_int(root, name, "max_position_embeddings", 0, 1, 1 << 26, &c->max_position_embeddings));
    c->type_vocab_size = 2;
    LOOM_TRY(get_int(root, name, "type_vocab_size", 0, 0, 1 << 16, &c->type_vocab_size));
    c->head_dim = c->hidden_size / c->num_attention_heads;
    LOOM_TRY(get_int(root, name, "head_dim", 0, 1, 4096, &c->head_dim));
    c->tie_word_embeddings = bert ? 1 : 0;
    LOOM_TRY(get_bool(root, name, "tie_word_embeddings", &c->tie_word_embeddings));
    LOOM_TRY(get_bool(root, name, "attention_bias", &c->attention_bias));
    LOOM_TRY(get_bool(root, name, "use_sliding_window", &c->use_sliding_window));
    LOOM_TRY(get_int(root, name, "sliding_window", 0, 1, 1 << 26, &c->sliding_window));
    c->rms_norm_eps = 1e-6f;
    c->layer_norm_eps = 1e-12f;
    c->rope_theta = 10000.0f;
    LOOM_TRY(get_float(root, name, "rms_norm_eps", &c->rms_norm_eps));
    LOOM_TRY(get_float(root, name, "layer_norm_eps", &c->layer_norm_eps));
    LOOM_TRY(get_float(root, name, "rope_theta", &c->rope_theta));
    snprintf(c->hidden_act, sizeof c->hidden_act, "%s", bert ? "gelu" : "silu");
    LOOM_TRY(get_str(root, name, "hidden_act", c->hidden_act, sizeof c->hidden_act));
    c->rope_scaling_factor = 1.0f;
    c->partial_rotary_factor = 1.0f;
    LOOM_TRY(get_float(root, name, "partial_rotary_factor", &c->partial_rotary_factor));
    LOOM_TRY(rope_params(root, name, "rope_scaling", c));
    LOOM_TRY(rope_params(root, name, "rope_parameters", c));
    LOOM_TRY(get_int(root, name, "num_experts", 0, 1, 1 << 16, &c->num_experts));
    LOOM_TRY(get_int(root, name, "num_local_experts", 0, 1, 1 << 16, &c->num_experts));
    LOOM_TRY(get_int(root, name, "num_experts_per_tok", 0, 1, 1 << 16, &c->num_experts_per_tok));
    LOOM_TRY(get_int(root, name, "moe_intermediate_size", 0, 1, big, &c->moe_intermediate_size));
    LOOM_TRY(get_int(root, name, "shared_expert_intermediate_size", 0, 0, big, &c->shared_expert_intermediate_size));
    c->norm_topk_prob = -1;
    LOOM_TRY(get_bool(root, name, "norm_topk_prob", &c->norm_topk_prob));
    c->decoder_sparse_step = 1;
    LOOM_TRY(get_int(root, name, "decoder_sparse_step", 0, 0, 4096, &c->decoder_sparse_step));
    const cJSON *mlp_only = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
    LOOM_RETURN_IF(mlp_only && !cJSON_IsNull(mlp_only) && !cJSON_IsArray(mlp_only), LOOM_ERR_FORMAT,
                   "config '%s': field \"mlp_only_layers\" must be a list", name);
    c->n_mlp_only_layers = cJSON_IsArray(mlp_only) ? cJSON_GetArraySize(mlp_only) : 0;
    c->bos_token_id = c->eos_token_id = c->pad_token_id = -1;
    LOOM_TRY(get_token_id(root, name, "bos_token_id", &c->bos_token_id));
    LOOM_TRY(get_token_id(root, name, "eos_token_id", &c->eos_token_id));
    LOOM_TRY(get_token_id(root, name, "pad_token_id", &c->pad_token_id));
    LOOM_TRY(get_str(root, name, "hidden_activation", c->hidden_activation, sizeof c->hidden_activation));
    LOOM_TRY(get_float(root, name, "query_pre_attn_scalar", &c->query_pre_attn_scalar));
    LOOM_TRY(get_float(root, name, "attn_logit_softcapping", &c->attn_logit_softcapping));
    LOOM_TRY(get_float(root, name, "final_logit_softcapping", &c->final_logit_softcapping));
    if (c->rope_local_theta == 0.0f) LOOM_TRY(get_float(root, name, "rope_local_base_freq", &c->rope_local_theta));
    LOOM_TRY(layer_pattern(root, name, c));
    LOOM_RETURN_IF(c->num_attention_heads % c->num_key_value_heads != 0, LOOM_ERR_FORMAT,
                   "config '%s': num_attention_heads %d is not a multiple of num_key_value_heads %d",
                   name, c->num_attention_heads, c->num_key_value_heads);
    LOOM_RETURN_IF(c->head_dim < 1, LOOM_ERR_FORMAT,
                   "config '%s': hidden_size %d is smaller than num_attention_heads %d", name,
                   c->hidden_size, c->num_attention_heads);
    return LOOM_OK;
}

loom_status loom_hf_config_parse(const char *text, size_t len, const char *name, loom_hf_config *out) {
    LOOM_RETURN_IF(!text || !out, LOOM_ERR_INVALID_ARG, "config: NULL argument");
    if (!name) name = "config.json";
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_ParseWithLength(text, len);
    LOOM_RETURN_IF(!root, LOOM_ERR_FORMAT, "config '%s' is not valid JSON", name);
    loom_status s = parse_root(root, name, out);
    cJSON_Delete(root);
    return s;
}

loom_status loom_hf_config_load(const char *path, loom_hf_config *out) {
    LOOM_RETURN_IF(!path || !out, LOOM_ERR_INVALID_ARG, "config: NULL argument");
    char buf[1100];
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(buf, sizeof buf, "%s/config.json", path);
        path = buf;
    }
    char *text;
    size_t len;
    LOOM_TRY(loom_read_text_file(path, &text, &len));
    loom_status s = loom_hf_config_parse(text, len, path, out);
    free(text);
    return s;
}
