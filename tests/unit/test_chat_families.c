/* Chat templates of the families loom loads, against transformers: each
 * tests/fixtures/chat/FAMILY/ holds the model's real template as its Hugging
 * Face tokenizer_config.json carries it, and renders.txt, the conversations
 * transformers' apply_chat_template rendered with it
 * (scripts/make_chat_goldens.py). loom must recognise the family from the
 * folder and render every conversation to the same bytes; rendering turn by
 * turn must give the same text where the template allows. */
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "check.h"
#include "base/file.h"
#include "model/chat.h"

#ifndef LOOM_SOURCE_DIR
#define LOOM_SOURCE_DIR "."
#endif
#define CHAT_DIR LOOM_SOURCE_DIR "/tests/fixtures/chat"

typedef struct family {
    const char *dir;
    loom_chat_format format;
    const char *default_system;
    loom_chat_dating dating;
} family;

static const family families[] = {
    {"smollm2", LOOM_CHAT_CHATML, "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
     LOOM_CHAT_UNDATED},
    {"qwen2", LOOM_CHAT_CHATML, "You are a helpful assistant.", LOOM_CHAT_UNDATED},
    {"qwen2.5", LOOM_CHAT_CHATML, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     LOOM_CHAT_UNDATED},
    {"qwen3", LOOM_CHAT_QWEN3, "", LOOM_CHAT_UNDATED},
    {"llama3", LOOM_CHAT_LLAMA3, "", LOOM_CHAT_UNDATED},
    {"llama3.1", LOOM_CHAT_LLAMA3, "", LOOM_CHAT_DATED_FIXED},
    {"mistral", LOOM_CHAT_MISTRAL, "", LOOM_CHAT_UNDATED},
    {"phi3", LOOM_CHAT_PHI3, "", LOOM_CHAT_UNDATED},
    {"phi3.5", LOOM_CHAT_PHI3, "", LOOM_CHAT_UNDATED},
    {"gemma2", LOOM_CHAT_GEMMA, "", LOOM_CHAT_UNDATED},
    {"gemma3", LOOM_CHAT_GEMMA, "", LOOM_CHAT_UNDATED},
};

enum { MAX_MSGS = 8 };

typedef struct golden_case {
    char name[64];
    int add_generation_prompt, n;
    loom_chat_msg msgs[MAX_MSGS];
    char *render;   /* or, refused, the template's exception message */
    int refused;    /* the template refuses the conversation (Gemma 2: a system message) */
} golden_case;

/* "HEAD LEN\n<LEN bytes>\n" at *p: the bytes NUL-terminated in place. */
static char *take_block(char **p, const char *end, char *head, size_t head_cap) {
    char *nl = memchr(*p, '\n', (size_t)(end - *p));
    if (!nl) return NULL;
    *nl = '\0';
    unsigned long len;
    char fmt[16];
    snprintf(fmt, sizeof fmt, "%%%zus %%lu", head_cap - 1);
    if (sscanf(*p, fmt, head, &len) != 2 || len > (size_t)(end - nl - 1) - 1 || nl[1 + len] != '\n') return NULL;
    char *text = nl + 1;
    text[len] = '\0';
    *p = text + len + 1;
    return text;
}

/* Parses renders.txt (in place); the number of cases, -1 on a malformed file. */
static int parse_goldens(char *buf, size_t len, golden_case *cases, int cap) {
    char *p = buf, *end = buf + len;
    int n = 0;
    while (p < end && n < cap) {
        golden_case *c = &cases[n];
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) return -1;
        *nl = '\0';
        if (sscanf(p, "case %63s %d %d", c->name, &c->add_generation_prompt, &c->n) != 3 || c->n < 0 ||
            c->n > MAX_MSGS)
            return -1;
        p = nl + 1;
        for (int i = 0; i < c->n; i++) {
            static char roles[64][MAX_MSGS][16];
            char *role = roles[n % 64][i];
            c->msgs[i].content = take_block(&p, end, role, 16);
            c->msgs[i].role = role;
            if (!c->msgs[i].content) return -1;
        }
        char head[16];
        c->render = take_block(&p, end, head, sizeof head);
        c->refused = c->render && strcmp(head, "refused") == 0;
        if (!c->render || (strcmp(head, "render") != 0 && !c->refused)) return -1;
        n++;
    }
    return n;
}

static void expect_str(const char *got, const char *want, const char *fam, const char *what) {
    CHECK_MSG(got && strcmp(got, want) == 0, "%s %s:\n got  [%s]\n want [%s]", fam, what, got ? got : "(null)",
              want);
}

static const golden_case *find_case(const golden_case *cases, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(cases[i].name, name) == 0) return &cases[i];
    return NULL;
}

/* The turns of c (system?, user, assistant, user) rendered one by one with
 * the reply between them, as loom chat sends them. */
static char *render_by_turns(const loom_chat_template *t, const golden_case *c, const char *reply_prefix) {
    int i = 0;
    const char *system = NULL;
    if (strcmp(c->msgs[0].role, "system") == 0) system = c->msgs[i++].content;
    char *t1 = NULL, *t2 = NULL, *joined = NULL;
    if (loom_chat_render_turn(t, 1, system, c->msgs[i].content, &t1) == LOOM_OK &&
        loom_chat_render_turn(t, 0, NULL, c->msgs[i + 2].content, &t2) == LOOM_OK) {
        size_t n = strlen(t1) + strlen(reply_prefix) + strlen(c->msgs[i + 1].content) + strlen(t2) + 1;
        joined = malloc(n);
        if (joined) snprintf(joined, n, "%s%s%s%s", t1, reply_prefix, c->msgs[i + 1].content, t2);
    }
    free(t1);
    free(t2);
    return joined;
}

static void check_family(const family *f) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", CHAT_DIR, f->dir);
    loom_chat_template t;
    loom_status st = loom_chat_template_from_hf(dir, &t);
    CHECK_MSG(st == LOOM_OK, "%s: %s", f->dir, loom_last_error());
    if (st != LOOM_OK) return;
    CHECK_MSG(t.format == f->format, "%s: detected %s, want %s", f->dir, loom_chat_format_name(t.format),
              loom_chat_format_name(f->format));
    expect_str(t.default_system, f->default_system, f->dir, "default system message");
    CHECK_MSG(t.dating == f->dating, "%s: dating %d, want %d", f->dir, (int)t.dating, (int)f->dating);

    char path[600], *buf;
    size_t len;
    snprintf(path, sizeof path, "%s/renders.txt", dir);
    CHECK_MSG(loom_read_file(path, 1 << 20, &buf, &len) == LOOM_OK, "%s", loom_last_error());
    golden_case cases[16];
    int n = parse_goldens(buf, len, cases, 16);
    CHECK_MSG(n >= 7, "%s: %d cases parsed", path, n);
    int refused = 0;
    for (int i = 0; i < n; i++) {
        char *s = NULL;
        CHECK(loom_chat_render(&t, cases[i].msgs, cases[i].n, cases[i].add_generation_prompt, &s) == LOOM_OK);
        /* a conversation the template refuses loom renders anyway, as llama.cpp does (Gemma 2's
         * system message: before the first user message, as Gemma 3's template puts it) */
        if (cases[i].refused) refused++;
        else expect_str(s, cases[i].render, f->dir, cases[i].name);
        free(s);
    }
    if (refused) fprintf(stderr, "%s: %d conversations the template refuses (not compared)\n", f->dir, refused);
    CHECK_MSG(refused <= 4, "%s: %d of %d conversations refused", f->dir, refused, n);
    /* per turn: where the template does not rewrite earlier turns */
    const golden_case *c = find_case(cases, n, "multi_turn_system");
    if (f->format == LOOM_CHAT_MISTRAL || (c && c->refused)) c = find_case(cases, n, "multi_turn");
    const char *turns = c ? c->name : "multi_turn(_system)";
    CHECK_MSG(c != NULL, "%s: no case %s", f->dir, turns);
    if (c) {
        char *s = render_by_turns(&t, c, f->format == LOOM_CHAT_MISTRAL ? " " : "");
        expect_str(s, c->render, f->dir, "turn by turn");
        free(s);
    }
    free(buf);
}

static void detect(const char *src, loom_status want_st, loom_chat_format want, const char *what) {
    loom_chat_template t;
    loom_status st = loom_chat_template_from_jinja(src, strlen(src), &t);
    CHECK_MSG(st == want_st && (st != LOOM_OK || t.format == want), "%s: status %d format %s", what, (int)st,
              st == LOOM_OK ? loom_chat_format_name(t.format) : "-");
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

int main(void) {
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) check_family(&families[i]);

    /* Llama 3.2: chat_template.jinja (no tokenizer_config.json), dated today */
    loom_chat_template t;
    CHECK(loom_chat_template_from_hf(CHAT_DIR "/llama3.2", &t) == LOOM_OK);
    CHECK(t.format == LOOM_CHAT_LLAMA3 && t.dating == LOOM_CHAT_DATED_TODAY);
    char *s = NULL, want[256], date[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%d %b %Y", localtime_r(&now, &tm));
    const loom_chat_msg hi[] = {{"user", "Hi"}};
    CHECK(loom_chat_render(&t, hi, 1, 1, &s) == LOOM_OK);
    snprintf(want, sizeof want,
             "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
             "2023\nToday Date: %s\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\n", date);
    expect_str(s, want, "llama3.2", "dated today");
    free(s);

    /* llama.cpp's markers on other templates */
    detect("{{ '<|im_start|>' + m + '<|im_sep|>' }}", LOOM_ERR_UNSUPPORTED, 0, "Phi-4 is not chatml");
    detect("{{ '<|im_start|>User:' }}<end_of_utterance>", LOOM_ERR_UNSUPPORTED, 0, "SmolVLM is not chatml");
    detect("{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}", LOOM_OK, LOOM_CHAT_LLAMA2, "Llama 2");
    detect("{{- ' [INST] ' + system_message + '\\n\\n' }}", LOOM_OK, LOOM_CHAT_LLAMA2, "Mistral v1 (' [INST]')");
    detect("{{ '[SYSTEM_PROMPT]' }}[AVAILABLE_TOOLS]{{ '[INST]' }}", LOOM_OK, LOOM_CHAT_LLAMA2, "Mistral v7");
    detect("mistral-v3 [AVAILABLE_TOOLS]", LOOM_OK, LOOM_CHAT_MISTRAL, "a template named mistral");
    detect("{{'<|user|>\\n' + c + '<|end|>\\n<|assistant|>\\n'}}", LOOM_OK, LOOM_CHAT_PHI3, "Phi-3");
    detect("<|start_header_id|>{{ role }}<|end_header_id|>", LOOM_OK, LOOM_CHAT_LLAMA3, "Llama 3");
    detect("{{ '<start_of_turn>user' }}", LOOM_OK, LOOM_CHAT_GEMMA, "Gemma");
    detect("{{ '<|user|>\\n' + c + '</s>' }}", LOOM_ERR_UNSUPPORTED, 0, "Zephyr: unknown");
    { /* Gemma 2 refuses a system message; loom puts it before the first user message (Gemma 3's way) */
        loom_chat_template g;
        CHECK(loom_chat_template_from_name("gemma", &g) == LOOM_OK);
        const loom_chat_msg m[] = {{"system", "Be brief."}, {"user", " Hi "}, {"assistant", "Hello."}, {"user", "Bye"}};
        char *r = NULL;
        CHECK(loom_chat_render(&g, m, 4, 1, &r) == LOOM_OK);
        expect_str(r, "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
                      "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n", "gemma", "system message");
        CHECK(loom_chat_bos_length(&g, r) == 5);
        free(r);
    }
    CHECK(strstr(loom_last_error(), "--chat-template") != NULL);

    /* tokenizer_config.json's list form; a folder without a template */
    char tmp[] = "/tmp/loom_chat_XXXXXX", path[64];
    CHECK(mkdtemp(tmp) != NULL);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", tmp);
    write_file(path, "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"<|im_start|>\"}, "
                     "{\"name\": \"default\", \"template\": \"<|start_header_id|><|end_header_id|>\"}]}");
    CHECK(loom_chat_template_from_hf(tmp, &t) == LOOM_OK && t.format == LOOM_CHAT_LLAMA3);
    write_file(path, "{\"bos_token\": \"<s>\"}");
    CHECK(loom_chat_template_from_hf(tmp, &t) == LOOM_ERR_UNSUPPORTED);
    write_file(path, "{\"chat_template\": ");
    CHECK(loom_chat_template_from_hf(tmp, &t) == LOOM_ERR_FORMAT);
    remove(path);
    CHECK(loom_chat_template_from_hf(tmp, &t) == LOOM_ERR_UNSUPPORTED);
    rmdir(tmp);

    /* a model loaded from a Hugging Face folder finds its chat_template.jinja
     * (the family fixture's, a ChatML template transformers wrote) */
    loom_model_params mp = loom_model_default_params();
    mp.n_threads = 1;
    mp.n_ctx = 16;
    loom_model *m = NULL;
    CHECK_MSG(loom_model_load(LOOM_SOURCE_DIR "/tests/fixtures/families/qwen3", &mp, &m) == LOOM_OK, "%s",
              loom_last_error());
    if (m) {
        loom_chat_template *ct = NULL;
        CHECK_MSG(loom_chat_template_from_model(m, &ct) == LOOM_OK, "%s", loom_last_error());
        CHECK(ct && strcmp(loom_chat_template_name(ct), "chatml") == 0);
        loom_chat_template_free(ct);
        loom_model_free(m);
    }

    /* loom convert carries the folder's chat_template.jinja into the GGUF */
    char gguf[64];
    snprintf(gguf, sizeof gguf, "%s/qwen3.gguf", tmp);
    CHECK(mkdir(tmp, 0700) == 0);
    loom_convert_params cp = loom_convert_default_params();
    CHECK_MSG(loom_convert(LOOM_SOURCE_DIR "/tests/fixtures/families/qwen3", gguf, &cp) == LOOM_OK, "%s",
              loom_last_error());
    loom_gguf *g = NULL;
    CHECK_MSG(loom_gguf_open(gguf, &g) == LOOM_OK, "%s", loom_last_error());
    if (g) {
        const char *src;
        size_t n;
        CHECK(loom_gguf_find_key(g, "tokenizer.chat_template") >= 0 &&
              loom_gguf_get_str(g, "tokenizer.chat_template", &src, &n) == LOOM_OK && n > 0 &&
              strstr(src, "<|im_start|>") != NULL);
        CHECK(loom_chat_template_from_gguf(g, &t) == LOOM_OK && t.format == LOOM_CHAT_CHATML);
        loom_gguf_close(g);
    }
    remove(gguf);
    rmdir(tmp);

    /* the BOS text a caller whose tokenizer adds BOS skips */
    CHECK(loom_chat_template_from_name("llama3", &t) == LOOM_OK);
    CHECK(loom_chat_bos_length(&t, "<|begin_of_text|><|start_header_id|>") == 17);
    CHECK(loom_chat_bos_length(&t, "<s>") == 0);
    CHECK(loom_chat_template_from_name("mistral", &t) == LOOM_OK && loom_chat_bos_length(&t, "<s>[INST]") == 3);
    CHECK(loom_chat_template_from_name("chatml", &t) == LOOM_OK && loom_chat_bos_length(&t, "<s>") == 0);

    /* every format has a name and comes back by it */
    for (int f = 0; f < LOOM_CHAT_COUNT; f++) {
        CHECK(loom_chat_template_from_name(loom_chat_format_name((loom_chat_format)f), &t) == LOOM_OK);
        CHECK(t.format == (loom_chat_format)f);
    }

    printf("test_chat_families: %d checks, %d failed\n", check_count_, check_failures_);
    return check_failures_ != 0;
}
