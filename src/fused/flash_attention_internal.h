/*
 * Internals shared by the attention kernels: the validated, resolved problem
 * (strides per role, per-batch lengths, masks), the visibility rules, and the
 * per-ISA micro-kernel tables. Not public.
 */
#ifndef LOOM_FUSED_FLASH_ATTENTION_INTERNAL_H
#define LOOM_FUSED_FLASH_ATTENTION_INTERNAL_H

#include "base/cpu.h"
#include "base/variants.h"
#include "fused/attention.h"
#include "ops/ops.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>

#define ATTN_LOG2E 1.4426950408889634
#define ATTN_LN2 0.6931471805599453
/* Prefill keeps tile rows in vector lanes: row counts are padded to this. */
#define ATTN_ROW_PAD 16
/* Decode processes KV in tiles of keys (the tile's scores stay in L1):
 * ATTN_DEC_TILE keys, or the level's dec_i8_tile (attn_dec_tile). Kernels take
 * any nc <= ATTN_DEC_TILE_MAX. */
#define ATTN_DEC_TILE 32
#define ATTN_DEC_TILE_MAX 128
/* Decode walks up to ATTN_DEC_GROUP_MAX kv heads of a batch entry together,
 * tile by tile, where one head's keys lie in runs of at most ATTN_DEC_GROUP_RUN
 * (BSND / BSH caches, paged ones with small blocks), with at most
 * ATTN_DEC_GROUP_BYTES of per-head state (incre_attention.c, dec_group). */
#define ATTN_DEC_GROUP_MAX 32
#ifndef ATTN_DEC_GROUP_RUN /* -DATTN_DEC_GROUP_RUN=0 builds the one-head walk for an A/B */
#define ATTN_DEC_GROUP_RUN 32
#endif
#define ATTN_DEC_GROUP_BYTES (256 << 10)
/* Decode's softmax moves a row's reference max m only when a score passes it
 * by more than this (log2 units): probabilities 2^(s - m) stay <= 2^8. */
#define ATTN_DEC_MAX_SLACK 8.0f
/* The integer P.V of an i8 V rounds a row's probabilities in a tile to 16-bit
 * integers against their largest; it takes the rounded row only if the
 * rounding errors add up to at most this fraction of the row's sum (in the
 * same units), so the tile's share of the output moves by at most this times
 * the largest |v|; otherwise the rows go through the f32 kernel. Unchecked,
 * n keys could move it by n * 2^-16 (one large p, the others tiny and each
 * rounded half a unit the same way): 2^-9 in a tile of 128. */
#define ATTN_DEC_PQ_ERR 0x1p-12f
#define ATTN_DEFAULT_KV_CHUNK 512

/* One of q, k, v, out: element (b, s, n, d) is at data + esize*(b*sb + s*ss + n*sn + d*sd).
 * For paged caches b is the block and s the slot within it. */
typedef struct attn_view {
    const char *data;
    loom_dtype  dtype;
    int64_t     esize;
    int64_t     sb, ss, sn, sd;
} attn_view;

/* Per-token or per-channel antiquant parameters of one i8 cache. */
typedef struct attn_quant {
    int          mode;                 /* loom_antiquant_mode; -1: not quantized */
    const float *scale, *offset;       /* offset may be NULL */
    int64_t      s0, s1, s2;           /* per-channel: [n, d] use s0, s1; per-token: [b, n, s] */
    int64_t      o0, o1, o2;
} attn_quant;

typedef struct attn_problem {
    int64_t B;            /* batch entries (TND: num_seqs, plus one for unassigned tail rows) */
    int64_t N, Nkv, G, D; /* heads, kv heads, N / Nkv, head dim */
    int64_t Sq, Skv;      /* padded dims (TND: T_q, T_kv; decode: S_q and cache capacity) */
    int     tnd;
    int64_t tnd_seqs;     /* sequences given (B may include the tail entry) */
    attn_view q, k, v, out;
    const int64_t *q_lens, *kv_lens;   /* padded layouts, NULL = full */
    const int64_t *q_cum, *kv_cum;     /* TND */
    int     sparse_mode;
    int64_t pre, next;                 /* clamped to +-2^40 so arithmetic cannot overflow */
    const char *mask;                  /* NULL: none */
    int     mask_bool;                 /* i8 mask (else additive f32) */
    int64_t mb, mn, mi, mj;            /* mask strides (0 = broadcast) */
    float  *lse;                       /* NULL: not wanted */
    int64_t lb, ln, li;
    double  scale;                     /* q.k multiplier, default applied */
    float   softcap;                   /* > 0: scores capped, softcap * tanh(s / softcap); 0: none */
    float   keep_prob;
    uint64_t seed, offset;
    int64_t drop_sq, drop_skv;         /* dropout index = ((b*N + h)*drop_sq + row)*drop_skv + col */
    int64_t block_q, block_kv;         /* 0 = auto */
    int     inner_precise;             /* 1: f32/f16 inputs may use bf16 products */
    int64_t kv_cache;                  /* keys of one sequence the prefill's per-thread K/V
                                          caches hold: S_kv (any data of these shapes), or
                                          the longest sequence (attn_prefill_fit_caches) */
    /* paged caches (both ops), antiquant, decode's chunk */
    int     paged;
    const int32_t *block_table;
    int64_t bt_b, bt_j, max_blocks, block_size, num_blocks;
    attn_quant kq, vq;
    int64_t kv_chunk;
} attn_problem;

/* Sizes the prefill's per-thread caches by the longest sequence of this
 * problem's data instead of S_kv (TND: T_kv). For callers that size scratch
 * for one call (the public API, which checks the bytes it is given); not for
 * the op table, whose scratch is planned once for shapes whose data may
 * change. */
void attn_prefill_fit_caches(attn_problem *pr);

/* One batch entry: queries rows [q_start, q_start + q_len) of the S dim are
 * valid, q_rows rows are written (padding gets zeros); keys likewise. */
typedef struct attn_seq {
    int64_t q_start, q_len, q_rows;
    int64_t kv_start, kv_len;
} attn_seq;

/* Validation and resolution (flash_attention_common.c). Errors name the tensor
 * or parameter. */
/* Graph ops over an i8 cache give one scale per cache row as [B, S, N_kv] (the
 * cache's dims but D, BSND order); the ops take per-token scales [B, N_kv, S]:
 * *out is that view of s (strides swapped, same data). */
void attn_scale_view(const loom_tensor *s, loom_tensor *out);

loom_status attn_resolve_prefill(const loom_flash_attention_tensors *t,
                                 const loom_flash_attention_params *p, attn_problem *pr);
/* The params of a prefill node's loom_flash_attention_attrs (NULL: the defaults). */
loom_flash_attention_params attn_fa_params(const void *attrs);
/* Query positions per work item of the prefill kernel for pr (its block_q, or
 * the automatic choice): items start at multiples of it, so a caller that cuts
 * the queries at multiples of it gets the same items, and the same results. */
int64_t attn_prefill_block_q(const attn_problem *pr);
/* inner_precise is 0 or 1 (loom_attn_inner_precise); the error names op. */
loom_status attn_check_inner_precise(const char *op, int inner_precise);
loom_status attn_resolve_decode(const loom_incre_flash_attention_tensors *t,
                                const loom_incre_flash_attention_params *p,
                                const int64_t *q_lens, attn_problem *pr);

void attn_get_seq(const attn_problem *pr, int64_t b, attn_seq *s);
/* Keys [*lo, *hi) visible to query i (i < sq) of a sequence with sq queries and
 * skv keys, from sparse_mode and the band; the explicit mask comes on top. */
void attn_visible(const attn_problem *pr, int64_t i, int64_t sq, int64_t skv, int64_t *lo,
                  int64_t *hi);
/* Explicit mask at (b, h, i, j): 1 masked (bool), or the additive value in *add. */
static inline int attn_mask_at(const attn_problem *pr, int64_t b, int64_t h, int64_t i,
                               int64_t j, float *add) {
    int64_t off = b * pr->mb + h * pr->mn + i * pr->mi + j * pr->mj;
    if (pr->mask_bool) {
        *add = 0.0f;
        return ((const int8_t *)pr->mask)[off] != 0;
    }
    *add = ((const float *)pr->mask)[off];
    return *add == -INFINITY;
}
/* Where K/V position s of batch b lives: *cb the batch entry (the block when
 * paged), *cs the position in it (the slot). */
static inline void attn_kv_slot(const attn_problem *pr, int64_t b, int64_t s, int64_t *cb, int64_t *cs) {
    if (pr->paged) {
        *cb = pr->block_table[b * pr->bt_b + (s / pr->block_size) * pr->bt_j];
        *cs = s % pr->block_size;
        return;
    }
    *cb = b, *cs = s;
}
/* Element offset (in elements) of K/V position s of batch b, kv head n. */
static inline int64_t attn_kv_offset(const attn_problem *pr, const attn_view *v, int64_t b,
                                     int64_t s, int64_t n) {
    int64_t cb, cs;
    attn_kv_slot(pr, b, s, &cb, &cs);
    return cb * v->sb + cs * v->ss + n * v->sn;
}
/* Dropout of keys col0 .. col0+n-1 of (batch b, head h, query row): p[c * stride]
 * becomes 0 or p / keep_prob, the keep decision of element index
 * ((b*N + h)*drop_sq + row)*drop_skv + col being loom_rng_uniform_at(seed, offset, index). */
void attn_dropout_row(const attn_problem *pr, int64_t b, int64_t h, int64_t row, int64_t col0,
                      int n, float *p, int64_t stride);
/* Soft-capping of n scores in the log2 domain (each s = log2(e) * scale * q.k):
 * s = c * tanh(s / c) with c = softcap * log2(e), which is log2(e) times the
 * capped natural score. The drivers apply it to a tile's scores before the
 * masks (a masked score stays -inf): the scalar form, or the level's vector
 * one (loom_attn_kernels.softcap) through attn_softcap. */
static inline void attn_softcap_scores(float *s, int64_t n, float c) {
    const float inv = 1.0f / c;
    for (int64_t i = 0; i < n; i++) s[i] = c * tanhf(s[i] * inv);
}
/* Converts n elements of a row (element stride sd) to f32. */
void attn_load_row(float *dst, const void *src, loom_dtype dt, int64_t sd, int64_t n);
/* Stores n f32 values to a row of dtype dt (element stride sd). */
void attn_store_row(void *dst, loom_dtype dt, int64_t sd, const float *src, int64_t n);
/* Splits [0, n) into nth contiguous parts with roughly equal cost(i) sums; the
 * split points never change results (every item is computed the same way). */
void attn_split_cost(int64_t n, int ith, int nth, double (*cost)(const void *, int64_t),
                     const void *ctx, int64_t *lo, int64_t *hi);
/* The owner of item i (cost c, items before it costing `before` of `total`):
 * the thread whose share of the total holds the item's midpoint (i * nth / n
 * when the total is 0). Non-decreasing in i, so shares are contiguous; the
 * rule of attn_split_cost. */
int attn_split_owner(double before, double c, double total, int64_t i, int64_t n, int nth);
/* The largest share attn_split_cost gives a thread, over an even share
 * (1 = perfectly even, and for nth <= 1). */
double attn_split_imbalance(int64_t n, int nth, double (*cost)(const void *, int64_t),
                            const void *ctx);

static inline int64_t attn_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* An i8 decode cache takes the 16-bit integer products (AVX512_VNNI) unless
 * measurement chose the widening kernels (base/variants.h, attention.i8). */
static inline int loom_attn_i8_vnni(void) {
    return loom_cpu_get()->avx512_vnni && loom_variant(LOOM_VF_ATTN_I8) == 0;
}

/* ------------------------------------------------------------ micro-kernels */

/* Bytes per q row of a level's dec_qprep form (i8's rounded q: up to 128
 * 16-bit values and a scale; bf16's hi and lo parts: up to 256 values each). */
#define ATTN_DEC_QPREP_STRIDE 1088

/* 2^f on [-0.5, 0.5] for the vector kernels' exp2 (every level): Taylor series of
 * e^(f ln 2) to degree 6 (rel. error < 2e-7). */
#define ATTN_EXP2_C1 0.6931471805599453f
#define ATTN_EXP2_C2 0.2402265069591007f
#define ATTN_EXP2_C3 0.0555041086648216f
#define ATTN_EXP2_C4 0.0096181291076285f
#define ATTN_EXP2_C5 0.0013333558146428f
#define ATTN_EXP2_C6 0.0001540353039338f

/* Decode kernels prefetch each cache row's line this many bytes further on in
 * memory (swept 2-32 KiB on Zen 5 with L1 prefetches: 8 KiB best for f32, bf16
 * and i8 caches; on Zen 4 with L2 prefetches still for f32, f16 and i8, while
 * the bf16 kernels take 4 KiB: DEC_BF16_PF_DIST).
 * In a contiguous BNSD cache that is the rows 16 (f32, d = 128) to 128 (i8,
 * d = 64) keys ahead. Not in a paged one: a block of 16 keys of one head is 2-8
 * KiB, and the next block lies anywhere (attn_dec_pf.ahead is 0 there).
 * Every decode prefetch fills L2, not L1 (LOOM_PF_STREAM, base/cpu.h). */
#ifndef ATTN_DEC_PF_DIST /* -DATTN_DEC_PF_DIST=N builds a variant for an A/B */
#define ATTN_DEC_PF_DIST 8192
#endif

/* Rows a decode kernel prefetches while it computes on others: the V rows of
 * the tile during Q.K^T, the next tile's K rows during P.V, so that both
 * streams stay in flight instead of each one starting cold when its phase
 * begins. Row c (c < n, bytes each) is asked for while key c is processed. */
typedef struct attn_dec_pf {
    const void *const *rows;
    int n;
    int64_t bytes;
    /* How far ahead in memory the kernels' own prefetch of the rows they
     * stream reaches (attn_dec_prefetch): ATTN_DEC_PF_DIST for a contiguous
     * cache, 0 for a paged one, whose next rows lie elsewhere (the driver then
     * names them: rows). */
    int64_t ahead;
    /* Paged caches only: own_n rows (own_bytes each) of the stream the kernel
     * reads, a tile further on, row c named with rows[c] (attn_dec_pf_row), in
     * place of the own prefetch at a distance; NULL otherwise. */
    const void *const *own;
    int own_n;
    int64_t own_bytes;
} attn_dec_pf;

/* Decode P.V: acc[r][x] = alpha[r] * acc[r][x] + sum_c p[r][c] * row_c[x] (the
 * kernel table's dec_pv). */
typedef void attn_dec_pv_fn(float *acc, int64_t lda, const float *p, int64_t ldp, int nr,
                            const void *const *rows, loom_dtype dt, int nc, int d,
                            const float *alpha, const attn_dec_pf *pf);

typedef struct loom_attn_kernels {
    const char *name;
    /* Prefill, rows of the tile in vector lanes (mp a multiple of ATTN_ROW_PAD):
     *   c[n][r] = (alpha ? alpha[r] * c[n][r] : 0) + sum_k a[n*san + k*sak] * b[k][r]
     * for n < nn, k < kk, r < mp. QK^T: a = K (san = ld), b = Q^T; PV: a = V (sak = ld),
     * b = P^T. */
    void (*bgemm)(float *c, int64_t ldc, const float *a, int64_t san, int64_t sak,
                  const float *b, int64_t ldb, int nn, int kk, int mp, const float *alpha);
    /* bgemm with A's key rows by pointer (a paged cache read in place): QK^T (pv 0):
     * A(n, k) = rows[n][k]; PV (pv 1): A(n, k) = rows[k][n]. The same operations in
     * the same order as bgemm over those rows gathered. NULL if unsupported. */
    void (*bgemm_rows)(float *c, int64_t ldc, const float *const *rows, int pv, const float *b, int64_t ldb,
                       int nn, int kk, int mp, const float *alpha);
    /* QK^T with bf16 K (rows of ldk elements) and Q^T packed as bf16 pairs
     * [kk/2][mp] (u32): s[n][r] = scale * sum_d k[n][d] q[r][d]. NULL if unsupported. */
    void (*qk_bf16)(float *s, int64_t lds, const uint16_t *k, int64_t ldk, const uint32_t *qt2,
                    int64_t ldq, int nn, int kk, int mp, float scale);
    /* PV^T with bf16 V (rows of ldv elements) and P rounded to bf16:
     * ot[x][r] = alpha[r] ot[x][r] + sum_c v[c][x] p[c][r]; work_p holds
     * ceil(nc/2)*mp and work_v ceil(nc/2)*d u32. v NULL (nc even): work_v already
     * holds V's key pairs and is only read. NULL if unsupported. */
    void (*pv_bf16)(float *ot, int64_t ldo, const uint16_t *v, int64_t ldv, const float *pt,
                    int64_t ldp, const float *alpha, int nc, int d, int mp, uint32_t *work_p,
                    uint32_t *work_v);
    /* Online softmax on s[nc][mp] (log2 domain): per lane r, m and l updated, s
     * replaced by exp2(s - m_new), alpha[r] = exp2(m_old - m_new). Lanes where
     * everything is -inf keep m = -inf, l and P = 0. */
    void (*softmax_cols)(float *s, int64_t lds, int nc, int mp, float *m, float *l,
                         float *alpha);
    /* Prefill's transposes, the same products as their scalar forms (NULL: the
     * driver's scalar loops). pack_t: Q^T, qt[x][r] = scale * rows[r][x] for r < mp
     * (a multiple of ATTN_ROW_PAD), x < d; a NULL row gives zeros. unpack_t: the
     * output, rows[r][x] = ot[x][r] * inv[r] for r < n, x < d (ot's rows hold a
     * multiple of ATTN_ROW_PAD lanes past r); NULL rows are skipped. */
    void (*pack_t)(float *qt, int64_t ldq, const float *const *rows, int mp, int d, float scale);
    void (*unpack_t)(float *const *rows, const float *ot, int64_t ldo, const float *inv, int n, int d);
    /* n contiguous f32/f16/bf16/i8 elements to f32. */
    void (*to_f32)(float *dst, const void *src, loom_dtype dt, int64_t n);
    /* Soft-capping of n contiguous scores, s = c * tanh(s / c) (c: the cap in
     * the scores' log2 units), as attn_softcap_scores within a few ulp of c;
     * NULL: attn_softcap_scores, the scalar form. */
    void (*softcap)(float *s, int64_t n, float c);
    /* n contiguous f32/f16/bf16/i8 elements to bf16, rounded to nearest even
     * (inner_precise 1). NULL where qk_bf16 is. */
    void (*to_bf16)(uint16_t *dst, const void *src, loom_dtype dt, int64_t n);
    /* Decode: s[r][c] = sum_x q[r][x] * row_c[x], rows of dtype dt (f32/f16/bf16/i8),
     * d elements each; q rows hold at least round_up(d, 16) floats (zero padded).
     * pf (may be NULL, may be ignored): rows of the other stream to prefetch
     * along the way, see attn_dec_pf. */
    void (*dec_dot)(float *s, int64_t lds, const float *q, int64_t ldq, int nr,
                    const void *const *rows, loom_dtype dt, int nc, int d,
                    const attn_dec_pf *pf);
    /* Decode: acc[r][x] = alpha[r] * acc[r][x] + sum_c p[r][c] * row_c[x]. */
    attn_dec_pv_fn *dec_pv;
    /* Decode: online softmax along rows s[nr][nc] (log2 domain), as softmax_cols,
     * except that m[r] is a lazy reference max (ATTN_DEC_MAX_SLACK): l, the
     * accumulator and alpha are all relative to it. */
    void (*softmax_rows)(float *s, int64_t lds, int nr, int nc, float *m, float *l,
                         float *alpha);
    /* Decode with a K whose products take q in another form (i8: 16-bit integers,
     * bf16: bf16 hi and lo parts; NULL where the level has none): dec_qprep
     * converts the unit's q rows (as dec_dot takes them) once, into qp (nr rows of
     * ATTN_DEC_QPREP_STRIDE bytes), and returns 1, or returns 0 (K dtype, head dim
     * or CPU not covered: use dec_dot). dec_dot_prep then gives dec_dot's scores
     * for each tile, bit for bit, from qp. hp (inner_precise 1, the same in both
     * calls): a bf16 K takes q rounded to bf16 (one product instead of two). */
    int (*dec_qprep)(void *qp, const float *q, int64_t ldq, int nr, loom_dtype kdt, int d, int hp);
    void (*dec_dot_prep)(float *s, int64_t lds, const void *qp, int nr, const void *const *rows,
                         loom_dtype dt, int nc, int d, const attn_dec_pf *pf, int hp);
    /* Nonzero: dec_dot / dec_pv prefetch the cache rows they stream themselves,
     * so the decode driver issues no per-tile prefetch. */
    int dec_self_prefetch;
    /* Nonzero (with dec_self_prefetch): i8 tiles prefetch the other stream too
     * (as the other cache dtypes' always do). */
    int dec_i8_xpf;
    /* Keys a decode tile takes when K and V are both i8, the head dim is at
     * most 128 and two or more q rows share the kv head (attn_dec_tile; <=
     * ATTN_DEC_TILE_MAX); 0: ATTN_DEC_TILE. Two or three rows (GQA 2, 3:
     * SmolLM2's 9/3 at d = 64) are compute-bound too, and 64-key tiles ran
     * 0.136 -> 0.113 ms (GQA 3, d = 64, 4096 keys, one thread; GQA 2, d = 128
     * 0.39-0.49 -> 0.35). With one q row a kv head (MHA) a
     * tile is bound by memory, and at d = 256 even 64 keys fill 16 KiB a
     * stream: larger tiles read less of the bandwidth there (128 keys, one
     * thread: MHA 71 -> 60 %, d = 256 46 -> 37 %). */
    int dec_i8_tile;
    /* Where decode walks kv heads together (BSND / BSH caches, dec_group), a
     * head's tile covers at most this many bytes of the cache, its key stride
     * times its keys (but at least 16 keys); 0: no bound. */
    int dec_group_span;
    /* Nonzero: decode walks the kv heads one at a time where it would walk
     * them together (dec_group). No level sets it; bench_attention --ab
     * onehead runs the one-head walk against the grouped one in one process. */
    int dec_one_head;
} loom_attn_kernels;

extern const loom_attn_kernels loom_attn_kernels_generic;
#if defined(__x86_64__)
extern const loom_attn_kernels loom_attn_kernels_avx2;
extern const loom_attn_kernels loom_attn_kernels_avx512;
extern const loom_attn_kernels loom_attn_kernels_avx512_bf16;
#endif
/* The cap of kern's level over n scores (kern->softcap, else the scalar form);
 * softcap is the cap in natural units. */
static inline void attn_softcap(const loom_attn_kernels *kern, float *s, int64_t n, float softcap) {
    const float c = softcap * (float)ATTN_LOG2E;
    if (kern->softcap) kern->softcap(s, n, c);
    else attn_softcap_scores(s, n, c);
}

/* Kernels for a level (>= GENERIC; the best the CPU supports at or below it). */
const loom_attn_kernels *loom_attn_kernels_for(loom_isa isa);

/* Keys a decode tile of level kn takes for K and V cache dtypes kdt and vdt,
 * head dim d, and rows q rows a unit (see dec_i8_tile). Head dims up to 16
 * take the longest tile: a tile's fixed work (row addresses, the softmax's
 * pass, three kernel calls) outweighs its keys' arithmetic there. */
static inline int attn_dec_tile(const loom_attn_kernels *kn, loom_dtype kdt, loom_dtype vdt, int64_t d,
                                int64_t rows) {
    int i8 = kdt == LOOM_I8 && vdt == LOOM_I8 && d <= 128 && rows >= 2 && kn->dec_i8_tile > 0;
    if (i8) return kn->dec_i8_tile;
    return d <= 16 ? ATTN_DEC_TILE_MAX : ATTN_DEC_TILE;
}

/* Decode micro-kernels live in incre_attention_<isa>.c. */
/* dec_dot through a level's prepared form (dec_qprep, dec_dot_prep), for a
 * direct call that has no prepared q: rows converted four at a time on the
 * stack (incre_attention.c). 0 if qprep does not take this K dtype and head
 * dim (nothing done). */
int attn_dec_dot_via_prep(int (*qprep)(void *, const float *, int64_t, int, loom_dtype, int, int),
                          void (*dot_prep)(float *, int64_t, const void *, int, const void *const *,
                                           loom_dtype, int, int, const attn_dec_pf *, int),
                          float *s, int64_t lds, const float *q, int64_t ldq, int nr,
                          const void *const *rows, loom_dtype dt, int nc, int d,
                          const attn_dec_pf *pf);

void loom_attn_dec_dot_generic(float *s, int64_t lds, const float *q, int64_t ldq, int nr,
                               const void *const *rows, loom_dtype dt, int nc, int d,
                               const attn_dec_pf *pf);
void loom_attn_dec_pv_generic(float *acc, int64_t lda, const float *p, int64_t ldp, int nr,
                              const void *const *rows, loom_dtype dt, int nc, int d,
                              const float *alpha, const attn_dec_pf *pf);
void loom_attn_softmax_rows_generic(float *s, int64_t lds, int nr, int nc, float *m, float *l,
                                    float *alpha);
void loom_attn_to_f32_generic(float *dst, const void *src, loom_dtype dt, int64_t n);
#if defined(__x86_64__)
void loom_attn_dec_dot_avx2(float *s, int64_t lds, const float *q, int64_t ldq, int nr,
                            const void *const *rows, loom_dtype dt, int nc, int d,
                            const attn_dec_pf *pf);
void loom_attn_dec_pv_avx2(float *acc, int64_t lda, const float *p, int64_t ldp, int nr,
                           const void *const *rows, loom_dtype dt, int nc, int d,
                           const float *alpha, const attn_dec_pf *pf);
void loom_attn_softmax_rows_avx2(float *s, int64_t lds, int nr, int nc, float *m, float *l,
                                 float *alpha);
/* i8 caches in 16-bit integer arithmetic (incre_attention_avx2_i8.c), head dims
 * that are multiples of 16 up to 256: dec_qprep / dec_dot_prep of the AVX2
 * level, and the P.V of nr <= 4 rows against an i8 V (0: not done, as
 * attn_dec_pv_i8w). */
int loom_attn_dec_qprep_avx2(void *qp, const float *q, int64_t ldq, int nr, loom_dtype kdt, int d, int hp);
void loom_attn_dec_dot_prep_avx2(float *s, int64_t lds, const void *qp, int nr, const void *const *rows,
                                 loom_dtype dt, int nc, int d, const attn_dec_pf *pf, int hp);
int attn_dec_pv_i8w_avx2(float *acc, int64_t lda, const float *p, int64_t ldp, int nr,
                         const void *const *rows, int nc, int d, const float *alpha, int own,
                         const attn_dec_pf *pf);
void loom_attn_dec_dot_avx512(float *s, int64_t lds, const float *q, int64_t ldq, int nr,
                              const void *const *rows, loom_dtype dt, int nc, int d,
                              const attn_dec_pf *pf);
void loom_attn_dec_pv_avx512(float *acc, int64_t lda, const float *p, int64_t ldp, int nr,
                             const void *const *rows, loom_dtype dt, int nc, int d,
                             const float *alpha, const attn_dec_pf *pf);
/* As the two above; bf16 caches with d = 64 or 128 use vdpbf16ps (AVX512_BF16 CPUs). */
void loom_attn_dec_dot_avx512bf(float *s, int64_t lds, const float *q, int64_t ldq, int nr,
                                const void *const *rows, loom_dtype dt, int nc, int d,
                                const attn_dec_pf *pf);
void loom_attn_dec_pv_avx512bf(float *acc, int64_t lda, const float *p, int64_t ldp, int nr,
                               const void *const *rows, loom_dtype dt, int nc, int d,
                               const float *alpha, const attn_dec_pf *pf);
void loom_attn_softmax_rows_avx512(float *s, int64_t lds, int nr, int nc, float *m, float *l,
                                   float *alpha);
int loom_attn_dec_qprep_avx512(void *qp, const float *q, int64_t ldq, int nr, loom_dtype kdt,
                               int d, int hp);
void loom_attn_dec_dot_prep_avx512(float *s, int64_t lds, const void *qp, int nr,
                                   const void *const *rows, loom_dtype dt, int nc, int d,
                                   const attn_dec_pf *pf, int hp);
int loom_attn_dec_qprep_avx512bf(void *qp, const float *q, int64_t ldq, int nr, loom_dtype kdt,
                                 int d, int hp);
void loom_attn_dec_dot_prep_avx512bf(float *s, int64_t lds, const void *qp, int nr,
                                     const void *const *rows, loom_dtype dt, int nc, int d,
                                     const attn_dec_pf *pf, int hp);
void loom_attn_to_f32_avx2(float *dst, const void *src, loom_dtype dt, int64_t n);
void loom_attn_to_f32_avx512(float *dst, const void *src, loom_dtype dt, int64_t n);
#endif

/* ------------------------------------------------------------ drivers */

/* Prefill driver (flash_attention.c) on a resolved problem; _all also covers
 * the reference kernel's scratch. */
size_t attn_prefill_scratch(const attn_problem *pr);
size_t attn_prefill_scratch_all(const attn_problem *pr);
loom_status attn_prefill_run(const attn_problem *pr, const loom_attn_kernels *kern, int ith,
                             int nth, void *scratch, size_t scratch_bytes);

/* Runs fn(ith, nth, job) on every thread of pool (NULL: this thread), whose
 * workers store a failure in *status; then frees scratch (the job's buffer,
 * from loom_alloc_aligned) and returns the failure, if any, as op's error. */
loom_status attn_run_workers(loom_pool *pool, void (*fn)(int, int, void *), void *job, atomic_int *status,
                             void *scratch, const char *op);

/* Decode driver (incre_attention_launch.c): scratch (incl. the reference's) and the
 * pool runner with optional per-batch query lengths. */
size_t attn_decode_scratch(const attn_problem *pr);
loom_status attn_decode_pool(const loom_incre_flash_attention_tensors *t,
                             const loom_incre_flash_attention_params *p, const int64_t *q_lens,
                             loom_pool *pool);
/* Whether decode on nth threads runs split-KV and a merge (whole units would
 * leave some thread over 10% above an even share and the chunks share out
 * better), and the workspace that needs. */
int attn_decode_splits(const attn_problem *pr, int nth);
size_t attn_decode_workspace(const attn_problem *pr);
/* The op table's kernel: phase `phase` of thread ith of nth, one plan for the
 * decision and the run: split then merge (phases 0 and 1, the partials in
 * shared, attn_decode_workspace bytes) where attn_decode_splits, else one
 * launch in phase 0 and nothing in phase 1. */
loom_status attn_decode_phase(const attn_problem *pr, const loom_attn_kernels *kern, int phase, int ith,
                              int nth, void *scratch, size_t scratch_bytes, void *shared);
/* kv heads [h0, h1) of every batch entry, their units folded whole by the
 * calling thread and their output heads written (incre_attention_linear: a
 * thread's head groups). scratch: attn_decode_scratch bytes. */
loom_status attn_decode_heads(const attn_problem *pr, const loom_attn_kernels *kern, int64_t h0, int64_t h1,
                              void *scratch, size_t bytes);
/* incre_flash_attention over a node's inputs (src, n_src, attrs as that op
 * takes them) with its output at out (data bound): kv heads [h0, h1) by the
 * calling thread (the reference level: every head). scratch: the op's
 * scratch_size bytes. */
loom_status attn_incre_node_heads(const loom_tensor *const *src, int n_src, const void *attrs, loom_tensor *out,
                                  loom_isa isa, int64_t h0, int64_t h1, void *scratch, size_t bytes);
/* attn_decode_pool with the kernel table kern instead of the level's (benchmarks' A/B). */
loom_status attn_decode_pool_with(const loom_incre_flash_attention_tensors *t,
                                  const loom_incre_flash_attention_params *p, const int64_t *q_lens,
                                  loom_pool *pool, const loom_attn_kernels *kern);
/* How many kv heads of a batch entry one thread walks together (1: one by one). */
int64_t attn_decode_group(const attn_problem *pr);
/* The most kv heads thread ith of nth walks together in the split launch (0: no items). */
int64_t attn_decode_split_group(const attn_problem *pr, int ith, int nth);

/* Cost of the fused kernel: flops of the visible (query, key) pairs, bytes of
 * what it loads (valid Q rows, visible K/V rows, visible mask) and stores. */
void attn_cost(const attn_problem *pr, loom_cost *c);

#endif
