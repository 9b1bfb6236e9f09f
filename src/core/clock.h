/* The monotonic clock every timing in meshtrain reads (step times,
 * profiles, traces, offload and communication waits). */
#ifndef MT_CORE_CLOCK_H
#define MT_CORE_CLOCK_H
#include <stdint.h>
#include <time.h>

/* Monotonic seconds. */
static inline double mt_clock_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Monotonic nanoseconds. */
static inline int64_t mt_clock_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
