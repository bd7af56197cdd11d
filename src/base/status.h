/* Internal error helpers: set the thread's last error and return a status. */
#ifndef LOOM_BASE_STATUS_H
#define LOOM_BASE_STATUS_H

#include "loom.h"

/* Records "msg" as the last error of this thread and returns s. */
loom_status loom_set_error(loom_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Evaluates a loom_status expression and returns it from the caller on error. */
#define LOOM_TRY(expr)                                   \
    do {                                                 \
        loom_status loom_try_s_ = (expr);                \
        if (loom_try_s_ != LOOM_OK) return loom_try_s_;  \
    } while (0)

/* Returns status s with a formatted message when cond holds. */
#define LOOM_RETURN_IF(cond, s, ...)                              \
    do {                                                          \
        if (cond) return loom_set_error((s), __VA_ARGS__);        \
    } while (0)

#endif
