/* The prefill test case: a random problem description, its tensors, the
 * reference run and the comparison of every level and thread count. Shared by
 * test_flash_attention.c and test_flash_attention_edges.c. */
#ifndef LOOM_TEST_FLASH_ATTENTION_CASE_H
#define LOOM_TEST_FLASH_ATTENTION_CASE_H

#include "test_attention_common.h"

typedef struct fa_case {
    loom_attn_layout L;
    int64_t B, Sq, Skv, N, Nkv, D;
    loom_dtype qdt, kvdt, odt;
    int sparse;
    int64_t pre, next;
    int mask_kind;            /* 0 none, 1 bool (i8), 2 additive (f32) */
    int mask4, mask_bb, mask_bn; /* 4-D mask, broadcast over batch / heads */
    float keep;
    uint64_t seed;
    int lens;                 /* padded layouts: per-batch lengths */
    int64_t nseq, qlen[6], kvlen[6], qtail, kvtail; /* TND */
    int64_t bq, bkv;
    int lse;
    int64_t pad;              /* unused elements after each row of q/k/v */
    float qamp;
    int precise;              /* inner_precise */
    int bf16_values;          /* q, k, v hold values bf16 represents exactly */
    float softcap;            /* > 0: score soft-capping */
} fa_case;

typedef struct fa_data {
    loom_tensor q, k, v, mask, out, lse, rout, rlse;
    gbuf g[4];
    int64_t lq[6], lkv[6], cq[6], ckv[6];
    loom_flash_attention_tensors t, tr;
    loom_flash_attention_params p;
} fa_data;

static inline void fa_describe(const fa_case *c) {
    fprintf(stderr, "  case: %s B=%lld Sq=%lld Skv=%lld N=%lld Nkv=%lld D=%lld dt=%s/%s/%s mode=%d "
            "pre=%lld next=%lld mask=%d/%d keep=%g lens=%d nseq=%lld bq=%lld bkv=%lld pad=%lld\n",
            loom_attn_layout_name(c->L), (long long)c->B, (long long)c->Sq, (long long)c->Skv,
            (long long)c->N, (long long)c->Nkv, (long long)c->D, loom_dtype_name(c->qdt),
            loom_dtype_name(c->kvdt), loom_dtype_name(c->odt), c->sparse, (long long)c->pre,
            (long long)c->next, c->mask_kind, c->mask4, (double)c->keep, c->lens,
            (long long)c->nseq, (long long)c->bq, (long long)c->bkv, (long long)c->pad);
}

static inline void fa_setup(const fa_case *c, fa_data *d, loom_rng *rng) {
    memset(d, 0, sizeof *d);
    int64_t sh[4], Sq = c->Sq, Skv = c->Skv, mrows = c->Sq, mcols = c->Skv, mB = c->B;
    if (c->L == LOOM_ATTN_TND) {
        Sq = c->qtail, Skv = c->kvtail, mrows = mcols = 1, mB = c->nseq;
        for (int64_t b = 0; b < c->nseq; b++) {
            Sq += c->qlen[b], Skv += c->kvlen[b];
            d->cq[b] = (b ? d->cq[b - 1] : 0) + c->qlen[b];
            d->ckv[b] = (b ? d->ckv[b - 1] : 0) + c->kvlen[b];
            if (c->qlen[b] > mrows) mrows = c->qlen[b];
            if (c->kvlen[b] > mcols) mcols = c->kvlen[b];
        }
    }
    int nd = layout_shape(c->L, c->B, Sq, c->N, c->D, sh);
    tensor_new(&d->q, c->qdt, nd, sh, c->pad);
    tensor_fill(&d->q, rng, c->qamp);
    tensor_guarded(&d->out, &d->g[0], c->odt, nd, sh);
    tensor_guarded(&d->rout, &d->g[1], c->odt, nd, sh);
    layout_shape(c->L, c->B, Skv, c->Nkv, c->D, sh);
    tensor_new(&d->k, c->kvdt, nd, sh, c->pad);
    tensor_new(&d->v, c->kvdt, nd, sh, c->pad);
    tensor_fill(&d->k, rng, 1.0f);
    tensor_fill(&d->v, rng, 1.0f);
    if (c->bf16_values) {
        loom_tensor *in[3] = {&d->q, &d->k, &d->v};
        for (int w = 0; w < 3; w++)
            for (int64_t i = 0; i < tensor_span(in[w]); i++)
                tset(in[w], i, loom_bf16_to_f32(loom_f32_to_bf16(tget(in[w], i))));
    }
    if (c->mask_kind) {
        int64_t ms[4] = {c->mask_bb ? 1 : mB, c->mask_bn ? 1 : c->N, mrows, mcols};
        tensor_new(&d->mask, c->mask_kind == 1 ? LOOM_I8 : LOOM_F32, c->mask4 ? 4 : 2,
                   c->mask4 ? ms : ms + 2, 0);
        for (int64_t i = 0; i < tensor_span(&d->mask); i++) {
            float u = loom_rng_uniform(rng);
            if (c->mask_kind == 1) tset(&d->mask, i, u < 0.2f ? 1.0f : 0.0f);
            else tset(&d->mask, i, u < 0.15f ? -INFINITY : 4.0f * loom_rng_uniform(rng) - 2.0f);
        }
    }
    if (c->lse) {
        int64_t ls[3] = {c->B, c->N, Sq}, lt[2] = {Sq, c->N};
        int lnd = c->L == LOOM_ATTN_TND ? 2 : 3;
        tensor_guarded(&d->lse, &d->g[2], LOOM_F32, lnd, lnd == 2 ? lt : ls);
        tensor_guarded(&d->rlse, &d->g[3], LOOM_F32, lnd, lnd == 2 ? lt : ls);
    }
    loom_flash_attention_params *p = &d->p;
    *p = loom_flash_attention_default_params();
    p->input_layout = c->L;
    p->num_heads = c->L == LOOM_ATTN_BSH ? c->N : 0;
    p->num_key_value_heads = c->L == LOOM_ATTN_BSH ? c->Nkv : 0;
    p->sparse_mode = c->sparse, p->pre_tokens = c->pre, p->next_tokens = c->next;
    p->keep_prob = c->keep, p->seed = c->seed, p->offset = 7;
    p->block_q = c->bq, p->block_kv = c->bkv;
    p->inner_precise = c->precise;
    p->softcap = c->softcap;
    if (c->L == LOOM_ATTN_TND) {
        p->actual_seq_qlen = d->cq, p->actual_seq_kvlen = d->ckv, p->num_seqs = c->nseq;
    } else if (c->lens) {
        for (int64_t b = 0; b < c->B; b++) {
            d->lq[b] = (int64_t)(loom_rng_uniform(rng) * (float)(c->Sq + 1));
            d->lkv[b] = (int64_t)(loom_rng_uniform(rng) * (float)(c->Skv + 1));
        }
        p->actual_seq_lengths = d->lq, p->actual_seq_lengths_kv = d->lkv;
    }
    loom_tensor *m = c->mask_kind ? &d->mask : NULL;
    d->t = (loom_flash_attention_tensors){.query = &d->q, .key = &d->k, .value = &d->v, .atten_mask = m,
                                          .attention_out = &d->out, .softmax_lse = c->lse ? &d->lse : NULL};
    d->tr = d->t;
    d->tr.attention_out = &d->rout, d->tr.softmax_lse = c->lse ? &d->rlse : NULL;
}

static inline void fa_teardown(fa_data *d) {
    tensor_free(&d->q), tensor_free(&d->k), tensor_free(&d->v);
    if (d->mask.data) tensor_free(&d->mask);
    for (int i = 0; i < 4; i++)
        if (d->g[i].base) {
            CHECK_MSG(gbuf_intact(&d->g[i]), "guard bytes of output %d overwritten", i);
            gbuf_free(&d->g[i]);
        }
}

/* The thread-level entry at level isa, as nth threads (one after another). */
static inline loom_status fa_run(const loom_flash_attention_tensors *t,
                          const loom_flash_attention_params *p, loom_isa isa, int nth) {
    size_t bytes = 0;
    loom_status s = loom_flash_attention_score_scratch_size(t, p, &bytes);
    if (s != LOOM_OK) return s;
    loom_isa was = loom_cpu_isa();
    if (loom_cpu_set_isa(isa) != LOOM_OK) return LOOM_ERR_UNSUPPORTED;
    for (int ith = 0; ith < nth && s == LOOM_OK; ith++) {
        void *scratch = loom_alloc_aligned(bytes, LOOM_ALIGN);
        s = loom_flash_attention_score_thread(t, p, ith, nth, scratch, bytes);
        loom_free_aligned(scratch);
    }
    loom_cpu_set_isa(was);
    return s;
}

static inline size_t out_bytes(const loom_tensor *t) {
    return (size_t)tensor_count(t) * loom_dtype_size(t->dtype);
}

/* Runs set-up data at every level against the reference; nth 2 and 3 must
 * give the same bytes. */
static inline void fa_check_data(const fa_case *c, fa_data *dp, int threads) {
    fa_data d = *dp;
    loom_status s = fa_run(&d.tr, &d.p, LOOM_ISA_REF, 1);
    CHECK_MSG(s == LOOM_OK, "reference: %s", loom_last_error());
    double tol = case_tol(c->qdt, c->kvdt, c->odt);
    if (c->precise == LOOM_ATTN_HIGH_PERFORMANCE) /* bf16 products: bf16's tolerance, */
        tol = case_tol(LOOM_BF16, c->kvdt, c->odt) * (c->Skv >= 2048 ? 2.0 : 1.0) *
              (c->bf16_values ? 1.0 : 2.0); /* doubled when q, k, v get rounded too */
    loom_isa lv[LOOM_ISA_COUNT];
    int nl = test_levels(lv);
    for (int li = 0; li < nl && s == LOOM_OK; li++) {
        s = fa_run(&d.t, &d.p, lv[li], 1);
        CHECK_MSG(s == LOOM_OK, "%s: %s", loom_isa_name(lv[li]), loom_last_error());
        CHECK_MSG(tensors_close(&d.out, &d.rout, tol, "out"), "%s out", loom_isa_name(lv[li]));
        if (c->lse) CHECK_MSG(tensors_close(&d.lse, &d.rlse, tol, "lse"), "%s lse", loom_isa_name(lv[li]));
        if (!threads) continue;
        size_t ob = out_bytes(&d.out), lb = c->lse ? out_bytes(&d.lse) : 0;
        unsigned char *o1 = xmalloc(ob), *l1 = xmalloc(lb);
        memcpy(o1, d.out.data, ob);
        if (lb) memcpy(l1, d.lse.data, lb);
        for (int nth = 2; nth <= 3; nth++) {
            memset(d.out.data, 0x5A, ob);
            CHECK(fa_run(&d.t, &d.p, lv[li], nth) == LOOM_OK);
            CHECK_MSG(memcmp(o1, d.out.data, ob) == 0, "%s: nth=%d differs", loom_isa_name(lv[li]), nth);
            if (lb) CHECK(memcmp(l1, d.lse.data, lb) == 0);
        }
        free(o1), free(l1);
    }
}

/* A random case's data at every level against the reference (fa_check_data). */
static inline void fa_check_case(const fa_case *c, loom_rng *rng, int threads) {
    fa_data d;
    fa_setup(c, &d, rng);
    int before = check_failures_;
    fa_check_data(c, &d, threads);
    fa_teardown(&d);
    if (check_failures_ != before) fa_describe(c);
}

static const int64_t head_dims[] = {32, 48, 64, 80, 96, 128, 256, 40, 72, 33, 100, 17};
static const int64_t lens_pool[] = {1, 2, 3, 5, 7, 13, 16, 17, 31, 32, 33, 47, 61, 64, 67};

static inline int64_t pick(loom_rng *r, const int64_t *v, int n) {
    return v[(int)(loom_rng_uniform(r) * (float)n) % n];
}

static inline int64_t irand(loom_rng *r, int64_t lo, int64_t hi) { /* [lo, hi] */
    return lo + (int64_t)(loom_rng_uniform(r) * (float)(hi - lo + 1)) % (hi - lo + 1);
}

static inline fa_case random_case(loom_rng *r) {
    fa_case c;
    memset(&c, 0, sizeof c);
    c.L = (loom_attn_layout)irand(r, 0, 3);
    static const int64_t groups[] = {1, 2, 4, 8, 3};
    int64_t G = pick(r, groups, 5);
    c.Nkv = irand(r, 1, 2);
    if (loom_rng_uniform(r) < 0.15f) c.Nkv = 1, G = irand(r, 3, 9); /* MQA */
    c.N = G * c.Nkv;
    c.D = pick(r, head_dims, 12);
    c.B = irand(r, 1, 3);
    c.Sq = loom_rng_uniform(r) < 0.6f ? pick(r, lens_pool, 15) : irand(r, 1, 67);
    c.Skv = loom_rng_uniform(r) < 0.6f ? pick(r, lens_pool, 15) : irand(r, 1, 67);
    static const loom_dtype dts[] = {LOOM_F32, LOOM_F32, LOOM_F16, LOOM_BF16};
    c.qdt = c.kvdt = dts[irand(r, 0, 3)];
    if (loom_rng_uniform(r) < 0.2f) c.kvdt = dts[irand(r, 0, 3)];
    c.odt = loom_rng_uniform(r) < 0.7f ? LOOM_F32 : c.qdt;
    c.sparse = (int)irand(r, 0, 4);
    c.pre = c.next = LOOM_ATTN_TOKENS_ALL;
    if (c.sparse == 0 && loom_rng_uniform(r) < 0.5f) c.pre = irand(r, -2, 20), c.next = irand(r, -2, 12);
    if (c.sparse == 4) c.pre = irand(r, -3, 30), c.next = irand(r, -3, 10);
    c.mask_kind = c.sparse == 1 ? (int)irand(r, 1, 2) : (int)irand(r, 0, 2) * (loom_rng_uniform(r) < 0.6f);
    c.mask4 = loom_rng_uniform(r) < 0.5f;
    c.mask_bb = loom_rng_uniform(r) < 0.5f, c.mask_bn = loom_rng_uniform(r) < 0.5f;
    c.keep = loom_rng_uniform(r) < 0.15f ? 0.75f : 1.0f;
    c.seed = (uint64_t)irand(r, 1, 1000);
    c.lens = c.L != LOOM_ATTN_TND && loom_rng_uniform(r) < 0.3f;
    if (c.L == LOOM_ATTN_TND) {
        c.nseq = irand(r, 1, 5);
        static const int64_t tl[] = {0, 1, 2, 5, 9, 17, 23, 40};
        for (int64_t b = 0; b < c.nseq; b++) c.qlen[b] = pick(r, tl, 8), c.kvlen[b] = pick(r, tl, 8);
        c.qtail = irand(r, 0, 2), c.kvtail = irand(r, 0, 1);
        if (c.qtail == 0 && c.qlen[0] == 0) c.qtail = 1; /* T >= 1 */
        if (c.kvtail == 0 && c.kvlen[0] == 0) c.kvtail = 1;
    }
    static const int64_t blocks[] = {0, 0, 0, 1, 3, 7, 16, 33, 64};
    c.bq = pick(r, blocks, 9), c.bkv = pick(r, blocks, 9);
    c.lse = loom_rng_uniform(r) < 0.5f;
    c.pad = loom_rng_uniform(r) < 0.2f ? irand(r, 1, 5) : 0;
    c.qamp = loom_rng_uniform(r) < 0.5f ? 1.0f : 4.0f;
    /* a quarter of the cases soft-cap their scores (from the seed: the stream of draws stays as it was) */
    c.softcap = c.seed % 4 == 0 ? 0.5f + 0.7f * (float)(c.seed % 7) : 0.0f;
    return c;
}

#endif
