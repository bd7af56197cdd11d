/*
 * GGUF block formats, bit-exact with llama.cpp: 32 elements per block, the
 * scale (and min) stored as IEEE half. Nibble layout of q4_0/q4_1: byte j of
 * qs holds element j in its low 4 bits and element j + 16 in its high 4 bits.
 */
#ifndef LOOM_OPS_QUANT_H
#define LOOM_OPS_QUANT_H

#include <math.h>
#include <stdint.h>

#include "loom.h"
#include "base/cpu.h"

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
/*
 * i8 KV cache rows (one scale per row, the per-token antiquant of the attention
 * ops): scale = max|x| / 127 (1 for an all-zero row), q = round-half-even(x /
 * scale) clamped to [-127, 127]; x ~ q * scale. NaN elements are ignored by the
 * max and stored as -127. Every writer of such a row (kv_append, qkv_rope,
 * reshape_and_cache) uses these, so they store the same bytes.
 */
static inline float loom_i8_row_scale(float amax) { return amax > 0.0f ? amax / 127.0f : 1.0f; }
static inline int8_t loom_i8_quant(float x, float scale) {
    float v = x / scale;
    v = v > -127.0f ? v : -127.0f;  /* NaN -> -127 */
    v = v < 127.0f ? v : 127.0f;
    /* round half to even (lrintf's result in the default rounding mode) without a libm
     * call: |v| <= 127, so v + 1.5 * 2^23 has unit ulp; the loop vectorizes */
    v = (v + 12582912.0f) - 12582912.0f;
    return (int8_t)(int32_t)v;
}
/* Quantizes x[0, n) into q; returns the row's scale. */
float loom_quantize_row_i8(const float *x, int64_t n, int8_t *q);

/* Converts any supported weight row (f32, f16, bf16, q8_0, q4_0, q4_1) to f32. */
void loom_row_to_f32(loom_dtype t, const void *src, float *dst, int64_t n);

/*
 * q8 activations: a row of x quantized per block of 32 for the integer dot
 * products of the matmul kernels (a scratch format, not a file format). For a
 * row of K elements (K a multiple of 32) and nb = K / 32 blocks:
 *   qs[K]     int8   q = round-half-even(x / d), |q| <= 127
 *   d[nb]     f32    max|x| / 127 of the block; f32 rather than f16 so that the
 *                    activation keeps its full 8 bits relative to the block max
 *   bias[nb]  int32  bias_mul * sum(q): the integer correction a kernel needs for
 *                    its weight encoding (-8 for q4_0's offset nibbles, -128 for
 *                    q8_0 weights shifted to unsigned)
 *   s[nb]     f32    d * sum(q): q4_1's min term, offsets corrected in f32
 * Every level produces the same bytes. A block holding NaN or Inf gets d = NaN
 * and q = 0, so the outputs it touches are NaN; a block whose max is below
 * ~1.5e-36 (1 / d would overflow) becomes zeros.
 */
typedef struct loom_q8_act {
    int8_t  *qs;
    float   *d;
    int32_t *bias;
    float   *s;
} loom_q8_act;

/* Bytes of one quantized row of K elements (a multiple of 64). */
size_t loom_q8_act_bytes(int64_t K);
/* The arrays of one row laid out in buf (64-byte aligned, loom_q8_act_bytes(K) bytes). */
loom_q8_act loom_q8_act_view(void *buf, int64_t K);
/* Quantizes x[0, K) into r with the vector code of level isa (>= LOOM_ISA_GENERIC). */
void loom_quantize_act(loom_isa isa, const float *x, int64_t K, int32_t bias_mul, loom_q8_act r);

#endif
