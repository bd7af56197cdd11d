/*
 * Private interface between the quantized GEMM driver (gemm_q.c) and its
 * per-ISA kernel sets (gemm_q.c generic, gemm_q_avx2.c, gemm_q_avx512.c).
 *
 * x rows are quantized to q8 blocks (loom_q8_act, bias_mul from the set) and
 * broadcast 4 bytes at a time; W rows are packed into panels of nr rows whose
 * lanes are the rows, so one int8 dot-product instruction advances nr outputs
 * by 4 k. Packed panel, per block b of 32 k (panel_block_bytes(nr) bytes):
 *   q[8][nr][4]  weight bytes: quad j of row c at q[j][c] (k = 32b + 4j .. +3),
 *                q4 nibbles as 0..15, q8_0 as signed q, or q + 128 when the set
 *                wants unsigned bytes (q8_unsigned)
 *   d[nr]        f32 scales        m[nr]  f32 mins (q4_1; zero otherwise)
 * Rows beyond the edge of W are packed as zeros.
 *
 * Weights packed once (loom_packed_weights_create, packed.c) keep a compact form
 * of the same panels, every nr rows of W one after the other, all of K:
 *   q4_0 / q4_1  cq[4][nr][4]: byte t of quad j of row c holds quad j's nibble
 *                low and quad j + 4's high (16 * nr bytes, the bytes of the
 *                file's blocks, transposed), then d[nr] and, q4_1, m[nr]
 *   q8_0         q[8][nr][4] as above, then d[nr]
 *                d and m as the file's f16 bits (zero beyond W's edge): the
 *                form has the file's bytes (18 / 20 / 34 per row and block)
 * A set reads it with micro_packed (NULL: the set has no compact form).
 */
#ifndef LOOM_OPS_MATMUL_GEMM_Q_KERNELS_H
#define LOOM_OPS_MATMUL_GEMM_Q_KERNELS_H

#include "ops/matmul/internal.h"
#include "ops/quant.h"

#define LOOM_GEMM_Q_MAX_MR 8
#define LOOM_GEMM_Q_MAX_NR 32

static inline size_t loom_gemm_q_panel_block_bytes(int nr) { return (size_t)nr * 40; }
/* The compact form's bytes of weights per block, where its scales start, its size. */
static inline size_t loom_gemm_q_packed_scale_offset(loom_dtype wt, int nr) {
    return (size_t)nr * (wt == LOOM_Q8_0 ? 32 : 16);
}
static inline size_t loom_gemm_q_packed_block_bytes(loom_dtype wt, int nr) {
    return loom_gemm_q_packed_scale_offset(wt, nr) + (size_t)nr * (wt == LOOM_Q4_1 ? 4 : 2);
}

typedef struct loom_gemm_q_kset {
    const char *name;
    int mr, nr;        /* register tile: mr rows of x by nr rows of W */
    int q8_unsigned;   /* q8_0 packed as q + 128 (activation bias -128 * sum) */
    /* rows [0, cols) of w (row stride row_bytes), nb blocks -> panel */
    void (*pack)(loom_dtype wt, const void *w, size_t row_bytes, int cols, int64_t nb, void *panel);
    /* c[r][col] for r < rows, col < cols: (accumulate ? c + : ) the product of
     * x rows xr[0..mr) (rows >= rows repeat a valid row) and the panel, over
     * blocks [b0, b0 + nblk); panel points at block b0. */
    void (*micro)(loom_dtype wt, int64_t b0, int64_t nblk, const loom_q8_act *xr, const void *panel,
                  float *c, int64_t ldc, int rows, int cols, int accumulate);
    /* micro over the compact form, or NULL */
    void (*micro_packed)(loom_dtype wt, int64_t b0, int64_t nblk, const loom_q8_act *xr, const void *panel,
                         float *c, int64_t ldc, int rows, int cols, int accumulate);
} loom_gemm_q_kset;

/* The set the quantized GEMM runs at level isa on this CPU. */
const loom_gemm_q_kset *loom_gemm_q_kset_for(loom_isa isa);
/* The compact panels of a's weights for set ks (packed.c): the panel of a->w's
 * first nr rows, the next ones every nb blocks; NULL when a->w was not packed
 * for ks or does not start at a panel boundary of what was. count: a hit
 * counts in loom_matmul_packed_hits (once per call: its thread 0). */
const uint8_t *loom_gemm_q_packed_find(const loom_matmul_args *a, const loom_gemm_q_kset *ks, int count);

/* Portable packing used by every set whose panel follows the layout above. */
void loom_gemm_q_pack_generic(loom_dtype wt, const void *w, size_t row_bytes, int cols, int64_t nb,
                              void *panel, int nr, int q8_unsigned);

const loom_gemm_q_kset *loom_gemm_q_kset_generic(void);
#if defined(__x86_64__)
const loom_gemm_q_kset *loom_gemm_q_kset_avx2(void);
const loom_gemm_q_kset *loom_gemm_q_kset_avx512_vnni(void);
#endif

#endif
