/* Llama models from GGUF: stories260K (llama2.c) written as GGUF by loom's
 * writer must load and give the llama2.c checkpoint's logits exactly (f32) or
 * within quantization error (f16, q8_0); malformed files (missing tensors or
 * keys, wrong shapes or types, unknown architecture, truncation) fail with
 * errors naming the problem. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/model.h"
#include "ops/quant.h"

static const char *shared_path(const char *rel, char *buf, size_t n) {
    const char *dir = getenv("LOOM_SHARED_DIR");
    snprintf(buf, n, "%s/%s", dir ? dir : "../shared", rel);
    return buf;
}

/* What to write: the weights of src, each matmul weight as wtype (f32 where
 * its rows do not split into blocks), with optional damage. */
typedef struct opts {
    uint32_t wtype;          /* ggml type of the matmul weights */
    const char *arch;        /* general.architecture */
    const char *drop_tensor; /* leave this tensor out */
    const char *drop_key;    /* leave this key out */
    const char *bad_shape;   /* write this tensor with its dims swapped / cut */
    const char *f16_tensor;  /* write this (norm) tensor as f16 */
    const char *rope_scaling;/* rope.scaling.type, factor 2 */
    int untied;              /* write output.weight explicitly */
    int window;              /* attention.sliding_window (-1: 0, llama.cpp's "none"; 0: absent) */
    int window_pattern;      /* write attention.sliding_window_pattern */
} opts;

typedef struct buf_list { void *p[512]; int n; } buf_list;

static void *keep(buf_list *b, void *p) {
    if (b->n < 512) b->p[b->n++] = p;
    return p;
}

static void add(loom_gguf_writer *w, buf_list *bl, const opts *o, const char *name,
                const loom_tensor *t, int is_weight) {
    if (o->drop_tensor && strcmp(name, o->drop_tensor) == 0) return;
    int64_t shape[2] = {t->shape[0], t->ndim > 1 ? t->shape[1] : 1};
    int nd = t->ndim;
    int64_t n = shape[0] * shape[1];
    if (o->bad_shape && strcmp(name, o->bad_shape) == 0) shape[0] -= 1, n -= shape[1];
    uint32_t type = LOOM_GGML_F32;
    if (is_weight && o->wtype != LOOM_GGML_F32) {
        loom_dtype dt;
        CHECK(loom_ggml_type_to_dtype(o->wtype, &dt) == LOOM_OK);
        if (!loom_dtype_is_quantized(dt) || shape[nd - 1] % 32 == 0) type = o->wtype;
    }
    if (o->f16_tensor && strcmp(name, o->f16_tensor) == 0) type = LOOM_GGML_F16;
    const float *src = t->data;
    if (type == LOOM_GGML_F32) {
        CHECK(loom_gguf_writer_add_tensor(w, name, type, nd, shape, src, (size_t)n * 4) == LOOM_OK);
        return;
    }
    loom_dtype dt;
    CHECK(loom_ggml_type_to_dtype(type, &dt) == LOOM_OK);
    int64_t cols = shape[nd - 1], rows = n / cols;
    size_t rb = loom_dtype_row_bytes(dt, cols);
    unsigned char *q = keep(bl, malloc(rb * (size_t)rows));
    for (int64_t r = 0; r < rows; r++) {
        if (dt == LOOM_F16 || dt == LOOM_BF16) {
            for (int64_t c = 0; c < cols; c++)
                ((uint16_t *)(q + r * rb))[c] = dt == LOOM_F16 ? loom_f32_to_f16(src[r * cols + c])
                                                               : loom_f32_to_bf16(src[r * cols + c]);
        } else {
            loom_quantize_row(dt, src + r * cols, q + r * rb, cols);
        }
    }
    CHECK(loom_gguf_writer_add_tensor(w, name, type, nd, shape, q, rb * (size_t)rows) == LOOM_OK);
}

/* "<arch>.<suffix>": the metadata keys take the architecture's name */
static const char *arch_key(const opts *o, const char *suffix) {
    static char k[96];
    snprintf(k, sizeof k, "%s.%s", o->arch ? o->arch : "llama", suffix);
    return k;
}

static void set_u32(loom_gguf_writer *w, const opts *o, const char *suffix, uint32_t v) {
    const char *key = arch_key(o, suffix);
    if (!o->drop_key || strcmp(o->drop_key, key) != 0) CHECK(loom_gguf_writer_set_u32(w, key, v) == LOOM_OK);
}

static void write_gguf(const char *path, const loom_llama_config *c, const loom_llama_weights *lw,
                       const opts *o) {
    loom_gguf_writer *w;
    buf_list bl = {.n = 0};
    CHECK(loom_gguf_writer_init(&w) == LOOM_OK);
    CHECK(loom_gguf_writer_set_str(w, "general.architecture", o->arch ? o->arch : "llama") == LOOM_OK);
    set_u32(w, o, "context_length", (uint32_t)c->seq_len);
    set_u32(w, o, "embedding_length", (uint32_t)c->dim);
    set_u32(w, o, "block_count", (uint32_t)c->n_layers);
    set_u32(w, o, "feed_forward_length", (uint32_t)c->hidden_dim);
    set_u32(w, o, "attention.head_count", (uint32_t)c->n_heads);
    set_u32(w, o, "attention.head_count_kv", (uint32_t)c->n_kv_heads);
    set_u32(w, o, "rope.dimension_count", (uint32_t)c->head_dim);
    CHECK(loom_gguf_writer_set_f32(w, arch_key(o, "rope.freq_base"), c->rope_theta) == LOOM_OK);
    if (!o->drop_key || strcmp(o->drop_key, arch_key(o, "attention.layer_norm_rms_epsilon")) != 0)
        CHECK(loom_gguf_writer_set_f32(w, arch_key(o, "attention.layer_norm_rms_epsilon"), c->rms_eps) == LOOM_OK);
    if (o->window) set_u32(w, o, "attention.sliding_window", o->window < 0 ? 0u : (uint32_t)o->window);
    if (o->window_pattern) set_u32(w, o, "attention.sliding_window_pattern", 1);
    if (o->rope_scaling) {
        CHECK(loom_gguf_writer_set_str(w, arch_key(o, "rope.scaling.type"), o->rope_scaling) == LOOM_OK);
        CHECK(loom_gguf_writer_set_f32(w, arch_key(o, "rope.scaling.factor"), 2.0f) == LOOM_OK);
    }
    add(w, &bl, o, "token_embd.weight", &lw->tok_embd, 1);
    char nm[64];
    for (int l = 0; l < c->n_layers; l++) {
        const loom_llama_layer *L = &lw->layers[l];
        const struct { const char *n; const loom_tensor *t; int wt; } ts[] = {
            {"attn_norm", &L->attn_norm, 0}, {"attn_q", &L->wq, 1}, {"attn_k", &L->wk, 1},
            {"attn_v", &L->wv, 1}, {"attn_output", &L->wo, 1}, {"ffn_norm", &L->ffn_norm, 0},
            {"ffn_gate", &L->w1, 1}, {"ffn_up", &L->w3, 1}, {"ffn_down", &L->w2, 1},
        };
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, ts[i].n);
            add(w, &bl, o, nm, ts[i].t, ts[i].wt);
        }
    }
    add(w, &bl, o, "output_norm.weight", &lw->out_norm, 0);
    if (o->untied) add(w, &bl, o, "output.weight", &lw->output, 1);
    CHECK(loom_gguf_writer_write_file(w, path) == LOOM_OK);
    loom_gguf_writer_free(w);
    for (int i = 0; i < bl.n; i++) free(bl.p[i]);
}

static const int32_t prompt[] = {1, 403, 407, 261, 378, 500, 281, 300, 17, 64, 283, 310};
#define NP ((int)(sizeof prompt / sizeof prompt[0]))

/* Logits of every prompt position, then of one decode step. */
static float *run_model(const char *path, int threads, int *vocab, double kv_tol) {
    loom_model_params p = loom_model_default_params();
    p.n_threads = threads;
    p.n_ctx = 64;
    loom_model *m = NULL;
    loom_status s = loom_model_load(path, &p, &m);
    CHECK_MSG(s == LOOM_OK, "%s: %s", path, loom_last_error());
    if (s != LOOM_OK) return NULL;
    int V = loom_model_get_info(m).vocab_size;
    *vocab = V;
    float *lg = malloc((size_t)(NP + 1) * V * sizeof *lg);
    CHECK(loom_model_forward_all(m, prompt, NP, 0, lg) == LOOM_OK);
    int32_t next = 42;
    CHECK(loom_model_forward(m, &next, 1, NP, lg + (size_t)NP * V) == LOOM_OK);
    /* the KV cache carries across calls: prefill in two chunks, then the same
     * decode step, gives the logits of one prefill of all NP + 1 tokens */
    int32_t all[NP + 1];
    memcpy(all, prompt, sizeof prompt);
    all[NP] = next;
    float *one = malloc((size_t)(NP + 1) * V * sizeof *one), *last = malloc((size_t)V * sizeof *last);
    CHECK(loom_model_forward_all(m, all, NP + 1, 0, one) == LOOM_OK);
    CHECK(loom_model_forward(m, all, 5, 0, last) == LOOM_OK);
    CHECK(loom_model_forward(m, all + 5, NP - 5, 5, last) == LOOM_OK);
    CHECK(loom_model_forward(m, &next, 1, NP, last) == LOOM_OK);
    double e = 0;
    for (int i = 0; i < V; i++) {
        double d = fabs((double)last[i] - one[(size_t)NP * V + i]);
        e = d > e ? d : e;
    }
    /* the decode step runs the matrix-vector kernels, the prefill the GEMM
     * ones: equal up to rounding for f32/f16 weights; bf16 and q8_0 round
     * activations differently on the two paths */
    CHECK_MSG(e <= kv_tol, "%s: decode after chunked prefill differs from one prefill by %g", path, e);
    free(one);
    free(last);
    loom_model_free(m);
    return lg;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Max |a-b| and top-1 agreement over all rows. */
static double compare(const float *a, const float *b, int rows, int V, int *top1_same) {
    double e = 0;
    *top1_same = 1;
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < V; i++) {
            double d = fabs((double)a[(size_t)r * V + i] - b[(size_t)r * V + i]);
            if (!(d <= e)) e = d;
        }
        if (argmax(a + (size_t)r * V, V) != argmax(b + (size_t)r * V, V)) *top1_same = 0;
    }
    return e;
}

static loom_status load_status(const char *path, char *msg, size_t n) {
    loom_model_params p = loom_model_default_params();
    p.n_ctx = 32;
    loom_model *m = NULL;
    loom_status s = loom_model_load(path, &p, &m);
    snprintf(msg, n, "%s", loom_last_error());
    loom_model_free(m);
    return s;
}

int main(void) {
    char src[1024];
    shared_path("models/stories260K/stories260K.bin", src, sizeof src);
    CHECK_NEED_FILE(src, "set LOOM_SHARED_DIR to the shared folder");
    loom_mapped_file mf;
    loom_llama_config c;
    loom_llama_weights lw;
    CHECK(loom_llama2c_load(src, &mf, &c, &lw) == LOOM_OK);
    char dir[] = "/tmp/loom_test_gguf_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256], msg[1024];
    int V = 0, V2 = 0;
    float *ref = run_model(src, 1, &V, 1e-4);

    /* f32: the same weights, the same kernels: identical logits, tied and untied */
    for (int untied = 0; untied <= 1; untied++) {
        snprintf(path, sizeof path, "%s/f32_%d.gguf", dir, untied);
        write_gguf(path, &c, &lw, &(opts){.wtype = LOOM_GGML_F32, .untied = untied});
        for (int th = 1; th <= 2; th++) {
            float *got = run_model(path, th, &V2, 1e-4);
            CHECK(V2 == V);
            if (got && ref) CHECK_MSG(memcmp(got, ref, (size_t)(NP + 1) * V * sizeof *got) == 0,
                                      "f32 GGUF (untied %d, %d threads) differs from llama2.c", untied, th);
            free(got);
        }
    }
    /* f16, q8_0, bf16 weights: close to f32, bounds relative to the largest
     * |logit| (18.9 here): f16 weights carry 2^-11 relative rounding, bf16
     * 2^-8, q8_0 ~2^-8 per block and its matmul quantizes activations to q8
     * as well; errors compound over 5 layers. Observed: f16 0.6e-3, bf16
     * 5.5e-3, q8_0 1.9e-2 of the max; the bounds leave ~2.5-8x margin. */
    const struct { uint32_t t; double tol, kv_tol; } qs[] = {
        {LOOM_GGML_F16, 0.005, 1e-3}, {LOOM_GGML_Q8_0, 0.05, 0.3}, {LOOM_GGML_BF16, 0.03, 0.1}};
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
        snprintf(path, sizeof path, "%s/q%u.gguf", dir, qs[i].t);
        write_gguf(path, &c, &lw, &(opts){.wtype = qs[i].t});
        float *got = run_model(path, 1, &V2, qs[i].kv_tol);
        if (got && ref) {
            int same;
            double e = compare(got, ref, NP + 1, V, &same);
            double mx = 0;
            for (size_t k = 0; k < (size_t)(NP + 1) * V; k++) mx = fabs(ref[k]) > mx ? fabs(ref[k]) : mx;
            CHECK_MSG(e <= qs[i].tol * mx && e > 0, "type %s: max logit error %g (bound %g x max |logit| %g)",
                      loom_ggml_type_name(qs[i].t), e, qs[i].tol, mx);
            if (getenv("LOOM_TEST_VERBOSE"))
                printf("%s: max logit error %g, max |logit| %g\n", loom_ggml_type_name(qs[i].t), e, mx);
            CHECK_MSG(same, "type %s: top-1 token differs", loom_ggml_type_name(qs[i].t));
        }
        free(got);
    }

    /* linear RoPE scaling changes the output; "yarn" is refused */
    snprintf(path, sizeof path, "%s/linear.gguf", dir);
    write_gguf(path, &c, &lw, &(opts){.wtype = LOOM_GGML_F32, .rope_scaling = "linear"});
    {
        loom_model *m = NULL;
        loom_model_params p = loom_model_default_params();
        CHECK(loom_model_load(path, &p, &m) == LOOM_OK);
        if (m) CHECK(m->cfg.rope_freq_scale == 0.5f && m->format == LOOM_MODEL_GGUF);
        loom_model_free(m);
    }
    /* a sliding window (Mistral as loom convert writes it), and 0 as none */
    const int windows[2][2] = {{5, 5}, {-1, 0}};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/window.gguf", dir);
        write_gguf(path, &c, &lw, &(opts){.wtype = LOOM_GGML_F32, .window = windows[i][0]});
        loom_model *m = NULL;
        loom_model_params p = loom_model_default_params();
        CHECK(loom_model_load(path, &p, &m) == LOOM_OK);
        if (m) CHECK_MSG(m->cfg.sliding_window == windows[i][1], "window %d", m->cfg.sliding_window);
        loom_model_free(m);
    }

    /* bad files: status and a message naming the problem */
    const struct { opts o; loom_status s; const char *needle; } bad[] = {
        {{.drop_tensor = "blk.3.ffn_up.weight"}, LOOM_ERR_FORMAT, "blk.3.ffn_up.weight"},
        {{.drop_tensor = "token_embd.weight"}, LOOM_ERR_FORMAT, "token_embd.weight"},
        {{.drop_tensor = "output_norm.weight"}, LOOM_ERR_FORMAT, "output_norm.weight"},
        {{.bad_shape = "blk.2.attn_k.weight"}, LOOM_ERR_SHAPE, "blk.2.attn_k.weight"},
        {{.bad_shape = "blk.0.attn_norm.weight"}, LOOM_ERR_SHAPE, "blk.0.attn_norm.weight"},
        {{.f16_tensor = "blk.1.ffn_norm.weight"}, LOOM_ERR_DTYPE, "blk.1.ffn_norm.weight"},
        {{.arch = "gpt2"}, LOOM_ERR_UNSUPPORTED, "architecture 'gpt2'"},
        {{.drop_key = "llama.block_count"}, LOOM_ERR_FORMAT, "llama.block_count"},
        {{.drop_key = "llama.attention.layer_norm_rms_epsilon"}, LOOM_ERR_FORMAT, "layer_norm_rms_epsilon"},
        {{.rope_scaling = "yarn"}, LOOM_ERR_UNSUPPORTED, "yarn"},
        {{.window = 4, .window_pattern = 1}, LOOM_ERR_UNSUPPORTED, "llama.attention.sliding_window_pattern"},
        /* phi3: the merged Q/K/V matrix, not three */
        {{.arch = "phi3"}, LOOM_ERR_FORMAT, "missing tensor 'blk.0.attn_qkv.weight'"},
        /* the Qwen architectures: their keys' prefix, and the tensors they add */
        {{.arch = "qwen2"}, LOOM_ERR_FORMAT, "missing tensor 'blk.0.attn_q.bias'"},
        {{.arch = "qwen3"}, LOOM_ERR_FORMAT, "missing tensor 'blk.0.attn_q_norm.weight'"},
        {{.arch = "qwen2", .drop_key = "qwen2.block_count"}, LOOM_ERR_FORMAT, "qwen2.block_count"},
        {{.arch = "qwen3", .rope_scaling = "yarn"}, LOOM_ERR_UNSUPPORTED, "qwen3.rope.scaling.type 'yarn'"},
        /* Gemma: the norms after the attention and the FFN; Gemma 3's Q/K norms */
        {{.arch = "gemma2"}, LOOM_ERR_FORMAT, "missing tensor 'blk.0.post_attention_norm.weight'"},
        {{.arch = "gemma3"}, LOOM_ERR_FORMAT, "missing tensor 'blk.0.attn_q_norm.weight'"},
        {{.arch = "gemma2", .drop_key = "gemma2.attention.head_count"}, LOOM_ERR_FORMAT, "gemma2.attention.head_count"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/bad%zu.gguf", dir, i);
        write_gguf(path, &c, &lw, &bad[i].o);
        loom_status s = load_status(path, msg, sizeof msg);
        CHECK_MSG(s == bad[i].s && strstr(msg, bad[i].needle),
                  "case %zu: status %s, message '%s' (expected %s naming '%s')", i,
                  loom_status_str(s), msg, loom_status_str(bad[i].s), bad[i].needle);
    }
    /* truncated: every cut of the f32 file fails cleanly */
    snprintf(path, sizeof path, "%s/f32_0.gguf", dir);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (f) {
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        unsigned char *all = malloc((size_t)size);
        CHECK(fread(all, 1, (size_t)size, f) == (size_t)size);
        fclose(f);
        const long cuts[] = {3, 4, 24, 100, 1000, size / 2, size - 1};
        char cut[256];
        snprintf(cut, sizeof cut, "%s/cut.gguf", dir);
        for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
            FILE *o = fopen(cut, "wb");
            fwrite(all, 1, (size_t)cuts[i], o);
            fclose(o);
            loom_status s = load_status(cut, msg, sizeof msg);
            CHECK_MSG(s != LOOM_OK && *msg, "cut at %ld: %s '%s'", cuts[i], loom_status_str(s), msg);
            unlink(cut);
        }
        free(all);
    }
    /* a folder is a Hugging Face model: without config.json it is refused */
    CHECK(load_status(dir, msg, sizeof msg) != LOOM_OK && strstr(msg, "config.json"));

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    free(ref);
    free(lw.layers);
    loom_mapped_file_close(&mf);
    printf("test_llama_gguf: %d checks, %d failed\n", check_count_, check_failures_);
    return check_failures_ != 0;
}
