/* Internal structures of the fusion engine: parsed rules, matches, builders. */
#ifndef LOOM_GRAPH_FUSION_INTERNAL_H
#define LOOM_GRAPH_FUSION_INTERNAL_H

#include "graph/fusion.h"

#define FR_MAX_PNODES 12
#define FR_MAX_VARS   12
#define FR_MAX_IN     LOOM_MAX_SRC
#define FR_MAX_OPTS   8
#define FR_MAX_CONDS  8
#define FR_MAX_PRESETS 8
#define FR_NAME       40
#define FR_VAR_REF    1000   /* ref >= FR_VAR_REF: variable ref - FR_VAR_REF; else pattern node */

typedef struct fr_pnode {
    char name[FR_NAME];
    int  op;                 /* loom_op */
    int  n_in;
    int  in[FR_MAX_IN];      /* refs: pattern node index or FR_VAR_REF + variable */
} fr_pnode;

typedef struct fr_dim_cond { int ref; int dim; int64_t min, max; } fr_dim_cond;

typedef struct fr_option { char key[FR_NAME]; int64_t value; int is_auto; } fr_option;

struct fr_builder;

typedef struct fr_rule {
    char name[48], fused_op[48];
    const struct fr_builder *builder;
    int  enabled;
    int  n_nodes;  fr_pnode nodes[FR_MAX_PNODES];
    int  n_vars;   char vars[FR_MAX_VARS][FR_NAME];
    int  single_use;
    int  n_same_dtype; int same_dtype[FR_MAX_CONDS];
    int  n_dims;   fr_dim_cond dims[FR_MAX_CONDS];
    int  n_opts;   fr_option opts[FR_MAX_OPTS];
} fr_rule;

typedef struct fr_preset {
    char name[FR_NAME];
    int  n;  /* overrides */
    struct { int rule; char key[FR_NAME]; int64_t value; int is_auto; int is_enabled; } o[32];
} fr_preset;

struct loom_fusion_rules {
    int     n_rules;
    fr_rule rules[LOOM_FUSION_MAX_RULES];
    int     n_presets;
    fr_preset presets[FR_MAX_PRESETS];
    loom_fusion_hw hw;       /* 0 = auto (hw.isa unused: isa_key) */
    int     isa_key;         /* hardware: isa: 0 auto, else the kernel level + 1 */
    int     mode;            /* -1 none */
    double  ckpt_tol;
    unsigned version;        /* bumped by every change after parsing (presets, enable) */
    loom_checkpoint_action ckpt_action;
    int     ckpt_layers, ckpt_logits;   /* checkpoint sets */
    int64_t max_fusion_block_size;      /* 0 = none */
    loom_act_precision act_precision;   /* the `act_precision:` key; LOOM_ACT_PREC_DEFAULT = none */
    loom_dtype act_dtype;               /* the `activation_dtype:` key: LOOM_F32 (default), F16 or BF16 */
};

/* One match: graph node per pattern node, tensor id per variable. */
typedef struct fr_match {
    int node[FR_MAX_PNODES];
    int var[FR_MAX_VARS];
} fr_match;

/* The node a builder asks for. */
typedef struct fr_fused {
    loom_op op;
    int     src[LOOM_MAX_SRC], n_src;
    _Alignas(16) unsigned char attrs[LOOM_ATTR_MAX];
    int     dst;
    int     extra[LOOM_MAX_EXTRA_DST], n_extra;
    /* New f32 [rows, cols] intermediates appended to the extras (phase buffers:
     * ffn's hidden activations, moe_ffn's three), rows > 0 each. */
    int     n_hidden;
    int     hidden_rows[LOOM_MAX_EXTRA_DST], hidden_cols[LOOM_MAX_EXTRA_DST];
} fr_fused;

typedef struct fr_ctx {
    const loom_graph *g;
    const fr_rule    *rule;
    const fr_match   *m;
    loom_fusion_hw    hw;
    int64_t           max_block;
} fr_ctx;

typedef struct fr_builder {
    const char *name;          /* the fused_op name in YAML */
    const char *nodes;         /* pattern node names it needs, space-separated */
    const char *vars;          /* variables it needs */
    const char *options;       /* option keys it accepts (besides max_fusion_block_size) */
    /* 1 and *out filled when the match can become the fused op, 0 to skip it */
    int (*build)(const fr_ctx *c, fr_fused *out);
    /* The roles build() takes its nodes and variables in, as the pattern must
     * give them (NULL: none checked); a rule that gives them otherwise binds
     * the wrong tensors and is refused when the rules are read. Entries
     * "node=op(in,...|optional,...)" separated by spaces: op is an op name or
     * '*' (the builder checks it); an input is "$var", a pattern node, or '_'
     * (anything); inputs after '|' may be left out; add and mul take theirs in
     * either order (as the matcher does); an entry whose node the pattern does
     * not name is skipped (an optional node). */
    const char *roles;
} fr_builder;

const fr_builder *fr_builder_find(const char *name);
/* Space-separated names of the built-in and registered fused ops, for errors. */
void fr_builder_names(char *buf, size_t n);
/* Registers a builder (extension API); error when full or the name exists. */
loom_status fr_builder_register(const fr_builder *b);

/* Checks rule r's pattern against its builder's roles; 0 when they hold,
 * else -1 with the pattern node at fault in *bad_node and why in msg. */
int fr_check_roles(const fr_rule *r, int *bad_node, char *msg, size_t n);

/* Helpers for builders. */
int fr_node(const fr_ctx *c, const char *name);      /* graph node of a pattern name, or -1 */
int fr_var(const fr_ctx *c, const char *name);       /* tensor id of a variable, or -1 */
int64_t fr_opt(const fr_ctx *c, const char *key, int64_t auto_value);
/* The tensor a node reads as input i, following reshape views to their base. */
int fr_source(const loom_graph *g, int id);

#endif
