/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/rhd.c -- recursive halving-doubling all-reduce (Rabenseifner).
 *
 * On p = 2^k ranks (non-powers of two fold first, as in rd.c):
 *   reduce-scatter by recursive halving, steps s = 0..k-1 with mask = p/2, p/4, .., 1:
 *     the current range is cut in two halves; rank r keeps the lower half when
 *     (r AND mask) == 0, else the upper one, sends the other half to partner r XOR mask
 *     and reduces the half it keeps with the partner's copy of it. The range halves each
 *     step; after k steps rank r holds the full reduction of 1/p of the vector.
 *   all-gather by recursive doubling, masks 1, 2, .., p/2: rank r sends the range it
 *     owns to r XOR mask and receives the partner's range (the other half of the parent
 *     range) straight into recvbuf; the owned range doubles each step.
 * Every element is reduced on exactly one rank and then copied, so ranks agree bitwise.
 * Pipelining: ranges move as cell-aligned chunks; a chunk leaves as soon as the step
 * that last wrote its cell is done, so consecutive steps overlap.
 * Cost: 2 lg(p) x alpha + 2 (p-1)/p x N x beta + (p-1)/p x N x gamma: the bandwidth
 * lower bound 2(n-1)/n x N x beta with only 2 lg(p) messages, which is why the cost model
 * prefers it to the ring at medium sizes and larger world sizes.
 * Reference: R. Thakur, R. Rabenseifner and W. Gropp, "Optimization of collective
 * communication operations in MPICH", IJHPCA 19(1), 2005, section 4.4.
 */
#include "collectives/coll.h"
#include "core/check.h"

#define RHD_MAX_LEVELS 32

enum { H_SEND, H_REDUCE, H_RECV };

/* Moves [a, b) (send, receive-and-reduce, or receive) in the order the receiver will
 * forward it next: during halving, a receiver that keeps the lower half next sends the
 * upper half first, so that half travels first now; during doubling, the half a rank
 * already owned goes first. Both partners agree on `next_upper` (their ranks differ only
 * in the current bit), which keeps the unframed streams matched, and the pipeline does
 * not wait for the tail of the previous step. */
static void halves(hoop__sched *s, hoop__cells *g, int mode, int peer, int buf, size_t a, size_t b,
                   int next_upper, int last, int final)
{
    size_t m = a + (b - a) / 2;
    size_t r[2][2] = {{a, b}, {a, a}};
    if (!last && !next_upper) {
        r[0][0] = m, r[0][1] = b;
        r[1][0] = a, r[1][1] = m;
    }
    for (int i = 0; i < 2; i++) {
        if (mode == H_REDUCE)
            hoop__cells_reduce(s, g, peer, buf, r[i][0], r[i][1], final, 0);
        else if (mode == H_SEND)
            hoop__cells_send(s, g, peer, buf, r[i][0], r[i][1]);
        else
            hoop__cells_recv(s, g, peer, r[i][0], r[i][1]);
    }
}

hoop_status hoop__allreduce_rhd(const hoop__coll_args *a, hoop__sched *s)
{
    int n = a->world_size, r = a->rank, p, rem, me, level = 0;
    size_t lo = 0, hi = a->count, plo[RHD_MAX_LEVELS], phi[RHD_MAX_LEVELS];
    int up[RHD_MAX_LEVELS];
    hoop__cells g;
    HOOP_CHECK(hoop__cells_init(&g, a));
    hoop__fold(r, n, &p, &rem, &me);
    int cur = HOOP__BUF_SEND;
    if (me < 0) {
        hoop__cells_send(s, &g, r + 1, HOOP__BUF_SEND, 0, a->count);
        hoop__cells_recv(s, &g, r + 1, 0, a->count);
        hoop__cells_free(&g);
        return s->err;
    }
    if (r < 2 * rem) {
        hoop__cells_reduce(s, &g, r - 1, HOOP__BUF_SEND, 0, a->count, 0, 0);
        cur = HOOP__BUF_RECV;
    }
    for (int mask = p / 2; mask >= 1; mask >>= 1, level++) {
        int peer = hoop__unfold(me ^ mask, rem);
        size_t mid = lo + (hi - lo) / 2;
        int upper = (me & mask) != 0;
        plo[level] = lo;
        phi[level] = hi;
        up[level] = upper;
        int next_upper = mask > 1 && (me & (mask / 2)) != 0;
        halves(s, &g, H_SEND, peer, cur, upper ? lo : mid, upper ? mid : hi, next_upper, mask == 1,
               0);
        halves(s, &g, H_REDUCE, peer, cur, upper ? mid : lo, upper ? hi : mid, next_upper,
               mask == 1, mask == 1);
        if (upper)
            lo = mid;
        else
            hi = mid;
        cur = HOOP__BUF_RECV;
    }
    for (int mask = 1; mask < p; mask <<= 1) {
        int peer = hoop__unfold(me ^ mask, rem);
        level--;
        int first = mask == 1, own_upper = first ? 0 : up[level + 1];
        halves(s, &g, H_SEND, peer, HOOP__BUF_RECV, lo, hi, !own_upper, first, 0);
        if (!up[level]) /* we own the lower half: receive the upper one */
            halves(s, &g, H_RECV, peer, 0, hi, phi[level], !own_upper, first, 0);
        else
            halves(s, &g, H_RECV, peer, 0, plo[level], lo, !own_upper, first, 0);
        lo = plo[level];
        hi = phi[level];
    }
    if (r < 2 * rem) hoop__cells_send(s, &g, r - 1, HOOP__BUF_RECV, 0, a->count);
    hoop__cells_free(&g);
    return s->err;
}
