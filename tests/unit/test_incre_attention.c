/* loom_incre_flash_attention (decode) against its reference decomposition:
 * contiguous and paged caches (paged = contiguous, bit for bit), f32/f16/bf16
 * and i8 caches with per-channel / per-token antiquant, q_len 1..16, masks,
 * split-KV chunking; one launch vs split+merge for nth 1..3 (bit-identical);
 * fused_infer_attention_score dispatch; errors; the op-table entry. The
 * decode kernels' own contracts are in test_decode_kernels.c. */
#include "test_attention_common.h"

#include "fused/flash_attention_internal.h"
#include "ops/ops.h"

typedef struct inc_case {
    loom_attn_layout L;
    int64_t B, Sq, Smax, N, Nkv, D;
    loom_dtype qdt, kvdt, odt;
    int kmode, vmode, koff, voff;     /* i8 caches */
    int sparse;
    int64_t pre, next;
    int mask_kind, lens, lse;
    int64_t bs, chunk;                /* block size of the paged copy, kv_chunk */
    int ramp;                         /* K rows drift along (1, .., 1): scores rise or fall */
    int64_t lead;                     /* > 0: the mask hides keys < i * lead from q row i */
    float scale;                      /* scale_value; 0 = 1/sqrt(D) */
    int precise;                      /* inner_precise: 1 rounds P to bf16 for an i8 V */
} inc_case;

typedef struct inc_data {
    loom_tensor q, k, v, pk, pv, bt, mask, out, rout, pout, lse, rlse;
    loom_tensor ks, ko, vs, vo, pks, pko, pvs, pvo; /* antiquant, contiguous and paged */
    gbuf g[5];
    int64_t kvlen[4];
    loom_incre_flash_attention_tensors t, tr, tp;
    loom_incre_flash_attention_params p, pp;
} inc_data;

static void inc_describe(const inc_case *c) {
    fprintf(stderr, "  case: %s B=%lld Sq=%lld Smax=%lld N=%lld Nkv=%lld D=%lld dt=%s/%s/%s "
            "quant=%d/%d off=%d/%d mode=%d pre=%lld next=%lld mask=%d lens=%d bs=%lld chunk=%lld "
            "inner_precise=%d\n",
            loom_attn_layout_name(c->L), (long long)c->B, (long long)c->Sq, (long long)c->Smax,
            (long long)c->N, (long long)c->Nkv, (long long)c->D, loom_dtype_name(c->qdt),
            loom_dtype_name(c->kvdt), loom_dtype_name(c->odt), c->kmode, c->vmode, c->koff,
            c->voff, c->sparse, (long long)c->pre, (long long)c->next, c->mask_kind, c->lens,
            (long long)c->bs, (long long)c->chunk, c->precise);
}

/* Element offset of (b, s, n, 0) in a cache laid out as L. */
static int64_t cache_off(const loom_tensor *t, loom_attn_layout L, int64_t D, int64_t b, int64_t s,
                         int64_t n) {
    if (L == LOOM_ATTN_BNSD) return b * t->stride[0] + n * t->stride[1] + s * t->stride[2];
    if (L == LOOM_ATTN_BSH) return b * t->stride[0] + s * t->stride[1] + n * D * t->stride[2];
    return b * t->stride[0] + s * t->stride[1] + n * t->stride[2];
}

static void quant_tensors(const inc_case *c, int mode, int off, loom_tensor *s, loom_tensor *o,
                          loom_tensor *ps, loom_tensor *po, int64_t nblocks, loom_rng *r) {
    int64_t shc[2] = {c->Nkv, c->D}, sht[3] = {c->B, c->Nkv, c->Smax}, shp[3] = {nblocks, c->Nkv, c->bs};
    int per_token = mode == LOOM_ANTIQUANT_PER_TOKEN;
    tensor_new(s, LOOM_F32, per_token ? 3 : 2, per_token ? sht : shc, 0);
    for (int64_t i = 0; i < tensor_span(s); i++) tset(s, i, 0.002f + 0.01f * loom_rng_uniform(r));
    if (off) {
        tensor_new(o, LOOM_F32, per_token ? 3 : 2, per_token ? sht : shc, 0);
        for (int64_t i = 0; i < tensor_span(o); i++) tset(o, i, 6.0f * loom_rng_uniform(r) - 3.0f);
    }
    if (!per_token) { /* per channel: the paged run shares them */
        *ps = *s;
        if (off) *po = *o;
        return;
    }
    tensor_new(ps, LOOM_F32, 3, shp, 0);
    if (off) tensor_new(po, LOOM_F32, 3, shp, 0);
}

static void inc_setup(const inc_case *c, inc_data *d, loom_rng *r) {
    memset(d, 0, sizeof *d);
    int64_t sh[4];
    int nd = layout_shape(c->L, c->B, c->Sq, c->N, c->D, sh);
    tensor_new(&d->q, c->qdt, nd, sh, 0);
    tensor_fill(&d->q, r, 2.0f);
    tensor_guarded(&d->out, &d->g[0], c->odt, nd, sh);
    tensor_guarded(&d->rout, &d->g[1], c->odt, nd, sh);
    tensor_guarded(&d->pout, &d->g[2], c->odt, nd, sh);
    layout_shape(c->L, c->B, c->Smax, c->Nkv, c->D, sh);
    tensor_new(&d->k, c->kvdt, nd, sh, 0);
    tensor_new(&d->v, c->kvdt, nd, sh, 0);
    float amp = c->kvdt == LOOM_I8 ? 127.0f : 1.0f;
    tensor_fill(&d->k, r, amp);
    tensor_fill(&d->v, r, amp);
    if (c->ramp) /* + 10 s / Smax on every element of K row s, + 30 more on one row */
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t s = 0; s < c->Smax; s++)
                for (int64_t n = 0; n < c->Nkv; n++) {
                    int64_t o = cache_off(&d->k, c->L, c->D, b, s, n), xs = d->k.stride[d->k.ndim - 1];
                    float add = 10.0f * (float)s / (float)c->Smax + (s == 2 * c->Smax / 3 ? 30.0f : 0.0f);
                    for (int64_t x = 0; x < c->D; x++) tset(&d->k, o + x * xs, tget(&d->k, o + x * xs) + add);
                }
    /* paged copy: blocks in shuffled order, unused table entries -1 */
    int64_t maxb = (c->Smax + c->bs - 1) / c->bs, nblocks = c->B * maxb + 3;
    layout_shape(c->L, nblocks, c->bs, c->Nkv, c->D, sh);
    tensor_new(&d->pk, c->kvdt, nd, sh, 0);
    tensor_new(&d->pv, c->kvdt, nd, sh, 0);
    int64_t bts[2] = {c->B, maxb};
    tensor_new(&d->bt, LOOM_I32, 2, bts, 0);
    int64_t *perm = xmalloc((size_t)nblocks * sizeof(int64_t));
    for (int64_t i = 0; i < nblocks; i++) perm[i] = i;
    for (int64_t i = nblocks - 1; i > 0; i--) {
        int64_t j = (int64_t)(loom_rng_uniform(r) * (float)(i + 1)) % (i + 1), x = perm[i];
        perm[i] = perm[j], perm[j] = x;
    }
    for (int64_t b = 0; b < c->B; b++) {
        d->kvlen[b] = c->lens ? (int64_t)(loom_rng_uniform(r) * (float)(c->Smax + 1)) : c->Smax;
        if (c->lens && b == 0) d->kvlen[b] = c->Smax; /* one full sequence */
        for (int64_t j = 0; j < maxb; j++)
            tset(&d->bt, b * maxb + j, j * c->bs < d->kvlen[b] ? (float)perm[b * maxb + j] : -1.0f);
    }
    if (c->kvdt == LOOM_I8) {
        quant_tensors(c, c->kmode, c->koff, &d->ks, &d->ko, &d->pks, &d->pko, nblocks, r);
        quant_tensors(c, c->vmode, c->voff, &d->vs, &d->vo, &d->pvs, &d->pvo, nblocks, r);
    }
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t s = 0; s < d->kvlen[b]; s++) {
            int64_t blk = perm[b * maxb + s / c->bs], slot = s % c->bs;
            for (int64_t n = 0; n < c->Nkv; n++) {
                int64_t so = cache_off(&d->k, c->L, c->D, b, s, n), po = cache_off(&d->pk, c->L, c->D, blk, slot, n);
                for (int64_t x = 0; x < c->D; x++) {
                    int64_t xs = d->k.stride[d->k.ndim - 1];
                    tset(&d->pk, po + x * xs, tget(&d->k, so + x * xs));
                    tset(&d->pv, po + x * xs, tget(&d->v, so + x * xs));
                }
                loom_tensor *src[4] = {&d->ks, &d->ko, &d->vs, &d->vo}, *dst[4] = {&d->pks, &d->pko, &d->pvs, &d->pvo};
                for (int w = 0; w < 4; w++)
                    if (src[w]->data && src[w]->ndim == 3 && dst[w]->data != src[w]->data)
                        tset(dst[w], blk * dst[w]->stride[0] + n * dst[w]->stride[1] + slot * dst[w]->stride[2],
                             tget(src[w], b * src[w]->stride[0] + n * src[w]->stride[1] + s * src[w]->stride[2]));
            }
        }
    free(perm);
    if (c->mask_kind) {
        int64_t ms[4] = {c->B, 1, c->Sq, c->Smax};
        tensor_new(&d->mask, c->mask_kind == 1 ? LOOM_I8 : LOOM_F32, 4, ms, 0);
        for (int64_t i = 0; i < tensor_span(&d->mask); i++) {
            float u = loom_rng_uniform(r);
            if (c->mask_kind == 1) tset(&d->mask, i, u < 0.25f);
            else tset(&d->mask, i, u < 0.15f ? -INFINITY : 3.0f * loom_rng_uniform(r) - 1.5f);
            int64_t row = i / c->Smax % c->Sq, key = i % c->Smax;
            if (c->lead && key < row * c->lead) tset(&d->mask, i, c->mask_kind == 1 ? 1.0f : -INFINITY);
        }
    }
    if (c->lse) {
        int64_t ls[3] = {c->B, c->N, c->Sq};
        tensor_guarded(&d->lse, &d->g[3], LOOM_F32, 3, ls);
        tensor_guarded(&d->rlse, &d->g[4], LOOM_F32, 3, ls);
    }
    loom_incre_flash_attention_params *p = &d->p;
    *p = loom_incre_flash_attention_default_params();
    p->input_layout = c->L;
    p->num_heads = c->L == LOOM_ATTN_BSH ? c->N : 0;
    p->num_key_value_heads = c->L == LOOM_ATTN_BSH ? c->Nkv : 0;
    p->sparse_mode = c->sparse, p->pre_tokens = c->pre, p->next_tokens = c->next;
    p->actual_seq_lengths = c->lens ? d->kvlen : NULL;
    p->key_antiquant_mode = c->kmode, p->value_antiquant_mode = c->vmode;
    p->kv_chunk = c->chunk;
    p->scale_value = c->scale;
    p->inner_precise = c->precise;
    d->pp = *p;
    d->pp.actual_seq_lengths = d->kvlen;
    int q8 = c->kvdt == LOOM_I8;
    loom_incre_flash_attention_tensors t = {
        .query = &d->q, .key = &d->k, .value = &d->v, .atten_mask = c->mask_kind ? &d->mask : NULL,
        .key_antiquant_scale = q8 ? &d->ks : NULL, .key_antiquant_offset = q8 && c->koff ? &d->ko : NULL,
        .value_antiquant_scale = q8 ? &d->vs : NULL, .value_antiquant_offset = q8 && c->voff ? &d->vo : NULL,
        .attention_out = &d->out, .softmax_lse = c->lse ? &d->lse : NULL};
    d->t = t;
    d->tr = t, d->tr.attention_out = &d->rout, d->tr.softmax_lse = c->lse ? &d->rlse : NULL;
    d->tp = t, d->tp.attention_out = &d->pout, d->tp.softmax_lse = NULL;
    d->tp.key = &d->pk, d->tp.value = &d->pv, d->tp.block_table = &d->bt;
    if (q8) {
        d->tp.key_antiquant_scale = &d->pks, d->tp.value_antiquant_scale = &d->pvs;
        d->tp.key_antiquant_offset = c->koff ? &d->pko : NULL;
        d->tp.value_antiquant_offset = c->voff ? &d->pvo : NULL;
    }
}

static void inc_teardown(inc_data *d) {
    loom_tensor *own[] = {&d->q, &d->k, &d->v, &d->pk, &d->pv, &d->bt, &d->mask};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (own[i]->data) tensor_free(own[i]);
    loom_tensor *qt[4][2] = {{&d->ks, &d->pks}, {&d->ko, &d->pko}, {&d->vs, &d->pvs}, {&d->vo, &d->pvo}};
    for (int w = 0; w < 4; w++) {
        if (qt[w][1]->data && qt[w][1]->data != qt[w][0]->data) tensor_free(qt[w][1]);
        if (qt[w][0]->data) tensor_free(qt[w][0]);
    }
    for (int i = 0; i < 5; i++)
        if (d->g[i].base) {
            CHECK_MSG(gbuf_intact(&d->g[i]), "guard bytes of output %d overwritten", i);
            gbuf_free(&d->g[i]);
        }
}

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

static int64_t irand(loom_rng *r, int64_t lo, int64_t hi) {
    return lo + (int64_t)(loom_rng_uniform(r) * (float)(hi - lo + 1)) % (hi - lo + 1);
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

static inc_case base_case(void) {
    inc_case c;
    memset(&c, 0, sizeof c);
    c.L = LOOM_ATTN_BSND, c.B = 2, c.Sq = 1, c.Smax = 50, c.N = 8, c.Nkv = 2, c.D = 64;
    c.qdt = c.kvdt = c.odt = LOOM_F32;
    c.pre = c.next = LOOM_ATTN_TOKENS_ALL;
    c.bs = 16, c.lse = 1;
    return c;
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
        if (c.kvdt == LOOM_BF16 && loom_cpu_isa() >= LOOM_ISA_AVX512 && loom_cpu_get()->avx512_bf16 && c.D != 96)
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

/* fused_infer_attention_score picks the kernel by S_q and forwards parameters. */
static void test_fused_infer_dispatch(void) {
    loom_rng r;
    loom_rng_init(&r, 9, 2);
    inc_case c = base_case();
    c.Sq = 4, c.sparse = 3, c.lens = 1;
    inc_data d;
    inc_setup(&c, &d, &r);
    int64_t qlens[2] = {3, 1};
    loom_fused_infer_attention_params fp = loom_fused_infer_attention_default_params();
    fp.sparse_mode = 3, fp.actual_seq_lengths = qlens, fp.actual_seq_lengths_kv = d.kvlen;
    loom_fused_infer_attention_tensors ft = {.query = &d.q, .key = &d.k, .value = &d.v,
                                             .attention_out = &d.out, .softmax_lse = &d.lse};
    int used = -1;
    CHECK_MSG(loom_fused_infer_attention_score(&ft, &fp, NULL, &used) == LOOM_OK, "%s", loom_last_error());
    CHECK(used == 1);
    size_t sb = 0, wb = 0;
    CHECK(loom_incre_flash_attention_sizes(&d.tr, &d.p, &sb, &wb) == LOOM_OK);
    void *sc = loom_alloc_aligned(sb, LOOM_ALIGN);
    CHECK(loom_attn_ref_incre(&d.tr, &d.p, qlens, 0, 1, sc, sb) == LOOM_OK);
    loom_free_aligned(sc);
    CHECK(tensors_close(&d.out, &d.rout, 1.0 / 2048, "fia decode"));
    CHECK(tensors_close(&d.lse, &d.rlse, 1.0 / 2048, "fia lse"));
    /* the same query through the prefill kernel (decode limit 0) agrees */
    fp.decode_max_q_len = 0;
    CHECK(loom_fused_infer_attention_score(&ft, &fp, NULL, &used) == LOOM_OK && used == 0);
    CHECK(tensors_close(&d.out, &d.rout, 1.0 / 2048, "fia prefill"));
    /* a paged cache is decode-only */
    ft.block_table = &d.bt, ft.key = &d.pk, ft.value = &d.pv;
    CHECK(loom_fused_infer_attention_score(&ft, &fp, NULL, &used) == LOOM_OK && used == 1);
    CHECK(tensors_close(&d.out, &d.rout, 1.0 / 2048, "fia paged"));
    fp.decode_max_q_len = 17;
    CHECK(loom_fused_infer_attention_score(&ft, &fp, NULL, &used) == LOOM_ERR_INVALID_ARG);
    inc_teardown(&d);
    c = base_case(), c.Sq = 17, c.Smax = 30;
    inc_setup(&c, &d, &r);
    fp = loom_fused_infer_attention_default_params();
    ft = (loom_fused_infer_attention_tensors){.query = &d.q, .key = &d.k, .value = &d.v,
                                              .attention_out = &d.out};
    CHECK(loom_fused_infer_attention_score(&ft, &fp, NULL, &used) == LOOM_OK && used == 0);
    ft.block_table = &d.bt, ft.key = &d.pk, ft.value = &d.pv;
    CHECK(loom_fused_infer_attention_score(&ft, &fp, NULL, &used) == LOOM_ERR_UNSUPPORTED);
    CHECK(strstr(loom_last_error(), "decode") != NULL);
    inc_teardown(&d);
}

/* An i8 cache read by the prefill kernel (loom_flash_attention_score with
 * antiquant scales, and fused_infer_attention_score above its decode limit):
 * per-channel and per-token scales, with and without offsets, every layout,
 * causal and band masks, padded lengths, at every level and 1 or 2 threads
 * (bit-identical), against the reference decomposition. */
static void test_prefill_i8_cache(void) {
    loom_rng r;
    loom_rng_init(&r, 31, 2);
    loom_isa lv[LOOM_ISA_COUNT];
    int nl = test_levels(lv);
    loom_pool *pool = NULL;
    CHECK(loom_pool_init(&pool, 2) == LOOM_OK);
    const loom_attn_layout lays[3] = {LOOM_ATTN_BSND, LOOM_ATTN_BNSD, LOOM_ATTN_BSH};
    for (int i = 0; i < 18; i++) {
        inc_case c = base_case();
        c.L = lays[i % 3];
        c.kvdt = LOOM_I8;
        c.kmode = i % 2, c.vmode = (i / 2) % 2, c.koff = i % 5 == 1, c.voff = i % 4 == 2;
        c.Sq = i % 6 == 0 ? 5 : 17 + irand(&r, 0, 60);
        c.Smax = c.Sq + irand(&r, 0, 150);
        c.Nkv = 1 + irand(&r, 0, 2), c.N = c.Nkv * (1 + irand(&r, 0, 3));
        static const int64_t dims[4] = {64, 40, 128, 24};
        c.D = dims[i % 4];
        c.sparse = i % 3 == 2 ? 4 : 3, c.pre = 20 + i, c.next = 3;
        c.lens = i % 4 == 3, c.mask_kind = i % 7 == 4 ? 2 : 0;
        c.qdt = i % 5 == 3 ? LOOM_BF16 : LOOM_F32;
        inc_data d;
        inc_setup(&c, &d, &r);
        loom_flash_attention_tensors t = {&d.q, &d.k, &d.v, d.t.atten_mask, &d.out, &d.lse,
                                          d.t.key_antiquant_scale, d.t.key_antiquant_offset,
                                          d.t.value_antiquant_scale, d.t.value_antiquant_offset};
        loom_flash_attention_params p = loom_flash_attention_default_params();
        p.input_layout = c.L, p.num_heads = d.p.num_heads, p.num_key_value_heads = d.p.num_key_value_heads;
        p.sparse_mode = c.sparse, p.pre_tokens = c.pre, p.next_tokens = c.next;
        p.actual_seq_lengths_kv = c.lens ? d.kvlen : NULL;
        p.key_antiquant_mode = c.kmode, p.value_antiquant_mode = c.vmode;
        loom_flash_attention_tensors tr = t;
        tr.attention_out = &d.rout, tr.softmax_lse = &d.rlse;
        attn_problem pr;
        CHECK_MSG(attn_resolve_prefill(&tr, &p, &pr) == LOOM_OK, "%s", loom_last_error());
        size_t rb = loom_attn_ref_scratch(&pr);
        void *sc = loom_alloc_aligned(rb, LOOM_ALIGN);
        CHECK_MSG(loom_attn_ref_flash(&tr, &p, 0, 1, sc, rb) == LOOM_OK, "%s", loom_last_error());
        loom_free_aligned(sc);
        size_t n = (size_t)tensor_span(&d.out) * loom_dtype_size(c.odt);
        void *first = malloc(n);
        /* inner_precise 1: per-token scales without offsets take bf16 products (twice bf16's
         * tolerance), other i8 caches f32 as at 0 */
        for (int ip = 1; ip >= 0; ip--)
            for (int l = 0; l < nl; l++)
                for (int nth = 1; nth <= 2; nth++) {
                    loom_isa was = loom_cpu_isa();
                    CHECK(loom_cpu_set_isa(lv[l]) == LOOM_OK);
                    p.inner_precise = ip;
                    CHECK_MSG(loom_flash_attention_score(&t, &p, nth == 2 ? pool : NULL) == LOOM_OK, "%s",
                              loom_last_error());
                    loom_cpu_set_isa(was);
                    double tol = ip ? 2.0 / 128 : 1.0 / 2048;
                    int ok = tensors_close(&d.out, &d.rout, tol, "i8 prefill out") &&
                             tensors_close(&d.lse, &d.rlse, tol, "i8 prefill lse");
                    if (nth == 1) memcpy(first, d.out.data, n);
                    else ok &= memcmp(first, d.out.data, n) == 0;
                    if (!ok) inc_describe(&c), fprintf(stderr, "  inner_precise %d, %s\n", ip, loom_isa_name(lv[l]));
                    CHECK(ok);
                }
        /* fused_infer_attention_score takes the prefill kernel above its decode limit */
        loom_fused_infer_attention_params fp = loom_fused_infer_attention_default_params();
        fp.input_layout = c.L, fp.num_heads = p.num_heads, fp.num_key_value_heads = p.num_key_value_heads;
        fp.sparse_mode = c.sparse, fp.pre_tokens = c.pre, fp.next_tokens = c.next;
        fp.actual_seq_lengths_kv = p.actual_seq_lengths_kv;
        fp.key_antiquant_mode = c.kmode, fp.value_antiquant_mode = c.vmode;
        if (c.Sq <= LOOM_INCRE_MAX_Q_LEN) fp.decode_max_q_len = 0;
        loom_fused_infer_attention_tensors ft = {
            .query = &d.q, .key = &d.k, .value = &d.v, .atten_mask = t.atten_mask,
            .key_antiquant_scale = t.key_antiquant_scale, .key_antiquant_offset = t.key_antiquant_offset,
            .value_antiquant_scale = t.value_antiquant_scale, .value_antiquant_offset = t.value_antiquant_offset,
            .attention_out = &d.out};
        int used = -1;
        memset(d.out.data, 0, n);
        CHECK_MSG(loom_fused_infer_attention_score(&ft, &fp, pool, &used) == LOOM_OK, "%s", loom_last_error());
        CHECK(used == 0 && memcmp(first, d.out.data, n) == 0);
        free(first);
        if (i == 0) { /* errors: a missing scale, scales with a float cache, an i8 TND */
            loom_flash_attention_tensors e = t;
            e.key_antiquant_scale = NULL;
            CHECK(loom_flash_attention_score(&e, &p, NULL) == LOOM_ERR_INVALID_ARG);
            CHECK(strstr(loom_last_error(), "needs key_antiquant_scale") != NULL);
            e = t, e.key = e.value = &d.q;
            CHECK(loom_flash_attention_score(&e, &p, NULL) == LOOM_ERR_INVALID_ARG);
            CHECK(strstr(loom_last_error(), "only i8 caches are dequantized") != NULL);
            loom_flash_attention_params pt = p;
            pt.input_layout = LOOM_ATTN_TND; /* the same memory as [T, N, D] (BSND case) */
            loom_tensor q3 = d.q, k3 = d.k, v3 = d.v, o3 = d.out;
            loom_tensor_init(&q3, d.q.dtype, 3, (const int64_t[3]){c.B * c.Sq, c.N, c.D}, d.q.data);
            loom_tensor_init(&o3, d.out.dtype, 3, (const int64_t[3]){c.B * c.Sq, c.N, c.D}, d.out.data);
            loom_tensor_init(&k3, LOOM_I8, 3, (const int64_t[3]){c.B * c.Smax, c.Nkv, c.D}, d.k.data);
            loom_tensor_init(&v3, LOOM_I8, 3, (const int64_t[3]){c.B * c.Smax, c.Nkv, c.D}, d.v.data);
            e = (loom_flash_attention_tensors){.query = &q3, .key = &k3, .value = &v3, .attention_out = &o3,
                                               .key_antiquant_scale = t.key_antiquant_scale,
                                               .value_antiquant_scale = t.value_antiquant_scale};
            CHECK(loom_flash_attention_score(&e, &pt, NULL) == LOOM_ERR_DTYPE);
            CHECK(strstr(loom_last_error(), "not TND") != NULL);
        }
        inc_teardown(&d);
    }
    loom_pool_free(pool);
}

#define CHECK_ERR(expr, what)                                                            \
    do {                                                                                 \
        loom_clear_error();                                                              \
        loom_status s_ = (expr);                                                         \
        CHECK_MSG(s_ != LOOM_OK && strstr(loom_last_error(), what), "%s: \"%s\" lacks %s", \
                  #expr, loom_last_error(), what);                                       \
    } while (0)

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
    *phases = loom_op_phases(info, src, 3, attrs, nth);
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
    loom_attention_attrs prim = {0.0f, 1, (int)(c.Smax - c.Sq)};
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
    loom_attention_attrs pb = {0.0f, 0, 0};
    CHECK(loom_op_run(LOOM_OP_ATTENTION, sb, 3, &pb, &d.rout, LOOM_ISA_REF) == LOOM_OK);
    size_t ob0 = (size_t)tensor_count(&d.out) * sizeof(float);
    float *hp = malloc(ob0);
    for (int ip = 1; ip >= 0; ip--) {
        at = (loom_incre_flash_attention_attrs)LOOM_INCRE_FLASH_ATTENTION_ATTRS_DEFAULT;
        at.inner_precise = ip;
        CHECK(loom_op_run(LOOM_OP_INCRE_FLASH_ATTENTION, sb, 3, &at, &d.out, loom_cpu_best_isa()) == LOOM_OK);
        CHECK(tensors_close(&d.out, &d.rout, ip ? 2.0 / 128 : 1.0 / 128, "inner_precise"));
        if (ip) memcpy(hp, d.out.data, ob0);
        else if (loom_cpu_get()->avx512_bf16) CHECK(memcmp(hp, d.out.data, ob0) != 0);
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
        for (int nth = 2; nth <= 3; nth++) CHECK(loom_op_phases(info, s3, 3, &at, nth) == 1);
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
    RUN_TEST(test_random_decode);
    RUN_TEST(test_lengths_and_pool);
    RUN_TEST(test_peaked_scores);
    RUN_TEST(test_rising_scores);
    RUN_TEST(test_masked_row_starts);
    RUN_TEST(test_nonfinite_probs);
    RUN_TEST(test_nonfinite_q);
    RUN_TEST(test_inner_precise);
    RUN_TEST(test_head_groups);
    RUN_TEST(test_fused_infer_dispatch);
    RUN_TEST(test_prefill_i8_cache);
    RUN_TEST(test_decode_errors);
    RUN_TEST(test_incre_op_table);
    return TEST_SUMMARY();
}
