#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[1024];

static const char *const status_names[] = {
    [LOOM_OK] = "LOOM_OK",
    [LOOM_ERR_INVALID_ARG] = "LOOM_ERR_INVALID_ARG",
    [LOOM_ERR_SHAPE] = "LOOM_ERR_SHAPE",
    [LOOM_ERR_DTYPE] = "LOOM_ERR_DTYPE",
    [LOOM_ERR_NOMEM] = "LOOM_ERR_NOMEM",
    [LOOM_ERR_IO] = "LOOM_ERR_IO",
    [LOOM_ERR_FORMAT] = "LOOM_ERR_FORMAT",
    [LOOM_ERR_UNSUPPORTED] = "LOOM_ERR_UNSUPPORTED",
    [LOOM_ERR_INTERNAL] = "LOOM_ERR_INTERNAL",
};
_Static_assert(sizeof(status_names) / sizeof(status_names[0]) == LOOM_STATUS_COUNT,
               "status_names must name every loom_status");

const char *loom_status_str(loom_status s) {
    if ((unsigned)s >= LOOM_STATUS_COUNT) return "LOOM_ERR_UNKNOWN";
    return status_names[s];
}

const char *loom_last_error(void) { return last_error; }

void loom_clear_error(void) { last_error[0] = '\0'; }

loom_status loom_set_error(loom_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}
