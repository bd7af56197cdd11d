/* Read-only memory mapping of a whole file. */
#ifndef LOOM_MODEL_MAPPED_FILE_H
#define LOOM_MODEL_MAPPED_FILE_H

#include <stddef.h>
#include "loom.h"

typedef struct loom_mapped_file {
    const unsigned char *data;
    size_t size;
    int resident;       /* the file's pages replaced by anonymous huge pages (some or all) */
    int fd1;            /* the open file's descriptor + 1 (0: none), kept to map it again */
    char path[1024];
} loom_mapped_file;

/* Maps path; errors: missing/unreadable file (LOOM_ERR_IO), empty file (LOOM_ERR_FORMAT). */
loom_status loom_mapped_file_open(loom_mapped_file *f, const char *path);
/* Replaces the mapping's file pages by an anonymous copy in transparent huge
 * pages at the same address (pointers into it stay valid): decode streams
 * weights faster over huge pages. 1 when done (or done before); 0 when the
 * file is small (under 2 MiB) or memory is short, and the file mapping stays. */
int loom_mapped_file_resident(loom_mapped_file *f);

/* Bytes of a mapping the process keeps in another form (weights packed once). */
typedef struct loom_byte_range {
    const void *p;
    size_t n;
} loom_byte_range;
/* loom_mapped_file_resident, except the whole pages inside the n ranges (parts
 * outside the mapping ignored): those stay pages of the file, not copied and
 * not in the process until something reads them (then from the page cache, as
 * before: every byte keeps its value). 1 / 0 as loom_mapped_file_resident
 * (1: some or all of the rest is resident); -1 (error set) when a part the
 * kernel failed to move could not be mapped from the file again: the mapping
 * is then unusable. */
int loom_mapped_file_resident_except(loom_mapped_file *f, const loom_byte_range *skip, int n);
/* The whole pages inside the ranges dropped from the process while they are
 * pages of the file (a read faults them in again from the page cache); pages
 * of a resident copy are kept. */
void loom_mapped_file_drop(const loom_mapped_file *f, const loom_byte_range *skip, int n);
void loom_mapped_file_close(loom_mapped_file *f);

#endif
