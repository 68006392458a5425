/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/exec.c -- the executor: runs one rank's schedule over a transport.
 *
 * The executor knows nothing about algorithms. It walks the schedule with one cursor
 * per (peer, direction) -- sends to a peer leave in schedule order and receives from a
 * peer are posted in schedule order, which is what keeps the streams matched: each
 * message's length is checked on arrival (frame_error) but a stream has no tags --
 * and starts a step as soon as its dependencies are done, keeping up to `depth` steps
 * in flight per peer and direction. RECV_REDUCE steps land in one of the comm's slots
 * (chunk-sized staging buffers) and are reduced into their destination by this thread
 * once their dependencies allow; slots are granted in schedule order, so the earliest
 * unfinished reduction can always get one (no deadlock however small the pool). A
 * RECV that depends on another step is staged the same way when its dependency is not
 * done yet, and copied to its destination once it is.
 * Where the link's transport can hand over received bytes in place (irecv_fn: shm), a
 * RECV_REDUCE whose dependencies are already done is reduced straight from the
 * transport's memory instead, piece by piece as it arrives: one copy less per byte. One
 * whose dependencies are pending still takes a slot, so the guarantee above holds.
 * Local steps (COPY; DIRECT, which reads and writes the peers' mapped copies of a shared
 * buffer: direct.c; VOTE, which merges a vote record: vote.c) run in schedule order once
 * their dependencies are done. The schedule opens with the call's vote: until its first
 * merge has matched (the gate), nothing is received into user memory and nothing is
 * reduced; the vote's own records and receives into slots move at once (so a small
 * call's vote and data arrive together). A failed merge fails the call with
 * HOOP_ERR_MISMATCH.
 * Memory operations (the copy or reduction out of a slot, local copies, DIRECT's
 * reduction) go through the env's table (memops.h). When the table hands back an
 * operation in flight, the step waits in ST_MEMOP, polled each round like a transport's
 * request: a slot is given back only once its reduction finished, and the local steps
 * start one at a time (the next once the one before finished), so they keep the
 * schedule order they had when every one ran at once. A table whose jobs do not finish
 * at once turns off the reduction from a transport's memory (its pieces are lent only
 * for the callback).
 * Staged SENDs and RECVs (stage.c: on memory the transports cannot reach) move through
 * a fixed pool of stage slots (env nstage x slot_bytes, host memory, registered once): a
 * staged SEND takes a slot once its dependencies are done and copies its bytes into it
 * at once (several such copies run while earlier chunks are on the wire); its lane posts
 * it from the slot once the copy finished, and the slot comes back when the send
 * completed. A staged RECV without dependencies takes a slot when its lane posts it,
 * receives into it and, once arrived, is copied out; the slot comes back when that copy
 * finished. A staged RECV with dependencies lands in a receive slot like any dependent
 * RECV (never straight in the buffer) and is copied out from there. Stage slots go to
 * sends and to receives each in schedule order, and neither may hold the last free one
 * (at most nstage - 1 each), so a receive always finds one that no send can take, and a
 * send one no receive can take: see stage.c for why no rank then waits forever.
 * Memory registration: the slots are registered once with every transport that wants it
 * (comm.c), and so are the stage slots (progress.c); a receive into a slot and a send or
 * receive through a stage slot pass the link's transport's registration of it (mr), and
 * every other send and receive passes NULL, leaving user memory to the transport.
 *
 * Owns: its bookkeeping arrays; borrows the schedule, buffers, slots and links.
 * Thread-safety: used by the communicator's progress thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/exec.h"
#include "collectives/memops.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/fault.h"

enum { ST_WAIT = 0, ST_POSTED, ST_RECEIVED, ST_MEMOP, ST_DONE };

#define DRAIN_MS 10000 /* a failed call waits this long for its memory operations */

struct fused { /* what a RECV_REDUCE reduced from the transport's memory needs */
    struct hoop__exec *x;
    int32_t step;
};

struct lane { /* one (peer, direction) cursor over a CSR slice of step indices */
    int peer;
    size_t cur, end;
    int inflight;
};

struct hoop__exec {
    const hoop__sched *s;
    hoop__exec_env env;
    uint8_t *state;
    void **req;
    int16_t *slot;
    int32_t *order; /* step indices grouped by lane (CSR) */
    struct lane *lanes;
    int nlanes, nsend_lanes;
    int32_t *stg; /* staged() steps in schedule order: they are posted in this order */
    size_t nstg, stg_cur;
    int32_t *local; /* COPY and DIRECT steps */
    size_t nlocal, local_cur;
    int32_t local_busy; /* the local step whose memory operation is in flight, or -1 */
    hoop__memops *mem;  /* the env's table, or the host's */
    int nmemops;        /* steps in ST_MEMOP */
    int32_t *active;
    size_t nactive, ndone;
    int *free_slots, nfree;
    int32_t *stg_send, *stg_recv; /* stage-slot steps (pipe()) in schedule order, per class */
    size_t nstg_send, nstg_recv;
    size_t send_cur, send_done; /* next staged SEND to get a slot; first not yet copied */
    size_t recv_cur;            /* next staged RECV to get a slot */
    int *stage_free, nstage_free;
    int stage_held[2];   /* stage slots held by receives [0] and sends [1] */
    struct fused *fu;    /* per step */
    int32_t gate;        /* the vote's first merge (-1: no vote): user memory waits for it */
    int32_t failed_step; /* the VOTE step that failed (-1 = none) */
    int32_t frame_step;  /* the first step whose message arrived with another length while
                          * the vote was not complete (-1 = none): frame_error */
    char frame_msg[480]; /* its error, held until the vote is complete */
};

static int deps_ok(const hoop__exec *x, const hoop__step *st)
{
    for (int i = 0; i < 2; i++)
        if (st->dep[i] >= 0 && x->state[st->dep[i]] != ST_DONE) return 0;
    return 1;
}

/* Steps that may land in a slot and wait there for their dependencies: every
 * RECV_REDUCE, and a RECV that depends on something (typically a send of the same
 * bytes, which may complete only once the peer has drained its link: posting such a
 * receive only after its dependency would let two ranks wait on each other). */
static int staged(const hoop__step *st)
{
    return st->kind == HOOP__STEP_RECV_REDUCE ||
           (st->kind == HOOP__STEP_RECV && (st->dep[0] >= 0 || st->dep[1] >= 0));
}

/* Staged steps that move through a stage slot: every staged SEND, and a staged RECV
 * without dependencies (one with dependencies takes a receive slot: staged()). A stage
 * slot's holder then waits for its peer only, never for another step of its rank. */
static int pipe(const hoop__step *st)
{
    return st->stage && (st->kind == HOOP__STEP_SEND || !staged(st));
}

static int is_local(const hoop__step *st)
{
    return hoop__step_is_local(st->kind);
}

/* 1 once the vote's first merge matched: receives into user memory and reductions may
 * start. The vote's own steps never wait for it. */
static int gate_open(const hoop__exec *x, const hoop__step *st)
{
    return x->gate < 0 || x->state[x->gate] == ST_DONE || st->buf == HOOP__BUF_VOTE;
}

/* Groups the step indices by (direction, peer) into lanes; cnt has 2n+1 zeroed slots. */
static void build_lanes(hoop__exec *x, size_t *cnt)
{
    const hoop__sched *s = x->s;
    int n = x->env.world_size;
    for (size_t i = 0; i < s->n; i++) {
        const hoop__step *st = &s->steps[i];
        if (is_local(st)) {
            x->local[x->nlocal++] = (int32_t)i;
            continue;
        }
        if (staged(st)) x->stg[x->nstg++] = (int32_t)i;
        if (pipe(st) && st->kind == HOOP__STEP_SEND) x->stg_send[x->nstg_send++] = (int32_t)i;
        if (pipe(st) && st->kind != HOOP__STEP_SEND) x->stg_recv[x->nstg_recv++] = (int32_t)i;
        cnt[(st->kind == HOOP__STEP_SEND ? 0 : n) + st->peer]++;
    }
    size_t pos = 0;
    for (int k = 0; k < 2 * n; k++) {
        if (cnt[k] == 0) continue;
        x->lanes[x->nlanes++] = (struct lane){.peer = k % n, .cur = pos, .end = pos};
        if (k < n) x->nsend_lanes++;
        pos += cnt[k];
        cnt[k] = (size_t)x->nlanes; /* lane number + 1 */
    }
    for (size_t i = 0; i < s->n; i++) {
        const hoop__step *st = &s->steps[i];
        if (is_local(st)) continue;
        struct lane *l = &x->lanes[cnt[(st->kind == HOOP__STEP_SEND ? 0 : n) + st->peer] - 1];
        x->order[l->end++] = (int32_t)i;
    }
}

/* The slots' registration with link c's transport (NULL where it needs none): a receive
 * into a slot passes it, one into user memory passes NULL (the transport then registers
 * or stages the buffer itself). */
static void *slot_mr(const hoop__exec *x, const struct hoop_tp_comm *c)
{
    for (int k = 0; k < x->env.ntps; k++)
        if (x->env.tps[k].tp == c->tp) return x->env.tps[k].slot_mr;
    return NULL;
}

/* The stage slots' registration with link c's transport (NULL where it needs none). */
static void *stage_mr(const hoop__exec *x, const struct hoop_tp_comm *c)
{
    for (int k = 0; k < x->env.ntps; k++)
        if (x->env.tps[k].tp == c->tp) return x->env.tps[k].stage_mr;
    return NULL;
}

/* Hands out the next `bytes` of a block being carved (8-byte aligned pieces). */
static void *carve(char **at, size_t bytes)
{
    void *p = *at;
    *at += (bytes + 7) & ~(size_t)7;
    return p;
}

hoop_status hoop__exec_start(hoop__exec **out, const hoop__sched *s, const hoop__exec_env *env)
{
    size_t n = s->n + 1, w = 2 * (size_t)env->world_size + 1, ns = (size_t)env->nslots + 1;
    size_t np = (size_t)(env->nstage > 0 ? env->nstage : 0) + 1;
    size_t total = sizeof(hoop__exec) + 8 +
                   n * (sizeof(void *) + 6 * sizeof(int32_t) + sizeof(struct fused) + 32) +
                   w * (sizeof(struct lane) + sizeof(size_t) + 16) + (ns + np) * sizeof(int) + 96;
    char *block;
    /* One block per call, and the comm's cached one when it is large enough: the
     * executor runs once per collective, and latency counts. */
    if (env->cache && *env->cache && *env->cache_bytes >= total) {
        block = *env->cache;
        memset(block, 0, total);
    } else {
        HOOP_CHECK(hoop__calloc(&block, total));
        if (env->cache) {
            free(*env->cache);
            *env->cache = block;
            *env->cache_bytes = total;
        }
    }
    hoop__exec *x = carve(&block, sizeof(hoop__exec));
    x->s = s;
    x->env = *env;
    x->env.failed_peer = -1;
    x->req = carve(&block, n * sizeof(void *));
    x->lanes = carve(&block, w * sizeof(struct lane));
    size_t *cnt = carve(&block, w * sizeof(size_t));
    x->order = carve(&block, n * sizeof(int32_t));
    x->stg = carve(&block, n * sizeof(int32_t));
    x->local = carve(&block, n * sizeof(int32_t));
    x->active = carve(&block, n * sizeof(int32_t));
    x->free_slots = carve(&block, ns * sizeof(int));
    x->stg_send = carve(&block, n * sizeof(int32_t));
    x->stg_recv = carve(&block, n * sizeof(int32_t));
    x->stage_free = carve(&block, np * sizeof(int));
    x->slot = carve(&block, n * sizeof(int16_t));
    x->fu = carve(&block, n * sizeof(struct fused));
    for (size_t i = 0; i < n; i++) x->slot[i] = -1; /* no slot unless granted one */
    x->state = carve(&block, n);
    x->gate = x->failed_step = x->local_busy = x->frame_step = -1;
    x->mem = env->mem ? env->mem : hoop__memops_host();
    for (size_t i = 0; i < s->n && x->gate < 0; i++)
        if (s->steps[i].kind == HOOP__STEP_VOTE) x->gate = (int32_t)i;
    for (int i = 0; i < env->nslots; i++) x->free_slots[x->nfree++] = i;
    for (int i = env->nstage - 1; i >= 0; i--) x->stage_free[x->nstage_free++] = i;
    build_lanes(x, cnt);
    *out = x;
    if ((x->nstg_send || x->nstg_recv) && env->nstage < 2) {
        hoop__exec_free(x);
        *out = NULL;
        return HOOP_INTERNAL_ERROR("a staged schedule with %d stage slots (2 at least)",
                                   env->nstage);
    }
    return HOOP_OK;
}

/* Waits for the memory operations still in flight, DRAIN_MS in all (not per operation:
 * a stuck device would otherwise hold a failed call that many times over): a failed call
 * must not hand back memory a device is still writing. What is still running then is
 * abandoned, said in one WARN. */
static void drain(hoop__exec *x)
{
    int64_t until = hoop__deadline_ns(DRAIN_MS);
    size_t lost = 0, first = 0;
    char why[300] = "";
    for (size_t i = 0; x->nmemops > 0 && i < x->s->n; i++) {
        if (x->state[i] != ST_MEMOP) continue;
        if (x->mem->vt->wait(x->mem, x->req[i], hoop__ms_left(until)) != HOOP_OK && !lost++) {
            first = i;
            snprintf(why, sizeof(why), "%s", hoop_last_error());
        }
        x->state[i] = ST_WAIT;
        x->req[i] = NULL;
        x->nmemops--;
    }
    if (lost)
        HOOP_WARN("%zu memory operation(s) of a failed call had not finished after %d ms and "
                  "were left running (step %zu: %s)",
                  lost, DRAIN_MS, first, why);
}

void hoop__exec_free(hoop__exec *x)
{
    if (x) drain(x);
    /* The executor's arrays live in the same block; a cached block stays the comm's. */
    if (x && !x->env.cache) free(x);
}

static char *at(const hoop__exec *x, int buf, size_t off)
{
    return (char *)x->env.bufs[buf] + off;
}

/* Reduces one received piece (pos = its byte offset in the step) into the destination. */
static void reduce_piece(void *arg, const void *piece, size_t pos, size_t n)
{
    const struct fused *f = arg;
    const hoop__exec *x = f->x;
    const hoop__step *st = &x->s->steps[f->step];
    const void *local = at(x, st->src_buf, st->src_off + pos);
    hoop__reduce(x->env.dtype, x->env.op, at(x, st->buf, st->off + pos),
                 st->local_first ? local : piece, st->local_first ? piece : local, n / x->env.elem,
                 st->final ? x->env.world_size : 0);
}

static void finish(hoop__exec *x, int32_t i)
{
    x->state[i] = ST_DONE;
    x->ndone++;
    if (i + 1 != x->env.fault_step) return;
    const hoop__step *st = &x->s->steps[i];
    int corrupt = hoop__fault_corrupts();
    if (corrupt && (st->stage || st->buf == HOOP__BUF_TOKEN)) { /* core/fault.h */
        hoop__fault_skip(x->env.rank, x->env.fault_where,
                         st->stage ? "its data came through a stage slot"
                                   : "it received a barrier token, not the call's data");
        return;
    }
    hoop__fault_raise(x->env.rank, x->env.fault_where);
    if (corrupt)
        for (size_t k = 0; k < st->bytes; k++) at(x, st->buf, st->off)[k] ^= 0xA5;
}

/* 1 when a stage slot may go to a send (is_send) or a receive: one is free, and the
 * class holds fewer than nstage - 1 (the last free one stays the other class's). */
static int stage_grant_ok(const hoop__exec *x, int is_send)
{
    return x->nstage_free > 0 && x->stage_held[is_send] < x->env.nstage - 1;
}

/* Gives step i a stage slot (stage_grant_ok said yes). */
static void stage_take(hoop__exec *x, int32_t i, int is_send)
{
    x->slot[i] = (int16_t)x->stage_free[--x->nstage_free];
    x->stage_held[is_send]++;
    int held = x->stage_held[0] + x->stage_held[1];
    if (x->env.stage_peak && held > *x->env.stage_peak) *x->env.stage_peak = held;
}

/* Step i's slot (a stage slot or a receive slot, or none) goes back to its pool. */
static void release_slot(hoop__exec *x, int32_t i)
{
    const hoop__step *st = &x->s->steps[i];
    if (x->slot[i] < 0) return;
    if (pipe(st)) {
        x->stage_free[x->nstage_free++] = x->slot[i];
        x->stage_held[st->kind == HOOP__STEP_SEND]--;
    } else {
        x->free_slots[x->nfree++] = x->slot[i];
    }
    x->slot[i] = -1;
}

/* The host memory step i's slot is: its stage slot, or its receive slot. */
static char *slot_at(const hoop__exec *x, int32_t i)
{
    size_t off = (size_t)x->slot[i] * x->env.slot_bytes;
    return pipe(&x->s->steps[i]) ? at(x, HOOP__BUF_STAGE, off) : x->env.slots + off;
}

/* Starts step i's memory job: *finished = 1 when it finished at once, else the step
 * waits in ST_MEMOP with the operation in req[i]. */
static hoop_status start_job(hoop__exec *x, int32_t i, const hoop__memjob *j, int *finished)
{
    hoop__memop *op = NULL;
    HOOP_CHECK(x->mem->vt->start(x->mem, j, &op));
    *finished = op == NULL;
    if (op) {
        x->req[i] = op;
        x->state[i] = ST_MEMOP;
        x->nmemops++;
    }
    return HOOP_OK;
}

/* Polls step i's memory operation: *finished = 1 once it is done (released). */
static hoop_status test_job(hoop__exec *x, int32_t i, int *finished)
{
    HOOP_CHECK(x->mem->vt->test(x->mem, x->req[i], finished));
    if (*finished) {
        x->req[i] = NULL;
        x->nmemops--;
    }
    return HOOP_OK;
}

/* The memory job of a local step other than VOTE. */
static hoop__memjob local_job(const hoop__exec *x, const hoop__step *st)
{
    char *const *seg = x->env.seg_base;
    size_t off = x->env.seg_off + st->off;
    if (st->kind == HOOP__STEP_DIRECT || st->kind == HOOP__STEP_DIRECT_OWN)
        return (hoop__memjob){.kind = HOOP__MJ_DIRECT,
                              .dtype = x->env.dtype,
                              .op = x->env.op,
                              .bufs = seg,
                              .n = x->env.world_size,
                              .me = x->env.rank,
                              .off = off,
                              .bytes = st->bytes,
                              .elem = x->env.elem,
                              .copy_out = st->kind == HOOP__STEP_DIRECT};
    if (st->kind == HOOP__STEP_DIRECT_COPY)
        return (hoop__memjob){.kind = HOOP__MJ_COPY,
                              .dst = seg[x->env.rank] + off,
                              .a = seg[st->peer] + off,
                              .bytes = st->bytes};
    return (hoop__memjob){.kind = HOOP__MJ_COPY,
                          .dst = at(x, st->buf, st->off),
                          .a = at(x, st->src_buf, st->src_off),
                          .bytes = st->bytes};
}

/* A vote record's own message came with another length (the held frame error is on a
 * receive into the vote records): not a call that differs, which a record would say, but
 * a stream out of step since an earlier call, whose schedules disagreed on how many
 * messages go between two ranks (an extra send). The vote's verdict would blame a record
 * made of that stray message ("sent no valid call record"): the frame error is told.
 * A backstop: the earlier call's own vote sums the ranks' message digests and fails
 * that call, and the comm, when its schedules leave a message unpaired
 * (messages_paired). */
static hoop_status vote_out_of_step(hoop__exec *x)
{
    x->env.failed_peer = x->s->steps[x->frame_step].peer;
    return HOOP_ERROR(HOOP_ERR_INTERNAL,
                      "%s; it was this call's vote record from rank %d: an earlier call's "
                      "schedules disagreed on the messages between the two ranks (one sent "
                      "more than the other received)",
                      x->frame_msg, x->env.failed_peer);
}

/* After vote step i: once the merged state covers every rank, its sum of the ranks'
 * message digests (hoop__sched_check) is 0 unless some message sent has no receive on
 * its peer's side (or the reverse): then the schedules disagree, and the receives would
 * pair with the wrong messages, every length right, for a result that looks fine. */
static hoop_status messages_paired(hoop__exec *x, int32_t i)
{
    if (!hoop__vote_unpaired(x->env.bufs[HOOP__BUF_VOTE], &x->s->steps[i], x->env.world_size))
        return HOOP_OK;
    x->failed_step = i;
    return HOOP_ERROR(HOOP_ERR_INTERNAL,
                      "%s algorithm %s: the ranks' schedules do not pair their messages: some "
                      "rank sends a message that its peer's schedule never receives, or "
                      "receives one that is never sent (the k-th send to a peer is that peer's "
                      "k-th receive from this rank, of the same bytes: coll.h); found by the "
                      "call's vote, on every rank, before the result could be trusted "
                      "(HOOP_DEBUG=TRACE HOOP_DEBUG_SUBSYS=COLL prints each rank's schedule)",
                      x->env.coll_name, x->env.algo_name);
}

/* Runs local steps in schedule order, one at a time (the vote's merges come first, so
 * the algorithm's local steps, DIRECT ones included, run only after the whole vote). */
static hoop_status run_locals(hoop__exec *x, int *progressed)
{
    if (x->local_busy >= 0) {
        int finished;
        HOOP_CHECK(test_job(x, x->local_busy, &finished));
        if (!finished) return HOOP_OK;
        finish(x, x->local_busy);
        x->local_busy = -1;
        *progressed = 1;
    }
    while (x->local_cur < x->nlocal) {
        int32_t i = x->local[x->local_cur];
        const hoop__step *st = &x->s->steps[i];
        if (!deps_ok(x, st)) return HOOP_OK;
        int finished = 1;
        if (st->kind == HOOP__STEP_VOTE) { /* host memory: the comm's own records */
            hoop_status rc =
                hoop__vote_merge(x->env.bufs[HOOP__BUF_VOTE], st, x->env.rank, x->env.world_size);
            if (rc != HOOP_OK) x->failed_step = i;
            if (rc != HOOP_OK && x->frame_step >= 0 &&
                x->s->steps[x->frame_step].buf == HOOP__BUF_VOTE)
                return vote_out_of_step(x);
            HOOP_CHECK(rc);
            HOOP_CHECK(messages_paired(x, i));
        } else {
            hoop__memjob j = local_job(x, st);
            HOOP_CHECK(start_job(x, i, &j, &finished));
        }
        x->local_cur++;
        *progressed = 1;
        if (!finished) {
            x->local_busy = i;
            return HOOP_OK;
        }
        finish(x, i);
    }
    return HOOP_OK;
}

/* Staged SENDs (stage.c) take stage slots in schedule order once their dependencies are
 * done, and their bytes are copied into the slot at once: the copy of chunk k+1 runs
 * while chunk k is on the wire. The copies in flight are polled here, in order; a SEND
 * whose copy finished waits in ST_RECEIVED for its lane to post it. */
static hoop_status stage_sends(hoop__exec *x, int *progressed)
{
    for (size_t k = x->send_done; k < x->send_cur; k++) {
        int32_t i = x->stg_send[k];
        int finished;
        if (x->state[i] != ST_MEMOP) continue;
        HOOP_CHECK(test_job(x, i, &finished));
        if (!finished) break;      /* a table's jobs finish in the order they were started */
        x->state[i] = ST_RECEIVED; /* for a SEND: its slot holds the bytes */
        *progressed = 1;
    }
    while (x->send_done < x->send_cur && x->state[x->stg_send[x->send_done]] != ST_MEMOP)
        x->send_done++;
    while (x->send_cur < x->nstg_send) {
        int32_t i = x->stg_send[x->send_cur];
        const hoop__step *st = &x->s->steps[i];
        int finished = 1;
        if (!deps_ok(x, st) || !stage_grant_ok(x, 1)) return HOOP_OK;
        stage_take(x, i, 1);
        hoop__memjob j = {.kind = HOOP__MJ_COPY,
                          .dst = slot_at(x, i),
                          .a = at(x, st->buf, st->off),
                          .bytes = st->bytes};
        x->send_cur++;
        *progressed = 1;
        HOOP_CHECK(start_job(x, i, &j, &finished));
        if (finished) x->state[i] = ST_RECEIVED;
    }
    return HOOP_OK;
}

/* Posts the next steps of one lane; stops at the first that cannot start. Before the
 * gate opens only the vote's receives and receives into slots may be posted: they
 * touch no user memory, and posting them early lets the vote and the data behind it
 * arrive through one recvmsg. */
static hoop_status post_lane_steps(hoop__exec *x, struct lane *l, int is_send, int *progressed)
{
    while (l->cur < l->end && l->inflight < x->env.depth) {
        int32_t i = x->order[l->cur];
        const hoop__step *st = &x->s->steps[i];
        int allow_recv = gate_open(x, st);
        struct hoop_tp_comm *c = is_send ? x->env.send[st->peer] : x->env.recv[st->peer];
        void *req = NULL;
        if (!c) /* a backstop: hoop__sched_check refuses such a schedule with its step */
            return HOOP_INTERNAL_ERROR("step %d: no link to rank %d (a schedule that "
                                       "hoop__sched_check did not see)",
                                       (int)i, st->peer);
        /* a staged SEND waits at its lane's head until its copy into a slot is done */
        if (is_send && st->stage && x->state[i] != ST_RECEIVED) return HOOP_OK;
        x->env.failed_peer = st->peer; /* blamed for a transport error below */
        if (is_send) {
            if (!deps_ok(x, st)) return HOOP_OK;
            if (st->stage)
                HOOP_CHECK(c->tp->isend(c, slot_at(x, i), st->bytes, stage_mr(x, c), &req));
            else
                HOOP_CHECK(c->tp->isend(c, at(x, st->buf, st->off), st->bytes, NULL, &req));
        } else if (pipe(st)) { /* into a stage slot: no dependency, no gate to wait for */
            if (x->stg_recv[x->recv_cur] != i || !stage_grant_ok(x, 0)) return HOOP_OK;
            stage_take(x, i, 0);
            HOOP_CHECK(c->tp->irecv(c, slot_at(x, i), st->bytes, stage_mr(x, c), &req));
            if (req)
                x->recv_cur++;
            else
                release_slot(x, i);
        } else if (!staged(st)) {
            if (!allow_recv) return HOOP_OK;
            HOOP_CHECK(c->tp->irecv(c, at(x, st->buf, st->off), st->bytes, NULL, &req));
        } else if (x->stg[x->stg_cur] != i) {
            return HOOP_OK;
        } else if (st->kind == HOOP__STEP_RECV && !st->stage && allow_recv && deps_ok(x, st)) {
            HOOP_CHECK(c->tp->irecv(c, at(x, st->buf, st->off), st->bytes, NULL, &req));
            if (req) x->stg_cur++;
        } else if (st->kind == HOOP__STEP_RECV_REDUCE && c->tp->irecv_fn && x->mem->vt->sync &&
                   deps_ok(x, st)) {
            if (!allow_recv) return HOOP_OK;
            x->fu[i] = (struct fused){.x = x, .step = i};
            HOOP_CHECK(c->tp->irecv_fn(c, st->bytes, x->env.elem, reduce_piece, &x->fu[i], &req));
            if (req) {
                x->slot[i] = -1; /* reduced by the transport's test, no slot */
                x->stg_cur++;
            }
        } else {
            if (x->nfree == 0 || st->bytes > x->env.slot_bytes) return HOOP_OK;
            int slot = x->free_slots[x->nfree - 1];
            HOOP_CHECK(c->tp->irecv(c, x->env.slots + (size_t)slot * x->env.slot_bytes, st->bytes,
                                    slot_mr(x, c), &req));
            if (req) {
                x->nfree--;
                x->slot[i] = (int16_t)slot;
                x->stg_cur++;
            }
        }
        x->env.failed_peer = -1;
        if (!req) return HOOP_OK;
        x->req[i] = req;
        x->state[i] = ST_POSTED;
        x->active[x->nactive++] = i;
        l->inflight++;
        l->cur++;
        *progressed = 1;
    }
    return HOOP_OK;
}

/* post_lane_steps, leaving failed_peer set only when a transport call failed: a stage's
 * copy failing later in the round must not blame the peer of a step that merely waited. */
static hoop_status post_lane(hoop__exec *x, struct lane *l, int is_send, int *progressed)
{
    hoop_status st = post_lane_steps(x, l, is_send, progressed);
    if (st == HOOP_OK) x->env.failed_peer = -1;
    return st;
}

static struct lane *lane_of(hoop__exec *x, const hoop__step *st)
{
    int send = st->kind == HOOP__STEP_SEND;
    for (int k = send ? 0 : x->nsend_lanes; k < (send ? x->nsend_lanes : x->nlanes); k++)
        if (x->lanes[k].peer == st->peer) return &x->lanes[k];
    return NULL;
}

/* 1 once the call's vote is complete (its last merge done), or when it has none. */
static int vote_done(const hoop__exec *x)
{
    return x->s->voted < 0 || x->state[x->s->voted] == ST_DONE;
}

/* Step i's message arrived with another length than its receive was posted for (the
 * transport's test said so, frame.h; its request stays live). Once the vote is complete
 * every rank made this same call, so the schedules disagree: HOOP_ERR_INTERNAL naming the
 * step, its peer and both lengths. Before that it may be a collective mismatch (ranks
 * that called with other counts send other sizes), which the vote names: the error is
 * held (hold_verdict) and the step goes on as posted. */
static hoop_status frame_error(hoop__exec *x, int32_t i)
{
    const hoop__step *st = &x->s->steps[i];
    char why[400];
    snprintf(why, sizeof(why), "%s", hoop_last_error());
    char algo[96] = "";
    if (x->env.coll_name && x->env.algo_name)
        snprintf(algo, sizeof(algo), "%s algorithm %s, ", x->env.coll_name, x->env.algo_name);
    hoop_status rc = HOOP_ERROR(HOOP_ERR_INTERNAL,
                                "%srank %d, step %d (%s from rank %d: %zu bytes at byte %zu of "
                                "buffer %d): %s",
                                algo, x->env.rank, (int)i, hoop__step_kind_name(st->kind),
                                (int)st->peer, st->bytes, st->off, (int)st->buf, why);
    if (vote_done(x)) {
        x->env.failed_peer = st->peer;
        return rc;
    }
    if (x->frame_step < 0) {
        x->frame_step = i;
        snprintf(x->frame_msg, sizeof(x->frame_msg), "%s", hoop_last_error());
    }
    return HOOP_OK;
}

/* A held frame error stands once the vote is complete (a mismatch fails the call first). */
static hoop_status hold_verdict(hoop__exec *x)
{
    if (x->frame_step < 0 || !vote_done(x)) return HOOP_OK;
    x->env.failed_peer = x->s->steps[x->frame_step].peer;
    return HOOP_ERROR(HOOP_ERR_INTERNAL, "%s", x->frame_msg);
}

/* Tests one active step; returns 1 when it left the active set. */
static hoop_status test_one(hoop__exec *x, int32_t i, int *left, int *progressed)
{
    const hoop__step *st = &x->s->steps[i];
    int finished;
    *left = 0;
    if (x->state[i] == ST_MEMOP) { /* the copy or reduction out of the slot or region */
        HOOP_CHECK(test_job(x, i, &finished));
        if (!finished) return HOOP_OK;
        release_slot(x, i);
        finish(x, i);
        *left = 1;
        *progressed = 1;
        return HOOP_OK;
    }
    if (x->state[i] == ST_POSTED) {
        struct hoop_tp_comm *c =
            st->kind == HOOP__STEP_SEND ? x->env.send[st->peer] : x->env.recv[st->peer];
        int done = 0;
        hoop_status rc = c->tp->test(x->req[i], &done, NULL);
        if (rc == HOOP_ERR_INTERNAL && c->bad_req && c->bad_req == x->req[i]) {
            c->bad_req = NULL;
            return frame_error(x, i); /* the request is live: tested again if held */
        }
        if (rc != HOOP_OK) x->req[i] = NULL, x->env.failed_peer = st->peer;
        HOOP_CHECK(rc);
        if (!done) return HOOP_OK;
        x->req[i] = NULL;
        lane_of(x, st)->inflight--;
        *progressed = 1;
        if (st->kind == HOOP__STEP_SEND && st->buf != HOOP__BUF_VOTE)
            x->env.bytes_sent += st->bytes; /* payload only: the vote is overhead */
        if (st->kind == HOOP__STEP_SEND || x->slot[i] < 0) {
            release_slot(x, i); /* a staged SEND's slot: the transport is done with it */
            finish(x, i);
            *left = 1;
            return HOOP_OK;
        }
        x->state[i] = ST_RECEIVED;
    }
    if (x->state[i] == ST_RECEIVED && deps_ok(x, st)) {
        char *slot = slot_at(x, i);
        hoop__memjob j = {
            .kind = HOOP__MJ_COPY, .dst = at(x, st->buf, st->off), .a = slot, .bytes = st->bytes};
        if (st->kind == HOOP__STEP_RECV_REDUCE)
            j = (hoop__memjob){.kind = HOOP__MJ_REDUCE,
                               .dst = j.dst,
                               .a = st->local_first ? at(x, st->src_buf, st->src_off) : slot,
                               .b = st->local_first ? slot : at(x, st->src_buf, st->src_off),
                               .bytes = st->bytes,
                               .elem = x->env.elem,
                               .dtype = x->env.dtype,
                               .op = x->env.op,
                               .divisor = st->final ? x->env.world_size : 0};
        HOOP_CHECK(start_job(x, i, &j, &finished));
        *progressed = 1;
        if (!finished) return HOOP_OK; /* polled in ST_MEMOP; the slot stays taken */
        release_slot(x, i);
        finish(x, i);
        *left = 1;
        *progressed = 1;
    }
    return HOOP_OK;
}

/* Tests every active step once; those done leave the active set. */
static hoop_status test_actives(hoop__exec *x, int *progressed)
{
    for (size_t j = 0; j < x->nactive;) {
        int left;
        const hoop__step *st = &x->s->steps[x->active[j]];
        if (st->kind != HOOP__STEP_SEND && !gate_open(x, st)) {
            j++; /* nothing is received or reduced before the vote's first merge */
            continue;
        }
        HOOP_CHECK(test_one(x, x->active[j], &left, progressed));
        if (left)
            x->active[j] = x->active[--x->nactive];
        else
            j++;
    }
    return HOOP_OK;
}

/* One round: what arrived is taken (receives, reductions, local steps, merges) before
 * anything is posted, so every send it made ready is queued before the tests that push
 * them out: a vote and the data behind it on one link leave in one segment (TCP sends
 * the queue of a link at its next test). */
static hoop_status exec_round(hoop__exec *x, int *progressed)
{
    int posted = 0;
    HOOP_CHECK(test_actives(x, progressed));
    HOOP_CHECK(run_locals(x, progressed));
    HOOP_CHECK(stage_sends(x, progressed));
    for (int k = 0; k < x->nlanes; k++)
        HOOP_CHECK(post_lane(x, &x->lanes[k], k < x->nsend_lanes, &posted));
    if (!posted) return HOOP_OK;
    *progressed = 1;
    HOOP_CHECK(test_actives(x, progressed));
    HOOP_CHECK(run_locals(x, progressed));
    return stage_sends(x, progressed);
}

hoop_status hoop__exec_progress(hoop__exec *x, int *progressed, int *done)
{
    *progressed = 0;
    x->env.failed_peer = -1; /* set again by the transport call that fails, if one does */
    int closed = x->gate >= 0 && x->state[x->gate] != ST_DONE;
    HOOP_CHECK(exec_round(x, progressed));
    /* The gate opened in this round (the vote's first merge matched): the data that came
     * with the vote is already there, so take it now, not one progress pass later. */
    if (closed && x->state[x->gate] == ST_DONE) HOOP_CHECK(exec_round(x, progressed));
    HOOP_CHECK(hold_verdict(x));
    *done = x->ndone == x->s->n;
    return HOOP_OK;
}

int hoop__exec_memops_pending(const hoop__exec *x)
{
    return x ? x->nmemops : 0;
}

uint64_t hoop__exec_bytes_sent(const hoop__exec *x)
{
    return x->env.bytes_sent;
}

int32_t hoop__exec_first_pending(const hoop__exec *x)
{
    for (size_t i = 0; x && i < x->s->n; i++)
        if (x->state[i] != ST_DONE) return (int32_t)i;
    return -1;
}

int32_t hoop__exec_failed_step(const hoop__exec *x)
{
    return x->failed_step;
}

int hoop__exec_failed_peer(const hoop__exec *x)
{
    return x->env.failed_peer;
}
