/* The decode tests' case (inc_case): a query, a contiguous KV cache of any
 * dtype (i8 with per-channel or per-token antiquant, offsets optional), its
 * paged copy with a shuffled block table, masks, lengths and outputs with
 * guard bytes (inc_setup / inc_teardown). Used by test_incre_attention.c and
 * test_attention_dispatch.c. */
#ifndef LOOM_TEST_INCRE_ATTENTION_CASE_H
#define LOOM_TEST_INCRE_ATTENTION_CASE_H

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
    float softcap;                    /* > 0: score soft-capping */
} inc_case;

typedef struct inc_data {
    loom_tensor q, k, v, pk, pv, bt, mask, out, rout, pout, lse, rlse;
    loom_tensor ks, ko, vs, vo, pks, pko, pvs, pvo; /* antiquant, contiguous and paged */
    gbuf g[5];
    int64_t kvlen[4];
    loom_incre_flash_attention_tensors t, tr, tp;
    loom_incre_flash_attention_params p, pp;
} inc_data;

static inline void inc_describe(const inc_case *c) {
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
static inline int64_t cache_off(const loom_tensor *t, loom_attn_layout L, int64_t D, int64_t b, int64_t s,
                         int64_t n) {
    if (L == LOOM_ATTN_BNSD) return b * t->stride[0] + n * t->stride[1] + s * t->stride[2];
    if (L == LOOM_ATTN_BSH) return b * t->stride[0] + s * t->stride[1] + n * D * t->stride[2];
    return b * t->stride[0] + s * t->stride[1] + n * t->stride[2];
}

static inline void quant_tensors(const inc_case *c, int mode, int off, loom_tensor *s, loom_tensor *o,
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

static inline void inc_setup(const inc_case *c, inc_data *d, loom_rng *r) {
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
    p->softcap = c->softcap;
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

static inline void inc_teardown(inc_data *d) {
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

static inline int64_t irand(loom_rng *r, int64_t lo, int64_t hi) {
    return lo + (int64_t)(loom_rng_uniform(r) * (float)(hi - lo + 1)) % (hi - lo + 1);
}

static inline inc_case base_case(void) {
    inc_case c;
    memset(&c, 0, sizeof c);
    c.L = LOOM_ATTN_BSND, c.B = 2, c.Sq = 1, c.Smax = 50, c.N = 8, c.Nkv = 2, c.D = 64;
    c.qdt = c.kvdt = c.odt = LOOM_F32;
    c.pre = c.next = LOOM_ATTN_TOKENS_ALL;
    c.bs = 16, c.lse = 1;
    return c;
}

#endif
