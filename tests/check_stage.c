/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_stage.c -- src/collectives/stage.c: staged sends and receives through the
 * comm's fixed pool of stage slots (HOOP_MEMOPS=staged: host buffers go the way a GPU's
 * do, with every copy done by a helper thread and polled).
 *
 * Every collective and all-reduce algorithm on buffers many times the pool (2 slots x one
 * chunk), over tcp and over shm rings smaller than a chunk (a send completes only as its
 * receiver drains it, so a slot held by a send waits for the peer for real), against
 * exact references computed here (small integers in f32: every order of summation gives
 * the same bits). Each rank then asserts that the pool stayed slots x chunk bytes and
 * that no call held more slots than there are; with 8 slots a large all-reduce holds at
 * least 4 at once (chunks in flight). Bad HOOP_STAGE_SLOTS values fail hoop_comm_init
 * naming the setting.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_harness.h"
#include "collectives/comm.h"
#include "run_suite.h"

#define CHUNK_TCP (8 << 10)
#define CHUNK_SHM (128 << 10) /* more than the 64 KiB shm ring */

/* Rank r's value at element i (1..5). */
static float val(int r, size_t i)
{
    return (float)(((size_t)r * 3 + i) % 5 + 1);
}

static float sum_at(int n, size_t i)
{
    float s = 0;
    for (int r = 0; r < n; r++) s += val(r, i);
    return s;
}

typedef struct scase {
    int coll; /* 0 allreduce, 1 broadcast, 2 reduce, 3 allgather, 4 reduce-scatter */
    hoop_algo algo;
    int inplace;
} scase;

static const char *const coll_names[] = {"allreduce", "broadcast", "reduce", "allgather",
                                         "reduce_scatter"};

/* The exact value of element i of rank h's result, or -1 where the call leaves it unset
 * (reduce on a rank other than the root). */
static float want(const h_rank *h, const scase *c, size_t count, size_t i)
{
    int n = h->n, root = n - 1;
    switch (c->coll) {
    case 0: return sum_at(n, i);
    case 1: return val(1 % n, i);
    case 2: return h->rank == root ? sum_at(n, i) : -1.0f;
    case 3: return val((int)(i / count), i % count);
    default: return sum_at(n, (size_t)h->rank * count + i);
    }
}

static hoop_status call(h_rank *h, const scase *c, const float *s, float *r, size_t count)
{
    switch (c->coll) {
    case 0: return hoop_allreduce(h->comm, s, r, count, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    case 1: return hoop_broadcast(h->comm, s, r, count, HOOP_DTYPE_F32, 1 % h->n, NULL);
    case 2: return hoop_reduce(h->comm, s, r, count, HOOP_DTYPE_F32, HOOP_OP_SUM, h->n - 1, NULL);
    case 3: return hoop_allgather(h->comm, s, r, count, HOOP_DTYPE_F32, NULL);
    default: return hoop_reduce_scatter(h->comm, s, r, count, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    }
}

static void run_case(h_rank *h, const scase *c, size_t count)
{
    size_t n = (size_t)h->n;
    size_t sc = c->coll == 4 ? count * n : count, rc = c->coll == 3 ? count * n : count;
    float *s = malloc(sc * sizeof(float)), *r = malloc(rc * sizeof(float));
    for (size_t i = 0; i < sc; i++) s[i] = val(h->rank, i);
    for (size_t i = 0; i < rc; i++) r[i] = -1.0f;
    if (c->inplace) memcpy(r, s, sc * sizeof(float)); /* allreduce only: sc == rc */
    hoop_comm_set_algo(h->comm, c->algo);
    hoop_status st = call(h, c, c->inplace ? r : s, r, count);
    if (st != HOOP_OK) {
        h_fail(h, "%s (%s%s): %s", coll_names[c->coll], hoop_algo_name(c->algo),
               c->inplace ? ", in place" : "", hoop_last_error());
    } else {
        size_t wrong = 0, first = 0;
        for (size_t i = 0; i < rc; i++) {
            float w = want(h, c, count, i);
            if (w >= 0 && memcmp(&r[i], &w, sizeof(w)) != 0 && wrong++ == 0) first = i;
        }
        if (wrong)
            h_fail(h, "%s (%s%s): #wrong %zu of %zu, first at %zu: %g, not %g", coll_names[c->coll],
                   hoop_algo_name(c->algo), c->inplace ? ", in place" : "", wrong, rc, first,
                   r[first], want(h, c, count, first));
    }
    free(s);
    free(r);
}

/* The pool stayed what HOOP_STAGE_SLOTS and the chunk make, and no call held more. */
static void check_pool(h_rank *h, int slots, size_t chunk)
{
    if (h->comm->stage_bytes != (size_t)slots * chunk)
        h_fail(h, "stage slots hold %zu bytes, not %d x %zu", h->comm->stage_bytes, slots, chunk);
    if (h->comm->stage_peak < 1 || h->comm->stage_peak > slots)
        h_fail(h, "a call held %d stage slots at once (pool: %d)", h->comm->stage_peak, slots);
}

static size_t big_count; /* elements per call (per rank block for all-gather) */
static size_t chunk;

static void every_collective(h_rank *h)
{
    static const scase cases[] = {
        {0, HOOP_ALGO_RING, 0}, {0, HOOP_ALGO_RD, 0},   {0, HOOP_ALGO_RHD, 0},
        {0, HOOP_ALGO_RHD, 1},  {1, HOOP_ALGO_AUTO, 0}, {2, HOOP_ALGO_AUTO, 0},
        {3, HOOP_ALGO_AUTO, 0}, {4, HOOP_ALGO_AUTO, 0}, {0, HOOP_ALGO_RING, 1}};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]) && !h->err[0]; k++) {
        size_t count = cases[k].coll >= 3 ? big_count / (size_t)h->n : big_count;
        run_case(h, &cases[k], count);
    }
    if (!h->err[0]) check_pool(h, 2, chunk);
}

/* Every collective through 2 stage slots over tcp, on buffers 50 x the pool. */
START_TEST(test_two_slots_tcp)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    static const int sizes[] = {2, 3, 4, 5, 8};
    setenv("HOOP_TRANSPORT", "tcp", 1);
    setenv("HOOP_STAGE_SLOTS", "2", 1);
    cfg.chunk_bytes = chunk = CHUNK_TCP;
    cfg.timeout_ms = 30000; /* a deadlock fails the test instead of hanging it */
    big_count = 100003;     /* 400 KB: 24 x the pool */
    run_ranks(sizes[_i], &cfg, every_collective, NULL);
}
END_TEST

/* The same over shm rings of 64 KiB with 128 KiB chunks: a staged send's slot comes
 * back only once the receiver drained the whole chunk through the ring. */
START_TEST(test_two_slots_shm)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    setenv("HOOP_TRANSPORT", "shm", 1);
    setenv("HOOP_SHM_BYTES", "65536", 1);
    setenv("HOOP_STAGE_SLOTS", "2", 1);
    cfg.chunk_bytes = chunk = CHUNK_SHM;
    cfg.timeout_ms = 30000;
    big_count = 640007; /* 2.5 MB: 10 x the pool */
    run_ranks(_i, &cfg, every_collective, NULL);
}
END_TEST

/* With 8 slots, chunks are in flight: a ring all-reduce holds at least 4 at once. */
static void in_flight(h_rank *h)
{
    scase c = {0, HOOP_ALGO_RING, 0};
    run_case(h, &c, big_count);
    if (h->err[0]) return;
    if (h->comm->stage_bytes != 8 * chunk)
        h_fail(h, "stage slots hold %zu bytes, not 8 x %zu", h->comm->stage_bytes, chunk);
    if (h->comm->stage_peak < 4 || h->comm->stage_peak > 8)
        h_fail(h, "at most %d stage slots were held at once (want 4..8)", h->comm->stage_peak);
}

START_TEST(test_in_flight)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    setenv("HOOP_TRANSPORT", "tcp", 1);
    unsetenv("HOOP_STAGE_SLOTS"); /* the default: 8 */
    cfg.chunk_bytes = chunk = CHUNK_TCP;
    cfg.timeout_ms = 30000;
    big_count = 200003;
    run_ranks(_i, &cfg, in_flight, NULL);
}
END_TEST

/* Bad HOOP_STAGE_SLOTS values fail hoop_comm_init with a message naming the setting. */
START_TEST(test_bad_setting)
{
    static const char *const bad[] = {"1", "0", "257", "eight"};
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    hoop_comm *comm = NULL;
    cfg.rank = 0;
    cfg.world_size = 1;
    setenv("HOOP_STAGE_SLOTS", bad[_i], 1);
    ck_assert_int_eq(hoop_comm_init(&comm, &cfg), HOOP_ERR_INVALID);
    ck_assert_ptr_null(comm);
    assert_error_has("HOOP_STAGE_SLOTS", bad[_i]);
}
END_TEST

int main(void)
{
    setenv("HOOP_MEMOPS", "staged", 1);
    Suite *s = suite_create("stage");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_two_slots_tcp, 0, 5);
    tcase_add_loop_test(tc, test_two_slots_shm, 2, 5);
    tcase_add_loop_test(tc, test_in_flight, 2, 4);
    tcase_add_loop_test(tc, test_bad_setting, 0, 4);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
