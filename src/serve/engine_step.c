/* One step of the batch engine: take what other threads added or cancelled,
 * schedule rows under the token budget (running sequences oldest first, one
 * row for a sequence that decodes and a chunk of the rest for one that
 * prefills; then waiting ones, after a prefix-cache lookup), find their KV
 * blocks (allocating, copying a shared block before writing into it, and
 * preempting the newest running sequences when the pool runs short), run the
 * forward program once over all rows, and sample each sequence whose rows
 * reached its last token. */
#include "serve/engine_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

/* ------------------------------------------------------------ other threads' requests */

static void finish(loom_engine *e, eng_req *r, loom_finish_reason why, const char *msg);

static void drain(loom_engine *e) {
    pthread_mutex_lock(&e->mu);
    int ok = 1;
    for (int i = 0; i < e->n_in && ok; i++) {
        ok = e->n_reqs < e->cap_reqs;
        if (!ok) {
            int cap = e->cap_reqs ? 2 * e->cap_reqs : 32;
            eng_req **p = realloc(e->reqs, sizeof *p * (size_t)cap);
            if ((ok = p != NULL)) e->reqs = p, e->cap_reqs = cap;
        }
        if (!ok) break;
        e->incoming[i]->order = e->next_order++;
        e->reqs[e->n_reqs++] = e->incoming[i];
        e->incoming[i] = NULL;
    }
    int moved = 0;
    while (moved < e->n_in && !e->incoming[moved]) moved++;
    if (moved > 0 && moved < e->n_in)
        memmove(e->incoming, e->incoming + moved, sizeof *e->incoming * (size_t)(e->n_in - moved));
    e->n_in -= moved;
    for (int c = 0; c < e->n_cancel; c++)
        for (int i = 0; i < e->n_reqs; i++)
            if (e->reqs[i]->id == e->cancels[c]) e->reqs[i]->cancel = 1;
    e->n_cancel = 0;
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->cancel && e->reqs[i]->state != REQ_DONE) finish(e, e->reqs[i], LOOM_FINISH_CANCELLED, NULL);
}

/* ------------------------------------------------------------ blocks */

/* Blocks for positions [0, upto) and a private block at the first position
 * the step writes (n_comp): a block that other sequences share, or that the
 * prefix cache holds (its contents must not change), is copied first. 0 when
 * the pool has no block left. */
static int ensure_blocks(loom_engine *e, eng_req *r, int upto) {
    int need = (upto + e->bs - 1) / e->bs;
    while (r->n_blk < need) {
        int id = loom_kv_blocks_alloc(e->blocks);
        if (id < 0) return 0;
        r->blk[r->n_blk++] = id;
    }
    int bi = r->n_comp / e->bs;
    if (bi < r->n_blk && (loom_kv_blocks_refs(e->blocks, r->blk[bi]) > 1 || loom_kv_blocks_committed(e->blocks, r->blk[bi]))) {
        int id = loom_kv_blocks_alloc(e->blocks);
        if (id < 0) return 0;
        eng_copy_block(e, id, r->blk[bi]);
        loom_kv_blocks_unref(e->blocks, r->blk[bi]);
        r->blk[bi] = id;
        if (r->n_hash > bi) r->n_hash = bi;
        e->st.cow_copies++;
    }
    return 1;
}

/* A waiting request's leading full blocks from the prefix cache; at least its
 * last token is computed again (its logits are needed). */
static void lookup_prefix(loom_engine *e, eng_req *r) {
    uint64_t parent = 0;
    int full = r->n_tok / e->bs;
    for (int b = 0; b < full && e->p.prefix_cache; b++) {
        const int32_t *t = r->tok + (size_t)b * e->bs;
        uint64_t h = loom_kv_block_hash(parent, t, e->bs);
        int id = loom_kv_blocks_lookup(e->blocks, h, parent, t);
        if (id < 0) break;
        r->blk[r->n_blk++] = id;
        r->hash[b] = h, r->n_hash = b + 1;
        parent = h;
    }
    r->n_comp = r->n_blk * e->bs < r->n_tok - 1 ? r->n_blk * e->bs : r->n_tok - 1;
}

/* Commits the blocks that filled up to the prefix cache (their hash chain). */
static void commit_full(loom_engine *e, eng_req *r) {
    for (int b = r->n_hash; b < r->n_comp / e->bs; b++) {
        const int32_t *t = r->tok + (size_t)b * e->bs;
        uint64_t parent = b ? r->hash[b - 1] : 0, h = loom_kv_block_hash(parent, t, e->bs);
        if (e->p.prefix_cache) loom_kv_blocks_commit(e->blocks, r->blk[b], h, parent, t);
        r->hash[b] = h, r->n_hash = b + 1;
    }
}

/* Gives back the leading blocks whose every key left the window of every
 * query to come (sliding-window attention in every layer): the next query is
 * at position n_comp and sees keys j > n_comp - window, so block b, holding
 * positions up to (b + 1) * bs - 1, is read no more once (b + 1) * bs <=
 * n_comp - window + 1. Committed blocks stay in the prefix cache (evictable);
 * the table keeps -1 in their place. */
static void drop_window(loom_engine *e, eng_req *r) {
    if (!e->window || r->n_comp - e->window + 1 < e->bs) return;
    int upto = (r->n_comp - e->window + 1) / e->bs;
    if (upto > r->n_blk) upto = r->n_blk;
    for (; r->n_drop < upto; r->n_drop++) {
        loom_kv_blocks_unref(e->blocks, r->blk[r->n_drop]);
        r->blk[r->n_drop] = -1;
        e->st.blocks_dropped++;
    }
}

static void preempt(loom_engine *e, eng_req *r) {
    eng_release(e, r);
    r->state = REQ_WAITING;
    e->st.preemptions++;
}

/* The newest running request not scheduled in this step (-1: none). */
static int newest_unscheduled(const loom_engine *e) {
    for (int i = e->n_reqs - 1; i >= 0; i--) {
        const eng_req *r = e->reqs[i];
        if (r->state == REQ_RUNNING && r->rows == 0) return i;
    }
    return -1;
}

/* ------------------------------------------------------------ scheduling */

static void schedule(loom_engine *e) {
    int budget = e->p.n_batch, S = e->p.n_seq_max;
    e->n_sched = 0;
    for (int i = 0; i < e->n_reqs; i++) e->reqs[i]->rows = 0, e->reqs[i]->out = -1;
    /* running sequences, oldest first */
    for (int i = 0; i < e->n_reqs && budget > 0; i++) {
        eng_req *r = e->reqs[i];
        if (r->state != REQ_RUNNING) continue;
        int rest = r->n_tok - r->n_comp, rows = rest < budget ? rest : budget;
        r->rows = rows; /* reserved: not a preemption victim */
        int ok;
        while (!(ok = ensure_blocks(e, r, r->n_comp + rows))) {
            int v = newest_unscheduled(e);
            if (v < 0) break;
            preempt(e, e->reqs[v]);
        }
        if (!ok) { /* nothing left to take from: this one gives its blocks back */
            r->rows = 0;
            preempt(e, r);
            continue;
        }
        e->sched[e->n_sched++] = r;
        budget -= rows;
    }
    /* waiting ones, in arrival order (preempted ones keep theirs) */
    for (int i = 0; i < e->n_reqs && budget > 0 && e->n_sched < S; i++) {
        eng_req *r = e->reqs[i];
        if (r->state != REQ_WAITING) continue;
        lookup_prefix(e, r);
        if (!r->admitted) r->n_cached = r->n_comp, r->admitted = 1;
        int rest = r->n_tok - r->n_comp, rows = rest < budget ? rest : budget;
        if (!ensure_blocks(e, r, r->n_comp + rows)) {
            eng_release(e, r); /* no room: it waits, and so do the ones after it */
            break;
        }
        r->state = REQ_RUNNING;
        r->rows = rows;
        e->sched[e->n_sched++] = r;
        budget -= rows;
    }
    /* one-row sequences first (paged_attention runs them as one decode batch), each group in
     * admission order */
    int w = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < e->n_reqs; i++) {
            eng_req *r = e->reqs[i];
            if (r->rows > 0 && r->state == REQ_RUNNING && (r->rows == 1) == !pass) e->sched[w++] = r;
        }
    e->n_sched = w;
}

/* ------------------------------------------------------------ the forward pass */

static loom_status run_batch(loom_engine *e, int *n_rows, int *n_out) {
    int row = 0, outs = 0, nd = 0;
    for (int s = 0; s < e->n_sched; s++) {
        eng_req *r = e->sched[s];
        e->row_start[s] = row;
        r->row0 = row;
        if (r->rows == 1) nd++;
        for (int i = 0; i < r->rows; i++, row++) {
            int pos = r->n_comp + i;
            e->ids[row] = r->tok[pos];
            e->pos32[row] = pos, e->positions[row] = pos;
            e->slots[row] = r->blk[pos / e->bs] * e->bs + pos % e->bs;
            e->seq_of_row[row] = s;
        }
        e->kv_len[s] = r->n_comp + r->rows;
        int32_t *bt = e->bt + (size_t)s * e->max_blk;
        memcpy(bt, r->blk, sizeof *r->blk * (size_t)r->n_blk);
        /* dropped blocks: the attention kernels do not read keys before the window (the
         * batch-invariant path reads its tiles and masks them out), but every table entry
         * below kv_len must name a block: the first one held */
        for (int b = 0; b < r->n_drop; b++) bt[b] = r->blk[r->n_drop];
        if (r->n_comp + r->rows == r->n_tok) e->out_rows[outs] = row - 1, r->out = outs++;
    }
    e->row_start[e->n_sched] = row;
    int real_out = outs;
    if (!outs) e->out_rows[outs++] = 0; /* every sequence is mid-prompt: one row's logits, unused */
    e->batch.n_seqs = e->n_sched, e->batch.n_decode = nd;
    loom_step st = {.n_rows = row, .pos = 0, .n_out = outs, .batch = &e->batch};
    *n_rows = row, *n_out = real_out;
    e->last_rows = row;
    e->last = nd == e->n_sched && e->decode ? e->decode : e->prog;
    return loom_program_run(e->last, &st);
}

/* ------------------------------------------------------------ sampling and events */

static void finish(loom_engine *e, eng_req *r, loom_finish_reason why, const char *msg) {
    const char *rest = "";
    size_t n_rest = 0;
    if (why != LOOM_FINISH_STOP || !r->stops.stopped) loom_stop_strings_flush(&r->stops, &rest, &n_rest);
    if (why == LOOM_FINISH_CANCELLED || why == LOOM_FINISH_ERROR) n_rest = 0; /* nothing more is delivered */
    r->finish = why;
    if (msg) { /* cut to the buffer (a kernel's message is short; the bound keeps gcc's checks quiet) */
        size_t n = strnlen(msg, sizeof r->error - 1);
        memcpy(r->error, msg, n);
        r->error[n] = '\0';
    }
    loom_engine_event *v = eng_event(e, r, -1, rest, n_rest);
    if (v) v->finish = why, v->error = why == LOOM_FINISH_ERROR ? r->error : NULL;
    eng_release(e, r);
    r->state = REQ_DONE;
}

/* Natural log-probabilities of logits (temperature 1) into e->probs; the token's own and the top n. */
static void logprobs(loom_engine *e, const float *lg, int32_t token, loom_engine_event *v, int n) {
    const int V = e->V;
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
    float lse = mx + (float)log(sum);
    v->logprob = (loom_token_logprob){token, lg[token] - lse};
    if (e->n_lp + n > e->cap_lp) {
        int cap = e->cap_lp ? 2 * e->cap_lp : 256;
        while (cap < e->n_lp + n) cap *= 2;
        loom_token_logprob *p = realloc(e->lp, sizeof *p * (size_t)cap);
        if (!p) return;
        e->lp = p, e->cap_lp = cap;
    }
    loom_token_logprob *top = e->lp + e->n_lp;
    int k = 0; /* the n largest by insertion (n <= LOOM_MAX_LOGPROBS) */
    for (int i = 0; i < V; i++) {
        if (k == n && lg[i] <= top[k - 1].logprob) continue;
        int j = k < n ? k++ : n - 1;
        while (j > 0 && top[j - 1].logprob < lg[i]) top[j] = top[j - 1], j--;
        top[j] = (loom_token_logprob){i, lg[i]};
    }
    for (int j = 0; j < k; j++) top[j].logprob -= lse;
    v->top = (const loom_token_logprob *)(uintptr_t)e->n_lp; /* an offset until the step ends */
    v->n_top = k;
    e->n_lp += k;
}

static loom_status grow_tokens(eng_req *r) {
    if (r->n_tok < r->cap_tok) return LOOM_OK;
    int cap = 2 * r->cap_tok;
    int32_t *p = realloc(r->tok, sizeof *p * (size_t)cap);
    LOOM_RETURN_IF(!p, LOOM_ERR_NOMEM, "engine: out of memory");
    r->tok = p, r->cap_tok = cap;
    return LOOM_OK;
}

/* The next token of a request whose rows reached its last token. */
static loom_status sample(loom_engine *e, eng_req *r, const float *lg) {
    int32_t t;
    loom_status s = loom_sampler_sample(r->sampler, lg, &t);
    if (s != LOOM_OK) {
        finish(e, r, LOOM_FINISH_ERROR, loom_last_error());
        return LOOM_OK;
    }
    /* EOS or any control token (end of turn) ends the text; BOS too (llama2.c: it delimits sequences) */
    int eos = t == loom_tokenizer_eos(e->tok) || t == loom_tokenizer_bos(e->tok) || loom_tokenizer_is_control(e->tok, t);
    if (eos && !r->p.ignore_eos) {
        finish(e, r, LOOM_FINISH_STOP, NULL);
        return LOOM_OK;
    }
    LOOM_TRY(grow_tokens(r));
    LOOM_TRY(loom_sampler_accept(r->sampler, t));
    int prev = r->tok[r->n_tok - 1];
    r->tok[r->n_tok++] = t;
    r->n_gen++;
    e->st.generated_tokens++;
    size_t len = 0;
    const char *piece = loom_tokenizer_decode(e->tok, prev, t, &len);
    const char *out = "";
    size_t n_out = 0;
    int stopped = loom_stop_strings_push(&r->stops, piece ? piece : "", piece ? len : 0, &out, &n_out);
    loom_engine_event *v = eng_event(e, r, t, out, n_out);
    LOOM_RETURN_IF(!v, LOOM_ERR_NOMEM, "engine: out of memory");
    v->logits = lg;
    if (r->p.logprobs > 0) logprobs(e, lg, t, v, r->p.logprobs);
    if (stopped) finish(e, r, LOOM_FINISH_STOP, NULL);
    else if ((r->p.max_tokens && r->n_gen >= r->p.max_tokens) || r->n_tok > e->p.seq_len)
        finish(e, r, LOOM_FINISH_LENGTH, NULL); /* max_tokens, or no position left for the token just sampled */
    return LOOM_OK;
}

/* Drops finished requests (their events are out). */
static void sweep(loom_engine *e) {
    int w = 0, done = 0;
    for (int i = 0; i < e->n_reqs; i++) {
        eng_req *r = e->reqs[i];
        if (r->state == REQ_DONE) eng_req_free(r), done++;
        else e->reqs[w++] = r;
    }
    e->n_reqs = w;
    if (done) {
        pthread_mutex_lock(&e->mu);
        e->pending -= done;
        pthread_mutex_unlock(&e->mu);
    }
}

loom_status eng_step(loom_engine *e) {
    drain(e);
    schedule(e);
    loom_status s = LOOM_OK;
    if (e->n_sched) {
        int rows, outs;
        s = run_batch(e, &rows, &outs);
        if (s != LOOM_OK) { /* the step failed: its sequences end with the error */
            char msg[256];
            snprintf(msg, sizeof msg, "%s", loom_last_error());
            for (int i = 0; i < e->n_sched; i++) finish(e, e->sched[i], LOOM_FINISH_ERROR, msg);
        } else {
            e->st.steps++, e->st.rows += rows;
            const float *logits = loom_program_output(e->last)->data;
            for (int i = 0; i < e->n_sched && s == LOOM_OK; i++) {
                eng_req *r = e->sched[i];
                if (r->n_comp < r->n_prompt) e->st.prompt_tokens += (r->n_comp + r->rows < r->n_prompt ? r->n_comp + r->rows : r->n_prompt) - r->n_comp;
                r->n_comp += r->rows;
                commit_full(e, r);
                drop_window(e, r);
                if (r->out >= 0) s = sample(e, r, logits + (size_t)r->out * e->V);
            }
        }
    }
    sweep(e);
    return s;
}
