/* Aligned allocation, allocator hooks and the bump arena. */
#include "check.h"
#include "base/alloc.h"

#include <stdint.h>
#include <string.h>

static void test_alignment(void) {
    const size_t aligns[] = {sizeof(void *), 16, 32, 64, 128, 4096};
    const size_t sizes[] = {0, 1, 3, 7, 63, 64, 65, 1000, 4096, 1 << 20};
    for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            unsigned char *p = loom_alloc_aligned(sizes[s], aligns[a]);
            CHECK_MSG(p != NULL, "size %zu align %zu", sizes[s], aligns[a]);
            if (!p) continue;
            CHECK_MSG((uintptr_t)p % aligns[a] == 0, "%p not %zu-aligned", (void *)p, aligns[a]);
            if (sizes[s]) memset(p, 0xab, sizes[s]);  /* the whole block is writable */
            loom_free_aligned(p);
        }
    }
    /* size 0 gives distinct pointers */
    void *z1 = loom_alloc_aligned(0, 64), *z2 = loom_alloc_aligned(0, 64);
    CHECK(z1 && z2 && z1 != z2);
    loom_free_aligned(z1);
    loom_free_aligned(z2);
    loom_free_aligned(NULL);
    /* bad alignments */
    CHECK(loom_alloc_aligned(16, 3) == NULL);
    CHECK(loom_alloc_aligned(16, 0) == NULL);
    CHECK(loom_alloc_aligned(16, 2) == NULL);  /* below sizeof(void*) */
    CHECK(loom_alloc_aligned(16, 48) == NULL);
}

typedef struct { int allocs, frees; size_t bytes; } counts;

static void *count_alloc(size_t size, size_t align, void *user) {
    counts *c = user;
    c->allocs++;
    c->bytes += size;
    void *p = NULL;
    return posix_memalign(&p, align, size) == 0 ? p : NULL;
}

static void count_free(void *p, void *user) {
    ((counts *)user)->frees++;
    free(p);
}

static void test_hook(void) {
    counts c = {0, 0, 0};
    loom_allocator a = {count_alloc, count_free, &c};
    loom_set_allocator(&a);
    void *p = loom_alloc_aligned(100, 64);
    void *q = loom_alloc_aligned(200, 32);
    CHECK(c.allocs == 2 && c.bytes == 300);
    loom_free_aligned(p);
    loom_free_aligned(q);
    loom_free_aligned(NULL);  /* not forwarded */
    CHECK(c.frees == 2);

    loom_arena ar;
    CHECK(loom_arena_init(&ar, 4096) == LOOM_OK);
    CHECK(c.allocs == 3);
    loom_arena_free(&ar);
    CHECK(c.frees == 3);

    loom_set_allocator(NULL);  /* back to the default */
    void *r = loom_alloc_aligned(10, 64);
    loom_free_aligned(r);
    CHECK(c.allocs == 3 && c.frees == 3);
}

static void test_arena(void) {
    loom_arena a;
    CHECK(loom_arena_init(&a, 1000) == LOOM_OK);
    CHECK(a.owned == 1 && a.cap == 1000 && a.used == 0);
    CHECK((uintptr_t)a.base % LOOM_ALIGN == 0);

    unsigned char *p1 = loom_arena_alloc(&a, 10);
    unsigned char *p2 = loom_arena_alloc(&a, 100);
    unsigned char *p3 = loom_arena_alloc(&a, 1);
    CHECK(p1 == a.base);
    CHECK(p2 == a.base + 64);
    CHECK(p3 == a.base + 192);
    CHECK((uintptr_t)p2 % LOOM_ALIGN == 0 && (uintptr_t)p3 % LOOM_ALIGN == 0);
    memset(p2, 1, 100);

    /* 193 used: the next block starts at 256; 744 bytes left exactly */
    CHECK(loom_arena_alloc(&a, 745) == NULL);
    CHECK(a.used == 193);  /* a failed allocation changes nothing */
    unsigned char *p4 = loom_arena_alloc(&a, 744);
    CHECK(p4 == a.base + 256);
    CHECK(a.used == 1000);
    CHECK(loom_arena_alloc(&a, 1) == NULL);
    CHECK(loom_arena_alloc(&a, SIZE_MAX) == NULL);

    loom_arena_reset(&a);
    CHECK(a.used == 0);
    CHECK(loom_arena_alloc(&a, 1000) == a.base);
    loom_arena_reset(&a);
    CHECK(loom_arena_alloc(&a, SIZE_MAX - 10) == NULL);
    loom_arena_free(&a);
    CHECK(a.base == NULL && a.cap == 0);
    CHECK(loom_arena_alloc(&a, 1) == NULL);
    loom_arena_free(&a);  /* twice is harmless */
}

static void test_arena_static(void) {
    static _Alignas(64) unsigned char buf[512];
    loom_arena a;
    loom_arena_init_static(&a, buf, sizeof buf);
    CHECK(a.base == buf && a.cap == 512 && a.owned == 0);
    CHECK(loom_arena_alloc(&a, 500) == buf);
    CHECK(loom_arena_alloc(&a, 1) == NULL);
    loom_arena_free(&a);  /* does not free caller memory */
    CHECK(buf[0] == buf[0]);

    /* a misaligned buffer is trimmed to its first aligned byte */
    loom_arena_init_static(&a, buf + 1, 200);
    CHECK(a.base == buf + 64 && a.cap == 137);
    loom_arena_init_static(&a, buf + 1, 10);
    CHECK(a.cap == 0 && loom_arena_alloc(&a, 1) == NULL);
    loom_arena_init_static(&a, NULL, 0);
    CHECK(loom_arena_alloc(&a, 1) == NULL);
}

int main(void) {
    RUN_TEST(test_alignment);
    RUN_TEST(test_hook);
    RUN_TEST(test_arena);
    RUN_TEST(test_arena_static);
    return TEST_SUMMARY();
}
