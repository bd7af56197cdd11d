/*
 * The analytic planner behind `loom plan`: builds the graph of one forward
 * pass of a named model configuration WITHOUT data (external tensors with
 * NULL data pointers), optionally runs the fusion rules over it, and fills
 * every node's statistics from the op cost functions plus a roofline time
 * estimate for a hardware profile. The result is read with
 * loom_profile_collect like an executed graph.
 *
 * BERT (model/bert.h) is built natively batched: B padded sequences of S
 * tokens with a padding mask; it has no decode phase.
 *
 * Batch: loom_llama_build builds one sequence of n tokens. For B > 1 the
 * planner builds B*S tokens (prefill) or B tokens (decode) as one flat
 * sequence — exact for every token-parallel op (matmuls, norms, rope, cache
 * writes) — and evaluates the cost of attention nodes with q/k/v reshaped to
 * [B, S_q, H, D] / [B, pos + S_q, H_kv, D], i.e. B independent sequences that
 * each see their own cache. The head computes one row per sequence.
 */
#ifndef LOOM_MODEL_PLANNER_H
#define LOOM_MODEL_PLANNER_H

#include "graph/graph.h"
#include "graph/hw.h"
#include "model/configs.h"

typedef struct loom_plan_params {
    const char *config;     /* named configuration (model/configs.h) */
    const loom_named_config *named;   /* when set: this configuration instead (one read from a file) */
    const loom_llama_config *custom;  /* when set: this Llama config instead (tests) */
    int batch;              /* sequences, >= 1 */
    int seq;                /* prefill: tokens per sequence; decode: tokens already cached */
    int decode;             /* 0 prefill, 1 one decode step (q_len = 1) */
    loom_dtype kv_dtype;    /* LOOM_F32, LOOM_F16, LOOM_BF16 or LOOM_I8 */
    loom_dtype wtype;       /* weights: f32, f16, bf16, q8_0, q4_0, q4_1 */
    int fused;              /* apply the fusion rules */
    const char *rules_path; /* fusion rules YAML; NULL = the built-in default */
    const char *preset;     /* preset of the rules file, or NULL */
    loom_dtype act_dtype;   /* activations between kernels as costed: LOOM_F32 (0), F16 or BF16 */
} loom_plan_params;

typedef struct loom_plan_info {
    const loom_named_config *config;
    int n_layers;
    int n_tokens;           /* tokens in the pass, all sequences */
    int pos;                /* tokens already in each sequence's cache */
    int decode;             /* as in the params */
    int flat_batch;         /* B when the graph holds B sequences as one flat one (Llama), else 1 */
    int fusion_applied;     /* 1 when the rules ran */
    int rules_fired;        /* total matches replaced */
    int uncosted;           /* nodes whose cost function reported 0 bytes (a bug if > 0) */
    loom_dtype act_dtype;   /* as in the params */
} loom_plan_info;

/* loom_plan_have_fusion() is public (loom.h). */

/* Builds the data-less graph into g (reset first), applies the fusion rules
 * when p->fused, and fills node stats from the cost functions and hw's
 * roofline (stats.time_ns = the estimate). Errors name the bad parameter. */
loom_status loom_plan_build(loom_graph *g, const loom_plan_params *p, const loom_hw_profile *hw,
                            loom_plan_info *info);

/* Cost of node n as the plan counts it (batch fix-ups applied), whether it
 * runs on the matrix engine, at which precision, and its roofline seconds. */
typedef struct loom_plan_node_cost {
    double flops, bytes_read, bytes_written, seconds;
    int matrix;
    loom_hw_prec prec;
    int compute_bound;
} loom_plan_node_cost;
void loom_plan_node(const loom_graph *g, int n, const loom_plan_info *info, const loom_hw_profile *hw,
                    loom_plan_node_cost *out);

#endif
