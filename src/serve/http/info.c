/* /v1/models, /tokenize and /detokenize (server_internal.h). */
#include "serve/http/server_internal.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

static cJSON *model_json(const serve_server *s, const char *id) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->created);
    cJSON_AddStringToObject(m, "owned_by", "loom");
    return m;
}

enum MHD_Result serve_models(serve_server *s, struct MHD_Connection *c, serve_conn *sc, const char *one) {
    const char *ids[2] = {s->engine ? s->model_id : NULL, s->bert ? s->embed_id : NULL};
    if (one) { /* GET /v1/models/ID */
        for (int i = 0; i < 2; i++)
            if (ids[i] && !strcmp(ids[i], one)) return serve_respond_json(s, c, sc, 200, model_json(s, ids[i]));
        serve_error e;
        serve_fail(&e, 404, "model", "model_not_found", "the model '%.100s' does not exist here", one);
        return serve_respond_error(s, c, sc, &e);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < 2; i++)
        if (ids[i]) cJSON_AddItemToArray(data, model_json(s, ids[i]));
    return serve_respond_json(s, c, sc, 200, o);
}

enum MHD_Result serve_tokenize(serve_server *s, struct MHD_Connection *c, serve_conn *sc) {
    serve_error e;
    serve_tokenize_request req;
    if (!serve_parse_tokenize(sc->body ? sc->body : "", sc->n_body, &req, &e)) return serve_respond_error(s, c, sc, &e);
    size_t len = strlen(req.content);
    int flags = strcmp(loom_tokenizer_kind_name(s->tok), "llama2c") ? LOOM_TOK_PARSE_SPECIAL : 0;
    if (req.add_special) {
        if (loom_tokenizer_add_bos(s->tok)) flags |= LOOM_TOK_BOS;
        if (loom_tokenizer_add_eos(s->tok)) flags |= LOOM_TOK_EOS;
    }
    int32_t *ids = malloc(sizeof *ids * (len + 4)); /* len + 4 ids suffice; len is below the body limit */
    int n = 0;
    if (!ids) {
        serve_tokenize_request_free(&req);
        serve_fail(&e, 500, NULL, NULL, "out of memory");
        return serve_respond_error(s, c, sc, &e);
    }
    if (loom_tokenizer_encode_ex(s->tok, req.content, len, flags, ids, (int)(len + 4), &n) != LOOM_OK) {
        serve_fail(&e, 400, "content", "invalid_value", "%s", loom_last_error());
        free(ids);
        serve_tokenize_request_free(&req);
        return serve_respond_error(s, c, sc, &e);
    }
    cJSON *o = cJSON_CreateObject(), *tokens = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; i < n; i++) {
        if (!req.with_pieces) {
            cJSON_AddItemToArray(tokens, cJSON_CreateNumber(ids[i]));
            continue;
        }
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "id", ids[i]);
        size_t k = 0;
        const char *piece = loom_tokenizer_decode(s->tok, i ? ids[i - 1] : -1, ids[i], &k);
        cJSON_AddItemToObject(t, "piece", serve_json_text(piece ? piece : "", piece ? k : 0));
        cJSON_AddItemToArray(tokens, t);
    }
    free(ids);
    serve_tokenize_request_free(&req);
    return serve_respond_json(s, c, sc, 200, o);
}

enum MHD_Result serve_detokenize(serve_server *s, struct MHD_Connection *c, serve_conn *sc) {
    serve_error e;
    serve_detokenize_request req;
    if (!serve_parse_detokenize(sc->body ? sc->body : "", sc->n_body, &req, &e)) return serve_respond_error(s, c, sc, &e);
    char *text = NULL;
    size_t len = 0;
    if (loom_tokenizer_decode_tokens(s->tok, req.tokens, req.n_tokens, &text, &len) != LOOM_OK) {
        serve_fail(&e, 400, "tokens", "invalid_value", "%s", loom_last_error());
        serve_detokenize_request_free(&req);
        return serve_respond_error(s, c, sc, &e);
    }
    serve_detokenize_request_free(&req);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "content", serve_json_text(text ? text : "", len));
    free(text);
    return serve_respond_json(s, c, sc, 200, o);
}
