/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/direct.c -- the direct all-reduce: for in-place calls on memory every
 * rank maps (shared.c), each rank reduces its share of the elements straight from its
 * peers' copies and writes the result into every copy. No byte of data passes through a
 * transport; the links carry only one-byte tokens that order the ranks:
 *   1. arrival: no rank may read a peer's copy before that peer has called this same
 *      all-reduce (its data is final). With 2 ranks the call's header, which each rank
 *      sends when it starts the call and which must have matched before any step that
 *      touches user memory runs, already proves it. With more, a token goes twice round
 *      the ring: the first lap proves everyone arrived, the second releases them. The
 *      proof leans on an executor rule: a token receive has no dependency, so, like any
 *      receive into a named buffer, it is posted only once the header from the previous
 *      rank has matched. A rank forwards the first lap only after receiving it, so a
 *      completed lap means every rank's header equalled its predecessor's: every rank
 *      called the same all-reduce on the same segment and offset. (Were token receives
 *      ever posted early, like receives into slots, a mismatched rank's memory could be
 *      written before the mismatch is seen.)
 *   2. rank r reduces elements [part_start(r), part_start(r + 1)) over the copies, starting
 *      from its own and going round in ring order (each element is computed once, so
 *      every rank gets the same bits), and writes the result into every copy, in pieces
 *      small enough to stay in cache between the two.
 *   3. departure: no rank may return (and let its caller touch its copy) while a peer
 *      still reads or writes it: 2 ranks swap a token after their share is done; more go
 *      twice round the ring again, each rank forwarding the first lap only after its share.
 * Per rank this moves (n-1)/n of the bytes in from peers and (n-1)/n out, once, against
 * 2(n-1)/n through rings, each byte copied in and out, for the ring algorithm. The scheme
 * is the single-copy intra-node all-reduce of registered buffers (NCCL's user-buffer
 * registration, MPI-3 shared-memory windows); the barrier is the ring barrier of chain.c.
 * In-place all-gather and reduce-scatter follow the same three phases, with step 2 being
 * "copy every other rank's block from its copy" or "reduce my block over every copy into
 * my own copy".
 *
 * Owns nothing. Thread-safety: schedules are built and run by the progress thread.
 */
#include <string.h>

#include "collectives/coll.h"
#include "core/check.h"

#define PIECE (32 << 10) /* bytes reduced, then copied out, while they are in cache */

static int32_t token(hoop__sched *s, hoop__step_kind kind, int peer, int32_t dep0, int32_t dep1)
{
    /* Token bytes: receive into byte 1, send from byte 0, so the two never overlap. */
    return hoop__sched_add(s, (hoop__step){.kind = (uint8_t)kind,
                                           .buf = HOOP__BUF_TOKEN,
                                           .peer = peer,
                                           .dep = {dep0, dep1},
                                           .off = kind == HOOP__STEP_RECV ? 1 : 0,
                                           .bytes = 1});
}

/* A token twice round the ring; this rank's first send waits for `after`. Returns the
 * step after which every rank has passed `after`. */
static int32_t ring_barrier(hoop__sched *s, int r, int n, int32_t after)
{
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    if (r == 0) {
        token(s, HOOP__STEP_SEND, next, after, -1);
        int32_t lap = token(s, HOOP__STEP_RECV, prev, -1, -1);
        token(s, HOOP__STEP_SEND, next, lap, -1);
        return lap;
    }
    int32_t got = token(s, HOOP__STEP_RECV, prev, -1, -1);
    token(s, HOOP__STEP_SEND, next, got, after);
    int32_t released = token(s, HOOP__STEP_RECV, prev, -1, -1);
    if (r != n - 1) token(s, HOOP__STEP_SEND, next, released, -1);
    return released;
}

/* Orders the ranks: returns the step after which every rank has passed its `after` step
 * (2 ranks swap a token; more send one twice round the ring). */
static int32_t barrier(hoop__sched *s, int r, int n, int32_t after)
{
    if (n > 2) return ring_barrier(s, r, n, after);
    token(s, HOOP__STEP_SEND, 1 - r, after, -1);
    return token(s, HOOP__STEP_RECV, 1 - r, -1, -1);
}

static size_t share(const hoop__coll_args *a, int q)
{
    return hoop__part_start(a->count, (size_t)a->world_size, (size_t)q) * a->elem;
}

/* Arrival (2 ranks: the matched header says so), one local step on this rank's bytes
 * [off, off + bytes), departure. */
static hoop_status arrive_step_leave(const hoop__coll_args *a, hoop__sched *s, hoop__step_kind kind,
                                     size_t off, size_t bytes)
{
    int n = a->world_size, r = a->rank;
    int32_t arrived = n == 2 ? -1 : ring_barrier(s, r, n, -1);
    int32_t mine = hoop__sched_add(
        s, (hoop__step){
               .kind = (uint8_t)kind, .peer = r, .dep = {arrived, -1}, .off = off, .bytes = bytes});
    barrier(s, r, n, mine); /* nobody still touches this rank's copy */
    return s->err;
}

/* In-place all-reduce: this rank's share, reduced and written into every copy. */
hoop_status hoop__allreduce_direct(const hoop__coll_args *a, hoop__sched *s)
{
    if (a->sendbuf != a->recvbuf || !a->seg_base)
        return HOOP_INTERNAL_ERROR("direct all-reduce on a buffer that is not shared in place");
    size_t lo = share(a, a->rank), hi = share(a, a->rank + 1);
    return arrive_step_leave(a, s, HOOP__STEP_DIRECT, lo, hi - lo);
}

/* In-place all-gather (block r of rank r's copy is its contribution): after arrival,
 * each rank copies every other rank's block from that rank's copy into its own. */
hoop_status hoop__allgather_direct(const hoop__coll_args *a, hoop__sched *s)
{
    int n = a->world_size, r = a->rank;
    size_t block = a->count * a->elem;
    int32_t last = n == 2 ? -1 : ring_barrier(s, r, n, -1);
    for (int k = 1; k < n; k++) {
        int q = (r + k) % n;
        last = hoop__sched_add(s, (hoop__step){.kind = HOOP__STEP_DIRECT_COPY,
                                               .peer = q,
                                               .dep = {last, -1},
                                               .off = (size_t)q * block,
                                               .bytes = block});
    }
    barrier(s, r, n, last);
    return s->err;
}

/* In-place reduce-scatter (rank r's result lands in block r of its own copy): each rank
 * reduces its block over every copy into its own copy only. */
hoop_status hoop__reduce_scatter_direct(const hoop__coll_args *a, hoop__sched *s)
{
    size_t block = a->count * a->elem;
    return arrive_step_leave(a, s, HOOP__STEP_DIRECT_OWN, (size_t)a->rank * block, block);
}

void hoop__direct_reduce(hoop_dtype dtype, hoop_op op, char *const *bufs, int n, int me, size_t off,
                         size_t bytes, size_t elem, int copy_out)
{
    for (size_t p = off; p < off + bytes; p += PIECE) {
        size_t len = off + bytes - p < PIECE ? off + bytes - p : PIECE;
        char *acc = bufs[me] + p;
        for (int k = 1; k < n; k++)
            hoop__reduce(dtype, op, acc, acc, bufs[(me + k) % n] + p, len / elem,
                         k == n - 1 ? n : 0);
        for (int k = 1; copy_out && k < n; k++) memcpy(bufs[(me + k) % n] + p, acc, len);
    }
}
