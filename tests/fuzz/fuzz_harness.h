/* The harness shared by fuzz_attention's parts (fuzz_attention.c: the attention
 * ops; fuzz_fused_ops.c: the cache write, the row ops, the FFN, QKV+RoPE): the
 * input reader, tensors that are each their own heap block, snapshots of every
 * buffer, and check_run, which holds a call to the properties all ops share. */
#ifndef LOOM_FUZZ_HARNESS_H
#define LOOM_FUZZ_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/threadpool.h"
#include "fused/attention.h"
#include "fused/fused.h"

/* A property of the op under test: a failure stops the fuzzer with the input. */
#define FUZZ_CHECK(ok)                    \
    do {                                  \
        if (!(ok)) __builtin_trap();      \
    } while (0)

/* ------------------------------------------------------------ input bytes */

/* wild: 0 for inputs whose every choice is valid (the call must run), else the
 * odds (1 in wild) that each choice takes an invalid value. */
typedef struct { const uint8_t *p; size_t n, i; uint64_t rng; unsigned wild; } reader;

static inline float rnd(reader *r) { /* deterministic values in [-2, 2) */
    r->rng = r->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((r->rng >> 40) & 0xFFFF) / 16384.0f - 2.0f;
}

/* The next input byte; past the input's end, bytes of the generator seeded by
 * it (libFuzzer starts with inputs of a few bytes and lengthens them slowly). */
static inline unsigned rd(reader *r) {
    if (r->i < r->n) return r->p[r->i++];
    (void)rnd(r);
    return (unsigned)(r->rng >> 32) & 0xFFu;
}
static inline unsigned pick(reader *r, unsigned n) { return rd(r) % n; }
static inline int bad(reader *r) { return r->wild && pick(r, r->wild) == 0; }

/* ------------------------------------------------------------ tensors */

#define MAX_T 24
typedef struct {
    loom_tensor t[MAX_T];
    void *buf[MAX_T];
    size_t bytes[MAX_T];
    int out[MAX_T]; /* written by the op */
    int n;
} arena;
typedef struct { void *copy[MAX_T]; } snapshot;

size_t span_elems(const loom_tensor *t);
/* A tensor of the given shape; the row dim (ndim - 2) padded by pad elements
 * when pad > 0. Data: finite values (i8: -127..127, i32: zeros for the caller). */
loom_tensor *mk(arena *a, reader *r, loom_dtype dt, int ndim, const int64_t *shape, int pad, int is_out);
void arena_free(arena *a);
/* Copies of every buffer (before a call, or after the first run). */
void snap(const arena *a, snapshot *s);
/* Buffers unchanged since s: all of them (which = 0), the inputs (1), the outputs (2). */
int same(const arena *a, const snapshot *s, int which);
/* The elements of output buffer i that are not the tensor's (row padding) unchanged since s. */
int gaps_same(const arena *a, int i, const snapshot *s);
void snap_free(const arena *a, snapshot *s);
/* Every element of an f32/f16/bf16 output is finite (-inf allowed where allow_ninf). */
int finite_out(const loom_tensor *t, int allow_ninf);
/* DESIGN.md's tolerance of a dtype (an i8 cache counts as f32), and element
 * off of t's layout read from base in t's dtype (f32, f16, bf16) as a double. */
double dtype_tol(loom_dtype t);
double elem_at(const loom_tensor *t, const void *base, int64_t off);

/* ------------------------------------------------------------ choices */

loom_dtype pick_fdt(reader *r);  /* f32/f16/bf16; invalid: i8 or i32 */
int64_t pick_d(reader *r);       /* 1..256; invalid: 257 */
/* The shape of a [B, S, N, D] sequence or cache in a layout (TND: [B*S, N, D]); returns ndim. */
int shape_of(loom_attn_layout l, int64_t B, int64_t S, int64_t N, int64_t D, int64_t *sh);

/* ------------------------------------------------------------ runs */

typedef loom_status (*run_fn)(void *ctx, loom_pool *pool);

/* The ops, as the first choice of an input picks them. */
enum { OP_PREFILL, OP_DECODE, OP_FIA, OP_KV_WRITE, OP_ADD_RMS_NORM, OP_SWIGLU, OP_FFN, OP_QKV_ROPE, OP_MOE, OP_COUNT };

/* Calls that ran (LOOM_OK) and that were refused, per op; printed at exit when
 * LOOM_FUZZ_STATS is set, to see how deep the inputs reach. */
extern long n_ok[OP_COUNT], n_err[OP_COUNT];
extern long n_paged_prefill; /* fused_infer_attention_score calls that ran the prefill kernel on a paged cache */
extern int cur_op;
extern unsigned cur_wild; /* the input's reader.wild: 0 = every choice valid */
void print_stats(void);
/* Counts a call's status; with LOOM_FUZZ_DEBUG set, prints a refusal's message. */
void count_status(loom_status s);

/* A pool of two threads, made once (NULL if it cannot be). */
loom_pool *pool2(void);
/* The call on one thread, then on two; the properties of fuzz_attention.c's comment. */
void check_run(arena *a, run_fn fn, void *ctx, loom_tensor *const *outs, int n_outs);

/* fuzz_fused_ops.c */
void fuzz_kv_write(reader *r);
void fuzz_fused(reader *r, int op); /* OP_ADD_RMS_NORM, OP_SWIGLU or OP_FFN */
void fuzz_moe(reader *r);           /* the four MoE ops in order */
void fuzz_qkv_rope(reader *r);

#endif
