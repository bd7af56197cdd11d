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

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/rng.h"
#include "serve/engine.h"
#include "base/cpu.h"
#include "graph/exec.h"
#include "model/gguf.h"
#include "model/model.h"
#include "ops/matmul/matmul.h"

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

/* Every KV dtype: requests together over blocks of 8 give the text of the
 * one-sequence model with the same cache dtype (its contiguous cache). */
static void test_kv_dtypes(void) {
    const loom_dtype dts[] = {LOOM_F16, LOOM_BF16, LOOM_I8};
    loom_model *keep = g_model;
    for (int d = 0; d < 3; d++) {
        loom_model_params mp = loom_model_default_params();
        mp.n_threads = 2, mp.kv_dtype = dts[d];
        loom_model *m;
        CHECK_MSG(loom_model_load(model_path, &mp, &m) == LOOM_OK, "%s", loom_last_error());
        g_model = m;
        static char together[6][2048], ref[2048];
        loom_engine_params ep = loom_engine_default_params();
        ep.n_seq_max = 3, ep.n_batch = 16, ep.block_size = 8;
        loom_engine *e;
        CHECK_MSG(loom_engine_create(m, g_tok, &ep, &e) == LOOM_OK, "%s", loom_last_error());
        for (int i = 0; i < 6; i++) {
            int32_t ids[128];
            int n = encode(prompts[i], ids, 128);
            loom_request_params p = greedy(40);
            CHECK(loom_engine_add(e, i, ids, n, &p) == LOOM_OK);
        }
        memset(together, 0, sizeof together);
        CHECK(run_all(e, together, 1) > 0);
        /* the step's fused graph: RMSNorm, Q, K, V, RoPE and the paged cache
         * writes are one qkv_rope per layer; a layer is 4 fused nodes
         * (qkv_rope with the norm, paged attention, attn_out + residual,
         * ffn with the norm and the residual) */
        const loom_graph *g = loom_engine_last_graph(e);
        CHECK(g != NULL);
        int fused = 0, loose = 0, kernels0 = 0, launches0 = 0;
        for (int n = 0; g && n < g->n_nodes; n++) {
            const loom_node *nd = &g->nodes[n];
            if (nd->op == LOOM_OP_QKV_ROPE && ((const loom_qkv_rope_attrs *)(const void *)nd->attrs)->paged) fused++;
            if (nd->op == LOOM_OP_ROPE || nd->op == LOOM_OP_KV_WRITE) loose++;
            if (nd->layer == 0 && nd->stats.kernels > 0) kernels0++;
            if (nd->layer == 0) launches0 += nd->stats.kernels;
        }
        CHECK_MSG(fused == m->cfg.n_layers && loose == 0, "kv %s: %d paged qkv_rope, %d rope/kv_write",
                  loom_dtype_name(dts[d]), fused, loose);
        CHECK_MSG(kernels0 == 4, "kv %s: layer 0 runs %d nodes", loom_dtype_name(dts[d]), kernels0);
        /* the same accounting per layer through the public API: every layer launches what layer
         * 0's nodes do and moves bytes; the total is the sum of the sections */
        loom_profile prof;
        CHECK_MSG(loom_engine_last_profile(e, &prof) == LOOM_OK, "%s", loom_last_error());
        CHECK(prof.n_sections == m->cfg.n_layers + 2 && prof.n_tokens >= 1);
        double bytes = 0;
        for (int k = 0; k < prof.n_sections; k++) {
            bytes += prof.sections[k].bytes_read + prof.sections[k].bytes_written;
            if (k >= 1 && k <= m->cfg.n_layers)
                CHECK_MSG(prof.sections[k].kernels >= 6 && prof.sections[k].bytes_read > 0, "%s: %d kernels",
                          prof.sections[k].name, prof.sections[k].kernels);
        CHECK_MSG(prof.sections[1].kernels == launches0, "L0: %d kernels, its nodes %d", prof.sections[1].kernels,
                  launches0);
        }
        CHECK(bytes > 0 && bytes == prof.total.bytes_read + prof.total.bytes_written);
        loom_profile_free(&prof);
        loom_engine_free(e);
        for (int i = 0; i < 6; i++) {
            model_text(prompts[i], 40, ref);
            CHECK_MSG(!strcmp(ref, together[i]), "kv %s request %d: model '%s'\nengine '%s'",
                      loom_dtype_name(dts[d]), i, ref, together[i]);
        }
        loom_model_free(m);
    }
    g_model = keep;
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

/* Batch invariance: 30 random requests (prompts of 1..60 tokens, greedy and
 * seeded), each run alone on one thread, then all together with random
 * arrival steps, step budgets, sequence counts and 2 or 3 threads, and once
 * more over a pool so small that sequences are preempted and resumed: every
 * token and the bytes of every logits row it was sampled from are the same. */
#define INV_N 30
#define INV_MAX_NEW 24
typedef struct inv_req {
    int32_t prompt[64];
    int n_prompt;
    loom_request_params p;
    int n_out;
    int32_t tok[INV_MAX_NEW];
    uint64_t logits[INV_MAX_NEW]; /* a hash of the bytes of each token's logits row */
} inv_req;

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int inv_run(loom_model *m, const loom_tokenizer *tok, inv_req *rq, int n, const loom_engine_params *ep,
                   loom_rng *r, int record, long *mismatch, long *preempt) {
    loom_engine *e;
    const size_t V = (size_t)loom_model_get_info(m).vocab_size;
    if (loom_engine_create(m, tok, ep, &e) != LOOM_OK) {
        fprintf(stderr, "engine: %s\n", loom_last_error());
        return 0;
    }
    int added = 0, got[INV_N] = {0};
    for (int step = 0; added < n || loom_engine_pending(e); step++) {
        while (added < n && (!r || loom_rng_uniform(r) < 0.4f)) { /* random arrival steps when r is given */
            if (loom_engine_add(e, added, rq[added].prompt, rq[added].n_prompt, &rq[added].p) != LOOM_OK) return 0;
            added++;
        }
        const loom_engine_event *ev;
        int ne;
        if (loom_engine_step(e, &ev, &ne) != LOOM_OK || step > 100000) return 0;
        for (int i = 0; i < ne; i++) {
            if (ev[i].token < 0) continue;
            inv_req *q = &rq[ev[i].id];
            int k = got[ev[i].id]++;
            uint64_t h = hash_bytes(ev[i].logits, V * sizeof(float));
            if (record) {
                q->tok[k] = ev[i].token, q->n_out = k + 1, q->logits[k] = h;
            } else if (k >= q->n_out || q->tok[k] != ev[i].token || q->logits[k] != h) {
                if (!*mismatch) fprintf(stderr, "request %lld token %d differs from its run alone\n",
                                        (long long)ev[i].id, k);
                (*mismatch)++;
            }
        }
    }
    for (int i = 0; i < n && !record; i++)
        if (got[i] != rq[i].n_out) (*mismatch)++;
    *preempt += loom_engine_get_stats(e).preemptions;
    loom_engine_free(e);
    return 1;
}

/* n random requests over a model (vocabulary V, prompt tokens 1..V-2). */
static void inv_case(const char *path, loom_model *m1, const loom_tokenizer *tok, int n, uint64_t seed) {
    static inv_req rq[INV_N];
    loom_rng r;
    loom_rng_init(&r, seed, 9);
    int V = loom_model_get_info(m1).vocab_size;
    for (int i = 0; i < n; i++) {
        inv_req *q = &rq[i];
        q->n_prompt = 1 + (int)(loom_rng_uniform(&r) * 60);
        for (int k = 0; k < q->n_prompt; k++) q->prompt[k] = 1 + (int)(loom_rng_uniform(&r) * (V - 2));
        if (i % 5 == 4) { /* a shared prefix of 20 tokens: prefix-cache hits */
            memcpy(q->prompt, rq[i - 4].prompt, sizeof(int32_t) * 20);
            if (q->n_prompt < 24) q->n_prompt = 24;
        }
        q->p = loom_request_default_params();
        q->p.max_tokens = 1 + (int)(loom_rng_uniform(&r) * INV_MAX_NEW);
        q->p.ignore_eos = 1;
        q->p.sampling.temperature = i % 2 ? 0.8f : 0.0f;
        q->p.sampling.seed = 1000 + (uint64_t)i;
    }
    loom_model *ms[3] = {m1, NULL, NULL};
    for (int t = 1; t < 3; t++) {
        loom_model_params mp = loom_model_default_params();
        mp.n_threads = t + 1;
        CHECK(loom_model_load(path, &mp, &ms[t]) == LOOM_OK);
    }
    loom_engine_params ep = loom_engine_default_params();
    ep.batch_invariant = 1, ep.n_seq_max = 1, ep.prefix_cache = 0;
    long mismatch = 0, preempt = 0;
    /* alone: one request at a time, on m1's threads */
    for (int i = 0; i < n; i++) CHECK(inv_run(m1, tok, &rq[i], 1, &ep, NULL, 1, &mismatch, &preempt));
    /* together: 3 runs with random budgets, sequences, threads and arrivals */
    for (int run = 0; run < 3; run++) {
        ep.n_seq_max = 4 + (int)(loom_rng_uniform(&r) * 12);
        ep.n_batch = 5 + (int)(loom_rng_uniform(&r) * 60);
        ep.prefix_cache = run != 1;
        ep.block_size = run == 2 ? 8 : 16;
        CHECK(inv_run(ms[1 + run % 2], tok, rq, n, &ep, &r, 0, &mismatch, &preempt));
    }
    /* a pool of 14 blocks of 8: preemption and resumption by recompute */
    ep.n_seq_max = 8, ep.n_batch = 32, ep.block_size = 8, ep.n_ctx = 112, ep.seq_len = 96;
    long p0 = preempt;
    CHECK(inv_run(ms[2], tok, rq, n, &ep, &r, 0, &mismatch, &preempt));
    CHECK_MSG(mismatch == 0, "%s: %ld tokens or logits rows differ from the requests run alone", path, mismatch);
    CHECK_MSG(preempt > p0, "the small pool preempted nothing");
    loom_model_free(ms[1]), loom_model_free(ms[2]);
}

/* a and b the same bytes (rel 0), or the same argmax and no logit further
 * apart than rel x the largest |logit|. */
static int logits_close(const float *a, const float *b, int n, double rel) {
    if (rel == 0.0) return memcmp(a, b, (size_t)n * sizeof *a) == 0;
    double d = 0, mx = 0;
    int am = 0, bm = 0;
    for (int i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        mx = fmax(mx, fabs((double)b[i]));
        am = a[i] > a[am] ? i : am;
        bm = b[i] > b[bm] ? i : bm;
    }
    if (am == bm && d <= rel * mx) return 1;
    fprintf(stderr, "  logits %g apart (largest |logit| %g), argmax %d and %d\n", d, mx, am, bm);
    return 0;
}

/* Every tensor of m's GGUF holds the bytes of the file at path. */
static int tensors_match_file(loom_model *m, const char *path) {
    FILE *ff = fopen(path, "rb");
    int64_t bad = 0;
    for (int64_t i = 0; ff && i < loom_gguf_n_tensors(m->gguf); i++) {
        loom_gguf_tensor_info ti;
        CHECK(loom_gguf_tensor_info_at(m->gguf, i, &ti) == LOOM_OK);
        char *buf = malloc(ti.nbytes ? ti.nbytes : 1);
        CHECK(fseek(ff, (long)(loom_gguf_data_offset(m->gguf) + ti.offset), SEEK_SET) == 0);
        CHECK(fread(buf, 1, ti.nbytes, ff) == ti.nbytes);
        bad += memcmp(buf, ti.data, ti.nbytes) != 0;
        free(buf);
    }
    if (ff) fclose(ff);
    return ff && bad == 0;
}

static void test_batch_invariance(void) {
    inv_case(model_path, g_model, g_tok, INV_N, 2027);
    /* quantized weights (SmolLM2-135M q4_1: the int8 GEMM for every row count), when present */
    const char *md = getenv("LOOM_MODELS_DIR"), *home = getenv("HOME");
    char q4[1024];
    if (md && *md) snprintf(q4, sizeof q4, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", md);
    else snprintf(q4, sizeof q4, "%s/.cache/loom/models/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : ".");
    loom_model_params mp = loom_model_default_params();
    mp.n_threads = 1, mp.n_ctx = 256, mp.pack_weights = 0;
    loom_model *m = NULL;
    loom_tokenizer *tok = NULL;
    if (access(q4, R_OK) != 0) {
        fprintf(stderr, "SKIP: %s missing: the quantized case of batch invariance\n", q4);
        CHECK(!check_in_ci());
        return;
    }
    CHECK(loom_model_load(q4, &mp, &m) == LOOM_OK && loom_tokenizer_from_gguf(m->gguf, &tok) == LOOM_OK);
    /* by default packed at load where the int8 GEMM reads packed panels (VNNI) */
    int vnni = loom_matmul_packed_bytes(LOOM_Q4_1, 64, 64, loom_cpu_isa()) > 0;
    CHECK(m && (vnni ? m->packed && loom_packed_weights_count(m->packed) > 0 : !m->packed ||
                                                                                loom_packed_weights_count(m->packed) == 0));
    /* the packed matrices' file pages were left out of the resident copy and
     * map the file again: every tensor still holds the file's bytes */
    CHECK_MSG(m && tensors_match_file(m, q4), "a tensor differs from the file after loading (resident)");
    if (m && tok) inv_case(q4, m, tok, 8, 99);
    /* weights packed and not: the same logits, bit for bit, for a prompt (the
     * GEMM either way), the packed panels read; a decode step (one row) reads
     * the panels too where packed, and takes the GEMV unpacked, whose sums are
     * ordered otherwise: close, and the same bits again once both models run
     * batch-invariant (the GEMM at every row count) */
    loom_model_params np = mp;
    np.pack_weights = -1;
    loom_model *u = NULL;
    CHECK(loom_model_load(q4, &np, &u) == LOOM_OK && u && !u->packed);
    if (m && u) {
        int32_t ids[40];
        for (int i = 0; i < 40; i++) ids[i] = 1 + (i * 977) % 4000;
        int nv = loom_model_get_info(m).vocab_size;
        float *a = malloc((size_t)nv * 2 * sizeof *a), *b = a + nv;
        for (int inv = 0; inv < 2; inv++) {
            m->exec->invariant = u->exec->invariant = inv;
            CHECK(loom_model_kv_reset(m) == LOOM_OK && loom_model_kv_reset(u) == LOOM_OK);
            uint64_t h0 = loom_matmul_packed_hits();
            CHECK(loom_model_forward(m, ids, 39, 0, a) == LOOM_OK);
            CHECK(loom_matmul_packed_hits() > h0 || !vnni);
            uint64_t h1 = loom_matmul_packed_hits();
            CHECK(loom_model_forward(u, ids, 39, 0, b) == LOOM_OK);
            CHECK(loom_matmul_packed_hits() == h1); /* u has nothing packed */
            /* the layers' GEMMs agree bit for bit; the LM head runs the last row alone */
            CHECK_MSG(logits_close(a, b, nv, inv || !vnni ? 0.0 : 1e-5), "packed weights change the prompt's logits");
            h0 = loom_matmul_packed_hits();
            CHECK(loom_model_forward(m, ids + 39, 1, 39, a) == LOOM_OK);
            CHECK_MSG(loom_matmul_packed_hits() > h0 || !vnni, "one row does not read the packed panels");
            CHECK(loom_model_forward(u, ids + 39, 1, 39, b) == LOOM_OK);
            /* every layer's one row: an int8 rounding of x flipped here and there
             * grows through 30 layers (measured: 0.4 at most, 0.09 on average,
             * of logits up to 31) */
            CHECK_MSG(logits_close(a, b, nv, inv || !vnni ? 0.0 : 0.03), "packed weights change the decode logits");
        }
        m->exec->invariant = u->exec->invariant = 0;
        /* the mapping kept (use_mmap), packed on request: the packed matrices'
         * pages dropped from it as they were packed; the same bytes in every
         * tensor, the same logits as the resident model's */
        loom_model_params kp = mp;
        kp.use_mmap = 1, kp.pack_weights = 1;
        loom_model *k = NULL;
        CHECK(loom_model_load(q4, &kp, &k) == LOOM_OK && k);
        if (k) {
            CHECK(!vnni || (k->packed && loom_packed_weights_count(k->packed) == loom_packed_weights_count(m->packed)));
            CHECK_MSG(tensors_match_file(k, q4), "a tensor differs from the file after loading (mapping kept)");
            CHECK(loom_model_kv_reset(m) == LOOM_OK && loom_model_kv_reset(k) == LOOM_OK);
            CHECK(loom_model_forward(m, ids, 40, 0, a) == LOOM_OK && loom_model_forward(k, ids, 40, 0, b) == LOOM_OK);
            CHECK(memcmp(a, b, (size_t)nv * sizeof *a) == 0);
            CHECK(loom_model_forward(m, ids, 1, 40, a) == LOOM_OK && loom_model_forward(k, ids, 1, 40, b) == LOOM_OK);
            CHECK(memcmp(a, b, (size_t)nv * sizeof *a) == 0);
        }
        loom_model_free(k);
        free(a);
    }
    loom_model_free(u);
    loom_tokenizer_free(tok);
    loom_model_free(m);
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

/* A stepping thread waits for work: an add from another thread wakes it, as
 * does loom_engine_wake; with nothing pending a bounded wait times out. */
typedef struct adder {
    loom_engine *e;
    int wake_only;
} adder;

static void *add_later(void *arg) {
    adder *a = arg;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (a->wake_only) {
        loom_engine_wake(a->e);
        return NULL;
    }
    int32_t ids[64];
    int n = encode("Once upon a time", ids, 64);
    loom_request_params p = greedy(4);
    loom_engine_add(a->e, 7, ids, n, &p);
    return NULL;
}

/* A text prompt: the engine's tokenizer gives the tokens encode() gives, so
 * the same text; errors leave no request. */
static void test_add_text(void) {
    loom_engine_params ep = loom_engine_default_params();
    loom_engine *e;
    CHECK(loom_engine_create(g_model, g_tok, &ep, &e) == LOOM_OK);
    static char a[4][2048];
    memset(a, 0, sizeof a);
    int32_t ids[64];
    int n = encode(prompts[1], ids, 64), n_text = -1;
    loom_request_params p = greedy(20);
    CHECK(loom_engine_add(e, 0, ids, n, &p) == LOOM_OK);
    CHECK(loom_engine_add_text(e, 1, prompts[1], strlen(prompts[1]), &p, &n_text) == LOOM_OK);
    CHECK(n_text == n);
    CHECK(loom_engine_add_text(e, 2, "", 0, &p, &n_text) == LOOM_OK && n_text == 1); /* BOS alone */
    p.max_tokens = -1;
    CHECK(loom_engine_add_text(e, 3, "x", 1, &p, NULL) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_engine_pending(e) == 3);
    CHECK(run_all(e, a, 1) > 0);
    CHECK_MSG(!strcmp(a[0], a[1]) && strlen(a[0]) > 0, "'%s' vs '%s'", a[0], a[1]);
    CHECK(strlen(a[2]) > 0);
    loom_engine_free(e);
}

/* Before a step ran a program there is no profile; timed steps of decoding sequences give one. */
static void test_profiles(void) {
    loom_engine *e;
    loom_engine_params ep = loom_engine_default_params();
    ep.n_seq_max = 2;
    CHECK(loom_engine_create(g_model, g_tok, &ep, &e) == LOOM_OK);
    loom_profile prof;
    CHECK(loom_engine_last_profile(e, &prof) == LOOM_ERR_INVALID_ARG && prof.n_sections == 0);
    CHECK(loom_engine_last_profile(NULL, &prof) == LOOM_ERR_INVALID_ARG);
    /* timed steps: nothing pending, bad repetitions; then two decoding sequences */
    CHECK(loom_engine_profile_steps(e, 3, &prof) == LOOM_ERR_INVALID_ARG && prof.n_sections == 0);
    CHECK(loom_engine_profile_steps(e, 0, &prof) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_engine_profile_steps(NULL, 3, &prof) == LOOM_ERR_INVALID_ARG);
    int32_t ids[6] = {1, 40, 41, 42, 43, 44};
    loom_request_params p = greedy(12);
    CHECK(loom_engine_add(e, 1, ids, 6, &p) == LOOM_OK && loom_engine_add(e, 2, ids + 1, 5, &p) == LOOM_OK);
    const loom_engine_event *ev;
    int n_ev;
    CHECK(loom_engine_step(e, &ev, &n_ev) == LOOM_OK); /* both prompts, one step */
    CHECK_MSG(loom_engine_profile_steps(e, 3, &prof) == LOOM_OK, "%s", loom_last_error());
    CHECK(prof.n_tokens == 2 && prof.n_sections == g_model->cfg.n_layers + 2);
    for (int k = 1; k <= g_model->cfg.n_layers; k++) CHECK(prof.sections[k].time_ns > 0);
    loom_profile_free(&prof);
    CHECK(loom_engine_get_stats(e).generated_tokens == 2 + 2 * 4); /* and the warm-up and 3 timed steps, 2 rows each */
    loom_engine_free(e);
}

/* The model's executor is batch-invariant while any invariant engine over it
 * lives, whatever order engines are freed in. */
static void test_invariant_flag(void) {
    loom_engine_params ep = loom_engine_default_params();
    ep.n_seq_max = 2, ep.seq_len = 64, ep.n_ctx = 256;
    loom_engine *a, *b, *c;
    ep.batch_invariant = 1;
    CHECK(loom_engine_create(g_model, g_tok, &ep, &a) == LOOM_OK && g_model->exec->invariant);
    CHECK(loom_engine_create(g_model, g_tok, &ep, &b) == LOOM_OK);
    ep.batch_invariant = 0;
    CHECK(loom_engine_create(g_model, g_tok, &ep, &c) == LOOM_OK && g_model->exec->invariant);
    loom_engine_free(a);
    CHECK_MSG(g_model->exec->invariant, "freeing one invariant engine switched off the other's");
    loom_engine_free(b);
    CHECK(!g_model->exec->invariant);
    loom_engine_free(c);
    CHECK(!g_model->exec->invariant && g_model->invariant_engines == 0);
}

static void test_wait(void) {
    loom_engine_params ep = loom_engine_default_params();
    ep.n_seq_max = 2;
    loom_engine *e;
    CHECK(loom_engine_create(g_model, g_tok, &ep, &e) == LOOM_OK);
    CHECK(loom_engine_wait(e, 0) == 0);
    CHECK(loom_engine_wait(e, 30) == 0); /* times out */
    for (int w = 0; w < 2; w++) {
        adder a = {e, w};
        pthread_t th;
        pthread_create(&th, NULL, add_later, &a);
        int n = loom_engine_wait(e, w ? -1 : 10000);
        pthread_join(th, NULL);
        CHECK_MSG(n == (w ? 0 : 1), "wait %d: %d pending", w, n);
        if (!w) CHECK(run_all(e, NULL, 1) > 0);
    }
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
    RUN_TEST(test_kv_dtypes);
    RUN_TEST(test_random_ops);
    RUN_TEST(test_prefix_cache);
    RUN_TEST(test_errors_and_cancel);
    RUN_TEST(test_wait);
    RUN_TEST(test_profiles);
    RUN_TEST(test_invariant_flag);
    RUN_TEST(test_add_text);
    RUN_TEST(test_batch_invariance);
    loom_tokenizer_free(g_tok);
    loom_model_free(g_model);
    return TEST_SUMMARY();
}
