/* Reference quantize/dequantize for the GGUF block formats, and the q8
 * activation quantizer of the integer matmul kernels (generic, AVX2, AVX-512). */
#include "ops/quant.h"

#include <float.h>
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

/* roundf (halves away from zero) for finite |v| < 2^31, without the libm call:
 * v minus its truncation is exact. Branch-free, so the loops vectorize. */
static inline int round_away(float v) {
    int i = (int)v;
    float f = v - (float)i;
    return i + (f >= 0.5f) - (f <= -0.5f);
}

/* q8_0: d = max|x| / 127, q = round(x / d) (halves away from zero; NaN
 * elements are left out of the max and stored as 0). */
static void quant_q8_0(const float *x, loom_block_q8_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        /* in 8 lanes, elementwise (vectorizes), then across them */
        float m8[8] = {0};
        int n8[8] = {0};
        for (int j = 0; j < 32; j += 8)
            for (int k = 0; k < 8; k++) {
                float a = fabsf(x[j + k]);
                m8[k] = a > m8[k] ? a : m8[k]; /* fmaxf's result, NaN not taken */
                n8[k] |= !(x[j + k] == x[j + k]);
            }
        float amax = 0.0f;
        int nan = 0;
        for (int k = 0; k < 8; k++) {
            amax = m8[k] > amax ? m8[k] : amax;
            nan |= n8[k];
        }
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = loom_f32_to_f16(d);
        if (nan)
            for (int j = 0; j < 32; j++) b[i].qs[j] = (int8_t)(x[j] == x[j] ? round_away(x[j] * id) : 0);
        else
            for (int j = 0; j < 32; j++) b[i].qs[j] = (int8_t)round_away(x[j] * id);
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

float loom_quantize_row_i8(const float *x, int64_t n, int8_t *q) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax; /* NaN: not taken */
    }
    float sc = loom_i8_row_scale(amax);
    for (int64_t i = 0; i < n; i++) q[i] = loom_i8_quant(x[i], sc);
    return sc;
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

/* ------------------------------------------------------------ q8 activations */

size_t loom_q8_act_bytes(int64_t K) {
    size_t nb = (size_t)K / 32, b = (size_t)K + nb * 12;
    return (b + 63) & ~(size_t)63;
}

loom_q8_act loom_q8_act_view(void *buf, int64_t K) {
    size_t nb = (size_t)K / 32;
    char *p = buf;
    loom_q8_act r = {(int8_t *)p, (float *)(p + K), (int32_t *)(p + K + 4 * nb),
                     (float *)(p + K + 8 * nb)};
    return r;
}

/* Scale of one block from its max magnitude; bad (NaN/Inf seen) gives NaN. A
 * block so small that 1 / d overflows (max below ~1.5e-36) becomes zeros. */
static float act_scale(float amax, int bad, float *id) {
    if (bad) {
        *id = 0.0f;
        return NAN;
    }
    float d = amax / 127.0f;
    *id = d != 0.0f ? 1.0f / d : 0.0f;
    if (!(*id <= FLT_MAX)) d = *id = 0.0f;
    return d;
}

static void act_finish(loom_q8_act r, int64_t b, float d, int32_t sum, int32_t bias_mul) {
    if (isnan(d)) {
        memset(r.qs + b * 32, 0, 32);
        sum = 0;
    }
    r.d[b] = d;
    r.bias[b] = bias_mul * sum;
    r.s[b] = d * (float)sum;
}

static void quant_act_generic(const float *x, int64_t nb, int32_t bias_mul, loom_q8_act r) {
    for (int64_t b = 0; b < nb; b++, x += 32) {
        float amax = 0.0f;
        int bad = 0;
        for (int j = 0; j < 32; j++) {
            float a = fabsf(x[j]);
            bad |= !(a <= FLT_MAX);
            amax = a > amax ? a : amax;
        }
        float id, d = act_scale(amax, bad, &id);
        int32_t sum = 0;
        for (int j = 0; j < 32 && !bad; j++) {
            /* lrintf rounds half to even, like the vector conversions */
            int q = (int)lrintf(x[j] * id);
            r.qs[b * 32 + j] = (int8_t)q;
            sum += q;
        }
        act_finish(r, b, d, sum, bias_mul);
    }
}

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2,fma")))
static void quant_act_avx2(const float *x, int64_t nb, int32_t bias_mul, loom_q8_act r) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 big = _mm256_set1_ps(FLT_MAX);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < nb; b++, x += 32) {
        __m256 v[4], m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 8 * i);
            __m256 a = _mm256_and_ps(v[i], absmask);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ));
            m = _mm256_max_ps(m, a);
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float id, d = act_scale(_mm_cvtss_f32(h), _mm256_movemask_ps(bad) != 0, &id);
        __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int i = 0; i < 4; i++) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], vid));
        /* packs interleave 128-bit lanes; the permute restores element order */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)(r.qs + b * 32), _mm256_permutevar8x32_epi32(p, order));
        __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
        act_finish(r, b, d, _mm_cvtsi128_si32(s4), bias_mul);
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl")))
static void quant_act_avx512(const float *x, int64_t nb, int32_t bias_mul, loom_q8_act r) {
    const __m512 big = _mm512_set1_ps(FLT_MAX);
    for (int64_t b = 0; b < nb; b++, x += 32) {
        __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
        __mmask16 bad = _mm512_cmp_ps_mask(a0, big, _CMP_NLE_UQ) |
                        _mm512_cmp_ps_mask(a1, big, _CMP_NLE_UQ);
        float id, d = act_scale(_mm512_reduce_max_ps(_mm512_max_ps(a0, a1)), bad != 0, &id);
        __m512 vid = _mm512_set1_ps(id);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));
        __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
        _mm_storeu_si128((__m128i *)(r.qs + b * 32), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(r.qs + b * 32 + 16), _mm512_cvtsepi32_epi8(q1));
        act_finish(r, b, d, _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)), bias_mul);
    }
}
#endif

void loom_quantize_act(loom_isa isa, const float *x, int64_t K, int32_t bias_mul, loom_q8_act r) {
    int64_t nb = K / 32;
#if defined(__x86_64__)
    if (isa >= LOOM_ISA_AVX512) {
        quant_act_avx512(x, nb, bias_mul, r);
        return;
    }
    if (isa >= LOOM_ISA_AVX2) {
        quant_act_avx2(x, nb, bias_mul, r);
        return;
    }
#endif
    (void)isa;
    quant_act_generic(x, nb, bias_mul, r);
}
