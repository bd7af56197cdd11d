/*
 * GEMV path of the matmul family (decode, M < LOOM_GEMM_MIN_M): W is streamed
 * exactly once. Each thread takes a contiguous range of W rows (outputs n) and
 * computes them for all M rows of x, so no row of W is read twice. Quantized
 * weights are dotted in int8 against x quantized per block of 32 (q8), which
 * each thread does once per call into its own scratch, or, with full
 * activations, dequantized in the kernel and multiplied by x in f32.
 *
 * This file holds the driver and the generic C kernels.
 */
#include "ops/matmul/gemv_kernels.h"

#include "ops/matmul/gemm_kernels.h"

#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "base/variants.h"

/* Rows per kernel call: the epilogue then runs on a tile that is still in L1. */
#define GEMV_CHUNK 64

/* Bytes of what full activations prepare from x (a multiple of 64): the
 * block sums, or at M = 1 with q4 weights x in bf16 halves (AVX512_BF16). */
static size_t sxo_bytes(const loom_matmul_args *a) {
    size_t s = ((size_t)a->M * (size_t)(a->K / 32) * sizeof(float) + 63) & ~(size_t)63;
#if defined(__x86_64__)
    if (a->M == 1 && a->wtype != LOOM_Q8_0) {
        size_t b = (loom_gemv_bf16_x_bytes(a->K) + 63) & ~(size_t)63;
        s = b > s ? b : s;
    }
#endif
    return s;
}


/* The bf16-product kernel applies (gemv_full_bf16.c), unless measurement
 * chose the f32 one (base/variants.h, gemv.q4_full). */
static int use_bf16(const loom_matmul_args *a, loom_isa isa) {
#if defined(__x86_64__)
    return isa >= LOOM_ISA_AVX512 && loom_cpu_get()->avx512_bf16 && a->M == 1 && a->wtype != LOOM_Q8_0 &&
           loom_variant(LOOM_VF_GEMV_Q4_FULL) == 0;
#else
    (void)a, (void)isa;
    return 0;
#endif
}

/* Scratch: the quantized x rows (q weights) or, with full activations, x's
 * block sums; then one output tile. */
size_t loom_gemv_scratch_size(const loom_matmul_args *a) {
    size_t xq = !loom_dtype_is_quantized(a->wtype) ? 0
                : loom_matmul_full_act(a)           ? sxo_bytes(a)
                                                    : (size_t)a->M * loom_q8_act_bytes(a->K);
    return xq + (size_t)a->M * GEMV_CHUNK * sizeof(float) + LOOM_ALIGN;
}

void loom_matmul_finish_tile(const loom_matmul_args *a, loom_isa isa, float *t, int64_t ldt,
                             int64_t m0, int64_t n0, int64_t mr, int64_t nr) {
    loom_gemm_tile_ep te;
    if (mr > 0 && nr > 0 && loom_gemm_tile_ep_init(&te, a->ep, t, ldt, (int)mr, (int)nr, m0, n0))
        loom_gemm_tile_epilogue(isa, &te);
    for (int64_t r = 0; r < mr; r++)
        memcpy(a->y + (m0 + r) * a->ldy + n0, t + r * ldt, (size_t)nr * sizeof(float));
    if (a->ep->fn) a->ep->fn(a->y + m0 * a->ldy + n0, a->ldy, m0, n0, mr, nr, a->ep->user);
}

/* ------------------------------------------------------------ generic kernels */

/* Float weights, and quantized weights with full activations: rows
 * converted to f32 a piece at a time (loom_row_to_f32: the reference's
 * dequantization), then f32 products. */
static void gemv_float_generic(const loom_matmul_args *a, int64_t n0, int64_t n1) {
    enum { CK = 256 };  /* k values converted to f32 at a time (whole blocks) */
    int64_t M = a->M, K = a->K;
    size_t rb = loom_dtype_row_bytes(a->wtype, a->ldw);
    float wbuf[CK];
    for (int64_t n = n0; n < n1; n++) {
        const char *wrow = (const char *)a->w + (size_t)n * rb;
        float acc[LOOM_GEMM_MIN_M][8] = {{0}};
        for (int64_t k0 = 0; k0 < K; k0 += CK) {
            int64_t kn = K - k0 < CK ? K - k0 : CK;
            const float *w = wbuf;
            if (a->wtype == LOOM_F32)
                w = (const float *)wrow + k0;
            else
                loom_row_to_f32(a->wtype, wrow + loom_dtype_row_bytes(a->wtype, k0), wbuf, kn);
            for (int64_t m = 0; m < M; m++) {
                const float *x = a->x + m * a->ldx + k0;
                for (int64_t k = 0; k < kn; k++) acc[m][k & 7] += x[k] * w[k];
            }
        }
        for (int64_t m = 0; m < M; m++) {
            float s = 0.0f;
            for (int j = 0; j < 8; j++) s += acc[m][j];
            a->y[m * a->ldy + n] = s;
        }
    }
}

/* Block b of a quantized row as 32 integers (q8_0: q; q4_x: the nibble) and
 * its scale and min (q4_1). */
static void unpack_block(loom_dtype t, const char *row, int64_t b, int8_t *q, float *d, float *mn) {
    *mn = 0.0f;
    if (t == LOOM_Q8_0) {
        const loom_block_q8_0 *blk = (const loom_block_q8_0 *)row + b;
        memcpy(q, blk->qs, 32);
        *d = loom_f16_to_f32(blk->d);
        return;
    }
    const uint8_t *qs;
    if (t == LOOM_Q4_0) {
        const loom_block_q4_0 *blk = (const loom_block_q4_0 *)row + b;
        qs = blk->qs;
        *d = loom_f16_to_f32(blk->d);
    } else {
        const loom_block_q4_1 *blk = (const loom_block_q4_1 *)row + b;
        qs = blk->qs;
        *d = loom_f16_to_f32(blk->d);
        *mn = loom_f16_to_f32(blk->m);
    }
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(qs[j] & 0x0F);
        q[j + 16] = (int8_t)(qs[j] >> 4);
    }
}

static void gemv_quant_generic(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0,
                               int64_t n1) {
    int64_t M = a->M, nb = a->K / 32;
    size_t rb = loom_dtype_row_bytes(a->wtype, a->ldw);
    for (int64_t n = n0; n < n1; n++) {
        const char *row = (const char *)a->w + (size_t)n * rb;
        float acc[LOOM_GEMM_MIN_M] = {0}, accm[LOOM_GEMM_MIN_M] = {0};
        for (int64_t b = 0; b < nb; b++) {
            int8_t q[32];
            float d, mn;
            unpack_block(a->wtype, row, b, q, &d, &mn);
            for (int64_t m = 0; m < M; m++) {
                const int8_t *xs = xq[m].qs + b * 32;
                int32_t dot = xq[m].bias[b];
                for (int j = 0; j < 32; j++) dot += (int32_t)q[j] * (int32_t)xs[j];
                acc[m] += (float)dot * (d * xq[m].d[b]);
                accm[m] += mn * xq[m].s[b];
            }
        }
        for (int64_t m = 0; m < M; m++) a->y[m * a->ldy + n] = acc[m] + accm[m];
    }
}

static void gemv_full_generic(const loom_matmul_args *a, const float *sxo, int64_t n0, int64_t n1) {
    (void)sxo;
    gemv_float_generic(a, n0, n1);
}

void loom_gemv_generic(const loom_matmul_args *a, const loom_q8_act *xq, int64_t n0, int64_t n1) {
    if (loom_dtype_is_quantized(a->wtype))
        gemv_quant_generic(a, xq, n0, n1);
    else
        gemv_float_generic(a, n0, n1);
}

/* ------------------------------------------------------------ driver */

/* The kernel for level isa and weight dtype wt, and the activation bias it
 * expects: q4_0 nibbles carry +8, which the generic kernel undoes in int32;
 * the AVX2 and VNNI kernels correct their offsets in f32 and take no bias. */
static loom_gemv_kernel pick_kernel(loom_isa isa, loom_dtype wt, int32_t *bias_mul) {
    *bias_mul = 0;
#if defined(__x86_64__)
    if (isa >= LOOM_ISA_AVX512 && (!loom_dtype_is_quantized(wt) || loom_cpu_get()->avx512_vnni))
        return loom_gemv_avx512;
    if (isa >= LOOM_ISA_AVX2) return loom_gemv_avx2;
#endif
    *bias_mul = wt == LOOM_Q4_0 ? -8 : 0;
    return loom_gemv_generic;
}

/* Full activations: the generic kernel dequantizes rows as the reference does
 * and needs no block sums. */
static loom_gemv_full_kernel pick_full_kernel(loom_isa isa, int *needs_sums) {
    *needs_sums = 0;
#if defined(__x86_64__)
    *needs_sums = 1;
    if (isa >= LOOM_ISA_AVX512) return loom_gemv_full_avx512;
    if (isa >= LOOM_ISA_AVX2) return loom_gemv_full_avx2;
    *needs_sums = 0;
#endif
    (void)isa;
    return gemv_full_generic;
}

void loom_gemv_x_block_sums(const loom_matmul_args *a, float *sxo) {
    int64_t nb = a->K / 32;
    float off = a->wtype == LOOM_Q4_0 ? -8.0f : 1.0f;
    for (int64_t m = 0; m < a->M; m++)
        for (int64_t b = 0; b < nb; b++) {
            const float *x = a->x + m * a->ldx + 32 * b;
            float s8[8];  /* eight lanes, then a fixed tree: vectorizes */
            for (int j = 0; j < 8; j++) s8[j] = x[j] + x[j + 8] + x[j + 16] + x[j + 24];
            float s = ((s8[0] + s8[4]) + (s8[1] + s8[5])) + ((s8[2] + s8[6]) + (s8[3] + s8[7]));
            sxo[m * nb + b] = off * s;
        }
}

/* The chunks of rows [lo, hi) with full activations (as loom_gemv_run). */
static loom_status gemv_full_run(const loom_matmul_args *a, loom_isa isa, int64_t lo, int64_t hi, void *scratch) {
    int needs_sums, bf16 = use_bf16(a, isa);
    loom_gemv_full_kernel kernel = pick_full_kernel(isa, &needs_sums);
    float *sxo = NULL, *tile = (float *)((char *)scratch + sxo_bytes(a));
#if defined(__x86_64__)
    if (bf16) loom_gemv_bf16_prepare_x(a->x, a->K, scratch);
#endif
    if (!bf16 && needs_sums && a->wtype != LOOM_Q8_0) {
        sxo = scratch;
        loom_gemv_x_block_sums(a, sxo);
    }
    size_t wrow = loom_dtype_row_bytes(a->wtype, a->ldw);
    for (int64_t n0 = lo; n0 < hi; n0 += GEMV_CHUNK) {
        int64_t nr = hi - n0 < GEMV_CHUNK ? hi - n0 : GEMV_CHUNK;
        loom_matmul_args c = *a;
        c.w = (const char *)a->w + (size_t)n0 * wrow;
        c.N = nr;
        c.y = a->ep ? tile : a->y + n0;
        if (a->ep) c.ldy = GEMV_CHUNK;
#if defined(__x86_64__)
        if (bf16) loom_gemv_full_bf16(&c, scratch, 0, nr);
        else
#endif
            kernel(&c, sxo, 0, nr);
        if (a->ep) loom_matmul_finish_tile(a, isa, tile, GEMV_CHUNK, 0, n0, a->M, nr);
    }
    return LOOM_OK;
}

loom_status loom_gemv_run(const loom_matmul_args *a, loom_isa isa, int ith, int nth, void *scratch) {
    int64_t lo, hi;
    loom_matmul_split(a->N, 16, ith, nth, &lo, &hi);
    if (lo >= hi) return LOOM_OK;
    if (loom_matmul_full_act(a)) return gemv_full_run(a, isa, lo, hi, scratch);
    int32_t bias_mul;
    loom_gemv_kernel kernel = pick_kernel(isa, a->wtype, &bias_mul);
    loom_q8_act xq[LOOM_GEMM_MIN_M] = {{0}};
    char *sp = scratch;  /* LOOM_ALIGN-aligned; each quantized row a multiple of 64 bytes */
    if (loom_dtype_is_quantized(a->wtype)) {
        size_t rb = loom_q8_act_bytes(a->K);
        for (int64_t m = 0; m < a->M; m++, sp += rb) {
            if (a->xq) { /* quantized by the caller (loom_matmul_quantize_x) */
                xq[m] = loom_q8_act_view((char *)a->xq + (size_t)m * rb, a->K);
                continue;
            }
            xq[m] = loom_q8_act_view(sp, a->K);
            loom_quantize_act(isa, a->x + m * a->ldx, a->K, bias_mul, xq[m]);
        }
    }
    float *tile = (float *)sp;
    size_t wrow = loom_dtype_row_bytes(a->wtype, a->ldw);
    for (int64_t n0 = lo; n0 < hi; n0 += GEMV_CHUNK) {
        int64_t nr = hi - n0 < GEMV_CHUNK ? hi - n0 : GEMV_CHUNK;
        /* the chunk as a problem of its own, written to y or, with an
         * epilogue, to the tile (y may be its mul or residual operand) */
        loom_matmul_args c = *a;
        c.w = (const char *)a->w + (size_t)n0 * wrow;
        c.N = nr;
        if (!a->ep) {
            c.y = a->y + n0;
            kernel(&c, xq, 0, nr);
            continue;
        }
        c.y = tile;
        c.ldy = GEMV_CHUNK;
        kernel(&c, xq, 0, nr);
        loom_matmul_finish_tile(a, isa, tile, GEMV_CHUNK, 0, n0, a->M, nr);
    }
    return LOOM_OK;
}

/* ------------------------------------------------------------ column slices */

loom_status loom_gemv_slices(const loom_matmul_args *s, int ns, loom_isa isa, int *done) {
    *done = 0;
#if defined(__x86_64__)
    if (isa < LOOM_ISA_AVX2 || ns < 1 || ns > LOOM_GEMV_SLICES_MAX) return LOOM_OK;
    /* the span of the slices' columns, fetched ahead as one GEMV over it
     * would be: by row for a segment of longer rows, else as whole rows are
     * (each slice along its row at the AVX-512 level's 16-bit weights, by the
     * hardware prefetchers otherwise) */
    size_t es = s[0].wtype == LOOM_F32 ? 4 : 2;
    const char *lo = s[0].w, *hi = s[0].w;
    for (int i = 0; i < ns; i++) {
        const loom_matmul_args *a = &s[i];
        if (loom_dtype_is_quantized(a->wtype) || a->wtype != s[0].wtype || a->M != s[0].M || a->N != s[0].N ||
            a->ldw != s[0].ldw || a->M < 1 || a->M >= LOOM_GEMM_MIN_M || a->invariant || a->ep || a->norm_gamma ||
            (isa >= LOOM_ISA_AVX512 && a->K >= 8192))
            return LOOM_OK;
        LOOM_TRY(loom_matmul_check(a));
        const char *b = a->w, *e = b + (size_t)a->K * es;
        lo = b < lo ? b : lo, hi = e > hi ? e : hi;
    }
    loom_matmul_args span = s[0];
    span.K = (int64_t)((size_t)(hi - lo) / es);
    int64_t ahead = loom_gemv_segment_ahead(&span, es);
    if (isa >= LOOM_ISA_AVX512) loom_gemv_slices_avx512(s, ns, ahead, 0, s[0].N);
    else loom_gemv_slices_avx2(s, ns, ahead, 0, s[0].N);
    *done = 1;
#else
    (void)s, (void)ns, (void)isa;
#endif
    return LOOM_OK;
}
