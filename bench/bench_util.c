#include "bench_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/timer.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_median(const double *v, int n) {
    double *c = malloc((size_t)n * sizeof *c);
    if (!c) return 0.0;
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

static double thread_cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Median seconds per call of fn by the clock now(), after warmup calls. */
static double time_with(double (*now)(void), void (*fn)(void *), void *arg, int warmup, int reps) {
    for (int i = 0; i < warmup; i++) fn(arg);
    double t[64];
    if (reps > 64) reps = 64;
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        fn(arg);
        t[i] = now() - t0;
    }
    return bench_median(t, reps);
}

double bench_time(void (*fn)(void *), void *arg, int warmup, int reps) {
    return time_with(loom_time_s, fn, arg, warmup, reps);
}

double bench_time_cpu(void (*fn)(void *), void *arg, int warmup, int reps) {
    return time_with(thread_cpu_s, fn, arg, warmup, reps);
}

void bench_time_ab(void (*fa)(void *), void *a, void (*fb)(void *), void *b, int warmup, int reps,
                   int cpu, double *ta, double *tb, double *ratio) {
    double (*now)(void) = cpu ? thread_cpu_s : loom_time_s;
    for (int i = 0; i < warmup; i++) fa(a), fb(b);
    double va[64], vb[64], vr[64];
    if (reps > 64) reps = 64;
    if (reps < 1) reps = 1;
    for (int i = 0; i < reps; i++) {
        double t[4];
        for (int k = 0; k < 4; k++) { /* A B B A */
            int is_a = k == 0 || k == 3;
            double t0 = now();
            if (is_a) fa(a);
            else fb(b);
            t[k] = now() - t0;
        }
        va[i] = 0.5 * (t[0] + t[3]);
        vb[i] = 0.5 * (t[1] + t[2]);
        vr[i] = vb[i] / va[i];
    }
    *ta = bench_median(va, reps);
    *tb = bench_median(vb, reps);
    *ratio = bench_median(vr, reps);
}

typedef struct { const float *buf; size_t n; double sums[64]; } read_ctx;

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static double sum_avx512(const float *p, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
    }
    double s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < n; i++) s += p[i];
    return s;
}
#endif

static double sum_plain(const float *p, size_t n) {
    float a[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) a[j] += p[i + j];
    double s = 0;
    for (int j = 0; j < 16; j++) s += a[j];
    for (; i < n; i++) s += p[i];
    return s;
}

static void read_worker(int ith, int nth, void *arg) {
    read_ctx *c = arg;
    size_t per = (c->n / (size_t)nth) & ~(size_t)63;
    const float *p = c->buf + per * (size_t)ith;
    size_t n = ith == nth - 1 ? c->n - per * (size_t)ith : per;
#if defined(__x86_64__)
    if (loom_cpu_get()->avx512f) {
        c->sums[ith] = sum_avx512(p, n);
        return;
    }
#endif
    c->sums[ith] = sum_plain(p, n);
}

typedef struct { loom_pool *pool; read_ctx *ctx; } read_job;

static void read_once(void *arg) {
    read_job *j = arg;
    if (j->pool) loom_pool_run(j->pool, read_worker, j->ctx);
    else read_worker(0, 1, j->ctx);
}

struct bench_probe { read_ctx c; };

bench_probe *bench_probe_new(size_t bytes) {
    bench_probe *p = calloc(1, sizeof *p);
    size_t n = bytes / sizeof(float);
    float *buf = p ? loom_alloc_aligned(n * sizeof(float), 64) : NULL;
    if (!buf) {
        free(p);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 1023);
    p->c.buf = buf, p->c.n = n;
    return p;
}

double bench_probe_gbs(bench_probe *p, loom_pool *pool) {
    read_job j = {pool, &p->c};
    double t0 = loom_time_s();
    read_once(&j);
    double t = loom_time_s() - t0;
    return t > 0.0 ? (double)(p->c.n * sizeof(float)) / t / 1e9 : 0.0;
}

void bench_probe_free(bench_probe *p) {
    if (!p) return;
    loom_free_aligned((void *)p->c.buf);
    free(p);
}

double bench_read_bandwidth(loom_pool *pool, size_t bytes, int reps) {
    bench_probe *p = bench_probe_new(bytes);
    if (!p) return 0.0;
    read_job j = {pool, &p->c};
    double t = bench_time(read_once, &j, 1, reps);
    double gbs = (double)(p->c.n * sizeof(float)) / t / 1e9;
    bench_probe_free(p);
    return gbs;
}

int bench_parse_ints(const char *s, int *out, int n) {
    int k = 0;
    while (*s && k < n) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0 || v > 1024) return -1;
        out[k++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return k;
}

void bench_print_cpu(void) {
    const loom_cpu_features *f = loom_cpu_get();
    printf("cpu %s family %d model %d (%s)\n", f->vendor[0] ? f->vendor : "unknown", f->family, f->model,
           f->brand[0] ? f->brand : "no brand string");
}

void *bench_alloc(size_t bytes, const char *prog) {
    void *p = loom_alloc_aligned(bytes ? bytes : 64, 64);
    if (!p) {
        fprintf(stderr, "%s: cannot allocate %zu bytes\n", prog, bytes);
        exit(1);
    }
    return p;
}
