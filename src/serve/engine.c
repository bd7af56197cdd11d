/* The batch engine (engine.h): creation, the paged KV pool, the forward
 * program over it, requests from any thread, events. The step itself is in
 * engine_step.c. */
#include "serve/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "base/status.h"
#include "graph/act_precision.h"
#include "graph/profile.h"

static const char *const finish_names[] = {"", "stop", "length", "cancelled", "error"};

const char *loom_finish_reason_name(loom_finish_reason r) {
    return (unsigned)r < sizeof finish_names / sizeof finish_names[0] ? finish_names[r] : "";
}

loom_engine_params loom_engine_default_params(void) {
    loom_engine_params p = {.n_seq_max = 16, .n_ctx = 0, .seq_len = 0, .block_size = 16, .n_batch = 512,
                            .prefix_cache = 1};
    return p;
}

loom_request_params loom_request_default_params(void) {
    loom_request_params p;
    memset(&p, 0, sizeof p);
    p.sampling = loom_sampler_default_params();
    return p;
}

/* ------------------------------------------------------------ the forward program */

/* The program builder: the ragged batch's forward pass over the engine's
 * input buffers and paged cache. */
static loom_status build(void *ctx, loom_graph *g, const loom_step *s, int *out) {
    loom_engine *e = ctx;
    const loom_llama_config *c = &e->m->cfg;
    const int n = s->n_rows, n_out = s->n_out;
    loom_tensor t;
    const int64_t rows[1] = {n}, outs[1] = {n_out};
    LOOM_TRY(loom_tensor_init(&t, LOOM_I32, 1, rows, e->ids));
    loom_tensor_set_name(&t, "tokens");
    int ids = loom_graph_external(g, &t);
    LOOM_TRY(loom_tensor_init(&t, LOOM_I32, 1, rows, e->pos32));
    loom_tensor_set_name(&t, "positions");
    int positions = loom_graph_external(g, &t);
    LOOM_TRY(loom_tensor_init(&t, LOOM_I32, 1, rows, e->slots));
    loom_tensor_set_name(&t, "slots");
    int slots = loom_graph_external(g, &t);
    LOOM_TRY(loom_tensor_init(&t, LOOM_I32, 1, outs, e->out_rows));
    loom_tensor_set_name(&t, "out_rows");
    int out_rows = loom_graph_external(g, &t);
    const int64_t n_slots = (int64_t)e->n_blocks * e->bs;
    const int64_t cache_shape[3] = {n_slots, e->Hkv, e->D}, scale_shape[2] = {n_slots, e->Hkv};
    int i8 = e->kvt == LOOM_I8;
    for (int l = 0; l < c->n_layers; l++) {
        unsigned char *k = e->kv_mem + (size_t)(2 * l) * e->layer_bytes, *v = k + e->layer_bytes;
        LOOM_TRY(loom_tensor_init(&t, e->kvt, 3, cache_shape, k));
        loom_tensor_set_name(&t, "L%d.k_pool", l);
        e->kc_id[l] = loom_graph_external(g, &t);
        LOOM_TRY(loom_tensor_init(&t, e->kvt, 3, cache_shape, v));
        loom_tensor_set_name(&t, "L%d.v_pool", l);
        e->vc_id[l] = loom_graph_external(g, &t);
        if (!i8) continue;
        unsigned char *sc = e->kv_mem + (size_t)(2 * c->n_layers) * e->layer_bytes + (size_t)(2 * l) * e->scale_layer_bytes;
        LOOM_TRY(loom_tensor_init(&t, LOOM_F32, 2, scale_shape, sc));
        loom_tensor_set_name(&t, "L%d.k_scales", l);
        e->ks_id[l] = loom_graph_external(g, &t);
        LOOM_TRY(loom_tensor_init(&t, LOOM_F32, 2, scale_shape, sc + e->scale_layer_bytes));
        loom_tensor_set_name(&t, "L%d.v_scales", l);
        e->vs_id[l] = loom_graph_external(g, &t);
    }
    loom_llama_paged_io io = {.ids = ids, .positions = positions, .slots = slots, .out_rows = out_rows,
                              .k_cache = e->kc_id, .v_cache = e->vc_id, .k_scale = i8 ? e->ks_id : NULL,
                              .v_scale = i8 ? e->vs_id : NULL, .n_blocks = e->n_blocks, .block_size = e->bs,
                              .max_seqs = e->p.n_seq_max, .max_kv = e->p.seq_len};
    *out = loom_llama_build_paged(g, c, &e->m->w, &io, n, n_out);
    loom_graph_set_act_precision(g, e->m->params.act_precision); /* the model's, as its own programs */
    return loom_graph_status(g);
}

/* ------------------------------------------------------------ creation */

static loom_status check_params(const loom_model *m, loom_engine_params *p) {
    loom_engine_params d = loom_engine_default_params();
    if (!p->n_seq_max) p->n_seq_max = d.n_seq_max;
    if (!p->block_size) p->block_size = d.block_size;
    if (!p->n_batch) p->n_batch = d.n_batch;
    if (!p->seq_len) p->seq_len = m->n_ctx;
    if (!p->n_ctx) p->n_ctx = m->n_ctx;
    LOOM_RETURN_IF(p->n_seq_max < 1 || p->n_seq_max > LOOM_PAGED_ATTENTION_MAX_SEQS, LOOM_ERR_INVALID_ARG,
                   "engine: %d parallel sequences (expected 1..%d)", p->n_seq_max, LOOM_PAGED_ATTENTION_MAX_SEQS);
    LOOM_RETURN_IF(p->block_size < 1 || p->block_size > 1024, LOOM_ERR_INVALID_ARG,
                   "engine: KV block size %d (expected 1..1024)", p->block_size);
    LOOM_RETURN_IF(p->n_batch < 1 || p->n_batch > 65536, LOOM_ERR_INVALID_ARG,
                   "engine: a step budget of %d tokens (expected 1..65536)", p->n_batch);
    if (p->n_batch < p->n_seq_max) p->n_batch = p->n_seq_max; /* every sequence can decode in one step */
    LOOM_RETURN_IF(p->seq_len < 2 || p->seq_len > m->cfg.seq_len, LOOM_ERR_INVALID_ARG,
                   "engine: a sequence context of %d (expected 2..%d, the model's)", p->seq_len, m->cfg.seq_len);
    LOOM_RETURN_IF(p->n_ctx < p->block_size || p->n_ctx > (1 << 26), LOOM_ERR_INVALID_ARG,
                   "engine: a KV pool of %d positions (expected %d..2^26)", p->n_ctx, p->block_size);
    return LOOM_OK;
}

static loom_status alloc_buffers(loom_engine *e) {
    const int R = e->p.n_batch, S = e->p.n_seq_max;
    e->ids = calloc((size_t)R, sizeof *e->ids);
    e->pos32 = calloc((size_t)R, sizeof *e->pos32);
    e->slots = calloc((size_t)R, sizeof *e->slots);
    e->out_rows = calloc((size_t)S, sizeof *e->out_rows);
    e->positions = calloc((size_t)R, sizeof *e->positions);
    e->seq_of_row = calloc((size_t)R, sizeof *e->seq_of_row);
    e->row_start = calloc((size_t)S + 1, sizeof *e->row_start);
    e->kv_len = calloc((size_t)S, sizeof *e->kv_len);
    e->bt = calloc((size_t)S * (size_t)e->max_blk, sizeof *e->bt);
    e->sched = calloc((size_t)S, sizeof *e->sched);
    e->probs = malloc((size_t)e->V * sizeof *e->probs);
    int L = e->L;
    e->kc_id = malloc(sizeof(int) * 4 * (size_t)L);
    LOOM_RETURN_IF(!e->ids || !e->pos32 || !e->slots || !e->out_rows || !e->positions || !e->seq_of_row ||
                       !e->row_start || !e->kv_len || !e->bt || !e->sched || !e->probs || !e->kc_id,
                   LOOM_ERR_NOMEM, "engine: out of memory");
    e->vc_id = e->kc_id + L, e->ks_id = e->kc_id + 2 * L, e->vs_id = e->kc_id + 3 * L;
    const int64_t bt_shape[2] = {S, e->max_blk};
    LOOM_TRY(loom_tensor_init(&e->bt_t, LOOM_I32, 2, bt_shape, e->bt));
    e->batch = (loom_batch){.row_start = e->row_start, .positions = e->positions, .seq_of_row = e->seq_of_row,
                            .kv_len = e->kv_len, .block_table = &e->bt_t, .out_rows = e->out_rows};
    return LOOM_OK;
}

loom_status loom_engine_create(loom_model *m, const loom_tokenizer *tok, const loom_engine_params *pp,
                               loom_engine **out) {
    LOOM_RETURN_IF(!m || !tok || !out, LOOM_ERR_INVALID_ARG, "engine_create: NULL argument");
    *out = NULL;
    loom_engine_params p = pp ? *pp : loom_engine_default_params();
    LOOM_TRY(check_params(m, &p));
    loom_engine *e = calloc(1, sizeof *e);
    LOOM_RETURN_IF(!e, LOOM_ERR_NOMEM, "engine: out of memory");
    e->m = m, e->tok = tok, e->p = p;
    const loom_llama_config *c = &m->cfg;
    e->V = c->vocab_size, e->L = c->n_layers, e->Hkv = c->n_kv_heads, e->D = c->head_dim;
    /* blocks leave the cache with the window only when every layer slides
     * (Gemma's global layers still read every key) */
    e->window = c->sliding_window > 0 ? c->sliding_window : 0;
    for (int l = 0; l < c->n_layers && e->window > 0; l++)
        if (loom_llama_layer_window(c, l) != e->window) e->window = 0;
    e->bs = p.block_size;
    e->n_blocks = (p.n_ctx + p.block_size - 1) / p.block_size;
    e->max_blk = (p.seq_len + p.block_size - 1) / p.block_size;
    e->kvt = m->params.kv_dtype;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, NULL);
    /* the executor is the model's: invariant while any invariant engine over it lives */
    if (p.batch_invariant) m->invariant_engines++;
    m->exec->invariant = m->invariant_engines > 0;
    loom_status s = alloc_buffers(e);
    /* the pool: anonymous memory, resident only as blocks are written, in 4 KiB
     * pages: each layer's K and V pool is its own region, so with transparent
     * huge pages a sequence's first block faults in 2 * n_layers huge pages
     * (SmolLM2 at its 8192 context: a 5-token prompt took 460 ms instead of
     * 21 ms), and decode at depth 2048 was no faster with them (np 1: 122-147
     * t/s either way; np 16: 187-236 without, 200-219 with; noise-level) */
    size_t slots = (size_t)e->n_blocks * (size_t)e->bs;
    e->layer_bytes = (slots * (size_t)e->Hkv * (size_t)e->D * loom_dtype_size(e->kvt) + 4095) & ~(size_t)4095;
    e->scale_layer_bytes = e->kvt == LOOM_I8 ? (slots * (size_t)e->Hkv * sizeof(float) + 4095) & ~(size_t)4095 : 0;
    e->kv_bytes = (size_t)(2 * e->L) * (e->layer_bytes + e->scale_layer_bytes);
    if (s == LOOM_OK) {
        void *mem = mmap(NULL, e->kv_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED) s = loom_set_error(LOOM_ERR_NOMEM, "engine: cannot map a KV pool of %zu bytes", e->kv_bytes);
        else e->kv_mem = mem;
    }
    if (s == LOOM_OK) s = loom_kv_blocks_init(&e->blocks, e->n_blocks, e->bs);
    if (s == LOOM_OK) {
        loom_program_desc d = {.name = "batch", .build = build, .ctx = e, .max_rows = p.n_batch, .max_end = 0,
                               .max_out = p.n_seq_max};
        s = loom_program_compile(m->exec, &d, &e->prog);
        /* a bucket of its own for steps that only decode: tiles chosen for their few rows */
        loom_program_desc dd = {.name = "batch_decode", .build = build, .ctx = e, .max_rows = p.n_seq_max,
                                .max_end = 0, .max_out = p.n_seq_max};
        if (s == LOOM_OK && p.n_seq_max < p.n_batch) s = loom_program_compile(m->exec, &dd, &e->decode);
    }
    if (s != LOOM_OK) {
        loom_engine_free(e);
        return s;
    }
    *out = e;
    return LOOM_OK;
}

void eng_req_free(eng_req *r) {
    if (!r) return;
    loom_sampler_free(r->sampler);
    loom_stop_strings_free(&r->stops);
    free(r->stop_text), free(r->tok), free(r->blk), free(r->hash);
    free(r);
}

void loom_engine_free(loom_engine *e) {
    if (!e) return;
    if (e->p.batch_invariant) e->m->invariant_engines--; /* counted once the engine got this far */
    e->m->exec->invariant = e->m->invariant_engines > 0;
    loom_program_free(e->prog);
    loom_program_free(e->decode);
    loom_kv_blocks_free(e->blocks);
    if (e->kv_mem) munmap(e->kv_mem, e->kv_bytes);
    for (int i = 0; i < e->n_reqs; i++) eng_req_free(e->reqs[i]);
    for (int i = 0; i < e->n_in; i++) eng_req_free(e->incoming[i]);
    free(e->reqs), free(e->incoming), free(e->cancels), free(e->sched);
    free(e->ids), free(e->pos32), free(e->slots), free(e->out_rows), free(e->bt);
    free(e->positions), free(e->seq_of_row), free(e->row_start), free(e->kv_len);
    free(e->kc_id), free(e->probs);
    free(e->ev), free(e->text), free(e->lp);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->work);
    free(e);
}

/* ------------------------------------------------------------ requests */

static loom_status req_create(loom_engine *e, int64_t id, const int32_t *prompt, int n, const loom_request_params *pp,
                              eng_req **out) {
    loom_request_params p = pp ? *pp : loom_request_default_params();
    LOOM_RETURN_IF(!prompt || n < 1, LOOM_ERR_INVALID_ARG, "request %lld: an empty prompt", (long long)id);
    LOOM_RETURN_IF(n > e->p.seq_len, LOOM_ERR_INVALID_ARG,
                   "request %lld: a prompt of %d tokens does not fit the sequence context of %d", (long long)id, n,
                   e->p.seq_len);
    for (int i = 0; i < n; i++)
        LOOM_RETURN_IF(prompt[i] < 0 || prompt[i] >= e->V, LOOM_ERR_INVALID_ARG,
                       "request %lld: token %d at index %d is outside the vocabulary of %d", (long long)id,
                       prompt[i], i, e->V);
    LOOM_RETURN_IF(p.max_tokens < 0, LOOM_ERR_INVALID_ARG, "request %lld: max_tokens %d < 0", (long long)id,
                   p.max_tokens);
    LOOM_RETURN_IF(p.logprobs < 0 || p.logprobs > LOOM_MAX_LOGPROBS, LOOM_ERR_INVALID_ARG,
                   "request %lld: logprobs %d (expected 0..%d)", (long long)id, p.logprobs, LOOM_MAX_LOGPROBS);
    int n_stops = p.n_stops;
    if (!n_stops) /* a NULL-terminated list */
        while (n_stops < LOOM_MAX_STOPS && p.stops[n_stops]) n_stops++;
    LOOM_RETURN_IF(n_stops < 0 || n_stops > LOOM_MAX_STOPS, LOOM_ERR_INVALID_ARG,
                   "request %lld: %d stop strings (at most %d)", (long long)id, n_stops, LOOM_MAX_STOPS);
    eng_req *r = calloc(1, sizeof *r);
    LOOM_RETURN_IF(!r, LOOM_ERR_NOMEM, "engine: out of memory");
    r->id = id, r->p = p, r->n_prompt = n, r->out = -1;
    r->cap_tok = n + 16;
    r->tok = malloc(sizeof *r->tok * (size_t)r->cap_tok);
    r->cap_blk = e->max_blk;
    r->blk = malloc(sizeof *r->blk * (size_t)r->cap_blk);
    r->hash = malloc(sizeof *r->hash * (size_t)r->cap_blk);
    size_t text = 0;
    for (int i = 0; i < n_stops; i++) text += (p.stops[i] ? strlen(p.stops[i]) : 0) + 1;
    r->stop_text = malloc(text + 1);
    loom_status s = !r->tok || !r->blk || !r->hash || !r->stop_text ? loom_set_error(LOOM_ERR_NOMEM, "engine: out of memory")
                                                                  : LOOM_OK;
    if (s == LOOM_OK) {
        memcpy(r->tok, prompt, sizeof *prompt * (size_t)n);
        r->n_tok = n;
        char *w = r->stop_text; /* the stop strings, copied */
        for (int i = 0; i < n_stops; i++) {
            size_t l = p.stops[i] ? strlen(p.stops[i]) : 0;
            memcpy(w, p.stops[i] ? p.stops[i] : "", l);
            w[l] = '\0';
            r->p.stops[i] = w;
            w += l + 1;
        }
        r->p.n_stops = n_stops;
        s = loom_stop_strings_init(&r->stops, r->p.stops, n_stops);
    }
    if (s == LOOM_OK) s = loom_sampler_init(&r->sampler, e->V, &p.sampling);
    for (int i = 0; s == LOOM_OK && i < n; i++) s = loom_sampler_accept(r->sampler, prompt[i]); /* the penalty's history */
    if (s != LOOM_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", loom_last_error());
        eng_req_free(r);
        return loom_set_error(s, "request %lld: %s", (long long)id, msg);
    }
    *out = r;
    return LOOM_OK;
}

static int grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return 1;
    int c = *cap ? 2 * *cap : 16;
    while (c < need) c *= 2;
    void *p = realloc(*arr, (size_t)c * elem);
    if (!p) return 0;
    *arr = p, *cap = c;
    return 1;
}

loom_status loom_engine_add(loom_engine *e, int64_t id, const int32_t *prompt, int n_prompt,
                            const loom_request_params *p) {
    LOOM_RETURN_IF(!e, LOOM_ERR_INVALID_ARG, "engine_add: NULL engine");
    eng_req *r;
    LOOM_TRY(req_create(e, id, prompt, n_prompt, p, &r));
    pthread_mutex_lock(&e->mu);
    int ok = grow((void **)&e->incoming, &e->cap_in, e->n_in + 1, sizeof *e->incoming);
    if (ok) e->incoming[e->n_in++] = r, e->pending++, pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->mu);
    if (!ok) {
        eng_req_free(r);
        return loom_set_error(LOOM_ERR_NOMEM, "engine: out of memory");
    }
    return LOOM_OK;
}

loom_status loom_engine_add_text(loom_engine *e, int64_t id, const char *text, size_t len,
                                 const loom_request_params *p, int *n_prompt) {
    LOOM_RETURN_IF(!e || (!text && len), LOOM_ERR_INVALID_ARG, "engine_add_text: NULL argument");
    LOOM_RETURN_IF(len > (size_t)1 << 30, LOOM_ERR_INVALID_ARG, "request %lld: a prompt of %zu bytes",
                   (long long)id, len);
    const loom_tokenizer *tok = e->tok;
    int flags = (loom_tokenizer_add_bos(tok) ? LOOM_TOK_BOS : 0) |
                (strcmp(loom_tokenizer_kind_name(tok), "llama2c") ? LOOM_TOK_PARSE_SPECIAL : 0);
    int cap = (int)len + 4, n = 0;
    int32_t *ids = malloc(sizeof *ids * (size_t)cap);
    LOOM_RETURN_IF(!ids, LOOM_ERR_NOMEM, "engine: out of memory");
    loom_status s = loom_tokenizer_encode_ex(tok, text ? text : "", len, flags, ids, cap, &n);
    if (s == LOOM_OK && n == 0 && loom_tokenizer_bos(tok) >= 0) ids[n++] = loom_tokenizer_bos(tok);
    if (n_prompt) *n_prompt = s == LOOM_OK ? n : 0;
    if (s == LOOM_OK) s = loom_engine_add(e, id, ids, n, p);
    free(ids);
    return s;
}

void loom_engine_cancel(loom_engine *e, int64_t id) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    if (grow((void **)&e->cancels, &e->cap_cancel, e->n_cancel + 1, sizeof *e->cancels)) e->cancels[e->n_cancel++] = id;
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->mu);
}

int loom_engine_wait(loom_engine *e, int timeout_ms) {
    pthread_mutex_lock(&e->mu);
    if (!e->pending && !e->woken && timeout_ms != 0) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&e->work, &e->mu);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += timeout_ms / 1000;
            ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&e->work, &e->mu, &ts);
        }
    }
    int n = e->pending;
    e->woken = 0;
    pthread_mutex_unlock(&e->mu);
    return n;
}

void loom_engine_wake(loom_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->woken = 1;
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->mu);
}

int loom_engine_pending(const loom_engine *e) {
    pthread_mutex_lock((pthread_mutex_t *)&e->mu);
    int n = e->pending;
    pthread_mutex_unlock((pthread_mutex_t *)&e->mu);
    return n;
}

/* ------------------------------------------------------------ blocks and events */

void eng_release(loom_engine *e, eng_req *r) {
    for (int i = r->n_drop; i < r->n_blk; i++) loom_kv_blocks_unref(e->blocks, r->blk[i]);
    r->n_blk = r->n_hash = r->n_drop = 0;
    r->n_comp = 0;
}

void eng_copy_block(loom_engine *e, int dst, int src) {
    size_t row = (size_t)e->Hkv * (size_t)e->D * loom_dtype_size(e->kvt), blk = row * (size_t)e->bs;
    size_t srow = (size_t)e->Hkv * sizeof(float), sblk = srow * (size_t)e->bs;
    for (int l = 0; l < 2 * e->L; l++) {
        unsigned char *base = e->kv_mem + (size_t)l * e->layer_bytes;
        memcpy(base + (size_t)dst * blk, base + (size_t)src * blk, blk);
        if (e->kvt != LOOM_I8) continue;
        unsigned char *sc = e->kv_mem + (size_t)(2 * e->L) * e->layer_bytes + (size_t)l * e->scale_layer_bytes;
        memcpy(sc + (size_t)dst * sblk, sc + (size_t)src * sblk, sblk);
    }
}

loom_engine_event *eng_event(loom_engine *e, const eng_req *r, int32_t token, const char *text, size_t n) {
    if (!grow((void **)&e->ev, &e->cap_ev, e->n_ev + 1, sizeof *e->ev)) return NULL;
    if (e->n_text + n + 1 > e->cap_text) {
        size_t c = e->cap_text ? 2 * e->cap_text : 4096;
        while (c < e->n_text + n + 1) c *= 2;
        char *t = realloc(e->text, c);
        if (!t) return NULL;
        e->text = t, e->cap_text = c;
    }
    loom_engine_event *v = &e->ev[e->n_ev++];
    memset(v, 0, sizeof *v);
    v->id = r->id, v->token = token;
    memcpy(e->text + e->n_text, text, n);
    e->text[e->n_text + n] = '\0';
    v->text = (const char *)(uintptr_t)e->n_text; /* an offset until the step ends (text may move) */
    v->text_len = n;
    e->n_text += n + 1;
    v->n_prompt = r->n_prompt, v->n_generated = r->n_gen, v->n_cached = r->n_cached;
    return v;
}

loom_status loom_engine_step(loom_engine *e, const loom_engine_event **events, int *n_events) {
    LOOM_RETURN_IF(!e || !events || !n_events, LOOM_ERR_INVALID_ARG, "engine_step: NULL argument");
    e->n_ev = 0, e->n_text = 0, e->n_lp = 0;
    loom_status s = eng_step(e);
    for (int i = 0; i < e->n_ev; i++) { /* offsets into the text and log-probability arrays, now final */
        e->ev[i].text = e->text + (size_t)(uintptr_t)e->ev[i].text;
        if (e->ev[i].n_top) e->ev[i].top = e->lp + (size_t)(uintptr_t)e->ev[i].top;
    }
    *events = e->ev;
    *n_events = e->n_ev;
    return s;
}

const loom_graph *loom_engine_last_graph(loom_engine *e) {
    if (!e->last) return NULL;
    loom_program_account(e->last);
    return loom_program_graph(e->last);
}

loom_status loom_engine_last_profile(loom_engine *e, loom_profile *out) {
    LOOM_RETURN_IF(!e || !out, LOOM_ERR_INVALID_ARG, "engine_last_profile: NULL argument");
    memset(out, 0, sizeof *out);
    const loom_graph *g = loom_engine_last_graph(e);
    LOOM_RETURN_IF(!g, LOOM_ERR_INVALID_ARG, "engine_last_profile: no step has run a program yet");
    const char *phase = e->last == e->decode ? "decode" : "prefill";
    return loom_profile_collect(g, e->m->cfg.n_layers, phase, loom_mode_name(e->m->params.mode), e->last_rows, out);
}

loom_status loom_engine_profile_steps(loom_engine *e, int reps, loom_profile *out) {
    LOOM_RETURN_IF(!e || !out, LOOM_ERR_INVALID_ARG, "engine_profile_steps: NULL argument");
    memset(out, 0, sizeof *out);
    LOOM_RETURN_IF(reps < 1 || reps > 1000, LOOM_ERR_INVALID_ARG,
                   "engine_profile_steps: repetitions must be in 1..1000, got %d", reps);
    if (e->prog) loom_program_set_timing(e->prog, 1);
    if (e->decode) loom_program_set_timing(e->decode, 1);
    loom_status s = LOOM_OK;
    double *t = NULL;
    const loom_program *prog = NULL;
    const loom_graph *g = NULL;
    int rows = 0;
    for (int r = -1; r < reps && s == LOOM_OK; r++) {
        const loom_engine_event *ev;
        int n_ev;
        int steps = (int)e->st.steps;
        if ((s = loom_engine_step(e, &ev, &n_ev)) != LOOM_OK) break;
        if (e->st.steps == steps || !e->last || (r >= 0 && (e->last != prog || e->last_rows != rows))) {
            s = loom_set_error(LOOM_ERR_INVALID_ARG, "engine_profile_steps: step %d ran %s", r + 2,
                               e->st.steps == steps || !e->last ? "no program (nothing pending)"
                                                                : "another program or row count than the one before "
                                                                  "(a prompt chunk, a finished sequence)");
            break;
        }
        prog = e->last, rows = e->last_rows;
        if (r < 0) continue;
        g = loom_engine_last_graph(e);
        if (!t && !(t = malloc(sizeof *t * (size_t)reps * (size_t)g->n_nodes))) {
            s = loom_set_error(LOOM_ERR_NOMEM, "engine_profile_steps: out of memory");
            break;
        }
        for (int k = 0; k < g->n_nodes; k++) t[(size_t)k * reps + r] = g->nodes[k].stats.time_ns;
    }
    if (e->prog) loom_program_set_timing(e->prog, 0);
    if (e->decode) loom_program_set_timing(e->decode, 0);
    if (s == LOOM_OK) {
        loom_graph *gm = (loom_graph *)g; /* the program's own graph: its node stats take the medians */
        loom_profile_node_medians(gm, t, reps);
        const char *phase = e->last == e->decode ? "decode" : "prefill";
        s = loom_profile_collect(gm, e->m->cfg.n_layers, phase, loom_mode_name(e->m->params.mode), rows, out);
    }
    free(t);
    return s;
}

loom_engine_stats loom_engine_get_stats(const loom_engine *e) {
    loom_engine_stats st = e->st;
    loom_kv_blocks_stats b = loom_kv_blocks_get_stats(e->blocks);
    st.blocks_used = b.used, st.blocks_free = b.free, st.blocks_cached = b.cached;
    st.n_blocks = b.n_blocks, st.block_size = e->bs;
    st.prefix_hits = b.hits, st.prefix_misses = b.misses, st.evictions = b.evictions;
    st.running = st.waiting = 0;
    for (int i = 0; i < e->n_reqs; i++) {
        st.running += e->reqs[i]->state == REQ_RUNNING;
        st.waiting += e->reqs[i]->state == REQ_WAITING;
    }
    return st;
}

loom_status loom_engine_check(const loom_engine *e) {
    LOOM_TRY(loom_kv_blocks_check(e->blocks));
    int *held = calloc((size_t)e->n_blocks, sizeof *held);
    LOOM_RETURN_IF(!held, LOOM_ERR_NOMEM, "engine_check: out of memory");
    for (int i = 0; i < e->n_reqs; i++)
        for (int b = e->reqs[i]->n_drop; b < e->reqs[i]->n_blk; b++) held[e->reqs[i]->blk[b]]++;
    loom_status s = LOOM_OK;
    for (int b = 0; b < e->n_blocks && s == LOOM_OK; b++)
        if (held[b] != loom_kv_blocks_refs(e->blocks, b))
            s = loom_set_error(LOOM_ERR_INTERNAL, "engine: block %d has %d references, %d sequences hold it", b,
                               loom_kv_blocks_refs(e->blocks, b), held[b]);
    free(held);
    return s;
}
