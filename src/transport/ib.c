/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/transport/ib.c -- the InfiniBand verbs transport (RC queue pairs; RoCE and IB).
 *
 * A link (send comm -> recv comm) is one pair of reliable-connected QPs. Everything the
 * receiver must notice is an RDMA WRITE WITH IMMEDIATE, whose immediate value lands in a
 * pre-posted receive's completion; the QP's in-order delivery gives every message its
 * place, so no byte of framing travels:
 *   - eager (bytes <= IB_SLOT_BYTES): the sender writes the message into the receiver's
 *     slot (eager index mod IB_SLOTS), inlined when it fits max_inline_data, else from a
 *     registered bounce slot, so the send completes at once. The receiver frees a slot
 *     when its irecv has taken the bytes and hands the credits back in batches of half
 *     the slots (a zero-byte write with immediate; grants carry them too).
 *   - rendezvous (larger): the receiver's irecv writes a grant (the destination's
 *     address, rkey and length) into the sender's grant ring; the sender writes straight
 *     into the destination in pieces of at most the port's max message size, the last
 *     with the immediate. A receive that reduces as it goes (irecv_fn) grants "stream":
 *     the sender then sends the message through the slots in slot-sized pieces, and the
 *     consumer reduces straight from each slot as shm does from its ring.
 * The sender posts strictly in message order (a rendezvous waits for its grant before
 * anything behind it leaves), so arrivals reach the receiver in message order. Lengths
 * are checked without a byte of framing too: a receiver compares each slot write's
 * length (its completion's byte_len, which the verbs give for an incoming RDMA WRITE WITH
 * IMMEDIATE: ibv_poll_cq(3)) with the bytes it expects there, and a sender a grant's
 * length with its message's (transport.h says what that leaves unchecked). The
 * protocol is the one NCCL's net_ib and UCX's rc transport use in outline: eager slots
 * with credits, receiver-driven rendezvous (we write our own code from the verbs man
 * pages and the InfiniBand Architecture Specification, vol. 1, ch. 9-11).
 *
 * Flow control: the receiver pre-posts IB_SLOTS + IB_GRANTS receives before it grants
 * any credit, and the sender never has more than IB_SLOTS eager writes or IB_GRANTS
 * rendezvous completions outstanding, so a receiver is never "not ready" (RNR). The
 * sender pre-posts IB_GRANTS + 8 receives for what flows back. Every IB_SIGNAL_EVERY-th
 * send work request (and the last of each rendezvous) is signalled, so the send queue
 * never fills with unreaped entries.
 *
 * Set-up: an authenticated TCP connection (the token hello) carries QP numbers, PSNs,
 * GID/LID, MTU, max message size and the addresses and rkeys of the slots and grant
 * ring. QPs go RESET -> INIT -> RTR -> RTS; the acceptor pre-posts its receives and
 * reaches RTR before its reply, the connector answers "ready" once it is in RTS. The
 * socket stays open for the life of the link: an RC receiver never hears that its peer
 * died, and its EOF is how hoop fails a link to a dead peer promptly (HOOP_ERR_REMOTE).
 *
 * Progress: plain ibv_poll_cq (the extended CQ API has had bugs on rxe); before the
 * caller sleeps, pollfds arms the CQ's completion channel and offers its fd.
 *
 * GPU memory: reg_mr with HOOP_TP_MEM_CUDA registers through a dmabuf
 * (ibv_reg_dmabuf_mr with the fd from cuMemGetHandleForAddressRange, probed as NCCL does);
 * where that is missing, the caller stages through pinned host slots. Soft-RoCE (rxe) has
 * no dmabuf support, so that path has never run on hardware here.
 *
 * Owns: devices, PDs, CQs, QPs, MRs and sockets of its contexts and comms.
 * Thread-safety: one thread per comm; a context's registration cache and async events
 * are touched by whichever comm's thread runs (hoop uses one progress thread per
 * communicator, and a context belongs to one communicator).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h" /* HOOP_HAVE_VERBS */
#include "core/check.h"
#include "core/clock.h"
#include "core/fdlimit.h"
#include "core/log.h"
#include "core/rng.h"
#include "transport/ib_util.h"
#include "transport/sock.h"
#include "transport/transport.h"

// ----------------------------------------------------------------- the wire (any build)

#define IB_MAGIC 0x686f6962u /* "hoib" */
#define IB_VERSION 1
#define IB_SLOTS 16               /* eager slots per link */
#define IB_SLOT_BYTES (64u << 10) /* largest eager message */

/* A QP's half of the set-up. */
struct ib_qpinfo {
    uint32_t qpn, psn;
    uint8_t gid[16];
    uint16_t lid;
    uint8_t mtu, link_eth;
    uint32_t max_msg;
    uint64_t ring_addr; /* connector: its grant ring; acceptor: its slots */
    uint32_t ring_rkey, slot_bytes;
    uint32_t nslots, pad;
};

struct ib_hello {
    uint32_t magic;
    uint16_t version, pad;
    int32_t rank, channel;
    char token[HOOP_TP_TOKEN_MAX];
    struct ib_qpinfo qp;
};

struct ib_reply {
    uint32_t magic;
    int32_t verdict; /* 1 = accepted */
    struct ib_qpinfo qp;
};
_Static_assert(sizeof(struct ib_qpinfo) == HOOP__IB_QPINFO_BYTES, "ib_util.h's qpinfo size");
_Static_assert(sizeof(struct ib_hello) == HOOP__IB_HELLO_BYTES, "ib_util.h's hello size");
_Static_assert(sizeof(struct ib_reply) == HOOP__IB_REPLY_BYTES, "ib_util.h's reply size");

int hoop__ib_hello_check(const void *bytes, size_t n, const char *token, const char **why)
{
    struct ib_hello h;
    *why = NULL;
    if (n == sizeof(h)) memcpy(&h, bytes, sizeof(h));
    if (n != sizeof(h) || h.magic != IB_MAGIC)
        *why = "not a hoop ib hello";
    else if (h.version != IB_VERSION)
        *why = "another ib protocol version";
    else if (!hoop__sock_token_equal(h.token, token))
        *why = "wrong token";
    return *why == NULL;
}

int hoop__ib_reply_check(const void *bytes, size_t n)
{
    struct ib_reply r;
    if (n != sizeof(r)) return 0;
    memcpy(&r, bytes, sizeof(r));
    return r.magic == IB_MAGIC && r.verdict == 1;
}

hoop_status hoop__ib_qpinfo_check(const void *bytes, size_t n, int peer, const char *dev,
                                  int link_eth)
{
    struct ib_qpinfo q;
    if (n != sizeof(q))
        return HOOP_ERROR(HOOP_ERR_REMOTE,
                          "ib: rank %d sent a QP description of %zu bytes, not %zu", peer, n,
                          sizeof(q));
    memcpy(&q, bytes, sizeof(q));
    if (q.link_eth != link_eth)
        return HOOP_ERROR(HOOP_ERR_REMOTE, "ib: rank %d's port is %s, ours (%s) is %s", peer,
                          q.link_eth ? "RoCE" : "InfiniBand", dev,
                          link_eth ? "RoCE" : "InfiniBand");
    if (q.slot_bytes != IB_SLOT_BYTES || q.nslots != IB_SLOTS)
        return HOOP_ERROR(HOOP_ERR_REMOTE, "ib: rank %d runs another slot layout (%u x %u bytes)",
                          peer, q.nslots, q.slot_bytes);
    /* enum ibv_mtu: IBV_MTU_256 = 1 .. IBV_MTU_4096 = 5 (written out: this part builds
     * without verbs). ibv_modify_qp would refuse another value with an errno that names
     * neither end; a message size under a slot would split a rendezvous into empty
     * pieces forever. */
    if (q.mtu < 1 || q.mtu > 5)
        return HOOP_ERROR(HOOP_ERR_REMOTE,
                          "ib: rank %d sent path MTU code %u (enum ibv_mtu is 1..5: 256..4096 "
                          "bytes)",
                          peer, q.mtu);
    if (q.max_msg < IB_SLOT_BYTES)
        return HOOP_ERROR(HOOP_ERR_REMOTE,
                          "ib: rank %d's port takes messages of at most %u bytes (under %u)", peer,
                          q.max_msg, IB_SLOT_BYTES);
    return HOOP_OK;
}

#ifndef HOOP_HAVE_VERBS

static hoop_status ib_init(const struct hoop_tp_config *cfg, void **tctx)
{
    (void)cfg, (void)tctx;
    return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                      "this build of hoop has no verbs transport (configure found no "
                      "libibverbs: install libibverbs-dev and reconfigure)");
}

const struct hoop_transport hoop__transport_ib = {
    .name = "ib", .api_version = HOOP_TRANSPORT_API_VERSION, .preference = 1, .init = ib_init};

#else /* HOOP_HAVE_VERBS */

#include <infiniband/verbs.h>

#include "transport/regcache.h"
#include "transport/reqpool.h"

#define IB_GRANTS 32               /* rendezvous grants outstanding per link */
#define IB_SQ_DEPTH 256            /* send work requests per QP */
#define IB_SIGNAL_EVERY 32         /* a signalled send work request at least this often */
#define IB_SEND_RQ (IB_GRANTS + 8) /* receives a send comm keeps posted */
#define IB_RECV_RQ (IB_SLOTS + IB_GRANTS)
#define IB_CQ_DEPTH (IB_SQ_DEPTH + IB_RECV_RQ + 16)
#define IB_POLL_BATCH 16
#define IB_SPARE 16                        /* released requests a comm keeps */
#define IB_EOF_CHECK_NS (200 * 1000)       /* a stalled comm peeks at its socket this often */
#define IB_CLOSE_DRAIN_NS (2000000000LL)   /* close waits this long for sends to leave */
#define IB_GONE_GRACE_NS (300 * 1000000LL) /* a posted send's wait for its ACK after EOF */
#define IB_CACHE_ENTRIES 256
#define IB_MAX_GIDS 256
#define IB_MAX_PORTS 64 /* usable ports a host lists that the choice looks at */

/* The immediate value: a kind in the top two bits, a sequence number below. */
enum { IMM_EAGER = 0u, IMM_RNDV = 1u, IMM_GRANT = 2u, IMM_CREDIT = 3u };
#define IMM(kind, n) (((uint32_t)(kind) << 30) | ((uint32_t)(n)&0x3fffffffu))
#define IMM_KIND(v) ((v) >> 30)
#define IMM_NUM(v) ((v)&0x3fffffffu)

enum { GRANT_WRITE = 0, GRANT_STREAM = 1 };

/* What a receiver writes into its sender's grant ring. */
struct ib_grant {
    uint64_t addr;  /* destination (GRANT_WRITE) */
    uint64_t bytes; /* the message's length, which the sender checks against its own */
    uint64_t freed; /* the receiver's freed-slot count (credits ride along) */
    uint32_t rkey, seq;
    uint32_t mode, pad;
};

/* One opened device port. */
struct ib_port {
    struct ibv_context *vctx;
    struct ibv_pd *pd;
    char dev[64];
    int port, gid_index, link_eth, gid_type;
    union ibv_gid gid;
    uint16_t lid;
    enum ibv_mtu mtu;
    uint32_t max_msg;
    double gbps; /* the port's data rate (ibv_port_attr speed x width) */
};

struct ib_ctx {
    struct ib_port p;
    struct hoop_tp_ib_config cfg;
    int rank;
    char token[HOOP_TP_TOKEN_MAX];
    hoop_sockaddr addr; /* the connection socket's listen address (port 0) */
    hoop__regcache *cache;
    struct ib_comm *connecting;
    int kick_fd; /* rung by pollfds when completions were already waiting */
    int kicked;
    hoop_status dead; /* an asynchronous event failed the port */
    char dead_why[200];
    int64_t async_checked_ns;
};

/* What a rank publishes. */
struct ib_handle {
    uint32_t magic;
    int32_t rank;
    struct hoop_sock_wire addr; /* the connection socket's address */
    uint8_t link_eth, pad[7];
    uint64_t subnet_prefix; /* InfiniBand: links need the same subnet */
    struct ib_comm *pending;
};
_Static_assert(sizeof(struct ib_handle) <= HOOP_TP_HANDLE_MAX, "ib handle too large");

enum ib_kind { IK_LISTEN, IK_SEND, IK_RECV };
enum ib_conn { IC_START, IC_CONNECTING, IC_HELLO, IC_REPLY, IC_READY, IC_DONE };

struct ib_req {
    hoop__req_link link;
    struct ib_comm *comm;
    char *buf;
    size_t bytes;
    hoop_tp_consume_fn fn; /* a consumer receive; its pieces are whole slots (or the rest),
                            * so they are whole elements of any unit dividing 8 */
    void *arg;
    uint32_t grant;    /* rendezvous: its grant's number on the link */
    uint32_t write;    /* receiver, write-mode rendezvous: its completion's number */
    uint64_t eager;    /* receiver: first eager index (eager messages, stream pieces) */
    size_t done_bytes; /* stream: bytes consumed or sent */
    int rndv, stream, granted, posted, done;
    int len_bad;      /* receiver: a slot write of another length came for it (1: not told) */
    uint32_t len_got; /* that write's bytes (the completion's byte_len) */
    size_t len_want;  /* the bytes the receive expected in that slot */
    uint64_t sq_last; /* rendezvous / stream send: the last work request's number */
    void *entry;      /* the registration cache's entry held for buf */
    uint32_t lkey, rkey;
    struct ib_req *next; /* the comm's queue, in message order */
};

/* An accepted socket on its way to a recv comm. */
struct ib_pend {
    int fd, state; /* 0: reading the hello; 1: waiting for "ready" */
    size_t off;
    struct ib_hello hello;
    struct ib_comm *c;
};

struct ib_comm {
    struct hoop_tp_comm base;
    struct ib_ctx *ctx;
    enum ib_kind kind;
    int sock;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    int armed;
    uint32_t max_inline, max_msg; /* the smaller of both sides' */
    struct ib_qpinfo peer;
    union ibv_gid peer_gid;
    hoop__req_pool pool;
    struct ib_req *qhead, *qtail;
    uint32_t next_grant;         /* rendezvous messages posted (isend / irecv) */
    uint32_t next_write;         /* sender: write-mode rendezvous posted; receiver: assigned */
    uint64_t next_eager;         /* receiver: eager slots assigned to posted receives */
    uint64_t sq_posted, sq_done; /* send work requests posted / known complete */
    uint32_t unsignalled;
    /* memory: sender: grant ring (remote-writable) + bounce slots; receiver: slots +
     * outgoing grants */
    char *mem;
    size_t mem_bytes;
    struct ibv_mr *mr;
    /* sender */
    hoop__ib_credits cr;            /* eager slots written / freed by the receiver */
    uint32_t grants_in;             /* grants seen */
    struct ib_grant got[IB_GRANTS]; /* copies of the ring's entries, by grant number */
    uint64_t remote_slots;
    uint32_t remote_rkey;
    /* receiver */
    uint64_t eager_in;           /* eager slot writes arrived */
    uint32_t slot_len[IB_SLOTS]; /* each slot's last write, bytes (the completion's byte_len) */
    uint64_t freed, freed_told;
    uint32_t grants_out, grants_retired; /* grants sent / whose receive completed */
    uint32_t writes_in;                  /* rendezvous writes completed */
    uint64_t remote_ring;
    uint32_t remote_ring_rkey;
    /* liveness */
    int peer_gone;
    int64_t gone_ns; /* when a posted send first waited past the peer's EOF */
    int64_t eof_checked_ns;
    hoop_status failed;
    char why[480];
    /* connector */
    enum ib_conn state;
    hoop_sockaddr raddr;
    size_t off;
    struct ib_hello hello;
    struct ib_reply reply;
    struct ib_comm *next_connecting;
    /* listener */
    struct ib_pend *pend;
    int npend, cappend;
};

static const struct hoop_transport *self_tp(void);

// ----------------------------------------------------------------- small helpers

static const char *gid_text(const union ibv_gid *g, char *buf, size_t cap)
{
    return hoop__ib_gid_str(g->raw, buf, cap);
}

static double port_gbps(const struct ibv_port_attr *a)
{
    /* Per-lane signalling rates after encoding, Gbit/s (IBTA vol. 1, 7.7; rdma-core's
     * ibv_port_attr documentation for the codes). */
    double lane = a->active_speed == 1     ? 2.0
                  : a->active_speed == 2   ? 4.0
                  : a->active_speed == 4   ? 8.0
                  : a->active_speed == 8   ? 10.3125 * 64 / 66
                  : a->active_speed == 16  ? 14.0625 * 64 / 66
                  : a->active_speed == 32  ? 25.78125 * 64 / 66
                  : a->active_speed == 64  ? 50.0
                  : a->active_speed == 128 ? 100.0
                                           : 10.0;
    int width = a->active_width == 1    ? 1
                : a->active_width == 2  ? 4
                : a->active_width == 4  ? 8
                : a->active_width == 8  ? 12
                : a->active_width == 16 ? 2
                                        : 1;
    return lane * width;
}

static const char *mtu_text(enum ibv_mtu m)
{
    switch (m) {
    case IBV_MTU_256: return "256";
    case IBV_MTU_512: return "512";
    case IBV_MTU_1024: return "1024";
    case IBV_MTU_2048: return "2048";
    case IBV_MTU_4096: return "4096";
    }
    return "?";
}

static const char *gid_type_text(int t)
{
    return t == HOOP__IB_GID_ROCE_V2 ? "RoCE v2" : t == HOOP__IB_GID_ROCE_V1 ? "RoCE v1" : "IB";
}

// ----------------------------------------------------------------- device choice

static void gid_entry(hoop__ib_gid *g, const struct ibv_gid_entry *e)
{
    memcpy(g->raw, e->gid.raw, 16);
    g->type = e->gid_type == IBV_GID_TYPE_ROCE_V2   ? HOOP__IB_GID_ROCE_V2
              : e->gid_type == IBV_GID_TYPE_ROCE_V1 ? HOOP__IB_GID_ROCE_V1
                                                    : HOOP__IB_GID_IB;
}

/* Reads port's GID table into a dense table (index = position). */
static hoop_status read_gids(struct ibv_context *v, int port, int len, hoop__ib_gid *tab, int *n)
{
    struct ibv_gid_entry *e;
    if (len > IB_MAX_GIDS) len = IB_MAX_GIDS;
    memset(tab, 0, (size_t)len * sizeof(*tab));
    *n = len;
    HOOP_CHECK(hoop__calloc(&e, (size_t)len * 2 + 16));
    /* One ioctl for the whole table (per-entry sysfs reads take minutes under emulation). */
    ssize_t got = ibv_query_gid_table(v, e, (size_t)len * 2 + 16, 0);
    for (ssize_t i = 0; i < got; i++) {
        if ((int)e[i].port_num != port || e[i].gid_index >= (uint32_t)len) continue;
        gid_entry(&tab[e[i].gid_index], &e[i]);
    }
    free(e);
    if (got < 0) { /* an older kernel: one entry at a time, the whole table (a RoCE v2
                    * IPv4 GID can sit far down it behind VLANs and IPv6 addresses) */
        for (int i = 0; i < len; i++) {
            struct ibv_gid_entry one;
            if (ibv_query_gid_ex(v, (uint32_t)port, (uint32_t)i, &one, 0) != 0) continue;
            gid_entry(&tab[i], &one);
        }
    }
    return HOOP_OK;
}

/* Sets up p for (vctx, port): checks the port is active, picks its GID. */
static hoop_status use_port(const struct hoop_tp_ib_config *cfg, struct ibv_context *v,
                            const char *dev, int port, const struct ibv_port_attr *pa,
                            struct ib_port *p)
{
    hoop__ib_gid tab[IB_MAX_GIDS];
    int n, idx = 0;
    memset(p, 0, sizeof(*p));
    snprintf(p->dev, sizeof(p->dev), "%s", dev);
    p->port = port;
    p->link_eth = pa->link_layer == IBV_LINK_LAYER_ETHERNET;
    p->lid = pa->lid;
    p->mtu = pa->active_mtu;
    p->max_msg = pa->max_msg_sz ? pa->max_msg_sz : (1u << 30);
    p->gbps = port_gbps(pa);
    HOOP_CHECK(read_gids(v, port, pa->gid_tbl_len, tab, &n));
    HOOP_CHECK(
        hoop__ib_gid_pick(tab, n, p->link_eth, cfg->gid_index, cfg->addr_range, dev, port, &idx));
    p->gid_index = idx;
    p->gid_type = tab[idx].type;
    memcpy(p->gid.raw, tab[idx].raw, 16);
    if (!p->link_eth && p->lid == 0)
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "%s port %d: InfiniBand port without a LID "
                          "(is a subnet manager running?)",
                          dev, port);
    p->vctx = v;
    return HOOP_OK;
}

/* The devices and ports HOOP_IB_HCA selects, the local_rank-th active one of them. */
static hoop_status open_port(const struct hoop_tp_ib_config *cfg, struct ib_port *p)
{
    hoop__ib_hca_spec spec;
    int ndev = 0, seen = 0, chosen = 0;
    char skipped[300] = "";
    size_t slen = 0;
    HOOP_CHECK(hoop__ib_hca_parse(cfg->hca, &spec));
    struct ibv_device **list = ibv_get_device_list(&ndev);
    if (!list || ndev == 0) {
        if (list) ibv_free_device_list(list);
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "no RDMA device (ibv_get_device_list: %s)",
                          list              ? "none listed"
                          : errno == ENOSYS ? "this kernel has no RDMA support loaded"
                                            : hoop__strerror(errno));
    }
    int want = cfg->local_rank >= 0 ? cfg->local_rank : 0;
    /* Two passes: count the usable ports (and their link layers), then open the chosen
     * one. matched: ports the filter kept, active or not; all: every port seen, for the
     * message when none. */
    int usable = 0, matched = 0, pick = -1, ib_only = 0, eth[IB_MAX_PORTS];
    char all[300] = "";
    size_t alen = 0;
    hoop_status st = HOOP_OK, last = HOOP_OK;
    for (int pass = 0; pass < 2 && !chosen; pass++) {
        seen = 0;
        for (int d = 0; d < ndev && !chosen; d++) {
            const char *name = ibv_get_device_name(list[d]);
            struct ibv_context *v = ibv_open_device(list[d]);
            struct ibv_device_attr da;
            if (!v) continue;
            if (ibv_query_device(v, &da) != 0) {
                ibv_close_device(v);
                continue;
            }
            int keep = 0;
            for (int port = 1; port <= da.phys_port_cnt && !chosen; port++) {
                struct ibv_port_attr pa;
                if (pass == 0 && alen + 40 < sizeof(all))
                    alen += (size_t)snprintf(all + alen, sizeof(all) - alen, "%s%s:%d",
                                             alen ? ", " : "", name, port);
                if (!hoop__ib_hca_match(&spec, name, port)) continue;
                matched += pass == 0;
                if (ibv_query_port(v, (uint8_t)port, &pa) != 0) continue;
                if (pa.state != IBV_PORT_ACTIVE) {
                    if (pass == 0 && slen + 64 < sizeof(skipped))
                        slen +=
                            (size_t)snprintf(skipped + slen, sizeof(skipped) - slen,
                                             "%s%s:%d not active", slen ? ", " : "", name, port);
                    continue;
                }
                if (pass == 0) {
                    if (usable < IB_MAX_PORTS)
                        eth[usable] = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
                    usable++;
                    continue;
                }
                if (seen++ != pick) continue;
                st = use_port(cfg, v, name, port, &pa, p);
                if (st == HOOP_OK) {
                    chosen = keep = 1;
                } else {
                    last = st;
                    if (slen + 100 < sizeof(skipped))
                        slen += (size_t)snprintf(skipped + slen, sizeof(skipped) - slen, "%s%s",
                                                 slen ? "; " : "", hoop_last_error());
                }
            }
            if (!keep) ibv_close_device(v);
        }
        if (pass == 0 && usable == 0) break;
        if (pass == 0)
            pick = hoop__ib_port_pick(eth, usable < IB_MAX_PORTS ? usable : IB_MAX_PORTS,
                                      spec.n > 0, want, &ib_only);
    }
    if (chosen && ib_only)
        HOOP_INFO(INIT, "ib: this host has active InfiniBand and Ethernet (RoCE) ports; using the "
                        "InfiniBand ones (HOOP_IB_HCA chooses otherwise)");
    ibv_free_device_list(list);
    if (chosen) return HOOP_OK;
    if (last != HOOP_OK) return HOOP_ERROR(last, "%s", skipped);
    /* A filter that keeps nothing this host has is most likely a typo: say what it has
     * (comm.c warns about it rather than falling back to tcp quietly). */
    if (matched == 0 && spec.n > 0)
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "HOOP_IB_HCA=%s matches none of this host's RDMA ports (%s%s)", cfg->hca,
                          alen ? "it has " : "none of its devices has a port", alen ? all : "");
    return HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "no active RDMA port%s%s%s%s",
                      cfg->hca && *cfg->hca ? " matches HOOP_IB_HCA=" : "",
                      cfg->hca && *cfg->hca ? cfg->hca : "", slen ? ": " : "", skipped);
}

// ----------------------------------------------------------------- registration

struct ib_mr {
    struct ibv_mr *mr;
};

static hoop_status reg_host(struct ib_ctx *ctx, void *addr, size_t len, struct ibv_mr **out)
{
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    struct ibv_mr *mr = ibv_reg_mr(ctx->p.pd, addr, len, access);
    if (!mr) {
        int e = errno;
        return HOOP_ERROR(e == ENOMEM || e == EAGAIN ? HOOP_ERR_NOMEM : HOOP_ERR_IB,
                          "ib: ibv_reg_mr of %zu bytes at %p on %s: %s%s", len, addr, ctx->p.dev,
                          hoop__strerror(e),
                          e == ENOMEM || e == EAGAIN
                              ? " (the locked-memory limit, ulimit -l, may be too low)"
                              : "");
    }
    *out = mr;
    return HOOP_OK;
}

static hoop_status cache_reg(void *arg, void *addr, size_t len, void **mr)
{
    return reg_host(arg, addr, len, (struct ibv_mr **)mr);
}

static void cache_dereg(void *arg, void *mr)
{
    (void)arg;
    (void)ibv_dereg_mr(mr);
}

/* CUDA memory through a dmabuf: the driver's fd for the range, then ibv_reg_dmabuf_mr.
 * Loaded at run time (libcuda.so.1), so a host without the CUDA driver loses nothing.
 * Never run (Soft-RoCE has no dmabuf) and not used: the collectives stage GPU buffers
 * through pinned host slots (devres.c). Before it is, three gaps: keys_for matches a
 * caller's mr by mr->addr, which ibv_reg_dmabuf_mr sets to the dmabuf offset (0 here),
 * so the range must be kept beside it; messages of IB_SLOT_BYTES or less are copied by
 * the CPU (eager slots, inline sends), so GPU memory must take the rendezvous path on
 * both ends alike; and a receive into GPU memory needs a flush (an RDMA READ after the
 * writes, as NCCL's, or cuFlushGPUDirectRDMAWrites) before the device reads it. */
typedef int (*cu_handle_fn)(void *handle, unsigned long long dptr, size_t size, int type,
                            unsigned long long flags);
#define CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1

static hoop_status reg_cuda(struct ib_ctx *ctx, void *addr, size_t len, struct ibv_mr **out)
{
    static cu_handle_fn get_handle;
    if (!get_handle) {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib) get_handle = (cu_handle_fn)(uintptr_t)dlsym(lib, "cuMemGetHandleForAddressRange");
    }
    if (!get_handle)
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "ib: GPU memory needs the CUDA driver's dmabuf export "
                          "(cuMemGetHandleForAddressRange, CUDA 11.7 and later); stage "
                          "through pinned memory instead");
    /* dmabuf wants page-aligned ranges; register the covering pages, address the bytes. */
    uintptr_t page = 4096, a = (uintptr_t)addr & ~(page - 1);
    size_t span = (((uintptr_t)addr + len + page - 1) & ~(page - 1)) - a;
    int fd = -1;
    int rc = get_handle(&fd, a, span, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (rc != 0 || fd < 0)
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "ib: no dmabuf for GPU memory at %p (CUresult %d: the kernel or driver "
                          "lacks dmabuf export); stage through pinned memory instead",
                          addr, rc);
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    struct ibv_mr *mr = ibv_reg_dmabuf_mr(ctx->p.pd, 0, span, (uint64_t)a, fd, access);
    int e = errno;
    close(fd);
    if (!mr)
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "ib: ibv_reg_dmabuf_mr on %s: %s", ctx->p.dev,
                          hoop__strerror(e));
    *out = mr;
    return HOOP_OK;
}

static hoop_status ib_reg_mr(void *tctx, void *buf, size_t bytes, int kind, void **out)
{
    struct ib_ctx *ctx = tctx;
    struct ib_mr *m;
    hoop_status st;
    *out = NULL;
    HOOP_CHECK(hoop__calloc(&m, 1));
    st = kind == HOOP_TP_MEM_CUDA ? reg_cuda(ctx, buf, bytes, &m->mr)
                                  : reg_host(ctx, buf, bytes, &m->mr);
    if (st != HOOP_OK) {
        free(m);
        return st;
    }
    *out = m;
    return HOOP_OK;
}

static hoop_status ib_dereg_mr(void *tctx, void *mr)
{
    struct ib_mr *m = mr;
    (void)tctx;
    if (!m) return HOOP_OK;
    int rc = ibv_dereg_mr(m->mr);
    free(m);
    if (rc != 0) return HOOP_ERROR(HOOP_ERR_IB, "ib: ibv_dereg_mr: %s", hoop__strerror(rc));
    return HOOP_OK;
}

/* lkey/rkey for [buf, buf + bytes): from the caller's mr when it covers the range, else
 * through the cache (the entry is held in r->entry until the request ends). */
static hoop_status keys_for(struct ib_comm *c, struct ib_req *r, void *mr)
{
    struct ib_mr *m = mr;
    if (m && (char *)r->buf >= (char *)m->mr->addr &&
        (char *)r->buf + r->bytes <= (char *)m->mr->addr + m->mr->length) {
        r->lkey = m->mr->lkey;
        r->rkey = m->mr->rkey;
        return HOOP_OK;
    }
    void *got;
    HOOP_CHECK(hoop__regcache_get(c->ctx->cache, r->buf, r->bytes, &got, &r->entry));
    r->lkey = ((struct ibv_mr *)got)->lkey;
    r->rkey = ((struct ibv_mr *)got)->rkey;
    return HOOP_OK;
}

// ----------------------------------------------------------------- context

static hoop_status ib_init(const struct hoop_tp_config *cfg, void **tctx)
{
    struct ib_ctx *ctx;
    hoop_status st;
    if (cfg->token && strlen(cfg->token) >= HOOP_TP_TOKEN_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "HOOP_TOKEN is longer than %d characters",
                          HOOP_TP_TOKEN_MAX - 1);
    HOOP_CHECK(hoop__calloc(&ctx, 1));
    ctx->kick_fd = -1;
    ctx->rank = cfg->rank;
    ctx->cfg = cfg->ib;
    if (ctx->cfg.timeout == 0) /* a zeroed block: the defaults */
        ctx->cfg = (struct hoop_tp_ib_config){.hca = cfg->ib.hca,
                                              .gid_index = -1,
                                              .addr_range = cfg->ib.addr_range,
                                              .local_rank = cfg->ib.local_rank,
                                              .timeout = 20,
                                              .retry_cnt = 7,
                                              .reg_cache = 1};
    if (cfg->token) snprintf(ctx->token, sizeof(ctx->token), "%s", cfg->token);
    HOOP_CHECK_GOTO(hoop__sock_listen_addr(cfg->ifname, cfg->master_addr, &ctx->addr), st, fail);
    HOOP_CHECK_GOTO(open_port(&ctx->cfg, &ctx->p), st, fail);
    ctx->p.pd = ibv_alloc_pd(ctx->p.vctx);
    if (!ctx->p.pd) {
        st = HOOP_ERROR(HOOP_ERR_IB, "ib: ibv_alloc_pd on %s: %s", ctx->p.dev,
                        hoop__strerror(errno));
        goto fail;
    }
    HOOP_CHECK_GOTO(hoop__regcache_new(&ctx->cache, ctx->cfg.reg_cache, IB_CACHE_ENTRIES, cache_reg,
                                       cache_dereg, ctx),
                    st, fail);
    ctx->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ctx->kick_fd < 0) {
        int err = errno;
        char hint[160];
        st = HOOP_ERROR(HOOP_ERR_SYSTEM, "ib: eventfd: %s%s", hoop__strerror(err),
                        hoop__fd_hint(err, hint, sizeof(hint)));
        goto fail;
    }
    int fl = fcntl(ctx->p.vctx->async_fd, F_GETFL);
    if (fl >= 0) (void)fcntl(ctx->p.vctx->async_fd, F_SETFL, fl | O_NONBLOCK);
    char g[64];
    HOOP_INFO(INIT, "rank %d: ib on %s port %d, MTU %s, GID index %d (%s) %s%s%.0f Gbit/s",
              cfg->rank, ctx->p.dev, ctx->p.port, mtu_text(ctx->p.mtu), ctx->p.gid_index,
              ctx->p.link_eth ? gid_type_text(ctx->p.gid_type) : "IB",
              gid_text(&ctx->p.gid, g, sizeof(g)), ctx->p.link_eth ? ", " : ", LID ", ctx->p.gbps);
    if (!ctx->p.link_eth) HOOP_DEBUGF(IB, "ib: LID %u", ctx->p.lid);
    *tctx = ctx;
    return HOOP_OK;
fail:
    if (ctx->cache) hoop__regcache_free(ctx->cache);
    if (ctx->p.pd) ibv_dealloc_pd(ctx->p.pd);
    if (ctx->p.vctx) ibv_close_device(ctx->p.vctx);
    if (ctx->kick_fd >= 0) close(ctx->kick_fd);
    free(ctx);
    return st;
}

static hoop_status ib_close(struct hoop_tp_comm *tc);

static hoop_status ib_finalize(void *tctx)
{
    struct ib_ctx *ctx = tctx;
    if (!ctx) return HOOP_OK;
    while (ctx->connecting) ib_close(&ctx->connecting->base); /* unlinks itself */
    hoop__regcache_free(ctx->cache);
    int rc = ibv_dealloc_pd(ctx->p.pd);
    ibv_close_device(ctx->p.vctx);
    close(ctx->kick_fd);
    free(ctx);
    if (rc != 0)
        return HOOP_ERROR(HOOP_ERR_IB, "ib: ibv_dealloc_pd: %s (memory still registered)",
                          hoop__strerror(rc));
    return HOOP_OK;
}

static int ib_reachable(void *tctx, const void *handle)
{
    const struct ib_ctx *ctx = tctx;
    const struct ib_handle *h = handle;
    if (!ctx || h->magic != IB_MAGIC || h->link_eth != ctx->p.link_eth) return 0;
    /* RoCE v2 is routed; InfiniBand without routers needs the same subnet. */
    return ctx->p.link_eth || h->subnet_prefix == ctx->p.gid.global.subnet_prefix;
}

static void ib_forget(void *tctx, void *addr, size_t bytes)
{
    struct ib_ctx *ctx = tctx;
    if (ctx && addr && bytes) hoop__regcache_invalidate(ctx->cache, addr, bytes);
}

static void ib_cost(void *tctx, struct hoop_tp_cost *out)
{
    const struct ib_ctx *ctx = tctx;
    out->alpha = 3e-6; /* a verbs round of post, wire, completion on current HCAs */
    out->beta = 8.0 / (ctx->p.gbps * 1e9);
}

/* Asynchronous events: a port that went down, or a dead device, fails every link. */
static void check_async(struct ib_ctx *ctx)
{
    struct ibv_async_event ev;
    int64_t now = hoop__now_ns();
    if (now - ctx->async_checked_ns < 1000000) return;
    ctx->async_checked_ns = now;
    while (ibv_get_async_event(ctx->p.vctx, &ev) == 0) {
        int fatal = ev.event_type == IBV_EVENT_DEVICE_FATAL ||
                    (ev.event_type == IBV_EVENT_PORT_ERR && ev.element.port_num == ctx->p.port);
        if (fatal && ctx->dead == HOOP_OK) {
            ctx->dead = HOOP_ERR_REMOTE;
            snprintf(ctx->dead_why, sizeof(ctx->dead_why), "ib: %s port %d: %s", ctx->p.dev,
                     ctx->p.port, ibv_event_type_str(ev.event_type));
        }
        HOOP_DEBUGF(IB, "ib: async event on %s: %s", ctx->p.dev, ibv_event_type_str(ev.event_type));
        ibv_ack_async_event(&ev);
    }
}

// ----------------------------------------------------------------- comms and QPs

static hoop_status comm_new(struct ib_ctx *ctx, enum ib_kind kind, int peer, int channel,
                            struct ib_comm **out)
{
    struct ib_comm *c;
    HOOP_CHECK(hoop__calloc(&c, 1));
    c->base.tp = self_tp();
    c->base.peer = peer;
    c->base.channel = channel;
    c->ctx = ctx;
    c->kind = kind;
    c->sock = -1;
    hoop__req_pool_init(&c->pool, sizeof(struct ib_req), IB_SPARE);
    c->cr.nslots = IB_SLOTS;
    *out = c;
    return HOOP_OK;
}

static hoop_status comm_fail(struct ib_comm *c, hoop_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static hoop_status comm_fail(struct ib_comm *c, hoop_status st, const char *fmt, ...)
{
    if (c->failed == HOOP_OK) {
        char what[440];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        c->failed = st;
        snprintf(c->why, sizeof(c->why), "ib link %s rank %d: %s",
                 c->kind == IK_SEND ? "to" : "from", c->base.peer, what);
        /* Stop the device's work on the link before its requests are released: in the
         * error state the QP flushes what is posted and takes no more of the peer's
         * writes, which would otherwise land in receive buffers already handed back
         * (ibv_modify_qp(3): any state may move to IBV_QPS_ERR). */
        if (c->qp) {
            struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
            (void)ibv_modify_qp(c->qp, &a, IBV_QP_STATE);
        }
    }
    return HOOP_ERROR(c->failed, "%s", c->why);
}

/* The CQ, QP (in INIT) and the link's registered memory. */
static hoop_status qp_create(struct ib_comm *c)
{
    struct ib_ctx *ctx = c->ctx;
    struct ib_port *p = &ctx->p;
    c->ch = ibv_create_comp_channel(p->vctx);
    if (!c->ch)
        return HOOP_ERROR(HOOP_ERR_IB, "ib: ibv_create_comp_channel on %s: %s", p->dev,
                          hoop__strerror(errno));
    int fl = fcntl(c->ch->fd, F_GETFL);
    if (fl >= 0) (void)fcntl(c->ch->fd, F_SETFL, fl | O_NONBLOCK);
    c->cq = ibv_create_cq(p->vctx, IB_CQ_DEPTH, c, c->ch, 0);
    if (!c->cq)
        return HOOP_ERROR(HOOP_ERR_IB, "ib: ibv_create_cq(%d) on %s: %s", IB_CQ_DEPTH, p->dev,
                          hoop__strerror(errno));
    struct ibv_qp_init_attr ia = {
        .send_cq = c->cq,
        .recv_cq = c->cq,
        .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = IB_SQ_DEPTH,
                .max_recv_wr = c->kind == IK_SEND ? IB_SEND_RQ : IB_RECV_RQ,
                .max_send_sge = 1,
                .max_recv_sge = 1,
                .max_inline_data = 128},
    };
    c->qp = ibv_create_qp(p->pd, &ia);
    if (!c->qp) { /* a device without inline support */
        ia.cap.max_inline_data = 0;
        c->qp = ibv_create_qp(p->pd, &ia);
    }
    if (!c->qp)
        return HOOP_ERROR(HOOP_ERR_IB, "ib: ibv_create_qp on %s: %s", p->dev,
                          hoop__strerror(errno));
    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qia;
    c->max_inline = ia.cap.max_inline_data;
    if (ibv_query_qp(c->qp, &qa, IBV_QP_CAP, &qia) == 0) c->max_inline = qa.cap.max_inline_data;
    struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT,
                               .pkey_index = 0,
                               .port_num = (uint8_t)p->port,
                               .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE};
    int rc = ibv_modify_qp(c->qp, &init,
                           IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0)
        return HOOP_ERROR(HOOP_ERR_IB, "ib: QP to INIT on %s port %d: %s", p->dev, p->port,
                          hoop__strerror(rc));
    /* sender: grant ring then bounce slots; receiver: slots then outgoing grants */
    c->mem_bytes = (size_t)IB_GRANTS * sizeof(struct ib_grant) + (size_t)IB_SLOTS * IB_SLOT_BYTES;
    if (posix_memalign((void **)&c->mem, 4096, c->mem_bytes) != 0)
        return HOOP_ERROR(HOOP_ERR_NOMEM, "ib: %zu bytes of link memory", c->mem_bytes);
    memset(c->mem, 0, c->mem_bytes);
    return reg_host(ctx, c->mem, c->mem_bytes, &c->mr);
}

static char *grant_ring(struct ib_comm *c) /* sender: received grants */
{
    return c->mem;
}
static char *bounce(struct ib_comm *c, uint64_t k) /* sender */
{
    return c->mem + (size_t)IB_GRANTS * sizeof(struct ib_grant) +
           (size_t)(k % IB_SLOTS) * IB_SLOT_BYTES;
}
static char *slot(struct ib_comm *c, uint64_t k) /* receiver */
{
    return c->mem + (size_t)(k % IB_SLOTS) * IB_SLOT_BYTES;
}
static struct ib_grant *grant_out(struct ib_comm *c, uint32_t g) /* receiver */
{
    return (struct ib_grant *)(c->mem + (size_t)IB_SLOTS * IB_SLOT_BYTES) + (g % IB_GRANTS);
}

static void qp_info(struct ib_comm *c, struct ib_qpinfo *q)
{
    struct ib_port *p = &c->ctx->p;
    hoop__rng rng = hoop__rng_seed((uint64_t)hoop__now_ns() ^ (uintptr_t)c);
    memset(q, 0, sizeof(*q));
    q->qpn = c->qp->qp_num;
    q->psn = (uint32_t)hoop__rng_next(&rng) & 0xffffff;
    memcpy(q->gid, p->gid.raw, 16);
    q->lid = p->lid;
    q->mtu = (uint8_t)p->mtu;
    q->link_eth = (uint8_t)p->link_eth;
    q->max_msg = p->max_msg;
    q->ring_addr = (uint64_t)(uintptr_t)c->mem;
    q->ring_rkey = c->mr->rkey;
    q->slot_bytes = IB_SLOT_BYTES;
    q->nslots = IB_SLOTS;
}

/* INIT -> RTR -> RTS against the peer's half. */
static hoop_status qp_connect(struct ib_comm *c, const struct ib_qpinfo *mine,
                              const struct ib_qpinfo *peer)
{
    struct ib_ctx *ctx = c->ctx;
    struct ib_port *p = &ctx->p;
    char g1[64], g2[64];
    c->peer = *peer;
    memcpy(c->peer_gid.raw, peer->gid, 16);
    HOOP_CHECK(hoop__ib_qpinfo_check(peer, sizeof(*peer), c->base.peer, p->dev, p->link_eth));
    c->max_msg = peer->max_msg < p->max_msg ? peer->max_msg : p->max_msg;
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_RTR,
        .path_mtu = peer->mtu < (uint8_t)p->mtu ? (enum ibv_mtu)peer->mtu : p->mtu,
        .dest_qp_num = peer->qpn,
        .rq_psn = peer->psn,
        .max_dest_rd_atomic = 1,
        .min_rnr_timer = 12,
        .ah_attr = {.dlid = peer->lid, .sl = (uint8_t)ctx->cfg.sl, .port_num = (uint8_t)p->port},
    };
    if (p->link_eth || peer->lid == 0) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)p->gid_index;
        a.ah_attr.grh.hop_limit = 64;
        a.ah_attr.grh.traffic_class = (uint8_t)ctx->cfg.tc;
    }
    int rc = ibv_modify_qp(c->qp, &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0)
        return HOOP_ERROR(HOOP_ERR_REMOTE,
                          "ib: QP to RTR towards rank %d failed on %s port %d (GID %s index %d "
                          "-> %s): %s; check HOOP_IB_GID_INDEX and that both ends use the same "
                          "fabric",
                          c->base.peer, p->dev, p->port, gid_text(&p->gid, g1, sizeof(g1)),
                          p->gid_index, gid_text(&c->peer_gid, g2, sizeof(g2)), hoop__strerror(rc));
    struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS,
                            .timeout = (uint8_t)ctx->cfg.timeout,
                            .retry_cnt = (uint8_t)ctx->cfg.retry_cnt,
                            .rnr_retry = 7,
                            .sq_psn = mine->psn,
                            .max_rd_atomic = 1};
    rc = ibv_modify_qp(c->qp, &s,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0)
        return HOOP_ERROR(HOOP_ERR_REMOTE, "ib: QP to RTS towards rank %d on %s: %s", c->base.peer,
                          p->dev, hoop__strerror(rc));
    if (c->kind == IK_SEND) {
        c->remote_slots = peer->ring_addr;
        c->remote_rkey = peer->ring_rkey;
    } else {
        c->remote_ring = peer->ring_addr;
        c->remote_ring_rkey = peer->ring_rkey;
    }
    return HOOP_OK;
}

static hoop_status post_recvs(struct ib_comm *c, int n)
{
    for (int i = 0; i < n; i++) {
        struct ibv_recv_wr wr = {.wr_id = 0, .num_sge = 0}, *bad;
        int rc = ibv_post_recv(c->qp, &wr, &bad);
        if (rc != 0) return comm_fail(c, HOOP_ERR_IB, "ibv_post_recv: %s", hoop__strerror(rc));
    }
    return HOOP_OK;
}

// ----------------------------------------------------------------- listen / accept

static hoop_status ib_listen(void *tctx, void *handle, struct hoop_tp_comm **out)
{
    struct ib_ctx *ctx = tctx;
    struct ib_comm *c;
    hoop_sockaddr a = ctx->addr;
    socklen_t len = sizeof(a);
    HOOP_CHECK(comm_new(ctx, IK_LISTEN, -1, -1, &c));
    c->sock = socket(a.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->sock < 0 || bind(c->sock, &a.sa, hoop__sock_len(&a)) != 0 || listen(c->sock, 256) != 0 ||
        getsockname(c->sock, &a.sa, &len) != 0) {
        int e = errno;
        char ip[HOOP_SOCK_ADDR_STRLEN];
        ib_close(&c->base);
        char hint[160];
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "ib: listen on %s: %s%s",
                          hoop__sock_addr_str(&ctx->addr, ip), hoop__strerror(e),
                          hoop__fd_hint(e, hint, sizeof(hint)));
    }
    struct ib_handle h = {.magic = IB_MAGIC,
                          .rank = ctx->rank,
                          .link_eth = (uint8_t)ctx->p.link_eth,
                          .subnet_prefix = ctx->p.gid.global.subnet_prefix};
    hoop__sock_to_wire(&a, &h.addr);
    memset(handle, 0, HOOP_TP_HANDLE_MAX);
    memcpy(handle, &h, sizeof(h));
    char ip[HOOP_SOCK_ADDR_STRLEN];
    HOOP_DEBUGF(IB, "ib: rank %d's set-up socket listening on %s", ctx->rank,
                hoop__sock_addr_str(&a, ip));
    *out = &c->base;
    return HOOP_OK;
}

/* Moves up to n - *off bytes; returns 1 done, 0 not yet, -1 the peer is gone. */
static int sock_io(int fd, void *buf, size_t n, size_t *off, int send_it)
{
    while (*off < n) {
        ssize_t k = send_it ? send(fd, (char *)buf + *off, n - *off, MSG_DONTWAIT | MSG_NOSIGNAL)
                            : recv(fd, (char *)buf + *off, n - *off, MSG_DONTWAIT);
        if (k == 0 && !send_it) return -1;
        if (k < 0) return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1;
        *off += (size_t)k;
    }
    return 1;
}

/* An accepted peer's hello: check it, build the recv comm, reply. *drop = 1 when the
 * socket is done with (refused or failed); the recv comm waits in p->c for "ready". */
static hoop_status judge(struct ib_comm *l, struct ib_pend *p, int *drop)
{
    const char *why = NULL;
    struct ib_hello *h = &p->hello;
    *drop = 0;
    int r = sock_io(p->fd, h, sizeof(*h), &p->off, 0);
    if (r == 0) return HOOP_OK;
    if (r < 0)
        why = "not a hoop ib hello";
    else
        hoop__ib_hello_check(h, sizeof(*h), l->ctx->token, &why);
    struct ib_reply rep = {.magic = IB_MAGIC, .verdict = 0};
    struct ib_comm *c = NULL;
    if (!why) {
        hoop_status st = comm_new(l->ctx, IK_RECV, h->rank, h->channel, &c);
        if (st == HOOP_OK) st = qp_create(c);
        if (st == HOOP_OK) qp_info(c, &rep.qp);
        if (st == HOOP_OK) st = qp_connect(c, &rep.qp, &h->qp);
        if (st == HOOP_OK) st = post_recvs(c, IB_RECV_RQ);
        if (st != HOOP_OK) why = hoop_last_error();
        rep.verdict = why ? 0 : 1;
    }
    size_t off = 0;
    /* The reply is small and the socket fresh: it goes out whole or the peer is gone. */
    if (sock_io(p->fd, &rep, sizeof(rep), &off, 1) != 1 && !why) why = "the peer left";
    if (why) {
        HOOP_WARN("ib transport: refused a connection from rank %d (%s)", r > 0 ? h->rank : -1,
                  why);
        if (c) ib_close(&c->base);
        close(p->fd);
        *drop = 1;
        return HOOP_OK;
    }
    c->sock = p->fd;
    p->c = c;
    p->state = 1;
    p->off = 0;
    return HOOP_OK;
}

static hoop_status ib_accept(struct hoop_tp_comm *lc, struct hoop_tp_comm **out)
{
    struct ib_comm *l = HOOP_CONTAINER_OF(lc, struct ib_comm, base);
    *out = NULL;
    for (;;) {
        int fd;
        HOOP_CHECK(hoop__sock_accept(l->sock, l->ctx->rank, "ib", &fd));
        if (fd < 0) break;
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (l->npend == l->cappend) {
            int cap = l->cappend ? 2 * l->cappend : 16;
            struct ib_pend *np = realloc(l->pend, (size_t)cap * sizeof(*np));
            if (!np) {
                close(fd);
                return HOOP_ERROR(HOOP_ERR_NOMEM, "ib transport: out of memory in accept");
            }
            l->pend = np;
            l->cappend = cap;
        }
        l->pend[l->npend++] = (struct ib_pend){.fd = fd};
    }
    for (int i = 0; i < l->npend; i++) {
        struct ib_pend *p = &l->pend[i];
        int drop = 0;
        if (p->state == 0) HOOP_CHECK(judge(l, p, &drop));
        if (!drop && p->state == 1) {
            char ok = 0;
            size_t off = 0;
            int r = sock_io(p->fd, &ok, 1, &off, 0);
            if (r == 0) continue;
            if (r < 0 || ok != 1) {
                HOOP_WARN("ib transport: rank %d left during the connection set-up",
                          p->c->base.peer);
                ib_close(&p->c->base); /* closes the socket too */
                drop = 1;
            } else {
                struct ib_comm *c = p->c;
                l->pend[i] = l->pend[--l->npend];
                *out = &c->base;
                return HOOP_OK;
            }
        }
        if (drop) l->pend[i--] = l->pend[--l->npend];
    }
    return HOOP_OK;
}

// ----------------------------------------------------------------- connect

/* A failed socket() for c's connection (errno), naming the descriptor limit on EMFILE. */
static hoop_status sock_error(const struct ib_comm *c)
{
    int err = errno;
    char hint[160];
    return HOOP_ERROR(HOOP_ERR_SYSTEM, "rank %d: ib cannot open a socket to rank %d: %s%s",
                      c->ctx->rank, c->base.peer, hoop__strerror(err),
                      hoop__fd_hint(err, hint, sizeof(hint)));
}

static hoop_status conn_step(struct ib_comm *c, int *done)
{
    *done = 0;
    if (c->state == IC_START) {
        if (connect(c->sock, &c->raddr.sa, hoop__sock_len(&c->raddr)) != 0 &&
            errno != EINPROGRESS) {
            if (errno == ECONNREFUSED) { /* not listening yet: a fresh socket next time */
                close(c->sock);
                c->sock =
                    socket(c->raddr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (c->sock < 0) return sock_error(c);
                return HOOP_OK;
            }
            return HOOP_ERROR(HOOP_ERR_REMOTE, "ib: connect to rank %d: %s", c->base.peer,
                              hoop__strerror(errno));
        }
        c->state = IC_CONNECTING;
    }
    if (c->state == IC_CONNECTING) {
        struct pollfd pf = {.fd = c->sock, .events = POLLOUT};
        if (poll(&pf, 1, 0) == 0) return HOOP_OK;
        int err = 0;
        socklen_t el = sizeof(err);
        (void)getsockopt(c->sock, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err == ECONNREFUSED) {
            close(c->sock);
            c->sock = socket(c->raddr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            c->state = IC_START;
            return c->sock < 0 ? sock_error(c) : HOOP_OK;
        }
        if (err != 0)
            return HOOP_ERROR(HOOP_ERR_REMOTE, "ib: connect to rank %d: %s", c->base.peer,
                              hoop__strerror(err));
        int one = 1;
        (void)setsockopt(c->sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c->state = IC_HELLO;
        c->off = 0;
    }
    if (c->state == IC_HELLO) {
        int r = sock_io(c->sock, &c->hello, sizeof(c->hello), &c->off, 1);
        if (r < 0)
            return HOOP_ERROR(HOOP_ERR_REMOTE, "ib: rank %d closed during the hello", c->base.peer);
        if (r == 0) return HOOP_OK;
        c->state = IC_REPLY;
        c->off = 0;
    }
    if (c->state == IC_REPLY) {
        int r = sock_io(c->sock, &c->reply, sizeof(c->reply), &c->off, 0);
        if (r < 0) /* a refusal is a reply (verdict 0): the peer went away before it */
            return HOOP_ERROR(HOOP_ERR_REMOTE,
                              "ib: rank %d exited (or closed its end) during the connection "
                              "handshake",
                              c->base.peer);
        if (r == 0) return HOOP_OK;
        if (!hoop__ib_reply_check(&c->reply, sizeof(c->reply)))
            return HOOP_ERROR(HOOP_ERR_REMOTE,
                              "ib: rank %d refused the connection (wrong HOOP_TOKEN, or its "
                              "QP set-up failed: see its log)",
                              c->base.peer);
        HOOP_CHECK(qp_connect(c, &c->hello.qp, &c->reply.qp));
        HOOP_CHECK(post_recvs(c, IB_SEND_RQ));
        c->state = IC_READY;
        c->off = 0;
    }
    char ok = 1;
    int r = sock_io(c->sock, &ok, 1, &c->off, 1);
    if (r < 0)
        return HOOP_ERROR(HOOP_ERR_REMOTE, "ib: rank %d closed during the set-up", c->base.peer);
    if (r == 0) return HOOP_OK;
    c->state = IC_DONE;
    *done = 1;
    return HOOP_OK;
}

static void unlink_connecting(struct ib_ctx *ctx, struct ib_comm *c)
{
    for (struct ib_comm **p = &ctx->connecting; *p; p = &(*p)->next_connecting)
        if (*p == c) {
            *p = c->next_connecting;
            return;
        }
}

static hoop_status ib_connect(void *tctx, void *handle, int channel, struct hoop_tp_comm **out)
{
    struct ib_ctx *ctx = tctx;
    struct ib_handle *h = handle;
    struct ib_comm *c = h->pending;
    hoop_status st;
    *out = NULL;
    if (!c) {
        if (h->magic != IB_MAGIC)
            return HOOP_ERROR(HOOP_ERR_INVALID, "ib: rank %d published no ib endpoint", h->rank);
        hoop_sockaddr peer;
        char who[32];
        snprintf(who, sizeof(who), "ib: rank %d", h->rank);
        HOOP_CHECK(hoop__sock_from_wire(&h->addr, who, &peer));
        HOOP_CHECK(comm_new(ctx, IK_SEND, h->rank, channel, &c));
        c->next_connecting = ctx->connecting;
        ctx->connecting = c;
        h->pending = c;
        c->raddr = hoop__sock_dial_addr(&peer, &ctx->addr);
        c->sock = socket(c->raddr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->sock < 0) {
            st = sock_error(c);
            goto fail;
        }
        HOOP_CHECK_GOTO(qp_create(c), st, fail);
        c->hello = (struct ib_hello){
            .magic = IB_MAGIC, .version = IB_VERSION, .rank = ctx->rank, .channel = channel};
        memcpy(c->hello.token, ctx->token, sizeof(c->hello.token));
        qp_info(c, &c->hello.qp);
    }
    int done;
    HOOP_CHECK_GOTO(conn_step(c, &done), st, fail);
    if (!done) return HOOP_OK;
    unlink_connecting(ctx, c);
    h->pending = NULL;
    *out = &c->base;
    return HOOP_OK;
fail:
    h->pending = NULL;
    ib_close(&c->base); /* also unlinks it */
    return st;
}

// ----------------------------------------------------------------- data path

static hoop_status wc_failed(struct ib_comm *c, const struct ibv_wc *wc)
{
    char msg[300], g1[64], g2[64];
    if (c->failed != HOOP_OK) return HOOP_ERROR(c->failed, "%s", c->why); /* first error only */
    hoop__ib_wc_message((int)wc->status, c->base.peer, msg, sizeof(msg));
    /* The vendor's syndrome is what a ConnectX failure is looked up by. */
    return comm_fail(c, HOOP_ERR_REMOTE, "%s (%s port %d, QP %u, GID %s -> %s, vendor error 0x%x)",
                     msg, c->ctx->p.dev, c->ctx->p.port, wc->qp_num,
                     gid_text(&c->ctx->p.gid, g1, sizeof(g1)),
                     gid_text(&c->peer_gid, g2, sizeof(g2)), wc->vendor_err);
}

/* Posts one send work request; signalled every IB_SIGNAL_EVERY-th or when asked. */
static hoop_status post_write(struct ib_comm *c, const void *src, size_t n, uint32_t lkey,
                              uint64_t raddr, uint32_t rkey, int with_imm, uint32_t imm, int signal,
                              uint64_t *index)
{
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)src, .length = (uint32_t)n, .lkey = lkey};
    struct ibv_send_wr wr = {
        .wr_id = c->sq_posted,
        .sg_list = &sge,
        .num_sge = n ? 1 : 0,
        .opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
        .imm_data = htonl(imm),
        .wr.rdma = {.remote_addr = raddr, .rkey = rkey},
    };
    if (++c->unsignalled >= IB_SIGNAL_EVERY) signal = 1;
    if (signal) {
        wr.send_flags |= IBV_SEND_SIGNALED;
        c->unsignalled = 0;
    }
    if (n && n <= c->max_inline) wr.send_flags |= IBV_SEND_INLINE;
    struct ibv_send_wr *bad;
    int rc = ibv_post_send(c->qp, &wr, &bad);
    if (rc != 0) return comm_fail(c, HOOP_ERR_IB, "ibv_post_send: %s", hoop__strerror(rc));
    if (index) *index = c->sq_posted;
    c->sq_posted++;
    return HOOP_OK;
}

static int sq_room(const struct ib_comm *c, uint64_t n)
{
    return c->sq_posted - c->sq_done + n <= IB_SQ_DEPTH - 1;
}

/* Receiver: tells the sender about freed slots once half of them are waiting. */
static hoop_status return_credits(struct ib_comm *c, int force)
{
    if (!hoop__ib_credits_due(c->freed, c->freed_told, IB_SLOTS, force) || !sq_room(c, 1))
        return HOOP_OK;
    HOOP_CHECK(post_write(c, NULL, 0, 0, c->remote_ring, c->remote_ring_rkey, 1,
                          IMM(IMM_CREDIT, c->freed), 0, NULL));
    c->freed_told = c->freed;
    return HOOP_OK;
}

static void release(struct ib_comm *c, struct ib_req *r)
{
    if (r->entry) hoop__regcache_put(c->ctx->cache, r->entry);
    r->entry = NULL;
    hoop__req_put(&c->pool, r);
}

/* Handles one completion. */
static hoop_status on_wc(struct ib_comm *c, const struct ibv_wc *wc)
{
    if (wc->status != IBV_WC_SUCCESS) return wc_failed(c, wc);
    if (!(wc->opcode & IBV_WC_RECV)) { /* a signalled send: it and those before it are done */
        if (wc->wr_id + 1 > c->sq_done) c->sq_done = wc->wr_id + 1;
        return HOOP_OK;
    }
    uint32_t imm = ntohl(wc->imm_data);
    HOOP_CHECK(post_recvs(c, 1));
    switch (IMM_KIND(imm)) {
    case IMM_EAGER: /* receiver: one slot's worth arrived */
    case IMM_RNDV:  /* receiver: a granted write is complete */
        if (c->kind != IK_RECV) break;
        uint32_t want = IMM_KIND(imm) == IMM_EAGER ? (uint32_t)(c->eager_in & 0x3fffffffu)
                                                   : (c->writes_in & 0x3fffffffu);
        if (IMM_NUM(imm) != want)
            return comm_fail(c, HOOP_ERR_INTERNAL, "%s %u arrived where %u was due",
                             IMM_KIND(imm) == IMM_EAGER ? "eager write" : "rendezvous",
                             IMM_NUM(imm), want);
        if (IMM_KIND(imm) == IMM_EAGER)
            c->slot_len[c->eager_in++ % IB_SLOTS] = wc->byte_len;
        else
            c->writes_in++;
        return HOOP_OK;
    case IMM_GRANT: {
        if (c->kind != IK_SEND) break;
        struct ib_grant *g = (struct ib_grant *)grant_ring(c) + (IMM_NUM(imm) % IB_GRANTS);
        c->got[IMM_NUM(imm) % IB_GRANTS] = *g;
        c->grants_in++;
        if (hoop__ib_credits_merge(&c->cr, g->freed, 64) != 0)
            return comm_fail(c, HOOP_ERR_INTERNAL,
                             "rank %d's grant says %llu slots freed, only %llu were written",
                             c->base.peer, (unsigned long long)g->freed,
                             (unsigned long long)c->cr.used);
        return HOOP_OK;
    }
    case IMM_CREDIT: {
        if (c->kind != IK_SEND) break;
        if (hoop__ib_credits_merge(&c->cr, IMM_NUM(imm), 30) != 0)
            return comm_fail(c, HOOP_ERR_INTERNAL,
                             "rank %d's credit (%u mod 2^30 slots freed) is ahead of the %llu "
                             "written",
                             c->base.peer, IMM_NUM(imm), (unsigned long long)c->cr.used);
        return HOOP_OK;
    }
    }
    return comm_fail(c, HOOP_ERR_INTERNAL, "unexpected immediate 0x%08x on a %s comm", imm,
                     c->kind == IK_SEND ? "send" : "recv");
}

static hoop_status poll_cq(struct ib_comm *c, int *got)
{
    struct ibv_wc wc[IB_POLL_BATCH];
    int n;
    *got = 0;
    while ((n = ibv_poll_cq(c->cq, IB_POLL_BATCH, wc)) > 0) {
        *got += n;
        for (int i = 0; i < n; i++) {
            hoop_status st = on_wc(c, &wc[i]);
            if (st != HOOP_OK && c->failed != HOOP_OK) {
                /* keep draining: the flush errors behind the first are not reported */
                continue;
            }
        }
    }
    if (n < 0) return comm_fail(c, HOOP_ERR_IB, "ibv_poll_cq failed");
    return c->failed == HOOP_OK ? HOOP_OK : HOOP_ERROR(c->failed, "%s", c->why);
}

/* Sender: moves the queue's head requests out, in order, as far as credits, grants and
 * the send queue allow. */
static hoop_status send_progress(struct ib_comm *c)
{
    for (struct ib_req *r = c->qhead; r; r = r->next) {
        if (r->posted) continue;
        if (!r->rndv) { /* eager: one slot */
            if (!hoop__ib_credits_free(&c->cr) || !sq_room(c, 1)) return HOOP_OK;
            uint64_t k = c->cr.used;
            const void *src = r->buf;
            uint32_t lkey = 0;
            if (r->bytes > c->max_inline) {
                memcpy(bounce(c, k), r->buf, r->bytes);
                src = bounce(c, k);
                lkey = c->mr->lkey;
            }
            HOOP_CHECK(post_write(c, src, r->bytes, lkey,
                                  c->remote_slots + (k % IB_SLOTS) * IB_SLOT_BYTES, c->remote_rkey,
                                  1, IMM(IMM_EAGER, k), 0, NULL));
            c->cr.used++;
            r->posted = r->done = 1;
            continue;
        }
        /* rendezvous: its grant first */
        if (c->grants_in <= r->grant) return HOOP_OK;
        struct ib_grant *g = &c->got[r->grant % IB_GRANTS];
        if (g->seq != r->grant || g->bytes != r->bytes)
            return comm_fail(c, HOOP_ERR_INTERNAL,
                             "rank %d granted rendezvous %u of %llu bytes, this rank sends "
                             "rendezvous %u of %zu bytes",
                             c->base.peer, g->seq, (unsigned long long)g->bytes, r->grant,
                             r->bytes);
        if (g->mode == GRANT_STREAM) { /* through the slots, piece by piece */
            while (r->done_bytes < r->bytes) {
                if (!hoop__ib_credits_free(&c->cr) || !sq_room(c, 1)) return HOOP_OK;
                size_t n = r->bytes - r->done_bytes;
                if (n > IB_SLOT_BYTES) n = IB_SLOT_BYTES;
                uint64_t k = c->cr.used;
                int last = r->done_bytes + n == r->bytes;
                HOOP_CHECK(post_write(c, r->buf + r->done_bytes, n, r->lkey,
                                      c->remote_slots + (k % IB_SLOTS) * IB_SLOT_BYTES,
                                      c->remote_rkey, 1, IMM(IMM_EAGER, k), last, &r->sq_last));
                c->cr.used++;
                r->done_bytes += n;
            }
            r->posted = 1;
            continue;
        }
        /* pieces of at most max_msg, as many as the send queue takes now (a port with a
         * small max message size may need more pieces than the queue holds) */
        while (r->done_bytes < r->bytes) {
            if (!sq_room(c, 1)) return HOOP_OK;
            size_t at = r->done_bytes, n = r->bytes - at;
            if (n > c->max_msg) n = c->max_msg;
            int last = at + n == r->bytes;
            HOOP_CHECK(post_write(c, r->buf + at, n, r->lkey, g->addr + at, g->rkey, last,
                                  IMM(IMM_RNDV, c->next_write), last, &r->sq_last));
            r->done_bytes += n;
        }
        c->next_write++;
        r->posted = 1;
    }
    return HOOP_OK;
}

/* Receiver: grants for the queued rendezvous receives, in order, as far as the grant
 * ring and the send queue allow. */
static hoop_status grant_progress(struct ib_comm *c)
{
    for (struct ib_req *r = c->qhead; r; r = r->next) {
        if (!r->rndv || r->granted) continue;
        if (c->grants_out - c->grants_retired >= IB_GRANTS || !sq_room(c, 1)) return HOOP_OK;
        uint32_t g = c->grants_out;
        struct ib_grant *out = grant_out(c, g);
        *out = (struct ib_grant){.addr = r->stream ? 0 : (uint64_t)(uintptr_t)r->buf,
                                 .bytes = r->bytes,
                                 .freed = c->freed,
                                 .rkey = r->rkey,
                                 .seq = g,
                                 .mode = r->stream ? GRANT_STREAM : GRANT_WRITE};
        HOOP_CHECK(post_write(c, out, sizeof(*out), c->mr->lkey,
                              c->remote_ring + (uint64_t)(g % IB_GRANTS) * sizeof(*out),
                              c->remote_ring_rkey, 1, IMM(IMM_GRANT, g), 0, NULL));
        c->freed_told = c->freed;
        c->grants_out++;
        r->granted = 1;
    }
    return HOOP_OK;
}

/* Receiver: completes the queue's head requests whose bytes are here, in order. */
static hoop_status recv_progress(struct ib_comm *c)
{
    struct ib_req *r;
    while ((r = c->qhead)) {
        if (!r->rndv || r->stream) { /* bytes in the slots from r->eager on */
            while (r->done_bytes < r->bytes) {
                uint64_t k = r->eager + r->done_bytes / IB_SLOT_BYTES;
                if (c->eager_in <= k) break;
                size_t n = r->bytes - r->done_bytes;
                if (n > IB_SLOT_BYTES) n = IB_SLOT_BYTES;
                if (c->slot_len[k % IB_SLOTS] != n && !r->len_bad) /* told by test */
                    r->len_bad = 1, r->len_got = c->slot_len[k % IB_SLOTS], r->len_want = n;
                if (r->fn)
                    r->fn(r->arg, slot(c, k), r->done_bytes, n);
                else
                    memcpy(r->buf + r->done_bytes, slot(c, k), n);
                r->done_bytes += n;
                c->freed++;
            }
            if (r->done_bytes < r->bytes) break;
        } else if (c->writes_in <= r->write) {
            break;
        }
        if (r->rndv) c->grants_retired++; /* its ring entry may be written again */
        r->done = 1;
        if (!(c->qhead = r->next)) c->qtail = NULL;
    }
    return return_credits(c, 0);
}

/* The kick fd makes a sleep end at once (see pollfds); the next pass drains it. */
static void kick(struct ib_ctx *ctx)
{
    uint64_t one = 1;
    if (!ctx->kicked && write(ctx->kick_fd, &one, sizeof(one)) == (ssize_t)sizeof(one))
        ctx->kicked = 1;
}

static void unkick(struct ib_ctx *ctx)
{
    uint64_t v;
    if (ctx->kicked && read(ctx->kick_fd, &v, sizeof(v)) >= 0) ctx->kicked = 0;
}

/* EOF on the set-up socket: the peer closed its end or exited. */
static void check_peer(struct ib_comm *c)
{
    int64_t now = hoop__now_ns();
    if (c->peer_gone || now - c->eof_checked_ns < IB_EOF_CHECK_NS) return;
    c->eof_checked_ns = now;
    char b;
    ssize_t n = recv(c->sock, &b, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        c->peer_gone = 1;
}

/* One pass: completions in, then whatever can go out. */
static hoop_status comm_progress(struct ib_comm *c)
{
    int got;
    if (c->failed != HOOP_OK) return HOOP_ERROR(c->failed, "%s", c->why);
    unkick(c->ctx);
    check_async(c->ctx);
    if (c->ctx->dead != HOOP_OK) return comm_fail(c, c->ctx->dead, "%s", c->ctx->dead_why);
    HOOP_CHECK(poll_cq(c, &got));
    if (c->kind == IK_SEND) {
        HOOP_CHECK(send_progress(c));
        while (c->qhead && c->qhead->posted) /* posted requests leave the queue */
            if (!(c->qhead = c->qhead->next)) c->qtail = NULL;
    } else {
        HOOP_CHECK(recv_progress(c));
        HOOP_CHECK(grant_progress(c));
    }
    if (!got) check_peer(c);
    return HOOP_OK;
}

static void enqueue(struct ib_comm *c, struct ib_req *r)
{
    r->next = NULL;
    if (c->qtail)
        c->qtail->next = r;
    else
        c->qhead = r;
    c->qtail = r;
}

static hoop_status new_req(struct ib_comm *c, void *buf, size_t bytes, struct ib_req **out)
{
    struct ib_req *r = NULL;
    *out = NULL;
    if (c->failed != HOOP_OK) return HOOP_ERROR(c->failed, "%s", c->why);
    HOOP_CHECK(hoop__req_get(&c->pool, (void **)&r));
    r->comm = c;
    r->buf = buf;
    r->bytes = bytes;
    r->done = bytes == 0;
    r->posted = bytes == 0;
    *out = r;
    return HOOP_OK;
}

static hoop_status ib_isend(struct hoop_tp_comm *tc, const void *buf, size_t bytes, void *mr,
                            void **req)
{
    struct ib_comm *c = HOOP_CONTAINER_OF(tc, struct ib_comm, base);
    struct ib_req *r;
    *req = NULL;
    if (c->kind != IK_SEND) return HOOP_INTERNAL_ERROR("ib isend on a non-send comm");
    HOOP_CHECK(new_req(c, (void *)buf, bytes, &r));
    if (bytes > IB_SLOT_BYTES) {
        r->rndv = 1;
        r->grant = c->next_grant++;
        hoop_status st = keys_for(c, r, mr);
        if (st != HOOP_OK) {
            c->next_grant--;
            release(c, r);
            return st;
        }
    }
    if (bytes) enqueue(c, r);
    *req = r;
    (void)comm_progress(c); /* small messages leave at once; a failure shows in test */
    return HOOP_OK;
}

static hoop_status post_recv_req(struct ib_comm *c, void *buf, size_t bytes, void *mr,
                                 hoop_tp_consume_fn fn, void *arg, void **req)
{
    struct ib_req *r;
    *req = NULL;
    HOOP_CHECK(new_req(c, buf, bytes, &r));
    r->fn = fn;
    r->arg = arg;
    if (bytes > IB_SLOT_BYTES) {
        r->rndv = 1;
        r->stream = fn != NULL;
        r->grant = c->next_grant++;
        if (!fn) r->write = c->next_write++;
        if (!fn) {
            hoop_status st = keys_for(c, r, mr);
            if (st != HOOP_OK) {
                c->next_grant--;
                c->next_write--;
                release(c, r);
                return st;
            }
        }
    }
    if (bytes && (!r->rndv || r->stream)) {
        r->eager = c->next_eager;
        c->next_eager += (bytes + IB_SLOT_BYTES - 1) / IB_SLOT_BYTES;
    }
    if (bytes) enqueue(c, r);
    *req = r;
    if (r->rndv) (void)grant_progress(c); /* the grant leaves at once */
    return HOOP_OK;
}

static hoop_status ib_irecv(struct hoop_tp_comm *tc, void *buf, size_t bytes, void *mr, void **req)
{
    struct ib_comm *c = HOOP_CONTAINER_OF(tc, struct ib_comm, base);
    if (c->kind != IK_RECV) return HOOP_INTERNAL_ERROR("ib irecv on a non-recv comm");
    return post_recv_req(c, buf, bytes, mr, NULL, NULL, req);
}

static hoop_status ib_irecv_fn(struct hoop_tp_comm *tc, size_t bytes, size_t unit,
                               hoop_tp_consume_fn fn, void *arg, void **req)
{
    struct ib_comm *c = HOOP_CONTAINER_OF(tc, struct ib_comm, base);
    if (c->kind != IK_RECV) return HOOP_INTERNAL_ERROR("ib irecv_fn on a non-recv comm");
    if (!fn || unit == 0 || unit > 8 || (8 % unit) || bytes % unit)
        return HOOP_INTERNAL_ERROR("ib irecv_fn: bad consumer (unit %zu, bytes %zu)", unit, bytes);
    return post_recv_req(c, NULL, bytes, NULL, fn, arg, req);
}

static int req_done(const struct ib_comm *c, const struct ib_req *r)
{
    if (c->kind == IK_SEND && r->rndv) return r->posted && c->sq_done > r->sq_last;
    return r->done;
}

/* A receive whose slot write had another length than it expected (recv_progress) is
 * told once, as tcp and shm tell a wrong frame word (frame.h): HOOP_ERR_INTERNAL naming
 * the peer and both lengths, bad_req set, the request left live (it goes on as posted:
 * the slot's bytes up to the posted length are taken). An eager message is one slot, so
 * its write's length is the message's; a streamed one's pieces are slot-sized. */
static hoop_status len_error(struct ib_comm *c, struct ib_req *r)
{
    r->len_bad = 2;
    c->base.bad_req = r;
    if (!r->rndv)
        return HOOP_ERROR(HOOP_ERR_INTERNAL,
                          "ib link from rank %d: the message that arrived is %u bytes but the "
                          "receive posted for it is %zu bytes: the two ranks' schedules "
                          "disagree on its size",
                          c->base.peer, r->len_got, r->bytes);
    return HOOP_ERROR(HOOP_ERR_INTERNAL,
                      "ib link from rank %d: a piece of %u bytes arrived where the receive "
                      "of %zu bytes expected %zu: the stream is out of step",
                      c->base.peer, r->len_got, r->bytes, r->len_want);
}

static hoop_status ib_test(void *req, int *done, size_t *bytes)
{
    struct ib_req *r = req;
    struct ib_comm *c = r->comm;
    *done = 0;
    if (!req_done(c, r)) {
        /* The peer's EOF counts once a pass after it has found nothing more for this
         * request: bytes that arrived before the EOF are delivered first. */
        int gone_before = c->peer_gone;
        hoop_status st = comm_progress(c);
        /* A send already on the wire may see the EOF before its ACK (the socket and the
         * fabric are two paths): it gets IB_GONE_GRACE_NS to complete. */
        int in_flight = c->kind == IK_SEND && r->posted;
        if (in_flight && gone_before && !c->gone_ns) c->gone_ns = hoop__now_ns();
        if (in_flight && gone_before && hoop__now_ns() - c->gone_ns < IB_GONE_GRACE_NS)
            gone_before = 0;
        if (st == HOOP_OK && gone_before && !req_done(c, r))
            st = comm_fail(c, HOOP_ERR_REMOTE, "rank %d closed its end or exited", c->base.peer);
        if (st != HOOP_OK) {
            /* A failed request is released as a finished one is; take it off the queue
             * first (a failed comm never walks the queue again, but close does). */
            struct ib_req **p = &c->qhead, *prev = NULL;
            while (*p && *p != r) prev = *p, p = &(*p)->next;
            if (*p) {
                *p = r->next;
                if (c->qtail == r) c->qtail = prev;
            }
            release(c, r);
            return st;
        }
    }
    if (r->len_bad == 1) return len_error(c, r);
    if (!req_done(c, r)) return HOOP_OK;
    if (bytes) *bytes = r->bytes;
    *done = 1;
    release(c, r);
    return HOOP_OK;
}

/* Called before the caller sleeps: arms the CQ's channel and offers its fd (and the
 * socket, whose EOF means the peer died). Completions that came before the arm raise no
 * event, so the CQ is polled once more and the context's kick fd rung when it had any. */
static int ib_pollfds(struct hoop_tp_comm *tc, struct pollfd *fds, int cap)
{
    struct ib_comm *c = HOOP_CONTAINER_OF(tc, struct ib_comm, base);
    int n = 0;
    if (cap < 1) return 0;
    if (c->kind == IK_LISTEN) {
        fds[n++] = (struct pollfd){.fd = c->sock, .events = POLLIN};
        for (int i = 0; i < c->npend && n < cap; i++)
            fds[n++] = (struct pollfd){.fd = c->pend[i].fd, .events = POLLIN};
        return n;
    }
    if (c->failed != HOOP_OK || !c->cq || cap < 3) {
        fds[0] = (struct pollfd){.fd = c->sock, .events = c->peer_gone ? 0 : POLLIN};
        return 1;
    }
    struct ibv_cq *ev_cq;
    void *ev_ctx;
    int events = 0;
    while (ibv_get_cq_event(c->ch, &ev_cq, &ev_ctx) == 0) events++;
    if (events) ibv_ack_cq_events(c->cq, (unsigned)events);
    if (ibv_req_notify_cq(c->cq, 0) == 0) {
        int got = 0;
        (void)poll_cq(c, &got);
        if (got) kick(c->ctx);
    } else {
        kick(c->ctx); /* cannot arm: do not sleep on it */
    }
    /* The peer was found gone (check_peer): the next test fails what waits on it, so
     * the caller must not sleep before it (the socket, at EOF, is no longer watched).
     * A send on the wire waits for its ACK through the CQ's channel instead. */
    if (c->peer_gone && c->qhead && !(c->kind == IK_SEND && c->gone_ns)) kick(c->ctx);
    fds[n++] = (struct pollfd){.fd = c->ch->fd, .events = POLLIN};
    fds[n++] = (struct pollfd){.fd = c->ctx->kick_fd, .events = POLLIN};
    fds[n++] = (struct pollfd){.fd = c->sock, .events = c->peer_gone ? 0 : POLLIN};
    return n;
}

/* Destroys the QP and frees the link's memory; a graceful close (drain = 1) first lets
 * the sends already posted leave (the last bytes must not be dropped), for at most
 * IB_CLOSE_DRAIN_NS and only while the peer's socket is open. */
static hoop_status close_comm(struct hoop_tp_comm *tc, int drain)
{
    if (!tc) return HOOP_OK;
    struct ib_comm *c = HOOP_CONTAINER_OF(tc, struct ib_comm, base);
    if (c->kind == IK_SEND && c->state != IC_DONE) unlink_connecting(c->ctx, c);
    if (drain && c->sock >= 0 && c->qp) {
        c->eof_checked_ns = 0;
        check_peer(c);
    }
    if (drain && c->qp && c->kind == IK_SEND && c->state == IC_DONE && c->failed == HOOP_OK &&
        !c->peer_gone && c->sq_posted > c->sq_done) {
        uint64_t last;
        int64_t until = hoop__now_ns() + IB_CLOSE_DRAIN_NS;
        if (post_write(c, NULL, 0, 0, c->remote_slots, c->remote_rkey, 0, 0, 1, &last) == HOOP_OK) {
            int got;
            /* A peer that has closed its end (its QP may be gone: our write would retry
             * for half a minute) has no use for the bytes. */
            while (c->sq_done <= last && c->failed == HOOP_OK && !c->peer_gone &&
                   hoop__now_ns() < until) {
                (void)poll_cq(c, &got);
                if (!got) check_peer(c);
            }
        }
    }
    /* The QP first: its registrations (the cache entries below) may go once nothing the
     * device still holds can reach them. */
    if (c->qp) ibv_destroy_qp(c->qp);
    for (hoop__req_link *l = c->pool.live; l; l = l->next) {
        struct ib_req *r = (struct ib_req *)l;
        if (r->entry) hoop__regcache_put(c->ctx->cache, r->entry), r->entry = NULL;
    }
    hoop__req_pool_fini(&c->pool);
    if (c->cq) {
        struct ibv_cq *ev_cq;
        void *ev_ctx;
        int events = 0;
        while (c->ch && ibv_get_cq_event(c->ch, &ev_cq, &ev_ctx) == 0) events++;
        if (events) ibv_ack_cq_events(c->cq, (unsigned)events);
        ibv_destroy_cq(c->cq);
    }
    if (c->ch) ibv_destroy_comp_channel(c->ch);
    if (c->mr) ibv_dereg_mr(c->mr);
    free(c->mem);
    for (int i = 0; i < c->npend; i++) {
        if (c->pend[i].c)
            ib_close(&c->pend[i].c->base); /* closes its socket */
        else
            close(c->pend[i].fd);
    }
    free(c->pend);
    if (c->sock >= 0) close(c->sock);
    free(c);
    return HOOP_OK;
}

static hoop_status ib_close(struct hoop_tp_comm *tc)
{
    return close_comm(tc, 1);
}

/* A failed communicator's link (a timeout): what is still posted is garbage, and a
 * peer that is stopped or cut off would hold the drain for IB_CLOSE_DRAIN_NS, past the
 * grace the waiting caller gives the failure to arrive (collectives.c): the QP goes
 * without waiting. */
static hoop_status ib_abort(struct hoop_tp_comm *tc)
{
    return close_comm(tc, 0);
}

/* Each end of a link holds its liveness socket and its completion channel. */
static int ib_link_fds(void *tctx)
{
    (void)tctx;
    return 2;
}

const struct hoop_transport hoop__transport_ib = {
    .name = "ib",
    .api_version = HOOP_TRANSPORT_API_VERSION,
    .preference = 1, /* between hosts, ahead of tcp */
    .init = ib_init,
    .listen = ib_listen,
    .connect = ib_connect,
    .accept = ib_accept,
    .reachable = ib_reachable,
    .reg_mr = ib_reg_mr,
    .dereg_mr = ib_dereg_mr,
    .isend = ib_isend,
    .irecv = ib_irecv,
    .irecv_fn = ib_irecv_fn,
    .test = ib_test,
    .pollfds = ib_pollfds,
    .cost = ib_cost,
    .forget = ib_forget,
    .link_fds = ib_link_fds,
    .close = ib_close,
    .abort = ib_abort,
    .finalize = ib_finalize,
};

static const struct hoop_transport *self_tp(void)
{
    return &hoop__transport_ib;
}

#endif /* HOOP_HAVE_VERBS */
