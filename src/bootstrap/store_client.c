/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/bootstrap/store_client.c -- the rendezvous store client: connect with backoff,
 * the token handshake, and one request/reply per call, each under a deadline.
 *
 * A hoop_store owns its socket, its frame buffers and, when made by
 * hoop_store_init_env on rank 0, the server. The socket is non-blocking and every wait
 * is a poll() bounded by the call's deadline, so nothing here blocks past it. When the
 * server closes the connection the pending call fails at once with HOOP_ERR_REMOTE, the
 * socket is closed and every later call fails the same way. When it says GOODBYE
 * first, the call fails with the code and the reason its owner gave (for rank 0's
 * store: why rank 0 gave up, e.g. which ranks never arrived). A first reply that is not
 * a hoop frame names the protocol the port speaks, at once, instead of retrying.
 *
 * Thread-safety: a handle is used by one thread at a time; distinct handles are
 * independent.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/store_proto.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/launch.h"

/* Extra time a client waits, beyond a WAIT's server-side timeout, for the server's
 * TIMEOUT reply before it gives up on the connection itself. */
#define WAIT_GRACE_MS 1000
/* How long hoop_store_destroy waits for the server to acknowledge its CLOSE. */
#define CLOSE_WAIT_MS 1000
/* How long a posted request may wait for room in the socket (hoop__store_post_only). */
#define POST_MS 200
/* How often a call waiting for its reply asks the interrupt (hoop__store_set_interrupt). */
#define INTERRUPT_SLICE_MS 100
#define BACKOFF_MIN_MS 10
#define OWN_HELLO_MS 5000 /* how long the owner's own server may take to answer its hello */
#define BACKOFF_MAX_MS 1000

struct hoop_store {
    int fd;
    int rank, world_size;
    int64_t timeout_ms;
    char name[300]; /* "host:port" of the server */
    char token[HOOP__STORE_TOKEN_MAX + 1];
    hoop__buf out;             /* the request being sent */
    hoop__buf in;              /* the last reply's body (after the length) */
    hoop_store_server *server; /* owned (hoop_store_init_env on rank 0), else NULL */
    int rendezvous;            /* the owner's store (hoop__store_naming) */
    int serving;     /* the owner's own client: its server listens already (a refusal: not here) */
    char owner[64];  /* "rank 0" (hoop__store_naming) */
    char place[64];  /* "MASTER_ADDR:MASTER_PORT" */
    char label[480]; /* "store H:P" or "rank 0's store (MASTER_ADDR:...)" */
    char lost[HOOP__STORE_REASON_MAX + 64]; /* why the connection is gone; "" while it works */
    hoop_status fail_code;                  /* the first failure noted (hoop__store_note_failure) */
    char failure[1024];
    int said_goodbye;                    /* the connection ended with a GOODBYE */
    uint8_t bye_code;                    /* its code (0: the owner closed without a failure) */
    uint32_t *bye_missing, bye_nmissing; /* its missing keys, for the WAIT */
    int64_t reply_grace_ms;              /* a WAIT's reply may come this late (min WAIT_GRACE_MS) */
    /* A reply not read yet: a WAIT's sent by hoop__store_wait_send (owed_wait; its keys'
     * count and flags decode it), or an interrupted call's (dropped unread); and when it
     * is overdue. */
    int owed, owed_wait;
    uint32_t owed_nkeys;
    unsigned owed_flags;
    int64_t owed_deadline_ns;
    int posting; /* hoop__store_post_only: SETs and CLOSE go out, no reply is read */
    /* The socket of a connection lost because a reply did not come in time (the server's
     * host stalled): kept, so that hoop__store_post_only can still leave notes there. */
    int stale_fd;
    int (*interrupt)(void *arg); /* hoop__store_set_interrupt */
    void *interrupt_arg;
};

/* hoop__store_last_refused: set by a refused handshake, cleared by each connect. */
static _Thread_local int last_refused;

// ----- connection loss --------------------------------------------------------------------

/* Closes the socket, remembers why, and fails with st naming the server. */
static hoop_status lose(hoop_store *st, hoop_status code, const char *why)
{
    if (st->fd >= 0) close(st->fd);
    if (st->stale_fd >= 0) close(st->stale_fd);
    st->fd = st->stale_fd = -1;
    st->owed = 0;
    snprintf(st->lost, sizeof(st->lost), "%s", why);
    return HOOP_ERROR(code, "%s: %s", st->label, why);
}

/* What an end of stream without a word means. */
static const char *closed_text(hoop_store *st, char *buf, size_t cap)
{
    if (!st->rendezvous) return "the server closed the connection";
    snprintf(buf, cap,
             "%s, the store's host, went away (the connection closed without a word: %s died, "
             "was killed or exited)",
             st->owner, st->owner);
    return buf;
}

static hoop_status usable(const hoop_store *st)
{
    if (st == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "store: handle is NULL");
    if (st->fd < 0)
        return HOOP_ERROR(HOOP_ERR_REMOTE, "%s: the connection was lost earlier (%s)", st->label,
                          st->lost);
    return HOOP_OK;
}

// ----- raw I/O under a deadline ------------------------------------------------------------

/* Waits for events on fd until deadline; returns >0 ready, 0 timeout, -1 error. */
static int wait_fd(int fd, short events, int64_t deadline_ns)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int rc = poll(&p, 1, hoop__ms_left(deadline_ns));
        if (rc == -1 && errno == EINTR) continue;
        return rc;
    }
}

/* Sends all of buf; on failure returns the status (after lose()). */
static hoop_status send_all(hoop_store *st, const uint8_t *buf, size_t n, int64_t deadline_ns)
{
    size_t off = 0;
    while (off < n) {
        ssize_t k = send(st->fd, buf + off, n - off, MSG_NOSIGNAL);
        if (k > 0) {
            off += (size_t)k;
            continue;
        }
        if (k == -1 && errno == EINTR) continue;
        if (k == -1 && errno != EAGAIN && errno != EWOULDBLOCK) {
            char why[160];
            snprintf(why, sizeof(why), "the server closed the connection (send: %s)",
                     hoop__strerror(errno));
            return lose(st, HOOP_ERR_REMOTE, why);
        }
        int rc = wait_fd(st->fd, POLLOUT, deadline_ns);
        if (rc == 0) return lose(st, HOOP_ERR_TIMEOUT, "no progress sending a request");
        if (rc < 0) return lose(st, HOOP_ERR_SYSTEM, "poll failed while sending");
    }
    return HOOP_OK;
}

/* Receives exactly n bytes into buf. */
static hoop_status recv_all(hoop_store *st, uint8_t *buf, size_t n, int64_t deadline_ns)
{
    size_t off = 0;
    while (off < n) {
        ssize_t k = recv(st->fd, buf + off, n - off, 0);
        if (k > 0) {
            off += (size_t)k;
            continue;
        }
        if (k == 0) {
            char why[320];
            return lose(st, HOOP_ERR_REMOTE, closed_text(st, why, sizeof(why)));
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            char why[160];
            snprintf(why, sizeof(why), "the connection broke (recv: %s)", hoop__strerror(errno));
            return lose(st, HOOP_ERR_REMOTE, why);
        }
        int rc = wait_fd(st->fd, POLLIN, deadline_ns);
        if (rc == 0) { /* lost, but every request went out whole: keep it for posting */
            int keep = st->fd;
            st->fd = -1;
            hoop_status s = lose(st, HOOP_ERR_TIMEOUT, "no reply before the deadline");
            st->stale_fd = keep;
            return s;
        }
        if (rc < 0) return lose(st, HOOP_ERR_SYSTEM, "poll failed while receiving");
    }
    return HOOP_OK;
}

/* A GOODBYE frame (status byte read): keeps the missing keys for the WAIT that may be
 * waiting for them, closes the connection and fails with the owner's code and reason. */
static hoop_status on_goodbye(hoop_store *st, hoop__rd *rd)
{
    uint8_t code = hoop__get_u8(rd);
    size_t n;
    const uint8_t *text = hoop__get_str(rd, HOOP__STORE_REASON_MAX, &n);
    uint32_t nmissing = hoop__get_u32(rd);
    if (rd->bad || rd->left != 4ull * nmissing || nmissing > HOOP__STORE_WAIT_KEYS_MAX)
        return lose(st, HOOP_ERR_REMOTE, "the server sent a malformed GOODBYE");
    st->said_goodbye = 1;
    st->bye_code = code;
    free(st->bye_missing);
    st->bye_missing = nmissing ? malloc(nmissing * sizeof(uint32_t)) : NULL;
    st->bye_nmissing = st->bye_missing ? nmissing : 0;
    for (uint32_t i = 0; i < st->bye_nmissing; i++) st->bye_missing[i] = hoop__get_u32(rd);
    hoop_status s =
        code > HOOP_OK && code <= HOOP_ERR_INTERNAL ? (hoop_status)code : HOOP_ERR_REMOTE;
    char why[HOOP__STORE_REASON_MAX + 64], fault[700];
    if (hoop__store_server_fault(st->server, fault, sizeof(fault))) {
        /* This rank's own store gave up (it refused a rank of the job): say so plainly. */
        snprintf(why, sizeof(why), "%.*s", (int)n, (const char *)text);
        lose(st, s, why);
        return HOOP_ERROR(s, "%s's store %s", st->rendezvous ? st->owner : "this rank", fault);
    }
    if (st->rendezvous)
        snprintf(why, sizeof(why), "%s %s its store: %.*s", st->owner,
                 code ? "gave up and closed" : "closed", (int)n, (const char *)text);
    else
        snprintf(why, sizeof(why), "the server closed the connection: %.*s", (int)n,
                 (const char *)text);
    return lose(st, s, why);
}

/* Sends the request built in st->out (and empties it); a request that could not be
 * built for lack of memory is HOOP_ERR_NOMEM here, not a truncated frame. */
static hoop_status send_request(hoop_store *st, int64_t deadline_ns)
{
    if (st->out.oom) {
        hoop__buf_free(&st->out);
        return HOOP_ERROR(HOOP_ERR_NOMEM, "store: out of memory building a request");
    }
    hoop_status s = send_all(st, st->out.data, st->out.len, deadline_ns);
    st->out.len = 0;
    return s;
}

/* Reads one reply frame into st->in: its status byte in *status, a reader over the rest
 * of the body in *rd. A GOODBYE fails the call (on_goodbye). */
static hoop_status recv_reply(hoop_store *st, int64_t deadline_ns, uint8_t *status, hoop__rd *rd)
{
    uint8_t hdr[4];
    HOOP_CHECK(recv_all(st, hdr, 4, deadline_ns));
    uint32_t len = hoop__get_u32_be(hdr);
    if (len == 0 || len > HOOP__STORE_FRAME_MAX)
        return lose(st, HOOP_ERR_REMOTE, "the server sent a malformed reply");
    st->in.len = 0;
    if (!hoop__buf_reserve(&st->in, len)) {
        hoop__buf_free(&st->in);
        return lose(st, HOOP_ERR_NOMEM, "out of memory for a reply");
    }
    HOOP_CHECK(recv_all(st, st->in.data, len, deadline_ns));
    st->in.len = len;
    *status = st->in.data[0];
    *rd = (hoop__rd){.p = st->in.data + 1, .left = len - 1};
    return *status == HOOP__STORE_R_GOODBYE ? on_goodbye(st, rd) : HOOP_OK;
}

/* Waits until a reply's first bytes came or deadline_ns passed (HOOP_OK: recv_reply
 * reads or judges it), asking st->interrupt after each INTERRUPT_SLICE_MS without them
 * (a server that answers at once is never interrupted): HOOP_ERR_TIMEOUT when it asks to
 * stop waiting (the reply is then owed). */
static hoop_status await_reply(hoop_store *st, int64_t deadline_ns)
{
    if (st->interrupt == NULL) return HOOP_OK;
    for (;;) {
        int64_t until = hoop__deadline_ns(INTERRUPT_SLICE_MS);
        if (wait_fd(st->fd, POLLIN, until < deadline_ns ? until : deadline_ns) != 0 ||
            hoop__now_ns() >= deadline_ns)
            return HOOP_OK;
        if (st->interrupt(st->interrupt_arg))
            return HOOP_ERROR(HOOP_ERR_TIMEOUT,
                              "%s: stopped waiting for %s's reply (interrupted; the reply is "
                              "still owed)",
                              st->label, st->owner[0] ? st->owner : "the server");
    }
}

/* Reads and drops the reply still owed (hoop__store_wait_send's, or an interrupted
 * call's), waiting for it until it is overdue: a request sent before it would read the
 * wrong reply. A GOODBYE or a loss there fails the call that wanted the connection, and
 * so does the interrupt (the reply stays owed). */
static hoop_status settle(hoop_store *st)
{
    if (!st->owed) return HOOP_OK;
    HOOP_CHECK(await_reply(st, st->owed_deadline_ns));
    st->owed = 0;
    uint8_t status;
    hoop__rd rd;
    return recv_reply(st, st->owed_deadline_ns, &status, &rd);
}

/* One request and its reply: settles an owed reply, sends st->out, reads the answer. */
static hoop_status rpc(hoop_store *st, int64_t deadline_ns, uint8_t *status, hoop__rd *rd)
{
    if (st->posting) { /* a SET or COMPARE_SET goes out as it is; nothing else can be done
                        * unanswered */
        int set = st->out.len > 4 && (st->out.data[4] == HOOP__STORE_SET ||
                                      st->out.data[4] == HOOP__STORE_COMPARE_SET);
        if (!set) {
            st->out.len = 0;
            return HOOP_ERROR(HOOP_ERR_REMOTE,
                              "%s: %s has stopped answering (requests are only posted now)",
                              st->label, st->owner[0] ? st->owner : "the server");
        }
        HOOP_CHECK(send_request(st, hoop__deadline_ns(POST_MS)));
        *status = HOOP__STORE_R_OK;
        *rd = (hoop__rd){.p = NULL, .left = 0};
        return HOOP_OK;
    }
    hoop_status s = settle(st);
    if (s != HOOP_OK) {
        st->out.len = 0;
        return s;
    }
    HOOP_CHECK(send_request(st, deadline_ns));
    if ((s = await_reply(st, deadline_ns)) != HOOP_OK) {
        st->owed = 1; /* read and dropped by the next call (settle) */
        st->owed_wait = 0;
        st->owed_deadline_ns = deadline_ns;
        return s;
    }
    return recv_reply(st, deadline_ns, status, rd);
}

/* A reply whose payload does not parse means the peer is not our server. */
static hoop_status bad_reply(hoop_store *st)
{
    return lose(st, HOOP_ERR_REMOTE, "the server sent a malformed reply");
}

/* Maps a non-OK, non-TIMEOUT reply to a status with the server's reason. */
static hoop_status reply_error(hoop_store *st, uint8_t status, hoop__rd *rd, const char *what)
{
    size_t n;
    const uint8_t *text = hoop__get_str(rd, 200, &n);
    if (status != HOOP__STORE_R_INVALID || rd->bad) return bad_reply(st);
    return HOOP_ERROR(HOOP_ERR_INVALID, "store %s: %s: %.*s", st->name, what, (int)n,
                      (const char *)text);
}

// ----- connecting ---------------------------------------------------------------------------

/* One non-blocking connect to a; returns the fd, or -1 with errno set (a connection to
 * itself counts as refused). */
static int connect_one(const struct addrinfo *a, int64_t deadline_ns)
{
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd == -1) return -1;
    if (hoop__store_sock_setup(fd) != HOOP_OK) goto fail;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) goto connected;
    if (errno != EINPROGRESS) goto fail;
    int rc = wait_fd(fd, POLLOUT, deadline_ns);
    if (rc <= 0) {
        errno = rc == 0 ? ETIMEDOUT : errno;
        goto fail;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1) goto fail;
    if (err != 0) {
        errno = err;
        goto fail;
    }
connected:
    if (!hoop__store_self_connected(fd)) return fd;
    errno = ECONNREFUSED;
fail:;
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
}

// ----- the first reply: a hoop frame, or another protocol ----------------------------

/* Reads what else arrives within 300 ms (or until the deadline, EOF or cap bytes). */
static size_t read_more(int fd, uint8_t *buf, size_t cap, int64_t deadline_ns)
{
    int64_t soon = hoop__now_ns() + 300 * 1000000LL;
    int64_t until = deadline_ns < soon ? deadline_ns : soon;
    size_t got = 0;
    while (got < cap) {
        ssize_t k = recv(fd, buf + got, cap - got, 0);
        if (k > 0) {
            got += (size_t)k;
        } else if (k == -1 && errno == EINTR) {
            continue;
        } else if (k == -1 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(fd, POLLIN, until) <= 0) break;
        } else {
            break; /* EOF or reset: what came is all there is */
        }
    }
    return got;
}

/* The peer answered with bytes that are no hoop frame: names what it speaks. Final. */
static hoop_status foreign(hoop_store *st, const uint8_t *p, size_t n)
{
    char what[300], why[512];
    hoop__store_describe(p, n, what, sizeof(what));
    snprintf(why, sizeof(why), "this is not a hoop store: the peer %s", what);
    lose(st, HOOP_ERR_INVALID, why);
    if (st->rendezvous)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s = %s is not %s's hoop store: the peer %s; another service listens "
                          "there (check MASTER_ADDR and MASTER_PORT)",
                          st->place, st->name, st->owner, what);
    return HOOP_ERROR(HOOP_ERR_INVALID, "store %s: %s", st->name, why);
}

/* A hoop server's answer to HELLO is small (OK, REFUSED or GOODBYE): its length is
 * below 4096, so it starts with two zero bytes. Judges the first got (< 4) bytes. */
static int plausible_start(const uint8_t *p, size_t got)
{
    return (got < 1 || p[0] == 0) && (got < 2 || p[1] == 0) && (got < 3 || p[2] <= 0x10);
}

/* Reads the reply to HELLO. Unlike rpc(), a reply that is not a plausible hoop frame
 * ends the connection attempt for good (*final), naming the protocol it looks like. */
static hoop_status first_reply(hoop_store *st, int64_t deadline_ns, uint8_t *status, hoop__rd *rd,
                               int *final)
{
    uint8_t head[64];
    size_t got = 0;
    while (got < 4 && plausible_start(head, got)) {
        ssize_t k = recv(st->fd, head + got, 4 - got, 0);
        if (k > 0) {
            got += (size_t)k;
            continue;
        }
        if (k == -1 && errno == EINTR) continue;
        if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) break;
        int rc = wait_fd(st->fd, POLLIN, deadline_ns);
        if (rc == 0) return lose(st, HOOP_ERR_TIMEOUT, "no reply before the deadline");
        if (rc < 0) return lose(st, HOOP_ERR_SYSTEM, "poll failed while receiving");
    }
    char closed[320];
    if (got == 0) /* worth retrying */
        return lose(st, HOOP_ERR_REMOTE, closed_text(st, closed, sizeof(closed)));
    uint32_t len = got == 4 ? hoop__get_u32_be(head) : 0;
    if (len == 0 || len > 4096) {
        *final = 1;
        return foreign(st, head,
                       got + read_more(st->fd, head + got, sizeof(head) - got, deadline_ns));
    }
    st->in.len = 0;
    if (!hoop__buf_reserve(&st->in, len)) return lose(st, HOOP_ERR_NOMEM, "out of memory");
    HOOP_CHECK(recv_all(st, st->in.data, len, deadline_ns));
    st->in.len = len;
    *status = st->in.data[0];
    *rd = (hoop__rd){.p = st->in.data + 1, .left = len - 1};
    if (*status == HOOP__STORE_R_GOODBYE) {
        *final = 1;
        return on_goodbye(st, rd);
    }
    if (*status == HOOP__STORE_R_OK || *status == HOOP__STORE_R_REFUSED) return HOOP_OK;
    *final = 1;
    memcpy(head + 4, st->in.data, len < sizeof(head) - 4 ? len : sizeof(head) - 4);
    return foreign(st, head, 4 + (len < sizeof(head) - 4 ? len : sizeof(head) - 4));
}

/* Sends the preface and HELLO and reads the verdict; *final is set when trying again
 * cannot help (refused, another protocol, the server's GOODBYE), as opposed to going
 * away before answering (worth retrying). */
static hoop_status handshake(hoop_store *st, int64_t deadline_ns, int *final)
{
    hoop__put_bytes(&st->out, HOOP__STORE_PREFACE, HOOP__STORE_PREFACE_LEN);
    size_t at = hoop__frame_begin(&st->out, HOOP__STORE_HELLO);
    hoop__put_u32(&st->out, HOOP__STORE_MAGIC);
    hoop__put_bytes(&st->out, (const uint8_t[]){0, HOOP__STORE_VERSION}, 2);
    hoop__put_u32(&st->out, (uint32_t)st->rank);
    hoop__put_u32(&st->out, (uint32_t)st->world_size);
    hoop__put_str(&st->out, st->token, strlen(st->token));
    hoop__frame_end(&st->out, at);
    HOOP_CHECK(send_request(st, deadline_ns));
    uint8_t status = 0;
    hoop__rd rd = {0};
    HOOP_CHECK(first_reply(st, deadline_ns, &status, &rd, final));
    if (status == HOOP__STORE_R_OK && rd.left == 0) return HOOP_OK;
    size_t n;
    const uint8_t *text = hoop__get_str(&rd, HOOP__STORE_REASON_MAX, &n);
    *final = 1;
    if (status != HOOP__STORE_R_REFUSED || rd.bad || rd.left)
        return foreign(st, st->in.data, st->in.len);
    char why[HOOP__STORE_REASON_MAX + 64];
    last_refused = 1;
    snprintf(why, sizeof(why), "the server refused this client: %.*s", (int)n, (const char *)text);
    return lose(st, HOOP_ERR_REMOTE, why);
}

/* Sleeps for the backoff step (with jitter, so a crowd of ranks spreads out), never
 * past the deadline; doubles the step. */
static void backoff(int *step_ms, unsigned *seed, int64_t deadline_ns)
{
    *seed = *seed * 1103515245u + 12345u;
    int ms = *step_ms * (75 + (int)((*seed >> 16) % 50)) / 100;
    int left = hoop__ms_left(deadline_ns);
    if (ms > left) ms = left;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
    *step_ms = *step_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : *step_ms * 2;
}

/* Tries every address once, then the handshake; returns HOOP_OK, a final error, or
 * HOOP_ERR_TIMEOUT meaning "try again" with the reason in last. *silent says whether the
 * last attempt reached a listener that then did not answer within the deadline. */
static hoop_status try_connect(hoop_store *st, const struct addrinfo *res, int64_t deadline_ns,
                               char *last, size_t cap, int *silent, int *unroutable, int *refused)
{
    for (const struct addrinfo *a = res; a; a = a->ai_next) {
        st->fd = connect_one(a, deadline_ns);
        *silent = 0;
        *unroutable = 0;
        *refused = st->fd < 0 && errno == ECONNREFUSED;
        if (st->fd < 0) {
            *unroutable = errno == ENETUNREACH || errno == EHOSTUNREACH;
            snprintf(last, cap, "%s", hoop__strerror(errno));
            continue;
        }
        int final = 0;
        st->lost[0] = '\0';
        hoop_status s = handshake(st, deadline_ns, &final);
        if (s == HOOP_OK || final) return s;
        *silent = s == HOOP_ERR_TIMEOUT;
        snprintf(last, cap, "%s", st->lost[0] ? st->lost : hoop_last_error());
        if (st->fd >= 0) close(st->fd);
        st->fd = -1;
        if (s != HOOP_ERR_REMOTE && s != HOOP_ERR_TIMEOUT) return s;
    }
    return HOOP_ERR_TIMEOUT;
}

/* 1 when a is the unspecified address (0.0.0.0, ::): a connect() to it reaches this
 * machine (Linux takes it as the local host), as a loopback address does. */
static int is_unspecified(const struct addrinfo *a)
{
    if (a->ai_family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)a->ai_addr)->sin_addr.s_addr ==
               htonl(INADDR_ANY);
    if (a->ai_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(
            &((const struct sockaddr_in6 *)(const void *)a->ai_addr)->sin6_addr);
    return 0;
}

/* 1 when every address of res is a loopback one, 2 when every one is unspecified (both
 * reach only this machine), else 0. */
static int all_loopback(const struct addrinfo *res)
{
    int loop = 1, unspec = 1;
    for (const struct addrinfo *a = res; a; a = a->ai_next) {
        loop &= hoop__store_is_loopback(a);
        unspec &= is_unspecified(a);
    }
    return res == NULL ? 0 : loop ? 1 : unspec ? 2 : 0;
}

static hoop_status connect_retry(hoop_store *st, const char *host, int port)
{
    struct addrinfo *res;
    last_refused = 0;
    HOOP_CHECK(hoop__store_resolve(host, port, 0, &res));
    int64_t deadline_ns = hoop__deadline_ns(st->timeout_ms);
    int step_ms = BACKOFF_MIN_MS;
    unsigned seed = (unsigned)hoop__now_ns() ^ (unsigned)(uintptr_t)st;
    char last[sizeof(st->lost)] = "no attempt";
    int silent = 0, unroutable = 0, refused = 0;
    hoop_status s;
    for (;;) {
        /* The owner's own server answers a hello at once: one that took the connection
         * and is silent for OWN_HELLO_MS is another host's (a service that never speaks). */
        int64_t until = deadline_ns;
        if (st->serving && hoop__ms_left(deadline_ns) > OWN_HELLO_MS)
            until = hoop__deadline_ns(OWN_HELLO_MS);
        s = try_connect(st, res, until, last, sizeof(last), &silent, &unroutable, &refused);
        if (s != HOOP_ERR_TIMEOUT || hoop__ms_left(deadline_ns) == 0) break;
        if (st->serving && (refused || unroutable || silent)) { /* its own server is not there */
            char hp[300];
            freeaddrinfo(res);
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "%s serves its store on port %d of this host, but a connection "
                              "to %s (%s) %s: %s; MASTER_ADDR must name this host, where %s "
                              "runs",
                              st->owner, port, hoop__hostport(hp, sizeof(hp), host, port),
                              st->place, silent ? "was taken and never answered" : "failed",
                              silent ? "another host's service" : last, st->owner);
        }
        backoff(&step_ms, &seed, deadline_ns);
    }
    int loopback = all_loopback(res);
    freeaddrinfo(res);
    /* A rank that finds no rendezvous store must say whose it is: rank 0 may have died
     * before this rank came (the address alone does not tell a reader that). One whose
     * last attempt was taken by the listening socket but never answered found rank 0
     * alive and frozen (stopped, or its store thread stuck), not gone. No route from here
     * (ENETUNREACH, EHOSTUNREACH): whether rank 0 runs is unknown; the address or this
     * host's network is what to check. A loopback MASTER_ADDR (127.0.0.1, localhost)
     * refused is the usual mistake of a first multi-machine job: said so. */
    if (s != HOOP_ERR_TIMEOUT) return s;
    char why[700] = "";
    if (st->rendezvous && silent)
        snprintf(why, sizeof(why),
                 ": its port took the connection, but %s did not answer (stopped, or stuck?)",
                 st->owner);
    else if (st->rendezvous && unroutable)
        snprintf(why, sizeof(why),
                 ": this host has no route to that address (check "
                 "MASTER_ADDR, and this node's interfaces and routes)");
    else if (st->rendezvous)
        snprintf(why, sizeof(why), ": %s never opened its store there, or has exited", st->owner);
    if (st->rendezvous && !silent && !unroutable && loopback)
        snprintf(why + strlen(why), sizeof(why) - strlen(why),
                 " (%.255s is %s address, which reaches only this machine: when %s runs "
                 "on another machine, MASTER_ADDR must name that one)",
                 host, loopback == 2 ? "an unspecified" : "a loopback", st->owner);
    return HOOP_ERROR(HOOP_ERR_TIMEOUT,
                      "store: nobody answered at %s within %" PRId64 " ms (last: %s)%s",
                      st->rendezvous ? st->label : st->name, st->timeout_ms, last, why);
}

// ----- lifetime -----------------------------------------------------------------------------

int64_t hoop__store_timeout(const hoop_store *st, int64_t timeout_ms)
{
    int64_t t = timeout_ms >= 0 ? timeout_ms : st->timeout_ms;
    return t > HOOP__STORE_TIMEOUT_MAX_MS ? HOOP__STORE_TIMEOUT_MAX_MS : t;
}

static hoop_status check_client_config(const hoop_store_config *cfg)
{
    if (cfg == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "store: config is NULL");
    if (cfg->host == NULL || *cfg->host == '\0')
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: no host to connect to");
    if (cfg->port < 1 || cfg->port > 65535)
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: port %d is not in 1..65535", cfg->port);
    if (cfg->token && strlen(cfg->token) > HOOP__STORE_TOKEN_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: HOOP_TOKEN is longer than %d bytes",
                          HOOP__STORE_TOKEN_MAX);
    if (cfg->world_size < 0 || (cfg->world_size > 0 && cfg->rank >= cfg->world_size))
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: rank %d is not below world_size %d", cfg->rank,
                          cfg->world_size);
    return HOOP_OK;
}

const hoop__store_naming hoop__store_workers = {"rank 0", "MASTER_ADDR:MASTER_PORT", "WORLD_SIZE",
                                                0};

int hoop__store_last_refused(void)
{
    return last_refused;
}

int hoop__store_exit_code(hoop_status st)
{
    return st == HOOP_ERR_INVALID || st == HOOP_ERR_MISMATCH || st == HOOP_ERR_UNSUPPORTED ||
                   last_refused || (st == HOOP_ERR_SYSTEM && hoop__store_last_in_use())
               ? 2
               : 1;
}

static hoop_status store_init(hoop_store **out, const hoop_store_config *cfg, int rendezvous,
                              const hoop__store_naming *naming, int serving)
{
    if (out == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "store: out is NULL");
    *out = NULL;
    HOOP_CHECK(check_client_config(cfg));
    hoop_store *st;
    HOOP_CHECK(hoop__calloc(&st, 1));
    st->fd = st->stale_fd = -1;
    st->rank = cfg->rank < 0 ? -1 : cfg->rank;
    st->world_size = cfg->world_size;
    st->rendezvous = rendezvous;
    st->serving = serving;
    snprintf(st->token, sizeof(st->token), "%s", cfg->token ? cfg->token : "");
    hoop__hostport(st->name, sizeof(st->name), cfg->host, cfg->port);
    if (naming == NULL) naming = &hoop__store_workers;
    snprintf(st->owner, sizeof(st->owner), "%s", naming->owner);
    snprintf(st->place, sizeof(st->place), "%s", naming->place);
    if (rendezvous)
        snprintf(st->label, sizeof(st->label), "%s's store (%s = %s)", st->owner, st->place,
                 st->name);
    else
        snprintf(st->label, sizeof(st->label), "store %s", st->name);
    hoop_status s = HOOP_OK;
    st->timeout_ms = cfg->timeout_ms;
    if (st->timeout_ms < 0) HOOP_CHECK_GOTO(hoop__env_ms("HOOP_TIMEOUT", &st->timeout_ms), s, fail);
    st->timeout_ms = hoop__store_timeout(st, st->timeout_ms);
    HOOP_CHECK_GOTO(connect_retry(st, cfg->host, cfg->port), s, fail);
    HOOP_INFO(BOOT, "store: rank %d connected to %s", st->rank, st->name);
    *out = st;
    return HOOP_OK;
fail:
    hoop_store_destroy(st);
    return s;
}

HOOP_API hoop_status hoop_store_init(hoop_store **out, const hoop_store_config *cfg)
{
    return store_init(out, cfg, 0, NULL, 0);
}

hoop_status hoop__store_init_rendezvous(hoop_store **out, const hoop_store_config *cfg,
                                        const hoop__store_naming *naming, int serving)
{
    return store_init(out, cfg, 1, naming, serving);
}

/* Says CLOSE and waits up to CLOSE_WAIT_MS for any answer (its OK, or a GOODBYE queued
 * before it), so that the server has let go of this rank before the socket closes: a
 * hang-up without it marks the rank lost (store_proto.h, "A rank lost"). Quiet: the
 * thread's message (often the reason the caller is giving up) is left as it is. */
static void say_close(hoop_store *st)
{
    static const uint8_t frame[5] = {0, 0, 0, 1, HOOP__STORE_CLOSE};
    int64_t deadline = hoop__deadline_ns(CLOSE_WAIT_MS);
    size_t off = 0;
    while (off < sizeof(frame)) {
        ssize_t k = send(st->fd, frame + off, sizeof(frame) - off, MSG_NOSIGNAL);
        if (k > 0)
            off += (size_t)k;
        else if (!(k == -1 && errno == EINTR) &&
                 !(k == -1 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
                   wait_fd(st->fd, POLLOUT, deadline) > 0))
            return;
    }
    if (st->posting) return; /* the server reads it when it answers again */
    uint8_t b[64];
    for (;;) {
        ssize_t k = recv(st->fd, b, sizeof(b), 0);
        if (k >= 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) return;
        if (errno == EAGAIN && wait_fd(st->fd, POLLIN, deadline) <= 0) return;
    }
}

/* The owned server (rank 0's) tells the others why it stops: the failure noted here. */
HOOP_API hoop_status hoop_store_destroy(hoop_store *st)
{
    if (st == NULL) return HOOP_OK;
    hoop_status s = HOOP_OK;
    if (st->fd >= 0) say_close(st);
    if (st->fd >= 0) close(st->fd);
    if (st->stale_fd >= 0) close(st->stale_fd);
    hoop__buf_free(&st->out);
    hoop__buf_free(&st->in);
    free(st->bye_missing);
    const char *why = st->failure[0] ? st->failure : "rank 0 is shutting its store down";
    HOOP_CHECK_KEEP(hoop__store_server_close(st->server, st->fail_code, why), s);
    free(st);
    return s;
}

int hoop__store_abort(hoop_store *st, hoop_status code, const char *why)
{
    int told = 0;
    if (st == NULL) return 0;
    char keep[1024];
    snprintf(keep, sizeof(keep), "%s", hoop_last_error());
    size_t n = why ? strlen(why) : 0;
    if (n > HOOP__STORE_REASON_MAX) n = HOOP__STORE_REASON_MAX;
    uint8_t status;
    hoop__rd rd;
    /* Rank 0's own server needs no ABORT: its GOODBYE carries the note below. */
    if (st->server == NULL && usable(st) == HOOP_OK && code != HOOP_OK) {
        size_t at = hoop__frame_begin(&st->out, HOOP__STORE_ABORT);
        hoop__put_u8(&st->out, (uint8_t)code);
        hoop__put_str(&st->out, why ? why : "", n);
        hoop__frame_end(&st->out, at);
        /* Answered: the server let go of this rank and ignores what follows (no CLOSE). */
        if (rpc(st, hoop__deadline_ns(CLOSE_WAIT_MS), &status, &rd) == HOOP_OK &&
            status == HOOP__STORE_R_OK) {
            (void)lose(st, code, "this rank told the store that it cannot start");
            told = 1;
        }
    }
    hoop__store_note_failure(st, code, why); /* rank 0: its server's GOODBYE to latecomers */
    hoop__store_tell_latecomers(st, 0);
    (void)HOOP_ERROR(code, "%s", keep);
    return told;
}

void hoop__store_note_failure(hoop_store *st, hoop_status code, const char *msg)
{
    if (st == NULL || code == HOOP_OK || st->failure[0]) return;
    st->fail_code = code;
    snprintf(st->failure, sizeof(st->failure), "%s", msg && *msg ? msg : hoop_status_str(code));
}

HOOP_API int hoop_store_rank(const hoop_store *st)
{
    return st ? st->rank : -1;
}

HOOP_API int hoop_store_world_size(const hoop_store *st)
{
    return st ? st->world_size : 0;
}

int hoop__store_fd(const hoop_store *st)
{
    return st->fd;
}

void hoop__store_set_reply_grace(hoop_store *st, int64_t ms)
{
    st->reply_grace_ms = ms;
}

void hoop__store_linger(hoop_store *st, int64_t ms)
{
    if (st == NULL || st->server == NULL) return;
    int64_t deadline = hoop__deadline_ns(ms);
    while (hoop__store_server_nclients(st->server) > (st->fd >= 0 ? 1 : 0) &&
           hoop__now_ns() < deadline)
        poll(NULL, 0, 10);
}

void hoop__store_tell_latecomers(hoop_store *st, int ms)
{
    if (st) hoop__store_server_tell_latecomers(st->server, ms);
}

void hoop__store_owner_said(hoop_store *st)
{
    if (st) hoop__store_server_owner_said(st->server);
}

int hoop__store_goodbye_code(const hoop_store *st)
{
    return st && st->said_goodbye ? (int)st->bye_code : -1;
}

void hoop__store_abandon(hoop_store *st)
{
    if (st == NULL) return;
    if (st->stale_fd >= 0) close(st->stale_fd);
    st->stale_fd = -1;
    if (st->fd < 0) return;
    close(st->fd); /* no CLOSE: the server marks this rank lost ("A rank lost") */
    st->fd = -1;
    st->owed = 0;
    snprintf(st->lost, sizeof(st->lost), "abandoned by its owner");
}

/* Takes ownership of srv (destroyed with st). */
void hoop__store_own_server(hoop_store *st, hoop_store_server *srv)
{
    st->server = srv;
}

hoop_status hoop__store_fault(const hoop_store *st, char *buf, size_t cap)
{
    return st ? hoop__store_server_fault(st->server, buf, cap) : HOOP_OK;
}

int hoop__store_stranger(const hoop_store *st, char *buf, size_t cap)
{
    return st && hoop__store_server_stranger(st->server, buf, cap);
}

// ----- operations -----------------------------------------------------------------------------

static hoop_status check_key(const char *key)
{
    if (key == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "store: key is NULL");
    size_t n = strlen(key);
    if (n == 0 || n > HOOP_STORE_KEY_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: key '%.40s%s' has %zu bytes, not 1..%d", key,
                          n > 40 ? "..." : "", n, HOOP_STORE_KEY_MAX);
    return HOOP_OK;
}

static int64_t call_deadline(const hoop_store *st)
{
    return hoop__deadline_ns(st->timeout_ms);
}

HOOP_API hoop_status hoop_store_set(hoop_store *st, const char *key, const void *value,
                                    size_t bytes)
{
    HOOP_CHECK(usable(st));
    HOOP_CHECK(check_key(key));
    if (bytes > HOOP_STORE_VALUE_MAX || (value == NULL && bytes > 0))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "store: value for key '%s' is NULL or %zu bytes (max %u)", key, bytes,
                          HOOP_STORE_VALUE_MAX);
    size_t at = hoop__frame_begin(&st->out, HOOP__STORE_SET);
    hoop__put_str(&st->out, key, strlen(key));
    hoop__put_str(&st->out, value, bytes);
    hoop__frame_end(&st->out, at);
    uint8_t status;
    hoop__rd rd;
    HOOP_CHECK(rpc(st, call_deadline(st), &status, &rd));
    if (status != HOOP__STORE_R_OK) return reply_error(st, status, &rd, "set");
    return rd.left == 0 ? HOOP_OK : bad_reply(st);
}

HOOP_API hoop_status hoop_store_add(hoop_store *st, const char *key, int64_t delta, int64_t *result)
{
    HOOP_CHECK(usable(st));
    HOOP_CHECK(check_key(key));
    size_t at = hoop__frame_begin(&st->out, HOOP__STORE_ADD);
    hoop__put_str(&st->out, key, strlen(key));
    hoop__put_i64(&st->out, delta);
    hoop__frame_end(&st->out, at);
    uint8_t status;
    hoop__rd rd;
    HOOP_CHECK(rpc(st, call_deadline(st), &status, &rd));
    if (status != HOOP__STORE_R_OK) {
        char what[80];
        snprintf(what, sizeof(what), "add to key '%.40s'", key);
        return reply_error(st, status, &rd, what);
    }
    int64_t v = hoop__get_i64(&rd);
    if (rd.bad || rd.left) return bad_reply(st);
    if (result) *result = v;
    return HOOP_OK;
}

HOOP_API hoop_status hoop_store_compare_set(hoop_store *st, const char *key, const void *expected,
                                            size_t expected_bytes, const void *desired,
                                            size_t desired_bytes, int *swapped, void *buf,
                                            size_t cap, size_t *bytes)
{
    if (swapped) *swapped = 0;
    if (bytes) *bytes = 0;
    HOOP_CHECK(usable(st));
    HOOP_CHECK(check_key(key));
    if (expected == NULL && expected_bytes > 0)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "store: compare_set of key '%s': expected is NULL (\"the key is "
                          "absent\") but expected_bytes is %zu",
                          key, expected_bytes);
    if (desired == NULL && desired_bytes > 0)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "store: compare_set of key '%s': desired is NULL (%zu bytes)", key,
                          desired_bytes);
    if (buf == NULL && cap > 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: compare_set of key '%s': buf is NULL (cap %zu)",
                          key, cap);
    if (expected_bytes > HOOP_STORE_VALUE_MAX ||
        desired_bytes > HOOP_STORE_VALUE_MAX - expected_bytes)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "store: compare_set of key '%s': expected (%zu bytes) + desired (%zu "
                          "bytes) exceed HOOP_STORE_VALUE_MAX (%u bytes)",
                          key, expected_bytes, desired_bytes, HOOP_STORE_VALUE_MAX);
    size_t at = hoop__frame_begin(&st->out, HOOP__STORE_COMPARE_SET);
    hoop__put_u8(&st->out, expected == NULL);
    hoop__put_str(&st->out, key, strlen(key));
    hoop__put_str(&st->out, expected, expected ? expected_bytes : 0);
    hoop__put_str(&st->out, desired, desired_bytes);
    hoop__frame_end(&st->out, at);
    uint8_t status;
    hoop__rd rd;
    HOOP_CHECK(rpc(st, call_deadline(st), &status, &rd));
    if (st->posting) return HOOP_OK; /* posted: node 0's store applies it, unanswered */
    if (status != HOOP__STORE_R_OK) {
        char what[80];
        snprintf(what, sizeof(what), "compare_set of key '%.40s'", key);
        return reply_error(st, status, &rd, what);
    }
    uint8_t did = hoop__get_u8(&rd);
    (void)hoop__get_u8(&rd); /* present: an absent key reads as 0 bytes */
    size_t n = 0;
    const uint8_t *v = hoop__get_str(&rd, HOOP_STORE_VALUE_MAX, &n);
    if (rd.bad || rd.left || did > 1) return bad_reply(st);
    if (swapped) *swapped = did;
    if (bytes) *bytes = n;
    if (n > 0 && cap > 0) memcpy(buf, v, n < cap ? n : cap);
    if (buf && n > cap)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "store: value of key '%s' has %zu bytes, more than cap %zu", key, n, cap);
    return HOOP_OK;
}

void hoop__store_wait_result_free(hoop__store_wait_result *res)
{
    free(res->values);
    free(res->value_bytes);
    free(res->missing);
    *res = (hoop__store_wait_result){0};
}

/* Decodes a WAIT reply (OK with or without values, TIMEOUT, or LOST) into res. */
static hoop_status decode_wait(hoop_store *st, uint8_t status, hoop__rd *rd, uint32_t nkeys,
                               unsigned flags, hoop__store_wait_result *res)
{
    if (status == HOOP__STORE_R_LOST && (flags & HOOP__STORE_WAIT_LOST)) {
        res->lost_rank = (int)(int32_t)hoop__get_u32(rd);
        res->lost_why = hoop__get_str(rd, HOOP__STORE_REASON_MAX, &res->lost_why_bytes);
        res->rank_lost = 1;
    }
    if (status == HOOP__STORE_R_TIMEOUT || res->rank_lost) {
        uint32_t n = hoop__get_u32(rd);
        if (rd->bad || n == 0 || n > nkeys || rd->left != 4ull * n) return bad_reply(st);
        HOOP_CHECK(hoop__calloc(&res->missing, n));
        res->nmissing = n;
        for (uint32_t i = 0; i < n; i++) { /* strictly increasing indices into keys */
            res->missing[i] = hoop__get_u32(rd);
            if (res->missing[i] >= nkeys || (i > 0 && res->missing[i] <= res->missing[i - 1]))
                return bad_reply(st);
        }
        return res->rank_lost ? HOOP_ERR_REMOTE : HOOP_ERR_TIMEOUT;
    }
    if (status != HOOP__STORE_R_OK) return reply_error(st, status, rd, "wait");
    if (flags & HOOP__STORE_WAIT_VALUES) {
        HOOP_CHECK(hoop__calloc(&res->values, nkeys));
        HOOP_CHECK(hoop__calloc(&res->value_bytes, nkeys));
        for (uint32_t i = 0; i < nkeys; i++)
            res->values[i] = hoop__get_str(rd, HOOP_STORE_VALUE_MAX, &res->value_bytes[i]);
    }
    return rd->bad || rd->left ? bad_reply(st) : HOOP_OK;
}

/* Builds a WAIT for keys in st->out and returns how long its reply may take (the
 * server answers at timeout_ms; the grace covers the trip back). */
static hoop_status build_wait(hoop_store *st, const char *const *keys, int nkeys, unsigned flags,
                              int64_t timeout_ms, int64_t *reply_ms)
{
    if (keys == NULL || nkeys < 1 || (uint32_t)nkeys > HOOP__STORE_WAIT_KEYS_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: wait needs 1..%u keys, got %d",
                          HOOP__STORE_WAIT_KEYS_MAX, nkeys);
    for (int i = 0; i < nkeys; i++) HOOP_CHECK(check_key(keys[i]));
    size_t at = hoop__frame_begin(&st->out, HOOP__STORE_WAIT);
    hoop__put_u8(&st->out, (uint8_t)(flags & (HOOP__STORE_WAIT_VALUES | HOOP__STORE_WAIT_LOST)));
    hoop__put_i64(&st->out, timeout_ms);
    hoop__put_u32(&st->out, (uint32_t)nkeys);
    for (int i = 0; i < nkeys; i++) hoop__put_str(&st->out, keys[i], strlen(keys[i]));
    hoop__frame_end(&st->out, at);
    if (!st->out.oom && st->out.len > HOOP__STORE_FRAME_MAX) {
        st->out.len = 0;
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: %d keys do not fit in one request", nkeys);
    }
    *reply_ms = timeout_ms +
                (st->reply_grace_ms > WAIT_GRACE_MS ? st->reply_grace_ms : WAIT_GRACE_MS) +
                timeout_ms / 10;
    return HOOP_OK;
}

/* Turns a WAIT's outcome (s: the exchange's status; status, rd: the reply when s is OK)
 * into res and the call's status. */
static hoop_status finish_wait(hoop_store *st, hoop_status s, uint8_t status, hoop__rd *rd,
                               uint32_t nkeys, unsigned flags, hoop__store_wait_result *res)
{
    if (s != HOOP_OK) { /* the connection is gone; after a GOODBYE: the keys missing then */
        res->lost = 1;
        res->goodbye = st->said_goodbye;
        res->missing = st->bye_missing;
        res->nmissing = st->bye_nmissing;
        st->bye_missing = NULL;
        st->bye_nmissing = 0;
        for (uint32_t i = 0; i < res->nmissing; i++) /* indices must be ours, increasing */
            if (res->missing[i] >= nkeys || (i && res->missing[i] <= res->missing[i - 1]))
                res->nmissing = i;
        return s;
    }
    s = decode_wait(st, status, rd, nkeys, flags, res);
    if (s != HOOP_OK && s != HOOP_ERR_TIMEOUT && !res->rank_lost) hoop__store_wait_result_free(res);
    return s;
}

hoop_status hoop__store_wait_keys(hoop_store *st, const char *const *keys, int nkeys,
                                  unsigned flags, int64_t timeout_ms, hoop__store_wait_result *res)
{
    *res = (hoop__store_wait_result){0};
    HOOP_CHECK(usable(st));
    int64_t reply_ms;
    HOOP_CHECK(build_wait(st, keys, nkeys, flags, timeout_ms, &reply_ms));
    uint8_t status = 0;
    hoop__rd rd = {0};
    hoop_status s = rpc(st, hoop__deadline_ns(reply_ms), &status, &rd);
    return finish_wait(st, s, status, &rd, (uint32_t)nkeys, flags, res);
}

hoop_status hoop__store_wait_send(hoop_store *st, const char *const *keys, int nkeys,
                                  unsigned flags, int64_t timeout_ms)
{
    HOOP_CHECK(usable(st));
    if (st->posting)
        return HOOP_ERROR(HOOP_ERR_REMOTE, "%s: requests are only posted now", st->label);
    if (st->owed)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: a WAIT's reply is still owed", st->label);
    int64_t reply_ms;
    HOOP_CHECK(build_wait(st, keys, nkeys, flags, timeout_ms, &reply_ms));
    int64_t deadline = hoop__deadline_ns(reply_ms);
    HOOP_CHECK(send_request(st, deadline));
    st->owed = 1;
    st->owed_wait = 1;
    st->owed_nkeys = (uint32_t)nkeys;
    st->owed_flags = flags;
    st->owed_deadline_ns = deadline;
    return HOOP_OK;
}

/* Waits up to wait_ms (< 0: 0) for the owed reply on a live connection: 1 when it came
 * or is overdue (to be read now), 0 when not yet. */
static int owed_ready(hoop_store *st, int64_t wait_ms)
{
    int64_t until = hoop__deadline_ns(wait_ms < 0 ? 0 : wait_ms);
    if (until > st->owed_deadline_ns) until = st->owed_deadline_ns;
    return wait_fd(st->fd, POLLIN, until) != 0 || hoop__now_ns() >= st->owed_deadline_ns;
}

hoop_status hoop__store_wait_poll(hoop_store *st, int64_t wait_ms, int *done,
                                  hoop__store_wait_result *res)
{
    *res = (hoop__store_wait_result){0};
    *done = 0;
    if (st && st->posting)
        return HOOP_ERROR(HOOP_ERR_REMOTE, "%s: requests are only posted now", st->label);
    if (st == NULL || ((!st->owed || !st->owed_wait) && st->fd >= 0))
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: no WAIT is owed a reply");
    if (st->fd >= 0 && !owed_ready(st, wait_ms)) return HOOP_OK; /* not yet */
    *done = 1;
    uint8_t status = 0;
    hoop__rd rd = {0};
    hoop_status s = usable(st); /* lost meanwhile (by a call that settled it) */
    if (s == HOOP_OK) {
        st->owed = 0;
        s = recv_reply(st, st->owed_deadline_ns, &status, &rd);
    }
    return finish_wait(st, s, status, &rd, st->owed_nkeys, st->owed_flags, res);
}

int hoop__store_owed(const hoop_store *st)
{
    return st && st->owed && st->fd >= 0 && !st->posting;
}

void hoop__store_post_only(hoop_store *st)
{
    if (st == NULL) return;
    st->posting = 1;
    if (st->fd < 0 && st->stale_fd >= 0) { /* lost to a stall: its socket still takes notes */
        st->fd = st->stale_fd;
        st->stale_fd = -1;
        st->owed = 0;
    }
}

int hoop__store_posting(const hoop_store *st)
{
    return st && st->posting;
}

int hoop__store_stalled(const hoop_store *st)
{
    return st && st->fd < 0 && st->stale_fd >= 0;
}

hoop_status hoop__store_settle_within(hoop_store *st, int64_t wait_ms, int *done)
{
    *done = 1;
    if (!hoop__store_owed(st)) return HOOP_OK;
    if (!owed_ready(st, wait_ms)) {
        *done = 0; /* not yet */
        return HOOP_OK;
    }
    int (*interrupt)(void *) = st->interrupt; /* the reply is there, or overdue: read it */
    st->interrupt = NULL;
    hoop_status s = settle(st);
    st->interrupt = interrupt;
    return s;
}

void hoop__store_set_interrupt(hoop_store *st, int (*interrupt)(void *arg), void *arg)
{
    st->interrupt = interrupt;
    st->interrupt_arg = arg;
}

/* A probe's WAIT outcome (s, res) as hoop__store_probe words it; frees res. */
static hoop_status probe_verdict(hoop_store *st, hoop_status s, hoop__store_wait_result *res,
                                 int *rank, int *found, char *why, size_t cap)
{
    if (s == HOOP_OK) { /* the key exists: its value is the reason */
        *found = 1;
        snprintf(why, cap, "%.*s", (int)res->value_bytes[0], (const char *)res->values[0]);
    } else if (res->rank_lost) {
        *rank = res->lost_rank;
        snprintf(why, cap, "%.*s", (int)res->lost_why_bytes, (const char *)res->lost_why);
        s = HOOP_OK;
    } else if (s == HOOP_ERR_TIMEOUT && !res->lost) {
        s = HOOP_OK; /* the key is missing, as it should be: nobody lost */
    } else if (res->goodbye && st->bye_code == 0) {
        s = HOOP_OK; /* the owner closed its store without a failure: nothing to report */
    }
    hoop__store_wait_result_free(res);
    return s;
}

#define PROBE_FLAGS (HOOP__STORE_WAIT_LOST | HOOP__STORE_WAIT_VALUES)

hoop_status hoop__store_probe(hoop_store *st, const char *key, int *rank, int *found, char *why,
                              size_t cap)
{
    *rank = -1;
    *found = 0;
    if (cap) why[0] = '\0';
    if (st->fd < 0) return HOOP_OK; /* gone before: the call that lost it said why */
    if (!key) key = HOOP__STORE_PROBE_KEY;
    hoop__store_wait_result res;
    hoop_status s = hoop__store_wait_keys(st, &key, 1, PROBE_FLAGS, 0, &res);
    return probe_verdict(st, s, &res, rank, found, why, cap);
}

hoop_status hoop__store_probe_send(hoop_store *st, const char *key)
{
    if (st->fd < 0) return HOOP_OK; /* hoop__store_probe_poll answers at once */
    if (!key) key = HOOP__STORE_PROBE_KEY;
    return hoop__store_wait_send(st, &key, 1, PROBE_FLAGS, 0);
}

hoop_status hoop__store_probe_poll(hoop_store *st, int64_t wait_ms, int *done, int *rank,
                                   int *found, char *why, size_t cap)
{
    *rank = -1;
    *found = 0;
    *done = 1;
    if (cap) why[0] = '\0';
    if (st->fd < 0) return HOOP_OK; /* as hoop__store_probe */
    hoop__store_wait_result res;
    hoop_status s = hoop__store_wait_poll(st, wait_ms, done, &res);
    if (!*done) return s;
    return probe_verdict(st, s, &res, rank, found, why, cap);
}

HOOP_API hoop_status hoop_store_get(hoop_store *st, const char *key, void *buf, size_t cap,
                                    size_t *bytes, int64_t timeout_ms)
{
    HOOP_CHECK(usable(st));
    HOOP_CHECK(check_key(key));
    if (buf == NULL && cap > 0) return HOOP_ERROR(HOOP_ERR_INVALID, "store: get: buf is NULL");
    int64_t t = hoop__store_timeout(st, timeout_ms);
    hoop__store_wait_result res;
    hoop_status s = hoop__store_wait_keys(st, &key, 1, HOOP__STORE_WAIT_VALUES, t, &res);
    if (s == HOOP_ERR_TIMEOUT && !res.lost) {
        hoop__store_wait_result_free(&res);
        return HOOP_ERROR(HOOP_ERR_TIMEOUT, "store %s: key '%s' was not set within %" PRId64 " ms",
                          st->name, key, t);
    }
    if (s != HOOP_OK) { /* a GOODBYE may have left its missing keys in res */
        hoop__store_wait_result_free(&res);
        return s;
    }
    size_t n = res.value_bytes[0];
    if (n > 0) memcpy(buf, res.values[0], n < cap ? n : cap);
    hoop__store_wait_result_free(&res);
    if (bytes) *bytes = n;
    if (n > cap)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "store: value of key '%s' has %zu bytes, more than cap %zu", key, n, cap);
    return HOOP_OK;
}

HOOP_API hoop_status hoop_store_wait(hoop_store *st, const char *const *keys, int nkeys,
                                     int64_t timeout_ms)
{
    HOOP_CHECK(usable(st));
    int64_t t = hoop__store_timeout(st, timeout_ms);
    hoop__store_wait_result res;
    hoop_status s = hoop__store_wait_keys(st, keys, nkeys, 0, t, &res);
    if (s == HOOP_ERR_TIMEOUT && !res.lost) {
        char list[512] = "";
        size_t used = 0;
        for (uint32_t i = 0; i < res.nmissing && used + 1 < sizeof(list); i++) {
            int k = snprintf(list + used, sizeof(list) - used, "%s'%s'", i ? ", " : "",
                             keys[res.missing[i]]);
            used += k > 0 ? (size_t)k : 0;
        }
        s = HOOP_ERROR(HOOP_ERR_TIMEOUT, "store %s: %u of %d keys missing after %" PRId64 " ms: %s",
                       st->name, res.nmissing, nkeys, t, list);
    }
    hoop__store_wait_result_free(&res);
    return s;
}

hoop_status hoop__store_delete_keys(hoop_store *st, const char *const *keys, int nkeys,
                                    int *deleted)
{
    HOOP_CHECK(usable(st));
    if (keys == NULL || nkeys < 1 || (uint32_t)nkeys > HOOP__STORE_WAIT_KEYS_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: delete needs 1..%u keys, got %d",
                          HOOP__STORE_WAIT_KEYS_MAX, nkeys);
    for (int i = 0; i < nkeys; i++) HOOP_CHECK(check_key(keys[i]));
    size_t at = hoop__frame_begin(&st->out, HOOP__STORE_DELETE);
    hoop__put_u32(&st->out, (uint32_t)nkeys);
    for (int i = 0; i < nkeys; i++) hoop__put_str(&st->out, keys[i], strlen(keys[i]));
    hoop__frame_end(&st->out, at);
    uint8_t status;
    hoop__rd rd;
    HOOP_CHECK(rpc(st, call_deadline(st), &status, &rd));
    if (status != HOOP__STORE_R_OK) return reply_error(st, status, &rd, "delete");
    uint32_t n = hoop__get_u32(&rd);
    if (rd.bad || rd.left || n > (uint32_t)nkeys) return bad_reply(st);
    if (deleted) *deleted = (int)n;
    return HOOP_OK;
}

HOOP_API hoop_status hoop_store_delete(hoop_store *st, const char *key, int *deleted)
{
    return hoop__store_delete_keys(st, &key, 1, deleted);
}

HOOP_API hoop_status hoop_store_num_keys(hoop_store *st, int64_t *count)
{
    HOOP_CHECK(usable(st));
    if (count == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "store: num_keys: count is NULL");
    size_t at = hoop__frame_begin(&st->out, HOOP__STORE_NUM_KEYS);
    hoop__frame_end(&st->out, at);
    uint8_t status;
    hoop__rd rd;
    HOOP_CHECK(rpc(st, call_deadline(st), &status, &rd));
    if (status != HOOP__STORE_R_OK) return reply_error(st, status, &rd, "num_keys");
    int64_t v = hoop__get_i64(&rd);
    if (rd.bad || rd.left) return bad_reply(st);
    *count = v;
    return HOOP_OK;
}
