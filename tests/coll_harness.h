/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/coll_harness.h -- N ranks as threads of one process, meeting through an
 * in-memory rendezvous (shared by the collective tests), and the env:// set-up of tests
 * whose ranks are processes (h_free_port, h_set_env).
 *
 * run_ranks(n, cfg, fn, user) starts n threads; each builds a communicator, calls
 * fn(ctx) and destroys the communicator. fn reports failures by filling ctx->err
 * (first failure only); the main thread asserts on them, so Check's assertions never
 * run off the main thread.
 */
#ifndef HOOP_TESTS_COLL_HARNESS_H
#define HOOP_TESTS_COLL_HARNESS_H

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hoop/collectives.h"
#include "hoop/comm.h"
#include "run_suite.h"

#define H_MAX_RANKS 8

typedef struct h_rank {
    int rank, n;
    hoop_comm *comm;
    void *user;
    char err[512];
    hoop_status init_st, destroy_st;
    const hoop_comm_config *base;
    hoop_rendezvous *rv;
    void (*fn)(struct h_rank *);
    pthread_barrier_t *bar;
    void **shared; /* one pointer per rank, for cross-rank comparisons */
} h_rank;

static void h_fail(h_rank *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void h_fail(h_rank *h, const char *fmt, ...)
{
    if (h->err[0]) return;
    int k = snprintf(h->err, sizeof(h->err), "rank %d/%d: ", h->rank, h->n);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->err + k, sizeof(h->err) - (size_t)k, fmt, ap);
    va_end(ap);
}

static void *h_main(void *arg)
{
    h_rank *h = arg;
    hoop_comm_config cfg = *h->base;
    cfg.rank = h->rank;
    cfg.world_size = h->n;
    cfg.rendezvous = h->rv;
    h->init_st = hoop_comm_init(&h->comm, &cfg);
    if (h->init_st != HOOP_OK) {
        h_fail(h, "hoop_comm_init: %s", hoop_last_error());
        return NULL;
    }
    h->fn(h);
    h->destroy_st = hoop_comm_destroy(h->comm);
    return NULL;
}

/* Runs fn on n thread-ranks and asserts that every one of them succeeded. */
static void run_ranks(int n, const hoop_comm_config *cfg, void (*fn)(h_rank *), void *user)
{
    hoop_comm_config def = HOOP_COMM_CONFIG_INIT;
    h_rank ranks[H_MAX_RANKS];
    pthread_t th[H_MAX_RANKS];
    pthread_barrier_t bar;
    void *shared[H_MAX_RANKS] = {0};
    hoop_rendezvous *rv;
    ck_assert_int_le(n, H_MAX_RANKS);
    ck_assert_int_eq(hoop_rendezvous_new(&rv, n), HOOP_OK);
    pthread_barrier_init(&bar, NULL, (unsigned)n);
    for (int r = 0; r < n; r++) {
        ranks[r] = (h_rank){.rank = r,
                            .n = n,
                            .user = user,
                            .base = cfg ? cfg : &def,
                            .rv = rv,
                            .fn = fn,
                            .bar = &bar,
                            .shared = shared};
        ck_assert_int_eq(pthread_create(&th[r], NULL, h_main, &ranks[r]), 0);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&bar);
    hoop_rendezvous_free(rv);
    for (int r = 0; r < n; r++) {
        ck_assert_msg(ranks[r].err[0] == '\0', "%s", ranks[r].err);
        ck_assert_int_eq(ranks[r].destroy_st, HOOP_OK);
    }
}

/* run_ranks with a default config whose every wait ends after timeout_ms (so a hang
 * fails the test instead of stalling it). */
static inline void run_ranks_ms(int n, int64_t timeout_ms, void (*fn)(h_rank *), void *user)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.timeout_ms = timeout_ms;
    run_ranks(n, &cfg, fn, user);
}

/* A loopback TCP port that was free a moment ago (for env:// tests with processes). */
static inline int h_free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* The env:// contract for rank of n at 127.0.0.1:port; timeout NULL keeps HOOP_TIMEOUT. */
static inline void h_set_env(int rank, int n, int port, const char *token, const char *timeout)
{
    char buf[32];
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(buf, sizeof(buf), "%d", port);
    setenv("MASTER_PORT", buf, 1);
    snprintf(buf, sizeof(buf), "%d", rank);
    setenv("RANK", buf, 1);
    snprintf(buf, sizeof(buf), "%d", n);
    setenv("WORLD_SIZE", buf, 1);
    setenv("HOOP_TOKEN", token, 1);
    if (timeout) setenv("HOOP_TIMEOUT", timeout, 1);
}

/* Runs the suite make_suite builds four times, over the executor's four byte paths:
 * tcp, shm, shm with the async memory table (src/collectives/memops.h: each copy and
 * reduction finishes only after it was polled once, as on a GPU, so a step that uses
 * memory before its operation finished fails), and tcp with every send and receive
 * staged through host regions (stage.c), as the buffers of a GPU will be. Returns how
 * many tests failed in all (needs run_suite.h's suite_failures). */
static inline int h_four_paths(Suite *(*make_suite)(void))
{
    static const char *transports[] = {"tcp", "shm", "shm", "tcp"};
    static const char *memops[] = {"sync", "sync", "async", "staged"};
    int failed = 0;
    for (int k = 0; k < 4; k++) {
        printf("transport %s, memory operations %s:\n", transports[k], memops[k]);
        setenv("HOOP_TRANSPORT", transports[k], 1);
        setenv("HOOP_MEMOPS", memops[k], 1);
        failed += suite_failures(make_suite());
    }
    return failed;
}

#endif /* HOOP_TESTS_COLL_HARNESS_H */
