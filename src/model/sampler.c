/*
 * Sampler: repetition penalty, greedy, temperature, top-k, top-p, min-p.
 * Random choices come from a Philox stream keyed by the seed, one draw per
 * sampled token, so a seed reproduces a run exactly regardless of thread count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/rng.h"
#include "base/status.h"
#include "ops/vec/vec.h"

struct loom_sampler {
    loom_sampler_params p;
    int      vocab;
    loom_rng rng;
    int     *idx;     /* [vocab] candidate ids */
    int     *tmp;     /* [vocab] merge sort's second buffer */
    float   *prob;    /* [vocab] probabilities by id (the vector softmax's; sums in double) */
    /* repetition penalty (NULL when off) */
    float   *work;    /* [vocab] the penalized logits */
    int32_t *hist;    /* [repeat_last_n] ring of the last accepted tokens */
    int32_t *uniq;    /* [repeat_last_n] the history sorted, to penalize each token once */
    int      hist_n, hist_next;
};

loom_sampler_params loom_sampler_default_params(void) {
    loom_sampler_params p = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 0,
                             .min_p = 0.0f, .repeat_penalty = 1.0f, .repeat_last_n = 64};
    return p;
}

static int penalty_on(const loom_sampler_params *p) {
    return p->repeat_last_n > 0 && p->repeat_penalty != 0.0f && p->repeat_penalty != 1.0f;
}

loom_status loom_sampler_init(loom_sampler **out, int vocab_size, const loom_sampler_params *p) {
    LOOM_RETURN_IF(!out || !p, LOOM_ERR_INVALID_ARG, "sampler_init: NULL argument");
    *out = NULL;
    LOOM_RETURN_IF(vocab_size < 1, LOOM_ERR_INVALID_ARG, "sampler: vocabulary size %d < 1", vocab_size);
    LOOM_RETURN_IF(!(p->temperature >= 0.0f) || isinf(p->temperature), LOOM_ERR_INVALID_ARG,
                   "--temp must be a finite number >= 0, got %g", (double)p->temperature);
    LOOM_RETURN_IF(p->top_k < 0, LOOM_ERR_INVALID_ARG, "--top-k must be >= 0, got %d", p->top_k);
    LOOM_RETURN_IF(!(p->top_p > 0.0f && p->top_p <= 1.0f), LOOM_ERR_INVALID_ARG,
                   "--top-p must be in (0, 1], got %g", (double)p->top_p);
    LOOM_RETURN_IF(!(p->min_p >= 0.0f && p->min_p <= 1.0f), LOOM_ERR_INVALID_ARG,
                   "--min-p must be in [0, 1], got %g", (double)p->min_p);
    LOOM_RETURN_IF(!(p->repeat_penalty >= 0.0f) || isinf(p->repeat_penalty), LOOM_ERR_INVALID_ARG,
                   "--repeat-penalty must be a finite number > 0 (1 = off), got %g", (double)p->repeat_penalty);
    LOOM_RETURN_IF(p->repeat_last_n < 0 || p->repeat_last_n > (1 << 24), LOOM_ERR_INVALID_ARG,
                   "--repeat-last-n must be in 0..%d, got %d", 1 << 24, p->repeat_last_n);
    loom_sampler *s = calloc(1, sizeof *s);
    LOOM_RETURN_IF(!s, LOOM_ERR_NOMEM, "out of memory");
    s->p = *p;
    s->vocab = vocab_size;
    s->idx = malloc((size_t)vocab_size * sizeof *s->idx);
    s->tmp = malloc((size_t)vocab_size * sizeof *s->tmp);
    s->prob = malloc((size_t)vocab_size * sizeof *s->prob);
    int pen = penalty_on(p);
    if (pen) {
        s->work = malloc((size_t)vocab_size * sizeof *s->work);
        s->hist = malloc((size_t)p->repeat_last_n * sizeof *s->hist);
        s->uniq = malloc((size_t)p->repeat_last_n * sizeof *s->uniq);
    }
    if (!s->idx || !s->tmp || !s->prob || (pen && (!s->work || !s->hist || !s->uniq))) {
        loom_sampler_free(s);
        return loom_set_error(LOOM_ERR_NOMEM, "out of memory");
    }
    loom_rng_init(&s->rng, p->seed, 0);
    *out = s;
    return LOOM_OK;
}

void loom_sampler_free(loom_sampler *s) {
    if (!s) return;
    free(s->idx);
    free(s->tmp);
    free(s->prob);
    free(s->work);
    free(s->hist);
    free(s->uniq);
    free(s);
}

loom_status loom_sampler_accept(loom_sampler *s, int32_t token) {
    LOOM_RETURN_IF(!s, LOOM_ERR_INVALID_ARG, "sampler_accept: NULL sampler");
    LOOM_RETURN_IF(token < 0 || token >= s->vocab, LOOM_ERR_INVALID_ARG,
                   "sampler_accept: token %d outside the vocabulary of %d", (int)token, s->vocab);
    if (!s->hist) return LOOM_OK;  /* no penalty: nothing to remember */
    s->hist[s->hist_next] = token;
    s->hist_next = (s->hist_next + 1) % s->p.repeat_last_n;
    if (s->hist_n < s->p.repeat_last_n) s->hist_n++;
    return LOOM_OK;
}

void loom_sampler_reset(loom_sampler *s) {
    if (s) s->hist_n = s->hist_next = 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* work = logits with each distinct token of the history penalized once. */
static const float *apply_penalty(loom_sampler *s, const float *logits) {
    memcpy(s->work, logits, (size_t)s->vocab * sizeof *s->work);
    memcpy(s->uniq, s->hist, (size_t)s->hist_n * sizeof *s->uniq);
    qsort(s->uniq, (size_t)s->hist_n, sizeof *s->uniq, cmp_i32);
    const float pen = s->p.repeat_penalty;
    for (int i = 0; i < s->hist_n; i++) {
        if (i > 0 && s->uniq[i] == s->uniq[i - 1]) continue;
        float *l = &s->work[s->uniq[i]];
        *l = *l > 0.0f ? *l / pen : *l * pen;
    }
    return s->work;
}

/* Candidate order: higher probability first; ties: lower id first, so the
 * order is total and reproducible. <0: a before b. (Sorted with the
 * probabilities passed along, not through a global, so samplers on several
 * threads do not share state.) */
static int by_prob_desc(const float *prob, int ia, int ib) {
    if (prob[ia] != prob[ib]) return prob[ia] < prob[ib] ? 1 : -1;
    return ia - ib;
}

/* Sorts idx[0..n) in by_prob_desc order: bottom-up merge sort through tmp
 * (n entries), O(n log n), stable. */
static void sort_by_prob(int *idx, int *tmp, int n, const float *prob) {
    int *a = idx, *b = tmp;
    for (int w = 1; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, o = lo;
            while (i < mid && j < hi) b[o++] = by_prob_desc(prob, a[j], a[i]) < 0 ? a[j++] : a[i++];
            while (i < mid) b[o++] = a[i++];
            while (j < hi) b[o++] = a[j++];
        }
        int *t = a;
        a = b, b = t;
    }
    if (a != idx)
        for (int i = 0; i < n; i++) idx[i] = a[i];
}

/* Reorders idx[0..n) so that its first k entries are the k first in
 * by_prob_desc order (in any order among themselves): quickselect, O(n). */
static void select_first(int *idx, int n, int k, const float *prob) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, pv = idx[mid], i = lo, j = hi;
        while (i <= j) {
            while (by_prob_desc(prob, idx[i], pv) < 0) i++;
            while (by_prob_desc(prob, idx[j], pv) > 0) j--;
            if (i <= j) {
                int t = idx[i];
                idx[i] = idx[j], idx[j] = t;
                i++, j--;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

loom_status loom_sampler_sample(loom_sampler *s, const float *logits, int32_t *token) {
    LOOM_RETURN_IF(!s || !logits || !token, LOOM_ERR_INVALID_ARG, "sample: NULL argument");
    const int V = s->vocab;
    int best = 0, nan_at = -1;
    for (int i = 0; i < V; i++) {
        if (logits[i] > logits[best]) best = i;
        if (isnan(logits[i]) && nan_at < 0) nan_at = i;
    }
    /* any NaN: a NaN in the forward pass (attention propagates one from q or K)
     * must not turn into a token; every sampling mode refuses it */
    LOOM_RETURN_IF(nan_at >= 0, LOOM_ERR_INVALID_ARG, "sample: logits contain NaN (first at token %d of %d)",
                   nan_at, V);
    if (s->hist && s->hist_n > 0) {  /* the penalty comes first, greedy included (llama.cpp's order) */
        logits = apply_penalty(s, logits);
        best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
    }
    /* greedy: T = 0, a T so small that 1/T overflows, or a +inf logit (the first) */
    float inv_t = s->p.temperature > 0.0f ? 1.0f / s->p.temperature : INFINITY;
    if (isinf(inv_t) || isinf(logits[best])) {
        *token = best;
        return LOOM_OK;
    }
    /* softmax(logits / T): the softmax op's vector row kernel (f32, 0.03 ms for
     * 49 152 tokens where exp in double took 0.37 ms); the sums below are in double */
    loom_vec_fns_for(loom_cpu_isa())->softmax(logits, NULL, s->prob, V, V, inv_t);
    int n = V;
    if (s->p.top_k > 0 || s->p.top_p < 1.0f) {
        /* Top-p first sorts only the tokens of probability >= (1 - top_p) / (V - 1):
         * the others hold less than 1 - top_p together, so the sorted ones reach
         * top_p and the nucleus is a prefix of them (llama2.c's cut). The order is
         * total, so the prefix is the one a sort of every token gives. Should the
         * sum fall short in floating point, the second pass takes every token.
         * Among those, only as many as hold top_p are sorted (quickselect, doubling).
         * Top-k selects its k first (quickselect) and sorts only them. */
        int cut = s->p.top_p < 1.0f && V > 1;
        for (int pass = cut ? 0 : 1; pass < 2; pass++) {
            int m = 0;
            double lo = pass == 0 ? (1.0 - (double)s->p.top_p) / (V - 1) : 0.0;
            for (int i = 0; i < V; i++)
                if (pass == 1 || s->prob[i] >= lo) s->idx[m++] = i;
            int limit = s->p.top_k > 0 && s->p.top_k < m ? s->p.top_k : m, reached = 0;
            if (s->p.top_p >= 1.0f) { /* top-k alone: only the first k need sorting */
                if (limit < m) select_first(s->idx, m, limit, s->prob);
                sort_by_prob(s->idx, s->tmp, limit, s->prob);
                n = limit;
                break;
            }
            /* the nucleus: bring the first K forward (quickselect on the rest), K doubling from
             * 64, until they hold top_p; then only those K are sorted */
            double held = 0.0;
            for (int k = limit < 64 ? limit : 64, have = 0;; k = k < limit / 2 ? 2 * k : limit) {
                if (k < m) select_first(s->idx + have, m - have, k - have, s->prob);
                for (int i = have; i < k; i++) held += s->prob[s->idx[i]];
                have = k;
                if (held < s->p.top_p && k < limit) continue;
                sort_by_prob(s->idx, s->tmp, k, s->prob);
                double cum = 0.0;
                n = k;
                for (int i = 0; i < k && !reached; i++) {
                    cum += s->prob[s->idx[i]];
                    if (cum >= s->p.top_p) n = i + 1, reached = 1;
                }
                if (reached || k == limit) break;  /* else the sorted sum fell short: more */
            }
            /* short of top_p: exact only when nothing was cut away, or top-k stopped first */
            if (reached || m == V || (s->p.top_k > 0 && s->p.top_k <= m)) break;
        }
    } else {
        for (int i = 0; i < V; i++) s->idx[i] = i;
    }
    if (s->p.min_p > 0.0f) {
        /* p >= min_p * p_max: of idx[0..n) (sorted by probability, or every id
         * in order) keep those; the most likely token always stays */
        const float floor_p = s->p.min_p * s->prob[best];
        int kept = 0;
        for (int i = 0; i < n; i++)
            if (s->prob[s->idx[i]] >= floor_p || s->idx[i] == best) s->idx[kept++] = s->idx[i];
        n = kept;
    }
    double mass = 0.0;
    for (int i = 0; i < n; i++) mass += s->prob[s->idx[i]];
    double coin = (double)loom_rng_uniform(&s->rng) * mass, cdf = 0.0;
    for (int i = 0; i < n; i++) {
        cdf += s->prob[s->idx[i]];
        if (coin < cdf) {
            *token = s->idx[i];
            return LOOM_OK;
        }
    }
    *token = s->idx[n - 1];  /* rounding left the coin past the last bucket */
    return LOOM_OK;
}
