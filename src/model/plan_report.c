/* Plan reports (loom.h, loom plan): a configuration, a hardware profile and
 * the planned passes (model/planner.h) per mode, printed as tables or JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/status.h"
#include "graph/exec.h"
#include "graph/hw.h"
#include "graph/profile.h"
#include "model/configs.h"
#include "model/planner.h"

typedef struct plan_mode {
    const char *name;       /* "step_by_step" or "fused" */
    loom_graph *g;
    loom_plan_info info;
    loom_profile prof;
} plan_mode;

struct loom_plan_report {
    const loom_named_config *nc;  /* built in, or fc.nc */
    loom_file_config fc;          /* a configuration read from a file (nc points into it) */
    loom_hw_profile hw;
    int hw_set;
    loom_plan_params p;           /* of the last run */
    plan_mode modes[2];
    int n_modes;
};

static void clear_modes(loom_plan_report *r) {
    for (int m = 0; m < 2; m++) {
        loom_profile_free(&r->modes[m].prof);
        loom_graph_free(r->modes[m].g);
    }
    memset(r->modes, 0, sizeof r->modes);
    r->n_modes = 0;
}

loom_plan_report_params loom_plan_report_default_params(void) {
    loom_plan_report_params p = {.batch = 1, .seq = 0, .decode = 0, .kv_dtype = LOOM_F16, .wtype = LOOM_F16,
                                 .step_by_step = 1, .fused = loom_plan_have_fusion()};
    return p;
}

loom_status loom_plan_report_init(const char *config, loom_plan_report **out) {
    LOOM_RETURN_IF(!config || !out, LOOM_ERR_INVALID_ARG, "plan: NULL argument");
    *out = NULL;
    loom_plan_report *r = calloc(1, sizeof *r);
    LOOM_RETURN_IF(!r, LOOM_ERR_NOMEM, "plan: out of memory");
    /* a built-in name, else a file: config.json (or its folder) or a GGUF */
    r->nc = loom_named_config_find(config);
    struct stat sb;
    if (!r->nc && stat(config, &sb) == 0) {
        loom_status s = loom_config_from_file(config, &r->fc);
        if (s != LOOM_OK) {
            free(r);
            return s;
        }
        r->nc = &r->fc.nc;
    }
    if (!r->nc) { /* the message of loom_named_config_find lists the names */
        free(r);
        return LOOM_ERR_INVALID_ARG;
    }
    *out = r;
    return LOOM_OK;
}

void loom_plan_report_free(loom_plan_report *r) {
    if (!r) return;
    clear_modes(r);
    free(r);
}

const char *loom_plan_report_config_name(const loom_plan_report *r) { return r ? r->nc->name : ""; }

const char *loom_plan_report_arch(const loom_plan_report *r) {
    return r && r->nc->arch == LOOM_ARCH_BERT ? "bert" : "llama";
}

loom_status loom_plan_report_set_hw(loom_plan_report *r, const char *hw) {
    LOOM_RETURN_IF(!r || !hw, LOOM_ERR_INVALID_ARG, "plan: NULL argument");
    LOOM_TRY(loom_hw_load(hw, 1, &r->hw));
    r->hw_set = 1;
    return LOOM_OK;
}

loom_status loom_plan_report_run(loom_plan_report *r, const loom_plan_report_params *p) {
    LOOM_RETURN_IF(!r || !p, LOOM_ERR_INVALID_ARG, "plan: NULL argument");
    LOOM_RETURN_IF(!p->step_by_step && !p->fused, LOOM_ERR_INVALID_ARG, "plan: no mode to plan");
    LOOM_RETURN_IF(p->fused && !loom_plan_have_fusion(), LOOM_ERR_UNSUPPORTED,
                   "plan: fused mode needs the fusion engine, which this build does not have");
    if (!r->hw_set) LOOM_TRY(loom_plan_report_set_hw(r, "cpu"));
    clear_modes(r);
    r->p = (loom_plan_params){.named = r->nc, .batch = p->batch, .seq = p->seq, .decode = p->decode,
                              .kv_dtype = p->kv_dtype, .wtype = p->wtype, .rules_path = p->rules_path,
                              .preset = p->preset, .act_dtype = p->act_dtype};
    if (p->step_by_step) r->modes[r->n_modes++].name = "step_by_step";
    if (p->fused) r->modes[r->n_modes++].name = "fused";
    for (int m = 0; m < r->n_modes; m++) {
        plan_mode *pm = &r->modes[m];
        r->p.fused = strcmp(pm->name, "fused") == 0;
        loom_status s = loom_graph_init(&pm->g);
        if (s == LOOM_OK) s = loom_plan_build(pm->g, &r->p, &r->hw, &pm->info);
        if (s == LOOM_OK)
            s = loom_profile_collect(pm->g, pm->info.n_layers, p->decode ? "decode" : "prefill", pm->name,
                                     pm->info.n_tokens, &pm->prof);
        if (s != LOOM_OK) {
            clear_modes(r);
            return s;
        }
    }
    return LOOM_OK;
}

int loom_plan_report_n_modes(const loom_plan_report *r) { return r ? r->n_modes : 0; }

const loom_profile *loom_plan_report_profile(const loom_plan_report *r, int i) {
    return r && i >= 0 && i < r->n_modes ? &r->modes[i].prof : NULL;
}

int loom_plan_report_uncosted(const loom_plan_report *r, int i) {
    return r && i >= 0 && i < r->n_modes ? r->modes[i].info.uncosted : 0;
}

/* The layer the tables show: layer 1 when there is one (in a fused graph
 * layer 0 differs: nothing precedes its first rms_norm, while the norm of
 * every later layer fuses with the previous layer's residual add). */
static int rep_layer(const plan_mode *m) { return m->info.n_layers > 1 ? 1 : 0; }
static const loom_profile_section *layer0(const plan_mode *m) {
    return &m->prof.sections[1 + rep_layer(m)];
}

static int layers_identical(const plan_mode *m) {
    for (int l = 1; l <= m->info.n_layers; l++) {
        const loom_profile_section *a = layer0(m), *b = &m->prof.sections[l];
        if (a->kernels != b->kernels || a->bytes_read != b->bytes_read || a->flops != b->flops ||
            strcmp(a->chain ? a->chain : "", b->chain ? b->chain : "") != 0)
            return 0;
    }
    return 1;
}

static void print_kernels(FILE *f, const plan_mode *m, const loom_plan_params *p, const loom_hw_profile *hw) {
    fprintf(f, "\nkernels of layer %d, %s:\n", rep_layer(m), m->name);
    fprintf(f, "  %-38s %-6s %10s %10s %10s %8s %-7s %10s\n", "kernel", "prec", "MB read", "MB written",
               "GFLOP", "FLOP/B", "bound", "est. us");
    const loom_graph *g = m->g;
    for (int n = 0; n < g->n_nodes; n++) {
        if (g->nodes[n].layer != rep_layer(m)) continue;
        loom_plan_node_cost c;
        loom_plan_node(g, n, &m->info, hw, &c);
        double bytes = c.bytes_read + c.bytes_written;
        char label[64];
        snprintf(label, sizeof label, "%s", g->tensors[g->nodes[n].dst].t.name);
        /* "L0.q" -> "q" (Llama), "q_bias.0" -> "q_bias" (BERT) */
        char *lbl = label;
        if (label[0] == 'L' && strchr(label, '.')) lbl = strchr(label, '.') + 1;
        char *dot = strrchr(lbl, '.');
        if (dot && dot[1] >= '0' && dot[1] <= '9') *dot = '\0';
        char name[96];
        snprintf(name, sizeof name, "%s(%s)", loom_op_get(g->nodes[n].op)->name, lbl);
        fprintf(f, "  %-38s %-6s %10.3f %10.3f %10.4f %8.1f %-7s %10.2f\n", name,
                   c.matrix ? loom_hw_prec_name(c.prec) : "vector", c.bytes_read / 1e6,
                   c.bytes_written / 1e6, c.flops / 1e9, bytes > 0 ? c.flops / bytes : 0.0,
                   c.compute_bound ? "compute" : "memory", c.seconds * 1e6);
    }
}

static void print_table(FILE *f, const plan_mode *modes, int n_modes, const loom_plan_params *p,
                        const loom_hw_profile *hw) {
    const loom_plan_info *in = &modes[0].info;
    const loom_named_config *nc = in->config;
    fprintf(f, "%s: %d layers, dim %d, ffn %d, %d heads (%d kv), vocab %d  [%s]\n", nc->name,
               nc->cfg.n_layers, nc->cfg.dim, nc->cfg.hidden_dim, nc->cfg.n_heads, nc->cfg.n_kv_heads,
               nc->cfg.vocab_size, nc->source);
    if (p->decode)
        fprintf(f, "decode: batch %d, 1 new token per sequence after %d cached (q_len 1)", p->batch, p->seq);
    else
        fprintf(f, "prefill: batch %d x %d tokens", p->batch, p->seq);
    if (nc->arch == LOOM_ARCH_BERT)
        fprintf(f, "; weights %s (encoder: no KV cache)", loom_dtype_name(p->wtype));
    else
        fprintf(f, "; weights %s, KV cache %s", loom_dtype_name(p->wtype),
                   p->kv_dtype == LOOM_I8 ? "int8" : loom_dtype_name(p->kv_dtype));
    if (p->act_dtype != LOOM_F32)
        fprintf(f, "; activations %s between kernels (modelled; loom's kernels exchange f32 but for q under "
                   "the rules' activation_dtype)",
                loom_dtype_name(p->act_dtype));
    fprintf(f, "\n");
    fprintf(f, "hardware %s: %s\n  peak TFLOP/s f32 %.1f, f16 %.1f, bf16 %.1f, int8 %.1f, vector %.1f; "
               "bandwidth %.1f GB/s%s\n", hw->name, hw->description, hw->peak_flops[0] / 1e12,
               hw->peak_flops[1] / 1e12, hw->peak_flops[2] / 1e12, hw->peak_flops[3] / 1e12,
               hw->vector_flops / 1e12, hw->bandwidth / 1e9, hw->measured ? " (measured)" : "");

    fprintf(f, "\n%-26s", "per layer");
    for (int m = 0; m < n_modes; m++) fprintf(f, " %14s", modes[m].name);
    fprintf(f, "\n");
#define ROW(label, fmt, expr)                                  \
    do {                                                       \
        fprintf(f, "%-26s", label);                            \
        for (int m = 0; m < n_modes; m++) {                    \
            const loom_profile_section *s = layer0(&modes[m]); \
            fprintf(f, " %14" fmt, expr);                      \
        }                                                      \
        fprintf(f, "\n");                                      \
    } while (0)
    ROW("kernels", "d", s->kernels);
    ROW("MB read", ".3f", s->bytes_read / 1e6);
    ROW("MB written", ".3f", s->bytes_written / 1e6);
    ROW("MB traffic", ".3f", (s->bytes_read + s->bytes_written) / 1e6);
    ROW("GFLOP", ".4f", s->flops / 1e9);
    ROW("est. time (ms)", ".4f", s->time_ns / 1e6);
#undef ROW
    fprintf(f, "\n%-26s", "whole pass");
    for (int m = 0; m < n_modes; m++) fprintf(f, " %14s", modes[m].name);
    fprintf(f, "\n");
    const char *rows[] = {"kernels", "GB traffic", "GFLOP", "est. time (ms)", "intermediates MB"};
    for (int r = 0; r < 5; r++) {
        /* the arena holds what loom's kernels exchange: the graph's dtypes (f32 but for q under the
         * rules' activation_dtype) whatever --act-dtype models */
        fprintf(f, "%-26s", r == 4 && p->act_dtype != LOOM_F32 ? "intermediates MB (f32)" : rows[r]);
        for (int m = 0; m < n_modes; m++) {
            const loom_profile_section *t = &modes[m].prof.total;
            if (r == 0) fprintf(f, " %14d", t->kernels);
            if (r == 1) fprintf(f, " %14.3f", (t->bytes_read + t->bytes_written) / 1e9);
            if (r == 2) fprintf(f, " %14.2f", t->flops / 1e9);
            if (r == 3) fprintf(f, " %14.3f", t->time_ns / 1e6);
            if (r == 4) fprintf(f, " %14.3f", (double)modes[m].prof.arena_bytes / 1e6);
        }
        fprintf(f, "\n");
    }
    if (n_modes == 2) {
        const loom_profile_section *a = layer0(&modes[0]), *b = layer0(&modes[1]);
        double ta = a->bytes_read + a->bytes_written, tb = b->bytes_read + b->bytes_written;
        fprintf(f, "\nfused vs step_by_step per layer: traffic -%.1f%%, kernels %d -> %d, est. time "
                   "-%.1f%%\n", ta > 0 ? 100.0 * (ta - tb) / ta : 0.0, a->kernels, b->kernels,
                   a->time_ns > 0 ? 100.0 * (a->time_ns - b->time_ns) / a->time_ns : 0.0);
    }
    for (int m = 0; m < n_modes; m++) {
        fprintf(f, "\nop chain per layer (%s, %s): %s\n", modes[m].name,
                   layers_identical(&modes[m]) ? "same in every layer"
                                               : rep_layer(&modes[m]) ? "layer 1; layer 0 differs"
                                                                      : "layer 0",
                   layer0(&modes[m])->chain ? layer0(&modes[m])->chain : "");
        print_kernels(f, &modes[m], p, hw);
    }
}

static void print_json(FILE *f, const plan_mode *modes, int n_modes, const loom_plan_params *p,
                       const loom_hw_profile *hw) {
    const loom_plan_info *in = &modes[0].info;
    fprintf(f, "{\"config\":");
    loom_json_str(f, in->config->name);
    fprintf(f, ",\"phase\":\"%s\",\"batch\":%d,\"seq\":%d,\"tokens\":%d,\"n_layers\":%d,\"wtype\":",
               p->decode ? "decode" : "prefill", p->batch, p->seq, in->n_tokens, in->n_layers);
    loom_json_str(f, loom_dtype_name(p->wtype));
    fprintf(f, ",\"kv_dtype\":");
    loom_json_str(f, p->kv_dtype == LOOM_I8 ? "int8" : loom_dtype_name(p->kv_dtype));
    fprintf(f, ",\"act_dtype\":");
    loom_json_str(f, loom_dtype_name(p->act_dtype));
    fprintf(f, ",\"fusion_available\":%s,\"hw\":{\"name\":", loom_plan_have_fusion() ? "true" : "false");
    loom_json_str(f, hw->name);
    fprintf(f, ",\"peak_flops\":{\"f32\":%.6g,\"f16\":%.6g,\"bf16\":%.6g,\"int8\":%.6g},"
               "\"vector_flops\":%.6g,\"bandwidth\":%.6g,\"measured\":%s}", hw->peak_flops[0],
               hw->peak_flops[1], hw->peak_flops[2], hw->peak_flops[3], hw->vector_flops, hw->bandwidth,
               hw->measured ? "true" : "false");
    fprintf(f, ",\"modes\":[");
    for (int m = 0; m < n_modes; m++) {
        const plan_mode *pm = &modes[m];
        fprintf(f, "%s{\"mode\":\"%s\",\"arena_bytes\":%zu,\"layer_index\":%d,"
                   "\"layers_identical\":%s,\"layer\":", m ? "," : "", pm->name, pm->prof.arena_bytes,
                   rep_layer(pm), layers_identical(pm) ? "true" : "false");
        loom_profile_json_section(f, layer0(pm), 0, 1);
        fprintf(f, ",\"embed\":");
        loom_profile_json_section(f, &pm->prof.sections[0], 0, 1);
        fprintf(f, ",\"head\":");
        loom_profile_json_section(f, &pm->prof.sections[pm->prof.n_sections - 1], 0, 1);
        fprintf(f, ",\"total\":");
        loom_profile_json_section(f, &pm->prof.total, 0, 1);
        fprintf(f, ",\"kernels\":[");
        int first = 1;
        for (int n = 0; n < pm->g->n_nodes; n++) {
            if (pm->g->nodes[n].layer != rep_layer(pm)) continue;
            loom_plan_node_cost c;
            loom_plan_node(pm->g, n, &pm->info, hw, &c);
            fprintf(f, "%s{\"op\":", first ? "" : ",");
            loom_json_str(f, loom_op_get(pm->g->nodes[n].op)->name);
            fprintf(f, ",\"name\":");
            loom_json_str(f, pm->g->tensors[pm->g->nodes[n].dst].t.name);
            fprintf(f, ",\"matrix\":%s,\"prec\":\"%s\",\"flops\":%.0f,\"bytes_read\":%.0f,"
                       "\"bytes_written\":%.0f,\"time_s\":%.9g,\"bound\":\"%s\"}",
                       c.matrix ? "true" : "false", loom_hw_prec_name(c.prec), c.flops, c.bytes_read,
                       c.bytes_written, c.seconds, c.compute_bound ? "compute" : "memory");
            first = 0;
        }
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
}

loom_status loom_plan_report_print(const loom_plan_report *r, FILE *f) {
    LOOM_RETURN_IF(!r || !f || r->n_modes == 0, LOOM_ERR_INVALID_ARG, "plan: nothing planned to print");
    print_table(f, r->modes, r->n_modes, &r->p, &r->hw);
    return LOOM_OK;
}

loom_status loom_plan_report_print_json(const loom_plan_report *r, FILE *f) {
    LOOM_RETURN_IF(!r || !f || r->n_modes == 0, LOOM_ERR_INVALID_ARG, "plan: nothing planned to print");
    print_json(f, r->modes, r->n_modes, &r->p, &r->hw);
    return LOOM_OK;
}

loom_status loom_plan_report_write_svg(const loom_plan_report *r, FILE *f) {
    LOOM_RETURN_IF(!r || !f || r->n_modes == 0, LOOM_ERR_INVALID_ARG, "plan: nothing planned to draw");
    const plan_mode *st = strcmp(r->modes[0].name, "step_by_step") == 0 ? &r->modes[0] : NULL;
    const plan_mode *fu = strcmp(r->modes[r->n_modes - 1].name, "fused") == 0 ? &r->modes[r->n_modes - 1] : NULL;
    loom_profile_write_svg(f, st ? &st->prof : NULL, fu ? &fu->prof : NULL);
    return LOOM_OK;
}
