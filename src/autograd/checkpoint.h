/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/checkpoint.h -- checkpoint internals for hoop's tools.
 *
 * Thread-safety: the functions keep no state.
 */
#ifndef HOOP_AUTOGRAD_CHECKPOINT_H
#define HOOP_AUTOGRAD_CHECKPOINT_H

#include "hoop/status.h"

/* Can hoop_checkpoint_save write path? Does what a save does before it writes: makes the
 * unnamed file in path's directory (O_TMPFILE; a named temporary file beside path where
 * the filesystem has none) and links it under a temporary name, then removes it. path
 * itself is not touched. For a tool that wants to fail at start rather than at its first
 * save, hours later. Errors: HOOP_ERR_SYSTEM with the save's message (e.g. "checkpoint:
 * cannot create a temporary file beside '/proc/version': ..."), HOOP_ERR_NOMEM. */
hoop_status hoop__checkpoint_probe(const char *path);

#endif /* HOOP_AUTOGRAD_CHECKPOINT_H */
