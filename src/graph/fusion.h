/*
 * The fusion engine: rules (YAML, parsed with libyaml) that rewrite a graph of
 * primitive ops into fused ops, and the pass that applies them.
 *
 * A rule is a pattern over the primitive graph (pattern nodes with op kinds;
 * their inputs are earlier pattern nodes or named variables `$x` that bind to
 * any tensor), conditions (single use of intermediates, dtype equality, shape
 * ranges, token counts), the fused op the match becomes and its options. The
 * pass keeps every tensor id that is visible outside a match, so the fused
 * graph and the primitive graph name the same values with the same ids (the
 * checkpoints of fused_with_checkpoints rely on it).
 *
 * See docs/fusion.md for the file format.
 */
#ifndef LOOM_GRAPH_FUSION_H
#define LOOM_GRAPH_FUSION_H

#include <stdio.h>

#include "graph/graph.h"

#define LOOM_FUSION_MAX_RULES 32

/* What a pass did: per rule, how often it fired. */
typedef struct loom_fusion_report {
    int  n_rules;
    struct {
        char name[48];
        char fused_op[48];
        int  fired;
        int  enabled;
    } rules[LOOM_FUSION_MAX_RULES];
    int  nodes_before, nodes_after;
} loom_fusion_report;

/* Hardware section of a rules file (`auto` = read from cpuid). */
typedef struct loom_fusion_hw {
    int64_t l1_bytes, l2_bytes, l3_bytes;
    int     threads;
    int     isa;  /* the kernel level the defaults measured per level are chosen for (loom_isa):
                   * the rules' `isa:` key, or with `auto` the level in use (LOOM_ISA or the
                   * CPU's best); set by loom_fusion_rules_hw */
} loom_fusion_hw;

/* Checkpoint and mode settings of a rules file. */
typedef enum { LOOM_CHECKPOINT_WARN = 0, LOOM_CHECKPOINT_FAIL } loom_checkpoint_action;

/* Parsing, loading, presets and freeing rules are public (loom.h). */

/* Enables or disables the rule of that name (error if there is none). */
loom_status loom_fusion_rules_enable(loom_fusion_rules *r, const char *rule, int enabled);
int loom_fusion_rules_count(const loom_fusion_rules *r);
/* Resolved hardware section (auto values filled from cpuid). */
loom_fusion_hw loom_fusion_rules_hw(const loom_fusion_rules *r);
/* The mode named by the file's `mode:` key, or -1 when it has none. */
int loom_fusion_rules_mode(const loom_fusion_rules *r);
/* The file's `act_precision:` key (q8 or full), or LOOM_ACT_PREC_DEFAULT when it has none. */
loom_act_precision loom_fusion_rules_act_precision(const loom_fusion_rules *r);
/* Checkpoint settings: tolerance and action (defaults 2^-11 relative, warn). */
double loom_fusion_rules_checkpoint_tol(const loom_fusion_rules *r);
/* The file's `activation_dtype:` key: LOOM_F32 (default), LOOM_F16 or LOOM_BF16. The
 * activations between fused kernels that their consumers read at 16 bits
 * (today: qkv_rope's q) are stored at that dtype (loom_fusion_apply). */
loom_dtype loom_fusion_rules_activation_dtype(const loom_fusion_rules *r);
loom_checkpoint_action loom_fusion_rules_checkpoint_action(const loom_fusion_rules *r);

/* Rewrites g in place: every enabled rule, in file order, replaces each match
 * by one fused node. Works on graphs whose external tensors have NULL data
 * (analytic planning). rep (optional) lists how often each rule fired. */
loom_status loom_fusion_apply(loom_graph *g, const loom_fusion_rules *r, loom_fusion_report *rep);

/* Prints the report, one line per rule. */
void loom_fusion_report_print(FILE *f, const loom_fusion_report *rep);

#endif
