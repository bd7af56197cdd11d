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

typedef struct loom_tokenizer loom_tokenizer;  /* opaque */

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

/* Loads a tokenizer of any supported file: a Hugging Face tokenizer.json
 * when path ends in ".json" or is a folder (loom_tokenizer_load_hf_json),
 * GGUF when the file starts with "GGUF", a llama2.c tokenizer.bin otherwise. */
loom_status loom_tokenizer_load(const char *path, loom_tokenizer **out);

/* Releases t and everything it owns; NULL is a no-op. */
void loom_tokenizer_free(loom_tokenizer *t);

int loom_tokenizer_vocab_size(const loom_tokenizer *t);
int loom_tokenizer_bos(const loom_tokenizer *t);  /* 1 for llama2.c */
int loom_tokenizer_eos(const loom_tokenizer *t);  /* 2 for llama2.c */
/* Ids are -1 when the vocabulary has none. BERT: BOS is [CLS], EOS [SEP]. */
int loom_tokenizer_unk(const loom_tokenizer *t);
/* Whether the vocabulary asks for BOS / EOS around encoded text (llama2.c: 1 / 0). */
int loom_tokenizer_add_bos(const loom_tokenizer *t);
int loom_tokenizer_add_eos(const loom_tokenizer *t);
/* "llama2c", "llama", "gpt2" or "bert". */
const char *loom_tokenizer_kind_name(const loom_tokenizer *t);
/* 1 for control tokens (BOS, EOS, chat markers), which decode to nothing in
 * the GGUF kinds. */
int loom_tokenizer_is_control(const loom_tokenizer *t, int token);

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

/* Flags of loom_tokenizer_encode_ex. */
enum {
    LOOM_TOK_BOS = 1,            /* start with BOS ([CLS] for BERT) */
    LOOM_TOK_EOS = 2,            /* end with EOS ([SEP] for BERT) */
    LOOM_TOK_PARSE_SPECIAL = 4,  /* control tokens written in the text (e.g.
                                    "<|im_start|>") become their ids */
};

/* Encodes text[0..len). The GGUF kinds follow Hugging Face: text must be
 * valid UTF-8 (LOOM_ERR_INVALID_ARG naming the byte offset otherwise);
 * user-defined pieces in the text are always matched whole, control pieces
 * only with LOOM_TOK_PARSE_SPECIAL. The llama2.c kind behaves as
 * loom_tokenizer_encode. Same buffer rules and errors as loom_tokenizer_encode. */
loom_status loom_tokenizer_encode_ex(const loom_tokenizer *t, const char *text, size_t len,
                                     int flags, int32_t *ids, int max_ids, int *n_ids);

/* The bytes token decodes to when it follows prev: the piece, without its
 * leading ' ' when prev is BOS; a "<0xXX>" piece gives the one raw byte 0xXX.
 * GGUF kinds: SentencePiece pieces with spaces, byte-level BPE pieces as their
 * raw bytes (a codepoint may span tokens), WordPiece "##" continuations
 * without and word starts with a leading space; control tokens give ""; the
 * leading space is dropped when prev < 0 (start of text), BOS or a control
 * token (SentencePiece only with its dummy prefix).
 * *len (may be NULL) gets the byte count; the bytes are also NUL-terminated.
 * NULL (and an error message, *len = 0) for an out-of-range token. The pointer
 * stays valid until t is freed. */
const char *loom_tokenizer_decode(const loom_tokenizer *t, int prev, int token,
                                  size_t *len);

/* The raw vocabulary string of token (NUL-terminated); NULL if out of range. */
const char *loom_tokenizer_piece(const loom_tokenizer *t, int token);
/* Its merge score; 0 (and an error message) if out of range. */
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
