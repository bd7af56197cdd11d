/* Kernel variants and the wisdom file (base/variants.h, graph/tune.h):
 * names and forcing, the timing that chooses, and the file that keeps the
 * choice (written, read back, rewritten when corrupt, left alone read-only,
 * ignored when off). That every variant computes what the reference does is
 * tested by the kernel tests, which CTest runs again on the non-default
 * variants (tests/CMakeLists.txt, "*.widen"). */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cpu.h"
#include "base/file.h"
#include "base/variants.h"
#include "graph/tune.h"


static char dir[256];

static void path_in_dir(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", dir, name); }

static void test_names_and_forcing(void) {
    CHECK(loom_variant_count(LOOM_VF_GEMM_BF16) == 2);
    CHECK(strcmp(loom_variant_family_name(LOOM_VF_ATTN_I8), "attention.i8") == 0);
    CHECK(loom_variant_family_parse("gemv.q4_full") == LOOM_VF_GEMV_Q4_FULL);
    CHECK(loom_variant_family_parse("gemm") == -1 && loom_variant_family_parse(NULL) == -1);
    CHECK(loom_variant_parse(LOOM_VF_GEMM_BF16, "widen") == 1 && loom_variant_parse(LOOM_VF_GEMM_BF16, "x") == -1);
    CHECK(loom_variant_name(LOOM_VF_GEMM_BF16, 2) == NULL && loom_variant_family_name(LOOM_VF_COUNT) == NULL);
    /* the default: the special instructions where the CPU has them */
    loom_tune_reset_for_tests();
    CHECK(loom_variant(LOOM_VF_GEMM_BF16) == (loom_cpu_get()->avx512_bf16 ? 0 : 1));
    CHECK(loom_variant(LOOM_VF_ATTN_I8) == (loom_cpu_get()->avx512_vnni ? 0 : 1));
    CHECK(loom_variant_source_of(LOOM_VF_GEMM_BF16) == LOOM_VS_DEFAULT);
    CHECK(loom_variants_force("gemm.bf16=widen, attention.i8=widen") == LOOM_OK);
    CHECK(loom_variant(LOOM_VF_GEMM_BF16) == 1 && loom_variant(LOOM_VF_ATTN_I8) == 1);
    CHECK(loom_variant_source_of(LOOM_VF_GEMM_BF16) == LOOM_VS_FORCED);
    char buf[256];
    size_t n = loom_variants_describe(buf, sizeof buf);
    CHECK(n == strlen(buf) && strstr(buf, "gemm.bf16=widen") && strstr(buf, "attention.i8=widen"));
    CHECK(loom_variants_describe(buf, 8) == n && strlen(buf) == 7); /* truncated, the length still told */
    CHECK(loom_variants_force("gemm.bf16") == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "family=variant"));
    CHECK(loom_variants_force("nope=widen") == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "nope"));
    CHECK(loom_variants_force("gemm.bf16=fast") == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "fast"));
    CHECK(loom_variant_set(LOOM_VF_GEMM_BF16, 2, LOOM_VS_FORCED) == LOOM_ERR_INVALID_ARG);
    if (!loom_cpu_get()->avx512_bf16)
        CHECK(loom_variant_set(LOOM_VF_GEMM_BF16, 0, LOOM_VS_FORCED) == LOOM_ERR_UNSUPPORTED);
    loom_tune_reset_for_tests();
}

static int file_exists(const char *p) { return access(p, F_OK) == 0; }

static void test_wisdom_file(void) {
    char path[512];
    path_in_dir(path, sizeof path, "sub/wisdom.json");
    setenv("LOOM_WISDOM", path, 1);
    loom_tune_reset_for_tests();
    int choice_possible = loom_cpu_isa() >= LOOM_ISA_AVX512;
    CHECK(loom_tune(LOOM_TUNE_GEMM_BF16 | LOOM_TUNE_ATTN_I8, 0) == LOOM_OK);
    if (!choice_possible) { /* below AVX-512 nothing is timed or written */
        CHECK(!file_exists(path));
        return;
    }
    CHECK(file_exists(path)); /* its directory made */
    CHECK(loom_variant_source_of(LOOM_VF_GEMM_BF16) == LOOM_VS_MEASURED);
    CHECK(loom_variant_source_of(LOOM_VF_GEMV_Q4_FULL) == LOOM_VS_DEFAULT); /* not asked for */
    CHECK(loom_tune_seconds() > 0 && (SANITIZED || loom_tune_seconds() < 2.0)); /* the budget: optimised builds */
    loom_wisdom w;
    CHECK(loom_wisdom_read(path, &w) == LOOM_OK);
    CHECK(w.fam[LOOM_VF_GEMM_BF16].present && w.fam[LOOM_VF_ATTN_I8].present && !w.fam[LOOM_VF_ATTN_BF16].present);
    CHECK(w.fam[LOOM_VF_GEMM_BF16].choice == loom_variant(LOOM_VF_GEMM_BF16));
    CHECK(w.fam[LOOM_VF_GEMM_BF16].us[1] > 0); /* widen runs everywhere: timed */
    /* the choice is the fastest unless within the margin of the default */
    const loom_wisdom_entry *g = &w.fam[LOOM_VF_GEMM_BF16];
    if (g->us[0] > 0) CHECK(g->choice == (g->us[1] < 0.97 * g->us[0] ? 1 : 0));

    /* a second process (reset) reads the file: nothing timed */
    loom_tune_reset_for_tests();
    CHECK(loom_tune(LOOM_TUNE_GEMM_BF16, 0) == LOOM_OK);
    CHECK(loom_variant_source_of(LOOM_VF_GEMM_BF16) == LOOM_VS_WISDOM && loom_tune_seconds() == 0);
    CHECK(loom_variant(LOOM_VF_GEMM_BF16) == g->choice);

    /* a choice written by hand is obeyed (the file is the user's to edit) */
    char text[1024];
    snprintf(text, sizeof text,
             "{\"format\": \"loom-wisdom 1\", \"families\": {\"gemm.bf16\": {\"choice\": \"widen\", "
             "\"kernels\": \"%s r%d\"}, \"future.op\": {\"choice\": \"x\"}}}",
             loom_version(), LOOM_VARIANTS_REVISION);
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0);
    loom_tune_reset_for_tests();
    CHECK(loom_tune(LOOM_TUNE_GEMM_BF16, 0) == LOOM_OK);
    CHECK(loom_variant(LOOM_VF_GEMM_BF16) == 1 && loom_variant_source_of(LOOM_VF_GEMM_BF16) == LOOM_VS_WISDOM);

    /* measured by other kernels: measured again and rewritten */
    f = fopen(path, "w");
    CHECK(f && fputs("{\"format\": \"loom-wisdom 1\", \"families\": {\"gemm.bf16\": {\"choice\": \"widen\", "
                     "\"kernels\": \"0.0.1 r0\"}}}", f) >= 0 && fclose(f) == 0);
    loom_tune_reset_for_tests();
    CHECK(loom_tune(LOOM_TUNE_GEMM_BF16, 0) == LOOM_OK);
    CHECK(loom_variant_source_of(LOOM_VF_GEMM_BF16) == LOOM_VS_MEASURED);
    CHECK(loom_wisdom_read(path, &w) == LOOM_OK && w.fam[LOOM_VF_GEMM_BF16].us[1] > 0);

    /* corrupt: reported, measured again, rewritten whole */
    f = fopen(path, "w");
    CHECK(f && fputs("{\"format\": \"loom-wisdom 1\", \"families\": {", f) >= 0 && fclose(f) == 0);
    loom_tune_reset_for_tests();
    CHECK(loom_tune(LOOM_TUNE_GEMM_BF16, 0) == LOOM_OK);
    CHECK(loom_variant_source_of(LOOM_VF_GEMM_BF16) == LOOM_VS_MEASURED);
    CHECK(loom_wisdom_read(path, &w) == LOOM_OK && w.fam[LOOM_VF_GEMM_BF16].present);

    /* read-only: the default file is read, never written */
    char home[300], ro[600], key[80];
    path_in_dir(home, sizeof home, "cache");
    setenv("XDG_CACHE_HOME", home, 1);
    setenv("LOOM_WISDOM", "readonly", 1);
    loom_cpu_key(key, sizeof key);
    snprintf(ro, sizeof ro, "%s/loom/wisdom-%s.json", home, key);
    char got[1024];
    CHECK(loom_wisdom_mode_get(got, sizeof got) == LOOM_WISDOM_READONLY && strcmp(got, ro) == 0);
    loom_tune_reset_for_tests();
    CHECK(loom_tune(LOOM_TUNE_ATTN_I8, 0) == LOOM_OK);
    CHECK(loom_variant_source_of(LOOM_VF_ATTN_I8) == LOOM_VS_MEASURED && !file_exists(ro));

    /* off: nothing timed, nothing written, the defaults */
    setenv("LOOM_WISDOM", "off", 1);
    loom_tune_reset_for_tests();
    CHECK(loom_tune(LOOM_TUNE_ALL, 0) == LOOM_OK);
    CHECK(loom_tune_seconds() == 0 && loom_variant_source_of(LOOM_VF_GEMM_BF16) == LOOM_VS_DEFAULT);
    CHECK(!file_exists(ro));
    unsetenv("XDG_CACHE_HOME");

    /* an unwritable place: the choice holds for the process, no error */
    setenv("LOOM_WISDOM", "/proc/loom-no-such/wisdom.json", 1);
    loom_tune_reset_for_tests();
    CHECK(loom_tune(LOOM_TUNE_GEMM_BF16, 0) == LOOM_OK);
    CHECK(loom_variant_source_of(LOOM_VF_GEMM_BF16) == LOOM_VS_MEASURED);
    setenv("LOOM_WISDOM", "off", 1);
    loom_tune_reset_for_tests();
}

static void test_parse(void) {
    loom_wisdom w;
    static const char *bad[] = {"", "[]", "{}", "{\"format\": \"loom-wisdom 2\", \"families\": {}}",
                                "{\"format\": \"loom-wisdom 1\", \"families\": []}", "nul\0l"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(loom_wisdom_parse(bad[i], strlen(bad[i]), &w) == LOOM_ERR_FORMAT, "case %zu", i);
    char ok[512];
    snprintf(ok, sizeof ok,
             "{\"format\": \"loom-wisdom 1\", \"families\": {\"attention.bf16\": {\"choice\": \"widen\", "
             "\"us\": {\"native\": -3, \"widen\": 12.5}, \"kernels\": \"%s r%d\"}, \"gemm.bf16\": 7, "
             "\"gemv.q4_full\": {\"choice\": \"turbo\", \"kernels\": \"%s r%d\"}}}",
             loom_version(), LOOM_VARIANTS_REVISION, loom_version(), LOOM_VARIANTS_REVISION);
    CHECK(loom_wisdom_parse(ok, strlen(ok), &w) == LOOM_OK);
    CHECK(w.fam[LOOM_VF_ATTN_BF16].present && w.fam[LOOM_VF_ATTN_BF16].choice == 1);
    CHECK(w.fam[LOOM_VF_ATTN_BF16].us[0] < 0 && w.fam[LOOM_VF_ATTN_BF16].us[1] == 12.5);
    CHECK(!w.fam[LOOM_VF_GEMM_BF16].present && !w.fam[LOOM_VF_GEMV_Q4_FULL].present);
    /* what is written parses back to the same */
    char *text = loom_wisdom_format(&w, NULL);
    loom_wisdom back;
    CHECK(text && loom_wisdom_parse(text, strlen(text), &back) == LOOM_OK);
    CHECK(back.fam[LOOM_VF_ATTN_BF16].choice == 1 && back.fam[LOOM_VF_ATTN_BF16].us[1] == 12.5);
    free(text);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/loom-test-variants-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    RUN_TEST(test_names_and_forcing);
    RUN_TEST(test_parse);
    RUN_TEST(test_wisdom_file);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return TEST_SUMMARY();
}
