/* Tokenizer core: vocabulary storage, piece lookup, scored-BPE encode and
 * decode, and the dispatch to the other kinds. File formats live in their
 * own loaders (tokenizer_llama2c.c, tokenizer_gguf.c). */
#include "model/tokenizer_impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

/* run.c starts its best score at -1e10f with a strict '>', so a merge whose
 * score is not above this never happens; we keep that rule. */
#define TOK_MIN_MERGE_SCORE (-1e10f)

/* FNV-1a: short keys (<= a few dozen bytes), good enough spread. */
static uint32_t tok_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

int loom_tok_find(const loom_tokenizer *t, const char *s, size_t n) {
    uint32_t i = tok_hash(s, n) & t->mask;
    for (;;) {
        int32_t id = t->slot[i];
        if (id < 0) return -1;
        if (t->len[id] == n && memcmp(t->blob + t->off[id], s, n) == 0) return id;
        i = (i + 1) & t->mask;
    }
}

loom_status loom_tok_push(tok_ids *o, int32_t id) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        LOOM_RETURN_IF(!v, LOOM_ERR_NOMEM, "tokenizer encode: out of memory for %zu ids", cap);
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return LOOM_OK;
}

void loom_tokenizer_free(loom_tokenizer *t) {
    if (!t) return;
    free(t->blob);
    free(t->off);
    free(t->len);
    free(t->score);
    free(t->slot);
    free(t->type);
    free(t->dec);
    free(t->dec_off);
    free(t->dec_len);
    free(t->special);
    loom_tok_bpe_merges_free(t->merges);
    free(t);
}

loom_status loom_tok_create(tok_kind kind, int n, const char *const *pieces, const uint32_t *lens,
                            const float *scores, loom_tokenizer **out) {
    *out = NULL;
    LOOM_RETURN_IF(n <= 0 || n > (INT_MAX >> 2), LOOM_ERR_FORMAT,
                   "tokenizer: vocabulary size %d out of range", n);
    size_t total = 0;
    uint32_t max_len = 0;
    for (int i = 0; i < n; i++) {
        total += (size_t)lens[i] + 1;
        if (lens[i] > max_len) max_len = lens[i];
    }
    /* uint32 offsets: a vocabulary is megabytes at most. */
    LOOM_RETURN_IF(total > UINT32_MAX, LOOM_ERR_FORMAT,
                   "tokenizer: %zu bytes of pieces is too large", total);

    uint32_t cap = 1;
    while (cap < 2u * (uint32_t)n) cap <<= 1;  /* load factor <= 1/2 */

    loom_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return loom_set_error(LOOM_ERR_NOMEM, "tokenizer: out of memory");
    t->blob = malloc(total ? total : 1);
    t->off = malloc(sizeof(uint32_t) * (size_t)n);
    t->len = malloc(sizeof(uint32_t) * (size_t)n);
    t->score = malloc(sizeof(float) * (size_t)n);
    t->slot = malloc(sizeof(int32_t) * cap);
    if (!t->blob || !t->off || !t->len || !t->score || !t->slot) {
        loom_tokenizer_free(t);
        return loom_set_error(LOOM_ERR_NOMEM, "tokenizer: out of memory for %d pieces", n);
    }
    t->kind = kind;
    t->n_vocab = n;
    t->mask = cap - 1;
    t->max_len = max_len;
    t->bos = t->eos = t->unk = t->byte_base = -1;
    memset(t->slot, 0xff, sizeof(int32_t) * cap);
    memset(t->byte_id, 0xff, sizeof t->byte_id);

    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        uint32_t len = lens[i];
        if (len) memcpy(t->blob + pos, pieces[i], len);
        t->blob[pos + len] = '\0';
        t->off[i] = (uint32_t)pos;
        t->len[i] = len;
        t->score[i] = scores ? scores[i] : 0.0f;
        pos += (size_t)len + 1;
        /* A duplicate piece keeps its lowest id: lookups are deterministic. */
        if (loom_tok_find(t, t->blob + t->off[i], len) >= 0) continue;
        uint32_t h = tok_hash(t->blob + t->off[i], len) & t->mask;
        while (t->slot[h] >= 0) h = (h + 1) & t->mask;
        t->slot[h] = i;
    }
    for (int b = 0; b < 256; b++) {
        t->byte_str[b][0] = (char)b;
        t->byte_str[b][1] = '\0';
    }
    t->space_id = loom_tok_find(t, " ", 1);
    *out = t;
    return LOOM_OK;
}

loom_status loom_tokenizer_create_scored_bpe(const loom_tokenizer_vocab *v,
                                             loom_tokenizer **out) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "tokenizer: out is NULL");
    *out = NULL;
    LOOM_RETURN_IF(!v || !v->pieces || !v->lens || !v->scores, LOOM_ERR_INVALID_ARG,
                   "tokenizer: vocabulary arrays are NULL");
    LOOM_RETURN_IF(v->n <= 0 || v->n > (INT_MAX >> 2), LOOM_ERR_FORMAT,
                   "tokenizer: vocabulary size %d out of range", v->n);
    LOOM_RETURN_IF(v->bos < 0 || v->bos >= v->n || v->eos < 0 || v->eos >= v->n,
                   LOOM_ERR_FORMAT, "tokenizer: BOS %d / EOS %d outside the %d-piece vocabulary",
                   v->bos, v->eos, v->n);
    LOOM_RETURN_IF(v->byte_base < 0 || v->byte_base > v->n - 256, LOOM_ERR_FORMAT,
                   "tokenizer: byte-fallback ids %d..%d outside the %d-piece vocabulary",
                   v->byte_base, v->byte_base + 255, v->n);
    loom_tokenizer *t;
    LOOM_TRY(loom_tok_create(TOK_SCORED_BPE, v->n, v->pieces, v->lens, v->scores, &t));
    t->bos = v->bos;
    t->eos = v->eos;
    t->byte_base = v->byte_base;
    for (int b = 0; b < 256; b++) t->byte_id[b] = v->byte_base + b;
    t->add_bos = 1;
    t->add_space_prefix = 1;
    *out = t;
    return LOOM_OK;
}

int loom_tokenizer_vocab_size(const loom_tokenizer *t) { return t ? t->n_vocab : 0; }
int loom_tokenizer_bos(const loom_tokenizer *t) { return t ? t->bos : -1; }
int loom_tokenizer_eos(const loom_tokenizer *t) { return t ? t->eos : -1; }
int loom_tokenizer_unk(const loom_tokenizer *t) { return t ? t->unk : -1; }
int loom_tokenizer_add_bos(const loom_tokenizer *t) { return t ? t->add_bos : 0; }
int loom_tokenizer_add_eos(const loom_tokenizer *t) { return t ? t->add_eos : 0; }

const char *loom_tokenizer_kind_name(const loom_tokenizer *t) {
    static const char *const names[] = {
        [TOK_SCORED_BPE] = "llama2c", [TOK_SPM] = "llama", [TOK_BYTE_BPE] = "gpt2",
        [TOK_WORDPIECE] = "bert",
    };
    return t ? names[t->kind] : "none";
}

int loom_tokenizer_is_control(const loom_tokenizer *t, int token) {
    if (!t || token < 0 || token >= t->n_vocab) return 0;
    if (!t->type) return token == t->bos || token == t->eos;
    return t->type[token] == TOK_TYPE_CONTROL;
}

const char *loom_tokenizer_piece(const loom_tokenizer *t, int token) {
    if (!t || token < 0 || token >= t->n_vocab) {
        loom_set_error(LOOM_ERR_INVALID_ARG, "tokenizer: token %d out of range [0, %d)",
                       token, t ? t->n_vocab : 0);
        return NULL;
    }
    return t->blob + t->off[token];
}

float loom_tokenizer_score(const loom_tokenizer *t, int token) {
    if (!t || token < 0 || token >= t->n_vocab) {
        loom_set_error(LOOM_ERR_INVALID_ARG, "tokenizer: token %d out of range [0, %d)",
                       token, t ? t->n_vocab : 0);
        return 0.0f;
    }
    return t->score[token];
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

const char *loom_tokenizer_decode(const loom_tokenizer *t, int prev, int token,
                                  size_t *len) {
    if (len) *len = 0;
    if (!t || token < 0 || token >= t->n_vocab) {
        loom_set_error(LOOM_ERR_INVALID_ARG, "tokenizer: cannot decode token %d: out of range [0, %d)",
                       token, t ? t->n_vocab : 0);
        return NULL;
    }
    if (t->kind != TOK_SCORED_BPE) {
        /* GGUF kinds: bytes prepared at load; the space a word-start piece
         * carries is dropped at the start of the text and after control tokens. */
        const char *d = t->dec + t->dec_off[token];
        size_t dn = t->dec_len[token];
        if (t->strip_lead_space && dn > 0 && d[0] == ' ' &&
            (prev < 0 || prev >= t->n_vocab || loom_tokenizer_is_control(t, prev))) {
            d++;
            dn--;
        }
        if (len) *len = dn;
        return d;
    }
    const char *p = t->blob + t->off[token];
    size_t n = t->len[token];
    /* SentencePiece drops the dummy-prefix space of the first piece. */
    if (prev == t->bos && n > 0 && p[0] == ' ') {
        p++;
        n--;
    }
    if (n == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>') {
        int hi = hex_digit(p[3]), lo = hex_digit(p[4]);
        if (hi >= 0 && lo >= 0) {
            if (len) *len = 1;
            return t->byte_str[hi * 16 + lo];
        }
    }
    if (len) *len = n;
    return p;
}

/* BOS, EOS and control tokens mark a text and add nothing to it (llama2.c's
 * BOS piece is "\n<s>\n"). */
static int silent(const loom_tokenizer *t, int id) {
    return id == t->bos || id == t->eos || loom_tokenizer_is_control(t, id);
}

loom_status loom_tokenizer_decode_tokens(const loom_tokenizer *t, const int32_t *ids, int n, char **text,
                                         size_t *len) {
    LOOM_RETURN_IF(!t || !text || n < 0 || (n > 0 && !ids), LOOM_ERR_INVALID_ARG,
                   "tokenizer: decode_tokens: NULL argument or n < 0");
    *text = NULL;
    if (len) *len = 0;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        size_t k;
        LOOM_RETURN_IF(!loom_tokenizer_decode(t, i ? ids[i - 1] : -1, ids[i], &k), LOOM_ERR_INVALID_ARG,
                       "tokenizer: token %d at index %d is out of range [0, %d)", ids[i], i, t->n_vocab);
        if (!silent(t, ids[i])) total += k;
    }
    char *s = malloc(total + 1);
    LOOM_RETURN_IF(!s, LOOM_ERR_NOMEM, "tokenizer: out of memory for %zu bytes of text", total + 1);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        size_t k;
        const char *p = loom_tokenizer_decode(t, i ? ids[i - 1] : -1, ids[i], &k);
        if (silent(t, ids[i])) continue;
        memcpy(s + at, p, k);
        at += k;
    }
    s[at] = '\0';
    *text = s;
    if (len) *len = at;
    return LOOM_OK;
}

/* ---------------------------------------------------------------- encode */

/* A merge candidate: symbols l and r (adjacent when pushed) would become
 * piece id. gl/gr are the symbols' generations then: a later change to
 * either symbol makes the entry stale. */
typedef struct merge_cand {
    float score;
    int32_t l, r, id;
    uint32_t gl, gr;
} merge_cand;

/* Heap order = run.c's choice: highest score, then leftmost pair. Symbol
 * indices only grow left to right, so l orders pairs by position. */
static int cand_before(const merge_cand *a, const merge_cand *b) {
    return a->score > b->score || (a->score == b->score && a->l < b->l);
}

static void heap_push(merge_cand *h, int *n, merge_cand c) {
    int i = (*n)++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!cand_before(&c, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static merge_cand heap_pop(merge_cand *h, int *n) {
    merge_cand top = h[0];
    merge_cand last = h[--(*n)];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_before(&h[c + 1], &h[c])) c++;
        if (!cand_before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

typedef struct merge_state {
    const loom_tokenizer *t;
    int32_t *id;       /* (n) current piece of each symbol */
    int32_t *prev;     /* (n) previous live symbol, -1 at the start */
    int32_t *next;     /* (n) next live symbol, -1 at the end */
    uint32_t *gen;     /* (n) bumped whenever the symbol changes or dies */
    merge_cand *heap;  /* (3n) each merge pushes at most two candidates */
    int n_heap;
    char *buf;         /* (max_len) concatenation scratch */
} merge_state;

/* SentencePiece merges only into ordinary pieces: never into control,
 * unknown, byte or unused ones (llama2.c vocabularies have no types). */
static int mergeable(const loom_tokenizer *t, int id) {
    if (!t->type) return 1;
    int ty = t->type[id];
    return ty == TOK_TYPE_NORMAL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNDEFINED;
}

/* Pushes the pair (l, r) if its concatenation is a mergeable piece. */
static void push_pair(merge_state *m, int l, int r) {
    if (l < 0 || r < 0) return;
    const loom_tokenizer *t = m->t;
    merge_cand c = { 0.0f, l, r, -1, m->gen[l], m->gen[r] };
    if (t->merges) {
        /* Byte-level BPE: ranked merges, lowest rank first. Ranks stay far
         * below 2^24, so the float holds them exactly. */
        int32_t rank;
        if (!loom_tok_bpe_pair(t->merges, m->id[l], m->id[r], &rank, &c.id)) return;
        c.score = -(float)rank;
        heap_push(m->heap, &m->n_heap, c);
        return;
    }
    uint32_t la = t->len[m->id[l]], lb = t->len[m->id[r]];
    if ((uint64_t)la + lb > t->max_len) return;  /* longer than any piece */
    memcpy(m->buf, t->blob + t->off[m->id[l]], la);
    memcpy(m->buf + la, t->blob + t->off[m->id[r]], lb);
    int id = loom_tok_find(t, m->buf, (size_t)la + lb);
    if (id < 0 || !(t->score[id] > TOK_MIN_MERGE_SCORE) || !mergeable(t, id)) return;
    c.score = t->score[id];
    c.id = id;
    heap_push(m->heap, &m->n_heap, c);
}

/* Merges each word (symbols word_end[w-1]..word_end[w]-1) to a fixed point,
 * one word at a time so that the heap stays small; pairs never span words.
 * O(n log n) lookups and heap work, where run.c rescans all pairs after
 * every merge. */
static void merge_all(merge_state *m, const int32_t *word_end, int n_words) {
    for (int w = 0, first = 0; w < n_words; first = word_end[w++]) {
        m->n_heap = 0;
        for (int i = first; i < word_end[w]; i++) {
            m->prev[i] = i > first ? i - 1 : -1;
            m->next[i] = i + 1 < word_end[w] ? i + 1 : -1;
            m->gen[i] = 0;
            if (i > first) push_pair(m, i - 1, i);
        }
        while (m->n_heap > 0) {
            merge_cand c = heap_pop(m->heap, &m->n_heap);
            if (m->gen[c.l] != c.gl || m->gen[c.r] != c.gr || m->next[c.l] != c.r) continue;
            m->id[c.l] = c.id;
            m->gen[c.l]++;
            m->gen[c.r]++;  /* r is gone: stale entries naming it fail the check */
            m->next[c.l] = m->next[c.r];
            if (m->next[c.r] >= 0) m->prev[m->next[c.r]] = c.l;
            push_pair(m, m->prev[c.l], c.l);
            push_pair(m, c.l, m->next[c.l]);
        }
    }
}

static void merge_state_free(merge_state *m) {
    free(m->id);
    free(m->prev);
    free(m->next);
    free(m->gen);
    free(m->heap);
    free(m->buf);
}

static loom_status merge_state_alloc(merge_state *m, const loom_tokenizer *t, size_t cap) {
    memset(m, 0, sizeof *m);
    m->t = t;
    if (cap == 0) cap = 1;
    m->id = malloc(sizeof(int32_t) * cap);
    m->prev = malloc(sizeof(int32_t) * cap);
    m->next = malloc(sizeof(int32_t) * cap);
    m->gen = malloc(sizeof(uint32_t) * cap);
    m->heap = malloc(sizeof(merge_cand) * 3 * cap);
    m->buf = malloc((size_t)t->max_len + 1);
    if (!m->id || !m->prev || !m->next || !m->gen || !m->heap || !m->buf) {
        merge_state_free(m);
        return loom_set_error(LOOM_ERR_NOMEM, "tokenizer encode: out of memory for %zu symbols", cap);
    }
    return LOOM_OK;
}

/* Appends the merged words to out: each word starts at its first symbol. */
static loom_status emit_words(const merge_state *m, const int32_t *word_end, int n_words,
                              tok_ids *out) {
    for (int w = 0, first = 0; w < n_words; first = word_end[w++]) {
        if (first == word_end[w]) continue;
        for (int i = first; i >= 0; i = m->next[i]) LOOM_TRY(loom_tok_push(out, m->id[i]));
    }
    return LOOM_OK;
}

loom_status loom_tok_merge_words(const loom_tokenizer *t, const int32_t *sym,
                                 const int32_t *word_end, int n_words, tok_ids *out) {
    int n = n_words > 0 ? word_end[n_words - 1] : 0;
    merge_state m;
    LOOM_TRY(merge_state_alloc(&m, t, (size_t)n));
    if (n) memcpy(m.id, sym, sizeof(int32_t) * (size_t)n);
    merge_all(&m, word_end, n_words);
    loom_status st = emit_words(&m, word_end, n_words, out);
    merge_state_free(&m);
    return st;
}

/* Splits text[0..n) into codepoint pieces exactly as run.c does: a
 * non-continuation byte starts a group, up to 3 following continuation bytes
 * join it (a run of stray continuation bytes also groups by up to 4); a
 * group that is not a piece becomes one byte-fallback id per byte. Returns
 * the count appended. */
static int split_codepoints(const loom_tokenizer *t, const char *text, size_t n, int32_t *out) {
    int k = 0;
    size_t glen = 0;
    for (size_t i = 0; i < n; i++) {
        if (((unsigned char)text[i] & 0xC0) != 0x80) glen = 0;
        glen++;
        if (i + 1 < n && ((unsigned char)text[i + 1] & 0xC0) == 0x80 && glen < 4) continue;
        const char *g = text + i + 1 - glen;
        int id = loom_tok_find(t, g, glen);
        if (id >= 0 && mergeable(t, id)) {
            out[k++] = id;
        } else {
            for (size_t j = 0; j < glen; j++) out[k++] = t->byte_id[(unsigned char)g[j]];
        }
        glen = 0;
    }
    return k;
}

/* Scored BPE over lead[0..n_lead) (BOS and/or the dummy prefix) followed by
 * the codepoints of text[0..n); appends the merged ids to out. */
static loom_status spm_run(const loom_tokenizer *t, const int32_t *lead, int n_lead,
                           const char *text, size_t n, tok_ids *out) {
    /* Each byte yields at most one symbol. */
    LOOM_RETURN_IF(n > (size_t)(INT_MAX / 4) - 4, LOOM_ERR_INVALID_ARG,
                   "tokenizer encode: text of %zu bytes is too long", n);
    merge_state m;
    LOOM_TRY(merge_state_alloc(&m, t, n + (size_t)n_lead));
    int k = 0;
    for (int i = 0; i < n_lead; i++) m.id[k++] = lead[i];
    k += split_codepoints(t, text, n, m.id + k);
    int32_t end = k;
    merge_all(&m, &end, 1);
    loom_status st = emit_words(&m, &end, 1, out);
    merge_state_free(&m);
    return st;
}

/* The id that stands for a space: the " " piece or its byte fallback. */
static int32_t space_symbol(const loom_tokenizer *t) {
    return t->space_id >= 0 && mergeable(t, t->space_id) ? t->space_id : t->byte_id[' '];
}

loom_status loom_tok_spm_fragment(const loom_tokenizer *t, const char *s, size_t n, int prefix,
                                  tok_ids *out) {
    int32_t lead = space_symbol(t);
    /* SentencePiece writes spaces as U+2581, so a U+2581 in the text is a
     * space too (loom stores pieces with ' '). */
    static const char vis[3] = {'\xE2', '\x96', '\x81'};
    int has_vis = 0;
    for (size_t i = 0; i + 3 <= n && !has_vis; i++) has_vis = memcmp(s + i, vis, 3) == 0;
    char *copy = NULL;
    if (has_vis) {
        copy = malloc(n);
        LOOM_RETURN_IF(!copy, LOOM_ERR_NOMEM, "tokenizer encode: out of memory");
        size_t k = 0;
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && memcmp(s + i, vis, 3) == 0) {
                copy[k++] = ' ';
                i += 3;
            } else {
                copy[k++] = s[i++];
            }
        }
        s = copy;
        n = k;
    }
    loom_status st = spm_run(t, &lead, prefix ? 1 : 0, s, n, out);
    free(copy);
    return st;
}

loom_status loom_tokenizer_encode_ex(const loom_tokenizer *t, const char *text, size_t len,
                                     int flags, int32_t *ids, int max_ids, int *n_ids) {
    LOOM_RETURN_IF(!t || !text || !n_ids, LOOM_ERR_INVALID_ARG,
                   "tokenizer encode: tokenizer, text and n_ids must not be NULL");
    *n_ids = 0;
    LOOM_RETURN_IF(max_ids < 0 || (max_ids > 0 && !ids), LOOM_ERR_INVALID_ARG,
                   "tokenizer encode: bad output buffer (ids %p, max_ids %d)", (void *)ids, max_ids);
    LOOM_RETURN_IF(len > (size_t)(INT_MAX / 4) - 4, LOOM_ERR_INVALID_ARG,
                   "tokenizer encode: text of %zu bytes is too long", len);
    tok_ids out = {0};
    loom_status st;
    if (t->kind == TOK_SCORED_BPE) {
        /* run.c: BOS takes part in merges too; the dummy prefix " " comes
         * before any non-empty text (run.c would store -1 without a " "
         * piece; the byte token is the only meaningful choice). */
        int32_t lead[2];
        int n_lead = 0;
        if (flags & LOOM_TOK_BOS) lead[n_lead++] = t->bos;
        if (len > 0) lead[n_lead++] = t->space_id >= 0 ? t->space_id : t->byte_id[' '];
        st = spm_run(t, lead, n_lead, text, len, &out);
        if (st == LOOM_OK && (flags & LOOM_TOK_EOS)) st = loom_tok_push(&out, t->eos);
    } else {
        st = loom_tok_encode_gguf(t, text, len, flags, &out);
    }
    if (st == LOOM_OK && out.n > (size_t)max_ids) {
        *n_ids = (int)out.n;
        st = loom_set_error(LOOM_ERR_INVALID_ARG,
                            "tokenizer encode: %zu ids needed, output holds %d", out.n, max_ids);
    } else if (st == LOOM_OK) {
        if (out.n) memcpy(ids, out.v, out.n * sizeof *ids);
        *n_ids = (int)out.n;
    }
    free(out.v);
    return st;
}

loom_status loom_tokenizer_encode(const loom_tokenizer *t, const char *text,
                                  int add_bos, int add_eos, int32_t *ids,
                                  int max_ids, int *n_ids) {
    LOOM_RETURN_IF(!t || !text || !n_ids, LOOM_ERR_INVALID_ARG,
                   "tokenizer encode: tokenizer, text and n_ids must not be NULL");
    int flags = (add_bos ? LOOM_TOK_BOS : 0) | (add_eos ? LOOM_TOK_EOS : 0);
    return loom_tokenizer_encode_ex(t, text, strlen(text), flags, ids, max_ids, n_ids);
}
