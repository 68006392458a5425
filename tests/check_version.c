/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_version.c -- hoop/version.h and hoop_version() (src/core/version.c).
 *
 * Links the shared libhoop, as a user's program does. The reference is configure's own
 * PACKAGE_VERSION (config.h), split here with sscanf, independently of the sed in
 * configure.ac that generated the header.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "hoop/hoop.h"
#include "run_suite.h"

START_TEST(test_header_matches_configure)
{
    int major = -1, minor = -1, patch = -1, used = 0;
    ck_assert_int_eq(sscanf(PACKAGE_VERSION, "%d.%d.%d%n", &major, &minor, &patch, &used), 3);
    ck_assert_int_eq(used, (int)strlen(PACKAGE_VERSION)); /* nothing after PATCH */
    ck_assert_int_eq(HOOP_VERSION_MAJOR, major);
    ck_assert_int_eq(HOOP_VERSION_MINOR, minor);
    ck_assert_int_eq(HOOP_VERSION_PATCH, patch);
    ck_assert_str_eq(HOOP_VERSION_STRING, PACKAGE_VERSION);
    ck_assert_int_eq(HOOP_VERSION_CODE, major * 10000 + minor * 100 + patch);
}
END_TEST

START_TEST(test_library_matches_header)
{
    ck_assert_int_eq(hoop_version(), HOOP_VERSION_CODE);
    ck_assert_str_eq(hoop_version_string(), PACKAGE_VERSION);
    ck_assert_str_eq(hoop_version_string(), HOOP_VERSION_STRING);
}
END_TEST

/* The code orders versions as the versions are ordered (values frozen by hand). */
START_TEST(test_code_orders_versions)
{
    ck_assert_int_eq(HOOP_VERSION_NUM(0, 1, 0), 100);
    ck_assert_int_eq(HOOP_VERSION_NUM(1, 2, 3), 10203);
    ck_assert_int_lt(HOOP_VERSION_NUM(0, 99, 99), HOOP_VERSION_NUM(1, 0, 0));
    ck_assert_int_lt(HOOP_VERSION_NUM(1, 9, 0), HOOP_VERSION_NUM(1, 10, 0));
    ck_assert_int_lt(HOOP_VERSION_NUM(2, 0, 9), HOOP_VERSION_NUM(2, 0, 10));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("version");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_header_matches_configure);
    tcase_add_test(tc, test_library_matches_header);
    tcase_add_test(tc, test_code_orders_versions);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
