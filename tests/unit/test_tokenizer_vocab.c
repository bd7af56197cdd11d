/* Tokenizers from GGUF vocabularies against llama.cpp's test vectors (ids
 * produced by Hugging Face's tokenizers): ../shared/vocab/NAME.gguf with
 * NAME.gguf.inp (cases separated by "\n__ggml_vocab_test__\n") and
 * NAME.gguf.out (one line of ids per case, no BOS). Every case must match. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "base/file.h"
#include "base/timer.h"
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

typedef struct vcase {
    const char *text;   /* points into the .inp buffer, NUL-terminated in place */
    size_t len;
    int32_t ids[512];
    int n_ids;
} vcase;

/* Splits inp at the separators and parses out; returns the case count. */
static int load_cases(const char *name, char **inp_buf, char **out_buf, vcase *cases, int max) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.inp", vocab_dir, name);
    size_t inp_n;
    *inp_buf = read_all(path, &inp_n);
    snprintf(path, sizeof path, "%s/%s.out", vocab_dir, name);
    *out_buf = read_all(path, NULL);
    if (!*inp_buf || !*out_buf) return 0;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int n = 0;
    char *p = *inp_buf, *line = *out_buf;
    for (char *q; n < max && (q = strstr(p, sep)) != NULL; p = q + sizeof sep - 1) {
        *q = '\0';
        cases[n].text = p;
        cases[n].len = (size_t)(q - p);
        char *eol = strchr(line, '\n');
        if (!eol) break;
        *eol = '\0';
        cases[n].n_ids = 0;
        for (char *tok = strtok(line, " "); tok && cases[n].n_ids < 512; tok = strtok(NULL, " "))
            cases[n].ids[cases[n].n_ids++] = (int32_t)strtol(tok, NULL, 10);
        line = eol + 1;
        n++;
    }
    return n;
}

static void print_ids(const char *what, const int32_t *ids, int n) {
    fprintf(stderr, "    %s:", what);
    for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Concatenated decode of ids (the first as the start of a text). */
static char *decode_all(const loom_tokenizer *t, const int32_t *ids, int n) {
    size_t cap = 64, len = 0;
    char *s = malloc(cap);
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *p = loom_tokenizer_decode(t, i ? ids[i - 1] : -1, ids[i], &l);
        if (!p) break;
        while (len + l + 1 > cap) s = realloc(s, cap *= 2);
        memcpy(s + len, p, l);
        len += l;
    }
    s[len] = '\0';
    return s;
}

static void run_vocab(const char *name, const char *kind, int lossless) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", vocab_dir, name);
    loom_tokenizer *t = NULL;
    loom_status st = loom_tokenizer_load(path, &t);
    CHECK_MSG(st == LOOM_OK, "%s: %s", name, loom_last_error());
    if (!t) return;
    CHECK(strcmp(loom_tokenizer_kind_name(t), kind) == 0);
    static vcase cases[128];
    char *inp, *out;
    int n = load_cases(name, &inp, &out, cases, 128);
    CHECK_MSG(n > 0, "%s: no test cases read", name);
    int ok = 0, round = 0;
    for (int c = 0; c < n; c++) {
        int32_t ids[1024];
        int n_ids = 0;
        st = loom_tokenizer_encode_ex(t, cases[c].text, cases[c].len, 0, ids, 1024, &n_ids);
        int same = st == LOOM_OK && n_ids == cases[c].n_ids &&
                   memcmp(ids, cases[c].ids, sizeof(int32_t) * (size_t)n_ids) == 0;
        if (same) {
            ok++;
        } else {
            fprintf(stderr, "  %s case %d mismatch (%s): '%.60s'\n", name, c, loom_status_str(st),
                    cases[c].text);
            print_ids("expected", cases[c].ids, cases[c].n_ids);
            print_ids("got     ", ids, n_ids);
        }
        if (lossless && st == LOOM_OK) {
            char *back = decode_all(t, ids, n_ids);
            if (strlen(back) == cases[c].len && memcmp(back, cases[c].text, cases[c].len) == 0) round++;
            else fprintf(stderr, "  %s case %d: decode gives '%.60s'\n", name, c, back);
            free(back);
        }
    }
    fprintf(stderr, "  %s: %d / %d cases match%s", name, ok, n, lossless ? "" : "\n");
    if (lossless) fprintf(stderr, ", %d / %d decode round trips\n", round, n);
    CHECK(ok == n);
    if (lossless) CHECK(round == n);
    free(inp);
    free(out);
    loom_tokenizer_free(t);
}

static void test_llama_spm(void) { run_vocab("ggml-vocab-llama-spm.gguf", "llama", 1); }
static void test_phi3(void) { run_vocab("ggml-vocab-phi-3.gguf", "llama", 1); }
static void test_gpt2(void) { run_vocab("ggml-vocab-gpt-2.gguf", "gpt2", 1); }
static void test_bert(void) { run_vocab("ggml-vocab-bert-bge.gguf", "bert", 0); }

static loom_tokenizer *load(const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", vocab_dir, name);
    loom_tokenizer *t = NULL;
    CHECK_MSG(loom_tokenizer_load_gguf(path, &t) == LOOM_OK, "%s", loom_last_error());
    return t;
}

/* BOS/EOS flags and the vocabulary's defaults. */
static void test_special_ids(void) {
    int32_t ids[64];
    int n;
    loom_tokenizer *spm = load("ggml-vocab-llama-spm.gguf");
    loom_tokenizer *bert = load("ggml-vocab-bert-bge.gguf");
    loom_tokenizer *gpt2 = load("ggml-vocab-gpt-2.gguf");
    if (!spm || !bert || !gpt2) goto done;
    CHECK(loom_tokenizer_bos(spm) == 1 && loom_tokenizer_eos(spm) == 2 && loom_tokenizer_unk(spm) == 0);
    CHECK(loom_tokenizer_add_bos(spm) == 1 && loom_tokenizer_add_eos(spm) == 0);
    CHECK(loom_tokenizer_encode(spm, "Hello world", 1, 1, ids, 64, &n) == LOOM_OK && n == 4 &&
          ids[0] == 1 && ids[1] == 15043 && ids[2] == 3186 && ids[3] == 2);
    CHECK(loom_tokenizer_encode(spm, "", 1, 0, ids, 64, &n) == LOOM_OK && n == 1 && ids[0] == 1);
    /* A U+2581 in the text is a space, as SentencePiece sees it. */
    int32_t ids2[64];
    int n2;
    CHECK(loom_tokenizer_encode(spm, "Hello\xe2\x96\x81world", 0, 0, ids, 64, &n) == LOOM_OK &&
          loom_tokenizer_encode(spm, "Hello world", 0, 0, ids2, 64, &n2) == LOOM_OK && n == n2 &&
          memcmp(ids, ids2, sizeof(int32_t) * (size_t)n) == 0);
    /* BERT: [CLS] text [SEP] by default. */
    CHECK(loom_tokenizer_bos(bert) == 101 && loom_tokenizer_eos(bert) == 102 && loom_tokenizer_unk(bert) == 100);
    CHECK(loom_tokenizer_add_bos(bert) == 1 && loom_tokenizer_add_eos(bert) == 1);
    CHECK(loom_tokenizer_encode(bert, "Hello world", 1, 1, ids, 64, &n) == LOOM_OK && n == 4 &&
          ids[0] == 101 && ids[1] == 7592 && ids[2] == 2088 && ids[3] == 102);
    /* GPT-2: no BOS by default; <|endoftext|> is a control token. */
    CHECK(loom_tokenizer_add_bos(gpt2) == 0 && loom_tokenizer_eos(gpt2) == 50256);
    CHECK(loom_tokenizer_is_control(gpt2, 50256) && !loom_tokenizer_is_control(gpt2, 15496));
    const char *txt = "Hi<|endoftext|>";
    CHECK(loom_tokenizer_encode_ex(gpt2, txt, strlen(txt), LOOM_TOK_PARSE_SPECIAL, ids, 64, &n) == LOOM_OK &&
          n == 2 && ids[1] == 50256);
    CHECK(loom_tokenizer_encode_ex(gpt2, txt, strlen(txt), 0, ids, 64, &n) == LOOM_OK && n > 2);
    size_t l;
    CHECK(loom_tokenizer_decode(gpt2, 0, 50256, &l) != NULL && l == 0);  /* control: nothing */
    /* Too small an output reports the size needed. */
    CHECK(loom_tokenizer_encode(bert, "Hello world", 1, 1, ids, 2, &n) == LOOM_ERR_INVALID_ARG && n == 4);
done:
    loom_tokenizer_free(spm);
    loom_tokenizer_free(bert);
    loom_tokenizer_free(gpt2);
}

/* Invalid UTF-8 is an error naming the offset, for every GGUF kind. */
static void test_invalid_utf8(void) {
    const char *names[] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-bert-bge.gguf"};
    const char *bad[] = {"ab\xff", "\xc3", "a\xed\xa0\x80", "\xc0\xaf", "x\xf4\x90\x80\x80"};
    for (int i = 0; i < 3; i++) {
        loom_tokenizer *t = load(names[i]);
        if (!t) continue;
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            int32_t ids[16];
            int n;
            loom_status st = loom_tokenizer_encode(t, bad[k], 1, 0, ids, 16, &n);
            CHECK_MSG(st == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "UTF-8"),
                      "%s case %zu: %s", names[i], k, loom_last_error());
        }
        loom_tokenizer_free(t);
    }
}

/* Decoding byte-level tokens gives bytes: a codepoint split over tokens
 * reassembles only when concatenated. */
static void test_gpt2_bytes(void) {
    loom_tokenizer *t = load("ggml-vocab-gpt-2.gguf");
    if (!t) return;
    const char *s = " \xf0\x9f\xa6\x99 caf\xc3\xa9\n\tx";
    int32_t ids[64];
    int n;
    CHECK(loom_tokenizer_encode(t, s, 0, 0, ids, 64, &n) == LOOM_OK);
    char *back = decode_all(t, ids, n);
    CHECK(strcmp(back, s) == 0);
    free(back);
    size_t l;
    const char *p = loom_tokenizer_decode(t, -1, 220, &l);  /* "Ġ" is one space byte */
    CHECK(p && l == 1 && p[0] == ' ');
    loom_tokenizer_free(t);
}

/* Phi-3: user-defined pieces ("</s>") match whole in any text; control
 * pieces ("<|user|>") only when asked, with a dummy prefix after them. */
static void test_phi3_specials(void) {
    loom_tokenizer *t = load("ggml-vocab-phi-3.gguf");
    if (!t) return;
    int32_t ids[64];
    int n;
    const char *a = "Hi</s>";
    CHECK(loom_tokenizer_encode_ex(t, a, strlen(a), 0, ids, 64, &n) == LOOM_OK && n >= 2 && ids[n - 1] == 2);
    const char *b = "<|user|>Hello";
    CHECK(loom_tokenizer_encode_ex(t, b, strlen(b), LOOM_TOK_PARSE_SPECIAL, ids, 64, &n) == LOOM_OK &&
          n == 2 && ids[0] == 32010 && ids[1] == 15043);
    CHECK(loom_tokenizer_encode_ex(t, b, strlen(b), 0, ids, 64, &n) == LOOM_OK && n > 2 && ids[0] != 32010);
    loom_tokenizer_free(t);
}

/* BERT normaliser details, with ids from Hugging Face's BertNormalizer +
 * BertPreTokenizer + WordPiece on the same vocabulary. */
static void test_bert_normaliser(void) {
    loom_tokenizer *t = load("ggml-vocab-bert-bge.gguf");
    if (!t) return;
    static const struct { const char *text; int n; int32_t ids[8]; } cases[] = {
        {"go\xc2\x85home", 3, {2175, 23393, 2063}},          /* U+0085 is a control: dropped */
        {"\xef\xa7\x84", 1, {1982}},                           /* compatibility ideograph -> NFD */
        {"x\xe2\x96\x81y", 1, {100}},                         /* a U+2581 in the text is no word start */
        {"pl\xee\x80\x80" "ay", 1, {2377}},                      /* private use: dropped */
        {"\xf1\x83\x8c\xb3 ok", 2, {100, 7929}},              /* unassigned: kept, so [UNK] */
        {"\xc4\xb0stanbul CAF\xc3\x89", 2, {9960, 7668}},       /* accents stripped, lowercased */
        {"\xed\x95\x9c\xea\xb5\xad", 6, {1469, 30006, 30021, 29991, 30014, 30020}},  /* Hangul -> jamo */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t ids[64];
        int n = 0;
        loom_status st = loom_tokenizer_encode(t, cases[i].text, 0, 0, ids, 64, &n);
        CHECK_MSG(st == LOOM_OK && n == cases[i].n && memcmp(ids, cases[i].ids, sizeof(int32_t) * (size_t)n) == 0,
                  "case %zu: %d ids, first %d", i, n, n ? ids[0] : -1);
    }
    char long_word[128];
    memset(long_word, 'a', 101);
    strcpy(long_word + 101, " b");  /* > 100 characters: one [UNK] */
    int32_t ids[8];
    int n = 0;
    CHECK(loom_tokenizer_encode(t, long_word, 0, 0, ids, 8, &n) == LOOM_OK && n == 2 && ids[0] == 100 && ids[1] == 1038);
    loom_tokenizer_free(t);
}

/* ------------------------------------------- synthetic byte-level vocabularies */

/* GPT-2's byte -> codepoint table, written independently of the library. */
static uint32_t b2u(int b) {
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    if (printable) return (uint32_t)b;
    int k = 0;
    for (int x = 0; x < b; x++) k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
    return 256u + (uint32_t)k;
}

static size_t put_utf8(uint32_t c, char *o) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    o[0] = (char)(0xC0 | c >> 6);
    o[1] = (char)(0x80 | (c & 0x3F));
    return 2;
}

/* A GGUF "gpt2" vocabulary: the 256 byte pieces plus one piece per merge
 * ("a b" written in plain ASCII; ' ' and '\n' inside are mapped). */
static loom_tokenizer *tiny_bpe(const char *pre, const char *const *merges, int n_merges) {
    static char store[300][16], mstore[16][32];
    const char *pieces[300], *ms[16];
    int n = 0;
    for (int b = 0; b < 256; b++, n++) {
        size_t k = put_utf8(b2u(b), store[n]);
        store[n][k] = '\0';
        pieces[n] = store[n];
    }
    for (int i = 0; i < n_merges; i++) {
        size_t k = 0, m = 0;
        for (const char *c = merges[i]; *c; c++) {
            if (*c == ' ') { mstore[i][m++] = ' '; continue; }
            char u[2];
            size_t l = put_utf8(b2u(*c == '_' ? ' ' : (unsigned char)*c), u);
            memcpy(store[n] + k, u, l);
            memcpy(mstore[i] + m, u, l);
            k += l;
            m += l;
        }
        store[n][k] = mstore[i][m] = '\0';
        pieces[n] = store[n];
        n++;
        ms[i] = mstore[i];
    }
    loom_gguf_writer *w;
    loom_tokenizer *t = NULL;
    void *data = NULL;
    size_t size;
    CHECK(loom_gguf_writer_init(&w) == LOOM_OK);
    CHECK(loom_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2") == LOOM_OK);
    CHECK(loom_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre) == LOOM_OK);
    CHECK(loom_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", pieces, NULL, (uint64_t)n) == LOOM_OK);
    CHECK(loom_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", ms, NULL, (uint64_t)n_merges) == LOOM_OK);
    CHECK(loom_gguf_writer_write_memory(w, &data, &size) == LOOM_OK);
    CHECK_MSG(loom_tokenizer_load_gguf_memory(data, size, pre, &t) == LOOM_OK, "%s", loom_last_error());
    free(data);
    loom_gguf_writer_free(w);
    return t;
}

/* Pieces of text's tokens, decoded to bytes and joined with '|'. */
static void pieces_of(const loom_tokenizer *t, const char *text, char *out, size_t cap) {
    int32_t ids[64];
    int n = 0;
    out[0] = '\0';
    if (loom_tokenizer_encode(t, text, 0, 0, ids, 64, &n) != LOOM_OK) {
        snprintf(out, cap, "error: %s", loom_last_error());
        return;
    }
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *p = loom_tokenizer_decode(t, -1, ids[i], &l);
        len += (size_t)snprintf(out + len, cap - len, "%s%.*s", i ? "|" : "", (int)l, p);
    }
}

static void test_pretokenizers(void) {
    static const char *const merges[] = {"3 3", "33 3", "' R", "'R E", "R E", "! !", "!! \n", "\n \n", "_ y",
                                         "1 2", "' s", "_ '", "_' s", "' S"};
    const int nm = (int)(sizeof merges / sizeof merges[0]);
    static const struct { const char *text, *gpt2, *smollm, *llama3; } cases[] = {
        {"3333", "33|33", "3|3|3|3", "333|3"},
        {"'RE", "'|RE", "'|RE", "'RE"},
        {"a  y", "a| | y", "a| | y", "a| | y"},
        {"x!!\n\nz", "x|!!|\n|\n|z", "x|!!|\n|\n|z", "x|!!\n|\n|z"},
        {" 12", " |12", " |1|2", " |12"},
        {"'s 's", "'s| '|s", "'s| '|s", "'s| '|s"},
        {"'S x", "'|S| |x", "'|S| |x", "'S| |x"},
    };
    const char *pres[3] = {"gpt-2", "smollm", "llama-bpe"};
    for (int p = 0; p < 3; p++) {
        loom_tokenizer *t = tiny_bpe(pres[p], merges, nm);
        if (!t) continue;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const char *want = p == 0 ? cases[i].gpt2 : p == 1 ? cases[i].smollm : cases[i].llama3;
            char got[256];
            pieces_of(t, cases[i].text, got, sizeof got);
            CHECK_MSG(strcmp(got, want) == 0, "%s '%s': got '%s', want '%s'", pres[p], cases[i].text, got, want);
        }
        loom_tokenizer_free(t);
    }
    loom_tokenizer *t = NULL;
    loom_gguf_writer *w;
    void *data;
    size_t size;
    const char *tok[1] = {"a"};
    CHECK(loom_gguf_writer_init(&w) == LOOM_OK);
    CHECK(loom_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2") == LOOM_OK);
    CHECK(loom_gguf_writer_set_str(w, "tokenizer.ggml.pre", "mystery") == LOOM_OK);
    CHECK(loom_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, NULL, 1) == LOOM_OK);
    CHECK(loom_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", tok, NULL, 0) == LOOM_OK);
    CHECK(loom_gguf_writer_write_memory(w, &data, &size) == LOOM_OK);
    CHECK(loom_tokenizer_load_gguf_memory(data, size, "x", &t) == LOOM_ERR_UNSUPPORTED &&
          strstr(loom_last_error(), "mystery"));
    free(data);
    loom_gguf_writer_free(w);
}

/* Ids of text[0..len) (no BOS/EOS) into a malloc'd array; NULL on error. */
static int32_t *ids_of(const loom_tokenizer *t, const char *text, size_t len, int *n) {
    int32_t *ids = malloc(sizeof *ids * (len + 4));
    if (ids && loom_tokenizer_encode_ex(t, text, len, 0, ids, (int)len + 4, n) == LOOM_OK) return ids;
    free(ids);
    return NULL;
}

/* Random text over pieces that exercise every pre-token class (letters,
 * spaces and newlines of several lengths, contractions, punctuation,
 * multibyte letters); digits only when digits is set. */
static size_t random_text(char *buf, size_t cap, unsigned *seed, int digits) {
    static const char *const alpha[] = {"a", "bc", " ", "  ", "\n", "\n\n", "\t", "'s", "'re", "!", "?!",
                                        "\xc3\xa9", " x", "\r\n", "...", "Hi", " yo", "\xe6\x97\xa5", "'"};
    static const char *const digit[] = {"1", "23", " 4", "5x"};
    size_t n = 0;
    for (;;) {
        *seed = *seed * 1103515245u + 12345u;
        unsigned r = *seed >> 8;
        const char *p = digits && r % 5 == 0 ? digit[(r / 5) % 4] : alpha[(r / 5) % (sizeof alpha / sizeof *alpha)];
        size_t l = strlen(p);
        if (n + l >= cap) break;
        memcpy(buf + n, p, l);
        n += l;
    }
    buf[n] = '\0';
    return n;
}

/* SmolLM's pre-tokenizer is GPT-2's regex between digits, each digit alone:
 * its ids are GPT-2's ids of the digit-free segments and of each digit. The
 * reference below tokenizes each segment on its own; and a large digit-free
 * text (which once took minutes: the next digit was searched again for every
 * pre-token) takes linear time. */
static void test_smollm_pretokenizer(void) {
    static const char *const merges[] = {"b c", "_ x", "' s", "2 3", "H i", "_ y", "y o"};
    loom_tokenizer *smol = tiny_bpe("smollm", merges, 7), *gpt2 = tiny_bpe("gpt-2", merges, 7);
    if (!smol || !gpt2) {
        loom_tokenizer_free(smol);
        loom_tokenizer_free(gpt2);
        return;
    }
    unsigned seed = 1;
    char text[512];
    int bad = 0;
    for (int c = 0; c < 300 && !bad; c++) {
        size_t len = random_text(text, 1 + (size_t)(c % 300) + 40, &seed, 1);
        int n = 0, k = 0;
        int32_t *got = ids_of(smol, text, len, &n), *want = malloc(sizeof *want * (len + 4));
        for (size_t i = 0; got && want && i < len;) {
            size_t e = i;
            if (text[i] >= '0' && text[i] <= '9') e = i + 1;
            else
                while (e < len && !(text[e] >= '0' && text[e] <= '9')) e++;
            int m = 0;
            int32_t *seg = ids_of(gpt2, text + i, e - i, &m);
            if (seg) memcpy(want + k, seg, sizeof *seg * (size_t)m);
            k += m;
            free(seg);
            i = e;
        }
        bad = !got || !want || n != k || memcmp(got, want, sizeof *got * (size_t)n) != 0;
        CHECK_MSG(!bad, "smollm vs per-segment gpt-2 on '%s': %d vs %d ids", text, n, k);
        free(got);
        free(want);
    }
    size_t big = (size_t)1 << 20;
    char *huge = malloc(big + 1);
    if (huge) {
        size_t len = random_text(huge, big + 1, &seed, 0);
        int n = 0, m = 0;
        double t0 = loom_time_s();
        int32_t *a = ids_of(smol, huge, len, &n);
        double dt = loom_time_s() - t0;
        int32_t *b = ids_of(gpt2, huge, len, &m);
        CHECK_MSG(a && b && n == m && memcmp(a, b, sizeof *a * (size_t)n) == 0,
                  "1 MiB without digits: smollm %d ids, gpt-2 %d ids", n, m);
        /* linear: ~0.1 s (1 s under the sanitizers); the quadratic search took over a minute */
        CHECK_MSG(dt < 15.0, "1 MiB without digits took %.1f s", dt);
        free(a);
        free(b);
        free(huge);
    }
    loom_tokenizer_free(smol);
    loom_tokenizer_free(gpt2);
}

int main(void) {
    const char *dir = getenv("LOOM_SHARED_DIR");
    snprintf(vocab_dir, sizeof vocab_dir, "%s/vocab", dir && *dir ? dir : "../shared");
    RUN_TEST(test_pretokenizers);  /* needs no shared files */
    RUN_TEST(test_smollm_pretokenizer);
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/ggml-vocab-gpt-2.gguf", vocab_dir);
    CHECK_NEED_FILE(probe, "set LOOM_SHARED_DIR to the shared folder");
    RUN_TEST(test_llama_spm);
    RUN_TEST(test_phi3);
    RUN_TEST(test_gpt2);
    RUN_TEST(test_bert);
    RUN_TEST(test_special_ids);
    RUN_TEST(test_invalid_utf8);
    RUN_TEST(test_gpt2_bytes);
    RUN_TEST(test_phi3_specials);
    RUN_TEST(test_bert_normaliser);
    return TEST_SUMMARY();
}
