/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/capture.c -- collectives captured into CUDA graphs: a _stream call on a
 * stream under capture (include/hoop/collectives.h, "Captured into a CUDA graph").
 *
 * At capture, nothing is queued: the call's arguments are checked and prepared as for any
 * call (its device memory reserved, devres.c) and kept in a record, and the capture gets
 * two nodes (the backend's stream_capture, src/cuda/coll.h): a host node, which at each
 * replay queues a new call with the kept arguments on the comm (fire: a new sequence
 * number and vote, so replays take their places in the comm's order as they come), and a
 * wait node that holds the rest of the replay until the record's flag is 1. The flag is
 * reset by the host node and set by the call's completion, whatever its outcome
 * (collectives.c, stream_release), so a replay whose call fails still lets its stream go,
 * and the failure is kept for hoop_stream_status.
 *
 * Lifetime: the record is counted: one reference for the graph (a user object: CUDA
 * drops it once the graph and its executable graphs are destroyed and their launches
 * have run), one for the comm while both exist (on the comm's list; whichever goes first,
 * the graph (drop) or the comm (hoop__capture_detach), unlinks it), one per replay's call
 * in flight. The flag is the record's: from the backend's pool, returned with the record,
 * so a graph that outlives its comm still waits on valid memory; its replays then find no
 * comm, run nothing and let the stream go at once.
 *
 * Thread-safety: capture on the comm's issuing thread; fire and drop on a CUDA thread (no
 * CUDA calls there); a record's comm and busy under its mutex, taken before comm->mu.
 */
#include <stdio.h>
#include <stdlib.h>

#include "collectives/comm.h"
#include "core/backend.h"
#include "core/check.h"
#include "cuda/coll.h"

#define CAPTURE_MODE_RELAXED 2 /* cudaStreamCaptureModeRelaxed */

struct hoop__gcall {
    atomic_int refs;
    pthread_mutex_t mu;
    hoop_comm *comm; /* under mu: NULL once the comm or the graph is gone */
    int busy;        /* under mu: a replay's call is queued or running */
    hoop__coll_args args;
    uint32_t *flag; /* the wait node's: 1 once the replay's call has ended */
    const struct hoop__cuda_coll *cc;
    const char *fn;           /* "hoop_allreduce_stream", for messages */
    struct hoop__gcall *next; /* on comm->gcalls, under comm->mu */
};

void hoop__capture_release(struct hoop__gcall *g)
{
    if (atomic_fetch_sub(&g->refs, 1) != 1) return;
    g->cc->gflag_put(g->flag);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void hoop__capture_idle(struct hoop__gcall *g)
{
    pthread_mutex_lock(&g->mu);
    g->busy = 0;
    pthread_mutex_unlock(&g->mu);
}

uint32_t *hoop__capture_flag(const struct hoop__gcall *g)
{
    return g->flag;
}

/* Removes g from comm's list (if it is there). Caller holds comm->mu. */
static void unlink_call(hoop_comm *comm, struct hoop__gcall *g)
{
    for (struct hoop__gcall **pp = &comm->gcalls; *pp; pp = &(*pp)->next)
        if (*pp == g) {
            *pp = g->next;
            return;
        }
}

/* The host node, at each replay (a CUDA thread: no CUDA calls): queues the call, or lets
 * the stream go at once when there is nothing to run. */
static void fire(void *arg)
{
    struct hoop__gcall *g = arg;
    pthread_mutex_lock(&g->mu);
    hoop_comm *comm = g->comm;
    if (!comm) { /* the comm was destroyed: nothing to run (hoop_comm_destroy's rule) */
        g->cc->flag_write(g->flag, 1);
    } else if (g->busy) { /* its previous replay runs yet: it will set the flag for both */
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "rank %d: a captured %s was replayed while its previous replay still ran (two "
                 "executable graphs of one capture launched at once?): the second replay did "
                 "not run",
                 comm->rank, g->fn);
        hoop__stream_fail(comm, HOOP_ERR_USAGE, msg);
    } else if (hoop__stream_failed(comm)) { /* as a _stream call after a failure: no call */
        g->cc->flag_write(g->flag, 1);
    } else {
        __atomic_store_n(g->flag, 0, __ATOMIC_RELEASE); /* this replay's wait waits */
        g->busy = 1;
        atomic_fetch_add(&g->refs, 1); /* the call's, released at its completion */
        hoop_status st = hoop__request_queue_replay(comm, &g->args, g);
        if (st != HOOP_OK) {
            g->busy = 0;
            atomic_fetch_sub(&g->refs, 1); /* the graph's and ours remain */
            hoop__stream_fail(comm, st, hoop_last_error());
            g->cc->flag_write(g->flag, 1);
        }
    }
    pthread_mutex_unlock(&g->mu);
}

/* The graph's reference, released (a CUDA thread: no CUDA calls). */
static void drop(void *arg)
{
    struct hoop__gcall *g = arg;
    pthread_mutex_lock(&g->mu);
    hoop_comm *comm = g->comm;
    g->comm = NULL;
    if (comm) {
        pthread_mutex_lock(&comm->mu);
        unlink_call(comm, g);
        pthread_mutex_unlock(&comm->mu);
    }
    pthread_mutex_unlock(&g->mu);
    if (comm) hoop__capture_release(g); /* the comm's */
    hoop__capture_release(g);           /* the graph's */
}

void hoop__capture_detach(hoop_comm *comm)
{
    pthread_mutex_lock(&comm->mu);
    struct hoop__gcall *list = comm->gcalls;
    comm->gcalls = NULL;
    for (struct hoop__gcall *g = list; g; g = g->next) atomic_fetch_add(&g->refs, 1); /* ours */
    pthread_mutex_unlock(&comm->mu);
    for (struct hoop__gcall *g = list, *next; g; g = next) {
        next = g->next;
        pthread_mutex_lock(&g->mu);
        int linked = g->comm == comm; /* else the graph went first (drop) */
        g->comm = NULL;
        pthread_mutex_unlock(&g->mu);
        if (linked) hoop__capture_release(g); /* the comm's */
        hoop__capture_release(g);             /* ours */
    }
}

/* What the call needs that allocates or page-locks (its device memory, devres.c; the
 * record's flag), made inside the capture: CUDA lets a capturing thread allocate in
 * relaxed mode only, and the allocator must not give its cache back there (cudaFree would
 * break the capture): the thread is marked as one that may not wait for the device. */
static hoop_status prepare(hoop_comm *comm, const struct hoop__cuda_coll *cc,
                           const hoop__coll_args *a, uint32_t **flag)
{
    int old = cc->capture_mode(CAPTURE_MODE_RELAXED);
    if (old < 0)
        return HOOP_ERROR(HOOP_ERR_CUDA, "cudaThreadExchangeStreamCaptureMode failed at a "
                                         "captured call");
    hoop__device_sync_forbid(1);
    hoop_status st = a->dev ? hoop__comm_dev_reserve(comm, a) : HOOP_OK;
    if (st == HOOP_OK) st = cc->gflag_get(flag);
    hoop__device_sync_forbid(-1);
    cc->capture_mode(old);
    return st;
}

hoop_status hoop__capture_call(hoop_comm *comm, const struct hoop__cuda_coll *cc,
                               const hoop__coll_args *a, void *stream, const char *fn)
{
    struct hoop__gcall *g;
    int taken = 0;
    if (!HOOP__CUDA_COLL_HAS(cc, graph_free))
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "%s: stream %p is being captured into a CUDA graph, and the CUDA "
                          "backend module is older than this library (it cannot capture "
                          "collectives); reinstall it with this hoop",
                          fn, stream);
    if (a->algo == HOOP_ALGO_DIRECT)
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "%s: a call captured into a CUDA graph cannot run direct on memory from "
                          "hoop_comm_alloc_shared or hoop_comm_alloc_shared_cuda (it could be "
                          "freed before a replay); use other buffers, or another HOOP_ALGO",
                          fn);
    HOOP_CHECK(hoop__calloc(&g, 1));
    hoop_status st = prepare(comm, cc, a, &g->flag);
    if (st != HOOP_OK) {
        free(g);
        return st;
    }
    atomic_store(&g->refs, 2); /* the comm's, the graph's */
    pthread_mutex_init(&g->mu, NULL);
    g->comm = comm;
    g->args = *a;
    g->args.held[0] = g->args.held[1] = NULL; /* no shared segment is held across replays */
    g->cc = cc;
    g->fn = fn;
    pthread_mutex_lock(&comm->mu);
    g->next = comm->gcalls;
    comm->gcalls = g;
    pthread_mutex_unlock(&comm->mu);
    st = cc->stream_capture(stream, g->flag, fire, drop, g, &taken);
    if (st != HOOP_OK && !taken) { /* no graph holds it: both references are ours */
        pthread_mutex_lock(&comm->mu);
        unlink_call(comm, g);
        pthread_mutex_unlock(&comm->mu);
        hoop__capture_release(g);
        hoop__capture_release(g);
    }
    return st;
}
