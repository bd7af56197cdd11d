/* loom_incre_flash_attention (decode) against its reference decomposition:
 * contiguous and paged caches (paged = contiguous, bit for bit), f32/f16/bf16
 * and i8 caches with per-channel / per-token antiquant, q_len 1..16, masks,
 * split-KV chunking; one launch vs split+merge for nth 1..3 (bit-identical);
 * errors; the op-table entry. The decode kernels' own contracts are in
 * test_decode_kernels.c, fused_infer_attention_score's dispatch and i8 caches
 * in the prefill kernel in test_attention_dispatch.c. */
#include "test_incre_attention_case.h"
#include "graph/ops_init.h"
#include "base/variants.h"

/* Runs at level isa as nth threads: one launch, or split then merge. */
static loom_status inc_run(const loom_incre_flash_attention_tensors *t,
                           const loom_incre_flash_attention_params *p, loom_isa isa, int nth,
                           int split) {
    size_t sb = 0, wb = 0;
    loom_status s = loom_incre_flash_attention_sizes(t, p, &sb, &wb);
    if (s != LOOM_OK) return s;
    loom_isa was = loom_cpu_isa();
    if (loom_cpu_set_isa(isa) != LOOM_OK) return LOOM_ERR_UNSUPPORTED;
    void *ws = xmalloc(wb);
    for (int ith = 0; ith < nth && s == LOOM_OK; ith++) {
        void *sc = loom_alloc_aligned(sb, LOOM_ALIGN);
        s = split ? loom_incre_flash_attention_split(t, p, ith, nth, sc, sb, ws, wb)
                  : loom_incre_flash_attention_thread(t, p, ith, nth, sc, sb);
        loom_free_aligned(sc);
    }
    for (int ith = 0; split && ith < nth && s == LOOM_OK; ith++)
        s = loom_incre_flash_attention_merge(t, p, ith, nth, ws, wb);
    free(ws);
    loom_cpu_set_isa(was);
    return s;
}

/* The fused run of a set-up case at every level against the reference; paged
 * and threaded runs against the fused one, bit for bit. */
static void inc_check_data(const inc_case *c, inc_data *dp, int threads) {
    inc_data d = *dp;
    loom_status s = inc_run(&d.tr, &d.p, LOOM_ISA_REF, 1, 0);
    CHECK_MSG(s == LOOM_OK, "reference: %s", loom_last_error());
    double tol = case_tol(c->qdt, c->kvdt, c->odt);
    if (c->precise == LOOM_ATTN_HIGH_PERFORMANCE) /* P may be rounded to bf16: bf16's tolerance */
        tol = case_tol(LOOM_BF16, c->kvdt, c->odt);
    size_t ob = (size_t)tensor_count(&d.out) * loom_dtype_size(c->odt);
    loom_isa lv[LOOM_ISA_COUNT];
    int nl = test_levels(lv);
    for (int li = 0; li < nl && s == LOOM_OK; li++) {
        const char *name = loom_isa_name(lv[li]);
        s = inc_run(&d.t, &d.p, lv[li], 1, 0);
        CHECK_MSG(s == LOOM_OK, "%s: %s", name, loom_last_error());
        CHECK_MSG(tensors_close(&d.out, &d.rout, tol, "out"), "%s out", name);
        if (c->lse) CHECK_MSG(tensors_close(&d.lse, &d.rlse, tol, "lse"), "%s lse", name);
        CHECK_MSG(inc_run(&d.tp, &d.pp, lv[li], 1, 0) == LOOM_OK, "%s paged: %s", name, loom_last_error());
        CHECK_MSG(memcmp(d.out.data, d.pout.data, ob) == 0, "%s: paged differs", name);
        if (!threads) continue;
        for (int split = 0; split < 2; split++)
            for (int nth = 1; nth <= 3; nth++) {
                if (!split && nth == 1) continue;
                memset(d.pout.data, 0x5A, ob);
                loom_incre_flash_attention_tensors t2 = d.t;
                t2.attention_out = &d.pout, t2.softmax_lse = NULL;
                CHECK(inc_run(&t2, &d.p, lv[li], nth, split) == LOOM_OK);
                CHECK_MSG(memcmp(d.out.data, d.pout.data, ob) == 0, "%s: split=%d nth=%d differs",
                          name, split, nth);
            }
    }
}

static void inc_check_case(const inc_case *c, loom_rng *r, int threads) {
    inc_data d;
    inc_setup(c, &d, r);
    int before = check_failures_;
    inc_check_data(c, &d, threads);
    inc_teardown(&d);
    if (check_failures_ != before) inc_describe(c);
}

static inc_case random_case(loom_rng *r) {
    static const int64_t dims[] = {32, 48, 64, 80, 96, 128, 256, 40, 72, 33};
    static const int64_t groups[] = {1, 2, 4, 8, 5};
    static const loom_dtype kv[] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I8, LOOM_I8};
    inc_case c;
    memset(&c, 0, sizeof c);
    c.L = (loom_attn_layout)irand(r, 0, 2);
    c.Nkv = irand(r, 1, 3), c.N = c.Nkv * groups[irand(r, 0, 4)];
    c.D = dims[irand(r, 0, 9)];
    c.B = irand(r, 1, 3);
    c.Sq = loom_rng_uniform(r) < 0.5f ? 1 : irand(r, 1, 16);
    c.Smax = loom_rng_uniform(r) < 0.7f ? irand(r, 1, 90) : irand(r, 200, 700);
    c.qdt = loom_rng_uniform(r) < 0.7f ? LOOM_F32 : LOOM_BF16;
    c.kvdt = kv[irand(r, 0, 4)];
    c.odt = loom_rng_uniform(r) < 0.8f ? LOOM_F32 : LOOM_F16;
    c.kmode = (int)irand(r, 0, 1), c.vmode = (int)irand(r, 0, 1);
    c.koff = (int)irand(r, 0, 1), c.voff = (int)irand(r, 0, 1);
    c.sparse = loom_rng_uniform(r) < 0.4f ? 3 : loom_rng_uniform(r) < 0.5f ? 0 : (int)irand(r, 2, 4);
    c.pre = c.next = LOOM_ATTN_TOKENS_ALL;
    if (c.sparse == 4) c.pre = irand(r, 0, 100), c.next = irand(r, -2, 3);
    c.mask_kind = loom_rng_uniform(r) < 0.25f ? (int)irand(r, 1, 2) : 0;
    c.lens = loom_rng_uniform(r) < 0.6f;
    c.lse = loom_rng_uniform(r) < 0.5f;
    static const int64_t bss[] = {1, 4, 16, 64, 7};
    c.bs = bss[irand(r, 0, 4)];
    static const int64_t chunks[] = {0, 0, 16, 64, 100, 1};
    c.chunk = chunks[irand(r, 0, 5)];
    if (c.chunk == 1 && c.Smax > 100) c.chunk = 33;
    c.precise = loom_rng_uniform(r) < 0.3f ? LOOM_ATTN_HIGH_PERFORMANCE : LOOM_ATTN_HIGH_PRECISION;
    return c;
}

static void test_random_decode(void) {
    loom_rng r;
    loom_rng_init(&r, 77, 2);
    for (int i = 0; i < 120; i++) {
        inc_case c = random_case(&r);
        inc_check_case(&c, &r, i % 4 == 0);
    }
}

/* Score soft-capping (Gemma 2: softcap * tanh(s / softcap) before the mask and
 * the softmax) in random cases: every cache dtype and layout, masks, chunks,
 * paged copies and thread counts, against the reference decomposition. Caps
 * from 0.5 (every score capped hard) to 20, with sharp scales so that the cap
 * changes the result; a cap that changes nothing would not test it, so the
 * reference with and without it must differ. */
static void test_softcap(void) {
    loom_rng r;
    loom_rng_init(&r, 1234, 7);
    static const float caps[] = {0.5f, 1.0f, 3.0f, 20.0f};
    for (int i = 0; i < 48; i++) {
        inc_case c = random_case(&r);
        c.softcap = caps[i % 4];
        c.scale = i % 2 ? 0.0f : 4.0f / sqrtf((float)c.D);
        inc_check_case(&c, &r, i % 3 == 0);
    }
    inc_case c = random_case(&r);
    c.kvdt = LOOM_F32, c.mask_kind = 0, c.lens = 0, c.sparse = 0, c.Smax = 40, c.softcap = 1.0f;
    c.scale = 4.0f / sqrtf((float)c.D);
    inc_data d;
    inc_setup(&c, &d, &r);
    CHECK(inc_run(&d.tr, &d.p, LOOM_ISA_REF, 1, 0) == LOOM_OK);
    size_t ob = (size_t)tensor_count(&d.out) * loom_dtype_size(c.odt);
    void *capped = xmalloc(ob);
    memcpy(capped, d.rout.data, ob);
    d.p.softcap = 0.0f;
    CHECK(inc_run(&d.tr, &d.p, LOOM_ISA_REF, 1, 0) == LOOM_OK);
    CHECK_MSG(memcmp(capped, d.rout.data, ob) != 0, "softcap 1 left the reference unchanged");
    d.p.softcap = -1.0f;
    CHECK(inc_run(&d.t, &d.p, LOOM_ISA_REF, 1, 0) == LOOM_ERR_INVALID_ARG);
    d.p.softcap = INFINITY;
    CHECK(inc_run(&d.t, &d.p, LOOM_ISA_REF, 1, 0) == LOOM_ERR_INVALID_ARG);
    free(capped);
    inc_teardown(&d);
}

/* Head dims up to 16 (tiny models) take their own kernels (two keys per
 * register for Q.K^T at d <= 8, four FMA chains per row for P.V) and the
 * longest tile: every small d, 1 to 8 q rows per kv head, key counts around
 * the tile sizes, every cache dtype, at every level and thread count. */
static void test_small_head_dims(void) {
    loom_rng r;
    loom_rng_init(&r, 19, 5);
    static const int64_t dims[] = {1, 2, 3, 5, 7, 8, 9, 12, 16};
    static const int64_t groups[] = {1, 2, 3, 4, 8};
    static const int64_t lens[] = {1, 7, 31, 32, 33, 127, 128, 129, 300};
    static const loom_dtype kv[] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I8};
    for (int i = 0; i < 72; i++) {
        inc_case c = random_case(&r);
        c.D = dims[i % 9];
        c.Nkv = irand(&r, 1, 3), c.N = c.Nkv * groups[irand(&r, 0, 4)];
        c.Smax = lens[irand(&r, 0, 8)];
        c.kvdt = kv[i % 4];
        if (c.sparse == 4) c.pre = irand(&r, 0, c.Smax), c.next = irand(&r, -2, 3);
        if (c.chunk > c.Smax) c.chunk = 0;
        inc_check_case(&c, &r, i % 3 == 0);
    }
}


/* Sharp attention: with the default scale and random data the scores are small
 * and nearly flat, which hides score errors (a 0.2 % error in every score
 * passes). A large scale_value makes the softmax peaked, so the output follows
 * the few largest scores and their errors show: the kernels' fast paths for
 * d = 64, 80, 96, 128 and 256 in halves (rows in registers; vdpbf16ps with q split hi/lo,
 * vpdpwssd with q rounded to 16 bits) must stay within the f32/bf16
 * tolerances here too. Every head dim meets every cache dtype, with one and
 * four query rows per kv head. */
static void test_peaked_scores(void) {
    loom_rng r;
    loom_rng_init(&r, 21, 2);
    static const loom_dtype kv[] = {LOOM_F32, LOOM_BF16, LOOM_I8, LOOM_I8, LOOM_F16};
    static const int64_t dims[] = {64, 128, 80, 96, 256};
    for (int i = 0; i < 50; i++) {
        inc_case c = base_case();
        c.L = (loom_attn_layout)(i % 3);
        c.D = dims[i % 5];
        c.kvdt = kv[(i / 5) % 5];
        c.kmode = c.vmode = (i / 4) % 2; /* i8: per channel and per token, at both d */
        c.Nkv = 2, c.N = c.Nkv * (i % 3 == 0 ? 1 : 4), c.Sq = i % 5 == 0 ? 3 : 1;
        c.Smax = 300 + 17 * i, c.chunk = i % 2 ? 128 : 0;
        c.scale = 12.0f / sqrtf((float)c.D);
        inc_check_case(&c, &r, i % 2 == 0);
        if (c.kvdt == LOOM_I8) { /* and under inner_precise 1 (the same arithmetic) */
            c.precise = LOOM_ATTN_HIGH_PERFORMANCE;
            inc_check_case(&c, &r, i % 2 == 0);
        }
    }
}

/* Heads walked together (dec_group): in BSND / BSH caches and paged ones with
 * small blocks a thread takes the kv heads of a batch entry tile by tile
 * (tile t of every head, then t + 1); contiguous BNSD caches head by head.
 * Each head keeps its own q, partial and fold, so the walk changes no bit:
 * the paged copy equals the contiguous cache (a BNSD pair: grouped against
 * one by one), and 1-3 threads, in one launch or split (which walks them
 * together too), equal one thread.
 * The cases cut groups at batch entries and thread ranges, at the bound on
 * per-head state (32 q rows a head: 3 heads) and at ATTN_DEC_GROUP_MAX (40
 * kv heads), with per-token and per-channel i8 offsets (per-head terms), and
 * take the shorter tiles of a wide key stride (the level's dec_group_span). */
static void test_head_groups(void) {
    loom_rng r;
    loom_rng_init(&r, 91, 2);
    static const struct {
        loom_attn_layout L;
        int64_t Nkv, G, Sq, D, bs;
        loom_dtype kv;
        int kmode, vmode;
        int64_t group, pgroup; /* expected: contiguous cache, paged copy */
    } cs[] = {
        {LOOM_ATTN_BNSD, 8, 4, 1, 128, 16, LOOM_F32, 0, 0, 1, 8},
        {LOOM_ATTN_BNSD, 6, 4, 1, 64, 64, LOOM_BF16, 0, 0, 1, 1},
        {LOOM_ATTN_BSND, 8, 4, 1, 128, 64, LOOM_BF16, 0, 0, 8, 8},
        {LOOM_ATTN_BSND, 8, 4, 1, 128, 16, LOOM_F32, 0, 0, 8, 8}, /* 16-key tiles (dec_group_span) */
        {LOOM_ATTN_BSH, 5, 2, 16, 128, 16, LOOM_I8, 1, 1, 3, 3},
        {LOOM_ATTN_BSND, 7, 4, 1, 128, 7, LOOM_I8, 0, 1, 7, 7},
        {LOOM_ATTN_BSND, 40, 1, 1, 64, 16, LOOM_F16, 0, 0, ATTN_DEC_GROUP_MAX, ATTN_DEC_GROUP_MAX},
        {LOOM_ATTN_BNSD, 3, 8, 16, 256, 4, LOOM_F32, 0, 0, 1, 1},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        inc_case c = base_case();
        c.L = cs[i].L, c.Nkv = cs[i].Nkv, c.N = cs[i].Nkv * cs[i].G, c.Sq = cs[i].Sq, c.D = cs[i].D;
        c.bs = cs[i].bs, c.kvdt = cs[i].kv, c.kmode = cs[i].kmode, c.vmode = cs[i].vmode;
        c.koff = c.voff = 1, c.lens = 1;
        c.Smax = 300 + 13 * (int64_t)i, c.chunk = i % 2 ? 128 : 0;
        c.sparse = cs[i].Sq > 1 ? 3 : 0;
        inc_data d;
        inc_setup(&c, &d, &r);
        attn_problem pr, pp;
        CHECK(attn_resolve_decode(&d.t, &d.p, NULL, &pr) == LOOM_OK);
        CHECK(attn_resolve_decode(&d.tp, &d.pp, NULL, &pp) == LOOM_OK);
        CHECK_MSG(attn_decode_group(&pr) == cs[i].group, "case %zu: group %lld, want %lld", i,
                  (long long)attn_decode_group(&pr), (long long)cs[i].group);
        CHECK_MSG(attn_decode_group(&pp) == cs[i].pgroup, "case %zu: paged group %lld, want %lld", i,
                  (long long)attn_decode_group(&pp), (long long)cs[i].pgroup);
        for (int nth = 2; nth <= 3; nth++) { /* the split launch walks them together too */
            int64_t widest = 0;
            for (int ith = 0; ith < nth; ith++) {
                int64_t w = attn_decode_split_group(&pr, ith, nth);
                widest = w > widest ? w : widest;
            }
            CHECK_MSG(cs[i].group > 1 ? widest > 1 && widest <= cs[i].group : widest == 1,
                      "case %zu: split launch on %d threads walks %lld heads together, group %lld", i, nth,
                      (long long)widest, (long long)cs[i].group);
        }
        int before = check_failures_;
        inc_check_data(&c, &d, 1);
        inc_teardown(&d);
        if (check_failures_ != before) inc_describe(&c);
    }
}

/* Whether case c (inner_precise 1) gives other bits than with inner_precise 0. */
static int hp_differs(const inc_case *c, loom_rng *r) {
    inc_data d;
    inc_setup(c, &d, r);
    size_t ob = (size_t)tensor_count(&d.out) * loom_dtype_size(c->odt);
    CHECK(loom_incre_flash_attention(&d.t, &d.p, NULL) == LOOM_OK);
    loom_incre_flash_attention_params p0 = d.p;
    p0.inner_precise = LOOM_ATTN_HIGH_PRECISION;
    loom_incre_flash_attention_tensors t0 = d.t;
    t0.attention_out = &d.pout;
    CHECK(loom_incre_flash_attention(&t0, &p0, NULL) == LOOM_OK);
    int differs = memcmp(d.out.data, d.pout.data, ob) != 0;
    inc_teardown(&d);
    return differs;
}

/* inner_precise 1 takes the bf16 path where the CPU has AVX512_BF16 (head dims
 * 64, 128 and 256): a bf16 K's Q.K^T with q rounded to bf16. The output
 * differs from inner_precise 0's (or the fast path went unused), stays within
 * bf16's tolerance of the reference, and keeps its bits for every thread count
 * (inc_check_case). An i8 cache ignores it (its q and P are 16-bit integers
 * either way), as does an f32 cache: the same bits as inner_precise 0. */
static void test_inner_precise(void) {
    loom_rng r;
    loom_rng_init(&r, 52, 2);
    static const int64_t dims[] = {64, 128, 96, 256};
    for (int i = 0; i < 16; i++) {
        inc_case c = base_case();
        c.kvdt = i < 8 ? LOOM_I8 : LOOM_BF16;
        c.D = dims[i % 4], c.N = c.Nkv * (i % 2 ? 4 : 3), c.Sq = 1 + i % 3;
        c.kmode = c.vmode = i % 2, c.voff = i % 3 == 0;
        c.Smax = 90 + 31 * i, c.precise = LOOM_ATTN_HIGH_PERFORMANCE;
        inc_check_case(&c, &r, 1);
        int differs = hp_differs(&c, &r);
        if (c.kvdt == LOOM_BF16 && loom_cpu_isa() >= LOOM_ISA_AVX512 && loom_cpu_get()->avx512_bf16 &&
            loom_variant(LOOM_VF_ATTN_BF16) == 0 && c.D != 96)
            CHECK_MSG(differs, "inner_precise 1 gave inner_precise 0's bits at D=%lld", (long long)c.D);
        else
            CHECK_MSG(!differs, "inner_precise 1 changed the result: %s cache, D=%lld",
                      loom_dtype_name(c.kvdt), (long long)c.D);
    }
    inc_case c = base_case(); /* an f32 cache: inner_precise changes nothing */
    c.precise = LOOM_ATTN_HIGH_PERFORMANCE, c.Smax = 77;
    CHECK(!hp_differs(&c, &r));
}

/* Scores that drift up (or down) along the keys, by several units per tile
 * (log2 domain), with one key far above all others two thirds of the way: the
 * running max keeps moving, so the decode softmax's rescaling (alpha), its
 * lazy max (ATTN_DEC_MAX_SLACK: probabilities up to 2^8 between rescales) and
 * a rescale that wipes out everything before it all meet the reference. */
static void test_rising_scores(void) {
    loom_rng r;
    loom_rng_init(&r, 33, 2);
    static const loom_dtype kv[] = {LOOM_F32, LOOM_BF16, LOOM_F16};
    static const int64_t dims[] = {64, 128, 80, 256};
    for (int i = 0; i < 16; i++) {
        inc_case c = base_case();
        c.ramp = 1;
        c.D = dims[i % 4];
        c.kvdt = kv[(i / 4) % 3];
        c.N = c.Nkv * (i % 2 ? 4 : 1);
        c.Smax = 700 + 13 * i, c.chunk = i % 4 == 3 ? 160 : 0;
        c.scale = 4.0f / sqrtf((float)c.D);
        inc_check_case(&c, &r, i % 2 == 0);
    }
}

/* An explicit mask that hides the first keys of each query row i from i * lead
 * on (more than a tile's worth): tiles that one row sees come while the next row
 * has seen nothing yet, so that row's softmax must leave it empty rather than
 * take exp(-inf - (-inf)). */
static void test_masked_row_starts(void) {
    loom_rng r;
    loom_rng_init(&r, 41, 2);
    for (int i = 0; i < 12; i++) {
        inc_case c = base_case();
        c.Sq = 2 + i % 3, c.mask_kind = 1 + i % 2, c.lead = 33 + 7 * i, c.Smax = 3 * c.lead + 20;
        c.kvdt = i % 4 == 1 ? LOOM_BF16 : i % 4 == 3 ? LOOM_I8 : LOOM_F32;
        c.kmode = c.vmode = i % 2;
        inc_check_case(&c, &r, i % 2 == 0);
    }
}

/* Sets per-token V scale (b, n, s) of the contiguous and the paged copies. */
static void set_v_token_scale(const inc_case *c, inc_data *d, int64_t b, int64_t n, int64_t s, float v) {
    int64_t maxb = (c->Smax + c->bs - 1) / c->bs, blk = (int64_t)tget(&d->bt, b * maxb + s / c->bs);
    tset(&d->vs, b * d->vs.stride[0] + n * d->vs.stride[1] + s * d->vs.stride[2], v);
    tset(&d->pvs, blk * d->pvs.stride[0] + n * d->pvs.stride[1] + s % c->bs * d->pvs.stride[2], v);
}

/* Probabilities the i8 P.V cannot round to 16-bit integers: per-token V
 * scales multiply P before it, so an infinite scale on one token gives infinite
 * entries, and scales of 1e-37 on a whole head give probabilities too small to
 * scale up. Those rows go to the widening kernel: inf and NaN land where the
 * reference puts them, and the other rows stay within tolerance. (Not with V
 * offsets for the infinite scale: the kernels add offset * sum(P) apart, so
 * (x + offset) * inf becomes inf - inf where x and the offset differ in sign.) */
static void test_nonfinite_probs(void) {
    loom_rng r;
    loom_rng_init(&r, 61, 2);
    for (int i = 0; i < 6; i++) {
        inc_case c = base_case();
        c.kvdt = LOOM_I8, c.kmode = c.vmode = LOOM_ANTIQUANT_PER_TOKEN, c.voff = i >= 4;
        c.D = i % 2 ? 128 : 64, c.N = 8, c.Nkv = 2, c.Sq = 1 + i / 2 % 2, c.Smax = 100;
        inc_data d;
        inc_setup(&c, &d, &r);
        int before = check_failures_;
        if (!c.voff) set_v_token_scale(&c, &d, 1, 0, 40, INFINITY);
        for (int64_t s = 0; s < c.Smax; s++) set_v_token_scale(&c, &d, 1, 1, s, 1e-37f);
        inc_check_data(&c, &d, 1);
        int64_t n = 0; /* batch 1, head 0 (kv head 0): no finite output left */
        for (int64_t x = 0; x < c.D; x++) n += !isfinite(tget(&d.out, cache_off(&d.out, c.L, c.D, 1, 0, 0) + x));
        CHECK_MSG(n == (c.voff ? 0 : c.D), "%lld of %lld outputs not finite", (long long)n, (long long)c.D);
        double err = 0, big = 0; /* head 4 (kv head 1): ~1e-35, to the f32 tolerance of its own size */
        for (int64_t x = 0; x < c.D; x++) {
            int64_t o = cache_off(&d.out, c.L, c.D, 1, 0, 4) + x;
            err = fmax(err, fabs(tget(&d.out, o) - tget(&d.rout, o)));
            big = fmax(big, fabs(tget(&d.rout, o)));
        }
        CHECK_MSG(big > 0 && err <= big / 2048, "outputs of size %g off by %g", big, err);
        inc_teardown(&d);
        if (check_failures_ != before) inc_describe(&c);
    }
}

/* Rows of the output (and lse) of q row 0 of head h of batch b: all NaN (nan
 * = 1) or all finite (nan = 0). */
static int inc_row_is(const inc_case *c, const inc_data *d, int64_t b, int64_t h, int nan) {
    for (int64_t x = 0; x < c->D; x++) {
        float v = tget(&d->out, cache_off(&d->out, c->L, c->D, b, 0, h) + x * d->out.stride[d->out.ndim - 1]);
        if (nan ? !isnan(v) : !isfinite(v)) return 0;
    }
    float l = tget(&d->lse, (b * c->N + h) * c->Sq);
    return nan ? isnan(l) : isfinite(l);
}

/* A NaN or an inf in q gives NaN scores (inf * K: +inf and -inf scores, whose
 * softmax takes inf - inf), and every level gives the reference's output:
 * that head's row and lse are NaN (DESIGN.md: NaN positions identical), its
 * kv head's other q heads are untouched, whether the scores meet in one chunk
 * or in partials folded across chunks and threads. The rounded forms of q
 * (bf16 parts for a bf16 K, 16-bit integers for an i8 K) would lose a NaN or
 * an inf, so such rows take f32 dot products. */
static void test_nonfinite_q(void) {
    loom_rng r;
    loom_rng_init(&r, 67, 2);
    static const loom_dtype kv[] = {LOOM_F32, LOOM_BF16, LOOM_F16, LOOM_I8, LOOM_I8};
    static const int64_t dims[] = {64, 128, 256};
    static const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 15; i++) {
        inc_case c = base_case();
        c.kvdt = kv[i % 5], c.kmode = c.vmode = i % 5 == 4, c.koff = i >= 5;
        c.D = dims[i % 3], c.N = 8, c.Nkv = 2, c.Sq = 1 + i % 2, c.Smax = 70 + 300 * (i % 2), c.lse = 1;
        c.chunk = i % 2 ? 64 : 0; /* partials folded: NaN in one chunk, not in others */
        c.precise = i % 4 < 2 ? LOOM_ATTN_HIGH_PERFORMANCE : LOOM_ATTN_HIGH_PRECISION;
        inc_data d;
        inc_setup(&c, &d, &r);
        int before = check_failures_;
        int64_t xs = d.q.stride[d.q.ndim - 1];
        float v = bad[i % 3];
        tset(&d.q, cache_off(&d.q, c.L, c.D, 0, 0, 1) + 5 * xs, v);
        tset(&d.q, cache_off(&d.q, c.L, c.D, 1, 0, 6) + 7 * xs, v);
        inc_check_data(&c, &d, 1);
        for (int64_t b = 0; b < 2; b++)
            for (int64_t h = 0; h < c.N; h++) {
                int nan = (b == 0 && h == 1) || (b == 1 && h == 6);
                CHECK_MSG(inc_row_is(&c, &d, b, h, nan), "batch %lld head %lld: %s", (long long)b,
                          (long long)h, nan ? "not NaN" : "not finite");
            }
        inc_teardown(&d);
        if (check_failures_ != before) {
            fprintf(stderr, "  q holds %g\n", v);
            inc_describe(&c);
        }
    }
    /* An inf or NaN in one K row (key 40 of kv head 1, batch 0): the scores of
     * that key are NaN or +inf (a NaN row) or -inf (the key drops out, a
     * finite row) by the sign of q's element; with kv_chunk 64 the NaN partial
     * of chunk 0 meets finite ones. */
    static const loom_dtype kvf[] = {LOOM_F32, LOOM_BF16, LOOM_F16};
    for (int i = 0; i < 9; i++) {
        inc_case c = base_case();
        c.kvdt = kvf[i % 3], c.D = dims[i % 3], c.Smax = 200, c.lse = 1, c.chunk = i % 2 ? 64 : 0;
        c.precise = i % 4 < 2 ? LOOM_ATTN_HIGH_PERFORMANCE : LOOM_ATTN_HIGH_PRECISION;
        inc_data d;
        inc_setup(&c, &d, &r);
        int before = check_failures_;
        float v = bad[(i / 3) % 3];
        /* Not covered: an inf in a bf16 K at inner_precise 0, where q's bf16 hi
         * and lo parts (of opposite signs) make inf - inf of a -inf score that
         * the reference drops (docs/attention.md). */
        if (c.kvdt == LOOM_BF16 && c.precise == LOOM_ATTN_HIGH_PRECISION) v = NAN;
        int64_t blk = (int64_t)tget(&d.bt, 40 / c.bs), kx = d.k.stride[d.k.ndim - 1]; /* batch 0's table */
        tset(&d.k, cache_off(&d.k, c.L, c.D, 0, 40, 1) + 3 * kx, v); /* and in the paged copy */
        tset(&d.pk, cache_off(&d.pk, c.L, c.D, blk, 40 % c.bs, 1) + 3 * kx, v);
        inc_check_data(&c, &d, 1);
        for (int64_t b = 0; b < 2; b++)
            for (int64_t h = 0; h < c.N; h++) {
                float qx = tget(&d.q, cache_off(&d.q, c.L, c.D, b, 0, h) + 3 * d.q.stride[d.q.ndim - 1]);
                float sx = v * qx; /* the sign of the key's score */
                int nan = b == 0 && h / (c.N / c.Nkv) == 1 && (isnan(sx) || sx > 0);
                CHECK_MSG(inc_row_is(&c, &d, b, h, nan), "K inf: batch %lld head %lld: %s", (long long)b,
                          (long long)h, nan ? "not NaN" : "not finite");
            }
        inc_teardown(&d);
        if (check_failures_ != before) {
            fprintf(stderr, "  K holds %g\n", v);
            inc_describe(&c);
        }
    }
}

/* Lengths 0 and 1, every q_len, long contexts split in many chunks, all through the pool. */
static void test_lengths_and_pool(void) {
    loom_rng r;
    loom_rng_init(&r, 5, 2);
    loom_pool *pool = NULL;
    CHECK(loom_pool_init(&pool, 2) == LOOM_OK);
    for (int64_t sq = 1; sq <= 16; sq += 5) {
        inc_case c = base_case();
        c.Sq = sq, c.sparse = 3, c.lens = 1, c.Smax = 1200, c.chunk = 128;
        inc_data d;
        inc_setup(&c, &d, &r);
        d.kvlen[0] = 0, d.kvlen[1] = 1;
        if (sq > 1) d.kvlen[1] = 1100; /* sq = 16 rows against 1100 keys: causal */
        CHECK(inc_run(&d.tr, &d.p, LOOM_ISA_REF, 1, 0) == LOOM_OK);
        CHECK_MSG(loom_incre_flash_attention(&d.t, &d.p, pool) == LOOM_OK, "%s", loom_last_error());
        CHECK(tensors_close(&d.out, &d.rout, 1.0 / 2048, "out"));
        for (int64_t i = 0; i < sq * c.N * c.D; i++) CHECK(tget(&d.out, i) == 0.0f); /* batch 0: no keys */
        CHECK(tget(&d.lse, 0) == -INFINITY);
        inc_teardown(&d);
    }
    loom_pool_free(pool);
}

static void test_decode_errors(void) {
    loom_rng r;
    loom_rng_init(&r, 4, 2);
    inc_case c = base_case();
    c.kvdt = LOOM_I8, c.lens = 1, c.koff = 1;
    inc_data d;
    inc_setup(&c, &d, &r);
    loom_incre_flash_attention_tensors t = d.tp;
    loom_incre_flash_attention_params p = d.pp;
    CHECK_MSG(loom_incre_flash_attention(&t, &p, NULL) == LOOM_OK, "%s", loom_last_error());
    int32_t *bt = d.bt.data, keep = bt[1];
    bt[1] = (int32_t)d.pk.shape[0];
    CHECK_ERR(loom_incre_flash_attention(&t, &p, NULL), "block_table[0][1]");
    bt[1] = -1;
    CHECK_ERR(loom_incre_flash_attention(&t, &p, NULL), "num_blocks");
    bt[1] = keep;
    int64_t lens[2] = {d.kvlen[0], 4 * 16 + 1}; /* max_blocks * block_size = 64 */
    p.actual_seq_lengths = lens;
    CHECK_ERR(loom_incre_flash_attention(&t, &p, NULL), "actual_seq_lengths[1]");
    p = d.pp, p.actual_seq_lengths = NULL;
    CHECK_ERR(loom_incre_flash_attention(&t, &p, NULL), "needs actual_seq_lengths");
    p = d.pp, p.block_size = 8;
    CHECK_ERR(loom_incre_flash_attention(&t, &p, NULL), "block_size");
    p = d.pp, p.key_antiquant_mode = 2;
    CHECK_ERR(loom_incre_flash_attention(&t, &p, NULL), "key_antiquant_mode");
    p = d.pp, p.kv_chunk = -1;
    CHECK_ERR(loom_incre_flash_attention(&t, &p, NULL), "kv_chunk");
    p = d.pp, p.inner_precise = 2;
    CHECK_ERR(loom_incre_flash_attention(&t, &p, NULL), "inner_precise");
    p = d.pp, p.inner_precise = -1;
    CHECK_ERR(loom_incre_flash_attention(&t, &p, NULL), "inner_precise");
    p = d.pp, p.input_layout = LOOM_ATTN_TND;
    CHECK_ERR(loom_incre_flash_attention(&t, &p, NULL), "TND");
    p = d.pp;
    t.key_antiquant_scale = NULL;
    CHECK_ERR(loom_incre_flash_attention(&t, &p, NULL), "key_antiquant_scale");
    t = d.tp;
    loom_tensor bad = d.ks;
    bad.shape[1] = 5;
    t.key_antiquant_scale = &bad;
    CHECK_ERR(loom_incre_flash_attention(&t, &p, NULL), "key_antiquant_scale shape");
    t = d.tp, bad = d.bt, bad.dtype = LOOM_F32;
    t.block_table = &bad;
    CHECK_ERR(loom_incre_flash_attention(&t, &p, NULL), "block_table has dtype");
    t = d.tp, bad = d.bt, bad.shape[0] = 3;
    t.block_table = &bad;
    CHECK_ERR(loom_incre_flash_attention(&t, &p, NULL), "block_table shape");
    inc_teardown(&d);
    c = base_case(), c.Sq = 17;
    inc_setup(&c, &d, &r);
    CHECK_ERR(loom_incre_flash_attention(&d.t, &d.p, NULL), "exceeds 16");
    inc_teardown(&d);
    c = base_case(), c.N = 6, c.Nkv = 4;
    inc_setup(&c, &d, &r);
    CHECK_ERR(loom_incre_flash_attention(&d.t, &d.p, NULL), "not a multiple of num_key_value_heads");
    inc_teardown(&d);
    c = base_case(), c.kvdt = LOOM_F16;
    inc_setup(&c, &d, &r);
    t = d.t;
    t.key_antiquant_scale = &d.q;
    CHECK_ERR(loom_incre_flash_attention(&t, &d.p, NULL), "antiquant");
    size_t sb = 0, wb = 0;
    CHECK(loom_incre_flash_attention_sizes(&d.t, &d.p, &sb, &wb) == LOOM_OK);
    void *sc = loom_alloc_aligned(sb, LOOM_ALIGN), *ws = xmalloc(wb);
    if (loom_cpu_isa() != LOOM_ISA_REF) {
        CHECK_ERR(loom_incre_flash_attention_split(&d.t, &d.p, 0, 1, sc, sb, ws, wb / 2), "workspace");
        CHECK_ERR(loom_incre_flash_attention_merge(&d.t, &d.p, 0, 1, ws, 8), "workspace");
        CHECK_ERR(loom_incre_flash_attention_thread(&d.t, &d.p, 0, 1, sc, 16), "scratch");
    }
    CHECK_ERR(loom_incre_flash_attention_thread(&d.t, &d.p, 1, 1, sc, sb), "thread");
    loom_free_aligned(sc), free(ws);
    inc_teardown(&d);
}

/* The op-table entry against the primitive attention op (causal, q at the end). */
/* The op-table kernel on nth threads as the executor runs it: its phases
 * (loom_op_phases) in turn, every thread of a phase before the next, one
 * shared buffer of shared_size bytes; the phase count in *phases (negated
 * when the shared buffer's first slot was written: the split ran). */
static loom_status op_threads(const loom_tensor *const *src, const void *attrs, loom_tensor *dst, loom_isa isa,
                              int nth, int *phases) {
    const loom_op_info *info = loom_op_get(LOOM_OP_INCRE_FLASH_ATTENTION);
    size_t sb = info->scratch_size(src, 3, dst, attrs), wb = info->shared_size(src, 3, dst, attrs);
    void *ws = loom_alloc_aligned(wb + 64, LOOM_ALIGN);
    memset(ws, 0xA5, wb + 64);
    *phases = loom_op_phases(info, src, 3, attrs, nth, 0);
    loom_kernel_fn fn = loom_op_kernel(LOOM_OP_INCRE_FLASH_ATTENTION, isa);
    loom_status s = LOOM_OK;
    for (int ph = 0; ph < *phases && s == LOOM_OK; ph++)
        for (int ith = 0; ith < nth && s == LOOM_OK; ith++) {
            void *sc = loom_alloc_aligned(sb, LOOM_ALIGN);
            loom_kernel_args a = {.src = {src[0], src[1], src[2]}, .n_src = 3, .dst = dst, .attrs = attrs,
                                  .ith = ith, .nth = nth, .scratch = sc, .phase = ph, .shared = ws};
            s = fn(&a);
            loom_free_aligned(sc);
        }
    for (int i = 0; i < 16; i++)
        if (((unsigned char *)ws)[i] != 0xA5) {
            *phases = -*phases;
            break;
        }
    loom_free_aligned(ws);
    return s;
}

static void test_incre_op_table(void) {
    const loom_op_info *info = loom_op_get(LOOM_OP_INCRE_FLASH_ATTENTION);
    CHECK(info && strcmp(info->name, "incre_flash_attention") == 0 && info->scratch_size);
    loom_rng r;
    loom_rng_init(&r, 6, 2);
    inc_case c = base_case();
    c.Sq = 3, c.Smax = 41, c.lse = 0;
    inc_data d;
    inc_setup(&c, &d, &r);
    loom_incre_flash_attention_attrs at = LOOM_INCRE_FLASH_ATTENTION_ATTRS_DEFAULT;
    at.sparse_mode = 3, at.kv_chunk = 16;
    const loom_tensor *src[3] = {&d.q, &d.k, &d.v};
    loom_attention_attrs prim = {0.0f, 1, (int)(c.Smax - c.Sq), 0, 0.0f};
    CHECK(loom_op_run(LOOM_OP_ATTENTION, src, 3, &prim, &d.rout, LOOM_ISA_REF) == LOOM_OK);
    for (int isa = LOOM_ISA_REF; isa <= (int)loom_cpu_best_isa(); isa++) {
        CHECK_MSG(loom_op_run(LOOM_OP_INCRE_FLASH_ATTENTION, src, 3, &at, &d.out, (loom_isa)isa) == LOOM_OK,
                  "%s", loom_last_error());
        CHECK_MSG(tensors_close(&d.out, &d.rout, 1.0 / 2048, "op"), "%s",
                  loom_op_kernel_name(LOOM_OP_INCRE_FLASH_ATTENTION, (loom_isa)isa));
    }
    loom_cost cost = {0};
    info->cost(src, 3, &d.out, &at, &cost);
    CHECK(cost.bytes_read == 4.0 * c.B * (c.Sq * c.N + 2 * c.Smax * c.Nkv) * c.D);
    CHECK(cost.flops == 4.0 * c.B * c.N * c.D * (3.0 * (c.Smax - 3) + 6.0));
    at.input_layout = 3;
    loom_tensor dst;
    CHECK_ERR(info->infer(src, 3, &at, &dst), "TND");
    at.input_layout = 0, at.inner_precise = 2;
    CHECK_ERR(info->infer(src, 3, &at, &dst), "inner_precise");
    inc_teardown(&d);
    /* the attribute inner_precise reaches the kernel: over a bf16 cache 1 rounds q to bf16
     * (bf16's tolerance, and not the bits of 0 where the CPU has AVX512_BF16) */
    c = base_case();
    c.kvdt = LOOM_BF16, c.Smax = 57, c.lse = 0, c.D = 128;
    inc_setup(&c, &d, &r);
    const loom_tensor *sb[3] = {&d.q, &d.k, &d.v};
    loom_attention_attrs pb = {0.0f, 0, 0, 0, 0.0f};
    CHECK(loom_op_run(LOOM_OP_ATTENTION, sb, 3, &pb, &d.rout, LOOM_ISA_REF) == LOOM_OK);
    size_t ob0 = (size_t)tensor_count(&d.out) * sizeof(float);
    float *hp = malloc(ob0);
    for (int ip = 1; ip >= 0; ip--) {
        at = (loom_incre_flash_attention_attrs)LOOM_INCRE_FLASH_ATTENTION_ATTRS_DEFAULT;
        at.inner_precise = ip;
        CHECK(loom_op_run(LOOM_OP_INCRE_FLASH_ATTENTION, sb, 3, &at, &d.out, loom_cpu_best_isa()) == LOOM_OK);
        CHECK(tensors_close(&d.out, &d.rout, ip ? 2.0 / 128 : 1.0 / 128, "inner_precise"));
        if (ip) memcpy(hp, d.out.data, ob0);
        else if (loom_cpu_get()->avx512_bf16 && loom_variant(LOOM_VF_ATTN_BF16) == 0)
            CHECK(memcmp(hp, d.out.data, ob0) != 0);
    }
    free(hp);
    inc_teardown(&d);
    /* On threads the units do not share out over (four on three, three on
     * two), the kernel runs split-KV and a merge: two phases, the partials in
     * the shared buffer; the same bits as one thread, at every level. */
    static const struct { int64_t B, Nkv; int split[3]; } sh[] = {{2, 2, {1, 1, -2}}, {1, 3, {1, -2, 1}}};
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
        c = base_case();
        c.B = sh[i].B, c.Nkv = sh[i].Nkv, c.N = 4 * c.Nkv, c.Smax = 70, c.lse = 0;
        inc_setup(&c, &d, &r);
        at = (loom_incre_flash_attention_attrs)LOOM_INCRE_FLASH_ATTENTION_ATTRS_DEFAULT;
        at.kv_chunk = 16;
        const loom_tensor *s3[3] = {&d.q, &d.k, &d.v};
        size_t ob = (size_t)tensor_count(&d.out) * sizeof(float);
        for (int isa = LOOM_ISA_GENERIC; isa <= (int)loom_cpu_best_isa(); isa++) {
            int ph;
            CHECK(op_threads(s3, &at, &d.out, (loom_isa)isa, 1, &ph) == LOOM_OK && ph == 1);
            for (int nth = 2; nth <= 3; nth++) {
                memset(d.pout.data, 0x5A, ob);
                CHECK_MSG(op_threads(s3, &at, &d.pout, (loom_isa)isa, nth, &ph) == LOOM_OK, "%s",
                          loom_last_error());
                CHECK_MSG(ph == sh[i].split[nth - 1], "shape %zu, %d threads: %d phases", i, nth, ph);
                CHECK_MSG(memcmp(d.out.data, d.pout.data, ob) == 0, "shape %zu, %s, %d threads differ", i,
                          loom_isa_name((loom_isa)isa), nth);
            }
        }
        at.kv_chunk = 0; /* 512 keys: one chunk a unit, nothing for a split to share out */
        for (int nth = 2; nth <= 3; nth++) CHECK(loom_op_phases(info, s3, 3, &at, nth, 0) == 1);
        at.kv_chunk = 16;
        if (sh[i].split[1] < 0) { /* split without the shared buffer: an error, not a crash */
            void *sc = loom_alloc_aligned(info->scratch_size(s3, 3, &d.out, &at), LOOM_ALIGN);
            loom_kernel_args a = {.src = {&d.q, &d.k, &d.v}, .n_src = 3, .dst = &d.out, .attrs = &at,
                                  .ith = 0, .nth = 2, .scratch = sc};
            CHECK_ERR(loom_op_kernel(LOOM_OP_INCRE_FLASH_ATTENTION, loom_cpu_best_isa())(&a), "shared buffer");
            loom_free_aligned(sc);
        }
        inc_teardown(&d);
    }
}

int main(void) {
    loom_ops_init(); /* the fused layer's ops in the op table */
    RUN_TEST(test_random_decode);
    RUN_TEST(test_softcap);
    RUN_TEST(test_small_head_dims);
    RUN_TEST(test_lengths_and_pool);
    RUN_TEST(test_peaked_scores);
    RUN_TEST(test_rising_scores);
    RUN_TEST(test_masked_row_starts);
    RUN_TEST(test_nonfinite_probs);
    RUN_TEST(test_nonfinite_q);
    RUN_TEST(test_inner_precise);
    RUN_TEST(test_head_groups);
    RUN_TEST(test_decode_errors);
    RUN_TEST(test_incre_op_table);
    return TEST_SUMMARY();
}
