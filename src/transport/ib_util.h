/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/transport/ib_util.h -- the device-independent parts of the verbs transport
 * (internal): the HOOP_IB_HCA device list, the choice of a port's GID index, a GID as
 * text, and a failed completion's status as a message with a hint.
 *
 * Everything here but the completion messages builds and is tested without libibverbs
 * (tests/check_ib_host.c); the completion messages need <infiniband/verbs.h> and exist
 * only where configure found it (HOOP_HAVE_VERBS). The functions keep no state: each is
 * safe to call from any thread, on its own arguments.
 */
#ifndef HOOP_TRANSPORT_IB_UTIL_H
#define HOOP_TRANSPORT_IB_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h" /* HOOP_HAVE_VERBS */
#include "hoop/status.h"
#include "transport/transport.h"

HOOP_EXTERN_C_BEGIN

// ----------------------------------------------------------------- HOOP_IB_HCA

#define HOOP__IB_HCA_MAX 32      /* entries in one HOOP_IB_HCA list */
#define HOOP__IB_HCA_NAME_MAX 64 /* bytes of a device name, NUL included */

/* A parsed HOOP_IB_HCA list: which devices and ports the transport may use. */
typedef struct hoop__ib_hca_spec {
    int exclude; /* '^': the listed devices are the ones NOT to use */
    int exact;   /* '=': names match whole device names, not prefixes */
    int n;       /* entries in dev; 0 = every device and port */
    struct {
        char name[HOOP__IB_HCA_NAME_MAX];
        int port; /* 1-255; 0 = every port of the device */
    } dev[HOOP__IB_HCA_MAX];
} hoop__ib_hca_spec;

/* Parses HOOP_IB_HCA in NCCL's syntax: a comma list of device[:port] entries, e.g.
 * "mlx5_0:1,mlx5_1". An entry's name matches every device whose name it prefixes
 * ("mlx5" matches mlx5_0 and mlx5_10, and so does "mlx5_1"), unless the list starts
 * with '=' (whole names only). A leading '^' turns the list into the devices not to use;
 * "^=" is both. Blanks around an entry are ignored. NULL, "" or blanks alone select
 * every device and port (out->n = 0).
 * Errors: HOOP_ERR_INVALID (out NULL; an empty entry such as in "a,,b" or ":1"; a port
 * that is not a number in 1-255; a name of 64 bytes or more; more than HOOP__IB_HCA_MAX
 * entries; '^' or '=' with no entry after it), the message naming the whole value and
 * the bad entry. *out is zeroed first and is complete only on HOOP_OK. */
hoop_status hoop__ib_hca_parse(const char *text, hoop__ib_hca_spec *out);

/* Whether port `port` (>= 1) of device `dev` is selected by s: 1 to use it, 0 not.
 * An empty spec selects everything; otherwise an entry matches when its name matches
 * dev (prefix, or whole name with '=') and its port is 0 or equals port, and the result
 * is "some entry matches" (or "none matches" with '^'). */
int hoop__ib_hca_match(const hoop__ib_hca_spec *s, const char *dev, int port);

// ----------------------------------------------------------------- GIDs

/* A GID's type, as the verbs library reports it (the same values as enum ibv_gid_type;
 * ib_util.c checks that where verbs.h is available). */
enum { HOOP__IB_GID_IB = 0, HOOP__IB_GID_ROCE_V1 = 1, HOOP__IB_GID_ROCE_V2 = 2 };

/* One GID table entry: the 16 bytes in network order and the type. An all-zero raw is
 * an empty entry. */
typedef struct hoop__ib_gid {
    uint8_t raw[16];
    int type;
} hoop__ib_gid;

/* Bytes hoop__ib_gid_str needs at most (INET6_ADDRSTRLEN, NUL included). */
#define HOOP__IB_GID_STR_MAX 46

/* Picks the GID index to use on a port from its GID table tab (n entries, the index is
 * the position; n may be 0 when tab is NULL). link_eth is 1 on an Ethernet link layer
 * (RoCE), 0 on InfiniBand.
 * - want >= 0 (HOOP_IB_GID_INDEX set): that index, which must be < n and non-empty; it
 *   is taken whatever its type and address (addr_range does not apply).
 * - want == -1 (automatic): on InfiniBand index 0 (the port GID, which every IB port
 *   has; within a subnet the LID addresses the peer). On RoCE the first index, lowest
 *   first, of the best class present: RoCE v2 with an IPv4-mapped address
 *   (::ffff:a.b.c.d), then RoCE v2 with a global IPv6 address, then RoCE v1 (or type IB,
 *   which the kernel reports for "IB/RoCE v1") IPv4-mapped, then v1 global. Link-local
 *   addresses (fe80::/10) are never chosen. When addr_range (HOOP_IB_ADDR_RANGE, CIDR:
 *   "10.0.0.0/8" or "fd00::/8") is non-NULL and non-empty, only addresses inside it
 *   count; an IPv4 range admits only IPv4-mapped GIDs, an IPv6 range only the others.
 * dev and port name the port in messages. On success *index is set.
 * Errors: HOOP_ERR_INVALID (index NULL, tab NULL with n > 0, n < 0, want < -1, want
 * >= n or an empty entry, addr_range not a CIDR range), HOOP_ERR_UNSUPPORTED (no usable
 * GID on a RoCE port), each message naming dev and port and listing the non-empty
 * entries the table had, e.g. "rxe0 port 1: no RoCE v2 or v1 GID with a global address
 * in 10.0.0.0/8 (found: 0 fe80::1 v1, 1 fe80::1 v2)". */
hoop_status hoop__ib_gid_pick(const hoop__ib_gid *tab, int n, int link_eth, int want,
                              const char *addr_range, const char *dev, int port, int *index);

/* Which of a host's n usable (active) ports, in device-list order, a worker takes:
 * link_eth[i] is 1 for an Ethernet (RoCE) port, 0 for InfiniBand. The want-th (round
 * robin: want modulo the count) of the ports kept, where all are kept, except that with
 * no HOOP_IB_HCA (filtered 0) and ports of both link layers only the InfiniBand ones
 * are: a node's Ethernet ports beside its InfiniBand fabric are its storage or
 * management network, and a link between a RoCE port and an InfiniBand one cannot be
 * made (a ring would fall back to tcp on it). Sets *ib_only to 1 in that case, else 0.
 * Returns the chosen index (0..n-1), or -1 when n < 1 or want < 0. No errors. */
int hoop__ib_port_pick(const int *link_eth, int n, int filtered, int want, int *ib_only);

/* HOOP_IB_ADDR_RANGE's form: HOOP_OK for NULL, "" or a CIDR range (10.0.0.0/8,
 * fd00::/8), else HOOP_ERR_INVALID naming the text. */
hoop_status hoop__ib_addr_range_check(const char *text);

/* A GID as text into buf (cap bytes): dotted IPv4 when it is IPv4-mapped
 * (::ffff:10.0.0.1 -> "10.0.0.1"), else IPv6 as inet_ntop writes it. Cut short to fit
 * when cap < HOOP__IB_GID_STR_MAX (and "" when cap is 1). Returns buf. */
const char *hoop__ib_gid_str(const uint8_t raw[16], char *buf, size_t cap);

/* The GID type's short name: "IB", "v1", "v2", or "type?" for anything else. */
const char *hoop__ib_gid_type_str(int type);

// ----------------------------------------------------------------- the connection blob

/* The set-up a connecting rank and a listener exchange over a socket (ib.c, in every
 * build, so that tests/fuzz/fuzz_ib.c runs without a device): the connector sends a
 * hello (magic, version, rank, channel, token, then its QP's half: qpn, psn, gid, lid,
 * mtu, link type, largest message, its grant ring and the slot layout), the listener
 * answers a reply (magic, verdict, its QP's half). The byte counts are those of ib.c's
 * structs (checked there); both ends run the same build, so the order is the host's. */
#define HOOP__IB_QPINFO_BYTES 56
#define HOOP__IB_HELLO_BYTES (16 + HOOP_TP_TOKEN_MAX + HOOP__IB_QPINFO_BYTES)
#define HOOP__IB_REPLY_BYTES (8 + HOOP__IB_QPINFO_BYTES)

/* Judges the n bytes of a hello as the listener received them: 1 to accept, 0 to
 * refuse, with *why the reason ("not a hoop ib hello": wrong size or magic, "another ib
 * protocol version", "wrong token": not equal to token's HOOP_TP_TOKEN_MAX bytes,
 * compared in constant time), NULL on acceptance. The QP half is judged afterwards, by
 * hoop__ib_qpinfo_check on the bytes at offset HOOP__IB_HELLO_BYTES -
 * HOOP__IB_QPINFO_BYTES. */
int hoop__ib_hello_check(const void *bytes, size_t n, const char *token, const char **why);

/* 1 when the n bytes of a listener's reply accept the connection (the size, the magic
 * and verdict 1), else 0. Its QP half, at offset 8, is then judged by
 * hoop__ib_qpinfo_check. */
int hoop__ib_reply_check(const void *bytes, size_t n);

/* Judges the n bytes of a peer's QP half against this end's port: the same link layer
 * (link_eth: 1 RoCE, 0 InfiniBand) and the same eager slot layout. The addresses,
 * numbers, mtu and message size are the peer's to give (the mtu and message size are
 * clamped to this port's by the caller). peer (its rank) and dev (this port's device)
 * name the two ends in the message. Errors: HOOP_ERR_REMOTE (a size other than
 * HOOP__IB_QPINFO_BYTES, another link layer, another slot layout, a path MTU code outside
 * enum ibv_mtu's 1..5, a largest message under one eager slot). */
hoop_status hoop__ib_qpinfo_check(const void *bytes, size_t n, int peer, const char *dev,
                                  int link_eth);

// ----------------------------------------------------------------- completions

#ifdef HOOP_HAVE_VERBS
/* A failed work completion's status (enum ibv_wc_status) as a message for a link to
 * rank peer (< 0: "the peer"): ibv_wc_status_str's text and the number, then a hint
 * where one helps: retry exceeded (no ACK: GID index, routing, or a dead peer), RNR
 * retry exceeded (a hoop bug: receives are posted before credit is granted), remote
 * access or local protection (a registration bug, or memory freed while in use), remote
 * operation or invalid request, local length (a bug), flush ("flushed after an earlier
 * error": report the first error instead). Writes into buf (cap bytes, cut short to
 * fit) and returns it. */
const char *hoop__ib_wc_message(int status, int peer, char *buf, size_t cap);

/* 1 when status is IBV_WC_WR_FLUSH_ERR: a request flushed because the QP had already
 * failed; the caller reports the completion that failed first, not these. */
int hoop__ib_wc_is_flush(int status);
#endif

/* The sender's eager-slot credits (ib.c's flow control). used = slot writes posted,
 * credited = slots the receiver has freed, as last told. The receiver tells its freed
 * count in two ways: the low 30 bits in a credit write's immediate, and whole in each
 * grant. A merge never moves credited backwards, nor past used: an older count arriving
 * after a newer one (a grant's and a credit's, in either order) is ignored, by serial
 * number arithmetic on the 30 bits (RFC 1982); one ahead of used is a protocol error. */
typedef struct hoop__ib_credits {
    uint64_t used, credited;
    uint32_t nslots;
} hoop__ib_credits;

/* Slots the sender may write now (0..nslots). */
static inline uint32_t hoop__ib_credits_free(const hoop__ib_credits *c)
{
    uint64_t busy = c->used - c->credited;
    return busy >= c->nslots ? 0 : c->nslots - (uint32_t)busy;
}

/* Merges a freed count: bits = 30 (an immediate's low bits) or 64 (whole). Returns 0,
 * or -1 when the count is ahead of what was sent (credited is then unchanged). */
int hoop__ib_credits_merge(hoop__ib_credits *c, uint64_t freed, int bits);

/* Receiver: 1 when freed - told slots are worth a credit message (half the slots, or
 * any when force). */
static inline int hoop__ib_credits_due(uint64_t freed, uint64_t told, uint32_t nslots, int force)
{
    uint64_t owed = freed - told;
    return owed > 0 && (force || owed >= nslots / 2);
}

HOOP_EXTERN_C_END

#endif /* HOOP_TRANSPORT_IB_UTIL_H */
