/* Tokenizers from Hugging Face tokenizer.json. The shared GGUF test
 * vocabularies (bert-bge, gpt-2, and the SentencePiece ones of Llama 2 and
 * Phi-3) are rewritten as tokenizer.json text in Hugging Face's conventions
 * ("##" continuations, byte-level merges, SentencePiece merges derived from
 * the scores as Hugging Face's converter derives them), loaded
 * through loom_tokenizer_load_hf_json_memory, and must reproduce the
 * reference ids of ../shared/vocab exactly. Also: bad tokenizer.json input. */
#include <cJSON.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "base/file.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

static char vocab_dir[4096];

/* The whole file, NUL-terminated (NULL when unreadable). */
static char *read_all(const char *path, size_t *size) {
    char *buf;
    size_t n;
    if (loom_read_file(path, (size_t)64 << 20, &buf, &n) != LOOM_OK) return NULL;
    if (size) *size = n;
    return buf;
}

enum { HF_GPT2 = 0, HF_BERT = 1, HF_SPM = 2, HF_SPM_METASPACE = 3 };

typedef struct { int l, r, id; float score; } spm_merge;

static int cmp_merge(const void *a, const void *b) {
    const spm_merge *x = a, *y = b;  /* the joined piece's score, high first; then as HF's extractor lists them */
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    if (x->l != y->l) return x->l < y->l ? -1 : 1;
    return x->r < y->r ? -1 : x->r > y->r;
}

/* Pieces sorted for lookups (find_piece). */
static const char **g_tok;
static const uint64_t *g_len;
static int *g_sorted;
static uint64_t g_n;

static int cmp_piece(const char *a, uint64_t la, const char *b, uint64_t lb) {
    int c = memcmp(a, b, la < lb ? la : lb);
    return c ? c : la < lb ? -1 : la > lb;
}

static int cmp_sorted(const void *x, const void *y) {
    int i = *(const int *)x, j = *(const int *)y;
    int c = cmp_piece(g_tok[i], g_len[i], g_tok[j], g_len[j]);
    return c ? c : (i > j) - (i < j);
}

/* The lowest id of piece s (n bytes), or -1. */
static int find_piece(const char *s, uint64_t n) {
    uint64_t lo = 0, hi = g_n;
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if (cmp_piece(g_tok[g_sorted[mid]], g_len[g_sorted[mid]], s, n) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < g_n && cmp_piece(g_tok[g_sorted[lo]], g_len[g_sorted[lo]], s, n) == 0 ? g_sorted[lo] : -1;
}

/* Merges of a SentencePiece vocabulary as Hugging Face's conversion derives
 * them (SentencePieceExtractor): every split of a piece into two pieces of
 * the vocabulary, ordered by the joined piece's score. */
static cJSON *spm_merges(const char **tok, const uint64_t *len, const int32_t *type, const float *score, uint64_t n) {
    cJSON *merges = cJSON_CreateArray();
    g_tok = tok, g_len = len, g_n = n;
    g_sorted = malloc(sizeof *g_sorted * n);
    for (uint64_t i = 0; i < n; i++) g_sorted[i] = (int)i;
    qsort(g_sorted, n, sizeof *g_sorted, cmp_sorted);
    size_t cap = 1 << 16, nm = 0;
    spm_merge *m = malloc(sizeof *m * cap);
    for (uint64_t i = 0; i < n; i++) {
        if (type[i] != 1 || len[i] < 2) continue;
        for (uint64_t k = 1; k < len[i]; k++) {
            if ((tok[i][k] & 0xC0) == 0x80) continue;  /* split between UTF-8 characters only */
            int l = find_piece(tok[i], k), r = find_piece(tok[i] + k, len[i] - k);
            if (l < 0 || r < 0) continue;
            if (nm == cap) m = realloc(m, sizeof *m * (cap *= 2));
            m[nm++] = (spm_merge){l, r, (int)i, score[i]};
        }
    }
    free(g_sorted);
    qsort(m, nm, sizeof *m, cmp_merge);
    char buf[2100];
    for (size_t i = 0; i < nm; i++) {
        snprintf(buf, sizeof buf, "%.*s %.*s", (int)len[m[i].l], tok[m[i].l], (int)len[m[i].r], tok[m[i].r]);
        cJSON_AddItemToArray(merges, cJSON_CreateString(buf));
    }
    free(m);
    return merges;
}

/* tokenizer.json text for a GGUF test vocabulary (bert, gpt2, or a
 * SentencePiece one written as Hugging Face converts it: U+2581 spaces by a
 * normalizer, or by a Metaspace pre-tokenizer; byte fallback; merges). */
static char *json_from_gguf(const char *name, int kind) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", vocab_dir, name);
    loom_gguf *g;
    if (loom_gguf_open(path, &g) != LOOM_OK) return NULL;
    loom_gguf_type et;
    uint64_t n, nm = 0;
    loom_gguf_get_arr_info(g, "tokenizer.ggml.tokens", &et, &n);
    const char **tok = malloc(sizeof *tok * n);
    uint64_t *len = malloc(sizeof *len * n);
    int32_t *type = malloc(sizeof *type * n);
    loom_gguf_get_arr_str(g, "tokenizer.ggml.tokens", tok, len, n);
    loom_gguf_get_arr_i32(g, "tokenizer.ggml.token_type", type, n);
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab"), *added = cJSON_AddArrayToObject(root, "added_tokens");
    char buf[1024];
    for (uint64_t i = 0; i < n; i++) {
        size_t l = len[i] < 1000 ? len[i] : 1000;
        if (kind == HF_BERT && type[i] == 1) {  /* llama.cpp marks word starts with U+2581; HF marks continuations */
            if (l >= 3 && memcmp(tok[i], "\xe2\x96\x81", 3) == 0) snprintf(buf, sizeof buf, "%.*s", (int)l - 3, tok[i] + 3);
            else snprintf(buf, sizeof buf, "##%.*s", (int)l, tok[i]);
        } else {
            snprintf(buf, sizeof buf, "%.*s", (int)l, tok[i]);
        }
        cJSON_AddItemToObject(vocab, buf, cJSON_CreateNumber((double)i));
        if (type[i] == 3 || (kind >= HF_SPM && type[i] == 2)) {
            cJSON *a = cJSON_CreateObject();
            cJSON_AddNumberToObject(a, "id", (double)i);
            cJSON_AddStringToObject(a, "content", buf);
            cJSON_AddBoolToObject(a, "special", 1);
            cJSON_AddItemToArray(added, a);
        }
    }
    if (kind >= HF_SPM) {
        cJSON_AddStringToObject(model, "type", "BPE");
        cJSON_AddBoolToObject(model, "byte_fallback", 1);
        cJSON_AddStringToObject(model, "unk_token", "<unk>");
        float *score = malloc(sizeof *score * n);
        loom_gguf_get_arr_f32(g, "tokenizer.ggml.scores", score, n);
        cJSON_AddItemToObject(model, "merges", spm_merges(tok, len, type, score, n));
        free(score);
        if (kind == HF_SPM) {  /* Llama 2's: Prepend("▁") and Replace(" ", "▁") */
            cJSON *nz = cJSON_AddObjectToObject(root, "normalizer"), *list = cJSON_AddArrayToObject(nz, "normalizers");
            cJSON_AddStringToObject(nz, "type", "Sequence");
            cJSON *pp = cJSON_CreateObject(), *rp = cJSON_CreateObject(), *pat = cJSON_CreateObject();
            cJSON_AddStringToObject(pp, "type", "Prepend");
            cJSON_AddStringToObject(pp, "prepend", "\xe2\x96\x81");
            cJSON_AddStringToObject(rp, "type", "Replace");
            cJSON_AddStringToObject(pat, "String", " ");
            cJSON_AddItemToObject(rp, "pattern", pat);
            cJSON_AddStringToObject(rp, "content", "\xe2\x96\x81");
            cJSON_AddItemToArray(list, pp);
            cJSON_AddItemToArray(list, rp);
        } else {  /* newer files: a Metaspace pre-tokenizer */
            cJSON *ms = cJSON_AddObjectToObject(root, "pre_tokenizer");
            cJSON_AddStringToObject(ms, "type", "Metaspace");
            cJSON_AddStringToObject(ms, "replacement", "\xe2\x96\x81");
            cJSON_AddStringToObject(ms, "prepend_scheme", "first");
            cJSON_AddBoolToObject(ms, "split", 0);
        }
    } else if (kind == HF_BERT) {
        cJSON_AddStringToObject(model, "type", "WordPiece");
        cJSON *nz = cJSON_AddObjectToObject(root, "normalizer");
        cJSON_AddStringToObject(nz, "type", "BertNormalizer");
        cJSON_AddBoolToObject(nz, "lowercase", 1);
        cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "pre_tokenizer"), "type", "BertPreTokenizer");
    } else {
        cJSON_AddStringToObject(model, "type", "BPE");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "pre_tokenizer"), "type", "ByteLevel");
        loom_gguf_get_arr_info(g, "tokenizer.ggml.merges", &et, &nm);
        const char **ms = malloc(sizeof *ms * nm);
        uint64_t *ml = malloc(sizeof *ml * nm);
        loom_gguf_get_arr_str(g, "tokenizer.ggml.merges", ms, ml, nm);
        cJSON *merges = cJSON_AddArrayToObject(model, "merges");
        for (uint64_t i = 0; i < nm; i++) {
            snprintf(buf, sizeof buf, "%.*s", (int)(ml[i] < 1000 ? ml[i] : 1000), ms[i]);
            cJSON_AddItemToArray(merges, cJSON_CreateString(buf));
        }
        free(ms);
        free(ml);
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    free(tok);
    free(len);
    free(type);
    loom_gguf_close(g);
    return text;
}

static void run_vectors(const char *name, int kind) {
    char *json = json_from_gguf(name, kind);
    CHECK_MSG(json != NULL, "%s: cannot build tokenizer.json", name);
    if (!json) return;
    loom_tokenizer *t = NULL;
    loom_status st = loom_tokenizer_load_hf_json_memory(json, strlen(json), NULL, 0, name, &t);
    CHECK_MSG(st == LOOM_OK, "%s: %s", name, loom_last_error());
    free(json);
    if (!t) return;
    CHECK(strcmp(loom_tokenizer_kind_name(t), kind >= HF_SPM ? "llama" : kind == HF_BERT ? "bert" : "gpt2") == 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.inp", vocab_dir, name);
    char *inp = read_all(path, NULL);
    snprintf(path, sizeof path, "%s/%s.out", vocab_dir, name);
    char *out = read_all(path, NULL);
    CHECK(inp && out);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int n = 0, ok = 0;
    char *p = inp, *line = out;
    for (char *q; inp && out && (q = strstr(p, sep)) != NULL; p = q + sizeof sep - 1, n++) {
        *q = '\0';
        char *eol = strchr(line, '\n');
        if (!eol) break;
        *eol = '\0';
        int32_t want[512], got[1024];
        int nw = 0, ng = 0;
        for (char *tk = strtok(line, " "); tk && nw < 512; tk = strtok(NULL, " ")) want[nw++] = atoi(tk);
        line = eol + 1;
        st = loom_tokenizer_encode_ex(t, p, strlen(p), 0, got, 1024, &ng);
        if (st == LOOM_OK && ng == nw && memcmp(got, want, sizeof(int32_t) * (size_t)nw) == 0) ok++;
        else {
            fprintf(stderr, "  %s case %d mismatch: '%.60s'\n   want", name, n, p);
            for (int i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n   got ");
            for (int i = 0; i < ng; i++) fprintf(stderr, " %d", got[i]);
            fprintf(stderr, "\n");
        }
    }
    fprintf(stderr, "  %s via tokenizer.json: %d / %d cases match\n", name, ok, n);
    CHECK(n > 10 && ok == n);
    if (kind == HF_BERT) {  /* [CLS] ... [SEP] framing */
        int32_t ids[8];
        int ni = 0;
        CHECK(loom_tokenizer_encode_ex(t, "hello", 5, LOOM_TOK_BOS | LOOM_TOK_EOS, ids, 8, &ni) == LOOM_OK);
        CHECK(ni == 3 && ids[0] == 101 && ids[2] == 102);
    }
    free(inp);
    free(out);
    loom_tokenizer_free(t);
}

static void test_bert_vectors(void) { run_vectors("ggml-vocab-bert-bge.gguf", HF_BERT); }
static void test_gpt2_vectors(void) { run_vectors("ggml-vocab-gpt-2.gguf", HF_GPT2); }
/* SentencePiece BPE (Llama 2's and Phi-3's vocabularies) from tokenizer.json: the ids llama.cpp
 * gives from their GGUFs, with the normalizer form and with the Metaspace form */
static void test_spm_vectors(void) {
    run_vectors("ggml-vocab-llama-spm.gguf", HF_SPM);
    run_vectors("ggml-vocab-phi-3.gguf", HF_SPM_METASPACE);
}

static void expect_bad(const char *json, loom_status want, const char *msg) {
    loom_tokenizer *t = (loom_tokenizer *)1;
    loom_status st = loom_tokenizer_load_hf_json_memory(json, strlen(json), NULL, 0, "bad", &t);
    CHECK_MSG(st == want, "%s: got %s (%s)", json, loom_status_str(st), loom_last_error());
    CHECK(t == NULL);
    CHECK_MSG(strstr(loom_last_error(), msg) != NULL, "'%s' not in '%s'", msg, loom_last_error());
}

static void test_bad_input(void) {
    const char *wp = "\"normalizer\":{\"type\":\"BertNormalizer\",\"lowercase\":true},"
                     "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"}";
    char buf[1024];
    expect_bad("{\"model\":", LOOM_ERR_FORMAT, "not valid JSON");
    expect_bad("{}", LOOM_ERR_FORMAT, "\"model\"");
    expect_bad("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", LOOM_ERR_UNSUPPORTED, "Unigram");
    snprintf(buf, sizeof buf, "{%s,\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0,\"b\":2}}}", wp);
    expect_bad(buf, LOOM_ERR_FORMAT, "no piece has id 1");
    snprintf(buf, sizeof buf, "{%s,\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0,\"b\":0}}}", wp);
    expect_bad(buf, LOOM_ERR_FORMAT, "used twice");
    snprintf(buf, sizeof buf, "{%s,\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":-1}}}", wp);
    expect_bad(buf, LOOM_ERR_FORMAT, "valid id");
    snprintf(buf, sizeof buf, "{%s,\"model\":{\"type\":\"WordPiece\",\"vocab\":[]}}", wp);
    expect_bad(buf, LOOM_ERR_FORMAT, "model.vocab");
    expect_bad("{\"normalizer\":{\"type\":\"BertNormalizer\",\"lowercase\":false},\"pre_tokenizer\":"
               "{\"type\":\"BertPreTokenizer\"},\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}",
               LOOM_ERR_UNSUPPORTED, "cased");
    expect_bad("{\"pre_tokenizer\":{\"type\":\"Whitespace\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},"
               "\"merges\":[]}}", LOOM_ERR_UNSUPPORTED, "ByteLevel");
    expect_bad("{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},"
               "\"merges\":[3]}}", LOOM_ERR_FORMAT, "merge 0");
    loom_tokenizer *t;
    CHECK(loom_tokenizer_load_hf_json("/nonexistent/tokenizer.json", &t) == LOOM_ERR_IO);
}

/* add_bos: the post-processor decides where it says (llama.cpp's converter's
 * rule, and what transformers applies): a TemplateProcessing whose single
 * template starts with a special token adds it as BOS (Llama 3:
 * <|begin_of_text|>, no add_bos_token in tokenizer_config.json); a ByteLevel
 * one adds none; without either, tokenizer_config.json's add_bos_token. */
static void bos_case(const char *post, const char *config, int want_add, int want_bos) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},%s"
             "\"added_tokens\":[{\"id\":0,\"content\":\"<s>\",\"special\":true},"
             "{\"id\":1,\"content\":\"<e>\",\"special\":true}],"
             "\"model\":{\"type\":\"BPE\",\"vocab\":{\"<s>\":0,\"<e>\":1,\"a\":2,\"b\":3},"
             "\"merges\":[]}}", post);
    loom_tokenizer *t = NULL;
    loom_status st = loom_tokenizer_load_hf_json_memory(json, strlen(json), config, config ? strlen(config) : 0,
                                                        "bos", &t);
    CHECK_MSG(st == LOOM_OK, "%s %s: %s", post, config ? config : "", loom_last_error());
    if (st != LOOM_OK) return;
    CHECK_MSG(loom_tokenizer_add_bos(t) == want_add && (!want_add || loom_tokenizer_bos(t) == want_bos),
              "post-processor %s, config %s: add_bos %d bos %d, expected %d %d", post, config ? config : "(none)",
              loom_tokenizer_add_bos(t), loom_tokenizer_bos(t), want_add, want_bos);
    loom_tokenizer_free(t);
}

static void test_add_bos(void) {
    const char *tmpl = "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
                       "{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}]},";
    const char *seq = "\"post_processor\":{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\"},"
                      "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\","
                      "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}]}]},";
    const char *plain = "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"Sequence\":"
                        "{\"id\":\"A\",\"type_id\":0}}]},";
    const char *bytelevel = "\"post_processor\":{\"type\":\"ByteLevel\"},";
    bos_case(tmpl, "{\"bos_token\":\"<s>\"}", 1, 0);                          /* Llama 3 */
    bos_case(tmpl, NULL, 1, 0);                                                 /* BOS named by the template */
    bos_case(seq, "{\"bos_token\":\"<s>\"}", 1, 0);                           /* in a Sequence */
    bos_case(tmpl, "{\"bos_token\":\"<e>\"}", 0, -1);                         /* not the BOS */
    bos_case(bytelevel, "{\"bos_token\":\"<s>\",\"add_bos_token\":true}", 0, -1); /* as llama.cpp */
    bos_case(plain, "{\"bos_token\":\"<s>\",\"add_bos_token\":true}", 1, 0); /* no leading special */
    bos_case("", "{\"bos_token\":\"<s>\",\"add_bos_token\":true}", 1, 0);
    bos_case("", "{\"bos_token\":\"<s>\"}", 0, -1);
}

int main(void) {
    const char *dir = getenv("LOOM_SHARED_DIR");
    snprintf(vocab_dir, sizeof vocab_dir, "%s/vocab", dir && *dir ? dir : "../shared");
    RUN_TEST(test_bad_input);
    RUN_TEST(test_add_bos);
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/ggml-vocab-bert-bge.gguf", vocab_dir);
    CHECK_NEED_FILE(probe, "set LOOM_SHARED_DIR to the shared folder");
    RUN_TEST(test_bert_vectors);
    RUN_TEST(test_gpt2_vectors);
    RUN_TEST(test_spm_vectors);
    return TEST_SUMMARY();
}
