/* Minimal test harness: CHECK records failures and keeps going; TEST_MAIN
 * prints a summary line and returns non-zero if anything failed. */
#ifndef LOOM_TEST_CHECK_H
#define LOOM_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <math.h>

/* 1 in AddressSanitizer builds (gcc's macro or clang's feature test): tests
 * keep their sanitizer runs short, and skip time budgets there. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static int check_failures_ = 0;
static int check_count_ = 0;

#define CHECK(cond)                                                           \
    do {                                                                      \
        check_count_++;                                                       \
        if (!(cond)) {                                                        \
            check_failures_++;                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                     \
    } while (0)

#define CHECK_MSG(cond, ...)                                                  \
    do {                                                                      \
        check_count_++;                                                       \
        if (!(cond)) {                                                        \
            check_failures_++;                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
        }                                                                     \
    } while (0)

/* |a-b| <= tol*max(1,|b|), NaN matches NaN (the DESIGN.md rule). */
static inline int check_close(double a, double b, double tol) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b)) return a == b;
    double m = fabs(b) > 1.0 ? fabs(b) : 1.0;
    return fabs(a - b) <= tol * m;
}

#define CHECK_CLOSE(a, b, tol)                                                \
    CHECK_MSG(check_close((a), (b), (tol)), "%.9g vs %.9g (tol %g)", (double)(a), (double)(b), (double)(tol))

#define RUN_TEST(fn)                                                          \
    do {                                                                      \
        int before_ = check_failures_;                                        \
        fn();                                                                 \
        fprintf(stderr, "%s %s\n", check_failures_ == before_ ? "ok  " : "FAIL", #fn); \
    } while (0)

#define TEST_SUMMARY()                                                        \
    (fprintf(stderr, "%d checks, %d failed\n", check_count_, check_failures_), \
     check_failures_ == 0 && check_count_ > 0 ? 0 : 1)

/* CI is set (and not "0" or "false"): missing test data is a failure there. */
static inline int check_in_ci(void) {
    const char *ci = getenv("CI");
    return ci && *ci && strcmp(ci, "0") != 0 && strcmp(ci, "false") != 0;
}

/* In main: returns when the data file path is missing: status 1 in CI, else
 * a visible SKIP (77, or the summary when checks already failed). */
#define CHECK_NEED_FILE(path, hint)                                           \
    do {                                                                      \
        if (access((path), R_OK) != 0) {                                      \
            if (check_in_ci()) {                                              \
                fprintf(stderr, "FAIL: %s missing (%s)\n", (path), (hint));   \
                return 1;                                                     \
            }                                                                 \
            fprintf(stderr, "SKIP: %s missing (%s)\n", (path), (hint));       \
            return check_failures_ ? TEST_SUMMARY() : 77;                     \
        }                                                                     \
    } while (0)

#endif
