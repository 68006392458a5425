/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/bootstrap/store_proto.h -- wire format of the rendezvous store and the helpers
 * that encode, decode and address it (internal; shared by store_server.c and
 * store_client.c).
 *
 * Wire format (version 5). A client opens with a fixed preface of 16 bytes,
 *
 *     "HOOP-STORE/5\r\n\r\n"
 *
 * and after it, in both directions, everything is a frame:
 *
 *     u32 length            bytes that follow, 1 .. HOOP__STORE_FRAME_MAX
 *     u8  op / status       request: an opcode; reply: a status
 *     ... payload           as below
 *
 * The preface is text ending in an empty line, so that a text protocol found at the
 * port by mistake (an HTTP server, say) answers at once instead of waiting for a line
 * that never comes, and the client can name what it reached (HTTP/2's connection
 * preface does the same for HTTP/1 servers). A server that reads anything else names
 * what it got (HTTP, TLS, SSH, an older client) in its warning; a version 1 to 4
 * client is answered with a REFUSED frame of its own version (the framing has not
 * changed), so it fails at once with a reason. (Version 3 added world_size to HELLO, and
 * the refusal of a job's rank below; version 4 added CLOSE, LOST and WAIT's flag bit 1,
 * "A rank lost" below; version 5 added COMPARE_SET.)
 *
 * Integers are big-endian (network order); i64 is two's complement. A "str" is
 * u32 n followed by n bytes (no terminator). Keys are str of 1..HOOP_STORE_KEY_MAX bytes
 * and must not contain a NUL byte; values are str of 0..HOOP_STORE_VALUE_MAX bytes.
 *
 * Requests (client -> server), one at a time: a client sends the next request only
 * after it has read the reply to the previous one.
 *
 *     HELLO    = 1  u32 magic 0x484F4F50 ("HOOP"), u16 version, i32 rank, i32 world_size
 *                   (0: not stated), str token (<= HOOP__STORE_TOKEN_MAX bytes). Must be
 *                   the first frame; until it is accepted, frames are limited to
 *                   HOOP__STORE_HELLO_MAX. The server refuses a wrong token, and a
 *                   world_size > 0 that differs from its own (when it has one).
 *     SET      = 2  str key, str value
 *     ADD      = 3  str key, i64 delta           (the value is kept as decimal text)
 *     WAIT     = 4  u8 flags (bit 0: return the values; bit 1: answer LOST when a rank
 *                   is lost, below), i64 timeout_ms (>= 0),
 *                   u32 nkeys (1..HOOP__STORE_WAIT_KEYS_MAX), nkeys x str key
 *     DELETE   = 5  u32 nkeys (1..HOOP__STORE_WAIT_KEYS_MAX), nkeys x str key
 *     NUM_KEYS = 6  (no payload)
 *     CLOSE    = 7  (no payload) the client is leaving on purpose (hoop_store_destroy):
 *                   the server lets go of its rank at once; the client closes after the
 *                   reply. See "A rank lost" below.
 *     COMPARE_SET = 8  u8 flags (bit 0: expect the key absent), str key, str expected,
 *                   str desired: atomically, when the key is absent and flag bit 0 is
 *                   set, or present, bit 0 clear and its value equals expected, the key
 *                   is set to desired (PyTorch's TCPStore compareSet, whose "absent" is
 *                   an empty expected; an explicit bit keeps an empty value apart).
 *     ABORT    = 9  u8 code (a hoop_status, not 0), str reason (<=
 *                   HOOP__STORE_REASON_MAX bytes): the client, rank r of the world, cannot
 *                   start (it refused a setting of its own) and is leaving: see "A job's
 *                   rank refused at start-up" below. Answered OK; then the client closes,
 *                   as after CLOSE (its rank is not lost). A server older than this request
 *                   closes the connection on it (an unknown opcode), which loses the rank:
 *                   the others still stop at once, without the reason.
 *
 * Replies (server -> client), the status byte then:
 *
 *     OK       = 0  HELLO, SET, CLOSE: nothing. ADD: i64 new value. WAIT: nothing, or
 *                   with flag bit 0, nkeys x str value in request order. DELETE: u32
 *                   number of keys that existed. NUM_KEYS: i64 count. COMPARE_SET: u8
 *                   swapped (1 when desired was set), u8 present, str value (the key's
 *                   value after the request; empty when absent).
 *     TIMEOUT  = 1  WAIT only: u32 nmissing, nmissing x u32 index (into the request's
 *                   keys) of the keys still missing when timeout_ms passed.
 *     REFUSED  = 2  HELLO only: str reason; the server then closes the connection.
 *     INVALID  = 3  str reason (e.g. ADD on a value that is not an integer).
 *     GOODBYE  = 4  u8 code (the hoop_status its owner gave up with, 0 for none),
 *                   str reason (<= HOOP__STORE_REASON_MAX bytes), u32 nmissing,
 *                   nmissing x u32 index: the server is shutting down. Sent once to
 *                   every authenticated connection, in place of the answer to a parked
 *                   WAIT (the indices: its keys still missing; none when the server
 *                   gave up because of one rank, whom the reason names) or ahead of the
 *                   next reply (nmissing 0); then the server closes. Rank 0's store says this way
 * why rank 0 gave up (e.g. "allgather 'x': rank 2 of 3 never arrived"), and which ranks never
 * connected, before the waiting ranks lose it.
 *     LOST     = 5  WAIT with flag bit 1 only: i32 rank, str reason (<=
 *                   HOOP__STORE_REASON_MAX bytes), u32 nmissing, nmissing x u32 index (as
 *                   TIMEOUT): a rank of the world is lost (below) and some keys are still
 *                   missing.
 *
 * A rank lost. When the connection that holds rank r of a server that knows its
 * world_size ends without a CLOSE request (the process died or was killed, or its
 * network went), the server marks r lost, for the rest of its life: what that process
 * added to counters and set before it died cannot be told apart from the rest, so a
 * later process connecting as r (a rank restarted by hand) is let in but r stays lost.
 * Every WAIT with flag bit 1 whose keys do not all exist is then answered LOST, naming
 * the first rank lost, at once or when it happens; a WAIT whose keys all exist is
 * answered OK as ever (a rank that read its results and then exited without closing
 * fails nobody still reading them). That is the whole rule the server knows: the
 * barrier and all-gather (store_sync.c) set flag bit 1, because a world-wide sync that
 * still lacks keys cannot finish once a rank is gone, and its counters cannot take a
 * restarted rank back; hooprun --max-restarts restarts the whole job with a fresh
 * store. When its owner then stops the server with a failure while ranks of the world
 * have never connected (started a moment after rank 0, which failed within moments), the
 * server tells every client GOODBYE at once and keeps listening for up to 2 s, answering
 * each later HELLO with that GOODBYE, until every rank has been seen: so they fail with
 * the reason instead of finding no store until their timeout (the owner's
 * hoop_store_destroy returns after it). hoop_store_destroy sends CLOSE, so closing a store client
 * and opening another as the same rank (a second communicator) is no loss.
 *
 * A job's rank refused at start-up. When a server that knows its world_size refuses the
 * HELLO of a rank r of that world (0 <= r < world_size) that has not connected before,
 * with the right token but another world_size, the job cannot start: a rank is
 * misconfigured and everyone else would wait for it until the timeout. So the server
 * gives up at once: it
 * sends GOODBYE (code HOOP_ERR_MISMATCH, the reason naming rank r, its address and what
 * differs, never the token) to every authenticated connection, ignores what they send
 * after it, and refuses every later HELLO with that reason; it keeps listening until its
 * owner stops it. The same happens when a HELLO with the right token and world_size
 * claims a rank r of the world that another live connection already holds (two nodes
 * given the same --node-rank, two workers the same RANK): the reason is "rank r claimed
 * twice: by ADDR1 and ADDR2; check --node-rank / RANK (two processes), or open one store
 * per process (...)" (a process that opens a second store client as its own rank, by a
 * second hoop_comm_init_env, claims it twice too: HELLO does not say which process sent
 * it), and the second claimant is
 * REFUSED with it. A rank whose earlier connection has closed may connect again (the
 * server peeks at the old connection first, in case its hang-up is not processed yet).
 * A refusal of anyone else (a rank already connected whose world_size differs, one
 * outside the world, a server without world_size) changes nothing for the others, nor
 * does a wrong token: whoever can reach the port could send one (a stray process of an
 * earlier job on the same port), and the token exists so that such a process cannot act
 * on the job.
 * The owner's waits that time out then name the last such client (its address, the
 * rank it claimed), the likeliest reason a rank never arrived.
 * A rank r of the world that is connected and sends ABORT (its own start-up refused a
 * setting: hoop_comm_init_env on a bad HOOP_* value, a tool on a bad flag) makes the
 * server give up the same way, at once, with the ABORT's code and the reason "it heard
 * from rank r (ADDR) that it cannot start: REASON", unless it has given up already.
 * Without it the others would wait for rank r until their timeout.
 *
 * A WAIT whose keys all exist is answered at once; otherwise the server parks the
 * client (no polling) and answers when the last key is set, or with TIMEOUT at the
 * deadline. Anything else -- a wrong preface, a length of 0 or above the limit, an
 * unknown opcode or magic, a key that is empty, too long or holds a NUL, a field that
 * runs past the frame, bytes left over after the payload, a request before HELLO, a
 * frame left half-sent for the server's timeout -- makes the server log a warning
 * naming the peer and close that one connection.
 */
#ifndef HOOP_BOOTSTRAP_STORE_PROTO_H
#define HOOP_BOOTSTRAP_STORE_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <netdb.h>
#include <sys/socket.h>

#include "hoop/status.h"
#include "hoop/store.h"

#define HOOP__STORE_MAGIC 0x484F4F50u /* "HOOP" */
#define HOOP__STORE_VERSION 5
#define HOOP__STORE_PREFACE "HOOP-STORE/5\r\n\r\n"
#define HOOP__STORE_PREFACE_V2 "HOOP-STORE/2\r\n\r\n" /* answered in its own framing */
#define HOOP__STORE_PREFACE_V3 "HOOP-STORE/3\r\n\r\n" /* the same */
#define HOOP__STORE_PREFACE_V4 "HOOP-STORE/4\r\n\r\n" /* the same */
#define HOOP__STORE_PREFACE_LEN 16
#define HOOP__STORE_TOKEN_MAX 256
#define HOOP__STORE_HELLO_MAX (1 + 4 + 2 + 4 + 4 + 4 + HOOP__STORE_TOKEN_MAX)
/* Room for a SET of the largest key and value, plus slack for headers. */
#define HOOP__STORE_FRAME_MAX (HOOP_STORE_VALUE_MAX + 4096u)
#define HOOP__STORE_WAIT_KEYS_MAX 65536u
/* Longest reason a GOODBYE carries (the server cuts its text to fit). */
#define HOOP__STORE_REASON_MAX 2048u
/* Timeouts are clamped to this (about 31 years), so deadlines in ns never overflow. */
#define HOOP__STORE_TIMEOUT_MAX_MS 1000000000000LL

enum hoop__store_op {
    HOOP__STORE_HELLO = 1,
    HOOP__STORE_SET = 2,
    HOOP__STORE_ADD = 3,
    HOOP__STORE_WAIT = 4,
    HOOP__STORE_DELETE = 5,
    HOOP__STORE_NUM_KEYS = 6,
    HOOP__STORE_CLOSE = 7,
    HOOP__STORE_COMPARE_SET = 8,
    HOOP__STORE_ABORT = 9,
};

enum hoop__store_reply {
    HOOP__STORE_R_OK = 0,
    HOOP__STORE_R_TIMEOUT = 1,
    HOOP__STORE_R_REFUSED = 2,
    HOOP__STORE_R_INVALID = 3,
    HOOP__STORE_R_GOODBYE = 4,
    HOOP__STORE_R_LOST = 5,
};

#define HOOP__STORE_WAIT_VALUES 1u /* WAIT flag: return the values (GET) */
#define HOOP__STORE_WAIT_LOST 2u   /* WAIT flag: answer LOST once a rank is lost */

// ----- growable output buffer -------------------------------------------------------

/* A byte buffer that frames are built in. A failed allocation sets oom and turns later
 * writes into no-ops, so a frame is built without a check per field. */
typedef struct hoop__buf {
    uint8_t *data;
    size_t len, cap;
    int oom;
} hoop__buf;

/* Makes room for n more bytes; returns 0 (and sets oom) when that fails. */
int hoop__buf_reserve(hoop__buf *b, size_t n);
void hoop__buf_free(hoop__buf *b);

static inline void hoop__put_bytes(hoop__buf *b, const void *p, size_t n)
{
    if (n == 0 || !hoop__buf_reserve(b, n)) return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static inline void hoop__put_u8(hoop__buf *b, uint8_t v)
{
    hoop__put_bytes(b, &v, 1);
}

static inline void hoop__put_u32(hoop__buf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    hoop__put_bytes(b, x, 4);
}

static inline void hoop__put_i64(hoop__buf *b, int64_t v)
{
    hoop__put_u32(b, (uint32_t)((uint64_t)v >> 32));
    hoop__put_u32(b, (uint32_t)(uint64_t)v);
}

static inline void hoop__put_str(hoop__buf *b, const void *p, size_t n)
{
    hoop__put_u32(b, (uint32_t)n);
    hoop__put_bytes(b, p, n);
}

/* Starts a frame (length placeholder + op) and returns its offset for frame_end. */
static inline size_t hoop__frame_begin(hoop__buf *b, uint8_t op)
{
    size_t at = b->len;
    hoop__put_u32(b, 0);
    hoop__put_u8(b, op);
    return at;
}

/* Patches the length of the frame that starts at offset at. */
static inline void hoop__frame_end(hoop__buf *b, size_t at)
{
    if (b->oom) return;
    uint32_t n = (uint32_t)(b->len - at - 4);
    b->data[at] = (uint8_t)(n >> 24);
    b->data[at + 1] = (uint8_t)(n >> 16);
    b->data[at + 2] = (uint8_t)(n >> 8);
    b->data[at + 3] = (uint8_t)n;
}

// ----- bounds-checked reader ---------------------------------------------------------

/* Reads fields from one received frame. Any read past the end sets bad and yields
 * zeros, so a decoder checks bad once at the end. */
typedef struct hoop__rd {
    const uint8_t *p;
    size_t left;
    int bad;
} hoop__rd;

static inline uint32_t hoop__get_u32_be(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline const uint8_t *hoop__get_raw(hoop__rd *r, size_t n)
{
    if (r->bad || r->left < n) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

static inline uint8_t hoop__get_u8(hoop__rd *r)
{
    const uint8_t *p = hoop__get_raw(r, 1);
    return p ? p[0] : 0;
}

static inline uint16_t hoop__get_u16(hoop__rd *r)
{
    const uint8_t *p = hoop__get_raw(r, 2);
    return p ? (uint16_t)(p[0] << 8 | p[1]) : 0;
}

static inline uint32_t hoop__get_u32(hoop__rd *r)
{
    const uint8_t *p = hoop__get_raw(r, 4);
    return p ? hoop__get_u32_be(p) : 0;
}

static inline int64_t hoop__get_i64(hoop__rd *r)
{
    uint64_t hi = hoop__get_u32(r);
    uint64_t lo = hoop__get_u32(r);
    return (int64_t)(hi << 32 | lo);
}

/* Reads a str of at most max bytes; sets bad (and returns NULL) when longer. */
static inline const uint8_t *hoop__get_str(hoop__rd *r, size_t max, size_t *n)
{
    uint32_t len = hoop__get_u32(r);
    if (len > max) r->bad = 1;
    *n = r->bad ? 0 : len;
    return r->bad ? NULL : hoop__get_raw(r, len);
}

// ----- helpers shared by client and server ------------------------------------------

/* 1 when key (n bytes) is a valid store key: 1..HOOP_STORE_KEY_MAX bytes, no NUL. */
int hoop__store_key_ok(const uint8_t *key, size_t n);

/* Compares two tokens in time that depends only on their lengths, not on where they
 * differ; NULL counts as "". Returns 1 when equal. */
int hoop__store_token_eq(const char *a, const char *b);

/* Resolves host:port for a TCP stream (passive: for bind; host NULL or "" = any IPv4
 * address). Fails at once with HOOP_ERR_INVALID naming the host when it cannot be
 * resolved; names under the reserved ".invalid" TLD never reach DNS (RFC 6761 6.4).
 * Free *res with freeaddrinfo. */
hoop_status hoop__store_resolve(const char *host, int port, int passive, struct addrinfo **res);

/* 1 when a is a loopback address (127.0.0.0/8, ::1): one that reaches only this
 * machine. */
int hoop__store_is_loopback(const struct addrinfo *a);

/* Formats a socket address as "1.2.3.4:port" or "[::1]:port". */
void hoop__store_addr_str(const struct sockaddr *sa, socklen_t len, char *out, size_t cap);

/* Sets O_NONBLOCK (and, for TCP, TCP_NODELAY) on fd. */
hoop_status hoop__store_sock_setup(int fd);

/* 1 when the connected socket fd is connected to itself: with nobody listening on a
 * port of the ephemeral range, a connect whose source port the kernel picks equal to
 * that port meets itself (TCP simultaneous open), and a client would read its own
 * request back as the reply. The client treats it as "connection refused". */
int hoop__store_self_connected(int fd);

/* Names the protocol whose first bytes are p[0..n) (n may be small), for a message
 * about a peer that is not what we expected: "HTTP", "TLS", "SSH", "hoop store
 * protocol 1 (an older hoop)", or "unknown bytes". Never NULL (a static string). */
const char *hoop__store_sniff(const uint8_t *p, size_t n);

/* Writes up to 48 of the n bytes as printable text into out: printable ASCII as is,
 * \r \n \t and \xHH for the rest, "..." when cut; always terminated. */
void hoop__store_printable(const uint8_t *p, size_t n, char *out, size_t cap);

/* "speaks HTTP (\"HTTP/1.0 400 ...\")" or "sent bytes of no protocol hoop knows
 * (\"\x7fELF...\")": the two above, worded to follow "it" or "the peer". */
void hoop__store_describe(const uint8_t *p, size_t n, char *out, size_t cap);

// ----- client internals used by barrier and all-gather (store_sync.c) ---------------

/* What a WAIT brought back. On HOOP_OK with values: values[i] / value_bytes[i] point
 * into the client's receive buffer (valid until its next call). On HOOP_ERR_TIMEOUT
 * with lost = 0 (the server's answer at the deadline): missing[0..nmissing) are the
 * indices of the keys that did not exist, and the thread's message is not set (the
 * caller words it). rank_lost = 1 (HOOP_ERR_REMOTE, the server's LOST answer; the
 * connection stays up): lost_rank is the rank the server lost, lost_why[0..lost_why_bytes)
 * its reason (in the receive buffer), missing the keys still missing; the thread's
 * message is not set. lost = 1: the connection ended during the call, with any status
 * (HOOP_ERR_TIMEOUT included) and the thread's message set; when the server said
 * GOODBYE (goodbye = 1), missing lists the keys still missing then (maybe none). Free
 * with hoop__store_wait_result_free. */
typedef struct hoop__store_wait_result {
    const uint8_t **values;
    size_t *value_bytes;
    uint32_t *missing;
    uint32_t nmissing;
    int lost, goodbye;
    int rank_lost, lost_rank;
    const uint8_t *lost_why;
    size_t lost_why_bytes;
} hoop__store_wait_result;

/* Waits until the nkeys keys exist (server-side deadline timeout_ms >= 0). flags:
 * HOOP__STORE_WAIT_VALUES fetches their values; HOOP__STORE_WAIT_LOST ends the wait
 * early when a rank of the server's world is lost ("A rank lost" above). Errors:
 * HOOP_ERR_TIMEOUT (res->missing set), HOOP_ERR_REMOTE (res->rank_lost, or the
 * connection ended), HOOP_ERR_INVALID, HOOP_ERR_NOMEM. */
hoop_status hoop__store_wait_keys(hoop_store *st, const char *const *keys, int nkeys,
                                  unsigned flags, int64_t timeout_ms, hoop__store_wait_result *res);
void hoop__store_wait_result_free(hoop__store_wait_result *res);

/* The same WAIT without blocking the caller until its reply: _send sends it (st must owe
 * no reply: HOOP_ERR_INVALID), _poll waits up to wait_ms (0: only looks) for the reply.
 * *done = 0 (HOOP_OK, res empty): not yet. *done = 1: the WAIT's outcome, as
 * hoop__store_wait_keys returns it; a reply overdue past the timeout + the store's
 * reply grace loses the connection (HOOP_ERR_TIMEOUT, res->lost). Any other call on st
 * meanwhile first reads and drops the owed reply, blocking until it comes or is
 * overdue. For a loop that must keep reaping and reading signals while the store's
 * host is stalled (hooprun's supervisor and meetings). hoop__store_owed: 1 while a
 * reply is owed on a live connection. */
hoop_status hoop__store_wait_send(hoop_store *st, const char *const *keys, int nkeys,
                                  unsigned flags, int64_t timeout_ms);
hoop_status hoop__store_wait_poll(hoop_store *st, int64_t wait_ms, int *done,
                                  hoop__store_wait_result *res);
int hoop__store_owed(const hoop_store *st);

/* For a client leaving while the server does not answer (its process stopped): from now
 * on a SET or a compare-and-set is sent without waiting for its reply (HOOP_OK once in
 * the socket, *swapped 0 and no value for the latter; a full socket for 200 ms loses the
 * connection), hoop_store_destroy's CLOSE likewise, and any
 * other call fails with HOOP_ERR_REMOTE ("has stopped answering"). The server applies
 * them in order when it runs again, so that it learns what this client had to say
 * before its hang-up. A connection lost because a reply did not come before its
 * deadline (the server stalled past it) is taken up again for that: its socket was
 * kept. */
void hoop__store_post_only(hoop_store *st);
/* 1 once hoop__store_post_only was called on st. */
int hoop__store_posting(const hoop_store *st);
/* 1 when st's connection was lost because a reply did not come before its deadline
 * (its socket kept for hoop__store_post_only). */
int hoop__store_stalled(const hoop_store *st);

/* Reads and drops the reply st still owes (a WAIT's from hoop__store_wait_send, or an
 * interrupted call's), waiting at most wait_ms for it: *done = 1 when it was read, or
 * none is owed (also once posting or lost), 0 when it has not come yet (HOOP_OK). A
 * reply overdue past its deadline loses the connection (HOOP_ERR_TIMEOUT); a GOODBYE
 * there is its code. */
hoop_status hoop__store_settle_within(hoop_store *st, int64_t wait_ms, int *done);

/* Makes every call on st that waits for a reply (its own, or one still owed) ask
 * interrupt(arg) after each 100 ms in which none came: nonzero ends the call with
 * HOOP_ERR_TIMEOUT ("stopped waiting ... (interrupted ...)"). A call interrupted while
 * an earlier reply was owed was not sent; one interrupted waiting for its own reply was
 * (the server applies it), and that reply is owed now: the next call reads and drops it
 * first, hoop__store_settle_within alone. A WAIT's result has lost = 1 then, though the
 * connection stays up. NULL: calls wait until their deadline (the default). For
 * hooprun's meetings, which must read a signal while the store's host is stalled. Not
 * thread-safe with calls on st. */
void hoop__store_set_interrupt(hoop_store *st, int (*interrupt)(void *arg), void *arg);

/* Asks the server whether it has lost a rank ("A rank lost" above), or whether key (NULL:
 * none) exists: a WAIT with flag LOST and timeout 0 for key, or for a key nobody sets
 * (HOOP__STORE_PROBE_KEY), answered at once. When key exists, *found = 1 and why gets
 * its value (a phase's failure note: the comm's "hoop.comm.<gen>.failed"); else *rank
 * is the first rank lost, or -1 when none (why then ""), and why gets the server's
 * reason. Errors: the connection ended now because its owner failed (a GOODBYE with a
 * failure: its code) or vanished (HOOP_ERR_REMOTE), the thread's message naming why; a
 * GOODBYE without a failure, or a connection lost before this call, is HOOP_OK with
 * *rank -1. For a phase that waits on something other than the store (the comm's link
 * connects) and wants to stop early. Thread-safety: that of st. */
#define HOOP__STORE_PROBE_KEY "hoop/probe/never-set"
hoop_status hoop__store_probe(hoop_store *st, const char *key, int *rank, int *found, char *why,
                              size_t cap);
/* hoop__store_probe in two halves (hoop__store_wait_send / _poll): *done = 0 while the
 * reply has not come; once it has, the same outcome as hoop__store_probe. A connection
 * already lost: _send does nothing and _poll answers at once (*done = 1, *rank -1). */
hoop_status hoop__store_probe_send(hoop_store *st, const char *key);
hoop_status hoop__store_probe_poll(hoop_store *st, int64_t wait_ms, int *done, int *rank,
                                   int *found, char *why, size_t cap);

/* Deletes several keys in one request; *deleted (may be NULL) counts those that existed. */
hoop_status hoop__store_delete_keys(hoop_store *st, const char *const *keys, int nkeys,
                                    int *deleted);

/* Exchange with chosen peers, the point-to-point part of a communicator's start-up:
 * publishes this rank's blob (bytes) under name and waits for the blobs of peers[0..npeers)
 * (ranks of the store's world, this one excluded; ascending reads best in messages),
 * copied to out in that order (npeers x bytes). Unlike hoop_store_allgather, whose every
 * rank receives every blob (world_size^2 x bytes through rank 0's store thread, 1.7 GB
 * for a comm's three rounds of 552-byte cards at 1024 ranks), a rank receives only what
 * it asked for. *generation gets the round's number, for hoop__store_exchange_end. Keys:
 * "hoop/exchange/<name>/<g>/r<R>", and the counter ".../n" as the all-gather's. Errors,
 * timeouts (naming the peers that never arrived), a rank lost and a store gone as
 * hoop_store_allgather; HOOP_ERR_INVALID for a peer out of range or a reply that would
 * exceed a frame. */
hoop_status hoop__store_exchange(hoop_store *st, const char *name, const void *blob, size_t bytes,
                                 const int *peers, int npeers, void *out, int64_t timeout_ms,
                                 int64_t *generation);

/* Deletes this rank's blob of exchange name's round generation: call it once every peer
 * that needs it is known to have read it (the caller's later sync says so). */
hoop_status hoop__store_exchange_end(hoop_store *st, const char *name, int64_t generation);

/* Folds the world_size blobs (blobs: rank r's at r x bytes) into answer; HOOP_OK, or a
 * failure with the thread's message, which every rank then returns. */
typedef hoop_status (*hoop__store_fold_fn)(void *arg, const void *blobs, int world_size,
                                           void *answer);

/* What more a gather (below) may do: after the answer, peeked (bytes) also gets rank
 * peek's blob (zeros if it cannot be read; peek -1: none), for a caller that needs one
 * more rank's word than the answer holds; and when the gather follows an exchange that
 * every rank passes first (after, its name, and after_generation: its round), a timeout
 * names the ranks still in that exchange apart from those that never arrived (they
 * wait there for the ranks they link to, and were not lost). */
typedef struct hoop__store_gather_more {
    int peek;
    void *peeked;
    const char *after;
    int64_t after_generation;
} hoop__store_gather_more;

/* Gather to rank 0 and its answer, for an agreement that needs every rank's word but not
 * every rank's copy of it: every rank publishes blob (bytes) under name; rank 0 waits for
 * all world_size blobs, folds them (fold(arg, ...), on rank 0 only) into answer
 * (answer_bytes) and publishes the outcome; every rank returns it: HOOP_OK with answer
 * filled, or the fold's status and message (*decided = 1: every rank fails the same
 * way), or rank 0's own failure to gather (a timeout naming the ranks that never
 * arrived, a rank lost: *decided = 0). O(world_size x (bytes + answer_bytes)) through
 * rank 0's store, where an all-gather moves world_size^2 x bytes. The others wait for
 * the answer 2 s longer than rank 0 for the blobs, so that rank 0's reason reaches them;
 * if none comes they name the ranks missing, or rank 0. more: see above (NULL: nothing
 * more). The last rank out deletes the round's keys; rank 0 returns only once every rank
 * has read the answer (as the all-gather). decided may be NULL. Keys:
 * "hoop/gather/<name>/<g>/{r<R>,answer,left}". */
hoop_status hoop__store_gather_fold(hoop_store *st, const char *name, const void *blob,
                                    size_t bytes, hoop__store_fold_fn fold, void *arg, void *answer,
                                    size_t answer_bytes, const hoop__store_gather_more *more,
                                    int64_t timeout_ms, int *decided);

/* The timeout a call with timeout_ms uses: timeout_ms itself when >= 0, else the
 * store's default; clamped to HOOP__STORE_TIMEOUT_MAX_MS. */
int64_t hoop__store_timeout(const hoop_store *st, int64_t timeout_ms);

/* Hands srv to st, which destroys it in hoop_store_destroy (hoop_store_init_env). When
 * it does, the server's GOODBYE carries the failure noted on st (below), if any. */
void hoop__store_own_server(hoop_store *st, hoop_store_server *srv);

/* Whose rendezvous store it is, for messages: owner serves it ("rank 0"), at place
 * ("MASTER_ADDR:MASTER_PORT"), for members counted by size ("WORLD_SIZE"), as in "rank
 * 0's store (MASTER_ADDR:MASTER_PORT = h:p)" and "rank 0 gave up and closed its store".
 * NULL: hoop__store_workers, the workers' store (those three). */
typedef struct hoop__store_naming {
    const char *owner;
    const char *place;
    const char *size;
    int nodes; /* its ranks are nodes' hoopruns: the server says "node 1" (below) */
} hoop__store_naming;

extern const hoop__store_naming hoop__store_workers;

/* hoop_store_init for a rendezvous (hoop_store_init_env): the server is the owner's
 * (naming, NULL: rank 0's at MASTER_ADDR:MASTER_PORT), and messages say so. serving: 1
 * when the caller is the owner, whose server already listens on cfg->port of every
 * address of this host (hoop__store_init_served): a connection to cfg->host refused
 * there means the host is not this one, and fails at once (HOOP_ERR_INVALID naming
 * it) instead of after HOOP_TIMEOUT. */
hoop_status hoop__store_init_rendezvous(hoop_store **out, const hoop_store_config *cfg,
                                        const hoop__store_naming *naming, int serving);

/* What hoop_store_init_env does once it has read the environment, for a caller with a
 * config of its own (hooprun's agents: the nodes' hoopruns, rank = node rank): rank 0
 * serves at cfg->host:cfg->port (every address of its family unless host is loopback)
 * and owns the server; every rank connects through hoop__store_init_rendezvous (naming:
 * as there). Errors:
 * those of hoop_store_server_init (rank 0: "rank 0 cannot serve the store ...") and of
 * hoop_store_init. */
hoop_status hoop__store_init_served(hoop_store **out, const hoop_store_config *cfg,
                                    const hoop__store_naming *naming);

/* hoop_store_server_init for the nodes' hoopruns (naming->nodes): its messages call a
 * rank "node" ("node 1 claimed twice ...; give each node's hooprun its own --node-rank",
 * "--nnodes 3 on node 1 but --nnodes 2 on node 0", "nodes not connected ... when it gave up"). */
hoop_status hoop__store_server_init_nodes(hoop_store_server **out, const hoop_store_config *cfg);

/* 1 when the calling thread's last connection to a store (hoop_store_init and the
 * calls above) failed because the server refused it (a wrong token, world size or rank,
 * a rank claimed twice, a store that gave up): a configuration error, not an outage. */
int hoop__store_last_refused(void);

/* The exit code a tool gives for a start-up that failed with st on this thread: 2 when the
 * caller's settings are to blame (HOOP_ERR_INVALID, HOOP_ERR_MISMATCH, HOOP_ERR_UNSUPPORTED,
 * this rank refused by rank 0's store: the ranks' environments disagree, or rank 0's
 * MASTER_PORT already in use: hoop__store_last_in_use), else 1. The same on every rank
 * of a job started with disagreeing environments. */
int hoop__store_exit_code(hoop_status st);

/* 1 when the calling thread's last hoop_store_server_init (or a rank 0's start above)
 * failed because its port was in use (EADDRINUSE: another job there, or a second rank 0
 * or node 0): a configuration error too. */
int hoop__store_last_in_use(void);

/* Notes why this rank is giving up (code and the thread's message, e.g. a timed-out
 * all-gather); the first note is kept. On rank 0 the owned server passes it to every
 * waiting rank when st is destroyed. The store's own barrier, all-gather and env
 * start-up note their failures; other layers may note theirs. */
void hoop__store_note_failure(hoop_store *st, hoop_status code, const char *msg);

/* This rank cannot start (code, why: the reason, e.g. a setting it refused): tells the
 * server with ABORT (above), so that it gives up and every rank of the job hears why at
 * once; st's connection is then closed (later calls fail, naming this), and st is still
 * to be destroyed by its owner. On rank 0, whose store this is, no ABORT: the failure
 * is noted (hoop__store_note_failure) and the server, when st is destroyed, tells every
 * rank, latecomers for up to 2 s included. Best effort: a server that cannot be told
 * (gone, too old, given up already) changes nothing. Leaves the thread's message as it
 * was. Returns 1 when the server took this rank's ABORT (the others hear this reason),
 * else 0 (rank 0; or the store had given up already, on another rank's word). */
int hoop__store_abort(hoop_store *st, hoop_status code, const char *why);

/* This process, started as a rank of an env:// job (hoop__env_dist_wanted: MASTER_ADDR
 * and WORLD_SIZE, or an srun step), refuses to start: st, with the thread's message
 * naming the setting or flag it refused. Tells the job through rank 0's store
 * (hoop__store_abort), so that every rank fails at once with that reason and code
 * instead of waiting for this one until HOOP_TIMEOUT: rank 0 serves its store for up
 * to 2 s for it, another rank waits up to 5 s (or HOOP_TIMEOUT when that is shorter)
 * for rank 0's store. For the env start-ups' own refusals (hoop_store_init_env,
 * hoop_comm_init_env) and for tools that refuse a flag before joining. Best effort:
 * outside a job, or when the store cannot be reached or served (MASTER_PORT taken, rank
 * 0 not started), nothing more happens. *told (may be NULL) is 1 when this rank's
 * reason is the one the job hears (hoop__store_abort), 0 when the store answered but
 * has its reason from another rank (or this is rank 0), -1 when nobody could be told
 * (no job, no store within the wait): a rank that is otherwise silent says its reason
 * unless it is 0. Returns st with the thread's message unchanged. */
hoop_status hoop__store_env_refuse(hoop_status st, int *told);

/* hoop__store_env_refuse for a tool that has printed its reason already (rank 0, or a
 * rank alone): rank 0's store does not WARN of it again as it tells the latecomers. */
hoop_status hoop__store_env_refuse_said(hoop_status st, int *told);

/* When st owns a server (rank 0's store) that gave up on its job (see "A job's rank
 * refused at start-up" above), writes what happened into buf ("refused rank R (ADDR):
 * WHY", or "heard from rank R (ADDR) that it cannot start: WHY") and returns the code
 * the server gave up with (HOOP_ERR_MISMATCH for a refusal, an ABORT's own); else
 * returns HOOP_OK. Thread-safe. */
hoop_status hoop__store_fault(const hoop_store *st, char *buf, size_t cap);

/* The same, asked of a server. Thread-safe. */
hoop_status hoop__store_server_fault(hoop_store_server *srv, char *buf, size_t cap);

/* When srv refused a HELLO for its token (the last one; none after it gave up), writes
 * "a client at ADDR claiming rank R: wrong or missing HOOP_TOKEN" into buf and returns 1;
 * else 0. st: the same, asked of the server st owns (0 for a store that owns none).
 * Thread-safe. */
int hoop__store_server_stranger(hoop_store_server *srv, char *buf, size_t cap);
int hoop__store_stranger(const hoop_store *st, char *buf, size_t cap);

/* Stops srv as hoop_store_server_destroy does, first telling every client GOODBYE with
 * code and reason (NULL: "the server was shut down"). */
hoop_status hoop__store_server_close(hoop_store_server *srv, hoop_status code, const char *reason);

// ----- internal accessors for tests ---------------------------------------------------

/* Number of connections the server holds now (authenticated or not). Thread-safe. */
int hoop__store_server_nclients(const hoop_store_server *srv);

/* The file descriptor of a client's connection (-1 when lost), for tests. */
int hoop__store_fd(const hoop_store *st);

/* How late a WAIT's reply may come after the server's own deadline before the client
 * gives the connection up (default and minimum: one second): for a caller whose server
 * may stall for a while without being gone (hooprun's agents: a whole process's store).
 * Not thread-safe with calls on st. */
void hoop__store_set_reply_grace(hoop_store *st, int64_t ms);

/* When st owns its server (rank 0): waits until no other client is connected, or ms
 * pass, so that a last reply (a barrier the others still read) goes out before the
 * server's GOODBYE would overtake it. For an owner that leaves after a failure it found
 * in a meeting every rank completed (hooprun's node-0 agent refusing a mismatch). */
void hoop__store_linger(hoop_store *st, int64_t ms);

/* When st owns its server: the owner giving up with a failure (a noted failure, at
 * hoop_store_destroy) tells ranks that have not connected yet, for up to ms (2 s where
 * ms <= 2000), as after a lost rank ("A rank lost"), even when no rank was lost; the
 * destroy returns once every rank was seen, or then. For an owner that may fail before
 * the others came (hooprun's node 0 that cannot run its program, or refuses its
 * environment). The server's form: hoop__store_server_tell_latecomers. Thread-safe. */
void hoop__store_tell_latecomers(hoop_store *st, int ms);

/* When st owns its server: its owner printed its failure itself
 * (hoop__store_server_owner_said). */
void hoop__store_owner_said(hoop_store *st);

void hoop__store_server_tell_latecomers(hoop_store_server *srv, int ms);

/* The owner has printed its failure itself (a tool's own line, before it gives up): the
 * server's early WARN of it, for owners that say it only after the linger, is an INFO
 * line instead (one message, not two). Thread-safe. */
void hoop__store_server_owner_said(hoop_store_server *srv);

/* The code of the GOODBYE that ended st's connection (HOOP_OK: its owner closed it
 * without a failure), or -1 when none came. */
int hoop__store_goodbye_code(const hoop_store *st);

/* Ends st's connection without a CLOSE, so that the server counts this rank lost (see
 * "A rank lost") and every barrier or all-gather still waiting for it fails at once;
 * hoop_store_destroy then only frees st. For a process that leaves a start-up (or
 * hooprun's meeting) on purpose and wants the others told now, after leaving its reason
 * under a key. NULL is ignored. */
void hoop__store_abandon(hoop_store *st);

#endif /* HOOP_BOOTSTRAP_STORE_PROTO_H */
