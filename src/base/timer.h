/* Monotonic time. */
#ifndef LOOM_BASE_TIMER_H
#define LOOM_BASE_TIMER_H

#include <stdint.h>

/* Nanoseconds from an arbitrary fixed point (CLOCK_MONOTONIC). */
uint64_t loom_time_ns(void);
/* Seconds, as double. */
double loom_time_s(void);

#endif
