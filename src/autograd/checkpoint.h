/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/checkpoint.h -- checkpoint internals for hoop's tools.
 *
 * Thread-safety: the functions keep no state.
 */
#ifndef HOOP_AUTOGRAD_CHECKPOINT_H
#define HOOP_AUTOGRAD_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/status.h"

/* Can hoop_checkpoint_save write path? Does what a save does before it writes: makes the
 * unnamed file in path's directory (O_TMPFILE; a named temporary file beside path where
 * the filesystem has none) and links it under a temporary name, then removes it. path
 * itself is not touched. For a tool that wants to fail at start rather than at its first
 * save, hours later. A symbolic link at path to a regular file is probed as a save
 * writes through it: in the directory of the file it names. Errors: HOOP_ERR_INVALID
 * with the save's message for a path that names no file (empty, ending in '/', or too
 * long) or one a save refuses to replace (a directory, a device, a FIFO, a socket, a link
 * to one of them, a dangling link); HOOP_ERR_SYSTEM with the save's message (e.g.
 * "checkpoint: cannot create a temporary file beside '/proc/version': ..."),
 * HOOP_ERR_NOMEM. */
hoop_status hoop__checkpoint_probe(const char *path);

/* The trailer's CRC-32 (zlib's crc32, ISO 3309) of the n bytes at b, any n: zlib's
 * crc32() takes a 32-bit length, which would cover a file of 4 GiB or more only in part. */
uint32_t hoop__checkpoint_crc(const void *b, size_t n);

#endif /* HOOP_AUTOGRAD_CHECKPOINT_H */
