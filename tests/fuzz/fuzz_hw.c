/* libFuzzer target: the hardware-profile parser of `loom plan` (YAML) on
 * arbitrary bytes; `auto` values are not measured (measure = 0). A profile
 * that parses must be sane (non-negative finite numbers, a name, nothing
 * measured), parse the same again, and give roofline times that are not NaN,
 * non-negative and grow with the work; the values given are in range, so a
 * given bandwidth gives finite memory-bound times (an `auto` one is 0). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "graph/hw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    loom_hw_profile hw, again;
    if (loom_hw_parse((const char *)data, size, "fuzz.yaml", 0, &hw) != LOOM_OK) return 0;
    if (hw.name[0] == '\0' || hw.measured || hw.cores < 0) __builtin_trap();
    const double nums[] = {hw.vector_flops, hw.bandwidth, hw.l1_bytes, hw.l2_bytes, hw.l3_bytes};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        if (!isfinite(nums[i]) || nums[i] < 0) __builtin_trap();
    for (int p = 0; p < LOOM_HW_PREC_COUNT; p++)
        if (!isfinite(hw.peak_flops[p]) || hw.peak_flops[p] < 0) __builtin_trap();
    if (loom_hw_parse((const char *)data, size, "fuzz.yaml", 0, &again) != LOOM_OK ||
        memcmp(&hw, &again, sizeof hw) != 0)
        __builtin_trap();
    for (int p = 0; p < LOOM_HW_PREC_COUNT; p++) {
        double t1 = loom_hw_time(&hw, 1, (loom_hw_prec)p, 1e9, 1e9);
        double t2 = loom_hw_time(&hw, 1, (loom_hw_prec)p, 2e9, 2e9);
        if (isnan(t1) || t1 < 0 || t2 < t1) __builtin_trap();
    }
    double tv = loom_hw_time(&hw, 0, LOOM_HW_F32, 1e9, 1e6);
    if (isnan(tv) || tv < 0) __builtin_trap();
    if (hw.bandwidth > 0 && (hw.bandwidth < 1e6 || !isfinite(loom_hw_time(&hw, 0, LOOM_HW_F32, 0, 1e12))))
        __builtin_trap();
    return 0;
}
