/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/transport/shm.c -- the shared-memory transport, for ranks on the same host.
 *
 * A link (send comm -> recv comm) is one single-producer / single-consumer byte ring in
 * a memfd segment mapped by both processes. The sender copies user bytes into the ring
 * and publishes `head` (bytes written, release); the receiver copies them out and
 * publishes `tail` (bytes consumed). That is one copy on each side with no system call
 * on the data path, where TCP over loopback adds the socket layer, skb allocation and a
 * wake-up per segment. The same layout is what MPI's vader BTL and NCCL's SHM transport
 * use between processes of one node (bounded FIFOs in shared memory).
 *
 * Sleeping: a side that finds nothing to do and is about to sleep (pollfds) sets its
 * "waiting" word in the segment, re-checks the ring, and sleeps on an eventfd that the
 * other side rings only when it sees the word set (a seq_cst fence on both sides makes
 * one of them see the other). A spinning progress thread therefore never costs its peer
 * a system call.
 *
 * Set-up and liveness: the acceptor listens on an abstract Unix socket (SOCK_SEQPACKET)
 * named in its handle. The connector creates the segment and the two eventfds, sends a
 * hello (magic, version, rank, channel, ring size, token) with the three descriptors
 * (SCM_RIGHTS), and waits for a one-byte verdict. The acceptor checks the token in
 * constant time and that the peer runs as the same user (SO_PEERCRED), then maps the
 * segment. The socket then stays open only to detect a peer that exits: its EOF fails
 * a request that still needs the peer, naming it (HOOP_ERR_REMOTE); bytes already in
 * the ring can still be read after a graceful close.
 *
 * Reachability: abstract sockets live in a network namespace, so a handle carries the
 * kernel's boot id, the network-namespace inode and the user id; `reachable` is true only
 * when all three match this process's (another user would be refused, so such a peer is
 * left to TCP).
 *
 * Owns: segments, eventfds, sockets and requests of its comms. Thread-safety: one
 * thread per comm (as the vtable says); the two ends of a link run in two processes or
 * threads and meet only through the atomics in the segment.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/fdlimit.h"
#include "core/rng.h"
#include "transport/frame.h"
#include "transport/hello.h"
#include "transport/reqpool.h"
#include "transport/sock.h"
#include "transport/transport.h"

#define SHM_MAGIC 0x6873686du         /* "hshm" */
#define SHM_VERSION 2                 /* 2: each message opens with a frame word (frame.h) */
#define SHM_HDR_BYTES 4096            /* segment bytes before the ring */
#define SHM_SPARE 8                   /* released requests a comm keeps for reuse */
#define SHM_EOF_CHECK_NS (200 * 1000) /* a stalled comm peeks at its socket this often */
#define SHM_NAME_MAX 40

/* The segment's first page. Each side's word sits on its own cache lines. */
struct shm_ring {
    _Alignas(128) _Atomic uint64_t head; /* bytes written (sender) */
    _Atomic uint32_t rx_wait;            /* the receiver sleeps on efd_data */
    _Alignas(128) _Atomic uint64_t tail; /* bytes consumed (receiver) */
    _Atomic uint32_t tx_wait;            /* the sender sleeps on efd_space */
    _Alignas(128) uint64_t size;         /* ring bytes (a power of two) */
    uint32_t magic;
};
_Static_assert(sizeof(struct shm_ring) <= SHM_HDR_BYTES, "ring header too large");

struct shm_ctx {
    struct shm_comm *connecting; /* half-open send comms, closed by finalize */
    int rank;
    size_t ring_bytes;
    char token[HOOP_TP_TOKEN_MAX];
    uint8_t boot_id[16];
    uint64_t netns;
    uint32_t uid;
};

/* What a rank publishes; `pending` is the connector's progress, NULL when published. */
struct shm_handle {
    uint32_t magic;
    int32_t rank;
    uint8_t boot_id[16];
    uint64_t netns;
    char name[SHM_NAME_MAX]; /* abstract socket name (without the leading NUL) */
    struct shm_comm *pending;
    uint32_t uid; /* the acceptor refuses other users, so they are not reachable */
};
_Static_assert(sizeof(struct shm_handle) <= HOOP_TP_HANDLE_MAX, "shm handle too large");

struct shm_hello {
    uint32_t magic;
    uint16_t version, pad;
    int32_t rank, channel;
    uint64_t ring_bytes;
    char token[HOOP_TP_TOKEN_MAX];
};
_Static_assert(sizeof(struct shm_hello) == HOOP__SHM_HELLO_BYTES, "hello.h's size of the hello");

struct shm_req {
    hoop__req_link link; /* first: the comm's request pool (reqpool.h) */
    struct shm_comm *comm;
    char *ptr; /* NULL for a consumer receive */
    hoop_tp_consume_fn fn;
    void *arg;
    size_t unit; /* a consumer's element size */
    size_t left, bytes;
    int done;
    int framed;           /* its frame word is written (sender) or read and checked */
    int frame_bad;        /* receiver: the word said another length (1: not told yet) */
    uint64_t frame_got;   /* that word */
    struct shm_req *next; /* the comm's queue of unfinished requests */
};

enum shm_kind { SK_LISTEN, SK_SEND, SK_RECV };
enum shm_conn_state { SCS_START, SCS_HELLO, SCS_ACK, SCS_DONE };

struct shm_comm {
    struct hoop_tp_comm base;
    struct shm_ctx *ctx;
    enum shm_kind kind;
    int sock, memfd, efd_data, efd_space;
    struct shm_ring *ring;
    char *data;
    size_t size;  /* ring bytes */
    uint64_t pos; /* our copy of head (sender) or tail (receiver) */
    struct shm_req *qhead, *qtail;
    hoop__req_pool reqs;    /* live requests, and released ones kept for reuse */
    int peer_gone;          /* EOF seen on the socket */
    int64_t eof_checked_ns; /* last peek at the socket while stalled */
    hoop_status failed;
    char why[320];
    /* connector */
    enum shm_conn_state state;
    struct sockaddr_un raddr;
    socklen_t raddr_len;
    struct shm_comm *next_connecting;
    /* listener: accepted sockets whose hello has not arrived yet */
    int *pend;
    int npend, cappend;
    char name[SHM_NAME_MAX];
};

static const struct hoop_transport *self_tp(void);

// ----------------------------------------------------------------- host identity

static hoop_status host_identity(uint8_t boot_id[16], uint64_t *netns)
{
    char text[64] = {0};
    struct stat sb;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
    if (fd >= 0) close(fd);
    if (n < 32)
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "shm transport: cannot read /proc/sys/kernel/random/boot_id");
    memset(boot_id, 0, 16);
    for (int i = 0, k = 0; text[i] && k < 32; i++) { /* 36 chars with dashes -> 16 bytes */
        char ch = text[i];
        int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (v < 0) continue;
        boot_id[k / 2] |= (uint8_t)(v << (k % 2 ? 0 : 4));
        k++;
    }
    if (stat("/proc/self/ns/net", &sb) != 0)
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "shm transport: cannot stat /proc/self/ns/net: %s",
                          hoop__strerror(errno));
    *netns = (uint64_t)sb.st_ino;
    return HOOP_OK;
}

// ----------------------------------------------------------------- context

static hoop_status shm_init(const struct hoop_tp_config *cfg, void **tctx)
{
    struct shm_ctx *ctx;
    size_t ring = cfg->ring_bytes ? cfg->ring_bytes : (size_t)4 << 20;
    if (ring < 4096 || (ring & (ring - 1)))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "shm transport: ring of %zu bytes is not a power of "
                          "two >= 4096",
                          ring);
    HOOP_CHECK(hoop__calloc(&ctx, 1));
    ctx->rank = cfg->rank;
    ctx->ring_bytes = ring;
    ctx->uid = (uint32_t)getuid();
    if (cfg->token) snprintf(ctx->token, sizeof(ctx->token), "%s", cfg->token);
    hoop_status st = host_identity(ctx->boot_id, &ctx->netns);
    if (st != HOOP_OK) {
        free(ctx);
        return st;
    }
    *tctx = ctx;
    return HOOP_OK;
}

/* The link cost the collectives' cost model uses (algo.c), fitted on the 2-core machine
 * hoop is built on: all-reduces with each algorithm forced (hoop-bench, 2, 3 and 4 ranks,
 * 256 B to 4 MiB, best of 9 runs) run rd fastest up to 32 KiB and mostly ring from 64
 * KiB, and with these figures (and its gamma, 4 GB/s reduced) the model chooses so on 2
 * and 4 ranks (ring from 16 KiB on 3), closer than with any other pair tried. They are a
 * collective step's cost, not the ring's own: a ping-pong of two spinning threads moves
 * 8 bytes in 0.1 us and 4 MiB at 17 GB/s, and figures that small would send a 4-rank
 * all-reduce to ring and rhd from 1 KiB, at up to 2.5 times rd's time. */
static void shm_cost(void *tctx, struct hoop_tp_cost *out)
{
    (void)tctx;
    out->alpha = 8e-6;     /* s per message */
    out->beta = 1.0 / 4e9; /* s per byte */
}

static hoop_status shm_close(struct hoop_tp_comm *tc);

static hoop_status shm_finalize(void *tctx)
{
    struct shm_ctx *ctx = tctx;
    if (!ctx) return HOOP_OK;
    while (ctx->connecting) shm_close(&ctx->connecting->base); /* unlinks itself */
    free(ctx);
    return HOOP_OK;
}

static void unlink_connecting(struct shm_ctx *ctx, struct shm_comm *c)
{
    for (struct shm_comm **p = &ctx->connecting; *p; p = &(*p)->next_connecting)
        if (*p == c) {
            *p = c->next_connecting;
            return;
        }
}

static hoop_status comm_new(struct shm_ctx *ctx, enum shm_kind kind, int peer, int channel,
                            struct shm_comm **out)
{
    struct shm_comm *c;
    HOOP_CHECK(hoop__calloc(&c, 1));
    c->base.tp = self_tp();
    c->base.peer = peer;
    c->base.channel = channel;
    c->ctx = ctx;
    c->kind = kind;
    hoop__req_pool_init(&c->reqs, sizeof(struct shm_req), SHM_SPARE);
    c->sock = c->memfd = c->efd_data = c->efd_space = -1;
    *out = c;
    return HOOP_OK;
}

static int shm_reachable(void *tctx, const void *handle)
{
    const struct shm_ctx *ctx = tctx;
    const struct shm_handle *h = handle;
    return ctx && h->magic == SHM_MAGIC && h->netns == ctx->netns && h->uid == ctx->uid &&
           memcmp(h->boot_id, ctx->boot_id, sizeof(h->boot_id)) == 0;
}

// ----------------------------------------------------------------- listen / accept

static void abstract_addr(const char *name, struct sockaddr_un *a, socklen_t *len)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    size_t n = strnlen(name, SHM_NAME_MAX);
    memcpy(a->sun_path + 1, name, n); /* sun_path[0] = 0: the abstract namespace */
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static hoop_status shm_listen(void *tctx, void *handle, struct hoop_tp_comm **out)
{
    struct shm_ctx *ctx = tctx;
    struct shm_comm *c;
    struct sockaddr_un a;
    socklen_t alen;
    hoop__rng rng =
        hoop__rng_seed((uint64_t)hoop__now_ns() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)ctx);
    HOOP_CHECK(comm_new(ctx, SK_LISTEN, -1, -1, &c));
    c->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    for (int tries = 0; c->sock >= 0 && tries < 8; tries++) {
        snprintf(c->name, sizeof(c->name), "hoop-shm-%d-%016llx", (int)getpid(),
                 (unsigned long long)hoop__rng_next(&rng));
        abstract_addr(c->name, &a, &alen);
        if (bind(c->sock, (struct sockaddr *)&a, alen) == 0) break;
        if (errno != EADDRINUSE) tries = 8;
    }
    if (c->sock < 0 || listen(c->sock, 512) != 0) {
        int e = errno;
        shm_close(&c->base);
        char hint[160];
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "shm transport: cannot listen on a Unix socket: %s%s",
                          hoop__strerror(e), hoop__fd_hint(e, hint, sizeof(hint)));
    }
    struct shm_handle h = {
        .magic = SHM_MAGIC, .rank = ctx->rank, .netns = ctx->netns, .uid = ctx->uid};
    memcpy(h.boot_id, ctx->boot_id, sizeof(h.boot_id));
    memcpy(h.name, c->name, sizeof(h.name));
    memset(handle, 0, HOOP_TP_HANDLE_MAX);
    memcpy(handle, &h, sizeof(h));
    *out = &c->base;
    return HOOP_OK;
}

static int token_equal(const char *a, const char *b)
{
    unsigned char diff = 0;
    for (size_t i = 0; i < HOOP_TP_TOKEN_MAX; i++) diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

int hoop__shm_hello_check(const void *bytes, size_t n, int nfds, int truncated, int same_user,
                          const char *token, const char **why)
{
    struct shm_hello h;
    *why = NULL;
    if (n == sizeof(h)) memcpy(&h, bytes, sizeof(h));
    if (n != sizeof(h) || h.magic != SHM_MAGIC)
        *why = "not a hoop shm hello";
    else if (h.version != SHM_VERSION)
        *why = "another shm protocol version";
    else if (nfds != 3 || truncated)
        *why = "the segment and eventfds did not arrive";
    else if (!same_user)
        *why = "the peer runs as another user";
    else if (!token_equal(h.token, token))
        *why = "wrong token";
    else if (h.ring_bytes < 4096 || (h.ring_bytes & (h.ring_bytes - 1)))
        *why = "a bad ring size";
    return *why == NULL;
}

/* Maps a connector's segment (fd) and checks its header against the hello. */
static hoop_status map_segment(struct shm_comm *c, int fd, uint64_t ring_bytes, int create)
{
    struct stat sb;
    size_t map = SHM_HDR_BYTES + ring_bytes;
    if (create && ftruncate(fd, (off_t)map) != 0)
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "shm transport: ftruncate(%zu): %s", map,
                          hoop__strerror(errno));
    if (!create && (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != map))
        return HOOP_ERROR(HOOP_ERR_REMOTE, "shm transport: segment from rank %d has the wrong size",
                          c->base.peer);
    /* MAP_POPULATE: page faults now, not on the data path during the first lap. */
    void *p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED)
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "shm transport: mmap of %zu bytes: %s", map,
                          hoop__strerror(errno));
    c->ring = p;
    c->data = (char *)p + SHM_HDR_BYTES;
    c->size = (size_t)ring_bytes;
    if (create) {
        c->ring->size = ring_bytes;
        c->ring->magic = SHM_MAGIC;
    } else if (c->ring->magic != SHM_MAGIC || c->ring->size != ring_bytes) {
        return HOOP_ERROR(HOOP_ERR_REMOTE, "shm transport: segment from rank %d is not a ring",
                          c->base.peer);
    }
    return HOOP_OK;
}

/* The hello travels with three descriptors (segment, data bell, space bell). */
struct hello_msg {
    struct iovec iov;
    union {
        char buf[CMSG_SPACE(3 * sizeof(int))];
        struct cmsghdr align;
    } cbuf;
};

static struct msghdr hello_msg_init(struct hello_msg *x, struct shm_hello *h)
{
    memset(x, 0, sizeof(*x));
    x->iov = (struct iovec){.iov_base = h, .iov_len = sizeof(*h)};
    return (struct msghdr){.msg_iov = &x->iov,
                           .msg_iovlen = 1,
                           .msg_control = x->cbuf.buf,
                           .msg_controllen = sizeof(x->cbuf.buf)};
}

/* Takes the descriptors that came with a hello: the first three into fds, any others
 * closed at once. The control buffer is sized for three but its alignment leaves room
 * for a fourth, and a peer may send several SCM_RIGHTS messages: whatever arrives is
 * either kept here or closed. Returns how many arrived (the hello needs exactly 3). */
static int take_fds(struct msghdr *m, int fds[3])
{
    int nfds = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(m); cm; cm = CMSG_NXTHDR(m, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++, nfds++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            if (nfds < 3)
                fds[nfds] = fd;
            else
                close(fd);
        }
    }
    return nfds;
}

/* A hello whose descriptors were cut short (MSG_CTRUNC): when this process cannot open
 * one more descriptor, the kernel dropped them for want of room here, not the peer:
 * refuses the link (the peer hears a verdict of 0) and fails with HOOP_ERR_SYSTEM naming
 * the limit, instead of refusing it as a bad hello and waiting for it until the timeout.
 * HOOP_OK otherwise (the hello check then refuses the peer). */
static hoop_status fds_full(int fd, int peer, int fds[3])
{
    char hint[160], no = 0;
    int probe = dup(fd), err = errno;
    if (probe >= 0) {
        close(probe);
        return HOOP_OK;
    }
    if (err != EMFILE && err != ENFILE) return HOOP_OK;
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0) close(fds[i]);
    fds[0] = fds[1] = fds[2] = -1;
    (void)send(fd, &no, 1, MSG_DONTWAIT | MSG_NOSIGNAL); /* fd: the listener's to close */
    return HOOP_ERROR(HOOP_ERR_SYSTEM,
                      "shm transport: cannot take the ring and eventfds of a link from rank %d: "
                      "%s%s",
                      peer, hoop__strerror(err), hoop__fd_hint(err, hint, sizeof(hint)));
}

/* Reads the hello of an accepted socket. *out = a new recv comm when the peer is
 * accepted; the socket is consumed (closed or kept) unless its hello has not arrived. */
static hoop_status judge(struct shm_comm *l, int fd, int *keep, struct shm_comm **out)
{
    struct hello_msg x;
    struct shm_hello h;
    struct msghdr m = hello_msg_init(&x, &h);
    int fds[3] = {-1, -1, -1}, nfds = 0;
    struct ucred cred;
    socklen_t clen = sizeof(cred);
    *out = NULL;
    *keep = 0;
    ssize_t n = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        *keep = 1;
        return HOOP_OK;
    }
    if (n >= 0) nfds = take_fds(&m, fds);
    if (n == (ssize_t)sizeof(h) && (m.msg_flags & MSG_CTRUNC))
        HOOP_CHECK(fds_full(fd, h.rank, fds));
    const char *why = NULL;
    int same_user =
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0 && cred.uid == getuid();
    hoop__shm_hello_check(&h, n < 0 ? 0 : (size_t)n, nfds, (m.msg_flags & MSG_CTRUNC) != 0,
                          same_user, l->ctx->token, &why);
    struct shm_comm *c = NULL;
    hoop_status st = HOOP_OK;
    if (!why) {
        st = comm_new(l->ctx, SK_RECV, h.rank, h.channel, &c);
        if (st == HOOP_OK) {
            c->memfd = fds[0], c->efd_data = fds[1], c->efd_space = fds[2], c->sock = fd;
            fds[0] = fds[1] = fds[2] = -1;
            st = map_segment(c, c->memfd, h.ring_bytes, 0);
        }
        if (st != HOOP_OK) why = hoop_last_error();
    }
    char verdict = why ? 0 : 1;
    if (send(fd, &verdict, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1 && !why) why = "the peer left";
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0) close(fds[i]);
    if (why) {
        HOOP_WARN("shm transport: refused a connection (%s)", why);
        if (c) {
            c->sock = -1; /* closed below */
            shm_close(&c->base);
        }
        close(fd);
        return HOOP_OK;
    }
    *out = c;
    return HOOP_OK;
}

static hoop_status shm_accept(struct hoop_tp_comm *lc, struct hoop_tp_comm **out)
{
    struct shm_comm *l = HOOP_CONTAINER_OF(lc, struct shm_comm, base);
    *out = NULL;
    for (;;) {
        int fd;
        HOOP_CHECK(hoop__sock_accept(l->sock, l->ctx->rank, "shm transport", &fd));
        if (fd < 0) break;
        if (l->npend == l->cappend) {
            int cap = l->cappend ? 2 * l->cappend : 16;
            int *p = realloc(l->pend, (size_t)cap * sizeof(int));
            if (!p) {
                close(fd);
                return HOOP_ERROR(HOOP_ERR_NOMEM, "shm transport: out of memory in accept");
            }
            l->pend = p;
            l->cappend = cap;
        }
        l->pend[l->npend++] = fd;
    }
    for (int i = 0; i < l->npend; i++) {
        struct shm_comm *c;
        int keep;
        HOOP_CHECK(judge(l, l->pend[i], &keep, &c));
        if (keep) continue;
        l->pend[i--] = l->pend[--l->npend];
        if (c) {
            *out = &c->base;
            return HOOP_OK;
        }
    }
    return HOOP_OK;
}

// ----------------------------------------------------------------- connect

static hoop_status connector_setup(struct shm_comm *c)
{
    c->memfd = memfd_create("hoop-shm", MFD_CLOEXEC);
    c->efd_data = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->efd_space = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->memfd < 0 || c->efd_data < 0 || c->efd_space < 0) {
        int err = errno;
        char hint[160];
        return HOOP_ERROR(HOOP_ERR_SYSTEM,
                          "rank %d: shm transport: memfd_create/eventfd for the link to rank %d: "
                          "%s%s",
                          c->ctx->rank, c->base.peer, hoop__strerror(err),
                          hoop__fd_hint(err, hint, sizeof(hint)));
    }
    return map_segment(c, c->memfd, c->ctx->ring_bytes, 1);
}

static hoop_status send_hello(struct shm_comm *c, int *sent)
{
    struct shm_hello h = {.magic = SHM_MAGIC,
                          .version = SHM_VERSION,
                          .rank = c->ctx->rank,
                          .channel = c->base.channel,
                          .ring_bytes = c->size};
    int fds[3] = {c->memfd, c->efd_data, c->efd_space};
    struct hello_msg x;
    struct msghdr m = hello_msg_init(&x, &h);
    memcpy(h.token, c->ctx->token, sizeof(h.token));
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(fds));
    memcpy(CMSG_DATA(cm), fds, sizeof(fds));
    *sent = 0;
    ssize_t n = sendmsg(c->sock, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return HOOP_OK;
    if (n != (ssize_t)sizeof(h))
        return HOOP_ERROR(HOOP_ERR_REMOTE, "shm transport: hello to rank %d failed: %s",
                          c->base.peer, n < 0 ? hoop__strerror(errno) : "short write");
    *sent = 1;
    return HOOP_OK;
}

/* One step of the connector's state machine; *done once the verdict said yes. */
static hoop_status conn_step(struct shm_comm *c, int *done)
{
    *done = 0;
    if (c->state == SCS_START) {
        if (connect(c->sock, (struct sockaddr *)&c->raddr, c->raddr_len) != 0) {
            if (errno == EAGAIN || errno == ECONNREFUSED || errno == ENOENT) return HOOP_OK;
            return HOOP_ERROR(HOOP_ERR_REMOTE, "shm transport: connect to rank %d: %s",
                              c->base.peer, hoop__strerror(errno));
        }
        c->state = SCS_HELLO;
    }
    if (c->state == SCS_HELLO) {
        int sent;
        HOOP_CHECK(send_hello(c, &sent));
        if (!sent) return HOOP_OK;
        c->state = SCS_ACK;
    }
    char v;
    ssize_t n = recv(c->sock, &v, 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return HOOP_OK;
    /* An end of file or a reset before the verdict: the peer went away mid-handshake. */
    if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE)))
        return HOOP_ERROR(HOOP_ERR_REMOTE,
                          "shm transport: rank %d exited (or closed its end) during the "
                          "connection handshake",
                          c->base.peer);
    if (n < 0)
        return HOOP_ERROR(HOOP_ERR_REMOTE, "shm transport: reading rank %d's verdict: %s",
                          c->base.peer, hoop__strerror(errno));
    if (v != 1)
        return HOOP_ERROR(HOOP_ERR_REMOTE,
                          "shm transport: rank %d refused the connection (wrong HOOP_TOKEN, "
                          "another user, or a failed mapping: see its log)",
                          c->base.peer);
    c->state = SCS_DONE;
    *done = 1;
    return HOOP_OK;
}

static hoop_status shm_connect(void *tctx, void *handle, int channel, struct hoop_tp_comm **out)
{
    struct shm_ctx *ctx = tctx;
    struct shm_handle *h = handle;
    struct shm_comm *c = h->pending;
    hoop_status st;
    *out = NULL;
    if (!c) {
        if (!shm_reachable(ctx, h))
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "shm transport: rank %d is on another host or network namespace",
                              h->rank);
        HOOP_CHECK(comm_new(ctx, SK_SEND, h->rank, channel, &c));
        c->next_connecting = ctx->connecting;
        ctx->connecting = c;
        h->pending = c;
        abstract_addr(h->name, &c->raddr, &c->raddr_len);
        c->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->sock < 0) {
            int err = errno;
            char hint[160];
            st = HOOP_ERROR(HOOP_ERR_SYSTEM, "rank %d: shm transport: socket to rank %d: %s%s",
                            ctx->rank, h->rank, hoop__strerror(err),
                            hoop__fd_hint(err, hint, sizeof(hint)));
            goto fail;
        }
        HOOP_CHECK_GOTO(connector_setup(c), st, fail);
    }
    int done;
    HOOP_CHECK_GOTO(conn_step(c, &done), st, fail);
    if (!done) return HOOP_OK;
    unlink_connecting(ctx, c);
    h->pending = NULL;
    *out = &c->base;
    return HOOP_OK;
fail:
    h->pending = NULL;
    shm_close(&c->base); /* also unlinks it from ctx->connecting */
    return st;
}

// ----------------------------------------------------------------- data path

static hoop_status comm_fail(struct shm_comm *c, const char *what)
{
    if (c->failed == HOOP_OK) {
        c->failed = HOOP_ERR_REMOTE;
        snprintf(c->why, sizeof(c->why), "shm link %s rank %d: %s",
                 c->kind == SK_SEND ? "to" : "from", c->base.peer, what);
    }
    return HOOP_ERROR(c->failed, "%s", c->why);
}

/* A stalled comm peeks at its socket now and then: EOF means the peer has gone. The
 * comm fails only when the peer was already known gone before this pass read the ring
 * (gone_before): a peer may complete its last send and close between our read of its
 * position and the peek, and those bytes must still be delivered by the next pass. */
static hoop_status check_peer(struct shm_comm *c, int gone_before)
{
    int64_t now = hoop__now_ns();
    if (gone_before) return comm_fail(c, "the peer closed its end or exited");
    if (c->peer_gone || now - c->eof_checked_ns < SHM_EOF_CHECK_NS) return HOOP_OK;
    c->eof_checked_ns = now;
    char b;
    ssize_t n = recv(c->sock, &b, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) c->peer_gone = 1;
    return HOOP_OK;
}

static void ring_bell(int efd)
{
    uint64_t one = 1;
    if (write(efd, &one, sizeof(one)) < 0) { /* EAGAIN: the counter is already set */
    }
}

static void drain_bell(int efd)
{
    uint64_t v;
    if (read(efd, &v, sizeof(v)) < 0) { /* EAGAIN: nothing rung */
    }
}

/* Moves bytes between the queued requests and the ring; completed requests leave the
 * queue (done = 1) and are released by the test that sees them. Every message starts on
 * an 8-byte boundary of the stream (both ends see the same sizes, so both skip the same
 * pad) with its frame word (frame.h), which the receiver checks against the length it
 * posted before it takes a byte; the data behind the word stay 8-byte aligned, which
 * keeps a consumer's pieces aligned for any element type. */
static hoop_status comm_progress(struct shm_comm *c)
{
    struct shm_ring *r = c->ring;
    int send = c->kind == SK_SEND;
    if (c->failed != HOOP_OK) return HOOP_ERROR(c->failed, "%s", c->why);
    if (!c->qhead) return HOOP_OK;
    int gone_before = c->peer_gone;
    uint64_t other = atomic_load_explicit(send ? &r->tail : &r->head, memory_order_acquire);
    uint64_t pos = c->pos;
    size_t mask = c->size - 1;
    if ((send ? pos - other : other - pos) > c->size)
        return comm_fail(c, "the ring's positions are corrupt");
    while (c->qhead) {
        struct shm_req *q = c->qhead;
        if (!q->framed) { /* a new message: its frame word at the next 8-byte boundary */
            uint64_t aligned = (pos + 7) & ~(uint64_t)7, end = aligned + HOOP__FRAME_BYTES;
            if (!send && other < end) break;          /* the sender has not framed it yet */
            if (send && end - other > c->size) break; /* the pad and the word need room */
            uint64_t *word = (uint64_t *)(void *)(c->data + ((size_t)aligned & mask));
            if (send)
                *word = hoop__frame(q->bytes);
            else if (*word != hoop__frame(q->bytes))
                q->frame_bad = 1, q->frame_got = *word; /* told by test */
            pos = end;
            q->framed = 1;
        }
        uint64_t used = pos - other;
        size_t avail =
            send ? (used >= c->size ? 0 : c->size - (size_t)used) : (size_t)(other - pos);
        size_t n = q->left < avail ? q->left : avail;
        if (q->fn) n -= n % q->unit; /* a consumer gets whole elements only */
        if (n == 0 && q->left > 0) break;
        size_t off = (size_t)pos & mask, first = c->size - off;
        if (first > n) first = n;
        if (n == 0) { /* an empty message: its frame word was all */
        } else if (send) {
            memcpy(c->data + off, q->ptr, first);
            memcpy(c->data, q->ptr + first, n - first);
        } else if (q->fn) {
            size_t at = q->bytes - q->left;
            q->fn(q->arg, c->data + off, at, first);
            if (n > first) q->fn(q->arg, c->data, at + first, n - first);
        } else {
            memcpy(q->ptr, c->data + off, first);
            memcpy(q->ptr + first, c->data, n - first);
        }
        if (q->ptr) q->ptr += n;
        q->left -= n;
        pos += n;
        if (q->left == 0) {
            q->done = 1;
            if (!(c->qhead = q->next)) c->qtail = NULL;
        }
    }
    if (pos == c->pos) return check_peer(c, gone_before); /* stalled: anyone still there? */
    c->pos = pos;
    atomic_store_explicit(send ? &r->head : &r->tail, pos, memory_order_release);
    /* Pairs with the fence in pollfds: either the sleeper sees our position or we see
     * its waiting word. */
    atomic_thread_fence(memory_order_seq_cst);
    _Atomic uint32_t *w = send ? &r->rx_wait : &r->tx_wait;
    if (atomic_load_explicit(w, memory_order_relaxed) && atomic_exchange(w, 0))
        ring_bell(send ? c->efd_data : c->efd_space);
    return HOOP_OK;
}

static hoop_status post(struct shm_comm *c, void *buf, size_t bytes, void **out)
{
    struct shm_req *q = NULL;
    *out = NULL;
    if (c->failed != HOOP_OK) return HOOP_ERROR(c->failed, "%s", c->why);
    if (bytes > HOOP__FRAME_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "shm: a message of %zu bytes (at most %llu)", bytes,
                          (unsigned long long)HOOP__FRAME_MAX);
    HOOP_CHECK(hoop__req_get(&c->reqs, (void **)&q));
    q->comm = c;
    q->ptr = buf;
    q->left = q->bytes = bytes;
    /* Even an empty message travels (its frame word), so that both ends count alike. */
    if (c->qtail)
        c->qtail->next = q;
    else
        c->qhead = q;
    c->qtail = q;
    *out = q;
    return HOOP_OK;
}

static hoop_status shm_isend(struct hoop_tp_comm *tc, const void *buf, size_t bytes, void *mr,
                             void **req)
{
    struct shm_comm *c = HOOP_CONTAINER_OF(tc, struct shm_comm, base);
    (void)mr;
    if (c->kind != SK_SEND) return HOOP_INTERNAL_ERROR("shm isend on a non-send comm");
    HOOP_CHECK(post(c, (void *)buf, bytes, req));
    (void)comm_progress(c); /* small messages leave at once; a failure shows in test */
    return HOOP_OK;
}

static hoop_status shm_irecv(struct hoop_tp_comm *tc, void *buf, size_t bytes, void *mr, void **req)
{
    struct shm_comm *c = HOOP_CONTAINER_OF(tc, struct shm_comm, base);
    (void)mr;
    if (c->kind != SK_RECV) return HOOP_INTERNAL_ERROR("shm irecv on a non-recv comm");
    return post(c, buf, bytes, req);
}

static hoop_status shm_irecv_fn(struct hoop_tp_comm *tc, size_t bytes, size_t unit,
                                hoop_tp_consume_fn fn, void *arg, void **req)
{
    struct shm_comm *c = HOOP_CONTAINER_OF(tc, struct shm_comm, base);
    if (c->kind != SK_RECV) return HOOP_INTERNAL_ERROR("shm irecv_fn on a non-recv comm");
    if (!fn || unit == 0 || unit > 8 || (8 % unit) || bytes % unit)
        return HOOP_INTERNAL_ERROR("shm irecv_fn: bad consumer (unit %zu, bytes %zu)", unit, bytes);
    HOOP_CHECK(post(c, NULL, bytes, req));
    struct shm_req *q = *req;
    q->fn = fn;
    q->arg = arg;
    q->unit = unit;
    return HOOP_OK;
}

static hoop_status shm_test(void *req, int *done, size_t *bytes)
{
    struct shm_req *q = req;
    struct shm_comm *c = q->comm;
    *done = 0;
    if (!q->done) {
        hoop_status st = comm_progress(c);
        if (st != HOOP_OK) {
            hoop__req_put(&c->reqs, q); /* released when failed, as when finished */
            return st;
        }
    }
    /* A frame word that said another length is told once (HOOP_ERR_INTERNAL, the request
     * stays live) and the stream goes on as the receiver posted it: the caller decides (a
     * collective mismatch looks the same until the call's vote is done). */
    if (q->frame_bad == 1) {
        char why[320];
        q->frame_bad = 2;
        c->base.bad_req = q;
        hoop__frame_ok(q->frame_got, q->bytes, "shm", c->base.peer, why, sizeof(why));
        return HOOP_ERROR(HOOP_ERR_INTERNAL, "%s", why);
    }
    if (!q->done) return HOOP_OK;
    if (bytes) *bytes = q->bytes;
    *done = 1;
    hoop__req_put(&c->reqs, q);
    return HOOP_OK;
}

/* Called before the caller sleeps: arms our waiting word, and rings our own bell when
 * the ring already has what we wait for, so the sleep ends at once. */
static int shm_pollfds(struct hoop_tp_comm *tc, struct pollfd *fds, int cap)
{
    struct shm_comm *c = HOOP_CONTAINER_OF(tc, struct shm_comm, base);
    if (cap < 1) return 0;
    if (c->kind == SK_LISTEN) {
        fds[0] = (struct pollfd){.fd = c->sock, .events = POLLIN};
        return 1;
    }
    if (!c->qhead || c->failed != HOOP_OK || cap < 2) {
        fds[0] = (struct pollfd){.fd = c->sock, .events = 0};
        return 1;
    }
    int send = c->kind == SK_SEND, efd = send ? c->efd_space : c->efd_data;
    struct shm_ring *r = c->ring;
    drain_bell(efd);
    atomic_store(send ? &r->tx_wait : &r->rx_wait, 1);
    atomic_thread_fence(memory_order_seq_cst);
    uint64_t other = atomic_load(send ? &r->tail : &r->head);
    /* The peer was found gone (check_peer): the next test fails the request, so the
     * caller must not sleep before it (the socket, at EOF, is no longer watched). */
    if (c->peer_gone || (send ? c->size - (size_t)(c->pos - other) > 0 : other != c->pos))
        ring_bell(efd);
    fds[0] = (struct pollfd){.fd = efd, .events = POLLIN};
    fds[1] = (struct pollfd){.fd = c->sock, .events = c->peer_gone ? 0 : POLLIN};
    return 2;
}

static hoop_status shm_close(struct hoop_tp_comm *tc)
{
    if (!tc) return HOOP_OK;
    struct shm_comm *c = HOOP_CONTAINER_OF(tc, struct shm_comm, base);
    if (c->kind == SK_SEND && c->state != SCS_DONE) unlink_connecting(c->ctx, c);
    hoop__req_pool_fini(&c->reqs);
    for (int i = 0; i < c->npend; i++) close(c->pend[i]);
    free(c->pend);
    if (c->ring) munmap(c->ring, SHM_HDR_BYTES + c->size);
    int fds[4] = {c->sock, c->memfd, c->efd_data, c->efd_space};
    for (int i = 0; i < 4; i++)
        if (fds[i] >= 0) close(fds[i]);
    free(c);
    return HOOP_OK;
}

/* Each end of a link holds its socket, the ring's memfd and two eventfds. */
static int shm_link_fds(void *tctx)
{
    (void)tctx;
    return 4;
}

const struct hoop_transport hoop__transport_shm = {
    .name = "shm",
    .preference = 0, /* within a host, nothing is faster */
    .api_version = HOOP_TRANSPORT_API_VERSION,
    .init = shm_init,
    .listen = shm_listen,
    .connect = shm_connect,
    .accept = shm_accept,
    .reachable = shm_reachable,
    .isend = shm_isend,
    .irecv = shm_irecv,
    .irecv_fn = shm_irecv_fn,
    .test = shm_test,
    .pollfds = shm_pollfds,
    .cost = shm_cost,
    .link_fds = shm_link_fds,
    .close = shm_close,
    .finalize = shm_finalize,
};

static const struct hoop_transport *self_tp(void)
{
    return &hoop__transport_shm;
}
