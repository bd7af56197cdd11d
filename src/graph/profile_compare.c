/* step_by_step vs fused: per-section and total reductions of kernels and
 * main-memory traffic, as text and as JSON. */
#include <stdio.h>

#include "graph/profile.h"

static double pct(double before, double after) { return before > 0 ? 100.0 * (before - after) / before : 0.0; }

void loom_profile_print_compare(FILE *f, const loom_profile *step, const loom_profile *fused) {
    fprintf(f, "%s, %s vs %s: per section kernels and MB moved (read + written)\n", step->phase,
            step->mode, fused->mode);
    fprintf(f, "%-7s %9s %9s %9s | %10s %10s %9s | %9s %9s\n", "section", "kernels", "fused", "-%", "MB",
            "fused MB", "-%", "ms", "fused ms");
    for (int r = 0; r <= step->n_sections && r <= fused->n_sections; r++) {
        const loom_profile_section *a = r < step->n_sections ? &step->sections[r] : &step->total;
        const loom_profile_section *b = r < fused->n_sections ? &fused->sections[r] : &fused->total;
        double ta = a->bytes_read + a->bytes_written, tb = b->bytes_read + b->bytes_written;
        fprintf(f, "%-7s %9d %9d %8.1f%% | %10.4f %10.4f %8.1f%% | %9.3f %9.3f\n", a->name, a->kernels,
                b->kernels, pct(a->kernels, b->kernels), ta / 1e6, tb / 1e6, pct(ta, tb), a->time_ns / 1e6,
                b->time_ns / 1e6);
    }
    double ta = step->total.bytes_read + step->total.bytes_written;
    double tb = fused->total.bytes_read + fused->total.bytes_written;
    fprintf(f, "%s: traffic %.4f MB -> %.4f MB (-%.1f%%), kernels %d -> %d (-%.1f%%), planned intermediates "
               "%.3f MB -> %.3f MB\n",
            step->phase, ta / 1e6, tb / 1e6, pct(ta, tb), step->total.kernels, fused->total.kernels,
            pct(step->total.kernels, fused->total.kernels), step->arena_bytes / 1e6, fused->arena_bytes / 1e6);
}

void loom_profile_print_compare_json(FILE *f, const loom_profile *step, const loom_profile *fused) {
    double ta = step->total.bytes_read + step->total.bytes_written;
    double tb = fused->total.bytes_read + fused->total.bytes_written;
    fprintf(f, "{\"phase\":\"%s\",\"bytes_step\":%.0f,\"bytes_fused\":%.0f,\"traffic_reduction_pct\":%.3f,"
               "\"kernels_step\":%d,\"kernels_fused\":%d,\"kernel_reduction_pct\":%.3f,"
               "\"arena_bytes_step\":%zu,\"arena_bytes_fused\":%zu}",
            step->phase, ta, tb, pct(ta, tb), step->total.kernels, fused->total.kernels,
            pct(step->total.kernels, fused->total.kernels), step->arena_bytes, fused->arena_bytes);
}
