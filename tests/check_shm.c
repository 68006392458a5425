/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_shm.c -- the shared-memory transport on its own: vtable contract, data
 * integrity through the ring's wrap-around (smallest and default ring), several requests
 * in flight, a peer in another process (8 MiB, and one that is SIGKILLed), graceful and
 * abrupt peer close -> HOOP_ERR_REMOTE within a bound, wrong token refused, reachability
 * (boot id and network namespace), the eventfd doorbells that let either side sleep,
 * ring-size validation and descriptor leaks.
 *
 * The test owns a wrapper of recv() (see "fault injection" below) that lets one test run
 * the peer's code at the exact moment the transport peeks at its socket.
 */
#undef _FORTIFY_SOURCE /* the recv() wrapper below must not meet glibc's inline one */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/rng.h"
#include "transport/hello.h"
#include "transport/transport.h"

static const struct hoop_transport *tp = &hoop__transport_shm;

/* The published handle as laid out by src/transport/shm.c; it MUST match struct
 * shm_handle there (test_reachable checks every field against an independent source). */
struct shm_handle_view {
    uint32_t magic;
    int32_t rank;
    uint8_t boot_id[16];
    uint64_t netns;
    char name[40];
    void *pending;
    uint32_t uid;
};
_Static_assert(sizeof(struct shm_handle_view) <= HOOP_TP_HANDLE_MAX, "view larger than a handle");

#include "tp_harness.h"
#include "run_suite.h"

static void make_ctx(void **ctx, int rank, const char *token, size_t ring_bytes)
{
    tp_make_ctx(ctx, rank, token, (struct hoop_tp_config){.ring_bytes = ring_bytes});
}

static hoop_status connect_pair(pair *p, const char *tok_a, const char *tok_b, size_t ring)
{
    return connect_pair_cfg(p, tok_a, tok_b, (struct hoop_tp_config){.ring_bytes = ring});
}

static hoop_status finish(void *sreq, void *rreq, size_t bytes)
{
    return finish_bytes(sreq, rreq, bytes);
}

/* Tests req until it completes or fails (status), or timeout_ms passes (HOOP_ERR_TIMEOUT);
 * *ms gets the time that took. */
static hoop_status wait_req(void *req, int timeout_ms, double *ms)
{
    int done = 0;
    hoop_status st = HOOP_OK;
    int64_t t0 = hoop__now_ns(), deadline = hoop__deadline_ns(timeout_ms);
    while (st == HOOP_OK && !done && hoop__now_ns() < deadline) st = tp->test(req, &done, NULL);
    *ms = (double)(hoop__now_ns() - t0) / 1e6;
    return st != HOOP_OK ? st : done ? HOOP_OK : HOOP_ERR_TIMEOUT;
}

static void fill_random(unsigned char *buf, size_t n, uint64_t seed)
{
    hoop__rng r = hoop__rng_seed(seed);
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(hoop__rng_next(&r) >> 56);
}

/* What a consumer receive saw: its pieces must tile the message in order, each a
 * multiple of the unit and aligned to it in memory. */
typedef struct consumer {
    unsigned char *out;
    size_t unit, next, pieces, bad;
} consumer;

static void consume(void *arg, const void *piece, size_t at, size_t n)
{
    consumer *k = arg;
    if (at != k->next || n == 0 || n % k->unit || (uintptr_t)piece % k->unit) k->bad++;
    memcpy(k->out + at, piece, n);
    k->next = at + n;
    k->pieces++;
}

/* irecv_fn: after messages of odd sizes (so the stream is misaligned), a consumer of
 * 2-, 4- and 8-byte units gets every byte exactly, in aligned whole-unit pieces, also
 * across the wrap of a 4 KiB ring and while the sender fills it piece by piece. */
START_TEST(test_consumer)
{
    pair p;
    ck_assert_int_eq(connect_pair(&p, "t", "t", 4096), HOOP_OK);
    ck_assert_ptr_nonnull(tp->irecv_fn);
    size_t units[] = {2, 4, 8}, n = 10000 * 8;
    unsigned char *in = malloc(n), *out = malloc(n), odd[3];
    for (int u = 0; u < 3; u++) {
        void *sreq, *rreq;
        /* a 3-byte message first: the next one starts at an odd stream offset */
        ck_assert_int_eq(tp->isend(p.send, "abc", 3, NULL, &sreq), HOOP_OK);
        ck_assert_int_eq(tp->irecv(p.recv, odd, 3, NULL, &rreq), HOOP_OK);
        ck_assert_int_eq(finish(sreq, rreq, 3), HOOP_OK);
        ck_assert_int_eq(memcmp(odd, "abc", 3), 0);
        size_t bytes = n - units[u] * 7;
        fill_random(in, bytes, 77 + (uint64_t)u);
        memset(out, 0, n);
        consumer k = {.out = out, .unit = units[u]};
        ck_assert_int_eq(tp->isend(p.send, in, bytes, NULL, &sreq), HOOP_OK);
        ck_assert_int_eq(tp->irecv_fn(p.recv, bytes, units[u], consume, &k, &rreq), HOOP_OK);
        ck_assert_int_eq(finish(sreq, rreq, bytes), HOOP_OK);
        ck_assert_uint_eq(k.bad, 0);
        ck_assert_uint_eq(k.next, bytes);
        ck_assert_uint_gt(k.pieces, bytes / 4096); /* the 4 KiB ring made it come in pieces */
        ck_assert_int_eq(memcmp(in, out, bytes), 0);
    }
    void *req;
    consumer k = {.out = out, .unit = 4};
    ck_assert_int_ne(tp->irecv_fn(p.recv, 6, 4, consume, &k, &req), HOOP_OK); /* 6 % 4 != 0 */
    free(in);
    free(out);
    close_pair(&p);
}
END_TEST

/* A message's 8-byte alignment pad needs room in the ring like data: a message queued
 * behind one that filled the ring to within a few bytes must wait, not publish a head
 * past the ring (which both ends would take for a corrupt ring). */
START_TEST(test_pad_full)
{
    pair p;
    ck_assert_int_eq(connect_pair(&p, "t", "t", 4096), HOOP_OK);
    size_t n2 = 4096 - 7; /* after a 9-byte message (padded to 16): ends 7 short of full... */
    char m1[9] = "abcdefgh", o1[9], m3[8] = "ABCDEFG", o3[8];
    unsigned char *m2 = malloc(n2), *o2 = malloc(n2);
    fill_random(m2, n2, 5);
    void *sr, *rr, *s2, *s3, *r2, *r3;
    ck_assert_int_eq(tp->isend(p.send, m1, 9, NULL, &sr), HOOP_OK);
    ck_assert_int_eq(tp->irecv(p.recv, o1, 9, NULL, &rr), HOOP_OK);
    ck_assert_int_eq(finish(sr, rr, 9), HOOP_OK);
    /* ...as seen from the receiver's tail (9): the ring is exactly full, and m3's pad
     * would cross it. Both sends are queued before any receive is posted. */
    ck_assert_int_eq(tp->isend(p.send, m2, n2, NULL, &s2), HOOP_OK);
    ck_assert_int_eq(tp->isend(p.send, m3, 8, NULL, &s3), HOOP_OK);
    for (int k = 0; k < 100; k++) { /* the sender pushes all it can first */
        int d;
        ck_assert_int_eq(tp->test(s3, &d, NULL), HOOP_OK);
        ck_assert(!d);
    }
    ck_assert_int_eq(tp->irecv(p.recv, o2, n2, NULL, &r2), HOOP_OK);
    ck_assert_int_eq(tp->irecv(p.recv, o3, 8, NULL, &r3), HOOP_OK);
    ck_assert_int_eq(finish(s2, r2, n2), HOOP_OK);
    ck_assert_int_eq(finish(s3, r3, 8), HOOP_OK);
    ck_assert_int_eq(memcmp(o1, m1, 9), 0);
    ck_assert_int_eq(memcmp(o2, m2, n2), 0);
    ck_assert_int_eq(memcmp(o3, m3, 8), 0);
    free(m2);
    free(o2);
    close_pair(&p);
}
END_TEST

START_TEST(test_vtable)
{
    const char *missing = NULL;
    ck_assert(hoop__transport_complete(tp, &missing));
    ck_assert_ptr_null(missing);
    ck_assert_str_eq(tp->name, "shm");
    ck_assert_int_eq(tp->api_version, HOOP_TRANSPORT_API_VERSION);
    ck_assert_ptr_nonnull(tp->reachable);
    ck_assert_ptr_nonnull(tp->pollfds);
    ck_assert_ptr_null(tp->reg_mr); /* host memory only: no registration */
    ck_assert_ptr_null(tp->dereg_mr);
    struct hoop_transport broken = hoop__transport_shm;
    broken.accept = NULL;
    ck_assert(!hoop__transport_complete(&broken, &missing));
    ck_assert_str_eq(missing, "accept");
}
END_TEST

/* Sizes around the smallest ring (4096) and messages of hundreds or thousands of wraps,
 * through a 4 KiB ring (_i = 0) and the default 4 MiB ring (_i = 1). */
START_TEST(test_send_recv)
{
    static const size_t sizes[] = {0, 1, 7, 4095, 4096, 4097, 3000017, 9437189};
    pair p;
    ck_assert_int_eq(connect_pair(&p, "secret", "secret", _i ? 0 : 4096), HOOP_OK);
    ck_assert_int_eq(p.recv->peer, 0);
    ck_assert_int_eq(p.recv->channel, 7);
    ck_assert_int_eq(p.send->peer, 1);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        unsigned char *a = malloc(n + 1), *b = malloc(n + 1);
        fill_random(a, n + 1, 1000 + k);
        memset(b, 0xee, n + 1);
        void *sreq = NULL, *rreq = NULL;
        ck_assert_int_eq(tp->isend(p.send, a, n, NULL, &sreq), HOOP_OK);
        ck_assert_int_eq(tp->irecv(p.recv, b, n, NULL, &rreq), HOOP_OK);
        ck_assert_ptr_nonnull(sreq);
        ck_assert_ptr_nonnull(rreq);
        ck_assert_int_eq(finish(sreq, rreq, n), HOOP_OK);
        ck_assert_msg(memcmp(a, b, n) == 0, "size %zu corrupted", n);
        ck_assert_uint_eq(b[n], 0xee); /* nothing written past the request */
        free(a);
        free(b);
    }
    /* 64 messages of 0..300 bytes (about 9.6 KB, more than the small ring) posted back to
     * back, then driven only through the last pair: FIFO order means every earlier
     * request is then already done. */
    enum { K = 64 };
    size_t off[K + 1] = {0};
    for (int i = 0; i < K; i++) off[i + 1] = off[i] + (size_t)(i * 389) % 301;
    unsigned char *a = malloc(off[K]), *b = calloc(off[K], 1);
    fill_random(a, off[K], 77);
    void *sr[K], *rr[K];
    for (int i = 0; i < K; i++)
        ck_assert_int_eq(tp->isend(p.send, a + off[i], off[i + 1] - off[i], NULL, &sr[i]), HOOP_OK);
    for (int i = 0; i < K; i++)
        ck_assert_int_eq(tp->irecv(p.recv, b + off[i], off[i + 1] - off[i], NULL, &rr[i]), HOOP_OK);
    ck_assert_int_eq(finish(sr[K - 1], rr[K - 1], off[K] - off[K - 1]), HOOP_OK);
    for (int i = 0; i < K - 1; i++) {
        int sd = 0, rd = 0;
        size_t sn = 0, rn = 0;
        ck_assert_int_eq(tp->test(sr[i], &sd, &sn), HOOP_OK);
        ck_assert_int_eq(tp->test(rr[i], &rd, &rn), HOOP_OK);
        ck_assert_msg(sd && rd, "message %d not done after message %d", i, K - 1);
        ck_assert_uint_eq(sn, off[i + 1] - off[i]);
        ck_assert_uint_eq(rn, off[i + 1] - off[i]);
    }
    ck_assert_msg(memcmp(a, b, off[K]) == 0, "back-to-back messages corrupted");
    free(a);
    free(b);
    close_pair(&p);
}
END_TEST

// ----- another process at the other end ---------------------------------------------------

enum { FORK_BYTES = 8 << 20, FORK_SEED = 4242 };

/* In the child: connects to handle as rank 1, channel 3; returns the connect status and
 * the comm. Uses no Check assertion (the child reports through its exit code). */
static hoop_status child_connect(void *handle, void **ctx, struct hoop_tp_comm **send)
{
    struct hoop_tp_config cfg = {.rank = 1, .token = "fork"};
    hoop_status st = tp->init(&cfg, ctx);
    *send = NULL;
    int64_t deadline = hoop__deadline_ns(5000);
    while (st == HOOP_OK && !*send && hoop__now_ns() < deadline) {
        st = tp->connect(*ctx, handle, 3, send);
        usleep(100);
    }
    return st != HOOP_OK ? st : *send ? HOOP_OK : HOOP_ERR_TIMEOUT;
}

/* The child of test_fork: sends FORK_BYTES, then keeps its end open until the parent
 * writes a byte or closes `go` (so the parent reads everything before the close). */
static int child_send(void *handle, int go)
{
    void *ctx = NULL, *req = NULL;
    struct hoop_tp_comm *send;
    unsigned char *buf = malloc(FORK_BYTES);
    char b;
    double ms;
    if (!buf || child_connect(handle, &ctx, &send) != HOOP_OK) return 10;
    fill_random(buf, FORK_BYTES, FORK_SEED);
    if (tp->isend(send, buf, FORK_BYTES, NULL, &req) != HOOP_OK) return 11;
    if (wait_req(req, 10000, &ms) != HOOP_OK) return 12;
    struct pollfd pfd = {.fd = go, .events = POLLIN};
    if (poll(&pfd, 1, 10000) != 1 || read(go, &b, 1) != 1) return 13;
    if (tp->close(send) != HOOP_OK || tp->finalize(ctx) != HOOP_OK) return 14;
    free(buf);
    return 0;
}

/* Accepts one comm on listen within 5 s, failing the test if the child dies first. */
static struct hoop_tp_comm *accept_from(struct hoop_tp_comm *listen, pid_t child)
{
    struct hoop_tp_comm *recv = NULL;
    int64_t deadline = hoop__deadline_ns(5000);
    while (!recv && hoop__now_ns() < deadline) {
        int status = 0;
        ck_assert_int_eq(tp->accept(listen, &recv), HOOP_OK);
        ck_assert_msg(recv || waitpid(child, &status, WNOHANG) == 0, "child exited with %d",
                      WEXITSTATUS(status));
        usleep(100);
    }
    ck_assert_ptr_nonnull(recv);
    return recv;
}

/* 8 MiB from another process through the default ring, checked byte for byte. */
START_TEST(test_fork)
{
    void *ctx;
    struct hoop_tp_comm *listen, *recv;
    unsigned char handle[HOOP_TP_HANDLE_MAX];
    int go[2], status;
    make_ctx(&ctx, 0, "fork", 0);
    ck_assert_int_eq(tp->listen(ctx, handle, &listen), HOOP_OK);
    ck_assert_int_eq(pipe(go), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(go[1]);
        _exit(child_send(handle, go[0]));
    }
    close(go[0]);
    recv = accept_from(listen, pid);
    ck_assert_int_eq(recv->peer, 1);
    ck_assert_int_eq(recv->channel, 3);
    unsigned char *want = malloc(FORK_BYTES), *got = calloc(FORK_BYTES, 1);
    void *req = NULL;
    double ms;
    fill_random(want, FORK_BYTES, FORK_SEED);
    ck_assert_int_eq(tp->irecv(recv, got, FORK_BYTES, NULL, &req), HOOP_OK);
    ck_assert_int_eq(wait_req(req, 10000, &ms), HOOP_OK);
    ck_assert_msg(memcmp(want, got, FORK_BYTES) == 0, "8 MiB from the child corrupted");
    ck_assert_int_eq(write(go[1], "x", 1), 1);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    close(go[1]);
    free(want);
    free(got);
    ck_assert_int_eq(tp->close(recv), HOOP_OK);
    ck_assert_int_eq(tp->close(listen), HOOP_OK);
    ck_assert_int_eq(tp->finalize(ctx), HOOP_OK);
}
END_TEST

/* A peer process SIGKILLed while we wait on an irecv: HOOP_ERR_REMOTE within 2 s. */
START_TEST(test_fork_kill)
{
    void *ctx;
    struct hoop_tp_comm *listen, *recv;
    unsigned char handle[HOOP_TP_HANDLE_MAX];
    int hold[2], status, done = 1;
    make_ctx(&ctx, 0, "fork", 4096);
    ck_assert_int_eq(tp->listen(ctx, handle, &listen), HOOP_OK);
    ck_assert_int_eq(pipe(hold), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        void *cctx;
        struct hoop_tp_comm *send;
        char b;
        close(hold[1]);
        if (child_connect(handle, &cctx, &send) != HOOP_OK) _exit(10);
        _exit(read(hold[0], &b, 1) == 0 ? 0 : 11); /* blocks until killed */
    }
    close(hold[0]);
    recv = accept_from(listen, pid);
    char buf[64];
    void *req = NULL;
    double ms;
    ck_assert_int_eq(tp->irecv(recv, buf, sizeof(buf), NULL, &req), HOOP_OK);
    ck_assert_int_eq(tp->test(req, &done, NULL), HOOP_OK);
    ck_assert_int_eq(done, 0);
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    ck_assert_int_eq(wait_req(req, 5000, &ms), HOOP_ERR_REMOTE);
    ck_assert_msg(ms < 2000, "peer death noticed after %.0f ms", ms);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "rank 1"));
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    close(hold[1]);
    ck_assert_int_eq(tp->close(recv), HOOP_OK);
    ck_assert_int_eq(tp->close(listen), HOOP_OK);
    ck_assert_int_eq(tp->finalize(ctx), HOOP_OK);
}
END_TEST

/* A message of another length than its receive fails that receive once
 * (HOOP_ERR_INTERNAL, both lengths, from the frame word, frame.h); the stream is then out
 * of step and the next receive says so. */
START_TEST(test_wrong_length)
{
    pair p;
    ck_assert_int_eq(connect_pair(&p, NULL, NULL, 4096), HOOP_OK);
    check_wrong_length(&p, 0);
    close_pair(&p);
}
END_TEST

// ----- peer close ---------------------------------------------------------------------------

/* Bytes sent before a graceful close are still delivered; the next irecv then fails. */

START_TEST(test_request_pool)
{
    pair p;
    ck_assert_int_eq(connect_pair(&p, NULL, NULL, 4096), HOOP_OK);
    check_request_pool(&p);
}
END_TEST

START_TEST(test_peer_close)
{
    pair p;
    unsigned char out[100], in[100];
    void *sreq = NULL, *rreq = NULL;
    double ms;
    fill_random(out, sizeof(out), 5);
    ck_assert_int_eq(connect_pair(&p, NULL, NULL, 4096), HOOP_OK);
    ck_assert_int_eq(tp->isend(p.send, out, sizeof(out), NULL, &sreq), HOOP_OK);
    ck_assert_int_eq(finish(sreq, NULL, sizeof(out)), HOOP_OK);
    ck_assert_int_eq(tp->close(p.send), HOOP_OK);
    p.send = NULL;
    ck_assert_int_eq(tp->irecv(p.recv, in, sizeof(in), NULL, &rreq), HOOP_OK);
    ck_assert_int_eq(finish(NULL, rreq, sizeof(in)), HOOP_OK);
    ck_assert(memcmp(out, in, sizeof(in)) == 0);
    ck_assert_int_eq(tp->irecv(p.recv, in, 8, NULL, &rreq), HOOP_OK);
    ck_assert_int_eq(wait_req(rreq, 3000, &ms), HOOP_ERR_REMOTE);
    ck_assert_msg(ms < 1000, "close noticed after %.0f ms", ms);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "rank 0"));
    /* The comm stays failed: new requests fail at once. */
    ck_assert_int_eq(tp->irecv(p.recv, in, 8, NULL, &rreq), HOOP_ERR_REMOTE);
    close_pair(&p);
}
END_TEST

/* A receiver that sleeps between tests, as the progress thread does (test, pollfds, poll),
 * hears of its peer's exit at once: the test that finds the peer gone (a peek at the
 * socket) leaves the failure to the next test, so pollfds must not let the caller sleep
 * before that one (it slept until its poll timed out: the fault matrix saw survivors of a
 * killed rank fail only after the comm's 1 s grace, kill@checkpoint over shm). */
START_TEST(test_peer_close_wakes_sleeper)
{
    pair p;
    unsigned char in[8];
    void *rreq = NULL;
    int done = 0;
    hoop_status st = HOOP_OK;
    ck_assert_int_eq(connect_pair(&p, NULL, NULL, 4096), HOOP_OK);
    ck_assert_int_eq(tp->irecv(p.recv, in, sizeof(in), NULL, &rreq), HOOP_OK);
    ck_assert_int_eq(tp->test(rreq, &done, NULL), HOOP_OK);
    ck_assert_int_eq(done, 0);
    ck_assert_int_eq(tp->close(p.send), HOOP_OK);
    p.send = NULL;
    int64_t t0 = hoop__now_ns();
    while (st == HOOP_OK && hoop__now_ns() - t0 < 3000000000LL) {
        st = tp->test(rreq, &done, NULL);
        if (st != HOOP_OK) break;
        struct pollfd fds[4];
        int n = tp->pollfds(p.recv, fds, 4);
        for (int k = 0; k < n; k++) /* as the progress thread does: nothing asked, no wait */
            if (fds[k].events == 0) fds[k].fd = -1;
        poll(fds, (nfds_t)n, 1000);
    }
    double ms = (double)(hoop__now_ns() - t0) / 1e6;
    ck_assert_int_eq(st, HOOP_ERR_REMOTE);
    ck_assert_msg(ms < 500, "the close was noticed after %.0f ms of sleeping", ms);
    close_pair(&p);
}
END_TEST

/* A sender stalled on a full ring whose receiver closes fails within 1 s. */
START_TEST(test_stalled_sender)
{
    enum { N = 1 << 20 };
    pair p;
    unsigned char *buf = calloc(N, 1);
    void *sreq = NULL;
    int done = 1;
    double ms;
    ck_assert_int_eq(connect_pair(&p, NULL, NULL, 4096), HOOP_OK);
    ck_assert_int_eq(tp->isend(p.send, buf, N, NULL, &sreq), HOOP_OK);
    ck_assert_int_eq(tp->test(sreq, &done, NULL), HOOP_OK);
    ck_assert_int_eq(done, 0);
    ck_assert_int_eq(tp->close(p.recv), HOOP_OK);
    p.recv = NULL;
    ck_assert_int_eq(wait_req(sreq, 3000, &ms), HOOP_ERR_REMOTE);
    ck_assert_msg(ms < 1000, "close noticed after %.0f ms", ms);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "rank 1"));
    free(buf);
    close_pair(&p);
}
END_TEST

/* Fault injection: the transport calls recv(MSG_PEEK) only to look for EOF on a link.
 * This wrapper, when armed, first runs a hook (disarmed before it runs), so a test can
 * put the peer's actions exactly between the transport's look at the ring and its peek. */
static void (*peek_hook)(void *);
static void *peek_arg;

ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    if ((flags & MSG_PEEK) && peek_hook) {
        void (*fn)(void *) = peek_hook;
        peek_hook = NULL;
        fn(peek_arg);
    }
    return recvfrom(fd, buf, n, flags, NULL, NULL);
}

struct late_send {
    pair *p;
    const unsigned char *msg;
    hoop_status st;
    int done, ran;
};

/* The sender's whole life after the receiver found the ring empty: send, complete, close. */
static void send_then_close(void *arg)
{
    struct late_send *ls = arg;
    void *req = NULL;
    ls->ran = 1;
    ls->st = tp->isend(ls->p->send, ls->msg, 8, NULL, &req);
    if (ls->st == HOOP_OK) ls->st = tp->test(req, &ls->done, NULL);
    if (ls->st == HOOP_OK) ls->st = tp->close(ls->p->send);
    ls->p->send = NULL;
}

/* A sender that completes its send and closes between the receiver's load of `head` and
 * its EOF peek: the 8 bytes are in the ring before the close, so the receiver must get
 * them (a graceful close must not lose completed sends). */
START_TEST(test_close_race)
{
    pair p;
    unsigned char out[8] = {1, 2, 3, 4, 5, 6, 7, 8}, in[8] = {0};
    void *rreq = NULL;
    int done = 0;
    ck_assert_int_eq(connect_pair(&p, NULL, NULL, 4096), HOOP_OK);
    ck_assert_int_eq(tp->irecv(p.recv, in, sizeof(in), NULL, &rreq), HOOP_OK);
    struct late_send ls = {.p = &p, .msg = out};
    usleep(1000); /* past the transport's peek interval */
    peek_arg = &ls;
    peek_hook = send_then_close;
    hoop_status st = tp->test(rreq, &done, NULL);
    peek_hook = NULL;
    /* If the transport stops peeking with recv(MSG_PEEK), move the hook to its new probe. */
    ck_assert_msg(ls.ran, "the receiver did not peek at its socket on an empty ring");
    ck_assert_int_eq(ls.st, HOOP_OK);
    ck_assert_int_eq(ls.done, 1);
    if (st == HOOP_OK && !done) {
        double ms;
        st = wait_req(rreq, 1000, &ms);
        done = st == HOOP_OK;
    }
    ck_assert_msg(st == HOOP_OK, "receiver failed with 8 completed bytes in the ring: %s",
                  hoop_last_error());
    ck_assert(done);
    ck_assert(memcmp(out, in, sizeof(in)) == 0);
    close_pair(&p);
}
END_TEST

// ----- set-up errors --------------------------------------------------------------------------

START_TEST(test_wrong_token)
{
    static const char *acceptor_token[] = {"b", "b", NULL};
    static const char *connector_token[] = {"a", "", "b"};
    pair p;
    ck_assert_int_eq(connect_pair(&p, connector_token[_i], acceptor_token[_i], 4096),
                     HOOP_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "refused"));
    ck_assert_ptr_null(p.send);
    for (int i = 0; i < 50 && !p.recv; i++) { /* the stranger is never handed out */
        ck_assert_int_eq(tp->accept(p.listen, &p.recv), HOOP_OK);
        usleep(200);
    }
    ck_assert_ptr_null(p.recv);
    close_pair(&p);
}
END_TEST

/* Out of descriptors: with none left, accept fails at once with HOOP_ERR_SYSTEM naming
 * the limit (_i = 0); with one left, accept takes the connection but the kernel cannot
 * install the ring's memfd and eventfds that came with its hello (MSG_CTRUNC), which is
 * this process's limit, not a bad peer: HOOP_ERR_SYSTEM naming it too (_i = 1), where
 * the hello used to be refused as "did not arrive" and the link waited for until the
 * timeout. */
START_TEST(test_out_of_fds)
{
    void *ctx_a, *ctx_b;
    struct hoop_tp_comm *listen, *send = NULL, *recv = NULL;
    unsigned char handle[HOOP_TP_HANDLE_MAX];
    fd_fill f;
    tp_make_ctx(&ctx_a, 0, "tok", (struct hoop_tp_config){.ring_bytes = 4096});
    tp_make_ctx(&ctx_b, 1, "tok", (struct hoop_tp_config){.ring_bytes = 4096});
    ck_assert_int_eq(tp->listen(ctx_b, handle, &listen), HOOP_OK);
    ck_assert_int_eq(tp->connect(ctx_a, handle, 0, &send), HOOP_OK); /* hello sent */
    ck_assert_ptr_null(send);
    tp_fill(&f, _i);
    int64_t t0 = hoop__now_ns();
    ck_assert_int_eq(tp->accept(listen, &recv), HOOP_ERR_SYSTEM);
    ck_assert_ptr_null(recv);
    if (_i == 0)
        assert_error_has("rank 1: shm transport cannot accept a connection: Too many open",
                         "(RLIMIT_NOFILE soft limit 64, hard limit ");
    else
        assert_error_has("cannot take the ring and eventfds of a link from rank 0: Too many open",
                         "(RLIMIT_NOFILE soft limit 64, hard limit ");
    ck_assert_int_lt(hoop__now_ns() - t0, 1000000000LL);
    tp_unfill(&f);
    ck_assert_int_eq(tp->close(listen), HOOP_OK);
    ck_assert_int_eq(tp->finalize(ctx_a), HOOP_OK);
    ck_assert_int_eq(tp->finalize(ctx_b), HOOP_OK);
}
END_TEST

/* tp_harness.h's check_peer_gone_in_handshake. */
START_TEST(test_peer_gone_in_handshake)
{
    check_peer_gone_in_handshake((struct hoop_tp_config){.ring_bytes = 4096});
}
END_TEST

/* Parses /proc/sys/kernel/random/boot_id (36 characters with dashes) into 16 bytes. */
static void read_boot_id(uint8_t id[16])
{
    char text[64] = {0};
    unsigned v[16];
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(text, sizeof(text), f));
    fclose(f);
    ck_assert_int_eq(sscanf(text, "%2x%2x%2x%2x-%2x%2x-%2x%2x-%2x%2x-%2x%2x%2x%2x%2x%2x", &v[0],
                            &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10],
                            &v[11], &v[12], &v[13], &v[14], &v[15]),
                     16);
    for (int i = 0; i < 16; i++) id[i] = (uint8_t)v[i];
}

START_TEST(test_reachable)
{
    void *a, *b;
    static struct hoop_tp_comm dummy;
    struct hoop_tp_comm *listen, *send = &dummy;
    unsigned char handle[HOOP_TP_HANDLE_MAX], other[HOOP_TP_HANDLE_MAX];
    struct shm_handle_view h;
    struct stat ns;
    uint8_t boot_id[16];
    char prefix[32];
    make_ctx(&a, 0, "t", 0);
    make_ctx(&b, 5, "t", 0);
    ck_assert_int_eq(tp->listen(b, handle, &listen), HOOP_OK);
    /* The view matches what shm.c publishes, checked against independent sources. */
    memcpy(&h, handle, sizeof(h));
    read_boot_id(boot_id);
    ck_assert_int_eq(stat("/proc/self/ns/net", &ns), 0);
    ck_assert_uint_eq(h.magic, 0x6873686du);
    ck_assert_int_eq(h.rank, 5);
    ck_assert(memcmp(h.boot_id, boot_id, 16) == 0);
    ck_assert_uint_eq(h.netns, (uint64_t)ns.st_ino);
    snprintf(prefix, sizeof(prefix), "hoop-shm-%d-", (int)getpid());
    ck_assert_int_eq(strncmp(h.name, prefix, strlen(prefix)), 0);
    ck_assert_ptr_null(h.pending);
    ck_assert_uint_eq(h.uid, (uint32_t)getuid());
    ck_assert_int_eq(tp->reachable(b, handle), 1); /* its own handle */
    ck_assert_int_eq(tp->reachable(a, handle), 1); /* another context of this process */
    for (int k = 0; k < 4; k++) {
        memcpy(other, handle, sizeof(other));
        if (k == 3) other[offsetof(struct shm_handle_view, uid)] ^= 0x01; /* another user */
        if (k == 0) other[offsetof(struct shm_handle_view, boot_id) + 5] ^= 0x10;
        if (k == 1) other[offsetof(struct shm_handle_view, netns)] ^= 0x01;
        if (k == 2) other[offsetof(struct shm_handle_view, magic)] ^= 0x01;
        ck_assert_msg(tp->reachable(a, other) == 0, "altered handle %d reachable", k);
        ck_assert_int_eq(tp->connect(a, other, 0, &send), HOOP_ERR_INVALID);
        ck_assert_ptr_null(send);
    }
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "rank 5"));
    ck_assert_int_eq(tp->close(listen), HOOP_OK);
    ck_assert_int_eq(tp->finalize(a), HOOP_OK);
    ck_assert_int_eq(tp->finalize(b), HOOP_OK);
}
END_TEST

START_TEST(test_init_ring)
{
    static const size_t bad[] = {5000, 1024, 2048, 4097, (size_t)3 << 20};
    static const size_t good[] = {0, 4096, 8192, (size_t)1 << 20};
    char name[32];
    void *ctx = NULL;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct hoop_tp_config cfg = {.rank = 0, .ring_bytes = bad[i]};
        ck_assert_int_eq(tp->init(&cfg, &ctx), HOOP_ERR_INVALID);
        snprintf(name, sizeof(name), "%zu", bad[i]);
        ck_assert_ptr_nonnull(strstr(hoop_last_error(), name));
    }
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct hoop_tp_config cfg = {.rank = 0, .ring_bytes = good[i]};
        ck_assert_int_eq(tp->init(&cfg, &ctx), HOOP_OK);
        ck_assert_int_eq(tp->finalize(ctx), HOOP_OK);
    }
}
END_TEST

// ----- doorbells: sleeping on pollfds -------------------------------------------------------

struct side {
    struct hoop_tp_comm *comm;
    unsigned char *buf;
    size_t bytes;
    int send;     /* isend (1) or irecv (0) */
    int delay_ms; /* before posting */
    int sleep;    /* sleep on pollfds whenever the request is not done */
    int sleeps, timeouts;
    hoop_status st;
};

/* Posts one request on s->comm and drives it to completion (5 s), spinning on test or
 * sleeping on the comm's pollfds (5 s per sleep; a sleep that times out is counted). */
static void *run_side(void *arg)
{
    struct side *s = arg;
    void *req = NULL;
    int done = 0;
    usleep((useconds_t)s->delay_ms * 1000);
    s->st = s->send ? tp->isend(s->comm, s->buf, s->bytes, NULL, &req)
                    : tp->irecv(s->comm, s->buf, s->bytes, NULL, &req);
    int64_t deadline = hoop__deadline_ns(10000);
    while (s->st == HOOP_OK && hoop__now_ns() < deadline) {
        s->st = tp->test(req, &done, NULL);
        if (s->st != HOOP_OK || done) break;
        if (!s->sleep) continue;
        struct pollfd fds[4];
        int n = tp->pollfds(s->comm, fds, 4);
        s->sleeps++;
        if (poll(fds, (nfds_t)n, 5000) == 0) s->timeouts++;
    }
    if (s->st == HOOP_OK && !done) s->st = HOOP_ERR_TIMEOUT;
    return NULL;
}

/* _i = 0: the receiver sleeps and the sender's first bytes wake it; _i = 1: a sender
 * stalled on a full 4 KiB ring sleeps and the receiver's consumption wakes it. Then a
 * 1 MiB transfer with both sides sleeping whenever stalled: a lost wake-up costs a 5 s
 * poll timeout. */
START_TEST(test_doorbell)
{
    enum { N = 16384, BIG = 1 << 20 };
    int sender_sleeps = _i == 1, done = 0;
    pair p;
    pthread_t th;
    unsigned char *a = malloc(BIG), *b = calloc(BIG, 1);
    void *req = NULL;
    ck_assert_int_eq(connect_pair(&p, NULL, NULL, 4096), HOOP_OK);
    fill_random(a, BIG, 99);
    size_t bytes = sender_sleeps ? N : 4;
    struct hoop_tp_comm *mine = sender_sleeps ? p.send : p.recv;
    struct side other = {.comm = sender_sleeps ? p.recv : p.send,
                         .buf = sender_sleeps ? b : a,
                         .bytes = bytes,
                         .send = !sender_sleeps,
                         .delay_ms = 100};
    if (sender_sleeps)
        ck_assert_int_eq(tp->isend(mine, a, bytes, NULL, &req), HOOP_OK);
    else
        ck_assert_int_eq(tp->irecv(mine, b, bytes, NULL, &req), HOOP_OK);
    ck_assert_int_eq(tp->test(req, &done, NULL), HOOP_OK);
    ck_assert_int_eq(done, 0);
    struct pollfd fds[4];
    int n = tp->pollfds(mine, fds, 4);
    ck_assert_int_ge(n, 1);
    ck_assert_int_le(n, 4);
    ck_assert_int_eq(pthread_create(&th, NULL, run_side, &other), 0);
    int64_t t0 = hoop__now_ns();
    int r = poll(fds, (nfds_t)n, 5000);
    double ms = (double)(hoop__now_ns() - t0) / 1e6;
    ck_assert_int_ge(r, 1);
    ck_assert_msg(ms >= 50, "poll returned after %.1f ms, before the peer acted", ms);
    ck_assert_msg(ms < 2000, "poll woke after %.0f ms", ms);
    double wait_ms;
    ck_assert_int_eq(wait_req(req, 5000, &wait_ms), HOOP_OK);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(other.st, HOOP_OK);
    ck_assert(memcmp(a, b, bytes) == 0);
    /* Both sides sleep whenever stalled. */
    memset(b, 0, BIG);
    struct side tx = {.comm = p.send, .buf = a, .bytes = BIG, .send = 1, .sleep = 1};
    struct side rx = {.comm = p.recv, .buf = b, .bytes = BIG, .send = 0, .sleep = 1};
    ck_assert_int_eq(pthread_create(&th, NULL, run_side, &tx), 0);
    run_side(&rx);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(tx.st, HOOP_OK);
    ck_assert_int_eq(rx.st, HOOP_OK);
    ck_assert_int_eq(tx.timeouts + rx.timeouts, 0);
    ck_assert_int_gt(tx.sleeps + rx.sleeps, 0);
    ck_assert(memcmp(a, b, BIG) == 0);
    free(a);
    free(b);
    close_pair(&p);
}
END_TEST

// ----- descriptors --------------------------------------------------------------------------

/* A full cycle (connect, send, close), a refused token and a connect abandoned before the
 * verdict leave exactly the descriptors that were open before. */
START_TEST(test_no_fd_leak)
{
    unsigned char msg[5000], in[5000];
    int before = open_fds();
    pair p;
    void *sreq, *rreq;
    fill_random(msg, sizeof(msg), 3);
    ck_assert_int_eq(connect_pair(&p, "k", "k", 4096), HOOP_OK);
    ck_assert_int_ge(open_fds(), before + 8); /* sockets, memfds and eventfds are counted */
    ck_assert_int_eq(tp->isend(p.send, msg, sizeof(msg), NULL, &sreq), HOOP_OK);
    ck_assert_int_eq(tp->irecv(p.recv, in, sizeof(in), NULL, &rreq), HOOP_OK);
    ck_assert_int_eq(finish(sreq, rreq, sizeof(msg)), HOOP_OK);
    ck_assert(memcmp(msg, in, sizeof(in)) == 0);
    close_pair(&p);
    ck_assert_int_eq(open_fds(), before);
    ck_assert_int_eq(connect_pair(&p, "k", "x", 4096), HOOP_ERR_REMOTE);
    close_pair(&p);
    ck_assert_int_eq(open_fds(), before);
    /* Abandoned: the listener never accepts; finalize closes the half-open comm. */
    check_abandoned_connect((struct hoop_tp_config){.ring_bytes = 4096});
}
END_TEST

/* A hello of protocol version 1 (a build before frame words) is refused with the reason;
 * the same hello at version 2 is accepted (offsets as test_extra_fds's). */
START_TEST(test_old_version)
{
    unsigned char hello[HOOP__SHM_HELLO_BYTES] = {0};
    uint32_t magic = 0x6873686du;
    uint16_t version = 1;
    uint64_t ring = 4096;
    char token[HOOP_TP_TOKEN_MAX] = "k";
    const char *why;
    memcpy(hello, &magic, 4);
    memcpy(hello + 4, &version, 2);
    memcpy(hello + 16, &ring, 8);
    memcpy(hello + 24, "k", 2);
    ck_assert_int_eq(hoop__shm_hello_check(hello, sizeof(hello), 3, 0, 1, token, &why), 0);
    ck_assert_str_eq(why, "another shm protocol version");
    version = 2;
    memcpy(hello + 4, &version, 2);
    ck_assert_int_eq(hoop__shm_hello_check(hello, sizeof(hello), 3, 0, 1, token, &why), 1);
}
END_TEST

/* A hello that brings more descriptors than the three it needs is refused, and every
 * descriptor that arrived with it is closed: the control buffer, sized for three, has
 * room for a fourth through its alignment. Offsets written out: the handle's abstract
 * SOCK_SEQPACKET socket name at 32 (40 bytes); the hello's magic 0, version 4, rank 8, channel 12,
 * ring bytes 16, token 24. */
START_TEST(test_extra_fds)
{
    unsigned char handle[HOOP_TP_HANDLE_MAX], hello[HOOP__SHM_HELLO_BYTES] = {0};
    void *ctx;
    struct hoop_tp_comm *listen, *got = NULL;
    int before = open_fds();
    tp_make_ctx(&ctx, 1, "k", (struct hoop_tp_config){.ring_bytes = 4096});
    ck_assert_int_eq(tp->listen(ctx, handle, &listen), HOOP_OK);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t len = strnlen((const char *)handle + 32, 40);
    memcpy(a.sun_path + 1, handle + 32, len);
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    ck_assert_int_eq(connect(sock, (struct sockaddr *)&a,
                             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)),
                     0);
    uint32_t magic = 0x6873686du;
    uint16_t version = 2;
    int32_t rank = 0, channel = 7;
    uint64_t ring = 4096;
    memcpy(hello, &magic, 4);
    memcpy(hello + 4, &version, 2);
    memcpy(hello + 8, &rank, 4);
    memcpy(hello + 12, &channel, 4);
    memcpy(hello + 16, &ring, 8);
    memcpy(hello + 24, "k", 2);
    int fds[4];
    for (int i = 0; i < 4; i++) ck_assert_int_ge(fds[i] = eventfd(0, EFD_CLOEXEC), 0);
    union {
        char buf[CMSG_SPACE(sizeof(fds))];
        struct cmsghdr align;
    } cbuf;
    struct iovec iov = {.iov_base = hello, .iov_len = sizeof(hello)};
    struct msghdr m = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = cbuf.buf,
                       .msg_controllen = sizeof(cbuf.buf)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(fds));
    memcpy(CMSG_DATA(cm), fds, sizeof(fds));
    ck_assert_int_eq(sendmsg(sock, &m, MSG_NOSIGNAL), (ssize_t)sizeof(hello));
    for (int i = 0; i < 4; i++) close(fds[i]);
    char v = -1;
    for (int i = 0; i < 2000 && v == -1; i++) {
        ck_assert_int_eq(tp->accept(listen, &got), HOOP_OK);
        if (recv(sock, &v, 1, MSG_DONTWAIT) != 1) v = -1, usleep(1000);
    }
    ck_assert_int_eq(v, 0); /* refused */
    ck_assert_ptr_null(got);
    close(sock);
    ck_assert_int_eq(tp->close(listen), HOOP_OK);
    ck_assert_int_eq(tp->finalize(ctx), HOOP_OK);
    ck_assert_int_eq(open_fds(), before);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shm");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_vtable);
    tcase_add_loop_test(tc, test_send_recv, 0, 2);
    tcase_add_test(tc, test_request_pool);
    tcase_add_test(tc, test_init_ring);
    tcase_add_test(tc, test_consumer);
    tcase_add_test(tc, test_pad_full);
    tcase_add_test(tc, test_reachable);
    tcase_add_loop_test(tc, test_doorbell, 0, 2);
    suite_add_tcase(s, tc);
    TCase *proc = tcase_create("process");
    tcase_set_timeout(proc, 30);
    tcase_add_test(proc, test_fork);
    tcase_add_test(proc, test_fork_kill);
    suite_add_tcase(s, proc);
    TCase *err = tcase_create("errors");
    tcase_set_timeout(err, 30);
    tcase_add_test(err, test_peer_close);
    tcase_add_test(err, test_wrong_length);
    tcase_add_test(err, test_stalled_sender);
    tcase_add_test(err, test_close_race);
    tcase_add_loop_test(err, test_wrong_token, 0, 3);
    tcase_add_test(err, test_peer_gone_in_handshake);
    tcase_add_test(err, test_peer_close_wakes_sleeper);
    tcase_add_test(err, test_no_fd_leak);
    tcase_add_test(err, test_extra_fds);
    tcase_add_test(err, test_old_version);
    tcase_add_loop_test(err, test_out_of_fds, 0, 2);
    suite_add_tcase(s, err);
    return run_suite(s);
}
