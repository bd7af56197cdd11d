/*
 * Optimised matmul kernels in the op table, one per level. Each wrapper turns
 * the op's tensors into loom_matmul_args (x may have leading dims: M is their
 * product; the optional attributes give the activation precision) and runs
 * the matmul family; tensors the family cannot describe
 * (a last dim that is not contiguous, leading dims that do not collapse into
 * one row stride) go to the reference kernel.
 */
#include "ops/matmul/matmul.h"
#include "ops/register.h"

/* Row stride of t's rows (all dims but the last, enumerated row-major) if
 * they collapse into one stride; the last dim must be contiguous. */
static int row_stride(const loom_tensor *t, int64_t *ld) {
    int last = t->ndim - 1;
    if (t->stride[last] != 1 && t->shape[last] > 1) return 0;
    int64_t s = -1, span = 0; /* stride of the innermost leading dim of size > 1 */
    for (int d = last - 1; d >= 0; d--) {
        if (t->shape[d] == 1) continue;
        if (s < 0) {
            s = t->stride[d];
        } else if (t->stride[d] != span) {
            return 0;
        }
        span = t->stride[d] * t->shape[d];
    }
    *ld = s < 0 ? t->shape[last] : s;
    return 1;
}

/* 1 and *a filled when the family can run these tensors. Data pointers are
 * checked only when check is set: the graph planner sizes scratch before it
 * binds data. */
static int make_args(const loom_tensor *x, const loom_tensor *w, const loom_tensor *y,
                     loom_matmul_args *a, int check) {
    if (!x || !w || !y || w->ndim != 2 || x->ndim != y->ndim) return 0;
    int last = x->ndim - 1;
    int64_t M = 1;
    for (int d = 0; d < last; d++) {
        if (x->shape[d] != y->shape[d]) return 0;
        M *= x->shape[d];
    }
    if (w->stride[1] != 1 && w->shape[1] > 1) return 0;
    int64_t ldx, ldy;
    if (!row_stride(x, &ldx) || !row_stride(y, &ldy)) return 0;
    int64_t K = x->shape[last], N = w->shape[0];
    int64_t ldw = w->shape[0] > 1 ? w->stride[0] : K;
    if (ldx < K || ldy < N || ldw < K || y->dtype != LOOM_F32 || x->dtype != LOOM_F32) return 0;
    *a = (loom_matmul_args){.x = x->data, .ldx = ldx, .w = w->data, .ldw = ldw, .wtype = w->dtype,
                            .y = y->data, .ldy = ldy, .M = M, .N = N, .K = K, .ep = NULL};
    return !check || loom_matmul_check(a) == LOOM_OK;
}

/* The activation precision of optional attributes (NULL: q8). */
static loom_act_precision act_of(const void *attrs) {
    return attrs ? (loom_act_precision)((const loom_matmul_attrs *)attrs)->act_precision : LOOM_ACT_PREC_Q8;
}

static loom_status run_level(const loom_kernel_args *ka, loom_isa isa) {
    loom_matmul_args a;
    if (!make_args(ka->src[0], ka->src[1], ka->dst, &a, 1)) return loom_op_get(LOOM_OP_MATMUL)->ref(ka);
    a.act = act_of(ka->attrs);
    a.invariant = ka->invariant;
    return loom_matmul_run(&a, isa, ka->ith, ka->nth, ka->scratch);
}

static loom_status matmul_generic(const loom_kernel_args *ka) { return run_level(ka, LOOM_ISA_GENERIC); }
#if defined(__x86_64__)
static loom_status matmul_avx2(const loom_kernel_args *ka) { return run_level(ka, LOOM_ISA_AVX2); }
static loom_status matmul_avx512(const loom_kernel_args *ka) { return run_level(ka, LOOM_ISA_AVX512); }
#endif

static size_t matmul_scratch(const loom_tensor *const *src, int n_src, const loom_tensor *dst,
                             const void *attrs) {
    loom_matmul_args a;
    if (n_src < 2 || !make_args(src[0], src[1], dst, &a, 0)) return 0; /* the reference needs none */
    a.act = act_of(attrs);
    return loom_matmul_scratch_size(&a);
}

void loom_register_matmul_kernels(loom_op_info *table) {
    loom_op_info *m = &table[LOOM_OP_MATMUL];
    m->scratch_size = matmul_scratch;
    m->opt[LOOM_ISA_GENERIC] = matmul_generic;
#if defined(__x86_64__)
    m->opt[LOOM_ISA_AVX2] = matmul_avx2;
    m->opt[LOOM_ISA_AVX512] = matmul_avx512;
#endif
}
