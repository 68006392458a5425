/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/hooprun_guard.c -- a hooprun that dies without stopping its workers (SIGKILL,
 * the OOM killer, a crash) takes what they started along.
 *
 * A worker has PR_SET_PDEATHSIG (SIGKILL), but its own children do not: the program a
 * shell script starts without exec, a data loader's processes. Once hooprun is gone
 * nobody reaps or stops them (it was their subreaper), and they keep the GPU, the port
 * and the job's files. So hooprun starts a guard before its first worker: a child in its
 * own process group (a signal to hooprun's group does not reach it; the supervisor
 * leaves it out of "every child") that runs `hooprun --guard-of PID` ("hooprun-guard" in
 * ps), told each worker's process group through a pipe. When the pipe ends (hooprun
 * exited or died), it sends SIGKILL to every process still in those groups, within
 * hooprun's session (a group id reused by another program after the groups emptied is
 * in another session), and says so in one line (the workers themselves, dying of their
 * PR_SET_PDEATHSIG meanwhile, are not counted). hooprun tells it to forget a group once
 * it is empty (hooprun_guard_check, each round of the supervisor once a worker has
 * ended: its id may then be reused, by a process of this very session too) and all of
 * them once an attempt has reaped them, so a normal exit kills nothing, and then reaps
 * it (hooprun_guard_end): no zombie is left. A guard that dies (killed by hand) is
 * replaced, told the groups.
 *
 * Not covered: a process that left its worker's group (setsid, setpgid) escapes, as it
 * does a signal to the group; under Slurm the step's cgroup ends those too.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hooprun.h"

/* The guard's fd for the pipe's read end (moved there before its exec). */
#define GUARD_FD 3
/* The most worker groups one attempt has (--nproc-per-node's own limit is below). */
#define GUARD_MAX_GROUPS 4096

/* How many times a guard that died is replaced before hooprun goes on without one. */
#define GUARD_RESTARTS 3

static int guard_w = -1;     /* hooprun's write end; -1: no guard */
static pid_t guard_pid = -1; /* the guard, hooprun's child */
static int restarts;
static pid_t watched[GUARD_MAX_GROUPS]; /* what the guard was told */
static int nwatched;

static int start(void);

/* One record on the pipe: watch group pgid (> 0), forget group -pgid (< 0), or forget
 * them all (0). Returns 0, or -1 when the guard is gone. */
static int send_one(int32_t rec)
{
    ssize_t k;
    while ((k = write(guard_w, &rec, sizeof(rec))) == -1 && errno == EINTR) continue;
    return k == (ssize_t)sizeof(rec) ? 0 : -1;
}

/* The guard died (pid: it, reaped; or -1: its pipe broke): a new one, told every group. */
static void replace(void)
{
    int old = (int)guard_pid;
    if (guard_w >= 0) close(guard_w);
    guard_w = -1;
    guard_pid = -1;
    if (restarts++ >= GUARD_RESTARTS || start() != 0) {
        fprintf(stderr,
                "hooprun: the guard of the workers' process groups (pid %d) ended; going "
                "on without one\n",
                old);
        return;
    }
    fprintf(stderr,
            "hooprun: the guard of the workers' process groups (pid %d) ended (killed?); "
            "started another (pid %d)\n",
            old, (int)guard_pid);
    for (int i = 0; i < nwatched; i++)
        if (send_one((int32_t)watched[i]) != 0) break; /* replaced again at the next record */
}

static void tell(int32_t rec)
{
    if (guard_w >= 0 && send_one(rec) != 0) replace(); /* the new one was told the list */
}

void hooprun_guard_watch(pid_t pgid)
{
    if (pgid <= 0 || nwatched == GUARD_MAX_GROUPS) return;
    watched[nwatched++] = pgid;
    tell((int32_t)pgid);
}

void hooprun_guard_check(void)
{
    for (int i = 0; i < nwatched; i++) {
        if (killpg(watched[i], 0) == 0 || errno != ESRCH) continue;
        pid_t gone = watched[i];
        watched[i--] = watched[--nwatched]; /* empty: the id is free for anyone now */
        tell(-(int32_t)gone);
    }
}

void hooprun_guard_reaped(pid_t pid)
{
    if (pid > 0 && pid == guard_pid) replace();
}

void hooprun_guard_forget(void)
{
    nwatched = 0;
    tell(0);
}

int hooprun_guard_start(void)
{
    return guard_w >= 0 ? 0 : start();
}

static int start(void)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    char self[24];
    snprintf(self, sizeof(self), "%d", (int)getpid());
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls from here to the exec: hooprun may have threads
         * (node 0's store). No PR_SET_PDEATHSIG: the guard outlives hooprun. */
        setpgid(0, 0); /* a signal to hooprun's process group does not reach the guard */
        int null_fd = open("/dev/null", O_RDWR);
        if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(null_fd, 1) < 0) _exit(1);
        if (fds[0] == GUARD_FD ? fcntl(GUARD_FD, F_SETFD, 0) != 0 /* dup2 would keep CLOEXEC */
                               : dup2(fds[0], GUARD_FD) != GUARD_FD)
            _exit(1);
        if (close_range(GUARD_FD + 1, ~0U, 0) != 0)
            for (int fd = GUARD_FD + 1; fd < 1024; fd++) close(fd);
        char *argv[] = {"hooprun", "--guard-of", self, NULL};
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(fds[0]);
    if (pid < 0) {
        close(fds[1]);
        return -1;
    }
    setpgid(pid, pid);
    guard_pid = pid;
    guard_w = fds[1];
    return 0;
}

pid_t hooprun_guard_pid(void)
{
    return guard_pid;
}

void hooprun_guard_end(void)
{
    if (guard_pid < 0) return;
    if (guard_w >= 0) close(guard_w); /* its end of the pipe: it exits */
    guard_w = -1;
    for (int i = 0; i < 2000; i++) { /* at most 2 s: it has nothing left to do */
        pid_t r = waitpid(guard_pid, NULL, WNOHANG);
        if (r != 0) break; /* reaped, or reaped by the supervisor after it died */
        usleep(1000);
    }
    guard_pid = -1;
}

/* The session, process group and state of process pid from /proc (0 on success). */
static int proc_ids(long pid, pid_t *pgrp, pid_t *sid, char *state)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
    int ppid, g, s;
    if (p == NULL || sscanf(p + 1, " %c %d %d %d", state, &ppid, &g, &s) != 4) return -1;
    *pgrp = g;
    *sid = s;
    return 0;
}

/* SIGKILL to every live process of this session in one of the groups; returns how many
 * of them were not killed before (their pids kept in killed[0..*nkilled)), leaders (the
 * workers, dying of their PR_SET_PDEATHSIG) not counted. */
static int kill_groups(const pid_t *groups, int n, pid_t *killed, int *nkilled)
{
    DIR *d = opendir("/proc");
    if (d == NULL) return 0;
    pid_t me = getpid(), session = getsid(0);
    int fresh = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        pid_t pgrp, sid;
        char state;
        if (*end || pid <= 1 || pid == me || proc_ids(pid, &pgrp, &sid, &state) != 0) continue;
        if (sid != session || state == 'Z') continue;
        int ours = 0, seen = 0;
        for (int i = 0; i < n && !ours; i++) ours = groups[i] == pgrp;
        for (int i = 0; i < *nkilled && !seen; i++) seen = killed[i] == (pid_t)pid;
        if (!ours || kill((pid_t)pid, SIGKILL) != 0 || seen) continue;
        if (pgrp != (pid_t)pid) fresh++;
        if (*nkilled < GUARD_MAX_GROUPS) killed[(*nkilled)++] = (pid_t)pid;
    }
    closedir(d);
    return fresh;
}

int hooprun_guard_main(int argc, char **argv)
{
    struct stat sb;
    pid_t pgrp, sid;
    char state = 'Z';
    /* Started by hooprun PID (argv[2]), its parent, with the pipe on GUARD_FD; a hooprun
     * killed before this look is gone or a zombie (the guard then has another parent). */
    long owner = argc == 3 ? atol(argv[2]) : 0;
    int ours = owner > 1 && (owner == (long)getppid() ||
                             proc_ids(owner, &pgrp, &sid, &state) != 0 || state == 'Z');
    if (!ours || fstat(GUARD_FD, &sb) != 0 || !S_ISFIFO(sb.st_mode)) {
        fprintf(stderr, "hooprun: --guard-of is hooprun's own (the guard of its workers), not "
                        "an option to give it\n");
        return 2;
    }
    prctl(PR_SET_NAME, "hooprun-guard");
    static const int quiet[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE};
    for (size_t i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++) signal(quiet[i], SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    static pid_t groups[GUARD_MAX_GROUPS], killed[GUARD_MAX_GROUPS];
    int n = 0, nkilled = 0;
    for (;;) {
        int32_t rec;
        ssize_t k = read(GUARD_FD, &rec, sizeof(rec));
        if (k == -1 && errno == EINTR) continue;
        if (k != (ssize_t)sizeof(rec)) break; /* hooprun is gone */
        if (rec == 0) {
            n = 0;
        } else if (rec < 0) { /* that group is empty: its id may be reused */
            for (int i = 0; i < n; i++)
                if (groups[i] == (pid_t)-rec) groups[i--] = groups[--n];
        } else if (n < GUARD_MAX_GROUPS) {
            groups[n++] = (pid_t)rec;
        }
    }
    if (n == 0) return 0;
    /* What a group's members start while dying joins the group: rounds until none is
     * left alive (a killed one may live a moment: it is not counted again). */
    int total = 0;
    for (int round = 0; round < 50; round++) {
        int fresh = kill_groups(groups, n, killed, &nkilled);
        total += fresh;
        if (fresh == 0 && round > 0) break;
        usleep(20000);
    }
    if (total > 0)
        fprintf(stderr,
                "hooprun (pid %s) ended without stopping its workers (killed, or it crashed): its "
                "guard sent SIGKILL to the %d process%s left in their process groups\n",
                argv[2], total, total == 1 ? "" : "es");
    return 0;
}
