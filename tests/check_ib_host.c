/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_ib_host.c -- the verbs transport's device-independent parts, no HCA
 * needed: the HOOP_IB_HCA parser and matcher, the GID choice on made-up GID tables,
 * GIDs as text, completion statuses as messages (where libibverbs is built in).
 *
 * References: the HOOP_IB_HCA cases follow NCCL_IB_HCA's documented syntax and
 * examples; the GID tables are shaped like those of Soft-RoCE and mlx5 RoCE ports (a
 * link-local v1/v2 pair, then an IPv4-mapped v1/v2 pair per address); the status texts
 * are rdma-core 44's ibv_wc_status_str, frozen here.
 */
#include <arpa/inet.h>
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "transport/ib_util.h"
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
    tcase_add_test(g, test_gid_str);
    suite_add_tcase(s, g);

#ifdef HOOP_HAVE_VERBS
    TCase *wc = tcase_create("wc");
    tcase_add_test(wc, test_wc_message);
    suite_add_tcase(s, wc);
#else
    fprintf(stderr, "note: built without libibverbs: completion messages not tested\n");
#endif

    return s;
}

int main(void)
{
    return run_suite(ib_host_suite());
}
