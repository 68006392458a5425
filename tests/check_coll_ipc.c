/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_coll_ipc.c -- device memory the ranks of a node map
 * (hoop_comm_alloc_shared_cuda / free_shared_cuda) and the device direct algorithm on it.
 *
 * Every collective x dtype x op (all-reduce, all-gather and reduce-scatter in place: the
 * ones that run direct; broadcast and reduce on the same memory, which are staged) on
 * 2, 3 and 4 ranks, as real processes (this program exec'd: --worker, so no CUDA crosses
 * a fork; the copies mapped through CUDA IPC) and as threads of one process (the copies
 * used through their pointers). Each buffer starts 3 elements into the allocation (the
 * kernel's unaligned ends) and the elements around it must stay untouched. References
 * are direct_ref.h's, independent of hoop: small integers whose results are exact in
 * every dtype; a direct 16-bit average is the f32 mean rounded once. Every result is
 * also compared bitwise across ranks (a hash all-gathered). "Direct" is seen through
 * hoop_comm_bytes_sent: a direct call sends only 1-byte tokens. With HOOP_TRANSPORT=tcp
 * the memory stays private (hoop_comm_is_shared = 0) and the same cases must give the
 * same results through the staged path, data sent. The stream form on such memory: on
 * each rank's own (lazy, on the host layer) stream, the data is copied in just before
 * the call and the result out just after it. A rank killed before or in a direct call
 * fails the others within 2 s, naming it. Leaks: after free (and destroy), no
 * descriptor and no IPC mapping is left (host layer: it names its mappings).
 *
 * In make check the backend is the host execution layer's module (its CUDA IPC is memfds
 * opened through /proc: src/cuda/hx.h); tests/gpu/run.sh runs this with the real one.
 * 77 without either.
 */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coll_harness.h"
#include "core/backend.h"
#include "core/check.h"
#include "core/clock.h"
#include "cuda/coll.h"
#include "hoop/tensor.h"
#include "run_suite.h"
/* direct_ref.h's references; this file uses some of its helpers, not all */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "direct_ref.h"
#pragma GCC diagnostic pop

#define OFF 3          /* elements: each buffer starts this far into its allocation */
#define GUARD 5        /* elements after the buffer that must stay untouched */
#define TOKEN_BYTES 16 /* a direct call sends fewer bytes than this */
#define MAX_ELEM 8

static const struct hoop__cuda_coll *cc;
static const struct hoop__cuda_test_rt *rt;
static int hx; /* the host execution layer's backend: its leak probes apply */

enum { C_ALLREDUCE, C_ALLGATHER, C_REDUCE_SCATTER, C_BROADCAST, C_REDUCE, C_COUNT };
static const char *const coll_names[] = {"allreduce", "allgather", "reduce_scatter", "broadcast",
                                         "reduce"};

/* One rank's view of a run, threads and processes alike. */
typedef struct rk {
    hoop_comm *comm;
    int rank, n;
    int direct;    /* the shared memory must be mapped (1) or private (0) */
    int probe;     /* the only rank of its process: checks its descriptors and mappings */
    int stream;    /* calls through the _stream forms */
    void *st;      /* this rank's stream (stream runs) */
    char err[600]; /* the first failure */
} rk;

static void rk_fail(rk *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rk_fail(rk *r, const char *fmt, ...)
{
    if (r->err[0]) return;
    int k = snprintf(r->err, sizeof(r->err), "rank %d/%d: ", r->rank, r->n);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + k, sizeof(r->err) - (size_t)k, fmt, ap);
    va_end(ap);
}

static uint64_t fnv(const void *p, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

/* Mappings this process has of the host layer's IPC memory (0 on a GPU). */
static int ipc_mappings(void)
{
    char line[512];
    int n = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    while (fgets(line, sizeof(line), f)) n += strstr(line, "hx-cuda-ipc") != NULL;
    fclose(f);
    return n;
}

// ----------------------------------------------------------------- one case

typedef struct icase {
    int coll;
    hoop_dtype t;
    hoop_op op;
    size_t count;
    unsigned salt;
} icase;

/* Elements the case's buffer holds. */
static size_t elems_of(const icase *c, int n)
{
    return c->coll == C_ALLGATHER || c->coll == C_REDUCE_SCATTER ? c->count * (size_t)n : c->count;
}

/* Fills this rank's buffer (host image of the whole allocation's first part). */
static void fill_case(const rk *r, const icase *c, char *img, size_t es)
{
    size_t total = elems_of(c, r->n);
    memset(img, 0x5a, (OFF + total + GUARD) * es);
    char *b = img + OFF * es;
    for (size_t i = 0; i < total; i++) {
        if (c->coll == C_ALLGATHER && i / c->count != (size_t)r->rank) continue;
        size_t idx = c->coll == C_ALLGATHER ? i % c->count : i;
        put(c->t, b, i, (double)val(c->op, c->t, r->rank, idx, c->salt));
    }
}

/* Wrong elements of the result in got (the buffer, host image); *first = the first. */
static size_t check_case(const rk *r, const icase *c, const char *got, size_t es, size_t *first)
{
    unsigned char want[MAX_ELEM];
    size_t wrong = 0, total = elems_of(c, r->n), lo = 0, hi = total;
    *first = SIZE_MAX;
    if (c->coll == C_REDUCE_SCATTER) lo = (size_t)r->rank * c->count, hi = lo + c->count;
    if (c->coll == C_REDUCE && r->rank != 0) return 0; /* only the root's is defined */
    for (size_t i = lo; i < hi; i++) {
        if (c->coll == C_ALLGATHER)
            put(c->t, want, 0,
                (double)val(c->op, c->t, (int)(i / c->count), i % c->count, c->salt));
        else if (c->coll == C_BROADCAST)
            put(c->t, want, 0, (double)val(c->op, c->t, 1 % r->n, i, c->salt));
        else
            expect(c->op, c->t, r->n, i, c->salt, want);
        const char *g = got + i * es;
        int ok = memcmp(g, want, es) == 0 ||
                 (c->op == HOOP_OP_AVG && !ref_exact16 && avg16_ok(c->t, r->n, got, i, c->salt));
        if (!ok && !wrong++) *first = i;
    }
    return wrong;
}

/* The in-place call of case c on buf (device memory). */
static hoop_status call_case(rk *r, const icase *c, char *buf, size_t es)
{
    hoop_stream *s = r->st;
    char *mine = buf + (size_t)r->rank * c->count * es;
    switch (c->coll) {
    case C_ALLREDUCE:
        return r->stream ? hoop_allreduce_stream(r->comm, buf, buf, c->count, c->t, c->op, s)
                         : hoop_allreduce(r->comm, buf, buf, c->count, c->t, c->op, NULL);
    case C_ALLGATHER:
        return r->stream ? hoop_allgather_stream(r->comm, mine, buf, c->count, c->t, s)
                         : hoop_allgather(r->comm, mine, buf, c->count, c->t, NULL);
    case C_REDUCE_SCATTER:
        return r->stream ? hoop_reduce_scatter_stream(r->comm, buf, mine, c->count, c->t, c->op, s)
                         : hoop_reduce_scatter(r->comm, buf, mine, c->count, c->t, c->op, NULL);
    case C_BROADCAST:
        return r->stream ? hoop_broadcast_stream(r->comm, buf, buf, c->count, c->t, 1 % r->n, s)
                         : hoop_broadcast(r->comm, buf, buf, c->count, c->t, 1 % r->n, NULL);
    default:
        return r->stream ? hoop_reduce_stream(r->comm, buf, buf, c->count, c->t, c->op, 0, s)
                         : hoop_reduce(r->comm, buf, buf, c->count, c->t, c->op, 0, NULL);
    }
}

/* Data in, the call, the result out: through the stream (copies queued on it around the
 * call, one wait at the end) or on the host (blocking copies around a blocking call). */
static hoop_status move_and_call(rk *r, const icase *c, char *seg, char *img, char *got,
                                 size_t bytes, size_t es)
{
    if (!r->stream) {
        HOOP_CHECK(cc->copy(seg, img, bytes));
        HOOP_CHECK(call_case(r, c, seg + OFF * es, es));
        return cc->copy(got, seg, bytes);
    }
    if (rt->memcpy_async(seg, img, bytes, r->st) != 0)
        return HOOP_ERROR(HOOP_ERR_CUDA, "copying in on the stream");
    HOOP_CHECK(call_case(r, c, seg + OFF * es, es));
    if (rt->memcpy_async(got, seg, bytes, r->st) != 0 || rt->stream_sync(r->st) != 0)
        return HOOP_ERROR(HOOP_ERR_CUDA, "copying out on the stream");
    return hoop_stream_status(r->comm);
}

static void run_case(rk *r, const icase *c, char *seg, char *img, char *got)
{
    size_t es = hoop_dtype_size(c->t), total = elems_of(c, r->n);
    size_t bytes = (OFF + total + GUARD) * es, first;
    int direct_coll = c->coll <= C_REDUCE_SCATTER;
    char name[160];
    snprintf(name, sizeof(name), "%s %s %s count %zu", coll_names[c->coll], hoop_dtype_name(c->t),
             hoop_op_name(c->op), c->count);
    fill_case(r, c, img, es);
    memcpy(got, img, bytes);
    ref_exact16 = r->direct && direct_coll; /* direct: the mean rounded once */
    uint64_t b0 = hoop_comm_bytes_sent(r->comm);
    hoop_status st = move_and_call(r, c, seg, img, got, bytes, es);
    uint64_t sent = hoop_comm_bytes_sent(r->comm) - b0;
    if (st != HOOP_OK) {
        rk_fail(r, "%s: %s: %s", name, hoop_status_name(st), hoop_last_error());
        return;
    }
    size_t wrong = check_case(r, c, got + OFF * es, es, &first);
    if (wrong)
        rk_fail(r, "%s: %zu wrong, first at %zu (%g)", name, wrong, first,
                get(c->t, got + OFF * es, first));
    else if (memcmp(got, img, OFF * es) ||
             memcmp(got + (OFF + total) * es, img + (OFF + total) * es, GUARD * es))
        rk_fail(r, "%s: an element around the buffer changed", name);
    else if (direct_coll && r->direct && sent >= TOKEN_BYTES)
        rk_fail(r, "%s: not direct: %llu bytes sent", name, (unsigned long long)sent);
    else if (direct_coll && !r->direct && total * es >= 64 && sent < total * es / 2)
        rk_fail(r, "%s: only %llu bytes sent on private memory", name, (unsigned long long)sent);
    /* Bitwise the same on every rank (reduce-scatter: each rank's own block differs), and
     * every rank stops at the first case that failed anywhere. */
    int64_t mine[2] = {
        c->coll == C_REDUCE_SCATTER || c->coll == C_REDUCE ? 0 : (int64_t)fnv(got, bytes),
        r->err[0] != 0};
    int64_t all[2 * H_MAX_RANKS];
    if (hoop_allgather(r->comm, mine, all, 2, HOOP_DTYPE_I64, NULL) != HOOP_OK)
        rk_fail(r, "%s: gathering hashes: %s", name, hoop_last_error());
    for (int q = 0; q < r->n && !r->err[0]; q++)
        if (all[2 * q + 1])
            rk_fail(r, "%s: rank %d failed", name, q);
        else if (all[2 * q] != all[0])
            rk_fail(r, "%s: rank %d's result differs bitwise from rank 0's", name, q);
}

static const size_t counts[] = {1, 13, 4099, 65541};

/* Every case on one allocation; returns with r->err set on the first failure. */
static void every_case(rk *r)
{
    size_t most = counts[3] * (size_t)r->n, bytes = (OFF + most + GUARD) * MAX_ELEM;
    void *seg = NULL;
    char *img = malloc(bytes), *got = malloc(bytes);
    hoop_status st = hoop_comm_alloc_shared_cuda(r->comm, bytes, &seg);
    if (st != HOOP_OK || !img || !got) {
        rk_fail(r, "alloc_shared_cuda(%zu): %s", bytes, hoop_last_error());
        goto out;
    }
    if (hoop_comm_is_shared(r->comm, seg, bytes) != r->direct)
        rk_fail(r, "hoop_comm_is_shared = %d, want %d", !r->direct, r->direct);
    hoop_comm_set_algo(r->comm, HOOP_ALGO_DIRECT);
    unsigned salt = 0;
    for (int k = 0; k < C_COUNT && !r->err[0]; k++)
        for (int t = 0; t < HOOP_DTYPE_COUNT_ && !r->err[0]; t++)
            for (int op = 0; op < HOOP_OP_COUNT_ && !r->err[0]; op++) {
                int has_op = k != C_ALLGATHER && k != C_BROADCAST;
                if ((!has_op && op != HOOP_OP_SUM) || (op == HOOP_OP_AVG && !is_float(t))) continue;
                for (size_t j = 0; j < sizeof(counts) / sizeof(counts[0]) && !r->err[0]; j++) {
                    icase c = {k, (hoop_dtype)t, (hoop_op)op, counts[j], salt++};
                    run_case(r, &c, seg, img, got);
                }
            }
    /* The last rank comes late to the free: the others must not free their copies while
     * it still maps them (the host layer's cudaFree fails then, naming it). */
    if (r->rank == r->n - 1) usleep(150 * 1000);
    st = hoop_comm_free_shared_cuda(r->comm, seg);
    if (st != HOOP_OK) rk_fail(r, "free_shared_cuda: %s", hoop_last_error());
out:
    free(img);
    free(got);
}

/* A direct bf16 average of the largest finite value on every rank is that value: the
 * kernel sums in f64 (an f32 sum of two of them is inf). */
static void big_halves(rk *r)
{
    enum { N = 4099 };
    uint16_t x[N + OFF], y[N + OFF];
    void *seg = NULL;
    if (hoop_comm_alloc_shared_cuda(r->comm, sizeof(x), &seg) != HOOP_OK) {
        rk_fail(r, "alloc: %s", hoop_last_error());
        return;
    }
    for (int i = 0; i < N + OFF; i++) x[i] = i % 2 ? 0x7f7f : 0xff7f; /* +-3.39e38 */
    uint16_t *buf = (uint16_t *)seg + OFF;
    if (cc->copy(seg, x, sizeof(x)) != HOOP_OK ||
        hoop_allreduce(r->comm, buf, buf, N, HOOP_DTYPE_BF16, HOOP_OP_AVG, NULL) != HOOP_OK ||
        cc->copy(y, seg, sizeof(y)) != HOOP_OK)
        rk_fail(r, "bf16 average of the largest values: %s", hoop_last_error());
    else if (memcmp(x, y, sizeof(x)) != 0)
        rk_fail(r, "bf16 average of the largest values: not the value itself");
    if (hoop_comm_free_shared_cuda(r->comm, seg) != HOOP_OK)
        rk_fail(r, "free: %s", hoop_last_error());
}

/* Wrong frees are refused, naming the right call. */
static void wrong_frees(rk *r)
{
    void *d = NULL, *h = NULL;
    if (hoop_comm_alloc_shared_cuda(r->comm, 4096, &d) != HOOP_OK ||
        hoop_comm_alloc_shared(r->comm, 4096, &h) != HOOP_OK) {
        rk_fail(r, "alloc: %s", hoop_last_error());
        return;
    }
    if (hoop_comm_free_shared(r->comm, d) != HOOP_ERR_INVALID ||
        !strstr(hoop_last_error(), "hoop_comm_free_shared_cuda"))
        rk_fail(r, "free_shared of device memory: %s", hoop_last_error());
    else if (hoop_comm_free_shared_cuda(r->comm, h) != HOOP_ERR_INVALID ||
             !strstr(hoop_last_error(), "hoop_comm_free_shared"))
        rk_fail(r, "free_shared_cuda of host memory: %s", hoop_last_error());
    else if (hoop_comm_free_shared_cuda(r->comm, (char *)d + 8) != HOOP_ERR_INVALID)
        rk_fail(r, "free_shared_cuda inside the memory: %s", hoop_last_error());
    if (hoop_comm_free_shared_cuda(r->comm, d) != HOOP_OK ||
        hoop_comm_free_shared(r->comm, h) != HOOP_OK)
        rk_fail(r, "free: %s", hoop_last_error());
}

/* The whole run of one rank: a warm-up (the backend, its streams, the stage slots), the
 * leak baseline, every case, the leak check. */
static void rank_run(rk *r)
{
    void *w = NULL;
    float one = 1.0f;
    if (r->stream && rt->stream_create(&r->st) != 0) {
        rk_fail(r, "a stream of its own");
        return;
    }
    /* warm-up: one direct-capable and one staged call on a first allocation */
    if (hoop_comm_alloc_shared_cuda(r->comm, 4096, &w) != HOOP_OK ||
        cc->copy(w, &one, 4) != HOOP_OK ||
        hoop_allreduce(r->comm, w, w, 1, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL) != HOOP_OK ||
        hoop_broadcast(r->comm, w, w, 1, HOOP_DTYPE_F32, 0, NULL) != HOOP_OK ||
        hoop_comm_free_shared_cuda(r->comm, w) != HOOP_OK) {
        rk_fail(r, "warm-up: %s", hoop_last_error());
        return;
    }
    /* (rank 0 may lose the store's connections meanwhile: fewer is no leak) */
    int fds = open_fds(), maps = ipc_mappings();
    every_case(r);
    if (!r->err[0] && r->direct) big_halves(r);
    if (!r->err[0]) wrong_frees(r);
    if (!r->err[0] && r->probe && hx && (open_fds() > fds || ipc_mappings() != maps))
        rk_fail(r, "after free: %d descriptors (%d before), %d IPC mappings (%d before)",
                open_fds(), fds, ipc_mappings(), maps);
}

// ----------------------------------------------------------------- thread-ranks

static void thread_rank(h_rank *h)
{
    rk r = {.comm = h->comm, .rank = h->rank, .n = h->n};
    const int *mode = h->user;
    r.direct = mode[0], r.stream = mode[1];
    rank_run(&r);
    if (r.err[0]) h_fail(h, "%s", r.err);
    if (r.st) rt->stream_destroy(r.st);
}

/* Runs thread-ranks (mode: direct, stream) and checks that the process is left with
 * the descriptors it had and (host layer) no IPC mapping. */
static void run_threads(int n, const char *transport, int direct, int stream)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.timeout_ms = 60000;
    int mode[2] = {direct, stream}, fds = open_fds();
    setenv("HOOP_TRANSPORT", transport, 1);
    run_ranks(n, &cfg, thread_rank, mode);
    ck_assert_int_eq(open_fds(), fds);
    if (hx) ck_assert_int_eq(ipc_mappings(), 0);
}

/* _i: world size 2..4; auto (the copies used through their pointers), then tcp. */
START_TEST(test_threads)
{
    run_threads(_i, "auto", 1, 0);
    run_threads(_i, "tcp", 0, 0);
}
END_TEST

/* The stream form, thread-ranks each on its own stream. */
START_TEST(test_threads_stream)
{
    run_threads(_i, "auto", 1, 1);
}
END_TEST

// ----------------------------------------------------------------- process-ranks

enum { W_CASES = 0, W_STREAM = 1, W_VICTIM_EARLY = 2, W_VICTIM_IN_CALL = 3 };

/* The killed-peer run of one worker: direct all-reduces of 1 MiB; rank 2 dies before its
 * second call (early) or right after issuing it. 0 when this rank behaved as it should. */
static int victim_run(rk *r, int mode)
{
    size_t count = (size_t)1 << 18, bytes = count * 4;
    float *x = malloc(bytes), *y = malloc(bytes);
    void *seg = NULL;
    int seen = 0, bad = 0;
    if (!x || !y || hoop_comm_alloc_shared_cuda(r->comm, bytes, &seg) != HOOP_OK) {
        fprintf(stderr, "rank %d: alloc: %s\n", r->rank, hoop_last_error());
        return 1;
    }
    hoop_comm_set_algo(r->comm, HOOP_ALGO_DIRECT);
    for (int it = 0; it < 3 && !seen && !bad; it++) {
        for (size_t i = 0; i < count; i++) x[i] = (float)((size_t)r->rank + i % 5 + (size_t)it);
        if (cc->copy(seg, x, bytes) != HOOP_OK) return 1;
        if (r->rank == 2 && it == 1 && mode == W_VICTIM_EARLY) raise(SIGKILL);
        hoop_request *req = NULL;
        int64_t t0 = hoop__now_ns();
        hoop_status st =
            hoop_allreduce(r->comm, seg, seg, count, HOOP_DTYPE_F32, HOOP_OP_SUM, &req);
        if (r->rank == 2 && it == 1) raise(SIGKILL);
        if (st == HOOP_OK) st = hoop_wait(req, -1);
        double secs = (double)(hoop__now_ns() - t0) / 1e9;
        if (st == HOOP_ERR_REMOTE && it >= 1 && strstr(hoop_last_error(), "rank 2")) {
            seen = 1;
            if (secs > 2.0)
                fprintf(stderr, "rank %d: %.2f s to see rank 2 die\n", r->rank, secs), bad = 1;
            break;
        }
        if (st != HOOP_OK || cc->copy(y, seg, bytes) != HOOP_OK) {
            fprintf(stderr, "rank %d iteration %d: %s: %s\n", r->rank, it, hoop_status_name(st),
                    hoop_last_error());
            bad = 1;
            break;
        }
        for (size_t i = 0; i < count && !bad; i++)
            if (y[i] != (float)((size_t)r->n * ((size_t)r->n - 1) / 2 +
                                (size_t)r->n * (i % 5 + (size_t)it)))
                fprintf(stderr, "rank %d iteration %d: y[%zu] = %g\n", r->rank, it, i, y[i]),
                    bad = 1;
        /* Every rank has its first result before rank 2 dies: a direct all-reduce ends on
         * one rank while another still reads its buffer, so without this a slow rank 0
         * could rightly see rank 2's death in its first call (seen under load). */
        if (it == 0 && !bad && hoop_barrier(r->comm, NULL) != HOOP_OK) {
            fprintf(stderr, "rank %d: barrier: %s\n", r->rank, hoop_last_error());
            bad = 1;
        }
    }
    if (!seen && !bad) fprintf(stderr, "rank %d: never saw rank 2 die\n", r->rank), bad = 1;
    free(x);
    free(y);
    return bad; /* the segment goes with the failed comm's destroy */
}

/* check_coll_ipc --worker RANK N PORT MODE: one rank of a process run. */
static int worker(char **argv)
{
    int rank = atoi(argv[2]), n = atoi(argv[3]), port = atoi(argv[4]), mode = atoi(argv[5]);
    rk r = {.rank = rank, .n = n, .stream = mode == W_STREAM, .probe = 1};
    const char *tr = getenv("HOOP_TRANSPORT");
    r.direct = !(tr && strcmp(tr, "tcp") == 0);
    h_set_env(rank, n, port, "check-coll-ipc", "60");
    if (hoop__cuda_backend(NULL, &cc) != HOOP_OK || !cc) {
        fprintf(stderr, "rank %d: no CUDA backend: %s\n", rank, hoop_last_error());
        return 2;
    }
    if (hoop_comm_init_env(&r.comm) != HOOP_OK) {
        fprintf(stderr, "rank %d: init: %s\n", rank, hoop_last_error());
        return 2;
    }
    int fds = open_fds(), bad;
    if (mode >= W_VICTIM_EARLY) {
        bad = victim_run(&r, mode);
    } else {
        rank_run(&r);
        if (r.err[0]) fprintf(stderr, "%s\n", r.err);
        bad = r.err[0] != 0;
    }
    if (r.st) rt->stream_destroy(r.st);
    hoop_status st = hoop_comm_destroy(r.comm);
    if (st != HOOP_OK && mode < W_VICTIM_EARLY)
        fprintf(stderr, "rank %d: destroy: %s\n", rank, hoop_last_error()), bad = 1;
    if (hx && ipc_mappings() != 0)
        fprintf(stderr, "rank %d: IPC mappings left after destroy\n", rank), bad = 1;
    if (hx && open_fds() > fds)
        fprintf(stderr, "rank %d: %d descriptors after destroy, %d before init\n", rank, open_fds(),
                fds),
            bad = 1;
    return bad;
}

/* Runs n workers (fork, then exec at once) under transport; victim: the rank that dies
 * by SIGKILL (-1: none). */
static void run_workers(int n, const char *transport, int mode, int victim)
{
    pid_t pid[H_MAX_RANKS];
    int port = h_free_port();
    char a[4][16];
    fflush(NULL);
    for (int q = 0; q < n; q++) {
        snprintf(a[0], 16, "%d", q);
        snprintf(a[1], 16, "%d", n);
        snprintf(a[2], 16, "%d", port);
        snprintf(a[3], 16, "%d", mode);
        pid[q] = fork();
        ck_assert_int_ge(pid[q], 0);
        if (pid[q] == 0) {
            setenv("HOOP_TRANSPORT", transport, 1);
            execl("/proc/self/exe", "check_coll_ipc", "--worker", a[0], a[1], a[2], a[3],
                  (char *)NULL);
            _exit(127);
        }
    }
    for (int q = 0; q < n; q++) {
        int status;
        ck_assert_int_eq(waitpid(pid[q], &status, 0), pid[q]);
        if (q == victim)
            ck_assert_msg(WIFSIGNALED(status), "the victim was not killed");
        else
            ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                          "rank %d of %d (%s) failed: exit %d", q, n, transport,
                          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
}

/* _i: world size 2..4; IPC, then tcp (private memory, staged). */
START_TEST(test_processes)
{
    run_workers(_i, "auto", W_CASES, -1);
    run_workers(_i, "tcp", W_CASES, -1);
}
END_TEST

START_TEST(test_processes_stream)
{
    run_workers(_i, "auto", W_STREAM, -1);
}
END_TEST

/* _i 0: rank 2 of 4 dies before its call; 1: right after issuing it. */
START_TEST(test_killed)
{
    run_workers(4, "auto", _i ? W_VICTIM_IN_CALL : W_VICTIM_EARLY, 2);
}
END_TEST

// ----------------------------------------------------------------- main

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

/* The backend and its test runtime, in this process; 0 when they are not there. */
static int open_backend(void)
{
    if (hoop_device_check(HOOP_DEVICE_CUDA) != HOOP_OK) return 0;
    rt = find_rt();
    if (hoop__cuda_backend(NULL, &cc) != HOOP_OK || !cc || !rt ||
        !HOOP__CUDA_COLL_HAS(cc, ipc_close))
        return 0;
    if (rt->set_lazy) rt->set_lazy(1); /* streams made from now on: the lazy host layer */
    return 1;
}

int main(int argc, char **argv)
{
    const char *hxb = getenv("TEST_CUDA_HX_BACKEND");
    use_test_cuda_backend();
    const char *be = getenv("HOOP_CUDA_BACKEND");
    hx = hxb && be && strcmp(be, hxb) == 0;
    if (argc == 6 && strcmp(argv[1], "--worker") == 0) {
        if (!open_backend()) return 2;
        return worker(argv);
    }
    if (!open_backend()) {
        printf("SKIP: no CUDA device for hoop, or a backend without shared device memory: %s\n",
               hoop_last_error());
        return 77;
    }
    unsetenv("HOOP_ALGO");
    Suite *s = suite_create("coll_ipc");
    TCase *tc = tcase_create("ipc");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_processes, 2, 5);
    tcase_add_loop_test(tc, test_threads, 2, 5);
    tcase_add_loop_test(tc, test_processes_stream, 2, 4);
    tcase_add_loop_test(tc, test_threads_stream, 2, 4);
    tcase_add_loop_test(tc, test_killed, 0, 2);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    if (!hxb) srunner_set_fork_status(sr, CK_NOFORK); /* a real GPU: no CUDA across fork */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
