/* Reference decompositions of flash_attention_score and incre_flash_attention:
 * one output row at a time, scores of the whole row in doubles, then softmax,
 * dropout and the weighted sum of V, exactly in the order of the unfused graph. */
#include "fused/ref/attention_ref.h"

#include "base/rng.h"
#include "base/status.h"
#include "ops/ref/ref.h"

#include <math.h>

size_t loom_attn_ref_scratch(const attn_problem *pr) {
    return (size_t)(pr->Skv > 0 ? pr->Skv : 1) * sizeof(double);
}

/* Element offset of (b, s, n, d) in t laid out as L, D the head dim. */
static int64_t ref_off(const loom_tensor *t, loom_attn_layout L, int64_t D, int64_t b, int64_t s,
                       int64_t n, int64_t d) {
    const int64_t *st = t->stride;
    switch (L) {
    case LOOM_ATTN_BSND: return b * st[0] + s * st[1] + n * st[2] + d * st[3];
    case LOOM_ATTN_BNSD: return b * st[0] + n * st[1] + s * st[2] + d * st[3];
    case LOOM_ATTN_BSH: return b * st[0] + s * st[1] + (n * D + d) * st[2];
    default: return s * st[0] + n * st[1] + d * st[2]; /* TND: s is the packed token */
    }
}

/* Is key j visible to query i of a sequence with sq queries and skv keys?
 * The sparse_mode definitions, written as differences so nothing overflows. */
static int ref_visible(int mode, int64_t pre, int64_t next, int64_t i, int64_t j, int64_t sq,
                       int64_t skv) {
    int64_t right = j - (i + skv - sq); /* > 0: right of the bottom-right diagonal */
    switch (mode) {
    case LOOM_SPARSE_DEFAULT: return j - i <= next && i - j <= pre;
    case LOOM_SPARSE_ALL_MASK: return 1;
    case LOOM_SPARSE_LEFT_UP_CAUSAL: return j <= i;
    case LOOM_SPARSE_RIGHT_DOWN_CAUSAL: return right <= 0;
    default: return right <= next && -right <= pre; /* band */
    }
}

/* The explicit mask as an additive value: -inf where a bool mask is set. */
static double ref_mask(const loom_tensor *m, int64_t b, int64_t h, int64_t i, int64_t j) {
    int nd = m->ndim;
    int64_t off = i * m->stride[nd - 2] + j * m->stride[nd - 1];
    if (nd == 4) {
        if (m->shape[0] > 1) off += b * m->stride[0];
        if (m->shape[1] > 1) off += h * m->stride[1];
    }
    if (m->dtype == LOOM_I8) return ((const int8_t *)m->data)[off] ? -INFINITY : 0.0;
    return (double)((const float *)m->data)[off];
}

/* How to read one key/value element (dequantized) of a row. */
typedef struct ref_kv {
    const loom_tensor *k, *v, *block_table;
    const loom_tensor *ks, *ko, *vs, *vo;  /* antiquant scale/offset (i8 caches) */
    int kmode, vmode;
    loom_attn_layout L;
    int64_t D, block_size, kv_start;
} ref_kv;

static double ref_quant(const loom_tensor *t, int mode, int64_t b, int64_t s, int64_t n, int64_t d,
                        double dflt) {
    if (!t) return dflt;
    int64_t off = mode == LOOM_ANTIQUANT_PER_CHANNEL
                      ? (t->shape[0] > 1 ? n * t->stride[0] : 0) + d * t->stride[1]
                      : b * t->stride[0] + (t->shape[1] > 1 ? n * t->stride[1] : 0) + s * t->stride[2];
    return (double)((const float *)t->data)[off];
}

static double ref_get_kv(const ref_kv *c, int which, int64_t b, int64_t j, int64_t n, int64_t d) {
    const loom_tensor *t = which ? c->v : c->k;
    int64_t cb = b, cs = c->kv_start + j;
    if (c->block_table) { /* paged: block from the table, slot within it */
        const loom_tensor *bt = c->block_table;
        cb = ((const int32_t *)bt->data)[b * bt->stride[0] + (j / c->block_size) * bt->stride[1]];
        cs = j % c->block_size;
    }
    double x = (double)loom_ref_get(t, ref_off(t, c->L, c->D, cb, cs, n, d));
    if (t->dtype != LOOM_I8) return x;
    int mode = which ? c->vmode : c->kmode;
    double sc = ref_quant(which ? c->vs : c->ks, mode, cb, cs, n, d, 1.0);
    double of = ref_quant(which ? c->vo : c->ko, mode, cb, cs, n, d, 0.0);
    return (x + of) * sc;
}

/* Everything one output row needs. */
typedef struct ref_row {
    int64_t b, h, i, sq, skv;          /* batch, head, query position, sequence lengths */
    int64_t q_off, out_off, lse_off;   /* element offsets of the query row, output row, lse */
    int64_t drop_row, drop_col0;       /* dropout indices of (i, key 0) */
} ref_row;

typedef struct ref_op {
    const loom_tensor *q, *mask, *out, *lse;
    loom_attn_layout L;
    int64_t N, G, D, drop_b_stride, drop_sq, drop_skv;
    int sparse_mode;
    int64_t pre, next;
    double scale;
    double softcap;   /* > 0: scores capped, softcap * tanh(s / softcap), before the mask */
    float keep_prob;
    uint64_t seed, offset;
    int tnd;
    ref_kv kv;
} ref_op;

static void ref_compute_row(const ref_op *o, const ref_row *r, double *sc) {
    int64_t D = o->D, hk = r->h / o->G;
    double mx = -INFINITY;
    for (int64_t j = 0; j < r->skv; j++) {
        sc[j] = -INFINITY;
        if (!ref_visible(o->sparse_mode, o->pre, o->next, r->i, j, r->sq, r->skv)) continue;
        double add = o->mask ? ref_mask(o->mask, r->b, r->h, r->i, j) : 0.0;
        if (add == -INFINITY) continue;
        double dot = 0.0;
        for (int64_t d = 0; d < D; d++)
            dot += (double)loom_ref_get(o->q, r->q_off + d * o->q->stride[o->q->ndim - 1]) *
                   ref_get_kv(&o->kv, 0, r->b, j, hk, d);
        double s = dot * o->scale;
        if (o->softcap > 0.0) s = o->softcap * tanh(s / o->softcap);
        sc[j] = s + add;
        if (sc[j] > mx || isnan(sc[j])) mx = sc[j];
        if (isnan(mx)) break;
    }
    int64_t sd = o->out->stride[o->out->ndim - 1];
    if (isnan(mx)) { /* a NaN score (a NaN or inf in q or K) reaches the output: NaN row, NaN lse */
        for (int64_t d = 0; d < D; d++) loom_ref_put(o->out, r->out_off + d * sd, NAN);
        if (o->lse) ((float *)o->lse->data)[r->lse_off] = NAN;
        return;
    }
    if (mx == -INFINITY) { /* nothing visible: zeros, lse -inf */
        for (int64_t d = 0; d < D; d++) loom_ref_put(o->out, r->out_off + d * sd, 0.0f);
        if (o->lse) ((float *)o->lse->data)[r->lse_off] = -INFINITY;
        return;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < r->skv; j++) sum += exp(sc[j] - mx);
    if (o->lse) ((float *)o->lse->data)[r->lse_off] = (float)(mx + log(sum));
    for (int64_t j = 0; j < r->skv; j++) {
        double pj = exp(sc[j] - mx) / sum;
        if (o->keep_prob < 1.0f) {
            uint64_t idx = ((uint64_t)(o->drop_b_stride * r->b + r->h) * (uint64_t)o->drop_sq +
                            (uint64_t)r->drop_row) * (uint64_t)o->drop_skv +
                           (uint64_t)(r->drop_col0 + j);
            pj *= loom_rng_uniform_at(o->seed, o->offset, idx) < o->keep_prob ? 1.0 / o->keep_prob
                                                                               : 0.0;
        }
        sc[j] = pj;
    }
    for (int64_t d = 0; d < D; d++) {
        double acc = 0.0;
        for (int64_t j = 0; j < r->skv; j++)
            if (sc[j] != 0.0) acc += sc[j] * ref_get_kv(&o->kv, 1, r->b, j, hk, d);
        loom_ref_put(o->out, r->out_off + d * sd, (float)acc);
    }
}

static loom_status ref_check_scratch(const char *op, const attn_problem *pr, int ith, int nth,
                                     void *scratch, size_t bytes) {
    LOOM_RETURN_IF(!scratch || bytes < loom_attn_ref_scratch(pr), LOOM_ERR_INVALID_ARG,
                   "%s: reference needs %zu bytes of scratch, got %zu", op,
                   loom_attn_ref_scratch(pr), scratch ? bytes : 0);
    LOOM_RETURN_IF(nth < 1 || ith < 0 || ith >= nth, LOOM_ERR_INVALID_ARG, "%s: thread %d of %d",
                   op, ith, nth);
    return LOOM_OK;
}

loom_status loom_attn_ref_flash(const loom_flash_attention_tensors *t,
                                const loom_flash_attention_params *p, int ith, int nth,
                                void *scratch, size_t scratch_bytes) {
    attn_problem pr;
    LOOM_TRY(attn_resolve_prefill(t, p, &pr));
    LOOM_TRY(ref_check_scratch("flash_attention_score", &pr, ith, nth, scratch, scratch_bytes));
    const loom_tensor *q = t->query;
    ref_op o = {.q = q, .mask = t->atten_mask, .out = t->attention_out, .lse = t->softmax_lse,
                .L = p->input_layout, .N = pr.N, .G = pr.G, .D = pr.D,
                .sparse_mode = p->sparse_mode, .pre = p->pre_tokens, .next = p->next_tokens,
                .scale = p->scale_value != 0.0f ? (double)p->scale_value : 1.0 / sqrt((double)pr.D),
                .softcap = p->softcap,
                .keep_prob = p->keep_prob, .seed = p->seed, .offset = p->offset,
                .tnd = p->input_layout == LOOM_ATTN_TND};
    /* a paged cache of a TND query is laid out as BSND [num_blocks, block_size, N_kv, D] */
    o.kv = (ref_kv){.k = t->key, .v = t->value, .block_table = t->block_table,
                    .ks = t->key_antiquant_scale, .ko = t->key_antiquant_offset,
                    .vs = t->value_antiquant_scale, .vo = t->value_antiquant_offset,
                    .kmode = p->key_antiquant_mode, .vmode = p->value_antiquant_mode,
                    .L = o.tnd && t->block_table ? LOOM_ATTN_BSND : o.L, .D = pr.D,
                    .block_size = pr.block_size};
    int64_t Sq = o.tnd ? q->shape[0] : (o.L == LOOM_ATTN_BNSD ? q->shape[2] : q->shape[1]);
    /* key positions: the cache's S dim, or what the block table addresses (pr.Skv) */
    int64_t Skv = t->block_table ? pr.Skv : o.tnd ? t->key->shape[0]
                        : (o.L == LOOM_ATTN_BNSD ? t->key->shape[2] : t->key->shape[1]);
    int64_t B = o.tnd ? 1 : q->shape[0];
    o.drop_b_stride = o.tnd ? 0 : pr.N, o.drop_sq = Sq, o.drop_skv = Skv;
    int64_t lo, hi;
    loom_ref_split(B * Sq * pr.N, ith, nth, &lo, &hi);
    for (int64_t x = lo; x < hi; x++) {
        ref_row r = {.h = x % pr.N};
        int64_t s = (x / pr.N) % Sq; /* row in the tensor's S (or T) dim */
        r.b = x / (pr.N * Sq);
        if (o.tnd) { /* find the sequence holding token s */
            int64_t b = 0;
            while (b < p->num_seqs && p->actual_seq_qlen[b] <= s) b++;
            int64_t q0 = b && b <= p->num_seqs ? p->actual_seq_qlen[b - 1] : 0;
            r.b = b;
            r.i = s - q0;
            r.sq = b < p->num_seqs ? p->actual_seq_qlen[b] - q0 : 0; /* tail rows: none valid */
            o.kv.kv_start = b && b < p->num_seqs ? p->actual_seq_kvlen[b - 1] : 0;
            r.skv = b < p->num_seqs ? p->actual_seq_kvlen[b] - o.kv.kv_start : 0;
            if (t->block_table) o.kv.kv_start = 0; /* paged: the sequence's own blocks from slot 0 */
            r.lse_off = t->softmax_lse ? s * t->softmax_lse->stride[0] + r.h * t->softmax_lse->stride[1] : 0;
            r.drop_row = s, r.drop_col0 = o.kv.kv_start;
        } else {
            r.i = s;
            r.sq = p->actual_seq_lengths ? p->actual_seq_lengths[r.b] : Sq;
            r.skv = p->actual_seq_lengths_kv ? p->actual_seq_lengths_kv[r.b] : Skv;
            const loom_tensor *l = t->softmax_lse;
            r.lse_off = l ? r.b * l->stride[0] + r.h * l->stride[1] + s * l->stride[2] : 0;
            r.drop_row = s, r.drop_col0 = 0;
        }
        if (r.i >= r.sq) r.skv = 0; /* padding row: zeros */
        r.q_off = ref_off(q, o.L, pr.D, r.b, s, r.h, 0);
        r.out_off = ref_off(t->attention_out, o.L, pr.D, r.b, s, r.h, 0);
        if (o.tnd) r.b = r.b < p->num_seqs ? r.b : 0; /* mask batch index (unused on tail rows) */
        ref_compute_row(&o, &r, scratch);
    }
    return LOOM_OK;
}

loom_status loom_attn_ref_incre(const loom_incre_flash_attention_tensors *t,
                                const loom_incre_flash_attention_params *p,
                                const int64_t *q_lens, int ith, int nth, void *scratch,
                                size_t scratch_bytes) {
    attn_problem pr;
    LOOM_TRY(attn_resolve_decode(t, p, q_lens, &pr));
    LOOM_TRY(ref_check_scratch("incre_flash_attention", &pr, ith, nth, scratch, scratch_bytes));
    const loom_tensor *q = t->query;
    ref_op o = {.q = q, .mask = t->atten_mask, .out = t->attention_out, .lse = t->softmax_lse,
                .L = p->input_layout, .N = pr.N, .G = pr.G, .D = pr.D,
                .sparse_mode = p->sparse_mode, .pre = p->pre_tokens, .next = p->next_tokens,
                .scale = p->scale_value != 0.0f ? (double)p->scale_value : 1.0 / sqrt((double)pr.D),
                .softcap = p->softcap,
                .keep_prob = 1.0f};
    o.kv = (ref_kv){.k = t->key, .v = t->value, .block_table = t->block_table,
                    .ks = t->key_antiquant_scale, .ko = t->key_antiquant_offset,
                    .vs = t->value_antiquant_scale, .vo = t->value_antiquant_offset,
                    .kmode = p->key_antiquant_mode, .vmode = p->value_antiquant_mode, .L = o.L,
                    .D = pr.D};
    int64_t cache_s = o.L == LOOM_ATTN_BNSD ? t->key->shape[2] : t->key->shape[1];
    o.kv.block_size = cache_s;
    int64_t B = q->shape[0], Sq = o.L == LOOM_ATTN_BNSD ? q->shape[2] : q->shape[1];
    int64_t lo, hi;
    loom_ref_split(B * Sq * pr.N, ith, nth, &lo, &hi);
    for (int64_t x = lo; x < hi; x++) {
        ref_row r = {.h = x % pr.N, .i = (x / pr.N) % Sq, .b = x / (pr.N * Sq)};
        r.sq = q_lens ? q_lens[r.b] : Sq;
        r.skv = p->actual_seq_lengths ? p->actual_seq_lengths[r.b] : cache_s;
        if (r.i >= r.sq) r.skv = 0;
        r.q_off = ref_off(q, o.L, pr.D, r.b, r.i, r.h, 0);
        r.out_off = ref_off(t->attention_out, o.L, pr.D, r.b, r.i, r.h, 0);
        const loom_tensor *l = t->softmax_lse;
        r.lse_off = l ? r.b * l->stride[0] + r.h * l->stride[1] + r.i * l->stride[2] : 0;
        ref_compute_row(&o, &r, scratch);
    }
    return LOOM_OK;
}
