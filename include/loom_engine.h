/*
 * loom_engine.h — the batch engine: many sequences in one forward pass over a
 * paged KV cache (docs/batch.md), and loom batch's JSONL request parser. Part
 * of loom's public API: loom.h includes it, and it can be included alone.
 */
#ifndef LOOM_ENGINE_H
#define LOOM_ENGINE_H

#include "loom.h"

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------- batch engine */
/* Many sequences in one forward pass over a paged KV cache (docs/batch.md):
 * each step runs one forward program over a ragged batch, one row for every
 * running sequence that decodes plus prompt chunks of sequences being
 * prefilled, under a token budget (chunked prefill); projections and FFN read
 * the weights once for all rows; attention runs per sequence over its own
 * blocks. The KV cache is one pool of fixed-size blocks: prefix caching of
 * full blocks by the hash chain of their tokens, reference counts,
 * copy-on-write, LRU eviction, preemption by recompute when the pool runs
 * short. Requests may be added and cancelled from any thread;
 * loom_engine_step runs on one thread at a time and returns the step's
 * events (per request: new token text and id, finish with a reason). */

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
                            to the model's executor, so to every program on it: while any batch-invariant
                            engine over a model exists, its other engines and its own forward passes run
                            the invariant kernels too. */
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
    long blocks_dropped;           /* blocks given back because their keys left the sliding window */
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
/* The same with a text prompt, encoded with the engine's tokenizer: BOS when
 * the vocabulary adds one, control tokens written as text (<|im_start|>, ...)
 * parsed as such except for llama2.c vocabularies, an empty text = BOS alone.
 * *n_prompt (may be NULL) gets the prompt's token count. Render a
 * conversation with loom_chat_render first. */
loom_status loom_engine_add_text(loom_engine *e, int64_t id, const char *text, size_t len,
                                 const loom_request_params *p, int *n_prompt);
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
/* The per-layer accounting of the last step's forward program (the engine's
 * thread, between steps): kernels, bytes read and written from main memory
 * and FLOPs per section (embed, L0.., head), as loom profile reports them,
 * for the rows that step ran (n_tokens); times are 0 (steps are not timed).
 * LOOM_ERR_INVALID_ARG before the first step that ran a program (*out
 * zeroed), LOOM_ERR_NOMEM. Release *out with loom_profile_free. */
loom_status loom_engine_last_profile(loom_engine *e, loom_profile *out);
/* Runs reps + 1 steps (the first a warm-up) with every node of the forward
 * program timed, and *out as loom_engine_last_profile with each node's median
 * time: the profile of a batch step (loom profile -np). The steps' events are
 * not returned. Every timed step must run the warm-up's program over as many
 * rows (decode steps of the same running sequences): LOOM_ERR_INVALID_ARG when
 * one does not (a prompt chunk, a sequence that finished) or nothing is
 * pending; reps in 1..1000. Release *out with loom_profile_free. */
loom_status loom_engine_profile_steps(loom_engine *e, int reps, loom_profile *out);
/* One line of `loom batch`'s JSONL input (docs/batch.md): a request object
 *   {"id": ..., "prompt": "..." | "messages": [{"role", "content"}, ...],
 *    "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
 *    "stop": "..." | ["...", ...]}
 * parsed into the engine's request parameters. Unknown keys are ignored
 * (OpenAI batch lines carry more); a known key of the wrong type or out of
 * range is an error naming the line and the key. */
#define LOOM_BATCH_DEFAULT_MAX_TOKENS 256

typedef struct loom_batch_request {
    char *id_json;              /* the id as JSON text (number or string), echoed in the output */
    char *prompt;               /* the prompt, or NULL when messages are given */
    loom_chat_msg *msgs;        /* the conversation (roles and contents owned) */
    int n_msgs;
    loom_request_params params; /* stops point into stop_text */
    char *stop_text;
    int has_seed;               /* a seed was given (else the caller picks one) */
} loom_batch_request;

/* Parses one line (len bytes, need not be NUL-terminated); line_no names it
 * in errors (LOOM_ERR_FORMAT: "line N: ..."). On error *out holds nothing to
 * free but id_json, which is set when the line had a usable id (the error is
 * reported under it). */
loom_status loom_batch_request_parse(const char *line, size_t len, long line_no, loom_batch_request *out);
/* Frees what a parse left in r (NULL fields are fine). */
void loom_batch_request_free(loom_batch_request *r);

#ifdef __cplusplus
}
#endif

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#endif /* LOOM_ENGINE_H */
