/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench/bench_opts.c -- hoop-bench's command line: nccl-tests' flags with nccl-tests'
 * meanings and defaults (README and src/common.cu of nccl-tests 2.18), hoop's own
 * options as long options, and the names nccl-tests prints.
 *
 * Where hoop cannot do what a flag asks (-g or -t above 1, -G on host buffers, a
 * collective or datatype hoop lacks, -C 1 and nccl-tests' other report switches, NCCL's kernel
 * settings -x -D -V) the parse fails with one line that names the flag and says what to
 * do instead; nothing is silently ignored. nccl-tests' newer flags (its current
 * common.cu and README): -T is taken (as HOOP_TIMEOUT), and so is -r all; -C, -S, -M and
 * -y take their default 0 only; -x, -D and -V are refused. Flags an earlier hoop-bench gave other
 * meanings (-t TYPE, -a ALGO) get a hint to the new spelling. Pure: writes only the
 * options and the message buffer. Not thread-safe (getopt's globals).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_cli.h"
#include "core/env.h"

/* " auto ring rd rhd direct": the algorithms' one list (comm.h), for the help text. */
#define ALGO_WORD_(name, val, str) " " str

static const char usage[] =
    "Usage: hoop-bench COLLECTIVE [options]      (under hooprun, or alone as one rank)\n"
    "  COLLECTIVE  allreduce broadcast reduce allgather reducescatter (or nccl-tests'\n"
    "              names: all_reduce_perf broadcast_perf reduce_perf all_gather_perf\n"
    "              reduce_scatter_perf)\n"
    "\n"
    "nccl-tests' flags, with nccl-tests' meanings and defaults:\n"
    "  -b,--minbytes SIZE     smallest size, K/M/G/T suffixes (default 32M)\n"
    "  -e,--maxbytes SIZE     largest size (default 32M)\n"
    "  -f,--stepfactor N      size factor between steps; 1 = off, use -i (default 1)\n"
    "  -i,--stepbytes SIZE    size increment when -f is 1 (default 1M)\n"
    "  -n,--iters N           timed iterations per size (default 20)\n"
    "  -w,--warmup_iters N    warm-up calls before the sweep at each size from -b to -e,\n"
    "                         doubling (default 1)\n"
    "  -m,--agg_iters N       calls aggregated per iteration (default 1)\n"
    "  -N,--run_cycles N      run the sweep N times, 0 = until stopped (default 1)\n"
    "  -c,--check N           check iterations per size on fresh data (default 1; 0 off):\n"
    "                         the result against an exact reference, the 64 bytes after\n"
    "                         each buffer, and an out-of-place call's send buffer\n"
    "  -d,--datatype TYPE     float half bfloat16 double int32 int64 uint8, or all\n"
    "                         (hoop's f32 f16 bf16 f64 i32 i64 u8 too; default float)\n"
    "  -o,--op OP             sum prod max min avg, or all (avg: floating types only;\n"
    "                         all skips it for integers; default sum)\n"
    "  -r,--root N|all        root of broadcast and reduce, or all: the sweep once per\n"
    "                         root, 0 to world_size-1 (default 0)\n"
    "  -a,--average 0|1|2|3   time reported: 0 rank 0's, 1 mean over ranks, 2 min,\n"
    "                         3 max (default 1)\n"
    "  -z,--blocking 0|1|2    0: all calls in flight, waited for at the end; 1: wait and\n"
    "                         barrier after each call; 2 (hoop's): wait after each call,\n"
    "                         no barrier (default 0)\n"
    "  -R,--local_register 0|1|2  1 or 2: buffers from hoop_comm_alloc_shared (with\n"
    "                         --device cuda: hoop_comm_alloc_shared_cuda, mapped through\n"
    "                         CUDA IPC), hoop's analogue of registered (1) and symmetric (2)\n"
    "                         buffers: in-place calls of ranks on one host may run direct\n"
    "                         (default 0)\n"
    "  -J,--output_file FILE  also write nccl-tests' JSON to FILE (.json; an existing\n"
    "                         file is kept and FILE.0, FILE.1, ... used instead; a\n"
    "                         file made for a start then refused is removed)\n"
    "  -g,--ngpus 1           devices per rank: 1 only (start ranks with hooprun)\n"
    "  -t,--nthreads 1        threads per process: 1 only\n"
    "  -p,--parallel_init 0|1 accepted; one thread per process has nothing to parallelise\n"
    "  -T,--timeout S         seconds a rank waits for its peers (start-up, each call)\n"
    "                         before failing: HOOP_TIMEOUT=S for this run; 0 keeps\n"
    "                         HOOP_TIMEOUT's (300 by default: hoop has no wait without a\n"
    "                         deadline) (default 0)\n"
    "  -C,--report_cputime 0  0 only: the time is until the calls complete, not the\n"
    "                         host's time to issue them (hoop's progress thread runs them)\n"
    "  -S,--report_timestamps 0  0 only: no timestamp per line (the -J JSON has the\n"
    "                         run's start_time and end_time)\n"
    "  -M,--memory_report 0   0 only (each rank holds a send and a receive buffer sized\n"
    "                         for -e, with --device cuda on its GPU plus pinned mirrors)\n"
    "  -y,--stream_null 0     0 only (calls take no stream; -G captures them on one of\n"
    "                         the rank's own)\n"
    "  -x, -D, -V             NCCL's kernel settings (CTA policy, device implementation,\n"
    "                         device CTA count): refused, hoop runs no NCCL kernels\n"
    "  -G,--cudagraph N       capture each timed loop's -n x -m calls (the stream form)\n"
    "                         into a CUDA graph and launch it N times; the checks replay\n"
    "                         a captured call too (needs --device cuda, -z 0 and -R 0;\n"
    "                         default 0)\n"
    "\n"
    "hoop's own:\n"
    "  --algo ALGO           " HOOP_ALGO_MAP(
        ALGO_WORD_) " (default: HOOP_ALGO, else auto;\n"
                    "                         direct needs -R 1 or 2 and applies to the in-place "
                    "calls)\n"
                    "  --show-algo            a last column with the algorithm of each row: one\n"
                    "                         name, or out-of-place|in-place where the two differ\n"
                    "                         (ring|direct)\n"
                    "  --device cpu|cuda      where the buffers live (default cpu): cuda puts them "
                    "in\n"
                    "                         each rank's GPU (cuda:local_rank) and adds the "
                    "columns\n"
                    "                         h2d d2h: the pinned host<->device copy rate (GB/s) "
                    "of the\n"
                    "                         row's size, measured in the same run\n"
                    "  --json FILE            the same as -J FILE\n"
                    "  --csv FILE             also write the results as CSV (rank 0; overwritten;\n"
                    "                         not -J's file; #wrong is empty with -c 0)\n"
                    "  --help, --version      print this text, or hoop-bench's version, and exit\n"
                    "\n"
                    "Output: nccl-tests' lines (rank 0 only): the header, a Rank/Pid/host table, "
                    "the\n"
                    "columns size count type redop root, then time (us) algbw busbw (GB/s = 1e9 "
                    "B/s)\n"
                    "#wrong out-of-place and in-place, and the footer (# Out of bounds values,\n"
                    "# Avg bus bandwidth, # Collective test concluded). Size, as nccl-tests counts "
                    "it:\n"
                    "the buffer (all-reduce, broadcast, reduce), the gathered buffer (all-gather), "
                    "the\n"
                    "scattered buffer (reduce-scatter). busbw = algbw x 2(n-1)/n (all-reduce), "
                    "(n-1)/n\n"
                    "(all-gather, reduce-scatter), 1 (broadcast, reduce).\n"
                    "The ranks agree on each row's figures through rank 0's store, not a\n"
                    "collective: a collective that computes wrong results cannot hide them.\n"
                    "NCCL_TESTS_MIN_BW=X (GB/s): as in nccl-tests, the run fails when the average\n"
                    "busbw is below 0.9 x X (the footer says FAILED). SIGINT or SIGTERM: every "
                    "rank\n"
                    "stops after the same row (rank 0 says so at once), and rank 0 ends its\n"
                    "report and files (a second signal stops at once; under hooprun, a row\n"
                    "longer than its --grace is cut).\n"
                    "Exit: 0 ok; 1 wrong results, an average busbw below NCCL_TESTS_MIN_BW, a\n"
                    "failed collective, or a write to the output or a file (-J, --csv) that\n"
                    "failed (a full disk); 2 bad flags or environment, an output file that\n"
                    "cannot be created at start, or buffers for -e that do not fit in memory;\n"
                    "128 + N after signal N (130 SIGINT, 143 SIGTERM), except that wrong\n"
                    "results exit 1 even when a signal stopped the run.\n";

const char *bench_usage(void)
{
    return usage;
}

// ----- names -----------------------------------------------------------------------

/* Indexed by hoop_dtype; nccl-tests' test_typenames. */
static const char *const nccl_types[HOOP_DTYPE_COUNT_] = {"float", "double", "half", "bfloat16",
                                                          "int32", "int64",  "uint8"};
/* -d all, in nccl-tests' order (of the types hoop has). */
static const hoop_dtype all_types[HOOP_DTYPE_COUNT_] = {
    HOOP_DTYPE_U8,  HOOP_DTYPE_I32, HOOP_DTYPE_I64, HOOP_DTYPE_F16,
    HOOP_DTYPE_F32, HOOP_DTYPE_F64, HOOP_DTYPE_BF16};
/* -o all, in nccl-tests' order. */
static const hoop_op all_ops[HOOP_OP_COUNT_] = {HOOP_OP_SUM, HOOP_OP_PROD, HOOP_OP_MAX, HOOP_OP_MIN,
                                                HOOP_OP_AVG};
static const char *const test_names[BENCH_COLL_COUNT_] = {
    "all_reduce_perf", "broadcast_perf", "reduce_perf", "all_gather_perf", "reduce_scatter_perf"};

const char *bench_nccl_type_name(hoop_dtype d)
{
    return (unsigned)d < HOOP_DTYPE_COUNT_ ? nccl_types[d] : "?";
}

const char *bench_test_name(bench_coll c)
{
    return (unsigned)c < BENCH_COLL_COUNT_ ? test_names[c] : "?";
}

int bench_has_op(bench_coll c)
{
    return c != BENCH_BROADCAST && c != BENCH_ALLGATHER;
}

int bench_has_root(bench_coll c)
{
    return c == BENCH_BROADCAST || c == BENCH_REDUCE;
}

/* hoop's name, nccl-tests' name with or without _perf. */
static bench_coll coll_from_arg(const char *s)
{
    bench_coll c = bench_coll_from_name(s);
    size_t n = strlen(s);
    for (int i = 0; c == BENCH_COLL_COUNT_ && i < BENCH_COLL_COUNT_; i++) {
        size_t m = strlen(test_names[i]) - strlen("_perf");
        if (strcmp(s, test_names[i]) == 0 || (n == m && strncmp(s, test_names[i], m) == 0))
            c = (bench_coll)i;
    }
    return c;
}

void bench_format_float(double v, int width, char *out)
{
    for (int prec = 2; prec >= 0; prec--) {
        int n = snprintf(out, (size_t)width + 1, "%*.*f", width, prec, v);
        if (n >= 0 && n <= width) return;
    }
    /* Wider than the column, whole, as nccl-tests' printf does: a parser splitting on blanks
     * keeps every digit (1.2e+07 lost 5% of a 12,345,678 us time). */
    snprintf(out, 24, fabs(v) < 1e15 ? "%.0f" : "%.3e", v);
}

void bench_format_time(double us, char *out)
{
    int prec = us < 100.0 ? 2 : us < 10000.0 ? 1 : 0;
    int n = snprintf(out, 24, "%7.*f", prec, us);
    if (n < 0 || n > 7) bench_format_float(us, 7, out);
}

int bench_settings(const bench_opts *o, char *buf, size_t len)
{
    char types[128] = "", ops[128] = "", root[24];
    size_t at = 0;
    int bad = 0;
    memset(buf, 0, len);
    for (int i = 0; i < o->ndtypes; i++)
        snprintf(types + strlen(types), sizeof types - strlen(types), "%s%s", i ? "," : "",
                 bench_nccl_type_name(o->dtypes[i]));
    for (int i = 0; i < o->nops; i++)
        snprintf(ops + strlen(ops), sizeof ops - strlen(ops), "%s%s", i ? "," : "",
                 hoop_op_name(o->ops[i]));
    if (o->all_roots)
        snprintf(root, sizeof root, "all");
    else
        snprintf(root, sizeof root, "%" PRId64, o->root);
    bad |= hoop__settings_put(buf, len, &at, "collective", "%s", bench_coll_name(o->coll));
    bad |= hoop__settings_put(buf, len, &at, "-b", "%" PRId64, o->minb);
    bad |= hoop__settings_put(buf, len, &at, "-e", "%" PRId64, o->maxb);
    bad |= hoop__settings_put(buf, len, &at, "-f", "%" PRId64, o->factor);
    bad |= hoop__settings_put(buf, len, &at, "-i", "%" PRId64, o->stepb);
    bad |= hoop__settings_put(buf, len, &at, "-n", "%" PRId64, o->iters);
    bad |= hoop__settings_put(buf, len, &at, "-w", "%" PRId64, o->warmup);
    bad |= hoop__settings_put(buf, len, &at, "-m", "%" PRId64, o->agg);
    bad |= hoop__settings_put(buf, len, &at, "-N", "%" PRId64, o->cycles);
    bad |= hoop__settings_put(buf, len, &at, "-c", "%" PRId64, o->check);
    bad |= hoop__settings_put(buf, len, &at, "-d", "%s", types);
    bad |= hoop__settings_put(buf, len, &at, "-o", "%s", ops);
    bad |= hoop__settings_put(buf, len, &at, "-r", "%s", root);
    bad |= hoop__settings_put(buf, len, &at, "-a", "%" PRId64, o->average);
    bad |= hoop__settings_put(buf, len, &at, "-z", "%" PRId64, o->blocking);
    bad |= hoop__settings_put(buf, len, &at, "-R", "%" PRId64, o->reg);
    bad |= hoop__settings_put(buf, len, &at, "-G", "%" PRId64, o->graphs);
    bad |= hoop__settings_put(buf, len, &at, "--device", "%s", o->device ? "cuda" : "cpu");
    /* the algorithm the library runs: --algo's, else HOOP_ALGO's (auto when neither) */
    bad |= hoop__settings_put(buf, len, &at, "--algo/HOOP_ALGO", "%s",
                              hoop_algo_name(o->algo_set ? o->algo : o->env_algo));
    return bad ? -1 : 0;
}

int bench_next_size(const bench_opts *o, uint64_t s, uint64_t *next)
{
    uint64_t max = (uint64_t)o->maxb;
    if (o->factor > 1) {
        if (s > max / (uint64_t)o->factor) return 0;
        *next = s * (uint64_t)o->factor;
        return 1;
    }
    if (s > max || max - s < (uint64_t)o->stepb) return 0;
    *next = s + (uint64_t)o->stepb;
    return 1;
}

// ----- parsing ---------------------------------------------------------------------

typedef struct parse_ctx {
    bench_opts *o;
    char *err;
    size_t errlen;
} parse_ctx;

static int bad(parse_ctx *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, p->errlen, fmt, ap);
    va_end(ap);
    return 2;
}

static int is_algo_name(const char *s)
{
    hoop_algo a;
    return hoop_algo_from_name(s, &a) == HOOP_OK;
}

static int is_type_name(const char *s)
{
    for (int d = 0; d < HOOP_DTYPE_COUNT_; d++)
        if (strcmp(s, nccl_types[d]) == 0 || strcmp(s, hoop_dtype_name((hoop_dtype)d)) == 0)
            return 1;
    return 0;
}

/* One integer flag; bytes: K/M/G/T suffixes allowed. */
static int int_flag(parse_ctx *p, int opt, const char *arg, int bytes, int64_t lo, int64_t hi,
                    int64_t *out)
{
    char what[8];
    snprintf(what, sizeof(what), "-%c", opt);
    hoop_status st =
        bytes ? hoop__parse_bytes(what, arg, lo, hi, out) : hoop__parse_int(what, arg, lo, hi, out);
    return st == HOOP_OK ? 0 : bad(p, "%s", hoop_last_error());
}

static int parse_dtype(parse_ctx *p, const char *s)
{
    static const char *const lacking[] = {"int8", "uint32", "uint64", "f8e4m3", "f8e5m2"};
    bench_opts *o = p->o;
    if (strcmp(s, "all") == 0) {
        memcpy(o->dtypes, all_types, sizeof(all_types));
        o->ndtypes = HOOP_DTYPE_COUNT_;
        return 0;
    }
    for (int d = 0; d < HOOP_DTYPE_COUNT_; d++)
        if (strcmp(s, nccl_types[d]) == 0 || strcmp(s, hoop_dtype_name((hoop_dtype)d)) == 0) {
            o->dtypes[0] = (hoop_dtype)d, o->ndtypes = 1;
            return 0;
        }
    for (size_t i = 0; i < sizeof(lacking) / sizeof(lacking[0]); i++)
        if (strcmp(s, lacking[i]) == 0)
            return bad(p,
                       "-d %s: hoop has no %s (its types: float half bfloat16 double int32 "
                       "int64 uint8, or all)",
                       s, s);
    return bad(p, "-d: unknown type '%s' (float half bfloat16 double int32 int64 uint8, or all)",
               s);
}

static int parse_op(parse_ctx *p, const char *s)
{
    bench_opts *o = p->o;
    if (strcmp(s, "all") == 0) {
        memcpy(o->ops, all_ops, sizeof(all_ops));
        o->nops = HOOP_OP_COUNT_;
        return 0;
    }
    for (int i = 0; i < HOOP_OP_COUNT_; i++)
        if (strcmp(s, hoop_op_name(all_ops[i])) == 0) {
            o->ops[0] = all_ops[i], o->nops = 1;
            return 0;
        }
    if (strcmp(s, "mulsum") == 0) return bad(p, "-o mulsum: hoop has no premultiplied sum");
    return bad(p, "-o: unknown op '%s' (sum prod max min avg, or all)", s);
}

/* -C, -S, -M, -y: nccl-tests' switches whose 1 hoop-bench cannot honour; 0 (their default)
 * is taken. What to do instead, per flag. */
static int parse_switch(parse_ctx *p, int c, const char *arg)
{
    static const struct {
        int flag;
        const char *why;
    } no[] = {
        {'C', "hoop-bench reports the time until the calls complete (-C 0): hoop's progress "
              "thread runs them, so the host's time to issue them (nccl-tests' cputime) would "
              "not be their cost; -z 2 times each call on its own"},
        {'S', "hoop-bench puts no timestamp on its lines; the -J FILE.json has the run's "
              "start_time and end_time"},
        {'M', "hoop-bench has no memory report: each rank holds one send and one receive "
              "buffer sized for -e (with --device cuda on its GPU, plus pinned host mirrors)"},
        {'y', "hoop's calls take no stream of the caller's (-G captures them on a stream of "
              "the rank's own): drop -y"},
    };
    int64_t v;
    if (int_flag(p, c, arg, 0, 0, 1, &v)) return 2;
    for (size_t i = 0; v && i < sizeof(no) / sizeof(no[0]); i++)
        if (no[i].flag == c) return bad(p, "-%c %s: %s", c, arg, no[i].why);
    return 0;
}

/* -r: a root, or all (each rank in turn, as nccl-tests' -r all). */
static int parse_root(parse_ctx *p, const char *arg)
{
    bench_opts *o = p->o;
    if (strcmp(arg, "all") == 0) {
        o->all_roots = 1, o->root = 0;
        return 0;
    }
    o->all_roots = 0;
    /* The world size is not known yet (checked once it is): a negative rank is named as
     * such, not as outside [0, 2^20]. */
    if (hoop__parse_int("-r", arg, INT64_MIN, INT64_MAX, &o->root) != HOOP_OK)
        return bad(p, "%s (-r takes a root rank, or all)", hoop_last_error());
    if (o->root < 0) return bad(p, "-r %s: a root is a rank, 0 or more (or all)", arg);
    return 0;
}

/* -g, -t, -G, -a: nccl-tests flags whose values hoop cannot take, with the way out. */
static int parse_limited(parse_ctx *p, int c, const char *arg)
{
    int64_t v;
    bench_opts *o = p->o;
    if (c == 'a' && is_algo_name(arg))
        return bad(p,
                   "-a %s: -a is how times combine across ranks (0 rank 0, 1 mean, 2 min, "
                   "3 max; nccl-tests); the algorithm is --algo %s",
                   arg, arg);
    if (c == 't' && is_type_name(arg))
        return bad(p,
                   "-t %s: -t is the number of threads per process (nccl-tests; 1 only); "
                   "the datatype is -d",
                   arg);
    if (c == 'a') return int_flag(p, c, arg, 0, 0, 3, &o->average);
    if (int_flag(p, c, arg, 0, 0, 1 << 20, &v)) return 2;
    if (c == 'g' && v != 1)
        return bad(p,
                   "-g %s: hoop-bench drives one device per rank (-g 1); for more devices "
                   "start more ranks with hooprun --nproc-per-node",
                   arg);
    if (c == 't' && v != 1)
        return bad(p,
                   "-t %s: hoop-bench runs one thread per process (-t 1); start more ranks "
                   "with hooprun --nproc-per-node",
                   arg);
    return 0;
}

enum { OPT_ALGO = 256, OPT_CSV, OPT_SHOW_ALGO, OPT_VERSION, OPT_DEVICE };

static int parse_flag(parse_ctx *p, int c, const char *arg)
{
    bench_opts *o = p->o;
    const int64_t big = INT64_C(1) << 40, many = 1000000000;
    switch (c) {
    case 'b': return int_flag(p, c, arg, 1, 1, big, &o->minb);
    case 'e': return int_flag(p, c, arg, 1, 1, big, &o->maxb);
    case 'i': return int_flag(p, c, arg, 1, 1, big, &o->stepb);
    case 'f': return int_flag(p, c, arg, 0, 1, 1024, &o->factor);
    case 'n': return int_flag(p, c, arg, 0, 1, many, &o->iters);
    case 'w': return int_flag(p, c, arg, 0, 0, many, &o->warmup);
    case 'm': return int_flag(p, c, arg, 0, 1, 1000000, &o->agg);
    case 'N': return int_flag(p, c, arg, 0, 0, many, &o->cycles);
    case 'c': return int_flag(p, c, arg, 0, 0, many, &o->check);
    case 'r': return parse_root(p, arg);
    case 'T': return int_flag(p, c, arg, 0, 0, 1000000000, &o->timeout); /* HOOP_TIMEOUT's */
    case 'C':
    case 'S':
    case 'M':
    case 'y': return parse_switch(p, c, arg);
    case 'x':
    case 'D':
    case 'V':
        return bad(p,
                   "-%c %s: %s is one of NCCL's kernel settings; hoop's collectives run no NCCL "
                   "kernels (they run on hoop's progress thread, or hoop's own kernels with "
                   "--device cuda): drop it",
                   c, arg,
                   c == 'x'   ? "the CTA policy (-x, --cta_policy)"
                   : c == 'D' ? "the device implementation (-D, --device_implementation)"
                              : "the device CTA count (-V, --device_cta_count)");
    case 'z': return int_flag(p, c, arg, 0, 0, 2, &o->blocking);
    case 'R': return int_flag(p, c, arg, 0, 0, 2, &o->reg);
    case 'p': return int_flag(p, c, arg, 0, 0, 1, &o->parallel_init);
    case 'G': return int_flag(p, c, arg, 0, 0, many, &o->graphs);
    case 'd': return parse_dtype(p, arg);
    case 'o': return parse_op(p, arg);
    case 'J':
    case OPT_CSV:
        /* "--csv -n 2": the path forgotten; a file named "-n" would be made */
        if (arg[0] == '-')
            return bad(p,
                       "%s '%s' looks like a flag, not a path (the path forgotten?); a file "
                       "whose name starts with '-' is given as ./%s",
                       c == 'J' ? "-J" : "--csv", arg, arg);
        if (c == 'J')
            o->json = arg;
        else
            o->csv = arg;
        return 0;
    case OPT_SHOW_ALGO: o->show_algo = 1; return 0;
    case OPT_DEVICE:
        if (strcmp(arg, "cpu") == 0 || strcmp(arg, "cuda") == 0) {
            o->device = arg[1] == 'u';
            return 0;
        }
        return bad(p, "--device: unknown device '%s' (cpu cuda)", arg);
    case OPT_ALGO:
        if (hoop_algo_from_name(arg, &o->algo) != HOOP_OK)
            return bad(p, "--algo: unknown algorithm '%s' (%s)", arg, HOOP_ALGO_CHOICES);
        o->algo_set = 1;
        return 0;
    default: return parse_limited(p, c, arg);
    }
}

static const struct option longs[] = {{"minbytes", required_argument, NULL, 'b'},
                                      {"maxbytes", required_argument, NULL, 'e'},
                                      {"stepbytes", required_argument, NULL, 'i'},
                                      {"stepfactor", required_argument, NULL, 'f'},
                                      {"iters", required_argument, NULL, 'n'},
                                      {"warmup_iters", required_argument, NULL, 'w'},
                                      {"agg_iters", required_argument, NULL, 'm'},
                                      {"run_cycles", required_argument, NULL, 'N'},
                                      {"check", required_argument, NULL, 'c'},
                                      {"datatype", required_argument, NULL, 'd'},
                                      {"op", required_argument, NULL, 'o'},
                                      {"root", required_argument, NULL, 'r'},
                                      {"average", required_argument, NULL, 'a'},
                                      {"blocking", required_argument, NULL, 'z'},
                                      {"ngpus", required_argument, NULL, 'g'},
                                      {"nthreads", required_argument, NULL, 't'},
                                      {"cudagraph", required_argument, NULL, 'G'},
                                      {"local_register", required_argument, NULL, 'R'},
                                      {"output_file", required_argument, NULL, 'J'},
                                      {"json", required_argument, NULL, 'J'},
                                      {"parallel_init", required_argument, NULL, 'p'},
                                      {"timeout", required_argument, NULL, 'T'},
                                      {"report_cputime", required_argument, NULL, 'C'},
                                      {"report_timestamps", required_argument, NULL, 'S'},
                                      {"memory_report", required_argument, NULL, 'M'},
                                      {"stream_null", required_argument, NULL, 'y'},
                                      {"cta_policy", required_argument, NULL, 'x'},
                                      {"device_implementation", required_argument, NULL, 'D'},
                                      {"device_cta_count", required_argument, NULL, 'V'},
                                      {"csv", required_argument, NULL, OPT_CSV},
                                      {"algo", required_argument, NULL, OPT_ALGO},
                                      {"show-algo", no_argument, NULL, OPT_SHOW_ALGO},
                                      {"device", required_argument, NULL, OPT_DEVICE},
                                      {"help", no_argument, NULL, 'h'},
                                      {"version", no_argument, NULL, OPT_VERSION},
                                      {NULL, 0, NULL, 0}};

static void set_defaults(bench_opts *o)
{
    *o = (bench_opts){.coll = BENCH_COLL_COUNT_,
                      .minb = 32 << 20,
                      .maxb = 32 << 20,
                      .stepb = 1 << 20,
                      .factor = 1,
                      .iters = 20,
                      .warmup = 1,
                      .agg = 1,
                      .cycles = 1,
                      .check = 1,
                      .env_algo = HOOP_ALGO_AUTO,
                      .average = BENCH_AVG_MEAN,
                      .blocking = BENCH_Z_ASYNC,
                      .ndtypes = 1,
                      .dtypes = {HOOP_DTYPE_F32},
                      .nops = 1,
                      .ops = {HOOP_OP_SUM},
                      .min_bw = -1};
}

/* nccl-tests' tests of collectives hoop has not (their names without _perf): refused as
 * such, as a datatype hoop lacks is, not as an unknown word. */
static const char *const lacking_colls[] = {"alltoall", "sendrecv", "gather", "scatter",
                                            "hypercube"};

/* The collective: the one argument that is not an option. */
static int parse_positional(parse_ctx *p, int argc, char **argv)
{
    if (optind >= argc)
        return bad(p, "missing the collective (allreduce broadcast reduce allgather "
                      "reducescatter; see hoop-bench --help)");
    if (optind + 1 < argc) return bad(p, "unexpected argument '%s'", argv[optind + 1]);
    const char *a = argv[optind];
    for (size_t i = 0; i < sizeof(lacking_colls) / sizeof(lacking_colls[0]); i++) {
        size_t n = strlen(lacking_colls[i]);
        if (strncmp(a, lacking_colls[i], n) == 0 && (a[n] == '\0' || strcmp(a + n, "_perf") == 0))
            return bad(p,
                       "hoop has no %s (nccl-tests' %s_perf); hoop-bench runs allreduce, "
                       "broadcast, reduce, allgather, reducescatter",
                       lacking_colls[i], lacking_colls[i]);
    }
    if ((p->o->coll = coll_from_arg(argv[optind])) == BENCH_COLL_COUNT_)
        return bad(p,
                   "unknown collective '%s' (allreduce broadcast reduce allgather "
                   "reducescatter)",
                   argv[optind]);
    return 0;
}

static int check_combination(parse_ctx *p)
{
    bench_opts *o = p->o;
    if (o->maxb < o->minb) return bad(p, "-e %" PRId64 " is below -b %" PRId64, o->maxb, o->minb);
    if (o->ndtypes == 1 && o->nops == 1 && o->ops[0] == HOOP_OP_AVG &&
        o->dtypes[0] >= HOOP_DTYPE_I32 && bench_has_op(o->coll))
        return bad(p, "-o avg is only defined for floating types, not %s",
                   nccl_types[o->dtypes[0]]);
    if (o->graphs && !o->device)
        return bad(p,
                   "-G %" PRId64 ": CUDA graphs capture calls on device buffers ordered on a "
                   "stream: add --device cuda",
                   o->graphs);
    if (o->graphs && o->blocking != BENCH_Z_ASYNC)
        return bad(p,
                   "-G %" PRId64 " -z %" PRId64 ": a graph's calls are waited for after its "
                   "launches, not one by one: -z 0 with -G",
                   o->graphs, o->blocking);
    if (o->graphs && o->reg)
        return bad(p,
                   "-G %" PRId64 " -R %" PRId64 ": a call captured into a CUDA graph cannot run "
                   "direct on shared buffers: -R 0 with -G",
                   o->graphs, o->reg);
    if (o->algo_set && o->algo == HOOP_ALGO_DIRECT && !o->reg)
        return bad(p, "--algo direct reads the peers' buffers where they lie: it needs shared "
                      "buffers, -R 1 or 2 (with -R 0 every call would run another algorithm)");
    /* --algo's default, held to the same rule where direct applies (all-reduce, all-gather,
     * reduce-scatter): the library would run another algorithm on unshared buffers, and
     * the run would measure what was not asked for. */
    const char *env = getenv("HOOP_ALGO");
    if (!env || hoop_algo_from_name(env, &o->env_algo) != HOOP_OK) o->env_algo = HOOP_ALGO_AUTO;
    if (!o->algo_set && !o->reg && o->coll != BENCH_BROADCAST && o->coll != BENCH_REDUCE &&
        o->env_algo == HOOP_ALGO_DIRECT)
        return bad(p,
                   "HOOP_ALGO=%s reads the peers' buffers where they lie: it needs shared "
                   "buffers, -R 1 or 2 (with -R 0 every call would run another algorithm)",
                   env);
    /* nccl-tests' gate for CI: the average busbw below 0.9 x this (GB/s) fails the run;
     * a negative value (nccl-tests' -1) is no gate. There a value atof cannot read is 0
     * (no gate either); here it is refused. */
    const char *mb = getenv("NCCL_TESTS_MIN_BW");
    if (mb && *mb) {
        char *end;
        errno = 0;
        o->min_bw = strtod(mb, &end);
        while (*end == ' ' || *end == '\t') end++;
        if (errno || *end || end == mb || o->min_bw != o->min_bw || o->min_bw > 1e9)
            return bad(p, "NCCL_TESTS_MIN_BW='%s' is not a bandwidth in GB/s (e.g. 20.5)", mb);
        if (o->min_bw < 0) o->min_bw = -1;
    }
    if (o->json) {
        const char *dot = strrchr(o->json, '.'), *slash = strrchr(o->json, '/');
        if (dot == NULL || (slash && slash > dot) || strcmp(dot, ".json") != 0)
            return bad(p,
                       "-J %s: the file must end in .json (nccl-tests picks the format by "
                       "the suffix, and JSON is the only one)",
                       o->json);
    }
    return 0;
}

int bench_parse_args(int argc, char **argv, bench_opts *o, char *err, size_t errlen)
{
    parse_ctx p = {o, err, errlen};
    int c, rc;
    set_defaults(o);
    err[0] = '\0';
    opterr = 0;
    optind = 1;
    while (
        (c = getopt_long(argc, argv, ":b:e:i:f:n:w:m:N:c:d:o:r:a:z:R:J:g:t:G:p:T:C:S:M:y:x:D:V:h",
                         longs, NULL)) != -1) {
        if (c == 'h') return 3;
        if (c == OPT_VERSION) return 4;
        if (c == '?') {
            const char *a = argv[optind - 1], *eq = strchr(a, '=');
            /* "--show-algo=1": a flag getopt knows, given a value it takes none of */
            for (const struct option *l = longs; eq && a[0] == '-' && a[1] == '-' && l->name; l++)
                if (l->has_arg == no_argument && strlen(l->name) == (size_t)(eq - a - 2) &&
                    strncmp(l->name, a + 2, (size_t)(eq - a - 2)) == 0)
                    return bad(&p, "--%s takes no value ('%s')", l->name, a);
            return bad(&p, "unknown option '%s' (see hoop-bench --help)", a);
        }
        if (c == ':') return bad(&p, "%s needs a value", argv[optind - 1]);
        if ((rc = parse_flag(&p, c, optarg)) != 0) return rc;
    }
    if ((rc = parse_positional(&p, argc, argv)) != 0) return rc;
    return check_combination(&p);
}
