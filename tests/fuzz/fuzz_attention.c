/* libFuzzer target: the fused attention ops (loom_flash_attention_score,
 * loom_incre_flash_attention, loom_fused_infer_attention_score), the KV-cache
 * write (loom_reshape_and_cache, checked in fuzz_kv_write), the fused row ops
 * (loom_add_rms_norm, loom_swiglu, loom_ffn: fuzz_fused) and loom_qkv_rope, called with
 * shapes, layouts, dtypes, masks, lengths, block tables, antiquant scales and
 * parameters decoded from the input, valid or not. Every tensor is its own
 * heap block of exactly the bytes its shape and strides span, so AddressSanitizer
 * reports any read or write past it. Properties checked:
 *   - an error status comes with a message, and leaves the outputs untouched;
 *   - LOOM_OK leaves every output finite (inputs are finite; masks hold finite
 *     values or -inf; lse may be -inf) and writes nothing else: no input, no
 *     padding between an output's rows;
 *   - LOOM_OK on one thread and on two gives bit-identical outputs;
 *   - half the inputs make only valid choices, and those calls must run (LOOM_OK);
 *   - an attention call with the default scale matches the reference
 *     decomposition within DESIGN.md's tolerances (check_ref).
 * Sizes are capped (S <= 150 keys, D <= 257, B <= 3, N <= 17) so an input runs
 * in milliseconds. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/threadpool.h"
#include "fused/attention.h"
#include "fused/fused.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ------------------------------------------------------------ input bytes */

/* wild: 0 for inputs whose every choice is valid (the call must run), else the
 * odds (1 in wild) that each choice takes an invalid value. */
typedef struct { const uint8_t *p; size_t n, i; uint64_t rng; unsigned wild; } reader;

static float rnd(reader *r) { /* deterministic values in [-2, 2) */
    r->rng = r->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((r->rng >> 40) & 0xFFFF) / 16384.0f - 2.0f;
}

/* The next input byte; past the input's end, bytes of the generator seeded by
 * it (libFuzzer starts with inputs of a few bytes and lengthens them slowly). */
static unsigned rd(reader *r) {
    if (r->i < r->n) return r->p[r->i++];
    (void)rnd(r);
    return (unsigned)(r->rng >> 32) & 0xFFu;
}
static unsigned pick(reader *r, unsigned n) { return rd(r) % n; }
static int bad(reader *r) { return r->wild && pick(r, r->wild) == 0; }

/* ------------------------------------------------------------ tensors */

#define MAX_T 24
typedef struct {
    loom_tensor t[MAX_T];
    void *buf[MAX_T];
    size_t bytes[MAX_T];
    int out[MAX_T]; /* written by the op */
    int n;
} arena;

static size_t span_elems(const loom_tensor *t) {
    size_t e = 1;
    for (int i = 0; i < t->ndim; i++) e += (size_t)(t->shape[i] - 1) * (size_t)t->stride[i];
    return e;
}

/* A tensor of the given shape; the row dim (ndim - 2) padded by pad elements
 * when pad > 0. Data: finite values (i8: -127..127, i32: filled by the caller). */
static loom_tensor *mk(arena *a, reader *r, loom_dtype dt, int ndim, const int64_t *shape, int pad,
                       int is_out) {
    if (a->n >= MAX_T) return NULL;
    loom_tensor *t = &a->t[a->n];
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 1) return NULL;
    if (loom_tensor_init(t, dt, ndim, shape, NULL) != LOOM_OK) return NULL;
    if (pad > 0 && ndim >= 2) { /* strides rebuilt over a padded row */
        t->stride[ndim - 1] = 1;
        t->stride[ndim - 2] = shape[ndim - 1] + pad;
        for (int i = ndim - 3; i >= 0; i--) t->stride[i] = t->stride[i + 1] * shape[i + 1];
    }
    size_t n = span_elems(t), es = loom_dtype_size(dt);
    size_t bytes = n * es;
    void *p = malloc(bytes ? bytes : 1);
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) {
        float v = rnd(r);
        switch (dt) {
        case LOOM_F32: ((float *)p)[i] = v; break;
        case LOOM_F16: ((uint16_t *)p)[i] = loom_f32_to_f16(v); break;
        case LOOM_BF16: ((uint16_t *)p)[i] = loom_f32_to_bf16(v); break;
        case LOOM_I8: ((int8_t *)p)[i] = (int8_t)(v * 63.0f); break;
        default: memset((char *)p + i * es, 0, es); break;
        }
    }
    t->data = p;
    a->buf[a->n] = p;
    a->bytes[a->n] = bytes;
    a->out[a->n] = is_out;
    a->n++;
    return t;
}

static void arena_free(arena *a) {
    for (int i = 0; i < a->n; i++) free(a->buf[i]);
    a->n = 0;
}

/* Copies of every buffer (before a call, or after the first run). */
typedef struct { void *copy[MAX_T]; } snapshot;

static void snap(const arena *a, snapshot *s) {
    for (int i = 0; i < a->n; i++) {
        s->copy[i] = malloc(a->bytes[i] ? a->bytes[i] : 1);
        if (s->copy[i]) memcpy(s->copy[i], a->buf[i], a->bytes[i]);
    }
}

/* Buffers unchanged since s: all of them (which = 0), the inputs (1), the outputs (2). */
static int same(const arena *a, const snapshot *s, int which) {
    for (int i = 0; i < a->n; i++) {
        if ((which == 1 && a->out[i]) || (which == 2 && !a->out[i])) continue;
        if (s->copy[i] && memcmp(s->copy[i], a->buf[i], a->bytes[i]) != 0) return 0;
    }
    return 1;
}

/* The elements of output buffer i that are not the tensor's (row padding) unchanged since s. */
static int gaps_same(const arena *a, int i, const snapshot *s) {
    const loom_tensor *t = &a->t[i];
    size_t n = span_elems(t), es = loom_dtype_size(t->dtype);
    if (!s->copy[i] || loom_tensor_is_contiguous(t)) return 1;
    unsigned char *mine = calloc(n, 1);
    if (!mine) return 1;
    int64_t m = loom_tensor_nelem(t);
    for (int64_t e = 0; e < m; e++) {
        int64_t off = 0, rem = e;
        for (int d = t->ndim - 1; d >= 0; d--) off += (rem % t->shape[d]) * t->stride[d], rem /= t->shape[d];
        mine[off] = 1;
    }
    int ok = 1;
    for (size_t x = 0; x < n && ok; x++)
        if (!mine[x] && memcmp((const char *)s->copy[i] + x * es, (const char *)a->buf[i] + x * es, es) != 0) ok = 0;
    free(mine);
    return ok;
}

static void snap_free(const arena *a, snapshot *s) {
    for (int i = 0; i < a->n; i++) free(s->copy[i]);
}

/* Every element of an f32/f16/bf16 output is finite (-inf allowed where lse). */
static int finite_out(const loom_tensor *t, int allow_ninf) {
    if (!t) return 1;
    int64_t idx[4] = {0, 0, 0, 0};
    int64_t n = loom_tensor_nelem(t);
    for (int64_t e = 0; e < n; e++) {
        int64_t off = 0, rem = e;
        for (int i = t->ndim - 1; i >= 0; i--) {
            idx[i] = rem % t->shape[i];
            rem /= t->shape[i];
            off += idx[i] * t->stride[i];
        }
        float v;
        if (t->dtype == LOOM_F32) v = ((const float *)t->data)[off];
        else if (t->dtype == LOOM_F16) v = loom_f16_to_f32(((const uint16_t *)t->data)[off]);
        else if (t->dtype == LOOM_BF16) v = loom_bf16_to_f32(((const uint16_t *)t->data)[off]);
        else return 1;
        if (isnan(v) || v == INFINITY || (v == -INFINITY && !allow_ninf)) return 0;
    }
    return 1;
}

/* ------------------------------------------------------------ choices */

static loom_dtype pick_fdt(reader *r) { /* f32/f16/bf16; invalid: i8 or i32 */
    static const loom_dtype d[4] = {LOOM_F32, LOOM_F32, LOOM_F16, LOOM_BF16};
    if (bad(r)) return pick(r, 2) ? LOOM_I8 : LOOM_I32;
    return d[pick(r, 4)];
}

static int64_t pick_d(reader *r) { /* 1..256; invalid: 257 */
    static const int64_t d[11] = {1, 8, 16, 31, 32, 64, 80, 96, 128, 200, 256};
    return bad(r) ? 257 : d[pick(r, 11)];
}

static int64_t pick_tokens(reader *r) {
    static const int64_t t[8] = {LOOM_ATTN_TOKENS_ALL, 0, 1, 3, 17, -1, -5, LOOM_ATTN_TOKENS_ALL};
    return t[pick(r, 8)];
}

/* A length up to n: n, 0, 1 or n - 1; invalid: n + 1 or -1. */
static int64_t near(reader *r, int64_t n) {
    if (bad(r)) return pick(r, 2) ? n + 1 : -1;
    switch (pick(r, 8)) {
    case 0: return 0;
    case 1: return 1;
    case 2: return n > 1 ? n - 1 : n;
    default: return n;
    }
}

/* The 4-D shape of a [B, S, N, D] sequence or cache in a layout (TND: [B*S, N, D]). */
static int shape_of(loom_attn_layout l, int64_t B, int64_t S, int64_t N, int64_t D, int64_t *sh) {
    switch (l) {
    case LOOM_ATTN_BNSD: sh[0] = B, sh[1] = N, sh[2] = S, sh[3] = D; return 4;
    case LOOM_ATTN_BSH: sh[0] = B, sh[1] = S, sh[2] = N * D; return 3;
    case LOOM_ATTN_TND: sh[0] = B * S, sh[1] = N, sh[2] = D; return 3;
    default: sh[0] = B, sh[1] = S, sh[2] = N, sh[3] = D; return 4;
    }
}

/* An optional mask: none, boolean i8 or additive f32 (-inf, -3 or 0), 2-D
 * [S_q, S_kv] or 4-D with broadcast dims; invalid: one key short. */
static const loom_tensor *pick_mask(arena *a, reader *r, int64_t B, int64_t N, int64_t Sq, int64_t Skv) {
    unsigned kind = pick(r, 4);
    if (kind < 2) return NULL;
    loom_dtype dt = kind == 2 ? LOOM_I8 : LOOM_F32;
    int64_t kv = Skv + (bad(r) ? -1 : 0), sh[4];
    if (kv < 1) kv = 1;
    int nd = 2;
    if (pick(r, 2)) {
        sh[0] = pick(r, 2) ? B : 1, sh[1] = pick(r, 2) ? N : 1, sh[2] = Sq, sh[3] = kv;
        nd = 4;
    } else {
        sh[0] = Sq, sh[1] = kv;
    }
    loom_tensor *m = mk(a, r, dt, nd, sh, 0, 0);
    if (!m) return NULL;
    int64_t n = loom_tensor_nelem(m);
    unsigned dense = 1 + pick(r, 8); /* 1 in dense masked (from the values' generator, not the input) */
    for (int64_t i = 0; i < n; i++) {
        (void)rnd(r);
        unsigned v = (unsigned)(r->rng >> 33) % (dense + 1);
        if (dt == LOOM_I8) ((int8_t *)m->data)[i] = (int8_t)(v == 0);
        else ((float *)m->data)[i] = v == 0 ? -INFINITY : v == 1 ? -3.0f : 0.0f;
    }
    return m;
}

static int64_t *lens(reader *r, int64_t n, int64_t full) {
    if (!pick(r, 2)) return NULL;
    int64_t *v = malloc((size_t)n * sizeof *v);
    if (!v) return NULL;
    for (int64_t i = 0; i < n; i++) v[i] = near(r, full);
    return v;
}

/* ------------------------------------------------------------ runs */

typedef loom_status (*run_fn)(void *ctx, loom_pool *pool);

static loom_pool *pool2(void) {
    static loom_pool *p;
    if (!p && loom_pool_init(&p, 2) != LOOM_OK) p = NULL;
    return p;
}

/* Calls that ran (LOOM_OK) and that were refused, per op; printed at exit when
 * LOOM_FUZZ_STATS is set, to see how deep the inputs reach. */
static long n_ok[8], n_err[8];
static int cur_op;
static unsigned cur_wild; /* the input's reader.wild: 0 = every choice valid */

static void print_stats(void) {
    static const char *names[8] = {"flash_attention_score", "incre_flash_attention", "fused_infer_attention_score",
                                   "reshape_and_cache", "add_rms_norm", "swiglu", "ffn", "qkv_rope"};
    for (int i = 0; i < 8; i++) fprintf(stderr, "fuzz_attention: %s: %ld ran, %ld refused\n", names[i], n_ok[i], n_err[i]);
}

/* The call on one thread, then on two; the properties of the file comment. */
static void check_run(arena *a, run_fn fn, void *ctx, loom_tensor *const *outs, int n_outs) {
    snapshot before, first;
    snap(a, &before);
    loom_clear_error();
    loom_status s = fn(ctx, NULL);
    (s == LOOM_OK ? n_ok : n_err)[cur_op]++;
    if (s != LOOM_OK && getenv("LOOM_FUZZ_DEBUG")) fprintf(stderr, "E%d %s\n", cur_op, loom_last_error());
    if (s != LOOM_OK) {
        if (loom_last_error()[0] == '\0' || !same(a, &before, 0)) __builtin_trap();
        if (cur_wild == 0) __builtin_trap(); /* a valid call refused */
        snap_free(a, &before);
        return;
    }
    if (!same(a, &before, 1)) __builtin_trap(); /* an input written */
    for (int i = 0; i < a->n; i++)
        if (a->out[i] && !gaps_same(a, i, &before)) __builtin_trap(); /* row padding written */
    for (int i = 0; i < n_outs; i++)
        if (!finite_out(outs[i], i > 0)) __builtin_trap();
    snap(a, &first);
    loom_pool *p = pool2();
    if (p) {
        if (fn(ctx, p) != LOOM_OK || !same(a, &first, 0)) __builtin_trap();
    }
    snap_free(a, &first);
    snap_free(a, &before);
}

/* One call of an attention op: which, and its tensors and params. */
typedef struct {
    int op; /* 0 flash_attention_score, 1 incre_flash_attention, 2 fused_infer */
    loom_flash_attention_tensors pt;
    loom_flash_attention_params pp;
    loom_incre_flash_attention_tensors dt;
    loom_incre_flash_attention_params dp;
    loom_fused_infer_attention_tensors ft;
    loom_fused_infer_attention_params fp;
} attn_ctx;

static loom_status run_attn(void *c, loom_pool *pool) {
    attn_ctx *x = c;
    if (x->op == 0) return loom_flash_attention_score(&x->pt, &x->pp, pool);
    if (x->op == 1) return loom_incre_flash_attention(&x->dt, &x->dp, pool);
    return loom_fused_infer_attention_score(&x->ft, &x->fp, pool, NULL);
}


/* ------------------------------------------------------------ against the reference */

static double dtype_tol(loom_dtype t) { /* DESIGN.md; an i8 cache counts as f32 */
    return t == LOOM_BF16 ? 1.0 / 128 : t == LOOM_F16 ? 1.0 / 256 : 1.0 / 2048;
}

/* Element off of t's layout read from base (t's dtype), as a double. */
static double elem_at(const loom_tensor *t, const void *base, int64_t off) {
    if (t->dtype == LOOM_F32) return ((const float *)base)[off];
    if (t->dtype == LOOM_F16) return loom_f16_to_f32(((const uint16_t *)base)[off]);
    return loom_bf16_to_f32(((const uint16_t *)base)[off]);
}

/* Every element of t: |got - ref| <= tol * max(1, |ref|), got read from the copy
 * of t's buffer, ref from the buffer itself; equal infinities (lse) match. */
static int close_to(const loom_tensor *t, const void *got, double tol) {
    int64_t n = loom_tensor_nelem(t);
    for (int64_t e = 0; e < n; e++) {
        int64_t off = 0, rem = e;
        for (int d = t->ndim - 1; d >= 0; d--) off += (rem % t->shape[d]) * t->stride[d], rem /= t->shape[d];
        double g = elem_at(t, got, off), w = elem_at(t, t->data, off);
        if (g == w) continue;
        if (!(fabs(g - w) <= tol * fmax(1.0, fabs(w)))) {
            if (getenv("LOOM_FUZZ_DEBUG"))
                fprintf(stderr, "element %lld of %lld: %g, reference %g (tolerance %g)\n", (long long)e,
                        (long long)n, g, w, tol);
            return 0;
        }
    }
    return 1;
}

/* A call that ran, with the default scale: its outputs against the reference
 * decomposition (LOOM_ISA_REF, in doubles) within DESIGN.md's tolerance of the
 * dtypes involved (inner_precise 1: twice bf16's). Other scales are left out:
 * with a large one the softmax is so sharp that rounding the scores to bf16
 * moves the result past any element-wise tolerance, by design. Dropout divides
 * the tolerance by keep_prob (prefill). */
static void check_ref(arena *a, void *ctx, loom_tensor *const *outs, int n_outs, double tol) {
    void *got[2] = {NULL, NULL};
    for (int i = 0; i < n_outs; i++) {
        if (!outs[i]) continue;
        for (int j = 0; j < a->n; j++)
            if (&a->t[j] == outs[i] && (got[i] = malloc(a->bytes[j] ? a->bytes[j] : 1)))
                memcpy(got[i], a->buf[j], a->bytes[j]);
    }
    loom_isa was = loom_cpu_isa();
    if (loom_cpu_set_isa(LOOM_ISA_REF) != LOOM_OK) __builtin_trap();
    loom_status s = run_attn(ctx, NULL);
    loom_cpu_set_isa(was);
    if (s != LOOM_OK) __builtin_trap(); /* the reference refused what the kernels ran */
    for (int i = 0; i < n_outs; i++)
        if (got[i] && !close_to(outs[i], got[i], tol)) {
            if (getenv("LOOM_FUZZ_DEBUG")) {
                const attn_ctx *c = ctx;
                const loom_tensor *ts[4] = {c->pt.query, c->pt.key, c->pt.value, c->pt.attention_out};
                if (c->op == 1) ts[0] = c->dt.query, ts[1] = c->dt.key, ts[2] = c->dt.value, ts[3] = c->dt.attention_out;
                if (c->op == 2) ts[0] = c->ft.query, ts[1] = c->ft.key, ts[2] = c->ft.value, ts[3] = c->ft.attention_out;
                fprintf(stderr, "op %d output %d; q k v out:", c->op, i);
                for (int j = 0; j < 4; j++) {
                    fprintf(stderr, " %s[", loom_dtype_name(ts[j]->dtype));
                    for (int d = 0; d < ts[j]->ndim; d++) fprintf(stderr, "%s%lld", d ? "," : "", (long long)ts[j]->shape[d]);
                    fprintf(stderr, "]");
                }
                if (c->op == 0)
                    fprintf(stderr, " layout %d sparse %d pre %lld next %lld keep %g precise %d mask %d blocks %lld/%lld\n",
                            c->pp.input_layout, c->pp.sparse_mode, (long long)c->pp.pre_tokens,
                            (long long)c->pp.next_tokens, c->pp.keep_prob, c->pp.inner_precise,
                            c->pt.atten_mask != NULL, (long long)c->pp.block_q, (long long)c->pp.block_kv);
                else if (c->op == 1)
                    fprintf(stderr, " layout %d sparse %d pre %lld next %lld precise %d mask %d paged %d chunk %lld\n",
                            c->dp.input_layout, c->dp.sparse_mode, (long long)c->dp.pre_tokens,
                            (long long)c->dp.next_tokens, c->dp.inner_precise, c->dt.atten_mask != NULL,
                            c->dt.block_table != NULL, (long long)c->dp.kv_chunk);
                else
                    fprintf(stderr, " layout %d sparse %d pre %lld next %lld precise %d mask %d paged %d\n",
                            c->fp.input_layout, c->fp.sparse_mode, (long long)c->fp.pre_tokens,
                            (long long)c->fp.next_tokens, c->fp.inner_precise, c->ft.atten_mask != NULL,
                            c->ft.block_table != NULL);
            }
            __builtin_trap();
        }
    free(got[0]), free(got[1]);
}

static double attn_tol(const loom_tensor *q, const loom_tensor *k, const loom_tensor *v, const loom_tensor *o,
                       int precise) {
    double t = dtype_tol(q->dtype);
    const loom_tensor *ts[3] = {k, v, o};
    for (int i = 0; i < 3; i++)
        if (dtype_tol(ts[i]->dtype) > t) t = dtype_tol(ts[i]->dtype);
    if (precise == LOOM_ATTN_HIGH_PERFORMANCE) t = 2.0 * fmax(t, 1.0 / 128);
    return t;
}

/* Shapes shared by the three ops. */
typedef struct {
    loom_attn_layout layout;
    int64_t B, N, Nkv, D, Sq, Skv;
    loom_dtype qdt, kdt, odt;
    int pad, paged;
} shapes;

/* decode: 1 incre_flash_attention, 2 fused_infer (either kernel), 0 prefill. */
static void pick_shapes(reader *r, shapes *s, int decode) {
    s->layout = (loom_attn_layout)pick(r, decode == 1 ? 3 : 4);
    if (decode == 1 && bad(r)) s->layout = LOOM_ATTN_TND; /* for prefill only */
    s->B = 1 + pick(r, 3);
    s->Nkv = 1 + pick(r, 4);
    s->N = s->Nkv * (1 + pick(r, 4)) + bad(r); /* invalid: not a multiple */
    s->D = pick_d(r);
    s->Sq = 1 + (decode == 1 ? pick(r, 16) + bad(r) : pick(r, 70));
    s->Skv = 1 + pick(r, 150);
    s->qdt = pick_fdt(r);
    s->kdt = decode && pick(r, 3) == 0 ? LOOM_I8 : pick_fdt(r);
    s->odt = pick_fdt(r);
    s->pad = pick(r, 4) == 0 ? (int)(1 + pick(r, 9)) : 0;
    s->paged = decode && pick(r, 3) == 0;
    /* a paged or i8 cache: the decode kernel only (invalid: TND, S_q > 16) */
    if (decode == 2 && (s->paged || s->kdt == LOOM_I8) && !bad(r)) {
        if (s->layout == LOOM_ATTN_TND) s->layout = LOOM_ATTN_BSND;
        if (s->Sq > LOOM_INCRE_MAX_Q_LEN) s->Sq = 1 + s->Sq % LOOM_INCRE_MAX_Q_LEN;
    }
}

/* q, k, v and out in the layout (k/v Skv long); lse [B, N, S_q] (TND [T, N]), optional. */
static void mk_qkvo(arena *a, reader *r, const shapes *s, const loom_tensor **q, const loom_tensor **k,
                    const loom_tensor **v, loom_tensor **o, loom_tensor **lse) {
    int64_t sh[4];
    int nd = shape_of(s->layout, s->B, s->Sq, s->N, s->D, sh);
    *q = mk(a, r, s->qdt, nd, sh, s->pad, 0);
    *o = mk(a, r, s->odt, nd, sh, pick(r, 2) ? s->pad : 0, 1);
    nd = shape_of(s->layout, s->B, s->Skv, s->Nkv, s->D, sh);
    *k = mk(a, r, s->kdt, nd, sh, s->pad, 0);
    *v = mk(a, r, bad(r) ? pick_fdt(r) : s->kdt, nd, sh, bad(r) ? 0 : s->pad, 0);
    *lse = NULL;
    if (pick(r, 2)) {
        int64_t ls[3] = {s->B, s->N, s->Sq};
        if (s->layout == LOOM_ATTN_TND) ls[0] = s->B * s->Sq, ls[1] = s->N;
        if (bad(r)) ls[2] += 1; /* wrong shape */
        *lse = mk(a, r, LOOM_F32, s->layout == LOOM_ATTN_TND ? 2 : 3, ls, 0, 1);
    }
}

static float pick_scale(reader *r) { /* invalid: not finite */
    static const float v[6] = {0.0f, 0.0f, 0.125f, 1.0f, -0.5f, 3.0f};
    if (bad(r)) return pick(r, 2) ? NAN : INFINITY;
    return v[pick(r, 6)];
}

static int pick_sparse(reader *r, int has_mask) { /* 0..4 (1 needs a mask); invalid: 5 */
    if (bad(r)) return 5;
    int m = (int)pick(r, 5);
    return m == 1 && !has_mask ? 0 : m;
}

/* TND: cumulative end offsets of the sequences in T_q and T_kv (invalid: a
 * sequence too many, decreasing or past the end); returns num_seqs. */
static int64_t tnd_offsets(reader *r, const shapes *s, int64_t **cq, int64_t **ck) {
    int64_t n = s->B + bad(r);
    *cq = malloc((size_t)n * sizeof **cq);
    *ck = malloc((size_t)n * sizeof **ck);
    if (!*cq || !*ck) return 0;
    int64_t eq = 0, ek = 0;
    for (int64_t b = 0; b < n; b++) {
        eq += pick(r, 4) ? s->Sq : pick(r, 2) ? 0 : s->Sq / 2;
        ek += pick(r, 4) ? s->Skv : pick(r, 2) ? 0 : s->Skv / 2;
        if (bad(r)) eq = pick(r, 2) ? eq - 1 : eq + 1;
        if (bad(r)) ek = pick(r, 2) ? ek - 1 : ek + 1;
        (*cq)[b] = eq, (*ck)[b] = ek;
    }
    return n;
}

static void fuzz_prefill(reader *r) {
    arena a = {0};
    shapes s;
    pick_shapes(r, &s, 0);
    attn_ctx c;
    memset(&c, 0, sizeof c);
    c.op = 0;
    c.pp = loom_flash_attention_default_params();
    c.pp.input_layout = s.layout;
    const loom_tensor *q, *k, *v;
    loom_tensor *o, *lse;
    mk_qkvo(&a, r, &s, &q, &k, &v, &o, &lse);
    c.pt = (loom_flash_attention_tensors){.query = q, .key = k, .value = v, .attention_out = o, .softmax_lse = lse};
    c.pt.atten_mask = pick_mask(&a, r, s.B, s.N, s.Sq, s.Skv);
    if (s.layout == LOOM_ATTN_BSH || pick(r, 8) == 0) c.pp.num_heads = s.N, c.pp.num_key_value_heads = s.Nkv;
    c.pp.scale_value = pick_scale(r);
    c.pp.sparse_mode = pick_sparse(r, c.pt.atten_mask != NULL);
    c.pp.pre_tokens = pick_tokens(r);
    c.pp.next_tokens = pick_tokens(r);
    static const float kp[4] = {1.0f, 1.0f, 0.5f, 0.03f}, kbad[4] = {0.0f, 1.5f, -1.0f, NAN};
    c.pp.keep_prob = bad(r) ? kbad[pick(r, 4)] : kp[pick(r, 4)];
    c.pp.seed = rd(r), c.pp.offset = rd(r);
    int64_t *al = NULL, *alk = NULL, *cq = NULL, *ck = NULL;
    if (s.layout == LOOM_ATTN_TND) {
        c.pp.num_seqs = tnd_offsets(r, &s, &cq, &ck);
        c.pp.actual_seq_qlen = cq, c.pp.actual_seq_kvlen = ck;
    } else {
        c.pp.actual_seq_lengths = al = lens(r, s.B, s.Sq);
        c.pp.actual_seq_lengths_kv = alk = lens(r, s.B, s.Skv);
    }
    static const int64_t blk[5] = {0, 0, 1, 16, 33};
    c.pp.block_q = bad(r) ? 2000 : blk[pick(r, 5)];
    c.pp.block_kv = bad(r) ? -1 : blk[pick(r, 5)];
    c.pp.inner_precise = (int)pick(r, 2) + 2 * bad(r);
    loom_tensor *outs[2] = {o, lse};
    if (q && k && v && o) {
        long ran = n_ok[cur_op];
        check_run(&a, run_attn, &c, outs, 2);
        /* dropout multiplies the kept terms by 1 / keep_prob, and their rounding
         * with them: partial cancellation leaves an output keep_prob times smaller */
        if (n_ok[cur_op] > ran && c.pp.scale_value == 0.0f)
            check_ref(&a, &c, outs, 2, attn_tol(q, k, v, o, c.pp.inner_precise) / c.pp.keep_prob);
    }
    free(al), free(alk), free(cq), free(ck);
    arena_free(&a);
}

/* Decode and fused-infer share the cache setup: contiguous or paged, f32/f16/bf16
 * or i8 with per-channel or per-token scales (sometimes of the wrong shape). */
typedef struct {
    const loom_tensor *bt, *ks, *ko, *vs, *vo;
    int64_t block_size, *al;
    int kmode, vmode;
} cache_opts;

static void pick_cache(arena *a, reader *r, shapes *s, cache_opts *co, const loom_tensor **k,
                       const loom_tensor **v) {
    memset(co, 0, sizeof *co);
    co->al = lens(r, s->B, s->Skv);
    int64_t sh[4], nb = 0, bs = 0; /* bs: the cache's block size (co->block_size may say 0) */
    if (s->paged) { /* paged: lengths required (invalid: none) */
        if (!co->al && !bad(r)) {
            co->al = malloc((size_t)s->B * sizeof *co->al);
            if (co->al)
                for (int64_t b = 0; b < s->B; b++) co->al[b] = near(r, s->Skv);
        }
        static const int64_t sizes[5] = {1, 3, 16, 32, 64};
        co->block_size = sizes[pick(r, 5)];
        int64_t per = (s->Skv + co->block_size - 1) / co->block_size;
        nb = 1 + (int64_t)pick(r, (unsigned)(s->B * per + 2));
        int64_t bts[2] = {s->B, per + (int64_t)pick(r, 2) - bad(r)};
        loom_tensor *bt = bts[1] > 0 ? mk(a, r, LOOM_I32, 2, bts, 0, 0) : NULL;
        if (bt) { /* entries in [0, nb), shared blocks too; invalid: -1 or nb */
            int64_t n = loom_tensor_nelem(bt);
            for (int64_t i = 0; i < n; i++)
                ((int32_t *)bt->data)[i] = bad(r) ? (pick(r, 2) ? -1 : (int32_t)nb) : (int32_t)(rd(r) % nb);
        }
        co->bt = bt;
        bs = co->block_size;
        int nd = shape_of(s->layout, nb, bs, s->Nkv, s->D, sh);
        *k = mk(a, r, s->kdt, nd, sh, 0, 0);
        *v = mk(a, r, s->kdt, nd, sh, 0, 0);
        if (pick(r, 4) == 0) co->block_size = 0; /* from the shape */
        else if (bad(r)) co->block_size += 1;
    }
    if (s->kdt != LOOM_I8) return;
    for (int side = 0; side < 2; side++) {
        int mode = (int)pick(r, 3) == 0 ? LOOM_ANTIQUANT_PER_TOKEN : LOOM_ANTIQUANT_PER_CHANNEL;
        int nd;
        if (mode == LOOM_ANTIQUANT_PER_CHANNEL) sh[0] = pick(r, 4) ? s->Nkv : 1, sh[1] = s->D, nd = 2;
        else sh[0] = co->bt ? nb : s->B, sh[1] = pick(r, 4) ? s->Nkv : 1, sh[2] = co->bt ? bs : s->Skv, nd = 3;
        if (bad(r)) sh[nd - 1] += 1; /* invalid: wrong shape */
        loom_tensor *sc = bad(r) ? NULL : mk(a, r, LOOM_F32, nd, sh, 0, 0);
        if (sc) /* scales as a quantizer sets them (max|x| / 127): values of order 1 */
            for (int64_t i = 0; i < loom_tensor_nelem(sc); i++) {
                float *e = (float *)sc->data + i;
                *e = (0.25f + fabsf(*e)) / 127.0f;
            }
        const loom_tensor *of = pick(r, 3) == 0 ? mk(a, r, LOOM_F32, nd, sh, 0, 0) : NULL;
        if (side == 0) co->ks = sc, co->ko = of, co->kmode = mode;
        else co->vs = sc, co->vo = of, co->vmode = mode;
    }
}

static void fuzz_decode(reader *r, int fia) {
    arena a = {0};
    shapes s;
    pick_shapes(r, &s, fia ? 2 : 1);
    const loom_tensor *q, *k, *v;
    loom_tensor *o, *lse;
    mk_qkvo(&a, r, &s, &q, &k, &v, &o, &lse);
    cache_opts co;
    pick_cache(&a, r, &s, &co, &k, &v);
    const loom_tensor *mask = pick_mask(&a, r, s.B, s.N, s.Sq, s.Skv);
    float scale = pick_scale(r);
    int sparse = pick_sparse(r, mask != NULL), precise = (int)pick(r, 2) + 2 * bad(r);
    int64_t pre = pick_tokens(r), next = pick_tokens(r);
    int heads = s.layout == LOOM_ATTN_BSH || pick(r, 8) == 0;
    loom_tensor *outs[2] = {o, lse};
    int64_t *cq = NULL, *ck = NULL;
    attn_ctx c;
    memset(&c, 0, sizeof c);
    c.op = fia ? 2 : 1;
    if (!fia) {
        c.dp = loom_incre_flash_attention_default_params();
        c.dp.input_layout = s.layout;
        if (heads) c.dp.num_heads = s.N, c.dp.num_key_value_heads = s.Nkv;
        c.dp.scale_value = scale, c.dp.sparse_mode = sparse, c.dp.inner_precise = precise;
        c.dp.pre_tokens = pre, c.dp.next_tokens = next;
        c.dp.actual_seq_lengths = co.al, c.dp.block_size = co.block_size;
        c.dp.key_antiquant_mode = co.kmode, c.dp.value_antiquant_mode = co.vmode;
        static const int64_t ch[4] = {0, 1, 16, 100};
        c.dp.kv_chunk = bad(r) ? 5000 : ch[pick(r, 4)];
        c.dt = (loom_incre_flash_attention_tensors){.query = q, .key = k, .value = v, .atten_mask = mask,
                                                   .block_table = co.bt, .key_antiquant_scale = co.ks,
                                                   .key_antiquant_offset = co.ko, .value_antiquant_scale = co.vs,
                                                   .value_antiquant_offset = co.vo, .attention_out = o,
                                                   .softmax_lse = lse};
    } else {
        c.fp = loom_fused_infer_attention_default_params();
        c.fp.input_layout = s.layout;
        if (heads) c.fp.num_heads = s.N, c.fp.num_key_value_heads = s.Nkv;
        c.fp.scale_value = scale, c.fp.sparse_mode = sparse, c.fp.inner_precise = precise;
        c.fp.pre_tokens = pre, c.fp.next_tokens = next;
        c.fp.block_size = co.block_size;
        if (s.layout == LOOM_ATTN_TND && !bad(r)) /* TND takes offsets, not lengths */
            c.fp.num_seqs = tnd_offsets(r, &s, &cq, &ck), c.fp.actual_seq_qlen = cq, c.fp.actual_seq_kvlen = ck;
        else
            c.fp.actual_seq_lengths_kv = co.al;
        c.fp.key_antiquant_mode = co.kmode, c.fp.value_antiquant_mode = co.vmode;
        c.fp.decode_max_q_len = bad(r) ? 17 : (int64_t)pick(r, 17);
        c.ft = (loom_fused_infer_attention_tensors){.query = q, .key = k, .value = v, .atten_mask = mask,
                                                   .block_table = co.bt, .key_antiquant_scale = co.ks,
                                                   .key_antiquant_offset = co.ko, .value_antiquant_scale = co.vs,
                                                   .value_antiquant_offset = co.vo, .attention_out = o,
                                                   .softmax_lse = lse};
    }
    if (q && k && v && o) {
        long ran = n_ok[cur_op];
        check_run(&a, run_attn, &c, outs, 2);
        if (n_ok[cur_op] > ran && scale == 0.0f) check_ref(&a, &c, outs, 2, attn_tol(q, k, v, o, precise));
    }
    free(co.al), free(cq), free(ck);
    arena_free(&a);
}


/* ------------------------------------------------------------ reshape_and_cache */

/* Element offset of (entry e, slot s, head h, element d) in a cache of layout l. */
static int64_t cache_off(const loom_tensor *c, loom_attn_layout l, int64_t e, int64_t s, int64_t h,
                         int64_t d, int64_t D) {
    if (l == LOOM_ATTN_BNSD) return e * c->stride[0] + h * c->stride[1] + s * c->stride[2] + d;
    if (l == LOOM_ATTN_BSH) return e * c->stride[0] + s * c->stride[1] + h * D + d;
    return e * c->stride[0] + s * c->stride[1] + h * c->stride[2] + d;
}

/* loom_reshape_and_cache: key/value f32 [T, N_kv, D] into contiguous or paged
 * caches of f32/f16/bf16/i8 (per-channel scales given, per-token ones written).
 * On LOOM_OK: the inputs are unchanged, every cache element outside the written
 * slots is unchanged, and (float caches, each slot written once) the written
 * rows hold the inputs within their dtype's rounding. */
static void fuzz_kv_write(reader *r) {
    arena a = {0};
    loom_attn_layout l = (loom_attn_layout)pick(r, 3);
    if (bad(r)) l = LOOM_ATTN_TND;
    int64_t T = 1 + pick(r, 40), N = 1 + pick(r, 4), D = pick_d(r), B = 1 + pick(r, 3), S = 1 + pick(r, 64);
    static const loom_dtype cdt[4] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I8};
    loom_dtype dt = bad(r) ? LOOM_I32 : cdt[pick(r, 4)];
    int64_t ks[3] = {T, N, D};
    const loom_tensor *key = mk(&a, r, LOOM_F32, 3, ks, 0, 0), *val = mk(&a, r, LOOM_F32, 3, ks, 0, 0);
    loom_kv_write_params p = {.cache_layout = l};
    int64_t nent = B, slots = S, per = 0, sh[4];
    if (pick(r, 2)) { /* paged */
        static const int64_t sizes[4] = {1, 3, 16, 32};
        slots = sizes[pick(r, 4)];
        per = (S + slots - 1) / slots;
        nent = 1 + pick(r, (unsigned)(B * per + 1));
        int64_t bts[2] = {B, per};
        loom_tensor *bt = mk(&a, r, LOOM_I32, 2, bts, 0, 0);
        if (bt)
            for (int64_t i = 0; i < B * per; i++)
                ((int32_t *)bt->data)[i] = bad(r) ? (pick(r, 2) ? -1 : (int32_t)nent) : (int32_t)(rd(r) % nent);
        p.block_table = bt;
    }
    int nd = shape_of(l == LOOM_ATTN_TND ? LOOM_ATTN_BSND : l, nent, slots, N, D, sh);
    if (l == LOOM_ATTN_TND) nd = 3, sh[0] = nent * slots, sh[1] = N, sh[2] = D;
    loom_tensor *kc = mk(&a, r, dt, nd, sh, pick(r, 4) == 0 ? 3 : 0, 1);
    int kci = a.n - 1;
    loom_tensor *vc = mk(&a, r, dt, nd, sh, 0, 1);
    int vci = a.n - 1;
    if (dt == LOOM_I8) {
        p.antiquant_mode = pick(r, 2) ? LOOM_ANTIQUANT_PER_TOKEN : LOOM_ANTIQUANT_PER_CHANNEL;
        int64_t ss[3] = {N, D, 1};
        int snd = 2, tok = p.antiquant_mode == LOOM_ANTIQUANT_PER_TOKEN;
        if (tok) ss[0] = nent, ss[1] = N, ss[2] = slots, snd = 3;
        if (bad(r)) ss[snd - 1] += 1;
        p.key_scale = bad(r) ? NULL : mk(&a, r, LOOM_F32, snd, ss, 0, tok);
        p.value_scale = bad(r) ? NULL : mk(&a, r, LOOM_F32, snd, ss, 0, tok);
        if (pick(r, 3) == 0) p.key_offset = mk(&a, r, LOOM_F32, snd, ss, 0, tok);
        if (pick(r, 3) == 0) p.value_offset = mk(&a, r, LOOM_F32, snd, ss, 0, tok);
    }
    int64_t *pos = malloc((size_t)T * sizeof *pos), *bid = pick(r, 2) ? malloc((size_t)T * sizeof *bid) : NULL;
    int64_t limit = p.block_table ? per * slots : S; /* positions the cache (or the table) covers */
    if (!pos) goto done;
    for (int64_t t = 0; t < T; t++) {
        pos[t] = pick(r, 8) == 0 ? -1 : (int64_t)(rd(r) % (unsigned)limit); /* -1: a padding token */
        if (bad(r)) pos[t] = limit + (int64_t)pick(r, 3);
        if (bid) bid[t] = bad(r) ? (pick(r, 2) ? -1 : B) : (int64_t)pick(r, (unsigned)B);
    }
    p.positions = bad(r) ? NULL : pos;
    p.batch_ids = bid;
    if (!key || !val || !kc || !vc) goto done;
    snapshot before;
    snap(&a, &before);
    loom_clear_error();
    loom_status st = loom_reshape_and_cache(key, val, kc, vc, &p);
    (st == LOOM_OK ? n_ok : n_err)[cur_op]++;
    if (st != LOOM_OK && getenv("LOOM_FUZZ_DEBUG")) fprintf(stderr, "E%d %s\n", cur_op, loom_last_error());
    if (st != LOOM_OK) {
        if (loom_last_error()[0] == '\0' || !same(&a, &before, 0)) __builtin_trap();
        if (cur_wild == 0) __builtin_trap();
    } else {
        if (!same(&a, &before, 1)) __builtin_trap();
        /* the cache elements each token's slot covers, and how often it is written */
        for (int side = 0; side < 2; side++) {
            loom_tensor *c = side ? vc : kc;
            const float *x = (const float *)(side ? val : key)->data;
            int ci = side ? vci : kci;
            size_t n = span_elems(c), es = loom_dtype_size(dt);
            unsigned char *hit = calloc(n, 1);
            if (!hit) break;
            for (int64_t t = 0; t < T; t++) {
                if (pos[t] < 0) continue;
                int64_t b = bid ? bid[t] : 0, e = b, sl = pos[t];
                if (p.block_table) e = ((const int32_t *)p.block_table->data)[b * per + sl / slots], sl %= slots;
                for (int64_t h = 0; h < N; h++)
                    for (int64_t d = 0; d < D; d++) {
                        int64_t o = cache_off(c, l, e, sl, h, d, D);
                        if (hit[o] < 2) hit[o]++;
                    }
            }
            for (size_t o = 0; o < n; o++)
                if (!hit[o] && memcmp((const char *)before.copy[ci] + o * es, (const char *)c->data + o * es, es) != 0)
                    __builtin_trap(); /* written outside the tokens' slots */
            for (int64_t t = 0; t < T && dt != LOOM_I8; t++) {
                if (pos[t] < 0) continue;
                int64_t b = bid ? bid[t] : 0, e = b, sl = pos[t];
                if (p.block_table) e = ((const int32_t *)p.block_table->data)[b * per + sl / slots], sl %= slots;
                for (int64_t h = 0; h < N; h++)
                    for (int64_t d = 0; d < D; d++) {
                        int64_t o = cache_off(c, l, e, sl, h, d, D);
                        if (hit[o] != 1) continue; /* a slot two tokens wrote */
                        float want = x[(t * N + h) * D + d], got;
                        if (dt == LOOM_F32) got = ((const float *)c->data)[o];
                        else if (dt == LOOM_F16) got = loom_f16_to_f32(((const uint16_t *)c->data)[o]);
                        else got = loom_bf16_to_f32(((const uint16_t *)c->data)[o]);
                        float tol = dt == LOOM_F32 ? 0.0f : dt == LOOM_F16 ? 1.0f / 1024 : 1.0f / 128;
                        if (!(fabsf(got - want) <= tol * fabsf(want) + 1e-6f)) __builtin_trap();
                    }
            }
            free(hit);
        }
    }
    snap_free(&a, &before);
done:
    free(pos), free(bid);
    arena_free(&a);
}

/* ------------------------------------------------------------ add_rms_norm, swiglu, ffn */

typedef struct {
    int op; /* 4 add_rms_norm, 5 swiglu, 6 ffn */
    const loom_tensor *x, *res, *gamma, *wg, *wu, *wd;
    loom_tensor *y, *r;
    loom_add_rms_norm_params an;
    loom_act act;
    loom_ffn_params fp;
} fused_ctx;

static loom_status run_fused(void *c, loom_pool *pool) {
    fused_ctx *f = c;
    if (f->op == 4) return loom_add_rms_norm(f->x, f->res, f->gamma, &f->an, f->y, f->r, pool);
    if (f->op == 5) return loom_swiglu(f->x, f->act, f->y, pool);
    return loom_ffn(f->x, f->wg, f->wu, f->wd, f->res, &f->fp, f->y, pool);
}

static float half_act(float x, void *user) { return x * *(const float *)user; }

/* Element (i, j) of a 2-D f32 tensor. */
static float at2(const loom_tensor *t, int64_t i, int64_t j) {
    return ((const float *)t->data)[i * t->stride[0] + j * t->stride[1]];
}

/* The fused row ops against formulas in double (add_rms_norm, swiglu) and the
 * FFN's robustness properties (its accuracy is test_fused_ffn's). */
static void fuzz_fused(reader *r, int op) {
    arena a = {0};
    fused_ctx c;
    memset(&c, 0, sizeof c);
    c.op = op;
    int64_t M = 1 + pick(r, 24), D = pick_d(r), H = 1 + pick(r, 100);
    int pad = pick(r, 3) == 0 ? 1 + (int)pick(r, 5) : 0;
    loom_dtype xdt = bad(r) ? LOOM_F16 : LOOM_F32;
    int64_t xs[2] = {M, op == 5 ? 2 * H : D}, ys[2] = {M, op == 5 ? H : D};
    if (bad(r)) ys[1] += 1; /* wrong shape */
    c.x = mk(&a, r, xdt, 2, xs, pad, 0);
    c.y = mk(&a, r, LOOM_F32, 2, ys, pick(r, 2) ? pad : 0, 1);
    float user = 0.5f;
    if (op == 4) {
        c.res = mk(&a, r, LOOM_F32, 2, xs, 0, 0);
        c.r = mk(&a, r, LOOM_F32, 2, xs, pad, 1);
        int64_t gs[1] = {D + bad(r)};
        c.gamma = mk(&a, r, LOOM_F32, 1, gs, 0, 0);
        static const float eps[4] = {1e-6f, 1e-5f, 0.5f, INFINITY}, ebad[3] = {0.0f, -1.0f, NAN};
        c.an.epsilon = bad(r) ? ebad[pick(r, 3)] : eps[pick(r, 4)];
    } else if (op == 5) {
        c.act = bad(r) ? LOOM_ACT_COUNT : (loom_act)pick(r, LOOM_ACT_COUNT);
    } else {
        static const loom_dtype wdt[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};
        loom_dtype wt = bad(r) ? LOOM_I8 : wdt[pick(r, 3)];
        int merged = pick(r, 2);
        int64_t gs[2] = {merged ? 2 * H : H, D}, ds[2] = {D, H + bad(r)};
        c.wg = mk(&a, r, wt, 2, gs, 0, 0);
        c.wu = merged ? NULL : mk(&a, r, wt, 2, gs, 0, 0);
        c.wd = mk(&a, r, pick(r, 8) ? wt : wdt[pick(r, 3)], 2, ds, 0, 0);
        c.res = pick(r, 2) ? mk(&a, r, LOOM_F32, 2, xs, 0, 0) : NULL;
        c.fp = loom_ffn_default_params();
        c.fp.act = bad(r) ? LOOM_ACT_COUNT : (loom_act)pick(r, LOOM_ACT_COUNT);
        if (pick(r, 4) == 0) c.fp.custom_act = half_act, c.fp.custom_user = &user;
        static const int64_t bn[4] = {0, 1, 7, 64};
        c.fp.block_n = bad(r) ? -1 : bn[pick(r, 4)];
        if (!c.wg || !c.wd || (!merged && !c.wu)) goto done;
    }
    if (!c.x || !c.y || (op == 4 && (!c.res || !c.r || !c.gamma))) goto done;
    loom_tensor *outs[2] = {c.y, c.r};
    long ran = n_ok[op];
    check_run(&a, run_fused, &c, outs, op == 4 ? 2 : 1);
    if (n_ok[op] > ran && op != 6) { /* it ran: the formulas, from the inputs as they were */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < ys[1]; j++) {
                double want, got = at2(c.y, i, j);
                if (op == 4) {
                    double ss = 0.0;
                    for (int64_t k = 0; k < D; k++) {
                        float rk = at2(c.x, i, k) + at2(c.res, i, k);
                        ss += (double)rk * rk;
                    }
                    float rj = at2(c.x, i, j) + at2(c.res, i, j);
                    if (at2(c.r, i, j) != rj) __builtin_trap(); /* the sum, exactly */
                    want = rj / sqrt(ss / (double)D + (double)c.an.epsilon) * ((const float *)c.gamma->data)[j];
                } else {
                    want = (double)loom_act_apply(c.act, at2(c.x, i, j)) * at2(c.x, i, H + j);
                }
                if (!(fabs(got - want) <= (1.0 / 2048) * fmax(1.0, fabs(want)))) __builtin_trap();
            }
    }
done:
    arena_free(&a);
}

/* ------------------------------------------------------------ qkv_rope */

typedef struct {
    const loom_tensor *x, *wq, *wk, *wv;
    loom_qkv_rope_params p;
    loom_tensor *q, *k, *v, *kc, *vc;
} qkv_ctx_f;

static loom_status run_qkv(void *c, loom_pool *pool) {
    qkv_ctx_f *f = c;
    return loom_qkv_rope(f->x, f->wq, f->wk, f->wv, &f->p, f->q, f->k, f->v, f->kc, f->vc, pool);
}

/* loom_qkv_rope: merged or separate weights (f32/f16/bf16), RoPE modes, n_rot,
 * theta and freq_scale, optional k/v outputs, contiguous or paged f32/f16/bf16
 * caches; the robustness properties of check_run. */
static void fuzz_qkv_rope(reader *r) {
    arena a = {0};
    qkv_ctx_f c;
    memset(&c, 0, sizeof c);
    static const int64_t ds[7] = {2, 4, 8, 16, 32, 64, 128};
    int64_t T = 1 + pick(r, 20), hid = 1 + pick(r, 96), NKV = 1 + pick(r, 3), N = NKV * (1 + pick(r, 3)) + bad(r);
    int64_t D = bad(r) ? 3 : ds[pick(r, 7)];
    c.p = loom_qkv_rope_default_params();
    c.p.num_heads = N, c.p.num_key_value_heads = NKV, c.p.head_dim = D;
    c.p.rope_mode = bad(r) ? (loom_rope_mode)7 : (loom_rope_mode)pick(r, 2);
    c.p.n_rot = bad(r) ? D + 2 : pick(r, 2) ? 0 : 2 * (1 + (int64_t)pick(r, (unsigned)(D / 2)));
    static const float th[3] = {10000.0f, 500000.0f, 1.5f}, thbad[3] = {INFINITY, 0.0f, NAN};
    static const float fs[3] = {0.0f, 1.0f, 0.25f}, fsbad[3] = {INFINITY, -1.0f, NAN};
    c.p.theta = bad(r) ? thbad[pick(r, 3)] : th[pick(r, 3)];
    c.p.freq_scale = bad(r) ? fsbad[pick(r, 3)] : fs[pick(r, 3)];
    static const loom_dtype wdt[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};
    loom_dtype wt = wdt[pick(r, 3)];
    int64_t xs[2] = {T, hid}, qs[2] = {T, N * D}, ks[2] = {T, NKV * D};
    c.x = mk(&a, r, LOOM_F32, 2, xs, pick(r, 4) == 0 ? 2 : 0, 0);
    if (pick(r, 2)) {
        int64_t ws[2] = {(N + 2 * NKV) * D, hid};
        c.wq = mk(&a, r, wt, 2, ws, 0, 0);
    } else {
        int64_t wq[2] = {N * D, hid}, wk[2] = {NKV * D, hid};
        c.wq = mk(&a, r, wt, 2, wq, 0, 0);
        c.wk = mk(&a, r, bad(r) ? wdt[pick(r, 3)] : wt, 2, wk, 0, 0);
        c.wv = mk(&a, r, wt, 2, wk, 0, 0);
        if (!c.wk || !c.wv) goto done;
    }
    c.q = mk(&a, r, LOOM_F32, 2, qs, pick(r, 4) == 0 ? 3 : 0, 1);
    if (pick(r, 2)) c.k = mk(&a, r, LOOM_F32, 2, ks, 0, 1);
    if (pick(r, 2)) c.v = mk(&a, r, LOOM_F32, 2, ks, 0, 1);
    int64_t B = 1 + pick(r, 2), S = 1 + pick(r, 48), nent = B, slots = S, per = 0, cs[4];
    loom_kv_write_params *kp = &c.p.cache;
    kp->cache_layout = (loom_attn_layout)pick(r, 3);
    if (pick(r, 3) == 0) { /* paged */
        static const int64_t sizes[3] = {1, 4, 16};
        slots = sizes[pick(r, 3)];
        per = (S + slots - 1) / slots;
        nent = 1 + pick(r, (unsigned)(B * per));
        int64_t bts[2] = {B, per};
        loom_tensor *bt = mk(&a, r, LOOM_I32, 2, bts, 0, 0);
        if (!bt) goto done;
        for (int64_t i = 0; i < B * per; i++)
            ((int32_t *)bt->data)[i] = bad(r) ? (int32_t)nent : (int32_t)(rd(r) % nent);
        kp->block_table = bt;
    }
    int nd = shape_of(kp->cache_layout, nent, slots, NKV, D, cs);
    loom_dtype cdt = wdt[pick(r, 3)];
    c.kc = mk(&a, r, cdt, nd, cs, 0, 1);
    c.vc = mk(&a, r, cdt, nd, cs, 0, 1);
    int64_t *pos = malloc((size_t)T * sizeof *pos), *bid = malloc((size_t)T * sizeof *bid);
    if (pos && bid && c.x && c.wq && c.q && c.kc && c.vc) {
        int64_t limit = kp->block_table ? per * slots : S;
        for (int64_t t = 0; t < T; t++) {
            pos[t] = pick(r, 8) == 0 ? -1 : (int64_t)(rd(r) % (unsigned)limit);
            if (bad(r)) pos[t] = limit;
            bid[t] = (int64_t)pick(r, (unsigned)B);
        }
        kp->positions = pos, kp->batch_ids = bid;
        loom_tensor *outs[3] = {c.q, c.k, c.v};
        check_run(&a, run_qkv, &c, outs, 1);
        if (c.k && !finite_out(c.k, 0)) __builtin_trap();
        if (c.v && !finite_out(c.v, 0)) __builtin_trap();
    }
    free(pos), free(bid);
done:
    arena_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int init;
    if (!init) {
        init = 1;
        if (getenv("LOOM_FUZZ_STATS")) atexit(print_stats);
    }
    reader r = {data, size, 0, 0x9E3779B97F4A7C15ull ^ size, 0};
    unsigned w = rd(&r) % 4; /* half the inputs valid throughout, the rest invalid 1 in 4..16 */
    r.wild = w < 2 ? 0 : w == 2 ? 4 : 16;
    cur_wild = r.wild;
    for (size_t i = 0; i < size; i++) r.rng = (r.rng ^ data[i]) * 0x100000001B3ull;
    cur_op = (int)pick(&r, 8);
    switch (cur_op) {
    case 0: fuzz_prefill(&r); break;
    case 1: fuzz_decode(&r, 0); break;
    case 2: fuzz_decode(&r, 1); break;
    case 3: fuzz_kv_write(&r); break;
    case 7: fuzz_qkv_rope(&r); break;
    default: fuzz_fused(&r, cur_op); break;
    }
    return 0;
}
