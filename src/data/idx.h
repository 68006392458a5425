/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/data/idx.h -- IDX file reader (internal).
 *
 * Reads one IDX file (the MNIST container: a 4-byte magic 0x00 0x00 dtype ndim, ndim
 * big-endian uint32 dimensions, then the data) through zlib, so gzip and plain files are
 * both accepted. Only dtype 0x08 (unsigned byte) is supported, which is all MNIST-like
 * datasets use. Thread-safe: no shared state.
 */
#ifndef HOOP_DATA_IDX_H
#define HOOP_DATA_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/status.h"

#define HOOP_IDX_MAX_DIMS 4

/* Largest accepted data size: a corrupt header must not make us allocate terabytes. */
#define HOOP_IDX_MAX_BYTES ((size_t)1 << 34)

/* The contents of one IDX file; data holds prod(dims) bytes and is owned by the struct. */
typedef struct hoop__idx {
    int ndim;
    int64_t dims[HOOP_IDX_MAX_DIMS];
    size_t bytes;
    uint8_t *data;
} hoop__idx;

/* Reads path, which must be an unsigned-byte IDX file with exactly ndim dimensions, each
 * in 1..2^31-1, holding exactly prod(dims) data bytes. Errors: HOOP_ERR_INVALID naming
 * path and the fault (bad magic, dtype, ndim, zero dimension, too large, truncated,
 * trailing bytes, corrupt gzip stream, no such file); HOOP_ERR_SYSTEM when it exists
 * but cannot be opened;
 * HOOP_ERR_NOMEM. On error *out is zeroed and owns nothing. */
hoop_status hoop__idx_read(const char *path, int ndim, hoop__idx *out);

/* The files hoop_dataset_load_mnist reads from its directory, each as NAME.gz or NAME:
 * the train split's images and labels, then the t10k split's. For tools that must not
 * write over them. */
#define HOOP__MNIST_FILES 4
extern const char *const hoop__mnist_files[HOOP__MNIST_FILES];

/* Frees out->data and zeroes *out; safe on a zeroed struct. */
void hoop__idx_free(hoop__idx *idx);

#endif /* HOOP_DATA_IDX_H */
