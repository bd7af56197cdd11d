/* Reference attention: hand cases, invariants, GQA, masks, views. */
#include "test_ops_common.h"
#include "graph/ops_init.h"

typedef struct {
    int B, Sq, Skv, Hq, Hkv, D;
} dims;

/* Runs attention on contiguous q, k, v (and mask if non-NULL) into out. */
static void run_attn(dims d, float *q, float *k, float *v, float *mask, float *out,
                     const loom_attention_attrs *at) {
    loom_tensor tq, tk, tv, tm, to;
    TENSOR(tq, LOOM_F32, q, d.B, d.Sq, d.Hq, d.D);
    TENSOR(tk, LOOM_F32, k, d.B, d.Skv, d.Hkv, d.D);
    TENSOR(tv, LOOM_F32, v, d.B, d.Skv, d.Hkv, d.D);
    TENSOR(tm, LOOM_F32, mask, d.Sq, d.Skv);
    TENSOR(to, LOOM_F32, out, d.B, d.Sq, d.Hq, d.D);
    const loom_tensor *src[4] = {&tq, &tk, &tv, &tm};
    RUN_OK(LOOM_OP_ATTENTION, src, mask ? 4 : 3, at, &to);
}

static void test_attention_hand(void) {
    /* D = 1 (default scale 1): scores [0, ln3] -> p = [1/4, 3/4]; v = [4, 8] -> 7 */
    dims d = {1, 1, 2, 1, 1, 1};
    float q[1] = {1}, k[2] = {0, logf(3.0f)}, v[2] = {4, 8}, out[2];
    out[1] = -1.0f; /* guard */
    run_attn(d, q, k, v, NULL, out, NULL);
    CHECK_CLOSE(out[0], 7.0, 1e-6);
    CHECK(out[1] == -1.0f);

    /* D = 4: the default scale is 1/sqrt(4); q.k1 = 2 ln3 -> scaled ln3 again */
    dims d4 = {1, 1, 2, 1, 1, 4};
    float q4[4] = {2, 0, 0, 0}, k4[8] = {0, 0, 0, 0, logf(3.0f), 0, 0, 0};
    float v4[8] = {4, 0, 1, -4, 8, 4, 1, 0}, o4[4];
    loom_attention_attrs a0 = {0};
    run_attn(d4, q4, k4, v4, NULL, o4, &a0);
    CHECK_CLOSE(o4[0], 7.0, 1e-6);
    CHECK_CLOSE(o4[1], 3.0, 1e-6);
    CHECK_CLOSE(o4[2], 1.0, 1e-6);
    CHECK_CLOSE(o4[3], -1.0, 1e-6);
    /* an explicit scale 0.25 on q.k1 = 2 ln3 gives weights 1 : sqrt(3) */
    loom_attention_attrs a1 = {0.25f, 0, 0, 0, 0.0f};
    run_attn(d4, q4, k4, v4, NULL, o4, &a1);
    double w1 = sqrt(3.0) / (1.0 + sqrt(3.0));
    CHECK_CLOSE(o4[0], 4.0 + 4.0 * w1, 1e-6);

    /* an additive mask of -inf on key 1 leaves only v0 */
    float mask[2] = {0, -INFINITY};
    run_attn(d, q, k, v, mask, out, NULL);
    CHECK(out[0] == 4.0f);
    /* a fully masked row gives zeros, not NaN */
    float full[2] = {-INFINITY, -INFINITY};
    run_attn(d, q, k, v, full, out, NULL);
    CHECK(out[0] == 0.0f);
}

static void test_attention_invariants(void) {
    enum { D = 8, SKV = 5, H = 2, SQ = 3 };
    loom_rng rng;
    loom_rng_init(&rng, 41, 0);
    float q[SQ * H * D], k[SKV * H * D], v[SKV * H * D], out[SQ * H * D];
    fill_rand(q, SQ * H * D, &rng);
    fill_rand(k, SKV * H * D, &rng);
    fill_rand(v, SKV * H * D, &rng);

    /* one key: the output is v0 for every query */
    dims one = {1, SQ, 1, H, H, D};
    run_attn(one, q, k, v, NULL, out, NULL);
    for (int i = 0; i < SQ; i++) CHECK(memcmp(out + i * H * D, v, H * D * sizeof(float)) == 0);

    /* identical keys: the output is the mean of v */
    float same[SKV * H * D];
    for (int j = 0; j < SKV; j++) memcpy(same + j * H * D, k, H * D * sizeof(float));
    dims dd = {1, SQ, SKV, H, H, D};
    run_attn(dd, q, same, v, NULL, out, NULL);
    for (int i = 0; i < SQ; i++)
        for (int h = 0; h < H; h++)
            for (int e = 0; e < D; e++) {
                double mean = 0;
                for (int j = 0; j < SKV; j++) mean += v[(j * H + h) * D + e];
                CHECK_CLOSE(out[(i * H + h) * D + e], mean / SKV, 1e-6);
            }

    /* causal from position 0: the first query sees only key 0 -> v0 */
    loom_attention_attrs causal = {0, 1, 0, 0, 0.0f};
    run_attn(dd, q, k, v, NULL, out, &causal);
    CHECK(memcmp(out, v, H * D * sizeof(float)) == 0);
    /* q_pos_offset -1: query 0 sees nothing -> zeros */
    loom_attention_attrs before = {0, 1, -1, 0, 0.0f};
    run_attn(dd, q, k, v, NULL, out, &before);
    for (int e = 0; e < H * D; e++) CHECK(out[e] == 0.0f);
    CHECK(memcmp(out + H * D, v, H * D * sizeof(float)) == 0); /* query 1 sees key 0 */
}

/* Straightforward oracle: every (b, i, h) in double, GQA by index, mask, causal. */
static void naive_attention(dims d, const float *q, const float *k, const float *v,
                            const float *mask, float scale, int causal, int qpos, int window, float *out) {
    int g = d.Hq / d.Hkv;
    double p[64];
    for (int b = 0; b < d.B; b++)
        for (int i = 0; i < d.Sq; i++)
            for (int h = 0; h < d.Hq; h++) {
                const float *qv = q + ((b * d.Sq + i) * d.Hq + h) * d.D;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < d.Skv; j++) {
                    const float *kv = k + ((b * d.Skv + j) * d.Hkv + h / g) * d.D;
                    double s = 0;
                    for (int e = 0; e < d.D; e++) s += (double)qv[e] * kv[e];
                    s = s * scale + (mask ? mask[i * d.Skv + j] : 0.0);
                    if (causal && (j > qpos + i || (window > 0 && j <= qpos + i - window))) s = -INFINITY;
                    p[j] = s;
                    if (s > mx) mx = s;
                }
                for (int j = 0; j < d.Skv; j++) sum += p[j] = exp(p[j] - mx);
                for (int e = 0; e < d.D; e++) {
                    double acc = 0;
                    for (int j = 0; j < d.Skv; j++)
                        acc += p[j] * v[((b * d.Skv + j) * d.Hkv + h / g) * d.D + e];
                    out[((b * d.Sq + i) * d.Hq + h) * d.D + e] = (float)(acc / sum);
                }
            }
}

static void test_attention_random(void) {
    static const dims cases[] = {
        {1, 1, 1, 1, 1, 1}, {2, 3, 5, 4, 2, 8}, {1, 4, 4, 6, 3, 16}, {2, 1, 17, 8, 1, 5},
        {1, 7, 9, 2, 2, 3},
    };
    loom_rng rng;
    loom_rng_init(&rng, 42, 0);
    for (int c = 0; c < 5; c++) {
        dims d = cases[c];
        int nq = d.B * d.Sq * d.Hq * d.D, nk = d.B * d.Skv * d.Hkv * d.D;
        float *q = falloc(nq), *k = falloc(nk), *v = falloc(nk), *out = falloc(nq),
              *want = falloc(nq), *mask = falloc(d.Sq * d.Skv);
        fill_rand(q, nq, &rng);
        fill_rand(k, nk, &rng);
        fill_rand(v, nk, &rng);
        fill_rand(mask, d.Sq * d.Skv, &rng);
        for (int variant = 0; variant < 7; variant++) {
            /* 4..6: causal with a sliding window of 1, 2, 3 keys */
            int causal = variant & 1 || variant >= 4, use_mask = (variant >> 1) & 1, window = variant >= 4 ? variant - 3 : 0;
            int qpos = d.Skv - d.Sq; /* queries are the last Sq positions */
            float scale = variant == 3 ? 0.3f : 0.0f;
            loom_attention_attrs at = {scale, causal, qpos, window, 0.0f};
            naive_attention(d, q, k, v, use_mask ? mask : NULL,
                            scale != 0.0f ? scale : (float)(1.0 / sqrt(d.D)), causal, qpos, window, want);
            run_attn(d, q, k, v, use_mask ? mask : NULL, out, &at);
            for (int i = 0; i < nq; i++) CHECK_CLOSE(out[i], want[i], 1e-6);
        }
        /* bit-identical for any thread count */
        loom_tensor tq, tk, tv, tm, to;
        TENSOR(tq, LOOM_F32, q, d.B, d.Sq, d.Hq, d.D);
        TENSOR(tk, LOOM_F32, k, d.B, d.Skv, d.Hkv, d.D);
        TENSOR(tv, LOOM_F32, v, d.B, d.Skv, d.Hkv, d.D);
        TENSOR(tm, LOOM_F32, mask, d.Sq, d.Skv);
        TENSOR(to, LOOM_F32, out, d.B, d.Sq, d.Hq, d.D);
        const loom_tensor *src[4] = {&tq, &tk, &tv, &tm};
        loom_attention_attrs at = {0, 1, d.Skv - d.Sq, 0, 0.0f};
        check_thread_invariance(LOOM_OP_ATTENTION, src, 4, &at, &to);
        free(q), free(k), free(v), free(out), free(want), free(mask);
    }
}

/* GQA equals MHA with each kv head repeated for its query heads. */
static void test_attention_gqa(void) {
    enum { B = 2, SQ = 3, SKV = 4, HQ = 6, HKV = 2, D = 5, G = HQ / HKV };
    loom_rng rng;
    loom_rng_init(&rng, 43, 0);
    float q[B * SQ * HQ * D], k[B * SKV * HKV * D], v[B * SKV * HKV * D];
    float kr[B * SKV * HQ * D], vr[B * SKV * HQ * D], o1[B * SQ * HQ * D], o2[B * SQ * HQ * D];
    fill_rand(q, B * SQ * HQ * D, &rng);
    fill_rand(k, B * SKV * HKV * D, &rng);
    fill_rand(v, B * SKV * HKV * D, &rng);
    for (int bj = 0; bj < B * SKV; bj++)
        for (int h = 0; h < HQ; h++) {
            memcpy(kr + (bj * HQ + h) * D, k + (bj * HKV + h / G) * D, D * sizeof(float));
            memcpy(vr + (bj * HQ + h) * D, v + (bj * HKV + h / G) * D, D * sizeof(float));
        }
    loom_attention_attrs at = {0, 1, 1, 0, 0.0f};
    run_attn((dims){B, SQ, SKV, HQ, HKV, D}, q, k, v, NULL, o1, &at);
    run_attn((dims){B, SQ, SKV, HQ, HQ, D}, q, kr, vr, NULL, o2, &at);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);
}

/* K/V as views into a larger cache (rows past Skv hold NaN); f16/bf16 caches
 * equal f32 caches converted up front; causal never reads keys it masks. */
static void test_attention_cache_views(void) {
    enum { SMAX = 8, SKV = 5, H = 2, D = 4, SQ = 2 };
    loom_rng rng;
    loom_rng_init(&rng, 44, 0);
    float q[SQ * H * D], kc[SMAX * H * D], vc[SMAX * H * D], o1[SQ * H * D], o2[SQ * H * D];
    fill_rand(q, SQ * H * D, &rng);
    fill_rand(kc, SMAX * H * D, &rng);
    fill_rand(vc, SMAX * H * D, &rng);
    loom_attention_attrs at = {0, 1, SKV - SQ, 0, 0.0f};
    run_attn((dims){1, SQ, SKV, H, H, D}, q, kc, vc, NULL, o1, &at);
    for (int i = SKV * H * D; i < SMAX * H * D; i++) kc[i] = vc[i] = NAN;

    /* cache laid out [S_max, H, D] per batch; view [1, Skv, H, D] */
    loom_tensor tq, tk, tv, to;
    TENSOR(tq, LOOM_F32, q, 1, SQ, H, D);
    TENSOR(tk, LOOM_F32, kc, 1, SKV, H, D);
    tk.stride[0] = SMAX * H * D;
    tv = tk;
    tv.data = vc;
    TENSOR(to, LOOM_F32, o2, 1, SQ, H, D);
    const loom_tensor *src[3] = {&tq, &tk, &tv};
    RUN_OK(LOOM_OP_ATTENTION, src, 3, &at, &to);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);

    /* whole cache as Skv = S_max, causal: the NaN rows are never visible */
    tk.shape[1] = tv.shape[1] = SMAX;
    RUN_OK(LOOM_OP_ATTENTION, src, 3, &at, &to);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);
    tk.shape[1] = tv.shape[1] = SKV;

    /* half-precision caches */
    for (int dt = LOOM_F16; dt <= LOOM_BF16; dt++) {
        uint16_t kh[SKV * H * D], vh[SKV * H * D];
        float ku[SKV * H * D], vu[SKV * H * D];
        for (int i = 0; i < SKV * H * D; i++) {
            kh[i] = dt == LOOM_F16 ? loom_f32_to_f16(kc[i]) : loom_f32_to_bf16(kc[i]);
            vh[i] = dt == LOOM_F16 ? loom_f32_to_f16(vc[i]) : loom_f32_to_bf16(vc[i]);
            ku[i] = dt == LOOM_F16 ? loom_f16_to_f32(kh[i]) : loom_bf16_to_f32(kh[i]);
            vu[i] = dt == LOOM_F16 ? loom_f16_to_f32(vh[i]) : loom_bf16_to_f32(vh[i]);
        }
        run_attn((dims){1, SQ, SKV, H, H, D}, q, ku, vu, NULL, o1, &at);
        TENSOR(tk, (loom_dtype)dt, kh, 1, SKV, H, D);
        TENSOR(tv, (loom_dtype)dt, vh, 1, SKV, H, D);
        RUN_OK(LOOM_OP_ATTENTION, src, 3, &at, &to);
        CHECK(memcmp(o1, o2, sizeof o1) == 0);
    }

    /* q as a permuted view: buffer [H, Sq, D] seen as [1, Sq, H, D] */
    float qb[H * SQ * D];
    for (int i = 0; i < SQ; i++)
        for (int h = 0; h < H; h++) memcpy(qb + (h * SQ + i) * D, q + (i * H + h) * D, D * 4);
    run_attn((dims){1, SQ, SKV, H, H, D}, q, kc, vc, NULL, o1, &at);
    TENSOR(tq, LOOM_F32, qb, 1, SQ, H, D);
    tq.stride[1] = D;
    tq.stride[2] = SQ * D;
    TENSOR(tk, LOOM_F32, kc, 1, SKV, H, D);
    TENSOR(tv, LOOM_F32, vc, 1, SKV, H, D);
    RUN_OK(LOOM_OP_ATTENTION, src, 3, &at, &to);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);
}

/* The kernel refuses to run without its scratch rather than crash. */
static void test_attention_scratch(void) {
    float q[2] = {1, 2}, k[4] = {1, 0, 0, 1}, o[2];
    loom_tensor tq, tk, to;
    TENSOR(tq, LOOM_F32, q, 1, 1, 1, 2);
    TENSOR(tk, LOOM_F32, k, 1, 2, 1, 2);
    TENSOR(to, LOOM_F32, o, 1, 1, 1, 2);
    const loom_tensor *src[3] = {&tq, &tk, &tk};
    /* at least the reference's (the optimised kernels may need more) */
    CHECK(loom_op_get(LOOM_OP_ATTENTION)->scratch_size(src, 3, &to, NULL) >= 2 * sizeof(double));
    loom_kernel_args a = {.src = {&tq, &tk, &tk}, .n_src = 3, .dst = &to, .nth = 1};
    CHECK_FAILS(loom_op_get(LOOM_OP_ATTENTION)->ref(&a));
}

int main(void) {
    loom_ops_init(); /* the fused layer's ops in the op table */
    RUN_TEST(test_attention_hand);
    RUN_TEST(test_attention_invariants);
    RUN_TEST(test_attention_random);
    RUN_TEST(test_attention_gqa);
    RUN_TEST(test_attention_cache_views);
    RUN_TEST(test_attention_scratch);
    return TEST_SUMMARY();
}
