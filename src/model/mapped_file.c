/*
 * Whole files mapped read-only. A file of at least 2 MiB is mapped at a
 * 2 MiB-aligned address, so that loom_mapped_file_resident can later put
 * anonymous transparent huge pages in its place at the same address (every
 * pointer into the mapping stays valid).
 *
 * Why resident: a file mapping is made of 4 KiB page-cache pages. Decode
 * streams every weight once per token; over 4 KiB pages the hardware
 * prefetchers stop at each page boundary and the TLB misses every 4 KiB, and
 * the GEMVs reach about two thirds of the DRAM bandwidth they reach over huge
 * pages (SmolLM2-135M Q4_1 tg128: 1.4-1.5x faster resident, docs/models.md).
 */
#define _GNU_SOURCE /* mremap */
#include "model/mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"

#define HUGE_PAGE ((size_t)2 << 20)

static size_t page_round(size_t n) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

/* A free, 2 MiB-aligned address range of n bytes (page-rounded), reserved
 * PROT_NONE; NULL when none. */
static void *reserve_aligned(size_t n) {
    size_t len = page_round(n);
    char *r = mmap(NULL, len + HUGE_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return NULL;
    char *a = (char *)(((uintptr_t)r + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (a > r) munmap(r, (size_t)(a - r));
    size_t tail = (size_t)(r + len + HUGE_PAGE - (a + len));
    if (tail) munmap(a + len, tail);
    return a;
}

loom_status loom_mapped_file_open(loom_mapped_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    LOOM_RETURN_IF(!path, LOOM_ERR_INVALID_ARG, "no file path given");
    snprintf(f->path, sizeof f->path, "%s", path);
    int fd = open(path, O_RDONLY);
    LOOM_RETURN_IF(fd < 0, LOOM_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return loom_set_error(LOOM_ERR_IO, "'%s' is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return loom_set_error(LOOM_ERR_FORMAT, "'%s' is empty", path);
    }
    size_t n = (size_t)st.st_size;
    void *at = n >= HUGE_PAGE ? reserve_aligned(n) : NULL;
    void *p = mmap(at, n, PROT_READ, MAP_PRIVATE | (at ? MAP_FIXED : 0), fd, 0);
    close(fd);
    if (p == MAP_FAILED && at) munmap(at, page_round(n));
    LOOM_RETURN_IF(p == MAP_FAILED, LOOM_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
    f->data = p;
    f->size = n;
    return LOOM_OK;
}

int loom_mapped_file_resident(loom_mapped_file *f) {
    if (!f || !f->data || f->resident) return f && f->resident;
    if (((uintptr_t)f->data & (HUGE_PAGE - 1)) != 0) return 0; /* a small file: its pages stay */
    size_t len = page_round(f->size);
    char *q = reserve_aligned(len);
    if (!q) return 0;
    if (mprotect(q, len, PROT_READ | PROT_WRITE) != 0) {
        munmap(q, len);
        return 0;
    }
    madvise(q, len, MADV_HUGEPAGE);
    /* in chunks, each chunk's file pages dropped from the process once copied
     * (the page cache keeps them), so the peak is the copy plus one chunk */
    const size_t chunk = 16 * HUGE_PAGE;
    for (size_t off = 0; off < f->size; off += chunk) {
        size_t n = f->size - off < chunk ? f->size - off : chunk;
        memcpy(q + off, f->data + off, n);
        if (n == chunk) madvise((void *)(f->data + off), n, MADV_DONTNEED);
    }
    mprotect(q, len, PROT_READ); /* read-only, as the mapping was */
    /* the anonymous pages take the mapping's place: same address, huge pages kept */
    void *r = mremap(q, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)f->data);
    if (r == MAP_FAILED) {
        munmap(q, len);
        return 0;
    }
    f->resident = 1;
    return 1;
}

void loom_mapped_file_close(loom_mapped_file *f) {
    if (f->data) munmap((void *)f->data, f->resident ? page_round(f->size) : f->size);
    f->data = NULL;
    f->size = 0;
    f->resident = 0;
}
