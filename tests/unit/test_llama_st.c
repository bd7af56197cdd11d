/* Llama from safetensors: stories260K (llama2.c, interleaved RoPE) is written
 * as a Hugging Face folder (q/k rows permuted to the half-split layout, as
 * HF's converter does, optionally bf16), loaded with
 * loom_llama_load_safetensors, and must give the llama2.c model's logits.
 * Also the error paths: missing tensor, wrong shape, other architecture. */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "llama_test_util.h"

static char shared[4096];

static void test_roundtrip(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.bin", shared);
    loom_mapped_file mf;
    loom_llama_config c0;
    loom_llama_weights w0;
    CHECK_MSG(loom_llama2c_load(path, &mf, &c0, &w0) == LOOM_OK, "%s", loom_last_error());
    char dir[] = "/tmp/loom_llama_st_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const int32_t tok[6] = {1, 403, 407, 261, 378, 290};
    float *ref = malloc(sizeof(float) * 6 * (size_t)c0.vocab_size), *got = malloc(sizeof(float) * 6 * (size_t)c0.vocab_size);
    forward(&c0, &w0, tok, 6, ref);
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        write_hf(dir, &c0, &w0, bf16, NULL, "LlamaForCausalLM");
        loom_safetensors *st;
        float *owned;
        loom_llama_config c;
        loom_llama_weights w;
        CHECK_MSG(loom_llama_load_safetensors(dir, &st, &owned, &c, &w) == LOOM_OK, "%s", loom_last_error());
        if (!st) continue;
        CHECK(c.rope_mode == LOOM_ROPE_HALF && c.shared_classifier && c.n_kv_heads == c0.n_kv_heads);
        CHECK(w.layers[0].wq.dtype == (bf16 ? LOOM_BF16 : LOOM_F32));
        forward(&c, &w, tok, 6, got);
        double maxerr = 0;
        int top_same = 1;
        for (int p = 0; p < 6; p++) {
            int a = 0, b = 0;
            for (int v = 0; v < c.vocab_size; v++) {
                float r = ref[p * c.vocab_size + v], x = got[p * c.vocab_size + v];
                double e = fabs(r - x) / fmax(1.0, fabs(r));
                if (e > maxerr) maxerr = e;
                if (r > ref[p * c.vocab_size + a]) a = v;
                if (x > got[p * c.vocab_size + b]) b = v;
            }
            top_same &= a == b;
        }
        /* f32: same weights, the same math up to RoPE pairing order; bf16: weight rounding */
        double tol = bf16 ? 0.25 : 1e-4;  /* bf16 rounds every weight by up to 2^-9 */
        CHECK_MSG(maxerr <= tol, "%s: max logit error %g > %g", bf16 ? "bf16" : "f32", maxerr, tol);
        if (!bf16) CHECK(top_same);
        fprintf(stderr, "  %s: max logit error vs llama2.c %.3g\n", bf16 ? "bf16" : "f32", maxerr);
        free(w.layers);
        free(owned);
        loom_safetensors_close(st);
    }
    /* errors */
    loom_safetensors *st;
    float *owned;
    loom_llama_config c;
    loom_llama_weights w;
    write_hf(dir, &c0, &w0, 0, "model.layers.1.mlp.up_proj.weight", "LlamaForCausalLM");
    CHECK(loom_llama_load_safetensors(dir, &st, &owned, &c, &w) == LOOM_ERR_FORMAT);
    CHECK_MSG(strstr(loom_last_error(), "model.layers.1.mlp.up_proj.weight") != NULL, "%s", loom_last_error());
    CHECK(st == NULL);
    write_hf(dir, &c0, &w0, 0, NULL, "GPT2LMHeadModel");
    CHECK(loom_llama_load_safetensors(dir, &st, &owned, &c, &w) == LOOM_ERR_UNSUPPORTED);
    CHECK(strstr(loom_last_error(), "GPT2LMHeadModel") != NULL);
    /* a config that does not match the weights: wrong shapes, named */
    c0.hidden_dim += 32;
    write_hf(dir, &c0, &w0, 0, NULL, "LlamaForCausalLM");
    c0.hidden_dim -= 32;
    CHECK(loom_llama_load_safetensors(dir, &st, &owned, &c, &w) == LOOM_ERR_SHAPE);
    CHECK_MSG(strstr(loom_last_error(), "gate_proj") != NULL, "%s", loom_last_error());
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"model_type\":\"llama\",\"hidden_size\":", f);
    fclose(f);
    CHECK(loom_llama_load_safetensors(dir, &st, &owned, &c, &w) == LOOM_ERR_FORMAT);
    CHECK(strstr(loom_last_error(), "not valid JSON") != NULL);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
    free(ref);
    free(got);
    free(w0.layers);
    loom_mapped_file_close(&mf);
}

static void test_permute_inverse(void) {
    float a[2 * 8 * 3], b[2 * 8 * 3], c[2 * 8 * 3];
    for (int i = 0; i < 48; i++) a[i] = (float)i;
    loom_rope_permute_rows(b, a, 2, 8, 3, 4, 1);
    loom_rope_permute_rows(c, b, 2, 8, 3, 4, 0);
    CHECK(memcmp(a, c, sizeof a) == 0);
    /* head 0: half row 1 is interleaved row 2 (pair 1, first element) */
    CHECK(b[1 * 3] == a[2 * 3] && b[4 * 3] == a[1 * 3]);
}

int main(void) {
    const char *d = getenv("LOOM_SHARED_DIR");
    snprintf(shared, sizeof shared, "%s", d && *d ? d : "../shared");
    RUN_TEST(test_permute_inverse);
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/models/stories260K/stories260K.bin", shared);
    CHECK_NEED_FILE(probe, "set LOOM_SHARED_DIR to the shared folder");
    RUN_TEST(test_roundtrip);
    return TEST_SUMMARY();
}
