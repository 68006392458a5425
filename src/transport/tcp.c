/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/transport/tcp.c -- the TCP transport: non-blocking sockets, several streams per link.
 *
 * A link (send comm -> recv comm) is nsocks TCP connections. A message of `bytes` >=
 * TCP_MIN_PIECE is cut into up to nsocks pieces of at least TCP_MIN_PIECE bytes; piece j
 * goes to stream (first + j) % nsocks where `first` advances by the number of pieces of
 * each large message; smaller messages all ride stream 0. Both ends see the same
 * sequence of sizes, so they stripe identically. Every message also has a frame word
 * (frame.h: its length) on stream 0, queued when it is posted, ahead of any of its
 * pieces there: stream 0 carries the words of all messages in message order, so the
 * receiver reads the k-th word exactly when every earlier message agreed in size, and
 * fails the link (HOOP_ERR_INTERNAL, naming both lengths) at the first message whose
 * sender and receiver disagree. Each stream keeps a FIFO of pieces and moves them with
 * partial send()/recv() calls; a request completes when all its pieces (the word
 * included) have moved.
 *
 * Connections are authenticated: the connector sends a hello (magic, version, rank,
 * channel, stream index, nonce, token) and waits for a one-byte verdict. The acceptor
 * compares the token in constant time and refuses strangers (logged, never returned).
 *
 * Errors on an established link (EOF, EPIPE, ECONNRESET, any other errno) fail the comm
 * with HOOP_ERR_REMOTE naming the peer; every pending request then fails with it.
 *
 * Owns: sockets and requests of its comms. Thread-safety: one thread per comm.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/fdlimit.h"
#include "transport/frame.h"
#include "transport/hello.h"
#include "transport/reqpool.h"
#include "transport/sock.h"
#include "transport/transport.h"

#define TCP_MAGIC 0x686f6f70u /* "hoop" */
#define TCP_VERSION 2         /* 2: each message opens with a frame word (frame.h) */
#define TCP_MAX_SOCKS 16
#define TCP_MIN_PIECE (64u << 10) /* bytes: smaller messages stay on one stream */
#define TCP_SOCKBUF (4 << 20)     /* bytes asked for SO_SNDBUF / SO_RCVBUF */
#define TCP_IOV 16                /* queued pieces moved per sendmsg / recvmsg */
#define TCP_SPARE 8               /* released requests a comm keeps for reuse */

struct tcp_ctx {
    struct tcp_comm *connecting; /* half-open send comms, closed by finalize */
    int rank, nsocks;
    char token[HOOP_TP_TOKEN_MAX];
    hoop_sockaddr addr; /* listen address (port 0), IPv4 or IPv6 */
};

/* What a rank publishes; `pending` is the connector's progress, NULL when published. */
struct tcp_handle {
    uint32_t magic;
    int32_t rank;
    struct hoop_sock_wire addr; /* where it listens */
    struct tcp_comm *pending;
};
_Static_assert(sizeof(struct tcp_handle) <= HOOP_TP_HANDLE_MAX, "tcp handle too large");

struct tcp_hello {
    uint32_t magic;
    uint16_t version, nsocks;
    int32_t rank, channel, idx;
    uint32_t nonce;
    char token[HOOP_TP_TOKEN_MAX];
};
_Static_assert(sizeof(struct tcp_hello) == HOOP__TCP_HELLO_BYTES, "hello.h's size of the hello");

struct tcp_req;
struct tcp_piece {
    struct tcp_req *req;
    char *ptr;
    size_t left;
    struct tcp_piece *next;
};

struct tcp_req {
    hoop__req_link link; /* first: the comm's request pool (reqpool.h) */
    struct tcp_comm *comm;
    int parts_left;
    size_t bytes;
    uint64_t frame;          /* the frame word sent, or the one read (frame.h) */
    int frame_bad;           /* receiver: the word said another length (1: not told yet) */
    struct tcp_piece fpiece; /* the frame word's piece, on stream 0 */
    struct tcp_piece piece[TCP_MAX_SOCKS];
};

enum tcp_conn_state { TCS_START, TCS_CONNECTING, TCS_HELLO, TCS_ACK, TCS_DONE };
enum tcp_kind { TK_LISTEN, TK_SEND, TK_RECV };

struct tcp_stream {
    int fd;
    struct tcp_piece *head, *tail;
    enum tcp_conn_state state; /* connector only */
    size_t off;                /* hello bytes sent (connector) or read (acceptor) */
};

/* An accepted socket whose hello is still being read. */
struct tcp_pend {
    int fd;
    size_t off;
    struct tcp_hello hello;
};

struct tcp_comm {
    struct hoop_tp_comm base;
    struct tcp_ctx *ctx;
    enum tcp_kind kind;
    int nsocks;
    unsigned next_stream;
    struct tcp_stream s[TCP_MAX_SOCKS];
    hoop__req_pool reqs; /* live requests, and released ones kept for reuse */
    struct tcp_comm *next_connecting;
    hoop_status failed;
    char why[320];
    /* connector */
    hoop_sockaddr raddr;
    struct tcp_hello hello;
    /* listener: sockets reading their hello, and groups of streams being assembled */
    struct tcp_pend *pend;
    int npend;
    struct tcp_comm **groups;
    int ngroups;
    uint32_t group_nonce[64];
};

static const struct hoop_transport *self_tp(void);

// ----------------------------------------------------------------- context

static hoop_status tcp_init(const struct hoop_tp_config *cfg, void **tctx)
{
    struct tcp_ctx *ctx;
    if (cfg->nsocks < 1 || cfg->nsocks > TCP_MAX_SOCKS)
        return HOOP_ERROR(HOOP_ERR_INVALID, "HOOP_TCP_NSOCKS=%d is out of range [1, %d]",
                          cfg->nsocks, TCP_MAX_SOCKS);
    if (cfg->token && strlen(cfg->token) >= HOOP_TP_TOKEN_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "HOOP_TOKEN is longer than %d characters",
                          HOOP_TP_TOKEN_MAX - 1);
    hoop_sockaddr a;
    HOOP_CHECK(hoop__sock_listen_addr(cfg->ifname, cfg->master_addr, &a));
    HOOP_CHECK(hoop__calloc(&ctx, 1));
    ctx->rank = cfg->rank;
    ctx->nsocks = cfg->nsocks;
    if (cfg->token) strcpy(ctx->token, cfg->token);
    ctx->addr = a;
    *tctx = ctx;
    return HOOP_OK;
}

static hoop_status tcp_close(struct hoop_tp_comm *tc);

static hoop_status tcp_finalize(void *tctx)
{
    struct tcp_ctx *ctx = tctx;
    while (ctx && ctx->connecting) {
        struct tcp_comm *c = ctx->connecting;
        ctx->connecting = c->next_connecting;
        tcp_close(&c->base);
    }
    free(tctx);
    return HOOP_OK;
}

/* Removes c from the context's list of half-open comms. */
static void unlink_connecting(struct tcp_ctx *ctx, struct tcp_comm *c)
{
    for (struct tcp_comm **p = &ctx->connecting; *p; p = &(*p)->next_connecting)
        if (*p == c) {
            *p = c->next_connecting;
            return;
        }
}

/* 1 when the kernel lets a socket have TCP_SOCKBUF bytes set by hand (the sysctl at
 * path, net.core.wmem_max or rmem_max, is at least that), else 0; read once. */
static int sockbuf_allowed(const char *path, _Atomic int *memo)
{
    int v = atomic_load(memo);
    if (v >= 0) return v;
    long max = -1;
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%ld", &max) != 1) max = -1;
        fclose(f);
    }
    v = max >= TCP_SOCKBUF;
    atomic_store(memo, v);
    return v;
}

static void set_sockopts(int fd)
{
    static _Atomic int snd_ok = -1, rcv_ok = -1;
    int one = 1, buf = TCP_SOCKBUF;
    /* Best effort: a refused option only costs speed. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* A size set by hand is capped at net.core.[wr]mem_max (212992 bytes by default, so
     * about 416 KiB once the kernel doubles it) and turns the kernel's autotuning off for
     * the socket, which would otherwise grow it to tcp_[wr]mem's maximum (4 and 6 MiB by
     * default) on a link whose bandwidth x delay needs it (socket(7), tcp(7)): ask only
     * where the cap lets us have what we ask. */
    if (sockbuf_allowed("/proc/sys/net/core/wmem_max", &snd_ok))
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    if (sockbuf_allowed("/proc/sys/net/core/rmem_max", &rcv_ok))
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

static hoop_status comm_new(struct tcp_ctx *ctx, enum tcp_kind kind, int nsocks, int peer,
                            struct tcp_comm **out)
{
    struct tcp_comm *c;
    HOOP_CHECK(hoop__calloc(&c, 1));
    c->base.tp = self_tp();
    c->base.peer = peer;
    c->ctx = ctx;
    c->kind = kind;
    c->nsocks = nsocks;
    /* A few requests per collective: the spares keep malloc off the fast path. */
    hoop__req_pool_init(&c->reqs, sizeof(struct tcp_req), TCP_SPARE);
    for (int i = 0; i < TCP_MAX_SOCKS; i++) c->s[i].fd = -1;
    *out = c;
    return HOOP_OK;
}

// ----------------------------------------------------------------- listen / accept

static hoop_status tcp_listen(void *tctx, void *handle, struct hoop_tp_comm **out)
{
    struct tcp_ctx *ctx = tctx;
    struct tcp_comm *c;
    hoop_sockaddr a = ctx->addr;
    socklen_t len = sizeof(a);
    int fd = socket(a.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int err = errno;
        char hint[160];
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "rank %d: tcp cannot open its listening socket: %s%s",
                          ctx->rank, hoop__strerror(err), hoop__fd_hint(err, hint, sizeof(hint)));
    }
    if (bind(fd, &a.sa, hoop__sock_len(&a)) != 0 || listen(fd, 256) != 0 ||
        getsockname(fd, &a.sa, &len) != 0) {
        int err = errno;
        char ip[HOOP_SOCK_ADDR_STRLEN];
        close(fd);
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "listen on %s: %s", hoop__sock_addr_str(&ctx->addr, ip),
                          hoop__strerror(err));
    }
    hoop_status st = comm_new(ctx, TK_LISTEN, 1, -1, &c);
    if (st != HOOP_OK) {
        close(fd);
        return st;
    }
    c->s[0].fd = fd;
    struct tcp_handle h = {.magic = TCP_MAGIC, .rank = ctx->rank};
    hoop__sock_to_wire(&a, &h.addr);
    memset(handle, 0, HOOP_TP_HANDLE_MAX);
    memcpy(handle, &h, sizeof(h));
    char ip[HOOP_SOCK_ADDR_STRLEN];
    HOOP_DEBUGF(NET, "TCP: rank %d listening on %s", ctx->rank, hoop__sock_addr_str(&a, ip));
    *out = &c->base;
    return HOOP_OK;
}

/* Reads more of p's hello; returns 1 when complete, 0 when not yet, -1 when dead. */
static int pend_read(struct tcp_pend *p)
{
    ssize_t n = recv(p->fd, (char *)&p->hello + p->off, sizeof(p->hello) - p->off, MSG_DONTWAIT);
    if (n == 0) return -1;
    if (n < 0) return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1;
    p->off += (size_t)n;
    return p->off == sizeof(p->hello);
}

/* The group (half-assembled link) a hello belongs to: same rank, channel and nonce; -1
 * when it opens a new one. */
static int group_find(const struct tcp_comm *l, const struct tcp_hello *h)
{
    for (int gi = 0; gi < l->ngroups; gi++) {
        const struct tcp_comm *x = l->groups[gi];
        if (x->base.peer == h->rank && x->base.channel == h->channel &&
            l->group_nonce[gi] == h->nonce)
            return gi;
    }
    return -1;
}

/* Whether a verified hello fits its group: a stream index not taken yet, and the number of
 * streams its group announced. A stream that arrives twice, or a link whose streams
 * disagree, would otherwise overwrite a descriptor (a leak) or land in a slot that is
 * never read. Only a peer that holds the token can send either. */
static int group_fits(const struct tcp_comm *l, const struct tcp_hello *h, char *why, size_t cap)
{
    int gi = group_find(l, h);
    if (gi < 0) {
        if (l->ngroups < (int)(sizeof(l->group_nonce) / sizeof(l->group_nonce[0]))) return 1;
        snprintf(why, cap, "claiming rank %d: too many half-open links", h->rank);
        return 0;
    }
    const struct tcp_comm *g = l->groups[gi];
    if (g->nsocks != h->nsocks)
        snprintf(why, cap, "claiming rank %d channel %d: %d streams where its link has %d", h->rank,
                 h->channel, h->nsocks, g->nsocks);
    else if (g->s[h->idx].fd >= 0)
        snprintf(why, cap, "claiming rank %d channel %d: stream %d arrived twice", h->rank,
                 h->channel, h->idx);
    else
        return 1;
    return 0;
}

/* Files a verified stream that fits its group (group_fits); returns the group when it is
 * complete. On an error fd is the caller's to close. */
static hoop_status group_add(struct tcp_comm *l, const struct tcp_hello *h, int fd,
                             struct tcp_comm **done)
{
    struct tcp_comm *g = NULL;
    int gi = group_find(l, h);
    if (gi >= 0) {
        g = l->groups[gi];
    } else {
        HOOP_CHECK(hoop__realloc(&l->groups, (size_t)l->ngroups + 1));
        HOOP_CHECK(comm_new(l->ctx, TK_RECV, h->nsocks, h->rank, &g));
        g->base.channel = h->channel;
        gi = l->ngroups++;
        l->groups[gi] = g;
        l->group_nonce[gi] = h->nonce;
    }
    g->s[h->idx].fd = fd;
    for (int i = 0; i < g->nsocks; i++)
        if (g->s[i].fd < 0) return HOOP_OK;
    l->groups[gi] = l->groups[--l->ngroups];
    l->group_nonce[gi] = l->group_nonce[l->ngroups];
    *done = g;
    return HOOP_OK;
}

int hoop__tcp_hello_check(const void *bytes, size_t n, const char *token, char *why, size_t cap)
{
    struct tcp_hello h;
    if (n != sizeof(h)) {
        if (cap) snprintf(why, cap, "that is not a hoop peer (bad hello)");
        return 0;
    }
    memcpy(&h, bytes, sizeof(h));
    if (h.magic == TCP_MAGIC && h.version != TCP_VERSION) {
        if (cap)
            snprintf(why, cap, "claiming rank %d: tcp protocol version %u, this build speaks %u",
                     h.rank, (unsigned)h.version, (unsigned)TCP_VERSION);
        return 0;
    }
    int ok = h.magic == TCP_MAGIC && h.nsocks >= 1 && h.nsocks <= TCP_MAX_SOCKS && h.idx >= 0 &&
             h.idx < h.nsocks;
    if (!ok) {
        if (cap) snprintf(why, cap, "that is not a hoop peer (bad hello)");
        return 0;
    }
    if (!hoop__sock_token_equal(h.token, token)) {
        if (cap) snprintf(why, cap, "claiming rank %d: wrong HOOP_TOKEN", h.rank);
        return 0;
    }
    return 1;
}

/* Judges a complete hello: refuses strangers, files friends. */
static hoop_status pend_judge(struct tcp_comm *l, struct tcp_pend *p, struct tcp_comm **done)
{
    const struct tcp_hello *h = &p->hello;
    char why[96];
    int ok = hoop__tcp_hello_check(h, sizeof(*h), l->ctx->token, why, sizeof(why)) &&
             group_fits(l, h, why, sizeof(why));
    if (!ok) HOOP_WARN("TCP: refused a connection %s", why);
    char verdict = ok ? 1 : 0;
    if (send(p->fd, &verdict, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) ok = 0;
    if (!ok) {
        close(p->fd);
        return HOOP_OK;
    }
    set_sockopts(p->fd);
    hoop_status st = group_add(l, h, p->fd, done);
    if (st != HOOP_OK) close(p->fd);
    return st;
}

static hoop_status tcp_accept(struct hoop_tp_comm *lc, struct hoop_tp_comm **out)
{
    struct tcp_comm *l = HOOP_CONTAINER_OF(lc, struct tcp_comm, base);
    struct tcp_comm *done = NULL;
    *out = NULL;
    for (;;) {
        int fd;
        HOOP_CHECK(hoop__sock_accept(l->s[0].fd, l->ctx->rank, "tcp", &fd));
        if (fd < 0) break;
        HOOP_CHECK(hoop__realloc(&l->pend, (size_t)l->npend + 1));
        l->pend[l->npend++] = (struct tcp_pend){.fd = fd};
    }
    for (int i = 0; i < l->npend && !done;) {
        int r = pend_read(&l->pend[i]);
        if (r == 0) {
            i++;
            continue;
        }
        struct tcp_pend p = l->pend[i];
        l->pend[i] = l->pend[--l->npend];
        if (r < 0)
            close(p.fd);
        else
            HOOP_CHECK(pend_judge(l, &p, &done));
    }
    if (done) {
        HOOP_DEBUGF(NET, "TCP: rank %d accepted rank %d channel %d, %d streams", l->ctx->rank,
                    done->base.peer, done->base.channel, done->nsocks);
        *out = &done->base;
    }
    return HOOP_OK;
}

// ----------------------------------------------------------------- connect

/* Advances one stream of a connecting comm; sets *done when its verdict arrived. */
static hoop_status conn_step(struct tcp_comm *c, int i, int *done)
{
    struct tcp_stream *s = &c->s[i];
    int peer = c->base.peer, err = 0;
    socklen_t len = sizeof(err);
    ssize_t n;
    char verdict, ip[HOOP_SOCK_ADDR_STRLEN], hint[160];
    struct pollfd pfd = {.fd = s->fd, .events = POLLOUT};
    switch (s->state) {
    case TCS_START:
        s->fd = socket(c->raddr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s->fd < 0) {
            err = errno;
            return HOOP_ERROR(
                HOOP_ERR_SYSTEM, "rank %d: tcp cannot open a socket for stream %d to rank %d: %s%s",
                c->ctx->rank, i, peer, hoop__strerror(err), hoop__fd_hint(err, hint, sizeof(hint)));
        }
        set_sockopts(s->fd);
        if (connect(s->fd, &c->raddr.sa, hoop__sock_len(&c->raddr)) != 0 && errno != EINPROGRESS)
            goto fail;
        s->state = TCS_CONNECTING;
        return HOOP_OK;
    case TCS_CONNECTING:
        if (poll(&pfd, 1, 0) <= 0) return HOOP_OK;
        if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) goto fail;
        if (err != 0) {
            errno = err;
            goto fail;
        }
        s->state = TCS_HELLO;
        /* fall through */
    case TCS_HELLO:
        c->hello.idx = i;
        n = send(s->fd, (char *)&c->hello + s->off, sizeof(c->hello) - s->off,
                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return HOOP_OK;
        if (n < 0) goto fail;
        s->off += (size_t)n;
        if (s->off < sizeof(c->hello)) return HOOP_OK;
        s->state = TCS_ACK;
        /* fall through */
    case TCS_ACK:
        n = recv(s->fd, &verdict, 1, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return HOOP_OK;
        /* An end of file or a reset before the verdict: the peer went away mid-handshake
         * (a refusal is a verdict of 0). */
        if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE)))
            return HOOP_ERROR(HOOP_ERR_REMOTE,
                              "rank %d (%s) exited (or closed its end) during the connection "
                              "handshake",
                              peer, hoop__sock_addr_str(&c->raddr, ip));
        if (n < 0) goto fail;
        if (verdict != 1)
            return HOOP_ERROR(
                HOOP_ERR_REMOTE,
                "rank %d (%s) refused the connection (wrong HOOP_TOKEN, or a hoop build of "
                "another tcp protocol version?)",
                peer, hoop__sock_addr_str(&c->raddr, ip));
        s->state = TCS_DONE;
        /* fall through */
    case TCS_DONE: *done = 1; return HOOP_OK;
    }
fail:
    err = errno; /* before naming the address, which may look up an interface's name */
    /* A peer that published loopback, seen from a rank that did not: on another host,
     * that address is this host (HOOP_SOCKET_IFNAME=lo on one node, or MASTER_ADDR a
     * loopback address there). */
    hint[0] = '\0';
    if (hoop__sock_is_loopback(&c->raddr) && !hoop__sock_is_loopback(&c->ctx->addr))
        snprintf(hint, sizeof(hint),
                 " (rank %d published a loopback address, which on another host means this "
                 "one: check its HOOP_SOCKET_IFNAME and MASTER_ADDR)",
                 peer);
    return HOOP_ERROR(HOOP_ERR_REMOTE, "cannot connect to rank %d at %s: %s%s", peer,
                      hoop__sock_addr_str(&c->raddr, ip), hoop__strerror(err), hint);
}

static hoop_status tcp_connect(void *tctx, void *handle, int channel, struct hoop_tp_comm **out)
{
    struct tcp_ctx *ctx = tctx;
    struct tcp_handle *h = handle;
    struct tcp_comm *c = h->pending;
    *out = NULL;
    if (h->magic != TCP_MAGIC)
        return HOOP_ERROR(HOOP_ERR_INVALID, "connect: not a TCP endpoint handle");
    if (!c) {
        hoop_sockaddr peer;
        char who[32];
        snprintf(who, sizeof(who), "tcp: rank %d", h->rank);
        HOOP_CHECK(hoop__sock_from_wire(&h->addr, who, &peer));
        HOOP_CHECK(comm_new(ctx, TK_SEND, ctx->nsocks, h->rank, &c));
        c->base.channel = channel;
        c->raddr = hoop__sock_dial_addr(&peer, &ctx->addr);
        c->hello = (struct tcp_hello){.magic = TCP_MAGIC,
                                      .version = TCP_VERSION,
                                      .nsocks = (uint16_t)ctx->nsocks,
                                      .rank = ctx->rank,
                                      .channel = channel,
                                      .nonce = (uint32_t)hoop__now_ns() ^ (uint32_t)(uintptr_t)c};
        memcpy(c->hello.token, ctx->token, HOOP_TP_TOKEN_MAX);
        h->pending = c;
        c->next_connecting = ctx->connecting;
        ctx->connecting = c;
    }
    int ndone = 0;
    for (int i = 0; i < c->nsocks; i++) {
        int done = 0;
        hoop_status st = conn_step(c, i, &done);
        if (st != HOOP_OK) {
            h->pending = NULL;
            unlink_connecting(ctx, c);
            c->base.tp->close(&c->base);
            return st;
        }
        ndone += done;
    }
    if (ndone == c->nsocks) {
        h->pending = NULL;
        unlink_connecting(ctx, c);
        HOOP_DEBUGF(NET, "TCP: rank %d connected to rank %d channel %d, %d streams", ctx->rank,
                    h->rank, channel, c->nsocks);
        *out = &c->base;
    }
    return HOOP_OK;
}

// ----------------------------------------------------------------- data path

static hoop_status comm_fail(struct tcp_comm *c, const char *what, int err)
{
    if (c->failed == HOOP_OK) {
        c->failed = HOOP_ERR_REMOTE;
        if (err == 0)
            snprintf(c->why, sizeof(c->why), "rank %d closed the connection (%s)", c->base.peer,
                     what);
        else
            snprintf(c->why, sizeof(c->why), "link to rank %d failed (%s: %s)", c->base.peer, what,
                     hoop__strerror(err));
    }
    return HOOP_ERROR(c->failed, "%s", c->why);
}

/* Retires n moved bytes from the head of a stream's queue. A receive's frame word is
 * checked as it completes: a wrong one is noted in its request, whose test says so once
 * (HOOP_ERR_INTERNAL, the request stays live), and the stream goes on as the receiver
 * posted it, so that the caller decides (a collective mismatch looks the same until the
 * call's vote is done). */
static hoop_status consume(struct tcp_comm *c, struct tcp_stream *s, size_t n)
{
    while (s->head && s->head->left <= n) {
        struct tcp_piece *p = s->head;
        n -= p->left;
        p->ptr += p->left;
        p->left = 0;
        s->head = p->next;
        if (!s->head) s->tail = NULL;
        p->req->parts_left--;
        if (p == &p->req->fpiece && c->kind == TK_RECV &&
            p->req->frame != hoop__frame(p->req->bytes))
            p->req->frame_bad = 1;
    }
    if (s->head && n) {
        s->head->ptr += n;
        s->head->left -= n;
    }
    return HOOP_OK;
}

/* Moves bytes on one stream until it would block. Several queued pieces move in one
 * sendmsg/recvmsg, so a header and the small message behind it share a TCP segment. */
static hoop_status stream_progress(struct tcp_comm *c, struct tcp_stream *s)
{
    int send_side = c->kind == TK_SEND;
    while (s->head) {
        struct iovec iov[TCP_IOV];
        size_t want = 0;
        int k = 0;
        for (struct tcp_piece *p = s->head; p && k < TCP_IOV; p = p->next) {
            if (p->left == 0) continue;
            iov[k++] = (struct iovec){.iov_base = p->ptr, .iov_len = p->left};
            want += p->left;
        }
        ssize_t n = 0;
        if (k > 0) {
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)k};
            n = send_side ? sendmsg(s->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT)
                          : recvmsg(s->fd, &m, MSG_DONTWAIT);
            if (n == 0 && !send_side) return comm_fail(c, "recv", 0);
            if (n < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return HOOP_OK;
                if (errno == EPIPE || errno == ECONNRESET)
                    return comm_fail(c, send_side ? "send" : "recv", 0);
                return comm_fail(c, send_side ? "send" : "recv", errno);
            }
        }
        HOOP_CHECK(consume(c, s, (size_t)n));
        if ((size_t)n < want) return HOOP_OK;
    }
    return HOOP_OK;
}

static hoop_status post(struct tcp_comm *c, void *buf, size_t bytes, void **out)
{
    struct tcp_req *r = NULL;
    *out = NULL;
    if (c->failed != HOOP_OK) return HOOP_ERROR(c->failed, "%s", c->why);
    if (bytes > HOOP__FRAME_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "tcp: a message of %zu bytes (at most %llu)", bytes,
                          (unsigned long long)HOOP__FRAME_MAX);
    HOOP_CHECK(hoop__req_get(&c->reqs, (void **)&r));
    r->comm = c;
    r->bytes = bytes;
    /* The frame word first, on stream 0, ahead of any piece of this message there. */
    r->frame = c->kind == TK_SEND ? hoop__frame(bytes) : 0;
    r->fpiece = (struct tcp_piece){.req = r, .ptr = (char *)&r->frame, .left = HOOP__FRAME_BYTES};
    if (c->s[0].tail)
        c->s[0].tail->next = &r->fpiece;
    else
        c->s[0].head = &r->fpiece;
    c->s[0].tail = &r->fpiece;
    /* Small messages ride stream 0 (so they can share segments); large ones are cut
     * into pieces of >= TCP_MIN_PIECE striped over the streams by message index. */
    size_t np = bytes / TCP_MIN_PIECE;
    if (np < 1) np = 1;
    if (np > (size_t)c->nsocks) np = (size_t)c->nsocks;
    size_t base = bytes / np, extra = bytes % np;
    char *ptr = buf;
    unsigned first = bytes < TCP_MIN_PIECE ? 0 : c->next_stream;
    for (size_t j = 0; j < np; j++) {
        struct tcp_piece *p = &r->piece[j];
        struct tcp_stream *s = &c->s[(first + j) % (unsigned)c->nsocks];
        p->req = r;
        p->ptr = ptr;
        p->left = base + (j < extra);
        ptr += p->left;
        if (s->tail)
            s->tail->next = p;
        else
            s->head = p;
        s->tail = p;
    }
    if (bytes >= TCP_MIN_PIECE)
        c->next_stream = (c->next_stream + (unsigned)np) % (unsigned)c->nsocks;
    r->parts_left = (int)np + 1; /* and the frame word */
    /* Sends wait for the next test, so messages posted together leave in one segment.
     * Small receives wait too (a header and the data queued behind it then arrive
     * through one recvmsg); large ones try at once (the data may be waiting). */
    for (size_t j = 0; c->kind == TK_RECV && bytes >= TCP_MIN_PIECE && j < np; j++)
        (void)stream_progress(c, &c->s[(first + j) % (unsigned)c->nsocks]);
    *out = r;
    return HOOP_OK;
}

static hoop_status tcp_isend(struct hoop_tp_comm *tc, const void *buf, size_t bytes, void *mr,
                             void **req)
{
    (void)mr;
    struct tcp_comm *c = HOOP_CONTAINER_OF(tc, struct tcp_comm, base);
    if (c->kind != TK_SEND) return HOOP_ERROR(HOOP_ERR_USAGE, "isend on a recv comm");
    return post(c, (void *)buf, bytes, req);
}

static hoop_status tcp_irecv(struct hoop_tp_comm *tc, void *buf, size_t bytes, void *mr, void **req)
{
    (void)mr;
    struct tcp_comm *c = HOOP_CONTAINER_OF(tc, struct tcp_comm, base);
    if (c->kind != TK_RECV) return HOOP_ERROR(HOOP_ERR_USAGE, "irecv on a send comm");
    return post(c, buf, bytes, req);
}

static hoop_status tcp_test(void *req, int *done, size_t *bytes)
{
    struct tcp_req *r = req;
    struct tcp_comm *c = r->comm;
    *done = 0;
    for (int j = 0; j < c->nsocks && r->parts_left > 0 && c->failed == HOOP_OK; j++)
        if (c->s[j].head) (void)stream_progress(c, &c->s[j]);
    if (r->frame_bad == 1) { /* told once; the request stays live */
        char why[320];
        r->frame_bad = 2;
        c->base.bad_req = r;
        hoop__frame_ok(r->frame, r->bytes, "tcp", c->base.peer, why, sizeof(why));
        return HOOP_ERROR(HOOP_ERR_INTERNAL, "%s", why);
    }
    if (r->parts_left == 0) {
        *done = 1;
        if (bytes) *bytes = r->bytes;
        hoop__req_put(&c->reqs, r);
        return HOOP_OK;
    }
    if (c->failed != HOOP_OK) {
        hoop__req_put(&c->reqs, r);
        return HOOP_ERROR(c->failed, "%s", c->why);
    }
    return HOOP_OK;
}

static int tcp_pollfds(struct hoop_tp_comm *tc, struct pollfd *fds, int cap)
{
    struct tcp_comm *c = HOOP_CONTAINER_OF(tc, struct tcp_comm, base);
    int n = 0;
    for (int i = 0; i < c->nsocks && n < cap; i++) {
        if (c->s[i].fd < 0) continue;
        short ev = 0;
        if (c->kind == TK_LISTEN) ev = POLLIN;
        if (c->s[i].head) ev = c->kind == TK_SEND ? POLLOUT : POLLIN;
        fds[n++] = (struct pollfd){.fd = c->s[i].fd, .events = ev};
    }
    return n;
}

/* A failed communicator's link: a zero linger makes close send a reset and free the
 * socket at once, dropping what was still queued (nobody will read it). */
static hoop_status tcp_abort(struct hoop_tp_comm *tc)
{
    if (!tc) return HOOP_OK;
    struct tcp_comm *c = HOOP_CONTAINER_OF(tc, struct tcp_comm, base);
    struct linger now = {.l_onoff = 1, .l_linger = 0};
    for (int i = 0; i < TCP_MAX_SOCKS; i++)
        if (c->s[i].fd >= 0) (void)setsockopt(c->s[i].fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
    return tcp_close(tc);
}

static hoop_status tcp_close(struct hoop_tp_comm *tc)
{
    if (!tc) return HOOP_OK;
    struct tcp_comm *c = HOOP_CONTAINER_OF(tc, struct tcp_comm, base);
    for (int i = 0; i < TCP_MAX_SOCKS; i++)
        if (c->s[i].fd >= 0) close(c->s[i].fd);
    hoop__req_pool_fini(&c->reqs);
    for (int i = 0; i < c->npend; i++) close(c->pend[i].fd);
    for (int i = 0; i < c->ngroups; i++) tcp_close(&c->groups[i]->base);
    free(c->pend);
    free(c->groups);
    free(c);
    return HOOP_OK;
}

/* Each end of a link holds one socket per stream. */
static int tcp_link_fds(void *tctx)
{
    return ((struct tcp_ctx *)tctx)->nsocks;
}

const struct hoop_transport hoop__transport_tcp = {
    .name = "tcp",
    .preference = 2, /* the fallback: reaches every peer */
    .api_version = HOOP_TRANSPORT_API_VERSION,
    .init = tcp_init,
    .listen = tcp_listen,
    .connect = tcp_connect,
    .accept = tcp_accept,
    .reg_mr = NULL, /* (optional) TCP reads and writes any host memory */
    .dereg_mr = NULL,
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .test = tcp_test,
    .pollfds = tcp_pollfds,
    .link_fds = tcp_link_fds,
    .close = tcp_close,
    .abort = tcp_abort,
    .finalize = tcp_finalize,
};

static const struct hoop_transport *self_tp(void)
{
    return &hoop__transport_tcp;
}

int hoop__transport_complete(const struct hoop_transport *tp, const char **missing)
{
    const char *m = NULL;
    if (!tp->name)
        m = "name";
    else if (tp->api_version != HOOP_TRANSPORT_API_VERSION)
        m = "api_version";
    else if (!tp->init)
        m = "init";
    else if (!tp->listen)
        m = "listen";
    else if (!tp->connect)
        m = "connect";
    else if (!tp->accept)
        m = "accept";
    else if (!tp->isend)
        m = "isend";
    else if (!tp->irecv)
        m = "irecv";
    else if (!tp->test)
        m = "test";
    else if (!tp->close)
        m = "close";
    else if (!tp->finalize)
        m = "finalize";
    else if ((tp->reg_mr == NULL) != (tp->dereg_mr == NULL))
        m = "reg_mr/dereg_mr pair";
    if (missing) *missing = m;
    return m == NULL;
}
