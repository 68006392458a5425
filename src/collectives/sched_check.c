/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/sched_check.c -- checks a built schedule against the call's buffers
 * before the executor runs it.
 *
 * The executor trusts its schedule: a step's (buf, off, bytes) becomes a pointer and a
 * length handed to a transport or a memory operation, with no bound in sight. A schedule
 * that names a byte past the end of a buffer (an algorithm that receives count + 1
 * elements, a wrong segment boundary) would write past the user's memory silently, and
 * one whose peer or dependency is out of range would index the executor's own arrays out
 * of bounds. So every schedule is checked here once, when it is built, before any byte
 * moves: each step's ranges on the send, receive, scratch, token and vote buffers lie
 * inside them, its buffers exist, its peer is another rank, its dependencies are earlier
 * steps. A failure is HOOP_ERR_INTERNAL (the schedule is hoop's, or a researcher's
 * plug-in) naming the collective, the algorithm, the step, its kind, its peer, the
 * buffer, the range and the buffer's size.
 *
 * Cost: O(steps), comparisons only (no data touched), once per call: a few hundred
 * nanoseconds for the hundreds of steps of a large ring, nothing against a call's
 * microseconds.
 *
 * What it cannot see: that two ranks' schedules pair up (the k-th SEND to a peer with
 * the peer's k-th receive, equal bytes, coll.h). That takes the other rank's schedule.
 * The transports see it instead, when the message arrives: tcp and shm carry each
 * message's length in a frame word (transport/frame.h), ib compares an eager message's
 * length with its receive and a rendezvous grant's with its send, and the executor
 * (exec.c, frame_error) fails the call with HOOP_ERR_INTERNAL naming the step, the peer
 * and both lengths. A pair whose counts of messages differ (an extra send: with every
 * length agreeing, the receiver's receives pair with the wrong messages, and the call
 * would succeed with wrong data) is seen by the vote instead: each
 * rank's message digest (below) rides in its vote record, the vote sums them, and a
 * sum that is not 0 once it covers every rank fails the call on every rank (exec.c).
 * Still unseen: two messages of equal length swapped, and on ib a disagreement that
 * moves a message across its eager/rendezvous boundary (it may stall until
 * HOOP_TIMEOUT).
 *
 * Owns nothing. Thread-safe (pure functions).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "collectives/coll.h"
#include "collectives/comm.h"
#include "core/check.h"
#include "core/rng.h"

const char *hoop__coll_name(int coll)
{
    static const char *const names[] = {"?",         "allreduce",      "broadcast", "reduce",
                                        "allgather", "reduce_scatter", "barrier"};
    return coll >= 1 && coll <= 6 ? names[coll] : "?";
}

const char *hoop__step_kind_name(int kind)
{
    static const char *const kinds[] = {[HOOP__STEP_SEND] = "send",
                                        [HOOP__STEP_RECV] = "recv",
                                        [HOOP__STEP_RECV_REDUCE] = "recv+reduce",
                                        [HOOP__STEP_COPY] = "copy",
                                        [HOOP__STEP_DIRECT] = "direct",
                                        [HOOP__STEP_DIRECT_OWN] = "direct (own copy)",
                                        [HOOP__STEP_DIRECT_COPY] = "direct copy",
                                        [HOOP__STEP_VOTE] = "vote merge"};
    return kind >= 0 && kind <= HOOP__STEP_VOTE ? kinds[kind] : "?";
}

/* The algorithm that built a's schedule, by name. */
const char *hoop__sched_algo_name(const hoop__coll_args *a)
{
    switch (a->coll) {
    case HOOP__COLL_ALLREDUCE: return hoop_algo_name(a->algo);
    case HOOP__COLL_BROADCAST:
    case HOOP__COLL_REDUCE: return "chain";
    case HOOP__COLL_ALLGATHER:
    case HOOP__COLL_REDUCE_SCATTER: return a->algo == HOOP_ALGO_DIRECT ? "direct" : "ring";
    default: return "vote";
    }
}

/* The bytes of each buffer a step may name in call a (size[HOOP__BUF_*]): what the call's
 * contract gives this rank, 0 for a buffer it does not have (broadcast's sendbuf off the
 * root, reduce's recvbuf off the root). Stage slots are never named by a step (a staged
 * step names the user's buffer). *shared = the bytes of the buffer DIRECT steps address
 * (the call's shared buffer, in place). */
void hoop__coll_user_bytes(const hoop__coll_args *a, size_t *send, size_t *recv)
{
    size_t block = a->count * a->elem, all = block * (size_t)a->world_size;
    int root = a->rank == a->root;
    *send = a->coll == HOOP__COLL_REDUCE_SCATTER       ? all
            : a->coll == HOOP__COLL_BROADCAST && !root ? 0
            : a->coll == HOOP__COLL_BARRIER            ? 0
                                                       : block;
    *recv = a->coll == HOOP__COLL_ALLGATHER         ? all
            : a->coll == HOOP__COLL_REDUCE && !root ? 0
            : a->coll == HOOP__COLL_BARRIER         ? 0
                                                    : block;
    if (!a->sendbuf) *send = 0;
    if (!a->recvbuf) *recv = 0;
}

static void buf_sizes(const hoop__coll_args *a, size_t scratch, size_t size[HOOP__NBUF],
                      size_t *shared)
{
    size_t block = a->count * a->elem, all = block * (size_t)a->world_size;
    for (int b = 0; b < HOOP__NBUF; b++) size[b] = 0;
    hoop__coll_user_bytes(a, &size[HOOP__BUF_SEND], &size[HOOP__BUF_RECV]);
    size[HOOP__BUF_SCRATCH] = scratch;
    size[HOOP__BUF_TOKEN] = sizeof(((hoop_comm *)0)->token);
    size[HOOP__BUF_VOTE] = HOOP__VOTE_BYTES;
    *shared = a->coll == HOOP__COLL_ALLREDUCE ? block : all;
}

static const char *buf_name(int b)
{
    static const char *const names[HOOP__NBUF] = {"send buffer", "receive buffer", "scratch",
                                                  "token",       "vote records",   "stage slots"};
    return b >= 0 && b < HOOP__NBUF ? names[b] : "unknown buffer";
}

/* Fails step i of a's schedule: "<coll> algorithm <algo> (rank r of n, count c x e
 * bytes): step i (<kind> from/to rank p) <what>". */
__attribute__((format(printf, 4, 5))) static hoop_status
sched_fail(const hoop__coll_args *a, size_t i, const hoop__step *st, const char *fmt, ...)
{
    char what[400], peer[32] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (!hoop__step_is_local(st->kind) || st->kind == HOOP__STEP_DIRECT_COPY)
        snprintf(peer, sizeof(peer), " %s rank %d", st->kind == HOOP__STEP_SEND ? "to" : "from",
                 (int)st->peer);
    return HOOP_INTERNAL_ERROR("%s algorithm %s (rank %d of %d, count %zu x %zu bytes): step %zu "
                               "(%s%s) %s: the schedule is wrong (nothing was moved)",
                               hoop__coll_name(a->coll), hoop__sched_algo_name(a), a->rank,
                               a->world_size, a->count, a->elem, i, hoop__step_kind_name(st->kind),
                               peer, what);
}

/* 1 when [off, off + bytes) lies inside a buffer of size bytes (no overflow). */
static int inside(size_t off, size_t bytes, size_t size)
{
    return off <= size && bytes <= size - off;
}

/* "bytes [off, off + bytes)", or, where that end is past SIZE_MAX, "bytes from
 * off on" with the count (a wrapped end read as a small number). */
static void range_text(size_t off, size_t bytes, char *buf, size_t cap)
{
    if (bytes > SIZE_MAX - off)
        snprintf(buf, cap, "%zu bytes from byte %zu on", bytes, off);
    else
        snprintf(buf, cap, "bytes [%zu, %zu)", off, off + bytes);
}

/* One byte range of step i: buffer b, [off, off + bytes), read or written (verb). The
 * send buffer is the caller's const input: no step writes it. */
static hoop_status check_range(const hoop__coll_args *a, size_t i, const hoop__step *st, int b,
                               size_t off, size_t bytes, const size_t size[HOOP__NBUF],
                               const char *verb)
{
    if (b < 0 || b >= HOOP__NBUF || b == HOOP__BUF_STAGE)
        return sched_fail(a, i, st, "%s buffer %d, which a step cannot name", verb, b);
    int writes_send = b == HOOP__BUF_SEND && verb[0] == 'w';
    if (!writes_send && inside(off, bytes, size[b])) return HOOP_OK;
    char range[80]; /* formatted only for the message: this runs for every step of every call */
    range_text(off, bytes, range, sizeof(range));
    if (writes_send)
        return sched_fail(a, i, st, "writes %s of the send buffer, which a call only reads", range);
    return sched_fail(a, i, st, "%s %s of the %s, which holds %zu bytes", verb, range, buf_name(b),
                      size[b]);
}

/* A reduction works on whole elements: a piece of one would be left unreduced. */
static hoop_status check_whole(const hoop__coll_args *a, size_t i, const hoop__step *st)
{
    int reduces = st->kind == HOOP__STEP_RECV_REDUCE || st->kind == HOOP__STEP_DIRECT ||
                  st->kind == HOOP__STEP_DIRECT_OWN;
    size_t src = st->kind == HOOP__STEP_RECV_REDUCE ? st->src_off : 0;
    if (!reduces || a->elem <= 1 ||
        (st->bytes % a->elem == 0 && st->off % a->elem == 0 && src % a->elem == 0))
        return HOOP_OK;
    char from[48] = "";
    if (st->kind == HOOP__STEP_RECV_REDUCE)
        snprintf(from, sizeof(from), " (its other operand at offset %zu)", src);
    return sched_fail(a, i, st,
                      "reduces %zu bytes at offset %zu%s, not whole elements of %zu bytes",
                      st->bytes, st->off, from, a->elem);
}

/* The ranges step i reads and writes, by kind, then whole elements (check_whole). */
static hoop_status check_step(const hoop__coll_args *a, size_t i, const hoop__step *st,
                              const size_t size[HOOP__NBUF], size_t shared)
{
    size_t rec = sizeof(hoop__vote);
    switch (st->kind) {
    case HOOP__STEP_SEND: return check_range(a, i, st, st->buf, st->off, st->bytes, size, "reads");
    case HOOP__STEP_RECV: return check_range(a, i, st, st->buf, st->off, st->bytes, size, "writes");
    case HOOP__STEP_RECV_REDUCE:
        HOOP_CHECK(check_range(a, i, st, st->buf, st->off, st->bytes, size, "writes"));
        HOOP_CHECK(check_range(a, i, st, st->src_buf, st->src_off, st->bytes, size, "reads"));
        return check_whole(a, i, st);
    case HOOP__STEP_COPY:
        HOOP_CHECK(check_range(a, i, st, st->buf, st->off, st->bytes, size, "writes"));
        return check_range(a, i, st, st->src_buf, st->src_off, st->bytes, size, "reads");
    case HOOP__STEP_DIRECT:
    case HOOP__STEP_DIRECT_OWN:
    case HOOP__STEP_DIRECT_COPY:
        if (a->seg_base && inside(st->off, st->bytes, shared)) return check_whole(a, i, st);
        char range[80];
        range_text(st->off, st->bytes, range, sizeof(range));
        return sched_fail(a, i, st, "addresses %s of the shared buffer, which holds %zu bytes%s",
                          range, shared, a->seg_base ? "" : " (the call's buffer is not shared)");
    case HOOP__STEP_VOTE:
        HOOP_CHECK(check_range(a, i, st, HOOP__BUF_VOTE, st->off, rec, size, "reads"));
        return check_range(a, i, st, HOOP__BUF_VOTE, st->src_off, 2 * rec, size, "merges");
    default: return sched_fail(a, i, st, "has kind %d, which the executor does not know", st->kind);
    }
}

/* Does st read or write the vote records? */
static int names_votes(const hoop__step *st)
{
    int reads_src = st->kind == HOOP__STEP_RECV_REDUCE || st->kind == HOOP__STEP_COPY;
    return st->kind == HOOP__STEP_VOTE || st->buf == HOOP__BUF_VOTE ||
           (reads_src && st->src_buf == HOOP__BUF_VOTE);
}

/* A message from rank src to rank dst, hashed; odd (see hoop__sched_check). Its length
 * is left out: a length that differs is the transports' to report, naming the step and
 * both lengths (transport/frame.h), which a failed sum could not. */
static uint64_t msg_hash(int src, int dst)
{
    /* splitmix64's output for the pair packed in 64 bits (core/rng.h): each pair its own
     * value, mixed */
    hoop__rng r = hoop__rng_seed((uint64_t)(uint32_t)src << 32 | (uint32_t)dst);
    return hoop__rng_next(&r) | 1u;
}

hoop_status hoop__sched_check(const hoop__sched *s, const hoop__coll_args *a,
                              struct hoop_tp_comm *const *send, struct hoop_tp_comm *const *recv,
                              uint64_t *msgs)
{
    size_t size[HOOP__NBUF], shared;
    uint64_t digest = 0;
    buf_sizes(a, s->scratch_bytes, size, &shared);
    for (size_t i = 0; i < s->n; i++) {
        const hoop__step *st = &s->steps[i];
        if (i >= s->nvote && names_votes(st))
            return sched_fail(a, i, st,
                              "names the vote records (buffer %d), which only the call's vote "
                              "opening the schedule may use",
                              HOOP__BUF_VOTE);
        if (i >= s->nvote && st->kind == HOOP__STEP_SEND)
            digest += msg_hash(a->rank, st->peer);
        else if (i >= s->nvote &&
                 (st->kind == HOOP__STEP_RECV || st->kind == HOOP__STEP_RECV_REDUCE))
            digest -= msg_hash(st->peer, a->rank);
        int linked = !hoop__step_is_local(st->kind) || st->kind == HOOP__STEP_DIRECT_COPY;
        if (linked && (st->peer < 0 || st->peer >= a->world_size || st->peer == a->rank))
            return sched_fail(a, i, st, "names rank %d, not another rank of 0..%d", (int)st->peer,
                              a->world_size - 1);
        if (send && !hoop__step_is_local(st->kind) &&
            (st->kind == HOOP__STEP_SEND ? send : recv)[st->peer] == NULL)
            return sched_fail(a, i, st,
                              "has no link to rank %d: a comm links only the ring neighbours "
                              "and the peers the rows of the algorithm table mark "
                              "(hoop__algo_peers, src/collectives/algo.c); an algorithm that "
                              "exchanges with other ranks marks them in its row's peers function",
                              (int)st->peer);
        for (int k = 0; k < 2; k++)
            if (st->dep[k] < -1 || (st->dep[k] >= 0 && (size_t)st->dep[k] >= i))
                return sched_fail(a, i, st, "depends on step %d, not an earlier one",
                                  (int)st->dep[k]);
        /* A message on the call's buffers is at most one chunk: a stage slot holds one
         * (GPU buffers, HOOP_MEMOPS=staged), and the pipelining assumes it. */
        if ((st->kind == HOOP__STEP_SEND || st->kind == HOOP__STEP_RECV ||
             st->kind == HOOP__STEP_RECV_REDUCE) &&
            (st->buf == HOOP__BUF_SEND || st->buf == HOOP__BUF_RECV ||
             st->buf == HOOP__BUF_SCRATCH) &&
            st->bytes > a->chunk_bytes)
            return sched_fail(a, i, st,
                              "moves %zu bytes, more than one chunk (%zu bytes, HOOP_CHUNK_BYTES): "
                              "cut messages into chunks",
                              st->bytes, a->chunk_bytes);
        HOOP_CHECK(check_step(a, i, st, size, shared));
    }
    if (msgs) *msgs = digest;
    return HOOP_OK;
}

hoop_status hoop__sched_built(hoop_status st, int said, const hoop__sched *s,
                              const hoop__sched *votes, const hoop__coll_args *a)
{
    if (st != HOOP_OK && !said)
        return HOOP_INTERNAL_ERROR("%s algorithm %s (rank %d of %d, count %zu x %zu bytes): its "
                                   "schedule function failed with %s and no message (return "
                                   "errors through HOOP_ERROR)",
                                   hoop__coll_name(a->coll), hoop__sched_algo_name(a), a->rank,
                                   a->world_size, a->count, a->elem, hoop_status_name(st));
    if (st != HOOP_OK) return st;
    if (s->n < votes->n || memcmp(s->steps, votes->steps, votes->n * sizeof(*s->steps)) != 0)
        return HOOP_INTERNAL_ERROR(
            "%s algorithm %s (rank %d of %d, count %zu x %zu bytes): its "
            "schedule function changed the %zu steps of the call's vote that "
            "open the schedule (it must only append: hoop__sched_add)",
            hoop__coll_name(a->coll), hoop__sched_algo_name(a), a->rank, a->world_size, a->count,
            a->elem, votes->n);
    /* A call on GPU buffers reserves device scratch by that rule before the schedule is
     * built (devres.c); a schedule needing more would grow it from the progress thread. */
    size_t rule = hoop__coll_scratch_bytes(a);
    if (s->scratch_bytes > rule)
        return HOOP_INTERNAL_ERROR(
            "%s algorithm %s (rank %d of %d, count %zu x %zu bytes): its schedule needs %zu "
            "scratch bytes, more than hoop__coll_scratch_bytes gives (%zu; algo.c): give it the "
            "schedule's rule",
            hoop__coll_name(a->coll), hoop__sched_algo_name(a), a->rank, a->world_size, a->count,
            a->elem, s->scratch_bytes, rule);
    return HOOP_OK;
}
