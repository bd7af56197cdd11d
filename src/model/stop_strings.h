/* Stop strings: generated text is released for printing only once it cannot
 * be the beginning of a stop string, so a stop string is never printed, in
 * whatever pieces the tokens split it. */
#ifndef LOOM_MODEL_STOP_STRINGS_H
#define LOOM_MODEL_STOP_STRINGS_H

#include <stddef.h>

#include "loom.h"

typedef struct loom_stop_strings {
    const char *const *stops;  /* [n_stops] borrowed: must outlive the object */
    int    n_stops;
    char  *held;               /* text that could still begin a stop string */
    size_t n_held, cap_held;
    char  *out;                /* the text released by the last call */
    size_t cap_out;
    int    stopped;            /* a stop string was found: everything after it is dropped */
} loom_stop_strings;

/* Errors for an empty stop string or more than 64 of them. n = 0 releases
 * every piece as it comes. */
loom_status loom_stop_strings_init(loom_stop_strings *s, const char *const *stops, int n);
void loom_stop_strings_free(loom_stop_strings *s);

/* Appends the next piece of generated text. *out (valid until the next call)
 * gets the text that can be printed now, *n_out its length. Returns 1 when the
 * text so far contains a stop string: *out is what precedes the first one,
 * and generation should end. After that every piece is dropped. */
int loom_stop_strings_push(loom_stop_strings *s, const char *piece, size_t len, const char **out,
                           size_t *n_out);
/* At the end of generation without a stop string: the text still held. */
void loom_stop_strings_flush(loom_stop_strings *s, const char **out, size_t *n_out);

#endif
