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
#include <stdlib.h>
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

/* The whole pages of the ranges inside [0, size) as sorted, merged [a, b)
 * offsets into iv (n entries at most); their count. */
typedef struct span {
    size_t a, b;
} span;

static int span_cmp(const void *x, const void *y) {
    const span *s = x, *t = y;
    return s->a < t->a ? -1 : s->a > t->a;
}

static int page_spans(const loom_mapped_file *f, const loom_byte_range *r, int n, span *iv) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)f->data, hi = lo + f->size;
    int k = 0;
    for (int i = 0; i < n; i++) {
        uintptr_t a = (uintptr_t)r[i].p, b = a + r[i].n;
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        a = (a + pg - 1) / pg * pg;
        b = b / pg * pg;
        if (a < b) iv[k++] = (span){a - lo, b - lo};
    }
    qsort(iv, (size_t)k, sizeof *iv, span_cmp);
    int m = 0;
    for (int i = 0; i < k; i++) {
        if (m > 0 && iv[i].a <= iv[m - 1].b) {
            if (iv[i].b > iv[m - 1].b) iv[m - 1].b = iv[i].b;
        } else {
            iv[m++] = iv[i];
        }
    }
    return m;
}

/* Copies [off, off + n) of the file's bytes to q except the spans. */
static void copy_except(char *q, const unsigned char *src, size_t off, size_t n, const span *iv, int k) {
    size_t end = off + n;
    for (int i = 0; i < k && off < end; i++) {
        if (iv[i].b <= off) continue;
        if (iv[i].a >= end) break;
        if (iv[i].a > off) memcpy(q + off, src + off, iv[i].a - off);
        off = iv[i].b;
    }
    if (off < end) memcpy(q + off, src + off, end - off);
}

/* The span [a, b) of f, a resident copy with nothing there yet, given the
 * file's bytes again: the file mapped in place, else read into place. */
static int restore_span(loom_mapped_file *f, int fd, span s) {
    char *at = (char *)f->data + s.a;
    if (mmap(at, s.b - s.a, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, (off_t)s.a) == at) return 1;
    if (mprotect(at, s.b - s.a, PROT_READ | PROT_WRITE) != 0) return 0;
    for (size_t done = 0; done < s.b - s.a;) {
        ssize_t r = pread(fd, at + done, s.b - s.a - done, (off_t)(s.a + done));
        if (r <= 0) return 0;
        done += (size_t)r;
    }
    return mprotect(at, s.b - s.a, PROT_READ) == 0;
}

int loom_mapped_file_resident_except(loom_mapped_file *f, const loom_byte_range *skip, int n) {
    if (!f || !f->data || f->resident) return f && f->resident;
    if (((uintptr_t)f->data & (HUGE_PAGE - 1)) != 0) return 0; /* a small file: its pages stay */
    span *iv = n > 0 ? malloc((size_t)n * sizeof *iv) : NULL;
    int k = iv ? page_spans(f, skip, n, iv) : 0;
    int fd = k > 0 ? open(f->path, O_RDONLY) : -1;
    if (fd < 0) k = 0; /* the file cannot give the pages back: all copied */
    size_t len = page_round(f->size);
    char *q = reserve_aligned(len);
    if (!q || mprotect(q, len, PROT_READ | PROT_WRITE) != 0) {
        if (q) munmap(q, len);
        if (fd >= 0) close(fd);
        free(iv);
        return 0;
    }
    madvise(q, len, MADV_HUGEPAGE);
    /* huge pages not where a span is: a byte copied beside it would bring a
     * whole 2 MiB page in (freed only when the span is mapped back) */
    for (int i = 0; i < k; i++) {
        size_t a = iv[i].a & ~(HUGE_PAGE - 1), b = (iv[i].b + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        madvise(q + a, (b < len ? b : len) - a, MADV_NOHUGEPAGE);
    }
    /* in chunks, each chunk's file pages dropped from the process once copied
     * (the page cache keeps them), so the peak is the copy plus one chunk; the
     * skipped spans are never touched, so they take no memory */
    const size_t chunk = 16 * HUGE_PAGE;
    for (size_t off = 0; off < f->size; off += chunk) {
        size_t c = f->size - off < chunk ? f->size - off : chunk;
        copy_except(q, f->data, off, c, iv, k);
        if (c == chunk) madvise((void *)(f->data + off), c, MADV_DONTNEED);
    }
    mprotect(q, len, PROT_READ); /* read-only, as the mapping was */
    /* the anonymous pages take the mapping's place: same address, huge pages kept */
    void *r = mremap(q, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)f->data);
    if (r == MAP_FAILED) {
        munmap(q, len);
        if (fd >= 0) close(fd);
        free(iv);
        return 0;
    }
    f->resident = 1;
    int ok = 1;
    for (int i = 0; i < k && ok; i++) ok = restore_span(f, fd, iv[i]);
    if (fd >= 0) close(fd);
    free(iv);
    if (!ok) {
        loom_set_error(LOOM_ERR_IO, "'%s': cannot map the file's pages back after the resident copy: %s", f->path,
                       strerror(errno));
        return -1;
    }
    return 1;
}

int loom_mapped_file_resident(loom_mapped_file *f) { return loom_mapped_file_resident_except(f, NULL, 0); }

void loom_mapped_file_drop(loom_mapped_file *f, const loom_byte_range *skip, int n) {
    if (!f || !f->data || f->resident || n <= 0) return;
    span *iv = malloc((size_t)n * sizeof *iv);
    if (!iv) return;
    int k = page_spans(f, skip, n, iv);
    for (int i = 0; i < k; i++) madvise((void *)(f->data + iv[i].a), iv[i].b - iv[i].a, MADV_DONTNEED);
    free(iv);
}

void loom_mapped_file_close(loom_mapped_file *f) {
    if (f->data) munmap((void *)f->data, f->resident ? page_round(f->size) : f->size);
    f->data = NULL;
    f->size = 0;
    f->resident = 0;
}
