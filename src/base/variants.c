/* Kernel variants: the process-wide choices and their names (variants.h). */
#include "base/variants.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/status.h"

static const struct {
    const char *name;
    const char *variants[LOOM_VARIANTS_MAX];
} families[LOOM_VF_COUNT] = {
    [LOOM_VF_GEMM_BF16] = {"gemm.bf16", {"native", "widen"}},
    [LOOM_VF_GEMV_Q4_FULL] = {"gemv.q4_full", {"bf16", "fma"}},
    [LOOM_VF_ATTN_BF16] = {"attention.bf16", {"native", "widen"}},
    [LOOM_VF_ATTN_I8] = {"attention.i8", {"vnni", "widen"}},
};

static _Atomic int choice[LOOM_VF_COUNT];
static _Atomic int source[LOOM_VF_COUNT];

static int valid_family(loom_variant_family f) { return (unsigned)f < LOOM_VF_COUNT; }

int loom_variant_count(loom_variant_family f) {
    if (!valid_family(f)) return 0;
    int n = 0;
    while (n < LOOM_VARIANTS_MAX && families[f].variants[n]) n++;
    return n;
}

const char *loom_variant_family_name(loom_variant_family f) {
    return valid_family(f) ? families[f].name : NULL;
}

const char *loom_variant_name(loom_variant_family f, int v) {
    return v >= 0 && v < loom_variant_count(f) ? families[f].variants[v] : NULL;
}

int loom_variant_family_parse(const char *name) {
    for (int f = 0; f < LOOM_VF_COUNT; f++)
        if (name && strcmp(name, families[f].name) == 0) return f;
    return -1;
}

int loom_variant_parse(loom_variant_family f, const char *name) {
    for (int v = 0; v < loom_variant_count(f); v++)
        if (name && strcmp(name, families[f].variants[v]) == 0) return v;
    return -1;
}

int loom_variant_available(loom_variant_family f, int v) {
    if (v < 0 || v >= loom_variant_count(f)) return 0;
    if (v != 0) return 1; /* the widening variants need only AVX-512 F/BW/VL (or run below it) */
    const loom_cpu_features *c = loom_cpu_get();
    return f == LOOM_VF_ATTN_I8 ? c->avx512_vnni : c->avx512_bf16;
}

int loom_variant_default(loom_variant_family f) { return loom_variant_available(f, 0) ? 0 : 1; }

const char *loom_variant_source_name(loom_variant_source s) {
    switch (s) {
    case LOOM_VS_DEFAULT: return "default";
    case LOOM_VS_MEASURED: return "measured";
    case LOOM_VS_WISDOM: return "wisdom";
    case LOOM_VS_FORCED: return "forced";
    }
    return "?";
}

static void apply_env_once(void);

int loom_variant(loom_variant_family f) {
    apply_env_once();
    return valid_family(f) ? atomic_load_explicit(&choice[f], memory_order_relaxed) : 0;
}

loom_variant_source loom_variant_source_of(loom_variant_family f) {
    apply_env_once();
    return valid_family(f) ? (loom_variant_source)atomic_load(&source[f]) : LOOM_VS_DEFAULT;
}

static loom_status set_choice(loom_variant_family f, int v, loom_variant_source src) {
    LOOM_RETURN_IF(!valid_family(f), LOOM_ERR_INVALID_ARG, "kernel variants: unknown family %d", (int)f);
    LOOM_RETURN_IF(v < 0 || v >= loom_variant_count(f), LOOM_ERR_INVALID_ARG,
                   "kernel variants: %s has no variant %d", families[f].name, v);
    LOOM_RETURN_IF(!loom_variant_available(f, v), LOOM_ERR_UNSUPPORTED,
                   "kernel variants: this CPU cannot run %s=%s", families[f].name, families[f].variants[v]);
    atomic_store(&choice[f], v);
    atomic_store(&source[f], (int)src);
    return LOOM_OK;
}

loom_status loom_variant_set(loom_variant_family f, int v, loom_variant_source src) {
    apply_env_once();
    return set_choice(f, v, src);
}

static loom_status force_list(const char *spec, int *forced) {
    char buf[512];
    LOOM_RETURN_IF(strlen(spec) >= sizeof buf, LOOM_ERR_INVALID_ARG, "kernel variants: the list is too long");
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *e = strtok_r(buf, ", ", &save); e; e = strtok_r(NULL, ", ", &save)) {
        char *eq = strchr(e, '=');
        LOOM_RETURN_IF(!eq, LOOM_ERR_INVALID_ARG, "kernel variants: '%s' is not family=variant", e);
        *eq = '\0';
        int f = loom_variant_family_parse(e);
        if (f < 0) {
            char known[160] = "";
            for (int k = 0, n = 0; k < LOOM_VF_COUNT && n >= 0 && (size_t)n < sizeof known; k++)
                n += snprintf(known + n, sizeof known - (size_t)n, "%s%s", k ? ", " : "", families[k].name);
            return loom_set_error(LOOM_ERR_INVALID_ARG, "kernel variants: unknown family '%s' (%s)", e, known);
        }
        int v = loom_variant_parse((loom_variant_family)f, eq + 1);
        LOOM_RETURN_IF(v < 0, LOOM_ERR_INVALID_ARG, "kernel variants: %s has no variant '%s' (%s, %s)", e, eq + 1,
                       families[f].variants[0], families[f].variants[1]);
        loom_status s = set_choice((loom_variant_family)f, v, LOOM_VS_FORCED);
        if (s != LOOM_OK) return s;
        if (forced) forced[f] = 1;
    }
    return LOOM_OK;
}

loom_status loom_variants_force(const char *spec) {
    apply_env_once();
    LOOM_RETURN_IF(!spec, LOOM_ERR_INVALID_ARG, "kernel variants: no list");
    return force_list(spec, NULL);
}

static int env_forced[LOOM_VF_COUNT];
static atomic_int env_state; /* 0 unread, 1 reading, 2 done */

/* The defaults and LOOM_VARIANTS are set on first use; a bad list is reported once and the
 * entries before the bad one stay in force. */
static void apply_env_once(void) {
    if (atomic_load_explicit(&env_state, memory_order_acquire) == 2) return;
    int expect = 0;
    if (!atomic_compare_exchange_strong(&env_state, &expect, 1)) {
        while (atomic_load_explicit(&env_state, memory_order_acquire) != 2) {
        }
        return;
    }
    for (int f = 0; f < LOOM_VF_COUNT; f++) /* the default: variant 0 where the CPU has it */
        atomic_store(&choice[f], loom_variant_default((loom_variant_family)f));
    const char *spec = getenv("LOOM_VARIANTS");
    if (spec && *spec && force_list(spec, env_forced) != LOOM_OK)
        fprintf(stderr, "loom: LOOM_VARIANTS ignored from the bad entry on: %s\n", loom_last_error());
    atomic_store_explicit(&env_state, 2, memory_order_release);
}

int loom_variant_env_forced(loom_variant_family f) {
    apply_env_once();
    return valid_family(f) ? env_forced[f] : 0;
}
