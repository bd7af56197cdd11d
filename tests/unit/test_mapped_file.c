/* Mapped files made resident: a file of at least 2 MiB is mapped at a 2 MiB
 * boundary and loom_mapped_file_resident puts an anonymous copy in huge pages
 * at the same address (same bytes, same pointer, read-only); a small file
 * stays mapped. A model loaded with use_mmap 0 and 1 gives the same logits. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/mapped_file.h"
#include "model/model.h"

static char *write_file(const char *name, size_t n, unsigned seed) {
    char *path = malloc(256);
    snprintf(path, 256, "/tmp/loom_test_mapped_%d_%s", (int)getpid(), name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    unsigned x = seed;
    for (size_t i = 0; f && i < n; i++) {
        x = x * 1103515245u + 12345u;
        fputc((int)(x >> 16) & 0xFF, f);
    }
    if (f) fclose(f);
    return path;
}

static void check_bytes(const loom_mapped_file *f, size_t n, unsigned seed) {
    unsigned x = seed;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        bad += f->data[i] != (unsigned char)((x >> 16) & 0xFF);
    }
    CHECK_MSG(bad == 0, "%zu bytes differ", bad);
}

static void test_resident(void) {
    /* 5 MiB + 123 bytes: not a whole number of pages or huge pages */
    const size_t n = ((size_t)5 << 20) + 123;
    char *path = write_file("big", n, 7);
    loom_mapped_file f;
    CHECK(loom_mapped_file_open(&f, path) == LOOM_OK);
    CHECK(f.size == n && !f.resident);
    CHECK(((uintptr_t)f.data & ((2u << 20) - 1)) == 0); /* at a 2 MiB boundary */
    const unsigned char *before = f.data;
    check_bytes(&f, n, 7);
    CHECK(loom_mapped_file_resident(&f) == 1);
    CHECK(f.resident && f.data == before && f.size == n);
    check_bytes(&f, n, 7);
    CHECK(loom_mapped_file_resident(&f) == 1); /* a second call: nothing more */
    check_bytes(&f, n, 7);
    loom_mapped_file_close(&f);
    CHECK(f.data == NULL && !f.resident);
    unlink(path);
    free(path);

    /* a small file stays mapped */
    path = write_file("small", 4096 + 5, 9);
    CHECK(loom_mapped_file_open(&f, path) == LOOM_OK);
    CHECK(loom_mapped_file_resident(&f) == 0 && !f.resident);
    check_bytes(&f, 4096 + 5, 9);
    loom_mapped_file_close(&f);
    unlink(path);
    free(path);
}

/* Resident except some ranges (unaligned, overlapping, one under a page, one
 * partly outside the file, one empty): every byte keeps its value; the whole
 * pages inside a range are the file's mapping again (file-backed, not in the
 * process until read) and the rest is anonymous; dropping ranges of a file
 * mapping keeps the bytes and lowers the process's pages there. */
typedef struct vm_use {
    long rss_kib, anon_kib, file_backed_kib; /* over the mappings overlapping [lo, hi) */
} vm_use;

static vm_use range_use(const void *lo_p, const void *hi_p) {
    vm_use u = {0, 0, 0};
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return (vm_use){-1, -1, -1};
    char line[512];
    int in = 0, file = 0;
    uintptr_t lo = (uintptr_t)lo_p, hi = (uintptr_t)hi_p;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b, ino;
        long v;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %lu", &a, &b, &ino) == 3) { /* a mapping's first line */
            in = a < hi && lo < b;
            file = ino != 0;
            continue;
        }
        if (!in) continue;
        if (sscanf(line, "Rss: %ld kB", &v) == 1) {
            u.rss_kib += v;
        } else if (sscanf(line, "Anonymous: %ld kB", &v) == 1) {
            u.anon_kib += v;
        } else if (file && sscanf(line, "Size: %ld kB", &v) == 1) {
            u.file_backed_kib += v;
        }
    }
    fclose(f);
    return u;
}

static void test_resident_except(void) {
    const size_t n = ((size_t)9 << 20) + 4321;
    char *path = write_file("except", n, 11);
    loom_mapped_file f;
    CHECK(loom_mapped_file_open(&f, path) == LOOM_OK);
    const unsigned char *d = f.data;
    check_bytes(&f, n, 11);
    loom_byte_range skip[5] = {{d + 1000, (size_t)3 << 20},              /* unaligned, several pages */
                               {d + ((size_t)2 << 20) + 77, 1 << 20},    /* overlaps the first */
                               {d + ((size_t)6 << 20) + 5, 4000},        /* under a page: nothing whole */
                               {d + ((size_t)8 << 20), (size_t)4 << 20}, /* runs past the end */
                               {d + 100, 0}};
    CHECK(loom_mapped_file_resident_except(&f, skip, 5) == 1);
    CHECK(f.resident && f.data == d);
    check_bytes(&f, n, 11); /* skipped pages read back from the file */
    loom_mapped_file_close(&f);

    CHECK(loom_mapped_file_open(&f, path) == LOOM_OK);
    d = f.data;
    check_bytes(&f, n, 11); /* every page in the process */
    loom_byte_range big = {d + 4096, (size_t)7 << 20};
    CHECK(loom_mapped_file_resident_except(&f, &big, 1) == 1);
    /* the 7 MiB are the file's mapping, not in the process; the rest (the first
     * page, the last 2 MiB and change) anonymous */
    vm_use u = range_use(d, d + n);
    CHECK_MSG(u.file_backed_kib >= 7 * 1024 && u.rss_kib < 3 * 1024 && u.anon_kib > 1024,
              "after leaving 7 MiB of 9 to the file: %ld KiB file-backed, %ld KiB resident, %ld KiB anonymous",
              u.file_backed_kib, u.rss_kib, u.anon_kib);
    check_bytes(&f, n, 11);
    loom_mapped_file_close(&f);

    /* a file mapping: ranges dropped, the bytes unchanged */
    CHECK(loom_mapped_file_open(&f, path) == LOOM_OK);
    check_bytes(&f, n, 11);
    long before = range_use(f.data, f.data + n).rss_kib;
    loom_mapped_file_drop(&f, skip, 5);
    long after = range_use(f.data, f.data + n).rss_kib;
    CHECK_MSG(before >= 8 * 1024 && after < before - 3 * 1024, "drop: %ld -> %ld KiB resident", before, after);
    check_bytes(&f, n, 11);
    loom_mapped_file_close(&f);
    unlink(path);
    free(path);
}

static void test_model_same_logits(void) {
    const char *dir = getenv("LOOM_SHARED_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.bin", dir && *dir ? dir : "../shared");
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "SKIP: %s missing\n", path);
        CHECK(!check_in_ci());
        return;
    }
    float *lg[2] = {NULL, NULL};
    int V = 0;
    for (int mm = 0; mm < 2; mm++) {
        loom_model_params p = loom_model_default_params();
        p.n_threads = 1, p.use_mmap = mm, p.n_ctx = 32;
        loom_model *m = NULL;
        CHECK(loom_model_load(path, &p, &m) == LOOM_OK);
        if (!m) return;
        V = loom_model_get_info(m).vocab_size;
        lg[mm] = malloc(sizeof(float) * (size_t)V);
        int32_t ids[4] = {1, 5, 9, 13};
        CHECK(loom_model_forward(m, ids, 4, 0, lg[mm]) == LOOM_OK);
        loom_model_free(m);
    }
    CHECK(memcmp(lg[0], lg[1], sizeof(float) * (size_t)V) == 0);
    free(lg[0]), free(lg[1]);
}

int main(void) {
    RUN_TEST(test_resident);
    RUN_TEST(test_resident_except);
    RUN_TEST(test_model_same_logits);
    return TEST_SUMMARY();
}
