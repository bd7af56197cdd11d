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
    RUN_TEST(test_model_same_logits);
    return TEST_SUMMARY();
}
