/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/ring.c -- ring all-reduce, reduce-scatter and all-gather schedules.
 *
 * Ring all-reduce (Patarasuk & Yuan 2009) on n ranks, rank r, next = r+1, prev = r-1:
 * the buffer is cut into n segments (balanced, so counts below n or not divisible by n
 * work: some segments are empty); each segment moves as chunks of chunk_bytes.
 *   reduce-scatter, step s = 0..n-2: send segment (r-s) mod n to next (from sendbuf at
 *     s = 0, afterwards the partial sum received at step s-1), receive segment
 *     (r-s-1) mod n from prev into a slot and reduce it with our own contribution into
 *     recvbuf. After n-1 steps rank r holds the full reduction of segment (r+1) mod n.
 *   all-gather, step s = 0..n-2: send segment (r+1-s) mod n to next, receive segment
 *     (r-s) mod n from prev straight into recvbuf.
 * Pipelining: chunk c of step s depends only on chunk c of step s-1, so up to the
 * executor's depth of chunks are in flight per link: sending chunk k+1 overlaps
 * receiving and reducing chunk k. Every rank sends 2(n-1)/n x N bytes, the lower bound
 * for all-reduce, so time >= 2(n-1)/n x N / link bandwidth; every element is reduced
 * on exactly one rank and copied to the others, so ranks agree bitwise.
 * Reduce-scatter and all-gather are the two halves alone ((n-1)/n x N bytes each).
 * Reference: P. Patarasuk and X. Yuan, "Bandwidth optimal all-reduce algorithms for
 * clusters of workstations", JPDC 69(2), 2009.
 */
#include <stdlib.h>

#include "collectives/coll.h"
#include "core/check.h"

#define MODN(x, n) ((int)((((x) % (n)) + (n)) % (n)))

static hoop__step step(hoop__step_kind kind, int peer, int buf, size_t off, size_t bytes)
{
    return (hoop__step){.kind = (uint8_t)kind,
                        .buf = (uint8_t)buf,
                        .peer = peer,
                        .dep = {-1, -1},
                        .off = off,
                        .bytes = bytes};
}

size_t hoop__nchunks(size_t bytes, size_t chunk_bytes)
{
    return (bytes + chunk_bytes - 1) / chunk_bytes;
}

/* Byte range [off, off+bytes) of segment i of the buffer. */
static void segment(const hoop__coll_args *a, int i, size_t *off, size_t *bytes)
{
    size_t s0 = hoop__part_start(a->count, (size_t)a->world_size, (size_t)i);
    size_t s1 = hoop__part_start(a->count, (size_t)a->world_size, (size_t)i + 1);
    *off = s0 * a->elem;
    *bytes = (s1 - s0) * a->elem;
}

/* Chunk c of a range: its offset and length. */
static size_t chunk_len(size_t bytes, size_t cb, size_t c)
{
    size_t rest = bytes - c * cb;
    return rest < cb ? rest : cb;
}

hoop_status hoop__allreduce_ring(const hoop__coll_args *a, hoop__sched *s)
{
    int n = a->world_size, r = a->rank, next = MODN(r + 1, n), prev = MODN(r - 1, n);
    size_t cb = a->chunk_bytes,
           maxc = hoop__nchunks(hoop__part_start(a->count, n, 1) * a->elem, cb);
    int32_t *last; /* step that last wrote chunk c of the segment we send next */
    HOOP_CHECK(hoop__calloc(&last, maxc + 1));
    for (int phase = 0; phase < 2; phase++) {
        for (int st = 0; st < n - 1; st++) {
            int sseg = phase == 0 ? MODN(r - st, n) : MODN(r + 1 - st, n);
            int rseg = phase == 0 ? MODN(r - st - 1, n) : MODN(r - st, n);
            size_t soff, sbytes, roff, rbytes;
            segment(a, sseg, &soff, &sbytes);
            segment(a, rseg, &roff, &rbytes);
            size_t nsc = hoop__nchunks(sbytes, cb), nrc = hoop__nchunks(rbytes, cb);
            for (size_t c = 0; c < nsc; c++) {
                int from = (phase == 0 && st == 0) ? HOOP__BUF_SEND : HOOP__BUF_RECV;
                hoop__step x =
                    step(HOOP__STEP_SEND, next, from, soff + c * cb, chunk_len(sbytes, cb, c));
                x.dep[0] = (phase == 0 && st == 0) ? -1 : last[c];
                hoop__sched_add(s, x);
            }
            for (size_t c = 0; c < nrc; c++) {
                hoop__step x = step(phase == 0 ? HOOP__STEP_RECV_REDUCE : HOOP__STEP_RECV, prev,
                                    HOOP__BUF_RECV, roff + c * cb, chunk_len(rbytes, cb, c));
                x.src_buf = HOOP__BUF_SEND;
                x.src_off = x.off;
                x.final = phase == 0 && st == n - 2;
                last[c] = hoop__sched_add(s, x);
            }
        }
    }
    free(last);
    return s->err;
}

hoop_status hoop__reduce_scatter_ring(const hoop__coll_args *a, hoop__sched *s)
{
    int n = a->world_size, r = a->rank, next = MODN(r + 1, n), prev = MODN(r - 1, n);
    size_t cb = a->chunk_bytes, block = a->count * a->elem, nc = hoop__nchunks(block, cb);
    int32_t *last, *sent;
    HOOP_CHECK(hoop__calloc(&last, nc + 1));
    HOOP_CHECK_GOTO(hoop__calloc(&sent, nc + 1), s->err, out);
    s->scratch_bytes = n > 2 ? block : 0;
    for (int st = 0; st < n - 1; st++) {
        size_t sblk = (size_t)MODN(r - st - 1, n) * block,
               rblk = (size_t)MODN(r - st - 2, n) * block;
        int lastep = st == n - 2;
        for (size_t c = 0; c < nc; c++) {
            size_t len = chunk_len(block, cb, c);
            hoop__step x = st == 0 ? step(HOOP__STEP_SEND, next, HOOP__BUF_SEND, sblk + c * cb, len)
                                   : step(HOOP__STEP_SEND, next, HOOP__BUF_SCRATCH, c * cb, len);
            x.dep[0] = st == 0 ? -1 : last[c];
            sent[c] = hoop__sched_add(s, x);
            x = step(HOOP__STEP_RECV_REDUCE, prev, lastep ? HOOP__BUF_RECV : HOOP__BUF_SCRATCH,
                     c * cb, len);
            x.src_buf = HOOP__BUF_SEND;
            x.src_off = rblk + c * cb;
            x.final = (uint8_t)lastep;
            x.dep[0] = sent[c]; /* scratch chunk c is read by that send: write after it */
            last[c] = hoop__sched_add(s, x);
        }
    }
out:
    free(last);
    free(sent);
    return s->err;
}

hoop_status hoop__allgather_ring(const hoop__coll_args *a, hoop__sched *s)
{
    int n = a->world_size, r = a->rank, next = MODN(r + 1, n), prev = MODN(r - 1, n);
    size_t cb = a->chunk_bytes, block = a->count * a->elem, nc = hoop__nchunks(block, cb);
    int inplace = (const char *)a->sendbuf == (const char *)a->recvbuf + (size_t)r * block;
    int32_t *last;
    HOOP_CHECK(hoop__calloc(&last, nc + 1));
    if (!inplace && block > 0) {
        hoop__step x = step(HOOP__STEP_COPY, r, HOOP__BUF_RECV, (size_t)r * block, block);
        x.src_buf = HOOP__BUF_SEND;
        hoop__sched_add(s, x);
    }
    for (int st = 0; st < n - 1; st++) {
        size_t sblk = (size_t)MODN(r - st, n) * block, rblk = (size_t)MODN(r - st - 1, n) * block;
        for (size_t c = 0; c < nc; c++) {
            size_t len = chunk_len(block, cb, c);
            /* Step 0 sends our own block straight from sendbuf (no wait for the copy). */
            hoop__step x = st == 0
                               ? step(HOOP__STEP_SEND, next, HOOP__BUF_SEND, c * cb, len)
                               : step(HOOP__STEP_SEND, next, HOOP__BUF_RECV, sblk + c * cb, len);
            x.dep[0] = st == 0 ? -1 : last[c];
            hoop__sched_add(s, x);
            last[c] =
                hoop__sched_add(s, step(HOOP__STEP_RECV, prev, HOOP__BUF_RECV, rblk + c * cb, len));
        }
    }
    free(last);
    return s->err;
}
