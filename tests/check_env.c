/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_env.c -- the HOOP_* table and the env:// contract reject bad values.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "run_suite.h"

static void clear_dist(void)
{
    const char *names[] = {"MASTER_ADDR", "MASTER_PORT", "RANK",
                           "WORLD_SIZE",  "LOCAL_RANK",  "LOCAL_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) unsetenv(names[i]);
}

static void set_dist(const char *port, const char *rank, const char *ws)
{
    clear_dist();
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    setenv("RANK", rank, 1);
    setenv("WORLD_SIZE", ws, 1);
}

START_TEST(test_dist_ok)
{
    hoop_dist_env d;
    set_dist("29500", "5", "8");
    setenv("LOCAL_WORLD_SIZE", "4", 1);
    setenv("LOCAL_RANK", "1", 1);
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_OK);
    ck_assert_str_eq(d.master_addr, "127.0.0.1");
    ck_assert_int_eq(d.master_port, 29500);
    ck_assert_int_eq(d.rank, 5);
    ck_assert_int_eq(d.world_size, 8);
    ck_assert_int_eq(d.local_rank, 1);
    ck_assert_int_eq(d.local_world_size, 4);
}
END_TEST

/* Each bad case: the failing variable and a fragment of the message. */
static const struct {
    const char *port, *rank, *ws, *culprit;
} bad_cases[] = {
    {"abc", "0", "2", "MASTER_PORT='abc' is not an integer"},
    {"70000", "0", "2", "MASTER_PORT=70000 is out of range"},
    {"0", "0", "2", "MASTER_PORT=0 is out of range"},
    {"29500", "4", "4", "RANK=4 is not below WORLD_SIZE=4"},
    {"29500", "-1", "4", "RANK=-1 is out of range"},
    {"29500", "0", "-2", "WORLD_SIZE=-2 is out of range"},
    {"29500", "0", "", "WORLD_SIZE is not set"},
    {"29500", "1x", "4", "RANK='1x' is not an integer"},
};

START_TEST(test_dist_rejects)
{
    hoop_dist_env d;
    set_dist(bad_cases[_i].port, bad_cases[_i].rank, bad_cases[_i].ws);
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_ERR_INVALID);
    ck_assert_msg(strstr(hoop_last_error(), bad_cases[_i].culprit) != NULL,
                  "message '%s' lacks '%s'", hoop_last_error(), bad_cases[_i].culprit);
}
END_TEST

START_TEST(test_dist_missing_master)
{
    hoop_dist_env d;
    clear_dist();
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "MASTER_ADDR is not set"));
}
END_TEST

START_TEST(test_knobs)
{
    int64_t v;
    const char *s;
    unsetenv("HOOP_TCP_NSOCKS");
    ck_assert_int_eq(hoop__env_int("HOOP_TCP_NSOCKS", &v), HOOP_OK);
    ck_assert_int_eq(v, 2);
    setenv("HOOP_CHUNK_BYTES", "1M", 1);
    ck_assert_int_eq(hoop__env_int("HOOP_CHUNK_BYTES", &v), HOOP_OK);
    ck_assert_int_eq(v, 1 << 20);
    setenv("HOOP_CHUNK_BYTES", "-5", 1);
    ck_assert_int_eq(hoop__env_int("HOOP_CHUNK_BYTES", &v), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "HOOP_CHUNK_BYTES"));
    setenv("HOOP_CHUNK_BYTES", "1T", 1);
    ck_assert_int_eq(hoop__env_int("HOOP_CHUNK_BYTES", &v), HOOP_ERR_INVALID);
    unsetenv("HOOP_CHUNK_BYTES");
    setenv("HOOP_TIMEOUT", "abc", 1);
    ck_assert_int_eq(hoop__env_ms("HOOP_TIMEOUT", &v), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(
        strstr(hoop_last_error(), "HOOP_TIMEOUT='abc' is not a number of seconds"));
    setenv("HOOP_TIMEOUT", "0", 1);
    ck_assert_int_eq(hoop__env_ms("HOOP_TIMEOUT", &v), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "must be more than 0 seconds"));
    setenv("HOOP_TIMEOUT", "2.5", 1);
    ck_assert_int_eq(hoop__env_ms("HOOP_TIMEOUT", &v), HOOP_OK);
    ck_assert_int_eq(v, 2500);
    ck_assert_int_eq(hoop__env_check_all(), HOOP_OK);
    setenv("HOOP_TRANSPORT", "carrier-pigeon", 1);
    ck_assert_int_eq(hoop__env_str("HOOP_TRANSPORT", &s), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__env_check_all(), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "HOOP_TRANSPORT='carrier-pigeon'"));
    setenv("HOOP_TRANSPORT", "TCP", 1);
    ck_assert_int_eq(hoop__env_str("HOOP_TRANSPORT", &s), HOOP_OK);
    ck_assert_int_eq(hoop__env_int("HOOP_NOT_A_KNOB", &v), HOOP_ERR_INTERNAL);
}
END_TEST

START_TEST(test_help_lists_every_knob)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    hoop__env_print_help(f);
    fclose(f);
    for (const hoop_env_param *p = hoop__env_params; p->name; p++) {
        ck_assert_ptr_nonnull(strstr(buf, p->name));
        ck_assert_ptr_nonnull(p->desc);
    }
    free(buf);
}
END_TEST

START_TEST(test_parse_bytes)
{
    int64_t v;
    ck_assert_int_eq(hoop__parse_bytes("-b", "256M", 0, INT64_MAX, &v), HOOP_OK);
    ck_assert_int_eq(v, 256LL << 20);
    ck_assert_int_eq(hoop__parse_bytes("-b", "8", 0, INT64_MAX, &v), HOOP_OK);
    ck_assert_int_eq(v, 8);
    ck_assert_int_eq(hoop__parse_bytes("-b", "4KB", 0, INT64_MAX, &v), HOOP_OK);
    ck_assert_int_eq(v, 4096);
    ck_assert_int_eq(hoop__parse_bytes("-b", "x", 0, INT64_MAX, &v), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__parse_bytes("-b", "99999999999G", 0, INT64_MAX, &v), HOOP_ERR_INVALID);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("env");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_dist_ok);
    tcase_add_test(tc, test_knobs);
    tcase_add_test(tc, test_help_lists_every_knob);
    tcase_add_test(tc, test_parse_bytes);
    suite_add_tcase(s, tc);
    TCase *errs = tcase_create("errors");
    tcase_add_loop_test(errs, test_dist_rejects, 0,
                        (int)(sizeof(bad_cases) / sizeof(bad_cases[0])));
    tcase_add_test(errs, test_dist_missing_master);
    suite_add_tcase(s, errs);
    return run_suite(s);
}
