/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_ring.c -- the ring moves exactly the bandwidth-optimal number of bytes.
 *
 * Two levels: the schedule alone (no network: sum the SEND steps of every rank for
 * world sizes up to 64) and the real thing (thread-ranks over loopback, counting the
 * payload bytes each rank's communicator sent). All-reduce must send 2(n-1)/n x N bytes
 * per rank, reduce-scatter and all-gather (n-1)/n x N, each within one chunk.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "collectives/coll.h"
#include "coll_harness.h"
#include "run_suite.h"

static double sched_sent(hoop__sched_fn fn, hoop__coll coll, int rank, int n, size_t count,
                         size_t chunk)
{
    hoop__coll_args a = {.coll = coll,
                         .count = count,
                         .dtype = HOOP_DTYPE_F32,
                         .rank = rank,
                         .world_size = n,
                         .elem = 4,
                         .chunk_bytes = chunk};
    static float dummy[1];
    a.sendbuf = dummy, a.recvbuf = dummy + 1; /* out-of-place */
    hoop__sched s = {0};
    ck_assert_int_eq(fn(&a, &s), HOOP_OK);
    double sent = 0;
    for (size_t i = 0; i < s.n; i++)
        if (s.steps[i].kind == HOOP__STEP_SEND) sent += (double)s.steps[i].bytes;
    hoop__sched_free(&s);
    return sent;
}

START_TEST(test_schedule_bytes)
{
    static const int sizes[] = {2, 3, 4, 7, 8, 16, 64};
    size_t count = 1000003, chunk = 65536;
    double N = (double)count * 4;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        int n = sizes[k];
        for (int r = 0; r < n; r++) {
            double ar = sched_sent(hoop__allreduce_ring, HOOP__COLL_ALLREDUCE, r, n, count, chunk);
            ck_assert_msg(fabs(ar - 2.0 * (n - 1) / n * N) <= chunk, "n=%d rank %d sent %.0f", n, r,
                          ar);
            double ag =
                sched_sent(hoop__allgather_ring, HOOP__COLL_ALLGATHER, r, n, count / n, chunk);
            ck_assert(fabs(ag - (double)(n - 1) * (count / n) * 4) <= chunk);
            double rs = sched_sent(hoop__reduce_scatter_ring, HOOP__COLL_REDUCE_SCATTER, r, n,
                                   count / n, chunk);
            ck_assert(fabs(rs - (double)(n - 1) * (count / n) * 4) <= chunk);
        }
    }
}
END_TEST

/* Over 2^31 elements (8 GiB of f32, never allocated): offsets and sizes stay size_t,
 * the steps reach exactly the end of the buffer, and each rank still sends and receives
 * 2(n-1)/n x N bytes. */
START_TEST(test_schedule_huge)
{
    size_t count = ((size_t)1 << 31) + 3, chunk = 16 << 20, N = count * 4;
    int n = 3;
    for (int r = 0; r < n; r++) {
        hoop__coll_args a = {.coll = HOOP__COLL_ALLREDUCE,
                             .count = count,
                             .dtype = HOOP_DTYPE_F32,
                             .rank = r,
                             .world_size = n,
                             .elem = 4,
                             .chunk_bytes = chunk};
        static float dummy[1];
        a.sendbuf = a.recvbuf = dummy;
        hoop__sched s = {0};
        ck_assert_int_eq(hoop__allreduce_ring(&a, &s), HOOP_OK);
        size_t sent = 0, recvd = 0, end = 0;
        for (size_t i = 0; i < s.n; i++) {
            const hoop__step *st = &s.steps[i];
            if (st->off + st->bytes > end) end = st->off + st->bytes;
            if (st->kind == HOOP__STEP_SEND)
                sent += st->bytes;
            else
                recvd += st->bytes;
        }
        hoop__sched_free(&s);
        ck_assert_uint_eq(end, N);
        ck_assert(fabs((double)sent - 2.0 * (n - 1) / n * (double)N) <= (double)chunk);
        ck_assert(fabs((double)recvd - 2.0 * (n - 1) / n * (double)N) <= (double)chunk);
    }
}
END_TEST

static void measure(h_rank *h)
{
    size_t count = 1000003, N = count * 4, chunk = *(size_t *)h->user;
    float *x = calloc(count, sizeof(float));
    int n = h->n;
    hoop_comm_set_algo(h->comm, HOOP_ALGO_RING);
    uint64_t before = hoop_comm_bytes_sent(h->comm);
    if (hoop_allreduce(h->comm, x, x, count, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL) != HOOP_OK)
        h_fail(h, "allreduce: %s", hoop_last_error());
    double sent = (double)(hoop_comm_bytes_sent(h->comm) - before);
    double want = 2.0 * (n - 1) / n * (double)N;
    if (fabs(sent - want) > (double)chunk)
        h_fail(h, "sent %.0f bytes, want %.0f +- %zu", sent, want, chunk);
    free(x);
}

START_TEST(test_measured_bytes)
{
    static const int sizes[] = {2, 3, 4, 6};
    size_t chunk = 128 << 10;
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.chunk_bytes = chunk;
    run_ranks(sizes[_i], &cfg, measure, &chunk);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ring");
    TCase *tc = tcase_create("bytes");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_schedule_bytes);
    tcase_add_test(tc, test_schedule_huge);
    tcase_add_loop_test(tc, test_measured_bytes, 0, 4);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
