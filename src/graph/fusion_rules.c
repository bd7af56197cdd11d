/* Parser of fusion rules files (YAML, libyaml document API). Every error names
 * FILE:LINE:COLUMN and what was expected. */
#include "graph/fusion_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

#include "base/cpu.h"
#include "base/file.h"
#include "base/status.h"

extern const char loom_fusion_default_yaml[];  /* generated from configs/fusion/default.yaml */

typedef struct pctx {
    yaml_document_t doc;
    const char *file;
    loom_fusion_rules *r;
} pctx;

static loom_status perr(const pctx *p, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static loom_status perr(const pctx *p, const yaml_node_t *n, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return loom_set_error(LOOM_ERR_FORMAT, "%s:%zu:%zu: %s", p->file,
                          n ? n->start_mark.line + 1 : 1, n ? n->start_mark.column + 1 : 1, msg);
}

static yaml_node_t *node(const pctx *p, int id) {
    return yaml_document_get_node((yaml_document_t *)&p->doc, id);
}

static const char *scalar(const yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static loom_status want(const pctx *p, const yaml_node_t *n, yaml_node_type_t t, const char *what) {
    if (n && n->type == t) return LOOM_OK;
    const char *kind = t == YAML_MAPPING_NODE ? "a mapping" : t == YAML_SEQUENCE_NODE ? "a list" : "a scalar";
    return perr(p, n, "%s: expected %s", what, kind);
}

static loom_status get_int(const pctx *p, const yaml_node_t *n, const char *what, int64_t lo,
                           int64_t hi, int allow_auto, int64_t *out, int *is_auto) {
    const char *s = scalar(n);
    if (!s) return perr(p, n, "%s: expected an integer%s", what, allow_auto ? " or 'auto'" : "");
    if (allow_auto && strcmp(s, "auto") == 0) {
        *out = 0;
        if (is_auto) *is_auto = 1;
        return LOOM_OK;
    }
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return perr(p, n, "%s: expected an integer in %lld..%lld%s, found '%s'", what, (long long)lo,
                    (long long)hi, allow_auto ? " or 'auto'" : "", s);
    *out = v;
    if (is_auto) *is_auto = 0;
    return LOOM_OK;
}

static loom_status get_bool(const pctx *p, const yaml_node_t *n, const char *what, int *out) {
    const char *s = scalar(n);
    if (s && (!strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on"))) return *out = 1, LOOM_OK;
    if (s && (!strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off"))) return *out = 0, LOOM_OK;
    return perr(p, n, "%s: expected true or false", what);
}

static loom_status get_name(const pctx *p, const yaml_node_t *n, const char *what, char *dst, size_t cap) {
    const char *s = scalar(n);
    if (!s || !*s || strlen(s) >= cap) return perr(p, n, "%s: expected a name of 1..%zu characters", what, cap - 1);
    memcpy(dst, s, strlen(s) + 1);
    return LOOM_OK;
}

/* ------------------------------------------------------------ rules */

static int find_op(const char *name) {
    for (int op = 0; op < LOOM_OP_COUNT; op++)
        if (strcmp(loom_op_get((loom_op)op)->name, name) == 0) return op;
    return -1;
}

/* A reference in a rule: "$var" (declared on first use when declare) or a pattern node name. */
static int resolve_ref(fr_rule *r, const char *s, int declare) {
    if (s[0] == '$') {
        for (int v = 0; v < r->n_vars; v++)
            if (strcmp(r->vars[v], s + 1) == 0) return FR_VAR_REF + v;
        if (!declare || r->n_vars == FR_MAX_VARS || !s[1] || strlen(s + 1) >= FR_NAME) return -1;
        snprintf(r->vars[r->n_vars], FR_NAME, "%s", s + 1);
        return FR_VAR_REF + r->n_vars++;
    }
    for (int i = 0; i < r->n_nodes; i++)
        if (strcmp(r->nodes[i].name, s) == 0) return i;
    return -1;
}

static loom_status parse_pattern(pctx *p, fr_rule *r, yaml_node_t *seq) {
    LOOM_TRY(want(p, seq, YAML_SEQUENCE_NODE, "pattern"));
    for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++) {
        yaml_node_t *n = node(p, *it);
        LOOM_TRY(want(p, n, YAML_MAPPING_NODE, "pattern node"));
        if (r->n_nodes == FR_MAX_PNODES) return perr(p, n, "pattern: at most %d nodes", FR_MAX_PNODES);
        fr_pnode *pn = &r->nodes[r->n_nodes];
        memset(pn, 0, sizeof *pn);
        pn->op = -1;
        yaml_node_t *inputs = NULL;
        for (yaml_node_pair_t *kv = n->data.mapping.pairs.start; kv < n->data.mapping.pairs.top; kv++) {
            yaml_node_t *k = node(p, kv->key), *v = node(p, kv->value);
            const char *key = scalar(k);
            if (!key) return perr(p, k, "pattern node: expected a key");
            if (!strcmp(key, "name")) {
                LOOM_TRY(get_name(p, v, "pattern node name", pn->name, sizeof pn->name));
                if (pn->name[0] == '$') return perr(p, v, "pattern node name: '$' starts variables");
                if (resolve_ref(r, pn->name, 0) >= 0)
                    return perr(p, v, "pattern node name '%s' is used twice", pn->name);
            } else if (!strcmp(key, "op")) {
                const char *s = scalar(v);
                if (!s || (pn->op = find_op(s)) < 0)
                    return perr(p, v, "unknown op kind '%s' (expected an op of the registry, e.g. "
                                      "matmul, rope, add, rms_norm, silu, mul, attention, kv_append)",
                                s ? s : "?");
            } else if (!strcmp(key, "inputs")) {
                inputs = v;
            } else {
                return perr(p, k, "pattern node: unknown key '%s' (expected name, op, inputs)", key);
            }
        }
        if (!pn->name[0]) return perr(p, n, "pattern node: 'name' is required");
        if (pn->op < 0) return perr(p, n, "pattern node '%s': 'op' is required", pn->name);
        if (!inputs) return perr(p, n, "pattern node '%s': 'inputs' is required", pn->name);
        LOOM_TRY(want(p, inputs, YAML_SEQUENCE_NODE, "inputs"));
        int connected = r->n_nodes == 0;
        for (yaml_node_item_t *in = inputs->data.sequence.items.start; in < inputs->data.sequence.items.top; in++) {
            yaml_node_t *v = node(p, *in);
            const char *s = scalar(v);
            if (!s) return perr(p, v, "input: expected a pattern node name or $variable");
            if (pn->n_in == FR_MAX_IN) return perr(p, v, "pattern node '%s': at most %d inputs", pn->name, FR_MAX_IN);
            int before = r->n_vars;
            int ref = resolve_ref(r, s, 1);
            if (ref < 0)
                return perr(p, v, "input '%s' is neither an earlier pattern node nor a $variable", s);
            if (ref < FR_VAR_REF || ref - FR_VAR_REF < before) connected = 1;
            pn->in[pn->n_in++] = ref;
        }
        const loom_op_info *info = loom_op_get((loom_op)pn->op);
        if (pn->n_in < info->n_src_min || pn->n_in > info->n_src_max)
            return perr(p, inputs, "pattern node '%s': op %s takes %d..%d inputs, found %d", pn->name,
                        info->name, info->n_src_min, info->n_src_max, pn->n_in);
        if (!connected)
            return perr(p, n, "pattern node '%s' is not connected to the earlier nodes (it needs an "
                              "input that is an earlier node or an already used $variable)", pn->name);
        r->n_nodes++;
    }
    if (r->n_nodes == 0) return perr(p, seq, "pattern: expected at least one node");
    return LOOM_OK;
}

static loom_status parse_conditions(pctx *p, fr_rule *r, yaml_node_t *m) {
    LOOM_TRY(want(p, m, YAML_MAPPING_NODE, "conditions"));
    for (yaml_node_pair_t *kv = m->data.mapping.pairs.start; kv < m->data.mapping.pairs.top; kv++) {
        yaml_node_t *k = node(p, kv->key), *v = node(p, kv->value);
        const char *key = scalar(k);
        if (key && !strcmp(key, "single_use")) {
            LOOM_TRY(get_bool(p, v, "single_use", &r->single_use));
        } else if (key && !strcmp(key, "same_dtype")) {
            LOOM_TRY(want(p, v, YAML_SEQUENCE_NODE, "same_dtype"));
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
                yaml_node_t *e = node(p, *it);
                const char *s = scalar(e);
                int ref = s ? resolve_ref(r, s, 0) : -1;
                if (ref < 0) return perr(p, e, "same_dtype: '%s' is not a pattern node or $variable", s ? s : "?");
                if (r->n_same_dtype == FR_MAX_CONDS) return perr(p, e, "same_dtype: too many entries");
                r->same_dtype[r->n_same_dtype++] = ref;
            }
        } else if (key && !strcmp(key, "dims")) {
            LOOM_TRY(want(p, v, YAML_SEQUENCE_NODE, "dims"));
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
                yaml_node_t *e = node(p, *it);
                LOOM_TRY(want(p, e, YAML_MAPPING_NODE, "dims entry"));
                if (r->n_dims == FR_MAX_CONDS) return perr(p, e, "dims: too many entries");
                fr_dim_cond *d = &r->dims[r->n_dims];
                d->ref = -1, d->dim = 0, d->min = 0, d->max = INT64_MAX;
                for (yaml_node_pair_t *q = e->data.mapping.pairs.start; q < e->data.mapping.pairs.top; q++) {
                    yaml_node_t *qk = node(p, q->key), *qv = node(p, q->value);
                    const char *dk = scalar(qk);
                    int64_t val;
                    if (dk && !strcmp(dk, "of")) {
                        const char *s = scalar(qv);
                        if (!s || (d->ref = resolve_ref(r, s, 0)) < 0)
                            return perr(p, qv, "dims.of: '%s' is not a pattern node or $variable", s ? s : "?");
                    } else if (dk && !strcmp(dk, "dim")) {
                        LOOM_TRY(get_int(p, qv, "dims.dim", -LOOM_MAX_DIMS, LOOM_MAX_DIMS - 1, 0, &val, NULL));
                        d->dim = (int)val;
                    } else if (dk && !strcmp(dk, "min")) {
                        LOOM_TRY(get_int(p, qv, "dims.min", 0, INT64_MAX, 0, &d->min, NULL));
                    } else if (dk && !strcmp(dk, "max")) {
                        LOOM_TRY(get_int(p, qv, "dims.max", 0, INT64_MAX, 0, &d->max, NULL));
                    } else {
                        return perr(p, qk, "dims: unknown key '%s' (expected of, dim, min, max)", dk ? dk : "?");
                    }
                }
                if (d->ref < 0) return perr(p, e, "dims: 'of' is required");
                r->n_dims++;
            }
        } else {
            return perr(p, k, "conditions: unknown key '%s' (expected single_use, same_dtype, dims)",
                        key ? key : "?");
        }
    }
    return LOOM_OK;
}

/* Checks key is an option the rule's fused op accepts. */
static int option_known(const fr_rule *r, const char *key) {
    if (!strcmp(key, "max_fusion_block_size")) return 1;
    const char *o = r->builder->options;
    size_t n = strlen(key);
    while (o && *o) {
        size_t len = strcspn(o, " ");
        if (len == n && !strncmp(o, key, n)) return 1;
        o += len;
        while (*o == ' ') o++;
    }
    return 0;
}

/* The option key of k, when rule r's fused op takes it (else an error naming the expected ones). */
static loom_status option_key(pctx *p, const fr_rule *r, yaml_node_t *k, const char **key) {
    *key = scalar(k);
    if (!*key || !option_known(r, *key))
        return perr(p, k, "rule '%s': unknown option '%s' for fused op %s (expected: %s%smax_fusion_block_size)",
                    r->name, *key ? *key : "?", r->fused_op, r->builder->options,
                    r->builder->options[0] ? " " : "");
    return LOOM_OK;
}

/* Rule r's slot for option key: the existing one or a new one (NULL when full). */
static fr_option *opt_slot(fr_rule *r, const char *key) {
    int idx = 0;
    while (idx < r->n_opts && strcmp(r->opts[idx].key, key)) idx++;
    if (idx == FR_MAX_OPTS) return NULL;
    if (idx == r->n_opts) {
        r->n_opts++;
        memset(&r->opts[idx], 0, sizeof r->opts[idx]);
        snprintf(r->opts[idx].key, sizeof r->opts[idx].key, "%s", key);
    }
    return &r->opts[idx];
}

static loom_status set_option(pctx *p, fr_rule *r, yaml_node_t *k, yaml_node_t *v) {
    const char *key;
    LOOM_TRY(option_key(p, r, k, &key));
    fr_option *o = opt_slot(r, key);
    if (!o) return perr(p, k, "rule '%s': too many options", r->name);
    return get_int(p, v, key, 0, INT32_MAX, 1, &o->value, &o->is_auto);
}

static loom_status check_builder_names(pctx *p, fr_rule *r, yaml_node_t *at) {
    const char *lists[2] = {r->builder->nodes, r->builder->vars};
    for (int l = 0; l < 2; l++) {
        const char *s = lists[l];
        while (s && *s) {
            size_t len = strcspn(s, " ");
            char name[FR_NAME + 1];
            snprintf(name, sizeof name, "%s%.*s", l ? "$" : "", (int)(len < FR_NAME - 1 ? len : FR_NAME - 1), s);
            if (resolve_ref(r, name, 0) < 0)
                return perr(p, at, "rule '%s': fused op %s needs the pattern to name %s '%s' (needs nodes: %s; "
                                   "variables: %s)", r->name, r->fused_op, l ? "variable" : "node", name,
                            r->builder->nodes, r->builder->vars);
            s += len;
            while (*s == ' ') s++;
        }
    }
    return LOOM_OK;
}

/* The pattern gives the builder's nodes and variables the roles it uses them
 * in (fr_builder.roles): else the fused op would read the wrong tensors. */
static loom_status check_roles(pctx *p, const fr_rule *r, yaml_node_t *pattern) {
    int bad = 0;
    char why[320];
    if (fr_check_roles(r, &bad, why, sizeof why) == 0) return LOOM_OK;
    yaml_node_item_t *it = pattern->data.sequence.items.start + bad;
    yaml_node_t *at = it < pattern->data.sequence.items.top ? node(p, *it) : pattern;
    return perr(p, at, "rule '%s': %s", r->name, why);
}

static loom_status parse_rule(pctx *p, yaml_node_t *m) {
    LOOM_TRY(want(p, m, YAML_MAPPING_NODE, "rule"));
    loom_fusion_rules *rs = p->r;
    if (rs->n_rules == LOOM_FUSION_MAX_RULES) return perr(p, m, "at most %d rules", LOOM_FUSION_MAX_RULES);
    fr_rule *r = &rs->rules[rs->n_rules];
    memset(r, 0, sizeof *r);
    r->enabled = 1;
    yaml_node_t *pattern = NULL, *conds = NULL, *opts = NULL, *fop = NULL;
    for (yaml_node_pair_t *kv = m->data.mapping.pairs.start; kv < m->data.mapping.pairs.top; kv++) {
        yaml_node_t *k = node(p, kv->key), *v = node(p, kv->value);
        const char *key = scalar(k);
        if (!key) return perr(p, k, "rule: expected a key");
        if (!strcmp(key, "name")) LOOM_TRY(get_name(p, v, "rule name", r->name, sizeof r->name));
        else if (!strcmp(key, "fused_op")) fop = v;
        else if (!strcmp(key, "enabled")) LOOM_TRY(get_bool(p, v, "enabled", &r->enabled));
        else if (!strcmp(key, "pattern")) pattern = v;
        else if (!strcmp(key, "conditions")) conds = v;
        else if (!strcmp(key, "options")) opts = v;
        else return perr(p, k, "rule: unknown key '%s' (expected name, fused_op, enabled, pattern, "
                               "conditions, options)", key);
    }
    if (!r->name[0]) return perr(p, m, "rule: 'name' is required");
    for (int i = 0; i < rs->n_rules; i++)
        if (!strcmp(rs->rules[i].name, r->name)) return perr(p, m, "rule '%s' is defined twice", r->name);
    if (!fop) return perr(p, m, "rule '%s': 'fused_op' is required", r->name);
    LOOM_TRY(get_name(p, fop, "fused_op", r->fused_op, sizeof r->fused_op));
    if (!(r->builder = fr_builder_find(r->fused_op))) {
        char names[256];
        fr_builder_names(names, sizeof names);
        return perr(p, fop, "rule '%s': unknown fused op '%s' (expected one of: %s)", r->name, r->fused_op, names);
    }
    if (!pattern) return perr(p, m, "rule '%s': 'pattern' is required", r->name);
    LOOM_TRY(parse_pattern(p, r, pattern));
    LOOM_TRY(check_builder_names(p, r, pattern));
    LOOM_TRY(check_roles(p, r, pattern));
    if (conds) LOOM_TRY(parse_conditions(p, r, conds));
    if (opts) {
        LOOM_TRY(want(p, opts, YAML_MAPPING_NODE, "options"));
        for (yaml_node_pair_t *kv = opts->data.mapping.pairs.start; kv < opts->data.mapping.pairs.top; kv++)
            LOOM_TRY(set_option(p, r, node(p, kv->key), node(p, kv->value)));
    }
    rs->n_rules++;
    return LOOM_OK;
}

/* ------------------------------------------------------------ sections */

static loom_status parse_hw(pctx *p, yaml_node_t *m) {
    static const char *const keys[5] = {"l1", "l2", "l3", "threads", "isa"};
    unsigned seen = 0;
    LOOM_TRY(want(p, m, YAML_MAPPING_NODE, "hardware"));
    for (yaml_node_pair_t *kv = m->data.mapping.pairs.start; kv < m->data.mapping.pairs.top; kv++) {
        yaml_node_t *k = node(p, kv->key), *v = node(p, kv->value);
        const char *key = scalar(k);
        int64_t val;
        int is_auto, ki = 0;
        while (ki < 5 && (!key || strcmp(key, keys[ki]))) ki++;
        if (ki == 5)
            return perr(p, k, "hardware: unknown key '%s' (expected l1, l2, l3, threads, isa)", key ? key : "?");
        if (seen >> ki & 1u) return perr(p, k, "hardware: '%s' given twice", key); /* (YAML keeps both) */
        seen |= 1u << ki;
        if (ki == 4) { /* the level the defaults are chosen for */
            const char *name = scalar(v);
            loom_isa level;
            if (name && !strcmp(name, "auto")) p->r->isa_key = 0;
            else if (name && loom_isa_parse(name, &level) == LOOM_OK) p->r->isa_key = (int)level + 1;
            else
                return perr(p, v, "hardware: isa: expected auto, ref, generic, avx2 or avx512, found '%s'",
                            name ? name : "(not a scalar)");
            continue;
        }
        LOOM_TRY(get_int(p, v, key, 1, (int64_t)1 << 40, 1, &val, &is_auto));
        if (!strcmp(key, "l1")) p->r->hw.l1_bytes = val;
        else if (!strcmp(key, "l2")) p->r->hw.l2_bytes = val;
        else if (!strcmp(key, "l3")) p->r->hw.l3_bytes = val;
        else if (val > 1024) return perr(p, v, "threads: expected 1..1024 or auto");
        else p->r->hw.threads = (int)val;
    }
    return LOOM_OK;
}

static loom_status parse_checkpoints(pctx *p, yaml_node_t *m) {
    LOOM_TRY(want(p, m, YAML_MAPPING_NODE, "checkpoints"));
    for (yaml_node_pair_t *kv = m->data.mapping.pairs.start; kv < m->data.mapping.pairs.top; kv++) {
        yaml_node_t *k = node(p, kv->key), *v = node(p, kv->value);
        const char *key = scalar(k), *s = scalar(v);
        if (key && !strcmp(key, "at")) {
            LOOM_TRY(want(p, v, YAML_SEQUENCE_NODE, "checkpoints.at"));
            p->r->ckpt_layers = p->r->ckpt_logits = 0;
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
                yaml_node_t *e = node(p, *it);
                const char *w = scalar(e);
                if (w && !strcmp(w, "layer_output")) p->r->ckpt_layers = 1;
                else if (w && !strcmp(w, "logits")) p->r->ckpt_logits = 1;
                else return perr(p, e, "checkpoints.at: unknown checkpoint '%s' (expected layer_output, logits)", w ? w : "?");
            }
        } else if (key && !strcmp(key, "tolerance")) {
            char *end;
            double t = s ? strtod(s, &end) : -1.0;
            if (!s || *end || !(t > 0.0 && t < 1.0)) return perr(p, v, "tolerance: expected a number in (0, 1)");
            p->r->ckpt_tol = t;
        } else if (key && !strcmp(key, "action")) {
            if (s && !strcmp(s, "warn")) p->r->ckpt_action = LOOM_CHECKPOINT_WARN;
            else if (s && !strcmp(s, "fail")) p->r->ckpt_action = LOOM_CHECKPOINT_FAIL;
            else return perr(p, v, "action: expected warn or fail");
        } else {
            return perr(p, k, "checkpoints: unknown key '%s' (expected at, tolerance, action)", key ? key : "?");
        }
    }
    return LOOM_OK;
}

static int rule_index(const loom_fusion_rules *r, const char *name) {
    for (int i = 0; i < r->n_rules; i++)
        if (!strcmp(r->rules[i].name, name)) return i;
    return -1;
}

static loom_status parse_presets(pctx *p, yaml_node_t *m) {
    LOOM_TRY(want(p, m, YAML_MAPPING_NODE, "presets"));
    for (yaml_node_pair_t *kv = m->data.mapping.pairs.start; kv < m->data.mapping.pairs.top; kv++) {
        yaml_node_t *k = node(p, kv->key), *v = node(p, kv->value);
        if (p->r->n_presets == FR_MAX_PRESETS) return perr(p, k, "presets: at most %d", FR_MAX_PRESETS);
        fr_preset *ps = &p->r->presets[p->r->n_presets];
        memset(ps, 0, sizeof *ps);
        LOOM_TRY(get_name(p, k, "preset name", ps->name, sizeof ps->name));
        LOOM_TRY(want(p, v, YAML_MAPPING_NODE, "preset"));
        for (yaml_node_pair_t *rk = v->data.mapping.pairs.start; rk < v->data.mapping.pairs.top; rk++) {
            yaml_node_t *rn = node(p, rk->key), *ro = node(p, rk->value);
            const char *rname = scalar(rn);
            int ri = rname ? rule_index(p->r, rname) : -1;
            if (ri < 0) return perr(p, rn, "preset '%s': unknown rule '%s'", ps->name, rname ? rname : "?");
            LOOM_TRY(want(p, ro, YAML_MAPPING_NODE, "preset rule options"));
            for (yaml_node_pair_t *o = ro->data.mapping.pairs.start; o < ro->data.mapping.pairs.top; o++) {
                yaml_node_t *ok = node(p, o->key), *ov = node(p, o->value);
                const char *key = scalar(ok);
                if (ps->n == (int)(sizeof ps->o / sizeof ps->o[0])) return perr(p, ok, "preset: too many overrides");
                ps->o[ps->n].rule = ri;
                if (key && !strcmp(key, "enabled")) {
                    ps->o[ps->n].is_enabled = 1;
                    int b;
                    LOOM_TRY(get_bool(p, ov, "enabled", &b));
                    ps->o[ps->n].value = b;
                } else {
                    LOOM_TRY(option_key(p, &p->r->rules[ri], ok, &key));
                    snprintf(ps->o[ps->n].key, FR_NAME, "%s", key);
                    LOOM_TRY(get_int(p, ov, key, 0, INT32_MAX, 1, &ps->o[ps->n].value, &ps->o[ps->n].is_auto));
                }
                ps->n++;
            }
        }
        p->r->n_presets++;
    }
    return LOOM_OK;
}

static loom_status parse_root(pctx *p) {
    yaml_node_t *root = yaml_document_get_root_node(&p->doc);
    if (!root) return perr(p, NULL, "empty rules file: expected a mapping with 'rules'");
    LOOM_TRY(want(p, root, YAML_MAPPING_NODE, "rules file"));
    yaml_node_t *presets = NULL;
    int have_rules = 0;
    for (yaml_node_pair_t *kv = root->data.mapping.pairs.start; kv < root->data.mapping.pairs.top; kv++) {
        yaml_node_t *k = node(p, kv->key), *v = node(p, kv->value);
        const char *key = scalar(k);
        if (!key) return perr(p, k, "expected a key");
        if (!strcmp(key, "version")) {
            int64_t ver;
            LOOM_TRY(get_int(p, v, "version", 1, 1, 0, &ver, NULL));
        } else if (!strcmp(key, "mode")) {
            loom_exec_mode md;
            if (!scalar(v) || loom_mode_parse(scalar(v), &md) != LOOM_OK)
                return perr(p, v, "mode: expected step_by_step, fused or fused_with_checkpoints");
            p->r->mode = (int)md;
        } else if (!strcmp(key, "act_precision")) {
            if (!scalar(v) || loom_act_precision_parse(scalar(v), &p->r->act_precision) != LOOM_OK)
                return perr(p, v, "act_precision: expected q8 or full, found '%s'", scalar(v) ? scalar(v) : "?");
        } else if (!strcmp(key, "activation_dtype")) {
            const char *d = scalar(v);
            if (d && !strcmp(d, "f32")) p->r->act_dtype = LOOM_F32;
            else if (d && !strcmp(d, "f16")) p->r->act_dtype = LOOM_F16;
            else if (d && !strcmp(d, "bf16")) p->r->act_dtype = LOOM_BF16;
            else return perr(p, v, "activation_dtype: expected f32, f16 or bf16, found '%s'", d ? d : "?");
        } else if (!strcmp(key, "hardware")) {
            LOOM_TRY(parse_hw(p, v));
        } else if (!strcmp(key, "checkpoints")) {
            LOOM_TRY(parse_checkpoints(p, v));
        } else if (!strcmp(key, "max_fusion_block_size")) {
            int is_auto;
            LOOM_TRY(get_int(p, v, key, 1, INT32_MAX, 1, &p->r->max_fusion_block_size, &is_auto));
        } else if (!strcmp(key, "rules")) {
            LOOM_TRY(want(p, v, YAML_SEQUENCE_NODE, "rules"));
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++)
                LOOM_TRY(parse_rule(p, node(p, *it)));
            have_rules = 1;
        } else if (!strcmp(key, "presets")) {
            presets = v;  /* after the rules, which presets name */
        } else {
            return perr(p, k, "unknown key '%s' (expected version, mode, act_precision, activation_dtype, "
                              "hardware, checkpoints, max_fusion_block_size, rules, presets)", key);
        }
    }
    if (!have_rules) return perr(p, root, "expected a 'rules' list");
    if (presets) LOOM_TRY(parse_presets(p, presets));
    return LOOM_OK;
}

loom_status loom_fusion_rules_parse(const char *text, size_t len, const char *filename,
                                    loom_fusion_rules **out) {
    LOOM_RETURN_IF(!out || (!text && len), LOOM_ERR_INVALID_ARG, "fusion_rules_parse: NULL argument");
    *out = NULL;
    loom_fusion_rules *r = calloc(1, sizeof *r);
    LOOM_RETURN_IF(!r, LOOM_ERR_NOMEM, "fusion rules: out of memory");
    r->mode = -1;
    r->ckpt_tol = 1.0 / 2048.0;
    r->ckpt_layers = r->ckpt_logits = 1;
    pctx p = {.file = filename ? filename : "<rules>", .r = r};
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        free(r);
        return loom_set_error(LOOM_ERR_NOMEM, "fusion rules: cannot start the YAML parser");
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)(text ? text : ""), len);
    loom_status s;
    if (!yaml_parser_load(&parser, &p.doc)) {
        const yaml_mark_t *mk = parser.problem ? &parser.problem_mark : &parser.context_mark;
        s = loom_set_error(LOOM_ERR_FORMAT, "%s:%zu:%zu: YAML syntax error: %s%s%s", p.file, mk->line + 1,
                           mk->column + 1, parser.problem ? parser.problem : "malformed document",
                           parser.context ? " " : "", parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        free(r);
        return s;
    }
    s = parse_root(&p);
    yaml_document_delete(&p.doc);
    yaml_parser_delete(&parser);
    if (s != LOOM_OK) {
        free(r);
        return s;
    }
    *out = r;
    return LOOM_OK;
}

loom_status loom_fusion_rules_load(const char *path, loom_fusion_rules **out) {
    if (!path)
        return loom_fusion_rules_parse(loom_fusion_default_yaml, strlen(loom_fusion_default_yaml),
                                       "default.yaml (built in)", out);
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "fusion_rules_load: NULL argument");
    char *buf;
    size_t n;
    LOOM_TRY(loom_read_file(path, (size_t)64 << 20, &buf, &n));
    loom_status s = loom_fusion_rules_parse(buf, n, path, out);
    free(buf);
    return s;
}

loom_status loom_fusion_rules_preset(loom_fusion_rules *r, const char *preset) {
    LOOM_RETURN_IF(!r || !preset, LOOM_ERR_INVALID_ARG, "fusion_rules_preset: NULL argument");
    for (int i = 0; i < r->n_presets; i++) {
        const fr_preset *ps = &r->presets[i];
        if (strcmp(ps->name, preset)) continue;
        r->version++; /* fusion memos of the old settings no longer apply */
        for (int k = 0; k < ps->n; k++) {
            fr_rule *rule = &r->rules[ps->o[k].rule];
            if (ps->o[k].is_enabled) {
                rule->enabled = (int)ps->o[k].value;
                continue;
            }
            fr_option *o = opt_slot(rule, ps->o[k].key);
            if (!o) continue;
            o->value = ps->o[k].value;
            o->is_auto = ps->o[k].is_auto;
        }
        return LOOM_OK;
    }
    char names[256] = "";
    for (int i = 0; i < r->n_presets; i++) {
        size_t l = strlen(names);
        snprintf(names + l, sizeof names - l, "%s%s", i ? ", " : "", r->presets[i].name);
    }
    return loom_set_error(LOOM_ERR_INVALID_ARG, "unknown fusion preset '%s' (expected one of: %s)", preset,
                          names[0] ? names : "none defined");
}

void loom_fusion_rules_free(loom_fusion_rules *r) { free(r); }

loom_status loom_fusion_rules_enable(loom_fusion_rules *r, const char *rule, int enabled) {
    int i = r && rule ? rule_index(r, rule) : -1;
    LOOM_RETURN_IF(i < 0, LOOM_ERR_INVALID_ARG, "no fusion rule named '%s'", rule ? rule : "(null)");
    r->rules[i].enabled = enabled != 0;
    r->version++;
    return LOOM_OK;
}

int loom_fusion_rules_count(const loom_fusion_rules *r) { return r ? r->n_rules : 0; }

loom_fusion_hw loom_fusion_rules_hw(const loom_fusion_rules *r) {
    loom_fusion_hw hw = r ? r->hw : (loom_fusion_hw){0};
    const loom_cpu_features *f = loom_cpu_get();
    if (hw.l1_bytes <= 0) hw.l1_bytes = f->l1d_bytes > 0 ? f->l1d_bytes : 32 << 10;
    if (hw.l2_bytes <= 0) hw.l2_bytes = f->l2_bytes > 0 ? f->l2_bytes : 1 << 20;
    if (hw.l3_bytes <= 0) hw.l3_bytes = f->l3_bytes > 0 ? f->l3_bytes : 8 << 20;
    if (hw.threads <= 0) {
        /* sysconf reads /sys: once per process, not once per fusion pass */
        static _Atomic int online;
        int n = online;
        if (n <= 0) {
            long v = sysconf(_SC_NPROCESSORS_ONLN);
            online = n = v > 0 && v < 1024 ? (int)v : 1;
        }
        hw.threads = n;
    }
    hw.isa = r && r->isa_key > 0 ? r->isa_key - 1 : (int)loom_cpu_isa();
    return hw;
}

int loom_fusion_rules_mode(const loom_fusion_rules *r) { return r ? r->mode : -1; }
loom_act_precision loom_fusion_rules_act_precision(const loom_fusion_rules *r) {
    return r ? r->act_precision : LOOM_ACT_PREC_DEFAULT;
}
double loom_fusion_rules_checkpoint_tol(const loom_fusion_rules *r) { return r ? r->ckpt_tol : 1.0 / 2048.0; }
loom_dtype loom_fusion_rules_activation_dtype(const loom_fusion_rules *r) { return r ? r->act_dtype : LOOM_F32; }
loom_checkpoint_action loom_fusion_rules_checkpoint_action(const loom_fusion_rules *r) {
    return r ? r->ckpt_action : LOOM_CHECKPOINT_WARN;
}

int loom_fusion_rules_checkpoints(const loom_fusion_rules *r, int *layers, int *logits);
int loom_fusion_rules_checkpoints(const loom_fusion_rules *r, int *layers, int *logits) {
    *layers = r ? r->ckpt_layers : 1;
    *logits = r ? r->ckpt_logits : 1;
    return 0;
}
