/* The op registry, loom_op_run's checks, every infer error path, and costs. */
#include <math.h>
#include "test_ops_common.h"
#include "graph/ops_init.h"

#include "base/cpu.h"

static void test_registry_complete(void) {
    for (int op = 0; op < LOOM_OP_COUNT; op++) {
        const loom_op_info *info = loom_op_get((loom_op)op);
        CHECK_MSG(info != NULL, "op %d", op);
        if (!info) continue;
        CHECK_MSG(info->name && info->name[0], "op %d has no name", op);
        CHECK_MSG(info->infer && info->cost && info->ref, "op %d (%s) misses infer/cost/ref", op,
                  info->name ? info->name : "?");
        CHECK(info->n_src_min >= 1 && info->n_src_min <= info->n_src_max &&
              info->n_src_max <= LOOM_MAX_SRC);
        for (int other = 0; other < op; other++)
            CHECK_MSG(strcmp(info->name, loom_op_get((loom_op)other)->name) != 0,
                      "duplicate op name %s", info->name);
    }
    CHECK(loom_op_get(LOOM_OP_COUNT) == NULL);
    CHECK(loom_op_get((loom_op)-1) == NULL);
    CHECK(loom_op_kernel(LOOM_OP_COUNT, LOOM_ISA_REF) == NULL);
    CHECK(strcmp(loom_op_kernel_name(LOOM_OP_COUNT, LOOM_ISA_REF), "unknown") == 0);
    CHECK(loom_op_get(LOOM_OP_KV_APPEND)->dst_views_src0 == 1);
    CHECK(loom_op_get(LOOM_OP_MATMUL)->dst_views_src0 == 0);
    CHECK(loom_op_get(LOOM_OP_ATTENTION)->scratch_size != NULL);
}

/* Kernel choice and its name agree with the table, whatever opt kernels exist. */
static void test_kernel_selection(void) {
    for (int op = 0; op < LOOM_OP_COUNT; op++) {
        const loom_op_info *info = loom_op_get((loom_op)op);
        CHECK(loom_op_kernel((loom_op)op, LOOM_ISA_REF) == info->ref);
        char want[64];
        snprintf(want, sizeof want, "%s.ref", info->name);
        CHECK(strcmp(loom_op_kernel_name((loom_op)op, LOOM_ISA_REF), want) == 0);
        for (int isa = LOOM_ISA_GENERIC; isa < LOOM_ISA_COUNT; isa++) {
            int l = isa;
            while (l > LOOM_ISA_REF && !info->opt[l]) l--;
            loom_kernel_fn k = l == LOOM_ISA_REF ? info->ref : info->opt[l];
            CHECK(loom_op_kernel((loom_op)op, (loom_isa)isa) == k);
            snprintf(want, sizeof want, "%s.%s", info->name, loom_isa_name((loom_isa)l));
            const char *got = loom_op_kernel_name((loom_op)op, (loom_isa)isa);
            CHECK_MSG(strcmp(got, want) == 0, "%s vs %s", got, want);
        }
    }
}

static void test_op_run_checks(void) {
    float x[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 0, 0, 0, 1, 0}, y[4];
    loom_tensor tx, tw, ty;
    TENSOR(tx, LOOM_F32, x, 2, 3);
    TENSOR(tw, LOOM_F32, w, 2, 3);
    const loom_tensor *src[2] = {&tx, &tw};

    TENSOR(ty, LOOM_F32, y, 2, 2);
    RUN_OK(LOOM_OP_MATMUL, src, 2, NULL, &ty);
    CHECK(y[0] == 1 && y[1] == 2 && y[2] == 4 && y[3] == 5);

    /* wrong dst shape and dtype: error names found and expected */
    TENSOR(ty, LOOM_F32, y, 2, 1);
    CHECK_FAILS(loom_op_run(LOOM_OP_MATMUL, src, 2, NULL, &ty, LOOM_ISA_REF));
    CHECK(strstr(loom_last_error(), "[2, 1]") && strstr(loom_last_error(), "expected") &&
          strstr(loom_last_error(), "[2, 2]"));
    TENSOR(ty, LOOM_F16, y, 2, 2);
    CHECK_FAILS(loom_op_run(LOOM_OP_MATMUL, src, 2, NULL, &ty, LOOM_ISA_REF));
    CHECK(strstr(loom_last_error(), "f16") && strstr(loom_last_error(), "f32"));
    TENSOR(ty, LOOM_F32, y, 4);
    CHECK_FAILS(loom_op_run(LOOM_OP_MATMUL, src, 2, NULL, &ty, LOOM_ISA_REF));

    TENSOR(ty, LOOM_F32, y, 2, 2);
    CHECK_FAILS(loom_op_run(LOOM_OP_MATMUL, src, 1, NULL, &ty, LOOM_ISA_REF));
    CHECK_FAILS(loom_op_run(LOOM_OP_MATMUL, src, 3, NULL, &ty, LOOM_ISA_REF));
    CHECK_FAILS(loom_op_run(LOOM_OP_COUNT, src, 2, NULL, &ty, LOOM_ISA_REF));
    CHECK_FAILS(loom_op_run(LOOM_OP_MATMUL, src, 2, NULL, NULL, LOOM_ISA_REF));
    CHECK_FAILS(loom_op_run(LOOM_OP_MATMUL, src, 2, NULL, &ty, LOOM_ISA_COUNT));
    ty.data = NULL;
    CHECK_FAILS(loom_op_run(LOOM_OP_MATMUL, src, 2, NULL, &ty, LOOM_ISA_REF));
    ty.data = y;
    tx.data = NULL;
    CHECK_FAILS(loom_op_run(LOOM_OP_MATMUL, src, 2, NULL, &ty, LOOM_ISA_REF));
    tx.data = x;

    /* kv_append's dst must alias the cache */
    float cache[8] = {0}, other[8], xa[2] = {7, 8};
    loom_tensor tc, txa, td;
    TENSOR(tc, LOOM_F32, cache, 4, 2);
    TENSOR(txa, LOOM_F32, xa, 1, 2);
    TENSOR(td, LOOM_F32, other, 2, 2);
    const loom_tensor *ksrc[2] = {&tc, &txa};
    loom_kv_append_attrs ka = {1};
    CHECK_FAILS(loom_op_run(LOOM_OP_KV_APPEND, ksrc, 2, &ka, &td, LOOM_ISA_REF));
    TENSOR(td, LOOM_F32, cache, 2, 2);
    RUN_OK(LOOM_OP_KV_APPEND, ksrc, 2, &ka, &td);
    CHECK(cache[2] == 7 && cache[3] == 8 && cache[0] == 0 && cache[4] == 0);
}

/* infer through the table, into a scratch descriptor */
static loom_status infer(loom_op op, const loom_tensor *const *src, int n_src, const void *attrs) {
    loom_tensor dst;
    memset(&dst, 0, sizeof dst);
    return loom_op_get(op)->infer(src, n_src, attrs, &dst);
}

/* Every op: wrong arity, NULL input, wrong dtype, wrong shape, bad attributes. */
static void test_infer_errors(void) {
    loom_tensor f23, f32_3, f16_23, i32_3, f2, f4d, f3d, k4d, i32_23;
    TENSOR(f23, LOOM_F32, NULL, 2, 3);
    TENSOR(f32_3, LOOM_F32, NULL, 3);
    TENSOR(f16_23, LOOM_F16, NULL, 2, 3);
    TENSOR(i32_3, LOOM_I32, NULL, 3);
    TENSOR(i32_23, LOOM_I32, NULL, 2, 3);
    TENSOR(f2, LOOM_F32, NULL, 2);
    TENSOR(f4d, LOOM_F32, NULL, 1, 2, 4, 8);
    TENSOR(f3d, LOOM_F32, NULL, 2, 4, 8);
    TENSOR(k4d, LOOM_F32, NULL, 1, 5, 2, 8);
    loom_tensor none;
    memset(&none, 0, sizeof none); /* ndim 0: invalid descriptor */

    /* every op rejects too few / too many inputs and NULL inputs */
    const loom_tensor *many[LOOM_MAX_SRC + 1] = {&f23, &f23, &f23, &f23, &f23};
    const loom_tensor *nulls[LOOM_MAX_SRC] = {NULL, NULL, NULL, NULL};
    for (int op = 0; op < LOOM_OP_COUNT; op++) {
        const loom_op_info *info = loom_op_get((loom_op)op);
        unsigned char attrs[64] = {0};
        loom_tensor out;
        CHECK_FAILS(info->infer(many, info->n_src_min - 1, attrs, &out));
        CHECK_FAILS(info->infer(many, info->n_src_max + 1, attrs, &out));
        CHECK_FAILS(info->infer(nulls, info->n_src_min, attrs, &out));
        const loom_tensor *bad[LOOM_MAX_SRC] = {&none, &none, &none, &none};
        CHECK_FAILS(info->infer(bad, info->n_src_min, attrs, &out));
        CHECK_MSG(strstr(loom_last_error(), info->name) != NULL, "%s: %s", info->name,
                  loom_last_error());
    }

    /* matmul */
    const loom_tensor *mm_dt[2] = {&f16_23, &f23}, *mm_wdt[2] = {&f23, &i32_23};
    const loom_tensor *mm_sh[2] = {&f23, &f2}, *mm_k[2] = {&f23, &f4d};
    CHECK_FAILS(infer(LOOM_OP_MATMUL, mm_dt, 2, NULL));
    CHECK_FAILS(infer(LOOM_OP_MATMUL, mm_wdt, 2, NULL));
    CHECK_FAILS(infer(LOOM_OP_MATMUL, mm_sh, 2, NULL));
    CHECK_FAILS(infer(LOOM_OP_MATMUL, mm_k, 2, NULL));
    {
        loom_tensor x48, w6432;
        TENSOR(x48, LOOM_F32, NULL, 5, 48);
        TENSOR(w6432, LOOM_F32, NULL, 64, 32);
        const loom_tensor *s[2] = {&x48, &w6432};
        CHECK_FAILS(infer(LOOM_OP_MATMUL, s, 2, NULL));
        CHECK(strstr(loom_last_error(), "input 1 (W)") && strstr(loom_last_error(), "[64, 32]") &&
              strstr(loom_last_error(), "[N, 48]"));
    }

    /* get_rows */
    const loom_tensor *gr_ids[2] = {&f23, &f32_3}, *gr_tab[2] = {&i32_23, &i32_3};
    const loom_tensor *gr_tsh[2] = {&f32_3, &i32_3}, *gr_ish[2] = {&f23, &i32_23};
    CHECK_FAILS(infer(LOOM_OP_GET_ROWS, gr_ids, 2, NULL));
    CHECK_FAILS(infer(LOOM_OP_GET_ROWS, gr_tab, 2, NULL));
    CHECK_FAILS(infer(LOOM_OP_GET_ROWS, gr_tsh, 2, NULL));
    CHECK_FAILS(infer(LOOM_OP_GET_ROWS, gr_ish, 2, NULL));

    /* rms_norm */
    loom_rms_norm_attrs eps = {1e-5f}, eps0 = {0.0f}, epsneg = {-1.0f}, epsnan = {NAN};
    const loom_tensor *rn[2] = {&f23, &f32_3}, *rn_g[2] = {&f23, &f2}, *rn_dt[1] = {&f16_23};
    const loom_tensor *rn_gdt[2] = {&f23, &i32_3};
    CHECK(infer(LOOM_OP_RMS_NORM, rn, 2, &eps) == LOOM_OK);
    CHECK(infer(LOOM_OP_RMS_NORM, rn, 1, &eps) == LOOM_OK);
    CHECK_FAILS(infer(LOOM_OP_RMS_NORM, rn_g, 2, &eps));
    CHECK_FAILS(infer(LOOM_OP_RMS_NORM, rn_dt, 1, &eps));
    CHECK_FAILS(infer(LOOM_OP_RMS_NORM, rn_gdt, 2, &eps));
    CHECK_FAILS(infer(LOOM_OP_RMS_NORM, rn, 2, &eps0));
    CHECK_FAILS(infer(LOOM_OP_RMS_NORM, rn, 2, &epsneg));
    CHECK_FAILS(infer(LOOM_OP_RMS_NORM, rn, 2, &epsnan));
    CHECK_FAILS(infer(LOOM_OP_RMS_NORM, rn, 2, NULL));

    /* add, mul, silu */
    const loom_tensor *ab_sh[2] = {&f23, &f3d}, *ab_dt[2] = {&f23, &f16_23};
    const loom_tensor *ab_len[2] = {&f32_3, &f2};
    for (int op = LOOM_OP_ADD; op <= LOOM_OP_MUL; op++) {
        CHECK_FAILS(infer((loom_op)op, ab_sh, 2, NULL));
        CHECK_FAILS(infer((loom_op)op, ab_dt, 2, NULL));
        CHECK_FAILS(infer((loom_op)op, ab_len, 2, NULL));
        CHECK(strstr(loom_last_error(), "[2]") && strstr(loom_last_error(), "[3]"));
    }
    const loom_tensor *si_dt[1] = {&i32_3};
    CHECK_FAILS(infer(LOOM_OP_SILU, si_dt, 1, NULL));

    /* softmax: mask must be f32 [R, C] */
    loom_softmax_attrs sa = {0};
    loom_tensor m23, m32;
    TENSOR(m23, LOOM_F32, NULL, 2, 3);
    TENSOR(m32, LOOM_F32, NULL, 3, 2);
    const loom_tensor *sm_ok[2] = {&f23, &m23}, *sm_sh[2] = {&f23, &m32};
    const loom_tensor *sm_dt[2] = {&f23, &f16_23}, *sm_x[1] = {&f16_23};
    const loom_tensor *sm_1d[2] = {&f32_3, &f32_3}, *sm_1dbad[2] = {&f23, &f32_3};
    CHECK(infer(LOOM_OP_SOFTMAX, sm_ok, 2, &sa) == LOOM_OK);
    CHECK(infer(LOOM_OP_SOFTMAX, sm_1d, 2, &sa) == LOOM_OK);
    CHECK_FAILS(infer(LOOM_OP_SOFTMAX, sm_sh, 2, &sa));
    CHECK_FAILS(infer(LOOM_OP_SOFTMAX, sm_dt, 2, &sa));
    CHECK_FAILS(infer(LOOM_OP_SOFTMAX, sm_x, 1, &sa));
    CHECK_FAILS(infer(LOOM_OP_SOFTMAX, sm_1dbad, 2, &sa));

    /* rope */
    loom_rope_attrs ra = {LOOM_ROPE_INTERLEAVED, 0, 10000.0f, 0.0f, 0};
    const loom_tensor *ro3[1] = {&f3d}, *ro4[1] = {&f4d}, *ro2[1] = {&f23}, *ro_dt[1] = {&k4d};
    CHECK(infer(LOOM_OP_ROPE, ro3, 1, &ra) == LOOM_OK);
    CHECK(infer(LOOM_OP_ROPE, ro4, 1, &ra) == LOOM_OK);
    CHECK_FAILS(infer(LOOM_OP_ROPE, ro2, 1, &ra));
    CHECK_FAILS(infer(LOOM_OP_ROPE, ro3, 1, NULL));
    loom_tensor h3d;
    TENSOR(h3d, LOOM_F16, NULL, 2, 4, 8);
    ro_dt[0] = &h3d;
    CHECK_FAILS(infer(LOOM_OP_ROPE, ro_dt, 1, &ra));
    loom_rope_attrs bad = ra;
    bad.n_rot = 3;
    CHECK_FAILS(infer(LOOM_OP_ROPE, ro3, 1, &bad));
    bad.n_rot = 10;
    CHECK_FAILS(infer(LOOM_OP_ROPE, ro3, 1, &bad));
    bad.n_rot = -2;
    CHECK_FAILS(infer(LOOM_OP_ROPE, ro3, 1, &bad));
    bad = ra;
    bad.theta = 0.0f;
    CHECK_FAILS(infer(LOOM_OP_ROPE, ro3, 1, &bad));
    bad = ra;
    bad.mode = (loom_rope_mode)7;
    CHECK_FAILS(infer(LOOM_OP_ROPE, ro3, 1, &bad));
    bad = ra;
    bad.freq_scale = -1.0f;
    CHECK_FAILS(infer(LOOM_OP_ROPE, ro3, 1, &bad));
    bad = ra;
    bad.freq_scale = INFINITY; /* every angle NaN */
    CHECK_FAILS(infer(LOOM_OP_ROPE, ro3, 1, &bad));
    bad = ra;
    bad.theta = INFINITY;
    CHECK_FAILS(infer(LOOM_OP_ROPE, ro3, 1, &bad));
    bad = ra;
    bad.pos_offset = -1;
    CHECK_FAILS(infer(LOOM_OP_ROPE, ro3, 1, &bad));

    /* attention: q [1,2,4,8], k/v [1,5,2,8] */
    loom_attention_attrs aa = {0};
    loom_tensor kbad_d, kbad_h, kbad_b, vbad, mask_ok, mask_bad, k16, qi;
    TENSOR(kbad_d, LOOM_F32, NULL, 1, 5, 2, 4);
    TENSOR(kbad_h, LOOM_F32, NULL, 1, 5, 3, 8);
    TENSOR(kbad_b, LOOM_F32, NULL, 2, 5, 2, 8);
    TENSOR(vbad, LOOM_F32, NULL, 1, 4, 2, 8);
    TENSOR(mask_ok, LOOM_F32, NULL, 2, 5);
    TENSOR(mask_bad, LOOM_F32, NULL, 5, 2);
    TENSOR(k16, LOOM_F16, NULL, 1, 5, 2, 8);
    TENSOR(qi, LOOM_I32, NULL, 1, 2, 4, 8);
    const loom_tensor *at_ok[4] = {&f4d, &k4d, &k4d, &mask_ok};
    CHECK(infer(LOOM_OP_ATTENTION, at_ok, 3, &aa) == LOOM_OK);
    CHECK(infer(LOOM_OP_ATTENTION, at_ok, 4, &aa) == LOOM_OK);
    const loom_tensor *at_f16[3] = {&f4d, &k16, &k16};
    CHECK(infer(LOOM_OP_ATTENTION, at_f16, 3, &aa) == LOOM_OK);
    const loom_tensor *at_q3[3] = {&f3d, &k4d, &k4d}, *at_qdt[3] = {&qi, &k4d, &k4d};
    const loom_tensor *at_d[3] = {&f4d, &kbad_d, &kbad_d}, *at_h[3] = {&f4d, &kbad_h, &kbad_h};
    const loom_tensor *at_b[3] = {&f4d, &kbad_b, &kbad_b}, *at_v[3] = {&f4d, &k4d, &vbad};
    const loom_tensor *at_m[4] = {&f4d, &k4d, &k4d, &mask_bad};
    const loom_tensor *at_kdt[3] = {&f4d, &qi, &qi};
    CHECK_FAILS(infer(LOOM_OP_ATTENTION, at_q3, 3, &aa));
    CHECK_FAILS(infer(LOOM_OP_ATTENTION, at_qdt, 3, &aa));
    CHECK_FAILS(infer(LOOM_OP_ATTENTION, at_d, 3, &aa));
    CHECK_FAILS(infer(LOOM_OP_ATTENTION, at_h, 3, &aa));
    CHECK_FAILS(infer(LOOM_OP_ATTENTION, at_b, 3, &aa));
    CHECK_FAILS(infer(LOOM_OP_ATTENTION, at_v, 3, &aa));
    CHECK_FAILS(infer(LOOM_OP_ATTENTION, at_m, 4, &aa));
    CHECK_FAILS(infer(LOOM_OP_ATTENTION, at_kdt, 3, &aa));

    /* copy */
    loom_copy_attrs ca = {LOOM_F16}, cbad = {LOOM_I32}, cwild = {(loom_dtype)100};
    const loom_tensor *cp[1] = {&f23}, *cp_dt[1] = {&i32_3};
    CHECK(infer(LOOM_OP_COPY, cp, 1, &ca) == LOOM_OK);
    CHECK_FAILS(infer(LOOM_OP_COPY, cp, 1, &cbad));
    CHECK_FAILS(infer(LOOM_OP_COPY, cp, 1, &cwild));
    CHECK_FAILS(infer(LOOM_OP_COPY, cp, 1, NULL));
    CHECK_FAILS(infer(LOOM_OP_COPY, cp_dt, 1, &ca));

    /* kv_append: cache [4, 3], x [n, 3] */
    loom_tensor cache, x13, x12, x53, c16;
    TENSOR(cache, LOOM_F32, NULL, 4, 3);
    TENSOR(x13, LOOM_F32, NULL, 1, 3);
    TENSOR(x12, LOOM_F32, NULL, 1, 2);
    TENSOR(x53, LOOM_F32, NULL, 5, 3);
    TENSOR(c16, LOOM_F16, NULL, 4, 3);
    loom_kv_append_attrs p0 = {0}, p3 = {3}, p4 = {4}, pneg = {-1};
    const loom_tensor *kv[2] = {&cache, &x13}, *kv_sh[2] = {&cache, &x12};
    const loom_tensor *kv_big[2] = {&cache, &x53}, *kv_nd[2] = {&cache, &f32_3};
    const loom_tensor *kv_xdt[2] = {&cache, &i32_23}, *kv_cdt[2] = {&i32_23, &x13};
    const loom_tensor *kv16[2] = {&c16, &x13};
    CHECK(infer(LOOM_OP_KV_APPEND, kv, 2, &p3) == LOOM_OK);
    CHECK(infer(LOOM_OP_KV_APPEND, kv16, 2, &p0) == LOOM_OK);
    CHECK_FAILS(infer(LOOM_OP_KV_APPEND, kv, 2, &p4));
    CHECK(strstr(loom_last_error(), "kv_append") != NULL);
    CHECK_FAILS(infer(LOOM_OP_KV_APPEND, kv, 2, &pneg));
    CHECK_FAILS(infer(LOOM_OP_KV_APPEND, kv, 2, NULL));
    CHECK_FAILS(infer(LOOM_OP_KV_APPEND, kv_sh, 2, &p0));
    CHECK_FAILS(infer(LOOM_OP_KV_APPEND, kv_big, 2, &p0));
    CHECK_FAILS(infer(LOOM_OP_KV_APPEND, kv_nd, 2, &p0));
    CHECK_FAILS(infer(LOOM_OP_KV_APPEND, kv_xdt, 2, &p0));
    CHECK_FAILS(infer(LOOM_OP_KV_APPEND, kv_cdt, 2, &p0));
}

/* Inferred dtypes/shapes for well-formed inputs. */
static void test_infer_shapes(void) {
    loom_tensor x, w, d;
    TENSOR(x, LOOM_F32, NULL, 2, 5, 48);
    TENSOR(w, LOOM_BF16, NULL, 64, 48);
    const loom_tensor *s[2] = {&x, &w};
    memset(&d, 0, sizeof d);
    CHECK(loom_op_get(LOOM_OP_MATMUL)->infer(s, 2, NULL, &d) == LOOM_OK);
    CHECK(d.dtype == LOOM_F32 && d.ndim == 3 && d.shape[0] == 2 && d.shape[1] == 5 &&
          d.shape[2] == 64 && d.shape[3] == 1);

    loom_tensor cache, xa;
    TENSOR(cache, LOOM_F16, NULL, 16, 2, 8);
    TENSOR(xa, LOOM_F32, NULL, 3, 2, 8);
    const loom_tensor *k[2] = {&cache, &xa};
    loom_kv_append_attrs ka = {5};
    memset(&d, 0, sizeof d);
    CHECK(loom_op_get(LOOM_OP_KV_APPEND)->infer(k, 2, &ka, &d) == LOOM_OK);
    CHECK(d.dtype == LOOM_F16 && d.ndim == 3 && d.shape[0] == 8 && d.shape[1] == 2 &&
          d.shape[2] == 8);

    loom_tensor table, ids;
    TENSOR(table, LOOM_F16, NULL, 100, 12);
    TENSOR(ids, LOOM_I32, NULL, 7);
    const loom_tensor *g[2] = {&table, &ids};
    memset(&d, 0, sizeof d);
    CHECK(loom_op_get(LOOM_OP_GET_ROWS)->infer(g, 2, NULL, &d) == LOOM_OK);
    CHECK(d.dtype == LOOM_F32 && d.ndim == 2 && d.shape[0] == 7 && d.shape[1] == 12);
}

static void test_costs(void) {
    loom_tensor x, w, d;
    TENSOR(x, LOOM_F32, NULL, 3, 16);
    TENSOR(w, LOOM_F16, NULL, 8, 16);
    TENSOR(d, LOOM_F32, NULL, 3, 8);
    const loom_tensor *s[2] = {&x, &w};
    loom_cost c = {0};
    loom_op_get(LOOM_OP_MATMUL)->cost(s, 2, &d, NULL, &c);
    CHECK(c.flops == 2.0 * 3 * 8 * 16);
    CHECK(c.bytes_read == 3 * 16 * 4 + 8 * 16 * 2);
    CHECK(c.bytes_written == 3 * 8 * 4);

    /* kv_append: reads x, writes n rows of the (f16) cache */
    loom_tensor cache, xa, view;
    TENSOR(cache, LOOM_F16, NULL, 32, 4);
    TENSOR(xa, LOOM_F32, NULL, 2, 4);
    TENSOR(view, LOOM_F16, NULL, 12, 4);
    const loom_tensor *k[2] = {&cache, &xa};
    loom_kv_append_attrs ka = {10};
    loom_op_get(LOOM_OP_KV_APPEND)->cost(k, 2, &view, &ka, &c);
    CHECK(c.bytes_read == 2 * 4 * 4 && c.bytes_written == 2 * 4 * 2);

    /* attention, causal: Sq = Skv = 4 -> 1+2+3+4 = 10 visible pairs per head */
    loom_tensor q, kk, out;
    TENSOR(q, LOOM_F32, NULL, 1, 4, 2, 8);
    TENSOR(kk, LOOM_F32, NULL, 1, 4, 1, 8);
    TENSOR(out, LOOM_F32, NULL, 1, 4, 2, 8);
    const loom_tensor *a[3] = {&q, &kk, &kk};
    loom_attention_attrs full = {0}, causal = {0, 1, 0, 0, 0.0f};
    loom_op_get(LOOM_OP_ATTENTION)->cost(a, 3, &out, &full, &c);
    double full_flops = c.flops;
    CHECK(full_flops >= 4.0 * 1 * 2 * 4 * 4 * 8);
    CHECK(c.bytes_read == (4 * 2 * 8 + 2 * 4 * 1 * 8) * 4.0);
    CHECK(c.bytes_written == 4 * 2 * 8 * 4.0);
    loom_op_get(LOOM_OP_ATTENTION)->cost(a, 3, &out, &causal, &c);
    CHECK(c.flops * 16 == full_flops * 10);
    /* decode against a longer cache: q at position 1 sees keys 0..1 only */
    loom_tensor q1, out1;
    TENSOR(q1, LOOM_F32, NULL, 1, 1, 2, 8);
    TENSOR(out1, LOOM_F32, NULL, 1, 1, 2, 8);
    const loom_tensor *a1[3] = {&q1, &kk, &kk};
    loom_attention_attrs dec = {0, 1, 1, 0, 0.0f};
    loom_op_get(LOOM_OP_ATTENTION)->cost(a1, 3, &out1, &dec, &c);
    CHECK(c.bytes_read == (2 * 8 + 2 * 2 * 1 * 8) * 4.0);

    for (int op = 0; op < LOOM_OP_COUNT; op++) CHECK(loom_op_get((loom_op)op)->cost != NULL);
}

int main(void) {
    loom_ops_init(); /* the fused layer's ops in the op table */
    RUN_TEST(test_registry_complete);
    RUN_TEST(test_kernel_selection);
    RUN_TEST(test_op_run_checks);
    RUN_TEST(test_infer_errors);
    RUN_TEST(test_infer_shapes);
    RUN_TEST(test_costs);
    return TEST_SUMMARY();
}
