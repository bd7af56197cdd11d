/* The block manager of the paged KV cache (kv_blocks.h).
 *
 * A block is in one of three states: free (no references, no content: on the
 * free list), used (references > 0, committed to the prefix cache or not),
 * cached (no references, committed: on the LRU list, oldest first). The prefix
 * cache is an open-addressing table of committed block ids keyed by their
 * hash (linear probing, deletion by backward shift). */
#include "serve/kv_blocks.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

struct loom_kv_blocks {
    int n, bs;
    int *refs;              /* [n] */
    int *next, *prev;       /* list links: the free list (next only) or the LRU list */
    int free_head, n_free;
    int lru_head, lru_tail, n_cached;
    unsigned char *committed;
    uint64_t *hash, *parent;
    int32_t *tokens;        /* [n][bs] the tokens of committed blocks */
    int *table;             /* [cap] block ids, -1 empty */
    int cap;
    long hits, misses, evictions;
};

static void lru_remove(loom_kv_blocks *b, int id) {
    int p = b->prev[id], n = b->next[id];
    if (p >= 0) b->next[p] = n;
    else b->lru_head = n;
    if (n >= 0) b->prev[n] = p;
    else b->lru_tail = p;
    b->prev[id] = b->next[id] = -1;
    b->n_cached--;
}

static void lru_push(loom_kv_blocks *b, int id) { /* most recently used at the tail */
    b->prev[id] = b->lru_tail, b->next[id] = -1;
    if (b->lru_tail >= 0) b->next[b->lru_tail] = id;
    else b->lru_head = id;
    b->lru_tail = id;
    b->n_cached++;
}

static void free_push(loom_kv_blocks *b, int id) {
    b->next[id] = b->free_head, b->prev[id] = -1;
    b->free_head = id;
    b->n_free++;
}

static size_t slot_of(const loom_kv_blocks *b, uint64_t h) { return (size_t)(h ^ (h >> 29)) & (size_t)(b->cap - 1); }

static void table_insert(loom_kv_blocks *b, int id) {
    size_t i = slot_of(b, b->hash[id]);
    while (b->table[i] >= 0) i = (i + 1) & (size_t)(b->cap - 1);
    b->table[i] = id;
}

/* Removes id from the table, shifting later entries of its run back. */
static void table_remove(loom_kv_blocks *b, int id) {
    size_t mask = (size_t)b->cap - 1, i = slot_of(b, b->hash[id]);
    while (b->table[i] != id) i = (i + 1) & mask;
    b->table[i] = -1;
    for (size_t j = (i + 1) & mask; b->table[j] >= 0; j = (j + 1) & mask) {
        size_t home = slot_of(b, b->hash[b->table[j]]);
        /* move entry j into the hole at i unless its home lies cyclically in (i, j] */
        int keep = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (keep) continue;
        b->table[i] = b->table[j];
        b->table[j] = -1;
        i = j;
    }
}

static void uncommit(loom_kv_blocks *b, int id) {
    table_remove(b, id);
    b->committed[id] = 0;
}

loom_status loom_kv_blocks_init(loom_kv_blocks **out, int n_blocks, int block_size) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "kv_blocks: NULL argument");
    *out = NULL;
    LOOM_RETURN_IF(n_blocks < 1 || n_blocks > (1 << 28) || block_size < 1 || block_size > 4096,
                   LOOM_ERR_INVALID_ARG, "kv_blocks: %d blocks of %d positions (expected 1..2^28 of 1..4096)",
                   n_blocks, block_size);
    loom_kv_blocks *b = calloc(1, sizeof *b);
    LOOM_RETURN_IF(!b, LOOM_ERR_NOMEM, "kv_blocks: out of memory");
    b->n = n_blocks, b->bs = block_size;
    b->cap = 16;
    while (b->cap < 2 * n_blocks) b->cap *= 2;
    size_t n = (size_t)n_blocks;
    b->refs = calloc(n, sizeof *b->refs);
    b->next = malloc(n * sizeof *b->next);
    b->prev = malloc(n * sizeof *b->prev);
    b->committed = calloc(n, 1);
    b->hash = calloc(n, sizeof *b->hash);
    b->parent = calloc(n, sizeof *b->parent);
    b->tokens = calloc(n * (size_t)block_size, sizeof *b->tokens);
    b->table = malloc((size_t)b->cap * sizeof *b->table);
    if (!b->refs || !b->next || !b->prev || !b->committed || !b->hash || !b->parent || !b->tokens || !b->table) {
        loom_kv_blocks_free(b);
        return loom_set_error(LOOM_ERR_NOMEM, "kv_blocks: out of memory for %d blocks", n_blocks);
    }
    for (int i = 0; i < b->cap; i++) b->table[i] = -1;
    b->free_head = b->lru_head = b->lru_tail = -1;
    for (int i = n_blocks - 1; i >= 0; i--) free_push(b, i); /* block 0 first */
    *out = b;
    return LOOM_OK;
}

void loom_kv_blocks_free(loom_kv_blocks *b) {
    if (!b) return;
    free(b->refs), free(b->next), free(b->prev), free(b->committed);
    free(b->hash), free(b->parent), free(b->tokens), free(b->table);
    free(b);
}

int loom_kv_blocks_block_size(const loom_kv_blocks *b) { return b->bs; }
int loom_kv_blocks_available(const loom_kv_blocks *b) { return b->n_free + b->n_cached; }
int loom_kv_blocks_refs(const loom_kv_blocks *b, int id) { return id >= 0 && id < b->n ? b->refs[id] : 0; }
int loom_kv_blocks_committed(const loom_kv_blocks *b, int id) { return id >= 0 && id < b->n && b->committed[id]; }

int loom_kv_blocks_alloc(loom_kv_blocks *b) {
    int id = b->free_head;
    if (id >= 0) {
        b->free_head = b->next[id];
        b->next[id] = -1;
        b->n_free--;
    } else if ((id = b->lru_head) >= 0) {
        lru_remove(b, id);
        uncommit(b, id);
        b->evictions++;
    } else {
        return -1;
    }
    b->refs[id] = 1;
    return id;
}

void loom_kv_blocks_ref(loom_kv_blocks *b, int id) {
    if (b->refs[id] == 0 && b->committed[id]) lru_remove(b, id);
    b->refs[id]++;
}

void loom_kv_blocks_unref(loom_kv_blocks *b, int id) {
    if (b->refs[id] <= 0) return; /* loom_kv_blocks_check reports a block freed twice as a count mismatch */
    if (--b->refs[id] > 0) return;
    if (b->committed[id]) lru_push(b, id);
    else free_push(b, id);
}

uint64_t loom_kv_block_hash(uint64_t parent, const int32_t *tokens, int n) {
    /* FNV-1a over the parent and the tokens' bytes, then a final mix */
    uint64_t h = 1469598103934665603ull ^ parent;
    for (int i = 0; i < n; i++) {
        uint32_t t = (uint32_t)tokens[i];
        for (int k = 0; k < 4; k++) h = (h ^ ((t >> (8 * k)) & 0xFF)) * 1099511628211ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h ? h : 1; /* 0 is the hash before the first block */
}

static int find(const loom_kv_blocks *b, uint64_t hash, uint64_t parent, const int32_t *tokens) {
    size_t mask = (size_t)b->cap - 1;
    for (size_t i = slot_of(b, hash); b->table[i] >= 0; i = (i + 1) & mask) {
        int id = b->table[i];
        if (b->hash[id] == hash && b->parent[id] == parent &&
            !memcmp(b->tokens + (size_t)id * b->bs, tokens, (size_t)b->bs * sizeof *tokens))
            return id;
    }
    return -1;
}

int loom_kv_blocks_lookup(loom_kv_blocks *b, uint64_t hash, uint64_t parent, const int32_t *tokens) {
    int id = find(b, hash, parent, tokens);
    if (id < 0) {
        b->misses++;
        return -1;
    }
    b->hits++;
    loom_kv_blocks_ref(b, id);
    return id;
}

int loom_kv_blocks_commit(loom_kv_blocks *b, int id, uint64_t hash, uint64_t parent, const int32_t *tokens) {
    if (id < 0 || id >= b->n || b->refs[id] <= 0 || b->committed[id] || find(b, hash, parent, tokens) >= 0) return 0;
    b->hash[id] = hash, b->parent[id] = parent;
    memcpy(b->tokens + (size_t)id * b->bs, tokens, (size_t)b->bs * sizeof *tokens);
    b->committed[id] = 1;
    table_insert(b, id);
    return 1;
}

void loom_kv_blocks_clear_cache(loom_kv_blocks *b) {
    for (int id = 0; id < b->n; id++) {
        if (!b->committed[id]) continue;
        uncommit(b, id);
        if (b->refs[id] == 0) {
            lru_remove(b, id);
            free_push(b, id);
        }
    }
}

loom_kv_blocks_stats loom_kv_blocks_get_stats(const loom_kv_blocks *b) {
    loom_kv_blocks_stats s = {b->hits, b->misses, b->evictions, b->n, b->n - b->n_free - b->n_cached, b->n_cached,
                              b->n_free};
    return s;
}

loom_status loom_kv_blocks_check(const loom_kv_blocks *b) {
    int n_free = 0, n_lru = 0, n_table = 0, n_committed = 0;
    unsigned char *seen = calloc((size_t)b->n, 1);
    LOOM_RETURN_IF(!seen, LOOM_ERR_NOMEM, "kv_blocks_check: out of memory");
    loom_status s = LOOM_OK;
    for (int id = b->free_head; id >= 0 && s == LOOM_OK; id = b->next[id], n_free++)
        if (seen[id]++ || b->refs[id] || b->committed[id])
            s = loom_set_error(LOOM_ERR_INTERNAL, "kv_blocks: free block %d is listed twice, referenced or cached", id);
    for (int id = b->lru_head, prev = -1; id >= 0 && s == LOOM_OK; prev = id, id = b->next[id], n_lru++)
        if (seen[id]++ || b->refs[id] || !b->committed[id] || b->prev[id] != prev)
            s = loom_set_error(LOOM_ERR_INTERNAL, "kv_blocks: cached block %d is on two lists, referenced, "
                                                  "uncommitted or mislinked", id);
    for (int id = 0; id < b->n && s == LOOM_OK; id++) {
        n_committed += b->committed[id];
        if (b->refs[id] < 0 || (!seen[id] && b->refs[id] == 0))
            s = loom_set_error(LOOM_ERR_INTERNAL, "kv_blocks: block %d has %d references and is on no list", id,
                               b->refs[id]);
        if (b->committed[id] && find(b, b->hash[id], b->parent[id], b->tokens + (size_t)id * b->bs) != id)
            s = loom_set_error(LOOM_ERR_INTERNAL, "kv_blocks: committed block %d is not found by its hash", id);
    }
    for (int i = 0; i < b->cap; i++) n_table += b->table[i] >= 0;
    if (s == LOOM_OK && (n_free != b->n_free || n_lru != b->n_cached || n_table != n_committed))
        s = loom_set_error(LOOM_ERR_INTERNAL, "kv_blocks: counts disagree (free %d/%d, cached %d/%d, table %d/%d)",
                           n_free, b->n_free, n_lru, b->n_cached, n_table, n_committed);
    free(seen);
    return s;
}
