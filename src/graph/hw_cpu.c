/*
 * `auto` hardware values for the running CPU: a short FMA loop for the peak,
 * a STREAM-like parallel read for the bandwidth, cpuid for the caches.
 * Measurements, not datasheet numbers: on a loaded machine they come out low.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "base/timer.h"
#include "graph/hw.h"

#if defined(__x86_64__)
#include <immintrin.h>

/* 12 independent accumulators cover FMA latency x ports on current cores. */
__attribute__((target("avx512f"))) static float fma_loop_avx512(long iters) {
    __m512 acc[12], a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 12; i++) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float fma_loop_avx2(long iters) {
    __m256 acc[12], a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 12; i++) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    __m256 s = acc[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, acc[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}
#endif

static volatile float sink;

/* f32 FLOP/s of one core: best of 3 runs of ~4 ms. */
static double core_flops(void) {
    const loom_cpu_features *f = loom_cpu_get();
    const long iters = 200000;
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        double lanes = 1.0;
        uint64_t t0 = loom_time_ns();
#if defined(__x86_64__)
        if (f->avx512f) {
            sink = fma_loop_avx512(iters);
            lanes = 16.0;
        } else if (f->avx2 && f->fma) {
            sink = fma_loop_avx2(iters);
            lanes = 8.0;
        } else
#endif
        {
            float acc[12];
            for (int i = 0; i < 12; i++) acc[i] = (float)i;
            for (long it = 0; it < iters; it++)
                for (int i = 0; i < 12; i++) acc[i] = acc[i] * 0.999999f + 1e-7f;
            sink = acc[0] + acc[11];
        }
        double s = (double)(loom_time_ns() - t0) * 1e-9;
        double fl = 2.0 * 12.0 * lanes * (double)iters / (s > 0 ? s : 1e-9);
        if (fl > best) best = fl;
    }
    return best;
}

typedef struct read_ctx {
    const double *buf;
    size_t n;
    double sums[64];
} read_ctx;

static void read_worker(int ith, int nth, void *arg) {
    read_ctx *c = arg;
    size_t lo = c->n * (size_t)ith / (size_t)nth, hi = c->n * (size_t)(ith + 1) / (size_t)nth;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = lo;
    for (; i + 4 <= hi; i += 4) {
        s0 += c->buf[i];
        s1 += c->buf[i + 1];
        s2 += c->buf[i + 2];
        s3 += c->buf[i + 3];
    }
    for (; i < hi; i++) s0 += c->buf[i];
    if (ith < 64) c->sums[ith] = s0 + s1 + s2 + s3;
}

/* Read bandwidth with every core: best of 3 passes over 128 MiB. */
static loom_status read_bandwidth(int threads, double *out) {
    const size_t bytes = (size_t)128 << 20;
    double *buf = loom_alloc_aligned(bytes, 64);
    LOOM_RETURN_IF(!buf, LOOM_ERR_NOMEM, "hw auto: cannot allocate %zu bytes for the "
                   "bandwidth measurement", bytes);
    size_t n = bytes / sizeof *buf;
    for (size_t i = 0; i < n; i++) buf[i] = (double)(i & 7);
    loom_pool *pool;
    loom_status s = loom_pool_init(&pool, threads > 64 ? 64 : threads);
    if (s != LOOM_OK) {
        loom_free_aligned(buf);
        return s;
    }
    read_ctx c = {.buf = buf, .n = n};
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        uint64_t t0 = loom_time_ns();
        loom_pool_run(pool, read_worker, &c);
        double sec = (double)(loom_time_ns() - t0) * 1e-9;
        double bw = (double)bytes / (sec > 0 ? sec : 1e-9);
        if (bw > best) best = bw;
    }
    sink = (float)c.sums[0];
    loom_pool_free(pool);
    loom_free_aligned(buf);
    *out = best;
    return LOOM_OK;
}

loom_status loom_hw_measure_cpu(loom_hw_profile *p) {
    const loom_cpu_features *f = loom_cpu_get();
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (p->cores <= 0) p->cores = ncpu > 0 ? (int)ncpu : 1;
    if (p->l1_bytes <= 0) p->l1_bytes = f->l1d_bytes;
    if (p->l2_bytes <= 0) p->l2_bytes = f->l2_bytes;
    if (p->l3_bytes <= 0) p->l3_bytes = f->l3_bytes;
    double need_peak = p->vector_flops <= 0;
    for (int i = 0; i < LOOM_HW_PREC_COUNT; i++) need_peak = need_peak || p->peak_flops[i] <= 0;
    if (need_peak) {
        double f32 = core_flops() * p->cores;
        if (p->vector_flops <= 0) p->vector_flops = f32;
        if (p->peak_flops[LOOM_HW_F32] <= 0) p->peak_flops[LOOM_HW_F32] = f32;
        /* no f16 arithmetic on these cores: f16 weights are widened to f32 */
        if (p->peak_flops[LOOM_HW_F16] <= 0) p->peak_flops[LOOM_HW_F16] = f32;
        /* vdpbf16ps: 2 products per f32 lane; vpdpbusd: 4 */
        if (p->peak_flops[LOOM_HW_BF16] <= 0) p->peak_flops[LOOM_HW_BF16] = f->avx512_bf16 ? 2 * f32 : f32;
        if (p->peak_flops[LOOM_HW_INT8] <= 0) p->peak_flops[LOOM_HW_INT8] = f->avx512_vnni ? 4 * f32 : f32;
    }
    if (p->bandwidth <= 0) LOOM_TRY(read_bandwidth(p->cores, &p->bandwidth));
    if (!p->description[0])
        snprintf(p->description, sizeof p->description, "this CPU (%d cores, measured)", p->cores);
    return LOOM_OK;
}
