/* loom plan: the per-layer kernel / traffic / roofline table of a named model
 * configuration, computed from the op cost functions without weights. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "cli.h"
#include "graph/profile.h"
#include "model/convert.h"
#include "model/planner.h"

typedef struct plan_mode {
    const char *name;
    loom_graph *g;
    loom_plan_info info;
    loom_profile prof;
} plan_mode;

static int parse_dtype(const char *s, const char *const *names, const loom_dtype *vals, int n,
                       loom_dtype *out) {
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = vals[i];
            return 0;
        }
    return -1;
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

static void print_kernels(const plan_mode *m, const loom_plan_params *p, const loom_hw_profile *hw) {
    printf("\nkernels of layer %d, %s:\n", rep_layer(m), m->name);
    printf("  %-30s %-6s %10s %10s %10s %8s %-7s %10s\n", "kernel", "prec", "MB read", "MB written",
           "GFLOP", "FLOP/B", "bound", "est. us");
    const loom_graph *g = m->g;
    for (int n = 0; n < g->n_nodes; n++) {
        if (g->nodes[n].layer != rep_layer(m)) continue;
        loom_plan_node_cost c;
        loom_plan_node(g, n, &m->info, p->kv_dtype, hw, &c);
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
        printf("  %-30s %-6s %10.3f %10.3f %10.4f %8.1f %-7s %10.2f\n", name,
               c.matrix ? loom_hw_prec_name(c.prec) : "vector", c.bytes_read / 1e6,
               c.bytes_written / 1e6, c.flops / 1e9, bytes > 0 ? c.flops / bytes : 0.0,
               c.compute_bound ? "compute" : "memory", c.seconds * 1e6);
    }
}

static void print_table(const plan_mode *modes, int n_modes, const loom_plan_params *p,
                        const loom_hw_profile *hw) {
    const loom_plan_info *in = &modes[0].info;
    const loom_named_config *nc = in->config;
    printf("%s: %d layers, dim %d, ffn %d, %d heads (%d kv), vocab %d  [%s]\n", nc->name,
           nc->cfg.n_layers, nc->cfg.dim, nc->cfg.hidden_dim, nc->cfg.n_heads, nc->cfg.n_kv_heads,
           nc->cfg.vocab_size, nc->source);
    if (p->decode)
        printf("decode: batch %d, 1 new token per sequence after %d cached (q_len 1)", p->batch, p->seq);
    else
        printf("prefill: batch %d x %d tokens", p->batch, p->seq);
    if (nc->arch == LOOM_ARCH_BERT)
        printf("; weights %s (encoder: no KV cache)\n", loom_dtype_name(p->wtype));
    else
        printf("; weights %s, KV cache %s\n", loom_dtype_name(p->wtype),
               p->kv_dtype == LOOM_I8 ? "int8" : loom_dtype_name(p->kv_dtype));
    printf("hardware %s: %s\n  peak TFLOP/s f32 %.1f, f16 %.1f, bf16 %.1f, int8 %.1f, vector %.1f; "
           "bandwidth %.1f GB/s%s\n", hw->name, hw->description, hw->peak_flops[0] / 1e12,
           hw->peak_flops[1] / 1e12, hw->peak_flops[2] / 1e12, hw->peak_flops[3] / 1e12,
           hw->vector_flops / 1e12, hw->bandwidth / 1e9, hw->measured ? " (measured)" : "");

    printf("\n%-26s", "per layer");
    for (int m = 0; m < n_modes; m++) printf(" %14s", modes[m].name);
    printf("\n");
#define ROW(label, fmt, expr)                                         \
    do {                                                              \
        printf("%-26s", label);                                       \
        for (int m = 0; m < n_modes; m++) {                           \
            const loom_profile_section *s = layer0(&modes[m]);        \
            printf(" %14" fmt, expr);                                 \
        }                                                             \
        printf("\n");                                                 \
    } while (0)
    ROW("kernels", "d", s->kernels);
    ROW("MB read", ".3f", s->bytes_read / 1e6);
    ROW("MB written", ".3f", s->bytes_written / 1e6);
    ROW("MB traffic", ".3f", (s->bytes_read + s->bytes_written) / 1e6);
    ROW("GFLOP", ".4f", s->flops / 1e9);
    ROW("est. time (ms)", ".4f", s->time_ns / 1e6);
#undef ROW
    printf("\n%-26s", "whole pass");
    for (int m = 0; m < n_modes; m++) printf(" %14s", modes[m].name);
    printf("\n");
    const char *rows[] = {"kernels", "GB traffic", "GFLOP", "est. time (ms)", "intermediates MB"};
    for (int r = 0; r < 5; r++) {
        printf("%-26s", rows[r]);
        for (int m = 0; m < n_modes; m++) {
            const loom_profile_section *t = &modes[m].prof.total;
            if (r == 0) printf(" %14d", t->kernels);
            if (r == 1) printf(" %14.3f", (t->bytes_read + t->bytes_written) / 1e9);
            if (r == 2) printf(" %14.2f", t->flops / 1e9);
            if (r == 3) printf(" %14.3f", t->time_ns / 1e6);
            if (r == 4) printf(" %14.3f", (double)modes[m].prof.arena_bytes / 1e6);
        }
        printf("\n");
    }
    if (n_modes == 2) {
        const loom_profile_section *a = layer0(&modes[0]), *b = layer0(&modes[1]);
        double ta = a->bytes_read + a->bytes_written, tb = b->bytes_read + b->bytes_written;
        printf("\nfused vs step_by_step per layer: traffic -%.1f%%, kernels %d -> %d, est. time "
               "-%.1f%%\n", ta > 0 ? 100.0 * (ta - tb) / ta : 0.0, a->kernels, b->kernels,
               a->time_ns > 0 ? 100.0 * (a->time_ns - b->time_ns) / a->time_ns : 0.0);
    }
    for (int m = 0; m < n_modes; m++) {
        printf("\nop chain per layer (%s, %s): %s\n", modes[m].name,
               layers_identical(&modes[m]) ? "same in every layer"
                                           : rep_layer(&modes[m]) ? "layer 1; layer 0 differs"
                                                                  : "layer 0",
               layer0(&modes[m])->chain ? layer0(&modes[m])->chain : "");
        print_kernels(&modes[m], p, hw);
    }
}

static void print_json(const plan_mode *modes, int n_modes, const loom_plan_params *p,
                       const loom_hw_profile *hw) {
    const loom_plan_info *in = &modes[0].info;
    printf("{\"config\":");
    loom_json_str(stdout, in->config->name);
    printf(",\"phase\":\"%s\",\"batch\":%d,\"seq\":%d,\"tokens\":%d,\"n_layers\":%d,\"wtype\":",
           p->decode ? "decode" : "prefill", p->batch, p->seq, in->n_tokens, in->n_layers);
    loom_json_str(stdout, loom_dtype_name(p->wtype));
    printf(",\"kv_dtype\":");
    loom_json_str(stdout, p->kv_dtype == LOOM_I8 ? "int8" : loom_dtype_name(p->kv_dtype));
    printf(",\"fusion_available\":%s,\"hw\":{\"name\":", loom_plan_have_fusion() ? "true" : "false");
    loom_json_str(stdout, hw->name);
    printf(",\"peak_flops\":{\"f32\":%.6g,\"f16\":%.6g,\"bf16\":%.6g,\"int8\":%.6g},"
           "\"vector_flops\":%.6g,\"bandwidth\":%.6g,\"measured\":%s}", hw->peak_flops[0],
           hw->peak_flops[1], hw->peak_flops[2], hw->peak_flops[3], hw->vector_flops, hw->bandwidth,
           hw->measured ? "true" : "false");
    printf(",\"modes\":[");
    for (int m = 0; m < n_modes; m++) {
        const plan_mode *pm = &modes[m];
        printf("%s{\"mode\":\"%s\",\"arena_bytes\":%zu,\"layer_index\":%d,"
               "\"layers_identical\":%s,\"layer\":", m ? "," : "", pm->name, pm->prof.arena_bytes,
               rep_layer(pm), layers_identical(pm) ? "true" : "false");
        loom_profile_json_section(stdout, layer0(pm), 0, 1);
        printf(",\"embed\":");
        loom_profile_json_section(stdout, &pm->prof.sections[0], 0, 1);
        printf(",\"head\":");
        loom_profile_json_section(stdout, &pm->prof.sections[pm->prof.n_sections - 1], 0, 1);
        printf(",\"total\":");
        loom_profile_json_section(stdout, &pm->prof.total, 0, 1);
        printf(",\"kernels\":[");
        int first = 1;
        for (int n = 0; n < pm->g->n_nodes; n++) {
            if (pm->g->nodes[n].layer != rep_layer(pm)) continue;
            loom_plan_node_cost c;
            loom_plan_node(pm->g, n, &pm->info, p->kv_dtype, hw, &c);
            printf("%s{\"op\":", first ? "" : ",");
            loom_json_str(stdout, loom_op_get(pm->g->nodes[n].op)->name);
            printf(",\"name\":");
            loom_json_str(stdout, pm->g->tensors[pm->g->nodes[n].dst].t.name);
            printf(",\"matrix\":%s,\"prec\":\"%s\",\"flops\":%.0f,\"bytes_read\":%.0f,"
                   "\"bytes_written\":%.0f,\"time_s\":%.9g,\"bound\":\"%s\"}",
                   c.matrix ? "true" : "false", loom_hw_prec_name(c.prec), c.flops, c.bytes_read,
                   c.bytes_written, c.seconds, c.compute_bound ? "compute" : "memory");
            first = 0;
        }
        printf("]}");
    }
    printf("]}\n");
}

int cmd_plan(int argc, char **argv) {
    const char *arch = NULL, *config = NULL, *phase = "prefill", *kv = "f16", *wt = "f16";
    const char *hw_name = "cpu", *mode = NULL, *svg = NULL, *rules = NULL, *preset = NULL;
    int batch = 1, seq = 0, json = 0;
    const arg_opt opts[] = {
        {NULL, "--arch", ARG_STR, &arch, "ARCH", "llama or bert (default: the config's)"},
        {NULL, "--config", ARG_STR, &config, "NAME|FILE",
         "llama2-7b, llama2-13b, llama2-70b, tinyllama, smollm2-135m, bert-base, or a Hugging Face "
         "config.json (or its folder) or GGUF file, whose shapes are read"},
        {"-b", "--batch", ARG_INT, &batch, "B", "sequences (default 1)"},
        {"-s", "--seq", ARG_INT, &seq, "S",
         "prefill: tokens per sequence; decode: tokens already in the cache"},
        {NULL, "--phase", ARG_STR, &phase, "PHASE", "prefill (default) or decode"},
        {NULL, "--kv-dtype", ARG_STR, &kv, "T", "KV cache: f32, f16 (default), bf16, int8"},
        {NULL, "--wtype", ARG_STR, &wt, "T", "weights: f32, f16 (default), bf16, q8_0, q4_0, q4_1"},
        {NULL, "--hw", ARG_STR, &hw_name, "HW",
         "hardware profile: cpu (default, measured), h200, ascend-910b, or a YAML file"},
        {NULL, "--mode", ARG_STR, &mode, "MODE",
         "step_by_step, fused or both (default: both when the fusion engine is built in)"},
        {NULL, "--rules", ARG_STR, &rules, "FILE", "fusion rules YAML (default: built in)"},
        {NULL, "--fusion-preset", ARG_STR, &preset, "NAME", "preset of the rules"},
        {NULL, "--json", ARG_FLAG, &json, NULL, "print JSON instead of tables"},
        {NULL, "--svg", ARG_STR, &svg, "FILE",
         "also write a bar chart of traffic and time per op kind (whole pass) to FILE"},
    };
    const char *usage = "--config NAME|FILE --seq S [--batch B] [--phase prefill|decode] "
                        "[--kv-dtype T] [--wtype T] [--hw HW] [--mode MODE] [--rules FILE] "
                        "[--fusion-preset NAME] [--json] [--svg FILE]";
    int r = args_parse("plan", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 2);
    if (r != 0) return r > 0 ? 0 : 2;
    if (!config || seq <= 0) {
        fprintf(stderr, "loom plan: --config NAME|FILE and --seq S (>= 1) are required\n");
        return 2;
    }
    loom_plan_params p = {.config = config, .batch = batch, .seq = seq, .rules_path = rules,
                          .preset = preset};
    /* a built-in name, else a file: config.json (or its folder) or a GGUF */
    const loom_named_config *nc = loom_named_config_find(config);
    loom_file_config fc;
    struct stat sb;
    if (!nc && stat(config, &sb) == 0) {
        if (loom_config_from_file(config, &fc) != LOOM_OK) return cli_fail("plan", "--config");
        nc = p.named = &fc.nc;
    }
    if (!nc) return cli_fail("plan", "--config");
    if (cli_check_rules("plan", rules, preset)) return 1;
    if (!arch) arch = nc->arch == LOOM_ARCH_BERT ? "bert" : "llama";
    if (strcmp(arch, "llama") != 0 && strcmp(arch, "bert") != 0) {
        fprintf(stderr, "loom plan: --arch '%s': expected llama or bert\n", arch);
        return 1;
    }
    if ((strcmp(arch, "bert") == 0) != (nc->arch == LOOM_ARCH_BERT)) {
        fprintf(stderr, "loom plan: --config %s is not a %s model\n", config, arch);
        return 1;
    }
    if (strcmp(phase, "prefill") == 0) p.decode = 0;
    else if (strcmp(phase, "decode") == 0) p.decode = 1;
    else {
        fprintf(stderr, "loom plan: --phase '%s': expected prefill or decode\n", phase);
        return 1;
    }
    static const char *const kv_names[] = {"f32", "f16", "bf16", "int8"};
    static const loom_dtype kv_vals[] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I8};
    if (parse_dtype(kv, kv_names, kv_vals, 4, &p.kv_dtype)) {
        fprintf(stderr, "loom plan: --kv-dtype '%s': expected f32, f16, bf16 or int8\n", kv);
        return 1;
    }
    if (loom_convert_parse_type(wt, &p.wtype) != LOOM_OK) { /* the weight types loom convert writes */
        fprintf(stderr, "loom plan: --wtype '%s': expected f32, f16, bf16, q8_0, q4_0 or q4_1\n", wt);
        return 1;
    }
    int want_step = 1, want_fused = loom_plan_have_fusion();
    if (mode) {
        if (strcmp(mode, "step_by_step") == 0) want_fused = 0;
        else if (strcmp(mode, "fused") == 0) { want_step = 0; want_fused = 1; }
        else if (strcmp(mode, "both") == 0) want_fused = 1;
        else {
            fprintf(stderr, "loom plan: --mode '%s': expected step_by_step, fused or both\n", mode);
            return 1;
        }
    }
    if (want_fused && !loom_plan_have_fusion()) {
        fprintf(stderr, "loom plan: fused: unavailable in this build (no fusion engine); "
                        "showing step_by_step only\n");
        want_fused = 0;
        want_step = 1;
    }
    loom_hw_profile hw;
    if (loom_hw_load(hw_name, 1, &hw) != LOOM_OK) return cli_fail("plan", "--hw");

    plan_mode modes[2];
    memset(modes, 0, sizeof modes);
    int n_modes = 0, rc = 1;
    if (want_step) modes[n_modes++].name = "step_by_step";
    if (want_fused) modes[n_modes++].name = "fused";
    for (int m = 0; m < n_modes; m++) {
        p.fused = strcmp(modes[m].name, "fused") == 0;
        if (loom_graph_init(&modes[m].g) != LOOM_OK) goto done;
        if (loom_plan_build(modes[m].g, &p, &hw, &modes[m].info) != LOOM_OK) {
            cli_fail("plan", nc->name);
            goto done;
        }
        if (loom_profile_collect(modes[m].g, modes[m].info.n_layers, p.decode ? "decode" : "prefill",
                                 modes[m].name, modes[m].info.n_tokens, &modes[m].prof) != LOOM_OK) {
            cli_fail("plan", "collect");
            goto done;
        }
    }
    for (int m = 0; m < n_modes; m++)
        if (modes[m].info.uncosted)
            fprintf(stderr, "loom plan: warning: %s: %d node%s without a cost (counted as 0 bytes)\n",
                    modes[m].name, modes[m].info.uncosted, modes[m].info.uncosted == 1 ? "" : "s");
    if (json) print_json(modes, n_modes, &p, &hw);
    else print_table(modes, n_modes, &p, &hw);
    if (svg) {
        FILE *f = fopen(svg, "w");
        if (!f) {
            fprintf(stderr, "loom plan: --svg: cannot create '%s'\n", svg);
            goto done;
        }
        const loom_profile *st = want_step ? &modes[0].prof : NULL;
        const loom_profile *fu = want_fused ? &modes[n_modes - 1].prof : NULL;
        loom_profile_write_svg(f, st, fu);
        if (fclose(f) != 0) {
            fprintf(stderr, "loom plan: --svg: write error on '%s'\n", svg);
            goto done;
        }
    }
    rc = 0;
done:
    for (int m = 0; m < 2; m++) {
        loom_profile_free(&modes[m].prof);
        loom_graph_free(modes[m].g);
    }
    return rc;
}
