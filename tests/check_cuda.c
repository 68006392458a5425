/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_cuda.c -- the CUDA toolchain and launch path work (skips without a GPU).
 *
 * Plain C with no test framework, so it builds wherever the CUDA toolkit does (a GPU
 * machine may lack Check: tests/gpu/run.sh builds it there from a release tarball).
 * It touches CUDA only in this one process: CUDA state must never cross a fork()
 * (NVIDIA's CUDA C++ guide). Exit: 0 pass, 1 fail, 77 skip (the automake convention).
 */
#include <stdio.h>
#include <stdlib.h>

#include "config.h"
#include "cuda/device.h"

static int failures;

#define EXPECT(cond, ...)                                          \
    do {                                                           \
        if (!(cond)) {                                             \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            printf(__VA_ARGS__);                                   \
            printf("\n");                                          \
            failures++;                                            \
        }                                                          \
    } while (0)

/* hoop__cuda_smoke adds 1 to every element on the device and copies back. */
static void test_smoke_kernel(void)
{
    float x[1000];
    for (int i = 0; i < 1000; i++) x[i] = (float)i;
    hoop_status st = hoop__cuda_smoke(x, 1000);
    EXPECT(st == HOOP_OK, "%s", hoop_last_error());
    int wrong = 0;
    for (int i = 0; i < 1000; i++) wrong += x[i] != (float)i + 1.0f;
    EXPECT(wrong == 0, "%d of 1000 elements wrong (x[0] = %g)", wrong, (double)x[0]);
    EXPECT(hoop__cuda_smoke(x, 0) == HOOP_ERR_INVALID, "count 0 was accepted");
}

int main(void)
{
    int n = 0;
#ifndef HOOP_HAVE_CUDA
    printf("SKIP: hoop was configured without CUDA\n");
    return 77;
#endif
    if (hoop__cuda_device_count(&n) != HOOP_OK || n == 0) {
        printf("SKIP: no CUDA device (%s)\n", n == 0 ? "driver reports none" : hoop_last_error());
        return 77;
    }
    test_smoke_kernel();
    printf("%s: check_cuda, %d device(s)\n", failures ? "FAIL" : "PASS", n);
    return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
