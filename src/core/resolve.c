/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/resolve.c -- getaddrinfo with retries of a temporary failure (see resolve.h).
 *
 * Owns nothing. Thread-safe.
 */
#include "core/resolve.h"

#include <time.h>

#include "core/clock.h"

int hoop__getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                      struct addrinfo **res)
{
    int64_t until = hoop__deadline_ns(HOOP__RESOLVE_RETRY_MS);
    long nap_ms = 100;
    for (;;) {
        int rc = getaddrinfo(node, service, hints, res);
        if (rc != EAI_AGAIN || hoop__now_ns() >= until) return rc;
        struct timespec ts = {.tv_sec = nap_ms / 1000, .tv_nsec = (nap_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        if (nap_ms < 1000) nap_ms *= 2;
    }
}
