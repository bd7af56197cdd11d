/* libFuzzer target: the hardware-profile parser of `loom plan` (YAML) on
 * arbitrary bytes; `auto` values are not measured (measure = 0). Parsed
 * profiles go through the roofline so every field is read. */
#include <stdint.h>
#include <string.h>

#include "graph/hw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    loom_hw_profile hw;
    if (loom_hw_parse((const char *)data, size, "fuzz.yaml", 0, &hw) == LOOM_OK) {
        volatile double t = 0;
        for (int p = 0; p < LOOM_HW_PREC_COUNT; p++)
            t += loom_hw_time(&hw, 1, (loom_hw_prec)p, 1e9, 1e9) + loom_hw_time(&hw, 0, p, 1e9, 1e6);
        (void)t;
        if (strlen(hw.name) >= sizeof hw.name) __builtin_trap();
    }
    return 0;
}
