/* libFuzzer target: the wisdom file parser (graph/wisdom.c, libcjson) on
 * arbitrary bytes. A file that parses must give choices that name variants
 * of their family, timings that are unknown (<= 0) or positive and finite,
 * and, written out again, parse to the same entries. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph/tune.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    loom_wisdom w, again;
    if (loom_wisdom_parse((const char *)data, size, &w) != LOOM_OK) return 0;
    for (int f = 0; f < LOOM_VF_COUNT; f++) {
        const loom_wisdom_entry *e = &w.fam[f];
        if (!e->present) continue;
        if (!loom_variant_name((loom_variant_family)f, e->choice)) __builtin_trap();
        for (int v = 0; v < LOOM_VARIANTS_MAX; v++)
            if (!isfinite(e->us[v]) || (e->us[v] > 0 && e->us[v] >= 1e9)) __builtin_trap();
    }
    char *text = loom_wisdom_format(&w, NULL);
    if (!text) return 0;
    if (loom_wisdom_parse(text, strlen(text), &again) != LOOM_OK) __builtin_trap();
    for (int f = 0; f < LOOM_VF_COUNT; f++)
        if (again.fam[f].present != w.fam[f].present || again.fam[f].choice != w.fam[f].choice)
            __builtin_trap();
    free(text);
    return 0;
}
