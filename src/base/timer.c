/* Monotonic clock: unaffected by wall-clock adjustments, so safe for intervals. */
#include "base/timer.h"

#include <time.h>

uint64_t loom_time_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double loom_time_s(void) {
    return (double)loom_time_ns() * 1e-9;
}
