/* Stop strings (see stop_strings.h). The held text is shorter than the
 * longest stop string, so each piece costs O(piece + held x stops). */
#include "model/stop_strings.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

#define STOP_MAX 64

loom_status loom_stop_strings_init(loom_stop_strings *s, const char *const *stops, int n) {
    LOOM_RETURN_IF(!s || (n > 0 && !stops) || n < 0, LOOM_ERR_INVALID_ARG, "stop strings: NULL argument");
    memset(s, 0, sizeof *s);
    LOOM_RETURN_IF(n > STOP_MAX, LOOM_ERR_INVALID_ARG, "at most %d stop strings, got %d", STOP_MAX, n);
    for (int i = 0; i < n; i++)
        LOOM_RETURN_IF(!stops[i] || !stops[i][0], LOOM_ERR_INVALID_ARG, "stop string %d is empty", i + 1);
    s->stops = stops;
    s->n_stops = n;
    return LOOM_OK;
}

void loom_stop_strings_free(loom_stop_strings *s) {
    if (!s) return;
    free(s->held);
    free(s->out);
    memset(s, 0, sizeof *s);
}

static int reserve(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    char *p = realloc(*buf, c);
    if (!p) return 0;
    *buf = p;
    *cap = c;
    return 1;
}

/* Offset of the first needle[0..m) in hay[0..n), or n (memmem is a GNU extension). */
static size_t find_bytes(const char *hay, size_t n, const char *needle, size_t m) {
    for (size_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, m) == 0) return i;
    return n;
}

/* Moves held[0..n) to out (released) and keeps the rest held. */
static void release(loom_stop_strings *s, size_t n, const char **out, size_t *n_out) {
    memcpy(s->out, s->held, n);
    memmove(s->held, s->held + n, s->n_held - n);
    s->n_held -= n;
    *out = s->out;
    *n_out = n;
}

int loom_stop_strings_push(loom_stop_strings *s, const char *piece, size_t len, const char **out,
                           size_t *n_out) {
    *out = "";
    *n_out = 0;
    if (s->stopped) return 1;
    /* on allocation failure the text is released as it is: printing a stop
     * string beats losing the reply */
    if (!reserve(&s->held, &s->cap_held, s->n_held + len) || !reserve(&s->out, &s->cap_out, s->n_held + len)) {
        *out = piece;
        *n_out = len;
        return 0;
    }
    memcpy(s->held + s->n_held, piece, len);
    s->n_held += len;
    /* the first stop string in the text, at its earliest position */
    size_t first = s->n_held;
    for (int i = 0; i < s->n_stops; i++) {
        size_t at = find_bytes(s->held, s->n_held, s->stops[i], strlen(s->stops[i]));
        if (at < first) first = at;
    }
    if (first < s->n_held) {
        s->stopped = 1;
        release(s, first, out, n_out);
        s->n_held = 0;
        return 1;
    }
    /* hold the longest end of the text that begins some stop string */
    size_t hold = 0;
    for (int i = 0; i < s->n_stops; i++) {
        size_t sl = strlen(s->stops[i]);
        for (size_t k = sl - 1 < s->n_held ? sl - 1 : s->n_held; k > hold; k--)
            if (memcmp(s->held + s->n_held - k, s->stops[i], k) == 0) {
                hold = k;
                break;
            }
    }
    release(s, s->n_held - hold, out, n_out);
    return 0;
}

void loom_stop_strings_flush(loom_stop_strings *s, const char **out, size_t *n_out) {
    *out = "";
    *n_out = 0;
    if (s->stopped || !s->n_held) return;
    release(s, s->n_held, out, n_out);
}
