/* The op table filled by the layers that own its kernels, from above both:
 * src/ops registers the primitive families, src/fused the fused ops and the
 * fused kernels of the primitive attention op. The registry (src/ops) never
 * calls up into src/fused; this layer calls down into both. */
#ifndef LOOM_GRAPH_OPS_INIT_H
#define LOOM_GRAPH_OPS_INIT_H

/* Registers every family once (thread-safe; later calls return at once).
 * Called by the graph and executor entry points; code that runs fused ops
 * through the op table without a graph (tests, tools) calls it first. */
void loom_ops_init(void);

#endif
