/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_soak.c -- the soak (issue 14): 4 ranks issue thousands of collectives of
 * random kind (all-reduce, broadcast, reduce, all-gather, reduce-scatter, barrier), size
 * (0 to 4 MiB), dtype, op, root, algorithm and in-place flag, drawn from one seed that
 * every rank shares, with up to SOAK_WINDOW calls in flight; every result is compared
 * bit for bit with a reference computed here in double from the same formula, and the
 * process's open fds, threads, mappings, heap in use and anonymous RSS are read after a
 * warm-up of the largest calls, at the middle and at the end: fds, threads and mappings
 * must be equal, the heap within SOAK_HEAP_SLACK and RSS within SOAK_RSS_SLACK_KB (and
 * SOAK_RSS_FLAT_KB over the second half). Under a sanitizer only fds and threads.
 *
 * The inputs are small integers (chosen per op so that every sum, product, min, max and
 * average over 4 ranks is exactly representable in every dtype, f16 and bf16 included),
 * so the reference does not depend on the order of combination and must match exactly.
 * A few calls run the direct algorithm on hoop_comm_alloc_shared memory (the window is
 * drained first: the segment is one buffer).
 *
 * Passes: shared memory (the transport auto picks on one host), then TCP on loopback.
 * HOOP_SOAK_OPS (default 1000 per pass, 400 under a sanitizer; more than the 200 warm-up
 * calls) and HOOP_SOAK_SEED (default 1) change the run;
 * bench/soak.sh runs it long. Prints the counts of each pass.
 */
#include <check.h>
#include <dirent.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_harness.h"
#include "core/clock.h"
#include "hoop/collectives.h"
#include "hoop/comm.h"
#include "run_suite.h"

#define SOAK_RANKS 4
#define SOAK_WINDOW 6
#define SOAK_MAX_BYTES (2u << 20)
#define SOAK_SHARED_BYTES (2u << 20)
#define SOAK_RSS_SLACK_KB (16 * 1024) /* anonymous RSS, baseline to end */
#define SOAK_RSS_FLAT_KB (4 * 1024)   /* anonymous RSS, middle to end */
#define SOAK_HEAP_SLACK (1u << 20)    /* bytes in use by malloc, baseline to end */
#define SOAK_WARMUP 200

/* Under ASan or TSan the allocator is the sanitizer's (freed memory waits in a
 * quarantine), so the heap and RSS checks are skipped and fewer calls run. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SOAK_SANITIZED 1
#define SOAK_DEFAULT_OPS 400
#else
#define SOAK_SANITIZED 0
#define SOAK_DEFAULT_OPS 1000
#endif

enum { K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCESCATTER, K_BARRIER, K_COUNT };
static const char *const kind_names[K_COUNT] = {"allreduce", "broadcast",     "reduce",
                                                "allgather", "reducescatter", "barrier"};

/* One call of the sequence: the same on every rank (drawn from the seed and its index). */
typedef struct soak_op {
    int kind, root, in_place, shared;
    hoop_dtype dtype;
    hoop_op op;
    hoop_algo algo;
    size_t count; /* the call's count argument */
    uint64_t salt;
} soak_op;

/* One call in flight on a rank. */
typedef struct inflight {
    soak_op d;
    long index;
    hoop_request *req;
    void *send, *recv, *result; /* result: where this rank's output is */
} inflight;

typedef struct soak_cfg {
    long ops;
    uint64_t seed;
    long done[K_COUNT];
    uint64_t bytes;
    long fds[3], threads[3], rss_kb[3], maps[3];
    size_t heap[3]; /* bytes malloc has handed out and not had back (mallinfo2) */
} soak_cfg;

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int is_float(hoop_dtype t)
{
    return t <= HOOP_DTYPE_BF16;
}

/* Call index of the sequence of seed. */
static soak_op draw(uint64_t seed, long index)
{
    static const hoop_algo algos[] = {HOOP_ALGO_AUTO, HOOP_ALGO_RING, HOOP_ALGO_RD, HOOP_ALGO_RHD};
    uint64_t s = seed * 0x100000001B3ull ^ (uint64_t)index;
    soak_op d = {0};
    uint64_t r = splitmix64(&s);
    d.kind = (int)(r % 100 < 40   ? K_ALLREDUCE
                   : r % 100 < 52 ? K_BROADCAST
                   : r % 100 < 64 ? K_REDUCE
                   : r % 100 < 78 ? K_ALLGATHER
                   : r % 100 < 94 ? K_REDUCESCATTER
                                  : K_BARRIER);
    d.dtype = (hoop_dtype)(splitmix64(&s) % HOOP_DTYPE_COUNT_);
    d.op = (hoop_op)(splitmix64(&s) % (is_float(d.dtype) ? HOOP_OP_COUNT_ : HOOP_OP_AVG));
    d.root = (int)(splitmix64(&s) % SOAK_RANKS);
    d.in_place = (int)(splitmix64(&s) % 2);
    d.algo = algos[splitmix64(&s) % 4];
    /* Bytes: 0 now and then, mostly small, some up to the maximum. */
    uint64_t b = splitmix64(&s), bytes;
    if (b % 50 == 0)
        bytes = 0;
    else if (b % 10 < 6)
        bytes = (b >> 8) % 4096;
    else if (b % 10 < 9)
        bytes = 4096 + (b >> 8) % (256 << 10);
    else
        bytes = (256 << 10) + (b >> 8) % (SOAK_MAX_BYTES - (256 << 10));
    size_t elt = hoop_dtype_size(d.dtype);
    int blocks = d.kind == K_ALLGATHER || d.kind == K_REDUCESCATTER ? SOAK_RANKS : 1;
    d.count = (size_t)bytes / (elt * (size_t)blocks);
    /* The first calls are the largest of each kind, algorithm and placement, in u8 (the
     * most elements) and, for the reductions, in f16 avg (which pre-divides into a
     * buffer of its own): what the comm keeps at the largest size it has seen (its
     * executor block, scratch) is then at its final size when the baseline is read. */
    static const int reductions[3] = {K_ALLREDUCE, K_REDUCE, K_REDUCESCATTER};
    if (index < 64) {
        int k = (int)index, half = k >= 40;
        if (half) k -= 40;
        d.kind = half ? reductions[k % 3] : k % (K_COUNT - 1);
        k /= half ? 3 : K_COUNT - 1;
        d.algo = algos[k % 4];
        d.in_place = k / 4;
        d.dtype = half ? HOOP_DTYPE_F16 : HOOP_DTYPE_U8;
        d.op = half ? HOOP_OP_AVG : HOOP_OP_SUM;
        elt = hoop_dtype_size(d.dtype);
        blocks = d.kind == K_ALLGATHER || d.kind == K_REDUCESCATTER ? SOAK_RANKS : 1;
        d.count = (SOAK_MAX_BYTES - 8) / (elt * (size_t)blocks);
    }
    d.shared = d.kind == K_ALLREDUCE && d.in_place && splitmix64(&s) % 20 == 0;
    if (d.shared) d.algo = HOOP_ALGO_DIRECT;
    d.salt = splitmix64(&s);
    return d;
}

/* Rank r's input at element i: small integers for which every op over 4 ranks is exact
 * in every dtype (sums <= 60, products <= 16, |min / max| < 16, averages k / 4). */
static double input(const soak_op *d, int r, size_t i)
{
    uint64_t s = d->salt ^ ((uint64_t)r << 40) ^ i;
    uint64_t v = splitmix64(&s);
    switch (d->op) {
    case HOOP_OP_PROD: return (double)(1 + v % 2);
    case HOOP_OP_MIN:
    case HOOP_OP_MAX: return d->dtype == HOOP_DTYPE_U8 ? (double)(v % 32) : (double)(v % 32) - 16.0;
    default: return (double)(v % 16);
    }
}

/* x (exactly representable) stored as dtype t at p[i]. f16 / bf16 from the float's bits:
 * exact for the values above (no rounding happens). */
static void put(hoop_dtype t, void *p, size_t i, double x)
{
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    switch (t) {
    case HOOP_DTYPE_F32: ((float *)p)[i] = f; break;
    case HOOP_DTYPE_F64: ((double *)p)[i] = x; break;
    case HOOP_DTYPE_BF16: ((uint16_t *)p)[i] = (uint16_t)(u >> 16); break;
    case HOOP_DTYPE_F16: {
        uint16_t h = (uint16_t)((u >> 16) & 0x8000u);
        if (f != 0.0f)
            h |= (uint16_t)(((((u >> 23) & 0xFF) - 127 + 15) << 10) | ((u >> 13) & 0x3FF));
        ((uint16_t *)p)[i] = h;
        break;
    }
    case HOOP_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)x; break;
    case HOOP_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)x; break;
    default: ((uint8_t *)p)[i] = (uint8_t)x; break;
    }
}

/* The exact op over the ranks' inputs at element i. */
static double reduced(const soak_op *d, size_t i)
{
    double acc = input(d, 0, i);
    for (int r = 1; r < SOAK_RANKS; r++) {
        double x = input(d, r, i);
        switch (d->op) {
        case HOOP_OP_PROD: acc *= x; break;
        case HOOP_OP_MIN: acc = x < acc ? x : acc; break;
        case HOOP_OP_MAX: acc = x > acc ? x : acc; break;
        default: acc += x; break;
        }
    }
    return d->op == HOOP_OP_AVG ? acc / SOAK_RANKS : acc;
}

/* The first element where got differs from the reference, or -1. */
static long first_wrong(const soak_op *d, int rank, const void *got)
{
    size_t elt = hoop_dtype_size(d->dtype), n = d->count;
    unsigned char want[8];
    const unsigned char *g = got;
    size_t total = d->kind == K_ALLGATHER ? n * SOAK_RANKS : n;
    for (size_t i = 0; i < total; i++) {
        double x;
        switch (d->kind) {
        case K_BROADCAST: x = input(d, d->root, i); break;
        case K_ALLGATHER: x = input(d, (int)(i / n), i % n); break;
        case K_REDUCESCATTER: x = reduced(d, (size_t)rank * n + i); break;
        default: x = reduced(d, i); break;
        }
        put(d->dtype, want, 0, x);
        if (memcmp(g + i * elt, want, elt) != 0) return (long)i;
    }
    return -1;
}

/* Makes d's buffers on rank h->rank, fills them with its inputs and issues the call
 * (in place: the layouts of include/hoop/collectives.h). 0, or -1 after h_fail. */
static int start(h_rank *h, inflight *f, void *seg)
{
    soak_op *d = &f->d;
    size_t elt = hoop_dtype_size(d->dtype), n = d->count, r = (size_t)h->rank;
    size_t sn = d->kind == K_REDUCESCATTER ? n * SOAK_RANKS : n;
    size_t rn = d->kind == K_ALLGATHER ? n * SOAK_RANKS : n;
    char *src, *dst;
    f->send = f->recv = NULL;
    if (d->kind == K_BARRIER) {
        if (hoop_barrier(h->comm, &f->req) == HOOP_OK) return 0;
        h_fail(h, "call %ld (barrier): %s", f->index, hoop_last_error());
        return -1;
    }
    if (d->shared) { /* an in-place all-reduce on the shared segment */
        src = dst = seg;
    } else if (d->in_place) {
        if ((f->send = malloc((sn > rn ? sn : rn) * elt + 1)) == NULL) {
            h_fail(h, "call %ld: out of memory", f->index);
            return -1;
        }
        src = dst = f->send;
        if (d->kind == K_ALLGATHER) src += r * n * elt;
        if (d->kind == K_REDUCESCATTER) dst += r * n * elt;
    } else {
        f->send = malloc(sn * elt + 1);
        f->recv = malloc(rn * elt + 1);
        if (f->send == NULL || f->recv == NULL) {
            h_fail(h, "call %ld: out of memory", f->index);
            return -1;
        }
        src = f->send, dst = f->recv;
    }
    for (size_t i = 0; i < sn; i++) put(d->dtype, src, i, input(d, h->rank, i));
    /* all-gather: the result is the whole buffer, whose block r is the input */
    f->result = d->kind == K_ALLGATHER && d->in_place ? (char *)f->send : dst;
    hoop_comm_set_algo(h->comm, d->algo);
    hoop_status st;
    switch (d->kind) {
    case K_ALLREDUCE: st = hoop_allreduce(h->comm, src, dst, n, d->dtype, d->op, &f->req); break;
    case K_BROADCAST: st = hoop_broadcast(h->comm, src, dst, n, d->dtype, d->root, &f->req); break;
    case K_REDUCE: st = hoop_reduce(h->comm, src, dst, n, d->dtype, d->op, d->root, &f->req); break;
    case K_ALLGATHER:
        st = hoop_allgather(h->comm, src, d->in_place ? f->send : dst, n, d->dtype, &f->req);
        break;
    default: st = hoop_reduce_scatter(h->comm, src, dst, n, d->dtype, d->op, &f->req); break;
    }
    if (st == HOOP_OK) return 0;
    h_fail(h, "call %ld (%s %s %s count %zu): %s: %s", f->index, kind_names[d->kind],
           hoop_dtype_name(d->dtype), hoop_op_name(d->op), n, hoop_status_name(st),
           hoop_last_error());
    free(f->send);
    free(f->recv);
    f->send = f->recv = NULL;
    return -1;
}

/* Waits for f and checks its result; frees its buffers. */
static int finish(h_rank *h, inflight *f, soak_cfg *c)
{
    soak_op *d = &f->d;
    hoop_status st = hoop_wait(f->req, -1);
    int bad = 0;
    if (st != HOOP_OK) {
        h_fail(h, "call %ld (%s %s %s count %zu): wait: %s: %s", f->index, kind_names[d->kind],
               hoop_dtype_name(d->dtype), hoop_op_name(d->op), d->count, hoop_status_name(st),
               hoop_last_error());
        bad = 1;
    } else if (d->kind != K_BARRIER && !(d->kind == K_REDUCE && h->rank != d->root)) {
        long i = first_wrong(d, h->rank, f->result);
        if (i >= 0) {
            h_fail(h, "call %ld (%s %s %s %s count %zu root %d%s, algo %s): element %ld wrong",
                   f->index, kind_names[d->kind], hoop_dtype_name(d->dtype), hoop_op_name(d->op),
                   d->in_place ? "in place" : "out of place", d->count, d->root,
                   d->shared ? " shared" : "", hoop_algo_name(d->algo), i);
            bad = 1;
        }
    }
    if (h->rank == 0) {
        c->done[d->kind]++;
        c->bytes += (uint64_t)d->count * hoop_dtype_size(d->dtype) *
                    (d->kind == K_ALLGATHER || d->kind == K_REDUCESCATTER ? SOAK_RANKS : 1);
    }
    free(f->send);
    free(f->recv);
    f->send = f->recv = NULL;
    return bad ? -1 : 0;
}

static long proc_status_kb(const char *key)
{
    char line[256];
    long v = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, key, strlen(key)) == 0) v = strtol(line + strlen(key), NULL, 10);
    fclose(f);
    return v;
}

static long open_fds(void)
{
    long n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

/* The number of this process's mappings (/proc/self/maps lines). */
static long count_maps(void)
{
    char line[512];
    long n = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    while (fgets(line, sizeof(line), f))
        if (strchr(line, '\n')) n++;
    fclose(f);
    return n;
}

/* All ranks drained: rank 0 records the process's fds, threads and RSS in slot k. */
static void sample(h_rank *h, soak_cfg *c, int k)
{
    pthread_barrier_wait(h->bar);
    if (h->rank == 0) {
        c->fds[k] = open_fds();
        c->threads[k] = proc_status_kb("Threads:");
        c->rss_kb[k] = proc_status_kb("RssAnon:");
        c->maps[k] = count_maps();
        struct mallinfo2 mi = mallinfo2();
        c->heap[k] = mi.uordblks + mi.hblkhd;
    }
    pthread_barrier_wait(h->bar);
}

/* Rank h's part: the whole sequence with up to SOAK_WINDOW calls in flight. After a
 * failure it issues nothing more but still drains and meets the others at both samples,
 * so no rank waits at a barrier forever (the others' calls end by the comm's timeout). */
static void soak(h_rank *h)
{
    soak_cfg *c = h->user;
    inflight win[SOAK_WINDOW];
    long head = 0, tail = 0; /* calls issued, calls finished */
    int sampled = 0, failed = 0;
    void *seg = NULL;
    if (hoop_comm_alloc_shared(h->comm, SOAK_SHARED_BYTES, &seg) != HOOP_OK) {
        h_fail(h, "alloc_shared: %s", hoop_last_error());
        failed = 1;
    }
    while (!failed && head < c->ops) {
        soak_op d = draw(c->seed, head);
        if (head == SOAK_WARMUP || d.shared)
            while (!failed && tail < head) failed = finish(h, &win[tail++ % SOAK_WINDOW], c) != 0;
        if (!failed && head == SOAK_WARMUP) sample(h, c, 0), sampled = 1;
        if (!failed && head == (c->ops + SOAK_WARMUP) / 2) {
            while (!failed && tail < head) failed = finish(h, &win[tail++ % SOAK_WINDOW], c) != 0;
            if (!failed) sample(h, c, 2), sampled = 2;
        }
        while (!failed && head - tail >= SOAK_WINDOW)
            failed = finish(h, &win[tail++ % SOAK_WINDOW], c) != 0;
        if (failed) break;
        win[head % SOAK_WINDOW] = (inflight){.d = d, .index = head};
        if (start(h, &win[head % SOAK_WINDOW], seg) != 0) break;
        head++;
        if (d.shared) failed = finish(h, &win[tail++ % SOAK_WINDOW], c) != 0;
    }
    while (tail < head) finish(h, &win[tail++ % SOAK_WINDOW], c);
    if (sampled < 1) sample(h, c, 0);
    if (sampled < 2) sample(h, c, 2);
    sample(h, c, 1);
    if (seg && hoop_comm_free_shared(h->comm, seg) != HOOP_OK)
        h_fail(h, "free_shared: %s", hoop_last_error());
}

static long env_long(const char *name, long def)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : def;
}

static void soak_pass(const char *transport)
{
    soak_cfg c = {.ops = env_long("HOOP_SOAK_OPS", SOAK_DEFAULT_OPS),
                  .seed = (uint64_t)env_long("HOOP_SOAK_SEED", 1)};
    ck_assert_int_gt(c.ops, SOAK_WARMUP);
    setenv("HOOP_TRANSPORT", transport, 1);
    int64_t t0 = hoop__now_ns();
    run_ranks_ms(SOAK_RANKS, 60000, soak, &c);
    double secs = (double)(hoop__now_ns() - t0) / 1e9;
    long total = 0;
    for (int k = 0; k < K_COUNT; k++) total += c.done[k];
    printf("soak %s: seed %" PRIu64 ", %ld calls in %.1f s (", transport, c.seed, total, secs);
    for (int k = 0; k < K_COUNT; k++) printf("%s%s %ld", k ? ", " : "", kind_names[k], c.done[k]);
    printf("), %.1f MiB of results per rank; fds %ld -> %ld, threads %ld -> %ld, mappings %ld -> "
           "%ld, anonymous RSS %ld -> %ld KiB (%ld mid), heap in use %zu -> %zu -> %zu KiB\n",
           (double)c.bytes / (1 << 20), c.fds[0], c.fds[1], c.threads[0], c.threads[1], c.maps[0],
           c.maps[1], c.rss_kb[0], c.rss_kb[1], c.rss_kb[2], c.heap[0] >> 10, c.heap[2] >> 10,
           c.heap[1] >> 10);
    fflush(stdout);
    ck_assert_int_eq(total, c.ops);
    ck_assert_msg(c.fds[1] == c.fds[0], "open fds grew from %ld to %ld", c.fds[0], c.fds[1]);
    ck_assert_msg(c.threads[1] == c.threads[0], "threads grew from %ld to %ld", c.threads[0],
                  c.threads[1]);
    if (SOAK_SANITIZED) { /* its allocator maps memory as it goes */
        printf("soak %s: the mapping, heap and RSS checks are skipped under a sanitizer\n",
               transport);
        return;
    }
    ck_assert_msg(c.maps[1] == c.maps[0], "mappings grew from %ld to %ld", c.maps[0], c.maps[1]);
    ck_assert_msg(c.heap[1] < c.heap[0] + SOAK_HEAP_SLACK,
                  "the heap in use grew from %zu to %zu KiB", c.heap[0] >> 10, c.heap[1] >> 10);
    ck_assert_msg(c.rss_kb[1] - c.rss_kb[0] < SOAK_RSS_SLACK_KB,
                  "anonymous RSS grew from %ld to %ld KiB", c.rss_kb[0], c.rss_kb[1]);
    ck_assert_msg(c.rss_kb[1] - c.rss_kb[2] < SOAK_RSS_FLAT_KB,
                  "anonymous RSS grew from %ld KiB at the middle to %ld KiB", c.rss_kb[2],
                  c.rss_kb[1]);
}

START_TEST(test_soak_shm)
{
    soak_pass("shm");
}
END_TEST

START_TEST(test_soak_tcp)
{
    soak_pass("tcp");
}
END_TEST

int main(void)
{
    /* Freed buffers go back to the system at once (no adaptive mmap threshold), so the
     * RSS read at the end is what hoop holds, not what malloc kept. */
    mallopt(M_MMAP_THRESHOLD, 128 << 10);
    Suite *s = suite_create("soak");
    TCase *tc = tcase_create("soak");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_soak_shm);
    tcase_add_test(tc, test_soak_tcp);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
