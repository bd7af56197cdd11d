/* A persistent pthread pool: run fn(ith, nth, arg) on nth threads; the caller is thread 0. */
#ifndef LOOM_BASE_THREADPOOL_H
#define LOOM_BASE_THREADPOOL_H

#include "loom.h"

typedef struct loom_pool loom_pool;
typedef void (*loom_pool_fn)(int ith, int nth, void *arg);

/* Creates a pool of n_threads (>= 1; n_threads-1 workers are started). */
loom_status loom_pool_init(loom_pool **pool, int n_threads);
void loom_pool_free(loom_pool *pool);
int  loom_pool_size(const loom_pool *pool);
/* Runs fn on every thread and returns when all have finished. Not reentrant. */
void loom_pool_run(loom_pool *pool, loom_pool_fn fn, void *arg);
/* Called from inside fn by all nth threads: returns when every thread has arrived. */
void loom_pool_barrier(loom_pool *pool);

#endif
