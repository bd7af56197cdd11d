/*
 * bench_fused: the fused transformer ops against the same computation as a
 * sequence of loom's optimised primitive ops, in the same process, at
 * Llama2-7B shapes (hidden 4096, 32 heads of 128, FFN 11008) for M = 1
 * (decode) and M = 512 (prefill) tokens.
 *
 *   add_rms_norm  fused loom_add_rms_norm       vs  add -> rms_norm (op kernels)
 *   ffn           fused loom_ffn_ws (gate/up GEMM with act.up epilogue, down GEMM), its
 *                 h and scratch in a workspace allocated once, as the unfused
 *                 path's intermediates are
 *                                               vs  matmul gate, matmul up, silu, mul, matmul down
 *   qkv_rope      fused loom_qkv_rope_ws (3 weights, RoPE half, f32 BSND cache), its
 *                 scratch in a workspace allocated once
 *                                               vs  matmul q, k, v -> rope q, rope k ->
 *                                                   loom_reshape_and_cache (thread 0)
 * Unfused steps run on all threads of the pool with a barrier between steps
 * (the stand-alone cache write has no thread split). Bytes moved: what each
 * kernel reads and writes once (weights, activations, intermediates), summed
 * over the kernels of each path, so the fused/unfused ratio shows the saved
 * intermediate traffic. Weights are larger than L3 at every dtype measured,
 * so M = 1 rows stream them from DRAM (compare fused GB/s with the machine's
 * read bandwidth); M = 512 rows are compute-bound (GFLOP/s: 2.M.N.K of the
 * GEMMs; add_rms_norm: 4 per element).
 *
 *   bench_fused [--threads 1,2] [--ms 1,512] [--wtypes f32,bf16] [--ops add_rms_norm,ffn,qkv_rope]
 *               [--reps N] [--cpu-time] [--sequential]
 * The fused and unfused calls alternate (rounds of fused, unfused, unfused,
 * fused): times are medians over the rounds, the speed-up the median of the
 * rounds' ratios, so a drift of the host's speed weighs on both paths alike.
 * --sequential times all fused calls, then all unfused ones (the method of
 * tables before 2026-12-03 20:00 UTC).
 * --cpu-time times 1-thread rows by the thread's CPU time (loaded machines).
 * Fails (status 1) if a fused result differs from the unfused one beyond the
 * tolerance of its weight dtype.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "graph/ops_init.h"
#include "base/cpu.h"
#include "base/rng.h"
#include "bench_util.h"
#include "fused/fused.h"
#include "ops/ops.h"
#include "ops/quant.h"

#define HIDDEN 4096
#define FFN_DIM 11008
#define HEADS 32
#define HEAD_DIM 128
#define CACHE_LEN 1024

static void *xalloc(size_t bytes) { return bench_alloc(bytes, "bench_fused"); }

static float *randf(int64_t n, float amp, uint64_t stream) {
    float *x = xalloc((size_t)n * 4);
    loom_rng rng;
    loom_rng_init(&rng, 99, stream);
    for (int64_t i = 0; i < n; i++) x[i] = amp * (2.0f * loom_rng_uniform(&rng) - 1.0f);
    return x;
}

/* W [N, K] of dtype t from random values. */
static void *make_w(loom_dtype t, int64_t N, int64_t K, uint64_t stream) {
    size_t row = loom_dtype_row_bytes(t, K);
    unsigned char *w = xalloc(row * (size_t)N);
    float *tmp = xalloc((size_t)K * 4);
    loom_rng rng;
    loom_rng_init(&rng, 5, stream);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++) tmp[k] = 0.05f * (2.0f * loom_rng_uniform(&rng) - 1.0f);
        void *dst = w + row * (size_t)n;
        if (t == LOOM_F32) memcpy(dst, tmp, row);
        else if (t == LOOM_F16)
            for (int64_t k = 0; k < K; k++) ((uint16_t *)dst)[k] = loom_f32_to_f16(tmp[k]);
        else if (t == LOOM_BF16)
            for (int64_t k = 0; k < K; k++) ((uint16_t *)dst)[k] = loom_f32_to_bf16(tmp[k]);
        else loom_quantize_row(t, tmp, dst, K);
    }
    loom_free_aligned(tmp);
    return w;
}

static loom_tensor t2(float *data, int64_t r, int64_t c) {
    loom_tensor t;
    int64_t s[2] = {r, c};
    loom_tensor_init(&t, LOOM_F32, 2, s, data);
    return t;
}

/* ------------------------------------------------------------ unfused sequences */

enum { STEP_MATMUL, STEP_OP, STEP_KV };

typedef struct step {
    int kind;
    loom_matmul_args mm;
    loom_op op;
    const loom_tensor *src[LOOM_MAX_SRC];
    int n_src;
    loom_tensor *dst;
    const void *attrs;
} step;

typedef struct seq {
    loom_pool *pool;
    step st[8];
    int n;
    unsigned char *scratch;
    size_t per;
    int failed;
    /* STEP_KV */
    const loom_tensor *k, *v;
    loom_tensor *kc, *vc;
    const loom_kv_write_params *kvp;
} seq;

static size_t step_scratch(const step *s) {
    if (s->kind == STEP_MATMUL) return loom_matmul_scratch_size(&s->mm);
    if (s->kind == STEP_OP) {
        const loom_op_info *info = loom_op_get(s->op);
        if (info->scratch_size) return info->scratch_size(s->src, s->n_src, s->dst, s->attrs);
    }
    return 0;
}

static void seq_worker(int ith, int nth, void *arg) {
    seq *q = arg;
    void *scratch = q->scratch + q->per * (size_t)ith;
    for (int i = 0; i < q->n; i++) {
        const step *s = &q->st[i];
        loom_status st = LOOM_OK;
        if (s->kind == STEP_MATMUL) st = loom_matmul_run(&s->mm, loom_cpu_isa(), ith, nth, scratch);
        else if (s->kind == STEP_OP) {
            loom_kernel_args ka = {.n_src = s->n_src, .dst = s->dst, .attrs = s->attrs, .ith = ith,
                                   .nth = nth, .scratch = scratch};
            memcpy(ka.src, s->src, sizeof ka.src);
            st = loom_op_kernel(s->op, loom_cpu_isa())(&ka);
        } else if (ith == 0) st = loom_reshape_and_cache(q->k, q->v, q->kc, q->vc, q->kvp);
        if (st != LOOM_OK) q->failed = 1;
        if (i + 1 < q->n) loom_pool_barrier(q->pool);
    }
}

static void run_seq(void *arg) {
    seq *q = arg;
    loom_pool_run(q->pool, seq_worker, q);
}

static void seq_prepare(seq *q, int nt) {
    size_t m = 64;
    for (int i = 0; i < q->n; i++) {
        size_t s = step_scratch(&q->st[i]);
        if (s > m) m = s;
    }
    q->per = (m + 63) & ~(size_t)63;
    q->scratch = xalloc(q->per * (size_t)nt);
}

static step mm_step(const float *x, int64_t ldx, const void *w, loom_dtype wt, float *y,
                    int64_t M, int64_t N, int64_t K) {
    step s = {.kind = STEP_MATMUL};
    s.mm = (loom_matmul_args){.x = x, .ldx = ldx, .w = w, .ldw = K, .wtype = wt, .y = y, .ldy = N,
                              .M = M, .N = N, .K = K};
    return s;
}

static step op_step(loom_op op, const loom_tensor *a, const loom_tensor *b, loom_tensor *dst,
                    const void *attrs) {
    step s = {.kind = STEP_OP, .op = op, .src = {a, b}, .n_src = b ? 2 : 1, .dst = dst, .attrs = attrs};
    return s;
}

/* ------------------------------------------------------------ fused calls */

typedef struct fused_ctx {
    int which; /* 0 add_rms_norm, 1 ffn, 2 qkv_rope */
    loom_pool *pool;
    const loom_tensor *a, *b, *c, *d;
    loom_tensor *y, *r, *kc, *vc;
    const void *params;
    void *ws;          /* ffn, qkv_rope: workspace for the pool's thread count */
    size_t ws_bytes;
    int failed;
} fused_ctx;

static void run_fused(void *arg) {
    fused_ctx *f = arg;
    loom_status s;
    if (f->which == 0) s = loom_add_rms_norm(f->a, f->b, f->c, f->params, f->y, f->r, f->pool);
    else if (f->which == 1)
        s = loom_ffn_ws(f->a, f->b, f->c, f->d, NULL, f->params, f->y, f->ws, f->ws_bytes, f->pool);
    else
        s = loom_qkv_rope_ws(f->a, f->b, f->c, f->d, f->params, f->y, NULL, NULL, f->kc, f->vc, f->ws,
                             f->ws_bytes, f->pool);
    if (s != LOOM_OK) f->failed = 1;
}

/* ------------------------------------------------------------ rows */

typedef struct opts { int threads[8], n_threads, reps, cpu_time, sequential; } opts;

/* bench_time, or with --cpu-time and one thread the thread's CPU time. */
static double time_it(const opts *o, void (*fn)(void *), void *arg, int nt) {
    return o->cpu_time && nt == 1 ? bench_time_cpu(fn, arg, 1, o->reps) : bench_time(fn, arg, 1, o->reps);
}

static double max_diff(const float *a, const float *b, int64_t n) {
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / (fabs((double)b[i]) > 1.0 ? fabs((double)b[i]) : 1.0);
        if (!(d <= e)) e = d;
    }
    return e;
}

static void row(const char *op, int64_t M, const char *wt, const opts *o, fused_ctx *f, seq *q,
                double flops, double bytes_f, double bytes_u, const float *yf, const float *yu,
                int64_t ny) {
    for (int ti = 0; ti < o->n_threads; ti++) {
        int nt = o->threads[ti];
        if (loom_pool_init(&f->pool, nt) != LOOM_OK) exit(1);
        q->pool = f->pool;
        seq_prepare(q, nt);
        f->ws = NULL, f->ws_bytes = 0;
        if (f->which > 0) {
            loom_status ws = f->which == 1
                                 ? loom_ffn_workspace_size(f->a, f->b, f->c, f->d, f->params, nt, &f->ws_bytes)
                                 : loom_qkv_rope_workspace_size(f->a, f->b, f->c, f->d, f->params, nt, &f->ws_bytes);
            if (ws != LOOM_OK || !(f->ws = loom_alloc_aligned(f->ws_bytes, 64))) {
                fprintf(stderr, "bench_fused: %s workspace: %s\n", op, loom_last_error());
                exit(1);
            }
            memset(f->ws, 0, f->ws_bytes); /* touched once, as the unfused intermediates are */
        }
        f->failed = q->failed = 0;
        double tf, tu, speedup;
        if (o->sequential) { /* all fused calls, then all unfused ones */
            tf = time_it(o, run_fused, f, nt);
            tu = time_it(o, run_seq, q, nt);
            speedup = tu / tf;
        } else { /* alternating: the speed-up is the median of the rounds' ratios */
            bench_time_ab(run_fused, f, run_seq, q, 1, o->reps, o->cpu_time && nt == 1, &tf, &tu, &speedup);
        }
        if (f->failed || q->failed) {
            fprintf(stderr, "bench_fused: %s failed: %s\n", op, loom_last_error());
            exit(1);
        }
        double err = max_diff(yf, yu, ny), tol = strcmp(wt, "bf16") == 0 || strcmp(wt, "f16") == 0 ? 1.0 / 64.0
                                                 : strcmp(wt, "f32") == 0 || wt[0] == '-' ? 1.0 / 2048.0 : 1.0 / 32.0;
        printf("| %s | %lld | %s | %d | %.3f | %.3f | **%.2f×** | %.1f | %.1f | %.2f | %.1f | %.1f | %.1e |\n",
               op, (long long)M, wt, nt, tf * 1e3, tu * 1e3, speedup, bytes_f / 1e6, bytes_u / 1e6,
               bytes_u / bytes_f, bytes_f / tf / 1e9, flops / tf / 1e9, err);
        if (!(err <= tol)) { /* DESIGN.md / docs/fused.md tolerances */
            fprintf(stderr, "bench_fused: %s fused and unfused differ by %g (tolerance %g)\n", op, err, tol);
            exit(1);
        }
        fflush(stdout);
        loom_free_aligned(q->scratch);
        loom_free_aligned(f->ws);
        loom_pool_free(f->pool);
    }
}

static void bench_add_rms_norm(const opts *o, int64_t M) {
    const int64_t D = HIDDEN;
    float *x = randf(M * D, 1.0f, 1), *res = randf(M * D, 1.0f, 2), *g = randf(D, 1.0f, 3);
    float *yf = xalloc((size_t)(M * D) * 4), *rf = xalloc((size_t)(M * D) * 4);
    float *yu = xalloc((size_t)(M * D) * 4), *ru = xalloc((size_t)(M * D) * 4);
    loom_tensor tx = t2(x, M, D), tr = t2(res, M, D), tyf = t2(yf, M, D), trf = t2(rf, M, D);
    loom_tensor tyu = t2(yu, M, D), tru = t2(ru, M, D), tg;
    int64_t gs[1] = {D};
    loom_tensor_init(&tg, LOOM_F32, 1, gs, g);
    loom_add_rms_norm_params p = loom_add_rms_norm_default_params();
    loom_rms_norm_attrs ra = {.eps = p.epsilon};
    fused_ctx f = {.which = 0, .a = &tx, .b = &tr, .c = &tg, .y = &tyf, .r = &trf, .params = &p};
    seq q = {.n = 2};
    q.st[0] = op_step(LOOM_OP_ADD, &tx, &tr, &tru, NULL);
    q.st[1] = op_step(LOOM_OP_RMS_NORM, &tru, &tg, &tyu, &ra);
    double md = 4.0 * (double)(M * D);
    row("add_rms_norm", M, "-", o, &f, &q, 4.0 * (double)(M * D), 4.0 * md + 4.0 * D, 5.0 * md + 4.0 * D, yf, yu, M * D);
    void *bufs[] = {x, res, g, yf, rf, yu, ru};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) loom_free_aligned(bufs[i]);
}

static void bench_ffn(const opts *o, int64_t M, loom_dtype wt) {
    const int64_t D = HIDDEN, H = FFN_DIM;
    void *wg = make_w(wt, H, D, 11), *wu = make_w(wt, H, D, 12), *wd = make_w(wt, D, H, 13);
    float *x = randf(M * D, 1.0f, 4), *yf = xalloc((size_t)(M * D) * 4), *yu = xalloc((size_t)(M * D) * 4);
    float *gb = xalloc((size_t)(M * H) * 4), *ub = xalloc((size_t)(M * H) * 4);
    float *ab = xalloc((size_t)(M * H) * 4), *hb = xalloc((size_t)(M * H) * 4);
    loom_tensor tx = t2(x, M, D), tyf = t2(yf, M, D), tg = t2(gb, M, H), tu = t2(ub, M, H);
    loom_tensor ta = t2(ab, M, H), th = t2(hb, M, H), twg, twu, twd;
    int64_t s1[2] = {H, D}, s2[2] = {D, H};
    loom_tensor_init(&twg, wt, 2, s1, wg);
    loom_tensor_init(&twu, wt, 2, s1, wu);
    loom_tensor_init(&twd, wt, 2, s2, wd);
    loom_ffn_params p = loom_ffn_default_params();
    fused_ctx f = {.which = 1, .a = &tx, .b = &twg, .c = &twu, .d = &twd, .y = &tyf, .params = &p};
    seq q = {.n = 5};
    q.st[0] = mm_step(x, D, wg, wt, gb, M, H, D);
    q.st[1] = mm_step(x, D, wu, wt, ub, M, H, D);
    q.st[2] = op_step(LOOM_OP_SILU, &tg, NULL, &ta, NULL);
    q.st[3] = op_step(LOOM_OP_MUL, &ta, &tu, &th, NULL);
    q.st[4] = mm_step(hb, H, wd, wt, yu, M, D, H);
    double w = 3.0 * (double)loom_dtype_row_bytes(wt, D) * (double)H;
    double md = 4.0 * (double)(M * D), mh = 4.0 * (double)(M * H);
    row("ffn", M, loom_dtype_name(wt), o, &f, &q, 6.0 * (double)(M * D) * (double)H, w + 2.0 * md + 2.0 * mh, w + 3.0 * md + 8.0 * mh, yf,
        yu, M * D);
    void *bufs[] = {wg, wu, wd, x, yf, yu, gb, ub, ab, hb};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) loom_free_aligned(bufs[i]);
}

static void bench_qkv_rope(const opts *o, int64_t M, loom_dtype wt) {
    const int64_t Hd = HIDDEN, N = HEADS, D = HEAD_DIM, HD = N * D;
    int64_t p0 = M == 1 ? CACHE_LEN / 2 : 0;
    void *w[3];
    for (int i = 0; i < 3; i++) w[i] = make_w(wt, HD, Hd, 20 + (uint64_t)i);
    float *x = randf(M * Hd, 1.0f, 5), *qf = xalloc((size_t)(M * HD) * 4), *qu = xalloc((size_t)(M * HD) * 4);
    float *qb = xalloc((size_t)(M * HD) * 4), *kb = xalloc((size_t)(M * HD) * 4);
    float *vb = xalloc((size_t)(M * HD) * 4), *kr = xalloc((size_t)(M * HD) * 4);
    size_t cbytes = (size_t)(CACHE_LEN * HD) * 4;
    float *kc = xalloc(cbytes), *vc = xalloc(cbytes);
    memset(kc, 0, cbytes);
    memset(vc, 0, cbytes);
    int64_t *pos = xalloc((size_t)M * sizeof(int64_t));
    for (int64_t t = 0; t < M; t++) pos[t] = p0 + t;
    loom_tensor tx = t2(x, M, Hd), tqf = t2(qf, M, HD), tw[3], tkc, tvc;
    int64_t ws[2] = {HD, Hd}, cs[4] = {1, CACHE_LEN, N, D}, hs[3] = {M, N, D};
    for (int i = 0; i < 3; i++) loom_tensor_init(&tw[i], wt, 2, ws, w[i]);
    loom_tensor_init(&tkc, LOOM_F32, 4, cs, kc);
    loom_tensor_init(&tvc, LOOM_F32, 4, cs, vc);
    loom_tensor tq3, tqu3, tk3, tkr3, tv3;
    loom_tensor_init(&tq3, LOOM_F32, 3, hs, qb);
    loom_tensor_init(&tqu3, LOOM_F32, 3, hs, qu);
    loom_tensor_init(&tk3, LOOM_F32, 3, hs, kb);
    loom_tensor_init(&tkr3, LOOM_F32, 3, hs, kr);
    loom_tensor_init(&tv3, LOOM_F32, 3, hs, vb);
    loom_qkv_rope_params p = loom_qkv_rope_default_params();
    p.num_heads = p.num_key_value_heads = N, p.head_dim = D;
    p.cache.positions = pos;
    loom_rope_attrs ra = {.mode = p.rope_mode, .n_rot = 0, .theta = p.theta, .freq_scale = 0.0f,
                          .pos_offset = (int)p0};
    fused_ctx f = {.which = 2, .a = &tx, .b = &tw[0], .c = &tw[1], .d = &tw[2], .y = &tqf, .kc = &tkc,
                   .vc = &tvc, .params = &p};
    seq q = {.n = 6, .k = &tkr3, .v = &tv3, .kc = &tkc, .vc = &tvc, .kvp = &p.cache};
    q.st[0] = mm_step(x, Hd, w[0], wt, qb, M, HD, Hd);
    q.st[1] = mm_step(x, Hd, w[1], wt, kb, M, HD, Hd);
    q.st[2] = mm_step(x, Hd, w[2], wt, vb, M, HD, Hd);
    q.st[3] = op_step(LOOM_OP_ROPE, &tq3, NULL, &tqu3, &ra);
    q.st[4] = op_step(LOOM_OP_ROPE, &tk3, NULL, &tkr3, &ra);
    q.st[5] = (step){.kind = STEP_KV};
    double wb = 3.0 * (double)loom_dtype_row_bytes(wt, Hd) * (double)HD, th = 4.0 * (double)(M * HD);
    row("qkv_rope", M, loom_dtype_name(wt), o, &f, &q, 6.0 * (double)(M * Hd) * (double)HD, wb + 4.0 * th, wb + 14.0 * th, qf, qu, M * HD);
    void *bufs[] = {w[0], w[1], w[2], x, qf, qu, qb, kb, vb, kr, kc, vc, pos};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) loom_free_aligned(bufs[i]);
}

static int parse_dtype(const char *s, loom_dtype *t) {
    for (int d = 0; d < LOOM_DTYPE_COUNT; d++)
        if (strcmp(s, loom_dtype_name((loom_dtype)d)) == 0) return *t = (loom_dtype)d, 0;
    return -1;
}

int main(int argc, char **argv) {
    loom_ops_init(); /* the fused layer's ops in the op table */
    opts o = {.threads = {1, 2}, .n_threads = 2, .reps = 5};
    int ms[8] = {1, 512}, n_ms = 2;
    const char *wtypes = "f32,bf16", *ops = "add_rms_norm,ffn,qkv_rope";
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--cpu-time") == 0) { o.cpu_time = 1, i--; continue; }
        if (strcmp(a, "--sequential") == 0) { o.sequential = 1, i--; continue; }
        if (!v) { fprintf(stderr, "bench_fused: %s needs a value\n", a); return 2; }
        int ok = 1;
        if (strcmp(a, "--threads") == 0) ok = (o.n_threads = bench_parse_ints(v, o.threads, 8)) > 0;
        else if (strcmp(a, "--ms") == 0) ok = (n_ms = bench_parse_ints(v, ms, 8)) > 0;
        else if (strcmp(a, "--reps") == 0) ok = (o.reps = atoi(v)) > 0;
        else if (strcmp(a, "--wtypes") == 0) wtypes = v;
        else if (strcmp(a, "--ops") == 0) ops = v;
        else { fprintf(stderr, "bench_fused: unknown option %s\n", a); return 2; }
        if (!ok) { fprintf(stderr, "bench_fused: bad value for %s: %s\n", a, v); return 2; }
    }
    loom_dtype wt[8];
    int n_wt = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", wtypes);
    for (char *tok = strtok(list, ","); tok && n_wt < 8; tok = strtok(NULL, ","))
        if (parse_dtype(tok, &wt[n_wt++]) != 0 || loom_dtype_row_bytes(wt[n_wt - 1], HIDDEN) == 0 ||
            wt[n_wt - 1] == LOOM_I8 || wt[n_wt - 1] == LOOM_I32) {
            fprintf(stderr, "bench_fused: unknown weight dtype %s\n", tok);
            return 2;
        }
    const loom_cpu_features *cf = loom_cpu_get();
    printf("# bench_fused\n\n");
    bench_print_cpu();
    printf("isa %s; avx512f %d bf16 %d; L2 %d KiB, L3 %d KiB; reps %d (%s, after 1 warm-up)%s\n\n",
           loom_isa_name(loom_cpu_isa()), cf->avx512f, cf->avx512_bf16, cf->l2_bytes >> 10,
           cf->l3_bytes >> 10, o.reps,
           o.sequential ? "medians, all fused calls then all unfused"
                        : "rounds of fused, unfused, unfused, fused; medians, speed-up = median of the rounds' ratios",
           o.cpu_time ? "; 1-thread rows: thread CPU time" : "");
    printf("| op | M | weights | threads | fused ms | unfused ms | speed-up | fused MB | unfused MB | bytes ratio | fused GB/s | fused GFLOP/s | max rel diff |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int mi = 0; mi < n_ms; mi++) {
        if (strstr(ops, "add_rms_norm")) bench_add_rms_norm(&o, ms[mi]);
        for (int w = 0; w < n_wt; w++) {
            if (strstr(ops, "ffn")) bench_ffn(&o, ms[mi], wt[w]);
            if (strstr(ops, "qkv_rope")) bench_qkv_rope(&o, ms[mi], wt[w]);
        }
    }
    return 0;
}
