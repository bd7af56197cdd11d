/*
 * SwiGLU and the FFN block. The gate/up kernel walks the hidden dimension in
 * column blocks: for each block it computes the up tile (M x block_n) into this
 * thread's scratch, then the gate tile with the epilogue act(gate) * up, so the
 * up projection never travels to main memory and h is written once. The down
 * projection is a second kernel (it needs all of h), with the residual added
 * in its epilogue.
 */
#include <string.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/status.h"
#include "fused/fused_internal.h"

loom_ffn_params loom_ffn_default_params(void) {
    loom_ffn_params p = {.act = LOOM_ACT_SILU, .custom_act = NULL, .custom_user = NULL, .block_n = 0};
    return p;
}

/* ------------------------------------------------------------ swiglu */

typedef struct { const loom_tensor *x; loom_tensor *y; loom_act act; const loom_vec_fns *f; } swiglu_ctx;

static void swiglu_worker(int ith, int nth, void *arg) {
    swiglu_ctx *c = arg;
    int64_t M = c->y->shape[0], H = c->y->shape[1], lo, hi;
    loom_matmul_split(M, 1, ith, nth, &lo, &hi);
    for (int64_t m = lo; m < hi; m++) {
        const float *a = (const float *)c->x->data + m * c->x->stride[0], *b = a + H;
        float *y = (float *)c->y->data + m * c->y->stride[0];
        if (c->act == LOOM_ACT_SILU) c->f->silu(a, y, H);
        else
            for (int64_t j = 0; j < H; j++) y[j] = loom_act_apply(c->act, a[j]);
        c->f->mul(y, b, y, H);
    }
}

loom_status loom_swiglu(const loom_tensor *x, loom_act act, loom_tensor *y, loom_pool *pool) {
    LOOM_RETURN_IF(!x || x->ndim != 2 || x->shape[1] % 2, LOOM_ERR_SHAPE,
                   "swiglu: x must be 2-D [M, 2H] with an even last dim");
    LOOM_RETURN_IF((unsigned)act >= LOOM_ACT_COUNT, LOOM_ERR_INVALID_ARG, "swiglu: unknown act %d", (int)act);
    int64_t M = x->shape[0], H = x->shape[1] / 2;
    LOOM_TRY(loom_fused_check_2d("swiglu", "x", x, M, 2 * H));
    LOOM_TRY(loom_fused_check_2d("swiglu", "y", y, M, H));
    swiglu_ctx c = {x, y, act, loom_vec_fns_for(loom_cpu_isa())};
    loom_fused_run(pool, swiglu_worker, &c);
    return LOOM_OK;
}

/* ------------------------------------------------------------ FFN gate/up */

int64_t loom_ffn_block_cols(int64_t M, int64_t H) {
    return loom_ffn_block_cols_for(M, H, loom_cpu_get()->l3_bytes);
}

int64_t loom_ffn_block_cols_for(int64_t M, int64_t H, int64_t l3_bytes) {
    if (H < 1) return 1;
    if (M < LOOM_GEMM_MIN_M) return H < 128 ? H : 128;
    int64_t l3 = l3_bytes > 0 ? l3_bytes : (8 << 20);
    int64_t bn = l3 / 8 / (4 * M);
    if (bn < 64) bn = 64;
    int64_t nb = (H + bn - 1) / bn;
    nb = (nb + 3) / 4 * 4;
    bn = (H + nb - 1) / nb;
    bn = (bn + 31) / 32 * 32;
    return bn < H ? bn : H;
}

int64_t loom_ffn_row_slice(int64_t row_block, int64_t H, int64_t l3_bytes, int threads) {
    if (H < 1) return 1;
    int64_t l3 = (l3_bytes > 0 ? l3_bytes : (8 << 20)) / (threads > 0 ? threads : 1);
    int64_t s = l3 / 8 / (4 * (row_block > 0 ? row_block : 1));
    s = s < 64 ? 64 : s;
    int64_t ns = (H + s - 1) / s;
    s = ((H + ns - 1) / ns + 63) / 64 * 64;
    return s < H ? s : H;
}

int loom_ffn_one_pass_slices_for(int threads) {
    int t = threads > 0 ? threads : 1;
    return t * ((LOOM_FFN_ONE_PASS_SLICES + t - 1) / t);
}

/* The kernel level where the ffn's one-kernel forms (the decode one pass, the
 * prefill rows pass) measured no slower than the two phases, so the rules'
 * default there: AVX2 (Zen 3). At AVX-512 (Zen 4) both ran slower; the
 * generic and reference levels were not measured (bench/results/fusion.md). */
static int one_kernel_by_default(int isa) { return isa == LOOM_ISA_AVX2; }

int32_t loom_ffn_row_block_auto(int isa) { return one_kernel_by_default(isa) ? LOOM_FFN_ROW_BLOCK : 0; }

int32_t loom_ffn_one_pass_rows_auto(loom_dtype w_gate, loom_dtype w_up, loom_dtype w_down, int threads, int isa) {
    int fl = !loom_dtype_is_quantized(w_gate) && !loom_dtype_is_quantized(w_up) && !loom_dtype_is_quantized(w_down);
    return fl && threads <= LOOM_FFN_ONE_PASS_AUTO_THREADS && one_kernel_by_default(isa) ? 1 : 0;
}

static int64_t block_cols(const loom_ffn_args *a) {
    return a->p.block_n > 0 ? a->p.block_n : loom_ffn_block_cols(a->M, a->H);
}

static loom_matmul_args sub_gemm(const loom_ffn_args *a, const void *w, int64_t n0, int64_t bn,
                                 float *y, int64_t ldy) {
    size_t row = loom_dtype_row_bytes(a->wtype, a->ldw);
    loom_matmul_args g = {.x = a->x, .ldx = a->ldx, .w = (const char *)w + row * (size_t)n0,
                          .ldw = a->ldw, .wtype = a->wtype, .y = y, .ldy = ldy,
                          .M = a->M, .N = bn, .K = a->D, .act = a->p.act_precision};
    return g;
}

/* Scratch: the sub-GEMM's, the up tile, then x quantized once for all column
 * blocks (quantized weights on the GEMM path; every sub-GEMM would otherwise
 * quantize all of x again). */
static size_t up_tile_offset(const loom_ffn_args *a, int64_t bn) {
    loom_matmul_args g = sub_gemm(a, a->w_gate, 0, bn, NULL, bn);
    return (loom_matmul_scratch_size(&g) + 63) & ~(size_t)63;
}

static size_t xq_offset(const loom_ffn_args *a, int64_t bn) {
    return up_tile_offset(a, bn) + (((size_t)(a->M * bn) * sizeof(float) + 63) & ~(size_t)63);
}

size_t loom_ffn_gate_up_scratch(const loom_ffn_args *a) {
    int64_t bn = block_cols(a);
    loom_matmul_args g = sub_gemm(a, a->w_gate, 0, bn, NULL, bn);
    return xq_offset(a, bn) + loom_matmul_xq_bytes(&g) + 64;
}

typedef struct { loom_act_fn act; void *user; const float *up; int64_t ldu; } custom_ep;

/* Epilogue step for a user activation: tile = act(tile) * up. */
static void custom_act_times_up(float *tile, int64_t ld, int64_t m0, int64_t n0, int64_t mr,
                                int64_t nr, void *user) {
    const custom_ep *c = user;
    for (int64_t r = 0; r < mr; r++)
        for (int64_t j = 0; j < nr; j++)
            tile[r * ld + j] = c->act(tile[r * ld + j], c->user) * c->up[(m0 + r) * c->ldu + n0 + j];
}

loom_status loom_ffn_gate_up_kernel(const loom_ffn_args *a, loom_isa isa, int ith, int nth,
                                    void *scratch) {
    int64_t bn = block_cols(a), nblocks = (a->H + bn - 1) / bn, b0, b1;
    loom_matmul_split(nblocks, 1, ith, nth, &b0, &b1);
    if (b0 >= b1) return LOOM_OK;
    float *up = (float *)((char *)scratch + up_tile_offset(a, bn));
    void *xq = NULL;
    loom_matmul_args probe = sub_gemm(a, a->w_gate, 0, bn, NULL, bn);
    if (isa != LOOM_ISA_REF && loom_matmul_xq_bytes(&probe) > 0) {
        xq = (char *)scratch + xq_offset(a, bn);
        loom_matmul_quantize_x(&probe, isa, 0, a->M, xq);
    }
    for (int64_t b = b0; b < b1; b++) {
        int64_t n0 = b * bn, nb = a->H - n0 < bn ? a->H - n0 : bn;
        loom_matmul_args u = sub_gemm(a, a->w_up, n0, nb, up, nb);
        u.xq = xq;
        LOOM_TRY(loom_matmul_run(&u, isa, 0, 1, scratch));
        custom_ep cep = {a->p.custom_act, a->p.custom_user, up, nb};
        loom_epilogue ep = {.act = a->p.act, .mul = up, .ld_mul = nb};
        if (a->p.custom_act) ep = (loom_epilogue){.fn = custom_act_times_up, .user = &cep};
        loom_matmul_args g = sub_gemm(a, a->w_gate, n0, nb, a->h + n0, a->ldh);
        g.ep = &ep, g.xq = xq;
        LOOM_TRY(loom_matmul_run(&g, isa, 0, 1, scratch));
    }
    return LOOM_OK;
}

/* ------------------------------------------------------------ FFN wrapper */

typedef struct {
    const loom_ffn_args *a;
    loom_matmul_args down;
    loom_isa isa;
    int phase;                 /* 0: gate/up, 1: down */
    unsigned char *scratch;
    size_t per;
    loom_status status;
} ffn_ctx;

static void ffn_worker(int ith, int nth, void *arg) {
    ffn_ctx *c = arg;
    void *s = c->scratch + c->per * (size_t)ith;
    loom_status st = c->phase == 0 ? loom_ffn_gate_up_kernel(c->a, c->isa, ith, nth, s)
                                   : loom_matmul_run(&c->down, c->isa, ith, nth, s);
    if (st != LOOM_OK) c->status = st;
}

static loom_status check_weight(const char *name, const loom_tensor *w, int64_t rows, int64_t cols) {
    LOOM_RETURN_IF(!w || !w->data, LOOM_ERR_INVALID_ARG, "ffn: %s is missing", name);
    LOOM_RETURN_IF(w->ndim != 2 || w->shape[0] != rows || w->shape[1] != cols || w->stride[1] != 1,
                   LOOM_ERR_SHAPE, "ffn: %s must be [%lld, %lld] with contiguous rows", name,
                   (long long)rows, (long long)cols);
    return LOOM_OK;
}

/* Validated shapes of one FFN call and its memory needs; nothing allocated.
 * residual and y may be NULL (a workspace-size query). */
typedef struct {
    loom_ffn_args a;
    loom_matmul_args down;
    loom_epilogue down_ep;
    size_t h_bytes, per; /* h, and the scratch of one thread */
} ffn_setup;

static loom_status ffn_prepare(const loom_tensor *x, const loom_tensor *w_gate, const loom_tensor *w_up,
                               const loom_tensor *w_down, const loom_tensor *residual,
                               const loom_ffn_params *p, const loom_tensor *y, ffn_setup *f) {
    loom_ffn_params prm = p ? *p : loom_ffn_default_params();
    LOOM_RETURN_IF(!x || x->ndim != 2, LOOM_ERR_SHAPE, "ffn: x must be 2-D [M, D]");
    LOOM_RETURN_IF(!w_down || w_down->ndim != 2, LOOM_ERR_SHAPE, "ffn: w_down must be 2-D [D, H]");
    LOOM_RETURN_IF(!prm.custom_act && (unsigned)prm.act >= LOOM_ACT_COUNT, LOOM_ERR_INVALID_ARG,
                   "ffn: unknown act %d", (int)prm.act);
    LOOM_RETURN_IF(prm.block_n < 0, LOOM_ERR_INVALID_ARG, "ffn: block_n must be >= 0");
    LOOM_RETURN_IF((unsigned)prm.act_precision >= LOOM_ACT_PREC_COUNT, LOOM_ERR_INVALID_ARG,
                   "ffn: unknown act_precision %d", (int)prm.act_precision);
    int64_t M = x->shape[0], D = x->shape[1], H = w_down->shape[1];
    LOOM_TRY(loom_fused_check_2d("ffn", "x", x, M, D));
    if (y) LOOM_TRY(loom_fused_check_2d("ffn", "y", y, M, D));
    if (residual) LOOM_TRY(loom_fused_check_2d("ffn", "residual", residual, M, D));
    LOOM_TRY(check_weight("w_down", w_down, D, H));
    const void *wg, *wu;
    if (w_up) {
        LOOM_TRY(check_weight("w_gate", w_gate, H, D));
        LOOM_TRY(check_weight("w_up", w_up, H, D));
        LOOM_RETURN_IF(w_up->dtype != w_gate->dtype, LOOM_ERR_DTYPE, "ffn: w_gate and w_up dtypes differ");
        wg = w_gate->data;
        wu = w_up->data;
    } else {
        LOOM_TRY(check_weight("w_gate (merged gate/up)", w_gate, 2 * H, D));
        wg = w_gate->data;
        wu = (const char *)w_gate->data + loom_dtype_row_bytes(w_gate->dtype, w_gate->stride[0]) * (size_t)H;
    }
    memset(f, 0, sizeof *f);
    f->a = (loom_ffn_args){.x = x->data, .ldx = x->stride[0], .w_gate = wg, .w_up = wu,
                           .wtype = w_gate->dtype, .ldw = w_gate->stride[0], .ldh = H,
                           .M = M, .D = D, .H = H, .p = prm};
    f->down_ep = (loom_epilogue){.residual = residual ? residual->data : NULL,
                                 .ld_res = residual ? residual->stride[0] : 0};
    f->down = (loom_matmul_args){.x = NULL, .ldx = H, .w = w_down->data, .ldw = w_down->stride[0],
                                 .wtype = w_down->dtype, .y = y ? y->data : NULL,
                                 .ldy = y ? y->stride[0] : D, .M = M, .N = D, .K = H,
                                 .ep = residual ? &f->down_ep : NULL, .act = prm.act_precision};
    /* the checks read no data: x stands in for h (not allocated yet) and for y
     * in a size query */
    loom_matmul_args dcheck = f->down;
    dcheck.x = x->data;
    if (!dcheck.y) dcheck.y = x->data;
    LOOM_TRY(loom_matmul_check(&dcheck));
    loom_matmul_args g = {.x = f->a.x, .ldx = f->a.ldx, .w = wg, .ldw = f->a.ldw, .wtype = f->a.wtype,
                          .y = dcheck.y, .ldy = H, .M = M, .N = H, .K = D};
    LOOM_TRY(loom_matmul_check(&g));
    size_t s1 = loom_ffn_gate_up_scratch(&f->a), s2 = loom_matmul_scratch_size(&f->down);
    f->per = ((s1 > s2 ? s1 : s2) + 63) & ~(size_t)63;
    f->h_bytes = ((size_t)(M * H) * sizeof(float) + 63) & ~(size_t)63;
    return LOOM_OK;
}

loom_status loom_ffn_workspace_size(const loom_tensor *x, const loom_tensor *w_gate,
                                    const loom_tensor *w_up, const loom_tensor *w_down,
                                    const loom_ffn_params *p, int nth, size_t *bytes) {
    LOOM_TRY(loom_fused_check_size_query("ffn", nth, bytes));
    ffn_setup f;
    LOOM_TRY(ffn_prepare(x, w_gate, w_up, w_down, NULL, p, NULL, &f));
    *bytes = f.h_bytes + f.per * (size_t)nth;
    return LOOM_OK;
}

loom_status loom_ffn_ws(const loom_tensor *x, const loom_tensor *w_gate, const loom_tensor *w_up,
                        const loom_tensor *w_down, const loom_tensor *residual,
                        const loom_ffn_params *p, loom_tensor *y, void *workspace, size_t bytes,
                        loom_pool *pool) {
    LOOM_RETURN_IF(!y, LOOM_ERR_INVALID_ARG, "ffn: y is missing");
    ffn_setup f;
    LOOM_TRY(ffn_prepare(x, w_gate, w_up, w_down, residual, p, y, &f));
    int nth = pool ? loom_pool_size(pool) : 1;
    size_t need = f.h_bytes + f.per * (size_t)nth;
    unsigned char *mem;
    LOOM_TRY(loom_fused_acquire("ffn", workspace, bytes, need, nth, &mem));
    f.a.h = (float *)mem;
    f.down.x = f.a.h;
    ffn_ctx c = {.a = &f.a, .down = f.down, .isa = loom_cpu_isa(), .status = LOOM_OK,
                 .scratch = mem + f.h_bytes, .per = f.per};
    loom_fused_run(pool, ffn_worker, &c);
    c.phase = 1;
    if (c.status == LOOM_OK) loom_fused_run(pool, ffn_worker, &c);
    loom_fused_release(workspace, mem);
    return c.status;
}

loom_status loom_ffn(const loom_tensor *x, const loom_tensor *w_gate, const loom_tensor *w_up,
                     const loom_tensor *w_down, const loom_tensor *residual,
                     const loom_ffn_params *p, loom_tensor *y, loom_pool *pool) {
    return loom_ffn_ws(x, w_gate, w_up, w_down, residual, p, y, NULL, 0, pool);
}
