/* The BERT encoder on a tiny random model (written as a Hugging Face folder):
 * loom_bert_embed_tokens over a packed (TND) batch of different lengths against a
 * naive per-sequence implementation in double; loading errors. */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "llama_test_util.h"
#include "model/bert.h"

enum { D = 16, NH = 2, HD = 8, FF = 24, NL = 2, V = 40, P = 16, TV = 2 };

typedef struct { float *w; int64_t shape[2]; int nd; char name[96]; } param;
static param params[64];
static int n_params;
static uint32_t seed = 7;

static float rnd(void) {
    seed = seed * 1664525u + 1013904223u;
    return ((float)(seed >> 8) / 16777216.0f - 0.5f);
}

static float *mk(const char *name, int64_t a, int64_t b, float scale, float offset) {
    param *p = &params[n_params++];
    int64_t n = a * (b ? b : 1);
    p->w = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p->w[i] = offset + scale * rnd();
    p->shape[0] = a;
    p->shape[1] = b;
    p->nd = b ? 2 : 1;
    snprintf(p->name, sizeof p->name, "%s", name);
    return p->w;
}

typedef struct { float *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo, *g1, *b1, *wu, *bu, *wd, *bd, *g2, *b2; } layer;
static float *tok, *pos, *typ, *eg, *eb;
static layer L[NL];

static void make_model_files(const char *dir);

static void make_model(const char *dir) {
    tok = mk("embeddings.word_embeddings.weight", V, D, 1, 0);
    pos = mk("embeddings.position_embeddings.weight", P, D, 0.5f, 0);
    typ = mk("embeddings.token_type_embeddings.weight", TV, D, 0.5f, 0);
    eg = mk("embeddings.LayerNorm.weight", D, 0, 0.2f, 1);
    eb = mk("embeddings.LayerNorm.bias", D, 0, 0.2f, 0);
    for (int l = 0; l < NL; l++) {
        char n[96];
#define M(f, s, a, b, sc, off) (snprintf(n, sizeof n, "encoder.layer.%d.%s", l, s), L[l].f = mk(n, a, b, sc, off))
        M(wq, "attention.self.query.weight", D, D, 0.5f, 0); M(bq, "attention.self.query.bias", D, 0, 0.1f, 0);
        M(wk, "attention.self.key.weight", D, D, 0.5f, 0); M(bk, "attention.self.key.bias", D, 0, 0.1f, 0);
        M(wv, "attention.self.value.weight", D, D, 0.5f, 0); M(bv, "attention.self.value.bias", D, 0, 0.1f, 0);
        M(wo, "attention.output.dense.weight", D, D, 0.5f, 0); M(bo, "attention.output.dense.bias", D, 0, 0.1f, 0);
        M(g1, "attention.output.LayerNorm.weight", D, 0, 0.2f, 1); M(b1, "attention.output.LayerNorm.bias", D, 0, 0.2f, 0);
        M(wu, "intermediate.dense.weight", FF, D, 0.5f, 0); M(bu, "intermediate.dense.bias", FF, 0, 0.1f, 0);
        M(wd, "output.dense.weight", D, FF, 0.5f, 0); M(bd, "output.dense.bias", D, 0, 0.1f, 0);
        M(g2, "output.LayerNorm.weight", D, 0, 0.2f, 1); M(b2, "output.LayerNorm.bias", D, 0, 0.2f, 0);
#undef M
    }
    make_model_files(dir);
}

/* Writes the folder from the parameters (again after a change). */
static void make_model_files(const char *dir) {
    st_out *o = calloc(1, sizeof *o);
    o->hn = (size_t)snprintf(o->hdr, sizeof o->hdr, "{");
    for (int i = 0; i < n_params; i++)
        st_add(o, params[i].name, "F32", params[i].nd, params[i].shape, params[i].w,
               sizeof(float) * (size_t)(params[i].shape[0] * (params[i].nd == 2 ? params[i].shape[1] : 1)));
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_write(o, path);
    free(o->data);
    free(o);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"architectures\":[\"BertModel\"],\"model_type\":\"bert\",\"hidden_size\":%d,\"num_attention_heads\":%d,"
               "\"intermediate_size\":%d,\"num_hidden_layers\":%d,\"vocab_size\":%d,\"max_position_embeddings\":%d,"
               "\"type_vocab_size\":%d,\"hidden_act\":\"gelu\",\"layer_norm_eps\":1e-12}", D, NH, FF, NL, V, P, TV);
    fclose(f);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    f = fopen(path, "w");
    fprintf(f, "{\"normalizer\":{\"type\":\"BertNormalizer\",\"lowercase\":true},\"pre_tokenizer\":{\"type\":"
               "\"BertPreTokenizer\"},\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"[PAD]\":0,\"[UNK]\":1,"
               "\"[CLS]\":2,\"[SEP]\":3");
    for (int i = 4; i < V; i++) fprintf(f, ",\"w%d\":%d", i, i);
    fprintf(f, "}}}");
    fclose(f);
}

static void ln(double *x, const float *g, const float *b) {
    double m = 0, v = 0;
    for (int d = 0; d < D; d++) m += x[d];
    m /= D;
    for (int d = 0; d < D; d++) v += (x[d] - m) * (x[d] - m);
    v /= D;
    for (int d = 0; d < D; d++) x[d] = (x[d] - m) / sqrt(v + 1e-12) * g[d] + b[d];
}

static void linear(const double *x, const float *w, const float *b, int out, int in, double *y) {
    for (int o = 0; o < out; o++) {
        double s = b[o];
        for (int i = 0; i < in; i++) s += x[i] * w[o * in + i];
        y[o] = s;
    }
}

/* Naive embedding of one sequence (no padding anywhere). */
static void naive(const int32_t *ids, int n, double *out) {
    static double h[P][D], q[P][D], k[P][D], v[P][D], a[P][D], t[P][FF];
    for (int s = 0; s < n; s++) {
        for (int d = 0; d < D; d++) h[s][d] = (double)tok[ids[s] * D + d] + pos[s * D + d] + typ[d];
        ln(h[s], eg, eb);
    }
    for (int l = 0; l < NL; l++) {
        const layer *y = &L[l];
        for (int s = 0; s < n; s++) {
            linear(h[s], y->wq, y->bq, D, D, q[s]);
            linear(h[s], y->wk, y->bk, D, D, k[s]);
            linear(h[s], y->wv, y->bv, D, D, v[s]);
        }
        for (int hh = 0; hh < NH; hh++)
            for (int i = 0; i < n; i++) {
                double sc[P], mx = -1e300, sum = 0;
                for (int j = 0; j < n; j++) {
                    sc[j] = 0;
                    for (int d = 0; d < HD; d++) sc[j] += q[i][hh * HD + d] * k[j][hh * HD + d];
                    sc[j] /= sqrt((double)HD);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = 0; j < n; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int d = 0; d < HD; d++) {
                    double acc = 0;
                    for (int j = 0; j < n; j++) acc += sc[j] / sum * v[j][hh * HD + d];
                    a[i][hh * HD + d] = acc;
                }
            }
        for (int s = 0; s < n; s++) {
            double o[D];
            linear(a[s], y->wo, y->bo, D, D, o);
            for (int d = 0; d < D; d++) h[s][d] += o[d];
            ln(h[s], y->g1, y->b1);
            linear(h[s], y->wu, y->bu, FF, D, t[s]);
            for (int f = 0; f < FF; f++) t[s][f] = 0.5 * t[s][f] * (1 + erf(t[s][f] / sqrt(2.0)));
            linear(t[s], y->wd, y->bd, D, FF, o);
            for (int d = 0; d < D; d++) h[s][d] += o[d];
            ln(h[s], y->g2, y->b2);
        }
    }
    double nn = 0;
    for (int d = 0; d < D; d++) {
        out[d] = 0;
        for (int s = 0; s < n; s++) out[d] += h[s][d] / n;
        nn += out[d] * out[d];
    }
    for (int d = 0; d < D; d++) out[d] /= sqrt(nn);
}

static void test_tiny_bert(void) {
    char dir[] = "/tmp/loom_bert_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    make_model(dir);
    loom_bert *m = NULL;
    CHECK_MSG(loom_bert_load(dir, 2, &m) == LOOM_OK, "%s", loom_last_error());
    if (m) {
        int32_t s0[3] = {2, 5, 3}, s1[9] = {2, 7, 8, 9, 10, 11, 12, 13, 3}, s2[5] = {2, 39, 38, 4, 3}, s3[1] = {2};
        const int32_t *ids[4] = {s1, s0, s2, s3};
        int lens[4] = {9, 3, 5, 1};
        float out[4 * D];
        CHECK_MSG(loom_bert_embed_tokens(m, ids, lens, 4, 1, out) == LOOM_OK, "%s", loom_last_error());
        double worst = 0;
        for (int i = 0; i < 4; i++) {
            double ref[D];
            naive(ids[i], lens[i], ref);
            for (int d = 0; d < D; d++) {
                double e = fabs(out[i * D + d] - ref[d]);
                if (e > worst) worst = e;
            }
        }
        fprintf(stderr, "  tiny bert: max |loom - naive| = %.3g over 4 sequences (lengths 9, 3, 5, 1)\n", worst);
        CHECK(worst < 1e-5);
        /* the same sequence alone: bit-identical to its row of the padded batch */
        float alone[D];
        const int32_t *one[1] = {s0};
        int l1[1] = {3};
        CHECK(loom_bert_embed_tokens(m, one, l1, 1, 1, alone) == LOOM_OK);
        double diff = 0;
        for (int d = 0; d < D; d++) diff = fmax(diff, fabs(alone[d] - out[D + d]));
        CHECK_MSG(diff < 1e-6, "alone vs batch %g", diff);
        /* text path: "w5" tokenizes to [CLS] w5 [SEP] = s0 */
        const char *texts[1] = {"W5"};
        CHECK(loom_bert_embed(m, texts, 1, 1, alone) == LOOM_OK);
        diff = 0;
        for (int d = 0; d < D; d++) diff = fmax(diff, fabs(alone[d] - out[D + d]));
        CHECK_MSG(diff < 1e-6, "text vs ids %g", diff);
        /* bad ids / lengths */
        int32_t bad[2] = {2, V};
        const int32_t *bi[1] = {bad};
        int bl[1] = {2};
        CHECK(loom_bert_embed_tokens(m, bi, bl, 1, 1, out) == LOOM_ERR_INVALID_ARG);
        CHECK(strstr(loom_last_error(), "token 1") != NULL);
        bl[0] = 0;
        CHECK(loom_bert_embed_tokens(m, bi, bl, 1, 1, out) == LOOM_ERR_INVALID_ARG);
        bl[0] = P + 1;
        CHECK(loom_bert_embed_tokens(m, bi, bl, 1, 1, out) == LOOM_ERR_INVALID_ARG);
        loom_bert_free(m);
    }
    /* a NaN weight: the inputs that meet it are errors by number, not NaN vectors */
    tok[7 * D + 3] = NAN;  /* token 7's embedding */
    make_model_files(dir);
    m = NULL;
    CHECK_MSG(loom_bert_load(dir, 1, &m) == LOOM_OK, "%s", loom_last_error());
    if (m) {
        int32_t a[3] = {2, 5, 3}, b[4] = {2, 6, 7, 3};
        const int32_t *ids[3] = {a, a, b};
        int lens[3] = {3, 3, 4};
        float out[3 * D];
        CHECK(loom_bert_embed_tokens(m, ids, lens, 2, 0, out) == LOOM_OK);  /* without token 7 */
        CHECK(loom_bert_embed_tokens(m, ids, lens, 3, 0, out) == LOOM_ERR_FORMAT);
        CHECK_MSG(strstr(loom_last_error(), "embedding of input 3 is NaN") != NULL, "%s", loom_last_error());
        loom_bert_free(m);
    }
    tok[7 * D + 3] = 0.25f;
    /* missing tensor: named */
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    n_params--;  /* drops the last layer's output.LayerNorm.bias */
    st_out *o = calloc(1, sizeof *o);
    o->hn = (size_t)snprintf(o->hdr, sizeof o->hdr, "{");
    for (int i = 0; i < n_params; i++)
        st_add(o, params[i].name, "F32", params[i].nd, params[i].shape, params[i].w,
               sizeof(float) * (size_t)(params[i].shape[0] * (params[i].nd == 2 ? params[i].shape[1] : 1)));
    st_write(o, path);
    free(o->data);
    free(o);
    n_params++;
    CHECK(loom_bert_load(dir, 1, &m) == LOOM_ERR_FORMAT && m == NULL);
    CHECK_MSG(strstr(loom_last_error(), "encoder.layer.1.output.LayerNorm.bias") != NULL, "%s", loom_last_error());
    CHECK(loom_bert_load(dir, 0, &m) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_bert_load("/nonexistent", 1, &m) == LOOM_ERR_IO);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    rmdir(dir);
    for (int i = 0; i < n_params; i++) free(params[i].w);
}

int main(void) {
    RUN_TEST(test_tiny_bert);
    return TEST_SUMMARY();
}
