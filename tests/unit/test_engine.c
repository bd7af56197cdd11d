/* The batch engine on stories260K (shared data):
 * - greedy requests run together give each one the text it gets alone, and
 *   the text of the one-sequence model (loom_model_forward);
 * - random add / step / finish / cancel operations over a KV pool small
 *   enough to force preemption leave no leaked or double-owned block (checked
 *   every step), and every request finishes;
 * - a request sharing a prefix of full blocks with a finished one finds them
 *   cached and computes only the rest; a shared block is copied before a
 *   sequence writes into it;
 * - bad requests are refused with messages; cancelled requests end as such. */
#include "check.h"

#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "serve/engine.h"

static char model_path[1024], tok_path[1024];
static loom_model *g_model;
static loom_tokenizer *g_tok;

static int encode(const char *text, int32_t *ids, int cap) {
    int n = 0;
    if (loom_tokenizer_encode_ex(g_tok, text, strlen(text), LOOM_TOK_BOS, ids, cap, &n) != LOOM_OK) return 0;
    return n;
}

/* Runs every pending request to its end; texts[id] gets each one's text. */
static int run_all(loom_engine *e, char texts[][2048], int check_every_step) {
    int steps = 0;
    while (loom_engine_pending(e)) {
        const loom_engine_event *ev;
        int n;
        if (loom_engine_step(e, &ev, &n) != LOOM_OK) {
            fprintf(stderr, "step: %s\n", loom_last_error());
            return -1;
        }
        for (int i = 0; i < n; i++)
            if (texts) strncat(texts[ev[i].id], ev[i].text, ev[i].text_len);
        if (check_every_step && loom_engine_check(e) != LOOM_OK) {
            fprintf(stderr, "check: %s\n", loom_last_error());
            return -1;
        }
        if (++steps > 100000) return -1;
    }
    return steps;
}

static loom_request_params greedy(int max_tokens) {
    loom_request_params p = loom_request_default_params();
    p.sampling.temperature = 0.0f;
    p.max_tokens = max_tokens;
    return p;
}

static const char *prompts[] = {"Once upon a time", "Lily and Tom went to the park", "The big dog said",
                                "Tim saw a car", "One day, a little bird", "Sara had a red ball and"};

/* The one-sequence model's greedy text. */
static void model_text(const char *prompt, int n_new, char *out) {
    int32_t ids[128];
    int n = encode(prompt, ids, 128);
    float *lg = malloc(sizeof(float) * 512);
    out[0] = '\0';
    loom_model_forward(g_model, ids, n, 0, lg);
    int prev = ids[n - 1];
    for (int i = 0; i < n_new; i++) {
        int32_t t = 0;
        for (int v = 1; v < 512; v++)
            if (lg[v] > lg[t]) t = v;
        size_t len;
        const char *p = loom_tokenizer_decode(g_tok, prev, t, &len);
        strncat(out, p, len);
        prev = t;
        if (i + 1 < n_new) loom_model_forward(g_model, &t, 1, n + i, lg);
    }
    free(lg);
}

static void test_together_equals_alone(void) {
    const int N = 6, NEW = 48;
    static char together[6][2048], alone[6][2048], ref[2048];
    loom_engine_params ep = loom_engine_default_params();
    ep.n_seq_max = 4, ep.n_batch = 24; /* prompts chunk and sequences queue */
    loom_engine *e;
    CHECK_MSG(loom_engine_create(g_model, g_tok, &ep, &e) == LOOM_OK, "%s", loom_last_error());
    for (int i = 0; i < N; i++) {
        int32_t ids[128];
        int n = encode(prompts[i], ids, 128);
        loom_request_params p = greedy(NEW);
        CHECK(loom_engine_add(e, i, ids, n, &p) == LOOM_OK);
    }
    memset(together, 0, sizeof together);
    CHECK(run_all(e, together, 1) > 0);
    CHECK(loom_engine_pending(e) == 0);
    loom_engine_free(e);
    for (int i = 0; i < N; i++) {
        CHECK(loom_engine_create(g_model, g_tok, &ep, &e) == LOOM_OK);
        int32_t ids[128];
        int n = encode(prompts[i], ids, 128);
        loom_request_params p = greedy(NEW);
        CHECK(loom_engine_add(e, i, ids, n, &p) == LOOM_OK);
        memset(alone, 0, sizeof alone);
        CHECK(run_all(e, alone, 1) > 0);
        CHECK_MSG(!strcmp(alone[i], together[i]), "request %d alone: '%s'\ntogether: '%s'", i, alone[i], together[i]);
        model_text(prompts[i], NEW, ref);
        CHECK_MSG(!strcmp(ref, together[i]), "request %d: model '%s'\nengine '%s'", i, ref, together[i]);
        loom_engine_free(e);
    }
}

/* Random arrivals, cancellations and lengths over a pool of 12 blocks of 8:
 * preemption happens; the blocks stay consistent at every step. */
static void test_random_ops(void) {
    loom_engine_params ep = loom_engine_default_params();
    ep.n_seq_max = 6, ep.n_batch = 20, ep.block_size = 8, ep.n_ctx = 96, ep.seq_len = 80;
    loom_engine *e;
    CHECK_MSG(loom_engine_create(g_model, g_tok, &ep, &e) == LOOM_OK, "%s", loom_last_error());
    loom_rng r;
    loom_rng_init(&r, 11, 3);
    int added = 0, finished = 0, cancelled = 0;
    int live[64] = {0};
    for (int step = 0; step < 400 || loom_engine_pending(e); step++) {
        float u = loom_rng_uniform(&r);
        if (step < 400 && u < 0.3f && added < 64) { /* a new request: 1..40 prompt tokens, up to 30 new */
            int32_t ids[48];
            int n = 1 + (int)(loom_rng_uniform(&r) * 40);
            for (int i = 0; i < n; i++) ids[i] = 1 + (int)(loom_rng_uniform(&r) * 500) % 511;
            loom_request_params p = loom_request_default_params();
            p.sampling.seed = (uint64_t)added;
            p.max_tokens = 1 + (int)(loom_rng_uniform(&r) * 30);
            CHECK(loom_engine_add(e, added, ids, n, &p) == LOOM_OK);
            live[added++] = 1;
        } else if (step < 400 && u < 0.35f && added) {
            int id = (int)(loom_rng_uniform(&r) * added) % added;
            loom_engine_cancel(e, id);
        }
        const loom_engine_event *ev;
        int n;
        loom_status s = loom_engine_step(e, &ev, &n);
        CHECK_MSG(s == LOOM_OK, "step %d: %s", step, loom_last_error());
        for (int i = 0; i < n; i++)
            if (ev[i].finish) {
                CHECK_MSG(live[ev[i].id], "request %lld finished twice", (long long)ev[i].id);
                live[ev[i].id] = 0;
                finished++;
                cancelled += ev[i].finish == LOOM_FINISH_CANCELLED;
                CHECK(ev[i].finish != LOOM_FINISH_ERROR);
            }
        s = loom_engine_check(e);
        CHECK_MSG(s == LOOM_OK, "step %d: %s", step, loom_last_error());
        if (s != LOOM_OK || step > 5000) break;
    }
    loom_engine_stats st = loom_engine_get_stats(e);
    CHECK_MSG(finished == added && st.running == 0 && st.waiting == 0, "%d of %d finished", finished, added);
    CHECK_MSG(st.blocks_used == 0 && st.blocks_free + st.blocks_cached == st.n_blocks, "blocks: %d used, %d free, %d "
              "cached of %d", st.blocks_used, st.blocks_free, st.blocks_cached, st.n_blocks);
    CHECK_MSG(st.preemptions > 0 && cancelled > 0, "preemptions %ld, cancelled %d", st.preemptions, cancelled);
    loom_engine_free(e);
}

/* A second request whose prompt starts with the first one's full blocks finds
 * them cached: same text as alone, fewer rows computed. A prompt made of
 * whole cached blocks recomputes its last token in a copy of the last block. */
static void test_prefix_cache(void) {
    loom_engine_params ep = loom_engine_default_params();
    ep.n_seq_max = 2, ep.block_size = 4;
    loom_engine *e;
    CHECK(loom_engine_create(g_model, g_tok, &ep, &e) == LOOM_OK);
    const char *base = "Once upon a time, there was a little girl named Lily. She loved to play";
    int32_t a[128], b[128];
    int na = encode(base, a, 128);
    char longer[256];
    snprintf(longer, sizeof longer, "%s outside with her dog", base);
    int nb = encode(longer, b, 128);
    static char t1[4][2048], t2[4][2048];
    memset(t1, 0, sizeof t1), memset(t2, 0, sizeof t2);
    loom_request_params p = greedy(24);
    CHECK(loom_engine_add(e, 0, a, na, &p) == LOOM_OK);
    CHECK(run_all(e, t1, 1) > 0);
    long rows0 = loom_engine_get_stats(e).rows;
    CHECK(loom_engine_add(e, 1, b, nb, &p) == LOOM_OK);
    const loom_engine_event *ev;
    int n, cached = -1;
    while (loom_engine_pending(e)) {
        CHECK(loom_engine_step(e, &ev, &n) == LOOM_OK);
        for (int i = 0; i < n; i++) {
            strncat(t1[ev[i].id], ev[i].text, ev[i].text_len);
            cached = ev[i].n_cached;
        }
    }
    loom_engine_stats st = loom_engine_get_stats(e);
    CHECK_MSG(cached >= (na / 4) * 4 - 4 && cached > 0, "cached %d of a %d-token shared prefix", cached, na);
    CHECK_MSG(st.rows - rows0 < nb + 24 - cached + 1, "rows %ld", st.rows - rows0);
    /* the same prompt again (whole blocks when na % 4 == 0; else its full blocks) */
    CHECK(loom_engine_add(e, 2, a, na, &p) == LOOM_OK);
    CHECK(run_all(e, t1, 1) > 0);
    CHECK_MSG(!strcmp(t1[2], t1[0]), "cached rerun '%s' vs '%s'", t1[2], t1[0]);
    /* a prompt of exactly whole blocks, cached: its last token goes into a copy of the shared block */
    int nw = (na / 4) * 4;
    CHECK(loom_engine_add(e, 3, a, nw, &p) == LOOM_OK);
    CHECK(run_all(e, t1, 1) > 0);
    CHECK(loom_engine_add(e, 4 - 4 + 3, a, nw, &p) == LOOM_OK); /* once more: now every block is cached */
    memset(t1[3], 0, sizeof t1[3]);
    long cow0 = loom_engine_get_stats(e).cow_copies;
    CHECK(run_all(e, t1, 1) > 0);
    CHECK_MSG(loom_engine_get_stats(e).cow_copies > cow0, "no copy-on-write of the shared last block");
    loom_engine_free(e);
    /* the texts alone, without a cache */
    ep.prefix_cache = 0;
    CHECK(loom_engine_create(g_model, g_tok, &ep, &e) == LOOM_OK);
    CHECK(loom_engine_add(e, 1, b, nb, &p) == LOOM_OK);
    CHECK(run_all(e, t2, 1) > 0);
    CHECK_MSG(!strcmp(t1[1], t2[1]), "with the prefix cache '%s'\nwithout '%s'", t1[1], t2[1]);
    CHECK(loom_engine_get_stats(e).prefix_hits == 0);
    loom_engine_free(e);
}

static void test_errors_and_cancel(void) {
    loom_engine_params ep = loom_engine_default_params();
    ep.seq_len = 64;
    loom_engine *e;
    ep.n_seq_max = 0 - 1;
    CHECK(loom_engine_create(g_model, g_tok, &ep, &e) == LOOM_ERR_INVALID_ARG);
    ep.n_seq_max = 4, ep.seq_len = 100000;
    CHECK(loom_engine_create(g_model, g_tok, &ep, &e) == LOOM_ERR_INVALID_ARG);
    ep.seq_len = 64;
    CHECK(loom_engine_create(g_model, g_tok, &ep, &e) == LOOM_OK);
    int32_t ids[80] = {1};
    loom_request_params p = greedy(8);
    CHECK(loom_engine_add(e, 0, ids, 0, &p) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_engine_add(e, 0, ids, 65, &p) == LOOM_ERR_INVALID_ARG); /* beyond the sequence context */
    CHECK(strstr(loom_last_error(), "does not fit") != NULL);
    ids[1] = 512;
    CHECK(loom_engine_add(e, 0, ids, 2, &p) == LOOM_ERR_INVALID_ARG); /* outside the vocabulary */
    ids[1] = 5;
    p.logprobs = 99;
    CHECK(loom_engine_add(e, 0, ids, 2, &p) == LOOM_ERR_INVALID_ARG);
    p = greedy(1000);
    p.logprobs = 3;
    p.ignore_eos = 1;
    CHECK(loom_engine_add(e, 1, ids, 2, &p) == LOOM_OK);
    CHECK(loom_engine_add(e, 2, ids, 2, &p) == LOOM_OK);
    const loom_engine_event *ev;
    int n, got1 = 0, fin2 = 0, len1 = 0;
    for (int step = 0; loom_engine_pending(e); step++) {
        CHECK(loom_engine_step(e, &ev, &n) == LOOM_OK);
        if (step == 0) loom_engine_cancel(e, 2); /* after its first token */
        for (int i = 0; i < n; i++) {
            if (ev[i].id == 1 && ev[i].token >= 0) {
                got1++;
                CHECK(ev[i].n_top == 3 && ev[i].top[0].logprob >= ev[i].top[1].logprob &&
                      ev[i].top[0].token == ev[i].token && ev[i].logprob.logprob <= 0);
            }
            if (ev[i].id == 1 && ev[i].finish) len1 = ev[i].finish == LOOM_FINISH_LENGTH;
            if (ev[i].id == 2 && ev[i].finish) fin2 = ev[i].finish;
        }
    }
    /* 64 positions hold the prompt's 2 and 62 generated tokens; the 63rd is sampled from the last */
    CHECK_MSG(got1 == 63 && len1, "%d tokens before the context filled (finish length: %d)", got1, len1);
    CHECK(fin2 == LOOM_FINISH_CANCELLED);
    CHECK(loom_engine_get_stats(e).blocks_used == 0);
    loom_engine_free(e);
}

int main(void) {
    const char *dir = getenv("LOOM_SHARED_DIR");
    snprintf(model_path, sizeof model_path, "%s/models/stories260K/stories260K.bin", dir ? dir : "../shared");
    snprintf(tok_path, sizeof tok_path, "%s/models/stories260K/tok512.bin", dir ? dir : "../shared");
    CHECK_NEED_FILE(model_path, "stories260K under LOOM_SHARED_DIR");
    loom_model_params mp = loom_model_default_params();
    mp.n_threads = 2;
    if (loom_model_load(model_path, &mp, &g_model) != LOOM_OK || loom_tokenizer_load(tok_path, &g_tok) != LOOM_OK) {
        fprintf(stderr, "%s\n", loom_last_error());
        return 1;
    }
    RUN_TEST(test_together_equals_alone);
    RUN_TEST(test_random_ops);
    RUN_TEST(test_prefix_cache);
    RUN_TEST(test_errors_and_cancel);
    loom_tokenizer_free(g_tok);
    loom_model_free(g_model);
    return TEST_SUMMARY();
}
