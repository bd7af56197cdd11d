/* Shared helpers of the benchmark programs: timing with warm-up and medians,
 * a STREAM-like read bandwidth probe, list parsing. */
#ifndef LOOM_BENCH_UTIL_H
#define LOOM_BENCH_UTIL_H

#include <stddef.h>

#include "base/threadpool.h"

/* Median of n doubles (sorts a copy). */
double bench_median(const double *v, int n);
/* Runs fn(arg) warmup times, then reps times; returns the median seconds per call. */
double bench_time(void (*fn)(void *), void *arg, int warmup, int reps);
/* As bench_time, but the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID):
 * on a loaded machine it leaves out the time the thread was preempted (cache
 * and memory contention remain). For one-thread rows. */
double bench_time_cpu(void (*fn)(void *), void *arg, int warmup, int reps);
/* Two calls compared in one process: fa and fb alternately, each round A B B A
 * (so a drift of the host's speed within a round weighs on both alike), after
 * warmup calls of each. ta, tb: the medians of each one's mean time per round;
 * ratio: the median of the rounds' tb / ta. cpu: the calling thread's CPU time
 * (one-thread rows on a loaded machine), else wall clock. */
void bench_time_ab(void (*fa)(void *), void *a, void (*fb)(void *), void *b, int warmup, int reps,
                   int cpu, double *ta, double *tb, double *ratio);
/* Read bandwidth in GB/s: nth threads of pool sum disjoint parts of a bytes-sized
 * buffer (larger than the caches); median of reps. */
double bench_read_bandwidth(loom_pool *pool, size_t bytes, int reps);
/* The same probe kept for repeated use, so a benchmark can measure the
 * bandwidth right next to each of its own samples (the machine's bandwidth
 * drifts by tens of percent over minutes on a shared host). NULL: no memory. */
typedef struct bench_probe bench_probe;
bench_probe *bench_probe_new(size_t bytes);
/* One pass over the buffer with every thread of pool (NULL: this thread); GB/s. */
double bench_probe_gbs(bench_probe *p, loom_pool *pool);
void bench_probe_free(bench_probe *p);
/* The line every benchmark's output starts with after its title: the CPU's vendor,
 * family, model and brand string, so that a results table says which machine it
 * came from (a cloud VM may land on a different CPU generation from one session
 * to the next), e.g. "cpu AuthenticAMD family 25 model 17 (AMD EPYC)". */
void bench_print_cpu(void);
/* 64-byte aligned memory (loom_alloc_aligned; free with loom_free_aligned) of
 * bytes (64 when 0), or a message naming prog and exit(1). */
void *bench_alloc(size_t bytes, const char *prog);
/* Parses "1,2,4" into out (max n entries); returns the count or -1. */
int bench_parse_ints(const char *s, int *out, int n);

#endif
