/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/log.c -- leveled, per-subsystem logging with a redirect hook.
 *
 * Owns the level, mask and output stream, parsed once from HOOP_DEBUG,
 * HOOP_DEBUG_SUBSYS and HOOP_DEBUG_FILE (pthread_once). Writing a line is one fputs
 * under the stream's lock, so lines from different threads never interleave.
 * The model is NCCL's debug.cc: pre-format level check, subsystem mask, file pattern.
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
#include <unistd.h>

#include "core/check.h"
#include "core/log.h"

int hoop__log_level = HOOP_LOG_WARN;
unsigned hoop__log_mask = HOOP_LOG_INIT | HOOP_LOG_ENV;

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
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
    }
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

void hoop__log_init(void)
{
    pthread_once(&log_once, log_init_once);
}

HOOP_API void hoop_log_set(hoop_log_fn fn, void *user_data)
{
    hoop__log_init();
    log_fn = fn;
    log_user = user_data;
}

HOOP_API void hoop_log_set_rank(int rank)
{
    hoop__log_init();
    atomic_store(&log_rank, rank);
}

static const char *subsys_name(unsigned subsys)
{
    for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
        if (subsys == subsys_names[i].bit) return subsys_names[i].name;
    return NULL;
}

void hoop__log(hoop_log_level level, unsigned subsys, const char *file, int line, const char *fmt,
               ...)
{
    hoop__log_init();
    char msg[1536], prefix[160], where[96] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    const char *sub = subsys_name(subsys);
    if (level == HOOP_LOG_WARN || level == HOOP_LOG_TRACE || sub == NULL) {
        const char *slash = strrchr(file, '/');
        snprintf(where, sizeof(where), "%s:%d ", slash ? slash + 1 : file, line);
    }
    int rank = atomic_load(&log_rank);
    char rank_s[24] = "";
    if (rank >= 0) snprintf(rank_s, sizeof(rank_s), "[%d] ", rank);
    snprintf(prefix, sizeof(prefix), "%s:%d:%ld %shoop %s %s%s", log_host, (int)getpid(),
             (long)syscall(SYS_gettid), rank_s, level_names[level], sub ? sub : "",
             sub ? ": " : "");
    char full[1900];
    snprintf(full, sizeof(full), "%s%s%s", prefix, where, msg);
    if (log_fn) {
        log_fn(level, full, log_user);
        return;
    }
    flockfile(log_stream);
    fputs(full, log_stream);
    fputc('\n', log_stream);
    funlockfile(log_stream);
}
