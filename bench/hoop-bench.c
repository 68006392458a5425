/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench/hoop-bench.c -- nccl-tests-style benchmark of hoop's collectives.
 *
 *   hooprun --nproc-per-node 2 bench/hoop-bench allreduce -b 8 -e 256M -f 2 -t f32 -o sum
 *
 * Sweeps sizes from -b to -e (x -f), and for each size times the collective out-of-place
 * and in-place: -w warm-up calls, a barrier, then -n blocking calls; time = mean per call,
 * the max over ranks. algbw = size / time, busbw = algbw x nccl-tests' factor
 * (all-reduce 2(n-1)/n; all-gather, reduce-scatter (n-1)/n; broadcast, reduce 1)
 * [nccl-tests common.cu, all_reduce.cu, all_gather.cu, ...]. With -c 1 every size is run
 * once more on fresh data and compared with an exact reference (bench_data.c); any wrong
 * element makes the exit code 1. Rank 0 prints; the others are silent. Exit 2 on bad
 * flags or environment. Without MASTER_ADDR and WORLD_SIZE it runs alone (world_size 1).
 * Single-threaded; owns its comm, buffers and output files.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

#include "bench/bench.h"
#include "collectives/coll.h"
#include "core/clock.h"
#include "core/env.h"
#include "hoop/collectives.h"
#include "hoop/comm.h"
#include "hoop/version.h"

#define MAX_ROWS 128

static const char usage[] =
    "usage: hoop-bench COLLECTIVE [options]      (under hooprun, or alone as one rank)\n"
    "  COLLECTIVE      allreduce | broadcast | reduce | allgather | reducescatter\n"
    "  -b SIZE         smallest size in bytes, K/M/G suffixes (default 8)\n"
    "  -e SIZE         largest size in bytes (default 32M)\n"
    "  -f N            size factor between steps, >= 2 (default 2)\n"
    "  -t TYPE         f32 f64 f16 bf16 i32 i64 u8 (or float double half bfloat16 int32\n"
    "                  int64 uint8; default f32)\n"
    "  -o OP           sum prod min max avg (avg: floating types only; default sum)\n"
    "  -r ROOT         root of broadcast and reduce (default 0)\n"
    "  -n N            timed iterations per size (default 20)\n"
    "  -w N            warm-up iterations per size (default 5)\n"
    "  -c 0|1          check every size against an exact reference (default 1)\n"
    "  -a ALGO         all-reduce algorithm: ring rd rhd direct auto (default: HOOP_ALGO,\n"
    "                  auto; direct needs -R 1 and applies to the in-place calls)\n"
    "  -R 0|1          1: buffers from hoop_comm_alloc_shared, so that in-place all-reduces\n"
    "                  of ranks on one host may run direct (default 0)\n"
    "  --json FILE     also write the results as JSON (rank 0)\n"
    "  --csv FILE      also write the results as CSV (rank 0)\n"
    "  --help, --version  print this text, or hoop-bench's version, and exit\n"
    "\n"
    "Size, as nccl-tests counts it: all-reduce, broadcast, reduce: the buffer; all-gather:\n"
    "the gathered buffer (world_size x count elements; each rank sends size/world_size);\n"
    "reduce-scatter: the buffer scattered (each rank receives size/world_size). Sizes are\n"
    "rounded down to whole elements and equal blocks. algbw = size / time (GB/s = 1e9 B/s);\n"
    "busbw = algbw x 2(n-1)/n (all-reduce), (n-1)/n (all-gather, reduce-scatter), 1\n"
    "(broadcast, reduce). time = mean over -n calls after -w warm-ups, max over ranks.\n"
    "Exit: 0 ok, 1 wrong results or a failed collective, 2 bad flags or environment.\n";

typedef struct bench_opts {
    bench_coll coll;
    int64_t minb, maxb, factor, iters, warmup, check, root, shared;
    hoop_dtype dtype;
    hoop_op op;
    int algo_set;
    hoop_algo algo;
    const char *json, *csv;
} bench_opts;

typedef struct bench_row {
    size_t bytes, count;
    double time_us[2], algbw[2], busbw[2];
    int64_t wrong[2];  /* -1 = not checked */
    const char *algo;  /* all-reduce under auto: the algorithm the cost model picks */
    char algo_buf[32]; /* "oop|in-place" when the in-place calls run direct */
} bench_row;

typedef struct bench_ctx {
    bench_opts o;
    hoop_comm *comm;
    bench_case bc;
    void *send, *recv;
    bench_row rows[MAX_ROWS];
    int nrows;
    FILE *json, *csv;
} bench_ctx;

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

static int parse_dtype(const char *s, hoop_dtype *out)
{
    static const char *const alias[HOOP_DTYPE_COUNT_] = {"float", "double", "half", "bfloat16",
                                                         "int32", "int64",  "uint8"};
    for (int d = 0; d < HOOP_DTYPE_COUNT_; d++)
        if (strcmp(s, hoop_dtype_name((hoop_dtype)d)) == 0 || strcmp(s, alias[d]) == 0)
            return *out = (hoop_dtype)d, 0;
    return -1;
}

static int parse_op(const char *s, hoop_op *out)
{
    for (int o = 0; o < HOOP_OP_COUNT_; o++)
        if (strcmp(s, hoop_op_name((hoop_op)o)) == 0) return *out = (hoop_op)o, 0;
    return -1;
}

/* Parses one integer flag value; on error prints the line and returns 2. */
static int int_flag(int opt, const char *arg, int bytes, int64_t lo, int64_t hi, int64_t *out)
{
    char what[8];
    snprintf(what, sizeof(what), "-%c", opt);
    hoop_status st =
        bytes ? hoop__parse_bytes(what, arg, lo, hi, out) : hoop__parse_int(what, arg, lo, hi, out);
    return st == HOOP_OK ? 0 : bad_flag("%s", hoop_last_error());
}

static int parse_word_flag(bench_opts *o, int c, const char *arg)
{
    switch (c) {
    case 't':
        if (parse_dtype(arg, &o->dtype))
            return bad_flag("-t: unknown type '%s' (f32 f64 f16 bf16 i32 i64 u8)", arg);
        return 0;
    case 'o':
        if (parse_op(arg, &o->op))
            return bad_flag("-o: unknown op '%s' (sum prod min max avg)", arg);
        return 0;
    case 'a':
        if (hoop_algo_from_name(arg, &o->algo) != HOOP_OK)
            return bad_flag("-a: unknown algorithm '%s' (ring rd rhd direct auto)", arg);
        o->algo_set = 1;
        return 0;
    case 'J': o->json = arg; return 0;
    case 'C': o->csv = arg; return 0;
    default: return bad_flag("unknown option (see hoop-bench --help)");
    }
}

static int parse_flag(bench_opts *o, int c, const char *arg)
{
    const int64_t big = INT64_C(1) << 40;
    switch (c) {
    case 'b': return int_flag(c, arg, 1, 1, big, &o->minb);
    case 'e': return int_flag(c, arg, 1, 1, big, &o->maxb);
    case 'f': return int_flag(c, arg, 0, 2, 1024, &o->factor);
    case 'r': return int_flag(c, arg, 0, 0, 1 << 20, &o->root);
    case 'n': return int_flag(c, arg, 0, 1, 1000000000, &o->iters);
    case 'w': return int_flag(c, arg, 0, 0, 1000000000, &o->warmup);
    case 'c': return int_flag(c, arg, 0, 0, 1, &o->check);
    case 'R': return int_flag(c, arg, 0, 0, 1, &o->shared);
    default: return parse_word_flag(o, c, arg);
    }
}

/* Returns 0, 2 (bad flag, reported), 3 (--help wanted) or 4 (--version wanted). */
static int parse_args(int argc, char **argv, bench_opts *o)
{
    static const struct option longs[] = {{"json", required_argument, NULL, 'J'},
                                          {"csv", required_argument, NULL, 'C'},
                                          {"help", no_argument, NULL, 'h'},
                                          {"version", no_argument, NULL, 'V'},
                                          {NULL, 0, NULL, 0}};
    *o = (bench_opts){.minb = 8,
                      .maxb = 32 << 20,
                      .factor = 2,
                      .iters = 20,
                      .warmup = 5,
                      .check = 1,
                      .dtype = HOOP_DTYPE_F32,
                      .op = HOOP_OP_SUM};
    if (argc < 2) return bad_flag("missing the collective (see hoop-bench --help)");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) return 3;
    if (strcmp(argv[1], "--version") == 0) return 4;
    if ((o->coll = bench_coll_from_name(argv[1])) == BENCH_COLL_COUNT_)
        return bad_flag("unknown collective '%s' (allreduce broadcast reduce allgather "
                        "reducescatter)",
                        argv[1]);
    opterr = 0;
    optind = 2;
    int c, rc;
    while ((c = getopt_long(argc, argv, ":b:e:f:t:o:r:n:w:c:a:R:h", longs, NULL)) != -1) {
        if (c == 'h') return 3;
        if (c == 'V') return 4;
        if (c == '?') return bad_flag("unknown option '%s'", argv[optind - 1]);
        if (c == ':') return bad_flag("%s needs a value", argv[optind - 1]);
        if ((rc = parse_flag(o, c, optarg)) != 0) return rc;
    }
    if (optind < argc) return bad_flag("unexpected argument '%s'", argv[optind]);
    if (o->maxb < o->minb) return bad_flag("-e %" PRId64 " is below -b %" PRId64, o->maxb, o->minb);
    if (o->op == HOOP_OP_AVG && (o->dtype >= HOOP_DTYPE_I32))
        return bad_flag("-o avg is only defined for floating types, not %s",
                        hoop_dtype_name(o->dtype));
    return 0;
}

/* ---- output ---- */

static const char *env_or_default(const char *name, char *buf, size_t len)
{
    const char *v = getenv(name);
    int64_t x;
    if (v == NULL || *v == '\0') {
        if (hoop__env_int(name, &x) != HOOP_OK) return "(default)";
        snprintf(buf, len, "%" PRId64 " (default)", x);
        return buf;
    }
    return v;
}

static const char *algo_label(const bench_ctx *c)
{
    const char *env = NULL;
    if (c->o.algo_set) return hoop_algo_name(c->o.algo);
    if (hoop__env_str("HOOP_ALGO", &env) != HOOP_OK || env == NULL) return "auto";
    return env;
}

static int algo_is_auto(const bench_ctx *c)
{
    return strcmp(algo_label(c), "auto") == 0 && c->o.coll == BENCH_ALLREDUCE;
}

/* The algorithm is direct, or auto on shared buffers (which may pick direct). */
static int may_direct(const bench_ctx *c)
{
    const char *a = algo_label(c);
    return strcmp(a, "direct") == 0 || (c->o.shared && strcmp(a, "auto") == 0);
}

/* The per-row algorithm column: all-reduce under auto, and every collective that can run
 * direct (out-of-place calls and plain buffers fall back to the ring or the cost model). */
static int algo_column(const bench_ctx *c)
{
    int has = c->o.coll == BENCH_ALLREDUCE || c->o.coll == BENCH_ALLGATHER ||
              c->o.coll == BENCH_REDUCESCATTER;
    return algo_is_auto(c) || (has && may_direct(c));
}

static void print_header(const bench_ctx *c)
{
    char b1[64], b2[64];
    const char *ifn = getenv("HOOP_SOCKET_IFNAME"), *tr = getenv("HOOP_TRANSPORT");
    printf("# hoop-bench %s  world_size %d  algorithm %s%s  hoop %s\n", bench_coll_name(c->o.coll),
           c->bc.world_size, algo_label(c),
           c->o.coll == BENCH_ALLREDUCE ? "" : " (all-reduce only)", PACKAGE_VERSION);
    printf("# HOOP_CHUNK_BYTES=%s  HOOP_TCP_NSOCKS=%s  HOOP_TRANSPORT=%s  HOOP_SOCKET_IFNAME=%s\n",
           env_or_default("HOOP_CHUNK_BYTES", b1, sizeof(b1)),
           env_or_default("HOOP_TCP_NSOCKS", b2, sizeof(b2)), tr && *tr ? tr : "(default)",
           ifn && *ifn ? ifn : "(default)");
    printf("# type %s  redop %s  sizes %" PRId64 "..%" PRId64 " x%" PRId64 "  iters %" PRId64
           "  warmup %" PRId64 "  check %" PRId64 "  shared buffers %" PRId64 "\n",
           hoop_dtype_name(c->o.dtype), hoop_op_name(c->o.op), c->o.minb, c->o.maxb, c->o.factor,
           c->o.iters, c->o.warmup, c->o.check, c->o.shared);
    printf("# time = mean per call over the timed iterations, max over ranks; GB/s = 1e9 B/s\n#\n");
    printf("# %10s  %12s  %6s  %6s  %6s  %26s%14s  %23s\n", "", "", "", "", "", "out-of-place", "",
           "in-place");
    printf("# %10s  %12s  %6s  %6s  %6s", "size", "count", "type", "redop", "root");
    for (int p = 0; p < 2; p++) printf("  %10s  %8s  %8s  %6s", "time", "algbw", "busbw", "#wrong");
    printf("%s\n# %10s  %12s  %6s  %6s  %6s", algo_column(c) ? "  algo" : "", "(B)", "(elements)",
           "", "", "");
    for (int p = 0; p < 2; p++) printf("  %10s  %8s  %8s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
    printf("\n");
    fflush(stdout);
}

static int has_root(const bench_ctx *c)
{
    return c->o.coll == BENCH_BROADCAST || c->o.coll == BENCH_REDUCE;
}

static int has_op(const bench_ctx *c)
{
    return c->o.coll != BENCH_BROADCAST && c->o.coll != BENCH_ALLGATHER;
}

static void print_row(const bench_ctx *c, const bench_row *r)
{
    char w[2][24];
    printf("  %10zu  %12zu  %6s  %6s  %6d", r->bytes, r->count, hoop_dtype_name(c->o.dtype),
           has_op(c) ? hoop_op_name(c->o.op) : "none", has_root(c) ? (int)c->o.root : -1);
    for (int p = 0; p < 2; p++) {
        if (r->wrong[p] < 0)
            snprintf(w[p], sizeof(w[p]), "N/A");
        else
            snprintf(w[p], sizeof(w[p]), "%" PRId64, r->wrong[p]);
        printf("  %10.2f  %8.3f  %8.3f  %6s", r->time_us[p], r->algbw[p], r->busbw[p], w[p]);
    }
    printf("%s%s\n", r->algo ? "  " : "", r->algo ? r->algo : "");
    fflush(stdout);
}

static void summarize(const bench_ctx *c, int64_t *wrong_total, double *avg_busbw)
{
    double sum = 0;
    *wrong_total = 0;
    for (int i = 0; i < c->nrows; i++)
        for (int p = 0; p < 2; p++) {
            sum += c->rows[i].busbw[p];
            if (c->rows[i].wrong[p] > 0) *wrong_total += c->rows[i].wrong[p];
        }
    *avg_busbw = c->nrows ? sum / (2.0 * c->nrows) : 0;
}

static void write_json(const bench_ctx *c, int64_t wrong, double avg)
{
    FILE *f = c->json;
    fprintf(f,
            "{\n  \"collective\": \"%s\",\n  \"world_size\": %d,\n  \"algorithm\": \"%s\",\n"
            "  \"hoop_version\": \"%s\",\n  \"type\": \"%s\",\n  \"redop\": \"%s\",\n"
            "  \"root\": %d,\n  \"iters\": %" PRId64 ",\n  \"warmup\": %" PRId64
            ",\n  \"check\": %" PRId64 ",\n  \"rows\": [",
            bench_coll_name(c->o.coll), c->bc.world_size, algo_label(c), PACKAGE_VERSION,
            hoop_dtype_name(c->o.dtype), has_op(c) ? hoop_op_name(c->o.op) : "none",
            has_root(c) ? (int)c->o.root : -1, c->o.iters, c->o.warmup, c->o.check);
    for (int i = 0; i < c->nrows; i++) {
        const bench_row *r = &c->rows[i];
        fprintf(f, "%s\n    {\"size\": %zu, \"count\": %zu", i ? "," : "", r->bytes, r->count);
        for (int p = 0; p < 2; p++)
            fprintf(f,
                    ", \"%s\": {\"time_us\": %.3f, \"algbw\": %.6f, \"busbw\": %.6f, "
                    "\"wrong\": %" PRId64 "}",
                    p ? "in_place" : "out_of_place", r->time_us[p], r->algbw[p], r->busbw[p],
                    r->wrong[p]);
        if (r->algo) fprintf(f, ", \"algo\": \"%s\"", r->algo);
        fprintf(f, "}");
    }
    fprintf(f, "\n  ],\n  \"wrong_total\": %" PRId64 ",\n  \"avg_busbw\": %.6f\n}\n", wrong, avg);
}

static void write_csv(const bench_ctx *c)
{
    FILE *f = c->csv;
    fprintf(f, "collective,world_size,size,count,type,redop,root,oop_time_us,oop_algbw,"
               "oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong,algo\n");
    for (int i = 0; i < c->nrows; i++) {
        const bench_row *r = &c->rows[i];
        fprintf(f, "%s,%d,%zu,%zu,%s,%s,%d", bench_coll_name(c->o.coll), c->bc.world_size, r->bytes,
                r->count, hoop_dtype_name(c->o.dtype), has_op(c) ? hoop_op_name(c->o.op) : "none",
                has_root(c) ? (int)c->o.root : -1);
        for (int p = 0; p < 2; p++)
            fprintf(f, ",%.3f,%.6f,%.6f,%" PRId64, r->time_us[p], r->algbw[p], r->busbw[p],
                    r->wrong[p]);
        fprintf(f, ",%s\n", r->algo ? r->algo : algo_label(c));
    }
}

/* ---- running ---- */

static int failed(const bench_ctx *c, const char *what, hoop_status st)
{
    fprintf(stderr, "hoop-bench: rank %d: %s failed: %s (%s)\n", c->bc.rank, what,
            hoop_last_error(), hoop_status_name(st));
    return 1;
}

static hoop_status issue(bench_ctx *c, const bench_layout *L, void *s, void *r)
{
    const bench_case *b = &c->bc;
    switch (b->coll) {
    case BENCH_ALLREDUCE: return hoop_allreduce(c->comm, s, r, L->count, b->dtype, b->op, NULL);
    case BENCH_BROADCAST: return hoop_broadcast(c->comm, s, r, L->count, b->dtype, b->root, NULL);
    case BENCH_REDUCE: return hoop_reduce(c->comm, s, r, L->count, b->dtype, b->op, b->root, NULL);
    case BENCH_ALLGATHER: return hoop_allgather(c->comm, s, r, L->count, b->dtype, NULL);
    default: return hoop_reduce_scatter(c->comm, s, r, L->count, b->dtype, b->op, NULL);
    }
}

/* Times one placement of one size: warm-up, barrier, iters calls; the max over ranks. */
static hoop_status time_calls(bench_ctx *c, const bench_layout *L, int in_place, double *us)
{
    void *s, *r;
    hoop_status st;
    bench_prepare(&c->bc, L, in_place, c->send, c->recv, &s, &r);
    for (int64_t i = 0; i < c->o.warmup; i++)
        if ((st = issue(c, L, s, r)) != HOOP_OK) return st;
    if ((st = hoop_barrier(c->comm, NULL)) != HOOP_OK) return st;
    int64_t t0 = hoop__now_ns();
    for (int64_t i = 0; i < c->o.iters; i++)
        if ((st = issue(c, L, s, r)) != HOOP_OK) return st;
    *us = (double)(hoop__now_ns() - t0) / 1e3 / (double)c->o.iters;
    return hoop_allreduce(c->comm, us, us, 1, HOOP_DTYPE_F64, HOOP_OP_MAX, NULL);
}

/* One call on fresh data, compared with the reference; the sum of wrong over ranks. */
static hoop_status check_call(bench_ctx *c, const bench_layout *L, int in_place, int64_t *wrong)
{
    void *s, *r;
    hoop_status st;
    bench_prepare(&c->bc, L, in_place, c->send, c->recv, &s, &r);
    if ((st = issue(c, L, s, r)) != HOOP_OK) return st;
    *wrong = (int64_t)bench_count_wrong(&c->bc, L, r);
    return hoop_allreduce(c->comm, wrong, wrong, 1, HOOP_DTYPE_I64, HOOP_OP_SUM, NULL);
}

static int run_size(bench_ctx *c, size_t size)
{
    size_t elt = hoop_dtype_size(c->o.dtype);
    bench_layout L = bench_layout_of(c->o.coll, size, elt, c->bc.world_size);
    bench_row *row = &c->rows[c->nrows++];
    double factor = bench_bus_factor(c->o.coll, c->bc.world_size);
    hoop_status st;
    *row = (bench_row){.bytes = L.bytes, .count = L.count, .wrong = {-1, -1}};
    if (algo_column(c)) {
        int64_t chunk = 0;
        (void)hoop__env_int("HOOP_CHUNK_BYTES", &chunk);
        row->algo = c->o.coll != BENCH_ALLREDUCE
                        ? "ring"
                        : hoop_algo_name(hoop__algo_pick(HOOP_ALGO_AUTO, c->bc.world_size, L.bytes,
                                                         (size_t)chunk));
        /* as hoop_allreduce & co: in place on shared memory, from these sizes up under auto */
        int direct = strcmp(algo_label(c), "direct") == 0;
        size_t min = direct ? 0 : c->bc.world_size == 2 ? 8 << 10 : 64 << 10;
        void *whole = c->o.coll == BENCH_REDUCESCATTER ? c->send : c->recv;
        if (L.bytes >= min && hoop_comm_is_shared(c->comm, whole, L.bytes)) {
            snprintf(row->algo_buf, sizeof(row->algo_buf), "%s|direct", row->algo);
            row->algo = row->algo_buf;
        }
    }
    for (int p = 0; p < 2; p++) {
        if ((st = time_calls(c, &L, p, &row->time_us[p])) != HOOP_OK)
            return failed(c, bench_coll_name(c->o.coll), st);
        if (c->o.check && (st = check_call(c, &L, p, &row->wrong[p])) != HOOP_OK)
            return failed(c, "check", st);
        row->algbw[p] = row->time_us[p] > 0 ? (double)L.bytes / (row->time_us[p] * 1e3) : 0;
        row->busbw[p] = row->algbw[p] * factor;
    }
    if (c->bc.rank == 0) print_row(c, row);
    return 0;
}

static int alloc_buffers(bench_ctx *c)
{
    size_t elt = hoop_dtype_size(c->o.dtype);
    bench_layout L = bench_layout_of(c->o.coll, (size_t)c->o.maxb, elt, c->bc.world_size);
    size_t sb = L.send_elems * elt + 64, rb = L.recv_elems * elt + 64;
    if (c->o.shared) {
        hoop_status st = hoop_comm_alloc_shared(c->comm, sb, &c->send);
        if (st == HOOP_OK) st = hoop_comm_alloc_shared(c->comm, rb, &c->recv);
        return st == HOOP_OK ? 0 : failed(c, "hoop_comm_alloc_shared", st);
    }
    if (posix_memalign(&c->send, 4096, sb) || posix_memalign(&c->recv, 4096, rb)) {
        fprintf(stderr, "hoop-bench: rank %d: cannot allocate %zu + %zu bytes\n", c->bc.rank, sb,
                rb);
        return 1;
    }
    return 0;
}

static int sweep(bench_ctx *c)
{
    int rc = 0;
    if (c->bc.rank == 0) print_header(c);
    for (uint64_t s = (uint64_t)c->o.minb; rc == 0 && s <= (uint64_t)c->o.maxb;
         s *= (uint64_t)c->o.factor) {
        if (c->nrows == MAX_ROWS) break;
        rc = run_size(c, (size_t)s);
    }
    if (rc != 0 || c->bc.rank != 0) return rc;
    int64_t wrong;
    double avg;
    summarize(c, &wrong, &avg);
    printf("# Out of bounds values : %" PRId64 " %s\n", wrong, wrong ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %.3f GB/s\n#\n", avg);
    if (c->json) write_json(c, wrong, avg);
    if (c->csv) write_csv(c);
    return wrong ? 1 : 0;
}

/* Joins the job (env:// under hooprun) or, without MASTER_ADDR and WORLD_SIZE, runs as
 * a world of one. Returns 0, 1 or 2 (bad environment). */
static int join(bench_ctx *c)
{
    hoop_status st;
    hoop_rendezvous *rv = NULL;
    if (getenv("MASTER_ADDR") == NULL && getenv("WORLD_SIZE") == NULL) {
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
    if (st != HOOP_OK) {
        fprintf(stderr, "hoop-bench: %s\n", hoop_last_error());
        return st == HOOP_ERR_INVALID ? 2 : 1;
    }
    c->bc.rank = hoop_comm_rank(c->comm);
    c->bc.world_size = hoop_comm_world_size(c->comm);
    return 0;
}

static int open_outputs(bench_ctx *c)
{
    if (c->bc.rank != 0) return 0;
    if (c->o.json && (c->json = fopen(c->o.json, "w")) == NULL)
        return bad_flag("--json: cannot write '%s'", c->o.json);
    if (c->o.csv && (c->csv = fopen(c->o.csv, "w")) == NULL)
        return bad_flag("--csv: cannot write '%s'", c->o.csv);
    return 0;
}

static int setup(bench_ctx *c)
{
    int rc;
    hoop_status st;
    if ((rc = join(c)) != 0) return rc;
    c->bc = (bench_case){c->o.coll,  c->o.dtype,      c->o.op, has_root(c) ? (int)c->o.root : -1,
                         c->bc.rank, c->bc.world_size};
    if (has_root(c) && c->o.root >= c->bc.world_size)
        return bad_flag("-r %" PRId64 " is not below world_size %d", c->o.root, c->bc.world_size);
    if (c->o.algo_set && (st = hoop_comm_set_algo(c->comm, c->o.algo)) != HOOP_OK)
        return failed(c, "hoop_comm_set_algo", st);
    if ((rc = open_outputs(c)) != 0) return rc;
    return alloc_buffers(c);
}

int main(int argc, char **argv)
{
    static bench_ctx ctx;
    int rc = parse_args(argc, argv, &ctx.o);
    if (rc == 3) return fputs(usage, stdout) == EOF;
    if (rc == 4) return printf("hoop-bench (hoop) %s\n", hoop_version_string()) < 0;
    if (rc != 0) return rc;
    rc = setup(&ctx);
    if (rc == 0) rc = sweep(&ctx);
    if (ctx.o.shared) { /* hoop_comm_destroy would release them too */
        hoop_comm_free_shared(ctx.comm, ctx.send);
        hoop_comm_free_shared(ctx.comm, ctx.recv);
        ctx.send = ctx.recv = NULL;
    }
    hoop_status st = hoop_comm_destroy(ctx.comm);
    if (st != HOOP_OK && rc == 0) rc = failed(&ctx, "hoop_comm_destroy", st);
    if (ctx.json && fclose(ctx.json) != 0 && rc == 0) rc = 1;
    if (ctx.csv && fclose(ctx.csv) != 0 && rc == 0) rc = 1;
    free(ctx.send);
    free(ctx.recv);
    return rc;
}
