/* Forward programs (graph/program.h): compiled once, stepped many times.
 * - a program reused over many steps gives the bytes a freshly compiled one
 *   gives at every step, in every mode, and agrees with the graph built for
 *   the exact step;
 * - stepping allocates nothing, counted for the whole process (every malloc,
 *   calloc, realloc and aligned allocation) after the first step;
 * - 1, 2 and 3 threads give identical bytes;
 * - steps outside the bucket and builders or rules a compiled program cannot
 *   honour are refused with a message. */
#include "check.h"

#include <stdint.h>

#include "graph/program.h"
#include "test_fusion_common.h"

/* ------------------------------------------------------------ counting every allocation */

static volatile long n_allocs;
static volatile int counting;

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOOM_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define LOOM_TEST_ASAN 1
#endif

#ifdef LOOM_TEST_ASAN
/* ASan owns malloc: count through its hook instead of replacing it (declared
 * here: gcc does not install the sanitizer headers). */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
static void on_malloc(const volatile void *p, size_t size) {
    (void)p, (void)size;
    if (counting) n_allocs++;
}
static void on_free(const volatile void *p) { (void)p; }
static void count_init(void) { __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free); }
#else
/* The process's allocator functions, wrapping glibc's own entry points. */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
void *malloc(size_t n) {
    if (counting) n_allocs++;
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
    if (counting) n_allocs++;
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
    if (counting) n_allocs++;
    return __libc_realloc(p, n);
}
int posix_memalign(void **p, size_t align, size_t n) {
    if (counting) n_allocs++;
    *p = __libc_memalign(align, n);
    return *p ? 0 : 12; /* ENOMEM */
}
void *aligned_alloc(size_t align, size_t n) {
    if (counting) n_allocs++;
    return __libc_memalign(align, n);
}
static void count_init(void) {}
#endif

/* ------------------------------------------------------------ a small model as a program */

typedef struct tctx {
    tmodel *m;
    int32_t ids[64];   /* the step's tokens: the programs' input */
    int all_logits;
} tctx;

static loom_status tbuild(void *ctx, loom_graph *g, const loom_step *s, int *out) {
    tctx *t = ctx;
    *out = tm_build(t->m, g, t->ids, s->n_rows, s->pos, t->all_logits);
    return loom_graph_status(g);
}

static loom_status compile(loom_executor *e, tctx *t, const char *name, int rows, loom_program **p) {
    loom_program_desc d = {.name = name, .build = tbuild, .ctx = t, .max_rows = rows, .max_end = t->m->ctx};
    return loom_program_compile(e, &d, p);
}

/* Runs rows tokens of ids at pos through p; copies the output's V logits of the last row. */
static int step(loom_program *p, tctx *t, const int32_t *ids, int rows, int pos, float *logits) {
    memcpy(t->ids, ids, (size_t)rows * sizeof *ids);
    loom_step s = {.n_rows = rows, .pos = pos, .n_out = 1};
    loom_status st = loom_program_run(p, &s);
    if (st != LOOM_OK) {
        fprintf(stderr, "step %d rows at %d: %s\n", rows, pos, loom_last_error());
        return 0;
    }
    const loom_tensor *o = loom_program_output(p);
    int V = t->m->c.vocab_size;
    memcpy(logits, (const float *)o->data + (size_t)(o->shape[0] - 1) * V, (size_t)V * sizeof(float));
    return 1;
}

static const int32_t *test_ids(void) {
    static int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = (i * 7 + 3) % 37;
    return ids;
}

/* A reused program equals a fresh one at every step (same cache state), and
 * the graph built for exactly that step in the same mode (within the f32
 * tolerance: the fresh graph's fusion tiles for its own size). */
static void test_reuse_equals_fresh(void) {
    const int32_t *ids = test_ids();
    for (int mode = 0; mode < LOOM_MODE_COUNT; mode++) {
        tmodel m;
        tm_init(&m, 48, 4, 2, 100, 2, 37, 64, 21);
        tctx t = {.m = &m};
        loom_executor *e, *fe;
        CHECK(loom_executor_init(&e, 2, (loom_exec_mode)mode) == LOOM_OK);
        CHECK(loom_executor_init(&fe, 2, (loom_exec_mode)mode) == LOOM_OK);
        e->ckpt_action = fe->ckpt_action = LOOM_CHECKPOINT_FAIL;
        loom_program *pre, *dec;
        CHECK_MSG(compile(e, &t, "prefill", 16, &pre) == LOOM_OK, "%s", loom_last_error());
        CHECK_MSG(compile(e, &t, "decode", 1, &dec) == LOOM_OK, "%s", loom_last_error());
        size_t kvb = tm_kv_bytes(&m);
        float *kc0 = malloc(kvb), *vc0 = malloc(kvb);
        tm_clear_kv(&m);
        float got[64], want[64], exact[64];
        const int V = m.c.vocab_size;
        /* prefill in two chunks (11 then 5 rows), then decode steps */
        const int plan[][2] = {{11, 0}, {5, 11}, {1, 16}, {1, 17}, {1, 18}, {1, 19}, {1, 20}, {16, 21}, {1, 37}};
        for (size_t k = 0; k < sizeof plan / sizeof plan[0]; k++) {
            int rows = plan[k][0], pos = plan[k][1];
            loom_program *p = rows == 1 ? dec : pre;
            memcpy(kc0, m.kc, kvb), memcpy(vc0, m.vc, kvb);
            /* a freshly compiled program of the same bucket */
            loom_program *f;
            CHECK(compile(fe, &t, "fresh", rows == 1 ? 1 : 16, &f) == LOOM_OK);
            CHECK(step(f, &t, ids + pos, rows, pos, want));
            loom_program_free(f);
            /* the graph of exactly this step */
            memcpy(m.kc, kc0, kvb), memcpy(m.vc, vc0, kvb);
            loom_graph *g;
            loom_graph_init(&g);
            int lg = tm_build(&m, g, ids + pos, rows, pos, 0);
            CHECK(loom_executor_run(fe, g) == LOOM_OK);
            memcpy(exact, loom_graph_tensor(g, lg)->data, (size_t)V * sizeof(float));
            loom_graph_free(g);
            /* the reused program */
            memcpy(m.kc, kc0, kvb), memcpy(m.vc, vc0, kvb);
            CHECK(step(p, &t, ids + pos, rows, pos, got));
            CHECK_MSG(memcmp(got, want, (size_t)V * sizeof(float)) == 0, "%s: step %zu (%d rows at %d): reused "
                      "program differs from a fresh one", loom_mode_name((loom_exec_mode)mode), k, rows, pos);
            for (int i = 0; i < V; i++) CHECK_CLOSE(got[i], exact[i], 1.0 / 2048);
        }
        free(kc0), free(vc0);
        loom_program_free(pre), loom_program_free(dec);
        loom_executor_free(e), loom_executor_free(fe);
        tm_free(&m);
    }
}

/* Stepping allocates nothing after the first step, in every mode. */
static void test_no_alloc(void) {
    const int32_t *ids = test_ids();
    count_init();
    for (int mode = 0; mode < LOOM_MODE_COUNT; mode++) {
        tmodel m;
        tm_init(&m, 48, 4, 2, 100, 2, 37, 64, 9);
        tctx t = {.m = &m};
        loom_executor *e;
        CHECK(loom_executor_init(&e, 2, (loom_exec_mode)mode) == LOOM_OK);
        loom_program *pre, *dec;
        CHECK(compile(e, &t, "prefill", 16, &pre) == LOOM_OK);
        CHECK(compile(e, &t, "decode", 1, &dec) == LOOM_OK);
        tm_clear_kv(&m);
        float lg[64];
        CHECK(step(pre, &t, ids, 16, 0, lg));
        CHECK(step(dec, &t, ids + 16, 1, 16, lg));
        int buffers = e->n_allocs;
        n_allocs = 0;
        counting = 1;
        int ok = 1;
        for (int s = 17; s < 40 && ok; s++) ok = step(dec, &t, ids + s, 1, s, lg);
        ok = ok && step(pre, &t, ids + 40, 9, 40, lg); /* a shorter prefill chunk too */
        counting = 0;
        CHECK(ok);
        CHECK_MSG(n_allocs == 0 && e->n_allocs == buffers, "%s: %ld allocations while stepping",
                  loom_mode_name((loom_exec_mode)mode), (long)n_allocs);
        loom_program_free(pre), loom_program_free(dec);
        loom_executor_free(e);
        tm_free(&m);
    }
    /* the counter counts: a compile allocates */
    counting = 1;
    n_allocs = 0;
    void *volatile p = malloc(16); /* volatile: clang -O3 removes an unused malloc/free pair */
    counting = 0;
    free(p);
    CHECK_MSG(n_allocs == 1, "the allocation counter saw %ld of 1", (long)n_allocs);
}

/* 1, 2 and 3 threads: the same bytes at every step, fused and unfused. */
static void test_threads(void) {
    const int32_t *ids = test_ids();
    for (int mode = 0; mode < 2; mode++) {
        float first[8][64];
        for (int th = 1; th <= 3; th++) {
            tmodel m;
            tm_init(&m, 64, 8, 2, 96, 2, 37, 64, 5);
            tctx t = {.m = &m};
            loom_executor *e;
            CHECK(loom_executor_init(&e, th, mode ? LOOM_MODE_FUSED : LOOM_MODE_STEP_BY_STEP) == LOOM_OK);
            loom_program *pre, *dec;
            CHECK(compile(e, &t, "prefill", 32, &pre) == LOOM_OK);
            CHECK(compile(e, &t, "decode", 1, &dec) == LOOM_OK);
            tm_clear_kv(&m);
            float lg[64];
            for (int s = 0; s < 8; s++) {
                int rows = s == 0 ? 23 : 1, pos = s == 0 ? 0 : 22 + s;
                CHECK(step(rows == 1 ? dec : pre, &t, ids + pos, rows, pos, lg));
                if (th == 1) memcpy(first[s], lg, sizeof lg);
                else CHECK_MSG(memcmp(first[s], lg, (size_t)m.c.vocab_size * sizeof(float)) == 0,
                               "mode %d, %d threads, step %d: differs from one thread", mode, th, s);
            }
            loom_program_free(pre), loom_program_free(dec);
            loom_executor_free(e);
            tm_free(&m);
        }
    }
}

/* A builder whose graph changes structure with the row count. */
static loom_status odd_build(void *ctx, loom_graph *g, const loom_step *s, int *out) {
    tctx *t = ctx;
    *out = tm_build(t->m, g, t->ids, s->n_rows, s->pos, 0);
    if (s->n_rows % 2) *out = loom_g_silu(g, *out, "odd");
    return loom_graph_status(g);
}

/* Output rows as a third dimension: the logits of the last n_out rows (a view
 * whose offset moves with the rows and the output rows, and whose extent
 * follows the output rows). */
static loom_status outs_build(void *ctx, loom_graph *g, const loom_step *s, int *out) {
    tctx *t = ctx;
    int all = tm_build(t->m, g, t->ids, s->n_rows, s->pos, 1);
    *out = loom_graph_view_rows(g, all, s->n_rows - s->n_out, s->n_out);
    loom_graph_mark_output(g, *out);
    return loom_graph_status(g);
}

static void test_output_rows(void) {
    const int32_t *ids = test_ids();
    tmodel m;
    tm_init(&m, 48, 4, 2, 100, 2, 37, 64, 8);
    tctx t = {.m = &m};
    loom_executor *e;
    CHECK(loom_executor_init(&e, 2, LOOM_MODE_FUSED) == LOOM_OK);
    loom_program_desc d = {.name = "outs", .build = outs_build, .ctx = &t, .max_rows = 12, .max_end = 64,
                           .max_out = 6};
    loom_program *p;
    CHECK_MSG(loom_program_compile(e, &d, &p) == LOOM_OK, "%s", loom_last_error());
    const int V = m.c.vocab_size;
    const int steps[][3] = {{12, 0, 6}, {5, 12, 1}, {9, 17, 4}, {1, 26, 1}};
    float want[12 * 64];
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        int rows = steps[k][0], pos = steps[k][1], outs = steps[k][2];
        /* the exact graph's logits of every row first, then the program's last n_out from the same caches */
        size_t kvb = tm_kv_bytes(&m);
        float *kc0 = malloc(kvb), *vc0 = malloc(kvb);
        memcpy(kc0, m.kc, kvb), memcpy(vc0, m.vc, kvb);
        loom_graph *g;
        loom_graph_init(&g);
        int lg = tm_build(&m, g, ids + pos, rows, pos, 1);
        CHECK(loom_executor_run(e, g) == LOOM_OK);
        memcpy(want, loom_graph_tensor(g, lg)->data, (size_t)rows * V * sizeof(float));
        loom_graph_free(g);
        memcpy(m.kc, kc0, kvb), memcpy(m.vc, vc0, kvb);
        free(kc0), free(vc0);
        memcpy(t.ids, ids + pos, (size_t)rows * sizeof *ids);
        loom_step st = {.n_rows = rows, .pos = pos, .n_out = outs};
        CHECK_MSG(loom_program_run(p, &st) == LOOM_OK, "%s", loom_last_error());
        const loom_tensor *o = loom_program_output(p);
        CHECK(o->shape[0] == outs && o->shape[1] == V);
        const float *got = o->data;
        for (int r = 0; r < outs; r++)
            for (int i = 0; i < V; i++) CHECK_CLOSE(got[r * V + i], want[(rows - outs + r) * V + i], 1.0 / 2048);
    }
    loom_step bad = {.n_rows = 3, .pos = 0, .n_out = 4};
    CHECK(loom_program_run(p, &bad) == LOOM_ERR_INVALID_ARG);
    loom_program_free(p);
    loom_executor_free(e);
    tm_free(&m);
}

static void test_errors(void) {
    tmodel m;
    tm_init(&m, 48, 4, 2, 100, 2, 37, 64, 3);
    tctx t = {.m = &m};
    loom_executor *e;
    CHECK(loom_executor_init(&e, 1, LOOM_MODE_FUSED) == LOOM_OK);
    loom_program *p;
    CHECK(compile(e, &t, "prefill", 8, &p) == LOOM_OK);
    tm_clear_kv(&m);
    const loom_step bad[] = {{0, 0, 1, NULL}, {9, 0, 1, NULL}, {8, 57, 1, NULL}, {1, -1, 1, NULL}, {1, 64, 1, NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(loom_program_run(p, &bad[i]) == LOOM_ERR_INVALID_ARG);
        CHECK(strstr(loom_last_error(), "does not fit its bucket") != NULL);
    }
    CHECK(loom_program_run(p, NULL) == LOOM_ERR_INVALID_ARG);
    loom_program_free(p);
    /* buckets that do not fit the context */
    loom_program_desc d = {.name = "big", .build = tbuild, .ctx = &t, .max_rows = 65, .max_end = 64};
    CHECK(loom_program_compile(e, &d, &p) == LOOM_ERR_INVALID_ARG);
    /* a graph whose structure depends on the rows */
    d = (loom_program_desc){.name = "odd", .build = odd_build, .ctx = &t, .max_rows = 8, .max_end = 64};
    CHECK(loom_program_compile(e, &d, &p) == LOOM_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(loom_last_error(), "program odd") != NULL, "%s", loom_last_error());
    /* a rule whose condition looks at the KV length: cannot hold for every step */
    const char *rules = "rules:\n"
                        "  - name: attention\n"
                        "    fused_op: fused_infer_attention\n"
                        "    pattern:\n"
                        "      - {name: attn, op: attention, inputs: [$q, $k, $v]}\n"
                        "    conditions:\n"
                        "      dims:\n"
                        "        - {of: $k, dim: 1, min: 14}\n";
    loom_fusion_rules *r = NULL;
    CHECK(loom_fusion_rules_parse(rules, strlen(rules), "len.yaml", &r) == LOOM_OK);
    loom_executor_set_rules(e, r);
    CHECK(compile(e, &t, "decode", 1, &p) == LOOM_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(loom_last_error(), "position") != NULL, "%s", loom_last_error());
    loom_executor_free(e);
    tm_free(&m);
}

/* The fused program's graph has the fused kernels, the step_by_step one the
 * primitives, and both report their step's shapes (the last step run). */
static void test_graph_of_step(void) {
    const int32_t *ids = test_ids();
    tmodel m;
    tm_init(&m, 48, 4, 2, 100, 2, 37, 64, 4);
    tctx t = {.m = &m};
    for (int mode = 0; mode < 2; mode++) {
        loom_executor *e;
        CHECK(loom_executor_init(&e, 1, mode ? LOOM_MODE_FUSED : LOOM_MODE_STEP_BY_STEP) == LOOM_OK);
        loom_program *p;
        CHECK(compile(e, &t, "prefill", 16, &p) == LOOM_OK);
        tm_clear_kv(&m);
        float lg[64];
        CHECK(step(p, &t, ids, 7, 0, lg));
        CHECK(step(p, &t, ids + 7, 5, 7, lg));
        const loom_graph *g = loom_program_graph(p);
        CHECK(tm_ops(g, LOOM_OP_QKV_ROPE) == (mode ? m.c.n_layers : 0));
        CHECK(tm_ops(g, LOOM_OP_ATTENTION) == (mode ? 0 : m.c.n_layers));
        CHECK(g->tensors[0].t.shape[0] == 5); /* the tokens of the last step */
        loom_program_account(p);
        double bytes = 0;
        for (int n = 0; n < g->n_nodes; n++) {
            CHECK(g->nodes[n].stats.kernel != NULL && g->nodes[n].stats.kernels >= 1);
            bytes += g->nodes[n].stats.bytes_read;
        }
        CHECK(bytes > 0);
        CHECK(loom_program_output(p)->shape[0] == 1);
        loom_program_free(p);
        loom_executor_free(e);
    }
    tm_free(&m);
}

int main(void) {
    RUN_TEST(test_reuse_equals_fresh);
    RUN_TEST(test_no_alloc);
    RUN_TEST(test_threads);
    RUN_TEST(test_output_rows);
    RUN_TEST(test_errors);
    RUN_TEST(test_graph_of_step);
    return TEST_SUMMARY();
}
