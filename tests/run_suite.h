/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/run_suite.h -- what every Check-based test program shares: running its suite,
 * and asserting on the text of the last hoop error.
 */
#ifndef HOOP_TESTS_RUN_SUITE_H
#define HOOP_TESTS_RUN_SUITE_H

#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hoop/status.h"

/* Runs every test of s (forked, as Check does by default); returns how many failed. */
static inline int suite_failures(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed;
}

/* Runs fn in a child process and returns what it returned (its exit status, 0..255; -1
 * when the child did not exit normally). A GPU test asks for the device this way: CUDA
 * initialised in the parent does not survive the fork of each test case (NVIDIA's CUDA
 * C++ Programming Guide), so the parent must not touch CUDA before Check forks. */
static inline int in_child(int (*fn)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int r = fn();
        fflush(stdout);
        _exit(r & 255);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}

/* Points HOOP_CUDA_BACKEND at the CUDA backend make check built on the host execution
 * layer (TEST_CUDA_HX_BACKEND, exported by Makefile.am) unless it is set already, as
 * tests/gpu/run.sh sets it to the real module. */
static inline void use_test_cuda_backend(void)
{
    const char *hx = getenv("TEST_CUDA_HX_BACKEND");
    if (getenv("HOOP_CUDA_BACKEND") == NULL && hx != NULL) setenv("HOOP_CUDA_BACKEND", hx, 1);
}

/* The exit status for main: EXIT_SUCCESS when every test of s passed. */
static inline int run_suite(Suite *s)
{
    return suite_failures(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* The last error's message names a (and b, unless NULL). */
static inline void assert_error_has(const char *a, const char *b)
{
    ck_assert_msg(strstr(hoop_last_error(), a) != NULL, "'%s' not in: %s", a, hoop_last_error());
    if (b)
        ck_assert_msg(strstr(hoop_last_error(), b) != NULL, "'%s' not in: %s", b,
                      hoop_last_error());
}

#if defined(__SANITIZE_THREAD__)
#define HOOP_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HOOP_TEST_TSAN 1
#endif
#endif

/* Whether this build checks tight latency bounds (an upper limit on a measured time of
 * a few hundred ms): 0 under ThreadSanitizer, 1 otherwise. TSan checks every memory
 * access and runs 5-15x slower (copying the store's 16 MiB reply alone takes ~100 ms
 * there), so such a bound says nothing about hoop in that build; the test still runs
 * for its races, and its results and lower bounds (a wait that returns too early) are
 * checked in every build. Prints, once per process, which test left its bound out.
 * Check's timeouts, which only catch hangs, are stretched by CK_TIMEOUT_MULTIPLIER
 * (scripts/sanitize-check.sh sets it) instead. */
static inline int latency_checked(const char *test)
{
#ifdef HOOP_TEST_TSAN
    static atomic_int said;
    if (!atomic_exchange(&said, 1))
        fprintf(stderr, "note: %s: latency bound not checked under ThreadSanitizer\n", test);
    return 0;
#else
    (void)test;
    return 1;
#endif
}

#endif /* HOOP_TESTS_RUN_SUITE_H */
