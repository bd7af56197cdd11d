/* Run-time registration of fused ops and activations into the custom op
 * slots of the registry, and of their fusion builders. */
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "graph/ops_init.h"
#include "fused/fused_graph_ops.h"
#include "graph/fusion_internal.h"
#include "ops/ref/ref.h"

#define N_SLOTS (LOOM_OP_CUSTOM_LAST - LOOM_OP_CUSTOM0 + 1)

static struct slot {
    int used, is_act;
    char name[40], decomposition[64];
    loom_fused_op_desc d;
    float (*act)(float, void *);
    void *act_user;
} slots[N_SLOTS];

static loom_status slot_infer(int k, const loom_tensor *const *src, int n_src, loom_tensor *dst) {
    struct slot *s = &slots[k];
    LOOM_TRY(loom_ref_check_arity(s->name, src, n_src, s->is_act ? 1 : s->d.n_inputs, s->is_act ? 1 : s->d.n_inputs));
    if (s->is_act) LOOM_TRY(loom_ref_check_dtype(s->name, 0, "x", src[0], LOOM_REF_DT(LOOM_F32)));
    if (!s->is_act && s->d.infer) return s->d.infer(src, n_src, dst, s->d.user);
    loom_ref_set_dst(dst, src[0]->dtype, src[0]->ndim, src[0]->shape);
    return LOOM_OK;
}

static void slot_cost(int k, const loom_tensor *const *src, int n_src, const loom_tensor *dst, loom_cost *c) {
    struct slot *s = &slots[k];
    c->flops = (double)loom_tensor_nelem(dst);
    c->bytes_read = 0;
    for (int i = 0; i < n_src; i++) c->bytes_read += (double)loom_tensor_nbytes(src[i]);
    c->bytes_written = (double)loom_tensor_nbytes(dst);
    if (!s->is_act && s->d.cost) s->d.cost(src, n_src, dst, &c->flops, &c->bytes_read, &c->bytes_written, s->d.user);
}

static loom_status slot_kernel(int k, const loom_kernel_args *a) {
    struct slot *s = &slots[k];
    if (!s->is_act) return s->d.kernel(a->src, a->n_src, a->dst, a->ith, a->nth, s->d.user);
    const loom_tensor *x = a->src[0], *y = a->dst;
    int64_t lo, hi;
    loom_ref_split(loom_tensor_nelem(x), a->ith, a->nth, &lo, &hi);
    for (int64_t e = lo; e < hi; e++)
        loom_ref_put(y, loom_ref_row_offset(y, y->ndim, e),
                     s->act(loom_ref_get(x, loom_ref_row_offset(x, x->ndim, e)), s->act_user));
    return LOOM_OK;
}

#define SLOT_FNS(k)                                                                                         \
    static loom_status infer##k(const loom_tensor *const *src, int n, const void *at, loom_tensor *d) {     \
        return slot_infer(k, src, n, d);                                                                    \
    }                                                                                                       \
    static void cost##k(const loom_tensor *const *src, int n, const loom_tensor *d, const void *at,         \
                        loom_cost *c) {                                                                     \
        slot_cost(k, src, n, d, c);                                                                         \
    }                                                                                                       \
    static loom_status kernel##k(const loom_kernel_args *a) { return slot_kernel(k, a); }
SLOT_FNS(0) SLOT_FNS(1) SLOT_FNS(2) SLOT_FNS(3) SLOT_FNS(4) SLOT_FNS(5) SLOT_FNS(6) SLOT_FNS(7)
_Static_assert(N_SLOTS == 8, "one set of slot functions per custom slot");

static const struct {
    loom_status (*infer)(const loom_tensor *const *, int, const void *, loom_tensor *);
    void (*cost)(const loom_tensor *const *, int, const loom_tensor *, const void *, loom_cost *);
    loom_kernel_fn kernel;
} slot_fns[N_SLOTS] = {{infer0, cost0, kernel0}, {infer1, cost1, kernel1}, {infer2, cost2, kernel2},
                       {infer3, cost3, kernel3}, {infer4, cost4, kernel4}, {infer5, cost5, kernel5},
                       {infer6, cost6, kernel6}, {infer7, cost7, kernel7}};

static int valid_name(const char *n) {
    if (!n || !*n || strlen(n) >= 40) return 0;
    for (const char *c = n; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_')) return 0;
    for (int op = 0; op < LOOM_OP_COUNT; op++)
        if (!strcmp(loom_op_get((loom_op)op)->name, n)) return 0;
    return !fr_builder_find(n);
}

static int take_slot(const char *name, int is_act) {
    for (int k = 0; k < N_SLOTS; k++)
        if (!slots[k].used) {
            memset(&slots[k], 0, sizeof slots[k]);
            slots[k].used = 1, slots[k].is_act = is_act;
            snprintf(slots[k].name, sizeof slots[k].name, "%s", name);
            loom_ops_init(); /* the fused layer's registration resets the slots: it runs first */
            loom_op_info *e = &loom_op_table_mutable()[LOOM_OP_CUSTOM0 + k];
            e->name = slots[k].name;
            e->infer = slot_fns[k].infer, e->cost = slot_fns[k].cost, e->ref = slot_fns[k].kernel;
            e->n_src_min = 1, e->n_src_max = LOOM_MAX_SRC;
            loom_op_refresh_kernel_names((loom_op)(LOOM_OP_CUSTOM0 + k));
            return k;
        }
    return -1;
}

/* Builder of user fused ops: inputs = the variables, output = the last node. */
static int build_custom(const fr_ctx *c, fr_fused *f) {
    for (int k = 0; k < N_SLOTS; k++) {
        if (!slots[k].used || slots[k].is_act || strcmp(slots[k].name, c->rule->fused_op)) continue;
        if (c->rule->n_vars != slots[k].d.n_inputs) return 0;
        f->op = (loom_op)(LOOM_OP_CUSTOM0 + k);
        f->n_src = c->rule->n_vars;
        for (int i = 0; i < f->n_src; i++) f->src[i] = c->m->var[i];
        f->dst = c->g->nodes[c->m->node[c->rule->n_nodes - 1]].dst;
        return 1;
    }
    return 0;
}

loom_status loom_register_fused_op(const loom_fused_op_desc *d) {
    LOOM_RETURN_IF(!d || !d->kernel, LOOM_ERR_INVALID_ARG, "register_fused_op: a kernel is required");
    LOOM_RETURN_IF(!valid_name(d->name), LOOM_ERR_INVALID_ARG,
                   "register_fused_op: name '%s' must be new, [a-z0-9_] and under 40 characters",
                   d->name ? d->name : "(null)");
    LOOM_RETURN_IF(d->n_inputs < 1 || d->n_inputs > LOOM_MAX_SRC, LOOM_ERR_INVALID_ARG,
                   "register_fused_op: %s: n_inputs %d out of range 1..%d", d->name, d->n_inputs, LOOM_MAX_SRC);
    int k = take_slot(d->name, 0);
    LOOM_RETURN_IF(k < 0, LOOM_ERR_UNSUPPORTED, "register_fused_op: all %d op slots are taken", N_SLOTS);
    slots[k].d = *d;
    snprintf(slots[k].decomposition, sizeof slots[k].decomposition, "%s", d->decomposition ? d->decomposition : "");
    slots[k].d.name = slots[k].name;
    loom_op_info *e = &loom_op_table_mutable()[LOOM_OP_CUSTOM0 + k];
    e->n_src_min = e->n_src_max = d->n_inputs;
    e->decomposition = slots[k].decomposition;
    fr_builder b = {.name = slots[k].name, .nodes = "", .vars = "", .options = "", .build = build_custom};
    return fr_builder_register(&b);
}

loom_status loom_register_activation(const char *name, float (*fn)(float, void *), void *user) {
    LOOM_RETURN_IF(!fn, LOOM_ERR_INVALID_ARG, "register_activation: a function is required");
    LOOM_RETURN_IF(!valid_name(name), LOOM_ERR_INVALID_ARG,
                   "register_activation: name '%s' must be new, [a-z0-9_] and under 40 characters",
                   name ? name : "(null)");
    int k = take_slot(name, 1);
    LOOM_RETURN_IF(k < 0, LOOM_ERR_UNSUPPORTED, "register_activation: all %d op slots are taken", N_SLOTS);
    slots[k].act = fn, slots[k].act_user = user;
    loom_op_info *e = &loom_op_table_mutable()[LOOM_OP_CUSTOM0 + k];
    e->n_src_min = e->n_src_max = 1;
    LOOM_RETURN_IF(loom_ffn_act_register(slots[k].name, fn, user) < 0, LOOM_ERR_UNSUPPORTED,
                   "register_activation: the FFN activation table is full");
    return LOOM_OK;
}
