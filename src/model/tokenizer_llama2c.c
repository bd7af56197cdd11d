/* Loader for llama2.c's tokenizer.bin: int32 max_token_length, then until EOF
 * per token: float32 score, int32 byte length, the bytes (little-endian). The
 * file does not store its token count; run.c takes it from the model, we take
 * whatever the file holds. */
#include "model/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/status.h"

/* llama2.c conventions: <unk> 0, <s> 1, </s> 2, bytes <0x00>..<0xFF> at 3..258. */
#define L2C_BOS 1
#define L2C_EOS 2
#define L2C_BYTE_BASE 3
#define L2C_MIN_VOCAB (L2C_BYTE_BASE + 256)

static uint32_t rd_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int32_t rd_i32(const unsigned char *p) {
    uint32_t u = rd_u32(p);
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static float rd_f32(const unsigned char *p) {
    uint32_t u = rd_u32(p);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Counts the entries and checks every header and length; fills the arrays
 * when they are non-NULL (second pass). */
static loom_status scan_entries(const char *path, const unsigned char *data, size_t size,
                                int *n_out, const char **pieces, uint32_t *lens,
                                float *scores) {
    size_t off = 4;
    int n = 0;
    while (off < size) {
        size_t left = size - off;
        LOOM_RETURN_IF(left < 8, LOOM_ERR_FORMAT,
                       "tokenizer '%s': token %d at byte offset %zu is truncated: "
                       "needs 8 header bytes, %zu left", path, n, off, left);
        int32_t len = rd_i32(data + off + 4);
        LOOM_RETURN_IF(len < 0, LOOM_ERR_FORMAT,
                       "tokenizer '%s': token %d at byte offset %zu has negative length %d",
                       path, n, off, (int)len);
        LOOM_RETURN_IF((size_t)len > left - 8, LOOM_ERR_FORMAT,
                       "tokenizer '%s': token %d at byte offset %zu is truncated: "
                       "length %d but %zu bytes left", path, n, off, (int)len, left - 8);
        LOOM_RETURN_IF(n == (1 << 28), LOOM_ERR_FORMAT,
                       "tokenizer '%s': more than %d tokens", path, 1 << 28);
        if (pieces) {
            scores[n] = rd_f32(data + off);
            lens[n] = (uint32_t)len;
            pieces[n] = (const char *)data + off + 8;
        }
        n++;
        off += 8 + (size_t)len;
    }
    *n_out = n;
    return LOOM_OK;
}

loom_status loom_tokenizer_load_llama2c(const char *path, loom_tokenizer **out) {
    LOOM_RETURN_IF(!path || !out, LOOM_ERR_INVALID_ARG, "tokenizer: path and out must not be NULL");
    *out = NULL;
    char *text;
    size_t size;
    LOOM_TRY(loom_read_file(path, (size_t)64 << 20, &text, &size)); /* a tokenizer is a few MB */
    unsigned char *data = (unsigned char *)text;

    loom_status st = LOOM_OK;
    const char **pieces = NULL;
    uint32_t *lens = NULL;
    float *scores = NULL;
    int n = 0;
    if (size == 0) {
        st = loom_set_error(LOOM_ERR_FORMAT, "tokenizer '%s': file is empty", path);
        goto done;
    }
    if (size < 4) {
        st = loom_set_error(LOOM_ERR_FORMAT,
                            "tokenizer '%s': %zu bytes, too short for the 4-byte header", path, size);
        goto done;
    }
    int32_t max_token_length = rd_i32(data);
    if (max_token_length <= 0) {
        st = loom_set_error(LOOM_ERR_FORMAT, "tokenizer '%s': max_token_length is %d, must be > 0",
                            path, (int)max_token_length);
        goto done;
    }
    st = scan_entries(path, data, size, &n, NULL, NULL, NULL);
    if (st != LOOM_OK) goto done;
    if (n == 0) {
        st = loom_set_error(LOOM_ERR_FORMAT, "tokenizer '%s': holds no tokens", path);
        goto done;
    }
    if (n < L2C_MIN_VOCAB) {
        st = loom_set_error(LOOM_ERR_FORMAT,
                            "tokenizer '%s': %d tokens, but llama2.c byte fallback needs ids "
                            "%d..%d (at least %d tokens)", path, n, L2C_BYTE_BASE,
                            L2C_MIN_VOCAB - 1, L2C_MIN_VOCAB);
        goto done;
    }
    pieces = malloc(sizeof *pieces * (size_t)n);
    lens = malloc(sizeof *lens * (size_t)n);
    scores = malloc(sizeof *scores * (size_t)n);
    if (!pieces || !lens || !scores) {
        st = loom_set_error(LOOM_ERR_NOMEM, "tokenizer '%s': out of memory for %d tokens", path, n);
        goto done;
    }
    st = scan_entries(path, data, size, &n, pieces, lens, scores);
    if (st != LOOM_OK) goto done;

    loom_tokenizer_vocab v = {
        .n = n, .pieces = pieces, .lens = lens, .scores = scores,
        .bos = L2C_BOS, .eos = L2C_EOS, .byte_base = L2C_BYTE_BASE,
    };
    st = loom_tokenizer_create_scored_bpe(&v, out);

done:
    free(pieces);
    free(lens);
    free(scores);
    free(data);
    return st;
}
