/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/coll.h -- internals shared by the collectives layer.
 *
 * A collective is compiled into a schedule: an ordered list of steps for THIS rank
 * (send a byte range to a peer, receive a byte range from a peer, receive into a slot
 * and reduce, copy locally), each with up to two dependencies on earlier steps. The
 * algorithm files (ring.c, rd.c, rhd.c, chain.c, direct.c) only emit steps; the executor
 * (exec.c) moves the bytes over any transport with several chunks in flight. This is
 * "algorithms become data": a simulator could run the same
 * schedules on an alpha-beta-gamma model.
 *
 * Ordering rule the executor relies on: the k-th SEND to peer p in this rank's schedule
 * matches the k-th RECV/RECV_REDUCE from this rank in p's schedule, with equal bytes.
 * Dependencies always point to earlier steps. A schedule function appends to a schedule
 * that the call's vote opens (progress.c): it never resets it, and a dependency is the
 * index hoop__sched_add returned. Each SEND/RECV/RECV_REDUCE on the call's buffers moves
 * at most a->chunk_bytes; no step writes the send buffer; a failure is returned through
 * HOOP_ERROR (hoop__sched_built and hoop__sched_check refuse what breaks these).
 *
 * Thread-safety: schedules and executors belong to the progress thread.
 */
#ifndef HOOP_COLLECTIVES_COLL_H
#define HOOP_COLLECTIVES_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/collectives.h"
#include "hoop/comm.h"
#include "hoop/status.h"

/* Which collective (also carried in the header). */
typedef enum hoop__coll {
    HOOP__COLL_ALLREDUCE = 1,
    HOOP__COLL_BROADCAST,
    HOOP__COLL_REDUCE,
    HOOP__COLL_ALLGATHER,
    HOOP__COLL_REDUCE_SCATTER,
    HOOP__COLL_BARRIER,
} hoop__coll;

/* Buffers a step can name. */
enum {
    HOOP__BUF_SEND = 0,
    HOOP__BUF_RECV,
    HOOP__BUF_SCRATCH,
    HOOP__BUF_TOKEN,
    HOOP__BUF_VOTE,  /* the call's vote records (vote.c): never user memory */
    HOOP__BUF_STAGE, /* the comm's stage slots, for staged SENDs and RECVs (stage.c) */
    HOOP__NBUF
};

typedef enum hoop__step_kind {
    HOOP__STEP_SEND,        /* send buf[off, off+bytes) to peer */
    HOOP__STEP_RECV,        /* receive bytes from peer straight into buf[off] */
    HOOP__STEP_RECV_REDUCE, /* receive into a slot; then buf[off] = slot (op) src_buf[src_off]
                             * (the operands the other way round with local_first) */
    HOOP__STEP_COPY,        /* buf[off] = src_buf[src_off] (local) */
    HOOP__STEP_DIRECT,      /* bytes [off, off+bytes) of the call's buffer = op over every
                             * rank's copy, written into every copy (local, direct.c) */
    HOOP__STEP_DIRECT_OWN,  /* the same, written into this rank's copy only */
    HOOP__STEP_DIRECT_COPY, /* this rank's copy of [off, off+bytes) = rank peer's copy */
    HOOP__STEP_VOTE,        /* vote record at src_off + record size = merge of the one at
                             * src_off and peer's at off (vote.c); fails on a mismatch */
} hoop__step_kind;

/* Steps that run on this rank alone (no link): COPY, the DIRECT kinds and VOTE. */
static inline int hoop__step_is_local(int kind)
{
    return kind == HOOP__STEP_COPY || kind == HOOP__STEP_DIRECT || kind == HOOP__STEP_DIRECT_OWN ||
           kind == HOOP__STEP_DIRECT_COPY || kind == HOOP__STEP_VOTE;
}

typedef struct hoop__step {
    uint8_t kind;        /* hoop__step_kind */
    uint8_t buf;         /* destination (RECV*, COPY) or source (SEND) */
    uint8_t src_buf;     /* RECV_REDUCE / COPY operand */
    uint8_t final;       /* RECV_REDUCE: last combination of these elements (avg divides) */
    uint8_t stage;       /* SEND / RECV through a stage slot, or a receive slot (stage.c): buf
                          * is memory the transports cannot touch (a GPU's) */
    uint8_t local_first; /* RECV_REDUCE: buf[off] = src_buf[src_off] (op) slot instead, so
                          * that two ranks combining each other's vectors put the same
                          * operand first (a NaN's payload and MIN/MAX of -0 and +0 depend
                          * on the order) */
    int32_t peer;
    int32_t dep[2]; /* indices of earlier steps that must be done first; -1 = none */
    size_t off, src_off, bytes;
} hoop__step;

typedef struct hoop__sched {
    hoop__step *steps;
    size_t n, cap;
    size_t scratch_bytes; /* scratch buffer the schedule needs */
    hoop_status err;      /* first allocation failure while emitting */
    int32_t voted;        /* the step after which every rank is known to have called this
                           * same collective (the vote's last merge); -1 on one rank */
    size_t nvote;         /* the vote's steps, which open the schedule: no later step may
                           * name the vote records (HOOP__BUF_VOTE) */
} hoop__sched;

struct hoop__seg;

/* What a schedule is built from. */
typedef struct hoop__coll_args {
    hoop__coll coll;
    const void *sendbuf;
    void *recvbuf;
    size_t count; /* elements (per rank block for all-gather / reduce-scatter) */
    hoop_dtype dtype;
    hoop_op op;
    int root;
    hoop_algo algo;
    int rank, world_size;
    size_t elem;               /* bytes per element */
    size_t chunk_bytes;        /* pipelining unit, a multiple of elem */
    char *const *seg_base;     /* direct: each rank's copy of the segment, as mapped here */
    size_t seg_off;            /* direct: the buffer's byte offset in the segment */
    struct hoop__seg *held[2]; /* segments holding sendbuf / recvbuf: their in-flight
                                * counts keep hoop_comm_free_shared off until completion */
    int dev;                   /* 1: the buffers are GPU memory (staged; collectives.c) */
    uint8_t in_seg[2];         /* 1: sendbuf / recvbuf lies in memory from
                                * hoop_comm_alloc_shared, whose registrations a transport
                                * keeps across calls (progress.c, user_regs_end) */
    hoop_algo asked;           /* the all-reduce algorithm asked for (HOOP_ALGO, set_algo),
                                * which algo may differ from: for messages only */
    int wanted_direct;         /* 1: direct was asked for (or AUTO at this size) but the
                                * buffers did not allow it: for messages only */
} hoop__coll_args;

/* The bytes of the caller's send and receive buffers this rank's part of call a spans
 * (0 for a buffer it does not use: a broadcast's sendbuf off the root, a barrier's). */
void hoop__coll_user_bytes(const hoop__coll_args *a, size_t *send, size_t *recv);

/* Appends a step; returns its index, or -1 after recording HOOP_ERR_NOMEM in s->err. */
int32_t hoop__sched_add(hoop__sched *s, hoop__step st);
/* Makes s a copy of from's steps (s's storage reused); HOOP_ERR_NOMEM. */
hoop_status hoop__sched_copy(hoop__sched *s, const hoop__sched *from);
/* Empties a schedule but keeps its storage for the next call. */
void hoop__sched_reset(hoop__sched *s);
void hoop__sched_free(hoop__sched *s);

/* Balanced partition of count elements into parts: part i starts at the returned
 * element index (i in 0..parts). Safe for counts near SIZE_MAX / parts. */
static inline size_t hoop__part_start(size_t count, size_t parts, size_t i)
{
    return (count / parts) * i + (i < count % parts ? i : count % parts);
}

/* Folding a non-power-of-two world for rd / rhd (Thakur, Rabenseifner & Gropp 2005):
 * p = largest power of two <= n, rem = n - p. Ranks below 2 x rem pair up: the even one
 * hands its data to the odd one and waits (newrank -1); the odd one plays newrank r/2.
 * Ranks from 2 x rem up play newrank r - rem. */
static inline void hoop__fold(int rank, int n, int *p, int *rem, int *newrank)
{
    int q = 1;
    while (q * 2 <= n) q *= 2;
    *p = q;
    *rem = n - q;
    if (rank < 2 * *rem)
        *newrank = rank % 2 ? rank / 2 : -1;
    else
        *newrank = rank - *rem;
}
static inline int hoop__unfold(int newrank, int rem)
{
    return newrank < rem ? newrank * 2 + 1 : newrank + rem;
}

/* Steps over a fixed grid of cells (chunk_bytes each) of the element range [0, count),
 * for algorithms whose ranges change size from step to step (rd, rhd): each emitted
 * piece lies inside one cell, and the cell remembers the last step that wrote it
 * (last) and the last step that sent from it (sent), which become dependencies. */
typedef struct hoop__cells {
    int32_t *last, *sent;
    size_t cell; /* elements per cell */
    size_t elem; /* bytes per element */
} hoop__cells;
hoop_status hoop__cells_init(hoop__cells *g, const hoop__coll_args *a);
void hoop__cells_free(hoop__cells *g);
/* SEND elements [lo, hi) of buf to peer, each piece after the last write of its cell. */
void hoop__cells_send(hoop__sched *s, hoop__cells *g, int peer, int buf, size_t lo, size_t hi);
/* RECV_REDUCE elements [lo, hi) from peer into recvbuf, combined with src_buf: peer's
 * operand first, or with local_first src_buf's. */
void hoop__cells_reduce(hoop__sched *s, hoop__cells *g, int peer, int src_buf, size_t lo, size_t hi,
                        int final, int local_first);
/* RECV elements [lo, hi) from peer straight into recvbuf. */
void hoop__cells_recv(hoop__sched *s, hoop__cells *g, int peer, size_t lo, size_t hi);

/* An algorithm: fills s with this rank's steps for the call a. */
typedef hoop_status (*hoop__sched_fn)(const hoop__coll_args *a, hoop__sched *s);

/* Cost-model parameters: time = alpha per message + beta per byte sent + gamma per
 * byte reduced (seconds). */
typedef struct hoop__cost_params {
    double alpha, beta, gamma;
    double chunk; /* bytes per pipelined chunk */
} hoop__cost_params;
typedef double (*hoop__cost_fn)(int world_size, size_t bytes, const hoop__cost_params *p);

/* Marks (sets to 1, never clears) in need[0..world_size) the ranks that rank exchanges
 * data with under one algorithm, beyond its ring neighbours and recursive-doubling
 * partners (which every comm links: the other collectives and every call's vote use
 * them). Must be symmetric: rank a marks b exactly when b marks a. */
typedef void (*hoop__peers_fn)(int rank, int world_size, unsigned char *need);

typedef struct hoop__algo_entry {
    const char *name;
    hoop_algo id;
    hoop__sched_fn fn;
    hoop__cost_fn cost;
    hoop__peers_fn peers; /* NULL: ring neighbours and rd partners suffice */
} hoop__algo_entry;

/* HOOP_OK when algo is one of HOOP_ALGO_MAP's values, else HOOP_ERR_INVALID naming fn,
 * the value and the choices (algo.c). */
hoop_status hoop__algo_check(const char *fn, hoop_algo algo);

/* The all-reduce algorithm table (algo.c), terminated by name == NULL: a schedule and a
 * cost (or NULL) for each value of HOOP_ALGO_MAP but AUTO (tests/check_collectives.c
 * checks that every value has its row).
 * Adding an algorithm: a value in HOOP_ALGO_MAP (hoop/comm.h; its name then works in
 * HOOP_ALGO, hoop_comm_set_algo and hoop-bench --algo), a file with its schedule function
 * (listed in local.mk), and a row in algo.c's table: a NULL cost keeps AUTO from picking
 * it, and its peers function marks every rank it exchanges with beyond the ring
 * neighbours and rd partners, on both ends (hoop__algo_peers_check). A comm opens links to the
 * union of the rows' peers only, so a step towards any other rank fails the call with
 * HOOP_ERR_INTERNAL naming that rank. */
extern const hoop__algo_entry hoop__allreduce_algos[];

/* AUTO runs direct on shared buffers from here up: measured crossovers against rd on
 * 2 ranks and against ring on more. */
#define DIRECT_MIN_BYTES(n) ((n) == 2 ? (8 << 10) : (64 << 10))

/* Picks an algorithm for an all-reduce of bytes on world_size ranks with the given
 * chunk size over links of cost link (alpha, beta; not NULL): requested itself unless it
 * is AUTO (or DIRECT: the buffer is not shared here), else the cheapest row of the cost
 * model (never returns AUTO). */
struct hoop_tp_cost;
hoop_algo hoop__algo_pick(hoop_algo requested, int world_size, size_t bytes, size_t chunk_bytes,
                          const struct hoop_tp_cost *link);
/* What an all-reduce of bytes not on shared memory runs on comm under algo: as
 * hoop__algo_pick with the comm's world size, chunk and link cost (comm.c). */
hoop_algo hoop__comm_algo_pick(const hoop_comm *comm, hoop_algo algo, size_t bytes);

/* Marks in need[0..world_size) (cleared first) the peers rank exchanges data with under
 * any algorithm of rows (a table ending at name == NULL): its ring neighbours, its
 * recursive-doubling partners (with the fold) and what each row's peers function marks;
 * never rank itself. Symmetric when every row's peers function is. hoop__algo_peers is
 * this over hoop__allreduce_algos, what a comm links. */
void hoop__algo_peers_of(const hoop__algo_entry *rows, int rank, int world_size,
                         unsigned char *need);
void hoop__algo_peers(int rank, int world_size, unsigned char *need);
/* HOOP_OK when each peers function of rows marks, for every rank it marks for rank, rank
 * too; else HOOP_ERR_INTERNAL naming the row and both ranks (an asymmetric row failed
 * the start-up with "unexpected link from rank 0"). O(marked x world_size) per row;
 * HOOP_ERR_NOMEM. */
hoop_status hoop__algo_peers_check(const hoop__algo_entry *rows, int rank, int world_size);

/* Schedules (ring.c, rd.c, rhd.c, chain.c, direct.c); a new algorithm's go here too. */
hoop_status hoop__allreduce_ring(const hoop__coll_args *a, hoop__sched *s);
hoop_status hoop__allreduce_rd(const hoop__coll_args *a, hoop__sched *s);
hoop_status hoop__allreduce_rhd(const hoop__coll_args *a, hoop__sched *s);
hoop_status hoop__reduce_scatter_ring(const hoop__coll_args *a, hoop__sched *s);
hoop_status hoop__allgather_ring(const hoop__coll_args *a, hoop__sched *s);
hoop_status hoop__broadcast_chain(const hoop__coll_args *a, hoop__sched *s);
hoop_status hoop__reduce_chain(const hoop__coll_args *a, hoop__sched *s);
hoop_status hoop__barrier_vote(const hoop__coll_args *a, hoop__sched *s);
/* Appends the schedule of call a (its collective and algorithm) to s;
 * HOOP_ERR_INTERNAL naming them when no schedule exists (never a silent substitute). */
hoop_status hoop__coll_schedule(const hoop__coll_args *a, hoop__sched *s);
/* sched_check.c: HOOP_OK when every step of s (call a's schedule, scratch_bytes set)
 * stays inside the buffers it names (send, receive, scratch, token, vote records; the
 * shared buffer for DIRECT steps), names another rank as its peer, has a link to that
 * peer (send[peer] for a send, recv[peer] for a receive: the comm's per-peer links, NULL
 * where none was connected, since a comm links only the ring neighbours and the peers
 * its algorithms' rows mark, hoop__algo_peers; send == NULL skips this) and depends on
 * earlier steps only; else HOOP_ERR_INTERNAL naming the collective, the algorithm, the
 * first bad step (index, kind, peer), the buffer, the range and the buffer's size. One
 * O(steps) pass, no data touched: run once per built schedule, before any byte moves.
 * *msgs (when msgs is not NULL) gets this rank's message digest: the sum, mod 2^64, of
 * a hash of (this rank, peer) per message it sends, less one of (peer, this rank) per
 * message it receives, the vote's own left out. Summed over the ranks (the vote does:
 * hoop__vote_merge) it is 0 when each rank receives from each peer as many messages as
 * that peer sends it, and else almost surely not (each hash is odd: a count off by
 * c < 2^64 leaves c x hash). */
struct hoop_tp_comm;
hoop_status hoop__sched_check(const hoop__sched *s, const hoop__coll_args *a,
                              struct hoop_tp_comm *const *send, struct hoop_tp_comm *const *recv,
                              uint64_t *msgs);

/* The name of call a's algorithm in messages (a static string): the all-reduce's
 * (hoop_algo_name), "chain" (broadcast, reduce), "ring" or "direct" (all-gather,
 * reduce-scatter), "vote" (barrier). */
const char *hoop__sched_algo_name(const hoop__coll_args *a);

/* sched_check.c: what a schedule function (hoop__coll_schedule) returned, st, checked:
 * its own failure, with a message added when it set none (said == 0: a bare code showed
 * whatever message came before), or HOOP_ERR_INTERNAL when it did not leave s opening
 * with the vote's steps (votes) unchanged: it must only append (a reset dropped the
 * vote, so a mismatched call hung until HOOP_TIMEOUT). */
hoop_status hoop__sched_built(hoop_status st, int said, const hoop__sched *s,
                              const hoop__sched *votes, const hoop__coll_args *a);
/* sched_check.c: "allreduce", ...; "send", "recv+reduce", ... ("?" out of range). */
const char *hoop__coll_name(int coll);
const char *hoop__step_kind_name(int kind);
/* The scratch bytes the schedule of call a needs (hoop__coll_schedule's scratch_bytes,
 * without building it: the issuing thread reserves device scratch with it, devres.c). */
size_t hoop__coll_scratch_bytes(const hoop__coll_args *a);
hoop_status hoop__allreduce_direct(const hoop__coll_args *a, hoop__sched *s);
hoop_status hoop__allgather_direct(const hoop__coll_args *a, hoop__sched *s);
hoop_status hoop__reduce_scatter_direct(const hoop__coll_args *a, hoop__sched *s);

/* direct.c: the elements of bytes [off, off + bytes) of the n copies bufs[q] = op over
 * the copies, combined from rank me on, in ring order (AVG divides on the last
 * combination), reduced into bufs[me] and, when copy_out, copied into every other copy. */
void hoop__direct_reduce(hoop_dtype dtype, hoop_op op, char *const *bufs, int n, int me, size_t off,
                         size_t bytes, size_t elem, int copy_out);

/* vote.c: the vote that opens every call's schedule (see vote.c): emits this rank's
 * steps, sets and returns s->voted. */
int32_t hoop__sched_votes(hoop__sched *s, int rank, int world_size);
/* vote.c: a barrier of one-byte tokens in the same recursive-doubling pattern: returns
 * the step after which every rank has passed its `after` step (-1 = at once). */
int32_t hoop__sched_rd_sync(hoop__sched *s, int rank, int world_size, int32_t after);
/* vote.c: runs a VOTE step on the vote buffer of rank `rank` of world_size;
 * HOOP_ERR_MISMATCH (message naming both calls) when the merged state shows two
 * different calls. The merged state adds the message digests of the ranks it covers
 * (hoop__sched_check); the caller judges the sum once it covers every rank. */
hoop_status hoop__vote_merge(void *votes, const hoop__step *st, int rank, int world_size);
/* vote.c: 1 when the state VOTE step st wrote covers all world_size ranks and its sum of
 * their message digests is not 0 (their schedules leave a message unpaired), else 0. */
int hoop__vote_unpaired(const void *votes, const hoop__step *st, int world_size);

/* vote.c: what a rank whose first pending step is vote step st waits for, as "for the
 * call's vote from rank q ..." in buf. Returns 1 when q is itself the missing rank (its
 * record needs nobody else's), 0 when q relays others' records. */
int hoop__vote_wait_info(const hoop__step *st, int rank, int world_size, char *buf, size_t cap);

/* stage.c: marks every SEND and RECV of s on a buffer in bufmask (bits 1 << HOOP__BUF_*)
 * as staged: the executor moves them through the comm's stage slots of slot_bytes each
 * (exec.c). Sends and receives keep their order, peers and sizes, so the pairing rule
 * above holds. HOOP_ERR_INTERNAL when a step moves more than slot_bytes. */
hoop_status hoop__sched_stage(hoop__sched *s, unsigned bufmask, size_t slot_bytes);

/* Number of chunks of chunk_bytes needed for bytes (0 for 0 bytes). */
size_t hoop__nchunks(size_t bytes, size_t chunk_bytes);

// ----------------------------------------------------------------- reduction kernels

/* Internal op of the executor: SUM of a 16-bit average's pre-divided terms, saturating
 * at the type's largest finite value (reduce.c); never in a header or a call. */
#define HOOP__OP_SUM_SAT ((hoop_op)HOOP_OP_COUNT_)

/* dst[i] = a[i] (op) b[i] for i < count; dst may alias a or b. When divisor > 0 the
 * result is divided by it before the single rounding (the last step of an average).
 * AVG combines as SUM. f16/bf16 are combined in f32 and rounded once (nearest even). */
void hoop__reduce(hoop_dtype dtype, hoop_op op, void *dst, const void *a, const void *b,
                  size_t count, int divisor);

/* f16 / bf16 through an f64 accumulator (direct.c): acc[i] = src[i] (first) or
 * acc[i] (op) src[i]; then dst[i] = acc[i] (/ divisor when > 0), rounded once to the
 * type. Sums of up to 2^29 16-bit values are exact in f64 and never overflow. */
void hoop__half_to_acc(hoop_dtype dtype, hoop_op op, double *acc, const void *src, size_t count,
                       int first);
void hoop__acc_to_half(hoop_dtype dtype, void *dst, const double *acc, size_t count, int divisor);
/* dst[i] = src[i] / divisor, computed in f32 and rounded once (a 16-bit average's
 * pre-division: the partial sums of x / n cannot overflow where the average fits). */
void hoop__half_prescale(hoop_dtype dtype, void *dst, const void *src, size_t count, int divisor);

float hoop__f16_to_f32(uint16_t h);
uint16_t hoop__f32_to_f16(float f);
float hoop__bf16_to_f32(uint16_t h);
uint16_t hoop__f32_to_bf16(float f);

#endif /* HOOP_COLLECTIVES_COLL_H */
