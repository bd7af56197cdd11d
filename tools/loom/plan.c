/* loom plan: the per-layer kernel / traffic / roofline table of a named model
 * configuration, computed from the op cost functions without weights (the
 * library's plan reports, loom.h). */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cli.h"

static int parse_dtype(const char *s, const char *const *names, const loom_dtype *vals, int n,
                       loom_dtype *out) {
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = vals[i];
            return 0;
        }
    return -1;
}

int cmd_plan(int argc, char **argv) {
    const char *arch = NULL, *config = NULL, *phase = "prefill", *kv = "f16", *wt = "f16", *act = "f32";
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
        {NULL, "--act-dtype", ARG_STR, &act, "T",
         "activations between kernels, in both modes: f32 (default, what loom's kernels exchange), f16 or "
         "bf16 (modelled: every intermediate at 2 bytes)"},
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
                        "[--kv-dtype T] [--wtype T] [--act-dtype T] [--hw HW] [--mode MODE] [--rules FILE] "
                        "[--fusion-preset NAME] [--json] [--svg FILE]";
    int r = args_parse("plan", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 2);
    if (r != 0) return r > 0 ? 0 : 2;
    if (!config || seq <= 0) {
        fprintf(stderr, "loom plan: --config NAME|FILE and --seq S (>= 1) are required\n");
        return 2;
    }
    loom_plan_report_params p = loom_plan_report_default_params();
    p.batch = batch;
    p.seq = seq;
    p.rules_path = rules;
    p.preset = preset;
    /* a built-in name, else a file: config.json (or its folder) or a GGUF */
    loom_plan_report *rep = NULL;
    if (loom_plan_report_init(config, &rep) != LOOM_OK) return cli_fail("plan", "--config");
    int rc = 1;
    if (cli_check_rules("plan", rules, preset)) goto done;
    const char *config_arch = loom_plan_report_arch(rep);
    if (!arch) arch = config_arch;
    if (strcmp(arch, "llama") != 0 && strcmp(arch, "bert") != 0) {
        fprintf(stderr, "loom plan: --arch '%s': expected llama or bert\n", arch);
        goto done;
    }
    if (strcmp(arch, config_arch) != 0) {
        fprintf(stderr, "loom plan: --config %s is not a %s model\n", config, arch);
        goto done;
    }
    if (strcmp(phase, "prefill") == 0) p.decode = 0;
    else if (strcmp(phase, "decode") == 0) p.decode = 1;
    else {
        fprintf(stderr, "loom plan: --phase '%s': expected prefill or decode\n", phase);
        goto done;
    }
    static const char *const kv_names[] = {"f32", "f16", "bf16", "int8"};
    static const loom_dtype kv_vals[] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I8};
    if (parse_dtype(kv, kv_names, kv_vals, 4, &p.kv_dtype)) {
        fprintf(stderr, "loom plan: --kv-dtype '%s': expected f32, f16, bf16 or int8\n", kv);
        goto done;
    }
    static const char *const act_names[] = {"f32", "f16", "bf16"};
    static const loom_dtype act_vals[] = {LOOM_F32, LOOM_F16, LOOM_BF16};
    if (parse_dtype(act, act_names, act_vals, 3, &p.act_dtype)) {
        fprintf(stderr, "loom plan: --act-dtype '%s': expected f32, f16 or bf16\n", act);
        goto done;
    }
    if (loom_convert_parse_type(wt, &p.wtype) != LOOM_OK) { /* the weight types loom convert writes */
        fprintf(stderr, "loom plan: --wtype '%s': expected f32, f16, bf16, q8_0, q4_0 or q4_1\n", wt);
        goto done;
    }
    int want_step = 1, want_fused = loom_plan_have_fusion();
    if (mode) {
        if (strcmp(mode, "step_by_step") == 0) want_fused = 0;
        else if (strcmp(mode, "fused") == 0) { want_step = 0; want_fused = 1; }
        else if (strcmp(mode, "both") == 0) want_fused = 1;
        else {
            fprintf(stderr, "loom plan: --mode '%s': expected step_by_step, fused or both\n", mode);
            goto done;
        }
    }
    if (want_fused && !loom_plan_have_fusion()) {
        fprintf(stderr, "loom plan: fused: unavailable in this build (no fusion engine); "
                        "showing step_by_step only\n");
        want_fused = 0;
        want_step = 1;
    }
    p.step_by_step = want_step;
    p.fused = want_fused;
    if (loom_plan_report_set_hw(rep, hw_name) != LOOM_OK) {
        cli_fail("plan", "--hw");
        goto done;
    }
    if (loom_plan_report_run(rep, &p) != LOOM_OK) {
        cli_fail("plan", loom_plan_report_config_name(rep));
        goto done;
    }
    for (int m = 0; m < loom_plan_report_n_modes(rep); m++) {
        int uncosted = loom_plan_report_uncosted(rep, m);
        if (uncosted)
            fprintf(stderr, "loom plan: warning: %s: %d node%s without a cost (counted as 0 bytes)\n",
                    loom_plan_report_profile(rep, m)->mode, uncosted, uncosted == 1 ? "" : "s");
    }
    if (json) loom_plan_report_print_json(rep, stdout);
    else loom_plan_report_print(rep, stdout);
    if (svg) {
        FILE *f = fopen(svg, "w");
        if (!f) {
            fprintf(stderr, "loom plan: --svg: cannot create '%s'\n", svg);
            goto done;
        }
        loom_plan_report_write_svg(rep, f);
        if (fclose(f) != 0) {
            fprintf(stderr, "loom plan: --svg: write error on '%s'\n", svg);
            goto done;
        }
    }
    rc = 0;
done:
    loom_plan_report_free(rep);
    return rc;
}
