/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/rd.c -- recursive-doubling all-reduce, and the cell helpers it shares
 * with rhd.c.
 *
 * Recursive doubling (Thakur, Rabenseifner & Gropp 2005, section 4.1) on p = 2^k ranks:
 * at step s = 0..k-1 rank r exchanges its WHOLE current vector with partner r XOR 2^s
 * and both combine the two vectors; after k steps everyone holds the full reduction.
 * Both partners combine the same two operands in the same order, the lower rank's first
 * (commutative as the reductions are, the order decides a NaN's payload and MIN/MAX of
 * -0 and +0), so ranks agree bitwise. Non-power-of-two n: the first 2 x rem ranks
 * fold in pairs first (the even rank sends its vector to the odd one, which plays in
 * the power-of-two group) and the odd rank returns the result at the end.
 * Who sends what at step s: everything, to r XOR 2^s. Pipelining: the vector moves in
 * chunks; chunk c of step s+1 leaves as soon as chunk c of step s is reduced.
 * Cost: lg(p) x alpha + lg(p) x N x beta + lg(p) x N x gamma; latency-optimal, so the
 * cost model picks it for small messages. Bandwidth lower bound for all-reduce is
 * 2(n-1)/n x N x beta, which rd misses by a factor lg(p) x n / (2(n-1)).
 * Reference: R. Thakur, R. Rabenseifner and W. Gropp, "Optimization of collective
 * communication operations in MPICH", IJHPCA 19(1), 2005.
 */
#include <stdlib.h>

#include "collectives/coll.h"
#include "core/check.h"

hoop_status hoop__cells_init(hoop__cells *g, const hoop__coll_args *a)
{
    g->elem = a->elem;
    g->cell = a->chunk_bytes / a->elem;
    size_t n = a->count / g->cell + 2;
    g->last = g->sent = NULL;
    HOOP_CHECK(hoop__calloc(&g->last, n));
    HOOP_CHECK(hoop__calloc(&g->sent, n));
    for (size_t i = 0; i < n; i++) g->last[i] = g->sent[i] = -1;
    return HOOP_OK;
}

void hoop__cells_free(hoop__cells *g)
{
    free(g->last);
    free(g->sent);
}

static hoop__step piece(hoop__step_kind kind, int peer, int buf, const hoop__cells *g, size_t lo,
                        size_t hi)
{
    return (hoop__step){.kind = (uint8_t)kind,
                        .buf = (uint8_t)buf,
                        .peer = peer,
                        .dep = {-1, -1},
                        .off = lo * g->elem,
                        .src_off = lo * g->elem,
                        .bytes = (hi - lo) * g->elem};
}

void hoop__cells_send(hoop__sched *s, hoop__cells *g, int peer, int buf, size_t lo, size_t hi)
{
    for (size_t plo = lo, phi, k; plo < hi; plo = phi) {
        k = plo / g->cell;
        phi = (k + 1) * g->cell < hi ? (k + 1) * g->cell : hi;
        hoop__step x = piece(HOOP__STEP_SEND, peer, buf, g, plo, phi);
        x.dep[0] = g->last[k];
        g->sent[k] = hoop__sched_add(s, x);
    }
}

void hoop__cells_reduce(hoop__sched *s, hoop__cells *g, int peer, int src_buf, size_t lo, size_t hi,
                        int final, int local_first)
{
    for (size_t plo = lo, phi, k; plo < hi; plo = phi) {
        k = plo / g->cell;
        phi = (k + 1) * g->cell < hi ? (k + 1) * g->cell : hi;
        hoop__step x = piece(HOOP__STEP_RECV_REDUCE, peer, HOOP__BUF_RECV, g, plo, phi);
        x.src_buf = (uint8_t)src_buf;
        x.final = (uint8_t) final;
        x.local_first = (uint8_t)local_first;
        x.dep[0] = g->last[k]; /* the operand in recvbuf is complete */
        x.dep[1] = g->sent[k]; /* and no send still reads what we overwrite */
        g->last[k] = hoop__sched_add(s, x);
    }
}

void hoop__cells_recv(hoop__sched *s, hoop__cells *g, int peer, size_t lo, size_t hi)
{
    for (size_t plo = lo, phi, k; plo < hi; plo = phi) {
        k = plo / g->cell;
        phi = (k + 1) * g->cell < hi ? (k + 1) * g->cell : hi;
        hoop__step x = piece(HOOP__STEP_RECV, peer, HOOP__BUF_RECV, g, plo, phi);
        x.dep[0] = g->last[k];
        x.dep[1] = g->sent[k];
        g->last[k] = hoop__sched_add(s, x);
    }
}

hoop_status hoop__allreduce_rd(const hoop__coll_args *a, hoop__sched *s)
{
    int n = a->world_size, r = a->rank, p, rem, me;
    size_t cnt = a->count;
    hoop__cells g;
    HOOP_CHECK(hoop__cells_init(&g, a));
    hoop__fold(r, n, &p, &rem, &me);
    int cur = HOOP__BUF_SEND; /* where our current vector lives */
    if (me < 0) {             /* even rank of a folded pair: hand over, wait for the result */
        hoop__cells_send(s, &g, r + 1, HOOP__BUF_SEND, 0, cnt);
        hoop__cells_recv(s, &g, r + 1, 0, cnt);
        hoop__cells_free(&g);
        return s->err;
    }
    if (r < 2 * rem) {
        hoop__cells_reduce(s, &g, r - 1, HOOP__BUF_SEND, 0, cnt, 0, 0);
        cur = HOOP__BUF_RECV;
    }
    for (int mask = 1; mask < p; mask <<= 1) {
        int peer = hoop__unfold(me ^ mask, rem);
        hoop__cells_send(s, &g, peer, cur, 0, cnt);
        /* the lower rank's operand first on both partners */
        hoop__cells_reduce(s, &g, peer, cur, 0, cnt, mask * 2 == p, r < peer);
        cur = HOOP__BUF_RECV;
    }
    if (r < 2 * rem) hoop__cells_send(s, &g, r - 1, HOOP__BUF_RECV, 0, cnt);
    hoop__cells_free(&g);
    return s->err;
}
