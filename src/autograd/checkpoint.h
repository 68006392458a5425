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

/* The trailer's CRC-32 (zlib's crc32, ISO 3309) of the n bytes at b, any n: zlib's
 * crc32() takes a 32-bit length, which would cover a file of 4 GiB or more only in part. */
uint32_t hoop__checkpoint_crc(const void *b, size_t n);

#endif /* HOOP_AUTOGRAD_CHECKPOINT_H */
