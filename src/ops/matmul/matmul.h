/*
 * The matmul family: y[M, N] = x[M, K] . W[N, K]^T (+ epilogue).
 *
 * W is in the LLM layout (one row per output feature) and may be f32, f16,
 * bf16 or a GGUF block format (q8_0, q4_0, q4_1: K a multiple of 32); x and y
 * are f32. Two paths:
 *   - GEMM (prefill, M >= LOOM_GEMM_MIN_M; below that in the cases of
 *     matmul.c's use_gemv): BLIS-style blocking with packed panels and
 *     register-blocked micro-kernels per ISA.
 *   - GEMV (decode, M small): streams W exactly once at memory bandwidth.
 * Quantized W meets x quantized to q8 per block of 32 (int8 products) or, with
 * full activations (act = LOOM_ACT_PREC_FULL), x in f32 against blocks
 * dequantized in the kernel.
 * Both split work by (ith, nth) without any synchronisation: each thread owns
 * a disjoint set of output columns (or rows) and packs what it needs into its
 * own scratch. Every output element is accumulated in the same order whatever
 * nth is, so results are bit-identical for any thread count.
 */
#ifndef LOOM_OPS_MATMUL_MATMUL_H
#define LOOM_OPS_MATMUL_MATMUL_H

#include "loom_ops.h"
#include "ops/ops.h"

/* ------------------------------------------------------------ epilogue */

/* loom_act, the activations (LOOM_ACT_SILU, ...), is public: loom_ops.h. */

/* A user step run on each finished tile: tile[r*ld + c] is y[m0 + r][n0 + c]
 * for r < mr, c < nr. */
typedef void (*loom_epilogue_fn)(float *tile, int64_t ld, int64_t m0, int64_t n0, int64_t mr,
                                 int64_t nr, void *user);

/*
 * Applied to each output tile while it is still in registers or L1, in this
 * order (each step optional):
 *     v = acc * scale + bias[n]
 *     v = act(v)
 *     v = v * mul[m][n]          (SwiGLU: act = silu on the gate GEMM, mul = up)
 *     v = v + residual[m][n]     (residual add after an output projection)
 *     fn(tile, ...)              (anything else, e.g. RoPE on a QKV tile)
 * mul and residual may alias y only if they are exactly y (same pointer and ld):
 * each element is read before it is written.
 */
typedef struct loom_epilogue {
    float            scale;      /* 0 means 1 */
    const float     *bias;       /* [N] or NULL */
    loom_act         act;
    const float     *mul;        /* [M, N], row stride ld_mul, or NULL */
    int64_t          ld_mul;
    const float     *residual;   /* [M, N], row stride ld_res, or NULL */
    int64_t          ld_res;
    loom_epilogue_fn fn;         /* or NULL */
    void            *user;
} loom_epilogue;

/* The reference epilogue: scalar, in the order above. Kernels may call it on
 * their tiles or apply a vectorised version giving the same results within
 * the f32 tolerance. */
void loom_epilogue_apply(const loom_epilogue *e, float *tile, int64_t ld, int64_t m0, int64_t n0,
                         int64_t mr, int64_t nr);
/* One activation value (reference formulas, float in, float out). */
float loom_act_apply(loom_act act, float x);
const char *loom_act_name(loom_act act);

/* ------------------------------------------------------------ matmul */

#define LOOM_GEMM_MIN_M 8   /* below this, the GEMV path, except (matmul.c, use_gemv) batch-invariant
                               runs and quantized weights with q8 activations at the VNNI level: the
                               GEMM from 2 rows, and for 1 row when the weights are packed once */

typedef struct loom_matmul_args {
    const float *x;  int64_t ldx;      /* [M, K] f32, row stride in elements */
    const void  *w;  int64_t ldw;      /* [N, K] of wtype, row stride in elements */
    loom_dtype   wtype;
    float       *y;  int64_t ldy;      /* [M, N] f32; overwritten, never read (beta = 0) */
    int64_t      M, N, K;
    const loom_epilogue *ep;           /* NULL: plain product */
    /* Optional, quantized W only: x already quantized by
     * loom_matmul_quantize_x for the same wtype, M, K and isa (all M rows,
     * row i at i * loom_q8_act_bytes(K); one layout for the GEMV and the GEMM,
     * so it may serve matmuls over several matrices that take different paths). Callers that run many matmuls over one x (the column blocks
     * of a fused FFN or QKV) quantize it once instead of once per call.
     * Ignored by the reference. */
    const void  *xq;
    /* Quantized W only. LOOM_ACT_PREC_FULL: x stays f32 and W's blocks are
     * dequantized inside the kernel (f32 products, the f32 tolerance against
     * the reference); anything else: x quantized to q8 per block of 32 and
     * int8 dot products. */
    loom_act_precision act;
    /* 1: batch-invariant, the GEMM for every M (the GEMV below LOOM_GEMM_MIN_M
     * sums in another order): a row's result is then the same whatever the
     * other rows, since the GEMM's order over K depends on K alone. Scratch and
     * pre-quantized x are sized for either path. */
    int invariant;
    /* Optional RMSNorm of x on the fly (norm_gamma NULL: off): the product
     * takes x'[m][k] = x[m][k] * norm_inv[m] * norm_gamma[k], each value
     * rounded as the rms_norm kernels round it (the level's scale_row), so
     * the result is bit for bit rms_norm followed by the matmul, while x'
     * exists only a micro-panel at a time (GEMM), a row at a time (x
     * quantized for q8 products) or as the few rows of a GEMV, in scratch.
     * norm_inv[m] = 1 / sqrt(mean(x[m]^2) + eps): loom_matmul_norm_inv. A
     * pre-quantized xq must have been made with the same norm. */
    const float  *norm_gamma;          /* [K] */
    const double *norm_inv;            /* [M] */
} loom_matmul_args;

/* norm_inv of rows [m0, m1) of x [.., K] (row stride ldx) as the rms_norm
 * kernels of level isa compute it, into inv[m0..m1). */
void loom_matmul_norm_inv(loom_isa isa, const float *x, int64_t ldx, int64_t K, float eps, int64_t m0,
                          int64_t m1, double *inv);
/* Marks a as taking the norm, for loom_matmul_scratch_size only (the
 * planner sizes scratch before any data is bound). */
void loom_matmul_norm_for_size(loom_matmul_args *a);
/* Row m of a's normalised x, columns [k0, k0 + n), into out (norm_gamma set). */
void loom_matmul_norm_row(const loom_matmul_args *a, loom_isa isa, int64_t m, int64_t k0, int64_t n,
                          float *out);

/* 1 when a multiplies block-quantized W by f32 x (LOOM_ACT_PREC_FULL). */
static inline int loom_matmul_full_act(const loom_matmul_args *a) {
    return a->act == LOOM_ACT_PREC_FULL && loom_dtype_is_quantized(a->wtype);
}

/* Checks dtypes, sizes and strides. */
loom_status loom_matmul_check(const loom_matmul_args *a);
/* Per-thread scratch bytes the optimised kernels need for a at any level. */
size_t loom_matmul_scratch_size(const loom_matmul_args *a);
/* Bytes of the pre-quantized x for a (0 for f32/f16/bf16 W and for full
 * activations, which take x as is). */
size_t loom_matmul_xq_bytes(const loom_matmul_args *a);
/* Quantizes rows m0..m1 of a->x into xq (laid out for a->xq) as the GEMM path
 * of level isa would. */
void loom_matmul_quantize_x(const loom_matmul_args *a, loom_isa isa, int64_t m0, int64_t m1, void *xq);
/* x of a, made ready once for many matmuls over it (the column blocks of a
 * fused QKV or FFN), by each thread alike (no barrier): with an RMSNorm
 * (gamma, eps; inv: a->M doubles) the rows' 1/rms into inv and gamma/inv set
 * on a; with q8 activations x (normalised) quantized into xq, eight rows at a
 * time together with their 1/rms so x comes from memory once. Returns xq, or
 * NULL when the matmuls take x in f32. The same values as
 * loom_matmul_norm_inv over all rows then loom_matmul_quantize_x. */
void *loom_matmul_prepare_x(loom_matmul_args *a, loom_isa isa, const float *gamma, float eps, double *inv,
                            void *xq);
/* Columns [k0, k0 + n) of every row of x, given as the f32 values v (rows ldv
 * apart), into xq as loom_matmul_quantize_x lays them out (k0 and n multiples
 * of 32; no norm): the same bytes as quantizing whole rows, for producers that
 * make x a block of columns at a time (the ffn's h, so its down projection
 * never reads h in f32). isa > LOOM_ISA_REF and loom_matmul_xq_bytes(a) > 0. */
void loom_matmul_quantize_x_cols(const loom_matmul_args *a, loom_isa isa, int64_t k0, int64_t n, const float *v,
                                 int64_t ldv, void *xq);

/* ------------------------------------------------------------ weights packed once */

/* The quantized GEMM (q8_0, q4_0, q4_1 W with q8 activations) lays W's rows
 * out for its dot-product instruction on every call; weights packed once here
 * are read as they are instead (packed.c). Results do not change: the same
 * values meet in the same order. */
typedef struct loom_packed_weights loom_packed_weights;
typedef struct loom_pack_desc {
    const void *w;           /* [N, K] rows, row stride ldw elements */
    loom_dtype  wtype;
    int64_t     N, K, ldw;
} loom_pack_desc;

/* Bytes W's packed form takes for the GEMM at level isa on this CPU; 0 when it
 * has none (float W, a kernel set without a compact form, K % 32). */
size_t loom_matmul_packed_bytes(loom_dtype wt, int64_t N, int64_t K, loom_isa isa);
/* Packs the matrices that have a packed form at level isa (the others are
 * skipped) into one block and registers them process-wide: from then on every
 * quantized GEMM at that level over one of them, or over a range of its rows
 * starting at a multiple of the kernel's panel rows (32 with VNNI), reads the
 * packed panels. The matrices' bytes must stay where they are, unchanged,
 * until loom_packed_weights_free. A matrix overlapping one packed already is
 * an error. */
loom_status loom_packed_weights_create(const loom_pack_desc *d, int n, loom_isa isa, loom_packed_weights **out);
/* The same on nth threads (the caller's and up to nth - 1 started for it),
 * calling packed(w, bytes, ctx) with each matrix's source bytes once it is
 * packed, from any of them (model.c drops those pages as it goes). */
loom_status loom_packed_weights_create_cb(const loom_pack_desc *d, int n, loom_isa isa, int nth,
                                          void (*packed)(const void *w, size_t bytes, void *ctx), void *ctx,
                                          loom_packed_weights **out);
size_t loom_packed_weights_bytes(const loom_packed_weights *p);
int loom_packed_weights_count(const loom_packed_weights *p);   /* matrices packed */
/* The bytes of W that matrix i (< count, in address order) was packed from:
 * their start in *w, their size returned (0 for no such matrix). */
size_t loom_packed_weights_source(const loom_packed_weights *p, int i, const void **w);
/* Unregisters and frees (NULL: nothing). */
void loom_packed_weights_free(loom_packed_weights *p);
/* Quantized matmul calls that read packed panels so far, process-wide, one per
 * call (its thread 0; tests, profiles). */
uint64_t loom_matmul_packed_hits(void);

/* Runs thread ith's share at the given level (LOOM_ISA_REF: reference
 * product then reference epilogue). scratch: loom_matmul_scratch_size bytes,
 * 64-byte aligned. */
loom_status loom_matmul_run(const loom_matmul_args *a, loom_isa isa, int ith, int nth,
                            void *scratch);

/* ns GEMVs over the same rows of one float W, each over its own column slice
 * (s[i].w: the slice's first column, s[i].K its columns, ldw W's row stride;
 * its own x and y), on this thread: each step's rows through every slice in
 * turn, so that a thread's columns of a row are read together, one sweep
 * over W's rows instead of one a slice (the one-pass projections, src/fused).
 * Each slice's values are bit for bit those of loom_matmul_run(&s[i], isa,
 * 0, 1, ..). *done = 0 (nothing written) where the calls do not qualify: a
 * level below AVX2, quantized W, M < 1 or M >= LOOM_GEMM_MIN_M, batch-invariant
 * calls, an epilogue or a norm, M, N, ldw or wtype differing between slices,
 * more than 256 slices, or at the AVX-512 level a slice of 8192 columns or
 * more (that level's GEMV takes such rows two at a time). Errors:
 * loom_matmul_check's. */
loom_status loom_gemv_slices(const loom_matmul_args *s, int ns, loom_isa isa, int *done);

#endif
