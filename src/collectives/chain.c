/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/chain.c -- pipelined chains along the ring: broadcast, reduce, barrier.
 *
 * Positions are taken relative to the root: pos = (rank - root) mod n.
 *   broadcast: the root sends chunk c to pos 1; pos k receives chunk c from pos k-1
 *     into recvbuf and forwards it to pos k+1 (not from the last position). Chunk c+1
 *     travels behind chunk c, so after the pipe fills every link is busy: time ~
 *     (n-2) x chunk / bw + N / bw, i.e. about N / link bandwidth for large N.
 *   reduce: the data flows the other way round to the root: pos 1 sends its chunk c to
 *     pos 2, pos k receives chunk c into a slot, adds its own contribution into scratch
 *     and forwards it; the root (pos 0, reached last) reduces into recvbuf. Each link
 *     carries N bytes once: time ~ N / bw + N x gamma per rank.
 *   barrier: nothing beyond the vote that opens every call (vote.c): its last merge
 *     means every rank has called this barrier (lg p rounds of one message).
 * Pipelining depth is the executor's (chunks in flight per link). Reference for the
 * pipelined chain: the "pipelined broadcast" analysed in Patarasuk & Yuan 2009 and in
 * Thakur, Rabenseifner & Gropp 2005 (long-message broadcast and reduce bounds).
 */
#include "collectives/coll.h"
#include "core/check.h"

#define MODN(x, n) ((int)((((x) % (n)) + (n)) % (n)))

static hoop__step mk(hoop__step_kind kind, int peer, int buf, size_t off, size_t bytes, int32_t dep)
{
    return (hoop__step){.kind = (uint8_t)kind,
                        .buf = (uint8_t)buf,
                        .peer = peer,
                        .dep = {dep, -1},
                        .off = off,
                        .bytes = bytes};
}

hoop_status hoop__broadcast_chain(const hoop__coll_args *a, hoop__sched *s)
{
    int n = a->world_size, r = a->rank, pos = MODN(r - a->root, n);
    int next = MODN(r + 1, n), prev = MODN(r - 1, n);
    size_t total = a->count * a->elem, cb = a->chunk_bytes;
    if (pos == 0 && a->sendbuf != a->recvbuf && total > 0) {
        hoop__step x = mk(HOOP__STEP_COPY, r, HOOP__BUF_RECV, 0, total, -1);
        x.src_buf = HOOP__BUF_SEND;
        hoop__sched_add(s, x);
    }
    for (size_t off = 0; off < total; off += cb) {
        size_t len = total - off < cb ? total - off : cb;
        if (pos == 0) {
            hoop__sched_add(s, mk(HOOP__STEP_SEND, next, HOOP__BUF_SEND, off, len, -1));
            continue;
        }
        int32_t got = hoop__sched_add(s, mk(HOOP__STEP_RECV, prev, HOOP__BUF_RECV, off, len, -1));
        if (pos != n - 1)
            hoop__sched_add(s, mk(HOOP__STEP_SEND, next, HOOP__BUF_RECV, off, len, got));
    }
    return s->err;
}

hoop_status hoop__reduce_chain(const hoop__coll_args *a, hoop__sched *s)
{
    int n = a->world_size, r = a->rank, pos = MODN(r - a->root, n);
    int next = MODN(r + 1, n), prev = MODN(r - 1, n);
    size_t total = a->count * a->elem, cb = a->chunk_bytes;
    if (pos >= 2) s->scratch_bytes = total;
    for (size_t off = 0; off < total; off += cb) {
        size_t len = total - off < cb ? total - off : cb;
        if (pos == 1) {
            hoop__sched_add(s, mk(HOOP__STEP_SEND, next, HOOP__BUF_SEND, off, len, -1));
            continue;
        }
        hoop__step x = mk(HOOP__STEP_RECV_REDUCE, prev,
                          pos == 0 ? HOOP__BUF_RECV : HOOP__BUF_SCRATCH, off, len, -1);
        x.src_buf = HOOP__BUF_SEND;
        x.src_off = off;
        x.final = pos == 0;
        int32_t red = hoop__sched_add(s, x);
        if (pos != 0)
            hoop__sched_add(s, mk(HOOP__STEP_SEND, next, HOOP__BUF_SCRATCH, off, len, red));
    }
    return s->err;
}

hoop_status hoop__barrier_vote(const hoop__coll_args *a, hoop__sched *s)
{
    (void)a; /* the vote is the barrier */
    return s->err;
}
