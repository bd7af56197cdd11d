/*
 * AVX2 + FMA GEMM kernel set (CPUs without AVX-512): a 6 x 16 tile (12 ymm
 * accumulators, two B vectors, one broadcast), W transposed into 16-wide
 * k-major panels with 8 x 8 register transposes (f16 widened with F16C, bf16
 * by a 16-bit shift, quantized blocks dequantized for full activations), and
 * a vectorised epilogue with the same formulas and NaN/Inf behaviour as the
 * AVX-512 one (gemm_avx512_ep.c).
 */
#include "ops/matmul/gemm_kernels.h"

#if defined(__x86_64__)
#include <string.h>

#include "ops/matmul/gemm_x86.h"

#define MR 6
#define NR 16

/* lanes [0, n) set, for maskload/maskstore */
LOOM_TARGET_AVX2 static inline __m256i lanes8(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 8 values of a W row at element off as f32; kn < 8 reads only kn (zeros after). */
LOOM_TARGET_AVX2 static inline __m256 load8(const void *p, int64_t off, int kn, loom_dtype dt) {
    if (dt == LOOM_F32) {
        const float *s = (const float *)p + off;
        return kn == 8 ? _mm256_loadu_ps(s) : _mm256_maskload_ps(s, lanes8(kn));
    }
    const uint16_t *s = (const uint16_t *)p + off;
    __m128i h;
    if (kn == 8) {
        h = _mm_loadu_si128((const __m128i *)s);
    } else { /* no 16-bit masked load in AVX2: stage the tail */
        uint16_t tmp[8] = {0};
        memcpy(tmp, s, (size_t)kn * sizeof(uint16_t));
        h = _mm_loadu_si128((const __m128i *)tmp);
    }
    if (dt == LOOM_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

LOOM_TARGET_AVX2 static inline void pack_b_any(const void *w, int64_t ldw, int cols, int64_t kc,
                                               float *d, loom_dtype dt) {
    const int64_t es = (int64_t)loom_dtype_size(dt);
    /* 8 rows at a time, read front to back and prefetched 8 lines ahead */
    for (int g = 0; g < NR / 8; g++) {
        for (int64_t k = 0; k < kc; k += 8) {
            int kn = (int)(kc - k < 8 ? kc - k : 8);
            __m256 r[8];
            for (int i = 0; i < 8; i++) {
                int n = g * 8 + i;
                if (n < cols) {
                    if (k + 512 / es < kc)
                        _mm_prefetch((const char *)w + (n * ldw + k) * es + 512, _MM_HINT_T0);
                    r[i] = load8(w, n * ldw + k, kn, dt);
                } else {
                    r[i] = _mm256_setzero_ps();
                }
            }
            loom_tr8x8(r);
            for (int i = 0; i < kn; i++) _mm256_store_ps(d + (k + i) * NR + g * 8, r[i]);
        }
    }
}

LOOM_TARGET_AVX2 static void pack_b_f32(const void *w, int64_t ldw, int cols, int64_t kc, void *d) {
    pack_b_any(w, ldw, cols, kc, d, LOOM_F32);
}
LOOM_TARGET_AVX2 static void pack_b_f16(const void *w, int64_t ldw, int cols, int64_t kc, void *d) {
    pack_b_any(w, ldw, cols, kc, d, LOOM_F16);
}
LOOM_TARGET_AVX2 static void pack_b_bf16(const void *w, int64_t ldw, int cols, int64_t kc, void *d) {
    pack_b_any(w, ldw, cols, kc, d, LOOM_BF16);
}

/* Quantized W (full activations): block blk as four vectors of 8 f32,
 * elements 8j .. 8j+7 in v[j], rounded as the reference dequantization
 * (loom_row_to_f32) rounds them: d * q, d * (q - 8), d * q + m. */
LOOM_TARGET_AVX2 static inline void deq_block(loom_dtype wt, const uint8_t *blk, __m256 v[4]) {
    uint16_t h[2];
    memcpy(h, blk, sizeof h);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(h[0]));
    __m256i q[4];
    if (wt == LOOM_Q8_0) {
        for (int j = 0; j < 4; j++) q[j] = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + 8 * j)));
    } else {
        __m128i b = _mm_loadu_si128((const __m128i *)(blk + (wt == LOOM_Q4_1 ? 4 : 2)));
        __m256i v0 = _mm256_cvtepu8_epi32(b), v1 = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(b, b));
        const __m256i low4 = _mm256_set1_epi32(0x0F);
        q[0] = _mm256_and_si256(v0, low4), q[1] = _mm256_and_si256(v1, low4);
        q[2] = _mm256_srli_epi32(v0, 4), q[3] = _mm256_srli_epi32(v1, 4);
        if (wt == LOOM_Q4_0)
            for (int j = 0; j < 4; j++) q[j] = _mm256_sub_epi32(q[j], _mm256_set1_epi32(8));
    }
    for (int j = 0; j < 4; j++) v[j] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(q[j]));
    if (wt == LOOM_Q4_1) {
        const __m256 m = _mm256_set1_ps(_cvtsh_ss(h[1]));
        for (int j = 0; j < 4; j++) v[j] = _mm256_add_ps(v[j], m);
    }
}

/* 8 rows at a time, one block (32 k) of each dequantized into registers and
 * transposed as four 8 x 8 pieces. */
LOOM_TARGET_AVX2 static inline void pack_b_q(loom_dtype wt, const void *w, int64_t ldw, int cols, int64_t kc,
                                             float *d) {
    const size_t rb = loom_dtype_row_bytes(wt, ldw), bs = loom_dtype_block_bytes(wt);
    const size_t span = (size_t)(kc / LOOM_QBLOCK) * bs; /* bytes of a row this panel reads */
    for (int g = 0; g < NR / 8; g++) {
        for (int64_t k = 0; k < kc; k += LOOM_QBLOCK) {
            size_t off = (size_t)(k / LOOM_QBLOCK) * bs;
            __m256 r[4][8];
            for (int i = 0; i < 8; i++) {
                int n = g * 8 + i;
                __m256 v[4];
                if (n < cols) {
                    const uint8_t *blk = (const uint8_t *)w + (size_t)n * rb + off;
                    if (off + 512 < span) _mm_prefetch((const char *)blk + 512, _MM_HINT_T0);
                    deq_block(wt, blk, v);
                } else {
                    v[0] = v[1] = v[2] = v[3] = _mm256_setzero_ps();
                }
                for (int j = 0; j < 4; j++) r[j][i] = v[j];
            }
            for (int j = 0; j < 4; j++) {
                loom_tr8x8(r[j]);
                for (int i = 0; i < 8; i++) _mm256_store_ps(d + (k + 8 * j + i) * NR + g * 8, r[j][i]);
            }
        }
    }
}

LOOM_TARGET_AVX2 static void pack_b_q8_0(const void *w, int64_t ldw, int cols, int64_t kc, void *d) {
    pack_b_q(LOOM_Q8_0, w, ldw, cols, kc, d);
}
LOOM_TARGET_AVX2 static void pack_b_q4_0(const void *w, int64_t ldw, int cols, int64_t kc, void *d) {
    pack_b_q(LOOM_Q4_0, w, ldw, cols, kc, d);
}
LOOM_TARGET_AVX2 static void pack_b_q4_1(const void *w, int64_t ldw, int cols, int64_t kc, void *d) {
    pack_b_q(LOOM_Q4_1, w, ldw, cols, kc, d);
}

LOOM_TARGET_AVX2 static void pack_a(const float *x, int64_t ldx, int rows, int64_t kc, void *dst) {
    float *d = dst;
    const __m256i rm = lanes8(MR);
    for (int64_t k = 0; k < kc; k += 8) {
        int kn = (int)(kc - k < 8 ? kc - k : 8);
        __m256 r[8];
        for (int i = 0; i < 8; i++)
            r[i] = i < rows ? load8(x, i * ldx + k, kn, LOOM_F32) : _mm256_setzero_ps();
        loom_tr8x8(r);
        for (int i = 0; i < kn; i++) _mm256_maskstore_ps(d + (k + i) * MR, rm, r[i]);
    }
}

LOOM_TARGET_AVX2 static void micro(int64_t kc, const void *ap, const void *bp, float *c, int64_t ldc,
                                   int rows, int cols, int accumulate) {
    const float *a = ap, *b = bp;
    for (int i = 0; i < rows; i++) _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
    __m256 acc[MR][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            __m256 av = _mm256_broadcast_ss(a + i);
            acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
        }
        a += MR;
        b += NR;
    }
    const __m256i m0 = lanes8(cols), m1 = lanes8(cols - 8);
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        if (i >= rows) break;
        float *ci = c + i * ldc;
        __m256 v0 = acc[i][0], v1 = acc[i][1];
        if (cols == NR) {
            if (accumulate) {
                v0 = _mm256_add_ps(_mm256_loadu_ps(ci), v0);
                v1 = _mm256_add_ps(_mm256_loadu_ps(ci + 8), v1);
            }
            _mm256_storeu_ps(ci, v0);
            _mm256_storeu_ps(ci + 8, v1);
        } else {
            if (accumulate) {
                v0 = _mm256_add_ps(_mm256_maskload_ps(ci, m0), v0);
                v1 = _mm256_add_ps(_mm256_maskload_ps(ci + 8, m1), v1);
            }
            _mm256_maskstore_ps(ci, m0, v0);
            _mm256_maskstore_ps(ci + 8, m1, v1);
        }
    }
}

/* ------------------------------------------------------------ epilogue */

#define V(x) _mm256_set1_ps(x)

/* 2^n for integral n in [-150, 129], as two normal factors so that the
 * product over/underflows the way expf does. */
LOOM_TARGET_AVX2 static inline __m256 pow2_mul(__m256 p, __m256 n) {
    __m256 n1 = _mm256_floor_ps(_mm256_mul_ps(n, V(0.5f))), n2 = _mm256_sub_ps(n, n1);
    __m256i e1 = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n1), _mm256_set1_epi32(127)), 23);
    __m256i e2 = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n2), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e1)), _mm256_castsi256_ps(e2));
}

/* e^x as exp16 in gemm_avx512_ep.c: NaN passes through the clamps. */
LOOM_TARGET_AVX2 static inline __m256 exp8(__m256 x) {
    x = _mm256_max_ps(V(-104.0f), _mm256_min_ps(V(89.0f), x));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, V(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, V(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, V(1.428606765330187e-06f), r);
    __m256 p = V(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, V(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, V(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, V(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, V(0.5f));
    p = _mm256_fmadd_ps(p, r, V(1.0f));
    p = _mm256_fmadd_ps(p, r, V(1.0f));
    return pow2_mul(p, n);
}

LOOM_TARGET_AVX2 static inline __m256 abs8(__m256 x) {
    return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

LOOM_TARGET_AVX2 static inline __m256 copysign8(__m256 m, __m256 s) {
    return _mm256_or_ps(m, _mm256_and_ps(s, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u))));
}

LOOM_TARGET_AVX2 static inline __m256 erf8(__m256 z) {
    __m256 a = abs8(z);
    __m256 t = _mm256_div_ps(V(1.0f), _mm256_fmadd_ps(a, V(0.3275911f), V(1.0f)));
    __m256 p = V(1.061405429f);
    p = _mm256_fmadd_ps(p, t, V(-1.453152027f));
    p = _mm256_fmadd_ps(p, t, V(1.421413741f));
    p = _mm256_fmadd_ps(p, t, V(-0.284496736f));
    p = _mm256_fmadd_ps(p, t, V(0.254829592f));
    p = _mm256_mul_ps(p, t);
    __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(a, a)));
    return copysign8(_mm256_fnmadd_ps(p, e, V(1.0f)), z);
}

LOOM_TARGET_AVX2 static inline __m256 tanh8(__m256 u) {
    __m256 e = exp8(_mm256_mul_ps(abs8(u), V(-2.0f)));
    return copysign8(_mm256_div_ps(_mm256_sub_ps(V(1.0f), e), _mm256_add_ps(V(1.0f), e)), u);
}

LOOM_TARGET_AVX2 static inline __m256 act8(loom_act act, __m256 x) {
    switch (act) {
    case LOOM_ACT_SILU:
        return _mm256_div_ps(x, _mm256_add_ps(V(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
    case LOOM_ACT_GELU:
        return _mm256_mul_ps(_mm256_mul_ps(V(0.5f), x),
                             _mm256_add_ps(V(1.0f), erf8(_mm256_mul_ps(x, V(0.70710678118654752f)))));
    case LOOM_ACT_GELU_TANH: {
        __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(V(0.044715f), x), x), x);
        __m256 u = _mm256_mul_ps(V(0.79788456080286536f), _mm256_add_ps(x, x3));
        return _mm256_mul_ps(_mm256_mul_ps(V(0.5f), x), _mm256_add_ps(V(1.0f), tanh8(u)));
    }
    case LOOM_ACT_RELU: return _mm256_max_ps(x, _mm256_setzero_ps()); /* NaN -> 0, as the reference */
    default: return x;
    }
}

/* Whole 8-column groups take plain loads and stores, only a tail the masked
 * ones: vmaskmovps stores are microcoded on AMD cores (a BERT layer's bias and
 * GELU in the epilogue ran at half the speed of the separate kernels on Zen 3
 * with every store masked). */
LOOM_TARGET_AVX2 static inline __m256 ld8(const float *p, __m256i m, int full) {
    return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m);
}

LOOM_TARGET_AVX2 static void epilogue(const loom_gemm_tile_ep *t) {
    /* the tile's fields in locals: the stores below could alias *t otherwise */
    const __m256 scale = V(t->scale);
    float *tile = t->tile;
    const float *bp = t->bias, *mul = t->mul, *res = t->res;
    const int64_t ld = t->ld, ld_mul = t->ld_mul, ld_res = t->ld_res;
    const int rows = t->rows, cols = t->cols;
    const loom_act act = t->act;
    for (int c = 0; c < cols; c += 8) {
        const int full = cols - c >= 8;
        __m256i m = lanes8(cols - c);
        __m256 bias = bp ? ld8(bp + c, m, full) : _mm256_setzero_ps();
        for (int r = 0; r < rows; r++) {
            float *p = tile + r * ld + c;
            __m256 v = _mm256_mul_ps(ld8(p, m, full), scale);
            if (bp) v = _mm256_add_ps(v, bias);
            v = act8(act, v);
            if (mul) v = _mm256_mul_ps(v, ld8(mul + r * ld_mul + c, m, full));
            if (res) v = _mm256_add_ps(v, ld8(res + r * ld_res + c, m, full));
            if (full) _mm256_storeu_ps(p, v);
            else _mm256_maskstore_ps(p, m, v);
        }
    }
}

#define KSET(name_, pack_b_)                                                                       \
    {.name = name_, .mr = MR, .nr = NR, .kstep = 1, .elem = 4, .pack_a = pack_a,                   \
     .pack_b = pack_b_, .micro = micro, .epilogue = epilogue}

static const loom_gemm_kset kset_f32 = KSET("avx2.f32", pack_b_f32);
static const loom_gemm_kset kset_f16 = KSET("avx2.f16", pack_b_f16);
static const loom_gemm_kset kset_bf16 = KSET("avx2.bf16_as_f32", pack_b_bf16);
static const loom_gemm_kset kset_q8_0 = KSET("avx2.q8_0_as_f32", pack_b_q8_0);
static const loom_gemm_kset kset_q4_0 = KSET("avx2.q4_0_as_f32", pack_b_q4_0);
static const loom_gemm_kset kset_q4_1 = KSET("avx2.q4_1_as_f32", pack_b_q4_1);

const loom_gemm_kset *loom_gemm_kset_avx2(loom_dtype wt) {
    switch (wt) {
    case LOOM_F16: return &kset_f16;
    case LOOM_BF16: return &kset_bf16;
    case LOOM_Q8_0: return &kset_q8_0;
    case LOOM_Q4_0: return &kset_q4_0;
    case LOOM_Q4_1: return &kset_q4_1;
    default: return &kset_f32;
    }
}

#else
const loom_gemm_kset *loom_gemm_kset_avx2(loom_dtype wt) { (void)wt; return NULL; }
#endif
