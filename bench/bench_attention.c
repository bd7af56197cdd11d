/*
 * bench_attention: the fused attention kernels against the unfused path built
 * from loom's optimised primitive ops, in the same process.
 *
 * Prefill (Llama2-7B shape: B = 1, N = 32, D = 128, causal; MHA and GQA 32/8):
 *   fused    loom_flash_attention_score (sparse_mode 3)
 *   unfused  per head: matmul family S = Q.K^T (full S x S) -> softmax op
 *            (vectorised, causal, scale 1/sqrt(D)) -> matmul family O = P.V,
 *            all threads on each step (barriers between steps). V is given to
 *            the second GEMM as V^T [D, S] (the matmul family's W layout),
 *            transposed once outside the timed region, as a cache storing V^T
 *            would; K is used in place.
 *   dtype f32hp: f32 inputs, the fused kernel with inner_precise 1 (bf16
 *            products, f32 accumulation), the unfused path in f32 as for f32.
 *   columns: median ms, GFLOP/s over the visible (causal) pairs, 4.N.D.pairs,
 *   for both (so the GFLOP/s ratio is the speed ratio), extra memory each path
 *   allocates beyond q, k, v and out, and max |fused - unfused|.
 * Decode (N = 32, N_kv = 8, D = 128 (--dec-shape N_KV,D[,N]: other kv heads, head
 * dims and q heads, N a multiple of N_KV), q_len 1, contiguous cache [B, N_kv, S, D] (BNSD, default) or
 * [B, S, N_kv, D] (BSND, --layout)):
 *   (caches i8hp, bf16hp: inner_precise 1 — a bf16 K's Q.K^T with q rounded
 *   to bf16; an i8 cache computes as with 0; i8tok: an i8 cache with
 *   per-token K and V scales, the others per channel)
 *   loom_incre_flash_attention over caches rotated through copies totalling
 *   >= 8x L3 and 512 MiB (each call reads K/V from DRAM, as one layer of a
 *   real decode step does), all in one block on 2 MiB pages as the engine's
 *   KV cache is (separate blocks put short contexts on 4 KiB pages); effective GB/s = K+V bytes / time. Each sample
 *   (a batch of calls over >= 128 MiB of K/V) follows a read-bandwidth probe
 *   of its own (a 256 MiB sum on the same threads): the host's bandwidth
 *   drifts by tens of percent over minutes, so "% of read BW" is the median of
 *   the per-sample ratios, and "read BW" the median probe. And the prefill kernel called
 *   with S_q = 1 on the same caches (f32/bf16 only), ratio prefill/decode time.
 *
 * Decode micro-kernels (--sets kernels; one thread, not in the default sets):
 *   the level's dec_dot, softmax_rows and dec_pv (the three steps of a decode
 *   tile) on the 4 query rows of a GQA 32/8 kv head, D = 128 (or --dec-shape's
 *   N / N_kv rows, at most 16, and head dim), over a 256-key
 *   cache that stays in L2, in the driver's tiles (attn_dec_tile: 32 keys; an
 *   i8 cache with four or more rows the level's dec_i8_tile); ns per key for
 *   each and their sum, and the K/V rate that sum allows ("compute-bound
 *   rate"): a kernel whose compute-bound rate is below 80% of the read
 *   bandwidth cannot reach 80% from DRAM on one core. softmax_rows is timed
 *   with a copy of the tile's scores in front (512 bytes per 32 keys).
 *
 * Chunked prefill (--sets chunked; not in the default sets): the last --chunk
 *   queries (default 512) of each --ctx context, GQA per --gqa, D = 128, causal,
 *   through fused_infer_attention_score over a contiguous BSND cache and a paged
 *   copy in blocks of each --paged size (default 16,128; shuffled table), the two
 *   alternating sample by sample; --caches gives the cache dtypes (i8: per-token
 *   scales, the engine's format; i8hp/bf16hp: inner_precise 1). Fails if the
 *   two outputs differ in any byte.
 *
 *   bench_attention [--threads 1,2] [--seqs 512,1024,2048,4096] [--dtypes f32,f32hp,bf16]
 *                   [--gqa 32,8] [--ctx 512,...,8192] [--caches f32,bf16,i8] (also f16, i8hp, bf16hp, i8tok)
 *                   [--sets prefill,decode,kernels,chunked] [--reps N] [--block BQ,BKV] [--layout BNSD|BSND]
 *                   [--paged BS[,BS...]] (decode: the first) [--chunk C]
 *                   [--dec-shape N_KV,D[,N]]
 *                   [--fused-only] [--cpu-time] [--hot] [--machine] [--ab VARIANT]
 * --machine also prints one '@prefill ...' / '@decode ...' line per row
 * (key=value pairs) for bench/peers/torch_sdpa.py. The program fails (status 1)
 * if the fused and unfused outputs differ beyond DESIGN.md's tolerance. --fused-only skips the
 * unfused path (tile-size sweeps); --cpu-time times 1-thread rows by the
 * thread's CPU time (loaded machines); --hot gives decode one copy of the
 * caches instead of rotating through DRAM-sized copies, so caches that fit
 * in L3 measure the kernel's compute time. --ab VARIANT (decode): each row's
 * samples alternate between the level's kernel table and a copy with one entry
 * changed (noprep: q prepared per tile, not per (batch, kv head); nohp:
 * inner_precise 1 computed as 0, i.e. bf16hp as bf16;
 * noi8xpf: i8 tiles without the other stream's prefetch;
 * i8tileN: i8 tiles of N keys (where the level's dec_i8_tile applies);
 * groupspanN: heads walked together with tiles spanning at most N bytes of
 * the cache (0: no bound; the level's dec_group_span); onehead: kv heads
 * walked one at a time where decode walks them together; none:
 * identical, the method's null test), both launched as
 * loom_incre_flash_attention launches them (whole units a thread, or split
 * and merge), and the row gives both medians: on a host
 * whose bandwidth drifts within seconds this resolves a few points, which
 * alternating whole runs of two builds does not.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "graph/ops_init.h"
#include "base/cpu.h"
#include "base/rng.h"
#include "base/timer.h"
#include "bench_util.h"
#include "fused/attention.h"
#include "fused/flash_attention_internal.h"
#include "ops/matmul/matmul.h"
#include "ops/ops.h"

#include "bench_attention.h"

#define MAX_COPIES 1024

static int machine_lines, fused_only, cpu_time;

/* bench_time, or with --cpu-time and one thread the thread's CPU time. */
double time_it(void (*fn)(void *), void *arg, int nt, int warmup, int reps) {
    return cpu_time && nt == 1 ? bench_time_cpu(fn, arg, warmup, reps) : bench_time(fn, arg, warmup, reps);
}

#define PROBE_BYTES ((size_t)256 << 20) /* the decode rows' read-bandwidth probe */

/* One pass of the probe on this thread (--cpu-time rows time it by CPU time). */
static void probe_once(void *p) { bench_probe_gbs(p, NULL); }

static loom_attn_layout dec_layout = LOOM_ATTN_BNSD; /* the cache layout of decode rows */
static int dec_nkv = 8, dec_d = HEAD_DIM, dec_n = HEADS; /* --dec-shape: kv heads, head dim, q heads of decode */
static int dec_hot; /* --hot: one copy of the caches (cache-resident when they fit: compute time) */
static int dec_paged; /* --paged BS: a paged cache of blocks of BS keys, in shuffled order (0: contiguous) */

void *xalloc(size_t bytes) {
    void *p = loom_alloc_aligned(bytes ? bytes : 64, 64);
    if (!p) {
        fprintf(stderr, "bench_attention: cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}

size_t esize(loom_dtype t) { return t == LOOM_F32 ? 4 : t == LOOM_I8 ? 1 : 2; }

/* f32 values (already representable in t) stored as t. */
void store_as(loom_dtype t, void *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (t == LOOM_F32) ((float *)dst)[i] = src[i];
        else if (t == LOOM_BF16) ((uint16_t *)dst)[i] = loom_f32_to_bf16(src[i]);
        else if (t == LOOM_F16) ((uint16_t *)dst)[i] = loom_f32_to_f16(src[i]);
        else ((int8_t *)dst)[i] = (int8_t)src[i];
    }
}

/* Random values in [-1, 1) rounded to dtype t (so f32 copies hold the same values). */
void fill(float *x, int64_t n, loom_dtype t, loom_rng *rng) {
    for (int64_t i = 0; i < n; i++) {
        float v = 2.0f * loom_rng_uniform(rng) - 1.0f;
        if (t == LOOM_BF16) v = loom_bf16_to_f32(loom_f32_to_bf16(v));
        x[i] = v;
    }
}

static int parse_dtype(const char *s, loom_dtype *t) {
    for (int d = 0; d < LOOM_DTYPE_COUNT; d++)
        if (strcmp(s, loom_dtype_name((loom_dtype)d)) == 0) return *t = (loom_dtype)d, 0;
    return -1;
}

/* ------------------------------------------------------------ prefill */

typedef struct pf_ctx {
    loom_pool *pool;
    int64_t S, N, Nkv, D;
    /* fused */
    loom_tensor tq, tk, tv, to;
    loom_flash_attention_params fp;
    /* unfused */
    const float *qf;        /* Q as f32 [S, N*D] */
    const void *kw, *vt;    /* K [S, Nkv*D] and V^T [Nkv][D][S] of dtype wt */
    loom_dtype wt;
    float *scores, *out_u;  /* [S, S], [S, N*D] */
    unsigned char *mm_scratch;
    size_t mm_per;
    loom_kernel_fn softmax;
    loom_tensor ts;
    loom_softmax_attrs sa;
    int failed;
} pf_ctx;

static void run_fused(void *arg) {
    pf_ctx *c = arg;
    loom_flash_attention_tensors t = {.query = &c->tq, .key = &c->tk, .value = &c->tv,
                                      .attention_out = &c->to};
    if (loom_flash_attention_score(&t, &c->fp, c->pool) != LOOM_OK) c->failed = 1;
}

static void qk_args(const pf_ctx *c, int64_t h, loom_matmul_args *a) {
    int64_t hk = h / (c->N / c->Nkv);
    *a = (loom_matmul_args){.x = c->qf + h * c->D, .ldx = c->N * c->D,
                            .w = (const char *)c->kw + (size_t)(hk * c->D) * esize(c->wt),
                            .ldw = c->Nkv * c->D, .wtype = c->wt, .y = c->scores, .ldy = c->S,
                            .M = c->S, .N = c->S, .K = c->D};
}

static void pv_args(const pf_ctx *c, int64_t h, loom_matmul_args *a) {
    int64_t hk = h / (c->N / c->Nkv);
    *a = (loom_matmul_args){.x = c->scores, .ldx = c->S,
                            .w = (const char *)c->vt + (size_t)(hk * c->D * c->S) * esize(c->wt),
                            .ldw = c->S, .wtype = c->wt, .y = c->out_u + h * c->D,
                            .ldy = c->N * c->D, .M = c->S, .N = c->D, .K = c->S};
}

static void unfused_worker(int ith, int nth, void *arg) {
    pf_ctx *c = arg;
    void *scratch = c->mm_scratch + c->mm_per * (size_t)ith;
    for (int64_t h = 0; h < c->N; h++) {
        loom_matmul_args a;
        qk_args(c, h, &a);
        if (loom_matmul_run(&a, loom_cpu_isa(), ith, nth, scratch) != LOOM_OK) c->failed = 1;
        loom_pool_barrier(c->pool);
        loom_kernel_args ka = {.src = {&c->ts}, .n_src = 1, .dst = &c->ts, .attrs = &c->sa,
                               .ith = ith, .nth = nth, .scratch = scratch};
        if (c->softmax(&ka) != LOOM_OK) c->failed = 1;
        loom_pool_barrier(c->pool);
        pv_args(c, h, &a);
        if (loom_matmul_run(&a, loom_cpu_isa(), ith, nth, scratch) != LOOM_OK) c->failed = 1;
        loom_pool_barrier(c->pool);
    }
}

static void run_unfused(void *arg) {
    pf_ctx *c = arg;
    loom_pool_run(c->pool, unfused_worker, c);
}


/* hp: the fused kernel runs with inner_precise 1 (f32 inputs, bf16 products);
 * the unfused path stays f32. */
static void bench_prefill(const opts *o, loom_dtype dt, int hp, int64_t S, int64_t Nkv) {
    const int64_t N = HEADS, D = HEAD_DIM, G = N / Nkv;
    loom_rng rng;
    loom_rng_init(&rng, 42, (uint64_t)(S * 64 + Nkv));
    float *q = xalloc((size_t)(S * N * D) * 4), *k = xalloc((size_t)(S * Nkv * D) * 4);
    float *v = xalloc((size_t)(S * Nkv * D) * 4);
    fill(q, S * N * D, dt, &rng);
    fill(k, S * Nkv * D, dt, &rng);
    fill(v, S * Nkv * D, dt, &rng);
    size_t es = esize(dt);
    void *qd = xalloc((size_t)(S * N * D) * es), *kd = xalloc((size_t)(S * Nkv * D) * es);
    void *vd = xalloc((size_t)(S * Nkv * D) * es), *vt = xalloc((size_t)(S * Nkv * D) * es);
    store_as(dt, qd, q, S * N * D);
    store_as(dt, kd, k, S * Nkv * D);
    store_as(dt, vd, v, S * Nkv * D);
    float *vtf = xalloc((size_t)(S * Nkv * D) * 4);
    for (int64_t hk = 0; hk < Nkv; hk++)
        for (int64_t d = 0; d < D; d++)
            for (int64_t s = 0; s < S; s++) vtf[(hk * D + d) * S + s] = v[s * Nkv * D + hk * D + d];
    store_as(dt, vt, vtf, S * Nkv * D);
    loom_free_aligned(vtf);
    float *out_f = xalloc((size_t)(S * N * D) * 4), *out_u = xalloc((size_t)(S * N * D) * 4);
    float *scores = xalloc((size_t)(S * S) * 4);

    pf_ctx c = {.S = S, .N = N, .Nkv = Nkv, .D = D, .qf = q, .kw = kd, .vt = vt, .wt = dt,
                .scores = scores, .out_u = out_u};
    int64_t qs[4] = {1, S, N, D}, ks[4] = {1, S, Nkv, D};
    loom_tensor_init(&c.tq, dt, 4, qs, qd);
    loom_tensor_init(&c.tk, dt, 4, ks, kd);
    loom_tensor_init(&c.tv, dt, 4, ks, vd);
    loom_tensor_init(&c.to, LOOM_F32, 4, qs, out_f);
    c.fp = loom_flash_attention_default_params();
    c.fp.sparse_mode = LOOM_SPARSE_RIGHT_DOWN_CAUSAL;
    c.fp.block_q = o->bq, c.fp.block_kv = o->bkv;
    c.fp.inner_precise = hp ? LOOM_ATTN_HIGH_PERFORMANCE : LOOM_ATTN_HIGH_PRECISION;
    int64_t ss[2] = {S, S};
    loom_tensor_init(&c.ts, LOOM_F32, 2, ss, scores);
    c.sa = (loom_softmax_attrs){.scale = 1.0f / sqrtf((float)D), .causal = 1, .pos_offset = 0};
    c.softmax = loom_op_kernel(LOOM_OP_SOFTMAX, loom_cpu_isa());
    loom_matmul_args a1, a2;
    qk_args(&c, 0, &a1);
    pv_args(&c, 0, &a2);
    size_t s1 = loom_matmul_scratch_size(&a1), s2 = loom_matmul_scratch_size(&a2);
    c.mm_per = ((s1 > s2 ? s1 : s2) + 63) & ~(size_t)63;
    size_t fused_scratch = 0;
    loom_flash_attention_tensors ft = {.query = &c.tq, .key = &c.tk, .value = &c.tv,
                                       .attention_out = &c.to};
    if (loom_flash_attention_score_scratch_size(&ft, &c.fp, &fused_scratch) != LOOM_OK) {
        fprintf(stderr, "bench_attention: %s\n", loom_last_error());
        exit(1);
    }
    (void)G;
    double pairs = (double)S * (double)(S + 1) / 2.0, flops = 4.0 * (double)N * (double)D * pairs;
    for (int ti = 0; ti < o->n_threads; ti++) {
        int nt = o->threads[ti];
        if (loom_pool_init(&c.pool, nt) != LOOM_OK) exit(1);
        c.mm_scratch = xalloc(c.mm_per * (size_t)nt);
        c.failed = 0;
        double tf = time_it(run_fused, &c, nt, 1, o->reps);
        double tu = fused_only ? NAN : time_it(run_unfused, &c, nt, 1, o->reps);
        if (c.failed) {
            fprintf(stderr, "bench_attention: a kernel failed: %s\n", loom_last_error());
            exit(1);
        }
        double err = fused_only ? NAN : 0.0;
        for (int64_t i = 0; !fused_only && i < S * N * D; i++) {
            double e = fabs((double)out_f[i] - (double)out_u[i]);
            if (!(e <= err)) err = e; /* NaN propagates */
        }
        /* the outputs are within [-1, 1]: DESIGN.md's f32 / bf16 tolerances apply absolutely */
        double tol = hp ? 1.0 / 64.0 : dt == LOOM_F32 ? 1.0 / 2048.0 : 1.0 / 128.0;
        if (!fused_only && !(err <= tol)) {
            fprintf(stderr, "bench_attention: fused and unfused outputs differ by %g (tolerance %g)\n", err, tol);
            exit(1);
        }
        double mem_f = (double)fused_scratch * nt / 1e6;
        double mem_u = ((double)S * (double)S * 4.0 + (double)c.mm_per * nt) / 1e6;
        printf("| %s | %lld | %lld/%lld | %d | %.2f | %.0f | %.2f | %.0f | **%.2f×** | %.2f | %.1f | %.1e |\n",
               hp ? "f32 hp" : loom_dtype_name(dt), (long long)S, (long long)N, (long long)Nkv, nt, tf * 1e3,
               flops / tf / 1e9, tu * 1e3, flops / tu / 1e9, tu / tf, mem_f, mem_u, err);
        if (machine_lines)
            printf("@prefill dtype=%s S=%lld N=%lld Nkv=%lld D=%lld threads=%d fused_ms=%.4f unfused_ms=%.4f\n",
                   hp ? "f32hp" : loom_dtype_name(dt), (long long)S, (long long)N, (long long)Nkv, (long long)D, nt,
                   tf * 1e3, tu * 1e3);
        fflush(stdout);
        loom_free_aligned(c.mm_scratch);
        loom_pool_free(c.pool);
    }
    void *bufs[] = {q, k, v, qd, kd, vd, vt, out_f, out_u, scores};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) loom_free_aligned(bufs[i]);
}

/* ------------------------------------------------------------ decode */

typedef struct dec_ctx {
    loom_pool *pool;
    void *kc[MAX_COPIES], *vc[MAX_COPIES];
    int n_copies, next, prefill, failed;
    loom_tensor tq, tk, tv, to, ksc, vsc, bt;
    int64_t len[1]; /* paged: the KV length */
    loom_incre_flash_attention_params ip;
    loom_flash_attention_params fp;
    /* --ab: the decode run as loom_incre_flash_attention runs it (the same
     * launch: whole units, or split and merge), with kernel table kern */
    const loom_attn_kernels *kern;
} dec_ctx;

/* --ab VARIANT: decode samples alternate between the level's kernel table and
 * a copy with one entry changed, in one process (the host's state drifts
 * faster than separate runs can alternate). */
static const char *ab_variant;
static loom_attn_kernels ab_kernels;

/* the level's q preparation and prepared Q.K^T with inner_precise 1's bf16 q turned off */
static int qprep_exact(void *qp, const float *q, int64_t ldq, int nr, loom_dtype kdt, int d, int hp) {
    return loom_attn_kernels_for(loom_cpu_isa())->dec_qprep(qp, q, ldq, nr, kdt, d, 0);
}
static void dot_prep_exact(float *s, int64_t lds, const void *qp, int nr, const void *const *rows,
                           loom_dtype dt, int nc, int d, const attn_dec_pf *pf, int hp) {
    loom_attn_kernels_for(loom_cpu_isa())->dec_dot_prep(s, lds, qp, nr, rows, dt, nc, d, pf, 0);
}

static int ab_setup(const char *v) {
    ab_kernels = *loom_attn_kernels_for(loom_cpu_isa());
    if (strcmp(v, "noprep") == 0) ab_kernels.dec_qprep = NULL;      /* q prepared per tile */
    else if (strcmp(v, "nohp") == 0) { /* bf16hp as bf16 */
        if (ab_kernels.dec_qprep) ab_kernels.dec_qprep = qprep_exact, ab_kernels.dec_dot_prep = dot_prep_exact;
    }
    else if (strcmp(v, "none") == 0) { }                            /* the method's null test */
    else if (strcmp(v, "noi8xpf") == 0) ab_kernels.dec_i8_xpf = 0;  /* i8: no cross-stream prefetch */
    else if (strncmp(v, "i8tile", 6) == 0) {                         /* i8: tiles of this many keys */
        int t = atoi(v + 6);
        if (t < 1 || t > ATTN_DEC_TILE_MAX) return -1;
        ab_kernels.dec_i8_tile = t;
    }
    else if (strncmp(v, "groupspan", 9) == 0) ab_kernels.dec_group_span = atoi(v + 9); /* bytes, 0: none */
    else if (strcmp(v, "onehead") == 0) ab_kernels.dec_one_head = 1; /* kv heads one at a time */
    else return -1;
    return 0;
}

static void dec_tensors(dec_ctx *c, loom_incre_flash_attention_tensors *t) {
    int q8 = c->tk.dtype == LOOM_I8;
    *t = (loom_incre_flash_attention_tensors){
        .query = &c->tq, .key = &c->tk, .value = &c->tv, .attention_out = &c->to,
        .key_antiquant_scale = q8 ? &c->ksc : NULL, .value_antiquant_scale = q8 ? &c->vsc : NULL,
        .block_table = dec_paged ? &c->bt : NULL};
}

static void run_decode(void *arg) {
    dec_ctx *c = arg;
    int i = c->next++ % c->n_copies;
    c->tk.data = c->kc[i], c->tv.data = c->vc[i];
    loom_status s;
    if (c->prefill) {
        loom_flash_attention_tensors t = {.query = &c->tq, .key = &c->tk, .value = &c->tv,
                                          .attention_out = &c->to};
        s = loom_flash_attention_score(&t, &c->fp, c->pool);
    } else if (c->kern) {
        loom_incre_flash_attention_tensors t;
        dec_tensors(c, &t);
        s = attn_decode_pool_with(&t, &c->ip, NULL, c->pool, c->kern);
    } else {
        loom_incre_flash_attention_tensors t;
        dec_tensors(c, &t);
        s = loom_incre_flash_attention(&t, &c->ip, c->pool);
    }
    if (s != LOOM_OK) c->failed = 1;
}

const char *cache_name(loom_dtype ct, int var) {
    if (var == CV_TOKEN) return "i8tok";
    return !var ? loom_dtype_name(ct) : ct == LOOM_I8 ? "i8hp" : "bf16hp";
}

static void bench_decode(const opts *o, bench_probe *probe, loom_dtype ct, int var, int64_t L) {
    const int hp = var == CV_HP, tok = var == CV_TOKEN;
    if (dec_paged && L % dec_paged) {
        fprintf(stderr, "bench_attention: --paged %d does not divide the context %lld\n", dec_paged, (long long)L);
        exit(2);
    }
    const int64_t N = dec_n, Nkv = dec_nkv, D = dec_d;
    const loom_cpu_features *f = loom_cpu_get();
    size_t es = esize(ct), half = (size_t)(L * Nkv * D) * es;
    double l3 = f->l3_bytes > 0 ? (double)f->l3_bytes : 32.0 * (1 << 20);
    double want = 8.0 * l3 > (double)(512 << 20) ? 8.0 * l3 : (double)(512 << 20);
    int n_copies = (int)(want / (2.0 * (double)half)) + 1;
    if (n_copies > MAX_COPIES) n_copies = MAX_COPIES;
    if (dec_hot) n_copies = 1;
    static dec_ctx c;
    memset(&c, 0, sizeof c);
    c.n_copies = n_copies;
    loom_rng rng;
    loom_rng_init(&rng, 7, (uint64_t)L);
    float *kf = xalloc((size_t)(L * Nkv * D) * 4), *vf = xalloc((size_t)(L * Nkv * D) * 4);
    float *q = xalloc((size_t)(N * D) * 4), *out = xalloc((size_t)(N * D) * 4);
    float *scale = xalloc((size_t)(Nkv * (D > L ? D : L)) * 4);
    fill(q, N * D, LOOM_F32, &rng);
    if (ct == LOOM_I8) {
        for (int64_t i = 0; i < L * Nkv * D; i++) {
            kf[i] = (float)(int)(loom_rng_uniform(&rng) * 255.0f - 127.0f);
            vf[i] = (float)(int)(loom_rng_uniform(&rng) * 255.0f - 127.0f);
        }
        for (int64_t i = 0; i < Nkv * (D > L ? D : L); i++) scale[i] = 1.0f / 127.0f;
    } else {
        fill(kf, L * Nkv * D, ct, &rng);
        fill(vf, L * Nkv * D, ct, &rng);
    }
    /* all copies in one block, as an engine holds its KV cache: one allocation
     * on 2 MiB pages whatever the context (a separate block per copy would get
     * 4 KiB pages below 8 MiB, i.e. short contexts) */
    char *arena = xalloc(2 * half * (size_t)n_copies);
    for (int i = 0; i < n_copies; i++) c.kc[i] = arena + 2 * half * i, c.vc[i] = arena + 2 * half * i + half;
    store_as(ct, c.kc[0], kf, L * Nkv * D);
    store_as(ct, c.vc[0], vf, L * Nkv * D);
    for (int i = 1; i < n_copies; i++) {
        memcpy(c.kc[i], c.kc[0], half);
        memcpy(c.vc[i], c.vc[0], half);
    }
    int64_t qs[4] = {1, 1, N, D}, ks[4] = {1, L, Nkv, D}, sc[2] = {Nkv, D}, st[3] = {1, Nkv, L};
    int32_t *table = NULL;
    if (dec_paged) { /* blocks of dec_paged keys, the table a shuffled order of them */
        int64_t nb = L / dec_paged, bts[2] = {1, nb};
        ks[0] = st[0] = nb, ks[1] = dec_paged, st[2] = dec_paged;
        table = xalloc((size_t)nb * sizeof *table);
        for (int64_t i = 0; i < nb; i++) table[i] = (int32_t)i;
        for (int64_t i = nb - 1; i > 0; i--) {
            int64_t j = (int64_t)(loom_rng_uniform(&rng) * (float)(i + 1)) % (i + 1);
            int32_t t = table[i];
            table[i] = table[j], table[j] = t;
        }
        loom_tensor_init(&c.bt, LOOM_I32, 2, bts, table);
        c.len[0] = L;
    }
    if (dec_layout == LOOM_ATTN_BNSD) qs[1] = N, qs[2] = 1, ks[1] = Nkv, ks[2] = dec_paged ? dec_paged : L;
    loom_tensor_init(&c.tq, LOOM_F32, 4, qs, q);
    loom_tensor_init(&c.to, LOOM_F32, 4, qs, out);
    loom_tensor_init(&c.tk, ct, 4, ks, c.kc[0]);
    loom_tensor_init(&c.tv, ct, 4, ks, c.vc[0]);
    loom_tensor_init(&c.ksc, LOOM_F32, tok ? 3 : 2, tok ? st : sc, scale);
    loom_tensor_init(&c.vsc, LOOM_F32, tok ? 3 : 2, tok ? st : sc, scale);
    c.ip = loom_incre_flash_attention_default_params();
    c.fp = loom_flash_attention_default_params();
    c.ip.input_layout = c.fp.input_layout = dec_layout;
    c.ip.inner_precise = hp ? LOOM_ATTN_HIGH_PERFORMANCE : LOOM_ATTN_HIGH_PRECISION;
    if (tok) c.ip.key_antiquant_mode = c.ip.value_antiquant_mode = LOOM_ANTIQUANT_PER_TOKEN;
    if (dec_paged) c.ip.block_size = dec_paged, c.ip.actual_seq_lengths = c.len;
    const char *name = cache_name(ct, var);
    double bytes = 2.0 * (double)half;
    for (int ti = 0; ti < o->n_threads; ti++) {
        int nt = o->threads[ti];
        if (loom_pool_init(&c.pool, nt) != LOOM_OK) { fprintf(stderr, "bench_attention: pool: %s\n", loom_last_error()); exit(1); }
        c.prefill = 0;
        int reps = o->reps * 3 < 64 ? o->reps * 3 : 64;
        double td, bw, frac;
        if (cpu_time && nt == 1) { /* CPU time, the probe too (on this thread) */
            td = time_it(run_decode, &c, nt, 2, reps);
            bw = (double)PROBE_BYTES / bench_time_cpu(probe_once, probe, 1, reps) / 1e9;
            frac = bytes / td / 1e9 / bw;
        } else { /* each sample next to a read-bandwidth probe of its own */
            double ts[64], bws[64], fr[64];
            int batch = (int)((double)(128 << 20) / bytes) + 1; /* >= 128 MiB of K/V per sample */
            if (batch > 256) batch = 256;
            for (int w = 0; w < 2; w++) run_decode(&c);
            for (int r = 0; r < reps; r++) {
                if (ab_variant) c.kern = r & 1 ? &ab_kernels : loom_attn_kernels_for(loom_cpu_isa());
                bws[r] = bench_probe_gbs(probe, c.pool);
                if (dec_hot) run_decode(&c); /* the probe evicted the one copy: warm it again */
                double t0 = loom_time_s();
                for (int b = 0; b < batch; b++) run_decode(&c);
                ts[r] = (loom_time_s() - t0) / batch;
                fr[r] = bytes / ts[r] / 1e9 / bws[r];
            }
            td = bench_median(ts, reps), bw = bench_median(bws, reps), frac = bench_median(fr, reps);
            if (ab_variant) { /* even samples: the kernels as built; odd: the variant */
                double fa[32], fb[32];
                int na = 0, nb = 0;
                for (int r = 0; r < reps; r++) {
                    if (r & 1) fb[nb++] = fr[r];
                    else fa[na++] = fr[r];
                }
                double ma = bench_median(fa, na), mb = bench_median(fb, nb);
                printf("| %s | %lld | %d | %.0f%% | %.0f%% | %+.1f |\n", name, (long long)L, nt,
                       100.0 * ma, 100.0 * mb, 100.0 * (ma - mb));
                c.kern = NULL;
                loom_pool_free(c.pool);
                if (c.failed) {
                    fprintf(stderr, "bench_attention: decode failed: %s\n", loom_last_error());
                    exit(1);
                }
                continue;
            }
        }
        double tp = 0.0;
        const int vs_prefill = ct != LOOM_I8 && !dec_paged; /* the prefill kernel takes neither */
        if (vs_prefill) {
            c.prefill = 1;
            tp = time_it(run_decode, &c, nt, 2, reps);
        }
        if (c.failed) {
            fprintf(stderr, "bench_attention: decode failed: %s\n", loom_last_error());
            exit(1);
        }
        double gbs = bytes / td / 1e9;
        char pf[32] = "-", ratio[32] = "-";
        if (vs_prefill) {
            snprintf(pf, sizeof pf, "%.3f", tp * 1e3);
            snprintf(ratio, sizeof ratio, "%.2f×", tp / td);
        }
        printf("| %s | %lld | %d | %.3f | %.1f | %.1f | %.0f%% | %s | %s | %d |\n", name,
               (long long)L, nt, td * 1e3, gbs, bw, 100.0 * frac, pf, ratio, n_copies);
        if (machine_lines)
            printf("@decode cache=%s L=%lld N=%lld Nkv=%lld D=%lld threads=%d decode_ms=%.4f gbs=%.2f read_bw=%.2f\n",
                   name, (long long)L, (long long)N, (long long)Nkv, (long long)D, nt,
                   td * 1e3, gbs, bw);
        fflush(stdout);
        loom_pool_free(c.pool);
    }
    loom_free_aligned(arena);
    void *bufs[] = {kf, vf, q, out, scale, table};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) loom_free_aligned(bufs[i]);
}

/* ------------------------------------------------------------ decode micro-kernels */

#define KER_MAX_ROWS 16 /* query rows of one kv head: N / N_kv (4 for GQA 32/8) */
#define KER_KEYS 256  /* keys of the cache: K and V stay in L2 */
#define KER_SWEEPS 64 /* passes over the keys per timed call */
#define KER_MAX_D 256 /* head dims up to this (--dec-shape) */

/* The q rows of one kv head, from --dec-shape (N / N_kv). */
static int ker_rows(void) { return dec_n / dec_nkv < KER_MAX_ROWS ? dec_n / dec_nkv : KER_MAX_ROWS; }

typedef struct ker_ctx {
    const loom_attn_kernels *kn;
    loom_dtype dt;
    int which; /* 0 dec_dot, 1 softmax_rows, 2 dec_pv */
    int hp;    /* inner_precise 1 */
    attn_dec_pv_fn *pv;
    const void *krows[KER_KEYS], *vrows[KER_KEYS];
    int d, ld, rows; /* head dim; q and accumulator rows, zero padded to 16 floats; query rows */
    int tile; /* keys a tile (attn_dec_tile) */
    float q[KER_MAX_ROWS * KER_MAX_D], s[KER_MAX_ROWS * ATTN_DEC_TILE_MAX];
    /* each tile's scores and probabilities, the tile at key j0 from j0 * KER_MAX_ROWS */
    float s0[KER_MAX_ROWS * KER_KEYS], p0[KER_MAX_ROWS * KER_KEYS];
    float acc[KER_MAX_ROWS * KER_MAX_D], m[KER_MAX_ROWS], l[KER_MAX_ROWS], alpha[KER_MAX_ROWS],
        ones[KER_MAX_ROWS];
    _Alignas(64) char qp[KER_MAX_ROWS * ATTN_DEC_QPREP_STRIDE]; /* q in dec_qprep's form */
} ker_ctx;

static void run_kernel(void *arg) {
    ker_ctx *c = arg;
    const int T = c->tile, R = c->rows, D = c->d, LD = c->ld;
    for (int sw = 0; sw < KER_SWEEPS; sw++) {
        for (int r = 0; r < R; r++) c->m[r] = -INFINITY, c->l[r] = 0.0f;
        memset(c->acc, 0, sizeof c->acc);
        /* as the driver: an i8 or bf16 K takes q in the prepared form, once per unit */
        int prep = c->which == 0 && c->kn->dec_qprep && c->kn->dec_qprep(c->qp, c->q, LD, R, c->dt, D, c->hp);
        for (int j0 = 0; j0 < KER_KEYS; j0 += T) {
            if (c->which == 0 && prep) {
                c->kn->dec_dot_prep(c->s, T, c->qp, R, c->krows + j0, c->dt, T, D, NULL, c->hp);
            } else if (c->which == 0) {
                c->kn->dec_dot(c->s, T, c->q, LD, R, c->krows + j0, c->dt, T, D, NULL);
            } else if (c->which == 1) {
                memcpy(c->s, c->s0 + j0 * KER_MAX_ROWS, (size_t)R * T * sizeof(float));
                c->kn->softmax_rows(c->s, T, R, T, c->m, c->l, c->alpha);
            } else {
                c->pv(c->acc, LD, c->p0 + j0 * KER_MAX_ROWS, T, R, c->vrows + j0, c->dt, T, D, c->ones, NULL);
            }
        }
    }
}

static void bench_kernels(const opts *o, loom_dtype ct, int var) {
    const int hp = var == CV_HP; /* i8tok: the kernels see no scales */
    const int R = ker_rows(), D = dec_d, T = attn_dec_tile(loom_attn_kernels_for(loom_cpu_isa()), ct, ct, D, R);
    static ker_ctx c;
    memset(&c, 0, sizeof c);
    const int LD = (D + 15) / 16 * 16;
    c.d = D, c.ld = LD, c.rows = R, c.tile = T;
    c.kn = loom_attn_kernels_for(loom_cpu_isa());
    c.dt = ct;
    c.pv = c.kn->dec_pv;
    c.hp = hp;
    size_t es = esize(ct), row = (size_t)D * es;
    loom_rng rng;
    loom_rng_init(&rng, 11, (uint64_t)ct);
    float *kf = xalloc((size_t)KER_KEYS * D * 4), *vf = xalloc((size_t)KER_KEYS * D * 4);
    char *kc = xalloc(KER_KEYS * row), *vc = xalloc(KER_KEYS * row);
    if (ct == LOOM_I8) {
        for (int64_t i = 0; i < (int64_t)KER_KEYS * D; i++) {
            kf[i] = (float)(int)(loom_rng_uniform(&rng) * 255.0f - 127.0f);
            vf[i] = (float)(int)(loom_rng_uniform(&rng) * 255.0f - 127.0f);
        }
    } else {
        fill(kf, (int64_t)KER_KEYS * D, ct, &rng);
        fill(vf, (int64_t)KER_KEYS * D, ct, &rng);
    }
    store_as(ct, kc, kf, (int64_t)KER_KEYS * D);
    store_as(ct, vc, vf, (int64_t)KER_KEYS * D);
    for (int j = 0; j < KER_KEYS; j++) c.krows[j] = kc + j * row, c.vrows[j] = vc + j * row;
    /* q as the driver prepares it: scaled by 1/sqrt(D) and log2(e) (i8: and 1/127) */
    float qs = 1.4426950f / sqrtf((float)D) / (ct == LOOM_I8 ? 127.0f : 1.0f);
    for (int r = 0; r < R; r++) {
        fill(c.q + r * LD, D, LOOM_F32, &rng);
        for (int i = 0; i < D; i++) c.q[r * LD + i] *= qs;
    }
    for (int r = 0; r < R; r++) c.m[r] = -INFINITY, c.ones[r] = 1.0f;
    for (int j0 = 0; j0 < KER_KEYS; j0 += T) { /* real scores and probabilities per tile */
        float *s0 = c.s0 + j0 * KER_MAX_ROWS, *p0 = c.p0 + j0 * KER_MAX_ROWS;
        c.kn->dec_dot(s0, T, c.q, LD, R, c.krows + j0, ct, T, D, NULL);
        memcpy(p0, s0, (size_t)R * T * sizeof(float));
        c.kn->softmax_rows(p0, T, R, T, c.m, c.l, c.alpha);
    }
    double ns[3], total = 0.0;
    int reps = o->reps * 3 < 15 ? 15 : o->reps * 3;
    for (int w = 0; w < 3; w++) {
        c.which = w;
        ns[w] = bench_time(run_kernel, &c, 2, reps) * 1e9 / ((double)KER_SWEEPS * KER_KEYS);
        total += ns[w];
    }
    printf("| %s | %s | %.2f | %.2f | %.2f | %.2f | %.1f |\n", cache_name(ct, var), loom_isa_name(loom_cpu_isa()),
           ns[0], ns[1], ns[2], total, 2.0 * (double)row / total);
    fflush(stdout);
    void *bufs[] = {kf, vf, kc, vc};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) loom_free_aligned(bufs[i]);
}

/* ------------------------------------------------------------ main */

/* "512,1024" into out (at most n); values 1..1<<20. Returns the count or -1. */
static int parse_ints(const char *s, int *out, int n) {
    int k = 0;
    while (*s && k < n) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0 || v > (1L << 20) || (*end && *end != ',')) return -1;
        out[k++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
    return *s ? -1 : k;
}

int main(int argc, char **argv) {
    loom_ops_init(); /* the fused layer's ops in the op table */
    opts o = {.threads = {1, 2}, .n_threads = 2, .reps = 5};
    int seqs[8] = {512, 1024, 2048, 4096}, n_seqs = 4, gqa[4] = {32, 8}, n_gqa = 2;
    int ctx[8] = {512, 1024, 2048, 4096, 8192}, n_ctx = 5, blk[2] = {0, 0}, chunk = 512;
    int pblocks[8] = {16, 128}, n_pblocks = 2;
    const char *dtypes = "f32,f32hp,bf16", *caches = "f32,bf16,i8", *sets = "prefill,decode";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--machine") == 0) { machine_lines = 1; continue; }
        if (strcmp(a, "--fused-only") == 0) { fused_only = 1; continue; }
        if (strcmp(a, "--hot") == 0) { dec_hot = 1; continue; }
        if (strcmp(a, "--cpu-time") == 0) { cpu_time = 1; continue; }
        if (!v) { fprintf(stderr, "bench_attention: %s needs a value\n", a); return 2; }
        int ok = 1;
        if (strcmp(a, "--threads") == 0) ok = (o.n_threads = bench_parse_ints(v, o.threads, 8)) > 0;
        else if (strcmp(a, "--seqs") == 0) ok = (n_seqs = parse_ints(v, seqs, 8)) > 0;
        else if (strcmp(a, "--gqa") == 0) ok = (n_gqa = bench_parse_ints(v, gqa, 4)) > 0;
        else if (strcmp(a, "--ctx") == 0) ok = (n_ctx = parse_ints(v, ctx, 8)) > 0;
        else if (strcmp(a, "--block") == 0) ok = parse_ints(v, blk, 2) == 2;
        else if (strcmp(a, "--dec-shape") == 0) {
            int ds[3] = {0, 0, HEADS}, n = parse_ints(v, ds, 3);
            ok = n >= 2 && ds[0] >= 1 && ds[2] >= 1 && ds[2] <= 256 && ds[2] % ds[0] == 0 && ds[1] >= 1 &&
                 ds[1] <= 256;
            if (ok) dec_nkv = ds[0], dec_d = ds[1], dec_n = ds[2];
        }
        else if (strcmp(a, "--reps") == 0) ok = (o.reps = atoi(v)) > 0;
        else if (strcmp(a, "--dtypes") == 0) dtypes = v;
        else if (strcmp(a, "--caches") == 0) caches = v;
        else if (strcmp(a, "--sets") == 0) sets = v;
        else if (strcmp(a, "--ab") == 0) ok = ab_setup(ab_variant = v) == 0;
        else if (strcmp(a, "--paged") == 0) {
            ok = (n_pblocks = parse_ints(v, pblocks, 8)) > 0 && (dec_paged = pblocks[0]) >= 1;
        }
        else if (strcmp(a, "--chunk") == 0) ok = (chunk = atoi(v)) > LOOM_INCRE_MAX_Q_LEN;
        else if (strcmp(a, "--layout") == 0)
            ok = loom_attn_layout_parse(v, &dec_layout) == LOOM_OK &&
                 (dec_layout == LOOM_ATTN_BNSD || dec_layout == LOOM_ATTN_BSND);
        else { fprintf(stderr, "bench_attention: unknown option %s\n", a); return 2; }
        if (!ok) { fprintf(stderr, "bench_attention: bad value for %s: %s\n", a, v); return 2; }
        i++;
    }
    for (int i = 0; i < n_gqa; i++)
        if (gqa[i] < 1 || HEADS % gqa[i]) { fprintf(stderr, "bench_attention: --gqa %d does not divide %d\n", gqa[i], HEADS); return 2; }
    for (int i = 0; i < o.n_threads; i++)
        if (o.threads[i] < 1) { fprintf(stderr, "bench_attention: bad --threads\n"); return 2; }
    o.bq = blk[0], o.bkv = blk[1];
    char list[256];
    loom_dtype cache_t[8]; /* --caches, for the decode and kernels sets */
    int cache_var[8], n_cache = 0;
    snprintf(list, sizeof list, "%s", caches);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        loom_dtype t = LOOM_I8;
        int var = strcmp(tok, "i8hp") == 0 || strcmp(tok, "bf16hp") == 0 ? CV_HP
                  : strcmp(tok, "i8tok") == 0                            ? CV_TOKEN
                                                                         : 0;
        if (var) t = tok[0] == 'i' ? LOOM_I8 : LOOM_BF16;
        if (n_cache == 8 || (!var && (parse_dtype(tok, &t) != 0 ||
            (t != LOOM_F32 && t != LOOM_BF16 && t != LOOM_F16 && t != LOOM_I8)))) {
            fprintf(stderr, "bench_attention: cache dtype %s: expected at most 8 of f32, f16, bf16, i8, i8hp, bf16hp, i8tok\n", tok);
            return 2;
        }
        cache_var[n_cache] = var;
        cache_t[n_cache++] = t;
    }
    const loom_cpu_features *f = loom_cpu_get();
    printf("# bench_attention\n\n");
    bench_print_cpu();
    printf("isa %s; avx512f %d bf16 %d; L1d %d KiB, L2 %d KiB, L3 %d KiB; reps %d (median after warm-up)%s\n\n",
           loom_isa_name(loom_cpu_isa()), f->avx512f, f->avx512_bf16, f->l1d_bytes >> 10,
           f->l2_bytes >> 10, f->l3_bytes >> 10, o.reps,
           cpu_time ? "; 1-thread rows: thread CPU time" : "");
    if (strstr(sets, "prefill")) {
        printf("## Prefill: B=1, N=32, D=128, causal\n\n");
        printf("| dtype | S | N/N_kv | threads | fused ms | fused GFLOP/s | unfused ms | unfused GFLOP/s | speed-up | fused extra MB | unfused extra MB | max abs diff |\n");
        printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        snprintf(list, sizeof list, "%s", dtypes);
        for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
            loom_dtype t = LOOM_F32;
            int hp = strcmp(tok, "f32hp") == 0;
            if (!hp && (parse_dtype(tok, &t) != 0 || (t != LOOM_F32 && t != LOOM_BF16))) {
                fprintf(stderr, "bench_attention: prefill dtype %s: expected f32, f32hp or bf16\n", tok);
                return 2;
            }
            for (int g = 0; g < n_gqa; g++)
                for (int s = 0; s < n_seqs; s++) bench_prefill(&o, t, hp, seqs[s], gqa[g]);
        }
        printf("\n");
    }
    if (strstr(sets, "decode")) {
        bench_probe *probe = bench_probe_new(PROBE_BYTES);
        if (!probe) { fprintf(stderr, "bench_attention: cannot allocate the read probe\n"); return 1; }
        printf("\n## Decode: q_len 1, N=%d, N_kv=%d, D=%d, contiguous %s cache\n\n", dec_n, dec_nkv,
               dec_d, loom_attn_layout_name(dec_layout));
        if (ab_variant) {
            printf("In-process A/B: samples alternate between the kernels as built and the variant "
                   "'%s'; medians of %% of read BW.\n\n", ab_variant);
            printf("| cache | context | threads | kernels as built | variant %s | difference (points) |\n", ab_variant);
            printf("|---|---|---|---|---|---|\n");
        } else {
            printf("| cache | context | threads | decode ms | K/V GB/s | read BW GB/s | %% of read BW | prefill kernel (S_q=1) ms | prefill/decode | copies |\n");
            printf("|---|---|---|---|---|---|---|---|---|---|\n");
        }
        for (int i = 0; i < n_cache; i++)
            for (int l = 0; l < n_ctx; l++) bench_decode(&o, probe, cache_t[i], cache_var[i], ctx[l]);
        bench_probe_free(probe);
    }
    if (strstr(sets, "chunked")) {
        printf("\n## Chunked prefill: the last %d queries of a context, N=%d, D=%d, causal, "
               "fused_infer_attention_score over a contiguous BSND cache and a paged copy\n\n", chunk, HEADS, HEAD_DIM);
        printf("| cache | context | chunk | N/N_kv | block | threads | contiguous ms | GFLOP/s | paged ms | "
               "GFLOP/s | paged / contiguous |\n");
        printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < n_cache; i++)
            for (int g = 0; g < n_gqa; g++)
                for (int l = 0; l < n_ctx; l++)
                    for (int b = 0; b < n_pblocks; b++)
                        if (ctx[l] >= chunk && pblocks[b] >= 1)
                            bench_chunked(&o, cache_t[i], cache_var[i], ctx[l], chunk, gqa[g], pblocks[b]);
    }
    if (strstr(sets, "kernels")) {
        printf("\n## Decode micro-kernels: one thread, %d query rows, D=%d, %d keys in L2, tiles of %d keys"
               " (i8: %d)\n\n", ker_rows(), dec_d, KER_KEYS, ATTN_DEC_TILE,
               attn_dec_tile(loom_attn_kernels_for(loom_cpu_isa()), LOOM_I8, LOOM_I8, dec_d, ker_rows()));
        printf("| cache | level | dec_dot ns/key | softmax_rows ns/key | dec_pv ns/key | sum ns/key | compute-bound K/V GB/s |\n");
        printf("|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < n_cache; i++) bench_kernels(&o, cache_t[i], cache_var[i]);
    }
    return 0;
}
