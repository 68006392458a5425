/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_tcp.c -- the TCP transport on its own: vtable contract, data integrity
 * over several streams with partial I/O, peer close -> HOOP_ERR_REMOTE, wrong token
 * refused, a token holder's stream that arrives twice or disagrees with its link refused,
 * listen-address choice (IPv4 and IPv6), the address in a handle and in messages.
 */
#define _GNU_SOURCE /* unshare */
#include <check.h>
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "core/clock.h"
#include "transport/hello.h"
#include "transport/sock.h"
#include "transport/transport.h"

static const struct hoop_transport *tp = &hoop__transport_tcp;

#include "tp_harness.h"
#include "run_suite.h"

static hoop_status connect_pair(pair *p, const char *tok_a, const char *tok_b, int nsocks)
{
    return connect_pair_cfg(p, tok_a, tok_b, (struct hoop_tp_config){.nsocks = nsocks});
}

static hoop_status finish(void *sreq, void *rreq)
{
    return finish_bytes(sreq, rreq, SIZE_MAX);
}

/* 1 when this host has ::1 on lo (/proc/net/if_inet6: address in 32 hex digits, index,
 * prefix length, scope, flags, name); the IPv6 tests pass without testing anything, with
 * a note, where it has not (a container started with IPv6 off). */
static int have_ipv6_loopback(void)
{
    char line[256];
    int found = 0;
    FILE *f = fopen("/proc/net/if_inet6", "r");
    while (f && !found && fgets(line, sizeof(line), f))
        found = strncmp(line, "00000000000000000000000000000001 ", 33) == 0;
    if (f) fclose(f);
    if (!found) fprintf(stderr, "NOTE: no IPv6 loopback here; the IPv6 case tests nothing\n");
    return found;
}

START_TEST(test_vtable)
{
    const char *missing = NULL;
    ck_assert(hoop__transport_complete(tp, &missing));
    ck_assert_ptr_null(missing);
    ck_assert_str_eq(tp->name, "tcp");
    ck_assert_ptr_nonnull(tp->init);
    ck_assert_ptr_nonnull(tp->listen);
    ck_assert_ptr_nonnull(tp->connect);
    ck_assert_ptr_nonnull(tp->accept);
    ck_assert_ptr_nonnull(tp->isend);
    ck_assert_ptr_nonnull(tp->irecv);
    ck_assert_ptr_nonnull(tp->test);
    ck_assert_ptr_nonnull(tp->close);
    ck_assert_ptr_nonnull(tp->finalize);
    struct hoop_transport broken = hoop__transport_tcp;
    broken.test = NULL;
    ck_assert(!hoop__transport_complete(&broken, &missing));
    ck_assert_str_eq(missing, "test");
}
END_TEST

/* Messages of many sizes, several in flight, over 1 and 3 streams, and over 3 streams of
 * IPv6 loopback (_i = 2: MASTER_ADDR ::1, so the listener takes ::1); 24 MiB exceeds the
 * socket buffers, so sends and receives complete in many partial pieces. */
START_TEST(test_send_recv)
{
    static const size_t sizes[] = {1, 7, 4096, 65536, 65537, 1000003, 24u << 20};
    pair p;
    int nsocks = _i ? 3 : 1;
    if (_i == 2 && !have_ipv6_loopback()) return;
    struct hoop_tp_config cfg = {.nsocks = nsocks, .master_addr = _i == 2 ? "::1" : NULL};
    ck_assert_int_eq(connect_pair_cfg(&p, "secret", "secret", cfg), HOOP_OK);
    ck_assert_int_eq(p.recv->peer, 0);
    ck_assert_int_eq(p.recv->channel, 7);
    ck_assert_int_eq(p.send->peer, 1);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        unsigned char *a = malloc(n), *b = calloc(n, 1);
        for (size_t i = 0; i < n; i++) a[i] = (unsigned char)(i * 131 + k);
        void *sreq = NULL, *rreq = NULL;
        ck_assert_int_eq(tp->isend(p.send, a, n, NULL, &sreq), HOOP_OK);
        ck_assert_int_eq(tp->irecv(p.recv, b, n, NULL, &rreq), HOOP_OK);
        ck_assert_int_eq(finish(sreq, rreq), HOOP_OK);
        ck_assert_msg(memcmp(a, b, n) == 0, "size %zu corrupted", n);
        free(a);
        free(b);
    }
    /* Several in flight at once, matched in order. */
    enum { K = 16 };
    uint32_t out[K], in[K];
    void *sr[K], *rr[K];
    for (int i = 0; i < K; i++) {
        out[i] = 0xabc00000u + (uint32_t)i;
        ck_assert_int_eq(tp->isend(p.send, &out[i], 4, NULL, &sr[i]), HOOP_OK);
        ck_assert_int_eq(tp->irecv(p.recv, &in[i], 4, NULL, &rr[i]), HOOP_OK);
    }
    for (int i = K - 1; i >= 0; i--) ck_assert_int_eq(finish(sr[i], rr[i]), HOOP_OK);
    for (int i = 0; i < K; i++) ck_assert_uint_eq(in[i], out[i]);
    close_pair(&p);
}
END_TEST

/* A message of another length than its receive fails that receive once
 * (HOOP_ERR_INTERNAL, both lengths, from the frame word, frame.h); the stream is then out
 * of step and the next receive says so. */
START_TEST(test_wrong_length)
{
    pair p;
    ck_assert_int_eq(connect_pair(&p, NULL, NULL, 2), HOOP_OK);
    check_wrong_length(&p, 0);
    close_pair(&p);
}
END_TEST

START_TEST(test_request_pool)
{
    pair p;
    ck_assert_int_eq(connect_pair(&p, NULL, NULL, 2), HOOP_OK);
    check_request_pool(&p);
}
END_TEST

START_TEST(test_peer_close)
{
    pair p;
    char buf[64];
    void *rreq = NULL;
    ck_assert_int_eq(connect_pair(&p, NULL, NULL, 2), HOOP_OK);
    ck_assert_int_eq(tp->irecv(p.recv, buf, sizeof(buf), NULL, &rreq), HOOP_OK);
    ck_assert_int_eq(tp->close(p.send), HOOP_OK);
    p.send = NULL;
    int done = 0;
    hoop_status st = HOOP_OK;
    int64_t deadline = hoop__deadline_ns(2000);
    while (st == HOOP_OK && !done && hoop__now_ns() < deadline) st = tp->test(rreq, &done, NULL);
    ck_assert_int_eq(st, HOOP_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "rank 0"));
    /* The comm stays failed: new requests fail at once. */
    ck_assert_int_eq(tp->irecv(p.recv, buf, 8, NULL, &rreq), HOOP_ERR_REMOTE);
    close_pair(&p);
}
END_TEST

START_TEST(test_wrong_token)
{
    pair p;
    ck_assert_int_eq(connect_pair(&p, "intruder", "secret", 2), HOOP_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "refused"));
    ck_assert_ptr_null(p.send);
    ck_assert_ptr_null(p.recv); /* the stranger was never handed out */
    p.send = NULL;
    close_pair(&p);
}
END_TEST

/* tp_harness.h's check_peer_gone_in_handshake. */
START_TEST(test_peer_gone_in_handshake)
{
    check_peer_gone_in_handshake((struct hoop_tp_config){.nsocks = 1});
}
END_TEST

/* A connect abandoned half-way (the peer never accepts) is cleaned up by finalize. */
START_TEST(test_abandoned_connect)
{
    check_abandoned_connect((struct hoop_tp_config){.nsocks = 3});
}
END_TEST

START_TEST(test_ifname)
{
    void *ctx = NULL;
    struct hoop_tp_config cfg = {.rank = 0, .nsocks = 1, .ifname = "lo"};
    ck_assert_int_eq(tp->init(&cfg, &ctx), HOOP_OK);
    ck_assert_int_eq(tp->finalize(ctx), HOOP_OK);
    cfg.ifname = "nosuchif";
    ck_assert_int_eq(tp->init(&cfg, &ctx), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "nosuchif"));
    cfg.ifname = NULL;
    cfg.master_addr = "127.0.0.1"; /* a loopback master keeps the loopback address */
    ck_assert_int_eq(tp->init(&cfg, &ctx), HOOP_OK);
    ck_assert_int_eq(tp->finalize(ctx), HOOP_OK);
    cfg.nsocks = 99;
    ck_assert_int_eq(tp->init(&cfg, &ctx), HOOP_ERR_INVALID);
}
END_TEST

/* hoop__sock_listen_addr's choice, printed: MASTER_ADDR's family wins on an interface
 * with both (lo), a loopback MASTER_ADDR keeps loopback of its family, and nothing at
 * all gives 127.0.0.1. */
static const char *listen_addr(const char *ifname, const char *master, char *b)
{
    hoop_sockaddr a;
    ck_assert_msg(hoop__sock_listen_addr(ifname, master, &a) == HOOP_OK, "%s %s: %s", ifname,
                  master, hoop_last_error());
    return hoop__sock_addr_str(&a, b);
}

START_TEST(test_listen_addr)
{
    char b[HOOP_SOCK_ADDR_STRLEN];
    ck_assert_str_eq(listen_addr(NULL, NULL, b), "127.0.0.1:0");
    ck_assert_str_eq(listen_addr("lo", NULL, b), "127.0.0.1:0");
    ck_assert_str_eq(listen_addr("=lo", "127.0.0.1", b), "127.0.0.1:0");
    ck_assert_str_eq(listen_addr(NULL, "127.0.0.2", b), "127.0.0.1:0");
    hoop_sockaddr a;
    ck_assert_int_eq(hoop__sock_listen_addr("=nosuchif", "::1", &a), HOOP_ERR_INVALID);
    ck_assert_str_eq(hoop_last_error(),
                     "HOOP_SOCKET_IFNAME==nosuchif matches no interface with an IPv4 or IPv6 "
                     "address (the form: prefixes or =exact names, comma-separated, all after "
                     "a '^' to leave those out)");
    /* NCCL_SOCKET_IFNAME's lists: any entry matches; '=' exact; '^' leaves them out */
    ck_assert_str_eq(listen_addr("nosuchif,lo", NULL, b), "127.0.0.1:0");
    ck_assert_str_eq(listen_addr("=l,,=lo", NULL, b), "127.0.0.1:0");
    ck_assert_int_eq(hoop__sock_listen_addr("=l,=lo0,^lo", NULL, &a), HOOP_ERR_INVALID);
    if (!have_ipv6_loopback()) return;
    ck_assert_str_eq(listen_addr("lo", "::1", b), "[::1]:0");
    ck_assert_str_eq(listen_addr(NULL, "::1", b), "[::1]:0");
    ck_assert_str_eq(listen_addr(NULL, "0:0::1", b), "[::1]:0");
}
END_TEST

/* The checks of test_ifname_down, in its child: 0 when they hold, else which failed. */
static int ifname_down_checks(void)
{
    hoop_sockaddr a;
    char b[HOOP_SOCK_ADDR_STRLEN];
    if (system("ip link add hoopd0 type veth peer name hoopx0 && "
               "ip addr add 10.77.0.1/24 dev hoopd0 && ip link set hoopx0 up && "
               "ip link add hoopd1 type veth peer name hoopx1 && "
               "ip addr add 10.77.1.1/24 dev hoopd1 && ip link set hoopd1 up && "
               "ip link set hoopx1 up") != 0)
        return 77;
    if (hoop__sock_listen_addr("hoopd", NULL, &a) != HOOP_OK ||
        strcmp(hoop__sock_addr_str(&a, b), "10.77.1.1:0") != 0)
        return 1;
    /* the lists: hoopd1 is up and running with an IPv4 address (lo is down in a new
     * namespace; the hoopx have IPv6 link-local ones, which rank after it) */
    if (hoop__sock_listen_addr("^hoopd0", NULL, &a) != HOOP_OK ||
        strcmp(hoop__sock_addr_str(&a, b), "10.77.1.1:0") != 0)
        return 4;
    if (hoop__sock_listen_addr("=hoopd0,=hoopd1", NULL, &a) != HOOP_OK ||
        strcmp(hoop__sock_addr_str(&a, b), "10.77.1.1:0") != 0)
        return 5;
    if (hoop__sock_listen_addr("^hoopd1,hoopx,lo", NULL, &a) != HOOP_ERR_INVALID ||
        !strstr(hoop_last_error(), "(hoopd0: down, or no carrier)"))
        return 6;
    if (hoop__sock_listen_addr("=hoopd0", NULL, &a) != HOOP_ERR_INVALID ||
        strcmp(hoop_last_error(), "HOOP_SOCKET_IFNAME==hoopd0 matches no interface that is up "
                                  "and running (hoopd0: down, or no carrier)") != 0)
        return 2;
    if (system("ip link set hoopx1 down") != 0) return 77; /* hoopd1: up, no carrier */
    if (hoop__sock_listen_addr("hoopd", NULL, &a) != HOOP_ERR_INVALID ||
        !strstr(hoop_last_error(), "(hoopd0, hoopd1: down, or no carrier)"))
        return 3;
    return 0;
}

/* A prefix that matches an interface that is down (eth1 without its cable beside eth0)
 * skips it; matching only such ones fails, naming them. In a network namespace of the
 * child's own, with two veth pairs (a veth runs while its peer is up): root and ip(8),
 * else skipped with a note. */
START_TEST(test_ifname_down)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) _exit(unshare(CLONE_NEWNET) != 0 ? 77 : ifname_down_checks());
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
        fprintf(stderr, "test_ifname_down: skipped (no network namespace or ip(8) here)\n");
        return;
    }
    ck_assert_msg(WEXITSTATUS(status) == 0, "check %d of ifname_down_checks failed",
                  WEXITSTATUS(status));
}
END_TEST

/* Addresses in messages, in a handle and back, and the scope a link-local peer is
 * dialled with. */
START_TEST(test_addr_forms)
{
    char b[HOOP_SOCK_ADDR_STRLEN], want[64];
    hoop_sockaddr v4 = {.in = {.sin_family = AF_INET, .sin_port = htons(41234)}};
    hoop_sockaddr v6 = {.in6 = {.sin6_family = AF_INET6, .sin6_port = htons(65535)}};
    hoop_sockaddr back;
    struct hoop_sock_wire w;
    ck_assert_int_eq(inet_pton(AF_INET, "10.0.0.2", &v4.in.sin_addr), 1);
    ck_assert_int_eq(inet_pton(AF_INET6, "fd00::2", &v6.in6.sin6_addr), 1);
    ck_assert_str_eq(hoop__sock_addr_str(&v4, b), "10.0.0.2:41234");
    ck_assert_str_eq(hoop__sock_addr_str(&v6, b), "[fd00::2]:65535");
    ck_assert_int_eq(hoop__sock_len(&v4), sizeof(struct sockaddr_in));
    ck_assert_int_eq(hoop__sock_len(&v6), sizeof(struct sockaddr_in6));
    hoop__sock_to_wire(&v4, &w);
    ck_assert_int_eq(hoop__sock_from_wire(&w, "rank 3", &back), HOOP_OK);
    ck_assert_str_eq(hoop__sock_addr_str(&back, b), "10.0.0.2:41234");
    /* A link-local address keeps its zone through a handle and in messages. */
    hoop_sockaddr ll = {.in6 = {.sin6_family = AF_INET6, .sin6_port = htons(7)}};
    ck_assert_int_eq(inet_pton(AF_INET6, "fe80::1", &ll.in6.sin6_addr), 1);
    ll.in6.sin6_scope_id = if_nametoindex("lo");
    ck_assert_uint_ne(ll.in6.sin6_scope_id, 0);
    hoop__sock_to_wire(&ll, &w);
    ck_assert_int_eq(hoop__sock_from_wire(&w, "rank 3", &back), HOOP_OK);
    ck_assert_str_eq(hoop__sock_addr_str(&back, b), "[fe80::1%lo]:7");
    ck_assert_int_eq(memcmp(&back.in6, &ll.in6, sizeof(ll.in6)), 0);
    back.in6.sin6_scope_id = 0x7ffffff0; /* no such interface here */
    ck_assert_str_eq(hoop__sock_addr_str(&back, b), "[fe80::1%2147483632]:7");
    /* Dialled from a link-local listener: its own interface, not the publisher's. */
    hoop_sockaddr self = ll;
    self.in6.sin6_scope_id = 12345;
    hoop_sockaddr d = hoop__sock_dial_addr(&ll, &self);
    ck_assert_uint_eq(d.in6.sin6_scope_id, 12345);
    ck_assert_uint_eq(hoop__sock_dial_addr(&ll, &v6).in6.sin6_scope_id, ll.in6.sin6_scope_id);
    ck_assert_uint_eq(hoop__sock_dial_addr(&v6, &self).in6.sin6_scope_id, 0);
    /* Loopback, for the hint of a failed connect: 127/8, ::1, ::ffff:127.x.y.z only. */
    static const struct {
        int family;
        const char *text;
        int loopback;
    } lb[] = {{AF_INET, "127.0.0.1", 1},
              {AF_INET, "127.255.0.9", 1},
              {AF_INET, "128.0.0.1", 0},
              {AF_INET, "10.0.0.2", 0},
              {AF_INET6, "::1", 1},
              {AF_INET6, "::ffff:127.0.0.5", 1},
              {AF_INET6, "::ffff:10.0.0.1", 0},
              {AF_INET6, "fe80::1", 0},
              {AF_INET6, "::2", 0}};
    for (size_t i = 0; i < sizeof(lb) / sizeof(lb[0]); i++) {
        hoop_sockaddr x = {.sa = {.sa_family = (sa_family_t)lb[i].family}};
        void *dst = lb[i].family == AF_INET ? (void *)&x.in.sin_addr : (void *)&x.in6.sin6_addr;
        ck_assert_int_eq(inet_pton(lb[i].family, lb[i].text, dst), 1);
        ck_assert_msg(hoop__sock_is_loopback(&x) == lb[i].loopback, "%s", lb[i].text);
    }
    w.family = 99;
    ck_assert_int_eq(hoop__sock_from_wire(&w, "tcp: rank 3", &back), HOOP_ERR_INVALID);
    snprintf(want, sizeof(want), "tcp: rank 3 published an address of unknown family 99");
    ck_assert_str_eq(hoop_last_error(), want);
}
END_TEST

// ----------------------------------------------------------------- hellos from a token holder

/* Opens a raw stream to the listener whose handle is h (offsets written out: magic 0,
 * rank 4, then the address as struct hoop_sock_wire at 8: family 8, port 10 in network
 * order, scope 12, the IPv4 address at 16) and sends a hello with the given
 * fields (layout: magic 0, version 4, nsocks 6, rank 8, channel 12, idx 16, nonce 20,
 * token 24); returns the socket. */
static int raw_hello(const unsigned char *h, uint16_t nsocks, int32_t idx, uint32_t nonce,
                     const char *token)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    uint16_t family;
    memcpy(&family, h + 8, 2);
    ck_assert_int_eq(family, AF_INET);
    memcpy(&a.sin_port, h + 10, 2);
    memcpy(&a.sin_addr.s_addr, h + 16, 4);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    unsigned char hello[HOOP__TCP_HELLO_BYTES] = {0};
    uint32_t magic = 0x686f6f70u;
    uint16_t version = 2;
    int32_t rank = 0, channel = 7;
    memcpy(hello, &magic, 4);
    memcpy(hello + 4, &version, 2);
    memcpy(hello + 6, &nsocks, 2);
    memcpy(hello + 8, &rank, 4);
    memcpy(hello + 12, &channel, 4);
    memcpy(hello + 16, &idx, 4);
    memcpy(hello + 20, &nonce, 4);
    strncpy((char *)hello + 24, token, HOOP_TP_TOKEN_MAX);
    ck_assert_int_eq(send(fd, hello, sizeof(hello), MSG_NOSIGNAL), (ssize_t)sizeof(hello));
    return fd;
}

/* A hello of protocol version 1 (a build before frame words) is refused with the reason,
 * not read as a peer's (offsets as raw_hello's). */
START_TEST(test_old_version)
{
    unsigned char hello[HOOP__TCP_HELLO_BYTES] = {0};
    uint32_t magic = 0x686f6f70u;
    uint16_t version = 1, nsocks = 1;
    int32_t rank = 3;
    char why[96];
    memcpy(hello, &magic, 4);
    memcpy(hello + 4, &version, 2);
    memcpy(hello + 6, &nsocks, 2);
    memcpy(hello + 8, &rank, 4);
    strcpy((char *)hello + 24, "secret");
    char token[HOOP_TP_TOKEN_MAX] = "secret";
    ck_assert_int_eq(hoop__tcp_hello_check(hello, sizeof(hello), token, why, sizeof(why)), 0);
    ck_assert_str_eq(why, "claiming rank 3: tcp protocol version 1, this build speaks 2");
    version = 2;
    memcpy(hello + 4, &version, 2);
    ck_assert_int_eq(hoop__tcp_hello_check(hello, sizeof(hello), token, why, sizeof(why)), 1);
}
END_TEST

/* Drives the listener until fd's verdict arrives; returns it (1 accepted, 0 refused). */
static int verdict(struct hoop_tp_comm *listen, int fd, struct hoop_tp_comm **got)
{
    char v = -1;
    int64_t deadline = hoop__deadline_ns(5000);
    while (hoop__now_ns() < deadline) {
        struct hoop_tp_comm *c = NULL;
        ck_assert_int_eq(tp->accept(listen, &c), HOOP_OK);
        if (c) *got = c;
        if (recv(fd, &v, 1, MSG_DONTWAIT) == 1) return v;
        usleep(1000);
    }
    ck_abort_msg("no verdict within 5 s");
    return -1;
}

/* A token holder's stream that arrives twice, or that disagrees with its link's number
 * of streams, is refused with the reason; the listener keeps no descriptor of it, and the
 * link still assembles from the right streams. */
START_TEST(test_bad_stream)
{
    unsigned char handle[HOOP_TP_HANDLE_MAX];
    void *ctx;
    struct hoop_tp_comm *listen, *got = NULL;
    int before = open_fds();
    tp_make_ctx(&ctx, 1, "secret", (struct hoop_tp_config){.nsocks = 2});
    ck_assert_int_eq(tp->listen(ctx, handle, &listen), HOOP_OK);
    int first = raw_hello(handle, 2, 0, 42, "secret");
    ck_assert_int_eq(verdict(listen, first, &got), 1);
    int again = raw_hello(handle, 2, 0, 42, "secret"); /* stream 0 a second time */
    ck_assert_int_eq(verdict(listen, again, &got), 0);
    int wider = raw_hello(handle, 3, 2, 42, "secret"); /* three streams, where it has two */
    ck_assert_int_eq(verdict(listen, wider, &got), 0);
    ck_assert_ptr_null(got);
    int second = raw_hello(handle, 2, 1, 42, "secret");
    ck_assert_int_eq(verdict(listen, second, &got), 1);
    ck_assert_ptr_nonnull(got); /* the link of streams 0 and 1, handed out */
    ck_assert_int_eq(got->peer, 0);
    ck_assert_int_eq(tp->close(got), HOOP_OK);
    ck_assert_int_eq(tp->close(listen), HOOP_OK);
    ck_assert_int_eq(tp->finalize(ctx), HOOP_OK);
    close(first), close(again), close(wider), close(second);
    ck_assert_int_eq(open_fds(), before);
}
END_TEST

/* Out of descriptors (EMFILE): accept fails at once with HOOP_ERR_SYSTEM naming the
 * limit, where it used to answer "nothing yet" with the connection still queued (the
 * listening socket stayed readable: a rank polling it spun until HOOP_TIMEOUT), and a
 * connect's socket() fails the same way, naming the peer. */
START_TEST(test_out_of_fds)
{
    void *ctx_a, *ctx_b;
    struct hoop_tp_comm *listen, *send = NULL, *recv = NULL;
    unsigned char handle[HOOP_TP_HANDLE_MAX], again[HOOP_TP_HANDLE_MAX];
    fd_fill f;
    tp_make_ctx(&ctx_a, 0, "tok", (struct hoop_tp_config){.nsocks = 2});
    tp_make_ctx(&ctx_b, 1, "tok", (struct hoop_tp_config){.nsocks = 2});
    ck_assert_int_eq(tp->listen(ctx_b, handle, &listen), HOOP_OK);
    memcpy(again, handle, sizeof(again));
    ck_assert_int_eq(tp->connect(ctx_a, handle, 0, &send), HOOP_OK); /* both streams queued */
    ck_assert_ptr_null(send);
    tp_fill(&f, 0);
    int64_t t0 = hoop__now_ns();
    ck_assert_int_eq(tp->accept(listen, &recv), HOOP_ERR_SYSTEM);
    ck_assert_ptr_null(recv);
    assert_error_has("rank 1: tcp cannot accept a connection: Too many open files",
                     "(RLIMIT_NOFILE soft limit 64, hard limit ");
    ck_assert_int_eq(tp->connect(ctx_a, again, 0, &send), HOOP_ERR_SYSTEM);
    assert_error_has("rank 0: tcp cannot open a socket for stream 0 to rank 1: Too many open",
                     "RLIMIT_NOFILE soft limit 64");
    ck_assert_int_lt(hoop__now_ns() - t0, 1000000000LL); /* at once, not at a timeout */
    tp_unfill(&f);
    ck_assert_int_eq(tp->close(listen), HOOP_OK);
    ck_assert_int_eq(tp->finalize(ctx_a), HOOP_OK);
    ck_assert_int_eq(tp->finalize(ctx_b), HOOP_OK);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tcp");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_vtable);
    tcase_add_loop_test(tc, test_send_recv, 0, 3);
    tcase_add_test(tc, test_request_pool);
    tcase_add_test(tc, test_ifname);
    tcase_add_test(tc, test_listen_addr);
    tcase_add_test(tc, test_ifname_down);
    tcase_add_test(tc, test_addr_forms);
    suite_add_tcase(s, tc);
    TCase *err = tcase_create("errors");
    tcase_set_timeout(err, 30);
    tcase_add_test(err, test_peer_close);
    tcase_add_test(err, test_wrong_token);
    tcase_add_test(err, test_peer_gone_in_handshake);
    tcase_add_test(err, test_abandoned_connect);
    tcase_add_test(err, test_bad_stream);
    tcase_add_test(err, test_old_version);
    tcase_add_test(err, test_wrong_length);
    tcase_add_test(err, test_out_of_fds);
    suite_add_tcase(s, err);
    return run_suite(s);
}
