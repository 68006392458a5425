/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/transport/transport.h -- the versioned transport vtable (internal).
 *
 * A transport moves bytes between two ranks; the collectives never know which one runs
 * under them. The shape follows a network plugin: a listening endpoint publishes a
 * handle (at most HOOP_TP_HANDLE_MAX bytes) through the rendezvous; peers connect to it
 * and the owner accepts; data then flows over one-directional comms (a send comm on the
 * connecting side, a recv comm on the accepting side) with non-blocking isend / irecv /
 * test. The k-th isend on a send comm is received by the k-th irecv on the matching recv
 * comm, and both must name the same number of bytes. A receive whose message has another
 * length is reported once by its test (HOOP_ERR_INTERNAL naming the peer and both
 * lengths, bad_req; see test below): tcp and shm send a frame word with each message for
 * this (frame.h), ib compares an eager message's length, the byte count of its slot
 * write's completion. ib's rendezvous messages (above its slot size) are checked by the
 * sender instead, against the length in the receiver's grant: there a disagreement fails
 * the send comm (HOOP_ERR_INTERNAL naming both lengths). A disagreement that also moves a
 * message across ib's eager/rendezvous boundary may show only as a stalled link.
 *
 * Blocking rules: no slot ever blocks. connect and accept are resumable state machines
 * (return HOOP_OK with *out == NULL until done, call again before the caller's
 * deadline); isend / irecv return *req == NULL when they would block; test makes
 * progress on the request's comm and reports completion.
 *
 * Thread-safety: a comm (and its requests) is used by one thread at a time (in hoop,
 * the communicator's progress thread). Different comms may be used concurrently.
 */
#ifndef HOOP_TRANSPORT_TRANSPORT_H
#define HOOP_TRANSPORT_TRANSPORT_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "hoop/status.h"

#define HOOP_TRANSPORT_API_VERSION 4
#define HOOP_TP_HANDLE_MAX 128 /* bytes exchanged through the bootstrap store */
#define HOOP_TP_TOKEN_MAX 64   /* longest accepted HOOP_TOKEN, bytes */

/* Memory kinds for reg_mr. */
enum { HOOP_TP_MEM_HOST = 0, HOOP_TP_MEM_PINNED = 1, HOOP_TP_MEM_CUDA = 2 };

/* Settings for a transport context; the communicator fills them from its config. */
struct hoop_tp_config {
    int rank;                /* this rank, presented to peers when connecting */
    const char *token;       /* shared secret (HOOP_TOKEN); NULL or "" = none */
    const char *ifname;      /* interface name or prefix for the listen address; NULL = auto */
    const char *master_addr; /* the auto choice routes towards this host; NULL = loopback */
    int nsocks;              /* streams per link (HOOP_TCP_NSOCKS) */
    size_t ring_bytes;       /* shm: ring bytes per link, a power of two (0 = 4 MiB) */
    struct hoop_tp_ib_config {
        const char *hca;        /* HOOP_IB_HCA (NCCL's syntax); NULL = every device */
        int gid_index;          /* HOOP_IB_GID_INDEX; -1 = automatic */
        const char *addr_range; /* HOOP_IB_ADDR_RANGE: CIDR the automatic GID must be in */
        int timeout;            /* HOOP_IB_TIMEOUT: ack timeout exponent (4.096 us x 2^t) */
        int retry_cnt;          /* HOOP_IB_RETRY_CNT */
        int tc, sl;             /* HOOP_IB_TC (traffic class), HOOP_IB_SL (service level) */
        int reg_cache;          /* HOOP_IB_REG_CACHE: 0 = register per message; 1, 2 = cache
                                 * user-buffer registrations (1: the comm forgets a call's
                                 * buffers when it ends, progress.c; 2: kept until evicted) */
        int local_rank;         /* picks among the ports HOOP_IB_HCA selects (round robin) */
    } ib; /* timeout 0 means the defaults: every device, automatic GID, timeout 20, retry 7 */
};

/* The cost of a link (Hockney's model): alpha seconds per message, beta seconds per byte.
 * The collectives' alpha-beta-gamma model takes them from the links it runs over. */
struct hoop_tp_cost {
    double alpha, beta;
};

/* A consumer of received bytes: called in order with contiguous pieces (at = the
 * piece's byte offset in the message, n bytes, a multiple of the request's unit). The
 * piece lives in the transport's memory and is valid only during the call. */
typedef void (*hoop_tp_consume_fn)(void *arg, const void *piece, size_t at, size_t n);

/* Embedded first in each implementation's comm and recovered with HOOP_CONTAINER_OF. */
struct hoop_tp_comm {
    const struct hoop_transport *tp;
    int peer;      /* the rank at the other end (-1 for a listen comm) */
    int channel;   /* the connector's channel number, seen by the acceptor */
    void *bad_req; /* set by a test that returns HOOP_ERR_INTERNAL because the
                    * request's message arrived with another length than it was posted for
                    * (frame.h): that request stays live (tested again, it goes on as
                    * posted); any other failure releases the request as usual */
};

/*
 * Slot contract (every slot returns hoop_status; HOOP_ERR_REMOTE names the peer):
 *   init      creates a context from cfg.
 *   listen    opens a listening endpoint and fills handle (<= HOOP_TP_HANDLE_MAX bytes).
 *   connect   non-blocking: *send_comm == NULL until connected; the transport keeps its
 *             progress in the caller's copy of handle, so pass the same copy again.
 *             channel is shown to the acceptor. A refused token fails HOOP_ERR_REMOTE.
 *   accept    non-blocking: *recv_comm == NULL until a peer has connected and proved
 *             the token; strangers are refused and logged, never returned.
 *   init      creates a context from cfg; HOOP_ERR_UNSUPPORTED when this host cannot run
 *             the transport at all (shm: no memfd; ib: no usable device), which auto
 *             mode takes as "go without it".
 *   reachable (optional) 1 when this context can connect to the peer that published
 *             handle, 0 when not (shm: another host or network namespace); NULL = any.
 *   reg_mr    (optional) registers bytes at buf (memory kind HOOP_TP_MEM_*) with the
 *             context for the life of *mr; NULL when the transport needs no registration
 *             (tcp, shm). Long-lived buffers (the communicator's staging slots) are
 *             registered once; pass their mr to isend / irecv.
 *   dereg_mr  (optional) pairs with reg_mr.
 *   isend     queues bytes from buf; *req == NULL means "would block, retry". mr is
 *             reg_mr's handle covering buf, or NULL: the transport then registers (or
 *             stages) buf itself (ib: through its registration cache).
 *   irecv     queues a receive of exactly bytes into buf; *req == NULL as for isend.
 *   irecv_fn  (optional) like irecv, but the bytes go to fn piece by piece, straight from
 *             the transport's memory (shm: the ring), so a reduction needs no staging
 *             copy; unit (1, 2, 4 or 8, dividing bytes) is the piece granularity, and
 *             pieces are aligned to it. NULL where the transport has no such memory.
 *   test      progresses the request's comm; *done = 1 when finished, and then the
 *             request is released. A failed comm fails every pending request. A receive
 *             whose message arrived with another length than it was posted for fails its
 *             test once with HOOP_ERR_INTERNAL and sets the comm's bad_req to it; unlike
 *             any other failure, that request stays live and goes on as posted (its
 *             posted bytes are delivered; on tcp and shm the stream is then out of step,
 *             and the next receive says so).
 *   pollfds   (optional) lists up to cap pollfds a caller may sleep on for this comm;
 *             NULL for transports that are only polled by test.
 *   cost      (optional) this context's link cost; NULL = loopback TCP's figures.
 *   link_fds  (optional) the descriptors one end of a link holds in this context, for
 *             the communicator's check of RLIMIT_NOFILE before it connects (tcp:
 *             HOOP_TCP_NSOCKS); NULL = 1.
 *   forget    (optional) [addr, addr + bytes) is about to be freed: drop what the
 *             context caches about it (ib: registrations, which would otherwise pin the
 *             old pages and serve a new allocation at the same address wrongly).
 *   close     closes a comm (safe on half-open comms); pending requests are released.
 *   abort     (optional) closes a comm of a failed communicator: bytes not yet sent are
 *             dropped and the kernel keeps nothing (tcp: a reset, where close would leave
 *             a socket retransmitting megabytes to a dead or unreachable peer for
 *             minutes); NULL = close.
 *   finalize  destroys the context.
 */
struct hoop_transport {
    const char *name; /* "tcp", "shm", "ib": for logs and HOOP_TRANSPORT */
    int api_version;
    int preference; /* auto mode's order among transports that reach a peer: lower first */
    hoop_status (*init)(const struct hoop_tp_config *cfg, void **tctx);
    hoop_status (*listen)(void *tctx, void *handle, struct hoop_tp_comm **listen_comm);
    hoop_status (*connect)(void *tctx, void *handle, int channel, struct hoop_tp_comm **send_comm);
    hoop_status (*accept)(struct hoop_tp_comm *listen_comm, struct hoop_tp_comm **recv_comm);
    int (*reachable)(void *tctx, const void *handle);
    hoop_status (*reg_mr)(void *tctx, void *buf, size_t bytes, int kind, void **mr);
    hoop_status (*dereg_mr)(void *tctx, void *mr);
    hoop_status (*isend)(struct hoop_tp_comm *c, const void *buf, size_t bytes, void *mr,
                         void **req);
    hoop_status (*irecv)(struct hoop_tp_comm *c, void *buf, size_t bytes, void *mr, void **req);
    hoop_status (*irecv_fn)(struct hoop_tp_comm *c, size_t bytes, size_t unit,
                            hoop_tp_consume_fn fn, void *arg, void **req);
    hoop_status (*test)(void *req, int *done, size_t *bytes);
    int (*pollfds)(struct hoop_tp_comm *c, struct pollfd *fds, int cap);
    void (*cost)(void *tctx, struct hoop_tp_cost *out);
    int (*link_fds)(void *tctx);
    void (*forget)(void *tctx, void *addr, size_t bytes);
    hoop_status (*close)(struct hoop_tp_comm *c);
    hoop_status (*abort)(struct hoop_tp_comm *c);
    hoop_status (*finalize)(void *tctx);
};

extern const struct hoop_transport hoop__transport_tcp;
extern const struct hoop_transport hoop__transport_shm;
extern const struct hoop_transport hoop__transport_ib;

/* Returns 1 when every required slot of tp is set and the version matches, else 0 and
 * the name of the first missing slot in *missing (for the unit test and at init). */
int hoop__transport_complete(const struct hoop_transport *tp, const char **missing);

#endif /* HOOP_TRANSPORT_TRANSPORT_H */
