/* `loom batch` request lines (batch_request.h). */
#include "serve/batch_request.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* A number field: absent (keeps *v), or a finite number in [lo, hi]. */
static loom_status num(const cJSON *o, const char *key, double lo, double hi, long line, double *v, int *given) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x)) return LOOM_OK;
    LOOM_RETURN_IF(!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble < lo || x->valuedouble > hi,
                   LOOM_ERR_FORMAT, "line %ld: \"%s\" must be a number in [%g, %g]", line, key, lo, hi);
    *v = x->valuedouble;
    if (given) *given = 1;
    return LOOM_OK;
}

/* An integer field in [lo, hi]. */
static loom_status integer(const cJSON *o, const char *key, double lo, double hi, long line, double *v, int *given) {
    double d = *v;
    LOOM_TRY(num(o, key, lo, hi, line, &d, given));
    LOOM_RETURN_IF(d != floor(d), LOOM_ERR_FORMAT, "line %ld: \"%s\" must be an integer", line, key);
    *v = d;
    return LOOM_OK;
}

static loom_status stops(const cJSON *o, long line, loom_batch_request *r) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (!x || cJSON_IsNull(x)) return LOOM_OK;
    const cJSON *items[LOOM_MAX_STOPS];
    int n = 0;
    if (cJSON_IsString(x)) {
        items[n++] = x;
    } else {
        LOOM_RETURN_IF(!cJSON_IsArray(x), LOOM_ERR_FORMAT, "line %ld: \"stop\" must be a string or an array of strings",
                       line);
        const cJSON *it;
        cJSON_ArrayForEach(it, x) {
            LOOM_RETURN_IF(n == LOOM_MAX_STOPS, LOOM_ERR_FORMAT, "line %ld: \"stop\" has more than %d strings", line,
                           LOOM_MAX_STOPS);
            LOOM_RETURN_IF(!cJSON_IsString(it), LOOM_ERR_FORMAT, "line %ld: \"stop\" must hold strings", line);
            items[n++] = it;
        }
    }
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        LOOM_RETURN_IF(!items[i]->valuestring[0], LOOM_ERR_FORMAT, "line %ld: an empty stop string", line);
        bytes += strlen(items[i]->valuestring) + 1;
    }
    r->stop_text = malloc(bytes + 1);
    LOOM_RETURN_IF(!r->stop_text, LOOM_ERR_NOMEM, "out of memory");
    char *w = r->stop_text;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(items[i]->valuestring);
        memcpy(w, items[i]->valuestring, l + 1);
        r->params.stops[i] = w;
        w += l + 1;
    }
    r->params.n_stops = n;
    return LOOM_OK;
}

static loom_status messages(const cJSON *x, long line, loom_batch_request *r) {
    LOOM_RETURN_IF(!cJSON_IsArray(x) || cJSON_GetArraySize(x) < 1, LOOM_ERR_FORMAT,
                   "line %ld: \"messages\" must be a non-empty array of {\"role\", \"content\"}", line);
    int n = cJSON_GetArraySize(x);
    r->msgs = calloc((size_t)n, sizeof *r->msgs);
    LOOM_RETURN_IF(!r->msgs, LOOM_ERR_NOMEM, "out of memory");
    const cJSON *m;
    cJSON_ArrayForEach(m, x) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        LOOM_RETURN_IF(!cJSON_IsString(role) || !cJSON_IsString(content), LOOM_ERR_FORMAT,
                       "line %ld: message %d needs string \"role\" and \"content\"", line, r->n_msgs + 1);
        const char *rl = role->valuestring;
        LOOM_RETURN_IF(strcmp(rl, "system") && strcmp(rl, "user") && strcmp(rl, "assistant"), LOOM_ERR_FORMAT,
                       "line %ld: message %d has role \"%.32s\" (expected system, user or assistant)", line,
                       r->n_msgs + 1, rl);
        char *rd = dup_str(rl), *cd = dup_str(content->valuestring);
        r->msgs[r->n_msgs].role = rd, r->msgs[r->n_msgs].content = cd;
        r->n_msgs++;
        LOOM_RETURN_IF(!rd || !cd, LOOM_ERR_NOMEM, "out of memory");
    }
    return LOOM_OK;
}

static loom_status parse(const cJSON *o, long line, loom_batch_request *r) {
    LOOM_RETURN_IF(!cJSON_IsObject(o), LOOM_ERR_FORMAT, "line %ld: not a JSON object", line);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    if (id && !cJSON_IsNull(id)) {
        LOOM_RETURN_IF(!cJSON_IsString(id) && !cJSON_IsNumber(id), LOOM_ERR_FORMAT,
                       "line %ld: \"id\" must be a string or a number", line);
        r->id_json = cJSON_PrintUnformatted(id);
        LOOM_RETURN_IF(!r->id_json, LOOM_ERR_NOMEM, "out of memory");
    }
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
    LOOM_RETURN_IF(!!prompt == !!msgs, LOOM_ERR_FORMAT, "line %ld: give exactly one of \"prompt\" and \"messages\"",
                   line);
    if (prompt) {
        LOOM_RETURN_IF(!cJSON_IsString(prompt), LOOM_ERR_FORMAT, "line %ld: \"prompt\" must be a string", line);
        r->prompt = dup_str(prompt->valuestring);
        LOOM_RETURN_IF(!r->prompt, LOOM_ERR_NOMEM, "out of memory");
    } else {
        LOOM_TRY(messages(msgs, line, r));
    }
    loom_sampler_params *sp = &r->params.sampling;
    double max_tokens = LOOM_BATCH_DEFAULT_MAX_TOKENS, temp = 1.0, top_p = 1.0, top_k = 0, min_p = 0, seed = 0;
    LOOM_TRY(integer(o, "max_tokens", 1, 1e9, line, &max_tokens, NULL));
    LOOM_TRY(num(o, "temperature", 0, 100, line, &temp, NULL));
    LOOM_TRY(num(o, "top_p", 1e-9, 1, line, &top_p, NULL));
    LOOM_TRY(integer(o, "top_k", 0, 1e9, line, &top_k, NULL));
    LOOM_TRY(num(o, "min_p", 0, 1, line, &min_p, NULL));
    LOOM_TRY(integer(o, "seed", 0, 9007199254740992.0, line, &seed, &r->has_seed)); /* 2^53: exact in JSON */
    r->params.max_tokens = (int)max_tokens;
    sp->temperature = (float)temp, sp->top_p = (float)top_p, sp->top_k = (int)top_k, sp->min_p = (float)min_p;
    sp->seed = (uint64_t)seed;
    return stops(o, line, r);
}

loom_status loom_batch_request_parse(const char *line, size_t len, long line_no, loom_batch_request *out) {
    memset(out, 0, sizeof *out);
    out->params = loom_request_default_params();
    cJSON *o = cJSON_ParseWithLength(line, len);
    loom_status s = o ? parse(o, line_no, out)
                      : loom_set_error(LOOM_ERR_FORMAT, "line %ld: not valid JSON", line_no);
    cJSON_Delete(o);
    if (s != LOOM_OK) {
        char *id = out->id_json;
        out->id_json = NULL;
        loom_batch_request_free(out);
        out->id_json = id;
    }
    return s;
}

void loom_batch_request_free(loom_batch_request *r) {
    if (!r) return;
    cJSON_free(r->id_json);
    free(r->prompt);
    for (int i = 0; i < r->n_msgs; i++) free((char *)r->msgs[i].role), free((char *)r->msgs[i].content);
    free(r->msgs);
    free(r->stop_text);
    memset(r, 0, sizeof *r);
}
