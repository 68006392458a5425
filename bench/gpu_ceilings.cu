/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench/gpu_ceilings.cu -- the GPU's own ceilings, measured in the same run as hoop's GPU
 * benchmarks (tests/gpu/run.sh), and hoop's SGD update against the first of them:
 *
 *   d2d      cudaMemcpyAsync device to device, 256 MiB: GB/s of bytes read plus written
 *            (CUDA's bandwidthTest convention: 2 x bytes / time);
 *   h2d/d2h  64 MiB, pinned (cudaMallocHost) and pageable (malloc) host memory, GB/s;
 *   launch   an empty kernel launched 20000 times back to back: us per launch;
 *   graph    the same 100 empty kernels captured as one CUDA graph and replayed 200 times:
 *            us per kernel;
 *   sgd      the kernel table's SGD with momentum (src/cuda/ops/optim.cu) on 64 Mi floats:
 *            bytes moved (p and buf read and written, g read: 20 bytes an element) per
 *            second, and that against d2d (issue 12's target: at least 0.8).
 *
 * One JSON line per figure on stdout. Every figure is the median of 5 timed repetitions
 * after a warm-up, timed with CUDA events on one stream. A benchmark: it asserts nothing.
 * Built by nvcc against the static CUDA backend (libhoopcudagpu) when CUDA is found.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "autograd/kern.h"
#include "cuda/ctx.h"

extern "C" const struct hoop__kern hoop__kern_cuda;

#define CK(call)                                                                      \
    do {                                                                              \
        cudaError_t e_ = (call);                                                      \
        if (e_ != cudaSuccess) {                                                      \
            fprintf(stderr, "gpu_ceilings: %s: %s\n", #call, cudaGetErrorString(e_)); \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static __global__ void empty_kernel(void)
{
}

static cudaStream_t stream;
static cudaEvent_t ev0, ev1;

/* Median of 5 timings of fn (ms each), after one untimed run. */
template <class F> static double median_ms(F fn)
{
    double t[5];
    fn();
    for (int r = 0; r < 5; r++) {
        CK(cudaEventRecord(ev0, stream));
        fn();
        CK(cudaEventRecord(ev1, stream));
        CK(cudaEventSynchronize(ev1));
        float ms;
        CK(cudaEventElapsedTime(&ms, ev0, ev1));
        t[r] = ms;
    }
    std::sort(t, t + 5);
    return t[2];
}

static void line(const char *what, const char *unit, double value)
{
    printf("{\"bench\":\"gpu_ceilings\",\"what\":\"%s\",\"%s\":%.3f}\n", what, unit, value);
}

int main(void)
{
    if (hoop__cuda_init() != HOOP_OK) {
        fprintf(stderr, "gpu_ceilings: %s\n", hoop_last_error());
        return 77;
    }
    stream = hoop__cuda_stream();
    CK(cudaEventCreate(&ev0));
    CK(cudaEventCreate(&ev1));
    char name[256];
    int dev;
    size_t total;
    hoop__cuda_device_info(&dev, name, sizeof(name), &total);
    printf("{\"bench\":\"gpu_ceilings\",\"device\":\"%s\",\"memory_gib\":%.1f}\n", name,
           (double)total / (1 << 30));

    const size_t big = (size_t)256 << 20, mid = (size_t)64 << 20;
    void *a, *b, *pinned, *pageable;
    CK(cudaMalloc(&a, big));
    CK(cudaMalloc(&b, big));
    CK(cudaMallocHost(&pinned, mid));
    pageable = malloc(mid);
    memset(pageable, 1, mid);
    memset(pinned, 1, mid);
    double ms =
        median_ms([&] { CK(cudaMemcpyAsync(b, a, big, cudaMemcpyDeviceToDevice, stream)); });
    const double d2d = 2.0 * (double)big / (ms * 1e-3) / 1e9;
    line("d2d_copy", "GBps", d2d);
    ms = median_ms([&] { CK(cudaMemcpyAsync(a, pinned, mid, cudaMemcpyHostToDevice, stream)); });
    line("h2d_pinned", "GBps", (double)mid / (ms * 1e-3) / 1e9);
    ms = median_ms([&] { CK(cudaMemcpyAsync(pinned, a, mid, cudaMemcpyDeviceToHost, stream)); });
    line("d2h_pinned", "GBps", (double)mid / (ms * 1e-3) / 1e9);
    ms = median_ms([&] { CK(cudaMemcpyAsync(a, pageable, mid, cudaMemcpyHostToDevice, stream)); });
    line("h2d_pageable", "GBps", (double)mid / (ms * 1e-3) / 1e9);
    ms = median_ms([&] { CK(cudaMemcpyAsync(pageable, a, mid, cudaMemcpyDeviceToHost, stream)); });
    line("d2h_pageable", "GBps", (double)mid / (ms * 1e-3) / 1e9);

    ms = median_ms([&] {
        for (int i = 0; i < 20000; i++) empty_kernel<<<1, 32, 0, stream>>>();
    });
    line("kernel_launch", "us", ms * 1e3 / 20000);
    cudaGraph_t g;
    cudaGraphExec_t x;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < 100; i++) empty_kernel<<<1, 32, 0, stream>>>();
    CK(cudaStreamEndCapture(stream, &g));
    CK(cudaGraphInstantiate(&x, g, 0));
    ms = median_ms([&] {
        for (int r = 0; r < 200; r++) CK(cudaGraphLaunch(x, stream));
    });
    line("graph_kernel", "us", ms * 1e3 / (200 * 100));

    /* SGD with momentum through the table: p, g, buf of 64 Mi floats each */
    const size_t n = (size_t)64 << 20;
    float *p, *gr, *buf;
    struct hoop__step_scalars *s;
    CK(cudaMalloc(&p, n * 4));
    CK(cudaMalloc(&gr, n * 4));
    CK(cudaMalloc(&buf, n * 4));
    CK(cudaMalloc(&s, sizeof(*s)));
    CK(cudaMemset(p, 0, n * 4));
    CK(cudaMemset(gr, 0, n * 4));
    CK(cudaMemset(buf, 0, n * 4));
    const struct hoop__step_scalars hs = {0.01f, 0.9f, 1.0f, 0.0f, 0.0f, 0.0f};
    CK(cudaMemcpy(s, &hs, sizeof(hs), cudaMemcpyHostToDevice));
    const struct hoop__sgd_args args = {1e-4f, 0.9f, 0};
    ms = median_ms([&] {
        if (hoop__kern_cuda.sgd(&args, s, p, gr, buf, n) != HOOP_OK) {
            fprintf(stderr, "gpu_ceilings: sgd: %s\n", hoop_last_error());
            exit(1);
        }
    });
    const double sgd = 20.0 * (double)n / (ms * 1e-3) / 1e9;
    line("sgd_update", "GBps", sgd);
    line("sgd_vs_d2d", "ratio", sgd / d2d);
    return 0;
}
