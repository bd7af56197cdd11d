/* Sampler: greedy, temperature, top-k, top-p, min-p, repetition penalty,
 * seeds, parameter errors. */
#include <pthread.h>
#include <string.h>

#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "base/cpu.h"
#include "base/rng.h"
#include "ops/vec/vec.h"
#include "loom.h"

static loom_sampler *make(int V, float temp, int k, float p, uint64_t seed) {
    loom_sampler_params sp = {.temperature = temp, .top_k = k, .top_p = p, .seed = seed};
    loom_sampler *s = NULL;
    CHECK(loom_sampler_init(&s, V, &sp) == LOOM_OK);
    return s;
}

static void test_greedy(void) {
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, -INFINITY};
    loom_sampler *s = make(6, 0.0f, 0, 1.0f, 1);
    int32_t t = -1;
    CHECK(loom_sampler_sample(s, l, &t) == LOOM_OK);
    CHECK(t == 1);  /* first of the tied maxima */
    loom_sampler_free(s);
    /* a temperature whose inverse overflows, or a +inf logit (the first), is greedy */
    float li[6] = {0.5f, 2.0f, INFINITY, 2.0f, INFINITY, -INFINITY};
    s = make(6, 1e-39f, 0, 0.9f, 1);
    CHECK(loom_sampler_sample(s, l, &t) == LOOM_OK && t == 1);
    loom_sampler_free(s);
    s = make(6, 1.0f, 0, 0.9f, 1);
    CHECK(loom_sampler_sample(s, li, &t) == LOOM_OK && t == 2);
    loom_sampler_free(s);
    s = make(6, 1.0f, 1, 1.0f, 9);  /* top-k 1 is greedy */
    for (int i = 0; i < 50; i++) {
        CHECK(loom_sampler_sample(s, l, &t) == LOOM_OK);
        CHECK(t == 1);
    }
    loom_sampler_free(s);
    s = make(6, 1.0f, 0, 1e-6f, 9);  /* tiny top-p keeps only the best */
    for (int i = 0; i < 50; i++) {
        loom_sampler_sample(s, l, &t);
        CHECK(t == 1);
    }
    loom_sampler_free(s);
    float nanl[3] = {NAN, NAN, NAN}, some[3] = {0.5f, NAN, 2.0f}, last[3] = {0.5f, 1.0f, NAN};
    for (int greedy = 0; greedy < 2; greedy++) { /* all NaN, or one among finite logits */
        s = make(3, greedy ? 0.0f : 0.8f, 0, 1.0f, 1);
        CHECK(loom_sampler_sample(s, nanl, &t) == LOOM_ERR_INVALID_ARG);
        CHECK(loom_sampler_sample(s, some, &t) == LOOM_ERR_INVALID_ARG);
        CHECK(loom_sampler_sample(s, last, &t) == LOOM_ERR_INVALID_ARG);
        loom_sampler_free(s);
    }
}

/* Frequencies follow softmax(l / T); top-k and top-p restrict the support. */
static void test_distribution(void) {
    float l[4] = {1.0f, 0.0f, -1.0f, 0.5f};
    const float T = 0.7f;
    double p[4], z = 0;
    for (int i = 0; i < 4; i++) z += p[i] = exp(l[i] / T);
    for (int i = 0; i < 4; i++) p[i] /= z;
    loom_sampler *s = make(4, T, 0, 1.0f, 123);
    int cnt[4] = {0}, N = 40000;
    for (int i = 0; i < N; i++) {
        int32_t t;
        loom_sampler_sample(s, l, &t);
        CHECK(t >= 0 && t < 4);
        cnt[t]++;
    }
    for (int i = 0; i < 4; i++) {
        double sd = sqrt(N * p[i] * (1 - p[i]));
        CHECK_MSG(fabs(cnt[i] - N * p[i]) < 5 * sd, "token %d: %d vs %.0f", i, cnt[i], N * p[i]);
    }
    loom_sampler_free(s);
    s = make(4, 1.0f, 2, 1.0f, 5);  /* top-k 2: only tokens 0 and 3 */
    for (int i = 0; i < 2000; i++) {
        int32_t t;
        loom_sampler_sample(s, l, &t);
        CHECK(t == 0 || t == 3);
    }
    loom_sampler_free(s);
    /* top-p: probabilities at T=1 are about .41 .15 .06 .25 (sorted 0,3,1,2);
     * p = 0.6 needs tokens 0 and 3 (0.66) */
    s = make(4, 1.0f, 0, 0.6f, 5);
    for (int i = 0; i < 2000; i++) {
        int32_t t;
        loom_sampler_sample(s, l, &t);
        CHECK(t == 0 || t == 3);
    }
    loom_sampler_free(s);
}

static void test_seeds(void) {
    float l[50];
    for (int i = 0; i < 50; i++) l[i] = (float)((i * 37) % 11) * 0.3f;
    int32_t a[100], b[100], c[100];
    loom_sampler *s1 = make(50, 1.0f, 0, 0.95f, 42), *s2 = make(50, 1.0f, 0, 0.95f, 42),
                 *s3 = make(50, 1.0f, 0, 0.95f, 43);
    for (int i = 0; i < 100; i++) {
        loom_sampler_sample(s1, l, &a[i]);
        loom_sampler_sample(s2, l, &b[i]);
        loom_sampler_sample(s3, l, &c[i]);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    loom_sampler_free(s1);
    loom_sampler_free(s2);
    loom_sampler_free(s3);
}

static void test_param_errors(void) {
    loom_sampler *s = NULL;
    loom_sampler_params p = loom_sampler_default_params();
    CHECK(loom_sampler_init(&s, 0, &p) == LOOM_ERR_INVALID_ARG);
    p.temperature = -0.5f;
    CHECK(loom_sampler_init(&s, 10, &p) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "--temp") != NULL);
    p = loom_sampler_default_params();
    p.top_p = 0.0f;
    CHECK(loom_sampler_init(&s, 10, &p) == LOOM_ERR_INVALID_ARG);
    p.top_p = 1.01f;
    CHECK(loom_sampler_init(&s, 10, &p) == LOOM_ERR_INVALID_ARG);
    p = loom_sampler_default_params();
    p.top_k = -1;
    CHECK(loom_sampler_init(&s, 10, &p) == LOOM_ERR_INVALID_ARG);
    const float bad_min_p[] = {-0.1f, 1.5f, NAN}, bad_pen[] = {-1.0f, INFINITY, NAN};
    for (int i = 0; i < 3; i++) {
        p = loom_sampler_default_params();
        p.min_p = bad_min_p[i];
        CHECK(loom_sampler_init(&s, 10, &p) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "--min-p"));
        p = loom_sampler_default_params();
        p.repeat_penalty = bad_pen[i];
        CHECK(loom_sampler_init(&s, 10, &p) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "--repeat-penalty"));
    }
    p = loom_sampler_default_params();
    p.repeat_last_n = -1;
    CHECK(loom_sampler_init(&s, 10, &p) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "--repeat-last-n"));
    CHECK(s == NULL);
    CHECK(loom_sampler_accept(NULL, 0) == LOOM_ERR_INVALID_ARG);
    loom_sampler_reset(NULL);  /* no-op, like free */
}

/* The sampler sorts only the tokens that can be in the nucleus; this
 * reference takes the same probabilities (the vector softmax), sorts all of
 * them (ties: lower id first; no sort without top-k or top-p) and draws with the same
 * Philox stream. Every draw must pick the same token: flat, peaked and tied
 * logits, top-k below and above the nucleus, temperatures. */
static const double *ref_prob;
static int ref_min_p_cuts;  /* draws where min-p removed candidates */
static int ref_desc(const void *a, const void *b) {
    int ia = *(const int *)a, ib = *(const int *)b;
    if (ref_prob[ia] != ref_prob[ib]) return ref_prob[ia] < ref_prob[ib] ? 1 : -1;
    return ia - ib;
}

static int ref_sample(const float *logits, int V, float temp, int k, float p, float min_p, loom_rng *rng,
                      double *prob, int *idx) {
    float *pf = malloc((size_t)V * sizeof *pf);
    loom_vec_fns_for(loom_cpu_isa())->softmax(logits, NULL, pf, V, V, 1.0f / temp);
    float pmax = 0.0f;
    for (int i = 0; i < V; i++) prob[i] = pf[i], idx[i] = i, pmax = pf[i] > pmax ? pf[i] : pmax;
    free(pf);
    ref_prob = prob;
    if (k > 0 || p < 1.0f) qsort(idx, (size_t)V, sizeof *idx, ref_desc); /* else in id order */
    int n = k > 0 && k < V ? k : V;
    double cum = 0.0;
    for (int i = 0; i < n && p < 1.0f; i++)
        if ((cum += prob[idx[i]]) >= p) {
            n = i + 1;
            break;
        }
    if (min_p > 0.0f) { /* p >= min_p * p_max, in the same order */
        int kept = 0;
        for (int i = 0; i < n; i++)
            if (prob[idx[i]] >= (double)(min_p * pmax)) idx[kept++] = idx[i];
        ref_min_p_cuts += kept < n;
        n = kept;
    }
    double mass = 0.0, cdf = 0.0;
    for (int i = 0; i < n; i++) mass += prob[idx[i]];
    double coin = (double)loom_rng_uniform(rng) * mass;
    for (int i = 0; i < n; i++)
        if (coin < (cdf += prob[idx[i]])) return idx[i];
    return idx[n - 1];
}

static void test_matches_full_sort(void) {
    const int V = 1000;
    float *l = malloc(V * sizeof *l);
    double *prob = malloc(V * sizeof *prob);
    int *idx = malloc(V * sizeof *idx);
    const float temps[] = {0.7f, 1.0f, 1.5f}, tops[] = {0.3f, 0.9f, 0.99f, 1.0f};
    const int ks[] = {0, 1, 5, 50, 2000};
    loom_rng g;
    loom_rng_init(&g, 77, 1);
    int mismatches = 0, cases = 0;
    for (int shape = 0; shape < 3; shape++) {
        for (int i = 0; i < V; i++) {
            float u = loom_rng_uniform(&g) * 2.0f - 1.0f;
            l[i] = shape == 0 ? u : shape == 1 ? 8.0f * u : floorf(4.0f * u) * 0.5f; /* flat, peaked, tied */
        }
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 4; b++)
                for (int c = 0; c < 5; c++) {
                    uint64_t seed = 1000u + (uint64_t)(shape * 100 + a * 20 + b * 5 + c);
                    loom_sampler *s = make(V, temps[a], ks[c], tops[b], seed);
                    loom_rng r;
                    loom_rng_init(&r, seed, 0);
                    for (int d = 0; d < 40; d++) {
                        int32_t t = -1;
                        CHECK(loom_sampler_sample(s, l, &t) == LOOM_OK);
                        mismatches += t != ref_sample(l, V, temps[a], ks[c], tops[b], 0.0f, &r, prob, idx);
                    }
                    loom_sampler_free(s);
                    cases++;
                }
    }
    CHECK_MSG(mismatches == 0, "%d of %d draws differ from sorting every token", mismatches, cases * 40);
    free(l), free(prob), free(idx);
}

/* min-p keeps the tokens with p >= min_p * p_max (p after temperature), and
 * the repetition penalty divides the positive logits of the tokens in the
 * last N accepted and multiplies the negative ones, each token once: every
 * draw as the full-sort reference over logits penalized by hand. */
static void test_min_p_penalty_reference(void) {
    const int V = 600;
    float *l = malloc(V * sizeof *l), *pl = malloc(V * sizeof *pl);
    double *prob = malloc(V * sizeof *prob);
    int *idx = malloc(V * sizeof *idx), *seen = malloc(V * sizeof *seen);
    int32_t *hist = malloc(400 * sizeof *hist);
    const float min_ps[] = {0.0f, 0.05f, 0.5f, 1.0f}, pens[] = {1.0f, 1.3f, 0.8f};
    const int last_ns[] = {1, 8, 64};
    loom_rng g;
    loom_rng_init(&g, 5, 1);
    int mismatches = 0, draws = 0;
    ref_min_p_cuts = 0;
    for (int i = 0; i < V; i++) l[i] = 6.0f * (loom_rng_uniform(&g) * 2.0f - 1.0f);
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 3; c++)
                for (int d = 0; d < 2; d++) {
                    loom_sampler_params sp = {.temperature = d ? 1.4f : 0.8f, .top_k = d ? 0 : 100,
                                              .top_p = d ? 1.0f : 0.95f, .seed = (uint64_t)(a * 100 + b * 10 + c),
                                              .min_p = min_ps[a], .repeat_penalty = pens[b],
                                              .repeat_last_n = last_ns[c]};
                    loom_sampler *s = NULL;
                    CHECK(loom_sampler_init(&s, V, &sp) == LOOM_OK);
                    if (!s) continue;
                    loom_rng r;
                    loom_rng_init(&r, sp.seed, 0);
                    int nh = 0;
                    for (int i = 0; i < 30; i++) {  /* a prompt of 30 tokens, some repeated */
                        hist[nh] = (int32_t)((i * 7) % 23);
                        CHECK(loom_sampler_accept(s, hist[nh++]) == LOOM_OK);
                    }
                    for (int step = 0; step < 40; step++) {
                        memcpy(pl, l, V * sizeof *pl);
                        for (int i = 0; i < V; i++) seen[i] = 0;
                        for (int i = nh - last_ns[c] > 0 ? nh - last_ns[c] : 0; i < nh; i++)
                            if (!seen[hist[i]]++) pl[hist[i]] = pl[hist[i]] > 0 ? pl[hist[i]] / pens[b]
                                                                                   : pl[hist[i]] * pens[b];
                        int32_t t = -1;
                        CHECK(loom_sampler_sample(s, l, &t) == LOOM_OK);
                        int want = ref_sample(pl, V, sp.temperature, sp.top_k, sp.top_p, sp.min_p, &r, prob, idx);
                        mismatches += t != want;
                        draws++;
                        if (t < 0) break;
                        CHECK(loom_sampler_accept(s, t) == LOOM_OK);
                        hist[nh++] = t;
                    }
                    loom_sampler_free(s);
                }
    CHECK_MSG(mismatches == 0, "%d of %d draws differ from the reference", mismatches, draws);
    CHECK(ref_min_p_cuts > 100);  /* min-p really cut (after top-k and top-p, too) */
    free(l), free(pl), free(prob), free(idx), free(seen), free(hist);
}

/* min-p's support and frequencies; the penalty's window, distinct tokens,
 * signs and reset; the logits are not modified. */
static void test_min_p_penalty_cases(void) {
    /* T = 1: p / p_max = 1, 0.37, 0.14, 0.05, 0.007 */
    float l[5] = {2.0f, 1.0f, 0.0f, -1.0f, -3.0f};
    loom_sampler_params sp = {.temperature = 1.0f, .top_p = 1.0f, .seed = 3, .min_p = 0.1f};
    loom_sampler *s = NULL;
    CHECK(loom_sampler_init(&s, 5, &sp) == LOOM_OK);
    int cnt[5] = {0}, N = 30000;
    for (int i = 0; i < N; i++) {
        int32_t t = 0;
        loom_sampler_sample(s, l, &t);
        cnt[t]++;
    }
    double z = exp(2.0) + exp(1.0) + 1.0;
    for (int i = 0; i < 3; i++) {
        double p = exp(l[i]) / z, sd = sqrt(N * p * (1 - p));
        CHECK_MSG(fabs(cnt[i] - N * p) < 5 * sd, "min-p 0.1: token %d drawn %d times, expected %.0f", i, cnt[i], N * p);
    }
    CHECK(cnt[3] == 0 && cnt[4] == 0);
    loom_sampler_free(s);
    /* at T = 2 the ratios are 1, 0.61, 0.37, 0.22, 0.08: min-p 0.1 keeps four */
    sp.temperature = 2.0f;
    CHECK(loom_sampler_init(&s, 5, &sp) == LOOM_OK);
    int seen3 = 0, seen4 = 0;
    for (int i = 0; i < 4000; i++) {
        int32_t t = 0;
        loom_sampler_sample(s, l, &t);
        seen3 += t == 3, seen4 += t == 4;
    }
    CHECK(seen3 > 0 && seen4 == 0);
    loom_sampler_free(s);
    sp.min_p = 1.0f;  /* only the most likely */
    CHECK(loom_sampler_init(&s, 5, &sp) == LOOM_OK);
    for (int i = 0; i < 200; i++) {
        int32_t t = -1;
        loom_sampler_sample(s, l, &t);
        CHECK(t == 0);
    }
    loom_sampler_free(s);

    /* greedy with the penalty */
    float g[4] = {2.0f, 1.9f, -1.0f, -1.1f}, keep[4];
    memcpy(keep, g, sizeof g);
    loom_sampler_params gp = {.temperature = 0.0f, .top_p = 1.0f, .repeat_penalty = 1.2f, .repeat_last_n = 2};
    CHECK(loom_sampler_init(&s, 4, &gp) == LOOM_OK);
    int32_t t = -1;
    CHECK(loom_sampler_sample(s, g, &t) == LOOM_OK && t == 0);   /* no history yet */
    CHECK(loom_sampler_accept(s, 0) == LOOM_OK);
    CHECK(loom_sampler_sample(s, g, &t) == LOOM_OK && t == 1);   /* 2 / 1.2 < 1.9 */
    CHECK(memcmp(g, keep, sizeof g) == 0);                       /* the caller's logits untouched */
    CHECK(loom_sampler_accept(s, 1) == LOOM_OK);                 /* both penalized: 1.67 > 1.58 */
    CHECK(loom_sampler_sample(s, g, &t) == LOOM_OK && t == 0);
    CHECK(loom_sampler_accept(s, 2) == LOOM_OK && loom_sampler_accept(s, 3) == LOOM_OK);
    CHECK(loom_sampler_sample(s, g, &t) == LOOM_OK && t == 0);   /* 0 and 1 left the window of 2 */
    float neg[4] = {-5.0f, -5.0f, -1.0f, -1.1f};                 /* negative: multiplied, -1.2 < -1.1 */
    loom_sampler_reset(s);
    CHECK(loom_sampler_sample(s, neg, &t) == LOOM_OK && t == 2); /* reset: no history */
    CHECK(loom_sampler_accept(s, 2) == LOOM_OK);
    CHECK(loom_sampler_sample(s, neg, &t) == LOOM_OK && t == 3);
    loom_sampler_free(s);
    /* a token repeated in the window is penalized once: 2 / 1.2 = 1.67 > 1.6 (not 2 / 1.2^3) */
    float r[2] = {2.0f, 1.6f};
    gp.repeat_last_n = 8;
    CHECK(loom_sampler_init(&s, 2, &gp) == LOOM_OK);
    for (int i = 0; i < 3; i++) CHECK(loom_sampler_accept(s, 0) == LOOM_OK);
    CHECK(loom_sampler_sample(s, r, &t) == LOOM_OK && t == 0);
    CHECK(loom_sampler_accept(s, 2) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "token 2"));
    CHECK(loom_sampler_accept(s, -1) == LOOM_ERR_INVALID_ARG);
    loom_sampler_free(s);
    /* penalty 0 (unset) and 1 are off; accept works without a history */
    for (int k = 0; k < 2; k++) {
        gp.repeat_penalty = (float)k;
        CHECK(loom_sampler_init(&s, 4, &gp) == LOOM_OK);
        CHECK(loom_sampler_accept(s, 0) == LOOM_OK);
        CHECK(loom_sampler_sample(s, g, &t) == LOOM_OK && t == 0);
        loom_sampler_free(s);
    }
}

/* Samplers on two threads at once draw what each draws alone: the candidate
 * sort keeps no global state (it once sorted through a file-scope pointer). */
#define TS_V 3000
#define TS_N 200
typedef struct { float logits[TS_V]; uint64_t seed; int32_t out[TS_N]; } ts_job;

static void *ts_run(void *arg) {
    ts_job *j = arg;
    loom_sampler_params p = loom_sampler_default_params();
    p.temperature = 1.3f, p.top_p = 0.95f, p.top_k = 1500, p.seed = j->seed;
    loom_sampler *s = NULL;
    if (loom_sampler_init(&s, TS_V, &p) != LOOM_OK) return NULL;
    for (int i = 0; i < TS_N; i++)
        if (loom_sampler_sample(s, j->logits, &j->out[i]) != LOOM_OK) j->out[i] = -1;
    loom_sampler_free(s);
    return NULL;
}

static void test_threads_independent(void) {
    static ts_job job[2], alone[2];
    loom_rng r;
    loom_rng_init(&r, 17, 0);
    for (int t = 0; t < 2; t++) {
        for (int i = 0; i < TS_V; i++) job[t].logits[i] = 3.0f * loom_rng_uniform(&r) * (t ? -1.0f : 1.0f);
        job[t].seed = 100 + (uint64_t)t;
        alone[t] = job[t];
        ts_run(&alone[t]);
    }
    for (int rep = 0; rep < 5; rep++) {
        pthread_t th[2];
        for (int t = 0; t < 2; t++) CHECK(pthread_create(&th[t], NULL, ts_run, &job[t]) == 0);
        for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
        for (int t = 0; t < 2; t++) CHECK(memcmp(job[t].out, alone[t].out, sizeof job[t].out) == 0);
    }
    CHECK(alone[0].out[0] >= 0 && memcmp(alone[0].out, alone[1].out, sizeof alone[0].out) != 0);
}

int main(void) {
    RUN_TEST(test_greedy);
    RUN_TEST(test_distribution);
    RUN_TEST(test_seeds);
    RUN_TEST(test_param_errors);
    RUN_TEST(test_matches_full_sort);
    RUN_TEST(test_min_p_penalty_reference);
    RUN_TEST(test_min_p_penalty_cases);
    RUN_TEST(test_threads_independent);
    return TEST_SUMMARY();
}
