/* AVX-512 prefill micro-kernels. Tile rows (queries) live in vector lanes, so
 * both products of a tile are one register-blocked broadcast-FMA loop:
 *   S^T[key][row] += K[key][d]  * Q^T[d][row]      (6 keys x 64 rows per tile)
 *   O^T[d][row]   += V[key][d]  * P^T[key][row]    (6 dims x 64 rows per tile)
 * and the online softmax works down columns, one vector of 16 rows at a time. */
#include "fused/flash_attention_internal.h"
#include "ops/vec/vec.h"

#if defined(__x86_64__)
#include "fused/flash_attention_simd.h"
#include "ops/matmul/gemm_x86.h"

#define NN 6 /* broadcast rows per tile: NN x NV accumulators, NV <= 4 */

/* c[n][r..] for n < NNT, NV vectors of 16 lanes. */
ATTN_INLINE ATTN_T512 void bg_tile(int NNT, int NV, float *c, int64_t ldc, const float *a,
                                   int64_t san, int64_t sak, const float *b, int64_t ldb, int kk,
                                   const float *alpha) {
    __m512 acc[NN][4];
    for (int n = 0; n < NNT; n++)
        for (int v = 0; v < NV; v++) acc[n][v] = _mm512_setzero_ps();
    for (int k = 0; k < kk; k++) {
        const float *bk = b + k * ldb, *ak = a + k * sak;
        __m512 bv[4];
        for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(bk + 16 * v);
        for (int n = 0; n < NNT; n++) {
            __m512 av = _mm512_set1_ps(ak[n * san]);
            for (int v = 0; v < NV; v++) acc[n][v] = _mm512_fmadd_ps(av, bv[v], acc[n][v]);
        }
    }
    for (int n = 0; n < NNT; n++)
        for (int v = 0; v < NV; v++) {
            float *cp = c + n * ldc + 16 * v;
            __m512 r = acc[n][v];
            if (alpha) r = _mm512_fmadd_ps(_mm512_loadu_ps(alpha + 16 * v), _mm512_loadu_ps(cp), r);
            _mm512_storeu_ps(cp, r);
        }
}

ATTN_INLINE ATTN_T512 void bg_cols(int NV, float *c, int64_t ldc, const float *a, int64_t san,
                                   int64_t sak, const float *b, int64_t ldb, int nn, int kk,
                                   const float *alpha) {
    int n = 0;
    for (; n + NN <= nn; n += NN)
        bg_tile(NN, NV, c + n * ldc, ldc, a + n * san, san, sak, b, ldb, kk, alpha);
    const float *an = a + n * san;
    float *cn = c + n * ldc;
    switch (nn - n) {
    case 1: bg_tile(1, NV, cn, ldc, an, san, sak, b, ldb, kk, alpha); break;
    case 2: bg_tile(2, NV, cn, ldc, an, san, sak, b, ldb, kk, alpha); break;
    case 3: bg_tile(3, NV, cn, ldc, an, san, sak, b, ldb, kk, alpha); break;
    case 4: bg_tile(4, NV, cn, ldc, an, san, sak, b, ldb, kk, alpha); break;
    case 5: bg_tile(5, NV, cn, ldc, an, san, sak, b, ldb, kk, alpha); break;
    default: break;
    }
}

static ATTN_T512 void bgemm_avx512(float *c, int64_t ldc, const float *a, int64_t san,
                                   int64_t sak, const float *b, int64_t ldb, int nn, int kk,
                                   int mp, const float *alpha) {
    int r = 0;
    for (; r + 64 <= mp; r += 64)
        bg_cols(4, c + r, ldc, a, san, sak, b + r, ldb, nn, kk, alpha ? alpha + r : NULL);
    if (r + 32 <= mp) {
        bg_cols(2, c + r, ldc, a, san, sak, b + r, ldb, nn, kk, alpha ? alpha + r : NULL);
        r += 32;
    }
    if (r < mp) bg_cols(1, c + r, ldc, a, san, sak, b + r, ldb, nn, kk, alpha ? alpha + r : NULL);
}

/* bg_tile with A's rows by pointer: rows[n0 + n][k] (QK^T) or rows[k][n0 + n]
 * (PV); the same FMAs in the same order as bg_tile over the rows gathered. */
ATTN_INLINE ATTN_T512 void bgr_tile(int NNT, int NV, int pv, float *c, int64_t ldc, const float *const *rows,
                                    int64_t n0, const float *b, int64_t ldb, int kk, const float *alpha) {
    __m512 acc[NN][4];
    const float *rn[NN] = {0};
    if (!pv)
        for (int n = 0; n < NNT; n++) rn[n] = rows[n0 + n];
    for (int n = 0; n < NNT; n++)
        for (int v = 0; v < NV; v++) acc[n][v] = _mm512_setzero_ps();
    for (int k = 0; k < kk; k++) {
        const float *bk = b + k * ldb, *rk = pv ? rows[k] + n0 : NULL;
        __m512 bv[4];
        for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(bk + 16 * v);
        for (int n = 0; n < NNT; n++) {
            __m512 av = _mm512_set1_ps(pv ? rk[n] : rn[n][k]);
            for (int v = 0; v < NV; v++) acc[n][v] = _mm512_fmadd_ps(av, bv[v], acc[n][v]);
        }
    }
    for (int n = 0; n < NNT; n++)
        for (int v = 0; v < NV; v++) {
            float *cp = c + n * ldc + 16 * v;
            __m512 r = acc[n][v];
            if (alpha) r = _mm512_fmadd_ps(_mm512_loadu_ps(alpha + 16 * v), _mm512_loadu_ps(cp), r);
            _mm512_storeu_ps(cp, r);
        }
}

ATTN_INLINE ATTN_T512 void bgr_cols(int NV, int pv, float *c, int64_t ldc, const float *const *rows,
                                    const float *b, int64_t ldb, int nn, int kk, const float *alpha) {
    int n = 0;
    for (; n + NN <= nn; n += NN) bgr_tile(NN, NV, pv, c + n * ldc, ldc, rows, n, b, ldb, kk, alpha);
    float *cn = c + n * ldc;
    switch (nn - n) {
    case 1: bgr_tile(1, NV, pv, cn, ldc, rows, n, b, ldb, kk, alpha); break;
    case 2: bgr_tile(2, NV, pv, cn, ldc, rows, n, b, ldb, kk, alpha); break;
    case 3: bgr_tile(3, NV, pv, cn, ldc, rows, n, b, ldb, kk, alpha); break;
    case 4: bgr_tile(4, NV, pv, cn, ldc, rows, n, b, ldb, kk, alpha); break;
    case 5: bgr_tile(5, NV, pv, cn, ldc, rows, n, b, ldb, kk, alpha); break;
    default: break;
    }
}

static ATTN_T512 void bgemm_rows_avx512(float *c, int64_t ldc, const float *const *rows, int pv, const float *b,
                                        int64_t ldb, int nn, int kk, int mp, const float *alpha) {
    int r = 0;
    for (; r + 64 <= mp; r += 64) {
        if (pv) bgr_cols(4, 1, c + r, ldc, rows, b + r, ldb, nn, kk, alpha ? alpha + r : NULL);
        else bgr_cols(4, 0, c + r, ldc, rows, b + r, ldb, nn, kk, alpha ? alpha + r : NULL);
    }
    if (r + 32 <= mp) {
        if (pv) bgr_cols(2, 1, c + r, ldc, rows, b + r, ldb, nn, kk, alpha ? alpha + r : NULL);
        else bgr_cols(2, 0, c + r, ldc, rows, b + r, ldb, nn, kk, alpha ? alpha + r : NULL);
        r += 32;
    }
    if (r < mp) {
        if (pv) bgr_cols(1, 1, c + r, ldc, rows, b + r, ldb, nn, kk, alpha ? alpha + r : NULL);
        else bgr_cols(1, 0, c + r, ldc, rows, b + r, ldb, nn, kk, alpha ? alpha + r : NULL);
    }
}

/* ---------------------------------------------------------- transposes */

/* (the 16 x 16 register transpose is the GEMM packing's, ops/matmul/gemm_x86.h) */

static ATTN_T512 void pack_t_avx512(float *qt, int64_t ldq, const float *const *rows, int mp, int d, float scale) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int r0 = 0; r0 < mp; r0 += 16)
        for (int x0 = 0; x0 < d; x0 += 16) {
            int dd = d - x0 < 16 ? d - x0 : 16;
            __mmask16 m = (__mmask16)((1u << dd) - 1);
            __m512 v[16];
            for (int j = 0; j < 16; j++)
                v[j] = rows[r0 + j] ? _mm512_mul_ps(attn_load16(rows[r0 + j], x0, LOOM_F32, m), vs)
                                    : _mm512_setzero_ps();
            loom_tr16x16(v);
            for (int i = 0; i < dd; i++) _mm512_storeu_ps(qt + (int64_t)(x0 + i) * ldq + r0, v[i]);
        }
}

static ATTN_T512 void unpack_t_avx512(float *const *rows, const float *ot, int64_t ldo, const float *inv, int n,
                                      int d) {
    for (int r0 = 0; r0 < n; r0 += 16) {
        int nr = n - r0 < 16 ? n - r0 : 16;
        for (int x0 = 0; x0 < d; x0 += 16) {
            int dd = d - x0 < 16 ? d - x0 : 16;
            __mmask16 m = (__mmask16)((1u << dd) - 1);
            __m512 v[16];
            for (int i = 0; i < 16; i++)
                v[i] = i < dd ? _mm512_loadu_ps(ot + (int64_t)(x0 + i) * ldo + r0) : _mm512_setzero_ps();
            loom_tr16x16(v);
            for (int j = 0; j < nr; j++)
                if (rows[r0 + j])
                    _mm512_mask_storeu_ps(rows[r0 + j] + x0, m, _mm512_mul_ps(v[j], _mm512_set1_ps(inv[r0 + j])));
        }
    }
}

/* ---------------------------------------------------------- bf16 products */

/* 5 broadcast rows x 4 vectors: 20 accumulators, 4 B vectors and the
 * broadcast. With 6 rows (24 accumulators, as the f32 tiles use) GCC 12 ran
 * one register short and spilled a B vector inside the loop, a store and a
 * reload every step; 5 rows made the bf16-product prefill ~10 % faster
 * (bench/results/attention.md). */
#define DPNN 5

/* c[n][r..] (+)= sum_p A(n, p) . b[p][r..] over bf16 pairs, f32 accumulation.
 * A(n, p) is the pair at u16 offset n*san + p*sak of a (any 2-byte alignment).
 * Without alpha the tile is overwritten with scale*acc, else alpha*c + acc. */
ATTN_INLINE ATTN_T512BF void dp_tile(int NNT, int NV, float *c, int64_t ldc, const uint16_t *a,
                                     int64_t san, int64_t sak, const uint32_t *b, int64_t ldb,
                                     int kp, const float *alpha, float scale) {
    __m512 acc[DPNN][4];
    for (int n = 0; n < NNT; n++)
        for (int v = 0; v < NV; v++) acc[n][v] = _mm512_setzero_ps();
    for (int p = 0; p < kp; p++) {
        __m512i bv[4];
        for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_si512(b + p * ldb + 16 * v);
        for (int n = 0; n < NNT; n++) {
            uint32_t pair;
            memcpy(&pair, a + n * san + p * sak, sizeof pair);
            __m512i av = _mm512_set1_epi32((int)pair);
            for (int v = 0; v < NV; v++)
                acc[n][v] = _mm512_dpbf16_ps(acc[n][v], (__m512bh)av, (__m512bh)bv[v]);
        }
    }
    __m512 sc = _mm512_set1_ps(scale);
    for (int n = 0; n < NNT; n++)
        for (int v = 0; v < NV; v++) {
            float *cp = c + n * ldc + 16 * v;
            __m512 r = alpha ? _mm512_fmadd_ps(_mm512_loadu_ps(alpha + 16 * v), _mm512_loadu_ps(cp), acc[n][v])
                             : _mm512_mul_ps(acc[n][v], sc);
            _mm512_storeu_ps(cp, r);
        }
}

ATTN_INLINE ATTN_T512BF void dp_cols(int NV, float *c, int64_t ldc, const uint16_t *a, int64_t san,
                                     int64_t sak, const uint32_t *b, int64_t ldb, int nn, int kp,
                                     const float *alpha, float scale) {
    int n = 0;
    for (; n + DPNN <= nn; n += DPNN)
        dp_tile(DPNN, NV, c + n * ldc, ldc, a + n * san, san, sak, b, ldb, kp, alpha, scale);
    float *cn = c + n * ldc;
    const uint16_t *an = a + n * san;
    switch (nn - n) {
    case 1: dp_tile(1, NV, cn, ldc, an, san, sak, b, ldb, kp, alpha, scale); break;
    case 2: dp_tile(2, NV, cn, ldc, an, san, sak, b, ldb, kp, alpha, scale); break;
    case 3: dp_tile(3, NV, cn, ldc, an, san, sak, b, ldb, kp, alpha, scale); break;
    case 4: dp_tile(4, NV, cn, ldc, an, san, sak, b, ldb, kp, alpha, scale); break;
    default: break;
    }
}

static ATTN_T512BF void dp_gemm(float *c, int64_t ldc, const uint16_t *a, int64_t san, int64_t sak,
                                const uint32_t *b, int64_t ldb, int nn, int kp, int mp,
                                const float *alpha, float scale) {
    int r = 0;
    for (; r + 64 <= mp; r += 64)
        dp_cols(4, c + r, ldc, a, san, sak, b + r, ldb, nn, kp, alpha ? alpha + r : NULL, scale);
    if (r + 32 <= mp) {
        dp_cols(2, c + r, ldc, a, san, sak, b + r, ldb, nn, kp, alpha ? alpha + r : NULL, scale);
        r += 32;
    }
    if (r < mp) dp_cols(1, c + r, ldc, a, san, sak, b + r, ldb, nn, kp, alpha ? alpha + r : NULL, scale);
}

static ATTN_T512BF void qk_bf16_avx512(float *s, int64_t lds, const uint16_t *k, int64_t ldk,
                                       const uint32_t *qt2, int64_t ldq, int nn, int kk, int mp,
                                       float scale) {
    dp_gemm(s, lds, k, ldk, 2, qt2, ldq, nn, kk / 2, mp, NULL, scale);
}

/* 16 lanes of two bf16 rows as pairs (lo = row0, hi = row1). */
ATTN_INLINE ATTN_T512BF __m512i pair16(__m256i r0, __m256i r1) {
    return _mm512_or_si512(_mm512_cvtepu16_epi32(r0), _mm512_slli_epi32(_mm512_cvtepu16_epi32(r1), 16));
}

/* P.V with P rounded to bf16: P^T [nc][mp] and V [nc][d] are repacked as pairs
 * of consecutive keys (work_p [nc/2][mp], work_v [nc/2][d]), then one
 * vdpbf16ps per pair. An odd last key pairs with zeros. v NULL: work_v already
 * holds V's pairs (the driver's packed-V cache) and is only read. */
static ATTN_T512BF void pv_bf16_avx512(float *ot, int64_t ldo, const uint16_t *v, int64_t ldv,
                                       const float *pt, int64_t ldp, const float *alpha, int nc,
                                       int d, int mp, uint32_t *work_p, uint32_t *work_v) {
    int np = (nc + 1) / 2;
    const __m256i zero = _mm256_setzero_si256();
    for (int p = 0; p < np; p++) {
        const float *r0 = pt + 2 * p * ldp, *r1 = r0 + ldp;
        int odd = 2 * p + 1 >= nc;
        for (int r = 0; r < mp; r += 16) {
            __m256i b0 = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(r0 + r));
            __m256i b1 = odd ? zero : (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(r1 + r));
            _mm512_storeu_si512(work_p + p * mp + r, pair16(b0, b1));
        }
        if (!v) continue;
        const uint16_t *v0 = v + 2 * p * ldv, *v1 = v0 + ldv;
        for (int x = 0; x < d; x += 16) {
            __mmask16 k = d - x >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (d - x)) - 1);
            __m256i a0 = _mm256_maskz_loadu_epi16(k, v0 + x);
            __m256i a1 = odd ? zero : _mm256_maskz_loadu_epi16(k, v1 + x);
            _mm512_mask_storeu_epi32(work_v + p * d + x, k, pair16(a0, a1));
        }
    }
    dp_gemm(ot, ldo, (const uint16_t *)work_v, 2, 2 * (int64_t)d, work_p, mp, d, np, mp, alpha, 1.0f);
}

/* ---------------------------------------------------------- softmax, conversion */

static ATTN_T512 void softmax_cols_avx512(float *s, int64_t lds, int nc, int mp, float *m,
                                          float *l, float *alpha) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int r = 0; r < mp; r += 16) {
        __m512 mx = ninf;
        for (int c = 0; c < nc; c++) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + c * lds + r));
        __m512 mo = _mm512_loadu_ps(m + r), mn = _mm512_max_ps(mo, mx);
        /* rows that saw nothing yet subtract 0: exp2(-inf) = 0 keeps them empty */
        __mmask16 none = _mm512_cmp_ps_mask(mn, ninf, _CMP_EQ_OQ);
        __m512 sub = _mm512_mask_blend_ps(none, mn, _mm512_setzero_ps());
        __m512 al = attn_exp2_512(_mm512_sub_ps(mo, sub)), sum = _mm512_setzero_ps();
        for (int c = 0; c < nc; c++) {
            __m512 e = attn_exp2_512(_mm512_sub_ps(_mm512_loadu_ps(s + c * lds + r), sub));
            _mm512_storeu_ps(s + c * lds + r, e);
            sum = _mm512_add_ps(sum, e);
        }
        _mm512_storeu_ps(l + r, _mm512_fmadd_ps(_mm512_loadu_ps(l + r), al, sum));
        _mm512_storeu_ps(m + r, mn);
        _mm512_storeu_ps(alpha + r, al);
    }
}

ATTN_T512 void loom_attn_to_f32_avx512(float *dst, const void *src, loom_dtype dt, int64_t n) {
    int64_t x = 0;
    for (; x + 16 <= n; x += 16) _mm512_storeu_ps(dst + x, attn_load16(src, x, dt, 0xFFFF));
    if (x < n) {
        __mmask16 k = (__mmask16)((1u << (n - x)) - 1);
        _mm512_mask_storeu_ps(dst + x, k, attn_load16(src, x, dt, k));
    }
}

/* Rounds with the vector ops' f32 -> bf16 (bit-identical to loom_f32_to_bf16);
 * other dtypes are widened to f32 first, 256 elements at a time. */
static ATTN_T512 void to_bf16_avx512(uint16_t *dst, const void *src, loom_dtype dt, int64_t n) {
    if (dt == LOOM_F32) {
        loom_vec_avx512.f32_to_bf16(src, dst, n);
        return;
    }
    float tmp[256];
    const int64_t es = loom_dtype_size(dt);
    for (int64_t x = 0; x < n; x += 256) {
        int64_t m = n - x < 256 ? n - x : 256;
        loom_attn_to_f32_avx512(tmp, (const char *)src + x * es, dt, m);
        loom_vec_avx512.f32_to_bf16(tmp, dst + x, m);
    }
}

/* s = c * tanh(s / c), 16 lanes at a time: tanh|u| = (1 - t) / (1 + t) with
 * t = e^(-2|u|) = 2^(-2 log2(e) |u|) <= 1 (no overflow; the cancellation in
 * 1 - t costs at most an ulp of 1 in tanh, c times that in the score), the
 * sign of u put back. NaN stays NaN; +-inf give +-c, as tanhf. */
static ATTN_T512 void softcap_avx512(float *s, int64_t n, float c) {
    const __m512 inv = _mm512_set1_ps(1.0f / c), vc = _mm512_set1_ps(c), one = _mm512_set1_ps(1.0f);
    const __m512 k = _mm512_set1_ps(-2.0f * (float)ATTN_LOG2E);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 u = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + i), inv);
        __m512i ui = _mm512_castps_si512(u);
        __m512 a = _mm512_castsi512_ps(_mm512_andnot_si512(sign, ui));
        __m512 t = attn_exp2_512(_mm512_mul_ps(k, a));
        __m512 th = _mm512_div_ps(_mm512_sub_ps(one, t), _mm512_add_ps(one, t));
        th = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(th), _mm512_and_si512(ui, sign)));
        _mm512_mask_storeu_ps(s + i, m, _mm512_mul_ps(vc, th));
    }
}

const loom_attn_kernels loom_attn_kernels_avx512 = {
    .name = "avx512",
    .bgemm = bgemm_avx512,
    .bgemm_rows = bgemm_rows_avx512,
    .qk_bf16 = NULL,
    .softmax_cols = softmax_cols_avx512,
    .pack_t = pack_t_avx512,
    .unpack_t = unpack_t_avx512,
    .to_f32 = loom_attn_to_f32_avx512,
    .softcap = softcap_avx512,
    .dec_dot = loom_attn_dec_dot_avx512,
    .dec_pv = loom_attn_dec_pv_avx512,
    .dec_qprep = loom_attn_dec_qprep_avx512,
    .dec_dot_prep = loom_attn_dec_dot_prep_avx512,
    .softmax_rows = loom_attn_softmax_rows_avx512,
    .dec_self_prefetch = 1,
    .dec_i8_xpf = 1,
    /* i8 tiles of 64 keys: the integer P.V's per-tile work (the rounding of
     * P, the conversion of its sums) spread over twice the keys (hot tile
     * 16.6 -> 15.8 ns per key at d = 128), while the K and V phases stay
     * short enough to keep both streams in flight. In-process A/B on Zen 4
     * (bench_attention --ab i8tileN), points of the read bandwidth, GQA 32/8:
     * against 32 keys +2..+4 on one thread and +2..+5 on two, against 128
     * keys (hot 15.0 ns per key) -0.2..+3 and +3..+11. */
    .dec_i8_tile = 64,
    .dec_group_span = 64 << 10,
};

const loom_attn_kernels loom_attn_kernels_avx512_bf16 = {
    .name = "avx512_bf16",
    .bgemm = bgemm_avx512,
    .bgemm_rows = bgemm_rows_avx512,
    .qk_bf16 = qk_bf16_avx512,
    .pv_bf16 = pv_bf16_avx512,
    .softmax_cols = softmax_cols_avx512,
    .pack_t = pack_t_avx512,
    .unpack_t = unpack_t_avx512,
    .to_f32 = loom_attn_to_f32_avx512,
    .softcap = softcap_avx512,
    .to_bf16 = to_bf16_avx512,
    .dec_dot = loom_attn_dec_dot_avx512bf,
    .dec_pv = loom_attn_dec_pv_avx512bf,
    .dec_qprep = loom_attn_dec_qprep_avx512bf,
    .dec_dot_prep = loom_attn_dec_dot_prep_avx512bf,
    .softmax_rows = loom_attn_softmax_rows_avx512,
    .dec_self_prefetch = 1,
    .dec_i8_xpf = 1,
    .dec_i8_tile = 64,
    .dec_group_span = 64 << 10,
};
#else
typedef int loom_attn_avx512_unused; /* ISO C wants a non-empty translation unit */
#endif
