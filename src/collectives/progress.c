/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/progress.c -- the communicator's progress thread.
 *
 * One thread per communicator runs the queued collectives one at a time, in call order
 * (a caller blocked in hoop_wait may drive the same passes itself, under comm->engine):
 *   1. it compiles the call into a schedule (coll.h) that opens with the call's vote
 *      (vote.c: every rank learns that every rank made this same call before any rank
 *      completes it) and runs it with the executor (exec.c); the vote's records lead
 *      the call on every link, so a small call's vote and data leave together;
 *   2. sends start at once; receives into user buffers and every reduction wait until
 *      the vote's first merge has matched (receives into staging slots may be posted at
 *      once); a merge that finds two different calls fails the call on this rank, and
 *      every rank's last merge covers every rank, so none can complete such a call;
 *   3. a call ordered on a CUDA stream (the _stream forms) first waits, in a pre-start
 *      state (comm->gated), for the event its call put on that stream: stream_gate polls
 *      it each pass; the call's completion releases the stream (collectives.c);
 *   4. it always keeps a receive posted on the control link from the previous rank, which
 *      carries only failure (ABORT) and goodbye (BYE) records, so they are seen at once
 *      (a pass that spins on a running call reads it every CTL_EVERY_NS, 20 us).
 *
 * Failure travels round the ring: a rank that detects a failure (a link error, a
 * mismatch, its own deadline) sends an ABORT record (culprit, status, the two calls) to
 * the next rank, then closes all its links. Each rank forwards exactly one ABORT. A
 * rank that saw a link error first waits briefly for its predecessor's record, so every
 * rank reports the original cause (a mismatch stays a mismatch). A deadline that names
 * a peer is first a CLAIM record, forwarded by every rank, so that the rank a waiter
 * blamed can say whom it waits for in turn (claims.c). A goodbye record (BYE) before a
 * graceful close tells the next rank that the EOF that follows is no failure.
 *
 * Owns: the thread's view of the comm (see comm.h). Thread-safety: internal.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/comm.h"
#include "collectives/memops.h"
#include "core/backend.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/fault.h"
#include "cuda/coll.h"

#define FAIL_GRACE_MS 1000 /* wait this long for the predecessor's ABORT record */
/* A timeout waits less for others' claims (claims.c): it fires at the comm's deadline,
 * and the blocked caller's own wait ends WAIT_GRACE_MS (1200) after that. The ranks'
 * deadlines differ by as much as their calls' starts do (the previous call's last chunk
 * over a slow link: 0.6 s at 100 Mbit/s for 16 MiB), and claims from ranks whose
 * deadlines come later than that are not heard. */
#define TIMEOUT_GRACE_MS 700
#define FLUSH_MS 200        /* best-effort time to push a last record out */
#define SPIN_NS (30 * 1000) /* poll without sleeping this long after progress */
#define MAX_POLL 256
#define CTL_EVERY_NS (20 * 1000) /* a spinning pass reads the control link this often */
#define DRIVEN_NAP_MS 2          /* longest sleep while a caller drives progress */

const char *hoop__hdr_mismatch_hint(const hoop__hdr *a, const hoop__hdr *b)
{
    int da = a->algo == HOOP_ALGO_DIRECT, db = b->algo == HOOP_ALGO_DIRECT;
    if (a->coll != b->coll || a->count != b->count || a->dtype != b->dtype || a->op != b->op)
        return "";
    if ((da && db && (a->root != b->root || a->aux != b->aux)) || (da && b->wanted_direct) ||
        (db && a->wanted_direct))
        return " (a call runs direct only in place, on the same shared buffer at the same "
               "offset on every rank)";
    return "";
}

void hoop__hdr_describe(const hoop__hdr *h, char *buf, size_t cap)
{
    if (h->algo == HOOP_ALGO_DIRECT) {
        snprintf(buf, cap,
                 "%s(count=%llu, %s, %s, algo=direct, shared buffer %d at element %d) #%llu",
                 hoop__coll_name(h->coll), (unsigned long long)h->count,
                 hoop_dtype_name((hoop_dtype)h->dtype), hoop_op_name((hoop_op)h->op), (int)h->root,
                 (int)h->aux, (unsigned long long)h->seq);
        return;
    }
    /* Only what the collective has: an op where it reduces, a root where it has one, the
     * algorithm where there is a choice (all-reduce). */
    char op[16] = "", root[24] = "", algo[64] = "";
    int c = h->coll;
    if (c == HOOP__COLL_ALLREDUCE || c == HOOP__COLL_REDUCE || c == HOOP__COLL_REDUCE_SCATTER)
        snprintf(op, sizeof(op), ", %s", hoop_op_name((hoop_op)h->op));
    if (c == HOOP__COLL_BROADCAST || c == HOOP__COLL_REDUCE)
        snprintf(root, sizeof(root), ", root=%d", (int)h->root);
    if (c == HOOP__COLL_ALLREDUCE)
        snprintf(algo, sizeof(algo), ", algo=%s%s%s%s", hoop_algo_name((hoop_algo)h->algo),
                 h->asked ? " (asked " : "",
                 h->asked && h->asked < HOOP_ALGO_COUNT_ ? hoop_algo_name((hoop_algo)h->asked)
                 : h->asked                              ? "?"
                                                         : "",
                 h->asked ? ", which does not apply here)" : "");
    if (h->refused) /* the algorithm was never picked */
        snprintf(algo, sizeof(algo), ", refused by that rank as invalid: see its error");
    if (c == HOOP__COLL_BARRIER && !h->refused) { /* no buffer: no count or dtype */
        snprintf(buf, cap, "barrier() #%llu", (unsigned long long)h->seq);
        return;
    }
    snprintf(buf, cap, "%s(count=%llu, %s%s%s%s) #%llu", hoop__coll_name(c),
             (unsigned long long)h->count, hoop_dtype_name((hoop_dtype)h->dtype), op, root, algo,
             (unsigned long long)h->seq);
}

static void ops_fail_all(hoop_comm *comm, hoop_status st, const char *msg, const char *cur_msg);

// ----------------------------------------------------------------- links

/* Closes a data link; abortively (the transport's abort, where it has one) when the
 * comm failed by a timeout: what is still queued on it is garbage, and a peer that a cut
 * link hides (or that is stopped) would otherwise keep a socket of ours retransmitting
 * it for minutes. Other failures close gracefully: a peer may still be finishing the
 * call before, whose last bytes from this rank may still be in flight. */
static void close_link(struct hoop_tp_comm *c, int failed)
{
    if (failed && c->tp->abort)
        c->tp->abort(c);
    else
        c->tp->close(c);
}

static void close_data_links(hoop_comm *comm, int failed)
{
    for (int p = 0; p < comm->world_size; p++) {
        if (comm->send && comm->send[p]) close_link(comm->send[p], failed);
        if (comm->recv && comm->recv[p]) close_link(comm->recv[p], failed);
        if (comm->send) comm->send[p] = NULL;
        if (comm->recv) comm->recv[p] = NULL;
    }
}

/* The control links always close gracefully: they carry the ABORT record out (an ib
 * link's close waits up to 2 s for its last send to be acknowledged). */
static void close_ctl_links(hoop_comm *comm)
{
    if (comm->ctl_send) comm->ctl_send->tp->close(comm->ctl_send);
    if (comm->ctl_recv) comm->ctl_recv->tp->close(comm->ctl_recv);
    comm->ctl_send = comm->ctl_recv = NULL;
    comm->ctl_req = NULL; /* released by close */
}

void hoop__comm_close_links(hoop_comm *comm, int failed)
{
    close_data_links(comm, failed);
    close_ctl_links(comm);
}

/* Sends records on the control link and waits up to FLUSH_MS for them to leave. */
static void ctl_flush(hoop_comm *comm, const hoop__hdr *recs, int n)
{
    void *reqs[4] = {0};
    int64_t deadline = hoop__deadline_ns(FLUSH_MS);
    if (!comm->ctl_send) return;
    const struct hoop_transport *tp = comm->ctl_send->tp;
    for (int i = 0; i < n; i++) {
        while (tp->isend(comm->ctl_send, &recs[i], sizeof(recs[i]), NULL, &reqs[i]) == HOOP_OK &&
               !reqs[i] && hoop__now_ns() < deadline)
            usleep(100);
        if (!reqs[i]) return;
    }
    for (int i = 0; i < n; i++) {
        int done = 0;
        while (reqs[i] && !done && hoop__now_ns() < deadline) {
            if (tp->test(reqs[i], &done, NULL) != HOOP_OK) return;
            if (!done) usleep(100);
        }
    }
}

// ----------------------------------------------------------------- failure

/* "N of its own copies or reductions had not finished" (pending: how many; stream: on a
 * stream call on GPU buffers, with the rule that explains their hold) after sep. */
static void memops_text(int pending, int stream, const char *sep, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%d of its own copies or reductions had not finished%s", sep, pending,
             stream ? " (on hoop's stream, held by a stream call's wait where the two share a "
                      "hardware queue: keep the process's streams within "
                      "CUDA_DEVICE_MAX_CONNECTIONS, see include/hoop/collectives.h)"
                    : "");
}

/* "rank O: CALL did not finish within HOOP_TIMEOUT; it was still waiting for data from
 * rank C": the timeout that an ABORT or CLAIM record r carries, as rank self reads it
 * (" (the rank reporting this)" after C where C is self: the message is rank O's view). */
static void timeout_text(const hoop__hdr *r, const hoop_comm *comm, char *buf, size_t cap)
{
    char a[160], step[96] = "", mem[300] = "";
    const int self = comm->rank, c = (int)(int64_t)r[0].seq;
    hoop__hdr_describe(&r[1], a, sizeof(a));
    if (r[2].kind == 2 && r[2].aux > 0) /* the step: a plug-in's cycle shows in them */
        snprintf(step, sizeof(step), " (rank %d's step %d, a %s of %llu bytes)", r[0].root,
                 r[2].aux - 1, hoop__step_kind_name(r[2].op), (unsigned long long)r[2].count);
    if (r[2].dtype) memops_text(r[2].dtype, r[2].algo, "; ", mem, sizeof(mem));
    /* This rank is the one waited for: its own copies still in flight say why */
    int pending = c == self && r[0].root != self ? hoop__exec_memops_pending(comm->exec) : 0;
    if (!r[2].dtype && pending > 0) {
        memops_text(pending, comm->cur && comm->cur->sflag && comm->cur->args.dev, "; and here ",
                    mem, sizeof(mem));
    }
    int send = r[2].kind == 2 && r[2].aux > 0 && r[2].op == HOOP__STEP_SEND;
    snprintf(buf, cap,
             "rank %d: %s did not finish within HOOP_TIMEOUT; it was still waiting for %s "
             "rank %d%s%s%s",
             r[0].root, a,
             r[2].kind == 1   ? "the call's vote from"
             : r[2].kind == 3 ? "the votes relayed from"
             : send           ? "its data to be taken by"
                              : "data from",
             c, c == self && r[0].root != self ? " (the rank reporting this)" : "", step, mem);
}

/* A timeout's cause, once the grace for others' claims is over (claims.c): the claim at
 * the end of the chain from this rank's own (or the first it heard of). */
static void claim_resolve(hoop_comm *comm)
{
    const hoop__hdr *r = hoop__claim_final(comm);
    if (!r) return;
    /* This rank's own timeout message says more (HOOP_TIMEOUT's value): kept when the
     * chain ends at this rank's claim and the failure began with its own deadline. */
    if (r[0].root != comm->rank || comm->fail_rec[0].root != comm->rank)
        timeout_text(r, comm, comm->fail_msg, sizeof(comm->fail_msg));
    memcpy(comm->fail_rec, r, sizeof(comm->fail_rec));
    comm->fail_rec[0].kind = HOOP__REC_ABORT;
}

/* Final step of a failure: tell the next rank, close the data links (nothing lands in
 * a caller's buffer after its call has failed), fail every call, then close the control
 * links: their graceful close, which gives the ABORT record its best chance, may wait
 * for a peer that is cut off or stopped, and the callers need not wait with it. */
static void fail_finalize(hoop_comm *comm)
{
    if (atomic_load(&comm->state) == HOOP__CS_FAILED) return;
    if (comm->fail_st == HOOP_ERR_TIMEOUT && !comm->fail_adopted) claim_resolve(comm);
    ctl_flush(comm, comm->fail_rec, 3);
    close_data_links(comm, comm->fail_st == HOOP_ERR_TIMEOUT);
    atomic_store(&comm->state, HOOP__CS_FAILED);
    HOOP_INFO(COLL, "rank %d: communicator failed: %s", comm->rank, comm->fail_msg);
    ops_fail_all(comm, comm->fail_st, comm->fail_msg, NULL);
    close_ctl_links(comm);
}

static void adopt_record(hoop_comm *comm);

/* Records a cause detected here. MISMATCH and aborts are final at once; link errors
 * wait for the predecessor's record (which may carry the original cause). */
static void fail_record(hoop_comm *comm, hoop_status st, int origin, int culprit,
                        const hoop__hdr *mine, const hoop__hdr *theirs, const char *msg, int final)
{
    if (atomic_load(&comm->state) != HOOP__CS_RUNNING) return;
    if (comm->deferred) { /* a later call's failure came first: it is the cause */
        adopt_record(comm);
        return;
    }
    /* The predecessor vanished without notice earlier in this call (prev_lost, waiting for
     * the call to finish): a link error with another rank now is most likely that rank's
     * reaction to the same loss (its own grace ran out first and it closed its links), so
     * the predecessor stays the cause, and the later error is told after it. */
    char both[sizeof(comm->fail_msg)];
    if (comm->prev_lost && !final && st == HOOP_ERR_REMOTE && origin == comm->rank &&
        culprit != comm->prev) {
        snprintf(both, sizeof(both), "%.250s; then %.250s", comm->prev_lost_msg, msg);
        msg = both;
        culprit = comm->prev;
        comm->prev_lost = 0;
    }
    comm->fail_st = st;
    snprintf(comm->fail_msg, sizeof(comm->fail_msg), "%s", msg);
    comm->fail_rec[0] = (hoop__hdr){.kind = HOOP__REC_ABORT,
                                    .seq = (uint64_t)(int64_t)culprit,
                                    .root = origin,
                                    .aux = (int32_t)st};
    memset(&comm->fail_rec[1], 0, 2 * sizeof(hoop__hdr));
    if (mine) comm->fail_rec[1] = *mine;
    if (theirs) comm->fail_rec[2] = *theirs;
    atomic_store(&comm->state, HOOP__CS_FAILING);
    comm->failing_deadline =
        hoop__deadline_ns(st == HOOP_ERR_TIMEOUT ? TIMEOUT_GRACE_MS : FAIL_GRACE_MS);
    if (final || comm->ctl_eof || comm->prev_bye || !comm->ctl_recv) fail_finalize(comm);
}

static void fail_local(hoop_comm *comm, hoop_status st, int culprit, const hoop__hdr *mine,
                       const hoop__hdr *theirs, const char *msg, int final)
{
    fail_record(comm, st, comm->rank, culprit, mine, theirs, msg, final);
}

/* The vote found two different calls: final at once. The ABORT record carries the pair
 * (root = the first call's rank, seq = the second's), so every rank names the same two. */
static void fail_mismatch(hoop_comm *comm, const hoop__vote *v, const char *msg)
{
    fail_record(comm, HOOP_ERR_MISMATCH, v->a_rank, v->b_rank, &v->a, &v->b, msg, 1);
}

static void wait_reason(hoop_comm *comm, char *why, size_t cap, int *culprit, hoop__hdr *waited);

/* A rank timed out waiting for the votes this rank relays: say what this rank itself
 * still waits for, and pass that on instead (it names the missing rank when this rank
 * waits for that rank's own vote). Returns 1 when it failed the comm so. */
static int adopt_relay_timeout(hoop_comm *comm, int origin, const char *call)
{
    char why[300];
    int culprit;
    hoop__hdr waited;
    wait_reason(comm, why, sizeof(why), &culprit, &waited);
    if (culprit < 0 || culprit == origin) return 0;
    snprintf(comm->fail_msg, sizeof(comm->fail_msg),
             "rank %d: %s did not finish within HOOP_TIMEOUT; it waited for the votes rank %d "
             "relays, and rank %d was still waiting %.200s",
             origin, call, comm->rank, comm->rank, why);
    comm->fail_rec[0] = (hoop__hdr){.kind = HOOP__REC_ABORT,
                                    .seq = (uint64_t)(int64_t)culprit,
                                    .root = comm->rank,
                                    .aux = (int32_t)HOOP_ERR_TIMEOUT};
    comm->fail_rec[1] = comm->cur->hdr;
    comm->fail_rec[2] = waited;
    fail_finalize(comm);
    return 1;
}

/* Adopts the cause carried by the predecessor's ABORT record and passes it on. */
static void adopt_record(hoop_comm *comm)
{
    const hoop__hdr *r = comm->abort_rec;
    int origin = r[0].root, culprit = (int)(int64_t)r[0].seq;
    hoop_status st = (hoop_status)r[0].aux;
    char a[160], b[160];
    comm->deferred = 0;
    if (atomic_load(&comm->state) == HOOP__CS_FAILED) return;
    hoop__hdr_describe(&r[1], a, sizeof(a));
    hoop__hdr_describe(&r[2], b, sizeof(b));
    comm->fail_st = st;
    if (st == HOOP_ERR_MISMATCH) /* root and seq are the two calls' ranks */
        snprintf(comm->fail_msg, sizeof(comm->fail_msg),
                 "collective mismatch: rank %d called %s but rank %d called %s%s", origin, a,
                 culprit, b, hoop__hdr_mismatch_hint(&r[1], &r[2]));
    else if (st == HOOP_ERR_TIMEOUT && culprit >= 0) { /* r[2].kind: 1 vote, 2 data, 3 relay */
        /* A relay named: it says what it waits for itself, where it knows (else the
         * record's own words: never a status without its text) */
        if (r[2].kind == 3 && culprit == comm->rank && comm->exec &&
            adopt_relay_timeout(comm, origin, a))
            return;
        timeout_text(r, comm, comm->fail_msg, sizeof(comm->fail_msg));
    } else if (culprit == origin && st == HOOP_ERR_USAGE) /* collectives.c, issue_enter */
        snprintf(comm->fail_msg, sizeof(comm->fail_msg),
                 "rank %d failed: two of its threads issued collectives on the communicator "
                 "at once (%s; see rank %d's message)",
                 origin, hoop_status_name(st), origin);
    else if (culprit == origin)
        snprintf(comm->fail_msg, sizeof(comm->fail_msg), "rank %d aborted its communicator",
                 origin);
    else if (culprit >= 0 && st == HOOP_ERR_REMOTE) /* a link that broke: the peer's end */
        snprintf(comm->fail_msg, sizeof(comm->fail_msg),
                 "rank %d failed or closed its links (%s, detected by rank %d)", culprit,
                 hoop_status_name(st), origin);
    else if (culprit >= 0) /* e.g. a message of the wrong length: the schedules disagree */
        snprintf(comm->fail_msg, sizeof(comm->fail_msg),
                 "rank %d failed %s on its link with rank %d (%s; see rank %d's message)", origin,
                 a, culprit, hoop_status_name(st), origin);
    else
        snprintf(comm->fail_msg, sizeof(comm->fail_msg),
                 "rank %d failed: %s during %s (see rank %d's message)", origin,
                 hoop_status_name(st), a, origin);
    memcpy(comm->fail_rec, r, sizeof(comm->fail_rec));
    comm->fail_adopted = 1; /* the predecessor resolved its claims: final as it is */
    fail_finalize(comm);
}

/* An ABORT record arrived. A failure in a call after the one this rank still runs
 * (ranks that finished it moved on, and their next call failed) does not take this
 * call down: the peers finished it, so what this rank still needs of it is already on
 * its links (a closed shm ring is drained, TCP delivers before its FIN). The record
 * waits until this call ends, then fails the comm; if this call fails first, with a
 * link error or a timeout, the record is its cause. */
static void fail_adopt(hoop_comm *comm)
{
    const hoop__hdr *r = comm->abort_rec;
    if (atomic_load(&comm->state) == HOOP__CS_RUNNING && comm->cur && !comm->deferred &&
        r[1].kind == HOOP__REC_HDR && r[1].seq > comm->cur->hdr.seq) {
        comm->deferred = 1;
        HOOP_DEBUGF(COLL, "rank %d: a failure in call #%llu waits for call #%llu to end",
                    comm->rank, (unsigned long long)r[1].seq,
                    (unsigned long long)comm->cur->hdr.seq);
        return;
    }
    adopt_record(comm);
}

// ----------------------------------------------------------------- control link

static void wait_reason(hoop_comm *comm, char *why, size_t cap, int *culprit, hoop__hdr *waited);

/* The comm fails because of claim r: a rank timed out in r's call, waiting for another.
 * Not final: the grace lets the claims that explain it arrive (claims.c). A claim about
 * a later call than the one this rank still runs waits until that one ends (as
 * fail_adopt's records do). */
static void claim_fail(hoop_comm *comm, const hoop__hdr *r)
{
    char msg[512];
    if (atomic_load(&comm->state) != HOOP__CS_RUNNING) return;
    if (comm->cur && r[1].kind == HOOP__REC_HDR && r[1].seq > comm->cur->hdr.seq) {
        comm->claim_later = r[0].root + 1;
        return;
    }
    timeout_text(r, comm, msg, sizeof(msg));
    fail_record(comm, HOOP_ERR_TIMEOUT, r[0].root, (int)(int64_t)r[0].seq, &r[1], &r[2], msg, 0);
}

/* This rank's own claim: in its current call it waits for culprit (kind: 1 that rank's
 * vote, 2 its data, 3 votes it relays); kept and sent down the control ring at once. */
static void claim_make(hoop_comm *comm, int culprit, const hoop__hdr *waited)
{
    hoop__hdr claim[3] = {{.kind = HOOP__REC_CLAIM,
                           .seq = (uint64_t)(int64_t)culprit,
                           .root = comm->rank,
                           .aux = (int32_t)HOOP_ERR_TIMEOUT},
                          comm->cur->hdr,
                          *waited};
    if (hoop__claim_add(comm, claim)) ctl_flush(comm, claim, 3);
}

/* A claim arrived from the predecessor: kept, passed on (once per origin: it stops at its
 * origin, and at a rank that cannot read it), and the comm fails. A rank that runs the
 * claim's call and waits there for a peer claims so too, before its own deadline: the
 * ranks after it may be waiting for it, and must learn whom it waits for. */
static void claim_received(hoop_comm *comm)
{
    const hoop__hdr *r = comm->claim_in;
    if (!hoop__claim_add(comm, r)) return;
    HOOP_DEBUGF(COLL, "rank %d: rank %d claims it waited for rank %d", comm->rank, r[0].root,
                (int)(int64_t)r[0].seq);
    if (comm->next != r[0].root) ctl_flush(comm, r, 3);
    if (atomic_load(&comm->state) == HOOP__CS_RUNNING && comm->cur && comm->exec &&
        r[1].kind == HOOP__REC_HDR && r[1].seq == comm->cur->hdr.seq) {
        char why[300];
        int culprit;
        hoop__hdr waited;
        wait_reason(comm, why, sizeof(why), &culprit, &waited);
        if (culprit >= 0) claim_make(comm, culprit, &waited);
    }
    claim_fail(comm, r);
}

static void ctl_record(hoop_comm *comm, const hoop__hdr *h)
{
    if (comm->abort_tail > 0) {
        int claim = comm->tail_kind == HOOP__REC_CLAIM;
        (claim ? comm->claim_in : comm->abort_rec)[3 - comm->abort_tail] = *h;
        if (--comm->abort_tail == 0) claim ? claim_received(comm) : fail_adopt(comm);
        return;
    }
    if (h->kind == HOOP__REC_BYE) comm->prev_bye = 1;
    if (h->kind == HOOP__REC_ABORT || h->kind == HOOP__REC_CLAIM) {
        comm->tail_kind = h->kind;
        (h->kind == HOOP__REC_CLAIM ? comm->claim_in : comm->abort_rec)[0] = *h;
        comm->abort_tail = 2;
    }
}

/* Reads every record the predecessor has sent so far. */
static void ctl_progress(hoop_comm *comm, int *progressed)
{
    while (comm->ctl_recv && !comm->ctl_eof) {
        const struct hoop_transport *tp = comm->ctl_recv->tp;
        int done = 0;
        if (!comm->ctl_req && (tp->irecv(comm->ctl_recv, &comm->ctl_in, sizeof(comm->ctl_in), NULL,
                                         &comm->ctl_req) != HOOP_OK ||
                               !comm->ctl_req))
            return;
        hoop_status st = tp->test(comm->ctl_req, &done, NULL);
        if (st != HOOP_OK) {
            char msg[300];
            comm->ctl_req = NULL;
            comm->ctl_eof = 1;
            *progressed = 1;
            snprintf(msg, sizeof(msg), "rank %d closed its link without notice (%s)", comm->prev,
                     hoop_last_error());
            /* After an ABORT (parked or not) the sender closes: that EOF is expected. A
             * predecessor that dies just after finishing the call this rank still runs
             * leaves all this rank needs of that call on its links: let the call finish
             * (or fail on a data link) for FAIL_GRACE_MS, then fail (prev_lost_check). */
            if (!comm->prev_bye && !comm->deferred && comm->cur &&
                atomic_load(&comm->state) == HOOP__CS_RUNNING) {
                comm->prev_lost = 1;
                comm->prev_lost_deadline = hoop__deadline_ns(FAIL_GRACE_MS);
                snprintf(comm->prev_lost_msg, sizeof(comm->prev_lost_msg), "%s", msg);
            } else if (!comm->prev_bye && !comm->deferred) {
                fail_local(comm, HOOP_ERR_REMOTE, comm->prev, NULL, NULL, msg, 1);
            }
            if (atomic_load(&comm->state) == HOOP__CS_FAILING) fail_finalize(comm);
            return;
        }
        if (!done) return;
        comm->ctl_req = NULL;
        *progressed = 1;
        ctl_record(comm, &comm->ctl_in);
    }
}

// ----------------------------------------------------------------- running calls

void hoop__comm_forget(hoop_comm *comm, const void *addr, size_t bytes)
{
    for (int i = 0; comm->caches && addr && bytes && i < comm->ntps; i++)
        if (comm->tps[i].tp->forget) comm->tps[i].tp->forget(comm->tps[i].ctx, (void *)addr, bytes);
}

hoop_status hoop__comm_forget_later(hoop_comm *comm, const void *addr, size_t bytes)
{
    hoop_status st = HOOP_OK;
    if (!comm->caches || !addr || !bytes) return HOOP_OK; /* no transport caches anything */
    pthread_mutex_lock(&comm->mu);
    if (comm->nforget == comm->capforget) {
        size_t cap = comm->capforget ? 2 * comm->capforget : 8;
        st = hoop__realloc(&comm->forget, cap);
        if (st == HOOP_OK) comm->capforget = cap;
    }
    if (st == HOOP_OK) comm->forget[comm->nforget++] = (struct hoop__forget){addr, bytes};
    pthread_mutex_unlock(&comm->mu);
    return st;
}

/* Under HOOP_IB_REG_CACHE=1 (the default) the registrations of a call's buffers last
 * for the call: once it has ended the program may free them, and a registration kept
 * would pin the old pages and serve a new allocation at the same address (regcache.h).
 * Memory from hoop_comm_alloc_shared is hoop's: its registrations stay until
 * hoop_comm_free_shared. GPU buffers reach the transports only through the stage slots.
 * Called before the call's completion is told (a waiter may free next). */
static void user_regs_end(hoop_comm *comm, const hoop__coll_args *a)
{
    size_t bytes[2];
    if (!comm->caches || comm->reg_scope != 1 || a->dev) return; /* nothing kept (tcp, shm) */
    hoop__coll_user_bytes(a, &bytes[0], &bytes[1]);
    if (!a->in_seg[0]) hoop__comm_forget(comm, a->sendbuf, bytes[0]);
    if (!a->in_seg[1]) hoop__comm_forget(comm, a->recvbuf, bytes[1]);
}

/* Fails the running call (with cur_msg, or msg when NULL) and every queued one (msg). */
static void ops_fail_all(hoop_comm *comm, hoop_status st, const char *msg, const char *cur_msg)
{
    if (comm->cur) {
        /* A stream call's copies its own wait holds (hoop's stream sharing a hardware queue
         * with the caller's) run, and the drain below ends, only once the wait passes. */
        if (comm->cur->sflag && hoop__exec_memops_pending(comm->exec) > 0)
            hoop__stream_let_go(comm->cur, st, cur_msg ? cur_msg : msg);
        atomic_fetch_add(&comm->bytes_sent, comm->exec ? hoop__exec_bytes_sent(comm->exec) : 0);
        hoop__exec_free(comm->exec);
        hoop__sched_reset(&comm->sched); /* storage kept for the next call */
        comm->exec = NULL;
        user_regs_end(comm, &comm->cur->args);
        hoop__request_complete(comm->cur, st, cur_msg ? cur_msg : msg);
        comm->cur = NULL;
        comm->gated = 0;
    }
    pthread_mutex_lock(&comm->mu);
    struct hoop_request *q = comm->q_head;
    comm->q_head = comm->q_tail = NULL;
    pthread_mutex_unlock(&comm->mu);
    while (q) {
        struct hoop_request *next = q->next;
        hoop__request_complete(q, st, msg);
        q = next;
    }
}

/* world_size 1: every collective is a copy (or nothing); on GPU buffers through the
 * comm's memory table (its own stream: waiting for it cannot wait for a user's stream). */
static hoop_status run_local(hoop_comm *comm, struct hoop_request *r)
{
    const hoop__coll_args *a = &r->args;
    size_t bytes = a->count * a->elem;
    if (a->coll == HOOP__COLL_BARRIER || bytes == 0 || a->sendbuf == a->recvbuf || !a->recvbuf)
        return HOOP_OK;
    if (!a->dev) {
        memmove(a->recvbuf, a->sendbuf, bytes);
        return HOOP_OK;
    }
    if (!comm->dev_mem)
        return HOOP_INTERNAL_ERROR("a call on GPU buffers found no memory table (not reserved)");
    hoop__memjob j = {.kind = HOOP__MJ_COPY, .dst = a->recvbuf, .a = a->sendbuf, .bytes = bytes};
    hoop__memop *op = NULL;
    HOOP_CHECK(comm->dev_mem->vt->start(comm->dev_mem, &j, &op));
    return op ? comm->dev_mem->vt->wait(comm->dev_mem, op, comm->timeout_ms) : HOOP_OK;
}

/* HOOP_DEBUG=TRACE HOOP_DEBUG_SUBSYS=COLL prints every schedule, step by step. */
static void sched_trace(const hoop_comm *comm, const hoop__sched *s)
{
    if (!hoop__log_on(HOOP_LOG_TRACE, HOOP_LOG_COLL)) return;
    for (size_t i = 0; i < s->n; i++) {
        const hoop__step *st = &s->steps[i];
        HOOP_TRACE(COLL, "rank %d step %zu: %s peer %d buf %d off %zu bytes %zu deps %d,%d%s%s",
                   comm->rank, i, hoop__step_kind_name(st->kind), st->peer, st->buf, st->off,
                   st->bytes, st->dep[0], st->dep[1], st->final ? " final" : "",
                   st->stage ? " staged" : "");
    }
}

/* Makes *buf (*cap bytes, kept across calls) hold at least bytes; contents not kept.
 * The transports forget the old buffer first: a registration cache (ib) would otherwise
 * serve the new buffer, should it land at the same address, the old one's pages. */
static hoop_status grow(hoop_comm *comm, void **buf, size_t *cap, size_t bytes)
{
    if (bytes <= *cap) return HOOP_OK;
    hoop__comm_forget(comm, *buf, *cap);
    free(*buf);
    *buf = NULL;
    *cap = 0;
    HOOP_CHECK(hoop__calloc((char **)buf, bytes));
    *cap = bytes;
    return HOOP_OK;
}

/* A 16-bit average through the links (not direct): each rank's input is divided by
 * world_size first, into the comm's own buffer, and the call runs as a sum of those,
 * saturating at the type's largest finite value (the partial sums of ring, rd, rhd and
 * the chain are rounded to the type at each hop, so a plain sum divided at the end, or
 * the rounded terms themselves, overflow where the average itself fits). Returns the
 * input the schedule reads: a's sendbuf, or the pre-divided copy. */
static hoop_status prescale(hoop_comm *comm, const hoop__coll_args *a, const void **in, hoop_op *op)
{
    *in = a->sendbuf;
    *op = a->op;
    int half = a->dtype == HOOP_DTYPE_F16 || a->dtype == HOOP_DTYPE_BF16;
    if (a->op != HOOP_OP_AVG || !half || a->algo == HOOP_ALGO_DIRECT) return HOOP_OK;
    size_t count = a->count * (a->coll == HOOP__COLL_REDUCE_SCATTER ? (size_t)a->world_size : 1);
    HOOP_CHECK(grow(comm, &comm->pre, &comm->pre_cap, count * a->elem));
    if (count) hoop__half_prescale(a->dtype, comm->pre, a->sendbuf, count, a->world_size);
    *in = comm->pre;
    *op = HOOP__OP_SUM_SAT;
    return HOOP_OK;
}

/* Test hook (HOOP_TEST_FAULT, core/fault.h): 1 + the step after which this rank raises
 * its signal in call r, described in comm->fault_where; 0 when not armed for it. The
 * reduce-scatter phase is the call's receive-and-reduce steps, the all-gather phase its
 * plain receives; the moment is the middle one of them (the vote's are not counted). */
static int32_t fault_step(hoop_comm *comm, const struct hoop_request *r)
{
    int rs = hoop__fault_at(HOOP__FAULT_REDUCE_SCATTER, comm->rank, (int64_t)r->hdr.seq);
    if (!rs && !hoop__fault_at(HOOP__FAULT_ALL_GATHER, comm->rank, (int64_t)r->hdr.seq)) return 0;
    int kind = rs ? HOOP__STEP_RECV_REDUCE : HOOP__STEP_RECV;
    size_t n = 0, k = 0;
    for (size_t i = 0; i < comm->sched.n; i++)
        n += comm->sched.steps[i].kind == kind && comm->sched.steps[i].buf != HOOP__BUF_VOTE;
    for (size_t i = 0; i < comm->sched.n; i++) {
        const hoop__step *st = &comm->sched.steps[i];
        if (st->kind != kind || st->buf == HOOP__BUF_VOTE || ++k < (n + 1) / 2) continue;
        char d[160];
        hoop__hdr_describe(&r->hdr, d, sizeof(d));
        snprintf(comm->fault_where, sizeof(comm->fault_where),
                 "the %s phase of %s (receive %zu of %zu, from rank %d)",
                 rs ? "reduce-scatter" : "all-gather", d, k, n, st->peer);
        return (int32_t)i + 1;
    }
    return 0; /* the call has no such phase: the hook never fires */
}

static hoop_status start_op(hoop_comm *comm, struct hoop_request *r)
{
    const hoop__coll_args *a = &r->args;
    const void *in = a->sendbuf;
    hoop_op op = a->op;
    comm->cur_deadline = hoop__deadline_ns(comm->timeout_ms);
    /* The vote opens the schedule, so its records lead the call on every link. */
    hoop__vote_init(comm->votes, &r->hdr, comm->rank);
    /* The vote's steps depend only on (rank, world_size): built once, copied per call. */
    if (comm->vote_tpl.n == 0) {
        hoop__sched_votes(&comm->vote_tpl, comm->rank, comm->world_size);
        HOOP_CHECK(comm->vote_tpl.err);
    }
    HOOP_CHECK(hoop__sched_copy(&comm->sched, &comm->vote_tpl));
    unsigned said = hoop__error_count(); /* a plug-in's bare error code: no stale message */
    hoop_status built = hoop__coll_schedule(a, &comm->sched);
    HOOP_CHECK(
        hoop__sched_built(built, hoop__error_count() != said, &comm->sched, &comm->vote_tpl, a));
    /* Every range inside its buffer, every peer another, linked rank: before any byte
     * moves. */
    HOOP_CHECK(hoop__sched_check(&comm->sched, a, comm->send, comm->recv,
                                 &((hoop__vote *)comm->votes)->msgs));
    void *scratch = comm->scratch, *stage = NULL;
    struct hoop__memops *mem = comm->mem;
    if (a->dev) {
        HOOP_CHECK(hoop__comm_dev_prepare(comm, a, &in, &op, &scratch, &stage));
        mem = comm->dev_mem;
    } else {
        HOOP_CHECK(grow(comm, &comm->scratch, &comm->scratch_cap, comm->sched.scratch_bytes));
        scratch = comm->scratch;
        HOOP_CHECK(prescale(comm, a, &in, &op));
    }
    /* HOOP_MEMOPS=staged: the call's buffers as a GPU's would be */
    if (comm->stage_all && !a->dev) HOOP_CHECK(hoop__comm_stage_prepare(comm, 0, &stage));
    sched_trace(comm, &comm->sched); /* after staging: it shows which steps are staged */
    hoop__exec_env env = {
        .world_size = comm->world_size,
        .rank = comm->rank,
        .send = comm->send,
        .recv = comm->recv,
        .bufs = {(void *)in, a->recvbuf, scratch, comm->token, comm->votes, stage},
        .slots = comm->slots,
        .slot_bytes = comm->slot_bytes,
        .tps = comm->tps,
        .ntps = comm->ntps,
        .mem = mem,
        .nslots = comm->nslots,
        .nstage = stage ? comm->stage_nslots : 0,
        .stage_peak = &comm->stage_peak,
        .depth = comm->depth,
        .dtype = a->dtype,
        .op = op,
        .elem = a->elem,
        .seg_base = a->seg_base,
        .seg_off = a->seg_off,
        .cache = &comm->exec_block,
        .cache_bytes = &comm->exec_block_bytes,
        .coll_name = hoop__coll_name(a->coll),
        .algo_name = hoop__sched_algo_name(a),
        .fault_step = fault_step(comm, r),
        .fault_where = comm->fault_where};
    return hoop__exec_start(&comm->exec, &comm->sched, &env);
}

static void finish_op(hoop_comm *comm)
{
    atomic_fetch_add(&comm->bytes_sent, hoop__exec_bytes_sent(comm->exec));
    hoop__exec_free(comm->exec);
    hoop__sched_reset(&comm->sched); /* storage kept for the next call */
    comm->exec = NULL;
    user_regs_end(comm, &comm->cur->args);
    hoop__request_complete(comm->cur, HOOP_OK, NULL);
    comm->cur = NULL;
    if (comm->deferred) adopt_record(comm);  /* the later call's failure, now */
    if (comm->claim_later && comm->claims) { /* a later call's timeout, now */
        const hoop__hdr *r = comm->claims[comm->claim_later - 1];
        comm->claim_later = 0;
        claim_fail(comm, r);
    }
}

/* One executor round; 0 on failure (a link error, or the vote found two calls). */
static int exec_pass(hoop_comm *comm, int *progressed, int *done)
{
    int moved = 0;
    hoop_status st = hoop__exec_progress(comm->exec, &moved, done);
    if (st == HOOP_ERR_MISMATCH) {
        int32_t i = hoop__exec_failed_step(comm->exec);
        const hoop__vote *v = hoop__vote_after(comm->votes, &comm->sched.steps[i]);
        fail_mismatch(comm, v, hoop_last_error());
        return 0;
    }
    if (st != HOOP_OK) {
        int peer = hoop__exec_failed_peer(comm->exec);
        /* A link error waits briefly for the predecessor's record of the first cause; a
         * failure of this rank's own (a device's copy, memory) keeps its status. */
        hoop_status why = st == HOOP_ERR_INTERNAL || peer < 0 ? st : HOOP_ERR_REMOTE;
        fail_local(comm, why, peer, &comm->cur->hdr, NULL, hoop_last_error(),
                   why != HOOP_ERR_REMOTE);
        return 0;
    }
    *progressed |= moved;
    return 1;
}

/* What the current call still waits for (its first pending step) as "for ..." in why:
 * *culprit = that step's peer (-1 for a local step); the record for the ABORT and CLAIM
 * records' readers (timeout_text) in *waited: kind 1 its own vote, 2 data, 3 a vote that
 * relays others' (vague: the missing rank is one of those); for data, the step (aux =
 * its index + 1, op = its kind, count = its bytes). */
static void wait_reason(hoop_comm *comm, char *why, size_t cap, int *culprit, hoop__hdr *waited)
{
    int32_t i = hoop__exec_first_pending(comm->exec);
    const hoop__step *st = i >= 0 ? &comm->sched.steps[i] : NULL;
    why[0] = '\0';
    *culprit = -1;
    *waited = (hoop__hdr){.kind = 2};
    if (st && st->buf == HOOP__BUF_VOTE) {
        waited->kind = hoop__vote_wait_info(st, comm->rank, comm->world_size, why, cap) ? 1 : 3;
        *culprit = st->peer;
    } else if (st && !hoop__step_is_local(st->kind)) {
        waited->aux = i + 1;
        waited->op = st->kind;
        waited->count = st->bytes;
        /* The step too: where schedules that pair every message still wait on each
         * other (a plug-in's cycle), the steps the ranks name show it. */
        int send = st->kind == HOOP__STEP_SEND;
        snprintf(why, cap, "%s rank %d (rank %d's step %d, a %s of %zu bytes)",
                 send ? "for its data to be taken by" : "for data from", st->peer, comm->rank,
                 (int)i, hoop__step_kind_name(st->kind), st->bytes);
        *culprit = st->peer;
    }
    /* Its own copies or reductions still in flight: on the GPU they run on hoop's stream,
     * which a stream call's wait holds where the two share a hardware queue. */
    int pending = hoop__exec_memops_pending(comm->exec);
    if (pending > 0) { /* also in the claim's record: dtype the count, algo the stream */
        size_t n = strlen(why);
        const struct hoop_request *r = comm->cur;
        int stream = r && r->sflag && r->args.dev;
        memops_text(pending, stream, n ? "; " : "for its own work: ", why + n, cap - n);
        waited->dtype = (uint8_t)(pending > 255 ? 255 : pending);
        waited->algo = (uint8_t)stream;
    }
}

/* The call passed HOOP_TIMEOUT: fail it naming whom this rank was still waiting for (a
 * rank's own vote, its data, or the votes it relays). That rank may itself be waiting for
 * another: this rank's claim goes down the control ring at once, and the comm fails
 * after a short grace, with the cause at the end of the chain of claims it then holds
 * (claims.c). A relay that receives the record naming it answers with what it waits for
 * (fail_adopt). A wait for nothing remote (a local step) is final at once. */
static void op_timeout(hoop_comm *comm)
{
    char d[160], why[600], msg[900];
    int culprit;
    hoop__hdr waited;
    wait_reason(comm, why, sizeof(why), &culprit, &waited);
    hoop__hdr_describe(&comm->cur->hdr, d, sizeof(d));
    snprintf(msg, sizeof(msg), "rank %d: %s did not finish within HOOP_TIMEOUT (%lld ms)%s%.560s",
             comm->rank, d, (long long)comm->timeout_ms, why[0] ? "; still waiting " : "", why);
    if (culprit >= 0) claim_make(comm, culprit, &waited); /* resolved after the grace */
    fail_local(comm, HOOP_ERR_TIMEOUT, culprit, &comm->cur->hdr, &waited, msg, culprit < 0);
}

/* A call ordered on a stream (cur->start) starts once the work queued on the stream
 * before it has finished: its start event, polled each pass (never waited for). Returns
 * 1 when cur may start; 0 while it waits, or after failing it (the work before it
 * failed on the device, or did not finish within HOOP_TIMEOUT). */
static int stream_gate(hoop_comm *comm, int *progressed)
{
    const struct hoop__cuda_coll *cc = NULL;
    struct hoop_request *r = comm->cur;
    hoop_status st = hoop__cuda_backend(NULL, &cc); /* loaded at the call: cannot fail */
    if (st == HOOP_OK && cc && !cc->stream_started(r->start, &st)) {
        if (hoop__now_ns() <= comm->cur_deadline) return 0;
        char d[160], msg[400];
        hoop__hdr_describe(&r->hdr, d, sizeof(d));
        snprintf(msg, sizeof(msg),
                 "rank %d: %s did not start within HOOP_TIMEOUT (%lld ms): the work queued on "
                 "its stream before the call had not finished",
                 comm->rank, d, (long long)comm->timeout_ms);
        fail_local(comm, HOOP_ERR_TIMEOUT, -1, &r->hdr, NULL, msg, 1);
        return 0;
    }
    r->start = NULL; /* freed by stream_started */
    comm->gated = 0;
    *progressed = 1;
    if (st == HOOP_OK) return 1;
    fail_local(comm, st, -1, &r->hdr, NULL, hoop_last_error(), 1);
    return 0;
}

/* Starts cur: 1 when its schedule runs, 0 when it is already done (world_size 1) or
 * failed to start. */
static int op_begin(hoop_comm *comm)
{
    if (comm->world_size == 1) {
        hoop_status lst = run_local(comm, comm->cur);
        hoop__request_complete(comm->cur, lst, lst == HOOP_OK ? NULL : hoop_last_error());
        comm->cur = NULL;
        return 0;
    }
    hoop_status st = start_op(comm, comm->cur);
    if (st != HOOP_OK) {
        fail_local(comm, st, -1, &comm->cur->hdr, NULL, hoop_last_error(), 1);
        return 0;
    }
    return 1;
}

/* Advances the current call; takes the next one from the queue when idle. */
static void op_progress(hoop_comm *comm, int *progressed)
{
    if (!comm->cur) {
        pthread_mutex_lock(&comm->mu);
        comm->cur = comm->q_head;
        if (comm->cur && !(comm->q_head = comm->cur->next)) comm->q_tail = NULL;
        /* Memory freed before this call was queued may be its memory now (shared.c). */
        for (size_t i = 0; comm->cur && i < comm->nforget; i++)
            hoop__comm_forget(comm, comm->forget[i].addr, comm->forget[i].bytes);
        if (comm->cur) comm->nforget = 0;
        pthread_mutex_unlock(&comm->mu);
        if (!comm->cur) return;
        *progressed = 1;
        comm->gated = comm->cur->start != NULL;
        if (comm->gated) /* the gate's deadline; start_op sets the call's own */
            comm->cur_deadline = hoop__deadline_ns(comm->timeout_ms);
        else if (!op_begin(comm))
            return;
    }
    if (comm->gated && (!stream_gate(comm, progressed) || !op_begin(comm))) return;
    int done = 0;
    if (!exec_pass(comm, progressed, &done)) return;
    if (done) {
        finish_op(comm);
        *progressed = 1;
    } else if (hoop__now_ns() > comm->cur_deadline) {
        op_timeout(comm);
    }
}

// ----------------------------------------------------------------- the loop

static int add_fds(struct hoop_tp_comm *c, struct pollfd *fds, int n, int always)
{
    if (!c || !c->tp->pollfds) return n;
    int k = c->tp->pollfds(c, fds + n, MAX_POLL - n);
    for (int i = 0; i < k; i++) {
        if (always) fds[n + i].events |= POLLIN;
        if (fds[n + i].events == 0) fds[n + i].fd = -1; /* idle: not worth waking for */
    }
    return n + k;
}

/* Sleeps until a link, the wake fd or a deadline needs attention. Called with the
 * engine lock held; releases it while asleep so a waiting caller can drive progress. */
static void wait_events(hoop_comm *comm)
{
    struct pollfd fds[MAX_POLL];
    int n = 0, driven = atomic_load(&comm->drivers) > 0;
    fds[n++] = (struct pollfd){.fd = comm->wake_fd, .events = POLLIN};
    /* While a caller drives progress, sleep until it hands over through wake_fd. */
    if (!comm->ctl_eof && !driven) n = add_fds(comm->ctl_recv, fds, n, 1);
    if (!driven) n = add_fds(comm->ctl_send, fds, n, 0);
    for (int p = 0; comm->cur && !driven && p < comm->world_size && n < MAX_POLL - 16; p++) {
        if (comm->send) n = add_fds(comm->send[p], fds, n, 0);
        if (comm->recv) n = add_fds(comm->recv[p], fds, n, 0);
    }
    int64_t until = INT64_MAX;
    int failing = atomic_load(&comm->state) == HOOP__CS_FAILING;
    /* A failing comm's call has had its deadline (that may be why it fails): sleeping
     * until then would be no sleep at all, and the grace is spent spinning. */
    if (comm->cur && !failing) until = comm->cur_deadline;
    if (failing && comm->failing_deadline < until) until = comm->failing_deadline;
    if (comm->prev_lost && comm->prev_lost_deadline < until) until = comm->prev_lost_deadline;
    int ms = hoop__ms_left(until);
    if (ms > 1000) ms = 1000;
    /* A driving caller hands over through wake_fd only when its call is still running;
     * one whose call completed just leaves, so a driven sleep is a short nap: the thread
     * is soon back watching the links (an ABORT passing through an idle rank must not
     * wait for a timeout here). */
    if (driven && ms > DRIVEN_NAP_MS) ms = DRIVEN_NAP_MS;
    /* A memory operation in flight: its table wakes us when it finishes, but a finish
     * between the last pass and `sleeping` below would go unheard, so nap only. */
    if ((hoop__exec_memops_pending(comm->exec) || (comm->cur && comm->gated)) && ms > 1)
        ms = 1; /* so is a stream's start event (stream_gate polls it) */
    /* Announce the sleep, then look at the queue once more: an enqueuer stores into the
     * queue before it reads `sleeping`, so one of us sees the other (seq_cst). */
    atomic_store(&comm->sleeping, driven ? HOOP__SLEEP_NAP : HOOP__SLEEP_LONG);
    pthread_mutex_lock(&comm->mu);
    int queued = comm->q_head != NULL && !comm->cur;
    pthread_mutex_unlock(&comm->mu);
    pthread_mutex_unlock(&comm->engine);
    if (!queued && poll(fds, (nfds_t)n, ms) > 0 && (fds[0].revents & POLLIN)) {
        uint64_t v;
        if (read(comm->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN) usleep(100);
    }
    atomic_store(&comm->sleeping, HOOP__SLEEP_NONE);
    pthread_mutex_lock(&comm->engine);
    comm->ctl_due_ns = 0; /* the wake-up may be the control link's */
}

static void shutdown_links(hoop_comm *comm)
{
    if (atomic_load(&comm->state) == HOOP__CS_RUNNING) {
        hoop__hdr bye = {.kind = HOOP__REC_BYE, .root = comm->rank};
        ctl_flush(comm, &bye, 1);
    }
    ops_fail_all(comm, HOOP_ERR_USAGE, "the communicator was destroyed before this call ran",
                 "the communicator was destroyed while this call ran: its receive buffer "
                 "holds unspecified data");
}

static void handle_abort(hoop_comm *comm, int how)
{
    char msg[200];
    if (how == 2) { /* test hook: vanish like a crashed process */
        hoop__comm_close_links(comm, 0);
        comm->fail_st = HOOP_ERR_REMOTE;
        snprintf(comm->fail_msg, sizeof(comm->fail_msg), "rank %d was killed", comm->rank);
        atomic_store(&comm->state, HOOP__CS_FAILED);
        ops_fail_all(comm, comm->fail_st, comm->fail_msg, NULL);
        return;
    }
    if (how == 3) { /* a misuse found by a caller's thread (collectives.c, issue_enter) */
        fail_local(comm, HOOP_ERR_USAGE, comm->rank, comm->cur ? &comm->cur->hdr : NULL, NULL,
                   comm->misuse_msg, 1);
        return;
    }
    snprintf(msg, sizeof(msg), "rank %d aborted its communicator", comm->rank);
    fail_local(comm, HOOP_ERR_REMOTE, comm->rank, comm->cur ? &comm->cur->hdr : NULL, NULL, msg, 1);
}

/* The predecessor's link closed during a call (ctl_progress): once that call has ended,
 * or its grace has run out, the comm fails as it would have at once. */
static void prev_lost_check(hoop_comm *comm)
{
    if (!comm->prev_lost || atomic_load(&comm->state) != HOOP__CS_RUNNING) return;
    if (comm->cur && hoop__now_ns() < comm->prev_lost_deadline) return;
    comm->prev_lost = 0;
    fail_local(comm, HOOP_ERR_REMOTE, comm->prev, comm->cur ? &comm->cur->hdr : NULL, NULL,
               comm->prev_lost_msg, 1);
}

int hoop__progress_pass(hoop_comm *comm)
{
    int progressed = 0, how = atomic_exchange(&comm->abort_req, 0);
    /* Whoever drives progress (this thread, or a caller in hoop_wait) may not make the host
     * wait for the whole device: a stream's wait for a call may be what holds it
     * (core/backend.h; devres.c). */
    hoop__device_sync_forbid(1);
    int state = atomic_load(&comm->state);
    if (how) handle_abort(comm, how);
    /* The control link carries only failures and goodbyes: a pass that spins on a
     * running call reads it every CTL_EVERY_NS, not every time (one syscall saved). */
    int64_t now = hoop__now_ns();
    if (state != HOOP__CS_RUNNING || how || now >= comm->ctl_due_ns) {
        ctl_progress(comm, &progressed);
        comm->ctl_due_ns = now + CTL_EVERY_NS;
    }
    state = atomic_load(&comm->state);
    if (state == HOOP__CS_FAILING && hoop__now_ns() >= comm->failing_deadline) fail_finalize(comm);
    if (state == HOOP__CS_RUNNING) op_progress(comm, &progressed);
    prev_lost_check(comm);
    if (atomic_load(&comm->state) == HOOP__CS_FAILED)
        ops_fail_all(comm, comm->fail_st, comm->fail_msg, NULL);
    hoop__device_sync_forbid(-1);
    return progressed;
}

void *hoop__progress_main(void *arg)
{
    hoop_comm *comm = arg;
    int64_t last_progress = 0;
    hoop__device_sync_forbid(1); /* for the thread's life (see hoop__progress_pass) */
    pthread_mutex_lock(&comm->engine);
    while (!atomic_load(&comm->stop)) {
        int64_t now = hoop__now_ns();
        if (hoop__progress_pass(comm)) {
            last_progress = now;
            continue;
        }
        if (now - last_progress > SPIN_NS || atomic_load(&comm->drivers) > 0) {
            wait_events(comm); /* a caller driving progress needs no competitor */
        } else {               /* spin politely: on a busy CPU the peer (or a waiter) may need it */
            pthread_mutex_unlock(&comm->engine);
            sched_yield();
            pthread_mutex_lock(&comm->engine);
        }
    }
    shutdown_links(comm);
    pthread_mutex_unlock(&comm->engine);
    return NULL;
}
