/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench/peers/tcpbw.c -- the link rate bench/compare.sh holds the all-reduces against:
 * TCP streams that send for a fixed time while the receiving side counts the bytes.
 *
 *   tcpbw -s [-p PORT] [-B ADDR] [-i SECS]    receive one test, print one line, exit
 *   tcpbw -c ADDR [-p PORT] [-P STREAMS] [-t SECS] [-l BYTES]
 *
 * Each client stream first sends the number of streams (4 bytes, network order), then
 * data in sends of -l bytes (default 1 MiB) for -t seconds (default 5), then shuts its
 * sending side and waits for the server to close. The server takes that many streams
 * and reads each to its end; it prints
 *
 *   server: streams=N bytes=B secs=S Gbit/s=X GB/s=Y
 *
 * timed from the first connection to the last end of stream (GB/s = 1e9 B/s), and the
 * client a "client:" line of the same shape. Every wait has a deadline: the client
 * retries its connection for 10 s, and either side gives up after -i seconds (default 30)
 * without progress. Exit: 0, 1 on a failure (named), 2 on bad flags. Single-threaded
 * (poll over the streams); IPv4 addresses only.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_STREAMS 64

typedef struct opts {
    int server, port, streams;
    double secs, idle;
    long bytes;
    const char *addr;
} opts;

typedef struct stream {
    int fd;
    unsigned hdr_got;     /* bytes of the 4-byte header received (server) */
    unsigned char hdr[4]; /* the header: the number of streams, network order */
    int ended;
    unsigned long long bytes;
} stream;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int fail(const char *what)
{
    char msg[128];
    snprintf(msg, sizeof(msg), "tcpbw: %s", what);
    perror(msg);
    return 1;
}

static int usage(const char *why)
{
    fprintf(stderr,
            "tcpbw: %s\nusage: tcpbw -s [-p PORT] [-B ADDR] [-i SECS]\n"
            "       tcpbw -c ADDR [-p PORT] [-P STREAMS] [-t SECS] [-l BYTES]\n",
            why);
    return 2;
}

/* A whole number or a decimal in [lo, hi]; 0 on success. */
static int number(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return errno || end == s || *end || *out < lo || *out > hi;
}

static int parse(int argc, char **argv, opts *o)
{
    double v;
    int c;
    opterr = 0;
    *o = (opts){.port = 5299, .streams = 1, .secs = 5, .idle = 30, .bytes = 1 << 20};
    while ((c = getopt(argc, argv, "sc:p:P:t:l:B:i:")) != -1) {
        switch (c) {
        case 's': o->server = 1; break;
        case 'c':
        case 'B': o->addr = optarg; break;
        case 'p':
            if (number(optarg, 1, 65535, &v)) return usage("-p: a port in 1..65535");
            o->port = (int)v;
            break;
        case 'P':
            if (number(optarg, 1, MAX_STREAMS, &v)) return usage("-P: 1..64 streams");
            o->streams = (int)v;
            break;
        case 't':
            if (number(optarg, 0.1, 3600, &o->secs)) return usage("-t: seconds in 0.1..3600");
            break;
        case 'i':
            if (number(optarg, 1, 3600, &o->idle)) return usage("-i: seconds in 1..3600");
            break;
        case 'l':
            if (number(optarg, 1, 1 << 30, &v)) return usage("-l: bytes in 1..1G");
            o->bytes = (long)v;
            break;
        default: return usage("unknown option");
        }
    }
    if (optind < argc) return usage("unexpected argument");
    if (!o->server && o->addr == NULL) return usage("-s or -c ADDR is needed");
    return 0;
}

static int to_addr(const opts *o, struct sockaddr_in *a)
{
    *a = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    if (o->addr == NULL) {
        a->sin_addr.s_addr = htonl(INADDR_ANY);
        return 0;
    }
    if (inet_pton(AF_INET, o->addr, &a->sin_addr) == 1) return 0;
    fprintf(stderr, "tcpbw: '%s' is not an IPv4 address\n", o->addr);
    return 1;
}

static void report(const char *who, int n, unsigned long long bytes, double secs)
{
    printf("%s: streams=%d bytes=%llu secs=%.3f Gbit/s=%.3f GB/s=%.3f\n", who, n, bytes, secs,
           (double)bytes * 8 / secs / 1e9, (double)bytes / secs / 1e9);
    fflush(stdout);
}

// ----- the server ------------------------------------------------------------------

/* Reads what fd has: the header first (its value sets *want), then data. */
static int drain(stream *s, char *buf, long len, int *want)
{
    for (;;) {
        ssize_t n = recv(s->fd, buf, (size_t)len, MSG_DONTWAIT);
        if (n == 0) return s->ended = 1, close(s->fd), 0;
        if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : fail("recv");
        size_t skip = 0;
        while (s->hdr_got < 4 && skip < (size_t)n) {
            s->hdr[s->hdr_got++] = (unsigned char)buf[skip++];
            if (s->hdr_got == 4 && *want < 0) {
                uint32_t v;
                memcpy(&v, s->hdr, sizeof(v));
                *want = (int)ntohl(v);
            }
        }
        s->bytes += (unsigned long long)n - skip;
    }
}

static int serve(const opts *o)
{
    struct sockaddr_in a;
    stream st[MAX_STREAMS];
    struct pollfd pf[MAX_STREAMS + 1];
    int n = 0, ended = 0, want = -1, one = 1;
    double t0 = 0, t_end = 0, last = now();
    char *buf = malloc((size_t)o->bytes);
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    if (buf == NULL || ls < 0) return fail("socket");
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (to_addr(o, &a)) return 1;
    if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, MAX_STREAMS)) return fail("bind");
    while (want < 0 || ended < want) {
        int np = 0;
        pf[np++] = (struct pollfd){.fd = ls, .events = POLLIN};
        for (int i = 0; i < n; i++)
            pf[np++] = (struct pollfd){st[i].ended ? -1 : st[i].fd, POLLIN, 0};
        if (poll(pf, (nfds_t)np, 1000) < 0 && errno != EINTR) return fail("poll");
        if (now() - last > o->idle) {
            fprintf(stderr, "tcpbw: nothing arrived for %.0f s (%d of %d streams)\n", o->idle, n,
                    want);
            return 1;
        }
        if ((pf[0].revents & POLLIN) && n < MAX_STREAMS) {
            int fd = accept(ls, NULL, NULL);
            if (fd < 0) return fail("accept");
            if (n == 0) t0 = now();
            st[n++] = (stream){.fd = fd};
            last = now();
        }
        for (int i = 0; i < n; i++) {
            if (st[i].ended || !(pf[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            if (drain(&st[i], buf, o->bytes, &want)) return 1;
            last = now();
            if (st[i].ended) ended++, t_end = now();
        }
    }
    unsigned long long total = 0;
    for (int i = 0; i < n; i++) total += st[i].bytes;
    report("server", n, total, t_end - t0);
    close(ls);
    free(buf);
    return 0;
}

// ----- the client ------------------------------------------------------------------

static int dial(const struct sockaddr_in *a)
{
    double give_up = now() + 10;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return -1;
        if (connect(fd, (const struct sockaddr *)a, sizeof(*a)) == 0) return fd;
        close(fd);
        if (now() > give_up || (errno != ECONNREFUSED && errno != EINTR)) return -1;
        usleep(50 * 1000);
    }
}

/* Waits (until give_up) for the server to close fd after our end of stream. */
static void await_close(int fd, char *buf, double give_up)
{
    struct pollfd p = {fd, POLLIN, 0};
    shutdown(fd, SHUT_WR);
    while (now() < give_up) {
        if (poll(&p, 1, 100) < 0 && errno != EINTR) break;
        if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t k = recv(fd, buf, 1, MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) break;
    }
    close(fd);
}

/* Sends until the time is up, then waits for the server to close each stream. */
static int pump(const opts *o, stream *st, char *buf)
{
    struct pollfd pf[MAX_STREAMS];
    double stop = now() + o->secs, give_up;
    while (now() < stop) {
        for (int i = 0; i < o->streams; i++) pf[i] = (struct pollfd){st[i].fd, POLLOUT, 0};
        if (poll(pf, (nfds_t)o->streams, (int)(o->idle * 1000)) <= 0) return fail("poll (send)");
        for (int i = 0; i < o->streams; i++) {
            if (!(pf[i].revents & POLLOUT)) continue;
            ssize_t k = send(st[i].fd, buf, (size_t)o->bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k < 0 && errno != EAGAIN && errno != EINTR) return fail("send");
            if (k > 0) st[i].bytes += (unsigned long long)k;
        }
    }
    give_up = now() + o->idle;
    for (int i = 0; i < o->streams; i++) await_close(st[i].fd, buf, give_up);
    return 0;
}

static int client(const opts *o)
{
    struct sockaddr_in a;
    stream st[MAX_STREAMS];
    char *buf = malloc((size_t)o->bytes);
    uint32_t hdr = htonl((uint32_t)o->streams);
    if (buf == NULL) return fail("malloc");
    memset(buf, 0x5a, (size_t)o->bytes);
    if (to_addr(o, &a)) return 1;
    for (int i = 0; i < o->streams; i++) {
        st[i] = (stream){.fd = dial(&a)};
        if (st[i].fd < 0) return fail("connect");
        if (send(st[i].fd, &hdr, sizeof(hdr), MSG_NOSIGNAL) != (ssize_t)sizeof(hdr))
            return fail("send (header)");
    }
    double t0 = now();
    if (pump(o, st, buf)) return 1;
    unsigned long long total = 0;
    for (int i = 0; i < o->streams; i++) total += st[i].bytes;
    report("client", o->streams, total, now() - t0);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    return o.server ? serve(&o) : client(&o);
}
