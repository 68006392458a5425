/*
 * tests/check_cuda.c -- the CUDA toolchain and launch path work (skips without a GPU).
 *
 * Runs with CK_NOFORK: CUDA state must never cross a fork() (NVIDIA's CUDA C++
 * guide), so the parent process is the only one that touches CUDA.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "config.h"
#include "cuda/device.h"

START_TEST(test_smoke_kernel)
{
    float x[1000];
    for (int i = 0; i < 1000; i++) x[i] = (float)i;
    ck_assert_int_eq(hoop__cuda_smoke(x, 1000), HOOP_OK);
    for (int i = 0; i < 1000; i++) ck_assert_float_eq(x[i], (float)i + 1.0f);
    ck_assert_int_eq(hoop__cuda_smoke(x, 0), HOOP_ERR_INVALID);
}
END_TEST

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
    Suite *s = suite_create("cuda");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_smoke_kernel);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
