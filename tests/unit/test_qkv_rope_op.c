/* The qkv_rope graph op (what the fusion engine puts in place of three
 * matmuls, two ropes and two kv_appends) against that decomposition run with
 * the primitive kernels of the same level: bit-identical Q and cache rows, at
 * every level, for both RoPE pairings, partial rotation (n_rot < D), GQA,
 * decode (T < 8: GEMV, one head per item) and prefill (T >= 8), f32 and q8_0
 * weights (x quantized once per kernel), q8_0, q4_0 and q4_1 weights with
 * full activations (the matmuls' attribute; f32 x), 1 and 3 threads, explicit and
 * automatic heads per item, f32, f16, bf16 and i8 caches (K and V rounded or
 * quantized into the cache as kv_append does, i8 with the same scales), q
 * in f32 or rounded once to f16 or bf16 (attrs.q_dtype); rows
 * of the caches (and scale stores) outside [pos, pos + T) stay untouched.
 * The paged form (positions and slots per row, as rope_at and kv_write) the
 * same way, and its errors. */
#include <string.h>

#include "check.h"
#include "graph/ops_init.h"
#include "base/alloc.h"
#include "base/cpu.h"
#include "base/rng.h"
#include "ops/ops.h"
#include "ops/quant.h"
#include "test_graph_op_common.h"

typedef struct qcase {
    int64_t T, hid, H, HKV, D, n_rot, S_max;
    int pos, mode, block_heads, nth;
    loom_dtype wt;
    loom_act_precision act;   /* of the three matmuls and the fused op */
    int norm;                 /* 1: the decomposition starts with rms_norm(x, gamma); the op takes it (attrs.norm) */
} qcase;

/* The norm of a case: gamma [hid] drawn from r, xn = rms_norm(x, gamma) by the
 * primitive kernel of level isa (what the decomposition's matmuls read). */
static float *norm_input(const qcase *c, loom_isa isa, loom_rng *r, const loom_tensor *tx, loom_tensor *tg,
                         loom_tensor *txn, float **xn) {
    float *g = malloc(sizeof(float) * (size_t)c->hid);
    for (int64_t i = 0; i < c->hid; i++) g[i] = 0.5f + loom_rng_uniform(r);
    loom_tensor_init(tg, LOOM_F32, 1, (const int64_t[1]){c->hid}, g);
    *xn = malloc(sizeof(float) * (size_t)(c->T * c->hid));
    loom_tensor_init(txn, LOOM_F32, 2, (const int64_t[2]){c->T, c->hid}, *xn);
    const loom_rms_norm_attrs na = {1e-5f};
    const loom_tensor *s[2] = {tx, tg};
    CHECK(run_op(LOOM_OP_RMS_NORM, isa, s, 2, &na, txn, c->nth) == LOOM_OK);
    return g;
}


/* The expected 16-bit q (qt f16 or bf16): the decomposition's f32 q, n values, rounded once in place
 * (nothing for f32). */
static void round_q(float *q, int64_t n, loom_dtype qt) {
    uint16_t *q16 = (uint16_t *)(void *)q;
    for (int64_t j = 0; qt != LOOM_F32 && j < n; j++) q16[j] = qt == LOOM_F16 ? loom_f32_to_f16(q[j]) : loom_f32_to_bf16(q[j]);
}

/* qt: q's dtype (attrs.q_dtype); a 16-bit q must be the decomposition's f32 q rounded. */
static void check_case(const qcase *c, loom_isa isa, loom_dtype ct, loom_dtype qt, uint64_t seed) {
    loom_rng r;
    loom_rng_init(&r, seed, 3);
    int64_t T = c->T, H = c->H, HKV = c->HKV, D = c->D;
    float *x = malloc(sizeof(float) * (size_t)(T * c->hid));
    for (int64_t i = 0; i < T * c->hid; i++) x[i] = rnd(&r);
    loom_tensor tx, tw[3];
    loom_tensor_init(&tx, LOOM_F32, 2, (const int64_t[2]){T, c->hid}, x);
    void *w[3] = {make_w(c->wt, H * D, c->hid, &r, 1.0f, &tw[0]), make_w(c->wt, HKV * D, c->hid, &r, 1.0f, &tw[1]),
                  make_w(c->wt, HKV * D, c->hid, &r, 1.0f, &tw[2])};
    size_t cache_n = (size_t)(c->S_max * HKV * D), cache_bytes = cache_n * loom_dtype_size(ct);
    unsigned char *kc[2], *vc[2];
    float *q[2], *ks[2], *vs[2]; /* i8 caches: their scale stores [S_max, HKV] */
    size_t scale_n = (size_t)(c->S_max * HKV);
    for (int i = 0; i < 2; i++) {
        kc[i] = malloc(cache_bytes), vc[i] = malloc(cache_bytes);
        q[i] = malloc(sizeof(float) * (size_t)(T * H * D));
        ks[i] = malloc(sizeof(float) * scale_n), vs[i] = malloc(sizeof(float) * scale_n);
        for (size_t j = 0; j < cache_bytes; j++) kc[i][j] = vc[i][j] = (unsigned char)(j * 29 + 7); /* old rows */
        for (size_t j = 0; j < scale_n; j++) ks[i][j] = vs[i][j] = (float)j;
        for (int64_t j = 0; j < T * H * D; j++) q[i][j] = NAN;
    }
    int q8 = ct == LOOM_I8, nsrc = q8 ? 6 : 4;
    loom_rope_attrs rope = {.mode = c->mode, .n_rot = (int)c->n_rot, .theta = 10000.0f,
                            .freq_scale = 1.0f, .pos_offset = c->pos};
    loom_tensor tg, txn;
    float *xn = NULL, *gamma = c->norm ? norm_input(c, isa, &r, &tx, &tg, &txn, &xn) : NULL;
    /* decomposition: matmul x3, rope q and k, kv_append k and v */
    {
        float *yq = malloc(sizeof(float) * (size_t)(T * H * D)), *yk = malloc(sizeof(float) * (size_t)(T * HKV * D)),
              *yv = malloc(sizeof(float) * (size_t)(T * HKV * D));
        loom_tensor mq, mk, mv;
        loom_tensor_init(&mq, LOOM_F32, 2, (const int64_t[2]){T, H * D}, yq);
        loom_tensor_init(&mk, LOOM_F32, 2, (const int64_t[2]){T, HKV * D}, yk);
        loom_tensor_init(&mv, LOOM_F32, 2, (const int64_t[2]){T, HKV * D}, yv);
        loom_tensor *outs[3] = {&mq, &mk, &mv};
        const loom_matmul_attrs ma = {.act_precision = c->act};
        for (int i = 0; i < 3; i++) {
            const loom_tensor *s[2] = {c->norm ? &txn : &tx, &tw[i]};
            CHECK(run_op(LOOM_OP_MATMUL, isa, s, 2, &ma, outs[i], c->nth) == LOOM_OK);
        }
        loom_tensor rq, rk, rqo, cK, cV, sk, sv;
        loom_tensor_init(&rq, LOOM_F32, 3, (const int64_t[3]){T, H, D}, yq);
        loom_tensor_init(&rqo, LOOM_F32, 3, (const int64_t[3]){T, H, D}, q[0]);
        loom_tensor_init(&rk, LOOM_F32, 3, (const int64_t[3]){T, HKV, D}, yk);
        const loom_tensor *s1[1] = {&rq};
        CHECK(run_op(LOOM_OP_ROPE, isa, s1, 1, &rope, &rqo, c->nth) == LOOM_OK);
        const loom_tensor *s2[1] = {&rk};
        CHECK(run_op(LOOM_OP_ROPE, isa, s2, 1, &rope, &rk, c->nth) == LOOM_OK);
        loom_tensor_init(&cK, ct, 3, (const int64_t[3]){c->pos + T, HKV, D}, kc[0]);
        loom_tensor_init(&cV, ct, 3, (const int64_t[3]){c->pos + T, HKV, D}, vc[0]);
        loom_tensor_init(&sk, LOOM_F32, 3, (const int64_t[3]){T, HKV, D}, yk);
        loom_tensor_init(&sv, LOOM_F32, 3, (const int64_t[3]){T, HKV, D}, yv);
        loom_kv_append_attrs ka = {c->pos};
        loom_tensor tks, tvs;
        loom_tensor_init(&tks, LOOM_F32, 2, (const int64_t[2]){c->S_max, HKV}, ks[0]);
        loom_tensor_init(&tvs, LOOM_F32, 2, (const int64_t[2]){c->S_max, HKV}, vs[0]);
        const loom_tensor *s3[3] = {&cK, &sk, &tks}, *s4[3] = {&cV, &sv, &tvs};
        CHECK(run_op(LOOM_OP_KV_APPEND, isa, s3, q8 ? 3 : 2, &ka, &cK, c->nth) == LOOM_OK);
        CHECK(run_op(LOOM_OP_KV_APPEND, isa, s4, q8 ? 3 : 2, &ka, &cV, c->nth) == LOOM_OK);
        free(yq), free(yk), free(yv);
    }
    /* the fused op */
    loom_qkv_rope_attrs at = {.rope = rope, .n_heads = (int)H, .n_kv_heads = (int)HKV, .head_dim = (int)D,
                              .block_heads = c->block_heads, .cache_dtype = ct, .act_precision = c->act,
                              .norm = c->norm, .norm_eps = 1e-5f, .q_dtype = qt};
    loom_tensor to, cK, cV;
    loom_tensor_init(&to, qt, 3, (const int64_t[3]){T, H, D}, q[1]);
    loom_tensor_init(&cK, ct, 3, (const int64_t[3]){c->pos + T, HKV, D}, kc[1]);
    loom_tensor_init(&cV, ct, 3, (const int64_t[3]){c->pos + T, HKV, D}, vc[1]);
    loom_tensor tks, tvs;
    loom_tensor_init(&tks, LOOM_F32, 2, (const int64_t[2]){c->S_max, HKV}, ks[1]);
    loom_tensor_init(&tvs, LOOM_F32, 2, (const int64_t[2]){c->S_max, HKV}, vs[1]);
    loom_kernel_args a = {.src = {&tx, &tw[0], &tw[1], &tw[2], &tks, &tvs}, .n_src = nsrc, .dst = &to,
                          .attrs = &at, .dst_extra = {&cK, &cV}, .n_dst_extra = 2};
    if (c->norm) a.src[a.n_src++] = &tg, nsrc++;
    loom_tensor inferred;
    memset(&inferred, 0, sizeof inferred);
    CHECK_MSG(loom_op_get(LOOM_OP_QKV_ROPE)->infer(a.src, nsrc, &at, &inferred) == LOOM_OK, "%s", loom_last_error());
    loom_status st = run_threads(LOOM_OP_QKV_ROPE, loom_op_kernel(LOOM_OP_QKV_ROPE, isa), a, c->nth);
    CHECK_MSG(st == LOOM_OK, "%s", loom_last_error());
    CHECK(inferred.dtype == qt);
    round_q(q[0], T * H * D, qt);
    int same = memcmp(q[0], q[1], loom_dtype_size(qt) * (size_t)(T * H * D)) == 0 &&
               memcmp(kc[0], kc[1], cache_bytes) == 0 && memcmp(vc[0], vc[1], cache_bytes) == 0 &&
               memcmp(ks[0], ks[1], sizeof(float) * scale_n) == 0 && memcmp(vs[0], vs[1], sizeof(float) * scale_n) == 0;
    CHECK_MSG(same, "%s: T=%lld H=%lld/%lld D=%lld n_rot=%lld mode=%d %s act %s block_heads=%d nth=%d cache %s "
              "norm %d q %s: fused qkv_rope differs from [rms_norm+]matmul+rope+kv_append", loom_isa_name(isa),
              (long long)T, (long long)H, (long long)HKV, (long long)D, (long long)c->n_rot, c->mode,
              loom_dtype_name(c->wt), loom_act_precision_name(c->act), c->block_heads, c->nth, loom_dtype_name(ct),
              c->norm, loom_dtype_name(qt));
    free(gamma), free(xn);
    for (int i = 0; i < 2; i++) free(kc[i]), free(vc[i]), free(q[i]), free(ks[i]), free(vs[i]);
    for (int i = 0; i < 3; i++) free(w[i]);
    free(x);
}

static void test_against_decomposition(void) {
    const qcase cases[] = {
        /* T, hid, H, HKV, D, n_rot, S_max, pos, mode, block_heads, nth, wt, act */
        {1, 64, 4, 2, 16, 16, 8, 5, LOOM_ROPE_HALF, 0, 1, LOOM_F32, LOOM_ACT_PREC_Q8, 0},
        {3, 96, 6, 3, 32, 16, 16, 2, LOOM_ROPE_INTERLEAVED, 0, 3, LOOM_F32, LOOM_ACT_PREC_Q8, 0},
        {19, 64, 4, 4, 16, 16, 40, 7, LOOM_ROPE_HALF, 0, 3, LOOM_F32, LOOM_ACT_PREC_Q8, 0},
        {37, 96, 9, 3, 32, 32, 64, 0, LOOM_ROPE_HALF, 0, 1, LOOM_F32, LOOM_ACT_PREC_Q8, 0},
        {37, 96, 9, 3, 32, 20, 64, 11, LOOM_ROPE_INTERLEAVED, 2, 3, LOOM_F32, LOOM_ACT_PREC_Q8, 0},
        {12, 128, 8, 2, 64, 64, 20, 4, LOOM_ROPE_HALF, 0, 3, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 0},
        {2, 128, 8, 2, 64, 64, 20, 4, LOOM_ROPE_INTERLEAVED, 0, 3, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 0},
        {12, 128, 8, 2, 64, 64, 20, 4, LOOM_ROPE_HALF, 0, 3, LOOM_Q8_0, LOOM_ACT_PREC_FULL, 0},
        {1, 96, 6, 3, 32, 32, 16, 2, LOOM_ROPE_HALF, 0, 3, LOOM_Q4_1, LOOM_ACT_PREC_FULL, 0},
        {19, 96, 6, 3, 32, 16, 40, 7, LOOM_ROPE_INTERLEAVED, 2, 3, LOOM_Q4_1, LOOM_ACT_PREC_FULL, 0},
        {3, 64, 4, 2, 16, 16, 8, 5, LOOM_ROPE_HALF, 0, 1, LOOM_Q4_0, LOOM_ACT_PREC_FULL, 0},
        {9, 64, 4, 2, 16, 16, 16, 0, LOOM_ROPE_HALF, 0, 3, LOOM_Q4_0, LOOM_ACT_PREC_FULL, 0},
        /* the norm on the fly: GEMV (staged rows), GEMM (staged micro-panels, K not a multiple of
         * any block), x quantized with it (q8 products), full activations, 16-bit weights */
        {1, 72, 4, 2, 16, 16, 8, 5, LOOM_ROPE_HALF, 0, 1, LOOM_F32, LOOM_ACT_PREC_Q8, 1},
        {3, 100, 6, 3, 32, 16, 16, 2, LOOM_ROPE_INTERLEAVED, 0, 3, LOOM_F32, LOOM_ACT_PREC_Q8, 1},
        {37, 100, 9, 3, 32, 20, 64, 11, LOOM_ROPE_INTERLEAVED, 2, 3, LOOM_F32, LOOM_ACT_PREC_Q8, 1},
        {29, 1100, 4, 2, 16, 16, 40, 3, LOOM_ROPE_HALF, 0, 2, LOOM_F32, LOOM_ACT_PREC_Q8, 1},
        {21, 90, 6, 3, 32, 32, 32, 1, LOOM_ROPE_HALF, 0, 3, LOOM_F16, LOOM_ACT_PREC_Q8, 1},
        {21, 90, 6, 3, 32, 32, 32, 1, LOOM_ROPE_HALF, 0, 2, LOOM_BF16, LOOM_ACT_PREC_Q8, 1},
        {12, 128, 8, 2, 64, 64, 20, 4, LOOM_ROPE_HALF, 0, 3, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 1},
        {2, 128, 8, 2, 64, 64, 20, 4, LOOM_ROPE_INTERLEAVED, 0, 3, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 1},
        {13, 1088, 4, 2, 16, 16, 20, 4, LOOM_ROPE_HALF, 0, 2, LOOM_Q4_0, LOOM_ACT_PREC_Q8, 1},
        {12, 128, 8, 2, 64, 64, 20, 4, LOOM_ROPE_HALF, 0, 3, LOOM_Q8_0, LOOM_ACT_PREC_FULL, 1},
        {1, 96, 6, 3, 32, 32, 16, 2, LOOM_ROPE_HALF, 0, 3, LOOM_Q4_1, LOOM_ACT_PREC_FULL, 1},
    };
    const loom_dtype cts[] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I8};
    for (int isa = LOOM_ISA_REF; isa <= (int)loom_cpu_best_isa(); isa++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            for (size_t t = 0; t < sizeof cts / sizeof cts[0]; t++) {
                check_case(&cases[i], (loom_isa)isa, cts[t], LOOM_F32, 100 + i);
                /* a 16-bit q (the rules' activation_dtype), with every cache dtype */
                check_case(&cases[i], (loom_isa)isa, cts[t], (i + t) % 2 ? LOOM_F16 : LOOM_BF16, 200 + i);
            }
}

/* Paged (the engine's form): random positions per row, random distinct slots
 * (some -1: not written) of a store [n_slots, HKV, D]; the decomposition is
 * matmul x3, rope at the positions, kv_write to the slots. Bit-identical Q,
 * stores and scale stores. */
static void check_paged(const qcase *c, loom_isa isa, loom_dtype ct, loom_dtype qt, uint64_t seed) {
    loom_rng r;
    loom_rng_init(&r, seed, 5);
    int64_t T = c->T, H = c->H, HKV = c->HKV, D = c->D, NS = c->S_max;
    float *x = malloc(sizeof(float) * (size_t)(T * c->hid));
    for (int64_t i = 0; i < T * c->hid; i++) x[i] = rnd(&r);
    loom_tensor tx, tw[3], tpos, tslot;
    loom_tensor_init(&tx, LOOM_F32, 2, (const int64_t[2]){T, c->hid}, x);
    void *w[3] = {make_w(c->wt, H * D, c->hid, &r, 1.0f, &tw[0]), make_w(c->wt, HKV * D, c->hid, &r, 1.0f, &tw[1]),
                  make_w(c->wt, HKV * D, c->hid, &r, 1.0f, &tw[2])};
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T), *slot = malloc(sizeof(int32_t) * (size_t)T);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)NS);
    for (int64_t i = 0; i < NS; i++) perm[i] = (int32_t)i;
    for (int64_t i = NS - 1; i > 0; i--) {
        int64_t j = (int64_t)(loom_rng_u32(&r) % (uint32_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int64_t t = 0; t < T; t++) {
        pos[t] = (int32_t)(loom_rng_u32(&r) % 5000);
        slot[t] = loom_rng_u32(&r) % 5 == 0 ? -1 : perm[t];
    }
    loom_tensor_init(&tpos, LOOM_I32, 1, (const int64_t[1]){T}, pos);
    loom_tensor_init(&tslot, LOOM_I32, 1, (const int64_t[1]){T}, slot);
    size_t cache_bytes = (size_t)(NS * HKV * D) * loom_dtype_size(ct), scale_n = (size_t)(NS * HKV);
    unsigned char *kc[2], *vc[2];
    float *q[2], *ks[2], *vs[2];
    for (int i = 0; i < 2; i++) {
        kc[i] = malloc(cache_bytes), vc[i] = malloc(cache_bytes);
        q[i] = malloc(sizeof(float) * (size_t)(T * H * D));
        ks[i] = malloc(sizeof(float) * scale_n), vs[i] = malloc(sizeof(float) * scale_n);
        for (size_t j = 0; j < cache_bytes; j++) kc[i][j] = vc[i][j] = (unsigned char)(j * 29 + 7);
        for (size_t j = 0; j < scale_n; j++) ks[i][j] = vs[i][j] = (float)j;
        for (int64_t j = 0; j < T * H * D; j++) q[i][j] = NAN;
    }
    int q8 = ct == LOOM_I8;
    loom_rope_attrs rope = {.mode = c->mode, .n_rot = (int)c->n_rot, .theta = 10000.0f, .freq_scale = 1.0f};
    loom_tensor tg, txn;
    float *xn = NULL, *gamma = c->norm ? norm_input(c, isa, &r, &tx, &tg, &txn, &xn) : NULL;
    loom_tensor cK[2], cV[2], tks[2], tvs[2];
    for (int i = 0; i < 2; i++) {
        loom_tensor_init(&cK[i], ct, 3, (const int64_t[3]){NS, HKV, D}, kc[i]);
        loom_tensor_init(&cV[i], ct, 3, (const int64_t[3]){NS, HKV, D}, vc[i]);
        loom_tensor_init(&tks[i], LOOM_F32, 2, (const int64_t[2]){NS, HKV}, ks[i]);
        loom_tensor_init(&tvs[i], LOOM_F32, 2, (const int64_t[2]){NS, HKV}, vs[i]);
    }
    {
        float *yq = malloc(sizeof(float) * (size_t)(T * H * D)), *yk = malloc(sizeof(float) * (size_t)(T * HKV * D)),
              *yv = malloc(sizeof(float) * (size_t)(T * HKV * D));
        loom_tensor mq, mk, mv;
        loom_tensor_init(&mq, LOOM_F32, 2, (const int64_t[2]){T, H * D}, yq);
        loom_tensor_init(&mk, LOOM_F32, 2, (const int64_t[2]){T, HKV * D}, yk);
        loom_tensor_init(&mv, LOOM_F32, 2, (const int64_t[2]){T, HKV * D}, yv);
        loom_tensor *outs[3] = {&mq, &mk, &mv};
        const loom_matmul_attrs ma = {.act_precision = c->act};
        for (int i = 0; i < 3; i++) {
            const loom_tensor *s[2] = {c->norm ? &txn : &tx, &tw[i]};
            CHECK(run_op(LOOM_OP_MATMUL, isa, s, 2, &ma, outs[i], c->nth) == LOOM_OK);
        }
        loom_tensor rq, rk, rqo, rv;
        loom_tensor_init(&rq, LOOM_F32, 3, (const int64_t[3]){T, H, D}, yq);
        loom_tensor_init(&rqo, LOOM_F32, 3, (const int64_t[3]){T, H, D}, q[0]);
        loom_tensor_init(&rk, LOOM_F32, 3, (const int64_t[3]){T, HKV, D}, yk);
        loom_tensor_init(&rv, LOOM_F32, 3, (const int64_t[3]){T, HKV, D}, yv);
        const loom_tensor *s1[2] = {&rq, &tpos}, *s2[2] = {&rk, &tpos};
        CHECK(run_op(LOOM_OP_ROPE, isa, s1, 2, &rope, &rqo, c->nth) == LOOM_OK);
        CHECK(run_op(LOOM_OP_ROPE, isa, s2, 2, &rope, &rk, c->nth) == LOOM_OK);
        const loom_tensor *s3[4] = {&cK[0], &rk, &tslot, &tks[0]}, *s4[4] = {&cV[0], &rv, &tslot, &tvs[0]};
        CHECK(run_op(LOOM_OP_KV_WRITE, isa, s3, q8 ? 4 : 3, NULL, &cK[0], c->nth) == LOOM_OK);
        CHECK(run_op(LOOM_OP_KV_WRITE, isa, s4, q8 ? 4 : 3, NULL, &cV[0], c->nth) == LOOM_OK);
        free(yq), free(yk), free(yv);
    }
    loom_qkv_rope_attrs at = {.rope = rope, .n_heads = (int)H, .n_kv_heads = (int)HKV, .head_dim = (int)D,
                              .block_heads = c->block_heads, .cache_dtype = ct, .act_precision = c->act, .paged = 1,
                              .norm = c->norm, .norm_eps = 1e-5f, .q_dtype = qt};
    loom_tensor to;
    loom_tensor_init(&to, qt, 3, (const int64_t[3]){T, H, D}, q[1]);
    int nsrc = q8 ? 8 : 6;
    loom_kernel_args a = {.src = {&tx, &tw[0], &tw[1], &tw[2], &tpos, &tslot, &tks[1], &tvs[1]}, .n_src = nsrc,
                          .dst = &to, .attrs = &at, .dst_extra = {&cK[1], &cV[1]}, .n_dst_extra = 2};
    if (c->norm) a.src[a.n_src++] = &tg, nsrc++;
    loom_tensor inferred;
    memset(&inferred, 0, sizeof inferred);
    CHECK_MSG(loom_op_get(LOOM_OP_QKV_ROPE)->infer(a.src, nsrc, &at, &inferred) == LOOM_OK, "%s", loom_last_error());
    loom_status st = run_threads(LOOM_OP_QKV_ROPE, loom_op_kernel(LOOM_OP_QKV_ROPE, isa), a, c->nth);
    CHECK_MSG(st == LOOM_OK, "%s", loom_last_error());
    CHECK(inferred.dtype == qt);
    round_q(q[0], T * H * D, qt);
    int same = memcmp(q[0], q[1], loom_dtype_size(qt) * (size_t)(T * H * D)) == 0 &&
               memcmp(kc[0], kc[1], cache_bytes) == 0 && memcmp(vc[0], vc[1], cache_bytes) == 0 &&
               memcmp(ks[0], ks[1], sizeof(float) * scale_n) == 0 && memcmp(vs[0], vs[1], sizeof(float) * scale_n) == 0;
    CHECK_MSG(same, "paged %s: T=%lld H=%lld/%lld D=%lld n_rot=%lld mode=%d %s block_heads=%d nth=%d cache %s: "
              "fused qkv_rope differs from matmul+rope+kv_write", loom_isa_name(isa), (long long)T, (long long)H,
              (long long)HKV, (long long)D, (long long)c->n_rot, c->mode, loom_dtype_name(c->wt), c->block_heads,
              c->nth, loom_dtype_name(ct));
    /* a slot beyond the store, a negative position: errors naming the row */
    if (T > 1) {
        int32_t keep = slot[T - 1];
        slot[T - 1] = (int32_t)NS;
        CHECK(run_threads(LOOM_OP_QKV_ROPE, loom_op_kernel(LOOM_OP_QKV_ROPE, isa), a, c->nth) == LOOM_ERR_INVALID_ARG);
        CHECK(strstr(loom_last_error(), "slot") != NULL);
        slot[T - 1] = keep, pos[0] = -3;
        CHECK(run_threads(LOOM_OP_QKV_ROPE, loom_op_kernel(LOOM_OP_QKV_ROPE, isa), a, c->nth) == LOOM_ERR_INVALID_ARG);
        CHECK(strstr(loom_last_error(), "position -3") != NULL);
    }
    for (int i = 0; i < 2; i++) free(kc[i]), free(vc[i]), free(q[i]), free(ks[i]), free(vs[i]);
    for (int i = 0; i < 3; i++) free(w[i]);
    free(x), free(pos), free(slot), free(perm), free(gamma), free(xn);
}

static void test_paged(void) {
    const qcase cases[] = {
        /* T, hid, H, HKV, D, n_rot, n_slots, -, mode, block_heads, nth, wt, act */
        {1, 64, 4, 2, 16, 16, 8, 0, LOOM_ROPE_HALF, 0, 1, LOOM_F32, LOOM_ACT_PREC_Q8, 0},
        {5, 96, 6, 3, 32, 16, 24, 0, LOOM_ROPE_INTERLEAVED, 0, 3, LOOM_F32, LOOM_ACT_PREC_Q8, 0},
        {23, 64, 4, 4, 16, 16, 40, 0, LOOM_ROPE_HALF, 0, 3, LOOM_F32, LOOM_ACT_PREC_Q8, 0},
        {37, 96, 9, 3, 32, 20, 64, 0, LOOM_ROPE_INTERLEAVED, 2, 3, LOOM_F32, LOOM_ACT_PREC_Q8, 0},
        {12, 128, 8, 2, 64, 64, 20, 0, LOOM_ROPE_HALF, 0, 3, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 0},
        {3, 128, 8, 2, 64, 64, 20, 0, LOOM_ROPE_INTERLEAVED, 0, 2, LOOM_Q4_1, LOOM_ACT_PREC_Q8, 0},
        {19, 96, 6, 3, 32, 16, 40, 0, LOOM_ROPE_HALF, 2, 3, LOOM_Q4_1, LOOM_ACT_PREC_FULL, 0},
        {1, 72, 4, 2, 16, 16, 8, 0, LOOM_ROPE_HALF, 0, 1, LOOM_F32, LOOM_ACT_PREC_Q8, 1},
        {23, 100, 4, 4, 16, 16, 40, 0, LOOM_ROPE_HALF, 0, 3, LOOM_F32, LOOM_ACT_PREC_Q8, 1},
        {12, 128, 8, 2, 64, 64, 20, 0, LOOM_ROPE_HALF, 0, 3, LOOM_Q8_0, LOOM_ACT_PREC_Q8, 1},
        {3, 128, 8, 2, 64, 64, 20, 0, LOOM_ROPE_INTERLEAVED, 0, 2, LOOM_Q4_1, LOOM_ACT_PREC_Q8, 1},
    };
    const loom_dtype cts[] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I8};
    for (int isa = LOOM_ISA_REF; isa <= (int)loom_cpu_best_isa(); isa++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            for (size_t t = 0; t < sizeof cts / sizeof cts[0]; t++)
                check_paged(&cases[i], (loom_isa)isa, cts[t], t == 0 ? LOOM_F32 : (i + t) % 2 ? LOOM_F16 : LOOM_BF16,
                            700 + i);
}

/* A cache of another dtype than the attributes name is an error naming it. */
static void test_cache_dtype_mismatch(void) {
    const int64_t T = 2, hid = 16, H = 2, HKV = 1, D = 8;
    float x[T * hid], wq[H * D * hid], wk[HKV * D * hid], wv[HKV * D * hid], q[T * H * D];
    uint16_t kc[4 * HKV * D], vc[4 * HKV * D];
    memset(x, 0, sizeof x), memset(wq, 0, sizeof wq), memset(wk, 0, sizeof wk), memset(wv, 0, sizeof wv);
    loom_tensor tx, t0, t1, t2, to, cK, cV;
    loom_tensor_init(&tx, LOOM_F32, 2, (const int64_t[2]){T, hid}, x);
    loom_tensor_init(&t0, LOOM_F32, 2, (const int64_t[2]){H * D, hid}, wq);
    loom_tensor_init(&t1, LOOM_F32, 2, (const int64_t[2]){HKV * D, hid}, wk);
    loom_tensor_init(&t2, LOOM_F32, 2, (const int64_t[2]){HKV * D, hid}, wv);
    loom_tensor_init(&to, LOOM_F32, 3, (const int64_t[3]){T, H, D}, q);
    loom_tensor_init(&cK, LOOM_BF16, 3, (const int64_t[3]){T, HKV, D}, kc);
    loom_tensor_init(&cV, LOOM_BF16, 3, (const int64_t[3]){T, HKV, D}, vc);
    loom_qkv_rope_attrs at = {.rope = {.mode = LOOM_ROPE_HALF, .theta = 10000.0f, .freq_scale = 1.0f},
                              .n_heads = (int)H, .n_kv_heads = (int)HKV, .head_dim = (int)D,
                              .cache_dtype = LOOM_F16};
    loom_kernel_args a = {.src = {&tx, &t0, &t1, &t2}, .n_src = 4, .dst = &to, .attrs = &at,
                          .dst_extra = {&cK, &cV}, .n_dst_extra = 2};
    CHECK(run_threads(LOOM_OP_QKV_ROPE, loom_op_kernel(LOOM_OP_QKV_ROPE, loom_cpu_isa()), a, 1) == LOOM_ERR_SHAPE);
    CHECK(strstr(loom_last_error(), "contiguous f16") != NULL);
    /* i8 caches take two scale stores [>= pos + T, HKV], other caches none */
    const loom_op_info *info = loom_op_get(LOOM_OP_QKV_ROPE);
    loom_tensor inferred, st, bad;
    float sc[4 * HKV];
    loom_tensor_init(&st, LOOM_F32, 2, (const int64_t[2]){4, HKV}, sc);
    loom_tensor_init(&bad, LOOM_F32, 2, (const int64_t[2]){1, HKV}, sc);
    const loom_tensor *s6[6] = {&tx, &t0, &t1, &t2, &st, &st}, *sb[6] = {&tx, &t0, &t1, &t2, &st, &bad};
    at.cache_dtype = LOOM_I8;
    CHECK(info->infer(s6, 6, &at, &inferred) == LOOM_OK);
    CHECK(info->infer(s6, 4, &at, &inferred) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "scale stores") != NULL);
    CHECK(info->infer(sb, 6, &at, &inferred) == LOOM_ERR_SHAPE);
    CHECK(strstr(loom_last_error(), "input 5 (scale store)") != NULL);
    at.cache_dtype = LOOM_F16;
    CHECK(info->infer(s6, 6, &at, &inferred) == LOOM_ERR_INVALID_ARG);
    /* q: f32, f16 or bf16, and the kernel's q of that dtype, contiguous */
    at.q_dtype = LOOM_I8;
    CHECK(info->infer(s6, 4, &at, &inferred) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "q_dtype") != NULL);
    at.q_dtype = LOOM_F16;
    CHECK(info->infer(s6, 4, &at, &inferred) == LOOM_OK && inferred.dtype == LOOM_F16);
    loom_tensor_init(&cK, LOOM_F16, 3, (const int64_t[3]){T, HKV, D}, kc);
    loom_tensor_init(&cV, LOOM_F16, 3, (const int64_t[3]){T, HKV, D}, vc);
    CHECK(run_threads(LOOM_OP_QKV_ROPE, loom_op_kernel(LOOM_OP_QKV_ROPE, loom_cpu_isa()), a, 1) == LOOM_ERR_SHAPE);
    CHECK(strstr(loom_last_error(), "q must be contiguous f16") != NULL);
}

int main(void) {
    loom_ops_init(); /* the fused layer's ops in the op table */
    RUN_TEST(test_against_decomposition);
    RUN_TEST(test_paged);
    RUN_TEST(test_cache_dtype_mismatch);
    return TEST_SUMMARY();
}
