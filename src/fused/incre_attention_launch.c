/*
 * Decode attention: work splitting over the threads, the two launches (whole
 * units a thread, or split-KV and a merge), the pool runner and the public
 * API. The plan, a unit's tiles and chunks, the fold and the output are in
 * incre_attention.c (see its head comment for the scheme).
 */
#include "fused/incre_attention_internal.h"

#include "base/alloc.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "fused/ref/attention_ref.h"

#include <math.h>
#include <stdatomic.h>

/* ------------------------------------------------------------ work splitting */

static double dec_unit_cost(const void *ctx, int64_t idx) {
    const dec_plan *pl = ctx;
    dec_unit u;
    attn_dec_unit_at(pl, idx / pl->pr->Nkv, idx % pl->pr->Nkv, &u);
    return (double)(u.jhi - u.jlo + 1);
}

/* Items of the split launch: (unit, chunk) pairs, those of batch entry b
 * numbered from dec_item_base(b). Where heads are walked together (group >
 * 1) an entry's items go chunk by chunk, its kv heads in turn within a chunk,
 * so a thread's share holds runs of heads of one chunk (dec_split_walk);
 * otherwise unit by unit, a unit's chunks in turn. */
static int64_t dec_item_base(const dec_plan *pl, int64_t b) {
    int64_t n = 0;
    for (int64_t x = 0; x < b; x++) {
        dec_unit u;
        attn_dec_unit_at(pl, x, 0, &u);
        n += pl->pr->Nkv * u.nch;
    }
    return n;
}

/* Item number of chunk k of kv head hkv in a batch entry of nch chunks whose
 * first item is base. */
static int64_t dec_item(const dec_plan *pl, int64_t base, int64_t nch, int64_t hkv, int64_t k) {
    return base + (pl->group > 1 ? k * pl->pr->Nkv + hkv : hkv * nch + k);
}

/* Cost of chunk k of a unit: the keys some row may see (+1 for the fixed work). */
static double dec_chunk_cost(const attn_problem *pr, const dec_unit *u, int64_t k) {
    int64_t c0, c1;
    attn_dec_chunk_range(pr, u, k, &c0, &c1);
    return (double)(c1 > c0 ? c1 - c0 : 0) + 1.0;
}

static size_t dec_workspace(const dec_plan *pl) {
    return (size_t)dec_item_base(pl, pl->pr->B) * (size_t)(pl->M * (2 + pl->ldq)) * sizeof(float) + 64;
}

static float *dec_slot(const dec_plan *pl, void *ws, int64_t item) {
    return (float *)ws + item * pl->M * (2 + pl->ldq);
}

/* ------------------------------------------------------------ launches */

static loom_status dec_check(const dec_plan *pl, int ith, int nth, void *scratch, size_t bytes,
                             dec_scratch *sc) {
    size_t need = attn_dec_layout(pl, scratch, sc);
    LOOM_RETURN_IF(!scratch || bytes < need, LOOM_ERR_INVALID_ARG,
                   "incre_flash_attention: scratch of %zu bytes, need %zu", scratch ? bytes : 0, need);
    LOOM_RETURN_IF(nth < 1 || ith < 0 || ith >= nth, LOOM_ERR_INVALID_ARG,
                   "incre_flash_attention: thread %d of %d", ith, nth);
    return LOOM_OK;
}

/* Units [lo, hi) folded whole by the calling thread, their output written. */
static void dec_run_range(const dec_plan *pl, dec_scratch *sc, int64_t lo, int64_t hi) {
    int64_t M = pl->M, ld = pl->ldq;
    for (int64_t x = lo; x < hi;) {
        /* up to pl->group consecutive units of one batch entry, walked together */
        dec_unit u[ATTN_DEC_GROUP_MAX];
        int64_t g = 0, b = x / pl->pr->Nkv;
        do { /* x < hi: at least one */
            attn_dec_unit_at(pl, b, (x + g) % pl->pr->Nkv, &u[g]);
            attn_dec_prepare_q(pl, &u[g], &sc->hd[g]);
            attn_dec_fold_init(pl, &sc->hd[g]);
        } while (++g < pl->group && x + g < hi && (x + g) / pl->pr->Nkv == b);
        for (int64_t k = 0; k < u[0].nch; k++) {
            int64_t c0, c1;
            attn_dec_chunk_range(pl->pr, &u[0], k, &c0, &c1);
            if (c0 >= c1) continue;
            /* the partials go to each head's m/l/acc, then into its fold */
            attn_dec_chunk(pl, u, g, k, sc);
            for (int64_t i = 0; i < g; i++) {
                dec_head *h = &sc->hd[i];
                attn_dec_fold(M, pl->pr->D, ld, h->fm, h->fl, h->facc, h->m, h->l, h->acc);
            }
        }
        for (int64_t i = 0; i < g; i++) attn_dec_write(pl, &u[i], sc->hd[i].fm, sc->hd[i].fl, sc->hd[i].facc, sc->row);
        x += g;
    }
}

/* One launch: thread ith folds all chunks of its units itself. */
static loom_status dec_run_units(const dec_plan *pl, int ith, int nth, void *scratch,
                                 size_t bytes) {
    dec_scratch sc;
    LOOM_TRY(dec_check(pl, ith, nth, scratch, bytes, &sc));
    int64_t lo, hi;
    attn_split_cost(pl->pr->B * pl->pr->Nkv, ith, nth, dec_unit_cost, pl, &lo, &hi);
    dec_run_range(pl, &sc, lo, hi);
    return LOOM_OK;
}

/* A run of the split launch's items: g consecutive kv heads h0.. of batch
 * entry b, chunk k, items item.. (consecutive), all of thread owner; cost:
 * their dec_chunk_cost. */
typedef struct dec_run_items {
    int owner;
    int64_t b, k, h0, g, item;
    double cost;
} dec_run_items;

typedef void dec_walk_fn(void *ctx, const dec_run_items *r);

/* The split launch's items on nth threads in item order, each thread's those
 * attn_split_owner gives it (owners never decrease), as runs of at most
 * pl->group heads: fn(ctx, run) for each. With group 1 every run is one item. */
static void dec_split_walk(const dec_plan *pl, int nth, dec_walk_fn *fn, void *ctx) {
    const attn_problem *pr = pl->pr;
    double total = 0.0, acc = 0.0;
    int64_t n_items = 0;
    for (int64_t b = 0; b < pr->B; b++) {
        dec_unit u;
        attn_dec_unit_at(pl, b, 0, &u);
        for (int64_t k = 0; k < u.nch; k++) total += (double)pr->Nkv * dec_chunk_cost(pr, &u, k);
        n_items += pr->Nkv * u.nch;
    }
    int64_t idx = 0, Nkv = pr->Nkv;
    for (int64_t b = 0; b < pr->B; b++) {
        dec_unit u; /* the chunks' key ranges are those of every kv head of b */
        attn_dec_unit_at(pl, b, 0, &u);
        dec_run_items r = {.g = 0}; /* the run being gathered */
        for (int64_t i = 0; i < Nkv * u.nch; i++, idx++) {
            int64_t k = pl->group > 1 ? i / Nkv : i % u.nch, h = pl->group > 1 ? i % Nkv : i / u.nch;
            double c = dec_chunk_cost(pr, &u, k);
            int owner = attn_split_owner(acc, c, total, idx, n_items, nth);
            acc += c;
            if (r.g > 0 && (r.owner != owner || r.k != k || r.h0 + r.g != h || r.g == pl->group)) {
                fn(ctx, &r);
                r.g = 0;
            }
            if (r.g == 0) r = (dec_run_items){owner, b, k, h, 0, idx, 0.0};
            r.g++, r.cost += c;
        }
        if (r.g > 0) fn(ctx, &r);
    }
}

typedef struct dec_split_job {
    const dec_plan *pl;
    int ith;
    dec_scratch *sc;
    void *ws;
    int64_t prepared[ATTN_DEC_GROUP_MAX]; /* the unit whose q hd[i] holds (-1: none) */
} dec_split_job;

/* One run of dec_split_walk, if it is thread ith's: its heads' partials of
 * chunk k straight into their workspace slots. */
static void dec_split_run(void *ctx, const dec_run_items *r) {
    dec_split_job *j = ctx;
    if (r->owner != j->ith) return;
    const dec_plan *pl = j->pl;
    int64_t M = pl->M, Nkv = pl->pr->Nkv;
    dec_unit u[ATTN_DEC_GROUP_MAX];
    for (int64_t i = 0; i < r->g; i++) {
        attn_dec_unit_at(pl, r->b, r->h0 + i, &u[i]);
        /* the slot of (h0 + i, k): consecutive items when heads go chunk by chunk */
        float *slot = dec_slot(pl, j->ws, r->item + i);
        int64_t c0, c1;
        attn_dec_chunk_range(pl->pr, &u[i], r->k, &c0, &c1);
        if (c0 >= c1) { /* an empty partial: the merge skips it */
            for (int64_t x = 0; x < M; x++) slot[x] = -INFINITY, slot[M + x] = 0.0f;
            continue;
        }
        dec_head *h = &j->sc->hd[i];
        if (j->prepared[i] != r->b * Nkv + r->h0 + i) attn_dec_prepare_q(pl, &u[i], h);
        j->prepared[i] = r->b * Nkv + r->h0 + i;
        h->m = slot, h->l = slot + M, h->acc = slot + 2 * M;
    }
    int64_t c0, c1;
    attn_dec_chunk_range(pl->pr, &u[0], r->k, &c0, &c1);
    if (c0 < c1) attn_dec_chunk(pl, u, r->g, r->k, j->sc);
}

static loom_status dec_run_split(const dec_plan *pl, int ith, int nth, void *scratch,
                                 size_t bytes, void *ws, size_t ws_bytes) {
    dec_scratch sc;
    LOOM_TRY(dec_check(pl, ith, nth, scratch, bytes, &sc));
    LOOM_RETURN_IF(!ws || ws_bytes < dec_workspace(pl), LOOM_ERR_INVALID_ARG,
                   "incre_flash_attention: workspace of %zu bytes, need %zu", ws ? ws_bytes : 0,
                   dec_workspace(pl));
    dec_split_job j = {pl, ith, &sc, ws, {0}};
    for (int i = 0; i < ATTN_DEC_GROUP_MAX; i++) j.prepared[i] = -1;
    dec_split_walk(pl, nth, dec_split_run, &j);
    return LOOM_OK;
}

/* Folds each unit's partials into its first chunk's slot (the unit's slots
 * belong to the one thread merging it) and writes the output. */
static loom_status dec_run_merge(const dec_plan *pl, int ith, int nth, void *ws,
                                 size_t ws_bytes) {
    LOOM_RETURN_IF(!ws || ws_bytes < dec_workspace(pl), LOOM_ERR_INVALID_ARG,
                   "incre_flash_attention: workspace of %zu bytes, need %zu", ws ? ws_bytes : 0,
                   dec_workspace(pl));
    LOOM_RETURN_IF(nth < 1 || ith < 0 || ith >= nth, LOOM_ERR_INVALID_ARG,
                   "incre_flash_attention: thread %d of %d", ith, nth);
    int64_t M = pl->M, ld = pl->ldq, lo, hi;
    float row[LOOM_ATTN_MAX_HEAD_DIM];
    attn_split_cost(pl->pr->B * pl->pr->Nkv, ith, nth, dec_unit_cost, pl, &lo, &hi);
    int64_t base = dec_item_base(pl, lo / pl->pr->Nkv); /* first item of batch b, kept up to date */
    for (int64_t x = lo; x < hi; x++) {
        dec_unit u;
        int64_t b = x / pl->pr->Nkv, hkv = x % pl->pr->Nkv;
        attn_dec_unit_at(pl, b, hkv, &u);
        if (x > lo && hkv == 0) {
            dec_unit prev;
            attn_dec_unit_at(pl, b - 1, 0, &prev);
            base += pl->pr->Nkv * prev.nch;
        }
        if (u.nch == 0) { /* no keys at all: zeros */
            float empty[1] = {0.0f};
            dec_unit one = u;
            one.q_len = 0; /* every row is written as zeros; the state is not read */
            attn_dec_write(pl, &one, empty, empty, empty, row);
            continue;
        }
        float *s0 = dec_slot(pl, ws, dec_item(pl, base, u.nch, hkv, 0));
        for (int64_t k = 1; k < u.nch; k++) {
            const float *slot = dec_slot(pl, ws, dec_item(pl, base, u.nch, hkv, k));
            attn_dec_fold(M, pl->pr->D, ld, s0, s0 + M, s0 + 2 * M, slot, slot + M, slot + 2 * M);
        }
        attn_dec_write(pl, &u, s0, s0 + M, s0 + 2 * M, row);
    }
    return LOOM_OK;
}

/* ------------------------------------------------------------ public API */

loom_status attn_decode_heads(const attn_problem *pr, const loom_attn_kernels *kern, int64_t h0, int64_t h1,
                              void *scratch, size_t bytes) {
    dec_plan pl;
    dec_scratch sc;
    attn_dec_plan_init(&pl, pr, kern);
    LOOM_TRY(dec_check(&pl, 0, 1, scratch, bytes, &sc));
    LOOM_RETURN_IF(h0 < 0 || h1 > pr->Nkv || h0 > h1, LOOM_ERR_INVALID_ARG,
                   "incre_flash_attention: kv heads [%lld, %lld) of %lld", (long long)h0, (long long)h1,
                   (long long)pr->Nkv);
    for (int64_t b = 0; b < pr->B && h0 < h1; b++) dec_run_range(&pl, &sc, b * pr->Nkv + h0, b * pr->Nkv + h1);
    return LOOM_OK;
}

size_t attn_decode_scratch(const attn_problem *pr) {
    dec_plan pl;
    dec_scratch sc;
    attn_dec_plan_init(&pl, pr, NULL);
    size_t a = attn_dec_layout(&pl, NULL, &sc), b = loom_attn_ref_scratch(pr);
    return a > b ? a : b;
}

int64_t attn_decode_group(const attn_problem *pr) {
    dec_plan pl;
    attn_dec_plan_init(&pl, pr, NULL);
    return pl.group;
}

typedef struct dec_walk_widest_ctx {
    int ith;
    int64_t widest;
} dec_walk_widest_ctx;

static void dec_walk_widest(void *ctx, const dec_run_items *r) {
    dec_walk_widest_ctx *w = ctx;
    if (r->owner == w->ith && r->g > w->widest) w->widest = r->g;
}

int64_t attn_decode_split_group(const attn_problem *pr, int ith, int nth) {
    dec_plan pl;
    dec_walk_widest_ctx w = {ith, 0};
    attn_dec_plan_init(&pl, pr, NULL);
    dec_split_walk(&pl, nth, dec_walk_widest, &w);
    return w.widest;
}

/* The split launch's largest share of the work over an even share (owners
 * never decrease: one running share at a time). */
typedef struct dec_walk_share_ctx {
    int cur;
    double share, worst, total;
} dec_walk_share_ctx;

static void dec_walk_share(void *ctx, const dec_run_items *r) {
    dec_walk_share_ctx *w = ctx;
    if (r->owner != w->cur) w->cur = r->owner, w->share = 0.0;
    w->share += r->cost, w->total += r->cost;
    if (w->share > w->worst) w->worst = w->share;
}

/* Split-KV pays when whole (batch, kv head) units cannot go round evenly
 * (some thread over 10% above an even share) and the chunks can: with one
 * chunk a unit (contexts up to kv_chunk) the split's shares are the units'
 * again, and it would only add the merge. */
static int dec_splits(const dec_plan *pl, int nth) {
    if (nth < 2) return 0;
    double units = attn_split_imbalance(pl->pr->B * pl->pr->Nkv, nth, dec_unit_cost, pl);
    if (units <= 1.1) return 0;
    dec_walk_share_ctx w = {0, 0.0, 0.0, 0.0};
    dec_split_walk(pl, nth, dec_walk_share, &w);
    return w.total > 0.0 && w.worst * nth / w.total < units - 0.05;
}

int attn_decode_splits(const attn_problem *pr, int nth) {
    dec_plan pl;
    attn_dec_plan_init(&pl, pr, NULL);
    return dec_splits(&pl, nth);
}

size_t attn_decode_workspace(const attn_problem *pr) {
    dec_plan pl;
    attn_dec_plan_init(&pl, pr, NULL);
    return dec_workspace(&pl);
}

loom_status attn_decode_phase(const attn_problem *pr, const loom_attn_kernels *kern, int phase, int ith,
                              int nth, void *scratch, size_t scratch_bytes, void *shared) {
    dec_plan pl;
    attn_dec_plan_init(&pl, pr, kern);
    if (!dec_splits(&pl, nth)) return phase ? LOOM_OK : dec_run_units(&pl, ith, nth, scratch, scratch_bytes);
    size_t ws = dec_workspace(&pl);
    LOOM_RETURN_IF(!shared, LOOM_ERR_INVALID_ARG,
                   "incre_flash_attention: split-KV on %d threads needs the launch's shared buffer (%zu bytes)",
                   nth, ws);
    if (phase == 0) return dec_run_split(&pl, ith, nth, scratch, scratch_bytes, shared, ws);
    return dec_run_merge(&pl, ith, nth, shared, ws);
}

loom_status loom_incre_flash_attention_sizes(const loom_incre_flash_attention_tensors *t,
                                             const loom_incre_flash_attention_params *p,
                                             size_t *scratch_bytes, size_t *workspace_bytes) {
    attn_problem pr;
    dec_plan pl;
    LOOM_RETURN_IF(!scratch_bytes || !workspace_bytes, LOOM_ERR_INVALID_ARG,
                   "incre_flash_attention: NULL size output");
    LOOM_TRY(attn_resolve_decode(t, p, NULL, &pr));
    attn_dec_plan_init(&pl, &pr, NULL);
    *scratch_bytes = attn_decode_scratch(&pr);
    *workspace_bytes = dec_workspace(&pl);
    return LOOM_OK;
}

loom_status loom_incre_flash_attention_split(const loom_incre_flash_attention_tensors *t,
                                             const loom_incre_flash_attention_params *p, int ith,
                                             int nth, void *scratch, size_t scratch_bytes,
                                             void *workspace, size_t workspace_bytes) {
    attn_problem pr;
    dec_plan pl;
    LOOM_TRY(attn_resolve_decode(t, p, NULL, &pr));
    loom_isa isa = loom_cpu_isa();
    if (isa == LOOM_ISA_REF) /* the reference writes the output here; merge has nothing to do */
        return loom_attn_ref_incre(t, p, NULL, ith, nth, scratch, scratch_bytes);
    attn_dec_plan_init(&pl, &pr, loom_attn_kernels_for(isa));
    return dec_run_split(&pl, ith, nth, scratch, scratch_bytes, workspace, workspace_bytes);
}

loom_status loom_incre_flash_attention_merge(const loom_incre_flash_attention_tensors *t,
                                             const loom_incre_flash_attention_params *p,
                                             int ith, int nth, void *workspace,
                                             size_t workspace_bytes) {
    attn_problem pr;
    dec_plan pl;
    LOOM_TRY(attn_resolve_decode(t, p, NULL, &pr));
    loom_isa isa = loom_cpu_isa();
    if (isa == LOOM_ISA_REF) return LOOM_OK;
    attn_dec_plan_init(&pl, &pr, loom_attn_kernels_for(isa)); /* the split's plan: its item order */
    return dec_run_merge(&pl, ith, nth, workspace, workspace_bytes);
}

loom_status loom_incre_flash_attention_thread(const loom_incre_flash_attention_tensors *t,
                                              const loom_incre_flash_attention_params *p, int ith,
                                              int nth, void *scratch, size_t scratch_bytes) {
    attn_problem pr;
    dec_plan pl;
    LOOM_TRY(attn_resolve_decode(t, p, NULL, &pr));
    loom_isa isa = loom_cpu_isa();
    if (isa == LOOM_ISA_REF) return loom_attn_ref_incre(t, p, NULL, ith, nth, scratch, scratch_bytes);
    attn_dec_plan_init(&pl, &pr, loom_attn_kernels_for(isa));
    return dec_run_units(&pl, ith, nth, scratch, scratch_bytes);
}

typedef struct dec_job {
    const loom_incre_flash_attention_tensors *t;
    const loom_incre_flash_attention_params *p;
    const int64_t *q_lens;
    const dec_plan *pl;
    loom_pool *pool;
    int phase;          /* 0: whole units, 1: split then merge, 3: reference */
    char *scratch, *ws;
    size_t per, ws_bytes;
    atomic_int status;
} dec_job;

static void dec_job_fn(int ith, int nth, void *arg) {
    dec_job *j = arg;
    char *sc = j->scratch + (size_t)ith * j->per;
    loom_status s;
    switch (j->phase) {
    case 0: s = dec_run_units(j->pl, ith, nth, sc, j->per); break;
    case 1: /* split and merge in one launch: a barrier instead of a second wake-up */
        s = dec_run_split(j->pl, ith, nth, sc, j->per, j->ws, j->ws_bytes);
        if (s != LOOM_OK) atomic_store(&j->status, (int)s);
        if (j->pool) loom_pool_barrier(j->pool); /* every thread arrives, failed or not */
        if (atomic_load(&j->status) != LOOM_OK) return;
        s = dec_run_merge(j->pl, ith, nth, j->ws, j->ws_bytes);
        break;
    default: s = loom_attn_ref_incre(j->t, j->p, j->q_lens, ith, nth, sc, j->per); break;
    }
    if (s != LOOM_OK) atomic_store(&j->status, (int)s);
}

loom_status attn_decode_pool(const loom_incre_flash_attention_tensors *t,
                             const loom_incre_flash_attention_params *p, const int64_t *q_lens,
                             loom_pool *pool) {
    return attn_decode_pool_with(t, p, q_lens, pool, loom_attn_kernels_for(loom_cpu_isa()));
}

loom_status attn_decode_pool_with(const loom_incre_flash_attention_tensors *t,
                                  const loom_incre_flash_attention_params *p, const int64_t *q_lens,
                                  loom_pool *pool, const loom_attn_kernels *kern) {
    attn_problem pr;
    dec_plan pl;
    LOOM_TRY(attn_resolve_decode(t, p, q_lens, &pr));
    loom_isa isa = loom_cpu_isa();
    attn_dec_plan_init(&pl, &pr, kern);
    int nth = pool ? loom_pool_size(pool) : 1;
    int split = isa != LOOM_ISA_REF && dec_splits(&pl, nth);
    dec_job j = {.t = t, .p = p, .q_lens = q_lens, .pl = &pl, .pool = pool,
                 .phase = isa == LOOM_ISA_REF ? 3 : split ? 1 : 0};
    j.per = (size_t)attn_round_up((int64_t)attn_decode_scratch(&pr), LOOM_ALIGN);
    j.ws_bytes = split ? dec_workspace(&pl) : 0;
    size_t total = j.per * (size_t)nth + j.ws_bytes;
    j.scratch = loom_alloc_aligned(total, LOOM_ALIGN);
    LOOM_RETURN_IF(!j.scratch, LOOM_ERR_NOMEM, "incre_flash_attention: cannot allocate %zu bytes",
                   total);
    j.ws = j.scratch + j.per * (size_t)nth;
    return attn_run_workers(pool, dec_job_fn, &j, &j.status, j.scratch, "incre_flash_attention");
}

loom_status loom_incre_flash_attention(const loom_incre_flash_attention_tensors *t,
                                       const loom_incre_flash_attention_params *p,
                                       loom_pool *pool) {
    return attn_decode_pool(t, p, NULL, pool);
}
