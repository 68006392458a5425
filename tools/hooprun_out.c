/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/hooprun_out.c -- hooprun's output relay: what a worker writes reaches the
 * terminal (with a "[rank N] " prefix), its --log-dir file (as written, no prefix), and,
 * for stderr, the failure summary (its last lines).
 *
 * Output is cut into pieces at '\n' and at '\r'. A '\n' piece is a line: it goes out
 * whole, with the prefix, so lines of different workers never mix. A '\r' piece is a
 * progress line being redrawn (hoop-train's bar writes "\repoch 1/3 [===>  ] ..."): it
 * goes out as soon as its '\r' arrives, with the prefix, and ends with the '\r', so the
 * next redraw overwrites it on the terminal. Text with neither yet waits (a line being
 * written in parts is joined, not split), up to HOOPRUN_LINE_MAX bytes or end of file.
 * Lines that hoop's own logger wrote (the "host:pid:tid [rank] hoop LEVEL ..." format)
 * are never taken for a failure's message.
 *
 * hooprun's own stdout and stderr, where they are a pipe or a terminal, are written
 * through a second, non-blocking open file description of each (/proc/self/fd/N; the
 * one the shell shares stays as it is), and hooprun's own messages on stderr go the same
 * way (stderr is a stream over it, fopencookie(3)): what the reader has not taken yet
 * waits in a queue, polled for POLLOUT by the loop, and while a queue holds more than
 * TERM_QUEUE_MAX bytes the loop stops reading the workers' streams shown there, so a
 * reader that stops reading (a pager, a stopped terminal, a stuck log agent) stops the
 * workers' output, as it would stop theirs without hooprun, and never hooprun's watch
 * over them: a failure or a signal is still acted on. At exit the queues are written
 * out, blocking, with signals unblocked (Ctrl-C still ends a hooprun whose reader never
 * reads again). Single-threaded (hooprun's loop).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/check.h"
#include "hooprun.h"

#define DRAIN_READS 16           /* reads per stream per call */
#define TERM_QUEUE_MAX (1 << 20) /* queued bytes above which workers' streams wait */

/* hooprun's stdout (1) and stderr (2) as the relay writes them. */
typedef struct term_out {
    int fd;       /* a non-blocking description of it, or the fd itself (a file) */
    int nonblock; /* fd is that non-blocking description */
    int closed;   /* a write failed (EPIPE...): output there is dropped */
    char *q;      /* bytes the reader has not taken yet: q[head, len) */
    size_t head, len, cap;
} term_out;
static term_out outs[3] = {{.fd = -1}, {.fd = 1}, {.fd = 2}};
/* The queue each stream writes into: stderr shares stdout's where both are one file (a
 * terminal, `2>&1 | ...`), so that what went out in one order arrives in it. */
static int queue_of[3] = {0, 1, 2};
static int relay_stdout; /* hooprun's stdout is a terminal: the workers' goes through it */

/* A write to term failed: what goes there from now on is dropped, which hooprun says
 * (once, on stderr, when it was stdout: `hooprun --prefix ... | head -1`). */
static void term_lost(int term, int err)
{
    outs[term].closed = 1;
    outs[term].head = outs[term].len = 0;
    if (term == 1)
        fprintf(stderr,
                "hooprun: writing to its stdout failed (%s): the workers' further "
                "output there is dropped\n",
                hoop__strerror(err));
}

/* Queues n bytes for term (after trying to write them at once when nothing waits). */
static void term_put(int term, const void *data, size_t n)
{
    term = queue_of[term];
    term_out *o = &outs[term];
    const char *p = data;
    if (o->closed || n == 0) return;
    if (o->len == o->head) {
        ssize_t k;
        do k = write(o->fd, p, n);
        while (k < 0 && errno == EINTR);
        if (k < 0 && !(o->nonblock && errno == EAGAIN)) {
            term_lost(term, errno);
            return;
        }
        if (k > 0) p += k, n -= (size_t)k;
        o->head = o->len = 0;
        if (n == 0) return;
    }
    if (o->len + n > o->cap) {
        if (o->head > 0) { /* taken bytes make room first */
            memmove(o->q, o->q + o->head, o->len - o->head);
            o->len -= o->head;
            o->head = 0;
        }
        size_t cap = o->cap ? o->cap : 65536;
        while (cap < o->len + n) cap *= 2;
        char *q = cap > o->cap ? realloc(o->q, cap) : o->q;
        if (q == NULL) return; /* out of memory: this piece is dropped */
        o->q = q;
        o->cap = cap;
    }
    memcpy(o->q + o->len, p, n);
    o->len += n;
}

/* Writes what term's reader takes now; blocking, at exit. */
static void term_flush(int term, int blocking)
{
    term_out *o = &outs[term];
    if (blocking && o->nonblock && o->len > o->head)
        fcntl(o->fd, F_SETFL, fcntl(o->fd, F_GETFL) & ~O_NONBLOCK);
    while (!o->closed && o->len > o->head) {
        /* One piece per write, through its '\n' or '\r' (at most PIPE_BUF bytes go into a
         * pipe whole): a writer sharing the file cannot land inside a line. */
        size_t n = o->len - o->head;
        const char *nl = memchr(o->q + o->head, '\n', n), *cr = memchr(o->q + o->head, '\r', n);
        const char *end = nl && (!cr || nl < cr) ? nl : cr;
        if (end) n = (size_t)(end - (o->q + o->head)) + 1;
        ssize_t k = write(o->fd, o->q + o->head, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno == EAGAIN && !blocking) return;
        if (k <= 0) {
            term_lost(term, k < 0 ? errno : EIO);
            break;
        }
        o->head += (size_t)k;
    }
    o->head = o->len = 0;
}

static ssize_t err_cookie_write(void *cookie, const char *buf, size_t n)
{
    (void)cookie;
    term_put(2, buf, n);
    return (ssize_t)n;
}

void hooprun_out_finish(void)
{
    fflush(stdout);
    fflush(stderr);
    if (outs[1].len > outs[1].head || outs[2].len > outs[2].head) {
        sigset_t none; /* a reader that never reads again: Ctrl-C still ends hooprun */
        sigemptyset(&none);
        pthread_sigmask(SIG_SETMASK, &none, NULL);
    }
    term_flush(2, 1);
    term_flush(1, 1);
}

void hooprun_out_init(void)
{
    relay_stdout = isatty(1);
    for (int term = 1; term <= 2; term++) {
        struct stat sb;
        if (fstat(term, &sb) != 0 || !(S_ISFIFO(sb.st_mode) || isatty(term))) continue;
        char path[32];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", term);
        int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) continue; /* (a socket cannot be opened so: written blocking) */
        outs[term].fd = fd;
        outs[term].nonblock = 1;
    }
    struct stat a, b;
    if (outs[1].nonblock && outs[2].nonblock && fstat(1, &a) == 0 && fstat(2, &b) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        queue_of[2] = 1;
    if (outs[2].nonblock) {
        FILE *f = fopencookie(NULL, "w", (cookie_io_functions_t){.write = err_cookie_write});
        if (f) {
            setvbuf(f, NULL, _IOLBF, 0);
            stderr = f;
        }
    }
    atexit(hooprun_out_finish);
}

int hooprun_out_pollfds(struct pollfd *pfd)
{
    int n = 0;
    for (int term = 1; term <= 2; term++)
        if (queue_of[term] == term && outs[term].nonblock && outs[term].len > outs[term].head &&
            !outs[term].closed)
            pfd[n++] = (struct pollfd){.fd = outs[term].fd, .events = POLLOUT};
    return n;
}

void hooprun_out_writable(const struct pollfd *pfd)
{
    for (int term = 1; term <= 2; term++)
        if (outs[term].nonblock && pfd->fd == outs[term].fd && pfd->revents) term_flush(term, 0);
}

int hooprun_out_waits(const hooprun_stream *st)
{
    const term_out *o = st->term_fd > 0 ? &outs[queue_of[st->term_fd]] : NULL;
    return o && o->len - o->head > TERM_QUEUE_MAX;
}

static int write_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t k = writev(fd, iov, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
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
    return 0;
}

/* Shows one piece on the terminal. term is '\n', '\r' or 0 (a cut or a last partial
 * line, shown as a line). */
static void show(const hooprun_plan *p, const hooprun_worker *w, hooprun_stream *st,
                 const char *text, size_t len, char term)
{
    int fd = st->term_fd;
    if (fd < 0 || outs[queue_of[fd]].closed) return;
    if (len == 0 && term == '\r') return; /* nothing to draw */
    /* The piece in one write (into a pipe whole up to PIPE_BUF): never cut by another. */
    char prefix[32], small[1024], *piece = small;
    int plen = p->prefix && !(len == 0 && term == '\n' && st->after_cr) /* "\r\n" ends a line */
                   ? snprintf(prefix, sizeof(prefix), "[rank %d] ", w->rank)
                   : 0;
    size_t n = (size_t)plen + len + 1;
    if (n > sizeof(small) && (piece = malloc(n)) == NULL) return; /* out of memory: dropped */
    memcpy(piece, prefix, (size_t)plen);
    memcpy(piece + plen, text, len);
    piece[n - 1] = term ? term : '\n';
    st->after_cr = term == '\r';
    term_put(fd, piece, n);
    if (piece != small) free(piece);
}

/* Writes one piece to the worker's log file as the worker wrote it. */
static void log_piece(hooprun_worker *w, const char *text, size_t len, char term)
{
    struct iovec iov[2] = {
        {.iov_base = (void *)text, .iov_len = len},
        {.iov_base = &term, .iov_len = term ? 1 : 0},
    };
    if (write_all(w->log_fd, iov, 2) == 0) return;
    fprintf(stderr, "hooprun: writing %s failed: %s; rank %d's further output is not logged\n",
            w->log_path, hoop__strerror(errno), w->rank);
    close(w->log_fd);
    w->log_fd = -1;
}

/* Is this a line of hoop's logger: "host:pid:tid [rank] hoop LEVEL ..." (src/core/log.c)? */
static int is_log_line(const char *s, size_t n)
{
    const char *end = s + n, *sp = memchr(s, ' ', n);
    if (sp == NULL) return 0;
    const char *q = sp; /* walk back over ":tid" and ":pid" */
    for (int field = 0; field < 2; field++) {
        const char *digits_end = q;
        while (q > s && q[-1] >= '0' && q[-1] <= '9') q--;
        if (q == digits_end || q == s || q[-1] != ':') return 0;
        q--;
    }
    q = sp + 1;
    if (q < end && *q == '[') {
        q = memchr(q, ']', (size_t)(end - q));
        if (q == NULL || q + 1 >= end || q[1] != ' ') return 0;
        q += 2;
    }
    static const char *const levels[] = {"WARN ", "INFO ", "DEBUG ", "TRACE ", "VERSION "};
    if (end - q < 5 || memcmp(q, "hoop ", 5) != 0) return 0;
    q += 5;
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        size_t l = strlen(levels[i]);
        if ((size_t)(end - q) >= l && memcmp(q, levels[i], l) == 0) return 1;
    }
    return 0;
}

/* Keeps a stderr line in the worker's ring of last lines. */
static void remember(hooprun_worker *w, const char *text, size_t len, int64_t now)
{
    hooprun_line *l = &w->tail[w->tail_next];
    size_t keep = len < sizeof(l->text) - 1 ? len : sizeof(l->text) - 1;
    memcpy(l->text, text, keep);
    l->text[keep] = '\0';
    if (keep < len) memcpy(l->text + keep - 3, "...", 3);
    l->ns = now;
    w->tail_next = (w->tail_next + 1) % HOOPRUN_TAIL_LINES;
    if (w->tail_count < HOOPRUN_TAIL_LINES) w->tail_count++;
}

static void piece(const hooprun_plan *p, hooprun_worker *w, hooprun_stream *st, const char *text,
                  size_t len, char term, int64_t now)
{
    show(p, w, st, text, len, term);
    if (w->log_fd >= 0) log_piece(w, text, len, term);
    if (st->is_err && term != '\r' && len > 0 && !is_log_line(text, len))
        remember(w, text, len, now);
}

/* Relays every piece in st->buf that is complete; with flush, the rest too. */
static void relay(const hooprun_plan *p, hooprun_worker *w, hooprun_stream *st, int64_t now,
                  int flush)
{
    size_t start = 0;
    for (size_t i = 0; i < st->len; i++) {
        if (st->buf[i] != '\n' && st->buf[i] != '\r') continue;
        piece(p, w, st, st->buf + start, i - start, st->buf[i], now);
        start = i + 1;
    }
    if ((flush || st->len - start == HOOPRUN_LINE_MAX) && st->len > start) {
        piece(p, w, st, st->buf + start, st->len - start, 0, now);
        start = st->len;
    }
    memmove(st->buf, st->buf + start, st->len - start);
    st->len -= start;
}

void hooprun_out_close(const hooprun_plan *p, hooprun_worker *w, hooprun_stream *st, int64_t now)
{
    if (st->fd < 0) return;
    relay(p, w, st, now, 1);
    close(st->fd);
    st->fd = -1;
}

int hooprun_out_drain(const hooprun_plan *p, hooprun_worker *w, hooprun_stream *st, int64_t now)
{
    for (int round = 0; round < DRAIN_READS && st->fd >= 0; round++) {
        ssize_t k = read(st->fd, st->buf + st->len, HOOPRUN_LINE_MAX - st->len);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (k <= 0) {
            hooprun_out_close(p, w, st, now);
            return 0;
        }
        st->len += (size_t)k;
        relay(p, w, st, now, 0);
    }
    return st->fd >= 0;
}

static int open_pipe(hooprun_stream *st, int *write_end)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    st->buf = malloc(HOOPRUN_LINE_MAX);
    if (st->buf == NULL) {
        close(fds[0]);
        close(fds[1]);
        errno = ENOMEM;
        return -1;
    }
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    st->fd = fds[0];
    *write_end = fds[1];
    return 0;
}

/* DIR/rank_N.log for the first attempt, DIR/rank_N.restart_K.log after restart K. */
static int open_log(const hooprun_plan *p, hooprun_worker *w)
{
    if (p->restart == 0)
        snprintf(w->log_path, sizeof(w->log_path), "%s/rank_%d.log", p->log_dir, w->rank);
    else
        snprintf(w->log_path, sizeof(w->log_path), "%s/rank_%d.restart_%d.log", p->log_dir, w->rank,
                 p->restart);
    /* (a FIFO without a reader fails, ENXIO, rather than block hooprun) */
    w->log_fd = hoop__open_output(w->log_path, O_TRUNC);
    if (w->log_fd >= 0) return 0;
    fprintf(stderr, "hooprun: cannot open %s: %s\n", w->log_path, hoop__strerror(errno));
    return -1;
}

int hooprun_out_open(const hooprun_plan *p, hooprun_worker *w, int *out_w, int *err_w)
{
    *out_w = *err_w = -1;
    w->out = (hooprun_stream){.fd = -1, .term_fd = 1};
    w->err = (hooprun_stream){.fd = -1, .term_fd = 2, .is_err = 1};
    w->log_fd = -1;
    if (p->log_dir) {
        if (!(p->tee & 1)) w->out.term_fd = -1;
        if (!(p->tee & 2)) w->err.term_fd = -1;
        if (open_log(p, w) != 0) return -1;
    }
    /* A terminal's stdout too: workers writing to it from their own process groups
     * (background ones) would be stopped by SIGTTOU under `stty tostop`. */
    if (((p->prefix || p->log_dir || relay_stdout) && open_pipe(&w->out, out_w) != 0) ||
        open_pipe(&w->err, err_w) != 0) {
        perror("hooprun: pipe");
        if (*out_w >= 0) close(*out_w);
        *out_w = -1;
        return -1;
    }
    return 0;
}

void hooprun_out_free(hooprun_worker *w)
{
    free(w->out.buf);
    free(w->err.buf);
    w->out.buf = w->err.buf = NULL;
    if (w->out.fd >= 0) close(w->out.fd);
    if (w->err.fd >= 0) close(w->err.fd);
    w->out.fd = w->err.fd = -1;
    if (w->log_fd >= 0) close(w->log_fd);
    w->log_fd = -1;
}
