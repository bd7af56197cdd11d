/* The paged KV cache's block manager: reference counts, the free and LRU
 * lists, the prefix cache (hash chains checked against the tokens), eviction
 * order; 10,000 random operations against a shadow model of who owns what. */
#include "check.h"

#include "base/rng.h"
#include "serve/kv_blocks.h"

#define NB 48
#define BS 4

static void test_basics(void) {
    loom_kv_blocks *b;
    CHECK(loom_kv_blocks_init(&b, 0, 16) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_kv_blocks_init(&b, 4, 0) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_kv_blocks_init(&b, 3, BS) == LOOM_OK);
    int a = loom_kv_blocks_alloc(b), c = loom_kv_blocks_alloc(b), d = loom_kv_blocks_alloc(b);
    CHECK(a >= 0 && c >= 0 && d >= 0 && a != c && c != d && a != d);
    CHECK(loom_kv_blocks_alloc(b) == -1 && loom_kv_blocks_available(b) == 0);
    const int32_t t1[BS] = {1, 2, 3, 4}, t2[BS] = {5, 6, 7, 8};
    uint64_t h1 = loom_kv_block_hash(0, t1, BS), h2 = loom_kv_block_hash(h1, t2, BS);
    CHECK(h1 != h2 && h1 != 0 && loom_kv_block_hash(0, t2, BS) != h2); /* the parent is part of the hash */
    CHECK(loom_kv_blocks_commit(b, a, h1, 0, t1) == 1);
    CHECK(loom_kv_blocks_commit(b, c, h1, 0, t1) == 0); /* the same content is cached once */
    CHECK(loom_kv_blocks_commit(b, c, h2, h1, t2) == 1);
    /* shared: a second reference */
    CHECK(loom_kv_blocks_lookup(b, h1, 0, t1) == a && loom_kv_blocks_refs(b, a) == 2);
    CHECK(loom_kv_blocks_lookup(b, h2, 0, t2) == -1); /* another parent */
    const int32_t t3[BS] = {5, 6, 7, 9};
    CHECK(loom_kv_blocks_lookup(b, h2, h1, t3) == -1); /* a hash collision is not a hit */
    loom_kv_blocks_unref(b, a), loom_kv_blocks_unref(b, a);
    loom_kv_blocks_unref(b, c);
    loom_kv_blocks_unref(b, d);
    loom_kv_blocks_stats st = loom_kv_blocks_get_stats(b);
    CHECK(st.cached == 2 && st.free == 1 && st.used == 0 && st.hits == 1 && st.misses == 2);
    /* allocation takes the free block first, then the least recently used cached one (a) */
    CHECK(loom_kv_blocks_alloc(b) == d);
    CHECK(loom_kv_blocks_alloc(b) == a);
    CHECK(loom_kv_blocks_lookup(b, h1, 0, t1) == -1); /* a was evicted */
    CHECK(loom_kv_blocks_lookup(b, h2, h1, t2) == c); /* c is still cached: a hit revives it */
    CHECK(loom_kv_blocks_get_stats(b).evictions == 1);
    CHECK(loom_kv_blocks_check(b) == LOOM_OK);
    loom_kv_blocks_unref(b, c);
    loom_kv_blocks_clear_cache(b);
    CHECK(loom_kv_blocks_get_stats(b).cached == 0 && loom_kv_blocks_check(b) == LOOM_OK);
    loom_kv_blocks_free(b);
}

/* Two blocks under one hash (a collision, forced): each is found by its own tokens only. */
static void test_collision(void) {
    loom_kv_blocks *b;
    CHECK(loom_kv_blocks_init(&b, 8, BS) == LOOM_OK);
    const int32_t t1[BS] = {1, 1, 1, 1}, t2[BS] = {2, 2, 2, 2};
    int x = loom_kv_blocks_alloc(b), y = loom_kv_blocks_alloc(b);
    CHECK(loom_kv_blocks_commit(b, x, 77, 0, t1) == 1 && loom_kv_blocks_commit(b, y, 77, 0, t2) == 1);
    CHECK(loom_kv_blocks_lookup(b, 77, 0, t2) == y && loom_kv_blocks_lookup(b, 77, 0, t1) == x);
    loom_kv_blocks_unref(b, x), loom_kv_blocks_unref(b, x), loom_kv_blocks_unref(b, y), loom_kv_blocks_unref(b, y);
    CHECK(loom_kv_blocks_alloc(b) >= 0); /* takes a free block; both stay cached */
    CHECK(loom_kv_blocks_check(b) == LOOM_OK);
    loom_kv_blocks_free(b);
}

/* Random sequences that allocate, share cached prefixes, commit full blocks
 * and finish; after every operation the manager's invariants hold and every
 * block's references equal the number of sequences holding it. */
typedef struct shadow_seq {
    int live;
    int blocks[8], n;
    uint64_t hash[8];
} shadow_seq;

static void test_random_ops(void) {
    loom_kv_blocks *b;
    CHECK(loom_kv_blocks_init(&b, NB, BS) == LOOM_OK);
    shadow_seq seqs[16] = {{0}};
    loom_rng r;
    loom_rng_init(&r, 5, 1);
    int32_t tokens[8][BS]; /* a small vocabulary of block contents: prefixes repeat */
    for (int i = 0; i < 8; i++)
        for (int k = 0; k < BS; k++) tokens[i][k] = i * 10 + k;
    int ok = 1;
    long shares = 0;
    for (int op = 0; op < 10000 && ok; op++) {
        shadow_seq *s = &seqs[(int)(loom_rng_uniform(&r) * 16) % 16];
        float u = loom_rng_uniform(&r);
        if (!s->live || u < 0.1f) { /* finish (or cancel, or preempt: the same release) and start again */
            for (int i = 0; i < s->n; i++) loom_kv_blocks_unref(b, s->blocks[i]);
            s->n = 0, s->live = 1;
        } else if (s->n < 8) { /* the next block: a cached prefix, else a new block committed when full */
            int c = (int)(loom_rng_uniform(&r) * 3) % 3; /* contents 0..2: prefixes are shared often */
            const int32_t *t = tokens[(s->n + c) % 8];
            uint64_t parent = s->n ? s->hash[s->n - 1] : 0, h = loom_kv_block_hash(parent, t, BS);
            int id = loom_kv_blocks_lookup(b, h, parent, t);
            if (id >= 0) shares++;
            else if ((id = loom_kv_blocks_alloc(b)) >= 0 && loom_rng_uniform(&r) < 0.8f)
                loom_kv_blocks_commit(b, id, h, parent, t);
            if (id >= 0) s->blocks[s->n] = id, s->hash[s->n++] = h;
        }
        ok = loom_kv_blocks_check(b) == LOOM_OK;
        CHECK_MSG(ok, "op %d: %s", op, loom_last_error());
        int want[NB] = {0};
        for (int q = 0; q < 16; q++)
            for (int i = 0; i < seqs[q].n; i++) want[seqs[q].blocks[i]]++;
        for (int id = 0; id < NB && ok; id++) {
            ok = want[id] == loom_kv_blocks_refs(b, id);
            CHECK_MSG(ok, "op %d: block %d has %d references, %d sequences hold it", op, id,
                      loom_kv_blocks_refs(b, id), want[id]);
        }
    }
    loom_kv_blocks_stats st = loom_kv_blocks_get_stats(b);
    CHECK_MSG(shares > 1000 && st.hits == shares && st.evictions > 100, "shares %ld, hits %ld, evictions %ld", shares,
              st.hits, st.evictions);
    for (int q = 0; q < 16; q++)
        for (int i = 0; i < seqs[q].n; i++) loom_kv_blocks_unref(b, seqs[q].blocks[i]);
    st = loom_kv_blocks_get_stats(b);
    CHECK(st.used == 0 && st.free + st.cached == NB && loom_kv_blocks_check(b) == LOOM_OK);
    loom_kv_blocks_free(b);
}

int main(void) {
    RUN_TEST(test_basics);
    RUN_TEST(test_collision);
    RUN_TEST(test_random_ops);
    return TEST_SUMMARY();
}
