#include "graph/profile.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

static int section_of(int layer, int n_layers) {
    if (layer == LOOM_LAYER_PRE) return 0;
    if (layer == LOOM_LAYER_POST || layer >= n_layers) return n_layers + 1;
    return layer + 1;
}

static loom_status append_chain(loom_profile_section *s, const char *kernel) {
    size_t old = s->chain ? strlen(s->chain) : 0, add = strlen(kernel);
    char *p = realloc(s->chain, old + add + 2);
    LOOM_RETURN_IF(!p, LOOM_ERR_NOMEM, "profile: out of memory");
    if (old) p[old++] = ' ';
    memcpy(p + old, kernel, add + 1);
    s->chain = p;
    return LOOM_OK;
}

static void accumulate(loom_profile_section *dst, const loom_profile_section *src) {
    dst->kernels += src->kernels;
    dst->bytes_read += src->bytes_read;
    dst->bytes_written += src->bytes_written;
    dst->flops += src->flops;
    dst->time_ns += src->time_ns;
}

/* One kernel's numbers into section s, the total and the per-kind totals, and
 * its name onto s's chain. */
static loom_status add_launch(loom_profile *p, loom_profile_section *s, const char *kernel,
                              const loom_profile_section *one) {
    accumulate(s, one);
    accumulate(&p->total, one);
    loom_profile_add_kind(p, kernel, one);
    return append_chain(s, kernel);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void loom_profile_node_medians(loom_graph *g, double *t, int reps) {
    for (int k = 0; k < g->n_nodes; k++) {
        qsort(t + (size_t)k * reps, (size_t)reps, sizeof *t, by_value);
        g->nodes[k].stats.time_ns = t[(size_t)k * reps + reps / 2];
    }
}

loom_status loom_profile_collect(const loom_graph *g, int n_layers, const char *phase,
                                 const char *mode, int n_tokens, loom_profile *out) {
    memset(out, 0, sizeof *out);
    LOOM_RETURN_IF(n_layers < 0, LOOM_ERR_INVALID_ARG, "profile: n_layers < 0");
    out->n_sections = n_layers + 2;
    out->sections = calloc((size_t)out->n_sections, sizeof *out->sections);
    LOOM_RETURN_IF(!out->sections, LOOM_ERR_NOMEM, "profile: out of memory");
    snprintf(out->phase, sizeof out->phase, "%s", phase);
    out->mode = mode;
    out->n_tokens = n_tokens;
    out->arena_bytes = g->arena_bytes;
    snprintf(out->sections[0].name, sizeof out->sections[0].name, "embed");
    for (int l = 0; l < n_layers; l++)
        snprintf(out->sections[l + 1].name, sizeof out->sections[l + 1].name, "L%d", l);
    snprintf(out->sections[n_layers + 1].name, sizeof out->sections[0].name, "head");
    snprintf(out->total.name, sizeof out->total.name, "total");
    for (int n = 0; n < g->n_nodes; n++) {
        const loom_node *node = &g->nodes[n];
        loom_profile_section *s = &out->sections[section_of(node->layer, n_layers)];
        loom_profile_section one = {.kernels = node->stats.kernels,
                                    .bytes_read = node->stats.bytes_read,
                                    .bytes_written = node->stats.bytes_written,
                                    .flops = node->stats.flops, .time_ns = node->stats.time_ns};
        loom_status st = add_launch(out, s, node->stats.kernel ? node->stats.kernel : "?", &one);
        if (st != LOOM_OK) {
            loom_profile_free(out);
            return st;
        }
    }
    return LOOM_OK;
}

loom_status loom_profile_add_section(loom_profile *p, const char *name, const char *kernel,
                                     const loom_profile_section *vals) {
    loom_profile_section *s = realloc(p->sections, ((size_t)p->n_sections + 1) * sizeof *s);
    LOOM_RETURN_IF(!s, LOOM_ERR_NOMEM, "profile: out of memory");
    p->sections = s;
    loom_profile_section *n = &s[p->n_sections++];
    memset(n, 0, sizeof *n);
    snprintf(n->name, sizeof n->name, "%s", name);
    return add_launch(p, n, kernel, vals);
}

void loom_profile_free(loom_profile *p) {
    if (!p) return;
    for (int i = 0; i < p->n_sections; i++) free(p->sections[i].chain);
    free(p->sections);
    free(p->total.chain);
    memset(p, 0, sizeof *p);
}

static void print_row(FILE *f, const loom_profile *profs, int n_modes, int row) {
    const loom_profile_section *s0 = row < 0 ? &profs[0].total : &profs[0].sections[row];
    fprintf(f, "%-7s", s0->name);
    for (int m = 0; m < n_modes; m++) {
        const loom_profile_section *s = row < 0 ? &profs[m].total : &profs[m].sections[row];
        fprintf(f, " | %7d %10.3f %10.3f %9.4f %9.3f", s->kernels, s->bytes_read / 1e6,
                s->bytes_written / 1e6, s->flops / 1e9, s->time_ns / 1e6);
    }
    fputc('\n', f);
}

void loom_profile_print_table(FILE *f, const loom_profile *profs, int n_modes) {
    const loom_profile *p = &profs[0];
    fprintf(f, "%s: %d token%s\n", p->phase, p->n_tokens, p->n_tokens == 1 ? "" : "s");
    fprintf(f, "%-7s", "");
    for (int m = 0; m < n_modes; m++) fprintf(f, " | %-51s", profs[m].mode);
    fprintf(f, "\n%-7s", "section");
    for (int m = 0; m < n_modes; m++)
        fprintf(f, " | %7s %10s %10s %9s %9s", "kernels", "MB read", "MB written", "GFLOP", "ms");
    fputc('\n', f);
    for (int r = 0; r < p->n_sections; r++) print_row(f, profs, n_modes, r);
    print_row(f, profs, n_modes, -1);
    for (int m = 0; m < n_modes; m++)
        fprintf(f, "%s: planned intermediate memory %.3f MB\n", profs[m].mode,
                profs[m].arena_bytes / 1e6);
    for (int m = 0; m < n_modes; m++) {
        fprintf(f, "op chain (%s):\n", profs[m].mode);
        for (int r = 0; r < profs[m].n_sections; r++) {
            const loom_profile_section *s = &profs[m].sections[r];
            if (r >= 2 && r < profs[m].n_sections - 1 && s->chain && profs[m].sections[r - 1].chain &&
                strcmp(s->chain, profs[m].sections[r - 1].chain) == 0)
                fprintf(f, "  %-6s same as %s\n", s->name, profs[m].sections[r - 1].name);
            else
                fprintf(f, "  %-6s %s\n", s->name, s->chain ? s->chain : "(none)");
        }
    }
}

void loom_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void loom_profile_json_section(FILE *f, const loom_profile_section *s, int with_name, int time_in_s) {
    fputc('{', f);
    if (with_name) {
        fprintf(f, "\"name\":");
        loom_json_str(f, s->name);
        fputc(',', f);
    }
    fprintf(f, "\"kernels\":%d,\"bytes_read\":%.0f,\"bytes_written\":%.0f,\"flops\":%.0f,",
            s->kernels, s->bytes_read, s->bytes_written, s->flops);
    if (time_in_s) fprintf(f, "\"time_s\":%.9g", s->time_ns * 1e-9);
    else fprintf(f, "\"time_ms\":%.6f", s->time_ns / 1e6);
    if (s->chain) {
        fprintf(f, ",\"chain\":[");
        const char *c = s->chain;
        for (int first = 1; *c; first = 0) {
            size_t len = strcspn(c, " ");
            char buf[64];
            snprintf(buf, sizeof buf, "%.*s", (int)(len < 63 ? len : 63), c);
            fprintf(f, "%s", first ? "" : ",");
            loom_json_str(f, buf);
            c += len;
            if (*c == ' ') c++;
        }
        fputc(']', f);
    }
    fputc('}', f);
}

void loom_profile_print_json(FILE *f, const char *model, const loom_profile *profs, int n) {
    char variants[256];
    loom_variants_describe(variants, sizeof variants);
    fprintf(f, "{\"model\":");
    loom_json_str(f, model);
    fprintf(f, ",\"isa\":");
    loom_json_str(f, loom_cpu_isa_name());
    fprintf(f, ",\"kernel_variants\":");
    loom_json_str(f, variants);
    fprintf(f, ",\"profiles\":[");
    for (int i = 0; i < n; i++) {
        const loom_profile *p = &profs[i];
        fprintf(f, "%s{\"phase\":", i ? "," : "");
        loom_json_str(f, p->phase);
        fprintf(f, ",\"mode\":");
        loom_json_str(f, p->mode);
        fprintf(f, ",\"tokens\":%d,\"arena_bytes\":%zu,\"sections\":[", p->n_tokens, p->arena_bytes);
        for (int r = 0; r < p->n_sections; r++) {
            if (r) fputc(',', f);
            loom_profile_json_section(f, &p->sections[r], 1, 0);
        }
        fprintf(f, "],\"total\":");
        loom_profile_json_section(f, &p->total, 1, 0);
        fputc('}', f);
    }
    fprintf(f, "]}\n");
}
