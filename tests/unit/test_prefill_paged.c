/* The prefill kernel over a paged KV cache (loom_flash_attention_score with a
 * block_table; fused_infer_attention_score above its decode limit): a chunk of
 * queries against a shuffled paged copy of a cache (test_incre_attention_case.h)
 * gives the bytes the contiguous cache gives, at every level, 1 or 2 threads,
 * both inner_precise settings, every layout (TND included), every cache dtype,
 * block sizes below, at and above the tile, masks and lengths; and agrees with
 * the reference decomposition on the paged inputs. Errors name the parameter. */
#include "test_incre_attention_case.h"
#include "graph/ops_init.h"

/* One prefill problem over case d: contiguous (paged 0) or its paged copy. TND views the
 * BSND memory as [B * S, N, D] (the case has whole sequences: lens 0). */
typedef struct pf_run {
    loom_flash_attention_tensors t;
    loom_flash_attention_params p;
    loom_tensor q3, o3, k3, v3, l3;  /* TND views */
    int64_t qcum[2], kvcum[2];
} pf_run;

static void pf_setup(pf_run *r, const inc_case *c, inc_data *d, int paged, int tnd, loom_tensor *out,
                     loom_tensor *lse) {
    memset(r, 0, sizeof *r);
    int q8 = c->kvdt == LOOM_I8;
    r->t = (loom_flash_attention_tensors){
        .query = &d->q, .key = paged ? &d->pk : &d->k, .value = paged ? &d->pv : &d->v,
        .atten_mask = d->t.atten_mask, .attention_out = out, .softmax_lse = lse,
        .key_antiquant_scale = q8 ? (paged ? &d->pks : &d->ks) : NULL,
        .key_antiquant_offset = q8 && c->koff ? (paged ? &d->pko : &d->ko) : NULL,
        .value_antiquant_scale = q8 ? (paged ? &d->pvs : &d->vs) : NULL,
        .value_antiquant_offset = q8 && c->voff ? (paged ? &d->pvo : &d->vo) : NULL,
        .block_table = paged ? &d->bt : NULL};
    loom_flash_attention_params *p = &r->p;
    *p = loom_flash_attention_default_params();
    p->input_layout = tnd ? LOOM_ATTN_TND : c->L;
    p->num_heads = d->p.num_heads, p->num_key_value_heads = d->p.num_key_value_heads;
    p->sparse_mode = c->sparse, p->pre_tokens = c->pre, p->next_tokens = c->next;
    p->key_antiquant_mode = c->kmode, p->value_antiquant_mode = c->vmode;
    p->inner_precise = c->precise;
    if (!tnd) {
        p->actual_seq_lengths_kv = paged || c->lens ? d->kvlen : NULL;
        p->block_size = paged ? c->bs : 0;
        return;
    }
    /* TND: sequence 0 takes the first Sq - 3 query rows, sequence 1 the next Sq (the rest of the
     * memory: rows after the last sequence, written as zeros); each sees Smax keys */
    loom_tensor_init(&r->q3, d->q.dtype, 3, (const int64_t[3]){c->B * c->Sq, c->N, c->D}, d->q.data);
    loom_tensor_init(&r->o3, out->dtype, 3, (const int64_t[3]){c->B * c->Sq, c->N, c->D}, out->data);
    r->qcum[0] = c->Sq - 3, r->qcum[1] = 2 * c->Sq - 3;
    r->kvcum[0] = c->Smax, r->kvcum[1] = 2 * c->Smax;
    r->t.query = &r->q3, r->t.attention_out = &r->o3;
    if (!paged) {
        loom_tensor_init(&r->k3, d->k.dtype, 3, (const int64_t[3]){c->B * c->Smax, c->Nkv, c->D}, d->k.data);
        loom_tensor_init(&r->v3, d->v.dtype, 3, (const int64_t[3]){c->B * c->Smax, c->Nkv, c->D}, d->v.data);
        r->t.key = &r->k3, r->t.value = &r->v3;
    }
    if (lse) { /* [T_q, N] over the [B, N, S_q] buffer (the same count) */
        loom_tensor_init(&r->l3, LOOM_F32, 2, (const int64_t[2]){c->B * c->Sq, c->N}, lse->data);
        r->t.softmax_lse = &r->l3;
    }
    p->actual_seq_qlen = r->qcum, p->actual_seq_kvlen = r->kvcum, p->num_seqs = 2;
}

static loom_status pf_call(const pf_run *r, loom_isa isa, loom_pool *pool) {
    loom_isa was = loom_cpu_isa();
    if (loom_cpu_set_isa(isa) != LOOM_OK) return LOOM_ERR_UNSUPPORTED;
    loom_status st = loom_flash_attention_score(&r->t, &r->p, pool);
    loom_cpu_set_isa(was);
    return st;
}

static void test_prefill_paged(void) {
    loom_rng r;
    loom_rng_init(&r, 77, 5);
    loom_isa lv[LOOM_ISA_COUNT];
    int nl = test_levels(lv);
    loom_pool *pool = NULL;
    CHECK(loom_pool_init(&pool, 2) == LOOM_OK);
    static const loom_attn_layout lays[4] = {LOOM_ATTN_BSND, LOOM_ATTN_BNSD, LOOM_ATTN_BSH, LOOM_ATTN_BSND};
    static const loom_dtype kvdts[5] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I8, LOOM_F32};
    static const int64_t bss[6] = {16, 64, 3, 128, 1, 40};
    static const int64_t dims[4] = {64, 40, 128, 24};
    int cases = 0, tnd_cases = 0, gathered = 0, in_place = 0, dropped = 0;
    for (int i = 0; i < 30; i++) {
        inc_case c = base_case();
        int tnd = i % 4 == 3; /* BSND memory read as TND */
        c.L = lays[i % 4];
        c.kvdt = kvdts[i % 5];
        c.qdt = c.kvdt == LOOM_BF16 && i % 3 ? LOOM_BF16 : (i % 7 == 5 ? LOOM_F16 : LOOM_F32);
        c.odt = i % 6 == 1 ? LOOM_BF16 : LOOM_F32;
        c.kmode = i % 2, c.vmode = (i / 2) % 2, c.koff = i % 5 == 3 && i % 2, c.voff = i % 3 == 0;
        c.Sq = 17 + irand(&r, 0, 60);
        c.Smax = c.Sq + irand(&r, 0, 200);
        c.Nkv = 1 + irand(&r, 0, 2), c.N = c.Nkv * (1 + irand(&r, 0, 3));
        c.D = dims[i % 4];
        c.bs = bss[i % 6];
        /* chunked prefill's causal mask (bottom right), the band (odd tile starts), a given mask */
        c.sparse = i % 3 == 1 ? 4 : 3, c.pre = 20 + i, c.next = 3;
        if (i % 8 == 6) c.sparse = 0, c.mask_kind = 1 + i % 2;
        c.lens = !tnd && i % 2 == 0;
        c.precise = i % 5 == 2 || i % 5 == 3;
        inc_data d;
        inc_setup(&c, &d, &r);
        pf_run cr, pr;
        pf_setup(&cr, &c, &d, 0, tnd, &d.rout, &d.rlse); /* contiguous: out into rout */
        pf_setup(&pr, &c, &d, 1, tnd, &d.pout, &d.lse);  /* paged: pout */
        attn_problem ap;
        CHECK_MSG(attn_resolve_prefill(&pr.t, &pr.p, &ap) == LOOM_OK, "%s", loom_last_error());
        int bc = c.D <= 128 ? 64 : 32;
        if (c.bs % bc) gathered++;
        else in_place++;
        double tol = c.precise || c.kvdt == LOOM_BF16 || c.qdt == LOOM_BF16 || c.odt == LOOM_BF16
                         ? 2.0 / 128 : (c.kvdt == LOOM_F16 || c.qdt == LOOM_F16 ? 1.0 / 256 : 1.0 / 2048);
        /* the reference on the paged inputs, into out and lref */
        loom_tensor lref;
        int64_t ls3[3] = {c.B, c.N, c.Sq}, ls2[2] = {c.B * c.Sq, c.N};
        tensor_new(&lref, LOOM_F32, tnd ? 2 : 3, tnd ? ls2 : ls3, 0);
        pf_run rr;
        pf_setup(&rr, &c, &d, 1, tnd, &d.out, &lref);
        /* dropout: its keep decisions are indexed by key position (max_blocks * block_size of them
         * per row when paged), so the paged run agrees with the reference, not with the contiguous
         * cache's index space; fused_infer_attention_score has no dropout */
        float keep = i % 10 == 9 ? 0.75f : 1.0f;
        pr.p.keep_prob = rr.p.keep_prob = keep, pr.p.seed = rr.p.seed = 1234 + (uint64_t)i;
        if (keep < 1.0f) tol /= keep;
        {
            attn_problem rp;
            CHECK_MSG(attn_resolve_prefill(&rr.t, &rr.p, &rp) == LOOM_OK, "%s", loom_last_error());
            size_t rb = loom_attn_ref_scratch(&rp);
            void *sc = loom_alloc_aligned(rb, LOOM_ALIGN);
            CHECK_MSG(loom_attn_ref_flash(&rr.t, &rr.p, 0, 1, sc, rb) == LOOM_OK, "%s", loom_last_error());
            loom_free_aligned(sc);
        }
        size_t n = (size_t)tensor_span(&d.out) * loom_dtype_size(c.odt);
        int q8 = c.kvdt == LOOM_I8;
        int contiguous_ok = !(q8 && tnd) && keep == 1.0f; /* an i8 TND cache must be paged */
        for (int l = 0; l < nl; l++)
            for (int nth = 1; nth <= 2; nth++) {
                loom_status st = pf_call(&pr, lv[l], nth == 2 ? pool : NULL);
                CHECK_MSG(st == LOOM_OK, "paged: %s", loom_last_error());
                int ok = tensors_close(&d.pout, &d.out, tol, "paged vs reference") &&
                         tensors_close(pr.t.softmax_lse, &lref, tol, "paged lse vs reference");
                if (contiguous_ok) {
                    CHECK_MSG(pf_call(&cr, lv[l], nth == 2 ? pool : NULL) == LOOM_OK, "contiguous: %s",
                              loom_last_error());
                    ok &= memcmp(d.pout.data, d.rout.data, n) == 0;
                    ok &= memcmp(d.lse.data, d.rlse.data, (size_t)tensor_span(&d.lse) * 4) == 0;
                }
                if (!ok) {
                    inc_describe(&c);
                    fprintf(stderr, "  %s, %d threads, tnd %d: paged %s the contiguous run\n", loom_isa_name(lv[l]),
                            nth, tnd, contiguous_ok && memcmp(d.pout.data, d.rout.data, n) ? "differs from" : "=");
                }
                CHECK(ok);
            }
        /* fused_infer_attention_score runs the prefill kernel on the paged cache */
        loom_fused_infer_attention_params fp = loom_fused_infer_attention_default_params();
        fp.input_layout = pr.p.input_layout, fp.num_heads = pr.p.num_heads;
        fp.num_key_value_heads = pr.p.num_key_value_heads;
        fp.sparse_mode = c.sparse, fp.pre_tokens = c.pre, fp.next_tokens = c.next;
        fp.actual_seq_lengths_kv = pr.p.actual_seq_lengths_kv;
        fp.actual_seq_qlen = pr.p.actual_seq_qlen, fp.actual_seq_kvlen = pr.p.actual_seq_kvlen;
        fp.num_seqs = pr.p.num_seqs, fp.block_size = c.bs;
        fp.key_antiquant_mode = c.kmode, fp.value_antiquant_mode = c.vmode, fp.inner_precise = c.precise;
        loom_fused_infer_attention_tensors ft = {
            .query = pr.t.query, .key = pr.t.key, .value = pr.t.value, .atten_mask = pr.t.atten_mask,
            .block_table = &d.bt, .key_antiquant_scale = pr.t.key_antiquant_scale,
            .key_antiquant_offset = pr.t.key_antiquant_offset, .value_antiquant_scale = pr.t.value_antiquant_scale,
            .value_antiquant_offset = pr.t.value_antiquant_offset, .attention_out = &d.rout};
        if (tnd) {
            loom_tensor_init(&cr.o3, c.odt, 3, (const int64_t[3]){c.B * c.Sq, c.N, c.D}, d.rout.data);
            ft.attention_out = &cr.o3;
        }
        int used = -1;
        memset(d.rout.data, 0, n);
        loom_isa was = loom_cpu_isa(); /* at the level of d.pout (the last above), whatever LOOM_ISA says */
        CHECK(loom_cpu_set_isa(lv[nl - 1]) == LOOM_OK);
        CHECK_MSG(loom_fused_infer_attention_score(&ft, &fp, pool, &used) == LOOM_OK, "%s", loom_last_error());
        loom_cpu_set_isa(was);
        CHECK(used == 0 && (keep < 1.0f || memcmp(d.pout.data, d.rout.data, n) == 0));
        tensor_free(&lref);
        inc_teardown(&d);
        cases++, tnd_cases += tnd, dropped += keep < 1.0f;
    }
    CHECK(cases == 30 && tnd_cases >= 5 && gathered >= 5 && in_place >= 5 && dropped >= 3);
    loom_pool_free(pool);
}

/* A view of rows [r0, r1) of the S dim of a BSND tensor. */
static loom_tensor rows_view(const loom_tensor *t, int64_t r0, int64_t r1) {
    loom_tensor v = *t;
    v.data = (char *)t->data + (size_t)(r0 * t->stride[1]) * loom_dtype_size(t->dtype);
    v.shape[1] = r1 - r0;
    return v;
}

/* Chunked prefill: a sequence's queries in chunks, each against everything cached up to its
 * end in a paged cache (sparse_mode 3 puts the chunk at the end of its keys), give the bytes a
 * one-shot causal prefill over the contiguous cache gives, output and lse: each row sees the
 * same keys in the same tiles, and a tile a row does not see leaves its sums exactly as they
 * were. Every level, 1 or 2 threads, f32 / bf16 / i8 caches, blocks that are gathered or read in
 * place, chunks of any length. */
static void test_chunked_equals_oneshot(void) {
    loom_rng r;
    loom_rng_init(&r, 99, 4);
    loom_isa lv[LOOM_ISA_COUNT];
    int nl = test_levels(lv);
    loom_pool *pool = NULL;
    CHECK(loom_pool_init(&pool, 2) == LOOM_OK);
    static const loom_dtype kvdts[3] = {LOOM_F32, LOOM_BF16, LOOM_I8};
    static const int64_t bss[3] = {16, 64, 7};
    for (int i = 0; i < 9; i++) {
        inc_case c = base_case();
        c.B = 1, c.Sq = 90 + irand(&r, 0, 200), c.Smax = c.Sq;
        c.kvdt = kvdts[i % 3], c.bs = bss[(i / 3) % 3];
        c.qdt = c.kvdt == LOOM_BF16 ? LOOM_BF16 : LOOM_F32;
        c.kmode = c.vmode = LOOM_ANTIQUANT_PER_TOKEN;
        c.D = i % 2 ? 128 : 64, c.Nkv = 2, c.N = 2 * c.Nkv;
        c.sparse = 3, c.precise = i % 4 == 1;
        inc_data d;
        inc_setup(&c, &d, &r);
        pf_run one;
        pf_setup(&one, &c, &d, 0, 0, &d.rout, &d.rlse);
        int64_t cuts[4] = {0, 1 + irand(&r, 0, c.Sq / 3), 0, c.Sq}; /* three chunks */
        cuts[2] = cuts[1] + 1 + irand(&r, 0, c.Sq - cuts[1] - 2);
        size_t n = (size_t)tensor_span(&d.out) * loom_dtype_size(c.odt), nl8 = (size_t)tensor_span(&d.lse) * 4;
        for (int l = 0; l < nl; l++)
            for (int nth = 1; nth <= 2; nth++) {
                loom_pool *pp = nth == 2 ? pool : NULL;
                CHECK_MSG(pf_call(&one, lv[l], pp) == LOOM_OK, "one-shot: %s", loom_last_error());
                memset(d.pout.data, 0xAB, n);
                memset(d.lse.data, 0xAB, nl8);
                for (int k = 0; k < 3; k++) {
                    /* the chunk's queries against the first cuts[k + 1] keys of the paged cache */
                    pf_run ch;
                    pf_setup(&ch, &c, &d, 1, 0, &d.pout, NULL);
                    loom_tensor q = rows_view(&d.q, cuts[k], cuts[k + 1]), o = rows_view(&d.pout, cuts[k], cuts[k + 1]);
                    loom_tensor lse;
                    loom_tensor_init(&lse, LOOM_F32, 3, (const int64_t[3]){1, c.N, cuts[k + 1] - cuts[k]},
                                     (float *)d.lse.data + cuts[k]);
                    lse.stride[0] = d.lse.stride[0], lse.stride[1] = d.lse.stride[1];
                    int64_t len[1] = {cuts[k + 1]};
                    ch.t.query = &q, ch.t.attention_out = &o, ch.t.softmax_lse = &lse;
                    ch.p.actual_seq_lengths_kv = len;
                    CHECK_MSG(pf_call(&ch, lv[l], pp) == LOOM_OK, "chunk %d: %s", k, loom_last_error());
                }
                int ok = memcmp(d.pout.data, d.rout.data, n) == 0 && memcmp(d.lse.data, d.rlse.data, nl8) == 0;
                if (!ok) {
                    inc_describe(&c);
                    fprintf(stderr, "  %s, %d threads, chunks at %lld, %lld\n", loom_isa_name(lv[l]), nth,
                            (long long)cuts[1], (long long)cuts[2]);
                }
                CHECK(ok);
            }
        inc_teardown(&d);
    }
    loom_pool_free(pool);
}

/* Prefix caching: two sequences whose block tables share the blocks of a common prefix (the
 * second sequence's first blocks are the first sequence's) give the bytes of contiguous caches
 * holding the same content. The kernel's per-thread caches are keyed by sequence and kv head, so a
 * block read for two sequences is gathered for each. */
static void test_prefix_sharing(void) {
    loom_rng r;
    loom_rng_init(&r, 21, 6);
    loom_isa lv[LOOM_ISA_COUNT];
    int nl = test_levels(lv);
    loom_pool *pool = NULL;
    CHECK(loom_pool_init(&pool, 2) == LOOM_OK);
    static const loom_dtype kvdts[3] = {LOOM_F32, LOOM_BF16, LOOM_I8};
    int shared_cases = 0;
    for (int i = 0; i < 6; i++) {
        inc_case c = base_case();
        c.B = 2, c.Sq = 20 + irand(&r, 0, 40), c.Smax = c.Sq + 70 + irand(&r, 0, 100);
        c.kvdt = kvdts[i % 3], c.qdt = c.kvdt == LOOM_BF16 && i % 2 ? LOOM_BF16 : LOOM_F32;
        c.kmode = c.vmode = LOOM_ANTIQUANT_PER_TOKEN;
        c.bs = i < 3 ? 16 : 64, c.sparse = 3, c.precise = i == 4;
        c.Nkv = 1 + i % 2, c.N = 4 * c.Nkv; /* one kv head: a thread's items go from sequence 0 to 1 on it */
        inc_data d;
        inc_setup(&c, &d, &r);
        int64_t maxb = d.bt.shape[1], shared = 1 + irand(&r, 0, maxb - 2), xs = d.k.stride[3];
        int32_t *bt = d.bt.data;
        for (int64_t j = 0; j < shared; j++) bt[maxb + j] = bt[j]; /* sequence 1 shares sequence 0's blocks */
        for (int64_t p = 0; p < shared * c.bs && p < c.Smax; p++) /* and so its contiguous copy the rows */
            for (int64_t n = 0; n < c.Nkv; n++) {
                int64_t o0 = cache_off(&d.k, c.L, c.D, 0, p, n), o1 = cache_off(&d.k, c.L, c.D, 1, p, n);
                for (int64_t x = 0; x < c.D; x++) {
                    tset(&d.k, o1 + x * xs, tget(&d.k, o0 + x * xs));
                    tset(&d.v, o1 + x * xs, tget(&d.v, o0 + x * xs));
                }
                loom_tensor *sc[2] = {&d.ks, &d.vs};
                for (int w = 0; w < 2 && c.kvdt == LOOM_I8; w++) {
                    const int64_t *st = sc[w]->stride;
                    tset(sc[w], st[0] + n * st[1] + p * st[2], tget(sc[w], n * st[1] + p * st[2]));
                }
            }
        pf_run cr, pr;
        pf_setup(&cr, &c, &d, 0, 0, &d.rout, &d.rlse);
        pf_setup(&pr, &c, &d, 1, 0, &d.pout, &d.lse);
        size_t n = (size_t)tensor_span(&d.out) * loom_dtype_size(c.odt), nl8 = (size_t)tensor_span(&d.lse) * 4;
        for (int l = 0; l < nl; l++)
            for (int nth = 1; nth <= 2; nth++) {
                loom_pool *pp = nth == 2 ? pool : NULL;
                CHECK_MSG(pf_call(&cr, lv[l], pp) == LOOM_OK, "contiguous: %s", loom_last_error());
                CHECK_MSG(pf_call(&pr, lv[l], pp) == LOOM_OK, "paged: %s", loom_last_error());
                int ok = memcmp(d.pout.data, d.rout.data, n) == 0 && memcmp(d.lse.data, d.rlse.data, nl8) == 0;
                if (!ok) {
                    inc_describe(&c);
                    fprintf(stderr, "  %s, %d threads, %lld shared blocks\n", loom_isa_name(lv[l]), nth,
                            (long long)shared);
                }
                CHECK(ok);
            }
        shared_cases += shared > 0;
        inc_teardown(&d);
    }
    CHECK(shared_cases == 6);
    loom_pool_free(pool);
}

/* Invalid paged prefill inputs: an error naming the parameter, outputs untouched. */
static void test_prefill_paged_errors(void) {
    loom_rng r;
    loom_rng_init(&r, 5, 1);
    inc_case c = base_case();
    c.Sq = 20, c.Smax = 50, c.lens = 1;
    inc_data d;
    inc_setup(&c, &d, &r);
    pf_run pr;
    pf_setup(&pr, &c, &d, 1, 0, &d.pout, NULL);
    CHECK_MSG(loom_flash_attention_score(&pr.t, &pr.p, NULL) == LOOM_OK, "%s", loom_last_error());
    size_t n = (size_t)tensor_span(&d.pout) * 4;
    void *before = malloc(n);
    memcpy(before, d.pout.data, n);
    pf_run e = pr;
    e.p.actual_seq_lengths_kv = NULL;
    CHECK_ERR(loom_flash_attention_score(&e.t, &e.p, NULL), "needs actual_seq_lengths_kv");
    e = pr, e.p.block_size = c.bs + 1;
    CHECK_ERR(loom_flash_attention_score(&e.t, &e.p, NULL), "block_size");
    int64_t big[2] = {4 * 16 + 1, 3}; /* beyond max_blocks * block_size (4 * 16) */
    e = pr, e.p.actual_seq_lengths_kv = big;
    CHECK_ERR(loom_flash_attention_score(&e.t, &e.p, NULL), "actual_seq_lengths_kv[0]");
    int32_t *bt = d.bt.data, saved = bt[1];
    bt[1] = (int32_t)(d.pk.shape[0]); /* a block past the cache */
    CHECK_ERR(loom_flash_attention_score(&pr.t, &pr.p, NULL), "block_table[0][1]");
    bt[1] = -1;
    CHECK_ERR(loom_flash_attention_score(&pr.t, &pr.p, NULL), "block_table[0][1]");
    bt[1] = saved;
    loom_tensor bad = d.bt;
    bad.dtype = LOOM_F32;
    e = pr, e.t.block_table = &bad;
    CHECK_ERR(loom_flash_attention_score(&e.t, &e.p, NULL), "block_table has dtype");
    loom_tensor_init(&bad, LOOM_I32, 2, (const int64_t[2]){c.B + 1, d.bt.shape[1]}, d.bt.data);
    CHECK_ERR(loom_flash_attention_score(&e.t, &e.p, NULL), "block_table shape");
    e = pr, e.t.block_table = NULL, e.p.block_size = 16; /* a block size with a contiguous cache */
    e.t.key = &d.k, e.t.value = &d.v;
    CHECK_ERR(loom_flash_attention_score(&e.t, &e.p, NULL), "without a block_table");
    /* TND: a sequence longer than the table addresses; a missing actual_seq_kvlen */
    pf_run tr;
    c.lens = 0;
    pf_setup(&tr, &c, &d, 1, 1, &d.pout, NULL);
    int64_t kv[2] = {10, 10 + 4 * 16 + 1};
    tr.p.actual_seq_kvlen = kv;
    CHECK_ERR(loom_flash_attention_score(&tr.t, &tr.p, NULL), "actual_seq_kvlen[1]");
    tr.p.actual_seq_kvlen = NULL;
    CHECK_ERR(loom_flash_attention_score(&tr.t, &tr.p, NULL), "actual_seq_kvlen");
    CHECK(memcmp(before, d.pout.data, n) == 0);
    free(before);
    inc_teardown(&d);
}

/* fused_infer_attention_score: a paged cache goes to the decode kernel up to
 * decode_max_q_len and to the prefill kernel above it, with the same result. */
static void test_fia_paged_choice(void) {
    loom_rng r;
    loom_rng_init(&r, 12, 3);
    inc_case c = base_case();
    c.Sq = 9, c.sparse = 3, c.lens = 1, c.Smax = 90;
    inc_data d;
    inc_setup(&c, &d, &r);
    size_t sb = 0, wb = 0;
    CHECK(loom_incre_flash_attention_sizes(&d.tr, &d.p, &sb, &wb) == LOOM_OK);
    void *sc = loom_alloc_aligned(sb, LOOM_ALIGN);
    CHECK(loom_attn_ref_incre(&d.tr, &d.p, NULL, 0, 1, sc, sb) == LOOM_OK);
    loom_free_aligned(sc);
    loom_fused_infer_attention_params fp = loom_fused_infer_attention_default_params();
    fp.sparse_mode = 3, fp.actual_seq_lengths_kv = d.kvlen;
    loom_fused_infer_attention_tensors ft = {.query = &d.q, .key = &d.pk, .value = &d.pv, .block_table = &d.bt,
                                             .attention_out = &d.out, .softmax_lse = &d.lse};
    for (int lim = 16; lim >= 0; lim -= 8) { /* 16, 8: decode; 0: prefill */
        fp.decode_max_q_len = lim;
        int used = -1;
        CHECK_MSG(loom_fused_infer_attention_score(&ft, &fp, NULL, &used) == LOOM_OK, "%s", loom_last_error());
        CHECK(used == (lim >= c.Sq));
        CHECK(tensors_close(&d.out, &d.rout, 1.0 / 2048, "fia paged"));
        CHECK(tensors_close(&d.lse, &d.rlse, 1.0 / 2048, "fia paged lse"));
    }
    inc_teardown(&d);
}

int main(void) {
    loom_ops_init(); /* the fused layer's ops in the op table */
    RUN_TEST(test_prefill_paged);
    RUN_TEST(test_chunked_equals_oneshot);
    RUN_TEST(test_prefix_sharing);
    RUN_TEST(test_prefill_paged_errors);
    RUN_TEST(test_fia_paged_choice);
    return TEST_SUMMARY();
}
