/* The few Unicode facts the tokenizers need: strict UTF-8 decoding, a coarse
 * general-category class, White_Space, simple lowercase and accent stripping
 * (NFD without nonspacing marks). Tables come from scripts/gen_unicode_data.py. */
#ifndef LOOM_MODEL_UNICODE_H
#define LOOM_MODEL_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Coarse general category. */
typedef enum loom_uc_class {
    UC_OTHER = 0,   /* symbols, spacing/enclosing marks, separators */
    UC_LETTER,      /* L*  */
    UC_NUMBER,      /* N*  */
    UC_PUNCT,       /* P*  */
    UC_MARK_NS,     /* Mn  */
    UC_CONTROL,     /* Cc, Cf, Cs, Co: control, format, surrogate, private use */
    UC_UNASSIGNED,  /* Cn */
} loom_uc_class;

/* Decodes one codepoint from s[0..n) (n >= 1). Returns its byte length 1..4,
 * or 0 for an invalid sequence (bad lead byte, truncated, overlong, surrogate,
 * above U+10FFFF). */
int loom_utf8_decode(const char *s, size_t n, uint32_t *cp);

/* Writes cp (<= U+10FFFF) as UTF-8 into out; returns the byte count. */
int loom_utf8_encode(uint32_t cp, char out[4]);

/* Offset of the first invalid byte of s[0..n), or n when all of it is valid. */
size_t loom_utf8_check(const char *s, size_t n);

loom_uc_class loom_uc_class_of(uint32_t cp);
/* The Unicode White_Space property (what regex \s and Rust is_whitespace use). */
int loom_uc_is_space(uint32_t cp);
/* Simple (one-codepoint) lowercase mapping; cp itself when it has none. */
uint32_t loom_uc_lower(uint32_t cp);
/* Canonical decomposition of cp with nonspacing marks removed: writes 0..3
 * codepoints to out and returns the count (1 and cp itself when unchanged). */
int loom_uc_strip_accents(uint32_t cp, uint32_t out[3]);

#endif
