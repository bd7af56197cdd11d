/* fused_infer_attention_score's choice of kernel and the parameters it forwards,
 * and i8 KV caches read by the prefill kernel (loom_flash_attention_score with
 * antiquant scales; fused_infer_attention_score above its decode limit), on
 * the decode tests' cases (test_incre_attention_case.h). */
#include "test_incre_attention_case.h"
#include "graph/ops_init.h"

/* fused_infer_attention_score picks the kernel by S_q and forwards parameters. */
static void test_fused_infer_dispatch(void) {
    loom_rng r;
    loom_rng_init(&r, 9, 2);
    inc_case c = base_case();
    c.Sq = 4, c.sparse = 3, c.lens = 1;
    inc_data d;
    inc_setup(&c, &d, &r);
    int64_t qlens[2] = {3, 1};
    loom_fused_infer_attention_params fp = loom_fused_infer_attention_default_params();
    fp.sparse_mode = 3, fp.actual_seq_lengths = qlens, fp.actual_seq_lengths_kv = d.kvlen;
    loom_fused_infer_attention_tensors ft = {.query = &d.q, .key = &d.k, .value = &d.v,
                                             .attention_out = &d.out, .softmax_lse = &d.lse};
    int used = -1;
    CHECK_MSG(loom_fused_infer_attention_score(&ft, &fp, NULL, &used) == LOOM_OK, "%s", loom_last_error());
    CHECK(used == 1);
    size_t sb = 0, wb = 0;
    CHECK(loom_incre_flash_attention_sizes(&d.tr, &d.p, &sb, &wb) == LOOM_OK);
    void *sc = loom_alloc_aligned(sb, LOOM_ALIGN);
    CHECK(loom_attn_ref_incre(&d.tr, &d.p, qlens, 0, 1, sc, sb) == LOOM_OK);
    loom_free_aligned(sc);
    CHECK(tensors_close(&d.out, &d.rout, 1.0 / 2048, "fia decode"));
    CHECK(tensors_close(&d.lse, &d.rlse, 1.0 / 2048, "fia lse"));
    /* the same query through the prefill kernel (decode limit 0) agrees */
    fp.decode_max_q_len = 0;
    CHECK(loom_fused_infer_attention_score(&ft, &fp, NULL, &used) == LOOM_OK && used == 0);
    CHECK(tensors_close(&d.out, &d.rout, 1.0 / 2048, "fia prefill"));
    /* a paged cache goes by the same rule (test_prefill_paged.c has the cases) */
    ft.block_table = &d.bt, ft.key = &d.pk, ft.value = &d.pv;
    CHECK(loom_fused_infer_attention_score(&ft, &fp, NULL, &used) == LOOM_OK && used == 0);
    CHECK(tensors_close(&d.out, &d.rout, 1.0 / 2048, "fia paged"));
    fp.decode_max_q_len = 17;
    CHECK(loom_fused_infer_attention_score(&ft, &fp, NULL, &used) == LOOM_ERR_INVALID_ARG);
    inc_teardown(&d);
    c = base_case(), c.Sq = 17, c.Smax = 30;
    inc_setup(&c, &d, &r);
    fp = loom_fused_infer_attention_default_params();
    ft = (loom_fused_infer_attention_tensors){.query = &d.q, .key = &d.k, .value = &d.v,
                                              .attention_out = &d.out};
    CHECK(loom_fused_infer_attention_score(&ft, &fp, NULL, &used) == LOOM_OK && used == 0);
    size_t n = (size_t)tensor_span(&d.out) * sizeof(float);
    void *contiguous = malloc(n);
    memcpy(contiguous, d.out.data, n);
    ft.block_table = &d.bt, ft.key = &d.pk, ft.value = &d.pv; /* S_q 17 over the paged copy */
    fp.actual_seq_lengths_kv = d.kvlen;
    CHECK(loom_fused_infer_attention_score(&ft, &fp, NULL, &used) == LOOM_OK && used == 0);
    CHECK(memcmp(contiguous, d.out.data, n) == 0);
    fp.actual_seq_lengths_kv = NULL; /* required with a paged cache */
    CHECK(loom_fused_infer_attention_score(&ft, &fp, NULL, &used) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "needs actual_seq_lengths_kv") != NULL);
    free(contiguous);
    inc_teardown(&d);
}

/* An i8 cache read by the prefill kernel (loom_flash_attention_score with
 * antiquant scales, and fused_infer_attention_score above its decode limit):
 * per-channel and per-token scales, with and without offsets, every layout,
 * causal and band masks, padded lengths, at every level and 1 or 2 threads
 * (bit-identical), against the reference decomposition. */
static void test_prefill_i8_cache(void) {
    loom_rng r;
    loom_rng_init(&r, 31, 2);
    loom_isa lv[LOOM_ISA_COUNT];
    int nl = test_levels(lv);
    loom_pool *pool = NULL;
    CHECK(loom_pool_init(&pool, 2) == LOOM_OK);
    const loom_attn_layout lays[3] = {LOOM_ATTN_BSND, LOOM_ATTN_BNSD, LOOM_ATTN_BSH};
    for (int i = 0; i < 18; i++) {
        inc_case c = base_case();
        c.L = lays[i % 3];
        c.kvdt = LOOM_I8;
        c.kmode = i % 2, c.vmode = (i / 2) % 2, c.koff = i % 5 == 1, c.voff = i % 4 == 2;
        c.Sq = i % 6 == 0 ? 5 : 17 + irand(&r, 0, 60);
        c.Smax = c.Sq + irand(&r, 0, 150);
        c.Nkv = 1 + irand(&r, 0, 2), c.N = c.Nkv * (1 + irand(&r, 0, 3));
        static const int64_t dims[4] = {64, 40, 128, 24};
        c.D = dims[i % 4];
        c.sparse = i % 3 == 2 ? 4 : 3, c.pre = 20 + i, c.next = 3;
        c.lens = i % 4 == 3, c.mask_kind = i % 7 == 4 ? 2 : 0;
        c.qdt = i % 5 == 3 ? LOOM_BF16 : LOOM_F32;
        inc_data d;
        inc_setup(&c, &d, &r);
        loom_flash_attention_tensors t = {&d.q, &d.k, &d.v, d.t.atten_mask, &d.out, &d.lse,
                                          d.t.key_antiquant_scale, d.t.key_antiquant_offset,
                                          d.t.value_antiquant_scale, d.t.value_antiquant_offset, NULL};
        loom_flash_attention_params p = loom_flash_attention_default_params();
        p.input_layout = c.L, p.num_heads = d.p.num_heads, p.num_key_value_heads = d.p.num_key_value_heads;
        p.sparse_mode = c.sparse, p.pre_tokens = c.pre, p.next_tokens = c.next;
        p.actual_seq_lengths_kv = c.lens ? d.kvlen : NULL;
        p.key_antiquant_mode = c.kmode, p.value_antiquant_mode = c.vmode;
        loom_flash_attention_tensors tr = t;
        tr.attention_out = &d.rout, tr.softmax_lse = &d.rlse;
        attn_problem pr;
        CHECK_MSG(attn_resolve_prefill(&tr, &p, &pr) == LOOM_OK, "%s", loom_last_error());
        size_t rb = loom_attn_ref_scratch(&pr);
        void *sc = loom_alloc_aligned(rb, LOOM_ALIGN);
        CHECK_MSG(loom_attn_ref_flash(&tr, &p, 0, 1, sc, rb) == LOOM_OK, "%s", loom_last_error());
        loom_free_aligned(sc);
        size_t n = (size_t)tensor_span(&d.out) * loom_dtype_size(c.odt);
        void *first = malloc(n);
        /* inner_precise 1: per-token scales without offsets take bf16 products (twice bf16's
         * tolerance), other i8 caches f32 as at 0 */
        for (int ip = 1; ip >= 0; ip--)
            for (int l = 0; l < nl; l++)
                for (int nth = 1; nth <= 2; nth++) {
                    loom_isa was = loom_cpu_isa();
                    CHECK(loom_cpu_set_isa(lv[l]) == LOOM_OK);
                    p.inner_precise = ip;
                    CHECK_MSG(loom_flash_attention_score(&t, &p, nth == 2 ? pool : NULL) == LOOM_OK, "%s",
                              loom_last_error());
                    loom_cpu_set_isa(was);
                    double tol = ip ? 2.0 / 128 : 1.0 / 2048;
                    int ok = tensors_close(&d.out, &d.rout, tol, "i8 prefill out") &&
                             tensors_close(&d.lse, &d.rlse, tol, "i8 prefill lse");
                    if (nth == 1) memcpy(first, d.out.data, n);
                    else ok &= memcmp(first, d.out.data, n) == 0;
                    if (!ok) inc_describe(&c), fprintf(stderr, "  inner_precise %d, %s\n", ip, loom_isa_name(lv[l]));
                    CHECK(ok);
                }
        /* fused_infer_attention_score takes the prefill kernel above its decode limit */
        loom_fused_infer_attention_params fp = loom_fused_infer_attention_default_params();
        fp.input_layout = c.L, fp.num_heads = p.num_heads, fp.num_key_value_heads = p.num_key_value_heads;
        fp.sparse_mode = c.sparse, fp.pre_tokens = c.pre, fp.next_tokens = c.next;
        fp.actual_seq_lengths_kv = p.actual_seq_lengths_kv;
        fp.key_antiquant_mode = c.kmode, fp.value_antiquant_mode = c.vmode;
        if (c.Sq <= LOOM_INCRE_MAX_Q_LEN) fp.decode_max_q_len = 0;
        loom_fused_infer_attention_tensors ft = {
            .query = &d.q, .key = &d.k, .value = &d.v, .atten_mask = t.atten_mask,
            .key_antiquant_scale = t.key_antiquant_scale, .key_antiquant_offset = t.key_antiquant_offset,
            .value_antiquant_scale = t.value_antiquant_scale, .value_antiquant_offset = t.value_antiquant_offset,
            .attention_out = &d.out};
        int used = -1;
        memset(d.out.data, 0, n);
        loom_isa was = loom_cpu_isa(); /* at the level of `first` (the last above), whatever LOOM_ISA says */
        CHECK(loom_cpu_set_isa(lv[nl - 1]) == LOOM_OK);
        CHECK_MSG(loom_fused_infer_attention_score(&ft, &fp, pool, &used) == LOOM_OK, "%s", loom_last_error());
        loom_cpu_set_isa(was);
        CHECK(used == 0 && memcmp(first, d.out.data, n) == 0);
        free(first);
        if (i == 0) { /* errors: a missing scale, scales with a float cache, an i8 TND */
            loom_flash_attention_tensors e = t;
            e.key_antiquant_scale = NULL;
            CHECK(loom_flash_attention_score(&e, &p, NULL) == LOOM_ERR_INVALID_ARG);
            CHECK(strstr(loom_last_error(), "needs key_antiquant_scale") != NULL);
            e = t, e.key = e.value = &d.q;
            CHECK(loom_flash_attention_score(&e, &p, NULL) == LOOM_ERR_INVALID_ARG);
            CHECK(strstr(loom_last_error(), "only i8 caches are dequantized") != NULL);
            loom_flash_attention_params pt = p;
            pt.input_layout = LOOM_ATTN_TND; /* the same memory as [T, N, D] (BSND case) */
            loom_tensor q3 = d.q, k3 = d.k, v3 = d.v, o3 = d.out;
            loom_tensor_init(&q3, d.q.dtype, 3, (const int64_t[3]){c.B * c.Sq, c.N, c.D}, d.q.data);
            loom_tensor_init(&o3, d.out.dtype, 3, (const int64_t[3]){c.B * c.Sq, c.N, c.D}, d.out.data);
            loom_tensor_init(&k3, LOOM_I8, 3, (const int64_t[3]){c.B * c.Smax, c.Nkv, c.D}, d.k.data);
            loom_tensor_init(&v3, LOOM_I8, 3, (const int64_t[3]){c.B * c.Smax, c.Nkv, c.D}, d.v.data);
            e = (loom_flash_attention_tensors){.query = &q3, .key = &k3, .value = &v3, .attention_out = &o3,
                                               .key_antiquant_scale = t.key_antiquant_scale,
                                               .value_antiquant_scale = t.value_antiquant_scale};
            CHECK(loom_flash_attention_score(&e, &pt, NULL) == LOOM_ERR_DTYPE);
            CHECK(strstr(loom_last_error(), "not TND") != NULL);
        }
        inc_teardown(&d);
    }
    loom_pool_free(pool);
}

int main(void) {
    loom_ops_init(); /* the fused layer's ops in the op table */
    RUN_TEST(test_fused_infer_dispatch);
    RUN_TEST(test_prefill_i8_cache);
    return TEST_SUMMARY();
}
