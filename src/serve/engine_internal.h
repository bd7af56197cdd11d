/* Internals of the batch engine, shared by engine.c (creation, requests,
 * the KV pool) and engine_step.c (scheduling, the forward pass, sampling). */
#ifndef LOOM_SERVE_ENGINE_INTERNAL_H
#define LOOM_SERVE_ENGINE_INTERNAL_H

#include <pthread.h>

#include "graph/program.h"
#include "model/stop_strings.h"
#include "serve/engine.h"
#include "serve/kv_blocks.h"

typedef enum { REQ_WAITING = 0, REQ_RUNNING, REQ_DONE } req_state;

typedef struct eng_req {
    int64_t id;
    req_state state;
    loom_request_params p;       /* stops point into stop_text */
    char *stop_text;
    int32_t *tok;                /* prompt, then generated tokens */
    int n_tok, cap_tok, n_prompt, n_gen;
    int n_comp;                  /* tokens whose K/V are in the cache: positions 0..n_comp-1 */
    int *blk;                    /* block table; -1: a block dropped from the window (below n_drop) */
    uint64_t *hash;              /* hash of block i once it is full (prefix cache chain) */
    int n_blk, n_hash, cap_blk;
    int n_drop;                  /* leading blocks given back: every key in them left the window */
    int n_cached;                /* prompt tokens the first admission found cached */
    int admitted;                /* admitted once (n_cached is set) */
    int64_t order;               /* admission order: preemption takes the newest first */
    int cancel;
    loom_sampler *sampler;
    loom_stop_strings stops;
    loom_finish_reason finish;
    char error[256];
    /* this step */
    int rows, row0, out;         /* rows scheduled, the first, the output row index (-1 none) */
} eng_req;

struct loom_engine {
    loom_model *m;
    const loom_tokenizer *tok;
    loom_engine_params p;
    int V, L, Hkv, D, bs, n_blocks, max_blk;   /* max_blk: blocks one sequence may hold */
    int window;                                /* keys a query sees in every layer (sliding window); 0: all */
    loom_dtype kvt;
    /* the paged KV cache: one mapping, K then V per layer, then the i8 scales */
    unsigned char *kv_mem;
    size_t kv_bytes, layer_bytes, scale_layer_bytes;
    loom_kv_blocks *blocks;
    loom_program *prog;          /* steps of up to n_batch rows */
    loom_program *decode;        /* steps where every sequence decodes (up to n_seq_max rows); NULL when
                                    n_batch is no larger */
    loom_program *last;          /* the program of the last step */
    int last_rows;               /* the rows it ran */
    /* the program's inputs (bound into its graph as external tensors) and the step's batch */
    int32_t *ids, *pos32, *slots, *out_rows, *bt;
    int64_t *positions, *row_start, *seq_of_row, *kv_len;
    loom_tensor bt_t;
    loom_batch batch;
    int *kc_id, *vc_id, *ks_id, *vs_id;        /* per-layer tensor ids while building */
    /* requests: running and waiting ones, in admission order */
    eng_req **reqs;
    int n_reqs, cap_reqs;
    eng_req **sched;                           /* this step's sequences, decode ones first */
    int n_sched;
    int64_t next_order;
    /* from other threads */
    pthread_mutex_t mu;
    pthread_cond_t work;                       /* signalled by add, cancel and wake */
    int woken;                                 /* loom_engine_wake since the last wait */
    eng_req **incoming;
    int n_in, cap_in;
    int64_t *cancels;
    int n_cancel, cap_cancel;
    int pending;                               /* requests added and not finished */
    /* the step's events and their text */
    loom_engine_event *ev;
    int n_ev, cap_ev;
    char *text;
    size_t n_text, cap_text;
    loom_token_logprob *lp;
    int n_lp, cap_lp;
    float *probs;                              /* [V] scratch of the log-probabilities */
    loom_engine_stats st;
};

/* engine.c */
void eng_req_free(eng_req *r);
/* Releases the blocks a request holds (committed ones stay cached). */
void eng_release(loom_engine *e, eng_req *r);
/* Copies block src's K/V (and scales) to block dst in every layer. */
void eng_copy_block(loom_engine *e, int dst, int src);
/* Appends an event (its text copied); returns it, or NULL when out of memory. */
loom_engine_event *eng_event(loom_engine *e, const eng_req *r, int32_t token, const char *text, size_t n);

/* engine_step.c */
loom_status eng_step(loom_engine *e);

#endif
