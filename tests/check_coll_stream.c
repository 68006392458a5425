/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_coll_stream.c -- the collectives' stream form (hoop_*_stream,
 * include/hoop/collectives.h), 1 to 4 thread-ranks over tcp on GPU buffers: on each
 * rank's own stream, a memset writes the send buffer just before the call and a copy
 * reads the result just after it, for every collective and the barrier, all queued
 * before the rank waits for its stream once; the last rank makes its calls only after
 * the others have issued all theirs, so their calls must return before their
 * collectives can complete (the caller is not blocked: a blocking call would wait for
 * ever), and their streams must not pass a call before it completed. Results are
 * checked against values computed here (memset bytes make known i32 values). Errors: a
 * peer that never calls releases the stream within HOOP_TIMEOUT and reports the
 * timeout naming the peer, through hoop_stream_status and the next stream call; a
 * stream whose earlier work never finishes fails the call after HOOP_TIMEOUT, and runs
 * to its end once that work does; bad arguments name the _stream function.
 *
 * In make check the backend is the host execution layer's module with lazy streams
 * (hx.h: queued work runs only when something waits for it), so a collective that did
 * not wait for its start event reads the buffer before the memset ran, and a stream
 * that did not wait for the collective copies the result before it is there: both
 * show as wrong values. tests/gpu/run.sh runs it on the GPU with the real backend
 * (HOOP_CUDA_BACKEND). 77 without either.
 */
#include <check.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll_harness.h"
#include "core/backend.h"
#include "core/clock.h"
#include "cuda/coll.h"
#include "hoop/tensor.h"
#include "run_suite.h"

#define COUNT 1003           /* i32 elements per block */
#define LATE_MS 50           /* how long the last rank waits after the others issued theirs */
#define NCALLS 6             /* allreduce, broadcast, reduce, allgather, reduce_scatter, barrier */
#define BYTE_OF(r) ((r) + 1) /* the memset byte of rank r */

static const struct hoop__cuda_test_rt *rt;
static const struct hoop__cuda_coll *cc;

/* The i32 value whose four bytes are b. */
static int32_t word(int b)
{
    return (int32_t)(0x01010101u * (uint32_t)b);
}

/* Each rank's buffers: send (n blocks), recv and snapshot per call (n blocks each). */
typedef struct bufs {
    void *send[NCALLS], *recv[NCALLS], *snap[NCALLS];
    void *stream;
} bufs;

static atomic_int late_called; /* the last rank has made its first call */
static int blocking; /* the calls block: CUDA_DEVICE_MAX_CONNECTIONS=1, or no stream memops */
static atomic_int zero_called; /* rank 0 has made its call (the tests that order ranks) */
static atomic_int issued;      /* ranks (but the last) that issued every call */

static void free_bufs(bufs *b)
{
    for (int c = 0; c < NCALLS; c++) {
        cc->dev_free(b->send[c]);
        cc->dev_free(b->recv[c]);
        cc->dev_free(b->snap[c]);
    }
    if (b->stream) rt->stream_destroy(b->stream);
}

/* Device buffers of n blocks, zero; 0 on failure (reported). */
static int make_bufs(h_rank *h, bufs *b, size_t bytes)
{
    char *zero = calloc(1, bytes);
    memset(b, 0, sizeof(*b));
    if (!zero || rt->stream_create(&b->stream) != 0) {
        h_fail(h, "a stream or host memory");
        free(zero);
        return 0;
    }
    for (int c = 0; c < NCALLS; c++) {
        void **p[3] = {&b->send[c], &b->recv[c], &b->snap[c]};
        for (int k = 0; k < 3; k++)
            if (cc->dev_alloc(p[k], bytes) != HOOP_OK || cc->copy(*p[k], zero, bytes) != HOOP_OK) {
                h_fail(h, "device buffers: %s", hoop_last_error());
                free(zero);
                return 0;
            }
    }
    free(zero);
    return 1;
}

static hoop_status call(h_rank *h, int c, const void *s, void *r, hoop_stream *st)
{
    switch (c) {
    case 0: return hoop_allreduce_stream(h->comm, s, r, COUNT, HOOP_DTYPE_I32, HOOP_OP_SUM, st);
    case 1: return hoop_broadcast_stream(h->comm, s, r, COUNT, HOOP_DTYPE_I32, 1 % h->n, st);
    case 2: return hoop_reduce_stream(h->comm, s, r, COUNT, HOOP_DTYPE_I32, HOOP_OP_SUM, 0, st);
    case 3: return hoop_allgather_stream(h->comm, s, r, COUNT, HOOP_DTYPE_I32, st);
    case 4:
        return hoop_reduce_scatter_stream(h->comm, s, r, COUNT, HOOP_DTYPE_I32, HOOP_OP_SUM, st);
    default: return hoop_barrier_stream(h->comm, st);
    }
}

/* What call c leaves in this rank's recv[k], element i of block... (all blocks: n). */
static int32_t expect(const h_rank *h, int c, size_t i)
{
    int n = h->n, sum = n * (n + 1) / 2; /* the bytes' sum over ranks */
    switch (c) {
    case 0: return i < COUNT ? word(sum) : 0;
    case 1: return i < COUNT ? word(BYTE_OF(1 % n)) : 0;
    case 2: return i < COUNT && h->rank == 0 ? word(sum) : 0;
    case 3: return word(BYTE_OF((int)(i / COUNT)));
    case 4: return i < COUNT ? word(sum) : 0;
    default: return 0;
    }
}

static void check_results(h_rank *h, const bufs *b, size_t bytes)
{
    int32_t *got = malloc(bytes);
    if (!got) {
        h_fail(h, "host memory");
        return;
    }
    for (int c = 0; c < NCALLS - 1 && !h->err[0]; c++) {
        if (cc->copy(got, b->snap[c], bytes) != HOOP_OK) {
            h_fail(h, "reading call %d's snapshot: %s", c, hoop_last_error());
            break;
        }
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < bytes / 4; i++)
            if (got[i] != expect(h, c, i) && bad++ == 0) first = i;
        if (bad)
            h_fail(h,
                   "call %d: %zu wrong of %zu; first at %zu: %d, expected %d (a missing start "
                   "or end wait shows so)",
                   c, bad, bytes / 4, first, got[first], expect(h, c, first));
    }
    free(got);
}

/* Every collective on the stream: memset before, snapshot after; one wait at the end. */
static void ordered(h_rank *h)
{
    bufs b;
    size_t bytes = (size_t)h->n * COUNT * 4;
    int late = !blocking && h->n > 1 && h->rank == h->n - 1;
    if (!make_bufs(h, &b, bytes)) goto out;
    if (late) { /* after the others issued every call: their calls must not block */
        struct timespec ts = {0, LATE_MS * 1000000L};
        int64_t deadline = hoop__deadline_ns(20000);
        while (atomic_load(&issued) < h->n - 1 && hoop__now_ns() < deadline) nanosleep(&ts, NULL);
        if (atomic_load(&issued) < h->n - 1) {
            h_fail(h, "the other ranks' calls did not return within 20 s: they block");
            goto out;
        }
        nanosleep(&ts, NULL);
        atomic_store(&late_called, 1);
    }
    for (int c = 0; c < NCALLS; c++) {
        if (rt->memset_async(b.send[c], BYTE_OF(h->rank), bytes, b.stream) != 0) {
            h_fail(h, "memset on the stream failed");
            goto out;
        }
        /* reduce-scatter and all-gather in place, the rest out of place */
        void *s = b.send[c], *r = b.recv[c];
        if (c == 3) s = (char *)r + (size_t)h->rank * COUNT * 4;
        if (c == 3 && rt->memset_async(s, BYTE_OF(h->rank), COUNT * 4, b.stream) != 0) {
            h_fail(h, "memset on the stream failed");
            goto out;
        }
        if (c == 4) r = (char *)s + (size_t)h->rank * COUNT * 4;
        hoop_status st = call(h, c, s, r, (hoop_stream *)b.stream);
        if (st != HOOP_OK) {
            h_fail(h, "call %d: %s", c, hoop_last_error());
            goto out;
        }
        if (blocking && rt->queued && rt->queued(b.stream) != 0)
            h_fail(h,
                   "call %d: a blocking stream call left %lu pieces of work on the stream "
                   "(it did not wait for the work before it, or queued a wait)",
                   c, rt->queued(b.stream));
        if (rt->memcpy_async(b.snap[c], r, c == 3 ? bytes : COUNT * 4, b.stream) != 0) {
            h_fail(h, "a copy on the stream failed");
            goto out;
        }
        if (!blocking && !late && h->n > 1 && rt->queued && rt->queued(b.stream) == 0)
            h_fail(h, "call %d: nothing is held on the stream after the call", c);
    }
    if (!late) atomic_fetch_add(&issued, 1);
    if (rt->stream_sync(b.stream) != 0) {
        h_fail(h, "cudaStreamSynchronize failed");
        goto out;
    }
    if (!blocking && h->n > 1 && !atomic_load(&late_called))
        h_fail(h, "the stream passed the calls before rank %d had made them", h->n - 1);
    if (hoop_stream_status(h->comm) != HOOP_OK)
        h_fail(h, "hoop_stream_status: %s", hoop_last_error());
    check_results(h, &b, bytes);
out:
    free_bufs(&b);
}

static void run_ordered(int n)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.chunk_bytes = 1024; /* several pipelined chunks */
    cfg.timeout_ms = 30000;
    atomic_store(&late_called, 0);
    atomic_store(&issued, 0);
    run_ranks(n, &cfg, ordered, NULL);
}

START_TEST(test_ordered)
{
    run_ordered(_i);
}
END_TEST

/* The same on streams that run work when it is issued (the host layer's default): a
 * stream that is not lazy holds what follows an unmet wait. */
START_TEST(test_ordered_eager)
{
    if (rt->set_lazy) rt->set_lazy(0); /* this test's own process (Check forks) */
    run_ordered(_i);
}
END_TEST

/* The ordered calls where they block (variable=1 set in this test's own process: Check
 * forks): each call waits for the stream's earlier work and returns once it has
 * finished, leaving nothing on the stream, in the same order (the lazy streams show a
 * call that did not wait for the memset before it). */
static void run_blocking(const char *variable, int n)
{
    setenv(variable, "1", 1);
    blocking = 1;
    run_ordered(n);
}

/* CUDA_DEVICE_MAX_CONNECTIONS=1: every stream on one hardware queue, where a wait would
 * hold the collective's own device work. The host layer does not model the queues. */
START_TEST(test_one_queue)
{
    run_blocking("CUDA_DEVICE_MAX_CONNECTIONS", _i);
}
END_TEST

/* ... and a capture then is refused, naming the variable. */
static void one_queue_capture(h_rank *h)
{
    void *s = NULL, *graph = NULL;
    float *x = NULL;
    if (cc->stream_new(&s) != HOOP_OK || cc->dev_alloc((void **)&x, 64) != HOOP_OK ||
        cc->graph_begin(s) != HOOP_OK) {
        h_fail(h, "setup: %s", hoop_last_error());
        goto out;
    }
    hoop_status st = hoop_allreduce_stream(h->comm, x, x, 16, HOOP_DTYPE_F32, HOOP_OP_SUM, s);
    if (st != HOOP_ERR_UNSUPPORTED || !strstr(hoop_last_error(), "CUDA_DEVICE_MAX_CONNECTIONS=1"))
        h_fail(h, "a capture with CUDA_DEVICE_MAX_CONNECTIONS=1: %s (%s)", hoop_status_str(st),
               hoop_last_error());
    cc->graph_end(s, &graph);
    cc->graph_free(graph);
out:
    if (x) cc->dev_free(x);
    cc->stream_free(s);
}

START_TEST(test_one_queue_capture)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1); /* this test's own process (Check forks) */
    run_ranks(1, &cfg, one_queue_capture, NULL);
}
END_TEST

/* A driver without stream memory operations (the host layer's model of one): the calls
 * block as with one queue. */
START_TEST(test_no_memops)
{
    run_blocking("TEST_HX_NO_STREAM_MEMOPS", _i);
}
END_TEST

/* Streams that share hardware queues (the host layer's model, 2 queues, streams that run
 * work when it is issued): each rank's stream and its comm's memory-operation stream,
 * made in that order, share one, so the wait a call queues on the rank's stream holds
 * the collective's own copies, as on a GPU. The call fails after HOOP_TIMEOUT, naming
 * its unfinished copies and the rule (include/hoop/collectives.h), and the stream goes
 * on. */
static atomic_int hinted;     /* shared_queue's ranks whose message names the held copies */
static char unhinted[2][600]; /* ... and each rank's message that does not */

static void shared_queue(h_rank *h)
{
    bufs b;
    size_t bytes = COUNT * 4;
    if (!make_bufs(h, &b, bytes)) goto out;
    pthread_barrier_wait(h->bar); /* both ranks' streams before either comm's */
    if (hoop_allreduce_stream(h->comm, b.send[0], b.recv[0], COUNT, HOOP_DTYPE_I32, HOOP_OP_SUM,
                              (hoop_stream *)b.stream) != HOOP_OK)
        h_fail(h, "the call: %s", hoop_last_error());
    if (rt->stream_sync(b.stream) != 0) h_fail(h, "cudaStreamSynchronize failed");
    hoop_status st = hoop_stream_status(h->comm);
    if (st != HOOP_ERR_TIMEOUT)
        h_fail(h, "hoop_stream_status: %s (%s)", hoop_status_str(st), hoop_last_error());
    /* the rank whose copies were held says why (the other may report the wait for it) */
    if (strstr(hoop_last_error(), "copies or reductions had not") &&
        strstr(hoop_last_error(), "CUDA_DEVICE_MAX_CONNECTIONS"))
        atomic_fetch_add(&hinted, 1);
    else
        snprintf(unhinted[h->rank], sizeof(unhinted[0]), "%s", hoop_last_error());
    pthread_barrier_wait(h->bar);
    if (h->rank == 0 && atomic_load(&hinted) == 0)
        h_fail(h, "no rank names its held copies: %s", unhinted[0]);
out:
    /* The copies the wait held run once it has passed, here when a stream's destroy
     * runs every held queue (include/hoop/collectives.h: before the buffers go); both
     * ranks' before either frees its buffers. */
    pthread_barrier_wait(h->bar);
    if (b.stream) rt->stream_destroy(b.stream);
    b.stream = NULL;
    pthread_barrier_wait(h->bar);
    free_bufs(&b);
}

START_TEST(test_shared_queue)
{
    rt->set_lazy(0); /* this test's own process (Check forks) */
    rt->set_queues(2);
    run_ranks_ms(2, 1500, shared_queue, NULL);
}
END_TEST

/* Rank 1 never calls: rank 0's stream is released after HOOP_TIMEOUT, and the timeout
 * naming rank 1 is reported by hoop_stream_status and by the next stream call. */
static void peer_absent(h_rank *h)
{
    bufs b;
    size_t bytes = COUNT * 4;
    if (!make_bufs(h, &b, bytes)) goto out;
    if (h->rank == 0) {
        int64_t t0 = hoop__now_ns();
        if (hoop_allreduce_stream(h->comm, b.send[0], b.recv[0], COUNT, HOOP_DTYPE_I32, HOOP_OP_SUM,
                                  (hoop_stream *)b.stream) != HOOP_OK)
            h_fail(h, "the call: %s", hoop_last_error());
        rt->memcpy_async(b.snap[0], b.recv[0], bytes, b.stream);
        if (rt->stream_sync(b.stream) != 0) h_fail(h, "cudaStreamSynchronize failed");
        double ms = (double)(hoop__now_ns() - t0) / 1e6;
        if (ms > 5000) h_fail(h, "the stream was released after %.0f ms", ms);
        hoop_status st = hoop_stream_status(h->comm);
        if (st != HOOP_ERR_TIMEOUT || !strstr(hoop_last_error(), "rank 1"))
            h_fail(h, "hoop_stream_status: %s (%s)", hoop_status_str(st), hoop_last_error());
        st = hoop_broadcast_stream(h->comm, b.send[0], b.recv[0], COUNT, HOOP_DTYPE_I32, 0,
                                   (hoop_stream *)b.stream);
        if (st != HOOP_ERR_TIMEOUT || !strstr(hoop_last_error(), "hoop_broadcast_stream") ||
            !strstr(hoop_last_error(), "rank 1"))
            h_fail(h, "the next call: %s (%s)", hoop_status_str(st), hoop_last_error());
    }
out:
    pthread_barrier_wait(h->bar); /* rank 1 keeps its comm until rank 0 has seen it all */
    free_bufs(&b);
}

START_TEST(test_peer_absent)
{
    run_ranks_ms(2, 800, peer_absent, NULL);
}
END_TEST

/* Rank 0's stream is held before its call by a wait nobody meets (work that never
 * finishes): its call fails after HOOP_TIMEOUT without starting, the failure is reported
 * naming rank 0, and once the blocker passes the stream runs to its end (the call's own
 * wait was released by the failure). */
static void start_never(h_rank *h)
{
    bufs b;
    uint32_t *blocker = NULL;
    size_t bytes = COUNT * 4;
    if (!make_bufs(h, &b, bytes)) goto out;
    if (cc->flag_alloc(&blocker) != HOOP_OK || rt->wait_value(b.stream, blocker, 1) != HOOP_OK) {
        h_fail(h, "the blocking wait: %s", hoop_last_error());
        goto out;
    }
    if (hoop_allreduce_stream(h->comm, b.send[0], b.recv[0], COUNT, HOOP_DTYPE_I32, HOOP_OP_SUM,
                              (hoop_stream *)b.stream) != HOOP_OK)
        h_fail(h, "the call: %s", hoop_last_error());
    rt->memcpy_async(b.snap[0], b.recv[0], bytes, b.stream);
    /* wait for the failure on the host, then let the stream go */
    int64_t deadline = hoop__deadline_ns(5000);
    while (hoop_stream_status(h->comm) == HOOP_OK && hoop__now_ns() < deadline) {
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
    hoop_status st = hoop_stream_status(h->comm);
    if (st != HOOP_ERR_TIMEOUT || !strstr(hoop_last_error(), "rank "))
        h_fail(h, "hoop_stream_status: %s (%s)", hoop_status_str(st), hoop_last_error());
    cc->flag_write(blocker, 1);
    if (rt->stream_sync(b.stream) != 0) h_fail(h, "cudaStreamSynchronize failed");
out:
    pthread_barrier_wait(h->bar); /* each comm stays until both ranks are done */
    free_bufs(&b);
    cc->flag_free(blocker);
}

START_TEST(test_start_never)
{
    run_ranks_ms(2, 800, start_never, NULL);
}
END_TEST

// ----------------------------------------------------------------- captured into graphs

#define REPLAYS 3

/* Rank r's input elements at replay k: small integers, exact in any order. */
static int32_t input(int k, int r)
{
    return (k + 1) * 100 + r + 1;
}

/* What replay k of call c leaves in this rank's snapshot, element i. */
static int32_t expect_replay(const h_rank *h, int c, size_t i, int k)
{
    int n = h->n;
    int32_t sum = n * (k + 1) * 100 + n * (n + 1) / 2;
    switch (c) {
    case 0: return i < COUNT ? sum : 0;
    case 1: return i < COUNT ? input(k, 1 % n) : 0;
    case 2: return i < COUNT && h->rank == 0 ? sum : 0;
    case 3: return input(k, (int)(i / COUNT));
    case 4: return i < COUNT ? sum : 0;
    default: return 0;
    }
}

typedef struct capture {
    bufs b;
    int32_t *hin[NCALLS]; /* each call's input, page-locked: the graph copies it in */
    void *graph;
    size_t bytes;
} capture;

static void free_capture(capture *k)
{
    cc->graph_free(k->graph);
    k->graph = NULL;
    for (int c = 0; c < NCALLS; c++) {
        if (k->hin[c]) cc->host_unregister(k->hin[c]);
        free(k->hin[c]);
        k->hin[c] = NULL;
    }
    free_bufs(&k->b);
}

/* The buffers, and calls [first, last) captured into one graph on the rank's stream, each
 * between a copy of its input in (from the host, read at each replay) and a copy of its
 * result out: 0 on failure (reported). */
static int capture_calls(h_rank *h, capture *k, int first, int last)
{
    memset(k, 0, sizeof(*k));
    k->bytes = (size_t)h->n * COUNT * 4;
    if (!make_bufs(h, &k->b, k->bytes)) return 0;
    for (int c = 0; c < NCALLS; c++)
        if (!(k->hin[c] = calloc(1, k->bytes)) ||
            cc->host_register(k->hin[c], k->bytes) != HOOP_OK) {
            free(k->hin[c]);
            k->hin[c] = NULL;
            h_fail(h, "page-locked inputs: %s", hoop_last_error());
            return 0;
        }
    if (cc->graph_begin(k->b.stream) != HOOP_OK) {
        h_fail(h, "graph_begin: %s", hoop_last_error());
        return 0;
    }
    for (int c = first; c < last; c++) {
        void *s = k->b.send[c], *r = k->b.recv[c];
        size_t in = k->bytes;
        if (c == 3) s = (char *)r + (size_t)h->rank * COUNT * 4, in = COUNT * 4;
        if (c == 4) r = (char *)s + (size_t)h->rank * COUNT * 4;
        if (rt->memcpy_async(s, k->hin[c], in, k->b.stream) != 0) h_fail(h, "copy in: captured");
        hoop_status st = call(h, c, s, r, (hoop_stream *)k->b.stream);
        if (st != HOOP_OK) h_fail(h, "call %d, captured: %s", c, hoop_last_error());
        if (rt->memcpy_async(k->b.snap[c], r, c == 3 ? k->bytes : COUNT * 4, k->b.stream) != 0)
            h_fail(h, "copy out: captured");
    }
    hoop_status st = cc->graph_end(k->b.stream, &k->graph);
    if (st != HOOP_OK) h_fail(h, "graph_end: %s", hoop_last_error());
    return !h->err[0];
}

/* Replay k's inputs, and every receive buffer and snapshot zero (queued on the stream
 * before the graph), so a replay that did not run leaves zeros. */
static int set_replay(h_rank *h, capture *k, int replay)
{
    for (int c = 0; c < NCALLS; c++) {
        for (size_t i = 0; i < k->bytes / 4; i++) k->hin[c][i] = input(replay, h->rank);
        if (rt->memset_async(k->b.recv[c], 0, k->bytes, k->b.stream) != 0 ||
            rt->memset_async(k->b.snap[c], 0, k->bytes, k->b.stream) != 0) {
            h_fail(h, "zeroing the buffers");
            return 0;
        }
    }
    return 1;
}

static void check_replay(h_rank *h, capture *k, int first, int last, int replay)
{
    int32_t *got = malloc(k->bytes);
    for (int c = first; c < last && got && !h->err[0]; c++) {
        if (cc->copy(got, k->b.snap[c], k->bytes) != HOOP_OK) {
            h_fail(h, "reading a snapshot: %s", hoop_last_error());
            break;
        }
        size_t bad = 0, first_bad = 0;
        for (size_t i = 0; i < k->bytes / 4; i++)
            if (got[i] != expect_replay(h, c, i, replay) && bad++ == 0) first_bad = i;
        if (bad)
            h_fail(h, "replay %d, call %d: %zu wrong of %zu; first at %zu: %d, expected %d", replay,
                   c, bad, k->bytes / 4, first_bad, got[first_bad],
                   expect_replay(h, c, first_bad, replay));
    }
    free(got);
}

/* Every collective captured into one graph per rank, replayed REPLAYS times with new
 * inputs: each replay is a new call on every rank (results of that replay's inputs), in
 * the graph's stream order (the copy in before it, the copy out after it). The last rank
 * launches each replay only once the others have launched theirs, which must not block
 * and must leave their streams held. */
static void captured(h_rank *h)
{
    capture k;
    int late = h->n > 1 && h->rank == h->n - 1;
    if (!capture_calls(h, &k, 0, NCALLS)) goto out;
    for (int replay = 0; replay < REPLAYS && !h->err[0]; replay++) {
        if (!set_replay(h, &k, replay)) break;
        pthread_barrier_wait(h->bar);
        if (late) { /* after the others launched theirs */
            struct timespec ts = {0, LATE_MS * 1000000L};
            int64_t deadline = hoop__deadline_ns(20000);
            while (atomic_load(&issued) < (replay + 1) * (h->n - 1) && hoop__now_ns() < deadline)
                nanosleep(&ts, NULL);
            nanosleep(&ts, NULL);
        }
        if (cc->graph_launch(k.graph, k.b.stream) != HOOP_OK) {
            h_fail(h, "graph_launch: %s", hoop_last_error());
            break;
        }
        if (!late && h->n > 1 && rt->queued && rt->queued(k.b.stream) == 0)
            h_fail(h, "replay %d: nothing is held on the stream after the launch", replay);
        if (!late) atomic_fetch_add(&issued, 1);
        if (cc->stream_sync(k.b.stream) != HOOP_OK) {
            h_fail(h, "replay %d: the stream: %s", replay, hoop_last_error());
            break;
        }
        if (hoop_stream_status(h->comm) != HOOP_OK)
            h_fail(h, "hoop_stream_status: %s", hoop_last_error());
        check_replay(h, &k, 0, NCALLS, replay);
    }
out:
    pthread_barrier_wait(h->bar);
    free_capture(&k);
}

static void run_captured(int n)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.chunk_bytes = 1024; /* several pipelined chunks */
    cfg.timeout_ms = 30000;
    atomic_store(&issued, 0);
    run_ranks(n, &cfg, captured, NULL);
}

START_TEST(test_captured)
{
    run_captured(_i);
}
END_TEST

START_TEST(test_captured_eager)
{
    if (rt->set_lazy) rt->set_lazy(0);
    run_captured(_i);
}
END_TEST

/* Rank 1 replays its graph once only: rank 0's second replay fails after HOOP_TIMEOUT
 * naming rank 1 and still lets its stream go; its third runs nothing (the comm's stream
 * calls have failed) and lets the stream go at once. */
static void failed_replay(h_rank *h)
{
    capture k;
    if (!capture_calls(h, &k, 0, 1)) goto out;
    for (int replay = 0; replay < (h->rank == 0 ? 3 : 1) && !h->err[0]; replay++) {
        int64_t t0 = hoop__now_ns();
        if (!set_replay(h, &k, replay) || cc->graph_launch(k.graph, k.b.stream) != HOOP_OK ||
            cc->stream_sync(k.b.stream) != HOOP_OK) {
            h_fail(h, "replay %d: %s", replay, hoop_last_error());
            break;
        }
        double ms = (double)(hoop__now_ns() - t0) / 1e6;
        hoop_status st = hoop_stream_status(h->comm);
        if (replay == 0) check_replay(h, &k, 0, 1, 0);
        if (replay == 0 && st != HOOP_OK) h_fail(h, "replay 0: %s", hoop_last_error());
        if (replay > 0 && (st != HOOP_ERR_TIMEOUT || !strstr(hoop_last_error(), "rank 1")))
            h_fail(h, "replay %d: hoop_stream_status: %s (%s)", replay, hoop_status_str(st),
                   hoop_last_error());
        if (replay == 1 && ms > 5000) h_fail(h, "replay 1 let its stream go after %.0f ms", ms);
        if (replay == 2 && ms > 500) h_fail(h, "replay 2 let its stream go after %.0f ms", ms);
    }
out:
    pthread_barrier_wait(h->bar); /* rank 1 keeps its comm until rank 0 is done */
    free_capture(&k);
}

START_TEST(test_captured_failed_replay)
{
    run_ranks_ms(2, 800, failed_replay, NULL);
}
END_TEST

/* Rank 0 destroys its executable graph right after launching it, before the call can
 * complete (rank 1 calls later, not captured): the replay still runs to its end, with
 * the right result, and the graph's record goes once it has (ASan: no leak, no use after
 * free). */
static void freed_graph(h_rank *h)
{
    capture k;
    if (!capture_calls(h, &k, 0, 1) || !set_replay(h, &k, 0)) goto out;
    if (h->rank == 0) {
        if (cc->graph_launch(k.graph, k.b.stream) != HOOP_OK) h_fail(h, "graph_launch");
        cc->graph_free(k.graph);
        k.graph = NULL;
        atomic_store(&zero_called, 1);
    } else {
        while (!atomic_load(&zero_called)) {
            struct timespec ts = {0, 1000000L};
            nanosleep(&ts, NULL);
        }
        if (rt->memcpy_async(k.b.send[0], k.hin[0], k.bytes, k.b.stream) != 0 ||
            call(h, 0, k.b.send[0], k.b.recv[0], (hoop_stream *)k.b.stream) != HOOP_OK ||
            rt->memcpy_async(k.b.snap[0], k.b.recv[0], COUNT * 4, k.b.stream) != 0)
            h_fail(h, "the call: %s", hoop_last_error());
    }
    if (cc->stream_sync(k.b.stream) != HOOP_OK) h_fail(h, "sync: %s", hoop_last_error());
    if (hoop_stream_status(h->comm) != HOOP_OK) h_fail(h, "status: %s", hoop_last_error());
    check_replay(h, &k, 0, 1, 0);
out:
    pthread_barrier_wait(h->bar);
    free_capture(&k);
}

START_TEST(test_captured_graph_freed)
{
    atomic_store(&zero_called, 0);
    run_ranks_ms(2, 5000, freed_graph, NULL);
}
END_TEST

/* Graphs that outlive their comm: replayed after hoop_comm_destroy, they run nothing and
 * let their streams go at once (no crash, no hang; ASan: no use of the freed comm). */
static capture kept[2];

static void keep_graph(h_rank *h)
{
    if (capture_calls(h, &kept[h->rank], 0, 1) && set_replay(h, &kept[h->rank], 0) &&
        cc->graph_launch(kept[h->rank].graph, kept[h->rank].b.stream) == HOOP_OK &&
        cc->stream_sync(kept[h->rank].b.stream) == HOOP_OK)
        check_replay(h, &kept[h->rank], 0, 1, 0);
    else
        h_fail(h, "the first replay: %s", hoop_last_error());
}

START_TEST(test_captured_comm_destroyed)
{
    memset(kept, 0, sizeof(kept));
    run_ranks_ms(2, 5000, keep_graph, NULL);
    for (int r = 0; r < 2; r++) { /* the comms are gone */
        int64_t t0 = hoop__now_ns();
        ck_assert_int_eq(cc->graph_launch(kept[r].graph, kept[r].b.stream), HOOP_OK);
        ck_assert_int_eq(cc->stream_sync(kept[r].b.stream), HOOP_OK);
        ck_assert_int_lt(hoop__now_ns() - t0, 2000000000LL);
        free_capture(&kept[r]);
    }
}
END_TEST

/* A nearly full device (host layer only): rank 0's call needs a device buffer (a 16-bit
 * average's pre-division) that fits only once the allocator gives its cache back, which
 * synchronises the device (cudaFree). The issuing thread does it, before the call's wait
 * is on its stream; the progress thread, which the wait waits for, must not: there the
 * cudaFree would wait for the stream forever (the host layer's cudaFree waits for every
 * held stream, as CUDA's synchronises the device). Rank 1 calls only after rank 0's call
 * has returned, so no other stream waits meanwhile (collectives.h: a thread-rank's device
 * synchronisation waits for the others' streams). */
#define FULL_MAX 8192
static void *full_blocks[FULL_MAX];
static int full_n;

/* Fills the device: 2 MiB blocks, then 512-byte ones, until none fits; then one 2 MiB
 * block goes back to the cache. 0 on failure (reported). */
static int fill_device(h_rank *h)
{
    size_t sizes[2] = {2u << 20, 512};
    full_n = 0;
    for (int k = 0; k < 2; k++)
        while (full_n < FULL_MAX && cc->dev_alloc(&full_blocks[full_n], sizes[k]) == HOOP_OK)
            full_n++;
    if (full_n < 2 || full_n == FULL_MAX) {
        h_fail(h, "filling the device: %d blocks", full_n);
        return 0;
    }
    cc->dev_free(full_blocks[0]); /* a 2 MiB block, cached */
    full_blocks[0] = NULL;
    return 1;
}

static void nearly_full(h_rank *h)
{
    bufs b;
    size_t bytes = COUNT * 2;
    uint16_t *host = malloc(bytes);
    if (!host || !make_bufs(h, &b, bytes)) {
        h_fail(h, "buffers");
        goto out;
    }
    for (size_t i = 0; i < COUNT; i++) host[i] = h->rank == 0 ? 0x3C00 : 0x4000; /* 1, 2 */
    if (cc->copy(b.send[0], host, bytes) != HOOP_OK) h_fail(h, "copy: %s", hoop_last_error());
    pthread_barrier_wait(h->bar); /* every buffer made */
    if (h->rank == 0 && fill_device(h)) {
        if (hoop_allreduce_stream(h->comm, b.send[0], b.recv[0], COUNT, HOOP_DTYPE_F16, HOOP_OP_AVG,
                                  (hoop_stream *)b.stream) != HOOP_OK)
            h_fail(h, "the call: %s", hoop_last_error());
        atomic_store(&zero_called, 1);
    }
    while (h->rank == 1 && !atomic_load(&zero_called)) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    if (h->rank == 1 && hoop_allreduce_stream(h->comm, b.send[0], b.recv[0], COUNT, HOOP_DTYPE_F16,
                                              HOOP_OP_AVG, (hoop_stream *)b.stream) != HOOP_OK)
        h_fail(h, "the call: %s", hoop_last_error());
    if (rt->stream_sync(b.stream) != 0) h_fail(h, "cudaStreamSynchronize failed");
    if (hoop_stream_status(h->comm) != HOOP_OK)
        h_fail(h, "hoop_stream_status: %s", hoop_last_error());
    memset(host, 0, bytes);
    if (!h->err[0] && cc->copy(host, b.recv[0], bytes) != HOOP_OK) h_fail(h, "copy back");
    for (size_t i = 0; i < COUNT && !h->err[0]; i++)
        if (host[i] != 0x3E00) h_fail(h, "element %zu: 0x%04x, expected 0x3e00 (1.5)", i, host[i]);
out:
    pthread_barrier_wait(h->bar);
    if (h->rank == 0)
        for (int i = 0; i < full_n; i++) cc->dev_free(full_blocks[i]);
    free_bufs(&b);
    free(host);
}

START_TEST(test_nearly_full)
{
    rt->set_devices(1, (size_t)16 << 20);
    atomic_store(&zero_called, 0);
    run_ranks_ms(2, 5000, nearly_full, NULL);
}
END_TEST

START_TEST(test_bad_args)
{
    float x = 0;
    ck_assert_int_eq(hoop_allreduce_stream(NULL, &x, &x, 1, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL),
                     HOOP_ERR_INVALID);
    assert_error_has("hoop_allreduce_stream", "comm");
    ck_assert_int_eq(hoop_barrier_stream(NULL, NULL), HOOP_ERR_INVALID);
    assert_error_has("hoop_barrier_stream", NULL);
    ck_assert_int_eq(hoop_stream_status(NULL), HOOP_ERR_INVALID);
}
END_TEST

/* The module's test runtime (the same CUDA the collectives use), or NULL. */
static const struct hoop__cuda_test_rt *find_rt(void)
{
    const char *path = getenv("HOOP_CUDA_BACKEND");
    void *so = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    hoop__backend_test_rt_fn fn;
    if (!so) return NULL;
    *(void **)&fn = dlsym(so, HOOP__BACKEND_TEST_RT);
    const struct hoop__cuda_test_rt *t = fn ? fn() : NULL;
    return t && t->size >= sizeof(*t) ? t : NULL;
}

int main(void)
{
    const char *hx = getenv("TEST_CUDA_HX_BACKEND");
    use_test_cuda_backend();
    if (hoop_device_check(HOOP_DEVICE_CUDA) != HOOP_OK) {
        printf("SKIP: no CUDA device for hoop: %s\n", hoop_last_error());
        return 77;
    }
    rt = find_rt();
    if (hoop__cuda_backend(NULL, &cc) != HOOP_OK || !cc || !rt ||
        !HOOP__CUDA_COLL_HAS(cc, graph_free)) {
        printf("SKIP: the CUDA backend has no stream entries or test runtime\n");
        return 77;
    }
    if (rt->set_lazy) rt->set_lazy(1); /* streams made from now on: the lazy host layer */
    setenv("HOOP_TRANSPORT", "tcp", 1);
    Suite *s = suite_create("coll_stream");
    TCase *tc = tcase_create("stream");
    tcase_set_timeout(tc, 120);
    const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    if (conn && atoi(conn) >= 1 && atoi(conn) < 8) { /* tests/gpu/run.sh: the calls block */
        blocking = 1;
        tcase_add_loop_test(tc, test_ordered, 1, 5);
        tcase_add_test(tc, test_one_queue_capture);
        suite_add_tcase(s, tc);
    } else {
        tcase_add_loop_test(tc, test_ordered, 1, 5);
        if (hx) tcase_add_loop_test(tc, test_ordered_eager, 2, 4);
        tcase_add_test(tc, test_peer_absent);
        tcase_add_test(tc, test_start_never);
        tcase_add_test(tc, test_bad_args);
        if (hx) tcase_add_loop_test(tc, test_one_queue, 1, 4);
        if (hx) tcase_add_test(tc, test_one_queue_capture);
        if (hx) tcase_add_loop_test(tc, test_no_memops, 1, 4);
        if (hx && rt->set_queues) tcase_add_test(tc, test_shared_queue);
        suite_add_tcase(s, tc);
        tc = tcase_create("captured");
        tcase_set_timeout(tc, 120);
        tcase_add_loop_test(tc, test_captured, 1, 5);
        if (hx) tcase_add_loop_test(tc, test_captured_eager, 2, 4);
        tcase_add_test(tc, test_captured_failed_replay);
        tcase_add_test(tc, test_captured_graph_freed);
        tcase_add_test(tc, test_captured_comm_destroyed);
        suite_add_tcase(s, tc);
        if (rt->set_devices) { /* a hang here is the failure: a case of its own, short */
            tc = tcase_create("nearly_full");
            tcase_set_timeout(tc, 30);
            tcase_add_test(tc, test_nearly_full);
            suite_add_tcase(s, tc);
        }
    }
    SRunner *sr = srunner_create(s);
    if (!hx) srunner_set_fork_status(sr, CK_NOFORK); /* a real GPU: no CUDA across fork */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
