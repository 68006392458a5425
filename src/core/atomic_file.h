/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/atomic_file.h -- replace a file whole: the checkpoint and the DDP trace.
 *
 * Thread-safety: the functions keep no state; two writers of one path race as two
 * rename(2)s do (the last one wins, whole).
 */
#ifndef HOOP_CORE_ATOMIC_FILE_H
#define HOOP_CORE_ATOMIC_FILE_H

#include <stddef.h>

#include "hoop/status.h"

/* Writes the n bytes at data to path so that path holds its old contents or the new,
 * whole, whenever the process dies: an unnamed file in the directory of the file to
 * replace (O_TMPFILE; a named temporary file, NAME.tmp.XXXXXX, where the filesystem has
 * none), written, fsynced, linked under a temporary name, renamed over that file, and
 * the directory fsynced. A kill while writing leaves nothing else (one in the
 * microseconds between the link and the rename leaves NAME.tmp.PID.N). A symbolic link
 * at path to a regular file is kept: the file it names is replaced. A file replaced
 * keeps its mode, and its owner and group where the process may set them; a new file
 * gets the mode open(O_CREAT, 0666) gives under the umask.
 *
 * label names what path is in every message ("checkpoint", "HOOP_TRACE_FILE"): "LABEL
 * 'PATH': ...". fault is the HOOP_TEST_FAULT point that strikes once half the bytes are
 * written (HOOP__FAULT_CHECKPOINT), or HOOP__FAULT_NONE.
 *
 * Errors: HOOP_ERR_INVALID for a path that names no file (empty, ending in '/', too
 * long) or one the rename would replace though it is no regular file (a directory, a
 * device such as /dev/null as root, a FIFO, a socket, a link to one of them, a dangling
 * link), or a file this user may not write (access(W_OK): a checkpoint made 0444 to
 * keep it; the rename would replace it all the same); HOOP_ERR_SYSTEM naming the call
 * that failed and the file it failed on, with errno's reason (nothing is left behind);
 * HOOP_ERR_NOMEM. */
hoop_status hoop__atomic_write(const char *label, const char *path, const void *data, size_t n,
                               int fault);

/* Can hoop__atomic_write write path? Does what it does before it writes: makes the
 * unnamed file (or the named temporary one) and links it under a temporary name, then
 * removes it; path is not touched. For a tool that wants to fail at start rather than
 * after hours of work, e.g. as root in /proc, where access() passes. The same errors as
 * hoop__atomic_write's, with its messages. */
hoop_status hoop__atomic_probe(const char *label, const char *path);

#endif /* HOOP_CORE_ATOMIC_FILE_H */
