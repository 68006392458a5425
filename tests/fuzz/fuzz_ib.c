/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/fuzz/fuzz_ib.c -- what the verbs transport reads from outside (src/transport/ib.c
 * and ib_util.c; these parts build without libibverbs, so the target runs everywhere).
 * Byte 0 of the input picks what the rest is:
 * - even: the connection blob. The rest is judged as the hello a connecting rank sent
 *   (hoop__ib_hello_check, token "fuzz-token") and, when accepted, its QP half against a
 *   RoCE port (bit 1 of byte 0 clear) or an InfiniBand one (hoop__ib_qpinfo_check); the
 *   same bytes are judged as the listener's reply the connector reads
 *   (hoop__ib_reply_check), its QP half likewise.
 * - odd: the settings. The first line is parsed as HOOP_IB_HCA (hoop__ib_hca_parse) and
 *   matched against a few device names and ports, the second checked as
 *   HOOP_IB_ADDR_RANGE (hoop__ib_addr_range_check) and used to pick a GID from a RoCE
 *   table with IPv4-mapped, global IPv6 and link-local entries (hoop__ib_gid_pick).
 * A finding is a crash, a sanitizer report, a refusal without a reason, an accepted blob
 * of the wrong size, magic, version, token, verdict, link layer or slot layout, a parsed
 * list out of its bounds (entries, names unterminated or empty, ports outside 0-255), or
 * a picked index outside the table or on an empty or link-local entry.
 */
#include "fuzz.h"

#include "transport/ib_util.h"

static const char *devs[] = {"mlx5_0", "mlx5_1", "mlx5_10", "rxe0", "", "a"};

/* The QP half's layout, written out: mtu at 26, link_eth at 27, max_msg at 28,
 * slot_bytes at 44, nslots at 48. */
static void qpinfo(const uint8_t *q, size_t n, int link_eth)
{
    uint32_t slot_bytes, nslots, max_msg;
    if (hoop__ib_qpinfo_check(q, n, 3, "rxe0", link_eth) != HOOP_OK) {
        if (hoop_last_error()[0] == '\0') abort();
        return;
    }
    memcpy(&slot_bytes, q + 44, 4);
    memcpy(&nslots, q + 48, 4);
    memcpy(&max_msg, q + 28, 4);
    if (n != HOOP__IB_QPINFO_BYTES || q[27] != link_eth || slot_bytes != 65536 || nslots != 16 ||
        q[26] < 1 || q[26] > 5 || max_msg < 65536)
        abort();
}

static void blob(const uint8_t *b, size_t n, int link_eth)
{
    char token[HOOP_TP_TOKEN_MAX] = "fuzz-token";
    const char *why = "unset";
    uint32_t magic;
    uint16_t version;
    int32_t verdict;
    /* The hello: magic 0, version 4, rank 8, channel 12, token 16, the QP half at 80. */
    if (hoop__ib_hello_check(b, n, token, &why)) {
        memcpy(&magic, b, 4);
        memcpy(&version, b + 4, 2);
        if (why != NULL || n != HOOP__IB_HELLO_BYTES || magic != 0x686f6962u || version != 1 ||
            memcmp(b + 16, token, HOOP_TP_TOKEN_MAX) != 0)
            abort();
        qpinfo(b + 80, HOOP__IB_QPINFO_BYTES, link_eth);
    } else if (why == NULL || why[0] == '\0') {
        abort();
    }
    /* The reply: magic 0, verdict 4, the QP half at 8. */
    if (hoop__ib_reply_check(b, n)) {
        memcpy(&magic, b, 4);
        memcpy(&verdict, b + 4, 4);
        if (n != HOOP__IB_REPLY_BYTES || magic != 0x686f6962u || verdict != 1) abort();
        qpinfo(b + 8, HOOP__IB_QPINFO_BYTES, link_eth);
    }
}

static void settings(const uint8_t *data, size_t size)
{
    char *s = fuzz_str(data, size), *range = NULL;
    hoop__ib_hca_spec spec;
    if (s == NULL) return;
    char *nl = strchr(s, '\n');
    if (nl) *nl = '\0', range = nl + 1;
    if (hoop__ib_hca_parse(s, &spec) == HOOP_OK) {
        if (spec.n < 0 || spec.n > HOOP__IB_HCA_MAX) abort();
        for (int i = 0; i < spec.n; i++)
            if (memchr(spec.dev[i].name, '\0', HOOP__IB_HCA_NAME_MAX) == NULL ||
                spec.dev[i].name[0] == '\0' || spec.dev[i].port < 0 || spec.dev[i].port > 255)
                abort();
        for (size_t d = 0; d < sizeof(devs) / sizeof(devs[0]); d++)
            for (int port = 1; port <= 2; port++) {
                int m = hoop__ib_hca_match(&spec, devs[d], port);
                if (m != 0 && m != 1) abort();
            }
    }
    if (range) {
        hoop_status rc = hoop__ib_addr_range_check(range);
        /* 0-1 fe80::1 v1 and v2, 2 empty, 3 fd00::5 v2, 4-5 ::ffff:10.1.2.3 v2 and v1. */
        hoop__ib_gid tab[6] = {{.type = HOOP__IB_GID_ROCE_V1}, {.type = HOOP__IB_GID_ROCE_V2}};
        tab[0].raw[0] = tab[1].raw[0] = 0xfe, tab[0].raw[1] = tab[1].raw[1] = 0x80;
        tab[0].raw[15] = tab[1].raw[15] = 1;
        tab[3] = (hoop__ib_gid){.raw = {0xfd, [15] = 5}, .type = HOOP__IB_GID_ROCE_V2};
        tab[4] =
            (hoop__ib_gid){.raw = {[10] = 0xff, 0xff, 10, 1, 2, 3}, .type = HOOP__IB_GID_ROCE_V2};
        tab[5] =
            (hoop__ib_gid){.raw = {[10] = 0xff, 0xff, 10, 1, 2, 3}, .type = HOOP__IB_GID_ROCE_V1};
        int index = -7;
        hoop_status pick = hoop__ib_gid_pick(tab, 6, 1, -1, range, "rxe0", 1, &index);
        if (pick == HOOP_OK && (rc != HOOP_OK || index < 3 || index > 5)) abort();
    }
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    fuzz_quiet();
    if (data[0] & 1)
        settings(data + 1, size - 1);
    else
        blob(data + 1, size - 1, !((data[0] >> 1) & 1));
    return 0;
}
