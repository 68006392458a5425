/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/status.c -- status strings and the thread-local last-error message.
 *
 * Owns one message buffer per thread. hoop__set_error() formats the message into it
 * (where it arose, file:line, is logged at DEBUG, not shown to the user);
 * hoop_last_error() returns it. Thread-safe by construction (thread-local).
 */
#define _GNU_SOURCE /* the GNU strerror_r, which returns the string */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "core/check.h"

#define HOOP_ERRMSG_MAX 1024

static _Thread_local char last_error[HOOP_ERRMSG_MAX];
static _Thread_local unsigned errors_set; /* hoop__set_error calls of this thread */

HOOP_API const char *hoop_status_str(hoop_status s)
{
    switch (s) {
#define X(name, val, str) \
    case HOOP_##name: return str;
        HOOP_STATUS_MAP(X)
#undef X
    }
    return "unknown status";
}

HOOP_API const char *hoop_status_name(hoop_status s)
{
    switch (s) {
#define X(name, val, str) \
    case HOOP_##name: return "HOOP_" #name;
        HOOP_STATUS_MAP(X)
#undef X
    }
    return "HOOP_UNKNOWN";
}

HOOP_API const char *hoop_last_error(void)
{
    return last_error;
}

unsigned hoop__error_count(void)
{
    return errors_set;
}

void hoop__error_restore(const char *saved)
{
    if (saved != last_error) snprintf(last_error, sizeof(last_error), "%s", saved);
}

const char *hoop__strerror(int errnum)
{
    static _Thread_local char buf[128];
    return strerror_r(errnum, buf, sizeof(buf));
}

const char *hoop__file_type(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

int hoop__open_output(const char *path, int flags)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | flags, 0666);
    if (fd < 0) return -1;
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

hoop_status hoop__set_error(hoop_status st, const char *file, int line, const char *fmt, ...)
{
    /* Formatted aside first: a message may quote the previous one ("...: %s",
     * hoop_last_error()), and vsnprintf into the buffer it reads from is undefined. */
    char msg[sizeof(last_error)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, sizeof(msg));
    errors_set++;
    /* The log line carries file:line (a developer's clue); the message stays the user's. */
    if (hoop__log_on(HOOP_LOG_DEBUG, HOOP_LOG_ALL))
        hoop__log(HOOP_LOG_DEBUG, HOOP_LOG_ALL, file, line, "%s: %s", hoop_status_name(st),
                  last_error);
    return st;
}

void hoop__trace_status(hoop_status st, const char *file, int line)
{
    if (hoop__log_on(HOOP_LOG_TRACE, HOOP_LOG_ALL))
        hoop__log(HOOP_LOG_TRACE, HOOP_LOG_ALL, file, line, "-> %s", hoop_status_name(st));
}

hoop_status hoop__calloc_bytes(void **out, size_t n, size_t size, const char *file, int line)
{
    *out = NULL;
    if (n == 0) n = 1;
    if (size != 0 && n > SIZE_MAX / size)
        return hoop__set_error(HOOP_ERR_NOMEM, file, line,
                               "allocation of %zu x %zu bytes overflows", n, size);
    void *p = calloc(n, size);
    if (p == NULL)
        return hoop__set_error(HOOP_ERR_NOMEM, file, line, "calloc of %zu bytes failed", n * size);
    *out = p;
    return HOOP_OK;
}

hoop_status hoop__realloc_bytes(void **pp, size_t n, size_t size, const char *file, int line)
{
    if (n == 0) n = 1;
    if (size != 0 && n > SIZE_MAX / size)
        return hoop__set_error(HOOP_ERR_NOMEM, file, line,
                               "allocation of %zu x %zu bytes overflows", n, size);
    void *p = realloc(*pp, n * size);
    if (p == NULL)
        return hoop__set_error(HOOP_ERR_NOMEM, file, line, "realloc to %zu bytes failed", n * size);
    *pp = p;
    return HOOP_OK;
}
