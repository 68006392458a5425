/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench/bench_cli.h -- hoop-bench's options (nccl-tests' flags with nccl-tests' meanings,
 * hoop's own as long options) and its report (nccl-tests' text layout, nccl-tests' JSON
 * keys, hoop's CSV).
 *
 * The flags follow nccl-tests' README and src/common.cu (v2.18); the JSON follows
 * nccl-tests' src/util.cu (JSON_FILE_VERSION 1: the keys that later versions keep and
 * only add to). bench_opts.c parses; bench_report.c prints. Neither touches a comm, so
 * tests/check_bench.c runs both without ranks. Not thread-safe (one report per process).
 */
#ifndef HOOP_BENCH_BENCH_CLI_H
#define HOOP_BENCH_BENCH_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bench/bench.h"
#include "hoop/comm.h"

/* -a: how the per-rank times of one size combine (nccl-tests' average). */
typedef enum bench_average {
    BENCH_AVG_RANK0 = 0, /* rank 0's own time */
    BENCH_AVG_MEAN = 1,  /* the mean over ranks (nccl-tests' default) */
    BENCH_AVG_MIN = 2,
    BENCH_AVG_MAX = 3
} bench_average;

/* -z: when the timed calls complete. */
typedef enum bench_blocking {
    BENCH_Z_ASYNC = 0,   /* all calls in flight (a window of them), one wait at the end */
    BENCH_Z_BARRIER = 1, /* wait and barrier after each call (each -m group) */
    BENCH_Z_WAIT = 2     /* wait after each call, no barrier (hoop-bench's own) */
} bench_blocking;

typedef struct bench_opts {
    bench_coll coll;
    int64_t minb, maxb, stepb, factor;  /* sizes: minb, then x factor (> 1) or + stepb */
    int64_t iters, warmup, agg, cycles; /* cycles 0 = run until killed */
    int64_t check;                      /* check iterations per size and placement */
    int64_t root, average, blocking, reg, parallel_init;
    int all_roots;     /* -r all: the sweep once per root, 0..world_size-1 (root is 0) */
    int64_t timeout;   /* -T: seconds, set as HOOP_TIMEOUT for the run; 0 = HOOP_TIMEOUT's */
    int ndtypes, nops; /* -d all / -o all give several; int x avg pairs are skipped */
    hoop_dtype dtypes[HOOP_DTYPE_COUNT_];
    hoop_op ops[HOOP_OP_COUNT_];
    int algo_set;
    hoop_algo algo;
    hoop_algo env_algo;     /* HOOP_ALGO when valid, else auto (the library's default) */
    int show_algo;          /* --show-algo: the per-row algorithm column */
    int device;             /* --device: 0 host buffers (cpu), 1 CUDA device buffers */
    int64_t graphs;         /* -G: launches of each size's calls captured into a CUDA graph */
    const char *json, *csv; /* -J / --json, --csv */
    double min_bw;          /* NCCL_TESTS_MIN_BW (GB/s); -1 when unset */
} bench_opts;

/* The help text. */
const char *bench_usage(void);

/* Parses argv (argv[1] is the collective). Returns 0, 3 for --help, 4 for --version, or
 * 2 with a one-line
 * message naming the culprit in err. The defaults are nccl-tests'. */
int bench_parse_args(int argc, char **argv, bench_opts *o, char *err, size_t errlen);

/* The size after s in the sweep (x factor when factor > 1, else + stepb); returns 0 when
 * it would pass maxb or overflow. */
int bench_next_size(const bench_opts *o, uint64_t s, uint64_t *next);

/* The settings every rank must share (the sweep, the types and ops, the calls' form, the
 * algorithm run, from --algo or HOOP_ALGO; not -J, --csv or --show-algo, which only rank
 * 0 uses, nor -T, each rank's own patience, nor -p, which does nothing), written into buf (len
 * bytes, zero-filled first) as lines "flag value" in a fixed order with defaults
 * resolved, for hoop__settings_diff across the ranks. Returns 0, or -1 when len is too
 * small. */
#define BENCH_SETTINGS_BYTES 640
int bench_settings(const bench_opts *o, char *buf, size_t len);

/* nccl-tests' names: "float", "double", "half", "bfloat16", "int32", "int64", "uint8". */
const char *bench_nccl_type_name(hoop_dtype d);

/* nccl-tests' program for the collective: "all_reduce_perf", "broadcast_perf", ... */
const char *bench_test_name(bench_coll c);

/* Whether the collective takes an op / a root (nccl-tests prints "none" / -1 otherwise). */
int bench_has_op(bench_coll c);
int bench_has_root(bench_coll c);

/* nccl-tests' number cells: value right-aligned in width characters, 2 decimals, fewer
 * when that is too wide; a whole number wider than the column when even that is (as
 * nccl-tests' printf prints it), an exponent from 1e15 up. out has room for 24 bytes. */
void bench_format_float(double v, int width, char *out);

/* nccl-tests' time cell (microseconds, 7 characters): 2 decimals below 100 us, 1 below
 * 10,000 us, none from there up, as its report prints them; wider than 7 characters whole,
 * as bench_format_float. out has room for 24 bytes. */
void bench_format_time(double us, char *out);

// ----- the report ------------------------------------------------------------------

/* One rank's line of the "Using devices" table (gathered to rank 0). */
typedef struct bench_rank_info {
    int32_t rank, local_rank, pid;
    int32_t gpu; /* --device cuda: the rank's GPU (cuda:gpu); -1: host memory */
    char host[48];
    char dev[64];    /* --device cuda: hoop_device_describe's line; "" otherwise */
    int32_t refused; /* rank 0: the exit code of a -J / --csv it could not create, else 0 */
    char settings[BENCH_SETTINGS_BYTES]; /* bench_settings: compared with rank 0's */
    int64_t room_kib; /* hoop__mem_room_kib before the buffers were allocated; -1 unknown */
    char links[24];   /* the transports of its links ("shm", "shm+tcp"; "none": one rank) */
} bench_rank_info;

/* One size: both placements (0 out-of-place, 1 in-place). */
typedef struct bench_result {
    size_t bytes, count;
    hoop_dtype dtype;
    hoop_op op;
    double time_us[2], algbw[2], busbw[2]; /* GB/s = 1e9 B/s */
    int64_t wrong[2];                      /* wrong elements over ranks; -1: not checked */
    int64_t errors[2];                     /* ranks that saw a wrong element */
    const char *algo;                      /* the algorithm (out-of-place|in-place) */
    double h2d, d2h; /* --device cuda: pinned host->device and device->host GB/s */
    int root;        /* broadcast and reduce: the row's root (-r all varies it) */
} bench_result;

/* What the header says about hoop besides the options. */
typedef struct bench_env_info {
    int world_size;
    const char *algo;      /* "auto", "ring", ... */
    const char *knobs;     /* "HOOP_CHUNK_BYTES=... HOOP_TRANSPORT=..." */
    const char *version;   /* hoop's */
    const char *json_path; /* the file -J writes (after nccl-tests' .N probing) */
} bench_env_info;

typedef struct bench_report {
    const bench_opts *o;
    bench_env_info env;
    FILE *out, *json, *csv; /* json / csv NULL when not asked for */
    int argc;
    char **argv;
    const char *device_info; /* the rank table's last field: "host memory", ... */
    int64_t rows, errors;
    double busbw_sum;
    int jdepth, jcount[8];     /* the JSON writer: nesting, items written at each level */
    int begun;                 /* bench_report_begin ran (the JSON is open) */
    const char *stop_note;     /* "stopped by SIGINT after 12 rows", or NULL: the footer says it */
    int json_errno, csv_errno; /* the first failed write of a row to -J / --csv, 0 none */
} bench_report;

/* The header lines, the rank table and the column headers; the JSON's opening. */
void bench_report_begin(bench_report *r, const bench_rank_info *ranks, int nranks);

/* One row (text, JSON, CSV). */
void bench_report_row(bench_report *r, const bench_result *row);

/* The footer (out of bounds, average busbw, the collective's name), after a "# hoop: "
 * line with stop_note when set; closes the JSON (stop_note in its "errors"). Returns the
 * number of failed checks ("Out of bounds values"), plus 1 when the average busbw is
 * below 0.9 x NCCL_TESTS_MIN_BW (o->min_bw), which the footer marks FAILED as
 * nccl-tests does (OK when it is not; nothing when min_bw is unset). */
int64_t bench_report_end(bench_report *r);

/* A run that failed after bench_report_begin (why: the failure, one line): closes the
 * JSON with the rows measured so far and why in its "errors" array, so that the file
 * still parses and says what happened. The text gets no footer (nccl-tests prints none
 * when a test aborts). */
void bench_report_fail(bench_report *r, const char *why);

/* Opens path for -J as nccl-tests does: never over an existing file, but path.0,
 * path.1, ... instead; the name used goes to used (len bytes). NULL when none opens. */
FILE *bench_open_new(const char *path, char *used, size_t len);

#endif /* HOOP_BENCH_BENCH_CLI_H */
