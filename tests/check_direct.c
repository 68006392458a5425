/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_direct.c -- memory shared between the ranks of one host
 * (hoop_comm_alloc_shared / free_shared / is_shared) and the `direct` all-reduce that
 * reduces straight from the peers' copies.
 *
 * References are independent of hoop's kernels: small integers whose sums, products,
 * minima and maxima are exact in every dtype whatever the order (reference in int64,
 * converted once by this file's own f16/bf16 rounding), and pseudo-random floats checked
 * against a float64 sum within a bound on the rounding error. Every result is also
 * compared bitwise across ranks, and the elements around the buffer are checked to be
 * untouched. "Direct" is observed through hoop_comm_bytes_sent: a direct call sends only
 * 1-byte tokens (< 16 bytes), another algorithm sends at least the data.
 *
 * Suites: correctness (world sizes 2..5, dtype x op x count x offset, direct and auto),
 * races (200 back-to-back calls whose data change every iteration, several calls in
 * flight mixed with other collectives and segments), mismatches and bad arguments,
 * HOOP_TRANSPORT=tcp (memory private, data sent), failures (killed peer, thread and
 * process; a peer that never calls), leaks (/dev/shm, descriptors), a /dev/shm too small
 * for the segments (needs CAP_SYS_ADMIN for a private mount, else skipped), world size 1.
 * main() runs under HOOP_TRANSPORT=auto (thread-ranks share one host).
 */
#define _GNU_SOURCE /* unshare, CLONE_NEWNS */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collectives/comm.h"
#include "core/clock.h"
#include "coll_harness.h"
#include "direct_ref.h"
#include "run_suite.h"

#define BIG_COUNT 1000003
/* AUTO picks direct from 8 KiB on 2 ranks, 64 KiB on more (main 9a699b2 lowered the
 * spec's 64 KiB for 2 ranks after measuring the crossover against rd). */
#define AUTO_DIRECT_BYTES(n) ((n) == 2 ? 8192 : 65536)
#define TOKEN_BYTES 16 /* a direct call sends fewer bytes than this */

// ----------------------------------------------------------------- helpers

/* Every rank's copy of len bytes at its own p agrees bitwise with rank 0's. */
static void same_on_all(h_rank *h, void *p, size_t len, const char *what)
{
    h->shared[h->rank] = p;
    pthread_barrier_wait(h->bar);
    if (memcmp(h->shared[0], p, len) != 0)
        h_fail(h, "%s: result differs bitwise from rank 0's", what);
    pthread_barrier_wait(h->bar);
}

static hoop_status alloc_seg(h_rank *h, size_t bytes, void **p)
{
    *p = NULL;
    hoop_status st = hoop_comm_alloc_shared(h->comm, bytes, p);
    if (st != HOOP_OK)
        h_fail(h, "alloc_shared(%zu): %s: %s", bytes, hoop_status_name(st), hoop_last_error());
    return st;
}

static void free_seg(h_rank *h, void *p)
{
    hoop_status st = hoop_comm_free_shared(h->comm, p);
    if (st != HOOP_OK) h_fail(h, "free_shared: %s: %s", hoop_status_name(st), hoop_last_error());
}

/* The number of times s occurs in text. */
static int occurrences(const char *text, const char *s)
{
    int k = 0;
    for (const char *p = strstr(text, s); p; p = strstr(p + 1, s)) k++;
    return k;
}

// ----------------------------------------------------------------- one exact case

typedef struct dcase {
    hoop_dtype t;
    hoop_op op;
    size_t count, off; /* elements; the buffer starts off elements into the segment */
    hoop_algo algo;
    unsigned salt;
} dcase;

static void describe(const dcase *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s %s count=%zu off=%zu algo=%s", hoop_dtype_name(c->t),
             hoop_op_name(c->op), c->count, c->off, hoop_algo_name(c->algo));
}

/* Whether the spec makes this call direct (in place inside a segment of a shared comm). */
static int want_direct(const dcase *c, int n)
{
    return c->algo == HOOP_ALGO_DIRECT ||
           (c->algo == HOOP_ALGO_AUTO && c->count * hoop_dtype_size(c->t) >= AUTO_DIRECT_BYTES(n));
}

static void check_sent(h_rank *h, const dcase *c, uint64_t sent, int direct, const char *desc)
{
    size_t bytes = c->count * hoop_dtype_size(c->t);
    if (h->n < 2) {
        if (sent != 0)
            h_fail(h, "%s: world size 1 sent %llu bytes", desc, (unsigned long long)sent);
    } else if (direct && sent >= TOKEN_BYTES) {
        h_fail(h, "%s: not direct: sent %llu bytes", desc, (unsigned long long)sent);
    } else if (!direct && bytes >= 64 && sent < bytes / 2) {
        h_fail(h, "%s: sent only %llu bytes: direct where it must not be", desc,
               (unsigned long long)sent);
    }
}

/* Runs one in-place all-reduce on seg (seg_bytes) and checks it against the exact
 * reference, the guard elements around it, the bytes sent, and the other ranks. */
static void run_dcase(h_rank *h, char *seg, size_t seg_bytes, const dcase *c, int direct)
{
    size_t es = hoop_dtype_size(c->t), end = (c->off + c->count) * es, wrong, first;
    char *buf = seg + c->off * es, desc[160];
    describe(c, desc, sizeof(desc));
    int tail = end + es <= seg_bytes; /* room for a guard element after the buffer */
    if (end > seg_bytes) {
        h_fail(h, "%s: segment too small", desc);
        return;
    }
    memset(seg, 0xA5, c->off * es); /* guards: must survive */
    if (tail) memset(seg + end, 0x5A, es);
    fill(c->op, c->t, h->rank, buf, c->count, c->salt);
    uint64_t b0 = hoop_comm_bytes_sent(h->comm);
    hoop_comm_set_algo(h->comm, c->algo);
    hoop_status st = hoop_allreduce(h->comm, buf, buf, c->count, c->t, c->op, NULL);
    uint64_t sent = hoop_comm_bytes_sent(h->comm) - b0;
    if (st != HOOP_OK) {
        h_fail(h, "%s: %s: %s", desc, hoop_status_name(st), hoop_last_error());
        return;
    }
    ref_exact16 = c->algo == HOOP_ALGO_DIRECT || h->n == 1; /* else the links may pre-divide */
    wrong = count_wrong(c->op, c->t, h->n, buf, c->count, c->salt, &first);
    if (wrong) h_fail(h, "%s: %zu wrong, first at %zu", desc, wrong, first);
    for (size_t i = 0; i < c->off * es; i++)
        if ((unsigned char)seg[i] != 0xA5)
            h_fail(h, "%s: byte %zu before the buffer written", desc, i);
    for (size_t i = 0; tail && i < es; i++)
        if ((unsigned char)seg[end + i] != 0x5A)
            h_fail(h, "%s: byte after the buffer written", desc);
    check_sent(h, c, sent, direct, desc);
    same_on_all(h, buf, c->count * es, desc);
}

// ----------------------------------------------------------------- correctness

static size_t small_counts(int n, size_t c[4])
{
    size_t m = 0;
    c[m++] = 0;
    c[m++] = 1;
    if (n > 2) c[m++] = (size_t)n - 1;
    c[m++] = 16411; /* a prime: >= 64 KiB for 4- and 8-byte types, below for u8 and halves */
    return m;
}

/* Every dtype x op x small count x offset {0, 3}, under DIRECT and AUTO. */
static void sweep(h_rank *h)
{
    size_t counts[4], nc = small_counts(h->n, counts), seg_bytes = (16411 + 8) * 8;
    void *seg;
    if (alloc_seg(h, seg_bytes, &seg) != HOOP_OK) return;
    for (int t = 0; t < HOOP_DTYPE_COUNT_; t++)
        for (int op = 0; op < HOOP_OP_COUNT_; op++)
            for (size_t ci = 0; ci < nc; ci++)
                for (int k = 0; k < 4 && !h->err[0]; k++) {
                    if (op == HOOP_OP_AVG && !is_float((hoop_dtype)t)) continue;
                    dcase c = {.t = (hoop_dtype)t,
                               .op = (hoop_op)op,
                               .count = counts[ci],
                               .off = k & 1 ? 3 : 0,
                               .algo = k & 2 ? HOOP_ALGO_AUTO : HOOP_ALGO_DIRECT,
                               .salt = (unsigned)(t * 7 + op + k)};
                    run_dcase(h, seg, seg_bytes, &c, want_direct(&c, h->n));
                }
    free_seg(h, seg);
}

START_TEST(test_sweep)
{
    run_ranks_ms(_i, 20000, sweep, NULL);
}
END_TEST

/* 1000003 elements of every dtype (sum) and every op of f32, at an odd offset. */
static void big(h_rank *h)
{
    size_t seg_bytes = ((size_t)BIG_COUNT + 16) * 8;
    void *seg;
    if (alloc_seg(h, seg_bytes, &seg) != HOOP_OK) return;
    for (int t = 0; t < HOOP_DTYPE_COUNT_ && !h->err[0]; t++) {
        dcase c = {.t = (hoop_dtype)t, .op = HOOP_OP_SUM, .count = BIG_COUNT, .off = 5};
        c.algo = t % 2 ? HOOP_ALGO_AUTO : HOOP_ALGO_DIRECT;
        run_dcase(h, seg, seg_bytes, &c, 1);
    }
    for (int op = 1; op < HOOP_OP_COUNT_ && !h->err[0]; op++) {
        dcase c = {.t = HOOP_DTYPE_F32, .op = (hoop_op)op, .count = BIG_COUNT, .off = 1};
        c.algo = HOOP_ALGO_AUTO;
        run_dcase(h, seg, seg_bytes, &c, 1);
    }
    free_seg(h, seg);
}

START_TEST(test_big)
{
    run_ranks(_i, NULL, big, NULL);
}
END_TEST

/* Random floats: within the float64 reference's error bound, bitwise equal everywhere. */
static void random_case(h_rank *h, char *seg, hoop_dtype t, hoop_op op, size_t count, size_t off)
{
    size_t es = hoop_dtype_size(t), bad = 0, first = 0;
    char *buf = seg + off * es;
    unsigned salt = (unsigned)(t * 10 + op);
    for (size_t i = 0; i < count; i++) put(t, buf, i, rnd(h->rank, i, salt));
    hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
    uint64_t b0 = hoop_comm_bytes_sent(h->comm);
    hoop_status st = hoop_allreduce(h->comm, buf, buf, count, t, op, NULL);
    if (st != HOOP_OK) {
        h_fail(h, "random %s: %s", hoop_dtype_name(t), hoop_last_error());
        return;
    }
    if (hoop_comm_bytes_sent(h->comm) - b0 >= TOKEN_BYTES)
        h_fail(h, "random %s %zu: not direct", hoop_dtype_name(t), count);
    for (size_t i = 0; i < count; i++) {
        double ref = 0, mag = 0, got = get(t, buf, i);
        unsigned char tmp[8];
        for (int r = 0; r < h->n; r++) {
            put(t, tmp, 0, rnd(r, i, salt)); /* the value rank r really contributed */
            ref += get(t, tmp, 0);
            mag += fabs(get(t, tmp, 0));
        }
        if (op == HOOP_OP_AVG) ref /= h->n, mag /= h->n;
        if (!(fabs(got - ref) <= (h->n + 1) * unit(t) * mag + 0x1p-24)) {
            if (!bad) first = i;
            bad++;
        }
    }
    if (bad)
        h_fail(h, "random %s %s count %zu: %zu beyond the error bound, first %zu",
               hoop_dtype_name(t), hoop_op_name(op), count, bad, first);
    same_on_all(h, buf, count * es, "random floats");
}

static void random_floats(h_rank *h)
{
    size_t big = (size_t)5 << 19; /* 2.5 Mi f32 = 10 MiB */
    void *seg;
    if (alloc_seg(h, big * 4 + 64, &seg) != HOOP_OK) return;
    random_case(h, seg, HOOP_DTYPE_F32, HOOP_OP_SUM, big, 0);
    static const hoop_dtype ts[] = {HOOP_DTYPE_F32, HOOP_DTYPE_F64, HOOP_DTYPE_F16,
                                    HOOP_DTYPE_BF16};
    for (int k = 0; k < 4; k++) {
        random_case(h, seg, ts[k], HOOP_OP_SUM, 40009, 7);
        random_case(h, seg, ts[k], HOOP_OP_AVG, 40009, 0);
    }
    free_seg(h, seg);
}

START_TEST(test_random_floats)
{
    run_ranks(_i, NULL, random_floats, NULL);
}
END_TEST

/* AUTO's threshold, out-of-place calls, RING forced, plain memory: none of them direct;
 * HOOP_ALGO=direct in the environment is honoured. */
static void choice(h_rank *h)
{
    void *seg;
    if (alloc_seg(h, 1 << 20, &seg) != HOOP_OK) return;
    char *s = seg;
    size_t edge = AUTO_DIRECT_BYTES(h->n) / 4;
    dcase at = {.t = HOOP_DTYPE_F32, .op = HOOP_OP_SUM, .count = edge, .algo = HOOP_ALGO_AUTO};
    run_dcase(h, seg, 1 << 20, &at, 1); /* exactly the threshold: direct */
    at.count = edge - 1;
    run_dcase(h, seg, 1 << 20, &at, 0); /* one element less: not direct */
    dcase u8 = {.t = HOOP_DTYPE_U8, .op = HOOP_OP_MAX, .count = 65536, .off = 1};
    run_dcase(h, seg, 1 << 20, &u8, 1);
    dcase ring = {.t = HOOP_DTYPE_I32, .op = HOOP_OP_SUM, .count = 100000, .algo = HOOP_ALGO_RING};
    run_dcase(h, seg, 1 << 20, &ring, 0);
    /* Out of place, both buffers in the segment, under DIRECT: runs another algorithm. */
    size_t count = 50000, wrong, first;
    fill(HOOP_OP_SUM, HOOP_DTYPE_I32, h->rank, s, count, 9);
    hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
    uint64_t b0 = hoop_comm_bytes_sent(h->comm);
    if (hoop_allreduce(h->comm, s, s + 4 * count, count, HOOP_DTYPE_I32, HOOP_OP_SUM, NULL) !=
        HOOP_OK)
        h_fail(h, "out of place: %s", hoop_last_error());
    if (hoop_comm_bytes_sent(h->comm) - b0 < 4 * count)
        h_fail(h, "out of place: only %llu bytes sent",
               (unsigned long long)(hoop_comm_bytes_sent(h->comm) - b0));
    if ((wrong = count_wrong(HOOP_OP_SUM, HOOP_DTYPE_I32, h->n, s + 4 * count, count, 9, &first)))
        h_fail(h, "out of place: %zu wrong, first %zu", wrong, first);
    /* Plain memory under DIRECT: falls back, correct. */
    int32_t *plain = malloc(4 * count);
    fill(HOOP_OP_SUM, HOOP_DTYPE_I32, h->rank, plain, count, 3);
    b0 = hoop_comm_bytes_sent(h->comm);
    if (hoop_allreduce(h->comm, plain, plain, count, HOOP_DTYPE_I32, HOOP_OP_SUM, NULL) != HOOP_OK)
        h_fail(h, "plain: %s", hoop_last_error());
    if (hoop_comm_bytes_sent(h->comm) - b0 < 4 * count) h_fail(h, "plain: too few bytes sent");
    if ((wrong = count_wrong(HOOP_OP_SUM, HOOP_DTYPE_I32, h->n, plain, count, 3, &first)))
        h_fail(h, "plain: %zu wrong, first %zu", wrong, first);
    free(plain);
    free_seg(h, seg);
}

START_TEST(test_choice)
{
    hoop_algo a;
    ck_assert_str_eq(hoop_algo_name(HOOP_ALGO_DIRECT), "direct");
    ck_assert_int_eq(hoop_algo_from_name("direct", &a), HOOP_OK);
    ck_assert_int_eq(a, HOOP_ALGO_DIRECT);
    run_ranks(2, NULL, choice, NULL);
    run_ranks(3, NULL, choice, NULL);
}
END_TEST

/* HOOP_ALGO=direct: a 3-element call on a segment goes direct without set_algo. */
static void env_algo(h_rank *h)
{
    void *seg;
    if (alloc_seg(h, 4096, &seg) != HOOP_OK) return;
    double *x = seg;
    for (int i = 0; i < 3; i++) x[i] = h->rank * 10 + i;
    uint64_t b0 = hoop_comm_bytes_sent(h->comm);
    if (hoop_allreduce(h->comm, x, x, 3, HOOP_DTYPE_F64, HOOP_OP_MAX, NULL) != HOOP_OK)
        h_fail(h, "allreduce: %s", hoop_last_error());
    if (hoop_comm_bytes_sent(h->comm) - b0 >= TOKEN_BYTES) h_fail(h, "HOOP_ALGO=direct ignored");
    for (int i = 0; i < 3; i++)
        if (x[i] != (h->n - 1) * 10 + i) h_fail(h, "max[%d] = %g", i, x[i]);
    free_seg(h, seg);
}

START_TEST(test_env_algo)
{
    setenv("HOOP_ALGO", "direct", 1);
    setenv("HOOP_TRANSPORT", "shm", 1); /* as auto on one host */
    run_ranks(4, NULL, env_algo, NULL);
}
END_TEST

// ----------------------------------------------------------------- races

/* 200 in-place all-reduces on one segment. Each rank snapshots its result the moment the
 * call returns and at once writes the next iteration's data: a rank leaving while a peer
 * still reads or writes its copy shows up as a wrong snapshot or a wrong peer result. */
static void iterations(h_rank *h)
{
    enum { ITERS = 200 };
    size_t count = 12289;
    void *seg;
    if (alloc_seg(h, count * 4 + 4096, &seg) != HOOP_OK) return;
    int32_t *x = (int32_t *)seg + 1, *snap = malloc(count * 4);
    hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
    for (size_t i = 0; i < count; i++) x[i] = (int32_t)(h->rank * 1000 + i);
    uint64_t b0 = hoop_comm_bytes_sent(h->comm);
    for (int it = 0; it < ITERS && !h->err[0]; it++) {
        if (it % h->n == h->rank && it % 3) usleep((useconds_t)(it % 7) * 50); /* arrive late */
        hoop_status st = hoop_allreduce(h->comm, x, x, count, HOOP_DTYPE_I32, HOOP_OP_SUM, NULL);
        memcpy(snap, x, count * 4);
        for (size_t i = 0; i < count; i++) x[i] = (int32_t)(h->rank * 1000 + i + (size_t)it + 1);
        if (st != HOOP_OK) {
            h_fail(h, "iteration %d: %s", it, hoop_last_error());
            break;
        }
        int64_t n = h->n;
        for (size_t i = 0; i < count; i++) {
            int64_t want = 1000 * n * (n - 1) / 2 + n * (int64_t)(i + (size_t)it);
            if (snap[i] != want) {
                h_fail(h, "iteration %d: element %zu = %d, want %lld", it, i, snap[i],
                       (long long)want);
                break;
            }
        }
    }
    uint64_t sent = hoop_comm_bytes_sent(h->comm) - b0;
    if (sent >= (uint64_t)TOKEN_BYTES * ITERS)
        h_fail(h, "%llu bytes sent in %d direct calls", (unsigned long long)sent, ITERS);
    free(snap);
    free_seg(h, seg);
}

START_TEST(test_iterations)
{
    run_ranks_ms(_i, 20000, iterations, NULL);
}
END_TEST

/* Several calls in flight: direct on two regions of segment A, ring on plain memory, a
 * broadcast, auto (direct) on segment B, a barrier; then waited in reverse order. */
static void interleave(h_rank *h)
{
    enum { ROUNDS = 20, K = 5 };
    size_t ca = 3001, cp = 5000, cb = 70000;
    void *a, *b;
    if (alloc_seg(h, 2 * ca * 8, &a) != HOOP_OK || alloc_seg(h, cb * 4, &b) != HOOP_OK) return;
    double *a0 = a, *a1 = (double *)a + ca;
    int32_t *plain = malloc(cp * 4), *bb = b;
    float bc[64];
    hoop_request *req[K + 1];
    for (int round = 0; round < ROUNDS && !h->err[0]; round++) {
        unsigned s = (unsigned)round;
        fill(HOOP_OP_SUM, HOOP_DTYPE_F64, h->rank, a0, ca, s);
        fill(HOOP_OP_MAX, HOOP_DTYPE_F64, h->rank, a1, ca, s + 1);
        fill(HOOP_OP_SUM, HOOP_DTYPE_I32, h->rank, plain, cp, s + 2);
        fill(HOOP_OP_PROD, HOOP_DTYPE_I32, h->rank, bb, cb, s + 3);
        for (int i = 0; i < 64; i++) bc[i] = h->rank == 1 ? (float)(round * 64 + i) : -1.0f;
        int st = HOOP_OK;
        hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
        st |= hoop_allreduce(h->comm, a0, a0, ca, HOOP_DTYPE_F64, HOOP_OP_SUM, &req[0]);
        hoop_comm_set_algo(h->comm, HOOP_ALGO_RING);
        st |= hoop_allreduce(h->comm, plain, plain, cp, HOOP_DTYPE_I32, HOOP_OP_SUM, &req[1]);
        hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
        st |= hoop_allreduce(h->comm, a1, a1, ca, HOOP_DTYPE_F64, HOOP_OP_MAX, &req[2]);
        st |= hoop_broadcast(h->comm, bc, bc, 64, HOOP_DTYPE_F32, 1, &req[3]);
        hoop_comm_set_algo(h->comm, HOOP_ALGO_AUTO);
        st |= hoop_allreduce(h->comm, bb, bb, cb, HOOP_DTYPE_I32, HOOP_OP_PROD, &req[4]);
        st |= hoop_barrier(h->comm, &req[5]);
        if (st != HOOP_OK) {
            h_fail(h, "round %d: enqueue: %s", round, hoop_last_error());
            break;
        }
        for (int k = K; k >= 0; k--)
            if (hoop_wait(req[k], -1) != HOOP_OK)
                h_fail(h, "round %d call %d: %s", round, k, hoop_last_error());
        size_t first, w;
        if ((w = count_wrong(HOOP_OP_SUM, HOOP_DTYPE_F64, h->n, a0, ca, s, &first)))
            h_fail(h, "round %d: direct sum: %zu wrong, first %zu", round, w, first);
        if ((w = count_wrong(HOOP_OP_MAX, HOOP_DTYPE_F64, h->n, a1, ca, s + 1, &first)))
            h_fail(h, "round %d: direct max: %zu wrong, first %zu", round, w, first);
        if ((w = count_wrong(HOOP_OP_SUM, HOOP_DTYPE_I32, h->n, plain, cp, s + 2, &first)))
            h_fail(h, "round %d: ring: %zu wrong, first %zu", round, w, first);
        if ((w = count_wrong(HOOP_OP_PROD, HOOP_DTYPE_I32, h->n, bb, cb, s + 3, &first)))
            h_fail(h, "round %d: auto on B: %zu wrong, first %zu", round, w, first);
        for (int i = 0; i < 64; i++)
            if (bc[i] != (float)(round * 64 + i)) h_fail(h, "round %d: broadcast[%d]", round, i);
    }
    free(plain);
    free_seg(h, a);
    free_seg(h, b);
}

START_TEST(test_interleave)
{
    run_ranks_ms(_i, 20000, interleave, NULL);
}
END_TEST

/* hoop_wait's own deadline on a direct call whose peer comes late: HOOP_ERR_TIMEOUT,
 * the request stays valid, and waiting again gets the right result. */
static void late_peer(h_rank *h)
{
    void *seg;
    hoop_request *req;
    if (alloc_seg(h, 4096, &seg) != HOOP_OK) return;
    int64_t *x = seg;
    for (int i = 0; i < 100; i++) x[i] = h->rank + i;
    hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
    if (h->rank == 1) usleep(300 * 1000);
    if (hoop_allreduce(h->comm, x, x, 100, HOOP_DTYPE_I64, HOOP_OP_SUM, &req) != HOOP_OK) {
        h_fail(h, "allreduce: %s", hoop_last_error());
        return;
    }
    if (h->rank == 0) {
        hoop_status st = hoop_wait(req, 50);
        if (st != HOOP_ERR_TIMEOUT) h_fail(h, "wait(50 ms) gave %s", hoop_status_name(st));
    }
    if (hoop_wait(req, -1) != HOOP_OK) h_fail(h, "wait: %s", hoop_last_error());
    for (int i = 0; i < 100; i++)
        if (x[i] != (int64_t)h->n * (h->n - 1) / 2 + (int64_t)h->n * i)
            h_fail(h, "x[%d] = %lld", i, (long long)x[i]);
    free_seg(h, seg);
}

START_TEST(test_late_peer)
{
    run_ranks(2 + _i, NULL, late_peer, NULL);
}
END_TEST

/* Segments freed and allocated between calls keep their numbers in step; direct runs
 * right up to the last byte of a segment. */
static void churn(h_rank *h)
{
    void *s[3];
    for (int k = 0; k < 3; k++)
        if (alloc_seg(h, (size_t)(k + 1) * 5000, &s[k]) != HOOP_OK) return;
    free_seg(h, s[1]);
    void *d;
    if (alloc_seg(h, 12288, &d) != HOOP_OK) return;
    dcase c = {.t = HOOP_DTYPE_I64, .op = HOOP_OP_SUM, .algo = HOOP_ALGO_DIRECT};
    c.count = 15000 / 8 - 1, c.off = 1; /* ends exactly at byte 15000 of s[2] */
    run_dcase(h, s[2], 15000, &c, 1);
    c.count = 1535, c.off = 0;
    run_dcase(h, d, 12288, &c, 1);
    c.count = 600, c.off = 0;
    run_dcase(h, s[0], 5000, &c, 1);
    free_seg(h, s[0]);
    free_seg(h, d);
    /* s[2] is left for destroy to free. */
}

START_TEST(test_churn)
{
    run_ranks(3, NULL, churn, NULL);
}
END_TEST

// ----------------------------------------------------------------- mismatches

/* Asserts st is HOOP_ERR_MISMATCH and the message names both calls (and a, b). */
// ----------------------------------------------------------------- all-gather, reduce-scatter

/* Exact value rank q contributes to element j of its all-gather block. */
static double ag_val(hoop_dtype t, int q, size_t j)
{
    return (double)(((size_t)q * 7 + j) % (t == HOOP_DTYPE_U8 ? 200 : 100));
}

/* One in-place all-gather (k = 0) or reduce-scatter (k = 1) of count elements per block,
 * at element offset off of seg, checked exactly: every block (all-gather) or this rank's
 * block (reduce-scatter, against expect() at the block's global indices), the guard
 * bytes around the n blocks, the bytes sent, and (all-gather) the other ranks. */
static void run_block(h_rank *h, char *seg, int k, hoop_dtype t, hoop_op op, size_t count,
                      size_t off, hoop_algo algo)
{
    size_t es = hoop_dtype_size(t), block = count * es, n = (size_t)h->n, r = (size_t)h->rank;
    char *buf = seg + off * es, desc[200];
    unsigned salt = (unsigned)(t * 5 + op + count);
    unsigned char want[8];
    snprintf(desc, sizeof(desc), "%s %s %s count=%zu off=%zu algo=%s on %zu ranks",
             k ? "reduce_scatter" : "allgather", hoop_dtype_name(t), k ? hoop_op_name(op) : "",
             count, off, hoop_algo_name(algo), n);
    memset(seg, 0xA5, off * es);
    memset(buf + n * block, 0x5A, es);
    if (k) fill(op, t, h->rank, buf, n * count, salt);
    for (size_t j = 0; !k && j < n * count; j++)
        put(t, buf, j, j / count == r ? ag_val(t, (int)r, j % count) : -1);
    hoop_comm_set_algo(h->comm, algo);
    uint64_t b0 = hoop_comm_bytes_sent(h->comm);
    hoop_status st = k ? hoop_reduce_scatter(h->comm, buf, buf + r * block, count, t, op, NULL)
                       : hoop_allgather(h->comm, buf + r * block, buf, count, t, NULL);
    uint64_t sent = hoop_comm_bytes_sent(h->comm) - b0;
    if (st != HOOP_OK) {
        h_fail(h, "%s: %s: %s", desc, hoop_status_name(st), hoop_last_error());
        return;
    }
    int direct = algo == HOOP_ALGO_DIRECT || n * block >= AUTO_DIRECT_BYTES(h->n);
    int half = t == HOOP_DTYPE_F16 || t == HOOP_DTYPE_BF16;
    for (size_t j = 0; j < (k ? count : n * count) && !h->err[0]; j++) {
        size_t i = k ? r * count + j : j;
        if (k)
            expect(op, t, h->n, i, salt, want);
        else
            put(t, want, 0, ag_val(t, (int)(j / count), j % count));
        /* Through the links a 16-bit average pre-divides (within its bound); direct is exact. */
        if (memcmp(buf + i * es, want, es) != 0 &&
            !(k && op == HOOP_OP_AVG && half && !direct && avg16_ok(t, h->n, buf, i, salt)))
            h_fail(h, "%s: element %zu wrong", desc, i);
    }
    for (size_t i = 0; i < off * es; i++)
        if ((unsigned char)seg[i] != 0xA5)
            h_fail(h, "%s: byte %zu before the blocks written", desc, i);
    for (size_t i = 0; i < es; i++)
        if ((unsigned char)buf[n * block + i] != 0x5A)
            h_fail(h, "%s: byte after the blocks written", desc);
    if (direct && sent >= TOKEN_BYTES)
        h_fail(h, "%s: not direct: sent %llu bytes", desc, (unsigned long long)sent);
    if (!direct && block >= 64 && sent < block)
        h_fail(h, "%s: sent only %llu bytes: direct where it must not be", desc,
               (unsigned long long)sent);
    if (!k) same_on_all(h, buf, n * block, desc);
}

/* Every dtype (and op, for reduce-scatter) x counts x offsets {0, 3}, DIRECT and AUTO. */
static void blocks(h_rank *h)
{
    static const size_t counts[] = {0, 1, 5, 3001, 20011};
    size_t seg_bytes = (20011 * 5 + 8) * 8;
    void *seg;
    if (alloc_seg(h, seg_bytes, &seg) != HOOP_OK) return;
    for (int k = 0; k < 2; k++)
        for (int t = 0; t < HOOP_DTYPE_COUNT_; t++)
            for (int op = 0; op < (k ? HOOP_OP_COUNT_ : 1); op++)
                for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
                    for (int v = 0; v < 2 && !h->err[0]; v++) {
                        if (op == HOOP_OP_AVG && !is_float((hoop_dtype)t)) continue;
                        if (!k && op) continue;
                        run_block(h, seg, k, (hoop_dtype)t, (hoop_op)op, counts[ci], v ? 3 : 0,
                                  v ? HOOP_ALGO_AUTO : HOOP_ALGO_DIRECT);
                    }
    free_seg(h, seg);
}

START_TEST(test_blocks)
{
    run_ranks_ms(_i, 20000, blocks, NULL);
}
END_TEST

/* One rank's all-gather buffer is plain memory: every rank fails with a mismatch. */
static void block_mismatch(h_rank *h)
{
    void *seg;
    if (alloc_seg(h, 1 << 16, &seg) != HOOP_OK) return;
    pthread_barrier_wait(h->bar);
    float *plain = calloc((size_t)h->n * 100, 4), *x = h->rank == 1 ? plain : seg;
    hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
    hoop_status st = hoop_allgather(h->comm, x + h->rank * 100, x, 100, HOOP_DTYPE_F32, NULL);
    const char *msg = hoop_last_error();
    if (st != HOOP_ERR_MISMATCH || occurrences(msg, "allgather") < 2 || !strstr(msg, "algo=direct"))
        h_fail(h, "want HOOP_ERR_MISMATCH naming both all-gathers, got %s: %s",
               hoop_status_name(st), msg);
    free(plain);
    free_seg(h, seg);
}

START_TEST(test_block_mismatch)
{
    run_ranks_ms(3, 10000, block_mismatch, NULL);
}
END_TEST

static void want_mismatch(h_rank *h, hoop_status st, const char *what, const char *a, const char *b)
{
    const char *msg = hoop_last_error();
    if (st != HOOP_ERR_MISMATCH)
        h_fail(h, "%s: want HOOP_ERR_MISMATCH, got %s: %s", what, hoop_status_name(st), msg);
    else if (occurrences(msg, "allreduce") < 2 && occurrences(msg, "alloc") < 2)
        h_fail(h, "%s: the message does not name both calls: %s", what, msg);
    else if ((a && !strstr(msg, a)) || (b && !strstr(msg, b)))
        h_fail(h, "%s: the message does not name '%s' and '%s': %s", what, a, b ? b : "", msg);
}

static void mismatch(h_rank *h)
{
    int kind = *(int *)h->user;
    size_t count = kind == 1 ? 20000 : 100;
    void *s1, *s2;
    if (alloc_seg(h, 1 << 18, &s1) != HOOP_OK || alloc_seg(h, 1 << 18, &s2) != HOOP_OK) return;
    /* Everyone is out of alloc_shared: a rank still finishing it would otherwise fail
     * there, with the mismatch of the next call that its peers already reached. */
    pthread_barrier_wait(h->bar);
    float *plain = malloc(count * 4 + 64), *x = s1;
    if (kind <= 1 && h->rank == h->n - 1) x = plain;
    if (kind == 2 && h->rank == 1) x += 1;
    if (kind == 3 && h->rank == 0) x = s2;
    for (size_t i = 0; i < count; i++) x[i] = 1.0f;
    hoop_comm_set_algo(h->comm, kind == 1 ? HOOP_ALGO_AUTO : HOOP_ALGO_DIRECT);
    if (kind == 4 && h->rank == 1) hoop_comm_set_algo(h->comm, HOOP_ALGO_RING);
    int64_t t0 = hoop__now_ns();
    hoop_status st = hoop_allreduce(h->comm, x, x, count, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    double secs = (double)(hoop__now_ns() - t0) / 1e9;
    static const char *names[] = {"shared vs plain (direct)", "shared vs plain (auto)",
                                  "offsets 0 vs 1", "segments differ", "direct vs ring"};
    static const char *a[] = {"algo=direct", "algo=direct", "at element 0", "shared buffer 0",
                              "algo=direct"};
    static const char *b[] = {NULL, NULL, "at element 1", "shared buffer 1", "algo=ring"};
    want_mismatch(h, st, names[kind], a[kind], b[kind]);
    /* The placement named as the cause where it is; not where the ranks chose different
     * algorithms on the same buffer (it was named there too). */
    int hint = strstr(hoop_last_error(), "direct only in place, on the same shared buffer at the "
                                         "same offset on every rank") != NULL;
    if (st == HOOP_ERR_MISMATCH && hint != (kind < 4))
        h_fail(h, "%s: the message %s the placement: %s", names[kind],
               kind < 4 ? "does not name" : "blames", hoop_last_error());
    if (secs > 5) h_fail(h, "%s: took %.1f s", names[kind], secs);
    /* Never wrong data: whatever was written, no rank holds a sum of n. */
    for (size_t i = 0; i < count; i++)
        if (x[i] == (float)h->n) h_fail(h, "%s: element %zu was reduced", names[kind], i);
    st = hoop_barrier(h->comm, NULL);
    if (st == HOOP_OK) h_fail(h, "%s: the comm still works after a mismatch", names[kind]);
    free(plain);
    free_seg(h, s1);
    free_seg(h, s2);
}

START_TEST(test_mismatch)
{
    /* a hang fails as a timeout, not a mismatch */
    for (int n = 2; n <= 4; n += 2) run_ranks_ms(n, 10000, mismatch, &_i);
}
END_TEST

static void alloc_mismatch(h_rank *h)
{
    void *p = NULL;
    int64_t t0 = hoop__now_ns();
    hoop_status st = hoop_comm_alloc_shared(h->comm, h->rank == 1 ? 12288 : 8192, &p);
    double secs = (double)(hoop__now_ns() - t0) / 1e9;
    if (st != HOOP_ERR_MISMATCH)
        h_fail(h, "want HOOP_ERR_MISMATCH, got %s: %s", hoop_status_name(st), hoop_last_error());
    else if (!strstr(hoop_last_error(), "12288") || !strstr(hoop_last_error(), "8192"))
        h_fail(h, "the message does not name both sizes: %s", hoop_last_error());
    if (secs > 5) h_fail(h, "took %.1f s", secs);
    if (st != HOOP_OK && p) h_fail(h, "a failed alloc_shared returned a pointer");
}

START_TEST(test_alloc_mismatch)
{
    int before = open_fds();
    run_ranks_ms(3, 10000, alloc_mismatch, NULL);
    ck_assert_int_eq(open_fds(), before);
}
END_TEST

/* More than the machine (or the cgroup) has left: refused up front with
 * HOOP_ERR_NOMEM naming the size and the room, on every rank (a memfd reserved past it
 * woke the OOM killer, which took other processes too). */
static void alloc_too_big(h_rank *h)
{
    void *p = NULL;
    hoop_status st = hoop_comm_alloc_shared(h->comm, (size_t)1 << 50, &p);
    if (st != HOOP_ERR_NOMEM)
        h_fail(h, "want HOOP_ERR_NOMEM, got %s: %s", hoop_status_name(st), hoop_last_error());
    else if (!strstr(hoop_last_error(), "hoop_comm_alloc_shared: 1125899906842624 bytes asked, ") ||
             !strstr(hoop_last_error(), " KiB left to this process (MemAvailable + SwapFree, "
                                        "or the cgroup's memory limit less its usage)"))
        h_fail(h, "the message does not name the size and the room: %s", hoop_last_error());
    if (p) h_fail(h, "a failed alloc_shared returned a pointer");
}

START_TEST(test_alloc_too_big)
{
    run_ranks_ms(2, 10000, alloc_too_big, NULL);
}
END_TEST

// ----------------------------------------------------------------- arguments

static void bad_args(h_rank *h)
{
    hoop_comm *c = h->comm;
    void *p = (void *)1, *q = NULL;
    long page = sysconf(_SC_PAGESIZE);
    if (hoop_comm_alloc_shared(NULL, 4096, &p) != HOOP_ERR_INVALID) h_fail(h, "NULL comm accepted");
    if (hoop_comm_alloc_shared(c, 0, &p) != HOOP_ERR_INVALID) h_fail(h, "0 bytes accepted");
    if (hoop_comm_alloc_shared(c, 4096, NULL) != HOOP_ERR_INVALID) h_fail(h, "NULL ptr accepted");
    if (alloc_seg(h, 100000, &q) != HOOP_OK) return;
    /* Zeroed, page-aligned; a direct call on it works after the rejected ones. */
    if ((uintptr_t)q % (uintptr_t)page) h_fail(h, "segment %p not page-aligned", q);
    for (size_t i = 0; i < 100000; i++)
        if (((unsigned char *)q)[i]) {
            h_fail(h, "byte %zu of a new segment is not zero", i);
            break;
        }
    char *b = q, *m = malloc(4096);
    if (!hoop_comm_is_shared(c, q, 100000)) h_fail(h, "is_shared(whole segment) = 0");
    if (!hoop_comm_is_shared(c, b + 99992, 8)) h_fail(h, "is_shared(last 8 bytes) = 0");
    if (hoop_comm_is_shared(c, b + 100000 - 8, 16 + (size_t)page * 64))
        h_fail(h, "is_shared(range crossing the end) = 1");
    if (hoop_comm_is_shared(c, b - 8, 16)) h_fail(h, "is_shared(range crossing the start) = 1");
    if (hoop_comm_is_shared(c, m, 4096)) h_fail(h, "is_shared(malloc) = 1");
    h->shared[h->rank] = q;
    pthread_barrier_wait(h->bar);
    void *peer = h->shared[(h->rank + 1) % h->n];
    if (hoop_comm_is_shared(c, peer, 64)) h_fail(h, "is_shared(another rank's segment) = 1");
    if (hoop_comm_free_shared(c, peer) != HOOP_ERR_INVALID) h_fail(h, "freed a peer's segment");
    pthread_barrier_wait(h->bar);
    if (hoop_comm_free_shared(c, m) != HOOP_ERR_INVALID) h_fail(h, "freed malloc memory");
    if (hoop_comm_free_shared(c, b + 4096) != HOOP_ERR_INVALID) h_fail(h, "freed an inner pointer");
    if (hoop_comm_free_shared(c, NULL) != HOOP_OK) h_fail(h, "free(NULL) refused");
    dcase dc = {.t = HOOP_DTYPE_U8, .op = HOOP_OP_SUM, .count = 99, .algo = HOOP_ALGO_DIRECT};
    run_dcase(h, q, 100000, &dc, 1);
    free_seg(h, q);
    if (hoop_comm_is_shared(c, q, 64)) h_fail(h, "is_shared after free = 1");
    if (hoop_comm_free_shared(c, q) != HOOP_ERR_INVALID) h_fail(h, "double free accepted");
    free(m);
}

START_TEST(test_bad_args)
{
    run_ranks(3, NULL, bad_args, NULL);
}
END_TEST

// ----------------------------------------------------------------- tcp, world size 1

static void over_tcp(h_rank *h)
{
    void *seg;
    if (alloc_seg(h, 1 << 20, &seg) != HOOP_OK) return;
    if ((uintptr_t)seg % 4096) h_fail(h, "not page-aligned");
    if (hoop_comm_is_shared(h->comm, seg, 1 << 20)) h_fail(h, "is_shared = 1 over tcp");
    dcase c = {.t = HOOP_DTYPE_F32, .op = HOOP_OP_AVG, .count = 100003, .off = 3};
    c.algo = HOOP_ALGO_DIRECT;
    run_dcase(h, seg, 1 << 20, &c, 0);
    c.algo = HOOP_ALGO_AUTO, c.t = HOOP_DTYPE_I64, c.op = HOOP_OP_SUM, c.count = 30011;
    run_dcase(h, seg, 1 << 20, &c, 0);
    free_seg(h, seg);
}

START_TEST(test_tcp)
{
    setenv("HOOP_TRANSPORT", "tcp", 1);
    run_ranks(3, NULL, over_tcp, NULL);
}
END_TEST

static void single(h_rank *h)
{
    void *seg;
    if (alloc_seg(h, 40000, &seg) != HOOP_OK) return;
    dcase c = {.t = HOOP_DTYPE_BF16, .op = HOOP_OP_AVG, .count = 19000, .off = 1};
    for (int algo = HOOP_ALGO_AUTO; algo <= (int)HOOP_ALGO_DIRECT; algo++) {
        c.algo = (hoop_algo)algo;
        run_dcase(h, seg, 40000, &c, 1);
    }
    int32_t a[5] = {1, -2, 3, -4, 5}, b[5] = {0};
    hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
    if (hoop_allreduce(h->comm, a, b, 5, HOOP_DTYPE_I32, HOOP_OP_PROD, NULL) != HOOP_OK ||
        memcmp(a, b, sizeof(a)) != 0)
        h_fail(h, "out-of-place copy: %s", hoop_last_error());
    free_seg(h, seg);
}

/* A 16-bit average whose sum overflows the type but whose mean fits, direct: 30000 in
 * f16 on every rank (the sum of 4 exceeds 65504), 3e38 in bf16 (the sum exceeds even
 * f32's range): combined in f64, the result is the mean rounded once, exactly. */
static void half_avg_direct(h_rank *h)
{
    void *seg;
    enum { COUNT = 5003 };
    if (alloc_seg(h, COUNT * 2 * (size_t)h->n, &seg) != HOOP_OK) return;
    uint16_t *x = seg;
    hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
    for (int k = 0; k < 4; k++) { /* all-reduce and reduce-scatter, f16 and bf16 */
        hoop_dtype t = k % 2 ? HOOP_DTYPE_BF16 : HOOP_DTYPE_F16;
        uint16_t v = t == HOOP_DTYPE_F16 ? to_f16(30000.0f) : to_bf16(3e38f);
        size_t total = k < 2 ? COUNT : COUNT * (size_t)h->n;
        for (size_t i = 0; i < total; i++) x[i] = v;
        hoop_status st = k < 2 ? hoop_allreduce(h->comm, x, x, COUNT, t, HOOP_OP_AVG, NULL)
                               : hoop_reduce_scatter(h->comm, x, x + (size_t)h->rank * COUNT, COUNT,
                                                     t, HOOP_OP_AVG, NULL);
        if (st != HOOP_OK) {
            h_fail(h, "%s avg: %s", hoop_dtype_name(t), hoop_last_error());
            break;
        }
        size_t base = k < 2 ? 0 : (size_t)h->rank * COUNT;
        for (size_t i = base; i < base + COUNT; i++)
            if (x[i] != v) {
                h_fail(h, "%s avg of %g (%s): element %zu = %g", hoop_dtype_name(t), get(t, &v, 0),
                       k < 2 ? "allreduce" : "reduce_scatter", i, get(t, x, i));
                break;
            }
    }
    free_seg(h, seg);
}

START_TEST(test_half_avg_direct)
{
    run_ranks(_i, NULL, half_avg_direct, NULL);
}
END_TEST

START_TEST(test_single)
{
    run_ranks(1, NULL, single, NULL);
}
END_TEST

// ----------------------------------------------------------------- failures

/* Rank 2 is killed (0), or issues its call and is killed at once (1), while the others
 * are in a direct all-reduce: they fail with HOOP_ERR_REMOTE within 3 s (in case 1 the
 * call may also complete, with the right sums). */
static void dead_peer(h_rank *h)
{
    int mode = *(int *)h->user;
    size_t count = (size_t)4 << 20;
    void *seg;
    if (alloc_seg(h, count * 4, &seg) != HOOP_OK) return;
    float *x = seg;
    for (size_t i = 0; i < count; i++) x[i] = (float)(i % 3);
    hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
    if (h->rank == 2) {
        hoop_request *req = NULL;
        if (mode == 1)
            hoop_allreduce(h->comm, x, x, count, HOOP_DTYPE_F32, HOOP_OP_SUM, &req);
        else
            usleep(100 * 1000);
        hoop__comm_kill(h->comm);
        if (req) hoop_wait(req, -1);
        return; /* the harness destroys the comm, which frees the segment */
    }
    int64_t t0 = hoop__now_ns();
    hoop_status st = hoop_allreduce(h->comm, x, x, count, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    double secs = (double)(hoop__now_ns() - t0) / 1e9;
    if (mode == 1 && st == HOOP_OK) {
        for (size_t i = 0; i < count; i++)
            if (x[i] != (float)(h->n * (int)(i % 3))) {
                h_fail(h, "completed with a wrong sum at %zu", i);
                break;
            }
    } else if (st != HOOP_ERR_REMOTE) {
        h_fail(h, "want HOOP_ERR_REMOTE, got %s: %s", hoop_status_name(st), hoop_last_error());
    } else if (!strstr(hoop_last_error(), "rank 2")) {
        h_fail(h, "the message does not name rank 2: %s", hoop_last_error());
    }
    if (secs > 3.0) h_fail(h, "took %.2f s to notice the dead peer", secs);
    free_seg(h, seg);
}

START_TEST(test_dead_peer)
{
    int mode = _i;
    run_ranks_ms(4, 20000, dead_peer, &mode);
}
END_TEST

/* Rank 2 never calls: the others time out after the comm's (short) deadline. */
static void never_calls(h_rank *h)
{
    void *seg;
    if (alloc_seg(h, 1 << 20, &seg) != HOOP_OK) return;
    /* With a late rank 1, its call completes with the failure rank 0 passes on (a
     * request reported through hoop_wait's completion path, not its own deadline). */
    if (h->rank == 1 && *(const int *)h->user) usleep(300 * 1000);
    if (h->rank != 2) {
        hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
        int64_t t0 = hoop__now_ns();
        hoop_status st = hoop_allreduce(h->comm, seg, seg, 1000, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
        double secs = (double)(hoop__now_ns() - t0) / 1e9;
        if (st != HOOP_ERR_TIMEOUT)
            h_fail(h, "want HOOP_ERR_TIMEOUT, got %s: %s", hoop_status_name(st), hoop_last_error());
        /* Rank 1 waits for rank 2's own vote and says so; rank 0 hears from the others
         * through rank 1 and reports rank 1's finding (or, failing that, that rank 1
         * relays ranks 1 and 2). */
        const char *e = hoop_last_error();
        if (!strstr(e, "the call's vote from rank 2") &&
            !(h->rank == 0 && strstr(e, "rank 1, which relays ranks 1 2")))
            h_fail(h, "the timeout does not name the missing rank: %s", e);
        if (secs > 3 || (secs < 0.45 && !(h->rank == 1 && *(const int *)h->user)))
            h_fail(h, "timed out after %.2f s (deadline 0.5 s)", secs);
    }
    pthread_barrier_wait(h->bar);
    /* A timed-out call may still be with the progress thread: free is then refused, and
     * destroying the comm releases the memory. */
    hoop_status st = hoop_comm_free_shared(h->comm, seg);
    if (st != HOOP_OK && st != HOOP_ERR_USAGE)
        h_fail(h, "free_shared after a timeout: %s: %s", hoop_status_name(st), hoop_last_error());
}

/* Freeing memory with an all-reduce on it in flight is refused (HOOP_ERR_USAGE), not a
 * use-after-free in the progress thread; after the wait it succeeds. */
static void free_in_flight(h_rank *h)
{
    void *seg;
    hoop_request *req;
    if (alloc_seg(h, 1 << 20, &seg) != HOOP_OK) return;
    float *x = seg;
    for (int i = 0; i < 4096; i++) x[i] = (float)(h->rank + i);
    if (h->rank == 0) usleep(100 * 1000); /* the others' calls stay in flight meanwhile */
    if (hoop_allreduce(h->comm, seg, seg, 4096, HOOP_DTYPE_F32, HOOP_OP_SUM, &req) != HOOP_OK) {
        h_fail(h, "allreduce: %s", hoop_last_error());
        return;
    }
    hoop_status st = hoop_comm_free_shared(h->comm, seg);
    if (h->rank != 0 && st != HOOP_ERR_USAGE)
        h_fail(h, "free_shared with a call in flight: want HOOP_ERR_USAGE, got %s",
               hoop_status_name(st));
    if (st == HOOP_ERR_USAGE && !strstr(hoop_last_error(), "in flight"))
        h_fail(h, "the refusal does not say why: %s", hoop_last_error());
    if (hoop_wait(req, -1) != HOOP_OK) h_fail(h, "wait: %s", hoop_last_error());
    float want = (float)(h->n * (h->n - 1) / 2 + h->n * 4095);
    if (st == HOOP_ERR_USAGE && x[4095] != want) h_fail(h, "x[4095] = %g, want %g", x[4095], want);
    if (st == HOOP_ERR_USAGE) free_seg(h, seg);
}

START_TEST(test_free_in_flight)
{
    run_ranks_ms(2 + _i, 20000, free_in_flight, NULL);
}
END_TEST

START_TEST(test_never_calls)
{
    int late = _i;
    run_ranks_ms(3, 500, never_calls, &late);
}
END_TEST

// ----------------------------------------------------------------- leaks

static void leaks(h_rank *h)
{
    char line[512];
    void *a, *b;
    if (alloc_seg(h, 3 << 20, &a) != HOOP_OK || alloc_seg(h, 5000, &b) != HOOP_OK) return;
    pthread_barrier_wait(h->bar);
    if (h->rank == 0) {
        const char *f = new_shm_file(h->user);
        if (f) h_fail(h, "%s is still in /dev/shm after alloc_shared returned", f);
        if (maps_named_shm(line, sizeof(line))) h_fail(h, "mapped and still named: %s", line);
    }
    pthread_barrier_wait(h->bar);
    dcase c = {.t = HOOP_DTYPE_I32, .op = HOOP_OP_SUM, .count = 700000, .algo = HOOP_ALGO_AUTO};
    run_dcase(h, a, 3 << 20, &c, 1);
    free_seg(h, b); /* a is left for destroy */
}

START_TEST(test_leaks)
{
    static char before[8192];
    char line[512];
    shm_names(before, sizeof(before));
    int fds = open_fds();
    for (int k = 0; k < 3; k++) run_ranks(2 + k, NULL, leaks, before);
    ck_assert_int_eq(open_fds(), fds);
    const char *f = new_shm_file(before);
    ck_assert_msg(f == NULL, "%s left in /dev/shm after destroy", f);
    ck_assert_msg(!maps_named_shm(line, sizeof(line)), "still mapped: %s", line);
}
END_TEST

// ----------------------------------------------------------------- a small /dev/shm

/* One of two thread-ranks in the child of test_small_shm. */
typedef struct small_rank {
    hoop_rendezvous *rv;
    int rank, ok;
} small_rank;

static void *small_main(void *arg)
{
    small_rank *f = arg;
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    hoop_comm *comm;
    void *p = NULL;
    size_t bytes = (size_t)6 << 20, count = bytes / 4;
    cfg.rank = f->rank, cfg.world_size = 2, cfg.rendezvous = f->rv, cfg.timeout_ms = 20000;
    if (hoop_comm_init(&comm, &cfg) != HOOP_OK) return NULL;
    hoop_status st = hoop_comm_alloc_shared(comm, bytes, &p);
    if (st == HOOP_OK) {
        float *x = p;
        for (size_t i = 0; i < count; i++) x[i] = (float)(f->rank + 1); /* SIGBUS if unbacked */
        st = hoop_allreduce(comm, x, x, count, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
        f->ok = st == HOOP_OK;
        for (size_t i = 0; i < count && f->ok; i++) f->ok = x[i] == 3.0f;
        f->ok = hoop_comm_free_shared(comm, p) == HOOP_OK && f->ok;
    } else {
        f->ok = st == HOOP_ERR_NOMEM || st == HOOP_ERR_SYSTEM;
    }
    if (!f->ok)
        fprintf(stderr, "rank %d: %s: %s\n", f->rank, hoop_status_name(st), hoop_last_error());
    f->ok = hoop_comm_destroy(comm) == HOOP_OK && f->ok;
    return NULL;
}

/* In a private mount namespace with an 8 MiB /dev/shm, two ranks ask for 6 MiB each. */
static int small_shm_child(void)
{
    if (unshare(CLONE_NEWNS) != 0) return 77;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=8m") != 0)
        return 77;
    small_rank f[2] = {{.rank = 0}, {.rank = 1}};
    pthread_t th[2];
    if (hoop_rendezvous_new(&f[0].rv, 2) != HOOP_OK) return 2;
    f[1].rv = f[0].rv;
    for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, small_main, &f[r]);
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    hoop_rendezvous_free(f[0].rv);
    return f[0].ok && f[1].ok ? 0 : 1;
}

/* Segments that /dev/shm cannot hold: alloc_shared fails (NOMEM/SYSTEM) or falls back to
 * memory that works; it must not hand out pages that raise SIGBUS when first touched. */
START_TEST(test_small_shm)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) _exit(small_shm_child());
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
        printf("SKIP: test_small_shm: cannot mount a private /dev/shm (needs CAP_SYS_ADMIN)\n");
        return;
    }
    ck_assert_msg(!WIFSIGNALED(status), "the ranks died of signal %d (%s) touching their segments",
                  WIFSIGNALED(status) ? WTERMSIG(status) : 0,
                  WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "");
    ck_assert_msg(WEXITSTATUS(status) == 0, "the ranks failed (see stderr)");
}
END_TEST

// ----------------------------------------------------------------- processes

/* The exact sum of iteration it at element i (rank r contributes r + i % 5 + it). */
static float proc_sum(int n, size_t i, int it)
{
    return (float)((size_t)n * (size_t)(n - 1) / 2 + (size_t)n * (i % 5 + (size_t)it));
}

/* One direct all-reduce of iteration it in a worker process; rank victim raises SIGKILL
 * before its call (early) or right after issuing it (iteration 1). Returns 0 when the
 * call passed, 1 when it failed as the victim's death allows, -1 on a real failure. */
static int proc_call(hoop_comm *comm, float *x, size_t count, int it, int victim, int early)
{
    int rank = hoop_comm_rank(comm), n = hoop_comm_world_size(comm);
    hoop_request *req;
    for (size_t i = 0; i < count; i++) x[i] = (float)((size_t)rank + i % 5 + (size_t)it);
    if (rank == victim && early) raise(SIGKILL);
    uint64_t b0 = hoop_comm_bytes_sent(comm);
    int64_t t0 = hoop__now_ns();
    hoop_status st = hoop_allreduce(comm, x, x, count, HOOP_DTYPE_F32, HOOP_OP_SUM, &req);
    if (rank == victim && it == 1) raise(SIGKILL);
    if (st == HOOP_OK) st = hoop_wait(req, -1);
    double secs = (double)(hoop__now_ns() - t0) / 1e9;
    uint64_t sent = hoop_comm_bytes_sent(comm) - b0;
    /* Iteration 0 too: the victim dies in iteration 1 once its own iteration 0 is done,
     * but a peer's report of that death can reach a rank still awaiting the victim's last
     * departure token of iteration 0 (on another link, so in either order); the comm then
     * fails that call, conservatively (seen 1 run in 12). */
    if (st == HOOP_ERR_REMOTE && victim >= 0 && secs < 3.0 && strstr(hoop_last_error(), "rank 2"))
        return 1;
    if (st != HOOP_OK || sent >= TOKEN_BYTES) {
        fprintf(stderr, "rank %d iteration %d: %s after %.2f s, %llu bytes sent: %s\n", rank, it,
                hoop_status_name(st), secs, (unsigned long long)sent, hoop_last_error());
        return -1;
    }
    for (size_t i = 0; i < count; i++)
        if (x[i] != proc_sum(n, i, it)) {
            fprintf(stderr, "rank %d iteration %d: x[%zu] = %g, want %g\n", rank, it, i, x[i],
                    proc_sum(n, i, it));
            return -1;
        }
    return 0;
}

/* One worker process of test_processes; returns its exit code (0 = every check passed). */
static int worker(int rank, int n, int port, int victim, int early)
{
    hoop_comm *comm;
    size_t count = (size_t)1 << 20;
    void *seg = NULL;
    char line[512];
    h_set_env(rank, n, port, "check-direct", "20");
    if (hoop_comm_init_env(&comm) != HOOP_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, hoop_last_error());
        return 2;
    }
    hoop_status st = hoop_comm_alloc_shared(comm, count * 4, &seg);
    /* The victim may die as soon as its own alloc_shared returned, while a peer is still
     * finishing the last collective inside it: that peer then fails there, naming it. */
    if (st == HOOP_ERR_REMOTE && victim >= 0 && strstr(hoop_last_error(), "rank 2"))
        return hoop_comm_destroy(comm) == HOOP_OK ? 0 : 1;
    if (st != HOOP_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, hoop_last_error());
        hoop_comm_destroy(comm);
        return 2;
    }
    int ok = hoop_comm_is_shared(comm, seg, count * 4), failed = 0;
    if (!ok) fprintf(stderr, "rank %d: is_shared = 0 between processes\n", rank);
    hoop_comm_set_algo(comm, HOOP_ALGO_DIRECT);
    for (int it = 0; it < 3 && ok && !failed; it++) {
        int r = proc_call(comm, seg, count, it, victim, early);
        ok = r >= 0, failed = r == 1;
        /* Once a call has passed, every rank has returned from alloc_shared, so every
         * name is unlinked (before that a peer may not have come to unlink its own). */
        if (ok && !failed && it == 0 && maps_named_shm(line, sizeof(line)))
            fprintf(stderr, "rank %d: mapped and still named: %s", rank, line), ok = 0;
    }
    if (ok && victim >= 0 && !failed) {
        fprintf(stderr, "rank %d: never saw rank %d die\n", rank, victim);
        ok = 0;
    }
    ok = hoop_comm_free_shared(comm, seg) == HOOP_OK && ok;
    return (hoop_comm_destroy(comm) == HOOP_OK && ok) ? 0 : 1;
}

/* _i = 0: 3 healthy processes; 1: rank 2 of 4 killed before its call; 2: killed in it. */
START_TEST(test_processes)
{
    int n = _i ? 4 : 3, port = h_free_port(), victim = _i ? 2 : -1;
    pid_t pid[4];
    for (int r = 0; r < n; r++) {
        pid[r] = fork();
        ck_assert_int_ge(pid[r], 0);
        if (pid[r] == 0) _exit(worker(r, n, port, victim, _i == 1));
    }
    for (int r = 0; r < n; r++) {
        int status;
        ck_assert_int_eq(waitpid(pid[r], &status, 0), pid[r]);
        if (r == victim)
            ck_assert(WIFSIGNALED(status));
        else
            ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d failed", r);
    }
}
END_TEST

/* Rank 0 is SIGKILLed inside alloc_shared while rank 1 is late (a launcher tearing a job
 * down during start-up): rank 1 fails with HOOP_ERR_REMOTE, and rank 0's object must not
 * outlive it in /dev/shm (beyond the spec's "after alloc_shared returns", but a named
 * object that nobody unlinks holds its RAM until reboot). */
/* _i = 0: rank 1 is late, rank 0 is killed while it waits. _i = 1..3: both present, 256 MiB
 * each (reserving the pages takes tens of ms), rank 0 killed 60, 120 or 180 ms after both
 * have their communicator (they say so through a pipe: on a loaded machine set-up alone
 * can take longer than that): inside the swap of records, whatever the timing (rank 1
 * may also have finished: OK). */
START_TEST(test_killed_in_alloc)
{
    static char before[8192];
    char path[400], ready[2];
    int port = h_free_port(), pfd[2];
    pid_t pid[2];
    shm_names(before, sizeof(before));
    ck_assert_int_eq(pipe(pfd), 0);
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        ck_assert_int_ge(pid[r], 0);
        if (pid[r] == 0) {
            hoop_comm *comm;
            void *p;
            close(pfd[0]);
            h_set_env(r, 2, port, "check-direct", "20");
            if (hoop_comm_init_env(&comm) != HOOP_OK) _exit(2);
            if (write(pfd[1], "r", 1) != 1) _exit(3);
            if (r == 1 && _i == 0) usleep(800 * 1000);
            hoop_status st = hoop_comm_alloc_shared(comm, _i ? 256u << 20 : 1u << 20, &p);
            int fine = st == HOOP_ERR_REMOTE || (_i && st == HOOP_OK);
            if (!fine) fprintf(stderr, "rank %d: alloc_shared: %s\n", r, hoop_last_error());
            hoop_comm_destroy(comm);
            _exit(fine ? 0 : 1);
        }
    }
    close(pfd[1]);
    for (size_t got = 0; got < 2;) { /* both ranks have their communicator */
        ssize_t k = read(pfd[0], ready + got, 2 - got);
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(pfd[0]);
    usleep(_i ? 60 * 1000 * (useconds_t)_i : 400 * 1000);
    kill(pid[0], SIGKILL);
    int status;
    for (int r = 0; r < 2; r++) ck_assert_int_eq(waitpid(pid[r], &status, 0), pid[r]);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "rank 1 did not get HOOP_ERR_REMOTE");
    const char *f = new_shm_file(before);
    if (f) { /* clean up what the test provoked, then fail */
        snprintf(path, sizeof(path), "/dev/shm%.*s", (int)strlen(f) - 1, f);
        unlink(path);
    }
    ck_assert_msg(f == NULL, "%s left behind by a rank killed inside alloc_shared", f ? path : "");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("direct");
    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 120);
    tcase_add_loop_test(core, test_sweep, 2, 6);
    tcase_add_loop_test(core, test_big, 2, 6);
    tcase_add_loop_test(core, test_random_floats, 3, 6);
    tcase_add_loop_test(core, test_blocks, 2, 6);
    tcase_add_test(core, test_block_mismatch);
    tcase_add_test(core, test_choice);
    tcase_add_test(core, test_env_algo);
    tcase_add_test(core, test_single);
    tcase_add_loop_test(core, test_half_avg_direct, 2, 6);
    tcase_add_test(core, test_tcp);
    suite_add_tcase(s, core);
    TCase *races = tcase_create("races");
    tcase_set_timeout(races, 120);
    tcase_add_loop_test(races, test_iterations, 2, 6);
    tcase_add_loop_test(races, test_interleave, 2, 5);
    tcase_add_test(races, test_churn);
    tcase_add_loop_test(races, test_late_peer, 0, 2);
    suite_add_tcase(s, races);
    TCase *errors = tcase_create("errors");
    tcase_set_timeout(errors, 60);
    tcase_add_loop_test(errors, test_mismatch, 0, 5);
    tcase_add_test(errors, test_alloc_mismatch);
    tcase_add_test(errors, test_alloc_too_big);
    tcase_add_test(errors, test_bad_args);
    tcase_add_loop_test(errors, test_dead_peer, 0, 2);
    tcase_add_loop_test(errors, test_never_calls, 0, 2);
    tcase_add_loop_test(errors, test_free_in_flight, 0, 2);
    tcase_add_test(errors, test_leaks);
    tcase_add_test(errors, test_small_shm);
    tcase_add_loop_test(errors, test_processes, 0, 3);
    tcase_add_loop_test(errors, test_killed_in_alloc, 0, 4);
    suite_add_tcase(s, errors);
    return s;
}

int main(void)
{
    setenv("HOOP_TRANSPORT", "auto", 1);
    unsetenv("HOOP_ALGO");
    /* The second pass runs the DIRECT steps' reductions and copies on the async memory
     * table (src/collectives/memops.h): each finishes only after it was polled once. */
    int failed = 0;
    for (int k = 0; k < 2; k++) {
        printf("memory operations %s:\n", k ? "async" : "sync");
        setenv("HOOP_MEMOPS", k ? "async" : "sync", 1);
        failed += suite_failures(suite());
    }
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
