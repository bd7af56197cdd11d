/*
 * AVX512-VNNI kernel set of the quantized GEMM: a 6 x 32 register tile.
 * Lanes are W rows; per 4 k, two vpdpbusd (unsigned weight bytes, 16 rows
 * each) against the broadcast signed x quad of each of the 6 x rows. The
 * block's int32 sums start from the activation bias (-8 * sum(x) undoes the
 * q4_0 nibble offset, -128 * sum(x) the q8_0 + 128 shift), then take the
 * f32 scale product d_w * d_x in one FMA per block; q4_1 adds m_w * s_x.
 */
#include "ops/matmul/gemm_q_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define TGT "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
#define INLINE static inline __attribute__((always_inline, target(TGT)))

/* Loops over registers must unroll fully so the arrays stay in registers. */
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 8")
#endif

enum { MR = 6, NR = 32 };

INLINE __m512i load_x4(const char *p0, const char *p1, const char *p2, const char *p3) {
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p0));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)p1), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)p2), 2);
    return _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)p3), 3);
}

/* One panel half: rows [0, 16) of w (nrow of them valid, at least one; the
 * others repeat row 0 and are cleared by the lane mask). Rows become lanes by
 * a dword transpose in registers (unpacks within 128-bit lanes, then one
 * 128-bit shuffle for q8_0); the 16 scales come in one gather. */
INLINE void pack_half(loom_dtype wt, const char *w, size_t row_bytes, int nrow, int64_t nb,
                      uint8_t *panel, int h) {
    const size_t bb = loom_gemm_q_panel_block_bytes(NR), bs = loom_dtype_block_bytes(wt);
    const __mmask16 mk = (__mmask16)(nrow >= 16 ? 0xFFFF : (1u << nrow) - 1);
    const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32((int)row_bytes));
    const __m512i zero = _mm512_setzero_si512(), low4 = _mm512_set1_epi8(0x0F);
    const char *row[16];
    for (int c = 0; c < 16; c++) row[c] = w + (size_t)(c < nrow ? c : 0) * row_bytes;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *q = panel + (size_t)b * bb + h * 64;
        float *d = (float *)(panel + (size_t)b * bb + 32 * NR) + h * 16;
        size_t off = (size_t)b * bs;
        if (wt == LOOM_Q8_0) {
            /* z[k] = rows k, k+4 (first 256 bits) and k+8, k+12 of quads 0..7 */
            __m512i z[8], t[8];
UNROLL
            for (int k = 0; k < 8; k++) {
                int r = (k & 3) + (k & 4) * 2;
                __m256i lo = _mm256_loadu_si256((const __m256i *)(row[r] + off + 2));
                z[k] = _mm512_inserti64x4(_mm512_castsi256_si512(lo),
                                          _mm256_loadu_si256((const __m256i *)(row[r + 4] + off + 2)), 1);
            }
UNROLL
            for (int k = 0; k < 8; k += 4) {
                __m512i a0 = _mm512_unpacklo_epi32(z[k], z[k + 1]), a1 = _mm512_unpackhi_epi32(z[k], z[k + 1]);
                __m512i a2 = _mm512_unpacklo_epi32(z[k + 2], z[k + 3]), a3 = _mm512_unpackhi_epi32(z[k + 2], z[k + 3]);
                t[k] = _mm512_unpacklo_epi64(a0, a2);      /* 128-bit lane L: quad (L&1)*4 + 0 */
                t[k + 1] = _mm512_unpackhi_epi64(a0, a2);  /* quad + 1 */
                t[k + 2] = _mm512_unpacklo_epi64(a1, a3);  /* quad + 2 */
                t[k + 3] = _mm512_unpackhi_epi64(a1, a3);  /* quad + 3 */
            }
            const __m512i k80 = _mm512_set1_epi8((char)0x80);
UNROLL
            for (int j = 0; j < 4; j++) {
                __m512i q0 = _mm512_shuffle_i32x4(t[j], t[j + 4], 0x88);  /* lanes 0, 2: quad j */
                __m512i q1 = _mm512_shuffle_i32x4(t[j], t[j + 4], 0xDD);  /* lanes 1, 3: quad j + 4 */
                _mm512_store_si512(q + j * 128, _mm512_maskz_xor_epi32(mk, q0, k80));
                _mm512_store_si512(q + (j + 4) * 128, _mm512_maskz_xor_epi32(mk, q1, k80));
            }
        } else {
            /* z[k] = rows k, k+4, k+8, k+12, 16 bytes of qs each */
            size_t qo = off + (wt == LOOM_Q4_0 ? 2 : 4);
            __m512i z[4];
UNROLL
            for (int k = 0; k < 4; k++) z[k] = load_x4(row[k] + qo, row[k + 4] + qo, row[k + 8] + qo, row[k + 12] + qo);
            __m512i a0 = _mm512_unpacklo_epi32(z[0], z[1]), a1 = _mm512_unpackhi_epi32(z[0], z[1]);
            __m512i a2 = _mm512_unpacklo_epi32(z[2], z[3]), a3 = _mm512_unpackhi_epi32(z[2], z[3]);
            __m512i g[4] = {_mm512_unpacklo_epi64(a0, a2), _mm512_unpackhi_epi64(a0, a2),
                            _mm512_unpacklo_epi64(a1, a3), _mm512_unpackhi_epi64(a1, a3)};
UNROLL
            for (int j = 0; j < 4; j++) {
                /* bytes 4j..4j+3 hold elements 4j.. (low nibbles) and 16+4j.. (high) */
                _mm512_store_si512(q + j * 128, _mm512_maskz_and_epi32(mk, g[j], low4));
                _mm512_store_si512(q + (j + 4) * 128, _mm512_maskz_and_epi32(mk, _mm512_srli_epi32(g[j], 4), low4));
            }
        }
        /* d (and q4_1's m in the next half word) */
        __m512i g = _mm512_mask_i32gather_epi32(zero, mk, idx, w + off, 1);
        _mm512_store_ps(d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g)));
        _mm512_store_ps(d + NR, wt == LOOM_Q4_1 ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16)))
                                                : _mm512_setzero_ps());
    }
}

__attribute__((target(TGT)))
static void pack_vnni(loom_dtype wt, const void *w, size_t row_bytes, int cols, int64_t nb, void *panel) {
    if (row_bytes > (size_t)INT32_MAX / 16) {  /* gather offsets are int32 */
        loom_gemm_q_pack_generic(wt, w, row_bytes, cols, nb, panel, NR, 1);
        return;
    }
    for (int h = 0; h < 2; h++) {
        const char *wh = (const char *)w + (size_t)(h * 16) * row_bytes;
        int nrow = cols - 16 * h;
        if (nrow <= 0) {  /* no rows: zero lanes */
            size_t bb = loom_gemm_q_panel_block_bytes(NR);
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *q = (uint8_t *)panel + (size_t)b * bb;
                for (int j = 0; j < 8; j++) memset(q + j * 128 + h * 64, 0, 64);
                memset(q + 32 * NR + h * 64, 0, 64);
                memset(q + 36 * NR + h * 64, 0, 64);
            }
            continue;
        }
        switch (wt) {
        case LOOM_Q8_0: pack_half(LOOM_Q8_0, wh, row_bytes, nrow, nb, panel, h); break;
        case LOOM_Q4_0: pack_half(LOOM_Q4_0, wh, row_bytes, nrow, nb, panel, h); break;
        default: pack_half(LOOM_Q4_1, wh, row_bytes, nrow, nb, panel, h); break;
        }
    }
}

INLINE __m512i bcast_quad(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* R: the x rows computed (a constant, <= MR; rows <= R of them stored).
 * compact: the panel packed once at load (gemm_q_kernels.h): q4 nibbles two
 * quads to a byte, split here with one shift and two masks per 64 bytes, f16
 * scales widened exactly (vcvtph2ps). The
 * int32 block sums are exact in any order, so both forms give the same bits. */
INLINE void micro_body(loom_dtype wt, int compact, int R, int64_t b0, int64_t nblk, const loom_q8_act *xr,
                       const uint8_t *panel, float *c, int64_t ldc, int rows, int cols,
                       int accumulate) {
    const size_t bb = compact ? loom_gemm_q_packed_block_bytes(wt, NR) : loom_gemm_q_panel_block_bytes(NR);
    const size_t dof = compact ? loom_gemm_q_packed_scale_offset(wt, NR) : 32 * NR;
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __mmask16 m0 = (__mmask16)(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
    __mmask16 m1 = (__mmask16)(cols >= 32 ? 0xFFFF : cols > 16 ? (1u << (cols - 16)) - 1 : 0);
    __m512 acc[MR][2];
UNROLL
    for (int i = 0; i < R; i++) {
        if (accumulate && i < rows) {
            acc[i][0] = _mm512_maskz_loadu_ps(m0, c + i * ldc);
            acc[i][1] = _mm512_maskz_loadu_ps(m1, c + i * ldc + 16);
        } else {
            acc[i][0] = _mm512_setzero_ps();
            acc[i][1] = _mm512_setzero_ps();
        }
    }
    for (int64_t b = b0; b < b0 + nblk; b++) {
        const uint8_t *q = panel + (size_t)(b - b0) * bb;
        const float *d = (const float *)(q + dof);
        __m512i s[MR][2];
UNROLL
        for (int i = 0; i < R; i++) s[i][0] = s[i][1] = _mm512_set1_epi32(xr[i].bias[b]);
        if (compact && wt != LOOM_Q8_0) {
UNROLL
            for (int j = 0; j < 4; j++) {
                __m512i g0 = _mm512_load_si512(q + j * 128), g1 = _mm512_load_si512(q + j * 128 + 64);
                __m512i w0 = _mm512_and_si512(g0, low4), w1 = _mm512_and_si512(g1, low4);
                __m512i v0 = _mm512_and_si512(_mm512_srli_epi32(g0, 4), low4);
                __m512i v1 = _mm512_and_si512(_mm512_srli_epi32(g1, 4), low4);
UNROLL
                for (int i = 0; i < R; i++) {
                    __m512i xq = bcast_quad(xr[i].qs + b * 32 + 4 * j);
                    __m512i xh = bcast_quad(xr[i].qs + b * 32 + 4 * j + 16);
                    s[i][0] = _mm512_dpbusd_epi32(s[i][0], w0, xq);
                    s[i][1] = _mm512_dpbusd_epi32(s[i][1], w1, xq);
                    s[i][0] = _mm512_dpbusd_epi32(s[i][0], v0, xh);
                    s[i][1] = _mm512_dpbusd_epi32(s[i][1], v1, xh);
                }
            }
        } else {
UNROLL
            for (int j = 0; j < 8; j++) {
                __m512i w0 = _mm512_load_si512(q + j * 128), w1 = _mm512_load_si512(q + j * 128 + 64);
UNROLL
                for (int i = 0; i < R; i++) {
                    __m512i xq = bcast_quad(xr[i].qs + b * 32 + 4 * j);
                    s[i][0] = _mm512_dpbusd_epi32(s[i][0], w0, xq);
                    s[i][1] = _mm512_dpbusd_epi32(s[i][1], w1, xq);
                }
            }
        }
        __m512 d0, d1;
        if (compact) { /* f16 scales */
            d0 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(q + dof)));
            d1 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(q + dof + 32)));
        } else {
            d0 = _mm512_load_ps(d), d1 = _mm512_load_ps(d + 16);
        }
UNROLL
        for (int i = 0; i < R; i++) {
            __m512 dx = _mm512_set1_ps(xr[i].d[b]);
            acc[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i][0]), _mm512_mul_ps(d0, dx), acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i][1]), _mm512_mul_ps(d1, dx), acc[i][1]);
        }
        if (wt == LOOM_Q4_1) {
            __m512 n0, n1;
            if (compact) {
                n0 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(q + dof + 2 * NR)));
                n1 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(q + dof + 2 * NR + 32)));
            } else {
                n0 = _mm512_load_ps(d + NR), n1 = _mm512_load_ps(d + NR + 16);
            }
UNROLL
            for (int i = 0; i < R; i++) {
                __m512 sx = _mm512_set1_ps(xr[i].s[b]);
                acc[i][0] = _mm512_fmadd_ps(n0, sx, acc[i][0]);
                acc[i][1] = _mm512_fmadd_ps(n1, sx, acc[i][1]);
            }
        }
    }
UNROLL
    for (int i = 0; i < R; i++)
        if (i < rows) {
            _mm512_mask_storeu_ps(c + i * ldc, m0, acc[i][0]);
            _mm512_mask_storeu_ps(c + i * ldc + 16, m1, acc[i][1]);
        }
}

__attribute__((target(TGT)))
static void micro_vnni(loom_dtype wt, int64_t b0, int64_t nblk, const loom_q8_act *xr,
                       const void *panel, float *c, int64_t ldc, int rows, int cols, int accumulate) {
    if (wt == LOOM_Q4_1)
        micro_body(LOOM_Q4_1, 0, MR, b0, nblk, xr, panel, c, ldc, rows, cols, accumulate);
    else
        micro_body(LOOM_Q8_0, 0, MR, b0, nblk, xr, panel, c, ldc, rows, cols, accumulate);
}

/* Over packed panels the tile computes only its rows: a batch of a few
 * sequences (or one, batch-invariant) is often a short tile. */
#define PACKED_ROWS(WT)                                                                              \
    switch (rows) {                                                                                  \
    case 1: micro_body(WT, 1, 1, b0, nblk, xr, panel, c, ldc, rows, cols, accumulate); break;        \
    case 2: micro_body(WT, 1, 2, b0, nblk, xr, panel, c, ldc, rows, cols, accumulate); break;        \
    case 3: micro_body(WT, 1, 3, b0, nblk, xr, panel, c, ldc, rows, cols, accumulate); break;        \
    case 4: micro_body(WT, 1, 4, b0, nblk, xr, panel, c, ldc, rows, cols, accumulate); break;        \
    case 5: micro_body(WT, 1, 5, b0, nblk, xr, panel, c, ldc, rows, cols, accumulate); break;        \
    default: micro_body(WT, 1, MR, b0, nblk, xr, panel, c, ldc, rows, cols, accumulate); break;      \
    }

__attribute__((target(TGT)))
static void micro_vnni_packed(loom_dtype wt, int64_t b0, int64_t nblk, const loom_q8_act *xr,
                              const void *panel, float *c, int64_t ldc, int rows, int cols, int accumulate) {
    switch (wt) {
    case LOOM_Q4_1: PACKED_ROWS(LOOM_Q4_1); break;
    case LOOM_Q4_0: PACKED_ROWS(LOOM_Q4_0); break;
    default: PACKED_ROWS(LOOM_Q8_0); break;
    }
}

static const loom_gemm_q_kset kset = {"avx512_vnni", MR, NR, 1, pack_vnni, micro_vnni, micro_vnni_packed};

const loom_gemm_q_kset *loom_gemm_q_kset_avx512_vnni(void) { return &kset; }

#endif
