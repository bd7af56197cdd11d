/*
 * Prefill FlashAttention: the driver around the per-ISA micro-kernels.
 *
 * Work item = (batch entry, kv head, sub-group of its query heads, block of
 * query positions). Its rows (every head of the sub-group x every position of
 * the block) share each K/V tile, which is therefore loaded once per head
 * group. Rows live in vector lanes: Q^T [D][mp] is packed once per item
 * (pre-scaled by scale*log2 e), then per KV tile of bc keys
 *   S^T = K . Q^T  -> masks -> online softmax (running max m, sum l, f32)
 *   -> dropout -> O^T = alpha * O^T + V^T . P^T
 * and the S_q x S_kv score matrix never exists beyond one bc x mp tile. Tiles
 * that no row can see are skipped before any arithmetic. Each item is computed
 * the same way whichever thread runs it, so results do not depend on nth.
 */
#include "fused/flash_attention_internal.h"

#include "base/alloc.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "fused/ref/attention_ref.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

typedef struct fa_plan {
    const attn_problem *pr;
    const loom_attn_kernels *kern;
    int64_t br, gs, nhs, bc, mp_max; /* query positions, heads per item, sub-groups, keys per tile */
    int use_bf16, use_bf16_pv, direct_k, direct_v;
    int q8;                          /* inner_precise 1, i8 K and V with per-token scales: bf16 products
                                        of the exact integers, each key's scale on its score / P column */
    int q16, k16, v16;               /* bf16 products read bf16 q / K / V as they are (else round) */
    int pgather;                     /* a paged cache whose blocks are not whole tiles: f32 and bf16
                                        K/V rows gathered once per thread and kv head into the caches */
    int krows, vrows;                /* ... except f32 K / V rows with f32 products where the kernel
                                        reads rows by pointer (bgemm_rows): in place, nothing gathered */
    int64_t vpk_pairs;               /* bf16 products: pairs the packed-V cache holds (0: none) */
    int64_t kpk_rows;                /* rounded K: rows the bf16 K cache holds (0: none) */
    int64_t kf_rows, vf_rows;        /* f16 K / V: rows the widened (f32) caches hold (0: none) */
    float qscale;                    /* scale * log2(e): scores in the log2 domain */
} fa_plan;

typedef struct fa_item { int64_t b, hkv, hs, qb; } fa_item;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

#define FA_MAX_ROWS 256 /* keys of a tile whose rows go by pointer (fa_plan.krows) */

static void fa_plan_init(fa_plan *pl, const attn_problem *pr, const loom_attn_kernels *kern) {
    memset(pl, 0, sizeof *pl);
    pl->pr = pr, pl->kern = kern;
    /* tile sizes depend on shapes only (never on nth); ~64 rows keep Q^T and
     * O^T of an item in L1/L2, 64 keys keep the K and V tiles in L1 */
    pl->bc = pr->block_kv ? pr->block_kv : (pr->D <= 128 ? 64 : 32);
    pl->br = pr->block_q ? pr->block_q : (pr->G >= 64 ? 1 : 64 / pr->G);
    int64_t mmax = pl->br > 256 ? pl->br : 256;
    pl->gs = min64(pr->G, mmax / pl->br > 1 ? mmax / pl->br : 1);
    pl->nhs = (pr->G + pl->gs - 1) / pl->gs;
    pl->mp_max = attn_round_up(pl->gs * pl->br, ATTN_ROW_PAD);
    pl->qscale = (float)(pr->scale * ATTN_LOG2E);
    /* bf16 products: for bf16 inputs, or for f32/f16 ones with inner_precise 1
     * (rounded to bf16 on the way in: q per row, K and V once per thread and
     * kv head into the caches below) */
    int hp = pr->inner_precise == LOOM_ATTN_HIGH_PERFORMANCE && pr->q.sd == 1 && pr->k.sd == 1 &&
             pr->v.sd == 1 && pr->k.dtype != LOOM_I8;
    /* an i8 K and V with per-token scales and no offsets take the bf16 products too: their
     * integers are exact in bf16, and a key's scale multiplies its column of scores (K) or of P
     * (V); other i8 caches are dequantized to f32 (below) */
    int q8c = pr->inner_precise == LOOM_ATTN_HIGH_PERFORMANCE && pr->q.sd == 1 && pr->k.sd == 1 &&
              pr->v.sd == 1 && pr->kq.mode == LOOM_ANTIQUANT_PER_TOKEN && !pr->kq.offset &&
              pr->vq.mode == LOOM_ANTIQUANT_PER_TOKEN && !pr->vq.offset && pr->D % 2 == 0;
    pl->q8 = q8c && kern && kern->to_bf16 && kern->qk_bf16 && kern->pv_bf16;
    hp |= pl->q8;
    pl->q16 = pr->q.dtype == LOOM_BF16;
    pl->k16 = pr->k.dtype == LOOM_BF16 && pr->k.sd == 1;
    pl->v16 = pr->v.dtype == LOOM_BF16 && pr->v.sd == 1;
    pl->use_bf16 = kern && kern->qk_bf16 && pr->D % 2 == 0 &&
                   ((pl->q16 && pl->k16) || (hp && kern->to_bf16));
    pl->use_bf16_pv = kern && kern->pv_bf16 && (pl->v16 || (hp && kern->to_bf16));
    pl->direct_k = pr->k.dtype == LOOM_F32 && pr->k.sd == 1;
    pl->direct_v = pr->v.dtype == LOOM_F32 && pr->v.sd == 1;
    /* sized from the problem alone (never the kernel level): the keys of one
     * sequence (kv_cache: S_kv, or the longest sequence), ceil(/ 2) key pairs */
    pl->vpk_pairs = pl->v16 || hp || q8c ? (pr->kv_cache + 1) / 2 : 0;
    /* a paged cache with blocks of whole tiles is read in place (tiles across a block boundary,
     * from a band's odd start, are gathered into the tile buffers); with smaller blocks nearly
     * every tile would be, once per item: its rows are gathered once per thread and kv head
     * instead, into the caches that widen or round them */
    pl->pgather = pr->paged && pr->block_size % pl->bc != 0;
    /* (decided at run time: scratch sizes below never depend on the kernel) */
    pl->krows = pl->pgather && kern && kern->bgemm_rows && pl->bc <= FA_MAX_ROWS && pr->k.dtype == LOOM_F32 &&
                pr->k.sd == 1 && pr->kq.mode < 0;
    pl->vrows = pl->pgather && kern && kern->bgemm_rows && pl->bc <= FA_MAX_ROWS && pr->v.dtype == LOOM_F32 &&
                pr->v.sd == 1 && pr->vq.mode < 0;
    pl->kpk_rows = ((hp || q8c) && !pl->k16) || (pl->pgather && pl->k16) ? pr->kv_cache : 0;
    /* f16 K and V for f32 products: widened once per thread and kv head (a
     * call per row and tile cost ~6 % each at D = 64); a bf16 K too when q is
     * not bf16 (f32 products at inner_precise 0: a bf16 KV cache under f32
     * activations). Decided from the problem alone, as the sizes must be. */
    int k_wide = pr->k.dtype == LOOM_F16 || (pr->k.dtype == LOOM_BF16 && pr->q.dtype != LOOM_BF16 && !hp);
    /* (an i8 cache's f32 rows are sized even where q8 takes the bf16 path: sizes never depend on
     * the kernel level) */
    int k32 = pl->pgather && pr->k.dtype == LOOM_F32 && !hp, v32 = pl->pgather && pr->v.dtype == LOOM_F32 && !hp;
    pl->kf_rows = (k_wide && pr->k.sd == 1) || pr->kq.mode >= 0 || k32 ? pr->kv_cache : 0;
    pl->vf_rows = (pr->v.dtype == LOOM_F16 && pr->v.sd == 1) || pr->vq.mode >= 0 || v32 ? pr->kv_cache : 0;
}

/* Scratch regions, in floats, each rounded to 16 floats (64 bytes). */
typedef struct fa_scratch {
    float *qt, *ot, *s, *a, *kbuf, *vbuf, *m, *l, *alpha, *row;
    int64_t *lo, *hi;      /* visible keys of each valid row */
    int32_t *llo, *lhi;    /* the same per lane (padding lanes see everything) */
    uint32_t *vpk;         /* bf16 V of one (batch, kv head) packed as key pairs [pairs][D] */
    uint16_t *kpk;         /* K of one (batch, kv head) rounded to bf16 [S_kv][D] (inner_precise 1) */
    float *kf, *vf;        /* f16 (K: or bf16) K / V of one (batch, kv head) widened to f32 [S_kv][D] */
    float **rp;            /* a row pointer per lane (the kernels' pack_t / unpack_t) */
} fa_scratch;

/* The thread's per-(batch, kv head) caches: which (batch, kv head) they hold
 * and how many keys of it (from the sequence start) each holds: the packed-V
 * cache (vhi, even), the rounded K of inner_precise 1 (khi), the widened f16
 * or bf16 K (wk) and f16 V (wv). A thread's items of one kv head are
 * consecutive and their key ranges grow (causal), so each row is converted
 * once per thread instead of once per item; a new (batch, kv head) empties
 * them all (fa_caches_for). The values are those the tile paths would compute
 * themselves, so results do not depend on the caches. */
typedef struct fa_vcache { int64_t b, hkv, vhi, khi, wk, wv; } fa_vcache;

static void fa_caches_for(fa_vcache *vc, const fa_item *it) {
    if (vc->b != it->b || vc->hkv != it->hkv) *vc = (fa_vcache){it->b, it->hkv, 0, 0, 0, 0};
}

_Static_assert(sizeof(float *) <= 2 * sizeof(float), "fa_layout sizes a row pointer as two floats");

static size_t fa_layout(const fa_plan *pl, void *base, fa_scratch *sc) {
    int64_t D = pl->pr->D, mp = pl->mp_max, bc = pl->bc;
    int64_t sizes[19] = {D * mp, D * mp, bc * mp, bc * mp, bc * D, bc * D, mp, mp, mp,
                         LOOM_ATTN_MAX_HEAD_DIM, 2 * pl->br, 2 * pl->br, mp, mp, pl->vpk_pairs * D,
                         (pl->kpk_rows * D + 1) / 2, pl->kf_rows * D, pl->vf_rows * D,
                         mp * 2}; /* a pointer per lane, at most two floats' bytes (below) */
    float **f[10] = {&sc->qt, &sc->ot, &sc->s, &sc->a, &sc->kbuf, &sc->vbuf, &sc->m, &sc->l,
                     &sc->alpha, &sc->row};
    size_t off = 0;
    for (int i = 0; i < 19; i++) {
        char *p = base ? (char *)base + off * sizeof(float) : NULL;
        if (i < 10) *f[i] = (float *)p;
        else if (i == 10) sc->lo = (int64_t *)p;
        else if (i == 11) sc->hi = (int64_t *)p;
        else if (i == 12) sc->llo = (int32_t *)p;
        else if (i == 13) sc->lhi = (int32_t *)p;
        else if (i == 14) sc->vpk = sizes[i] ? (uint32_t *)p : NULL;
        else if (i == 15) sc->kpk = sizes[i] ? (uint16_t *)p : NULL;
        else if (i == 16) sc->kf = sizes[i] ? (float *)p : NULL;
        else if (i == 17) sc->vf = sizes[i] ? (float *)p : NULL;
        else sc->rp = (float **)p;
        off += (size_t)attn_round_up(sizes[i], 16);
    }
    return off * sizeof(float);
}

int64_t attn_prefill_block_q(const attn_problem *pr) {
    fa_plan pl;
    fa_plan_init(&pl, pr, NULL);
    return pl.br;
}

size_t attn_prefill_scratch(const attn_problem *pr) {
    fa_plan pl;
    fa_scratch sc;
    fa_plan_init(&pl, pr, NULL);
    return fa_layout(&pl, NULL, &sc);
}

/* ------------------------------------------------------------ items */

static int64_t fa_qblocks(const fa_plan *pl, int64_t b) {
    attn_seq s;
    attn_get_seq(pl->pr, b, &s);
    return (s.q_rows + pl->br - 1) / pl->br;
}

static int64_t fa_count(const fa_plan *pl) {
    const attn_problem *pr = pl->pr;
    int64_t per_b = pr->Nkv * pl->nhs;
    if (!pr->tnd) return pr->B * per_b * fa_qblocks(pl, 0);
    int64_t n = 0;
    for (int64_t b = 0; b < pr->B; b++) n += per_b * fa_qblocks(pl, b);
    return n;
}

static void fa_item_at(const fa_plan *pl, int64_t idx, fa_item *it) {
    const attn_problem *pr = pl->pr;
    int64_t b = 0, nqb = fa_qblocks(pl, 0);
    if (!pr->tnd) {
        b = idx / (pr->Nkv * pl->nhs * nqb);
        idx -= b * pr->Nkv * pl->nhs * nqb;
    } else {
        while (idx >= pr->Nkv * pl->nhs * nqb) {
            idx -= pr->Nkv * pl->nhs * nqb;
            nqb = fa_qblocks(pl, ++b);
        }
    }
    it->b = b, it->qb = idx % nqb, idx /= nqb;
    it->hs = idx % pl->nhs, it->hkv = idx / pl->nhs;
}

/* Valid rows [i0, i0 + nval) of the item, and the key range any of them sees. */
static void fa_rows(const fa_plan *pl, const fa_item *it, const attn_seq *s, int64_t *i0,
                    int64_t *nrow, int64_t *nval, int64_t *jlo, int64_t *jhi) {
    *i0 = it->qb * pl->br;
    *nrow = min64(pl->br, s->q_rows - *i0);
    int64_t v = min64(*i0 + *nrow, s->q_len) - *i0;
    *nval = v < 0 ? 0 : v;
    *jlo = *jhi = 0;
    if (*nval == 0) return;
    int64_t lo, hi, lo2, hi2; /* visibility is monotonic in i: the ends bound the union */
    attn_visible(pl->pr, *i0, s->q_len, s->kv_len, &lo, &hi);
    attn_visible(pl->pr, *i0 + *nval - 1, s->q_len, s->kv_len, &lo2, &hi2);
    *jlo = lo, *jhi = hi2 > lo ? hi2 : lo;
}

static double fa_cost(const void *ctx, int64_t idx) {
    const fa_plan *pl = ctx;
    fa_item it;
    attn_seq s;
    int64_t i0, nrow, nval, jlo, jhi;
    fa_item_at(pl, idx, &it);
    attn_get_seq(pl->pr, it.b, &s);
    fa_rows(pl, &it, &s, &i0, &nrow, &nval, &jlo, &jhi);
    return (double)nrow * (double)pl->gs * (double)(jhi - jlo + 1);
}

/* ------------------------------------------------------------ one item */

static const char *elem(const attn_view *v, int64_t off) { return v->data + off * v->esize; }

/* Row j (counted from the sequence's first key) of the item's kv head in K or V (t), contiguous
 * or paged. */
static const char *fa_kv_row(const attn_problem *pr, const attn_view *t, const fa_item *it, const attn_seq *s,
                             int64_t j) {
    return elem(t, attn_kv_offset(pr, t, it->b, s->kv_start + j, it->hkv));
}

/* Rows [j0, j0 + nc) of the item's kv head in K or V, read in place *ld elements apart; NULL
 * where they are not one stride apart (a paged tile across a block boundary: the caller gathers
 * them row by row). */
static const char *fa_kv_tile(const attn_problem *pr, const attn_view *t, const fa_item *it, const attn_seq *s,
                              int64_t j0, int64_t nc, int64_t *ld) {
    int64_t p0 = s->kv_start + j0;
    *ld = t->ss;
    if (pr->paged && p0 / pr->block_size != (p0 + nc - 1) / pr->block_size) return NULL;
    return fa_kv_row(pr, t, it, s, j0);
}

/* Per-token antiquant parameter (scale or offset x, strides x0..x2) of position pos of batch b,
 * kv head h: the cache entry's (the block's when paged). */
static float fa_token_param(const attn_problem *pr, const float *x, int64_t x0, int64_t x1, int64_t x2,
                            int64_t b, int64_t pos, int64_t h) {
    int64_t cb, cs;
    attn_kv_slot(pr, b, pos, &cb, &cs);
    return x[cb * x0 + h * x1 + cs * x2];
}

/* Additive tile a[c][r] (log2 domain) of the structural and explicit masks;
 * returns 0 when no valid row sees any key of the tile. */
static int fa_mask_tile(const fa_plan *pl, const fa_item *it, int64_t i0, int64_t nrow,
                        int64_t nval, int64_t ng, int64_t h0, int64_t j0, int nc, int mp,
                        const fa_scratch *sc) {
    const attn_problem *pr = pl->pr;
    int any = 0;
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < mp; r++) sc->a[c * mp + r] = 0.0f;
    for (int64_t g = 0; g < ng; g++)
        for (int64_t ii = 0; ii < nval; ii++) {
            int64_t r = g * nrow + ii;
            for (int c = 0; c < nc; c++) {
                int64_t j = j0 + c;
                float add = 0.0f;
                int masked = j < sc->lo[ii] || j >= sc->hi[ii];
                if (!masked && pr->mask)
                    masked = attn_mask_at(pr, it->b, h0 + g, i0 + ii, j, &add);
                sc->a[c * mp + r] = masked ? -INFINITY : add * (float)ATTN_LOG2E;
                any |= !masked;
            }
        }
    return any;
}

/* Row x of n elements of dtype dt rounded to bf16 (the level's conversion); an i8 row's integers
 * exactly (its scales apply to score and P columns, pl->q8). */
static void fa_to_bf16(const fa_plan *pl, uint16_t *dst, const void *x, loom_dtype dt, int64_t n) {
    if (dt == LOOM_BF16) { /* bf16 rows copied as they are (a paged cache's, pl->pgather) */
        memcpy(dst, x, (size_t)n * sizeof(uint16_t));
        return;
    }
    if (dt != LOOM_I8) {
        pl->kern->to_bf16(dst, x, dt, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) /* |q| <= 128: 8 significant bits, exact in bf16 */
        dst[i] = loom_f32_to_bf16((float)((const int8_t *)x)[i]);
}

/* Multiplies column c (keys j0 + c, nc of them) of the mp rows in s (column-major, mp apart)
 * by key j0 + c's per-token scale of q (pl->q8). */
static void fa_scale_cols(const attn_problem *pr, const attn_quant *q, const fa_item *it, const attn_seq *s,
                          int64_t j0, int nc, float *sc, int mp) {
    for (int c = 0; c < nc; c++) {
        float f = fa_token_param(pr, q->scale, q->s0, q->s1, q->s2, it->b, s->kv_start + j0 + c, it->hkv);
        for (int r = 0; r < mp; r++) sc[c * mp + r] *= f;
    }
}

/* Packs keys [vc->vhi, hi) of the item's V (hi even, <= the sequence's KV length) into the cache. */
static void fa_vcache_fill(const fa_plan *pl, const fa_item *it, const attn_seq *s, fa_vcache *vc,
                           const fa_scratch *sc, int64_t hi) {
    const attn_problem *pr = pl->pr;
    int64_t D = pr->D;
    uint16_t *r16 = (uint16_t *)sc->row; /* two rounded rows (2 * D <= 2 * 256 u16) */
    for (int64_t j = vc->vhi; j < hi; j += 2) {
        const char *x0 = fa_kv_row(pr, &pr->v, it, s, j), *x1 = fa_kv_row(pr, &pr->v, it, s, j + 1);
        const uint16_t *v0 = r16, *v1 = r16 + D;
        if (pl->v16) {
            v0 = (const uint16_t *)x0, v1 = (const uint16_t *)x1;
        } else { /* inner_precise 1: f32/f16 V rounded to bf16 (i8: its integers) */
            fa_to_bf16(pl, r16, x0, pr->v.dtype, D);
            fa_to_bf16(pl, r16 + D, x1, pr->v.dtype, D);
        }
        uint32_t *dst = sc->vpk + (j / 2) * D;
        for (int64_t x = 0; x < D; x++) dst[x] = (uint32_t)v0[x] | (uint32_t)v1[x] << 16;
    }
    if (hi > vc->vhi) vc->vhi = hi;
}

/* Rows [j0, j0 + n) of the item's kv head in K or V (t, contiguous rows) as bf16 (fa_to_bf16:
 * rounded, i8 integers exactly, bf16 copied) into dst, n rows of D. */
static void fa_rows_bf16(uint16_t *dst, const fa_plan *pl, const attn_view *t, const fa_item *it,
                         const attn_seq *s, int64_t j0, int64_t n) {
    for (int64_t j = j0; j < j0 + n; j++, dst += pl->pr->D)
        fa_to_bf16(pl, dst, fa_kv_row(pl->pr, t, it, s, j), t->dtype, pl->pr->D);
}

/* Rounds keys [vc->khi, hi) of the item's K to bf16 into the K cache
 * (inner_precise 1 with an f32/f16 K; a paged bf16 K, copied): once per thread and kv head, like V. */
static void fa_kcache_fill(const fa_plan *pl, const fa_item *it, const attn_seq *s, fa_vcache *vc,
                           const fa_scratch *sc, int64_t hi) {
    if (hi <= vc->khi) return;
    fa_rows_bf16(sc->kpk + vc->khi * pl->pr->D, pl, &pl->pr->k, it, s, vc->khi, hi - vc->khi);
    vc->khi = hi;
}

/* Row j of the item's kv head in an i8 K or V, dequantized: (q + offset) * scale
 * (per token: one scale and offset for the row; per channel: one per d). */
static void fa_dequant_row(float *dst, const attn_problem *pr, const attn_view *t, const attn_quant *aq,
                           const fa_item *it, const attn_seq *s, int64_t j) {
    const int8_t *x = (const int8_t *)fa_kv_row(pr, t, it, s, j);
    int64_t D = pr->D, h = it->hkv, pos = s->kv_start + j;
    if (aq->mode == LOOM_ANTIQUANT_PER_TOKEN) {
        float sc = fa_token_param(pr, aq->scale, aq->s0, aq->s1, aq->s2, it->b, pos, h);
        float of = aq->offset ? fa_token_param(pr, aq->offset, aq->o0, aq->o1, aq->o2, it->b, pos, h) : 0.0f;
        if (t->sd == 1) /* contiguous rows (caches): a loop the compiler vectorizes */
            for (int64_t d = 0; d < D; d++) dst[d] = ((float)x[d] + of) * sc;
        else
            for (int64_t d = 0; d < D; d++) dst[d] = ((float)x[d * t->sd] + of) * sc;
        return;
    }
    const float *sc = aq->scale + h * aq->s0, *of = aq->offset ? aq->offset + h * aq->o0 : NULL;
    for (int64_t d = 0; d < D; d++) dst[d] = ((float)x[d * t->sd] + (of ? of[d * aq->o1] : 0.0f)) * sc[d * aq->s1];
}

/* Rows [j0, j0 + n) of the item's kv head in K or V (t; aq its antiquant, mode < 0: none) as f32
 * into dst, n rows of D: dequantized, widened or copied, through the block table when paged. */
static void fa_rows_f32(float *dst, const fa_plan *pl, const attn_view *t, const attn_quant *aq,
                        const fa_item *it, const attn_seq *s, int64_t j0, int64_t n) {
    const attn_problem *pr = pl->pr;
    for (int64_t j = j0; j < j0 + n; j++, dst += pr->D) {
        if (aq->mode >= 0) {
            fa_dequant_row(dst, pr, t, aq, it, s, j);
            continue;
        }
        const char *src = fa_kv_row(pr, t, it, s, j);
        if (t->sd == 1) pl->kern->to_f32(dst, src, t->dtype, pr->D);
        else attn_load_row(dst, src, t->dtype, t->sd, pr->D);
    }
}

/* Widens rows [have, hi) of the item's K (v = 0) or V (v = 1) into the thread's f32 cache
 * (f16, bf16 and i8 rows; f32 rows of a paged cache, pl->pgather); returns the cache. */
static const float *fa_wide_fill(const fa_plan *pl, const fa_item *it, const attn_seq *s, fa_vcache *vc,
                                 const fa_scratch *sc, int v, int64_t hi) {
    const attn_problem *pr = pl->pr;
    float *dst = v ? sc->vf : sc->kf;
    int64_t *have = v ? &vc->wv : &vc->wk;
    if (hi > *have) {
        fa_rows_f32(dst + *have * pr->D, pl, v ? &pr->v : &pr->k, v ? &pr->vq : &pr->kq, it, s, *have, hi - *have);
        *have = hi;
    }
    return dst;
}

/* A tile's product over a paged f32 K (v 0: S = Q K^T) or V (v 1: O^T += V^T P^T)
 * read in place, a row pointer per key (pl->krows, pl->vrows). Out of line: the
 * tile loop of fa_item_run stays as it is for every other cache. */
static __attribute__((noinline)) void fa_rows_product(const fa_plan *pl, const fa_item *it, const attn_seq *s,
                                                      int v, int64_t j0, int nc, int mp, const fa_scratch *sc) {
    const attn_problem *pr = pl->pr;
    const float *rows[FA_MAX_ROWS];
    for (int c = 0; c < nc; c++) rows[c] = (const float *)fa_kv_row(pr, v ? &pr->v : &pr->k, it, s, j0 + c);
    if (v) pl->kern->bgemm_rows(sc->ot, mp, rows, 1, sc->s, mp, (int)pr->D, nc, mp, sc->alpha);
    else pl->kern->bgemm_rows(sc->s, mp, rows, 0, sc->qt, mp, nc, (int)pr->D, mp, NULL);
}

/* Q^T of an item, scaled, where the kernel's pack_t does not apply (bf16 pairs for bf16
 * products; rows converted from other dtypes or strides); qt is zero on entry. */
static void fa_pack_q(const fa_plan *pl, const fa_item *it, const attn_seq *s, int64_t i0, int64_t nrow,
                      int64_t nval, int64_t ng, int64_t h0, int mp, const fa_scratch *sc) {
    const attn_problem *pr = pl->pr;
    const loom_attn_kernels *kn = pl->kern;
    const int64_t D = pr->D;
    uint32_t *qt2 = (uint32_t *)sc->qt;
    for (int64_t g = 0; g < ng; g++)
        for (int64_t ii = 0; ii < nval; ii++) {
            int64_t r = g * nrow + ii;
            const char *qp = elem(&pr->q, it->b * pr->q.sb + (s->q_start + i0 + ii) * pr->q.ss +
                                              (h0 + g) * pr->q.sn);
            if (pl->use_bf16) {
                const uint16_t *q16 = (const uint16_t *)qp;
                int64_t qsd = pr->q.sd;
                if (!pl->q16) { /* inner_precise 1: the row rounded to bf16 */
                    kn->to_bf16((uint16_t *)sc->row, qp, pr->q.dtype, D);
                    q16 = (const uint16_t *)sc->row, qsd = 1;
                }
                for (int64_t p = 0; p < D / 2; p++)
                    qt2[p * mp + r] = (uint32_t)q16[2 * p * qsd] | (uint32_t)q16[(2 * p + 1) * qsd] << 16;
                continue;
            }
            const float *qf = (const float *)qp; /* f32 rows are read in place */
            if (pr->q.dtype != LOOM_F32 || pr->q.sd != 1) {
                if (pr->q.sd == 1) kn->to_f32(sc->row, qp, pr->q.dtype, D);
                else attn_load_row(sc->row, qp, pr->q.dtype, pr->q.sd, D);
                qf = sc->row;
            }
            for (int64_t d = 0; d < D; d++) sc->qt[d * mp + r] = qf[d] * pl->qscale;
        }
}

static void fa_item_run(const fa_plan *pl, const fa_item *it, const fa_scratch *sc,
                        fa_vcache *vc) {
    const attn_problem *pr = pl->pr;
    const loom_attn_kernels *kn = pl->kern;
    attn_seq s;
    int64_t i0, nrow, nval, jlo, jhi, D = pr->D;
    attn_get_seq(pr, it->b, &s);
    fa_rows(pl, it, &s, &i0, &nrow, &nval, &jlo, &jhi);
    fa_caches_for(vc, it);
    int64_t h0 = it->hkv * pr->G + it->hs * pl->gs, ng = min64(pl->gs, pr->G - it->hs * pl->gs);
    int mp = (int)attn_round_up(ng * nrow, ATTN_ROW_PAD);
    for (int r = 0; r < mp; r++) sc->m[r] = -INFINITY, sc->l[r] = 0.0f;
    memset(sc->ot, 0, (size_t)(D * mp) * sizeof(float));

    if (jlo < jhi) {
        for (int64_t ii = 0; ii < nval; ii++)
            attn_visible(pr, i0 + ii, s.q_len, s.kv_len, &sc->lo[ii], &sc->hi[ii]);
        for (int r = 0; r < mp; r++) sc->llo[r] = 0, sc->lhi[r] = INT32_MAX;
        for (int64_t g = 0; g < ng; g++)
            for (int64_t ii = 0; ii < nval; ii++)
                sc->llo[g * nrow + ii] = (int32_t)sc->lo[ii], sc->lhi[g * nrow + ii] = (int32_t)sc->hi[ii];
        /* Q^T, scaled; rows beyond nval and padding lanes stay 0 (finite, never written out) */
        int packed = !pl->use_bf16 && kn->pack_t && pr->q.dtype == LOOM_F32 && pr->q.sd == 1;
        if (packed) { /* f32 rows in place, transposed by the kernel (NULL rows: zeros) */
            for (int r = 0; r < mp; r++) sc->rp[r] = NULL;
            for (int64_t g = 0; g < ng; g++)
                for (int64_t ii = 0; ii < nval; ii++)
                    sc->rp[g * nrow + ii] = (float *)elem(&pr->q, it->b * pr->q.sb + (s.q_start + i0 + ii) * pr->q.ss +
                                                                      (h0 + g) * pr->q.sn);
            kn->pack_t(sc->qt, mp, (const float *const *)sc->rp, mp, (int)D, pl->qscale);
        } else {
            memset(sc->qt, 0, (size_t)(D * mp) * sizeof(float));
            fa_pack_q(pl, it, &s, i0, nrow, nval, ng, h0, mp, sc);
        }
        int partial_rows = 0; /* some valid row sees only part of [jlo, jhi) */
        for (int64_t ii = 0; ii < nval; ii++) partial_rows |= sc->lo[ii] > jlo || sc->hi[ii] < jhi;

        for (int64_t j0 = jlo; j0 < jhi; j0 += pl->bc) {
            int nc = (int)min64(pl->bc, jhi - j0);
            int masked = pr->mask != NULL, part = 0;
            if (partial_rows) {
                int any = 0;
                for (int64_t ii = 0; ii < nval; ii++) {
                    any |= sc->lo[ii] < j0 + nc && sc->hi[ii] > j0;
                    part |= sc->lo[ii] > j0 || sc->hi[ii] < j0 + nc;
                }
                if (!any) continue; /* fully masked tile: skipped */
            }
            if (masked && !fa_mask_tile(pl, it, i0, nrow, nval, ng, h0, j0, nc, mp, sc))
                continue; /* the explicit mask hides the whole tile */
            int64_t ldk = D, ldv = D;
            if (pl->use_bf16) {
                const uint16_t *k16;
                if (!pl->k16 || pl->pgather) { /* inner_precise 1 (or paged): the rounded (copied) K cache */
                    fa_kcache_fill(pl, it, &s, vc, sc, j0 + nc);
                    k16 = sc->kpk + j0 * D;
                } else if (!(k16 = (const uint16_t *)fa_kv_tile(pr, &pr->k, it, &s, j0, nc, &ldk))) {
                    fa_rows_bf16((uint16_t *)sc->kbuf, pl, &pr->k, it, &s, j0, nc); /* across blocks */
                    k16 = (const uint16_t *)sc->kbuf, ldk = D;
                }
                kn->qk_bf16(sc->s, mp, k16, ldk, (const uint32_t *)sc->qt, mp, nc, (int)D, mp, pl->qscale);
                if (pl->q8) fa_scale_cols(pr, &pr->kq, it, &s, j0, nc, sc->s, mp);
            } else if (pl->krows) { /* a paged f32 K read in place, a row pointer per key */
                fa_rows_product(pl, it, &s, 0, j0, nc, mp, sc);
            } else {
                const float *kp = NULL;
                if (sc->kf) kp = fa_wide_fill(pl, it, &s, vc, sc, 0, j0 + nc) + j0 * D;
                else if (pl->direct_k) kp = (const float *)fa_kv_tile(pr, &pr->k, it, &s, j0, nc, &ldk);
                if (!kp) { /* converted (or, paged across blocks, gathered) into the K buffer */
                    fa_rows_f32(sc->kbuf, pl, &pr->k, &pr->kq, it, &s, j0, nc);
                    kp = sc->kbuf, ldk = D;
                }
                kn->bgemm(sc->s, mp, kp, ldk, 1, sc->qt, mp, nc, (int)D, mp, NULL);
            }
            if (pr->softcap > 0.0f) attn_softcap(kn, sc->s, (int64_t)nc * mp, pr->softcap);
            if (masked)
                for (int64_t x = 0; x < (int64_t)nc * mp; x++) sc->s[x] += sc->a[x];
            else if (part) /* band edges only: a lane-parallel select, no mask tile */
                for (int c = 0; c < nc; c++) {
                    int32_t j = (int32_t)(j0 + c);
                    float *sr = sc->s + c * mp;
                    for (int r = 0; r < mp; r++) /* (| not ||: no branch, so the loop vectorises) */
                        sr[r] = ((j < sc->llo[r]) | (j >= sc->lhi[r])) ? -INFINITY : sr[r];
                }
            kn->softmax_cols(sc->s, mp, nc, mp, sc->m, sc->l, sc->alpha);
            if (pr->keep_prob < 1.0f) /* dropout after the sum: lse and l stay undropped */
                for (int64_t g = 0; g < ng; g++)
                    for (int64_t ii = 0; ii < nval; ii++)
                        attn_dropout_row(pr, it->b, h0 + g, s.q_start + i0 + ii, s.kv_start + j0,
                                         nc, sc->s + g * nrow + ii, mp);
            if (pl->use_bf16_pv) { /* bf16 pairs of P and V: the mask tile and V buffer are free now */
                if (pl->q8) fa_scale_cols(pr, &pr->vq, it, &s, j0, nc, sc->s, mp); /* P·scale, after l */
                if (sc->vpk && j0 % 2 == 0 && nc % 2 == 0) { /* whole pairs: from the packed-V cache */
                    fa_vcache_fill(pl, it, &s, vc, sc, j0 + nc);
                    kn->pv_bf16(sc->ot, mp, NULL, 0, sc->s, mp, sc->alpha, nc, (int)D, mp,
                                (uint32_t *)sc->a, sc->vpk + (j0 / 2) * D);
                    continue;
                }
                const uint16_t *v16 = NULL;
                if (pl->v16) v16 = (const uint16_t *)fa_kv_tile(pr, &pr->v, it, &s, j0, nc, &ldv);
                if (!v16) { /* the tile rounded (inner_precise 1) or gathered into the K buffer (free now) */
                    fa_rows_bf16((uint16_t *)sc->kbuf, pl, &pr->v, it, &s, j0, nc);
                    v16 = (const uint16_t *)sc->kbuf, ldv = D;
                }
                kn->pv_bf16(sc->ot, mp, v16, ldv, sc->s, mp, sc->alpha, nc, (int)D, mp,
                            (uint32_t *)sc->a, (uint32_t *)sc->vbuf);
                continue;
            }
            if (pl->vrows) {
                fa_rows_product(pl, it, &s, 1, j0, nc, mp, sc);
                continue;
            }
            const float *vp = NULL;
            if (sc->vf) vp = fa_wide_fill(pl, it, &s, vc, sc, 1, j0 + nc) + j0 * D;
            else if (pl->direct_v) vp = (const float *)fa_kv_tile(pr, &pr->v, it, &s, j0, nc, &ldv);
            if (!vp) {
                fa_rows_f32(sc->vbuf, pl, &pr->v, &pr->vq, it, &s, j0, nc);
                vp = sc->vbuf, ldv = D;
            }
            kn->bgemm(sc->ot, mp, vp, 1, ldv, sc->s, mp, (int)D, nc, mp, sc->alpha);
        }
    }
    /* O = O^T / l, zeros (and lse -inf) where nothing was visible or the row is padding;
     * seen rows of an f32 output through the kernel's transpose (inv in alpha, free now) */
    int direct = pr->out.dtype == LOOM_F32 && pr->out.sd == 1, unpack = direct && kn->unpack_t, n_seen = 0;
    for (int64_t g = 0; g < ng; g++)
        for (int64_t ii = 0; ii < nrow; ii++) {
            int64_t r = g * nrow + ii, row = s.q_start + i0 + ii, h = h0 + g;
            int seen = ii < nval && sc->l[r] != 0.0f; /* NaN l (a NaN score): a NaN row and lse */
            float inv = seen ? 1.0f / sc->l[r] : 0.0f;
            int64_t oo = it->b * pr->out.sb + row * pr->out.ss + h * pr->out.sn;
            float *dst = direct ? (float *)elem(&pr->out, oo) : sc->row;
            if (unpack) sc->rp[r] = seen ? dst : NULL, sc->alpha[r] = inv, n_seen += seen;
            if (!unpack || !seen)
                for (int64_t d = 0; d < D; d++) dst[d] = seen ? sc->ot[d * mp + r] * inv : 0.0f;
            if (!direct) attn_store_row((void *)elem(&pr->out, oo), pr->out.dtype, pr->out.sd, sc->row, D);
            if (pr->lse)
                pr->lse[it->b * pr->lb + h * pr->ln + row * pr->li] =
                    seen ? (float)(((double)sc->m[r] + log2((double)sc->l[r])) * ATTN_LN2)
                         : -INFINITY;
        }
    if (n_seen) kn->unpack_t(sc->rp, sc->ot, mp, sc->alpha, (int)(ng * nrow), (int)D);
}

loom_status attn_prefill_run(const attn_problem *pr, const loom_attn_kernels *kern, int ith,
                             int nth, void *scratch, size_t scratch_bytes) {
    fa_plan pl;
    fa_scratch sc;
    fa_plan_init(&pl, pr, kern);
    size_t need = fa_layout(&pl, scratch, &sc);
    LOOM_RETURN_IF(!scratch || scratch_bytes < need, LOOM_ERR_INVALID_ARG,
                   "flash_attention_score: scratch of %zu bytes, need %zu", scratch_bytes, need);
    LOOM_RETURN_IF(nth < 1 || ith < 0 || ith >= nth, LOOM_ERR_INVALID_ARG,
                   "flash_attention_score: thread %d of %d", ith, nth);
    int64_t lo, hi;
    fa_vcache vc = {-1, -1, 0, 0, 0, 0};
    attn_split_cost(fa_count(&pl), ith, nth, fa_cost, &pl, &lo, &hi);
    for (int64_t idx = lo; idx < hi; idx++) {
        fa_item it;
        fa_item_at(&pl, idx, &it);
        fa_item_run(&pl, &it, &sc, &vc);
    }
    return LOOM_OK;
}

/* ------------------------------------------------------------ public API */

size_t attn_prefill_scratch_all(const attn_problem *pr) {
    size_t a = attn_prefill_scratch(pr), b = loom_attn_ref_scratch(pr);
    return a > b ? a : b;
}

loom_status loom_flash_attention_score_scratch_size(const loom_flash_attention_tensors *t,
                                                    const loom_flash_attention_params *p,
                                                    size_t *bytes) {
    attn_problem pr;
    LOOM_RETURN_IF(!bytes, LOOM_ERR_INVALID_ARG, "flash_attention_score: bytes is NULL");
    LOOM_TRY(attn_resolve_prefill(t, p, &pr));
    attn_prefill_fit_caches(&pr); /* for this data: _thread checks the bytes it gets */
    *bytes = attn_prefill_scratch_all(&pr);
    return LOOM_OK;
}

static loom_status run_level(const loom_flash_attention_tensors *t,
                             const loom_flash_attention_params *p, const attn_problem *pr,
                             loom_isa isa, int ith, int nth, void *scratch, size_t bytes) {
    if (isa == LOOM_ISA_REF) return loom_attn_ref_flash(t, p, ith, nth, scratch, bytes);
    return attn_prefill_run(pr, loom_attn_kernels_for(isa), ith, nth, scratch, bytes);
}

loom_status loom_flash_attention_score_thread(const loom_flash_attention_tensors *t,
                                              const loom_flash_attention_params *p, int ith,
                                              int nth, void *scratch, size_t scratch_bytes) {
    attn_problem pr;
    LOOM_TRY(attn_resolve_prefill(t, p, &pr));
    attn_prefill_fit_caches(&pr);
    return run_level(t, p, &pr, loom_cpu_isa(), ith, nth, scratch, scratch_bytes);
}

typedef struct fa_job {
    const loom_flash_attention_tensors *t;
    const loom_flash_attention_params *p;
    const attn_problem *pr;
    loom_isa isa;
    char *scratch;
    size_t per;
    atomic_int status;
} fa_job;

static void fa_job_fn(int ith, int nth, void *arg) {
    fa_job *j = arg;
    loom_status s = run_level(j->t, j->p, j->pr, j->isa, ith, nth,
                              j->scratch + (size_t)ith * j->per, j->per);
    if (s != LOOM_OK) atomic_store(&j->status, (int)s);
}

/* Runs a validated problem on pool (NULL: this thread). */
static loom_status fa_run_pool(const loom_flash_attention_tensors *t,
                               const loom_flash_attention_params *p, const attn_problem *pr,
                               loom_pool *pool) {
    int nth = pool ? loom_pool_size(pool) : 1;
    fa_job j = {.t = t, .p = p, .pr = pr, .isa = loom_cpu_isa()};
    j.per = (size_t)attn_round_up((int64_t)attn_prefill_scratch_all(pr), LOOM_ALIGN);
    j.scratch = loom_alloc_aligned(j.per * (size_t)nth, LOOM_ALIGN);
    LOOM_RETURN_IF(!j.scratch, LOOM_ERR_NOMEM, "flash_attention_score: cannot allocate %zu bytes",
                   j.per * (size_t)nth);
    return attn_run_workers(pool, fa_job_fn, &j, &j.status, j.scratch, "flash_attention_score");
}

loom_status loom_flash_attention_score(const loom_flash_attention_tensors *t,
                                       const loom_flash_attention_params *p, loom_pool *pool) {
    attn_problem pr;
    LOOM_TRY(attn_resolve_prefill(t, p, &pr));
    attn_prefill_fit_caches(&pr); /* scratch allocated for this call */
    return fa_run_pool(t, p, &pr, pool);
}
