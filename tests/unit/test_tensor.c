/* Tensor descriptors, views, dtype table and status strings. */
#include <string.h>

#include "base/status.h"
#include "check.h"
#include "loom.h"

static void test_init_and_views(void) {
    float data[2 * 3 * 4];
    for (int i = 0; i < 24; i++) data[i] = (float)i;
    loom_tensor t, v;
    int64_t shape[3] = {2, 3, 4};
    CHECK(loom_tensor_init(&t, LOOM_F32, 3, shape, data) == LOOM_OK);
    CHECK(t.stride[0] == 12 && t.stride[1] == 4 && t.stride[2] == 1);
    CHECK(t.shape[3] == 1);
    CHECK(loom_tensor_nelem(&t) == 24);
    CHECK(loom_tensor_nbytes(&t) == 96);
    CHECK(loom_tensor_is_contiguous(&t));
    CHECK(loom_tensor_view_rows(&t, 1, 1, &v) == LOOM_OK);
    CHECK(((float *)v.data)[0] == 12.0f && v.shape[0] == 1 && loom_tensor_nbytes(&v) == 48);
    CHECK(loom_tensor_view_rows(&t, 1, 2, &v) == LOOM_ERR_SHAPE);
    CHECK(strstr(loom_last_error(), "view_rows") != NULL);
    int perm[3] = {2, 0, 1};
    CHECK(loom_tensor_permute(&t, perm, &v) == LOOM_OK);
    CHECK(v.shape[0] == 4 && v.shape[1] == 2 && v.shape[2] == 3);
    CHECK(v.stride[0] == 1 && v.stride[1] == 12 && v.stride[2] == 4);
    CHECK(!loom_tensor_is_contiguous(&v));
    /* element [k][i][j] of the view is t[i][j][k] */
    const float *p = v.data;
    CHECK(p[3 * v.stride[0] + 1 * v.stride[1] + 2 * v.stride[2]] == data[1 * 12 + 2 * 4 + 3]);
    int bad[3] = {0, 0, 1};
    CHECK(loom_tensor_permute(&t, bad, &v) == LOOM_ERR_INVALID_ARG);
    int64_t flat[2] = {6, 4};
    CHECK(loom_tensor_reshape(&t, 2, flat, &v) == LOOM_OK && v.shape[0] == 6 && v.stride[0] == 4);
    int64_t wrong[2] = {5, 4};
    CHECK(loom_tensor_reshape(&t, 2, wrong, &v) == LOOM_ERR_SHAPE);
    CHECK(loom_tensor_permute(&t, perm, &v) == LOOM_OK);
    CHECK(loom_tensor_reshape(&v, 2, flat, &v) == LOOM_ERR_SHAPE);  /* not contiguous */
    int64_t neg[1] = {-1};
    CHECK(loom_tensor_init(&t, LOOM_F32, 1, neg, data) == LOOM_ERR_SHAPE);
    CHECK(loom_tensor_init(&t, LOOM_F32, 5, shape, data) == LOOM_ERR_SHAPE);
    CHECK(loom_tensor_init(&t, (loom_dtype)99, 1, shape, data) == LOOM_ERR_DTYPE);
    loom_tensor_set_name(&t, "blk.%d.%s", 3, "attn_q");
    CHECK(strcmp(t.name, "blk.3.attn_q") == 0);
}

static void test_dtypes(void) {
    CHECK(loom_dtype_size(LOOM_F32) == 4 && loom_dtype_size(LOOM_BF16) == 2 && loom_dtype_size(LOOM_I8) == 1);
    CHECK(loom_dtype_size(LOOM_Q4_0) == 0);
    CHECK(loom_dtype_block_bytes(LOOM_Q8_0) == 34 && loom_dtype_block_bytes(LOOM_Q4_0) == 18 &&
          loom_dtype_block_bytes(LOOM_Q4_1) == 20);
    CHECK(loom_dtype_block_elems(LOOM_Q4_1) == 32 && loom_dtype_block_elems(LOOM_F16) == 1);
    CHECK(loom_dtype_row_bytes(LOOM_Q4_0, 4096) == 128 * 18);
    CHECK(loom_dtype_row_bytes(LOOM_F16, 10) == 20);
    CHECK(strcmp(loom_dtype_name(LOOM_Q8_0), "q8_0") == 0);
    CHECK(strcmp(loom_dtype_name((loom_dtype)77), "unknown") == 0);
    loom_tensor t, v;
    int64_t shape[2] = {3, 64}, bad[2] = {3, 48};
    static unsigned char blocks[3 * 2 * 18];
    CHECK(loom_tensor_init(&t, LOOM_Q4_0, 2, shape, blocks) == LOOM_OK);
    CHECK(loom_tensor_nbytes(&t) == sizeof blocks);
    CHECK(loom_tensor_view_rows(&t, 2, 1, &v) == LOOM_OK);
    CHECK((unsigned char *)v.data == blocks + 2 * 2 * 18);
    CHECK(loom_tensor_init(&t, LOOM_Q4_0, 2, bad, blocks) == LOOM_ERR_SHAPE);
}

static void test_status(void) {
    CHECK(strcmp(loom_status_str(LOOM_OK), "LOOM_OK") == 0);
    CHECK(strcmp(loom_status_str(LOOM_ERR_FORMAT), "LOOM_ERR_FORMAT") == 0);
    CHECK(strcmp(loom_status_str((loom_status)1000), "LOOM_ERR_UNKNOWN") == 0);
    for (int s = 0; s < LOOM_STATUS_COUNT; s++) CHECK(loom_status_str((loom_status)s)[0] == 'L');
    CHECK(loom_set_error(LOOM_ERR_IO, "file %s at %d", "x.bin", 7) == LOOM_ERR_IO);
    CHECK(strcmp(loom_last_error(), "file x.bin at 7") == 0);
    loom_clear_error();
    CHECK(loom_last_error()[0] == '\0');
}

int main(void) {
    RUN_TEST(test_init_and_views);
    RUN_TEST(test_dtypes);
    RUN_TEST(test_status);
    return TEST_SUMMARY();
}
