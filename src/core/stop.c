/* SPDX-License-Identifier: BSD-3-Clause */
/* src/core/stop.c -- see stop.h. */
#include "core/stop.h"

#include <stdatomic.h>
#include <stdint.h>

#include "core/clock.h"

/* Lock-free atomics only: C11 allows them in a signal handler, which any thread may run
 * (OpenBLAS's, a comm's progress thread). */
static atomic_int first;
static atomic_llong first_ns;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2 && ATOMIC_LLONG_LOCK_FREE == 2,
               "the stop request must be lock-free");

int hoop__stop_request(int sig)
{
    int64_t now = hoop__now_ns(); /* clock_gettime: async-signal-safe (POSIX) */
    int none = 0;
    if (atomic_compare_exchange_strong(&first, &none, sig)) {
        atomic_store(&first_ns, (long long)now);
        return HOOP__STOP_FIRST;
    }
    long long t0 = atomic_load(&first_ns);
    /* t0 == 0: the first's handler has not stored its time yet: this is its copy */
    if (t0 == 0 || now - t0 < (int64_t)HOOP__STOP_REPEAT_MS * 1000000LL) return HOOP__STOP_COPY;
    return HOOP__STOP_AGAIN;
}

int hoop__stop_requested(void)
{
    return atomic_load(&first);
}
