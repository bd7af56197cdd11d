/* Optimised kernels of the primitive attention op (FlashAttention driver)
 * and of kv_append
 * against its reference: random shapes incl. sizes that are no multiple of
 * any tile, GQA, causal with query offsets (prefill, chunked prefill, decode
 * over a cache), sliding windows, score soft-capping, explicit scale, additive masks with fully masked rows, a
 * strided k/v view of a longer cache, every ISA level up to the machine's,
 * and bit-identical output for any thread count. Tolerance 2^-11 (f32). */
#include "base/alloc.h"
#include "graph/ops_init.h"
#include "test_ops_common.h"

typedef struct { int B, Sq, Skv, Hq, Hkv, D, causal, off, mask, view; float scale; int i8, window; float softcap; } acase;

static void run_case(const acase *c, loom_rng *rng) {
    int64_t nq = (int64_t)c->B * c->Sq * c->Hq * c->D;
    int64_t cap = c->view ? c->Skv + 7 : c->Skv;  /* a cache longer than the keys in use */
    int64_t nkv = (int64_t)c->B * cap * c->Hkv * c->D;
    float *q = falloc(nq), *k = falloc(nkv), *v = falloc(nkv), *m = falloc((int64_t)c->Sq * c->Skv);
    float *ref = falloc(nq), *out = falloc(nq);
    fill_rand(q, nq, rng);
    fill_rand(k, nkv, rng);
    fill_rand(v, nkv, rng);
    /* i8 k and v (an i8 KV cache): integers in [-127, 127] with a positive scale per row */
    int64_t nrows = (int64_t)c->B * cap * c->Hkv;
    int8_t *k8 = malloc((size_t)nkv), *v8 = malloc((size_t)nkv);
    float *ks = falloc(nrows), *vs = falloc(nrows);
    for (int64_t i = 0; i < nkv; i++) k8[i] = (int8_t)lrintf(127.0f * k[i]), v8[i] = (int8_t)lrintf(127.0f * v[i]);
    for (int64_t i = 0; i < nrows; i++)
        ks[i] = 0.002f + 0.02f * loom_rng_uniform(rng), vs[i] = 0.01f * (1.0f + frand(rng));
    for (int64_t i = 0; i < (int64_t)c->Sq * c->Skv; i++) m[i] = frand(rng);
    if (c->mask && c->Sq > 1)
        for (int j = 0; j < c->Skv; j++) m[j] = -INFINITY;  /* row 0 fully masked */
    loom_tensor tq, tk, tv, tm, tr, to;
    TENSOR(tq, LOOM_F32, q, c->B, c->Sq, c->Hq, c->D);
    loom_tensor tks, tvs;
    if (c->i8) {
        TENSOR(tk, LOOM_I8, k8, c->B, cap, c->Hkv, c->D);
        TENSOR(tv, LOOM_I8, v8, c->B, cap, c->Hkv, c->D);
    } else {
        TENSOR(tk, LOOM_F32, k, c->B, cap, c->Hkv, c->D);
        TENSOR(tv, LOOM_F32, v, c->B, cap, c->Hkv, c->D);
    }
    TENSOR(tks, LOOM_F32, ks, c->B, cap, c->Hkv);
    TENSOR(tvs, LOOM_F32, vs, c->B, cap, c->Hkv);
    tk.shape[1] = tv.shape[1] = c->Skv;  /* rows [0, Skv) of the cache: strides unchanged */
    tks.shape[1] = tvs.shape[1] = c->Skv;
    TENSOR(tm, LOOM_F32, m, c->Sq, c->Skv);
    TENSOR(tr, LOOM_F32, ref, c->B, c->Sq, c->Hq, c->D);
    TENSOR(to, LOOM_F32, out, c->B, c->Sq, c->Hq, c->D);
    loom_attention_attrs at = {c->scale, c->causal, c->off, c->window, c->softcap};
    const loom_tensor *src[6] = {&tq, &tk, &tv, &tm};
    int n_src = c->mask ? 4 : 3;
    if (c->i8) { /* q, k, v, k_scale, v_scale, then the mask */
        src[3] = &tks, src[4] = &tvs, src[5] = &tm;
        n_src += 2;
    }
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
        CHECK_MSG(bad == 0, "isa %d B%d Sq%d Skv%d Hq%d Hkv%d D%d causal%d off%d mask%d view%d i8 %d window %d: "
                  "%d elements off, max error %g", isa, c->B, c->Sq, c->Skv, c->Hq, c->Hkv, c->D, c->causal,
                  c->off, c->mask, c->view, c->i8, c->window, bad, worst);
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
    free(k8), free(v8), free(ks), free(vs);
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

/* kv_append into an i8 cache: each row of the last dim quantized with its own
 * scale into the scale store (max|x| / 127, 1 for an all-zero row; NaN ignored
 * by the max, stored as -127), by the reference and by every level's kernel on
 * 1..3 threads (the same bytes), rows outside [pos, pos + n) untouched; a
 * missing or misshapen scale store is an error naming it. */
static void test_kv_append_i8(loom_rng *rng) {
    const struct { int smax, n, pos, h, d; } cs[] = {{16, 5, 0, 3, 8}, {16, 1, 15, 3, 64}, {40, 17, 9, 2, 33},
                                                     {64, 64, 0, 3, 64}, {9, 2, 7, 1, 128}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int64_t row = (int64_t)cs[c].h * cs[c].d, total = cs[c].smax * row, nsc = (int64_t)cs[c].smax * cs[c].h;
        int8_t *ref = malloc((size_t)total), *got = malloc((size_t)total), *want = malloc((size_t)total);
        float *rs = falloc(nsc), *gs = falloc(nsc), *ws = falloc(nsc), *x = falloc(cs[c].n * row);
        fill_rand(x, cs[c].n * row, rng);
        for (int64_t i = 0; i < cs[c].n * row; i++) x[i] *= 1.0f + 40.0f * loom_rng_uniform(rng);
        const float special[] = {NAN, 1e-40f, -0.0f, 3e-8f};
        for (size_t i = 0; i < sizeof special / sizeof special[0] && (int64_t)i * 7 < cs[c].n * row; i++)
            x[i * 7] = special[i];
        if (cs[c].n > 1) memset(x + row, 0, (size_t)cs[c].d * sizeof *x); /* an all-zero row */
        /* the expected bytes: untouched outside the new rows */
        for (int64_t i = 0; i < total; i++) want[i] = (int8_t)(i * 31);
        for (int64_t i = 0; i < nsc; i++) ws[i] = (float)i;
        for (int64_t r = 0; r < (int64_t)cs[c].n * cs[c].h; r++) {
            const float *xr = x + r * cs[c].d;
            float amax = 0.0f;
            for (int i = 0; i < cs[c].d; i++) amax = fmaxf(amax, fabsf(xr[i]));
            float sc = amax > 0.0f ? amax / 127.0f : 1.0f;
            int64_t at = (int64_t)cs[c].pos * cs[c].h + r;
            ws[at] = sc;
            for (int i = 0; i < cs[c].d; i++)
                want[at * cs[c].d + i] = (int8_t)lrintf(fminf(127.0f, fmaxf(-127.0f, xr[i] / sc)));
        }
        loom_tensor tc, tx, ty, tg, tsc, tsg;
        for (int64_t i = 0; i < total; i++) ref[i] = (int8_t)(i * 31);
        for (int64_t i = 0; i < nsc; i++) rs[i] = (float)i;
        TENSOR(tc, LOOM_I8, ref, cs[c].smax, cs[c].h, cs[c].d);
        TENSOR(tx, LOOM_F32, x, cs[c].n, cs[c].h, cs[c].d);
        TENSOR(tsc, LOOM_F32, rs, cs[c].smax, cs[c].h);
        loom_kv_append_attrs at = {cs[c].pos};
        const loom_tensor *src[3] = {&tc, &tx, &tsc};
        loom_tensor inferred;
        memset(&inferred, 0, sizeof inferred);
        CHECK(loom_op_get(LOOM_OP_KV_APPEND)->infer(src, 3, &at, &inferred) == LOOM_OK);
        CHECK(inferred.dtype == LOOM_I8 && inferred.shape[0] == cs[c].pos + cs[c].n);
        TENSOR(ty, LOOM_I8, ref, cs[c].pos + cs[c].n, cs[c].h, cs[c].d);
        CHECK(loom_op_run(LOOM_OP_KV_APPEND, src, 3, &at, &ty, LOOM_ISA_REF) == LOOM_OK);
        CHECK_MSG(memcmp(ref, want, (size_t)total) == 0 && memcmp(rs, ws, (size_t)nsc * sizeof *rs) == 0,
                  "kv_append i8 case %zu: reference bytes differ from the quantization rule", c);
        for (int isa = LOOM_ISA_GENERIC; isa <= (int)loom_cpu_isa(); isa++)
            for (int nth = 1; nth <= 3; nth++) {
                for (int64_t i = 0; i < total; i++) got[i] = (int8_t)(i * 31);
                for (int64_t i = 0; i < nsc; i++) gs[i] = (float)i;
                tg = ty, tg.data = got;
                tsg = tsc, tsg.data = gs;
                loom_kernel_fn fn = loom_op_kernel(LOOM_OP_KV_APPEND, (loom_isa)isa);
                for (int ith = 0; ith < nth; ith++) {
                    loom_kernel_args a = {.n_src = 3, .dst = &tg, .attrs = &at, .ith = ith, .nth = nth};
                    a.src[0] = &tc, a.src[1] = &tx, a.src[2] = &tsg;
                    CHECK(fn(&a) == LOOM_OK);
                }
                CHECK_MSG(memcmp(want, got, (size_t)total) == 0 && memcmp(ws, gs, (size_t)nsc * sizeof *gs) == 0,
                          "kv_append i8 case %zu %s nth %d differs", c, loom_isa_name((loom_isa)isa), nth);
            }
        /* errors: no scale store, a scale store of the wrong shape, scales for a float cache */
        loom_tensor bad, tf;
        TENSOR(bad, LOOM_F32, rs, cs[c].smax, cs[c].h + 1);
        const loom_tensor *s2[3] = {&tc, &tx, &bad};
        CHECK(loom_op_get(LOOM_OP_KV_APPEND)->infer(s2, 2, &at, &inferred) == LOOM_ERR_INVALID_ARG);
        CHECK(strstr(loom_last_error(), "i8 cache takes a third input") != NULL);
        CHECK(loom_op_get(LOOM_OP_KV_APPEND)->infer(s2, 3, &at, &inferred) == LOOM_ERR_SHAPE);
        CHECK(strstr(loom_last_error(), "input 2 (scale)") != NULL);
        TENSOR(tf, LOOM_F32, x, cs[c].n, cs[c].h, cs[c].d);
        const loom_tensor *s3[3] = {&tf, &tx, &tsc};
        CHECK(loom_op_get(LOOM_OP_KV_APPEND)->infer(s3, 3, &at, &inferred) == LOOM_ERR_INVALID_ARG);
        free(ref), free(got), free(want), free(rs), free(gs), free(ws), free(x);
    }
}

/* attention over an i8 cache: the scales are inputs 3 and 4 ([B, S_kv, H_kv]),
 * the mask 5; anything else is an error naming what is wrong. */
static void test_attention_i8_errors(void) {
    float q[1 * 3 * 4 * 8] = {0}, ks[1 * 5 * 2] = {0}, m[3 * 5] = {0}, y[96];
    int8_t k8[1 * 5 * 2 * 8] = {0};
    loom_tensor tq, tk, tv, tf, tks, tbad, tm, out;
    TENSOR(tq, LOOM_F32, q, 1, 3, 4, 8);
    TENSOR(tk, LOOM_I8, k8, 1, 5, 2, 8);
    TENSOR(tv, LOOM_I8, k8, 1, 5, 2, 8);
    TENSOR(tf, LOOM_F32, y, 1, 5, 2, 8);
    TENSOR(tks, LOOM_F32, ks, 1, 5, 2);
    TENSOR(tbad, LOOM_F32, ks, 1, 2, 5);
    TENSOR(tm, LOOM_F32, m, 3, 5);
    const loom_op_info *info = loom_op_get(LOOM_OP_ATTENTION);
    const loom_tensor *ok[6] = {&tq, &tk, &tv, &tks, &tks, &tm};
    memset(&out, 0, sizeof out);
    CHECK(info->infer(ok, 5, NULL, &out) == LOOM_OK && out.dtype == LOOM_F32);
    CHECK(info->infer(ok, 6, NULL, &out) == LOOM_OK);
    CHECK(info->infer(ok, 3, NULL, &out) == LOOM_ERR_INVALID_ARG);    /* no scales */
    CHECK(strstr(loom_last_error(), "k_scale, v_scale") != NULL);
    const loom_tensor *mixed[5] = {&tq, &tk, &tf, &tks, &tks};
    CHECK(info->infer(mixed, 5, NULL, &out) == LOOM_ERR_DTYPE);
    CHECK(strstr(loom_last_error(), "needs both i8") != NULL);
    const loom_tensor *shape[5] = {&tq, &tk, &tv, &tks, &tbad};
    CHECK(info->infer(shape, 5, NULL, &out) == LOOM_ERR_SHAPE);
    CHECK(strstr(loom_last_error(), "input 4 (v_scale)") != NULL);
    const loom_tensor *fl[5] = {&tq, &tf, &tf, &tks, &tks};             /* scales for a float cache */
    CHECK(info->infer(fl, 5, NULL, &out) != LOOM_OK);
}

int main(void) {
    loom_ops_init(); /* the fused layer's ops in the op table */
    loom_rng rng;
    loom_rng_init(&rng, 2024, 0);
    const acase fixed[] = {
        {1, 1, 1, 1, 1, 8, 1, 0, 0, 0, 0.0f, 0, 0, 0.0f},       /* one query, one key */
        {1, 7, 7, 9, 3, 64, 1, 0, 0, 0, 0.0f, 0, 0, 0.0f},      /* SmolLM2 heads, prefill */
        {1, 1, 37, 9, 3, 64, 1, 36, 0, 1, 0.0f, 0, 0, 0.0f},    /* decode over a longer cache */
        {1, 5, 21, 4, 2, 16, 1, 16, 0, 1, 0.0f, 0, 0, 0.0f},    /* a chunk after 16 cached positions */
        {2, 13, 13, 4, 4, 24, 0, 0, 1, 0, 0.3f, 0, 0, 0.0f},    /* batch, mask with a fully masked row */
        {1, 6, 10, 8, 1, 40, 1, 4, 1, 0, 0.0f, 0, 0, 0.0f},     /* MQA, causal and mask */
        {1, 7, 7, 9, 3, 64, 1, 0, 0, 0, 0.0f, 1, 0, 0.0f},   /* i8 cache: prefill */
        {1, 1, 37, 9, 3, 64, 1, 36, 0, 1, 0.0f, 1, 0, 0.0f}, /* i8: decode over a longer cache */
        {2, 13, 13, 4, 4, 24, 0, 0, 1, 0, 0.3f, 1, 0, 0.0f}, /* i8, mask after the scales */
        {1, 7, 7, 9, 3, 64, 1, 0, 0, 0, 0.0f, 0, 3, 0.0f},   /* sliding window: prefill */
        {1, 1, 37, 9, 3, 64, 1, 36, 0, 1, 0.0f, 0, 8, 0.0f}, /* window: decode over a longer cache */
        {1, 5, 21, 4, 2, 16, 1, 16, 1, 1, 0.0f, 1, 6, 0.0f}, /* window: i8 chunk after 16, mask */
        {1, 9, 9, 4, 2, 16, 1, 0, 0, 0, 2.0f, 0, 0, 1.5f},  /* soft-capped scores: prefill */
        {1, 1, 41, 6, 3, 40, 1, 40, 1, 1, 2.0f, 1, 9, 0.7f}, /* capped: i8 decode, window, mask */
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) run_case(&fixed[i], &rng);
#if SANITIZED
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
        c.i8 = loom_rng_uniform(&rng) < 0.3f;
        c.window = c.causal && loom_rng_uniform(&rng) < 0.3f ? 1 + (int)(loom_rng_uniform(&rng) * 20) : 0;
        c.softcap = t % 3 == 0 ? 0.5f + 0.25f * (float)(t % 8) : 0.0f;
        run_case(&c, &rng);
    }
    test_kv_append(&rng);
    test_kv_append_i8(&rng);
    test_attention_i8_errors();
    printf("test_ops_attention_opt: %d checks, %d failed\n", check_count_, check_failures_);
    return check_failures_ != 0;
}
