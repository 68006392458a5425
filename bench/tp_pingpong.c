/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench/tp_pingpong.c -- one transport's own 8-byte (or SIZE-byte) ping-pong between two
 * processes, below the collectives: the figure to hold against ib_write_lat (or any
 * link's one-way latency). A benchmark, not a test.
 *
 *   bench/tp_pingpong [-x] TRANSPORT [ITERS [SIZE [HCA_A HCA_B]]]
 *
 * TRANSPORT is tcp, shm or ib; for ib, HCA_A and HCA_B are the two ends' HOOP_IB_HCA
 * (default: the first device for both). Prints the mean one-way time in microseconds
 * (round trip / 2) over ITERS round trips (default 2000) after 100 untimed ones. With
 * -x, both ends send at once and then receive, and it prints the mean time of one such
 * exchange: what a 2-rank all-reduce of one message each way cannot beat on that link.
 * Exit 0, or 1 with the failing call's message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "transport/registry.h"

static const struct hoop_transport *tp;

static int fail(const char *what)
{
    fprintf(stderr, "tp_pingpong: %s: %s\n", what, hoop_last_error());
    return 1;
}

static int finish(void *req)
{
    int done = 0;
    int64_t deadline = hoop__deadline_ns(30000);
    while (!done && hoop__now_ns() < deadline)
        if (tp->test(req, &done, NULL) != HOOP_OK) return fail("test");
    return done ? 0 : fail("timeout");
}

int main(int argc, char **argv)
{
    int exchange = argc > 1 && strcmp(argv[1], "-x") == 0;
    if (exchange) argc--, argv++;
    tp = argc > 1 ? hoop__transport_find(argv[1]) : NULL;
    long iters = argc > 2 ? atol(argv[2]) : 2000;
    size_t size = argc > 3 ? (size_t)atol(argv[3]) : 8;
    if (!tp || iters < 1 || size < 1) {
        fprintf(stderr, "usage: tp_pingpong [-x] tcp|shm|ib [ITERS [SIZE [HCA_A HCA_B]]]\n");
        return 2;
    }
    int ab[2], ba[2];
    unsigned char h[2][HOOP_TP_HANDLE_MAX];
    if (pipe(ab) != 0 || pipe(ba) != 0) return 1;
    pid_t pid = fork();
    int me = pid == 0;
    struct hoop_tp_config cfg = {.rank = me, .token = "pingpong", .nsocks = 1};
    cfg.ib = (struct hoop_tp_ib_config){.hca = argc > 5 ? argv[4 + me] : NULL,
                                        .gid_index = -1,
                                        .timeout = 14,
                                        .retry_cnt = 7,
                                        .reg_cache = 1};
    void *ctx;
    struct hoop_tp_comm *l, *s = NULL, *r = NULL;
    if (tp->init(&cfg, &ctx) != HOOP_OK) return fail("init");
    if (tp->listen(ctx, h[me], &l) != HOOP_OK) return fail("listen");
    if (write(me ? ba[1] : ab[1], h[me], sizeof(h[me])) != (ssize_t)sizeof(h[me]) ||
        read(me ? ab[0] : ba[0], h[!me], sizeof(h[!me])) != (ssize_t)sizeof(h[!me]))
        return 1;
    while (!s || !r) {
        if (!s && tp->connect(ctx, h[!me], 0, &s) != HOOP_OK) return fail("connect");
        if (!r && tp->accept(l, &r) != HOOP_OK) return fail("accept");
    }
    char *buf = calloc(1, size), *buf2 = calloc(1, size);
    void *q;
    int64_t t0 = 0;
    for (long i = -100; i < iters; i++) {
        if (i == 0) t0 = hoop__now_ns();
        if (exchange) { /* both ends send at once, then both receive */
            void *qs, *qr;
            if (tp->isend(s, buf, size, NULL, &qs) != HOOP_OK) return fail("isend");
            if (tp->irecv(r, buf2, size, NULL, &qr) != HOOP_OK) return fail("irecv");
            if (finish(qs) || finish(qr)) return 1;
            continue;
        }
        for (int step = 0; step < 2; step++) {
            int sending = (step == 0) == (me == 0);
            hoop_status st =
                sending ? tp->isend(s, buf, size, NULL, &q) : tp->irecv(r, buf, size, NULL, &q);
            if (st != HOOP_OK) return fail(sending ? "isend" : "irecv");
            if (finish(q)) return 1;
        }
    }
    if (!me) {
        if (exchange)
            printf("%s exchange %zu B: %.2f us (%ld exchanges)\n", tp->name, size,
                   (double)(hoop__now_ns() - t0) / 1e3 / (double)iters, iters);
        else
            printf("%s one-way %zu B: %.2f us (%ld round trips)\n", tp->name, size,
                   (double)(hoop__now_ns() - t0) / 1e3 / (double)iters / 2, iters);
        waitpid(pid, NULL, 0);
    }
    tp->close(s);
    tp->close(r);
    tp->close(l);
    tp->finalize(ctx);
    free(buf);
    free(buf2);
    return 0;
}
