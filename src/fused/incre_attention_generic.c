/* Portable C decode micro-kernels: one converted K/V row at a time against
 * every query row of the group. */
#include "fused/flash_attention_internal.h"

#include <math.h>

void loom_attn_dec_dot_generic(float *s, int64_t lds, const float *q, int64_t ldq, int nr,
                               const void *const *rows, loom_dtype dt, int nc, int d,
                               const attn_dec_pf *pf) {
    (void)pf; /* nothing to gain without a vector loop to hide the misses in */
    float buf[LOOM_ATTN_MAX_HEAD_DIM];
    for (int c = 0; c < nc; c++) {
        attn_load_row(buf, rows[c], dt, 1, d);
        for (int r = 0; r < nr; r++) {
            const float *qr = q + r * ldq;
            float acc = 0.0f;
            for (int x = 0; x < d; x++) acc += qr[x] * buf[x];
            s[r * lds + c] = acc;
        }
    }
}

void loom_attn_dec_pv_generic(float *acc, int64_t lda, const float *p, int64_t ldp, int nr,
                              const void *const *rows, loom_dtype dt, int nc, int d,
                              const float *alpha, const attn_dec_pf *pf) {
    (void)pf;
    float buf[LOOM_ATTN_MAX_HEAD_DIM];
    for (int r = 0; r < nr; r++)
        for (int x = 0; x < d; x++) acc[r * lda + x] *= alpha[r];
    for (int c = 0; c < nc; c++) {
        attn_load_row(buf, rows[c], dt, 1, d);
        for (int r = 0; r < nr; r++) {
            float pc = p[r * ldp + c];
            float *ar = acc + r * lda;
            for (int x = 0; x < d; x++) ar[x] += pc * buf[x];
        }
    }
}

/* The reference max moves only by more than ATTN_DEC_MAX_SLACK (as the SIMD kernels). */
void loom_attn_softmax_rows_generic(float *s, int64_t lds, int nr, int nc, float *m, float *l,
                                    float *alpha) {
    for (int r = 0; r < nr; r++) {
        float *sr = s + r * lds, mo = m[r], sub = mo, al = 1.0f, sum = 0.0f;
        int over = mo == -INFINITY;
        for (int c = 0; c < nc; c++) over |= !(sr[c] <= mo + ATTN_DEC_MAX_SLACK);
        if (over) {
            float mx = mo;
            for (int c = 0; c < nc; c++)
                if (sr[c] > mx) mx = sr[c];
            sub = mx == -INFINITY ? 0.0f : mx; /* a row that saw nothing stays empty */
            al = exp2f(mo - sub);
            m[r] = mx;
        }
        for (int c = 0; c < nc; c++) {
            sr[c] = exp2f(sr[c] - sub);
            sum += sr[c];
        }
        l[r] = l[r] * al + sum;
        alpha[r] = al;
    }
}
