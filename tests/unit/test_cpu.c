/* CPU detection and ISA selection.
 *
 * The LOOM_ISA environment override is read once, lazily, on first use, so a
 * setenv() inside this process could not reach it reliably (another call may
 * already have initialised). Its building blocks (loom_isa_parse,
 * loom_cpu_set_isa) are tested in-process, and the variable itself by
 * re-running this binary with LOOM_ISA set (Linux: /proc/self/exe). */
#include "check.h"
#include "base/cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_features_consistent(void) {
    const loom_cpu_features *f = loom_cpu_get();
    CHECK(f != NULL);
    CHECK(f == loom_cpu_get());
    fprintf(stderr, "  avx2=%d fma=%d f16c=%d avx512f=%d bw=%d vl=%d bf16=%d vnni=%d\n"
            "  L1d=%d L2=%d L3=%d bytes; best=%s, in use=%s\n",
            f->avx2, f->fma, f->f16c, f->avx512f, f->avx512bw, f->avx512vl, f->avx512_bf16,
            f->avx512_vnni, f->l1d_bytes, f->l2_bytes, f->l3_bytes,
            loom_isa_name(loom_cpu_best_isa()), loom_isa_name(loom_cpu_isa()));
    /* Every AVX-512 CPU has AVX2 and FMA; extensions imply the foundation. */
    if (f->avx512f) CHECK(f->avx2 && f->fma && f->f16c);
    if (f->avx512bw || f->avx512vl || f->avx512_bf16 || f->avx512_vnni) CHECK(f->avx512f);
    if (f->avx2) CHECK(f->fma);
    CHECK(f->l1d_bytes >= 4096 && f->l1d_bytes <= (1 << 22));
    CHECK(f->l2_bytes >= f->l1d_bytes);
    CHECK(f->l3_bytes > 0);

    loom_isa best = loom_cpu_best_isa();
    CHECK(best >= LOOM_ISA_GENERIC && best < LOOM_ISA_COUNT);
    if (best >= LOOM_ISA_AVX2) CHECK(f->avx2 && f->fma);
    if (best >= LOOM_ISA_AVX512) CHECK(f->avx512f && f->avx512bw && f->avx512vl);
    if (f->avx2 && f->fma && f->f16c) CHECK(best >= LOOM_ISA_AVX2);
#if defined(__x86_64__) && defined(__AVX2__)
    CHECK(best >= LOOM_ISA_AVX2);  /* this binary itself was built to need AVX2 */
#endif
    loom_isa cur = loom_cpu_isa();
    CHECK(cur >= LOOM_ISA_REF && cur <= best);
}

/* The identity fields: terminated strings, and on Linux/x86 the same family and
 * model as the kernel's /proc/cpuinfo (which decodes cpuid leaf 1 itself). */
static void test_identity(void) {
    const loom_cpu_features *f = loom_cpu_get();
    CHECK(memchr(f->vendor, '\0', sizeof f->vendor) != NULL);
    CHECK(memchr(f->brand, '\0', sizeof f->brand) != NULL);
    CHECK(f->brand[0] != ' ');
    fprintf(stderr, "  vendor '%s' family %d model %d brand '%s'\n", f->vendor, f->family, f->model, f->brand);
#if defined(__x86_64__)
    CHECK(strlen(f->vendor) == 12); /* cpuid leaf 0: twelve characters */
    CHECK(f->family >= 3 && f->family <= 0xf + 0xff);
    CHECK(f->model >= 0 && f->model <= 0xff);
    FILE *ci = fopen("/proc/cpuinfo", "r");
    if (!ci) return; /* not Linux: nothing to compare with */
    char line[512];
    int fam = -1, mod = -1;
    while (fgets(line, sizeof line, ci) && (fam < 0 || mod < 0)) {
        const char *colon = strchr(line, ':');
        if (!colon) continue;
        if (strncmp(line, "cpu family", 10) == 0 && fam < 0) fam = atoi(colon + 1);
        else if (strncmp(line, "model\t", 6) == 0 && mod < 0) mod = atoi(colon + 1);
    }
    fclose(ci);
    if (fam >= 0) CHECK(f->family == fam);
    if (mod >= 0) CHECK(f->model == mod);
#endif
}

static void test_parse(void) {
    const char *names[] = {"ref", "generic", "avx2", "avx512"};
    for (int i = 0; i < LOOM_ISA_COUNT; i++) {
        loom_isa got = LOOM_ISA_COUNT;
        CHECK(loom_isa_parse(names[i], &got) == LOOM_OK);
        CHECK(got == (loom_isa)i);
        CHECK(strcmp(loom_isa_name((loom_isa)i), names[i]) == 0);
    }
    loom_isa got = LOOM_ISA_AVX2;
    CHECK(loom_isa_parse("sse9", &got) == LOOM_ERR_INVALID_ARG);
    CHECK(got == LOOM_ISA_AVX2);  /* untouched on error */
    CHECK(strstr(loom_last_error(), "sse9") != NULL);
    CHECK(loom_isa_parse("", &got) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_isa_parse("AVX2x", &got) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_isa_parse(NULL, &got) == LOOM_ERR_INVALID_ARG);
    CHECK(strcmp(loom_isa_name(LOOM_ISA_COUNT), "unknown") == 0);
}

static void test_set_isa(void) {
    loom_isa before = loom_cpu_isa(), best = loom_cpu_best_isa();
    for (int i = 0; i < LOOM_ISA_COUNT; i++) {
        loom_status s = loom_cpu_set_isa((loom_isa)i);
        if (i <= (int)best) {
            CHECK(s == LOOM_OK);
            CHECK(loom_cpu_isa() == (loom_isa)i);
        } else {
            CHECK(s == LOOM_ERR_UNSUPPORTED);
            CHECK(loom_cpu_isa() != (loom_isa)i);
        }
    }
    CHECK(loom_cpu_set_isa(LOOM_ISA_COUNT) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_cpu_set_isa((loom_isa)-1) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_cpu_set_isa(before) == LOOM_OK);
    CHECK(loom_cpu_isa() == before);
}

/* Child mode: report through the exit code whether the level in use is `want`. */
static int child_expect(const char *want) {
    loom_isa w;
    if (loom_isa_parse(want, &w) != LOOM_OK) return 2;
    return loom_cpu_isa() == w ? 0 : 1;
}

/* Runs this binary with LOOM_ISA=value; returns 1 when the child saw `expect`. */
static int run_with_env(const char *value, const char *expect) {
#ifdef __linux__
    pid_t pid = fork();
    if (pid < 0) return 0;
    if (pid == 0) {
        setenv("LOOM_ISA", value, 1);
        char *argv[] = {"test_cpu", "--expect-isa", (char *)expect, NULL};
        execv("/proc/self/exe", argv);
        _exit(3);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return 0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
#else
    (void)value;
    (void)expect;
    return 1;
#endif
}

static void test_env_override(void) {
    loom_isa best = loom_cpu_best_isa();
    for (int i = 0; i < LOOM_ISA_COUNT; i++) {
        const char *name = loom_isa_name((loom_isa)i);
        /* supported: used as asked; above the CPU: falls back to the best level */
        const char *expect = i <= (int)best ? name : loom_isa_name(best);
        CHECK_MSG(run_with_env(name, expect), "LOOM_ISA=%s should give %s", name, expect);
    }
    CHECK_MSG(run_with_env("bogus", loom_isa_name(best)), "LOOM_ISA=bogus should give the best");
    CHECK(run_with_env("", loom_isa_name(best)));
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--expect-isa") == 0) return child_expect(argv[2]);
    RUN_TEST(test_features_consistent);
    RUN_TEST(test_identity);
    RUN_TEST(test_parse);
    RUN_TEST(test_set_isa);
    RUN_TEST(test_env_override);
    return TEST_SUMMARY();
}
