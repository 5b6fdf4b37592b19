/* Monotonic clock helpers. */
#ifndef GS_COMMON_TIME_H
#define GS_COMMON_TIME_H

#include <stdint.h>
#include <time.h>

/** Monotonic time in nanoseconds. */
static inline uint64_t gs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/** Monotonic time in seconds as a double. */
static inline double gs_now_s(void)
{
    return (double)gs_now_ns() * 1e-9;
}

#endif
