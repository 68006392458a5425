/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/fdlimit.h -- the process's descriptor limit (RLIMIT_NOFILE): a hint for
 * messages when a call that makes a descriptor fails with EMFILE or ENFILE, and the
 * up-front check a communicator makes once it knows how many links it will open
 * (internal; see fdlimit.c).
 */
#ifndef HOOP_CORE_FDLIMIT_H
#define HOOP_CORE_FDLIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/status.h"

HOOP_EXTERN_C_BEGIN

/* For err, the errno of a call that makes a descriptor (socket, accept, eventfd,
 * memfd_create, open): EMFILE writes " (RLIMIT_NOFILE soft limit S, hard limit H: raise
 * it with ulimit -n)", ENFILE " (the system-wide limit on open files, fs.file-max, is
 * reached)", anything else "". Returns buf. Thread-safe. */
const char *hoop__fd_hint(int err, char *buf, size_t cap);

/* How many descriptors this process has open (the entries of /proc/self/fd), or -1 when
 * that cannot be read. Thread-safe; a snapshot. */
int64_t hoop__fd_count(void);

/* Makes room for `more` descriptors on top of those open now (plus a small spare):
 * when the soft limit is lower, raises it to what is needed (at most the hard limit)
 * and says so at INFO; when the hard limit is lower too, fails with HOOP_ERR_SYSTEM
 * naming both limits, the count and `what` (the caller's account of the need, e.g.
 * "rank 0's links to 11 peers ..."), with the ulimit -n value that would do. HOOP_OK
 * without a check where the open count cannot be read. Thread-safe (setrlimit is
 * process-wide: concurrent callers each raise to their own need). */
hoop_status hoop__fd_reserve(int64_t more, const char *what);

HOOP_EXTERN_C_END

#endif /* HOOP_CORE_FDLIMIT_H */
