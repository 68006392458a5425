/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_env.c -- the HOOP_* table and the env:// contract reject bad values; in an
 * srun step, unset variables of the contract come from Slurm's.
 */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/fault.h"
#include "run_suite.h"

static void clear_dist(void)
{
    const char *names[] = {"MASTER_ADDR",
                           "MASTER_PORT",
                           "RANK",
                           "WORLD_SIZE",
                           "LOCAL_RANK",
                           "LOCAL_WORLD_SIZE",
                           "HOOP_TOKEN",
                           "SLURM_STEP_ID",
                           "SLURM_JOB_ID",
                           "SLURM_PROCID",
                           "SLURM_LOCALID",
                           "SLURM_NODEID",
                           "SLURM_STEP_NUM_TASKS",
                           "SLURM_NTASKS",
                           "SLURM_STEP_TASKS_PER_NODE",
                           "SLURM_TASKS_PER_NODE",
                           "SLURM_NTASKS_PER_NODE",
                           "SLURM_STEP_NODELIST",
                           "SLURM_JOB_NODELIST",
                           "SLURM_NODELIST"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) unsetenv(names[i]);
}

/* Task 3 of step 4242.3 (2 nodes x 2 tasks), as srun sets it (values seen in a
 * Slurm 22.05 job on slurm/rig.sh, job and step ids changed). */
static void set_srun_task(void)
{
    clear_dist();
    setenv("SLURM_STEP_ID", "3", 1);
    setenv("SLURM_JOB_ID", "4242", 1);
    setenv("SLURM_PROCID", "3", 1);
    setenv("SLURM_LOCALID", "1", 1);
    setenv("SLURM_NODEID", "1", 1);
    setenv("SLURM_STEP_NUM_TASKS", "4", 1);
    setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_STEP_TASKS_PER_NODE", "2(x2)", 1);
    setenv("SLURM_TASKS_PER_NODE", "2(x2)", 1);
    setenv("SLURM_NTASKS_PER_NODE", "2", 1);
    setenv("SLURM_STEP_NODELIST", "node[1-2]", 1);
    setenv("SLURM_JOB_NODELIST", "node[1-2]", 1);
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
    ck_assert_int_eq(d.port_from_slurm, 0);
    ck_assert_int_eq(d.rank, 5);
    ck_assert_int_eq(d.world_size, 8);
    ck_assert_int_eq(d.local_rank, 1);
    ck_assert_int_eq(d.local_world_size, 4);
    /* HOOP_TOKEN: 63 characters fit the transports' hello; 64 are refused here, on every
     * rank (rank 1 used to wait out HOOP_TIMEOUT for a rank 0 that refused it) */
    char t[65];
    memset(t, 'x', 64);
    t[63] = '\0';
    setenv("HOOP_TOKEN", t, 1);
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_OK);
    ck_assert_str_eq(d.token, t);
    t[63] = 'x', t[64] = '\0';
    setenv("HOOP_TOKEN", t, 1);
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "HOOP_TOKEN is longer than 63 characters"));
    unsetenv("HOOP_TOKEN");
    /* A LOCAL_RANK against the LOCAL_WORLD_SIZE nobody set says where that came from */
    set_dist("29500", "0", "1");
    setenv("LOCAL_RANK", "7", 1);
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_ERR_INVALID);
    ck_assert_str_eq(hoop_last_error(), "LOCAL_RANK=7 is not below LOCAL_WORLD_SIZE=1 (from "
                                        "WORLD_SIZE, as LOCAL_WORLD_SIZE is unset)");
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
    ck_assert_ptr_nonnull(
        strstr(hoop_last_error(), "MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK are not set"));
    setenv("MASTER_PORT", "29500", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("RANK", "1", 1);
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_ERR_INVALID);
    ck_assert_msg(strstr(hoop_last_error(), "MASTER_ADDR is not set (hint:") &&
                      !strstr(hoop_last_error(), "also"),
                  "%s", hoop_last_error());
}
END_TEST

/* Started by mpirun (another launcher's world size above 1, no env:// contract): every
 * hoop program joins (hoop__env_dist_wanted) and is refused naming the variable, rather
 * than run a world of one; a size of 1, or part of the contract set, is not mpirun's case. */
START_TEST(test_dist_foreign_launcher)
{
    hoop_dist_env d;
    static const char *const names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char want[64];
        clear_dist();
        setenv(names[i], "1", 1);
        ck_assert_int_eq(hoop__env_dist_wanted(), 0);
        setenv(names[i], "4", 1);
        ck_assert_int_eq(hoop__env_dist_wanted(), 1);
        ck_assert_int_eq(hoop__env_dist(&d), HOOP_ERR_INVALID);
        snprintf(want, sizeof(want), "%s=4: started by ", names[i]);
        ck_assert_msg(strstr(hoop_last_error(), want) &&
                          strstr(hoop_last_error(), "start the ranks with hooprun"),
                      "%s", hoop_last_error());
        setenv("WORLD_SIZE", "4", 1); /* hoop's own, partly: what is missing is named */
        ck_assert_int_eq(hoop__env_dist(&d), HOOP_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(hoop_last_error(), "MASTER_ADDR, MASTER_PORT and RANK"));
        unsetenv(names[i]);
    }
    clear_dist();
}
END_TEST

/* A partial contract by hand: what was given is checked before what is missing is named,
 * and both are said at once (WORLD_SIZE=abc with no MASTER_ADDR names WORLD_SIZE first). */
static const struct {
    const char *name, *value, *culprit, *missing;
} partial_cases[] = {
    {"WORLD_SIZE", "abc", "WORLD_SIZE='abc' is not an integer; also ",
     "MASTER_ADDR, MASTER_PORT and RANK are not set"},
    {"WORLD_SIZE", "0", "WORLD_SIZE=0 is out of range [1, 1048576]; also ",
     "MASTER_ADDR, MASTER_PORT and RANK are not set"},
    {"RANK", "x", "RANK='x' is not an integer; also ",
     "MASTER_ADDR, MASTER_PORT and WORLD_SIZE are not set"},
    {"MASTER_PORT", "70000", "MASTER_PORT=70000 is out of range", "MASTER_ADDR, WORLD_SIZE and"},
    {"LOCAL_RANK", "-1", "LOCAL_RANK=-1 is out of range", "MASTER_ADDR, MASTER_PORT, WORLD_SIZE"},
};

START_TEST(test_dist_partial)
{
    hoop_dist_env d;
    clear_dist();
    setenv(partial_cases[_i].name, partial_cases[_i].value, 1);
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_ERR_INVALID);
    const char *m = hoop_last_error(), *bad = strstr(m, partial_cases[_i].culprit);
    const char *missing = strstr(m, partial_cases[_i].missing);
    ck_assert_msg(bad && missing && bad < missing, "message '%s' lacks '%s' before '%s'", m,
                  partial_cases[_i].culprit, partial_cases[_i].missing);
    /* Both given and contradictory: the relation is named as well. */
    clear_dist();
    setenv("RANK", "4", 1);
    setenv("WORLD_SIZE", "4", 1);
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "RANK=4 is not below WORLD_SIZE=4; also "
                                                    "MASTER_ADDR and MASTER_PORT are not set"));
}
END_TEST

/* srun-native start: every variable from the step; MASTER_PORT = 10000 + 242 * 10 + 3. */
START_TEST(test_dist_srun)
{
    hoop_dist_env d;
    set_srun_task();
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_OK);
    ck_assert_str_eq(d.master_addr, "node1");
    ck_assert_int_eq(d.master_port, 12423);
    ck_assert_int_eq(d.port_from_slurm, 1); /* a port in use says it came from the job id */
    ck_assert_int_eq(d.rank, 3);
    ck_assert_int_eq(d.world_size, 4);
    ck_assert_int_eq(d.local_rank, 1);
    ck_assert_int_eq(d.local_world_size, 2);
    ck_assert_str_eq(d.token, "slurm-4242.3");
    ck_assert_int_eq(d.from_slurm, 1);
    setenv("HOOP_TOKEN", "a-real-secret", 1);
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_OK);
    ck_assert_str_eq(d.token, "a-real-secret");
    /* The job's variables when the step's are missing (older Slurm): node 1 of "3,1". */
    unsetenv("SLURM_STEP_NUM_TASKS");
    unsetenv("SLURM_STEP_TASKS_PER_NODE");
    unsetenv("SLURM_STEP_NODELIST");
    setenv("SLURM_TASKS_PER_NODE", "3,1", 1);
    setenv("SLURM_PROCID", "3", 1);
    setenv("SLURM_LOCALID", "0", 1);
    setenv("SLURM_JOB_NODELIST", "gpu[07-08]", 1);
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_OK);
    ck_assert_int_eq(d.world_size, 4);
    ck_assert_int_eq(d.local_world_size, 1);
    ck_assert_int_eq(d.local_rank, 0);
    ck_assert_str_eq(d.master_addr, "gpu07");
    /* Only SLURM_NTASKS_PER_NODE and SLURM_NODELIST. */
    unsetenv("SLURM_TASKS_PER_NODE");
    unsetenv("SLURM_JOB_NODELIST");
    setenv("SLURM_NODELIST", "solo", 1);
    setenv("SLURM_LOCALID", "1", 1);
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_OK);
    ck_assert_int_eq(d.local_world_size, 2);
    ck_assert_str_eq(d.master_addr, "solo");
}
END_TEST

/* What is set wins, one variable at a time; with everything set, Slurm's variables are
 * not even read (a malformed one does not matter), and no token is made up. */
START_TEST(test_dist_srun_explicit_wins)
{
    hoop_dist_env d;
    set_srun_task();
    setenv("RANK", "6", 1);
    setenv("WORLD_SIZE", "8", 1);
    setenv("MASTER_ADDR", "10.0.0.5", 1);
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_OK);
    ck_assert_str_eq(d.master_addr, "10.0.0.5");
    ck_assert_int_eq(d.master_port, 12423); /* still Slurm's */
    ck_assert_int_eq(d.rank, 6);
    ck_assert_int_eq(d.world_size, 8);
    ck_assert_int_eq(d.local_rank, 1);
    ck_assert_int_eq(d.local_world_size, 2);
    ck_assert_str_eq(d.token, "slurm-4242.3");
    setenv("MASTER_PORT", "29500", 1);
    setenv("LOCAL_RANK", "0", 1);
    setenv("LOCAL_WORLD_SIZE", "4", 1);
    setenv("SLURM_STEP_TASKS_PER_NODE", "garbage", 1);
    setenv("SLURM_JOB_ID", "not-a-number", 1);
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_OK);
    ck_assert_int_eq(d.master_port, 29500);
    ck_assert_int_eq(d.local_world_size, 4);
    ck_assert_int_eq(d.from_slurm, 0);
    ck_assert_str_eq(d.token, "");
}
END_TEST

/* A batch script has SLURM_PROCID=0 and the job's SLURM_NTASKS, but it is not a step: a
 * lone process there must not wait for 3 peers. */
START_TEST(test_dist_batch_script_is_not_a_step)
{
    hoop_dist_env d;
    set_srun_task();
    unsetenv("SLURM_STEP_ID");
    setenv("SLURM_PROCID", "0", 1);
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "MASTER_ADDR, MASTER_PORT"));
}
END_TEST

/* Malformed or contradictory Slurm values are named, with the variable they came from. */
static const struct {
    const char *name, *value, *fragment;
} srun_bad[] = {
    {"SLURM_STEP_TASKS_PER_NODE", "2(x", "SLURM_STEP_TASKS_PER_NODE='2(x' is not a tasks-per"},
    {"SLURM_PROCID", "5",
     "RANK=5 (from SLURM_PROCID) is not below WORLD_SIZE=4 (from "
     "SLURM_STEP_NUM_TASKS)"},
    {"SLURM_LOCALID", "2",
     "LOCAL_RANK=2 (from SLURM_LOCALID) is not below LOCAL_WORLD_SIZE=2 "
     "(from SLURM_STEP_TASKS_PER_NODE)"},
    {"SLURM_JOB_ID", NULL, "SLURM_JOB_ID is not set, though SLURM_STEP_ID is"},
    {"SLURM_STEP_ID", "x", "SLURM_STEP_ID='x' is not an integer"},
    {"SLURM_STEP_NODELIST", "n[3-1]", "SLURM_STEP_NODELIST: node list 'n[3-1]' is malformed"},
    {"SLURM_NODEID", "2", "SLURM_STEP_TASKS_PER_NODE='2(x2)' lists 2 nodes; node 2 is not"},
    {"SLURM_STEP_NUM_TASKS", "0", "SLURM_STEP_NUM_TASKS=0 is out of range"},
};

START_TEST(test_dist_srun_rejects)
{
    hoop_dist_env d;
    set_srun_task();
    if (srun_bad[_i].value)
        setenv(srun_bad[_i].name, srun_bad[_i].value, 1);
    else
        unsetenv(srun_bad[_i].name);
    ck_assert_int_eq(hoop__env_dist(&d), HOOP_ERR_INVALID);
    ck_assert_msg(strstr(hoop_last_error(), srun_bad[_i].fragment) != NULL,
                  "message '%s' lacks '%s'", hoop_last_error(), srun_bad[_i].fragment);
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
    setenv("HOOP_TIMEOUT", "-1.5", 1); /* a number, but signed: said so */
    ck_assert_int_eq(hoop__env_ms("HOOP_TIMEOUT", &v), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "HOOP_TIMEOUT='-1.5' is negative"));
    setenv("HOOP_TIMEOUT", "-x", 1);
    ck_assert_int_eq(hoop__env_ms("HOOP_TIMEOUT", &v), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "HOOP_TIMEOUT='-x' is not a number"));
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

/* The verbs transport's settings: defaults, ranges, and the forms of the two strings. */
START_TEST(test_ib_knobs)
{
    static const struct {
        const char *name;
        int64_t def, min, max;
    } ints[] = {{"HOOP_IB_GID_INDEX", -1, -1, 255}, {"HOOP_IB_TIMEOUT", 20, 1, 31},
                {"HOOP_IB_RETRY_CNT", 7, 0, 7},     {"HOOP_IB_TC", 0, 0, 255},
                {"HOOP_IB_SL", 0, 0, 15},           {"HOOP_IB_REG_CACHE", 1, 0, 2}};
    int64_t v;
    const char *s;
    char text[32];
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        unsetenv(ints[i].name);
        ck_assert_int_eq(hoop__env_int(ints[i].name, &v), HOOP_OK);
        ck_assert_int_eq(v, ints[i].def);
        snprintf(text, sizeof(text), "%lld", (long long)ints[i].max);
        setenv(ints[i].name, text, 1);
        ck_assert_int_eq(hoop__env_int(ints[i].name, &v), HOOP_OK);
        ck_assert_int_eq(v, ints[i].max);
        snprintf(text, sizeof(text), "%lld", (long long)ints[i].max + 1);
        setenv(ints[i].name, text, 1);
        ck_assert_int_eq(hoop__env_int(ints[i].name, &v), HOOP_ERR_INVALID);
        assert_error_has(ints[i].name, "out of range");
        snprintf(text, sizeof(text), "%lld", (long long)ints[i].min - 1);
        setenv(ints[i].name, text, 1);
        ck_assert_int_eq(hoop__env_check_all(), HOOP_ERR_INVALID);
        unsetenv(ints[i].name);
    }
    static const char *const hca_ok[] = {"mlx5_0",  "mlx5_0:1,mlx5_1", "^mlx5_2",
                                         "=rxe0:1", "^=rxe-eth0,mlx4", "bnxt_re.1:255"};
    static const char *const hca_bad[] = {
        "",        "^",          "^=",  "mlx5_0:", "mlx5_0:0",      ":1",
        "mlx5_0,", "mlx5_0:256", "a b", "mlx5:x",  "mlx5_0,,mlx5_1"};
    for (size_t i = 0; i < sizeof(hca_ok) / sizeof(hca_ok[0]); i++) {
        setenv("HOOP_IB_HCA", hca_ok[i], 1);
        ck_assert_msg(hoop__env_str("HOOP_IB_HCA", &s) == HOOP_OK, "'%s': %s", hca_ok[i],
                      hoop_last_error());
        ck_assert_str_eq(s, hca_ok[i]);
    }
    for (size_t i = 1; i < sizeof(hca_bad) / sizeof(hca_bad[0]); i++) { /* "" = unset */
        setenv("HOOP_IB_HCA", hca_bad[i], 1);
        ck_assert_msg(hoop__env_str("HOOP_IB_HCA", &s) == HOOP_ERR_INVALID, "'%s' accepted",
                      hca_bad[i]);
        assert_error_has("HOOP_IB_HCA='", hca_bad[i]);
    }
    setenv("HOOP_IB_HCA", "mlx5_0,mlx5_1:x", 1);
    ck_assert_int_eq(hoop__env_str("HOOP_IB_HCA", &s), HOOP_ERR_INVALID);
    assert_error_has("'mlx5_1:x'", "port");
    unsetenv("HOOP_IB_HCA");
    ck_assert_int_eq(hoop__env_str("HOOP_IB_HCA", &s), HOOP_OK);
    ck_assert_ptr_null(s);
    static const char *const range_ok[] = {"10.0.0.0/8", "192.168.1.0/24", "0.0.0.0/0",
                                           "fd00::/8",   "::ffff:0:0/96",  "10.1.2.3/32"};
    static const char *const range_bad[] = {"10.0.0.0",   "10.0.0.0/33", "10.0.0/8",
                                            "fd00::/129", "10.0.0.0/",   "/8",
                                            "x/8",        "10.0.0.0/-1", "10.0.0.0/8x"};
    for (size_t i = 0; i < sizeof(range_ok) / sizeof(range_ok[0]); i++) {
        setenv("HOOP_IB_ADDR_RANGE", range_ok[i], 1);
        ck_assert_msg(hoop__env_str("HOOP_IB_ADDR_RANGE", &s) == HOOP_OK, "'%s': %s", range_ok[i],
                      hoop_last_error());
    }
    for (size_t i = 0; i < sizeof(range_bad) / sizeof(range_bad[0]); i++) {
        setenv("HOOP_IB_ADDR_RANGE", range_bad[i], 1);
        ck_assert_msg(hoop__env_str("HOOP_IB_ADDR_RANGE", &s) == HOOP_ERR_INVALID, "'%s' accepted",
                      range_bad[i]);
        assert_error_has("HOOP_IB_ADDR_RANGE='", "is not an address range in CIDR");
    }
    unsetenv("HOOP_IB_ADDR_RANGE");
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
    ck_assert_int_eq(hoop__parse_bytes("-b", "1T", 0, INT64_MAX, &v), HOOP_OK);
    ck_assert_int_eq(v, 1LL << 40);
    ck_assert_int_eq(hoop__parse_bytes("-b", "2tb", 0, INT64_MAX, &v), HOOP_OK);
    ck_assert_int_eq(v, 2LL << 40);
    /* Past 64 bits, with a suffix or without: out of range, not malformed. */
    ck_assert_int_eq(hoop__parse_bytes("-b", "99999999999G", 0, INT64_MAX, &v), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "out of range"));
    ck_assert_int_eq(hoop__parse_bytes("-b", "99999999999999999999", 0, INT64_MAX, &v),
                     HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "-b=99999999999999999999 is out of range"));
    ck_assert_int_eq(hoop__parse_int("-n", "99999999999999999999", 1, 64, &v), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(
        strstr(hoop_last_error(), "-n=99999999999999999999 is out of range [1, 64]"));
    ck_assert_int_eq(hoop__parse_int("-n", "-99999999999999999999", 1, 64, &v), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "is out of range"));
    ck_assert_int_eq(hoop__parse_bytes("-b", "1P", 0, INT64_MAX, &v), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "is not a size in bytes"));
}
END_TEST

/* One rule for white space around a number, in every parser: refused, before and after,
 * whatever the kind (strtoll and strtod would skip it in front). Seconds start with a
 * digit and count at least 1 ms when positive, as the CUDA backend reads HOOP_TIMEOUT;
 * decimals refuse what a double cannot hold, and -0 reads as 0. */
START_TEST(test_number_text)
{
    static const char *const padded[] = {" 5", "5 ", "\t5", "5\n", " 5 ", " "};
    int64_t v;
    double d;
    for (size_t i = 0; i < sizeof(padded) / sizeof(padded[0]); i++) {
        const char *s = padded[i];
        ck_assert_int_eq(hoop__parse_int("x", s, 0, 100, &v), HOOP_ERR_INVALID);
        ck_assert_int_eq(hoop__parse_bytes("x", s, 0, 100, &v), HOOP_ERR_INVALID);
        ck_assert_int_eq(hoop__parse_seconds_ms("x", s, &v), HOOP_ERR_INVALID);
        ck_assert_int_eq(hoop__parse_decimal("x", s, 0, 100, &d), HOOP_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(hoop_last_error(), "is not a number"));
        setenv("HOOP_TIMEOUT", s, 1);
        ck_assert_int_eq(hoop__env_ms("HOOP_TIMEOUT", &v), HOOP_ERR_INVALID);
        setenv("HOOP_TCP_NSOCKS", s, 1);
        ck_assert_int_eq(hoop__env_int("HOOP_TCP_NSOCKS", &v), HOOP_ERR_INVALID);
    }
    unsetenv("HOOP_TCP_NSOCKS");
    ck_assert_int_eq(hoop__parse_seconds_ms("x", ".5", &v), HOOP_OK); /* no sign; a point */
    ck_assert_int_eq(v, 500);
    ck_assert_int_eq(hoop__parse_seconds_ms("x", "+5", &v), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__parse_seconds_ms("x", "-0", &v), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__parse_seconds_ms("x", "inf", &v), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__parse_seconds_ms("x", ".", &v), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__parse_seconds_ms("x", "0x10", &v), HOOP_ERR_INVALID); /* C's hex */
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "x='0x10' is not a number of seconds"));
    ck_assert_int_eq(hoop__parse_seconds_ms("x", "0x1p-2", &v), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__parse_seconds_ms("x", "1e3", &v), HOOP_OK); /* decimal exponent */
    ck_assert_int_eq(v, 1000000);
    ck_assert_int_eq(hoop__parse_seconds_ms("x", "2.5E-1", &v), HOOP_OK);
    ck_assert_int_eq(v, 250);
    setenv("HOOP_TIMEOUT", "0x10", 1);
    ck_assert_int_eq(hoop__env_ms("HOOP_TIMEOUT", &v), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__parse_seconds_ms("x", "1e-400", &v), HOOP_OK); /* underflow: > 0 */
    ck_assert_int_eq(v, 1);
    ck_assert_int_eq(hoop__parse_seconds_ms("x", "0.5", &v), HOOP_OK);
    ck_assert_int_eq(v, 500);
    setenv("HOOP_TIMEOUT", "0.0001", 1); /* 0.1 ms: positive, so 1 ms, not "not > 0" */
    ck_assert_int_eq(hoop__env_ms("HOOP_TIMEOUT", &v), HOOP_OK);
    ck_assert_int_eq(v, 1);
    setenv("HOOP_TIMEOUT", "0", 1);
    ck_assert_int_eq(hoop__env_ms("HOOP_TIMEOUT", &v), HOOP_ERR_INVALID);
    unsetenv("HOOP_TIMEOUT");
    ck_assert_int_eq(hoop__parse_decimal("x", "0.25", 0, 1, &d), HOOP_OK);
    ck_assert(d == 0.25);
    ck_assert_int_eq(hoop__parse_decimal("x", "-0", 0, 1, &d), HOOP_OK);
    ck_assert(d == 0.0 && !signbit(d));
    ck_assert_int_eq(hoop__parse_decimal("x", "1e-400", 0, 1, &d), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "x=1e-400 is too small"));
    ck_assert_int_eq(hoop__parse_decimal("x", "1e400", 0, 1, &d), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "x=1e400 is out of range"));
    ck_assert_int_eq(hoop__parse_decimal("x", "inf", 0, 1, &d), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__parse_decimal("x", "nan", 0, 1, &d), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__parse_decimal("x", "", 0, 1, &d), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__parse_decimal("x", "2", 0, 1, &d), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "x=2 is out of range [0, 1]"));
}
END_TEST

/* HOOP_TEST_FAULT (the test hook): every field required and checked, so that no
 * ordinary value arms it; hoop__env_check_all refuses a malformed one. */
static const struct {
    const char *text, *says;
} fault_bad[] = {
    {"", "field 1 is missing"},
    {"2:all_gather:3", "field 4 is missing"},
    {"2:all_gather:3:KILL:x", "more than four fields"},
    {"2:all_gather:3:KILL:", "more than four fields"}, /* an empty fifth one */
    {"x:all_gather:3:KILL", "RANK='x' is not an integer"},
    {"-1:all_gather:3:KILL", "RANK=-1 is out of range"},
    {"2:gather:3:KILL", "'gather' is not a point"},
    {"2:all_gather:-3:KILL", "INDEX=-3 is out of range"},
    {"2:all_gather:3:HUP", "'HUP' is not a signal (KILL, STOP, TERM, SEGV), FAIL or CORRUPT"},
    {"2::3:KILL", "field 2 is missing"},
    {"1", "field 2 is missing"},
};

START_TEST(test_test_fault)
{
    hoop__fault_spec f;
    ck_assert_int_eq(hoop__fault_parse("2:all_gather:3:KILL", &f), HOOP_OK);
    ck_assert_int_eq(f.rank, 2);
    ck_assert_int_eq(f.point, HOOP__FAULT_ALL_GATHER);
    ck_assert_int_eq(f.index, 3);
    ck_assert_int_eq(f.sig, SIGKILL);
    ck_assert_int_eq(hoop__fault_parse("0:checkpoint:0:STOP", &f), HOOP_OK);
    ck_assert_int_eq(f.point, HOOP__FAULT_CHECKPOINT);
    ck_assert_int_eq(f.sig, SIGSTOP);
    ck_assert_int_eq(hoop__fault_parse("3:verdict:0:FAIL", &f), HOOP_OK);
    ck_assert_int_eq(f.point, HOOP__FAULT_VERDICT);
    ck_assert_int_eq(f.sig, HOOP__FAULT_FAIL);
    for (size_t i = 0; i < sizeof(fault_bad) / sizeof(fault_bad[0]); i++) {
        ck_assert_int_eq(hoop__fault_parse(fault_bad[i].text, &f), HOOP_ERR_INVALID);
        ck_assert_msg(strstr(hoop_last_error(), fault_bad[i].says), "'%s': %s", fault_bad[i].text,
                      hoop_last_error());
    }
    setenv("HOOP_TEST_FAULT", "2:all_gather:3:HUP", 1);
    ck_assert_int_eq(hoop__env_check_all(), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "HOOP_TEST_FAULT"));
    setenv("HOOP_TEST_FAULT", "2:all_gather:3:KILL", 1);
    ck_assert_int_eq(hoop__env_check_all(), HOOP_OK);
    /* Armed for rank 2's call #3: nothing else fires. */
    ck_assert_int_eq(hoop__fault_at(HOOP__FAULT_ALL_GATHER, 2, 3), 1);
    ck_assert_int_eq(hoop__fault_at(HOOP__FAULT_ALL_GATHER, 1, 3), 0);
    ck_assert_int_eq(hoop__fault_at(HOOP__FAULT_ALL_GATHER, 2, 2), 0);
    ck_assert_int_eq(hoop__fault_at(HOOP__FAULT_REDUCE_SCATTER, 2, 3), 0);
    ck_assert_int_eq(hoop__fault_tick(HOOP__FAULT_BACKWARD, 2), 0);
    /* Counted points: the INDEX-th occurrence (from 0) on the named rank only. */
    ck_assert_int_eq(hoop__fault_arm("1:backward:2:KILL"), HOOP_OK);
    ck_assert_int_eq(hoop__fault_tick(HOOP__FAULT_BACKWARD, 0), 0);
    ck_assert_int_eq(hoop__fault_tick(HOOP__FAULT_BACKWARD, 1), 0);
    ck_assert_int_eq(hoop__fault_tick(HOOP__FAULT_BACKWARD, 1), 0);
    ck_assert_int_eq(hoop__fault_tick(HOOP__FAULT_BACKWARD, 1), 1);
    ck_assert_int_eq(hoop__fault_tick(HOOP__FAULT_BACKWARD, 1), 0);
    ck_assert_int_eq(hoop__fault_arm(NULL), HOOP_OK);
    ck_assert_int_eq(hoop__fault_tick(HOOP__FAULT_BACKWARD, 1), 0);
    unsetenv("HOOP_TEST_FAULT");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("env");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_dist_ok);
    tcase_add_test(tc, test_dist_srun);
    tcase_add_test(tc, test_dist_srun_explicit_wins);
    tcase_add_test(tc, test_dist_batch_script_is_not_a_step);
    tcase_add_test(tc, test_knobs);
    tcase_add_test(tc, test_ib_knobs);
    tcase_add_test(tc, test_help_lists_every_knob);
    tcase_add_test(tc, test_parse_bytes);
    tcase_add_test(tc, test_number_text);
    tcase_add_test(tc, test_test_fault);
    suite_add_tcase(s, tc);
    TCase *errs = tcase_create("errors");
    tcase_add_loop_test(errs, test_dist_rejects, 0,
                        (int)(sizeof(bad_cases) / sizeof(bad_cases[0])));
    tcase_add_test(errs, test_dist_missing_master);
    tcase_add_test(errs, test_dist_foreign_launcher);
    tcase_add_loop_test(errs, test_dist_partial, 0,
                        (int)(sizeof(partial_cases) / sizeof(partial_cases[0])));
    tcase_add_loop_test(errs, test_dist_srun_rejects, 0,
                        (int)(sizeof(srun_bad) / sizeof(srun_bad[0])));
    suite_add_tcase(s, errs);
    return run_suite(s);
}
