/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_status.c -- status table, last-error message, CHECK macros, logging.
 */
#include <check.h>
#include <pthread.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/log.h"
#include "run_suite.h"

START_TEST(test_status_table)
{
    ck_assert_str_eq(hoop_status_str(HOOP_OK), "success");
    ck_assert_str_eq(hoop_status_str(HOOP_ERR_TIMEOUT), "deadline exceeded");
    ck_assert_str_eq(hoop_status_name(HOOP_ERR_MISMATCH), "HOOP_ERR_MISMATCH");
    ck_assert_int_eq(HOOP_ERR_INTERNAL, 11);
    ck_assert_str_eq(hoop_status_str((hoop_status)999), "unknown status");
    ck_assert_str_eq(hoop_status_name((hoop_status)-1), "HOOP_UNKNOWN");
}
END_TEST

static hoop_status inner(int x)
{
    if (x < 0) return HOOP_ERROR(HOOP_ERR_INVALID, "x=%d must not be negative", x);
    return HOOP_OK;
}

static hoop_status outer(int x)
{
    HOOP_CHECK(inner(x));
    return HOOP_OK;
}

static hoop_status with_goto(int x, int *cleaned)
{
    hoop_status st = HOOP_OK;
    HOOP_CHECK_GOTO(inner(x), st, fail);
fail:
    *cleaned = 1;
    return st;
}

START_TEST(test_error_message_at_origin)
{
    ck_assert_int_eq(outer(1), HOOP_OK);
    ck_assert_int_eq(outer(-3), HOOP_ERR_INVALID);
    /* The user reads the message; where it arose is for HOOP_DEBUG=DEBUG (below). */
    ck_assert_str_eq(hoop_last_error(), "x=-3 must not be negative");
    int cleaned = 0;
    ck_assert_int_eq(with_goto(-1, &cleaned), HOOP_ERR_INVALID);
    ck_assert_int_eq(cleaned, 1);
    hoop_status keep = HOOP_OK;
    HOOP_CHECK_KEEP(inner(-1), keep);
    HOOP_CHECK_KEEP(HOOP_ERR_SYSTEM, keep);
    ck_assert_int_eq(keep, HOOP_ERR_INVALID);
    /* A message that quotes the previous one (as callers that add context do), twice:
     * the old text must come out whole after the new prefix. */
    ck_assert_int_eq(inner(-3), HOOP_ERR_INVALID);
    ck_assert_int_eq(HOOP_ERROR(HOOP_ERR_SYSTEM, "while loading: %s", hoop_last_error()),
                     HOOP_ERR_SYSTEM);
    ck_assert_int_eq(HOOP_ERROR(HOOP_ERR_SYSTEM, "rank %d %s", 2, hoop_last_error()),
                     HOOP_ERR_SYSTEM);
    ck_assert_str_eq(hoop_last_error(), "rank 2 while loading: x=-3 must not be negative");
}
END_TEST

static void *thread_error(void *arg)
{
    (void)arg;
    inner(-7);
    return strstr(hoop_last_error(), "x=-7") ? (void *)1 : NULL;
}

START_TEST(test_last_error_is_thread_local)
{
    inner(-1);
    pthread_t t;
    void *ok = NULL;
    ck_assert_int_eq(pthread_create(&t, NULL, thread_error, NULL), 0);
    pthread_join(t, &ok);
    ck_assert_ptr_nonnull(ok);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "x=-1"));
}
END_TEST

static hoop_status syscall_fails(void)
{
    errno = 0;
    HOOP_SYSCHECK(close(-1), "close(-1)");
    return HOOP_OK;
}

START_TEST(test_syscheck)
{
    ck_assert_int_eq(syscall_fails(), HOOP_ERR_SYSTEM);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "close(-1) failed: Bad file descriptor"));
}
END_TEST

START_TEST(test_calloc_overflow)
{
    double *p = NULL;
    ck_assert_int_eq(hoop__calloc(&p, SIZE_MAX / 2), HOOP_ERR_NOMEM);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(hoop__calloc(&p, 16), HOOP_OK);
    ck_assert(p[15] == 0.0);
    free(p);
}
END_TEST

static char captured[4096];
static void capture(hoop_log_level level, const char *line, void *ud)
{
    (void)level;
    (void)ud;
    strncat(captured, line, sizeof(captured) - strlen(captured) - 2);
    strcat(captured, "\n");
}

START_TEST(test_log_levels_and_mask)
{
    unsigned mask;
    char bad[32];
    ck_assert(hoop__log_parse_mask("INIT,NET", &mask, bad, sizeof bad));
    ck_assert_uint_eq(mask, HOOP_LOG_INIT | HOOP_LOG_NET);
    ck_assert(hoop__log_parse_mask("^TCP", &mask, bad, sizeof bad));
    ck_assert_uint_eq(mask & HOOP_LOG_TCP, 0);
    ck_assert_uint_ne(mask & HOOP_LOG_COLL, 0);
    ck_assert(!hoop__log_parse_mask("INIT,BOGUS", &mask, bad, sizeof bad));
    ck_assert_str_eq(bad, "BOGUS");
    ck_assert_int_eq(hoop__log_parse_level("trace"), HOOP_LOG_TRACE);
    ck_assert_int_eq(hoop__log_parse_level("loud"), -1);

    hoop_log_set(capture, NULL);
    hoop_log_set_rank(3);
    hoop__log_level = HOOP_LOG_INFO;
    hoop__log_mask = HOOP_LOG_NET;
    HOOP_INFO(NET, "connected to rank %d", 5);
    HOOP_INFO(TCP, "must not appear");
    HOOP_DEBUGF(NET, "must not appear either");
    HOOP_WARN("a warning %s", "here");
    hoop_log_set(NULL, NULL);
    ck_assert_ptr_nonnull(strstr(captured, "[3] hoop INFO NET: connected to rank 5"));
    ck_assert_ptr_null(strstr(captured, "must not appear"));
    ck_assert_ptr_nonnull(strstr(captured, "hoop WARN "));
    ck_assert_ptr_nonnull(strstr(captured, "check_status.c:"));

    /* At DEBUG an error's origin is logged with its message. */
    captured[0] = '\0';
    hoop_log_set(capture, NULL);
    hoop__log_level = HOOP_LOG_DEBUG;
    hoop__log_mask = HOOP_LOG_ALL;
    ck_assert_int_eq(outer(-4), HOOP_ERR_INVALID);
    hoop_log_set(NULL, NULL);
    hoop__log_level = HOOP_LOG_WARN;
    ck_assert_ptr_nonnull(strstr(captured, "check_status.c:"));
    ck_assert_ptr_nonnull(strstr(captured, "HOOP_ERR_INVALID: x=-4 must not be negative"));
    ck_assert_str_eq(hoop_last_error(), "x=-4 must not be negative");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("status");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_status_table);
    tcase_add_test(core, test_error_message_at_origin);
    tcase_add_test(core, test_last_error_is_thread_local);
    tcase_add_test(core, test_syscheck);
    tcase_add_test(core, test_calloc_overflow);
    tcase_add_test(core, test_log_levels_and_mask);
    suite_add_tcase(s, core);
    return run_suite(s);
}
