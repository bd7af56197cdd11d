/* Helpers of the test_vec_*.c tests: run an op at an optimised level and at
 * the reference on the same inputs, into NaN-prefilled outputs surrounded by
 * guard bytes, compare (bit for bit or within a tolerance), and check that
 * nth = 1, 2, 3 give identical bytes. */
#ifndef LOOM_TEST_VEC_COMMON_H
#define LOOM_TEST_VEC_COMMON_H

#include "test_ops_common.h"

#include "base/cpu.h"

#include <stdint.h>

#define GUARD_BYTES 64
#define GUARD_BYTE 0xCD
#define FILL_BYTE 0xFF /* all-ones: NaN in f32, f16 and bf16 */

/* The levels this CPU can run, lowest first (generic always). */
static int vec_levels(loom_isa *out) {
    int n = 0;
    for (int l = LOOM_ISA_GENERIC; l <= (int)loom_cpu_best_isa(); l++) out[n++] = (loom_isa)l;
    return n;
}

/* bytes of payload between two guard zones; returns the payload pointer */
static unsigned char *guarded_alloc(size_t bytes) {
    unsigned char *b = malloc(bytes + 2 * GUARD_BYTES);
    if (!b) abort();
    memset(b, GUARD_BYTE, GUARD_BYTES);
    memset(b + GUARD_BYTES, FILL_BYTE, bytes);
    memset(b + GUARD_BYTES + bytes, GUARD_BYTE, GUARD_BYTES);
    return b + GUARD_BYTES;
}

static int guards_intact(const unsigned char *p, size_t bytes) {
    for (size_t i = 0; i < GUARD_BYTES; i++)
        if (p[-1 - (ptrdiff_t)i] != GUARD_BYTE || p[bytes + i] != GUARD_BYTE) return 0;
    return 1;
}

static void guarded_free(unsigned char *p) { free(p - GUARD_BYTES); }

/* Running maximum of |out - ref| / max(1, |ref|) per op, for the summary line. */
static double worst_err[LOOM_OP_COUNT];

/* Runs kernel fn as nth threads would, one ith after another. */
static loom_status run_kernel_split(loom_op op, loom_kernel_fn fn, const loom_tensor *const *src,
                                    int n_src, const void *attrs, loom_tensor *dst, int nth) {
    const loom_op_info *info = loom_op_get(op);
    size_t bytes = info->scratch_size ? info->scratch_size(src, n_src, dst, attrs) : 0;
    for (int ith = 0; ith < nth; ith++) {
        void *scratch = bytes ? loom_alloc_aligned(bytes, LOOM_ALIGN) : NULL;
        if (scratch) memset(scratch, FILL_BYTE, bytes);
        loom_kernel_args a = {.n_src = n_src, .dst = dst, .attrs = attrs, .ith = ith,
                              .nth = nth, .scratch = scratch};
        for (int i = 0; i < n_src; i++) a.src[i] = src[i];
        loom_status s = fn(&a);
        loom_free_aligned(scratch);
        if (s != LOOM_OK) return s;
    }
    return LOOM_OK;
}

/* Compares f32 outputs element by element over the span (gaps of a strided
 * dst included: both sides must leave them untouched). */
static int compare_f32(const float *out, const float *ref, size_t n, double tol, double *worst,
                       const char *what) {
    for (size_t i = 0; i < n; i++) {
        double o = out[i], r = ref[i];
        if (isnan(o) || isnan(r) || isinf(o) || isinf(r)) {
            if (isnan(o) != isnan(r) || (!isnan(o) && o != r)) {
                fprintf(stderr, "%s: element %zu is %g, reference %g\n", what, i, o, r);
                return 0;
            }
            continue;
        }
        double e = fabs(o - r) / (fabs(r) > 1.0 ? fabs(r) : 1.0);
        if (e > *worst) *worst = e;
        if (e > tol) {
            fprintf(stderr, "%s: element %zu is %.9g, reference %.9g (error %.3g > %.3g)\n", what,
                    i, o, r, e, tol);
            return 0;
        }
    }
    return 1;
}

/* Runs op at level and at the reference with dst laid out as tmpl (data
 * unused). tol < 0: bit-exact; otherwise the DESIGN.md rule with tol.
 * Statuses must agree (an error case checks only that). Then nth = 1, 2, 3
 * through the level's kernel must give identical bytes. */
static void compare_op(loom_op op, const loom_tensor *const *src, int n_src, const void *attrs,
                       const loom_tensor *tmpl, loom_isa level, double tol, const char *what) {
    const loom_op_info *info = loom_op_get(op);
    char want_name[48];
    snprintf(want_name, sizeof want_name, "%s.%s", info->name, loom_isa_name(level));
    CHECK_MSG(strcmp(loom_op_kernel_name(op, level), want_name) == 0, "%s: kernel %s, expected %s",
              what, loom_op_kernel_name(op, level), want_name);

    size_t bytes = loom_tensor_nbytes(tmpl);
    unsigned char *rb = guarded_alloc(bytes), *ob = guarded_alloc(bytes);
    loom_tensor rd = *tmpl, od = *tmpl;
    rd.data = rb;
    od.data = ob;
    loom_status rs = loom_op_run(op, src, n_src, attrs, &rd, LOOM_ISA_REF);
    loom_status os = loom_op_run(op, src, n_src, attrs, &od, level);
    CHECK_MSG(rs == os, "%s: status %s at %s, %s at ref (%s)", what, loom_status_str(os),
              loom_isa_name(level), loom_status_str(rs), loom_last_error());
    CHECK_MSG(guards_intact(ob, bytes), "%s: write outside dst at %s", what, loom_isa_name(level));
    if (rs == LOOM_OK && os == LOOM_OK) {
        if (tol < 0 || tmpl->dtype != LOOM_F32)
            CHECK_MSG(memcmp(ob, rb, bytes) == 0, "%s: not bit-identical to the reference at %s",
                      what, loom_isa_name(level));
        else
            CHECK(compare_f32((const float *)ob, (const float *)rb, bytes / 4, tol, &worst_err[op],
                              what));
        /* thread invariance: the level's kernel, nth = 1, 2, 3 */
        loom_kernel_fn fn = loom_op_kernel(op, level);
        unsigned char *tb = guarded_alloc(bytes);
        loom_tensor td = *tmpl;
        td.data = tb;
        for (int nth = 1; nth <= 3; nth++) {
            memset(tb, FILL_BYTE, bytes);
            CHECK(run_kernel_split(op, fn, src, n_src, attrs, &td, nth) == LOOM_OK);
            CHECK_MSG(memcmp(tb, ob, bytes) == 0 && guards_intact(tb, bytes),
                      "%s: nth = %d differs from loom_op_run at %s", what, nth,
                      loom_isa_name(level));
        }
        guarded_free(tb);
    }
    guarded_free(rb);
    guarded_free(ob);
}

/* A contiguous f32 tensor descriptor over no data yet (a template for compare_op). */
static loom_tensor f32_tmpl(int ndim, const int64_t *shape) {
    loom_tensor t;
    tensor_init_(&t, LOOM_F32, NULL, shape, ndim);
    return t;
}

/* Widths that matter for 8/16-lane code: tails of every length, primes, large. */
static const int64_t widths[] = {1,  2,  3,  5,  7,  8,  9,  13, 15,  16,  17,  23,  31,
                                 32, 33, 47, 63, 64, 65, 67, 97, 127, 128, 257, 511, 4096};
#define N_WIDTHS ((int)(sizeof widths / sizeof widths[0]))

/* A sweep: the fixed widths, then random ones in 1..67. */
#define N_SWEEP (N_WIDTHS + 24)
static int64_t sweep_width(int k, loom_rng *r) {
    return k < N_WIDTHS ? widths[k] : 1 + (int64_t)(loom_rng_u32(r) % 67);
}

#endif
