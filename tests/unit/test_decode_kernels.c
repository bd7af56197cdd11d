/* The decode kernel tables' contracts, called directly at every level the CPU
 * has: a prepared q (dec_qprep + dec_dot_prep) gives dec_dot's scores, and
 * the i8 P.V's rounding of P stays within its bound (ATTN_DEC_PQ_ERR). The
 * op-level decode tests are in test_incre_attention.c. Also the levels' vector
 * soft-capping against the scalar form. */
#include "test_attention_common.h"
#include "graph/ops_init.h"

#include "fused/flash_attention_internal.h"

#include <math.h>

/* The kernel tables' contract for a prepared q: dec_qprep + dec_dot_prep give
 * dec_dot's scores bit for bit (the driver takes the first, direct callers the
 * second), for i8 and bf16 K rows at head dims 64/96/128/256, 1-9 q rows and
 * partial tiles; inner_precise 1 (bf16 q for a bf16 K) stays within bf16's
 * rounding of q. */
static void test_prepared_q(void) {
    loom_rng r;
    loom_rng_init(&r, 61, 2);
    enum { NR = 9, D = 256, T = ATTN_DEC_TILE_MAX };
    static float q[NR * D], s0[NR * T], s1[NR * T], s2[NR * T];
    static int8_t k8[T * D];
    static uint16_t kb[T * D];
    _Alignas(64) static char qp[NR * ATTN_DEC_QPREP_STRIDE];
    for (int i = 0; i < NR * D; i++) q[i] = 2.0f * loom_rng_uniform(&r) - 1.0f;
    for (int i = 0; i < T * D; i++) {
        k8[i] = (int8_t)(int)(255.0f * loom_rng_uniform(&r) - 127.0f);
        float f = 2.0f * loom_rng_uniform(&r) - 1.0f;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        kb[i] = (uint16_t)(u >> 16);
    }
    loom_isa lv[LOOM_ISA_COUNT];
    int nl = test_levels(lv), tried = 0;
    static const int dims[] = {64, 96, 128, 256};
    for (int li = 0; li < nl; li++) {
        const loom_attn_kernels *kn = loom_attn_kernels_for(lv[li]);
        if (!kn->dec_qprep) continue;
        for (int t = 0; t < 2; t++)
            for (int di = 0; di < 4; di++)
                for (int nr = 1; nr <= NR; nr += 2)
                    for (int ni = 0; ni < 4; ni++) { /* partial and whole tiles of both sizes */
                        static const int ncs[] = {ATTN_DEC_TILE - 5, ATTN_DEC_TILE, T - 5, T};
                        int nc = ncs[ni];
                        loom_dtype dt = t ? LOOM_BF16 : LOOM_I8;
                        int d = dims[di];
                        const void *rows[T];
                        for (int c = 0; c < T; c++)
                            rows[c] = t ? (const void *)(kb + c * D) : (const void *)(k8 + c * D);
                        memset(s0, 0, sizeof s0), memset(s1, 0, sizeof s1);
                        kn->dec_dot(s0, T, q, D, nr, rows, dt, nc, d, NULL);
                        if (!kn->dec_qprep(qp, q, D, nr, dt, d, 0)) continue;
                        tried++;
                        kn->dec_dot_prep(s1, T, qp, nr, rows, dt, nc, d, NULL, 0);
                        CHECK_MSG(memcmp(s0, s1, sizeof s0) == 0, "%s: %s d=%d nr=%d nc=%d: prepared q differs",
                                  kn->name, loom_dtype_name(dt), d, nr, nc);
                        if (!t || !kn->dec_qprep(qp, q, D, nr, dt, d, 1)) continue;
                        memset(s2, 0, sizeof s2);
                        kn->dec_dot_prep(s2, T, qp, nr, rows, dt, nc, d, NULL, 1);
                        for (int i = 0; i < nr; i++)
                            for (int c = 0; c < nc; c++) { /* |q - bf16(q)| <= 2^-9 |q|, |k| <= 1 */
                                double bound = 0.0;
                                for (int x = 0; x < d; x++) bound += fabs(q[i * D + x]) / 256.0;
                                CHECK(fabs(s2[i * T + c] - s0[i * T + c]) <= bound);
                            }
                    }
    }
    if (loom_cpu_isa() >= LOOM_ISA_AVX512 && loom_cpu_get()->avx512_vnni)
        CHECK_MSG(tried > 0, "no level prepared q on an AVX512_VNNI CPU");
}

/* The i8 P.V's rounding of P to 16-bit integers (a scale per row and tile)
 * against its bound: a row with one probability 1 and the others 0.45 units of
 * the rounding (1.37e-5) would round all of those to 0, the same way, moving
 * sum p v by nc * 0.45 units (2^-9.2 of it in a 128-key tile, with every v
 * alike); such a row must go through the f32 kernel, within ATTN_DEC_PQ_ERR.
 * Rows of ordinary probabilities beside it, 1-5 rows, tiles of 32, 64 (the x86
 * levels' i8 tile), 125 and 128 keys, every level. Against sums in double. */
static void test_pv_rounding(void) {
    enum { NR = 5, D = 128, T = ATTN_DEC_TILE_MAX };
    static int8_t v[T * D];
    static float p[NR * T], acc[NR * D], alpha[NR];
    loom_rng r;
    loom_rng_init(&r, 71, 2);
    const void *rows[T];
    for (int c = 0; c < T; c++) rows[c] = v + c * D;
    loom_isa lv[LOOM_ISA_COUNT];
    int nl = test_levels(lv);
    static const int ncs[] = {ATTN_DEC_TILE, 2 * ATTN_DEC_TILE, T - 3, T};
    for (int li = 0; li < nl; li++) {
        const loom_attn_kernels *kn = loom_attn_kernels_for(lv[li]);
        for (int vi = 0; vi < 2; vi++)          /* every v 100, or random */
            for (int nr = 1; nr <= NR; nr++)
                for (int ni = 0; ni < 4; ni++) {
                    int nc = ncs[ni], odd = (nr + ni) % nr; /* the row of the tiny probabilities */
                    for (int i = 0; i < T * D; i++)
                        v[i] = vi ? (int8_t)(int)(255.0f * loom_rng_uniform(&r) - 127.0f) : 100;
                    for (int i = 0; i < nr; i++) {
                        alpha[i] = 1.0f;
                        for (int c = 0; c < nc; c++)
                            p[i * T + c] = i != odd ? loom_rng_uniform(&r) : c == nc / 3 ? 1.0f : 1.37e-5f;
                    }
                    memset(acc, 0, sizeof acc);
                    kn->dec_pv(acc, D, p, T, nr, rows, LOOM_I8, nc, D, alpha, NULL);
                    for (int i = 0; i < nr; i++) {
                        double worst = 0.0, sum = 0.0;
                        for (int c = 0; c < nc; c++) sum += p[i * T + c];
                        for (int x = 0; x < D; x++) {
                            double e = 0.0;
                            for (int c = 0; c < nc; c++) e += (double)p[i * T + c] * v[c * D + x];
                            worst = fmax(worst, fabs(acc[i * D + x] - e));
                        }
                        /* the rounding's bound, and f32 sums of nc terms of <= 127 * p */
                        double bound = ATTN_DEC_PQ_ERR * sum * 127.0 + 127.0 * sum * nc * 0x1p-23;
                        CHECK_MSG(worst <= bound, "%s: nr=%d nc=%d row %d%s: off by %g (bound %g)", kn->name, nr,
                                  nc, i, i == odd ? " (tiny p)" : "", worst, bound);
                    }
                }
    }
}

/* The levels' vector soft-capping (loom_attn_kernels.softcap) against the
 * scalar form: lengths 1..70 (not multiples of a vector), scores up to 40x the
 * cap, caps in log2 units from 0.7 to 72; within 4 ulp of the cap; NaN stays
 * NaN and +-inf give +-c; nothing past n is written. */
static void test_softcap(void) {
    loom_rng r;
    loom_rng_init(&r, 5, 3);
    loom_isa lv[LOOM_ISA_COUNT];
    int nl = test_levels(lv);
    for (int li = 0; li < nl; li++) {
        const loom_attn_kernels *kn = loom_attn_kernels_for(lv[li]);
        if (!kn->softcap) continue;
        for (int n = 1; n <= 70; n++) {
            float c = 0.7f + 71.0f * loom_rng_uniform(&r), s[80], want[80];
            for (int i = 0; i < 80; i++) s[i] = (loom_rng_uniform(&r) * 2.0f - 1.0f) * 40.0f * c;
            if (n > 3) s[1] = NAN, s[2] = INFINITY, s[3] = -INFINITY;
            memcpy(want, s, sizeof s);
            attn_softcap_scores(want, n, c);
            kn->softcap(s, n, c);
            int bad = 0;
            for (int i = 0; i < n; i++)
                bad += isnan(want[i]) ? !isnan(s[i]) : !(fabsf(s[i] - want[i]) <= 4.0f * c * 0x1p-23f);
            for (int i = n; i < 80; i++) bad += s[i] != want[i]; /* untouched past n */
            CHECK_MSG(bad == 0, "%s: softcap n=%d c=%g: %d values off", kn->name, n, (double)c, bad);
        }
    }
}

int main(void) {
    loom_ops_init(); /* the fused layer's ops in the op table */
    RUN_TEST(test_prepared_q);
    RUN_TEST(test_pv_rounding);
    RUN_TEST(test_softcap);
    return TEST_SUMMARY();
}
