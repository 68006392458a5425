/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/ddp/ddp_dev.c -- DDP on cuda: the bucket all-reduces ordered on the device.
 *
 * Owns, for a hoop_ddp whose parameters are on cuda, the bucket stream (a stream of its
 * own: each bucket's all-reduce is the collectives' stream form on it), an event per
 * bucket that marks its gradients final on the compute stream, and DDP_ROUNDS sets of
 * timers, one per round still on the device, whose device times give the statistics and
 * the trace's stream rows. The thread that runs backward never waits here for the
 * device or the network: a grad-ready hook records an event and queues the wait and the
 * all-reduce on the bucket stream (NCCL's way of overlapping, as PyTorch DDP does on a
 * side stream: Li et al., VLDB 2020); the optimizer's kernels, queued after hoop_ddp_backward,
 * wait on the device for the last bucket. The host reads a round's times only once its
 * events have run, at the start of the round that reuses them (DDP_ROUNDS rounds later:
 * long done in a loop that waits for its previous step, as hoop-train does) or when asked
 * for everything (statistics, trace, hoop_ddp_wait).
 *
 * Thread-safety: as the hoop_ddp (one driving thread).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/kern.h"
#include <unistd.h>

#include "collectives/comm.h"
#include "core/check.h"
#include "ddp/ddp_internal.h"
#include "hoop/collectives.h"

void hoop__ddp_overlap(const double *b, const double *e, int n, double lo, double hi, double *total,
                       double *inside)
{
    double cur_b = 0, cur_e = -INFINITY;
    *total = *inside = 0;
    for (int i = 0; i <= n; i++) {
        if (i < n && b[i] <= cur_e) {
            if (e[i] > cur_e) cur_e = e[i];
            continue;
        }
        if (cur_e > cur_b) {
            *total += cur_e - cur_b;
            double x = cur_b > lo ? cur_b : lo, z = cur_e < hi ? cur_e : hi;
            if (z > x) *inside += z - x;
        }
        if (i < n) {
            cur_b = b[i];
            cur_e = e[i];
        }
    }
}

// ----------------------------------------------------------------- set-up

static void free_round(const struct hoop__kern *k, ddp_round *r, int nbuckets)
{
    k->event_free(r->begin);
    k->event_free(r->end);
    k->event_free(r->finish);
    for (int b = 0; b < nbuckets; b++) {
        if (r->start) k->event_free(r->start[b]);
        if (r->done) k->event_free(r->done[b]);
    }
    free(r->start);
    free(r->done);
    if (r->control) k->host_free(r->control);
}

static hoop_status make_round(const struct hoop__kern *k, ddp_round *r, int nbuckets)
{
    HOOP_CHECK(k->timer_new(&r->begin));
    HOOP_CHECK(k->timer_new(&r->end));
    HOOP_CHECK(k->timer_new(&r->finish));
    HOOP_CHECK(hoop__calloc(&r->start, (size_t)nbuckets));
    HOOP_CHECK(hoop__calloc(&r->done, (size_t)nbuckets));
    for (int b = 0; b < nbuckets; b++) {
        HOOP_CHECK(k->timer_new(&r->start[b]));
        HOOP_CHECK(k->timer_new(&r->done[b]));
    }
    return k->host_alloc((void **)&r->control, sizeof(float));
}

/* The trace's clock meets the device's: a timer recorded on the idle compute stream runs
 * at once, so its device time is now on the host. */
static hoop_status anchor(hoop_ddp *ddp)
{
    const struct hoop__kern *k = ddp->dev->k;
    HOOP_CHECK(k->sync());
    HOOP_CHECK(k->stream_record(NULL, ddp->dev->anchor));
    HOOP_CHECK(k->event_sync(ddp->dev->anchor));
    ddp->dev->anchor_us = hoop_ddp_now_us();
    return HOOP_OK;
}

/* DDP on cuda needs each rank in a process of its own (as hooprun starts them): ranks
 * that are threads of one process share its CUDA context and compute stream, so one
 * rank's optimizer kernels, queued behind its wait for the last bucket, would hold back
 * the other rank's backward kernels that bucket's all-reduce needs, until HOOP_TIMEOUT.
 * Collective (an all-gather of each rank's process), so every rank gets the same answer:
 * HOOP_ERR_UNSUPPORTED naming the first two ranks that share a process. */
static hoop_status check_one_rank_per_process(const hoop_ddp *ddp)
{
    int ws = hoop_comm_world_size(ddp->comm);
    uint64_t me[2] = {hoop__process_token(), (uint64_t)getpid()}, *all;
    hoop_status st = HOOP_OK;
    if (ws < 2) return HOOP_OK;
    HOOP_CHECK(hoop__calloc(&all, 2 * (size_t)ws));
    HOOP_CHECK_GOTO(hoop_allgather(ddp->comm, me, all, 2, HOOP_DTYPE_I64, NULL), st, out);
    for (int a = 0; a < ws && st == HOOP_OK; a++)
        for (int b = a + 1; b < ws; b++)
            if (all[2 * a] == all[2 * b] && all[2 * a + 1] == all[2 * b + 1]) {
                st = HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                                "hoop_ddp_init: ranks %d and %d are threads of one process "
                                "(pid %llu); DDP on %s needs a process per rank, as hooprun "
                                "starts them (they would share one compute stream)",
                                a, b, (unsigned long long)all[2 * a + 1],
                                hoop__device_name(ddp->device));
                break;
            }
out:
    free(all);
    return st;
}

hoop_status hoop__ddp_dev_init(hoop_ddp *ddp)
{
    HOOP_CHECK(check_one_rank_per_process(ddp));
    ddp_dev *d;
    HOOP_CHECK(hoop__calloc(&d, 1));
    ddp->dev = d;
    HOOP_CHECK(hoop__kern_get(ddp->device, "hoop_ddp_init", &d->k));
    const struct hoop__kern *k = d->k;
    HOOP_CHECK(k->stream_new(&d->stream));
    HOOP_CHECK(hoop__calloc(&d->ready, (size_t)ddp->nbuckets));
    for (int b = 0; b < ddp->nbuckets; b++) HOOP_CHECK(k->event_new(&d->ready[b]));
    for (int i = 0; i < DDP_ROUNDS; i++) HOOP_CHECK(make_round(k, &d->rounds[i], ddp->nbuckets));
    HOOP_CHECK(k->timer_new(&d->anchor));
    return anchor(ddp);
}

void hoop__ddp_dev_destroy(hoop_ddp *ddp, hoop_status *st)
{
    ddp_dev *d = ddp->dev;
    if (!d) return;
    const struct hoop__kern *k = d->k;
    if (k) {
        /* Every all-reduce issued must have run before its bucket is freed: the done
         * events of the round in progress (a failed pass leaves no finish), then all. */
        const ddp_round *r = d->nrounds ? &d->rounds[(d->nrounds - 1) % DDP_ROUNDS] : NULL;
        if (r && !r->recorded && r->launched)
            HOOP_CHECK_KEEP(k->event_sync(r->done[r->launched - 1]), *st);
        HOOP_CHECK_KEEP(hoop__ddp_dev_harvest_all(ddp), *st);
        for (int i = 0; i < DDP_ROUNDS; i++) free_round(k, &d->rounds[i], ddp->nbuckets);
        for (int b = 0; d->ready && b < ddp->nbuckets; b++) k->event_free(d->ready[b]);
        k->event_free(d->anchor);
        k->stream_free(d->stream);
    }
    free(d->ready);
    free(d);
    ddp->dev = NULL;
}

// ----------------------------------------------------------------- reading a round's times

/* Times of r relative to its begin, in ms; HOOP_ERR_USAGE while an event has not run. */
static hoop_status round_times(const struct hoop__kern *k, const ddp_round *r, double *end,
                               double *s, double *e)
{
    HOOP_CHECK(k->event_elapsed(r->begin, r->end, end));
    for (int b = 0; b < r->launched; b++) {
        HOOP_CHECK(k->event_elapsed(r->begin, r->start[b], &s[b]));
        HOOP_CHECK(k->event_elapsed(r->begin, r->done[b], &e[b]));
    }
    return HOOP_OK;
}

static void trace_round(hoop_ddp *ddp, const ddp_round *r, double end, const double *s,
                        const double *e)
{
    const struct hoop__kern *k = ddp->dev->k;
    double base_ms;
    if (!ddp->tracing || k->event_elapsed(ddp->dev->anchor, r->begin, &base_ms) != HOOP_OK) return;
    const int64_t base = ddp->dev->anchor_us + llround(base_ms * 1e3);
    hoop__ddp_trace_add(ddp, r->join ? "join round" : "backward", base, base + llround(end * 1e3),
                        DDP_LANE_COMPUTE_STREAM);
    for (int b = 0; b < r->launched; b++) {
        char name[40];
        snprintf(name, sizeof(name), "allreduce bucket %d", b);
        hoop__ddp_trace_add(ddp, name, base + llround(s[b] * 1e3), base + llround(e[b] * 1e3),
                            DDP_LANE_BUCKET_STREAM);
    }
}

/* Reads round r, whose finish has run, into the statistics (and the trace): backward is
 * the compute stream's interval, communication the union of the bucket stream's
 * all-reduces, hidden its part inside backward, wait how long after backward the last
 * bucket ended (what the optimizer's kernels waited for). */
static void harvest(hoop_ddp *ddp, ddp_round *r)
{
    const struct hoop__kern *k = ddp->dev->k;
    double end = 0, *s = NULL, *e = NULL, total = 0, inside = 0;
    r->recorded = 0;
    if (hoop__calloc(&s, (size_t)ddp->nbuckets + 1) != HOOP_OK ||
        hoop__calloc(&e, (size_t)ddp->nbuckets + 1) != HOOP_OK ||
        round_times(k, r, &end, s, e) != HOOP_OK) {
        HOOP_WARN("DDP: the device times of a round could not be read (%s); its statistics "
                  "are left out",
                  hoop_last_error());
        free(s);
        free(e);
        return;
    }
    hoop__ddp_overlap(s, e, r->launched, 0.0, end, &total, &inside);
    /* Blocking stream calls (hoop__stream_calls_block) ran while backward's thread waited
     * for them, the compute stream idle: inside backward's interval, none of it hidden. */
    if (hoop__stream_calls_block()) inside = 0;
    const double last = r->launched ? e[r->launched - 1] : 0.0;
    if (!r->join) {
        const int ws = hoop_comm_world_size(ddp->comm);
        ddp->stats.steps++;
        ddp->stats.backward_ms += end;
        ddp->stats.comm_ms += total;
        ddp->stats.hidden_ms += inside;
        ddp->stats.wait_ms += last > end ? last - end : 0.0;
        if (rint((double)*r->control * ws) < ws) ddp->stats.uneven_steps++;
    }
    trace_round(ddp, r, end, s, e);
    free(s);
    free(e);
}

/* Reads round r: at once when its finish has run (or wait: the host waits for it first,
 * HOOP_TIMEOUT at most); nothing when it is not recorded. */
static hoop_status read_round(hoop_ddp *ddp, ddp_round *r, int wait)
{
    if (!r->recorded) return HOOP_OK;
    const struct hoop__kern *k = ddp->dev->k;
    int done = 0;
    if (wait)
        HOOP_CHECK(k->event_sync(r->finish));
    else
        HOOP_CHECK(k->event_query(r->finish, &done));
    if (wait || done) harvest(ddp, r);
    return HOOP_OK;
}

hoop_status hoop__ddp_dev_harvest_all(hoop_ddp *ddp)
{
    ddp_dev *d = ddp->dev;
    if (!d) return HOOP_OK;
    hoop_status st = HOOP_OK;
    for (int64_t i = d->nrounds - DDP_ROUNDS; i < d->nrounds; i++)
        if (i >= 0) HOOP_CHECK_KEEP(read_round(ddp, &d->rounds[i % DDP_ROUNDS], 1), st);
    return st;
}

// ----------------------------------------------------------------- a round

hoop_status hoop__ddp_dev_begin(hoop_ddp *ddp, int join)
{
    ddp_dev *d = ddp->dev;
    const int64_t n = d->nrounds;
    /* the oldest round's events are reused now: its times are read first (waiting for
     * them, which a loop one step behind the device never does); then any that ran */
    HOOP_CHECK(read_round(ddp, &d->rounds[n % DDP_ROUNDS], 1));
    for (int64_t i = n - DDP_ROUNDS + 1; i < n; i++)
        if (i >= 0) HOOP_CHECK(read_round(ddp, &d->rounds[i % DDP_ROUNDS], 0));
    ddp_round *r = &d->rounds[n % DDP_ROUNDS];
    r->launched = 0;
    r->join = join;
    d->nrounds++;
    return d->k->stream_record(NULL, r->begin);
}

static ddp_round *current(hoop_ddp *ddp)
{
    return &ddp->dev->rounds[(ddp->dev->nrounds - 1) % DDP_ROUNDS];
}

/* Bucket b's gradients are final in the compute stream's order (its grad-ready hook ran
 * after their kernels were queued): the bucket stream waits for them on the device, then
 * runs the bucket's average; nothing here waits on the host. */
hoop_status hoop__ddp_dev_launch(hoop_ddp *ddp, int b)
{
    ddp_dev *d = ddp->dev;
    const struct hoop__kern *k = d->k;
    ddp_round *r = current(ddp);
    const ddp_bucket *bk = &ddp->buckets[b];
    HOOP_CHECK(k->stream_record(NULL, d->ready[b]));
    HOOP_CHECK(k->stream_wait(d->stream, d->ready[b]));
    HOOP_CHECK(k->stream_record(d->stream, r->start[b]));
    HOOP_CHECK(hoop_allreduce_stream(ddp->comm, bk->buf, bk->buf, bk->count, HOOP_DTYPE_F32,
                                     HOOP_OP_AVG, (hoop_stream *)d->stream));
    HOOP_CHECK(k->stream_record(d->stream, r->done[b]));
    r->launched = b + 1;
    return HOOP_OK;
}

hoop_status hoop__ddp_dev_backward_end(hoop_ddp *ddp)
{
    return ddp->dev->k->stream_record(NULL, current(ddp)->end);
}

/* What runs after backward on the compute stream (the optimizer step) waits, on the
 * device, for the last bucket (the bucket stream runs them in order); then the control
 * float comes back to pinned memory, and finish marks the round. */
hoop_status hoop__ddp_dev_end(hoop_ddp *ddp)
{
    const struct hoop__kern *k = ddp->dev->k;
    ddp_round *r = current(ddp);
    if (r->join) HOOP_CHECK(k->stream_record(NULL, r->end)); /* no backward pass: its zeros */
    if (r->launched) HOOP_CHECK(k->stream_wait(NULL, r->done[r->launched - 1]));
    HOOP_CHECK(k->download_async(r->control, ddp->control, sizeof(float)));
    HOOP_CHECK(k->stream_record(NULL, r->finish));
    r->recorded = 1;
    return HOOP_OK;
}

hoop_status hoop__ddp_dev_control(hoop_ddp *ddp, float *v)
{
    ddp_round *r = current(ddp);
    HOOP_CHECK(ddp->dev->k->event_sync(r->finish));
    *v = *r->control;
    return HOOP_OK;
}
