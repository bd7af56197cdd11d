/* Whole-file reads (base/file.h). */
#include "base/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

loom_status loom_read_file(const char *path, size_t max_bytes, char **buf, size_t *len) {
    LOOM_RETURN_IF(!path || !buf || !len, LOOM_ERR_INVALID_ARG, "read_file: NULL argument");
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    LOOM_RETURN_IF(!f, LOOM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size > (uint64_t)max_bytes) {
        fclose(f);
        return loom_set_error(LOOM_ERR_IO, "%s: not a regular file of at most %zu bytes", path, max_bytes);
    }
    size_t n = (size_t)sb.st_size;
    char *b = malloc(n + 1);
    if (!b) {
        fclose(f);
        return loom_set_error(LOOM_ERR_NOMEM, "%s: out of memory reading it", path);
    }
    size_t got = fread(b, 1, n, f);
    fclose(f);
    if (got != n) {
        free(b);
        return loom_set_error(LOOM_ERR_IO, "%s: cannot read it", path);
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return LOOM_OK;
}

int loom_path_ends_with(const char *path, const char *suffix) {
    size_t n = strlen(path), k = strlen(suffix);
    return n >= k && strcmp(path + n - k, suffix) == 0;
}
