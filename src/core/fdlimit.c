/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/fdlimit.c -- the descriptor limit: hints for EMFILE / ENFILE, and the
 * up-front reservation a communicator makes before it opens its links (see fdlimit.h).
 *
 * Why raise the soft limit: Linux ships a soft RLIMIT_NOFILE of 1024 (kept low only for
 * programs that use select()) under a much higher hard limit, and a link over tcp holds
 * HOOP_TCP_NSOCKS descriptors at each end, so a large world on one host can need more
 * than the soft limit. The soft limit is the process's own to raise up to the hard one
 * (setrlimit(2)); Go's runtime raises it to the hard limit at start for the same reason.
 * hoop raises it only when a communicator would not fit, and only as far as it needs, so
 * a program that stays within the soft limit (a select() user) sees no change.
 *
 * Owns nothing. Thread-safe.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <sys/resource.h>

#include "core/check.h"
#include "core/fdlimit.h"
#include "core/log.h"

#define FD_SPARE 16 /* descriptors left over for logs, the store, the CUDA driver */

/* A limit as text: "unlimited" or the number. */
static const char *lim_str(rlim_t v, char *buf, size_t cap)
{
    if (v == RLIM_INFINITY)
        snprintf(buf, cap, "unlimited");
    else
        snprintf(buf, cap, "%llu", (unsigned long long)v);
    return buf;
}

const char *hoop__fd_hint(int err, char *buf, size_t cap)
{
    struct rlimit rl;
    char s[24], h[24];
    if (cap) buf[0] = '\0';
    if (err == ENFILE)
        snprintf(buf, cap, " (the system-wide limit on open files, fs.file-max, is reached)");
    if (err == EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0)
        snprintf(buf, cap, " (RLIMIT_NOFILE soft limit %s, hard limit %s: raise it with ulimit -n)",
                 lim_str(rl.rlim_cur, s, sizeof(s)), lim_str(rl.rlim_max, h, sizeof(h)));
    return buf;
}

int64_t hoop__fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    int64_t n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

hoop_status hoop__fd_reserve(int64_t more, const char *what)
{
    struct rlimit rl;
    char s[24], h[24];
    int64_t open = hoop__fd_count();
    if (open < 0 || more <= 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0) return HOOP_OK;
    rlim_t need = (rlim_t)(open + more + FD_SPARE);
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need) return HOOP_OK;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
        return HOOP_ERROR(
            HOOP_ERR_SYSTEM,
            "too many open files ahead: %s need about %lld descriptors (plus %d spare), %lld are "
            "open and RLIMIT_NOFILE allows %s (hard limit %s); raise it with "
            "ulimit -n %llu or more",
            what, (long long)more, FD_SPARE, (long long)open, lim_str(rl.rlim_cur, s, sizeof(s)),
            lim_str(rl.rlim_max, h, sizeof(h)), (unsigned long long)need);
    rlim_t old = rl.rlim_cur;
    rl.rlim_cur = need;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return HOOP_ERROR(HOOP_ERR_SYSTEM,
                          "%s need about %lld descriptors and %lld are open, but raising "
                          "RLIMIT_NOFILE from %s to %llu failed: %s; raise it with ulimit -n",
                          what, (long long)more, (long long)open, lim_str(old, s, sizeof(s)),
                          (unsigned long long)need, hoop__strerror(errno));
    HOOP_INFO(INIT,
              "%s need about %lld descriptors and %lld are open: raised the RLIMIT_NOFILE "
              "soft limit from %s to %llu (hard limit %s)",
              what, (long long)more, (long long)open, lim_str(old, s, sizeof(s)),
              (unsigned long long)need, lim_str(rl.rlim_max, h, sizeof(h)));
    return HOOP_OK;
}
