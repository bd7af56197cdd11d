/*
 * The ggml weight types loom does not compute with directly, converted at load
 * into one it does (gguf.h: loom_ggml_convert_target). Block layouts, as
 * ggml's reference dequantizers read them (all little endian, half = IEEE
 * binary16):
 *
 *   q5_0  (32 elements, 22 bytes): half d; u32 qh; u8 qs[16]. Element j < 16:
 *         low nibble of qs[j], 5th bit qh bit j; element j + 16: high nibble of
 *         qs[j], 5th bit qh bit j + 16. x = d * (q - 16).
 *   q5_1  (32, 24): half d, m; u32 qh; u8 qs[16]; the same q, x = d * q + m.
 *   q4_K  (256, 144): half d, dmin; u8 scales[12]; u8 qs[128]. Eight
 *         sub-blocks of 32 with 6-bit scale sc and min mn (k4_scale_min);
 *         sub-blocks 2i and 2i + 1 take the low and the high nibbles of
 *         qs[32i .. 32i + 31]. x = d * sc * q - dmin * mn.
 *   q5_K  (256, 176): half d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]. As
 *         q4_K, with a 5th bit: sub-block s takes bit s of qh[l] for element l.
 *   q6_K  (256, 210): u8 ql[128]; u8 qh[64]; i8 scales[16]; half d. In two
 *         halves of 128 (ql + 64h, qh + 32h, scales + 8h): for l < 32, the
 *         elements l, l + 32, l + 64, l + 96 are the low nibble of ql[l], of
 *         ql[l + 32], the high nibble of ql[l], of ql[l + 32], each with the
 *         2 bits of qh[l] at 0, 2, 4, 6 on top; scale scales[l / 16 + 2t] for
 *         the t-th of the four. x = d * scale * (q - 32).
 *   iq4_nl (32, 18): half d; u8 qs[16], nibbles as q4_0's (element j low nibble of
 *         qs[j], j + 16 its high nibble). x = d * kv[q], kv the 16 levels below.
 *   iq4_xs (256, 136): half d; u16 scales_h; u8 scales_l[4]; u8 qs[128]. Eight
 *         sub-blocks of 32, sub-block s: 6-bit ls = nibble s % 2 of scales_l[s / 2]
 *         with bits 2s, 2s + 1 of scales_h on top, its nibbles as iq4_nl's in
 *         qs[16s .. 16s + 15]. x = d * (ls - 32) * kv[q].
 *
 * Conversions (the first exact, the second within half an ulp of a half scale,
 * the rest within half a q8_0 step plus 127 times the half rounding of the
 * step, as loom_quantize_row rounds: 0.56 of a step where it is a normal half):
 *   q5_0 -> q8_0: d kept, q - 16 as the int8 value (exact); iq4_nl the same with
 *   kv[q] (exact); iq4_xs with d * (ls - 32) rounded to half per sub-block.
 *   q4_K -> q4_1: each sub-block a block, d' = half(d * sc), m' = half(-dmin * mn).
 *   q5_1, q5_K, q6_K -> q8_0: dequantized to f32, then quantized per block of 32.
 */
#include "model/gguf.h"

#include <math.h>
#include <string.h>

#include "base/status.h"
#include "ops/quant.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static float rdh(const uint8_t *p) { return loom_f16_to_f32(rd16(p)); }

/* The 6-bit scale and min of sub-block j (0..7) of a q4_K / q5_K block: bytes
 * 0-3 hold the scales of 0-3, bytes 4-7 their mins (low 6 bits each); bytes
 * 8-11 hold the low 4 bits of scale (low nibble) and min (high nibble) of 4-7,
 * whose top 2 bits are the top bits of bytes 0-3 (scales) and 4-7 (mins). */
static void k4_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | (s[j - 4] >> 6) << 4;
        *mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

static void q5_nibbles(const uint8_t *qh4, const uint8_t *qs, int *q) {
    uint32_t qh = (uint32_t)qh4[0] | (uint32_t)qh4[1] << 8 | (uint32_t)qh4[2] << 16 | (uint32_t)qh4[3] << 24;
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0x0F) | (int)((qh >> j) & 1) << 4;
        q[j + 16] = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
    }
}

static void deq_q5_0(const uint8_t *b, float *y) {
    int q[32];
    q5_nibbles(b + 2, b + 6, q);
    float d = rdh(b);
    for (int j = 0; j < 32; j++) y[j] = d * (float)(q[j] - 16);
}

static void deq_q5_1(const uint8_t *b, float *y) {
    int q[32];
    q5_nibbles(b + 4, b + 8, q);
    float d = rdh(b), m = rdh(b + 2);
    for (int j = 0; j < 32; j++) y[j] = d * (float)q[j] + m;
}

static void deq_q4_K(const uint8_t *b, float *y) {
    float d = rdh(b), dmin = rdh(b + 2);
    const uint8_t *sc = b + 4, *qs = b + 16;
    for (int s = 0; s < 8; s++) {
        int a, m;
        k4_scale_min(sc, s, &a, &m);
        float da = d * (float)a, dm = dmin * (float)m;
        const uint8_t *q = qs + 32 * (s / 2);
        for (int l = 0; l < 32; l++) y[32 * s + l] = da * (float)(s % 2 ? q[l] >> 4 : q[l] & 0x0F) - dm;
    }
}

static void deq_q5_K(const uint8_t *b, float *y) {
    float d = rdh(b), dmin = rdh(b + 2);
    const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + 48;
    for (int s = 0; s < 8; s++) {
        int a, m;
        k4_scale_min(sc, s, &a, &m);
        float da = d * (float)a, dm = dmin * (float)m;
        const uint8_t *q = qs + 32 * (s / 2);
        for (int l = 0; l < 32; l++) {
            int v = (s % 2 ? q[l] >> 4 : q[l] & 0x0F) | ((qh[l] >> s) & 1) << 4;
            y[32 * s + l] = da * (float)v - dm;
        }
    }
}

static void deq_q6_K(const uint8_t *b, float *y) {
    float d = rdh(b + 208);
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        const int8_t *sc = (const int8_t *)(b + 192) + 8 * h;
        float *o = y + 128 * h;
        for (int l = 0; l < 32; l++) {
            int q[4] = {(ql[l] & 0x0F) | (qh[l] & 3) << 4, (ql[l + 32] & 0x0F) | ((qh[l] >> 2) & 3) << 4,
                        (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4, (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4};
            for (int t = 0; t < 4; t++) o[l + 32 * t] = d * (float)sc[l / 16 + 2 * t] * (float)(q[t] - 32);
        }
    }
}

/* The 16 levels of iq4_nl / iq4_xs (non-uniform, denser near 0). */
static const int8_t iq4_kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static void deq_iq4_nl(const uint8_t *b, float *y) {
    float d = rdh(b);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)iq4_kv[b[2 + j] & 0x0F];
        y[j + 16] = d * (float)iq4_kv[b[2 + j] >> 4];
    }
}

static int iq4_xs_ls(const uint8_t *b, int s) {
    int lo = (b[4 + s / 2] >> (4 * (s % 2))) & 0x0F, hi = (rd16(b + 2) >> (2 * s)) & 3;
    return (lo | hi << 4) - 32;
}

static void deq_iq4_xs(const uint8_t *b, float *y) {
    float d = rdh(b);
    for (int s = 0; s < 8; s++) {
        float dl = d * (float)iq4_xs_ls(b, s);
        const uint8_t *q = b + 8 + 16 * s;
        for (int j = 0; j < 16; j++) {
            y[32 * s + j] = dl * (float)iq4_kv[q[j] & 0x0F];
            y[32 * s + j + 16] = dl * (float)iq4_kv[q[j] >> 4];
        }
    }
}

typedef void (*deq_fn)(const uint8_t *, float *);

static deq_fn deq_for(uint32_t t) {
    switch (t) {
    case LOOM_GGML_Q5_0: return deq_q5_0;
    case LOOM_GGML_Q5_1: return deq_q5_1;
    case LOOM_GGML_Q4_K: return deq_q4_K;
    case LOOM_GGML_Q5_K: return deq_q5_K;
    case LOOM_GGML_Q6_K: return deq_q6_K;
    case LOOM_GGML_IQ4_NL: return deq_iq4_nl;
    case LOOM_GGML_IQ4_XS: return deq_iq4_xs;
    default: return NULL;
    }
}

int loom_ggml_convert_target(uint32_t t, loom_dtype *to) {
    loom_dtype d;
    switch (t) {
    case LOOM_GGML_Q4_K: d = LOOM_Q4_1; break;
    case LOOM_GGML_Q5_0: case LOOM_GGML_Q5_1: case LOOM_GGML_Q5_K: case LOOM_GGML_Q6_K:
    case LOOM_GGML_IQ4_NL: case LOOM_GGML_IQ4_XS: d = LOOM_Q8_0; break;
    default: return 0;
    }
    if (to) *to = d;
    return 1;
}

/* The arguments of the two entry points (fn names the caller): a type loom
 * converts, buffers, and whole blocks. */
static loom_status check_args(const char *fn, uint32_t t, const void *src, int64_t n, const void *dst) {
    LOOM_RETURN_IF(!loom_ggml_convert_target(t, NULL) || !src || !dst, LOOM_ERR_INVALID_ARG,
                   "%s: type %s is not one loom converts", fn,
                   loom_ggml_type_name(t) ? loom_ggml_type_name(t) : "(unknown)");
    const int64_t be = loom_ggml_block_elems(t);
    LOOM_RETURN_IF(n < 0 || n % be != 0, LOOM_ERR_INVALID_ARG,
                   "%s: %lld elements is not a multiple of the %s block of %lld", fn, (long long)n,
                   loom_ggml_type_name(t), (long long)be);
    return LOOM_OK;
}

loom_status loom_ggml_dequantize(uint32_t t, const void *src, int64_t n, float *dst) {
    LOOM_TRY(check_args("ggml_dequantize", t, src, n, dst));
    const int64_t be = loom_ggml_block_elems(t);
    const size_t bb = loom_ggml_block_bytes(t);
    deq_fn f = deq_for(t);
    for (int64_t i = 0; i < n / be; i++) f((const uint8_t *)src + (size_t)i * bb, dst + i * be);
    return LOOM_OK;
}

/* A half scale from f32, or -1 when it does not fit (not finite after rounding). */
static int half_of(float x, uint16_t *h) {
    *h = loom_f32_to_f16(x);
    return isfinite(loom_f16_to_f32(*h)) ? 0 : -1;
}

/* The conversions that map a block directly (no requantization): source block
 * b (number blk, for messages) into its target blocks at out. */
typedef loom_status (*direct_fn)(const uint8_t *b, void *out, int64_t blk);

static loom_status q4_K_to_q4_1(const uint8_t *b, void *out, int64_t blk) {
    loom_block_q4_1 *o = out;
    float d = rdh(b), dmin = rdh(b + 2);
    for (int s = 0; s < 8; s++) {
        int a, m;
        k4_scale_min(b + 4, s, &a, &m);
        const uint8_t *q = b + 16 + 32 * (s / 2);
        if (half_of(d * (float)a, &o[s].d) || half_of(-(dmin * (float)m), &o[s].m))
            return loom_set_error(LOOM_ERR_FORMAT, "q4_K block %lld: scale %g * %d or min %g * %d is not a "
                                  "finite half", (long long)blk, (double)d, a, (double)dmin, m);
        for (int j = 0; j < 16; j++) {
            int lo = s % 2 ? q[j] >> 4 : q[j] & 0x0F, hi = s % 2 ? q[j + 16] >> 4 : q[j + 16] & 0x0F;
            o[s].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
    return LOOM_OK;
}

static loom_status q5_0_to_q8_0(const uint8_t *b, void *out, int64_t blk) {
    loom_block_q8_0 *o = out;
    int q[32];
    q5_nibbles(b + 2, b + 6, q);
    o->d = rd16(b);
    LOOM_RETURN_IF(!isfinite(loom_f16_to_f32(o->d)), LOOM_ERR_FORMAT, "q5_0 block %lld: scale is not finite",
                   (long long)blk);
    for (int j = 0; j < 32; j++) o->qs[j] = (int8_t)(q[j] - 16);
    return LOOM_OK;
}

/* An iq4 block of 32 (its nibbles at q) as q8_0 with scale h: the levels are int8 already. */
static void iq4_to_q8_0(const uint8_t *q, uint16_t h, loom_block_q8_0 *o) {
    o->d = h;
    for (int j = 0; j < 16; j++) {
        o->qs[j] = iq4_kv[q[j] & 0x0F];
        o->qs[j + 16] = iq4_kv[q[j] >> 4];
    }
}

static loom_status iq4_nl_to_q8_0(const uint8_t *b, void *out, int64_t blk) {
    LOOM_RETURN_IF(!isfinite(rdh(b)), LOOM_ERR_FORMAT, "iq4_nl block %lld: scale is not finite", (long long)blk);
    iq4_to_q8_0(b + 2, rd16(b), out);
    return LOOM_OK;
}

static loom_status iq4_xs_to_q8_0(const uint8_t *b, void *out, int64_t blk) {
    loom_block_q8_0 *o = out;
    float d = rdh(b);
    for (int s = 0; s < 8; s++) {
        uint16_t h;
        int ls = iq4_xs_ls(b, s);
        if (half_of(d * (float)ls, &h))
            return loom_set_error(LOOM_ERR_FORMAT, "iq4_xs block %lld: scale %g * %d is not a finite half",
                                  (long long)blk, (double)d, ls);
        iq4_to_q8_0(b + 8 + 16 * s, h, o + s);
    }
    return LOOM_OK;
}

static direct_fn direct_for(uint32_t t) {
    switch (t) {
    case LOOM_GGML_Q4_K: return q4_K_to_q4_1;
    case LOOM_GGML_Q5_0: return q5_0_to_q8_0;
    case LOOM_GGML_IQ4_NL: return iq4_nl_to_q8_0;
    case LOOM_GGML_IQ4_XS: return iq4_xs_to_q8_0;
    default: return NULL; /* requantized */
    }
}

loom_status loom_ggml_convert_row(uint32_t t, const void *src, int64_t n, void *dst) {
    LOOM_TRY(check_args("ggml_convert_row", t, src, n, dst));
    loom_dtype to = LOOM_Q8_0;
    loom_ggml_convert_target(t, &to); /* checked above */
    const int64_t be = loom_ggml_block_elems(t), nb = n / be;
    const size_t bb = loom_ggml_block_bytes(t), ob = (size_t)(be / 32) * loom_dtype_block_bytes(to);
    const uint8_t *s = src;
    uint8_t *o = dst;
    direct_fn df = direct_for(t);
    if (df) {
        for (int64_t i = 0; i < nb; i++) LOOM_TRY(df(s + (size_t)i * bb, o + (size_t)i * ob, i));
        return LOOM_OK;
    }
    float y[256];
    deq_fn f = deq_for(t);
    for (int64_t i = 0; i < nb; i++) {
        f(s + (size_t)i * bb, y);
        for (int j = 0; j < be; j++)
            LOOM_RETURN_IF(!isfinite(y[j]), LOOM_ERR_FORMAT, "%s block %lld: element %d is not finite",
                           loom_ggml_type_name(t), (long long)i, j);
        loom_quantize_row(to, y, o + (size_t)i * ob, be);
        for (int k = 0; k < be / 32; k++) { /* values beyond 127 * 65504 overflow q8_0's half scale */
            const loom_block_q8_0 *q = (const loom_block_q8_0 *)(o + (size_t)i * ob) + k;
            LOOM_RETURN_IF(!isfinite(loom_f16_to_f32(q->d)), LOOM_ERR_FORMAT,
                           "%s block %lld: values too large for q8_0's half scale", loom_ggml_type_name(t),
                           (long long)i);
        }
    }
    return LOOM_OK;
}
