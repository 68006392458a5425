/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/fuzz/fuzz_idx.c -- the IDX reader (src/data/idx.c: Fashion-MNIST's files, gzip
 * or plain): the input is a file, read as images (3 dimensions) and as labels (1). An
 * accepted file must hold the element count its header says.
 */
#include "fuzz.h"

#include "data/idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    fuzz_quiet();
    int fd = fuzz_file(data, size, path, sizeof(path));
    if (fd < 0) return 0;
    for (int ndim = 1; ndim <= 3; ndim += 2) {
        hoop__idx idx;
        if (hoop__idx_read(path, ndim, &idx) != HOOP_OK) continue;
        size_t want = 1;
        for (int i = 0; i < idx.ndim; i++) want *= (size_t)idx.dims[i];
        if (idx.ndim != ndim || idx.bytes != want || (want && idx.data == NULL)) abort();
        hoop__idx_free(&idx);
    }
    close(fd);
    return 0;
}
