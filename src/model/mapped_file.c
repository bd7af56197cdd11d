#include "model/mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"

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
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    LOOM_RETURN_IF(p == MAP_FAILED, LOOM_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
    f->data = p;
    f->size = (size_t)st.st_size;
    return LOOM_OK;
}

void loom_mapped_file_close(loom_mapped_file *f) {
    if (f->data) munmap((void *)f->data, f->size);
    f->data = NULL;
    f->size = 0;
}
