/* loom_flash_attention_score against its reference decomposition: randomised
 * shapes, layouts, sparse modes, masks, dtypes, GQA, varlen, block sizes and
 * thread counts; the reference against the primitive attention op; layouts
 * against each other. Edge cases: test_flash_attention_edges.c. */
#include "test_flash_attention_case.h"
#include "graph/ops_init.h"

#include "ops/ops.h"
#include "ops/ref/ref.h"
#include "base/variants.h"

static void test_random_cases(void) {
    loom_rng r;
    loom_rng_init(&r, 2024, 1);
    for (int i = 0; i < 150; i++) {
        fa_case c = random_case(&r);
        fa_check_case(&c, &r, i % 5 == 0);
    }
}

/* inner_precise 1 (f32/f16 inputs with bf16 products where the CPU has
 * AVX512_BF16). With q, k, v holding bf16-exact values the path is the bf16
 * kernel's (only P is rounded): bf16's tolerance over random cases (masks,
 * layouts, GQA, varlen, dropout, odd D, which keeps f32 products for Q.K^T).
 * With arbitrary values (rounded by the kernel) twice that. Where the CPU has
 * the instructions it must really take effect (the result differs from
 * inner_precise 0), and values other than 0/1 are refused. */
static void test_inner_precise(void) {
    loom_rng r;
    loom_rng_init(&r, 31, 1);
    static const loom_dtype dts[] = {LOOM_F32, LOOM_F16, LOOM_BF16};
    for (int i = 0; i < 60; i++) {
        fa_case c = random_case(&r);
        c.precise = LOOM_ATTN_HIGH_PERFORMANCE;
        c.qdt = dts[i % 3 == 2 ? irand(&r, 0, 2) : i % 2];
        c.kvdt = i % 5 == 4 ? dts[irand(&r, 0, 2)] : c.qdt;
        c.bf16_values = i % 4 != 3;
        if (!c.bf16_values) c.qamp = 1.0f, c.keep = 1.0f;
        fa_check_case(&c, &r, i % 6 == 0);
    }
    /* takes effect: S = 200, D = 64, f32 */
    fa_case c = random_case(&r);
    c.L = LOOM_ATTN_BSND, c.B = 1, c.N = 4, c.Nkv = 2, c.D = 64, c.Sq = c.Skv = 200;
    c.qdt = c.kvdt = c.odt = LOOM_F32, c.sparse = 3, c.mask_kind = 0, c.keep = 1.0f, c.lens = 0;
    c.pad = 0, c.bq = c.bkv = 0, c.precise = LOOM_ATTN_HIGH_PERFORMANCE, c.bf16_values = 0;
    fa_data d;
    fa_setup(&c, &d, &r);
    CHECK(fa_run(&d.t, &d.p, loom_cpu_isa(), 1) == LOOM_OK);
    size_t ob = out_bytes(&d.out);
    unsigned char *hp = xmalloc(ob);
    memcpy(hp, d.out.data, ob);
    d.p.inner_precise = LOOM_ATTN_HIGH_PRECISION;
    CHECK(fa_run(&d.t, &d.p, loom_cpu_isa(), 1) == LOOM_OK);
    /* (the bf16 products also need attention.bf16 = native: base/variants.h) */
    int bf16_cpu = loom_cpu_isa() >= LOOM_ISA_AVX512 && loom_cpu_get()->avx512_bf16 &&
                   loom_variant(LOOM_VF_ATTN_BF16) == 0;
    CHECK_MSG((memcmp(hp, d.out.data, ob) != 0) == bf16_cpu,
              "inner_precise 1 %s the result on a CPU %s AVX512_BF16",
              bf16_cpu ? "did not change" : "changed", bf16_cpu ? "with" : "without");
    d.p.inner_precise = 2;
    CHECK(fa_run(&d.t, &d.p, loom_cpu_isa(), 1) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "inner_precise") != NULL);
    free(hp);
    fa_teardown(&d);
}

/* A few long sequences (small N and D to keep the reference quick). */
static void test_long_sequences(void) {
    loom_rng r;
    loom_rng_init(&r, 99, 1);
    static const int64_t S[][2] = {{200, 211}, {523, 523}, {700, 311}, {1, 613}, {257, 701}};
    for (int i = 0; i < 5; i++) {
        fa_case c = random_case(&r);
        c.L = LOOM_ATTN_BSND, c.B = 1, c.Nkv = 1, c.N = i % 2 ? 2 : 1, c.D = i == 2 ? 64 : 32;
        c.Sq = S[i][0], c.Skv = S[i][1], c.lens = 0, c.pad = 0, c.keep = 1.0f;
        c.sparse = i % 2 ? 3 : 4, c.pre = 300, c.next = 0, c.mask_kind = 0;
        fa_check_case(&c, &r, i == 0);
    }
}

/* The reference agrees with the primitive reference attention op (BSND, f32). */
static void test_matches_primitive_attention(void) {
    loom_rng r;
    loom_rng_init(&r, 5, 1);
    for (int causal = 0; causal < 2; causal++)
        for (int with_mask = 0; with_mask < 2; with_mask++) {
            fa_case c = random_case(&r);
            c.L = LOOM_ATTN_BSND, c.B = 2, c.Sq = 5, c.Skv = 9, c.N = 4, c.Nkv = 2, c.D = 16;
            c.qdt = c.kvdt = c.odt = LOOM_F32, c.sparse = causal ? 3 : 0, c.keep = 1.0f;
            c.pre = c.next = LOOM_ATTN_TOKENS_ALL, c.lens = 0, c.pad = 0, c.bq = c.bkv = 0;
            c.mask_kind = with_mask ? 2 : 0, c.mask4 = 0;
            fa_data d;
            fa_setup(&c, &d, &r);
            if (with_mask) /* the primitive op's mask is finite-additive only */
                for (int64_t i = 0; i < tensor_span(&d.mask); i++)
                    if (isinf(tget(&d.mask, i))) tset(&d.mask, i, -30.0f);
            CHECK(fa_run(&d.tr, &d.p, LOOM_ISA_REF, 1) == LOOM_OK);
            loom_attention_attrs at = {0.0f, causal, (int)(c.Skv - c.Sq), 0, c.softcap};
            const loom_tensor *src[4] = {&d.q, &d.k, &d.v, &d.mask};
            CHECK(loom_op_run(LOOM_OP_ATTENTION, src, with_mask ? 4 : 3, &at, &d.out, LOOM_ISA_REF) == LOOM_OK);
            CHECK(tensors_close(&d.out, &d.rout, 1e-6, "primitive"));
            fa_teardown(&d);
        }
}

/* Same logical data in every layout gives the same bytes (TND: one sequence). */
static void test_layouts_agree(void) {
    loom_rng r;
    loom_rng_init(&r, 11, 1);
    const int64_t Sq = 19, Skv = 23, N = 4, Nkv = 2, D = 40;
    float *q = xmalloc(Sq * N * D * 4), *k = xmalloc(Skv * Nkv * D * 4), *v = xmalloc(Skv * Nkv * D * 4);
    for (int64_t i = 0; i < Sq * N * D; i++) q[i] = 2.0f * loom_rng_uniform(&r) - 1.0f;
    for (int64_t i = 0; i < Skv * Nkv * D; i++) k[i] = 2.0f * loom_rng_uniform(&r) - 1.0f, v[i] = loom_rng_uniform(&r);
    float *outs[4];
    for (int L = 0; L < 4; L++) {
        int64_t sh[4];
        loom_tensor tq, tk, tv, to;
        int nd = layout_shape((loom_attn_layout)L, 1, Sq, N, D, sh);
        tensor_new(&tq, LOOM_F32, nd, sh, 0);
        tensor_new(&to, LOOM_F32, nd, sh, 0);
        layout_shape((loom_attn_layout)L, 1, Skv, Nkv, D, sh);
        tensor_new(&tk, LOOM_F32, nd, sh, 0);
        tensor_new(&tv, LOOM_F32, nd, sh, 0);
        /* logical [s][n][d] -> layout offsets via strides of dims (B=1) */
        for (int64_t s = 0; s < Skv; s++)
            for (int64_t n = 0; n < (s < Sq ? N : Nkv); n++)
                for (int64_t x = 0; x < D; x++) {
                    int64_t so, no, xo = L == LOOM_ATTN_BSH ? tq.stride[2] : tq.stride[nd - 1];
                    for (int w = 0; w < 3; w++) {
                        loom_tensor *t = w == 0 ? &tq : w == 1 ? &tk : &tv;
                        if (w == 0 && (s >= Sq || n >= N)) continue;
                        if (w > 0 && n >= Nkv) continue;
                        if (L == LOOM_ATTN_BSND) so = t->stride[1], no = t->stride[2];
                        else if (L == LOOM_ATTN_BNSD) so = t->stride[2], no = t->stride[1];
                        else if (L == LOOM_ATTN_BSH) so = t->stride[1], no = D * t->stride[2];
                        else so = t->stride[0], no = t->stride[1];
                        xo = t->stride[nd - 1];
                        float val = w == 0 ? q[(s * N + n) * D + x] : (w == 1 ? k : v)[(s * Nkv + n) * D + x];
                        ((float *)t->data)[s * so + n * no + x * xo] = val;
                    }
                }
        loom_flash_attention_params p = loom_flash_attention_default_params();
        p.input_layout = (loom_attn_layout)L, p.sparse_mode = 3;
        p.num_heads = N, p.num_key_value_heads = Nkv;
        int64_t cq[1] = {Sq}, ck[1] = {Skv};
        if (L == LOOM_ATTN_TND) p.actual_seq_qlen = cq, p.actual_seq_kvlen = ck, p.num_seqs = 1;
        loom_flash_attention_tensors t = {.query = &tq, .key = &tk, .value = &tv, .attention_out = &to};
        CHECK_MSG(loom_flash_attention_score(&t, &p, NULL) == LOOM_OK, "%s", loom_last_error());
        outs[L] = xmalloc(Sq * N * D * 4);
        for (int64_t s = 0; s < Sq; s++) /* back to logical order */
            for (int64_t n = 0; n < N; n++)
                for (int64_t x = 0; x < D; x++) {
                    int64_t off = L == LOOM_ATTN_BNSD ? (n * Sq + s) * D + x : (s * N + n) * D + x;
                    outs[L][(s * N + n) * D + x] = ((float *)to.data)[off];
                }
        tensor_free(&tq), tensor_free(&tk), tensor_free(&tv), tensor_free(&to);
    }
    for (int L = 1; L < 4; L++)
        CHECK_MSG(memcmp(outs[0], outs[L], (size_t)(Sq * N * D * 4)) == 0, "layout %d differs", L);
    for (int L = 0; L < 4; L++) free(outs[L]);
    free(q), free(k), free(v);
}

int main(void) {
    loom_ops_init(); /* the fused layer's ops in the op table */
    RUN_TEST(test_matches_primitive_attention);
    RUN_TEST(test_layouts_agree);
    RUN_TEST(test_random_cases);
    RUN_TEST(test_inner_precise);
    RUN_TEST(test_long_sequences);
    return TEST_SUMMARY();
}
