/*
 * The activation precision of a model's quantized matmuls (how x meets q8_0,
 * q4_0 and q4_1 weights; docs/models.md): resolved once when the model is
 * loaded, then written into the attributes of the graph's matmul nodes. The
 * matmul kernels read it there, and the fusion builders copy it into the
 * fused ops (qkv_rope, ffn) made from those nodes, so unfused and fused
 * graphs compute alike and no executor state is involved (docs/matmul.md).
 */
#ifndef LOOM_GRAPH_ACT_PRECISION_H
#define LOOM_GRAPH_ACT_PRECISION_H

#include "graph/graph.h"

/* p itself when it is LOOM_ACT_PREC_Q8 or _FULL; for LOOM_ACT_PREC_DEFAULT the
 * `act_precision:` key of the rules file rules_path (NULL: the built-in rules),
 * else LOOM_ACT_PREC_BUILTIN. Errors: p out of range, an unreadable or
 * malformed rules file (its message names FILE:LINE:COLUMN). */
loom_status loom_act_precision_resolve(loom_act_precision p, const char *rules_path, loom_act_precision *out);

/* Sets act_precision p in the attributes of every matmul node of g whose
 * weight (input 1) is block-quantized; other nodes are left as they are. */
void loom_graph_set_act_precision(loom_graph *g, loom_act_precision p);

#endif
