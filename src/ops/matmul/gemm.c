/*
 * GEMM path of the matmul family (M >= LOOM_GEMM_MIN_M): float weights, and
 * block-quantized weights with full activations (their blocks dequantized to
 * f32 while packing B, loom_matmul_full_act).
 *
 * BLIS-style loops over one thread's rectangle of y:
 *   jc (nc columns) -> pc (kc of K) -> ic (mc rows): pack the A block (mc x kc)
 *     -> jr (nr columns): pack the B micro-panel on first use (kc x nr, L2)
 *        -> ir (mr rows): micro-kernel, A panels streaming past the B panel;
 *           on the last pc the epilogue runs on the finished tile in L1.
 * Block sizes: make_plan. Kernel sets: gemm_kernels.h.
 * kc depends only on K and the kernel set, so every element of y is summed
 * in the same order whatever the thread split: results are bit-identical for
 * any nth. Threads own disjoint column ranges (multiples of nr), or disjoint
 * row ranges when N is too narrow to feed them all; there is no
 * synchronisation, each thread packs what it needs into its own scratch.
 */
#include "ops/matmul/gemm_kernels.h"

#include <string.h>

#include "base/cpu.h"
#include "base/variants.h"

void loom_gemm_tile_ep_scalar(const loom_gemm_tile_ep *t) {
    for (int r = 0; r < t->rows; r++) {
        float *row = t->tile + r * t->ld;
        for (int c = 0; c < t->cols; c++) {
            float v = row[c] * t->scale;
            if (t->bias) v += t->bias[c];
            v = loom_act_apply(t->act, v);
            if (t->mul) v *= t->mul[r * t->ld_mul + c];
            if (t->res) v += t->res[r * t->ld_res + c];
            row[c] = v;
        }
    }
}

/* ------------------------------------------------------------ planning */

typedef struct gemm_plan {
    const loom_gemm_kset *ks;
    int64_t kc;            /* k values per pc block (multiple of 16, a function of K only) */
    int64_t mc_one;        /* rows up to this make one row block */
    int64_t mc_multi;      /* row block when there are more */
    int64_t nc_max;
    int64_t nc_alias;      /* columns per chunk when mul/residual alias y */
} gemm_plan;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t m) { return ceil_div(a, m) * m; }
static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Kernel set for wt at level isa, never above what this CPU runs. */
static const loom_gemm_kset *pick_kset(loom_isa isa, loom_dtype wt) {
    const loom_cpu_features *f = loom_cpu_get();
    const loom_gemm_kset *ks = NULL;
    if (isa >= LOOM_ISA_AVX512 && f->avx512f && f->avx512bw && f->avx512vl && f->fma) {
        /* native bf16 products, unless measurement chose widening (base/variants.h) */
        if (wt == LOOM_BF16 && f->avx512_bf16 && loom_variant(LOOM_VF_GEMM_BF16) == 0)
            ks = loom_gemm_kset_avx512_bf16();
        if (!ks) ks = loom_gemm_kset_avx512(wt);
    }
    if (!ks && isa >= LOOM_ISA_AVX2 && f->avx2 && f->fma && f->f16c) ks = loom_gemm_kset_avx2(wt);
    return ks ? ks : loom_gemm_kset_generic(wt);
}

int loom_gemm_tile_ep_init(loom_gemm_tile_ep *t, const loom_epilogue *e, float *tile, int64_t ld,
                           int rows, int cols, int64_t m, int64_t n) {
    if (!(e->scale != 0.0f || e->bias || e->act != LOOM_ACT_NONE || e->mul || e->residual)) return 0;
    *t = (loom_gemm_tile_ep){.tile = tile, .ld = ld, .rows = rows, .cols = cols,
                             .scale = e->scale != 0.0f ? e->scale : 1.0f, .act = e->act,
                             .bias = e->bias ? e->bias + n : NULL};
    if (e->mul) t->mul = e->mul + m * e->ld_mul + n, t->ld_mul = e->ld_mul;
    if (e->residual) t->res = e->residual + m * e->ld_res + n, t->ld_res = e->ld_res;
    return 1;
}

void loom_gemm_tile_epilogue(loom_isa isa, const loom_gemm_tile_ep *t) {
    pick_kset(isa, LOOM_F32)->epilogue(t);
}

static struct { int64_t kc, mc, nc; } forced;

void loom_gemm_set_blocks(int64_t kc, int64_t mc, int64_t nc) {
    forced.kc = kc, forced.mc = mc, forced.nc = nc;
}

/* Block sizes from the cache sizes. Every k block costs a pass of loads and
 * stores over the thread's part of y, so kc is as large as lets the B
 * micro-panel (kc x nr) stay in a quarter of L2 while the A micro-panels
 * stream from L3 past it. Up to an eighth of L3 of A (mc x kc), all rows make
 * one block: each B panel is then used right after it is packed and needs no
 * storage. Taller x is cut into blocks of a sixteenth of L3, and the B block
 * (kc x nc) reused across them takes a quarter of L3 shared by the threads:
 * smaller blocks measured slower on one thread (x packed again for more
 * column blocks), larger ones slower on two (L3 overflows). Only kc changes
 * the order of the sums, and it depends on K alone. */
static void make_plan(const loom_gemm_kset *ks, loom_dtype wt, int64_t K, int nth, gemm_plan *p) {
    const loom_cpu_features *f = loom_cpu_get();
    /* quantized W is packed whole blocks at a time */
    const int64_t kq = loom_dtype_is_quantized(wt) ? LOOM_QBLOCK : 16;
    int64_t l2 = clamp64(f->l2_bytes, 256 << 10, 8 << 20);
    int64_t l3 = clamp64(f->l3_bytes, 2 << 20, 64 << 20);
    p->ks = ks;
    int64_t kc_max = clamp64(l2 / 4 / (ks->nr * ks->elem) / 16 * 16, 256, 4096);
    /* equal blocks, so a K just above kc_max does not leave a sliver */
    p->kc = round_up(ceil_div(K, ceil_div(K, kc_max)), kq);
    int64_t kbytes = p->kc * ks->elem;
    p->mc_one = round_up(clamp64(l3 / 8 / kbytes, 1, 1 << 16), ks->mr);
    p->mc_multi = round_up(clamp64(l3 / 16 / kbytes, 1, 1 << 16), ks->mr);
    p->nc_max = clamp64(l3 / 4 / nth / kbytes / ks->nr, 1, 1 << 16) * ks->nr;
    p->nc_alias = round_up(256, ks->nr);
    if (forced.kc > 0) p->kc = round_up(ceil_div(K, ceil_div(K, forced.kc)), kq);
    if (forced.mc > 0) p->mc_one = p->mc_multi = round_up(forced.mc, ks->mr);
    if (forced.nc > 0) p->nc_max = round_up(forced.nc, ks->nr);
}

/* Length of equal blocks of at most max (a multiple of align) covering n. */
static int64_t block_len(int64_t n, int64_t max, int64_t align) {
    return round_up(ceil_div(n, ceil_div(n, max)), align);
}

/* Rows per row block of a rectangle of n rows. */
static int64_t row_block(const gemm_plan *p, int64_t n) {
    return n <= p->mc_one ? n : block_len(n, p->mc_multi, p->ks->mr);
}

static int ep_aliases(const loom_matmul_args *a) {
    return a->ep && ((a->ep->mul && a->ep->mul == a->y) || (a->ep->residual && a->ep->residual == a->y));
}

/* Packed A and B bytes for a rectangle of rows x cols: the A block, and one
 * B panel when the rows fit one block (gemm_rect), else a B block. Both grow
 * with rows and cols, so sizing for M x N covers any thread's share. */
static void plan_bytes(const gemm_plan *p, int64_t rows, int64_t cols, size_t *a_bytes,
                       size_t *b_bytes) {
    const loom_gemm_kset *ks = p->ks;
    size_t kg = (size_t)round_up(p->kc, ks->kstep) * (size_t)ks->elem;
    int64_t mc = p->mc_one < round_up(rows, ks->mr) ? p->mc_one : round_up(rows, ks->mr);
    int64_t nc = p->nc_max < round_up(cols, ks->nr) ? p->nc_max : round_up(cols, ks->nr);
    *a_bytes = (size_t)mc * kg;
    *b_bytes = (size_t)(rows <= p->mc_one ? ks->nr : nc) * kg;
}

/* The normalised rows of one A micro-panel (norm_gamma). */
static size_t stage_bytes(const gemm_plan *p) {
    return (size_t)p->ks->mr * (size_t)p->kc * sizeof(float) + 64;
}

static size_t plan_scratch(const gemm_plan *p, const loom_matmul_args *a) {
    size_t ab, bb;
    plan_bytes(p, a->M, a->N, &ab, &bb);
    size_t s = ab + bb + 2 * 64;
    if (ep_aliases(a)) s += (size_t)p->mc_one * (size_t)p->nc_alias * sizeof(float) + 64;
    if (a->norm_gamma) s += stage_bytes(p);
    return s;
}

/* ------------------------------------------------------------ driver */

typedef struct gemm_ctx {
    const loom_matmul_args *a;
    const loom_gemm_kset *ks;
    const gemm_plan *p;
    size_t wrow;                   /* bytes per W row */
    size_t a_panel, b_panel;       /* bytes per packed micro-panel at full kc */
    char *pa, *pb;                 /* packed A block, packed B block */
    float *save;                   /* old y of the chunk when mul/residual alias y */
    float *stage;                  /* norm_gamma: a micro-panel's rows of x normalised, mr x kc */
    loom_isa isa;
} gemm_ctx;

static void tile_epilogue(const gemm_ctx *g, float *c, int64_t m, int64_t n, int rows, int cols,
                          int64_t m0, int64_t n0, int64_t save_ld) {
    const loom_matmul_args *a = g->a;
    const loom_epilogue *e = a->ep;
    loom_gemm_tile_ep t;
    if (loom_gemm_tile_ep_init(&t, e, c, a->ldy, rows, cols, m, n)) {
        /* operands aliasing y are read from the chunk's saved old values */
        const float *saved = g->save ? g->save + (m - m0) * save_ld + (n - n0) : NULL;
        if (e->mul == a->y) t.mul = saved, t.ld_mul = save_ld;
        if (e->residual == a->y) t.res = saved, t.ld_res = save_ld;
        g->ks->epilogue(&t);
    }
    if (e->fn) e->fn(c, a->ldy, m, n, rows, cols, e->user);
}

/* Rows [m0, m1) x columns [n0, n1) of y, all of K. */
static void gemm_rect(const gemm_ctx *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    const loom_matmul_args *a = g->a;
    const loom_gemm_kset *ks = g->ks;
    const int mr = ks->mr, nr = ks->nr;
    const int64_t K = a->K, kc_full = g->p->kc;
    const int64_t mc = row_block(g->p, m1 - m0);
    /* with one row block each B panel is used right after it is packed, so
     * the columns need no blocking and one panel slot serves them all */
    const int one_block = mc >= m1 - m0;
    const int64_t nc = one_block ? n1 - n0 : block_len(n1 - n0, g->p->nc_max, nr);
    const int64_t save_ld = n1 - n0;
    for (int64_t jc = n0; jc < n1; jc += nc) {
        int64_t ncur = n1 - jc < nc ? n1 - jc : nc;
        for (int64_t pc = 0; pc < K; pc += kc_full) {
            int64_t kc = K - pc < kc_full ? K - pc : kc_full;
            int first = pc == 0, last = pc + kc == K;
            for (int64_t ic = m0; ic < m1; ic += mc) {
                int64_t mcur = m1 - ic < mc ? m1 - ic : mc;
                for (int64_t ir = 0; ir < mcur; ir += mr) {
                    int rows = (int)(mcur - ir < mr ? mcur - ir : mr);
                    if (g->stage) { /* RMSNorm on the fly: the micro-panel's rows normalised first */
                        for (int r = 0; r < rows; r++)
                            loom_matmul_norm_row(a, g->isa, ic + ir + r, pc, kc, g->stage + r * kc);
                        ks->pack_a(g->stage, kc, rows, kc, g->pa + (ir / mr) * g->a_panel);
                    } else {
                        ks->pack_a(a->x + (ic + ir) * a->ldx + pc, a->ldx, rows, kc,
                                   g->pa + (ir / mr) * g->a_panel);
                    }
                }
                for (int64_t jr = 0; jr < ncur; jr += nr) {
                    int cols = (int)(ncur - jr < nr ? ncur - jr : nr);
                    char *bp = g->pb + (one_block ? 0 : (jr / nr) * g->b_panel);
                    if (ic == m0) {
                        const char *w = (const char *)a->w + (size_t)(jc + jr) * g->wrow +
                                        loom_dtype_row_bytes(a->wtype, pc);
                        ks->pack_b(w, a->ldw, cols, kc, bp);
                    }
                    for (int64_t ir = 0; ir < mcur; ir += mr) {
                        int rows = (int)(mcur - ir < mr ? mcur - ir : mr);
                        int64_t m = ic + ir, n = jc + jr;
                        float *c = a->y + m * a->ldy + n;
                        if (first && g->save)
                            for (int r = 0; r < rows; r++)
                                memcpy(g->save + (m + r - m0) * save_ld + (n - n0), c + r * a->ldy,
                                       (size_t)cols * sizeof(float));
                        ks->micro(kc, g->pa + (ir / mr) * g->a_panel, bp, c, a->ldy, rows, cols,
                                  !first);
                        if (last && a->ep) tile_epilogue(g, c, m, n, rows, cols, m0, n0, save_ld);
                    }
                }
            }
        }
    }
}

static char *align64(char *p) { return (char *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

size_t loom_gemm_scratch_size(const loom_matmul_args *a) {
    /* any level may run: size for the largest kernel set */
    const loom_gemm_kset *sets[4] = {loom_gemm_kset_generic(a->wtype), loom_gemm_kset_avx2(a->wtype),
                                     loom_gemm_kset_avx512(a->wtype),
                                     a->wtype == LOOM_BF16 ? loom_gemm_kset_avx512_bf16() : NULL};
    size_t s = 0;
    for (int i = 0; i < 4; i++) {
        if (!sets[i]) continue;
        gemm_plan p;
        make_plan(sets[i], a->wtype, a->K, 1, &p);  /* one thread: the largest blocks */
        size_t t = plan_scratch(&p, a);
        if (t > s) s = t;
    }
    return s;
}

loom_status loom_gemm_run(const loom_matmul_args *a, loom_isa isa, int ith, int nth, void *scratch) {
    gemm_plan p;
    make_plan(pick_kset(isa, a->wtype), a->wtype, a->K, nth, &p);
    const loom_gemm_kset *ks = p.ks;

    /* Split N in nr-multiples unless splitting M in mr-multiples gives the
     * busiest thread clearly less work (narrow N). */
    int64_t un = ceil_div(a->N, ks->nr), um = ceil_div(a->M, ks->mr);
    double work_n = (double)ceil_div(un, nth) * ks->nr * (double)a->M;
    double work_m = (double)ceil_div(um, nth) * ks->mr * (double)a->N;
    int64_t m0 = 0, m1 = a->M, n0 = 0, n1 = a->N;
    if (nth > 1 && work_m < 0.9 * work_n)
        loom_matmul_split(a->M, ks->mr, ith, nth, &m0, &m1);
    else
        loom_matmul_split(a->N, ks->nr, ith, nth, &n0, &n1);
    if (m0 >= m1 || n0 >= n1) return LOOM_OK;

    int64_t kg = round_up(p.kc, ks->kstep);
    size_t ab, bb;
    plan_bytes(&p, m1 - m0, n1 - n0, &ab, &bb);
    gemm_ctx g = {.a = a, .ks = ks, .p = &p, .wrow = loom_dtype_row_bytes(a->wtype, a->ldw)};
    g.a_panel = (size_t)ks->mr * (size_t)kg * (size_t)ks->elem;
    g.b_panel = (size_t)ks->nr * (size_t)kg * (size_t)ks->elem;
    g.pa = align64(scratch);
    g.pb = align64(g.pa + ab);
    g.isa = isa;
    /* the stage goes last (after the saved chunk when there is one) */
    char *end = g.pb + bb;
    if (ep_aliases(a)) end = align64(end) + (size_t)p.mc_one * (size_t)p.nc_alias * sizeof(float);
    if (a->norm_gamma) g.stage = (float *)align64(end);
    if (!ep_aliases(a)) {
        gemm_rect(&g, m0, m1, n0, n1);
        return LOOM_OK;
    }
    /* mul/residual alias y: y's old values must survive the partial sums the
     * K blocks leave in y, so run chunks small enough to save them first. */
    g.save = (float *)align64(g.pb + bb);
    int64_t mc = row_block(&p, m1 - m0);
    for (int64_t i = m0; i < m1; i += mc)
        for (int64_t j = n0; j < n1; j += p.nc_alias)
            gemm_rect(&g, i, i + mc < m1 ? i + mc : m1, j, j + p.nc_alias < n1 ? j + p.nc_alias : n1);
    return LOOM_OK;
}
