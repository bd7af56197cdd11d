/* The Llama-like families (Qwen2: Q/K/V biases; Qwen3: per-head Q/K norms and
 * an explicit head_dim; Mistral: a sliding window of 8 keys over 24 tokens;
 * Llama as the control) against transformers.
 *
 * scripts/make_family_fixtures.py writes a tiny random model of each family
 * (a Hugging Face folder, RoPE theta given in rope_parameters) with the
 * logits transformers computes after a fixed token sequence. For each family,
 * from the folder and from the GGUF loom_convert writes of it, in every mode
 * (step_by_step, fused, fused_with_checkpoints), loom's last-position logits
 * must agree to 1e-4 relative (max |loom - ref| / max |ref|) when computed
 *   - by one prefill of the whole sequence (loom_model_forward),
 *   - by a prefill of all but the last 3 tokens, then 3 decode steps,
 *   - by the batch engine (paged KV cache, the graph `loom run` uses), the
 *     prompt in one step and in chunks of 7 over KV blocks of 4,
 * with an f32 KV cache; with f16, bf16 and i8 caches (fused, the prefill)
 * within 2e-3, 1e-2 and 2e-2, their rounding. The model's tokenizer (tokenizer.json, or
 * the GGUF's metadata) must encode the fixture's text.txt to the ids the
 * Hugging Face tokenizer gives (text_ids.txt): GPT-2's pre-tokenizer for
 * llama, Qwen2's regex for qwen2/qwen3.
 *
 * The fixtures: tests/fixtures/families (committed, made by the script, so
 * that CI compares against transformers without torch); LOOM_FAMILY_FIXTURES=DIR
 * uses fixtures made elsewhere, and LOOM_FAMILY_FIXTURES=regenerate (or the
 * argument --regenerate) runs the script now into a temporary folder with the
 * first Python that has torch and transformers: $LOOM_HF_PYTHON, the
 * repository's .venv, python3 (neither is a dependency of loom: without them a
 * regeneration skips, visibly).
 * llama.cpp's GGUF: a fixture folder's llama-cpp.gguf if it has one, else with
 * LOOM_LLAMA_CPP_DIR (a llama.cpp source tree) and such a Python, each folder
 * converted now by llama.cpp's own convert_hf_to_gguf.py; it is checked the
 * same way: real llama.cpp metadata and tensor layouts. Without them that part
 * is skipped, and says so ("skip: llama.cpp GGUF"). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "loom.h"

#ifndef LOOM_SOURCE_DIR
#define LOOM_SOURCE_DIR "."
#endif

#define MAX_TOK 64
#define N_DECODE 3

typedef struct fixture {
    char dir[700];
    int32_t tokens[MAX_TOK];
    int n;
    float *ref;      /* [vocab] */
    float *ref_full; /* [vocab], a model with a sliding window: its logits with full attention; or NULL */
    float *ref_lc;   /* [vocab], the model as llama.cpp's GGUF of it describes it, where that differs
                        (Gemma 2: q.k scaled by 1/sqrt(head_dim); Gemma 3: every layer sliding); or NULL */
    int vocab;
} fixture;

/* The first interpreter that imports torch and transformers, or NULL. */
static const char *find_python(void) {
    static char py[600];
    const char *env = getenv("LOOM_HF_PYTHON");
    const char *cand[3] = {env && *env ? env : NULL, LOOM_SOURCE_DIR "/.venv/bin/python", "python3"};
    for (int i = 0; i < 3; i++) {
        if (!cand[i]) continue;
        char cmd[800];
        snprintf(cmd, sizeof cmd, "'%s' -c 'import torch, transformers, tokenizers' >/dev/null 2>&1", cand[i]);
        if (system(cmd) == 0) {
            snprintf(py, sizeof py, "%s", cand[i]);
            return py;
        }
    }
    return NULL;
}

static int read_fixture(const char *root, const char *family, fixture *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "%s/%s", root, family);
    char path[800];
    snprintf(path, sizeof path, "%s/tokens.txt", f->dir);
    FILE *t = fopen(path, "r");
    if (!t) return -1;
    while (f->n < MAX_TOK && fscanf(t, "%d", &f->tokens[f->n]) == 1) f->n++;
    fclose(t);
    snprintf(path, sizeof path, "%s/logits.f32", f->dir);
    FILE *l = fopen(path, "rb");
    if (!l) return -1;
    fseek(l, 0, SEEK_END);
    f->vocab = (int)(ftell(l) / 4);
    fseek(l, 0, SEEK_SET);
    f->ref = malloc(sizeof(float) * (size_t)(f->vocab ? f->vocab : 1));
    int ok = f->ref && fread(f->ref, 4, (size_t)f->vocab, l) == (size_t)f->vocab;
    fclose(l);
    static const char *extra[2] = {"logits_full.f32", "logits_llama_cpp.f32"};
    float **dst[2] = {&f->ref_full, &f->ref_lc};
    for (int i = 0; i < 2 && ok; i++) {
        snprintf(path, sizeof path, "%s/%s", f->dir, extra[i]);
        if ((l = fopen(path, "rb")) == NULL) continue;
        *dst[i] = malloc(sizeof(float) * (size_t)f->vocab);
        ok = *dst[i] && fread(*dst[i], 4, (size_t)f->vocab, l) == (size_t)f->vocab;
        fclose(l);
    }
    return ok && f->n > N_DECODE + 1 && f->vocab > 0 ? 0 : -1;
}

/* max |got - ref| / max |ref| */
static double rel_err(const float *got, const float *ref, int n) {
    double d = 0, m = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= d)) d = e; /* NaN counts as an error */
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    return m > 0 ? d / m : d;
}

/* The last-position logits by the batch engine: the sequence as a prompt
 * (in chunks of n_batch rows over blocks of block_size positions; 0: the
 * defaults), one token generated; the logits it was sampled from. */
static loom_status engine_logits(loom_model *m, const fixture *f, int n_batch, int block_size, float *out) {
    loom_tokenizer *tok;
    loom_status ts = loom_tokenizer_from_model(m, &tok);
    if (ts != LOOM_OK) return ts;
    loom_engine_params ep = loom_engine_default_params();
    ep.n_seq_max = 1;
    ep.seq_len = 64;
    ep.n_batch = n_batch;
    ep.block_size = block_size;
    loom_engine *e = NULL;
    loom_status s = loom_engine_create(m, tok, &ep, &e);
    loom_request_params rp = loom_request_default_params();
    rp.max_tokens = 1;
    rp.sampling.temperature = 0;
    rp.ignore_eos = 1;
    if (s == LOOM_OK) s = loom_engine_add(e, 1, f->tokens, f->n, &rp);
    int got = 0;
    for (int steps = 0; s == LOOM_OK && !got && steps < 100; steps++) {
        const loom_engine_event *ev;
        int n;
        s = loom_engine_step(e, &ev, &n);
        for (int i = 0; s == LOOM_OK && i < n && !got; i++)
            if (ev[i].token >= 0 && ev[i].logits) {
                memcpy(out, ev[i].logits, sizeof(float) * (size_t)f->vocab);
                got = 1;
            }
    }
    if (s == LOOM_OK && !got) s = LOOM_ERR_INTERNAL;
    loom_engine_free(e);
    loom_tokenizer_free(tok);
    return s;
}

static void check_model(const fixture *f, const char *path, const char *what, loom_exec_mode mode, loom_dtype kv,
                        double tol) {
    loom_model_params p = loom_model_default_params();
    p.n_threads = 2;
    p.n_ctx = 64;
    p.mode = mode;
    p.kv_dtype = kv;
    loom_model *m = NULL;
    loom_status s = loom_model_load(path, &p, &m);
    CHECK_MSG(s == LOOM_OK, "%s: load: %s", what, loom_last_error());
    if (s != LOOM_OK) return;
    CHECK_MSG(loom_model_get_info(m).vocab_size == f->vocab, "%s: vocab %d, fixture %d", what,
              loom_model_get_info(m).vocab_size, f->vocab);
    if (loom_model_get_info(m).vocab_size != f->vocab) {
        loom_model_free(m);
        return;
    }
    float *got = malloc(sizeof(float) * (size_t)f->vocab);
    s = loom_model_forward(m, f->tokens, f->n, 0, got);
    CHECK_MSG(s == LOOM_OK, "%s: forward: %s", what, loom_last_error());
    double e = s == LOOM_OK ? rel_err(got, f->ref, f->vocab) : 1;
    CHECK_MSG(e <= tol, "%s, prefill: relative error %.3g > %g", what, e, tol);
    fprintf(stderr, "  %-46s prefill %.2e", what, e);
    if (kv == LOOM_F32) { /* the decode program, and the engine's paged graph */
        int n0 = f->n - N_DECODE;
        s = loom_model_forward(m, f->tokens, n0, 0, got);
        for (int i = n0; s == LOOM_OK && i < f->n; i++) s = loom_model_forward(m, f->tokens + i, 1, i, got);
        CHECK_MSG(s == LOOM_OK, "%s: decode: %s", what, loom_last_error());
        e = s == LOOM_OK ? rel_err(got, f->ref, f->vocab) : 1;
        CHECK_MSG(e <= tol, "%s, prefill + %d decode steps: relative error %.3g > %g", what, N_DECODE, e, tol);
        fprintf(stderr, "  decode %.2e", e);
        s = engine_logits(m, f, 0, 0, got);
        CHECK_MSG(s == LOOM_OK, "%s: engine: %s", what, loom_last_error());
        e = s == LOOM_OK ? rel_err(got, f->ref, f->vocab) : 1;
        CHECK_MSG(e <= tol, "%s, batch engine: relative error %.3g > %g", what, e, tol);
        fprintf(stderr, "  engine %.2e", e);
        /* chunked prefill: chunks of 7 over blocks of 4, each chunk attending to the cached blocks */
        s = engine_logits(m, f, 7, 4, got);
        CHECK_MSG(s == LOOM_OK, "%s: engine, chunks of 7: %s", what, loom_last_error());
        e = s == LOOM_OK ? rel_err(got, f->ref, f->vocab) : 1;
        CHECK_MSG(e <= tol, "%s, batch engine, chunks of 7: relative error %.3g > %g", what, e, tol);
        fprintf(stderr, "  chunked %.2e", e);
    }
    fputc('\n', stderr);
    free(got);
    loom_model_free(m);
}

/* The tokenizer of the model at path encodes text.txt to text_ids.txt. */
static void check_tokenizer(const fixture *f, const char *path, const char *what) {
    char p[800];
    char *text = NULL;
    size_t len = 0;
    int32_t want[1024], got[1024];
    int n_want = 0, n_got = 0;
    snprintf(p, sizeof p, "%s/text_ids.txt", f->dir);
    FILE *t = fopen(p, "r");
    CHECK_MSG(t != NULL, "%s missing", p);
    if (!t) return;
    while (n_want < 1024 && fscanf(t, "%d", &want[n_want]) == 1) n_want++;
    fclose(t);
    snprintf(p, sizeof p, "%s/text.txt", f->dir);
    t = fopen(p, "rb");
    CHECK_MSG(t != NULL, "%s missing", p);
    if (!t) return;
    fseek(t, 0, SEEK_END);
    len = (size_t)ftell(t);
    fseek(t, 0, SEEK_SET);
    text = malloc(len + 1);
    CHECK(text && fread(text, 1, len, t) == len);
    fclose(t);
    loom_model_params mp = loom_model_default_params();
    mp.n_threads = 1;
    mp.n_ctx = 16;
    loom_model *m = NULL;
    loom_tokenizer *tok = NULL;
    loom_status s = loom_model_load(path, &mp, &m);
    if (s == LOOM_OK) s = loom_tokenizer_from_model(m, &tok);
    if (s == LOOM_OK) s = loom_tokenizer_encode_ex(tok, text, len, 0, got, 1024, &n_got);
    CHECK_MSG(s == LOOM_OK, "%s: tokenizer: %s", what, loom_last_error());
    int same = s == LOOM_OK && n_got == n_want && memcmp(got, want, sizeof(int32_t) * (size_t)n_got) == 0;
    CHECK_MSG(same, "%s: text.txt encodes to %d ids, the Hugging Face tokenizer's %d differ", what, n_got, n_want);
    fprintf(stderr, "  %-46s tokenizer: %d ids %s\n", what, n_got, same ? "equal" : "DIFFER");
    loom_tokenizer_free(tok);
    loom_model_free(m);
    free(text);
}

/* llama.cpp's GGUF of the family: the fixture's llama-cpp.gguf, else lc_dir/<family>.gguf
 * (converted by the test), else none. */
static int llama_cpp_gguf(const fixture *f, const char *family, const char *lc_dir, char *out, size_t n) {
    snprintf(out, n, "%s/llama-cpp.gguf", f->dir);
    if (access(out, R_OK) == 0) return 1;
    if (!lc_dir) return 0;
    snprintf(out, n, "%s/%s.gguf", lc_dir, family);
    return access(out, R_OK) == 0;
}

static void check_family(const char *root, const char *family, const char *tmp, const char *lc_dir,
                         const char *lc_why) {
    fixture f;
    CHECK_MSG(read_fixture(root, family, &f) == 0, "%s/%s: tokens.txt or logits.f32 missing or malformed", root,
              family);
    if (!f.ref || f.vocab == 0) {
        free(f.ref), free(f.ref_full), free(f.ref_lc);
        return;
    }
    char gguf[700];
    snprintf(gguf, sizeof gguf, "%s/%s.gguf", tmp, family);
    loom_convert_params cp = loom_convert_default_params();
    CHECK_MSG(loom_convert(f.dir, gguf, &cp) == LOOM_OK, "%s: convert: %s", family, loom_last_error());
    static const char *mode_names[] = {"step_by_step", "fused", "fused_with_checkpoints"};
    char lc[800];
    const char *paths[3] = {f.dir, gguf, lc}, *kinds[3] = {"safetensors", "gguf", "llama.cpp gguf"};
    int n_paths = llama_cpp_gguf(&f, family, lc_dir, lc, sizeof lc) ? 3 : 2;
    if (n_paths == 2) fprintf(stderr, "  %s: skip: llama.cpp GGUF (%s)\n", family, lc_why);
    char what[160];
    for (int p = 0; p < n_paths; p++) {
        snprintf(what, sizeof what, "%s %s", family, kinds[p]);
        check_tokenizer(&f, paths[p], what);
        /* llama.cpp's converter writes no sliding window for Mistral (llama.cpp runs it with
         * full attention): its GGUF must give the full-attention logits */
        fixture fp = f;
        if (p == 2 && f.ref_full) {
            fp.ref = f.ref_full;
            fprintf(stderr, "  %s: llama.cpp's GGUF has no sliding window: against full attention\n", family);
        }
        if (p == 2 && f.ref_lc) { /* Gemma: what llama.cpp's metadata says differs from the config */
            fp.ref = f.ref_lc;
            fprintf(stderr, "  %s: against the model as llama.cpp's GGUF describes it (logits_llama_cpp.f32)\n",
                    family);
        }
        for (int mode = 0; mode < LOOM_MODE_COUNT; mode++) {
            snprintf(what, sizeof what, "%s %s %s", family, kinds[p], mode_names[mode]);
            check_model(&fp, paths[p], what, (loom_exec_mode)mode, LOOM_F32, 1e-4);
        }
        snprintf(what, sizeof what, "%s %s fused, f16 KV", family, kinds[p]);
        check_model(&fp, paths[p], what, LOOM_MODE_FUSED, LOOM_F16, 2e-3);
        snprintf(what, sizeof what, "%s %s fused, bf16 KV", family, kinds[p]);
        check_model(&fp, paths[p], what, LOOM_MODE_FUSED, LOOM_BF16, 1e-2);
        snprintf(what, sizeof what, "%s %s fused, i8 KV", family, kinds[p]);
        check_model(&fp, paths[p], what, LOOM_MODE_FUSED, LOOM_I8, 2e-2);
    }
    free(f.ref), free(f.ref_full), free(f.ref_lc);
}

/* Runs scripts/make_family_fixtures.py ARGS with Python py, its output into tmp/make.log. */
static int run_script(const char *py, const char *args, const char *tmp) {
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "'%s' '%s/scripts/make_family_fixtures.py' %s >'%s/make.log' 2>&1", py,
             LOOM_SOURCE_DIR, args, tmp);
    fprintf(stderr, "fixtures: %s scripts/make_family_fixtures.py %s\n", py, args);
    if (system(cmd) == 0) return 0;
    snprintf(cmd, sizeof cmd, "cat '%s/make.log' >&2", tmp);
    if (system(cmd) != 0) fprintf(stderr, "(no log)\n");
    return -1;
}

static void remove_dir(const char *tmp) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
}

int main(int argc, char **argv) {
    const char *env = getenv("LOOM_FAMILY_FIXTURES");
    int regenerate = (argc > 1 && strcmp(argv[1], "--regenerate") == 0) || (env && strcmp(env, "regenerate") == 0);
    char tmp[] = "/tmp/loom_families_XXXXXX";
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "cannot make a temporary folder\n");
        return 1;
    }
    char fixtures[600], args[1600];
    snprintf(fixtures, sizeof fixtures, "%s", env && *env && !regenerate ? env : LOOM_SOURCE_DIR "/tests/fixtures/families");
    const char *lc = getenv("LOOM_LLAMA_CPP_DIR");
    const char *py = regenerate || (lc && *lc) ? find_python() : NULL;
    if (regenerate) {
        if (!py) {
            fprintf(stderr, "SKIP: no Python with torch and transformers for scripts/make_family_fixtures.py "
                            "(set LOOM_HF_PYTHON, or run without --regenerate: the committed fixtures)\n");
            remove_dir(tmp);
            return 77;
        }
        snprintf(fixtures, sizeof fixtures, "%s/fixtures", tmp);
        snprintf(args, sizeof args, "'%s'", fixtures);
        if (run_script(py, args, tmp) != 0) {
            fprintf(stderr, "FAIL: scripts/make_family_fixtures.py failed\n");
            remove_dir(tmp);
            return 1;
        }
    }
    /* llama.cpp's converter over the fixtures, when there is one to run */
    char lc_dir[600];
    const char *lc_why = "LOOM_LLAMA_CPP_DIR unset";
    snprintf(lc_dir, sizeof lc_dir, "%s/llama-cpp", tmp);
    int have_lc = 0;
    if (lc && *lc && !py) lc_why = "no Python with torch and transformers to run its converter";
    if (lc && *lc && py) {
        snprintf(args, sizeof args, "--llama-cpp-only '%s' '%s' '%s'", lc, fixtures, lc_dir);
        have_lc = mkdir(lc_dir, 0700) == 0 && run_script(py, args, tmp) == 0;
        CHECK_MSG(have_lc, "llama.cpp's convert_hf_to_gguf.py failed on %s", fixtures);
        lc_why = "its conversion failed";
    }
    fprintf(stderr, "fixtures: %s\n", fixtures);
    static const char *families[] = {"llama", "qwen2", "qwen3", "mistral", "phi3", "gemma2", "gemma3", "mixtral",
                                     "qwen3moe"};
    const char *only = getenv("LOOM_FAMILY"); /* one family (debugging) */
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (!only || !*only || strcmp(only, families[i]) == 0)
            check_family(fixtures, families[i], tmp, have_lc ? lc_dir : NULL, lc_why);
    remove_dir(tmp);
    return TEST_SUMMARY();
}
