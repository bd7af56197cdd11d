/* llama2.c loader and the Llama graph against a naive forward pass written
 * here, independently of the op library (llama2.c's straight-line style). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/model.h"

static const char *shared_path(const char *rel, char *buf, size_t n) {
    const char *dir = getenv("LOOM_SHARED_DIR");
    snprintf(buf, n, "%s/%s", dir ? dir : "../shared", rel);
    return buf;
}

/* ---- naive reference forward, one token at a time, double accumulation ---- */
typedef struct naive {
    const loom_llama_config *c;
    const loom_llama_weights *w;
    float *kc, *vc;  /* [L][ctx][kv_dim] */
    int ctx;
    loom_dtype kv_dtype;  /* K and V rows rounded to it when stored (f32 = 0: kept) */
} naive;

static float nv_round(float x, loom_dtype t) {
    if (t == LOOM_BF16) return loom_bf16_to_f32(loom_f32_to_bf16(x));
    return t == LOOM_F16 ? loom_f16_to_f32(loom_f32_to_f16(x)) : x;
}

/* An i8 cache row as the engine stores it: scale max|x| / 127 (1 if all zero),
 * q = x / scale rounded half to even; returns the scale. */
static float nv_quant_row(const float *x, int n, int8_t *q) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    float sc = amax > 0.0f ? amax / 127.0f : 1.0f;
    for (int i = 0; i < n; i++) q[i] = (int8_t)lrintf(fminf(127.0f, fmaxf(-127.0f, x[i] / sc)));
    return sc;
}

/* Rounds a cache row of kv_dim values (heads of HD) to what a cache of type t holds. */
static void nv_round_row(float *x, int kvd, int hd, loom_dtype t) {
    if (t != LOOM_I8) {
        for (int i = 0; i < kvd; i++) x[i] = nv_round(x[i], t);
        return;
    }
    int8_t q[256];
    for (int h = 0; h < kvd / hd; h++) {
        float sc = nv_quant_row(x + h * hd, hd, q);
        for (int i = 0; i < hd; i++) x[h * hd + i] = (float)q[i] * sc;
    }
}

static void nv_matmul(float *y, const float *x, const loom_tensor *W, int n, int d) {
    const float *w = W->data;
    for (int i = 0; i < d; i++) {
        double s = 0;
        for (int j = 0; j < n; j++) s += (double)w[(size_t)i * n + j] * x[j];
        y[i] = (float)s;
    }
}

static void nv_rmsnorm(float *o, const float *x, const loom_tensor *g, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) o[i] = (float)(x[i] * r) * ((const float *)g->data)[i];
}

static void nv_forward(naive *m, int token, int pos, float *logits) {
    const loom_llama_config *c = m->c;
    int D = c->dim, HD = c->head_dim, KVD = c->n_kv_heads * HD, HID = c->hidden_dim;
    float *x = malloc(D * sizeof *x), *xb = malloc(D * sizeof *xb), *q = malloc(D * sizeof *q);
    float *att = malloc((size_t)(pos + 1) * sizeof *att), *o = malloc(D * sizeof *o);
    float *h1 = malloc(HID * sizeof *h1), *h3 = malloc(HID * sizeof *h3);
    memcpy(x, (const float *)m->w->tok_embd.data + (size_t)token * D, D * sizeof *x);
    for (int l = 0; l < c->n_layers; l++) {
        const loom_llama_layer *L = &m->w->layers[l];
        float *kc = m->kc + ((size_t)l * m->ctx + pos) * KVD, *vc = m->vc + ((size_t)l * m->ctx + pos) * KVD;
        nv_rmsnorm(xb, x, &L->attn_norm, D, c->rms_eps);
        nv_matmul(q, xb, &L->wq, D, D);
        nv_matmul(kc, xb, &L->wk, D, KVD);
        nv_matmul(vc, xb, &L->wv, D, KVD);
        for (int i = 0; i < D; i += 2) {  /* interleaved RoPE */
            int hi = i % HD;
            float freq = 1.0f / powf(10000.0f, hi / (float)HD), val = pos * freq;
            float fc = cosf(val), fs = sinf(val);
            for (int v = 0; v < (i < KVD ? 2 : 1); v++) {
                float *vec = v == 0 ? q : kc;
                float a = vec[i], b = vec[i + 1];
                vec[i] = a * fc - b * fs;
                vec[i + 1] = a * fs + b * fc;
            }
        }
        nv_round_row(kc, KVD, HD, m->kv_dtype);
        nv_round_row(vc, KVD, HD, m->kv_dtype);
        for (int h = 0; h < c->n_heads; h++) {
            int kvh = h / (c->n_heads / c->n_kv_heads);
            double mx = -INFINITY, sum = 0;
            for (int t = 0; t <= pos; t++) {
                const float *k = m->kc + ((size_t)l * m->ctx + t) * KVD + kvh * HD;
                double s = 0;
                for (int i = 0; i < HD; i++) s += (double)q[h * HD + i] * k[i];
                att[t] = (float)(s / sqrt((double)HD));
                if (att[t] > mx) mx = att[t];
            }
            for (int t = 0; t <= pos; t++) sum += exp(att[t] - mx);
            for (int i = 0; i < HD; i++) {
                double acc = 0;
                for (int t = 0; t <= pos; t++)
                    acc += exp(att[t] - mx) / sum * m->vc[((size_t)l * m->ctx + t) * KVD + kvh * HD + i];
                xb[h * HD + i] = (float)acc;
            }
        }
        nv_matmul(o, xb, &L->wo, D, D);
        for (int i = 0; i < D; i++) x[i] += o[i];
        nv_rmsnorm(xb, x, &L->ffn_norm, D, c->rms_eps);
        nv_matmul(h1, xb, &L->w1, D, HID);
        nv_matmul(h3, xb, &L->w3, D, HID);
        for (int i = 0; i < HID; i++) h1[i] = h1[i] / (1.0f + expf(-h1[i])) * h3[i];
        nv_matmul(o, h1, &L->w2, HID, D);
        for (int i = 0; i < D; i++) x[i] += o[i];
    }
    nv_rmsnorm(xb, x, &m->w->out_norm, D, c->rms_eps);
    nv_matmul(logits, xb, &m->w->output, D, c->vocab_size);
    free(x); free(xb); free(q); free(att); free(o); free(h1); free(h3);
}

static void test_formats_agree(const char *legacy, const char *v1) {
    loom_model *a, *b;
    CHECK(loom_model_load(legacy, NULL, &a) == LOOM_OK);
    CHECK(loom_model_load(v1, NULL, &b) == LOOM_OK);
    if (!a || !b) return;
    CHECK(memcmp(&a->cfg, &b->cfg, sizeof a->cfg) == 0);
    CHECK(a->cfg.dim == 64 && a->cfg.hidden_dim == 172 && a->cfg.n_layers == 5);
    CHECK(a->cfg.n_heads == 8 && a->cfg.n_kv_heads == 4 && a->cfg.vocab_size == 512);
    CHECK(a->cfg.seq_len == 512 && a->cfg.shared_classifier == 1);
    CHECK(memcmp(a->w.tok_embd.data, b->w.tok_embd.data, loom_tensor_nbytes(&a->w.tok_embd)) == 0);
    CHECK(memcmp(a->w.out_norm.data, b->w.out_norm.data, loom_tensor_nbytes(&a->w.out_norm)) == 0);
    for (int l = 0; l < a->cfg.n_layers; l++)
        for (int k = 0; k < LOOM_LLAMA_LAYER_TENSORS; k++) { /* every tensor a Llama layer has */
            const loom_llama_layer_tensor *lt = &loom_llama_layer_tensors[k];
            if (!loom_llama_layer_has(&a->cfg, lt)) continue;
            const loom_tensor *ta = loom_llama_layer_field(&a->w.layers[l], lt);
            const loom_tensor *tb = loom_llama_layer_field(&b->w.layers[l], lt);
            CHECK(memcmp(ta->data, tb->data, loom_tensor_nbytes(ta)) == 0);
        }
    loom_model_free(a);
    loom_model_free(b);
}

/* Which loader a path goes to: by name for Hugging Face (folder, file, shard
 * index), by magic for GGUF, else llama2.c. */
static void test_detect_format(const char *llama2c) {
    char gguf[1024];
    shared_path("vocab/ggml-vocab-gpt-2.gguf", gguf, sizeof gguf);
    CHECK(loom_model_detect_format(llama2c) == LOOM_MODEL_LLAMA2C);
    CHECK(loom_model_detect_format(gguf) == LOOM_MODEL_GGUF);
    CHECK(loom_model_detect_format("/tmp") == LOOM_MODEL_SAFETENSORS);
    CHECK(loom_model_detect_format("no/such/model.safetensors") == LOOM_MODEL_SAFETENSORS);
    CHECK(loom_model_detect_format("no/such/model.safetensors.index.json") == LOOM_MODEL_SAFETENSORS);
    CHECK(loom_model_detect_format("no/such/file.bin") == LOOM_MODEL_LLAMA2C);
}

/* n_ctx beyond the model's maximum: an error, or the maximum with n_ctx_clamp. */
static void test_ctx_clamp(const char *path) {
    loom_model_params p = loom_model_default_params();
    p.n_ctx = 1 << 20;
    loom_model *m = NULL;
    CHECK(loom_model_load(path, &p, &m) == LOOM_ERR_INVALID_ARG && m == NULL);
    p.n_ctx_clamp = 1;
    CHECK(loom_model_load(path, &p, &m) == LOOM_OK);
    if (!m) return;
    loom_model_info i = loom_model_get_info(m);
    CHECK(i.n_ctx == i.max_seq_len && i.max_seq_len < (1 << 20));
    loom_model_free(m);
    p.n_ctx = 7;
    CHECK(loom_model_load(path, &p, &m) == LOOM_OK && m && loom_model_get_info(m).n_ctx == 7);
    loom_model_free(m);
}

static void test_forward_vs_naive(const char *path, int threads) {
    loom_model_params p = loom_model_default_params();
    p.n_threads = threads;
    p.n_ctx = 64;
    loom_model *m;
    CHECK(loom_model_load(path, &p, &m) == LOOM_OK);
    if (!m) return;
    const int V = m->cfg.vocab_size, KVD = m->cfg.n_kv_heads * m->cfg.head_dim, N = 11;
    naive nv = {&m->cfg, &m->w, calloc((size_t)m->cfg.n_layers * 64 * KVD, sizeof(float)),
                calloc((size_t)m->cfg.n_layers * 64 * KVD, sizeof(float)), 64, LOOM_F32};
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = i == 0 ? 1 : (int32_t)(37 * i + 11) % V;
    float *ref = malloc(V * sizeof *ref), *got = malloc(V * sizeof *got), *inc = malloc(V * sizeof *inc);
    for (int i = 0; i < N; i++) nv_forward(&nv, toks[i], i, ref);
    /* prefill of N tokens in one graph */
    CHECK(loom_model_forward(m, toks, N, 0, got) == LOOM_OK);
    double maxerr = 0;
    for (int i = 0; i < V; i++) {
        CHECK_CLOSE(got[i], ref[i], 1.0 / 2048);
        double e = fabs(got[i] - ref[i]);
        if (e > maxerr) maxerr = e;
    }
    fprintf(stderr, "  prefill %d tokens, %d threads: max |logit - naive| = %.3g\n", N, threads, maxerr);
    /* the same tokens one by one through the KV cache */
    for (int i = 0; i < N; i++) CHECK(loom_model_forward(m, &toks[i], 1, i, inc) == LOOM_OK);
    for (int i = 0; i < V; i++) CHECK_CLOSE(inc[i], ref[i], 1.0 / 2048);
    /* bad calls */
    int32_t bad = V;
    CHECK(loom_model_forward(m, &bad, 1, 0, got) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "outside the vocabulary") != NULL);
    CHECK(loom_model_forward(m, toks, 1, 64, got) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_model_forward(m, toks, 0, 0, got) == LOOM_ERR_INVALID_ARG);
    free(ref); free(got); free(inc); free(nv.kc); free(nv.vc);
    loom_model_free(m);
}

/* Logits of a decode step after a 5-token prompt, bit-identical on 1-3
 * threads (preset NULL: the default rules), and, with ref (the two-phase ffn,
 * preset two_phase_ffn), within rounding of it: the ffn in one pass, its
 * partials summed by the last thread to arrive. */
static void test_threads_bit_identical(const char *path, const char *preset, const float *ref, float *keep) {
    float *out[3];
    for (int t = 1; t <= 3; t++) {
        loom_model_params p = loom_model_default_params();
        p.n_threads = t;
        p.fusion_preset = preset;
        loom_model *m;
        CHECK_MSG(loom_model_load(path, &p, &m) == LOOM_OK, "%s", loom_last_error());
        out[t - 1] = malloc(512 * sizeof(float));
        int32_t toks[5] = {1, 400, 300, 290, 260};
        CHECK(loom_model_forward(m, toks, 5, 0, out[t - 1]) == LOOM_OK);
        CHECK(loom_model_forward(m, toks, 1, 5, out[t - 1]) == LOOM_OK);
        loom_model_free(m);
    }
    CHECK(memcmp(out[0], out[1], 512 * sizeof(float)) == 0);
    CHECK(memcmp(out[0], out[2], 512 * sizeof(float)) == 0);
    if (ref) {
        double err = 0;
        for (int i = 0; i < 512; i++) err = fmax(err, fabs(out[0][i] - ref[i]) / (1.0 + fabs(ref[i])));
        CHECK_MSG(err < 1e-5, "preset %s: logits %.3g from the two-phase ffn's", preset ? preset : "(none)", err);
        fprintf(stderr, "  preset %s: max relative logit difference from the two-phase ffn %.3g\n", preset ? preset : "(none)", err);
    }
    if (keep) memcpy(keep, out[0], 512 * sizeof(float));
    for (int t = 0; t < 3; t++) free(out[t]);
}

/* f16, bf16 and i8 KV caches (loom_model_params.kv_dtype), step_by_step and
 * fused, 1 and 2 threads: half (i8: a quarter, plus a scale per row) the cache
 * bytes; layer 0's K and V (which no cache read feeds) hold exactly the f32
 * cache's values rounded (i8: quantized per head row, with its scale); logits
 * of a prefill and of the same tokens decoded one by one within the dtype's
 * tolerance (bf16: for long reductions) of the naive forward pass that rounds
 * its cache the same way; any other type is an error. */
static void test_kv_dtypes(const char *path) {
    const int N = 11, CTX = 64;
    loom_model_params p = loom_model_default_params();
    p.n_ctx = CTX;
    loom_model *m32;
    CHECK(loom_model_load(path, &p, &m32) == LOOM_OK);
    if (!m32) return;
    const int V = m32->cfg.vocab_size, KVD = m32->cfg.n_kv_heads * m32->cfg.head_dim;
    naive nv = {&m32->cfg, &m32->w, calloc((size_t)m32->cfg.n_layers * CTX * KVD, sizeof(float)),
                calloc((size_t)m32->cfg.n_layers * CTX * KVD, sizeof(float)), CTX, LOOM_F32};
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = i == 0 ? 1 : (int32_t)(53 * i + 7) % V;
    float *ref = malloc(V * sizeof *ref), *got = malloc(V * sizeof *got);
    CHECK(loom_model_forward(m32, toks, N, 0, got) == LOOM_OK);
    const loom_dtype types[3] = {LOOM_F16, LOOM_BF16, LOOM_I8};
    const int HD = m32->cfg.head_dim;
    for (int ti = 0; ti < 3; ti++) {
        nv.kv_dtype = types[ti];
        for (int i = 0; i < N; i++) nv_forward(&nv, toks[i], i, ref);
        for (int mode = 0; mode < 2; mode++)
            for (int threads = 1; threads <= 2; threads++) {
                p.kv_dtype = types[ti];
                p.mode = mode ? LOOM_MODE_FUSED : LOOM_MODE_STEP_BY_STEP;
                p.n_threads = threads;
                loom_model *m;
                CHECK_MSG(loom_model_load(path, &p, &m) == LOOM_OK, "%s", loom_last_error());
                if (!m) continue;
                int q8 = types[ti] == LOOM_I8;
                CHECK(m->cache_bytes * (q8 ? 4 : 2) == m32->cache_bytes);
                CHECK(m->scale_bytes == (q8 ? m32->cache_bytes / (size_t)HD : 0));
                /* f16: f16's tolerance. bf16: where a kernel reads a bf16 V with vdpbf16ps it rounds P
                 * to bf16 too (2^-9 per probability; the prefill kernel here, the decode kernel at
                 * head dims 64..256), which five layers compound: 1.2e-2 measured, so bf16's
                 * tolerance for long reductions, 2^-6 */
                /* i8: both quantize the same way (measured 3.4e-6), but the naive pass's own K and V
                 * (f64 sums) may round to the other integer where the engine's f32 ones sit near a
                 * half (1/127 of the row's largest element): f16's 2^-8 */
                double tol = types[ti] == LOOM_BF16 ? 1.0 / 64 : 1.0 / 256, worst = 0;
                const uint16_t *k16 = m->k_cache, *v16 = m->v_cache;
                const float *k32 = m32->k_cache, *v32 = m32->v_cache;
                int exact = 1;
                for (int pass = 0; pass < 2; pass++) {  /* prefill, then one token at a time */
                    if (pass == 0) CHECK(loom_model_forward(m, toks, N, 0, got) == LOOM_OK);
                    else
                        for (int i = 0; i < N; i++) CHECK(loom_model_forward(m, &toks[i], 1, i, got) == LOOM_OK);
                    for (int i = 0; i < V; i++) {
                        double e = fabs(got[i] - ref[i]) / (fabs(ref[i]) > 1 ? fabs(ref[i]) : 1);
                        worst = e > worst ? e : worst;
                    }
                    if (pass) continue;
                    /* after the prefill, which m32 ran too (one token at a time computes K and V
                     * with other sums) */
                    for (int r = 0; q8 && r < N * KVD / HD; r++) { /* one (position, kv head) row */
                        int8_t qk[256], qv[256];
                        float sk = nv_quant_row(k32 + r * HD, HD, qk), sv = nv_quant_row(v32 + r * HD, HD, qv);
                        exact &= !memcmp(qk, (const int8_t *)m->k_cache + r * HD, (size_t)HD) &&
                                 !memcmp(qv, (const int8_t *)m->v_cache + r * HD, (size_t)HD) &&
                                 sk == m->k_scale[r] && sv == m->v_scale[r];
                    }
                    for (int i = 0; !q8 && i < N * KVD; i++) {
                        uint16_t ek = types[ti] == LOOM_BF16 ? loom_f32_to_bf16(k32[i]) : loom_f32_to_f16(k32[i]);
                        uint16_t ev = types[ti] == LOOM_BF16 ? loom_f32_to_bf16(v32[i]) : loom_f32_to_f16(v32[i]);
                        exact &= k16[i] == ek && v16[i] == ev;
                    }
                }
                CHECK_MSG(worst <= tol, "cache %s, %s, %d threads: logits off by %.3g relative (tolerance %.3g)",
                          loom_dtype_name(types[ti]), loom_mode_name(p.mode), threads, worst, tol);
                CHECK_MSG(exact, "cache %s, %s: layer 0 cache rows are not the f32 rows rounded",
                          loom_dtype_name(types[ti]), loom_mode_name(p.mode));
                fprintf(stderr, "  cache %s, %s, %d threads: max relative logit error %.3g\n",
                        loom_dtype_name(types[ti]), loom_mode_name(p.mode), threads, worst);
                loom_model_free(m);
            }
    }
    loom_model *bad = (loom_model *)1;
    p.kv_dtype = LOOM_Q8_0;
    CHECK(loom_model_load(path, &p, &bad) == LOOM_ERR_INVALID_ARG && bad == NULL);
    CHECK(strstr(loom_last_error(), "KV cache dtype q8_0") != NULL);
    free(ref), free(got), free(nv.kc), free(nv.vc);
    loom_model_free(m32);
}

static void test_load_errors(void) {
    loom_model *m = (loom_model *)1;
    CHECK(loom_model_load("/nonexistent/model.bin", NULL, &m) == LOOM_ERR_IO);
    CHECK(m == NULL);
    CHECK(strstr(loom_last_error(), "/nonexistent/model.bin") != NULL);
    loom_model_params p = loom_model_default_params();
    p.n_threads = 0;
    CHECK(loom_model_load("/nonexistent/model.bin", &p, &m) == LOOM_ERR_INVALID_ARG);
}

int main(void) {
    char legacy[1024], v1[1024];
    shared_path("models/stories260K/stories260K.bin", legacy, sizeof legacy);
    shared_path("models/stories260K/stories260K.v1.bin", v1, sizeof v1);
    RUN_TEST(test_load_errors);
    CHECK_NEED_FILE(legacy, "stories260K under LOOM_SHARED_DIR");
    CHECK_NEED_FILE(v1, "stories260K under LOOM_SHARED_DIR");
    test_formats_agree(legacy, v1);
    test_ctx_clamp(legacy);
    test_detect_format(legacy);
    test_forward_vs_naive(legacy, 1);
    test_forward_vs_naive(v1, 2);
    /* the ffn's two phases as the reference of its one pass (preset
     * one_pass_ffn, its 5-token prefill too; and the default decode step over
     * these f32 weights on up to 8 threads at the AVX2 level, where the
     * default run is the one pass; at AVX-512 it is the two phases) */
    float two[512];
    test_threads_bit_identical(legacy, "two_phase_ffn", NULL, two);
    test_threads_bit_identical(legacy, NULL, two, NULL);
    test_threads_bit_identical(legacy, "one_pass_ffn", two, NULL);
    /* and the decode attention with its projection as one kernel (its 4 kv heads in groups) */
    test_threads_bit_identical(legacy, "one_kernel_attention", two, NULL);
    test_kv_dtypes(legacy);
    return TEST_SUMMARY();
}
