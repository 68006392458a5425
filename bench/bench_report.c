/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench/bench_report.c -- hoop-bench's report in nccl-tests' shape.
 *
 * Text: the lines nccl-tests prints (src/util.cu writeDeviceReport, writeResultHeader,
 * writeBenchmarkLine*, writeResultFooter), so that the grep and awk its users run on
 * them work unchanged: the "# nThread ..." line, "# Using devices" with one
 * "#  Rank r Group 0 Pid p on host device d [bus] info" line per rank, three "#" column
 * header lines, rows of 13 whitespace-separated fields (--show-algo adds a 14th), and the
 * footer "# Out of bounds values : N OK", "# Avg bus bandwidth    : X" (no unit),
 * "# Collective test concluded: NAME". hoop's own facts go in "# hoop: " lines, which a
 * nccl-tests parser skips like any comment. A rank is a process on host memory, so the
 * device is -1 and the bus "[host]"; with --device cuda it is the rank's GPU and "[cuda]",
 * and each row gains two columns, the pinned host->device and device->host copy rates
 * (GB/s) at the row's size, measured between the row's calls.
 *
 * JSON (-J): nccl-tests' keys and types (JSON_FILE_VERSION 1): version, start_time, args,
 * env, nccl_version (0: no NCCL), config {..., devices [...]}, results [{size, count,
 * type, redop, root (a padded string, as nccl-tests writes it), out_of_place and in_place
 * {time, alg_bw, bus_bw, nwrong}, actual_iterations, experiment_name}], out_of_bounds
 * {count, okay}, average_bus_bandwidth {bandwidth, okay}, errors, end_time; booleans are
 * the strings "true"/"false" as there. Added keys (nccl-tests readers ignore them): hoop
 * {...} and each result's algo. env holds only HOOP_*, MASTER_*, SLURM_* and the
 * rank variables, with HOOP_TOKEN's value left out (it is a secret).
 *
 * CSV (--csv): hoop's own, one row per size. Not thread-safe.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench/bench_cli.h"

extern char **environ;

// ----- a small streaming JSON writer -----------------------------------------------

static void j_sep(bench_report *r)
{
    if (r->jcount[r->jdepth]++) fputc(',', r->json);
}

static void j_open(bench_report *r, char c)
{
    fputc(c, r->json);
    r->jcount[++r->jdepth] = 0;
}

static void j_close(bench_report *r, char c)
{
    r->jdepth--;
    fputc(c, r->json);
}

static void j_key(bench_report *r, const char *k)
{
    j_sep(r);
    fprintf(r->json, "\"%s\":", k);
}

/* The length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong form, no
 * surrogate, at most U+10FFFF), 1..4; 0 when the bytes at p are not one. */
static int utf8_len(const unsigned char *p)
{
    if (p[0] < 0x80) return 1;
    int n = p[0] >= 0xc2 && p[0] <= 0xdf   ? 2
            : p[0] >= 0xe0 && p[0] <= 0xef ? 3
            : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4
                                           : 0;
    for (int k = 1; k < n; k++)
        if ((p[k] & 0xc0) != 0x80) return 0;
    if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] > 0x9f) ||
        (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] > 0x8f))
        return 0;
    return n;
}

/* A string with JSON's escapes; control characters as \u00XX. JSON text is UTF-8 (RFC
 * 8259): a byte that starts no well-formed sequence (an argument or environment value in
 * another encoding) is written as U+FFFD, so that the file still parses. */
static void j_str(bench_report *r, const char *s)
{
    fputc('"', r->json);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = utf8_len(p);
        if (*p == '"' || *p == '\\')
            fprintf(r->json, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(r->json, "\\u%04x", *p);
        else if (n == 0)
            fputs("\\ufffd", r->json);
        else
            fwrite(p, 1, (size_t)n, r->json);
        p += n ? n : 1;
    }
    fputc('"', r->json);
}

static void j_kstr(bench_report *r, const char *k, const char *v)
{
    j_key(r, k);
    j_str(r, v);
}

static void j_kint(bench_report *r, const char *k, int64_t v)
{
    j_key(r, k);
    fprintf(r->json, "%" PRId64, v);
}

static void j_kdouble(bench_report *r, const char *k, double v)
{
    j_key(r, k);
    fprintf(r->json, "%f", v);
}

static void j_kbool(bench_report *r, const char *k, int v)
{
    j_kstr(r, k, v ? "true" : "false"); /* nccl-tests writes booleans as strings */
}

static void now_string(char *buf, size_t len)
{
    time_t t = time(NULL);
    struct tm tm;
    if (localtime_r(&t, &tm) == NULL || strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm) == 0)
        snprintf(buf, len, "?");
}

// ----- text ------------------------------------------------------------------------

static const char *average_name(int64_t a)
{
    static const char *const names[] = {"rank 0's", "mean over ranks", "min over ranks",
                                        "max over ranks"};
    return a >= 0 && a <= 3 ? names[a] : "?";
}

static void text_header(bench_report *r)
{
    const bench_opts *o = r->o;
    FILE *f = r->out;
    int factor = o->factor > 1;
    if (r->env.json_path) fprintf(f, "# Writing JSON output to %s\n", r->env.json_path);
    fprintf(f, "# hoop-bench (hoop %s): nccl-tests' output format (nccl-tests 2.18)\n",
            r->env.version);
    fprintf(f, "# Collective test starting: %s\n", bench_test_name(o->coll));
    fprintf(f,
            "# nThread 1 nGpus 1 minBytes %" PRId64 " maxBytes %" PRId64 " step: %" PRId64
            "(%s) warmup iters: %" PRId64 " iters: %" PRId64 " agg iters: %" PRId64
            " validation: %" PRId64 " graph: %" PRId64 "\n",
            o->minb, o->maxb, factor ? o->factor : o->stepb, factor ? "factor" : "bytes", o->warmup,
            o->iters, o->agg, o->check, o->graphs);
    if (o->blocking == BENCH_Z_BARRIER)
        fprintf(f, "# Blocking Enabled: wait for completion and barrier after each collective \n");
    if (o->blocking == BENCH_Z_WAIT)
        fprintf(f, "# Blocking Enabled: wait for completion after each collective, no barrier \n");
    /* The algorithm is the all-reduce's; direct (asked, or picked by auto) also runs the
     * in-place all-gathers and reduce-scatters on shared buffers. */
    int shared_too = (o->coll == BENCH_ALLGATHER || o->coll == BENCH_REDUCESCATTER) &&
                     (strcmp(r->env.algo, "direct") == 0 || strcmp(r->env.algo, "auto") == 0);
    fprintf(f, "#\n# hoop: world_size %d  algorithm %s%s  time (-a %" PRId64 "): %s\n",
            r->env.world_size, r->env.algo,
            o->coll == BENCH_ALLREDUCE ? ""
            : shared_too ? " (all-reduce's; in-place calls on shared buffers may run direct)"
                         : " (all-reduce only)",
            o->average, average_name(o->average));
    fprintf(f, "# hoop: buffers (-R %" PRId64 "): %s  run cycles (-N): %" PRId64 "\n", o->reg,
            o->device ? "device memory (--device cuda)"
            : o->reg  ? "shared (hoop_comm_alloc_shared)"
                      : "private host memory",
            o->cycles);
    fprintf(f, "# hoop: %s\n#\n", r->env.knobs);
}

static void rank_line(const bench_report *r, const bench_rank_info *ri, char *buf, size_t len)
{
    snprintf(buf, len,
             "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s, local_rank %d, links %.*s",
             (int)ri->rank, 0, (int)ri->pid, ri->host, (int)ri->gpu, ri->gpu >= 0 ? "cuda" : "host",
             ri->dev[0] ? ri->dev : r->device_info, (int)ri->local_rank, (int)sizeof(ri->links),
             ri->links);
}

static void text_columns(bench_report *r)
{
    FILE *f = r->out;
    const char *algo = r->o->show_algo ? "  algo" : "";
    const char *copy = r->o->device ? "  copy rates   " : "";
    fprintf(f,
            "#\n# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
            "in-place          %s\n",
            "", "", "", "", "", copy);
    fprintf(f, "# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
    for (int p = 0; p < 2; p++)
        fprintf(f, "  %7s  %6s  %6s  %6s", "time", "algbw", "busbw", "#wrong");
    if (r->o->device) fprintf(f, "  %6s  %6s", "h2d", "d2h");
    fprintf(f, "%s\n# %10s  %12s  %8s  %6s  %6s", algo, "(B)", "(elements)", "", "", "");
    for (int p = 0; p < 2; p++) fprintf(f, "  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
    if (r->o->device) fprintf(f, "  %6s  %6s", "(GB/s)", "(GB/s)");
    fprintf(f, "\n");
}

// ----- JSON ------------------------------------------------------------------------

static int env_is_shown(const char *e)
{
    static const char *const exact[] = {
        "RANK=",      "WORLD_SIZE=", "LOCAL_RANK=",     "LOCAL_WORLD_SIZE=",
        "NODE_RANK=", "GROUP_RANK=", "OMP_NUM_THREADS="};
    if (strncmp(e, "HOOP_", 5) == 0 || strncmp(e, "MASTER_", 7) == 0 ||
        strncmp(e, "SLURM_", 6) == 0)
        return 1;
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
        if (strncmp(e, exact[i], strlen(exact[i])) == 0) return 1;
    return 0;
}

static void json_preamble(bench_report *r)
{
    char when[64];
    now_string(when, sizeof(when));
    j_open(r, '{');
    j_kint(r, "version", 1);
    j_kstr(r, "start_time", when);
    j_key(r, "args");
    j_open(r, '[');
    for (int i = 0; i < r->argc; i++) j_sep(r), j_str(r, r->argv[i]);
    j_close(r, ']');
    j_key(r, "env");
    j_open(r, '[');
    for (char **e = environ; e && *e; e++) {
        if (!env_is_shown(*e)) continue;
        j_sep(r);
        j_str(r, strncmp(*e, "HOOP_TOKEN=", 11) == 0 ? "HOOP_TOKEN=(not written)" : *e);
    }
    j_close(r, ']');
    j_kint(r, "nccl_version", 0);
    fputc('\n', r->json);
}

static void json_hoop(bench_report *r)
{
    const bench_opts *o = r->o;
    j_key(r, "hoop");
    j_open(r, '{');
    j_kstr(r, "version", r->env.version);
    j_kstr(r, "collective", bench_coll_name(o->coll));
    j_kint(r, "world_size", r->env.world_size);
    j_kstr(r, "algorithm", r->env.algo);
    j_kint(r, "average", o->average);
    j_kint(r, "blocking", o->blocking);
    j_kint(r, "local_register", o->reg);
    j_kint(r, "run_cycles", o->cycles);
    j_kstr(r, "settings", r->env.knobs);
    j_close(r, '}');
    fputc('\n', r->json);
}

static void json_config(bench_report *r, const bench_rank_info *ranks, int nranks)
{
    const bench_opts *o = r->o;
    char info[160];
    j_key(r, "config");
    j_open(r, '{');
    j_kint(r, "nthreads", 1);
    j_kint(r, "ngpus", 1);
    j_kint(r, "minimum_bytes", o->minb);
    j_kint(r, "maximum_bytes", o->maxb);
    if (o->factor > 1)
        j_kint(r, "step_factor", o->factor);
    else
        j_kint(r, "step_bytes", o->stepb);
    j_kint(r, "warmup_iters", o->warmup);
    j_kint(r, "iterations", o->iters);
    j_kint(r, "aggregated_iterations", o->agg);
    j_kint(r, "validation", o->check);
    j_kint(r, "graph", o->graphs);
    j_kbool(r, "blocking_collectives", o->blocking != BENCH_Z_ASYNC);
    j_kbool(r, "parallel_init", (int)o->parallel_init);
    j_key(r, "devices");
    j_open(r, '[');
    for (int i = 0; i < nranks; i++) {
        j_sep(r);
        j_open(r, '{');
        j_kint(r, "rank", ranks[i].rank);
        j_kint(r, "group", 0);
        j_kint(r, "pid", ranks[i].pid);
        j_kstr(r, "hostname", ranks[i].host);
        j_kint(r, "device", ranks[i].gpu);
        j_kstr(r, "device_hex", ranks[i].gpu >= 0 ? "cuda" : "host");
        snprintf(info, sizeof(info), "%s, local_rank %d, links %.*s",
                 ranks[i].dev[0] ? ranks[i].dev : r->device_info, (int)ranks[i].local_rank,
                 (int)sizeof(ranks[i].links), ranks[i].links);
        j_kstr(r, "device_info", info);
        j_close(r, '}');
    }
    j_close(r, ']');
    j_close(r, '}');
    fputc('\n', r->json);
    j_key(r, "results");
    j_open(r, '[');
}

static void json_row(bench_report *r, const bench_result *row, const char *redop, int root)
{
    char rootstr[16];
    snprintf(rootstr, sizeof(rootstr), "%6d", root);
    fputc('\n', r->json);
    j_sep(r);
    j_open(r, '{');
    j_kint(r, "size", (int64_t)row->bytes);
    j_kint(r, "count", (int64_t)row->count);
    j_kstr(r, "type", bench_nccl_type_name(row->dtype));
    j_kstr(r, "redop", redop);
    j_kstr(r, "root", rootstr);
    for (int p = 0; p < 2; p++) {
        j_key(r, p ? "in_place" : "out_of_place");
        j_open(r, '{');
        j_kdouble(r, "time", row->time_us[p]);
        j_kdouble(r, "alg_bw", row->algbw[p]);
        j_kdouble(r, "bus_bw", row->busbw[p]);
        if (row->wrong[p] < 0) {
            j_key(r, "nwrong");
            fputs("null", r->json);
        } else {
            j_kdouble(r, "nwrong", (double)row->wrong[p]);
        }
        j_close(r, '}');
    }
    if (r->o->device) {
        j_kdouble(r, "h2d_bw", row->h2d);
        j_kdouble(r, "d2h_bw", row->d2h);
    }
    j_kint(r, "actual_iterations", r->o->iters);
    j_kstr(r, "experiment_name", "");
    if (row->algo) j_kstr(r, "algo", row->algo);
    j_close(r, '}');
}

/* The JSON's end; why: NULL, or the failure that ended the run (in "errors"). */
static void json_footer(bench_report *r, double avg, const char *why)
{
    char when[64];
    j_close(r, ']'); /* results */
    fputc('\n', r->json);
    j_key(r, "out_of_bounds");
    j_open(r, '{');
    j_kint(r, "count", r->errors);
    j_kbool(r, "okay", r->errors == 0);
    j_close(r, '}');
    j_key(r, "average_bus_bandwidth");
    j_open(r, '{');
    j_kdouble(r, "bandwidth", avg);
    if (r->o->min_bw >= 0)
        j_kbool(r, "okay", avg >= 0.9 * r->o->min_bw);
    else
        j_kstr(r, "okay", "unchecked");
    j_close(r, '}');
    j_key(r, "errors");
    j_open(r, '[');
    if (why) {
        j_sep(r);
        j_str(r, why);
    }
    j_close(r, ']');
    now_string(when, sizeof(when));
    j_kstr(r, "end_time", when);
    j_close(r, '}');
    fputc('\n', r->json);
}

// ----- the report ------------------------------------------------------------------

void bench_report_begin(bench_report *r, const bench_rank_info *ranks, int nranks)
{
    char line[256];
    r->rows = r->errors = 0;
    r->busbw_sum = 0;
    r->begun = 1;
    r->jdepth = 0;
    r->jcount[0] = 0;
    text_header(r);
    fprintf(r->out, "# Using devices\n");
    for (int i = 0; i < nranks; i++) {
        rank_line(r, &ranks[i], line, sizeof(line));
        fprintf(r->out, "%s\n", line);
    }
    text_columns(r);
    fflush(r->out);
    if (r->json) { /* on disk at once, as each row: a run killed later leaves them */
        json_preamble(r);
        json_hoop(r);
        json_config(r, ranks, nranks);
        if (fflush(r->json) != 0 && !r->json_errno) r->json_errno = errno;
    }
    if (r->csv)
        fprintf(r->csv,
                "collective,world_size,size,count,type,redop,root,oop_time_us,oop_algbw,"
                "oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong,algo%s\n",
                r->o->device ? ",h2d_bw,d2h_bw" : "");
}

static void text_row(bench_report *r, const bench_result *row, const char *redop, int root)
{
    char t[24], a[24], b[24], w[24];
    fprintf(r->out, "%12zu  %12zu  %8s  %6s  %6d", row->bytes, row->count,
            bench_nccl_type_name(row->dtype), redop, root);
    for (int p = 0; p < 2; p++) {
        bench_format_time(row->time_us[p], t);
        bench_format_float(row->algbw[p], 6, a);
        bench_format_float(row->busbw[p], 6, b);
        if (row->wrong[p] < 0)
            snprintf(w, sizeof(w), "N/A");
        else
            snprintf(w, sizeof(w), "%g", (double)row->wrong[p]); /* nccl-tests' %g */
        fprintf(r->out, "  %7s  %6s  %6s  %6s", t, a, b, w);
    }
    if (r->o->device) {
        bench_format_float(row->h2d, 6, a);
        bench_format_float(row->d2h, 6, b);
        fprintf(r->out, "  %6s  %6s", a, b);
    }
    if (r->o->show_algo) fprintf(r->out, "  %s", row->algo ? row->algo : r->env.algo);
    fprintf(r->out, "\n");
    fflush(r->out);
}

static void csv_row(bench_report *r, const bench_result *row, const char *redop, int root)
{
    fprintf(r->csv, "%s,%d,%zu,%zu,%s,%s,%d", bench_coll_name(r->o->coll), r->env.world_size,
            row->bytes, row->count, bench_nccl_type_name(row->dtype), redop, root);
    for (int p = 0; p < 2; p++) { /* #wrong without a check (-c 0): empty, CSV's null */
        fprintf(r->csv, ",%.3f,%.6f,%.6f,", row->time_us[p], row->algbw[p], row->busbw[p]);
        if (row->wrong[p] >= 0) fprintf(r->csv, "%" PRId64, row->wrong[p]);
    }
    fprintf(r->csv, ",%s", row->algo ? row->algo : r->env.algo);
    if (r->o->device) fprintf(r->csv, ",%.6f,%.6f", row->h2d, row->d2h);
    fprintf(r->csv, "\n");
}

void bench_report_row(bench_report *r, const bench_result *row)
{
    const bench_opts *o = r->o;
    const char *redop = bench_has_op(o->coll) ? hoop_op_name(row->op) : "none";
    int root = bench_has_root(o->coll) ? row->root : -1;
    r->rows++;
    for (int p = 0; p < 2; p++) {
        r->busbw_sum += row->busbw[p];
        r->errors += row->errors[p];
    }
    text_row(r, row, redop, root);
    if (r->json) json_row(r, row, redop, root);
    if (r->csv) csv_row(r, row, redop, root);
    /* Each row on disk at once: a run killed later keeps the rows it measured. */
    if (r->json && fflush(r->json) != 0 && !r->json_errno) r->json_errno = errno;
    if (r->csv && fflush(r->csv) != 0 && !r->csv_errno) r->csv_errno = errno;
}

int64_t bench_report_end(bench_report *r)
{
    double avg = r->rows ? r->busbw_sum / (2.0 * (double)r->rows) : 0;
    int checked = r->o->min_bw >= 0, slow = checked && avg < 0.9 * r->o->min_bw;
    FILE *f = r->out;
    if (r->stop_note) fprintf(f, "# hoop: %s\n", r->stop_note);
    fprintf(f, "# %-20s : %" PRId64 " %s\n", "Out of bounds values", r->errors,
            r->errors ? "FAILED" : "OK");
    fprintf(f, "# %-20s : %g %s\n", "Avg bus bandwidth", avg,
            !checked ? ""
            : slow   ? "FAILED"
                     : "OK");
    fprintf(f, "#\n# Collective test concluded: %s\n#\n", bench_test_name(r->o->coll));
    fflush(f);
    if (r->json) json_footer(r, avg, r->stop_note);
    r->begun = 0;
    return r->errors + slow;
}

void bench_report_fail(bench_report *r, const char *why)
{
    if (!r->begun) return;
    r->begun = 0;
    if (r->json) json_footer(r, r->rows ? r->busbw_sum / (2.0 * (double)r->rows) : 0, why);
}

FILE *bench_open_new(const char *path, char *used, size_t len)
{
    FILE *f;
    snprintf(used, len, "%s", path);
    for (int i = 0; i < 1000; i++) {
        if ((f = fopen(used, "wx")) != NULL) return f;
        if (errno != EEXIST) return NULL;
        snprintf(used, len, "%s.%d", path, i);
    }
    return NULL;
}
