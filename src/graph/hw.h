/*
 * Hardware profiles for the analytic planner (`loom plan`): peak FLOP/s per
 * dtype, main-memory bandwidth and cache sizes, read from YAML
 * (configs/hw/NAME.yaml; the three built-in profiles are embedded in the binary
 * at build time) or, for `auto` values, measured on the running CPU.
 */
#ifndef LOOM_GRAPH_HW_H
#define LOOM_GRAPH_HW_H

#include <stddef.h>

#include "loom.h"

/* Precisions of the matrix engine a kernel runs at. */
typedef enum loom_hw_prec {
    LOOM_HW_F32 = 0,
    LOOM_HW_F16,
    LOOM_HW_BF16,
    LOOM_HW_INT8,
    LOOM_HW_PREC_COUNT
} loom_hw_prec;

typedef struct loom_hw_profile {
    char   name[64];
    char   description[160];
    double peak_flops[LOOM_HW_PREC_COUNT]; /* dense matrix FLOP/s (int8: OP/s); 0 = not given */
    double vector_flops;    /* FLOP/s of element-wise work (norms, activations, softmax) */
    double bandwidth;       /* main memory (DRAM / HBM) bytes/s */
    double l1_bytes, l2_bytes, l3_bytes;  /* per core (l1, l2) / per chip (l3); 0 = unknown */
    int    cores;           /* cores / SMs / AI cores */
    int    measured;        /* 1 when some value came from `auto` (measured on this machine) */
} loom_hw_profile;

/* "f32", "f16", "bf16", "int8". */
const char *loom_hw_prec_name(loom_hw_prec p);

/* Parses YAML text; file names the source in error messages, which read
 * "file:line:column: what was wrong". `auto` values are measured (see
 * loom_hw_measure_cpu) unless measure is 0, when they are left 0. */
loom_status loom_hw_parse(const char *text, size_t len, const char *file, int measure,
                          loom_hw_profile *out);
/* Loads a built-in profile by name ("cpu", "h200", "ascend-910b") or, when
 * name is not one of them, the YAML file at that path. */
loom_status loom_hw_load(const char *name_or_path, int measure, loom_hw_profile *out);
/* The embedded YAML text of a built-in profile, or NULL. */
const char *loom_hw_builtin(const char *name);
/* Names of the built-in profiles, NULL-terminated. */
const char *const *loom_hw_builtin_names(void);

/* Measures this CPU: f32 FMA throughput of one core (short loop) times the
 * online cores, bf16 / int8 from the dot-product extensions, and read
 * bandwidth over a buffer much larger than the last-level cache. Takes about
 * 0.1-0.3 s. Fills the fields that are still 0. */
loom_status loom_hw_measure_cpu(loom_hw_profile *p);

/* Roofline estimate in seconds: max(flops / peak, bytes / bandwidth).
 * matrix selects peak_flops[prec] (falling back to f16, then f32, then
 * vector_flops when the profile leaves it 0) over vector_flops. */
double loom_hw_time(const loom_hw_profile *p, int matrix, loom_hw_prec prec, double flops,
                    double bytes);

#endif
