/* Vectorised copy (f32/f16/bf16 conversions) and get_rows (f32/f16/bf16 and
 * quantized tables) against the reference at every level this CPU runs:
 * every f16/bf16 pattern, f32 rounding boundaries, views, bad ids, threads. */
#include "test_vec_common.h"

#include "ops/quant.h"

static loom_isa levels[LOOM_ISA_COUNT];
static int n_levels;

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* copy of x into a contiguous dtype-dt tensor of x's shape, at every level, bit-exact */
static void copy_case(const loom_tensor *x, loom_dtype dt, const char *what) {
    loom_copy_attrs at = {dt};
    loom_tensor tmpl;
    tensor_init_(&tmpl, dt, NULL, x->shape, x->ndim);
    const loom_tensor *src[1] = {x};
    for (int l = 0; l < n_levels; l++) compare_op(LOOM_OP_COPY, src, 1, &at, &tmpl, levels[l], -1, what);
}

/* All 65536 f16 and bf16 patterns to f32 (NaNs, subnormals, infinities included). */
static void test_copy_half_to_f32_exhaustive(void) {
    uint16_t *h = malloc(65536 * sizeof *h);
    float *want = falloc(65536), *got = falloc(65536);
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    for (int pass = 0; pass < 2; pass++) {
        loom_dtype dt = pass ? LOOM_BF16 : LOOM_F16;
        loom_tensor tx, ty;
        TENSOR(tx, dt, h, 65536);
        copy_case(&tx, LOOM_F32, pass ? "bf16 -> f32, all patterns" : "f16 -> f32, all patterns");
        /* and against the scalar conversion directly, not only the reference kernel */
        for (int i = 0; i < 65536; i++)
            want[i] = pass ? loom_bf16_to_f32((uint16_t)i) : loom_f16_to_f32((uint16_t)i);
        TENSOR(ty, LOOM_F32, got, 65536);
        loom_copy_attrs at = {LOOM_F32};
        const loom_tensor *src[1] = {&tx};
        for (int l = 0; l < n_levels; l++) {
            memset(got, 0xFF, 65536 * sizeof(float));
            CHECK(loom_op_run(LOOM_OP_COPY, src, 1, &at, &ty, levels[l]) == LOOM_OK);
            CHECK_MSG(memcmp(got, want, 65536 * sizeof(float)) == 0, "%s -> f32 at %s",
                      loom_dtype_name(dt), loom_isa_name(levels[l]));
        }
    }
    free(h);
    free(want);
    free(got);
}

/* f32 -> f16/bf16 on every rounding boundary of both formats plus random bits. */
static void test_copy_f32_to_half(void) {
    int64_t cap = 65536 * 14 + 300000, n = 0;
    float *x = falloc(cap);
    for (uint32_t i = 0; i < 65536; i++) {
        /* f16: the value, its neighbours, and the midpoints to the next half (ties) */
        uint32_t b = f2u(loom_f16_to_f32((uint16_t)i));
        float next = loom_f16_to_f32((uint16_t)(i + 1));
        uint32_t mid = f2u((float)(((double)u2f(b) + (double)next) / 2.0));
        const uint32_t hv[] = {b, b - 1, b + 1, mid, mid - 1, mid + 1, b ^ 0x1000u, b | 0x1fffu};
        for (int k = 0; k < 8; k++) x[n++] = u2f(hv[k]);
        /* bf16: below, at and above the halfway point of the 16 dropped bits */
        uint32_t w = i << 16;
        const uint32_t bv[] = {w, w + 1, w + 0x7fff, w + 0x8000, w + 0x8001, w + 0xffff};
        for (int k = 0; k < 6; k++) x[n++] = u2f(bv[k]);
    }
    loom_rng r;
    loom_rng_init(&r, 61, 0);
    while (n < cap) x[n++] = u2f(loom_rng_u32(&r));
    loom_tensor tx;
    TENSOR(tx, LOOM_F32, x, n);
    copy_case(&tx, LOOM_F16, "f32 -> f16 boundaries");
    copy_case(&tx, LOOM_BF16, "f32 -> bf16 boundaries");
    /* direct comparison with the scalar conversions */
    uint16_t *got = malloc((size_t)n * 2), *want = malloc((size_t)n * 2);
    for (int pass = 0; pass < 2; pass++) {
        loom_dtype dt = pass ? LOOM_BF16 : LOOM_F16;
        for (int64_t i = 0; i < n; i++) want[i] = pass ? loom_f32_to_bf16(x[i]) : loom_f32_to_f16(x[i]);
        loom_tensor ty;
        TENSOR(ty, dt, got, n);
        loom_copy_attrs at = {dt};
        const loom_tensor *src[1] = {&tx};
        for (int l = 0; l < n_levels; l++) {
            CHECK(loom_op_run(LOOM_OP_COPY, src, 1, &at, &ty, levels[l]) == LOOM_OK);
            CHECK_MSG(memcmp(got, want, (size_t)n * 2) == 0, "f32 -> %s at %s", loom_dtype_name(dt),
                      loom_isa_name(levels[l]));
        }
    }
    free(got);
    free(want);
    free(x);
}

/* Every dtype pair over widths with every tail, a permuted view (row path) and
 * a transposed one (reference fallback). */
static void test_copy_pairs_and_views(void) {
    static const loom_dtype dts[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};
    loom_rng r;
    loom_rng_init(&r, 62, 0);
    char what[96];
    for (int wi = 0; wi < N_SWEEP; wi += 2) {
        int64_t D = sweep_width(wi, &r), rows = 1 + (int64_t)(loom_rng_u32(&r) % 9), n = rows * D;
        float *f = falloc(n);
        for (int64_t i = 0; i < n; i++) f[i] = frand(&r) * 1000.0f;
        uint16_t *hb = malloc((size_t)n * 2 + 2);
        for (int s = 0; s < 3; s++) {
            void *data = f;
            if (dts[s] != LOOM_F32) {
                for (int64_t i = 0; i < n; i++)
                    hb[i] = dts[s] == LOOM_F16 ? loom_f32_to_f16(f[i]) : loom_f32_to_bf16(f[i]);
                data = hb;
            }
            loom_tensor tx, tp;
            TENSOR(tx, dts[s], data, rows, D);
            for (int d = 0; d < 3; d++) {
                snprintf(what, sizeof what, "copy %s -> %s [%lld, %lld]", loom_dtype_name(dts[s]),
                         loom_dtype_name(dts[d]), (long long)rows, (long long)D);
                copy_case(&tx, dts[d], what);
            }
            /* [rows, D] seen as [D, rows]: last dim not unit-stride */
            CHECK(loom_tensor_permute(&tx, (const int[]){1, 0}, &tp) == LOOM_OK);
            copy_case(&tp, LOOM_F32, "copy transposed");
            /* [a, b, D] permuted (1, 0, 2): last dim unit-stride, rows strided */
            if (rows % 3 == 0) {
                loom_tensor t3;
                TENSOR(t3, dts[s], data, 3, rows / 3, D);
                CHECK(loom_tensor_permute(&t3, (const int[]){1, 0, 2}, &tp) == LOOM_OK);
                copy_case(&tp, LOOM_F16, "copy permuted 3-D");
                copy_case(&tp, LOOM_F32, "copy permuted 3-D");
            }
        }
        free(f);
        free(hb);
    }
}

/* get_rows at every level for one table; ids drawn in range, with repeats. */
static void get_rows_case(const loom_tensor *table, const int32_t *ids, int64_t n_ids,
                          int64_t id_stride, const char *what) {
    loom_tensor ti;
    TENSOR(ti, LOOM_I32, (void *)ids, n_ids);
    ti.stride[0] = id_stride;
    loom_tensor tmpl = f32_tmpl(2, (const int64_t[]){n_ids, table->shape[1]});
    const loom_tensor *src[2] = {table, &ti};
    for (int l = 0; l < n_levels; l++) compare_op(LOOM_OP_GET_ROWS, src, 2, NULL, &tmpl, levels[l], -1, what);
}

static void test_get_rows(void) {
    static const loom_dtype dts[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};
    loom_rng r;
    loom_rng_init(&r, 71, 0);
    char what[96];
    for (int wi = 0; wi < N_SWEEP; wi++) {
        int64_t D = sweep_width(wi, &r), V = 1 + (int64_t)(loom_rng_u32(&r) % 50), ld = D + 3;
        int64_t n_ids = 1 + (int64_t)(loom_rng_u32(&r) % 67);
        float *f = falloc(V * ld);
        uint16_t *h = malloc((size_t)(V * ld) * 2);
        int32_t *ids = malloc((size_t)n_ids * 2 * sizeof *ids);
        for (int64_t i = 0; i < V * ld; i++) f[i] = frand(&r) * 10.0f;
        for (int64_t i = 0; i < n_ids * 2; i++) ids[i] = (int32_t)(loom_rng_u32(&r) % V);
        for (int s = 0; s < 3; s++) {
            void *data = f;
            if (dts[s] != LOOM_F32) {
                for (int64_t i = 0; i < V * ld; i++)
                    h[i] = dts[s] == LOOM_F16 ? loom_f32_to_f16(f[i]) : loom_f32_to_bf16(f[i]);
                data = h;
            }
            loom_tensor tt, tp;
            TENSOR(tt, dts[s], data, V, D);
            TENSOR(tp, dts[s], data, V, D);
            tp.stride[0] = ld; /* rows padded: a view into a wider table */
            snprintf(what, sizeof what, "get_rows %s [%lld, %lld] n %lld", loom_dtype_name(dts[s]),
                     (long long)V, (long long)D, (long long)n_ids);
            get_rows_case(&tt, ids, n_ids, 1, what);
            get_rows_case(&tp, ids, n_ids, 2, what);
            /* an id out of range, at a random position: an error at every level */
            int32_t saved = ids[n_ids / 2];
            ids[n_ids / 2] = wi % 2 ? (int32_t)V : -1;
            get_rows_case(&tt, ids, n_ids, 1, "get_rows bad id");
            loom_tensor ti, ty;
            TENSOR(ti, LOOM_I32, ids, n_ids);
            float *y = falloc(n_ids * D);
            TENSOR(ty, LOOM_F32, y, n_ids, D);
            const loom_tensor *src[2] = {&tt, &ti};
            for (int l = 0; l < n_levels; l++)
                CHECK_FAILS(loom_op_run(LOOM_OP_GET_ROWS, src, 2, NULL, &ty, levels[l]));
            ids[n_ids / 2] = saved;
            free(y);
        }
        free(f);
        free(h);
        free(ids);
    }
}

/* Quantized tables: through loom_op_run when the reference accepts them,
 * else the level's kernel directly against loom_dequantize_row. */
static void test_get_rows_quantized(void) {
    static const loom_dtype qts[3] = {LOOM_Q8_0, LOOM_Q4_0, LOOM_Q4_1};
    loom_rng r;
    loom_rng_init(&r, 72, 0);
    const int64_t V = 37, n_ids = 29;
    for (int qi = 0; qi < 3; qi++) {
        for (int64_t D = 32; D <= 4096; D *= 4) {
            loom_dtype qt = qts[qi];
            float *f = falloc(V * D), *want = falloc(n_ids * D), *got = falloc(n_ids * D);
            for (int64_t i = 0; i < V * D; i++) f[i] = frand(&r) * 3.0f;
            size_t rb = loom_dtype_row_bytes(qt, D);
            unsigned char *q = malloc(rb * (size_t)V);
            for (int64_t v = 0; v < V; v++) loom_quantize_row(qt, f + v * D, q + rb * (size_t)v, D);
            int32_t ids[29];
            for (int i = 0; i < n_ids; i++) ids[i] = (int32_t)(loom_rng_u32(&r) % V);
            for (int i = 0; i < n_ids; i++)
                loom_dequantize_row(qt, q + rb * (size_t)ids[i], want + i * D, D);
            loom_tensor tt, ti, ty;
            TENSOR(tt, qt, q, V, D);
            TENSOR(ti, LOOM_I32, ids, n_ids);
            TENSOR(ty, LOOM_F32, got, n_ids, D);
            const loom_tensor *src[2] = {&tt, &ti};
            loom_tensor probe;
            memset(&probe, 0, sizeof probe);
            int ref_ok = loom_op_get(LOOM_OP_GET_ROWS)->infer(src, 2, NULL, &probe) == LOOM_OK;
            for (int l = 0; l < n_levels; l++) {
                if (ref_ok) get_rows_case(&tt, ids, n_ids, 1, "get_rows quantized");
                loom_kernel_fn fn = loom_op_kernel(LOOM_OP_GET_ROWS, levels[l]);
                for (int nth = 1; nth <= 3; nth++) {
                    memset(got, 0xFF, (size_t)(n_ids * D) * sizeof(float));
                    CHECK(run_kernel_split(LOOM_OP_GET_ROWS, fn, src, 2, NULL, &ty, nth) == LOOM_OK);
                    CHECK_MSG(memcmp(got, want, (size_t)(n_ids * D) * sizeof(float)) == 0,
                              "get_rows %s D %lld at %s nth %d", loom_dtype_name(qt), (long long)D,
                              loom_isa_name(levels[l]), nth);
                }
                ids[3] = (int32_t)V; /* out of range */
                CHECK(run_kernel_split(LOOM_OP_GET_ROWS, fn, src, 2, NULL, &ty, 2) ==
                      LOOM_ERR_INVALID_ARG);
                ids[3] = 0;
                loom_dequantize_row(qt, q, want + 3 * D, D);
            }
            free(f);
            free(want);
            free(got);
            free(q);
        }
    }
}

int main(void) {
    n_levels = vec_levels(levels);
    RUN_TEST(test_copy_half_to_f32_exhaustive);
    RUN_TEST(test_copy_f32_to_half);
    RUN_TEST(test_copy_pairs_and_views);
    RUN_TEST(test_get_rows);
    RUN_TEST(test_get_rows_quantized);
    return TEST_SUMMARY();
}
