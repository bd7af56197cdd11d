/* Persistent thread pool with a reusable spin/yield barrier.
 *
 * A run is announced by bumping `generation` under the mutex; workers spin on
 * it for up to SPIN_NS (cheap back-to-back runs), then sleep on `wake`, so an
 * idle pool uses no CPU. Completion is counted in `n_done`; the caller spins
 * as long, then sleeps on `done`. Waits spin for a bounded time and then yield
 * or sleep, so oversubscribed pools (more threads than cores) and sanitizer
 * builds do not stall behind a spinning thread. */
#include "base/threadpool.h"
#include "base/status.h"
#include "base/timer.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

/* How long a wait spins before it yields or sleeps. A sleeping worker takes
 * tens of microseconds to wake (a futex wake-up, more in a VM), which is the
 * whole cost of a small launch: with a 6 us spin (256 pauses on Zen 5), two
 * threads decoding a 1024-token bf16 cache were slower than one, because the
 * worker fell asleep between calls. 100 us covers the gap between the kernels
 * of a token and between tokens of a generation, and is still short next to
 * a time slice. A time, not a pause count: pause takes 10 to 150 cycles
 * depending on the CPU. */
#define SPIN_NS 100000

/* Spin state of one wait: keep spinning while this returns 1. The clock is
 * read once per 64 pauses. */
typedef struct spin_wait {
    int on, i;
    uint64_t t0;
} spin_wait;

static inline int spin_more(spin_wait *w) {
    if (!w->on) return 0;
    if ((w->i++ & 63) == 0) {
        uint64_t t = loom_time_ns();
        if (w->i == 1) w->t0 = t;
        else if (t - w->t0 > SPIN_NS) return w->on = 0;
    }
    CPU_RELAX();
    return 1;
}

typedef struct worker {
    loom_pool *pool;
    int ith;
} worker;

struct loom_pool {
    int n;                          /* threads including the caller */
    pthread_t *threads;             /* n - 1 workers */
    worker *workers;
    int n_started;
    int spin;                       /* 1, or 0 when threads outnumber CPUs (no spinning) */

    pthread_mutex_t mu;
    pthread_cond_t wake;            /* workers: a new generation or stop */
    pthread_cond_t done;            /* caller: all workers finished */
    atomic_uint generation;         /* bumped once per run, under mu */
    atomic_int n_done;              /* workers finished in this run */
    atomic_int stop;
    loom_pool_fn fn;                /* published by the release on generation */
    void *arg;

    /* Barrier: arrivals in the current phase, and the phase number, bumped by
     * the last arrival (sense reversal with a counter instead of a bool). On
     * their own cache lines so spinning waiters do not slow the run state. */
    _Alignas(64) atomic_int bar_count;
    _Alignas(64) atomic_uint bar_phase;
};

static void *worker_main(void *p) {
    worker *w = p;
    loom_pool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned gen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        spin_wait sw = {pool->spin, 0, 0};
        while (gen == seen && spin_more(&sw)) {
            if (atomic_load_explicit(&pool->stop, memory_order_relaxed)) break;
            gen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        }
        if (gen == seen) {
            pthread_mutex_lock(&pool->mu);
            while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen &&
                   !atomic_load_explicit(&pool->stop, memory_order_relaxed)) {
                pthread_cond_wait(&pool->wake, &pool->mu);
            }
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load_explicit(&pool->stop, memory_order_acquire)) break;
        seen = gen;

        pool->fn(w->ith, pool->n, pool->arg);

        /* acq_rel: the caller's acquire of the final count sees every write of fn. */
        if (atomic_fetch_add_explicit(&pool->n_done, 1, memory_order_acq_rel) == pool->n - 2) {
            /* Last worker: the caller may be asleep. Locking orders this signal
             * after its check of n_done, so the wake-up cannot be lost. */
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->mu);
        }
    }
    return NULL;
}

static void pool_stop_workers(loom_pool *pool) {
    pthread_mutex_lock(&pool->mu);
    atomic_store_explicit(&pool->stop, 1, memory_order_release);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n_started; i++) pthread_join(pool->threads[i], NULL);
    pool->n_started = 0;
}

static void pool_destroy(loom_pool *pool) {
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mu);
    free(pool->workers);
    free(pool->threads);
    free(pool);
}

loom_status loom_pool_init(loom_pool **out, int n_threads) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "loom_pool_init: out is NULL");
    *out = NULL;
    LOOM_RETURN_IF(n_threads < 1, LOOM_ERR_INVALID_ARG,
                   "loom_pool_init: n_threads must be >= 1, got %d", n_threads);

    /* The struct is over-aligned (barrier on its own cache lines): calloc's
     * 16-byte alignment is not enough. */
    void *mem = NULL;
    LOOM_RETURN_IF(posix_memalign(&mem, _Alignof(loom_pool), sizeof(loom_pool)) != 0,
                   LOOM_ERR_NOMEM, "loom_pool_init: out of memory");
    loom_pool *pool = memset(mem, 0, sizeof(loom_pool));
    pool->n = n_threads;
    /* Oversubscribed, a spinning waiter only delays the thread it waits for. */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    pool->spin = (ncpu > 0 && n_threads > ncpu) ? 0 : 1;
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->n_done, 0);
    atomic_init(&pool->stop, 0);
    atomic_init(&pool->bar_count, 0);
    atomic_init(&pool->bar_phase, 0);
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);

    if (n_threads > 1) {
        pool->threads = calloc((size_t)n_threads - 1, sizeof *pool->threads);
        pool->workers = calloc((size_t)n_threads - 1, sizeof *pool->workers);
        if (!pool->threads || !pool->workers) {
            pool_destroy(pool);
            return loom_set_error(LOOM_ERR_NOMEM, "loom_pool_init: out of memory");
        }
        for (int i = 0; i < n_threads - 1; i++) {
            pool->workers[i].pool = pool;
            pool->workers[i].ith = i + 1;
            int rc = pthread_create(&pool->threads[i], NULL, worker_main, &pool->workers[i]);
            if (rc != 0) {
                pool_stop_workers(pool);
                pool_destroy(pool);
                /* EAGAIN is a resource limit (threads, memory), not a bug in loom. */
                return loom_set_error(rc == EAGAIN ? LOOM_ERR_NOMEM : LOOM_ERR_INTERNAL,
                                      "loom_pool_init: pthread_create failed for thread %d of %d: %s",
                                      i + 1, n_threads, strerror(rc));
            }
            pool->n_started++;
        }
    }
    *out = pool;
    return LOOM_OK;
}

void loom_pool_free(loom_pool *pool) {
    if (!pool) return;
    pool_stop_workers(pool);
    pool_destroy(pool);
}

int loom_pool_size(const loom_pool *pool) {
    return pool ? pool->n : 0;
}

void loom_pool_run(loom_pool *pool, loom_pool_fn fn, void *arg) {
    if (pool->n == 1) {
        fn(0, 1, arg);
        return;
    }
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->arg = arg;
    atomic_store_explicit(&pool->n_done, 0, memory_order_relaxed);
    /* release: workers that acquire the new generation see fn, arg and n_done = 0. */
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);

    fn(0, pool->n, arg);

    int target = pool->n - 1;
    spin_wait sw = {pool->spin, 0, 0};
    do {
        if (atomic_load_explicit(&pool->n_done, memory_order_acquire) == target) return;
    } while (spin_more(&sw));
    pthread_mutex_lock(&pool->mu);
    while (atomic_load_explicit(&pool->n_done, memory_order_acquire) != target) {
        pthread_cond_wait(&pool->done, &pool->mu);
    }
    pthread_mutex_unlock(&pool->mu);
}

void loom_pool_barrier(loom_pool *pool) {
    int n = pool->n;
    if (n == 1) return;
    /* Read the phase before arriving: it cannot flip until this thread arrives. */
    unsigned phase = atomic_load_explicit(&pool->bar_phase, memory_order_relaxed);
    if (atomic_fetch_add_explicit(&pool->bar_count, 1, memory_order_acq_rel) == n - 1) {
        /* Last to arrive: reset before releasing, so nobody can arrive at the
         * next barrier early and count into this phase. */
        atomic_store_explicit(&pool->bar_count, 0, memory_order_relaxed);
        atomic_store_explicit(&pool->bar_phase, phase + 1, memory_order_release);
        return;
    }
    spin_wait sw = {pool->spin, 0, 0};
    while (atomic_load_explicit(&pool->bar_phase, memory_order_acquire) == phase)
        if (!spin_more(&sw)) sched_yield();
}
