/* Byte-level BPE (GPT-2 family): the text is split into pre-tokens by the
 * family's regex (written out by hand below), each pre-token's bytes become
 * their byte-level pieces, and ranked merges join them (the merge engine of
 * tokenizer.c, lowest rank first, leftmost on ties). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/tokenizer_impl.h"
#include "model/unicode.h"

/* ------------------------------------------------- byte <-> unicode */

/* GPT-2 keeps printable Latin-1 bytes as their own codepoints and moves the
 * other 68 (controls, space, DEL, NBSP, soft hyphen) to U+0100.. in order. */
static int byte_is_printable(int b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

uint32_t loom_tok_byte_to_unicode(int b) {
    if (byte_is_printable(b)) return (uint32_t)b;
    if (b <= 32) return 256u + (uint32_t)b;            /* 0..32    -> 256..288 */
    if (b <= 160) return 256u + 33u + (uint32_t)(b - 127);  /* 127..160 -> 289..322 */
    return 323;                                         /* 173 */
}

int loom_tok_unicode_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable((int)cp) ? (int)cp : -1;
    if (cp <= 288) return (int)cp - 256;
    if (cp <= 322) return (int)cp - 289 + 127;
    return cp == 323 ? 173 : -1;
}

/* ----------------------------------------------------------- merges */

struct tok_merges {
    uint64_t *key;    /* (mask + 1) pair key, 0 = empty */
    int32_t *rank;
    int32_t *id;
    uint32_t mask;
};

static uint64_t pair_key(int32_t l, int32_t r) { return ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1; }

static uint32_t key_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

void loom_tok_bpe_merges_free(tok_merges *m) {
    if (!m) return;
    free(m->key);
    free(m->rank);
    free(m->id);
    free(m);
}

int loom_tok_bpe_pair(const tok_merges *m, int32_t l, int32_t r, int32_t *rank, int32_t *id) {
    uint64_t k = pair_key(l, r);
    for (uint32_t h = key_hash(k) & m->mask;; h = (h + 1) & m->mask) {
        if (m->key[h] == 0) return 0;
        if (m->key[h] == k) {
            *rank = m->rank[h];
            *id = m->id[h];
            return 1;
        }
    }
}

loom_status loom_tok_bpe_merges_init(loom_tokenizer *t, const char *const *merges,
                                     const uint64_t *lens, uint64_t n) {
    LOOM_RETURN_IF(n > (uint64_t)(INT32_MAX / 4), LOOM_ERR_FORMAT,
                   "tokenizer: %llu merges is too many", (unsigned long long)n);
    tok_merges *m = calloc(1, sizeof *m);
    LOOM_RETURN_IF(!m, LOOM_ERR_NOMEM, "tokenizer: out of memory for merges");
    uint32_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    m->mask = cap - 1;
    m->key = calloc(cap, sizeof *m->key);
    m->rank = malloc(cap * sizeof *m->rank);
    m->id = malloc(cap * sizeof *m->id);
    char *buf = malloc((size_t)t->max_len + 1);
    if (!m->key || !m->rank || !m->id || !buf) {
        free(buf);
        loom_tok_bpe_merges_free(m);
        return loom_set_error(LOOM_ERR_NOMEM, "tokenizer: out of memory for %llu merges",
                              (unsigned long long)n);
    }
    for (uint64_t i = 0; i < n; i++) {
        /* "left right": split at the first space after the first byte (a
         * left part may itself be a space in non-byte-level vocabularies). */
        const char *s = merges[i];
        size_t len = (size_t)lens[i], sp = 1;
        while (sp < len && s[sp] != ' ') sp++;
        if (sp >= len || len - 1 > t->max_len) continue;
        int l = loom_tok_find(t, s, sp), r = loom_tok_find(t, s + sp + 1, len - sp - 1);
        memcpy(buf, s, sp);
        memcpy(buf + sp, s + sp + 1, len - sp - 1);
        int id = loom_tok_find(t, buf, len - 1);
        if (l < 0 || r < 0 || id < 0) continue;  /* HF would refuse the file; skipping is kinder */
        uint64_t k = pair_key(l, r);
        uint32_t h = key_hash(k) & m->mask;
        while (m->key[h] != 0 && m->key[h] != k) h = (h + 1) & m->mask;
        if (m->key[h] == k) continue;  /* a repeated merge keeps its first rank */
        m->key[h] = k;
        m->rank[h] = (int32_t)i;
        m->id[h] = id;
    }
    free(buf);
    t->merges = m;
    return LOOM_OK;
}

/* ----------------------------------------------------- pre-tokenizers */

enum { CL_SPACE, CL_LETTER, CL_NUMBER, CL_OTHER };

static uint8_t classify(uint32_t cp) {
    if (loom_uc_is_space(cp)) return CL_SPACE;
    loom_uc_class c = loom_uc_class_of(cp);
    return c == UC_LETTER ? CL_LETTER : c == UC_NUMBER ? CL_NUMBER : CL_OTHER;
}

static size_t run_of(const uint8_t *cl, size_t i, size_t m, uint8_t k) {
    while (i < m && cl[i] == k) i++;
    return i;
}

/* \s+(?!\S)|\s+ from i (a whitespace char): a run followed by a non-space
 * leaves its last char to prefix the next pre-token. */
static size_t space_run(const uint8_t *cl, size_t i, size_t m) {
    size_t e = run_of(cl, i, m, CL_SPACE);
    return e == m || e - i < 2 ? e : e - 1;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * Returns the end of the pre-token that starts at i (< m). */
static size_t gpt2_next(const uint32_t *cp, const uint8_t *cl, size_t i, size_t m) {
    if (cp[i] == '\'' && i + 1 < m) {
        uint32_t a = cp[i + 1], b = i + 2 < m ? cp[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    size_t s = cp[i] == ' ' && i + 1 < m && cl[i + 1] != CL_SPACE ? i + 1 : i;
    if (cl[s] != CL_SPACE) return run_of(cl, s + 1, m, cl[s]);
    return space_run(cl, i, m);
}

static uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Qwen2 is the same with \p{N} for \p{N}{1,3}: max_digits 1 instead of 3. */
static size_t llama3_next(const uint32_t *cp, const uint8_t *cl, size_t i, size_t m, size_t max_digits) {
    if (cp[i] == '\'' && i + 1 < m) {
        uint32_t a = ascii_lower(cp[i + 1]), b = i + 2 < m ? ascii_lower(cp[i + 2]) : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    if (cl[i] == CL_LETTER) return run_of(cl, i, m, CL_LETTER);
    int newline = cp[i] == '\r' || cp[i] == '\n';
    if (!newline && cl[i] != CL_NUMBER && i + 1 < m && cl[i + 1] == CL_LETTER)
        return run_of(cl, i + 1, m, CL_LETTER);
    if (cl[i] == CL_NUMBER) {
        size_t e = i + 1;
        while (e < m && e < i + max_digits && cl[e] == CL_NUMBER) e++;
        return e;
    }
    size_t s = cp[i] == ' ' && i + 1 < m && cl[i + 1] == CL_OTHER ? i + 1 : i;
    if (cl[s] == CL_OTHER) {
        size_t e = run_of(cl, s, m, CL_OTHER);
        while (e < m && (cp[e] == '\r' || cp[e] == '\n')) e++;
        return e;
    }
    size_t e = run_of(cl, i, m, CL_SPACE), last_nl = e;
    for (size_t q = i; q < e; q++)
        if (cp[q] == '\r' || cp[q] == '\n') last_nl = q;
    if (last_nl < e) return last_nl + 1;
    return space_run(cl, i, m);
}

/* Ends (codepoint indices) of the pre-tokens of cp[0..m); returns their count. */
static size_t pre_split(tok_pre pre, const uint32_t *cp, const uint8_t *cl, size_t m, size_t *ends) {
    size_t n = 0, seg = 0;  /* SmolLM: the first digit at or after i (m if none) */
    for (size_t i = 0; i < m;) {
        size_t e;
        if (pre == TOK_PRE_LLAMA3 || pre == TOK_PRE_QWEN2) {
            e = llama3_next(cp, cl, i, m, pre == TOK_PRE_LLAMA3 ? 3 : 1);
        } else if (pre == TOK_PRE_SMOLLM && cl[i] == CL_NUMBER) {
            e = i + 1;  /* every digit stands alone; the regex runs between them */
        } else if (pre == TOK_PRE_SMOLLM) {
            /* found once per digit-free segment, not once per pre-token: linear */
            if (seg < i) seg = i;
            while (seg < m && cl[seg] != CL_NUMBER) seg++;
            e = gpt2_next(cp, cl, i, seg);
        } else {
            e = gpt2_next(cp, cl, i, m);
        }
        ends[n++] = e;
        i = e;
    }
    return n;
}

/* ------------------------------------------------------------ encode */

loom_status loom_tok_bpe_fragment(const loom_tokenizer *t, const char *s, size_t n, tok_ids *out) {
    if (n == 0) return LOOM_OK;
    LOOM_RETURN_IF(n > (size_t)(INT_MAX / 4), LOOM_ERR_INVALID_ARG,
                   "tokenizer encode: text of %zu bytes is too long", n);
    uint32_t *cp = malloc(sizeof *cp * n);
    uint8_t *cl = malloc(n);
    size_t *boff = malloc(sizeof *boff * (n + 1));
    size_t *ends = malloc(sizeof *ends * n);
    int32_t *sym = malloc(sizeof *sym * n);
    int32_t *word_end = malloc(sizeof *word_end * n);
    char *lvl = malloc(2 * n + 1);  /* a pre-token in byte-level characters */
    loom_status st = LOOM_OK;
    if (!cp || !cl || !boff || !ends || !sym || !word_end || !lvl) {
        st = loom_set_error(LOOM_ERR_NOMEM, "tokenizer encode: out of memory for %zu bytes", n);
        goto done;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; m++) {
        int k = loom_utf8_decode(s + i, n - i, &cp[m]);
        if (k == 0) {  /* the caller validated the text; be safe anyway */
            cp[m] = (unsigned char)s[i];
            k = 1;
        }
        cl[m] = classify(cp[m]);
        boff[m] = i;
        i += (size_t)k;
    }
    boff[m] = n;
    size_t n_pre = pre_split(t->pre, cp, cl, m, ends);

    int k = 0, w = 0;
    for (size_t p = 0, start = 0; p < n_pre; start = ends[p++]) {
        size_t b0 = boff[start], b1 = boff[ends[p]];
        if (t->ignore_merges) {
            size_t len = 0;
            for (size_t b = b0; b < b1; b++)
                len += (size_t)loom_utf8_encode(loom_tok_byte_to_unicode((unsigned char)s[b]), lvl + len);
            int id = loom_tok_find(t, lvl, len);
            if (id >= 0) {
                sym[k++] = id;
                word_end[w++] = k;
                continue;
            }
        }
        for (size_t b = b0; b < b1; b++) {
            int id = t->byte_id[(unsigned char)s[b]];
            if (id < 0) id = t->unk;
            if (id < 0) {
                st = loom_set_error(LOOM_ERR_FORMAT, "tokenizer encode: byte 0x%02x has no piece "
                                    "and the vocabulary has no unknown token", (unsigned char)s[b]);
                goto done;
            }
            sym[k++] = id;
        }
        word_end[w++] = k;
    }
    st = loom_tok_merge_words(t, sym, word_end, w, out);

done:
    free(cp);
    free(cl);
    free(boff);
    free(ends);
    free(sym);
    free(word_end);
    free(lvl);
    return st;
}
