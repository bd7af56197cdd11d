/* Read-only memory mapping of a whole file. */
#ifndef LOOM_MODEL_MAPPED_FILE_H
#define LOOM_MODEL_MAPPED_FILE_H

#include <stddef.h>
#include "loom.h"

typedef struct loom_mapped_file {
    const unsigned char *data;
    size_t size;
    int resident;       /* the file's pages replaced by anonymous huge pages */
    char path[1024];
} loom_mapped_file;

/* Maps path; errors: missing/unreadable file (LOOM_ERR_IO), empty file (LOOM_ERR_FORMAT). */
loom_status loom_mapped_file_open(loom_mapped_file *f, const char *path);
/* Replaces the mapping's file pages by an anonymous copy in transparent huge
 * pages at the same address (pointers into it stay valid): decode streams
 * weights faster over huge pages. 1 when done (or done before); 0 when the
 * file is small (under 2 MiB) or memory is short, and the file mapping stays. */
int loom_mapped_file_resident(loom_mapped_file *f);
void loom_mapped_file_close(loom_mapped_file *f);

#endif
