/* ffn as a graph op: y = down(act(x.Wg^T) * x.Wu^T) (+ residual).
 *
 * Two phases (prefill): phase 0 walks the hidden dimension in column blocks
 * (as src/fused/ffn.c): per block the up tile stays in this thread's scratch,
 * the gate tile is computed into h, and act(gate) * up is applied to the tile
 * while it is in cache, so gate, up and act(gate) never reach memory and h is
 * written once. Phase 1 (after the executor's barrier, since it needs all of
 * h) is the down GEMM with the residual added in its epilogue. When the down
 * GEMM takes q8 activations (quantized weights), phase 0 writes h already
 * quantized as that GEMM lays x out (h_q8): h crosses the phase boundary at
 * about 1.4 bytes a value instead of 4, with the same bytes the down GEMM
 * would have made from the f32 h.
 *
 * One pass (decode and small batches: at most one_pass_rows rows, not
 * batch-invariant): the hidden dimension is cut into one_pass_slices fixed
 * slices (the builder: about 8, a multiple of the rules' hardware threads;
 * fewer for H under 8 64-column groups; whole groups, as even as they go); a
 * thread takes whole slices and computes each one's up and gate tiles and
 * act(gate) * up in scratch, then the slices' shares of the down projection,
 * h_slice . Wd[:, slice]^T, each into its slice's partial [M, D] in the
 * launch's shared buffer (loom_fused_slices_project: for float weights one
 * sweep of Wd's rows, each step's rows through all the thread's slices, so
 * that a row's columns of the thread's slices, adjacent in memory, are read
 * together; the GEMV fetches segments of rows ahead by row,
 * loom_gemv_segment_ahead). The last thread to arrive sums the
 * partials in slice order (+ residual) into y. h never leaves this thread's
 * cache, and there is no barrier inside: one kernel.
 * The order of the sum is fixed by H and the attributes, so results are the
 * same bits for any thread count; against the two-phase kernel (one dot product over all of H)
 * they differ by rounding only.
 *
 * Rows in one pass (prefill: float weights, at least row_min rows and more
 * than one_pass_rows, row_block > 0, not batch-invariant): the rows are cut
 * into blocks of at most row_block (as many blocks as keep every thread busy)
 * and a thread takes whole blocks. For each block it walks the hidden
 * dimension in slices of row_slice columns (loom_ffn_row_slice: set by H,
 * row_block and the rules' L3 and threads; cut as the one pass's, as even as
 * whole 64-column groups go): the slice's up and gate tiles and
 * act(gate) * up in scratch, then the slice's share of the down projection
 * added to the block's running sum by the GEMM's epilogue, which alternates
 * between y's rows and one block of scratch so that the last slice lands in
 * y: y = ((residual + p_0) + p_1) + ... h never reaches memory, no partials
 * are exchanged and there is no barrier: one kernel. Every block reads the
 * three weights again (row_min keeps blocks tall enough for that). The
 * sub-GEMMs run batch-invariant (the GEMM for any rows), so a row's result
 * does not depend on the block it falls in: the same bits for any thread
 * count. Quantized weights keep the two phases: the packed-once weights of
 * the VNNI GEMM are laid out for all of K, which the slices' down projections
 * would miss.
 *
 * Activations: loom_act values or user activations registered by name. */
#include "fused/fused_graph_ops.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/status.h"
#include "fused/fused.h"
#include "fused/fused_internal.h"
#include "ops/matmul/matmul.h"
#include "ops/quant.h"
#include "ops/ref/ref.h"
#include "ops/vec/vec.h"

#define MAX_ACTS 16
static struct { char name[32]; loom_ffn_act_fn fn; void *user; } acts[MAX_ACTS];
static int n_acts;
static pthread_mutex_t acts_lock = PTHREAD_MUTEX_INITIALIZER;

int loom_ffn_act_find(const char *name) {
    pthread_mutex_lock(&acts_lock);
    int r = -1;
    for (int i = 0; i < n_acts && r < 0; i++)
        if (strcmp(acts[i].name, name) == 0) r = i;
    pthread_mutex_unlock(&acts_lock);
    return r;
}

int loom_ffn_act_register(const char *name, loom_ffn_act_fn fn, void *user) {
    if (!name || !fn || strlen(name) >= sizeof acts[0].name) return -1;
    int r = loom_ffn_act_find(name);
    pthread_mutex_lock(&acts_lock);
    if (r < 0 && n_acts < MAX_ACTS) {
        r = n_acts++;
        snprintf(acts[r].name, sizeof acts[r].name, "%s", name);
    }
    if (r >= 0) acts[r].fn = fn, acts[r].user = user;
    pthread_mutex_unlock(&acts_lock);
    return r;
}

/* The fifth input is the residual (gamma, with the norm, comes last). */
static int has_residual(const loom_ffn_attrs *at, int n_src) { return n_src - (at->norm ? 1 : 0) == 5; }

#define ONE_PASS_SLICES LOOM_FFN_ONE_PASS_SLICES

static int one_pass(const loom_ffn_attrs *at, int64_t M, int invariant) {
    return !invariant && at->one_pass_rows > 0 && M <= at->one_pass_rows;
}

/* Slice s of ns of the hidden dimension: whole 64-column groups (whole blocks
 * of every quantized type) as even as they go, the last ending at H, so that
 * threads taking whole slices get even shares. */
static void slice_at(int64_t H, int64_t ns, int64_t s, int64_t *n0, int64_t *nb) {
    int64_t G = (H + 63) / 64, b = (s + 1) * G / ns * 64;
    *n0 = s * G / ns * 64;
    *nb = (b < H ? b : H) - *n0;
}

/* The widest of ns slices. */
static int64_t slice_max(int64_t H, int64_t ns) {
    int64_t w = ((H + 63) / 64 + ns - 1) / ns * 64;
    return w < H ? w : (H > 0 ? H : 1);
}

/* Slices of the one pass: the attributes' (the builder:
 * loom_ffn_one_pass_slices_for the rules' hardware threads; 0:
 * ONE_PASS_SLICES), at most one a 64-column group and
 * LOOM_FFN_ONE_PASS_MAX_SLICES; set by H and the attributes alone. */
static int64_t one_pass_slices(const loom_ffn_attrs *at, int64_t H) {
    int64_t G = (H + 63) / 64, n = at->one_pass_slices > 0 ? at->one_pass_slices : ONE_PASS_SLICES;
    n = n < LOOM_FFN_ONE_PASS_MAX_SLICES ? n : LOOM_FFN_ONE_PASS_MAX_SLICES;
    return G < n ? (G > 0 ? G : 1) : n;
}

/* Rows in one pass (module comment); the criterion depends on the shapes and
 * the attributes alone, never on the thread count, so that a launch's result
 * does not either. */
static int rows_pass(const loom_tensor *const *src, const loom_ffn_attrs *at, int64_t M, int invariant) {
    return !invariant && at->row_block > 0 && M >= LOOM_GEMM_MIN_M && M >= at->row_min &&
           !one_pass(at, M, 0) && !loom_dtype_is_quantized(src[1]->dtype) && !loom_dtype_is_quantized(src[3]->dtype);
}

/* Slices of the rows pass: of about row_slice columns (whole 64-column groups). */
static int64_t rows_slices(const loom_ffn_attrs *at, int64_t H) {
    int64_t s = at->row_slice > 0 ? (at->row_slice + 63) / 64 * 64
                                  : loom_ffn_row_slice(at->row_block, H, loom_cpu_get()->l3_bytes, 1);
    return s < H ? (H + s - 1) / s : 1;
}

/* Rows of a block of the rows pass: at most row_block, and a multiple of nth
 * blocks so the threads get even shares. */
static int64_t rows_per_block(const loom_ffn_attrs *at, int64_t M, int nth) {
    int64_t nb = (M + at->row_block - 1) / at->row_block;
    nb = (nb + nth - 1) / nth * nth;
    nb = nb < M ? nb : M;
    return (M + nb - 1) / nb;
}

/* Rows a one-pass launch of these shapes may have (0: never one pass). */
static int64_t one_pass_rows(const loom_ffn_attrs *at, int64_t M) {
    return at->one_pass_rows > 0 ? (M < at->one_pass_rows ? M : at->one_pass_rows) : 0;
}

static loom_status ffn_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                             loom_tensor *dst) {
    const char *op = "ffn";
    LOOM_TRY(loom_ref_check_arity(op, src, n_src, 4, 6));
    const loom_ffn_attrs *at = attrs;
    LOOM_RETURN_IF(!at, LOOM_ERR_INVALID_ARG, "%s: attributes missing", op);
    LOOM_RETURN_IF(n_src == 6 && !at->norm, LOOM_ERR_INVALID_ARG,
                   "%s: 6 inputs without the norm: x, 3 weights, residual, then gamma with the norm", op);
    LOOM_RETURN_IF(!((at->act >= 0 && at->act < LOOM_ACT_COUNT) ||
                     (at->act >= LOOM_FFN_ACT_CUSTOM && at->act < LOOM_FFN_ACT_CUSTOM + n_acts)),
                   LOOM_ERR_INVALID_ARG, "%s: unknown activation %d", op, at->act);
    const loom_tensor *x = src[0], *wg = src[1], *wu = src[2], *wd = src[3];
    LOOM_TRY(loom_ref_check_dtype(op, 0, "x", x, LOOM_REF_DT(LOOM_F32)));
    LOOM_RETURN_IF(x->ndim != 2, LOOM_ERR_SHAPE, "%s: input 0 (x) must be 2-D [M, D]", op);
    int64_t M = x->shape[0], D = x->shape[1], H = wg->shape[0];
    LOOM_RETURN_IF(wg->ndim != 2 || wu->ndim != 2 || wd->ndim != 2 || wg->shape[1] != D ||
                       wu->shape[0] != H || wu->shape[1] != D || wd->shape[0] != D ||
                       wd->shape[1] != H || wg->dtype != wu->dtype || wg->stride[0] != wu->stride[0],
                   LOOM_ERR_SHAPE,
                   "%s: weights must be gate/up [H, %lld] (one dtype and row stride) and down [%lld, H]",
                   op, (long long)D, (long long)D);
    if (at->norm) {
        const loom_tensor *g = src[n_src - 1];
        LOOM_RETURN_IF(g->dtype != LOOM_F32 || loom_tensor_nelem(g) != D || !loom_tensor_is_contiguous(g),
                       LOOM_ERR_SHAPE, "%s: input %d (the norm's gamma) must be contiguous f32 [%lld]", op, n_src - 1,
                       (long long)D);
        LOOM_RETURN_IF(!(at->norm_eps > 0.0f), LOOM_ERR_INVALID_ARG, "%s: norm_eps %g: expected > 0", op,
                       (double)at->norm_eps);
        LOOM_RETURN_IF(x->stride[1] != 1, LOOM_ERR_SHAPE, "%s: x must have contiguous rows", op);
    }
    if (has_residual(at, n_src))
        LOOM_RETURN_IF(src[4]->dtype != LOOM_F32 || src[4]->ndim != 2 || src[4]->shape[0] != M ||
                           src[4]->shape[1] != D,
                       LOOM_ERR_SHAPE, "%s: input 4 (residual) must be f32 [%lld, %lld]", op,
                       (long long)M, (long long)D);
    loom_ref_set_dst(dst, LOOM_F32, 2, x->shape);
    return LOOM_OK;
}

/* Hidden columns per work item (loom_ffn_block_cols unless the rule gives block_n). */
static int64_t block_cols(const loom_ffn_attrs *at, int64_t M, int64_t H) {
    int64_t bn = at->block_n > 0 ? at->block_n : loom_ffn_block_cols(M, H);
    return bn < H ? bn : (H > 0 ? H : 1);
}

/* h in q8 (two phases): when the down projection takes q8 activations
 * (quantized Wd, act_precision q8) and the column blocks are whole q8
 * blocks, phase 0 quantizes each finished tile of h straight into h's own
 * memory (q8 rows of loom_q8_act_bytes(H), under half of h's f32 bytes) as
 * the down projection would quantize it: phase 1 then reads h at about 1.4
 * bytes a value instead of 4 and does not quantize it, with the same bytes
 * (and so the same results) as before. */
static int h_q8(const loom_tensor *const *src, const loom_ffn_attrs *at, int64_t bn) {
    const loom_tensor *wd = src[3];
    return loom_dtype_is_quantized(wd->dtype) && at->act_precision != LOOM_ACT_PREC_FULL && bn % 32 == 0 &&
           wd->shape[1] % 32 == 0;
}

static double wbytes(const loom_tensor *w) {
    return (double)loom_dtype_row_bytes(w->dtype, w->shape[1]) * (double)w->shape[0];
}

static void ffn_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                     const void *attrs, loom_cost *c) {
    const loom_ffn_attrs *at = attrs;
    int res = has_residual(at, n_src);
    double M = (double)src[0]->shape[0], D = (double)src[0]->shape[1], H = (double)src[1]->shape[0];
    c->flops = 2.0 * M * D * H * 3.0 + 5.0 * M * H + (res ? M * D : 0.0);
    /* x, the three weights once, h back in phase 1, the residual; in one pass
     * h and the slices' partials stay in cache */
    const double ex = LOOM_ES(src[0]), ey = LOOM_ES(dst);
    /* h: f32 at y's element size, or q8 rows (h_q8); none in one pass */
    double hrow = h_q8(src, at, block_cols(at, (int64_t)M, (int64_t)H)) ? (double)loom_q8_act_bytes((int64_t)H) : ey * H;
    double h = one_pass(at, (int64_t)M, 0) || rows_pass(src, at, (int64_t)M, 0) ? 0.0 : M * hrow;
    c->bytes_read = ex * M * D + wbytes(src[1]) + wbytes(src[2]) + wbytes(src[3]) + h +
                    (res ? LOOM_ES(src[4]) * M * D : 0.0);
    c->bytes_written = h + ey * M * D;   /* h (phase boundary), y */
    if (at->norm) { /* gamma, and x read once more for the rows' statistics unless it is quantized a few
                     * rows at a time with them (quantized weights, q8 activations) */
        int q8 = loom_dtype_is_quantized(src[1]->dtype) && at->act_precision != LOOM_ACT_PREC_FULL;
        c->bytes_read += (q8 ? 0.0 : ex * M * D) + 4.0 * D;
        c->flops += 4.0 * M * D;
    }
}

static float custom_act(float v, void *user) {
    int i = (int)(intptr_t)user;
    return acts[i].fn(v, acts[i].user);
}

static loom_matmul_args down_args(const loom_tensor *const *src, int res, const loom_tensor *h,
                                  loom_tensor *y, loom_epilogue *ep, int32_t act) {
    const loom_tensor *wd = src[3];
    memset(ep, 0, sizeof *ep);
    if (res) ep->residual = src[4]->data, ep->ld_res = src[4]->stride[0];
    loom_matmul_args g = {.x = h ? h->data : NULL, .ldx = h ? h->stride[0] : wd->shape[1],
                          .w = wd->data, .ldw = wd->stride[0], .wtype = wd->dtype,
                          .y = y->data, .ldy = y->stride[0], .M = src[0]->shape[0],
                          .N = wd->shape[0], .K = wd->shape[1], .ep = res ? ep : NULL,
                          .act = (loom_act_precision)act};
    return g;
}

static size_t gate_up_mm_bytes(const loom_tensor *const *src, int64_t bn, int32_t act, int norm) {
    loom_matmul_args g = loom_fused_block_gemm(src[0], src[1], 0, bn, NULL, bn, act);
    if (norm) loom_matmul_norm_for_size(&g); /* sizes only: x's data may not be bound yet */
    return loom_align64(loom_matmul_scratch_size(&g));
}

/* Phase 0 scratch: the sub-GEMM's, the up tile, (with h in q8) the gate
 * tile, then x quantized once for all column blocks (quantized weights with
 * q8 activations: each sub-GEMM would otherwise quantize all of x again). */
static size_t xq_offset(const loom_tensor *const *src, int64_t M, int64_t bn, const loom_ffn_attrs *at) {
    size_t tile = loom_align64((size_t)(M * bn) * sizeof(float));
    return gate_up_mm_bytes(src, bn, at->act_precision, at->norm) + tile * (h_q8(src, at, bn) ? 2 : 1);
}

/* One pass or rows pass, R rows and ns slices: the sub-GEMMs' scratch, the up
 * tile of a slice and the h tile of one (rows pass) or of every slice (one
 * pass), x quantized once, with the norm the rows' 1/rms, then the block's
 * other running sum [R, D] (rows pass) or every slice's h quantized for its
 * down projection (one pass, dq apart). */
typedef struct { size_t up, h, xq, inv, part, dq, dq_step, end; } one_pass_layout;

/* The down projection of hidden columns [n0, n0 + nb) of R rows: h_slice .
 * Wd[:, n0:n0+nb]^T (whole blocks: n0 is a multiple of 64). */
static loom_matmul_args slice_down(const loom_tensor *const *src, int64_t R, int64_t n0, int64_t nb,
                                   const float *h, float *y, int32_t act) {
    loom_fused_slice sl = {h, nb, n0, nb};
    return loom_fused_slice_gemm(src[3], R, &sl, y, act);
}

static one_pass_layout pass_scratch(const loom_tensor *const *src, const loom_ffn_attrs *at, int64_t R,
                                    int64_t ns, int rows) {
    int64_t H = src[1]->shape[0], sw = slice_max(H, ns);
    loom_matmul_args g = loom_fused_block_gemm(src[0], src[1], 0, sw, NULL, sw, at->act_precision);
    g.M = R, g.invariant = rows;
    size_t xq = loom_matmul_xq_bytes(&g);
    if (at->norm) loom_matmul_norm_for_size(&g);
    size_t sg = loom_matmul_scratch_size(&g), sd = 0;
    /* the down projection of every slice (a narrower one may take longer k blocks) */
    for (int64_t s = 0, seen[3] = {0, 0, 0}; s < ns; s++) {
        int64_t n0, nb;
        slice_at(H, ns, s, &n0, &nb);
        /* at most three widths: floor and ceiling of the groups, and the last */
        if (nb == seen[0] || nb == seen[1] || nb == seen[2]) continue;
        seen[s == ns - 1 ? 2 : seen[0] ? 1 : 0] = nb;
        loom_matmul_args d = slice_down(src, R, 0, nb, NULL, NULL, at->act_precision);
        d.invariant = rows;
        size_t b = loom_matmul_scratch_size(&d);
        sd = sd > b ? sd : b;
    }
    size_t tile = loom_align64((size_t)(R * sw) * sizeof(float));
    /* the one pass keeps the tiles of all the thread's slices (at most all H) */
    size_t htile = rows ? tile : loom_align64((size_t)(R * ns * sw) * sizeof(float));
    one_pass_layout L;
    L.up = loom_align64(sg > sd ? sg : sd);
    L.h = L.up + tile;
    L.xq = L.h + htile;
    L.inv = L.xq + loom_align64(xq);
    L.part = L.inv + loom_align64(at->norm ? (size_t)R * sizeof(double) : 0);
    L.dq = L.part + (rows ? (size_t)(R * src[3]->shape[0]) * sizeof(float) : 0);
    /* the one pass: every slice's h quantized for its down projection (dq_step bytes apart) */
    L.dq_step = rows ? 0 : loom_fused_slice_dq_bytes(src[3], R, sw, at->act_precision);
    L.end = L.dq + (size_t)ns * L.dq_step + 64;
    return L;
}

static one_pass_layout one_pass_scratch(const loom_tensor *const *src, const loom_ffn_attrs *at, int64_t R) {
    return pass_scratch(src, at, R, one_pass_slices(at, src[1]->shape[0]), 0);
}

/* The rows pass's, for its largest block (any thread count). */
static one_pass_layout rows_scratch(const loom_tensor *const *src, const loom_ffn_attrs *at) {
    int64_t M = src[0]->shape[0], R = M < at->row_block ? M : at->row_block;
    return pass_scratch(src, at, R, rows_slices(at, src[1]->shape[0]), 1);
}

static size_t ffn_scratch(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                          const void *attrs) {
    const loom_ffn_attrs *at = attrs;
    int64_t M = src[0]->shape[0], bn = block_cols(at, M, src[1]->shape[0]);
    loom_epilogue ep;
    loom_tensor y = *dst;
    loom_matmul_args d = down_args(src, has_residual(at, n_src), NULL, &y, &ep, at->act_precision);
    loom_matmul_args g = loom_fused_block_gemm(src[0], src[1], 0, bn, NULL, bn, at->act_precision);
    /* then, with the norm, the rows' 1/rms [M] (doubles) */
    size_t a = xq_offset(src, M, bn, at) + loom_align64(loom_matmul_xq_bytes(&g)) +
               (at->norm ? (size_t)M * sizeof(double) : 0) + 64;
    size_t b = loom_matmul_scratch_size(&d);
    size_t c = one_pass_rows(at, M) > 0 ? one_pass_scratch(src, at, one_pass_rows(at, M)).end : 0;
    size_t r = rows_pass(src, at, M, 0) ? rows_scratch(src, at).end : 0;
    a = a > b ? a : b;
    a = a > c ? a : c;
    return a > r ? a : r;
}

/* The slices' partials of a one-pass launch (the most rows it may have). */
static size_t ffn_shared(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs) {
    (void)n_src, (void)dst;
    const loom_ffn_attrs *at = attrs;
    int64_t R = one_pass_rows(at, src[0]->shape[0]);
    return (size_t)one_pass_slices(at, src[1]->shape[0]) * (size_t)R * (size_t)src[3]->shape[0] * sizeof(float);
}

static int ffn_phases(const loom_tensor *const *src, int n_src, const void *attrs, int nth, int invariant) {
    (void)n_src, (void)nth;
    int64_t M = src[0]->shape[0];
    return one_pass(attrs, M, invariant) || rows_pass(src, attrs, M, invariant) ? 1 : 2;
}

/* Other activations than silu are applied per element. */
loom_status loom_fused_act_mul_tile(int32_t act, loom_isa isa, float *h, int64_t ldh, const float *up, int64_t M,
                                    int64_t nb) {
    loom_tensor th, tu;
    const int64_t shape[2] = {M, nb};
    LOOM_TRY(loom_tensor_init(&th, LOOM_F32, 2, shape, h));
    th.stride[0] = ldh;
    LOOM_TRY(loom_tensor_init(&tu, LOOM_F32, 2, shape, (void *)(uintptr_t)up));
    if (act == LOOM_ACT_SILU) {
        loom_kernel_args s = {.src = {&th}, .n_src = 1, .dst = &th, .ith = 0, .nth = 1};
        LOOM_TRY(loom_op_kernel(LOOM_OP_SILU, isa)(&s));
    } else {
        for (int64_t m = 0; m < M; m++)
            for (int64_t j = 0; j < nb; j++) {
                float *v = h + m * ldh + j;
                *v = act >= LOOM_FFN_ACT_CUSTOM ? custom_act(*v, (void *)(intptr_t)(act - LOOM_FFN_ACT_CUSTOM))
                                                : loom_act_apply((loom_act)act, *v);
            }
    }
    loom_kernel_args mu = {.src = {&th, &tu}, .n_src = 2, .dst = &th, .ith = 0, .nth = 1};
    return loom_op_kernel(LOOM_OP_MUL, isa)(&mu);
}

/* This launch keeps h in q8 (h_q8): a vector level, and h contiguous. */
static int h_q8_on(const loom_kernel_args *a, loom_isa isa) {
    const loom_ffn_attrs *at = a->attrs;
    const loom_tensor *h = a->dst_extra[0];
    int64_t M = a->src[0]->shape[0], H = a->src[1]->shape[0];
    return isa != LOOM_ISA_REF && h_q8(a->src, at, block_cols(at, M, H)) && h->stride[0] == H && h->stride[1] == 1;
}

/* Phase 0: per block of hidden columns, the up tile into scratch, the gate
 * tile into h, then act(h) * up on the tile while both are in cache. */
static loom_status gate_up(const loom_kernel_args *a, loom_isa isa) {
    const loom_ffn_attrs *at = a->attrs;
    const loom_tensor *x = a->src[0], *h = a->dst_extra[0];
    int64_t M = x->shape[0], H = a->src[1]->shape[0], bn = block_cols(at, M, H), b0, b1;
    loom_ref_split((H + bn - 1) / bn, a->ith, a->nth, &b0, &b1);
    if (b0 >= b1) return LOOM_OK;
    const int32_t act = at->act_precision;
    float *up = (float *)((char *)a->scratch + gate_up_mm_bytes(a->src, bn, act, at->norm));
    loom_matmul_args probe = loom_fused_block_gemm(x, a->src[1], 0, bn, NULL, bn, act);
    probe.invariant = a->invariant; /* the GEMM's x layout, as the blocks below */
    const float *gamma = at->norm ? (const float *)a->src[a->n_src - 1]->data : NULL;
    char *xq_mem = (char *)a->scratch + xq_offset(a->src, M, bn, at);
    double *inv = at->norm ? (double *)(xq_mem + loom_align64(loom_matmul_xq_bytes(&probe))) : NULL;
    void *xq = loom_matmul_prepare_x(&probe, isa, gamma, at->norm_eps, inv, xq_mem);
    /* h in q8: the gate tile in scratch, then quantized into h's memory as
     * the down projection (down_q) lays x out */
    loom_epilogue dep;
    loom_matmul_args down_q = down_args(a->src, has_residual(at, a->n_src), h, a->dst, &dep, act);
    down_q.invariant = a->invariant;
    float *gt = h_q8_on(a, isa) ? up + (((size_t)(M * bn) + 15) & ~(size_t)15) : NULL;
    for (int64_t b = b0; b < b1; b++) {
        int64_t n0 = b * bn, nb = H - n0 < bn ? H - n0 : bn;
        float *hb = gt ? gt : (float *)h->data + n0;
        int64_t ldh = gt ? nb : h->stride[0];
        loom_matmul_args u = loom_fused_block_gemm(x, a->src[2], n0, nb, up, nb, act);
        u.xq = xq, u.invariant = a->invariant, u.norm_gamma = gamma, u.norm_inv = inv;
        LOOM_TRY(loom_matmul_run(&u, isa, 0, 1, a->scratch));
        loom_matmul_args g = loom_fused_block_gemm(x, a->src[1], n0, nb, hb, ldh, act);
        g.xq = xq, g.invariant = a->invariant, g.norm_gamma = gamma, g.norm_inv = inv;
        LOOM_TRY(loom_matmul_run(&g, isa, 0, 1, a->scratch));
        LOOM_TRY(loom_fused_act_mul_tile(at->act, isa, hb, ldh, up, M, nb));
        if (gt) loom_matmul_quantize_x_cols(&down_q, isa, n0, nb, gt, nb, h->data);
    }
    return LOOM_OK;
}

/* A slice's hidden tile, act(x . Wg[n0:n0+nb]^T) * (x . Wu[n0:n0+nb]^T), into
 * ht [rows of x, nb] by way of up (the one pass and the rows pass). */
static loom_status slice_hidden(const loom_kernel_args *a, loom_isa isa, const loom_tensor *x, int64_t n0,
                                int64_t nb, const void *xq, const double *inv, int invariant, float *up, float *ht) {
    const loom_ffn_attrs *at = a->attrs;
    const float *gamma = at->norm ? (const float *)a->src[a->n_src - 1]->data : NULL;
    loom_matmul_args u = loom_fused_block_gemm(x, a->src[2], n0, nb, up, nb, at->act_precision);
    u.xq = xq, u.invariant = invariant, u.norm_gamma = gamma, u.norm_inv = inv;
    LOOM_TRY(loom_matmul_run(&u, isa, 0, 1, a->scratch));
    loom_matmul_args g = loom_fused_block_gemm(x, a->src[1], n0, nb, ht, nb, at->act_precision);
    g.xq = xq, g.invariant = invariant, g.norm_gamma = gamma, g.norm_inv = inv;
    LOOM_TRY(loom_matmul_run(&g, isa, 0, 1, a->scratch));
    return loom_fused_act_mul_tile(at->act, isa, ht, nb, up, x->shape[0], nb);
}

/* One pass: the slices [s0, s1) of this thread into their partials, then the
 * last thread to arrive sums them (module comment). */
static loom_status one_pass_kernel(const loom_kernel_args *a, loom_isa isa) {
    const loom_ffn_attrs *at = a->attrs;
    const loom_tensor *x = a->src[0];
    const int32_t act = at->act_precision;
    int64_t M = x->shape[0], D = a->src[3]->shape[0], H = a->src[1]->shape[0], ns = one_pass_slices(at, H);
    int64_t sw = slice_max(H, ns), s0, s1, n0, nb;
    float *part = a->shared;
    loom_status st = LOOM_OK;
    if ((size_t)(ns * M * D) * sizeof(float) > a->shared_bytes || (a->nth > 1 && !a->arrive))
        st = loom_set_error(LOOM_ERR_INVALID_ARG, "ffn: one pass of %lld rows needs %lld shared bytes%s, has %zu",
                            (long long)M, (long long)(ns * M * D * 4), a->nth > 1 && !a->arrive ? " and a counter" : "",
                            a->shared_bytes);
    loom_ref_split(ns, a->ith, a->nth, &s0, &s1);
    one_pass_layout L = one_pass_scratch(a->src, at, M);
    if (st == LOOM_OK && L.end > a->scratch_bytes)
        st = loom_set_error(LOOM_ERR_INVALID_ARG, "ffn: one pass of %lld rows needs %zu scratch bytes, has %zu",
                            (long long)M, L.end, a->scratch_bytes);
    if (st == LOOM_OK && s0 < s1) {
        char *sc = a->scratch;
        float *up = (float *)(sc + L.up), *ht = (float *)(sc + L.h);
        const float *gamma = at->norm ? (const float *)a->src[a->n_src - 1]->data : NULL;
        double *inv = at->norm ? (double *)(sc + L.inv) : NULL;
        loom_matmul_args probe = loom_fused_block_gemm(x, a->src[1], 0, sw, NULL, sw, act);
        void *xq = loom_matmul_prepare_x(&probe, isa, gamma, at->norm_eps, inv, sc + L.xq);
        /* every slice's hidden tile (slice s at ht + (s - s0) * M * sw) ... */
        for (int64_t s = s0; s < s1 && st == LOOM_OK; s++) {
            slice_at(H, ns, s, &n0, &nb);
            st = slice_hidden(a, isa, x, n0, nb, xq, inv, 0, up, ht + (s - s0) * M * sw);
        }
        /* ... then their down projections, Wd's rows in blocks with the
         * slices taken in turn (loom_fused_slices_project) */
        loom_fused_slice sl[LOOM_FFN_ONE_PASS_MAX_SLICES];
        for (int64_t s = s0; s < s1; s++) {
            slice_at(H, ns, s, &n0, &nb);
            sl[s - s0] = (loom_fused_slice){ht + (s - s0) * M * sw, nb, n0, nb};
        }
        if (st == LOOM_OK)
            st = loom_fused_slices_project(isa, a->src[3], M, act, 0, sl, s1 - s0, part + s0 * M * D, sc + L.dq,
                                           L.dq_step, sc);
    }
    int failed = st != LOOM_OK;
    if (!loom_kernel_arrive(a, &failed) || failed) return st;
    /* the last thread: y = ((p_0 + p_1) + ...) (+ residual), row by row */
    loom_fused_sum_partials(isa, M, D, ns, part, has_residual(at, a->n_src) ? a->src[4] : NULL, a->dst);
    return LOOM_OK;
}

/* Rows in one pass: this thread's blocks of rows, each through every slice
 * (module comment). */
static loom_status rows_kernel(const loom_kernel_args *a, loom_isa isa) {
    const loom_ffn_attrs *at = a->attrs;
    const loom_tensor *x = a->src[0], *res = has_residual(at, a->n_src) ? a->src[4] : NULL;
    const int32_t act = at->act_precision;
    int64_t M = x->shape[0], D = a->src[3]->shape[0], H = a->src[1]->shape[0];
    int64_t ns = rows_slices(at, H), sw = slice_max(H, ns), R = rows_per_block(at, M, a->nth), b0, b1, n0, nb;
    loom_ref_split((M + R - 1) / R, a->ith, a->nth, &b0, &b1);
    one_pass_layout L = rows_scratch(a->src, at);
    LOOM_RETURN_IF(L.end > a->scratch_bytes, LOOM_ERR_INVALID_ARG, "ffn: %lld rows in blocks need %zu scratch bytes, has %zu",
                   (long long)M, L.end, a->scratch_bytes);
    char *sc = a->scratch;
    float *up = (float *)(sc + L.up), *ht = (float *)(sc + L.h), *part = (float *)(sc + L.part);
    const float *gamma = at->norm ? (const float *)a->src[a->n_src - 1]->data : NULL;
    double *inv = at->norm ? (double *)(sc + L.inv) : NULL;
    const int64_t ldy = a->dst->stride[0];
    for (int64_t b = b0; b < b1; b++) {
        int64_t m0 = b * R, rb = M - m0 < R ? M - m0 : R;
        loom_tensor xb = *x;
        xb.shape[0] = rb, xb.data = (float *)x->data + m0 * x->stride[0];
        float *yb = (float *)a->dst->data + m0 * ldy;
        loom_matmul_args probe = loom_fused_block_gemm(&xb, a->src[1], 0, sw, NULL, sw, act);
        probe.invariant = 1;
        void *xq = loom_matmul_prepare_x(&probe, isa, gamma, at->norm_eps, inv, sc + L.xq);
        /* the running sum: the residual's rows, then the previous slice's output */
        const float *prev = res ? (const float *)res->data + m0 * res->stride[0] : NULL;
        int64_t ld_prev = res ? res->stride[0] : 0;
        for (int64_t s = 0; s < ns; s++) {
            slice_at(H, ns, s, &n0, &nb);
            LOOM_TRY(slice_hidden(a, isa, &xb, n0, nb, xq, inv, 1, up, ht));
            /* y and part alternate so that the last slice writes y */
            float *out = (ns - 1 - s) % 2 == 0 ? yb : part;
            loom_matmul_args d = slice_down(a->src, rb, n0, nb, ht, out, act);
            loom_epilogue ep = {.residual = prev, .ld_res = ld_prev};
            d.ldy = out == yb ? ldy : D, d.invariant = 1, d.ep = prev ? &ep : NULL;
            LOOM_TRY(loom_matmul_run(&d, isa, 0, 1, sc));
            prev = out, ld_prev = d.ldy;
        }
    }
    return LOOM_OK;
}

static loom_status ffn_kernel(const loom_kernel_args *a, loom_isa isa) {
    if (one_pass(a->attrs, a->src[0]->shape[0], a->invariant)) return one_pass_kernel(a, isa);
    if (rows_pass(a->src, a->attrs, a->src[0]->shape[0], a->invariant)) return rows_kernel(a, isa);
    LOOM_RETURN_IF(a->n_dst_extra < 1 || !a->dst_extra[0], LOOM_ERR_INVALID_ARG,
                   "ffn: the hidden buffer output is missing");
    const loom_tensor *h = a->dst_extra[0];
    if (a->phase == 0) return gate_up(a, isa);
    loom_epilogue ep;
    const loom_ffn_attrs *at = a->attrs;
    loom_matmul_args d = down_args(a->src, has_residual(at, a->n_src), h, a->dst, &ep, at->act_precision);
    d.invariant = a->invariant;
    if (h_q8_on(a, isa)) d.xq = h->data; /* quantized by phase 0 */
    return loom_matmul_run(&d, isa, a->ith, a->nth, a->scratch);
}

LOOM_FUSED_LEVELS(ffn, ffn_kernel)

void loom_register_ffn_op(loom_op_info *e) {
    e->infer = ffn_infer, e->cost = ffn_cost, e->scratch_size = ffn_scratch, e->ref = ffn_ref;
    e->n_phases = 2;
    e->phases = ffn_phases, e->shared_size = ffn_shared;
    e->decomposition = "matmul matmul silu mul matmul add";
    LOOM_FUSED_SET_LEVELS(e, ffn);
}
