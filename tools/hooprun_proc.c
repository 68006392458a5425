/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/hooprun_proc.c -- hooprun's supervisor: start workers, relay output and
 * signals, stop everything when one worker fails, reap everything.
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
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/launch.h"
#include "hooprun.h"

#define LINE_MAX_BYTES (64 * 1024) /* longer lines are cut into pieces, each prefixed */
#define REAP_EXTRA_MS 5000         /* after SIGKILL, how long we wait before giving up */
#define DRAIN_ROUNDS 16            /* reads per stream per poll round */
#define STOP_TICK_MS 100           /* while stopping, how often we look for new orphans */

typedef struct stream {
    int fd;     /* read end of the worker's pipe; -1 once closed */
    int out_fd; /* where its lines go: 1 or 2 */
    char *buf;  /* partial line */
    size_t len;
} stream;

typedef struct worker {
    pid_t pid; /* also the process group id */
    int rank;
    int running; /* not yet reaped */
    stream out, err;
} worker;

typedef struct supervisor {
    const hooprun_plan *plan;
    worker *w;
    int n;   /* workers started */
    int sfd; /* signalfd */
    sigset_t old_mask;
    int stopping;       /* 1 once SIGTERM went out (or a stop began) */
    int killed;         /* 1 once SIGKILL went out */
    int64_t kill_at_ns; /* when to send SIGKILL, while stopping */
    int exit_code;      /* first failure's code; -1 = none yet */
    int interrupted;    /* INT/TERM that hooprun received, 0 = none */
    int closed_stdout[3];
} supervisor;

static const int forwarded[] = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP};

// ----- output relay ------------------------------------------------------------------

static void write_all(supervisor *s, int fd, struct iovec *iov, int n)
{
    if (s->closed_stdout[fd]) return;
    while (n > 0) {
        ssize_t k = writev(fd, iov, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            s->closed_stdout[fd] = 1; /* EPIPE or worse: drop further output there */
            return;
        }
        while (n > 0 && (size_t)k >= iov->iov_len) {
            k -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + k;
            iov->iov_len -= (size_t)k;
        }
    }
}

/* Writes one line (without its newline) with the rank prefix. */
static void emit_line(supervisor *s, const worker *w, int out_fd, const char *line, size_t len)
{
    char prefix[32];
    int plen = snprintf(prefix, sizeof(prefix), "[rank %d] ", w->rank);
    struct iovec iov[3] = {
        {.iov_base = prefix, .iov_len = s->plan->prefix ? (size_t)plen : 0},
        {.iov_base = (void *)line, .iov_len = len},
        {.iov_base = "\n", .iov_len = 1},
    };
    write_all(s, out_fd, iov, 3);
}

/* Emits every complete line in st->buf; with flush, the leftover too. */
static void emit_lines(supervisor *s, const worker *w, stream *st, int flush)
{
    size_t start = 0;
    for (size_t i = 0; i < st->len; i++) {
        if (st->buf[i] != '\n') continue;
        emit_line(s, w, st->out_fd, st->buf + start, i - start);
        start = i + 1;
    }
    if ((flush || st->len - start == LINE_MAX_BYTES) && st->len > start) {
        emit_line(s, w, st->out_fd, st->buf + start, st->len - start);
        start = st->len;
    }
    memmove(st->buf, st->buf + start, st->len - start);
    st->len -= start;
}

static void close_stream(supervisor *s, const worker *w, stream *st)
{
    if (st->fd < 0) return;
    emit_lines(s, w, st, 1);
    close(st->fd);
    st->fd = -1;
}

/* Reads what is there, at most DRAIN_ROUNDS reads so that a chatty worker cannot starve
 * signal handling; closes the stream at EOF or on a read error. Returns 1 when it
 * stopped with data possibly left, 0 when the pipe is empty or closed. */
static int drain_stream(supervisor *s, const worker *w, stream *st)
{
    for (int round = 0; round < DRAIN_ROUNDS; round++) {
        ssize_t k = read(st->fd, st->buf + st->len, LINE_MAX_BYTES - st->len);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (k <= 0) {
            close_stream(s, w, st);
            return 0;
        }
        st->len += (size_t)k;
        emit_lines(s, w, st, 0);
    }
    return 1;
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
        if (pid <= 1 || (orphans_only && find_worker(s, (pid_t)pid) != NULL)) continue;
        if (kill((pid_t)pid, sig) == 0) count++;
    }
    return count;
}

static void begin_stop(supervisor *s)
{
    if (s->stopping) return;
    s->stopping = 1;
    s->kill_at_ns = hoop__now_ns() + s->plan->grace_ms * 1000000LL;
    signal_groups(s, SIGTERM);
    signal_children(s, SIGTERM, 0);
}

static void kill_everything(supervisor *s)
{
    for (int i = 0; i < s->n; i++)
        if (s->w[i].running)
            fprintf(stderr,
                    "hooprun: rank %d (pid %d) did not stop within %.1f s; sending SIGKILL\n",
                    s->w[i].rank, (int)s->w[i].pid, (double)s->plan->grace_ms / 1000.0);
    s->killed = 1;
    signal_groups(s, SIGKILL);
    signal_children(s, SIGKILL, 0);
}

// ----- reaping ----------------------------------------------------------------------

/* Records a worker's end; the first failure decides hooprun's exit code and stops all. */
static void worker_ended(supervisor *s, worker *w, int status)
{
    w->running = 0;
    int code = 0;
    if (WIFEXITED(status)) code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) code = 128 + WTERMSIG(status);
    /* After hooprun was interrupted, workers dying of it are expected: no culprit. */
    if (code == 0 || s->exit_code >= 0 || s->interrupted) return;
    s->exit_code = code;
    if (WIFEXITED(status))
        fprintf(stderr, "hooprun: rank %d (pid %d) exited with code %d\n", w->rank, (int)w->pid,
                code);
    else
        fprintf(stderr, "hooprun: rank %d (pid %d) was killed by signal %d (%s)\n", w->rank,
                (int)w->pid, WTERMSIG(status), strsignal(WTERMSIG(status)));
    if (s->n > 1 && !s->stopping)
        fprintf(stderr, "hooprun: stopping the other workers (SIGTERM, SIGKILL after %.1f s)\n",
                (double)s->plan->grace_ms / 1000.0);
    begin_stop(s);
}

/* Reaps every child that has ended: workers and adopted grandchildren alike. */
static void reap(supervisor *s)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) return;
        worker *w = find_worker(s, pid);
        if (w != NULL) worker_ended(s, w, status);
    }
}

static int workers_running(const supervisor *s)
{
    int n = 0;
    for (int i = 0; i < s->n; i++) n += s->w[i].running;
    return n;
}

static int have_children(void)
{
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == 0;
}

// ----- start-up ---------------------------------------------------------------------

static int setup_signals(supervisor *s)
{
    sigset_t set;
    sigemptyset(&set);
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++) {
        /* A shell starts background jobs with SIGINT ignored; we still want to see it. */
        sigaction(forwarded[i], &dfl, NULL);
        sigaddset(&set, forwarded[i]);
    }
    sigaddset(&set, SIGCHLD);
    signal(SIGPIPE, SIG_IGN);
    if (sigprocmask(SIG_BLOCK, &set, &s->old_mask) != 0) return -1;
    s->sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (s->sfd < 0) return -1;
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) return -1;
    return 0;
}

static void set_env_int(const char *name, int v)
{
    char buf[16];
    snprintf(buf, sizeof(buf), "%d", v);
    setenv(name, buf, 1);
}

/* In the child: becomes its own group, wires stdio, sets the env and execs. */
static void exec_worker(const supervisor *s, int local_rank, int out_w, int err_w, pid_t parent)
{
    const hooprun_plan *p = s->plan;
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a SIGKILLed hooprun takes its workers along */
    if (getppid() != parent) _exit(127);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &s->old_mask, NULL);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    if (out_w >= 0) dup2(out_w, 1);
    if (err_w >= 0) dup2(err_w, 2);
    hoop_launch_ids ids;
    if (hoop__launch_ids_of(p->nnodes, p->node_rank, p->nproc_per_node, local_rank, &ids) != 0)
        _exit(127);
    set_env_int("RANK", ids.rank);
    set_env_int("LOCAL_RANK", ids.local_rank);
    set_env_int("WORLD_SIZE", ids.world_size);
    set_env_int("LOCAL_WORLD_SIZE", ids.local_world_size);
    set_env_int("NODE_RANK", ids.node_rank);
    set_env_int("MASTER_PORT", p->master_port);
    setenv("MASTER_ADDR", p->master_addr, 1);
    setenv("HOOP_TOKEN", p->token, 1);
    unsetenv("HOOP_CPU_BIND"); /* set below only when this hooprun bound the worker */
    if (p->cpus) { /* its own block of CPUs (--bind core); a refusal leaves it unbound */
        char list[256];
        hooprun_cpu_list(&p->cpus[local_rank], list, sizeof(list));
        if (sched_setaffinity(0, sizeof(cpu_set_t), &p->cpus[local_rank]) == 0)
            setenv("HOOP_CPU_BIND", list, 1);
    }
    execvp(p->argv[0], p->argv);
    dprintf(2, "hooprun: cannot run '%s': %s\n", p->argv[0], hoop__strerror(errno));
    _exit(127);
}

static int open_pipe(stream *st, int out_fd, int *write_end)
{
    int fds[2];
    st->fd = -1;
    st->out_fd = out_fd;
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    st->buf = malloc(LINE_MAX_BYTES);
    if (st->buf == NULL) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    st->fd = fds[0];
    *write_end = fds[1];
    return 0;
}

/* Undoes open_pipe on a worker that never started (the supervisor only cleans up the
 * started ones). */
static void close_pipe(stream *st)
{
    if (st->fd >= 0) close(st->fd);
    st->fd = -1;
    free(st->buf);
    st->buf = NULL;
}

static int spawn(supervisor *s, int local_rank)
{
    worker *w = &s->w[local_rank];
    int out_w = -1, err_w = -1;
    w->out.fd = w->err.fd = -1;
    if (s->plan->prefix && (open_pipe(&w->out, 1, &out_w) || open_pipe(&w->err, 2, &err_w))) {
        perror("hooprun: pipe");
        if (out_w >= 0) close(out_w);
        close_pipe(&w->out);
        close_pipe(&w->err);
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) exec_worker(s, local_rank, out_w, err_w, parent);
    if (out_w >= 0) close(out_w);
    if (err_w >= 0) close(err_w);
    if (pid < 0) {
        perror("hooprun: fork");
        close_pipe(&w->out);
        close_pipe(&w->err);
        return -1;
    }
    setpgid(pid, pid); /* also here, so no signal can reach the worker before it has a group */
    HOOP_INFO(LAUNCH, "rank %d: pid %d, its own process group",
              s->plan->node_rank * s->plan->nproc_per_node + local_rank, (int)pid);
    w->pid = pid;
    w->rank = s->plan->node_rank * s->plan->nproc_per_node + local_rank;
    w->running = 1;
    s->n++;
    return 0;
}

// ----- the loop ---------------------------------------------------------------------

static void on_signal(supervisor *s)
{
    struct signalfd_siginfo si;
    while (read(s->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD) continue; /* reaped after every wake-up */
        signal_groups(s, sig);
        if ((sig == SIGINT || sig == SIGTERM || sig == SIGHUP) && !s->interrupted) {
            s->interrupted = sig;
            fprintf(stderr, "hooprun: got %s; forwarded it to the workers\n", strsignal(sig));
            if (!s->stopping) {
                s->stopping = 1; /* the forwarded signal is the stop request; SIGKILL later */
                s->kill_at_ns = hoop__now_ns() + s->plan->grace_ms * 1000000LL;
            }
        }
    }
}

static int fill_pollfds(supervisor *s, struct pollfd *pfd, stream **who, worker **whose)
{
    int n = 0;
    pfd[n++] = (struct pollfd){.fd = s->sfd, .events = POLLIN};
    for (int i = 0; i < s->n; i++) {
        stream *sts[2] = {&s->w[i].out, &s->w[i].err};
        for (int k = 0; k < 2; k++) {
            if (sts[k]->fd < 0) continue;
            who[n] = sts[k];
            whose[n] = &s->w[i];
            pfd[n++] = (struct pollfd){.fd = sts[k]->fd, .events = POLLIN};
        }
    }
    return n;
}

/* One round: wait for output, a signal or the next deadline, then handle it. Returns 0
 * when everything is over. */
static int step(supervisor *s, struct pollfd *pfd, stream **who, worker **whose, int64_t give_up)
{
    reap(s);
    int left = workers_running(s);
    if (left == 0 && !s->stopping && (signal_groups(s, 0) > 0 || have_children())) begin_stop(s);
    if (left == 0 && !have_children()) return 0;
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
    int timeout = s->stopping ? hoop__ms_left(s->killed ? give_up : s->kill_at_ns) : -1;
    if (s->stopping && timeout > STOP_TICK_MS) timeout = STOP_TICK_MS;
    int n = fill_pollfds(s, pfd, who, whose);
    if (poll(pfd, (nfds_t)n, timeout) < 0 && errno != EINTR) return 0;
    if (pfd[0].revents) on_signal(s);
    for (int i = 1; i < n; i++)
        if (pfd[i].revents) drain_stream(s, whose[i], who[i]);
    return 1;
}

static int run_loop(supervisor *s)
{
    size_t cap = 1 + 2 * (size_t)s->n;
    struct pollfd *pfd = calloc(cap, sizeof(*pfd));
    stream **who = calloc(cap, sizeof(*who));
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
    for (int i = 0; i < s->n; i++) {
        while (s->w[i].out.fd >= 0 && drain_stream(s, &s->w[i], &s->w[i].out)) continue;
        while (s->w[i].err.fd >= 0 && drain_stream(s, &s->w[i], &s->w[i].err)) continue;
        close_stream(s, &s->w[i], &s->w[i].out);
        close_stream(s, &s->w[i], &s->w[i].err);
    }
    free(pfd);
    free(who);
    free(whose);
    return s->n;
}

int hooprun_supervise(const hooprun_plan *plan)
{
    supervisor s = {.plan = plan, .sfd = -1, .exit_code = -1};
    s.w = calloc((size_t)plan->nproc_per_node, sizeof(*s.w));
    if (s.w == NULL || setup_signals(&s) != 0) {
        perror("hooprun: setting up");
        free(s.w);
        return 1;
    }
    int spawn_failed = 0;
    fflush(NULL);
    for (int i = 0; i < plan->nproc_per_node && !spawn_failed; i++)
        spawn_failed = spawn(&s, i) != 0;
    if (spawn_failed) {
        fprintf(stderr, "hooprun: could not start rank %d; stopping the %d started workers\n",
                plan->node_rank * plan->nproc_per_node + s.n, s.n);
        s.exit_code = 1; /* their deaths by SIGTERM are ours, not theirs */
        begin_stop(&s);
    }
    run_loop(&s);
    for (int i = 0; i < s.n; i++) {
        free(s.w[i].out.buf);
        free(s.w[i].err.buf);
    }
    free(s.w);
    close(s.sfd);
    if (s.exit_code > 0) return s.exit_code;
    return s.interrupted ? 128 + s.interrupted : 0;
}
