/* loom_reshape_and_cache and loom_qkv_rope against independent indexing and the
 * reference decomposition (matmul -> rope -> cache write). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "graph/ops_init.h"
#include "base/alloc.h"
#include "check.h"
#include "fused/fused.h"
#include "ops/quant.h"

static loom_rng rng;
static float frand(void) { return loom_rng_uniform(&rng) * 2.0f - 1.0f; }

static loom_tensor tensor(loom_dtype dt, int nd, const int64_t *shape, float amp) {
    loom_tensor t;
    loom_tensor_init(&t, dt, nd, shape, NULL);
    int64_t n = loom_tensor_nelem(&t);
    size_t es = loom_dtype_size(dt);
    t.data = calloc((size_t)n + 1, es);
    if (dt == LOOM_F32)
        for (int64_t i = 0; i < n; i++) ((float *)t.data)[i] = amp * frand();
    return t;
}

/* Element (blk, slot, head, d) of a cache in layout lay, as f32. */
static float cache_at(const loom_tensor *c, loom_attn_layout lay, int64_t blk, int64_t slot, int64_t h,
                      int64_t d, int64_t D) {
    int64_t off;
    if (lay == LOOM_ATTN_BSND) off = blk * c->stride[0] + slot * c->stride[1] + h * c->stride[2] + d;
    else if (lay == LOOM_ATTN_BNSD) off = blk * c->stride[0] + h * c->stride[1] + slot * c->stride[2] + d;
    else off = blk * c->stride[0] + slot * c->stride[1] + h * D + d;
    switch (c->dtype) {
    case LOOM_F16: return loom_f16_to_f32(((uint16_t *)c->data)[off]);
    case LOOM_BF16: return loom_bf16_to_f32(((uint16_t *)c->data)[off]);
    case LOOM_I8: return (float)((int8_t *)c->data)[off];
    default: return ((float *)c->data)[off];
    }
}

static float rounded(loom_dtype dt, float v) {
    if (dt == LOOM_F16) return loom_f16_to_f32(loom_f32_to_f16(v));
    if (dt == LOOM_BF16) return loom_bf16_to_f32(loom_f32_to_bf16(v));
    return v;
}

static void cache_shape(loom_attn_layout lay, int64_t nblk, int64_t slots, int64_t N, int64_t D, int *nd,
                        int64_t *shape) {
    if (lay == LOOM_ATTN_BSH) { *nd = 3; shape[0] = nblk; shape[1] = slots; shape[2] = N * D; return; }
    *nd = 4;
    shape[0] = nblk;
    shape[1] = lay == LOOM_ATTN_BNSD ? N : slots;
    shape[2] = lay == LOOM_ATTN_BNSD ? slots : N;
    shape[3] = D;
}

static void test_reshape_and_cache(void) {
    const loom_attn_layout lays[] = {LOOM_ATTN_BSND, LOOM_ATTN_BNSD, LOOM_ATTN_BSH};
    const loom_dtype dts[] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I8};
    for (int it = 0; it < 48; it++) {
        loom_attn_layout lay = lays[it % 3];
        loom_dtype dt = dts[(it / 3) % 4];
        int paged = (it / 12) % 2, per_token = it % 2;
        int64_t T = 1 + it % 9, N = 1 + it % 3, D = 8 * (1 + it % 4) + (it % 2), B = 2;
        int64_t bs = paged ? 4 : 32, nblk = paged ? 16 : B;
        int64_t kshape[3] = {T, N, D}, cshape[4];
        int nd;
        cache_shape(lay, nblk, bs, N, D, &nd, cshape);
        loom_tensor k = tensor(LOOM_F32, 3, kshape, 3.0f), v = tensor(LOOM_F32, 3, kshape, 3.0f);
        loom_tensor kc = tensor(dt, nd, cshape, 0), vc = tensor(dt, nd, cshape, 0);
        int32_t table[2 * 8];
        for (int i = 0; i < 16; i++) table[i] = (int32_t)((i * 7 + 3) % 16);  /* a permutation */
        int64_t tshape[2] = {2, 8};
        loom_tensor bt;
        loom_tensor_init(&bt, LOOM_I32, 2, tshape, table);
        int64_t pos[16], bid[16];
        for (int64_t t = 0; t < T; t++) { bid[t] = t % 2; pos[t] = t * 3 + it % 3; }  /* distinct slots */
        if (T > 3) pos[2] = -1;  /* padding: skipped */
        int64_t sshape[3] = {nblk, N, bs}, chshape[2] = {N, D};
        loom_tensor ks = tensor(LOOM_F32, per_token ? 3 : 2, per_token ? sshape : chshape, 0);
        loom_tensor vs = tensor(LOOM_F32, per_token ? 3 : 2, per_token ? sshape : chshape, 0);
        if (!per_token)
            for (int64_t i = 0; i < N * D; i++) ((float *)ks.data)[i] = ((float *)vs.data)[i] = 0.03f + 0.001f * (float)i;
        loom_kv_write_params p = {.cache_layout = lay, .positions = pos, .batch_ids = bid,
                                  .block_table = paged ? &bt : NULL,
                                  .antiquant_mode = per_token ? LOOM_ANTIQUANT_PER_TOKEN : LOOM_ANTIQUANT_PER_CHANNEL,
                                  .key_scale = &ks, .value_scale = &vs};
        CHECK_MSG(loom_reshape_and_cache(&k, &v, &kc, &vc, &p) == LOOM_OK, "%s", loom_last_error());
        int bad = 0;
        for (int64_t t = 0; t < T; t++) {
            if (pos[t] < 0) continue;
            int64_t blk = paged ? table[bid[t] * 8 + pos[t] / bs] : bid[t], slot = paged ? pos[t] % bs : pos[t];
            for (int64_t h = 0; h < N; h++)
                for (int64_t d = 0; d < D; d++) {
                    float want = ((float *)k.data)[(t * N + h) * D + d], got = cache_at(&kc, lay, blk, slot, h, d, D);
                    if (dt == LOOM_I8) {
                        float sc = per_token ? ((float *)ks.data)[(blk * N + h) * bs + slot] : ((float *)ks.data)[h * D + d];
                        if (fabsf(got * sc - want) > sc * 0.5f + 1e-6f) bad++;
                    } else if (got != rounded(dt, want)) {
                        bad++;
                    }
                }
        }
        CHECK_MSG(bad == 0, "layout %s dtype %s paged %d: %d wrong elements", loom_attn_layout_name(lay),
                  loom_dtype_name(dt), paged, bad);
        /* errors, and nothing written when one token is bad */
        size_t cbytes = loom_tensor_nbytes(&kc);
        unsigned char *before = malloc(cbytes);
        memcpy(before, kc.data, cbytes);
        pos[0] = paged ? 8 * bs : 32;
        CHECK(loom_reshape_and_cache(&k, &v, &kc, &vc, &p) == LOOM_ERR_INVALID_ARG);
        CHECK(strlen(loom_last_error()) > 0);
        CHECK(memcmp(before, kc.data, cbytes) == 0);
        free(before);
        free(k.data); free(v.data); free(kc.data); free(vc.data); free(ks.data); free(vs.data);
    }
    /* a block table entry out of range */
    int64_t kshape[3] = {1, 1, 8}, cshape[4] = {2, 4, 1, 8}, tshape[2] = {1, 2}, pos[1] = {5};
    int32_t table[2] = {0, 9};
    loom_tensor k = tensor(LOOM_F32, 3, kshape, 1), kc = tensor(LOOM_F32, 4, cshape, 0), bt;
    loom_tensor_init(&bt, LOOM_I32, 2, tshape, table);
    loom_kv_write_params p = {.positions = pos, .block_table = &bt};
    CHECK(loom_reshape_and_cache(&k, &k, &kc, &kc, &p) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "block_table") != NULL);
    free(k.data); free(kc.data);
}

/* Reference: q = x.Wq^T, k = x.Wk^T, v = x.Wv^T, rope(q), rope(k) with the primitive ref ops. */
static void ref_qkv(const loom_tensor *x, const loom_tensor *w, int64_t rows0, int64_t rows, loom_tensor *y,
                    const loom_qkv_rope_params *p, int64_t heads, int rope) {
    loom_tensor ws = *w;
    ws.shape[0] = rows;
    ws.data = (char *)w->data + (size_t)rows0 * loom_dtype_row_bytes(w->dtype, w->stride[0]);
    const loom_tensor *src[2] = {x, &ws};
    CHECK(loom_op_run(LOOM_OP_MATMUL, src, 2, NULL, y, LOOM_ISA_REF) == LOOM_OK);
    if (!rope) return;
    loom_tensor y3, r3;
    int64_t s3[3] = {x->shape[0], heads, p->head_dim};
    loom_tensor_reshape(y, 3, s3, &y3);
    r3 = y3;
    r3.data = malloc(loom_tensor_nbytes(&y3));
    loom_rope_attrs at = {.mode = p->rope_mode, .n_rot = (int)p->n_rot, .theta = p->theta,
                          .freq_scale = p->freq_scale, .pos_offset = (int)p->cache.positions[0]};
    const loom_tensor *s1[1] = {&y3};
    CHECK(loom_op_run(LOOM_OP_ROPE, s1, 1, &at, &r3, LOOM_ISA_REF) == LOOM_OK);
    memcpy(y->data, r3.data, loom_tensor_nbytes(&y3));
    free(r3.data);
}

static void test_qkv_rope(void) {
    loom_pool *pools[3] = {NULL, NULL, NULL};
    loom_pool_init(&pools[1], 2);
    loom_pool_init(&pools[2], 3);
    for (int it = 0; it < 24; it++) {
        int64_t T = (int64_t[]){1, 2, 5, 9, 17, 40}[it % 6], NKV = 1 + it % 3, N = NKV * (1 + it % 2);
        int64_t D = (int64_t[]){8, 16, 34, 64}[it % 4], hid = 16 + 7 * (it % 5), S = 64, pos0 = it % 9;
        int merged = it % 2;
        loom_qkv_rope_params p = loom_qkv_rope_default_params();
        p.num_heads = N; p.num_key_value_heads = NKV; p.head_dim = D;
        p.rope_mode = it % 3 ? LOOM_ROPE_HALF : LOOM_ROPE_INTERLEAVED;
        p.n_rot = it % 4 == 1 ? D / 2 - (D / 2) % 2 : 0;
        int64_t pos[64];
        for (int64_t t = 0; t < T; t++) pos[t] = pos0 + t;
        p.cache.positions = pos;
        p.cache.cache_layout = LOOM_ATTN_BSND;
        int64_t xs[2] = {T, hid}, ws[2] = {(N + 2 * NKV) * D, hid}, cs[4] = {1, S, NKV, D};
        int64_t qs[2] = {T, N * D}, kvs[2] = {T, NKV * D};
        loom_tensor x = tensor(LOOM_F32, 2, xs, 1.0f), w = tensor(LOOM_F32, 2, ws, 0.3f);
        loom_tensor qr = tensor(LOOM_F32, 2, qs, 0), kr = tensor(LOOM_F32, 2, kvs, 0), vr = tensor(LOOM_F32, 2, kvs, 0);
        p.n_rot = p.n_rot ? p.n_rot : D;
        ref_qkv(&x, &w, 0, N * D, &qr, &p, N, 1);
        ref_qkv(&x, &w, N * D, NKV * D, &kr, &p, NKV, 1);
        ref_qkv(&x, &w, (N + NKV) * D, NKV * D, &vr, &p, NKV, 0);
        loom_tensor wq = w, wk = w, wv = w;
        wq.shape[0] = N * D;
        wk.shape[0] = wv.shape[0] = NKV * D;
        wk.data = (float *)w.data + N * D * hid;
        wv.data = (float *)w.data + (N + NKV) * D * hid;
        loom_tensor q1 = tensor(LOOM_F32, 2, qs, 0);
        for (int t = 0; t < 3; t++) {
            loom_tensor q = tensor(LOOM_F32, 2, qs, NAN), ko = tensor(LOOM_F32, 2, kvs, NAN);
            loom_tensor kc = tensor(LOOM_F32, 4, cs, 0), vc = tensor(LOOM_F32, 4, cs, 0);
            loom_status s = merged ? loom_qkv_rope(&x, &w, NULL, NULL, &p, &q, &ko, NULL, &kc, &vc, pools[t])
                                   : loom_qkv_rope(&x, &wq, &wk, &wv, &p, &q, &ko, NULL, &kc, &vc, pools[t]);
            CHECK_MSG(s == LOOM_OK, "qkv_rope: %s", loom_last_error());
            int bad = 0;
            for (int64_t i = 0; i < T * N * D; i++)
                bad += !check_close(((float *)q.data)[i], ((float *)qr.data)[i], 1.0 / 2048);
            for (int64_t tk = 0; tk < T; tk++)
                for (int64_t i = 0; i < NKV * D; i++) {
                    bad += !check_close(cache_at(&kc, LOOM_ATTN_BSND, 0, pos[tk], i / D, i % D, D),
                                        ((float *)kr.data)[tk * NKV * D + i], 1.0 / 2048);
                    bad += !check_close(cache_at(&vc, LOOM_ATTN_BSND, 0, pos[tk], i / D, i % D, D),
                                        ((float *)vr.data)[tk * NKV * D + i], 1.0 / 2048);
                    bad += ((float *)ko.data)[tk * NKV * D + i] != cache_at(&kc, LOOM_ATTN_BSND, 0, pos[tk], i / D, i % D, D);
                }
            CHECK_MSG(bad == 0, "qkv_rope it %d threads %d: %d mismatches", it, t + 1, bad);
            if (t == 0) memcpy(q1.data, q.data, (size_t)(T * N * D) * sizeof(float));
            else CHECK(memcmp(q1.data, q.data, (size_t)(T * N * D) * sizeof(float)) == 0);
            /* the same call in a caller's workspace (garbage in it): the same bits and cache */
            size_t wsb = 0;
            int nth = pools[t] ? loom_pool_size(pools[t]) : 1;
            CHECK(loom_qkv_rope_workspace_size(&x, merged ? &w : &wq, merged ? NULL : &wk, merged ? NULL : &wv, &p,
                                               nth, &wsb) == LOOM_OK);
            void *wsp = loom_alloc_aligned(wsb, 64);
            memset(wsp, 0xA5, wsb);
            loom_tensor q2 = tensor(LOOM_F32, 2, qs, NAN), kc2 = tensor(LOOM_F32, 4, cs, 0), vc2 = tensor(LOOM_F32, 4, cs, 0);
            s = loom_qkv_rope_ws(&x, merged ? &w : &wq, merged ? NULL : &wk, merged ? NULL : &wv, &p, &q2, NULL, NULL,
                                 &kc2, &vc2, wsp, wsb, pools[t]);
            CHECK_MSG(s == LOOM_OK, "qkv_rope_ws: %s", loom_last_error());
            CHECK(memcmp(q2.data, q.data, (size_t)(T * N * D) * sizeof(float)) == 0);
            int diff = 0; /* the written cache rows */
            for (int64_t tk = 0; tk < T; tk++)
                for (int64_t i = 0; i < NKV * D; i++) {
                    diff += cache_at(&kc2, LOOM_ATTN_BSND, 0, pos[tk], i / D, i % D, D) !=
                            cache_at(&kc, LOOM_ATTN_BSND, 0, pos[tk], i / D, i % D, D);
                    diff += cache_at(&vc2, LOOM_ATTN_BSND, 0, pos[tk], i / D, i % D, D) !=
                            cache_at(&vc, LOOM_ATTN_BSND, 0, pos[tk], i / D, i % D, D);
                }
            CHECK_MSG(diff == 0, "qkv_rope_ws it %d threads %d: %d cache values differ", it, t + 1, diff);
            loom_free_aligned(wsp);
            free(q2.data); free(kc2.data); free(vc2.data);
            free(q.data); free(ko.data); free(kc.data); free(vc.data);
        }
        free(x.data); free(w.data); free(qr.data); free(kr.data); free(vr.data); free(q1.data);
    }
    /* invalid parameters name themselves */
    loom_qkv_rope_params p = loom_qkv_rope_default_params();
    p.num_heads = 3; p.num_key_value_heads = 2; p.head_dim = 8;
    int64_t xs[2] = {1, 8}, pos[1] = {0};
    p.cache.positions = pos;
    loom_tensor x = tensor(LOOM_F32, 2, xs, 1);
    CHECK(loom_qkv_rope(&x, &x, NULL, NULL, &p, &x, NULL, NULL, &x, &x, NULL) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "num_key_value_heads") != NULL);
    /* an infinite freq_scale turned every angle into NaN; theta must be finite too */
    for (int i = 0; i < 4; i++) {
        loom_qkv_rope_params b = p;
        b.num_heads = 2;
        if (i == 0) b.freq_scale = INFINITY;
        else if (i == 1) b.freq_scale = NAN;
        else if (i == 2) b.theta = INFINITY;
        else b.theta = -1.0f;
        CHECK(loom_qkv_rope(&x, &x, NULL, NULL, &b, &x, NULL, NULL, &x, &x, NULL) == LOOM_ERR_INVALID_ARG);
        CHECK_MSG(strstr(loom_last_error(), i < 2 ? "freq_scale" : "theta") != NULL, "%s", loom_last_error());
    }
    size_t need = 0;
    CHECK(loom_qkv_rope_workspace_size(&x, &x, NULL, NULL, &p, 1, &need) == LOOM_ERR_INVALID_ARG);
    /* a valid call: workspace too small, misaligned, nth < 1 */
    p.num_heads = 2; p.num_key_value_heads = 1;
    int64_t wsh[2] = {32, 8}, qsh[2] = {1, 16}, csh[4] = {1, 4, 1, 8};
    loom_tensor w = tensor(LOOM_F32, 2, wsh, 0.3f), q = tensor(LOOM_F32, 2, qsh, 0);
    loom_tensor kc = tensor(LOOM_F32, 4, csh, 0), vc = tensor(LOOM_F32, 4, csh, 0);
    CHECK(loom_qkv_rope_workspace_size(&x, &w, NULL, NULL, &p, 0, &need) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_qkv_rope_workspace_size(&x, &w, NULL, NULL, &p, 1, NULL) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_qkv_rope_workspace_size(&x, &w, NULL, NULL, &p, 1, &need) == LOOM_OK && need > 0);
    unsigned char *wsp = loom_alloc_aligned(need + 64, 64);
    CHECK(loom_qkv_rope_ws(&x, &w, NULL, NULL, &p, &q, NULL, NULL, &kc, &vc, wsp, need - 1, NULL) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "workspace") != NULL);
    CHECK(loom_qkv_rope_ws(&x, &w, NULL, NULL, &p, &q, NULL, NULL, &kc, &vc, wsp + 8, need, NULL) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "aligned") != NULL);
    CHECK(loom_qkv_rope_ws(&x, &w, NULL, NULL, &p, &q, NULL, NULL, &kc, &vc, wsp, need, NULL) == LOOM_OK);
    loom_free_aligned(wsp);
    free(w.data); free(q.data); free(kc.data); free(vc.data);
    free(x.data);
    loom_pool_free(pools[1]);
    loom_pool_free(pools[2]);
}

/* Quantized weights with full activations (f32 x): within the f32 rule of
 * the reference (dequantized weights), decode and prefill, byte-identical
 * for 1 and 3 threads; an unknown act_precision is an error naming it. */
static void test_qkv_rope_full(void) {
    loom_pool *pool3 = NULL;
    loom_pool_init(&pool3, 3);
    const loom_dtype dts[3] = {LOOM_Q8_0, LOOM_Q4_0, LOOM_Q4_1};
    for (int it = 0; it < 6; it++) {
        int64_t T = it % 2 ? 11 : 1, N = 4, NKV = 2, D = 16, hid = 96, S = 16;
        loom_qkv_rope_params p = loom_qkv_rope_default_params();
        p.num_heads = N; p.num_key_value_heads = NKV; p.head_dim = D; p.n_rot = D;
        p.act_precision = LOOM_ACT_PREC_FULL;
        int64_t pos[16];
        for (int64_t t = 0; t < T; t++) pos[t] = 2 + t;
        p.cache.positions = pos;
        int64_t xs[2] = {T, hid}, ws[2] = {(N + 2 * NKV) * D, hid}, cs[4] = {1, S, NKV, D};
        int64_t qs[2] = {T, N * D}, kvs[2] = {T, NKV * D};
        loom_tensor x = tensor(LOOM_F32, 2, xs, 1.0f), wf = tensor(LOOM_F32, 2, ws, 0.3f), w;
        loom_tensor_init(&w, dts[it / 2], 2, ws, NULL);
        size_t rb = loom_dtype_row_bytes(w.dtype, hid);
        w.data = malloc(rb * (size_t)ws[0]);
        for (int64_t r = 0; r < ws[0]; r++)
            loom_quantize_row(w.dtype, (float *)wf.data + r * hid, (char *)w.data + r * rb, hid);
        loom_tensor qr = tensor(LOOM_F32, 2, qs, 0), kr = tensor(LOOM_F32, 2, kvs, 0);
        ref_qkv(&x, &w, 0, N * D, &qr, &p, N, 1);
        ref_qkv(&x, &w, N * D, NKV * D, &kr, &p, NKV, 1);
        loom_tensor q[2];
        for (int t = 0; t < 2; t++) {
            q[t] = tensor(LOOM_F32, 2, qs, NAN);
            loom_tensor ko = tensor(LOOM_F32, 2, kvs, NAN), kc = tensor(LOOM_F32, 4, cs, 0), vc = tensor(LOOM_F32, 4, cs, 0);
            loom_status s = loom_qkv_rope(&x, &w, NULL, NULL, &p, &q[t], &ko, NULL, &kc, &vc, t ? pool3 : NULL);
            CHECK_MSG(s == LOOM_OK, "qkv_rope full: %s", loom_last_error());
            int bad = 0;
            for (int64_t i = 0; i < T * N * D; i++)
                bad += !check_close(((float *)q[t].data)[i], ((float *)qr.data)[i], 1.0 / 2048);
            for (int64_t i = 0; i < T * NKV * D; i++)
                bad += !check_close(((float *)ko.data)[i], ((float *)kr.data)[i], 1.0 / 2048);
            CHECK_MSG(bad == 0, "qkv_rope full %s T=%lld threads %d: %d values outside 2^-11",
                      loom_dtype_name(w.dtype), (long long)T, t ? 3 : 1, bad);
            free(ko.data); free(kc.data); free(vc.data);
        }
        CHECK(memcmp(q[0].data, q[1].data, (size_t)(T * N * D) * sizeof(float)) == 0);
        if (it == 5) {
            loom_qkv_rope_params b = p;
            b.act_precision = (loom_act_precision)7;
            loom_tensor kc = tensor(LOOM_F32, 4, cs, 0);
            CHECK(loom_qkv_rope(&x, &w, NULL, NULL, &b, &q[0], NULL, NULL, &kc, &kc, NULL) == LOOM_ERR_INVALID_ARG);
            CHECK(strstr(loom_last_error(), "act_precision") != NULL);
            free(kc.data);
        }
        free(q[0].data); free(q[1].data);
        free(x.data); free(wf.data); free(w.data); free(qr.data); free(kr.data);
    }
    loom_pool_free(pool3);
}

int main(void) {
    loom_ops_init(); /* the fused layer's ops in the op table */
    loom_rng_init(&rng, 11, 0);
    RUN_TEST(test_reshape_and_cache);
    RUN_TEST(test_qkv_rope);
    RUN_TEST(test_qkv_rope_full);
    return TEST_SUMMARY();
}
