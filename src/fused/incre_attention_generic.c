/* Portable decode micro-kernels, written with GCC/Clang vector extensions
 * (4-lane vectors: SSE2 on baseline x86-64, NEON elsewhere), as the generic
 * GEMM is. Q.K^T takes one key at a time against four q rows (eight
 * accumulators: two per row, so eight chains of adds are in flight); P.V
 * keeps four rows x 8 columns of the accumulator in registers over the
 * tile's keys. A 16-bit or i8 row is converted to f32 once per tile and key.
 * Scalar sums per score and accumulator rows in memory ran the hot f32 Q.K^T
 * 6x and P.V 3x slower (bench/results/attention.md). */
#include "fused/flash_attention_internal.h"

#include <math.h>
#include <string.h>

typedef float v4f __attribute__((vector_size(16)));

static inline v4f ld4(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void st4(float *p, v4f v) { memcpy(p, &v, sizeof v); }

static inline float hsum4(v4f v) { return (v[0] + v[1]) + (v[2] + v[3]); }

/* Row c of a tile as f32: the cache row itself when it is f32, else converted into buf. */
static const float *row_f32(float *buf, const void *row, loom_dtype dt, int d) {
    if (dt == LOOM_F32) return (const float *)row;
    attn_load_row(buf, row, dt, 1, d);
    return buf;
}

/* s[r][c] for RB (4 or 1) rows of q against key row k (d floats). */
static inline void dot_key(int RB, float *s, int64_t lds, const float *q, int64_t ldq, const float *k, int d) {
    v4f a[8] = {0};
    int x = 0;
    for (; x + 8 <= d; x += 8) {
        v4f k0 = ld4(k + x), k1 = ld4(k + x + 4);
        for (int i = 0; i < RB; i++) {
            a[2 * i] += ld4(q + i * ldq + x) * k0;
            a[2 * i + 1] += ld4(q + i * ldq + x + 4) * k1;
        }
    }
    for (int i = 0; i < RB; i++) {
        float t = hsum4(a[2 * i] + a[2 * i + 1]);
        for (int y = x; y < d; y++) t += q[i * ldq + y] * k[y];
        s[i * lds] = t;
    }
}

void loom_attn_dec_dot_generic(float *s, int64_t lds, const float *q, int64_t ldq, int nr,
                               const void *const *rows, loom_dtype dt, int nc, int d,
                               const attn_dec_pf *pf) {
    (void)pf; /* nothing to gain without a vector loop to hide the misses in */
    float buf[LOOM_ATTN_MAX_HEAD_DIM];
    for (int c = 0; c < nc; c++) {
        const float *k = row_f32(buf, rows[c], dt, d);
        int r = 0;
        for (; r + 4 <= nr; r += 4) dot_key(4, s + r * lds + c, lds, q + r * ldq, ldq, k, d);
        for (; r < nr; r++) dot_key(1, s + r * lds + c, lds, q + r * ldq, ldq, k, d);
    }
}

/* acc rows r < RB (4 or 1), columns x0 .. x0+7, over the nc V rows vr[c]
 * (as f32). */
static inline void pv_block(int RB, float *acc, int64_t lda, const float *p, int64_t ldp, const float *const *vr,
                            int nc, int x0, const float *alpha) {
    v4f a[8];
    for (int i = 0; i < RB; i++) {
        a[2 * i] = ld4(acc + i * lda + x0) * alpha[i];
        a[2 * i + 1] = ld4(acc + i * lda + x0 + 4) * alpha[i];
    }
    for (int c = 0; c < nc; c++) {
        v4f v0 = ld4(vr[c] + x0), v1 = ld4(vr[c] + x0 + 4);
        for (int i = 0; i < RB; i++) {
            float pc = p[i * ldp + c];
            a[2 * i] += v0 * pc;
            a[2 * i + 1] += v1 * pc;
        }
    }
    for (int i = 0; i < RB; i++) {
        st4(acc + i * lda + x0, a[2 * i]);
        st4(acc + i * lda + x0 + 4, a[2 * i + 1]);
    }
}

void loom_attn_dec_pv_generic(float *acc, int64_t lda, const float *p, int64_t ldp, int nr,
                              const void *const *rows, loom_dtype dt, int nc, int d,
                              const float *alpha, const attn_dec_pf *pf) {
    (void)pf;
    float vt[ATTN_DEC_TILE * LOOM_ATTN_MAX_HEAD_DIM]; /* the tile's rows as f32, for 16-bit and i8 caches */
    const float *vr[ATTN_DEC_TILE];
    if (nc > ATTN_DEC_TILE) { /* one tile at a time */
        for (int c0 = 0; c0 < nc; c0 += ATTN_DEC_TILE) {
            int n = nc - c0 < ATTN_DEC_TILE ? nc - c0 : ATTN_DEC_TILE;
            loom_attn_dec_pv_generic(acc, lda, p + c0, ldp, nr, rows + c0, dt, n, d, alpha, pf);
            if (c0 == 0) alpha = NULL; /* rescaled once */
        }
        return;
    }
    for (int c = 0; c < nc; c++) vr[c] = row_f32(vt + (size_t)c * d, rows[c], dt, d);
    static const float one[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    int x8 = d & ~7, rb;
    for (int r = 0; r < nr; r += rb) {
        rb = nr - r >= 4 ? 4 : 1;
        const float *al = alpha ? alpha + r : one;
        for (int x0 = 0; x0 < x8; x0 += 8) {
            if (rb == 4) pv_block(4, acc + r * lda, lda, p + r * ldp, ldp, vr, nc, x0, al);
            else pv_block(1, acc + r * lda, lda, p + r * ldp, ldp, vr, nc, x0, al);
        }
        for (int i = 0; i < rb; i++) /* the columns past the last multiple of 8 */
            for (int x = x8; x < d; x++) {
                float t = acc[(r + i) * lda + x] * al[i];
                for (int c = 0; c < nc; c++) t += p[(r + i) * ldp + c] * vr[c][x];
                acc[(r + i) * lda + x] = t;
            }
    }
}

typedef int32_t v4i __attribute__((vector_size(16)));

/* 2^x, four lanes, as attn_exp2_256: x below -127 gives exactly 0 (the
 * exponent field becomes 0), -inf 0, NaN stays NaN. Masks instead of ?:
 * (C has no vector conditional); n is rounded with the 1.5 * 2^23 trick. */
static inline v4f exp2_v4(v4f x) {
    const v4f lo = {-127.0f, -127.0f, -127.0f, -127.0f}, big = {0x1.8p23f, 0x1.8p23f, 0x1.8p23f, 0x1.8p23f};
    v4i below = x < lo; /* false for NaN: it stays */
    x = (v4f)((below & (v4i)lo) | (~below & (v4i)x));
    v4f n = (x + big) - big, f = x - n;
    v4f p = f * ATTN_EXP2_C6 + ATTN_EXP2_C5;
    p = p * f + ATTN_EXP2_C4;
    p = p * f + ATTN_EXP2_C3;
    p = p * f + ATTN_EXP2_C2;
    p = p * f + ATTN_EXP2_C1;
    p = p * f + 1.0f;
    v4i ok = n == n; /* a NaN lane converts 0 instead (p is NaN there) */
    v4i ni = __builtin_convertvector((v4f)(ok & (v4i)n), v4i);
    return p * (v4f)((ni + 127) << 23);
}

/* The reference max moves only by more than ATTN_DEC_MAX_SLACK (as the SIMD
 * kernels). The exponentials four at a time (scalar exp2f took 13.5 ns per key
 * of a four-row tile). */
void loom_attn_softmax_rows_generic(float *s, int64_t lds, int nr, int nc, float *m, float *l,
                                    float *alpha) {
    for (int r = 0; r < nr; r++) {
        float *sr = s + r * lds, mo = m[r], sub = mo, al = 1.0f;
        int over = mo == -INFINITY;
        for (int c = 0; c < nc; c++) over |= !(sr[c] <= mo + ATTN_DEC_MAX_SLACK);
        if (over) {
            float mx = mo;
            for (int c = 0; c < nc; c++)
                if (sr[c] > mx) mx = sr[c];
            sub = mx == -INFINITY ? 0.0f : mx; /* a row that saw nothing stays empty */
            al = exp2_v4((v4f){mo - sub, 0.0f, 0.0f, 0.0f})[0];
            m[r] = mx;
        }
        v4f sum = {0.0f, 0.0f, 0.0f, 0.0f};
        int c = 0;
        for (; c + 4 <= nc; c += 4) {
            v4f e = exp2_v4(ld4(sr + c) - sub);
            st4(sr + c, e);
            sum += e;
        }
        if (c < nc) { /* the tail through a buffer padded with -inf (exactly 0) */
            float t[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
            memcpy(t, sr + c, (size_t)(nc - c) * sizeof(float));
            v4f e = exp2_v4(ld4(t) - sub);
            st4(t, e);
            memcpy(sr + c, t, (size_t)(nc - c) * sizeof(float));
            sum += e;
        }
        l[r] = l[r] * al + hsum4(sum);
        alpha[r] = al;
    }
}
