/*
 * bench_matmul: loom's matmul family on square, LLM-prefill and decode shapes,
 * per weight dtype and thread count; median of repeated runs after warm-up.
 * With -DLOOM_BENCH_OPENBLAS=ON the same shapes run through cblas_sgemm /
 * cblas_sgemv in the same process and the ratio loom/OpenBLAS is printed. A
 * STREAM-like read bandwidth is measured in the same run; decode rows show the
 * fraction of it that GEMV reaches (W rotated over copies totalling >= 8x L3
 * and >= 1 GiB, so it comes from DRAM). Output is a Markdown table.
 *
 *   bench_matmul [--threads 1,2] [--dtypes f32,bf16,...] [--sets square,prefill,decode,small,head]
 *                [--act q8,full] [--reps N] [--isa LEVEL] [--quick] [--hot] [--ab]
 *
 * --act: activation precisions of the quantized dtypes (q8: x quantized to
 * 8 bits, int8 products; full: f32 x, blocks dequantized in the kernel).
 *
 * --hot: M = 1 rows read one copy of W, from the caches when it fits (the
 * kernel's compute ceiling rather than DRAM's).
 *
 * --ab: f32 rows time loom and OpenBLAS alternately, in rounds A B B A, and
 * the ratio is the median of the rounds' ratios (bench_time_ab), so a drift
 * of the host weighs on both alike. OpenBLAS's idle threads spin for about
 * 2^28 cycles after a call and would take a core from loom's next call (2-thread
 * decode rows fell to 0.66-0.68x from ~1.0); OPENBLAS_THREAD_TIMEOUT=4 puts them to
 * sleep at once, for a wake-up per OpenBLAS call (tens of microseconds, against
 * 2-9 ms for a decode row).
 *
 * The OpenBLAS core: see blas_pick_core. The header names the core OpenBLAS
 * chose first and the one the ratios were measured against.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/rng.h"
#include "bench_util.h"
#include "ops/matmul/matmul.h"
#include "ops/quant.h"

#ifdef LOOM_BENCH_OPENBLAS
#include <cblas.h>
#include <strings.h>
#include <unistd.h>
/* Declared here too for cblas.h files without it (OpenBLAS has exported it since 0.2.x). */
char *openblas_get_corename(void);
#endif

typedef struct { const char *set; int64_t M, N, K; } shape;

static const shape all_shapes[] = {
    {"square", 1024, 1024, 1024},   {"square", 2048, 2048, 2048},  {"square", 4096, 4096, 4096},
    {"prefill", 512, 4096, 4096},   {"prefill", 512, 11008, 4096}, {"prefill", 512, 4096, 11008},
    {"decode", 1, 4096, 4096},      {"decode", 1, 11008, 4096},    {"decode", 1, 4096, 11008},
    /* a small model's decode (SmolLM2-135M: hidden 576, FFN 1536), and 4 rows at once */
    {"small", 1, 576, 576},         {"small", 1, 1536, 576},       {"small", 1, 576, 1536},
    {"small", 4, 1536, 576},        {"small", 512, 1536, 576},     {"small", 512, 576, 1536},
    /* LM heads at decode: SmolLM2's 49152 x 576 (short rows) and Llama 2's 32000 x 4096 */
    {"head", 1, 49152, 576},        {"head", 16, 49152, 576},      {"head", 1, 32000, 4096},
    /* a decode step of 16 sequences (the batch engine): SmolLM2's and Llama 2 7B's projections */
    {"batch", 16, 1536, 576},       {"batch", 16, 576, 1536},      {"batch", 16, 4096, 4096},
    {"batch", 16, 11008, 4096},
};

/* Decode rows (and batch decode steps, M <= 32) cycle through enough copies of W (at least 8x the L3 size and 1 GiB in
 * all) that every call streams W from DRAM, as a real decode step does with a
 * model far larger than the cache; otherwise small quantized W would be timed
 * from L3. */
#define MAX_COPIES 160

typedef struct {
    loom_pool *pool;
    loom_matmul_args a;
    void *copies[MAX_COPIES];
    int n_copies, next;
    loom_isa isa;
    unsigned char *scratch;
    size_t scratch_per;
    int failed;
} run_ctx;

static void worker(int ith, int nth, void *arg) {
    run_ctx *c = arg;
    if (loom_matmul_run(&c->a, c->isa, ith, nth, c->scratch + c->scratch_per * (size_t)ith) != LOOM_OK)
        c->failed = 1;
}

static void run_loom(void *arg) {
    run_ctx *c = arg;
    c->a.w = c->copies[c->next++ % c->n_copies];
    loom_pool_run(c->pool, worker, c);
}

#ifdef LOOM_BENCH_OPENBLAS
/* next: the rotation counter of W's copies, shared with loom's run_ctx, so that
 * with --ab neither side reads the copy the other has just pulled into L3. */
typedef struct { const float *x, *w; float *y; int M, N, K; void **copies; int n_copies, *next; } blas_ctx;
static void run_blas(void *arg) {
    blas_ctx *b = arg;
    b->w = b->copies[(*b->next)++ % b->n_copies];
    if (b->M == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, b->N, b->K, 1.0f, b->w, b->K, b->x, 1, 0.0f, b->y, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b->M, b->N, b->K, 1.0f, b->x, b->K,
                    b->w, b->K, 0.0f, b->y, b->N);
}

/* The OpenBLAS core (its set of kernels) the ratios are measured against. A
 * DYNAMIC_ARCH OpenBLAS picks its core from cpuid when it loads; a release that
 * does not know the CPU falls back to generic kernels (0.3.21 on a Xeon of
 * family 6 model 207: 33 GFLOP/s instead of ~160), and loom would look 4-5x
 * ahead of an OpenBLAS that can do far better. OPENBLAS_CORETYPE chooses the
 * core, but only before the library initialises, which it does before main:
 * so on an AVX-512 CPU whose chosen core is not an AVX-512 one, the program
 * runs itself again with OPENBLAS_CORETYPE set. BLAS_REEXEC marks those runs
 * ("FIRST;TRIED,TRIED": the core OpenBLAS chose in the first run, the names
 * asked for so far), so each candidate is asked for at most once: 0.3.21
 * refuses the name Cooperlake ("Core not found") and falls back to cpuid, so
 * where cpuid fails, SkylakeX is asked for next. An OPENBLAS_CORETYPE the user
 * set is kept, with a warning if it throws away AVX-512. */
#define BLAS_REEXEC "LOOM_BENCH_BLAS_REEXEC"

typedef struct {
    char first[32];  /* the core OpenBLAS chose in the first run */
    char final[32];  /* the core this run measures */
    char how[256];   /* how the final core came to be chosen */
} blas_core;

static int blas_core_has_avx512(const char *name) {
    static const char *const cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++)
        if (strcasecmp(name, cores[i]) == 0) return 1;
    return 0;
}

/* Whether name is one of the comma-separated names in list. */
static int in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncasecmp(p, name, n) == 0) return 1;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

/* Fills *bc; returns only if this run keeps its core (execv replaces the process). */
static void blas_pick_core(char **argv, blas_core *bc) {
    const loom_cpu_features *f = loom_cpu_get();
    const char *now = openblas_get_corename(), *mark = getenv(BLAS_REEXEC);
    const char *env = getenv("OPENBLAS_CORETYPE");
    char tried[128] = "";
    snprintf(bc->final, sizeof bc->final, "%s", now ? now : "unknown");
    snprintf(bc->first, sizeof bc->first, "%s", bc->final);
    if (mark) {
        const char *semi = strchr(mark, ';');
        size_t len = semi ? (size_t)(semi - mark) : strlen(mark);
        snprintf(bc->first, sizeof bc->first, "%.*s", (int)(len < 31 ? len : 31), mark);
        if (semi) snprintf(tried, sizeof tried, "%s", semi + 1);
    }
    if (mark && blas_core_has_avx512(bc->final)) {
        snprintf(bc->how, sizeof bc->how, "bench_matmul ran itself again with OPENBLAS_CORETYPE=%s: %s has no AVX-512 kernels",
                 env ? env : "?", bc->first);
        return;
    }
    if (!f->avx512f || blas_core_has_avx512(bc->final)) {
        if (env) snprintf(bc->how, sizeof bc->how, "OPENBLAS_CORETYPE=%s, set by the user", env);
        else snprintf(bc->how, sizeof bc->how, "OpenBLAS's own choice%s", f->avx512f ? "" : "; no AVX-512 on this CPU");
        return;
    }
    if (env && !mark) {
        fprintf(stderr, "bench_matmul: warning: OPENBLAS_CORETYPE=%s gives OpenBLAS's %s kernels, without AVX-512, "
                        "on an AVX-512 CPU: loom/OpenBLAS flatters loom\n", env, bc->final);
        snprintf(bc->how, sizeof bc->how, "OPENBLAS_CORETYPE=%s, set by the user; not an AVX-512 core: the ratios flatter loom", env);
        return;
    }
    const char *want[2];
    int n_want = 0;
    if (f->avx512_bf16) want[n_want++] = "Cooperlake";
    want[n_want++] = "SkylakeX";
    for (int i = 0; i < n_want; i++) {
        if (in_list(tried, want[i])) continue;
        char next[256];
        snprintf(next, sizeof next, "%s;%s%s%s", bc->first, tried, tried[0] ? "," : "", want[i]);
        fprintf(stderr, "bench_matmul: OpenBLAS runs its %s kernels, without AVX-512, on an AVX-512 CPU: "
                        "running again with OPENBLAS_CORETYPE=%s\n", bc->final, want[i]);
        fflush(stdout);
        fflush(stderr);
        if (setenv(BLAS_REEXEC, next, 1) == 0 && setenv("OPENBLAS_CORETYPE", want[i], 1) == 0)
            execv("/proc/self/exe", argv);
        fprintf(stderr, "bench_matmul: warning: cannot run again with OPENBLAS_CORETYPE=%s\n", want[i]);
        snprintf(bc->how, sizeof bc->how, "no AVX-512 core: running again failed; the ratios flatter loom");
        return;
    }
    fprintf(stderr, "bench_matmul: warning: OpenBLAS gave no AVX-512 core for OPENBLAS_CORETYPE=%s: "
                    "loom/OpenBLAS flatters loom\n", tried);
    snprintf(bc->how, sizeof bc->how, "no AVX-512 core: OpenBLAS refused OPENBLAS_CORETYPE=%s; the ratios flatter loom",
             tried);
}
#endif

static int parse_dtype(const char *s, loom_dtype *t) {
    for (int d = 0; d < LOOM_DTYPE_COUNT; d++)
        if (strcmp(s, loom_dtype_name((loom_dtype)d)) == 0) {
            *t = (loom_dtype)d;
            return 0;
        }
    return -1;
}

/* W[N, K] of dtype t from the f32 weights (converted row by row). */
static void *make_weights(loom_dtype t, const float *w32, int64_t N, int64_t K) {
    size_t row = loom_dtype_row_bytes(t, K);
    unsigned char *w = loom_alloc_aligned(row * (size_t)N, 64);
    if (!w) return NULL;
    for (int64_t n = 0; n < N; n++) {
        const float *src = w32 + n * K;
        void *dst = w + row * (size_t)n;
        if (t == LOOM_F32) memcpy(dst, src, row);
        else if (t == LOOM_F16)
            for (int64_t k = 0; k < K; k++) ((uint16_t *)dst)[k] = loom_f32_to_f16(src[k]);
        else if (t == LOOM_BF16)
            for (int64_t k = 0; k < K; k++) ((uint16_t *)dst)[k] = loom_f32_to_bf16(src[k]);
        else loom_quantize_row(t, src, dst, K);
    }
    return w;
}

int main(int argc, char **argv) {
    int threads[8] = {1, 2}, n_threads = 2, reps = 5, quick = 0, hot = 0, ab = 0, packs[2] = {0}, n_packs = 1;
    const char *dtypes = "f32,f16,bf16,q8_0,q4_0,q4_1", *sets = "square,prefill,decode", *isa_name = NULL;
    const char *acts = "q8";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf("usage: bench_matmul [--threads 1,2] [--dtypes f32,f16,bf16,q8_0,q4_0,q4_1]\n"
                   "                    [--sets square,prefill,decode,small,head] [--act q8,full] [--reps N]\n"
                   "                    [--isa ref|generic|avx2|avx512] [--quick] [--hot] [--ab] [--pack 0,1]\n"
                   "Defaults: --threads 1,2, all dtypes, --sets square,prefill,decode, --act q8, --reps 5, --pack 0.\n"
                   "--pack 1: quantized W packed once for the GEMM first (loom_packed_weights, as models'\n"
                   "are at load on a VNNI CPU); --pack 0,1 runs both.\n"
                   "Built with -DLOOM_BENCH_OPENBLAS=ON, f32 rows also run OpenBLAS; on an AVX-512 CPU the\n"
                   "program runs itself again with OPENBLAS_CORETYPE set if OpenBLAS chose a core without\n"
                   "AVX-512 (a user's OPENBLAS_CORETYPE is kept, with a warning). --ab: f32 rows time loom\n"
                   "and OpenBLAS alternately (rounds A B B A; the ratio is the median of the rounds'),\n"
                   "to be run with OPENBLAS_THREAD_TIMEOUT=4.\n");
            return 0;
        }
        if (strcmp(a, "--quick") == 0) { quick = 1; continue; }
        if (strcmp(a, "--hot") == 0) { hot = 1; continue; }
        if (strcmp(a, "--ab") == 0) { ab = 1; continue; }
        if (!v) { fprintf(stderr, "bench_matmul: %s needs a value\n", a); return 2; }
        if (strcmp(a, "--threads") == 0) n_threads = bench_parse_ints(v, threads, 8);
        else if (strcmp(a, "--dtypes") == 0) dtypes = v;
        else if (strcmp(a, "--sets") == 0) sets = v;
        else if (strcmp(a, "--reps") == 0) reps = atoi(v);
        else if (strcmp(a, "--isa") == 0) isa_name = v;
        else if (strcmp(a, "--act") == 0) acts = v;
        else if (strcmp(a, "--pack") == 0) { /* 0, 1, 0,1 or 1,0 */
            n_packs = 0;
            for (const char *q = v; *q && n_packs < 2; q++)
                if (*q == '0' || *q == '1') packs[n_packs++] = *q == '1';
                else if (*q != ',') n_packs = -1;
        }
        else { fprintf(stderr, "bench_matmul: unknown option %s\n", a); return 2; }
        i++;
    }
#ifdef LOOM_BENCH_OPENBLAS
    if (ab && !getenv("OPENBLAS_THREAD_TIMEOUT"))
        fprintf(stderr, "bench_matmul: warning: --ab without OPENBLAS_THREAD_TIMEOUT=4: OpenBLAS's idle threads "
                        "spin after each call and take a core from loom's next one\n");
#else
    if (ab) { fprintf(stderr, "bench_matmul: --ab compares with OpenBLAS: configure with -DLOOM_BENCH_OPENBLAS=ON\n"); return 2; }
#endif
    if (n_threads < 1 || reps < 1 || n_packs < 1) {
        fprintf(stderr, "bench_matmul: bad --threads, --reps or --pack\n");
        return 2;
    }
    loom_isa isa = loom_cpu_isa();
    if (isa_name && (loom_isa_parse(isa_name, &isa) != LOOM_OK || loom_cpu_set_isa(isa) != LOOM_OK)) {
        fprintf(stderr, "bench_matmul: unsupported --isa %s\n", isa_name);
        return 2;
    }
    const loom_cpu_features *f = loom_cpu_get();
#ifdef LOOM_BENCH_OPENBLAS
    blas_core bc;
    blas_pick_core(argv, &bc);
#endif
    printf("# bench_matmul\n\n");
    bench_print_cpu();
    printf("isa %s; avx512f %d bf16 %d vnni %d; L1d %d KiB, L2 %d KiB, L3 %d KiB; reps %d (median after 1 warm-up)\n",
           loom_isa_name(isa), f->avx512f, f->avx512_bf16, f->avx512_vnni, f->l1d_bytes >> 10,
           f->l2_bytes >> 10, f->l3_bytes >> 10, reps);
#ifdef LOOM_BENCH_OPENBLAS
    printf("openblas %s\n", openblas_get_config());
    printf("openblas core: first %s, final %s (%s)\n\n", bc.first, bc.final, bc.how);
#else
    printf("openblas: not linked (configure with -DLOOM_BENCH_OPENBLAS=ON for the f32 comparison)\n\n");
#endif

    double read_bw[8];
    for (int t = 0; t < n_threads; t++) {
        loom_pool *pool;
        if (loom_pool_init(&pool, threads[t]) != LOOM_OK) return 1;
        read_bw[t] = bench_read_bandwidth(pool, (size_t)512 << 20, reps);
        loom_pool_free(pool);
        printf("read bandwidth, %d thread%s: %.1f GB/s\n", threads[t], threads[t] > 1 ? "s" : "", read_bw[t]);
    }
    loom_act_precision act_list[2];
    int n_acts = 0;
    char alist[64];
    snprintf(alist, sizeof alist, "%s", acts);
    for (char *tok = strtok(alist, ","); tok && n_acts < 2; tok = strtok(NULL, ","))
        if (loom_act_precision_parse(tok, &act_list[n_acts++]) != LOOM_OK) {
            fprintf(stderr, "bench_matmul: %s\n", loom_last_error());
            return 2;
        }
#ifdef LOOM_BENCH_OPENBLAS
    printf("\nOpenBLAS GFLOP/s and loom/OpenBLAS: OpenBLAS's %s kernels; %s\n", bc.final,
           ab ? "loom and OpenBLAS alternate (--ab: rounds A B B A, medians over rounds)"
              : "all of loom's calls, then all of OpenBLAS's");
#endif
    printf("\n| set | M | N | K | dtype | act | packed | threads | ms | GFLOP/s | GB/s | OpenBLAS GFLOP/s | loom/OpenBLAS | %% of read BW |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");

    for (size_t s = 0; s < sizeof all_shapes / sizeof all_shapes[0]; s++) {
        const shape *sh = &all_shapes[s];
        if (!strstr(sets, sh->set)) continue;
        if (quick && sh->K > 4096 && sh->M > 1) continue;
        if (quick && sh->M == 4096) continue;
        int64_t M = sh->M, N = sh->N, K = sh->K;
        float *x = loom_alloc_aligned((size_t)(M * K) * 4, 64), *w32 = loom_alloc_aligned((size_t)(N * K) * 4, 64);
        float *y = loom_alloc_aligned((size_t)(M * N) * 4, 64);
        if (!x || !w32 || !y) { fprintf(stderr, "bench_matmul: out of memory\n"); return 1; }
        loom_rng rng;
        loom_rng_init(&rng, 1234, (uint64_t)s);
        for (int64_t i = 0; i < M * K; i++) x[i] = loom_rng_uniform(&rng) - 0.5f;
        for (int64_t i = 0; i < N * K; i++) w32[i] = (loom_rng_uniform(&rng) - 0.5f) * 0.1f;
        char list[256];
        snprintf(list, sizeof list, "%s", dtypes);
        for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
            loom_dtype t;
            if (parse_dtype(tok, &t) != 0) { fprintf(stderr, "bench_matmul: unknown dtype %s\n", tok); return 2; }
            double wbytes = (double)loom_dtype_row_bytes(t, K) * (double)N;
            int n_copies = 1;
            if (M <= 32 && !hot) {
                double l3 = f->l3_bytes > 0 ? (double)f->l3_bytes : 32.0 * (1 << 20);
                double want = 8.0 * l3 > (double)(1 << 30) ? 8.0 * l3 : (double)(1 << 30);
                n_copies = (int)(want / wbytes) + 1;
                if (n_copies > MAX_COPIES) n_copies = MAX_COPIES;
            }
            void *copies[MAX_COPIES];
            for (int i = 0; i < n_copies; i++)
                if (!(copies[i] = make_weights(t, w32, N, K))) {
                    fprintf(stderr, "bench_matmul: out of memory\n");
                    return 1;
                }
            int na = loom_dtype_is_quantized(t) ? n_acts : 1;
            for (int pi = 0; pi < n_packs; pi++)
            for (int ai = 0; ai < na; ai++)
            for (int ti = 0; ti < n_threads; ti++) {
                loom_packed_weights *pw = NULL;
                if (packs[pi] && (!loom_dtype_is_quantized(t) || act_list[ai] == LOOM_ACT_PREC_FULL)) continue;
                if (packs[pi]) {
                    loom_pack_desc pd[MAX_COPIES];
                    for (int i = 0; i < n_copies; i++) pd[i] = (loom_pack_desc){copies[i], t, N, K, K};
                    if (loom_packed_weights_create(pd, n_copies, isa, &pw) != LOOM_OK) {
                        fprintf(stderr, "bench_matmul: %s\n", loom_last_error());
                        return 1;
                    }
                    if (loom_packed_weights_count(pw) == 0) { /* no packed form at this level */
                        loom_packed_weights_free(pw);
                        continue;
                    }
                }
                int nt = threads[ti];
                loom_act_precision act = loom_dtype_is_quantized(t) ? act_list[ai] : LOOM_ACT_PREC_DEFAULT;
                run_ctx c = {.a = {.x = x, .ldx = K, .w = copies[0], .ldw = K, .wtype = t, .y = y,
                                   .ldy = N, .M = M, .N = N, .K = K, .act = act},
                             .n_copies = n_copies, .isa = isa};
                memcpy(c.copies, copies, sizeof(void *) * (size_t)n_copies);
                if (loom_pool_init(&c.pool, nt) != LOOM_OK) return 1;
                c.scratch_per = (loom_matmul_scratch_size(&c.a) + 63) & ~(size_t)63;
                c.scratch = loom_alloc_aligned(c.scratch_per * (size_t)nt, 64);
                double sec = 0;
#ifdef LOOM_BENCH_OPENBLAS
                double bsec = 0, ratio_ab = 0;
                blas_ctx b = {x, w32, y, (int)M, (int)N, (int)K, copies, n_copies, &c.next};
                if (t == LOOM_F32) openblas_set_num_threads(nt);
                if (t == LOOM_F32 && ab) bench_time_ab(run_loom, &c, run_blas, &b, 1, reps, 0, &sec, &bsec, &ratio_ab);
                else
#endif
                    sec = bench_time(run_loom, &c, 1, reps);
                if (c.failed) { fprintf(stderr, "bench_matmul: matmul failed: %s\n", loom_last_error()); return 1; }
                double gflops = 2.0 * M * N * K / sec / 1e9;
                double gbs = (wbytes + 4.0 * (M * K + M * N)) / sec / 1e9;
                char blas[32] = "-", ratio[32] = "-", frac[32] = "-";
#ifdef LOOM_BENCH_OPENBLAS
                if (t == LOOM_F32) { /* the f32 copies are exactly w32 */
                    if (!ab) bsec = bench_time(run_blas, &b, 1, reps);
                    snprintf(blas, sizeof blas, "%.1f", 2.0 * M * N * K / bsec / 1e9);
                    snprintf(ratio, sizeof ratio, "%.2f", ab ? ratio_ab : bsec / sec);
                }
#endif
                if (M <= 32 && !hot) snprintf(frac, sizeof frac, "%.0f%%", 100.0 * gbs / read_bw[ti]);
                printf("| %s | %lld | %lld | %lld | %s | %s | %s | %d | %.4f | %.1f | %.1f | %s | %s | %s |\n", sh->set,
                       (long long)M, (long long)N, (long long)K, tok,
                       act == LOOM_ACT_PREC_DEFAULT ? "-" : loom_act_precision_name(act), pw ? "yes" : "no", nt,
                       sec * 1e3, gflops,
                       gbs, blas, ratio, frac);
                fflush(stdout);
                loom_free_aligned(c.scratch);
                loom_pool_free(c.pool);
                loom_packed_weights_free(pw);
            }
            for (int i = 0; i < n_copies; i++) loom_free_aligned(copies[i]);
        }
        loom_free_aligned(x);
        loom_free_aligned(w32);
        loom_free_aligned(y);
    }
    return 0;
}
