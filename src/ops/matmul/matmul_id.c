/*
 * Rows grouped by expert and the grouped matmul's units (matmul_id.h), and the
 * optimised kernels of the matmul_id primitive: per (expert, column block)
 * unit one GEMM of the family over the expert's rows, so an expert's weights
 * are streamed once per step for all rows routed to it, not once per row.
 */
#include "ops/matmul/matmul_id.h"

#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "ops/ref/ref.h"
#include "ops/register.h"

size_t loom_moe_routing_bytes(int64_t n_tokens, int64_t top_k, int64_t n_experts) {
    return loom_align64((size_t)(n_experts + 1) * sizeof(int32_t)) + 2 * loom_align64((size_t)(n_tokens * top_k) * sizeof(int32_t));
}

loom_status loom_moe_route(const int32_t *ids, int64_t ld_ids, int64_t n_tokens, int64_t top_k,
                           int64_t n_experts, void *mem, loom_moe_routing *r) {
    char *p = mem;
    r->n_tokens = n_tokens, r->top_k = top_k, r->n_experts = n_experts;
    r->offsets = (int32_t *)(void *)p;
    r->perm = (int32_t *)(void *)(p + loom_align64((size_t)(n_experts + 1) * sizeof(int32_t)));
    r->inv = (int32_t *)(void *)((char *)r->perm + loom_align64((size_t)(n_tokens * top_k) * sizeof(int32_t)));
    memset(r->offsets, 0, (size_t)(n_experts + 1) * sizeof(int32_t));
    for (int64_t t = 0; t < n_tokens; t++)
        for (int64_t j = 0; j < top_k; j++) {
            int32_t e = ids[t * ld_ids + j];
            LOOM_RETURN_IF(e < 0 || e >= n_experts, LOOM_ERR_INVALID_ARG,
                           "moe routing: expert id %d of token %lld, rank %lld, is outside [0, %lld)", (int)e,
                           (long long)t, (long long)j, (long long)n_experts);
            r->offsets[e + 1]++;
        }
    for (int64_t e = 0; e < n_experts; e++) r->offsets[e + 1] += r->offsets[e];
    /* counting sort, stable: within an expert the slots stay in slot order */
    for (int64_t t = 0; t < n_tokens; t++)
        for (int64_t j = 0; j < top_k; j++) {
            int32_t e = ids[t * ld_ids + j];
            int32_t i = r->offsets[e]++;
            r->perm[i] = (int32_t)(t * top_k + j);
            r->inv[t * top_k + j] = i;
        }
    for (int64_t e = n_experts; e > 0; e--) r->offsets[e] = r->offsets[e - 1];
    r->offsets[0] = 0;
    return LOOM_OK;
}

static loom_matmul_args unit_args(int64_t M, int64_t K, int64_t nb, loom_dtype wtype, loom_act_precision act) {
    loom_matmul_args g = {.ldx = K, .ldw = K, .wtype = wtype, .ldy = nb, .M = M, .N = nb, .K = K, .act = act};
    return g;
}

size_t loom_moe_gemm_scratch(int64_t max_rows, int64_t K, int64_t nb, loom_dtype wtype, loom_act_precision act) {
    /* the GEMM's for the most rows, and the GEMV's below LOOM_GEMM_MIN_M rows */
    if (max_rows < 1) max_rows = 1;
    loom_matmul_args big = unit_args(max_rows, K, nb, wtype, act);
    loom_matmul_args small = unit_args(max_rows < LOOM_GEMM_MIN_M ? max_rows : LOOM_GEMM_MIN_M - 1, K, nb, wtype, act);
    size_t s = loom_matmul_scratch_size(&big), s2 = loom_matmul_scratch_size(&small);
    return loom_align64(s > s2 ? s : s2);
}

size_t loom_moe_unit_scratch(int64_t max_rows, int64_t K, int64_t nb, loom_dtype wtype, loom_act_precision act) {
    return loom_moe_gemm_scratch(max_rows, K, nb, wtype, act) + loom_align64((size_t)(max_rows * K) * sizeof(float));
}

loom_status loom_moe_unit_run(const loom_moe_unit *u, loom_isa isa, float *tile, void *scratch) {
    int64_t M = loom_moe_unit_rows(u);
    if (M == 0) return LOOM_OK;
    loom_matmul_args g = unit_args(M, u->K, u->nb, u->wtype, u->act);
    float *xg = scratch; /* the gathered rows, then the GEMM's scratch */
    const int32_t *slots = u->r->perm + u->r->offsets[u->e];
    for (int64_t i = 0; i < M; i++)
        memcpy(xg + i * u->K, u->x + (slots[i] / u->x_div) * u->ldx, (size_t)u->K * sizeof(float));
    size_t row = loom_dtype_row_bytes(u->wtype, u->K);
    g.x = xg;
    g.w = (const char *)u->w + (size_t)u->e * loom_moe_expert_bytes(u->wtype, u->N, u->K) + (size_t)u->n0 * row;
    g.y = tile;
    g.invariant = u->invariant;
    return loom_matmul_run(&g, isa, 0, 1, (char *)scratch + loom_align64((size_t)(M * u->K) * sizeof(float)));
}

int64_t loom_moe_units(const int32_t *offsets, int64_t E, int64_t N, int64_t bn) {
    int64_t used = 0;
    for (int64_t e = 0; e < E; e++) used += offsets[e + 1] > offsets[e];
    return used * ((N + bn - 1) / bn);
}

void loom_moe_unit_at(const int32_t *offsets, int64_t E, int64_t N, int64_t bn, int64_t i, int64_t *e, int64_t *n0) {
    int64_t nblk = (N + bn - 1) / bn, want = i / nblk;
    *e = 0, *n0 = (i % nblk) * bn;
    for (int64_t k = 0; k < E; k++) {
        if (offsets[k + 1] == offsets[k]) continue;
        if (want-- == 0) { *e = k; return; }
    }
}

/* ------------------------------------------------------------ matmul_id kernels */

/* Output columns per unit: enough units for the threads in decode, few
 * enough x gathers in prefill. */
#define MATMUL_ID_BLOCK 128

/* Rows of a launch: one per slot (an expert gets at most all of them). */
static int64_t mid_rows(const loom_tensor *ids) { return ids->shape[0] * ids->shape[1]; }

static size_t matmul_id_scratch(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs) {
    (void)n_src, (void)dst;
    const loom_tensor *w = src[1], *ids = src[2];
    int64_t T = ids->shape[0], k = ids->shape[1], K = w->shape[2], N = w->shape[1];
    int64_t nb = N < MATMUL_ID_BLOCK ? N : MATMUL_ID_BLOCK;
    loom_act_precision act = attrs ? (loom_act_precision)((const loom_matmul_attrs *)attrs)->act_precision
                                   : LOOM_ACT_PREC_Q8;
    return loom_moe_routing_bytes(T, k, w->shape[0]) + loom_align64((size_t)(mid_rows(ids) * nb) * sizeof(float)) +
           loom_moe_unit_scratch(mid_rows(ids), K, nb, w->dtype, act);
}

/* Each thread routes the ids itself (a few microseconds), then runs its share
 * of the non-empty units and scatters each tile to its rows of y. */
static loom_status matmul_id_level(const loom_kernel_args *a, loom_isa isa) {
    const loom_tensor *x = a->src[0], *w = a->src[1], *ids = a->src[2], *y = a->dst;
    int64_t T = ids->shape[0], k = ids->shape[1], K = w->shape[2], N = w->shape[1], E = w->shape[0];
    if (!loom_tensor_is_contiguous(w) || !loom_tensor_is_contiguous(ids) || !loom_tensor_is_contiguous(y) ||
        x->stride[x->ndim - 1] != 1 || (x->ndim == 3 && x->stride[0] != k * x->stride[1]))
        return loom_op_get(LOOM_OP_MATMUL_ID)->ref(a);
    int64_t nb = N < MATMUL_ID_BLOCK ? N : MATMUL_ID_BLOCK;
    char *s = a->scratch;
    loom_moe_routing r;
    LOOM_TRY(loom_moe_route(ids->data, k, T, k, E, s, &r));
    s += loom_moe_routing_bytes(T, k, E);
    float *tile = (float *)(void *)s;
    s += loom_align64((size_t)(mid_rows(ids) * nb) * sizeof(float));
    loom_moe_unit u = {.r = &r, .x = x->data, .ldx = x->ndim == 3 ? x->stride[1] : x->stride[0],
                       .x_div = x->ndim == 3 ? 1 : k, .K = K, .w = w->data, .wtype = w->dtype, .N = N,
                       .act = a->attrs ? (loom_act_precision)((const loom_matmul_attrs *)a->attrs)->act_precision
                                       : LOOM_ACT_PREC_Q8,
                       .invariant = a->invariant};
    int64_t lo, hi;
    loom_ref_split(loom_moe_units(r.offsets, E, N, nb), a->ith, a->nth, &lo, &hi);
    float *yd = y->data;
    for (int64_t i = lo; i < hi; i++) {
        loom_moe_unit_at(r.offsets, E, N, nb, i, &u.e, &u.n0);
        u.nb = N - u.n0 < nb ? N - u.n0 : nb;
        LOOM_TRY(loom_moe_unit_run(&u, isa, tile, s));
        const int32_t *slots = r.perm + r.offsets[u.e];
        for (int64_t m = 0; m < loom_moe_unit_rows(&u); m++)
            memcpy(yd + slots[m] * N + u.n0, tile + m * u.nb, (size_t)u.nb * sizeof(float));
    }
    return LOOM_OK;
}

static loom_status matmul_id_generic(const loom_kernel_args *a) { return matmul_id_level(a, LOOM_ISA_GENERIC); }
#if defined(__x86_64__)
static loom_status matmul_id_avx2(const loom_kernel_args *a) { return matmul_id_level(a, LOOM_ISA_AVX2); }
static loom_status matmul_id_avx512(const loom_kernel_args *a) { return matmul_id_level(a, LOOM_ISA_AVX512); }
#endif

void loom_register_matmul_id_kernels(loom_op_info *table) {
    loom_op_info *m = &table[LOOM_OP_MATMUL_ID];
    m->scratch_size = matmul_id_scratch;
    m->opt[LOOM_ISA_GENERIC] = matmul_id_generic;
#if defined(__x86_64__)
    m->opt[LOOM_ISA_AVX2] = matmul_id_avx2;
    m->opt[LOOM_ISA_AVX512] = matmul_id_avx512;
#endif
}
