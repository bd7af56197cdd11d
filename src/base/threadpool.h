/* A persistent pthread pool: run fn(ith, nth, arg) on nth threads; the caller is thread 0. */
#ifndef LOOM_BASE_THREADPOOL_H
#define LOOM_BASE_THREADPOOL_H

#include "loom.h"
#include "loom_ops.h"   /* the pool is public: loom_pool_init, loom_pool_free, loom_pool_size */

typedef void (*loom_pool_fn)(int ith, int nth, void *arg);

/* Runs fn on every thread and returns when all have finished. Not reentrant. */
void loom_pool_run(loom_pool *pool, loom_pool_fn fn, void *arg);
/* Called from inside fn by all nth threads: returns when every thread has arrived. */
void loom_pool_barrier(loom_pool *pool);

#endif
