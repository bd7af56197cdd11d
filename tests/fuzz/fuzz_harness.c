/* The shared part of the fuzz_attention target (fuzz_harness.h). */
#include "fuzz_harness.h"

long n_ok[OP_COUNT], n_err[OP_COUNT], n_paged_prefill;
int cur_op;
unsigned cur_wild;

size_t span_elems(const loom_tensor *t) {
    size_t e = 1;
    for (int i = 0; i < t->ndim; i++) e += (size_t)(t->shape[i] - 1) * (size_t)t->stride[i];
    return e;
}

loom_tensor *mk(arena *a, reader *r, loom_dtype dt, int ndim, const int64_t *shape, int pad,
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

void arena_free(arena *a) {
    for (int i = 0; i < a->n; i++) free(a->buf[i]);
    a->n = 0;
}

void snap(const arena *a, snapshot *s) {
    for (int i = 0; i < a->n; i++) {
        s->copy[i] = malloc(a->bytes[i] ? a->bytes[i] : 1);
        if (s->copy[i]) memcpy(s->copy[i], a->buf[i], a->bytes[i]);
    }
}

int same(const arena *a, const snapshot *s, int which) {
    for (int i = 0; i < a->n; i++) {
        if ((which == 1 && a->out[i]) || (which == 2 && !a->out[i])) continue;
        if (s->copy[i] && memcmp(s->copy[i], a->buf[i], a->bytes[i]) != 0) return 0;
    }
    return 1;
}

int gaps_same(const arena *a, int i, const snapshot *s) {
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

void snap_free(const arena *a, snapshot *s) {
    for (int i = 0; i < a->n; i++) free(s->copy[i]);
}

int finite_out(const loom_tensor *t, int allow_ninf) {
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


loom_dtype pick_fdt(reader *r) { /* f32/f16/bf16; invalid: i8 or i32 */
    static const loom_dtype d[4] = {LOOM_F32, LOOM_F32, LOOM_F16, LOOM_BF16};
    if (bad(r)) return pick(r, 2) ? LOOM_I8 : LOOM_I32;
    return d[pick(r, 4)];
}

int64_t pick_d(reader *r) { /* 1..256; invalid: 257 */
    static const int64_t d[11] = {1, 8, 16, 31, 32, 64, 80, 96, 128, 200, 256};
    return bad(r) ? 257 : d[pick(r, 11)];
}


int shape_of(loom_attn_layout l, int64_t B, int64_t S, int64_t N, int64_t D, int64_t *sh) {
    switch (l) {
    case LOOM_ATTN_BNSD: sh[0] = B, sh[1] = N, sh[2] = S, sh[3] = D; return 4;
    case LOOM_ATTN_BSH: sh[0] = B, sh[1] = S, sh[2] = N * D; return 3;
    case LOOM_ATTN_TND: sh[0] = B * S, sh[1] = N, sh[2] = D; return 3;
    default: sh[0] = B, sh[1] = S, sh[2] = N, sh[3] = D; return 4;
    }
}

loom_pool *pool2(void) {
    static loom_pool *p;
    if (!p && loom_pool_init(&p, 2) != LOOM_OK) p = NULL;
    return p;
}

void print_stats(void) {
    static const char *names[OP_COUNT] = {"flash_attention_score", "incre_flash_attention",
                                          "fused_infer_attention_score", "reshape_and_cache", "add_rms_norm",
                                          "swiglu", "ffn", "qkv_rope", "moe"};
    for (int i = 0; i < OP_COUNT; i++) fprintf(stderr, "fuzz_attention: %s: %ld ran, %ld refused\n", names[i], n_ok[i], n_err[i]);
    fprintf(stderr, "fuzz_attention: of which a paged cache through the prefill kernel: %ld\n", n_paged_prefill);
}

void count_status(loom_status s) {
    (s == LOOM_OK ? n_ok : n_err)[cur_op]++;
    if (s != LOOM_OK && getenv("LOOM_FUZZ_DEBUG")) fprintf(stderr, "E%d %s\n", cur_op, loom_last_error());
}

void check_run(arena *a, run_fn fn, void *ctx, loom_tensor *const *outs, int n_outs) {
    snapshot before, first;
    snap(a, &before);
    loom_clear_error();
    loom_status s = fn(ctx, NULL);
    count_status(s);
    if (s != LOOM_OK) {
        FUZZ_CHECK(loom_last_error()[0] != '\0' && same(a, &before, 0)); /* named, nothing written */
        FUZZ_CHECK(cur_wild != 0); /* a valid call refused */
        snap_free(a, &before);
        return;
    }
    FUZZ_CHECK(same(a, &before, 1)); /* no input written */
    for (int i = 0; i < a->n; i++)
        FUZZ_CHECK(!a->out[i] || gaps_same(a, i, &before)); /* no row padding written */
    for (int i = 0; i < n_outs; i++)
        FUZZ_CHECK(finite_out(outs[i], i > 0));
    snap(a, &first);
    loom_pool *p = pool2();
    if (p) {
        FUZZ_CHECK(fn(ctx, p) == LOOM_OK && same(a, &first, 0)); /* two threads: the same bits */
    }
    snap_free(a, &first);
    snap_free(a, &before);
}

double dtype_tol(loom_dtype t) { /* DESIGN.md; an i8 cache counts as f32 */
    return t == LOOM_BF16 ? 1.0 / 128 : t == LOOM_F16 ? 1.0 / 256 : 1.0 / 2048;
}

double elem_at(const loom_tensor *t, const void *base, int64_t off) {
    if (t->dtype == LOOM_F32) return ((const float *)base)[off];
    if (t->dtype == LOOM_F16) return loom_f16_to_f32(((const uint16_t *)base)[off]);
    return loom_bf16_to_f32(((const uint16_t *)base)[off]);
}
