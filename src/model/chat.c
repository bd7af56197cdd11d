/* Chat templates: recognised from Jinja source, rendered per turn or whole. */
#include "model/chat.h"

#include <cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/file.h"
#include "base/status.h"

static const char *const format_names[] = {
    [LOOM_CHAT_CHATML] = "chatml", [LOOM_CHAT_LLAMA2] = "llama2", [LOOM_CHAT_LLAMA3] = "llama3",
    [LOOM_CHAT_MISTRAL] = "mistral", [LOOM_CHAT_PHI3] = "phi3",   [LOOM_CHAT_QWEN3] = "qwen3",
    [LOOM_CHAT_GEMMA] = "gemma"};
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
    return loom_set_error(LOOM_ERR_INVALID_ARG, "unknown chat template '%s' (expected chatml, llama2, llama3, mistral, "
                          "phi3, qwen3 or gemma)",
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

/* The first literal default system turn of a chatml template,
 * '<|im_start|>system\nTEXT<|im_end|>' with no Jinja or quotes in TEXT
 * (SmolLM2's; Qwen2.5's in the branch without tools). The newline is a real
 * one in single-line templates and a Jinja escape (backslash, n) in the
 * multi-line ones; escaped newlines in TEXT are decoded. */
static void chatml_default_system(const char *src, size_t len, loom_chat_template *out) {
    const char *open = "<|im_start|>system";
    const char *end = src + len, *p = src;
    while ((p = find_n(p, (size_t)(end - p), open)) != NULL) {
        p += strlen(open);
        if (p < end && *p == '\n')
            p++;
        else if (end - p >= 2 && p[0] == '\\' && p[1] == 'n')
            p += 2;
        else
            continue;
        const char *e = find_n(p, (size_t)(end - p), "<|im_end|>");
        if (!e) return;
        size_t n = (size_t)(e - p), k = 0;
        if (n == 0 || n >= sizeof out->default_system || find_n(p, n, "{") || find_n(p, n, "'") ||
            find_n(p, n, "\""))
            continue;
        for (size_t i = 0; i < n; i++) {
            if (p[i] == '\\' && i + 1 < n && p[i + 1] == 'n') {
                out->default_system[k++] = '\n';
                i++;
            } else {
                out->default_system[k++] = p[i];
            }
        }
        out->default_system[k] = '\0';
        return;
    }
}

loom_status loom_chat_template_from_jinja(const char *src, size_t len, loom_chat_template *out) {
    LOOM_RETURN_IF(!src || !out, LOOM_ERR_INVALID_ARG, "chat template: NULL argument");
    memset(out, 0, sizeof *out);
#define HAS(s) (find_n(src, len, (s)) != NULL)
    if (HAS("<|im_start|>")) {
        LOOM_RETURN_IF(HAS("<|im_sep|>") || HAS("<end_of_utterance>"), LOOM_ERR_UNSUPPORTED,
                       "the chat template uses <|im_start|> but is Phi-4's or SmolVLM's, not ChatML; "
                       "choose one with --chat-template");
        out->format = HAS("reasoning_content") ? LOOM_CHAT_QWEN3 : LOOM_CHAT_CHATML;
        if (out->format == LOOM_CHAT_CHATML) chatml_default_system(src, len, out);
        return LOOM_OK;
    }
    if ((len >= 7 && memcmp(src, "mistral", 7) == 0) || HAS("[INST]")) {
        int v3 = (HAS("' [INST] ' + system_message") || HAS("[AVAILABLE_TOOLS]")) && !HAS(" [INST]") &&
                 !HAS("\"[INST]\"") && !HAS("[SYSTEM_PROMPT]");
        out->format = v3 ? LOOM_CHAT_MISTRAL : LOOM_CHAT_LLAMA2;
        return LOOM_OK;
    }
    if (HAS("<|assistant|>") && HAS("<|end|>")) {
        out->format = LOOM_CHAT_PHI3;
        return LOOM_OK;
    }
    if (HAS("<start_of_turn>")) { /* llama.cpp tests Gemma's marker before Llama 3's */
        out->format = LOOM_CHAT_GEMMA;
        return LOOM_OK;
    }
    if (HAS("<|start_header_id|>") && HAS("<|end_header_id|>")) {
        out->format = LOOM_CHAT_LLAMA3;
        if (HAS("Cutting Knowledge Date"))
            out->dating = HAS("strftime_now") ? LOOM_CHAT_DATED_TODAY : LOOM_CHAT_DATED_FIXED;
        return LOOM_OK;
    }
#undef HAS
    return loom_set_error(LOOM_ERR_UNSUPPORTED,
                          "the chat template is none of ChatML, Qwen3, Llama 2 [INST], Mistral, Phi-3, Gemma or "
                          "Llama 3; choose one with --chat-template chatml|qwen3|llama2|mistral|phi3|gemma|llama3");
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

static int is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

loom_status loom_chat_template_source_hf(const char *dir, char **src, size_t *len) {
    LOOM_RETURN_IF(!dir || !src || !len, LOOM_ERR_INVALID_ARG, "chat template: NULL argument");
    *src = NULL;
    *len = 0;
    char path[1200];
    LOOM_RETURN_IF((size_t)snprintf(path, sizeof path, "%s/chat_template.jinja", dir) >= sizeof path,
                   LOOM_ERR_INVALID_ARG, "chat template: the path '%s' is too long", dir);
    if (is_file(path)) return loom_read_file(path, (size_t)16 << 20, src, len);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    LOOM_RETURN_IF(!is_file(path), LOOM_ERR_UNSUPPORTED,
                   "'%s' has no chat_template.jinja or tokenizer_config.json; choose a chat template by name",
                   dir);
    char *text;
    size_t n;
    LOOM_TRY(loom_read_file(path, (size_t)64 << 20, &text, &n));
    cJSON *cfg = cJSON_ParseWithLength(text, n);
    free(text);
    LOOM_RETURN_IF(!cfg, LOOM_ERR_FORMAT, "'%s' is not valid JSON", path);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsArray(t)) {  /* [{"name": "default", "template": "..."}, {"name": "tool_use", ...}] */
        const cJSON *e, *found = NULL;
        cJSON_ArrayForEach(e, t) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0)
                found = cJSON_GetObjectItemCaseSensitive(e, "template");
        }
        t = found;
    }
    loom_status st = LOOM_OK;
    if (!cJSON_IsString(t))
        st = loom_set_error(LOOM_ERR_UNSUPPORTED, "'%s' has no chat_template; choose a chat template by name",
                            path);
    else if (!(*src = strdup(t->valuestring)))
        st = loom_set_error(LOOM_ERR_NOMEM, "chat template: out of memory");
    else
        *len = strlen(*src);
    cJSON_Delete(cfg);
    return st;
}

loom_status loom_chat_template_from_hf(const char *dir, loom_chat_template *out) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "chat template: NULL argument");
    char *src;
    size_t n;
    LOOM_TRY(loom_chat_template_source_hf(dir, &src, &n));
    loom_status st = loom_chat_template_from_jinja(src, n, out);
    free(src);
    return st;
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

/* s[0..n) without the leading (left) and trailing (right) characters of set. */
static void put_trimmed(sbuf *b, const char *s, size_t n, const char *set, int left, int right) {
    size_t i = 0;
    while (left && i < n && strchr(set, s[i])) i++;
    while (right && n > i && strchr(set, s[n - 1])) n--;
    put(b, s + i, n - i);
}

/* s without leading and trailing ASCII whitespace (Jinja's trim, Python's strip()). */
static void put_stripped(sbuf *b, const char *s) { put_trimmed(b, s, strlen(s), " \t\r\n\v\f", 1, 1); }

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

/* An assistant message of Qwen3's template: thinking written as
 * <think>R</think>C in the content is split off; a reply after the last user
 * message shows it (an empty block when it is the last message), earlier
 * replies drop it. */
static void qwen3_reply(sbuf *b, const char *c, int after_last_query, int last) {
    size_t n = strlen(c), cn = n, rn = 0;
    const char *content = c, *reason = "";
    const char *close = find_n(c, n, "</think>");
    if (close) {
        const char *last_close = close, *q;
        while ((q = find_n(last_close + 8, n - (size_t)(last_close + 8 - c), "</think>")) != NULL) last_close = q;
        content = last_close + 8;
        cn = n - (size_t)(content - c);
        while (cn && *content == '\n') content++, cn--;
        /* split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
        size_t hn = (size_t)(close - c);
        while (hn && c[hn - 1] == '\n') hn--;
        reason = c;
        for (const char *p = c; (q = find_n(p, hn - (size_t)(p - c), "<think>")) != NULL; p = q + 7) reason = q + 7;
        rn = hn - (size_t)(reason - c);
        while (rn && *reason == '\n') reason++, rn--;
    }
    puts_(b, "<|im_start|>assistant\n");
    if (after_last_query && (last || rn)) {
        puts_(b, "<think>\n");
        put_trimmed(b, reason, rn, "\n", 1, 1);
        puts_(b, "\n</think>\n\n");
        put_trimmed(b, content, cn, "\n", 1, 0);
    } else {
        put(b, content, cn);
    }
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

static void llama3_msg(sbuf *b, const char *role, const char *content) {
    puts_(b, "<|start_header_id|>");
    puts_(b, role);
    puts_(b, "<|end_header_id|>\n\n");
    put_stripped(b, content);
    puts_(b, "<|eot_id|>");
}

/* Llama 3's system turn: the given one, or (3.1, 3.2) one that is always
 * there and opens with the knowledge cutoff and the date. */
static void llama3_system(sbuf *b, const loom_chat_template *t, const char *system) {
    if (t->dating == LOOM_CHAT_UNDATED) {
        if (*system) llama3_msg(b, "system", system);
        return;
    }
    char date[32] = "26 Jul 2024";  /* Llama 3.1's template writes it; 3.2's asks strftime_now */
    struct tm tm;
    time_t now = time(NULL);
    if (t->dating == LOOM_CHAT_DATED_TODAY && localtime_r(&now, &tm)) strftime(date, sizeof date, "%d %b %Y", &tm);
    puts_(b, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
    puts_(b, date);
    puts_(b, "\n\n");
    put_stripped(b, system);
    puts_(b, "<|eot_id|>");
}

static void phi3_msg(sbuf *b, const char *role, const char *content) {
    puts_(b, "<|");
    puts_(b, role);
    puts_(b, "|>\n");
    puts_(b, content);
    puts_(b, "<|end|>\n");
}

/* A Gemma turn: "model" for the assistant, the content trimmed; the first
 * turn of a conversation starts with the system message (as it is) and a
 * blank line (Gemma 3's first_user_prefix; Gemma 2's template refuses a
 * system message, llama.cpp's renders it so). */
static void gemma_msg(sbuf *b, const char *role, const char *prefix, const char *content) {
    puts_(b, "<start_of_turn>");
    puts_(b, strcmp(role, "assistant") == 0 ? "model" : role);
    puts_(b, "\n");
    if (prefix) {
        puts_(b, prefix);
        puts_(b, "\n\n");
    }
    put_stripped(b, content);
    puts_(b, "<end_of_turn>\n");
}

static void mistral_user(sbuf *b, const char *system, const char *user) {
    puts_(b, "[INST] ");
    if (system) {
        puts_(b, system);
        puts_(b, "\n\n");
    }
    puts_(b, user);
    puts_(b, "[/INST]");
}

loom_status loom_chat_render_turn(const loom_chat_template *t, int first, const char *system,
                                  const char *user, char **out) {
    LOOM_RETURN_IF(!t || !user || !out, LOOM_ERR_INVALID_ARG, "chat template: NULL argument");
    sbuf b = {0};
    puts_(&b, "");
    if (!system || !*system) system = t->default_system;
    switch (t->format) {
    case LOOM_CHAT_CHATML:
    case LOOM_CHAT_QWEN3:
        if (!first) puts_(&b, "<|im_end|>\n");  /* the reply's close */
        if (first && *system) chatml_msg(&b, "system", system);
        chatml_msg(&b, "user", user);
        puts_(&b, "<|im_start|>assistant\n");
        break;
    case LOOM_CHAT_LLAMA2:
        if (!first) puts_(&b, " </s>");
        llama2_user(&b, first ? system : NULL, user);
        break;
    case LOOM_CHAT_LLAMA3:
        if (first) {
            puts_(&b, "<|begin_of_text|>");
            llama3_system(&b, t, system);
        } else {
            puts_(&b, "<|eot_id|>");
        }
        llama3_msg(&b, "user", user);
        puts_(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case LOOM_CHAT_MISTRAL:
        /* the template puts the system message before the last user message;
         * a cached conversation keeps it where the first turn put it */
        puts_(&b, first ? "<s>" : "</s>");
        mistral_user(&b, first && *system ? system : NULL, user);
        break;
    case LOOM_CHAT_GEMMA:
        puts_(&b, first ? "<bos>" : "<end_of_turn>\n"); /* the template's bos_token; the reply's close */
        gemma_msg(&b, "user", first && *system ? system : NULL, user);
        puts_(&b, "<start_of_turn>model\n");
        break;
    case LOOM_CHAT_PHI3:
        if (!first) puts_(&b, "<|end|>\n");
        if (first && *system) phi3_msg(&b, "system", system);
        phi3_msg(&b, "user", user);
        puts_(&b, "<|assistant|>\n");
        break;
    default:
        free(b.p);
        return loom_set_error(LOOM_ERR_INVALID_ARG, "chat template: unknown format %d", (int)t->format);
    }
    return finish(&b, out);
}

/* Qwen3's last_query_index: the last user message that is not a wrapped tool
 * response (n - 1 when there is none). */
static int qwen3_last_query(const loom_chat_msg *msgs, int n) {
    for (int i = n - 1; i >= 0; i--) {
        const char *c = msgs[i].content;
        size_t len = strlen(c);
        int tool = len >= 15 && strncmp(c, "<tool_response>", 15) == 0 && len >= 16 &&
                   strcmp(c + len - 16, "</tool_response>") == 0;
        if (strcmp(msgs[i].role, "user") == 0 && !tool) return i;
    }
    return n - 1;
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
    int given = n > 0 && strcmp(msgs[0].role, "system") == 0;
    if (given) system = msgs[i++].content;
    int first_user = 1;
    switch (t->format) {
    case LOOM_CHAT_CHATML:
    case LOOM_CHAT_QWEN3: {
        if (*system) chatml_msg(&b, "system", system);
        int last_query = qwen3_last_query(msgs, n);
        for (; i < n; i++) {
            if (t->format == LOOM_CHAT_QWEN3 && strcmp(msgs[i].role, "assistant") == 0)
                qwen3_reply(&b, msgs[i].content, i > last_query, i == n - 1);
            else
                chatml_msg(&b, msgs[i].role, msgs[i].content);
        }
        if (add_generation_prompt) puts_(&b, "<|im_start|>assistant\n");
        break;
    }
    case LOOM_CHAT_LLAMA2:
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
        break;
    case LOOM_CHAT_LLAMA3:
        puts_(&b, "<|begin_of_text|>");
        llama3_system(&b, t, system);
        for (; i < n; i++) llama3_msg(&b, msgs[i].role, msgs[i].content);
        if (add_generation_prompt) puts_(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case LOOM_CHAT_MISTRAL:  /* no generation prompt: a rendering ends with [/INST] */
        puts_(&b, "<s>");
        for (; i < n; i++) {
            if (strcmp(msgs[i].role, "user") == 0) {
                mistral_user(&b, given && i == n - 1 ? system : NULL, msgs[i].content);
            } else {
                puts_(&b, " ");
                put_stripped(&b, msgs[i].content);
                puts_(&b, "</s>");
            }
        }
        break;
    case LOOM_CHAT_GEMMA:
        puts_(&b, "<bos>");
        for (int first = 1; i < n; i++, first = 0)
            gemma_msg(&b, msgs[i].role, first && given ? system : NULL, msgs[i].content);
        if (add_generation_prompt) puts_(&b, "<start_of_turn>model\n");
        break;
    case LOOM_CHAT_PHI3:
        if (*system) phi3_msg(&b, "system", system);
        for (; i < n; i++) phi3_msg(&b, msgs[i].role, msgs[i].content);
        puts_(&b, add_generation_prompt ? "<|assistant|>\n" : "<|endoftext|>");
        break;
    default:
        free(b.p);
        return loom_set_error(LOOM_ERR_INVALID_ARG, "chat template: unknown format %d", (int)t->format);
    }
    return finish(&b, out);
}

size_t loom_chat_bos_length(const loom_chat_template *t, const char *text) {
    if (!t || !text) return 0;
    const char *bos = t->format == LOOM_CHAT_LLAMA3                                    ? "<|begin_of_text|>"
                      : t->format == LOOM_CHAT_LLAMA2 || t->format == LOOM_CHAT_MISTRAL ? "<s>"
                      : t->format == LOOM_CHAT_GEMMA                                    ? "<bos>"
                                                                                         : NULL;
    size_t n = bos ? strlen(bos) : 0;
    return n && strncmp(text, bos, n) == 0 ? n : 0;
}
