/* Read-only memory mapping of a whole file. */
#ifndef LOOM_MODEL_MAPPED_FILE_H
#define LOOM_MODEL_MAPPED_FILE_H

#include <stddef.h>
#include "loom.h"

typedef struct loom_mapped_file {
    const unsigned char *data;
    size_t size;
    char path[1024];
} loom_mapped_file;

/* Maps path; errors: missing/unreadable file (LOOM_ERR_IO), empty file (LOOM_ERR_FORMAT). */
loom_status loom_mapped_file_open(loom_mapped_file *f, const char *path);
void loom_mapped_file_close(loom_mapped_file *f);

#endif
