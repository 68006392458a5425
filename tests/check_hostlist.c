/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_hostlist.c -- Slurm node-list expansion and the launcher's rank arithmetic.
 *
 * The expected lists were produced by `scontrol show hostnames 'LIST'` of Slurm 22.05.8
 * (Debian 12's slurm-client, SLURM_CONF pointing to a one-node slurm.conf) and frozen
 * here; the ranks for 2 nodes x 4 workers are written out by hand from
 * rank = node_rank * nproc_per_node + local_rank; tasks-per-node lists and srun-native
 * ports likewise.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/hostlist.h"
#include "core/launch.h"
#include "hoop/status.h"
#include "run_suite.h"

/* Input list and the hosts scontrol printed for it, joined by single spaces. */
static const struct {
    const char *list, *expected;
} good_cases[] = {
    {"node[001-003]", "node001 node002 node003"},
    {"a[1,3-4],b5", "a1 a3 a4 b5"},
    {"rack[1-2]-node[01-02]", "rack1-node01 rack1-node02 rack2-node01 rack2-node02"},
    {"gpu-node-[1-2]", "gpu-node-1 gpu-node-2"},
    {"single", "single"},
    {"x[8-11]", "x8 x9 x10 x11"},
    {"n[01-2]", "n01 n02"},
    {"n[1-02]", "n1 n2"},
    {"a[1-2],c[1-2]-d[3-4]", "a1 a2 c1-d3 c1-d4 c2-d3 c2-d4"},
    {"a[1-2]b[3-4]c[5-6]", "a1b3c5 a1b3c6 a2b3c5 a2b3c6 a1b4c5 a1b4c6 a2b4c5 a2b4c6"},
    {"a[1-2]b[3-4]c[5-6]d[7-8]",
     "a1b3c5d7 a1b3c5d8 a2b3c5d7 a2b3c5d8 a1b4c5d7 a1b4c5d8 a2b4c5d7 a2b4c5d8 "
     "a1b3c6d7 a1b3c6d8 a2b3c6d7 a2b3c6d8 a1b4c6d7 a1b4c6d8 a2b4c6d7 a2b4c6d8"},
    {"n[1-2][3-4]", "n13 n14 n23 n24"},
    {"[1-2]", "1 2"},
    {"a b\tc", "a b c"},
    {"a,b,,c", "a b c"},
    {"n[1-3,2]", "n1 n2 n3 n2"},
    {"n[007]", "n007"},
    {"x[098-101],y", "x098 x099 x100 x101 y"},
    {"r[1-2]n[1,3]", "r1n1 r1n3 r2n1 r2n3"},
};

START_TEST(test_expand_matches_scontrol)
{
    char **hosts = NULL;
    int count = -1;
    ck_assert_int_eq(hoop__hostlist_expand(good_cases[_i].list, &hosts, &count), HOOP_OK);
    char joined[1024] = "";
    for (int i = 0; i < count; i++) {
        if (i) strcat(joined, " ");
        ck_assert_uint_lt(strlen(joined) + strlen(hosts[i]), sizeof(joined) - 2);
        strcat(joined, hosts[i]);
    }
    ck_assert_msg(strcmp(joined, good_cases[_i].expected) == 0, "'%s' expanded to '%s', not '%s'",
                  good_cases[_i].list, joined, good_cases[_i].expected);
    hoop__hostlist_free(hosts, count);
}
END_TEST

/* A big range keeps its count and its last name (scontrol: node0000 .. node4095). */
START_TEST(test_expand_large)
{
    char **hosts = NULL;
    int count = 0;
    ck_assert_int_eq(hoop__hostlist_expand("node[0000-4095]", &hosts, &count), HOOP_OK);
    ck_assert_int_eq(count, 4096);
    ck_assert_str_eq(hosts[0], "node0000");
    ck_assert_str_eq(hosts[4095], "node4095");
    hoop__hostlist_free(hosts, count);
}
END_TEST

/* Malformed lists: scontrol says "Invalid hostlist" for most of them; we reject all. */
static const struct {
    const char *list, *fragment;
} bad_cases[] = {
    {"", "no host"},
    {" , ,", "no host"},
    {"n[3-1]", "reversed"},
    {"n[]", "empty brackets"},
    {"n[1-3", "'[' without ']'"},
    {"n1-3]", "']' without '['"},
    {"n[1-2]]", "']' without '['"},
    {"n[[1-2]]", "nested"},
    {"n[a,b]", "digits"},
    {"n[-1]", "lacks a number"},
    {"n[1-]", "lacks a number"},
    {"n[1-2-3]", "digits"},
    {"rack[1-2]-node", "follows the last bracket"},
    {"r[1-2]-n[01-02]x", "follows the last bracket"},
    {"n[0-65536]", "more than 65536"},
    {"a[0-999]b[0-999]", "more than 65536"},
};

START_TEST(test_expand_rejects)
{
    char **hosts = (char **)1;
    int count = -1;
    ck_assert_int_eq(hoop__hostlist_expand(bad_cases[_i].list, &hosts, &count), HOOP_ERR_INVALID);
    ck_assert_ptr_null(hosts);
    ck_assert_int_eq(count, 0);
    const char *msg = hoop_last_error();
    ck_assert_msg(strstr(msg, bad_cases[_i].list) != NULL, "message '%s' does not name '%s'", msg,
                  bad_cases[_i].list);
    ck_assert_msg(strstr(msg, bad_cases[_i].fragment) != NULL, "message '%s' lacks '%s'", msg,
                  bad_cases[_i].fragment);
}
END_TEST

/* 2 nodes x 4 workers: every (node_rank, local_rank) pair, written out. */
START_TEST(test_ranks_2x4)
{
    static const int expected_rank[2][4] = {{0, 1, 2, 3}, {4, 5, 6, 7}};
    int seen[8] = {0};
    for (int node = 0; node < 2; node++) {
        for (int lr = 0; lr < 4; lr++) {
            hoop_launch_ids ids;
            ck_assert_int_eq(hoop__launch_ids_of(2, node, 4, lr, &ids), HOOP_OK);
            ck_assert_int_eq(ids.rank, expected_rank[node][lr]);
            ck_assert_int_eq(ids.local_rank, lr);
            ck_assert_int_eq(ids.world_size, 8);
            ck_assert_int_eq(ids.local_world_size, 4);
            ck_assert_int_eq(ids.node_rank, node);
            seen[ids.rank]++;
        }
    }
    for (int r = 0; r < 8; r++) ck_assert_int_eq(seen[r], 1);
}
END_TEST

START_TEST(test_ranks_reject)
{
    hoop_launch_ids ids;
    ck_assert_int_eq(hoop__launch_ids_of(2, 2, 4, 0, &ids), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "--node-rank 2"));
    ck_assert_int_eq(hoop__launch_ids_of(2, 0, 0, 0, &ids), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "--nproc-per-node 0"));
    ck_assert_int_eq(hoop__launch_ids_of(0, 0, 4, 0, &ids), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "--nnodes 0"));
    ck_assert_int_eq(hoop__launch_ids_of(2, 1, 4, 4, &ids), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "local rank 4"));
    ck_assert_int_eq(hoop__launch_check(4096, 0, 4096), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__launch_check(1, 0, HOOP_LAUNCH_WORLD_MAX), HOOP_OK);
}
END_TEST

/* Tasks-per-node lists as Slurm writes them in SLURM_TASKS_PER_NODE ("2(x3),1" is what a
 * 4-node job with 7 tasks, block distribution, shows): node index -> count. */
static const struct {
    const char *spec;
    int node, tasks;
} tasks_cases[] = {
    {"2(x3),1", 0, 2}, {"2(x3),1", 2, 2}, {"2(x3),1", 3, 1}, {"4", 0, 4},
    {"1,2,3", 2, 3},   {"3,1", 1, 1},     {"2(x2)", 1, 2},   {"1(x2),5(x1),2", 3, 2},
};

START_TEST(test_tasks_on_node)
{
    int n = -1;
    ck_assert_int_eq(
        hoop__hostlist_tasks_on_node("V", tasks_cases[_i].spec, tasks_cases[_i].node, &n), HOOP_OK);
    ck_assert_msg(n == tasks_cases[_i].tasks, "'%s' node %d: %d tasks, not %d",
                  tasks_cases[_i].spec, tasks_cases[_i].node, n, tasks_cases[_i].tasks);
}
END_TEST

START_TEST(test_tasks_rejects)
{
    static const char *const bad[] = {"",     "0",      "2(x0)", "2(3)", "2(x3", "a",
                                      "2,,1", "2(x3)1", "-1",    "2 ",   NULL};
    int n;
    for (int i = 0; bad[i]; i++) {
        ck_assert_int_eq(hoop__hostlist_tasks_on_node("SLURM_TASKS_PER_NODE", bad[i], 0, &n),
                         HOOP_ERR_INVALID);
        ck_assert_msg(strstr(hoop_last_error(), "SLURM_TASKS_PER_NODE='") != NULL &&
                          strstr(hoop_last_error(), "is not a tasks-per-node list") != NULL,
                      "'%s': %s", bad[i], hoop_last_error());
    }
    ck_assert_int_eq(hoop__hostlist_tasks_on_node("V", "2(x3),1", 4, &n), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "lists 4 nodes; node 4 is not among them"));
    ck_assert_int_eq(hoop__hostlist_tasks_on_node("V", "2", -1, &n), HOOP_ERR_INVALID);
}
END_TEST

/* hoop__launch_slurm_port = 10000 + (job mod 1000) * 10 + (step mod 10), worked out by hand. */
START_TEST(test_slurm_port)
{
    ck_assert_int_eq(hoop__launch_slurm_port(1, 0), 10010);
    ck_assert_int_eq(hoop__launch_slurm_port(12345, 2), 13452);
    ck_assert_int_eq(hoop__launch_slurm_port(999, 9), 19999);
    ck_assert_int_eq(hoop__launch_slurm_port(1000, 10), 10000);
    ck_assert_int_eq(hoop__launch_slurm_port(4242, 3), 12423);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hostlist");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_expand_matches_scontrol, 0,
                        (int)(sizeof(good_cases) / sizeof(good_cases[0])));
    tcase_add_test(tc, test_expand_large);
    tcase_add_test(tc, test_ranks_2x4);
    tcase_add_loop_test(tc, test_tasks_on_node, 0,
                        (int)(sizeof(tasks_cases) / sizeof(tasks_cases[0])));
    tcase_add_test(tc, test_slurm_port);
    suite_add_tcase(s, tc);
    TCase *errs = tcase_create("errors");
    tcase_add_loop_test(errs, test_expand_rejects, 0,
                        (int)(sizeof(bad_cases) / sizeof(bad_cases[0])));
    tcase_add_test(errs, test_ranks_reject);
    tcase_add_test(errs, test_tasks_rejects);
    suite_add_tcase(s, errs);
    return run_suite(s);
}
