/* Tokenizers from Hugging Face tokenizer.json (libcjson).
 *
 * The file is translated into GGUF tokenizer metadata (tokenizer.ggml.*, as
 * llama.cpp's converter writes it), and the GGUF loader builds the tokenizer
 * from that: one implementation of each algorithm, two file formats. The same
 * translation gives `loom convert` the metadata of the files it writes.
 *
 * Supported: WordPiece with BertNormalizer(lowercase) + BertPreTokenizer
 * ("bert"), and byte-level BPE ("gpt2") with GPT-2's, SmolLM's (digits apart),
 * Llama 3's or Qwen2's pre-tokenizer. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/status.h"
#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/tokenizer_hfjson.h"
#include "model/tokenizer_impl.h"

#define HF_MAX_VOCAB (1 << 22)

typedef struct hf_vocab {
    int n;
    const char **piece;   /* borrowed from the cJSON tree */
    int32_t *type;
} hf_vocab;

static void vocab_free(hf_vocab *v) {
    free(v->piece);
    free(v->type);
}

static int json_id(const cJSON *v, int *out) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= HF_MAX_VOCAB ||
        (double)(int)v->valuedouble != v->valuedouble)
        return 0;
    *out = (int)v->valuedouble;
    return 1;
}

/* model.vocab (piece -> id) plus added_tokens; ids must be dense 0..n-1. */
static loom_status read_vocab(const cJSON *root, const cJSON *model, const char *name, hf_vocab *v) {
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    LOOM_RETURN_IF(!cJSON_IsObject(vocab), LOOM_ERR_FORMAT,
                   "tokenizer '%s': model.vocab is not an object of piece: id", name);
    int n = 0, id;
    for (const cJSON *it = vocab->child; it; it = it->next) {
        LOOM_RETURN_IF(!json_id(it, &id), LOOM_ERR_FORMAT, "tokenizer '%s': vocab entry '%.40s' has no "
                       "valid id", name, it->string ? it->string : "?");
        if (id + 1 > n) n = id + 1;
    }
    if (cJSON_IsArray(added))
        for (const cJSON *it = added->child; it; it = it->next) {
            LOOM_RETURN_IF(!json_id(cJSON_GetObjectItemCaseSensitive(it, "id"), &id) ||
                           !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(it, "content")),
                           LOOM_ERR_FORMAT, "tokenizer '%s': an added_tokens entry lacks id or content", name);
            if (id + 1 > n) n = id + 1;
        }
    LOOM_RETURN_IF(n == 0, LOOM_ERR_FORMAT, "tokenizer '%s': the vocabulary is empty", name);
    v->n = n;
    v->piece = calloc((size_t)n, sizeof *v->piece);
    v->type = malloc(sizeof *v->type * (size_t)n);
    LOOM_RETURN_IF(!v->piece || !v->type, LOOM_ERR_NOMEM, "tokenizer '%s': out of memory", name);
    for (int i = 0; i < n; i++) v->type[i] = TOK_TYPE_NORMAL;
    for (const cJSON *it = vocab->child; it; it = it->next) {
        json_id(it, &id);
        LOOM_RETURN_IF(v->piece[id], LOOM_ERR_FORMAT, "tokenizer '%s': id %d is used twice", name, id);
        v->piece[id] = it->string;
    }
    if (cJSON_IsArray(added))
        for (const cJSON *it = added->child; it; it = it->next) {
            json_id(cJSON_GetObjectItemCaseSensitive(it, "id"), &id);
            const char *c = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
            LOOM_RETURN_IF(v->piece[id] && strcmp(v->piece[id], c) != 0, LOOM_ERR_FORMAT,
                           "tokenizer '%s': added token %d '%.40s' differs from the vocabulary's '%.40s'",
                           name, id, c, v->piece[id]);
            v->piece[id] = c;
            v->type[id] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special")) ? TOK_TYPE_CONTROL
                                                                                         : TOK_TYPE_USER_DEFINED;
        }
    for (int i = 0; i < n; i++)
        LOOM_RETURN_IF(!v->piece[i], LOOM_ERR_FORMAT, "tokenizer '%s': no piece has id %d (ids must be "
                       "0..%d without gaps)", name, i, n - 1);
    return LOOM_OK;
}

static const char *type_of(const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : "";
}

/* Whether the pre-tokenizer tree contains a node of type ty (Sequence nests). */
static const cJSON *find_node(const cJSON *o, const char *ty, int depth) {
    if (!cJSON_IsObject(o) || depth > 8) return NULL;
    if (strcmp(type_of(o), ty) == 0) return o;
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(o, "pretokenizers");
    if (!seq) seq = cJSON_GetObjectItemCaseSensitive(o, "normalizers");
    if (cJSON_IsArray(seq))
        for (const cJSON *it = seq->child; it; it = it->next) {
            const cJSON *r = find_node(it, ty, depth + 1);
            if (r) return r;
        }
    return NULL;
}

static loom_status wordpiece(const cJSON *root, const char *name, loom_gguf_writer *w) {
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    const cJSON *bn = find_node(norm, "BertNormalizer", 0);
    LOOM_RETURN_IF(!bn, LOOM_ERR_UNSUPPORTED, "tokenizer '%s': WordPiece without BertNormalizer is not "
                   "supported", name);
    const cJSON *lc = cJSON_GetObjectItemCaseSensitive(bn, "lowercase");
    LOOM_RETURN_IF(cJSON_IsFalse(lc), LOOM_ERR_UNSUPPORTED, "tokenizer '%s': cased WordPiece "
                   "(BertNormalizer lowercase=false) is not supported", name);
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    LOOM_RETURN_IF(!find_node(pre, "BertPreTokenizer", 0), LOOM_ERR_UNSUPPORTED,
                   "tokenizer '%s': WordPiece without BertPreTokenizer is not supported", name);
    return loom_gguf_writer_set_str(w, "tokenizer.ggml.model", "bert");
}

/* Qwen2's Split pattern (Qwen3's too), as its tokenizer.json writes it (tokenizer_bpe.c implements it). */
#define QWEN2_RE "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static loom_status byte_bpe(const cJSON *root, const cJSON *model, const char *name, loom_gguf_writer *w) {
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    LOOM_RETURN_IF(!find_node(pre, "ByteLevel", 0), LOOM_ERR_UNSUPPORTED,
                   "tokenizer '%s': BPE with neither a ByteLevel pre-tokenizer nor SentencePiece's "
                   "U+2581 spaces (a Replace normalizer or a Metaspace pre-tokenizer) is not supported", name);
    const char *family = "gpt-2";
    const cJSON *digits = find_node(pre, "Digits", 0);
    const cJSON *split = find_node(pre, "Split", 0);
    if (digits && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(digits, "individual_digits"))) {
        family = "smollm";
    } else if (split) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(split, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        if (cJSON_IsString(re) && strstr(re->valuestring, "(?i:'s|'t|'re|'ve|'m|'ll|'d)") &&
            strstr(re->valuestring, "\\p{N}{1,3}"))
            family = "llama-bpe";
        else if (cJSON_IsString(re) && strcmp(re->valuestring, QWEN2_RE) == 0)
            family = "qwen2";
        else
            return loom_set_error(LOOM_ERR_UNSUPPORTED, "tokenizer '%s': the pre-tokenizer's Split "
                                  "pattern is not one loom knows (GPT-2, SmolLM, Llama 3, Qwen2)", name);
    }
    LOOM_TRY(loom_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"));
    LOOM_TRY(loom_gguf_writer_set_str(w, "tokenizer.ggml.pre", family));
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    LOOM_RETURN_IF(!cJSON_IsArray(merges), LOOM_ERR_FORMAT, "tokenizer '%s': model.merges is missing", name);
    int nm = cJSON_GetArraySize(merges);
    char **ms = calloc((size_t)(nm ? nm : 1), sizeof *ms);
    LOOM_RETURN_IF(!ms, LOOM_ERR_NOMEM, "tokenizer '%s': out of memory", name);
    loom_status s = LOOM_OK;
    int k = 0;
    for (const cJSON *it = merges->child; it && s == LOOM_OK; it = it->next, k++) {
        const char *a = NULL, *b = NULL;
        if (cJSON_IsString(it)) {  /* "left right" */
            ms[k] = strdup(it->valuestring);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 0)) && cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            a = cJSON_GetArrayItem(it, 0)->valuestring;
            b = cJSON_GetArrayItem(it, 1)->valuestring;
            ms[k] = malloc(strlen(a) + strlen(b) + 2);
            if (ms[k]) sprintf(ms[k], "%s %s", a, b);
        } else {
            s = loom_set_error(LOOM_ERR_FORMAT, "tokenizer '%s': merge %d is neither \"a b\" nor [a, b]",
                               name, k);
            break;
        }
        if (!ms[k]) s = loom_set_error(LOOM_ERR_NOMEM, "tokenizer '%s': out of memory", name);
    }
    if (s == LOOM_OK)
        s = loom_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)ms, NULL,
                                         (uint64_t)nm);
    for (int i = 0; i < nm; i++) free(ms[i]);
    free(ms);
    return s;
}

/* ------------------------------------------------------------ SentencePiece-style BPE */

/* Whether a BPE tokenizer.json is SentencePiece-style (Llama 2, Mistral,
 * Phi-3, Gemma): pieces carry U+2581 for spaces, put there by a normalizer
 * Replace(" " -> "▁") or a Metaspace pre-tokenizer, and bytes fall back to
 * <0xXX> pieces; no ByteLevel pre-tokenizer. */
static int spm_style(const cJSON *root) {
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON *nz = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (find_node(pre, "ByteLevel", 0)) return 0;
    if (find_node(pre, "Metaspace", 0)) return 1;
    const cJSON *rep = find_node(nz, "Replace", 0);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(rep, "content");
    return cJSON_IsString(content) && strcmp(content->valuestring, "\xe2\x96\x81") == 0;
}

/* Whether a space-mark is put before the text (SentencePiece's
 * add_dummy_prefix): a normalizer Prepend("▁"), or a Metaspace whose
 * prepend_scheme is "always" or "first" (older files: add_prefix_space). */
static int spm_prefix(const cJSON *root) {
    const cJSON *pp = find_node(cJSON_GetObjectItemCaseSensitive(root, "normalizer"), "Prepend", 0);
    const cJSON *pv = cJSON_GetObjectItemCaseSensitive(pp, "prepend");
    if (cJSON_IsString(pv) && strcmp(pv->valuestring, "\xe2\x96\x81") == 0) return 1;
    const cJSON *ms = find_node(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), "Metaspace", 0);
    if (!ms) return 0;
    const cJSON *sch = cJSON_GetObjectItemCaseSensitive(ms, "prepend_scheme");
    if (cJSON_IsString(sch)) return strcmp(sch->valuestring, "never") != 0;
    return !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(ms, "add_prefix_space"));
}

/* SentencePiece BPE from tokenizer.json, as llama.cpp's "llama" vocabulary:
 * SentencePiece merges the adjacent pair whose joined piece scores highest,
 * and Hugging Face's conversion wrote those merges in score order, so a
 * piece's score is minus the rank of the first merge that makes it (pieces
 * no merge makes: below every merge). <0xXX> pieces are byte pieces when the
 * model falls back to bytes; model.unk_token is the unknown piece. */
static loom_status spm_bpe(const cJSON *root, const cJSON *model, const char *name, hf_vocab *v,
                           loom_gguf_writer *w) {
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    LOOM_RETURN_IF(!cJSON_IsArray(merges), LOOM_ERR_FORMAT, "tokenizer '%s': model.merges is missing", name);
    /* piece -> id: the tokenizers' own table (loom_tok_find) over the pieces */
    float *score = malloc(sizeof *score * (size_t)v->n);
    uint32_t *len = malloc(sizeof *len * (size_t)v->n);
    loom_tokenizer *m = NULL;
    if (!score || !len) {
        free(score);
        free(len);
        return loom_set_error(LOOM_ERR_NOMEM, "tokenizer '%s': out of memory", name);
    }
    for (int i = 0; i < v->n; i++) len[i] = (uint32_t)strlen(v->piece[i]);
    loom_status s = loom_tok_create(TOK_SPM, v->n, v->piece, len, NULL, &m);
    free(len);
    if (s != LOOM_OK) {
        free(score);
        return s;
    }
    for (int i = 0; i < v->n; i++) score[i] = v->type[i] == TOK_TYPE_NORMAL ? -1e30f : 0.0f;
    char buf[1024];
    int r = 0;
    for (const cJSON *it = merges->child; it; it = it->next, r++) {
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        if (cJSON_IsString(it)) {  /* "left right": pieces hold no spaces (U+2581 stands for them) */
            a = it->valuestring;
            const char *sp = strchr(a, ' ');
            if (sp) la = (size_t)(sp - a), b = sp + 1, lb = strlen(b);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            a = cJSON_GetArrayItem(it, 0)->valuestring, b = cJSON_GetArrayItem(it, 1)->valuestring;
            la = strlen(a), lb = strlen(b);
        }
        if (!a || !b) {
            s = loom_set_error(LOOM_ERR_FORMAT, "tokenizer '%s': merge %d is neither \"a b\" nor [a, b]", name, r);
            break;
        }
        if (la + lb >= sizeof buf) continue;  /* longer than any piece a merge can make here */
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        int id = loom_tok_find(m, buf, la + lb);
        if (id >= 0 && v->type[id] == TOK_TYPE_NORMAL && score[id] < -1e29f) score[id] = -(float)r;
    }
    int fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    for (int i = 0; s == LOOM_OK && i < v->n; i++) {
        const char *p = v->piece[i];
        if (fallback && strlen(p) == 6 && memcmp(p, "<0x", 3) == 0 && p[5] == '>' && strchr("0123456789ABCDEF", p[3]) &&
            strchr("0123456789ABCDEF", p[4]))
            v->type[i] = TOK_TYPE_BYTE, score[i] = 0.0f;
        if (cJSON_IsString(unk) && strcmp(p, unk->valuestring) == 0) v->type[i] = TOK_TYPE_UNKNOWN, score[i] = 0.0f;
    }
    if (s == LOOM_OK) s = loom_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (s == LOOM_OK)
        s = loom_gguf_writer_set_arr(w, "tokenizer.ggml.scores", LOOM_GGUF_FLOAT32, score, (uint64_t)v->n);
    if (s == LOOM_OK) s = loom_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", spm_prefix(root));
    free(score);
    loom_tokenizer_free(m);
    return s;
}

/* A special token named in tokenizer_config.json: "tok" or {"content": "tok"}. */
static const char *config_token(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int piece_id(const hf_vocab *v, const char *s) {
    for (int i = 0; s && i < v->n; i++)
        if (strcmp(v->piece[i], s) == 0) return i;
    return -1;
}

/* Whether tokenizer.json's post-processor decides on a leading special token,
 * as llama.cpp's converter reads it: a TemplateProcessing (alone or in a
 * Sequence) whose "single" template has more than one item and begins with a
 * SpecialToken: 1 and *first = that token; a ByteLevel post-processor
 * without one: 0 (no BOS); else -1 (tokenizer_config.json's add_bos_token
 * decides). Transformers adds what the post-processor adds. */
static int post_processor_bos(const cJSON *root, const char **first) {
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
    if (!cJSON_IsObject(pp)) return -1;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors");
    int decided = -1;
    for (const cJSON *p = cJSON_IsArray(list) ? list->child : pp; p; p = cJSON_IsArray(list) ? p->next : NULL) {
        const char *ty = type_of(p);
        if (strcmp(ty, "ByteLevel") == 0 && decided < 0) decided = 0;
        if (strcmp(ty, "TemplateProcessing") != 0) continue;
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single");
        if (!cJSON_IsArray(single) || cJSON_GetArraySize(single) < 2) continue;
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(single->child, "SpecialToken");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(st, "id");
        if (cJSON_IsString(id)) {
            *first = id->valuestring;
            decided = 1;
        }
    }
    return decided;
}

/* Special ids and add_bos/add_eos from tokenizer_config.json (may be NULL)
 * and the post-processor of tokenizer.json (root), which decides add_bos when
 * it says (as in llama.cpp's converter: Llama 3's tokenizer.json adds
 * <|begin_of_text|> there, its tokenizer_config.json has no add_bos_token). */
static loom_status specials(const cJSON *root, const cJSON *cfg, const hf_vocab *v, int bert,
                            loom_gguf_writer *w) {
    if (bert) {
        const char *names[][2] = {{"tokenizer.ggml.unknown_token_id", "[UNK]"},
                                  {"tokenizer.ggml.cls_token_id", "[CLS]"},
                                  {"tokenizer.ggml.seperator_token_id", "[SEP]"},
                                  {"tokenizer.ggml.padding_token_id", "[PAD]"}};
        for (size_t i = 0; i < 4; i++) {
            int id = piece_id(v, names[i][1]);
            if (id >= 0) LOOM_TRY(loom_gguf_writer_set_u32(w, names[i][0], (uint32_t)id));
        }
        return LOOM_OK;
    }
    const char *first = NULL;
    int post = post_processor_bos(root, &first);
    const char *bos_name = config_token(cfg, "bos_token");
    if (!bos_name && post == 1) bos_name = first;
    int bos = piece_id(v, bos_name);
    int eos = piece_id(v, config_token(cfg, "eos_token"));
    int unk = piece_id(v, config_token(cfg, "unk_token"));
    int pad = piece_id(v, config_token(cfg, "pad_token"));
    if (bos >= 0) LOOM_TRY(loom_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos));
    if (eos >= 0) LOOM_TRY(loom_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos));
    if (unk >= 0) LOOM_TRY(loom_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)unk));
    if (pad >= 0) LOOM_TRY(loom_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad));
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
    int add_bos = post == 1 ? bos >= 0 && strcmp(first, bos_name) == 0 : post == 0 ? 0 : cJSON_IsTrue(ab);
    LOOM_TRY(loom_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", add_bos));
    LOOM_TRY(loom_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", 0));
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(tmpl)) LOOM_TRY(loom_gguf_writer_set_str(w, "tokenizer.chat_template", tmpl->valuestring));
    return LOOM_OK;
}

/* WordPiece pieces in llama.cpp's GGUF convention (what its converter
 * writes): a normal piece "##x" continues a word and becomes "x"; any other
 * normal piece starts a word and gets the U+2581 prefix. Special and added
 * tokens stay as they are. */
static loom_status mark_words(const hf_vocab *v, const char *name, char ***out) {
    char **m = calloc((size_t)v->n, sizeof *m);
    LOOM_RETURN_IF(!m, LOOM_ERR_NOMEM, "tokenizer '%s': out of memory", name);
    for (int i = 0; i < v->n; i++) {
        const char *p = v->piece[i];
        size_t n = strlen(p);
        m[i] = malloc(n + 4);
        if (!m[i]) {
            for (int j = 0; j < i; j++) free(m[j]);
            free(m);
            return loom_set_error(LOOM_ERR_NOMEM, "tokenizer '%s': out of memory", name);
        }
        if (v->type[i] != TOK_TYPE_NORMAL) memcpy(m[i], p, n + 1);
        else if (n > 2 && p[0] == '#' && p[1] == '#') memcpy(m[i], p + 2, n - 1);
        else snprintf(m[i], n + 4, "\xe2\x96\x81%s", p);
    }
    *out = m;
    return LOOM_OK;
}

loom_status loom_tokenizer_hf_json_to_gguf(const char *text, size_t len, const char *config_text,
                                           size_t config_len, const char *name, loom_gguf_writer *w) {
    LOOM_RETURN_IF(!text || !w, LOOM_ERR_INVALID_ARG, "tokenizer: NULL argument");
    if (!name) name = "tokenizer.json";
    cJSON *root = cJSON_ParseWithLength(text, len);
    LOOM_RETURN_IF(!root, LOOM_ERR_FORMAT, "tokenizer '%s' is not valid JSON", name);
    cJSON *cfg = config_text ? cJSON_ParseWithLength(config_text, config_len) : NULL;
    hf_vocab v = {0};
    loom_status s = LOOM_OK;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *ty = type_of(model);
    if (!cJSON_IsObject(model)) {
        s = loom_set_error(LOOM_ERR_FORMAT, "tokenizer '%s' has no \"model\" object", name);
        goto done;
    }
    int bert = strcmp(ty, "WordPiece") == 0;
    if (!bert && strcmp(ty, "BPE") != 0) {
        s = loom_set_error(LOOM_ERR_UNSUPPORTED, "tokenizer '%s': model type '%.32s' is not supported "
                           "(WordPiece, byte-level BPE and SentencePiece-style BPE are)", name, ty);
        goto done;
    }
    s = read_vocab(root, model, name, &v);
    if (s == LOOM_OK)
        s = bert ? wordpiece(root, name, w) : spm_style(root) ? spm_bpe(root, model, name, &v, w)
                                                              : byte_bpe(root, model, name, w);
    char **marked = NULL;
    if (s == LOOM_OK && bert) s = mark_words(&v, name, &marked);
    if (s == LOOM_OK)
        s = loom_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", marked ? (const char *const *)marked : v.piece,
                                         NULL, (uint64_t)v.n);
    for (int i = 0; marked && i < v.n; i++) free(marked[i]);
    free(marked);
    if (s == LOOM_OK)
        s = loom_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", LOOM_GGUF_INT32, v.type, (uint64_t)v.n);
    if (s == LOOM_OK) s = specials(root, cfg, &v, bert, w);
done:
    vocab_free(&v);
    cJSON_Delete(cfg);
    cJSON_Delete(root);
    return s;
}

loom_status loom_tokenizer_load_hf_json_memory(const char *text, size_t len, const char *config_text,
                                               size_t config_len, const char *name, loom_tokenizer **out) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "tokenizer: out is NULL");
    *out = NULL;
    loom_gguf_writer *w;
    LOOM_TRY(loom_gguf_writer_init(&w));
    void *img = NULL;
    size_t size = 0;
    loom_status s = loom_tokenizer_hf_json_to_gguf(text, len, config_text, config_len, name, w);
    if (s == LOOM_OK) s = loom_gguf_writer_write_memory(w, &img, &size);
    loom_gguf_writer_free(w);
    if (s == LOOM_OK) s = loom_tokenizer_load_gguf_memory(img, size, name ? name : "tokenizer.json", out);
    free(img);
    return s;
}

/* path: a tokenizer.json or a folder holding one; tokenizer_config.json beside it is optional. */
loom_status loom_tokenizer_load_hf_json(const char *path, loom_tokenizer **out) {
    LOOM_RETURN_IF(!out || !path, LOOM_ERR_INVALID_ARG, "tokenizer: path and out must not be NULL");
    *out = NULL;
    char file[1100], dir[1100];
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(dir, sizeof dir, "%s", path);
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
    } else {
        snprintf(file, sizeof file, "%s", path);
        snprintf(dir, sizeof dir, "%s", path);
        char *sl = strrchr(dir, '/');
        if (sl) *sl = '\0';
        else snprintf(dir, sizeof dir, ".");
    }
    char *text, *cfg = NULL;
    size_t len, cfg_len = 0;
    LOOM_TRY(loom_read_text_file(file, &text, &len));
    char cfg_path[1200];
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir);
    if (stat(cfg_path, &sb) == 0 && loom_read_text_file(cfg_path, &cfg, &cfg_len) != LOOM_OK) {
        cfg = NULL;
        loom_clear_error();
    }
    loom_status s = loom_tokenizer_load_hf_json_memory(text, len, cfg, cfg_len, file, out);
    free(text);
    free(cfg);
    return s;
}
