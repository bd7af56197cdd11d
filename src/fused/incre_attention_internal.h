/* The decode driver's plan, units and per-head state, shared by its two
 * files: incre_attention.c (the plan, a unit's tiles and chunks, the fold and
 * the output) and incre_attention_launch.c (work splitting, the launches and
 * the public API). Internal to them. */
#ifndef LOOM_FUSED_INCRE_ATTENTION_INTERNAL_H
#define LOOM_FUSED_INCRE_ATTENTION_INTERNAL_H

#include "fused/flash_attention_internal.h"

typedef struct dec_plan {
    const attn_problem *pr;
    const loom_attn_kernels *kern;
    int64_t M, ldq;     /* rows per unit (G * S_q), padded row length (multiple of 16) */
    float qscale;       /* scale * log2(e) */
    int hp;             /* inner_precise 1 */
    int64_t tile;       /* keys a tile (attn_dec_tile) */
    int64_t group;      /* kv heads a thread walks together, tile by tile (dec_group) */
    int named;          /* the kernels name the next step's rows instead of a distance (dec_tile) */
    int xpf;            /* the kernels prefetch the other stream (and with named, their own) */
    int64_t ahead;      /* the kernels' own prefetch distance (attn_dec_pf.ahead) */
} dec_plan;

/* One kv head's state while a thread works on its unit. */
typedef struct dec_head {
    float *q, *bias, *qsum, *extra; /* q rows (scaled), offset terms, per-token V offset sums */
    float *m, *l, *acc;             /* the chunk's partial: here, or a workspace slot */
    float *fm, *fl, *facc;          /* the running fold of the unit's chunks */
    void *qp;  /* the unit's q rows in the kernels' prepared form (dec_qprep) */
    int qprep; /* nonzero: qp holds them, Q.K^T takes dec_dot_prep */
} dec_head;

typedef struct dec_scratch {
    float *s, *alpha, *tsc, *tof, *row; /* one tile's scores and per-token scales */
    const void **krows, **vrows, **knext, **vnext; /* row lists of a step and the next (dec_lists) */
    dec_head hd[ATTN_DEC_GROUP_MAX];
} dec_scratch;

/* Unit = (batch entry b, kv head hkv): its query rows, KV length, visible
 * keys [jlo, jhi) and chunks. */
typedef struct dec_unit {
    int64_t b, hkv, q_len, kv_len, jlo, jhi, nch;
} dec_unit;

/* The plan of problem pr at kernel table kern (NULL: for sizes only). */
void attn_dec_plan_init(dec_plan *pl, const attn_problem *pr, const loom_attn_kernels *kern);
/* Lays out one thread's scratch from base (NULL: sizes only); returns its bytes. */
size_t attn_dec_layout(const dec_plan *pl, void *base, dec_scratch *sc);
/* Unit (b, hkv) of the plan. */
void attn_dec_unit_at(const dec_plan *pl, int64_t b, int64_t hkv, dec_unit *u);
/* Keys [c0, c1) of chunk k that some row of unit u may see. */
void attn_dec_chunk_range(const attn_problem *pr, const dec_unit *u, int64_t k, int64_t *c0, int64_t *c1);
/* The unit's q rows into hd (scaled, antiquant folded in, prepared form). */
void attn_dec_prepare_q(const dec_plan *pl, const dec_unit *u, dec_head *hd);
/* Partials of chunk k of the g units u[0..g-1] into their heads (sc->hd). */
void attn_dec_chunk(const dec_plan *pl, const dec_unit *u, int64_t g, int64_t k, const dec_scratch *sc);
/* state (m, l, acc) := state (+) partial, in log-sum-exp form. */
void attn_dec_fold(int64_t M, int64_t D, int64_t ld, float *m, float *l, float *acc, const float *pm,
                   const float *pl_, const float *pacc);
/* The unit's output rows (and lse) from its folded state; row: a scratch row. */
void attn_dec_write(const dec_plan *pl, const dec_unit *u, const float *m, const float *l, const float *acc,
                    float *row);
/* h's fold starts empty. */
void attn_dec_fold_init(const dec_plan *pl, const dec_head *h);

#endif
