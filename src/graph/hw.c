/* Hardware profiles: YAML parsing (libyaml document API) and the roofline. */
#include "graph/hw.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "base/file.h"
#include "base/status.h"

static const char *const prec_names[LOOM_HW_PREC_COUNT] = {"f32", "f16", "bf16", "int8"};

const char *loom_hw_prec_name(loom_hw_prec p) {
    return (unsigned)p < LOOM_HW_PREC_COUNT ? prec_names[p] : "?";
}

/* Position of a node for messages (libyaml counts from 0). */
#define AT(n) file, (int)(n)->start_mark.line + 1, (int)(n)->start_mark.column + 1

typedef struct parse_ctx {
    yaml_document_t *doc;
    const char *file;
    int auto_seen;
} parse_ctx;

static int is_auto(const yaml_node_t *n) {
    return n->type == YAML_SCALAR_NODE && strcmp((const char *)n->data.scalar.value, "auto") == 0;
}

/* What a value may be: a given value lies in [lo, hi] (0 too when zero_ok);
 * the ranges hold anything from a microcontroller to a rack and reject what
 * would make the roofline divide by almost nothing (1e-300 B/s) or overflow. */
typedef struct range { double lo, hi; int zero_ok; const char *unit; } range;
static const range R_FLOPS = {1e6, 1e19, 1, "FLOP/s"};      /* 0 = not given */
static const range R_BANDWIDTH = {1e6, 1e16, 0, "bytes/s"};
static const range R_CACHE = {256, 1099511627776.0, 1, "bytes"};  /* 0 = none / unknown */
static const range R_CORES = {1, 1e6, 0, "cores"};

/* A number with an optional suffix: k M G T P (powers of 1000) or Ki Mi Gi Ti
 * (powers of 1024), e.g. 4.8e12, 4.8T, 50Mi, within r. auto gives 0 and sets
 * auto_seen. */
static loom_status number(parse_ctx *c, const yaml_node_t *n, const char *key, const range *r, double *out) {
    const char *file = c->file;
    if (n->type != YAML_SCALAR_NODE)
        return loom_set_error(LOOM_ERR_FORMAT, "%s:%d:%d: %s: expected a number or auto", AT(n), key);
    if (is_auto(n)) {
        c->auto_seen = 1;
        *out = 0.0;
        return LOOM_OK;
    }
    const char *s = (const char *)n->data.scalar.value;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno) goto bad;
    static const struct { const char *sfx; double mul; } units[] = {
        {"", 1.0}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15},
        {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].sfx) == 0) {
            v *= units[i].mul;
            if (!isfinite(v) || v < 0.0) goto bad;
            if (!(v == 0.0 && r->zero_ok) && (v < r->lo || v > r->hi))
                return loom_set_error(LOOM_ERR_FORMAT, "%s:%d:%d: %s: %s = %g %s is out of range: expected "
                                      "%g..%g%s or auto", AT(n), key, s, v, r->unit, r->lo, r->hi,
                                      r->zero_ok ? " (0: not given)" : "");
            *out = v;
            return LOOM_OK;
        }
bad:
    return loom_set_error(LOOM_ERR_FORMAT,
                          "%s:%d:%d: %s: bad value '%s': expected a non-negative number "
                          "(optional suffix k, M, G, T, P, Ki, Mi, Gi, Ti) or auto",
                          AT(n), key, s);
}

static loom_status string(parse_ctx *c, const yaml_node_t *n, const char *key, char *dst,
                          size_t cap) {
    const char *file = c->file;
    if (n->type != YAML_SCALAR_NODE)
        return loom_set_error(LOOM_ERR_FORMAT, "%s:%d:%d: %s: expected a string", AT(n), key);
    snprintf(dst, cap, "%s", (const char *)n->data.scalar.value);
    return LOOM_OK;
}

/* Fields of a mapping given as a table: key, the double it fills, its range. */
typedef struct field { const char *key; double *dst; const range *r; } field;

static loom_status sub_mapping(parse_ctx *c, const yaml_node_t *n, const char *what,
                               const field *fields, int n_fields) {
    const char *file = c->file;
    if (is_auto(n)) {
        c->auto_seen = 1;
        return LOOM_OK;
    }
    if (n->type != YAML_MAPPING_NODE)
        return loom_set_error(LOOM_ERR_FORMAT, "%s:%d:%d: %s: expected a mapping or auto", AT(n), what);
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(c->doc, p->value);
        if (k->type != YAML_SCALAR_NODE)
            return loom_set_error(LOOM_ERR_FORMAT, "%s:%d:%d: %s: expected a scalar key", AT(k), what);
        const char *key = (const char *)k->data.scalar.value;
        int i = 0;
        while (i < n_fields && strcmp(fields[i].key, key) != 0) i++;
        if (i == n_fields) {
            char list[128] = "";
            for (int j = 0; j < n_fields; j++) {
                size_t len = strlen(list);
                snprintf(list + len, sizeof list - len, "%s%s", j ? ", " : "", fields[j].key);
            }
            return loom_set_error(LOOM_ERR_FORMAT, "%s:%d:%d: %s: unknown key '%s' (expected %s)",
                                  AT(k), what, key, list);
        }
        LOOM_TRY(number(c, v, key, fields[i].r, fields[i].dst));
    }
    return LOOM_OK;
}

static loom_status top_level(parse_ctx *c, const yaml_node_t *root, loom_hw_profile *o) {
    const char *file = c->file;
    if (root->type != YAML_MAPPING_NODE)
        return loom_set_error(LOOM_ERR_FORMAT, "%s:%d:%d: expected a mapping of profile keys", AT(root));
    field peaks[LOOM_HW_PREC_COUNT];
    for (int i = 0; i < LOOM_HW_PREC_COUNT; i++) peaks[i] = (field){prec_names[i], &o->peak_flops[i], &R_FLOPS};
    field caches[3] = {{"l1", &o->l1_bytes, &R_CACHE}, {"l2", &o->l2_bytes, &R_CACHE}, {"l3", &o->l3_bytes, &R_CACHE}};
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(c->doc, p->value);
        if (k->type != YAML_SCALAR_NODE)
            return loom_set_error(LOOM_ERR_FORMAT, "%s:%d:%d: expected a scalar key", AT(k));
        const char *key = (const char *)k->data.scalar.value;
        if (strcmp(key, "name") == 0) {
            LOOM_TRY(string(c, v, key, o->name, sizeof o->name));
        } else if (strcmp(key, "description") == 0) {
            LOOM_TRY(string(c, v, key, o->description, sizeof o->description));
        } else if (strcmp(key, "peak_flops") == 0) {
            LOOM_TRY(sub_mapping(c, v, "peak_flops", peaks, LOOM_HW_PREC_COUNT));
        } else if (strcmp(key, "cache") == 0) {
            LOOM_TRY(sub_mapping(c, v, "cache", caches, 3));
        } else if (strcmp(key, "vector_flops") == 0) {
            LOOM_TRY(number(c, v, key, &R_FLOPS, &o->vector_flops));
        } else if (strcmp(key, "bandwidth") == 0) {
            LOOM_TRY(number(c, v, key, &R_BANDWIDTH, &o->bandwidth));
        } else if (strcmp(key, "cores") == 0) {
            double d;
            LOOM_TRY(number(c, v, key, &R_CORES, &d));
            if (d != floor(d))
                return loom_set_error(LOOM_ERR_FORMAT, "%s:%d:%d: cores: bad value '%s': expected an "
                                      "integer or auto", AT(v), (const char *)v->data.scalar.value);
            o->cores = (int)d;
        } else {
            return loom_set_error(LOOM_ERR_FORMAT,
                                  "%s:%d:%d: unknown key '%s' (expected name, description, "
                                  "peak_flops, vector_flops, bandwidth, cache, cores)", AT(k), key);
        }
    }
    return LOOM_OK;
}

loom_status loom_hw_parse(const char *text, size_t len, const char *file, int measure,
                          loom_hw_profile *out) {
    LOOM_RETURN_IF(!text || !out, LOOM_ERR_INVALID_ARG, "hw profile: NULL argument");
    if (!file) file = "(hw profile)";
    memset(out, 0, sizeof *out);
    yaml_parser_t parser;
    yaml_document_t doc;
    LOOM_RETURN_IF(!yaml_parser_initialize(&parser), LOOM_ERR_NOMEM, "%s: out of memory", file);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        loom_status s = loom_set_error(LOOM_ERR_FORMAT, "%s:%d:%d: YAML syntax error: %s", file,
                                       (int)parser.problem_mark.line + 1,
                                       (int)parser.problem_mark.column + 1,
                                       parser.problem ? parser.problem : "unknown");
        yaml_parser_delete(&parser);
        return s;
    }
    parse_ctx c = {.doc = &doc, .file = file};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    loom_status s = root ? top_level(&c, root, out)
                         : loom_set_error(LOOM_ERR_FORMAT, "%s:1:1: empty hardware profile", file);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (s != LOOM_OK) return s;
    if (!out->name[0]) snprintf(out->name, sizeof out->name, "%s", file);
    if (c.auto_seen && measure) {
        LOOM_TRY(loom_hw_measure_cpu(out));
        out->measured = 1;
    }
    if (!c.auto_seen || measure) {
        int any_peak = out->vector_flops > 0;
        for (int i = 0; i < LOOM_HW_PREC_COUNT; i++) any_peak |= out->peak_flops[i] > 0;
        LOOM_RETURN_IF(out->bandwidth <= 0, LOOM_ERR_FORMAT,
                       "%s: bandwidth missing or 0: expected bytes/s (e.g. 4.8e12) or auto", file);
        LOOM_RETURN_IF(!any_peak, LOOM_ERR_FORMAT,
                       "%s: no peak given: expected peak_flops (f32, f16, bf16, int8) or vector_flops",
                       file);
    }
    return LOOM_OK;
}

loom_status loom_hw_load(const char *name, int measure, loom_hw_profile *out) {
    LOOM_RETURN_IF(!name || !out, LOOM_ERR_INVALID_ARG, "hw profile: NULL argument");
    const char *text = loom_hw_builtin(name);
    if (text) {
        char file[96];
        snprintf(file, sizeof file, "configs/hw/%s.yaml (built in)", name);
        return loom_hw_parse(text, strlen(text), file, measure, out);
    }
    struct stat sb;
    if (stat(name, &sb) != 0) {
        char known[128] = "";
        for (const char *const *n = loom_hw_builtin_names(); *n; n++) {
            size_t len = strlen(known);
            snprintf(known + len, sizeof known - len, "%s%s", known[0] ? ", " : "", *n);
        }
        return loom_set_error(LOOM_ERR_IO, "hw profile '%s': not a built-in profile (%s) and "
                              "cannot open it as a file: %s", name, known, strerror(errno));
    }
    char *buf;
    size_t len;
    loom_status s = loom_read_file(name, (size_t)64 << 10, &buf, &len); /* larger is not a profile */
    if (s == LOOM_OK) s = loom_hw_parse(buf, len, name, measure, out);
    free(buf);
    return s;
}

double loom_hw_time(const loom_hw_profile *p, int matrix, loom_hw_prec prec, double flops,
                    double bytes) {
    double peak = p->vector_flops;
    if (matrix) {
        double m = (unsigned)prec < LOOM_HW_PREC_COUNT ? p->peak_flops[prec] : 0.0;
        if (m <= 0) m = p->peak_flops[LOOM_HW_F16];
        if (m <= 0) m = p->peak_flops[LOOM_HW_F32];
        if (m > 0) peak = m;
    }
    if (peak <= 0) peak = p->peak_flops[LOOM_HW_F32];
    double tc = peak > 0 ? flops / peak : 0.0;
    double tm = p->bandwidth > 0 ? bytes / p->bandwidth : 0.0;
    return tc > tm ? tc : tm;
}
