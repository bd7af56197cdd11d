/* loom_flash_attention_score edge cases: fully masked rows, tiles that must
 * never be read (NaN there), padding, dropout reproducibility, the pool
 * wrapper, explicit block sizes, parameter errors, and the op-table entry. */
#include "test_flash_attention_case.h"
#include "graph/ops_init.h"

#include "ops/ops.h"

static fa_case base_case(void) {
    fa_case c;
    memset(&c, 0, sizeof c);
    c.L = LOOM_ATTN_BSND, c.B = 2, c.Sq = 21, c.Skv = 37, c.N = 4, c.Nkv = 2, c.D = 32;
    c.qdt = c.kvdt = c.odt = LOOM_F32;
    c.pre = c.next = LOOM_ATTN_TOKENS_ALL;
    c.keep = 1.0f, c.qamp = 2.0f, c.lse = 1;
    return c;
}

static loom_isa best(void) { return loom_cpu_best_isa(); }

/* Every head of row i (BSND, contiguous) is 0 and its lse -inf. */
static int row_is_empty(const fa_data *d, const fa_case *c, int64_t b, int64_t i) {
    for (int64_t h = 0; h < c->N; h++) {
        for (int64_t x = 0; x < c->D; x++)
            if (tget(&d->out, ((b * c->Sq + i) * c->N + h) * c->D + x) != 0.0f) return 0;
        if (tget(&d->lse, (b * c->N + h) * c->Sq + i) != -INFINITY) return 0;
    }
    return 1;
}

static void fill_rows(const loom_tensor *t, int64_t b, int64_t s0, int64_t s1, float v) {
    for (int64_t s = s0; s < s1; s++)
        for (int64_t n = 0; n < t->shape[2]; n++)
            for (int64_t x = 0; x < t->shape[3]; x++)
                tset(t, b * t->stride[0] + s * t->stride[1] + n * t->stride[2] + x, v);
}

static int all_finite(const loom_tensor *t) {
    for (int64_t i = 0; i < tensor_count(t); i++)
        if (!isfinite(tget(t, i))) return 0;
    return 1;
}

/* attn_load_row's branch-free 16-bit conversions (a contiguous row) give
 * base/half.c's values bit for bit, for every one of the 65536 patterns:
 * infinities, NaNs quieted alike, subnormals, signed zeros. */
static void test_row_conversion(void) {
    static uint16_t h[65536];
    static float got[65536];
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    for (int t = 0; t < 2; t++) {
        loom_dtype dt = t ? LOOM_BF16 : LOOM_F16;
        attn_load_row(got, h, dt, 1, 65536);
        int bad = 0;
        for (int i = 0; i < 65536; i++) {
            float want = t ? loom_bf16_to_f32(h[i]) : loom_f16_to_f32(h[i]);
            bad += memcmp(&want, &got[i], sizeof want) != 0;
        }
        CHECK_MSG(bad == 0, "%s: %d patterns converted differently", loom_dtype_name(dt), bad);
    }
}

/* bgemm_rows (key rows by pointer, a paged cache read in place) gives bgemm's
 * bytes over the same rows gathered, in both products (QK^T: rows are the
 * output rows n; PV: rows are the summed keys k, with and without alpha), for
 * tile shapes across the register tile (6 rows, 16/32/64 lanes). */
static void test_bgemm_rows(void) {
    const loom_attn_kernels *ks = loom_attn_kernels_for(loom_cpu_best_isa());
    if (!ks->bgemm_rows) {
        printf("  (no bgemm_rows at this level: paged f32 tiles are gathered)\n");
        return;
    }
    loom_rng rng;
    loom_rng_init(&rng, 91, 0);
    enum { R = 70, K = 72, MP = 80 };
    static float pool[R * 2 * K], gathered[R * K], b[K * MP], alpha[MP], c0[K * MP], c1[K * MP];
    const float *rows[R];
    for (int i = 0; i < R * 2 * K; i++) pool[i] = loom_rng_uniform(&rng) - 0.5f;
    for (int i = 0; i < K * MP; i++) b[i] = loom_rng_uniform(&rng) - 0.5f;
    for (int i = 0; i < MP; i++) alpha[i] = loom_rng_uniform(&rng);
    for (int t = 0; t < 40; t++) {
        int pv = t % 2, nn = 1 + (int)(loom_rng_u32(&rng) % 13), kk = 1 + (int)(loom_rng_u32(&rng) % K);
        int mp = 16 * (1 + (int)(loom_rng_u32(&rng) % 5));
        const float *al = pv && t % 4 == 1 ? alpha : NULL;
        int nrows = pv ? kk : nn, width = pv ? nn : kk; /* rows of A by pointer, scattered in the pool */
        if (nrows > R) nrows = R;
        if (pv && kk > R) kk = R;
        for (int r = 0; r < nrows; r++) {
            rows[r] = pool + (size_t)((r * 37) % R) * 2 * K + (r % 3);
            memcpy(gathered + (size_t)r * width, rows[r], (size_t)width * sizeof(float));
        }
        for (int i = 0; i < K * MP; i++) c0[i] = c1[i] = (float)(i % 7) - 3.0f;
        if (pv) ks->bgemm(c0, MP, gathered, 1, width, b, MP, nn, kk, mp, al);
        else ks->bgemm(c0, MP, gathered, width, 1, b, MP, nn, kk, mp, al);
        ks->bgemm_rows(c1, MP, rows, pv, b, MP, nn, kk, mp, al);
        CHECK_MSG(memcmp(c0, c1, sizeof c0) == 0, "%s bgemm_rows (%s, nn %d, kk %d, mp %d%s) differs from bgemm",
                  ks->name, pv ? "PV" : "QK", nn, kk, mp, al ? ", alpha" : "");
    }
}

/* The kernels' transposes (pack_t: Q^T scaled; unpack_t: O = O^T * inv) give
 * the driver's scalar loops bit for bit at every level the CPU runs: lanes
 * not a multiple of the vector, head dims across the tails, NULL rows (pack:
 * zeros; unpack: not written), nothing written past d or the lanes asked for. */
static void test_transposes(void) {
    loom_rng rng;
    loom_rng_init(&rng, 17, 0);
    enum { ROWS = 96, DMAX = 140, LD = ROWS + 16 };
    static float src[ROWS][DMAX + 8], ot[DMAX * LD], qt0[DMAX * LD], qt1[DMAX * LD], inv[ROWS];
    static float out0[ROWS][DMAX + 8], out1[ROWS][DMAX + 8];
    for (int r = 0; r < ROWS; r++)
        for (int x = 0; x < DMAX + 8; x++) src[r][x] = 4.0f * (loom_rng_uniform(&rng) - 0.5f);
    for (int i = 0; i < DMAX * LD; i++) ot[i] = 4.0f * (loom_rng_uniform(&rng) - 0.5f);
    for (int r = 0; r < ROWS; r++) inv[r] = loom_rng_uniform(&rng) + 0.25f;
    int levels = 0;
    for (loom_isa isa = LOOM_ISA_GENERIC; isa <= best(); isa++) {
        const loom_attn_kernels *ks = loom_attn_kernels_for(isa);
        if (!ks->pack_t || !ks->unpack_t) continue;
        levels++;
        for (int t = 0; t < 60; t++) {
            int mp = 16 * (1 + (int)(loom_rng_u32(&rng) % (ROWS / 16)));
            int d = 1 + (int)(loom_rng_u32(&rng) % DMAX), n = 1 + (int)(loom_rng_u32(&rng) % mp);
            float scale = loom_rng_uniform(&rng) + 0.5f, *wr[ROWS];
            const float *rd[ROWS];
            for (int r = 0; r < mp; r++) rd[r] = loom_rng_u32(&rng) % 5 ? src[r] + r % 3 : NULL;
            for (int i = 0; i < DMAX * LD; i++) qt0[i] = qt1[i] = -7.0f;
            for (int x = 0; x < d; x++)
                for (int r = 0; r < mp; r++) qt0[x * LD + r] = rd[r] ? rd[r][x] * scale : 0.0f;
            ks->pack_t(qt1, LD, rd, mp, d, scale);
            CHECK_MSG(memcmp(qt0, qt1, sizeof qt0) == 0, "%s pack_t (mp %d, d %d) differs", ks->name, mp, d);
            for (int r = 0; r < ROWS; r++)
                for (int x = 0; x < DMAX + 8; x++) out0[r][x] = out1[r][x] = -7.0f;
            for (int r = 0; r < n; r++) {
                wr[r] = loom_rng_u32(&rng) % 5 ? out1[r] : NULL;
                if (wr[r])
                    for (int x = 0; x < d; x++) out0[r][x] = ot[x * LD + r] * inv[r];
            }
            ks->unpack_t(wr, ot, LD, inv, n, d);
            CHECK_MSG(memcmp(out0, out1, sizeof out0) == 0, "%s unpack_t (n %d, d %d) differs", ks->name, n, d);
        }
    }
    printf("  (transposes checked at %d kernel levels)\n", levels);
}

static void test_masked_rows_and_skipped_tiles(void) {
    loom_rng r;
    loom_rng_init(&r, 3, 1);
    for (int kind = 1; kind <= 2; kind++) { /* a fully masked row: bool, then additive -inf */
        fa_case c = base_case();
        c.mask_kind = kind;
        fa_data d;
        fa_setup(&c, &d, &r);
        for (int64_t j = 0; j < c.Skv; j++) {
            tset(&d.mask, 3 * c.Skv + j, kind == 1 ? 1.0f : -INFINITY);
            tset(&d.mask, 20 * c.Skv + j, kind == 1 ? 1.0f : -INFINITY);
        }
        CHECK(fa_run(&d.t, &d.p, best(), 1) == LOOM_OK);
        CHECK(fa_run(&d.tr, &d.p, LOOM_ISA_REF, 1) == LOOM_OK);
        CHECK(row_is_empty(&d, &c, 0, 3) && row_is_empty(&d, &c, 1, 20));
        CHECK(tensors_close(&d.out, &d.rout, 1.0 / 2048, "out"));
        fa_teardown(&d);
    }
    { /* band that contains no key, and a batch without keys */
        fa_case c = base_case();
        c.sparse = 4, c.pre = -5, c.next = -3;
        fa_data d;
        fa_setup(&c, &d, &r);
        CHECK(fa_run(&d.t, &d.p, best(), 1) == LOOM_OK);
        for (int64_t i = 0; i < c.Sq; i++) CHECK(row_is_empty(&d, &c, 0, i) && row_is_empty(&d, &c, 1, i));
        fa_teardown(&d);
        c = base_case();
        c.lens = 1;
        fa_setup(&c, &d, &r);
        d.lq[0] = 7, d.lkv[0] = 0, d.lq[1] = 0, d.lkv[1] = 5;
        CHECK(fa_run(&d.t, &d.p, best(), 1) == LOOM_OK);
        for (int64_t i = 0; i < c.Sq; i++) CHECK(row_is_empty(&d, &c, 0, i) && row_is_empty(&d, &c, 1, i));
        fa_teardown(&d);
    }
    { /* padding and keys no row may see are never read: NaN there changes nothing */
        fa_case c = base_case();
        c.lens = 1, c.sparse = 2; /* top-left causal: keys >= S_q are invisible */
        fa_data d;
        fa_setup(&c, &d, &r);
        d.lq[0] = 15, d.lkv[0] = 30, d.lq[1] = 21, d.lkv[1] = 37;
        fill_rows(&d.q, 0, 15, c.Sq, NAN);
        fill_rows(&d.k, 0, 30, c.Skv, NAN), fill_rows(&d.v, 0, 30, c.Skv, NAN);
        fill_rows(&d.k, 1, c.Sq, c.Skv, NAN), fill_rows(&d.v, 1, c.Sq, c.Skv, NAN);
        loom_isa lv[LOOM_ISA_COUNT];
        for (int li = 0, nl = test_levels(lv); li < nl; li++) {
            CHECK(fa_run(&d.t, &d.p, lv[li], 2) == LOOM_OK);
            CHECK_MSG(all_finite(&d.out), "%s read padding or invisible keys", loom_isa_name(lv[li]));
        }
        CHECK(fa_run(&d.tr, &d.p, LOOM_ISA_REF, 1) == LOOM_OK);
        CHECK(tensors_close(&d.out, &d.rout, 1.0 / 2048, "out"));
        fa_teardown(&d);
    }
    { /* tiles hidden by the explicit mask are skipped before K is touched */
        fa_case c = base_case();
        c.mask_kind = 1, c.bkv = 10, c.mask4 = 1, c.mask_bb = c.mask_bn = 1;
        fa_data d;
        fa_setup(&c, &d, &r);
        for (int64_t i = 0; i < c.Sq; i++)
            for (int64_t j = 0; j < c.Skv; j++) tset(&d.mask, i * c.Skv + j, j >= 10 && j < 30);
        fill_rows(&d.k, 0, 10, 30, NAN), fill_rows(&d.v, 0, 10, 30, NAN);
        loom_isa lv[LOOM_ISA_COUNT];
        for (int li = 0, nl = test_levels(lv); li < nl; li++) {
            CHECK(fa_run(&d.t, &d.p, lv[li], 1) == LOOM_OK);
            CHECK_MSG(all_finite(&d.out), "%s computed a fully masked tile", loom_isa_name(lv[li]));
        }
        fa_teardown(&d);
    }
}

/* A NaN or an inf in q or K: the scores it touches are NaN, +inf or -inf, and
 * every level gives the reference's rows (DESIGN.md: NaN positions identical):
 * a NaN row and lse where a score is NaN or +inf (the softmax's inf - inf),
 * the key dropped where it is -inf, every other row finite. Causal
 * (bottom-right), so rows that cannot see the bad key stay finite too. */
static void test_nonfinite_inputs(void) {
    loom_rng r;
    loom_rng_init(&r, 23, 1);
    static const loom_dtype kv[] = {LOOM_F32, LOOM_BF16, LOOM_F16};
    static const float bad[] = {NAN, INFINITY, -INFINITY};
    static const int64_t dims[] = {32, 64, 128, 80};
    for (int i = 0; i < 18; i++) {
        fa_case c = base_case();
        c.sparse = 3, c.kvdt = kv[i % 3], c.D = dims[i % 4], c.Skv = i % 2 ? 37 : 300, c.Sq = 21;
        c.precise = i % 4 < 2 ? LOOM_ATTN_HIGH_PERFORMANCE : LOOM_ATTN_HIGH_PRECISION;
        float v = bad[(i / 3) % 3];
        fa_data d;
        fa_setup(&c, &d, &r);
        int before = check_failures_;
        int64_t G = c.N / c.Nkv, kj = 9, off = c.Skv - c.Sq; /* row i sees keys <= i + off */
        tset(&d.q, ((0 * c.Sq + 5) * c.N + 1) * c.D + 3, v);          /* batch 0, row 5, head 1 */
        tset(&d.k, ((1 * c.Skv + kj) * c.Nkv + 0) * c.D + 2, v);      /* batch 1, key 9, kv head 0 */
        fa_check_data(&c, &d, 1);
        for (int64_t b = 0; b < c.B; b++)
            for (int64_t ii = 0; ii < c.Sq; ii++)
                for (int64_t h = 0; h < c.N; h++) {
                    float sx = v * tget(&d.q, ((b * c.Sq + ii) * c.N + h) * c.D + 2);
                    int nan = (b == 0 && ii == 5 && h == 1) ||
                              (b == 1 && h / G == 0 && kj <= ii + off && (isnan(sx) || sx > 0));
                    int ok = 1;
                    for (int64_t x = 0; x < c.D; x++) {
                        float o = tget(&d.out, ((b * c.Sq + ii) * c.N + h) * c.D + x);
                        ok &= nan ? isnan(o) : isfinite(o);
                    }
                    float l = tget(&d.lse, (b * c.N + h) * c.Sq + ii);
                    ok &= nan ? isnan(l) : isfinite(l);
                    CHECK_MSG(ok, "batch %lld row %lld head %lld: %s", (long long)b, (long long)ii, (long long)h,
                              nan ? "not NaN" : "not finite");
                }
        fa_teardown(&d);
        if (check_failures_ != before) {
            fprintf(stderr, "  q and K hold %g\n", v);
            fa_describe(&c);
        }
    }
}

static void test_dropout(void) {
    loom_rng r;
    loom_rng_init(&r, 8, 1);
    fa_case c = base_case();
    c.keep = 0.8f, c.seed = 42, c.sparse = 3;
    fa_data d;
    fa_setup(&c, &d, &r);
    size_t ob = out_bytes(&d.out);
    unsigned char *a = xmalloc(ob);
    CHECK(fa_run(&d.t, &d.p, best(), 1) == LOOM_OK);
    memcpy(a, d.out.data, ob);
    CHECK(fa_run(&d.t, &d.p, best(), 3) == LOOM_OK);
    CHECK_MSG(memcmp(a, d.out.data, ob) == 0, "same seed, different output");
    CHECK(fa_run(&d.tr, &d.p, LOOM_ISA_REF, 1) == LOOM_OK);
    CHECK(tensors_close(&d.out, &d.rout, 1.0 / 2048, "out"));
    d.p.seed = 43;
    CHECK(fa_run(&d.t, &d.p, best(), 1) == LOOM_OK);
    CHECK_MSG(memcmp(a, d.out.data, ob) != 0, "another seed, same output");
    d.p.seed = 42, d.p.offset = 8; /* the offset selects another stream too */
    CHECK(fa_run(&d.t, &d.p, best(), 1) == LOOM_OK);
    CHECK(memcmp(a, d.out.data, ob) != 0);
    free(a);
    fa_teardown(&d);
}

static void test_pool_and_blocks(void) {
    loom_rng r;
    loom_rng_init(&r, 13, 1);
    fa_case c = base_case();
    c.sparse = 3, c.Sq = 45, c.Skv = 70, c.N = 8, c.Nkv = 2, c.D = 48;
    fa_data d;
    fa_setup(&c, &d, &r);
    CHECK(fa_run(&d.tr, &d.p, LOOM_ISA_REF, 1) == LOOM_OK);
    loom_pool *pool = NULL;
    CHECK(loom_pool_init(&pool, 2) == LOOM_OK);
    size_t ob = out_bytes(&d.out);
    unsigned char *a = xmalloc(ob);
    CHECK(fa_run(&d.t, &d.p, loom_cpu_isa(), 1) == LOOM_OK);
    memcpy(a, d.out.data, ob);
    memset(d.out.data, 0, ob);
    CHECK(loom_flash_attention_score(&d.t, &d.p, pool) == LOOM_OK);
    CHECK_MSG(memcmp(a, d.out.data, ob) == 0, "pool of 2 differs from one thread");
    static const int64_t bq[] = {1, 2, 5, 64, 1024}, bkv[] = {1, 5, 17, 1024, 64};
    for (int i = 0; i < 5; i++) {
        d.p.block_q = bq[i], d.p.block_kv = bkv[i];
        CHECK(loom_flash_attention_score(&d.t, &d.p, pool) == LOOM_OK);
        CHECK_MSG(tensors_close(&d.out, &d.rout, 1.0 / 2048, "out"), "blocks %lld x %lld",
                  (long long)bq[i], (long long)bkv[i]);
    }
    loom_pool_free(pool);
    free(a);
    fa_teardown(&d);
}

static void test_errors(void) {
    loom_rng r;
    loom_rng_init(&r, 17, 1);
    fa_case c = base_case();
    fa_data d;
    fa_setup(&c, &d, &r);
    loom_flash_attention_params p = d.p;
    loom_flash_attention_tensors t = d.t;
    memset(d.out.data, 0x7F, out_bytes(&d.out));
    p.keep_prob = 0.0f;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "keep_prob");
    CHECK(((unsigned char *)d.out.data)[0] == 0x7F); /* untouched on a validation error */
    p.keep_prob = 1.5f;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "keep_prob");
    p.keep_prob = NAN;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "keep_prob");
    p = d.p, p.sparse_mode = 5;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "sparse_mode");
    p = d.p, p.sparse_mode = 1;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "atten_mask");
    p = d.p, p.input_layout = (loom_attn_layout)9;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "input_layout");
    p = d.p, p.input_layout = LOOM_ATTN_BNSD; /* q [2, 21, 4, 32] read as BNSD: heads 21 vs 4 */
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "num_key_value_heads");
    p = d.p, p.input_layout = LOOM_ATTN_TND;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "input_layout TND");
    p = d.p, p.input_layout = LOOM_ATTN_BSH;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "input_layout BSH");
    p = d.p, p.num_heads = 3;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "num_heads");
    p = d.p, p.block_q = -1;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "block_q");
    p = d.p, p.block_kv = 5000;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "block_kv");
    int64_t lq[2] = {22, 1}, lkv[2] = {3, 38};
    p = d.p, p.actual_seq_lengths = lq;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "actual_seq_lengths[0]");
    p = d.p, p.actual_seq_lengths_kv = lkv;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "actual_seq_lengths_kv[1]");
    p = d.p, p.actual_seq_qlen = lq;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "actual_seq_qlen");
    p = d.p;
    /* shapes */
    loom_tensor bad = d.k;
    bad.shape[2] = 3; /* 4 heads are not a multiple of 3 */
    t.key = &bad, t.value = &bad;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "not a multiple of num_key_value_heads");
    bad = d.k, bad.shape[3] = 31;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "head dim");
    bad = d.k, bad.shape[0] = 1;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "batch");
    bad = d.k, bad.ndim = 3;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "key shape");
    t = d.t, bad = d.q, bad.shape[3] = 257;
    loom_tensor bk = d.k, bo = d.out;
    bk.shape[3] = 257, bo.shape[3] = 257;
    t.query = &bad, t.key = &bk, t.value = &bk, t.attention_out = &bo;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "head dim D = 257");
    t = d.t, bad = d.out, bad.shape[1] = 20;
    t.attention_out = &bad;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "attention_out");
    t = d.t, bad = d.lse, bad.shape[2] = 20;
    t.softmax_lse = &bad;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "softmax_lse");
    loom_tensor m;
    int64_t ms[2] = {c.Sq, c.Skv + 1};
    tensor_new(&m, LOOM_F32, 2, ms, 0);
    t = d.t, t.atten_mask = &m;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "atten_mask shape");
    m.shape[1] = c.Skv, m.dtype = LOOM_F16;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "atten_mask has dtype f16");
    tensor_free(&m);
    t = d.t, bad = d.q, bad.dtype = LOOM_I32;
    t.query = &bad;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "query has dtype");
    t = d.t, t.value = NULL;
    CHECK_ERR(loom_flash_attention_score(&t, &p, NULL), "value");
    CHECK_ERR(loom_flash_attention_score(NULL, &p, NULL), "NULL");
    /* thread level: scratch and thread index */
    t = d.t;
    size_t bytes = 0;
    CHECK(loom_flash_attention_score_scratch_size(&t, &p, &bytes) == LOOM_OK && bytes > 0);
    void *sc = loom_alloc_aligned(bytes, LOOM_ALIGN);
    CHECK_ERR(loom_flash_attention_score_thread(&t, &p, 0, 1, sc, 8), "scratch");
    CHECK_ERR(loom_flash_attention_score_thread(&t, &p, 2, 2, sc, bytes), "thread");
    loom_free_aligned(sc);
    /* layout names */
    loom_attn_layout L;
    CHECK(loom_attn_layout_parse("TND", &L) == LOOM_OK && L == LOOM_ATTN_TND);
    CHECK(loom_attn_layout_parse("BNSD", &L) == LOOM_OK && L == LOOM_ATTN_BNSD);
    CHECK_ERR(loom_attn_layout_parse("SBH", &L), "SBH");
    CHECK(strcmp(loom_attn_layout_name(LOOM_ATTN_BSH), "BSH") == 0);
    CHECK(strcmp(loom_attn_layout_name((loom_attn_layout)7), "?") == 0);
    fa_teardown(&d);
}

/* The op-table entry: infer, cost, kernels per level against the primitive op. */
static void test_op_table(void) {
    const loom_op_info *info = loom_op_get(LOOM_OP_FLASH_ATTENTION);
    CHECK(info && strcmp(info->name, "flash_attention_score") == 0 && info->infer && info->cost &&
          info->scratch_size && info->ref);
    loom_rng r;
    loom_rng_init(&r, 21, 1);
    fa_case c = base_case();
    c.lse = 0;
    fa_data d;
    fa_setup(&c, &d, &r);
    loom_flash_attention_attrs at = LOOM_FLASH_ATTENTION_ATTRS_DEFAULT;
    at.sparse_mode = 3;
    const loom_tensor *src[3] = {&d.q, &d.k, &d.v};
    loom_tensor dst;
    memset(&dst, 0, sizeof dst);
    CHECK(info->infer(src, 3, &at, &dst) == LOOM_OK && dst.ndim == 4 && dst.shape[1] == c.Sq);
    loom_attention_attrs prim = {0.0f, 1, (int)(c.Skv - c.Sq), 0, 0.0f};
    CHECK(loom_op_run(LOOM_OP_ATTENTION, src, 3, &prim, &d.rout, LOOM_ISA_REF) == LOOM_OK);
    for (int isa = LOOM_ISA_REF; isa <= (int)loom_cpu_best_isa(); isa++) {
        CHECK_MSG(loom_op_run(LOOM_OP_FLASH_ATTENTION, src, 3, &at, &d.out, (loom_isa)isa) == LOOM_OK,
                  "%s", loom_last_error());
        CHECK_MSG(tensors_close(&d.out, &d.rout, 1.0 / 2048, "op"), "%s", loom_op_kernel_name(LOOM_OP_FLASH_ATTENTION, (loom_isa)isa));
    }
    loom_cost full = {0}, causal = {0};
    loom_flash_attention_attrs none = LOOM_FLASH_ATTENTION_ATTRS_DEFAULT;
    info->cost(src, 3, &d.out, &none, &full);
    info->cost(src, 3, &d.out, &at, &causal);
    /* causal bottom-right with S_kv - S_q = 16: row i sees 17 + i keys */
    double pairs = 0;
    for (int64_t i = 0; i < c.Sq; i++) pairs += (double)(c.Skv - c.Sq + 1 + i);
    CHECK(causal.flops == 4.0 * c.B * c.N * pairs * c.D);
    CHECK(full.flops == 4.0 * c.B * c.N * c.Sq * c.Skv * c.D);
    CHECK(full.bytes_read == 4.0 * c.B * (c.Sq * c.N + 2 * c.Skv * c.Nkv) * c.D);
    CHECK(full.bytes_written == 4.0 * c.B * c.Sq * c.N * c.D);
    at.keep_prob = 2.0f;
    CHECK_ERR(info->infer(src, 3, &at, &dst), "keep_prob");
    fa_teardown(&d);
}

/* The graph op in layout TND (what the BERT encoder uses): q, k, v packed
 * [T, N, D] and a fourth input of i32 cumulative sequence ends. Each sequence
 * (lengths 1, 0, 7, 19, 3: an empty one, one spanning tiles) attends to its
 * own tokens only: equal to the primitive attention op run on every
 * sequence's slice alone, at every level. Cost counts sum(len^2) pairs; with
 * no data in the lengths (planning) the sequences count as equal. Errors:
 * no lengths input, a wrong dtype, an end past T. */
static void test_op_table_tnd(void) {
    const loom_op_info *info = loom_op_get(LOOM_OP_FLASH_ATTENTION);
    enum { NS = 5, T = 30, N = 4, NKV = 2, D = 40 };
    const int32_t lens[NS] = {1, 0, 7, 19, 3};
    int32_t cu[NS];
    for (int i = 0, t = 0; i < NS; i++) cu[i] = t += lens[i];
    CHECK(cu[NS - 1] == T);
    loom_rng r;
    loom_rng_init(&r, 22, 1);
    float *q = malloc(sizeof(float) * T * N * D), *k = malloc(sizeof(float) * T * NKV * D),
          *v = malloc(sizeof(float) * T * NKV * D), *out = malloc(sizeof(float) * T * N * D),
          *ref = malloc(sizeof(float) * T * N * D);
    for (int i = 0; i < T * N * D; i++) q[i] = 2.0f * loom_rng_uniform(&r) - 1.0f;
    for (int i = 0; i < T * NKV * D; i++) k[i] = 2.0f * loom_rng_uniform(&r) - 1.0f;
    for (int i = 0; i < T * NKV * D; i++) v[i] = 2.0f * loom_rng_uniform(&r) - 1.0f;
    /* reference: the primitive op per sequence, [1, len, heads, D] slices */
    for (int b = 0, t0 = 0; b < NS; t0 += lens[b], b++) {
        if (lens[b] == 0) continue;
        loom_tensor tq, tk, tv, to;
        loom_tensor_init(&tq, LOOM_F32, 4, (const int64_t[4]){1, lens[b], N, D}, q + t0 * N * D);
        loom_tensor_init(&tk, LOOM_F32, 4, (const int64_t[4]){1, lens[b], NKV, D}, k + t0 * NKV * D);
        loom_tensor_init(&tv, LOOM_F32, 4, (const int64_t[4]){1, lens[b], NKV, D}, v + t0 * NKV * D);
        loom_tensor_init(&to, LOOM_F32, 4, (const int64_t[4]){1, lens[b], N, D}, ref + t0 * N * D);
        const loom_tensor *ps[3] = {&tq, &tk, &tv};
        loom_attention_attrs prim = {0.0f, 0, 0, 0, 0.0f};
        CHECK(loom_op_run(LOOM_OP_ATTENTION, ps, 3, &prim, &to, LOOM_ISA_REF) == LOOM_OK);
    }
    loom_tensor tq, tk, tv, to, tcu;
    loom_tensor_init(&tq, LOOM_F32, 3, (const int64_t[3]){T, N, D}, q);
    loom_tensor_init(&tk, LOOM_F32, 3, (const int64_t[3]){T, NKV, D}, k);
    loom_tensor_init(&tv, LOOM_F32, 3, (const int64_t[3]){T, NKV, D}, v);
    loom_tensor_init(&to, LOOM_F32, 3, (const int64_t[3]){T, N, D}, out);
    loom_tensor_init(&tcu, LOOM_I32, 1, (const int64_t[1]){NS}, cu);
    loom_flash_attention_attrs at = LOOM_FLASH_ATTENTION_ATTRS_DEFAULT;
    at.input_layout = LOOM_ATTN_TND;
    const loom_tensor *src[4] = {&tq, &tk, &tv, &tcu};
    loom_tensor dst;
    memset(&dst, 0, sizeof dst);
    CHECK_MSG(info->infer(src, 4, &at, &dst) == LOOM_OK && dst.ndim == 3 && dst.shape[0] == T,
              "%s", loom_last_error());
    for (int isa = LOOM_ISA_REF; isa <= (int)loom_cpu_best_isa(); isa++) {
        for (int i = 0; i < T * N * D; i++) out[i] = NAN;
        CHECK_MSG(loom_op_run(LOOM_OP_FLASH_ATTENTION, src, 4, &at, &to, (loom_isa)isa) == LOOM_OK, "%s",
                  loom_last_error());
        double worst = 0.0;
        for (int i = 0; i < T * N * D; i++) {
            double e = fabs((double)out[i] - (double)ref[i]);
            if (!(e <= worst)) worst = e; /* NaN sticks */
        }
        CHECK_MSG(worst <= 1.0 / 2048, "%s: TND vs per-sequence attention: max error %g",
                  loom_op_kernel_name(LOOM_OP_FLASH_ATTENTION, (loom_isa)isa), worst);
    }
    loom_cost c = {0};
    info->cost(src, 4, &to, &at, &c);
    double pairs = 0.0;
    for (int b = 0; b < NS; b++) pairs += (double)lens[b] * lens[b];
    CHECK(c.flops == 4.0 * N * D * pairs);
    /* no data (loom plan): 5 sequences of 6 */
    loom_tensor nodata = tcu;
    nodata.data = NULL;
    const loom_tensor *src2[4] = {&tq, &tk, &tv, &nodata};
    CHECK(info->infer(src2, 4, &at, &dst) == LOOM_OK);
    info->cost(src2, 4, &to, &at, &c);
    CHECK(c.flops == 4.0 * N * D * NS * 6.0 * 6.0);
    /* errors */
    CHECK_ERR(info->infer(src, 3, &at, &dst), "TND");
    loom_tensor bad = tcu;
    bad.dtype = LOOM_F32;
    const loom_tensor *src3[4] = {&tq, &tk, &tv, &bad};
    CHECK_ERR(info->infer(src3, 4, &at, &dst), "cumulative");
    cu[NS - 1] = T + 1;
    CHECK_ERR(info->infer(src, 4, &at, &dst), "actual_seq_qlen");
    free(q), free(k), free(v), free(out), free(ref);
}

/* The public API sizes the packed-V cache (bf16 V) by the longest sequence of
 * the data, not by T_kv: a varlen batch of short sequences needs the scratch
 * of its longest one. A run whose data has a longer sequence than the scratch
 * was sized for is refused, never overrun. */
static void test_tnd_scratch_fits_longest(void) {
    enum { NS = 4, T = 192, N = 2, NKV = 1, D = 64 };
    const int64_t lens[NS] = {64, 8, 100, 20};
    int64_t cu[NS], one[1] = {T};
    for (int i = 0, t = 0; i < NS; i++) cu[i] = t += (int)lens[i];
    loom_rng r;
    loom_rng_init(&r, 23, 1);
    uint16_t *q = malloc(2 * T * N * D), *k = malloc(2 * T * NKV * D), *v = malloc(2 * T * NKV * D);
    float *out = malloc(sizeof(float) * T * N * D), *out2 = malloc(sizeof(float) * T * N * D);
    for (int i = 0; i < T * N * D; i++) q[i] = loom_f32_to_bf16(2.0f * loom_rng_uniform(&r) - 1.0f);
    for (int i = 0; i < T * NKV * D; i++) k[i] = loom_f32_to_bf16(2.0f * loom_rng_uniform(&r) - 1.0f);
    for (int i = 0; i < T * NKV * D; i++) v[i] = loom_f32_to_bf16(2.0f * loom_rng_uniform(&r) - 1.0f);
    loom_tensor tq, tk, tv, to;
    loom_tensor_init(&tq, LOOM_BF16, 3, (const int64_t[3]){T, N, D}, q);
    loom_tensor_init(&tk, LOOM_BF16, 3, (const int64_t[3]){T, NKV, D}, k);
    loom_tensor_init(&tv, LOOM_BF16, 3, (const int64_t[3]){T, NKV, D}, v);
    loom_tensor_init(&to, LOOM_F32, 3, (const int64_t[3]){T, N, D}, out);
    loom_flash_attention_tensors t = {.query = &tq, .key = &tk, .value = &tv, .attention_out = &to};
    loom_flash_attention_params p = loom_flash_attention_default_params();
    p.input_layout = LOOM_ATTN_TND, p.sparse_mode = 3;
    p.actual_seq_qlen = p.actual_seq_kvlen = cu, p.num_seqs = NS;
    loom_flash_attention_params p1 = p;
    p1.actual_seq_qlen = p1.actual_seq_kvlen = one, p1.num_seqs = 1;
    size_t bytes = 0, bytes1 = 0;
    CHECK(loom_flash_attention_score_scratch_size(&t, &p, &bytes) == LOOM_OK);
    CHECK(loom_flash_attention_score_scratch_size(&t, &p1, &bytes1) == LOOM_OK);
    /* the cache is ceil(S/2) * D u32 (docs/ops.md): S = 100 against S = T */
    CHECK_MSG(bytes1 - bytes == (size_t)((T + 1) / 2 - (100 + 1) / 2) * D * 4,
              "scratch %zu (longest 100) vs %zu (one of %d)", bytes, bytes1, T);
    /* runs in that scratch, and gives what the pool-level call gives */
    void *sc = loom_alloc_aligned(bytes, LOOM_ALIGN);
    for (int i = 0; i < T * N * D; i++) out[i] = NAN;
    CHECK_MSG(loom_flash_attention_score_thread(&t, &p, 0, 1, sc, bytes) == LOOM_OK, "%s", loom_last_error());
    memcpy(out2, out, sizeof(float) * T * N * D);
    CHECK(loom_flash_attention_score(&t, &p, NULL) == LOOM_OK);
    CHECK(memcmp(out, out2, sizeof(float) * T * N * D) == 0);
    int finite = 1;
    for (int i = 0; i < T * N * D; i++) finite &= isfinite(out[i]) != 0;
    CHECK(finite);
    /* data with a longer sequence than the scratch was sized for: refused */
    CHECK_ERR(loom_flash_attention_score_thread(&t, &p1, 0, 1, sc, bytes), "scratch");
    loom_free_aligned(sc);
    free(q), free(k), free(v), free(out), free(out2);
}

int main(void) {
    loom_ops_init(); /* the fused layer's ops in the op table */
    RUN_TEST(test_row_conversion);
    RUN_TEST(test_bgemm_rows);
    RUN_TEST(test_transposes);
    RUN_TEST(test_masked_rows_and_skipped_tiles);
    RUN_TEST(test_nonfinite_inputs);
    RUN_TEST(test_dropout);
    RUN_TEST(test_pool_and_blocks);
    RUN_TEST(test_errors);
    RUN_TEST(test_op_table);
    RUN_TEST(test_op_table_tnd);
    RUN_TEST(test_tnd_scratch_fits_longest);
    return TEST_SUMMARY();
}
