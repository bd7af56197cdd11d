/*
 * Quantized GEMM path of the matmul family (W in q8_0, q4_0 or q4_1, q8
 * activations; from LOOM_GEMM_MIN_M rows, and below that where matmul.c's
 * use_gemv says: batch-invariant runs, and at the VNNI level two rows on or
 * one row over weights packed once): int8 dot products of W's blocks against
 * x quantized per block of 32 to q8, scales applied in f32 per block.
 *
 * Each thread owns a contiguous range of W rows (output columns). It
 * quantizes up to MC rows of x into its scratch, packs nr rows of W at a time
 * into a panel (all of K; or reads the panels packed once, packed.c), and
 * runs the register tile over the panel in chunks (KC_BLOCKS, KC_BYTES) so the
 * panel chunk stays in L1 while the x chunk streams from L2. Partial sums go
 * through y (f32, exact); with an epilogue they go through a scratch tile
 * instead, finished (epilogue, copy to y) while it is still in L2, since the
 * epilogue may read y's old values.
 *
 * This file holds the driver, the generic packing and the generic kernel set.
 */
#include "ops/matmul/gemm_q_kernels.h"
#include "ops/matmul/gemv_kernels.h"

#include <string.h>

#include "base/alloc.h"

#define KC_BLOCKS 16              /* per-call panels: 512 k per chunk, 20 KiB at 32 rows */
#define KC_BYTES (20u << 10)      /* packed panels: bytes per k chunk, to stay in L1 */
#define X_SCRATCH (4u << 20)      /* bytes of quantized x per MC block */

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Rows of x quantized at a time: as many as fit X_SCRATCH, at least one tile. */
static int64_t mc_rows(const loom_matmul_args *a) {
    int64_t mc = (int64_t)(X_SCRATCH / loom_q8_act_bytes(a->K));
    if (mc < LOOM_GEMM_Q_MAX_MR) mc = LOOM_GEMM_Q_MAX_MR;
    return mc < a->M ? mc : a->M;
}

/* Scratch: quantized x rows, the packed panel, the output tile. */
size_t loom_gemm_q_scratch_size(const loom_matmul_args *a) {
    size_t mc = (size_t)mc_rows(a);
    size_t panel = (size_t)(a->K / 32) * loom_gemm_q_panel_block_bytes(LOOM_GEMM_Q_MAX_NR);
    return align64(mc * loom_q8_act_bytes(a->K)) + panel + mc * LOOM_GEMM_Q_MAX_NR * sizeof(float) +
           LOOM_ALIGN;
}

/* ------------------------------------------------------------ generic packing */

void loom_gemm_q_pack_generic(loom_dtype wt, const void *w, size_t row_bytes, int cols, int64_t nb,
                              void *panel, int nr, int q8_unsigned) {
    size_t bb = loom_gemm_q_panel_block_bytes(nr);
    memset(panel, 0, (size_t)nb * bb);
    for (int c = 0; c < cols; c++) {
        const char *row = (const char *)w + (size_t)c * row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *q = (uint8_t *)panel + (size_t)b * bb;
            float *d = (float *)(q + 32 * nr), *mn = d + nr;
            uint8_t v[32];
            if (wt == LOOM_Q8_0) {
                const loom_block_q8_0 *blk = (const loom_block_q8_0 *)row + b;
                for (int j = 0; j < 32; j++) v[j] = (uint8_t)(blk->qs[j] ^ (q8_unsigned ? 0x80 : 0));
                d[c] = loom_f16_to_f32(blk->d);
            } else {
                const uint8_t *qs;
                if (wt == LOOM_Q4_0) {
                    const loom_block_q4_0 *blk = (const loom_block_q4_0 *)row + b;
                    qs = blk->qs;
                    d[c] = loom_f16_to_f32(blk->d);
                } else {
                    const loom_block_q4_1 *blk = (const loom_block_q4_1 *)row + b;
                    qs = blk->qs;
                    d[c] = loom_f16_to_f32(blk->d);
                    mn[c] = loom_f16_to_f32(blk->m);
                }
                for (int j = 0; j < 16; j++) {
                    v[j] = qs[j] & 0x0F;
                    v[j + 16] = qs[j] >> 4;
                }
            }
            for (int j = 0; j < 8; j++) memcpy(q + ((size_t)j * nr + (size_t)c) * 4, v + 4 * j, 4);
        }
    }
}

/* ------------------------------------------------------------ generic kernel set */

enum { G_MR = 4, G_NR = 8 };

static void pack_g(loom_dtype wt, const void *w, size_t row_bytes, int cols, int64_t nb, void *panel) {
    loom_gemm_q_pack_generic(wt, w, row_bytes, cols, nb, panel, G_NR, 0);
}

static void micro_g(loom_dtype wt, int64_t b0, int64_t nblk, const loom_q8_act *xr, const void *panel,
                    float *c, int64_t ldc, int rows, int cols, int accumulate) {
    size_t bb = loom_gemm_q_panel_block_bytes(G_NR);
    float acc[G_MR][G_NR];
    for (int i = 0; i < rows; i++)
        for (int n = 0; n < G_NR; n++) acc[i][n] = accumulate && n < cols ? c[i * ldc + n] : 0.0f;
    for (int64_t b = b0; b < b0 + nblk; b++) {
        const uint8_t *q = (const uint8_t *)panel + (size_t)(b - b0) * bb;
        const float *d = (const float *)(q + 32 * G_NR), *mn = d + G_NR;
        for (int i = 0; i < rows; i++) {
            const int8_t *xs = xr[i].qs + b * 32;
            for (int n = 0; n < G_NR; n++) {
                int32_t dot = xr[i].bias[b];
                for (int j = 0; j < 8; j++)
                    for (int t = 0; t < 4; t++) {
                        uint8_t v = q[(j * G_NR + n) * 4 + t];
                        /* q8_0 is packed signed here; q4 nibbles are 0..15 */
                        int32_t wv = wt == LOOM_Q8_0 ? (int32_t)(int8_t)v : (int32_t)v;
                        dot += wv * xs[4 * j + t];
                    }
                acc[i][n] += (float)dot * (d[n] * xr[i].d[b]);
                acc[i][n] += mn[n] * xr[i].s[b];
            }
        }
    }
    for (int i = 0; i < rows; i++)
        for (int n = 0; n < cols; n++) c[i * ldc + n] = acc[i][n];
}

static const loom_gemm_q_kset kset_generic = {"generic", G_MR, G_NR, 0, pack_g, micro_g, NULL};

const loom_gemm_q_kset *loom_gemm_q_kset_generic(void) { return &kset_generic; }

/* ------------------------------------------------------------ driver */

/* The view of the row `bytes` after v in the same buffer (rows share a layout). */
static inline loom_q8_act act_shift(loom_q8_act v, size_t bytes) {
    v.qs = (int8_t *)((char *)v.qs + bytes);
    v.d = (float *)((char *)v.d + bytes);
    v.bias = (int32_t *)((char *)v.bias + bytes);
    v.s = (float *)((char *)v.s + bytes);
    return v;
}

const loom_gemm_q_kset *loom_gemm_q_kset_for(loom_isa isa) {
#if defined(__x86_64__)
    if (isa >= LOOM_ISA_AVX512 && loom_cpu_get()->avx512_vnni) return loom_gemm_q_kset_avx512_vnni();
    if (isa >= LOOM_ISA_AVX2) return loom_gemm_q_kset_avx2();
#endif
    (void)isa;
    return loom_gemm_q_kset_generic();
}

static int32_t bias_mul_for(const loom_matmul_args *a, const loom_gemm_q_kset *ks) {
    return a->wtype == LOOM_Q4_0 ? -8 : a->wtype == LOOM_Q8_0 && ks->q8_unsigned ? -128 : 0;
}

int32_t loom_gemm_q_bias_mul(const loom_matmul_args *a, loom_isa isa) {
    return bias_mul_for(a, loom_gemm_q_kset_for(isa));
}

void loom_gemm_q_quantize_x(const loom_matmul_args *a, loom_isa isa, int64_t m0, int64_t m1, void *xq) {
    int32_t bias_mul = bias_mul_for(a, loom_gemm_q_kset_for(isa));
    size_t xrow = loom_q8_act_bytes(a->K);
    loom_q8_act x0 = loom_q8_act_view(xq, a->K);
    for (int64_t m = m0; m < m1; m++)
        loom_quantize_act(isa, a->x + m * a->ldx, a->K, bias_mul, act_shift(x0, (size_t)m * xrow));
}

loom_status loom_gemm_q_run(const loom_matmul_args *a, loom_isa isa, int ith, int nth, void *scratch,
                            const uint8_t *packed) {
    const loom_gemm_q_kset *ks = loom_gemm_q_kset_for(isa);
    int64_t lo, hi;
    loom_matmul_split(a->N, ks->nr, ith, nth, &lo, &hi);
    if (lo >= hi) return LOOM_OK;
    int64_t K = a->K, nb = K / 32, mc = mc_rows(a);
    int32_t bias_mul = bias_mul_for(a, ks);
    size_t xrow = loom_q8_act_bytes(K), wrow = loom_dtype_row_bytes(a->wtype, a->ldw);
    size_t bb = loom_gemm_q_panel_block_bytes(ks->nr);
    char *xbuf = scratch, *panel = xbuf + align64((size_t)mc * xrow);
    float *tile = (float *)(panel + (size_t)nb * loom_gemm_q_panel_block_bytes(LOOM_GEMM_Q_MAX_NR));
    /* weights packed once at load: the panels are read where they are */
    const size_t pbb = packed ? loom_gemm_q_packed_block_bytes(a->wtype, ks->nr) : bb;
    loom_q8_act xall = a->xq ? loom_q8_act_view((void *)a->xq, K) : loom_q8_act_view(xbuf, K);
    if (a->xq) mc = a->M; /* everything is quantized already */
    /* k chunks: per-call panels KC_BLOCKS blocks (20 KiB at 32 rows); packed
     * ones at most KC_BYTES of panel, of even size (SmolLM2's 18 blocks are one
     * chunk, not 16 + 2). The partial sums pass through c in f32 between
     * chunks, so the chunking never changes a bit. */
    int64_t kc = packed ? (int64_t)(KC_BYTES / pbb) : KC_BLOCKS, nchunk;
    if (kc < 1) kc = 1;
    nchunk = (nb + kc - 1) / kc;
    kc = nchunk > 0 ? (nb + nchunk - 1) / nchunk : 1;
    for (int64_t m0 = 0; m0 < a->M; m0 += mc) {
        int64_t mrows = a->M - m0 < mc ? a->M - m0 : mc;
        loom_q8_act x0 = xall;
        if (a->xq) x0 = act_shift(xall, (size_t)m0 * xrow);
        else if (a->norm_gamma) loom_matmul_quantize_norm_rows(a, isa, bias_mul, m0, m0 + mrows, xbuf);
        else
            for (int64_t i = 0; i < mrows; i++)
                loom_quantize_act(isa, a->x + (m0 + i) * a->ldx, K, bias_mul, act_shift(x0, (size_t)i * xrow));
        for (int64_t n0 = lo; n0 < hi; n0 += ks->nr) {
            int cols = (int)(hi - n0 < ks->nr ? hi - n0 : ks->nr);
            const char *pn = panel;
            if (packed) pn = (const char *)packed + (size_t)(n0 / ks->nr) * (size_t)nb * pbb;
            else ks->pack(a->wtype, (const char *)a->w + (size_t)n0 * wrow, wrow, cols, nb, panel);
            float *c = a->ep ? tile : a->y + m0 * a->ldy + n0;
            int64_t ldc = a->ep ? ks->nr : a->ldy;
            for (int64_t b0 = 0; b0 < nb; b0 += kc) {
                int64_t nblk = nb - b0 < kc ? nb - b0 : kc;
                for (int64_t i0 = 0; i0 < mrows; i0 += ks->mr) {
                    int rows = (int)(mrows - i0 < ks->mr ? mrows - i0 : ks->mr);
                    loom_q8_act xr[LOOM_GEMM_Q_MAX_MR];
                    for (int r = 0; r < ks->mr; r++)  /* short tiles repeat their last row */
                        xr[r] = act_shift(x0, (size_t)(i0 + (r < rows ? r : rows - 1)) * xrow);
                    (packed ? ks->micro_packed : ks->micro)(a->wtype, b0, nblk, xr, pn + (size_t)b0 * pbb,
                                                            c + i0 * ldc, ldc, rows, cols, b0 > 0);
                }
            }
            if (a->ep) loom_matmul_finish_tile(a, isa, tile, ldc, m0, n0, mrows, cols);
        }
    }
    return LOOM_OK;
}
