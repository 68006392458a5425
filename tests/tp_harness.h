/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/tp_harness.h -- what the transport tests share: a connected pair of comms on
 * one transport, driving requests to completion, and counting open descriptors.
 *
 * Include after defining `tp` (the transport under test); make_ctx's cfg argument
 * carries the transport's own settings (nsocks, ring_bytes), rank and token are set here.
 */
#ifndef HOOP_TESTS_TP_HARNESS_H
#define HOOP_TESTS_TP_HARNESS_H

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/clock.h"
#include "run_suite.h"
#include "transport/transport.h"

typedef struct pair {
    void *ctx_a, *ctx_b;
    struct hoop_tp_comm *listen, *send, *recv;
} pair;

static void tp_make_ctx(void **ctx, int rank, const char *token, struct hoop_tp_config cfg)
{
    cfg.rank = rank;
    cfg.token = token;
    ck_assert_msg(tp->init(&cfg, ctx) == HOOP_OK, "init: %s", hoop_last_error());
}

/* Connects a (rank 0, channel 7, settings cfg_a) to b (rank 1, cfg_b) within timeout_ms;
 * returns the connect status. */
static hoop_status connect_pair_two(pair *p, const char *tok_a, struct hoop_tp_config cfg_a,
                                    const char *tok_b, struct hoop_tp_config cfg_b,
                                    int64_t timeout_ms)
{
    unsigned char handle[HOOP_TP_HANDLE_MAX];
    hoop_status st = HOOP_OK;
    tp_make_ctx(&p->ctx_a, 0, tok_a, cfg_a);
    tp_make_ctx(&p->ctx_b, 1, tok_b, cfg_b);
    ck_assert_int_eq(tp->listen(p->ctx_b, handle, &p->listen), HOOP_OK);
    p->send = p->recv = NULL;
    int64_t deadline = hoop__deadline_ns(timeout_ms);
    while ((!p->send || !p->recv) && hoop__now_ns() < deadline) {
        if (!p->send) {
            st = tp->connect(p->ctx_a, handle, 7, &p->send);
            if (st != HOOP_OK) break;
        }
        if (!p->recv) ck_assert_int_eq(tp->accept(p->listen, &p->recv), HOOP_OK);
        usleep(100);
    }
    return st;
}

/* Both ends with the same settings. */
static hoop_status connect_pair_cfg(pair *p, const char *tok_a, const char *tok_b,
                                    struct hoop_tp_config cfg)
{
    return connect_pair_two(p, tok_a, cfg, tok_b, cfg, 5000);
}

static void close_pair(pair *p)
{
    ck_assert_int_eq(tp->close(p->send), HOOP_OK);
    ck_assert_int_eq(tp->close(p->recv), HOOP_OK);
    ck_assert_int_eq(tp->close(p->listen), HOOP_OK);
    ck_assert_int_eq(tp->finalize(p->ctx_a), HOOP_OK);
    ck_assert_int_eq(tp->finalize(p->ctx_b), HOOP_OK);
}

/* Drives both requests to completion (either may be NULL); each must report `bytes`
 * (pass SIZE_MAX to skip that check). */
static hoop_status finish_bytes(void *sreq, void *rreq, size_t bytes)
{
    int sd = sreq == NULL, rd = rreq == NULL;
    int64_t deadline = hoop__deadline_ns(10000);
    while ((!sd || !rd) && hoop__now_ns() < deadline) {
        size_t got = bytes;
        if (!sd) {
            hoop_status st = tp->test(sreq, &sd, bytes == SIZE_MAX ? NULL : &got);
            if (st != HOOP_OK) return st;
        }
        if (!rd) {
            hoop_status st = tp->test(rreq, &rd, bytes == SIZE_MAX ? NULL : &got);
            if (st != HOOP_OK) return st;
        }
        if (got != bytes) return HOOP_ERR_INTERNAL;
    }
    return sd && rd ? HOOP_OK : HOOP_ERR_TIMEOUT;
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    while (d && readdir(d)) n++;
    if (d) closedir(d);
    return n;
}

/* A connect abandoned half-way (the listener never accepts) gets no comm, and finalize
 * of the connecting context cleans it up: no descriptor is left. */
static void check_abandoned_connect(struct hoop_tp_config cfg)
{
    unsigned char handle[HOOP_TP_HANDLE_MAX];
    void *a, *b;
    struct hoop_tp_comm *listen, *send = NULL;
    int before = open_fds();
    tp_make_ctx(&a, 0, "t", cfg);
    tp_make_ctx(&b, 1, "t", cfg);
    ck_assert_int_eq(tp->listen(b, handle, &listen), HOOP_OK);
    for (int i = 0; i < 20; i++) {
        ck_assert_int_eq(tp->connect(a, handle, 0, &send), HOOP_OK);
        usleep(200);
    }
    ck_assert_ptr_null(send); /* no verdict without accept */
    ck_assert_int_eq(tp->finalize(a), HOOP_OK);
    ck_assert_int_eq(tp->close(listen), HOOP_OK);
    ck_assert_int_eq(tp->finalize(b), HOOP_OK);
    ck_assert_int_eq(open_fds(), before);
}

/* The acceptor goes away after the connector's hello but before its verdict (a rank
 * killed during set-up, the fault matrix's kill@connect): the connector fails with
 * HOOP_ERR_REMOTE saying the peer exited during the handshake, not that it refused the
 * connection (wrong token). */
static void check_peer_gone_in_handshake(struct hoop_tp_config cfg)
{
    pair p = {0};
    unsigned char handle[HOOP_TP_HANDLE_MAX];
    tp_make_ctx(&p.ctx_a, 0, "t", cfg);
    tp_make_ctx(&p.ctx_b, 1, "t", cfg);
    ck_assert_int_eq(tp->listen(p.ctx_b, handle, &p.listen), HOOP_OK);
    /* Connect until the hello is out (the call returns OK, not done, awaiting a verdict);
     * no accept is needed for that. */
    hoop_status st = HOOP_OK;
    for (int i = 0; i < 20 && st == HOOP_OK && !p.send; i++) {
        st = tp->connect(p.ctx_a, handle, 7, &p.send);
        usleep(1000);
    }
    ck_assert_int_eq(st, HOOP_OK);
    ck_assert_ptr_null(p.send);
    ck_assert_int_eq(tp->close(p.listen), HOOP_OK); /* the acceptor exits, never answering */
    ck_assert_int_eq(tp->finalize(p.ctx_b), HOOP_OK);
    int64_t deadline = hoop__deadline_ns(5000);
    while (st == HOOP_OK && !p.send && hoop__now_ns() < deadline) {
        st = tp->connect(p.ctx_a, handle, 7, &p.send);
        usleep(500);
    }
    ck_assert_int_eq(st, HOOP_ERR_REMOTE);
    assert_error_has("exited", "during the connection handshake");
    ck_assert_ptr_null(strstr(hoop_last_error(), "refused"));
    ck_assert_int_eq(tp->finalize(p.ctx_a), HOOP_OK);
}

/* The request pool (reqpool.h): more requests in flight than the comm keeps spare, all
 * completed with the right bytes, twice (the second round reuses released requests),
 * then receives left pending when the comm closes (which must free them: run under
 * ASan / LeakSanitizer to see a leak). p is connected; it is closed here. */
static void check_request_pool(pair *p)
{
    enum { K = 12 }; /* > the transports' 8 spares */
    uint64_t out[K], in[K];
    void *sreq[K], *rreq[K];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < K; i++) {
            out[i] = 1000u * (unsigned)round + (unsigned)i;
            in[i] = 0;
            ck_assert_int_eq(tp->isend(p->send, &out[i], 8, NULL, &sreq[i]), HOOP_OK);
            ck_assert_int_eq(tp->irecv(p->recv, &in[i], 8, NULL, &rreq[i]), HOOP_OK);
            ck_assert_ptr_nonnull(sreq[i]);
            ck_assert_ptr_nonnull(rreq[i]);
        }
        for (int i = 0; i < K; i++) ck_assert_int_eq(finish_bytes(sreq[i], rreq[i], 8), HOOP_OK);
        for (int i = 0; i < K; i++) ck_assert_uint_eq(in[i], 1000u * (unsigned)round + (unsigned)i);
    }
    for (int i = 0; i < K; i++) {
        ck_assert_int_eq(tp->irecv(p->recv, &in[i], 8, NULL, &rreq[i]), HOOP_OK);
        ck_assert_ptr_nonnull(rreq[i]);
    }
    close_pair(p); /* K receives still pending */
}

/* A full descriptor table: the soft RLIMIT_NOFILE lowered to FILL_LIMIT and every
 * descriptor below it taken (dups of stdin, or /dev/null's) but `spare`. tp_unfill closes
 * them and restores the limit (a Check case runs in its own child; CK_FORK=no too). */
#define FILL_LIMIT 64
typedef struct fd_fill {
    struct rlimit old;
    int fds[FILL_LIMIT], n;
} fd_fill;

static inline void tp_fill(fd_fill *f, int spare)
{
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &f->old), 0);
    ck_assert_msg(open_fds() + spare + 4 < FILL_LIMIT, "%d descriptors open already", open_fds());
    struct rlimit low = {.rlim_cur = FILL_LIMIT, .rlim_max = f->old.rlim_max};
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    f->n = 0;
    for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) f->fds[f->n++] = fd;
    ck_assert_int_eq(errno, EMFILE);
    for (int i = 0; i < spare; i++) close(f->fds[--f->n]);
}

static inline void tp_unfill(fd_fill *f)
{
    while (f->n > 0) close(f->fds[--f->n]);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &f->old), 0);
}

/* Tests req until it completes (*done = 1) or its test fails; returns that status
 * (HOOP_ERR_TIMEOUT after 10 s). */
static hoop_status drive_one(void *req, int *done)
{
    int64_t deadline = hoop__deadline_ns(10000);
    *done = 0;
    while (!*done && hoop__now_ns() < deadline) {
        hoop_status st = tp->test(req, done, NULL);
        if (st != HOOP_OK) return st;
    }
    return *done ? HOOP_OK : HOOP_ERR_TIMEOUT;
}

/* A message of 100 bytes (all 0xab) meets a receive posted for 96: the receive's test
 * fails once with HOOP_ERR_INTERNAL naming the peer (rank 0) and both lengths, with the
 * comm's bad_req pointing at it; the request stays live and completes as posted, the
 * 96 bytes it asked for delivered. Then a second message of 64 bytes: on a transport
 * whose messages are delimited (delimited = 1: ib's slots) it arrives intact; on a
 * byte stream (tcp, shm) the receiver is now out of step, and its next receive says so
 * (a frame word that is not one) instead of taking the wrong bytes silently. p is
 * connected and stays so. */
static void check_wrong_length(pair *p, int delimited)
{
    unsigned char out[100], in[100], out2[64], in2[64];
    void *sr, *rr;
    int done;
    memset(out, 0xab, sizeof(out));
    memset(in, 0, sizeof(in));
    for (size_t i = 0; i < sizeof(out2); i++) out2[i] = (unsigned char)(i + 1);
    p->recv->bad_req = NULL;
    /* Small sends complete before their receive (tcp's wait for a test to leave). */
    ck_assert_int_eq(tp->isend(p->send, out, 100, NULL, &sr), HOOP_OK);
    ck_assert_msg(drive_one(sr, &done) == HOOP_OK, "the send: %s", hoop_last_error());
    ck_assert_int_eq(tp->irecv(p->recv, in, 96, NULL, &rr), HOOP_OK);
    ck_assert_int_eq(drive_one(rr, &done), HOOP_ERR_INTERNAL);
    assert_error_has("from rank 0", "100 bytes but the receive posted for it is 96 bytes");
    ck_assert_ptr_eq(p->recv->bad_req, rr);
    p->recv->bad_req = NULL;
    ck_assert_msg(drive_one(rr, &done) == HOOP_OK, "the bad receive: %s", hoop_last_error());
    ck_assert_msg(memcmp(in, out, 96) == 0 && in[96] == 0, "the bad receive's bytes");
    ck_assert_int_eq(tp->isend(p->send, out2, sizeof(out2), NULL, &sr), HOOP_OK);
    ck_assert_msg(drive_one(sr, &done) == HOOP_OK, "the next send: %s", hoop_last_error());
    ck_assert_int_eq(tp->irecv(p->recv, in2, sizeof(in2), NULL, &rr), HOOP_OK);
    if (delimited) {
        ck_assert_msg(drive_one(rr, &done) == HOOP_OK, "the next message: %s", hoop_last_error());
        ck_assert_msg(memcmp(in2, out2, sizeof(in2)) == 0, "the next message's bytes");
    } else {
        ck_assert_int_eq(drive_one(rr, &done), HOOP_ERR_INTERNAL);
        assert_error_has("from rank 0", "does not start with a frame word");
        ck_assert_ptr_eq(p->recv->bad_req, rr);
        p->recv->bad_req = NULL;
        ck_assert_msg(drive_one(rr, &done) == HOOP_OK, "the next receive: %s", hoop_last_error());
    }
}

#endif /* HOOP_TESTS_TP_HARNESS_H */
