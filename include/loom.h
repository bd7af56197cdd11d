/*
 * loom.h — public API of loom, a CPU transformer inference engine.
 *
 * Conventions: every function that can fail returns loom_status (never aborts,
 * never exits); loom_last_error() gives a message naming what was wrong.
 * Names are loom_<object>_<verb>; objects are created by *_init/_load and
 * released by *_free.
 */
#ifndef LOOM_H
#define LOOM_H

#include <stddef.h>
#include <stdint.h>

/* Every declaration of loom's public headers is exported from libloom.so, which
 * is built with hidden visibility: only what these headers declare is its ABI. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- status */

typedef enum loom_status {
    LOOM_OK = 0,
    LOOM_ERR_INVALID_ARG,   /* a parameter is out of range or inconsistent */
    LOOM_ERR_SHAPE,         /* tensor shapes do not fit the operation */
    LOOM_ERR_DTYPE,         /* tensor dtype not supported by the operation */
    LOOM_ERR_NOMEM,         /* an allocation failed */
    LOOM_ERR_IO,            /* a file could not be opened, read or written */
    LOOM_ERR_FORMAT,        /* a file's contents are malformed or truncated */
    LOOM_ERR_UNSUPPORTED,   /* valid input that this build cannot handle */
    LOOM_ERR_INTERNAL,      /* a bug in loom */
    LOOM_STATUS_COUNT
} loom_status;

/* Name of a status code, e.g. "LOOM_ERR_SHAPE". Never NULL. */
const char *loom_status_str(loom_status s);
/* Message of the last error set on this thread ("" if none). */
const char *loom_last_error(void);
/* Clears the last error of this thread. */
void loom_clear_error(void);

/* ---------------------------------------------------------------- dtypes */

typedef enum loom_dtype {
    LOOM_F32 = 0,
    LOOM_F16,
    LOOM_BF16,
    LOOM_I32,
    LOOM_I8,
    /* GGUF block formats (bit-exact with llama.cpp): 32 elements per block.
     * Tensors of these types are row-contiguous, last dim a multiple of 32. */
    LOOM_Q8_0,   /* {f16 d; int8 q[32]}            x = d*q                  34 bytes */
    LOOM_Q4_0,   /* {f16 d; u8 q[16]}  nibbles      x = d*(q-8)              18 bytes */
    LOOM_Q4_1,   /* {f16 d; f16 m; u8 q[16]}        x = d*q + m              20 bytes */
    LOOM_DTYPE_COUNT
} loom_dtype;

#define LOOM_QBLOCK 32   /* elements per block of the quantized formats */

/* "f32", "f16", "q4_0", ... Never NULL. */
const char *loom_dtype_name(loom_dtype t);
/* Bytes per element of a scalar dtype; 0 for block formats and unknown dtypes. */
size_t loom_dtype_size(loom_dtype t);
/* 1 for block formats (q8_0, q4_0, q4_1). */
int loom_dtype_is_quantized(loom_dtype t);
/* Elements per block (1 for scalar dtypes) and bytes per block. */
int loom_dtype_block_elems(loom_dtype t);
size_t loom_dtype_block_bytes(loom_dtype t);
/* Bytes of n consecutive elements (n a multiple of the block size). */
size_t loom_dtype_row_bytes(loom_dtype t, int64_t n);

/* IEEE half and bfloat16 conversions: round-to-nearest-even, NaN stays NaN,
 * Inf and denormals handled exactly. */
uint16_t loom_f32_to_f16(float f);
float    loom_f16_to_f32(uint16_t h);
uint16_t loom_f32_to_bf16(float f);
float    loom_bf16_to_f32(uint16_t h);

/* ---------------------------------------------------------------- tensor */

#define LOOM_MAX_DIMS 4
#define LOOM_NAME_MAX 64

/* A tensor descriptor. shape[0] is the outermost dimension; strides are in
 * elements; the last dimension is usually contiguous (stride 1). The
 * descriptor does not own data. */
typedef struct loom_tensor {
    loom_dtype dtype;
    int        ndim;                   /* 1..LOOM_MAX_DIMS */
    int64_t    shape[LOOM_MAX_DIMS];   /* unused dims are 1 */
    int64_t    stride[LOOM_MAX_DIMS];  /* in elements */
    void      *data;
    char       name[LOOM_NAME_MAX];
} loom_tensor;

/* Fills t as a contiguous tensor of the given shape over data. */
loom_status loom_tensor_init(loom_tensor *t, loom_dtype dtype, int ndim,
                             const int64_t *shape, void *data);
/* Number of elements. */
int64_t loom_tensor_nelem(const loom_tensor *t);
/* Bytes spanned by the elements (contiguous size for contiguous tensors). */
size_t loom_tensor_nbytes(const loom_tensor *t);
/* 1 when the tensor is row-major contiguous. */
int loom_tensor_is_contiguous(const loom_tensor *t);
/* A view of rows [row0, row0+nrows) of dimension 0. */
loom_status loom_tensor_view_rows(const loom_tensor *t, int64_t row0,
                                  int64_t nrows, loom_tensor *view);
/* A view with dims permuted: view.shape[i] = t.shape[perm[i]]. */
loom_status loom_tensor_permute(const loom_tensor *t, const int *perm,
                                loom_tensor *view);
/* A view with a new shape; t must be contiguous. */
loom_status loom_tensor_reshape(const loom_tensor *t, int ndim,
                                const int64_t *shape, loom_tensor *view);
void loom_tensor_set_name(loom_tensor *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---------------------------------------------------------- execution */

typedef enum loom_exec_mode {
    LOOM_MODE_STEP_BY_STEP = 0,       /* one kernel per primitive op, every intermediate materialised */
    LOOM_MODE_FUSED,                  /* fusion rules applied: fused kernels (the default) */
    LOOM_MODE_FUSED_WITH_CHECKPOINTS, /* fused, with unfused re-computation at checkpoints */
    LOOM_MODE_COUNT
} loom_exec_mode;

/* "step_by_step", "fused", "fused_with_checkpoints". */
const char *loom_mode_name(loom_exec_mode m);
loom_status loom_mode_parse(const char *name, loom_exec_mode *out);

/* ---------------------------------------------------------- models */

typedef struct loom_model loom_model;   /* weights (mmap), KV cache, forward programs */

#define LOOM_DEFAULT_BATCH 512   /* prompt rows per prefill step by default */

typedef struct loom_model_params {
    int n_threads;            /* >= 1; default: the CPUs this process may run on */
    int n_ctx;                /* context length; 0 = the model's maximum */
    int n_batch;              /* prompt tokens per forward step (longer prompts run in chunks);
                                 0 = LOOM_DEFAULT_BATCH; at most the context */
    int n_ctx_clamp;          /* nonzero: an n_ctx beyond the model's maximum becomes it (else an error) */
    loom_exec_mode mode;
    const char *dump_dir;     /* if set, every intermediate of every forward pass is written here */
    /* fusion (docs/fusion.md): rules file (NULL = built-in default), a preset of
     * it (NULL = none), checkpoint action: 0 = the rules file's, 1 warn, 2 fail */
    const char *rules_path;
    const char *fusion_preset;
    int checkpoint_action;
    /* KV cache element type: LOOM_F32 (the default, 0), LOOM_F16 or LOOM_BF16
     * (half the bytes a position; decode attention reads half as much), or LOOM_I8
     * (a quarter, plus one f32 scale per (position, kv head) row: each row is
     * quantized symmetrically, scale = max|x| / 127) */
    loom_dtype kv_dtype;
} loom_model_params;

typedef struct loom_model_info {
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, head_dim, vocab_size;
    int max_seq_len;          /* the model's trained context */
    int n_ctx;                /* the context this instance was created with */
} loom_model_info;

/* Defaults: threads = the CPUs this process may run on (sched_getaffinity),
 * the model's context, mode fused, f32 KV cache, built-in fusion rules. */
loom_model_params loom_model_default_params(void);
/* Loads a Llama-architecture model: a GGUF file (by its "GGUF" magic), a
 * Hugging Face folder or .safetensors file (config.json beside it), or a
 * llama2.c checkpoint (legacy or version 1). Errors name the file and the
 * problem (missing, empty, truncated, impossible sizes, the missing or
 * malformed key or tensor, an unsupported architecture or tensor type). */
loom_status loom_model_load(const char *path, const loom_model_params *p, loom_model **out);
void loom_model_free(loom_model *m);
loom_model_info loom_model_get_info(const loom_model *m);
/* Sets p->mode from, in order: flag (NULL = not given), $LOOM_MODE, the `mode:`
 * key of the rules file p->rules_path (or of the built-in rules), fused.
 * Errors name the bad mode or the rules file position. */
loom_status loom_model_params_set_mode(loom_model_params *p, const char *flag);
/* Prints, to stderr, the worst fused-vs-unfused error per checkpoint seen by a
 * model running in fused_with_checkpoints mode (nothing in other modes). */
void loom_model_report_checkpoints(const loom_model *m);
/* Runs tokens[0..n) at positions pos..pos+n-1 (the KV cache holds 0..pos-1) and
 * writes the logits of the last token to logits[vocab_size]. The forward
 * programs the model compiled at load run it (one step for n = 1, chunks of
 * up to n_batch rows otherwise); nothing is allocated. */
loom_status loom_model_forward(loom_model *m, const int32_t *tokens, int n, int pos, float *logits);

/* ---------------------------------------------------------- sampling */

typedef struct loom_sampler loom_sampler;

typedef struct loom_sampler_params {
    float    temperature;     /* 0 = greedy (argmax, lowest id on ties) */
    int      top_k;           /* 0 = off */
    float    top_p;           /* 1 = off; in (0, 1] */
    uint64_t seed;            /* Philox key: same seed, same choices */
    /* ---- min-p and repetition penalty (0 in every field: off) */
    float    min_p;           /* 0 = off; in [0, 1]: keeps tokens with p >= min_p * p_max, p after
                                 temperature as for top-p */
    float    repeat_penalty;  /* 0 or 1 = off; > 0: the logit of a token among the last
                                 repeat_last_n accepted ones is divided by it when positive,
                                 multiplied by it when negative (llama.cpp's rule) */
    int      repeat_last_n;   /* tokens of history the penalty looks at; 0 = off */
} loom_sampler_params;

/* temperature 1, top-k off, top-p 1, seed 0, min-p off, repeat_penalty 1
 * (off) over repeat_last_n 64. */
loom_sampler_params loom_sampler_default_params(void);
/* Errors for a vocabulary < 1 or parameters out of range. */
loom_status loom_sampler_init(loom_sampler **s, int vocab_size, const loom_sampler_params *p);
void loom_sampler_free(loom_sampler *s);
/* Picks the next token from logits[vocab_size] (not modified): the repetition
 * penalty over the accepted tokens, then temperature, top-k, top-p and min-p. */
loom_status loom_sampler_sample(loom_sampler *s, const float *logits, int32_t *token);

/* ---- sampler history (the repetition penalty's window) */
/* Appends token to the sampler's history: the prompt's tokens and each token
 * chosen, in order, as the model sees them. Only the last repeat_last_n are
 * kept. Error for a token outside [0, vocab_size). */
loom_status loom_sampler_accept(loom_sampler *s, int32_t token);
/* Forgets the history (a new sequence); the random stream goes on. */
void loom_sampler_reset(loom_sampler *s);

/* ---------------------------------------------------------- fusion extensions */
/* Adding a fused op or an activation from user code (docs/fusion.md). Both take
 * one of 8 run-time op slots; names must be new. Register before building the
 * graphs that use them, from one thread. */

/* A fused op: a kernel that replaces a pattern of primitive ops. In a rule,
 * `fused_op: NAME` makes every match one node whose inputs are the pattern's
 * $variables in order of first use and whose output is the value of the
 * pattern's last node. */
typedef struct loom_fused_op_desc {
    const char *name;           /* op and fused_op name, [a-z0-9_], unique */
    int n_inputs;               /* 1..5 */
    /* Output dtype and shape from the inputs; NULL = those of input 0. */
    loom_status (*infer)(const loom_tensor *const *in, int n_in, loom_tensor *out, void *user);
    /* Computes thread ith's share of out (results must not depend on nth). */
    loom_status (*kernel)(const loom_tensor *const *in, int n_in, loom_tensor *out, int ith, int nth,
                          void *user);
    /* What the kernel moves and computes (bytes of main memory it really reads
     * and writes); NULL = every input read once, the output written once. */
    void (*cost)(const loom_tensor *const *in, int n_in, const loom_tensor *out, double *flops,
                 double *bytes_read, double *bytes_written, void *user);
    const char *decomposition;  /* the primitive ops it replaces, e.g. "mul add" */
    void *user;
} loom_fused_op_desc;

loom_status loom_register_fused_op(const loom_fused_op_desc *d);

/* An elementwise activation y = fn(x): becomes a primitive op NAME (usable in
 * graphs and rule patterns, `op: NAME`) and an activation of the FFN fusion
 * (a pattern whose `act` node has op NAME fuses into the ffn kernel's epilogue). */
loom_status loom_register_activation(const char *name, float (*fn)(float x, void *user), void *user);

/* ---------------------------------------------------------- CPU */

/* The kernel level loom runs on this CPU: "avx512", "avx2", "generic" or
 * "ref" (chosen from cpuid; $LOOM_ISA may force a lower one). Never NULL. */
const char *loom_cpu_isa_name(void);

/* ---------------------------------------------------------- version */

/* loom's version, "MAJOR.MINOR.PATCH" (CMake's project version). Never NULL. */
const char *loom_version(void);

#ifdef __cplusplus
}
#endif

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#endif /* LOOM_H */
