/*
 * Kernel variants chosen by measurement, kept in a wisdom file per CPU model
 * (docs/tuning.md). FFTW's planner is the model: the first time a model needs
 * an op family that has several correct variants (base/variants.h), each
 * variant is timed on one thread over a small problem shaped like the family's
 * real work, the fastest is used from then on, and the choice is written to
 * ~/.cache/loom/wisdom-<cpu>.json so that later processes on the same CPU
 * model only read it. LOOM_WISDOM=off (no file, no timing: the defaults),
 * readonly (read; what is missing is timed but not written), or a path.
 */
#include "graph/tune.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/file.h"
#include "base/rng.h"
#include "base/status.h"
#include "base/timer.h"
#include "base/variants.h"
#include "loom_ops.h"
#include "ops/matmul/matmul.h"
#include "ops/quant.h"

/* A variant other than the default must be this much faster to be chosen, so
 * that noise between two equal variants does not flip the choice. */
#define TUNE_MARGIN 0.97
#define TUNE_REPS 7

/* ------------------------------------------------------------ timed problems */

typedef struct tune_buf {
    void *p[16];
} tune_buf;

static void *tb_alloc(tune_buf *b, size_t bytes) {
    for (int i = 0; i < 16; i++)
        if (!b->p[i]) return b->p[i] = loom_alloc_aligned(bytes ? bytes : 64, 64);
    return NULL;
}

static void tb_free(tune_buf *b) {
    for (int i = 0; i < 16; i++) loom_free_aligned(b->p[i]);
}

static void fill_f32(loom_rng *r, float *x, int64_t n, float amp) {
    for (int64_t i = 0; i < n; i++) x[i] = amp * (2.0f * loom_rng_uniform(r) - 1.0f);
}

/* n f32 values into dst of dtype dt (f32, bf16, or a block format). */
static void to_dtype(loom_dtype dt, const float *x, void *dst, int64_t n) {
    if (dt == LOOM_F32) memcpy(dst, x, (size_t)n * sizeof(float));
    else if (dt == LOOM_BF16)
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = loom_f32_to_bf16(x[i]);
    else loom_quantize_row(dt, x, dst, n);
}

/* One matmul on thread 0 of 1 (the level in use). */
static loom_status run_matmul(const loom_matmul_args *a, void *scratch) {
    return loom_matmul_run(a, loom_cpu_isa(), 0, 1, scratch);
}

typedef struct tune_problem {
    const char *what;                         /* for the wisdom file and loom tune */
    loom_status (*setup)(tune_buf *b, void **ctx);
    loom_status (*run)(void *ctx);
} tune_problem;

/* gemm.bf16: a prefill chunk's projection, 96 rows of x against 384 x 768 bf16 W. */
typedef struct mm_ctx {
    loom_matmul_args a;
    void *scratch;
} mm_ctx;

static loom_status mm_setup(tune_buf *b, loom_matmul_args a, void **ctx) {
    loom_rng r;
    loom_rng_init(&r, 7, 0);
    mm_ctx *c = tb_alloc(b, sizeof *c);
    float *x = tb_alloc(b, (size_t)(a.M * a.K) * sizeof(float));
    float *w32 = tb_alloc(b, (size_t)a.K * sizeof(float));
    size_t wrow = loom_dtype_row_bytes(a.wtype, a.K);
    char *w = tb_alloc(b, (size_t)a.N * wrow);
    a.y = tb_alloc(b, (size_t)(a.M * a.N) * sizeof(float));
    LOOM_RETURN_IF(!c || !x || !w32 || !w || !a.y, LOOM_ERR_NOMEM, "tune: out of memory");
    fill_f32(&r, x, a.M * a.K, 1.0f);
    for (int64_t n = 0; n < a.N; n++) {
        fill_f32(&r, w32, a.K, 0.05f);
        to_dtype(a.wtype, w32, w + (size_t)n * wrow, a.K);
    }
    a.x = x, a.ldx = a.K, a.w = w, a.ldw = a.K, a.ldy = a.N;
    c->a = a;
    LOOM_TRY(loom_matmul_check(&c->a));
    c->scratch = tb_alloc(b, loom_matmul_scratch_size(&c->a));
    LOOM_RETURN_IF(!c->scratch, LOOM_ERR_NOMEM, "tune: out of memory");
    *ctx = c;
    return LOOM_OK;
}

static loom_status mm_run(void *ctx) {
    mm_ctx *c = ctx;
    return run_matmul(&c->a, c->scratch);
}

static loom_status gemm_bf16_setup(tune_buf *b, void **ctx) {
    return mm_setup(b, (loom_matmul_args){.wtype = LOOM_BF16, .M = 96, .N = 384, .K = 768}, ctx);
}

/* gemv.q4_full: one decode row against 1536 x 1536 q4_0 W, f32 activations. */
static loom_status gemv_q4_setup(tune_buf *b, void **ctx) {
    return mm_setup(b, (loom_matmul_args){.wtype = LOOM_Q4_0, .M = 1, .N = 1536, .K = 1536,
                                          .act = LOOM_ACT_PREC_FULL}, ctx);
}

/* attention.*: a decode over 1024 cached positions, GQA 8/2, D 128, of the
 * family's cache dtype; attention.bf16 adds a causal bf16 prefill of 128 rows. */
typedef struct attn_ctx {
    loom_tensor q, k, v, out, ks, vs;
    loom_incre_flash_attention_tensors dt;
    loom_incre_flash_attention_params dp;
    loom_tensor pq, pk, pv, pout;
    loom_flash_attention_tensors pt;
    loom_flash_attention_params pp;
    int prefill;
} attn_ctx;

#define TA_S 1024
#define TA_N 8
#define TA_NKV 2
#define TA_D 128
#define TA_SP 128

static loom_status tensor_fill(tune_buf *b, loom_rng *r, loom_tensor *t, loom_dtype dt, int ndim,
                               const int64_t *shape, float amp) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    void *d = tb_alloc(b, (size_t)n * loom_dtype_size(dt));
    float *tmp = malloc((size_t)n * sizeof(float));
    if (!d || !tmp) {
        free(tmp);
        return loom_set_error(LOOM_ERR_NOMEM, "tune: out of memory");
    }
    fill_f32(r, tmp, n, amp);
    if (dt == LOOM_I8)
        for (int64_t i = 0; i < n; i++) ((int8_t *)d)[i] = (int8_t)lrintf(tmp[i] * 127.0f / (amp > 0 ? amp : 1));
    else
        to_dtype(dt, tmp, d, n);
    free(tmp);
    return loom_tensor_init(t, dt, ndim, shape, d);
}

static loom_status attn_setup(tune_buf *b, loom_dtype kv, int prefill, void **ctx) {
    loom_rng r;
    loom_rng_init(&r, 11, 0);
    attn_ctx *c = tb_alloc(b, sizeof *c);
    LOOM_RETURN_IF(!c, LOOM_ERR_NOMEM, "tune: out of memory");
    memset(c, 0, sizeof *c);
    const int64_t qs[4] = {1, 1, TA_N, TA_D}, ks[4] = {1, TA_S, TA_NKV, TA_D}, ss[2] = {TA_NKV, TA_D};
    LOOM_TRY(tensor_fill(b, &r, &c->q, LOOM_F32, 4, qs, 1.0f));
    LOOM_TRY(tensor_fill(b, &r, &c->out, LOOM_F32, 4, qs, 0.0f));
    LOOM_TRY(tensor_fill(b, &r, &c->k, kv, 4, ks, 1.0f));
    LOOM_TRY(tensor_fill(b, &r, &c->v, kv, 4, ks, 1.0f));
    c->dt = (loom_incre_flash_attention_tensors){.query = &c->q, .key = &c->k, .value = &c->v,
                                                 .attention_out = &c->out};
    if (kv == LOOM_I8) {
        LOOM_TRY(tensor_fill(b, &r, &c->ks, LOOM_F32, 2, ss, 0.01f));
        LOOM_TRY(tensor_fill(b, &r, &c->vs, LOOM_F32, 2, ss, 0.01f));
        c->dt.key_antiquant_scale = &c->ks, c->dt.value_antiquant_scale = &c->vs;
    }
    c->dp = loom_incre_flash_attention_default_params();
    c->prefill = prefill;
    if (prefill) {
        const int64_t ps[4] = {1, TA_SP, TA_N, TA_D}, pks[4] = {1, TA_SP, TA_NKV, TA_D};
        LOOM_TRY(tensor_fill(b, &r, &c->pq, LOOM_BF16, 4, ps, 1.0f));
        LOOM_TRY(tensor_fill(b, &r, &c->pout, LOOM_BF16, 4, ps, 0.0f));
        LOOM_TRY(tensor_fill(b, &r, &c->pk, LOOM_BF16, 4, pks, 1.0f));
        LOOM_TRY(tensor_fill(b, &r, &c->pv, LOOM_BF16, 4, pks, 1.0f));
        c->pt = (loom_flash_attention_tensors){.query = &c->pq, .key = &c->pk, .value = &c->pv,
                                               .attention_out = &c->pout};
        c->pp = loom_flash_attention_default_params();
        c->pp.sparse_mode = LOOM_SPARSE_RIGHT_DOWN_CAUSAL;
    }
    *ctx = c;
    return LOOM_OK;
}

static loom_status attn_run(void *ctx) {
    attn_ctx *c = ctx;
    LOOM_TRY(loom_incre_flash_attention(&c->dt, &c->dp, NULL));
    return c->prefill ? loom_flash_attention_score(&c->pt, &c->pp, NULL) : LOOM_OK;
}

static loom_status attn_bf16_setup(tune_buf *b, void **ctx) { return attn_setup(b, LOOM_BF16, 1, ctx); }
static loom_status attn_i8_setup(tune_buf *b, void **ctx) { return attn_setup(b, LOOM_I8, 0, ctx); }

static const tune_problem problems[LOOM_VF_COUNT] = {
    [LOOM_VF_GEMM_BF16] = {"GEMM M 96 N 384 K 768, bf16 W", gemm_bf16_setup, mm_run},
    [LOOM_VF_GEMV_Q4_FULL] = {"GEMV M 1 N 1536 K 1536, q4_0 W, f32 x", gemv_q4_setup, mm_run},
    [LOOM_VF_ATTN_BF16] = {"decode S_kv 1024 + causal prefill S 128, N 8/2, D 128, bf16", attn_bf16_setup,
                           attn_run},
    [LOOM_VF_ATTN_I8] = {"decode S_kv 1024, N 8/2, D 128, i8 cache", attn_i8_setup, attn_run},
};

static const char *const *problem_names(void) {
    static const char *what[LOOM_VF_COUNT];
    for (int f = 0; f < LOOM_VF_COUNT; f++) what[f] = problems[f].what;
    return what;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median microseconds of TUNE_REPS runs of each variant of f (after a warm-up
 * each), the variants interleaved so that a slow spell of the machine hits
 * all of them; us[v] < 0 for a variant this CPU cannot run. */
static loom_status time_family(loom_variant_family f, double *us) {
    const tune_problem *tp = &problems[f];
    tune_buf b = {{0}};
    void *ctx = NULL;
    loom_status s = tp->setup(&b, &ctx);
    const int nv = loom_variant_count(f), keep = loom_variant(f);
    const loom_variant_source ksrc = loom_variant_source_of(f);
    double t[LOOM_VARIANTS_MAX][TUNE_REPS];
    for (int v = 0; v < nv; v++) us[v] = -1.0;
    for (int rep = -1; s == LOOM_OK && rep < TUNE_REPS; rep++)
        for (int v = 0; v < nv && s == LOOM_OK; v++) {
            if (!loom_variant_available(f, v)) continue;
            loom_variant_set(f, v, ksrc);
            double t0 = loom_time_s();
            s = tp->run(ctx);
            if (rep >= 0) t[v][rep] = 1e6 * (loom_time_s() - t0);
        }
    loom_variant_set(f, keep, ksrc);
    for (int v = 0; v < nv && s == LOOM_OK; v++) {
        if (!loom_variant_available(f, v)) continue;
        qsort(t[v], TUNE_REPS, sizeof(double), cmp_double);
        us[v] = t[v][TUNE_REPS / 2];
    }
    tb_free(&b);
    return s;
}

/* The fastest of the timed variants, the default kept unless another is
 * clearly faster. */
static int pick(loom_variant_family f, const double *us) {
    int best = loom_variant_default(f);
    for (int v = 0; v < loom_variant_count(f); v++)
        if (us[v] > 0 && us[best] > 0 && us[v] < TUNE_MARGIN * us[best]) best = v;
    return best;
}

/* ------------------------------------------------------------ wisdom file */

static pthread_mutex_t tune_lock = PTHREAD_MUTEX_INITIALIZER;
static loom_wisdom known;          /* what this process measured or read */
static int known_loaded;           /* the file was read (or there is none to read) */
static double tune_seconds;        /* spent timing in this process */

/* Reads the file into known once. A missing file is no wisdom; an unreadable
 * or corrupt one is reported once and measured over. */
static void wisdom_load_once(loom_wisdom_mode mode, const char *path) {
    if (known_loaded) return;
    known_loaded = 1;
    if (mode == LOOM_WISDOM_OFF || !path[0]) return;
    if (access(path, F_OK) != 0) return;
    if (loom_wisdom_read(path, &known) != LOOM_OK) {
        fprintf(stderr, "loom: wisdom file %s ignored (%s); measuring again\n", path, loom_last_error());
        loom_clear_error();
        memset(&known, 0, sizeof known);
    }
}

loom_status loom_tune(unsigned families, int remeasure) {
    char path[1024];
    loom_wisdom_mode mode = loom_wisdom_mode_get(path, sizeof path);
    /* below AVX-512 no family has a choice: its kernels are the level's own */
    if (loom_cpu_isa() < LOOM_ISA_AVX512) return LOOM_OK;
    pthread_mutex_lock(&tune_lock);
    wisdom_load_once(mode, path);
    int dirty = 0;
    loom_status s = LOOM_OK;
    for (int f = 0; f < LOOM_VF_COUNT && s == LOOM_OK; f++) {
        /* forced (LOOM_VARIANTS, loom_variants_force): never measured over */
        if (!(families & (1u << f)) || loom_variant_source_of((loom_variant_family)f) == LOOM_VS_FORCED) continue;
        if (mode == LOOM_WISDOM_OFF && !remeasure) continue;
        loom_wisdom_entry *we = &known.fam[f];
        if (we->present && !remeasure && loom_variant_available((loom_variant_family)f, we->choice)) {
            if (loom_variant_source_of((loom_variant_family)f) != LOOM_VS_WISDOM &&
                loom_variant_source_of((loom_variant_family)f) != LOOM_VS_MEASURED)
                loom_variant_set((loom_variant_family)f, we->choice, LOOM_VS_WISDOM);
            continue;
        }
        double us[LOOM_VARIANTS_MAX], t0 = loom_time_s();
        s = time_family((loom_variant_family)f, us);
        tune_seconds += loom_time_s() - t0;
        if (s != LOOM_OK) break;
        we->present = 1;
        we->choice = pick((loom_variant_family)f, us);
        memcpy(we->us, us, sizeof us);
        loom_variant_set((loom_variant_family)f, we->choice, LOOM_VS_MEASURED);
        dirty = 1;
    }
    if (s == LOOM_OK && dirty && mode == LOOM_WISDOM_FILE && path[0] && loom_wisdom_write(path, &known, problem_names()) != LOOM_OK) {
        /* the choices hold for this process; a cache that cannot be written is not an error */
        fprintf(stderr, "loom: %s; the measured choices hold for this process only\n", loom_last_error());
        loom_clear_error();
    }
    pthread_mutex_unlock(&tune_lock);
    return s;
}

unsigned loom_tune_needs(const loom_dtype *weights, int n, loom_dtype kv, loom_act_precision act) {
    unsigned m = 0;
    for (int i = 0; i < n; i++) {
        if (weights[i] == LOOM_BF16) m |= LOOM_TUNE_GEMM_BF16;
        if ((weights[i] == LOOM_Q4_0 || weights[i] == LOOM_Q4_1) && act == LOOM_ACT_PREC_FULL)
            m |= LOOM_TUNE_GEMV_Q4_FULL;
    }
    if (kv == LOOM_BF16) m |= LOOM_TUNE_ATTN_BF16;
    if (kv == LOOM_I8) m |= LOOM_TUNE_ATTN_I8;
    return m;
}

size_t loom_variants_describe(char *buf, size_t cap) {
    size_t n = 0;
    if (cap) buf[0] = '\0';
    for (int f = 0; f < LOOM_VF_COUNT; f++) {
        loom_variant_family fam = (loom_variant_family)f;
        int w = snprintf(buf ? buf + (n < cap ? n : cap) : NULL, n < cap ? cap - n : 0, "%s%s=%s", f ? " " : "",
                         loom_variant_family_name(fam), loom_variant_name(fam, loom_variant(fam)));
        if (w > 0) n += (size_t)w;
    }
    return n;
}

void loom_tune_print(FILE *out) {
    char path[1024];
    loom_wisdom_mode mode = loom_wisdom_mode_get(path, sizeof path);
    char key[80];
    loom_cpu_key(key, sizeof key);
    fprintf(out, "cpu: %s (%s), isa %s\n", loom_cpu_get()->brand, key, loom_cpu_isa_name());
    if (mode == LOOM_WISDOM_OFF) fprintf(out, "wisdom: off (the defaults; nothing measured or saved)\n");
    else if (!path[0]) fprintf(out, "wisdom: no file (neither XDG_CACHE_HOME nor HOME): this process only\n");
    else fprintf(out, "wisdom: %s%s\n", path, mode == LOOM_WISDOM_READONLY ? " (read only)" : "");
    fprintf(out, "\n| family | variants: median us on 1 thread | in use | chosen by | problem timed |\n");
    fprintf(out, "|---|---|---|---|---|\n");
    pthread_mutex_lock(&tune_lock);
    for (int f = 0; f < LOOM_VF_COUNT; f++) {
        loom_variant_family fam = (loom_variant_family)f;
        const loom_wisdom_entry *we = &known.fam[f];
        char times[160] = "";
        size_t n = 0;
        for (int v = 0; v < loom_variant_count(fam); v++) {
            char t[32];
            if (!loom_variant_available(fam, v)) snprintf(t, sizeof t, "n/a");
            else if (we->present && we->us[v] > 0) snprintf(t, sizeof t, "%.1f", we->us[v]);
            else snprintf(t, sizeof t, "-");
            int w = snprintf(times + n, sizeof times - n, "%s%s %s", v ? ", " : "", loom_variant_name(fam, v), t);
            if (w > 0 && (size_t)w < sizeof times - n) n += (size_t)w;
        }
        fprintf(out, "| %s | %s | %s | %s | %s |\n", loom_variant_family_name(fam), times,
                loom_variant_name(fam, loom_variant(fam)), loom_variant_source_name(loom_variant_source_of(fam)),
                problems[f].what);
    }
    fprintf(out, "\ntiming in this process: %.3f s\n", tune_seconds);
    pthread_mutex_unlock(&tune_lock);
}

double loom_tune_seconds(void) {
    pthread_mutex_lock(&tune_lock);
    double t = tune_seconds;
    pthread_mutex_unlock(&tune_lock);
    return t;
}

void loom_tune_reset_for_tests(void) {
    pthread_mutex_lock(&tune_lock);
    memset(&known, 0, sizeof known);
    known_loaded = 0;
    tune_seconds = 0;
    for (int f = 0; f < LOOM_VF_COUNT; f++) {
        loom_variant_family fam = (loom_variant_family)f;
        if (!loom_variant_env_forced(fam))
            loom_variant_set(fam, loom_variant_default(fam), LOOM_VS_DEFAULT);
    }
    pthread_mutex_unlock(&tune_lock);
}
