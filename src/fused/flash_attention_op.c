/* The fused attention ops in the op table (flash_attention_score and
 * incre_flash_attention): attributes to params, shape inference, cost,
 * scratch, the reference decomposition and one kernel per level. */
#include "fused/flash_attention_internal.h"
#include <string.h>

#include "base/status.h"
#include "fused/ref/attention_ref.h"
#include "ops/ref/ref.h"
#include "ops/register.h"

static const loom_flash_attention_attrs fa_default_attrs = LOOM_FLASH_ATTENTION_ATTRS_DEFAULT;
static const loom_incre_flash_attention_attrs inc_default_attrs =
    LOOM_INCRE_FLASH_ATTENTION_ATTRS_DEFAULT;

loom_flash_attention_params attn_fa_params(const void *attrs) {
    const loom_flash_attention_attrs *a = attrs ? attrs : &fa_default_attrs;
    loom_flash_attention_params p = loom_flash_attention_default_params();
    p.input_layout = (loom_attn_layout)a->input_layout;
    p.num_heads = a->num_heads, p.num_key_value_heads = a->num_key_value_heads;
    p.sparse_mode = a->sparse_mode, p.scale_value = a->scale_value;
    p.keep_prob = a->keep_prob == 0.0f ? 1.0f : a->keep_prob;
    p.pre_tokens = a->pre_tokens, p.next_tokens = a->next_tokens;
    p.seed = a->seed, p.offset = a->offset;
    p.block_q = a->block_q, p.block_kv = a->block_kv;
    p.inner_precise = a->inner_precise;
    p.softcap = a->softcap;
    return p;
}

static loom_incre_flash_attention_params inc_params(const void *attrs) {
    const loom_incre_flash_attention_attrs *a = attrs ? attrs : &inc_default_attrs;
    loom_incre_flash_attention_params p = loom_incre_flash_attention_default_params();
    p.input_layout = (loom_attn_layout)a->input_layout;
    p.num_heads = a->num_heads, p.num_key_value_heads = a->num_key_value_heads;
    p.sparse_mode = a->sparse_mode, p.scale_value = a->scale_value;
    p.kv_chunk = a->kv_chunk;
    p.pre_tokens = a->pre_tokens, p.next_tokens = a->next_tokens;
    p.inner_precise = a->inner_precise;
    p.softcap = a->softcap;
    return p;
}

/* A node's tensors. Before data exists (shape inference, planning) the
 * descriptors are copied with a placeholder pointer: validation never reads
 * data, and dst is modelled on q.
 *
 * Prefill with input_layout TND (packed variable-length sequences, self
 * attention): the fourth source is not a mask but the cumulative sequence
 * ends, an i32 [num_seqs] tensor (num_seqs <= TND_MAX_SEQS) used as both
 * actual_seq_qlen and actual_seq_kvlen. Without its data (analytic planning) the num_seqs
 * sequences are taken to be of equal length: the problem is then the BSND one
 * [num_seqs, T / num_seqs, N, D], which is the same memory. */
#define TND_MAX_SEQS 512
typedef struct op_tensors {
    loom_tensor q, k, v, mask, out;
    loom_tensor ks, vs;  /* i8 k and v: their per-token scales as the ops take them */
    int has_mask, q8;
    const int64_t *cu;   /* TND with data: cumulative ends (in cu_buf) */
    int64_t cu_buf[TND_MAX_SEQS];
    int64_t n_cu;
    int even_bsnd;       /* TND without data: viewed as BSND */
} op_tensors;

static char placeholder;

/* [T, N, D] -> [B, T / B, N, D] */
static void as_bsnd(loom_tensor *t, int64_t B) {
    int64_t T = t->shape[0], N = t->shape[1], D = t->shape[2];
    loom_tensor_init(t, t->dtype, 4, (const int64_t[4]){B, T / B, N, D}, t->data);
}

static loom_status op_tensors_init(const char *name, const loom_tensor *const *src, int n_src,
                                   const loom_tensor *dst, int tnd, op_tensors *o) {
    LOOM_TRY(loom_ref_check_arity(name, src, n_src, 3, 6));
    memset(o, 0, sizeof *o);
    o->q = *src[0], o->k = *src[1], o->v = *src[2];
    o->q8 = src[1]->dtype == LOOM_I8;
    LOOM_RETURN_IF(n_src > (o->q8 ? 6 : 4) || (o->q8 && (n_src < 5 || tnd)), LOOM_ERR_INVALID_ARG,
                   "%s: %d inputs with a %s cache: expected q, k, v%s", name, n_src,
                   loom_dtype_name(src[1]->dtype),
                   o->q8 ? ", k_scale, v_scale [B, S, N_kv] and an optional mask (not TND)"
                         : " and an optional fourth input");
    if (o->q8) { /* scales [B, S, N_kv] -> the ops' per-token [B, N_kv, S] */
        attn_scale_view(src[3], &o->ks), attn_scale_view(src[4], &o->vs);
        if (!o->ks.data) o->ks.data = &placeholder;
        if (!o->vs.data) o->vs.data = &placeholder;
        o->has_mask = n_src == 6;
        if (o->has_mask) o->mask = *src[5];
    } else if (tnd) {
        LOOM_RETURN_IF(n_src != 4, LOOM_ERR_INVALID_ARG,
                       "%s: input_layout TND takes a fourth input, the cumulative sequence ends", name);
        const loom_tensor *cu = src[3];
        LOOM_RETURN_IF(cu->dtype != LOOM_I32 || cu->ndim != 1 || cu->shape[0] < 1, LOOM_ERR_SHAPE,
                       "%s: input 3 (cumulative sequence ends) must be i32 [num_seqs >= 1]", name);
        o->n_cu = cu->shape[0];
        if (cu->data) {
            LOOM_RETURN_IF(o->n_cu > TND_MAX_SEQS, LOOM_ERR_UNSUPPORTED,
                           "%s: %lld sequences in one TND call; at most %d", name, (long long)o->n_cu,
                           TND_MAX_SEQS);
            for (int64_t i = 0; i < o->n_cu; i++)
                o->cu_buf[i] = ((const int32_t *)cu->data)[i * cu->stride[0]];
            o->cu = o->cu_buf;
        }
    } else {
        o->has_mask = n_src == 4;
        if (o->has_mask) o->mask = *src[3];
    }
    loom_tensor *all[4] = {&o->q, &o->k, &o->v, &o->mask};
    for (int i = 0; i < 3 + o->has_mask; i++)
        if (!all[i]->data) all[i]->data = &placeholder;
    if (dst && dst->data) {
        o->out = *dst;
    } else { /* q's shape; the output's dtype when a descriptor says it (costs: out_f32 under a 16-bit q) */
        o->out = o->q;
        if (dst) o->out.dtype = dst->dtype;
    }
    if (tnd && !o->cu) {
        LOOM_RETURN_IF(o->q.ndim != 3 || o->k.ndim != 3 || o->v.ndim != 3 || o->out.ndim != 3,
                       LOOM_ERR_SHAPE, "%s: input_layout TND takes 3-D q, k, v [T, N, D]", name);
        int64_t B = o->n_cu;
        if (o->q.shape[0] % B || o->k.shape[0] % B || o->q.shape[0] != o->k.shape[0]) B = 1;
        o->even_bsnd = 1;
        as_bsnd(&o->q, B), as_bsnd(&o->k, B), as_bsnd(&o->v, B), as_bsnd(&o->out, B);
    }
    return LOOM_OK;
}

static int attrs_tnd(const void *attrs) {
    return attrs && ((const loom_flash_attention_attrs *)attrs)->input_layout == LOOM_ATTN_TND;
}

/* The op-level params and tensors of a node (TND: the lengths from src[3]). */
static loom_status fa_setup(const loom_tensor *const *src, int n_src, const void *attrs,
                            const loom_tensor *dst, op_tensors *o, loom_flash_attention_params *p,
                            loom_flash_attention_tensors *t) {
    LOOM_TRY(op_tensors_init("flash_attention_score", src, n_src, dst, attrs_tnd(attrs), o));
    *p = attn_fa_params(attrs);
    if (o->cu) p->actual_seq_qlen = p->actual_seq_kvlen = o->cu, p->num_seqs = o->n_cu;
    if (o->even_bsnd) p->input_layout = LOOM_ATTN_BSND;
    loom_flash_attention_tensors tt = {.query = &o->q, .key = &o->k, .value = &o->v,
                                       .atten_mask = o->has_mask ? &o->mask : NULL, .attention_out = &o->out,
                                       .key_antiquant_scale = o->q8 ? &o->ks : NULL,
                                       .value_antiquant_scale = o->q8 ? &o->vs : NULL};
    if (o->q8) p->key_antiquant_mode = p->value_antiquant_mode = LOOM_ANTIQUANT_PER_TOKEN;
    *t = tt;
    return LOOM_OK;
}

static loom_status fa_resolve(const loom_tensor *const *src, int n_src, const void *attrs,
                              const loom_tensor *dst, op_tensors *o, attn_problem *pr) {
    loom_flash_attention_params p;
    loom_flash_attention_tensors t;
    LOOM_TRY(fa_setup(src, n_src, attrs, dst, o, &p, &t));
    return attn_resolve_prefill(&t, &p, pr);
}

/* The decode op's params and tensors of a node. */
static void inc_setup(const void *attrs, op_tensors *o, loom_incre_flash_attention_params *p,
                      loom_incre_flash_attention_tensors *t) {
    *p = inc_params(attrs);
    *t = (loom_incre_flash_attention_tensors){.query = &o->q, .key = &o->k, .value = &o->v,
                                              .atten_mask = o->has_mask ? &o->mask : NULL,
                                              .key_antiquant_scale = o->q8 ? &o->ks : NULL,
                                              .value_antiquant_scale = o->q8 ? &o->vs : NULL,
                                              .attention_out = &o->out};
    if (o->q8) p->key_antiquant_mode = p->value_antiquant_mode = LOOM_ANTIQUANT_PER_TOKEN;
}

static loom_status inc_resolve(const loom_tensor *const *src, int n_src, const void *attrs,
                               const loom_tensor *dst, op_tensors *o, attn_problem *pr) {
    LOOM_TRY(op_tensors_init("incre_flash_attention", src, n_src, dst, 0, o));
    loom_incre_flash_attention_params p;
    loom_incre_flash_attention_tensors t;
    inc_setup(attrs, o, &p, &t);
    return attn_resolve_decode(&t, &p, NULL, pr);
}

static loom_status fa_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                            loom_tensor *dst) {
    op_tensors o;
    attn_problem pr;
    LOOM_TRY(fa_resolve(src, n_src, attrs, NULL, &o, &pr));
    const loom_flash_attention_attrs *at = attrs;
    loom_ref_set_dst(dst, at && at->out_f32 ? LOOM_F32 : src[0]->dtype, src[0]->ndim, src[0]->shape);
    return LOOM_OK;
}

static loom_status inc_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                             loom_tensor *dst) {
    op_tensors o;
    attn_problem pr;
    LOOM_TRY(inc_resolve(src, n_src, attrs, NULL, &o, &pr));
    const loom_incre_flash_attention_attrs *at = attrs;
    loom_ref_set_dst(dst, at && at->out_f32 ? LOOM_F32 : src[0]->dtype, src[0]->ndim, src[0]->shape);
    return LOOM_OK;
}

static void fa_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                    const void *attrs, loom_cost *c) {
    op_tensors o;
    attn_problem pr;
    c->flops = c->bytes_read = c->bytes_written = 0.0;
    if (fa_resolve(src, n_src, attrs, dst, &o, &pr) == LOOM_OK) attn_cost(&pr, c);
}

static void inc_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                     const void *attrs, loom_cost *c) {
    op_tensors o;
    attn_problem pr;
    c->flops = c->bytes_read = c->bytes_written = 0.0;
    if (inc_resolve(src, n_src, attrs, dst, &o, &pr) == LOOM_OK) attn_cost(&pr, c);
}

static size_t fa_scratch(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                         const void *attrs) {
    op_tensors o;
    attn_problem pr;
    return fa_resolve(src, n_src, attrs, dst, &o, &pr) == LOOM_OK ? attn_prefill_scratch_all(&pr) : 0;
}

static size_t inc_scratch(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                          const void *attrs) {
    op_tensors o;
    attn_problem pr;
    return inc_resolve(src, n_src, attrs, dst, &o, &pr) == LOOM_OK ? attn_decode_scratch(&pr) : 0;
}

/* Decode on nth threads: split-KV then a merge (two phases) where whole
 * (batch, kv head) units do not share out evenly, one launch otherwise; the
 * split's partials go to the launch's shared buffer. */
static int inc_phases(const loom_tensor *const *src, int n_src, const void *attrs, int nth, int invariant) {
    (void)invariant;
    op_tensors o;
    attn_problem pr;
    return inc_resolve(src, n_src, attrs, NULL, &o, &pr) == LOOM_OK && attn_decode_splits(&pr, nth) ? 2 : 1;
}

static size_t inc_shared(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                         const void *attrs) {
    op_tensors o;
    attn_problem pr;
    return inc_resolve(src, n_src, attrs, dst, &o, &pr) == LOOM_OK ? attn_decode_workspace(&pr) : 0;
}

/* Kernels: the executor gives every thread scratch_size bytes. */
static loom_status fa_kernel(const loom_kernel_args *a, loom_isa isa) {
    op_tensors o;
    attn_problem pr;
    loom_flash_attention_params p;
    loom_flash_attention_tensors t;
    LOOM_TRY(fa_setup(a->src, a->n_src, a->attrs, a->dst, &o, &p, &t));
    LOOM_TRY(attn_resolve_prefill(&t, &p, &pr));
    size_t bytes = attn_prefill_scratch_all(&pr);
    if (isa == LOOM_ISA_REF) return loom_attn_ref_flash(&t, &p, a->ith, a->nth, a->scratch, bytes);
    return attn_prefill_run(&pr, loom_attn_kernels_for(isa), a->ith, a->nth, a->scratch, bytes);
}

static loom_status inc_kernel(const loom_kernel_args *a, loom_isa isa) {
    op_tensors o;
    attn_problem pr;
    LOOM_TRY(inc_resolve(a->src, a->n_src, a->attrs, a->dst, &o, &pr));
    size_t bytes = attn_decode_scratch(&pr);
    if (isa == LOOM_ISA_REF) {
        loom_incre_flash_attention_params p;
        loom_incre_flash_attention_tensors t;
        inc_setup(a->attrs, &o, &p, &t);
        return a->phase ? LOOM_OK : loom_attn_ref_incre(&t, &p, NULL, a->ith, a->nth, a->scratch, bytes);
    }
    return attn_decode_phase(&pr, loom_attn_kernels_for(isa), a->phase, a->ith, a->nth, a->scratch, bytes,
                             a->shared);
}

loom_status attn_incre_node_heads(const loom_tensor *const *src, int n_src, const void *attrs, loom_tensor *out,
                                  loom_isa isa, int64_t h0, int64_t h1, void *scratch, size_t bytes) {
    op_tensors o;
    attn_problem pr;
    LOOM_TRY(inc_resolve(src, n_src, attrs, out, &o, &pr));
    if (isa == LOOM_ISA_REF) { /* every head: the reference splits by rows, not heads */
        loom_incre_flash_attention_params p;
        loom_incre_flash_attention_tensors t;
        inc_setup(attrs, &o, &p, &t);
        return loom_attn_ref_incre(&t, &p, NULL, 0, 1, scratch, bytes);
    }
    return attn_decode_heads(&pr, loom_attn_kernels_for(isa), h0, h1, scratch, bytes);
}

static loom_status fa_ref(const loom_kernel_args *a) { return fa_kernel(a, LOOM_ISA_REF); }
static loom_status fa_generic(const loom_kernel_args *a) { return fa_kernel(a, LOOM_ISA_GENERIC); }
static loom_status inc_ref(const loom_kernel_args *a) { return inc_kernel(a, LOOM_ISA_REF); }
static loom_status inc_generic(const loom_kernel_args *a) { return inc_kernel(a, LOOM_ISA_GENERIC); }
#if defined(__x86_64__)
static loom_status fa_avx2(const loom_kernel_args *a) { return fa_kernel(a, LOOM_ISA_AVX2); }
static loom_status fa_avx512(const loom_kernel_args *a) { return fa_kernel(a, LOOM_ISA_AVX512); }
static loom_status inc_avx2(const loom_kernel_args *a) { return inc_kernel(a, LOOM_ISA_AVX2); }
static loom_status inc_avx512(const loom_kernel_args *a) { return inc_kernel(a, LOOM_ISA_AVX512); }
#endif

void loom_register_attention_kernels(loom_op_info *table) {
    loom_op_info *fa = &table[LOOM_OP_FLASH_ATTENTION], *inc = &table[LOOM_OP_INCRE_FLASH_ATTENTION];
    fa->infer = fa_infer, fa->cost = fa_cost, fa->scratch_size = fa_scratch, fa->ref = fa_ref;
    inc->infer = inc_infer, inc->cost = inc_cost, inc->scratch_size = inc_scratch, inc->ref = inc_ref;
    inc->phases = inc_phases, inc->shared_size = inc_shared;
    fa->opt[LOOM_ISA_GENERIC] = fa_generic;
    inc->opt[LOOM_ISA_GENERIC] = inc_generic;
#if defined(__x86_64__)
    fa->opt[LOOM_ISA_AVX2] = fa_avx2, fa->opt[LOOM_ISA_AVX512] = fa_avx512;
    inc->opt[LOOM_ISA_AVX2] = inc_avx2, inc->opt[LOOM_ISA_AVX512] = inc_avx512;
#endif
}
