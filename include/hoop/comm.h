/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/comm.h -- the communicator: a group of ranks, its links and its progress thread.
 *
 * A hoop_comm connects world_size ranks (one per process, or one per thread in tests),
 * owns the transport links between them and ONE progress thread that runs the
 * collectives (include/hoop/collectives.h) in the order they were called. Every rank
 * must call the same collectives in the same order, as in MPI and NCCL.
 *
 * Example, under hooprun (which sets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, ...):
 *
 *     hoop_comm *comm;
 *     if (hoop_comm_init_env(&comm) != HOOP_OK) {
 *         fprintf(stderr, "%s\n", hoop_last_error());
 *         return 2;
 *     }
 *     float x[4] = {1, 2, 3, 4};
 *     hoop_allreduce(comm, x, x, 4, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);  // blocking
 *     hoop_comm_destroy(comm);
 *
 * Ranks that are threads of one process meet through a hoop_rendezvous instead of the
 * TCP store: create one with hoop_rendezvous_new(&rv, world_size), set cfg.rendezvous
 * in each thread's config and call hoop_comm_init(&comm, &cfg) from every thread.
 *
 * Failure model: a closed or reset link fails the running collective with
 * HOOP_ERR_REMOTE naming the peer; the rank then tells its ring neighbour and closes its
 * own links, so every rank fails within milliseconds. After a failure every call on the
 * comm returns the same error; destroy it and start again.
 */
#ifndef HOOP_COMM_H
#define HOOP_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/export.h"
#include "hoop/status.h"
#include "hoop/store.h"

HOOP_EXTERN_C_BEGIN

typedef struct hoop_comm hoop_comm;
typedef struct hoop_request hoop_request;
typedef struct hoop_rendezvous hoop_rendezvous;

/* All-reduce algorithms (HOOP_ALGO): one list, from which the enum, the names
 * (hoop_algo_name, hoop_algo_from_name, HOOP_ALGO's choices) and the checks of
 * hoop_comm_init and hoop_comm_set_algo are all derived. AUTO picks by size and world
 * size from an alpha-beta-gamma cost model (src/collectives/algo.c).
 *   ring:   reduce-scatter + all-gather ring (Patarasuk & Yuan 2009)
 *   rd:     recursive doubling (Thakur, Rabenseifner & Gropp 2005)
 *   rhd:    recursive halving-doubling, Rabenseifner's algorithm (same)
 *   direct: in-place on memory from hoop_comm_alloc_shared or hoop_comm_alloc_shared_cuda:
 *           each rank reduces its share straight from its peers' copies (other buffers run
 *           the cost model's pick) */
#define HOOP_ALGO_MAP(X) \
    X(AUTO, 0, "auto")   \
    X(RING, 1, "ring")   \
    X(RD, 2, "rd")       \
    X(RHD, 3, "rhd")     \
    X(DIRECT, 4, "direct")
typedef enum hoop_algo {
#define HOOP_ALGO_ENUM_(name, val, str) HOOP_ALGO_##name = val,
    HOOP_ALGO_MAP(HOOP_ALGO_ENUM_)
#undef HOOP_ALGO_ENUM_
        HOOP_ALGO_COUNT_ /* not an algorithm: one past the last */
} hoop_algo;
/* "|auto|ring|rd|rhd|direct": skip the first character for the '|'-separated list
 * (indexing rather than "+ 1", which clang's -Wstring-plus-int takes for a mistake). */
#define HOOP_ALGO_CHOICES_(name, val, str) "|" str
#define HOOP_ALGO_CHOICES (&(HOOP_ALGO_MAP(HOOP_ALGO_CHOICES_))[1])

#define HOOP_COMM_CONFIG_VERSION 1

typedef struct hoop_comm_config {
    size_t size;                 /* sizeof(hoop_comm_config), set by the initializer */
    int version;                 /* HOOP_COMM_CONFIG_VERSION */
    int rank;                    /* 0..world_size-1 */
    int world_size;              /* >= 1 */
    int local_rank;              /* -1 = rank */
    hoop_store *store;           /* rendezvous through this store (not owned) ... */
    hoop_rendezvous *rendezvous; /* ... or through this in-process table (not owned) */
    const char *token;           /* shared secret; NULL = HOOP_TOKEN */
    const char *master_addr;     /* listen on the interface routing here; NULL = loopback */
    int64_t timeout_ms;          /* deadline of every wait, ms (> 0); < 0 = HOOP_TIMEOUT */
    int nsocks;                  /* TCP streams per link, [1, 16]; 0 = HOOP_TCP_NSOCKS */
    size_t chunk_bytes;          /* bytes per pipelined chunk, [64, 64M], rounded down to a
                                  * multiple of 8; 0 = HOOP_CHUNK_BYTES ([4K, 64M]); the
                                  * same on every rank */
    hoop_algo algo;              /* all-reduce algorithm; AUTO = HOOP_ALGO, else cost model */
} hoop_comm_config;

#define HOOP_COMM_CONFIG_INIT                                                                \
    {                                                                                        \
        .size = sizeof(hoop_comm_config), .version = HOOP_COMM_CONFIG_VERSION, .rank = -1,   \
        .world_size = 0, .local_rank = -1, .store = NULL, .rendezvous = NULL, .token = NULL, \
        .master_addr = NULL, .timeout_ms = -1, .nsocks = 0, .chunk_bytes = 0,                \
        .algo = HOOP_ALGO_AUTO                                                               \
    }

/* Creates an in-process meeting point for world_size ranks that are threads of one
 * process (tests, single-process experiments). Errors: HOOP_ERR_INVALID (world_size <
 * 1), HOOP_ERR_NOMEM. Thread-safe once created; free it after every comm is built. */
HOOP_API hoop_status hoop_rendezvous_new(hoop_rendezvous **out, int world_size);

/* Frees a rendezvous. Accepts NULL. */
HOOP_API void hoop_rendezvous_free(hoop_rendezvous *rv);

/* Builds a communicator from cfg: opens a listening endpoint, publishes it through
 * cfg->store or cfg->rendezvous, connects to the peers its algorithms need (ring
 * neighbours, recursive-doubling partners and the peers the algorithm table's rows
 * mark), authenticating with the token, and
 * starts the progress thread. Blocks until every link is up or the deadline. With
 * cfg->store, a rank other than 0 whose start-up fails on its own before the ranks
 * agree on their links (a setting its transport refuses) tells rank 0's store, which
 * then fails every rank at once with that status and message; that rank's store handle
 * is closed by it (calls on it fail; destroy it as usual).
 * Errors: HOOP_ERR_INVALID (bad config, naming the field), HOOP_ERR_MISMATCH (ranks
 * whose chunk sizes differ: every rank fails, naming rank 0's and the first that
 * differs), HOOP_ERR_TIMEOUT (a peer never showed up), HOOP_ERR_REMOTE (a peer refused
 * the token or closed), HOOP_ERR_SYSTEM. Thread-safe (each call builds its own comm). */
HOOP_API hoop_status hoop_comm_init(hoop_comm **out, const hoop_comm_config *cfg);

/* Builds a communicator from the env:// contract: MASTER_ADDR, MASTER_PORT, RANK,
 * WORLD_SIZE, LOCAL_RANK, HOOP_TOKEN, HOOP_TIMEOUT. Rank 0 serves the rendezvous
 * store at MASTER_ADDR:MASTER_PORT; the comm owns the store client. Once per process
 * while that comm lives: a second call finds the port taken by the first one's store on
 * rank 0 (HOOP_ERR_SYSTEM, saying so). For several communicators over the same ranks
 * (there is no split or dup), make the store once with hoop_store_init_env
 * (hoop/store.h) and pass it as config.store to hoop_comm_init for each, in the same
 * order on every rank; destroy the store after them. When rank 0's start-up fails (a
 * HOOP_* setting it refuses, a transport that cannot open, ...), every rank fails with
 * rank 0's status and message: those connected at once, those not connected yet when
 * they come within 2 s (rank 0 keeps its store that long, so it returns up to 2 s
 * later; not after a time-out); a rank that comes later finds no store and times out.
 * When another rank's start-up fails on its own (a HOOP_* setting it refuses, a
 * transport that cannot open), it tells rank 0's store, waiting up to 5 s for it, and
 * every rank fails at once with its status and message ("rank 0's store heard from rank
 * R (ADDR) that it cannot start: ...").
 * Errors as hoop_comm_init, and HOOP_ERR_INVALID naming a malformed variable. */
HOOP_API hoop_status hoop_comm_init_env(hoop_comm **out);

/* Stops the progress thread, fails the collective still running ("... destroyed while
 * this call ran": its receive buffer then holds unspecified data) and those still queued
 * ("... before this call ran") with HOOP_ERR_USAGE, says goodbye to the peers and
 * closes every link. Requests not yet waited stay valid
 * until waited. Accepts NULL. Call from one thread, after the last collective.
 * HOOP_ERR_USAGE, destroying nothing, while a hoop_ddp built on comm lives (destroy it
 * first: its buckets live in the comm's shared memory). */
HOOP_API hoop_status hoop_comm_destroy(hoop_comm *comm);

/* Fails the communicator now: the running and queued collectives return
 * HOOP_ERR_REMOTE, the peers are told this rank aborted (they fail within milliseconds,
 * naming it) and the links are closed. destroy must still be called. Thread-safe. */
HOOP_API hoop_status hoop_comm_abort(hoop_comm *comm);

HOOP_API int hoop_comm_rank(const hoop_comm *comm);
HOOP_API int hoop_comm_world_size(const hoop_comm *comm);
HOOP_API int hoop_comm_local_rank(const hoop_comm *comm);

/* Allocates memory that the ranks of comm on this host map into each other's address
 * spaces, for buffers that are all-reduced again and again (DDP's gradient buckets).
 * Collective: every rank calls it, in the same order, with the same bytes. Returns
 * zeroed, page-aligned memory of at least bytes in *ptr.
 * When every rank of comm is on this host and shared memory is allowed (HOOP_TRANSPORT
 * auto or shm), an in-place all-reduce (sendbuf == recvbuf) that lies wholly inside such
 * memory, at the same offset on every rank, runs the direct algorithm: once every rank
 * has arrived, rank r reduces its 1/world_size share of the elements reading every
 * rank's copy and writes the result into every copy; a token exchange then keeps each
 * rank from returning while a peer still touches its memory. The data never passes
 * through a transport: per rank, (n-1)/n of the bytes are read from peers and written
 * back, against 2(n-1)/n sent and received through rings by the ring algorithm. This is
 * the single-copy intra-node scheme of registered buffers (NCCL's user-buffer
 * registration, MPI-3's MPI_Win_allocate_shared). In-place all-gathers and
 * reduce-scatters whose world_size x count elements lie in such memory run direct too:
 * each rank copies the other ranks' blocks from their copies, or reduces its own block
 * over every copy into its own. Each rank decides from its own buffer, so the ranks of
 * such a call must agree: the same shared buffer at the same offset on every rank, or
 * private memory on every rank; a call where they differ fails on every rank with
 * HOOP_ERR_MISMATCH naming both placements, and fails the comm, as any other mismatch
 * does. Anywhere else (ranks on several hosts, HOOP_TRANSPORT=tcp, /proc not usable
 * between the processes) the memory is private and collectives on it run as on any
 * memory. Under the AUTO algorithm, direct is chosen
 * from 8 KiB (the whole buffer) up on 2 ranks and from 64 KiB up on more (measured
 * crossovers); under DIRECT at any size.
 * Errors: HOOP_ERR_INVALID (NULL comm or ptr, bytes 0), HOOP_ERR_MISMATCH (ranks asked
 * for different sizes; names both), HOOP_ERR_NOMEM (also, before anything is reserved,
 * bytes above the memory left to the process: MemAvailable + SwapFree, or its cgroup's
 * memory.max; names both), HOOP_ERR_SYSTEM, or the error that failed the comm. Call from
 * the thread that issues collectives. */
HOOP_API hoop_status hoop_comm_alloc_shared(hoop_comm *comm, size_t bytes, void **ptr);

/* Releases memory from hoop_comm_alloc_shared on this comm: unmaps this rank's copy and
 * its views of the peers' copies. Local (not collective). Accepts NULL.
 * hoop_comm_destroy releases what is left. Errors: HOOP_ERR_INVALID when ptr is not the
 * start of such memory; HOOP_ERR_USAGE (nothing released) while a collective on this
 * comm whose buffers lie in it is still queued or running: wait for it first (calls on
 * other communicators are not tracked: do not free under them). Call from the thread
 * that issues collectives. */
HOOP_API hoop_status hoop_comm_free_shared(hoop_comm *comm, void *ptr);

/* 1 when [ptr, ptr + bytes) lies inside memory from hoop_comm_alloc_shared or
 * hoop_comm_alloc_shared_cuda that every rank of comm maps, so in-place all-reduces on it
 * can run direct; else 0 (also on a 1-rank comm, and for NULL). No errors. Call from the
 * thread that issues collectives (it reads the list that alloc and free change). */
HOOP_API int hoop_comm_is_shared(const hoop_comm *comm, const void *ptr, size_t bytes);

/* hoop_comm_alloc_shared for GPU buffers: allocates device memory on this rank's GPU (the
 * worker's CUDA device: HOOP_CUDA_DEVICE, else LOCAL_RANK modulo the device count; the
 * calling thread is bound to it) that the ranks of comm on this node map into each
 * other's address spaces. Collective: every rank calls it, in the same order among its
 * collectives, with the same bytes. Returns zeroed device memory of at least bytes,
 * page-aligned, in *ptr (one cudaMalloc allocation of its own).
 * Each rank's copy is mapped by the ranks of other processes through CUDA IPC (a handle
 * of it opened with cudaIpcOpenMemHandle) and used by ranks of the same process (threads)
 * through its pointer; several ranks may share one GPU. When every rank maps every copy
 * (all ranks on this node, HOOP_TRANSPORT auto or shm, at most 64 ranks, CUDA IPC
 * possible between their devices), in-place all-reduces, all-gathers and reduce-scatters
 * lying wholly inside such memory run the direct algorithm on the device, in the host
 * forms and the _stream forms alike: once every rank has called the collective (the
 * vote), rank r's kernel, on a stream of the comm, reduces its 1/world_size share of the
 * elements reading every rank's copy and writes the result into every copy (bitwise the
 * host direct algorithm's results: f16 / bf16 combined in f64 and rounded once, the same
 * on every rank); the progress thread polls the kernel's event (it never blocks on the
 * GPU), and a token exchange keeps each rank from completing while a peer's kernel
 * still reads or writes its copy. No byte passes through a transport or host memory.
 * The host forms read the copy as it is when the call is made: work that writes it must
 * have finished (cudaStreamSynchronize of its stream, or a blocking cudaMemcpy); the
 * _stream forms start after the work queued before them, as always. AUTO chooses direct
 * by the same sizes as on host memory (hoop_comm_alloc_shared).
 * Anywhere else the memory is plain device memory of this rank, and collectives on it
 * run staged through host memory as on any device buffer.
 * Errors: HOOP_ERR_INVALID (NULL comm or ptr, bytes 0), HOOP_ERR_UNSUPPORTED (no CUDA
 * backend or device, named), HOOP_ERR_MISMATCH (ranks asked for different sizes; names
 * both), HOOP_ERR_NOMEM (the device is full), HOOP_ERR_CUDA (naming the call), or the
 * error that failed the comm. Call from the thread that issues collectives. */
HOOP_API hoop_status hoop_comm_alloc_shared_cuda(hoop_comm *comm, size_t bytes, void **ptr);

/* Releases memory from hoop_comm_alloc_shared_cuda on this comm. Memory that every rank
 * maps (hoop_comm_is_shared: the same answer on every rank) is released collectively,
 * since CUDA leaves a copy freed while a peer still maps it undefined: every rank calls
 * this for it, in the same order among its collectives; each closes its mappings of the
 * peers' copies, a barrier proves all have, then each frees its own copy. Other such
 * memory is released locally. The free waits for the device (cudaFree): not from a
 * thread whose progress a pending _stream call of this process needs (see
 * include/hoop/collectives.h). Accepts NULL. hoop_comm_destroy releases what is left the
 * same way (with the barrier while the comm has not failed). Errors: HOOP_ERR_INVALID
 * when ptr is not the start of such memory (host memory from hoop_comm_alloc_shared is
 * named: it is freed with hoop_comm_free_shared); HOOP_ERR_USAGE (nothing released) while
 * a collective on it is still queued or running; the barrier's error (HOOP_ERR_REMOTE,
 * HOOP_ERR_TIMEOUT: the memory is released anyway). Call from the thread that issues
 * collectives. */
HOOP_API hoop_status hoop_comm_free_shared_cuda(hoop_comm *comm, void *ptr);

/* Chooses the all-reduce algorithm for the collectives called after this one (AUTO =
 * cost model; DIRECT applies to calls whose buffers allow it on every rank alike, see
 * hoop_comm_alloc_shared, and calls on private memory on every rank fall back to the
 * cost model). Every rank must make the same choice; a difference is
 * reported as HOOP_ERR_MISMATCH. Call from the thread that issues collectives. */
HOOP_API hoop_status hoop_comm_set_algo(hoop_comm *comm, hoop_algo algo);

/* Total payload bytes this rank has sent to peers (collective data only, not headers).
 * Thread-safe; for byte-count tests and benchmarks. */
HOOP_API uint64_t hoop_comm_bytes_sent(const hoop_comm *comm);

/* "ring", "rd", "rhd", "direct", "auto"; "?" when unknown. */
HOOP_API const char *hoop_algo_name(hoop_algo algo);

/* Parses an algorithm name (as HOOP_ALGO). HOOP_ERR_INVALID names the bad word, or the
 * NULL argument. */
HOOP_API hoop_status hoop_algo_from_name(const char *name, hoop_algo *out);

/* Reports whether req has finished, after one non-blocking round of progress when no
 * other thread is driving it. When it has, *done = 1, the request is released and the
 * collective's status is returned (HOOP_OK, or the error that failed it); otherwise
 * *done = 0 and HOOP_OK. Never blocks. Thread-safe with respect to the progress thread;
 * do not destroy the comm while another thread tests one of its requests. */
HOOP_API hoop_status hoop_test(hoop_request *req, int *done);

/* Waits for req until it finishes or timeout_ms passes (< 0 = the comm's timeout,
 * HOOP_TIMEOUT, plus 1.2 s for the comm's own timeout failure to arrive: it names the
 * call and the rank that the ranks were waiting for). While the communicator makes progress the
 * caller drives it itself (no hand-off to the progress thread on the fast path); after 50 us
 * without progress it sleeps. On completion releases the request and returns the collective's
 * status. HOOP_ERR_TIMEOUT leaves the request valid: wait again or destroy the comm. Do not destroy
 * the comm while another thread waits on one of its requests. */
HOOP_API hoop_status hoop_wait(hoop_request *req, int64_t timeout_ms);

HOOP_EXTERN_C_END

#endif /* HOOP_COMM_H */
