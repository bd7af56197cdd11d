/* loom_convert round trips: llama2.c and Hugging Face Llama folders to GGUF
 * (loaded back with the GGUF loader: same logits as the source), GGUF
 * requantization (q8_0 / q4_0 / q4_1 within tolerance, metadata and
 * vocabulary kept), and bad input. */
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "check.h"
#include "llama_test_util.h"
#include "model/convert.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "ops/quant.h"

static char shared[4096], dir[64];

loom_status loom_convert_copy_kv(const loom_gguf *g, int64_t i, loom_gguf_writer *w);  /* convert_meta.c */

/* src again with every norm stored as [1, 1, 1, n] (ggml's ne [n, 1, 1, 1]),
 * which loom loads as the vector it is. */
static void write_4d_norms(const char *src, const char *dst) {
    loom_gguf *g = NULL;
    loom_gguf_writer *w = NULL;
    CHECK(loom_gguf_open(src, &g) == LOOM_OK && loom_gguf_writer_init(&w) == LOOM_OK);
    if (!g || !w) return;
    for (int64_t i = 0; i < loom_gguf_n_kv(g); i++)
        if (strcmp(loom_gguf_kv_key(g, i), "general.alignment") != 0) CHECK(loom_convert_copy_kv(g, i, w) == LOOM_OK);
    for (int64_t i = 0; i < loom_gguf_n_tensors(g); i++) {
        loom_gguf_tensor_info ti;
        CHECK(loom_gguf_tensor_info_at(g, i, &ti) == LOOM_OK);
        int64_t shape[LOOM_MAX_DIMS];
        loom_gguf_tensor_shape(&ti, shape);
        int nd = (int)ti.n_dims;
        if (strstr(ti.name, "norm")) {
            int64_t n = loom_gguf_tensor_nelem(&ti);
            shape[0] = shape[1] = shape[2] = 1, shape[3] = n, nd = 4;
        }
        CHECK(loom_gguf_writer_add_tensor(w, ti.name, ti.ggml_type, nd, shape, ti.data, ti.nbytes) == LOOM_OK);
    }
    CHECK_MSG(loom_gguf_writer_write_file(w, dst) == LOOM_OK, "%s", loom_last_error());
    loom_gguf_writer_free(w);
    loom_gguf_close(g);
}
static const int32_t TOK[6] = {1, 403, 407, 261, 378, 290};

/* Max relative logit error of a GGUF model against ref, and top-1 agreements. */
static double compare(const char *gguf_path, const float *ref, int vocab, int *top_same) {
    loom_gguf *g = NULL;
    loom_llama_config c;
    loom_llama_weights w;
    loom_status s = loom_llama_load_gguf(gguf_path, 1, &g, &c, &w);
    CHECK_MSG(s == LOOM_OK, "%s: %s", gguf_path, loom_last_error());
    if (s != LOOM_OK) return 1e9;
    CHECK(c.vocab_size == vocab && c.rope_mode == LOOM_ROPE_INTERLEAVED);
    float *got = malloc(sizeof(float) * 6 * (size_t)vocab);
    forward(&c, &w, TOK, 6, got);
    double maxerr = 0;
    *top_same = 0;
    for (int p = 0; p < 6; p++) {
        int a = 0, b = 0;
        for (int v = 0; v < vocab; v++) {
            float r = ref[p * vocab + v], x = got[p * vocab + v];
            double e = fabs(r - x) / fmax(1.0, fabs(r));
            if (!(e <= maxerr)) maxerr = e;
            if (r > ref[p * vocab + a]) a = v;
            if (x > got[p * vocab + b]) b = v;
        }
        *top_same += a == b;
    }
    free(got);
    free(w.layers);
    loom_free_aligned(w.owned); /* NULL: these files hold no types converted at load */
    loom_gguf_close(g);
    return maxerr;
}

/* A byte-level BPE tokenizer.json of vocab entries (so the HF folder converts). */
static void write_tokenizer_json(const char *d, int vocab) {
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", d);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"merges\":[],\"vocab\":{");
    for (int i = 0; i < vocab; i++) fprintf(f, "%s\"t%d\":%d", i ? "," : "", i, i);
    fprintf(f, "}}}");
    fclose(f);
}

static void test_roundtrips(void) {
    char bin[4200], tok[4200], out[256], out2[256];
    snprintf(bin, sizeof bin, "%s/models/stories260K/stories260K.bin", shared);
    snprintf(tok, sizeof tok, "%s/models/stories260K/tok512.bin", shared);
    loom_mapped_file mf;
    loom_llama_config c0;
    loom_llama_weights w0;
    CHECK(loom_llama2c_load(bin, &mf, &c0, &w0) == LOOM_OK);
    int V = c0.vocab_size, same;
    float *ref = malloc(sizeof(float) * 6 * (size_t)V);
    forward(&c0, &w0, TOK, 6, ref);

    /* llama2.c -> GGUF f32: identical logits; the vocabulary comes along */
    snprintf(out, sizeof out, "%s/s.gguf", dir);
    loom_convert_params p = {.tokenizer = tok};
    CHECK_MSG(loom_convert(bin, out, &p) == LOOM_OK, "%s", loom_last_error());
    double e = compare(out, ref, V, &same);
    CHECK_MSG(e == 0.0 && same == 6, "llama2.c -> gguf: error %g, top-1 %d/6", e, same);
    loom_tokenizer *t1, *t2;
    CHECK(loom_tokenizer_load(tok, &t1) == LOOM_OK);
    CHECK_MSG(loom_tokenizer_load(out, &t2) == LOOM_OK, "%s", loom_last_error());
    int32_t a[64], b[64];
    int na = 0, nb = 0;
    const char *text = "Once upon a time, Lily saw a big dog.";
    loom_tokenizer_encode(t1, text, 1, 0, a, 64, &na);
    loom_tokenizer_encode_ex(t2, text, strlen(text), LOOM_TOK_BOS, b, 64, &nb);
    CHECK_MSG(na == nb && memcmp(a, b, sizeof(int32_t) * (size_t)na) == 0, "tokens %d vs %d", na, nb);
    loom_tokenizer_free(t1);
    loom_tokenizer_free(t2);

    /* requantization GGUF -> GGUF */
    struct { const char *type; double tol; int min_same; } q[] = {
        /* stories260K is tiny and its logits large: the error bounds are loose, the
         * bit-exact tensor check below is the strict one */
        {"f16", 0.03, 6}, {"bf16", 0.25, 5}, {"q8_0", 0.6, 5}, {"q4_0", 1e9, 3}, {"q4_1", 1e9, 3}};
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        loom_convert_params rq = {.type_set = 1};
        CHECK(loom_convert_parse_type(q[i].type, &rq.type) == LOOM_OK);
        snprintf(out2, sizeof out2, "%s/s_%s.gguf", dir, q[i].type);
        CHECK_MSG(loom_convert(out, out2, &rq) == LOOM_OK, "%s: %s", q[i].type, loom_last_error());
        e = compare(out2, ref, V, &same);
        fprintf(stderr, "  %s: max logit error %.3g, top-1 %d/6\n", q[i].type, e, same);
        CHECK_MSG(e <= q[i].tol && same >= q[i].min_same, "%s: error %g, top-1 %d/6", q[i].type, e, same);
        loom_gguf *g;
        CHECK(loom_gguf_open(out2, &g) == LOOM_OK);
        uint32_t ft = 99;
        loom_gguf_get_u32(g, "general.file_type", &ft);
        CHECK(loom_gguf_find_key(g, "tokenizer.ggml.scores") >= 0 && ft != 99);
        loom_gguf_tensor_info ti;
        CHECK(loom_gguf_tensor_info_at(g, loom_gguf_find_tensor(g, "blk.0.attn_q.weight"), &ti) == LOOM_OK);
        CHECK(ti.ggml_type == (uint32_t)loom_ggml_type_from_dtype(rq.type));
        /* every row is exactly the source row re-encoded */
        const loom_tensor *wq = &w0.layers[0].wq;
        int64_t cols = wq->shape[1];
        size_t rb = loom_dtype_row_bytes(rq.type, cols);
        unsigned char *row = malloc(rb);
        int exact = ti.nbytes == rb * (size_t)wq->shape[0];
        for (int64_t r = 0; exact && r < wq->shape[0]; r++) {
            const float *x = (const float *)wq->data + r * cols;
            if (rq.type == LOOM_F16 || rq.type == LOOM_BF16)
                for (int64_t k = 0; k < cols; k++)
                    ((uint16_t *)row)[k] = rq.type == LOOM_F16 ? loom_f32_to_f16(x[k]) : loom_f32_to_bf16(x[k]);
            else loom_quantize_row(rq.type, x, row, cols);
            exact = memcmp(row, (const unsigned char *)ti.data + (size_t)r * rb, rb) == 0;
        }
        CHECK_MSG(exact, "%s: blk.0.attn_q.weight is not the source re-encoded", q[i].type);
        free(row);
        loom_gguf_close(g);
        unlink(out2);
    }

    /* norms with unit dims ([1, 1, 1, 64]) are vectors: kept f32 when the matrices are
     * quantized (they were quantized, and loom refused the file it wrote) */
    char n4[256], n4q[256];
    snprintf(n4, sizeof n4, "%s/norm4d.gguf", dir);
    snprintf(n4q, sizeof n4q, "%s/norm4d_q8.gguf", dir);
    write_4d_norms(out, n4);
    e = compare(n4, ref, V, &same);
    CHECK_MSG(e == 0.0 && same == 6, "4-D norms load as vectors: error %g", e);
    loom_convert_params q8 = {.type_set = 1, .type = LOOM_Q8_0};
    CHECK_MSG(loom_convert(n4, n4q, &q8) == LOOM_OK, "%s", loom_last_error());
    e = compare(n4q, ref, V, &same);
    CHECK_MSG(e <= 0.6 && same >= 5, "4-D norms -> q8_0: error %g, top-1 %d/6 (%s)", e, same, loom_last_error());
    loom_gguf *gq;
    CHECK(loom_gguf_open(n4q, &gq) == LOOM_OK);
    int norms = 0, f32_norms = 0;
    for (int64_t i = 0; i < loom_gguf_n_tensors(gq); i++) {
        loom_gguf_tensor_info ti;
        loom_gguf_tensor_info_at(gq, i, &ti);
        if (!strstr(ti.name, "norm")) continue;
        norms++;
        f32_norms += ti.ggml_type == 0;  /* GGML_TYPE_F32 */
    }
    CHECK_MSG(norms == 11 && f32_norms == norms, "%d of %d norms f32", f32_norms, norms);
    loom_gguf_close(gq);
    unlink(n4);
    unlink(n4q);

    /* only regular files are written: devices, directories and FIFOs are refused
     * before any work (as root, /dev/full was replaced by a regular file); a link
     * to a file is followed, the link kept */
    loom_convert_params q4 = {.type_set = 1, .type = LOOM_Q4_0};
    CHECK(loom_convert(out, "/dev/null", &q4) == LOOM_ERR_IO && strstr(loom_last_error(), "character device"));
    struct stat dn;
    CHECK(stat("/dev/null", &dn) == 0 && S_ISCHR(dn.st_mode));
    CHECK(loom_convert(out, dir, &q4) == LOOM_ERR_IO && strstr(loom_last_error(), "is a directory"));
    char fifo[256], link[256], target[256];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(loom_convert(out, fifo, &q4) == LOOM_ERR_IO && strstr(loom_last_error(), "FIFO"));
    unlink(fifo);
    snprintf(target, sizeof target, "%s/target.gguf", dir);
    snprintf(link, sizeof link, "%s/link.gguf", dir);
    FILE *tf = fopen(target, "w");
    if (tf) fclose(tf);
    CHECK(symlink(target, link) == 0);
    CHECK_MSG(loom_convert(out, link, &q4) == LOOM_OK, "%s", loom_last_error());
    struct stat ls, ts;
    CHECK(lstat(link, &ls) == 0 && S_ISLNK(ls.st_mode) && stat(target, &ts) == 0 && ts.st_size > 1000);
    unlink(link);
    unlink(target);

    /* Hugging Face folder (half-split q/k rows) -> GGUF: rows permuted back, same logits */
    char hf[128];
    snprintf(hf, sizeof hf, "%s/hf", dir);
    mkdir(hf, 0755);
    write_hf(hf, &c0, &w0, 0, NULL, "LlamaForCausalLM");
    write_tokenizer_json(hf, V);
    snprintf(out2, sizeof out2, "%s/hf.gguf", dir);
    loom_convert_params hp = {0};
    CHECK_MSG(loom_convert(hf, out2, &hp) == LOOM_OK, "%s", loom_last_error());
    e = compare(out2, ref, V, &same);
    CHECK_MSG(e == 0.0 && same == 6, "hf -> gguf: error %g, top-1 %d/6", e, same);
    unlink(out2);
    /* bf16 safetensors -> q8_0 GGUF */
    write_hf(hf, &c0, &w0, 1, NULL, "LlamaForCausalLM");
    hp.type_set = 1;
    hp.type = LOOM_Q8_0;
    CHECK_MSG(loom_convert(hf, out2, &hp) == LOOM_OK, "%s", loom_last_error());
    e = compare(out2, ref, V, &same);
    CHECK_MSG(e <= 0.3 && same >= 5, "hf bf16 -> q8_0: error %g, top-1 %d/6", e, same);
    unlink(out2);

    /* bad input */
    loom_convert_params none = {0};
    CHECK(loom_convert(bin, out2, &none) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "tokenizer") != NULL);
    CHECK(loom_convert("/nonexistent/model", out2, &none) == LOOM_ERR_IO);
    loom_dtype dt;
    CHECK(loom_convert_parse_type("q5_k", &dt) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "q5_k") != NULL);
    /* a truncated GGUF */
    FILE *src = fopen(out, "rb"), *dst;
    snprintf(out2, sizeof out2, "%s/cut.gguf", dir);
    dst = fopen(out2, "wb");
    char buf[3000];
    size_t n = fread(buf, 1, sizeof buf, src);
    fwrite(buf, 1, n, dst);
    fclose(src);
    fclose(dst);
    snprintf(tok, sizeof tok, "%s/out.gguf", dir);
    loom_convert_params rq = {.type_set = 1, .type = LOOM_Q8_0};
    CHECK(loom_convert(out2, tok, &rq) == LOOM_ERR_FORMAT);
    CHECK(access(tok, F_OK) != 0);  /* nothing left behind */
    unlink(out2);
    /* a folder with weights but no tokenizer.json */
    snprintf(out2, sizeof out2, "%s/tokenizer.json", hf);
    unlink(out2);
    CHECK(loom_convert(hf, tok, &hp) == LOOM_ERR_IO);
    CHECK(strstr(loom_last_error(), "tokenizer.json") != NULL);
    snprintf(out2, sizeof out2, "%s/config.json", hf);
    unlink(out2);
    snprintf(out2, sizeof out2, "%s/model.safetensors", hf);
    unlink(out2);
    rmdir(hf);
    unlink(out);
    free(ref);
    free(w0.layers);
    loom_mapped_file_close(&mf);
}

int main(void) {
    const char *d = getenv("LOOM_SHARED_DIR");
    snprintf(shared, sizeof shared, "%s", d && *d ? d : "../shared");
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/models/stories260K/stories260K.bin", shared);
    CHECK_NEED_FILE(probe, "set LOOM_SHARED_DIR to the shared folder");
    snprintf(dir, sizeof dir, "/tmp/loom_convert_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    RUN_TEST(test_roundtrips);
    rmdir(dir);
    return TEST_SUMMARY();
}
