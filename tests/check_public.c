/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_public.c -- the installed library's surface: this program includes only
 * <hoop/hoop.h> and links the shared libhoop, so it sees exactly what users see.
 */
#include <check.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "hoop/hoop.h"
#include "run_suite.h"

START_TEST(test_public_symbols_visible)
{
    ck_assert_str_eq(hoop_status_str(HOOP_ERR_REMOTE), "peer closed or failed");
    ck_assert_str_eq(hoop_last_error(), "");
    void *self = dlopen(NULL, RTLD_NOW);
    ck_assert_ptr_nonnull(self);
    ck_assert_ptr_nonnull(dlsym(self, "hoop_status_str"));
    ck_assert_ptr_nonnull(dlsym(self, "hoop_sampler_new"));
    /* Internal functions are hidden by -fvisibility=hidden. */
    ck_assert_ptr_null(dlsym(self, "hoop__set_error"));
    ck_assert_ptr_null(dlsym(self, "hoop__env_dist"));
    dlclose(self);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("public");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_public_symbols_visible);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
