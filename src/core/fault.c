/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/fault.c -- the HOOP_TEST_FAULT test hook: one rank sends itself a signal at
 * a named point (see fault.h for the points and the value's form).
 *
 * The value is parsed once, at the first check; unset (the default) it arms nothing and
 * every check returns 0 after one load. It exists for tests/faults/, which kills or
 * stops a rank in a chosen phase and checks what the others do: a real signal from the
 * process itself, not a simulated failure, so the peers see exactly what a crash or a
 * stop looks like.
 *
 * Owns the parsed value and one occurrence counter per point. Thread-safe.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/env.h"
#include "core/fault.h"

#define FAULT_FORM "RANK:POINT:INDEX:SIGNAL, e.g. 2:all_gather:3:KILL"

static const char *const point_names[] = {
    [HOOP__FAULT_RENDEZVOUS] = "rendezvous",
    [HOOP__FAULT_CONNECT] = "connect",
    [HOOP__FAULT_REDUCE_SCATTER] = "reduce_scatter",
    [HOOP__FAULT_ALL_GATHER] = "all_gather",
    [HOOP__FAULT_BACKWARD] = "backward",
    [HOOP__FAULT_CHECKPOINT] = "checkpoint",
    [HOOP__FAULT_VERDICT] = "verdict",
    [HOOP__FAULT_STORE_SYNC] = "store_sync",
};
#define NPOINTS ((int)(sizeof(point_names) / sizeof(point_names[0])))

static const struct {
    const char *name, *raised; /* in HOOP_TEST_FAULT; in the line hoop__fault_raise prints */
    int sig;
} signals[] = {{"KILL", "SIGKILL", SIGKILL},       {"STOP", "SIGSTOP", SIGSTOP},
               {"TERM", "SIGTERM", SIGTERM},       {"SEGV", "SIGSEGV", SIGSEGV},
               {"FAIL", "FAIL", HOOP__FAULT_FAIL}, {"CORRUPT", "CORRUPT", HOOP__FAULT_CORRUPT}};

/* "SIGKILL", or "FAIL". */
static const char *action_name(int sig)
{
    for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++)
        if (signals[i].sig == sig) return signals[i].raised;
    return "?";
}

static hoop__fault_spec armed;       /* point NONE: nothing armed */
static atomic_llong counts[NPOINTS]; /* occurrences seen, per point */
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The next ':'-separated field of *s into buf; 0 when there is none. */
static int field(const char **s, char *buf, size_t cap)
{
    const char *end = strchr(*s, ':');
    size_t n = end ? (size_t)(end - *s) : strlen(*s);
    if (n == 0 || n >= cap) return 0;
    memcpy(buf, *s, n);
    buf[n] = '\0';
    *s += n + (end != NULL);
    return 1;
}

hoop_status hoop__fault_parse(const char *text, hoop__fault_spec *out)
{
    char f[4][32];
    const char *s = text ? text : "";
    int64_t v;
    for (int i = 0; i < 4; i++)
        if (!field(&s, f[i], sizeof(f[i])))
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "HOOP_TEST_FAULT='%s' is not a test fault (" FAULT_FORM
                              "): field %d is missing, empty or too long",
                              text ? text : "", i + 1);
    /* field() steps over the separator after the fourth field too: "...:KILL:" has an
     * empty fifth field, no more acceptable than "...:KILL:x". */
    if (*s != '\0' || s[-1] == ':')
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "HOOP_TEST_FAULT='%s' has more than four fields (" FAULT_FORM ")", text);
    memset(out, 0, sizeof(*out));
    HOOP_CHECK(hoop__parse_int("HOOP_TEST_FAULT's RANK", f[0], 0, 1 << 30, &v));
    out->rank = (int)v;
    for (int p = 1; p < NPOINTS; p++)
        if (strcmp(f[1], point_names[p]) == 0) out->point = (hoop__fault_point)p;
    if (out->point == HOOP__FAULT_NONE)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "HOOP_TEST_FAULT: '%s' is not a point (rendezvous, connect, "
                          "reduce_scatter, all_gather, backward, checkpoint, verdict, "
                          "store_sync)",
                          f[1]);
    HOOP_CHECK(hoop__parse_int("HOOP_TEST_FAULT's INDEX", f[2], 0, INT64_MAX, &out->index));
    for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++)
        if (strcmp(f[3], signals[i].name) == 0) out->sig = signals[i].sig;
    if (out->sig == 0)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "HOOP_TEST_FAULT: '%s' is not a signal (KILL, STOP, TERM, SEGV), FAIL "
                          "or CORRUPT",
                          f[3]);
    return HOOP_OK;
}

static void load(void)
{
    const char *v = getenv("HOOP_TEST_FAULT");
    hoop__fault_spec s;
    if (!v || !*v || hoop__fault_parse(v, &s) != HOOP_OK) return;
    armed = s;
    HOOP_WARN("HOOP_TEST_FAULT=%s is set: a test hook; rank %d will raise %s at %s #%lld", v,
              s.rank, action_name(s.sig), point_names[s.point], (long long)s.index);
}

/* This process's RANK variable (0 when unset or malformed). */
static int env_rank(void)
{
    const char *v = getenv("RANK");
    return v && *v ? atoi(v) : 0;
}

int hoop__fault_at(hoop__fault_point point, int rank, int64_t index)
{
    pthread_once(&once, load);
    if (armed.point != point || point == HOOP__FAULT_NONE) return 0;
    return armed.index == index && armed.rank == (rank < 0 ? env_rank() : rank);
}

int hoop__fault_tick(hoop__fault_point point, int rank)
{
    pthread_once(&once, load);
    if (armed.point != point || point == HOOP__FAULT_NONE) return 0;
    if (armed.rank != (rank < 0 ? env_rank() : rank)) return 0;
    return atomic_fetch_add(&counts[point], 1) == armed.index;
}

void hoop__fault_raise(int rank, const char *where)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    fprintf(stderr, "hoop: HOOP_TEST_FAULT: rank %d raises %s in %s at %lld.%09ld\n",
            rank < 0 ? env_rank() : rank, action_name(armed.sig), where, (long long)ts.tv_sec,
            ts.tv_nsec);
    fflush(stderr);
    if (armed.sig > 0) raise(armed.sig);
}

void hoop__fault_skip(int rank, const char *where, const char *why)
{
    fprintf(stderr, "hoop: HOOP_TEST_FAULT: rank %d corrupts nothing in %s: %s\n",
            rank < 0 ? env_rank() : rank, where, why);
    fflush(stderr);
}

int hoop__fault_corrupts(void)
{
    pthread_once(&once, load);
    return armed.sig == HOOP__FAULT_CORRUPT;
}

hoop_status hoop__fault_arm(const char *value)
{
    hoop__fault_spec s = {0};
    pthread_once(&once, load);
    if (value) HOOP_CHECK(hoop__fault_parse(value, &s));
    armed = s;
    for (int p = 0; p < NPOINTS; p++) atomic_store(&counts[p], 0);
    return HOOP_OK;
}
