/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/hooprun_report.c -- which worker failed first, and the failure summary.
 *
 * The first worker to end badly is often not the one that failed first: when rank 0
 * cannot read a checkpoint it prints why, tells the others, and the others may well
 * exit before rank 0 has finished exiting; when a worker dies, its peers print
 * "connection closed" messages and exit too. So hooprun judges after the fact, from
 * what it saw (the supervisor waits a moment after the first bad exit before it sends
 * SIGTERM, so that workers already on their way out end on their own):
 *
 *   1. Only workers that failed on their own are candidates: a non-zero exit or a
 *      signal, before hooprun's SIGTERM went out. Workers that ended after it were
 *      stopped (or failed because they were being stopped).
 *   2. A candidate's failure time is when hooprun read its last stderr line (not a hoop
 *      log line), if that came within LAST_WORDS_NS before it ended: the message it
 *      printed on its way out (rank 0 may print why it fails and then wait seconds in a
 *      collective until the others learn of it). A candidate without such a line failed
 *      when it ended. A death by a signal hooprun did not send counts SIGNAL_LEAD_NS
 *      earlier than hooprun saw it: its peers may print their reaction before the
 *      kernel reports the death (a process's sockets close before it becomes a zombie).
 *   3. The earliest failure time wins. Events that hooprun saw in the same round of its
 *      loop carry the same time; then a death by signal comes first (its peers' errors
 *      follow from it), then a worker with last words (a silent exit right after
 *      another worker's message is the echo), then the lower rank.
 *   4. A worker that was stopped (SIGSTOP, job control: state T in /proc; not a
 *      tracing stop) when the first worker failed comes before all of that, unless that failure
 *      was a death by a signal: a stopped rank fails nobody by itself, but every peer
 *      that waits for it times out, and the first of them to exit is only the first to
 *      notice. Its exit status is still the noticing worker's (the stopped one ends by
 *      hooprun's SIGTERM). The lowest stopped rank is named.
 *   5. A candidate whose last words name another as the origin (hoop's "see rank N's
 *      message": a rank that heard of rank N's failure, HOOP_ERR_INTERNAL in its
 *      schedule, say, through the communicator) yields to rank N when N failed on its
 *      own on this node: the hearer may print first, since rank N's reason is told to
 *      the others before rank N prints it.
 *
 * This is inference from timing, not proof: a worker that printed a warning (other than
 * through hoop's logger) less than LAST_WORDS_NS before it exited silently, only because
 * a peer failed, is named instead of that peer; a worker still in its way out when the
 * SIGTERM comes is not a candidate; and on one node hooprun sees only its own workers.
 * Single-threaded.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "hooprun.h"

#define LAST_WORDS_NS 10000000000LL /* 10 s */
#define BURST_NS 1000000000LL       /* lines this close before the last one belong to it */
#define SIGNAL_LEAD_NS 10000000LL   /* 10 ms */

static int failed(const hooprun_worker *w)
{
    return w->ended && !(WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0);
}

static int own_failure(const hooprun_worker *w)
{
    return failed(w) && !w->after_stop;
}

static int exit_status(const hooprun_worker *w)
{
    return WIFSIGNALED(w->status) ? 128 + WTERMSIG(w->status) : WEXITSTATUS(w->status);
}

/* The ring index of w's last stderr line if it came within LAST_WORDS_NS before w
 * ended; -1 when there is none. */
static int last_words(const hooprun_worker *w)
{
    if (w->tail_count == 0) return -1;
    int k = (w->tail_next + HOOPRUN_TAIL_LINES - 1) % HOOPRUN_TAIL_LINES;
    const hooprun_line *l = &w->tail[k];
    /* A line read after the worker was reaped was still written before it ended: the
     * pipe is drained after waitpid may already have seen the exit (seen under load). */
    return l->ns >= w->end_ns - LAST_WORDS_NS ? k : -1;
}

const char *hooprun_last_words(const hooprun_worker *w)
{
    int k = last_words(w);
    return k >= 0 ? w->tail[k].text : NULL;
}

static int64_t failure_time(const hooprun_worker *w)
{
    int k = last_words(w);
    int64_t t = k >= 0 && w->tail[k].ns < w->end_ns ? w->tail[k].ns : w->end_ns;
    return WIFSIGNALED(w->status) ? t - SIGNAL_LEAD_NS : t;
}

/* Does a fail before b (rule 3 above)? */
static int earlier(const hooprun_worker *a, const hooprun_worker *b)
{
    int64_t ta = failure_time(a), tb = failure_time(b);
    if (ta != tb) return ta < tb;
    int sa = WIFSIGNALED(a->status), sb = WIFSIGNALED(b->status);
    if (sa != sb) return sa;
    int wa = last_words(a) >= 0, wb = last_words(b) >= 0;
    if (wa != wb) return wa;
    return a->rank < b->rank;
}

/* The earliest of the workers that failed on their own (rules 1 to 3); -1 when none. */
static int first_own_failure(const hooprun_worker *w, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (own_failure(&w[i]) && (best < 0 || earlier(&w[i], &w[best]))) best = i;
    return best;
}

/* Rule 5: the worker that best's last words name as the origin ("see rank N's
 * message"), followed while it too failed on its own; best itself when none. */
static int named_origin(const hooprun_worker *w, int n, int best)
{
    for (int hops = 0; best >= 0 && hops < n; hops++) {
        int k = last_words(&w[best]), rank, next = -1;
        const char *at = k >= 0 ? strstr(w[best].tail[k].text, "see rank ") : NULL;
        if (!at || sscanf(at, "see rank %d's message", &rank) != 1) break;
        for (int i = 0; i < n; i++)
            if (w[i].rank == rank && i != best && own_failure(&w[i])) next = i;
        if (next < 0) break;
        best = next;
    }
    return best;
}

int hooprun_first_failure(const hooprun_worker *w, int n)
{
    int best = first_own_failure(w, n);
    if (best >= 0 && WIFSIGNALED(w[best].status)) return best; /* rule 4's exception */
    for (int i = 0; i < n; i++)
        if (w[i].found_stopped) return i;
    return named_origin(w, n, best);
}

// ----- printing ---------------------------------------------------------------------

static void describe_end(const hooprun_worker *w, char *buf, size_t cap)
{
    if (WIFSIGNALED(w->status))
        snprintf(buf, cap, "was killed by signal %d (%s)", WTERMSIG(w->status),
                 strsignal(WTERMSIG(w->status)));
    else
        snprintf(buf, cap, "exited with code %d", WEXITSTATUS(w->status));
}

static void wall_time(const struct timespec *ts, char *buf, size_t cap, const char *fmt)
{
    struct tm tm;
    char hms[40];
    localtime_r(&ts->tv_sec, &tm);
    strftime(hms, sizeof(hms), fmt, &tm);
    snprintf(buf, cap, "%s.%03ld", hms, ts->tv_nsec / 1000000);
}

/* The first failure's message: its last stderr line and those just before it. */
static void print_message(const hooprun_worker *w)
{
    if (w->tail_count == 0) {
        fprintf(stderr, "hooprun:   (rank %d wrote nothing on stderr)\n", w->rank);
        return;
    }
    int last = (w->tail_next + HOOPRUN_TAIL_LINES - 1) % HOOPRUN_TAIL_LINES;
    if (last_words(w) < 0) {
        fprintf(stderr, "hooprun:   its last stderr line, %.1f s before it ended: %s\n",
                (double)(w->end_ns - w->tail[last].ns) / 1e9, w->tail[last].text);
        return;
    }
    char label[40];
    int width = snprintf(label, sizeof(label), "  rank %d's message: ", w->rank);
    for (int k = 0; k < w->tail_count; k++) {
        int i = (w->tail_next - w->tail_count + k + HOOPRUN_TAIL_LINES) % HOOPRUN_TAIL_LINES;
        if (w->tail[i].ns < w->tail[last].ns - BURST_NS) continue;
        fprintf(stderr, "hooprun: %s%s\n", label, w->tail[i].text);
        snprintf(label, sizeof(label), "%*s", width, "");
    }
}

/* How a worker that ended after hooprun began to stop the workers ended: by hooprun's
 * SIGTERM, by its SIGKILL (the worker outlived --grace), or otherwise after them. */
static const char *stop_note(const hooprun_worker *w)
{
    int sig = WIFSIGNALED(w->status) ? WTERMSIG(w->status) : 0;
    if (sig == SIGKILL && w->after_kill)
        return "killed by hooprun's SIGKILL (still running --grace after SIGTERM)";
    if (sig == SIGTERM) return "ended by hooprun's SIGTERM";
    if (sig == SIGINT) return "ended by the SIGINT hooprun forwarded";
    if (sig == SIGHUP) return "ended by the SIGHUP hooprun forwarded";
    if (sig == SIGQUIT) return "ended by the SIGQUIT hooprun forwarded";
    if (sig == SIGKILL) return "killed by a SIGKILL not hooprun's, after hooprun's SIGTERM";
    return "ended after hooprun's SIGTERM";
}

static void print_row(const hooprun_plan *p, const hooprun_worker *w, int first)
{
    char code[16] = "-", sig[40] = "-", when[64] = "-", stopped[120];
    const char *note;
    if (!w->ended) {
        note = "still running (survived SIGKILL)";
    } else {
        if (WIFSIGNALED(w->status))
            snprintf(sig, sizeof(sig), "%d (SIG%s)", WTERMSIG(w->status),
                     sigabbrev_np(WTERMSIG(w->status)) ? sigabbrev_np(WTERMSIG(w->status)) : "?");
        else
            snprintf(code, sizeof(code), "%d", WEXITSTATUS(w->status));
        wall_time(&w->end_wall, when, sizeof(when), "%H:%M:%S");
        snprintf(stopped, sizeof(stopped), "first failure: it was stopped (SIGSTOP); %s",
                 stop_note(w));
        note = first && w->found_stopped ? stopped
               : first                   ? "first failure"
               : w->after_stop           ? stop_note(w)
               : failed(w)               ? "failed too"
                                         : "finished";
    }
    fprintf(stderr, "hooprun:   %-6d %-16.16s %-8d %-5s %-14s %-13s %s\n", w->rank, p->host,
            (int)w->pid, code, sig, when, note);
}

int hooprun_report(const hooprun_plan *p, const hooprun_worker *w, int n, int fallback_code)
{
    int first = hooprun_first_failure(w, n);
    int noticed = first_own_failure(w, n);
    if (first >= 0 && w[first].found_stopped) {
        fprintf(stderr,
                "hooprun: first failure: rank %d (pid %d) was stopped (SIGSTOP or job control) "
                "when ",
                w[first].rank, (int)w[first].pid);
        if (noticed >= 0) {
            fprintf(stderr, "rank %d failed, which it may have done waiting for it\n",
                    w[noticed].rank);
            print_message(&w[noticed]);
        } else {
            fprintf(stderr, "the job failed; the others may have waited for it\n");
        }
        if (p->log_dir) fprintf(stderr, "hooprun:   its output: %s\n", w[first].log_path);
    } else if (first >= 0) {
        char how[96];
        describe_end(&w[first], how, sizeof(how));
        fprintf(stderr, "hooprun: first failure: rank %d (pid %d) %s\n", w[first].rank,
                (int)w[first].pid, how);
        print_message(&w[first]);
        if (p->log_dir) fprintf(stderr, "hooprun:   its output: %s\n", w[first].log_path);
    }
    struct timespec now;
    char date[64];
    clock_gettime(CLOCK_REALTIME, &now);
    wall_time(&now, date, sizeof(date), "%Y-%m-%d %H:%M:%S");
    fprintf(stderr, "hooprun: summary of node %d (%d worker%s; local time, now %s):\n",
            p->node_rank, n, n == 1 ? "" : "s", date);
    fprintf(stderr, "hooprun:   %-6s %-16s %-8s %-5s %-14s %-13s %s\n", "rank", "host", "pid",
            "exit", "signal", "time", "");
    for (int i = 0; i < n; i++) print_row(p, &w[i], i == first);
    if (first >= 0 && w[first].found_stopped) first = noticed; /* rule 4: its status */
    return first >= 0 ? exit_status(&w[first]) : fallback_code;
}
