/*
 * GGUF block formats, bit-exact with llama.cpp: 32 elements per block, the
 * scale (and min) stored as IEEE half. Nibble layout of q4_0/q4_1: byte j of
 * qs holds element j in its low 4 bits and element j + 16 in its high 4 bits.
 */
#ifndef LOOM_OPS_QUANT_H
#define LOOM_OPS_QUANT_H

#include <stdint.h>

#include "loom.h"

typedef struct { uint16_t d; int8_t qs[32]; } loom_block_q8_0;               /* x = d*q */
typedef struct { uint16_t d; uint8_t qs[16]; } loom_block_q4_0;              /* x = d*(q-8) */
typedef struct { uint16_t d; uint16_t m; uint8_t qs[16]; } loom_block_q4_1;  /* x = d*q + m */

_Static_assert(sizeof(loom_block_q8_0) == 34, "q8_0 block is 34 bytes");
_Static_assert(sizeof(loom_block_q4_0) == 18, "q4_0 block is 18 bytes");
_Static_assert(sizeof(loom_block_q4_1) == 20, "q4_1 block is 20 bytes");

/* Reference dequantization of n elements (n a multiple of 32) from src of dtype t. */
void loom_dequantize_row(loom_dtype t, const void *src, float *dst, int64_t n);
/* Reference quantization of n f32 elements (n a multiple of 32) into dst of dtype t,
 * with llama.cpp's rounding rules (so files we write match theirs). */
void loom_quantize_row(loom_dtype t, const float *src, void *dst, int64_t n);
/* Converts any supported weight row (f32, f16, bf16, q8_0, q4_0, q4_1) to f32. */
void loom_row_to_f32(loom_dtype t, const void *src, float *dst, int64_t n);

#endif
