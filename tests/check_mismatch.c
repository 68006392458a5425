/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_mismatch.c -- a call that differs on one rank fails on EVERY rank.
 *
 * For world sizes 2..8, every position of the odd rank and every collective (the
 * all-reduce under each algorithm, direct included, broadcast, reduce, all-gather and
 * reduce-scatter, their direct forms, a barrier against an all-reduce), one rank passes
 * another count than the others (2N against N, or a one-element call against a large
 * one: a metric's all-reduce against a gradient bucket's). Each rank must return
 * HOOP_ERR_MISMATCH, with a message naming two different calls, well before the
 * communicator's timeout; none may return HOOP_OK. And the correct call before a
 * mismatched one succeeds on every rank, however far behind a rank is.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll_harness.h"
#include "run_suite.h"

enum {
    K_AR_RING,
    K_AR_RD,
    K_AR_RHD,
    K_AR_DIRECT,
    K_BCAST,
    K_REDUCE,
    K_ALLGATHER,
    K_REDUCE_SCATTER,
    K_AG_DIRECT,
    K_RS_DIRECT,
    K_BARRIER,
    K_COUNT
};
static const char *kind_name[K_COUNT] = {
    "allreduce/ring", "allreduce/rd", "allreduce/rhd",  "allreduce/direct", "broadcast",
    "reduce",         "allgather",    "reduce_scatter", "allgather/direct", "reduce_scatter/direct",
    "barrier"};

typedef struct mm_case {
    int kind, odd;
    size_t count, odd_count;
} mm_case;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int is_direct(int kind)
{
    return kind == K_AR_DIRECT || kind == K_AG_DIRECT || kind == K_RS_DIRECT;
}

/* Issues this rank's call of case c on buf (bytes large enough for n x count floats). */
static hoop_status call(h_rank *h, const mm_case *c, float *buf, float *out, size_t count)
{
    hoop_comm *comm = h->comm;
    int n = h->n, r = h->rank;
    switch (c->kind) {
    case K_AR_RING:
    case K_AR_RD:
    case K_AR_RHD: return hoop_allreduce(comm, buf, out, count, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    case K_AR_DIRECT:
        return hoop_allreduce(comm, buf, buf, count, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    case K_BCAST: return hoop_broadcast(comm, buf, out, count, HOOP_DTYPE_F32, 0, NULL);
    case K_REDUCE: return hoop_reduce(comm, buf, out, count, HOOP_DTYPE_F32, HOOP_OP_SUM, 0, NULL);
    case K_ALLGATHER: return hoop_allgather(comm, buf, out, count, HOOP_DTYPE_F32, NULL);
    case K_REDUCE_SCATTER:
        return hoop_reduce_scatter(comm, buf, out, count, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    case K_AG_DIRECT:
        return hoop_allgather(comm, buf + (size_t)r * count, buf, count, HOOP_DTYPE_F32, NULL);
    case K_RS_DIRECT:
        return hoop_reduce_scatter(comm, buf, buf + (size_t)r * count, count, HOOP_DTYPE_F32,
                                   HOOP_OP_SUM, NULL);
    default:
        /* The odd rank calls a one-element all-reduce where the others call a barrier. */
        if (r == ((const mm_case *)h->user)->odd)
            return hoop_allreduce(comm, buf, out, 1, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
        (void)n;
        return hoop_barrier(comm, NULL);
    }
}

static void one_case(h_rank *h)
{
    const mm_case *c = h->user;
    size_t count = h->rank == c->odd ? c->odd_count : c->count;
    size_t most = c->count > c->odd_count ? c->count : c->odd_count;
    size_t bytes = (size_t)h->n * most * sizeof(float) + 64;
    float *buf = NULL, *out = NULL;
    hoop_algo algo = c->kind == K_AR_RD    ? HOOP_ALGO_RD
                     : c->kind == K_AR_RHD ? HOOP_ALGO_RHD
                     : is_direct(c->kind)  ? HOOP_ALGO_DIRECT
                                           : HOOP_ALGO_RING;
    if (is_direct(c->kind)) {
        hoop_status st = hoop_comm_alloc_shared(h->comm, bytes, (void **)&buf);
        /* The allocation (correct calls) succeeds even on a rank still finishing it when
         * its peers, done with it, find the next call mismatched (test_correct_then_...). */
        if (st != HOOP_OK || !hoop_comm_is_shared(h->comm, buf, bytes)) {
            h_fail(h, "alloc_shared: %s: %s", hoop_status_name(st), hoop_last_error());
            return;
        }
    } else {
        buf = calloc(1, bytes);
    }
    out = calloc(1, bytes);
    for (size_t i = 0; i < bytes / sizeof(float); i++) buf[i] = (float)(h->rank + 1);
    hoop_comm_set_algo(h->comm, algo);
    double t0 = now_s();
    hoop_status st = call(h, c, buf, out, count);
    double dt = now_s() - t0;
    const char *msg = hoop_last_error();
    if (st == HOOP_OK)
        h_fail(h,
               "%s, odd rank %d: returned HOOP_OK (count %zu) while another rank called "
               "with another count",
               kind_name[c->kind], c->odd, count);
    else if (st != HOOP_ERR_MISMATCH)
        h_fail(h, "%s, odd rank %d: want HOOP_ERR_MISMATCH, got %s after %.2f s: %s",
               kind_name[c->kind], c->odd, hoop_status_name(st), dt, msg);
    else if (!strstr(msg, "called") || !strstr(msg, " but rank ") ||
             (c->kind == K_BARRIER && !strstr(msg, "called barrier() #")))
        h_fail(h, "%s, odd rank %d: the message does not name both calls: %s", kind_name[c->kind],
               c->odd, msg);
    else if (dt > 3.0)
        h_fail(h, "%s, odd rank %d: the mismatch took %.2f s to be reported", kind_name[c->kind],
               c->odd, dt);
    /* Nothing runs on a failed comm; free_shared may refuse if a peer still holds it. */
    if (is_direct(c->kind))
        hoop_comm_free_shared(h->comm, buf);
    else
        free(buf);
    free(out);
}

static void run_case(int n, int kind, int odd, size_t count, size_t odd_count)
{
    mm_case c = {.kind = kind, .odd = odd, .count = count, .odd_count = odd_count};
    run_ranks_ms(n, 10000, one_case, &c);
}

/* Every position of the odd rank, every collective, on _i ranks: 2N against N. */
START_TEST(test_every_position)
{
    int n = _i;
    for (int kind = 0; kind < K_COUNT; kind++)
        for (int odd = 0; odd < n; odd++) run_case(n, kind, odd, 48, 96);
}
END_TEST

/* A metric's one-element all-reduce against a bucket's large one (the uneven-batch
 * job), repeated: the race the header-to-next-only scheme lost now and then. */
START_TEST(test_metric_against_bucket)
{
    for (int rep = 0; rep < 6; rep++) {
        for (int odd = 0; odd < 3; odd++) run_case(3, K_AR_RING, odd, 1, 300000);
        for (int odd = 0; odd < 3; odd++) run_case(3, K_AR_RING, odd, 300000, 1);
    }
    for (int odd = 0; odd < 5; odd++) run_case(5, K_AR_DIRECT, odd, 1, 70000);
}
END_TEST

/* A correct call followed by a mismatched one: the correct call succeeds, with the right
 * sums, on EVERY rank, even on a rank still finishing it when the others, done with it,
 * find the next call mismatched and fail the comm (skewed ranks make that likely). Only
 * the mismatched call fails. */
static void then_mismatch(h_rank *h)
{
    const mm_case *c = h->user;
    size_t n = c->count;
    float *a = calloc(2 * n + 1, sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = (float)(h->rank + 1);
    if (h->rank != c->odd) usleep((useconds_t)(1500 * (h->rank % 3)));
    hoop_status s1 = hoop_allreduce(h->comm, a, a, n, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    char e1[512];
    snprintf(e1, sizeof(e1), "%s", hoop_last_error());
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += a[i] != (float)(h->n * (h->n + 1) / 2);
    hoop_status s2 = hoop_allreduce(h->comm, a, a, h->rank == c->odd ? 2 * n : n, HOOP_DTYPE_F32,
                                    HOOP_OP_SUM, NULL);
    if (s1 != HOOP_OK || wrong)
        h_fail(h, "the correct call #0 (odd rank %d, count %zu): %s, %zu wrong: %s", c->odd, n,
               hoop_status_name(s1), wrong, e1);
    else if (s2 != HOOP_ERR_MISMATCH)
        h_fail(h, "the mismatched call #1: %s: %s", hoop_status_name(s2), hoop_last_error());
    free(a);
}

START_TEST(test_correct_then_mismatch)
{
    for (int rep = 0; rep < 3; rep++)
        for (int odd = 0; odd < _i; odd++)
            for (int k = 0; k < 2; k++) {
                mm_case c = {.odd = odd, .count = k ? 100000 : 1};
                run_ranks_ms(_i, 10000, then_mismatch, &c);
            }
}
END_TEST

/* Two threads of each rank issuing all-reduces on its one comm at once (against
 * collectives.h's "one thread issues collectives on a given comm at a time"): calls of
 * the same signature are numbered in a different order on different ranks, and each
 * succeeded with the other thread's data (about 1,200 of 2,000 per thread, silently).
 * The second thread to enter a call is caught: its call fails with HOOP_ERR_USAGE
 * naming both calls, the comm fails, and so does every rank's, within the comm's
 * timeout. (A call paired wrongly in the moment before the catch may still have
 * completed: what is asserted is that the misuse is caught and the job stops, not that
 * no value was wrong.) */
typedef struct issuer_arg {
    h_rank *h;
    int t, calls;
    hoop_status last;
    char msg[512];
} issuer_arg;

static void *issue_many(void *p)
{
    issuer_arg *a = p;
    float buf[256];
    for (a->calls = 0; a->calls < 2000; a->calls++) {
        for (int i = 0; i < 256; i++) buf[i] = (float)((a->t + 1) * 1000);
        a->last = hoop_allreduce(a->h->comm, buf, buf, 256, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
        if (a->last != HOOP_OK) {
            snprintf(a->msg, sizeof(a->msg), "%s", hoop_last_error());
            break;
        }
    }
    return NULL;
}

static void two_issuers(h_rank *h)
{
    issuer_arg args[2] = {{.h = h, .t = 0}, {.h = h, .t = 1}};
    pthread_t th[2];
    for (int t = 0; t < 2; t++) pthread_create(&th[t], NULL, issue_many, &args[t]);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    int *caught = h->user;
    for (int t = 0; t < 2; t++) {
        if (args[t].last == HOOP_OK) {
            h_fail(h, "thread %d made all %d calls: the comm never failed", t, args[t].calls);
            return;
        }
        if (args[t].last == HOOP_ERR_USAGE &&
            strstr(args[t].msg, "two threads issued collectives on one communicator at once "
                                "(hoop_allreduce, while another thread was in hoop_allreduce)"))
            __atomic_fetch_add(caught, 1, __ATOMIC_RELAXED);
        /* a peer that heard of it says why, not only that the rank aborted */
        else if (args[t].last == HOOP_ERR_USAGE &&
                 !strstr(args[t].msg, "two of its threads issued collectives on the "
                                      "communicator at once (HOOP_ERR_USAGE; see rank "))
            h_fail(h, "thread %d: %s", t, args[t].msg);
    }
    /* the comm stays failed: a later call from the rank's own thread fails too */
    float x = 1;
    if (hoop_allreduce(h->comm, &x, &x, 1, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL) == HOOP_OK)
        h_fail(h, "a call after the misuse succeeded");
}

START_TEST(test_two_issuing_threads)
{
    for (int n = 2; n <= 3; n++) {
        int caught = 0;
        run_ranks_ms(n, 10000, two_issuers, &caught);
        ck_assert_msg(caught > 0, "%d ranks: no thread was told HOOP_ERR_USAGE", n);
    }
}
END_TEST

int main(void)
{
    /* Hundreds of communicators come and go: small rings keep each set-up cheap. */
    setenv("HOOP_SHM_BYTES", "64K", 0);
    Suite *s = suite_create("mismatch");
    TCase *tc = tcase_create("every_rank_fails");
    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, test_every_position, 2, H_MAX_RANKS + 1);
    tcase_add_test(tc, test_metric_against_bucket);
    tcase_add_loop_test(tc, test_correct_then_mismatch, 3, H_MAX_RANKS + 1);
    tcase_add_test(tc, test_two_issuing_threads);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
