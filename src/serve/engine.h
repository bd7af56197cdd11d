/*
 * The batch engine (DESIGN.md, "Serving"): many sequences in one forward pass
 * over a paged KV cache. Each step runs one forward program over a ragged
 * batch: one row for every running sequence that decodes, plus prompt chunks
 * of sequences being prefilled, under a token budget (chunked prefill: a long
 * prompt never stalls the others). Projections and FFN run over all rows at
 * once (the weights are read once per step); attention runs per sequence over
 * its own blocks (paged_attention).
 *
 * The KV cache is one pool of fixed-size blocks with a block table per
 * sequence (kv_blocks.h): prefix caching of full blocks by the hash chain of
 * their tokens, reference counts, copy-on-write of a shared block before a
 * sequence writes into it, LRU eviction of unreferenced cached blocks, and
 * preemption by recompute (the newest sequences give their blocks back and
 * resume later from their tokens) when the pool cannot hold the next step.
 *
 * Requests may be added and cancelled from any thread; loom_engine_step runs
 * on one thread at a time and returns the step's events.
 */
#ifndef LOOM_SERVE_ENGINE_H
#define LOOM_SERVE_ENGINE_H

#include <stdint.h>

#include "loom.h"
#include "graph/graph.h"
#include "model/model.h"
#include "model/tokenizer.h"

/* The engine's public API (loom_engine_create, _add, _step, its params and
 * events) is in include/loom.h; below are loom's own extras. */

/* The fused graph of the last step's program with its accounting (kernels,
 * bytes, flops per node: graph/profile.h), or NULL before the first step. */
const loom_graph *loom_engine_last_graph(loom_engine *e);
/* Checks the block manager's invariants and that every block a sequence holds
 * is referenced once per holder (tests). */
loom_status loom_engine_check(const loom_engine *e);

#endif
