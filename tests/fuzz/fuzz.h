/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/fuzz/fuzz.h -- what the fuzz targets share (issue 14).
 *
 * A target is one file that defines LLVMFuzzerTestOneInput(data, size): it hands the
 * bytes to one of hoop's parsers of outside input and returns 0 whatever the parser
 * answers (an error status is the right answer to most inputs); a crash, a sanitizer
 * report, a leak or a hang is the finding. Each is built twice (tests/fuzz/local.mk):
 * with libFuzzer's main (configure --enable-fuzz, scripts/fuzz.sh), and with replay.c's
 * main, which runs it over its corpus in every make check.
 */
#ifndef HOOP_TESTS_FUZZ_H
#define HOOP_TESTS_FUZZ_H

#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* data[0..size) as a NUL-terminated string (malloc'd; NULL when out of memory). */
static inline char *fuzz_str(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s) {
        memcpy(s, data, size);
        s[size] = '\0';
    }
    return s;
}

/* data[0..size) in an anonymous file (memfd); path receives a name that open(2) takes
 * (/proc/self/fd/N). Returns the fd to close, or -1. */
static inline int fuzz_file(const uint8_t *data, size_t size, char *path, size_t cap)
{
    int fd = memfd_create("hoop-fuzz", MFD_CLOEXEC);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < size) {
        ssize_t k = write(fd, data + off, size - off);
        if (k <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)k;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

/* Quiets hoop's log for the run (every rejected input would print a warning). */
static inline void fuzz_quiet(void)
{
    setenv("HOOP_DEBUG", "NONE", 1);
}

#endif /* HOOP_TESTS_FUZZ_H */
