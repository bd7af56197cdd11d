/* WordPiece as BERT's tokenizer does it (Hugging Face BertNormalizer +
 * BertPreTokenizer + WordPiece): drop control, format and private-use
 * characters, turn whitespace into spaces, put spaces around CJK ideographs, strip accents (NFD without
 * nonspacing marks), lowercase; split at whitespace and around every
 * punctuation character; then each word greedily into the longest known
 * pieces, or [UNK] for the whole word when that fails. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/tokenizer_impl.h"
#include "model/unicode.h"

#define WPM_MAX_WORD_CHARS 100   /* longer words are [UNK] (HF's max_input_chars_per_word) */

/* The CJK blocks BERT isolates (HF's list). */
static int is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* BERT counts all ASCII symbols as punctuation, besides Unicode's P*. */
static int is_punct(uint32_t c) {
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126))
        return 1;
    return loom_uc_class_of(c) == UC_PUNCT;
}

static int is_ws(uint32_t c) { return c == '\t' || c == '\n' || c == '\r' || loom_uc_is_space(c); }

/* Appends one normalised input codepoint to out; returns the new count. */
static size_t normalize_one(uint32_t c, uint32_t *out, size_t k) {
    /* Controls go first (U+0085 is a control before it is a space); tab,
     * newline and return count as spaces; unassigned codepoints stay. */
    if (c == 0 || c == 0xFFFD) return k;
    if (c != '\t' && c != '\n' && c != '\r' && loom_uc_class_of(c) == UC_CONTROL) return k;
    if (is_ws(c)) {
        out[k++] = ' ';
        return k;
    }
    /* CJK gets spaces around it before decomposition (a compatibility
     * ideograph becomes its unified one in NFD). */
    int cjk = is_cjk(c);
    if (cjk) out[k++] = ' ';
    uint32_t d[3];
    int nd = loom_uc_strip_accents(c, d);
    for (int i = 0; i < nd; i++) out[k++] = loom_uc_lower(d[i]);
    if (cjk) out[k++] = ' ';
    return k;
}

/* Greedy longest-match-first pieces of one word (UTF-8 w[0..n), nch
 * codepoints), appended to out; the whole word is [UNK] when some part
 * matches no piece. buf holds prefix + candidate. */
static loom_status word_pieces(const loom_tokenizer *t, const char *w, size_t n, size_t nch,
                               char *buf, tok_ids *out) {
    size_t mark = out->n;
    if (nch <= WPM_MAX_WORD_CHARS) {
        size_t start = 0;
        while (start < n) {
            const char *pre = start == 0 ? t->wp_word : t->wp_cont;
            size_t pl = strlen(pre), wl = strlen(t->wp_word);
            memcpy(buf, pre, pl);
            int found = -1;
            size_t end = n;
            /* GGUF marks word starts with U+2581: a continuation spelled
             * with one in the text would hit a word-start piece. */
            if (start > 0 && wl && n - start >= wl && memcmp(w + start, t->wp_word, wl) == 0) end = start;
            for (; end > start; end--) {
                if (end < n && ((unsigned char)w[end] & 0xC0) == 0x80) continue;  /* not a char boundary */
                if (pl + end - start > t->max_len) continue;
                memcpy(buf + pl, w + start, end - start);
                found = loom_tok_find(t, buf, pl + end - start);
                if (found >= 0) break;
            }
            if (found < 0) break;
            LOOM_TRY(loom_tok_push(out, found));
            start = end;
        }
        if (start == n) return LOOM_OK;
    }
    out->n = mark;
    LOOM_RETURN_IF(t->unk < 0, LOOM_ERR_FORMAT,
                   "tokenizer encode: a word has no pieces and the vocabulary has no [UNK]");
    return loom_tok_push(out, t->unk);
}

loom_status loom_tok_wpm_fragment(const loom_tokenizer *t, const char *s, size_t n, tok_ids *out) {
    if (n == 0) return LOOM_OK;
    LOOM_RETURN_IF(n > (size_t)(INT_MAX / 8), LOOM_ERR_INVALID_ARG,
                   "tokenizer encode: text of %zu bytes is too long", n);
    /* Each input byte yields at most 3 codepoints (a CJK char padded by two
     * spaces needs 3 bytes; a 3-codepoint accent split needs 2 or more). */
    uint32_t *norm = malloc(sizeof *norm * 3 * n);
    char *word = malloc(4 * 3 * n + 1);
    char *buf = malloc((size_t)t->max_len + 8);
    loom_status st = LOOM_OK;
    if (!norm || !word || !buf) {
        st = loom_set_error(LOOM_ERR_NOMEM, "tokenizer encode: out of memory for %zu bytes", n);
        goto done;
    }
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        int k = loom_utf8_decode(s + i, n - i, &c);
        if (k == 0) {  /* validated by the caller; skip a stray byte to be safe */
            i++;
            continue;
        }
        i += (size_t)k;
        m = normalize_one(c, norm, m);
    }
    size_t wl = 0, nch = 0;
    for (size_t i = 0; i <= m && st == LOOM_OK; i++) {
        int end_word = i == m || norm[i] == ' ' || loom_uc_is_space(norm[i]) || is_punct(norm[i]);
        if (end_word && wl > 0) {
            st = word_pieces(t, word, wl, nch, buf, out);
            wl = nch = 0;
        }
        if (i == m || st != LOOM_OK) break;
        if (norm[i] == ' ' || loom_uc_is_space(norm[i])) continue;
        wl += (size_t)loom_utf8_encode(norm[i], word + wl);
        nch++;
        if (is_punct(norm[i])) {  /* punctuation is a word of its own */
            st = word_pieces(t, word, wl, nch, buf, out);
            wl = nch = 0;
        }
    }

done:
    free(norm);
    free(word);
    free(buf);
    return st;
}
