/* GGUF reader and writer: writer -> reader round trips of every value and
 * tensor type, hand-built v2/v3 files, and corrupt files (every truncation,
 * impossible counts and lengths, bad offsets, types, duplicates, magic and
 * version), each of which must fail with a message and without a crash or
 * a leak (run under ASan). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

/* ------------------------------------------------- a little byte writer */

typedef struct bw {
    unsigned char b[8192];
    size_t n;
} bw;

static void put_n(bw *w, uint64_t v, int n) {
    for (int i = 0; i < n; i++) w->b[w->n++] = (unsigned char)(v >> (8 * i));
}
static void put_u32(bw *w, uint32_t v) { put_n(w, v, 4); }
static void put_u64(bw *w, uint64_t v) { put_n(w, v, 8); }
static void put_str(bw *w, const char *s) {
    put_u64(w, strlen(s));
    memcpy(w->b + w->n, s, strlen(s));
    w->n += strlen(s);
}
static void put_header(bw *w, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    memcpy(w->b, "GGUF", 4);
    w->n = 4;
    put_u32(w, version);
    put_u64(w, n_tensors);
    put_u64(w, n_kv);
}
static void put_kv_u32(bw *w, const char *key, uint32_t v) {
    put_str(w, key);
    put_u32(w, LOOM_GGUF_UINT32);
    put_u32(w, v);
}
static void put_tensor_info(bw *w, const char *name, int n_dims, const uint64_t *ne, uint32_t type,
                            uint64_t offset) {
    put_str(w, name);
    put_u32(w, (uint32_t)n_dims);
    for (int d = 0; d < n_dims; d++) put_u64(w, ne[d]);
    put_u32(w, type);
    put_u64(w, offset);
}
static void put_pad(bw *w, size_t a) {
    while (w->n % a) w->b[w->n++] = 0;
}

/* Opening b must fail with status want (any error when want is LOOM_OK)
 * and a message naming the file. */
static void expect_fail_(const bw *w, loom_status want, const char *needle, int line) {
    loom_gguf *g = (loom_gguf *)1;
    loom_clear_error();
    loom_status st = loom_gguf_open_memory(w->b, w->n, "bad.gguf", &g);
    int ok = st != LOOM_OK && g == NULL && (want == LOOM_OK || st == want) &&
             strstr(loom_last_error(), "bad.gguf") && (!needle || strstr(loom_last_error(), needle));
    CHECK_MSG(ok, "line %d: status %s, message '%s'", line, loom_status_str(st), loom_last_error());
    if (st == LOOM_OK) loom_gguf_close(g);
}
#define expect_fail(w, want, needle) expect_fail_((w), (want), (needle), __LINE__)

/* ------------------------------------------------------ round trips */

static const char *const strs[] = {"alpha", "", "\xe2\x96\x81hello", "x y z"};

/* A writer holding every value type and tensors of every supported type. */
static loom_gguf_writer *full_writer(uint32_t version, uint32_t alignment, float *f32, uint16_t *f16,
                                     unsigned char *q) {
    loom_gguf_writer *w;
    CHECK(loom_gguf_writer_init(&w) == LOOM_OK);
    CHECK(loom_gguf_writer_set_version(w, version) == LOOM_OK);
    if (alignment != 32) CHECK(loom_gguf_writer_set_alignment(w, alignment) == LOOM_OK);
    CHECK(loom_gguf_writer_set_u8(w, "v.u8", 250) == LOOM_OK);
    CHECK(loom_gguf_writer_set_i8(w, "v.i8", -100) == LOOM_OK);
    CHECK(loom_gguf_writer_set_u16(w, "v.u16", 65000) == LOOM_OK);
    CHECK(loom_gguf_writer_set_i16(w, "v.i16", -30000) == LOOM_OK);
    CHECK(loom_gguf_writer_set_u32(w, "v.u32", 4000000000u) == LOOM_OK);
    CHECK(loom_gguf_writer_set_i32(w, "v.i32", -2000000000) == LOOM_OK);
    CHECK(loom_gguf_writer_set_u64(w, "v.u64", UINT64_MAX) == LOOM_OK);
    CHECK(loom_gguf_writer_set_i64(w, "v.i64", INT64_MIN) == LOOM_OK);
    CHECK(loom_gguf_writer_set_f32(w, "v.f32", 1.5f) == LOOM_OK);
    CHECK(loom_gguf_writer_set_f64(w, "v.f64", -2.25) == LOOM_OK);
    CHECK(loom_gguf_writer_set_bool(w, "v.bool", 1) == LOOM_OK);
    CHECK(loom_gguf_writer_set_str(w, "v.str", "hello gguf") == LOOM_OK);
    CHECK(loom_gguf_writer_set_str_n(w, "v.str0", "a\0b", 3) == LOOM_OK);
    const int32_t ai[3] = {1, -2, 3};
    const float af[2] = {0.5f, -1.0f};
    const uint8_t ab[3] = {1, 0, 1};
    const int64_t al[2] = {-5, 1LL << 40};
    const double ad[1] = {3.125};
    const uint16_t au[2] = {7, 65535};
    CHECK(loom_gguf_writer_set_arr(w, "a.i32", LOOM_GGUF_INT32, ai, 3) == LOOM_OK);
    CHECK(loom_gguf_writer_set_arr(w, "a.f32", LOOM_GGUF_FLOAT32, af, 2) == LOOM_OK);
    CHECK(loom_gguf_writer_set_arr(w, "a.bool", LOOM_GGUF_BOOL, ab, 3) == LOOM_OK);
    CHECK(loom_gguf_writer_set_arr(w, "a.i64", LOOM_GGUF_INT64, al, 2) == LOOM_OK);
    CHECK(loom_gguf_writer_set_arr(w, "a.f64", LOOM_GGUF_FLOAT64, ad, 1) == LOOM_OK);
    CHECK(loom_gguf_writer_set_arr(w, "a.u16", LOOM_GGUF_UINT16, au, 2) == LOOM_OK);
    CHECK(loom_gguf_writer_set_arr(w, "a.empty", LOOM_GGUF_UINT8, NULL, 0) == LOOM_OK);
    CHECK(loom_gguf_writer_set_arr_str(w, "a.str", strs, NULL, 4) == LOOM_OK);
    /* Nested: an array of two arrays of uint8 ({1,2} and {}). */
    bw nest = {.n = 0};
    put_u32(&nest, LOOM_GGUF_UINT8);
    put_u64(&nest, 2);
    nest.b[nest.n++] = 1;
    nest.b[nest.n++] = 2;
    put_u32(&nest, LOOM_GGUF_UINT8);
    put_u64(&nest, 0);
    CHECK(loom_gguf_writer_set_arr_raw(w, "a.nested", LOOM_GGUF_ARRAY, 2, nest.b, nest.n) == LOOM_OK);

    for (int i = 0; i < 64; i++) {
        f32[i] = (float)i * 0.25f - 3.0f;
        f16[i] = loom_f32_to_f16(f32[i]);
    }
    for (int i = 0; i < 4 * 34; i++) q[i] = (unsigned char)(i * 7 + 3);
    const int64_t s2[2] = {4, 16}, s1[1] = {64}, sq[2] = {2, 64}, s4[4] = {2, 1, 1, 32}, sk[1] = {256};
    CHECK(loom_gguf_writer_add_tensor(w, "t.f32", LOOM_GGML_F32, 2, s2, f32, 256) == LOOM_OK);
    CHECK(loom_gguf_writer_add_tensor(w, "t.f16", LOOM_GGML_F16, 1, s1, f16, 128) == LOOM_OK);
    CHECK(loom_gguf_writer_add_tensor(w, "t.bf16", LOOM_GGML_BF16, 1, s1, f16, 128) == LOOM_OK);
    CHECK(loom_gguf_writer_add_tensor(w, "t.q8_0", LOOM_GGML_Q8_0, 2, sq, q, 4 * 34) == LOOM_OK);
    CHECK(loom_gguf_writer_add_tensor(w, "t.q4_0", LOOM_GGML_Q4_0, 2, sq, q, 4 * 18) == LOOM_OK);
    CHECK(loom_gguf_writer_add_tensor(w, "t.q4_1", LOOM_GGML_Q4_1, 4, s4, q, 2 * 20) == LOOM_OK);
    /* A size that does not follow from shape and type is refused. */
    CHECK(loom_gguf_writer_add_tensor(w, "t.q4_K", LOOM_GGML_Q4_K, 1, sk, q, 136) == LOOM_ERR_SHAPE);
    return w;
}

static void check_full(const loom_gguf *g, uint32_t version, uint32_t alignment, const float *f32,
                       const uint16_t *f16, const unsigned char *q) {
    CHECK(loom_gguf_version(g) == version);
    CHECK(loom_gguf_alignment(g) == alignment);
    CHECK(loom_gguf_data_offset(g) % alignment == 0);
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f;
    double d;
    int b;
    const char *s;
    size_t sl;
    CHECK(loom_gguf_get_u32(g, "v.u8", &u32) == LOOM_OK && u32 == 250);  /* widening */
    CHECK(loom_gguf_get_i32(g, "v.i8", &i32) == LOOM_OK && i32 == -100);
    CHECK(loom_gguf_get_u32(g, "v.u16", &u32) == LOOM_OK && u32 == 65000);
    CHECK(loom_gguf_get_i32(g, "v.i16", &i32) == LOOM_OK && i32 == -30000);
    CHECK(loom_gguf_get_u32(g, "v.u32", &u32) == LOOM_OK && u32 == 4000000000u);
    CHECK(loom_gguf_get_i64(g, "v.u32", &i64) == LOOM_OK && i64 == 4000000000LL);
    CHECK(loom_gguf_get_i32(g, "v.i32", &i32) == LOOM_OK && i32 == -2000000000);
    CHECK(loom_gguf_get_u64(g, "v.u64", &u64) == LOOM_OK && u64 == UINT64_MAX);
    CHECK(loom_gguf_get_i64(g, "v.i64", &i64) == LOOM_OK && i64 == INT64_MIN);
    CHECK(loom_gguf_get_f32(g, "v.f32", &f) == LOOM_OK && f == 1.5f);
    CHECK(loom_gguf_get_f64(g, "v.f64", &d) == LOOM_OK && d == -2.25);
    CHECK(loom_gguf_get_f32(g, "v.f64", &f) == LOOM_OK && f == -2.25f);
    CHECK(loom_gguf_get_bool(g, "v.bool", &b) == LOOM_OK && b == 1);
    CHECK(loom_gguf_get_str(g, "v.str", &s, &sl) == LOOM_OK && sl == 10 && memcmp(s, "hello gguf", 10) == 0);
    CHECK(loom_gguf_get_str(g, "v.str0", &s, &sl) == LOOM_OK && sl == 3 && memcmp(s, "a\0b", 3) == 0);
    /* Mismatches and range errors name the key. */
    CHECK(loom_gguf_get_u32(g, "v.str", &u32) == LOOM_ERR_FORMAT && strstr(loom_last_error(), "v.str"));
    CHECK(loom_gguf_get_u32(g, "v.i8", &u32) == LOOM_ERR_FORMAT && strstr(loom_last_error(), "-100"));
    CHECK(loom_gguf_get_i32(g, "v.u64", &i32) == LOOM_ERR_FORMAT);
    CHECK(loom_gguf_get_i64(g, "v.u64", &i64) == LOOM_ERR_FORMAT);
    CHECK(loom_gguf_get_u64(g, "v.i64", &u64) == LOOM_ERR_FORMAT);
    CHECK(loom_gguf_get_bool(g, "v.u8", &b) == LOOM_ERR_FORMAT);
    CHECK(loom_gguf_get_str(g, "v.bool", &s, &sl) == LOOM_ERR_FORMAT);
    CHECK(loom_gguf_get_f32(g, "v.i32", &f) == LOOM_ERR_FORMAT);
    CHECK(loom_gguf_get_u32(g, "no.such.key", &u32) == LOOM_ERR_FORMAT && strstr(loom_last_error(), "no.such.key"));
    CHECK(loom_gguf_find_key(g, "no.such.key") == -1 && loom_gguf_find_key(g, "v.u8") >= 0);

    int32_t ai[3];
    float af[2];
    loom_gguf_type et;
    uint64_t n;
    CHECK(loom_gguf_get_arr_i32(g, "a.i32", ai, 3) == LOOM_OK && ai[0] == 1 && ai[1] == -2 && ai[2] == 3);
    CHECK(loom_gguf_get_arr_i32(g, "a.i32", ai, 2) == LOOM_ERR_FORMAT);  /* count mismatch */
    CHECK(loom_gguf_get_arr_i32(g, "a.i64", ai, 2) == LOOM_ERR_FORMAT);  /* 2^40 does not fit */
    CHECK(loom_gguf_get_arr_i32(g, "a.u16", ai, 2) == LOOM_OK && ai[1] == 65535);
    CHECK(loom_gguf_get_arr_f32(g, "a.f32", af, 2) == LOOM_OK && af[0] == 0.5f && af[1] == -1.0f);
    CHECK(loom_gguf_get_arr_f32(g, "a.f64", af, 1) == LOOM_OK && af[0] == 3.125f);
    CHECK(loom_gguf_get_arr_f32(g, "a.i32", af, 3) == LOOM_ERR_FORMAT);
    CHECK(loom_gguf_get_arr_i32(g, "a.empty", NULL, 0) == LOOM_OK);
    CHECK(loom_gguf_get_arr_info(g, "a.bool", &et, &n) == LOOM_OK && et == LOOM_GGUF_BOOL && n == 3);
    CHECK(loom_gguf_get_arr_info(g, "v.u8", &et, &n) == LOOM_ERR_FORMAT);
    CHECK(loom_gguf_get_arr_info(g, "a.nested", &et, &n) == LOOM_OK && et == LOOM_GGUF_ARRAY && n == 2);
    const char *sv[4];
    uint64_t sn[4];
    CHECK(loom_gguf_get_arr_str(g, "a.str", sv, sn, 4) == LOOM_OK);
    for (int i = 0; i < 4; i++) CHECK(sn[i] == strlen(strs[i]) && memcmp(sv[i], strs[i], sn[i]) == 0);
    char buf[256];
    int64_t k = loom_gguf_find_key(g, "a.i32");
    CHECK(strcmp(loom_gguf_kv_format(g, k, buf, sizeof buf), "[3 x int32: 1, -2, 3]") == 0);
    CHECK(strcmp(loom_gguf_kv_format(g, loom_gguf_find_key(g, "v.str"), buf, sizeof buf), "\"hello gguf\"") == 0);
    CHECK(loom_gguf_kv_type(g, k) == LOOM_GGUF_ARRAY && loom_gguf_kv_arr_type(g, k) == LOOM_GGUF_INT32);
    CHECK(loom_gguf_kv_arr_n(g, k) == 3 && strcmp(loom_gguf_kv_key(g, k), "a.i32") == 0);
    for (int64_t i = 0; i < loom_gguf_n_kv(g); i++) CHECK(loom_gguf_kv_format(g, i, buf, 24) == buf);

    CHECK(loom_gguf_n_tensors(g) == 6);
    loom_tensor t;
    CHECK(loom_gguf_get_tensor(g, "t.f32", &t) == LOOM_OK && t.dtype == LOOM_F32 && t.ndim == 2 &&
          t.shape[0] == 4 && t.shape[1] == 16 && strcmp(t.name, "t.f32") == 0 &&
          memcmp(t.data, f32, 256) == 0 && (uintptr_t)t.data % alignment == 0);
    CHECK(loom_gguf_get_tensor(g, "t.f16", &t) == LOOM_OK && t.dtype == LOOM_F16 && memcmp(t.data, f16, 128) == 0);
    CHECK(loom_gguf_get_tensor(g, "t.bf16", &t) == LOOM_OK && t.dtype == LOOM_BF16 && t.shape[0] == 64);
    CHECK(loom_gguf_get_tensor(g, "t.q8_0", &t) == LOOM_OK && t.dtype == LOOM_Q8_0 && t.shape[0] == 2 &&
          t.shape[1] == 64 && memcmp(t.data, q, 4 * 34) == 0);
    CHECK(loom_gguf_get_tensor(g, "t.q4_0", &t) == LOOM_OK && t.dtype == LOOM_Q4_0 && memcmp(t.data, q, 72) == 0);
    CHECK(loom_gguf_get_tensor(g, "t.q4_1", &t) == LOOM_OK && t.dtype == LOOM_Q4_1 && t.ndim == 4 &&
          t.shape[0] == 2 && t.shape[3] == 32 && memcmp(t.data, q, 40) == 0);
    CHECK(loom_gguf_get_tensor(g, "nope", &t) == LOOM_ERR_FORMAT && strstr(loom_last_error(), "nope"));
    loom_gguf_tensor_info info;
    int64_t ti = loom_gguf_find_tensor(g, "t.q8_0");
    CHECK(loom_gguf_tensor_info_at(g, ti, &info) == LOOM_OK && info.ne[0] == 64 && info.ne[1] == 2 &&
          info.nbytes == 4 * 34 && info.ggml_type == LOOM_GGML_Q8_0 && info.offset % alignment == 0);
    CHECK(loom_gguf_tensor_info_at(g, 99, &info) == LOOM_ERR_INVALID_ARG);
}

static void test_round_trip(void) {
    static float f32[64];
    static uint16_t f16[64];
    static unsigned char q[4 * 34];
    const uint32_t versions[2] = {2, 3}, aligns[2] = {32, 64};
    for (int v = 0; v < 2; v++) {
        loom_gguf_writer *w = full_writer(versions[v], aligns[v], f32, f16, q);
        void *data;
        size_t size;
        CHECK(loom_gguf_writer_write_memory(w, &data, &size) == LOOM_OK);
        loom_gguf *g = NULL;
        /* Copy into an aligned buffer: tensor views must be aligned in memory. */
        void *al = aligned_alloc(64, (size + 63) / 64 * 64);
        memcpy(al, data, size);
        CHECK_MSG(loom_gguf_open_memory(al, size, "mem.gguf", &g) == LOOM_OK, "%s", loom_last_error());
        if (g) check_full(g, versions[v], aligns[v], f32, f16, q);
        loom_gguf_close(g);
        /* The same through a file and mmap. */
        char path[] = "/tmp/loom_test_gguf_XXXXXX";
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        close(fd);
        CHECK(loom_gguf_writer_write_file(w, path) == LOOM_OK);
        CHECK_MSG(loom_gguf_open(path, &g) == LOOM_OK, "%s", loom_last_error());
        if (g) check_full(g, versions[v], aligns[v], f32, f16, q);
        loom_gguf_close(g);
        /* A GGUF without tokenizer metadata is no tokenizer. */
        loom_tokenizer *tok;
        CHECK(loom_tokenizer_load(path, &tok) == LOOM_ERR_FORMAT && tok == NULL &&
              strstr(loom_last_error(), "tokenizer.ggml.model"));
        unlink(path);
        free(al);
        free(data);
        loom_gguf_writer_free(w);
    }
}

/* A known type loom does not compute with opens, and is refused by name. */
static void test_unsupported_type(void) {
    static unsigned char q[2 * 210];
    loom_gguf_writer *w;
    CHECK(loom_gguf_writer_init(&w) == LOOM_OK);
    const int64_t s[2] = {2, 256};
    CHECK(loom_gguf_writer_add_tensor(w, "blk.0.ffn_down.weight", LOOM_GGML_Q6_K, 2, s, q, sizeof q) == LOOM_OK);
    void *data;
    size_t size;
    CHECK(loom_gguf_writer_write_memory(w, &data, &size) == LOOM_OK);
    loom_gguf *g = NULL;
    CHECK(loom_gguf_open_memory(data, size, "k.gguf", &g) == LOOM_OK);
    loom_tensor t;
    CHECK(g && loom_gguf_tensor_at(g, 0, &t) == LOOM_ERR_UNSUPPORTED &&
          strstr(loom_last_error(), "blk.0.ffn_down.weight") && strstr(loom_last_error(), "q6_K"));
    loom_gguf_close(g);
    free(data);
    loom_gguf_writer_free(w);
}

static void test_writer_errors(void) {
    loom_gguf_writer *w;
    CHECK(loom_gguf_writer_init(&w) == LOOM_OK);
    float x[32] = {0};
    const int64_t s[1] = {32}, s0[1] = {0};
    CHECK(loom_gguf_writer_set_u32(w, "k", 1) == LOOM_OK);
    CHECK(loom_gguf_writer_set_str(w, "k", "again") == LOOM_ERR_INVALID_ARG);
    CHECK(loom_gguf_writer_set_u32(w, "", 1) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_gguf_writer_set_alignment(w, 48) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_gguf_writer_set_version(w, 1) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_gguf_writer_set_arr(w, "s", LOOM_GGUF_STRING, x, 1) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_gguf_writer_add_tensor(w, "x", LOOM_GGML_F32, 1, s, x, sizeof x) == LOOM_OK);
    CHECK(loom_gguf_writer_add_tensor(w, "x", LOOM_GGML_F32, 1, s, x, sizeof x) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_gguf_writer_add_tensor(w, "y", LOOM_GGML_F32, 1, s, x, 64) == LOOM_ERR_SHAPE);
    CHECK(loom_gguf_writer_add_tensor(w, "y", LOOM_GGML_F32, 1, s0, x, 0) == LOOM_ERR_SHAPE);
    CHECK(loom_gguf_writer_add_tensor(w, "y", LOOM_GGML_Q8_0, 1, (const int64_t[]){31}, x, 34) == LOOM_ERR_SHAPE);
    CHECK(loom_gguf_writer_add_tensor(w, "y", 200, 1, s, x, 128) == LOOM_ERR_INVALID_ARG);
    char longname[80];
    memset(longname, 'n', 64);
    longname[64] = '\0';
    CHECK(loom_gguf_writer_add_tensor(w, longname, LOOM_GGML_F32, 1, s, x, sizeof x) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_gguf_writer_write_file(w, "/nonexistent/dir/x.gguf") == LOOM_ERR_IO);
    loom_gguf_writer_free(w);
    loom_gguf *g;
    CHECK(loom_gguf_open("/nonexistent/x.gguf", &g) == LOOM_ERR_IO && g == NULL);
}

/* ------------------------------------------------- hand-built files */

/* v2 or v3 with three entries and one 4x2 f32 tensor, alignment 32. */
static void build_small(bw *w, uint32_t version) {
    put_header(w, version, 1, 3);
    put_str(w, "general.architecture");
    put_u32(w, LOOM_GGUF_STRING);
    put_str(w, "llama");
    put_kv_u32(w, "a.u32", 7);
    put_str(w, "a.arr");
    put_u32(w, LOOM_GGUF_ARRAY);
    put_u32(w, LOOM_GGUF_INT16);
    put_u64(w, 3);
    put_n(w, (uint16_t)-1, 2);
    put_n(w, 2, 2);
    put_n(w, (uint16_t)-3, 2);
    const uint64_t ne[2] = {4, 2};
    put_tensor_info(w, "w", 2, ne, LOOM_GGML_F32, 0);
    put_pad(w, 32);
    for (int i = 0; i < 8; i++) {
        float f = (float)i;
        uint32_t u;
        memcpy(&u, &f, 4);
        put_u32(w, u);
    }
}

static void test_hand_built(void) {
    for (uint32_t v = 2; v <= 3; v++) {
        static bw w;
        build_small(&w, v);
        loom_gguf *g = NULL;
        CHECK_MSG(loom_gguf_open_memory(w.b, w.n, "hand.gguf", &g) == LOOM_OK, "%s", loom_last_error());
        if (!g) continue;
        const char *s;
        size_t sl;
        uint32_t u;
        int32_t a[3];
        CHECK(loom_gguf_version(g) == v && loom_gguf_n_kv(g) == 3 && loom_gguf_n_tensors(g) == 1);
        CHECK(loom_gguf_get_str(g, "general.architecture", &s, &sl) == LOOM_OK && sl == 5 && !memcmp(s, "llama", 5));
        CHECK(loom_gguf_get_u32(g, "a.u32", &u) == LOOM_OK && u == 7);
        CHECK(loom_gguf_get_arr_i32(g, "a.arr", a, 3) == LOOM_OK && a[0] == -1 && a[1] == 2 && a[2] == -3);
        loom_tensor t;
        CHECK(loom_gguf_get_tensor(g, "w", &t) == LOOM_OK && t.shape[0] == 2 && t.shape[1] == 4 &&
              ((const float *)t.data)[5] == 5.0f && t.stride[0] == 4);
        loom_gguf_close(g);
    }
}

/* --------------------------------------------------------- corruption */

/* Every proper prefix of a valid file fails cleanly. */
static void test_truncation(void) {
    static float f32[64];
    static uint16_t f16[64];
    static unsigned char q[4 * 34];
    loom_gguf_writer *w = full_writer(3, 32, f32, f16, q);
    void *data;
    size_t size;
    CHECK(loom_gguf_writer_write_memory(w, &data, &size) == LOOM_OK);
    /* The last tensor (q4_1, 40 bytes) is padded to 64: drop the padding so
     * that every shorter prefix cuts real content. */
    size -= 24;
    loom_gguf *g = NULL;
    CHECK(loom_gguf_open_memory(data, size, "t.gguf", &g) == LOOM_OK);
    loom_gguf_close(g);
    int bad = 0;
    for (size_t n = 0; n < size; n++) {
        unsigned char *copy = malloc(n ? n : 1);  /* exact size: ASan sees any overread */
        memcpy(copy, data, n);
        g = NULL;
        loom_clear_error();
        loom_status st = loom_gguf_open_memory(copy, n, "t.gguf", &g);
        if (st == LOOM_OK || g || !strstr(loom_last_error(), "t.gguf")) {
            if (bad++ < 5) fprintf(stderr, "prefix %zu: %s '%s'\n", n, loom_status_str(st), loom_last_error());
        }
        loom_gguf_close(g);
        free(copy);
    }
    CHECK_MSG(bad == 0, "%d of %zu prefixes did not fail cleanly", bad, size);
    free(data);
    loom_gguf_writer_free(w);
}

/* Byte flips anywhere must never crash (any status is fine). */
static void test_mutations(void) {
    static bw w;
    build_small(&w, 3);
    const unsigned char vals[] = {0x00, 0xff, 0x80, 0x7f, 0x01, 0x20};
    int opened = 0;
    for (size_t i = 0; i < w.n; i++) {
        for (size_t k = 0; k < sizeof vals; k++) {
            unsigned char *copy = malloc(w.n);
            memcpy(copy, w.b, w.n);
            copy[i] = vals[k];
            loom_gguf *g = NULL;
            if (loom_gguf_open_memory(copy, w.n, "m.gguf", &g) == LOOM_OK) {
                opened++;
                char buf[128];
                for (int64_t j = 0; j < loom_gguf_n_kv(g); j++) loom_gguf_kv_format(g, j, buf, sizeof buf);
                loom_tensor t;
                for (int64_t j = 0; j < loom_gguf_n_tensors(g); j++) loom_gguf_tensor_at(g, j, &t);
            }
            loom_gguf_close(g);
            free(copy);
        }
    }
    CHECK(opened > 0);
}

static void test_corrupt(void) {
    static bw w;
    const uint64_t ne2[2] = {4, 2}, ne1[1] = {32};

    w.n = 0;
    expect_fail(&w, LOOM_ERR_FORMAT, "magic");
    build_small(&w, 3);
    memcpy(w.b, "GGML", 4);
    expect_fail(&w, LOOM_ERR_FORMAT, "magic");
    build_small(&w, 1);
    expect_fail(&w, LOOM_ERR_UNSUPPORTED, "version 1");
    build_small(&w, 4);
    expect_fail(&w, LOOM_ERR_UNSUPPORTED, "version 4");
    build_small(&w, 0x03000000u);  /* a big-endian v3 read as little-endian */
    expect_fail(&w, LOOM_ERR_UNSUPPORTED, "big-endian");

    /* Counts no file could hold. */
    put_header(&w, 3, 0, UINT64_MAX / 2);
    expect_fail(&w, LOOM_ERR_FORMAT, "metadata count");
    put_header(&w, 3, 1ull << 62, 0);
    expect_fail(&w, LOOM_ERR_FORMAT, "tensor count");
    /* A count that fits the file but runs past its entries. */
    put_header(&w, 3, 0, 3);
    put_kv_u32(&w, "a", 1);
    put_u64(&w, 1000);
    memset(w.b + w.n, 'k', 40);
    w.n += 40;
    expect_fail(&w, LOOM_ERR_FORMAT, "truncated");

    /* Lengths past the end. */
    put_header(&w, 3, 0, 1);
    put_u64(&w, 1ull << 63);
    w.n += 16;
    expect_fail(&w, LOOM_ERR_FORMAT, "truncated");
    put_header(&w, 3, 0, 1);
    put_str(&w, "s");
    put_u32(&w, LOOM_GGUF_STRING);
    put_u64(&w, 100);
    w.n += 10;
    expect_fail(&w, LOOM_ERR_FORMAT, "'s'");
    put_header(&w, 3, 0, 1);
    put_str(&w, "arr");
    put_u32(&w, LOOM_GGUF_ARRAY);
    put_u32(&w, LOOM_GGUF_UINT64);
    put_u64(&w, 1ull << 61);
    expect_fail(&w, LOOM_ERR_FORMAT, "arr");
    put_header(&w, 3, 0, 1);
    put_str(&w, "arr");
    put_u32(&w, LOOM_GGUF_ARRAY);
    put_u32(&w, LOOM_GGUF_STRING);
    put_u64(&w, 3);
    put_str(&w, "ok");
    put_u64(&w, UINT64_MAX);
    expect_fail(&w, LOOM_ERR_FORMAT, "arr");

    /* Bad types, keys, nesting. */
    put_header(&w, 3, 0, 1);
    put_str(&w, "k");
    put_u32(&w, 13);
    put_u32(&w, 0);
    expect_fail(&w, LOOM_ERR_FORMAT, "value type 13");
    put_header(&w, 3, 0, 1);
    put_str(&w, "k");
    put_u32(&w, LOOM_GGUF_ARRAY);
    put_u32(&w, 99);
    put_u64(&w, 0);
    expect_fail(&w, LOOM_ERR_FORMAT, "element type 99");
    put_header(&w, 3, 0, 1);
    put_str(&w, "");
    put_u32(&w, LOOM_GGUF_UINT8);
    put_n(&w, 1, 1);
    w.n += 8;
    expect_fail(&w, LOOM_ERR_FORMAT, "invalid key");
    put_header(&w, 3, 0, 1);
    put_str(&w, "deep");
    put_u32(&w, LOOM_GGUF_ARRAY);
    for (int i = 0; i < 20; i++) {
        put_u32(&w, LOOM_GGUF_ARRAY);
        put_u64(&w, 1);
    }
    put_u32(&w, LOOM_GGUF_UINT8);
    put_u64(&w, 0);
    expect_fail(&w, LOOM_ERR_FORMAT, "deeper");

    /* Duplicates. */
    put_header(&w, 3, 0, 2);
    put_kv_u32(&w, "dup", 1);
    put_kv_u32(&w, "dup", 2);
    expect_fail(&w, LOOM_ERR_FORMAT, "duplicate key 'dup'");
    put_header(&w, 3, 2, 0);
    put_tensor_info(&w, "t", 1, ne1, LOOM_GGML_F32, 0);
    put_tensor_info(&w, "t", 1, ne1, LOOM_GGML_F32, 128);
    put_pad(&w, 32);
    w.n += 256;
    expect_fail(&w, LOOM_ERR_FORMAT, "duplicate tensor name 't'");

    /* Alignment. */
    put_header(&w, 3, 0, 1);
    put_kv_u32(&w, "general.alignment", 48);
    expect_fail(&w, LOOM_ERR_FORMAT, "power of two");
    put_header(&w, 3, 0, 1);
    put_str(&w, "general.alignment");
    put_u32(&w, LOOM_GGUF_UINT64);
    put_u64(&w, 32);
    expect_fail(&w, LOOM_ERR_FORMAT, "uint32");

    /* Tensor infos and data. */
    struct { int n_dims; uint64_t ne[4]; uint32_t type; uint64_t off; size_t data; loom_status st; const char *needle; } cases[] = {
        {2, {4, 2}, LOOM_GGML_F32, 32, 32, LOOM_ERR_FORMAT, "extend past"},       /* outside the data */
        {2, {4, 2}, LOOM_GGML_F32, 8, 64, LOOM_ERR_FORMAT, "alignment"},          /* misaligned */
        {2, {4, 2}, 200, 0, 64, LOOM_ERR_UNSUPPORTED, "type id 200"},             /* unknown type */
        {2, {4, 2}, 4, 0, 64, LOOM_ERR_UNSUPPORTED, "type id 4"},                 /* a removed type id */
        {0, {0}, LOOM_GGML_F32, 0, 64, LOOM_ERR_FORMAT, "dims"},                  /* no dims */
        {5, {1, 1, 1, 1}, LOOM_GGML_F32, 0, 64, LOOM_ERR_FORMAT, "dims"},          /* too many dims */
        {2, {4, 0}, LOOM_GGML_F32, 0, 64, LOOM_ERR_FORMAT, "dim 1"},              /* empty dim */
        {1, {48}, LOOM_GGML_Q8_0, 0, 64, LOOM_ERR_FORMAT, "multiple"},             /* partial block */
        {2, {1ull << 62, 1ull << 62}, LOOM_GGML_F32, 0, 64, LOOM_ERR_FORMAT, "overflow"},
        {1, {1ull << 40}, LOOM_GGML_F32, 0, 64, LOOM_ERR_FORMAT, "extend past"},   /* larger than the file */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        put_header(&w, 3, 1, 0);
        put_tensor_info(&w, "bad.tensor", cases[i].n_dims, cases[i].ne, cases[i].type, cases[i].off);
        put_pad(&w, 32);
        memset(w.b + w.n, 0, cases[i].data);
        w.n += cases[i].data;
        expect_fail(&w, cases[i].st, cases[i].needle);
        if (cases[i].n_dims >= 1 && cases[i].n_dims <= 4) expect_fail(&w, LOOM_OK, "bad.tensor");
    }
    /* Overlap. */
    put_header(&w, 3, 2, 0);
    put_tensor_info(&w, "a", 2, ne2, LOOM_GGML_F32, 0);
    put_tensor_info(&w, "b", 1, ne1, LOOM_GGML_F32, 0);
    put_pad(&w, 32);
    w.n += 128;
    expect_fail(&w, LOOM_ERR_FORMAT, "overlap");
    /* Data section that would start past the end. */
    put_header(&w, 3, 1, 0);
    put_tensor_info(&w, "a", 2, ne2, LOOM_GGML_F32, 0);
    expect_fail(&w, LOOM_ERR_FORMAT, NULL);
    /* A name longer than ggml allows. */
    put_header(&w, 3, 1, 0);
    char longname[70];
    memset(longname, 'x', 64);
    longname[64] = '\0';
    put_tensor_info(&w, longname, 1, ne1, LOOM_GGML_F32, 0);
    put_pad(&w, 32);
    w.n += 128;
    expect_fail(&w, LOOM_ERR_FORMAT, "invalid name");
}

int main(void) {
    RUN_TEST(test_round_trip);
    RUN_TEST(test_unsupported_type);
    RUN_TEST(test_writer_errors);
    RUN_TEST(test_hand_built);
    RUN_TEST(test_truncation);
    RUN_TEST(test_mutations);
    RUN_TEST(test_corrupt);
    return TEST_SUMMARY();
}
