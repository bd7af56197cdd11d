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
    int fd = open(path, O_RDONLY | O_CLOEXEC);
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
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        if (at) munmap(at, page_round(n));
        return loom_set_error(LOOM_ERR_IO, "cannot map '%s': %s", path, strerror(e));
    }
    f->data = p;
    f->size = n;
    f->fd1 = fd + 1; /* the same file, should the mapping need a part of it again */
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

/* The pieces of [0, len) to move into place: everything outside the spans,
 * cut where the huge-page advice changes (hp: the 2 MiB-rounded regions
 * around the spans that were advised MADV_NOHUGEPAGE), so each piece lies in
 * one VMA of the staging copy (mremap moves one VMA's range on every kernel). */
static int pieces(const span *iv, int k, const span *hp, int nh, size_t len, span *out) {
    size_t *cut = malloc((size_t)(2 * k + 2 * nh + 2) * sizeof *cut);
    if (!cut) return -1;
    int nc = 0;
    cut[nc++] = 0, cut[nc++] = len;
    for (int i = 0; i < k; i++) cut[nc++] = iv[i].a, cut[nc++] = iv[i].b;
    for (int i = 0; i < nh; i++) cut[nc++] = hp[i].a, cut[nc++] = hp[i].b;
    for (int i = 1; i < nc; i++) /* insertion sort: a few hundred cuts */
        for (int j = i; j > 0 && cut[j - 1] > cut[j]; j--) {
            size_t t = cut[j];
            cut[j] = cut[j - 1], cut[j - 1] = t;
        }
    int n = 0, s = 0;
    for (int i = 0; i + 1 < nc; i++) {
        size_t a = cut[i], b = cut[i + 1];
        if (a >= b) continue;
        while (s < k && iv[s].b <= a) s++;
        if (s < k && iv[s].a <= a && b <= iv[s].b) continue; /* inside a span: stays the file's */
        out[n++] = (span){a, b};
    }
    free(cut);
    return n;
}

int loom_mapped_file_resident_except(loom_mapped_file *f, const loom_byte_range *skip, int n) {
    if (!f || !f->data || f->resident) return f && f->resident;
    if (((uintptr_t)f->data & (HUGE_PAGE - 1)) != 0) return 0; /* a small file: its pages stay */
    size_t len = page_round(f->size);
    span *iv = n > 0 ? malloc((size_t)n * 2 * sizeof *iv) : NULL;
    span *hp = iv ? iv + n : NULL; /* the spans' 2 MiB-rounded regions (n at most) */
    span *pc = malloc((size_t)(n > 0 ? 4 * n + 2 : 1) * sizeof *pc);
    int k = iv ? page_spans(f, skip, n, iv) : 0, nh = 0;
    for (int i = 0; i < k; i++) {
        size_t a = iv[i].a & ~(HUGE_PAGE - 1), b = (iv[i].b + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        if (b > len) b = len;
        if (nh > 0 && a <= hp[nh - 1].b) hp[nh - 1].b = b > hp[nh - 1].b ? b : hp[nh - 1].b;
        else hp[nh++] = (span){a, b};
    }
    int np = pc ? pieces(iv, k, hp, nh, len, pc) : -1;
    char *q = np >= 0 ? reserve_aligned(len) : NULL;
    if (!q || mprotect(q, len, PROT_READ | PROT_WRITE) != 0) {
        if (q) munmap(q, len);
        free(iv), free(pc);
        return 0;
    }
    madvise(q, len, MADV_HUGEPAGE);
    /* no huge pages around a span: a byte copied beside it would bring a whole
     * 2 MiB page in */
    for (int i = 0; i < nh; i++) madvise(q + hp[i].a, hp[i].b - hp[i].a, MADV_NOHUGEPAGE);
    /* in chunks, each chunk's file pages dropped from the process once copied
     * (the page cache keeps them), so the peak is the copy plus one chunk; the
     * spans are never touched in the copy, so they take no memory there */
    const size_t chunk = 16 * HUGE_PAGE;
    for (size_t off = 0; off < f->size; off += chunk) {
        size_t c = f->size - off < chunk ? f->size - off : chunk;
        copy_except(q, f->data, off, c, iv, k);
        if (c == chunk) madvise((void *)(f->data + off), c, MADV_DONTNEED);
    }
    mprotect(q, len, PROT_READ); /* read-only, as the mapping was */
    /* each piece takes its place over the file mapping (same address, huge
     * pages kept); the spans stay the file's. A piece that cannot move leaves
     * the file mapping there: the same bytes, only not resident. */
    int moved = 0, broken = 0;
    for (int i = 0; i < np; i++) {
        void *r = mremap(q + pc[i].a, pc[i].b - pc[i].a, pc[i].b - pc[i].a, MREMAP_MAYMOVE | MREMAP_FIXED,
                         (void *)(f->data + pc[i].a));
        if (r != MAP_FAILED) {
            moved++;
            continue;
        }
        /* a failed move may have unmapped the target first: the file again */
        munmap(q + pc[i].a, pc[i].b - pc[i].a);
        char *at = (char *)f->data + pc[i].a;
        if (!f->fd1 || mmap(at, pc[i].b - pc[i].a, PROT_READ, MAP_PRIVATE | MAP_FIXED, f->fd1 - 1,
                            (off_t)pc[i].a) != at)
            broken = 1;
    }
    for (int i = 0; i < k; i++) { /* the spans' staging never touched; their file pages out of the process */
        munmap(q + iv[i].a, iv[i].b - iv[i].a);
        madvise((void *)(f->data + iv[i].a), iv[i].b - iv[i].a, MADV_DONTNEED);
    }
    free(iv), free(pc);
    /* resident when any piece moved: the mapping is then part anonymous, and
     * loom_mapped_file_drop leaves it alone */
    f->resident = moved > 0;
    if (broken) {
        loom_set_error(LOOM_ERR_IO, "'%s': part of its mapping could be neither made resident nor mapped again",
                       f->path);
        return -1;
    }
    return f->resident;
}

int loom_mapped_file_resident(loom_mapped_file *f) { return loom_mapped_file_resident_except(f, NULL, 0); }

void loom_mapped_file_drop(const loom_mapped_file *f, const loom_byte_range *skip, int n) {
    if (!f || !f->data || f->resident || n <= 0) return;
    span *iv = malloc((size_t)n * sizeof *iv);
    if (!iv) return;
    int k = page_spans(f, skip, n, iv);
    for (int i = 0; i < k; i++) madvise((void *)(f->data + iv[i].a), iv[i].b - iv[i].a, MADV_DONTNEED);
    free(iv);
}

void loom_mapped_file_close(loom_mapped_file *f) {
    if (f->fd1) close(f->fd1 - 1);
    f->fd1 = 0;
    if (f->data) munmap((void *)f->data, f->resident ? page_round(f->size) : f->size);
    f->data = NULL;
    f->size = 0;
    f->resident = 0;
}
