/*
 * bench_attention --sets chunked: the last C queries of a context of L keys (a serving engine's
 * prefill chunk against everything its sequence has cached), GQA N / N_kv, D = 128, causal
 * bottom-right, through loom_fused_infer_attention_score (the prefill kernel, S_q > 16) over a
 * contiguous BSND cache [1, L, N_kv, D] and over a paged copy of it in blocks of BS keys (a shuffled
 * table), in the same process, alternating sample by sample. The outputs must be the same bytes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/threadpool.h"
#include "bench_attention.h"
#include "bench_util.h"
#include "fused/attention.h"

typedef struct ck_ctx {
    loom_pool *pool;
    loom_fused_infer_attention_tensors t;
    loom_fused_infer_attention_params p;
    int failed;
} ck_ctx;

static void run_chunk(void *arg) {
    ck_ctx *c = arg;
    int used = -1;
    if (loom_fused_infer_attention_score(&c->t, &c->p, c->pool, &used) != LOOM_OK || used != 0) c->failed = 1;
}

void bench_chunked(const opts *o, loom_dtype ct, int var, int64_t L, int64_t C, int64_t Nkv, int64_t bs) {
    const int64_t N = HEADS, D = HEAD_DIM, nb = (L + bs - 1) / bs, row = Nkv * D;
    loom_rng rng;
    loom_rng_init(&rng, 7, (uint64_t)(L * 131 + bs));
    float *q = xalloc((size_t)(C * N * D) * 4);
    float *kf = xalloc((size_t)(L * row) * 4), *vf = xalloc((size_t)(L * row) * 4);
    fill(q, C * N * D, LOOM_F32, &rng);
    fill(kf, L * row, ct, &rng);
    fill(vf, L * row, ct, &rng);
    size_t es = esize(ct);
    if (ct == LOOM_I8) /* the engine's i8 cache: integers, one scale a row (per token) */
        for (int64_t i = 0; i < L * row; i++) kf[i] = floorf(127.0f * kf[i]), vf[i] = floorf(127.0f * vf[i]);
    char *k = xalloc((size_t)(L * row) * es), *v = xalloc((size_t)(L * row) * es);
    char *pk = xalloc((size_t)(nb * bs * row) * es), *pv = xalloc((size_t)(nb * bs * row) * es);
    store_as(ct, k, kf, L * row);
    store_as(ct, v, vf, L * row);
    float *ks = xalloc((size_t)(L * Nkv) * 4), *vs = xalloc((size_t)(L * Nkv) * 4);
    float *pks = xalloc((size_t)(nb * bs * Nkv) * 4), *pvs = xalloc((size_t)(nb * bs * Nkv) * 4);
    for (int64_t i = 0; i < L * Nkv; i++) ks[i] = vs[i] = 1.0f / 127.0f;
    int32_t *table = xalloc((size_t)nb * 4);
    for (int64_t i = 0; i < nb; i++) table[i] = (int32_t)i;
    for (int64_t i = nb - 1; i > 0; i--) { /* blocks in shuffled order, as a block allocator leaves them */
        int64_t j = (int64_t)(loom_rng_uniform(&rng) * (float)(i + 1)) % (i + 1);
        int32_t x = table[i];
        table[i] = table[j], table[j] = x;
    }
    for (int64_t s = 0; s < L; s++) { /* position s: slot s % bs of block table[s / bs] */
        int64_t blk = table[s / bs], slot = s % bs;
        memcpy(pk + (size_t)((blk * bs + slot) * row) * es, k + (size_t)(s * row) * es, (size_t)row * es);
        memcpy(pv + (size_t)((blk * bs + slot) * row) * es, v + (size_t)(s * row) * es, (size_t)row * es);
        for (int64_t h = 0; h < Nkv; h++) /* scales [1, N_kv, L] and [nb, N_kv, bs] */
            pks[(blk * Nkv + h) * bs + slot] = ks[h * L + s], pvs[(blk * Nkv + h) * bs + slot] = vs[h * L + s];
    }
    float *out_c = xalloc((size_t)(C * N * D) * 4), *out_p = xalloc((size_t)(C * N * D) * 4);
    loom_tensor tq, tk, tv, tpk, tpv, tks, tvs, tpks, tpvs, tbt, toc, top;
    int64_t qs[4] = {1, C, N, D}, kshape[4] = {1, L, Nkv, D}, pshape[4] = {nb, bs, Nkv, D};
    loom_tensor_init(&tq, LOOM_F32, 4, qs, q);
    loom_tensor_init(&toc, LOOM_F32, 4, qs, out_c);
    loom_tensor_init(&top, LOOM_F32, 4, qs, out_p);
    loom_tensor_init(&tk, ct, 4, kshape, k);
    loom_tensor_init(&tv, ct, 4, kshape, v);
    loom_tensor_init(&tpk, ct, 4, pshape, pk);
    loom_tensor_init(&tpv, ct, 4, pshape, pv);
    loom_tensor_init(&tks, LOOM_F32, 3, (const int64_t[3]){1, Nkv, L}, ks);
    loom_tensor_init(&tvs, LOOM_F32, 3, (const int64_t[3]){1, Nkv, L}, vs);
    loom_tensor_init(&tpks, LOOM_F32, 3, (const int64_t[3]){nb, Nkv, bs}, pks);
    loom_tensor_init(&tpvs, LOOM_F32, 3, (const int64_t[3]){nb, Nkv, bs}, pvs);
    loom_tensor_init(&tbt, LOOM_I32, 2, (const int64_t[2]){1, nb}, table);
    int q8 = ct == LOOM_I8;
    int64_t len[1] = {L};
    ck_ctx cc = {0}, cp = {0};
    cc.p = loom_fused_infer_attention_default_params();
    cc.p.sparse_mode = LOOM_SPARSE_RIGHT_DOWN_CAUSAL, cc.p.actual_seq_lengths_kv = len;
    cc.p.inner_precise = var == CV_HP ? LOOM_ATTN_HIGH_PERFORMANCE : LOOM_ATTN_HIGH_PRECISION;
    cc.p.key_antiquant_mode = cc.p.value_antiquant_mode = LOOM_ANTIQUANT_PER_TOKEN;
    cp.p = cc.p;
    cc.t = (loom_fused_infer_attention_tensors){.query = &tq, .key = &tk, .value = &tv, .attention_out = &toc,
                                               .key_antiquant_scale = q8 ? &tks : NULL,
                                               .value_antiquant_scale = q8 ? &tvs : NULL};
    cp.t = (loom_fused_infer_attention_tensors){.query = &tq, .key = &tpk, .value = &tpv, .attention_out = &top,
                                               .block_table = &tbt, .key_antiquant_scale = q8 ? &tpks : NULL,
                                               .value_antiquant_scale = q8 ? &tpvs : NULL};
    double pairs = (double)C * (double)(L - C) + (double)C * (double)(C + 1) / 2.0;
    double flops = 4.0 * (double)N * (double)D * pairs;
    for (int ti = 0; ti < o->n_threads; ti++) {
        int nt = o->threads[ti];
        loom_pool *pool = NULL;
        if (loom_pool_init(&pool, nt) != LOOM_OK) exit(1);
        cc.pool = cp.pool = pool;
        double tc[64], tp[64];
        int reps = o->reps < 64 ? o->reps : 64;
        run_chunk(&cc), run_chunk(&cp); /* warm-up */
        for (int r = 0; r < reps; r++) { /* alternating: the host's drift hits both alike */
            tc[r] = time_it(run_chunk, &cc, nt, 0, 1);
            tp[r] = time_it(run_chunk, &cp, nt, 0, 1);
        }
        if (cc.failed || cp.failed) {
            fprintf(stderr, "bench_attention: chunked prefill failed: %s\n", loom_last_error());
            exit(1);
        }
        if (memcmp(out_c, out_p, (size_t)(C * N * D) * 4) != 0) {
            fprintf(stderr, "bench_attention: the paged cache gave other bytes than the contiguous one\n");
            exit(1);
        }
        double mc = bench_median(tc, reps), mp = bench_median(tp, reps);
        printf("| %s | %lld | %lld | %lld/%lld | %lld | %d | %.2f | %.0f | %.2f | %.0f | %.3f |\n",
               cache_name(ct, var), (long long)L, (long long)C, (long long)N, (long long)Nkv, (long long)bs, nt,
               mc * 1e3, flops / mc / 1e9, mp * 1e3, flops / mp / 1e9, mp / mc);
        fflush(stdout);
        loom_pool_free(pool);
    }
    void *bufs[] = {q, kf, vf, k, v, pk, pv, ks, vs, pks, pvs, table, out_c, out_p};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) loom_free_aligned(bufs[i]);
}
