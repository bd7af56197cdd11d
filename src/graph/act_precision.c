/* Activation precision: resolution at load and the matmul nodes' attributes. */
#include "graph/act_precision.h"

#include <string.h>

#include "base/status.h"
#include "graph/fusion.h"

loom_status loom_act_precision_resolve(loom_act_precision p, const char *rules_path, loom_act_precision *out) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "act_precision_resolve: NULL argument");
    LOOM_RETURN_IF((unsigned)p >= LOOM_ACT_PREC_COUNT, LOOM_ERR_INVALID_ARG,
                   "activation precision %d: expected LOOM_ACT_PREC_DEFAULT, _Q8 or _FULL", (int)p);
    if (p != LOOM_ACT_PREC_DEFAULT) {
        *out = p;
        return LOOM_OK;
    }
    loom_fusion_rules *r = NULL;
    LOOM_TRY(loom_fusion_rules_load(rules_path, &r));
    loom_act_precision k = loom_fusion_rules_act_precision(r);
    loom_fusion_rules_free(r);
    *out = k != LOOM_ACT_PREC_DEFAULT ? k : LOOM_ACT_PREC_BUILTIN;
    return LOOM_OK;
}

void loom_graph_set_act_precision(loom_graph *g, loom_act_precision p) {
    const loom_matmul_attrs a = {.act_precision = p};
    _Static_assert(sizeof a <= LOOM_ATTR_MAX, "matmul attributes fit a node");
    for (int i = 0; i < g->n_nodes; i++) {
        loom_node *n = &g->nodes[i];
        if ((n->op != LOOM_OP_MATMUL && n->op != LOOM_OP_MATMUL_ID) || !loom_dtype_is_quantized(g->tensors[n->src[1]].t.dtype)) continue;
        memcpy(n->attrs, &a, sizeof a);
        n->has_attrs = 1;
    }
}
