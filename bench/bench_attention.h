/* What the parts of bench_attention share: the shapes, the options, the cache
 * variants of --caches and the buffer helpers (bench_attention.c), and the
 * chunked-prefill set (bench_attention_chunked.c). Benchmark-only. */
#ifndef LOOM_BENCH_ATTENTION_H
#define LOOM_BENCH_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "base/rng.h"
#include "loom.h"

#define HEADS 32     /* query heads (Llama2-7B) */
#define HEAD_DIM 128

typedef struct { int threads[8], n_threads, reps; int64_t bq, bkv; } opts;

/* A cache variant of --caches: CV_HP is inner_precise 1 (i8hp, bf16hp), CV_TOKEN
 * an i8 cache with per-token K and V scales (i8tok: [1, N_kv, L], antiquant
 * mode 1; the others per channel). */
enum { CV_HP = 1, CV_TOKEN = 2 };
/* The --caches name of dtype ct in variant var. */
const char *cache_name(loom_dtype ct, int var);

/* 64-byte aligned, or exits with a message. */
void *xalloc(size_t bytes);
size_t esize(loom_dtype t);
/* f32 values (already representable in t) stored as t. */
void store_as(loom_dtype t, void *dst, const float *src, int64_t n);
/* Random values in [-1, 1) rounded to dtype t (so f32 copies hold the same values). */
void fill(float *x, int64_t n, loom_dtype t, loom_rng *rng);
/* Median seconds per call of fn: wall clock, or with --cpu-time and one thread the thread's CPU time. */
double time_it(void (*fn)(void *), void *arg, int nt, int warmup, int reps);

/* --sets chunked (bench_attention_chunked.c): the last C queries of a context of L keys, GQA
 * HEADS / Nkv, over a contiguous cache and a paged copy in blocks of bs keys; one table row per
 * thread count of o. Exits 1 if a call fails or the two outputs differ. */
void bench_chunked(const opts *o, loom_dtype ct, int var, int64_t L, int64_t C, int64_t Nkv, int64_t bs);

#endif
