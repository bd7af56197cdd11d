/* The JSON bodies of loom serve's endpoints (request.h), parsed with libcjson. */
#include "serve/http/request.h"

#include <cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int serve_fail(serve_error *e, int status, const char *param, const char *code, const char *fmt, ...) {
    e->status = status;
    e->type = status == 401   ? "authentication_error"
              : status == 404 ? "not_found_error"
              : status == 429 ? "rate_limit_error"
              : status >= 500 ? "server_error"
                              : "invalid_request_error";
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return 0;
}

/* ------------------------------------------------------------ UTF-8 */

/* The length of the valid sequence at s[0..n), 0 when invalid, -1 when it is
 * the valid beginning of a sequence cut by the end. */
static int utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    int len;
    unsigned lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;      /* no overlong forms */
        if (c == 0xED) hi = 0x9F;      /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;      /* at most U+10FFFF */
    } else
        return 0;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return -1;
        unsigned b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
    }
    return len;
}

int serve_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        int k = utf8_seq(p + i, n - i);
        if (k <= 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

size_t serve_utf8_complete(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        int k = utf8_seq(p + i, n - i);
        if (k < 0) return i;  /* a sequence the next piece may complete */
        i += k ? (size_t)k : 1; /* invalid bytes go out as they are (sanitised when written) */
    }
    return n;
}

/* ------------------------------------------------------------ values */

static cJSON *parse_object(const char *body, size_t len, serve_error *err) {
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) {
        serve_fail(err, 400, NULL, "invalid_json", "the request body is not valid JSON");
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        serve_fail(err, 400, NULL, "invalid_json", "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

/* A text value: a JSON string of valid UTF-8. */
static int get_text(const cJSON *v, const char *param, char **out, serve_error *err) {
    if (!cJSON_IsString(v) || !v->valuestring)
        return serve_fail(err, 400, param, "invalid_type", "'%s' must be a string", param);
    size_t n = strlen(v->valuestring);
    if (!serve_utf8_valid(v->valuestring, n))
        return serve_fail(err, 400, param, "invalid_value", "'%s' is not valid UTF-8", param);
    *out = malloc(n + 1);
    if (!*out) return serve_fail(err, 500, NULL, NULL, "out of memory");
    memcpy(*out, v->valuestring, n + 1);
    return 1;
}

/* A number in [lo, hi] (null: keep *out). */
static int get_num(const cJSON *o, const char *key, double lo, double hi, float *out, serve_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 1;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return serve_fail(err, 400, key, "invalid_type", "'%s' must be a number", key);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return serve_fail(err, 400, key, "invalid_value", "'%s' is %g; expected %g..%g", key, v->valuedouble, lo, hi);
    *out = (float)v->valuedouble;
    return 1;
}

/* An integer in [lo, hi] (null: keep *out); *given (may be NULL) set when present. */
static int get_int(const cJSON *o, const char *key, double lo, double hi, double *out, int *given, serve_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 1;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble))
        return serve_fail(err, 400, key, "invalid_type", "'%s' must be an integer", key);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return serve_fail(err, 400, key, "invalid_value", "'%s' is %.0f; expected %.0f..%.0f", key, v->valuedouble,
                          lo, hi);
    *out = v->valuedouble;
    if (given) *given = 1;
    return 1;
}

/* A boolean (null: keep *out). */
static int get_bool(const cJSON *o, const char *key, int *out, serve_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 1;
    if (!cJSON_IsBool(v)) return serve_fail(err, 400, key, "invalid_type", "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return 1;
}

static int get_model(const cJSON *o, char **model, serve_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (!v || cJSON_IsNull(v)) return 1;
    return get_text(v, "model", model, err);
}

/* ------------------------------------------------------------ generation */

/* "stop": a string or a list of strings, copied into r->stop_text. */
static int get_stops(const cJSON *o, serve_gen_request *r, serve_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (!v || cJSON_IsNull(v)) return 1;
    const cJSON *one = cJSON_IsString(v) ? v : NULL;
    int n = one ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0) return serve_fail(err, 400, "stop", "invalid_type", "'stop' must be a string or a list of strings");
    if (n > LOOM_MAX_STOPS)
        return serve_fail(err, 400, "stop", "invalid_value", "'stop' has %d strings; at most %d", n, LOOM_MAX_STOPS);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *s = one ? one : cJSON_GetArrayItem(v, i);
        if (!cJSON_IsString(s) || !s->valuestring)
            return serve_fail(err, 400, "stop", "invalid_type", "'stop' must be a string or a list of strings");
        size_t k = strlen(s->valuestring);
        if (!serve_utf8_valid(s->valuestring, k))
            return serve_fail(err, 400, "stop", "invalid_value", "'stop' is not valid UTF-8");
        total += k + 1;
    }
    r->stop_text = malloc(total + 1);
    if (!r->stop_text) return serve_fail(err, 500, NULL, NULL, "out of memory");
    char *p = r->stop_text;
    int kept = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *s = one ? one : cJSON_GetArrayItem(v, i);
        size_t k = strlen(s->valuestring);
        if (!k) continue; /* an empty stop string stops nothing (OpenAI accepts it) */
        memcpy(p, s->valuestring, k + 1);
        r->params.stops[kept++] = p;
        p += k + 1;
    }
    r->params.n_stops = kept;
    return 1;
}

/* Content: a string, or a list of {"type": "text", "text": "..."} parts (joined). */
static int get_content(const cJSON *v, const char *param, char **out, serve_error *err) {
    if (cJSON_IsString(v)) return get_text(v, param, out, err);
    if (!cJSON_IsArray(v))
        return serve_fail(err, 400, param, "invalid_type", "'%s' must be a string or a list of text parts", param);
    size_t total = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, v) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0)
            return serve_fail(err, 400, param, "unsupported_content",
                              "'%s': only text parts ({\"type\": \"text\"}) are supported", param);
        if (!cJSON_IsString(text) || !text->valuestring)
            return serve_fail(err, 400, param, "invalid_type", "'%s': a text part needs a string 'text'", param);
        total += strlen(text->valuestring);
    }
    char *s = malloc(total + 1);
    if (!s) return serve_fail(err, 500, NULL, NULL, "out of memory");
    size_t at = 0;
    cJSON_ArrayForEach(part, v) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t k = strlen(t);
        memcpy(s + at, t, k);
        at += k;
    }
    s[at] = '\0';
    if (!serve_utf8_valid(s, at)) {
        free(s);
        return serve_fail(err, 400, param, "invalid_value", "'%s' is not valid UTF-8", param);
    }
    *out = s;
    return 1;
}

static int get_messages(const cJSON *o, serve_gen_request *r, serve_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "messages");
    if (!v) return serve_fail(err, 400, "messages", "missing_required_parameter", "'messages' is required");
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1)
        return serve_fail(err, 400, "messages", "invalid_type", "'messages' must be a non-empty list");
    int n = cJSON_GetArraySize(v);
    r->msgs = calloc((size_t)n, sizeof *r->msgs);
    if (!r->msgs) return serve_fail(err, 500, NULL, NULL, "out of memory");
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, v) {
        char param[64];
        snprintf(param, sizeof param, "messages[%d].role", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role) || !role->valuestring)
            return serve_fail(err, 400, param, "invalid_type", "'%s' must be a string", param);
        const char *rs = role->valuestring;
        const char *known = !strcmp(rs, "system") || !strcmp(rs, "developer") ? "system"
                            : !strcmp(rs, "user")                             ? "user"
                            : !strcmp(rs, "assistant")                        ? "assistant"
                                                                              : NULL;
        if (!known)
            return serve_fail(err, 400, param, "invalid_value",
                              "'%s' must be system, developer, user or assistant", param);
        r->msgs[i].role = known;
        snprintf(param, sizeof param, "messages[%d].content", i);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!c) return serve_fail(err, 400, param, "missing_required_parameter", "'%s' is required", param);
        if (!get_content(c, param, (char **)&r->msgs[i].content, err)) return 0;
        r->n_msgs = ++i;
    }
    return 1;
}

/* Completions' "prompt": a string, a list of one string, a list of token ids
 * or a list of one such list. */
static int get_prompt(const cJSON *o, serve_gen_request *r, serve_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    if (!v) return serve_fail(err, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 &&
        (cJSON_IsString(v->child) || cJSON_IsArray(v->child)))
        v = v->child; /* a batch of one prompt */
    if (cJSON_IsString(v)) return get_text(v, "prompt", &r->prompt, err);
    if (!cJSON_IsArray(v))
        return serve_fail(err, 400, "prompt", "invalid_type", "'prompt' must be a string or a list of token ids");
    int n = cJSON_GetArraySize(v);
    if (n < 1) return serve_fail(err, 400, "prompt", "invalid_value", "'prompt' is an empty list");
    if (n > SERVE_MAX_TOKEN_IDS)
        return serve_fail(err, 400, "prompt", "invalid_value", "'prompt' has %d token ids; at most %d", n,
                          SERVE_MAX_TOKEN_IDS);
    r->prompt_ids = malloc(sizeof *r->prompt_ids * (size_t)n);
    if (!r->prompt_ids) return serve_fail(err, 500, NULL, NULL, "out of memory");
    const cJSON *t;
    int i = 0;
    cJSON_ArrayForEach(t, v) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble > INT32_MAX)
            return serve_fail(err, 400, "prompt", "invalid_value",
                              "'prompt' must be one string or token ids (integers >= 0); one list per request");
        r->prompt_ids[i++] = (int32_t)t->valuedouble;
    }
    r->n_prompt_ids = n;
    return 1;
}

/* Parameters loom does not have: absent, null or their neutral value only. */
static int refuse_unsupported(const cJSON *o, int chat, serve_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "n");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 1))
        return serve_fail(err, 400, "n", "unsupported_value", "'n' must be 1 (one choice per request)");
    v = cJSON_GetObjectItemCaseSensitive(o, "best_of");
    if (!chat && v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 1))
        return serve_fail(err, 400, "best_of", "unsupported_value", "'best_of' must be 1");
    v = cJSON_GetObjectItemCaseSensitive(o, "echo");
    if (!chat && cJSON_IsTrue(v)) return serve_fail(err, 400, "echo", "unsupported_value", "'echo' is not supported");
    v = cJSON_GetObjectItemCaseSensitive(o, "suffix");
    if (!chat && v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0]))
        return serve_fail(err, 400, "suffix", "unsupported_value", "'suffix' is not supported");
    const char *tools[] = {"tools", "functions"};
    for (int i = 0; chat && i < 2; i++) {
        v = cJSON_GetObjectItemCaseSensitive(o, tools[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0))
            return serve_fail(err, 400, tools[i], "unsupported_value", "'%s' (tool calls) are not supported", tools[i]);
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "response_format");
    if (chat && v && !cJSON_IsNull(v)) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(v, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0)
            return serve_fail(err, 400, "response_format", "unsupported_value",
                              "'response_format' must be {\"type\": \"text\"}");
    }
    return 1;
}

static int parse_generate(const cJSON *o, int chat, serve_gen_request *r, serve_error *err) {
    if (!get_model(o, &r->model, err) || !refuse_unsupported(o, chat, err)) return 0;
    if (chat ? !get_messages(o, r, err) : !get_prompt(o, r, err)) return 0;
    loom_sampler_params *sp = &r->params.sampling;
    sp->repeat_penalty = 0.0f, sp->repeat_last_n = 0; /* off unless asked (OpenAI has no such penalty) */
    double d = chat ? 0 : SERVE_COMPLETION_DEFAULT_MAX_TOKENS;
    if (!get_int(o, "max_tokens", 1, 1 << 30, &d, NULL, err)) return 0;
    if (chat && !get_int(o, "max_completion_tokens", 1, 1 << 30, &d, NULL, err)) return 0;
    r->params.max_tokens = (int)d;
    if (!get_num(o, "temperature", 0, 2, &sp->temperature, err) || !get_num(o, "top_p", 0, 1, &sp->top_p, err) ||
        !get_num(o, "min_p", 0, 1, &sp->min_p, err))
        return 0;
    if (sp->top_p <= 0.0f) return serve_fail(err, 400, "top_p", "invalid_value", "'top_p' must be > 0");
    d = 0;
    if (!get_int(o, "top_k", 0, 1 << 30, &d, NULL, err)) return 0;
    sp->top_k = (int)d;
    /* llama-server's extensions */
    float rp = 1.0f;
    if (!get_num(o, "repeat_penalty", 0, 10, &rp, err)) return 0;
    if (rp > 0.0f && rp != 1.0f) sp->repeat_penalty = rp, sp->repeat_last_n = 64;
    if (!get_bool(o, "ignore_eos", &r->params.ignore_eos, err)) return 0;
    /* accepted and not applied: the values OpenAI's clients send by default */
    float unused = 0;
    if (!get_num(o, "presence_penalty", -2, 2, &unused, err) || !get_num(o, "frequency_penalty", -2, 2, &unused, err))
        return 0;
    d = 0;
    if (!get_int(o, "seed", -9223372036854775808.0, 18446744073709551615.0, &d, &r->has_seed, err)) return 0;
    sp->seed = d < 0 ? (uint64_t)(int64_t)d : d >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)d;
    if (!get_stops(o, r, err)) return 0;
    if (chat) {
        d = 0;
        int top_given = 0;
        if (!get_bool(o, "logprobs", &r->want_logprobs, err) ||
            !get_int(o, "top_logprobs", 0, LOOM_MAX_LOGPROBS, &d, &top_given, err))
            return 0;
        if (top_given && !r->want_logprobs && d > 0)
            return serve_fail(err, 400, "top_logprobs", "invalid_value", "'top_logprobs' needs 'logprobs': true");
        r->top_logprobs = (int)d;
    } else {
        d = 0;
        if (!get_int(o, "logprobs", 0, 5, &d, &r->want_logprobs, err)) return 0;
        r->top_logprobs = (int)d;
    }
    /* the engine reports the token's own log-probability with the top n: ask for at least 1 */
    r->params.logprobs = r->want_logprobs ? (r->top_logprobs > 0 ? r->top_logprobs : 1) : 0;
    if (!get_bool(o, "stream", &r->stream, err)) return 0;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(o, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so))
            return serve_fail(err, 400, "stream_options", "invalid_type", "'stream_options' must be an object");
        if (!r->stream)
            return serve_fail(err, 400, "stream_options", "invalid_value",
                              "'stream_options' is only allowed when 'stream' is true");
        const cJSON *iu = cJSON_GetObjectItemCaseSensitive(so, "include_usage");
        if (iu && !cJSON_IsNull(iu) && !cJSON_IsBool(iu))
            return serve_fail(err, 400, "stream_options.include_usage", "invalid_type",
                              "'stream_options.include_usage' must be a boolean");
        r->include_usage = cJSON_IsTrue(iu);
    }
    return 1;
}

int serve_parse_generate(const char *body, size_t len, int chat, serve_gen_request *out, serve_error *err) {
    memset(out, 0, sizeof *out);
    out->chat = chat;
    out->params = loom_request_default_params();
    cJSON *root = parse_object(body, len, err);
    if (!root) return 0;
    int ok = parse_generate(root, chat, out, err);
    cJSON_Delete(root);
    if (!ok) serve_gen_request_free(out);
    return ok;
}

void serve_gen_request_free(serve_gen_request *r) {
    if (!r) return;
    for (int i = 0; i < r->n_msgs; i++) free((char *)r->msgs[i].content);
    free(r->msgs), free(r->model), free(r->prompt), free(r->prompt_ids), free(r->stop_text);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------ embeddings */

static int parse_embeddings(const cJSON *o, serve_embed_request *r, serve_error *err) {
    if (!get_model(o, &r->model, err)) return 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "input");
    if (!v) return serve_fail(err, 400, "input", "missing_required_parameter", "'input' is required");
    const cJSON *one = cJSON_IsString(v) ? v : NULL;
    int n = one ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 1)
        return serve_fail(err, 400, "input", "invalid_type", "'input' must be a string or a non-empty list of strings");
    if (n > SERVE_MAX_EMBED_INPUTS)
        return serve_fail(err, 400, "input", "invalid_value", "'input' has %d texts; at most %d", n,
                          SERVE_MAX_EMBED_INPUTS);
    r->texts = calloc((size_t)n, sizeof *r->texts);
    if (!r->texts) return serve_fail(err, 500, NULL, NULL, "out of memory");
    for (int i = 0; i < n; i++) {
        const cJSON *s = one ? one : cJSON_GetArrayItem(v, i);
        if (!cJSON_IsString(s))
            return serve_fail(err, 400, "input", "invalid_type",
                              "'input' must be a string or a list of strings (token ids are not supported)");
        if (!get_text(s, "input", &r->texts[i], err)) return 0;
        r->n_texts = i + 1;
    }
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "encoding_format");
    if (f && !cJSON_IsNull(f)) {
        if (!cJSON_IsString(f) || (strcmp(f->valuestring, "float") && strcmp(f->valuestring, "base64")))
            return serve_fail(err, 400, "encoding_format", "invalid_value",
                              "'encoding_format' must be \"float\" or \"base64\"");
        r->base64 = !strcmp(f->valuestring, "base64");
    }
    double d = 0;
    if (!get_int(o, "dimensions", 1, 1 << 20, &d, NULL, err)) return 0;
    r->dimensions = (int)d;
    return 1;
}

int serve_parse_embeddings(const char *body, size_t len, serve_embed_request *out, serve_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = parse_object(body, len, err);
    if (!root) return 0;
    int ok = parse_embeddings(root, out, err);
    cJSON_Delete(root);
    if (!ok) serve_embed_request_free(out);
    return ok;
}

void serve_embed_request_free(serve_embed_request *r) {
    if (!r) return;
    for (int i = 0; r->texts && i < r->n_texts; i++) free(r->texts[i]);
    free(r->texts), free(r->model);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------ tokenize, detokenize */

int serve_parse_tokenize(const char *body, size_t len, serve_tokenize_request *out, serve_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = parse_object(body, len, err);
    if (!root) return 0;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "content");
    int ok = c ? get_text(c, "content", &out->content, err)
               : serve_fail(err, 400, "content", "missing_required_parameter", "'content' is required");
    ok = ok && get_bool(root, "add_special", &out->add_special, err) && get_bool(root, "with_pieces", &out->with_pieces, err);
    cJSON_Delete(root);
    if (!ok) serve_tokenize_request_free(out);
    return ok;
}

void serve_tokenize_request_free(serve_tokenize_request *r) {
    if (!r) return;
    free(r->content);
    memset(r, 0, sizeof *r);
}

int serve_parse_detokenize(const char *body, size_t len, serve_detokenize_request *out, serve_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = parse_object(body, len, err);
    if (!root) return 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    int ok = 1, n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (!v) ok = serve_fail(err, 400, "tokens", "missing_required_parameter", "'tokens' is required");
    else if (n < 0) ok = serve_fail(err, 400, "tokens", "invalid_type", "'tokens' must be a list of token ids");
    else if (n > SERVE_MAX_TOKEN_IDS)
        ok = serve_fail(err, 400, "tokens", "invalid_value", "'tokens' has %d ids; at most %d", n, SERVE_MAX_TOKEN_IDS);
    else if (!(out->tokens = malloc(sizeof *out->tokens * (size_t)(n ? n : 1))))
        ok = serve_fail(err, 500, NULL, NULL, "out of memory");
    const cJSON *t;
    if (ok) cJSON_ArrayForEach(t, v) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble > INT32_MAX) {
            ok = serve_fail(err, 400, "tokens", "invalid_value", "'tokens' must be token ids (integers >= 0)");
            break;
        }
        out->tokens[out->n_tokens++] = (int32_t)t->valuedouble;
    }
    cJSON_Delete(root);
    if (!ok) serve_detokenize_request_free(out);
    return ok;
}

void serve_detokenize_request_free(serve_detokenize_request *r) {
    if (!r) return;
    free(r->tokens);
    memset(r, 0, sizeof *r);
}
