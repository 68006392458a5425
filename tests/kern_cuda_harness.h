/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/kern_cuda_harness.h -- what the tests of the CUDA kernel table share: the two
 * tables, deterministic test values, device copies and the comparison with the CPU
 * table's result (see tests/check_kern_cuda.c for the tolerances' reasoning).
 */
#ifndef HOOP_TESTS_KERN_CUDA_HARNESS_H
#define HOOP_TESTS_KERN_CUDA_HARNESS_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "autograd/kern.h"
#include "cuda/ctx.h"
#include "run_suite.h"

extern const struct hoop__kern hoop__kern_cuda;
static const struct hoop__kern *const cpu __attribute__((unused)) = &hoop__kern_cpu;
static const struct hoop__kern *const gpu __attribute__((unused)) = &hoop__kern_cuda;

/* ck_assert_msg for loops over elements: Check's assertions record their place (a write
 * to the runner) even when they pass, one system call per element; this fails as they
 * do and costs nothing when the condition holds. */
#define EXPECT_ELEM(cond, ...)                  \
    do {                                        \
        if (!(cond)) ck_abort_msg(__VA_ARGS__); \
    } while (0)

/* sizes around the block size, 1, and several blocks with a short last one */
static const size_t sizes[] __attribute__((unused)) = {1, 2, 255, 256, 257, 1000, 4099};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static inline float val(size_t i, unsigned seed)
{
    uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)seed * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 31;
    return (float)(x % 20000) / 5000.0f - 2.0f;
}

static inline float *host_vec(size_t n, unsigned seed)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = val(i, seed);
    return p;
}

static inline float *dev_copy(const float *h, size_t n)
{
    void *d = NULL;
    ck_assert_int_eq(hoop__cuda_malloc(&d, n * sizeof(float)), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(d, h, n * sizeof(float), 1), HOOP_OK);
    return d;
}

/* dev's n floats equal ref's within ulps units in the last place (relative), or abs. */
static inline void expect_close(const char *what, const float *ref, const float *dev, size_t n,
                                double rel, double abs_tol)
{
    float *got = malloc((n ? n : 1) * sizeof(float));
    ck_assert_int_eq(hoop__cuda_sync(), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(got, dev, n * sizeof(float), 0), HOOP_OK);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        EXPECT_ELEM(d <= abs_tol + rel * fabs((double)ref[i]), "%s: [%zu] cuda %.9g, cpu %.9g",
                    what, i, got[i], ref[i]);
    }
    free(got);
}

/* The n floats of two device buffers are the same bits (a deterministic kernel run twice). */
static inline void expect_same_bits(const char *what, const float *a_dev, const float *b_dev,
                                    size_t n)
{
    uint32_t *a = malloc((n ? n : 1) * sizeof(uint32_t)),
             *b = malloc((n ? n : 1) * sizeof(uint32_t));
    ck_assert_int_eq(hoop__cuda_copy(a, a_dev, n * sizeof(float), 0), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(b, b_dev, n * sizeof(float), 0), HOOP_OK);
    for (size_t i = 0; i < n; i++)
        EXPECT_ELEM(a[i] == b[i], "%s: [%zu] first run 0x%08x, second 0x%08x", what, i, a[i], b[i]);
    free(a);
    free(b);
}

/* A device copy of n ints. */
static inline int32_t *dev_copy_i32(const int32_t *h, size_t n)
{
    void *d = NULL;
    ck_assert_int_eq(hoop__cuda_malloc(&d, n * sizeof(int32_t)), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(d, h, n * sizeof(int32_t), 1), HOOP_OK);
    return d;
}

/* The _gpu variants of these tests (HOOP_KERN_CUDA_GPU: the table built by nvcc) need a
 * GPU and skip (exit 77) without one; the host-layer builds always run. */
#ifdef HOOP_KERN_CUDA_GPU
#include <cuda_runtime_api.h>
static inline int kern_cuda_device_count(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? (n > 0 ? n : 0) : 0;
}
/* Asks in a child (run_suite.h's in_child): the test cases fork after this. */
static inline void kern_cuda_needs_device(const char *prog)
{
    if (in_child(kern_cuda_device_count) <= 0) {
        printf("%s_gpu: no usable GPU here: skipped (%s runs the same kernels on the host "
               "execution layer)\n",
               prog, prog);
        exit(77);
    }
}
#else
static inline void kern_cuda_needs_device(const char *prog)
{
    (void)prog;
}
#endif

#endif /* HOOP_TESTS_KERN_CUDA_HARNESS_H */
