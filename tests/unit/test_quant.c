/* GGUF block formats (layout, hand-built blocks, known-answer quantization,
 * error bounds, edge cases) and the q8 activation quantizer of the matmul
 * kernels (same bytes at every level). */
#include "check.h"

#include <float.h>
#include <stddef.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/rng.h"
#include "ops/ops.h"
#include "ops/quant.h"

static void test_layout(void) {
    /* llama.cpp's structs: {ggml_half d; int8 qs[32]}, {d; u8 qs[16]}, {d; m; u8 qs[16]} */
    CHECK(sizeof(loom_block_q8_0) == 34 && offsetof(loom_block_q8_0, qs) == 2);
    CHECK(sizeof(loom_block_q4_0) == 18 && offsetof(loom_block_q4_0, qs) == 2);
    CHECK(sizeof(loom_block_q4_1) == 20 && offsetof(loom_block_q4_1, m) == 2 &&
          offsetof(loom_block_q4_1, qs) == 4);
    CHECK(loom_dtype_block_bytes(LOOM_Q8_0) == 34 && loom_dtype_block_elems(LOOM_Q8_0) == 32);
    CHECK(loom_dtype_block_bytes(LOOM_Q4_0) == 18 && loom_dtype_block_bytes(LOOM_Q4_1) == 20);
    CHECK(loom_dtype_row_bytes(LOOM_Q4_0, 4096) == 128 * 18);
    CHECK(loom_dtype_row_bytes(LOOM_Q8_0, 64) == 68 && loom_dtype_row_bytes(LOOM_Q4_1, 96) == 60);
}

/* Blocks built by hand decode to the values the format defines. */
static void test_hand_blocks(void) {
    float y[32];
    loom_block_q8_0 b8;
    b8.d = 0x3000;  /* 0.125 */
    for (int j = 0; j < 32; j++) b8.qs[j] = (int8_t)(j - 16);
    b8.qs[0] = -128;  /* a file may hold -128 although the quantizer never writes it */
    loom_dequantize_row(LOOM_Q8_0, &b8, y, 32);
    CHECK(y[0] == -16.0f && y[1] == -1.875f && y[16] == 0.0f && y[31] == 1.875f);

    /* q4_0, d = 0.5: byte j = j | (15 - j) << 4: element j = 0.5 (j - 8),
     * element j + 16 = 0.5 (15 - j - 8) */
    loom_block_q4_0 b40;
    b40.d = 0x3800;
    for (int j = 0; j < 16; j++) b40.qs[j] = (uint8_t)(j | (15 - j) << 4);
    loom_dequantize_row(LOOM_Q4_0, &b40, y, 32);
    int ok = 1;
    for (int j = 0; j < 16; j++) ok &= y[j] == 0.5f * (float)(j - 8) && y[j + 16] == 0.5f * (float)(7 - j);
    CHECK(ok);
    CHECK(y[0] == -4.0f && y[15] == 3.5f && y[16] == 3.5f && y[31] == -4.0f);

    /* q4_1, d = 0.25, m = -1: element = 0.25 q - 1 */
    loom_block_q4_1 b41;
    b41.d = 0x3400;
    b41.m = 0xBC00;
    for (int j = 0; j < 16; j++) b41.qs[j] = (uint8_t)(j | (15 - j) << 4);
    loom_dequantize_row(LOOM_Q4_1, &b41, y, 32);
    CHECK(y[0] == -1.0f && y[5] == 0.25f && y[15] == 2.75f && y[16] == 2.75f && y[31] == -1.0f);

    /* loom_row_to_f32 dispatches to the same decoding */
    float z[32];
    loom_row_to_f32(LOOM_Q4_1, &b41, z, 32);
    CHECK(memcmp(y, z, sizeof y) == 0);
}

/* x[j] = 0.25 (j - 16) + 0.05: -3.95 .. 3.8. Expected bytes derived from
 * llama.cpp's reference rules (comments), with f16 rounded to nearest even. */
static void test_known_answers(void) {
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) * 0.25f + 0.05f;

    /* q8_0: d = amax / 127 = 3.95 / 127 = 0.0311024 -> f16 0x27F6 (1.99055 * 2^-6);
     * q = roundf(x / d): -127, -119, ..., 0.05 / d = 1.61 -> 2, ..., 3.8 / d = 122.2 -> 122 */
    static const int8_t q8[32] = {-127, -119, -111, -103, -95, -87, -79, -71, -63, -55, -47,
                                  -39,  -31,  -23,  -14,  -6,  2,   10,  18,  26,  34,  42,
                                  50,   58,   66,   74,   82,  90,  98,  106, 114, 122};
    loom_block_q8_0 b8;
    loom_quantize_row(LOOM_Q8_0, x, &b8, 32);
    CHECK(b8.d == 0x27F6);
    CHECK(memcmp(b8.qs, q8, 32) == 0);

    /* q4_0: the largest magnitude is -3.95 (negative), d = -3.95 / -8 = 0.49375 ->
     * f16 0x37E6; q = min(15, (int)(x / d + 8.5)): x0 = -3.95 -> 0, x16 = 0.05 -> 8,
     * x31 = 3.8 -> 16.2, clamped to 15 */
    static const uint8_t q40[16] = {0x80, 0x91, 0x91, 0xa2, 0xa2, 0xb3, 0xb3, 0xc4,
                                    0xc4, 0xd5, 0xd5, 0xe6, 0xe6, 0xf7, 0xf7, 0xf8};
    loom_block_q4_0 b40;
    loom_quantize_row(LOOM_Q4_0, x, &b40, 32);
    CHECK(b40.d == 0x37E6);
    CHECK(memcmp(b40.qs, q40, 16) == 0);

    /* q4_1: d = (3.8 + 3.95) / 15 = 0.516667 -> f16 0x3822, m = -3.95 -> 0xC3E6;
     * q = min(15, (int)((x - m) / d + 0.5)) */
    static const uint8_t q41[16] = {0x80, 0x80, 0x91, 0x91, 0xa2, 0xa2, 0xb3, 0xb3,
                                    0xc4, 0xc4, 0xd5, 0xd5, 0xe6, 0xe6, 0xf7, 0xf7};
    loom_block_q4_1 b41;
    loom_quantize_row(LOOM_Q4_1, x, &b41, 32);
    CHECK(b41.d == 0x3822 && b41.m == 0xC3E6);
    CHECK(memcmp(b41.qs, q41, 16) == 0);
}

/* Largest |x - dequant(quant(x))| allowed for block b of x, from the rules:
 * rounding to the grid of the f32 scale loses half a step (a whole step for
 * q4_0's clamp at +7 on the side opposite its max), and the f16 scale and min
 * move every level by the rounding of d (and m). */
static double block_err_bound(loom_dtype t, const float *x) {
    float amax = 0.0f, vmax = 0.0f, mn = x[0], mx = x[0];
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), vmax = x[j];
        mn = fminf(mn, x[j]);
        mx = fmaxf(mx, x[j]);
    }
    double d, d16, slack = 1e-6 * (fabs(mn) + fabs(mx));
    switch (t) {
    case LOOM_Q8_0:
        d = amax / 127.0f;
        d16 = loom_f16_to_f32(loom_f32_to_f16((float)d));
        return 0.5 * d + 127.0 * fabs(d - d16) + slack;
    case LOOM_Q4_0:
        d = fabs(vmax / -8.0f);
        d16 = fabs(loom_f16_to_f32(loom_f32_to_f16(vmax / -8.0f)));
        return 1.0 * d + 8.0 * fabs(d - d16) + slack;
    default:
        d = (mx - mn) / 15.0f;
        d16 = loom_f16_to_f32(loom_f32_to_f16((float)d));
        return 0.5 * d + 15.0 * fabs(d - d16) + fabs(mn - loom_f16_to_f32(loom_f32_to_f16(mn))) + slack;
    }
}

static void test_roundtrip_bounds(void) {
    enum { NB = 64, N = NB * 32 };
    static float x[N], y[N];
    static unsigned char q[NB * 34];
    loom_rng rng;
    loom_rng_init(&rng, 11, 0);
    for (int i = 0; i < N; i++) {
        /* blocks of very different scales, some one-signed */
        float scale = powf(10.0f, (float)((i / 32) % 7) - 3.0f);
        float off = (i / 32) % 5 == 0 ? 1.0f : 0.0f;
        x[i] = scale * (2.0f * loom_rng_uniform(&rng) - 1.0f + off);
    }
    for (int t = LOOM_Q8_0; t <= LOOM_Q4_1; t++) {
        loom_quantize_row((loom_dtype)t, x, q, N);
        loom_dequantize_row((loom_dtype)t, q, y, N);
        int bad = 0;
        double worst = 0.0;
        for (int b = 0; b < NB; b++) {
            double bound = block_err_bound((loom_dtype)t, x + 32 * b);
            for (int j = 0; j < 32; j++) {
                double e = fabs((double)x[32 * b + j] - y[32 * b + j]);
                bad += !(e <= bound);
                if (bound > 0 && e / bound > worst) worst = e / bound;
            }
        }
        CHECK_MSG(bad == 0, "%s: %d elements beyond the bound", loom_dtype_name((loom_dtype)t), bad);
        /* the bound is tight enough to mean something: some element uses 40% of it */
        CHECK_MSG(worst > 0.4, "%s: worst error only %.2f of the bound", loom_dtype_name((loom_dtype)t), worst);
    }
}

static void test_edge_blocks(void) {
    float x[32] = {0}, y[32];
    loom_block_q8_0 b8;
    loom_block_q4_0 b40;
    loom_block_q4_1 b41;
    /* all zero: d = 0 (q4_0: 0 / -8 = -0, f16 0x8000, as llama.cpp writes it) and
     * the zero levels (0, nibble 8 for q4_0, 0 for q4_1) */
    loom_quantize_row(LOOM_Q8_0, x, &b8, 32);
    loom_quantize_row(LOOM_Q4_0, x, &b40, 32);
    loom_quantize_row(LOOM_Q4_1, x, &b41, 32);
    int ok = b8.d == 0 && b40.d == 0x8000 && b41.d == 0 && b41.m == 0;
    for (int j = 0; j < 32; j++) ok &= b8.qs[j] == 0;
    for (int j = 0; j < 16; j++) ok &= b40.qs[j] == 0x88 && b41.qs[j] == 0;
    CHECK(ok);
    loom_dequantize_row(LOOM_Q4_0, &b40, y, 32);
    for (int j = 0; j < 32; j++) ok &= y[j] == 0.0f;
    CHECK(ok);

    /* one huge value: it survives (exactly up to the f16 scale), the rest
     * flush towards zero within the bound */
    for (int j = 0; j < 32; j++) x[j] = 0.01f * (float)(j - 16);
    x[7] = 10000.0f;
    loom_quantize_row(LOOM_Q8_0, x, &b8, 32);
    loom_dequantize_row(LOOM_Q8_0, &b8, y, 32);
    CHECK(b8.qs[7] == 127 && fabsf(y[7] - 10000.0f) <= 127.0f * fabsf(loom_f16_to_f32(b8.d) - 10000.0f / 127.0f) + 1e-3f);
    CHECK(b8.qs[0] == 0 && y[0] == 0.0f);

    /* q4_0 with a negative max magnitude maps it to nibble 0 (d > 0); with a
     * positive one d < 0 and the max again maps to nibble 0 */
    for (int j = 0; j < 32; j++) x[j] = 0.1f * (float)(j % 5);
    x[3] = -4.0f;
    loom_quantize_row(LOOM_Q4_0, x, &b40, 32);
    loom_dequantize_row(LOOM_Q4_0, &b40, y, 32);
    CHECK(loom_f16_to_f32(b40.d) == 0.5f && (b40.qs[3] & 0x0F) == 0 && y[3] == -4.0f);
    x[3] = 4.0f;
    loom_quantize_row(LOOM_Q4_0, x, &b40, 32);
    loom_dequantize_row(LOOM_Q4_0, &b40, y, 32);
    CHECK(loom_f16_to_f32(b40.d) == -0.5f && (b40.qs[3] & 0x0F) == 0 && y[3] == 4.0f);
}

/* ------------------------------------------------------------ q8 activations */

static void check_act_row(const float *x, int64_t K, int32_t bias_mul, loom_q8_act r) {
    int ok = 1;
    for (int64_t b = 0; b < K / 32; b++) {
        float amax = 0.0f;
        int bad = 0;
        for (int j = 0; j < 32; j++) {
            bad |= !isfinite(x[32 * b + j]);
            amax = fmaxf(amax, fabsf(x[32 * b + j]));
        }
        if (bad) {
            ok &= isnan(r.d[b]) && r.bias[b] == 0;
            for (int j = 0; j < 32; j++) ok &= r.qs[32 * b + j] == 0;
            continue;
        }
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int tiny = isinf(id);  /* a block of tiny values is all zeros */
        if (tiny) d = id = 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) {
            int q = r.qs[32 * b + j];
            sum += q;
            /* round half to even of x / d, |q| <= 127, and |x - d q| <= d / 2 (+ulp) */
            ok &= q == (int)nearbyintf(x[32 * b + j] * id) && q >= -127 && q <= 127;
            ok &= fabsf(x[32 * b + j] - d * (float)q) <= (tiny ? amax : 0.5f * d * (1.0f + 1e-5f));
        }
        ok &= r.d[b] == d && r.bias[b] == bias_mul * sum && r.s[b] == d * (float)sum;
    }
    CHECK(ok);
}

static void test_act_quant(void) {
    enum { K = 352 };
    static float x[K];
    loom_rng rng;
    loom_rng_init(&rng, 5, 0);
    for (int i = 0; i < K; i++) x[i] = 3.0f * (2.0f * loom_rng_uniform(&rng) - 1.0f);
    for (int j = 0; j < 32; j++) x[32 + j] = 0.0f;  /* block 1: zero */
    x[64 + 5] = NAN;                                /* block 2: NaN */
    x[96 + 9] = -INFINITY;                          /* block 3: Inf */
    x[128 + 1] = 1e30f;                             /* block 4: one huge value */
    for (int j = 0; j < 32; j++) x[192 + j] = 1e-38f * (float)(j - 3);  /* block 6: 1 / d overflows */
    /* block 5: d = 15.875 / 127 = 0.125 exactly, so x / d has exact ties */
    static const float ties[5] = {15.875f, 0.3125f, -0.3125f, 0.1875f, -0.0625f};
    for (int j = 0; j < 32; j++) x[160 + j] = j < 5 ? ties[j] : 0.0f;
    size_t bytes = loom_q8_act_bytes(K);
    CHECK(bytes % 64 == 0);
    unsigned char *ref = loom_alloc_aligned(bytes, 64), *buf = loom_alloc_aligned(bytes, 64);
    memset(ref, 0, bytes);
    loom_q8_act r0 = loom_q8_act_view(ref, K);
    loom_quantize_act(LOOM_ISA_GENERIC, x, K, -8, r0);
    check_act_row(x, K, -8, r0);
    /* ties round to even: 127, 2.5 -> 2, -2.5 -> -2, 1.5 -> 2, -0.5 -> 0 */
    CHECK(r0.qs[160] == 127 && r0.qs[161] == 2 && r0.qs[162] == -2 && r0.qs[163] == 2 && r0.qs[164] == 0);
    CHECK(r0.d[6] == 0.0f && r0.qs[192 + 31] == 0);
    /* every level the CPU runs writes the same bytes */
    for (int isa = LOOM_ISA_AVX2; isa <= (int)loom_cpu_best_isa(); isa++) {
        memset(buf, 0, bytes);
        loom_q8_act r = loom_q8_act_view(buf, K);
        loom_quantize_act((loom_isa)isa, x, K, -8, r);
        CHECK_MSG(memcmp(buf, ref, bytes) == 0, "level %s quantizes differently", loom_isa_name((loom_isa)isa));
    }
    loom_free_aligned(ref);
    loom_free_aligned(buf);
}

/* ------------------------------------------------------------ reference ops */

/* get_rows from a quantized table gives the dequantized rows exactly; the
 * cost models count block bytes. */
static void test_ref_ops(void) {
    enum { V = 5, D = 64 };
    static float rows[V * D], want[3 * D], out[3 * D];
    static unsigned char table[V * (D / 32) * 34];
    loom_rng rng;
    loom_rng_init(&rng, 9, 0);
    for (int i = 0; i < V * D; i++) rows[i] = 2.0f * loom_rng_uniform(&rng) - 1.0f;
    int32_t ids[3] = {4, 0, 4};
    for (int t = LOOM_Q8_0; t <= LOOM_Q4_1; t++) {
        size_t rb = loom_dtype_row_bytes((loom_dtype)t, D);
        for (int v = 0; v < V; v++) loom_quantize_row((loom_dtype)t, rows + v * D, table + v * rb, D);
        for (int i = 0; i < 3; i++) loom_dequantize_row((loom_dtype)t, table + ids[i] * rb, want + i * D, D);
        loom_tensor tt, ti, ty;
        CHECK(loom_tensor_init(&tt, (loom_dtype)t, 2, (const int64_t[]){V, D}, table) == LOOM_OK);
        CHECK(loom_tensor_init(&ti, LOOM_I32, 1, (const int64_t[]){3}, ids) == LOOM_OK);
        CHECK(loom_tensor_init(&ty, LOOM_F32, 2, (const int64_t[]){3, D}, out) == LOOM_OK);
        const loom_tensor *src[2] = {&tt, &ti};
        memset(out, 0xFF, sizeof out);
        CHECK(loom_op_run(LOOM_OP_GET_ROWS, src, 2, NULL, &ty, LOOM_ISA_REF) == LOOM_OK);
        CHECK(memcmp(out, want, sizeof out) == 0);
        loom_cost c;
        loom_op_get(LOOM_OP_GET_ROWS)->cost(src, 2, &ty, NULL, &c);
        CHECK(c.bytes_read == 3 * 4.0 + 3.0 * (double)rb);

        /* matmul with W = the table: N = V rows of K = D */
        float x[2 * D], y[2 * V];
        for (int i = 0; i < 2 * D; i++) x[i] = 0.5f - (float)(i % 7) * 0.125f;
        loom_tensor tx, tw, tyy;
        CHECK(loom_tensor_init(&tx, LOOM_F32, 2, (const int64_t[]){2, D}, x) == LOOM_OK);
        CHECK(loom_tensor_init(&tw, (loom_dtype)t, 2, (const int64_t[]){V, D}, table) == LOOM_OK);
        CHECK(loom_tensor_init(&tyy, LOOM_F32, 2, (const int64_t[]){2, V}, y) == LOOM_OK);
        const loom_tensor *msrc[2] = {&tx, &tw};
        CHECK(loom_op_run(LOOM_OP_MATMUL, msrc, 2, NULL, &tyy, LOOM_ISA_REF) == LOOM_OK);
        int ok = 1;
        for (int m = 0; m < 2; m++)
            for (int n = 0; n < V; n++) {
                float wrow[D];
                loom_dequantize_row((loom_dtype)t, table + n * rb, wrow, D);
                double acc = 0.0;
                for (int k = 0; k < D; k++) acc += (double)x[m * D + k] * (double)wrow[k];
                ok &= y[m * V + n] == (float)acc;
            }
        CHECK(ok);
        loom_op_get(LOOM_OP_MATMUL)->cost(msrc, 2, &tyy, NULL, &c);
        CHECK(c.bytes_read == 2.0 * D * 4 + (double)V * (double)rb);
    }
    /* a q4_0 W whose row stride is not whole blocks is refused */
    loom_tensor tx, tw, ty;
    float x[64], y[4];
    CHECK(loom_tensor_init(&tx, LOOM_F32, 1, (const int64_t[]){32}, x) == LOOM_OK);
    CHECK(loom_tensor_init(&tw, LOOM_Q4_0, 2, (const int64_t[]){2, 64}, table) == LOOM_OK);
    tw.shape[1] = 32;  /* a view of the first 32 columns: row stride 64 is fine */
    CHECK(loom_tensor_init(&ty, LOOM_F32, 1, (const int64_t[]){2}, y) == LOOM_OK);
    const loom_tensor *src[2] = {&tx, &tw};
    CHECK(loom_op_get(LOOM_OP_MATMUL)->infer(src, 2, NULL, &ty) == LOOM_OK);
    tw.stride[0] = 48;
    loom_clear_error();
    CHECK(loom_op_get(LOOM_OP_MATMUL)->infer(src, 2, NULL, &ty) == LOOM_ERR_SHAPE);
    CHECK(loom_last_error()[0] != '\0');
}

int main(void) {
    RUN_TEST(test_layout);
    RUN_TEST(test_hand_blocks);
    RUN_TEST(test_known_answers);
    RUN_TEST(test_roundtrip_bounds);
    RUN_TEST(test_edge_blocks);
    RUN_TEST(test_act_quant);
    RUN_TEST(test_ref_ops);
    return TEST_SUMMARY();
}
