/* paged_attention: the attention of a ragged batch over a paged KV cache, as
 * a graph op for the batch engine. Each row of q belongs to a sequence of the
 * step's batch (loom_batch, ops.h), which says where its keys are (the
 * sequence's block table and KV length). The first n_decode sequences have one
 * row each and run through the split-KV decode kernel as one batch (phases 0
 * and 1: split, merge); the others are prompt chunks and run through the
 * FlashAttention prefill kernel in layout TND over the same paged cache
 * (phase 2), causal with the mask aligned to each sequence's last key (with a
 * sliding window, attrs.window, the band of that many keys ending there:
 * sparse_mode 4 in both kernels, which then read only the window). Both
 * are the fused attention ops of flash_attention_op.c on views of the node's
 * tensors: nothing is copied.
 *
 * Batch-invariant kernels (kernel args' invariant): every sequence, one-row
 * ones included, runs through the prefill kernel with key tiles of a fixed
 * size from position 0, so a row's result depends on its own keys alone, not
 * on the rows it shares a step or a chunk with (a fully masked tile adds
 * exactly nothing: the running max stays, its scale is 1).
 *
 * src: q [T, H, D] f32; k, v paged caches [n_blocks, block_size, H_kv, D]
 * (f32, f16, bf16 or i8); an i8 cache adds k_scale, v_scale f32
 * [n_blocks, block_size, H_kv] (one per cache row, as kv_write writes them).
 * dst: [T, H, D] f32. Rows of no sequence (after the batch's last) are left
 * as they are. */
#include "fused/flash_attention_internal.h"
#include "fused/fused_graph_ops.h"

#include <string.h>

#include "base/status.h"
#include "fused/ref/attention_ref.h"
#include "ops/ref/ref.h"

static char placeholder;

/* The key tile of the batch-invariant path (the prefill kernel's default at D <= 128). */
#define LOOM_PAGED_ATTENTION_INVARIANT_KV 64

static loom_status pa_infer(const loom_tensor *const *src, int n_src, const void *attrs, loom_tensor *dst) {
    const char *op = "paged_attention";
    LOOM_TRY(loom_ref_check_arity(op, src, n_src, 3, 5));
    const loom_paged_attention_attrs *at = attrs;
    LOOM_RETURN_IF(!at || at->max_seqs < 1 || at->max_kv < 1, LOOM_ERR_INVALID_ARG,
                   "%s: attributes max_seqs and max_kv must be >= 1", op);
    const loom_tensor *q = src[0], *k = src[1], *v = src[2];
    LOOM_TRY(loom_ref_check_dtype(op, 0, "q", q, LOOM_REF_DT(LOOM_F32)));
    LOOM_RETURN_IF(q->ndim != 3 || k->ndim != 4 || v->ndim != 4 || k->dtype != v->dtype || q->stride[2] != 1,
                   LOOM_ERR_SHAPE, "%s: expected q [T, H, D] and paged caches [blocks, block_size, H_kv, D]", op);
    int ok = q->shape[2] == k->shape[3] && q->shape[1] % k->shape[2] == 0;
    for (int d = 0; ok && d < 4; d++) ok = k->shape[d] == v->shape[d];
    LOOM_RETURN_IF(!ok, LOOM_ERR_SHAPE, "%s: heads or head dims of q, k and v disagree", op);
    LOOM_RETURN_IF((k->dtype == LOOM_I8) != (n_src == 5), LOOM_ERR_INVALID_ARG,
                   "%s: an i8 cache takes its scales as inputs 3 and 4, other caches none", op);
    loom_ref_set_dst(dst, LOOM_F32, 3, q->shape);
    return LOOM_OK;
}

/* The tensors of one call: views of the node's over a range of rows. */
typedef struct pa_views {
    loom_tensor q, out, k, v, ks, vs, bt;
} pa_views;

/* i8 scales [blocks, block_size, H_kv] as the ops' per-token [blocks, H_kv, block_size] */
static void scales_view(const loom_tensor *s, loom_tensor *out) {
    *out = *s;
    out->shape[1] = s->shape[2], out->shape[2] = s->shape[1];
    out->stride[1] = s->stride[2], out->stride[2] = s->stride[1];
}

/* Rows [r0, r0 + n) of q and dst, shaped for the op (decode: [n, 1, H, D];
 * prefill TND: [n, H, D]), the caches, and the block table rows [s0, s0 + ns). */
static void pa_setup(const loom_kernel_args *a, int64_t r0, int64_t n, int64_t s0, int64_t ns, int decode,
                     pa_views *v) {
    const loom_tensor *q = a->src[0];
    memset(v, 0, sizeof *v);
    v->q = *q, v->out = *a->dst;
    loom_tensor *rows[2] = {&v->q, &v->out};
    for (int i = 0; i < 2; i++) {
        loom_tensor *t = rows[i];
        t->data = t->data ? (char *)t->data + (size_t)(r0 * t->stride[0]) * sizeof(float) : &placeholder;
        t->shape[0] = n;
        if (decode) { /* [n, 1, H, D] */
            t->ndim = 4;
            t->shape[3] = t->shape[2], t->stride[3] = t->stride[2];
            t->shape[2] = t->shape[1], t->stride[2] = t->stride[1];
            t->shape[1] = 1, t->stride[1] = t->stride[0];
        }
    }
    v->k = *a->src[1], v->v = *a->src[2];
    if (!v->k.data) v->k.data = &placeholder;
    if (!v->v.data) v->v.data = &placeholder;
    if (a->n_src == 5) {
        scales_view(a->src[3], &v->ks), scales_view(a->src[4], &v->vs);
        if (!v->ks.data) v->ks.data = &placeholder;
        if (!v->vs.data) v->vs.data = &placeholder;
    }
    if (a->batch && a->batch->block_table) loom_tensor_view_rows(a->batch->block_table, s0, ns, &v->bt);
}

/* The decode op's tensors and parameters of rows v (one per sequence, KV lengths kv_len). */
static void pa_decode_args(const loom_kernel_args *a, const pa_views *v, const int64_t *kv_len,
                           loom_incre_flash_attention_tensors *t, loom_incre_flash_attention_params *p) {
    const loom_paged_attention_attrs *at = a->attrs;
    *p = loom_incre_flash_attention_default_params();
    p->scale_value = at->scale;
    p->kv_chunk = at->kv_chunk;
    p->inner_precise = at->inner_precise;
    p->softcap = at->softcap;
    p->actual_seq_lengths = kv_len;
    if (at->window > 0) p->sparse_mode = LOOM_SPARSE_BAND, p->pre_tokens = at->window - 1, p->next_tokens = 0;
    *t = (loom_incre_flash_attention_tensors){.query = &v->q, .key = &v->k, .value = &v->v,
                                              .block_table = &v->bt, .attention_out = (loom_tensor *)&v->out};
    if (a->n_src == 5) {
        t->key_antiquant_scale = &v->ks, t->value_antiquant_scale = &v->vs;
        p->key_antiquant_mode = p->value_antiquant_mode = LOOM_ANTIQUANT_PER_TOKEN;
    }
}

/* The prefill op's (TND over the paged cache) of prompt rows v: ns sequences, cumulative ends cu_q, cu_kv. */
static void pa_prefill_args(const loom_kernel_args *a, const pa_views *v, const int64_t *cu_q, const int64_t *cu_kv,
                            int64_t ns, loom_flash_attention_tensors *t, loom_flash_attention_params *p) {
    const loom_paged_attention_attrs *at = a->attrs;
    *p = loom_flash_attention_default_params();
    p->input_layout = LOOM_ATTN_TND;
    p->scale_value = at->scale;
    p->sparse_mode = LOOM_SPARSE_RIGHT_DOWN_CAUSAL;
    if (at->window > 0) p->sparse_mode = LOOM_SPARSE_BAND, p->pre_tokens = at->window - 1, p->next_tokens = 0;
    p->inner_precise = at->inner_precise;
    p->softcap = at->softcap;
    if (a->invariant) p->block_kv = LOOM_PAGED_ATTENTION_INVARIANT_KV; /* tiles from the position alone */
    p->actual_seq_qlen = cu_q, p->actual_seq_kvlen = cu_kv, p->num_seqs = ns;
    *t = (loom_flash_attention_tensors){.query = &v->q, .key = &v->k, .value = &v->v, .block_table = &v->bt,
                                        .attention_out = (loom_tensor *)&v->out};
    if (a->n_src == 5) {
        t->key_antiquant_scale = &v->ks, t->value_antiquant_scale = &v->vs;
        p->key_antiquant_mode = p->value_antiquant_mode = LOOM_ANTIQUANT_PER_TOKEN;
    }
}

static loom_status pa_decode_problem(const loom_kernel_args *a, const pa_views *v, const int64_t *kv_len,
                                     attn_problem *pr) {
    loom_incre_flash_attention_tensors t;
    loom_incre_flash_attention_params p;
    pa_decode_args(a, v, kv_len, &t, &p);
    return attn_resolve_decode(&t, &p, NULL, pr);
}

static loom_status pa_prefill_problem(const loom_kernel_args *a, const pa_views *v, const int64_t *cu_q,
                                      const int64_t *cu_kv, int64_t ns, attn_problem *pr) {
    loom_flash_attention_tensors t;
    loom_flash_attention_params p;
    pa_prefill_args(a, v, cu_q, cu_kv, ns, &t, &p);
    return attn_resolve_prefill(&t, &p, pr);
}

/* ---------------------------------------------------------- sizes (no batch: the bucket's bounds) */

/* The worst step of the bucket: every q row a decode row of its own sequence
 * of max_kv keys (max_seqs of them), or all of them one prompt chunk over
 * max_kv keys. The block table is a placeholder descriptor: sizes never read it. */
static void pa_bounds(const loom_tensor *const *src, int n_src, const void *attrs, size_t *scratch,
                      size_t *shared) {
    const loom_paged_attention_attrs *at = attrs;
    *scratch = *shared = 0;
    if (!at) return;
    static int32_t table[1];
    const loom_tensor *k = src[1];
    int64_t bs = k->shape[1], nb = (at->max_kv + bs - 1) / bs;
    loom_kernel_args a = {.n_src = n_src, .attrs = attrs};
    for (int i = 0; i < n_src; i++) a.src[i] = src[i];
    loom_tensor dst = *src[0];
    a.dst = &dst;
    int64_t T = src[0]->shape[0], B = at->max_seqs < T ? at->max_seqs : T;
    int64_t lens[2] = {at->max_kv, at->max_kv};
    for (int pass = 0; pass < 3; pass++) { /* decode, prefill, the invariant prefill's tiles */
        int decode = pass == 0;
        a.invariant = pass == 2;
        pa_views v;
        pa_setup(&a, 0, decode ? B : T, 0, 1, decode, &v);
        const int64_t bt_shape[2] = {decode ? B : 1, nb};
        loom_tensor_init(&v.bt, LOOM_I32, 2, bt_shape, table);
        v.bt.stride[0] = 0, v.bt.stride[1] = 0; /* every entry the one placeholder block */
        attn_problem pr;
        int64_t *kv = lens;
        int64_t kvs[LOOM_PAGED_ATTENTION_MAX_SEQS];
        if (decode) {
            for (int64_t b = 0; b < B && b < LOOM_PAGED_ATTENTION_MAX_SEQS; b++) kvs[b] = at->max_kv;
            kv = kvs;
        }
        const int64_t cu_q[1] = {T}, cu_kv[1] = {at->max_kv};
        loom_status s = decode ? pa_decode_problem(&a, &v, kv, &pr) : pa_prefill_problem(&a, &v, cu_q, cu_kv, 1, &pr);
        if (s != LOOM_OK) {
            loom_clear_error();
            continue;
        }
        size_t sc = decode ? attn_decode_scratch(&pr) : attn_prefill_scratch_all(&pr);
        if (sc > *scratch) *scratch = sc;
        if (decode && attn_decode_workspace(&pr) > *shared) *shared = attn_decode_workspace(&pr);
    }
}

static size_t pa_scratch(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs) {
    size_t sc, sh;
    pa_bounds(src, n_src, attrs, &sc, &sh);
    return sc;
}

static size_t pa_shared(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs) {
    size_t sc, sh;
    pa_bounds(src, n_src, attrs, &sc, &sh);
    return sh;
}

/* Without the batch the op cannot know which keys a row reads: q's rows each
 * against max_kv keys (or the window), the bound a plan can use. */
static void pa_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst, const void *attrs,
                    loom_cost *c) {
    const loom_paged_attention_attrs *at = attrs;
    const loom_tensor *q = src[0], *k = src[1];
    double T = (double)q->shape[0], H = (double)q->shape[1], D = (double)q->shape[2];
    double kv = at ? (double)(at->window > 0 && at->window < at->max_kv ? at->window : at->max_kv) : 0.0;
    double Hkv = (double)k->shape[2];
    double es = (double)loom_dtype_size(k->dtype);
    c->flops = 4.0 * T * H * D * kv;
    c->bytes_read = LOOM_ES(q) * T * H * D + 2.0 * T * kv * Hkv * D * es;
    c->bytes_written = LOOM_ES(dst) * T * H * D;
}

/* ---------------------------------------------------------- kernel */

static loom_status pa_kernel(const loom_kernel_args *a, loom_isa isa) {
    const loom_batch *b = a->batch;
    LOOM_RETURN_IF(!b || !b->block_table || !b->row_start || !b->kv_len, LOOM_ERR_INVALID_ARG,
                   "paged_attention: runs only in a step of the batch engine (no batch given)");
    const loom_paged_attention_attrs *at = a->attrs;
    int nd = a->invariant ? 0 : b->n_decode, ns = b->n_seqs;
    LOOM_RETURN_IF(ns > at->max_seqs || nd > ns || ns > LOOM_PAGED_ATTENTION_MAX_SEQS, LOOM_ERR_INVALID_ARG,
                   "paged_attention: %d sequences (%d decoding) beyond the bucket's %d", ns, nd, at->max_seqs);
    const loom_attn_kernels *kern = isa == LOOM_ISA_REF ? NULL : loom_attn_kernels_for(isa);
    attn_problem pr;
    pa_views v;
    if (a->phase < 2) { /* decode rows: sequences 0..nd-1, one row each, rows 0..nd-1 */
        if (nd == 0) return LOOM_OK;
        pa_setup(a, 0, nd, 0, nd, 1, &v);
        LOOM_TRY(pa_decode_problem(a, &v, b->kv_len, &pr));
        size_t bytes = attn_decode_scratch(&pr);
        LOOM_RETURN_IF(bytes > a->scratch_bytes || attn_decode_workspace(&pr) > a->shared_bytes, LOOM_ERR_INTERNAL,
                       "paged_attention: decode needs %zu + %zu bytes, the program planned %zu + %zu", bytes,
                       attn_decode_workspace(&pr), a->scratch_bytes, a->shared_bytes);
        if (!kern) {
            loom_incre_flash_attention_tensors t;
            loom_incre_flash_attention_params p;
            pa_decode_args(a, &v, b->kv_len, &t, &p);
            return a->phase ? LOOM_OK : loom_attn_ref_incre(&t, &p, NULL, a->ith, a->nth, a->scratch, bytes);
        }
        if (a->phase == 1 && !attn_decode_splits(&pr, a->nth)) return LOOM_OK; /* phase 0 did it all */
        return attn_decode_phase(&pr, kern, a->phase, a->ith, a->nth, a->scratch, bytes, a->shared);
    }
    /* prompt chunks: sequences nd..ns-1, rows row_start[nd].. */
    if (ns == nd) return LOOM_OK;
    int64_t r0 = b->row_start[nd], cu_q[LOOM_PAGED_ATTENTION_MAX_SEQS], cu_kv[LOOM_PAGED_ATTENTION_MAX_SEQS];
    int64_t sum_kv = 0;
    for (int s = nd; s < ns; s++) {
        cu_q[s - nd] = b->row_start[s + 1] - r0;
        sum_kv += b->kv_len[s];
        cu_kv[s - nd] = sum_kv;
    }
    pa_setup(a, r0, b->row_start[ns] - r0, nd, ns - nd, 0, &v);
    LOOM_TRY(pa_prefill_problem(a, &v, cu_q, cu_kv, ns - nd, &pr));
    size_t bytes = attn_prefill_scratch_all(&pr);
    LOOM_RETURN_IF(bytes > a->scratch_bytes, LOOM_ERR_INTERNAL,
                   "paged_attention: a prefill needs %zu bytes of scratch, the program planned %zu", bytes,
                   a->scratch_bytes);
    if (!kern) {
        loom_flash_attention_tensors t;
        loom_flash_attention_params p;
        pa_prefill_args(a, &v, cu_q, cu_kv, ns - nd, &t, &p);
        return loom_attn_ref_flash(&t, &p, a->ith, a->nth, a->scratch, bytes);
    }
    return attn_prefill_run(&pr, kern, a->ith, a->nth, a->scratch, bytes);
}

LOOM_FUSED_LEVELS(pa, pa_kernel)

void loom_register_paged_attention_op(loom_op_info *e) {
    e->infer = pa_infer, e->cost = pa_cost, e->scratch_size = pa_scratch, e->shared_size = pa_shared;
    e->ref = pa_ref;
    e->n_phases = 3; /* decode split, decode merge, prompt chunks */
    e->decomposition = "attention";
    LOOM_FUSED_SET_LEVELS(e, pa);
}
