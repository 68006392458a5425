/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_ib_host.c -- the verbs transport's device-independent parts, no HCA
 * needed: the HOOP_IB_HCA parser and matcher, the GID choice on made-up GID tables,
 * GIDs as text, completion statuses as messages (where libibverbs is built in), and the
 * registration cache against a fake reg/dereg pair that records every call, and the
 * ranges a peer's QP half must respect.
 *
 * References: the HOOP_IB_HCA cases follow NCCL_IB_HCA's documented syntax and
 * examples; the GID tables are shaped like those of Soft-RoCE and mlx5 RoCE ports (a
 * link-local v1/v2 pair, then an IPv4-mapped v1/v2 pair per address); the status texts
 * are rdma-core 44's ibv_wc_status_str, frozen here; the cache's expected calls are
 * worked out by hand from its contract (regcache.h).
 */
#include <arpa/inet.h>
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/rng.h"
#include "transport/ib_util.h"
#include "transport/regcache.h"
#include "run_suite.h"

#ifdef HOOP_HAVE_VERBS
#include <infiniband/verbs.h>
#endif

// ----------------------------------------------------------------- HOOP_IB_HCA

static hoop__ib_hca_spec parse_ok(const char *text)
{
    hoop__ib_hca_spec s;
    hoop_status st = hoop__ib_hca_parse(text, &s);
    ck_assert_msg(st == HOOP_OK, "'%s': %s", text ? text : "(null)", hoop_last_error());
    return s;
}

START_TEST(test_hca_list_with_ports)
{
    hoop__ib_hca_spec s = parse_ok("mlx5_0:1,mlx5_1");
    ck_assert_int_eq(s.n, 2);
    ck_assert_int_eq(s.exclude, 0);
    ck_assert_int_eq(s.exact, 0);
    ck_assert_str_eq(s.dev[0].name, "mlx5_0");
    ck_assert_int_eq(s.dev[0].port, 1);
    ck_assert_str_eq(s.dev[1].name, "mlx5_1");
    ck_assert_int_eq(s.dev[1].port, 0);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_0", 1), 1);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_0", 2), 0); /* only port 1 of mlx5_0 */
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_1", 1), 1);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_1", 2), 1);  /* every port of mlx5_1 */
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_10", 1), 1); /* "mlx5_1" prefixes it */
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_2", 1), 0);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx4_0", 1), 0);
    /* Blanks around entries are dropped. */
    s = parse_ok("  mlx5_0:1 , mlx5_1 ");
    ck_assert_int_eq(s.n, 2);
    ck_assert_str_eq(s.dev[0].name, "mlx5_0");
    ck_assert_int_eq(s.dev[0].port, 1);
    ck_assert_str_eq(s.dev[1].name, "mlx5_1");
}
END_TEST

START_TEST(test_hca_prefix)
{
    hoop__ib_hca_spec s = parse_ok("mlx5");
    ck_assert_int_eq(s.n, 1);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_0", 1), 1);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_10", 2), 1);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5", 1), 1);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx4_0", 1), 0);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "rxe0", 1), 0);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx", 1), 0); /* the name is longer than dev */
}
END_TEST

START_TEST(test_hca_exclude)
{
    hoop__ib_hca_spec s = parse_ok("^mlx5_3");
    ck_assert_int_eq(s.exclude, 1);
    ck_assert_int_eq(s.exact, 0);
    ck_assert_int_eq(s.n, 1);
    ck_assert_str_eq(s.dev[0].name, "mlx5_3");
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_3", 1), 0);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_30", 1), 0); /* prefix, excluded too */
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_0", 1), 1);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "rxe0", 1), 1);
}
END_TEST

START_TEST(test_hca_exact)
{
    hoop__ib_hca_spec s = parse_ok("=mlx5_0");
    ck_assert_int_eq(s.exact, 1);
    ck_assert_int_eq(s.exclude, 0);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_0", 1), 1);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_0", 2), 1);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_00", 1), 0);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_01", 1), 0);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_", 1), 0);
}
END_TEST

START_TEST(test_hca_exclude_exact_port)
{
    hoop__ib_hca_spec s = parse_ok("^=mlx5_0:2");
    ck_assert_int_eq(s.exclude, 1);
    ck_assert_int_eq(s.exact, 1);
    ck_assert_int_eq(s.n, 1);
    ck_assert_int_eq(s.dev[0].port, 2);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_0", 2), 0);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_0", 1), 1);
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_00", 2), 1); /* not the exact name */
    ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_1", 2), 1);
}
END_TEST

START_TEST(test_hca_everything)
{
    const char *texts[] = {NULL, "", "   "};
    for (size_t i = 0; i < HOOP_ARRAY_SIZE(texts); i++) {
        hoop__ib_hca_spec s = parse_ok(texts[i]);
        ck_assert_int_eq(s.n, 0);
        ck_assert_int_eq(hoop__ib_hca_match(&s, "mlx5_0", 1), 1);
        ck_assert_int_eq(hoop__ib_hca_match(&s, "rxe0", 3), 1);
    }
    ck_assert_int_eq(hoop__ib_hca_match(NULL, "rxe0", 1), 1);
    hoop__ib_hca_spec s = parse_ok("rxe0");
    ck_assert_int_eq(hoop__ib_hca_match(&s, NULL, 1), 0);
}
END_TEST

START_TEST(test_hca_limits)
{
    /* 32 entries and a 63-byte name are fine. */
    char text[64 * 40] = "";
    for (int i = 0; i < HOOP__IB_HCA_MAX; i++)
        snprintf(text + strlen(text), sizeof(text) - strlen(text), "%sdev%d:%d", i ? "," : "", i,
                 i % 255 + 1);
    hoop__ib_hca_spec s = parse_ok(text);
    ck_assert_int_eq(s.n, HOOP__IB_HCA_MAX);
    ck_assert_str_eq(s.dev[31].name, "dev31");
    ck_assert_int_eq(s.dev[31].port, 32);
    char name[64];
    memset(name, 'x', 63);
    name[63] = '\0';
    s = parse_ok(name);
    ck_assert_str_eq(s.dev[0].name, name);
    s = parse_ok("mlx5_0:255");
    ck_assert_int_eq(s.dev[0].port, 255);
}
END_TEST

/* Bad lists and two strings each message must contain (the value and the culprit). */
static const struct {
    const char *text, *a, *b;
} bad_hca[] = {
    {"mlx5_0,,mlx5_1", "'mlx5_0,,mlx5_1'", "entry 2 is empty"},
    {"mlx5_0,", "'mlx5_0,'", "entry 2 is empty"},
    {",mlx5_0", "',mlx5_0'", "entry 1 is empty"},
    {":1", "':1'", "entry ':1' has no device name"},
    {"mlx5_0:", "entry 'mlx5_0:'", "bad port ''"},
    {"mlx5_0:x", "entry 'mlx5_0:x'", "bad port 'x'"},
    {"mlx5_0:0", "entry 'mlx5_0:0'", "bad port '0'"},
    {"mlx5_0:256", "entry 'mlx5_0:256'", "bad port '256'"},
    {"mlx5_0:-1", "entry 'mlx5_0:-1'", "bad port '-1'"},
    {"mlx5_0:1:2", "entry 'mlx5_0:1:2'", "bad port '1:2'"},
    {"mlx5_0:1x", "entry 'mlx5_0:1x'", "bad port '1x'"},
    {"^", "HOOP_IB_HCA='^'", "no device after '^'"},
    {"=", "HOOP_IB_HCA='='", "no device after '='"},
    {"^= ", "HOOP_IB_HCA='^= '", "no device after '^='"},
    {"mlx5_0,^mlx5_1", "device name '^mlx5_1'", "contains '^'"},
    {"=^mlx5_1", "device name '^mlx5_1'", "contains '^'"},
    {"mlx5 0", "device name 'mlx5 0'", "contains ' '"},
    {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx:1",
     "device name 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'",
     "longer than 63 bytes"},
};

START_TEST(test_hca_bad)
{
    hoop__ib_hca_spec s;
    memset(&s, 0x5a, sizeof(s));
    ck_assert_int_eq(hoop__ib_hca_parse(bad_hca[_i].text, &s), HOOP_ERR_INVALID);
    assert_error_has(bad_hca[_i].a, bad_hca[_i].b);
    assert_error_has("HOOP_IB_HCA=", NULL);
    ck_assert_int_eq(s.n, 0); /* no half-parsed list */
    ck_assert_int_eq(s.exclude, 0);
}
END_TEST

START_TEST(test_hca_too_many)
{
    char text[64 * 40] = "";
    for (int i = 0; i <= HOOP__IB_HCA_MAX; i++)
        snprintf(text + strlen(text), sizeof(text) - strlen(text), "%sdev%d", i ? "," : "", i);
    hoop__ib_hca_spec s;
    ck_assert_int_eq(hoop__ib_hca_parse(text, &s), HOOP_ERR_INVALID);
    assert_error_has("more than 32 entries", "'dev32' is one too many");
    ck_assert_int_eq(s.n, 0);
    ck_assert_int_eq(hoop__ib_hca_parse("x", NULL), HOOP_ERR_INVALID);
}
END_TEST

// ----------------------------------------------------------------- GIDs

/* A GID from text: IPv4 as ::ffff:a.b.c.d, "" as the empty entry. */
static hoop__ib_gid gid(const char *addr, int type)
{
    hoop__ib_gid g = {.type = type};
    if (!*addr) return g;
    struct in_addr v4;
    if (inet_pton(AF_INET, addr, &v4) == 1) {
        g.raw[10] = g.raw[11] = 0xff;
        memcpy(g.raw + 12, &v4, 4);
    } else {
        ck_assert_int_eq(inet_pton(AF_INET6, addr, g.raw), 1);
    }
    return g;
}

enum { V1 = HOOP__IB_GID_ROCE_V1, V2 = HOOP__IB_GID_ROCE_V2, IB = HOOP__IB_GID_IB };

static int pick(const hoop__ib_gid *tab, int n, int want, const char *range)
{
    int index = -7;
    hoop_status st = hoop__ib_gid_pick(tab, n, 1, want, range, "rxe0", 1, &index);
    ck_assert_msg(st == HOOP_OK, "pick: %s", hoop_last_error());
    return index;
}

static void pick_fails(const hoop__ib_gid *tab, int n, int link_eth, int want, const char *range,
                       hoop_status expect)
{
    int index = -7;
    ck_assert_int_eq(hoop__ib_gid_pick(tab, n, link_eth, want, range, "rxe0", 1, &index), expect);
    ck_assert_int_eq(index, -7); /* untouched */
}

START_TEST(test_gid_roce_normal)
{
    /* The shape of a Soft-RoCE port with one IPv4 address. */
    hoop__ib_gid tab[] = {gid("fe80::5054:ff:fe12:3456", V1), gid("fe80::5054:ff:fe12:3456", V2),
                          gid("10.0.0.1", V1), gid("10.0.0.1", V2)};
    ck_assert_int_eq(pick(tab, 4, -1, NULL), 3);
    ck_assert_int_eq(pick(tab, 4, -1, ""), 3); /* an empty range is no range */
    /* The order of the classes: v2 IPv4 > v2 IPv6 > v1 IPv4 > v1 IPv6, lowest index first
     * within one. */
    hoop__ib_gid t2[] = {gid("10.0.0.1", V1), gid("2001:db8::1", V2), gid("2001:db8::1", V1),
                         gid("10.0.0.2", V2), gid("10.0.0.3", V2)};
    ck_assert_int_eq(pick(t2, 5, -1, NULL), 3);
    ck_assert_int_eq(pick(t2, 3, -1, NULL), 1); /* without the v2 IPv4 ones */
    ck_assert_int_eq(pick(t2, 1, -1, NULL), 0);
    hoop__ib_gid t3[] = {gid("2001:db8::1", V1), gid("10.0.0.1", V1)};
    ck_assert_int_eq(pick(t3, 2, -1, NULL), 1);
    ck_assert_int_eq(pick(t3, 1, -1, NULL), 0);
    /* The kernel names RoCE v1 "IB/RoCE v1": type IB on an Ethernet port counts as v1. */
    hoop__ib_gid t4[] = {gid("fe80::1", IB), gid("10.0.0.1", IB), gid("2001:db8::1", V2)};
    ck_assert_int_eq(pick(t4, 3, -1, NULL), 2);
    ck_assert_int_eq(pick(t4, 2, -1, NULL), 1);
    /* Empty entries (holes in the table) and unknown types are skipped. */
    hoop__ib_gid t5[] = {gid("", V2), gid("10.0.0.9", 7), gid("10.0.0.1", V1), gid("", V2)};
    ck_assert_int_eq(pick(t5, 4, -1, NULL), 2);
}
END_TEST

START_TEST(test_gid_ipv6_only)
{
    hoop__ib_gid tab[] = {gid("fe80::1", V1), gid("fe80::1", V2), gid("fd12:3456::5", V1),
                          gid("fd12:3456::5", V2)};
    ck_assert_int_eq(pick(tab, 4, -1, NULL), 3);
    ck_assert_int_eq(pick(tab, 3, -1, NULL), 2);
    /* fe80::/10 covers febf::, but fec0:: is outside it. */
    hoop__ib_gid t2[] = {gid("febf::1", V2), gid("fec0::1", V2)};
    ck_assert_int_eq(pick(t2, 2, -1, NULL), 1);
}
END_TEST

START_TEST(test_gid_link_local_only)
{
    hoop__ib_gid tab[] = {gid("fe80::5054:ff:fe12:3456", V1), gid("fe80::5054:ff:fe12:3456", V2),
                          gid("", V1)};
    pick_fails(tab, 3, 1, -1, NULL, HOOP_ERR_UNSUPPORTED);
    assert_error_has("rxe0 port 1: no RoCE v2 or v1 GID with a global address (found: ",
                     "0 fe80::5054:ff:fe12:3456 v1, 1 fe80::5054:ff:fe12:3456 v2)");
    assert_error_has("HOOP_IB_GID_INDEX", NULL);
    pick_fails(tab, 0, 1, -1, NULL, HOOP_ERR_UNSUPPORTED);
    assert_error_has("(found: no GID)", NULL);
    hoop__ib_gid empty[4] = {{{0}, 0}};
    pick_fails(empty, 4, 1, -1, NULL, HOOP_ERR_UNSUPPORTED);
    assert_error_has("(found: no GID)", NULL);
}
END_TEST

START_TEST(test_gid_list_cut_short)
{
    /* 100 link-local entries do not fit one message: the list ends with a count. */
    hoop__ib_gid tab[100];
    for (int i = 0; i < 100; i++) tab[i] = gid("fe80::abcd:ef01:2345:6789", V2);
    pick_fails(tab, 100, 1, -1, NULL, HOOP_ERR_UNSUPPORTED);
    assert_error_has("(found: 0 fe80::abcd:ef01:2345:6789 v2, 1 fe80::", " more)");
    ck_assert_ptr_null(strstr(hoop_last_error(), "99 fe80"));
}
END_TEST

START_TEST(test_gid_addr_range)
{
    hoop__ib_gid tab[] = {gid("fe80::1", V2), gid("10.0.0.1", V2),    gid("192.168.1.5", V2),
                          gid("fd00::7", V2), gid("2001:db8::1", V2), gid("192.168.1.6", V1)};
    ck_assert_int_eq(pick(tab, 6, -1, "10.0.0.0/8"), 1);
    ck_assert_int_eq(pick(tab, 6, -1, "192.168.0.0/16"), 2);
    ck_assert_int_eq(pick(tab, 6, -1, "192.168.1.6/32"), 5); /* only the v1 one is inside */
    ck_assert_int_eq(pick(tab, 6, -1, "192.168.1.4/30"), 2); /* .4-.7 */
    ck_assert_int_eq(pick(tab, 6, -1, "0.0.0.0/0"), 1);
    ck_assert_int_eq(pick(tab, 6, -1, "fd00::/8"), 3);
    ck_assert_int_eq(pick(tab, 6, -1, "2001:db8::/32"), 4);
    ck_assert_int_eq(pick(tab, 6, -1, "::/0"), 3);         /* an IPv6 range: no IPv4-mapped GID */
    ck_assert_int_eq(pick(tab, 6, -1, "10.255.0.0/8"), 1); /* host bits are ignored */
    ck_assert_int_eq(pick(tab, 6, -1, "10.0.0.0/31"), 1);
    pick_fails(tab, 6, 1, -1, "10.0.0.2/31", HOOP_ERR_UNSUPPORTED);
    pick_fails(tab, 6, 1, -1, "192.168.1.0/30", HOOP_ERR_UNSUPPORTED);
    pick_fails(tab, 6, 1, -1, "172.16.0.0/12", HOOP_ERR_UNSUPPORTED);
    assert_error_has("rxe0 port 1: no RoCE v2 or v1 GID with a global address in 172.16.0.0/12",
                     "(found: 0 fe80::1 v2, 1 10.0.0.1 v2, 2 192.168.1.5 v2, 3 fd00::7 v2, "
                     "4 2001:db8::1 v2, 5 192.168.1.6 v1)");
    pick_fails(tab, 6, 1, -1, "fe80::/10", HOOP_ERR_UNSUPPORTED); /* link-local even in range */
    pick_fails(tab, 6, 1, -1, "fd01::/16", HOOP_ERR_UNSUPPORTED);
}
END_TEST

START_TEST(test_gid_addr_range_bad)
{
    static const char *bad[] = {"10.0.0.0",   "10.0.0.0/33",  "fd00::/129", "bogus/8",
                                "10.0.0.0/x", "/8",           "10.0.0.0/",  "10.0.0.0/-1",
                                "10.0.0/8",   "10.0.0.0/0008"};
    hoop__ib_gid tab[] = {gid("10.0.0.1", V2)};
    for (size_t i = 0; i < HOOP_ARRAY_SIZE(bad); i++) {
        pick_fails(tab, 1, 1, -1, bad[i], HOOP_ERR_INVALID);
        char want[64];
        snprintf(want, sizeof(want), "HOOP_IB_ADDR_RANGE='%s'", bad[i]);
        assert_error_has(want, "CIDR");
        pick_fails(tab, 1, 0, -1, bad[i], HOOP_ERR_INVALID); /* checked on InfiniBand too */
    }
}
END_TEST

START_TEST(test_gid_explicit_index)
{
    hoop__ib_gid tab[] = {gid("fe80::1", V1), gid("fe80::1", V2), gid("", V1), gid("10.0.0.1", V2)};
    ck_assert_int_eq(pick(tab, 4, 0, NULL), 0); /* forced: link-local is taken */
    ck_assert_int_eq(pick(tab, 4, 1, NULL), 1);
    ck_assert_int_eq(pick(tab, 4, 3, NULL), 3);
    ck_assert_int_eq(pick(tab, 4, 1, "10.0.0.0/8"), 1); /* the range does not apply */
    pick_fails(tab, 4, 1, 4, NULL, HOOP_ERR_INVALID);
    assert_error_has("HOOP_IB_GID_INDEX=4 is out of range: rxe0 port 1 has 4 GID entries",
                     "(found: 0 fe80::1 v1, 1 fe80::1 v2, 3 10.0.0.1 v2)");
    pick_fails(tab, 4, 1, 2, NULL, HOOP_ERR_INVALID);
    assert_error_has("HOOP_IB_GID_INDEX=2: rxe0 port 1 has no GID at index 2", "3 10.0.0.1 v2");
    pick_fails(tab, 4, 1, -2, NULL, HOOP_ERR_INVALID);
    assert_error_has("HOOP_IB_GID_INDEX=-2", NULL);
    pick_fails(tab, 4, 0, 9, NULL, HOOP_ERR_INVALID); /* on InfiniBand as well */
    assert_error_has("HOOP_IB_GID_INDEX=9 is out of range", NULL);
    pick_fails(NULL, 0, 1, 0, NULL, HOOP_ERR_INVALID);
    assert_error_has("has 0 GID entries", NULL);
}
END_TEST

START_TEST(test_gid_infiniband)
{
    hoop__ib_gid tab[] = {gid("fe80::2:c903:a:b1c1", IB), gid("", IB)};
    int index = -7;
    ck_assert_int_eq(hoop__ib_gid_pick(tab, 2, 0, -1, NULL, "mlx5_0", 1, &index), HOOP_OK);
    ck_assert_int_eq(index, 0);
    index = -7;
    ck_assert_int_eq(hoop__ib_gid_pick(tab, 2, 0, -1, "10.0.0.0/8", "mlx5_0", 1, &index), HOOP_OK);
    ck_assert_int_eq(index, 0);
    index = -7;
    ck_assert_int_eq(hoop__ib_gid_pick(tab, 2, 0, 0, NULL, "mlx5_0", 1, &index), HOOP_OK);
    ck_assert_int_eq(index, 0);
    /* The same table on an Ethernet port has nothing usable. */
    ck_assert_int_eq(hoop__ib_gid_pick(tab, 2, 1, -1, NULL, "mlx5_0", 1, &index),
                     HOOP_ERR_UNSUPPORTED);
    assert_error_has("mlx5_0 port 1:", "0 fe80::2:c903:a:b1c1 IB");
}
END_TEST

START_TEST(test_gid_bad_args)
{
    hoop__ib_gid tab[] = {gid("10.0.0.1", V2)};
    int index;
    ck_assert_int_eq(hoop__ib_gid_pick(tab, 1, 1, -1, NULL, "rxe0", 1, NULL), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__ib_gid_pick(NULL, 1, 1, -1, NULL, "rxe0", 1, &index), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__ib_gid_pick(tab, -1, 1, -1, NULL, "rxe0", 1, &index), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__ib_gid_pick(tab, 1, 1, -1, NULL, NULL, 2, &index), HOOP_OK);
    ck_assert_int_eq(index, 0);
}
END_TEST

/* A DGX-like host: InfiniBand ports with RoCE ports among them (storage). Local ranks
 * take the InfiniBand ones round robin unless HOOP_IB_HCA chose; one link layer alone,
 * every port. */
START_TEST(test_port_pick)
{
    const int mixed[] = {0, 1, 0, 0, 1, 0}; /* ib eth ib ib eth ib */
    const int want_ib[] = {0, 2, 3, 5, 0, 2, 3, 5};
    int ib_only = -1;
    for (int r = 0; r < 8; r++) {
        ck_assert_int_eq(hoop__ib_port_pick(mixed, 6, 0, r, &ib_only), want_ib[r]);
        ck_assert_int_eq(ib_only, 1);
    }
    for (int r = 0; r < 8; r++) { /* HOOP_IB_HCA chose these ports: all of them */
        ck_assert_int_eq(hoop__ib_port_pick(mixed, 6, 1, r, &ib_only), r % 6);
        ck_assert_int_eq(ib_only, 0);
    }
    const int eth[] = {1, 1, 1}, ib[] = {0, 0};
    for (int r = 0; r < 4; r++) {
        ck_assert_int_eq(hoop__ib_port_pick(eth, 3, 0, r, &ib_only), r % 3);
        ck_assert_int_eq(ib_only, 0);
        ck_assert_int_eq(hoop__ib_port_pick(ib, 2, 0, r, &ib_only), r % 2);
        ck_assert_int_eq(ib_only, 0);
    }
    ck_assert_int_eq(hoop__ib_port_pick(ib, 0, 0, 0, &ib_only), -1);
    ck_assert_int_eq(hoop__ib_port_pick(ib, 2, 0, -1, &ib_only), -1);
}
END_TEST

START_TEST(test_gid_str)
{
    char buf[HOOP__IB_GID_STR_MAX];
    hoop__ib_gid g = gid("10.1.2.3", V2);
    ck_assert_str_eq(hoop__ib_gid_str(g.raw, buf, sizeof(buf)), "10.1.2.3");
    g = gid("fe80::5054:ff:fe12:3456", V2);
    ck_assert_str_eq(hoop__ib_gid_str(g.raw, buf, sizeof(buf)), "fe80::5054:ff:fe12:3456");
    g = gid("2001:db8::5", V2);
    ck_assert_str_eq(hoop__ib_gid_str(g.raw, buf, sizeof(buf)), "2001:db8::5");
    g = gid("", V2);
    ck_assert_str_eq(hoop__ib_gid_str(g.raw, buf, sizeof(buf)), "::");
    /* The longest IPv6 text fits. */
    g = gid("1111:2222:3333:4444:5555:6666:7777:8888", V2);
    ck_assert_str_eq(hoop__ib_gid_str(g.raw, buf, sizeof(buf)),
                     "1111:2222:3333:4444:5555:6666:7777:8888");
    char small[5] = "zzzz";
    ck_assert_str_eq(hoop__ib_gid_str(g.raw, small, sizeof(small)), "1111");
    ck_assert_str_eq(hoop__ib_gid_str(g.raw, small, 1), "");
    ck_assert_str_eq(hoop__ib_gid_type_str(HOOP__IB_GID_IB), "IB");
    ck_assert_str_eq(hoop__ib_gid_type_str(HOOP__IB_GID_ROCE_V1), "v1");
    ck_assert_str_eq(hoop__ib_gid_type_str(HOOP__IB_GID_ROCE_V2), "v2");
    ck_assert_str_eq(hoop__ib_gid_type_str(3), "type?");
}
END_TEST

// ----------------------------------------------------------------- completions

#ifdef HOOP_HAVE_VERBS
static void wc_has(int status, int peer, const char *a, const char *b)
{
    char buf[512];
    const char *m = hoop__ib_wc_message(status, peer, buf, sizeof(buf));
    ck_assert_ptr_eq(m, buf);
    ck_assert_msg(strstr(m, a) != NULL, "'%s' not in: %s", a, m);
    if (b) ck_assert_msg(strstr(m, b) != NULL, "'%s' not in: %s", b, m);
}

START_TEST(test_wc_message)
{
    char buf[512];
    wc_has(IBV_WC_RETRY_EXC_ERR, 3,
           "transport retry counter exceeded (status 12): no ACK from rank 3: check "
           "HOOP_IB_GID_INDEX, routing, or whether the peer died",
           NULL);
    wc_has(IBV_WC_RETRY_EXC_ERR, -1, "no ACK from the peer:", NULL);
    wc_has(IBV_WC_RNR_RETRY_EXC_ERR, 1, "RNR retry counter exceeded (status 13): rank 1",
           "receiver not ready): a bug in hoop, please report it");
    wc_has(IBV_WC_REM_ACCESS_ERR, 2, "remote access error (status 10): rank 2",
           "registration bug in hoop, or memory freed while in use");
    wc_has(IBV_WC_LOC_PROT_ERR, 2,
           "local protection error (status 4):", "a bug in hoop, or memory freed while in use");
    wc_has(IBV_WC_REM_OP_ERR, 5, "remote operation error (status 11): rank 5",
           "see that rank's own error");
    wc_has(IBV_WC_REM_INV_REQ_ERR, 5, "remote invalid request error (status 9): rank 5", NULL);
    wc_has(IBV_WC_LOC_LEN_ERR, 0, "local length error (status 1):", "a bug in hoop");
    wc_has(IBV_WC_WR_FLUSH_ERR, 4, "Work Request Flushed Error (status 5): ",
           "flushed after an earlier error on the link to rank 4");
    /* No hint where none helps. */
    ck_assert_str_eq(hoop__ib_wc_message(IBV_WC_FATAL_ERR, 1, buf, sizeof(buf)),
                     "fatal error (status 19)");
    ck_assert_str_eq(hoop__ib_wc_message(999, 1, buf, sizeof(buf)), "unknown (status 999)");
    /* Cut short, never past the buffer. */
    char small[8];
    memset(small, 'z', sizeof(small));
    ck_assert_str_eq(hoop__ib_wc_message(IBV_WC_RETRY_EXC_ERR, 3, small, sizeof(small)), "transpo");
    ck_assert_int_eq(hoop__ib_wc_is_flush(IBV_WC_WR_FLUSH_ERR), 1);
    ck_assert_int_eq(hoop__ib_wc_is_flush(IBV_WC_RETRY_EXC_ERR), 0);
    ck_assert_int_eq(hoop__ib_wc_is_flush(IBV_WC_SUCCESS), 0);
}
END_TEST
#endif

// ----------------------------------------------------------------- registration cache

/* The fake registrar: every registration it made, in order; an mr is a pointer to its
 * record. It fails with HOOP_ERR_NOMEM once the pinned bytes would pass limit, and with
 * HOOP_ERR_SYSTEM for a range touching [bad_lo, bad_hi) (memory freed behind the
 * cache's back). */
#define FAKE_MAX 4096
typedef struct fake_reg {
    uintptr_t addr;
    size_t len;
    int live;
} fake_reg;

static struct {
    fake_reg regs[FAKE_MAX];
    int nreg, nderegs, ncalls; /* registrations made, released, reg calls (failed too) */
    int dereg_order[FAKE_MAX]; /* which registration each dereg released */
    size_t pinned, limit;
    uintptr_t bad_lo, bad_hi;
} fk;

static hoop_status fake_reg_fn(void *arg, void *addr, size_t len, void **mr)
{
    ck_assert_ptr_eq(arg, &fk);
    fk.ncalls++;
    uintptr_t a = (uintptr_t)addr;
    if (fk.limit && fk.pinned + len > fk.limit)
        return HOOP_ERROR(HOOP_ERR_NOMEM, "fake: pinned limit of %zu bytes", fk.limit);
    if (a < fk.bad_hi && a + len > fk.bad_lo)
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "fake: bad address");
    ck_assert_int_lt(fk.nreg, FAKE_MAX);
    fk.regs[fk.nreg] = (fake_reg){.addr = a, .len = len, .live = 1};
    *mr = &fk.regs[fk.nreg++];
    fk.pinned += len;
    return HOOP_OK;
}

static void fake_dereg_fn(void *arg, void *mr)
{
    ck_assert_ptr_eq(arg, &fk);
    fake_reg *r = mr;
    ck_assert_msg(r >= fk.regs && r < fk.regs + fk.nreg, "dereg of an mr never registered");
    ck_assert_msg(r->live, "registration %d released twice", (int)(r - fk.regs));
    r->live = 0;
    fk.pinned -= r->len;
    fk.dereg_order[fk.nderegs++] = (int)(r - fk.regs);
}

static uintptr_t page;
static char *arena; /* 4096 pages, page-aligned; only its addresses are used */

static void rc_setup(void)
{
    memset(&fk, 0, sizeof(fk));
    page = (uintptr_t)sysconf(_SC_PAGESIZE);
    arena = aligned_alloc(page, 4096 * page);
    ck_assert_ptr_nonnull(arena);
}

static void rc_teardown(void)
{
    free(arena);
}

static hoop__regcache *rc_new(int enabled, int max_entries)
{
    hoop__regcache *c = NULL;
    ck_assert_int_eq(hoop__regcache_new(&c, enabled, max_entries, fake_reg_fn, fake_dereg_fn, &fk),
                     HOOP_OK);
    return c;
}

/* Pages [p0, p0 + np) of the arena. */
#define PG(p) (arena + (size_t)(p)*page)

/* get that must succeed; checks the mr covers the range and returns the entry. */
static void *get(hoop__regcache *c, void *addr, size_t len, fake_reg **mr_out)
{
    void *mr = NULL, *entry = NULL;
    hoop_status st = hoop__regcache_get(c, addr, len, &mr, &entry);
    ck_assert_msg(st == HOOP_OK, "get: %s", hoop_last_error());
    fake_reg *r = mr;
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(r->live, "get returned a released mr");
    ck_assert_msg(r->addr <= (uintptr_t)addr && r->addr + r->len >= (uintptr_t)addr + len,
                  "mr [%#lx, +%zu) does not cover [%p, +%zu)", (unsigned long)r->addr, r->len, addr,
                  len);
    if (mr_out) *mr_out = r;
    return entry;
}

static void expect_stats(hoop__regcache *c, uint64_t hits, uint64_t misses, uint64_t evictions)
{
    uint64_t h, m, e;
    hoop__regcache_stats(c, &h, &m, &e);
    ck_assert_uint_eq(h, hits);
    ck_assert_uint_eq(m, misses);
    ck_assert_uint_eq(e, evictions);
}

/* Frees c and checks every registration was released exactly once. */
static void free_all_released(hoop__regcache *c)
{
    hoop__regcache_free(c);
    ck_assert_int_eq(fk.nderegs, fk.nreg);
    ck_assert_uint_eq(fk.pinned, 0);
}

START_TEST(test_rc_hit_miss_align)
{
    hoop__regcache *c = rc_new(1, 16);
    fake_reg *r1, *r2;
    void *e = get(c, PG(0) + 100, 200, &r1);
    ck_assert_int_eq(fk.nreg, 1);
    ck_assert_uint_eq(r1->addr, (uintptr_t)PG(0)); /* page-aligned */
    ck_assert_uint_eq(r1->len, page);
    hoop__regcache_put(c, e);
    e = get(c, PG(0), page, &r2); /* the whole page: a hit */
    ck_assert_ptr_eq(r2, r1);
    hoop__regcache_put(c, e);
    expect_stats(c, 1, 1, 0);
    /* Two bytes across a page boundary register both pages. */
    e = get(c, PG(3) - 1, 2, &r2);
    ck_assert_uint_eq(r2->addr, (uintptr_t)PG(2));
    ck_assert_uint_eq(r2->len, 2 * page);
    ck_assert_uint_eq(r2->addr % page, 0);
    hoop__regcache_put(c, e);
    /* An odd length from a page start ends at the next page boundary. */
    e = get(c, PG(10), 2 * page + 1, &r2);
    ck_assert_uint_eq(r2->addr, (uintptr_t)PG(10));
    ck_assert_uint_eq(r2->len, 3 * page);
    hoop__regcache_put(c, e);
    expect_stats(c, 1, 3, 0);
    ck_assert_int_eq(fk.nreg, 3);
    ck_assert_int_eq(fk.nderegs, 0); /* cached, not released */
    free_all_released(c);
}
END_TEST

START_TEST(test_rc_containment_and_growth)
{
    hoop__regcache *c = rc_new(1, 16);
    fake_reg *big, *r;
    void *e = get(c, PG(0), 4 * page, &big);
    hoop__regcache_put(c, e);
    /* Sub-ranges hit, held or not. */
    void *held = get(c, PG(1) + 5, 100, &r);
    ck_assert_ptr_eq(r, big);
    e = get(c, PG(3), page, &r);
    ck_assert_ptr_eq(r, big);
    hoop__regcache_put(c, e);
    hoop__regcache_put(c, held);
    e = get(c, PG(0), 1, &r);
    ck_assert_ptr_eq(r, big);
    hoop__regcache_put(c, e);
    expect_stats(c, 3, 1, 0);
    /* One byte past the end: the union [0, 5 pages) replaces the old entry. */
    e = get(c, PG(3), page + 1, &r);
    ck_assert_int_eq(fk.nreg, 2);
    ck_assert_uint_eq(r->addr, (uintptr_t)PG(0));
    ck_assert_uint_eq(r->len, 5 * page);
    ck_assert_int_eq(fk.nderegs, 1);
    ck_assert_int_eq(fk.dereg_order[0], 0);
    hoop__regcache_put(c, e);
    /* The next chunk, spanning [4.5, 8) pages, joins it too. */
    e = get(c, PG(4) + page / 2, 3 * page + page / 2, &r);
    ck_assert_uint_eq(r->addr, (uintptr_t)PG(0));
    ck_assert_uint_eq(r->len, 8 * page);
    hoop__regcache_put(c, e);
    /* A range bridging two entries joins both: [9, 10) apart, then [7, 10) overlaps both. */
    e = get(c, PG(9), page, &r);
    hoop__regcache_put(c, e);
    ck_assert_int_eq(fk.nreg, 4);
    e = get(c, PG(7), 3 * page, &r);
    ck_assert_uint_eq(r->addr, (uintptr_t)PG(0));
    ck_assert_uint_eq(r->len, 10 * page);
    hoop__regcache_put(c, e);
    /* Live: only the last. */
    int live = 0;
    for (int i = 0; i < fk.nreg; i++) live += fk.regs[i].live;
    ck_assert_int_eq(live, 1);
    expect_stats(c, 3, 5, 0);
    free_all_released(c);
}
END_TEST

START_TEST(test_rc_merge_with_held)
{
    hoop__regcache *c = rc_new(1, 16);
    fake_reg *a, *u, *r;
    void *ea = get(c, PG(0), page, &a);
    void *eu = get(c, PG(0), 2 * page, &u); /* overlaps held a: a is replaced, not released */
    ck_assert_uint_eq(u->addr, (uintptr_t)PG(0));
    ck_assert_uint_eq(u->len, 2 * page);
    ck_assert_int_eq(fk.nderegs, 0);
    ck_assert(a->live);
    void *e = get(c, PG(0), 10, &r); /* the new entry serves it */
    ck_assert_ptr_eq(r, u);
    hoop__regcache_put(c, e);
    hoop__regcache_put(c, ea); /* a's last put releases it */
    ck_assert_int_eq(fk.nderegs, 1);
    ck_assert(!a->live);
    hoop__regcache_put(c, eu);
    ck_assert(u->live); /* cached */
    free_all_released(c);
}
END_TEST

START_TEST(test_rc_lru_order)
{
    hoop__regcache *c = rc_new(1, 3);
    fake_reg *ra, *rb, *rc_, *rd, *re, *r;
    hoop__regcache_put(c, get(c, PG(0), page, &ra));
    hoop__regcache_put(c, get(c, PG(2), page, &rb));
    hoop__regcache_put(c, get(c, PG(4), page, &rc_));
    hoop__regcache_put(c, get(c, PG(0), 8, &r)); /* a is now the most recent: b, c, a */
    ck_assert_ptr_eq(r, ra);
    ck_assert_int_eq(fk.nderegs, 0);
    hoop__regcache_put(c, get(c, PG(6), page, &rd)); /* 4 > 3: b goes */
    ck_assert_int_eq(fk.nderegs, 1);
    ck_assert_ptr_eq(&fk.regs[fk.dereg_order[0]], rb);
    hoop__regcache_put(c, get(c, PG(8), page, &re)); /* then c */
    ck_assert_int_eq(fk.nderegs, 2);
    ck_assert_ptr_eq(&fk.regs[fk.dereg_order[1]], rc_);
    expect_stats(c, 1, 5, 2);
    hoop__regcache_put(c, get(c, PG(2), page, &r)); /* b again: a miss, and a goes */
    ck_assert_ptr_ne(r, rb);
    ck_assert_int_eq(fk.nderegs, 3);
    ck_assert_ptr_eq(&fk.regs[fk.dereg_order[2]], ra);
    ck_assert(rd->live && re->live);
    expect_stats(c, 1, 6, 3);
    free_all_released(c);
}
END_TEST

START_TEST(test_rc_held_never_evicted)
{
    hoop__regcache *c = rc_new(1, 2);
    fake_reg *ra, *rb, *rc_, *rd;
    void *ea = get(c, PG(0), page, &ra);
    void *eb = get(c, PG(2), page, &rb);
    void *ec = get(c, PG(4), page, &rc_);
    ck_assert_int_eq(fk.nderegs, 0); /* 3 > 2, but all held */
    expect_stats(c, 0, 3, 0);
    hoop__regcache_put(c, ec); /* c is the one unheld entry: evicted */
    ck_assert_int_eq(fk.nderegs, 1);
    ck_assert_ptr_eq(&fk.regs[fk.dereg_order[0]], rc_);
    hoop__regcache_put(c, ea); /* 2 entries: a stays */
    ck_assert_int_eq(fk.nderegs, 1);
    void *ed = get(c, PG(6), page, &rd); /* 3 > 2: a (unheld) goes, b (held) stays */
    ck_assert_int_eq(fk.nderegs, 2);
    ck_assert_ptr_eq(&fk.regs[fk.dereg_order[1]], ra);
    ck_assert(rb->live);
    expect_stats(c, 0, 4, 2);
    hoop__regcache_put(c, eb);
    hoop__regcache_put(c, ed);
    ck_assert_int_eq(fk.nderegs, 2);
    free_all_released(c);
}
END_TEST

START_TEST(test_rc_invalidate)
{
    hoop__regcache *c = rc_new(1, 16);
    fake_reg *ra, *rb, *rc_, *r;
    hoop__regcache_put(c, get(c, PG(0), page, &ra));
    void *eb = get(c, PG(2), 2 * page, &rb);
    hoop__regcache_put(c, get(c, PG(6), page, &rc_));
    hoop__regcache_invalidate(c, PG(1), page);  /* the gap: nothing */
    hoop__regcache_invalidate(c, PG(5), page);  /* the gap: nothing */
    hoop__regcache_invalidate(c, PG(1) - 1, 0); /* empty: nothing */
    ck_assert_int_eq(fk.nderegs, 0);
    hoop__regcache_invalidate(c, PG(1) - 1, page + 2); /* a byte of a and of b */
    ck_assert_int_eq(fk.nderegs, 1);                   /* a now; b is held */
    ck_assert_ptr_eq(&fk.regs[fk.dereg_order[0]], ra);
    ck_assert(rb->live && rc_->live);
    void *e = get(c, PG(2), page, &r); /* b left the cache: a miss */
    ck_assert_ptr_ne(r, rb);
    hoop__regcache_put(c, e);
    hoop__regcache_put(c, eb); /* b's last put releases it */
    ck_assert_int_eq(fk.nderegs, 2);
    ck_assert(!rb->live);
    hoop__regcache_put(c, get(c, PG(6), 1, &r)); /* c untouched: a hit */
    ck_assert_ptr_eq(r, rc_);
    expect_stats(c, 1, 4, 0);
    hoop__regcache_invalidate(c, arena, 4096 * page); /* everything */
    ck_assert_int_eq(fk.nderegs, fk.nreg);
    free_all_released(c);
}
END_TEST

START_TEST(test_rc_disabled)
{
    hoop__regcache *c = rc_new(0, 16);
    fake_reg *r1, *r2;
    void *e1 = get(c, PG(0) + 3, 10, &r1);
    void *e2 = get(c, PG(0) + 3, 10, &r2);
    ck_assert_ptr_ne(r1, r2);
    ck_assert_int_eq(fk.nreg, 2);
    ck_assert_uint_eq(r1->addr, (uintptr_t)PG(0));
    ck_assert_uint_eq(r1->len, page);
    hoop__regcache_put(c, e1);
    ck_assert_int_eq(fk.nderegs, 1);
    ck_assert(!r1->live);
    hoop__regcache_put(c, e2);
    ck_assert_int_eq(fk.nderegs, 2);
    hoop__regcache_put(c, get(c, PG(0), page, NULL));
    ck_assert_int_eq(fk.nreg, 3);
    ck_assert_int_eq(fk.nderegs, 3);
    expect_stats(c, 0, 3, 0);
    void *held = get(c, PG(1), page, NULL); /* freed with the cache */
    (void)held;
    free_all_released(c);
}
END_TEST

START_TEST(test_rc_fail_evict_retry)
{
    hoop__regcache *c = rc_new(1, 100);
    fk.limit = 3 * page;
    fake_reg *r;
    hoop__regcache_put(c, get(c, PG(0), page, NULL));
    hoop__regcache_put(c, get(c, PG(2), page, NULL));
    hoop__regcache_put(c, get(c, PG(4), page, NULL));
    ck_assert_int_eq(fk.ncalls, 3);
    /* The limit is reached: the first attempt fails, the three unused entries go, the
     * second succeeds. */
    void *ed = get(c, PG(6), page, &r);
    ck_assert_int_eq(fk.ncalls, 5);
    ck_assert_int_eq(fk.nderegs, 3);
    ck_assert_uint_eq(r->addr, (uintptr_t)PG(6));
    expect_stats(c, 0, 4, 3);
    /* Held entries cannot make room: with nothing unheld, reg is tried once, and its
     * error comes back. */
    void *ee = get(c, PG(8), 2 * page, NULL);
    void *mr = (void *)1, *entry = (void *)1;
    ck_assert_int_eq(hoop__regcache_get(c, PG(12), page, &mr, &entry), HOOP_ERR_NOMEM);
    assert_error_has("fake: pinned limit of", NULL);
    ck_assert_ptr_null(mr);
    ck_assert_ptr_null(entry);
    ck_assert_int_eq(fk.ncalls, 7);
    /* With an unheld entry that is not enough, both tries fail, reg's error returns. */
    hoop__regcache_put(c, ee);
    ck_assert_int_eq(hoop__regcache_get(c, PG(12), 3 * page, &mr, &entry), HOOP_ERR_NOMEM);
    ck_assert_int_eq(fk.ncalls, 9);
    assert_error_has("fake: pinned limit of", NULL);
    expect_stats(c, 0, 7, 4);
    ck_assert_int_eq(fk.nderegs, 4); /* e went */
    hoop__regcache_put(c, ed);
    free_all_released(c);
}
END_TEST

START_TEST(test_rc_retry_drops_stale_union)
{
    /* An unused entry over [0, 2) pages whose memory has gone: a request for [1, 3)
     * would join it and fail; after the eviction the retry registers [1, 3) alone. */
    hoop__regcache *c = rc_new(1, 100);
    fake_reg *r;
    hoop__regcache_put(c, get(c, PG(0), 2 * page, NULL));
    fk.bad_lo = (uintptr_t)PG(0);
    fk.bad_hi = (uintptr_t)PG(1);
    void *e = get(c, PG(1), 2 * page, &r);
    ck_assert_int_eq(fk.ncalls, 3);
    ck_assert_uint_eq(r->addr, (uintptr_t)PG(1));
    ck_assert_uint_eq(r->len, 2 * page);
    ck_assert_int_eq(fk.nderegs, 1);
    hoop__regcache_put(c, e);
    free_all_released(c);
}
END_TEST

START_TEST(test_rc_free_releases_all)
{
    hoop__regcache *c = rc_new(1, 8);
    void *held[4];
    for (int i = 0; i < 4; i++) held[i] = get(c, PG(2 * i), page, NULL);
    for (int i = 0; i < 6; i++) hoop__regcache_put(c, get(c, PG(100 + 2 * i), page, NULL));
    void *replaced = get(c, PG(200), page, NULL);
    void *grown = get(c, PG(200), 2 * page, NULL); /* replaced is detached, still held */
    (void)replaced, (void)grown;
    hoop__regcache_put(c, held[0]);
    ck_assert_int_eq(fk.nreg, 12);
    ck_assert_int_lt(fk.nderegs, fk.nreg);
    free_all_released(c);
    for (int i = 0; i < fk.nreg; i++) ck_assert_int_eq(fk.regs[i].live, 0);
}
END_TEST

START_TEST(test_rc_many_entries)
{
    /* 1000 disjoint buffers, every other page: each found again by the binary search,
     * from its first byte, its last byte and its middle. */
    enum { N = 1000 };
    hoop__regcache *c = rc_new(1, 2 * N);
    fake_reg *regs[N], *r;
    for (int i = 0; i < N; i++) {
        /* Insert out of order: i -> (i * 7919) % N. */
        int k = (int)((i * 7919L) % N);
        hoop__regcache_put(c, get(c, PG(2 * k), page, &regs[k]));
    }
    for (int k = 0; k < N; k++) {
        hoop__regcache_put(c, get(c, PG(2 * k), 1, &r));
        ck_assert_ptr_eq(r, regs[k]);
        hoop__regcache_put(c, get(c, PG(2 * k) + page - 1, 1, &r));
        ck_assert_ptr_eq(r, regs[k]);
        hoop__regcache_put(c, get(c, PG(2 * k) + page / 2, page / 4, &r));
        ck_assert_ptr_eq(r, regs[k]);
    }
    expect_stats(c, 3 * N, N, 0);
    /* A gap page is a miss and joins nothing (the neighbours only touch it). */
    hoop__regcache_put(c, get(c, PG(1), page, &r));
    ck_assert_uint_eq(r->addr, (uintptr_t)PG(1));
    ck_assert_uint_eq(r->len, page);
    ck_assert_int_eq(fk.nderegs, 0);
    free_all_released(c);
}
END_TEST

START_TEST(test_rc_random_ops)
{
    /* Random gets and puts over 64 pages, every result checked (the mr covers the range,
     * is live); at the end the model's held set is put back and free releases all. */
    hoop__regcache *c = rc_new(1, 6);
    void *held[16] = {0};
    uint64_t x = 88172645463325252ull; /* xorshift64 */
    for (int step = 0; step < 5000; step++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int slot = (int)(x % 16);
        if (held[slot]) {
            hoop__regcache_put(c, held[slot]);
            held[slot] = NULL;
        } else {
            size_t off = (size_t)((x >> 8) % (60 * page)),
                   len = (size_t)((x >> 40) % (3 * page)) + 1;
            held[slot] = get(c, arena + off, len, NULL);
        }
        int live = 0;
        for (int i = 0; i < fk.nreg; i++) live += fk.regs[i].live;
        ck_assert_int_le(live, 6 + 16); /* max_entries plus the held ones, at most */
    }
    for (int i = 0; i < 16; i++) hoop__regcache_put(c, held[i]);
    uint64_t h, m, e;
    hoop__regcache_stats(c, &h, &m, &e);
    ck_assert_uint_gt(h, 0);
    ck_assert_uint_gt(e, 0);
    free_all_released(c);
}
END_TEST

START_TEST(test_rc_args)
{
    hoop__regcache *c = NULL;
    ck_assert_int_eq(hoop__regcache_new(&c, 1, 0, fake_reg_fn, fake_dereg_fn, &fk),
                     HOOP_ERR_INVALID);
    assert_error_has("max_entries=0", NULL);
    ck_assert_int_eq(hoop__regcache_new(&c, 1, 4, NULL, fake_dereg_fn, &fk), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__regcache_new(NULL, 1, 4, fake_reg_fn, fake_dereg_fn, &fk),
                     HOOP_ERR_INVALID);
    c = rc_new(1, 4);
    void *mr = (void *)1, *entry = (void *)1;
    ck_assert_int_eq(hoop__regcache_get(c, PG(0), 0, &mr, &entry), HOOP_OK); /* len 0 */
    ck_assert_ptr_null(mr);
    ck_assert_ptr_null(entry);
    ck_assert_int_eq(hoop__regcache_get(c, NULL, 0, &mr, &entry), HOOP_OK);
    hoop__regcache_put(c, NULL);
    ck_assert_int_eq(fk.ncalls, 0);
    expect_stats(c, 0, 0, 0);
    ck_assert_int_eq(hoop__regcache_get(c, NULL, 8, &mr, &entry), HOOP_ERR_INVALID);
    assert_error_has("registration of 8 bytes", "not a valid address range");
    ck_assert_int_eq(hoop__regcache_get(c, (void *)(UINTPTR_MAX - 10), 100, &mr, &entry),
                     HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__regcache_get(c, (void *)(UINTPTR_MAX - 10), 5, &mr, &entry),
                     HOOP_ERR_INVALID); /* its page would end past the top */
    ck_assert_int_eq(hoop__regcache_get(c, PG(0), 8, NULL, &entry), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__regcache_get(NULL, PG(0), 8, &mr, &entry), HOOP_ERR_INVALID);
    ck_assert_int_eq(fk.ncalls, 0);
    hoop__regcache_invalidate(c, (void *)(UINTPTR_MAX - 10), 100); /* clamped, harmless */
    hoop__regcache_stats(NULL, NULL, NULL, NULL);
    hoop__regcache_free(c);
    hoop__regcache_free(NULL);
}
END_TEST

/* ---------------------------------------------------------------- credits */

START_TEST(test_credits_basic)
{
    hoop__ib_credits c = {.nslots = 16};
    ck_assert_uint_eq(hoop__ib_credits_free(&c), 16);
    c.used = 16;
    ck_assert_uint_eq(hoop__ib_credits_free(&c), 0);
    ck_assert_int_eq(hoop__ib_credits_merge(&c, 8, 30), 0);
    ck_assert_uint_eq(c.credited, 8);
    ck_assert_uint_eq(hoop__ib_credits_free(&c), 8);
    ck_assert_int_eq(hoop__ib_credits_merge(&c, 5, 64), 0); /* older: ignored */
    ck_assert_uint_eq(c.credited, 8);
    ck_assert_int_eq(hoop__ib_credits_merge(&c, 17, 64), -1); /* ahead of what was sent */
    ck_assert_int_eq(hoop__ib_credits_merge(&c, 17, 30), -1);
    ck_assert_uint_eq(c.credited, 8);
    ck_assert_int_eq(hoop__ib_credits_merge(&c, 16, 30), 0);
    ck_assert_uint_eq(hoop__ib_credits_free(&c), 16);
    /* the receiver's side: half the slots, or any when forced */
    ck_assert(!hoop__ib_credits_due(7, 0, 16, 0));
    ck_assert(hoop__ib_credits_due(8, 0, 16, 0));
    ck_assert(hoop__ib_credits_due(1, 0, 16, 1));
    ck_assert(!hoop__ib_credits_due(5, 5, 16, 1));
}
END_TEST

/* Across the 30-bit wrap of the immediate: the count keeps growing. */
START_TEST(test_credits_wrap)
{
    const uint64_t w = (uint64_t)1 << 30;
    hoop__ib_credits c = {.nslots = 16, .used = 3 * w + 10, .credited = 3 * w - 6};
    ck_assert_int_eq(hoop__ib_credits_merge(&c, (3 * w + 2) & (w - 1), 30), 0);
    ck_assert_uint_eq(c.credited, 3 * w + 2);
    ck_assert_int_eq(hoop__ib_credits_merge(&c, (3 * w - 1) & (w - 1), 30), 0); /* stale */
    ck_assert_uint_eq(c.credited, 3 * w + 2);
    ck_assert_int_eq(hoop__ib_credits_merge(&c, 3 * w + 10, 64), 0);
    ck_assert_uint_eq(hoop__ib_credits_free(&c), 16);
}
END_TEST

/* A model of one link: the receiver frees slots in order and tells its count in credit
 * immediates (30 bits) and in grants (whole); the sender takes the reports in shuffled
 * orders (a reordering RC never does, which the merge must survive anyway). At every
 * step the sender never believes in more credit than the receiver has freed, never goes
 * backwards, and the last report leaves it exactly right. */
START_TEST(test_credits_odd_orders)
{
    hoop__rng rng = hoop__rng_seed(20261201);
    for (int trial = 0; trial < 2000; trial++) {
        hoop__ib_credits c = {.nslots = 16};
        uint64_t base = (trial % 3 == 0) ? ((uint64_t)1 << 30) - 40 : (uint64_t)trial * 1000;
        c.used = c.credited = base;
        uint64_t freed = base;
        enum { MAXR = 32 };
        struct {
            uint64_t v;
            int bits;
        } rep[MAXR];
        int n = 0;
        while (n < MAXR) {
            uint32_t can = hoop__ib_credits_free(&c);
            if (can) c.used += 1 + hoop__rng_below(&rng, can); /* the sender writes some */
            if (freed < c.used) freed += 1 + hoop__rng_below(&rng, c.used - freed);
            rep[n].v = freed;
            rep[n].bits = hoop__rng_below(&rng, 2) ? 30 : 64;
            if (rep[n].bits == 30) rep[n].v &= ((uint64_t)1 << 30) - 1;
            n++;
            /* now and then deliver a random earlier report, then the rest out of order */
            if (hoop__rng_below(&rng, 4) == 0) {
                int k = (int)hoop__rng_below(&rng, (uint64_t)n);
                uint64_t before = c.credited;
                ck_assert_int_eq(hoop__ib_credits_merge(&c, rep[k].v, rep[k].bits), 0);
                ck_assert_uint_ge(c.credited, before);
                ck_assert_uint_le(c.credited, freed);
            }
        }
        size_t order[MAXR];
        for (int i = 0; i < MAXR; i++) order[i] = (size_t)i;
        hoop__rng_shuffle(&rng, order, MAXR);
        for (int i = 0; i < MAXR; i++) {
            uint64_t before = c.credited;
            ck_assert_int_eq(hoop__ib_credits_merge(&c, rep[order[i]].v, rep[order[i]].bits), 0);
            ck_assert_uint_ge(c.credited, before);
            ck_assert_uint_le(c.credited, freed);
        }
        ck_assert_int_eq(hoop__ib_credits_merge(&c, rep[MAXR - 1].v, rep[MAXR - 1].bits), 0);
        ck_assert_uint_eq(c.credited, freed);
        ck_assert_uint_le(c.used - c.credited, c.nslots);
    }
}
END_TEST

// ----------------------------------------------------------------- the QP half

/* A peer's QP half (layout written out: mtu at 26, link_eth at 27, max_msg at 28,
 * slot_bytes at 44, nslots at 48) is accepted only with a path MTU code of enum ibv_mtu
 * (1..5) and a largest message of at least one eager slot (64 KiB); each refusal names
 * the peer and the value. */
static void qp_half(uint8_t q[HOOP__IB_QPINFO_BYTES], uint8_t mtu, uint32_t max_msg)
{
    uint32_t slot_bytes = 65536, nslots = 16;
    memset(q, 0, HOOP__IB_QPINFO_BYTES);
    q[26] = mtu;
    q[27] = 1;
    memcpy(q + 28, &max_msg, 4);
    memcpy(q + 44, &slot_bytes, 4);
    memcpy(q + 48, &nslots, 4);
}

START_TEST(test_qpinfo_ranges)
{
    uint8_t q[HOOP__IB_QPINFO_BYTES];
    for (uint8_t mtu = 1; mtu <= 5; mtu++) {
        qp_half(q, mtu, 65536);
        ck_assert_int_eq(hoop__ib_qpinfo_check(q, sizeof(q), 3, "rxe0", 1), HOOP_OK);
    }
    static const uint8_t bad_mtu[] = {0, 6, 255};
    for (size_t i = 0; i < sizeof(bad_mtu); i++) {
        qp_half(q, bad_mtu[i], 1u << 30);
        ck_assert_int_eq(hoop__ib_qpinfo_check(q, sizeof(q), 3, "rxe0", 1), HOOP_ERR_REMOTE);
        ck_assert_ptr_nonnull(strstr(hoop_last_error(), "rank 3"));
        ck_assert_ptr_nonnull(strstr(hoop_last_error(), "MTU"));
    }
    qp_half(q, 3, 65535);
    ck_assert_int_eq(hoop__ib_qpinfo_check(q, sizeof(q), 3, "rxe0", 1), HOOP_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "65535"));
    qp_half(q, 3, 0);
    ck_assert_int_eq(hoop__ib_qpinfo_check(q, sizeof(q), 3, "rxe0", 1), HOOP_ERR_REMOTE);
}
END_TEST

static Suite *ib_host_suite(void)
{
    Suite *s = suite_create("ib_host");
    TCase *hca = tcase_create("hca");
    tcase_add_test(hca, test_hca_list_with_ports);
    tcase_add_test(hca, test_hca_prefix);
    tcase_add_test(hca, test_hca_exclude);
    tcase_add_test(hca, test_hca_exact);
    tcase_add_test(hca, test_hca_exclude_exact_port);
    tcase_add_test(hca, test_hca_everything);
    tcase_add_test(hca, test_hca_limits);
    tcase_add_loop_test(hca, test_hca_bad, 0, (int)HOOP_ARRAY_SIZE(bad_hca));
    tcase_add_test(hca, test_hca_too_many);
    suite_add_tcase(s, hca);

    TCase *g = tcase_create("gid");
    tcase_add_test(g, test_gid_roce_normal);
    tcase_add_test(g, test_gid_ipv6_only);
    tcase_add_test(g, test_gid_link_local_only);
    tcase_add_test(g, test_gid_list_cut_short);
    tcase_add_test(g, test_gid_addr_range);
    tcase_add_test(g, test_gid_addr_range_bad);
    tcase_add_test(g, test_gid_explicit_index);
    tcase_add_test(g, test_gid_infiniband);
    tcase_add_test(g, test_gid_bad_args);
    tcase_add_test(g, test_port_pick);
    tcase_add_test(g, test_gid_str);
    suite_add_tcase(s, g);

#ifdef HOOP_HAVE_VERBS
    TCase *wc = tcase_create("wc");
    tcase_add_test(wc, test_wc_message);
    suite_add_tcase(s, wc);
#else
    fprintf(stderr, "note: built without libibverbs: completion messages not tested\n");
#endif

    TCase *cr = tcase_create("credits");
    tcase_add_test(cr, test_credits_basic);
    tcase_add_test(cr, test_credits_wrap);
    tcase_add_test(cr, test_credits_odd_orders);
    suite_add_tcase(s, cr);

    TCase *qp = tcase_create("qpinfo");
    tcase_add_test(qp, test_qpinfo_ranges);
    suite_add_tcase(s, qp);

    TCase *rc = tcase_create("regcache");
    tcase_add_checked_fixture(rc, rc_setup, rc_teardown);
    tcase_add_test(rc, test_rc_hit_miss_align);
    tcase_add_test(rc, test_rc_containment_and_growth);
    tcase_add_test(rc, test_rc_merge_with_held);
    tcase_add_test(rc, test_rc_lru_order);
    tcase_add_test(rc, test_rc_held_never_evicted);
    tcase_add_test(rc, test_rc_invalidate);
    tcase_add_test(rc, test_rc_disabled);
    tcase_add_test(rc, test_rc_fail_evict_retry);
    tcase_add_test(rc, test_rc_retry_drops_stale_union);
    tcase_add_test(rc, test_rc_free_releases_all);
    tcase_add_test(rc, test_rc_many_entries);
    tcase_add_test(rc, test_rc_random_ops);
    tcase_add_test(rc, test_rc_args);
    suite_add_tcase(s, rc);
    return s;
}

int main(void)
{
    return run_suite(ib_host_suite());
}
