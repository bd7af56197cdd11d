/*
 * The machine's instruction ceilings that loom's kernels are measured
 * against: the throughput of the 512-bit int8 dot product (vpdpbusd, AVX512
 * VNNI: 64 multiply-adds, 128 int8 operations) and of the f32 FMA (vfmadd,
 * 16 lanes, 32 flops), on 1..N threads at once (each on its own core when
 * the CPUs allow). On a CPU without AVX512-VNNI, the AVX2 level's: the int8
 * product loom's AVX2 kernels use (vpmaddubsw + vpmaddwd + vpaddd: 32
 * multiply-adds, 64 int8 operations) and the 256-bit FMA (8 lanes, 16
 * flops). Twelve independent accumulators per thread hide the latency, so
 * the figure is the issue rate of the execution ports.
 *
 *   bench_peak [--threads 1,2] [--reps 5] [--ms 200]
 *
 * A kernel's share of this ceiling is what its bound arguments use (e.g.
 * bench/results/batch.md: the packed int8 GEMM at 16 rows against the
 * vpdpbusd rate). Medians of --reps runs of about --ms milliseconds each.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "base/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TGT512 __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define TGT256 __attribute__((target("avx2,fma")))

/* name(n): n rounds of 12 independent acc = OP(acc, w, x) on T accumulators
 * (acc i starting at INIT); their sum returned, so nothing is optimised away. */
#define ISSUE_LOOP(name, TGT, T, INIT, W, X, OP, SUM)                             \
    TGT static int name(long n) {                                                  \
        T a[12];                                                                   \
        for (int i = 0; i < 12; i++) a[i] = INIT;                                  \
        T w = W, x = X;                                                            \
        for (long k = 0; k < n; k++) {                                             \
            _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) a[i] = OP(a[i], w, x); \
            __asm__ volatile("" : "+v"(w), "+v"(x));                               \
        }                                                                          \
        double s = 0;                                                              \
        for (int i = 0; i < 12; i++) s += (double)SUM(a[i]);                       \
        return (int)s;                                                             \
    }

/* AVX2: the int8 product of loom's AVX2 kernels (u8 x s8 pairs to s16, pairs
 * of those to s32, accumulated), and the 8 lanes' sums. The signed operand is
 * the accumulator's own bytes: with x the product would not depend on a and
 * the compiler would make it once for all twelve accumulators. */
TGT256 static inline __m256i dot_avx2(__m256i a, __m256i w, __m256i x) {
    (void)x;
    return _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1)));
}
TGT256 static inline int sum8_epi32(__m256i v) {
    int l[8];
    _mm256_storeu_si256((__m256i *)l, v);
    return l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}
TGT256 static inline float sum8_ps(__m256 v) {
    float l[8];
    _mm256_storeu_ps(l, v);
    return l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}

ISSUE_LOOP(dpbusd_loop, TGT512, __m512i, _mm512_set1_epi32(i), _mm512_set1_epi8(1), _mm512_set1_epi8(2),
           _mm512_dpbusd_epi32, _mm512_reduce_add_epi32)
ISSUE_LOOP(fma_loop, TGT512, __m512, _mm512_set1_ps((float)i), _mm512_set1_ps(0.999f), _mm512_set1_ps(0.001f),
           _mm512_fmadd_ps, _mm512_reduce_add_ps)
ISSUE_LOOP(dot256_loop, TGT256, __m256i, _mm256_set1_epi32(i), _mm256_set1_epi8(1), _mm256_set1_epi8(2),
           dot_avx2, sum8_epi32)
ISSUE_LOOP(fma256_loop, TGT256, __m256, _mm256_set1_ps((float)i), _mm256_set1_ps(0.999f), _mm256_set1_ps(0.001f),
           _mm256_fmadd_ps, sum8_ps)
#endif

/* What a job issues: int8 products or FMAs, 512- or 256-bit (the AVX2 level). */
typedef struct job {
    int fma, avx2;
    long n;
    pthread_barrier_t *start;
    double seconds;
    int sink;
} job;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *run(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->start);
    double t0 = now();
#if defined(__x86_64__)
    if (j->avx2) j->sink = j->fma ? fma256_loop(j->n) : dot256_loop(j->n);
    else j->sink = j->fma ? fma_loop(j->n) : dpbusd_loop(j->n);
#endif
    j->seconds = now() - t0;
    return NULL;
}

/* Per-thread operations per second of nth threads running together: the
 * slowest thread's rate (they share the machine). */
static double ops_per_round(int fma, int avx2) { return (fma ? 12.0 * 32.0 : 12.0 * 128.0) / (avx2 ? 2 : 1); }

static double rate(int fma, int avx2, int nth, long n) {
    pthread_t th[64];
    job jobs[64];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)nth);
    for (int t = 0; t < nth; t++) {
        jobs[t] = (job){.fma = fma, .avx2 = avx2, .n = n, .start = &start};
        if (pthread_create(&th[t], NULL, run, &jobs[t]) != 0) {
            fprintf(stderr, "bench_peak: cannot start thread %d\n", t);
            exit(1);
        }
    }
    double worst = 0;
    for (int t = 0; t < nth; t++) {
        pthread_join(th[t], NULL);
        if (jobs[t].seconds > worst) worst = jobs[t].seconds;
    }
    pthread_barrier_destroy(&start);
    return (double)n * ops_per_round(fma, avx2) / worst;
}

int main(int argc, char **argv) {
    int threads[16] = {1, 2}, nthreads = 2, reps = 5, ms = 200;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            nthreads = bench_parse_ints(argv[++i], threads, 16);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--ms") && i + 1 < argc) {
            ms = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_peak [--threads 1,2] [--reps 5] [--ms 200]\n");
            return 2;
        }
    }
    if (nthreads < 1 || reps < 1 || reps > 99 || ms < 1) {
        fprintf(stderr, "bench_peak: bad --threads, --reps (1..99) or --ms\n");
        return 2;
    }
    for (int i = 0; i < nthreads; i++)
        if (threads[i] < 1 || threads[i] > 64) {
            fprintf(stderr, "bench_peak: threads must be 1..64, got %d\n", threads[i]);
            return 2;
        }
    printf("instruction ceilings (12 independent accumulators per thread; median of %d)\n", reps);
    bench_print_cpu();
    const loom_cpu_features *c = loom_cpu_get();
    const int avx2 = !(c->avx512f && c->avx512_vnni);
    if (avx2 && !(c->avx2 && c->fma)) {
        printf("this CPU has neither AVX512-VNNI nor AVX2 with FMA: nothing to measure\n");
        return 0;
    }
    if (avx2)
        printf("\nno AVX512-VNNI: the AVX2 level\n\n| threads | vpmaddubsw+vpmaddwd int8 GOP/s per thread | "
               "vfmadd ymm f32 GFLOP/s per thread | int8 / f32 |\n");
    else
        printf("\n| threads | vpdpbusd int8 GOP/s per thread | vfmadd f32 GFLOP/s per thread | int8 / f32 |\n");
    printf("|---:|---:|---:|---:|\n");
    for (int i = 0; i < nthreads; i++) {
        double v[2][99];
        for (int fma = 0; fma < 2; fma++) {
            /* rounds for about ms milliseconds at a first estimate's rate */
            double r0 = rate(fma, avx2, 1, 100000);
            long n = (long)(r0 * (double)ms * 1e-3 / ops_per_round(fma, avx2));
            if (n < 1000) n = 1000;
            for (int r = 0; r < reps; r++) v[fma][r] = rate(fma, avx2, threads[i], n);
        }
        double d = bench_median(v[0], reps) * 1e-9, f = bench_median(v[1], reps) * 1e-9;
        printf("| %d | %.1f | %.1f | %.2f |\n", threads[i], d, f, d / f);
    }
    return 0;
}
