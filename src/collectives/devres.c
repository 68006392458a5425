/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/devres.c -- what calls on GPU buffers need besides the schedule: the
 * backend's memory table (a stream of the comm's), the receive slots and the stage slots
 * page-locked, device scratch and a 16-bit average's pre-division buffer, and the stage
 * slots (stage.c) for every staged call.
 *
 * Who makes what: everything that allocates device memory or page-locks host memory is
 * made by the issuing thread, at the call, before the call is queued (and so before a
 * stream call's wait is on the stream): hoop__comm_dev_reserve. CUDA may make such calls
 * wait for the whole device (cudaFree does, and the allocator frees its cache when the
 * device is full), and the device may be waiting, in a stream's wait, for a collective
 * that only the progress thread can finish: the progress thread must never make them.
 * It adopts what was reserved at the start of the call (hoop__comm_dev_prepare): a buffer
 * grown by the issuing thread is handed over under comm->mu and the old one given back
 * to the allocator's cache (no CUDA call). As a guard, the progress thread is marked
 * (hoop__device_sync_forbid, progress.c), so the allocator fails instead of freeing its
 * cache should it ever allocate there.
 *
 * Owns: the comm's device resources listed in comm.h. Thread-safety: reserve on the
 * issuing thread, prepare on the progress thread (under comm->engine), free at destroy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/comm.h"
#include "collectives/memops.h"
#include "core/backend.h"
#include "core/check.h"
#include "cuda/coll.h"

static void dev_wake(void *comm)
{
    hoop__comm_wake(comm);
}

/* Makes *buf (*cap bytes) device memory of at least bytes. */
static hoop_status grow_dev(const struct hoop__cuda_coll *cc, void **buf, size_t *cap, size_t bytes)
{
    if (bytes <= *cap) return HOOP_OK;
    cc->dev_free(*buf);
    *buf = NULL;
    *cap = 0;
    HOOP_CHECK(cc->dev_alloc(buf, bytes));
    *cap = bytes;
    return HOOP_OK;
}

/* The pre-division buffer a call needs (a 16-bit average through the links), in bytes. */
static size_t pre_bytes(const hoop__coll_args *a)
{
    int half = a->dtype == HOOP_DTYPE_F16 || a->dtype == HOOP_DTYPE_BF16;
    if (a->op != HOOP_OP_AVG || !half) return 0;
    return a->count * (a->coll == HOOP__COLL_REDUCE_SCATTER ? (size_t)a->world_size : 1) * a->elem;
}

/* A device buffer of bytes for the progress thread (*pend, under comm->mu): made when
 * *reserved is smaller; one it has not adopted yet is replaced. */
static hoop_status reserve_dev(hoop_comm *comm, const struct hoop__cuda_coll *cc, size_t bytes,
                               size_t *reserved, void **pend, size_t *pend_cap)
{
    void *p = NULL, *old;
    if (bytes <= *reserved) return HOOP_OK;
    HOOP_CHECK(cc->dev_alloc(&p, bytes));
    pthread_mutex_lock(&comm->mu);
    old = *pend;
    *pend = p;
    *pend_cap = bytes;
    pthread_mutex_unlock(&comm->mu);
    cc->dev_free(old);
    *reserved = bytes;
    return HOOP_OK;
}

hoop_status hoop__comm_dev_reserve(hoop_comm *comm, const hoop__coll_args *a)
{
    const struct hoop__cuda_coll *cc;
    HOOP_CHECK(hoop__cuda_backend(NULL, &cc));
    if (!cc) return HOOP_INTERNAL_ERROR("the CUDA backend has no collectives' table");
    if (!comm->dev_mem) HOOP_CHECK(cc->memops_open(dev_wake, comm, &comm->dev_mem));
    /* Direct on device memory every rank maps (shared_cuda.c): the data never leaves the
     * GPUs, nothing is staged, and an average divides once, in the kernel. */
    if (a->algo == HOOP_ALGO_DIRECT) return HOOP_OK;
    if (!comm->slots_pinned && comm->slots) {
        HOOP_CHECK(cc->host_register(comm->slots, (size_t)comm->nslots * comm->slot_bytes));
        comm->slots_pinned = 1;
    }
    if (!comm->res_stage && comm->world_size > 1) {
        size_t bytes = (size_t)comm->stage_nslots * comm->slot_bytes;
        void *p = NULL;
        HOOP_CHECK(hoop__calloc((char **)&p, bytes));
        hoop_status st = cc->host_register(p, bytes);
        if (st != HOOP_OK) {
            free(p);
            return st;
        }
        pthread_mutex_lock(&comm->mu);
        comm->res_stage = p;
        pthread_mutex_unlock(&comm->mu);
    }
    HOOP_CHECK(reserve_dev(comm, cc, hoop__coll_scratch_bytes(a), &comm->res_scratch,
                           &comm->pend_dscratch, &comm->pend_dscratch_cap));
    return reserve_dev(comm, cc, pre_bytes(a), &comm->res_pre, &comm->pend_dpre,
                       &comm->pend_dpre_cap);
}

/* Registers the stage slots with every transport that takes registrations, once (the
 * verbs transport writes into them; tcp and shm need none). */
static hoop_status stage_register(hoop_comm *comm)
{
    int kind = comm->stage_pinned ? HOOP_TP_MEM_PINNED : HOOP_TP_MEM_HOST;
    for (int k = 0; k < comm->ntps; k++) {
        hoop__tp_open *o = &comm->tps[k];
        if (!o->tp->reg_mr || o->stage_mr) continue;
        hoop_status st = o->tp->reg_mr(o->ctx, comm->stage, comm->stage_bytes, kind, &o->stage_mr);
        if (st != HOOP_OK) {
            char why[400]; /* the message is rewritten below: copy it out first */
            snprintf(why, sizeof(why), "%s", hoop_last_error());
            o->stage_mr = NULL;
            return HOOP_ERROR(st, "rank %d: registering %zu bytes of stage slots with %s: %s",
                              comm->rank, comm->stage_bytes, o->tp->name, why);
        }
    }
    return HOOP_OK;
}

/* Deregisters the stage slots from the transports (their registrations only). */
static void stage_deregister(hoop_comm *comm)
{
    for (int k = 0; k < comm->ntps; k++) {
        hoop__tp_open *o = &comm->tps[k];
        if (o->stage_mr && o->tp->dereg_mr(o->ctx, o->stage_mr) != HOOP_OK)
            HOOP_WARN("rank %d: deregistering the stage slots from %s: %s", comm->rank, o->tp->name,
                      hoop_last_error());
        o->stage_mr = NULL;
    }
}

/* Frees memory the issuing thread page-locked (its lock too). */
static void unpin_free(void *p)
{
    const struct hoop__cuda_coll *cc = NULL;
    if (!p) return;
    if (hoop__cuda_backend(NULL, &cc) == HOOP_OK && cc) cc->host_unregister(p);
    free(p);
}

hoop_status hoop__comm_stage_prepare(hoop_comm *comm, int pinned, void **stage)
{
    HOOP_CHECK(hoop__sched_stage(
        &comm->sched, 1u << HOOP__BUF_SEND | 1u << HOOP__BUF_RECV | 1u << HOOP__BUF_SCRATCH,
        comm->slot_bytes));
    pthread_mutex_lock(&comm->mu);
    void *res = comm->res_stage;
    pthread_mutex_unlock(&comm->mu);
    if (res && comm->stage != res) { /* the reserved, page-locked slots replace any others */
        stage_deregister(comm);
        free(comm->stage); /* made by a host call (HOOP_MEMOPS=staged): never page-locked */
        comm->stage = res;
        comm->stage_bytes = (size_t)comm->stage_nslots * comm->slot_bytes;
        comm->stage_pinned = 1;
    }
    if (!comm->stage) { /* a host call's (HOOP_MEMOPS=staged): plain memory */
        size_t bytes = (size_t)comm->stage_nslots * comm->slot_bytes;
        HOOP_CHECK(hoop__calloc((char **)&comm->stage, bytes));
        comm->stage_bytes = bytes;
    }
    if (pinned && !comm->stage_pinned)
        return HOOP_INTERNAL_ERROR("rank %d: a call on GPU buffers found no page-locked stage "
                                   "slots (hoop__comm_dev_reserve was not called)",
                                   comm->rank);
    HOOP_CHECK(stage_register(comm));
    *stage = comm->stage;
    return HOOP_OK;
}

/* Takes a buffer the issuing thread reserved (*pend), giving the one it replaces back to
 * the allocator's cache (its last user, an earlier call, has finished). */
static void adopt(hoop_comm *comm, const struct hoop__cuda_coll *cc, void **buf, size_t *cap,
                  void **pend, size_t *pend_cap)
{
    pthread_mutex_lock(&comm->mu);
    void *p = *pend;
    size_t bytes = *pend_cap;
    *pend = NULL;
    *pend_cap = 0;
    pthread_mutex_unlock(&comm->mu);
    if (!p) return;
    cc->dev_free(*buf);
    *buf = p;
    *cap = bytes;
}

hoop_status hoop__comm_dev_prepare(hoop_comm *comm, const hoop__coll_args *a, const void **in,
                                   hoop_op *op, void **scratch, void **stage)
{
    const struct hoop__cuda_coll *cc;
    HOOP_CHECK(hoop__cuda_backend(NULL, &cc));
    if (!cc || !comm->dev_mem)
        return HOOP_INTERNAL_ERROR("rank %d: a call on GPU buffers found no memory table "
                                   "(hoop__comm_dev_reserve was not called)",
                                   comm->rank);
    adopt(comm, cc, &comm->dscratch, &comm->dscratch_cap, &comm->pend_dscratch,
          &comm->pend_dscratch_cap);
    adopt(comm, cc, &comm->dpre, &comm->dpre_cap, &comm->pend_dpre, &comm->pend_dpre_cap);
    *in = a->sendbuf;
    *op = a->op;
    if (a->algo == HOOP_ALGO_DIRECT) return HOOP_OK; /* as hoop__comm_dev_reserve */
    /* Reserved at the call (hoop__coll_scratch_bytes agrees with the schedules); should a
     * schedule ever need more, it grows here, where the allocator keeps its cache. */
    HOOP_CHECK(grow_dev(cc, &comm->dscratch, &comm->dscratch_cap, comm->sched.scratch_bytes));
    *scratch = comm->dscratch;
    size_t pre = pre_bytes(a);
    if (pre) { /* as prescale() does on the host (progress.c) */
        HOOP_CHECK(grow_dev(cc, &comm->dpre, &comm->dpre_cap, pre));
        HOOP_CHECK(
            cc->half_prescale(a->dtype, comm->dpre, a->sendbuf, pre / a->elem, a->world_size));
        *in = comm->dpre;
        *op = HOOP__OP_SUM_SAT;
    }
    return hoop__comm_stage_prepare(comm, 1, stage);
}

/* After the memory table's stream outlived its deadline: forgets (leaks) every buffer its
 * copies and reductions may still read or write, so that nothing frees them under the
 * device. The transports' registrations go (the device does not use them). */
static hoop_status leak_dev(hoop_comm *comm)
{
    char why[512];
    snprintf(why, sizeof(why), "%s", hoop_last_error());
    HOOP_WARN("rank %d: the GPU still runs this communicator's copies (%s); its stage slots, "
              "receive slots and device scratch are leaked, not freed under the device",
              comm->rank, why);
    stage_deregister(comm);
    comm->stage = comm->res_stage = comm->slots = NULL;
    comm->stage_bytes = 0;
    comm->stage_pinned = comm->slots_pinned = 0;
    comm->sflag = NULL;
    comm->dscratch = comm->dpre = comm->pend_dscratch = comm->pend_dpre = NULL;
    comm->dscratch_cap = comm->dpre_cap = comm->pend_dscratch_cap = comm->pend_dpre_cap = 0;
    comm->res_scratch = comm->res_pre = 0;
    return HOOP_ERROR(HOOP_ERR_TIMEOUT, "rank %d: %s", comm->rank, why);
}

hoop_status hoop__comm_free_dev(hoop_comm *comm)
{
    const struct hoop__cuda_coll *cc = NULL;
    /* only where a call on GPU buffers came: a host program never loads the backend */
    int dev = comm->dev_mem || comm->res_stage || comm->sflag || comm->slots_pinned ||
              comm->dscratch || comm->dpre || comm->pend_dscratch || comm->pend_dpre;
    if (dev && hoop__cuda_backend(NULL, &cc) != HOOP_OK) cc = NULL;
    /* first: it waits for its stream's copies */
    hoop_status st = hoop__memops_close(comm->dev_mem);
    comm->dev_mem = NULL;
    if (st == HOOP_ERR_TIMEOUT) return leak_dev(comm);
    stage_deregister(comm);
    if (comm->stage_pinned) {
        unpin_free(comm->stage); /* res_stage, adopted */
    } else {
        free(comm->stage);
        unpin_free(comm->res_stage); /* reserved, never adopted */
    }
    comm->stage = comm->res_stage = NULL;
    comm->stage_bytes = 0;
    comm->stage_pinned = 0;
    if (!cc) return HOOP_OK;
    if (comm->sflag) cc->flag_free(comm->sflag); /* every call ended: no stream waits on it */
    comm->sflag = NULL;
    if (comm->slots_pinned) cc->host_unregister(comm->slots);
    comm->slots_pinned = 0;
    void *bufs[4] = {comm->dscratch, comm->dpre, comm->pend_dscratch, comm->pend_dpre};
    for (int i = 0; i < 4; i++) cc->dev_free(bufs[i]);
    comm->dscratch = comm->dpre = comm->pend_dscratch = comm->pend_dpre = NULL;
    comm->dscratch_cap = comm->dpre_cap = comm->pend_dscratch_cap = comm->pend_dpre_cap = 0;
    comm->res_scratch = comm->res_pre = 0;
    return HOOP_OK;
}
