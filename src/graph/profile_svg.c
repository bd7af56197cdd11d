/*
 * Per-op-kind totals of a profile and their SVG bar chart: two panels
 * (memory traffic, time), one row per op kind with a step_by_step bar and a
 * fused bar, value labels, a linear axis with gridlines, and a legend.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph/profile.h"

void loom_profile_add_kind(loom_profile *p, const char *kernel, const loom_profile_section *one) {
    char name[40];
    size_t len = strcspn(kernel, ".");
    snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name - 1 ? len : sizeof name - 1), kernel);
    int k = 0;
    while (k < p->n_kinds && strcmp(p->kinds[k].name, name) != 0) k++;
    if (k == p->n_kinds) {
        /* the last slot collects every kind beyond the others, named "other"
         * from the start (it never holds a named kind's totals) */
        int last = k >= LOOM_PROFILE_MAX_KINDS - 1;
        if (last) k = LOOM_PROFILE_MAX_KINDS - 1;
        if (k == p->n_kinds) {
            p->n_kinds++;
            memset(&p->kinds[k], 0, sizeof p->kinds[k]);
            snprintf(p->kinds[k].name, sizeof p->kinds[k].name, "%s", last ? "other" : name);
        }
    }
    loom_profile_kind *d = &p->kinds[k];
    d->kernels += one->kernels;
    d->bytes_read += one->bytes_read;
    d->bytes_written += one->bytes_written;
    d->flops += one->flops;
    d->time_ns += one->time_ns;
}

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if ((unsigned char)*s >= 0x20) fputc(*s, f);
        }
    }
}

/* Union of the op kinds of both profiles, step's order first. */
static int kind_union(const loom_profile *a, const loom_profile *b, const char *names[2 * LOOM_PROFILE_MAX_KINDS]) {
    int n = 0;
    for (int pi = 0; pi < 2; pi++) {
        const loom_profile *p = pi ? b : a;
        if (!p) continue;
        for (int k = 0; k < p->n_kinds; k++) {
            int seen = 0;
            for (int j = 0; j < n && !seen; j++) seen = strcmp(names[j], p->kinds[k].name) == 0;
            if (!seen) names[n++] = p->kinds[k].name;
        }
    }
    return n;
}

static const loom_profile_kind *find_kind(const loom_profile *p, const char *name) {
    if (!p) return NULL;
    for (int k = 0; k < p->n_kinds; k++)
        if (strcmp(p->kinds[k].name, name) == 0) return &p->kinds[k];
    return NULL;
}

static double metric(const loom_profile_kind *k, int which) {
    if (!k) return 0.0;
    return which == 0 ? (k->bytes_read + k->bytes_written) / 1e6 : k->time_ns / 1e6;
}

/* A "nice" axis step (1, 2 or 5 times a power of ten) giving about 5 ticks. */
static double nice_step(double max) {
    if (!(max > 0)) return 1.0;
    double raw = max / 5.0, p10 = pow(10.0, floor(log10(raw))), m = raw / p10;
    return (m <= 1.0 ? 1.0 : m <= 2.0 ? 2.0 : m <= 5.0 ? 5.0 : 10.0) * p10;
}

#define W 960
#define LABEL_W 150
#define PLOT_W 640
#define BAR_H 11
#define ROW_H 30
#define STEP_COLOR "#4e79a7"
#define FUSED_COLOR "#f28e2b"

static void value_text(FILE *f, double x, double y, double v) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#333\">", x + 4, y + BAR_H - 2);
    if (v >= 100) fprintf(f, "%.0f", v);
    else if (v >= 1) fprintf(f, "%.2f", v);
    else fprintf(f, "%.3g", v);
    fputs("</text>\n", f);
}

static double panel(FILE *f, double y0, int which, const char *title, const char *unit,
                    const loom_profile *step, const loom_profile *fused, const char **names, int n) {
    double max = 0.0;
    for (int i = 0; i < n; i++) {
        double a = metric(find_kind(step, names[i]), which), b = metric(find_kind(fused, names[i]), which);
        if (a > max) max = a;
        if (b > max) max = b;
    }
    double stepv = nice_step(max), axis_max = stepv * ceil(max / stepv);
    if (!(axis_max > 0)) axis_max = 1.0;
    double x0 = LABEL_W, top = y0 + 28, h = n * ROW_H;
    fprintf(f, "<g class=\"panel\" id=\"%s\">\n", which == 0 ? "traffic" : "time");
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">", 10, y0 + 16);
    xml_text(f, title);
    fputs("</text>\n", f);
    /* gridlines and tick labels */
    for (double t = 0.0; t <= axis_max * 1.0000001; t += stepv) {
        double x = x0 + t / axis_max * PLOT_W;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, top,
                x, top + h);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">%g</text>\n",
                x, top + h + 14, t);
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", x0, top, x0,
            top + h);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", x0,
            top + h, x0 + PLOT_W, top + h);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">", x0 + PLOT_W / 2.0,
            top + h + 30);
    xml_text(f, unit);
    fputs("</text>\n", f);
    for (int i = 0; i < n; i++) {
        double y = top + i * ROW_H + 4;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"end\">", x0 - 6,
                y + BAR_H + 4);
        xml_text(f, names[i]);
        fputs("</text>\n", f);
        for (int m = 0; m < 2; m++) {
            if (!(m ? fused : step)) continue;
            const loom_profile_kind *k = find_kind(m ? fused : step, names[i]);
            /* one bar: centred in the row; two: step above fused */
            double v = metric(k, which), w = v / axis_max * PLOT_W,
                   by = y + (step && fused ? m * BAR_H : BAR_H / 2.0);
            fprintf(f, "<rect class=\"bar %s\" data-kind=\"", m ? "fused" : "step");
            xml_text(f, names[i]);
            fprintf(f, "\" x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\">"
                       "<title>", x0, by, w, BAR_H, m ? FUSED_COLOR : STEP_COLOR);
            xml_text(f, names[i]);
            fprintf(f, " (%s): %g %s, %d kernel%s</title></rect>\n", m ? "fused" : "step_by_step", v,
                    which == 0 ? "MB" : "ms", k ? k->kernels : 0, k && k->kernels == 1 ? "" : "s");
            value_text(f, x0 + w, by, v);
        }
    }
    fputs("</g>\n", f);
    return top + h + 44;
}

void loom_profile_write_svg(FILE *f, const loom_profile *step, const loom_profile *fused) {
    const char *names[2 * LOOM_PROFILE_MAX_KINDS];
    int n = kind_union(step, fused, names);
    double panel_h = 28 + n * ROW_H + 44;
    double height = 70 + 2 * panel_h + 10;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\" "
               "viewBox=\"0 0 %d %.0f\" font-family=\"sans-serif\">\n", W, height, W, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
    const loom_profile *p0 = step ? step : fused;
    fprintf(f, "<text x=\"10\" y=\"22\" font-size=\"16\" font-weight=\"bold\">");
    if (p0) {
        fprintf(f, "Per op kind, ");
        xml_text(f, p0->phase);
        fprintf(f, " (%d token%s): %s", p0->n_tokens, p0->n_tokens == 1 ? "" : "s",
                step && fused ? "step_by_step vs fused" : step ? "step_by_step" : "fused");
    }
    fputs("</text>\n", f);
    if (step && fused) {
        double a = step->total.bytes_read + step->total.bytes_written;
        double b = fused->total.bytes_read + fused->total.bytes_written;
        fprintf(f, "<text x=\"%d\" y=\"43\" font-size=\"12\" fill=\"#333\">total traffic %.1f MB -&gt; "
                   "%.1f MB (%+.1f%%), kernels %d -&gt; %d</text>\n", LABEL_W + 330, a / 1e6, b / 1e6,
                a > 0 ? 100.0 * (b - a) / a : 0.0, step->total.kernels, fused->total.kernels);
    }
    /* legend */
    fputs("<g class=\"legend\">\n", f);
    if (step)
        fprintf(f, "<rect x=\"%d\" y=\"34\" width=\"14\" height=\"10\" fill=\"%s\"/>"
                   "<text x=\"%d\" y=\"43\" font-size=\"12\">%s</text>\n", LABEL_W, STEP_COLOR,
                LABEL_W + 18, step->mode ? step->mode : "step_by_step");
    if (fused)
        fprintf(f, "<rect x=\"%d\" y=\"34\" width=\"14\" height=\"10\" fill=\"%s\"/>"
                   "<text x=\"%d\" y=\"43\" font-size=\"12\">%s</text>\n", LABEL_W + 160, FUSED_COLOR,
                LABEL_W + 178, fused->mode ? fused->mode : "fused");
    fputs("</g>\n", f);
    double y = panel(f, 52, 0, "Memory traffic per op kind (bytes read + written)", "MB", step, fused,
                     names, n);
    panel(f, y, 1, "Time per op kind", "ms", step, fused, names, n);
    fputs("</svg>\n", f);
}
