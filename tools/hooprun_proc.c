/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/hooprun_proc.c -- hooprun's supervisor: start workers, relay output and
 * signals, stop everything when one worker fails, reap everything.
 *
 * When a worker fails, the others get SIGTERM SETTLE_MS later (workers failing with it
 * end on their own meanwhile, which tells hooprun_report who failed first), then SIGKILL
 * after the grace period.
 *
 * Owns the worker processes, one output pipe per worker stream, and a signalfd. Every
 * worker leads its own process group, so a signal to the group also reaches what the
 * worker started. hooprun is a child subreaper (PR_SET_CHILD_SUBREAPER): a grandchild
 * whose worker died is re-parented to hooprun, so it is reaped here and can be killed
 * through /proc/self/task/<tid>/children even if it left the worker's group.
 * Signals are blocked and read from a signalfd in the poll loop, so no work runs in a
 * signal handler. Single-threaded.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/launch.h"
#include "hooprun.h"

#define REAP_EXTRA_MS 5000    /* after SIGKILL, how long we wait before giving up */
#define STOP_TICK_MS 100      /* while stopping, how often we look for new orphans */
#define SETTLE_MS 1000        /* after the first bad exit, how long the others may end alone */
#define COPIES_NS 250000000LL /* stop signals this close to the first are copies of it */
#define USR_SETTLE_MS 30000   /* after a worker's SIGUSR1/2 exit, how long the others may take */
#define USR_HOLD_MS 2000      /* a new worker's SIGUSR1/2 waits this long for its handler */
#define USR_TICK_MS 10        /* how often a held SIGUSR1/2 looks for it */
#define HALT_TICK_MS 1000     /* how often hooprun looks whether every running worker is stopped */

typedef hooprun_worker worker;

typedef struct supervisor {
    const hooprun_plan *plan;
    worker *w;
    int n;               /* workers started */
    int64_t stop_at_ns;  /* a failure was seen: SIGTERM everyone then (0 = not planned) */
    int stopping;        /* 1 once SIGTERM went out (or a stop began) */
    int killed;          /* 1 once SIGKILL went out */
    int64_t kill_at_ns;  /* when to send SIGKILL, while stopping */
    int64_t stop_sig_ns; /* when the first stop signal came */
    int hurried;         /* a second one came: SIGKILL after --grace from then */
    int stop_signal;     /* the stop began with a stop signal hooprun forwarded: SIGKILL
                          * after --grace's stop_grace_ms (the workers may be saving) */
    int exit_code;       /* first bad exit's code; -1 = none yet */
    int spawn_failed;    /* hooprun could not start every worker */
    int interrupted;     /* INT/TERM that hooprun received, 0 = none */
    int usr_forwarded;   /* SIGUSR1/SIGUSR2 last forwarded (a stop request, e.g. Slurm's
                          * --signal before preemption), 0 = none */
    int stopped_code;    /* 128 + that signal, once a worker ended with it */
    int usr_killed;      /* ... and one of them was killed by it, not exited with it */
    char earlier[800];   /* another node's failure or loss, noted before this node's first */
    int peer_failed;     /* another node's workers failed (1) or the nodes' store went (-1):
                          * this node's were stopped for it (hooprun_agent.c) */
    int64_t probe_at_ns; /* when to look for another node's failure next */
    int64_t halt_at_ns;  /* when to look next whether every running worker is stopped */
    int said_halted;     /* ... and hooprun said so (cleared once one runs again) */
} supervisor;

/* SIGQUIT too (a terminal's Ctrl+\ reaches only hooprun: its workers have their own
 * process groups), as torchrun forwards it; it ended hooprun with a core and the guard
 * killed the workers, or, ignored as in a shell's background job, did nothing. */
static const int forwarded[] = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT};

static int workers_left(const supervisor *s)
{
    int n = 0;
    for (int i = 0; i < s->n; i++) n += s->w[i].running;
    return n;
}

static worker *find_worker(const supervisor *s, pid_t pid)
{
    for (int i = 0; i < s->n; i++)
        if (s->w[i].pid == pid) return &s->w[i];
    return NULL;
}

// ----- signals to workers -------------------------------------------------------------

/* Sends sig to every worker's process group; returns how many groups still exist. */
static int signal_groups(supervisor *s, int sig)
{
    int alive = 0;
    for (int i = 0; i < s->n; i++)
        if (killpg(s->w[i].pid, sig) == 0) alive++;
    return alive;
}

/* Does worker w's program catch sig yet? 1 once it has exec'd (its executable is not
 * hooprun's: between fork and exec it has hooprun's handlers) and its handler is in
 * place (SigCgt in /proc/PID/status). */
static int catches(const worker *w, int sig)
{
    char path[64], exe[PATH_MAX], self[PATH_MAX], line[256];
    snprintf(path, sizeof(path), "/proc/%d/exe", (int)w->pid);
    ssize_t n = readlink(path, exe, sizeof(exe) - 1),
            m = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0 || m <= 0) return 0;
    exe[n] = self[m] = '\0';
    if (strcmp(exe, self) == 0) return 0;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)w->pid);
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    unsigned long long caught = 0;
    int found = 0;
    while (!found && fgets(line, sizeof(line), f))
        found = sscanf(line, "SigCgt: %llx", &caught) == 1;
    fclose(f);
    return found && (caught >> (sig - 1) & 1);
}

/* Forwards SIGUSR1/2 (a preemption's notice) to the workers. A worker started less than
 * USR_HOLD_MS ago whose program does not catch it yet gets it once it does (release_usr):
 * sent at once, it hit hoop-train in the milliseconds before its first line installs the
 * handler (the dynamic loader's), and killed it unsaved, as when hooprun forwards a notice
 * that came while the nodes met the moment the workers start. A program that never
 * catches it gets it USR_HOLD_MS after its start, with its default effect. */
/* Is sig to w still held at now: w runs, started less than USR_HOLD_MS ago, and does
 * not catch it yet? */
static int holds(const worker *w, int sig, int64_t now)
{
    return w->running && now - w->start_ns < USR_HOLD_MS * 1000000LL && !catches(w, sig);
}

static void forward_usr(supervisor *s, int sig)
{
    int64_t now = hoop__now_ns();
    for (int i = 0; i < s->n; i++) {
        worker *w = &s->w[i];
        if (holds(w, sig, now))
            w->usr_held = sig;
        else
            killpg(w->pid, sig);
    }
}

/* Sends each held SIGUSR1/2 whose worker catches it now, or whose hold is over. Returns
 * how many are still held. */
static int release_usr(supervisor *s)
{
    int64_t now = hoop__now_ns();
    int held = 0;
    for (int i = 0; i < s->n; i++) {
        worker *w = &s->w[i];
        if (!w->usr_held) continue;
        if (holds(w, w->usr_held, now)) {
            held++;
            continue;
        }
        if (w->running) killpg(w->pid, w->usr_held);
        w->usr_held = 0;
    }
    return held;
}

/* Sends sig to every child we have: workers and adopted orphans, or with
 * orphans_only, the adopted ones alone. Returns how many were signalled. */
static int signal_children(const supervisor *s, int sig, int orphans_only)
{
    static char buf[1 << 16]; /* pids of up to ~8000 children, space-separated */
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)getpid());
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t len = 0;
    while (len < sizeof(buf) - 1) {
        ssize_t k = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (k <= 0) break;
        len += (size_t)k;
    }
    close(fd);
    buf[len] = '\0';
    int count = 0;
    for (char *p = buf, *end; *p; p = end) {
        long pid = strtol(p, &end, 10);
        if (end == p) break;
        if (pid <= 1 || pid == hooprun_guard_pid() ||
            (orphans_only && find_worker(s, (pid_t)pid) != NULL))
            continue;
        if (kill((pid_t)pid, sig) == 0) count++;
    }
    return count;
}

/* SIGTERM to every worker and child, then SIGCONT (as systemd stops a unit): a stopped
 * worker takes its SIGTERM at once instead of being killed after the grace period. */
static void begin_stop(supervisor *s)
{
    if (s->stopping) return;
    s->stopping = 1;
    s->kill_at_ns = hoop__now_ns() + s->plan->grace_ms * 1000000LL;
    signal_groups(s, SIGTERM);
    signal_children(s, SIGTERM, 0);
    signal_groups(s, SIGCONT);
    signal_children(s, SIGCONT, 0);
}

/* Is pid stopped by a signal (state T in /proc/PID/stat: SIGSTOP, job control)? Not a
 * tracing stop (t): a debugger's, or LeakSanitizer's at a sanitized worker's exit (it
 * stops the process's threads with ptrace to scan them), which is no hang. */
static int process_stopped(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t len = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (len <= 0) return 0;
    buf[len] = '\0';
    const char *paren = strrchr(buf, ')'); /* the command may hold ')' itself */
    return paren && paren[1] == ' ' && paren[2] == 'T';
}

/* At the first failure: marks the workers that are stopped, and says so. Their peers
 * may be failing because they wait for them (hooprun_report.c, rule 4). */
static void find_stopped(supervisor *s, const worker *failed)
{
    for (int i = 0; i < s->n; i++) {
        worker *w = &s->w[i];
        if (!w->running || !process_stopped(w->pid)) continue;
        w->found_stopped = 1;
        fprintf(stderr,
                "hooprun: rank %d (pid %d) is stopped (SIGSTOP or job control) while rank %d "
                "fails: rank %d may have failed waiting for it\n",
                w->rank, (int)w->pid, failed->rank, failed->rank);
    }
}

/* Every worker still running is stopped (SIGSTOP, job control) and nothing is planned:
 * nothing moves until somebody sends SIGCONT, so hooprun says so, once per such halt
 * (it waits on, as a stop may be meant: a user inspecting a worker). */
static void look_halted(supervisor *s, int64_t now)
{
    if (s->stopping || s->stop_at_ns || now < s->halt_at_ns) return;
    s->halt_at_ns = now + HALT_TICK_MS * 1000000LL;
    int running = 0;
    for (int i = 0; i < s->n; i++) {
        if (!s->w[i].running) continue;
        running++;
        if (!process_stopped(s->w[i].pid)) {
            s->said_halted = 0;
            return;
        }
    }
    if (running == 0 || s->said_halted) return;
    s->said_halted = 1;
    char list[400] = "";
    size_t at = 0;
    for (int i = 0; i < s->n && at < sizeof(list) - 40; i++)
        if (s->w[i].running)
            at += (size_t)snprintf(list + at, sizeof(list) - at, "%srank %d (pid %d)",
                                   at ? ", " : "", s->w[i].rank, (int)s->w[i].pid);
    fprintf(stderr,
            "hooprun: every worker left is stopped (SIGSTOP or job control): %s; waiting for "
            "%s (kill -CONT PID continues a worker; SIGINT or SIGTERM to hooprun stops the job)\n",
            list, running == 1 ? "it" : "them");
}

static void kill_everything(supervisor *s)
{
    const int asked = s->stop_signal; /* their own stop (a checkpoint's save) is cut */
    const double waited = asked ? (double)(hoop__now_ns() - s->stop_sig_ns) / 1e9
                                : (double)s->plan->grace_ms / 1000.0;
    for (int i = 0; i < s->n; i++)
        if (s->w[i].running)
            fprintf(stderr,
                    "hooprun: rank %d (pid %d) did not stop within %.1f s%s; sending SIGKILL%s\n",
                    s->w[i].rank, (int)s->w[i].pid, waited,
                    asked ? " of the signal hooprun forwarded" : "",
                    asked ? " (a save it was making, if any, is lost; --grace S gives the "
                            "workers longer)"
                          : "");
    s->killed = 1;
    signal_groups(s, SIGKILL);
    signal_children(s, SIGKILL, 0);
}

// ----- reaping ----------------------------------------------------------------------

/* Records a worker's end. The first bad exit decides the fallback exit code and plans
 * the stop: SIGTERM goes out SETTLE_MS later, so that workers already failing with it
 * end on their own and hooprun_report can tell which failure came first. */
static void worker_ended(supervisor *s, worker *w, int status, int64_t now)
{
    w->running = 0;
    w->ended = 1;
    w->status = status;
    w->end_ns = now;
    w->after_stop = s->stopping;
    w->after_kill = s->killed;
    clock_gettime(CLOCK_REALTIME, &w->end_wall);
    int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    /* After hooprun was interrupted, workers dying of it are expected: no culprit. */
    if (code == 0 || s->exit_code >= 0 || s->interrupted || s->peer_failed) return;
    /* A worker that ends with 128 + SIGUSR1/2 (hoop-train's exit after saving on
     * preemption: Slurm's --signal reaches hooprun, which forwards it, or the workers
     * themselves) did what was asked: no failure, and the others stop alike, at the same
     * step. Without a forwarded signal they get USR_SETTLE_MS to do so. */
    int usr = code == 128 + SIGUSR1 || code == 128 + SIGUSR2;
    if (usr && (!s->usr_forwarded || code == 128 + s->usr_forwarded)) {
        s->stopped_code = code;
        if (WIFSIGNALED(status)) s->usr_killed = 1;
        if (!s->usr_forwarded && !s->stop_at_ns && !s->stopping && workers_left(s) > 0) {
            fprintf(stderr,
                    "hooprun: rank %d %s %d (128 + %s, a preemption?); the others get %d s to "
                    "stop alike\n",
                    w->rank,
                    WIFSIGNALED(status) ? "was killed by its signal: code" : "stopped with exit",
                    code, strsignal(code - 128), USR_SETTLE_MS / 1000);
            s->stop_at_ns = now + USR_SETTLE_MS * 1000000LL;
        }
        return;
    }
    s->exit_code = code;
    find_stopped(s, w);
    char how[80], note[540];
    if (WIFSIGNALED(status))
        snprintf(how, sizeof(how), "was killed by signal %d", WTERMSIG(status));
    else
        snprintf(how, sizeof(how), "exited with code %d", code);
    /* The other nodes quote its message: what it wrote before its exit may still be in
     * the pipe (this round reaped before it read). */
    hooprun_out_drain(s->plan, w, &w->err, now);
    const char *words = hooprun_last_words(w);
    snprintf(note, sizeof(note), "rank %d %s%s%.400s%s%s", w->rank, how,
             words ? " (its message: " : "", words ? words : "",
             words && strlen(words) > 400 ? "..." : "", words ? ")" : "");
    hooprun_agent_failed(s->plan, note, s->earlier, sizeof(s->earlier));
    if (s->stopping || workers_left(s) == 0) return;
    fprintf(stderr,
            "hooprun: rank %d %s; stopping the other workers (SIGTERM in %.1f s, SIGKILL %.1f s "
            "later)\n",
            w->rank, how, SETTLE_MS / 1000.0, (double)s->plan->grace_ms / 1000.0);
    s->stop_at_ns = now + SETTLE_MS * 1000000LL;
}

/* Reaps every child that has ended: workers and adopted grandchildren alike. */
static void reap(supervisor *s, int64_t now)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) return;
        worker *w = find_worker(s, pid);
        if (w != NULL && w->running) worker_ended(s, w, status, now);
        if (w == NULL) hooprun_guard_reaped(pid);
    }
}

/* Any child (a zombie too) but the guard. */
static int have_children(const supervisor *s)
{
    return signal_children(s, 0, 0) > 0;
}

// ----- start-up ---------------------------------------------------------------------

/* Once per process (every attempt of --max-restarts shares it): the forwarded signals
 * and SIGCHLD are blocked and read from a signalfd; a signal that comes between two
 * attempts waits there for the next one. */
static int sfd = -1;   /* the signalfd of the signals above, from the first attempt on */
static int stopped_by; /* the first SIGINT, SIGTERM, SIGHUP or SIGQUIT hooprun got */
/* SIGUSR1/2 read by hooprun_stop_signal while no worker ran (at the nodes' meetings): a
 * preemption's notice (Slurm's --signal), which the next attempt's workers get as they
 * start; it was dropped, and a job that met then ran on past its notice unsaved. */
static int pending_usr;

/* sig when it asks hooprun to stop (SIGINT, SIGTERM, SIGHUP, SIGQUIT; the first is kept in
 * stopped_by), else 0. */
static int stop_request(int sig)
{
    if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP && sig != SIGQUIT) return 0;
    if (!stopped_by) stopped_by = sig;
    return sig;
}

int hooprun_stop_signal(void)
{
    struct signalfd_siginfo si;
    int stop = 0;
    while (sfd >= 0 && read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGUSR1 || si.ssi_signo == SIGUSR2) pending_usr = (int)si.ssi_signo;
        int sig = stop_request((int)si.ssi_signo);
        if (!stop) stop = sig;
    }
    return stop;
}

int hooprun_stopped_by(void)
{
    return stopped_by;
}

static sigset_t old_mask; /* the mask before hooprun blocked the signals above */
static int stopped_code;  /* the last attempt's workers stopped on SIGUSR1/2 as asked */

int hooprun_stopped_as_asked(void)
{
    return stopped_code;
}

static pthread_t main_thread; /* the one that blocks the signals and reads sfd */

/* A signal sent to the process goes to any thread that does not block it: one a library
 * or a sanitizer's runtime started before main blocked them (TSan's is one). There it
 * would end the process (SIGTERM's default) or be lost (SIGCHLD's); it is passed on to
 * the main thread, which blocks it and reads it from sfd. In a forked child before its
 * exec, the only thread is the main one: the default action, as without hooprun. */
static void pass_to_main(int sig)
{
    int saved = errno;
    if (pthread_equal(pthread_self(), main_thread)) {
        signal(sig, SIG_DFL);
        raise(sig);
    } else {
        pthread_kill(main_thread, sig);
    }
    errno = saved;
}

/* The line each forwarded signal gets while connecting (filled before the handler). */
static char connect_lines[sizeof(forwarded) / sizeof(forwarded[0])][160];

static void connect_signal(int sig)
{
    for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
        if (forwarded[i] == sig) {
            ssize_t ignored = write(STDERR_FILENO, connect_lines[i], strlen(connect_lines[i]));
            (void)ignored;
        }
    _exit(128 + sig);
}

int hooprun_signals_connecting(int node_rank)
{
    struct sigaction say = {.sa_handler = connect_signal};
    for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++) {
        snprintf(connect_lines[i], sizeof(connect_lines[i]),
                 "hooprun (node %d): got %s while connecting to the nodes' rendezvous; exiting "
                 "%d\n",
                 node_rank, strsignal(forwarded[i]), 128 + forwarded[i]);
        if (sigaction(forwarded[i], &say, NULL) != 0) return -1;
    }
    return 0;
}

int hooprun_signals_init(void)
{
    if (sfd < 0) {
        sigset_t set;
        sigemptyset(&set);
        if (hooprun_guard_start() != 0)
            HOOP_INFO(LAUNCH,
                      "no guard for the workers' process groups (%s): a hooprun killed "
                      "with SIGKILL leaves what its workers started running",
                      hoop__strerror(errno));
        main_thread = pthread_self();
        /* Also replaces SIG_IGN: a shell starts background jobs with SIGINT ignored; we
         * still want to see it. Reset to SIG_DFL by a worker's exec. */
        struct sigaction pass = {.sa_handler = pass_to_main, .sa_flags = SA_RESTART};
        for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++) {
            sigaction(forwarded[i], &pass, NULL);
            sigaddset(&set, forwarded[i]);
        }
        sigaction(SIGCHLD, &pass, NULL);
        sigaddset(&set, SIGCHLD);
        signal(SIGPIPE, SIG_IGN);
        if (sigprocmask(SIG_BLOCK, &set, &old_mask) != 0) return -1;
        sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
        if (sfd < 0) return -1;
        if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) return -1;
    }
    return 0;
}

static void set_env_int(const char *name, int v)
{
    char buf[16];
    snprintf(buf, sizeof(buf), "%d", v);
    setenv(name, buf, 1);
}

/* The env:// contract plus torchrun's extra variables: GROUP_RANK (this node's worker
 * group = NODE_RANK), GROUP_WORLD_SIZE (nodes), ROLE_RANK and ROLE_WORLD_SIZE (one role:
 * RANK and WORLD_SIZE), TORCHELASTIC_RESTART_COUNT / _MAX_RESTARTS, and, as torchrun
 * does with several workers per node, OMP_NUM_THREADS=1 unless it is set (and then
 * HOOP_OMP_DEFAULT=1, so that hoop-train can tell its own default from a user's). */
static void set_worker_env(const hooprun_plan *p, const hoop_launch_ids *ids)
{
    set_env_int("RANK", ids->rank);
    set_env_int("LOCAL_RANK", ids->local_rank);
    set_env_int("WORLD_SIZE", ids->world_size);
    set_env_int("LOCAL_WORLD_SIZE", ids->local_world_size);
    set_env_int("NODE_RANK", ids->node_rank);
    set_env_int("GROUP_RANK", ids->node_rank);
    set_env_int("GROUP_WORLD_SIZE", p->nnodes);
    set_env_int("ROLE_RANK", ids->rank);
    set_env_int("ROLE_WORLD_SIZE", ids->world_size);
    set_env_int("TORCHELASTIC_RESTART_COUNT", p->restart);
    set_env_int("TORCHELASTIC_MAX_RESTARTS", p->max_restarts);
    set_env_int("MASTER_PORT", p->master_port);
    setenv("MASTER_ADDR", p->master_addr, 1);
    setenv("HOOP_TOKEN", p->token, 1);
    setenv("HOOP_ENV_WARNED", "1", 1); /* main warned of unknown HOOP_* already */
    if (p->nproc_per_node > 1 && getenv("OMP_NUM_THREADS") == NULL) {
        setenv("OMP_NUM_THREADS", "1", 1);
        setenv("HOOP_OMP_DEFAULT", "1", 1);
    } else {
        unsetenv("HOOP_OMP_DEFAULT"); /* only hooprun says that: a user's would be believed */
    }
}

/* In the child: becomes its own group, wires stdio, sets the env and execs. */
static void exec_worker(const supervisor *s, int local_rank, int out_w, int err_w, pid_t parent)
{
    const hooprun_plan *p = s->plan;
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a SIGKILLed hooprun takes its workers along */
    if (getppid() != parent) _exit(127);
    signal(SIGPIPE, SIG_DFL);
    /* A signal forwarded before the exec (a preemption's notice hooprun had kept, sent
     * as the workers start) waits, blocked, and acts by default once unblocked, as after
     * the exec; through pass_to_main it was lost under TSan, which defers a handler to
     * the thread's next intercepted call, and the exec came first. */
    for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
        signal(forwarded[i], SIG_DFL);
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    if (null_fd > 0) close(null_fd); /* not left open in the worker */
    if (out_w >= 0) dup2(out_w, 1);
    if (err_w >= 0) dup2(err_w, 2);
    hoop_launch_ids ids;
    if (hoop__launch_ids_of(p->nnodes, p->node_rank, p->nproc_per_node, local_rank, &ids) != 0)
        _exit(127);
    set_worker_env(p, &ids);
    unsetenv("HOOP_CPU_BIND"); /* set below only when this hooprun bound the worker */
    if (p->cpus) { /* its own block of CPUs (--bind core); a refusal leaves it unbound */
        char list[256];
        hooprun_cpu_list(&p->cpus[local_rank], list, sizeof(list));
        if (sched_setaffinity(0, sizeof(cpu_set_t), &p->cpus[local_rank]) == 0)
            setenv("HOOP_CPU_BIND", list, 1);
    }
    execvp(p->argv[0], p->argv);
    int err = errno;
    char path[4096], why[4200];
    if ((err == ENOENT || err == EACCES) && hooprun_which(p->argv[0], path, sizeof(path)) &&
        hooprun_interpreter_missing(path, why, sizeof(why)))
        dprintf(2, "hooprun: cannot run '%s': %s\n", p->argv[0], why);
    else
        dprintf(2, "hooprun: cannot run '%s': %s\n", p->argv[0], hoop__strerror(err));
    _exit(127);
}

int hooprun_interpreter_missing(const char *path, char *buf, size_t cap)
{
    char head[512];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, head, sizeof(head) - 1);
    close(fd);
    if (n < 3 || head[0] != '#' || head[1] != '!') return 0;
    head[n] = '\0';
    char *interp = head + 2 + strspn(head + 2, " \t"); /* Linux: "#! /bin/sh" works too */
    interp[strcspn(interp, " \t\r\n")] = '\0';
    if (*interp == '\0') {
        snprintf(buf, cap, "its #! line names no interpreter");
        return 1;
    }
    struct stat sb;
    if (stat(interp, &sb) == 0 && S_ISDIR(sb.st_mode)) { /* access(X_OK) passes a directory */
        snprintf(buf, cap, "its interpreter '%s' (from its #! line) is a directory", interp);
        return 1;
    }
    if (access(interp, X_OK) == 0) return 0;
    int err = errno;
    if (err == EACCES && access(interp, F_OK) == 0)
        snprintf(buf, cap, "its interpreter '%s' (from its #! line) is not executable", interp);
    else
        snprintf(buf, cap, "its interpreter '%s' (from its #! line) does not exist", interp);
    return 1;
}

int hooprun_which(const char *prog, char *buf, size_t cap)
{
    struct stat sb;
    if (strchr(prog, '/')) {
        snprintf(buf, cap, "%s", prog);
        return stat(prog, &sb) == 0;
    }
    const char *dirs = getenv("PATH");
    for (const char *d = dirs ? dirs : "/usr/bin:/bin"; *d;) {
        size_t len = strcspn(d, ":");
        snprintf(buf, cap, "%.*s/%s", (int)len, len ? d : ".", prog);
        if (access(buf, X_OK) == 0 && stat(buf, &sb) == 0 && !S_ISDIR(sb.st_mode)) return 1;
        d += len + (d[len] == ':');
    }
    return 0;
}

static int spawn(supervisor *s, int local_rank)
{
    worker *w = &s->w[local_rank];
    int out_w, err_w;
    w->rank = s->plan->node_rank * s->plan->nproc_per_node + local_rank;
    w->local_rank = local_rank;
    if (hooprun_out_open(s->plan, w, &out_w, &err_w) != 0) {
        hooprun_out_free(w);
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) exec_worker(s, local_rank, out_w, err_w, parent);
    if (out_w >= 0) close(out_w);
    if (err_w >= 0) close(err_w);
    if (pid < 0) {
        perror("hooprun: fork");
        hooprun_out_free(w);
        return -1;
    }
    setpgid(pid, pid); /* also here, so no signal can reach the worker before it has a group */
    hooprun_guard_watch(pid);
    HOOP_INFO(LAUNCH, "rank %d: pid %d, its own process group", w->rank, (int)pid);
    w->pid = pid;
    w->running = 1;
    w->start_ns = hoop__now_ns();
    s->n++;
    return 0;
}

// ----- the loop ---------------------------------------------------------------------

static void on_signal(supervisor *s)
{
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD) continue; /* reaped after every wake-up */
        if (sig == SIGUSR1 || sig == SIGUSR2)
            forward_usr(s, sig);
        else
            signal_groups(s, sig);
        if (stop_request(sig)) signal_groups(s, SIGCONT); /* a stopped worker takes it too */
        if ((sig == SIGUSR1 || sig == SIGUSR2) && s->usr_forwarded != sig) {
            s->usr_forwarded = sig;
            fprintf(stderr, "hooprun: got %s; forwarded it to the workers\n", strsignal(sig));
        }
        const int64_t now = hoop__now_ns();
        if (stop_request(sig) && !s->interrupted) {
            s->interrupted = sig;
            s->stop_sig_ns = now;
            if (!s->stopping) {
                s->stopping = 1; /* the forwarded signal is the stop request; SIGKILL later */
                s->stop_signal = 1;
                s->kill_at_ns = now + s->plan->stop_grace_ms * 1000000LL;
            }
            if (s->stop_signal && s->plan->stop_grace_ms > s->plan->grace_ms)
                fprintf(stderr,
                        "hooprun: got %s; forwarded it to the workers (SIGKILL to any still "
                        "running in %.1f s; send it again to make that %.1f s)\n",
                        strsignal(sig), (double)s->plan->stop_grace_ms / 1000.0,
                        (double)s->plan->grace_ms / 1000.0);
            else
                fprintf(stderr, "hooprun: got %s; forwarded it to the workers\n", strsignal(sig));
        } else if (stop_request(sig) && s->stop_signal && !s->killed && !s->hurried &&
                   now - s->stop_sig_ns >= COPIES_NS) {
            /* Asked again (copies within COPIES_NS are one request, as timeout(1) signals
             * hooprun and its group): the workers get --grace from now, forwarded it too. */
            s->hurried = 1;
            int64_t kill_at = now + s->plan->grace_ms * 1000000LL;
            if (kill_at < s->kill_at_ns) s->kill_at_ns = kill_at;
            fprintf(stderr,
                    "hooprun: got %s again; forwarded it; SIGKILL to any worker still running "
                    "in %.1f s\n",
                    strsignal(sig), (double)hoop__ms_left(s->kill_at_ns) / 1000.0);
        }
    }
}

/* Registers every open stream; a worker's stderr before its stdout, so that a progress
 * line it ended just before printing a line lands before that line. */
static int fill_pollfds(supervisor *s, struct pollfd *pfd, hooprun_stream **who, worker **whose)
{
    int n = 0;
    pfd[n++] = (struct pollfd){.fd = sfd, .events = POLLIN};
    for (int i = 0; i < s->n; i++) {
        hooprun_stream *sts[2] = {&s->w[i].err, &s->w[i].out};
        for (int k = 0; k < 2; k++) {
            if (sts[k]->fd < 0 || hooprun_out_waits(sts[k])) continue;
            who[n] = sts[k];
            whose[n] = &s->w[i];
            pfd[n++] = (struct pollfd){.fd = sts[k]->fd, .events = POLLIN};
        }
    }
    return n;
}

/* How long poll may sleep: until the planned stop, the SIGKILL, the next orphan tick,
 * or the next look for a held SIGUSR1/2's handler (held: how many are held). */
static int poll_timeout(const supervisor *s, int64_t give_up, int held)
{
    if (!s->stopping) {
        int t = s->stop_at_ns ? hoop__ms_left(s->stop_at_ns) : -1;
        if (s->plan->agents && !s->peer_failed && (t < 0 || t > HOOPRUN_AGENT_PROBE_MS))
            t = HOOPRUN_AGENT_PROBE_MS;
        if (held && (t < 0 || t > USR_TICK_MS)) t = USR_TICK_MS;
        if (t < 0 || t > HALT_TICK_MS) t = HALT_TICK_MS; /* look_halted */
        return t;
    }
    int timeout = hoop__ms_left(s->killed ? give_up : s->kill_at_ns);
    return timeout > STOP_TICK_MS ? STOP_TICK_MS : timeout;
}

/* One round: wait for output, a signal or the next deadline, then handle it. Output and
 * exits seen in one round are stamped with the same time, output first (hooprun_report
 * breaks such ties). Returns 0 when everything is over. */
/* With the nodes' rendezvous: another node's failure (or the rendezvous gone) stops
 * this node's workers now, instead of when they time out waiting for the failed ones. */
static void probe_nodes(supervisor *s)
{
    char why[700];
    int64_t now = hoop__now_ns();
    if (!s->plan->agents || s->peer_failed || s->stopping || s->exit_code >= 0 ||
        now < s->probe_at_ns)
        return;
    s->probe_at_ns = now + HOOPRUN_AGENT_PROBE_MS * 1000000LL;
    int r = hooprun_agent_look(s->plan, why, sizeof(why));
    if (r == 0) return;
    s->peer_failed = r;
    char stop[64] = "this node's workers had ended";
    if (workers_left(s) > 0)
        snprintf(stop, sizeof(stop), "stopping this node's %d worker%s", workers_left(s),
                 workers_left(s) == 1 ? "" : "s");
    fprintf(stderr, "hooprun (node %d): %s %s; %s\n", s->plan->node_rank,
            r > 0 ? "attempt failed on" : "lost the nodes' rendezvous (its ranks are node ranks):",
            why, stop);
    begin_stop(s);
}

static int step(supervisor *s, struct pollfd *pfd, hooprun_stream **who, worker **whose,
                int64_t give_up)
{
    reap(s, hoop__now_ns());
    probe_nodes(s);
    look_halted(s, hoop__now_ns());
    int left = workers_left(s);
    if (left < s->n) hooprun_guard_check(); /* a running worker's group is not empty */
    if (!s->stopping && s->stop_at_ns && hoop__now_ns() >= s->stop_at_ns) begin_stop(s);
    if (left == 0 && !s->stopping) {
        int groups = signal_groups(s, 0), orphans = have_children(s);
        /* What the workers left running goes with them; said where nothing failed (it
         * went without a word, its output and files with it). */
        if ((groups > 0 || orphans) && s->exit_code < 0 && !s->interrupted)
            fprintf(stderr,
                    "hooprun: every worker has ended; stopping what they left running (%s%s%s): "
                    "SIGTERM now, SIGKILL %.1f s later\n",
                    groups ? "in their process groups" : "", groups && orphans ? ", and " : "",
                    orphans ? "processes that left them" : "", (double)s->plan->grace_ms / 1000.0);
        if (groups > 0 || orphans) begin_stop(s);
    }
    if (left == 0 && !have_children(s)) return 0;
    /* Grandchildren that left their worker's group come to us when their parent dies:
     * repeat the signal for them on every round (at least every STOP_TICK_MS). */
    if (s->killed)
        signal_children(s, SIGKILL, 0);
    else if (s->stopping)
        signal_children(s, SIGTERM, 1);
    if (s->stopping && !s->killed && hoop__now_ns() >= s->kill_at_ns) kill_everything(s);
    if (s->killed && hoop__now_ns() >= give_up) {
        fprintf(stderr, "hooprun: some processes survived SIGKILL; giving up on them\n");
        return 0;
    }
    int held = release_usr(s);
    int n = fill_pollfds(s, pfd, who, whose);
    int terms = hooprun_out_pollfds(pfd + n); /* queued output for a slow reader */
    if (poll(pfd, (nfds_t)(n + terms), poll_timeout(s, give_up, held)) < 0 && errno != EINTR)
        return 0;
    int64_t now = hoop__now_ns();
    if (pfd[0].revents) on_signal(s);
    for (int i = 1; i < n; i++)
        if (pfd[i].revents) hooprun_out_drain(s->plan, whose[i], who[i], now);
    for (int i = n; i < n + terms; i++) hooprun_out_writable(&pfd[i]);
    reap(s, now);
    return 1;
}

static void run_loop(supervisor *s)
{
    size_t cap = 3 + 2 * (size_t)s->n; /* signals, the workers' streams, stdout, stderr */
    struct pollfd *pfd = calloc(cap, sizeof(*pfd));
    hooprun_stream **who = calloc(cap, sizeof(*who));
    worker **whose = calloc(cap, sizeof(*whose));
    if (pfd == NULL || who == NULL || whose == NULL) {
        fprintf(stderr, "hooprun: out of memory\n");
        begin_stop(s);
        kill_everything(s);
    }
    int64_t give_up = INT64_MAX;
    while (pfd && who && whose && step(s, pfd, who, whose, give_up))
        if (s->killed && give_up == INT64_MAX) give_up = hoop__now_ns() + REAP_EXTRA_MS * 1000000LL;
    /* What is still buffered or in the pipes goes out before we exit. */
    int64_t now = hoop__now_ns();
    for (int i = 0; i < s->n; i++) {
        worker *w = &s->w[i];
        while (hooprun_out_drain(s->plan, w, &w->err, now)) continue;
        while (hooprun_out_drain(s->plan, w, &w->out, now)) continue;
        hooprun_out_close(s->plan, w, &w->err, now);
        hooprun_out_close(s->plan, w, &w->out, now);
    }
    free(pfd);
    free(who);
    free(whose);
}

int hooprun_supervise(const hooprun_plan *plan, int *failed)
{
    supervisor s = {.plan = plan, .exit_code = -1};
    *failed = 0;
    s.w = calloc((size_t)plan->nproc_per_node, sizeof(*s.w));
    if (s.w == NULL || hooprun_signals_init() != 0) {
        perror("hooprun: setting up");
        free(s.w);
        return 1;
    }
    fflush(NULL);
    for (int i = 0; i < plan->nproc_per_node && !s.spawn_failed; i++)
        s.spawn_failed = spawn(&s, i) != 0;
    if (s.spawn_failed) {
        if (s.n == 0)
            fprintf(stderr, "hooprun: could not start rank %d\n",
                    plan->node_rank * plan->nproc_per_node);
        else
            fprintf(stderr, "hooprun: could not start rank %d; stopping the %d started worker%s\n",
                    plan->node_rank * plan->nproc_per_node + s.n, s.n, s.n == 1 ? "" : "s");
        begin_stop(&s); /* their deaths by SIGTERM are ours, not theirs */
    } else if (pending_usr) {
        forward_usr(&s, pending_usr);
        s.usr_forwarded = pending_usr;
        fprintf(stderr,
                "hooprun: got %s while the nodes met; forwarded it to the workers as they "
                "started\n",
                strsignal(pending_usr));
    }
    pending_usr = 0;
    run_loop(&s);
    hooprun_guard_forget(); /* every group is empty now, its processes reaped */
    int all_ok = !s.spawn_failed;
    for (int i = 0; i < s.n; i++)
        all_ok = all_ok && WIFEXITED(s.w[i].status) && WEXITSTATUS(s.w[i].status) == 0;
    /* Interrupted, but every worker finished its work: that is success, whatever came in. */
    int rc = s.interrupted && !all_ok ? 128 + s.interrupted : 0;
    if (s.interrupted && all_ok)
        fprintf(stderr, "hooprun: every worker exited 0 after the %s; exiting 0\n",
                strsignal(s.interrupted));
    stopped_code = 0;
    if (!s.interrupted && s.exit_code < 0 && s.stopped_code) {
        rc = stopped_code = s.stopped_code; /* every worker ended well or as asked */
        /* killed by it: its default action, the program does not catch it */
        if (s.usr_killed)
            fprintf(stderr,
                    "hooprun: the workers ended on %s (exit %d), some killed by it: they do "
                    "not catch it (hoop-train catches SIGUSR1 from its start, not SIGUSR2), so "
                    "those saved nothing on it\n",
                    strsignal(rc - 128), rc);
        else
            fprintf(stderr, "hooprun: the workers stopped on %s as asked (exit %d)\n",
                    strsignal(rc - 128), rc);
    }
    if (s.spawn_failed)
        rc = 1;
    else if (s.exit_code > 0 && !s.interrupted) {
        /* Another node's worker failed first: this node's failures likely follow from it
         * (a DDP rank fails when its peer dies), and the cause is in that node's log. */
        if (s.earlier[0])
            fprintf(stderr,
                    "hooprun (node %d): %s (noted before this node's first failure below: the "
                    "cause may be there)\n",
                    plan->node_rank, s.earlier);
        rc = hooprun_report(plan, s.w, s.n, s.exit_code);
    } else if (s.exit_code > 0) {
        /* A worker had failed before the interrupt: its report still (hooprun exits
         * 128 + the signal, as interrupted; no restart follows). */
        (void)hooprun_report(plan, s.w, s.n, s.exit_code);
    } else if (s.peer_failed && !s.interrupted && !all_ok)
        rc = 1; /* the failure was another node's: its hooprun reports it */
    *failed = s.spawn_failed || (s.exit_code > 0 && !s.interrupted) ||
              (s.peer_failed && !s.interrupted && !all_ok);
    for (int i = 0; i < s.n; i++) hooprun_out_free(&s.w[i]);
    free(s.w);
    return rc;
}
