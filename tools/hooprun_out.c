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
 * are never taken for a failure's message. Single-threaded (hooprun's loop).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/check.h"
#include "hooprun.h"

#define DRAIN_READS 16 /* reads per stream per call */

static int term_closed[3]; /* hooprun's stdout/stderr failed (EPIPE...): drop output there */

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
    if (fd < 0 || term_closed[fd]) return;
    char prefix[32], end = term ? term : '\n';
    int plen = snprintf(prefix, sizeof(prefix), "[rank %d] ", w->rank);
    struct iovec iov[3] = {
        {.iov_base = prefix, .iov_len = p->prefix ? (size_t)plen : 0},
        {.iov_base = (void *)text, .iov_len = len},
        {.iov_base = &end, .iov_len = 1},
    };
    if (len == 0 && term == '\r') return;                             /* nothing to draw */
    if (len == 0 && term == '\n' && st->after_cr) iov[0].iov_len = 0; /* "\r\n": end the line */
    st->after_cr = term == '\r';
    if (write_all(fd, iov, 3) != 0) term_closed[fd] = 1;
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
    if (((p->prefix || p->log_dir) && open_pipe(&w->out, out_w) != 0) ||
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
