/* The batch engine gives back the KV blocks that left a sliding window
 * (engine_step.c, drop_window): a long generation by a model whose every layer
 * has a window runs in a pool far smaller than the sequence, and its logits
 * are unchanged.
 *
 * The tiny Mistral (window 8) and Phi-3 (window 12) fixtures of
 * tests/fixtures/families (scripts/make_family_fixtures.py) generate greedily
 * 200 tokens after a 24-token prompt in blocks of 4, with the prompt in chunks
 * of 4 rows, in a pool of 6 blocks (24 positions): without the drop the
 * sequence could not grow past 24 positions. At every step: the engine's
 * invariants hold (loom_engine_check), at most 6 blocks are in use; at the end
 * every generated token's logits agree to 1e-4 relative (max |d| / max |ref|)
 * with the model's own contiguous-cache path fed the same tokens
 * (loom_model_forward, a prefill and one decode step per token), for the
 * fastest kernels and the batch-invariant ones (which read the dropped
 * blocks' table entries, then masked); and blocks were dropped. Then two
 * sequences with the same prompt (the second shares the first's prompt blocks
 * through the prefix cache while the first drops them) generate the same
 * tokens as one alone. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loom.h"
#include "serve/engine.h"

#ifndef LOOM_SOURCE_DIR
#define LOOM_SOURCE_DIR "."
#endif

#define N_PROMPT 24
#define N_GEN 200
#define BLOCK 4
#define POOL_BLOCKS 6

static int read_tokens(const char *dir, int32_t *tok) {
    char path[700];
    snprintf(path, sizeof path, "%s/tokens.txt", dir);
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && n < N_PROMPT && fscanf(f, "%d", &tok[n]) == 1) n++;
    if (f) fclose(f);
    return n;
}

static double rel_err(const float *got, const float *ref, int n) {
    double d = 0, m = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= d)) d = e;
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    return m > 0 ? d / m : d;
}

/* Runs n_seqs copies of the prompt to N_GEN tokens each in a pool of pool_blocks
 * blocks; tokens[s][i] and (for s = 0) logits[i * V] of every generated token.
 * *max_used: the most blocks in use after a step. */
static int generate(loom_model *m, const int32_t *prompt, int n_seqs, int pool_blocks, int invariant,
                    int32_t tokens[][N_GEN], float *logits, int *max_used, long *dropped) {
    loom_tokenizer *tok = NULL;
    loom_status s = loom_tokenizer_from_model(m, &tok);
    CHECK_MSG(s == LOOM_OK, "tokenizer: %s", loom_last_error());
    if (s != LOOM_OK) return -1;
    const int V = loom_model_get_info(m).vocab_size;
    loom_engine_params ep = loom_engine_default_params();
    ep.n_seq_max = n_seqs;
    ep.seq_len = N_PROMPT + N_GEN + 1;
    ep.n_ctx = pool_blocks * BLOCK;
    ep.block_size = BLOCK;
    ep.n_batch = BLOCK > n_seqs ? BLOCK : n_seqs;
    ep.batch_invariant = invariant;
    loom_engine *e = NULL;
    s = loom_engine_create(m, tok, &ep, &e);
    CHECK_MSG(s == LOOM_OK, "engine: %s", loom_last_error());
    loom_request_params rp = loom_request_default_params();
    rp.max_tokens = N_GEN;
    rp.sampling.temperature = 0;
    rp.ignore_eos = 1;
    for (int q = 0; s == LOOM_OK && q < n_seqs; q++) s = loom_engine_add(e, q, prompt, N_PROMPT, &rp);
    int n_got[8] = {0}, steps = 0;
    *max_used = 0;
    while (s == LOOM_OK && loom_engine_pending(e) > 0 && steps++ < 4 * (N_PROMPT + N_GEN) * n_seqs) {
        const loom_engine_event *ev;
        int n;
        s = loom_engine_step(e, &ev, &n);
        for (int i = 0; s == LOOM_OK && i < n; i++) {
            CHECK_MSG(ev[i].finish != LOOM_FINISH_ERROR, "request %lld: %s", (long long)ev[i].id,
                      ev[i].error ? ev[i].error : "");
            int q = (int)ev[i].id;
            if (ev[i].token < 0 || n_got[q] >= N_GEN) continue;
            if (q == 0 && logits) memcpy(logits + (size_t)n_got[0] * V, ev[i].logits, sizeof(float) * (size_t)V);
            tokens[q][n_got[q]++] = ev[i].token;
        }
        loom_status c = loom_engine_check(e);
        CHECK_MSG(c == LOOM_OK, "step %d: %s", steps, loom_last_error());
        if (c != LOOM_OK) break;
        loom_engine_stats st = loom_engine_get_stats(e);
        if (st.blocks_used > *max_used) *max_used = st.blocks_used;
        *dropped = st.blocks_dropped;
    }
    CHECK_MSG(s == LOOM_OK, "step: %s", loom_last_error());
    int done = loom_engine_pending(e) == 0;
    for (int q = 0; q < n_seqs; q++) done = done && n_got[q] == N_GEN;
    CHECK_MSG(done, "the generation did not finish in a pool of %d blocks (%d tokens, %d steps)", pool_blocks,
              n_got[0], steps);
    loom_engine_free(e);
    loom_tokenizer_free(tok);
    return done ? 0 : -1;
}

static void check_family(const char *family) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/families/%s", LOOM_SOURCE_DIR, family);
    int32_t prompt[N_PROMPT];
    CHECK_MSG(read_tokens(dir, prompt) == N_PROMPT, "%s/tokens.txt: fewer than %d tokens", dir, N_PROMPT);
    loom_model_params p = loom_model_default_params();
    p.n_threads = 2;
    p.n_ctx = N_PROMPT + N_GEN + 1;
    loom_model *m = NULL;
    loom_status s = loom_model_load(dir, &p, &m);
    CHECK_MSG(s == LOOM_OK, "%s: %s", dir, loom_last_error());
    if (s != LOOM_OK) return;
    const int V = loom_model_get_info(m).vocab_size;
    static int32_t tokens[2][N_GEN], again[2][N_GEN];
    float *logits = malloc(sizeof(float) * (size_t)V * N_GEN), *ref = malloc(sizeof(float) * (size_t)V);
    for (int inv = 0; inv < 2; inv++) {
        int used = 0;
        long dropped = 0;
        if (generate(m, prompt, 1, POOL_BLOCKS, inv, tokens, logits, &used, &dropped) != 0) continue;
        CHECK_MSG(used <= POOL_BLOCKS && dropped >= (N_PROMPT + N_GEN) / BLOCK - POOL_BLOCKS,
                  "%s: %d blocks used, %ld dropped", family, used, dropped);
        /* the model's contiguous-cache path, fed the same tokens */
        double worst = 0;
        s = loom_model_forward(m, prompt, N_PROMPT, 0, ref);
        for (int i = 0; s == LOOM_OK && i < N_GEN; i++) {
            double e = rel_err(logits + (size_t)i * V, ref, V);
            worst = e > worst ? e : worst;
            if (i + 1 < N_GEN) s = loom_model_forward(m, &tokens[0][i], 1, N_PROMPT + i, ref);
        }
        CHECK_MSG(s == LOOM_OK, "%s: forward: %s", family, loom_last_error());
        CHECK_MSG(worst <= 1e-4, "%s%s: the engine's logits differ from the model's by %.3g (relative) > 1e-4",
                  family, inv ? " (batch-invariant)" : "", worst);
        fprintf(stderr, "  %s%s: %d tokens in a pool of %d blocks of %d: at most %d used, %ld dropped; logits "
                        "vs the model's path %.2e\n", family, inv ? " batch-invariant" : "", N_GEN, POOL_BLOCKS,
                BLOCK, used, dropped, worst);
    }
    /* two sequences with one prompt: shared prompt blocks, dropped by both */
    int used = 0;
    long dropped = 0;
    if (generate(m, prompt, 2, 2 * POOL_BLOCKS, 0, again, NULL, &used, &dropped) == 0) {
        int same = memcmp(again[0], tokens[0], sizeof again[0]) == 0 && memcmp(again[1], tokens[0], sizeof again[1]) == 0;
        CHECK_MSG(same, "%s: two sequences sharing a prompt generate other tokens than one alone", family);
        CHECK_MSG(used <= 2 * POOL_BLOCKS, "%s: two sequences: %d blocks used", family, used);
        fprintf(stderr, "  %s: two sequences, one prompt: the same tokens, at most %d blocks used, %ld dropped\n",
                family, used, dropped);
    }
    free(logits), free(ref);
    loom_model_free(m);
}

int main(void) {
    check_family("mistral");
    check_family("phi3");
    return TEST_SUMMARY();
}
