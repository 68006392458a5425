/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/clock.h -- monotonic time and deadlines (internal).
 *
 * All deadlines in hoop are absolute CLOCK_MONOTONIC times in nanoseconds, so a chain
 * of waits shares one budget instead of restarting it at every step.
 */
#ifndef HOOP_CORE_CLOCK_H
#define HOOP_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic clock, nanoseconds. */
static inline int64_t hoop__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Absolute deadline timeout_ms from now; a negative timeout means "no deadline". */
static inline int64_t hoop__deadline_ns(int64_t timeout_ms)
{
    if (timeout_ms < 0) return INT64_MAX;
    const int64_t now = hoop__now_ns();
    /* Saturates: a timeout of centuries (INT64_MAX ms) must not wrap into the past. */
    return timeout_ms > (INT64_MAX - now) / 1000000LL ? INT64_MAX : now + timeout_ms * 1000000LL;
}

/* Milliseconds left before deadline (0 when passed), clamped to INT32_MAX for poll(). */
static inline int hoop__ms_left(int64_t deadline_ns)
{
    if (deadline_ns == INT64_MAX) return INT32_MAX;
    int64_t left = (deadline_ns - hoop__now_ns() + 999999) / 1000000;
    if (left < 0) return 0;
    return left > INT32_MAX ? INT32_MAX : (int)left;
}

#endif /* HOOP_CORE_CLOCK_H */
