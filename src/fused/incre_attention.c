/*
 * Decode attention (incre_flash_attention) with split-KV ("flash-decoding"):
 * the plan, a unit's tiles and chunks, the fold and the output. Work
 * splitting, the launches and the public API are in incre_attention_launch.c.
 *
 * Unit = (batch, kv head): its rows are every query head of the group times
 * every query position (G * S_q <= 16 G rows), so each cached K/V row is read
 * once for the whole group. The KV length is cut into fixed chunks of kv_chunk
 * positions (a grid from 0, never derived from nth); a chunk's partial result
 * is (m, l, acc) of the online softmax over its keys. Partials are folded in
 * chunk order by their log-sum-exp:
 *   m = max(m1, m2), l = l1 2^(m1-m) + l2 2^(m2-m), acc likewise,
 * either by the thread that owns the unit (one launch) or, when chunks of one
 * unit ran on different threads, by a merge launch reading them back from a
 * shared workspace. The fold is the same function in both, so results are
 * bit-identical for any thread count.
 *
 * Where a kv head's keys lie in short runs (BSND and BSH caches: the heads of
 * a key side by side; paged caches with small blocks), a thread walks the kv
 * heads of a batch entry in its share together, tile by tile (dec_group):
 * one head's tiles alone would touch a few lines of every page and move on,
 * which the hardware prefetcher does not follow. Each head keeps its own q,
 * partial and fold, so the bits are those of one head at a time.
 *
 * i8 caches are dequantized without touching each element twice: a
 * per-channel K scale is folded into q (and its offset into a per-row bias),
 * a per-token K scale multiplies the score; V scales are applied to the
 * accumulator (per channel) or folded into the probabilities (per token).
 */
#include "fused/incre_attention_internal.h"

#include <math.h>
#include <string.h>

/* Lays out one head's state h from float offset off of base (NULL: sizes
 * only) and returns the offset after it: attn_dec_layout's per-head part, and the
 * size dec_group bounds. */
static size_t dec_take_head(dec_head *h, char *base, size_t off, int64_t M, int64_t ld) {
    float **f[10] = {&h->q, &h->bias, &h->qsum, &h->extra, &h->m, &h->l, &h->acc, &h->fm, &h->fl, &h->facc};
    int64_t n[10] = {M * ld, M, M, M, M, M, M * ld, M, M, M * ld};
    for (int i = 0; i < 10; i++) {
        *f[i] = base ? (float *)(base + off * sizeof(float)) : NULL;
        off += (size_t)attn_round_up(n[i], 16);
    }
    h->qp = base ? base + off * sizeof(float) : NULL;
    h->qprep = 0;
    return off + (size_t)attn_round_up(M * (ATTN_DEC_QPREP_STRIDE / 4), 16);
}

/* Keys of one kv head that lie together in the cache (K and V): one in a BSND
 * or BSH cache (the heads of a key are side by side), the block in a paged
 * BNSD one, the whole sequence in a contiguous BNSD one. */
static int64_t dec_head_run(const attn_problem *pr) {
    int64_t run = INT64_MAX;
    const attn_view *v[2] = {&pr->k, &pr->v};
    for (int i = 0; i < 2; i++) {
        int64_t r = v[i]->sn <= v[i]->ss ? 1 : v[i]->sn / v[i]->ss; /* paged BNSD: the block size */
        if (r < run) run = r;
    }
    return run;
}

/* How many kv heads of a batch entry a thread walks together: where a head's
 * keys lie in short runs (BSND / BSH caches, paged ones with small blocks),
 * one head's tiles alone touch a few rows of every page and the hardware
 * prefetcher loses the stream; the heads' tiles in turn (tile t of heads
 * h..h+g-1, then tile t+1) read the cache front to back. Each head keeps its
 * q, partial and fold: g is bounded by ATTN_DEC_GROUP_BYTES of them. Both
 * launches group: the one launch a thread's consecutive units (dec_run_units),
 * the split launch the heads of one chunk (dec_split_walk). */
static int64_t dec_group(const attn_problem *pr, int64_t M, int64_t ld) {
    if (pr->Nkv < 2 || dec_head_run(pr) > ATTN_DEC_GROUP_RUN) return 1;
    dec_head h;
    int64_t per = (int64_t)(dec_take_head(&h, NULL, 0, M, ld) * sizeof(float));
    int64_t g = ATTN_DEC_GROUP_BYTES / per;
    if (g > pr->Nkv) g = pr->Nkv;
    if (g > ATTN_DEC_GROUP_MAX) g = ATTN_DEC_GROUP_MAX;
    return g < 1 ? 1 : g;
}

void attn_dec_plan_init(dec_plan *pl, const attn_problem *pr, const loom_attn_kernels *kern) {
    pl->pr = pr, pl->kern = kern;
    pl->M = pr->G * pr->Sq;
    pl->ldq = attn_round_up(pr->D, 16);
    pl->qscale = (float)(pr->scale * ATTN_LOG2E);
    pl->hp = pr->inner_precise == LOOM_ATTN_HIGH_PERFORMANCE;
    /* sizing plans have no kernels; the scratch holds the largest tile anyway */
    pl->tile = kern ? attn_dec_tile(kern, pr->k.dtype, pr->v.dtype, pr->D, pl->M) : ATTN_DEC_TILE;
    pl->group = kern && kern->dec_one_head ? 1 : dec_group(pr, pl->M, pl->ldq);
    /* heads walked together: a head's tile spans at most the level's
     * dec_group_span bytes of the cache (keys times the key stride), in
     * multiples of 16 keys. In a BSND cache at GQA 32/8, D = 128, that is 16
     * keys for f32 (4 KiB a key) against 32: +4..+5 points of the read
     * bandwidth on one thread, +4..+7 on two (bench/results/attention.md) */
    if (kern && pl->group > 1 && kern->dec_group_span > 0) {
        int64_t kb = pr->k.ss * pr->k.esize, vb = pr->v.ss * pr->v.esize;
        int64_t cap = kern->dec_group_span / (kb > vb ? kb : vb) / 16 * 16;
        if (cap < pl->tile) pl->tile = cap < 16 ? 16 : cap;
    }
    /* the other stream is prefetched by kernels that prefetch themselves; for
     * i8 tiles at levels with dec_i8_xpf. With 32-key i8 tiles the extra
     * requests cost one thread 2-4 points of the read bandwidth and gained two
     * threads 1-3; with the 64-key tiles one thread gains 1-5 and two are
     * within their swings (bench/results/attention.md) */
    /* A paged cache's next rows are not further on in memory, nor are those of
     * heads walked together (dec_group): no prefetch at a distance (the
     * kernels' own would fetch other heads' rows, or nothing useful), and the
     * lists of real rows for every cache dtype, one thread too (bench_attention
     * --paged 16, i8 on one thread: 1.2 -> 0.6 ms). In place of the distance,
     * each stream's rows of the next step (dec_next) are named with the other
     * stream's (attn_dec_pf.own): Q.K^T names the tile's V rows and the next
     * step's K rows, P.V the next step's K and V rows. Blocks of 16 keys, f32
     * on one thread 46-48 -> 56 % of the read bandwidth, bf16 38-42 -> 44-48 %
     * (bench/results/attention.md). */
    pl->named = pr->paged || pl->group > 1;
    pl->xpf = kern && kern->dec_self_prefetch && (pl->named || pr->k.esize > 1 || kern->dec_i8_xpf);
    pl->ahead = pl->named ? 0 : ATTN_DEC_PF_DIST;
}

size_t attn_dec_layout(const dec_plan *pl, void *base, dec_scratch *sc) {
    int64_t M = pl->M, ld = pl->ldq, T = ATTN_DEC_TILE_MAX; /* whatever the level's tile */
    size_t off = 0;
#define DEC_TAKE(dst, type, n)                                                \
    do {                                                                      \
        (dst) = (type)(base ? (void *)((char *)base + off * sizeof(float)) : NULL); \
        off += (size_t)attn_round_up((n), 16);                                \
    } while (0)
    DEC_TAKE(sc->s, float *, M * T);
    DEC_TAKE(sc->alpha, float *, M);
    DEC_TAKE(sc->tsc, float *, T);
    DEC_TAKE(sc->tof, float *, T);
    DEC_TAKE(sc->row, float *, ld);
    DEC_TAKE(sc->krows, const void **, 2 * T);
    DEC_TAKE(sc->vrows, const void **, 2 * T);
    DEC_TAKE(sc->knext, const void **, 2 * T);
    DEC_TAKE(sc->vnext, const void **, 2 * T);
#undef DEC_TAKE
    for (int64_t i = 0; i < pl->group; i++) off = dec_take_head(&sc->hd[i], (char *)base, off, M, ld);
    return off * sizeof(float);
}

/* (flash_attention_internal.h) */
int attn_dec_dot_via_prep(int (*qprep)(void *, const float *, int64_t, int, loom_dtype, int, int),
                          void (*dot_prep)(float *, int64_t, const void *, int, const void *const *,
                                           loom_dtype, int, int, const attn_dec_pf *, int),
                          float *s, int64_t lds, const float *q, int64_t ldq, int nr,
                          const void *const *rows, loom_dtype dt, int nc, int d,
                          const attn_dec_pf *pf) {
    _Alignas(64) char qp[4 * ATTN_DEC_QPREP_STRIDE];
    for (int r = 0; r < nr; r += 4) {
        int n = nr - r < 4 ? nr - r : 4;
        if (!qprep(qp, q + r * ldq, ldq, n, dt, d, 0)) return 0;
        dot_prep(s + r * lds, lds, qp, n, rows, dt, nc, d, r ? NULL : pf, 0);
    }
    return 1;
}

/* ------------------------------------------------------------ units and chunks */


void attn_dec_unit_at(const dec_plan *pl, int64_t b, int64_t hkv, dec_unit *u) {
    const attn_problem *pr = pl->pr;
    u->b = b, u->hkv = hkv;
    u->q_len = pr->q_lens ? pr->q_lens[b] : pr->Sq;
    u->kv_len = pr->kv_lens ? pr->kv_lens[b] : pr->Skv;
    u->nch = (u->kv_len + pr->kv_chunk - 1) / pr->kv_chunk;
    u->jlo = u->jhi = 0;
    if (u->q_len == 0) return;
    int64_t lo, hi, lo2, hi2; /* visibility is monotonic in i */
    attn_visible(pr, 0, u->q_len, u->kv_len, &lo, &hi);
    attn_visible(pr, u->q_len - 1, u->q_len, u->kv_len, &lo2, &hi2);
    u->jlo = lo, u->jhi = hi2 > lo ? hi2 : lo;
}

/* Keys of chunk k that some row may see. */
void attn_dec_chunk_range(const attn_problem *pr, const dec_unit *u, int64_t k, int64_t *c0,
                            int64_t *c1) {
    int64_t a = k * pr->kv_chunk, e = a + pr->kv_chunk;
    *c0 = a > u->jlo ? a : u->jlo;
    *c1 = e < u->jhi ? e : u->jhi;
}

/* Q rows of the unit, scaled (and with the per-channel K antiquant folded in).
 * The row sums (per-token K offsets) and offset biases (per-channel K offsets)
 * are computed only when an offset needs them: their sequential double sums
 * were half the time of a short decode call. */
void attn_dec_prepare_q(const dec_plan *pl, const dec_unit *u, dec_head *hd) {
    const attn_problem *pr = pl->pr;
    int64_t D = pr->D, ld = pl->ldq;
    const attn_quant *kq = &pr->kq;
    const float *ks = kq->mode == LOOM_ANTIQUANT_PER_CHANNEL ? kq->scale + u->hkv * kq->s0 : NULL;
    int need_sum = kq->mode == LOOM_ANTIQUANT_PER_TOKEN && kq->offset;
    int need_bias = ks && kq->offset;
    memset(hd->q, 0, (size_t)(pl->M * ld) * sizeof(float));
    for (int64_t g = 0; g < pr->G; g++)
        for (int64_t i = 0; i < u->q_len; i++) {
            int64_t r = g * pr->Sq + i, h = u->hkv * pr->G + g;
            float *qr = hd->q + r * ld;
            const char *src = pr->q.data + (u->b * pr->q.sb + i * pr->q.ss + h * pr->q.sn) * pr->q.esize;
            if (pr->q.sd == 1) pl->kern->to_f32(qr, src, pr->q.dtype, D); /* as prefill does */
            else attn_load_row(qr, src, pr->q.dtype, pr->q.sd, D);
            if (ks)
                for (int64_t x = 0; x < D; x++) qr[x] *= pl->qscale * ks[x * kq->s1];
            else
                for (int64_t x = 0; x < D; x++) qr[x] *= pl->qscale;
            double bias = 0.0, sum = 0.0;
            if (need_sum)
                for (int64_t x = 0; x < D; x++) sum += qr[x];
            if (need_bias)
                for (int64_t x = 0; x < D; x++) bias += (double)qr[x] * kq->offset[u->hkv * kq->o0 + x * kq->o1];
            hd->bias[r] = (float)bias, hd->qsum[r] = (float)sum;
        }
    /* i8 and bf16 K: the rows in the kernels' prepared form, once for all the unit's tiles */
    hd->qprep = pl->kern->dec_qprep &&
                pl->kern->dec_qprep(hd->qp, hd->q, ld, (int)pl->M, pr->k.dtype, (int)D, pl->hp);
}

/* Cache position j of the unit's sequence: its batch entry (the block when
 * paged) and slot, and how many of the next n positions (j included) follow
 * in the same entry: all n in a contiguous cache. The callers take a tile's
 * keys run by run, one block-table lookup per run. */
static int64_t dec_run(const attn_problem *pr, const dec_unit *u, int64_t j, int64_t n, int64_t *cb,
                       int64_t *cs) {
    attn_kv_slot(pr, u->b, j, cb, cs);
    if (!pr->paged) return n;
    return pr->block_size - *cs < n ? pr->block_size - *cs : n;
}

/* Per-token scales of keys j0 .. j0+n-1 of the unit into s, and their offsets
 * into o when the cache has offsets (otherwise o is left alone). A call per
 * key, with the offsets' terms for caches without offsets, cost an i8 decode
 * 37-44 % of its time. */
static void dec_token_quant(const attn_problem *pr, const attn_quant *q, const dec_unit *u,
                            int64_t j0, int n, float *s, float *o) {
    for (int c = 0; c < n;) {
        int64_t cb, cs, run = dec_run(pr, u, j0 + c, n - c, &cb, &cs);
        const float *ps = q->scale + cb * q->s0 + u->hkv * q->s1 + cs * q->s2;
        for (int64_t i = 0; i < run; i++) s[c + i] = ps[i * q->s2];
        if (q->offset) {
            const float *po = q->offset + cb * q->o0 + u->hkv * q->o1 + cs * q->o2;
            for (int64_t i = 0; i < run; i++) o[c + i] = po[i * q->o2];
        }
        c += (int)run;
    }
}

/* Row cs of entry cb (batch, or block when paged) of the unit's kv head in view v. */
static const char *dec_row0(const attn_view *v, const dec_unit *u, int64_t cb, int64_t cs) {
    return v->data + (cb * v->sb + cs * v->ss + u->hkv * v->sn) * v->esize;
}

/* Asks for the K/V rows of the next step, n keys from j0 of unit u (the next
 * tile, or with heads walked together the next head's tile): decode streams the cache once and the
 * hardware prefetcher alone keeps too few misses in flight (measured: +15% f32,
 * +20% bf16 from DRAM). i8 caches skip it: their tiles are compute-bound and
 * the extra requests slowed them down. Kernels with dec_self_prefetch (AVX-512,
 * AVX2) prefetch inside their loops instead, spread evenly, which streams faster. */
static void dec_prefetch(const attn_problem *pr, const dec_unit *u, int64_t j0, int64_t n) {
    int64_t row_bytes = pr->D * pr->k.esize;
    for (int64_t c = 0; c < n;) { /* one block-table lookup per run of keys */
        int64_t cb, cs, run = dec_run(pr, u, j0 + c, n - c, &cb, &cs);
        const char *k0 = dec_row0(&pr->k, u, cb, cs), *v0 = dec_row0(&pr->v, u, cb, cs);
        for (int64_t i = 0; i < run; i++) {
            const char *k = k0 + i * pr->k.ss * pr->k.esize, *v = v0 + i * pr->v.ss * pr->v.esize;
            for (int64_t x = 0; x < row_bytes; x += 64) {
                __builtin_prefetch(k + x);
                __builtin_prefetch(v + x);
            }
        }
        c += run;
    }
}

/* Addresses of cache rows j0 .. j0+n-1 of the unit (K or V view). */
static void dec_rows(const attn_problem *pr, const attn_view *v, const dec_unit *u, int64_t j0,
                     int n, const void **rows) {
    int64_t stride = v->ss * v->esize; /* rows of one block a fixed stride apart */
    for (int c = 0; c < n;) {
        int64_t cb, cs, run = dec_run(pr, u, j0 + c, n - c, &cb, &cs);
        const char *r0 = dec_row0(v, u, cb, cs);
        for (int64_t i = 0; i < run; i++) rows[c + i] = r0 + i * stride;
        c += (int)run;
    }
}

/* The tile a thread takes after the current one, whose rows the kernels
 * name while they compute (prefetch): n keys from j0 of unit u (n = 0: none). */
typedef struct dec_next {
    const dec_unit *u;
    int64_t j0;
    int n;
} dec_next;

/* Row lists of a step and of the next one (the kernels name the latter). The
 * next step's become the current ones when attn_dec_chunk moves on, so each list
 * is built once: building four lists a step took 5 % of a hot i8 decode from
 * a BSND cache (perf, bench/results/attention.md). */
typedef struct dec_lists {
    const void **k, **v, **kn, **vn;
    int have; /* 1: k holds the step's K rows, 2: v its V rows (the previous step built them) */
} dec_lists;

/* h's partial of a chunk starts empty. */
static void dec_partial_init(const dec_plan *pl, const dec_head *h) {
    for (int64_t r = 0; r < pl->M; r++) h->m[r] = -INFINITY, h->l[r] = 0.0f, h->extra[r] = 0.0f;
    memset(h->acc, 0, (size_t)(pl->M * pl->ldq) * sizeof(float));
}

/* Keys j0 .. j0+nc-1 of unit u into h's partial (m, l, acc): one tile.
 * Returns which of the next step's lists it built into ls (dec_lists.have). */
static int dec_tile(const dec_plan *pl, const dec_unit *u, const dec_head *h, const dec_scratch *sc,
                    int64_t j0, int nc, const dec_next *nx, const dec_lists *ls) {
    const attn_problem *pr = pl->pr;
    const loom_attn_kernels *kn = pl->kern;
    int64_t D = pr->D, ld = pl->ldq, M = pl->M, T = pl->tile;
    const attn_quant *kq = &pr->kq, *vq = &pr->vq;
    int xpf = pl->xpf;
    int64_t ahead = pl->ahead;
    int any = 0, part = 0; /* structural visibility of this tile */
    for (int64_t i = 0; i < u->q_len; i++) {
        int64_t lo, hi;
        attn_visible(pr, i, u->q_len, u->kv_len, &lo, &hi);
        any |= lo < j0 + nc && hi > j0;
        part |= lo > j0 || hi < j0 + nc;
    }
    if (!any) return 0; /* fully masked tile: skipped */
    if (!(ls->have & 1)) dec_rows(pr, &pr->k, u, j0, nc, ls->k);
    if (!(ls->have & 2)) dec_rows(pr, &pr->v, u, j0, nc, ls->v);
    int nn = 0, built = 0;
    if (xpf) {
        nn = nx->n, built = 1;
        dec_rows(pr, &pr->k, nx->u, nx->j0, nn, ls->kn);
    }
    attn_dec_pf pf_v = {ls->v, nc, D * pr->v.esize, ahead, NULL, 0, 0};
    attn_dec_pf pf_k = {ls->kn, nn, D * pr->k.esize, ahead, NULL, 0, 0};
    if (xpf && pl->named) { /* each stream's own rows of the next step, named with the other's */
        dec_rows(pr, &pr->v, nx->u, nx->j0, nn, ls->vn), built |= 2;
        pf_v.own = ls->kn, pf_v.own_n = nn, pf_v.own_bytes = pf_k.bytes;
        pf_k.own = ls->vn, pf_k.own_n = nn, pf_k.own_bytes = pf_v.bytes;
    }
    if (pr->k.esize > 1 && !kn->dec_self_prefetch) dec_prefetch(pr, nx->u, nx->j0, nx->n);
    if (h->qprep)
        kn->dec_dot_prep(sc->s, T, h->qp, (int)M, ls->k, pr->k.dtype, nc, (int)D, xpf ? &pf_v : NULL,
                         pl->hp);
    else kn->dec_dot(sc->s, T, h->q, ld, (int)M, ls->k, pr->k.dtype, nc, (int)D, xpf ? &pf_v : NULL);
    if (kq->mode == LOOM_ANTIQUANT_PER_TOKEN) {
        dec_token_quant(pr, kq, u, j0, nc, sc->tsc, sc->tof);
        for (int64_t r = 0; r < M; r++) {
            float *sr = sc->s + r * T;
            if (kq->offset)
                for (int c = 0; c < nc; c++) sr[c] = sc->tsc[c] * (sr[c] + sc->tof[c] * h->qsum[r]);
            else
                for (int c = 0; c < nc; c++) sr[c] *= sc->tsc[c];
        }
    } else if (kq->mode == LOOM_ANTIQUANT_PER_CHANNEL && kq->offset) {
        for (int64_t r = 0; r < M; r++)
            for (int c = 0; c < nc; c++) sc->s[r * T + c] += h->bias[r];
    }
    if (pr->softcap > 0.0f)
        for (int64_t r = 0; r < M; r++) attn_softcap(kn, sc->s + r * T, nc, pr->softcap);
    int live = 1;
    if (part || pr->mask || u->q_len < pr->Sq) { /* some score needs a mask */
        live = 0;
        for (int64_t g = 0; g < pr->G; g++)
            for (int64_t i = 0; i < pr->Sq; i++) {
                float *sr = sc->s + (g * pr->Sq + i) * T;
                int64_t lo = 0, hi = 0;
                if (i < u->q_len) attn_visible(pr, i, u->q_len, u->kv_len, &lo, &hi);
                for (int c = 0; c < nc; c++) {
                    int64_t j = j0 + c;
                    float add = 0.0f;
                    int masked = j < lo || j >= hi; /* rows past q_len: everything */
                    if (!masked && pr->mask) masked = attn_mask_at(pr, u->b, u->hkv * pr->G + g, i, j, &add);
                    if (masked) sr[c] = -INFINITY;
                    else if (pr->mask) sr[c] += add * (float)ATTN_LOG2E;
                    live |= !masked;
                }
            }
    }
    if (!live) return built; /* the explicit mask hides the whole tile */
    kn->softmax_rows(sc->s, T, (int)M, nc, h->m, h->l, sc->alpha);
    if (vq->mode == LOOM_ANTIQUANT_PER_TOKEN) {
        dec_token_quant(pr, vq, u, j0, nc, sc->tsc, sc->tof);
        for (int64_t r = 0; r < M; r++) {
            float *sr = sc->s + r * T;
            for (int c = 0; c < nc; c++) sr[c] *= sc->tsc[c];
            if (!vq->offset) continue; /* extra stays 0 */
            float e = h->extra[r] * sc->alpha[r];
            for (int c = 0; c < nc; c++) e += sr[c] * sc->tof[c];
            h->extra[r] = e;
        }
    }
    kn->dec_pv(h->acc, ld, sc->s, T, (int)M, ls->v, pr->v.dtype, nc, (int)D, sc->alpha, xpf ? &pf_k : NULL);
    return built;
}

/* The V antiquant of h's finished partial. */
static void dec_partial_end(const dec_plan *pl, const dec_unit *u, const dec_head *h) {
    const attn_problem *pr = pl->pr;
    const attn_quant *vq = &pr->vq;
    int64_t D = pr->D, ld = pl->ldq;
    if (vq->mode == LOOM_ANTIQUANT_PER_CHANNEL) {
        for (int64_t r = 0; r < pl->M; r++)
            for (int64_t x = 0; x < D; x++) {
                float off = vq->offset ? vq->offset[u->hkv * vq->o0 + x * vq->o1] : 0.0f;
                h->acc[r * ld + x] = vq->scale[u->hkv * vq->s0 + x * vq->s1] * (h->acc[r * ld + x] + off * h->l[r]);
            }
    } else if (vq->mode == LOOM_ANTIQUANT_PER_TOKEN) {
        for (int64_t r = 0; r < pl->M; r++)
            for (int64_t x = 0; x < D; x++) h->acc[r * ld + x] += h->extra[r];
    }
}

/* Partials of chunk k of the g units u[0..g-1] (one batch entry, consecutive
 * kv heads, heads sc->hd[0..g-1]) into their heads' m, l, acc: tile t of every
 * head, then tile t+1. Each head's arithmetic is that of the head alone, so
 * the grouping changes no bit. */
void attn_dec_chunk(const dec_plan *pl, const dec_unit *u, int64_t g, int64_t k, const dec_scratch *sc) {
    int64_t T = pl->tile, c0, c1;
    attn_dec_chunk_range(pl->pr, &u[0], k, &c0, &c1);
    for (int64_t i = 0; i < g; i++) dec_partial_init(pl, &sc->hd[i]);
    dec_lists ls = {sc->krows, sc->vrows, sc->knext, sc->vnext, 0};
    for (int64_t j0 = c0; j0 < c1; j0 += T) {
        int nc = (int)(c1 - j0 < T ? c1 - j0 : T);
        for (int64_t i = 0; i < g; i++) { /* next: the following head's tile, or the first head's next */
            int64_t nj = i + 1 < g ? j0 : j0 + T;
            dec_next nx = {&u[i + 1 < g ? i + 1 : 0], nj, (int)(c1 - nj < T ? c1 - nj : T)};
            if (nx.n < 0) nx.n = 0;
            int built = dec_tile(pl, &u[i], &sc->hd[i], sc, j0, nc, &nx, &ls);
            const void **t = ls.k; /* the next step's lists become the current ones */
            ls.k = ls.kn, ls.kn = t, t = ls.v, ls.v = ls.vn, ls.vn = t;
            ls.have = built;
        }
    }
    for (int64_t i = 0; i < g; i++) dec_partial_end(pl, &u[i], &sc->hd[i]);
}

/* state := state (+) partial, in log-sum-exp form. Empty partials (l = 0:
 * nothing visible) change nothing and an empty state takes the partial as it
 * is. A NaN l (a NaN score: a NaN or inf in q or K) is not empty: it stays NaN
 * through every later fold (NaN * 0 is NaN), whatever m says. The only place
 * partials meet: both launch schemes call it in chunk order. */
void attn_dec_fold(int64_t M, int64_t D, int64_t ld, float *m, float *l, float *acc,
                     const float *pm, const float *pl_, const float *pacc) {
    for (int64_t r = 0; r < M; r++) {
        float *ar = acc + r * ld;
        const float *pr_ = pacc + r * ld;
        if (pl_[r] == 0.0f) continue;
        if (l[r] == 0.0f) {
            m[r] = pm[r], l[r] = pl_[r];
            memcpy(ar, pr_, (size_t)D * sizeof(float));
            continue;
        }
        float mn = m[r] > pm[r] ? m[r] : pm[r];
        float a = exp2f(m[r] - mn), b = exp2f(pm[r] - mn);
        l[r] = l[r] * a + pl_[r] * b;
        for (int64_t x = 0; x < D; x++) ar[x] = ar[x] * a + pr_[x] * b;
        m[r] = mn;
    }
}

void attn_dec_write(const dec_plan *pl, const dec_unit *u, const float *m, const float *l,
                      const float *acc, float *row) {
    const attn_problem *pr = pl->pr;
    for (int64_t g = 0; g < pr->G; g++)
        for (int64_t i = 0; i < pr->Sq; i++) {
            int64_t r = g * pr->Sq + i, h = u->hkv * pr->G + g;
            int seen = i < u->q_len && l[r] != 0.0f; /* NaN l: a NaN row and lse */
            float inv = seen ? 1.0f / l[r] : 0.0f;
            int64_t D = pr->D, oo = u->b * pr->out.sb + i * pr->out.ss + h * pr->out.sn;
            char *dst = (char *)(pr->out.data + oo * pr->out.esize); /* the output view is const in attn_problem */
            /* a contiguous f32 output row is written in place, other dtypes through row */
            float *o = pr->out.dtype == LOOM_F32 && pr->out.sd == 1 ? (float *)dst : row;
            const float *a = acc + r * pl->ldq;
            if (seen)
                for (int64_t x = 0; x < D; x++) o[x] = a[x] * inv;
            else
                memset(o, 0, (size_t)D * sizeof(float));
            if (o == row) attn_store_row(dst, pr->out.dtype, pr->out.sd, row, D);
            if (pr->lse)
                pr->lse[u->b * pr->lb + h * pr->ln + i * pr->li] =
                    seen ? (float)(((double)m[r] + log2((double)l[r])) * ATTN_LN2) : -INFINITY;
        }
}

void attn_dec_fold_init(const dec_plan *pl, const dec_head *h) {
    for (int64_t r = 0; r < pl->M; r++) h->fm[r] = -INFINITY, h->fl[r] = 0.0f;
}

