/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/comm.h -- the communicator's internals (shared by comm.c, progress.c
 * and collectives.c).
 *
 * Threads: the issuing thread (the user's) pushes requests onto the queue under mu and
 * wakes the progress thread through wake_fd; everything below "progress thread only"
 * is touched by the progress thread alone (and by init/destroy while it is not running).
 */
#ifndef HOOP_COLLECTIVES_COMM_H
#define HOOP_COLLECTIVES_COMM_H

#include <pthread.h>
#include <stdatomic.h>

#include "collectives/coll.h"
#include "collectives/exec.h"
#include "collectives/links.h"
#include "transport/transport.h"

/* The 32-byte header every collective sends to the next rank first (on the data link),
 * and the same-sized records that carry failures and goodbyes on the control link. */
/* CLAIM: a timeout that names a peer, sent ahead of the comm's failure (claims.c). An
 * ABORT or a CLAIM is followed by two records: the origin's call, and {kind: what it
 * waited for (1 a rank's vote, 2 data, 3 relayed votes)}. */
enum { HOOP__REC_HDR = 1, HOOP__REC_ABORT = 2, HOOP__REC_BYE = 3, HOOP__REC_CLAIM = 4 };
typedef struct hoop__hdr {
    uint64_t seq;   /* HDR: call number on this comm; ABORT: culprit rank (or -1) */
    uint64_t count; /* elements */
    uint8_t kind, coll, dtype, op, algo;
    uint8_t refused; /* HDR: 1 = this rank refused the call for its arguments (collectives.c) */
    uint8_t asked;   /* HDR: the algorithm asked for, when algo is another (a fallback); not
                      * voted on, only named in a mismatch's message; else 0 (AUTO) */
    uint8_t wanted_direct; /* HDR: 1 = direct was wanted but the buffers did not allow it
                            * (out of place, or not in shared memory); as asked */
    int32_t root;
    int32_t aux; /* ABORT: hoop_status; the two records after an ABORT are the calls */
} hoop__hdr;
_Static_assert(sizeof(hoop__hdr) == 32, "the collective header is 32 bytes");

/* A vote record (vote.c): the sender's call, the first pair of different calls it has
 * heard of (bad = 1), and the sum of the message digests (hoop__sched_check) of the
 * `covers` ranks it has heard of. */
typedef struct hoop__vote {
    uint32_t magic;
    int32_t from, bad, a_rank, b_rank;
    uint32_t covers;
    uint64_t msgs;
    hoop__hdr hdr, a, b;
} hoop__vote;
_Static_assert(sizeof(hoop__vote) == 128, "a vote record is 128 bytes");
/* Vote rounds at most: lg of the largest int world, plus the fold. */
#define HOOP__VOTE_ROUNDS 34
#define HOOP__VOTE_BYTES ((2 * HOOP__VOTE_ROUNDS + 1) * sizeof(hoop__vote))

/* vote.c: state S[0] = this rank's call. */
void hoop__vote_init(void *votes, const hoop__hdr *mine, int rank);
/* vote.c: the state a VOTE step wrote (after a mismatch: the pair of calls). */
const hoop__vote *hoop__vote_after(const void *votes, const hoop__step *st);

enum { HOOP__CS_RUNNING = 0, HOOP__CS_FAILING, HOOP__CS_FAILED };

struct hoop_request {
    struct hoop_request *next;
    struct hoop_comm *comm; /* valid while the request is not done */
    hoop__coll_args args;
    hoop__hdr hdr;
    int64_t timeout_ms;
    atomic_int done;
    atomic_int refs;
    hoop_status status;
    int64_t done_ns; /* monotonic time at completion (hoop__now_ns), for DDP's stats */
    /* A call ordered on a stream (collectives.c): the start event (the progress thread's
     * gate, freed once passed), and the comm's flag and the value its completion
     * stores there (sflag NULL for other calls). */
    void *start;
    uint32_t *sflag, sflag_value;
    struct hoop__gcall *gcall; /* a captured call's replay (capture.c): its record */
    char msg[512];
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* Memory from hoop_comm_alloc_shared (shared.c). */
typedef struct hoop__seg {
    struct hoop__seg *next;
    uint32_t id;         /* allocation number on this comm: the same on every rank */
    int direct;          /* every rank maps every rank's copy */
    size_t len;          /* mapped bytes (a page multiple) */
    atomic_int inflight; /* calls on it queued or running (free refuses while > 0) */
    char **base;         /* [world_size]: rank q's copy as mapped here (NULL where not mapped) */
    int cuda;            /* device memory (shared_cuda.c): base[] are device pointers */
    uint8_t *opened;     /* cuda: [world_size], 1 where base[q] came from a CUDA IPC handle */
} hoop__seg;

struct hoop_comm {
    int rank, world_size, local_rank, prev, next;
    int64_t timeout_ms;
    size_t chunk_bytes;
    atomic_int algo;
    hoop_store *owned_store;
    atomic_int users; /* live hoop_ddp built on this comm: hoop_comm_destroy refuses while > 0 */
    /* The thread inside a collective call now (a thread-local's address; NULL: none), the
     * call's name, and how deep it is nested (that thread's only): a second thread that
     * enters meanwhile breaks "one issuing thread at a time" (collectives.c, issue_enter). */
    _Atomic(const void *) issuer;
    _Atomic(const char *) issuer_fn;
    int issuer_depth;
    char misuse_msg[400]; /* how = 3 (abort_req): the message the comm fails with */

    /* The transports this comm opened from the registry (auto: every one this host
     * has; HOOP_TRANSPORT=tcp|shm|ib: that one). Each link calls its own c->tp. */
    hoop__tp_open tps[HOOP__TP_MAX];
    int ntps;
    int reg_scope; /* HOOP_IB_REG_CACHE: 1 = a user buffer's registrations last one call */
    int caches;    /* 1 when a transport of the comm caches what it is told to forget */
    /* Ranges freed by other threads that the transports must forget (under mu): */
    struct hoop__forget {
        const void *addr;
        size_t bytes;
    } * forget;
    size_t nforget, capforget;
    struct hoop_tp_comm **send, **recv; /* data links, per peer */
    struct hoop_tp_comm *ctl_send, *ctl_recv;

    pthread_t thread;
    int started;
    pthread_mutex_t mu;     /* the queue */
    pthread_mutex_t engine; /* everything "progress thread only" below: held by whoever
                             * drives progress (the thread, or a caller in hoop_wait) */
    atomic_int sleeping;    /* the progress thread is (about to be) in poll(): HOOP__SLEEP_* */
    atomic_int drivers;     /* callers driving progress from hoop_wait */
    int wake_fd;
    struct hoop_request *q_head, *q_tail;
    uint64_t next_seq;
    atomic_int stop, abort_req, state;
    atomic_uint_least64_t bytes_sent;
    int all_local; /* every rank is reachable over shm (set at init) */
    /* The cost model's alpha and beta: the largest of any rank's data links (every rank
     * agrees at init), and the transports they came from (for the log); world_size 1:
     * loopback TCP's. */
    hoop__link_cost link_cost;
    hoop__seg *segs; /* hoop_comm_alloc_shared's memory; issuing thread */
    uint32_t nsegs_made;
    /* Calls ordered on a stream: the flag their streams wait on (made at the first, by
     * the issuing thread; freed with the device buffers) and the last value handed out;
     * the first failure of one (under mu). */
    uint32_t *sflag, sflag_next;
    hoop_status stream_st;
    char stream_msg[512];
    /* Calls on GPU buffers: what the issuing thread makes before such a call is queued,
     * so that the progress thread never allocates device memory or page-locks host memory
     * (devres.c, hoop__comm_dev_reserve): the backend's memory table, the receive slots
     * page-locked, the page-locked stage slots (res_stage, under mu until the progress
     * thread adopts them as stage), and device buffers at least res_scratch / res_pre
     * bytes (pend_*: made and not yet adopted, under mu). Kept until destroy. */
    struct hoop__memops *dev_mem;
    int slots_pinned;
    /* Calls captured into CUDA graphs whose graphs still exist (capture.c; under mu). */
    struct hoop__gcall *gcalls;
    void *res_stage;
    size_t res_scratch, res_pre;
    void *pend_dscratch, *pend_dpre;
    size_t pend_dscratch_cap, pend_dpre_cap;

    /* progress thread only */
    struct hoop_request *cur;
    int gated; /* cur is ordered on a stream and waits for its start event */
    hoop__sched sched;
    hoop__sched vote_tpl; /* the vote's steps, the same for every call */
    hoop__exec *exec;
    void *exec_block;         /* the executor's block, kept across calls (exec.c) */
    struct hoop__memops *mem; /* the executor's copies and reductions (HOOP_MEMOPS) */
    int stage_all;            /* HOOP_MEMOPS=staged: every call's buffers go through stage */
    /* Calls on GPU buffers (devres.c): the device scratch and pre-division buffers the
     * current call uses (grown only by adopting what the issuing thread reserved). */
    void *dscratch, *dpre;
    size_t dscratch_cap, dpre_cap;
    /* The stage slots (stage.c; devres.c, hoop__comm_stage_prepare): stage_nslots
     * (HOOP_STAGE_SLOTS) x slot_bytes of host memory for staged sends and receives, made at
     * the first staged call and kept: the issuing thread's page-locked res_stage from the
     * first call on GPU buffers (stage_pinned), else plain memory made here for a host call
     * (HOOP_MEMOPS=staged), replaced by res_stage when that comes; registered once with
     * each transport that takes registrations (tps[k].stage_mr). stage_bytes is what was
     * allocated (whatever the calls' sizes); stage_peak the most slots one call held at
     * once so far. Tests read both after a call completed. */
    void *stage;
    size_t stage_bytes;
    int stage_nslots, stage_pinned, stage_peak;
    size_t exec_block_bytes;
    int64_t cur_deadline;
    hoop__hdr ctl_in, abort_rec[3];
    void *ctl_req;
    int abort_tail, prev_bye, ctl_eof;
    int tail_kind; /* the record abort_rec[0] is: HOOP__REC_ABORT or HOOP__REC_CLAIM */
    /* Timeout claims (claims.c): per origin rank, its claim's three records, and whom it
     * waits for (-1: no claim); made at the first claim. first_claim: the first origin
     * heard of (not this rank); claim_later: one about a later call than cur, acted on
     * when cur ends; fail_adopted: the failure is a predecessor's ABORT (final as is). */
    hoop__hdr claim_in[3]; /* a claim being read from the control link */
    hoop__hdr (*claims)[3];
    int *claim_culprit;
    int first_claim, claim_later, fail_adopted;
    int deferred; /* abort_rec holds a later call's failure, parked until cur ends */
    /* The predecessor's control link hit EOF while cur was running: cur may still finish
     * from what its links hold (the predecessor may have died just after finishing it);
     * the comm fails when cur ends or at prev_lost_deadline, whichever comes first. */
    int prev_lost;
    int64_t prev_lost_deadline;
    char prev_lost_msg[300];
    int64_t ctl_due_ns; /* when a pass next reads the control link */
    hoop_status fail_st;
    char fail_msg[900];
    hoop__hdr fail_rec[3];
    int64_t failing_deadline;
    char *slots;
    size_t slot_bytes;
    int nslots, depth;
    void *scratch;
    size_t scratch_cap;
    void *pre; /* a 16-bit average's pre-divided input (progress.c) */
    size_t pre_cap;
    char token[2];
    char fault_where[300]; /* the test hook's description of its moment (progress.c) */
    _Alignas(8) char votes[HOOP__VOTE_BYTES];
};

/* progress.c */
void *hoop__progress_main(void *arg);
/* One non-blocking round of progress; returns 1 when anything moved. Caller holds
 * comm->engine. */
int hoop__progress_pass(hoop_comm *comm);
/* Closes every link; failed = 1 drops what the data links still hold (the transports'
 * abort: a timed-out comm's). */
void hoop__comm_close_links(hoop_comm *comm, int failed);

/* The store hoop_comm_init_env made for comm and comm owns (rank 0's store, reached from
 * every rank); NULL for a comm from hoop_comm_init. For tools that need an exchange
 * independent of the collectives (hoop-bench's verdicts). The comm itself uses it only
 * in hoop_comm_init_env and hoop_comm_destroy; between them one thread at a time may
 * (hoop/store.h). */
hoop_store *hoop__comm_env_store(const hoop_comm *comm);

/* Fills ib from the HOOP_IB_* settings (defaults where unset), as hoop_comm_init hands
 * them to the transports. HOOP_ERR_INVALID names a malformed one (env.c checks range and
 * form). */
hoop_status hoop__comm_ib_config(struct hoop_tp_ib_config *ib);
/* The name of the transport ("tcp", "shm", "ib") of this rank's data link to peer, or NULL when
 * there is none (for tests and logs). */
const char *hoop__comm_link_transport(const hoop_comm *comm, int peer);
/* Describes a call for messages: "allreduce(count=10, f32, sum, algo=ring) #3". */
void hoop__hdr_describe(const hoop__hdr *h, char *buf, size_t cap);

/* What to add to a mismatch between calls a and b: when they differ only in where their
 * data lies (both ran direct at different places, or one ran direct and the other wanted
 * to but its buffers did not allow it), a note that direct needs the same shared buffer
 * and offset on every rank, in place; else "" (the ranks chose different algorithms). */
const char *hoop__hdr_mismatch_hint(const hoop__hdr *a, const hoop__hdr *b);

/* How the progress thread sleeps (comm->sleeping): not at all, until something happens on
 * its links or wake_fd, or a nap of at most DRIVEN_NAP_MS while a caller drives. */
enum { HOOP__SLEEP_NONE = 0, HOOP__SLEEP_LONG = 1, HOOP__SLEEP_NAP = 2 };
/* collectives.c: wakes the progress thread if it sleeps in poll(). */
void hoop__comm_wake(hoop_comm *comm);
/* [addr, addr + bytes) is about to be freed, or its call has ended (reg_scope 1): every
 * transport of comm drops what it caches about it (ib: registrations, which would pin
 * the old pages and serve a new allocation at the same address wrongly). Progress thread,
 * or a thread holding comm->engine. */
void hoop__comm_forget(hoop_comm *comm, const void *addr, size_t bytes);
/* hoop__comm_forget from the thread that issues collectives: the range is dropped as the
 * next call starts (progress.c, op_progress). HOOP_ERR_NOMEM (nothing queued). */
hoop_status hoop__comm_forget_later(hoop_comm *comm, const void *addr, size_t bytes);
/* devres.c: on the issuing thread, before a call on GPU buffers (a->dev) is queued, makes
 * what it will need that allocates device memory or page-locks host memory (see comm.h,
 * dev_mem ...): the backend's errors (HOOP_ERR_NOMEM naming the device's state,
 * HOOP_ERR_CUDA naming the call), nothing queued. */
hoop_status hoop__comm_dev_reserve(hoop_comm *comm, const hoop__coll_args *a);
/* devres.c, progress thread: the call's device resources (adopting what was reserved), a
 * 16-bit average's pre-division on the device, and the stage slots: sets *in, *op,
 * *scratch and *stage for the executor. */
hoop_status hoop__comm_dev_prepare(hoop_comm *comm, const hoop__coll_args *a, const void **in,
                                   hoop_op *op, void **scratch, void **stage);
/* devres.c, progress thread: stages the schedule's sends and receives (stage.c) through
 * the stage slots, made here for a host call (HOOP_MEMOPS=staged) or adopted from the
 * issuing thread's (pinned: a call on GPU buffers, which needs them page-locked). */
hoop_status hoop__comm_stage_prepare(hoop_comm *comm, int pinned, void **stage);
/* devres.c: frees what calls on GPU buffers and staged calls made, the stage slots too;
 * after the progress thread stopped and the links are closed, before the transports are
 * finalized. HOOP_ERR_TIMEOUT when the device memory table's stream was still busy after
 * HOOP_TIMEOUT: what its copies and reductions may still touch (the stage and receive
 * slots, the device scratch, the stream flag) is then leaked, with a WARN line, instead of
 * freed under the device (comm->slots is left NULL for the same reason). */
hoop_status hoop__comm_free_dev(hoop_comm *comm);
/* collectives.c: keeps the first failure of a call ordered on a stream (or of a captured
 * call's replay) for hoop_stream_status; hoop__stream_failed says whether one was kept.
 * Thread-safe (comm->mu). */
void hoop__stream_fail(hoop_comm *comm, hoop_status st, const char *msg);
int hoop__stream_failed(hoop_comm *comm);
/* collectives.c: 1 when this process's _stream calls run as blocking ones (fewer
 * hardware queues than CUDA's default 8, CUDA_DEVICE_MAX_CONNECTIONS=1..7; or a driver
 * without stream memory operations, known from the first stream call on), else 0;
 * hoop__stream_few_queues: that CUDA_DEVICE_MAX_CONNECTIONS (1..7), else 0. Thread-safe. */
int hoop__stream_calls_block(void);
/* collectives.c: lets a stream call failing with st (msg) release its stream before it
 * completes: the failure is kept for hoop_stream_status first, then the wait passes, so
 * that copies the wait holds (hoop's stream sharing the caller's hardware queue) can run
 * and be drained. Not for a captured call's replay. Progress thread. */
void hoop__stream_let_go(struct hoop_request *req, hoop_status st, const char *msg);
int hoop__stream_few_queues(void);
/* collectives.c: queues a replay of captured call g (its arguments a, prepared at
 * capture) as a new call on comm; its completion sets g's flag to 1. No CUDA call (a
 * CUDA thread's host node runs it). HOOP_ERR_NOMEM. */
hoop_status hoop__request_queue_replay(hoop_comm *comm, const hoop__coll_args *a,
                                       struct hoop__gcall *g);
/* capture.c (see there): on the issuing thread, captures call a (checked and prepared as
 * any call) on stream, which is being captured: nothing is queued now, each replay queues
 * it. Errors: HOOP_ERR_UNSUPPORTED (an older backend module; a direct call on shared
 * memory; a driver that cannot capture stream memory operations), the reservation's,
 * HOOP_ERR_CUDA naming the call. */
struct hoop__cuda_coll;
hoop_status hoop__capture_call(hoop_comm *comm, const struct hoop__cuda_coll *cc,
                               const hoop__coll_args *a, void *stream, const char *fn);
/* capture.c: a replay's call has ended (before its flag is set: the next may fire), and
 * the record's reference the call held (after the flag is set: the flag is the
 * record's). */
void hoop__capture_idle(struct hoop__gcall *g);
void hoop__capture_release(struct hoop__gcall *g);
uint32_t *hoop__capture_flag(const struct hoop__gcall *g);
/* capture.c, at destroy (first): the comm's captured calls forget it, so their replays
 * run nothing and let their streams go. */
void hoop__capture_detach(hoop_comm *comm);
/* collectives.c: releases one reference to req. */
void hoop__request_release(struct hoop_request *req);
/* Completes req with st and msg (NULL = "") and drops the progress thread's reference. */
void hoop__request_complete(struct hoop_request *req, hoop_status st, const char *msg);

/* hoop_wait that also reports when the collective completed (monotonic ns, as
 * hoop__now_ns), however long after that the caller came to wait. *collected = 1 when
 * it reported the completion (req is released: the caller must not touch it again,
 * whatever the status, HOOP_ERR_TIMEOUT of a call that failed by a timeout included);
 * 0 when the wait's own deadline passed first (the caller still holds req). */
hoop_status hoop__wait_done_ns(struct hoop_request *req, int64_t timeout_ms, int64_t *done_ns,
                               int *collected);

/* shared.c: the segment holding [ptr, ptr + bytes) whole, or NULL. */
hoop__seg *hoop__seg_find(const hoop_comm *comm, const void *ptr, size_t bytes);
/* shared.c: unmaps every host segment (destroy; device ones are shared_cuda.c's). */
void hoop__comm_free_segs(hoop_comm *comm);
/* shared_cuda.c: frees every device segment (destroy, while the progress thread still
 * runs): each rank closes its mappings of the peers' copies, a barrier (when any was
 * mapped and the comm has not failed) proves every rank has, then each frees its own.
 * Returns the barrier's error (the memory is freed anyway). */
hoop_status hoop__comm_free_segs_cuda(hoop_comm *comm);
/* shared_cuda.c: a number, never 0, that tells this process from any other on the node,
 * pid namespaces included (two containers may both have a pid 1). Thread-safe. */
uint64_t hoop__process_token(void);

/* claims.c: records a claim (ABORT-shaped records, kind CLAIM); 1 when it is new (the
 * first of its origin), 0 when seen before, malformed, or out of memory. */
int hoop__claim_add(hoop_comm *comm, const hoop__hdr rec[3]);
/* claims.c: the claim that explains this rank's failure: from its own claim (else the
 * first one it heard of), the last of the chain of claims; NULL when it holds none. */
const hoop__hdr *hoop__claim_final(const hoop_comm *comm);
/* claims.c: from start, follows culprit[] (whom each rank's claim waits for, -1 = no
 * claim) while the rank waited for has a claim too; returns the last claim's origin.
 * At most world_size hops (a cycle ends anywhere). Pure. */
int hoop__claims_follow(const int *culprit, int world_size, int start);
void hoop__claims_free(hoop_comm *comm);

/* Test-only: closes every link without telling anyone, as a crashed process would. */
hoop_status hoop__comm_kill(hoop_comm *comm);
/* Fails the comm with HOOP_ERR_USAGE and comm->misuse_msg (set first), as hoop_comm_abort
 * does with its own message; the peers fail naming this rank. */
hoop_status hoop__comm_fail_misuse(hoop_comm *comm);

#endif /* HOOP_COLLECTIVES_COMM_H */
