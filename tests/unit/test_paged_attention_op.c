/* The paged_attention graph op (the batch engine's attention) against the
 * primitive attention op's reference kernel: a ragged batch of decode rows and
 * prompt chunks over a paged f32 KV cache whose blocks are shuffled, with and
 * without a sliding window (windows of 1 key, shorter and longer than a KV
 * chunk and a block, and longer than every sequence), with and without score
 * soft-capping, causal; every kernel
 * level (ref included), the batch-invariant path, 1..3 threads with every
 * phase run by every thread in turn (the executor's barriers between
 * phases). Each sequence's expectation: its keys gathered from its blocks
 * into a contiguous [1, kv_len, H_kv, D] and attention with
 * q_pos_offset = kv_len - q_len and the same window and cap. Tolerance 2^-11.
 * Cache rows outside a sequence's window hold NaN: a kernel that read them
 * would put NaN in the output. */
#include "graph/ops_init.h"
#include "test_ops_common.h"

enum { H = 4, HKV = 2, D = 16, BS = 4, NB = 24, MAXB = 6, NSEQ = 4 };

typedef struct {
    int q_len, kv_len; /* rows of this step, keys after it */
} seq;

/* Slot of (sequence s, position p) in the cache: block table row s. */
static int64_t slot(const int32_t *table, int s, int64_t p) { return (int64_t)table[s * MAXB + p / BS] * BS + p % BS; }

static void run(const seq *sq, int n_decode, int window, float softcap, loom_rng *rng) {
    int64_t T = 0, row_start[NSEQ + 1] = {0}, kv_len[NSEQ], pos[64], seq_of[64];
    for (int s = 0; s < NSEQ; s++) {
        for (int i = 0; i < sq[s].q_len; i++) pos[T + i] = sq[s].kv_len - sq[s].q_len + i, seq_of[T + i] = s;
        T += sq[s].q_len;
        row_start[s + 1] = T;
        kv_len[s] = sq[s].kv_len;
    }
    /* shuffled blocks, none shared */
    int32_t perm[NB], table[NSEQ * MAXB];
    for (int i = 0; i < NB; i++) perm[i] = i;
    for (int i = NB - 1; i > 0; i--) {
        int j = (int)(loom_rng_uniform(rng) * (float)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    memcpy(table, perm, sizeof table);
    int64_t nkv = (int64_t)NB * BS * HKV * D, nq = T * H * D;
    float *k = falloc(nkv), *v = falloc(nkv), *q = falloc(nq), *want = falloc(nq), *got = falloc(nq);
    for (int64_t i = 0; i < nkv; i++) k[i] = v[i] = NAN;
    fill_rand(q, nq, rng);
    for (int s = 0; s < NSEQ; s++) /* the keys each sequence may see: the rest stays NaN */
        for (int64_t p = 0; p < sq[s].kv_len; p++) {
            int64_t first = window > 0 ? sq[s].kv_len - sq[s].q_len - window + 1 : 0;
            if (p < first) continue;
            fill_rand(k + slot(table, s, p) * HKV * D, HKV * D, rng);
            fill_rand(v + slot(table, s, p) * HKV * D, HKV * D, rng);
        }
    /* the expectation, one sequence at a time */
    for (int s = 0; s < NSEQ; s++) {
        int n = sq[s].q_len, L = sq[s].kv_len;
        float *kc = falloc((int64_t)L * HKV * D), *vc = falloc((int64_t)L * HKV * D);
        for (int64_t p = 0; p < L; p++) {
            memcpy(kc + p * HKV * D, k + slot(table, s, p) * HKV * D, sizeof(float) * HKV * D);
            memcpy(vc + p * HKV * D, v + slot(table, s, p) * HKV * D, sizeof(float) * HKV * D);
        }
        loom_tensor tq, tk, tv, to;
        TENSOR(tq, LOOM_F32, q + row_start[s] * H * D, 1, n, H, D);
        TENSOR(tk, LOOM_F32, kc, 1, L, HKV, D);
        TENSOR(tv, LOOM_F32, vc, 1, L, HKV, D);
        TENSOR(to, LOOM_F32, want + row_start[s] * H * D, 1, n, H, D);
        loom_attention_attrs at = {0.0f, 1, L - n, window, softcap};
        const loom_tensor *src[3] = {&tq, &tk, &tv};
        RUN_OK(LOOM_OP_ATTENTION, src, 3, &at, &to);
        free(kc), free(vc);
    }
    loom_tensor tq, tk, tv, to, tb;
    TENSOR(tq, LOOM_F32, q, T, H, D);
    TENSOR(tk, LOOM_F32, k, NB, BS, HKV, D);
    TENSOR(tv, LOOM_F32, v, NB, BS, HKV, D);
    TENSOR(to, LOOM_F32, got, T, H, D);
    TENSOR(tb, LOOM_I32, table, NSEQ, MAXB);
    loom_batch batch = {.n_seqs = NSEQ, .row_start = row_start, .positions = pos, .seq_of_row = seq_of,
                        .kv_len = kv_len, .block_table = &tb, .n_decode = n_decode};
    /* a KV chunk of 4: the decode kernel's split skips the chunks before the window */
    loom_paged_attention_attrs at = {.kv_chunk = 4, .max_seqs = NSEQ, .max_kv = MAXB * BS, .window = window,
                                     .softcap = softcap};
    const loom_tensor *src[3] = {&tq, &tk, &tv};
    const loom_op_info *info = loom_op_get(LOOM_OP_PAGED_ATTENTION);
    size_t sc = info->scratch_size(src, 3, &to, &at), sh = info->shared_size(src, 3, &to, &at);
    void *shared = sh ? loom_alloc_aligned(sh, LOOM_ALIGN) : NULL;
    void *scratch[3];
    for (int i = 0; i < 3; i++) scratch[i] = loom_alloc_aligned(sc ? sc : 1, LOOM_ALIGN);
    for (int isa = LOOM_ISA_REF; isa <= (int)loom_cpu_isa(); isa++)
        for (int invariant = 0; invariant < 2; invariant++)
            for (int nth = 1; nth <= 3; nth++) {
                loom_kernel_fn fn = loom_op_kernel(LOOM_OP_PAGED_ATTENTION, (loom_isa)isa);
                memset(got, 0xA5, sizeof(float) * (size_t)nq);
                loom_status s = LOOM_OK;
                for (int ph = 0; ph < info->n_phases && s == LOOM_OK; ph++)
                    for (int ith = 0; ith < nth && s == LOOM_OK; ith++) {
                        loom_kernel_args a = {.n_src = 3, .dst = &to, .attrs = &at, .ith = ith, .nth = nth,
                                              .scratch = scratch[ith], .phase = ph, .shared = shared,
                                              .batch = &batch, .invariant = invariant, .scratch_bytes = sc,
                                              .shared_bytes = sh};
                        for (int i = 0; i < 3; i++) a.src[i] = src[i];
                        s = fn(&a);
                    }
                CHECK_MSG(s == LOOM_OK, "isa %d: %s", isa, loom_last_error());
                int bad = 0;
                double worst = 0;
                for (int64_t i = 0; i < nq; i++) {
                    if (!check_close(got[i], want[i], 1.0 / 2048)) bad++;
                    double d = fabs((double)got[i] - want[i]);
                    worst = isnan(d) || isnan(worst) ? NAN : d > worst ? d : worst;
                }
                CHECK_MSG(bad == 0, "isa %d invariant %d nth %d window %d softcap %g (%d decoding): %d of %lld "
                          "values off, max error %g", isa, invariant, nth, window, (double)softcap, n_decode, bad,
                          (long long)nq, worst);
            }
    for (int i = 0; i < 3; i++) loom_free_aligned(scratch[i]);
    loom_free_aligned(shared);
    free(k), free(v), free(q), free(want), free(got);
}

int main(void) {
    loom_ops_init();
    loom_rng rng;
    loom_rng_init(&rng, 37, 0);
    /* two decode rows (13 and 5 keys), then prompt chunks: 6 rows after 4 cached, 3 from 0 */
    const seq batch[NSEQ] = {{1, 13}, {1, 5}, {6, 10}, {3, 3}};
    /* the same sequences all as prompt chunks (a one-row chunk included) */
    const seq chunks[NSEQ] = {{2, 21}, {1, 5}, {7, 7}, {5, 17}};
    const int windows[] = {0, 1, 3, 4, 6, 9, 64};
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
        run(batch, 2, windows[w], 0.0f, &rng);
        run(chunks, 0, windows[w], 0.0f, &rng);
    }
    /* score soft-capping (Gemma 2), with and without a window, in both kernels */
    const float caps[] = {0.5f, 2.0f, 30.0f};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        run(batch, 2, i == 1 ? 3 : 0, caps[i], &rng);
        run(chunks, 0, i == 1 ? 0 : 4, caps[i], &rng);
    }
    return TEST_SUMMARY();
}
