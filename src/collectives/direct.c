/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/direct.c -- the direct all-reduce: for in-place calls on memory every
 * rank maps (shared.c), each rank reduces its share of the elements straight from its
 * peers' copies and writes the result into every copy. No byte of data passes through a
 * transport; the links carry only the call's vote and one-byte tokens:
 *   1. arrival: no rank may read a peer's copy before that peer has called this same
 *      all-reduce (its data is final). The vote that opens every call (vote.c) proves
 *      it: its last merge means every rank has called a collective with this same
 *      header (same segment, same offset), so the local step depends on it.
 *   2. rank r reduces elements [part_start(r), part_start(r + 1)) over the copies, starting
 *      from its own and going round in ring order (each element is computed once, so
 *      every rank gets the same bits), and writes the result into every copy, in pieces
 *      small enough to stay in cache between the two. f16 and bf16 are combined in f64
 *      and rounded once, so an average that the type can hold never overflows.
 *   3. departure: no rank may return (and let its caller touch its copy) while a peer
 *      still reads or writes it: a token barrier in the vote's recursive-doubling
 *      pattern (lg p rounds), each rank's first token leaving after its share is done.
 * Per rank this moves (n-1)/n of the bytes in from peers and (n-1)/n out, once, against
 * 2(n-1)/n through rings, each byte copied in and out, for the ring algorithm. The scheme
 * is the single-copy intra-node all-reduce of registered buffers (NCCL's user-buffer
 * registration, MPI-3 shared-memory windows).
 * In-place all-gather and reduce-scatter follow the same three phases, with step 2 being
 * "copy every other rank's block from its copy" or "reduce my block over every copy into
 * my own copy".
 *
 * Owns nothing. Thread-safety: schedules are built and run by the progress thread.
 */
#include <string.h>

#include "collectives/coll.h"
#include "core/check.h"

#define PIECE (32 << 10)     /* bytes reduced, then copied out, while they are in cache */
#define HALF_PIECE (4 << 10) /* f16 / bf16 bytes per piece: an f64 accumulator 4 x that */

static size_t share(const hoop__coll_args *a, int q)
{
    return hoop__part_start(a->count, (size_t)a->world_size, (size_t)q) * a->elem;
}

/* Arrival (the vote), one local step on this rank's bytes [off, off + bytes), departure. */
static hoop_status arrive_step_leave(const hoop__coll_args *a, hoop__sched *s, hoop__step_kind kind,
                                     size_t off, size_t bytes)
{
    int32_t mine = hoop__sched_add(s, (hoop__step){.kind = (uint8_t)kind,
                                                   .peer = a->rank,
                                                   .dep = {s->voted, -1},
                                                   .off = off,
                                                   .bytes = bytes});
    hoop__sched_rd_sync(s, a->rank, a->world_size, mine); /* nobody still touches our copy */
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
    int32_t last = s->voted;
    for (int k = 1; k < n; k++) {
        int q = (r + k) % n;
        last = hoop__sched_add(s, (hoop__step){.kind = HOOP__STEP_DIRECT_COPY,
                                               .peer = q,
                                               .dep = {last, -1},
                                               .off = (size_t)q * block,
                                               .bytes = block});
    }
    hoop__sched_rd_sync(s, r, n, last);
    return s->err;
}

/* In-place reduce-scatter (rank r's result lands in block r of its own copy): each rank
 * reduces its block over every copy into its own copy only. */
hoop_status hoop__reduce_scatter_direct(const hoop__coll_args *a, hoop__sched *s)
{
    size_t block = a->count * a->elem;
    return arrive_step_leave(a, s, HOOP__STEP_DIRECT_OWN, (size_t)a->rank * block, block);
}

/* f16 / bf16: the combination over the copies runs in an f64 accumulator and is rounded
 * once (an average divides first), so partial sums never overflow the type. */
static void direct_reduce_half(hoop_dtype dtype, hoop_op op, char *const *bufs, int n, int me,
                               size_t off, size_t bytes, int copy_out)
{
    double acc[HALF_PIECE / 2];
    for (size_t p = off; p < off + bytes; p += HALF_PIECE) {
        size_t len = off + bytes - p < HALF_PIECE ? off + bytes - p : HALF_PIECE, cnt = len / 2;
        for (int k = 0; k < n; k++)
            hoop__half_to_acc(dtype, op, acc, bufs[(me + k) % n] + p, cnt, k == 0);
        hoop__acc_to_half(dtype, bufs[me] + p, acc, cnt, op == HOOP_OP_AVG ? n : 0);
        for (int k = 1; copy_out && k < n; k++) memcpy(bufs[(me + k) % n] + p, bufs[me] + p, len);
    }
}

void hoop__direct_reduce(hoop_dtype dtype, hoop_op op, char *const *bufs, int n, int me, size_t off,
                         size_t bytes, size_t elem, int copy_out)
{
    if (dtype == HOOP_DTYPE_F16 || dtype == HOOP_DTYPE_BF16) {
        direct_reduce_half(dtype, op, bufs, n, me, off, bytes, copy_out);
        return;
    }
    for (size_t p = off; p < off + bytes; p += PIECE) {
        size_t len = off + bytes - p < PIECE ? off + bytes - p : PIECE;
        char *acc = bufs[me] + p;
        for (int k = 1; k < n; k++)
            hoop__reduce(dtype, op, acc, acc, bufs[(me + k) % n] + p, len / elem,
                         k == n - 1 ? n : 0);
        for (int k = 1; copy_out && k < n; k++) memcpy(bufs[(me + k) % n] + p, acc, len);
    }
}
