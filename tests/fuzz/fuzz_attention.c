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
 *   - an attention call with the default scale (or any scale where q keeps its
 *     precision) matches the reference decomposition within DESIGN.md's
 *     tolerances (check_ref);
 *   - add_rms_norm and swiglu match their formulas in double within 2^-11, the
 *     FFN and QKV+RoPE theirs within a bound that follows each sum's rounding
 *     (fuzz_fused_ops.c: ffn_check, qkv_check).
 * Sizes are capped (S <= 150 keys, D <= 257, B <= 3, N <= 17) so an input runs
 * in milliseconds. */
#include "fuzz_harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ------------------------------------------------------------ choices */

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

typedef struct {
    int op; /* OP_PREFILL, OP_DECODE or OP_FIA */
    loom_flash_attention_tensors pt;
    loom_flash_attention_params pp;
    loom_incre_flash_attention_tensors dt;
    loom_incre_flash_attention_params dp;
    loom_fused_infer_attention_tensors ft;
    loom_fused_infer_attention_params fp;
    int used_decode; /* OP_FIA: the kernel the last call chose */
} attn_ctx;

static loom_status run_attn(void *c, loom_pool *pool) {
    attn_ctx *x = c;
    if (x->op == OP_PREFILL) return loom_flash_attention_score(&x->pt, &x->pp, pool);
    if (x->op == OP_DECODE) return loom_incre_flash_attention(&x->dt, &x->dp, pool);
    return loom_fused_infer_attention_score(&x->ft, &x->fp, pool, &x->used_decode);
}


/* ------------------------------------------------------------ against the reference */

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

/* The call's shapes and parameters, for a reference mismatch (LOOM_FUZZ_DEBUG). */
static void dump_call(const void *ctx, int i) {
    const attn_ctx *c = ctx;
    const loom_tensor *ts[4] = {c->pt.query, c->pt.key, c->pt.value, c->pt.attention_out};
    if (c->op == OP_DECODE) ts[0] = c->dt.query, ts[1] = c->dt.key, ts[2] = c->dt.value, ts[3] = c->dt.attention_out;
    if (c->op == OP_FIA) ts[0] = c->ft.query, ts[1] = c->ft.key, ts[2] = c->ft.value, ts[3] = c->ft.attention_out;
    fprintf(stderr, "op %d output %d; q k v out:", c->op, i);
    for (int j = 0; j < 4; j++) {
        fprintf(stderr, " %s[", loom_dtype_name(ts[j]->dtype));
        for (int d = 0; d < ts[j]->ndim; d++) fprintf(stderr, "%s%lld", d ? "," : "", (long long)ts[j]->shape[d]);
        fprintf(stderr, "]");
    }
    if (c->op == OP_PREFILL)
        fprintf(stderr, " layout %d sparse %d pre %lld next %lld keep %g precise %d mask %d blocks %lld/%lld\n",
                c->pp.input_layout, c->pp.sparse_mode, (long long)c->pp.pre_tokens,
                (long long)c->pp.next_tokens, c->pp.keep_prob, c->pp.inner_precise,
                c->pt.atten_mask != NULL, (long long)c->pp.block_q, (long long)c->pp.block_kv);
    else if (c->op == OP_DECODE)
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

/* A call that ran: its outputs against the reference decomposition
 * (LOOM_ISA_REF, in doubles) within DESIGN.md's tolerance of the dtypes
 * involved (inner_precise 1: twice bf16's). At the default scale always; at
 * other scales only where q keeps its precision (scale_ok): with a large scale
 * the softmax is so sharp that rounding q (to bf16 for inner_precise 1, to bf16
 * hi + lo parts or 16-bit integers for a bf16 or i8 cache) moves the result past
 * any element-wise tolerance, by design. Dropout divides the tolerance by
 * keep_prob (prefill). */
static void check_ref(arena *a, void *ctx, loom_tensor *const *outs, int n_outs, double tol) {
    void *got[2] = {NULL, NULL};
    for (int i = 0; i < n_outs; i++) {
        if (!outs[i]) continue;
        for (int j = 0; j < a->n; j++)
            if (&a->t[j] == outs[i] && (got[i] = malloc(a->bytes[j] ? a->bytes[j] : 1)))
                memcpy(got[i], a->buf[j], a->bytes[j]);
    }
    loom_isa was = loom_cpu_isa();
    FUZZ_CHECK(loom_cpu_set_isa(LOOM_ISA_REF) == LOOM_OK);
    loom_status s = run_attn(ctx, NULL);
    loom_cpu_set_isa(was);
    FUZZ_CHECK(s == LOOM_OK); /* the reference takes what the kernels ran */
    for (int i = 0; i < n_outs; i++)
        if (got[i] && !close_to(outs[i], got[i], tol)) {
            if (getenv("LOOM_FUZZ_DEBUG")) dump_call(ctx, i);
            FUZZ_CHECK(0); /* outside the tolerance */
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
    /* an i8 cache: not TND unless paged (longer queries go to the prefill kernel, which
     * dequantizes it); a paged cache: either kernel, TND included */
    if (decode == 2 && s->kdt == LOOM_I8 && !s->paged && s->layout == LOOM_ATTN_TND && !bad(r))
        s->layout = LOOM_ATTN_BSND;
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
    c.op = OP_PREFILL;
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
        if (n_ok[cur_op] > ran && (c.pp.scale_value == 0.0f || c.pp.inner_precise == 0))
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
        /* a TND query's paged cache is BSND [num_blocks, block_size, N_kv, D] (invalid: [T, N, D]) */
        loom_attn_layout cl = s->layout == LOOM_ATTN_TND && !bad(r) ? LOOM_ATTN_BSND : s->layout;
        int nd = shape_of(cl, nb, bs, s->Nkv, s->D, sh);
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
    c.op = fia ? OP_FIA : OP_DECODE;
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
        int scale_ok = scale == 0.0f || (precise == 0 && k->dtype != LOOM_BF16 && k->dtype != LOOM_I8);
        if (n_ok[cur_op] > ran && scale_ok) check_ref(&a, &c, outs, 2, attn_tol(q, k, v, o, precise));
        if (n_ok[cur_op] > ran && fia && co.bt && !c.used_decode) n_paged_prefill++;
    }
    free(co.al), free(cq), free(ck);
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
    cur_op = (int)pick(&r, OP_COUNT);
    switch (cur_op) {
    case OP_PREFILL: fuzz_prefill(&r); break;
    case OP_DECODE: fuzz_decode(&r, 0); break;
    case OP_FIA: fuzz_decode(&r, 1); break;
    case OP_KV_WRITE: fuzz_kv_write(&r); break;
    case OP_QKV_ROPE: fuzz_qkv_rope(&r); break;
    case OP_MOE: fuzz_moe(&r); break;
    default: fuzz_fused(&r, cur_op); break;
    }
    return 0;
}
