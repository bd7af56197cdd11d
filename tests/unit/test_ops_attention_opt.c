/* Optimised kernels of the primitive attention op (FlashAttention driver)
 * and of kv_append
 * against its reference: random shapes incl. sizes that are no multiple of
 * any tile, GQA, causal with query offsets (prefill, chunked prefill, decode
 * over a cache), explicit scale, additive masks with fully masked rows, a
 * strided k/v view of a longer cache, every ISA level up to the machine's,
 * and bit-identical output for any thread count. Tolerance 2^-11 (f32). */
#include "base/alloc.h"
#include "test_ops_common.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif


typedef struct { int B, Sq, Skv, Hq, Hkv, D, causal, off, mask, view; float scale; } acase;

static void run_case(const acase *c, loom_rng *rng) {
    int64_t nq = (int64_t)c->B * c->Sq * c->Hq * c->D;
    int64_t cap = c->view ? c->Skv + 7 : c->Skv;  /* a cache longer than the keys in use */
    int64_t nkv = (int64_t)c->B * cap * c->Hkv * c->D;
    float *q = falloc(nq), *k = falloc(nkv), *v = falloc(nkv), *m = falloc((int64_t)c->Sq * c->Skv);
    float *ref = falloc(nq), *out = falloc(nq);
    fill_rand(q, nq, rng);
    fill_rand(k, nkv, rng);
    fill_rand(v, nkv, rng);
    for (int64_t i = 0; i < (int64_t)c->Sq * c->Skv; i++) m[i] = frand(rng);
    if (c->mask && c->Sq > 1)
        for (int j = 0; j < c->Skv; j++) m[j] = -INFINITY;  /* row 0 fully masked */
    loom_tensor tq, tk, tv, tm, tr, to;
    TENSOR(tq, LOOM_F32, q, c->B, c->Sq, c->Hq, c->D);
    TENSOR(tk, LOOM_F32, k, c->B, cap, c->Hkv, c->D);
    TENSOR(tv, LOOM_F32, v, c->B, cap, c->Hkv, c->D);
    tk.shape[1] = tv.shape[1] = c->Skv;  /* rows [0, Skv) of the cache: strides unchanged */
    TENSOR(tm, LOOM_F32, m, c->Sq, c->Skv);
    TENSOR(tr, LOOM_F32, ref, c->B, c->Sq, c->Hq, c->D);
    TENSOR(to, LOOM_F32, out, c->B, c->Sq, c->Hq, c->D);
    loom_attention_attrs at = {c->scale, c->causal, c->off};
    const loom_tensor *src[4] = {&tq, &tk, &tv, &tm};
    int n_src = c->mask ? 4 : 3;
    CHECK(loom_op_run(LOOM_OP_ATTENTION, src, n_src, &at, &tr, LOOM_ISA_REF) == LOOM_OK);
    for (int isa = LOOM_ISA_GENERIC; isa <= (int)loom_cpu_isa(); isa++) {
        memset(out, 0xA5, (size_t)nq * sizeof *out);
        loom_status s = loom_op_run(LOOM_OP_ATTENTION, src, n_src, &at, &to, (loom_isa)isa);
        CHECK_MSG(s == LOOM_OK, "isa %d: %s", isa, loom_last_error());
        double worst = 0;
        int bad = 0;
        for (int64_t i = 0; i < nq; i++) {
            if (!check_close(out[i], ref[i], 1.0 / 2048)) bad++;
            double d = fabs((double)out[i] - ref[i]);
            worst = d > worst ? d : worst;
        }
        CHECK_MSG(bad == 0, "isa %d B%d Sq%d Skv%d Hq%d Hkv%d D%d causal%d off%d mask%d view%d: %d "
                  "elements off, max error %g", isa, c->B, c->Sq, c->Skv, c->Hq, c->Hkv, c->D, c->causal,
                  c->off, c->mask, c->view, bad, worst);
    }
    /* the optimised kernel, split over threads as the executor does */
    const loom_op_info *info = loom_op_get(LOOM_OP_ATTENTION);
    loom_kernel_fn fn = loom_op_kernel(LOOM_OP_ATTENTION, loom_cpu_isa());
    size_t bytes = info->scratch_size(src, n_src, &to, &at);
    float *first = falloc(nq);
    for (int nth = 1; nth <= 3; nth++) {
        memset(out, 0x5A, (size_t)nq * sizeof *out);
        for (int ith = 0; ith < nth; ith++) {
            void *scratch = bytes ? loom_alloc_aligned(bytes, LOOM_ALIGN) : NULL;
            loom_kernel_args a = {.n_src = n_src, .dst = &to, .attrs = &at, .ith = ith, .nth = nth,
                                  .scratch = scratch};
            for (int i = 0; i < n_src; i++) a.src[i] = src[i];
            CHECK(fn(&a) == LOOM_OK);
            loom_free_aligned(scratch);
        }
        if (nth == 1) memcpy(first, out, (size_t)nq * sizeof *out);
        else CHECK_MSG(memcmp(first, out, (size_t)nq * sizeof *out) == 0, "nth %d differs", nth);
    }
    free(first);
    free(q), free(k), free(v), free(m), free(ref), free(out);
}

/* kv_append: the row kernels of every level against the reference, threads
 * 1..3, positions inside the cache; f32 caches (row copies) and f16 / bf16
 * ones (rows rounded by the vector conversions: the same bits as the
 * reference, also for NaN, inf, halfway and subnormal values). */
static void test_kv_append(loom_rng *rng) {
    const struct { int smax, n, pos, h, d; loom_dtype dt; } cs[] = {
        {16, 5, 0, 3, 8, LOOM_F32}, {16, 1, 15, 3, 8, LOOM_F32}, {40, 17, 9, 2, 33, LOOM_F32},
        {12, 4, 3, 1, 5, LOOM_F16}, {40, 17, 9, 2, 33, LOOM_F16}, {16, 5, 0, 3, 8, LOOM_BF16},
        {40, 17, 9, 2, 33, LOOM_BF16}, {64, 64, 0, 3, 64, LOOM_BF16}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int64_t row = (int64_t)cs[c].h * cs[c].d, total = cs[c].smax * row;
        size_t es = loom_dtype_size(cs[c].dt);
        unsigned char *ref = malloc((size_t)total * es), *got = malloc((size_t)total * es);
        float *x = falloc(cs[c].n * row);
        fill_rand(x, cs[c].n * row, rng);
        const float special[] = {NAN, INFINITY, -INFINITY, 1.00390625f /* bf16 halfway */, 1e-40f, -0.0f,
                                 65520.0f /* f16 overflow */, 3e-8f /* f16 subnormal */};
        for (size_t i = 0; i < sizeof special / sizeof special[0] && (int64_t)i * 7 < cs[c].n * row; i++)
            x[i * 7] = special[i];
        for (int64_t i = 0; i < total * (int64_t)es; i++) ref[i] = (unsigned char)(i * 31);
        loom_tensor tc, tx, ty, tg;
        TENSOR(tc, cs[c].dt, ref, cs[c].smax, cs[c].h, cs[c].d);
        TENSOR(tx, LOOM_F32, x, cs[c].n, cs[c].h, cs[c].d);
        loom_kv_append_attrs at = {cs[c].pos};
        const loom_tensor *src[2] = {&tc, &tx};
        loom_tensor inferred;
        memset(&inferred, 0, sizeof inferred);
        CHECK(loom_op_get(LOOM_OP_KV_APPEND)->infer(src, 2, &at, &inferred) == LOOM_OK);
        CHECK(inferred.shape[0] == cs[c].pos + cs[c].n);
        TENSOR(ty, cs[c].dt, ref, cs[c].pos + cs[c].n, cs[c].h, cs[c].d);  /* views the cache */
        CHECK(loom_op_run(LOOM_OP_KV_APPEND, src, 2, &at, &ty, LOOM_ISA_REF) == LOOM_OK);
        for (int isa = LOOM_ISA_GENERIC; isa <= (int)loom_cpu_isa(); isa++)
            for (int nth = 1; nth <= 3; nth++) {
                for (int64_t i = 0; i < total * (int64_t)es; i++) got[i] = (unsigned char)(i * 31);
                tg = ty;
                tg.data = got;
                loom_kernel_fn fn = loom_op_kernel(LOOM_OP_KV_APPEND, (loom_isa)isa);
                for (int ith = 0; ith < nth; ith++) {
                    loom_kernel_args a = {.n_src = 2, .dst = &tg, .attrs = &at, .ith = ith, .nth = nth};
                    a.src[0] = &tc, a.src[1] = &tx;
                    CHECK(fn(&a) == LOOM_OK);
                }
                CHECK_MSG(memcmp(ref, got, (size_t)total * es) == 0, "kv_append case %zu (%s) %s nth %d differs",
                          c, loom_dtype_name(cs[c].dt), loom_isa_name((loom_isa)isa), nth);
            }
        free(ref), free(got), free(x);
    }
}

int main(void) {
    loom_rng rng;
    loom_rng_init(&rng, 2024, 0);
    const acase fixed[] = {
        {1, 1, 1, 1, 1, 8, 1, 0, 0, 0, 0.0f},       /* one query, one key */
        {1, 7, 7, 9, 3, 64, 1, 0, 0, 0, 0.0f},      /* SmolLM2 heads, prefill */
        {1, 1, 37, 9, 3, 64, 1, 36, 0, 1, 0.0f},    /* decode over a longer cache */
        {1, 5, 21, 4, 2, 16, 1, 16, 0, 1, 0.0f},    /* a chunk after 16 cached positions */
        {2, 13, 13, 4, 4, 24, 0, 0, 1, 0, 0.3f},    /* batch, mask with a fully masked row */
        {1, 6, 10, 8, 1, 40, 1, 4, 1, 0, 0.0f},     /* MQA, causal and mask */
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) run_case(&fixed[i], &rng);
#ifdef SANITIZED
    const int n_random = 6;
#else
    const int n_random = 40;
#endif
    for (int t = 0; t < n_random; t++) {
        acase c;
        c.Hkv = 1 + (int)(loom_rng_uniform(&rng) * 3);
        c.Hq = c.Hkv * (1 + (int)(loom_rng_uniform(&rng) * 3));
        c.D = 1 + (int)(loom_rng_uniform(&rng) * 80);
        c.B = 1 + (int)(loom_rng_uniform(&rng) * 2);
        c.Sq = 1 + (int)(loom_rng_uniform(&rng) * 40);
        c.causal = loom_rng_uniform(&rng) < 0.7f;
        c.off = c.causal ? (int)(loom_rng_uniform(&rng) * 50) : 0;
        c.Skv = c.causal ? c.off + c.Sq : 1 + (int)(loom_rng_uniform(&rng) * 60);
        c.mask = loom_rng_uniform(&rng) < 0.3f;
        c.view = loom_rng_uniform(&rng) < 0.5f;
        c.scale = loom_rng_uniform(&rng) < 0.3f ? 0.125f : 0.0f;
        run_case(&c, &rng);
    }
    test_kv_append(&rng);
    printf("test_ops_attention_opt: %d checks, %d failed\n", check_count_, check_failures_);
    return check_failures_ != 0;
}
