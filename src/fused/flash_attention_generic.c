/* Portable C prefill micro-kernels: the same tile shapes as the vector levels,
 * written as plain loops over the row lanes that compilers vectorise. */
#include "fused/flash_attention_internal.h"

#include <math.h>

static void bgemm_generic(float *c, int64_t ldc, const float *a, int64_t san, int64_t sak,
                          const float *b, int64_t ldb, int nn, int kk, int mp,
                          const float *alpha) {
    for (int n = 0; n < nn; n++) {
        float *cr = c + n * ldc;
        if (alpha)
            for (int r = 0; r < mp; r++) cr[r] *= alpha[r];
        else
            for (int r = 0; r < mp; r++) cr[r] = 0.0f;
        for (int k = 0; k < kk; k++) {
            float av = a[n * san + k * sak];
            const float *bk = b + k * ldb;
            for (int r = 0; r < mp; r++) cr[r] += av * bk[r];
        }
    }
}

static void softmax_cols_generic(float *s, int64_t lds, int nc, int mp, float *m, float *l,
                                 float *alpha) {
    for (int r = 0; r < mp; r++) alpha[r] = -INFINITY; /* column maxima first */
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < mp; r++)
            if (s[c * lds + r] > alpha[r]) alpha[r] = s[c * lds + r];
    for (int r = 0; r < mp; r++) {
        float mn = alpha[r] > m[r] ? alpha[r] : m[r];
        float sub = mn == -INFINITY ? 0.0f : mn; /* rows that saw nothing stay empty */
        alpha[r] = exp2f(m[r] - sub);
        l[r] *= alpha[r];
        m[r] = mn;
    }
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < mp; r++) {
            float sub = m[r] == -INFINITY ? 0.0f : m[r];
            float e = exp2f(s[c * lds + r] - sub);
            s[c * lds + r] = e;
            l[r] += e;
        }
}

void loom_attn_to_f32_generic(float *dst, const void *src, loom_dtype dt, int64_t n) {
    attn_load_row(dst, src, dt, 1, n);
}

const loom_attn_kernels loom_attn_kernels_generic = {
    .name = "generic",
    .bgemm = bgemm_generic,
    .qk_bf16 = NULL,
    .softmax_cols = softmax_cols_generic,
    .to_f32 = loom_attn_to_f32_generic,
    .dec_dot = loom_attn_dec_dot_generic,
    .dec_pv = loom_attn_dec_pv_generic,
    .softmax_rows = loom_attn_softmax_rows_generic,
};
