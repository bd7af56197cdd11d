/* loom serve's request layer (src/serve/http/request.c): good bodies become the
 * engine's parameters; each kind of bad body is a 400 naming the parameter. */
#include "check.h"

#include <string.h>

#include "serve/http/request.h"

static int gen(const char *body, int chat, serve_gen_request *r, serve_error *e) {
    return serve_parse_generate(body, strlen(body), chat, r, e);
}

/* body must fail with status 400 and name param (NULL: no param) with code. */
static void bad(const char *body, int chat, const char *param, const char *code) {
    serve_gen_request r;
    serve_error e;
    memset(&e, 0, sizeof e);
    int ok = gen(body, chat, &r, &e);
    CHECK_MSG(!ok, "accepted: %s", body);
    if (ok) {
        serve_gen_request_free(&r);
        return;
    }
    CHECK_MSG(e.status == 400, "%s: status %d", body, e.status);
    CHECK_MSG(!strcmp(e.param, param ? param : ""), "%s: param '%s', expected '%s' (%s)", body, e.param,
              param ? param : "", e.message);
    CHECK_MSG(!strcmp(e.code, code), "%s: code '%s', expected '%s'", body, e.code, code);
    CHECK_MSG(e.message[0] && !strcmp(e.type, "invalid_request_error"), "%s: message '%s'", body, e.message);
}

static void test_chat_ok(void) {
    serve_gen_request r;
    serve_error e;
    const char *body = "{\"model\": \"m\", \"messages\": [{\"role\": \"developer\", \"content\": \"be brief\"},"
                       "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi \"},"
                       "{\"type\": \"text\", \"text\": \"there\"}]}], \"max_completion_tokens\": 7,"
                       "\"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": 40, \"min_p\": 0.05, \"seed\": -1,"
                       "\"stop\": [\"a\", \"\", \"bc\"], \"logprobs\": true, \"top_logprobs\": 3, \"stream\": true,"
                       "\"stream_options\": {\"include_usage\": true}, \"n\": 1, \"presence_penalty\": 0,"
                       "\"tools\": [], \"response_format\": {\"type\": \"text\"}, \"user\": \"x\"}";
    CHECK_MSG(gen(body, 1, &r, &e), "%s", e.message);
    CHECK(!strcmp(r.model, "m") && r.n_msgs == 2);
    CHECK(!strcmp(r.msgs[0].role, "system") && !strcmp(r.msgs[0].content, "be brief"));
    CHECK(!strcmp(r.msgs[1].role, "user") && !strcmp(r.msgs[1].content, "hi there"));
    CHECK(r.params.max_tokens == 7 && r.params.sampling.temperature == 0.5f && r.params.sampling.top_k == 40);
    CHECK(r.params.sampling.top_p == 0.9f && r.params.sampling.min_p == 0.05f);
    CHECK(r.has_seed && r.params.sampling.seed == UINT64_MAX); /* -1 as two's complement */
    CHECK(r.params.n_stops == 2 && !strcmp(r.params.stops[0], "a") && !strcmp(r.params.stops[1], "bc"));
    CHECK(r.want_logprobs && r.top_logprobs == 3 && r.params.logprobs == 3);
    CHECK(r.stream && r.include_usage);
    serve_gen_request_free(&r);
    /* defaults: chat runs to a stop, completions 16 tokens; no seed; logprobs off */
    CHECK(gen("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 1, &r, &e));
    CHECK(r.params.max_tokens == 0 && !r.has_seed && !r.want_logprobs && r.params.logprobs == 0 && !r.model);
    CHECK(r.params.sampling.temperature == 1.0f && r.params.sampling.repeat_penalty == 0.0f);
    serve_gen_request_free(&r);
    /* logprobs without top_logprobs: the token's own (the engine still computes one) */
    CHECK(gen("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": true}", 1, &r, &e));
    CHECK(r.want_logprobs && r.top_logprobs == 0 && r.params.logprobs == 1);
    serve_gen_request_free(&r);
}

static void test_completions_ok(void) {
    serve_gen_request r;
    serve_error e;
    CHECK(gen("{\"prompt\": \"Once\", \"stop\": \"x\"}", 0, &r, &e));
    CHECK(r.prompt && !strcmp(r.prompt, "Once") && r.params.max_tokens == SERVE_COMPLETION_DEFAULT_MAX_TOKENS);
    CHECK(r.params.n_stops == 1 && !strcmp(r.params.stops[0], "x"));
    serve_gen_request_free(&r);
    CHECK(gen("{\"prompt\": [1, 2, 3], \"logprobs\": 2, \"max_tokens\": 4}", 0, &r, &e));
    CHECK(!r.prompt && r.n_prompt_ids == 3 && r.prompt_ids[2] == 3 && r.top_logprobs == 2 && r.params.max_tokens == 4);
    serve_gen_request_free(&r);
    CHECK(gen("{\"prompt\": [[5, 6]]}", 0, &r, &e) && r.n_prompt_ids == 2 && r.prompt_ids[0] == 5);
    serve_gen_request_free(&r);
    CHECK(gen("{\"prompt\": [\"one\"]}", 0, &r, &e) && !strcmp(r.prompt, "one"));
    serve_gen_request_free(&r);
}

static void test_bad_generate(void) {
    bad("", 1, NULL, "invalid_json");
    bad("{\"messages\": [", 1, NULL, "invalid_json");
    bad("[1, 2]", 1, NULL, "invalid_json");
    bad("{}", 1, "messages", "missing_required_parameter");
    bad("{\"messages\": []}", 1, "messages", "invalid_type");
    bad("{\"messages\": \"hi\"}", 1, "messages", "invalid_type");
    bad("{\"messages\": [{\"content\": \"x\"}]}", 1, "messages[0].role", "invalid_type");
    bad("{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", 1, "messages[0].role", "invalid_value");
    bad("{\"messages\": [{\"role\": \"user\"}]}", 1, "messages[0].content", "missing_required_parameter");
    bad("{\"messages\": [{\"role\": \"user\", \"content\": 3}]}", 1, "messages[0].content", "invalid_type");
    bad("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", 1, "messages[0].content",
        "unsupported_content");
    bad("{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}", 1, "messages[0].content", "invalid_value");
    const char *m = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], ";
    char b[512];
    static const struct { const char *tail, *param, *code; } cases[] = {
        {"\"temperature\": \"hot\"}", "temperature", "invalid_type"},
        {"\"temperature\": 3}", "temperature", "invalid_value"},
        {"\"top_p\": 0}", "top_p", "invalid_value"},
        {"\"top_p\": 1.5}", "top_p", "invalid_value"},
        {"\"top_k\": -1}", "top_k", "invalid_value"},
        {"\"top_k\": 2.5}", "top_k", "invalid_type"},
        {"\"min_p\": 2}", "min_p", "invalid_value"},
        {"\"max_tokens\": 0}", "max_tokens", "invalid_value"},
        {"\"max_tokens\": \"10\"}", "max_tokens", "invalid_type"},
        {"\"max_completion_tokens\": -3}", "max_completion_tokens", "invalid_value"},
        {"\"seed\": 1.5}", "seed", "invalid_type"},
        {"\"stop\": 5}", "stop", "invalid_type"},
        {"\"stop\": [\"a\", 1]}", "stop", "invalid_type"},
        {"\"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\","
         "\"16\",\"17\"]}", "stop", "invalid_value"},
        {"\"logprobs\": 1}", "logprobs", "invalid_type"},
        {"\"top_logprobs\": 21, \"logprobs\": true}", "top_logprobs", "invalid_value"},
        {"\"top_logprobs\": 2}", "top_logprobs", "invalid_value"},
        {"\"stream\": \"yes\"}", "stream", "invalid_type"},
        {"\"stream_options\": {\"include_usage\": true}}", "stream_options", "invalid_value"},
        {"\"stream\": true, \"stream_options\": 1}", "stream_options", "invalid_type"},
        {"\"n\": 2}", "n", "unsupported_value"},
        {"\"tools\": [{\"type\": \"function\"}]}", "tools", "unsupported_value"},
        {"\"response_format\": {\"type\": \"json_object\"}}", "response_format", "unsupported_value"},
        {"\"model\": 7}", "model", "invalid_type"},
        {"\"presence_penalty\": 5}", "presence_penalty", "invalid_value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(b, sizeof b, "%s%s", m, cases[i].tail);
        bad(b, 1, cases[i].param, cases[i].code);
    }
    bad("{}", 0, "prompt", "missing_required_parameter");
    bad("{\"prompt\": 3}", 0, "prompt", "invalid_type");
    bad("{\"prompt\": []}", 0, "prompt", "invalid_value");
    bad("{\"prompt\": [1, -2]}", 0, "prompt", "invalid_value");
    bad("{\"prompt\": [\"a\", \"b\"]}", 0, "prompt", "invalid_value");
    bad("{\"prompt\": \"x\", \"logprobs\": 6}", 0, "logprobs", "invalid_value");
    bad("{\"prompt\": \"x\", \"echo\": true}", 0, "echo", "unsupported_value");
    bad("{\"prompt\": \"x\", \"suffix\": \"y\"}", 0, "suffix", "unsupported_value");
    bad("{\"prompt\": \"x\", \"best_of\": 3}", 0, "best_of", "unsupported_value");
}

static void test_embeddings(void) {
    serve_embed_request r;
    serve_error e;
    const char *ok1 = "{\"input\": \"hello\", \"model\": \"m\", \"encoding_format\": \"base64\"}";
    CHECK(serve_parse_embeddings(ok1, strlen(ok1), &r, &e) && r.n_texts == 1 && r.base64 && !strcmp(r.model, "m"));
    serve_embed_request_free(&r);
    const char *ok2 = "{\"input\": [\"a\", \"\", \"c\"], \"dimensions\": 384}";
    CHECK(serve_parse_embeddings(ok2, strlen(ok2), &r, &e) && r.n_texts == 3 && !r.base64 && r.dimensions == 384);
    CHECK(!strcmp(r.texts[2], "c") && !r.texts[1][0]);
    serve_embed_request_free(&r);
    static const struct { const char *body, *param, *code; } cases[] = {
        {"{}", "input", "missing_required_parameter"},
        {"{\"input\": []}", "input", "invalid_type"},
        {"{\"input\": 5}", "input", "invalid_type"},
        {"{\"input\": [[1, 2]]}", "input", "invalid_type"},
        {"{\"input\": \"a\", \"encoding_format\": \"hex\"}", "encoding_format", "invalid_value"},
        {"{\"input\": \"a\", \"dimensions\": 0}", "dimensions", "invalid_value"},
        {"nope", "", "invalid_json"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memset(&e, 0, sizeof e);
        int ok = serve_parse_embeddings(cases[i].body, strlen(cases[i].body), &r, &e);
        CHECK_MSG(!ok && e.status == 400 && !strcmp(e.param, cases[i].param) && !strcmp(e.code, cases[i].code),
                  "%s: %d '%s' '%s'", cases[i].body, e.status, e.param, e.code);
        if (ok) serve_embed_request_free(&r);
    }
}

static void test_tokenize(void) {
    serve_tokenize_request t;
    serve_detokenize_request d;
    serve_error e;
    const char *a = "{\"content\": \"hi\", \"add_special\": true}";
    CHECK(serve_parse_tokenize(a, strlen(a), &t, &e) && !strcmp(t.content, "hi") && t.add_special && !t.with_pieces);
    serve_tokenize_request_free(&t);
    const char *b = "{\"content\": 1}";
    CHECK(!serve_parse_tokenize(b, strlen(b), &t, &e) && !strcmp(e.param, "content"));
    const char *c = "{\"tokens\": [1, 2, 3]}";
    CHECK(serve_parse_detokenize(c, strlen(c), &d, &e) && d.n_tokens == 3 && d.tokens[1] == 2);
    serve_detokenize_request_free(&d);
    const char *z = "{\"tokens\": []}";
    CHECK(serve_parse_detokenize(z, strlen(z), &d, &e) && d.n_tokens == 0);
    serve_detokenize_request_free(&d);
    const char *f = "{\"tokens\": [1, \"x\"]}";
    CHECK(!serve_parse_detokenize(f, strlen(f), &d, &e) && !strcmp(e.param, "tokens") && e.status == 400);
    const char *g = "{\"tokens\": 3}";
    CHECK(!serve_parse_detokenize(g, strlen(g), &d, &e) && !strcmp(e.code, "invalid_type"));
}

static void test_utf8(void) {
    const char *good = "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80";
    CHECK(serve_utf8_valid(good, strlen(good)));
    CHECK(!serve_utf8_valid("\xc0\xaf", 2));          /* overlong */
    CHECK(!serve_utf8_valid("\xed\xa0\x80", 3));      /* a surrogate */
    CHECK(!serve_utf8_valid("\xf4\x90\x80\x80", 4));  /* beyond U+10FFFF */
    CHECK(!serve_utf8_valid("\xe2\x82", 2));          /* cut */
    CHECK(serve_utf8_complete("ab\xe2\x82", 4) == 2);  /* the cut sequence waits for its end */
    CHECK(serve_utf8_complete("ab\xff", 3) == 3);      /* an invalid byte does not hold the rest back */
    CHECK(serve_utf8_complete("\xf0\x9f\x98", 3) == 0);
}

int main(void) {
    RUN_TEST(test_chat_ok);
    RUN_TEST(test_completions_ok);
    RUN_TEST(test_bad_generate);
    RUN_TEST(test_embeddings);
    RUN_TEST(test_tokenize);
    RUN_TEST(test_utf8);
    return TEST_SUMMARY();
}
