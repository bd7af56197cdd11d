/*
 * The block manager of a paged KV cache: which of n_blocks fixed-size blocks
 * are free, which are owned (and by how many sequences), and the prefix cache.
 *
 * Prefix caching: a block whose every position holds computed K/V for known
 * tokens is committed under the hash of its tokens and of everything before
 * them (the previous block's hash), so a new sequence whose prompt starts with
 * the same tokens finds it and takes a reference instead of computing it
 * again. A lookup checks the stored tokens and parent hash too: a hash
 * collision never hands out the wrong block. When its last reference goes, a
 * committed block stays cached (evictable, least recently used first) until
 * an allocation needs its memory; an uncommitted one is free at once.
 *
 * Not thread-safe: the engine's step owns it.
 */
#ifndef LOOM_SERVE_KV_BLOCKS_H
#define LOOM_SERVE_KV_BLOCKS_H

#include <stdint.h>

#include "loom.h"

typedef struct loom_kv_blocks loom_kv_blocks;

typedef struct loom_kv_blocks_stats {
    long hits, misses;       /* lookups that found a block, and that did not */
    long evictions;          /* cached blocks whose memory an allocation took */
    int  n_blocks, used;     /* blocks, and blocks with references */
    int  cached;             /* unreferenced blocks still in the prefix cache */
    int  free;               /* blocks free of any content */
} loom_kv_blocks_stats;

loom_status loom_kv_blocks_init(loom_kv_blocks **out, int n_blocks, int block_size);
void loom_kv_blocks_free(loom_kv_blocks *b);
int loom_kv_blocks_block_size(const loom_kv_blocks *b);

/* Blocks an allocation can still take: free ones plus unreferenced cached ones. */
int loom_kv_blocks_available(const loom_kv_blocks *b);
/* A block with one reference and no content: from the free list, else the
 * least recently used cached block (dropped from the cache). -1 when every
 * block is referenced. */
int loom_kv_blocks_alloc(loom_kv_blocks *b);
void loom_kv_blocks_ref(loom_kv_blocks *b, int id);
/* Drops one reference; at none, a committed block becomes the most recently
 * used cached block, another one free. */
void loom_kv_blocks_unref(loom_kv_blocks *b, int id);
int loom_kv_blocks_refs(const loom_kv_blocks *b, int id);
/* 1 when block id is in the prefix cache (its contents must not change). */
int loom_kv_blocks_committed(const loom_kv_blocks *b, int id);

/* The hash of a full block of tokens after the block whose hash is parent
 * (0 for the first block). */
uint64_t loom_kv_block_hash(uint64_t parent, const int32_t *tokens, int n);
/* The cached block holding these block_size tokens after parent (hash from
 * loom_kv_block_hash), with one more reference; -1 when none. */
int loom_kv_blocks_lookup(loom_kv_blocks *b, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* Records that block id (referenced, its K/V computed) holds these tokens
 * after parent; a block already cached under the same hash keeps its place
 * (id then stays private). Returns 1 when id was committed. */
int loom_kv_blocks_commit(loom_kv_blocks *b, int id, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* Forgets every cached block (unreferenced ones become free). */
void loom_kv_blocks_clear_cache(loom_kv_blocks *b);

loom_kv_blocks_stats loom_kv_blocks_get_stats(const loom_kv_blocks *b);
/* Checks every invariant (reference counts against the lists, the hash
 * table against the committed blocks); LOOM_ERR_INTERNAL naming the first
 * broken one. For tests. */
loom_status loom_kv_blocks_check(const loom_kv_blocks *b);

#endif
