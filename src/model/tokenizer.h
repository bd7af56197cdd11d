/* Tokenizers: text <-> token ids behind one opaque handle.
 *
 * Kinds: the llama2.c tokenizer (SentencePiece-style BPE with per-piece merge
 * scores, spaces stored as ' ', byte fallback to <0xXX> pieces; encode/decode
 * semantics identical to llama2.c's run.c), and from GGUF metadata
 * (tokenizer.ggml.model) SentencePiece BPE ("llama"), GPT-2 byte-level BPE
 * ("gpt2") and WordPiece ("bert"), each matching Hugging Face's tokenizers.
 * Each file format has its own loader file. */
#ifndef LOOM_MODEL_TOKENIZER_H
#define LOOM_MODEL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "loom.h"

/* The public part (loading, special ids, encode / decode) is declared in
 * loom.h; below are the loaders of each file format and the internals. */

/* Loads a llama2.c tokenizer.bin: int32 max_token_length, then up to EOF per
 * token float32 score, int32 byte length, bytes. Errors: LOOM_ERR_IO for a
 * missing or unreadable file; LOOM_ERR_FORMAT for an empty file, a bad
 * max_token_length, a negative or too large length, a truncated entry (the
 * message names the token index and byte offset) or too few tokens for the
 * 256 byte-fallback ids. *out is NULL on error. */
loom_status loom_tokenizer_load_llama2c(const char *path, loom_tokenizer **out);

/* Loads a GGUF file's vocabulary (tokenizer.ggml.*; a vocabulary-only file or
 * a whole model). Errors: LOOM_ERR_IO / LOOM_ERR_FORMAT from the GGUF reader;
 * LOOM_ERR_FORMAT for missing or inconsistent tokenizer metadata (the message
 * names the key); LOOM_ERR_UNSUPPORTED for another tokenizer model or
 * pre-tokenizer. *out is NULL on error. */
loom_status loom_tokenizer_load_gguf(const char *path, loom_tokenizer **out);

/* The same from a GGUF file already open (a model's: nothing is read twice). */
struct loom_gguf;
loom_status loom_tokenizer_from_gguf(const struct loom_gguf *g, loom_tokenizer **out);

/* The same over a GGUF image in memory (data must outlive the call only). */
loom_status loom_tokenizer_load_gguf_memory(const void *data, size_t size, const char *name,
                                            loom_tokenizer **out);

/* Loads a Hugging Face tokenizer.json (path: the file, or a folder holding
 * it; tokenizer_config.json beside it gives BOS/EOS for byte-level BPE):
 * WordPiece ("bert") or byte-level BPE ("gpt2", GPT-2 / SmolLM / Llama 3
 * pre-tokenizers). Errors: LOOM_ERR_IO, LOOM_ERR_FORMAT (invalid JSON,
 * vocabulary ids with gaps or duplicates), LOOM_ERR_UNSUPPORTED (other
 * models, cased WordPiece). *out is NULL on error. */
loom_status loom_tokenizer_load_hf_json(const char *path, loom_tokenizer **out);
/* The same over tokenizer.json text and optional tokenizer_config.json text
 * (config_text may be NULL); name is used in messages. */
loom_status loom_tokenizer_load_hf_json_memory(const char *text, size_t len, const char *config_text,
                                               size_t config_len, const char *name, loom_tokenizer **out);

/* Encodes NUL-terminated text into ids[0..*n_ids). llama2.c kind: optional
 * BOS, the dummy-prefix " " piece when text is non-empty, one piece per UTF-8
 * codepoint (bytes <0xXX> when the codepoint is not a piece), then greedy
 * merges of the adjacent pair whose concatenation is the best-scored piece
 * (leftmost on ties), then optional EOS. GGUF kinds: loom_tokenizer_encode_ex
 * with LOOM_TOK_BOS / LOOM_TOK_EOS. Errors: LOOM_ERR_INVALID_ARG for NULL
 * arguments or when the result needs more than max_ids ids (then *n_ids gets
 * the number needed); LOOM_ERR_NOMEM. Thread-safe: t is not modified. */
loom_status loom_tokenizer_encode(const loom_tokenizer *t, const char *text,
                                  int add_bos, int add_eos, int32_t *ids,
                                  int max_ids, int *n_ids);

/* The merge score of token; 0 (and an error message) if out of range. */
float loom_tokenizer_score(const loom_tokenizer *t, int token);

/* ---- for loaders (file-format code), not for callers ---- */

/* A scored-BPE vocabulary in llama2.c conventions (spaces as ' ', dummy
 * prefix " "). Everything is copied: the caller keeps ownership. */
typedef struct loom_tokenizer_vocab {
    int n;                     /* number of pieces */
    const char *const *pieces; /* n pointers to piece bytes (not NUL-terminated) */
    const uint32_t *lens;      /* n byte lengths */
    const float *scores;       /* n merge scores; higher merges first */
    int bos, eos;              /* special ids */
    int byte_base;             /* byte b falls back to id byte_base + b */
} loom_tokenizer_vocab;

/* Builds a tokenizer from v. Errors: LOOM_ERR_FORMAT when ids do not fit the
 * vocabulary; LOOM_ERR_NOMEM. */
loom_status loom_tokenizer_create_scored_bpe(const loom_tokenizer_vocab *v,
                                             loom_tokenizer **out);

#endif
