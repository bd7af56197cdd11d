/* Stop strings: the text released is exactly the text before the first stop
 * string, however the pieces split it; nothing else is lost or held longer
 * than a stop string could still need. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "model/stop_strings.h"

/* Pushes pieces (NULL-terminated), returns the released text in out. */
static int run(const char *const *stops, int n_stops, const char *const *pieces, char *out, size_t cap) {
    loom_stop_strings s;
    CHECK(loom_stop_strings_init(&s, stops, n_stops) == LOOM_OK);
    size_t len = 0;
    int stopped = 0;
    for (int i = 0; pieces[i] && !stopped; i++) {
        const char *o;
        size_t n;
        stopped = loom_stop_strings_push(&s, pieces[i], strlen(pieces[i]), &o, &n);
        if (len + n < cap) memcpy(out + len, o, n), len += n;
    }
    if (!stopped) {
        const char *o;
        size_t n;
        loom_stop_strings_flush(&s, &o, &n);
        if (len + n < cap) memcpy(out + len, o, n), len += n;
    }
    out[len] = '\0';
    loom_stop_strings_free(&s);
    return stopped;
}

static void test_cases(void) {
    char out[256];
    const char *st1[] = {"o W"};
    const char *p1[] = {"Hel", "lo Wo", "rld", NULL};
    CHECK(run(st1, 1, p1, out, sizeof out) == 1 && strcmp(out, "Hell") == 0);
    const char *st2[] = {"abc"};
    const char *p2[] = {"ab", "ab", "c", "never", NULL};  /* a false start, then the real one */
    CHECK(run(st2, 1, p2, out, sizeof out) == 1 && strcmp(out, "ab") == 0);
    const char *p3[] = {"ab", "ab", "d", NULL};
    CHECK(run(st2, 1, p3, out, sizeof out) == 0 && strcmp(out, "ababd") == 0);
    const char *p4[] = {"xa", "b", NULL};  /* held at the end: flushed */
    CHECK(run(st2, 1, p4, out, sizeof out) == 0 && strcmp(out, "xab") == 0);
    const char *st3[] = {"y", "xyz"};  /* the earliest position wins, whichever string */
    const char *p5[] = {"a", "xyz", NULL};
    CHECK(run(st3, 2, p5, out, sizeof out) == 1 && strcmp(out, "a") == 0);
    const char *p6[] = {"stop at once", NULL};
    const char *st4[] = {"stop"};
    CHECK(run(st4, 1, p6, out, sizeof out) == 1 && out[0] == '\0');
    const char *p7[] = {"free ", "text", NULL};
    CHECK(run(NULL, 0, p7, out, sizeof out) == 0 && strcmp(out, "free text") == 0);
    /* held only while it can begin a stop string: "ab" is released by "x" at once */
    loom_stop_strings s;
    CHECK(loom_stop_strings_init(&s, st2, 1) == LOOM_OK);
    const char *o;
    size_t n;
    CHECK(loom_stop_strings_push(&s, "zab", 3, &o, &n) == 0 && n == 1 && o[0] == 'z');
    CHECK(loom_stop_strings_push(&s, "x", 1, &o, &n) == 0 && n == 3 && memcmp(o, "abx", 3) == 0);
    loom_stop_strings_free(&s);
    const char *bad[] = {"ok", ""};
    CHECK(loom_stop_strings_init(&s, bad, 2) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "stop string 2"));
    CHECK(loom_stop_strings_init(&s, bad, -1) == LOOM_ERR_INVALID_ARG);
}

/* Random texts over a small alphabet (so stop strings occur, and partly),
 * random stop strings, random splits into pieces. */
static void test_random(void) {
    uint32_t r = 99;
#define RND() (r = r * 1664525u + 1013904223u, r >> 8)
    int found = 0, fails = 0;
    for (int c = 0; c < 3000; c++) {
        char text[200], stops_buf[3][8];
        const char *stops[3];
        int len = 1 + (int)(RND() % 150), ns = 1 + (int)(RND() % 3);
        for (int i = 0; i < len; i++) text[i] = "abc "[RND() % 4];
        text[len] = '\0';
        for (int k = 0; k < ns; k++) {
            int sl = 1 + (int)(RND() % 5);
            for (int i = 0; i < sl; i++) stops_buf[k][i] = "abc "[RND() % 4];
            stops_buf[k][sl] = '\0';
            stops[k] = stops_buf[k];
        }
        /* expected: generation stops after the first piece that completes a
         * stop string; what is printed is the text before the earliest stop
         * string in the text so far (a longer one that began earlier but is not
         * complete yet does not count) */
        int first = len;
        loom_stop_strings s;
        CHECK(loom_stop_strings_init(&s, stops, ns) == LOOM_OK);
        char got[256];
        size_t glen = 0, pushed = 0;
        int stopped = 0, held_ok = 1;
        while ((int)pushed < len && !stopped) {
            size_t pl = 1 + RND() % 7;
            if (pushed + pl > (size_t)len) pl = (size_t)len - pushed;
            const char *o;
            size_t n;
            stopped = loom_stop_strings_push(&s, text + pushed, pl, &o, &n);
            memcpy(got + glen, o, n);
            glen += n;
            pushed += pl;
            char so_far[200];
            memcpy(so_far, text, pushed);
            so_far[pushed] = '\0';
            for (int k = 0; k < ns; k++) {
                const char *h = strstr(so_far, stops[k]);
                if (h && h - so_far < first) first = (int)(h - so_far);
            }
            if (stopped != (first < len)) held_ok = 0;  /* stopped exactly when a stop string completed */
            /* no more held back than 4 bytes (the longest stop string, 5, less one) */
            if (!stopped && pushed - glen > 4) held_ok = 0;
        }
        if (!stopped) {
            const char *o;
            size_t n;
            loom_stop_strings_flush(&s, &o, &n);
            memcpy(got + glen, o, n);
            glen += n;
        }
        loom_stop_strings_free(&s);
        found += stopped;
        if (stopped != (first < len) || glen != (size_t)first || memcmp(got, text, glen) != 0 || !held_ok) {
            if (fails++ < 5)
                fprintf(stderr, "text '%s' stops '%s' '%s' '%s': got '%.*s' (stopped %d), want %d bytes\n", text,
                        stops[0], ns > 1 ? stops[1] : "", ns > 2 ? stops[2] : "", (int)glen, got, stopped, first);
        }
    }
    CHECK_MSG(fails == 0, "%d of 3000 cases wrong", fails);
    CHECK(found > 1000 && found < 2990);  /* both outcomes exercised */
}

/* The public filter (loom.h) over the above: its own copies of the strings. */
static void test_public_filter(void) {
    char mine[] = "END";
    const char *stops[] = {mine};
    loom_stop_filter *f = NULL;
    CHECK(loom_stop_filter_init(&f, stops, 1) == LOOM_OK && f);
    mine[0] = 'X';  /* the caller's buffer may change after init */
    const char *o;
    size_t n;
    CHECK(loom_stop_filter_push(f, "the E", 5, &o, &n) == 0 && n == 4 && memcmp(o, "the ", 4) == 0);
    CHECK(loom_stop_filter_push(f, "ND and", 6, &o, &n) == 1 && n == 0);
    CHECK(loom_stop_filter_push(f, "more", 4, &o, &n) == 1 && n == 0);
    loom_stop_filter_free(f);
    f = NULL;
    CHECK(loom_stop_filter_init(&f, stops, 0) == LOOM_OK);
    CHECK(loom_stop_filter_push(f, "abc", 3, &o, &n) == 0 && n == 3);
    loom_stop_filter_flush(f, &o, &n);
    CHECK(n == 0);
    loom_stop_filter_free(f);
    const char *bad[] = {"ok", ""};
    f = (loom_stop_filter *)1;
    CHECK(loom_stop_filter_init(&f, bad, 2) == LOOM_ERR_INVALID_ARG && !f && strstr(loom_last_error(), "stop string 2"));
    CHECK(loom_stop_filter_init(&f, bad, 65) == LOOM_ERR_INVALID_ARG && !f);
    loom_stop_filter_free(NULL);
}

int main(void) {
    RUN_TEST(test_cases);
    RUN_TEST(test_random);
    RUN_TEST(test_public_filter);
    return TEST_SUMMARY();
}
