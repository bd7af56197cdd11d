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
#include <stdio.h>

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
/* Sets t->name from a printf format (cut to LOOM_NAME_MAX - 1 bytes). */
void loom_tensor_set_name(loom_tensor *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---------------------------------------------------------- execution */

typedef enum loom_exec_mode {
    LOOM_MODE_STEP_BY_STEP = 0,       /* one kernel per primitive op, every intermediate materialised */
    LOOM_MODE_FUSED,                  /* fusion rules applied: fused kernels (the default) */
    LOOM_MODE_FUSED_WITH_CHECKPOINTS, /* fused, with unfused re-computation at checkpoints */
    LOOM_MODE_COUNT
} loom_exec_mode;

/* "step_by_step", "fused", "fused_with_checkpoints"; and back (LOOM_ERR_INVALID_ARG
 * naming an unknown mode). */
const char *loom_mode_name(loom_exec_mode m);
loom_status loom_mode_parse(const char *name, loom_exec_mode *out);

/* How the activations x meet block-quantized weights (q8_0, q4_0, q4_1) in the
 * matmuls (docs/models.md, "Activation precision"). Float weights ignore it. */
typedef enum loom_act_precision {
    LOOM_ACT_PREC_DEFAULT = 0, /* model params: the rules file's act_precision:, else
                                  LOOM_ACT_PREC_BUILTIN; matmul arguments: q8 */
    LOOM_ACT_PREC_Q8,          /* x quantized to 8 bits per block of 32, int8 dot products */
    LOOM_ACT_PREC_FULL,        /* x kept in f32, weight blocks dequantized in the kernel */
    LOOM_ACT_PREC_COUNT
} loom_act_precision;

/* The precision a model gets when neither params nor the rules file choose one. */
#define LOOM_ACT_PREC_BUILTIN LOOM_ACT_PREC_Q8

/* "default", "q8", "full". */
const char *loom_act_precision_name(loom_act_precision p);
/* "q8" or "full" (errors name the value and the choices). */
loom_status loom_act_precision_parse(const char *name, loom_act_precision *out);

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
    /* activations against quantized weights: LOOM_ACT_PREC_Q8 or _FULL; DEFAULT
     * (0) takes the rules file's `act_precision:` key (rules_path, or the built-in
     * rules), else LOOM_ACT_PREC_BUILTIN */
    loom_act_precision act_precision;
    /* 0 (default): the weights are copied out of the file mapping into anonymous
     * transparent huge pages at load (decode streams them 1.4-1.5x faster than
     * over the page cache's 4 KiB pages; the copy costs about 25 ms per 100 MB once).
     * 1: the weights stay in the read-only file mapping (shared with other
     * processes through the page cache; nothing copied). Default from $LOOM_MMAP
     * (1 = keep the mapping). */
    int use_mmap;
    /* The q8_0 / q4_0 / q4_1 matrices packed at load in the layout of the
     * quantized GEMM's kernel (CPUs with AVX512-VNNI, activations q8; the
     * file's bytes, transposed; made on n_threads threads), which then reads
     * them as they are for every row count - one decoding sequence, a batch,
     * a prompt - instead of laying them out on every call. The file's copy of
     * a packed matrix leaves the process (left out of the resident copy, or
     * dropped from the mapping; read back from the page cache if something
     * still reads it), so the model takes its weights' bytes once.
     * 0 (default): at load, the matrices read from the file's mapping (not
     * K-quants converted at load, whose converted copy would stay: two
     * copies), and not with use_mmap (the shared pages would become each
     * process's own copy); a failure warns and runs unpacked. 1: every
     * quantized matrix at load, with use_mmap too; a failure fails the load.
     * -1: never. Unpacked matrices take the GEMV for one row, whose sums are
     * ordered otherwise (logits differ in the last bits). Default from
     * $LOOM_PACK_WEIGHTS (1 = 1, 0 = -1). */
    int pack_weights;
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
/* Releases m (weights unmapped, cache and programs freed); NULL is a no-op. */
void loom_model_free(loom_model *m);
/* The model's shapes and the context it was loaded with. */
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
/* Releases s; NULL is a no-op. */
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

/* Registers the fused op d (copied; user must outlive it). LOOM_ERR_INVALID_ARG for a missing
 * kernel, a name that is taken or not [a-z0-9_] (under 40 characters), or
 * n_inputs out of range; LOOM_ERR_UNSUPPORTED when every slot is taken. */
loom_status loom_register_fused_op(const loom_fused_op_desc *d);

/* An elementwise activation y = fn(x): becomes a primitive op NAME (usable in
 * graphs and rule patterns, `op: NAME`) and an activation of the FFN fusion
 * (a pattern whose `act` node has op NAME fuses into the ffn kernel's epilogue).
 * Errors as loom_register_fused_op's. */
loom_status loom_register_activation(const char *name, float (*fn)(float x, void *user), void *user);

/* ======================================================================
 * The library API for C programs (issue 36): tokenizers, generation
 * helpers, chat templates, KV cache control, model descriptions, embeddings,
 * conversion, fusion rules and graphs, profiles and plans. docs/library.md
 * is a tutorial. Strings returned in *out parameters as char ** are
 * malloc'd: release them with free().
 * ====================================================================== */

/* ---------------------------------------------------------- tokenizers */

typedef struct loom_tokenizer loom_tokenizer;   /* text <-> token ids; read-only once loaded */

/* Loads a tokenizer file: a Hugging Face tokenizer.json (a path ending in
 * ".json", or a folder holding one; byte-level BPE or WordPiece), a GGUF file
 * (a vocabulary-only file or a whole model: its tokenizer.ggml.* metadata) or
 * a llama2.c tokenizer.bin. LOOM_ERR_IO for a missing or unreadable file,
 * LOOM_ERR_FORMAT for malformed contents (the message names the key, token or
 * offset), LOOM_ERR_UNSUPPORTED for other tokenizer models. *out is NULL on
 * error. */
loom_status loom_tokenizer_load(const char *path, loom_tokenizer **out);
/* The tokenizer of a loaded model: a GGUF model's own vocabulary, a Hugging
 * Face model's tokenizer.json beside its weights. A llama2.c checkpoint has
 * none (LOOM_ERR_UNSUPPORTED: load its tokenizer.bin with
 * loom_tokenizer_load); otherwise the errors of loom_tokenizer_load. */
loom_status loom_tokenizer_from_model(const loom_model *m, loom_tokenizer **out);
/* Releases t; NULL is a no-op. */
void loom_tokenizer_free(loom_tokenizer *t);

/* Number of tokens in the vocabulary. */
int loom_tokenizer_vocab_size(const loom_tokenizer *t);
/* Special ids, -1 when the vocabulary has none: BOS (1 for llama2.c; [CLS]
 * for WordPiece), EOS (2 for llama2.c; [SEP] for WordPiece), unknown. */
int loom_tokenizer_bos(const loom_tokenizer *t);
int loom_tokenizer_eos(const loom_tokenizer *t);
int loom_tokenizer_unk(const loom_tokenizer *t);
/* 1 when the vocabulary asks for BOS / EOS around encoded text (llama2.c: 1 / 0;
 * GGUF: tokenizer.ggml.add_bos_token / add_eos_token; WordPiece: 1 / 1). */
int loom_tokenizer_add_bos(const loom_tokenizer *t);
int loom_tokenizer_add_eos(const loom_tokenizer *t);
/* The tokenizer's kind: "llama2c", "llama" (SentencePiece BPE), "gpt2"
 * (byte-level BPE) or "bert" (WordPiece). Never NULL. */
const char *loom_tokenizer_kind_name(const loom_tokenizer *t);
/* 1 for control tokens (BOS, EOS, chat markers such as <|im_end|>), which
 * decode to nothing in the GGUF and Hugging Face kinds; 0 otherwise and for
 * ids out of range. */
int loom_tokenizer_is_control(const loom_tokenizer *t, int token);

/* Flags of loom_tokenizer_encode_ex. */
enum {
    LOOM_TOK_BOS = 1,            /* start with BOS ([CLS] for WordPiece) */
    LOOM_TOK_EOS = 2,            /* end with EOS ([SEP] for WordPiece) */
    LOOM_TOK_PARSE_SPECIAL = 4,  /* control tokens written in the text (e.g.
                                    "<|im_start|>") become their ids */
};

/* Encodes text[0..len) into ids[0..*n_ids), with the LOOM_TOK_* flags. The
 * GGUF and Hugging Face kinds follow Hugging Face's tokenizers: text must be
 * valid UTF-8; user-defined pieces are always matched whole, control pieces
 * only with LOOM_TOK_PARSE_SPECIAL. The llama2.c kind follows llama2.c's
 * run.c (a dummy-prefix space, byte fallback, greedy merges). len + 4 ids
 * always suffice. Errors: LOOM_ERR_INVALID_ARG for NULL arguments, invalid
 * UTF-8 (naming the byte offset) or when more than max_ids ids are needed
 * (then *n_ids gets the number needed); LOOM_ERR_NOMEM. Thread-safe. */
loom_status loom_tokenizer_encode_ex(const loom_tokenizer *t, const char *text, size_t len,
                                     int flags, int32_t *ids, int max_ids, int *n_ids);
/* The bytes token decodes to when it follows prev (prev < 0: at the start of
 * the text): its piece with spaces restored ("<0xXX>" pieces as their byte),
 * the leading space of a word-start piece dropped after BOS (and, in the GGUF
 * and Hugging Face kinds, at the start and after control tokens); "" for
 * control tokens of those kinds. A byte-level piece may be part of a UTF-8
 * sequence that later tokens complete. *len (may be NULL) gets the byte
 * count; the bytes are NUL-terminated and stay valid until t is freed. NULL
 * (with an error message, *len = 0) for an id out of range. */
const char *loom_tokenizer_decode(const loom_tokenizer *t, int prev, int token, size_t *len);
/* The text of ids[0..n) (each decoded after the one before it, as
 * loom_tokenizer_decode; BOS, EOS and control tokens add nothing) into a
 * malloc'd, NUL-terminated *text (free()), *len (may be NULL) its byte
 * count. LOOM_ERR_INVALID_ARG naming the index of an id out of range,
 * LOOM_ERR_NOMEM; *text is NULL on error. */
loom_status loom_tokenizer_decode_tokens(const loom_tokenizer *t, const int32_t *ids, int n,
                                         char **text, size_t *len);
/* The raw vocabulary string of token (NUL-terminated, as stored: "▁the",
 * "Ġthe", "##ing"); NULL when out of range. */
const char *loom_tokenizer_piece(const loom_tokenizer *t, int token);

/* ---------------------------------------------------------- stop strings */
/* A filter for streamed text that releases it only once it can no longer be
 * the beginning of a stop string, so a stop string is never shown, however
 * the tokens split it. */

typedef struct loom_stop_filter loom_stop_filter;

/* A filter for the stop strings stops[0..n) (copied). n = 0 releases every
 * piece as it comes. LOOM_ERR_INVALID_ARG for an empty stop string (naming
 * it, from 1), more than 64 of them or NULL arguments; LOOM_ERR_NOMEM. *out
 * is NULL on error. */
loom_status loom_stop_filter_init(loom_stop_filter **out, const char *const *stops, int n);
/* Releases f; NULL is a no-op. */
void loom_stop_filter_free(loom_stop_filter *f);
/* Appends the next piece of generated text. *out (valid until the next call)
 * gets the text that can be shown now, *n_out its length. Returns 1 when the
 * text so far contains a stop string: *out is then what precedes the first
 * one, generation should end, and later pieces are dropped; else 0. */
int loom_stop_filter_push(loom_stop_filter *f, const char *piece, size_t len, const char **out,
                          size_t *n_out);
/* At the end of generation without a stop string: the text still held back. */
void loom_stop_filter_flush(loom_stop_filter *f, const char **out, size_t *n_out);

/* ---------------------------------------------------------- chat templates */
/* How a conversation becomes the text a chat model was trained on, as its own
 * Jinja template renders it: "chatml" (<|im_start|>ROLE\n...<|im_end|>:
 * SmolLM2, Qwen2/2.5), "qwen3" (chatml with Qwen3's <think> blocks), "llama2"
 * ([INST] ... [/INST]), "llama3" (<|start_header_id|>ROLE<|end_header_id|>),
 * "mistral" (Mistral-7B-Instruct-v0.3's [INST]...[/INST]) or "phi3"
 * (<|user|>\n...<|end|>). Control tokens appear as text: encode the result
 * with LOOM_TOK_PARSE_SPECIAL. */

typedef struct loom_chat_template loom_chat_template;

/* One message of a conversation. */
typedef struct loom_chat_msg {
    const char *role;     /* "system", "user" or "assistant" */
    const char *content;
} loom_chat_msg;

/* The template called name (one of the six above; no default system message,
 * llama3 without 3.1's dated system turn); LOOM_ERR_INVALID_ARG naming the
 * accepted names otherwise. */
loom_status loom_chat_template_init(const char *name, loom_chat_template **out);
/* A model's own template, recognised in its Jinja source by llama.cpp's
 * marker strings (LOOM_ERR_UNSUPPORTED for other templates, naming the
 * choices): a GGUF's tokenizer.chat_template, else llama2 for SentencePiece
 * vocabularies and chatml otherwise; a Hugging Face folder's
 * chat_template.jinja, else its tokenizer_config.json's chat_template
 * (LOOM_ERR_UNSUPPORTED when it has neither). llama2.c checkpoints carry
 * none: LOOM_ERR_UNSUPPORTED (choose one by name). */
loom_status loom_chat_template_from_model(const loom_model *m, loom_chat_template **out);
/* Releases t; NULL is a no-op. */
void loom_chat_template_free(loom_chat_template *t);
/* "chatml", "qwen3", "llama2", "llama3", "mistral" or "phi3". */
const char *loom_chat_template_name(const loom_chat_template *t);
/* A whole conversation msgs[0..n) (an optional system message first, then
 * user and assistant messages in turn), with the assistant's prefix at the
 * end when add_generation_prompt (mistral has none; without it phi3 ends with
 * <|endoftext|>), as the models' own Jinja templates render it (tested
 * against transformers' apply_chat_template), into a malloc'd *out (free()). Errors: LOOM_ERR_INVALID_ARG naming a
 * message with another role, a system message after the first, or no
 * content; LOOM_ERR_NOMEM. */
loom_status loom_chat_render(const loom_chat_template *t, const loom_chat_msg *msgs, int n,
                             int add_generation_prompt, char **out);
/* The length of the text that stands for the BOS token at the start of a
 * rendering: "<|begin_of_text|>" (llama3) or "<s>" (llama2, mistral), 0 when
 * text does not start with it or the format writes none. A caller whose
 * tokenizer adds BOS itself (loom_tokenizer_add_bos) skips it, so that the
 * prompt does not start with two, as llama.cpp's chat path does. */
size_t loom_chat_bos_length(const loom_chat_template *t, const char *text);
/* One turn of a conversation whose earlier turns are already in the KV
 * cache: the close of the previous reply (unless first), the system message
 * (first turn only; NULL or "" = the template's default), the user message
 * and the assistant prefix, into a malloc'd *out (free()). The turns
 * concatenated with the replies are loom_chat_render's text, except where a
 * template rewrites earlier turns: mistral's system message stays in the
 * first turn (the template moves it to the last user message), and qwen3's
 * replies keep their <think> blocks (the template drops them from replies
 * before the last user message). */
loom_status loom_chat_render_turn(const loom_chat_template *t, int first, const char *system,
                                  const char *user, char **out);

/* ---------------------------------------------------------- models: more */

/* The file format a model was loaded from. */
typedef enum loom_model_format {
    LOOM_MODEL_LLAMA2C = 0,   /* a llama2.c checkpoint (no vocabulary of its own) */
    LOOM_MODEL_GGUF,          /* a GGUF file */
    LOOM_MODEL_SAFETENSORS    /* a Hugging Face folder or .safetensors file */
} loom_model_format;

/* What a loaded model is, beyond its shapes (loom_model_info). */
typedef struct loom_model_desc {
    loom_model_format format;
    int64_t    n_params;       /* weight elements; a tied output matrix counts once */
    uint64_t   weight_bytes;   /* bytes of the weights as loaded (converted tensors as converted) */
    loom_dtype main_dtype;     /* the dtype that holds most weight bytes */
    int        n_converted;    /* tensors converted at load (GGUF K-quants, q5, iq4) */
    char       converted[256]; /* their summary, e.g. "q6_K -> q8_0 x1 (0.5 MiB)"; "" when none */
} loom_model_desc;

/* "llama2c", "gguf" or "safetensors". */
const char *loom_model_format_name(loom_model_format f);
/* Fills *out. LOOM_ERR_INVALID_ARG for NULL arguments. */
loom_status loom_model_describe(const loom_model *m, loom_model_desc *out);
/* The activation precision m's quantized matmuls run with, as resolved at load
 * (LOOM_ACT_PREC_Q8 or LOOM_ACT_PREC_FULL; never DEFAULT). */
loom_act_precision loom_model_act_precision(const loom_model *m);
/* As loom_model_forward, writing the logits of every one of the n tokens to
 * logits[n * vocab_size] (row i: the distribution after tokens[0..i]). Runs
 * programs that keep all rows, compiled at the first call. Errors as
 * loom_model_forward. */
loom_status loom_model_forward_all(loom_model *m, const int32_t *tokens, int n, int pos, float *logits);

/* ---- KV cache. A model has one sequence: a contiguous cache addressed by
 * position. loom_model_forward(.., pos, ..) writes positions pos..pos+n-1 and
 * attends to 0..pos+n-1, so a caller may always go back: a forward may start
 * at any position up to the number of tokens already run (rows beyond it are
 * stale or zero). These calls make going back explicit and give the memory of
 * dropped positions back to the system. */

/* Drops positions pos.. (0 <= pos <= n_ctx): their rows become zero and their
 * pages are returned to the system; forwards may then start at pos or
 * earlier. LOOM_ERR_INVALID_ARG for pos out of range. */
loom_status loom_model_kv_rewind(loom_model *m, int pos);
/* Empties the cache (loom_model_kv_rewind(m, 0)): a new sequence starts at 0. */
loom_status loom_model_kv_reset(loom_model *m);
/* Bytes of intermediate memory (the planned arena) of the forward program that
 * ran last; 0 before the first forward pass. */
size_t loom_model_arena_bytes(const loom_model *m);

/* ---------------------------------------------------------- embeddings */

typedef struct loom_bert loom_bert;   /* a BERT encoder with its tokenizer: sentence embeddings */

/* Loads a Hugging Face folder with config.json (a BERT model), model.safetensors
 * (or a sharded index) and tokenizer.json (WordPiece), to run on n_threads
 * (1..1024); sentence_bert_config.json's max_seq_length caps the tokens per
 * text. Errors name the file and field or tensor (LOOM_ERR_IO,
 * LOOM_ERR_FORMAT, LOOM_ERR_SHAPE), LOOM_ERR_UNSUPPORTED for other
 * architectures or tokenizers. *out is NULL on error. */
loom_status loom_bert_load(const char *dir, int n_threads, loom_bert **out);
/* Releases m; NULL is a no-op. */
void loom_bert_free(loom_bert *m);
/* Dimensions of an embedding (hidden_size); 0 for NULL. */
int loom_bert_dim(const loom_bert *m);
/* Embeds texts[0..n) into out[n * dim]: tokenized with [CLS] ... [SEP]
 * (truncated to the model's maximum), mean over the tokens of the last hidden
 * state, L2-normalised when normalize (cosine similarity is then a dot
 * product). LOOM_ERR_INVALID_ARG for NULL arguments; LOOM_ERR_FORMAT naming
 * the text (from 1) whose embedding is not finite; LOOM_ERR_NOMEM. */
loom_status loom_bert_embed(loom_bert *m, const char *const *texts, int n, int normalize, float *out);

/* ---------------------------------------------------------- conversion to GGUF */

typedef struct loom_convert_params {
    int type_set;            /* 0: keep each tensor's type (Hugging Face / llama2.c: the source dtype) */
    loom_dtype type;         /* when type_set: f32, f16, bf16, q8_0, q4_0 or q4_1 for the weight
                                matrices, 3-D experts included (rows not of whole 32-blocks fall back to f16) */
    const char *tokenizer;   /* llama2.c input: its tokenizer.bin (required there) */
} loom_convert_params;

/* No type change, no tokenizer. */
loom_convert_params loom_convert_default_params(void);
/* Converts in (a Hugging Face Llama folder / .safetensors / shard index, a
 * llama2.c checkpoint, or a GGUF file to requantize) into the GGUF file out,
 * with llama.cpp's tensor names and RoPE row order. Errors: those of the
 * loaders (naming the file, key or tensor), LOOM_ERR_INVALID_ARG for a
 * missing tokenizer or an unsupported type, LOOM_ERR_IO when out cannot be
 * written. */
loom_status loom_convert(const char *in, const char *out, const loom_convert_params *p);
/* Parses the types loom_convert writes: "f32", "f16", "bf16", "q8_0", "q4_0",
 * "q4_1"; LOOM_ERR_INVALID_ARG naming the string otherwise. */
loom_status loom_convert_parse_type(const char *s, loom_dtype *out);

/* ---------------------------------------------------------- fusion rules */
/* The rules that rewrite graphs of primitive ops into fused kernels
 * (docs/fusion.md); loom_model_params.rules_path gives a model its own. */

typedef struct loom_fusion_rules loom_fusion_rules;

/* Parses rules from YAML text[0..len); filename is used in error messages
 * ("FILE:LINE:COLUMN: expected ..."). Unknown op kinds, fused ops, options
 * and presets are LOOM_ERR_FORMAT. *out is NULL on error. */
loom_status loom_fusion_rules_parse(const char *text, size_t len, const char *filename,
                                    loom_fusion_rules **out);
/* Loads a rules file; path NULL = the built-in default rules. Errors as
 * loom_fusion_rules_parse, LOOM_ERR_IO for an unreadable file. */
loom_status loom_fusion_rules_load(const char *path, loom_fusion_rules **out);
/* Applies a preset of the file (e.g. "small", "7b"): its option and
 * enabled-flag overrides. LOOM_ERR_INVALID_ARG naming an unknown preset. */
loom_status loom_fusion_rules_preset(loom_fusion_rules *r, const char *preset);
/* Releases r; NULL is a no-op. */
void loom_fusion_rules_free(loom_fusion_rules *r);

/* ---- graphs of primitive ops, for trying user fused ops and activations
 * (loom_register_fused_op, loom_register_activation) without a model. */

typedef struct loom_graph loom_graph;         /* tensors and op nodes in execution order */
typedef struct loom_executor loom_executor;   /* runs graphs: threads, mode, fusion rules */

/* An empty graph. LOOM_ERR_NOMEM. */
loom_status loom_graph_init(loom_graph **g);
/* Releases g (not the memory of its external tensors); NULL is a no-op. */
void loom_graph_free(loom_graph *g);
/* Adds a tensor whose memory the caller owns (inputs, weights); the
 * descriptor is copied. Returns its id, or -1 after an error (see
 * loom_graph_status). */
int loom_graph_external(loom_graph *g, const loom_tensor *t);
/* Appends a node computing the op called op (a primitive op without
 * attributes: "matmul" (y = x . W^T), "add", "mul", "silu", ...; a registered
 * activation; a registered fused op) over src[0..n_src) and returns the id of
 * its output, named name; shapes are inferred and checked now. -1 after an
 * error: an unknown op, an op that needs attributes, shapes that do not fit. */
int loom_graph_add_op(loom_graph *g, const char *op, const int *src, int n_src, const char *name);
/* Keeps tensor id alive to the end of a run so that it can be read after. */
void loom_graph_mark_output(loom_graph *g, int id);
/* LOOM_OK, or the first error of a builder call (its message is also the
 * thread's last error). Builder calls given -1 return -1: check once at the end. */
loom_status loom_graph_status(const loom_graph *g);
/* The descriptor of tensor id (its data valid after a run for outputs);
 * NULL for an unknown id. */
const loom_tensor *loom_graph_tensor(const loom_graph *g, int id);
/* Number of nodes, and the kernel that ran node i in the last run
 * ("matmul.avx2", "ffn", a fused op's name); NULL before a run or out of range. */
int loom_graph_n_nodes(const loom_graph *g);
const char *loom_graph_node_kernel(const loom_graph *g, int i);

/* An executor on n_threads (>= 1) in mode (LOOM_MODE_FUSED applies the
 * built-in rules unless loom_executor_set_rules gives others). */
loom_status loom_executor_init(loom_executor **e, int n_threads, loom_exec_mode mode);
/* Releases e and the rules it was given; NULL is a no-op. */
void loom_executor_free(loom_executor *e);
/* Gives e the rules to apply in fused modes (NULL: the built-in ones); e owns
 * them from now on. */
void loom_executor_set_rules(loom_executor *e, loom_fusion_rules *r);
/* Plans and runs g once. In fused modes the rules rewrite g in place first;
 * tensor ids stay valid, so outputs are read with loom_graph_tensor as in
 * step_by_step. Errors of the fusion pass and the kernels, LOOM_ERR_NOMEM. */
loom_status loom_executor_run(loom_executor *e, loom_graph *g);
/* The graph the last run executed, with each node's kernel; NULL before. */
const loom_graph *loom_executor_last_graph(const loom_executor *e);
/* How often the rule called rule fired in the last fusion pass; -1 when the
 * rules have none of that name or no pass ran. */
int loom_executor_rule_fired(const loom_executor *e, const char *rule);
/* Prints the last fusion pass's report (one line per rule) to f. */
void loom_executor_print_report(const loom_executor *e, FILE *f);

/* ---------------------------------------------------------- profiles */
/* Per-layer accounting of one forward step (loom profile) or of a plan
 * (loom plan): kernels, bytes read and written from main memory, FLOPs, time. */

typedef struct loom_profile_section {
    char   name[24];       /* "embed", "L0", ..., "head", then appended ones ("sample") */
    int    kernels;        /* kernel launches */
    double bytes_read, bytes_written, flops, time_ns;
    char  *chain;          /* kernel names in execution order, space-separated */
} loom_profile_section;

#define LOOM_PROFILE_MAX_KINDS 32
/* Totals per op kind (kernel name without its ".isa" suffix). */
typedef struct loom_profile_kind {
    char   name[40];
    int    kernels;
    double bytes_read, bytes_written, flops, time_ns;
} loom_profile_kind;

typedef struct loom_profile {
    char   phase[16];      /* "prefill" or "decode" */
    const char *mode;      /* "step_by_step", "fused", ... (static) */
    int    n_tokens;       /* tokens processed by the step */
    int    n_sections;     /* embed, the layers, head, then appended ones */
    loom_profile_section *sections;
    loom_profile_section total;
    size_t arena_bytes;    /* planned intermediate memory */
    int    n_kinds;        /* per op kind, in order of first appearance */
    loom_profile_kind kinds[LOOM_PROFILE_MAX_KINDS];
} loom_profile;

/* Runs tokens[0..n) at pos as loom_model_forward does (logits of the last
 * token into logits[vocab_size]) once to warm up, then reps (1..1000) times
 * more (the same positions are rewritten: every run computes the same), and
 * fills *out with that step's per-layer report, each kernel's time the median
 * of the reps; phase "decode" when the one-token program ran, else "prefill".
 * Errors of loom_model_forward, LOOM_ERR_INVALID_ARG for reps out of range,
 * LOOM_ERR_NOMEM. Release *out with loom_profile_free. */
loom_status loom_model_profile(loom_model *m, const int32_t *tokens, int n, int pos, int reps,
                               float *logits, loom_profile *out);
/* Appends a "sample" section: the median time of 5 draws of a sampler with
 * params sp from logits[vocab] (softmax and the candidates it sorts), which
 * it reads once. Errors of loom_sampler_init, LOOM_ERR_NOMEM. */
loom_status loom_profile_add_sampler(loom_profile *p, const float *logits, int vocab,
                                     const loom_sampler_params *sp);
/* Releases what p holds (its sections) and zeroes it; p itself is the caller's. */
void loom_profile_free(loom_profile *p);
/* A table of profs[0..n_modes) (one phase under several modes) side by side. */
void loom_profile_print_table(FILE *f, const loom_profile *profs, int n_modes);
/* {"model": model, "profiles": [...]} for profs[0..n). */
void loom_profile_print_json(FILE *f, const char *model, const loom_profile *profs, int n);
/* step_by_step vs fused for one phase: kernels, traffic and time per section
 * with the reductions, and the totals. */
void loom_profile_print_compare(FILE *f, const loom_profile *step, const loom_profile *fused);
/* The totals of that comparison as one JSON object. */
void loom_profile_print_compare_json(FILE *f, const loom_profile *step, const loom_profile *fused);
/* An SVG bar chart of traffic and time per op kind, step_by_step vs fused
 * (either may be NULL). */
void loom_profile_write_svg(FILE *f, const loom_profile *step, const loom_profile *fused);

/* ---------------------------------------------------------- plans */
/* The analytic planner (loom plan, docs/plan.md): the graphs of one forward
 * pass of a model configuration built without weights, fused by the rules,
 * each kernel costed from its shapes and timed by a roofline model of a
 * hardware profile. Three steps: the configuration, the hardware, the run. */

typedef struct loom_plan_report loom_plan_report;

typedef struct loom_plan_report_params {
    int batch;                /* sequences, 1..4096 (default 1) */
    int seq;                  /* prefill: tokens per sequence; decode: tokens already cached (>= 1) */
    int decode;               /* 0: a prefill pass (default); 1: one decode step (q_len 1) */
    loom_dtype kv_dtype;      /* KV cache: f32, f16 (default), bf16 or i8 */
    loom_dtype wtype;         /* weight matrices: f32, f16 (default), bf16, q8_0, q4_0, q4_1 */
    int step_by_step;         /* plan the unfused graph (default 1) */
    int fused;                /* plan the fused graph (default: loom_plan_have_fusion()) */
    const char *rules_path;   /* fusion rules file; NULL = built in */
    const char *preset;       /* a preset of the rules, or NULL */
    loom_dtype act_dtype;     /* activations between kernels, modelled: f32 (default; what loom's
                                 kernels exchange), f16 or bf16 (the founding numbers' setting:
                                 every intermediate at 2 bytes, in both modes) */
} loom_plan_report_params;

/* 1 when this build has the fusion engine (fused plans possible). */
int loom_plan_have_fusion(void);
/* batch 1, seq 0 (to be set), prefill, f16 weights and KV cache, both modes. */
loom_plan_report_params loom_plan_report_default_params(void);
/* A report for config: a built-in name ("llama2-7b", "llama2-13b",
 * "llama2-70b", "tinyllama", "smollm2-135m", "bert-base") or the path of a
 * Hugging Face config.json (or its folder) or GGUF file, whose shapes are
 * read. Errors name the unknown name (listing the known ones) or the file and
 * its missing or impossible field. *out is NULL on error. */
loom_status loom_plan_report_init(const char *config, loom_plan_report **out);
/* Releases r; NULL is a no-op. */
void loom_plan_report_free(loom_plan_report *r);
/* The configuration's name (the path for files) and architecture ("llama" or "bert"). */
const char *loom_plan_report_config_name(const loom_plan_report *r);
const char *loom_plan_report_arch(const loom_plan_report *r);
/* The hardware profile: a built-in one ("cpu", measured on this machine where
 * its YAML says auto; "h200"; "ascend-910b") or a YAML file. Default "cpu".
 * Errors name the file, line and column of a bad value. */
loom_status loom_plan_report_set_hw(loom_plan_report *r, const char *hw);
/* Builds, fuses and costs the pass of p for each mode asked. Errors name the
 * bad parameter (a decode phase of an encoder, sizes out of range), the rules
 * file position, or LOOM_ERR_UNSUPPORTED for fused plans without the fusion engine. */
loom_status loom_plan_report_run(loom_plan_report *r, const loom_plan_report_params *p);
/* Modes planned by the last run (0 before), and mode i's report: its mode
 * name, per-layer sections and totals (time_ns is the roofline estimate). */
int loom_plan_report_n_modes(const loom_plan_report *r);
const loom_profile *loom_plan_report_profile(const loom_plan_report *r, int i);
/* Nodes of mode i whose op has no cost function (counted as 0 bytes; a bug in loom). */
int loom_plan_report_uncosted(const loom_plan_report *r, int i);
/* The last run as tables (per layer, whole pass, each kernel of a
 * representative layer) or as one JSON object. LOOM_ERR_INVALID_ARG before a run. */
loom_status loom_plan_report_print(const loom_plan_report *r, FILE *f);
loom_status loom_plan_report_print_json(const loom_plan_report *r, FILE *f);
/* An SVG bar chart of the whole pass's traffic and time per op kind. */
loom_status loom_plan_report_write_svg(const loom_plan_report *r, FILE *f);

/* ---------------------------------------------------------- batch engine */
/* The batch engine and loom batch's request parser: loom_engine.h (included
 * at the end of this header). */

/* ---------------------------------------------------------- CPU */

/* The kernel level loom runs on this CPU: "avx512", "avx2", "generic" or
 * "ref" (chosen from cpuid; $LOOM_ISA may force a lower one). Never NULL. */
const char *loom_cpu_isa_name(void);

/* ---------------------------------------------------------- kernel variants (docs/tuning.md) */

/* Op families with several correct kernels whose speed depends on the CPU
 * model (native bf16 or int8 products against widening to f32 FMAs). Each is
 * chosen by timing its variants once on this CPU model and kept in a wisdom
 * file, ~/.cache/loom/wisdom-<cpu>.json ($XDG_CACHE_HOME/loom when set).
 * $LOOM_WISDOM: "off" (no file, no timing: native instructions wherever the
 * CPU has them), "readonly" (the file is read, never written), or a path.
 * $LOOM_VARIANTS="family=variant,...": forced choices, never measured over. */
enum {
    LOOM_TUNE_GEMM_BF16 = 1u << 0,    /* "gemm.bf16": native | widen */
    LOOM_TUNE_GEMV_Q4_FULL = 1u << 1, /* "gemv.q4_full": bf16 | fma */
    LOOM_TUNE_ATTN_BF16 = 1u << 2,    /* "attention.bf16": native | widen */
    LOOM_TUNE_ATTN_I8 = 1u << 3,      /* "attention.i8": vnni | widen */
    LOOM_TUNE_ALL = 15u
};

/* Makes the choice for the families in the mask (LOOM_TUNE_*): from the
 * wisdom file, else by timing (under 2 s for all; once per CPU model), or
 * timed again when remeasure is set (and the file rewritten). Model loading
 * and engine creation call it for the families their weights and KV cache
 * use. A wisdom file that cannot be written or read is reported on stderr
 * and is not an error. Thread-safe; call it while no kernel runs. */
loom_status loom_tune(unsigned families, int remeasure);

/* The families that weights of these dtypes, a KV cache of dtype kv and
 * activations act need (a mask for loom_tune). */
unsigned loom_tune_needs(const loom_dtype *weights, int n, loom_dtype kv, loom_act_precision act);

/* "gemm.bf16=native gemv.q4_full=bf16 ...": the variants in use. Returns the
 * length it needs (snprintf's convention). */
size_t loom_variants_describe(char *buf, size_t cap);

/* Forces choices: "family=variant[,family=variant...]" ($LOOM_VARIANTS'
 * syntax). LOOM_ERR_INVALID_ARG names an unknown family or variant,
 * LOOM_ERR_UNSUPPORTED a variant this CPU cannot run. */
loom_status loom_variants_force(const char *spec);

/* The CPU, the wisdom file and every family's timings and choice, as a
 * markdown table (loom tune). */
void loom_tune_print(FILE *f);

/* ====================================================================== end of the library API (issue 36) */

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

/* The batch engine's API, part of loom.h (outside its include guard, so that
 * including either header first gives both). */
#include "loom_engine.h"
