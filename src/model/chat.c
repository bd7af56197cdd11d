/* Chat templates: chatml and llama2, rendered per turn or whole. */
#include "model/chat.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

static const char *const format_names[] = {[LOOM_CHAT_CHATML] = "chatml", [LOOM_CHAT_LLAMA2] = "llama2"};
_Static_assert(sizeof format_names / sizeof format_names[0] == LOOM_CHAT_COUNT, "chat format names");

const char *loom_chat_format_name(loom_chat_format f) {
    return (unsigned)f < LOOM_CHAT_COUNT ? format_names[f] : "unknown";
}

loom_status loom_chat_template_from_name(const char *name, loom_chat_template *out) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "chat template: NULL argument");
    memset(out, 0, sizeof *out);
    for (int i = 0; i < LOOM_CHAT_COUNT; i++)
        if (name && strcmp(name, format_names[i]) == 0) {
            out->format = (loom_chat_format)i;
            return LOOM_OK;
        }
    return loom_set_error(LOOM_ERR_INVALID_ARG, "unknown chat template '%s' (expected chatml or llama2)",
                          name ? name : "(null)");
}

loom_status loom_chat_template_init(const char *name, loom_chat_template **out) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "chat template: NULL argument");
    *out = NULL;
    loom_chat_template t;
    LOOM_TRY(loom_chat_template_from_name(name, &t));
    return loom_chat_template_dup(&t, out);
}

loom_status loom_chat_template_dup(const loom_chat_template *t, loom_chat_template **out) {
    *out = malloc(sizeof **out);
    LOOM_RETURN_IF(!*out, LOOM_ERR_NOMEM, "chat template: out of memory");
    **out = *t;
    return LOOM_OK;
}

void loom_chat_template_free(loom_chat_template *t) { free(t); }

const char *loom_chat_template_name(const loom_chat_template *t) {
    return t ? loom_chat_format_name(t->format) : "unknown";
}

static const char *find_n(const char *s, size_t len, const char *needle) {
    size_t n = strlen(needle);
    for (size_t i = 0; n <= len && i <= len - n; i++)
        if (memcmp(s + i, needle, n) == 0) return s + i;
    return NULL;
}

loom_status loom_chat_template_from_jinja(const char *src, size_t len, loom_chat_template *out) {
    LOOM_RETURN_IF(!src || !out, LOOM_ERR_INVALID_ARG, "chat template: NULL argument");
    memset(out, 0, sizeof *out);
    if (find_n(src, len, "<|im_start|>")) {
        out->format = LOOM_CHAT_CHATML;
        /* a literal default system turn: '<|im_start|>system\nTEXT<|im_end|>' */
        const char *open = "<|im_start|>system\n";
        const char *p = find_n(src, len, open);
        if (p) {
            p += strlen(open);
            const char *e = find_n(p, len - (size_t)(p - src), "<|im_end|>");
            size_t n = e ? (size_t)(e - p) : 0;
            int literal = e && n > 0 && n < sizeof out->default_system && !find_n(p, n, "{") &&
                          !find_n(p, n, "'") && !find_n(p, n, "\"");
            if (literal) {
                memcpy(out->default_system, p, n);
                out->default_system[n] = '\0';
            }
        }
        return LOOM_OK;
    }
    if (find_n(src, len, "[INST]")) {
        out->format = LOOM_CHAT_LLAMA2;
        return LOOM_OK;
    }
    return loom_set_error(LOOM_ERR_UNSUPPORTED,
                          "tokenizer.chat_template is neither ChatML nor Llama 2 [INST]; choose one "
                          "with --chat-template chatml|llama2");
}

loom_status loom_chat_template_from_gguf(const loom_gguf *g, loom_chat_template *out) {
    LOOM_RETURN_IF(!g || !out, LOOM_ERR_INVALID_ARG, "chat template: NULL argument");
    const char *s;
    size_t n;
    if (loom_gguf_find_key(g, "tokenizer.chat_template") >= 0) {
        LOOM_TRY(loom_gguf_get_str(g, "tokenizer.chat_template", &s, &n));
        return loom_chat_template_from_jinja(s, n, out);
    }
    memset(out, 0, sizeof *out);
    int spm = loom_gguf_find_key(g, "tokenizer.ggml.model") >= 0 &&
              loom_gguf_get_str(g, "tokenizer.ggml.model", &s, &n) == LOOM_OK && n == 5 &&
              memcmp(s, "llama", 5) == 0;
    out->format = spm ? LOOM_CHAT_LLAMA2 : LOOM_CHAT_CHATML;
    return LOOM_OK;
}

/* A growing string. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* s without leading and trailing ASCII whitespace (Jinja's strip()). */
static void put_stripped(sbuf *b, const char *s) {
    size_t i = 0, n = strlen(s);
    while (i < n && strchr(" \t\r\n\v\f", s[i])) i++;
    while (n > i && strchr(" \t\r\n\v\f", s[n - 1])) n--;
    put(b, s + i, n - i);
}

static loom_status finish(sbuf *b, char **out) {
    if (b->oom || !b->p) {
        free(b->p);
        *out = NULL;
        return loom_set_error(LOOM_ERR_NOMEM, "chat template: out of memory");
    }
    *out = b->p;
    return LOOM_OK;
}

static void chatml_msg(sbuf *b, const char *role, const char *content) {
    puts_(b, "<|im_start|>");
    puts_(b, role);
    puts_(b, "\n");
    puts_(b, content);
    puts_(b, "<|im_end|>\n");
}

static void llama2_user(sbuf *b, const char *system, const char *user) {
    puts_(b, "<s>[INST] ");
    if (system && *system) {
        puts_(b, "<<SYS>>\n");
        put_stripped(b, system);
        puts_(b, "\n<</SYS>>\n\n");
    }
    put_stripped(b, user);
    puts_(b, " [/INST]");
}

loom_status loom_chat_render_turn(const loom_chat_template *t, int first, const char *system,
                                  const char *user, char **out) {
    LOOM_RETURN_IF(!t || !user || !out, LOOM_ERR_INVALID_ARG, "chat template: NULL argument");
    sbuf b = {0};
    puts_(&b, "");
    if (!system || !*system) system = t->default_system;
    if (t->format == LOOM_CHAT_CHATML) {
        if (!first) puts_(&b, "<|im_end|>\n");  /* the reply's close */
        if (first && *system) chatml_msg(&b, "system", system);
        chatml_msg(&b, "user", user);
        puts_(&b, "<|im_start|>assistant\n");
    } else {
        if (!first) puts_(&b, " </s>");
        llama2_user(&b, first ? system : NULL, user);
    }
    return finish(&b, out);
}

loom_status loom_chat_render(const loom_chat_template *t, const loom_chat_msg *msgs, int n,
                             int add_generation_prompt, char **out) {
    LOOM_RETURN_IF(!t || (!msgs && n) || n < 0 || !out, LOOM_ERR_INVALID_ARG,
                   "chat template: bad arguments");
    for (int i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        int ok = r && msgs[i].content &&
                 ((i == 0 && strcmp(r, "system") == 0) || strcmp(r, "user") == 0 ||
                  strcmp(r, "assistant") == 0);
        LOOM_RETURN_IF(!ok, LOOM_ERR_INVALID_ARG, "chat message %d: role '%s' (expected system "
                       "first, then user/assistant) or no content", i, r ? r : "(null)");
    }
    sbuf b = {0};
    puts_(&b, "");
    int i = 0;
    const char *system = t->default_system;
    if (n > 0 && strcmp(msgs[0].role, "system") == 0) system = msgs[i++].content;
    if (t->format == LOOM_CHAT_CHATML) {
        if (*system) chatml_msg(&b, "system", system);
        for (; i < n; i++) chatml_msg(&b, msgs[i].role, msgs[i].content);
        if (add_generation_prompt) puts_(&b, "<|im_start|>assistant\n");
    } else {
        int first_user = 1;
        for (; i < n; i++) {
            if (strcmp(msgs[i].role, "user") == 0) {
                llama2_user(&b, first_user ? system : NULL, msgs[i].content);
                first_user = 0;
            } else {
                puts_(&b, " ");
                put_stripped(&b, msgs[i].content);
                puts_(&b, " </s>");
            }
        }
    }
    return finish(&b, out);
}
