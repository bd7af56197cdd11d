/* CPU feature detection and the ISA level kernels are chosen for. */
#ifndef LOOM_BASE_CPU_H
#define LOOM_BASE_CPU_H

#include "loom.h"

/* Kernel levels, lowest to highest. REF forces the reference kernels everywhere. */
typedef enum loom_isa {
    LOOM_ISA_REF = 0,
    LOOM_ISA_GENERIC,   /* portable C, compiler-vectorised */
    LOOM_ISA_AVX2,      /* AVX2 + FMA (+F16C) */
    LOOM_ISA_AVX512,    /* AVX-512 F/BW/VL (+BF16/VNNI when present) */
    LOOM_ISA_COUNT
} loom_isa;

typedef struct loom_cpu_features {
    int avx2, fma, f16c;
    int avx512f, avx512bw, avx512vl, avx512_bf16, avx512_vnni;
    int l1d_bytes, l2_bytes, l3_bytes;  /* data cache sizes per core (0 if unknown) */
    /* Identity, for benchmark records (x86 cpuid; "" and 0 elsewhere): the vendor
     * string, the display family and model (base + extended fields), the brand
     * string. Kernels choose by features, never by these. */
    char vendor[13];
    int family, model;
    char brand[49];
} loom_cpu_features;

/* The hint of a software prefetch of data streamed once from DRAM (a decode's KV
 * cache, a GEMV's 16-bit weight rows): into L2 (_MM_HINT_T2 of <xmmintrin.h>), not
 * L1. An L1 prefetch holds one of the core's few L1 miss buffers until its line
 * arrives from DRAM; with the streams in flight they ran out and the loads waited:
 * on a Zen 4 host a decode tile took its compute time plus its transfer time (f32
 * on two threads at 61-64 % of the read bandwidth, 84 % into L2; bf16 GEMV rows
 * at N = 11008 on one thread 39 -> 70 %). bench/results/attention.md, "Decode
 * prefetches into L2", and bench/results/matmul.md. */
#ifndef LOOM_PF_STREAM /* -DLOOM_PF_STREAM=_MM_HINT_T0 builds a variant for an A/B */
#define LOOM_PF_STREAM _MM_HINT_T2
#endif

/* Features of the running CPU (cpuid + xgetbv; OS support of AVX/AVX-512 state checked). */
const loom_cpu_features *loom_cpu_get(void);
/* Highest ISA level this CPU supports. */
loom_isa loom_cpu_best_isa(void);
/* Level in use: LOOM_ISA env ("ref", "generic", "avx2", "avx512") if set and supported,
 * else the best one. An unsupported or unknown request falls back to the best level
 * supported at or below it and is reported once on stderr. */
loom_isa loom_cpu_isa(void);
/* Overrides the level for this process (tests). Returns LOOM_ERR_UNSUPPORTED if the
 * CPU cannot run it. */
loom_status loom_cpu_set_isa(loom_isa isa);
/* "ref", "generic", "avx2", "avx512". */
const char *loom_isa_name(loom_isa isa);
/* Parses a name; returns LOOM_ERR_INVALID_ARG for an unknown one. */
loom_status loom_isa_parse(const char *name, loom_isa *out);
/* CPUs this process may run on (sched_getaffinity: taskset, cgroups' cpusets),
 * at least 1: the default thread count. */
int loom_cpu_count(void);

#endif
