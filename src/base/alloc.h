/* Aligned allocation and a bump arena. */
#ifndef LOOM_BASE_ALLOC_H
#define LOOM_BASE_ALLOC_H

#include <stddef.h>
#include "loom.h"

#define LOOM_ALIGN 64  /* cache line; also the AVX-512 vector size */

/* n rounded up to a multiple of 64 bytes (scratch layouts). */
static inline size_t loom_align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Aligned allocation (align a power of two >= sizeof(void*)); NULL on failure.
 * loom_free_aligned(NULL) is a no-op. size 0 returns a valid unique pointer. */
void *loom_alloc_aligned(size_t size, size_t align);
void  loom_free_aligned(void *p);
/* Advises transparent huge pages for a page-aligned block of at least 8 MiB
 * that is streamed (weights, KV caches); smaller blocks and other systems:
 * nothing. loom_alloc_aligned does it for its own large blocks. */
void  loom_advise_huge_pages(void *p, size_t bytes);

/* Allocation hooks, for counting allocators in tests. NULL restores the default. */
typedef struct loom_allocator {
    void *(*alloc)(size_t size, size_t align, void *user);
    void  (*free)(void *p, void *user);
    void *user;
} loom_allocator;
void loom_set_allocator(const loom_allocator *a);

/* A bump arena over one aligned block; allocations are LOOM_ALIGN-aligned. */
typedef struct loom_arena {
    unsigned char *base;
    size_t cap;
    size_t used;
    int owned;   /* base was allocated by loom_arena_init */
} loom_arena;

/* Allocates a block of cap bytes. */
loom_status loom_arena_init(loom_arena *a, size_t cap);
/* Uses caller memory (must be LOOM_ALIGN-aligned). */
void loom_arena_init_static(loom_arena *a, void *buf, size_t cap);
/* NULL when full (no error set: caller reports). */
void *loom_arena_alloc(loom_arena *a, size_t size);
void loom_arena_reset(loom_arena *a);
void loom_arena_free(loom_arena *a);

#endif
