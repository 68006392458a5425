/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/log.c -- leveled, per-subsystem logging with a redirect hook.
 *
 * Owns the level, mask, timestamp format and output stream, parsed once from
 * HOOP_DEBUG, HOOP_DEBUG_SUBSYS, HOOP_DEBUG_TIMESTAMP_FORMAT and HOOP_DEBUG_FILE
 * (pthread_once). Writing a line is one fputs under the stream's lock, so lines from
 * different threads never interleave. The model is NCCL's debug.cc: pre-format level
 * check, subsystem mask, file pattern, NCCL_DEBUG=VERSION, strftime timestamps.
 *
 * The version line ("hoop version 0.1.0" under HOOP_DEBUG=VERSION, an INFO INIT line
 * at INFO and above) is written once per process, at the first log check after the
 * settings are read, i.e. when hoop first has something it might log (the store,
 * the communicator), through whatever sink is set by then.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "core/check.h"
#include "core/log.h"
#include "hoop/version.h"

int hoop__log_level = HOOP_LOG_WARN;
unsigned hoop__log_mask = HOOP_LOG_INIT | HOOP_LOG_ENV;

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static pthread_once_t version_once = PTHREAD_ONCE_INIT;
static atomic_int log_ready;  /* both onces done: the fast path of hoop__log_init */
static int log_version_only;  /* HOOP_DEBUG=VERSION */
#define LOG_TS_FORMAT_MAX 128 /* bytes of HOOP_DEBUG_TIMESTAMP_FORMAT, with its NUL */
#define LOG_STAMP_MAX 160     /* bytes of the stamp it writes, with its NUL */
static char log_ts_format[LOG_TS_FORMAT_MAX]; /* HOOP_DEBUG_TIMESTAMP_FORMAT; "" = none */
static FILE *log_stream;
static hoop_log_fn log_fn;
static void *log_user;
static atomic_int log_rank = -1;
static char log_host[64];

static const struct {
    const char *name;
    unsigned bit;
} subsys_names[] = {
#define X(name, bit) {#name, 1u << (bit)},
    HOOP_LOG_SUBSYS_MAP(X)
#undef X
};

static const char *level_names[] = {"NONE", "WARN", "INFO", "DEBUG", "TRACE"};

int hoop__log_parse_level(const char *name)
{
    for (int i = 0; i < (int)(sizeof(level_names) / sizeof(level_names[0])); i++)
        if (strcasecmp(name, level_names[i]) == 0) return i;
    if (strcasecmp(name, "VERSION") == 0) return HOOP_LOG_WARN;
    return -1;
}

static int subsys_lookup(const char *tok, size_t len, unsigned *bit)
{
    if (len == 3 && strncasecmp(tok, "ALL", 3) == 0) {
        *bit = HOOP_LOG_ALL;
        return 1;
    }
    for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++) {
        if (strlen(subsys_names[i].name) == len &&
            strncasecmp(tok, subsys_names[i].name, len) == 0) {
            *bit = subsys_names[i].bit;
            return 1;
        }
    }
    return 0;
}

int hoop__log_parse_mask(const char *spec, unsigned *mask, char *bad, int bad_len)
{
    int invert = spec[0] == '^';
    unsigned m = 0;
    const char *p = spec + invert;
    while (*p) {
        size_t len = strcspn(p, ",");
        unsigned bit;
        if (len > 0 && !subsys_lookup(p, len, &bit)) {
            snprintf(bad, (size_t)bad_len, "%.*s", (int)len, p);
            return 0;
        }
        if (len > 0) m |= bit;
        p += len + (p[len] == ',');
    }
    *mask = invert ? ~m : m;
    return 1;
}

/* Expands %h (host) and %p (pid) in a HOOP_DEBUG_FILE pattern. */
static void expand_pattern(const char *pat, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = pat; *p && n + 1 < cap; p++) {
        if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
            int w = p[1] == 'h' ? snprintf(out + n, cap - n, "%s", log_host)
                                : snprintf(out + n, cap - n, "%d", (int)getpid());
            n += (w > 0 && (size_t)w < cap - n) ? (size_t)w : 0;
            p++;
        } else {
            out[n++] = *p;
        }
    }
    out[n] = '\0';
}

static void log_init_once(void)
{
    gethostname(log_host, sizeof(log_host) - 1);
    log_stream = stderr;
    const char *lvl = getenv("HOOP_DEBUG");
    if (lvl && *lvl) {
        int l = hoop__log_parse_level(lvl);
        hoop__log_level = l >= 0 ? l : HOOP_LOG_WARN;
        log_version_only = strcasecmp(lvl, "VERSION") == 0;
    }
    const char *ts = getenv("HOOP_DEBUG_TIMESTAMP_FORMAT");
    char why[160];
    /* A bad format (refused by the tools, env.c) stamps nothing rather than garbage. */
    if (ts && hoop__log_ts_format_check(ts, why, sizeof(why)))
        snprintf(log_ts_format, sizeof(log_ts_format), "%s", ts);
    const char *sub = getenv("HOOP_DEBUG_SUBSYS");
    char bad[32];
    if (sub && *sub) hoop__log_parse_mask(sub, &hoop__log_mask, bad, sizeof(bad));
    const char *file = getenv("HOOP_DEBUG_FILE");
    if (file && *file) {
        char path[512];
        expand_pattern(file, path, sizeof(path));
        FILE *f = fopen(path, "a");
        if (f) {
            setvbuf(f, NULL, _IOLBF, 0);
            log_stream = f;
        } else {
            fprintf(stderr,
                    "hoop WARN: HOOP_DEBUG_FILE '%s' cannot be opened (%s); logging to "
                    "stderr\n",
                    path, hoop__strerror(errno));
        }
    }
    /* The env:// rank; a task of an srun step without it is SLURM_PROCID (env.c reads
     * the contract the same way: an unset RANK comes from Slurm there). */
    const char *rank = getenv("RANK"), *step = getenv("SLURM_STEP_ID");
    if (!(rank && *rank) && step && *step) rank = getenv("SLURM_PROCID");
    if (rank && *rank) atomic_store(&log_rank, atoi(rank));
}

static void log_version_once(void);

void hoop__log_init(void)
{
    if (atomic_load_explicit(&log_ready, memory_order_acquire)) return;
    pthread_once(&log_once, log_init_once);
    pthread_once(&version_once, log_version_once);
    atomic_store_explicit(&log_ready, 1, memory_order_release);
}

/* Setting the sink or the rank reads the settings but writes no version line yet, so
 * that the line goes to the sink a program installs before hoop first logs. */
HOOP_API void hoop_log_set(hoop_log_fn fn, void *user_data)
{
    pthread_once(&log_once, log_init_once);
    log_fn = fn;
    log_user = user_data;
}

HOOP_API void hoop_log_set_rank(int rank)
{
    pthread_once(&log_once, log_init_once);
    atomic_store(&log_rank, rank);
}

static const char *subsys_name(unsigned subsys)
{
    for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
        if (subsys == subsys_names[i].bit) return subsys_names[i].name;
    return NULL;
}

/* Formats the time ts (local time) by format into out (cap bytes): strftime's
 * conversions plus %Nf (N = 1..9) and %f (= %6f) for the first N digits of the fraction
 * of the second, which strftime lacks. Returns the length, 0 when it did not fit. */
static size_t format_stamp(const char *format, const struct timespec *ts, char *out, size_t cap)
{
    char fmt[LOG_TS_FORMAT_MAX * 2];
    size_t n = 0;
    for (const char *p = format; *p && n + 12 < sizeof(fmt); p++) {
        int digits = 0;
        if (p[0] == '%' && p[1] == 'f')
            digits = 6;
        else if (p[0] == '%' && p[1] >= '1' && p[1] <= '9' && p[2] == 'f')
            digits = p[1] - '0';
        if (digits == 0) {
            if (p[0] == '%' && p[1] == '%') fmt[n++] = *p++; /* keep "%%" whole */
            fmt[n++] = *p;
            continue;
        }
        char frac[16];
        snprintf(frac, sizeof(frac), "%09ld", ts->tv_nsec);
        memcpy(fmt + n, frac, (size_t)digits);
        n += (size_t)digits;
        p += digits == 6 && p[1] == 'f' ? 1 : 2;
    }
    fmt[n] = '\0';
    struct tm tm;
    localtime_r(&ts->tv_sec, &tm);
    size_t len = strftime(out, cap, fmt, &tm);
    if (len == 0) out[0] = '\0';
    return len;
}

/* The conversions a timestamp format may use besides %f and %1f..%9f: C11's and POSIX's
 * strftime conversions, and GNU's %k %l %P %s; %E and %O take the C11 lists below. */
#define TS_CONVERSIONS "aAbBcCdDeFgGhHIjklmMnpPrRsStTuUVwWxXyYzZ%"
#define TS_E_CONVERSIONS "cCxXyY"
#define TS_O_CONVERSIONS "deHImMSuUVwWy"

/* Length of the conversion at p ('%' ...) when it is one the format accepts, else 0. */
static size_t ts_conversion(const char *p)
{
    const char *c = p + 1;
    if (*c == 'f') return 2;
    if (*c >= '1' && *c <= '9' && c[1] == 'f') return 3;
    if (*c == 'E' && c[1] && strchr(TS_E_CONVERSIONS, c[1])) return 3;
    if (*c == 'O' && c[1] && strchr(TS_O_CONVERSIONS, c[1])) return 3;
    if (*c && strchr(TS_CONVERSIONS, *c)) return 2;
    return 0;
}

int hoop__log_ts_format_check(const char *format, char *why, size_t cap)
{
    size_t len = strlen(format);
    if (len >= LOG_TS_FORMAT_MAX) {
        snprintf(why, cap, "it is %zu bytes long, over %d", len, LOG_TS_FORMAT_MAX - 1);
        return 0;
    }
    for (const char *p = format; *p; p++) {
        if (*p != '%') continue;
        size_t k = ts_conversion(p);
        if (k == 0) {
            size_t shown = p[1] == '\0' ? 1 : (p[1] == 'E' || p[1] == 'O') && p[2] ? 3 : 2;
            snprintf(why, cap, "'%.*s' is not a conversion it takes", (int)shown, p);
            return 0;
        }
        p += k - 1;
    }
    /* Long names (Wednesday, September) and every digit: the longest stamp it makes. */
    struct tm tm = {.tm_year = 100,
                    .tm_mon = 8,
                    .tm_mday = 27,
                    .tm_hour = 23,
                    .tm_min = 59,
                    .tm_sec = 59,
                    .tm_isdst = -1};
    struct timespec ts = {.tv_sec = mktime(&tm), .tv_nsec = 999999999};
    char out[LOG_STAMP_MAX];
    if (len > 0 && format_stamp(format, &ts, out, sizeof(out)) == 0) {
        snprintf(why, cap, "the time it writes can be longer than %d bytes", LOG_STAMP_MAX - 1);
        return 0;
    }
    return 1;
}

/* Writes the timestamp of now in the HOOP_DEBUG_TIMESTAMP_FORMAT format into out. */
static void format_timestamp(char *out, size_t cap)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    format_stamp(log_ts_format, &now, out, cap);
}

/* Hands one finished line to the sink, or writes it to the stream. */
static void emit(hoop_log_level level, const char *line)
{
    if (log_fn) {
        log_fn(level, line, log_user);
        return;
    }
    flockfile(log_stream);
    fputs(line, log_stream);
    fputc('\n', log_stream);
    funlockfile(log_stream);
}

static void vlog(hoop_log_level level, unsigned subsys, const char *file, int line, const char *fmt,
                 va_list ap)
{
    char msg[1536], prefix[320], where[96] = "", stamp[LOG_STAMP_MAX] = "";
    vsnprintf(msg, sizeof(msg), fmt, ap);
    const char *sub = subsys_name(subsys);
    if (level == HOOP_LOG_WARN || level == HOOP_LOG_TRACE || sub == NULL) {
        const char *slash = strrchr(file, '/');
        snprintf(where, sizeof(where), "%s:%d ", slash ? slash + 1 : file, line);
    }
    if (log_ts_format[0]) format_timestamp(stamp, sizeof(stamp));
    int rank = atomic_load(&log_rank);
    char rank_s[24] = "";
    if (rank >= 0) snprintf(rank_s, sizeof(rank_s), "[%d] ", rank);
    snprintf(prefix, sizeof(prefix), "%s%s:%d:%ld %shoop %s %s%s", stamp, log_host, (int)getpid(),
             (long)syscall(SYS_gettid), rank_s, level_names[level], sub ? sub : "",
             sub ? ": " : "");
    char full[sizeof(prefix) + sizeof(where) + sizeof(msg)];
    snprintf(full, sizeof(full), "%s%s%s", prefix, where, msg);
    emit(level, full);
}

static void log_line(hoop_log_level level, unsigned subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void log_line(hoop_log_level level, unsigned subsys, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, subsys, __FILE__, __LINE__, fmt, ap);
    va_end(ap);
}

/* Which optional parts this build has, for the INFO version line. */
#ifdef HOOP_HAVE_CUDA
#define BUILT_CUDA "yes"
#else
#define BUILT_CUDA "no"
#endif
#ifdef HOOP_HAVE_VERBS
#define BUILT_VERBS "yes"
#else
#define BUILT_VERBS "no"
#endif
#ifdef HOOP_HAVE_HWLOC
#define BUILT_HWLOC "yes"
#else
#define BUILT_HWLOC "no"
#endif

/* HOOP_DEBUG=VERSION: one bare line, as NCCL_DEBUG=VERSION prints; INFO and above: an
 * INFO INIT line that also names the optional parts of this build. */
static void log_version_once(void)
{
    if (log_version_only) {
        char text[64];
        snprintf(text, sizeof(text), "hoop version %s", HOOP_VERSION_STRING);
        emit(HOOP_LOG_INFO, text);
    } else if (hoop__log_level >= HOOP_LOG_INFO && (hoop__log_mask & HOOP_LOG_INIT)) {
        log_line(HOOP_LOG_INFO, HOOP_LOG_INIT, "hoop version %s (CUDA %s, libibverbs %s, hwloc %s)",
                 HOOP_VERSION_STRING, BUILT_CUDA, BUILT_VERBS, BUILT_HWLOC);
    }
}

void hoop__log(hoop_log_level level, unsigned subsys, const char *file, int line, const char *fmt,
               ...)
{
    hoop__log_init();
    va_list ap;
    va_start(ap, fmt);
    vlog(level, subsys, file, line, fmt, ap);
    va_end(ap);
}
