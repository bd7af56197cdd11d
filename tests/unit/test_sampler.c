/* Sampler: greedy, temperature, top-k, top-p, seeds, parameter errors. */
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
    loom_sampler_params sp = {temp, k, p, seed};
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
    CHECK(s == NULL);
}

/* The sampler sorts only the tokens that can be in the nucleus; this
 * reference takes the same probabilities (the vector softmax), sorts all of
 * them (ties: lower id first; no sort without top-k or top-p) and draws with the same
 * Philox stream. Every draw must pick the same token: flat, peaked and tied
 * logits, top-k below and above the nucleus, temperatures. */
static const double *ref_prob;
static int ref_desc(const void *a, const void *b) {
    int ia = *(const int *)a, ib = *(const int *)b;
    if (ref_prob[ia] != ref_prob[ib]) return ref_prob[ia] < ref_prob[ib] ? 1 : -1;
    return ia - ib;
}

static int ref_sample(const float *logits, int V, float temp, int k, float p, loom_rng *rng, double *prob,
                      int *idx) {
    float *pf = malloc((size_t)V * sizeof *pf);
    loom_vec_fns_for(loom_cpu_isa())->softmax(logits, NULL, pf, V, V, 1.0f / temp);
    for (int i = 0; i < V; i++) prob[i] = pf[i], idx[i] = i;
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
                        mismatches += t != ref_sample(l, V, temps[a], ks[c], tops[b], &r, prob, idx);
                    }
                    loom_sampler_free(s);
                    cases++;
                }
    }
    CHECK_MSG(mismatches == 0, "%d of %d draws differ from sorting every token", mismatches, cases * 40);
    free(l), free(prob), free(idx);
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
    RUN_TEST(test_threads_independent);
    return TEST_SUMMARY();
}
