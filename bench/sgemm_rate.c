/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench/sgemm_rate.c -- OpenBLAS's single-sgemm rate at the shapes of one MLP step.
 *
 * For an MLP of layer sizes s0 -> s1 -> ... (PyTorch's nn.Linear layout: weight (out,in),
 * y = x W^T + b) and batch B, one training step runs, per layer of in -> out features:
 *   forward   Y(B,out)  = X(B,in) W^T           sgemm N,T  M=B   N=out K=in
 *   backward  dX(B,in)  = dY(B,out) W           sgemm N,N  M=B   N=in  K=out (not layer 1:
 *                                               the input needs no gradient)
 *   backward  dW(out,in) = dY^T X               sgemm T,N  M=out N=in  K=B
 * This program times each of those calls through cblas_sgemm (best of several trials of
 * at least --min-ms each) and prints GFLOP/s per shape, then the rate of the whole
 * step's GEMMs (their total flops over their total best time), which is the ceiling a
 * training step can approach. Run with OPENBLAS_NUM_THREADS=1 (or --threads 1) for a
 * single core. Output: a table on stdout, and one JSON line with --json.
 * Not a test: it measures, it asserts nothing. Single-threaded driver.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/env.h"

#define MAX_LAYERS 16
#define TRIALS 5

typedef struct gemm_shape {
    const char *what;
    int layer;
    CBLAS_TRANSPOSE ta, tb;
    int m, n, k;
    double best_s;
} gemm_shape;

/* Times one C = op(A) op(B) of the given shape; returns the best seconds per call. */
static double time_gemm(const gemm_shape *g, const float *a, const float *b, float *c,
                        int64_t min_ms)
{
    int lda = g->ta == CblasNoTrans ? g->k : g->m;
    int ldb = g->tb == CblasNoTrans ? g->n : g->k;
    double best = 1e30;
    for (int w = 0; w < 3; w++) /* warm-up: page in, let OpenBLAS set up its buffers */
        cblas_sgemm(CblasRowMajor, g->ta, g->tb, g->m, g->n, g->k, 1.0f, a, lda, b, ldb, 0.0f, c,
                    g->n);
    for (int t = 0; t < TRIALS; t++) {
        int64_t t0 = hoop__now_ns(), t1;
        long reps = 0;
        do {
            cblas_sgemm(CblasRowMajor, g->ta, g->tb, g->m, g->n, g->k, 1.0f, a, lda, b, ldb, 0.0f,
                        c, g->n);
            reps++;
            t1 = hoop__now_ns();
        } while (t1 - t0 < min_ms * 1000000LL);
        double s = (double)(t1 - t0) * 1e-9 / (double)reps;
        if (s < best) best = s;
    }
    return best;
}

static int parse_sizes(const char *s, int *sizes)
{
    int n = 0;
    char *end;
    while (*s && n < MAX_LAYERS + 1) {
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20 || (*end && *end != ',')) return -1;
        sizes[n++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return *s ? -1 : n;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: sgemm_rate [--batch B] [--sizes 784,512,256,10] [--threads T]\n"
               "                  [--min-ms MS] [--json]\n");
}

typedef struct bench_opts {
    int sizes[MAX_LAYERS + 1], nsizes, json;
    int64_t batch, threads, min_ms;
} bench_opts;

/* Parses the flags; returns 0, or 2 after printing why. */
static int parse_args(bench_opts *o, int argc, char **argv)
{
    *o = (bench_opts){
        .sizes = {784, 512, 256, 10}, .nsizes = 4, .batch = 128, .threads = 1, .min_ms = 200};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        hoop_status st = HOOP_OK;
        if (!strcmp(f, "--json")) {
            o->json = 1;
            continue;
        }
        if (!v) {
            usage(stderr);
            return 2;
        } else if (!strcmp(f, "--batch")) {
            st = hoop__parse_int(f, v, 1, 1 << 20, &o->batch);
        } else if (!strcmp(f, "--threads")) {
            st = hoop__parse_int(f, v, 1, 1024, &o->threads);
        } else if (!strcmp(f, "--min-ms")) {
            st = hoop__parse_int(f, v, 1, 60000, &o->min_ms);
        } else if (!strcmp(f, "--sizes")) {
            o->nsizes = parse_sizes(v, o->sizes);
            if (o->nsizes < 2)
                st = HOOP_ERROR(HOOP_ERR_INVALID, "--sizes '%s' is not n1,n2,...", v);
        } else {
            usage(stderr);
            return 2;
        }
        if (st != HOOP_OK) {
            fprintf(stderr, "sgemm_rate: %s\n", hoop_last_error());
            return 2;
        }
        i++;
    }
    return 0;
}

/* Lists the step's GEMMs into g; returns how many, and the largest dimension in *maxd. */
static int build_shapes(const bench_opts *o, gemm_shape *g, int *maxd)
{
    int ng = 0, b = (int)o->batch;
    *maxd = b;
    for (int l = 0; l + 1 < o->nsizes; l++) {
        int in = o->sizes[l], out = o->sizes[l + 1];
        g[ng++] = (gemm_shape){"fwd  Y=X.W^T", l + 1, CblasNoTrans, CblasTrans, b, out, in, 0};
        if (l > 0)
            g[ng++] =
                (gemm_shape){"bwd dX=dY.W ", l + 1, CblasNoTrans, CblasNoTrans, b, in, out, 0};
        g[ng++] = (gemm_shape){"bwd dW=dY^T.X", l + 1, CblasTrans, CblasNoTrans, out, in, b, 0};
        if (in > *maxd) *maxd = in;
        if (out > *maxd) *maxd = out;
    }
    return ng;
}

int main(int argc, char **argv)
{
    bench_opts o;
    gemm_shape g[3 * MAX_LAYERS];
    int maxd, rc = parse_args(&o, argc, argv);
    if (rc) return rc;
    openblas_set_num_threads((int)o.threads);
    int ng = build_shapes(&o, g, &maxd);
    size_t cap = (size_t)maxd * (size_t)maxd;
    float *a = malloc(cap * sizeof *a), *b = malloc(cap * sizeof *b), *c = malloc(cap * sizeof *c);
    if (!a || !b || !c) {
        fprintf(stderr, "sgemm_rate: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < cap; i++) a[i] = b[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;

    double flops = 0.0, secs = 0.0, batch = (double)o.batch;
    printf("# %s, core %s, %d thread(s), batch %lld\n", openblas_get_config(),
           openblas_get_corename(), (int)o.threads, (long long)o.batch);
    printf("# %-5s %-14s %6s %6s %6s %10s %9s\n", "layer", "gemm", "M", "N", "K", "us", "GFLOP/s");
    for (int i = 0; i < ng; i++) {
        g[i].best_s = time_gemm(&g[i], a, b, c, o.min_ms);
        double f = 2.0 * g[i].m * g[i].n * g[i].k;
        flops += f;
        secs += g[i].best_s;
        printf("  %-5d %-14s %6d %6d %6d %10.1f %9.2f\n", g[i].layer, g[i].what, g[i].m, g[i].n,
               g[i].k, g[i].best_s * 1e6, f / g[i].best_s * 1e-9);
    }
    printf("# step GEMMs: %.1f MFLOP in %.1f us = %.2f GFLOP/s (ceiling %.0f samples/s)\n",
           flops * 1e-6, secs * 1e6, flops / secs * 1e-9, batch / secs);
    if (o.json)
        printf("{\"bench\":\"sgemm_rate\",\"threads\":%d,\"batch\":%lld,\"step_mflop\":%.3f,"
               "\"step_gemm_us\":%.1f,\"gflops\":%.3f,\"ceiling_samples_per_s\":%.0f}\n",
               (int)o.threads, (long long)o.batch, flops * 1e-6, secs * 1e6, flops / secs * 1e-9,
               batch / secs);
    free(a);
    free(b);
    free(c);
    return 0;
}
