/*
 * Kernel variants: where an op family has several correct implementations
 * whose speed depends on the CPU model more than on its feature flags, the
 * one in use is a process-wide choice read here by the kernels. The choice
 * is made by measurement (src/graph/tune.c, kept in a wisdom file per CPU
 * model; docs/tuning.md) or forced (LOOM_VARIANTS, tests); until then each
 * family runs its default: variant 0 (the special instructions) where the
 * CPU has them, which is what loom chose by feature flags alone before there
 * was a choice, else variant 1.
 *
 * Every variant of a family is exact to the family's stated tolerance and
 * bit-identical across thread counts on its own; switching variants may
 * change results within that tolerance (tests/unit/test_variants.c runs
 * every variant against the reference whatever this machine would pick).
 */
#ifndef LOOM_BASE_VARIANTS_H
#define LOOM_BASE_VARIANTS_H

#include "loom.h"

typedef enum loom_variant_family {
    /* bf16-weight GEMM (M >= LOOM_GEMM_MIN_M): 0 native = vdpbf16ps on bf16
     * panels (x rounded to bf16), 1 widen = W widened to f32 panels, f32 FMA */
    LOOM_VF_GEMM_BF16 = 0,
    /* q4_0/q4_1 weights against f32 activations at M = 1: 0 bf16 = products
     * of x split in two bf16 halves, 1 fma = blocks dequantized to f32, FMA */
    LOOM_VF_GEMV_Q4_FULL,
    /* attention over bf16 data (bf16 q/K/V prefill, bf16 decode caches,
     * inner_precise 1): 0 native = vdpbf16ps, 1 widen = widened to f32, FMA */
    LOOM_VF_ATTN_BF16,
    /* decode attention over i8 caches: 0 vnni = 16-bit integer products
     * (vpdpwssd), 1 widen = K and V widened to f32, FMA */
    LOOM_VF_ATTN_I8,
    LOOM_VF_COUNT
} loom_variant_family;

#define LOOM_VARIANTS_MAX 2   /* variants per family */
/* Bumped when a family's kernels change enough to reorder its variants: wisdom
 * measured by other kernels (another revision or loom version) is measured again. */
#define LOOM_VARIANTS_REVISION 1

/* How the current choice was made. */
typedef enum loom_variant_source {
    LOOM_VS_DEFAULT = 0,  /* nothing chose: variant 0 where available */
    LOOM_VS_MEASURED,     /* timed in this process */
    LOOM_VS_WISDOM,       /* read from the wisdom file */
    LOOM_VS_FORCED,       /* LOOM_VARIANTS or loom_variant_set */
} loom_variant_source;

/* The variant in use (a relaxed atomic load: cheap enough for a kernel's
 * dispatch). Always one this CPU can run. */
int loom_variant(loom_variant_family f);
/* Sets the choice; LOOM_ERR_UNSUPPORTED when this CPU cannot run v (the
 * choice is unchanged), LOOM_ERR_INVALID_ARG for an unknown f or v. Set it
 * while no kernel of the family runs. */
loom_status loom_variant_set(loom_variant_family f, int v, loom_variant_source src);
loom_variant_source loom_variant_source_of(loom_variant_family f);
const char *loom_variant_source_name(loom_variant_source s);
/* 1 when this CPU runs variant v of f (variant 0 needs AVX512_BF16, or
 * AVX512_VNNI for attention.i8; the others run everywhere). */
int loom_variant_available(loom_variant_family f, int v);
/* The default: variant 0 where this CPU runs it, else variant 1. */
int loom_variant_default(loom_variant_family f);
/* Number of variants, and names: "gemm.bf16" / "native". NULL when out of range. */
int loom_variant_count(loom_variant_family f);
const char *loom_variant_family_name(loom_variant_family f);
const char *loom_variant_name(loom_variant_family f, int v);
/* Lookup by name; -1 when unknown. */
int loom_variant_family_parse(const char *name);
int loom_variant_parse(loom_variant_family f, const char *name);

/* loom_variants_force (loom.h) applies a forcing list; entries before a bad
 * one stay applied. */
/* 1 when LOOM_VARIANTS forced f (read once): measurement leaves it alone. */
int loom_variant_env_forced(loom_variant_family f);

#endif
