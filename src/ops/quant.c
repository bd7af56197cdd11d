/* Reference quantize/dequantize for the GGUF block formats. */
#include "ops/quant.h"

#include <math.h>
#include <string.h>

static void dequant_q8_0(const loom_block_q8_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = loom_f16_to_f32(b[i].d);
        for (int j = 0; j < 32; j++) y[i * 32 + j] = d * (float)b[i].qs[j];
    }
}

static void dequant_q4_0(const loom_block_q4_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = loom_f16_to_f32(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[i * 32 + j] = d * (float)((b[i].qs[j] & 0x0F) - 8);
            y[i * 32 + j + 16] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

static void dequant_q4_1(const loom_block_q4_1 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = loom_f16_to_f32(b[i].d), m = loom_f16_to_f32(b[i].m);
        for (int j = 0; j < 16; j++) {
            y[i * 32 + j] = d * (float)(b[i].qs[j] & 0x0F) + m;
            y[i * 32 + j + 16] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

void loom_dequantize_row(loom_dtype t, const void *src, float *dst, int64_t n) {
    int64_t nb = n / 32;
    switch (t) {
    case LOOM_Q8_0: dequant_q8_0(src, dst, nb); break;
    case LOOM_Q4_0: dequant_q4_0(src, dst, nb); break;
    case LOOM_Q4_1: dequant_q4_1(src, dst, nb); break;
    default: break;
    }
}

/* q8_0: d = max|x| / 127, q = round(x / d). */
static void quant_q8_0(const float *x, loom_block_q8_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = loom_f32_to_f16(d);
        for (int j = 0; j < 32; j++) b[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* q4_0: the element of largest magnitude maps to -8, d = that value / -8. */
static void quant_q4_0(const float *x, loom_block_q4_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax = 0.0f, vmax = 0.0f;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                vmax = x[j];
            }
        float d = vmax / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = loom_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)(x[j] * id + 8.5f), q1 = (int)(x[j + 16] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* q4_1: d = (max - min) / 15, m = min, q = round((x - min) / d). */
static void quant_q4_1(const float *x, loom_block_q4_1 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float mn = x[0], mx = x[0];
        for (int j = 1; j < 32; j++) {
            mn = fminf(mn, x[j]);
            mx = fmaxf(mx, x[j]);
        }
        float d = (mx - mn) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = loom_f32_to_f16(d);
        b[i].m = loom_f32_to_f16(mn);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)((x[j] - mn) * id + 0.5f), q1 = (int)((x[j + 16] - mn) * id + 0.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void loom_quantize_row(loom_dtype t, const float *src, void *dst, int64_t n) {
    int64_t nb = n / 32;
    switch (t) {
    case LOOM_Q8_0: quant_q8_0(src, dst, nb); break;
    case LOOM_Q4_0: quant_q4_0(src, dst, nb); break;
    case LOOM_Q4_1: quant_q4_1(src, dst, nb); break;
    default: break;
    }
}

void loom_row_to_f32(loom_dtype t, const void *src, float *dst, int64_t n) {
    switch (t) {
    case LOOM_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case LOOM_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = loom_f16_to_f32(((const uint16_t *)src)[i]);
        break;
    case LOOM_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = loom_bf16_to_f32(((const uint16_t *)src)[i]);
        break;
    default: loom_dequantize_row(t, src, dst, n); break;
    }
}
