/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/run_suite.h -- what every Check-based test program shares: running its suite,
 * and asserting on the text of the last hoop error.
 */
#ifndef HOOP_TESTS_RUN_SUITE_H
#define HOOP_TESTS_RUN_SUITE_H

#include <check.h>
#include <stdlib.h>
#include <string.h>

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

#endif /* HOOP_TESTS_RUN_SUITE_H */
