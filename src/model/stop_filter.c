/* The public stop-string filter (loom.h): the stop strings of
 * model/stop_strings.h, which borrow their strings, over copies it owns. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/stop_strings.h"

struct loom_stop_filter {
    loom_stop_strings s;
    char **copies;   /* [n] the stop strings s points at */
    int n;
};

loom_status loom_stop_filter_init(loom_stop_filter **out, const char *const *stops, int n) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "stop strings: NULL argument");
    *out = NULL;
    loom_stop_filter *f = calloc(1, sizeof *f);
    LOOM_RETURN_IF(!f, LOOM_ERR_NOMEM, "stop strings: out of memory");
    loom_status st = loom_stop_strings_init(&f->s, stops, n);  /* checks them; borrows the caller's */
    if (st != LOOM_OK) {
        free(f);
        return st;
    }
    if (n > 0 && !(f->copies = calloc((size_t)n, sizeof *f->copies))) st = LOOM_ERR_NOMEM;
    for (int i = 0; st == LOOM_OK && i < n; i++, f->n++)
        if (!(f->copies[i] = strdup(stops[i]))) st = LOOM_ERR_NOMEM;
    if (st != LOOM_OK) {
        loom_stop_filter_free(f);
        return loom_set_error(st, "stop strings: out of memory");
    }
    f->s.stops = (const char *const *)f->copies;
    *out = f;
    return LOOM_OK;
}

void loom_stop_filter_free(loom_stop_filter *f) {
    if (!f) return;
    loom_stop_strings_free(&f->s);
    for (int i = 0; i < f->n; i++) free(f->copies[i]);
    free(f->copies);
    free(f);
}

int loom_stop_filter_push(loom_stop_filter *f, const char *piece, size_t len, const char **out, size_t *n_out) {
    return loom_stop_strings_push(&f->s, piece, len, out, n_out);
}

void loom_stop_filter_flush(loom_stop_filter *f, const char **out, size_t *n_out) {
    loom_stop_strings_flush(&f->s, out, n_out);
}
