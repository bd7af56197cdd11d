/* Reference matmul: y[..., N] = x[..., K] . W[N, K]^T, W in f32/f16/bf16 or a GGUF
 * block format (dequantized to f32 block by block), f64 accumulation. */
#include "ops/ref/ref.h"

#include "base/status.h"
#include "ops/quant.h"

#include <string.h>

loom_status loom_ref_matmul_infer(const loom_tensor *const *src, int n_src, const void *attrs,
                                  loom_tensor *dst) {
    LOOM_TRY(loom_ref_check_arity("matmul", src, n_src, 2, 2));
    const loom_tensor *x = src[0], *w = src[1];
    LOOM_TRY(loom_ref_check_dtype("matmul", 0, "x", x, LOOM_REF_DT(LOOM_F32)));
    LOOM_TRY(loom_ref_check_dtype("matmul", 1, "W", w, LOOM_REF_FLOATS | LOOM_REF_QUANTS));
    int64_t K = x->shape[x->ndim - 1];
    char ws[LOOM_REF_SHAPE_BUF];
    LOOM_RETURN_IF(w->ndim != 2 || w->shape[1] != K, LOOM_ERR_SHAPE,
                   "matmul: input 1 (W) shape %s does not match x's last dim %lld: "
                   "expected [N, %lld]",
                   loom_ref_shape_str(w, ws, sizeof ws), (long long)K, (long long)K);
    /* block rows are only addressable whole: contiguous, starting on block boundaries */
    LOOM_RETURN_IF(loom_dtype_is_quantized(w->dtype) &&
                       (K % LOOM_QBLOCK || w->stride[1] != 1 || w->stride[0] % LOOM_QBLOCK),
                   LOOM_ERR_SHAPE,
                   "matmul: input 1 (W) of dtype %s needs K (%lld) and its row stride (%lld) to be "
                   "multiples of %d and contiguous rows",
                   loom_dtype_name(w->dtype), (long long)K, (long long)w->stride[0], LOOM_QBLOCK);
    int64_t shape[LOOM_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = w->shape[0];
    loom_ref_set_dst(dst, LOOM_F32, x->ndim, shape);
    return LOOM_OK;
}

void loom_ref_matmul_cost(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                          const void *attrs, loom_cost *c) {
    const loom_tensor *x = src[0], *w = src[1];
    double K = (double)w->shape[1], N = (double)w->shape[0];
    double M = (double)loom_ref_rows(x, x->ndim - 1);
    c->flops = 2.0 * M * N * K;
    c->bytes_read = M * K * LOOM_ES(x) + N * (double)loom_dtype_row_bytes(w->dtype, w->shape[1]);
    c->bytes_written = M * N * LOOM_ES(dst);
}

loom_status loom_ref_matmul(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *w = a->src[1];
    const loom_tensor *y = a->dst;
    int last = x->ndim - 1;
    int64_t K = x->shape[last], N = w->shape[0];
    int64_t M = loom_ref_rows(x, last);
    const float *xd = x->data;
    float *yd = y->data;
    /* One work item per output element, so decode (M = 1) still spreads over
     * all threads; each element's sum runs k = 0..K-1 whatever the split. */
    int quant = loom_dtype_is_quantized(w->dtype);
    int64_t lo, hi;
    loom_ref_split(M * N, a->ith, a->nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        int64_t m = t / N, n = t % N;
        int64_t xo = loom_ref_row_offset(x, last, m);
        int64_t yo = loom_ref_row_offset(y, last, m);
        double acc = 0.0;
        if (quant) {
            /* W row n, one block of 32 at a time */
            const char *row = (const char *)w->data + loom_dtype_row_bytes(w->dtype, n * w->stride[0]);
            size_t bb = loom_dtype_block_bytes(w->dtype);
            float blk[LOOM_QBLOCK];
            for (int64_t k0 = 0; k0 < K; k0 += LOOM_QBLOCK) {
                loom_row_to_f32(w->dtype, row + (size_t)(k0 / LOOM_QBLOCK) * bb, blk, LOOM_QBLOCK);
                for (int64_t k = k0; k < k0 + LOOM_QBLOCK; k++)
                    acc += (double)xd[xo + k * x->stride[last]] * (double)blk[k - k0];
            }
        } else {
            for (int64_t k = 0; k < K; k++)
                acc += (double)xd[xo + k * x->stride[last]] *
                       (double)loom_ref_get(w, n * w->stride[0] + k * w->stride[1]);
        }
        yd[yo + n * y->stride[last]] = (float)acc;
    }
    return LOOM_OK;
}
