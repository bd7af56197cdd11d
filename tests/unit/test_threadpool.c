/* Thread pool: each ith runs once per run, the barrier orders phases, many
 * runs in a row, various pool sizes (including more threads than cores), and
 * an idle pool stops spinning. */
#include "check.h"
#include "base/threadpool.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define MAX_T 16

typedef struct {
    atomic_int calls[MAX_T];
    atomic_int bad_nth;
    int expect_nth;
} count_ctx;

static void count_fn(int ith, int nth, void *arg) {
    count_ctx *c = arg;
    if (nth != c->expect_nth) atomic_fetch_add(&c->bad_nth, 1);
    if (ith >= 0 && ith < MAX_T) atomic_fetch_add(&c->calls[ith], 1);
}

static void test_each_ith_once(void) {
    const int sizes[] = {1, 2, 3, 8};
    for (int s = 0; s < 4; s++) {
        int n = sizes[s];
        loom_pool *pool = NULL;
        CHECK(loom_pool_init(&pool, n) == LOOM_OK);
        if (!pool) continue;
        CHECK(loom_pool_size(pool) == n);
        count_ctx c;
        memset(&c, 0, sizeof c);
        c.expect_nth = n;
        const int runs = 2000;
        for (int r = 0; r < runs; r++) loom_pool_run(pool, count_fn, &c);
        for (int i = 0; i < MAX_T; i++) {
            int want = i < n ? runs : 0;
            CHECK_MSG(atomic_load(&c.calls[i]) == want, "n=%d ith=%d ran %d times, expected %d",
                      n, i, atomic_load(&c.calls[i]), want);
        }
        CHECK(atomic_load(&c.bad_nth) == 0);
        loom_pool_free(pool);
    }
}

/* Phase p: thread ith writes slot[ith] = p (plain stores); after the barrier,
 * every thread checks that all slots hold p. Any stale read is a failure. */
typedef struct {
    loom_pool *pool;
    int phases;
    int slot[MAX_T];
    atomic_int errors;
} phase_ctx;

static void phase_fn(int ith, int nth, void *arg) {
    phase_ctx *c = arg;
    loom_pool *pool = c->pool;
    for (int p = 1; p <= c->phases; p++) {
        c->slot[ith] = p;
        loom_pool_barrier(pool);
        for (int j = 0; j < nth; j++)
            if (c->slot[j] != p) atomic_fetch_add(&c->errors, 1);
        loom_pool_barrier(pool);  /* nobody writes phase p+1 before all have read phase p */
    }
}

static void test_barrier_phases(void) {
    const int sizes[] = {1, 2, 3, 8};
    for (int s = 0; s < 4; s++) {
        int n = sizes[s];
        phase_ctx c;
        memset(&c, 0, sizeof c);
        CHECK(loom_pool_init(&c.pool, n) == LOOM_OK);
        if (!c.pool) continue;
        c.phases = 200;
        for (int r = 0; r < 20; r++) {
            memset(c.slot, 0, sizeof c.slot);
            loom_pool_run(c.pool, phase_fn, &c);
        }
        CHECK_MSG(atomic_load(&c.errors) == 0, "n=%d: %d stale reads after barrier", n,
                  atomic_load(&c.errors));
        loom_pool_free(c.pool);
    }
}

/* A sum computed in two phases: partial sums, barrier, thread 0 adds them. The
 * caller sees the final value once run returns (run's completion orders writes). */
typedef struct {
    loom_pool *pool;
    long partial[MAX_T];
    long total;
    int len;
} sum_ctx;

static void sum_fn(int ith, int nth, void *arg) {
    sum_ctx *c = arg;
    long s = 0;
    for (int i = ith; i < c->len; i += nth) s += i;
    c->partial[ith] = s;
    loom_pool_barrier(c->pool);
    if (ith == 0) {
        long t = 0;
        for (int j = 0; j < nth; j++) t += c->partial[j];
        c->total = t;
    }
}

static void test_run_results_visible(void) {
    sum_ctx c;
    memset(&c, 0, sizeof c);
    CHECK(loom_pool_init(&c.pool, 3) == LOOM_OK);
    if (!c.pool) return;
    int bad = 0;
    for (int r = 0; r < 2000; r++) {
        c.len = 1000 + r;
        c.total = -1;
        loom_pool_run(c.pool, sum_fn, &c);
        if (c.total != (long)c.len * (c.len - 1) / 2) bad++;
    }
    CHECK_MSG(bad == 0, "%d wrong sums", bad);
    loom_pool_free(c.pool);
}

static void test_init_free_repeatedly(void) {
    int ok = 1;
    for (int i = 0; i < 200; i++) {
        loom_pool *pool = NULL;
        int n = 1 + i % 5;
        if (loom_pool_init(&pool, n) != LOOM_OK || !pool) {
            ok = 0;
            break;
        }
        if (i % 2) {  /* odd: run once; even: freed without ever running */
            count_ctx c;
            memset(&c, 0, sizeof c);
            c.expect_nth = n;
            loom_pool_run(pool, count_fn, &c);
            for (int j = 0; j < n; j++) ok &= atomic_load(&c.calls[j]) == 1;
        }
        loom_pool_free(pool);
    }
    CHECK(ok);
    loom_pool_free(NULL);  /* no-op */
}

static void test_invalid(void) {
    loom_pool *pool = (loom_pool *)&pool;
    CHECK(loom_pool_init(&pool, 0) == LOOM_ERR_INVALID_ARG);
    CHECK(pool == NULL);
    CHECK(loom_last_error()[0] != '\0');
    CHECK(loom_pool_init(&pool, -3) == LOOM_ERR_INVALID_ARG);
    CHECK(pool == NULL);
    CHECK(loom_pool_init(NULL, 2) == LOOM_ERR_INVALID_ARG);
}

static double process_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Waits spin for a bounded time (100 us) and then sleep: an idle pool must
 * not keep burning its cores. 200 ms idle after a run may cost the process a
 * little CPU (the spin, the wake-ups), never the ~200 ms per worker a wait
 * that never stops spinning would. */
static void test_idle_pool_sleeps(void) {
    loom_pool *pool = NULL;
    CHECK(loom_pool_init(&pool, 2) == LOOM_OK);
    if (!pool) return;
    count_ctx c;
    memset(&c, 0, sizeof c);
    c.expect_nth = 2;
    loom_pool_run(pool, count_fn, &c);
    double t0 = process_cpu_s();
    struct timespec idle = {0, 200000000};
    nanosleep(&idle, NULL);
    double used = process_cpu_s() - t0;
    CHECK_MSG(used < 0.1, "an idle pool used %.3f s of CPU in 0.2 s", used);
    CHECK(atomic_load(&c.calls[0]) == 1 && atomic_load(&c.calls[1]) == 1);
    loom_pool_free(pool);
}

int main(void) {
    RUN_TEST(test_each_ith_once);
    RUN_TEST(test_barrier_phases);
    RUN_TEST(test_run_results_visible);
    RUN_TEST(test_init_free_repeatedly);
    RUN_TEST(test_invalid);
    RUN_TEST(test_idle_pool_sleeps);
    return TEST_SUMMARY();
}
