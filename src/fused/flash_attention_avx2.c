/* AVX2 + FMA prefill micro-kernels: the AVX-512 scheme (rows in lanes,
 * broadcast-FMA tiles) with 8-lane vectors, 6 x 16 accumulator tiles. */
#include "fused/flash_attention_internal.h"

#if defined(__x86_64__)
#include "fused/flash_attention_simd.h"
#include "ops/matmul/gemm_x86.h"

#define NN 6

ATTN_INLINE ATTN_T256 void bg_tile(int NNT, float *c, int64_t ldc, const float *a, int64_t san,
                                   int64_t sak, const float *b, int64_t ldb, int kk,
                                   const float *alpha) {
    __m256 acc[NN][2];
    for (int n = 0; n < NNT; n++) acc[n][0] = acc[n][1] = _mm256_setzero_ps();
    for (int k = 0; k < kk; k++) {
        const float *bk = b + k * ldb, *ak = a + k * sak;
        __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8);
        for (int n = 0; n < NNT; n++) {
            __m256 av = _mm256_set1_ps(ak[n * san]);
            acc[n][0] = _mm256_fmadd_ps(av, b0, acc[n][0]);
            acc[n][1] = _mm256_fmadd_ps(av, b1, acc[n][1]);
        }
    }
    for (int n = 0; n < NNT; n++)
        for (int v = 0; v < 2; v++) {
            float *cp = c + n * ldc + 8 * v;
            __m256 r = acc[n][v];
            if (alpha) r = _mm256_fmadd_ps(_mm256_loadu_ps(alpha + 8 * v), _mm256_loadu_ps(cp), r);
            _mm256_storeu_ps(cp, r);
        }
}

static ATTN_T256 void bgemm_avx2(float *c, int64_t ldc, const float *a, int64_t san, int64_t sak,
                                 const float *b, int64_t ldb, int nn, int kk, int mp,
                                 const float *alpha) {
    for (int r = 0; r < mp; r += 16) {
        float *cr = c + r;
        const float *br = b + r, *al = alpha ? alpha + r : NULL;
        int n = 0;
        for (; n + NN <= nn; n += NN) bg_tile(NN, cr + n * ldc, ldc, a + n * san, san, sak, br, ldb, kk, al);
        float *cn = cr + n * ldc;
        const float *an = a + n * san;
        switch (nn - n) {
        case 1: bg_tile(1, cn, ldc, an, san, sak, br, ldb, kk, al); break;
        case 2: bg_tile(2, cn, ldc, an, san, sak, br, ldb, kk, al); break;
        case 3: bg_tile(3, cn, ldc, an, san, sak, br, ldb, kk, al); break;
        case 4: bg_tile(4, cn, ldc, an, san, sak, br, ldb, kk, al); break;
        case 5: bg_tile(5, cn, ldc, an, san, sak, br, ldb, kk, al); break;
        default: break;
        }
    }
}

/* (the 8 x 8 register transpose is the GEMM packing's, ops/matmul/gemm_x86.h) */

static ATTN_T256 void pack_t_avx2(float *qt, int64_t ldq, const float *const *rows, int mp, int d, float scale) {
    const __m256 vs = _mm256_set1_ps(scale);
    for (int r0 = 0; r0 < mp; r0 += 8)
        for (int x0 = 0; x0 < d; x0 += 8) {
            int dd = d - x0 < 8 ? d - x0 : 8;
            __m256 v[8];
            for (int j = 0; j < 8; j++)
                v[j] = rows[r0 + j] ? _mm256_mul_ps(attn_load8(rows[r0 + j], x0, LOOM_F32, dd), vs)
                                    : _mm256_setzero_ps();
            loom_tr8x8(v);
            for (int i = 0; i < dd; i++) _mm256_storeu_ps(qt + (int64_t)(x0 + i) * ldq + r0, v[i]);
        }
}

static ATTN_T256 void unpack_t_avx2(float *const *rows, const float *ot, int64_t ldo, const float *inv, int n,
                                    int d) {
    for (int r0 = 0; r0 < n; r0 += 8) {
        int nr = n - r0 < 8 ? n - r0 : 8;
        for (int x0 = 0; x0 < d; x0 += 8) {
            int dd = d - x0 < 8 ? d - x0 : 8;
            __m256 v[8];
            for (int i = 0; i < 8; i++)
                v[i] = i < dd ? _mm256_loadu_ps(ot + (int64_t)(x0 + i) * ldo + r0) : _mm256_setzero_ps();
            loom_tr8x8(v);
            for (int j = 0; j < nr; j++) {
                if (!rows[r0 + j]) continue;
                __m256 y = _mm256_mul_ps(v[j], _mm256_set1_ps(inv[r0 + j]));
                if (dd == 8) {
                    _mm256_storeu_ps(rows[r0 + j] + x0, y);
                } else { /* the tail through a buffer, as loom_attn_to_f32_avx2's */
                    float tail[8];
                    _mm256_storeu_ps(tail, y);
                    memcpy(rows[r0 + j] + x0, tail, (size_t)dd * sizeof(float));
                }
            }
        }
    }
}

static ATTN_T256 void softmax_cols_avx2(float *s, int64_t lds, int nc, int mp, float *m, float *l,
                                        float *alpha) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (int r = 0; r < mp; r += 8) {
        __m256 mx = ninf;
        for (int c = 0; c < nc; c++) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + c * lds + r));
        __m256 mo = _mm256_loadu_ps(m + r), mn = _mm256_max_ps(mo, mx);
        __m256 none = _mm256_cmp_ps(mn, ninf, _CMP_EQ_OQ);
        __m256 sub = _mm256_blendv_ps(mn, _mm256_setzero_ps(), none);
        __m256 al = attn_exp2_256(_mm256_sub_ps(mo, sub)), sum = _mm256_setzero_ps();
        for (int c = 0; c < nc; c++) {
            __m256 e = attn_exp2_256(_mm256_sub_ps(_mm256_loadu_ps(s + c * lds + r), sub));
            _mm256_storeu_ps(s + c * lds + r, e);
            sum = _mm256_add_ps(sum, e);
        }
        _mm256_storeu_ps(l + r, _mm256_fmadd_ps(_mm256_loadu_ps(l + r), al, sum));
        _mm256_storeu_ps(m + r, mn);
        _mm256_storeu_ps(alpha + r, al);
    }
}

ATTN_T256 void loom_attn_to_f32_avx2(float *dst, const void *src, loom_dtype dt, int64_t n) {
    int64_t x = 0;
    for (; x + 8 <= n; x += 8) _mm256_storeu_ps(dst + x, attn_load8(src, x, dt, 8));
    if (x < n) {
        float tmp[8];
        _mm256_storeu_ps(tmp, attn_load8(src, x, dt, (int)(n - x)));
        memcpy(dst + x, tmp, (size_t)(n - x) * sizeof(float));
    }
}

/* s = c * tanh(s / c), 8 lanes at a time, as softcap_avx512 (flash_attention_avx512.c);
 * the tail through the scalar form. */
static ATTN_T256 void softcap_avx2(float *s, int64_t n, float c) {
    const __m256 inv = _mm256_set1_ps(1.0f / c), vc = _mm256_set1_ps(c), one = _mm256_set1_ps(1.0f);
    const __m256 k = _mm256_set1_ps(-2.0f * (float)ATTN_LOG2E), sign = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 u = _mm256_mul_ps(_mm256_loadu_ps(s + i), inv);
        __m256 t = attn_exp2_256(_mm256_mul_ps(k, _mm256_andnot_ps(sign, u)));
        __m256 th = _mm256_div_ps(_mm256_sub_ps(one, t), _mm256_add_ps(one, t));
        _mm256_storeu_ps(s + i, _mm256_mul_ps(vc, _mm256_or_ps(th, _mm256_and_ps(u, sign))));
    }
    if (i < n) attn_softcap_scores(s + i, n - i, c);
}

const loom_attn_kernels loom_attn_kernels_avx2 = {
    .name = "avx2",
    .bgemm = bgemm_avx2,
    .qk_bf16 = NULL,
    .softmax_cols = softmax_cols_avx2,
    .pack_t = pack_t_avx2,
    .unpack_t = unpack_t_avx2,
    .to_f32 = loom_attn_to_f32_avx2,
    .softcap = softcap_avx2,
    .dec_dot = loom_attn_dec_dot_avx2,
    .dec_pv = loom_attn_dec_pv_avx2,
    .softmax_rows = loom_attn_softmax_rows_avx2,
    .dec_qprep = loom_attn_dec_qprep_avx2,
    .dec_dot_prep = loom_attn_dec_dot_prep_avx2,
    .dec_self_prefetch = 1,
    /* no dec_i8_xpf: the i8 tiles prefetching the other stream read 2-6 points
     * less of the bandwidth on one and two threads (Zen 4) */
    /* i8 tiles of 64 keys, as on AVX-512: against 32 keys +0.5..+2 points of
     * the read bandwidth on one thread, mostly better on two; against 128
     * +2..+3 on one thread, mixed on two */
    .dec_i8_tile = 64,
    .dec_group_span = 64 << 10,
};
#else
typedef int loom_attn_avx2_unused; /* ISO C wants a non-empty translation unit */
#endif
