/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/collectives.c -- the public collective calls and requests.
 *
 * Each call validates its arguments on the caller's thread (bad input fails at once
 * with HOOP_ERR_INVALID naming the argument), fills a request with the call and its
 * 32-byte header (what the vote compares, vote.c), queues it for the progress thread and either
 * returns the request or waits for it; a call ordered on a CUDA stream (the _stream forms)
 * first queues its start event and its end wait on that stream and returns at once, and
 * its completion stores the value the wait waits for (stream_release). Requests are
 * reference-counted: one reference for the caller (dropped when hoop_test / hoop_wait
 * report completion, or at once for a stream call), one for the progress thread.
 *
 * Thread-safety: one issuing thread per comm; hoop_test / hoop_wait from any thread.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/comm.h"
#include "collectives/memops.h"
#include "core/backend.h"
#include "core/check.h"
#include "cuda/coll.h"
#include "core/clock.h"

#define WAIT_SPIN_NS (50 * 1000) /* drive progress while it moves, then this long idle */
#define WAIT_GRACE_MS 1200       /* see wait_req */

size_t hoop_dtype_size(hoop_dtype dtype)
{
    static const size_t sizes[] = {4, 8, 2, 2, 4, 8, 1};
    return (unsigned)dtype < HOOP_DTYPE_COUNT_ ? sizes[dtype] : 0;
}

const char *hoop_dtype_name(hoop_dtype dtype)
{
    static const char *names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8"};
    return (unsigned)dtype < HOOP_DTYPE_COUNT_ ? names[dtype] : "?";
}

const char *hoop_op_name(hoop_op op)
{
    static const char *names[] = {"sum", "prod", "min", "max", "avg"};
    return (unsigned)op < HOOP_OP_COUNT_ ? names[op] : "?";
}

// ----------------------------------------------------------------- requests

void hoop__comm_wake(hoop_comm *comm)
{
    uint64_t one = 1;
    if (atomic_load(&comm->sleeping) && write(comm->wake_fd, &one, sizeof(one)) < 0) {
        /* cannot fail: the counter is far from overflowing */
    }
}

void hoop__request_release(struct hoop_request *req)
{
    if (atomic_fetch_sub(&req->refs, 1) != 1) return;
    pthread_mutex_destroy(&req->mu);
    pthread_cond_destroy(&req->cv);
    free(req);
}

void hoop__stream_fail(hoop_comm *comm, hoop_status st, const char *msg)
{
    pthread_mutex_lock(&comm->mu);
    if (comm->stream_st == HOOP_OK) {
        comm->stream_st = st;
        snprintf(comm->stream_msg, sizeof(comm->stream_msg), "%s",
                 msg && *msg ? msg : hoop_status_str(st));
    }
    pthread_mutex_unlock(&comm->mu);
}

int hoop__stream_failed(hoop_comm *comm)
{
    pthread_mutex_lock(&comm->mu);
    int failed = comm->stream_st != HOOP_OK;
    pthread_mutex_unlock(&comm->mu);
    return failed;
}

/* A call ordered on a stream has ended: the stream's wait passes (after the results are
 * in place: completion comes after the last copy finished), and a failure is kept for
 * hoop_stream_status and the next stream call. A captured call's replay (req->gcall) is
 * marked idle first, so the next replay, which may run as soon as the wait passes, finds
 * it so; its record, which holds the flag, is released after the write. */
static void stream_release(struct hoop_request *req, hoop_status st, const char *msg)
{
    const struct hoop__cuda_coll *cc = NULL;
    if (st != HOOP_OK) hoop__stream_fail(req->comm, st, msg);
    if (hoop__cuda_backend(NULL, &cc) == HOOP_OK && cc) { /* loaded at the call */
        if (req->start) cc->start_free(req->start);
        req->start = NULL;
        if (req->gcall) hoop__capture_idle(req->gcall);
        cc->flag_write(req->sflag, req->sflag_value);
    }
    if (req->gcall) hoop__capture_release(req->gcall);
    req->gcall = NULL;
}

void hoop__stream_let_go(struct hoop_request *req, hoop_status st, const char *msg)
{
    const struct hoop__cuda_coll *cc = NULL;
    if (!req->sflag || req->gcall || hoop__cuda_backend(NULL, &cc) != HOOP_OK || !cc) return;
    hoop__stream_fail(req->comm, st, msg); /* kept before the stream passes */
    cc->flag_write(req->sflag, req->sflag_value);
}

void hoop__request_complete(struct hoop_request *req, hoop_status st, const char *msg)
{
    for (int k = 0; k < 2; k++) /* before waking anyone: a waiter may free next */
        if (req->args.held[k]) atomic_fetch_sub(&req->args.held[k]->inflight, 1);
    if (req->sflag) stream_release(req, st, msg);
    pthread_mutex_lock(&req->mu);
    req->status = st;
    req->done_ns = hoop__now_ns();
    if (msg && *msg)
        snprintf(req->msg, sizeof(req->msg), "%s", msg);
    else
        req->msg[0] = '\0';
    atomic_store(&req->done, 1);
    pthread_cond_broadcast(&req->cv);
    pthread_mutex_unlock(&req->mu);
    hoop__request_release(req);
}

/* Reports a finished request's status in the caller's thread and releases it. */
static hoop_status collect(hoop_request *req)
{
    hoop_status st = req->status;
    if (st != HOOP_OK) HOOP_ERROR(st, "%s", req->msg);
    hoop__request_release(req);
    return st;
}

hoop_status hoop_test(hoop_request *req, int *done)
{
    if (!req || !done) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_test: req or done is NULL");
    hoop_comm *comm = req->comm;
    if (!atomic_load(&req->done) && pthread_mutex_trylock(&comm->engine) == 0) {
        hoop__progress_pass(comm); /* one non-blocking round, if nobody else is driving */
        pthread_mutex_unlock(&comm->engine);
    }
    *done = atomic_load(&req->done);
    return *done ? collect(req) : HOOP_OK;
}

/* hoop_wait; *collected = 1 when it reported the completion (and dropped the caller's
 * reference), 0 when its own deadline passed first (the reference is still held). */
static hoop_status wait_req(hoop_request *req, int64_t timeout_ms, int *collected)
{
    *collected = 0;
    int64_t start = hoop__now_ns();
    /* Under the comm's own timeout, give the progress thread a moment past it: its
     * failure names the call and the rank it was waiting for, ours could not. */
    int64_t deadline = hoop__deadline_ns(timeout_ms >= 0       ? timeout_ms
                                         : req->timeout_ms < 0 ? -1
                                         : req->timeout_ms > INT64_MAX - WAIT_GRACE_MS
                                             ? INT64_MAX
                                             : req->timeout_ms + WAIT_GRACE_MS);
    /* Drive progress ourselves for a while: no thread hand-off on the fast path. */
    hoop_comm *comm = atomic_load(&req->done) ? NULL : req->comm;
    if (comm) atomic_fetch_add(&comm->drivers, 1);
    for (int64_t now = start;
         comm && !atomic_load(&req->done) && now - start < WAIT_SPIN_NS && now < deadline;
         now = hoop__now_ns()) {
        if (pthread_mutex_trylock(&comm->engine) == 0) {
            if (hoop__progress_pass(comm)) start = hoop__now_ns(); /* passes may be long */
            pthread_mutex_unlock(&comm->engine);
        }
        if (!atomic_load(&req->done)) sched_yield();
    }
    if (comm && atomic_fetch_sub(&comm->drivers, 1) == 1 && !atomic_load(&req->done))
        hoop__comm_wake(comm); /* hand over to the progress thread before sleeping */
    pthread_mutex_lock(&req->mu);
    int extended = timeout_ms >= 0; /* an explicit timeout is the caller's: never extended */
    while (!atomic_load(&req->done)) {
        struct timespec ts = {.tv_sec = deadline / 1000000000LL,
                              .tv_nsec = deadline % 1000000000LL};
        if (deadline == INT64_MAX) {
            pthread_cond_wait(&req->cv, &req->mu);
            continue;
        }
        if (pthread_cond_timedwait(&req->cv, &req->mu, &ts) != 0 && !extended &&
            hoop__now_ns() >= deadline && !atomic_load(&req->done) &&
            atomic_load(&req->comm->state) == HOOP__CS_RUNNING) {
            /* The progress thread is late with the call's own timeout (a starved or
             * stopped process, continued past both deadlines): one pass here fires it,
             * with the message that names the call and the rank it waited for. */
            pthread_mutex_unlock(&req->mu);
            if (pthread_mutex_trylock(&req->comm->engine) == 0) {
                hoop__progress_pass(req->comm);
                pthread_mutex_unlock(&req->comm->engine);
            }
            pthread_mutex_lock(&req->mu);
        }
        if (atomic_load(&req->done)) break;
        if (hoop__now_ns() >= deadline && !extended &&
            atomic_load(&req->comm->state) == HOOP__CS_FAILING) {
            /* The comm is failing (its grace for the others' claims, progress.c): its
             * message names the culprit, ours could not; a slow machine gets it later. */
            extended = 1;
            deadline = hoop__deadline_ns(WAIT_GRACE_MS);
        } else if (hoop__now_ns() >= deadline) {
            pthread_mutex_unlock(&req->mu);
            return HOOP_ERROR(HOOP_ERR_TIMEOUT,
                              "hoop_wait: the collective did not finish "
                              "within %lld ms",
                              (long long)(timeout_ms < 0 ? req->timeout_ms : timeout_ms));
        }
    }
    pthread_mutex_unlock(&req->mu);
    *collected = 1;
    return collect(req);
}

hoop_status hoop__wait_done_ns(hoop_request *req, int64_t timeout_ms, int64_t *done_ns,
                               int *collected)
{
    *collected = 0;
    if (!req) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_wait: req is NULL");
    atomic_fetch_add(&req->refs, 1); /* keeps req readable after wait_req releases it */
    hoop_status st = wait_req(req, timeout_ms, collected);
    *done_ns = atomic_load(&req->done) ? req->done_ns : hoop__now_ns();
    hoop__request_release(req);
    return st;
}

hoop_status hoop_wait(hoop_request *req, int64_t timeout_ms)
{
    int collected;
    if (!req) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_wait: req is NULL");
    return wait_req(req, timeout_ms, &collected);
}

// ----------------------------------------------------------------- enqueue

static hoop_status new_request(hoop_comm *comm, const hoop__coll_args *a, hoop_request **out)
{
    hoop_request *r;
    HOOP_CHECK(hoop__calloc(&r, 1));
    r->args = *a;
    r->comm = comm;
    r->timeout_ms = comm->timeout_ms;
    atomic_store(&r->refs, 2);
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    r->hdr = (hoop__hdr){.kind = HOOP__REC_HDR,
                         .count = a->count,
                         .coll = (uint8_t)a->coll,
                         .dtype = (uint8_t)a->dtype,
                         .op = (uint8_t)a->op,
                         .algo = (uint8_t)a->algo,
                         .asked = a->asked != a->algo ? (uint8_t)a->asked : 0,
                         .wanted_direct = (uint8_t)a->wanted_direct,
                         .root = a->root,
                         /* direct: root is the segment, aux the element offset in it */
                         .aux = a->algo == HOOP_ALGO_DIRECT ? (int32_t)(a->seg_off / a->elem) : 0};
    *out = r;
    return HOOP_OK;
}

/* Whether the buffers call a uses are GPU memory (a->dev = 1): asked of the CUDA
 * backend, and only when the process uses CUDA at all (src/core/backend.h), so a host
 * program loads nothing and pays a few nanoseconds per call. A call's buffers are
 * all on one side: HOOP_ERR_INVALID naming both when one is GPU memory and another is
 * not. Where the process uses CUDA but the backend cannot be had, buffers are taken as
 * host memory (the backend's own error then comes from the first tensor). */
static hoop_status classify(hoop_comm *comm, hoop__coll_args *a)
{
    static const char *const fns[] = {[HOOP__COLL_ALLREDUCE] = "hoop_allreduce",
                                      [HOOP__COLL_BROADCAST] = "hoop_broadcast",
                                      [HOOP__COLL_REDUCE] = "hoop_reduce",
                                      [HOOP__COLL_ALLGATHER] = "hoop_allgather",
                                      [HOOP__COLL_REDUCE_SCATTER] = "hoop_reduce_scatter",
                                      [HOOP__COLL_BARRIER] = "hoop_barrier"};
    const struct hoop__cuda_coll *cc = NULL;
    if (a->coll == HOOP__COLL_BARRIER || a->count == 0 || !hoop__cuda_in_process()) return HOOP_OK;
    if (hoop__cuda_backend(NULL, &cc) != HOOP_OK || !cc) return HOOP_OK;
    /* the buffers this rank uses: broadcast reads sendbuf on root only, reduce writes
     * recvbuf on root only */
    int use_send = a->coll != HOOP__COLL_BROADCAST || a->root == comm->rank;
    int use_recv = a->coll != HOOP__COLL_REDUCE || a->root == comm->rank;
    int ks = use_send && a->sendbuf ? cc->mem_kind(a->sendbuf) : -1;
    int kr = use_recv && a->recvbuf ? cc->mem_kind(a->recvbuf) : -1;
    if (ks != HOOP__MEM_CUDA && kr != HOOP__MEM_CUDA) return HOOP_OK;
    if ((ks >= 0 && ks != HOOP__MEM_CUDA) || (kr >= 0 && kr != HOOP__MEM_CUDA))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: sendbuf %p is %s memory and recvbuf %p is %s memory: a call's "
                          "buffers must be both on the GPU or both on the host",
                          fns[a->coll], a->sendbuf, ks == HOOP__MEM_CUDA ? "GPU" : "host",
                          a->recvbuf, kr == HOOP__MEM_CUDA ? "GPU" : "host");
    a->dev = 1;
    return HOOP_OK;
}

/* How a call is ordered: on a stream (the _stream forms), or on the host (v NULL). */
struct via {
    hoop_stream *stream;
};

/* The backend's table for a call ordered on a stream, and the error a failed one left. */
static hoop_status stream_table(hoop_comm *comm, const char *fn, const struct hoop__cuda_coll **cc)
{
    hoop_status st = hoop__cuda_backend(NULL, cc);
    if (st != HOOP_OK)
        return HOOP_ERROR(st, "%s needs the CUDA backend: %s", fn, hoop_last_error());
    if (!*cc || !HOOP__CUDA_COLL_HAS(*cc, flag_write))
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "%s: the CUDA backend module is older than this library (it has no "
                          "stream entries); reinstall it with this hoop",
                          fn);
    pthread_mutex_lock(&comm->mu);
    st = comm->stream_st;
    char msg[sizeof(comm->stream_msg)];
    snprintf(msg, sizeof(msg), "%s", comm->stream_msg);
    pthread_mutex_unlock(&comm->mu);
    if (st != HOOP_OK)
        return HOOP_ERROR(st, "%s: an earlier call ordered on a stream failed: %s", fn, msg);
    return HOOP_OK;
}

/* The hardware queues CUDA_DEVICE_MAX_CONNECTIONS asks for when it is below CUDA's
 * default of 8 (1 to 7), else 0. CUDA runs a process's streams on that many queues,
 * shared round robin, each running its work in the order it was issued, whatever the
 * stream. A stream call's wait (stream_enter) holds everything behind it on its queue,
 * the collective's own copies and kernels too, which the progress thread issues later to
 * a stream of its own: where the two share a queue the call cannot finish (the CUDA
 * Driver API, "Stream Memory Operations": an order made through them is not visible to
 * CUDA's scheduler). hoop's own streams (a compute, a copy and a side stream, one per
 * comm, DDP's) with the caller's fill CUDA's 8 or so: with fewer queues the stream calls
 * block instead (the rule in include/hoop/collectives.h). Read once: the driver reads it
 * when the context is made. */
int hoop__stream_few_queues(void)
{
    static atomic_int known = -1;
    int v = atomic_load(&known);
    if (v < 0) {
        const char *s = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
        char *end = NULL;
        long n = s ? strtol(s, &end, 10) : 0;
        v = s && end != s && n >= 1 && n < 8 ? (int)n : 0;
        if (v && atomic_exchange(&known, v) < 0)
            HOOP_INFO(COLL,
                      "CUDA_DEVICE_MAX_CONNECTIONS=%d: fewer hardware queues than CUDA's "
                      "default 8, where a wait queued on the caller's stream may hold the "
                      "collective's own device work; the _stream calls block the calling "
                      "thread instead",
                      v);
        atomic_store(&known, v);
    }
    return v;
}

static hoop_status enqueue(hoop_comm *comm, hoop__coll_args *a, hoop_request **req,
                           const struct via *v);

/* 1 once a stream call found that the driver has no stream memory operations
 * (cuStreamWaitValue32: stream_enter's HOOP_ERR_UNSUPPORTED), for the process's life. */
static atomic_int no_stream_wait;

int hoop__stream_calls_block(void)
{
    return hoop__stream_few_queues() || atomic_load(&no_stream_wait);
}

/* A stream call that cannot queue its wait (hoop__stream_few_queues, no_stream_wait):
 * the calling thread waits for the stream's earlier work (up to HOOP_TIMEOUT), then runs
 * the call as a blocking one; its failure is also kept for hoop_stream_status and later stream
 * calls, as a stream call's is. */
static hoop_status blocking_stream_call(hoop_comm *comm, const struct hoop__cuda_coll *cc,
                                        hoop__coll_args *a, const struct via *v, const char *fn)
{
    hoop_status st = cc->stream_sync(v->stream);
    if (st != HOOP_OK) {
        st = HOOP_ERROR(st, "%s: the work queued on the stream before the call: %s", fn,
                        hoop_last_error());
        hoop__stream_fail(comm, st, hoop_last_error());
        return st;
    }
    st = enqueue(comm, a, NULL, NULL);
    if (st != HOOP_OK) hoop__stream_fail(comm, st, hoop_last_error());
    return st;
}

/* Orders r on v's stream: the start event the progress thread waits for, and the wait
 * for the comm's flag to reach r's value that holds the stream's later work. The value
 * is taken only once the stream has its wait, so the values waited for count up. */
static hoop_status stream_enter(hoop_comm *comm, const struct hoop__cuda_coll *cc,
                                const struct via *v, hoop_request *r)
{
    if (!comm->sflag) HOOP_CHECK(cc->flag_alloc(&comm->sflag));
    uint32_t value = comm->sflag_next + 1; /* wraps: the wait's comparison is cyclic */
    HOOP_CHECK(cc->stream_enter(v->stream, comm->sflag, value, &r->start));
    comm->sflag_next = value;
    r->sflag = comm->sflag;
    r->sflag_value = value;
    return HOOP_OK;
}

/* Gives r the comm's next sequence number and appends it to the queue. */
static void queue_push(hoop_comm *comm, hoop_request *r)
{
    pthread_mutex_lock(&comm->mu);
    r->hdr.seq = comm->next_seq++;
    if (comm->q_tail)
        comm->q_tail->next = r;
    else
        comm->q_head = r;
    comm->q_tail = r;
    pthread_mutex_unlock(&comm->mu);
}

hoop_status hoop__request_queue_replay(hoop_comm *comm, const hoop__coll_args *a,
                                       struct hoop__gcall *g)
{
    hoop_request *r;
    HOOP_CHECK(new_request(comm, a, &r));
    atomic_store(&r->refs, 1); /* the progress thread's: nobody waits on the host */
    r->gcall = g;
    r->sflag = hoop__capture_flag(g);
    r->sflag_value = 1;
    queue_push(comm, r);
    hoop__comm_wake(comm);
    return HOOP_OK;
}

static hoop_status enqueue(hoop_comm *comm, hoop__coll_args *a, hoop_request **req,
                           const struct via *v)
{
    static const char *const sfns[] = {[HOOP__COLL_ALLREDUCE] = "hoop_allreduce_stream",
                                       [HOOP__COLL_BROADCAST] = "hoop_broadcast_stream",
                                       [HOOP__COLL_REDUCE] = "hoop_reduce_stream",
                                       [HOOP__COLL_ALLGATHER] = "hoop_allgather_stream",
                                       [HOOP__COLL_REDUCE_SCATTER] = "hoop_reduce_scatter_stream",
                                       [HOOP__COLL_BARRIER] = "hoop_barrier_stream"};
    const struct hoop__cuda_coll *cc = NULL;
    hoop_request *r;
    if (v) HOOP_CHECK(stream_table(comm, sfns[a->coll], &cc));
    HOOP_CHECK(classify(comm, a));
    a->rank = comm->rank;
    a->world_size = comm->world_size;
    a->elem = hoop_dtype_size(a->dtype);
    a->chunk_bytes = comm->chunk_bytes;
    int captured = 0;
    if (v && HOOP__CUDA_COLL_HAS(cc, stream_capturing))
        HOOP_CHECK(cc->stream_capturing(v->stream, &captured));
    if (captured && hoop__stream_few_queues())
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "%s: cannot be captured into a CUDA graph while "
                          "CUDA_DEVICE_MAX_CONNECTIONS=%d: with fewer hardware queues than "
                          "CUDA's default 8, the graph's wait for the collective may hold the "
                          "collective's own device work; unset it, or set it to 8 or more",
                          sfns[a->coll], hoop__stream_few_queues());
    if (captured) return hoop__capture_call(comm, cc, a, v->stream, sfns[a->coll]);
    if (v && (hoop__stream_few_queues() || atomic_load(&no_stream_wait)))
        return blocking_stream_call(comm, cc, a, v, sfns[a->coll]);
    /* Device memory and page locks come from this thread, before the call is queued (and
     * before a stream call's wait): the progress thread must not make CUDA wait for the
     * device (devres.c). */
    if (a->dev) HOOP_CHECK(hoop__comm_dev_reserve(comm, a));
    if (comm->segs) { /* memory from hoop_comm_alloc_shared cannot be freed under the call */
        a->held[0] = hoop__seg_find(comm, a->sendbuf, 1);
        a->held[1] = hoop__seg_find(comm, a->recvbuf, 1);
        a->in_seg[0] = a->held[0] != NULL;
        a->in_seg[1] = a->held[1] != NULL;
        if (a->held[1] == a->held[0]) a->held[1] = NULL;
    }
    HOOP_CHECK(new_request(comm, a, &r));
    if (v) {
        hoop_status st = stream_enter(comm, cc, v, r);
        if (st != HOOP_OK) {
            atomic_store(&r->refs, 1);
            hoop__request_release(r);
            if (st != HOOP_ERR_UNSUPPORTED) return st;
            /* no stream memory operations in this driver: the calls block instead */
            if (!atomic_exchange(&no_stream_wait, 1))
                HOOP_INFO(COLL, "%s; the _stream calls block the calling thread instead",
                          hoop_last_error());
            return blocking_stream_call(comm, cc, a, v, sfns[a->coll]);
        }
    }
    for (int k = 0; k < 2; k++) /* dropped by hoop__request_complete */
        if (a->held[k]) atomic_fetch_add(&a->held[k]->inflight, 1);
    queue_push(comm, r);
    if (v) { /* nobody waits on the host: the progress thread runs it */
        hoop__comm_wake(comm);
        hoop__request_release(r);
        return HOOP_OK;
    }
    if (req) { /* a blocking call drives progress itself in hoop_wait */
        /* Woken from a long sleep only: a nap means a caller drove progress a moment
         * ago and is likely to wait for this call at once (the latency-bound loop), and
         * a thread woken into that wait competes with it for the engine (an 8-byte
         * all-reduce of 2 ranks over shm took 7-30 us on 2 cores instead of about 1.4).
         * A nap ends within DRIVEN_NAP_MS, and the thread then starts the call itself. */
        if (atomic_load(&comm->sleeping) == HOOP__SLEEP_LONG) hoop__comm_wake(comm);
        *req = r;
        return HOOP_OK;
    }
    int collected;
    hoop_status st = wait_req(r, -1, &collected);
    /* A blocking call whose wait gave up leaves the request with the progress thread:
     * drop the caller's reference, nobody can wait for it again. (A call that completed
     * with HOOP_ERR_TIMEOUT, the comm's deadline, was collected like any other.) */
    if (!collected) hoop__request_release(r);
    return st;
}

/* A call this rank refuses for its arguments (st, HOOP_ERR_INVALID, message set) still
 * takes its turn on the comm, so that no other rank waits for it until HOOP_TIMEOUT: a
 * barrier (the vote alone) whose header is the call as given, marked refused. Where
 * every rank refused the same call, the headers agree and the barrier passes: each rank
 * got HOOP_ERR_INVALID and the comm goes on. Where another rank called it validly, the
 * vote fails the call on every rank with HOOP_ERR_MISMATCH naming the refusal, and the
 * comm stays failed. A blocking call (wait) returns st once that vote is over, so every
 * rank has heard of the refusal before this one goes on (or exits: its links closing
 * first would tell the others only that it left); the others return st at once, the
 * barrier running on the progress thread. Not done on a one-rank comm, nor for a call
 * ordered on a stream that is being captured (its rank's later calls would be numbered
 * differently from the graph's), nor when the request cannot be made. */
static hoop_status refuse(hoop_comm *comm, const hoop__coll_args *a, const struct via *v, int wait,
                          hoop_status st)
{
    const struct hoop__cuda_coll *cc = NULL;
    hoop_request *r;
    int captured = 0;
    char msg[512];
    if (!comm || comm->world_size < 2 || st != HOOP_ERR_INVALID) return st;
    int failed = atomic_load(&comm->state) == HOOP__CS_FAILED;
    snprintf(msg, sizeof(msg), "%s", hoop_last_error());
    if (v && hoop__cuda_backend(NULL, &cc) == HOOP_OK && cc &&
        HOOP__CUDA_COLL_HAS(cc, stream_capturing) &&
        (cc->stream_capturing(v->stream, &captured) != HOOP_OK || captured))
        return HOOP_ERROR(st, "%s", msg);
    hoop__coll_args b = {.coll = HOOP__COLL_BARRIER,
                         .dtype = HOOP_DTYPE_U8,
                         .rank = comm->rank,
                         .world_size = comm->world_size,
                         .elem = 1,
                         .chunk_bytes = comm->chunk_bytes};
    if (new_request(comm, &b, &r) == HOOP_OK) {
        r->hdr.coll = (uint8_t)a->coll;
        r->hdr.count = a->count;
        r->hdr.dtype = (uint8_t)a->dtype;
        r->hdr.op = (uint8_t)a->op;
        r->hdr.root = a->root;
        r->hdr.refused = 1;
        wait = wait && !v;
        if (!wait) atomic_store(&r->refs, 1); /* the progress thread's: nobody waits */
        queue_push(comm, r);
        hoop__comm_wake(comm);
        int collected;
        hoop_status bs = HOOP_OK;
        if (wait) bs = wait_req(r, -1, &collected); /* its outcome: the others' news */
        if (wait && !collected) hoop__request_release(r);
        /* A comm that had failed before this call: its error, as every call on it
         * returns (comm.h), not this call's arguments' */
        if (failed && bs != HOOP_OK) return bs;
    }
    return HOOP_ERROR(st, "%s", msg);
}

/* HOOP_ERR_INVALID when the byte ranges [s, s + sb) and [r, r + rb) overlap other than
 * as the call's in-place form (in_place: the caller's test of it; rule: its wording). A
 * partial overlap cannot be honoured: a rank would read elements it has already
 * overwritten, and ranks would end with different results. The same test holds for GPU
 * buffers (pointers into one allocation compare as addresses there too). */
static hoop_status check_overlap(const char *fn, const void *s, size_t sb, const void *r, size_t rb,
                                 int in_place, const char *rule)
{
    uintptr_t x = (uintptr_t)s, y = (uintptr_t)r;
    if (in_place || sb == 0 || rb == 0 || x >= y + rb || y >= x + sb) return HOOP_OK;
    return HOOP_ERROR(HOOP_ERR_INVALID,
                      "%s: sendbuf %p (%zu bytes) and recvbuf %p (%zu bytes) overlap: in place "
                      "means %s, otherwise the two buffers must not overlap",
                      fn, s, sb, r, rb, rule);
}

static hoop_status check_common(const char *fn, hoop_comm *comm, size_t count, hoop_dtype dtype,
                                hoop_op op, int reduces)
{
    if (!comm) return HOOP_ERROR(HOOP_ERR_INVALID, "%s: comm is NULL", fn);
    if ((unsigned)dtype >= HOOP_DTYPE_COUNT_)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: dtype %d is unknown", fn, (int)dtype);
    if (count > SIZE_MAX / 8 / (size_t)comm->world_size)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: count=%zu is too large", fn, count);
    if (!reduces) return HOOP_OK;
    if ((unsigned)op >= HOOP_OP_COUNT_)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: op %d is unknown", fn, (int)op);
    if (op == HOOP_OP_AVG && dtype != HOOP_DTYPE_F32 && dtype != HOOP_DTYPE_F64 &&
        dtype != HOOP_DTYPE_F16 && dtype != HOOP_DTYPE_BF16)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: HOOP_OP_AVG is not defined for integer dtype %s; use "
                          "HOOP_OP_SUM and divide",
                          fn, hoop_dtype_name(dtype));
    return HOOP_OK;
}

static hoop_status check_buf(const char *fn, const char *what, const void *p, size_t count)
{
    if (count > 0 && !p) return HOOP_ERROR(HOOP_ERR_INVALID, "%s: %s is NULL", fn, what);
    return HOOP_OK;
}

/* A buffer that is reduced (read as elements of dtype) must be aligned to its elements,
 * as C requires of any typed access. */
static hoop_status check_rbuf(const char *fn, const char *what, const void *p, size_t count,
                              hoop_dtype dtype)
{
    HOOP_CHECK(check_buf(fn, what, p, count));
    size_t elem = hoop_dtype_size(dtype);
    if (count > 0 && (uintptr_t)p % elem != 0)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: %s %p is not aligned to the %zu-byte elements of %s", fn, what, p,
                          elem, hoop_dtype_name(dtype));
    return HOOP_OK;
}

static hoop_status check_root(const char *fn, hoop_comm *comm, int root)
{
    if (root < 0 || root >= comm->world_size)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: root=%d is not in [0, %d)", fn, root,
                          comm->world_size);
    return HOOP_OK;
}

/* Makes call a run direct when it may: in place, its whole buffer (base, bytes) inside
 * memory every rank maps, under AUTO from DIRECT_MIN_BYTES up or under DIRECT at any
 * size. Every input is the same on every rank of a correct program, so ranks choose
 * alike; the header carries the choice, the segment and the offset, so a program that
 * differs fails as a mismatch. */
static void try_direct(hoop_comm *comm, hoop__coll_args *a, const void *base, size_t bytes,
                       int in_place)
{
    hoop_algo want = (hoop_algo)atomic_load(&comm->algo);
    size_t elem = hoop_dtype_size(a->dtype);
    if (comm->world_size < 2) return;
    if (want != HOOP_ALGO_DIRECT &&
        (want != HOOP_ALGO_AUTO || bytes < DIRECT_MIN_BYTES(comm->world_size)))
        return;
    a->wanted_direct = 1; /* until it is taken */
    if (!in_place || !comm->segs) return;
    hoop__seg *g = hoop__seg_find(comm, base, bytes);
    if (!g || !g->direct) return;
    size_t off = (size_t)((const char *)base - g->base[comm->rank]);
    if (off % elem != 0 || off / elem > INT32_MAX) return;
    a->wanted_direct = 0;
    a->algo = HOOP_ALGO_DIRECT;
    a->seg_base = g->base;
    a->seg_off = off;
    a->root = (int)g->id;
}

static hoop_status allreduce(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                             hoop_dtype dtype, hoop_op op, hoop_request **req, const struct via *v)
{
    const char *fn = v ? "hoop_allreduce_stream" : "hoop_allreduce";
    hoop__coll_args a = {.coll = HOOP__COLL_ALLREDUCE,
                         .sendbuf = sendbuf,
                         .recvbuf = recvbuf,
                         .count = count,
                         .dtype = dtype,
                         .op = op};
    hoop_status st;
    HOOP_CHECK_GOTO(check_common(fn, comm, count, dtype, op, 1), st, bad);
    HOOP_CHECK_GOTO(check_rbuf(fn, "sendbuf", sendbuf, count, dtype), st, bad);
    HOOP_CHECK_GOTO(check_rbuf(fn, "recvbuf", recvbuf, count, dtype), st, bad);
    size_t bytes = count * hoop_dtype_size(dtype);
    HOOP_CHECK_GOTO(
        check_overlap(fn, sendbuf, bytes, recvbuf, bytes, sendbuf == recvbuf, "sendbuf == recvbuf"),
        st, bad);
    try_direct(comm, &a, recvbuf, bytes, sendbuf == recvbuf);
    a.asked = (hoop_algo)atomic_load(&comm->algo);
    if (a.algo != HOOP_ALGO_DIRECT) a.algo = hoop__comm_algo_pick(comm, a.asked, bytes);
    return enqueue(comm, &a, req, v);
bad:
    return refuse(comm, &a, v, req == NULL, st);
}

static hoop_status broadcast(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                             hoop_dtype dtype, int root, hoop_request **req, const struct via *v)
{
    const char *fn = v ? "hoop_broadcast_stream" : "hoop_broadcast";
    hoop__coll_args a = {.coll = HOOP__COLL_BROADCAST,
                         .sendbuf = sendbuf,
                         .recvbuf = recvbuf,
                         .count = count,
                         .dtype = dtype,
                         .root = root};
    hoop_status st;
    HOOP_CHECK_GOTO(check_common(fn, comm, count, dtype, HOOP_OP_SUM, 0), st, bad);
    HOOP_CHECK_GOTO(check_root(fn, comm, root), st, bad);
    if (comm->rank == root) {
        size_t bytes = count * hoop_dtype_size(dtype);
        HOOP_CHECK_GOTO(check_buf(fn, "sendbuf", sendbuf, count), st, bad);
        HOOP_CHECK_GOTO(check_overlap(fn, sendbuf, bytes, recvbuf, bytes, sendbuf == recvbuf,
                                      "sendbuf == recvbuf"),
                        st, bad);
    }
    HOOP_CHECK_GOTO(check_buf(fn, "recvbuf", recvbuf, count), st, bad);
    return enqueue(comm, &a, req, v);
bad:
    return refuse(comm, &a, v, req == NULL, st);
}

static hoop_status reduce(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                          hoop_dtype dtype, hoop_op op, int root, hoop_request **req,
                          const struct via *v)
{
    const char *fn = v ? "hoop_reduce_stream" : "hoop_reduce";
    hoop__coll_args a = {.coll = HOOP__COLL_REDUCE,
                         .sendbuf = sendbuf,
                         .recvbuf = recvbuf,
                         .count = count,
                         .dtype = dtype,
                         .op = op,
                         .root = root};
    hoop_status st;
    HOOP_CHECK_GOTO(check_common(fn, comm, count, dtype, op, 1), st, bad);
    HOOP_CHECK_GOTO(check_root(fn, comm, root), st, bad);
    HOOP_CHECK_GOTO(check_rbuf(fn, "sendbuf", sendbuf, count, dtype), st, bad);
    if (comm->rank == root) {
        size_t bytes = count * hoop_dtype_size(dtype);
        HOOP_CHECK_GOTO(check_rbuf(fn, "recvbuf", recvbuf, count, dtype), st, bad);
        HOOP_CHECK_GOTO(check_overlap(fn, sendbuf, bytes, recvbuf, bytes, sendbuf == recvbuf,
                                      "sendbuf == recvbuf"),
                        st, bad);
    }
    return enqueue(comm, &a, req, v);
bad:
    return refuse(comm, &a, v, req == NULL, st);
}

static hoop_status allgather(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                             hoop_dtype dtype, hoop_request **req, const struct via *v)
{
    const char *fn = v ? "hoop_allgather_stream" : "hoop_allgather";
    hoop__coll_args a = {.coll = HOOP__COLL_ALLGATHER,
                         .sendbuf = sendbuf,
                         .recvbuf = recvbuf,
                         .count = count,
                         .dtype = dtype};
    hoop_status st;
    HOOP_CHECK_GOTO(check_common(fn, comm, count, dtype, HOOP_OP_SUM, 0), st, bad);
    HOOP_CHECK_GOTO(check_buf(fn, "sendbuf", sendbuf, count), st, bad);
    HOOP_CHECK_GOTO(check_buf(fn, "recvbuf", recvbuf, count), st, bad);
    size_t block = count * hoop_dtype_size(dtype), total = block * (size_t)comm->world_size;
    int in_place = sendbuf == (const char *)recvbuf + block * (size_t)comm->rank;
    HOOP_CHECK_GOTO(check_overlap(fn, sendbuf, block, recvbuf, total, in_place,
                                  "sendbuf == recvbuf + rank x count elements"),
                    st, bad);
    try_direct(comm, &a, recvbuf, total, in_place);
    return enqueue(comm, &a, req, v);
bad:
    return refuse(comm, &a, v, req == NULL, st);
}

static hoop_status reduce_scatter(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                  hoop_dtype dtype, hoop_op op, hoop_request **req,
                                  const struct via *v)
{
    const char *fn = v ? "hoop_reduce_scatter_stream" : "hoop_reduce_scatter";
    hoop__coll_args a = {.coll = HOOP__COLL_REDUCE_SCATTER,
                         .sendbuf = sendbuf,
                         .recvbuf = recvbuf,
                         .count = count,
                         .dtype = dtype,
                         .op = op};
    hoop_status st;
    HOOP_CHECK_GOTO(check_common(fn, comm, count, dtype, op, 1), st, bad);
    HOOP_CHECK_GOTO(check_rbuf(fn, "sendbuf", sendbuf, count, dtype), st, bad);
    HOOP_CHECK_GOTO(check_rbuf(fn, "recvbuf", recvbuf, count, dtype), st, bad);
    size_t block = count * hoop_dtype_size(dtype), total = block * (size_t)comm->world_size;
    int in_place = recvbuf == (const char *)sendbuf + block * (size_t)comm->rank;
    HOOP_CHECK_GOTO(check_overlap(fn, sendbuf, total, recvbuf, block, in_place,
                                  "recvbuf == sendbuf + rank x count elements"),
                    st, bad);
    try_direct(comm, &a, sendbuf, total, in_place);
    return enqueue(comm, &a, req, v);
bad:
    return refuse(comm, &a, v, req == NULL, st);
}

static hoop_status barrier(hoop_comm *comm, hoop_request **req, const struct via *v)
{
    const char *fn = v ? "hoop_barrier_stream" : "hoop_barrier";
    if (!comm) return HOOP_ERROR(HOOP_ERR_INVALID, "%s: comm is NULL", fn);
    hoop__coll_args a = {.coll = HOOP__COLL_BARRIER, .dtype = HOOP_DTYPE_U8};
    return enqueue(comm, &a, req, v);
}

// ----------------------------------------------------------------- one issuing thread

/* Each thread's own address, naming it in comm->issuer. */
static _Thread_local char this_thread;

/* Marks this thread as issuing fn on comm. A collective is numbered when it is queued,
 * so two threads issuing on one comm at once number their calls in an order that may
 * differ from rank to rank: calls of the same signature then pair one thread's data on
 * one rank with the other's on another, and every call succeeds with wrong values (the
 * vote cannot tell them apart). A thread that enters while another is inside a call
 * breaks the rule of collectives.h ("one thread issues collectives on a given comm at a
 * time"): the comm fails with HOOP_ERR_USAGE on this rank, its peers fail naming it,
 * and this call returns that error. (Calls that do not overlap in time cannot be told
 * from one thread's; their order across ranks is the program's to keep.) The same
 * thread may nest (a call made while its own is running, such as from a hook). */
static hoop_status issue_enter(hoop_comm *comm, const char *fn)
{
    const void *none = NULL;
    if (!comm) return HOOP_OK; /* the call's own check names the NULL comm */
    if (atomic_compare_exchange_strong(&comm->issuer, &none, &this_thread)) {
        atomic_store(&comm->issuer_fn, fn);
        comm->issuer_depth = 1;
        return HOOP_OK;
    }
    if (none == &this_thread) {
        comm->issuer_depth++;
        return HOOP_OK;
    }
    const char *other = atomic_load(&comm->issuer_fn);
    snprintf(comm->misuse_msg, sizeof(comm->misuse_msg),
             "rank %d: two threads issued collectives on one communicator at once (%s, while "
             "another thread was in %s): a comm takes one thread's calls at a time "
             "(hoop/collectives.h, thread-safety), else the ranks may pair different calls",
             comm->rank, fn, other ? other : "a collective");
    char msg[sizeof(comm->misuse_msg)];
    memcpy(msg, comm->misuse_msg, sizeof(msg));
    (void)hoop__comm_fail_misuse(comm);
    return HOOP_ERROR(HOOP_ERR_USAGE, "%s", msg);
}

static hoop_status issue_leave(hoop_comm *comm, hoop_status st)
{
    if (comm && atomic_load(&comm->issuer) == &this_thread && --comm->issuer_depth == 0) {
        atomic_store(&comm->issuer_fn, NULL);
        atomic_store(&comm->issuer, NULL);
    }
    return st;
}

/* Runs call between issue_enter and issue_leave. */
#define ISSUE(comm, fn, call)              \
    do {                                   \
        HOOP_CHECK(issue_enter(comm, fn)); \
        return issue_leave(comm, call);    \
    } while (0)

// ----------------------------------------------------------------- the public calls

hoop_status hoop_allreduce(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                           hoop_dtype dtype, hoop_op op, hoop_request **req)
{
    ISSUE(comm, "hoop_allreduce", allreduce(comm, sendbuf, recvbuf, count, dtype, op, req, NULL));
}

hoop_status hoop_broadcast(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                           hoop_dtype dtype, int root, hoop_request **req)
{
    ISSUE(comm, "hoop_broadcast", broadcast(comm, sendbuf, recvbuf, count, dtype, root, req, NULL));
}

hoop_status hoop_reduce(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                        hoop_dtype dtype, hoop_op op, int root, hoop_request **req)
{
    ISSUE(comm, "hoop_reduce", reduce(comm, sendbuf, recvbuf, count, dtype, op, root, req, NULL));
}

hoop_status hoop_allgather(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                           hoop_dtype dtype, hoop_request **req)
{
    ISSUE(comm, "hoop_allgather", allgather(comm, sendbuf, recvbuf, count, dtype, req, NULL));
}

hoop_status hoop_reduce_scatter(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                hoop_dtype dtype, hoop_op op, hoop_request **req)
{
    ISSUE(comm, "hoop_reduce_scatter",
          reduce_scatter(comm, sendbuf, recvbuf, count, dtype, op, req, NULL));
}

hoop_status hoop_barrier(hoop_comm *comm, hoop_request **req)
{
    ISSUE(comm, "hoop_barrier", barrier(comm, req, NULL));
}

hoop_status hoop_allreduce_stream(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                  hoop_dtype dtype, hoop_op op, hoop_stream *stream)
{
    struct via v = {stream};
    ISSUE(comm, "hoop_allreduce_stream",
          allreduce(comm, sendbuf, recvbuf, count, dtype, op, NULL, &v));
}

hoop_status hoop_broadcast_stream(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                  hoop_dtype dtype, int root, hoop_stream *stream)
{
    struct via v = {stream};
    ISSUE(comm, "hoop_broadcast_stream",
          broadcast(comm, sendbuf, recvbuf, count, dtype, root, NULL, &v));
}

hoop_status hoop_reduce_stream(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                               hoop_dtype dtype, hoop_op op, int root, hoop_stream *stream)
{
    struct via v = {stream};
    ISSUE(comm, "hoop_reduce_stream",
          reduce(comm, sendbuf, recvbuf, count, dtype, op, root, NULL, &v));
}

hoop_status hoop_allgather_stream(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                  hoop_dtype dtype, hoop_stream *stream)
{
    struct via v = {stream};
    ISSUE(comm, "hoop_allgather_stream", allgather(comm, sendbuf, recvbuf, count, dtype, NULL, &v));
}

hoop_status hoop_reduce_scatter_stream(hoop_comm *comm, const void *sendbuf, void *recvbuf,
                                       size_t count, hoop_dtype dtype, hoop_op op,
                                       hoop_stream *stream)
{
    struct via v = {stream};
    ISSUE(comm, "hoop_reduce_scatter_stream",
          reduce_scatter(comm, sendbuf, recvbuf, count, dtype, op, NULL, &v));
}

hoop_status hoop_barrier_stream(hoop_comm *comm, hoop_stream *stream)
{
    struct via v = {stream};
    ISSUE(comm, "hoop_barrier_stream", barrier(comm, NULL, &v));
}

hoop_status hoop_stream_status(hoop_comm *comm)
{
    if (!comm) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_stream_status: comm is NULL");
    pthread_mutex_lock(&comm->mu);
    hoop_status st = comm->stream_st;
    char msg[sizeof(comm->stream_msg)];
    snprintf(msg, sizeof(msg), "%s", comm->stream_msg);
    pthread_mutex_unlock(&comm->mu);
    return st == HOOP_OK ? HOOP_OK : HOOP_ERROR(st, "%s", msg);
}
