/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/log.h -- internal logging macros.
 *
 * HOOP_WARN always prints with file:line. HOOP_INFO/HOOP_DEBUGF/HOOP_TRACE take a
 * subsystem (INIT, NET, TCP, ...) and test level and mask before formatting anything.
 */
#ifndef HOOP_CORE_LOG_H
#define HOOP_CORE_LOG_H

#include <stddef.h>

#include "hoop/log.h"

HOOP_EXTERN_C_BEGIN

/* The cached level and mask (parsed from the environment once). */
extern int hoop__log_level;
extern unsigned hoop__log_mask;

/* Parses HOOP_DEBUG* once; cheap after the first call. Thread-safe. */
void hoop__log_init(void);

void hoop__log(hoop_log_level level, unsigned subsys, const char *file, int line, const char *fmt,
               ...) __attribute__((format(printf, 5, 6)));

static inline int hoop__log_on(hoop_log_level level, unsigned subsys)
{
    hoop__log_init();
    return hoop__log_level >= (int)level && (hoop__log_mask & subsys) != 0;
}

#define HOOP_LOG_AT_(lvl, sub, ...)                                                               \
    do {                                                                                          \
        if (hoop__log_on((lvl), (sub))) hoop__log((lvl), (sub), __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)

#define HOOP_WARN(...) HOOP_LOG_AT_(HOOP_LOG_WARN, HOOP_LOG_ALL, __VA_ARGS__)
#define HOOP_INFO(SUB, ...) HOOP_LOG_AT_(HOOP_LOG_INFO, HOOP_LOG_##SUB, __VA_ARGS__)
#define HOOP_DEBUGF(SUB, ...) HOOP_LOG_AT_(HOOP_LOG_DEBUG, HOOP_LOG_##SUB, __VA_ARGS__)
#define HOOP_TRACE(SUB, ...) HOOP_LOG_AT_(HOOP_LOG_TRACE, HOOP_LOG_##SUB, __VA_ARGS__)

/* Parses a subsystem list ("INIT,NET", "ALL", "^TCP") into a mask; returns 0 and sets
 * *bad to the first unknown name on error (for tests and env validation). */
int hoop__log_parse_mask(const char *spec, unsigned *mask, char *bad, int bad_len);

/* Checks a HOOP_DEBUG_TIMESTAMP_FORMAT value: text with strftime's conversions (C11's
 * and POSIX's, %E and %O forms, GNU's %k %l %P %s), %% and hoop's %f / %1f..%9f (digits
 * of the second's fraction); at most 127 bytes, and a stamp of at most 159 bytes. Returns
 * 1 when good; else 0 with why ("'%Q' is not a conversion it takes") in why. Thread-safe. */
int hoop__log_ts_format_check(const char *format, char *why, size_t cap);

/* Parses a level name; returns -1 for an unknown one. */
int hoop__log_parse_level(const char *name);

HOOP_EXTERN_C_END

#endif /* HOOP_CORE_LOG_H */
