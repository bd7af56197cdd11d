/* Aligned allocation with replaceable hooks, and a bump arena.
 *
 * The hook is process-wide and meant to be set once, before anything is
 * allocated: a block must be freed by the allocator that made it. */
#include "base/alloc.h"
#include "base/status.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* Blocks of at least LOOM_HUGE_MIN bytes are 2 MiB aligned and advised as
 * transparent huge pages (where the kernel offers them on request, the
 * common "madvise" setting): weights, KV caches and activation arenas are
 * streamed from DRAM, and with 4 KiB pages every 4 KiB of a stream is a TLB
 * miss. */
#define LOOM_HUGE_PAGE ((size_t)2 << 20)
#define LOOM_HUGE_MIN ((size_t)8 << 20)

static void *default_alloc(size_t size, size_t align, void *user) {
    (void)user;
    void *p = NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (size >= LOOM_HUGE_MIN && align <= LOOM_HUGE_PAGE) {
        if (posix_memalign(&p, LOOM_HUGE_PAGE, size) != 0) return NULL;
        loom_advise_huge_pages(p, size);
        return p;
    }
#endif
    if (posix_memalign(&p, align, size) != 0) return NULL;
    return p;
}

void loom_advise_huge_pages(void *p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p && bytes >= LOOM_HUGE_MIN) madvise(p, bytes, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}

static void default_free(void *p, void *user) {
    (void)user;
    free(p);
}

static loom_allocator g_allocator = {default_alloc, default_free, NULL};

void loom_set_allocator(const loom_allocator *a) {
    if (a && a->alloc && a->free) {
        g_allocator = *a;
    } else {
        g_allocator.alloc = default_alloc;
        g_allocator.free = default_free;
        g_allocator.user = NULL;
    }
}

void *loom_alloc_aligned(size_t size, size_t align) {
    if (align < sizeof(void *) || (align & (align - 1)) != 0) {
        loom_set_error(LOOM_ERR_INVALID_ARG, "loom_alloc_aligned: alignment %zu is not a power "
                       "of two >= %zu", align, sizeof(void *));
        return NULL;
    }
    /* posix_memalign(0) may return NULL or a shared pointer; the contract is a
     * valid unique pointer, so ask for one byte. */
    void *p = g_allocator.alloc(size ? size : 1, align, g_allocator.user);
    if (!p) {
        loom_set_error(LOOM_ERR_NOMEM, "loom_alloc_aligned: out of memory (%zu bytes, align %zu)",
                       size, align);
    }
    return p;
}

void loom_free_aligned(void *p) {
    if (p) g_allocator.free(p, g_allocator.user);
}

/* ---------------------------------------------------------------- arena */

loom_status loom_arena_init(loom_arena *a, size_t cap) {
    LOOM_RETURN_IF(!a, LOOM_ERR_INVALID_ARG, "loom_arena_init: arena is NULL");
    memset(a, 0, sizeof *a);
    void *p = loom_alloc_aligned(cap, LOOM_ALIGN);
    LOOM_RETURN_IF(!p, LOOM_ERR_NOMEM, "loom_arena_init: cannot allocate %zu bytes", cap);
    a->base = p;
    a->cap = cap;
    a->owned = 1;
    return LOOM_OK;
}

void loom_arena_init_static(loom_arena *a, void *buf, size_t cap) {
    /* A misaligned buffer is trimmed to its first aligned byte rather than
     * rejected: the function has no status to report with. */
    size_t skip = (size_t)((LOOM_ALIGN - ((uintptr_t)buf % LOOM_ALIGN)) % LOOM_ALIGN);
    a->used = 0;
    a->owned = 0;
    if (!buf || skip > cap) {
        a->base = NULL;
        a->cap = 0;
        return;
    }
    a->base = (unsigned char *)buf + skip;
    a->cap = cap - skip;
}

void *loom_arena_alloc(loom_arena *a, size_t size) {
    if (!a || !a->base) return NULL;
    /* used only ever grows to cap, so the rounded offset cannot wrap. */
    size_t off = (a->used + (LOOM_ALIGN - 1)) & ~(size_t)(LOOM_ALIGN - 1);
    if (off > a->cap || size > a->cap - off) return NULL;
    a->used = off + size;
    return a->base + off;
}

void loom_arena_reset(loom_arena *a) {
    if (a) a->used = 0;
}

void loom_arena_free(loom_arena *a) {
    if (!a) return;
    if (a->owned) loom_free_aligned(a->base);
    memset(a, 0, sizeof *a);
}
