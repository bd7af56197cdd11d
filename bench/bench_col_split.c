/*
 * bench_col_split: why the decode attention + output projection in one kernel
 * (incre_attention_linear) is not faster than its two kernels on a CPU whose
 * decode is bound by main memory.
 *
 * The one kernel gives each thread whole kv heads, so each thread multiplies
 * its heads' columns of W_o (a column slice of every row of the row-major
 * matrix) where the two kernels' linear gives each thread whole rows. Both
 * read W_o once; this program times how fast each way reads it, and then the
 * two ways of the whole step.
 *
 *   reads  W [N, K] (f16) times one x, the threads' shares taken as
 *          rows     whole rows, rows split between the threads (linear's GEMV);
 *          cols     each thread the columns [t K/T, (t+1) K/T) of every row in
 *                   one GEMV call (ldw = K: incre_attention_linear with one
 *                   group a thread);
 *          blocked  the same columns copied once into a contiguous [N, K/T]
 *                   matrix per thread (a column-blocked layout of W).
 *   op     incre_attention_linear (f32 cache, `groups` groups, residual) against
 *          incre_flash_attention then linear (+ residual), at each --ctx keys.
 *   ffn    the decode ffn (one row, SiLU, residual; gate/up [H, N], down
 *          [N, H], f16) in one pass (its down projection reads column slices
 *          of Wd, 8 slices: the default for float weights on up to 8 threads)
 *          against its two phases (the down GEMV split by rows). --ffn 0: skip.
 *
 * Every timed call starts from cold caches (a buffer of 4x the L3, 128 MiB to
 * 512 MiB, is read by the calling thread before it, outside the time: the L3
 * and that thread's L2 are cold; another worker's L2 may keep up to its size
 * of the last call's data); the variants rotate in each
 * round and the ratios are medians of the rounds' ratios to the first variant
 * (rows; the two kernels), so the host's drift weighs on all alike.
 *
 *   bench_col_split [--threads 2] [--n 4096] [--k 4096] [--ctx 64,1024] [--groups 2,8] [--ffn 11008]
 *                   [--reps 31]
 *
 * K is heads of 128 (--k a multiple of 128). Exits 1 when a fused result
 * differs from the two kernels' beyond 1e-4 relative.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/rng.h"
#include "base/timer.h"
#include "bench_util.h"
#include "graph/ops_init.h"
#include "ops/matmul/matmul.h"
#include "ops/ops.h"
#include "ops/quant.h"

#define HEAD_DIM 128
#define MAX_T 8
#define MAX_REPS 64

static void *xalloc(size_t bytes) { return bench_alloc(bytes, "bench_col_split"); }

static float *randf(int64_t n, float amp, loom_rng *r) {
    float *v = xalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = amp * (2.0f * loom_rng_uniform(r) - 1.0f);
    return v;
}

/* ------------------------------------------------------------ cold caches */

static unsigned char *g_flush;
static size_t g_flush_bytes;

static void flush_caches(void) {
    volatile unsigned char sink = 0;
    for (size_t i = 0; i < g_flush_bytes; i += 64) sink ^= g_flush[i];
    (void)sink;
}

/* ------------------------------------------------------------ reads of W */

typedef struct reads {
    int mode; /* 0 rows, 1 cols, 2 blocked */
    int64_t N, K;
    const uint16_t *w;
    uint16_t *blk[MAX_T]; /* thread t's columns, [N, K/T] */
    const float *x;
    float *y, *yp[MAX_T];
    unsigned char *scratch; /* per thread, `per` bytes */
    size_t per;
} reads;

static void reads_worker(int ith, int nth, void *arg) {
    reads *r = arg;
    int64_t kc = r->K / nth;
    loom_matmul_args a = {.x = r->x, .ldx = r->K, .w = r->w, .ldw = r->K, .wtype = LOOM_F16, .y = r->y,
                          .ldy = r->N, .M = 1, .N = r->N, .K = r->K};
    if (r->mode == 0) {
        loom_matmul_run(&a, loom_cpu_isa(), ith, nth, r->scratch + r->per * (size_t)ith);
        return;
    }
    a.x = r->x + ith * kc, a.K = kc, a.y = r->yp[ith];
    if (r->mode == 1) a.w = r->w + ith * kc;
    else a.w = r->blk[ith], a.ldw = kc;
    loom_matmul_run(&a, loom_cpu_isa(), 0, 1, r->scratch + r->per * (size_t)ith);
}

/* ------------------------------------------------------------ graph op launches */

typedef struct launch {
    loom_op op;
    loom_kernel_args a;
    int phases;
    unsigned char *scratch;
    size_t per;
    _Atomic int arrive;
} launch;

typedef struct job {
    launch *l;
    int n;
    _Atomic int failed; /* set by any thread whose kernel failed */
    loom_pool *pool;
} job;

static void launch_init(launch *l, loom_op op, const loom_kernel_args *a, int nth) {
    const loom_op_info *info = loom_op_get(op);
    memset(l, 0, sizeof *l);
    l->op = op, l->a = *a;
    size_t s = info->scratch_size ? info->scratch_size(a->src, a->n_src, a->dst, a->attrs) : 0;
    l->per = (s + 63) & ~(size_t)63;
    l->scratch = xalloc(l->per * (size_t)nth);
    size_t sh = info->shared_size ? info->shared_size(a->src, a->n_src, a->dst, a->attrs) : 0;
    l->a.shared = sh ? xalloc(sh) : NULL, l->a.shared_bytes = sh;
    l->phases = loom_op_phases(info, a->src, a->n_src, a->attrs, nth, 0);
}

static void launch_free(launch *l) { loom_free_aligned(l->scratch), loom_free_aligned(l->a.shared); }

/* Each launch's phases, a barrier after each, as the executor runs them. */
static void job_worker(int ith, int nth, void *arg) {
    job *j = arg;
    for (int i = 0; i < j->n; i++) {
        launch *l = &j->l[i];
        for (int p = 0; p < l->phases; p++) {
            loom_kernel_args a = l->a;
            a.ith = ith, a.nth = nth, a.phase = p, a.arrive = nth > 1 ? &l->arrive : NULL;
            a.scratch = l->scratch + l->per * (size_t)ith, a.scratch_bytes = l->per;
            if (loom_op_kernel(l->op, loom_cpu_isa())(&a) != LOOM_OK) j->failed = 1;
            loom_pool_barrier(j->pool);
        }
    }
}

static void run_job(void *arg) {
    job *j = arg;
    loom_pool_run(j->pool, job_worker, j);
}

static loom_pool *g_pool;

static void run_reads(void *arg) { loom_pool_run(g_pool, reads_worker, arg); }

static void *f16_matrix(int64_t rows, int64_t cols, loom_rng *r, loom_tensor *t) {
    uint16_t *w = xalloc((size_t)rows * (size_t)cols * 2);
    for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++)
        w[i] = loom_f32_to_f16(0.05f * (2.0f * loom_rng_uniform(r) - 1.0f));
    loom_tensor_init(t, LOOM_F16, 2, (const int64_t[2]){rows, cols}, w);
    return w;
}

/* Rounds of the n calls fn[i](arg[i]), each from cold caches, the order
 * rotated each round; t[i]: median time, ratio[i]: median of the rounds' t_i / t_0. */
static void rounds(int n, void (*const *fn)(void *), void *const *arg, int reps, double *t, double *ratio) {
    double v[8][MAX_REPS], rr[MAX_REPS];
    for (int i = 0; i < n; i++) flush_caches(), fn[i](arg[i]); /* warm-up */
    for (int k = 0; k < reps; k++)
        for (int s = 0; s < n; s++) {
            int i = (s + k) % n;
            flush_caches();
            double t0 = loom_time_s();
            fn[i](arg[i]);
            v[i][k] = loom_time_s() - t0;
        }
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < reps; k++) rr[k] = v[i][k] / v[0][k];
        t[i] = bench_median(v[i], reps), ratio[i] = bench_median(rr, reps);
    }
}

/* The decode ffn, one pass against two phases. */
static int bench_ffn(int64_t D, int64_t H, int threads, int reps, loom_rng *r) {
    loom_tensor x, wg, wu, wd, res, y[2], h; /* h: the two phases' hidden buffer (f32 for f16 weights) */
    float *xv = randf(D, 1.0f, r), *rv = randf(D, 1.0f, r), *hv = xalloc(sizeof(float) * (size_t)H);
    loom_tensor_init(&h, LOOM_F32, 2, (const int64_t[2]){1, H}, hv);
    loom_tensor_init(&x, LOOM_F32, 2, (const int64_t[2]){1, D}, xv);
    loom_tensor_init(&res, LOOM_F32, 2, (const int64_t[2]){1, D}, rv);
    void *g = f16_matrix(H, D, r, &wg), *u = f16_matrix(H, D, r, &wu), *d = f16_matrix(D, H, r, &wd);
    loom_ffn_attrs at[2] = {{.act = LOOM_ACT_SILU, .act_precision = LOOM_ACT_PREC_Q8, .one_pass_rows = 0},
                            {.act = LOOM_ACT_SILU, .act_precision = LOOM_ACT_PREC_Q8, .one_pass_rows = 1,
                             .one_pass_slices = loom_ffn_one_pass_slices_for(threads)}};
    launch l[2];
    job j[2];
    for (int i = 0; i < 2; i++) {
        loom_tensor_init(&y[i], LOOM_F32, 2, (const int64_t[2]){1, D}, xalloc(sizeof(float) * (size_t)D));
        loom_kernel_args a = {.src = {&x, &wg, &wu, &wd, &res}, .n_src = 5, .dst = &y[i], .attrs = &at[i],
                              .dst_extra = {&h}, .n_dst_extra = 1};
        launch_init(&l[i], LOOM_OP_FFN, &a, threads);
        j[i] = (job){&l[i], 1, 0, g_pool};
    }
    void (*const fn[2])(void *) = {run_job, run_job};
    void *const arg[2] = {&j[0], &j[1]};
    double t[2], ratio[2];
    rounds(2, fn, arg, reps, t, ratio);
    int bad = j[0].failed || j[1].failed;
    if (bad) fprintf(stderr, "bench_col_split: an ffn launch failed: %s\n", loom_last_error());
    const float *a = y[0].data, *b = y[1].data;
    for (int64_t n = 0; n < D && !bad; n++)
        if (fabs((double)a[n] - (double)b[n]) > 1e-4 * (1.0 + fabs((double)a[n])))
            bad = 1, fprintf(stderr, "bench_col_split: ffn y[%lld] %.9g vs %.9g\n", (long long)n, (double)b[n],
                             (double)a[n]);
    printf("\n| ffn D x H | phases | two phases ms | one pass ms | one / two |\n|---|---:|---:|---:|---:|\n");
    printf("| %lld x %lld | %d / %d | %.3f | %.3f | %.3f |\n", (long long)D, (long long)H, l[0].phases, l[1].phases,
           t[0] * 1e3, t[1] * 1e3, ratio[1]);
    for (int i = 0; i < 2; i++) launch_free(&l[i]), loom_free_aligned(y[i].data);
    loom_free_aligned(g), loom_free_aligned(u), loom_free_aligned(d), loom_free_aligned(xv), loom_free_aligned(rv);
    loom_free_aligned(hv);
    return bad;
}

int main(int argc, char **argv) {
    int threads = 2, reps = 31, ctx[8] = {64, 1024}, n_ctx = 2, groups[8] = {2, 8}, n_groups = 2;
    int64_t N = 4096, K = 4096, F = 11008;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--threads") && v) threads = atoi(v), i++;
        else if (!strcmp(argv[i], "--reps") && v) reps = atoi(v), i++;
        else if (!strcmp(argv[i], "--n") && v) N = atoll(v), i++;
        else if (!strcmp(argv[i], "--k") && v) K = atoll(v), i++;
        else if (!strcmp(argv[i], "--ffn") && v) F = atoll(v), i++;
        else if (!strcmp(argv[i], "--ctx") && v) n_ctx = bench_parse_ints(v, ctx, 8), i++;
        else if (!strcmp(argv[i], "--groups") && v) n_groups = bench_parse_ints(v, groups, 8), i++;
        else {
            fprintf(stderr, "usage: bench_col_split [--threads T] [--n N] [--k K] [--ctx L,..] [--groups G,..] "
                            "[--ffn H] [--reps R]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > MAX_T || reps < 1 || reps > MAX_REPS || N < 1 || K < HEAD_DIM ||
        K % HEAD_DIM || (K / HEAD_DIM) % threads || n_ctx < 1 || n_groups < 1 || F < 0) {
        fprintf(stderr, "bench_col_split: threads 1-%d, reps 1-%d, K a multiple of %d heads of %d and of the "
                        "threads, and at least one --ctx and --groups\n", MAX_T, MAX_REPS, threads, HEAD_DIM);
        return 2;
    }
    for (int i = 0; i < n_ctx; i++)
        if (ctx[i] < 1) return fprintf(stderr, "bench_col_split: --ctx values >= 1\n"), 2;
    loom_ops_init();
    const loom_cpu_features *cf = loom_cpu_get();
    g_flush_bytes = (size_t)cf->l3_bytes * 4;
    if (g_flush_bytes < ((size_t)128 << 20)) g_flush_bytes = (size_t)128 << 20;
    if (g_flush_bytes > ((size_t)512 << 20)) g_flush_bytes = (size_t)512 << 20;
    g_flush = xalloc(g_flush_bytes);
    memset(g_flush, 1, g_flush_bytes);
    if (loom_pool_init(&g_pool, threads) != LOOM_OK) return fprintf(stderr, "%s\n", loom_last_error()), 1;
    loom_rng rng;
    loom_rng_init(&rng, 7, 1);

    printf("# bench_col_split: W [%lld, %lld] f16 read from cold caches, %d threads, %d rounds\n",
           (long long)N, (long long)K, threads, reps);
    bench_print_cpu();
    printf("isa %s; L2 %d KiB, L3 %d KiB\n\n", loom_isa_name(loom_cpu_isa()), cf->l2_bytes >> 10, cf->l3_bytes >> 10);

    /* W, x and the reads */
    loom_tensor tw;
    uint16_t *w = f16_matrix(N, K, &rng, &tw);
    float *x = randf(K, 1.0f, &rng);
    reads rd[3];
    int64_t kc = K / threads;
    loom_matmul_args sa = {.x = x, .ldx = K, .w = w, .ldw = K, .wtype = LOOM_F16, .M = 1, .N = N, .K = K};
    size_t per = (loom_matmul_scratch_size(&sa) + 63) & ~(size_t)63;
    for (int m = 0; m < 3; m++) {
        rd[m] = (reads){.mode = m, .N = N, .K = K, .w = w, .x = x, .y = xalloc(sizeof(float) * (size_t)N),
                        .scratch = xalloc(per * (size_t)threads), .per = per};
        for (int t = 0; t < threads; t++) rd[m].yp[t] = xalloc(sizeof(float) * (size_t)N);
    }
    for (int t = 0; t < threads; t++) {
        rd[2].blk[t] = xalloc((size_t)N * (size_t)kc * 2);
        for (int64_t n = 0; n < N; n++) memcpy(rd[2].blk[t] + n * kc, w + n * K + t * kc, (size_t)kc * 2);
    }
    void (*const rfn[3])(void *) = {run_reads, run_reads, run_reads};
    void *const rarg[3] = {&rd[0], &rd[1], &rd[2]};
    double t[8], ratio[8];
    rounds(3, rfn, rarg, reps, t, ratio);
    double bytes = (double)N * (double)K * 2.0;
    static const char *const rname[3] = {"rows (linear's split)", "cols (a thread's columns of every row)",
                                         "blocked (those columns contiguous)"};
    printf("| W read as | ms | GB/s | / rows |\n|---|---:|---:|---:|\n");
    for (int m = 0; m < 3; m++) printf("| %s | %.3f | %.1f | %.3f |\n", rname[m], t[m] * 1e3, bytes / t[m] / 1e9, ratio[m]);
    /* the three agree (cols and blocked: the per-thread partials summed) */
    for (int64_t n = 0; n < N; n++)
        for (int m = 1; m < 3; m++) {
            double s = 0.0;
            for (int tt = 0; tt < threads; tt++) s += rd[m].yp[tt][n];
            if (fabs(s - rd[0].y[n]) > 1e-3 * (1.0 + fabs(rd[0].y[n])))
                return fprintf(stderr, "bench_col_split: read %d row %lld: %g vs %g\n", m, (long long)n, s,
                               (double)rd[0].y[n]), 1;
        }

    /* the op: incre_attention_linear against incre_flash_attention + linear */
    int64_t H = K / HEAD_DIM;
    float *res = randf(N, 1.0f, &rng), *q = randf(K, 1.0f, &rng), *o = xalloc(sizeof(float) * (size_t)K);
    printf("\n| keys | groups | two kernels ms | one kernel ms | one / two |\n|---:|---:|---:|---:|---:|\n");
    int bad = 0;
    for (int c = 0; c < n_ctx && !bad; c++) {
        int64_t L = ctx[c];
        float *k = randf(L * K, 1.0f, &rng), *v = randf(L * K, 1.0f, &rng);
        loom_tensor tq, tk, tv, to, to2, tres, yu, yf;
        loom_tensor_init(&tq, LOOM_F32, 4, (const int64_t[4]){1, 1, H, HEAD_DIM}, q);
        loom_tensor_init(&tk, LOOM_F32, 4, (const int64_t[4]){1, L, H, HEAD_DIM}, k);
        loom_tensor_init(&tv, LOOM_F32, 4, (const int64_t[4]){1, L, H, HEAD_DIM}, v);
        loom_tensor_init(&to, LOOM_F32, 4, (const int64_t[4]){1, 1, H, HEAD_DIM}, o);
        loom_tensor_init(&to2, LOOM_F32, 2, (const int64_t[2]){1, K}, o);
        loom_tensor_init(&tres, LOOM_F32, 2, (const int64_t[2]){1, N}, res);
        loom_tensor_init(&yu, LOOM_F32, 2, (const int64_t[2]){1, N}, xalloc(sizeof(float) * (size_t)N));
        loom_tensor_init(&yf, LOOM_F32, 2, (const int64_t[2]){1, N}, xalloc(sizeof(float) * (size_t)N));
        loom_incre_flash_attention_attrs aa = LOOM_INCRE_FLASH_ATTENTION_ATTRS_DEFAULT;
        aa.out_f32 = 1;
        loom_linear_attrs la = {.act_precision = LOOM_ACT_PREC_Q8, .residual = 1};
        launch two[2];
        loom_kernel_args a1 = {.src = {&tq, &tk, &tv}, .n_src = 3, .dst = &to, .attrs = &aa};
        loom_kernel_args a2 = {.src = {&to2, &tw, &tres}, .n_src = 3, .dst = &yu, .attrs = &la};
        launch_init(&two[0], LOOM_OP_INCRE_FLASH_ATTENTION, &a1, threads);
        launch_init(&two[1], LOOM_OP_LINEAR, &a2, threads);
        job ju = {two, 2, 0, g_pool};
        for (int g = 0; g < n_groups && !bad; g++) {
            loom_incre_attention_linear_attrs ia = {.attn = aa, .act_precision = LOOM_ACT_PREC_Q8, .residual = 1,
                                                    .groups = groups[g]};
            launch one;
            loom_kernel_args a3 = {.src = {&tq, &tk, &tv, &tw, &tres}, .n_src = 5, .dst = &yf, .attrs = &ia};
            launch_init(&one, LOOM_OP_INCRE_ATTENTION_LINEAR, &a3, threads);
            job jf = {&one, 1, 0, g_pool};
            void (*const ofn[2])(void *) = {run_job, run_job};
            void *const oarg[2] = {&ju, &jf};
            rounds(2, ofn, oarg, reps, t, ratio);
            if (ju.failed || jf.failed) {
                fprintf(stderr, "bench_col_split: a launch failed: %s\n", loom_last_error());
                return 1;
            }
            const float *a = yu.data, *b = yf.data;
            for (int64_t n = 0; n < N; n++)
                if (fabs((double)a[n] - (double)b[n]) > 1e-4 * (1.0 + fabs((double)a[n]))) {
                    fprintf(stderr, "bench_col_split: keys %lld groups %d: y[%lld] %.9g vs %.9g\n", (long long)L,
                            groups[g], (long long)n, (double)b[n], (double)a[n]);
                    bad = 1;
                    break;
                }
            printf("| %lld | %d | %.3f | %.3f | %.3f |\n", (long long)L, groups[g], t[0] * 1e3, t[1] * 1e3, ratio[1]);
            launch_free(&one);
        }
        launch_free(&two[0]), launch_free(&two[1]);
        loom_free_aligned(k), loom_free_aligned(v), loom_free_aligned(yu.data), loom_free_aligned(yf.data);
    }
    if (!bad && F > 0) bad = bench_ffn(N, F, threads, reps, &rng);
    for (int m = 0; m < 3; m++) {
        loom_free_aligned(rd[m].y), loom_free_aligned(rd[m].scratch);
        for (int tt = 0; tt < threads; tt++) loom_free_aligned(rd[m].yp[tt]), loom_free_aligned(rd[m].blk[tt]);
    }
    loom_free_aligned(w), loom_free_aligned(x), loom_free_aligned(res), loom_free_aligned(q), loom_free_aligned(o);
    loom_free_aligned(g_flush);
    loom_pool_free(g_pool);
    return bad;
}
