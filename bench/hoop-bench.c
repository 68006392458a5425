/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench/hoop-bench.c -- nccl-tests' all_reduce_perf & co. for hoop's collectives.
 *
 *   hooprun --nproc-per-node 2 bench/hoop-bench allreduce -b 8 -e 256M -f 2 -d float -o sum
 *
 * The method is nccl-tests' (src/common.cu TimeTest and BenchTime): before the sweep, -w
 * warm-up calls at every size from -b to -e doubling; then for each size (-b, then x -f
 * or + -i, up to -e) and each placement (out-of-place, then in-place): fresh data, one
 * untimed call, a barrier, -n iterations of -m calls each (-z 0: all in flight, waited
 * for at the end; 1: wait and barrier after each iteration; 2: wait after each), time =
 * elapsed / (n x m), combined over ranks as -a says (0 rank 0's, 1 mean, 2 min, 3 max);
 * algbw = size / time, busbw = algbw x nccl-tests' factor. Then -c check iterations on
 * fresh data, each compared with bench_data.c's exact reference, with the guard bytes
 * after both buffers and an out-of-place call's send buffer. The ranks combine a row's
 * times and wrong counts through rank 0's store (agree_row), never through the
 * collectives under test, as nccl-tests does through MPI. -N repeats the sweep;
 * -d all / -o all run it for every type / op. Rank 0 prints (bench_report.c); a wrong
 * element makes the exit code 1 (a stop signal's too), bad flags or environment 2.
 * --device cuda: the calls get device buffers (the CUDA backend's allocator, on the
 * rank's GPU; with -R, hoop_comm_alloc_shared_cuda's, which the ranks map through CUDA
 * IPC), data goes there from pinned host mirrors before each untimed call and comes back
 * for each check, and each row adds the pinned host<->device copy rates at its size.
 * -G N (nccl-tests' cudaGraphLaunches): the timed loop's calls, in their stream form on a
 * stream of the rank's, are captured into a CUDA graph that is launched N times (time per
 * call = the launches' time / (n x m x N)), and each check replays a graph of one captured
 * call. Without MASTER_ADDR and WORLD_SIZE it runs alone (world_size 1). SIGINT and SIGTERM
 * stop every rank after the same row, and rank 0 ends its report and files.
 * Single-threaded (but for the signal flag); owns its comm, buffers and output files.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"

#include "bench/bench.h"
#include "bench/bench_cli.h"
#include "bootstrap/store_proto.h"
#include "collectives/coll.h"
#include "collectives/comm.h"
#include "core/backend.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/memroom.h"
#include "core/stop.h"
#include "cuda/coll.h"
#include "hoop/collectives.h"
#include "hoop/comm.h"
#include "hoop/store.h"
#include "hoop/tensor.h"
#include "hoop/version.h"

/* -z 0 keeps at most this many calls in flight (NCCL's stream has a bounded queue too). */
#define BENCH_WINDOW 64

typedef struct bench_ctx {
    bench_opts o;
    hoop_comm *comm;
    bench_case bc;
    void *send, *recv; /* the data; with --device cuda, pinned mirrors of dsend / drecv */
    size_t sbytes, rbytes;
    void *dsend, *drecv;                /* --device cuda: the buffers the calls are given */
    const struct hoop__cuda_coll *cuda; /* --device cuda: the backend's device memory ops */
    void *stream;                       /* -G: the stream the calls are captured on */
    char dev[64];                       /* --device cuda: "cuda:0 NVIDIA H200, 139.8 GiB" */
    bench_report rep;
    char json_path[4096], knobs[512];
    int json_made, csv_made; /* rank 0 created the -J / --csv file in this run */
    int stopped;          /* the stop signal the ranks agreed on after a row (agree_row), 0 none */
    int64_t wrong_checks; /* checks that found wrong values, summed over rows (every rank) */
} bench_ctx;

// ----- stop signals ------------------------------------------------------------------

/* Whether this process says that it took a stop signal: rank 0 (a world of one too);
 * set before the handler is installed. */
static volatile sig_atomic_t stop_talks;

/* The first SIGINT or SIGTERM (hoop__stop_requested). The ranks agree on it after each
 * row and stop after the same row, so that rank 0 closes its report and files (-N 0 runs
 * until stopped); rank 0 says so at once, since a row may take long (or never end: a
 * stopped peer). Its copies (timeout(1), Slurm and hooprun each sending it) are the same
 * request; only a later one stops at once. */
static void on_stop_signal(int sig)
{
    static const char int_line[] =
        "hoop-bench: stopping after this row (SIGINT); send it again to stop now\n";
    static const char term_line[] =
        "hoop-bench: stopping after this row (SIGTERM); send it again to stop now\n";
    int kind = hoop__stop_request(sig);
    if (kind == HOOP__STOP_FIRST && stop_talks) { /* write(2): async-signal-safe */
        int saved = errno;
        ssize_t n = sig == SIGINT ? write(STDERR_FILENO, int_line, sizeof(int_line) - 1)
                                  : write(STDERR_FILENO, term_line, sizeof(term_line) - 1);
        (void)n;
        errno = saved;
    }
    if (kind == HOOP__STOP_AGAIN) {
        signal(sig, SIG_DFL); /* a second one: stop now, as the default would */
        raise(sig);
    }
}

/* From the sweep on; before, the default effect: there is nothing to close. rank: this
 * process's (only rank 0 talks). */
static void catch_stop_signals(int rank)
{
    stop_talks = rank == 0;
    struct sigaction sa = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* Only rank 0 (or a process outside hooprun) talks; the others stay silent. */
static int is_quiet(void)
{
    const char *r = getenv("RANK");
    return r != NULL && *r != '\0' && strcmp(r, "0") != 0;
}

static int bad_flag(const char *fmt, ...)
{
    /* A silent rank lingers a moment so that rank 0's message is out before the launcher
     * sees this rank fail and stops everyone. */
    if (is_quiet()) {
        usleep(300 * 1000);
        return 2;
    }
    va_list ap;
    va_start(ap, fmt);
    fputs("hoop-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

/* The first failure's line, for the JSON's "errors" (bench_report_fail). */
static char failure[700];

static int failed(const bench_ctx *c, const char *what, hoop_status st)
{
    char line[sizeof(failure)];
    snprintf(line, sizeof(line), "rank %d: %s failed: %s (%s)", c->bc.rank, what, hoop_last_error(),
             hoop_status_name(st));
    fprintf(stderr, "hoop-bench: %s\n", line);
    if (!failure[0]) snprintf(failure, sizeof(failure), "%s", line);
    return 1;
}

// ----- the algorithm labels --------------------------------------------------------

static const char *algo_label(const bench_ctx *c)
{
    if (c->o.algo_set) return hoop_algo_name(c->o.algo);
    /* HOOP_ALGO in any case (RING, Direct), read once by the options: its canonical name */
    hoop_algo a = c->o.env_algo;
    if (a == HOOP_ALGO_DIRECT && !c->o.reg) return "auto"; /* direct needs shared buffers */
    return hoop_algo_name(a);
}

/* The algorithm is direct, or auto on shared buffers (which may pick direct). */
static int may_direct(const bench_ctx *c)
{
    const char *a = algo_label(c);
    return strcmp(a, "direct") == 0 || (c->o.reg && strcmp(a, "auto") == 0);
}

/* Whether a row's algorithm is worth naming: all-reduce under auto, and every
 * collective that can run direct (out-of-place calls and plain buffers fall back to the
 * ring or the cost model). */
static int algo_known(const bench_ctx *c)
{
    bench_coll k = c->o.coll;
    int has = k == BENCH_ALLREDUCE || k == BENCH_ALLGATHER || k == BENCH_REDUCESCATTER;
    return (k == BENCH_ALLREDUCE && strcmp(algo_label(c), "auto") == 0) || (has && may_direct(c));
}

/* "ring", or "ring|direct" when the in-place calls run direct: as hoop_allreduce & co.
 * pick (in place on shared memory, from these sizes up under auto). Broadcast and reduce
 * always run their chain along the ring, and all-gather and reduce-scatter the ring
 * unless direct may be picked, whatever --algo says. */
static const char *row_algo(const bench_ctx *c, const bench_layout *L, char *buf, size_t len)
{
    bench_coll k = c->o.coll;
    if (k == BENCH_BROADCAST || k == BENCH_REDUCE || (k != BENCH_ALLREDUCE && !may_direct(c)))
        return "ring";
    const char *a = c->o.coll != BENCH_ALLREDUCE
                        ? "ring"
                        : hoop_algo_name(hoop__comm_algo_pick(c->comm, HOOP_ALGO_AUTO, L->bytes));
    int direct = strcmp(algo_label(c), "direct") == 0;
    size_t min = direct ? 0 : c->bc.world_size == 2 ? 8 << 10 : 64 << 10;
    void *whole = c->o.coll == BENCH_REDUCESCATTER ? (c->o.device ? c->dsend : c->send)
                                                   : (c->o.device ? c->drecv : c->recv);
    if (L->bytes < min || !hoop_comm_is_shared(c->comm, whole, L->bytes)) return a;
    snprintf(buf, len, "%s|direct", a);
    return buf;
}

// ----- device buffers ---------------------------------------------------------------

/* The buffer a call is given for host pointer h into send / recv: itself on the host, its
 * twin in dsend / drecv (same offset) with --device cuda. */
static void *call_ptr(const bench_ctx *c, void *h)
{
    char *p = h, *s = c->send, *r = c->recv;
    if (!c->o.device) return h;
    if (p >= s && p <= s + c->sbytes) return (char *)c->dsend + (p - s);
    return (char *)c->drecv + (p - r);
}

/* bench_prepare, then (--device cuda) the data copied to the device buffers. */
static hoop_status prepare(bench_ctx *c, const bench_layout *L, int in_place, void **s, void **r)
{
    size_t elt = hoop_dtype_size(c->bc.dtype);
    bench_prepare(&c->bc, L, in_place, c->send, c->recv, s, r);
    if (c->o.device) { /* the guards too (alloc_buffers leaves room for them) */
        HOOP_CHECK(c->cuda->copy(c->dsend, c->send, L->send_elems * elt + BENCH_GUARD_BYTES));
        HOOP_CHECK(c->cuda->copy(c->drecv, c->recv, L->recv_elems * elt + BENCH_GUARD_BYTES));
    }
    *s = call_ptr(c, *s);
    *r = call_ptr(c, *r);
    return HOOP_OK;
}

/* --device cuda: the device buffers copied back to the host mirrors (a no-op on the
 * host), guards included, so that the checks read what the call left. */
static hoop_status fetch(bench_ctx *c, const bench_layout *L)
{
    size_t elt = hoop_dtype_size(c->bc.dtype);
    if (!c->o.device) return HOOP_OK;
    HOOP_CHECK(c->cuda->copy(c->send, c->dsend, L->send_elems * elt + BENCH_GUARD_BYTES));
    return c->cuda->copy(c->recv, c->drecv, L->recv_elems * elt + BENCH_GUARD_BYTES);
}

/* The host pointer of call pointer d (the inverse of call_ptr). */
static void *host_ptr(const bench_ctx *c, void *d)
{
    char *p = d, *s = c->dsend;
    if (!c->o.device) return d;
    if (p >= s && p <= s + c->sbytes) return (char *)c->send + (p - s);
    return (char *)c->recv + (p - (char *)c->drecv);
}

/* --device cuda: the pinned host->device and device->host copy rates (GB/s) of the row's
 * size, the mean of a few timed copies after an untimed one, in the larger buffer. */
static hoop_status copy_rates(bench_ctx *c, const bench_layout *L, bench_result *row)
{
    size_t elt = hoop_dtype_size(c->bc.dtype), bytes = L->bytes;
    int64_t reps = c->o.iters < 20 ? c->o.iters : 20;
    int big_send = L->send_elems >= L->recv_elems;
    void *h = big_send ? c->send : c->recv, *d = big_send ? c->dsend : c->drecv;
    if (bytes > (big_send ? L->send_elems : L->recv_elems) * elt)
        bytes = (big_send ? L->send_elems : L->recv_elems) * elt;
    for (int dir = 0; dir < 2; dir++) {
        void *dst = dir ? h : d, *src = dir ? d : h;
        HOOP_CHECK(c->cuda->copy(dst, src, bytes));
        int64_t t0 = hoop__now_ns();
        for (int64_t k = 0; k < reps; k++) HOOP_CHECK(c->cuda->copy(dst, src, bytes));
        double ns = (double)(hoop__now_ns() - t0);
        *(dir ? &row->d2h : &row->h2d) = ns > 0 ? (double)bytes * (double)reps / ns : 0;
    }
    return HOOP_OK;
}

// ----- timing and checking ---------------------------------------------------------

static hoop_status issue(bench_ctx *c, const bench_layout *L, void *s, void *r, hoop_request **req)
{
    const bench_case *b = &c->bc;
    switch (b->coll) {
    case BENCH_ALLREDUCE: return hoop_allreduce(c->comm, s, r, L->count, b->dtype, b->op, req);
    case BENCH_BROADCAST: return hoop_broadcast(c->comm, s, r, L->count, b->dtype, b->root, req);
    case BENCH_REDUCE: return hoop_reduce(c->comm, s, r, L->count, b->dtype, b->op, b->root, req);
    case BENCH_ALLGATHER: return hoop_allgather(c->comm, s, r, L->count, b->dtype, req);
    default: return hoop_reduce_scatter(c->comm, s, r, L->count, b->dtype, b->op, req);
    }
}

/* -G: the call ordered on the rank's stream (captured: the stream is being captured). */
static hoop_status issue_stream(bench_ctx *c, const bench_layout *L, void *s, void *r)
{
    const bench_case *b = &c->bc;
    hoop_stream *st = (hoop_stream *)c->stream;
    switch (b->coll) {
    case BENCH_ALLREDUCE:
        return hoop_allreduce_stream(c->comm, s, r, L->count, b->dtype, b->op, st);
    case BENCH_BROADCAST:
        return hoop_broadcast_stream(c->comm, s, r, L->count, b->dtype, b->root, st);
    case BENCH_REDUCE:
        return hoop_reduce_stream(c->comm, s, r, L->count, b->dtype, b->op, b->root, st);
    case BENCH_ALLGATHER: return hoop_allgather_stream(c->comm, s, r, L->count, b->dtype, st);
    default: return hoop_reduce_scatter_stream(c->comm, s, r, L->count, b->dtype, b->op, st);
    }
}

/* -G: n calls captured into a CUDA graph (*graph, NULL on failure). */
static hoop_status capture(bench_ctx *c, const bench_layout *L, void *s, void *r, int64_t n,
                           void **graph)
{
    hoop_status st = c->cuda->graph_begin(c->stream);
    if (st != HOOP_OK) return st;
    for (int64_t k = 0; k < n && st == HOOP_OK; k++) st = issue_stream(c, L, s, r);
    hoop_status end = c->cuda->graph_end(c->stream, graph); /* also after a failed call */
    if (st != HOOP_OK) {
        c->cuda->graph_free(*graph);
        *graph = NULL;
    }
    return st != HOOP_OK ? st : end;
}

/* -G: graph launched n times on the rank's stream, then the stream waited for; a replay's
 * failure comes from hoop_stream_status. */
static hoop_status replay(bench_ctx *c, void *graph, int64_t n)
{
    hoop_status st = HOOP_OK;
    for (int64_t k = 0; k < n && st == HOOP_OK; k++) st = c->cuda->graph_launch(graph, c->stream);
    hoop_status sync = c->cuda->stream_sync(c->stream); /* whatever was launched */
    if (st == HOOP_OK) st = sync;
    return st == HOOP_OK ? hoop_stream_status(c->comm) : st;
}

/* n calls with up to BENCH_WINDOW in flight; returns when all have finished (or one
 * timed out) with the first failure. */
static hoop_status run_calls(bench_ctx *c, const bench_layout *L, void *s, void *r, int64_t n)
{
    hoop_request *q[BENCH_WINDOW];
    int64_t issued = 0, done = 0;
    hoop_status st, first = HOOP_OK;
    while (done < issued || (issued < n && first == HOOP_OK)) {
        if (issued < n && first == HOOP_OK && issued - done < BENCH_WINDOW) {
            if ((st = issue(c, L, s, r, &q[issued % BENCH_WINDOW])) != HOOP_OK)
                first = st;
            else
                issued++;
            continue;
        }
        st = hoop_wait(q[done++ % BENCH_WINDOW], -1);
        if (st != HOOP_OK && first == HOOP_OK) first = st;
        if (st == HOOP_ERR_TIMEOUT) return st; /* the rest would wait as long; destroy ends them */
    }
    return first;
}

/* -G (nccl-tests' BenchTime with cudaGraphLaunches): the -n x -m calls captured into a
 * CUDA graph, a barrier, then the graph launched -G times: *us = the time from the first
 * launch to the stream's end, per call. */
static hoop_status time_graph(bench_ctx *c, const bench_layout *L, void *s, void *r, double *us)
{
    const bench_opts *o = &c->o;
    void *graph = NULL;
    int64_t calls = o->iters * o->agg;
    HOOP_CHECK(capture(c, L, s, r, calls, &graph));
    hoop_status st = hoop_barrier(c->comm, NULL);
    int64_t t0 = hoop__now_ns();
    if (st == HOOP_OK) st = replay(c, graph, o->graphs);
    *us = (double)(hoop__now_ns() - t0) / 1e3 / (double)(calls * o->graphs);
    c->cuda->graph_free(graph);
    return st;
}

/* The timed loop of one placement; *us = mean time per call on this rank. */
static hoop_status time_calls(bench_ctx *c, const bench_layout *L, void *s, void *r, double *us)
{
    const bench_opts *o = &c->o;
    hoop_status st = HOOP_OK;
    if (o->graphs) return time_graph(c, L, s, r, us);
    int64_t t0 = hoop__now_ns();
    if (o->blocking == BENCH_Z_ASYNC) st = run_calls(c, L, s, r, o->iters * o->agg);
    for (int64_t i = 0; o->blocking != BENCH_Z_ASYNC && i < o->iters && st == HOOP_OK; i++) {
        st = run_calls(c, L, s, r, o->agg);
        if (st == HOOP_OK && o->blocking == BENCH_Z_BARRIER) st = hoop_barrier(c->comm, NULL);
    }
    *us = (double)(hoop__now_ns() - t0) / 1e3 / (double)(o->iters * o->agg);
    return st;
}

/* Says once per run and kind, on this rank's stderr, what a check found besides wrong
 * results: the call wrote past the end of a buffer, or into its send buffer. */
static void say_damage(const bench_ctx *c, const bench_layout *L, int in_place, size_t guard,
                       size_t sent)
{
    static int said_guard, said_sent;
    const char *place = in_place ? "in-place" : "out-of-place";
    if (guard && !said_guard++)
        fprintf(stderr,
                "hoop-bench: rank %d: %s %s of %zu bytes wrote past the end of its buffers: "
                "%zu of the %d bytes after them changed (counted as wrong elements)\n",
                c->bc.rank, bench_coll_name(c->o.coll), place, L->bytes, guard, BENCH_GUARD_BYTES);
    if (sent && !said_sent++)
        fprintf(stderr,
                "hoop-bench: rank %d: %s %s of %zu bytes changed %zu elements of its send "
                "buffer, which a collective only reads (counted as wrong elements)\n",
                c->bc.rank, bench_coll_name(c->o.coll), place, L->bytes, sent);
}

/* -c calls on fresh data, each compared with the reference: this rank's wrong elements
 * in the first call that had any (with bytes written past the buffers' ends, and
 * elements of an out-of-place call's send buffer changed), in *wrong. Every check runs
 * whatever the earlier ones found, so that every rank makes the same calls. With -G the
 * call is captured once and each check is a replay of that graph. */
static hoop_status check_calls(bench_ctx *c, const bench_layout *L, int in_place, int64_t *wrong)
{
    void *s, *r, *graph = NULL;
    hoop_status st = HOOP_OK;
    *wrong = 0;
    for (int64_t k = 0; k < c->o.check && st == HOOP_OK; k++) {
        if ((st = prepare(c, L, in_place, &s, &r)) != HOOP_OK) break;
        if (c->o.graphs && !graph && (st = capture(c, L, s, r, 1, &graph)) != HOOP_OK) break;
        st = c->o.graphs ? replay(c, graph, 1) : issue(c, L, s, r, NULL);
        if (st == HOOP_OK) st = fetch(c, L);
        if (st != HOOP_OK || *wrong) continue;
        size_t guard, sent;
        bench_count_damage(&c->bc, L, in_place, c->send, c->recv, &guard, &sent);
        say_damage(c, L, in_place, guard, sent);
        *wrong = (int64_t)(bench_count_wrong(&c->bc, L, host_ptr(c, r)) + guard + sent);
    }
    if (graph) c->cuda->graph_free(graph);
    return st;
}

/* What each rank brings to a row's verdict. */
typedef struct row_share {
    double us[2];     /* this rank's time per call, out-of-place and in-place */
    int64_t wrong[2]; /* bench_count_wrong's and check_calls' (-1: no check) */
    int32_t stop;     /* the stop signal this rank got, 0 none */
    int32_t pad;
} row_share;

/* What every rank learns of a row (fold_row). */
typedef struct row_verdict {
    double us[2];      /* the row's time per call, combined as -a says */
    int64_t wrong[2];  /* wrong elements summed over ranks (-1: no check) */
    int32_t errors[2]; /* ranks that saw any */
    int32_t stop, pad; /* the highest stop signal any rank got */
} row_verdict;

/* Folds every rank's row_share (arg: the bench) into a row_verdict. */
static hoop_status fold_row(void *arg, const void *blobs, int n, void *answer)
{
    const bench_ctx *c = arg;
    const row_share *all = blobs;
    row_verdict *v = answer;
    memset(v, 0, sizeof(*v));
    for (int p = 0; p < 2; p++) {
        double t = c->o.average == BENCH_AVG_RANK0 ? all[0].us[p] : 0;
        v->wrong[p] = all[0].wrong[p] < 0 ? -1 : 0; /* every rank checks, or none */
        for (int q = 0; q < n; q++) {
            double u = all[q].us[p];
            if (c->o.average == BENCH_AVG_MEAN) t += u / n;
            if (c->o.average == BENCH_AVG_MIN && (q == 0 || u < t)) t = u;
            if (c->o.average == BENCH_AVG_MAX && (q == 0 || u > t)) t = u;
            if (all[q].wrong[p] > 0) v->wrong[p] += all[q].wrong[p], v->errors[p]++;
            if (all[q].stop > v->stop) v->stop = all[q].stop;
        }
        v->us[p] = t;
    }
    return HOOP_OK;
}

/* The row's verdict, agreed through rank 0's store rather than a collective (as
 * nccl-tests uses MPI for it): a collective under test, or the executor under it, that
 * computes wrong results would also corrupt the verdict on its own results. Rank 0
 * folds every rank's share and answers (hoop__store_gather_fold: O(world_size) through
 * the store a row, where an all-gather moved world_size^2 shares). Fills the row's times
 * (-a: rank 0's, or the mean, min or max over ranks), wrong elements summed over ranks
 * and the ranks that saw any, and *stop, the highest stop signal any rank got (every
 * rank then stops after the same row). */
static hoop_status agree_row(bench_ctx *c, const row_share *mine, bench_result *row, int *stop)
{
    int n = c->bc.world_size;
    row_verdict v;
    if (n > 1) {
        int64_t timeout_ms;
        hoop_store *store = hoop__comm_env_store(c->comm);
        if (store == NULL)
            return HOOP_ERROR(HOOP_ERR_INTERNAL, "hoop-bench: the communicator has no store");
        HOOP_CHECK(hoop__env_ms("HOOP_TIMEOUT", &timeout_ms));
        HOOP_CHECK(hoop__store_gather_fold(store, "hoop-bench/row", mine, sizeof(*mine), fold_row,
                                           c, &v, sizeof(v), NULL, timeout_ms, NULL));
    } else {
        HOOP_CHECK(fold_row(c, mine, 1, &v));
    }
    *stop = v.stop;
    for (int p = 0; p < 2; p++) {
        row->wrong[p] = v.wrong[p];
        row->errors[p] = v.errors[p];
        row->time_us[p] = v.us[p];
        row->algbw[p] = v.us[p] > 0 ? (double)row->bytes / (v.us[p] * 1e3) : 0;
        row->busbw[p] = row->algbw[p] * bench_bus_factor(c->o.coll, n);
    }
    return HOOP_OK;
}

/* One placement of one size: data, one untimed call, barrier, timed calls, checks;
 * this rank's time and wrong elements go into share. */
static int run_placement(bench_ctx *c, const bench_layout *L, int p, row_share *share)
{
    void *s, *r;
    hoop_status st;
    const char *what = bench_coll_name(c->o.coll);
    if ((st = prepare(c, L, p, &s, &r)) != HOOP_OK) return failed(c, "preparing the data", st);
    if ((st = issue(c, L, s, r, NULL)) != HOOP_OK ||
        (st = hoop_barrier(c->comm, NULL)) != HOOP_OK ||
        (st = time_calls(c, L, s, r, &share->us[p])) != HOOP_OK)
        return failed(c, what, st);
    share->wrong[p] = -1;
    if (c->o.check && (st = check_calls(c, L, p, &share->wrong[p])) != HOOP_OK)
        return failed(c, "check", st);
    return 0;
}

static int run_size(bench_ctx *c, size_t size)
{
    char algo[32];
    bench_layout L =
        bench_layout_of(c->o.coll, size, hoop_dtype_size(c->bc.dtype), c->bc.world_size);
    bench_result row = {.bytes = L.bytes,
                        .count = L.count,
                        .dtype = c->bc.dtype,
                        .op = c->bc.op,
                        .wrong = {-1, -1},
                        .root = c->bc.root};
    if (algo_known(c) || c->o.coll != BENCH_ALLREDUCE)
        row.algo = row_algo(c, &L, algo, sizeof(algo));
    hoop_status st;
    row_share share = {0};
    for (int p = 0; p < 2; p++)
        if (run_placement(c, &L, p, &share) != 0) return 1;
    if (c->o.device && (st = copy_rates(c, &L, &row)) != HOOP_OK)
        return failed(c, "timing host<->device copies", st);
    share.stop = hoop__stop_requested();
    if ((st = agree_row(c, &share, &row, &c->stopped)) != HOOP_OK)
        return failed(c, "agreeing on the row's figures (through rank 0's store)", st);
    c->wrong_checks += row.errors[0] + row.errors[1];
    if (c->bc.rank == 0) bench_report_row(&c->rep, &row);
    return 0;
}

/* nccl-tests' warm-up: -w out-of-place calls at every size from -b to -e, doubling. */
static int warm_up(bench_ctx *c)
{
    void *s, *r;
    hoop_status st;
    size_t elt = hoop_dtype_size(c->bc.dtype);
    for (uint64_t size = (uint64_t)c->o.minb; c->o.warmup && size <= (uint64_t)c->o.maxb;
         size *= 2) {
        bench_layout L = bench_layout_of(c->o.coll, (size_t)size, elt, c->bc.world_size);
        if ((st = prepare(c, &L, 0, &s, &r)) != HOOP_OK ||
            (st = run_calls(c, &L, s, r, c->o.warmup)) != HOOP_OK)
            return failed(c, "warm-up", st);
    }
    return 0;
}

/* The sweep for the current type and op, -N times (0: until killed). */
static int sweep_one(bench_ctx *c)
{
    int rc = warm_up(c);
    for (int64_t cycle = 0; rc == 0 && !c->stopped && (c->o.cycles == 0 || cycle < c->o.cycles);
         cycle++) {
        uint64_t s = (uint64_t)c->o.minb;
        do rc = run_size(c, (size_t)s);
        while (rc == 0 && !c->stopped && bench_next_size(&c->o, s, &s));
    }
    return rc;
}

/* Every type of -d and op of -o (an integer type with avg is skipped: hoop refuses it),
 * and with -r all every root, as nccl-tests nests them. */
static int sweep(bench_ctx *c)
{
    int nops = bench_has_op(c->o.coll) ? c->o.nops : 1, rc = 0;
    int nroots = bench_has_root(c->o.coll) && c->o.all_roots ? c->bc.world_size : 1;
    for (int d = 0; rc == 0 && !c->stopped && d < c->o.ndtypes; d++)
        for (int k = 0; rc == 0 && !c->stopped && k < nops; k++) {
            c->bc.dtype = c->o.dtypes[d];
            c->bc.op = c->o.ops[k];
            if (bench_has_op(c->o.coll) && c->bc.op == HOOP_OP_AVG && c->bc.dtype >= HOOP_DTYPE_I32)
                continue;
            for (int root = 0; rc == 0 && !c->stopped && root < nroots; root++) {
                if (nroots > 1) c->bc.root = root;
                rc = sweep_one(c);
            }
        }
    /* Rank 0's store serves the last row's verdict (agree_row) until every rank has read
     * it: nobody goes on to hoop_comm_destroy, which closes that store, before then. */
    hoop_status st;
    if (rc == 0 && c->bc.world_size > 1 && (st = hoop_barrier(c->comm, NULL)) != HOOP_OK)
        rc = failed(c, "the closing barrier", st);
    /* Stopped: 128 + the signal, unless a row had wrong values: those exit 1 on every
     * rank, stopped or not (a stop must not hide what the run is for). */
    if (rc == 0 && c->stopped) rc = c->wrong_checks ? 1 : 128 + c->stopped;
    if ((rc != 0 && !c->stopped) || c->bc.rank != 0) return rc;
    char note[96];
    if (c->stopped) {
        snprintf(note, sizeof(note), "stopped by %s after %" PRId64 " rows",
                 c->stopped == SIGINT    ? "SIGINT"
                 : c->stopped == SIGTERM ? "SIGTERM"
                                         : "a signal",
                 c->rep.rows);
        c->rep.stop_note = note;
    }
    int64_t failures = bench_report_end(&c->rep); /* the footer says which; stderr too */
    if (c->rep.errors)
        fprintf(stderr,
                "hoop-bench: wrong results: %" PRId64 " failed check%s (#wrong, and the "
                "footer's Out of bounds values)\n",
                c->rep.errors, c->rep.errors == 1 ? "" : "s");
    if (failures > c->rep.errors)
        fprintf(stderr,
                "hoop-bench: the average busbw is below 0.9 x NCCL_TESTS_MIN_BW=%g GB/s (the "
                "footer's FAILED)\n",
                c->o.min_bw);
    return rc ? rc : failures != 0;
}

// ----- set-up ----------------------------------------------------------------------

/* Joins the job (env:// under hooprun) or, without MASTER_ADDR and WORLD_SIZE, runs as
 * a world of one. Returns 0, 1 or 2 (bad environment). */
static int join(bench_ctx *c)
{
    hoop_status st;
    hoop_rendezvous *rv = NULL;
    /* env:// set (hooprun), or a task of an srun step: join; otherwise run alone, with
     * the HOOP_* settings checked all the same. */
    if (!hoop__env_dist_wanted()) {
        if ((st = hoop__env_check_all()) != HOOP_OK) {
            fprintf(stderr, "hoop-bench: %s\n", hoop_last_error());
            return 2;
        }
        hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
        cfg.rank = 0, cfg.world_size = 1;
        if ((st = hoop_rendezvous_new(&rv, 1)) == HOOP_OK) {
            cfg.rendezvous = rv;
            st = hoop_comm_init(&c->comm, &cfg);
            hoop_rendezvous_free(rv);
        }
    } else {
        st = hoop_comm_init_env(&c->comm);
    }
    if (st != HOOP_OK) { /* a bad, unsupported or disagreeing setting is the caller's: 2 */
        fprintf(stderr, "hoop-bench: %s\n", hoop_last_error());
        return hoop__store_exit_code(st);
    }
    c->bc.rank = hoop_comm_rank(c->comm);
    c->bc.world_size = hoop_comm_world_size(c->comm);
    return 0;
}

/* The buffers for -e's size do not fit in memory: the flag is named, exit 2 (exit 1 is
 * for collectives that failed or were wrong). */
static int no_room(const bench_ctx *c, size_t sb, size_t rb)
{
    fprintf(stderr,
            "hoop-bench: rank %d: cannot allocate %zu + %zu bytes of buffers for -e %lld bytes: "
            "give a smaller -e\n",
            c->bc.rank, sb, rb, (long long)c->o.maxb);
    return 2;
}

/* --device cuda: device buffers of sbytes / rbytes and their pinned host mirrors. */
static int alloc_device(bench_ctx *c)
{
    hoop_status st;
    if (posix_memalign(&c->send, 4096, c->sbytes) || posix_memalign(&c->recv, 4096, c->rbytes))
        return no_room(c, c->sbytes, c->rbytes);
    if ((st = c->cuda->host_register(c->send, c->sbytes)) != HOOP_OK ||
        (st = c->cuda->host_register(c->recv, c->rbytes)) != HOOP_OK)
        return failed(c, "page-locking the host buffers", st);
    if (c->o.reg) { /* -R: memory the ranks map (CUDA IPC), so in-place calls run direct */
        if ((st = hoop_comm_alloc_shared_cuda(c->comm, c->sbytes, &c->dsend)) != HOOP_OK ||
            (st = hoop_comm_alloc_shared_cuda(c->comm, c->rbytes, &c->drecv)) != HOOP_OK)
            return failed(c, "hoop_comm_alloc_shared_cuda", st);
        return 0;
    }
    if ((st = c->cuda->dev_alloc(&c->dsend, c->sbytes)) != HOOP_OK ||
        (st = c->cuda->dev_alloc(&c->drecv, c->rbytes)) != HOOP_OK)
        return failed(c, "allocating device buffers", st);
    if (c->o.graphs && !HOOP__CUDA_COLL_HAS(c->cuda, graph_free)) {
        fprintf(stderr,
                "hoop-bench: rank %d: -G: the CUDA backend cannot capture collectives "
                "(older than this hoop-bench)\n",
                c->bc.rank);
        return 2;
    }
    if (c->o.graphs && (st = c->cuda->stream_new(&c->stream)) != HOOP_OK)
        return failed(c, "making the stream for -G", st);
    return 0;
}

/* --device cuda: the CUDA backend and this rank's GPU. 2 when none can be had (the
 * environment's to fix), with the reason. */
static int open_device(bench_ctx *c)
{
    hoop_status st;
    const struct hoop__kern *kern;
    if ((st = hoop_device_check(HOOP_DEVICE_CUDA)) != HOOP_OK ||
        (st = hoop__cuda_backend(&kern, &c->cuda)) != HOOP_OK ||
        (st = hoop_device_describe(HOOP_DEVICE_CUDA, c->dev, sizeof(c->dev))) != HOOP_OK) {
        fprintf(stderr, "hoop-bench: rank %d: --device cuda: %s\n", c->bc.rank, hoop_last_error());
        return 2;
    }
    if (c->cuda == NULL) {
        fprintf(stderr, "hoop-bench: rank %d: --device cuda: the CUDA backend has no collectives\n",
                c->bc.rank);
        return 2;
    }
    return 0;
}

/* The send and receive buffers' bytes, room for every type of the sweep: the layout in
 * bytes of elements of one byte bounds the layout of any wider type at the same size. */
static void buffer_bytes(const bench_ctx *c, size_t *sb, size_t *rb)
{
    bench_layout L = bench_layout_of(c->o.coll, (size_t)c->o.maxb, 1, c->bc.world_size);
    *sb = L.send_elems + 64, *rb = L.recv_elems + 64;
}

static int alloc_buffers(bench_ctx *c)
{
    size_t sb, rb;
    buffer_bytes(c, &sb, &rb);
    c->sbytes = sb, c->rbytes = rb;
    if (c->o.device) return alloc_device(c);
    if (c->o.reg) {
        hoop_status st = hoop_comm_alloc_shared(c->comm, sb, &c->send);
        if (st == HOOP_OK) st = hoop_comm_alloc_shared(c->comm, rb, &c->recv);
        if (st == HOOP_ERR_NOMEM) {
            fprintf(stderr, "hoop-bench: rank %d: %s\n", c->bc.rank, hoop_last_error());
            return no_room(c, sb, rb);
        }
        return st == HOOP_OK ? 0 : failed(c, "hoop_comm_alloc_shared", st);
    }
    if (posix_memalign(&c->send, 4096, sb) || posix_memalign(&c->recv, 4096, rb))
        return no_room(c, sb, rb);
    return 0;
}

static const char *env_or_default(const char *name, char *buf, size_t len)
{
    const char *v = getenv(name);
    int64_t x;
    if (v != NULL && *v != '\0') return v;
    if (hoop__env_int(name, &x) != HOOP_OK) return "(default)";
    snprintf(buf, len, "%" PRId64 " (default)", x);
    return buf;
}

static void describe_knobs(bench_ctx *c)
{
    char b1[64], b2[64], b3[64], b4[64];
    const char *ifn = getenv("HOOP_SOCKET_IFNAME"), *tr = getenv("HOOP_TRANSPORT");
    /* HOOP_IB_REG_CACHE: under ib, whether each call registers its buffers (1) or the
     * registrations of the first call serve the rest (2) */
    snprintf(c->knobs, sizeof(c->knobs),
             "HOOP_CHUNK_BYTES=%s  HOOP_TCP_NSOCKS=%s  HOOP_SHM_BYTES=%s  HOOP_TRANSPORT=%s  "
             "HOOP_SOCKET_IFNAME=%s  HOOP_IB_REG_CACHE=%s",
             env_or_default("HOOP_CHUNK_BYTES", b1, sizeof(b1)),
             env_or_default("HOOP_TCP_NSOCKS", b2, sizeof(b2)),
             env_or_default("HOOP_SHM_BYTES", b3, sizeof(b3)), tr && *tr ? tr : "(default)",
             ifn && *ifn ? ifn : "(default)", env_or_default("HOOP_IB_REG_CACHE", b4, sizeof(b4)));
}

/* Do open files a and b name one file (the same device and inode: the same path, or one
 * reached through a symlink or hard link)? */
static int same_file(int a, int b)
{
    struct stat sa, sb;
    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* Rank 0's report and its files (-J never overwrites: nccl-tests' .N probing). A file
 * that cannot be created, or -J and --csv naming one file, is a bad flag, exit 2; a
 * write that fails later exits 1. */
static int open_outputs(bench_ctx *c, int argc, char **argv)
{
    bench_report *r = &c->rep;
    describe_knobs(c);
    *r = (bench_report){.o = &c->o,
                        .env = {c->bc.world_size, algo_label(c), c->knobs, PACKAGE_VERSION, NULL},
                        .out = stdout,
                        .argc = argc,
                        .argv = argv,
                        .device_info = c->o.device ? c->dev
                                       : c->o.reg  ? "shared host memory"
                                                   : "host memory"};
    if (c->bc.rank != 0) return 0;
    if (c->o.json) {
        if ((r->json = bench_open_new(c->o.json, c->json_path, sizeof(c->json_path))) == NULL)
            return bad_flag("-J: cannot create '%s': %s", c->json_path, hoop__strerror(errno));
        r->env.json_path = c->json_path;
        c->json_made = 1; /* (bench_open_new creates, never opens what exists) */
    }
    if (c->o.csv) { /* (O_NONBLOCK: a FIFO nobody reads is refused, not waited on) */
        /* Created here, or there before (then opened as it is: a FIFO, /dev/null, a file
         * the user keeps)? Only a file this run created is removed on a refused start. */
        int fd = hoop__open_output(c->o.csv, O_TRUNC | O_EXCL);
        c->csv_made = fd >= 0;
        if (fd < 0 && errno == EEXIST) fd = hoop__open_output(c->o.csv, O_TRUNC);
        if (fd < 0 && errno == ENXIO)
            return bad_flag("--csv: '%s' is a FIFO that no process reads; start its reader "
                            "first, or give a file",
                            c->o.csv);
        if (fd < 0)
            return bad_flag("--csv: cannot create '%s': %s", c->o.csv, hoop__strerror(errno));
        if ((r->csv = fdopen(fd, "w")) == NULL) {
            close(fd);
            return bad_flag("--csv: fdopen: out of memory");
        }
        if (r->json && same_file(fileno(r->json), fd))
            return bad_flag("-J %s and --csv %s are the same file (both formats would be written "
                            "into it): give each its own path",
                            c->json_path, c->o.csv);
    }
    return 0;
}

/* Ranks given different sweeps (flags, HOOP_ALGO) would call different collectives and
 * fail at the first that differs, naming the calls, not the flag (a barrier against an
 * all-reduce, for -c 0 against -c 1). Compared with rank 0's in the rank table: exit 2,
 * rank 0 naming the first rank and flag that differ, that rank naming its own. */
static int same_settings(const bench_ctx *c, bench_rank_info *all)
{
    char flag[64], v0[128], vr[128];
    int differ = 0;
    all[0].settings[BENCH_SETTINGS_BYTES - 1] = '\0';
    for (int r = 1; r < c->bc.world_size; r++) {
        all[r].settings[BENCH_SETTINGS_BYTES - 1] = '\0'; /* whatever another build sent */
        if (!hoop__settings_diff(all[0].settings, all[r].settings, flag, v0, vr, sizeof v0))
            continue;
        if ((c->bc.rank == 0 && !differ) || c->bc.rank == r)
            fprintf(stderr,
                    "hoop-bench: rank %d: ranks disagree on %s: rank 0 has %s, rank %d has %s "
                    "(every rank must be given the same sweep)\n",
                    c->bc.rank, flag, v0, r, vr);
        differ = 1;
    }
    return differ ? 2 : 0;
}

/* The buffers of every rank on one host fit in the memory that host has left (each
 * rank's hoop__mem_room_kib, read before any rank allocated: the rank table precedes the
 * buffers). Under overcommit an allocation too large succeeds, and the first touch of
 * its pages brings the OOM killer: a SIGKILL with no word, which may take other
 * processes too. Exit 2, rank 0 naming the first host that lacks room; 0 when all fit
 * or a host's room is unknown. */
static int fits_memory(const bench_ctx *c, const bench_rank_info *all)
{
    size_t sb, rb;
    buffer_bytes(c, &sb, &rb);
    uint64_t per_rank = (uint64_t)sb + rb;
    for (int r = 0; r < c->bc.world_size; r++) {
        int n = 0, first = 1;
        int64_t room = -1;
        for (int q = 0; q < c->bc.world_size; q++) {
            if (strncmp(all[q].host, all[r].host, sizeof(all[q].host)) != 0) continue;
            if (q < r) { /* that host was judged at its first rank */
                first = 0;
                break;
            }
            n++;
            if (all[q].room_kib >= 0 && (room < 0 || all[q].room_kib < room))
                room = all[q].room_kib;
        }
        if (!first || room < 0 || per_rank * (uint64_t)n / 1024 <= (uint64_t)room) continue;
        if (c->bc.rank == 0)
            fprintf(stderr,
                    "hoop-bench: rank 0: the buffers for -e %lld bytes do not fit in memory on "
                    "host %s: %d rank(s) there need %d x %" PRIu64 " bytes (%" PRIu64
                    " MiB), %" PRId64 " MiB are left (" HOOP__MEM_ROOM_WHAT
                    "): give a smaller -e\n",
                    (long long)c->o.maxb, all[r].host, n, n, per_rank, per_rank * (uint64_t)n >> 20,
                    room >> 10);
        return 2;
    }
    return 0;
}

/* The transports of this rank's links, each once, in the registry's order of first use
 * ("shm", "shm+tcp"; "none" on one rank): which path a figure measured (HOOP_TRANSPORT
 * unset lets the comm choose per peer). */
static void link_kinds(const bench_ctx *c, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (int p = 0; p < c->bc.world_size; p++) {
        const char *t = hoop__comm_link_transport(c->comm, p);
        if (!t) continue;
        size_t tl = strlen(t);
        int seen = 0;
        for (const char *q = out; (q = strstr(q, t)) != NULL; q += tl)
            if ((q == out || q[-1] == '+') && (q[tl] == '\0' || q[tl] == '+')) seen = 1;
        if (!seen && len + tl + 2 <= cap)
            len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? "+" : "", t);
    }
    if (!out[0]) snprintf(out, cap, "none");
}

/* Every rank's pid and host, gathered to all (rank 0 prints them); refused: rank 0's exit
 * code for an output it could not create (open_outputs), so that every rank stops with
 * it rather than find rank 0 gone in its first call. Returns refused, as every rank
 * learns it, or the failure's exit code. */
static int gather_ranks(bench_ctx *c, bench_rank_info **all, int refused)
{
    bench_rank_info me = {.rank = c->bc.rank,
                          .local_rank = hoop_comm_local_rank(c->comm),
                          .pid = (int32_t)getpid(),
                          .refused = refused,
                          .gpu = c->o.device ? atoi(c->dev + 5) : -1, /* "cuda:N ..." */
                          .room_kib = hoop__mem_room_kib()};
    if (c->o.device) snprintf(me.dev, sizeof(me.dev), "%s", c->dev);
    if (gethostname(me.host, sizeof(me.host) - 1) != 0) snprintf(me.host, sizeof(me.host), "?");
    link_kinds(c, me.links, sizeof(me.links));
    if (bench_settings(&c->o, me.settings, sizeof(me.settings)) != 0)
        return failed(c, "bench_settings: BENCH_SETTINGS_BYTES is too small", HOOP_ERR_INTERNAL);
    *all = calloc((size_t)c->bc.world_size, sizeof(**all));
    if (*all == NULL) return failed(c, "calloc", HOOP_ERR_NOMEM);
    hoop_status st = hoop_allgather(c->comm, &me, *all, sizeof(me), HOOP_DTYPE_U8, NULL);
    if (st != HOOP_OK) return failed(c, "gathering the rank table", st);
    if ((*all)[0].refused) return (*all)[0].refused; /* rank 0 said why; the others stay silent */
    int rc = same_settings(c, *all);
    return rc ? rc : fits_memory(c, *all);
}

static int setup(bench_ctx *c, int argc, char **argv)
{
    int rc;
    hoop_status st;
    bench_rank_info *ranks = NULL;
    if ((rc = join(c)) != 0) return rc;
    c->bc = (bench_case){c->o.coll,   c->o.dtypes[0],
                         c->o.ops[0], bench_has_root(c->o.coll) ? (int)c->o.root : -1,
                         c->bc.rank,  c->bc.world_size};
    if (bench_has_root(c->o.coll) && c->o.root >= c->bc.world_size)
        return bad_flag("-r %" PRId64 " is not below world_size %d", c->o.root, c->bc.world_size);
    if ((c->o.device && (rc = open_device(c)) != 0) ||
        (rc = gather_ranks(c, &ranks, open_outputs(c, argc, argv))) != 0 ||
        (rc = alloc_buffers(c)) != 0) {
        free(ranks);
        return rc;
    }
    /* After the rank table: the algorithm under test moves only the sweep's bytes. */
    if (c->o.algo_set && (st = hoop_comm_set_algo(c->comm, c->o.algo)) != HOOP_OK) {
        free(ranks);
        return failed(c, "hoop_comm_set_algo", st);
    }
    if (c->bc.rank == 0) bench_report_begin(&c->rep, ranks, c->bc.world_size);
    free(ranks);
    return 0;
}

/* A start refused (or failed) before rank 0 began its report: the output files this run
 * created hold nothing and are removed (once closed), so that none is left empty and a
 * rerun gets the same -J name (it got FILE.0). A file that was there before is left. */
static void discard_outputs(const bench_ctx *c)
{
    if (c->json_made) (void)unlink(c->json_path);
    if (c->csv_made) (void)unlink(c->o.csv);
}

/* Closes an output file (flag, path: for the message; err: the errno of a write that
 * failed before, 0 none): 1 after a line naming it when a write failed (a full disk,
 * /dev/full), else 0. */
static int close_output(FILE *f, const char *flag, const char *path, int err)
{
    if (!err && ferror(f)) err = EIO;
    if (fflush(f) != 0) err = errno;
    if (fclose(f) != 0 && !err) err = errno;
    if (!err) return 0;
    fprintf(stderr, "hoop-bench: %s: writing '%s' failed: %s\n", flag, path, hoop__strerror(err));
    return 1;
}

int main(int argc, char **argv)
{
    static bench_ctx ctx;
    char err[512];
    /* The command line as given, for the JSON's "args": getopt_long permutes argv. */
    static char **given; /* (static: held to the end, as argv is) */
    given = calloc((size_t)argc + 1, sizeof(*given));
    if (!given) return fputs("hoop-bench: out of memory\n", stderr), 1;
    memcpy(given, argv, (size_t)argc * sizeof(*given));
    int rc = bench_parse_args(argc, argv, &ctx.o, err, sizeof(err));
    if (rc == 3) return fputs(bench_usage(), stdout) == EOF;
    if (rc == 4) { /* > /dev/full: 1, as --help's */
        printf("hoop-bench (hoop) %s\n", hoop_version_string());
        return fflush(stdout) != 0 || ferror(stdout);
    }
    if (rc != 0) { /* the job hears it too; a silent rank says it only when the job did
                    * not hear another rank's reason (the same bad flag everywhere) */
        int told = 0;
        hoop_status st = HOOP_ERROR(HOOP_ERR_INVALID, "hoop-bench: %s", err);
        if (!is_quiet()) { /* said first, once: rank 0's store then tells the others */
            fprintf(stderr, "hoop-bench: %s\n", err);
            (void)hoop__store_env_refuse_said(st, &told);
            return 2;
        }
        (void)hoop__store_env_refuse(st, &told);
        if (told != 0) fprintf(stderr, "hoop-bench: %s\n", err);
        return bad_flag("%s", err);
    }
    if (ctx.o.timeout > 0) { /* -T: every wait of this run, the rendezvous's too */
        char s[32];
        snprintf(s, sizeof(s), "%" PRId64, ctx.o.timeout);
        setenv("HOOP_TIMEOUT", s, 1);
    }
    rc = setup(&ctx, argc, given);
    int refused = rc != 0; /* before the report began: discard_outputs */
    if (rc == 0) catch_stop_signals(ctx.bc.rank);
    if (rc == 0) rc = sweep(&ctx);
    if (rc != 0) bench_report_fail(&ctx.rep, failure[0] ? failure : "the run failed");
    if (ctx.o.reg && ctx.comm && ctx.o.device) { /* collective: every rank gets here */
        if (ctx.dsend) hoop_comm_free_shared_cuda(ctx.comm, ctx.dsend);
        if (ctx.drecv) hoop_comm_free_shared_cuda(ctx.comm, ctx.drecv);
        ctx.dsend = ctx.drecv = NULL;
    } else if (ctx.o.reg && ctx.comm) { /* hoop_comm_destroy would release them too */
        if (ctx.send) hoop_comm_free_shared(ctx.comm, ctx.send);
        if (ctx.recv) hoop_comm_free_shared(ctx.comm, ctx.recv);
        ctx.send = ctx.recv = NULL;
    }
    hoop_status st = ctx.comm ? hoop_comm_destroy(ctx.comm) : HOOP_OK;
    if (st != HOOP_OK && rc == 0) rc = failed(&ctx, "hoop_comm_destroy", st);
    if (ctx.rep.json && close_output(ctx.rep.json, "-J", ctx.json_path, ctx.rep.json_errno) &&
        rc == 0)
        rc = 1;
    if (ctx.rep.csv && close_output(ctx.rep.csv, "--csv", ctx.o.csv, ctx.rep.csv_errno) && rc == 0)
        rc = 1;
    if (refused) discard_outputs(&ctx);
    if ((fflush(stdout) != 0 || ferror(stdout)) && rc == 0) { /* > /dev/full */
        fprintf(stderr, "hoop-bench: writing the report to the standard output failed: %s\n",
                hoop__strerror(errno ? errno : EIO));
        rc = 1;
    }
    if (ctx.cuda) {
        if (ctx.stream) ctx.cuda->stream_free(ctx.stream);
        if (ctx.dsend) ctx.cuda->dev_free(ctx.dsend);
        if (ctx.drecv) ctx.cuda->dev_free(ctx.drecv);
        if (ctx.send) ctx.cuda->host_unregister(ctx.send);
        if (ctx.recv) ctx.cuda->host_unregister(ctx.recv);
    }
    free(ctx.send);
    free(ctx.recv);
    return rc;
}
