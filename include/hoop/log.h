/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/log.h -- logging levels, subsystems and the redirect hook.
 *
 * The level comes from HOOP_DEBUG=WARN|INFO|DEBUG|TRACE (default WARN), the subsystem
 * mask from HOOP_DEBUG_SUBSYS (comma list, "^" to exclude, default "INIT,ENV"), and the
 * destination from HOOP_DEBUG_FILE (%h = host, %p = pid; default stderr). A line reads
 *   host:pid:tid [rank] hoop INFO NET/TCP: connected to rank 3 (10.0.0.2:41234)
 */
#ifndef HOOP_LOG_H
#define HOOP_LOG_H

#include "hoop/export.h"

HOOP_EXTERN_C_BEGIN

typedef enum hoop_log_level {
    HOOP_LOG_NONE = 0,
    HOOP_LOG_WARN = 1,
    HOOP_LOG_INFO = 2,
    HOOP_LOG_DEBUG = 3,
    HOOP_LOG_TRACE = 4,
} hoop_log_level;

/* Subsystems, as bits of the HOOP_DEBUG_SUBSYS mask. */
/* clang-format off */
#define HOOP_LOG_SUBSYS_MAP(X) \
    X(INIT, 0) X(BOOT, 1) X(NET, 2) X(TCP, 3) X(IB, 4) X(COLL, 5) X(CUDA, 6) \
    X(ALLOC, 7) X(AUTOGRAD, 8) X(DDP, 9) X(ENV, 10) X(DATA, 11) X(LAUNCH, 12)
/* clang-format on */

typedef enum hoop_log_subsys {
#define HOOP_LOG_SUBSYS_ENUM_(name, bit) HOOP_LOG_##name = 1u << (bit),
    HOOP_LOG_SUBSYS_MAP(HOOP_LOG_SUBSYS_ENUM_)
#undef HOOP_LOG_SUBSYS_ENUM_
} hoop_log_subsys;

/* Every subsystem. A macro, not an enumerator: ISO C wants enumerators to fit in int. */
#define HOOP_LOG_ALL 0xFFFFFFFFu

/* A log sink: receives one complete, formatted line without the trailing newline. */
typedef void (*hoop_log_fn)(hoop_log_level level, const char *line, void *user_data);

/* Redirects every log line to fn (NULL restores the default: stderr or HOOP_DEBUG_FILE).
 * Call before other threads log; not synchronised with concurrent logging. */
HOOP_API void hoop_log_set(hoop_log_fn fn, void *user_data);

/* Sets the rank shown in the "[rank]" prefix of this process's lines (-1 hides it).
 * Thread-safe. */
HOOP_API void hoop_log_set_rank(int rank);

HOOP_EXTERN_C_END

#endif /* HOOP_LOG_H */
