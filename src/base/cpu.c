/* CPU feature detection (cpuid + xgetbv) and the ISA level in use.
 *
 * A feature counts only when the CPU has it and the OS saves the register
 * state it needs (XCR0): a kernel using ZMM registers under an OS that does
 * not preserve them would be corrupted by the first context switch. */
#define _GNU_SOURCE
#include "base/cpu.h"
#include "base/status.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#define LOOM_X86 1
#include <cpuid.h>
#endif

static loom_cpu_features g_features;
static loom_isa g_best = LOOM_ISA_GENERIC;
static atomic_int g_isa = LOOM_ISA_GENERIC;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static const char *const isa_names[] = {
    [LOOM_ISA_REF] = "ref",
    [LOOM_ISA_GENERIC] = "generic",
    [LOOM_ISA_AVX2] = "avx2",
    [LOOM_ISA_AVX512] = "avx512",
};
_Static_assert(sizeof(isa_names) / sizeof(isa_names[0]) == LOOM_ISA_COUNT,
               "isa_names must name every loom_isa");

#ifdef LOOM_X86
static void cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
}

/* Inline asm rather than _xgetbv(), which would need -mxsave on this file. */
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Deterministic cache parameters (Intel leaf 4, AMD leaf 0x8000001D share the
 * layout): size = ways * partitions * line * sets. Returns 1 if anything was found. */
static int caches_from_leaf(unsigned leaf, loom_cpu_features *f) {
    int found = 0;
    for (unsigned i = 0; i < 16; i++) {
        unsigned r[4];
        cpuid(leaf, i, r);
        unsigned type = r[0] & 0x1f;
        if (type == 0) break;            /* no more caches */
        if (type == 2) continue;         /* instruction cache */
        unsigned level = (r[0] >> 5) & 0x7;
        uint64_t size = (uint64_t)((r[1] >> 22) + 1) * (((r[1] >> 12) & 0x3ff) + 1) *
                        ((r[1] & 0xfff) + 1) * ((uint64_t)r[2] + 1);
        if (size > 0x7fffffff) size = 0x7fffffff;
        if (level == 1) f->l1d_bytes = (int)size;
        if (level == 2) f->l2_bytes = (int)size;
        if (level == 3) f->l3_bytes = (int)size;
        found = 1;
    }
    return found;
}

static void detect_x86(loom_cpu_features *f) {
    unsigned r[4];
    cpuid(0, 0, r);
    unsigned max_leaf = r[0];
    int intel = memcmp(&r[1], "Genu", 4) == 0;  /* "GenuineIntel": leaf 4 is Intel-only */
    if (max_leaf < 1) return;

    memcpy(f->vendor, &r[1], 4); /* ebx, edx, ecx: "AuthenticAMD", "GenuineIntel" */
    memcpy(f->vendor + 4, &r[3], 4);
    memcpy(f->vendor + 8, &r[2], 4);
    f->vendor[12] = '\0';

    cpuid(1, 0, r);
    unsigned ecx1 = r[2], fam = (r[0] >> 8) & 0xf, mod = (r[0] >> 4) & 0xf;
    f->family = (int)(fam == 0xf ? fam + ((r[0] >> 20) & 0xff) : fam);
    f->model = (int)(fam == 0x6 || fam == 0xf ? mod | (((r[0] >> 16) & 0xf) << 4) : mod);
    int osxsave = (ecx1 >> 27) & 1, avx = (ecx1 >> 28) & 1;
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    int os_ymm = osxsave && (xcr0 & 0x6) == 0x6;           /* XMM + YMM state */
    int os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;          /* opmask + ZMM hi256 + hi16 */

    if (os_ymm && avx) {
        f->fma = (ecx1 >> 12) & 1;
        f->f16c = (ecx1 >> 29) & 1;
    }
    if (max_leaf >= 7) {
        cpuid(7, 0, r);
        unsigned max_sub7 = r[0], ebx7 = r[1], ecx7 = r[2];
        if (os_ymm && avx) f->avx2 = (ebx7 >> 5) & 1;
        if (os_zmm) {
            f->avx512f = (ebx7 >> 16) & 1;
            f->avx512bw = (ebx7 >> 30) & 1;
            f->avx512vl = (ebx7 >> 31) & 1;
            f->avx512_vnni = f->avx512f && ((ecx7 >> 11) & 1);
            if (max_sub7 >= 1) {
                cpuid(7, 1, r);
                f->avx512_bf16 = f->avx512f && ((r[0] >> 5) & 1);
            }
        }
    }

    cpuid(0x80000000u, 0, r);
    unsigned max_ext = r[0];
    if (max_ext >= 0x80000004u) { /* 48 bytes of brand string, leading blanks dropped */
        char b[49];
        for (unsigned i = 0; i < 3; i++) {
            cpuid(0x80000002u + i, 0, r);
            memcpy(b + 16 * i, r, 16);
        }
        b[48] = '\0';
        const char *p = b;
        while (*p == ' ') p++;
        snprintf(f->brand, sizeof f->brand, "%s", p);
        for (size_t n = strlen(f->brand); n > 0 && f->brand[n - 1] == ' '; n--) f->brand[n - 1] = '\0';
    }

    if (intel && max_leaf >= 4 && caches_from_leaf(4, f)) return;
    if (max_ext >= 0x8000001du) {
        cpuid(0x80000001u, 0, r);
        if ((r[2] >> 22) & 1) caches_from_leaf(0x8000001du, f);  /* topology extensions */
    }
}
#endif /* LOOM_X86 */

static int sysconf_int(int name) {
    long v = sysconf(name);
    return v > 0 && v <= 0x7fffffff ? (int)v : 0;
}

static void detect_caches_fallback(loom_cpu_features *f) {
#ifdef _SC_LEVEL1_DCACHE_SIZE
    if (!f->l1d_bytes) f->l1d_bytes = sysconf_int(_SC_LEVEL1_DCACHE_SIZE);
    if (!f->l2_bytes) f->l2_bytes = sysconf_int(_SC_LEVEL2_CACHE_SIZE);
    if (!f->l3_bytes) f->l3_bytes = sysconf_int(_SC_LEVEL3_CACHE_SIZE);
#endif
    /* FALLBACK DEFAULTS, not measured: typical of current x86 server cores, so
     * that tile-size choices stay sane where nothing could be detected. */
    if (!f->l1d_bytes) f->l1d_bytes = 32 << 10;
    if (!f->l2_bytes) f->l2_bytes = 1 << 20;
    if (!f->l3_bytes) f->l3_bytes = 8 << 20;
}

static int isa_supported(loom_isa isa) {
    return (unsigned)isa < LOOM_ISA_COUNT && isa <= g_best;
}

static void cpu_init(void) {
    loom_cpu_features *f = &g_features;
    memset(f, 0, sizeof *f);
#ifdef LOOM_X86
    detect_x86(f);
#endif
    detect_caches_fallback(f);

    /* F16C is required at the AVX2 level: every AVX2 CPU has it, and f16
     * weight kernels can then rely on it. */
    g_best = LOOM_ISA_GENERIC;
    if (f->avx2 && f->fma && f->f16c) g_best = LOOM_ISA_AVX2;
    if (g_best == LOOM_ISA_AVX2 && f->avx512f && f->avx512bw && f->avx512vl)
        g_best = LOOM_ISA_AVX512;

    loom_isa isa = g_best;
    const char *env = getenv("LOOM_ISA");
    if (env && *env) {
        loom_isa want = g_best;
        if (loom_isa_parse(env, &want) != LOOM_OK) {
            fprintf(stderr, "loom: LOOM_ISA=%s is not one of ref, generic, avx2, avx512; "
                    "using %s\n", env, isa_names[g_best]);
        } else if (!isa_supported(want)) {
            fprintf(stderr, "loom: LOOM_ISA=%s is not supported by this CPU; using %s\n",
                    env, isa_names[g_best]);
        } else {
            isa = want;
        }
    }
    atomic_store(&g_isa, (int)isa);
}

static void ensure_init(void) {
    pthread_once(&g_once, cpu_init);
}

const loom_cpu_features *loom_cpu_get(void) {
    ensure_init();
    return &g_features;
}

loom_isa loom_cpu_best_isa(void) {
    ensure_init();
    return g_best;
}

loom_isa loom_cpu_isa(void) {
    ensure_init();
    return (loom_isa)atomic_load(&g_isa);
}

loom_status loom_cpu_set_isa(loom_isa isa) {
    ensure_init();  /* so a later lazy init cannot overwrite the override */
    LOOM_RETURN_IF((unsigned)isa >= LOOM_ISA_COUNT, LOOM_ERR_INVALID_ARG,
                   "loom_cpu_set_isa: %d is not a loom_isa", (int)isa);
    LOOM_RETURN_IF(!isa_supported(isa), LOOM_ERR_UNSUPPORTED,
                   "loom_cpu_set_isa: this CPU cannot run %s (best is %s)",
                   isa_names[isa], isa_names[g_best]);
    atomic_store(&g_isa, (int)isa);
    return LOOM_OK;
}

const char *loom_isa_name(loom_isa isa) {
    return (unsigned)isa < LOOM_ISA_COUNT ? isa_names[isa] : "unknown";
}

const char *loom_cpu_isa_name(void) { return loom_isa_name(loom_cpu_isa()); }

loom_status loom_isa_parse(const char *name, loom_isa *out) {
    LOOM_RETURN_IF(!name || !out, LOOM_ERR_INVALID_ARG, "loom_isa_parse: NULL argument");
    for (int i = 0; i < LOOM_ISA_COUNT; i++) {
        if (strcmp(name, isa_names[i]) == 0) {
            *out = (loom_isa)i;
            return LOOM_OK;
        }
    }
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "unknown ISA \"%s\" (expected ref, generic, avx2 or avx512)", name);
}

int loom_cpu_count(void) {
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
