/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/hooprun.h -- what hooprun's modules share.
 *
 * hooprun.c resolves flags, Slurm variables and defaults into one hooprun_plan and runs
 * it once per attempt (--max-restarts); hooprun_proc.c starts the workers of an attempt
 * and watches them; hooprun_out.c relays their output (rank prefixes, '\r' progress
 * lines, --log-dir files) and keeps each worker's last stderr lines; hooprun_report.c
 * decides which worker failed first and prints the failure summary. Single-threaded.
 */
#ifndef HOOP_TOOLS_HOOPRUN_H
#define HOOP_TOOLS_HOOPRUN_H

#include <sched.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "hoop/store.h"

#define HOOPRUN_BIND_MAX 1024  /* workers per node that --bind core handles */
#define HOOPRUN_LINE_MAX 65536 /* longer output lines are cut into pieces, each prefixed */
#define HOOPRUN_TAIL_LINES 4   /* stderr lines kept per worker for the failure summary */
#define HOOPRUN_TAIL_BYTES 512 /* ... each cut to this many bytes */

typedef struct hooprun_plan {
    int nnodes, node_rank, nproc_per_node;
    const char *nnodes_from, *node_rank_from; /* "--nnodes" or "SLURM_NNODES", ...: for messages */
    char master_addr[256];
    int master_port;
    char token[129];       /* HOOP_TOKEN every worker of this attempt gets */
    int token_tail;        /* its last characters that restarts keep (one node's launch bits) */
    int prefix;            /* 1: prefix each terminal line with "[rank N] " */
    int64_t grace_ms;      /* SIGTERM -> SIGKILL delay when stopping workers */
    int64_t stop_grace_ms; /* ... after a stop signal hooprun forwarded (the workers may be
                            * saving: hoop-train's preemption): --grace, else 30 s */
    char **argv;           /* PROG ARGS..., NULL-terminated */
    cpu_set_t *cpus;     /* --bind core: worker i's CPUs (nproc_per_node sets); NULL = no binding */
    const char *log_dir; /* --log-dir: one file per rank there; NULL = none */
    int tee;             /* with log_dir: 1 stdout, 2 stderr, 3 both also go to the terminal */
    int restart;         /* this attempt's number of earlier restarts (0 = first attempt) */
    int max_restarts;    /* --max-restarts */
    char host[256];      /* this node's host name, for the summary */
    hoop_store *agents;  /* the nodes' rendezvous (hooprun_agent.c); NULL = none */
} hooprun_plan;

/* One line a worker wrote on stderr, with the time hooprun read it. */
typedef struct hooprun_line {
    int64_t ns; /* CLOCK_MONOTONIC */
    char text[HOOPRUN_TAIL_BYTES];
} hooprun_line;

/* One of a worker's output streams, read through a pipe. */
typedef struct hooprun_stream {
    int fd;      /* read end of the worker's pipe; -1 once closed (or not piped) */
    int term_fd; /* hooprun's stream that shows it (1 or 2); -1 = shown nowhere (--log-dir) */
    int is_err;  /* the worker's stderr: its lines are kept for the summary */
    char *buf;   /* what was read after the last '\n' or '\r' */
    size_t len;
    int after_cr; /* the last piece shown ended with '\r' (a progress line) */
} hooprun_stream;

typedef struct hooprun_worker {
    pid_t pid; /* also its process group id */
    int rank, local_rank;
    int running; /* not yet reaped */
    hooprun_stream out, err;
    int log_fd; /* --log-dir file, -1 = none */
    char log_path[4096];
    hooprun_line tail[HOOPRUN_TAIL_LINES]; /* ring of the last stderr lines */
    int tail_count, tail_next;
    /* How it ended (valid once running == 0 and ended == 1). */
    int ended;
    int status;               /* as waitpid reports it */
    int64_t end_ns;           /* CLOCK_MONOTONIC when hooprun reaped it */
    struct timespec end_wall; /* CLOCK_REALTIME at the same moment */
    int after_stop;           /* it ended after hooprun had sent it SIGTERM */
    int after_kill;           /* ... and after hooprun had sent SIGKILL too */
    int found_stopped;        /* it was stopped (state T: SIGSTOP) when
                               * the first worker failed: the others may have timed out
                               * waiting for it */
    int64_t start_ns;         /* CLOCK_MONOTONIC when hooprun forked it */
    int usr_held;             /* SIGUSR1/2 held until it catches it (hooprun_proc.c) */
} hooprun_worker;

/* Splits the CPUs this process may use into nproc disjoint, non-empty sets (hwloc's
 * topology-aware distribution when built with hwloc, else consecutive runs); returns 1,
 * or 0 when there are fewer CPUs than workers (then nobody is bound). */
int hooprun_cpu_sets(int nproc, cpu_set_t *sets);

/* Writes set as a list like "0-3,8" (for --dry-run and logs). */
void hooprun_cpu_list(const cpu_set_t *set, char *buf, size_t cap);

/* Starts plan->nproc_per_node workers, forwards their output and signals, stops all of
 * them when one fails, reaps everything, prints the failure summary, and returns
 * hooprun's exit status: 0 when every worker exited 0, the first failure's code (128 +
 * signal when killed by one), 128 + the signal that interrupted hooprun, or 1 when
 * hooprun itself failed (fork, pipe, log file). *failed is 1 when a worker failed or
 * could not be started (a restart may help), 0 on success or interruption. */
int hooprun_supervise(const hooprun_plan *plan, int *failed);

/* Why a file that exists cannot be executed for lack of something else: when path
 * starts with a "#!" line whose interpreter is missing or not executable, writes
 * "its interpreter '/x/y' (from its #! line) does not exist" (or "is not executable",
 * "is a directory")
 * into buf and returns 1; else returns 0. execvp reports a missing interpreter as
 * ENOENT, which reads as if the script itself were missing. Used before the fork and in
 * the forked child of (single-threaded) hooprun after a failed execvp. */
int hooprun_interpreter_missing(const char *path, char *buf, size_t cap);

/* Finds prog as execvp would (as given when it has a '/', else the first executable
 * regular file of that name on PATH, "/usr/bin:/bin" when PATH is unset) and writes
 * its path into buf; returns 0 when none is found. */
int hooprun_which(const char *prog, char *buf, size_t cap);

// ----- the nodes' rendezvous (hooprun_agent.c) ------------------------------------------
/* With --nnodes > 1 the nodes' hoopruns meet in a store that node 0's hooprun serves at
 * MASTER_ADDR:MASTER_PORT + 1 (see hooprun_agent.c), so that every node starts each
 * attempt together and stops its workers when another node's fail. */
#define HOOPRUN_AGENT_PROBE_MS 200 /* how often a node looks for another node's failure */
/* Node 0, ending after a failure: time for the others to read it (they hang up once
 * they have stopped). */
#define HOOPRUN_AGENT_LINGER_MS 1000
/* A look or a failure note waits this long for node 0's answer before the supervisor
 * goes on (the answer is read, the note left, at a later look); the exit waits
 * HOOPRUN_AGENT_QUIET_MS, then posts its notes (node 0's hooprun stalled: SIGSTOP, a
 * debugger). */
#define HOOPRUN_AGENT_LOOK_MS 50
#define HOOPRUN_AGENT_QUIET_MS 2000

/* MASTER_PORT + 1, or -1 when master_port is 65535. */
int hooprun_agent_port(int master_port);

/* 0, or 2 after one stderr line when the plan has several nodes and MASTER_PORT leaves
 * no port above it (checked for --dry-run too). */
int hooprun_agent_check(const hooprun_plan *p);

/* Connects this node's hooprun (node 0's also serves). Returns 0, or 1 (cannot serve or
 * connect) / 2 (MASTER_PORT 65535, a bad HOOP_TIMEOUT) after one stderr line. */
int hooprun_agent_open(hooprun_plan *p);

/* Waits until every node's hooprun is ready to start attempt k (within HOOP_TIMEOUT, a
 * restart's within HOOP_TIMEOUT + --grace + 1 s, the others may still be stopping);
 * before attempt 0 it also refuses nodes told another --max-restarts or
 * --nproc-per-node. Before a restart it looks every HOOPRUN_AGENT_PROBE_MS for a node
 * that left, was lost, or a SIGINT/SIGTERM/SIGHUP/SIGQUIT to this hooprun, and gives up at once
 * (no attempt follows). Returns 0 (also without agents), or 1 / 2 (a difference) / a
 * signal's 128 + N (its own, or mirrored from the node that left) after one stderr line
 * naming the node or the store's reason. */
int hooprun_agent_begin(const hooprun_plan *p, int k);

/* Tells the other nodes that this attempt failed here (why: which rank, how), unless
 * another node said so first: then "the attempt had failed on " and its note go into
 * earlier; when the store has lost a node's hooprun, or is gone itself, "lost the
 * nodes' rendezvous ..." and the store's reason ("" when none of these, or without
 * agents). Best effort; when node 0's hooprun does not answer within
 * HOOPRUN_AGENT_LOOK_MS the note is kept for hooprun_agent_look (or the exit) to leave. */
void hooprun_agent_failed(const hooprun_plan *p, const char *why, char *earlier, size_t cap);

/* After this node's workers of attempt p->restart all exited 0: waits until every node's
 * did (returns 0), or until another node's attempt failed (*failed = 1, returns 1), a
 * node's hooprun left or was lost, or hooprun got SIGINT/SIGTERM/SIGHUP/SIGQUIT (128 + N), each
 * after one stderr line. Node 0 serves the store, so its leaving early would leave the
 * others without it; a wait past HOOP_TIMEOUT leaves anyway (0, with one line), as
 * torchelastic's exit barrier does. Returns 0 at once without agents. */
int hooprun_agent_end(const hooprun_plan *p, int *failed);

/* The exit code another node's hooprun left with, when it was a signal's 128 + N that
 * this node should mirror (seen by hooprun_agent_poll); else 0. With p, a mirrored code
 * is also said in one line (whose hooprun, what it got). */
int hooprun_agent_mirrored(const hooprun_plan *p);

/* SIGINT, SIGTERM, SIGHUP or SIGQUIT when one came since the last look (hooprun blocks them from
 * its first attempt on and reads them here between attempts), else 0. A SIGUSR1/2 read
 * here is kept for the next attempt's workers, which hooprun_supervise sends it to as
 * they start; SIGCHLD is dropped (hooprun reaps by waitpid). */
int hooprun_stop_signal(void);

/* The first SIGINT, SIGTERM, SIGHUP or SIGQUIT this hooprun got (while supervising, or at a
 * meeting), else 0: its exit code 128 + N is then one the other nodes mirror. */
int hooprun_stopped_by(void);

/* 128 + SIGUSR1/2 when the last attempt's workers all stopped on it as asked (a
 * preemption's save: no failure), else 0. */
int hooprun_stopped_as_asked(void);

/* The guard (hooprun_guard.c): a child started once, before the first worker, that
 * sends SIGKILL to what is left in the workers' process groups when hooprun ends
 * without stopping them (killed, crashed). hooprun_guard_start returns 0, or -1 (errno
 * set; hooprun goes on without one). hooprun_guard_watch: a worker's group (its pid);
 * hooprun_guard_check: forgets the groups found empty (each round once a worker ended);
 * hooprun_guard_reaped: a child reaped (the guard: it is replaced, told the groups);
 * hooprun_guard_forget: every group so far was emptied and reaped; hooprun_guard_pid:
 * the guard's pid (-1: none), a child the supervisor neither waits for nor signals;
 * hooprun_guard_end: at hooprun's exit, ends and reaps it. hooprun_guard_main: the guard
 * itself (`hooprun --guard-of PID`, the pipe on fd 3); returns its exit code. */
int hooprun_guard_start(void);
void hooprun_guard_watch(pid_t pgid);
void hooprun_guard_check(void);
void hooprun_guard_reaped(pid_t pid);
void hooprun_guard_forget(void);
pid_t hooprun_guard_pid(void);
void hooprun_guard_end(void);
int hooprun_guard_main(int argc, char **argv);

/* Blocks SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2 and SIGCHLD for hooprun_stop_signal and the
 * workers' supervision (a signalfd), and makes hooprun the subreaper of its workers'
 * children; idempotent. Returns 0, or -1 with errno set. */
int hooprun_signals_init(void);

/* Until hooprun_signals_init: a forwarded signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2)
 * while this node connects to the nodes' rendezvous (no worker runs yet; a stalled node
 * 0 may hold the connect up to HOOP_TIMEOUT) ends hooprun with 128 + N after one line
 * naming it, instead of silently. Returns 0, or -1 with errno set. */
int hooprun_signals_connecting(int node_rank);

/* 1 when another node's attempt p->restart failed (why: its note), -1 when the nodes'
 * store is gone or lost a hooprun (why: the reason), else 0. One request, answered at
 * once. */
int hooprun_agent_poll(const hooprun_plan *p, char *why, size_t cap);

/* hooprun_agent_poll without waiting on node 0's hooprun: sends the probe when none is
 * out and reads its answer when it has come (within HOOPRUN_AGENT_LOOK_MS, else at a
 * later look; 0 meanwhile), so that the supervisor keeps reaping and reading signals
 * while node 0 is stalled. An answer past the store's reply grace (HOOP_TIMEOUT) loses
 * the store (-1). Also leaves a failure note kept while node 0 was silent. */
int hooprun_agent_look(const hooprun_plan *p, char *why, size_t cap);

/* This node's hooprun refuses to start (bad flags or environment, said on stderr; why:
 * that message): tells the other nodes, so that they exit 2 at once naming this node and
 * why, instead of waiting HOOP_TIMEOUT for a node that "never came". Connects as
 * hooprun_agent_open does, quietly and for at most HOOPRUN_AGENT_REFUSE_MS (less when
 * HOOP_TIMEOUT is shorter), then leaves as hooprun_agent_close(p, 2) does; a node 0
 * that never comes, or any failure, is left unsaid (the refusal was said already). */
void hooprun_agent_refuse(hooprun_plan *p, const char *why);
#define HOOPRUN_AGENT_REFUSE_MS 10000

/* Leaves the rendezvous. With rc != 0, node 0's hooprun ends the store telling the others
 * why (its GOODBYE); another node leaves a note ("hooprun.exit": rc and why, and this
 * attempt's failure note) and hangs up without a CLOSE, so that no node waits for it.
 * When node 0's hooprun has not answered a look within HOOPRUN_AGENT_QUIET_MS, the
 * notes (and a CLOSE) are posted without waiting for replies, after one line: node 0's
 * store applies them when it runs again. */
void hooprun_agent_close(hooprun_plan *p, int rc);

// ----- output relay (hooprun_out.c) ----------------------------------------------------

/* Once, first thing: hooprun's stdout and stderr, where a pipe or a terminal, get
 * non-blocking descriptions and queues (hooprun_out.c says why), stderr becomes a stream
 * over its queue, and hooprun_out_finish runs at exit (it writes the queues out). */
void hooprun_out_init(void);
void hooprun_out_finish(void);
/* The poll entries (at most 2) for queues that hold bytes, into pfd; their count. */
struct pollfd;
int hooprun_out_pollfds(struct pollfd *pfd);
/* After poll: writes what the reader of pfd's terminal stream takes now. */
void hooprun_out_writable(const struct pollfd *pfd);
/* 1 while st's terminal stream holds too much unread: st is not read meanwhile. */
int hooprun_out_waits(const hooprun_stream *st);

/* Sets up w's streams before the fork: pipes for stdout when the plan prefixes lines
 * or keeps log files, always for stderr (its last lines name a failure), and w's log
 * file. *out_w and *err_w get the write ends (-1 = the worker inherits hooprun's).
 * Returns 0, or -1 with a message printed. */
int hooprun_out_open(const hooprun_plan *p, hooprun_worker *w, int *out_w, int *err_w);

/* Reads what is in st's pipe (a bounded number of reads, so a chatty worker cannot
 * starve the rest), relays every complete line and '\r'-ended piece, closes the stream
 * at end of file. now stamps the stderr lines kept. Returns 1 when data may be left. */
int hooprun_out_drain(const hooprun_plan *p, hooprun_worker *w, hooprun_stream *st, int64_t now);

/* Relays what is left (a last line without newline) and closes the stream. */
void hooprun_out_close(const hooprun_plan *p, hooprun_worker *w, hooprun_stream *st, int64_t now);

/* Frees w's buffers and closes its log file. */
void hooprun_out_free(hooprun_worker *w);

// ----- failure summary (hooprun_report.c) ----------------------------------------------

/* w's last stderr line (its message on the way out) if it came within 10 s before w
 * ended; NULL when there is none. */
const char *hooprun_last_words(const hooprun_worker *w);

/* Picks the worker whose failure came first among those that failed on their own, or
 * one found stopped when the first of them failed (see hooprun_report.c for the rules);
 * -1 when none did. */
int hooprun_first_failure(const hooprun_worker *w, int n);

/* Prints the failure summary for an attempt that had a failure: the first failure with
 * its last stderr lines, then one row per worker (rank, host, pid, exit code, signal,
 * time). Returns the first failure's exit status (code, or 128 + signal), or
 * fallback_code when no worker failed on its own. */
int hooprun_report(const hooprun_plan *p, const hooprun_worker *w, int n, int fallback_code);

#endif /* HOOP_TOOLS_HOOPRUN_H */
