/* Tokenizer core: vocabulary storage, piece lookup, scored-BPE encode and
 * decode. File formats live in their own loaders (tokenizer_llama2c.c). */
#include "model/tokenizer.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

/* Which algorithm and conventions a tokenizer follows. */
typedef enum tok_kind {
    TOK_SCORED_BPE = 0,  /* llama2.c / SentencePiece-style BPE with scores */
} tok_kind;

/* run.c starts its best score at -1e10f with a strict '>', so a merge whose
 * score is not above this never happens; we keep that rule. */
#define TOK_MIN_MERGE_SCORE (-1e10f)

struct loom_tokenizer {
    tok_kind kind;
    int n_vocab;
    char *blob;             /* all pieces, each followed by a NUL */
    uint32_t *off;          /* (n_vocab) piece i starts at blob + off[i] */
    uint32_t *len;          /* (n_vocab) byte length of piece i */
    float *score;           /* (n_vocab) merge score of piece i */
    int32_t *slot;          /* (mask + 1) open-addressing table of ids, -1 empty */
    uint32_t mask;
    uint32_t max_len;       /* longest piece, bounds every merge candidate */
    int bos, eos;
    int byte_base;          /* byte b falls back to id byte_base + b */
    int space_id;           /* id of the " " piece, -1 if absent */
    char byte_str[256][2];  /* decode targets of <0xXX> pieces: byte + NUL */
};

/* FNV-1a: short keys (<= a few dozen bytes), good enough spread. */
static uint32_t tok_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

/* Id of the piece equal to s[0..n), or -1. */
static int tok_find(const loom_tokenizer *t, const char *s, size_t n) {
    uint32_t i = tok_hash(s, n) & t->mask;
    for (;;) {
        int32_t id = t->slot[i];
        if (id < 0) return -1;
        if (t->len[id] == n && memcmp(t->blob + t->off[id], s, n) == 0) return id;
        i = (i + 1) & t->mask;
    }
}

void loom_tokenizer_free(loom_tokenizer *t) {
    if (!t) return;
    free(t->blob);
    free(t->off);
    free(t->len);
    free(t->score);
    free(t->slot);
    free(t);
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

    size_t total = 0;
    uint32_t max_len = 0;
    for (int i = 0; i < v->n; i++) {
        total += (size_t)v->lens[i] + 1;
        if (v->lens[i] > max_len) max_len = v->lens[i];
    }
    /* uint32 offsets: a vocabulary is megabytes at most. */
    LOOM_RETURN_IF(total > UINT32_MAX, LOOM_ERR_FORMAT,
                   "tokenizer: %zu bytes of pieces is too large", total);

    uint32_t cap = 1;
    while (cap < 2u * (uint32_t)v->n) cap <<= 1;  /* load factor <= 1/2 */

    loom_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return loom_set_error(LOOM_ERR_NOMEM, "tokenizer: out of memory");
    t->blob = malloc(total ? total : 1);
    t->off = malloc(sizeof(uint32_t) * (size_t)v->n);
    t->len = malloc(sizeof(uint32_t) * (size_t)v->n);
    t->score = malloc(sizeof(float) * (size_t)v->n);
    t->slot = malloc(sizeof(int32_t) * cap);
    if (!t->blob || !t->off || !t->len || !t->score || !t->slot) {
        loom_tokenizer_free(t);
        return loom_set_error(LOOM_ERR_NOMEM, "tokenizer: out of memory for %d pieces", v->n);
    }
    t->kind = TOK_SCORED_BPE;
    t->n_vocab = v->n;
    t->mask = cap - 1;
    t->max_len = max_len;
    t->bos = v->bos;
    t->eos = v->eos;
    t->byte_base = v->byte_base;
    memset(t->slot, 0xff, sizeof(int32_t) * cap);

    size_t pos = 0;
    for (int i = 0; i < v->n; i++) {
        uint32_t n = v->lens[i];
        if (n) memcpy(t->blob + pos, v->pieces[i], n);
        t->blob[pos + n] = '\0';
        t->off[i] = (uint32_t)pos;
        t->len[i] = n;
        t->score[i] = v->scores[i];
        pos += (size_t)n + 1;
        /* A duplicate piece keeps its lowest id: lookups are deterministic. */
        if (tok_find(t, t->blob + t->off[i], n) >= 0) continue;
        uint32_t s = tok_hash(t->blob + t->off[i], n) & t->mask;
        while (t->slot[s] >= 0) s = (s + 1) & t->mask;
        t->slot[s] = i;
    }
    for (int b = 0; b < 256; b++) {
        t->byte_str[b][0] = (char)b;
        t->byte_str[b][1] = '\0';
    }
    t->space_id = tok_find(t, " ", 1);
    *out = t;
    return LOOM_OK;
}

int loom_tokenizer_vocab_size(const loom_tokenizer *t) { return t ? t->n_vocab : 0; }
int loom_tokenizer_bos(const loom_tokenizer *t) { return t ? t->bos : -1; }
int loom_tokenizer_eos(const loom_tokenizer *t) { return t ? t->eos : -1; }

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

/* Pushes the pair (l, r) if its concatenation is a mergeable piece. */
static void push_pair(merge_state *m, int l, int r) {
    if (l < 0 || r < 0) return;
    const loom_tokenizer *t = m->t;
    uint32_t la = t->len[m->id[l]], lb = t->len[m->id[r]];
    if ((uint64_t)la + lb > t->max_len) return;  /* longer than any piece */
    memcpy(m->buf, t->blob + t->off[m->id[l]], la);
    memcpy(m->buf + la, t->blob + t->off[m->id[r]], lb);
    int id = tok_find(t, m->buf, (size_t)la + lb);
    if (id < 0 || !(t->score[id] > TOK_MIN_MERGE_SCORE)) return;
    merge_cand c = { t->score[id], l, r, id, m->gen[l], m->gen[r] };
    heap_push(m->heap, &m->n_heap, c);
}

/* Merges symbols 0..n-1 to a fixed point; O(n log n) lookups and heap work,
 * where run.c rescans all pairs after every merge. */
static void merge_all(merge_state *m, int n) {
    for (int i = 0; i < n; i++) {
        m->prev[i] = i - 1;
        m->next[i] = i + 1 < n ? i + 1 : -1;
        m->gen[i] = 0;
    }
    m->n_heap = 0;
    for (int i = 0; i + 1 < n; i++) push_pair(m, i, i + 1);
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

/* Splits text into codepoint pieces exactly as run.c does: a non-continuation
 * byte starts a group, up to 3 following continuation bytes join it (a run of
 * stray continuation bytes also groups by up to 4); a group that is not a
 * piece becomes one byte-fallback id per byte. Returns the count appended. */
static int split_codepoints(const loom_tokenizer *t, const char *text, int32_t *out) {
    int n = 0;
    size_t glen = 0;
    for (const char *c = text; *c; c++) {
        if (((unsigned char)*c & 0xC0) != 0x80) glen = 0;
        glen++;
        if (((unsigned char)c[1] & 0xC0) == 0x80 && glen < 4) continue;
        const char *g = c + 1 - glen;
        int id = tok_find(t, g, glen);
        if (id >= 0) {
            out[n++] = id;
        } else {
            for (size_t i = 0; i < glen; i++) out[n++] = t->byte_base + (unsigned char)g[i];
        }
        glen = 0;
    }
    return n;
}

loom_status loom_tokenizer_encode(const loom_tokenizer *t, const char *text,
                                  int add_bos, int add_eos, int32_t *ids,
                                  int max_ids, int *n_ids) {
    LOOM_RETURN_IF(!t || !text || !n_ids, LOOM_ERR_INVALID_ARG,
                   "tokenizer encode: tokenizer, text and n_ids must not be NULL");
    *n_ids = 0;
    LOOM_RETURN_IF(max_ids < 0 || (max_ids > 0 && !ids), LOOM_ERR_INVALID_ARG,
                   "tokenizer encode: bad output buffer (ids %p, max_ids %d)", (void *)ids, max_ids);
    size_t text_len = strlen(text);
    /* Each byte yields at most one symbol, plus BOS, dummy prefix and EOS. */
    LOOM_RETURN_IF(text_len > (size_t)(INT_MAX / 4) - 3, LOOM_ERR_INVALID_ARG,
                   "tokenizer encode: text of %zu bytes is too long", text_len);
    int cap = (int)text_len + 3;

    merge_state m = { .t = t };
    m.id = malloc(sizeof(int32_t) * (size_t)cap);
    m.prev = malloc(sizeof(int32_t) * (size_t)cap);
    m.next = malloc(sizeof(int32_t) * (size_t)cap);
    m.gen = malloc(sizeof(uint32_t) * (size_t)cap);
    m.heap = malloc(sizeof(merge_cand) * 3 * (size_t)cap);
    m.buf = malloc((size_t)t->max_len + 1);
    loom_status st = LOOM_OK;
    if (!m.id || !m.prev || !m.next || !m.gen || !m.heap || !m.buf) {
        st = loom_set_error(LOOM_ERR_NOMEM, "tokenizer encode: out of memory for %zu bytes of text",
                            text_len);
        goto done;
    }

    int n = 0;
    if (add_bos) m.id[n++] = t->bos;  /* run.c lets BOS take part in merges too */
    if (text[0]) {
        /* run.c would store -1 without a " " piece; the byte token is the
         * only meaningful choice. */
        m.id[n++] = t->space_id >= 0 ? t->space_id : t->byte_base + ' ';
    }
    n += split_codepoints(t, text, m.id + n);
    merge_all(&m, n);

    int count = 0;
    for (int i = n > 0 ? 0 : -1; i >= 0; i = m.next[i]) count++;
    int need = count + (add_eos ? 1 : 0);
    if (need > max_ids) {
        *n_ids = need;
        st = loom_set_error(LOOM_ERR_INVALID_ARG,
                            "tokenizer encode: %d ids needed, output holds %d", need, max_ids);
        goto done;
    }
    count = 0;
    for (int i = n > 0 ? 0 : -1; i >= 0; i = m.next[i]) ids[count++] = m.id[i];
    if (add_eos) ids[count++] = t->eos;
    *n_ids = count;

done:
    free(m.id);
    free(m.prev);
    free(m.next);
    free(m.gen);
    free(m.heap);
    free(m.buf);
    return st;
}
