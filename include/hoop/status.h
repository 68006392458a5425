/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/status.h -- status codes and the thread-local error message.
 *
 * Every fallible hoop call returns a hoop_status (HOOP_OK == 0). On failure the call
 * leaves a readable message, set once where the error arose, in hoop_last_error() of
 * the calling thread. The numbers are stable: new codes are only ever appended.
 */
#ifndef HOOP_STATUS_H
#define HOOP_STATUS_H

#include "hoop/export.h"

HOOP_EXTERN_C_BEGIN

/* One table, so that names, numbers and strings cannot drift apart. */
#define HOOP_STATUS_MAP(X)                                          \
    X(OK, 0, "success")                                             \
    X(ERR_INVALID, 1, "invalid argument")                           \
    X(ERR_USAGE, 2, "invalid call sequence")                        \
    X(ERR_NOMEM, 3, "out of memory")                                \
    X(ERR_SYSTEM, 4, "system call failed")                          \
    X(ERR_CUDA, 5, "CUDA error")                                    \
    X(ERR_IB, 6, "InfiniBand verbs error")                          \
    X(ERR_REMOTE, 7, "peer closed or failed")                       \
    X(ERR_TIMEOUT, 8, "deadline exceeded")                          \
    X(ERR_MISMATCH, 9, "ranks called different collectives")        \
    X(ERR_UNSUPPORTED, 10, "not supported by this build or system") \
    X(ERR_INTERNAL, 11, "internal error (a bug in hoop)")

typedef enum hoop_status {
#define HOOP_STATUS_ENUM_(name, val, str) HOOP_##name = val,
    HOOP_STATUS_MAP(HOOP_STATUS_ENUM_)
#undef HOOP_STATUS_ENUM_
} hoop_status;

/* Returns the fixed description of s ("deadline exceeded"), or "unknown status" for a
 * value outside the table. Never NULL. Thread-safe. */
HOOP_API const char *hoop_status_str(hoop_status s);

/* Returns the symbolic name of s ("HOOP_ERR_TIMEOUT"), or "HOOP_UNKNOWN". Never NULL. */
HOOP_API const char *hoop_status_name(hoop_status s);

/* Returns the message of the most recent failure on the calling thread, e.g.
 * "MASTER_PORT='abc' is not an integer". It is "" when no call on this thread has
 * failed yet. The pointer stays valid until the next hoop call
 * on this thread. Never NULL. */
HOOP_API const char *hoop_last_error(void);

HOOP_EXTERN_C_END

#endif /* HOOP_STATUS_H */
