/* Optimised kernels of the primitive ops over the KV cache: kv_append (row
 * copies) and attention.
 *
 * attention (LOOM_OP_ATTENTION: softmax(q.k^T * scale + mask).v with GQA and
 * an optional causal mask):
 * the same computation, run by the FlashAttention prefill driver instead of
 * the f64 reference loop. The graph is unchanged (one primitive node); only
 * the kernel that executes it differs, so step_by_step keeps its meaning
 * while attention over a long KV cache stops dominating its time.
 *
 * Mapping: q/k/v [B, S, H, D] are BSND; causal with q_pos_offset p makes key
 * j visible to query i when j <= p + i, which is sparse_mode 0's band with
 * next_tokens = p (and a sliding window its pre_tokens); an f32 mask
 * [Sq, Skv] is the additive atten_mask. */
#include "fused/flash_attention_internal.h"
#include "fused/fused_internal.h"

#include <string.h>

#include "base/status.h"
#include "ops/quant.h"
#include "ops/ref/ref.h"
#include "ops/register.h"

static loom_flash_attention_params prim_params(const void *attrs) {
    static const loom_attention_attrs none = {0};
    const loom_attention_attrs *a = attrs ? attrs : &none;
    loom_flash_attention_params p = loom_flash_attention_default_params();
    p.input_layout = LOOM_ATTN_BSND;
    p.scale_value = a->scale;  /* 0 = 1/sqrt(D) in both */
    p.softcap = a->softcap;
    p.sparse_mode = LOOM_SPARSE_DEFAULT;
    p.pre_tokens = LOOM_ATTN_TOKENS_ALL;
    p.next_tokens = a->causal ? (int64_t)a->q_pos_offset : LOOM_ATTN_TOKENS_ALL;
    /* a window: key j visible to query i from p + i - (window - 1) on, i.e.
     * i - pre_tokens with pre_tokens = window - 1 - p (negative past the first window) */
    if (a->causal && a->window > 0) p.pre_tokens = (int64_t)a->window - 1 - a->q_pos_offset;
    return p;
}

static loom_status prim_resolve(const loom_tensor *const *src, int n_src, const void *attrs,
                                const loom_tensor *dst, attn_problem *pr) {
    loom_flash_attention_params p = prim_params(attrs);
    loom_flash_attention_tensors t = {.query = src[0], .key = src[1], .value = src[2],
                                      .atten_mask = loom_ref_attention_mask(src, n_src),
                                      .attention_out = (loom_tensor *)dst};
    loom_tensor ks, vs;
    if (src[1]->dtype == LOOM_I8 && n_src >= 5) { /* per-token scales, [B, S, Hkv] -> [B, Hkv, S] */
        attn_scale_view(src[3], &ks), attn_scale_view(src[4], &vs);
        t.key_antiquant_scale = &ks, t.value_antiquant_scale = &vs;
        p.key_antiquant_mode = p.value_antiquant_mode = LOOM_ANTIQUANT_PER_TOKEN;
    }
    return attn_resolve_prefill(&t, &p, pr);
}

/* The reference kernel's scratch or the flash driver's, whichever is larger:
 * the op has one scratch size for every kernel level. */
static size_t prim_scratch(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                           const void *attrs) {
    size_t ref = loom_ref_attention_scratch(src, n_src, dst, attrs);
    /* planning passes descriptors without data: the resolver never reads data,
     * but wants non-NULL pointers, so missing ones get a placeholder */
    static char placeholder;
    loom_tensor c[LOOM_MAX_SRC], o = dst ? *dst : *src[0];
    const loom_tensor *s2[LOOM_MAX_SRC];
    for (int i = 0; i < n_src && i < LOOM_MAX_SRC; i++) {
        c[i] = *src[i];
        c[i].data = c[i].data ? c[i].data : &placeholder;
        s2[i] = &c[i];
    }
    o.data = o.data ? o.data : &placeholder;
    attn_problem pr;
    size_t fa = prim_resolve(s2, n_src, attrs, &o, &pr) == LOOM_OK ? attn_prefill_scratch_all(&pr) : 0;
    return fa > ref ? fa : ref;
}

static loom_status prim_kernel(const loom_kernel_args *a, loom_isa isa) {
    attn_problem pr;
    LOOM_TRY(prim_resolve(a->src, a->n_src, a->attrs, a->dst, &pr));
    return attn_prefill_run(&pr, loom_attn_kernels_for(isa), a->ith, a->nth, a->scratch,
                            attn_prefill_scratch_all(&pr));
}

static loom_status prim_generic(const loom_kernel_args *a) { return prim_kernel(a, LOOM_ISA_GENERIC); }
#if defined(__x86_64__)
static loom_status prim_avx2(const loom_kernel_args *a) { return prim_kernel(a, LOOM_ISA_AVX2); }
static loom_status prim_avx512(const loom_kernel_args *a) { return prim_kernel(a, LOOM_ISA_AVX512); }
#endif

/* kv_append with f32 rows into an f32, f16 or bf16 cache, trailing dims
 * contiguous (the model's layout): one memcpy, or one conversion with the
 * level's vector kernels (bit-identical to the reference's rounding), per
 * row, rows split over threads; an i8 cache row by row of the last dim with
 * loom_quantize_row_i8 (the reference's arithmetic). Anything else goes to the
 * reference kernel. */
static int rows_contiguous(const loom_tensor *t) {
    int64_t expect = 1;
    for (int d = t->ndim - 1; d >= 1; d--) {
        if (t->shape[d] != 1 && t->stride[d] != expect) return 0;
        expect *= t->shape[d];
    }
    return 1;
}

static loom_status kv_append_rows(const loom_kernel_args *a, loom_isa isa) {
    const loom_tensor *x = a->src[1], *y = a->dst;
    const loom_kv_append_attrs *at = a->attrs;
    int q8 = y->dtype == LOOM_I8 && a->n_src == 3 && rows_contiguous(a->src[2]);
    if (!at || (y->dtype != LOOM_F32 && y->dtype != LOOM_F16 && y->dtype != LOOM_BF16 && !q8) ||
        x->dtype != LOOM_F32 || !rows_contiguous(x) || !rows_contiguous(y))
        return loom_ref_kv_append(a);
    int64_t n = x->shape[0];
    LOOM_RETURN_IF(at->pos < 0 || at->pos + n > y->shape[0], LOOM_ERR_INVALID_ARG,
                   "kv_append: pos %d with %lld rows does not fit the output view of %lld rows",
                   at->pos, (long long)n, (long long)y->shape[0]);
    int64_t width = loom_tensor_nelem(x) / (n ? n : 1);
    int64_t lo = n * a->ith / a->nth, hi = n * (a->ith + 1) / a->nth;
    if (q8) { /* each row of the last dim quantized with its own scale */
        const loom_tensor *st = a->src[2];
        int64_t D = x->shape[x->ndim - 1], nd = width / D;
        for (int64_t r = lo; r < hi; r++) {
            const float *xr = (const float *)x->data + r * x->stride[0];
            int8_t *yr = (int8_t *)y->data + (at->pos + r) * y->stride[0];
            float *sr = (float *)st->data + (at->pos + r) * st->stride[0];
            for (int64_t h = 0; h < nd; h++) sr[h] = loom_quantize_row_i8(xr + h * D, D, yr + h * D);
        }
        return LOOM_OK;
    }
    const loom_vec_fns *vec = loom_vec_fns_for(isa);
    size_t es = loom_dtype_size(y->dtype);
    for (int64_t r = lo; r < hi; r++)
        loom_vec_convert(vec, LOOM_F32, (const float *)x->data + r * x->stride[0], y->dtype,
                         (char *)y->data + (size_t)((at->pos + r) * y->stride[0]) * es, width);
    return LOOM_OK;
}

/* kv_write: rows to their slots, converted with the level's row functions (or
 * quantized with their scales). */
static loom_status kv_write_rows(const loom_kernel_args *a, loom_isa isa) {
    const loom_tensor *x = a->src[1], *slots = a->src[2], *y = a->dst;
    int q8 = y->dtype == LOOM_I8 && a->n_src == 4 && rows_contiguous(a->src[3]);
    if ((y->dtype != LOOM_F32 && y->dtype != LOOM_F16 && y->dtype != LOOM_BF16 && !q8) || !rows_contiguous(x) ||
        !rows_contiguous(y))
        return loom_ref_kv_write(a);
    int64_t T = x->shape[0], width = loom_tensor_nelem(x) / (T ? T : 1), D = x->shape[x->ndim - 1];
    int64_t lo = T * a->ith / a->nth, hi = T * (a->ith + 1) / a->nth;
    const loom_vec_fns *vec = loom_vec_fns_for(isa);
    size_t es = loom_dtype_size(y->dtype);
    for (int64_t t = lo; t < hi; t++) {
        int64_t slot = -1;
        LOOM_TRY(loom_kv_write_slot(slots, y, t, &slot));
        if (slot < 0) continue;
        const float *xr = (const float *)x->data + t * x->stride[0];
        if (q8) {
            int8_t *yr = (int8_t *)y->data + slot * y->stride[0];
            float *sr = (float *)a->src[3]->data + slot * a->src[3]->stride[0];
            for (int64_t h = 0; h < width / D; h++) sr[h] = loom_quantize_row_i8(xr + h * D, D, yr + h * D);
        } else {
            loom_vec_convert(vec, LOOM_F32, xr, y->dtype, (char *)y->data + (size_t)(slot * y->stride[0]) * es, width);
        }
    }
    return LOOM_OK;
}

static loom_status kv_write_generic(const loom_kernel_args *a) { return kv_write_rows(a, LOOM_ISA_GENERIC); }
#if defined(__x86_64__)
static loom_status kv_write_avx2(const loom_kernel_args *a) { return kv_write_rows(a, LOOM_ISA_AVX2); }
static loom_status kv_write_avx512(const loom_kernel_args *a) { return kv_write_rows(a, LOOM_ISA_AVX512); }
#endif

static loom_status kv_append_generic(const loom_kernel_args *a) { return kv_append_rows(a, LOOM_ISA_GENERIC); }
#if defined(__x86_64__)
static loom_status kv_append_avx2(const loom_kernel_args *a) { return kv_append_rows(a, LOOM_ISA_AVX2); }
static loom_status kv_append_avx512(const loom_kernel_args *a) { return kv_append_rows(a, LOOM_ISA_AVX512); }
#endif

void loom_register_attention_primitive_kernels(loom_op_info *table) {
    loom_op_info *kv = &table[LOOM_OP_KV_APPEND];
    kv->opt[LOOM_ISA_GENERIC] = kv_append_generic;
#if defined(__x86_64__)
    kv->opt[LOOM_ISA_AVX2] = kv_append_avx2;
    kv->opt[LOOM_ISA_AVX512] = kv_append_avx512;
#endif
    loom_op_info *kw = &table[LOOM_OP_KV_WRITE];
    kw->opt[LOOM_ISA_GENERIC] = kv_write_generic;
#if defined(__x86_64__)
    kw->opt[LOOM_ISA_AVX2] = kv_write_avx2;
    kw->opt[LOOM_ISA_AVX512] = kv_write_avx512;
#endif
    loom_op_info *at = &table[LOOM_OP_ATTENTION];
    at->scratch_size = prim_scratch;
    at->opt[LOOM_ISA_GENERIC] = prim_generic;
#if defined(__x86_64__)
    at->opt[LOOM_ISA_AVX2] = prim_avx2;
    at->opt[LOOM_ISA_AVX512] = prim_avx512;
#endif
}
