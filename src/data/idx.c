/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/data/idx.c -- IDX file reader (the MNIST container), gzip or plain, through zlib.
 *
 * Layout (LeCun et al., "THE MNIST DATABASE of handwritten digits", file formats):
 * bytes 0-1 are zero, byte 2 is the dtype (0x08 = unsigned byte), byte 3 the number of
 * dimensions; then one big-endian uint32 per dimension; then prod(dims) data bytes and
 * nothing else. gzopen/gzread read gzip files and pass plain files through unchanged.
 * Every fault is reported once, here, with the file's path and what is wrong.
 * Owns nothing beyond the hoop__idx it fills. Thread-safe: no shared state.
 */
#include "data/idx.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/check.h"

#define IDX_DTYPE_U8 0x08

/* The data buffer's first size; it doubles as the data keeps coming. */
#define IDX_FIRST_BYTES ((size_t)1 << 20)

/* Largest gzread call: its length is an unsigned int and its result an int. */
#define IDX_READ_STEP ((size_t)1 << 30)

/* Reads up to bytes into buf; *got is what arrived. Fails only on a corrupt stream or a
 * read error (gzread -1); a short count means end of file, which the caller judges.
 * No offset is named: gzread loses the bytes of the call that failed, and zlib finds a
 * bad checksum only at the stream's end, so a count would mislead. */
static hoop_status idx_read_full(gzFile gz, const char *path, void *buf, size_t bytes, size_t *got)
{
    *got = 0;
    while (*got < bytes) {
        size_t step = bytes - *got < IDX_READ_STEP ? bytes - *got : IDX_READ_STEP;
        int n = gzread(gz, (char *)buf + *got, (unsigned)step);
        if (n < 0) {
            int errnum = 0;
            const char *msg = gzerror(gz, &errnum);
            if (errnum == Z_ERRNO)
                return HOOP_ERROR(HOOP_ERR_INVALID, "%s: read failed: %s", path,
                                  hoop__strerror(errno));
            /* zlib's message starts with the path it was opened with: once is enough */
            size_t plen = strlen(path);
            if (strncmp(msg, path, plen) == 0 && strncmp(msg + plen, ": ", 2) == 0) msg += plen + 2;
            return HOOP_ERROR(HOOP_ERR_INVALID, "%s: corrupt gzip stream (zlib: %s)", path, msg);
        }
        if (n == 0) break;
        *got += (size_t)n;
    }
    return HOOP_OK;
}

static uint32_t idx_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Checks the 4-byte magic: zero, zero, dtype 0x08, ndim. */
static hoop_status idx_check_magic(const char *path, const uint8_t m[4], int ndim)
{
    uint32_t magic = idx_be32(m);
    uint32_t want = IDX_DTYPE_U8 << 8 | (uint32_t)ndim;
    if (m[0] != 0 || m[1] != 0)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: bad magic number 0x%08x (expected 0x%08x): not an IDX file", path,
                          magic, want);
    if (m[2] != IDX_DTYPE_U8)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: magic 0x%08x has dtype 0x%02x, only unsigned byte (0x08) is "
                          "supported",
                          path, magic, m[2]);
    if (m[3] != ndim)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: magic 0x%08x says %d dimensions, expected %d (0x%08x)", path, magic,
                          m[3], ndim, want);
    return HOOP_OK;
}

/* Reads and checks the magic and the dimensions; sets out->ndim, dims and bytes. */
static hoop_status idx_read_header(gzFile gz, const char *path, int ndim, hoop__idx *out)
{
    uint8_t head[4 + 4 * HOOP_IDX_MAX_DIMS];
    size_t want = 4 + 4 * (size_t)ndim, got;
    HOOP_CHECK(idx_read_full(gz, path, head, 4, &got));
    if (got < 4)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: truncated header (%zu of 4 magic bytes)", path,
                          got);
    HOOP_CHECK(idx_check_magic(path, head, ndim));
    HOOP_CHECK(idx_read_full(gz, path, head + 4, want - 4, &got));
    if (got < want - 4)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: truncated header (%zu of %zu dimension bytes)",
                          path, got, want - 4);
    out->ndim = ndim;
    out->bytes = 1;
    for (int d = 0; d < ndim; d++) {
        uint32_t v = idx_be32(head + 4 + 4 * d);
        if (v == 0 || v > INT32_MAX)
            return HOOP_ERROR(HOOP_ERR_INVALID, "%s: dimension %d is %u (must be 1..%d)", path, d,
                              v, INT32_MAX);
        if (out->bytes > HOOP_IDX_MAX_BYTES / v)
            return HOOP_ERROR(HOOP_ERR_INVALID, "%s: dimensions describe more than %zu bytes", path,
                              HOOP_IDX_MAX_BYTES);
        out->dims[d] = v;
        out->bytes *= v;
    }
    return HOOP_OK;
}

/* Reads exactly out->bytes data bytes, then insists on end of file. The buffer grows
 * as data arrives (from IDX_FIRST_BYTES, doubling), so a short or corrupt file whose
 * header announces gigabytes fails as truncated having reserved about what it holds,
 * not out of memory after asking for what it claims (found by tests/fuzz/fuzz_idx). */
static hoop_status idx_read_data(gzFile gz, const char *path, hoop__idx *out)
{
    size_t got = 0, cap = 0, more;
    uint8_t extra[64];
    do {
        size_t want = cap == 0 ? IDX_FIRST_BYTES : cap * 2;
        want = want < out->bytes ? want : out->bytes;
        HOOP_CHECK(hoop__realloc(&out->data, want));
        HOOP_CHECK(idx_read_full(gz, path, out->data + cap, want - cap, &more));
        got = cap + more;
        cap = want;
    } while (got == cap && cap < out->bytes);
    if (got < out->bytes)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: truncated: holds %zu of the %zu data bytes "
                          "its header announces",
                          path, got, out->bytes);
    HOOP_CHECK(idx_read_full(gz, path, extra, sizeof extra, &got));
    if (got > 0)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: trailing bytes after the %zu data bytes its header announces", path,
                          out->bytes);
    return HOOP_OK;
}

hoop_status hoop__idx_read(const char *path, int ndim, hoop__idx *out)
{
    hoop_status st = HOOP_OK;
    gzFile gz;
    if (!out || !path || ndim < 1 || ndim > HOOP_IDX_MAX_DIMS)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__idx_read: bad arguments");
    memset(out, 0, sizeof *out);
    gz = gzopen(path, "rb");
    if (!gz)
        return HOOP_ERROR(errno == ENOENT || errno == EACCES || errno == EPERM ? HOOP_ERR_INVALID
                                                                               : HOOP_ERR_SYSTEM,
                          "%s: cannot open: %s", path,
                          errno ? hoop__strerror(errno) : "out of memory");
    gzbuffer(gz, 1 << 18);
    HOOP_CHECK_GOTO(idx_read_header(gz, path, ndim, out), st, fail);
    HOOP_CHECK_GOTO(idx_read_data(gz, path, out), st, fail);
    gzclose_r(gz);
    return HOOP_OK;
fail:
    gzclose_r(gz);
    hoop__idx_free(out);
    return st;
}

void hoop__idx_free(hoop__idx *idx)
{
    if (!idx) return;
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}
