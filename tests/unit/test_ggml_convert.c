/* The ggml types loom converts at load (q5_0, q5_1, q4_K, q5_K, q6_K, iq4_nl,
 * iq4_xs):
 *   - dequantization against the gguf Python package's values (ggml_golden.h,
 *     an independent implementation of the formats);
 *   - each conversion, on random blocks, against the dequantized values within
 *     its bound (q5_0, iq4_nl exact; q4_K -> q4_1 and iq4_xs -> q8_0 the half
 *     rounding of the scales;
 *     requantized q8_0 half a step and the half rounding of the step);
 *   - errors: scales that are not finite or overflow a half, wrong counts and
 *     types, each with a message;
 *   - a Llama GGUF holding every such type loads and runs: its logits equal,
 *     bit for bit, those of the same file written with the converted blocks
 *     (loaded on one and two threads: the largest tensors are converted in
 *     parallel), and are close to those of the f32 weights the blocks
 *     dequantize to; a bad block fails the load, naming tensor and block;
 *   - loom convert reads such a file: kept types give the loader's blocks, --type
 *     f32 the exact dequantization. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ggml_golden.h"
#include "model/convert.h"
#include "model/model.h"
#include "ops/quant.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static void put_half(uint8_t *p, float x) {
    uint16_t h = loom_f32_to_f16(x);
    p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}

/* A random block of type t with scale fields set from d (and dmin / m). */
static void rand_block(uint32_t t, uint8_t *b, float d, float dmin) {
    size_t n = loom_ggml_block_bytes(t);
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rnd();
    switch (t) {
    case LOOM_GGML_Q5_0: case LOOM_GGML_IQ4_NL: case LOOM_GGML_IQ4_XS: put_half(b, d); break;
    case LOOM_GGML_Q5_1: case LOOM_GGML_Q4_K: case LOOM_GGML_Q5_K: put_half(b, d), put_half(b + 2, dmin); break;
    case LOOM_GGML_Q6_K: put_half(b + 208, d); break;
    default: break;
    }
}

static const uint32_t types[] = {LOOM_GGML_Q5_0, LOOM_GGML_Q5_1,   LOOM_GGML_Q4_K,  LOOM_GGML_Q5_K,
                                 LOOM_GGML_Q6_K, LOOM_GGML_IQ4_NL, LOOM_GGML_IQ4_XS};
#define N_TYPES 7

static void test_golden(void) {
    const struct { uint32_t t; const unsigned char *b; const float *v; int n; } g[] = {
        {LOOM_GGML_Q5_0, golden_q5_0_bytes, golden_q5_0_vals, 64},
        {LOOM_GGML_Q5_1, golden_q5_1_bytes, golden_q5_1_vals, 64},
        {LOOM_GGML_Q4_K, golden_q4_K_bytes, golden_q4_K_vals, 512},
        {LOOM_GGML_Q5_K, golden_q5_K_bytes, golden_q5_K_vals, 512},
        {LOOM_GGML_Q6_K, golden_q6_K_bytes, golden_q6_K_vals, 512},
        {LOOM_GGML_IQ4_NL, golden_iq4_nl_bytes, golden_iq4_nl_vals, 64},
        {LOOM_GGML_IQ4_XS, golden_iq4_xs_bytes, golden_iq4_xs_vals, 512},
    };
    for (int i = 0; i < N_TYPES; i++) {
        float y[512];
        CHECK(loom_ggml_dequantize(g[i].t, g[i].b, g[i].n, y) == LOOM_OK);
        int bad = 0;
        for (int j = 0; j < g[i].n; j++)
            if (!(fabsf(y[j] - g[i].v[j]) <= 1e-6f * (1.0f + fabsf(g[i].v[j])))) bad++;
        CHECK_MSG(bad == 0, "%s: %d of %d values differ from the gguf package's", loom_ggml_type_name(g[i].t),
                  bad, g[i].n);
    }
}

/* Converted blocks of each type against the dequantized values, over random
 * blocks and scales of several magnitudes (half subnormals included). */
static void test_convert_bounds(void) {
    static const float scales[] = {0.031f, 2.5e-5f, 3.0e-7f, 0.6f};
    for (int ti = 0; ti < N_TYPES; ti++) {
        uint32_t t = types[ti];
        loom_dtype to;
        CHECK(loom_ggml_convert_target(t, &to) && to == (t == LOOM_GGML_Q4_K ? LOOM_Q4_1 : LOOM_Q8_0));
        const int be = loom_ggml_block_elems(t), nblk = 3, n = be * nblk;
        uint8_t src[3 * 210];
        void *dst = malloc((size_t)n / 32 * 34);
        float *ref = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
        int worst = 0;
        for (int rep = 0; rep < 40; rep++) {
            float d = scales[rep % 4] * (float)(1 + rep % 7) / 4.0f, dm = d * (rep % 3 ? 0.7f : -0.3f);
            for (int b = 0; b < nblk; b++) rand_block(t, src + (size_t)b * loom_ggml_block_bytes(t), d, dm);
            CHECK(loom_ggml_dequantize(t, src, n, ref) == LOOM_OK);
            CHECK(loom_ggml_convert_row(t, src, n, dst) == LOOM_OK);
            loom_dequantize_row(to, dst, got, n);
            for (int k = 0; k < n / 32; k++) {
                double bound = 0;
                if (t == LOOM_GGML_Q4_K) { /* each of d*sc and dmin*m within half a half ulp */
                    const loom_block_q4_1 *q = (const loom_block_q4_1 *)dst + k;
                    double a = fabs(loom_f16_to_f32(q->d)), m = fabs(loom_f16_to_f32(q->m));
                    bound = (15 * a + m) * 0x1p-11 + 16 * 0x1p-25 + 1e-6 * (15 * a + m);
                } else if (t == LOOM_GGML_IQ4_XS) { /* levels up to 127 times the scale's half rounding */
                    double a = fabs(loom_f16_to_f32(((const loom_block_q8_0 *)dst)[k].d));
                    bound = 127 * fmax(a * 0x1p-11, 0x1p-25) + 1e-6 * 127 * a;
                } else if (t != LOOM_GGML_Q5_0 && t != LOOM_GGML_IQ4_NL) {
                    /* half the f32 step, plus 127 times the half rounding of the step
                     * (2^-11 of it, or 2^-25 where it is a subnormal half) */
                    double dd = fabs(loom_f16_to_f32(((const loom_block_q8_0 *)dst)[k].d)) * (1 + 0x1p-11) + 0x1p-25;
                    bound = 0.5 * dd * (1 + 1e-6) + 127 * fmax(dd * 0x1p-11, 0x1p-25);
                }
                for (int j = 32 * k; j < 32 * k + 32; j++)
                    if (!(fabs((double)got[j] - ref[j]) <= bound)) {
                        if (!worst)
                            fprintf(stderr, "%s rep %d element %d: %.9g vs %.9g (bound %g)\n",
                                    loom_ggml_type_name(t), rep, j, (double)got[j], (double)ref[j], bound);
                        worst++;
                    }
            }
        }
        CHECK_MSG(worst == 0, "%s -> %s: %d elements outside the bound", loom_ggml_type_name(t),
                  loom_dtype_name(to), worst);
        free(dst), free(ref), free(got);
    }
}

static void test_errors(void) {
    uint8_t b[210];
    unsigned char out[8 * 34];
    float y[256];
    /* a scale that is not finite, or whose product overflows a half */
    rand_block(LOOM_GGML_Q4_K, b, 0.01f, 0.01f);
    b[0] = 0x00, b[1] = 0x7C; /* +inf */
    CHECK(loom_ggml_convert_row(LOOM_GGML_Q4_K, b, 256, out) == LOOM_ERR_FORMAT &&
          strstr(loom_last_error(), "q4_K block 0"));
    rand_block(LOOM_GGML_Q4_K, b, 60000.0f, 0.0f);
    b[4] = 63; /* sub-block 0's scale: 60000 * 63 overflows a half */
    CHECK(loom_ggml_convert_row(LOOM_GGML_Q4_K, b, 256, out) == LOOM_ERR_FORMAT &&
          strstr(loom_last_error(), "not a finite half"));
    rand_block(LOOM_GGML_Q6_K, b, 60000.0f, 0); /* finite values up to ~2.5e8: no half q8_0 scale holds them */
    memset(b + 192, 127, 16);
    CHECK(loom_ggml_convert_row(LOOM_GGML_Q6_K, b, 256, out) == LOOM_ERR_FORMAT &&
          strstr(loom_last_error(), "too large for q8_0"));
    rand_block(LOOM_GGML_Q6_K, b, 0.01f, 0);
    b[208] = 0x01, b[209] = 0x7E; /* NaN */
    CHECK(loom_ggml_convert_row(LOOM_GGML_Q6_K, b, 256, out) == LOOM_ERR_FORMAT &&
          strstr(loom_last_error(), "q6_K block 0: element"));
    rand_block(LOOM_GGML_Q5_0, b, 0.01f, 0);
    b[1] = 0xFC; /* -inf */
    CHECK(loom_ggml_convert_row(LOOM_GGML_Q5_0, b, 32, out) == LOOM_ERR_FORMAT &&
          strstr(loom_last_error(), "q5_0 block 0"));
    rand_block(LOOM_GGML_IQ4_NL, b, 0.01f, 0);
    b[0] = 0x00, b[1] = 0x7E; /* NaN */
    CHECK(loom_ggml_convert_row(LOOM_GGML_IQ4_NL, b, 32, out) == LOOM_ERR_FORMAT &&
          strstr(loom_last_error(), "iq4_nl block 0"));
    rand_block(LOOM_GGML_IQ4_XS, b, 30000.0f, 0);
    b[2] = 0xFF, b[3] = 0xFF, b[4] = 0x00; /* sub-block 0: ls = 48 - 32 = 16, 30000 * 16 overflows */
    CHECK(loom_ggml_convert_row(LOOM_GGML_IQ4_XS, b, 256, out) == LOOM_ERR_FORMAT &&
          strstr(loom_last_error(), "iq4_xs block 0: scale"));
    /* counts and types */
    rand_block(LOOM_GGML_Q5_1, b, 0.01f, 0.1f);
    CHECK(loom_ggml_convert_row(LOOM_GGML_Q5_1, b, 48, out) == LOOM_ERR_INVALID_ARG &&
          strstr(loom_last_error(), "multiple of the q5_1 block of 32"));
    CHECK(loom_ggml_dequantize(LOOM_GGML_Q6_K, b, 128, y) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_ggml_convert_row(LOOM_GGML_Q8_0, b, 32, out) == LOOM_ERR_INVALID_ARG &&
          strstr(loom_last_error(), "q8_0"));
    CHECK(loom_ggml_convert_row(10 /* q2_K */, b, 256, out) == LOOM_ERR_INVALID_ARG);
    CHECK(!loom_ggml_convert_target(LOOM_GGML_Q4_0, NULL) && !loom_ggml_convert_target(999, NULL));
}

/* ------------------------------------------------------------ a model file */

enum { DIM = 256, HID = 512, VOCAB = 64, HEADS = 4, KV_HEADS = 2 };

typedef struct { const char *name; uint32_t type; int64_t rows, cols; float d; } wspec;

/* Every matmul weight in a type loom converts, with scales giving elements of
 * about 0.05 (the model's activations stay in range). */
static const wspec wts[] = {
    {"token_embd.weight", LOOM_GGML_IQ4_XS, VOCAB, DIM, 1.2e-5f},
    {"blk.0.attn_q.weight", LOOM_GGML_Q4_K, DIM, DIM, 1.0e-4f},
    {"blk.0.attn_k.weight", LOOM_GGML_Q5_K, DIM / 2, DIM, 7.0e-5f},
    {"blk.0.attn_v.weight", LOOM_GGML_Q6_K, DIM / 2, DIM, 2.5e-5f},
    {"blk.0.attn_output.weight", LOOM_GGML_Q5_0, DIM, DIM, 5.0e-3f},
    {"blk.0.ffn_gate.weight", LOOM_GGML_Q5_1, HID, DIM, 3.0e-3f},
    {"blk.0.ffn_up.weight", LOOM_GGML_Q4_K, HID, DIM, 1.0e-4f},
    {"blk.0.ffn_down.weight", LOOM_GGML_IQ4_NL, DIM, HID, 4.0e-4f},
    {"output.weight", LOOM_GGML_Q6_K, VOCAB, DIM, 2.5e-5f},
};
#define N_WTS ((int)(sizeof wts / sizeof wts[0]))

/* form 0: the blocks as drawn; 1: converted by loom_ggml_convert_row; 2: f32. */
static void write_model(const char *path, uint8_t *const *blocks, int form) {
    loom_gguf_writer *w;
    CHECK(loom_gguf_writer_init(&w) == LOOM_OK);
    CHECK(loom_gguf_writer_set_str(w, "general.architecture", "llama") == LOOM_OK);
    CHECK(loom_gguf_writer_set_u32(w, "llama.context_length", 64) == LOOM_OK);
    CHECK(loom_gguf_writer_set_u32(w, "llama.embedding_length", DIM) == LOOM_OK);
    CHECK(loom_gguf_writer_set_u32(w, "llama.block_count", 1) == LOOM_OK);
    CHECK(loom_gguf_writer_set_u32(w, "llama.feed_forward_length", HID) == LOOM_OK);
    CHECK(loom_gguf_writer_set_u32(w, "llama.attention.head_count", HEADS) == LOOM_OK);
    CHECK(loom_gguf_writer_set_u32(w, "llama.attention.head_count_kv", KV_HEADS) == LOOM_OK);
    CHECK(loom_gguf_writer_set_u32(w, "llama.rope.dimension_count", DIM / HEADS) == LOOM_OK);
    CHECK(loom_gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f) == LOOM_OK);
    CHECK(loom_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f) == LOOM_OK);
    static float ones[DIM];
    for (int i = 0; i < DIM; i++) ones[i] = 1.0f;
    const int64_t nshape[1] = {DIM};
    CHECK(loom_gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", LOOM_GGML_F32, 1, nshape, ones, sizeof ones) ==
          LOOM_OK);
    CHECK(loom_gguf_writer_add_tensor(w, "blk.0.ffn_norm.weight", LOOM_GGML_F32, 1, nshape, ones, sizeof ones) ==
          LOOM_OK);
    CHECK(loom_gguf_writer_add_tensor(w, "output_norm.weight", LOOM_GGML_F32, 1, nshape, ones, sizeof ones) ==
          LOOM_OK);
    void *tmp[N_WTS] = {0};
    for (int i = 0; i < N_WTS; i++) {
        const wspec *s = &wts[i];
        int64_t n = s->rows * s->cols, shape[2] = {s->rows, s->cols};
        size_t src_bytes = (size_t)(n / loom_ggml_block_elems(s->type)) * loom_ggml_block_bytes(s->type);
        if (form == 0) {
            CHECK(loom_gguf_writer_add_tensor(w, s->name, s->type, 2, shape, blocks[i], src_bytes) == LOOM_OK);
        } else if (form == 1) {
            loom_dtype to;
            CHECK(loom_ggml_convert_target(s->type, &to));
            size_t bytes = (size_t)n / 32 * loom_dtype_block_bytes(to);
            tmp[i] = malloc(bytes);
            CHECK(loom_ggml_convert_row(s->type, blocks[i], n, tmp[i]) == LOOM_OK);
            CHECK(loom_gguf_writer_add_tensor(w, s->name, (uint32_t)loom_ggml_type_from_dtype(to), 2, shape, tmp[i],
                                              bytes) == LOOM_OK);
        } else {
            tmp[i] = malloc(sizeof(float) * (size_t)n);
            CHECK(loom_ggml_dequantize(s->type, blocks[i], n, tmp[i]) == LOOM_OK);
            CHECK(loom_gguf_writer_add_tensor(w, s->name, LOOM_GGML_F32, 2, shape, tmp[i], sizeof(float) * (size_t)n) ==
                  LOOM_OK);
        }
    }
    CHECK(loom_gguf_writer_write_file(w, path) == LOOM_OK);
    loom_gguf_writer_free(w);
    for (int i = 0; i < N_WTS; i++) free(tmp[i]);
}

static const int32_t prompt[] = {1, 17, 40, 3, 63, 22, 9, 51, 30, 12};
#define NP ((int)(sizeof prompt / sizeof prompt[0]))

/* Logits of every prompt position and of one decode step; NULL on error. */
/* pack: loom_model_params.pack_weights (0: the default, which leaves matrices
 * converted at load unpacked; a packed matrix's one-row products take the
 * GEMM, an unpacked one's the GEMV: the same bits only at the same packing) */
static float *run(const char *path, int threads, int pack) {
    loom_model_params p = loom_model_default_params();
    p.n_threads = threads;
    p.pack_weights = pack;
    p.n_ctx = 32;
    loom_model *m = NULL;
    loom_status s = loom_model_load(path, &p, &m);
    CHECK_MSG(s == LOOM_OK, "%s: %s", path, loom_last_error());
    if (s != LOOM_OK) return NULL;
    float *lg = malloc(sizeof(float) * (NP + 1) * VOCAB);
    CHECK(loom_model_forward_all(m, prompt, NP, 0, lg) == LOOM_OK);
    const int32_t next = 5;
    CHECK(loom_model_forward(m, &next, 1, NP, lg + NP * VOCAB) == LOOM_OK);
    loom_model_free(m);
    return lg;
}

static void test_model(void) {
    char dir[] = "/tmp/loom_test_kquant_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    uint8_t *blocks[N_WTS];
    for (int i = 0; i < N_WTS; i++) {
        const wspec *s = &wts[i];
        int64_t nb = s->rows * s->cols / loom_ggml_block_elems(s->type);
        size_t bb = loom_ggml_block_bytes(s->type);
        blocks[i] = malloc((size_t)nb * bb);
        for (int64_t b = 0; b < nb; b++) rand_block(s->type, blocks[i] + (size_t)b * bb, s->d, s->d * 0.5f);
    }
    char p0[256], p1[256], p2[256];
    snprintf(p0, sizeof p0, "%s/kquant.gguf", dir);
    snprintf(p1, sizeof p1, "%s/converted.gguf", dir);
    snprintf(p2, sizeof p2, "%s/f32.gguf", dir);
    write_model(p0, blocks, 0);
    write_model(p1, blocks, 1);
    write_model(p2, blocks, 2);
    float *conv = run(p1, 1, -1), *f32 = run(p2, 1, 0), *conv_packed = run(p1, 1, 0);
    { /* what was converted, as loom profile / bench report it */
        loom_model_params mp1 = loom_model_default_params();
        loom_model *m1 = NULL;
        char sum[256];
        CHECK(loom_model_load(p0, &mp1, &m1) == LOOM_OK);
        if (m1) {
            CHECK(loom_llama_converted_summary(&m1->w, sum, sizeof sum) == 1);
            CHECK_MSG(strcmp(sum, "q5_0 -> q8_0 x1, q5_1 -> q8_0 x1, q4_K -> q4_1 x2, q5_K -> q8_0 x1, "
                                  "q6_K -> q8_0 x2, iq4_nl -> q8_0 x1, iq4_xs -> q8_0 x1 (0.5 MiB)") == 0,
                      "summary: %s", sum);
            /* q4_1: 20 bytes / 32 of attn_q, ffn_up; q8_0: 34 / 32 of the rest */
            const size_t q41 = (size_t)(DIM + HID) * DIM,                          /* q, up */
                         q80 = (size_t)(VOCAB + DIM / 2 + DIM / 2 + DIM + HID + HID + VOCAB) * DIM; /* the rest */
            CHECK(m1->w.converted_bytes == q41 / 32 * 20 + q80 / 32 * 34);
        }
        loom_model_free(m1);
        CHECK(loom_model_load(p1, &mp1, &m1) == LOOM_OK);
        if (m1) CHECK(loom_llama_converted_summary(&m1->w, sum, sizeof sum) == 0 && sum[0] == '\0');
        loom_model_free(m1);
    }
    /* loom convert reads such files too: kept types become the loader's (the same
     * logits bit for bit), --type f32 gives the exact dequantization (the f32
     * file's logits) */
    char p3[256], p4[256];
    snprintf(p3, sizeof p3, "%s/kept.gguf", dir);
    snprintf(p4, sizeof p4, "%s/as_f32.gguf", dir);
    CHECK_MSG(loom_convert(p0, p3, &(loom_convert_params){0}) == LOOM_OK, "%s", loom_last_error());
    CHECK_MSG(loom_convert(p0, p4, &(loom_convert_params){.type_set = 1, .type = LOOM_F32}) == LOOM_OK, "%s",
              loom_last_error());
    loom_gguf *g = NULL;
    CHECK(loom_gguf_open(p3, &g) == LOOM_OK);
    for (int i = 0; g && i < N_WTS; i++) {
        loom_gguf_tensor_info info;
        loom_dtype to;
        CHECK(loom_gguf_tensor_info_at(g, loom_gguf_find_tensor(g, wts[i].name), &info) == LOOM_OK &&
              loom_ggml_convert_target(wts[i].type, &to) && info.ggml_type == (uint32_t)loom_ggml_type_from_dtype(to));
    }
    loom_gguf_close(g);
    float *kept = run(p3, 1, -1), *asf = run(p4, 1, 0);
    if (kept && conv) CHECK_MSG(memcmp(kept, conv, sizeof(float) * (NP + 1) * VOCAB) == 0, "convert: kept types");
    if (asf && f32) CHECK_MSG(memcmp(asf, f32, sizeof(float) * (NP + 1) * VOCAB) == 0, "convert: --type f32");
    free(kept), free(asf);
    unlink(p3), unlink(p4);
    for (int th = 1; th <= 2; th++) {
        float *got = run(p0, th, 0), *got_packed = run(p0, th, 1);
        if (got && conv)
            CHECK_MSG(memcmp(got, conv, sizeof(float) * (NP + 1) * VOCAB) == 0,
                      "%d threads: the file converted at load differs from the one converted before", th);
        if (got_packed && conv_packed)
            CHECK_MSG(memcmp(got_packed, conv_packed, sizeof(float) * (NP + 1) * VOCAB) == 0,
                      "%d threads, packed: the file converted at load differs from the one converted before", th);
        free(got_packed);
        if (got && f32 && th == 1) {
            /* against the exact f32 weights: the requantized q8_0 blocks and the integer
             * matmul's q8 activations (test_llama_gguf's q8_0 bound; observed 1.4e-2) */
            double e = 0, mx = 0;
            for (int k = 0; k < (NP + 1) * VOCAB; k++) {
                double dd = fabs((double)got[k] - f32[k]);
                e = dd > e ? dd : e;
                mx = fabs(f32[k]) > mx ? fabs(f32[k]) : mx;
            }
            if (getenv("LOOM_TEST_VERBOSE")) printf("max logit error %g of max |logit| %g\n", e, mx);
            CHECK_MSG(mx > 0.1 && e <= 0.05 * mx, "max logit error %g against f32 weights (max |logit| %g)", e, mx);
        }
        free(got);
    }
    /* a corrupt scale in one block: the load fails naming the tensor */
    uint8_t *v = blocks[3];
    uint8_t keep0 = v[208 + 210 * 5], keep1 = v[209 + 210 * 5];
    v[208 + 210 * 5] = 0x00, v[209 + 210 * 5] = 0x7C;
    write_model(p0, blocks, 0);
    v[208 + 210 * 5] = keep0, v[209 + 210 * 5] = keep1;
    loom_model_params mp = loom_model_default_params();
    loom_model *m = NULL;
    CHECK(loom_model_load(p0, &mp, &m) == LOOM_ERR_FORMAT && m == NULL &&
          strstr(loom_last_error(), "blk.0.attn_v.weight") && strstr(loom_last_error(), "q6_K block 5"));
    /* the same in a tensor converted on two threads (2^17 elements), in the second
     * thread's half: the error still names the tensor's own block */
    uint8_t *gt = blocks[5], keep[2] = {gt[24 * 3000], gt[24 * 3000 + 1]};
    gt[24 * 3000] = 0x00, gt[24 * 3000 + 1] = 0xFC; /* q5_1 block 3000: d = -inf */
    write_model(p0, blocks, 0);
    gt[24 * 3000] = keep[0], gt[24 * 3000 + 1] = keep[1];
    mp.n_threads = 2;
    CHECK(loom_model_load(p0, &mp, &m) == LOOM_ERR_FORMAT && m == NULL &&
          strstr(loom_last_error(), "blk.0.ffn_gate.weight") && strstr(loom_last_error(), "q5_1 block 3000:"));
    free(conv), free(f32), free(conv_packed);
    for (int i = 0; i < N_WTS; i++) free(blocks[i]);
    unlink(p0), unlink(p1), unlink(p2);
    rmdir(dir);
}

int main(void) {
    RUN_TEST(test_golden);
    RUN_TEST(test_convert_bounds);
    RUN_TEST(test_errors);
    RUN_TEST(test_model);
    return TEST_SUMMARY();
}
