/* The fuzz_attention target's calls of the cache write, the row ops, the FFN and
 * QKV+RoPE (the properties: fuzz_attention.c's comment). */
#include "fuzz_harness.h"

/* ------------------------------------------------------------ reshape_and_cache */

/* Element offset of (entry e, slot s, head h, element d) in a cache of layout l. */
static int64_t cache_off(const loom_tensor *c, loom_attn_layout l, int64_t e, int64_t s, int64_t h,
                         int64_t d, int64_t D) {
    if (l == LOOM_ATTN_BNSD) return e * c->stride[0] + h * c->stride[1] + s * c->stride[2] + d;
    if (l == LOOM_ATTN_BSH) return e * c->stride[0] + s * c->stride[1] + h * D + d;
    return e * c->stride[0] + s * c->stride[1] + h * c->stride[2] + d;
}

/* loom_reshape_and_cache: key/value f32 [T, N_kv, D] into contiguous or paged
 * caches of f32/f16/bf16/i8 (per-channel scales given, per-token ones written).
 * On LOOM_OK: the inputs are unchanged, every cache element outside the written
 * slots is unchanged, and (float caches, each slot written once) the written
 * rows hold the inputs within their dtype's rounding. */
void fuzz_kv_write(reader *r) {
    arena a = {0};
    loom_attn_layout l = (loom_attn_layout)pick(r, 3);
    if (bad(r)) l = LOOM_ATTN_TND;
    int64_t T = 1 + pick(r, 40), N = 1 + pick(r, 4), D = pick_d(r), B = 1 + pick(r, 3), S = 1 + pick(r, 64);
    static const loom_dtype cdt[4] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I8};
    loom_dtype dt = bad(r) ? LOOM_I32 : cdt[pick(r, 4)];
    int64_t ks[3] = {T, N, D};
    const loom_tensor *key = mk(&a, r, LOOM_F32, 3, ks, 0, 0), *val = mk(&a, r, LOOM_F32, 3, ks, 0, 0);
    loom_kv_write_params p = {.cache_layout = l};
    int64_t nent = B, slots = S, per = 0, sh[4];
    if (pick(r, 2)) { /* paged */
        static const int64_t sizes[4] = {1, 3, 16, 32};
        slots = sizes[pick(r, 4)];
        per = (S + slots - 1) / slots;
        nent = 1 + pick(r, (unsigned)(B * per + 1));
        int64_t bts[2] = {B, per};
        loom_tensor *bt = mk(&a, r, LOOM_I32, 2, bts, 0, 0);
        if (bt)
            for (int64_t i = 0; i < B * per; i++)
                ((int32_t *)bt->data)[i] = bad(r) ? (pick(r, 2) ? -1 : (int32_t)nent) : (int32_t)(rd(r) % nent);
        p.block_table = bt;
    }
    int nd = shape_of(l == LOOM_ATTN_TND ? LOOM_ATTN_BSND : l, nent, slots, N, D, sh);
    if (l == LOOM_ATTN_TND) nd = 3, sh[0] = nent * slots, sh[1] = N, sh[2] = D;
    loom_tensor *kc = mk(&a, r, dt, nd, sh, pick(r, 4) == 0 ? 3 : 0, 1);
    int kci = a.n - 1;
    loom_tensor *vc = mk(&a, r, dt, nd, sh, 0, 1);
    int vci = a.n - 1;
    if (dt == LOOM_I8) {
        p.antiquant_mode = pick(r, 2) ? LOOM_ANTIQUANT_PER_TOKEN : LOOM_ANTIQUANT_PER_CHANNEL;
        int64_t ss[3] = {N, D, 1};
        int snd = 2, tok = p.antiquant_mode == LOOM_ANTIQUANT_PER_TOKEN;
        if (tok) ss[0] = nent, ss[1] = N, ss[2] = slots, snd = 3;
        if (bad(r)) ss[snd - 1] += 1;
        p.key_scale = bad(r) ? NULL : mk(&a, r, LOOM_F32, snd, ss, 0, tok);
        p.value_scale = bad(r) ? NULL : mk(&a, r, LOOM_F32, snd, ss, 0, tok);
        if (pick(r, 3) == 0) p.key_offset = mk(&a, r, LOOM_F32, snd, ss, 0, tok);
        if (pick(r, 3) == 0) p.value_offset = mk(&a, r, LOOM_F32, snd, ss, 0, tok);
    }
    int64_t *pos = malloc((size_t)T * sizeof *pos), *bid = pick(r, 2) ? malloc((size_t)T * sizeof *bid) : NULL;
    int64_t limit = p.block_table ? per * slots : S; /* positions the cache (or the table) covers */
    if (!pos) goto done;
    for (int64_t t = 0; t < T; t++) {
        pos[t] = pick(r, 8) == 0 ? -1 : (int64_t)(rd(r) % (unsigned)limit); /* -1: a padding token */
        if (bad(r)) pos[t] = limit + (int64_t)pick(r, 3);
        if (bid) bid[t] = bad(r) ? (pick(r, 2) ? -1 : B) : (int64_t)pick(r, (unsigned)B);
    }
    p.positions = bad(r) ? NULL : pos;
    p.batch_ids = bid;
    if (!key || !val || !kc || !vc) goto done;
    snapshot before;
    snap(&a, &before);
    loom_clear_error();
    loom_status st = loom_reshape_and_cache(key, val, kc, vc, &p);
    count_status(st);
    if (st != LOOM_OK) {
        FUZZ_CHECK(loom_last_error()[0] != '\0' && same(&a, &before, 0));
        FUZZ_CHECK(cur_wild != 0); /* a valid call refused */
    } else {
        FUZZ_CHECK(same(&a, &before, 1)); /* no input written */
        /* each token's cache entry (batch, or block through the table) and slot, once */
        int64_t *ent = malloc((size_t)T * sizeof *ent), *slot = malloc((size_t)T * sizeof *slot);
        for (int64_t t = 0; ent && slot && t < T; t++) {
            int64_t b = bid ? bid[t] : 0;
            ent[t] = b, slot[t] = pos[t];
            if (pos[t] >= 0 && p.block_table)
                ent[t] = ((const int32_t *)p.block_table->data)[b * per + pos[t] / slots], slot[t] = pos[t] % slots;
        }
        /* the cache elements each token's slot covers, and how often it is written */
        for (int side = 0; side < 2 && ent && slot; side++) {
            loom_tensor *c = side ? vc : kc;
            const float *x = (const float *)(side ? val : key)->data;
            int ci = side ? vci : kci;
            size_t n = span_elems(c), es = loom_dtype_size(dt);
            unsigned char *hit = calloc(n, 1);
            if (!hit) break;
            for (int64_t t = 0; t < T; t++) {
                if (pos[t] < 0) continue;
                for (int64_t h = 0; h < N; h++)
                    for (int64_t d = 0; d < D; d++) {
                        int64_t o = cache_off(c, l, ent[t], slot[t], h, d, D);
                        if (hit[o] < 2) hit[o]++;
                    }
            }
            for (size_t o = 0; o < n; o++) /* nothing written outside the tokens' slots */
                FUZZ_CHECK(hit[o] || memcmp((const char *)before.copy[ci] + o * es, (const char *)c->data + o * es, es) == 0);
            for (int64_t t = 0; t < T && dt != LOOM_I8; t++) {
                if (pos[t] < 0) continue;
                for (int64_t h = 0; h < N; h++)
                    for (int64_t d = 0; d < D; d++) {
                        int64_t o = cache_off(c, l, ent[t], slot[t], h, d, D);
                        if (hit[o] != 1) continue; /* a slot two tokens wrote */
                        float want = x[(t * N + h) * D + d], got;
                        if (dt == LOOM_F32) got = ((const float *)c->data)[o];
                        else if (dt == LOOM_F16) got = loom_f16_to_f32(((const uint16_t *)c->data)[o]);
                        else got = loom_bf16_to_f32(((const uint16_t *)c->data)[o]);
                        float tol = dt == LOOM_F32 ? 0.0f : dt == LOOM_F16 ? 1.0f / 1024 : 1.0f / 128;
                        FUZZ_CHECK(fabsf(got - want) <= tol * fabsf(want) + 1e-6f);
                    }
            }
            free(hit);
        }
        free(ent), free(slot);
    }
    snap_free(&a, &before);
done:
    free(pos), free(bid);
    arena_free(&a);
}

/* ------------------------------------------------------------ add_rms_norm, swiglu, ffn */

typedef struct {
    int op; /* OP_ADD_RMS_NORM, OP_SWIGLU or OP_FFN */
    const loom_tensor *x, *res, *gamma, *wg, *wu, *wd;
    loom_tensor *y, *r;
    loom_add_rms_norm_params an;
    loom_act act;
    loom_ffn_params fp;
} fused_ctx;

static loom_status run_fused(void *c, loom_pool *pool) {
    fused_ctx *f = c;
    if (f->op == OP_ADD_RMS_NORM) return loom_add_rms_norm(f->x, f->res, f->gamma, &f->an, f->y, f->r, pool);
    if (f->op == OP_SWIGLU) return loom_swiglu(f->x, f->act, f->y, pool);
    return loom_ffn(f->x, f->wg, f->wu, f->wd, f->res, &f->fp, f->y, pool);
}

static float half_act(float x, void *user) { return x * *(const float *)user; }

/* Element (i, j) of a 2-D f32 tensor. */
static float at2(const loom_tensor *t, int64_t i, int64_t j) {
    return ((const float *)t->data)[i * t->stride[0] + j * t->stride[1]];
}

/* Element (i, j) of a 2-D f32, f16 or bf16 tensor, as a double. */
static double el2(const loom_tensor *t, int64_t i, int64_t j) {
    return elem_at(t, t->data, i * t->stride[0] + j * t->stride[1]);
}

/* A loom_ffn call that ran, against its formula in double. The bound follows
 * each sum's rounding through the network: a gate or up sum off by e times the
 * sum of its terms' magnitudes (G, U), the activation's slope at most 1.2
 * (silu, gelu, gelu_tanh 1.13; relu, none and the fuzzer's custom 1 or less),
 * the product and the down sum rounded once more, e = the larger weight
 * tolerance; twice that bound. A wrong row, column, activation or residual
 * is off by the size of the terms themselves, far past the bound of the f32
 * weights' cases (e = 2^-11). */
static void ffn_check(const fused_ctx *c, int64_t M, int64_t D, int64_t H) {
    const loom_tensor *wu = c->wu ? c->wu : c->wg; /* merged: up rows after the gate's */
    int64_t uo = c->wu ? 0 : H;
    double e = fmax(dtype_tol(c->wg->dtype), dtype_tol(c->wd->dtype));
    double *h = malloc((size_t)H * sizeof *h), *hb = malloc((size_t)H * sizeof *hb);
    if (!h || !hb) goto out;
    for (int64_t i = 0; i < M; i++) {
        for (int64_t n = 0; n < H; n++) {
            double g = 0, gm = 0, u = 0, um = 0;
            for (int64_t k = 0; k < D; k++) {
                double xv = at2(c->x, i, k), a = xv * el2(c->wg, n, k), b = xv * el2(wu, uo + n, k);
                g += a, gm += fabs(a), u += b, um += fabs(b);
            }
            double act = c->fp.custom_act ? c->fp.custom_act((float)g, c->fp.custom_user)
                                          : loom_act_apply(c->fp.act, (float)g);
            h[n] = act * u;
            hb[n] = 1.2 * gm * fabs(u) + fabs(act) * um + 2.0 * fabs(act * u);
        }
        for (int64_t j = 0; j < D; j++) {
            double y = 0, b = 1.0;
            for (int64_t n = 0; n < H; n++) {
                double w = el2(c->wd, j, n);
                y += h[n] * w, b += (hb[n] + fabs(h[n])) * fabs(w);
            }
            if (c->res) y += at2(c->res, i, j), b += fabs(at2(c->res, i, j));
            if (!(fabs(at2(c->y, i, j) - y) <= 2.0 * e * b)) {
                if (getenv("LOOM_FUZZ_DEBUG"))
                    fprintf(stderr, "ffn y[%lld][%lld] = %g, formula %g (bound %g); M %lld D %lld H %lld %s/%s\n",
                            (long long)i, (long long)j, (double)at2(c->y, i, j), y, 2.0 * e * b, (long long)M,
                            (long long)D, (long long)H, loom_dtype_name(c->wg->dtype), loom_dtype_name(c->wd->dtype));
                FUZZ_CHECK(0);
            }
        }
    }
out:
    free(h), free(hb);
}

/* The fused row ops and the FFN against formulas in double. */
void fuzz_fused(reader *r, int op) {
    arena a = {0};
    fused_ctx c;
    memset(&c, 0, sizeof c);
    c.op = op;
    int64_t M = 1 + pick(r, 24), D = pick_d(r), H = 1 + pick(r, 100);
    int pad = pick(r, 3) == 0 ? 1 + (int)pick(r, 5) : 0;
    loom_dtype xdt = bad(r) ? LOOM_F16 : LOOM_F32;
    int64_t xs[2] = {M, op == OP_SWIGLU ? 2 * H : D}, ys[2] = {M, op == OP_SWIGLU ? H : D};
    if (bad(r)) ys[1] += 1; /* wrong shape */
    c.x = mk(&a, r, xdt, 2, xs, pad, 0);
    c.y = mk(&a, r, LOOM_F32, 2, ys, pick(r, 2) ? pad : 0, 1);
    float user = 0.5f;
    if (op == OP_ADD_RMS_NORM) {
        c.res = mk(&a, r, LOOM_F32, 2, xs, 0, 0);
        c.r = mk(&a, r, LOOM_F32, 2, xs, pad, 1);
        int64_t gs[1] = {D + bad(r)};
        c.gamma = mk(&a, r, LOOM_F32, 1, gs, 0, 0);
        static const float eps[4] = {1e-6f, 1e-5f, 0.5f, INFINITY}, ebad[3] = {0.0f, -1.0f, NAN};
        c.an.epsilon = bad(r) ? ebad[pick(r, 3)] : eps[pick(r, 4)];
    } else if (op == OP_SWIGLU) {
        c.act = bad(r) ? LOOM_ACT_COUNT : (loom_act)pick(r, LOOM_ACT_COUNT);
    } else {
        static const loom_dtype wdt[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};
        loom_dtype wt = bad(r) ? LOOM_I8 : wdt[pick(r, 3)];
        int merged = pick(r, 2);
        int64_t gs[2] = {merged ? 2 * H : H, D}, ds[2] = {D, H + bad(r)};
        c.wg = mk(&a, r, wt, 2, gs, 0, 0);
        c.wu = merged ? NULL : mk(&a, r, wt, 2, gs, 0, 0);
        c.wd = mk(&a, r, pick(r, 8) ? wt : wdt[pick(r, 3)], 2, ds, 0, 0);
        c.res = pick(r, 2) ? mk(&a, r, LOOM_F32, 2, xs, 0, 0) : NULL;
        c.fp = loom_ffn_default_params();
        c.fp.act = bad(r) ? LOOM_ACT_COUNT : (loom_act)pick(r, LOOM_ACT_COUNT);
        if (pick(r, 4) == 0) c.fp.custom_act = half_act, c.fp.custom_user = &user;
        static const int64_t bn[4] = {0, 1, 7, 64};
        c.fp.block_n = bad(r) ? -1 : bn[pick(r, 4)];
        if (!c.wg || !c.wd || (!merged && !c.wu)) goto done;
    }
    if (!c.x || !c.y || (op == OP_ADD_RMS_NORM && (!c.res || !c.r || !c.gamma))) goto done;
    loom_tensor *outs[2] = {c.y, c.r};
    long ran = n_ok[op];
    check_run(&a, run_fused, &c, outs, op == OP_ADD_RMS_NORM ? 2 : 1);
    if (n_ok[op] > ran && op == OP_FFN) ffn_check(&c, M, D, H);
    if (n_ok[op] > ran && op != OP_FFN) { /* it ran: the formulas, from the inputs as they were */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < ys[1]; j++) {
                double want, got = at2(c.y, i, j);
                if (op == OP_ADD_RMS_NORM) {
                    double ss = 0.0;
                    for (int64_t k = 0; k < D; k++) {
                        float rk = at2(c.x, i, k) + at2(c.res, i, k);
                        ss += (double)rk * rk;
                    }
                    float rj = at2(c.x, i, j) + at2(c.res, i, j);
                    FUZZ_CHECK(at2(c.r, i, j) == rj); /* the sum, exactly */
                    want = rj / sqrt(ss / (double)D + (double)c.an.epsilon) * ((const float *)c.gamma->data)[j];
                } else {
                    want = (double)loom_act_apply(c.act, at2(c.x, i, j)) * at2(c.x, i, H + j);
                }
                FUZZ_CHECK(fabs(got - want) <= (1.0 / 2048) * fmax(1.0, fabs(want)));
            }
    }
done:
    arena_free(&a);
}

/* ------------------------------------------------------------ qkv_rope */

typedef struct {
    const loom_tensor *x, *wq, *wk, *wv;
    loom_qkv_rope_params p;
    loom_tensor *q, *k, *v, *kc, *vc;
} qkv_ctx_f;

static loom_status run_qkv(void *c, loom_pool *pool) {
    qkv_ctx_f *f = c;
    return loom_qkv_rope(f->x, f->wq, f->wk, f->wv, &f->p, f->q, f->k, f->v, f->kc, f->vc, pool);
}

/* The head h projections of token t from weight w (rows from r0), into p, and
 * the sums of their terms' magnitudes into pm (d values each). */
static void qkv_proj(const loom_tensor *x, const loom_tensor *w, int64_t r0, int64_t t, int64_t hid,
                     int64_t d, double *p, double *pm) {
    for (int64_t i = 0; i < d; i++) {
        p[i] = pm[i] = 0.0;
        for (int64_t k = 0; k < hid; k++) {
            double v = at2(x, t, k) * el2(w, r0 + i, k);
            p[i] += v, pm[i] += fabs(v);
        }
    }
}

/* A loom_qkv_rope call that ran: q, and k and v where asked for, against the
 * formula in double: the projection, then (q and k) the rotation of pairs
 * (2i, 2i+1) (interleaved) or (i, i + n_rot/2) (half) by pos * freq_scale *
 * theta^(-2i/n_rot), pos the token's cache position (0 for a skipped token).
 * Bound: twice the weight tolerance times the magnitudes of the sums that meet
 * in a value, plus 1e-4 of them for the angle, which the op computes in
 * float. */
static void qkv_check(const qkv_ctx_f *c, int64_t T, int64_t hid, int64_t N, int64_t NKV, int64_t D) {
    int64_t nr = c->p.n_rot ? c->p.n_rot : D, half = nr / 2;
    int inter = c->p.rope_mode == LOOM_ROPE_INTERLEAVED;
    double fs = c->p.freq_scale != 0.0f ? c->p.freq_scale : 1.0, e = 2.0 * dtype_tol(c->wq->dtype);
    double p[128], pm[128];
    for (int64_t t = 0; t < T; t++) {
        int64_t pos = c->p.cache.positions[t] > 0 ? c->p.cache.positions[t] : 0;
        for (int part = 0; part < 3; part++) {
            const loom_tensor *out = part == 0 ? c->q : part == 1 ? c->k : c->v;
            const loom_tensor *w = c->wk ? (part == 0 ? c->wq : part == 1 ? c->wk : c->wv) : c->wq;
            int64_t heads = part ? NKV : N, base = c->wk ? 0 : (part == 0 ? 0 : part == 1 ? N * D : (N + NKV) * D);
            if (!out) continue;
            for (int64_t h = 0; h < heads; h++) {
                qkv_proj(c->x, w, base + h * D, t, hid, D, p, pm);
                for (int64_t d = 0; d < D; d++) {
                    double want = p[d], bound = e * pm[d] + 1e-6;
                    if (part < 2 && d < nr) {
                        int64_t i = inter ? d / 2 : d % half, o = inter ? d ^ 1 : (d < half ? d + half : d - half);
                        double ang = (double)pos * fs * pow(c->p.theta, -2.0 * (double)i / (double)nr);
                        int first = inter ? d % 2 == 0 : d < half; /* a' = a cos - b sin, b' = a sin + b cos */
                        want = first ? p[d] * cos(ang) - p[o] * sin(ang) : p[o] * sin(ang) + p[d] * cos(ang);
                        bound = e * (pm[d] + pm[o]) + 1e-4 * (fabs(p[d]) + fabs(p[o])) + 1e-6;
                    }
                    double got = at2(out, t, h * D + d);
                    if (!(fabs(got - want) <= bound)) {
                        if (getenv("LOOM_FUZZ_DEBUG"))
                            fprintf(stderr, "qkv_rope %c[%lld][%lld] = %g, formula %g (bound %g); pos %lld mode %d "
                                    "n_rot %lld D %lld theta %g fs %g\n", "qkv"[part], (long long)t,
                                    (long long)(h * D + d), got, want, bound, (long long)pos, (int)c->p.rope_mode,
                                    (long long)nr, (long long)D, (double)c->p.theta, fs);
                        FUZZ_CHECK(0);
                    }
                }
            }
        }
    }
}

/* loom_qkv_rope: merged or separate weights (f32/f16/bf16), RoPE modes, n_rot,
 * theta and freq_scale, optional k/v outputs, contiguous or paged f32/f16/bf16
 * caches; the robustness properties of check_run, and the formula (qkv_check). */
void fuzz_qkv_rope(reader *r) {
    arena a = {0};
    qkv_ctx_f c;
    memset(&c, 0, sizeof c);
    static const int64_t ds[7] = {2, 4, 8, 16, 32, 64, 128};
    int64_t T = 1 + pick(r, 20), hid = 1 + pick(r, 96), NKV = 1 + pick(r, 3), N = NKV * (1 + pick(r, 3)) + bad(r);
    int64_t D = bad(r) ? 3 : ds[pick(r, 7)];
    c.p = loom_qkv_rope_default_params();
    c.p.num_heads = N, c.p.num_key_value_heads = NKV, c.p.head_dim = D;
    c.p.rope_mode = bad(r) ? (loom_rope_mode)7 : (loom_rope_mode)pick(r, 2);
    c.p.n_rot = bad(r) ? D + 2 : pick(r, 2) ? 0 : 2 * (1 + (int64_t)pick(r, (unsigned)(D / 2)));
    static const float th[3] = {10000.0f, 500000.0f, 1.5f}, thbad[3] = {INFINITY, 0.0f, NAN};
    static const float fs[3] = {0.0f, 1.0f, 0.25f}, fsbad[3] = {INFINITY, -1.0f, NAN};
    c.p.theta = bad(r) ? thbad[pick(r, 3)] : th[pick(r, 3)];
    c.p.freq_scale = bad(r) ? fsbad[pick(r, 3)] : fs[pick(r, 3)];
    static const loom_dtype wdt[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};
    loom_dtype wt = wdt[pick(r, 3)];
    int64_t xs[2] = {T, hid}, qs[2] = {T, N * D}, ks[2] = {T, NKV * D};
    c.x = mk(&a, r, LOOM_F32, 2, xs, pick(r, 4) == 0 ? 2 : 0, 0);
    if (pick(r, 2)) {
        int64_t ws[2] = {(N + 2 * NKV) * D, hid};
        c.wq = mk(&a, r, wt, 2, ws, 0, 0);
    } else {
        int64_t wq[2] = {N * D, hid}, wk[2] = {NKV * D, hid};
        c.wq = mk(&a, r, wt, 2, wq, 0, 0);
        c.wk = mk(&a, r, bad(r) ? wdt[pick(r, 3)] : wt, 2, wk, 0, 0);
        c.wv = mk(&a, r, wt, 2, wk, 0, 0);
        if (!c.wk || !c.wv) goto done;
    }
    c.q = mk(&a, r, LOOM_F32, 2, qs, pick(r, 4) == 0 ? 3 : 0, 1);
    if (pick(r, 2)) c.k = mk(&a, r, LOOM_F32, 2, ks, 0, 1);
    if (pick(r, 2)) c.v = mk(&a, r, LOOM_F32, 2, ks, 0, 1);
    int64_t B = 1 + pick(r, 2), S = 1 + pick(r, 48), nent = B, slots = S, per = 0, cs[4];
    loom_kv_write_params *kp = &c.p.cache;
    kp->cache_layout = (loom_attn_layout)pick(r, 3);
    if (pick(r, 3) == 0) { /* paged */
        static const int64_t sizes[3] = {1, 4, 16};
        slots = sizes[pick(r, 3)];
        per = (S + slots - 1) / slots;
        nent = 1 + pick(r, (unsigned)(B * per));
        int64_t bts[2] = {B, per};
        loom_tensor *bt = mk(&a, r, LOOM_I32, 2, bts, 0, 0);
        if (!bt) goto done;
        for (int64_t i = 0; i < B * per; i++)
            ((int32_t *)bt->data)[i] = bad(r) ? (int32_t)nent : (int32_t)(rd(r) % nent);
        kp->block_table = bt;
    }
    int nd = shape_of(kp->cache_layout, nent, slots, NKV, D, cs);
    loom_dtype cdt = wdt[pick(r, 3)];
    c.kc = mk(&a, r, cdt, nd, cs, 0, 1);
    c.vc = mk(&a, r, cdt, nd, cs, 0, 1);
    int64_t *pos = malloc((size_t)T * sizeof *pos), *bid = malloc((size_t)T * sizeof *bid);
    if (pos && bid && c.x && c.wq && c.q && c.kc && c.vc) {
        int64_t limit = kp->block_table ? per * slots : S;
        for (int64_t t = 0; t < T; t++) {
            pos[t] = pick(r, 8) == 0 ? -1 : (int64_t)(rd(r) % (unsigned)limit);
            if (bad(r)) pos[t] = limit;
            bid[t] = (int64_t)pick(r, (unsigned)B);
        }
        kp->positions = pos, kp->batch_ids = bid;
        loom_tensor *outs[3] = {c.q, c.k, c.v};
        long ran = n_ok[OP_QKV_ROPE];
        check_run(&a, run_qkv, &c, outs, 1);
        FUZZ_CHECK(!c.k || finite_out(c.k, 0));
        FUZZ_CHECK(!c.v || finite_out(c.v, 0));
        if (n_ok[OP_QKV_ROPE] > ran) qkv_check(&c, T, hid, N, NKV, D);
    }
    free(pos), free(bid);
done:
    arena_free(&a);
}

/* ------------------------------------------------------------ mixture of experts */

typedef struct {
    int step; /* 0 gating, 1 routing, 2 grouped matmul, 3 finalize */
    const loom_tensor *logits, *x, *wg, *wu, *wd, *res;
    loom_tensor *w, *ids, *xs, *perm, *off, *ys, *y;
    loom_moe_gating_params gp;
    loom_grouped_matmul_params mp;
    int64_t E;
} moe_ctx;

static loom_status run_moe(void *c, loom_pool *pool) {
    moe_ctx *m = c;
    if (m->step == 0) return loom_moe_gating_top_k_softmax(m->logits, &m->gp, m->w, m->ids, pool);
    if (m->step == 1) return loom_moe_init_routing(m->x, m->ids, m->E, m->xs, m->perm, m->off, pool);
    if (m->step == 2) return loom_grouped_matmul_swiglu(m->xs, m->off, m->wg, m->wu, m->wd, &m->mp, m->ys, pool);
    return loom_moe_finalize_routing(m->ys, m->perm, m->w, m->res, m->y, pool);
}

/* The four MoE ops in their order, each through check_run (a refused call
 * writes nothing and names the problem; a call that runs writes only its
 * outputs, finite, the same bits on one thread and two); then, for float
 * weights, the ids are k distinct experts per token, the weights sorted, the
 * routing a permutation grouped by expert. */
void fuzz_moe(reader *r) {
    arena a = {0};
    int64_t T = 1 + pick(r, 24), E = 1 + pick(r, 8), k = 1 + pick(r, (unsigned)(E < 4 ? E : 4));
    int64_t D = 1 + pick(r, 48), H = 1 + pick(r, 48);
    loom_dtype wt = pick_fdt(r);
    moe_ctx m = {.E = E, .gp = {.top_k = (int)k, .renorm = (int)pick(r, 2)}, .mp = loom_grouped_matmul_default_params()};
    if (bad(r)) m.gp.top_k = (int)E + 1;
    m.mp.block_n = pick(r, 3) == 0 ? 1 + pick(r, 64) : 0;
    int64_t s_te[2] = {T, E}, s_tk[2] = {T, k}, s_td[2] = {T, D}, s_rd[2] = {T * k, D}, s_1r[2] = {1, T * k};
    int64_t s_1e[2] = {1, E + 1}, s_gu[3] = {E, H, D}, s_dn[3] = {E, D, H};
    m.logits = mk(&a, r, LOOM_F32, 2, s_te, bad(r), 0);
    m.x = mk(&a, r, LOOM_F32, 2, s_td, 0, 0);
    m.res = pick(r, 2) ? mk(&a, r, LOOM_F32, 2, s_td, 0, 0) : NULL;
    m.wg = mk(&a, r, wt, 3, s_gu, 0, 0);
    m.wu = mk(&a, r, wt, 3, s_gu, 0, 0);
    m.wd = mk(&a, r, wt, 3, bad(r) ? s_gu : s_dn, bad(r), 0);
    m.w = mk(&a, r, LOOM_F32, 2, s_tk, 0, 1);
    m.ids = mk(&a, r, LOOM_I32, 2, s_tk, 0, 1);
    m.xs = mk(&a, r, LOOM_F32, 2, s_rd, 0, 1);
    m.perm = mk(&a, r, LOOM_I32, 2, s_1r, 0, 1);
    m.off = mk(&a, r, LOOM_I32, 2, s_1e, 0, 1);
    m.ys = mk(&a, r, LOOM_F32, 2, s_rd, 0, 1);
    m.y = mk(&a, r, LOOM_F32, 2, s_td, 0, 1);
    if (!m.logits || !m.x || !m.wg || !m.wu || !m.wd || !m.w || !m.ids || !m.xs || !m.perm || !m.off || !m.ys || !m.y) {
        arena_free(&a);
        return;
    }
    loom_tensor *outs[4][2] = {{m.w, NULL}, {m.xs, NULL}, {m.ys, NULL}, {m.y, NULL}};
    for (m.step = 0; m.step < 4; m.step++) {
        long ran = n_ok[OP_MOE];
        if (m.step == 1 && bad(r)) ((int32_t *)m.ids->data)[pick(r, (unsigned)(T * k))] = bad(r) ? -1 : (int32_t)E;
        if (m.step == 3 && bad(r)) ((int32_t *)m.perm->data)[0] = ((int32_t *)m.perm->data)[T * k - 1];
        check_run(&a, run_moe, &m, outs[m.step], 1);
        if (n_ok[OP_MOE] == ran) break; /* refused: the later steps have no inputs */
        if (m.step == 0) { /* k distinct ids in [0, E) per token, weights largest first */
            for (int64_t t = 0; t < T; t++)
                for (int64_t j = 0; j < k; j++) {
                    int32_t e = ((int32_t *)m.ids->data)[t * k + j];
                    FUZZ_CHECK(e >= 0 && e < E);
                    for (int64_t i = 0; i < j; i++) FUZZ_CHECK(((int32_t *)m.ids->data)[t * k + i] != e);
                    if (j) FUZZ_CHECK(((float *)m.w->data)[t * k + j - 1] >= ((float *)m.w->data)[t * k + j]);
                }
        }
        if (m.step == 1) { /* offsets from 0 to T k; each expert's slots its own, ascending */
            const int32_t *o = m.off->data, *p = m.perm->data, *id = m.ids->data;
            FUZZ_CHECK(o[0] == 0 && o[E] == T * k);
            for (int64_t e = 0; e < E; e++)
                for (int64_t i = o[e]; i < o[e + 1]; i++) {
                    FUZZ_CHECK(p[i] >= 0 && p[i] < T * k && id[p[i]] == e);
                    if (i > o[e]) FUZZ_CHECK(p[i - 1] < p[i]);
                }
        }
    }
    arena_free(&a);
}
