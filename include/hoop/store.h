/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/store.h -- the rendezvous store: a small TCP key-value server hosted by rank 0.
 *
 * The contract follows PyTorch's TCPStore: rank 0 serves at MASTER_ADDR:MASTER_PORT,
 * every rank (rank 0 included) connects as a client. Keys are strings of at most
 * HOOP_STORE_KEY_MAX bytes, values byte strings of at most HOOP_STORE_VALUE_MAX bytes.
 * Every connection presents the shared token (HOOP_TOKEN); a wrong or missing token is
 * refused and logged. Every blocking call has a deadline: the per-call timeout_ms, or,
 * when that is negative, the store's own timeout (config, or HOOP_TIMEOUT). A waiting
 * call is parked on the server and answered when its keys are set (no polling).
 *
 * Errors common to every client call: HOOP_ERR_INVALID for a bad argument (a key must
 * have 1..HOOP_STORE_KEY_MAX bytes and no NUL), HOOP_ERR_REMOTE at once when the server
 * closed the connection or died (the handle then stays unusable: every later call fails
 * the same way), HOOP_ERR_TIMEOUT when no reply came before the deadline (HOOP_TIMEOUT is
 * in seconds). A reply that did not come before the deadline also leaves the handle
 * unusable (the connection is given up; later calls fail with HOOP_ERR_REMOTE), and
 * whether that request took effect is unknown; a get's or wait's own deadline for keys
 * to appear is not such a loss (the server answers it). A server that
 * stops tells its clients why before it closes: when rank 0 gives up (e.g. its
 * all-gather timed out), every rank still waiting fails at once with rank 0's status
 * and reason ("rank 0 gave up and closed its store: allgather 'x': rank 2 of 3 never
 * arrived ...; ranks not connected to the store when it gave up: 2"); when rank 0 dies,
 * they fail with HOOP_ERR_REMOTE saying that the store's host went away, how many ranks had
 * arrived when they did and how long they waited.
 * The wire format is described in src/bootstrap/store_proto.h.
 *
 * Example (every rank; rank 0 also serves):
 *     hoop_store *st;
 *     hoop_status s = hoop_store_init_env(&st);
 *     if (s != HOOP_OK) return s;                     (hoop_last_error() says why)
 *     s = hoop_store_allgather(st, "endpoints", &mine, sizeof(mine), all, -1);
 *     if (s == HOOP_OK) s = hoop_store_barrier(st, "ready", -1);
 *     hoop_store_destroy(st);
 *     return s;
 *
 * Thread-safety: a hoop_store client handle may be used by one thread at a time.
 * The server runs its own thread and serves many clients at once (epoll-based).
 */
#ifndef HOOP_STORE_H
#define HOOP_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/export.h"
#include "hoop/status.h"

HOOP_EXTERN_C_BEGIN

#define HOOP_STORE_KEY_MAX 512
#define HOOP_STORE_VALUE_MAX (16u << 20) /* 16 MiB */

typedef struct hoop_store_server hoop_store_server;
typedef struct hoop_store hoop_store;

typedef struct hoop_store_config {
    const char *host;   /* server: address to bind; client: address to connect to */
    int port;           /* server: 0 picks a free port (see hoop_store_server_port) */
    const char *token;  /* shared secret; NULL or "" means none */
    int rank;           /* this client's rank, for barrier/all-gather and messages; -1 = none */
    int world_size;     /* number of ranks, for barrier/all-gather; 0 = unknown */
    int64_t timeout_ms; /* connect and default per-call deadline; < 0 = HOOP_TIMEOUT */
} hoop_store_config;

#define HOOP_STORE_CONFIG_INIT                                                                \
    {                                                                                         \
        .host = NULL, .port = 0, .token = NULL, .rank = -1, .world_size = 0, .timeout_ms = -1 \
    }

/* Starts a server thread listening on cfg->host:cfg->port (SO_REUSEADDR, so a restart
 * survives TIME_WAIT); a NULL or empty host means every IPv4 address. cfg->token is the
 * token clients must present. cfg->timeout_ms (< 0: HOOP_TIMEOUT) is how long a
 * connection may take to finish its handshake or to finish a message it has started;
 * past that it is closed. A peer that breaks the protocol (bad length, opcode, key,
 * truncated field) is logged at WARN with its address and closed, and one that speaks
 * another protocol (HTTP, TLS, SSH, an older hoop's) is named; others are unaffected.
 * rank (>= 0) names whose store it is in messages ("WORLD_SIZE=3 on rank 1 but
 * WORLD_SIZE=2 on rank 0"). world_size, when > 0, lets the server name the ranks that
 * never connected when it stops, refuse a client that states another world_size, and
 * give up at once when it refuses a rank of its world that had not connected yet and
 * that holds the token but states another world_size (that job cannot start; a wrong
 * token alone fails no one else, as anyone could send one): every connected client then fails
 * with HOOP_ERR_MISMATCH and a message naming that rank and what differs, and later
 * clients are refused. It gives up the same way when a second live connection claims a
 * rank of its world ("rank 3 claimed twice: by 10.0.0.2:41234 and 10.0.0.3:40110; check
 * --node-rank / RANK"); a rank whose first connection has closed may connect again. Errors:
 * HOOP_ERR_INVALID for a bad config or an unresolvable host (named); HOOP_ERR_SYSTEM when the port
 * is in use
 * ("127.0.0.1:29500 is already in use") or a socket call fails. */
HOOP_API hoop_status hoop_store_server_init(hoop_store_server **out, const hoop_store_config *cfg);

/* The port the server listens on (useful with port 0). */
HOOP_API int hoop_store_server_port(const hoop_store_server *srv);

/* Stops the server thread (promptly, through an eventfd), tells every client that the
 * server was shut down (waiting clients fail at once with HOOP_ERR_REMOTE and that
 * reason), closes every connection and frees everything. Waits at most 0.2 s for the
 * last words to leave. Accepts NULL. */
HOOP_API hoop_status hoop_store_server_destroy(hoop_store_server *srv);

/* Connects to the server at cfg->host:cfg->port, retrying with backoff (10 ms doubling
 * to 1 s, jittered) until cfg->timeout_ms (< 0: HOOP_TIMEOUT), which is also the default
 * deadline of later calls. cfg->rank and cfg->world_size are needed only for barrier and
 * all-gather. Errors: HOOP_ERR_INVALID (unresolvable host, named, fails at once; names
 * under ".invalid" never reach DNS; or something else listens there: fails at once,
 * naming the protocol it speaks -- HTTP, TLS, SSH, or unknown bytes, shown),
 * HOOP_ERR_TIMEOUT (nobody answered before the deadline, naming host:port),
 * HOOP_ERR_REMOTE (the server refused the token, or a world_size > 0 other than its
 * own, or said it is shutting down). */
HOOP_API hoop_status hoop_store_init(hoop_store **out, const hoop_store_config *cfg);

/* Reads the env:// contract (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, HOOP_TOKEN,
 * HOOP_TIMEOUT): rank 0 starts a server (owned by the returned handle) on MASTER_ADDR
 * when it is a loopback address, else on every address of its family; every rank
 * connects. Errors as hoop_store_server_init / hoop_store_init, and HOOP_ERR_INVALID
 * naming a malformed variable. */
HOOP_API hoop_status hoop_store_init_env(hoop_store **out);

/* Tells the server this rank leaves on purpose (waiting up to 1 s for its answer), so
 * that a later connection as the same rank is no restart of a lost rank, then closes
 * the connection (and the owned server, on rank 0: it tells the ranks still connected
 * why, i.e. the failure of this handle's barrier, all-gather or env start-up, if one
 * failed; after a rank was lost, it waits up to 2 s more for the ranks that never
 * connected, to tell them too). Leaves the thread's message as it was. Accepts NULL. */
HOOP_API hoop_status hoop_store_destroy(hoop_store *st);

HOOP_API int hoop_store_rank(const hoop_store *st);
HOOP_API int hoop_store_world_size(const hoop_store *st);

/* Sets key to the bytes of value (overwrites). */
HOOP_API hoop_status hoop_store_set(hoop_store *st, const char *key, const void *value,
                                    size_t bytes);

/* Waits until key exists (or the deadline: HOOP_ERR_TIMEOUT naming the key), then copies
 * up to cap bytes of its value into buf and stores the full length in *bytes (may be
 * NULL). buf may be NULL when cap is 0. timeout_ms 0 checks without waiting.
 * HOOP_ERR_INVALID when the value is longer than cap (nothing is lost: call again). */
HOOP_API hoop_status hoop_store_get(hoop_store *st, const char *key, void *buf, size_t cap,
                                    size_t *bytes, int64_t timeout_ms);

/* Atomically adds delta to the integer counter at key (created as 0) and returns the
 * new value in *result (may be NULL). The value is kept as decimal text, so a get
 * returns e.g. "-2" and a set of "40" can be added to. HOOP_ERR_INVALID when the
 * present value is not such an integer or the sum would overflow int64. */
HOOP_API hoop_status hoop_store_add(hoop_store *st, const char *key, int64_t delta,
                                    int64_t *result);

/* Compare-and-set, as PyTorch's TCPStore compare_set: atomically, when key is as
 * expected, it is set to desired (desired_bytes bytes). expected NULL means "the key does
 * not exist"; otherwise the key must hold exactly expected_bytes bytes equal to expected
 * (0 bytes: an empty value, which is not the same as no key; TCPStore cannot tell the
 * two apart). *swapped (may be NULL) is 1 when desired was set. Up to cap bytes of the
 * value key holds after the call (desired when swapped, else what was there; nothing
 * when it does not exist) are copied into buf, the full length into *bytes (may be
 * NULL); buf NULL (with cap 0) asks for no value. An absent key and an empty value
 * both read as 0 bytes here (hoop_store_get with timeout 0 tells them apart). "First one
 * wins" is
 *     hoop_store_compare_set(st, "winner", NULL, 0, me, n, &won, NULL, 0, NULL).
 * HOOP_ERR_INVALID when expected is NULL with expected_bytes > 0, when expected_bytes +
 * desired_bytes exceeds HOOP_STORE_VALUE_MAX, or
 * when buf is given and the value after the call is longer than cap (the set happened
 * or not as *swapped says). Errors as every client call. */
HOOP_API hoop_status hoop_store_compare_set(hoop_store *st, const char *key, const void *expected,
                                            size_t expected_bytes, const void *desired,
                                            size_t desired_bytes, int *swapped, void *buf,
                                            size_t cap, size_t *bytes);

/* Waits until every one of the nkeys keys (1..65536) exists. HOOP_ERR_TIMEOUT names the
 * missing ones. */
HOOP_API hoop_status hoop_store_wait(hoop_store *st, const char *const *keys, int nkeys,
                                     int64_t timeout_ms);

/* Deletes key; *deleted (may be NULL) is 1 when it existed. */
HOOP_API hoop_status hoop_store_delete(hoop_store *st, const char *key, int *deleted);

/* Number of keys the server holds. */
HOOP_API hoop_status hoop_store_num_keys(hoop_store *st, int64_t *count);

/* Waits until all world_size ranks have entered the barrier called name (1..432 bytes).
 * On timeout every waiting rank fails with HOOP_ERR_TIMEOUT and a message listing the
 * missing ranks ("barrier 'start': ranks 2,3 of 4 never arrived"). A name may be used
 * again and again (each use is a new generation, whose keys the last rank out deletes),
 * but not after a barrier of that name failed. When a rank's connection to rank 0's
 * store ends without hoop_store_destroy (its process died or was killed) while the
 * barrier still lacks a rank, every rank in it, and every rank entering it later (a rank
 * restarted by hand included), fails at once with HOOP_ERR_REMOTE naming that rank, its
 * address and "restart the whole job (hooprun --max-restarts)"; a barrier that already
 * has every rank completes as ever. HOOP_ERR_USAGE when the handle has no
 * rank / world_size. Costs each rank 4 round trips to the server (the last rank in and
 * the last rank out make one more each); keys live under "hoop/barrier/<name>/". */
HOOP_API hoop_status hoop_store_barrier(hoop_store *st, const char *name, int64_t timeout_ms);

/* All-gather of one small blob per rank: out receives world_size * bytes, rank r's blob
 * at out + r * bytes. Every rank must pass the same bytes (HOOP_ERR_MISMATCH otherwise,
 * on every rank, naming a rank that differs). world_size * (bytes + 4) must fit in one
 * reply (about HOOP_STORE_VALUE_MAX; HOOP_ERR_INVALID otherwise). Timeouts, name rules
 * a rank lost, and HOOP_ERR_USAGE as hoop_store_barrier, listing the missing ranks; keys live under
 * "hoop/allgather/<name>/". */
HOOP_API hoop_status hoop_store_allgather(hoop_store *st, const char *name, const void *blob,
                                          size_t bytes, void *out, int64_t timeout_ms);

HOOP_EXTERN_C_END

#endif /* HOOP_STORE_H */
