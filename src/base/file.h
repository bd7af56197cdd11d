/* Whole-file reads for the small text inputs (configs, rules, profiles). */
#ifndef LOOM_BASE_FILE_H
#define LOOM_BASE_FILE_H

#include <stddef.h>

#include "base/status.h"

/* Reads the regular file path (at most max_bytes) into a malloc'd,
 * NUL-terminated buffer (*buf, free it; *len bytes without the NUL).
 * Errors: LOOM_ERR_IO (cannot open, not a regular file, larger than
 * max_bytes, short read), LOOM_ERR_NOMEM; the message names the file. */
loom_status loom_read_file(const char *path, size_t max_bytes, char **buf, size_t *len);

/* 1 when path ends with suffix (".json", ".safetensors"). */
int loom_path_ends_with(const char *path, const char *suffix);

#endif
