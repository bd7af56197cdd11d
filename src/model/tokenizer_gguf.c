/* Tokenizers from GGUF metadata (tokenizer.ggml.*): the loader for the
 * "llama", "gpt2" and "bert" models, file-type detection, and the encode
 * driver that splits text at special tokens before the kind's encoder. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/file.h"
#include "base/status.h"
#include "model/gguf.h"
#include "model/tokenizer_impl.h"
#include "model/unicode.h"

#define SPM_SPACE "\xE2\x96\x81"   /* U+2581, SentencePiece's visible space */

/* ------------------------------------------------------------ encode */

/* The special token that text[0..n) starts with (longest first), or -1.
 * User-defined pieces always count; control pieces only when asked. */
static int match_special(const loom_tokenizer *t, const char *s, size_t n, int parse_control,
                         size_t *len) {
    for (int i = 0; i < t->n_special; i++) {
        int id = t->special[i];
        if (t->type[id] == TOK_TYPE_CONTROL && !parse_control) continue;
        size_t l = t->len[id];
        if (l <= n && memcmp(s, t->blob + t->off[id], l) == 0) {
            *len = l;
            return id;
        }
    }
    return -1;
}

/* Fragments are the text between special tokens. SentencePiece puts its
 * dummy prefix before each (as llama.cpp and Hugging Face's legacy Llama
 * tokenizer do). */
static loom_status encode_fragment(const loom_tokenizer *t, const char *s, size_t n, tok_ids *out) {
    switch (t->kind) {
    case TOK_SPM: return loom_tok_spm_fragment(t, s, n, t->add_space_prefix, out);
    case TOK_BYTE_BPE: return loom_tok_bpe_fragment(t, s, n, out);
    case TOK_WORDPIECE: return loom_tok_wpm_fragment(t, s, n, out);
    default: return loom_set_error(LOOM_ERR_INTERNAL, "tokenizer: kind %d has no GGUF encoder", (int)t->kind);
    }
}

loom_status loom_tok_encode_gguf(const loom_tokenizer *t, const char *text, size_t len, int flags,
                                 tok_ids *out) {
    size_t bad = loom_utf8_check(text, len);
    LOOM_RETURN_IF(bad < len, LOOM_ERR_INVALID_ARG,
                   "tokenizer encode: text is not valid UTF-8 at byte offset %zu (byte 0x%02x)",
                   bad, (unsigned char)text[bad]);
    if ((flags & LOOM_TOK_BOS) && t->bos >= 0) LOOM_TRY(loom_tok_push(out, t->bos));
    unsigned char first[256] = {0};  /* bytes a special token can start with */
    for (int i = 0; i < t->n_special; i++) first[(unsigned char)t->blob[t->off[t->special[i]]]] = 1;
    int parse_control = (flags & LOOM_TOK_PARSE_SPECIAL) != 0;
    size_t frag = 0;
    for (size_t i = 0; i < len;) {
        size_t sl = 0;
        int sid = first[(unsigned char)text[i]] ? match_special(t, text + i, len - i, parse_control, &sl) : -1;
        if (sid < 0) {
            i++;
            continue;
        }
        if (i > frag) LOOM_TRY(encode_fragment(t, text + frag, i - frag, out));
        LOOM_TRY(loom_tok_push(out, sid));
        i += sl;
        frag = i;
    }
    if (len > frag) LOOM_TRY(encode_fragment(t, text + frag, len - frag, out));
    if ((flags & LOOM_TOK_EOS) && t->eos >= 0) LOOM_TRY(loom_tok_push(out, t->eos));
    return LOOM_OK;
}

/* ------------------------------------------------------------ loading */

/* Optional special id: *id keeps its default when key is absent. */
static loom_status opt_id(const loom_gguf *g, const char *key, int n, int *id) {
    if (loom_gguf_find_key(g, key) < 0) return LOOM_OK;
    uint32_t v;
    LOOM_TRY(loom_gguf_get_u32(g, key, &v));
    LOOM_RETURN_IF(v >= (uint32_t)n, LOOM_ERR_FORMAT, "tokenizer '%s': %s = %" PRIu32
                   " is outside the %d-token vocabulary", loom_gguf_path(g), key, v, n);
    *id = (int)v;
    return LOOM_OK;
}

static loom_status opt_bool(const loom_gguf *g, const char *key, int *v) {
    if (loom_gguf_find_key(g, key) < 0) return LOOM_OK;
    return loom_gguf_get_bool(g, key, v);
}

static int str_is(const char *s, size_t n, const char *lit) { return strlen(lit) == n && memcmp(s, lit, n) == 0; }

/* Pieces with SentencePiece's U+2581 turned into ' ' (the engine's
 * convention), written to one malloc'd blob; pieces[] re-pointed into it. */
static loom_status spm_spaces(int n, const char **pieces, uint32_t *lens, char **blob) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += lens[i];
    *blob = malloc(total ? total : 1);
    LOOM_RETURN_IF(!*blob, LOOM_ERR_NOMEM, "tokenizer: out of memory");
    char *p = *blob;
    for (int i = 0; i < n; i++) {
        const char *s = pieces[i];
        char *start = p;
        for (uint32_t j = 0; j < lens[i];) {
            if (j + 3 <= lens[i] && memcmp(s + j, SPM_SPACE, 3) == 0) {
                *p++ = ' ';
                j += 3;
            } else {
                *p++ = s[j++];
            }
        }
        pieces[i] = start;
        lens[i] = (uint32_t)(p - start);
    }
    return LOOM_OK;
}

/* Decoded bytes of token i appended to p (capacity checked by the caller:
 * at most 5 bytes more than the piece); returns the new end. */
static char *decode_piece(const loom_tokenizer *t, int i, char *p) {
    const char *s = t->blob + t->off[i];
    size_t n = t->len[i];
    int ty = t->type[i];
    if (ty == TOK_TYPE_CONTROL && i != t->unk) return p;
    if (i == t->unk && t->kind == TOK_SPM) {
        memcpy(p, " \xE2\x81\x87 ", 5);  /* SentencePiece shows unknown pieces as " ⁇ " */
        return p + 5;
    }
    if (t->kind == TOK_SPM && ty == TOK_TYPE_BYTE && n == 6 && memcmp(s, "<0x", 3) == 0) {
        unsigned v;
        if (sscanf(s + 3, "%2x", &v) == 1) {
            *p++ = (char)v;
            return p;
        }
    }
    if (t->kind == TOK_BYTE_BPE && ty != TOK_TYPE_USER_DEFINED) {
        char *start = p;
        for (size_t j = 0; j < n;) {
            uint32_t cp;
            int k = loom_utf8_decode(s + j, n - j, &cp);
            int b = k ? loom_tok_unicode_to_byte(cp) : -1;
            if (b < 0) {  /* not byte-level text: keep the piece as written */
                memcpy(start, s, n);
                return start + n;
            }
            *p++ = (char)b;
            j += (size_t)k;
        }
        return p;
    }
    if (t->kind == TOK_WORDPIECE) {
        size_t wl = strlen(t->wp_word), cl = strlen(t->wp_cont);
        if (i == t->unk) {
            *p++ = ' ';
        } else if (wl && n >= wl && memcmp(s, t->wp_word, wl) == 0) {
            *p++ = ' ';
            s += wl, n -= wl;
        } else if (cl && n >= cl && memcmp(s, t->wp_cont, cl) == 0) {
            s += cl, n -= cl;
        } else if (!wl) {
            *p++ = ' ';  /* HF vocabularies: a piece without "##" starts a word */
        }
    }
    memcpy(p, s, n);
    return p + n;
}

static loom_status build_decode_table(loom_tokenizer *t) {
    size_t total = 0;
    for (int i = 0; i < t->n_vocab; i++) total += (size_t)t->len[i] + 6;
    t->dec = malloc(total);
    t->dec_off = malloc(sizeof(uint32_t) * (size_t)t->n_vocab);
    t->dec_len = malloc(sizeof(uint32_t) * (size_t)t->n_vocab);
    LOOM_RETURN_IF(!t->dec || !t->dec_off || !t->dec_len || total > UINT32_MAX, LOOM_ERR_NOMEM,
                   "tokenizer: out of memory for the decode table");
    char *p = t->dec;
    for (int i = 0; i < t->n_vocab; i++) {
        t->dec_off[i] = (uint32_t)(p - t->dec);
        char *e = decode_piece(t, i, p);
        t->dec_len[i] = (uint32_t)(e - p);
        *e = '\0';
        p = e + 1;
    }
    return LOOM_OK;
}

typedef struct special_ref { uint32_t len; int32_t id; } special_ref;
static int longer_first(const void *a, const void *b) {
    const special_ref *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Control and user-defined pieces, longest first, for matching in text. */
static loom_status collect_specials(loom_tokenizer *t) {
    int n = 0;
    for (int i = 0; i < t->n_vocab; i++)
        if ((t->type[i] == TOK_TYPE_CONTROL || t->type[i] == TOK_TYPE_USER_DEFINED) && t->len[i] > 0) n++;
    if (n == 0) return LOOM_OK;
    special_ref *refs = malloc(sizeof *refs * (size_t)n);
    t->special = malloc(sizeof(int32_t) * (size_t)n);
    if (!refs || !t->special) {
        free(refs);
        return loom_set_error(LOOM_ERR_NOMEM, "tokenizer: out of memory");
    }
    int k = 0;
    for (int i = 0; i < t->n_vocab; i++)
        if ((t->type[i] == TOK_TYPE_CONTROL || t->type[i] == TOK_TYPE_USER_DEFINED) && t->len[i] > 0)
            refs[k++] = (special_ref){t->len[i], i};
    qsort(refs, (size_t)n, sizeof *refs, longer_first);
    for (int i = 0; i < n; i++) t->special[i] = refs[i].id;
    t->n_special = n;
    free(refs);
    return LOOM_OK;
}

/* Special ids, defaults and flags per kind (llama.cpp's defaults where the
 * metadata is silent). */
static loom_status read_specials(const loom_gguf *g, loom_tokenizer *t) {
    int n = t->n_vocab;
    if (t->kind == TOK_SPM) {
        t->bos = n > 1 ? 1 : -1;
        t->eos = n > 2 ? 2 : -1;
        t->unk = 0;
        t->add_bos = 1;
        t->add_space_prefix = 1;
    } else if (t->kind == TOK_WORDPIECE) {
        t->unk = loom_tok_find(t, "[UNK]", 5);
        t->bos = loom_tok_find(t, "[CLS]", 5);
        t->eos = loom_tok_find(t, "[SEP]", 5);
        t->add_bos = t->add_eos = 1;
    }
    LOOM_TRY(opt_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos));
    LOOM_TRY(opt_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos));
    LOOM_TRY(opt_id(g, "tokenizer.ggml.unknown_token_id", n, &t->unk));
    if (t->kind == TOK_WORDPIECE) {  /* BERT frames text with [CLS] ... [SEP] */
        LOOM_TRY(opt_id(g, "tokenizer.ggml.cls_token_id", n, &t->bos));
        LOOM_TRY(opt_id(g, "tokenizer.ggml.seperator_token_id", n, &t->eos));
    }
    LOOM_TRY(opt_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos));
    LOOM_TRY(opt_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos));
    LOOM_TRY(opt_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix));
    if (t->kind != TOK_SPM) t->add_space_prefix = 0;
    if (t->bos < 0) t->add_bos = 0;
    if (t->eos < 0) t->add_eos = 0;
    return LOOM_OK;
}

static loom_status setup_spm(const loom_gguf *g, loom_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int id = loom_tok_find(t, hex, 6);
        t->byte_id[b] = id >= 0 ? id : t->unk;
        LOOM_RETURN_IF(t->byte_id[b] < 0, LOOM_ERR_FORMAT, "tokenizer '%s': the vocabulary has neither "
                       "the byte piece %s nor an unknown token", loom_gguf_path(g), hex);
    }
    t->strip_lead_space = t->add_space_prefix;
    return LOOM_OK;
}

static loom_status setup_bpe(const loom_gguf *g, loom_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char u[4];
        int k = loom_utf8_encode(loom_tok_byte_to_unicode(b), u);
        t->byte_id[b] = loom_tok_find(t, u, (size_t)k);
    }
    const char *pre = "gpt-2";
    size_t pl = 5;
    if (loom_gguf_find_key(g, "tokenizer.ggml.pre") >= 0)
        LOOM_TRY(loom_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pl));
    if (str_is(pre, pl, "gpt-2")) {
        t->pre = TOK_PRE_GPT2;
    } else if (str_is(pre, pl, "smollm")) {
        t->pre = TOK_PRE_SMOLLM;
    } else if (str_is(pre, pl, "llama-bpe") || str_is(pre, pl, "llama3")) {
        t->pre = TOK_PRE_LLAMA3;
        t->ignore_merges = 1;  /* Llama 3 keeps a pre-token that is a piece whole */
    } else if (str_is(pre, pl, "qwen2")) {
        t->pre = TOK_PRE_QWEN2;
    } else {
        return loom_set_error(LOOM_ERR_UNSUPPORTED, "tokenizer '%s': pre-tokenizer '%.*s' "
                              "(tokenizer.ggml.pre) is not supported (gpt-2, smollm, llama-bpe, qwen2 are)",
                              loom_gguf_path(g), (int)(pl < 64 ? pl : 64), pre);
    }
    loom_gguf_type et;
    uint64_t nm;
    if (loom_gguf_find_key(g, "tokenizer.ggml.merges") < 0)
        return loom_set_error(LOOM_ERR_FORMAT, "tokenizer '%s': byte-level BPE needs "
                              "tokenizer.ggml.merges, which is missing", loom_gguf_path(g));
    LOOM_TRY(loom_gguf_get_arr_info(g, "tokenizer.ggml.merges", &et, &nm));
    const char **ms = malloc(sizeof *ms * (nm ? nm : 1));
    uint64_t *ml = malloc(sizeof *ml * (nm ? nm : 1));
    loom_status st = ms && ml ? LOOM_OK : loom_set_error(LOOM_ERR_NOMEM, "tokenizer: out of memory");
    if (st == LOOM_OK) st = loom_gguf_get_arr_str(g, "tokenizer.ggml.merges", ms, ml, nm);
    if (st == LOOM_OK) st = loom_tok_bpe_merges_init(t, ms, ml, nm);
    free(ms);
    free(ml);
    return st;
}

static void setup_wpm(loom_tokenizer *t) {
    /* llama.cpp's converter marks word starts with U+2581 and drops "##";
     * Hugging Face vocabularies keep "##" on continuations. */
    int hf = loom_tok_find(t, "##s", 3) >= 0 && loom_tok_find(t, SPM_SPACE "s", 4) < 0;
    t->wp_word = hf ? "" : SPM_SPACE;
    t->wp_cont = hf ? "##" : "";
    t->strip_lead_space = 1;
}

/* Builds the tokenizer of an open GGUF file. */
static loom_status load_from(const loom_gguf *g, loom_tokenizer **out) {
    const char *path = loom_gguf_path(g), *model;
    size_t ml;
    LOOM_RETURN_IF(loom_gguf_find_key(g, "tokenizer.ggml.model") < 0, LOOM_ERR_FORMAT,
                   "tokenizer '%s': no tokenizer metadata (tokenizer.ggml.model is missing)", path);
    LOOM_TRY(loom_gguf_get_str(g, "tokenizer.ggml.model", &model, &ml));
    tok_kind kind;
    if (str_is(model, ml, "llama")) kind = TOK_SPM;
    else if (str_is(model, ml, "gpt2")) kind = TOK_BYTE_BPE;
    else if (str_is(model, ml, "bert")) kind = TOK_WORDPIECE;
    else return loom_set_error(LOOM_ERR_UNSUPPORTED, "tokenizer '%s': tokenizer model '%.*s' is not "
                               "supported (llama, gpt2 and bert are)", path, (int)(ml < 64 ? ml : 64), model);

    loom_gguf_type et;
    uint64_t n64;
    LOOM_RETURN_IF(loom_gguf_find_key(g, "tokenizer.ggml.tokens") < 0, LOOM_ERR_FORMAT,
                   "tokenizer '%s': tokenizer.ggml.tokens is missing", path);
    LOOM_TRY(loom_gguf_get_arr_info(g, "tokenizer.ggml.tokens", &et, &n64));
    LOOM_RETURN_IF(n64 == 0 || n64 > (1u << 24), LOOM_ERR_FORMAT,
                   "tokenizer '%s': tokenizer.ggml.tokens has %" PRIu64 " entries (1..%u allowed)",
                   path, n64, 1u << 24);
    int n = (int)n64;
    const char **pieces = malloc(sizeof *pieces * (size_t)n);
    uint64_t *lens64 = malloc(sizeof *lens64 * (size_t)n);
    uint32_t *lens = malloc(sizeof *lens * (size_t)n);
    float *scores = malloc(sizeof *scores * (size_t)n);
    int32_t *types = malloc(sizeof *types * (size_t)n);
    char *blob = NULL;
    loom_tokenizer *t = NULL;
    loom_status st = LOOM_OK;
    if (!pieces || !lens64 || !lens || !scores || !types) {
        st = loom_set_error(LOOM_ERR_NOMEM, "tokenizer '%s': out of memory for %d tokens", path, n);
        goto done;
    }
    st = loom_gguf_get_arr_str(g, "tokenizer.ggml.tokens", pieces, lens64, n64);
    for (int i = 0; st == LOOM_OK && i < n; i++) {
        if (lens64[i] > (1u << 20))
            st = loom_set_error(LOOM_ERR_FORMAT, "tokenizer '%s': token %d is %" PRIu64 " bytes long",
                                path, i, lens64[i]);
        lens[i] = (uint32_t)lens64[i];
        scores[i] = 0.0f;
        types[i] = TOK_TYPE_NORMAL;
    }
    if (st == LOOM_OK && loom_gguf_find_key(g, "tokenizer.ggml.scores") >= 0)
        st = loom_gguf_get_arr_f32(g, "tokenizer.ggml.scores", scores, n64);
    if (st == LOOM_OK && loom_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0)
        st = loom_gguf_get_arr_i32(g, "tokenizer.ggml.token_type", types, n64);
    for (int i = 0; st == LOOM_OK && i < n; i++)
        if (types[i] < TOK_TYPE_UNDEFINED || types[i] > TOK_TYPE_BYTE)
            st = loom_set_error(LOOM_ERR_FORMAT, "tokenizer '%s': token %d has type %d (0..6 allowed)",
                                path, i, (int)types[i]);
    if (st == LOOM_OK && kind == TOK_SPM) st = spm_spaces(n, pieces, lens, &blob);
    if (st == LOOM_OK) st = loom_tok_create(kind, n, pieces, lens, scores, &t);
    if (st != LOOM_OK) goto done;
    t->type = malloc((size_t)n);
    if (!t->type) {
        st = loom_set_error(LOOM_ERR_NOMEM, "tokenizer '%s': out of memory", path);
        goto done;
    }
    for (int i = 0; i < n; i++) t->type[i] = (uint8_t)types[i];
    st = read_specials(g, t);
    if (st == LOOM_OK && kind == TOK_SPM) st = setup_spm(g, t);
    if (st == LOOM_OK && kind == TOK_BYTE_BPE) st = setup_bpe(g, t);
    if (st == LOOM_OK && kind == TOK_WORDPIECE) setup_wpm(t);
    if (st == LOOM_OK) st = collect_specials(t);
    if (st == LOOM_OK) st = build_decode_table(t);

done:
    if (st != LOOM_OK) {
        loom_tokenizer_free(t);
        t = NULL;
    }
    *out = t;
    free(pieces);
    free(lens64);
    free(lens);
    free(scores);
    free(types);
    free(blob);
    return st;
}

loom_status loom_tokenizer_load_gguf_memory(const void *data, size_t size, const char *name,
                                            loom_tokenizer **out) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "tokenizer: out is NULL");
    *out = NULL;
    loom_gguf *g;
    LOOM_TRY(loom_gguf_open_memory(data, size, name, &g));
    loom_status st = load_from(g, out);
    loom_gguf_close(g);
    return st;
}

loom_status loom_tokenizer_from_gguf(const loom_gguf *g, loom_tokenizer **out) {
    LOOM_RETURN_IF(!out || !g, LOOM_ERR_INVALID_ARG, "tokenizer: gguf and out must not be NULL");
    *out = NULL;
    return load_from(g, out);
}

loom_status loom_tokenizer_load_gguf(const char *path, loom_tokenizer **out) {
    LOOM_RETURN_IF(!out || !path, LOOM_ERR_INVALID_ARG, "tokenizer: path and out must not be NULL");
    *out = NULL;
    loom_gguf *g;
    LOOM_TRY(loom_gguf_open(path, &g));
    loom_status st = load_from(g, out);
    loom_gguf_close(g);
    return st;
}

loom_status loom_tokenizer_load(const char *path, loom_tokenizer **out) {
    LOOM_RETURN_IF(!out || !path, LOOM_ERR_INVALID_ARG, "tokenizer: path and out must not be NULL");
    *out = NULL;
    /* Hugging Face tokenizer.json (or a model folder holding one): tokenizer_hfjson.c */
    struct stat sb;
    if (loom_path_ends_with(path, ".json") || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)))
        return loom_tokenizer_load_hf_json(path, out);
    FILE *f = fopen(path, "rb");
    LOOM_RETURN_IF(!f, LOOM_ERR_IO, "tokenizer: cannot open '%s': %s", path, strerror(errno));
    fclose(f);
    return loom_gguf_file_is_gguf(path) ? loom_tokenizer_load_gguf(path, out)
                                        : loom_tokenizer_load_llama2c(path, out);
}
