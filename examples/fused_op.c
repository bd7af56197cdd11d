/*
 * Calling loom's fused operators directly (loom_ops.h), as one calls an
 * aclnn operator: tensors are descriptors over the caller's memory, each op
 * takes a params struct with defaults and runs on a thread pool.
 *
 *   1. loom_add_rms_norm: r = x + residual, y = r / rms(r) * gamma;
 *   2. loom_flash_attention_score: causal attention over [B, S, N, D] tensors,
 *      with grouped KV heads, without ever storing the S x S scores.
 *
 * Each result is checked against a plain loop. Exit status 0 when both agree
 * within 2^-11 relative to max(1, |reference|).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <loom.h>
#include <loom_ops.h>

#define TOL (1.0 / 2048)

static void fill(float *p, int64_t n, unsigned seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

static double worst_error(const float *got, const double *ref, int64_t n) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]) / fmax(1.0, fabs(ref[i]));
        if (!(e <= w)) w = e;  /* NaN counts as the worst */
    }
    return w;
}

static int add_rms_norm(loom_pool *pool) {
    enum { M = 5, D = 96 };
    static float x[M * D], res[M * D], gamma[D], y[M * D], r[M * D];
    static double ref[M * D];
    fill(x, M * D, 1), fill(res, M * D, 2), fill(gamma, D, 3);
    loom_tensor tx, tres, tg, ty, tr;
    int64_t shape[2] = {M, D};
    loom_tensor_init(&tx, LOOM_F32, 2, shape, x);
    loom_tensor_init(&tres, LOOM_F32, 2, shape, res);
    loom_tensor_init(&ty, LOOM_F32, 2, shape, y);
    loom_tensor_init(&tr, LOOM_F32, 2, shape, r);
    loom_tensor_init(&tg, LOOM_F32, 1, &shape[1], gamma);
    loom_add_rms_norm_params p = loom_add_rms_norm_default_params();
    if (loom_add_rms_norm(&tx, &tres, &tg, &p, &ty, &tr, pool) != LOOM_OK) {
        fprintf(stderr, "add_rms_norm: %s\n", loom_last_error());
        return 1;
    }
    for (int i = 0; i < M; i++) {
        double ss = 0;
        for (int d = 0; d < D; d++) ss += (double)(x[i * D + d] + res[i * D + d]) * (x[i * D + d] + res[i * D + d]);
        double inv = 1.0 / sqrt(ss / D + p.epsilon);
        for (int d = 0; d < D; d++) ref[i * D + d] = (x[i * D + d] + res[i * D + d]) * inv * gamma[d];
    }
    double err = worst_error(y, ref, M * D);
    printf("add_rms_norm [%d, %d]: max relative error %.3g\n", M, D, err);
    return err <= TOL ? 0 : 1;
}

static int flash_attention(loom_pool *pool) {
    enum { B = 2, S = 37, N = 4, NKV = 2, D = 32 };
    static float q[B * S * N * D], k[B * S * NKV * D], v[B * S * NKV * D], out[B * S * N * D];
    static double ref[B * S * N * D];
    fill(q, B * S * N * D, 4), fill(k, B * S * NKV * D, 5), fill(v, B * S * NKV * D, 6);
    loom_tensor tq, tk, tv, to;
    int64_t qshape[4] = {B, S, N, D}, kvshape[4] = {B, S, NKV, D};
    loom_tensor_init(&tq, LOOM_F32, 4, qshape, q);
    loom_tensor_init(&tk, LOOM_F32, 4, kvshape, k);
    loom_tensor_init(&tv, LOOM_F32, 4, kvshape, v);
    loom_tensor_init(&to, LOOM_F32, 4, qshape, out);
    loom_flash_attention_tensors t = {.query = &tq, .key = &tk, .value = &tv, .attention_out = &to};
    loom_flash_attention_params p = loom_flash_attention_default_params();  /* BSND, scale 1/sqrt(D) */
    p.sparse_mode = LOOM_SPARSE_RIGHT_DOWN_CAUSAL;
    if (loom_flash_attention_score(&t, &p, pool) != LOOM_OK) {
        fprintf(stderr, "flash_attention_score: %s\n", loom_last_error());
        return 1;
    }
    /* the plain loop: scores of query i against keys j <= i, softmax, weighted sum */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < N; h++)
            for (int i = 0; i < S; i++) {
                const int kh = h / (N / NKV);
                double sc[S], max = -INFINITY, sum = 0;
                for (int j = 0; j <= i; j++) {
                    double dot = 0;
                    for (int d = 0; d < D; d++)
                        dot += (double)q[((b * S + i) * N + h) * D + d] * k[((b * S + j) * NKV + kh) * D + d];
                    sc[j] = dot / sqrt((double)D);
                    if (sc[j] > max) max = sc[j];
                }
                for (int j = 0; j <= i; j++) sum += sc[j] = exp(sc[j] - max);
                for (int d = 0; d < D; d++) {
                    double acc = 0;
                    for (int j = 0; j <= i; j++) acc += sc[j] * v[((b * S + j) * NKV + kh) * D + d];
                    ref[((b * S + i) * N + h) * D + d] = acc / sum;
                }
            }
    double err = worst_error(out, ref, B * S * N * D);
    printf("flash_attention_score [%d, %d, %d, %d], %d kv heads, causal: max relative error %.3g\n", B, S, N, D,
           NKV, err);
    return err <= TOL ? 0 : 1;
}

int main(void) {
    loom_pool *pool = NULL;
    if (loom_pool_init(&pool, 2) != LOOM_OK) {
        fprintf(stderr, "fused_op: %s\n", loom_last_error());
        return 1;
    }
    printf("loom %s, kernels: %s\n", loom_version(), loom_cpu_isa_name());
    int rc = add_rms_norm(pool) | flash_attention(pool);
    loom_pool_free(pool);
    printf("%s\n", rc ? "FAILED" : "ok");
    return rc;
}
