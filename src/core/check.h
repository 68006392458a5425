/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/check.h -- error origin and propagation macros (internal).
 *
 * HOOP_ERROR sets the thread's message once, where an error arises, and evaluates to
 * the status. The CHECK macros propagate a status upwards, leaving a TRACE-level line
 * per frame ("file:line -> HOOP_ERR_X") so HOOP_DEBUG=TRACE shows an error backtrace.
 * All are statement macros that evaluate their argument exactly once.
 */
#ifndef HOOP_CORE_CHECK_H
#define HOOP_CORE_CHECK_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "core/log.h"
#include "hoop/status.h"

HOOP_EXTERN_C_BEGIN

/* Records the message as the calling thread's last error (file:line goes only to the
 * DEBUG log, with the message); returns st. */
hoop_status hoop__set_error(hoop_status st, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* strerror(errnum) in a thread-local buffer: thread-safe (strerror is not), never NULL. */
const char *hoop__strerror(int errnum);
/* How many messages the calling thread has set (hoop__set_error; wraps): compared before
 * and after a call into code that may fail without setting one (a plug-in's), so that a
 * bare code gets a message instead of showing a stale one. */
unsigned hoop__error_count(void);
/* Puts back saved (a copy of hoop_last_error() taken before) as the thread's message:
 * for a failure the caller tolerated and said otherwise (a transport this host lacks,
 * skipped with an INFO line), which must not show as the message of a call that
 * succeeded ("" when no call on this thread has failed: hoop/status.h). */
void hoop__error_restore(const char *saved);

/* What a file of mode m that is not a regular one is, for a refusal: "a directory", "a
 * FIFO", "a character device", "a block device", "a socket" ("not a regular file" for
 * anything else). */
const char *hoop__file_type(mode_t m);

/* Opens path for writing (O_WRONLY | O_CREAT | O_CLOEXEC | flags, mode 0666) without
 * blocking in the open: a FIFO that no process reads fails with ENXIO instead of holding
 * the caller (signals included) until one does. The descriptor is then made blocking.
 * Returns it, or -1 with errno set. */
int hoop__open_output(const char *path, int flags);

/* Keeps the current message but notes that a caller propagated st (TRACE only). */
void hoop__trace_status(hoop_status st, const char *file, int line);

#define HOOP_ERROR(st, ...) hoop__set_error((st), __FILE__, __LINE__, __VA_ARGS__)

#define HOOP_CHECK(call)                                      \
    do {                                                      \
        hoop_status hoop_st_ = (call);                        \
        if (hoop_st_ != HOOP_OK) {                            \
            hoop__trace_status(hoop_st_, __FILE__, __LINE__); \
            return hoop_st_;                                  \
        }                                                     \
    } while (0)

#define HOOP_CHECK_GOTO(call, st, label)                  \
    do {                                                  \
        (st) = (call);                                    \
        if ((st) != HOOP_OK) {                            \
            hoop__trace_status((st), __FILE__, __LINE__); \
            goto label;                                   \
        }                                                 \
    } while (0)

/* For destroy paths: run every step, keep the first error in st. */
#define HOOP_CHECK_KEEP(call, st)                                    \
    do {                                                             \
        hoop_status hoop_st_ = (call);                               \
        if (hoop_st_ != HOOP_OK && (st) == HOOP_OK) (st) = hoop_st_; \
    } while (0)

/* For -1/errno system calls: retries on EINTR; fails with HOOP_ERR_SYSTEM naming what. */
#define HOOP_SYSCHECK(expr, what)                                                               \
    do {                                                                                        \
        int hoop_rc_;                                                                           \
        do {                                                                                    \
            hoop_rc_ = (int)(expr);                                                             \
        } while (hoop_rc_ == -1 && errno == EINTR);                                             \
        if (hoop_rc_ == -1)                                                                     \
            return HOOP_ERROR(HOOP_ERR_SYSTEM, "%s failed: %s", (what), hoop__strerror(errno)); \
    } while (0)

/* pthread calls return the error number instead of setting errno. */
#define HOOP_PTHREAD_CHECK(call, what)                                                             \
    do {                                                                                           \
        int hoop_rc_ = (call);                                                                     \
        if (hoop_rc_ != 0)                                                                         \
            return HOOP_ERROR(HOOP_ERR_SYSTEM, "%s failed: %s", (what), hoop__strerror(hoop_rc_)); \
    } while (0)

#define HOOP_INTERNAL_ERROR(...) HOOP_ERROR(HOOP_ERR_INTERNAL, "internal error: " __VA_ARGS__)

/* Typed, zeroed, checked allocation: HOOP_CHECK(hoop__calloc(&p, n)). */
hoop_status hoop__calloc_bytes(void **out, size_t n, size_t size, const char *file, int line);
#define hoop__calloc(pp, n) \
    hoop__calloc_bytes((void **)(pp), (n), sizeof(**(pp)), __FILE__, __LINE__)

/* Checked realloc of *pp to n elements of size; *pp is unchanged on failure. */
hoop_status hoop__realloc_bytes(void **pp, size_t n, size_t size, const char *file, int line);
#define hoop__realloc(pp, n) \
    hoop__realloc_bytes((void **)(pp), (n), sizeof(**(pp)), __FILE__, __LINE__)

#define HOOP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define HOOP_CONTAINER_OF(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

HOOP_EXTERN_C_END

#endif /* HOOP_CORE_CHECK_H */
