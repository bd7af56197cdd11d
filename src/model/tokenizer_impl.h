/* Inside the tokenizer: the handle's layout and the functions its parts
 * share (tokenizer.c core + scored BPE, tokenizer_gguf.c loader and special
 * tokens, tokenizer_bpe.c byte-level BPE, tokenizer_wpm.c WordPiece). Not for
 * other modules. */
#ifndef LOOM_MODEL_TOKENIZER_IMPL_H
#define LOOM_MODEL_TOKENIZER_IMPL_H

#include "model/tokenizer.h"

/* Which algorithm and conventions a tokenizer follows. */
typedef enum tok_kind {
    TOK_SCORED_BPE = 0,  /* llama2.c / run.c conventions */
    TOK_SPM,             /* SentencePiece BPE with scores, from GGUF ("llama") */
    TOK_BYTE_BPE,        /* GPT-2 byte-level BPE with ranked merges ("gpt2") */
    TOK_WORDPIECE,       /* BERT WordPiece ("bert") */
} tok_kind;

/* Token types as GGUF stores them (tokenizer.ggml.token_type). */
enum {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

/* Pre-tokenizer families of byte-level BPE (tokenizer.ggml.pre). */
typedef enum tok_pre {
    TOK_PRE_GPT2 = 0,    /* GPT-2's regex */
    TOK_PRE_SMOLLM,      /* every digit apart, then GPT-2's regex */
    TOK_PRE_LLAMA3,      /* Llama 3's regex: case-insensitive contractions, digits in threes */
    TOK_PRE_QWEN2,       /* Qwen2's (and Qwen3's): Llama 3's with every digit apart */
} tok_pre;

typedef struct tok_merges tok_merges;  /* byte-level BPE pair table (tokenizer_bpe.c) */

struct loom_tokenizer {
    tok_kind kind;
    int n_vocab;
    char *blob;             /* all pieces, each followed by a NUL */
    uint32_t *off;          /* (n_vocab) piece i starts at blob + off[i] */
    uint32_t *len;          /* (n_vocab) byte length of piece i */
    float *score;           /* (n_vocab) merge score of piece i */
    int32_t *slot;          /* (mask + 1) open-addressing table of ids, -1 empty */
    uint32_t mask;
    uint32_t max_len;       /* longest piece, bounds every merge candidate */
    int bos, eos;           /* -1 when the vocabulary has none */
    int byte_base;          /* llama2.c: byte b falls back to id byte_base + b */
    int space_id;           /* id of the " " piece, -1 if absent */
    char byte_str[256][2];  /* decode targets of <0xXX> pieces: byte + NUL */

    /* Filled by the GGUF loader (NULL / defaults for llama2.c). */
    int32_t byte_id[256];   /* id standing for byte b (fallback or byte-level), -1 none */
    uint8_t *type;          /* (n_vocab) token types; NULL means all normal */
    int unk;                /* unknown-token id, -1 none */
    int add_bos, add_eos;   /* what the vocabulary asks for by default */
    int add_space_prefix;   /* SentencePiece dummy prefix before the text */
    int strip_lead_space;   /* decode drops the leading space at the start */
    char *dec;              /* decoded bytes of every token, each NUL-terminated */
    uint32_t *dec_off, *dec_len;  /* (n_vocab) */
    int32_t *special;       /* (n_special) ids matched literally in text, longest first */
    int n_special;
    tok_pre pre;
    int ignore_merges;      /* byte-level BPE: a word that is a piece stays whole */
    tok_merges *merges;
    const char *wp_word;    /* WordPiece: prefix of word-initial pieces ("\u2581" in GGUF, "" in HF) */
    const char *wp_cont;    /* WordPiece: prefix of continuation pieces ("" in GGUF, "##" in HF) */
};

/* A growable list of ids. */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

loom_status loom_tok_push(tok_ids *o, int32_t id);

/* A tokenizer of the given kind holding n pieces (copied; scores may be NULL
 * for all zero). Special ids start at -1; the caller fills the rest. */
loom_status loom_tok_create(tok_kind kind, int n, const char *const *pieces, const uint32_t *lens,
                            const float *scores, loom_tokenizer **out);
/* Id of the piece equal to s[0..n), or -1 (the lowest id for duplicates). */
int loom_tok_find(const loom_tokenizer *t, const char *s, size_t n);

/* Merges symbols sym[0..word_end[n_words-1]) word by word (word w ends
 * before word_end[w]; pairs never span words): scored BPE, or ranked merges
 * when t->merges is set. Appends the result to out. */
loom_status loom_tok_merge_words(const loom_tokenizer *t, const int32_t *sym,
                                 const int32_t *word_end, int n_words, tok_ids *out);

/* Appends the tokens of one run of plain text (no special tokens inside).
 * SentencePiece: prefix adds the dummy-prefix space. */
loom_status loom_tok_spm_fragment(const loom_tokenizer *t, const char *s, size_t n, int prefix,
                                  tok_ids *out);
loom_status loom_tok_bpe_fragment(const loom_tokenizer *t, const char *s, size_t n, tok_ids *out);
loom_status loom_tok_wpm_fragment(const loom_tokenizer *t, const char *s, size_t n, tok_ids *out);

/* Encoding of the GGUF kinds: special-token partition, then the kind's
 * fragment encoder (tokenizer_gguf.c). */
loom_status loom_tok_encode_gguf(const loom_tokenizer *t, const char *text, size_t len, int flags,
                                 tok_ids *out);

/* Byte-level BPE merges from "left right" strings; unknown pieces are skipped. */
loom_status loom_tok_bpe_merges_init(loom_tokenizer *t, const char *const *merges,
                                     const uint64_t *lens, uint64_t n);
void loom_tok_bpe_merges_free(tok_merges *m);
/* Rank and result of merging pieces l and r; 0 when they do not merge. */
int loom_tok_bpe_pair(const tok_merges *m, int32_t l, int32_t r, int32_t *rank, int32_t *id);
/* Byte b's printable stand-in in byte-level vocabularies (GPT-2's mapping). */
uint32_t loom_tok_byte_to_unicode(int b);
/* The byte a byte-level codepoint stands for, or -1. */
int loom_tok_unicode_to_byte(uint32_t cp);

#endif
