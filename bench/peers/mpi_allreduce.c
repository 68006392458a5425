/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench/peers/mpi_allreduce.c -- the Open MPI peer of bench/compare.sh: MPI_Allreduce of
 * MPI_FLOAT with MPI_SUM, out-of-place, swept over sizes and timed the way the Gloo peer
 * (gloo_allreduce.py) is. Built by compare.sh with mpicc, not by make (hoop never links
 * MPI).
 *
 *   mpirun -np N mpi_allreduce [-b 8] [-e 256M] [-f 4] [-r 7] [-w 2] [-T 20] [-l LABEL]
 *
 * Sizes: b, b x f, b x f^2, ... while below e, then e itself (K/M/G suffixes; bytes are
 * rounded down to whole floats, at least one). Per size: -w warm-up calls; then the batch
 * K: probe batches of 1, 4, 16, ... calls until one lasts T/8 ms (the slowest rank
 * decides), and K = T ms / the probe's time per call, in 1..20000; then -r repetitions
 * of [barrier, K back-to-back calls], each giving a time per call, the max over ranks.
 * Reported: the median and the minimum over the repetitions; algbw = bytes / time and
 * busbw = algbw x 2(n-1)/n (nccl-tests' definitions), GB/s = 1e9 B/s.
 * Check: rank r sends (r + 1) x (i % 13 + 1); the result buffer is poisoned (NaN) before
 * the timed calls, and after the last one every element must equal (i % 13 + 1) x
 * n(n+1)/2 exactly (small integers are exact in float), on every rank.
 * Output on rank 0, the columns bench/compare_table.py reads:
 *   # mpi_allreduce label=L nranks=N host=H lib=...
 *     size count reps iters time_us min_us algbw busbw check
 * then "# Out of bounds values : E OK|FAILED" and "# Avg bus bandwidth    : X GB/s ...".
 * Exit: 0, 1 when a check failed, 2 on bad flags.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct opts {
    size_t minb, maxb;
    int factor, reps, warmup;
    double target_ms;
    const char *label;
} opts;

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* "64M" -> 67108864; 0 when malformed. */
static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K':
    case 'k': v *= 1024, end++; break;
    case 'M':
    case 'm': v *= 1024 * 1024, end++; break;
    case 'G':
    case 'g': v *= 1024.0 * 1024 * 1024, end++; break;
    default: break;
    }
    return *end || v < 1 ? 0 : (size_t)v;
}

static int parse(int argc, char **argv, opts *o)
{
    int c;
    *o = (opts){8, 256u << 20, 4, 7, 2, 20.0, ""};
    opterr = 0;
    while ((c = getopt(argc, argv, "b:e:f:r:w:T:l:")) != -1) {
        switch (c) {
        case 'b': o->minb = parse_size(optarg); break;
        case 'e': o->maxb = parse_size(optarg); break;
        case 'f': o->factor = atoi(optarg); break;
        case 'r': o->reps = atoi(optarg); break;
        case 'w': o->warmup = atoi(optarg); break;
        case 'T': o->target_ms = atof(optarg); break;
        case 'l': o->label = optarg; break;
        default: return 1;
        }
    }
    return o->minb == 0 || o->maxb < o->minb || o->factor < 2 || o->reps < 1 || o->warmup < 0 ||
           o->target_ms <= 0 || optind < argc;
}

/* The batch size: calls per repetition so that one lasts about target_ms. */
static int batch_size(const opts *o, const float *s, float *r, int count)
{
    double per_call;
    for (int k = 1;; k *= 4) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < k; i++) MPI_Allreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t = MPI_Wtime() - t0;
        MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (t >= o->target_ms * 1e-3 / 8 || k >= 20000) {
            per_call = t / k;
            break;
        }
    }
    double k = o->target_ms * 1e-3 / (per_call > 1e-9 ? per_call : 1e-9);
    return k < 1 ? 1 : k > 20000 ? 20000 : (int)k;
}

/* One size; returns the wrong elements summed over ranks; *bus: busbw (rank 0). */
static long run_size(const opts *o, int n, int rank, size_t bytes, const float *s, float *r,
                     double *t, double *bus)
{
    int count = (int)(bytes / sizeof(float) ? bytes / sizeof(float) : 1);
    for (int i = 0; i < o->warmup; i++)
        MPI_Allreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int k = batch_size(o, s, r, count);
    memset(r, 0xff, (size_t)count * sizeof(float));
    for (int rep = 0; rep < o->reps; rep++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < k; i++) MPI_Allreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        t[rep] = (MPI_Wtime() - t0) / k;
    }
    MPI_Allreduce(MPI_IN_PLACE, t, o->reps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    long wrong = 0;
    float tri = (float)(n * (n + 1) / 2);
    for (int i = 0; i < count; i++) wrong += r[i] != (float)(i % 13 + 1) * tri;
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    qsort(t, (size_t)o->reps, sizeof(double), by_value);
    int m = o->reps / 2;
    double med = o->reps % 2 ? t[m] : (t[m - 1] + t[m]) / 2;
    double alg = (double)count * sizeof(float) / med / 1e9;
    *bus = alg * 2.0 * (n - 1) / n;
    if (rank == 0)
        printf("  %12zu %12d %6d %6d %12.2f %12.2f %9.3f %9.3f %6s\n",
               (size_t)count * sizeof(float), count, o->reps, k, med * 1e6, t[0] * 1e6, alg, *bus,
               wrong ? "FAIL" : "ok");
    fflush(stdout);
    return wrong;
}

static void header(const opts *o, int n)
{
    char lib[MPI_MAX_LIBRARY_VERSION_STRING], host[256];
    int len;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, ",\n")] = '\0';
    if (gethostname(host, sizeof(host)) != 0) snprintf(host, sizeof(host), "?");
    printf("# mpi_allreduce label=%s  nranks=%d  host=%s  lib=%s\n", o->label, n, host, lib);
    printf("# op=MPI_SUM type=MPI_FLOAT out-of-place  reps=%d warmup=%d target_ms=%.1f  "
           "time=median over reps of max over ranks\n",
           o->reps, o->warmup, o->target_ms);
    printf("# %12s %12s %6s %6s %12s %12s %9s %9s %6s\n", "size(B)", "count", "reps", "iters",
           "time_us", "min_us", "algbw", "busbw", "check");
}

int main(int argc, char **argv)
{
    opts o;
    int rank, n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (parse(argc, argv, &o)) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_allreduce [-b SIZE] [-e SIZE] [-f >=2] [-r >=1] [-w N] "
                            "[-T MS] [-l LABEL]\n");
        MPI_Finalize();
        return 2;
    }
    size_t max_count = o.maxb / sizeof(float) ? o.maxb / sizeof(float) : 1;
    float *s = malloc(max_count * sizeof(float)), *r = malloc(max_count * sizeof(float));
    double *t = malloc((size_t)o.reps * sizeof(double));
    if (s == NULL || r == NULL || t == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
    for (size_t i = 0; i < max_count; i++) s[i] = (float)((rank + 1) * (int)(i % 13 + 1));
    if (rank == 0) header(&o, n);
    long wrong = 0;
    double bus, sum = 0, peak = 0;
    int sizes = 0;
    for (size_t b = o.minb;; b = b * (size_t)o.factor < o.maxb ? b * (size_t)o.factor : o.maxb) {
        wrong += run_size(&o, n, rank, b, s, r, t, &bus);
        sum += bus, sizes++, peak = bus > peak ? bus : peak;
        if (b == o.maxb) break;
    }
    if (rank == 0) {
        printf("# Out of bounds values : %ld %s\n", wrong, wrong ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %.3f GB/s   Peak bus bandwidth : %.3f GB/s\n", sum / sizes,
               peak);
    }
    free(s), free(r), free(t);
    MPI_Finalize();
    return wrong ? 1 : 0;
}
