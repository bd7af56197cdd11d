/* Helpers of the fused graph op tests (test_qkv_rope_op.c, test_norm_fusion.c):
 * random operands, and running every thread and phase of an op's kernel with
 * the scratch it asks for, as the executor does. */
#ifndef LOOM_TEST_GRAPH_OP_COMMON_H
#define LOOM_TEST_GRAPH_OP_COMMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "loom.h"
#include "ops/ops.h"
#include "ops/quant.h"

static float rnd(loom_rng *r) { return 2.0f * loom_rng_uniform(r) - 1.0f; }

/* Weights [rows, hid] of wt, filled from r with U(-scale, scale) (rounded to wt). */
static void *make_w(loom_dtype wt, int64_t rows, int64_t hid, loom_rng *r, float scale, loom_tensor *t) {
    size_t rb = loom_dtype_row_bytes(wt, hid);
    char *w = malloc((size_t)rows * rb);
    float *row = malloc(sizeof(float) * (size_t)hid);
    for (int64_t n = 0; n < rows; n++) {
        for (int64_t k = 0; k < hid; k++) row[k] = rnd(r) * scale;
        if (wt == LOOM_F32) memcpy(w + (size_t)n * rb, row, rb);
        else if (wt == LOOM_F16 || wt == LOOM_BF16)
            for (int64_t k = 0; k < hid; k++)
                ((uint16_t *)(w + (size_t)n * rb))[k] = wt == LOOM_F16 ? loom_f32_to_f16(row[k]) : loom_f32_to_bf16(row[k]);
        else loom_quantize_row(wt, row, w + (size_t)n * rb, hid);
    }
    free(row);
    loom_tensor_init(t, wt, 2, (const int64_t[2]){rows, hid}, w);
    return w;
}

/* Runs every thread of kernel fn (each with its own scratch, phases in order,
 * the launch's shared buffer and arrival counter as the executor gives them;
 * a.invariant as the caller set it). */
static loom_status run_threads(loom_op op, loom_kernel_fn fn, loom_kernel_args a, int nth) {
    const loom_op_info *info = loom_op_get(op);
    size_t bytes = info->scratch_size ? info->scratch_size(a.src, a.n_src, a.dst, a.attrs) : 0;
    size_t shared = info->shared_size ? info->shared_size(a.src, a.n_src, a.dst, a.attrs) : 0;
    int phases = loom_op_phases(info, a.src, a.n_src, a.attrs, nth, a.invariant);
    _Atomic int arrive = 0;
    a.shared = shared ? loom_alloc_aligned(shared, LOOM_ALIGN) : NULL;
    if (a.shared) memset(a.shared, 0xA5, shared);
    a.shared_bytes = shared, a.arrive = &arrive;
    loom_status st = LOOM_OK;
    for (int p = 0; p < phases && st == LOOM_OK; p++)
        for (int i = 0; i < nth; i++) {
            void *s = loom_alloc_aligned(bytes + 64, LOOM_ALIGN);
            memset(s, 0xA5, bytes + 64);
            a.ith = i, a.nth = nth, a.scratch = s, a.scratch_bytes = bytes, a.phase = p;
            loom_status t = fn(&a);
            loom_free_aligned(s);
            if (t != LOOM_OK && st == LOOM_OK) st = t; /* the others still run: one pass counts them in */
        }
    loom_free_aligned(a.shared);
    return st;
}

/* Runs nth threads of kernel fn at once (pthreads, not one after another)
 * over one launch's shared buffer and arrival counter, twice; the counter
 * must be back at 0 after each launch (`*counter_bad` counts the launches
 * where it was not). One phase only. */
typedef struct { loom_kernel_fn fn; loom_kernel_args a; loom_status st; } gop_thr_arg;

static inline void *gop_thr_main(void *p) {
    gop_thr_arg *t = p;
    t->st = t->fn(&t->a);
    return NULL;
}

static inline loom_status run_concurrent_op(loom_op op, loom_kernel_fn fn, loom_kernel_args a, int nth, int *counter_bad) {
    const loom_op_info *info = loom_op_get(op);
    size_t bytes = info->scratch_size ? info->scratch_size(a.src, a.n_src, a.dst, a.attrs) : 0;
    size_t shared = info->shared_size ? info->shared_size(a.src, a.n_src, a.dst, a.attrs) : 0;
    _Atomic int arrive = 0;
    loom_status st = LOOM_OK;
    a.shared = shared ? loom_alloc_aligned(shared, LOOM_ALIGN) : NULL, a.shared_bytes = shared;
    for (int launch = 0; launch < 2 && st == LOOM_OK; launch++) {
        pthread_t th[4];
        gop_thr_arg ta[4];
        for (int i = 0; i < nth && i < 4; i++) {
            ta[i] = (gop_thr_arg){fn, a, LOOM_OK};
            ta[i].a.ith = i, ta[i].a.nth = nth, ta[i].a.arrive = &arrive;
            ta[i].a.scratch = loom_alloc_aligned(bytes + 64, LOOM_ALIGN), ta[i].a.scratch_bytes = bytes;
            pthread_create(&th[i], NULL, gop_thr_main, &ta[i]);
        }
        for (int i = 0; i < nth && i < 4; i++) {
            pthread_join(th[i], NULL);
            loom_free_aligned(ta[i].a.scratch);
            if (ta[i].st != LOOM_OK) st = ta[i].st;
        }
        *counter_bad += atomic_load(&arrive) != 0;
    }
    loom_free_aligned(a.shared);
    return st;
}

static loom_status run_op(loom_op op, loom_isa isa, const loom_tensor *const *src, int n_src,
                          const void *attrs, loom_tensor *dst, int nth) {
    loom_kernel_args a = {.n_src = n_src, .dst = dst, .attrs = attrs};
    for (int i = 0; i < n_src; i++) a.src[i] = src[i];
    return run_threads(op, loom_op_kernel(op, isa), a, nth);
}

#endif
