/*
 * hoop/store.h -- the rendezvous store: a small TCP key-value server hosted by rank 0.
 *
 * The contract follows PyTorch's TCPStore: rank 0 serves at MASTER_ADDR:MASTER_PORT,
 * every rank (rank 0 included) connects as a client. Keys are strings of at most
 * HOOP_STORE_KEY_MAX bytes, values byte strings of at most HOOP_STORE_VALUE_MAX bytes.
 * Every connection presents the shared token (HOOP_TOKEN); a wrong or missing token is
 * refused and logged. Every blocking call has a deadline: the per-call timeout_ms, or,
 * when that is negative, the store's own timeout (config, or HOOP_TIMEOUT).
 *
 * Thread-safety: a hoop_store client handle may be used by one thread at a time.
 * The server runs its own thread and serves many clients at once (poll-based).
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

/* Starts a server thread listening on cfg->host:cfg->port (SO_REUSEADDR). Errors:
 * HOOP_ERR_INVALID for a bad config or an unresolvable host (named); HOOP_ERR_SYSTEM
 * when the port is in use ("127.0.0.1:29500 is already in use") or a socket call
 * fails. */
HOOP_API hoop_status hoop_store_server_init(hoop_store_server **out, const hoop_store_config *cfg);

/* The port the server listens on (useful with port 0). */
HOOP_API int hoop_store_server_port(const hoop_store_server *srv);

/* Stops the server thread and closes every connection. Accepts NULL. */
HOOP_API hoop_status hoop_store_server_destroy(hoop_store_server *srv);

/* Connects to the server at cfg->host:cfg->port, retrying with backoff until the
 * timeout. Errors: HOOP_ERR_INVALID (unresolvable host, named, fails at once),
 * HOOP_ERR_TIMEOUT (nobody answered before the deadline, naming host:port),
 * HOOP_ERR_REMOTE (the server refused the token or closed). */
HOOP_API hoop_status hoop_store_init(hoop_store **out, const hoop_store_config *cfg);

/* Reads the env:// contract (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, HOOP_TOKEN,
 * HOOP_TIMEOUT): rank 0 starts a server (owned by the returned handle), every rank
 * connects. Errors as hoop_store_server_init / hoop_store_init, and HOOP_ERR_INVALID
 * naming a malformed variable. */
HOOP_API hoop_status hoop_store_init_env(hoop_store **out);

/* Closes the connection (and the owned server, on rank 0). Accepts NULL. */
HOOP_API hoop_status hoop_store_destroy(hoop_store *st);

HOOP_API int hoop_store_rank(const hoop_store *st);
HOOP_API int hoop_store_world_size(const hoop_store *st);

/* Sets key to the bytes of value (overwrites). */
HOOP_API hoop_status hoop_store_set(hoop_store *st, const char *key, const void *value,
                                    size_t bytes);

/* Waits until key exists (or the deadline: HOOP_ERR_TIMEOUT naming the key), then copies
 * up to cap bytes of its value into buf and stores the full length in *bytes.
 * HOOP_ERR_INVALID when the value is longer than cap (nothing is lost: call again). */
HOOP_API hoop_status hoop_store_get(hoop_store *st, const char *key, void *buf, size_t cap,
                                    size_t *bytes, int64_t timeout_ms);

/* Atomically adds delta to the integer counter at key (created as 0) and returns the
 * new value in *result (may be NULL). */
HOOP_API hoop_status hoop_store_add(hoop_store *st, const char *key, int64_t delta,
                                    int64_t *result);

/* Waits until every one of the nkeys keys exists. HOOP_ERR_TIMEOUT names the missing ones. */
HOOP_API hoop_status hoop_store_wait(hoop_store *st, const char *const *keys, int nkeys,
                                     int64_t timeout_ms);

/* Deletes key; *deleted (may be NULL) is 1 when it existed. */
HOOP_API hoop_status hoop_store_delete(hoop_store *st, const char *key, int *deleted);

/* Number of keys the server holds. */
HOOP_API hoop_status hoop_store_num_keys(hoop_store *st, int64_t *count);

/* Waits until all world_size ranks have entered the barrier called name. On timeout
 * every waiting rank fails with HOOP_ERR_TIMEOUT and a message listing the missing
 * ranks ("barrier 'start': ranks 2,3 of 4 never arrived"). Names may be reused only
 * after every rank has left the previous barrier of that name. */
HOOP_API hoop_status hoop_store_barrier(hoop_store *st, const char *name, int64_t timeout_ms);

/* All-gather of one small blob per rank: out receives world_size * bytes, rank r's blob
 * at out + r * bytes. Every rank must pass the same bytes (HOOP_ERR_MISMATCH otherwise).
 * Timeouts as hoop_store_barrier, listing the missing ranks. */
HOOP_API hoop_status hoop_store_allgather(hoop_store *st, const char *name, const void *blob,
                                          size_t bytes, void *out, int64_t timeout_ms);

HOOP_EXTERN_C_END

#endif /* HOOP_STORE_H */
