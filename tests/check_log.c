/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_log.c -- the settings of src/core/log.c that only take effect when the log
 * starts: HOOP_DEBUG=VERSION, the INFO version line, HOOP_DEBUG_TIMESTAMP_FORMAT.
 *
 * Each test runs in its own forked process (Check's default) and sets the environment
 * before anything logs, since the log reads it once per process.
 */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "core/env.h"
#include "core/log.h"
#include "run_suite.h"

static char lines[8][2048];
static int nlines;

static void capture(hoop_log_level level, const char *line, void *ud)
{
    (void)level;
    (void)ud;
    if (nlines < 8) snprintf(lines[nlines], sizeof(lines[0]), "%s", line);
    nlines++;
}

/* Counts captured lines that contain fragment. */
static int count_has(const char *fragment)
{
    int n = 0;
    for (int i = 0; i < nlines && i < 8; i++) n += strstr(lines[i], fragment) != NULL;
    return n;
}

/* An unknown HOOP_* variable is warned about at the default level, with the setting it
 * is a typo of (within 2 edits) when there is one, and ignored. */
START_TEST(test_unknown_setting_warned)
{
    unsetenv("HOOP_DEBUG");
    setenv("HOOP_TIMOUT", "5", 1);
    setenv("HOOP_XYZZY_PLUGH", "1", 1);
    nlines = 0;
    hoop_log_set(capture, NULL);
    ck_assert_int_eq(hoop__env_check_all(), HOOP_OK);
    ck_assert_int_eq(count_has("HOOP_TIMOUT is not a hoop setting (did you mean HOOP_TIMEOUT? "
                               "hooprun --help-env lists them); ignored"),
                     1);
    ck_assert_int_eq(
        count_has("HOOP_XYZZY_PLUGH is not a hoop setting (hooprun --help-env lists them)"), 1);
    unsetenv("HOOP_TIMOUT");
    unsetenv("HOOP_XYZZY_PLUGH");
}
END_TEST

START_TEST(test_version_once_through_the_sink)
{
    setenv("HOOP_DEBUG", "VERSION", 1);
    hoop_log_set(capture, NULL); /* reads the settings but writes nothing yet */
    ck_assert_int_eq(nlines, 0);
    hoop__log_init();
    hoop__log_init();
    HOOP_INFO(INIT, "an INFO line is not shown at VERSION");
    HOOP_WARN("a warning is");
    ck_assert_int_eq(nlines, 2);
    ck_assert_str_eq(lines[0], "hoop version " PACKAGE_VERSION);
    ck_assert_ptr_nonnull(strstr(lines[1], "hoop WARN "));
    ck_assert_ptr_nonnull(strstr(lines[1], "a warning is"));
}
END_TEST

START_TEST(test_version_to_the_file)
{
    char path[] = "/tmp/hoop-check-log.XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    setenv("HOOP_DEBUG", "version", 1); /* case does not matter */
    setenv("HOOP_DEBUG_FILE", path, 1);
    hoop__log_init();
    HOOP_INFO(INIT, "not at VERSION");
    hoop__log_init();
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char text[256] = "";
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    unlink(path);
    text[n] = '\0';
    ck_assert_str_eq(text, "hoop version " PACKAGE_VERSION "\n");
}
END_TEST

START_TEST(test_info_names_the_version)
{
    setenv("HOOP_DEBUG", "INFO", 1);
    hoop_log_set(capture, NULL);
    HOOP_INFO(NET, "not in the default mask");
    HOOP_INFO(INIT, "second");
    ck_assert_int_eq(nlines, 2);
    ck_assert_ptr_nonnull(
        strstr(lines[0], " hoop INFO INIT: hoop version " PACKAGE_VERSION " (CUDA "));
    ck_assert_ptr_nonnull(strstr(lines[1], " hoop INFO INIT: second"));
    ck_assert_int_eq(count_has("hoop version"), 1);
}
END_TEST

START_TEST(test_no_version_at_warn)
{
    setenv("HOOP_DEBUG", "WARN", 1);
    hoop_log_set(capture, NULL);
    hoop__log_init();
    HOOP_WARN("only this");
    ck_assert_int_eq(nlines, 1);
    ck_assert_int_eq(count_has("hoop version"), 0);
    /* And no timestamp unless asked for: the line starts with the host name. */
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    ck_assert_int_eq(strncmp(lines[0], host, strlen(host)), 0);
}
END_TEST

/* Parses "[YYYY-MM-DD HH:MM:SS.fff] " and checks it lies between before and after. */
START_TEST(test_timestamps)
{
    setenv("HOOP_DEBUG_TIMESTAMP_FORMAT", "[%Y-%m-%d %H:%M:%S.%3f] %% %f|%9f ", 1);
    hoop_log_set(capture, NULL);
    time_t before = time(NULL);
    HOOP_WARN("stamped");
    time_t after = time(NULL);
    ck_assert_int_eq(nlines, 1);
    struct tm tm = {0};
    char ms[4] = "", us[7] = "", ns[10] = "";
    int used = 0;
    int got =
        sscanf(lines[0], "[%4d-%2d-%2d %2d:%2d:%2d.%3[0-9]] %% %6[0-9]|%9[0-9] %n", &tm.tm_year,
               &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, ms, us, ns, &used);
    ck_assert_msg(got == 9 && used > 0, "line '%s' does not start with the stamp", lines[0]);
    ck_assert_uint_eq(strlen(ms), 3);
    ck_assert_uint_eq(strlen(us), 6);
    ck_assert_uint_eq(strlen(ns), 9);
    ck_assert_int_eq(strncmp(ms, us, 3), 0); /* the same instant, more digits */
    ck_assert_int_eq(strncmp(us, ns, 6), 0);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_isdst = -1;
    time_t t = mktime(&tm);
    ck_assert_msg(t >= before && t <= after, "stamp %lld is not in [%lld, %lld]", (long long)t,
                  (long long)before, (long long)after);
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    ck_assert_int_eq(strncmp(lines[0] + used, host, strlen(host)), 0);
    ck_assert_ptr_nonnull(strstr(lines[0], "stamped"));
}
END_TEST

/* What HOOP_DEBUG_TIMESTAMP_FORMAT takes: every accepted form, and each refused one with
 * why; env.c's check (which the tools run, exit 2) says the same, naming the variable. */
static const char *const ts_good[] = {
    "",
    "[%F %T.%3f] ",
    "%Y-%m-%dT%H:%M:%S.%f%z ",
    "%s.%9f|%% %1f %a %A %b %B %e %j %Z",
    "%Ec %EY %Od %OH %k %l %P %p %r %R %D %n %t %u %w %U %V %W %g %G %C %y %x %X %h %I %c",
    "plain text, no conversion"};
static const struct {
    const char *format, *why;
} ts_bad[] = {
    {"%Q ", "'%Q' is not a conversion it takes"},
    {"[%T] %", "'%' is not a conversion it takes"},
    {"%0f", "'%0' is not a conversion it takes"},
    {"%Ez", "'%Ez' is not a conversion it takes"},
    {"%Oq", "'%Oq' is not a conversion it takes"},
    {"%E", "'%E' is not a conversion it takes"},
    {"%-d", "'%-' is not a conversion it takes"},
    {"%A %A %A %A %A %A %A %A %A %A %A %A %A %A %A %A %A",
     "the time it writes can be longer than 159 bytes"},
};

START_TEST(test_timestamp_format_check)
{
    char why[160];
    for (size_t i = 0; i < sizeof(ts_good) / sizeof(ts_good[0]); i++) {
        ck_assert_msg(hoop__log_ts_format_check(ts_good[i], why, sizeof(why)) == 1, "'%s': %s",
                      ts_good[i], why);
        setenv("HOOP_DEBUG_TIMESTAMP_FORMAT", ts_good[i], 1);
        ck_assert_int_eq(hoop__env_check_all(), HOOP_OK);
    }
    for (size_t i = 0; i < sizeof(ts_bad) / sizeof(ts_bad[0]); i++) {
        why[0] = '\0';
        ck_assert_msg(hoop__log_ts_format_check(ts_bad[i].format, why, sizeof(why)) == 0,
                      "'%s' was taken", ts_bad[i].format);
        ck_assert_msg(strstr(why, ts_bad[i].why), "'%s': %s", ts_bad[i].format, why);
        setenv("HOOP_DEBUG_TIMESTAMP_FORMAT", ts_bad[i].format, 1);
        const char *v;
        ck_assert_int_eq(hoop__env_str("HOOP_DEBUG_TIMESTAMP_FORMAT", &v), HOOP_ERR_INVALID);
        char want[200];
        snprintf(want, sizeof(want), "HOOP_DEBUG_TIMESTAMP_FORMAT='%s': %s", ts_bad[i].format,
                 ts_bad[i].why);
        ck_assert_msg(strstr(hoop_last_error(), want), "%s", hoop_last_error());
        ck_assert_ptr_nonnull(strstr(hoop_last_error(), "%1f..%9f"));
    }
    char long_format[200];
    memset(long_format, 'x', 128);
    long_format[128] = '\0';
    ck_assert_int_eq(hoop__log_ts_format_check(long_format, why, sizeof(why)), 0);
    ck_assert_ptr_nonnull(strstr(why, "it is 128 bytes long, over 127"));
    long_format[127] = '\0';
    ck_assert_int_eq(hoop__log_ts_format_check(long_format, why, sizeof(why)), 1);
}
END_TEST

/* The logger stamps nothing with a format it does not take (rather than garbage). */
START_TEST(test_bad_timestamp_format_ignored)
{
    setenv("HOOP_DEBUG_TIMESTAMP_FORMAT", "%Q [%T] ", 1);
    hoop_log_set(capture, NULL);
    HOOP_WARN("unstamped");
    ck_assert_int_eq(nlines, 1);
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    ck_assert_msg(strncmp(lines[0], host, strlen(host)) == 0, "%s", lines[0]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("start");
    tcase_add_test(tc, test_version_once_through_the_sink);
    tcase_add_test(tc, test_version_to_the_file);
    tcase_add_test(tc, test_info_names_the_version);
    tcase_add_test(tc, test_no_version_at_warn);
    tcase_add_test(tc, test_timestamps);
    tcase_add_test(tc, test_timestamp_format_check);
    tcase_add_test(tc, test_bad_timestamp_format_ignored);
    tcase_add_test(tc, test_unknown_setting_warned);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
