/* What the attention ops share: layout names, default parameters, validation of
 * tensors and parameters into an attn_problem (strides per role, lengths, masks),
 * the visibility rules of the sparse modes, dropout, and the kernel tables. */
#include "fused/flash_attention_internal.h"

#include "base/alloc.h"
#include "base/rng.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "ops/ref/ref.h"

#include <math.h>
#include <string.h>

static const char *const layout_names[LOOM_ATTN_LAYOUT_COUNT] = {"BSND", "BNSD", "BSH", "TND"};
static const char *const layout_dims[LOOM_ATTN_LAYOUT_COUNT] = {"[B, S, N, D]", "[B, N, S, D]",
                                                                "[B, S, N*D]", "[T, N, D]"};

loom_status loom_attn_layout_parse(const char *s, loom_attn_layout *out) {
    LOOM_RETURN_IF(!s || !out, LOOM_ERR_INVALID_ARG, "attn_layout_parse: NULL argument");
    for (int i = 0; i < LOOM_ATTN_LAYOUT_COUNT; i++)
        if (strcmp(s, layout_names[i]) == 0) {
            *out = (loom_attn_layout)i;
            return LOOM_OK;
        }
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "input_layout \"%s\" is not one of BSND, BNSD, BSH, TND", s);
}

const char *loom_attn_layout_name(loom_attn_layout l) {
    return (unsigned)l < LOOM_ATTN_LAYOUT_COUNT ? layout_names[l] : "?";
}

loom_flash_attention_params loom_flash_attention_default_params(void) {
    loom_flash_attention_params p;
    memset(&p, 0, sizeof p);
    p.input_layout = LOOM_ATTN_BSND;
    p.pre_tokens = p.next_tokens = LOOM_ATTN_TOKENS_ALL;
    p.keep_prob = 1.0f;
    return p;
}

loom_incre_flash_attention_params loom_incre_flash_attention_default_params(void) {
    loom_incre_flash_attention_params p;
    memset(&p, 0, sizeof p);
    p.input_layout = LOOM_ATTN_BSND;
    p.pre_tokens = p.next_tokens = LOOM_ATTN_TOKENS_ALL;
    return p;
}

/* ------------------------------------------------------------ tensors */

static int is_float(loom_dtype t) { return t == LOOM_F32 || t == LOOM_F16 || t == LOOM_BF16; }

static loom_status check_float(const char *op, const char *what, const loom_tensor *t) {
    LOOM_RETURN_IF(!is_float(t->dtype), LOOM_ERR_DTYPE, "%s: %s has dtype %s: expected f32/f16/bf16",
                   op, what, loom_dtype_name(t->dtype));
    return LOOM_OK;
}

/* dims = {B, S, N, D} of t in layout L (TND: B = 1) and its strides. heads is N for BSH. */
static loom_status view_of(const char *op, const char *what, const loom_tensor *t,
                           loom_attn_layout L, int64_t heads, const char *heads_name,
                           int64_t dims[4], attn_view *v) {
    char sh[LOOM_REF_SHAPE_BUF];
    LOOM_RETURN_IF(!t, LOOM_ERR_INVALID_ARG, "%s: %s is NULL", op, what);
    int nd = (L == LOOM_ATTN_BSH || L == LOOM_ATTN_TND) ? 3 : 4;
    int ok = t->ndim == nd;
    for (int d = 0; ok && d < nd; d++) ok = t->shape[d] >= 1;
    LOOM_RETURN_IF(!ok, LOOM_ERR_SHAPE,
                   "%s: %s shape %s does not fit input_layout %s: expected %s, every dim >= 1", op,
                   what, t->ndim >= 1 && t->ndim <= LOOM_MAX_DIMS ? loom_ref_shape_str(t, sh, sizeof sh) : "[?]",
                   layout_names[L], layout_dims[L]);
    const int64_t *s = t->shape, *st = t->stride;
    switch (L) {
    case LOOM_ATTN_BSND:
        dims[0] = s[0], dims[1] = s[1], dims[2] = s[2], dims[3] = s[3];
        v->sb = st[0], v->ss = st[1], v->sn = st[2], v->sd = st[3];
        break;
    case LOOM_ATTN_BNSD:
        dims[0] = s[0], dims[1] = s[2], dims[2] = s[1], dims[3] = s[3];
        v->sb = st[0], v->sn = st[1], v->ss = st[2], v->sd = st[3];
        break;
    case LOOM_ATTN_BSH:
        LOOM_RETURN_IF(heads <= 0, LOOM_ERR_INVALID_ARG,
                       "%s: input_layout BSH needs %s > 0 to split the hidden size of %s", op,
                       heads_name, what);
        LOOM_RETURN_IF(s[2] % heads != 0, LOOM_ERR_SHAPE,
                       "%s: hidden size %lld of %s is not a multiple of %s = %lld", op,
                       (long long)s[2], what, heads_name, (long long)heads);
        dims[0] = s[0], dims[1] = s[1], dims[2] = heads, dims[3] = s[2] / heads;
        v->sb = st[0], v->ss = st[1], v->sn = dims[3] * st[2], v->sd = st[2];
        break;
    default: /* TND */
        dims[0] = 1, dims[1] = s[0], dims[2] = s[1], dims[3] = s[2];
        v->sb = 0, v->ss = st[0], v->sn = st[1], v->sd = st[2];
        break;
    }
    LOOM_RETURN_IF(!t->data, LOOM_ERR_INVALID_ARG, "%s: %s has no data", op, what);
    v->data = t->data;
    v->dtype = t->dtype;
    v->esize = (int64_t)loom_dtype_size(t->dtype);
    return LOOM_OK;
}

/* q, k, v and out: layout, heads (GQA), head dim, dtypes of q and out. */
/* kvL: the layout of key and value (L, or BSND for the paged cache of a TND query). */
static loom_status resolve_qkv(const char *op, loom_attn_layout L, loom_attn_layout kvL, int64_t num_heads,
                               int64_t num_kv, const loom_tensor *q, const loom_tensor *k,
                               const loom_tensor *v, const loom_tensor *out, attn_problem *pr,
                               int64_t qd[4], int64_t kd[4]) {
    char s0[LOOM_REF_SHAPE_BUF], s1[LOOM_REF_SHAPE_BUF];
    LOOM_RETURN_IF((unsigned)L >= LOOM_ATTN_LAYOUT_COUNT, LOOM_ERR_INVALID_ARG,
                   "%s: input_layout %d is not one of BSND, BNSD, BSH, TND", op, (int)L);
    LOOM_RETURN_IF(num_heads < 0, LOOM_ERR_INVALID_ARG, "%s: num_heads = %lld is negative", op,
                   (long long)num_heads);
    LOOM_RETURN_IF(num_kv < 0, LOOM_ERR_INVALID_ARG, "%s: num_key_value_heads = %lld is negative",
                   op, (long long)num_kv);
    LOOM_TRY(view_of(op, "query", q, L, num_heads, "num_heads", qd, &pr->q));
    LOOM_TRY(check_float(op, "query", q));
    int64_t kvh = num_kv ? num_kv : num_heads;
    int64_t vd[4];
    LOOM_TRY(view_of(op, "key", k, kvL, kvh, "num_key_value_heads", kd, &pr->k));
    LOOM_TRY(view_of(op, "value", v, kvL, kvh, "num_key_value_heads", vd, &pr->v));
    LOOM_RETURN_IF(num_heads && qd[2] != num_heads, LOOM_ERR_SHAPE,
                   "%s: num_heads = %lld but query has %lld heads", op, (long long)num_heads,
                   (long long)qd[2]);
    LOOM_RETURN_IF(num_kv && kd[2] != num_kv, LOOM_ERR_SHAPE,
                   "%s: num_key_value_heads = %lld but key has %lld heads", op, (long long)num_kv,
                   (long long)kd[2]);
    LOOM_RETURN_IF(qd[2] % kd[2] != 0, LOOM_ERR_INVALID_ARG,
                   "%s: num_heads (%lld) is not a multiple of num_key_value_heads (%lld)", op,
                   (long long)qd[2], (long long)kd[2]);
    LOOM_RETURN_IF(kd[3] != qd[3], LOOM_ERR_SHAPE,
                   "%s: head dim of key (%lld) differs from query's (%lld)", op, (long long)kd[3],
                   (long long)qd[3]);
    LOOM_RETURN_IF(qd[3] > LOOM_ATTN_MAX_HEAD_DIM, LOOM_ERR_INVALID_ARG,
                   "%s: head dim D = %lld out of range 1..%d", op, (long long)qd[3],
                   LOOM_ATTN_MAX_HEAD_DIM);
    int same = v->ndim == k->ndim && v->dtype == k->dtype;
    for (int d = 0; same && d < k->ndim; d++) same = v->shape[d] == k->shape[d];
    LOOM_RETURN_IF(!same, LOOM_ERR_SHAPE, "%s: value %s %s differs from key %s %s", op,
                   loom_dtype_name(v->dtype), loom_ref_shape_str(v, s0, sizeof s0),
                   loom_dtype_name(k->dtype), loom_ref_shape_str(k, s1, sizeof s1));
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "%s: attention_out is NULL", op);
    same = out->ndim == q->ndim;
    for (int d = 0; same && d < q->ndim; d++) same = out->shape[d] == q->shape[d];
    LOOM_RETURN_IF(!same, LOOM_ERR_SHAPE, "%s: attention_out shape %s: expected the query's %s",
                   op, out->ndim >= 1 && out->ndim <= LOOM_MAX_DIMS ? loom_ref_shape_str(out, s0, sizeof s0) : "[?]",
                   loom_ref_shape_str(q, s1, sizeof s1));
    LOOM_TRY(check_float(op, "attention_out", out));
    int64_t od[4];
    LOOM_TRY(view_of(op, "attention_out", out, L, qd[2], "num_heads", od, &pr->out));
    pr->N = qd[2], pr->Nkv = kd[2], pr->G = qd[2] / kd[2], pr->D = qd[3];
    return LOOM_OK;
}

static loom_status resolve_mask(const char *op, const loom_tensor *m, int64_t B, int64_t N,
                                int64_t rows, int64_t cols, int exact, attn_problem *pr) {
    pr->mask = NULL;
    if (!m) return LOOM_OK;
    char sh[LOOM_REF_SHAPE_BUF];
    LOOM_RETURN_IF(m->dtype != LOOM_I8 && m->dtype != LOOM_F32, LOOM_ERR_DTYPE,
                   "%s: atten_mask has dtype %s: expected i8 (bool, nonzero = masked) or f32 "
                   "(additive)", op, loom_dtype_name(m->dtype));
    int nd = m->ndim, ok = nd == 2 || nd == 4;
    if (ok) {
        int64_t r = m->shape[nd - 2], c = m->shape[nd - 1];
        ok = exact ? (r == rows && c == cols) : (r >= rows && c >= cols);
        if (nd == 4)
            ok = ok && (m->shape[0] == 1 || m->shape[0] == B) &&
                 (m->shape[1] == 1 || m->shape[1] == N);
    }
    LOOM_RETURN_IF(!ok, LOOM_ERR_SHAPE,
                   "%s: atten_mask shape %s: expected %s[%lld, %lld] or [%lld or 1, %lld or 1, "
                   "%lld, %lld]", op,
                   nd >= 1 && nd <= LOOM_MAX_DIMS ? loom_ref_shape_str(m, sh, sizeof sh) : "[?]",
                   exact ? "" : "at least ", (long long)rows, (long long)cols, (long long)B,
                   (long long)N, (long long)rows, (long long)cols);
    LOOM_RETURN_IF(!m->data, LOOM_ERR_INVALID_ARG, "%s: atten_mask has no data", op);
    pr->mask = m->data;
    pr->mask_bool = m->dtype == LOOM_I8;
    pr->mi = m->stride[nd - 2], pr->mj = m->stride[nd - 1];
    pr->mb = nd == 4 && m->shape[0] > 1 ? m->stride[0] : 0;
    pr->mn = nd == 4 && m->shape[1] > 1 ? m->stride[1] : 0;
    return LOOM_OK;
}

/* lse [B, N, S_q] (TND: [T_q, N]). */
static loom_status resolve_lse(const char *op, loom_tensor *l, attn_problem *pr, int64_t B) {
    pr->lse = NULL;
    if (!l) return LOOM_OK;
    char sh[LOOM_REF_SHAPE_BUF];
    LOOM_RETURN_IF(l->dtype != LOOM_F32, LOOM_ERR_DTYPE, "%s: softmax_lse has dtype %s: expected f32",
                   op, loom_dtype_name(l->dtype));
    int ok = pr->tnd ? (l->ndim == 2 && l->shape[0] == pr->Sq && l->shape[1] == pr->N)
                     : (l->ndim == 3 && l->shape[0] == B && l->shape[1] == pr->N &&
                        l->shape[2] == pr->Sq);
    if (!ok && pr->tnd)
        return loom_set_error(LOOM_ERR_SHAPE, "%s: softmax_lse shape %s: expected [%lld, %lld]", op,
                              l->ndim >= 1 && l->ndim <= LOOM_MAX_DIMS ? loom_ref_shape_str(l, sh, sizeof sh) : "[?]",
                              (long long)pr->Sq, (long long)pr->N);
    LOOM_RETURN_IF(!ok, LOOM_ERR_SHAPE, "%s: softmax_lse shape %s: expected [%lld, %lld, %lld]", op,
                   l->ndim >= 1 && l->ndim <= LOOM_MAX_DIMS ? loom_ref_shape_str(l, sh, sizeof sh) : "[?]",
                   (long long)B, (long long)pr->N, (long long)pr->Sq);
    LOOM_RETURN_IF(!l->data, LOOM_ERR_INVALID_ARG, "%s: softmax_lse has no data", op);
    pr->lse = l->data;
    if (pr->tnd) pr->lb = 0, pr->li = l->stride[0], pr->ln = l->stride[1];
    else pr->lb = l->stride[0], pr->ln = l->stride[1], pr->li = l->stride[2];
    return LOOM_OK;
}

static loom_status check_lengths(const char *op, const char *name, const int64_t *len, int64_t B,
                                 int64_t max, const char *what) {
    if (!len) return LOOM_OK;
    for (int64_t b = 0; b < B; b++)
        LOOM_RETURN_IF(len[b] < 0 || len[b] > max, LOOM_ERR_INVALID_ARG,
                       "%s: %s[%lld] = %lld outside [0, %lld] (%s)", op, name, (long long)b,
                       (long long)len[b], (long long)max, what);
    return LOOM_OK;
}

static loom_status check_cumulative(const char *op, const char *name, const int64_t *cum,
                                    int64_t n, int64_t total, const char *what) {
    LOOM_RETURN_IF(!cum, LOOM_ERR_INVALID_ARG, "%s: input_layout TND needs %s", op, name);
    for (int64_t b = 0; b < n; b++) {
        int64_t prev = b ? cum[b - 1] : 0;
        LOOM_RETURN_IF(cum[b] < prev || cum[b] > total, LOOM_ERR_INVALID_ARG,
                       "%s: %s[%lld] = %lld: offsets must be non-decreasing, >= 0 and <= %lld (%s)",
                       op, name, (long long)b, (long long)cum[b], (long long)total, what);
    }
    return LOOM_OK;
}

static int64_t clamp_tokens(int64_t t) {
    const int64_t lim = (int64_t)1 << 40;  /* beyond any sequence; keeps i +- t in range */
    return t > lim ? lim : t < -lim ? -lim : t;
}

loom_status attn_check_inner_precise(const char *op, int inner_precise) {
    LOOM_RETURN_IF(inner_precise != LOOM_ATTN_HIGH_PRECISION &&
                       inner_precise != LOOM_ATTN_HIGH_PERFORMANCE,
                   LOOM_ERR_INVALID_ARG, "%s: inner_precise = %d: expected 0 (high precision) or 1 "
                   "(high performance)", op, inner_precise);
    return LOOM_OK;
}

static loom_status resolve_common(const char *op, int sparse_mode, float scale, int64_t pre,
                                  int64_t next, int has_mask, int inner_precise, float softcap,
                                  attn_problem *pr) {
    LOOM_TRY(attn_check_inner_precise(op, inner_precise));
    LOOM_RETURN_IF(!(softcap >= 0.0f) || !isfinite(softcap), LOOM_ERR_INVALID_ARG,
                   "%s: softcap = %g: expected 0 (none) or a positive finite cap", op, (double)softcap);
    pr->softcap = softcap;
    pr->inner_precise = inner_precise;
    LOOM_RETURN_IF(sparse_mode < 0 || sparse_mode >= LOOM_SPARSE_MODE_COUNT, LOOM_ERR_INVALID_ARG,
                   "%s: sparse_mode = %d: expected 0..4", op, sparse_mode);
    LOOM_RETURN_IF(sparse_mode == LOOM_SPARSE_ALL_MASK && !has_mask, LOOM_ERR_INVALID_ARG,
                   "%s: sparse_mode 1 (all mask) needs atten_mask", op);
    LOOM_RETURN_IF(!isfinite(scale), LOOM_ERR_INVALID_ARG, "%s: scale_value = %g is not finite", op,
                   (double)scale);
    pr->sparse_mode = sparse_mode;
    pr->scale = scale != 0.0f ? (double)scale : 1.0 / sqrt((double)pr->D);
    pr->pre = clamp_tokens(pre);
    pr->next = clamp_tokens(next);
    return LOOM_OK;
}

static loom_status resolve_quant(const char *op, const char *name, const loom_tensor *scale,
                                 const loom_tensor *offset, int mode, int64_t d0, int64_t Nkv,
                                 int64_t d2, int64_t D, attn_quant *q) {
    char sh[LOOM_REF_SHAPE_BUF];
    LOOM_RETURN_IF(mode != LOOM_ANTIQUANT_PER_CHANNEL && mode != LOOM_ANTIQUANT_PER_TOKEN,
                   LOOM_ERR_INVALID_ARG, "%s: %s_antiquant_mode = %d: expected 0 (per channel) or "
                   "1 (per token)", op, name, mode);
    LOOM_RETURN_IF(!scale, LOOM_ERR_INVALID_ARG, "%s: an i8 %s cache needs %s_antiquant_scale", op,
                   name, name);
    const loom_tensor *ts[2] = {scale, offset};
    for (int w = 0; w < 2; w++) {
        const loom_tensor *x = ts[w];
        if (!x) continue;
        const char *what = w ? "offset" : "scale";
        LOOM_RETURN_IF(x->dtype != LOOM_F32, LOOM_ERR_DTYPE,
                       "%s: %s_antiquant_%s has dtype %s: expected f32", op, name, what,
                       loom_dtype_name(x->dtype));
        int ok = mode == LOOM_ANTIQUANT_PER_CHANNEL
                     ? x->ndim == 2 && (x->shape[0] == Nkv || x->shape[0] == 1) && x->shape[1] == D
                     : x->ndim == 3 && x->shape[0] == d0 && (x->shape[1] == Nkv || x->shape[1] == 1) &&
                           x->shape[2] == d2;
        /* formatted only for the message: on every call it cost ~1 % of a decode step */
        const char *shs = ok ? "" : x->ndim >= 1 && x->ndim <= LOOM_MAX_DIMS ? loom_ref_shape_str(x, sh, sizeof sh)
                                                                               : "[?]";
        if (!ok && mode == LOOM_ANTIQUANT_PER_CHANNEL)
            return loom_set_error(LOOM_ERR_SHAPE,
                                  "%s: %s_antiquant_%s shape %s: expected [%lld or 1, %lld] (per channel)", op,
                                  name, what, shs, (long long)Nkv, (long long)D);
        LOOM_RETURN_IF(!ok, LOOM_ERR_SHAPE,
                       "%s: %s_antiquant_%s shape %s: expected [%lld, %lld or 1, %lld] (per token)",
                       op, name, what, shs, (long long)d0, (long long)Nkv, (long long)d2);
        LOOM_RETURN_IF(!x->data, LOOM_ERR_INVALID_ARG, "%s: %s_antiquant_%s has no data", op, name,
                       what);
        int64_t a, b, c;
        if (mode == LOOM_ANTIQUANT_PER_CHANNEL)
            a = x->shape[0] > 1 ? x->stride[0] : 0, b = x->stride[1], c = 0;
        else
            a = x->stride[0], b = x->shape[1] > 1 ? x->stride[1] : 0, c = x->stride[2];
        if (w) q->offset = x->data, q->o0 = a, q->o1 = b, q->o2 = c;
        else q->scale = x->data, q->s0 = a, q->s1 = b, q->s2 = c;
    }
    q->mode = mode;
    return LOOM_OK;
}

/* The antiquant parameters of an i8 key and value (both ops), or an error if
 * scales come with another dtype. */
static loom_status resolve_kv_quant(const char *op, const loom_tensor *key, const loom_tensor *ks,
                                    const loom_tensor *ko, int kmode, const loom_tensor *vs,
                                    const loom_tensor *vo, int vmode, const int64_t kd[4],
                                    attn_problem *pr) {
    if (key->dtype != LOOM_I8) {
        LOOM_RETURN_IF(ks || ko || vs || vo, LOOM_ERR_INVALID_ARG,
                       "%s: antiquant scales given for a %s cache (only i8 caches are dequantized)",
                       op, loom_dtype_name(key->dtype));
        return LOOM_OK;
    }
    LOOM_TRY(resolve_quant(op, "key", ks, ko, kmode, kd[0], pr->Nkv, kd[1], pr->D, &pr->kq));
    return resolve_quant(op, "value", vs, vo, vmode, kd[0], pr->Nkv, kd[1], pr->D, &pr->vq);
}

/* A paged cache: the block table bt [B, max_blocks] of a cache whose dims kd are {num_blocks,
 * block_size, N_kv, D}; block_size the parameter (0 = from the cache). Skv becomes the
 * positions the table can address. */
static loom_status resolve_paged(const char *op, const loom_tensor *bt, int64_t block_size, int64_t B,
                                 const int64_t kd[4], attn_problem *pr) {
    char sh[LOOM_REF_SHAPE_BUF];
    LOOM_RETURN_IF(bt->dtype != LOOM_I32, LOOM_ERR_DTYPE,
                   "%s: block_table has dtype %s: expected i32", op, loom_dtype_name(bt->dtype));
    LOOM_RETURN_IF(bt->ndim != 2 || bt->shape[0] != B || bt->shape[1] < 1, LOOM_ERR_SHAPE,
                   "%s: block_table shape %s: expected [%lld, max_blocks]", op,
                   bt->ndim >= 1 && bt->ndim <= LOOM_MAX_DIMS ? loom_ref_shape_str(bt, sh, sizeof sh) : "[?]",
                   (long long)B);
    LOOM_RETURN_IF(!bt->data, LOOM_ERR_INVALID_ARG, "%s: block_table has no data", op);
    LOOM_RETURN_IF(block_size != 0 && block_size != kd[1], LOOM_ERR_SHAPE,
                   "%s: block_size = %lld but the cache holds blocks of %lld", op, (long long)block_size,
                   (long long)kd[1]);
    pr->paged = 1;
    pr->block_table = bt->data;
    pr->bt_b = bt->stride[0], pr->bt_j = bt->stride[1], pr->max_blocks = bt->shape[1];
    pr->num_blocks = kd[0], pr->block_size = kd[1];
    LOOM_RETURN_IF(pr->max_blocks > INT64_MAX / pr->block_size || pr->max_blocks * pr->block_size > INT32_MAX,
                   LOOM_ERR_UNSUPPORTED, "%s: block_table addresses more than 2^31 - 1 positions", op);
    pr->Skv = pr->max_blocks * pr->block_size;
    return LOOM_OK;
}

/* Every block a sequence's keys use (nseq sequences, lengths set) is in [0, num_blocks). */
static loom_status check_blocks(const char *op, const attn_problem *pr, int64_t nseq) {
    for (int64_t b = 0; b < nseq; b++) {
        attn_seq s;
        attn_get_seq(pr, b, &s);
        for (int64_t j = 0; j < (s.kv_len + pr->block_size - 1) / pr->block_size; j++) {
            int32_t blk = pr->block_table[b * pr->bt_b + j * pr->bt_j];
            LOOM_RETURN_IF(blk < 0 || blk >= pr->num_blocks, LOOM_ERR_INVALID_ARG,
                           "%s: block_table[%lld][%lld] = %d outside [0, %lld) (num_blocks)", op,
                           (long long)b, (long long)j, (int)blk, (long long)pr->num_blocks);
        }
    }
    return LOOM_OK;
}

void attn_scale_view(const loom_tensor *s, loom_tensor *out) {
    *out = *s;
    out->shape[1] = s->shape[2], out->shape[2] = s->shape[1];
    out->stride[1] = s->stride[2], out->stride[2] = s->stride[1];
}

loom_status attn_resolve_prefill(const loom_flash_attention_tensors *t,
                                 const loom_flash_attention_params *p, attn_problem *pr) {
    static const char op[] = "flash_attention_score";
    memset(pr, 0, sizeof *pr);
    LOOM_RETURN_IF(!t || !p, LOOM_ERR_INVALID_ARG, "%s: tensors or params is NULL", op);
    int64_t qd[4], kd[4];
    int paged = t->block_table != NULL;
    pr->tnd = p->input_layout == LOOM_ATTN_TND;
    LOOM_TRY(resolve_qkv(op, p->input_layout, pr->tnd && paged ? LOOM_ATTN_BSND : p->input_layout,
                         p->num_heads, p->num_key_value_heads, t->query, t->key, t->value,
                         t->attention_out, pr, qd, kd));
    if (t->key->dtype != LOOM_I8) LOOM_TRY(check_float(op, "key", t->key));
    LOOM_RETURN_IF(t->key->dtype == LOOM_I8 && pr->tnd && !paged, LOOM_ERR_DTYPE,
                   "%s: an i8 key and value take BSND, BNSD or BSH, not TND (unless paged)", op);
    LOOM_RETURN_IF(!paged && p->block_size != 0, LOOM_ERR_INVALID_ARG,
                   "%s: block_size = %lld without a block_table", op, (long long)p->block_size);
    pr->Sq = qd[1], pr->Skv = pr->kv_cache = kd[1];
    LOOM_RETURN_IF(pr->tnd && p->num_seqs < 1, LOOM_ERR_INVALID_ARG,
                   "%s: input_layout TND needs num_seqs >= 1 (found %lld)", op, (long long)p->num_seqs);
    if (paged) {
        LOOM_RETURN_IF(!pr->tnd && !p->actual_seq_lengths_kv, LOOM_ERR_INVALID_ARG,
                       "%s: a paged cache needs actual_seq_lengths_kv", op);
        LOOM_TRY(resolve_paged(op, t->block_table, p->block_size, pr->tnd ? p->num_seqs : qd[0], kd, pr));
        pr->kv_cache = pr->Skv;
    }
    LOOM_RETURN_IF(pr->Sq > INT32_MAX || pr->Skv > INT32_MAX, LOOM_ERR_UNSUPPORTED,
                   "%s: sequence dims above 2^31 - 1 are not supported", op);
    LOOM_TRY(resolve_common(op, p->sparse_mode, p->scale_value, p->pre_tokens, p->next_tokens,
                            t->atten_mask != NULL, p->inner_precise, p->softcap, pr));
    LOOM_RETURN_IF(!(p->keep_prob > 0.0f && p->keep_prob <= 1.0f), LOOM_ERR_INVALID_ARG,
                   "%s: keep_prob = %g outside (0, 1]", op, (double)p->keep_prob);
    pr->keep_prob = p->keep_prob, pr->seed = p->seed, pr->offset = p->offset;
    LOOM_RETURN_IF(p->block_q < 0 || p->block_q > LOOM_ATTN_MAX_BLOCK, LOOM_ERR_INVALID_ARG,
                   "%s: block_q = %lld outside 0..%d", op, (long long)p->block_q, LOOM_ATTN_MAX_BLOCK);
    LOOM_RETURN_IF(p->block_kv < 0 || p->block_kv > LOOM_ATTN_MAX_BLOCK, LOOM_ERR_INVALID_ARG,
                   "%s: block_kv = %lld outside 0..%d", op, (long long)p->block_kv,
                   LOOM_ATTN_MAX_BLOCK);
    pr->block_q = p->block_q, pr->block_kv = p->block_kv;
    pr->kq.mode = pr->vq.mode = -1;
    LOOM_TRY(resolve_kv_quant(op, t->key, t->key_antiquant_scale, t->key_antiquant_offset,
                              p->key_antiquant_mode, t->value_antiquant_scale,
                              t->value_antiquant_offset, p->value_antiquant_mode, kd, pr));

    int64_t mask_rows = pr->Sq, mask_cols = pr->Skv, mask_B;
    if (pr->tnd) {
        LOOM_RETURN_IF(p->actual_seq_lengths || p->actual_seq_lengths_kv, LOOM_ERR_INVALID_ARG,
                       "%s: actual_seq_lengths/_kv are for padded layouts; TND takes "
                       "actual_seq_qlen and actual_seq_kvlen", op);
        LOOM_TRY(check_cumulative(op, "actual_seq_qlen", p->actual_seq_qlen, p->num_seqs, pr->Sq,
                                  "T of query"));
        LOOM_TRY(check_cumulative(op, "actual_seq_kvlen", p->actual_seq_kvlen, p->num_seqs,
                                  paged ? INT64_MAX : pr->Skv, "T of key"));
        for (int64_t b = 0; paged && b < p->num_seqs; b++) { /* each sequence in its own blocks: */
            int64_t len = p->actual_seq_kvlen[b] - (b ? p->actual_seq_kvlen[b - 1] : 0); /* steps bounded */
            LOOM_RETURN_IF(len > pr->Skv, LOOM_ERR_INVALID_ARG,
                           "%s: actual_seq_kvlen[%lld] = %lld: sequence length %lld above %lld "
                           "(max_blocks * block_size)", op, (long long)b, (long long)p->actual_seq_kvlen[b],
                           (long long)len, (long long)pr->Skv);
        }
        pr->q_cum = p->actual_seq_qlen, pr->kv_cum = p->actual_seq_kvlen;
        pr->tnd_seqs = p->num_seqs;
        pr->B = p->num_seqs + (p->actual_seq_qlen[p->num_seqs - 1] < pr->Sq);
        mask_rows = mask_cols = 0;
        for (int64_t b = 0; b < p->num_seqs; b++) {
            attn_seq s;
            attn_get_seq(pr, b, &s);
            if (s.q_len > mask_rows) mask_rows = s.q_len;
            if (s.kv_len > mask_cols) mask_cols = s.kv_len;
        }
        mask_B = p->num_seqs;
        pr->drop_sq = pr->Sq, pr->drop_skv = pr->Skv;
    } else {
        LOOM_RETURN_IF(p->actual_seq_qlen || p->actual_seq_kvlen, LOOM_ERR_INVALID_ARG,
                       "%s: actual_seq_qlen/kvlen are for input_layout TND; padded layouts take "
                       "actual_seq_lengths and actual_seq_lengths_kv", op);
        LOOM_RETURN_IF(!paged && kd[0] != qd[0], LOOM_ERR_SHAPE, "%s: key has batch %lld, query %lld", op,
                       (long long)kd[0], (long long)qd[0]);
        pr->B = mask_B = qd[0];
        LOOM_TRY(check_lengths(op, "actual_seq_lengths", p->actual_seq_lengths, pr->B, pr->Sq,
                               "S_q of query"));
        LOOM_TRY(check_lengths(op, "actual_seq_lengths_kv", p->actual_seq_lengths_kv, pr->B,
                               pr->Skv, paged ? "max_blocks * block_size" : "S_kv of key"));
        pr->q_lens = p->actual_seq_lengths, pr->kv_lens = p->actual_seq_lengths_kv;
        pr->drop_sq = pr->Sq, pr->drop_skv = pr->Skv;
        if (paged) { /* the mask covers the longest sequence, as decode's */
            mask_cols = 0;
            for (int64_t b = 0; b < pr->B; b++)
                mask_cols = pr->kv_lens[b] > mask_cols ? pr->kv_lens[b] : mask_cols;
        }
    }
    if (paged) LOOM_TRY(check_blocks(op, pr, pr->tnd ? pr->tnd_seqs : pr->B));
    LOOM_TRY(resolve_mask(op, t->atten_mask, mask_B, pr->N, mask_rows, mask_cols, !pr->tnd && !paged, pr));
    LOOM_TRY(resolve_lse(op, t->softmax_lse, pr, pr->tnd ? 0 : pr->B));
    return LOOM_OK;
}

loom_status attn_resolve_decode(const loom_incre_flash_attention_tensors *t,
                                const loom_incre_flash_attention_params *p,
                                const int64_t *q_lens, attn_problem *pr) {
    static const char op[] = "incre_flash_attention";
    memset(pr, 0, sizeof *pr);
    LOOM_RETURN_IF(!t || !p, LOOM_ERR_INVALID_ARG, "%s: tensors or params is NULL", op);
    LOOM_RETURN_IF(p->input_layout == LOOM_ATTN_TND, LOOM_ERR_INVALID_ARG,
                   "%s: input_layout TND is for prefill; decode takes BSND, BNSD or BSH", op);
    int64_t qd[4], kd[4];
    LOOM_TRY(resolve_qkv(op, p->input_layout, p->input_layout, p->num_heads, p->num_key_value_heads,
                         t->query, t->key, t->value, t->attention_out, pr, qd, kd));
    LOOM_RETURN_IF(!is_float(t->key->dtype) && t->key->dtype != LOOM_I8, LOOM_ERR_DTYPE,
                   "%s: key cache has dtype %s: expected f32/f16/bf16/i8", op,
                   loom_dtype_name(t->key->dtype));
    pr->B = qd[0], pr->Sq = qd[1];
    LOOM_RETURN_IF(pr->Sq > LOOM_INCRE_MAX_Q_LEN, LOOM_ERR_SHAPE,
                   "%s: query length S_q = %lld exceeds %d (use flash_attention_score)", op,
                   (long long)pr->Sq, LOOM_INCRE_MAX_Q_LEN);
    LOOM_TRY(resolve_common(op, p->sparse_mode, p->scale_value, p->pre_tokens, p->next_tokens,
                            t->atten_mask != NULL, p->inner_precise, p->softcap, pr));
    pr->keep_prob = 1.0f;
    pr->kq.mode = pr->vq.mode = -1;
    if (t->block_table) {
        LOOM_TRY(resolve_paged(op, t->block_table, p->block_size, pr->B, kd, pr));
        LOOM_RETURN_IF(!p->actual_seq_lengths, LOOM_ERR_INVALID_ARG,
                       "%s: a paged cache needs actual_seq_lengths", op);
    } else {
        LOOM_RETURN_IF(kd[0] != pr->B, LOOM_ERR_SHAPE, "%s: key cache has batch %lld, query %lld",
                       op, (long long)kd[0], (long long)pr->B);
        pr->Skv = kd[1];
    }
    LOOM_TRY(check_lengths(op, "actual_seq_lengths", p->actual_seq_lengths, pr->B, pr->Skv,
                           pr->paged ? "max_blocks * block_size" : "S_max of the cache"));
    LOOM_TRY(check_lengths(op, "actual_seq_lengths (query)", q_lens, pr->B, pr->Sq,
                           "S_q of query"));
    pr->kv_lens = p->actual_seq_lengths, pr->q_lens = q_lens;
    int64_t max_kv = 0;
    for (int64_t b = 0; b < pr->B; b++) {
        int64_t len = pr->kv_lens ? pr->kv_lens[b] : pr->Skv;
        if (len > max_kv) max_kv = len;
    }
    if (pr->paged) LOOM_TRY(check_blocks(op, pr, pr->B));
    LOOM_TRY(resolve_kv_quant(op, t->key, t->key_antiquant_scale, t->key_antiquant_offset,
                              p->key_antiquant_mode, t->value_antiquant_scale,
                              t->value_antiquant_offset, p->value_antiquant_mode, kd, pr));
    LOOM_RETURN_IF(p->kv_chunk < 0 || p->kv_chunk > ((int64_t)1 << 20), LOOM_ERR_INVALID_ARG,
                   "%s: kv_chunk = %lld outside 0..%lld", op, (long long)p->kv_chunk,
                   (long long)1 << 20);
    pr->kv_chunk = p->kv_chunk ? p->kv_chunk : ATTN_DEFAULT_KV_CHUNK;
    LOOM_TRY(resolve_mask(op, t->atten_mask, pr->B, pr->N, pr->Sq, max_kv, 0, pr));
    LOOM_TRY(resolve_lse(op, t->softmax_lse, pr, pr->B));
    return LOOM_OK;
}

/* ------------------------------------------------------------ per-row rules */

void attn_prefill_fit_caches(attn_problem *pr) {
    int64_t mx = 0;
    for (int64_t b = 0; b < pr->B; b++) {
        attn_seq s;
        attn_get_seq(pr, b, &s);
        if (s.kv_len > mx) mx = s.kv_len;
    }
    pr->kv_cache = mx;
}

void attn_get_seq(const attn_problem *pr, int64_t b, attn_seq *s) {
    if (!pr->tnd) {
        s->q_start = 0, s->q_rows = pr->Sq, s->kv_start = 0;
        s->q_len = pr->q_lens ? pr->q_lens[b] : pr->Sq;
        s->kv_len = pr->kv_lens ? pr->kv_lens[b] : pr->Skv;
    } else if (b < pr->tnd_seqs) {
        s->q_start = b ? pr->q_cum[b - 1] : 0;
        s->q_len = s->q_rows = pr->q_cum[b] - s->q_start;
        s->kv_start = b ? pr->kv_cum[b - 1] : 0;
        s->kv_len = pr->kv_cum[b] - s->kv_start;
        if (pr->paged) s->kv_start = 0; /* the sequence's own blocks, from position 0 */
    } else { /* rows after the last sequence: written as zeros */
        s->q_start = pr->q_cum[pr->tnd_seqs - 1];
        s->q_rows = pr->Sq - s->q_start;
        s->q_len = 0, s->kv_start = 0, s->kv_len = 0;
    }
}

void attn_visible(const attn_problem *pr, int64_t i, int64_t sq, int64_t skv, int64_t *lo,
                  int64_t *hi) {
    int64_t a = 0, e = skv, diag = i + skv - sq; /* diag: the bottom-right aligned diagonal */
    switch (pr->sparse_mode) {
    case LOOM_SPARSE_DEFAULT: a = i - pr->pre, e = i + pr->next + 1; break;
    case LOOM_SPARSE_LEFT_UP_CAUSAL: e = i + 1; break;
    case LOOM_SPARSE_RIGHT_DOWN_CAUSAL: e = diag + 1; break;
    case LOOM_SPARSE_BAND: a = diag - pr->pre, e = diag + pr->next + 1; break;
    default: break; /* all mask: the explicit mask decides */
    }
    a = a < 0 ? 0 : a > skv ? skv : a;
    e = e < a ? a : e > skv ? skv : e;
    *lo = a, *hi = e;
}

void attn_dropout_row(const attn_problem *pr, int64_t b, int64_t h, int64_t row, int64_t col0,
                      int n, float *p, int64_t stride) {
    uint64_t bb = pr->tnd ? 0 : (uint64_t)b;
    uint64_t idx = ((bb * (uint64_t)pr->N + (uint64_t)h) * (uint64_t)pr->drop_sq + (uint64_t)row) *
                       (uint64_t)pr->drop_skv + (uint64_t)col0;
    /* word i of stream (seed, offset) is word i % 4 of Philox block i / 4 under the
     * stream's key (loom_rng_uniform_at): one block serves four keys */
    loom_rng r;
    loom_rng_init(&r, pr->seed, pr->offset);
    float keep = 1.0f / pr->keep_prob;
    uint64_t blk = UINT64_MAX;
    loom_philox_ctr w = {{0, 0, 0, 0}};
    for (int c = 0; c < n; c++, idx++) {
        if (idx / 4 != blk) {
            blk = idx / 4;
            loom_philox_ctr ctr = {{(uint32_t)blk, (uint32_t)(blk >> 32), 0, 0}};
            w = loom_philox4x32(ctr, r.key);
        }
        float u = (float)(w.v[idx % 4] >> 8) * 0x1.0p-24f;
        p[c * stride] *= u < pr->keep_prob ? keep : 0.0f;
    }
}

/* loom_f16_to_f32 / loom_bf16_to_f32 (base/half.c) without branches or calls,
 * so that a loop over a contiguous row vectorises (the generic level's decode
 * converted 16-bit rows at ~1.5 ns per element through the calls). Same
 * values, NaNs quieted alike; subnormal halves as m * 2^-24, exact. */
static inline float f16_bits_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t normal = sign | ((e + 112u) << 23) | (m << 13);
    uint32_t special = sign | 0x7f800000u | (m << 13) | ((uint32_t)(m != 0) << 22); /* inf, quiet NaN */
    float sub = (float)(int32_t)m * 0x1p-24f, f; /* (signed: vectorises on SSE2) */
    uint32_t sb;
    memcpy(&sb, &sub, sizeof sb);
    /* masks, not branches or selects, so GCC vectorises the loop */
    uint32_t is_sub = 0u - (uint32_t)(e == 0), is_special = 0u - (uint32_t)(e == 0x1fu);
    uint32_t x = ((sb | sign) & is_sub) | (special & is_special) | (normal & ~(is_sub | is_special));
    memcpy(&f, &x, sizeof f);
    return f;
}

static inline float bf16_bits_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    x |= (x & 0x7fffffffu) > 0x7f800000u ? 0x400000u : 0u; /* quiet a signalling NaN */
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

void attn_load_row(float *dst, const void *src, loom_dtype dt, int64_t sd, int64_t n) {
    if (sd == 1 && (dt == LOOM_F16 || dt == LOOM_BF16)) {
        const uint16_t *h = src;
        if (dt == LOOM_F16)
            for (int64_t x = 0; x < n; x++) dst[x] = f16_bits_to_f32(h[x]);
        else
            for (int64_t x = 0; x < n; x++) dst[x] = bf16_bits_to_f32(h[x]);
        return;
    }
    switch (dt) {
    case LOOM_F32:
        for (int64_t x = 0; x < n; x++) dst[x] = ((const float *)src)[x * sd];
        break;
    case LOOM_F16:
        for (int64_t x = 0; x < n; x++) dst[x] = loom_f16_to_f32(((const uint16_t *)src)[x * sd]);
        break;
    case LOOM_BF16:
        for (int64_t x = 0; x < n; x++) dst[x] = loom_bf16_to_f32(((const uint16_t *)src)[x * sd]);
        break;
    default: /* i8 */
        for (int64_t x = 0; x < n; x++) dst[x] = (float)((const int8_t *)src)[x * sd];
        break;
    }
}

void attn_store_row(void *dst, loom_dtype dt, int64_t sd, const float *src, int64_t n) {
    switch (dt) {
    case LOOM_F32:
        for (int64_t x = 0; x < n; x++) ((float *)dst)[x * sd] = src[x];
        break;
    case LOOM_F16:
        for (int64_t x = 0; x < n; x++) ((uint16_t *)dst)[x * sd] = loom_f32_to_f16(src[x]);
        break;
    default: /* bf16 */
        for (int64_t x = 0; x < n; x++) ((uint16_t *)dst)[x * sd] = loom_f32_to_bf16(src[x]);
        break;
    }
}

int attn_split_owner(double before, double c, double total, int64_t i, int64_t n, int nth) {
    int owner = total > 0.0 ? (int)((before + 0.5 * c) * nth / total) : (int)(i * nth / n);
    return owner < nth ? owner : nth - 1;
}

void attn_split_cost(int64_t n, int ith, int nth, double (*cost)(const void *, int64_t),
                     const void *ctx, int64_t *lo, int64_t *hi) {
    if (nth <= 1) {
        *lo = 0, *hi = n;
        return;
    }
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) total += cost(ctx, i);
    double acc = 0.0;
    *lo = n, *hi = n;
    for (int64_t i = 0; i < n; i++) {
        double c = cost(ctx, i);
        int owner = attn_split_owner(acc, c, total, i, n, nth);
        if (owner >= ith && *lo == n) *lo = i;
        if (owner > ith) {
            *hi = i;
            break;
        }
        acc += c;
    }
    if (*lo > *hi) *lo = *hi;
}

double attn_split_imbalance(int64_t n, int nth, double (*cost)(const void *, int64_t),
                            const void *ctx) {
    double total = 0.0, acc = 0.0, share = 0.0, worst = 0.0;
    if (nth <= 1) return 1.0;
    for (int64_t i = 0; i < n; i++) total += cost(ctx, i);
    if (total <= 0.0) return 1.0;
    int cur = 0; /* owners are non-decreasing: one running share at a time */
    for (int64_t i = 0; i < n; i++) {
        double c = cost(ctx, i);
        int owner = attn_split_owner(acc, c, total, i, n, nth);
        if (owner != cur) cur = owner, share = 0.0;
        share += c;
        worst = share > worst ? share : worst;
        acc += c;
    }
    return worst * nth / total;
}

void attn_cost(const attn_problem *pr, loom_cost *c) {
    double pairs = 0.0, kv_rows = 0.0, q_rows = 0.0, out_rows = 0.0;
    for (int64_t b = 0; b < pr->B; b++) {
        attn_seq s;
        attn_get_seq(pr, b, &s);
        int64_t kmin = INT64_MAX, kmax = 0;
        for (int64_t i = 0; i < s.q_len; i++) {
            int64_t lo, hi;
            attn_visible(pr, i, s.q_len, s.kv_len, &lo, &hi);
            pairs += (double)(hi - lo);
            if (hi > lo) {
                if (lo < kmin) kmin = lo;
                if (hi > kmax) kmax = hi;
            }
        }
        if (kmax > kmin) kv_rows += (double)(kmax - kmin);
        q_rows += (double)s.q_len;
        out_rows += (double)s.q_rows;
    }
    double N = (double)pr->N, D = (double)pr->D, kvD = (double)pr->Nkv * D;
    c->flops = 4.0 * N * pairs * D;
    c->bytes_read = q_rows * N * D * (double)pr->q.esize +
                    kv_rows * kvD * (double)(pr->k.esize + pr->v.esize);
    if (pr->mask) c->bytes_read += pairs * (pr->mn ? N : 1.0) * (pr->mask_bool ? 1.0 : 4.0);
    const attn_quant *qs[2] = {&pr->kq, &pr->vq}; /* i8: scales (and offsets) read with the rows */
    for (int i = 0; i < 2; i++)
        if (qs[i]->mode >= 0)
            c->bytes_read += (qs[i]->offset ? 8.0 : 4.0) *
                             (qs[i]->mode == LOOM_ANTIQUANT_PER_TOKEN ? kv_rows * (double)pr->Nkv : kvD);
    c->bytes_written = out_rows * N * D * (double)pr->out.esize + (pr->lse ? out_rows * N * 4.0 : 0.0);
}

loom_status attn_run_workers(loom_pool *pool, void (*fn)(int, int, void *), void *job, atomic_int *status,
                             void *scratch, const char *op) {
    atomic_init(status, LOOM_OK);
    if (pool) loom_pool_run(pool, fn, job);
    else fn(0, 1, job);
    loom_free_aligned(scratch);
    loom_status s = (loom_status)atomic_load(status);
    LOOM_RETURN_IF(s != LOOM_OK, s, "%s: a worker failed (%s)", op, loom_status_str(s));
    return LOOM_OK;
}

const loom_attn_kernels *loom_attn_kernels_for(loom_isa isa) {
#if defined(__x86_64__)
    const loom_cpu_features *f = loom_cpu_get();
    int has_avx2 = f->avx2 && f->fma && f->f16c;
    if (isa >= LOOM_ISA_AVX512 && has_avx2 && f->avx512f && f->avx512bw && f->avx512vl)
        return f->avx512_bf16 && loom_variant(LOOM_VF_ATTN_BF16) == 0 ? &loom_attn_kernels_avx512_bf16
                                                                    : &loom_attn_kernels_avx512;
    if (isa >= LOOM_ISA_AVX2 && has_avx2) return &loom_attn_kernels_avx2;
#else
    (void)isa;
#endif
    return &loom_attn_kernels_generic;
}
