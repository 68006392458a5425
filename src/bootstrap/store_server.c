/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/bootstrap/store_server.c -- the rendezvous store server: one thread, one epoll
 * set, many non-blocking connections.
 *
 * Owns the listening socket, an eventfd that wakes the thread to stop, the epoll set,
 * every accepted connection (with its input and output buffers) and the key table.
 * The public functions run on the caller's thread; everything else runs on the server
 * thread, which alone touches connections and the table (so nothing there is locked).
 *
 * Each connection is a small state machine: waiting for the client's preface, then
 * unauthenticated until its HELLO carries the right token; then idle (reading
 * requests), busy (a reply still being written, or a WAIT parked until its keys exist),
 * or closing (a refusal being written). Requests are parsed from a per-connection
 * buffer, so a peer that sends a frame a byte at a time, or half a frame and then
 * nothing, never blocks anyone else. A peer that breaks the protocol (see
 * store_proto.h) is logged and closed; the others carry on.
 *
 * When the server stops, it tells every authenticated client GOODBYE (with the reason
 * its owner gave, the keys a parked WAIT still lacks, and the ranks that never
 * connected), gives the frames a moment to leave, and closes. The reason is the one
 * field the caller's thread writes while the server thread runs: it is under bye_mu.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/store_proto.h"
#include "bootstrap/store_table.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/launch.h"

#define STORE_BACKLOG 65535 /* listen(2)'s backlog: the kernel caps it at somaxconn */
#define READ_CHUNK (64u << 10)
#define SWEEP_NS (100 * 1000000LL) /* how often stalled connections are looked for */
#define MAX_EVENTS 256
#define GOODBYE_FLUSH_MS 200 /* how long a stopping server waits for GOODBYEs to leave */
#define LINGER_MS 2000       /* how long a server that lost a rank waits for ranks not seen */

typedef struct conn {
    int fd;
    int dead;      /* closed; freed at the end of the loop iteration */
    int greeted;   /* the client's preface has arrived */
    int authed;    /* HELLO accepted */
    int closing;   /* a refusal is being written; close once it is out */
    int deaf;      /* gone while being answered: its input is still served, then closed */
    int bye;       /* told GOODBYE when the server gave up: what it sends is ignored */
    int leaving;   /* sent CLOSE: its hang-up is no loss (store_proto.h, "A rank lost") */
    int rank;      /* from HELLO, for messages */
    char peer[64]; /* "ip:port" */
    uint32_t events;
    int64_t since_ns; /* accept time until authed; then start of a partial frame */
    hoop__buf in;
    size_t in_off;
    hoop__buf out;
    size_t out_off;
    int64_t out_since_ns; /* when a reply was left half-written (peer not reading) */
    /* A parked WAIT: a copy of its request and where each key sits in it. */
    int parked;
    uint8_t *wframe;
    uint32_t *koff, *klen, nkeys, kcur; /* kcur: first key not yet seen */
    int want_values;
    int want_lost; /* WAIT flag bit 1: answer LOST once a rank is lost */
    int64_t deadline_ns;
    struct conn *pprev, *pnext; /* list of parked connections */
    struct conn *prev, *next;   /* list of all connections, or the graveyard */
    int ready;                  /* on the ready list (input left to parse) */
    struct conn *rnext;
} conn;

struct hoop_store_server {
    int lfd, wakefd, epfd;
    int port;
    char name[300]; /* "host:port" for messages */
    char token[HOOP__STORE_TOKEN_MAX + 1];
    int64_t timeout_ms; /* handshake and half-sent-frame limit */
    pthread_t thread;
    int started;
    int listen_paused; /* accept ran out of fds; retried at the next sweep */
    atomic_int nclients;
    conn *all, *graveyard, *parked, *ready;
    hoop__store_table table;
    int world_size;             /* from the config (0: unknown), to name ranks never seen */
    int owner_rank;             /* from the config (-1: none): whose store this is, for messages */
    int nodes;                  /* its ranks are nodes' hoopruns (hoop__store_server_init_nodes) */
    const char *unit;           /* "rank", or "node": what messages call a client's rank */
    unsigned char *seen;        /* [world_size]: rank r said HELLO at some point */
    conn **holder;              /* [world_size]: the live connection that holds rank r, or NULL */
    int lost_rank;              /* the first rank lost (store_proto.h, "A rank lost"); -1: none */
    char lost_why[300];         /* its reason, for LOST answers */
    int stopping;               /* closing every connection: hang-ups are no losses */
    int64_t linger_until;       /* > 0: the owner gave up, ranks not seen yet are told (linger) */
    atomic_int tell_latecomers; /* linger (this many ms) after any failure, not only after a
                                 * lost rank (LINGER_MS); 0 = only then */
    atomic_int owner_said;      /* the owner printed its failure itself: no early WARN of it */
    uint8_t linger_code;
    char linger_reason[1400];
    pthread_mutex_t bye_mu; /* guards bye_code, bye_reason, fault and stranger */
    hoop_status bye_code;
    char bye_reason[1024];
    char fault[640]; /* "refused rank R (ADDR): WHY" once a job's rank was refused; else "" */
    hoop_status fault_code; /* the code the server gave up with (give_up) */
    char stranger[640];     /* the last HELLO refused for its token, for messages; else "" */
};

// ----- connection lifetime -----------------------------------------------------------

static const char *peer_name(const hoop_store_server *s, const conn *c, char *buf, size_t cap)
{
    if (c->authed && c->rank >= 0)
        snprintf(buf, cap, "%s (%s %d)", c->peer, s->unit, c->rank);
    else
        snprintf(buf, cap, "%s", c->peer);
    return buf;
}

/* Frees the arrays of a WAIT (parked or answered at once). */
static void wait_clear(conn *c)
{
    free(c->wframe);
    free(c->koff);
    free(c->klen);
    c->wframe = NULL;
    c->koff = c->klen = NULL;
    c->nkeys = c->kcur = 0;
}

static void unpark(hoop_store_server *s, conn *c)
{
    if (!c->parked) return;
    if (c->pprev)
        c->pprev->pnext = c->pnext;
    else
        s->parked = c->pnext;
    if (c->pnext) c->pnext->pprev = c->pprev;
    c->pprev = c->pnext = NULL;
    c->parked = 0;
    wait_clear(c);
}

/* Closes c now and moves it to the graveyard (freed after this loop iteration, since
 * events of the same batch may still point at it). */
static void rank_lost(hoop_store_server *s, const conn *c);

static void conn_close(hoop_store_server *s, conn *c)
{
    if (c->dead) return;
    unpark(s, c);
    int lost = 0;
    if (s->holder && c->authed && c->rank >= 0 && c->rank < s->world_size &&
        s->holder[c->rank] == c) {
        s->holder[c->rank] = NULL;
        lost = !c->leaving && !s->stopping;
    }
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->dead = 1;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->all = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = NULL;
    c->next = s->graveyard;
    s->graveyard = c;
    atomic_fetch_sub(&s->nclients, 1);
    if (lost) rank_lost(s, c); /* c stays readable in the graveyard until bury */
}

/* Logs why a misbehaving peer is dropped (WARN) and closes it. */
static void conn_drop(hoop_store_server *s, conn *c, const char *why)
{
    char who[96];
    HOOP_WARN("store %s: closing connection from %s: %s", s->name,
              peer_name(s, c, who, sizeof(who)), why);
    conn_close(s, c);
}

static void conn_free(conn *c)
{
    hoop__buf_free(&c->in);
    hoop__buf_free(&c->out);
    wait_clear(c);
    free(c);
}

static void bury(hoop_store_server *s)
{
    while (s->graveyard) {
        conn *c = s->graveyard;
        s->graveyard = c->next;
        conn_free(c);
    }
}

static int busy(const conn *c)
{
    return c->parked || c->closing || c->out.len > c->out_off;
}

/* Re-arms epoll for what c waits for: output to drain, or input when idle. Peer
 * hang-ups are always reported (EPOLLRDHUP), also while a WAIT is parked. */
static void conn_arm(hoop_store_server *s, conn *c)
{
    uint32_t ev = EPOLLRDHUP;
    if (c->out.len > c->out_off)
        ev |= EPOLLOUT;
    else if (!busy(c))
        ev |= EPOLLIN;
    if (ev == c->events || c->dead) return;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &e) == -1) {
        conn_drop(s, c, "epoll_ctl failed");
        return;
    }
    c->events = ev;
}

/* Writes what c->out holds; returns 0 when c was closed. */
static int conn_flush(hoop_store_server *s, conn *c)
{
    if (c->out.oom) {
        conn_drop(s, c, "out of memory building a reply");
        return 0;
    }
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
        } else if (n == -1 && errno == EINTR) {
            continue;
        } else if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (c->out_since_ns == 0) c->out_since_ns = hoop__now_ns();
            conn_arm(s, c);
            return !c->dead;
        } else {
            /* Gone (a reset, a broken pipe). What it sent before still counts: a client
             * may post its last SETs and leave (hoop__store_post_only); process_input
             * serves the rest of its input unanswered, then closes it. */
            HOOP_INFO(BOOT, "store %s: %s went away while being answered", s->name, c->peer);
            c->deaf = 1;
            break;
        }
    }
    if (c->deaf && (c->in.len <= c->in_off || c->parked)) {
        conn_close(s, c);
        return 0;
    }
    c->out.len = c->out_off = 0;
    c->out_since_ns = 0;
    if (c->out.cap > (1u << 20)) hoop__buf_free(&c->out);
    if (c->closing) {
        conn_close(s, c);
        return 0;
    }
    conn_arm(s, c);
    if (!c->dead && c->in.len > c->in_off && !c->ready && !busy(c)) {
        c->ready = 1; /* parsed at the end of the iteration, never from inside a reply */
        c->rnext = s->ready;
        s->ready = c;
    }
    return !c->dead;
}

// ----- replies ------------------------------------------------------------------------

static void reply_status(conn *c, uint8_t status)
{
    size_t at = hoop__frame_begin(&c->out, status);
    hoop__frame_end(&c->out, at);
}

static void reply_text(conn *c, uint8_t status, const char *text)
{
    size_t at = hoop__frame_begin(&c->out, status);
    hoop__put_str(&c->out, text, strlen(text));
    hoop__frame_end(&c->out, at);
}

static void reply_i64(conn *c, int64_t v)
{
    size_t at = hoop__frame_begin(&c->out, HOOP__STORE_R_OK);
    hoop__put_i64(&c->out, v);
    hoop__frame_end(&c->out, at);
}

// ----- WAIT: keys, parking, completion -------------------------------------------------

static const hoop__store_entry *wait_key(const hoop_store_server *s, const conn *c, uint32_t i)
{
    return hoop__store_table_find(&s->table, c->wframe + c->koff[i], c->klen[i]);
}

/* Advances c's cursor over keys that exist; returns 1 when all of them exist. Each key
 * is looked at O(1) times per set, so a barrier of n ranks costs O(n) per arrival. */
static int wait_done(const hoop_store_server *s, conn *c)
{
    while (c->kcur < c->nkeys && wait_key(s, c, c->kcur)) c->kcur++;
    if (c->kcur < c->nkeys) return 0;
    for (uint32_t i = 0; i < c->nkeys; i++) {
        if (!wait_key(s, c, i)) { /* deleted since the cursor passed it */
            c->kcur = i;
            return 0;
        }
    }
    return 1;
}

static void reply_wait_ok(hoop_store_server *s, conn *c)
{
    if (!c->want_values) {
        reply_status(c, HOOP__STORE_R_OK);
        return;
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < c->nkeys; i++) total += 4 + wait_key(s, c, i)->value_bytes;
    if (total + 1 > HOOP__STORE_FRAME_MAX) {
        reply_text(c, HOOP__STORE_R_INVALID, "the values asked for exceed one reply frame");
        return;
    }
    size_t at = hoop__frame_begin(&c->out, HOOP__STORE_R_OK);
    for (uint32_t i = 0; i < c->nkeys; i++) {
        const hoop__store_entry *e = wait_key(s, c, i);
        hoop__put_str(&c->out, e->value, e->value_bytes);
    }
    hoop__frame_end(&c->out, at);
}

static void reply_wait_timeout(hoop_store_server *s, conn *c)
{
    uint32_t missing = 0;
    for (uint32_t i = 0; i < c->nkeys; i++) missing += wait_key(s, c, i) == NULL;
    size_t at = hoop__frame_begin(&c->out, HOOP__STORE_R_TIMEOUT);
    hoop__put_u32(&c->out, missing);
    for (uint32_t i = 0; i < c->nkeys; i++)
        if (wait_key(s, c, i) == NULL) hoop__put_u32(&c->out, i);
    hoop__frame_end(&c->out, at);
}

/* LOST (store_proto.h): the first rank lost, and c's keys still missing. */
static void reply_wait_lost(hoop_store_server *s, conn *c)
{
    uint32_t missing = 0;
    for (uint32_t i = 0; i < c->nkeys; i++) missing += wait_key(s, c, i) == NULL;
    size_t at = hoop__frame_begin(&c->out, HOOP__STORE_R_LOST);
    hoop__put_u32(&c->out, (uint32_t)s->lost_rank);
    hoop__put_str(&c->out, s->lost_why, strlen(s->lost_why));
    hoop__put_u32(&c->out, missing);
    for (uint32_t i = 0; i < c->nkeys; i++)
        if (wait_key(s, c, i) == NULL) hoop__put_u32(&c->out, i);
    hoop__frame_end(&c->out, at);
}

/* Rank c->rank hung up without CLOSE (store_proto.h, "A rank lost"): remembers the first
 * such rank and answers every parked WAIT that asked to hear of it (none of them is
 * complete: a complete one was answered when its last key was set). */
static void rank_lost(hoop_store_server *s, const conn *c)
{
    HOOP_INFO(BOOT, "store %s: %s %d (%s) hung up without closing its store client", s->name,
              s->unit, c->rank, c->peer);
    if (s->lost_rank < 0) {
        s->lost_rank = c->rank;
        snprintf(s->lost_why, sizeof(s->lost_why),
                 "%s %d (%s) hung up on the store without closing it (its %s died, was killed "
                 "or lost the network)",
                 s->unit, c->rank, c->peer, s->nodes ? "hooprun" : "process");
    }
    for (conn *w = s->parked, *next; w; w = next) {
        next = w->pnext;
        if (!w->want_lost || !w->parked) continue;
        reply_wait_lost(s, w);
        unpark(s, w);
        conn_flush(s, w);
    }
}

/* Answers every parked WAIT whose keys now all exist (after a SET or ADD). */
static void notify_parked(hoop_store_server *s)
{
    conn *c = s->parked;
    while (c) {
        conn *next = c->pnext;
        if (wait_done(s, c)) {
            reply_wait_ok(s, c);
            unpark(s, c);
            conn_flush(s, c);
        }
        c = next;
    }
}

/* Answers parked WAITs whose deadline passed; returns the earliest deadline left. */
static int64_t expire_parked(hoop_store_server *s, int64_t now)
{
    int64_t next_deadline = INT64_MAX;
    conn *c = s->parked;
    while (c) {
        conn *next = c->pnext;
        if (c->deadline_ns <= now) {
            reply_wait_timeout(s, c);
            unpark(s, c);
            conn_flush(s, c);
        } else if (c->deadline_ns < next_deadline) {
            next_deadline = c->deadline_ns;
        }
        c = next;
    }
    return next_deadline;
}

// ----- request handlers ------------------------------------------------------------------
// Each parses its whole payload first and returns a reason when it is malformed (the
// connection is then dropped) or NULL when it queued a reply or parked the request.

static const char *payload_error(const hoop__rd *r)
{
    if (r->bad) return "a field runs past the end of the frame, or is too long";
    if (r->left) return "bytes left over after the payload";
    return NULL;
}

static const char *read_key(hoop__rd *r, const uint8_t **key, size_t *n)
{
    *key = hoop__get_str(r, HOOP_STORE_KEY_MAX, n);
    if (r->bad) return "a key is longer than HOOP_STORE_KEY_MAX or runs past the frame";
    if (!hoop__store_key_ok(*key, *n)) return "a key is empty or holds a NUL byte";
    return NULL;
}

static void queue_goodbye(hoop_store_server *s, conn *c, uint8_t code, const char *reason,
                          int keys);

/* The server gives up on its job (store_proto.h, "A job's rank refused at start-up"):
 * tells every authenticated client GOODBYE with the reason, and keeps it for later
 * HELLOs. Runs on the server thread. */
static void give_up(hoop_store_server *s, uint8_t code, const char *fault)
{
    char reason[sizeof(s->fault) + 8];
    pthread_mutex_lock(&s->bye_mu);
    snprintf(s->fault, sizeof(s->fault), "%s", fault);
    s->fault_code =
        code > HOOP_OK && code <= HOOP_ERR_INTERNAL ? (hoop_status)code : HOOP_ERR_REMOTE;
    pthread_mutex_unlock(&s->bye_mu);
    snprintf(reason, sizeof(reason), "it %s", fault);
    HOOP_WARN("store %s: gives up: %s; telling every client", s->name, reason);
    /* (a refused connection is not authenticated: it gets its REFUSED only; an aborting
     * one is told already) */
    for (conn *c = s->all, *next; c; c = next) {
        next = c->next;
        if (c->dead || !c->authed || c->closing || c->bye) continue;
        queue_goodbye(s, c, code, reason, 0); /* the reason names the rank at fault */
        c->bye = 1;
        conn_flush(s, c);
    }
}

/* give_up for rank's refusal by this server (why), naming its address peer. */
static void give_up_refused(hoop_store_server *s, int rank, const char *peer, const char *why)
{
    char fault[sizeof(s->fault)];
    snprintf(fault, sizeof(fault), "refused %s %d (%s): %s", s->unit, rank, peer, why);
    give_up(s, HOOP_ERR_MISMATCH, fault);
}

/* Refuses c's HELLO (rank: the rank it claims) and closes it once told. A client that
 * holds the token but differs (fatal) and claims a rank of this server's world not seen
 * before means the job cannot start: give_up. A wrong token fails nobody else: anyone who
 * can reach the port could send one (a stray process of an earlier job on the same port,
 * a stranger), so it is only remembered, for the message of the wait it leaves unfinished
 * (hoop__store_server_stranger). */
static void refuse(hoop_store_server *s, conn *c, int rank, const char *why, int fatal)
{
    reply_text(c, HOOP__STORE_R_REFUSED, why);
    if (fatal && s->seen && rank >= 0 && rank < s->world_size && !s->seen[rank] && !s->fault[0]) {
        s->seen[rank] = 1; /* it came, and has its answer: no linger waits for it */
        give_up_refused(s, rank, c->peer, why); /* which says it */
        return;
    }
    HOOP_WARN("store %s: refused connection from %s (%s %d): %s", s->name, c->peer, s->unit, rank,
              why);
    if (!fatal && !s->fault[0]) {
        pthread_mutex_lock(&s->bye_mu);
        snprintf(s->stranger, sizeof(s->stranger), "a client at %s claiming %s %d: %s", c->peer,
                 s->unit, rank, why);
        pthread_mutex_unlock(&s->bye_mu);
    }
}

/* "" when world_size (the client's, 0: not stated) agrees with the server's; else why not. */
static void world_size_check(const hoop_store_server *s, int rank, int world_size, char *why,
                             size_t cap)
{
    why[0] = '\0';
    if (s->world_size <= 0 || world_size <= 0 || world_size == s->world_size) return;
    if (s->nodes && s->owner_rank >= 0)
        snprintf(why, cap,
                 "--nnodes %d on node %d but --nnodes %d on node %d: give every node's "
                 "hooprun the same --nnodes",
                 world_size, rank, s->world_size, s->owner_rank);
    else if (s->owner_rank >= 0)
        snprintf(why, cap,
                 "WORLD_SIZE=%d on rank %d but WORLD_SIZE=%d on rank %d (with hooprun: give "
                 "every node the same --nnodes and --nproc-per-node)",
                 world_size, rank, s->world_size, s->owner_rank);
    else
        snprintf(why, cap, "world_size %d on rank %d but %d at the store", world_size, rank,
                 s->world_size);
}

/* Is c's peer gone (end of stream or an error pending), though the server has not
 * processed its hang-up yet? Peeks without consuming anything. */
static int peer_gone(const conn *c)
{
    uint8_t b;
    ssize_t n;
    do {
        n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    } while (n == -1 && errno == EINTR);
    return n == 0 || (n == -1 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* 1 when some rank of the world never connected. */
static int some_unseen(const hoop_store_server *s)
{
    for (int r = 0; s->seen && r < s->world_size; r++)
        if (!s->seen[r]) return 1;
    return 0;
}

/* Does another live connection hold rank (of this server's world) already? Then c, which
 * claims it too, is a second process started as that rank (two nodes given the same
 * --node-rank, two workers given the same RANK): the job cannot start, and waiting would
 * only end at the timeout; or one process that opened a second store client as the same
 * rank (a second hoop_comm_init_env, or one beside hoop_store_init_env: the HELLO does not
 * say which process sent it, so the message names both causes). why gets the message
 * naming both addresses. A holder whose
 * peer has already closed (its hang-up not yet processed: the rank reconnects) is closed
 * here, and c takes its place. The caller gives up on the job while some rank has not
 * come yet; once every rank has come, the job runs, and the newcomer alone is refused (a
 * stray process, or another job given the same port and token). */
static int claimed_twice(hoop_store_server *s, conn *c, int rank, char *why, size_t cap)
{
    conn *h = s->holder[rank];
    if (h == NULL || h == c || h->dead) return 0;
    if (peer_gone(h)) {
        HOOP_INFO(BOOT, "store %s: %s (%s %d) disconnected; %s takes it", s->name, h->peer, s->unit,
                  rank, c->peer);
        conn_close(s, h);
        return 0;
    }
    if (s->nodes)
        snprintf(why, cap,
                 "node %d claimed twice: by %s and %s; give each node's hooprun its own "
                 "--node-rank, 0..%d (under Slurm one hooprun per node: srun "
                 "--ntasks-per-node=1)",
                 rank, h->peer, c->peer, s->world_size - 1);
    else
        snprintf(why, cap,
                 "rank %d claimed twice: by %s and %s; check --node-rank / RANK (two processes; "
                 "under Slurm one hooprun per node: srun --ntasks-per-node=1), or open one store "
                 "per process (hoop_store_init_env once, then config.store for each comm)",
                 rank, h->peer, c->peer);
    return 1;
}

static const char *on_hello(hoop_store_server *s, conn *c, hoop__rd *r)
{
    uint32_t magic = hoop__get_u32(r);
    uint16_t version = hoop__get_u16(r);
    int32_t rank = (int32_t)hoop__get_u32(r);
    int32_t world_size = (int32_t)hoop__get_u32(r);
    size_t n;
    const uint8_t *tok = hoop__get_str(r, HOOP__STORE_TOKEN_MAX, &n);
    if (magic != HOOP__STORE_MAGIC) return "not a hoop store client (bad magic)";
    const char *err = payload_error(r);
    if (err) return err;
    c->closing = 1; /* until accepted: a refusal closes after it is written */
    if (version != HOOP__STORE_VERSION) {
        HOOP_WARN("store %s: refused %s: protocol version %u, expected %u", s->name, c->peer,
                  version, HOOP__STORE_VERSION);
        reply_text(c, HOOP__STORE_R_REFUSED, "protocol version not supported by the server");
        return NULL;
    }
    char token[HOOP__STORE_TOKEN_MAX + 1], why[sizeof(s->fault) + 64];
    memcpy(token, tok, n);
    token[n] = '\0';
    if (s->fault[0]) { /* the server thread alone writes fault: no lock to read it here */
        snprintf(why, sizeof(why), "the store gave up: it %s", s->fault);
        /* A rank of the job has its answer: the owner's linger need not wait for it. */
        if (s->seen && rank >= 0 && rank < s->world_size && !memchr(tok, 0, n) &&
            hoop__store_token_eq(token, s->token))
            s->seen[rank] = 1;
        refuse(s, c, (int)rank, why, 0);
        return NULL;
    }
    if (memchr(tok, 0, n) || !hoop__store_token_eq(token, s->token)) {
        refuse(s, c, (int)rank,
               "wrong or missing HOOP_TOKEN (or a rank of another job using the same port)", 0);
        return NULL;
    }
    world_size_check(s, (int)rank, (int)world_size, why, sizeof(why));
    if (why[0]) {
        refuse(s, c, (int)rank, why, 1);
        return NULL;
    }
    int in_world = s->seen && rank >= 0 && rank < s->world_size;
    if (s->linger_until) { /* the owner gave up: this latecomer hears why, then goes */
        if (in_world) s->seen[rank] = 1;
        HOOP_INFO(BOOT, "store %s: told %s (%s %d), who came after its owner gave up, why", s->name,
                  c->peer, s->unit, (int)rank);
        queue_goodbye(s, c, s->linger_code, s->linger_reason, 1);
        return NULL;
    }
    if (in_world && claimed_twice(s, c, (int)rank, why, sizeof(why))) {
        if (some_unseen(s)) { /* the job cannot start: tell everyone */
            reply_text(c, HOOP__STORE_R_REFUSED, why);
            give_up_refused(s, (int)rank, c->peer, why);
        } else { /* every rank came: the job runs; the newcomer is the stray */
            refuse(s, c, (int)rank, why, 0);
        }
        return NULL;
    }
    c->closing = 0;
    c->authed = 1;
    c->rank = rank;
    if (in_world) {
        s->seen[rank] = 1;
        s->holder[rank] = c;
    }
    HOOP_INFO(BOOT, "store %s: client %s (%s %d) connected", s->name, c->peer, s->unit, (int)rank);
    reply_status(c, HOOP__STORE_R_OK);
    return NULL;
}

static const char *on_set(hoop_store_server *s, conn *c, hoop__rd *r)
{
    const uint8_t *key, *val;
    size_t kn, vn;
    const char *err = read_key(r, &key, &kn);
    if (err) return err;
    val = hoop__get_str(r, HOOP_STORE_VALUE_MAX, &vn);
    if ((err = payload_error(r))) return err;
    if (hoop__store_table_set(&s->table, key, kn, val, vn) != HOOP_OK) {
        reply_text(c, HOOP__STORE_R_INVALID, "the server ran out of memory");
        return NULL;
    }
    reply_status(c, HOOP__STORE_R_OK);
    notify_parked(s);
    return NULL;
}

/* Parses a counter kept as decimal text; returns 0 when it is not one. */
static int parse_counter(const uint8_t *p, size_t n, int64_t *v)
{
    char text[24];
    if (n == 0 || n >= sizeof(text)) return 0;
    memcpy(text, p, n);
    text[n] = '\0';
    char *end;
    errno = 0;
    long long x = strtoll(text, &end, 10);
    if (errno || *end != '\0' || !(text[0] == '-' || (text[0] >= '0' && text[0] <= '9'))) return 0;
    *v = x;
    return 1;
}

static const char *on_add(hoop_store_server *s, conn *c, hoop__rd *r)
{
    const uint8_t *key;
    size_t kn;
    const char *err = read_key(r, &key, &kn);
    if (err) return err;
    int64_t delta = hoop__get_i64(r), v = 0;
    if ((err = payload_error(r))) return err;
    const hoop__store_entry *e = hoop__store_table_find(&s->table, key, kn);
    if (e && !parse_counter(e->value, e->value_bytes, &v)) {
        reply_text(c, HOOP__STORE_R_INVALID, "the key's value is not an integer counter");
        return NULL;
    }
    if ((delta > 0 && v > INT64_MAX - delta) || (delta < 0 && v < INT64_MIN - delta)) {
        reply_text(c, HOOP__STORE_R_INVALID, "the counter would overflow int64");
        return NULL;
    }
    char text[24];
    int tn = snprintf(text, sizeof(text), "%" PRId64, v + delta);
    if (hoop__store_table_set(&s->table, key, kn, (const uint8_t *)text, (size_t)tn) != HOOP_OK) {
        reply_text(c, HOOP__STORE_R_INVALID, "the server ran out of memory");
        return NULL;
    }
    reply_i64(c, v + delta);
    notify_parked(s);
    return NULL;
}

/* COMPARE_SET (store_proto.h): desired replaces the value when the key is as expected
 * (absent, or holding expected); the reply says whether it did, and what the key holds. */
static const char *on_compare_set(hoop_store_server *s, conn *c, hoop__rd *r)
{
    const uint8_t *key, *expected, *desired;
    size_t kn, en, dn;
    uint8_t flags = hoop__get_u8(r);
    const char *err = read_key(r, &key, &kn);
    if (err) return err;
    expected = hoop__get_str(r, HOOP_STORE_VALUE_MAX, &en);
    desired = hoop__get_str(r, HOOP_STORE_VALUE_MAX, &dn);
    if ((err = payload_error(r))) return err;
    if (flags & ~1u) return "unknown COMPARE_SET flags";
    const hoop__store_entry *e = hoop__store_table_find(&s->table, key, kn);
    int swap = (flags & 1u)
                   ? e == NULL
                   : e && e->value_bytes == en && (en == 0 || !memcmp(e->value, expected, en));
    if (swap) {
        if (hoop__store_table_set(&s->table, key, kn, desired, dn) != HOOP_OK) {
            reply_text(c, HOOP__STORE_R_INVALID, "the server ran out of memory");
            return NULL;
        }
        e = hoop__store_table_find(&s->table, key, kn);
    }
    size_t at = hoop__frame_begin(&c->out, HOOP__STORE_R_OK);
    hoop__put_u8(&c->out, (uint8_t)swap);
    hoop__put_u8(&c->out, e != NULL);
    hoop__put_str(&c->out, e ? e->value : NULL, e ? e->value_bytes : 0);
    hoop__frame_end(&c->out, at);
    if (swap) notify_parked(s);
    return NULL;
}

/* Parses nkeys keys into c's wait arrays (offsets into frame, which starts at base). */
static const char *read_keys(conn *c, hoop__rd *r, const uint8_t *base)
{
    uint32_t n = hoop__get_u32(r);
    if (r->bad || n == 0 || n > HOOP__STORE_WAIT_KEYS_MAX) return "bad number of keys";
    if (n > r->left / 5) return "more keys announced than the frame holds";
    c->koff = malloc(n * sizeof(uint32_t));
    c->klen = malloc(n * sizeof(uint32_t));
    if (!c->koff || !c->klen) return "out of memory parsing keys";
    c->nkeys = n;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *key;
        size_t kn;
        const char *err = read_key(r, &key, &kn);
        if (err) return err;
        c->koff[i] = (uint32_t)(key - base);
        c->klen[i] = (uint32_t)kn;
    }
    return payload_error(r);
}

static void park(hoop_store_server *s, conn *c, int64_t timeout_ms)
{
    const int64_t max_ms = INT64_MAX / 2000000; /* keeps now + timeout from overflowing */
    c->deadline_ns = hoop__now_ns() + (timeout_ms > max_ms ? max_ms : timeout_ms) * 1000000;
    c->parked = 1;
    c->pprev = NULL;
    c->pnext = s->parked;
    if (s->parked) s->parked->pprev = c;
    s->parked = c;
}

static const char *on_wait(hoop_store_server *s, conn *c, hoop__rd *r)
{
    uint8_t flags = hoop__get_u8(r);
    int64_t timeout_ms = hoop__get_i64(r);
    if (r->bad || timeout_ms < 0 || (flags & ~(HOOP__STORE_WAIT_VALUES | HOOP__STORE_WAIT_LOST)))
        return "bad WAIT flags or timeout";
    /* Keep a private copy of the request: keys are referenced until the reply. */
    c->wframe = malloc(r->left ? r->left : 1);
    if (c->wframe == NULL) return "out of memory parking a WAIT";
    memcpy(c->wframe, r->p, r->left);
    hoop__rd kr = {.p = c->wframe, .left = r->left};
    r->p += r->left;
    r->left = 0;
    const char *err = read_keys(c, &kr, c->wframe);
    c->want_values = flags & HOOP__STORE_WAIT_VALUES;
    c->want_lost = (flags & HOOP__STORE_WAIT_LOST) != 0;
    c->kcur = 0;
    int done = err == NULL && wait_done(s, c);
    int lost = err == NULL && !done && c->want_lost && s->lost_rank >= 0;
    if (err == NULL && !done && !lost && timeout_ms > 0) {
        park(s, c, timeout_ms);
        return NULL;
    }
    if (err == NULL && done)
        reply_wait_ok(s, c);
    else if (lost)
        reply_wait_lost(s, c);
    else if (err == NULL)
        reply_wait_timeout(s, c);
    wait_clear(c);
    return err;
}

static const char *on_delete(hoop_store_server *s, conn *c, hoop__rd *r)
{
    uint32_t n = hoop__get_u32(r);
    if (r->bad || n == 0 || n > HOOP__STORE_WAIT_KEYS_MAX) return "bad number of keys";
    hoop__rd check = *r;
    for (uint32_t i = 0; i < n; i++) { /* validate everything before deleting anything */
        const uint8_t *key;
        size_t kn;
        const char *err = read_key(&check, &key, &kn);
        if (err) return err;
    }
    const char *err = payload_error(&check);
    if (err) return err;
    uint32_t deleted = 0;
    for (uint32_t i = 0; i < n; i++) {
        size_t kn;
        const uint8_t *key = hoop__get_str(r, HOOP_STORE_KEY_MAX, &kn);
        deleted += (uint32_t)hoop__store_table_delete(&s->table, key, kn);
    }
    size_t at = hoop__frame_begin(&c->out, HOOP__STORE_R_OK);
    hoop__put_u32(&c->out, deleted);
    hoop__frame_end(&c->out, at);
    return NULL;
}

/* CLOSE: the client leaves on purpose; its rank is free for its next connection now. */
static const char *on_close(hoop_store_server *s, conn *c, hoop__rd *r)
{
    const char *err = payload_error(r);
    if (err) return err;
    c->leaving = 1;
    if (s->holder && c->rank >= 0 && c->rank < s->world_size && s->holder[c->rank] == c)
        s->holder[c->rank] = NULL;
    reply_status(c, HOOP__STORE_R_OK);
    return NULL;
}

/* ABORT (store_proto.h): rank c->rank of the world cannot start, for a reason of its
 * own: the server gives up with its code and reason, as when it refuses a rank at
 * start-up, unless it has given up already. Answered OK; c then leaves as by CLOSE. */
static const char *on_abort(hoop_store_server *s, conn *c, hoop__rd *r)
{
    size_t n;
    uint8_t code = hoop__get_u8(r);
    const uint8_t *why = hoop__get_str(r, HOOP__STORE_REASON_MAX, &n);
    const char *err = payload_error(r);
    if (err) return err;
    if (code == 0) return "an ABORT without a code";
    int in_world = s->holder && c->rank >= 0 && c->rank < s->world_size && s->holder[c->rank] == c;
    c->leaving = 1;
    if (in_world) s->holder[c->rank] = NULL;
    reply_status(c, HOOP__STORE_R_OK);
    c->bye = 1; /* it has its answer: give_up tells only the others */
    if (!in_world || s->fault[0]) return NULL;
    char fault[sizeof(s->fault)];
    int at = snprintf(fault, sizeof(fault), "heard from %s %d (%s) that it cannot start: ", s->unit,
                      c->rank, c->peer);
    /* Another process's text, for every rank's terminal: one line, no control bytes. */
    for (size_t i = 0; at >= 0 && i < n && (size_t)at + 1 < sizeof(fault); i++)
        fault[at++] = why[i] < 0x20 || why[i] == 0x7f ? '?' : (char)why[i];
    if (at >= 0 && (size_t)at < sizeof(fault)) fault[at] = '\0';
    give_up(s, code, fault);
    return NULL;
}

static const char *on_num_keys(hoop_store_server *s, conn *c, hoop__rd *r)
{
    const char *err = payload_error(r);
    if (err) return err;
    reply_i64(c, (int64_t)s->table.count);
    return NULL;
}

typedef const char *(*handler_fn)(hoop_store_server *s, conn *c, hoop__rd *r);

static const handler_fn handlers[] = {
    [HOOP__STORE_HELLO] = on_hello,   [HOOP__STORE_SET] = on_set,
    [HOOP__STORE_ADD] = on_add,       [HOOP__STORE_WAIT] = on_wait,
    [HOOP__STORE_DELETE] = on_delete, [HOOP__STORE_NUM_KEYS] = on_num_keys,
    [HOOP__STORE_CLOSE] = on_close,   [HOOP__STORE_COMPARE_SET] = on_compare_set,
    [HOOP__STORE_ABORT] = on_abort,
};

static const char *handle_frame(hoop_store_server *s, conn *c, const uint8_t *body, uint32_t len)
{
    hoop__rd r = {.p = body, .left = len};
    uint8_t op = hoop__get_u8(&r);
    if (op >= HOOP_ARRAY_SIZE(handlers) || handlers[op] == NULL) return "unknown opcode";
    if (!c->authed && op != HOOP__STORE_HELLO) return "request before the HELLO handshake";
    if (c->authed && op == HOOP__STORE_HELLO) return "a second HELLO";
    if (c->bye) return NULL; /* told GOODBYE: it has its answer */
    return handlers[op](s, c, &r);
}

// ----- input -----------------------------------------------------------------------------

/* Drops a peer whose first bytes are not the preface, naming what it speaks. A version
 * 1 to 4 client gets a REFUSED frame of its version first (the same framing), so that it
 * stops retrying. */
static void wrong_preface(hoop_store_server *s, conn *c, const uint8_t *p, size_t n)
{
    char what[300], why[340];
    hoop__store_describe(p, n, what, sizeof(what));
    snprintf(why, sizeof(why), "not a hoop store client: it %s", what);
    int v1 = strncmp(hoop__store_sniff(p, n), "hoop store protocol 1", 21) == 0;
    int v2 = n >= HOOP__STORE_PREFACE_LEN &&
             memcmp(p, HOOP__STORE_PREFACE_V2, HOOP__STORE_PREFACE_LEN) == 0;
    int v3 = n >= HOOP__STORE_PREFACE_LEN &&
             memcmp(p, HOOP__STORE_PREFACE_V3, HOOP__STORE_PREFACE_LEN) == 0;
    int v4 = n >= HOOP__STORE_PREFACE_LEN &&
             memcmp(p, HOOP__STORE_PREFACE_V4, HOOP__STORE_PREFACE_LEN) == 0;
    if (v1 || v2 || v3 || v4) {
        HOOP_WARN("store %s: closing connection from %s: %s; told it so in protocol %d", s->name,
                  c->peer, why,
                  v1   ? 1
                  : v2 ? 2
                  : v3 ? 3
                       : 4);
        char text[128];
        snprintf(text, sizeof(text),
                 "this server speaks store protocol %d (a newer hoop): run the same hoop on "
                 "every node",
                 HOOP__STORE_VERSION);
        reply_text(c, HOOP__STORE_R_REFUSED, text);
        c->closing = 1;
        c->in.len = c->in_off = 0;
        conn_flush(s, c);
        return;
    }
    conn_drop(s, c, why);
}

/* Consumes the preface; returns 0 when c was dropped or more bytes are needed. */
static int take_preface(hoop_store_server *s, conn *c)
{
    size_t have = c->in.len - c->in_off;
    size_t n = have < HOOP__STORE_PREFACE_LEN ? have : HOOP__STORE_PREFACE_LEN;
    const uint8_t *p = c->in.data + c->in_off;
    if (memcmp(p, HOOP__STORE_PREFACE, n) != 0) {
        wrong_preface(s, c, p, have);
        return 0;
    }
    if (n < HOOP__STORE_PREFACE_LEN) return 0; /* the sweep closes one that stalls here */
    c->in_off += HOOP__STORE_PREFACE_LEN;
    c->greeted = 1;
    return 1;
}

/* Parses and serves every complete frame in c's input buffer while c is idle. */
static void process_input(hoop_store_server *s, conn *c)
{
    if (!c->greeted && !take_preface(s, c)) return;
    while (!c->dead && !busy(c) && c->in.len - c->in_off >= 4) {
        const uint8_t *p = c->in.data + c->in_off;
        uint32_t len = hoop__get_u32_be(p);
        uint32_t limit = c->authed ? HOOP__STORE_FRAME_MAX : HOOP__STORE_HELLO_MAX;
        if (len == 0 || len > limit) {
            char why[96];
            snprintf(why, sizeof(why), "frame length %" PRIu32 " is not in 1..%" PRIu32, len,
                     limit);
            conn_drop(s, c, why);
            return;
        }
        if (c->in.len - c->in_off < 4 + (size_t)len) break;
        const char *err = handle_frame(s, c, p + 4, len);
        if (err) {
            conn_drop(s, c, err);
            return;
        }
        c->in_off += 4 + (size_t)len;
        if (c->deaf)
            c->out.len = c->out_off = 0; /* nobody to answer */
        else if (!conn_flush(s, c))
            return;
    }
    if (c->dead) return;
    if (c->deaf) {
        conn_close(s, c);
        return;
    }
    if (c->in_off == c->in.len) {
        c->in.len = c->in_off = 0;
        if (c->in.cap > (1u << 20)) hoop__buf_free(&c->in);
    } else if (c->in_off > 0) {
        memmove(c->in.data, c->in.data + c->in_off, c->in.len - c->in_off);
        c->in.len -= c->in_off;
        c->in_off = 0;
        c->since_ns = c->authed ? hoop__now_ns() : c->since_ns; /* a new partial frame */
    }
}

/* Reads what the peer sent (while c is idle) and serves it. */
static void conn_read(hoop_store_server *s, conn *c)
{
    while (!c->dead && !busy(c)) {
        if (!hoop__buf_reserve(&c->in, READ_CHUNK)) {
            conn_drop(s, c, "out of memory for its input");
            return;
        }
        ssize_t n = recv(c->fd, c->in.data + c->in.len, READ_CHUNK, 0);
        if (n > 0) {
            if (c->in.len == 0 && c->authed) c->since_ns = hoop__now_ns();
            c->in.len += (size_t)n;
            process_input(s, c);
        } else if (n == 0) {
            HOOP_INFO(BOOT, "store %s: %s disconnected", s->name, c->peer);
            conn_close(s, c);
        } else if (errno == EINTR) {
            continue;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return;
        } else {
            char why[128];
            snprintf(why, sizeof(why), "recv failed: %s", hoop__strerror(errno));
            conn_drop(s, c, why);
        }
    }
}

static void on_conn_event(hoop_store_server *s, conn *c, uint32_t ev)
{
    if (c->dead) return;
    if ((ev & EPOLLOUT) && !conn_flush(s, c)) return;
    if (ev & EPOLLIN) {
        conn_read(s, c);
    } else if (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        if (ev & EPOLLERR)
            conn_drop(s, c, "socket error");
        else
            conn_close(s, c); /* hung up while its WAIT was parked: nobody to answer */
    }
}

/* Serves connections whose input was left unparsed while they were busy. */
static void drain_ready(hoop_store_server *s)
{
    while (s->ready) {
        conn *c = s->ready;
        s->ready = c->rnext;
        c->ready = 0;
        if (!c->dead) process_input(s, c);
    }
}

// ----- accepting and sweeping -------------------------------------------------------------

static void listen_pause(hoop_store_server *s, int pause)
{
    struct epoll_event e = {.events = pause ? 0 : EPOLLIN, .data.ptr = &s->lfd};
    if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, s->lfd, &e) == 0) s->listen_paused = pause;
}

static void add_conn(hoop_store_server *s, int fd, const struct sockaddr_storage *sa, socklen_t len)
{
    conn *c = calloc(1, sizeof(*c));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct epoll_event e = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    if (c == NULL || epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &e) == -1) {
        HOOP_WARN("store %s: cannot take a new connection: %s", s->name,
                  c ? hoop__strerror(errno) : "out of memory");
        free(c);
        close(fd);
        return;
    }
    c->fd = fd;
    c->rank = -1;
    c->events = e.events;
    c->since_ns = hoop__now_ns();
    hoop__store_addr_str((const struct sockaddr *)sa, len, c->peer, sizeof(c->peer));
    c->next = s->all;
    if (s->all) s->all->prev = c;
    s->all = c;
    atomic_fetch_add(&s->nclients, 1);
    HOOP_DEBUGF(BOOT, "store %s: accepted %s", s->name, c->peer);
}

static void on_accept(hoop_store_server *s)
{
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof(sa);
        int fd = accept4(s->lfd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            add_conn(s, fd, &sa, len);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        /* Out of fds or memory: stop accepting until the next sweep instead of spinning. */
        HOOP_WARN("store %s: accept failed: %s (pausing new connections for %d ms)", s->name,
                  hoop__strerror(errno), (int)(SWEEP_NS / 1000000));
        listen_pause(s, 1);
        return;
    }
}

/* Closes connections that did not finish the handshake, left a frame half-sent, or
 * stopped reading a reply, for longer than the server's timeout. */
static void sweep(hoop_store_server *s, int64_t now)
{
    /* A floor keeps HOOP_TIMEOUT=0 from closing every client before its handshake. */
    const int64_t limit_ns = (s->timeout_ms < 100 ? 100 : s->timeout_ms) * 1000000;
    if (s->listen_paused) listen_pause(s, 0);
    conn *c = s->all;
    while (c) {
        conn *next = c->next;
        if (!c->authed && now - c->since_ns > limit_ns)
            conn_drop(s, c, "no handshake within the timeout");
        else if (c->authed && !busy(c) && c->in.len > c->in_off && now - c->since_ns > limit_ns)
            conn_drop(s, c, "sent part of a message and stalled past the timeout");
        else if (c->out_since_ns && now - c->out_since_ns > limit_ns)
            conn_drop(s, c, "stopped reading its replies past the timeout");
        c = next;
    }
}

// ----- the server thread ---------------------------------------------------------------------

static int wait_ms(int64_t now, int64_t deadline)
{
    if (deadline == INT64_MAX) return -1;
    int64_t ms = (deadline - now + 999999) / 1000000;
    return ms < 0 ? 0 : ms > INT32_MAX ? INT32_MAX : (int)ms;
}

static void close_all(hoop_store_server *s)
{
    s->stopping = 1;
    while (s->all) conn_close(s, s->all);
    s->ready = NULL;
    bury(s);
}

// ----- GOODBYE: telling every client why the server stops ---------------------------------

/* Appends "; ranks not connected to the store when it gave up: 2,3" (nodes: "nodes ...") to reason
 * when the world size is known. */
static void add_never_seen(const hoop_store_server *s, char *reason, size_t cap)
{
    size_t used = strlen(reason);
    int first = 1, shown = 0;
    for (int r = 0; s->seen && r < s->world_size && used + 16 < cap; r++) {
        if (s->seen[r]) continue;
        if (shown++ == 32) {
            snprintf(reason + used, cap - used, ",...");
            return;
        }
        int k = snprintf(reason + used, cap - used, "%s%s%s%d", first ? "; " : ",",
                         first ? s->unit : "",
                         first ? "s not connected to the store when it gave up: " : "", r);
        used += k > 0 ? (size_t)k : 0;
        first = 0;
    }
}

/* Queues GOODBYE on c: the reason, and for a parked WAIT its keys still missing when keys
 * (a server that gave up because of one rank sends none: the waiting ranks would take
 * that rank for one that never arrived, though it came and said why it cannot start). */
static void queue_goodbye(hoop_store_server *s, conn *c, uint8_t code, const char *reason, int keys)
{
    size_t at = hoop__frame_begin(&c->out, HOOP__STORE_R_GOODBYE);
    hoop__put_u8(&c->out, code);
    hoop__put_str(&c->out, reason, strlen(reason));
    uint32_t missing = 0;
    for (uint32_t i = 0; keys && c->parked && i < c->nkeys; i++)
        missing += wait_key(s, c, i) == NULL;
    hoop__put_u32(&c->out, missing);
    for (uint32_t i = 0; keys && c->parked && i < c->nkeys; i++)
        if (wait_key(s, c, i) == NULL) hoop__put_u32(&c->out, i);
    hoop__frame_end(&c->out, at);
    unpark(s, c);
}

/* Writes what is queued on every connection for up to GOODBYE_FLUSH_MS. */
static void flush_goodbyes(hoop_store_server *s)
{
    int64_t deadline = hoop__now_ns() + GOODBYE_FLUSH_MS * 1000000LL;
    for (;;) {
        int pending = 0;
        for (conn *c = s->all; c; c = c->next) {
            while (c->out_off < c->out.len) {
                ssize_t n = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n > 0) {
                    c->out_off += (size_t)n;
                } else if (n == -1 && errno == EINTR) {
                    continue;
                } else {
                    if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        pending++;
                    else
                        c->out_off = c->out.len; /* gone: nothing more to say to it */
                    break;
                }
            }
        }
        int64_t left = deadline - hoop__now_ns();
        if (pending == 0 || left <= 0) return;
        struct timespec ts = {.tv_nsec = 5 * 1000000L}; /* rare: a client's buffer is full */
        nanosleep(&ts, NULL);
    }
}

/* Reads and discards what clients sent, so that closing sends FIN, not a reset that
 * could race the GOODBYE. */
static void drain_inputs(hoop_store_server *s)
{
    uint8_t sink[4096];
    for (conn *c = s->all; c; c = c->next)
        for (int i = 0; i < 256 && recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++) {
        }
}

/* The owner stops the server with a failure after a rank was lost (store_proto.h, "A
 * rank lost"), within moments of the start-up: ranks started a moment after it have not
 * connected yet, and would find no store and wait for it until their timeout. So the
 * server tells every client GOODBYE now, and keeps listening for up to LINGER_MS until
 * every rank has been seen, answering each later HELLO with the same GOODBYE. Returns 1
 * when it lingers (the owner's thread waits for it in its join). */
static int linger_start(hoop_store_server *s)
{
    pthread_mutex_lock(&s->bye_mu);
    s->linger_code = (uint8_t)s->bye_code;
    snprintf(s->linger_reason, sizeof(s->linger_reason), "%s",
             s->bye_reason[0] ? s->bye_reason : "the server was shut down");
    pthread_mutex_unlock(&s->bye_mu);
    const int told = atomic_load(&s->tell_latecomers),
              linger_ms = told > LINGER_MS ? told : LINGER_MS;
    if (s->linger_code == HOOP_OK || (s->lost_rank < 0 && !told) || !some_unseen(s)) return 0;
    /* The owner (rank 0) says its failure only once this wait ends: say it now, where
     * workers' stores are concerned (hooprun speaks for the nodes' own), unless the owner
     * said it already (hoop__store_owner_said: a tool's own line, printed before). */
    if (!s->nodes && !atomic_load(&s->owner_said))
        HOOP_WARN("store %s: its owner gave up: %s; telling ranks not connected yet for up to "
                  "%d ms",
                  s->name, s->linger_reason, linger_ms);
    else
        HOOP_INFO(BOOT,
                  "store %s: its owner gave up; waiting up to %d ms to tell the nodes not seen",
                  s->name, linger_ms);
    add_never_seen(s, s->linger_reason, sizeof(s->linger_reason));
    s->linger_until = hoop__now_ns() + linger_ms * 1000000LL;
    for (conn *c = s->all, *next; c; c = next) {
        next = c->next;
        if (c->dead || !c->authed || c->closing || c->bye) continue;
        queue_goodbye(s, c, s->linger_code, s->linger_reason, 1);
        c->bye = 1;
        conn_flush(s, c);
    }
    return 1;
}

static void say_goodbye(hoop_store_server *s)
{
    char reason[sizeof(s->bye_reason) + 400];
    _Static_assert(sizeof(reason) <= HOOP__STORE_REASON_MAX, "a GOODBYE's reason must fit");
    pthread_mutex_lock(&s->bye_mu);
    uint8_t code = (uint8_t)s->bye_code;
    snprintf(reason, sizeof(reason), "%s",
             s->bye_reason[0] ? s->bye_reason : "the server was shut down");
    pthread_mutex_unlock(&s->bye_mu);
    add_never_seen(s, reason, sizeof(reason));
    int told = 0;
    for (conn *c = s->all; c; c = c->next) {
        if (c->dead || !c->authed || c->closing || c->bye) continue;
        queue_goodbye(s, c, code, reason, 1);
        told++;
    }
    if (told)
        HOOP_INFO(BOOT, "store %s: told %d client%s goodbye: %s", s->name, told,
                  told == 1 ? "" : "s", reason);
    flush_goodbyes(s);
    drain_inputs(s);
}

static void *server_main(void *arg)
{
    hoop_store_server *s = arg;
    struct epoll_event evs[MAX_EVENTS];
    int64_t next_sweep = hoop__now_ns() + SWEEP_NS, next_deadline = INT64_MAX;
    for (;;) {
        int64_t now = hoop__now_ns();
        if (s->linger_until && next_deadline > s->linger_until) next_deadline = s->linger_until;
        int64_t until = next_deadline < next_sweep ? next_deadline : next_sweep;
        int sweeping = s->all != NULL || s->listen_paused;
        int n =
            epoll_wait(s->epfd, evs, MAX_EVENTS, wait_ms(now, sweeping ? until : next_deadline));
        if (n == -1 && errno != EINTR) {
            HOOP_WARN("store %s: epoll_wait failed: %s; the server stops", s->name,
                      hoop__strerror(errno));
            break;
        }
        int stop = 0;
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &s->wakefd) {
                uint64_t v; /* drained, since a lingering server goes on polling it */
                if (read(s->wakefd, &v, sizeof(v)) < 0 && errno != EAGAIN) v = 0;
                stop = s->linger_until || !linger_start(s);
            } else if (p == &s->lfd) {
                on_accept(s);
            } else {
                on_conn_event(s, p, evs[i].events);
            }
        }
        if (stop) break;
        drain_ready(s);
        now = hoop__now_ns();
        next_deadline = expire_parked(s, now);
        if (now >= next_sweep) {
            sweep(s, now);
            next_sweep = now + SWEEP_NS;
        }
        drain_ready(s);
        bury(s);
        if (s->linger_until && (!some_unseen(s) || hoop__now_ns() >= s->linger_until)) break;
    }
    /* Telling every client why, then closing every connection, makes clients fail at
     * once, not at their timeout, and with the owner's reason. */
    say_goodbye(s);
    close_all(s);
    return NULL;
}

// ----- public API ----------------------------------------------------------------------------

/* hoop__store_last_in_use: set when bind_listen found the port taken, cleared by each
 * try. */
static _Thread_local int last_in_use;

int hoop__store_last_in_use(void)
{
    return last_in_use;
}

/* Binds and listens on the first address of res that works. */
static hoop_status bind_listen(hoop_store_server *s, const struct addrinfo *res, const char *host,
                               int port)
{
    int last_errno = 0;
    last_in_use = 0;
    for (const struct addrinfo *a = res; a; a = a->ai_next) {
        int fd =
            socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd == -1) {
            last_errno = errno;
            continue;
        }
        int one = 1;
        /* SO_REUSEADDR: a restarted rank 0 can bind while old connections sit in
         * TIME_WAIT. It does not allow two listeners on one port (Linux). */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        /* Every rank connects at start-up: the largest backlog the kernel allows
         * (listen(2): capped at net.core.somaxconn, 4096 since Linux 5.4), not the
         * header's SOMAXCONN, 128 in older C libraries, whose overflow drops SYNs that are
         * retried only after 1, 3, 7 s. */
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, STORE_BACKLOG) == 0) {
            s->lfd = fd;
            return HOOP_OK;
        }
        last_errno = errno;
        close(fd);
    }
    char where[300];
    hoop__hostport(where, sizeof(where), host, port);
    last_in_use = last_errno == EADDRINUSE;
    if (last_in_use)
        return HOOP_ERROR(HOOP_ERR_SYSTEM,
                          "store: %s is already in use (another job on this port, or a second "
                          "rank 0: two nodes given --node-rank 0, two workers RANK=0; "
                          "'ss -ltnp sport = :%d' names the process holding it)",
                          where, port);
    return HOOP_ERROR(HOOP_ERR_SYSTEM, "store: cannot listen on %s: %s", where,
                      hoop__strerror(last_errno));
}

static hoop_status server_open(hoop_store_server *s, const hoop_store_config *cfg)
{
    const char *host = cfg->host && *cfg->host ? cfg->host : "0.0.0.0";
    struct addrinfo *res;
    HOOP_CHECK(hoop__store_resolve(cfg->host, cfg->port, 1, &res));
    hoop_status st = bind_listen(s, res, host, cfg->port);
    freeaddrinfo(res);
    HOOP_CHECK(st);
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    HOOP_SYSCHECK(getsockname(s->lfd, (struct sockaddr *)&sa, &len), "store: getsockname");
    s->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                             : ((struct sockaddr_in *)&sa)->sin_port);
    hoop__hostport(s->name, sizeof(s->name), host, s->port);
    HOOP_SYSCHECK(s->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), "store: eventfd");
    HOOP_SYSCHECK(s->epfd = epoll_create1(EPOLL_CLOEXEC), "store: epoll_create1");
    struct epoll_event el = {.events = EPOLLIN, .data.ptr = &s->lfd};
    struct epoll_event ew = {.events = EPOLLIN, .data.ptr = &s->wakefd};
    HOOP_SYSCHECK(epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &el), "store: epoll_ctl");
    HOOP_SYSCHECK(epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->wakefd, &ew), "store: epoll_ctl");
    return HOOP_OK;
}

/* Starts the thread with every signal blocked, so signals go to the application. */
static hoop_status server_start(hoop_store_server *s)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, server_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    HOOP_PTHREAD_CHECK(rc, "store: pthread_create");
    s->started = 1;
    return HOOP_OK;
}

static hoop_status check_config(const hoop_store_config *cfg)
{
    if (cfg == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "store: config is NULL");
    if (cfg->port < 0 || cfg->port > 65535)
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: port %d is not in 0..65535", cfg->port);
    if (cfg->token && strlen(cfg->token) > HOOP__STORE_TOKEN_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: HOOP_TOKEN is longer than %d bytes",
                          HOOP__STORE_TOKEN_MAX);
    return HOOP_OK;
}

static hoop_status server_init(hoop_store_server **out, const hoop_store_config *cfg, int nodes)
{
    if (out == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "store: out is NULL");
    *out = NULL;
    HOOP_CHECK(check_config(cfg));
    hoop_store_server *s;
    HOOP_CHECK(hoop__calloc(&s, 1));
    s->lfd = s->wakefd = s->epfd = -1;
    snprintf(s->token, sizeof(s->token), "%s", cfg->token ? cfg->token : "");
    pthread_mutex_init(&s->bye_mu, NULL);
    hoop_status st = HOOP_OK;
    if (cfg->world_size > 0) {
        s->world_size = cfg->world_size;
        HOOP_CHECK_GOTO(hoop__calloc(&s->seen, (size_t)cfg->world_size), st, fail);
        HOOP_CHECK_GOTO(hoop__calloc(&s->holder, (size_t)cfg->world_size), st, fail);
    }
    s->owner_rank = cfg->rank >= 0 ? cfg->rank : -1;
    s->nodes = nodes;
    s->unit = nodes ? "node" : "rank";
    s->lost_rank = -1;
    s->timeout_ms = cfg->timeout_ms;
    if (s->timeout_ms < 0) HOOP_CHECK_GOTO(hoop__env_ms("HOOP_TIMEOUT", &s->timeout_ms), st, fail);
    if (s->timeout_ms > HOOP__STORE_TIMEOUT_MAX_MS) s->timeout_ms = HOOP__STORE_TIMEOUT_MAX_MS;
    HOOP_CHECK_GOTO(server_open(s, cfg), st, fail);
    HOOP_CHECK_GOTO(server_start(s), st, fail);
    HOOP_INFO(BOOT, "store: serving at %s", s->name);
    *out = s;
    return HOOP_OK;
fail:
    hoop_store_server_destroy(s);
    return st;
}

HOOP_API hoop_status hoop_store_server_init(hoop_store_server **out, const hoop_store_config *cfg)
{
    return server_init(out, cfg, 0);
}

hoop_status hoop__store_server_init_nodes(hoop_store_server **out, const hoop_store_config *cfg)
{
    return server_init(out, cfg, 1);
}

HOOP_API int hoop_store_server_port(const hoop_store_server *srv)
{
    return srv ? srv->port : -1;
}

void hoop__store_server_tell_latecomers(hoop_store_server *srv, int ms)
{
    if (srv) atomic_store(&srv->tell_latecomers, ms > 0 ? ms : LINGER_MS);
}

void hoop__store_server_owner_said(hoop_store_server *srv)
{
    if (srv) atomic_store(&srv->owner_said, 1);
}

int hoop__store_server_nclients(const hoop_store_server *srv)
{
    return atomic_load(&((hoop_store_server *)srv)->nclients);
}

hoop_status hoop__store_server_fault(hoop_store_server *srv, char *buf, size_t cap)
{
    if (srv == NULL) return HOOP_OK;
    pthread_mutex_lock(&srv->bye_mu);
    hoop_status code = srv->fault[0] != '\0' ? srv->fault_code : HOOP_OK;
    if (code != HOOP_OK) snprintf(buf, cap, "%s", srv->fault);
    pthread_mutex_unlock(&srv->bye_mu);
    return code;
}

int hoop__store_server_stranger(hoop_store_server *srv, char *buf, size_t cap)
{
    if (srv == NULL) return 0;
    pthread_mutex_lock(&srv->bye_mu);
    int has = srv->stranger[0] != '\0';
    if (has) snprintf(buf, cap, "%s", srv->stranger);
    pthread_mutex_unlock(&srv->bye_mu);
    return has;
}

HOOP_API hoop_status hoop_store_server_destroy(hoop_store_server *srv)
{
    return hoop__store_server_close(srv, HOOP_OK, NULL);
}

hoop_status hoop__store_server_close(hoop_store_server *srv, hoop_status code, const char *reason)
{
    if (srv == NULL) return HOOP_OK;
    hoop_status st = HOOP_OK;
    pthread_mutex_lock(&srv->bye_mu);
    srv->bye_code = code;
    snprintf(srv->bye_reason, sizeof(srv->bye_reason), "%s", reason ? reason : "");
    pthread_mutex_unlock(&srv->bye_mu);
    if (srv->started) {
        uint64_t one = 1;
        ssize_t n;
        do {
            n = write(srv->wakefd, &one, sizeof(one));
        } while (n == -1 && errno == EINTR);
        if (n != (ssize_t)sizeof(one))
            st = HOOP_ERROR(HOOP_ERR_SYSTEM, "store: cannot wake the server thread: %s",
                            hoop__strerror(errno));
        else
            HOOP_CHECK_KEEP(pthread_join(srv->thread, NULL) == 0
                                ? HOOP_OK
                                : HOOP_ERROR(HOOP_ERR_SYSTEM, "store: pthread_join failed"),
                            st);
    }
    if (st != HOOP_OK) return st; /* the thread may still run: freeing would be unsafe */
    close_all(srv);
    hoop__store_table_clear(&srv->table);
    if (srv->epfd >= 0) close(srv->epfd);
    if (srv->wakefd >= 0) close(srv->wakefd);
    if (srv->lfd >= 0) close(srv->lfd);
    HOOP_INFO(BOOT, "store %s: stopped", srv->name);
    pthread_mutex_destroy(&srv->bye_mu);
    free(srv->seen);
    free(srv->holder);
    free(srv);
    return HOOP_OK;
}
