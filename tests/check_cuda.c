/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_cuda.c -- the CUDA backend through the public API: it loads (from
 * HOOP_CUDA_BACKEND, or where libhoop looks for it), finds a GPU, and a tensor's values
 * make the round trip host -> device -> host exactly, through an op on the device.
 *
 * In make check the backend is the host execution layer's build (TEST_CUDA_HX_BACKEND, see
 * Makefile.am), unless HOOP_CUDA_BACKEND is set: on the GPU machine, tests/gpu/run.sh
 * points it at the real libhoop-cuda.so. Plain C with no test framework. It skips (77)
 * with the loader's message where no backend or no GPU can be had. Exit: 0 pass, 1
 * fail, 77 skip (the automake convention).
 */
#include <stdio.h>
#include <stdlib.h>

#include "hoop/autograd.h"
#include "hoop/tensor.h"
#include "run_suite.h"

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

/* x (1000 floats) goes to the GPU, y = x + x runs there, both come back. */
static void test_round_trip(void)
{
    enum { N = 1000 };
    static float x[N], back[N], sum[N];
    for (int i = 0; i < N; i++) x[i] = (float)i * 0.25f - 7.0f;
    const int64_t shape[1] = {N};
    hoop_tensor *t = NULL, *y = NULL;
    hoop_tape *tape = NULL;
    hoop_status st = hoop_tensor_new(&t, 1, shape, HOOP_DEVICE_CUDA, 0);
    EXPECT(st == HOOP_OK, "%s", hoop_last_error());
    if (st != HOOP_OK) return;
    EXPECT(hoop_tensor_device(t) == HOOP_DEVICE_CUDA, "device %d", (int)hoop_tensor_device(t));
    st = hoop_tensor_copy_from(t, x, N);
    EXPECT(st == HOOP_OK, "%s", hoop_last_error());
    st = hoop_tensor_copy_to_host(t, back, N);
    EXPECT(st == HOOP_OK, "%s", hoop_last_error());
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += back[i] != x[i];
    EXPECT(wrong == 0, "%d of %d elements changed in the round trip", wrong, N);
    EXPECT(hoop_tape_init(&tape) == HOOP_OK, "%s", hoop_last_error());
    st = hoop_add(tape, t, t, &y);
    EXPECT(st == HOOP_OK, "%s", hoop_last_error());
    if (st == HOOP_OK) {
        EXPECT(hoop_tensor_device(y) == HOOP_DEVICE_CUDA, "the sum is not on cuda");
        st = hoop_tensor_copy_to_host(y, sum, N);
        EXPECT(st == HOOP_OK, "%s", hoop_last_error());
        wrong = 0;
        for (int i = 0; i < N; i++) wrong += sum[i] != 2.0f * x[i];
        EXPECT(wrong == 0, "%d of %d sums wrong (sum[3] = %g)", wrong, N, (double)sum[3]);
    }
    hoop_tape_destroy(tape);
    hoop_tensor_free(t);
}

int main(void)
{
    use_test_cuda_backend();
    if (hoop_device_check(HOOP_DEVICE_CUDA) != HOOP_OK) {
        printf("SKIP: no CUDA device for hoop: %s\n", hoop_last_error());
        return 77;
    }
    test_round_trip();
    printf("%s: check_cuda\n", failures ? "FAIL" : "PASS");
    return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
