/*
 * The batch engine (DESIGN.md, "Serving"): many sequences in one forward pass
 * over a paged KV cache. Each step runs one forward program over a ragged
 * batch: one row for every running sequence that decodes, plus prompt chunks
 * of sequences being prefilled, under a token budget (chunked prefill: a long
 * prompt never stalls the others). Projections and FFN run over all rows at
 * once (the weights are read once per step); attention runs per sequence over
 * its own blocks (paged_attention).
 *
 * The KV cache is one pool of fixed-size blocks with a block table per
 * sequence (kv_blocks.h): prefix caching of full blocks by the hash chain of
 * their tokens, reference counts, copy-on-write of a shared block before a
 * sequence writes into it, LRU eviction of unreferenced cached blocks, and
 * preemption by recompute (the newest sequences give their blocks back and
 * resume later from their tokens) when the pool cannot hold the next step.
 *
 * Requests may be added and cancelled from any thread; loom_engine_step runs
 * on one thread at a time and returns the step's events.
 */
#ifndef LOOM_SERVE_ENGINE_H
#define LOOM_SERVE_ENGINE_H

#include <stdint.h>

#include "loom.h"
#include "graph/graph.h"
#include "model/model.h"
#include "model/tokenizer.h"

typedef struct loom_engine loom_engine;

typedef struct loom_engine_params {
    int n_seq_max;      /* sequences that run at once (llama.cpp's --parallel); 0 = 16 */
    int n_ctx;          /* KV positions of the pool, all sequences together; 0 = n_seq_max * seq_len */
    int seq_len;        /* positions one sequence may hold (prompt + generated); 0 = the model's
                           context (the model's n_ctx) */
    int block_size;     /* positions per KV block; 0 = 16 */
    int n_batch;        /* token rows one step may run (the chunked-prefill budget); 0 = 512 */
    int prefix_cache;   /* 1 (default): reuse cached blocks of earlier prompts; 0 off */
    int batch_invariant; /* 1: a request's logits are bit-identical whatever else runs with it, where
                            it sits in the batch, how its prompt is chunked, how often it is preempted,
                            and the thread count (batch-invariant kernels: the GEMM for every row count,
                            one attention kernel for every row); 0 (default): the fastest kernels, whose
                            results depend on the rows of a step within the f32 tolerance. It applies
                            to the model's executor, so to every program on it. */
} loom_engine_params;

loom_engine_params loom_engine_default_params(void);

typedef enum loom_finish_reason {
    LOOM_FINISH_NONE = 0,    /* still running */
    LOOM_FINISH_STOP,        /* EOS, an end-of-turn control token or a stop string */
    LOOM_FINISH_LENGTH,      /* max_tokens, or the sequence's context is full */
    LOOM_FINISH_CANCELLED,   /* loom_engine_cancel */
    LOOM_FINISH_ERROR,       /* the request could not run (its message in the event) */
} loom_finish_reason;

/* "stop", "length", "cancelled", "error"; "" for none. */
const char *loom_finish_reason_name(loom_finish_reason r);

#define LOOM_MAX_STOPS 16
#define LOOM_MAX_LOGPROBS 20

typedef struct loom_request_params {
    loom_sampler_params sampling;   /* temperature, top-k/p, min-p, seed, repetition penalty */
    int max_tokens;                 /* tokens to generate at most; 0 = until the context is full */
    const char *stops[LOOM_MAX_STOPS]; /* stop strings (copied), NULL-terminated or n_stops */
    int n_stops;
    int ignore_eos;                 /* 1: EOS and control tokens do not end generation */
    int logprobs;                   /* 0 none, else the top n (<= LOOM_MAX_LOGPROBS) log-probabilities
                                       of every generated token, with the token's own */
} loom_request_params;

loom_request_params loom_request_default_params(void);

typedef struct loom_token_logprob {
    int32_t token;
    float logprob;      /* natural log of the model's probability (temperature 1) */
} loom_token_logprob;

typedef struct loom_engine_event {
    int64_t id;                    /* the request's id */
    int32_t token;                 /* the token generated (-1 in a finish-only event) */
    const char *text;              /* its text, stop strings held back and cut (may be "") */
    size_t text_len;
    loom_finish_reason finish;     /* LOOM_FINISH_NONE while running */
    const char *error;             /* LOOM_FINISH_ERROR: why */
    int n_prompt, n_generated;     /* tokens so far */
    int n_cached;                  /* prompt tokens found in the prefix cache */
    const float *logits;           /* the logits the token was sampled from [vocab] (until the next step) */
    loom_token_logprob logprob;    /* logprobs > 0: the token's own */
    const loom_token_logprob *top; /* and the top n */
    int n_top;
} loom_engine_event;

typedef struct loom_engine_stats {
    int running, waiting;          /* sequences */
    int blocks_used, blocks_free, blocks_cached, n_blocks, block_size;
    long prefix_hits, prefix_misses, evictions, cow_copies, preemptions;
    long steps, rows, prompt_tokens, generated_tokens;
} loom_engine_stats;

/* Creates an engine over a loaded model (which it borrows: free the engine
 * first) and its tokenizer: the paged KV pool of the model's KV dtype and the
 * forward program over it, compiled now. Errors name the parameter. */
loom_status loom_engine_create(loom_model *m, const loom_tokenizer *tok, const loom_engine_params *p,
                               loom_engine **out);
void loom_engine_free(loom_engine *e);

/* Adds a request (any thread): its prompt tokens are copied. Errors (and no
 * request) for an empty prompt, a token outside the vocabulary, a prompt that
 * does not fit the sequence context, bad parameters. id is the caller's. */
loom_status loom_engine_add(loom_engine *e, int64_t id, const int32_t *prompt, int n_prompt,
                            const loom_request_params *p);
/* Cancels a request (any thread): its blocks are released at the next step,
 * which reports it finished with LOOM_FINISH_CANCELLED. Unknown ids are ignored. */
void loom_engine_cancel(loom_engine *e, int64_t id);

/* Runs one step: schedules, runs the forward program, samples; *events (valid
 * until the next step) gets a token event per sequence that produced one and a
 * finish event per sequence that ended. Returns LOOM_OK with no events when
 * there is nothing to do. */
loom_status loom_engine_step(loom_engine *e, const loom_engine_event **events, int *n_events);
/* Requests not finished yet (waiting, running or added since the last step). */
int loom_engine_pending(const loom_engine *e);
/* Waits until a request is pending, loom_engine_wake is called, or timeout_ms
 * pass (< 0: no limit; 0: do not wait); returns the pending requests. For the
 * thread that steps the engine (a server's loop). */
int loom_engine_wait(loom_engine *e, int timeout_ms);
/* Wakes loom_engine_wait (any thread): shutdown. */
void loom_engine_wake(loom_engine *e);
loom_engine_stats loom_engine_get_stats(const loom_engine *e);
/* The fused graph of the last step's program with its accounting (kernels,
 * bytes, flops per node: graph/profile.h), or NULL before the first step. */
const loom_graph *loom_engine_last_graph(loom_engine *e);
/* Checks the block manager's invariants and that every block a sequence holds
 * is referenced once per holder (tests). */
loom_status loom_engine_check(const loom_engine *e);

#endif
