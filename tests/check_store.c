/*
 * tests/check_store.c -- the rendezvous store (src/bootstrap/store_*.c).
 *
 * Every operation with exact values; blocking get and wait; barrier and all-gather with
 * ranks as threads, including a rank that never arrives; the token handshake; raw
 * sockets that send garbage, truncated, oversized or stalled frames while a good client
 * keeps being served; 1024 concurrent clients; port in use and restart on the same
 * port; an unresolvable host; a server that dies under a waiting client. Servers listen
 * on 127.0.0.1 port 0 (ephemeral) so parallel test runs cannot collide. Each test checks
 * that it leaves no file descriptor behind.
 */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "bootstrap/store_proto.h"
#include "core/clock.h"
#include "hoop/log.h"
#include "hoop/store.h"

#define TOKEN "t0k3n-for-tests"
#define NCLIENTS 1024

// ----- helpers ------------------------------------------------------------------------

static int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

static double ms_since(int64_t t0)
{
    return (double)(hoop__now_ns() - t0) / 1e6;
}

static void msleep(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

#define ASSERT_OK(call)                                                             \
    do {                                                                            \
        hoop_status st_ = (call);                                                   \
        ck_assert_msg(st_ == HOOP_OK, "%s -> %s: %s", #call, hoop_status_name(st_), \
                      hoop_last_error());                                           \
    } while (0)

#define ASSERT_MSG_HAS(fragment)                                                            \
    ck_assert_msg(strstr(hoop_last_error(), (fragment)) != NULL, "message '%s' lacks '%s'", \
                  hoop_last_error(), (fragment))

static hoop_store_server *start_server(const char *token, int64_t timeout_ms)
{
    hoop_store_config cfg = HOOP_STORE_CONFIG_INIT;
    cfg.host = "127.0.0.1";
    cfg.token = token;
    cfg.timeout_ms = timeout_ms;
    hoop_store_server *srv = NULL;
    ASSERT_OK(hoop_store_server_init(&srv, &cfg));
    ck_assert_int_gt(hoop_store_server_port(srv), 0);
    return srv;
}

static hoop_status connect_as(hoop_store **out, int port, const char *token, int rank, int ws,
                              int64_t timeout_ms)
{
    hoop_store_config cfg = HOOP_STORE_CONFIG_INIT;
    cfg.host = "127.0.0.1";
    cfg.port = port;
    cfg.token = token;
    cfg.rank = rank;
    cfg.world_size = ws;
    cfg.timeout_ms = timeout_ms;
    return hoop_store_init(out, &cfg);
}

static hoop_store *client(const hoop_store_server *srv, int rank, int ws)
{
    hoop_store *st = NULL;
    ASSERT_OK(connect_as(&st, hoop_store_server_port(srv), TOKEN, rank, ws, 10000));
    return st;
}

/* A port nobody listens on now: bound by a server that is then stopped. */
static int free_port(void)
{
    hoop_store_server *srv = start_server(TOKEN, 5000);
    int port = hoop_store_server_port(srv);
    ASSERT_OK(hoop_store_server_destroy(srv));
    return port;
}

/* Log sink: counts WARN lines and keeps the last one (tests run one per process). */
static atomic_int warn_lines;
static char last_warn[2048];
static pthread_mutex_t warn_mu = PTHREAD_MUTEX_INITIALIZER;

static void capture_log(hoop_log_level level, const char *line, void *user)
{
    (void)user;
    if (level != HOOP_LOG_WARN) return;
    pthread_mutex_lock(&warn_mu);
    snprintf(last_warn, sizeof(last_warn), "%s", line);
    pthread_mutex_unlock(&warn_mu);
    atomic_fetch_add(&warn_lines, 1);
}

// ----- core: every operation ------------------------------------------------------------

START_TEST(test_ops)
{
    int fds0 = count_fds();
    hoop_store_server *srv = start_server(TOKEN, 5000);
    hoop_store *st = client(srv, 2, 4);
    ck_assert_int_eq(hoop_store_rank(st), 2);
    ck_assert_int_eq(hoop_store_world_size(st), 4);
    char buf[64];
    size_t n = 0;
    int64_t v = 0, count = -1;
    int deleted = -1;

    ASSERT_OK(hoop_store_set(st, "alpha", "hello", 5));
    ASSERT_OK(hoop_store_get(st, "alpha", buf, sizeof(buf), &n, 1000));
    ck_assert_uint_eq(n, 5);
    ck_assert_mem_eq(buf, "hello", 5);
    ASSERT_OK(hoop_store_set(st, "alpha", "bye", 3)); /* overwrite */
    ASSERT_OK(hoop_store_get(st, "alpha", buf, sizeof(buf), &n, 1000));
    ck_assert_uint_eq(n, 3);
    ck_assert_mem_eq(buf, "bye", 3);
    /* Too small a buffer: INVALID, the full length, and the first cap bytes. */
    memset(buf, 0, sizeof(buf));
    ck_assert_int_eq(hoop_store_get(st, "alpha", buf, 2, &n, 1000), HOOP_ERR_INVALID);
    ck_assert_uint_eq(n, 3);
    ck_assert_mem_eq(buf, "by\0", 3);
    ASSERT_OK(hoop_store_set(st, "empty", NULL, 0));
    ASSERT_OK(hoop_store_get(st, "empty", NULL, 0, &n, 1000));
    ck_assert_uint_eq(n, 0);

    ASSERT_OK(hoop_store_add(st, "ctr", 5, &v));
    ck_assert_int_eq(v, 5);
    ASSERT_OK(hoop_store_add(st, "ctr", -7, &v));
    ck_assert_int_eq(v, -2);
    ASSERT_OK(hoop_store_add(st, "ctr", 0, NULL));
    ASSERT_OK(hoop_store_get(st, "ctr", buf, sizeof(buf), &n, 1000)); /* kept as text */
    ck_assert_uint_eq(n, 2);
    ck_assert_mem_eq(buf, "-2", 2);
    ASSERT_OK(hoop_store_add(st, "ctr", INT64_MAX, &v));
    ck_assert_int_eq(v, INT64_MAX - 2);
    ck_assert_int_eq(hoop_store_add(st, "ctr", 3, &v), HOOP_ERR_INVALID);
    ASSERT_MSG_HAS("overflow");
    ck_assert_int_eq(hoop_store_add(st, "alpha", 1, &v), HOOP_ERR_INVALID);
    ASSERT_MSG_HAS("not an integer");

    ASSERT_OK(hoop_store_num_keys(st, &count));
    ck_assert_int_eq(count, 3); /* alpha, empty, ctr */
    ASSERT_OK(hoop_store_delete(st, "empty", &deleted));
    ck_assert_int_eq(deleted, 1);
    ASSERT_OK(hoop_store_delete(st, "empty", &deleted));
    ck_assert_int_eq(deleted, 0);
    ASSERT_OK(hoop_store_num_keys(st, &count));
    ck_assert_int_eq(count, 2);

    const char *both[] = {"alpha", "ctr"};
    ASSERT_OK(hoop_store_wait(st, both, 2, 1000));
    const char *some[] = {"alpha", "nope1", "ctr", "nope2"};
    int64_t t0 = hoop__now_ns();
    ck_assert_int_eq(hoop_store_wait(st, some, 4, 200), HOOP_ERR_TIMEOUT);
    double ms = ms_since(t0);
    ck_assert_msg(ms >= 190 && ms < 1200, "wait timed out after %.0f ms", ms);
    ASSERT_MSG_HAS("2 of 4 keys missing");
    ASSERT_MSG_HAS("'nope1', 'nope2'");
    t0 = hoop__now_ns();
    ck_assert_int_eq(hoop_store_get(st, "nope1", buf, sizeof(buf), &n, 0), HOOP_ERR_TIMEOUT);
    ck_assert_double_lt(ms_since(t0), 100);
    ASSERT_MSG_HAS("key 'nope1' was not set");

    /* Keys: 512 bytes is the limit; values: HOOP_STORE_VALUE_MAX, exact round trip. */
    char key[HOOP_STORE_KEY_MAX + 2];
    memset(key, 'k', sizeof(key));
    key[HOOP_STORE_KEY_MAX] = '\0';
    ASSERT_OK(hoop_store_set(st, key, "x", 1));
    key[HOOP_STORE_KEY_MAX] = 'k';
    key[HOOP_STORE_KEY_MAX + 1] = '\0';
    ck_assert_int_eq(hoop_store_set(st, key, "x", 1), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop_store_set(st, "", "x", 1), HOOP_ERR_INVALID);
    size_t big = HOOP_STORE_VALUE_MAX;
    unsigned char *val = malloc(big), *back = malloc(big);
    ck_assert_ptr_nonnull(val);
    ck_assert_ptr_nonnull(back);
    for (size_t i = 0; i < big; i++) val[i] = (unsigned char)(i * 2654435761u >> 13);
    ASSERT_OK(hoop_store_set(st, "big", val, big));
    ASSERT_OK(hoop_store_get(st, "big", back, big, &n, 5000));
    ck_assert_uint_eq(n, big);
    ck_assert_int_eq(memcmp(val, back, big), 0);
    ck_assert_int_eq(hoop_store_set(st, "big", val, big + 1), HOOP_ERR_INVALID);
    free(val);
    free(back);

    ASSERT_OK(hoop_store_destroy(st));
    ASSERT_OK(hoop_store_server_destroy(srv));
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

// ----- core: get and wait block until another client sets the key -------------------------

struct setter {
    int port, delay_ms;
    const char *keys[3];
    int nkeys;
    hoop_status st;
};

static void *setter_main(void *arg)
{
    struct setter *s = arg;
    hoop_store *st = NULL;
    s->st = connect_as(&st, s->port, TOKEN, 1, 2, 5000);
    for (int i = 0; i < s->nkeys && s->st == HOOP_OK; i++) {
        msleep(s->delay_ms);
        s->st = hoop_store_set(st, s->keys[i], s->keys[i], strlen(s->keys[i]));
    }
    hoop_status d = hoop_store_destroy(st);
    if (s->st == HOOP_OK) s->st = d;
    return NULL;
}

START_TEST(test_get_blocks)
{
    int fds0 = count_fds();
    hoop_store_server *srv = start_server(TOKEN, 5000);
    hoop_store *st = client(srv, 0, 2);
    struct setter s = {
        .port = hoop_store_server_port(srv), .delay_ms = 200, .keys = {"late"}, .nkeys = 1};
    pthread_t th;
    int64_t t0 = hoop__now_ns();
    ck_assert_int_eq(pthread_create(&th, NULL, setter_main, &s), 0);
    char buf[16];
    size_t n = 0;
    ASSERT_OK(hoop_store_get(st, "late", buf, sizeof(buf), &n, 5000));
    double ms = ms_since(t0);
    ck_assert_msg(ms >= 190 && ms < 2000, "get returned after %.0f ms", ms);
    ck_assert_uint_eq(n, 4);
    ck_assert_mem_eq(buf, "late", 4);
    pthread_join(th, NULL);
    ASSERT_OK(s.st);

    /* wait() on three keys set one by one, 100 ms apart. */
    struct setter s3 = {.port = s.port, .delay_ms = 100, .keys = {"w1", "w2", "w3"}, .nkeys = 3};
    t0 = hoop__now_ns();
    ck_assert_int_eq(pthread_create(&th, NULL, setter_main, &s3), 0);
    ASSERT_OK(hoop_store_wait(st, s3.keys, 3, 5000));
    ms = ms_since(t0);
    ck_assert_msg(ms >= 290 && ms < 2000, "wait returned after %.0f ms", ms);
    pthread_join(th, NULL);
    ASSERT_OK(s3.st);
    ASSERT_OK(hoop_store_destroy(st));
    ASSERT_OK(hoop_store_server_destroy(srv));
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

// ----- barrier and all-gather with ranks as threads ---------------------------------------

struct rank_arg {
    int port, rank, ws, rounds;
    int64_t timeout_ms;
    size_t bytes;
    hoop_status st;
    double ms;
    char msg[1024];
    unsigned char out[8 * 64];
};

static void rank_fail(struct rank_arg *a, hoop_status st)
{
    a->st = st;
    snprintf(a->msg, sizeof(a->msg), "%s", hoop_last_error());
}

static void *barrier_main(void *arg)
{
    struct rank_arg *a = arg;
    hoop_store *st = NULL;
    hoop_status s = connect_as(&st, a->port, TOKEN, a->rank, a->ws, 5000);
    int64_t t0 = hoop__now_ns();
    for (int r = 0; r < a->rounds && s == HOOP_OK; r++)
        s = hoop_store_barrier(st, "start", a->timeout_ms);
    a->ms = ms_since(t0);
    rank_fail(a, s);
    hoop_status d = hoop_store_destroy(st);
    if (a->st == HOOP_OK) a->st = d;
    return NULL;
}

/* Runs nranks threads of fn (ranks 0..nranks-1 of ws) and joins them. */
static void run_ranks(void *(*fn)(void *), struct rank_arg *args, int nranks, int ws, int port,
                      int64_t timeout_ms, int rounds)
{
    pthread_t th[8];
    for (int r = 0; r < nranks; r++) {
        args[r].port = port;
        args[r].rank = r;
        args[r].ws = ws;
        args[r].rounds = rounds;
        args[r].timeout_ms = timeout_ms;
        ck_assert_int_eq(pthread_create(&th[r], NULL, fn, &args[r]), 0);
    }
    for (int r = 0; r < nranks; r++) pthread_join(th[r], NULL);
}

START_TEST(test_barrier)
{
    int fds0 = count_fds();
    hoop_store_server *srv = start_server(TOKEN, 5000);
    struct rank_arg a[4] = {0};
    run_ranks(barrier_main, a, 4, 4, hoop_store_server_port(srv), 5000, 3);
    for (int r = 0; r < 4; r++) ck_assert_msg(a[r].st == HOOP_OK, "rank %d: %s", r, a[r].msg);
    /* Reused three times; every generation cleaned up: only the entry counter is left. */
    hoop_store *st = client(srv, -1, 0);
    int64_t count = -1, v = 0;
    ASSERT_OK(hoop_store_num_keys(st, &count));
    ck_assert_int_eq(count, 1);
    ASSERT_OK(hoop_store_add(st, "hoop/barrier/start/n", 0, &v));
    ck_assert_int_eq(v, 12);
    /* A client without rank / world_size cannot join a barrier. */
    ck_assert_int_eq(hoop_store_barrier(st, "x", 100), HOOP_ERR_USAGE);
    ASSERT_OK(hoop_store_destroy(st));
    ASSERT_OK(hoop_store_server_destroy(srv));
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

START_TEST(test_barrier_missing_rank)
{
    int fds0 = count_fds();
    hoop_store_server *srv = start_server(TOKEN, 5000);
    struct rank_arg a[3] = {0};
    run_ranks(barrier_main, a, 3, 4, hoop_store_server_port(srv), 1000, 1); /* rank 3 absent */
    for (int r = 0; r < 3; r++) {
        ck_assert_msg(a[r].st == HOOP_ERR_TIMEOUT, "rank %d: %s", r, a[r].msg);
        ck_assert_msg(a[r].ms >= 950 && a[r].ms < 2000, "rank %d failed after %.0f ms", r, a[r].ms);
        ck_assert_msg(strstr(a[r].msg, "barrier 'start': rank 3 of 4 never arrived"), "rank %d: %s",
                      r, a[r].msg);
    }
    ASSERT_OK(hoop_store_server_destroy(srv));
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

/* Rank r's blob: bytes values that depend on rank and round. */
static void blob_of(int rank, int round, size_t bytes, unsigned char *out)
{
    for (size_t i = 0; i < bytes; i++) out[i] = (unsigned char)(rank * 31 + round * 7 + i);
}

static void *allgather_main(void *arg)
{
    struct rank_arg *a = arg;
    hoop_store *st = NULL;
    hoop_status s = connect_as(&st, a->port, TOKEN, a->rank, a->ws, 5000);
    unsigned char blob[64];
    int64_t t0 = hoop__now_ns();
    for (int round = 0; round < a->rounds && s == HOOP_OK; round++) {
        size_t bytes = a->bytes + (a->bytes == 7 && a->rank == 3); /* 7: rank 3 differs */
        blob_of(a->rank, round, bytes, blob);
        memset(a->out, 0xEE, sizeof(a->out));
        s = hoop_store_allgather(st, "ag", blob, bytes, a->out, a->timeout_ms);
    }
    a->ms = ms_since(t0);
    rank_fail(a, s);
    hoop_status d = hoop_store_destroy(st);
    if (a->st == HOOP_OK) a->st = d;
    return NULL;
}

START_TEST(test_allgather)
{
    int fds0 = count_fds();
    hoop_store_server *srv = start_server(TOKEN, 5000);
    int port = hoop_store_server_port(srv);
    struct rank_arg a[8] = {0};
    for (int r = 0; r < 8; r++) a[r].bytes = 48;
    run_ranks(allgather_main, a, 8, 8, port, 5000, 2);
    unsigned char want[48];
    for (int r = 0; r < 8; r++) {
        ck_assert_msg(a[r].st == HOOP_OK, "rank %d: %s", r, a[r].msg);
        for (int q = 0; q < 8; q++) { /* the last round's blobs, every rank's at q * 48 */
            blob_of(q, 1, 48, want);
            ck_assert_msg(memcmp(a[r].out + q * 48, want, 48) == 0, "rank %d: blob of %d", r, q);
        }
        ck_assert_uint_eq(a[r].out[8 * 48], 0xEE); /* nothing written past 8 x 48 */
    }
    hoop_store *st = client(srv, -1, 0);
    int64_t count = -1;
    ASSERT_OK(hoop_store_num_keys(st, &count));
    ck_assert_int_eq(count, 1); /* generations cleaned up */

    /* Rank 3 passes 8 bytes, the others 7: every rank reports the mismatch. */
    struct rank_arg m[8] = {0};
    for (int r = 0; r < 8; r++) m[r].bytes = 7;
    run_ranks(allgather_main, m, 8, 8, port, 5000, 1);
    for (int r = 0; r < 8; r++) {
        ck_assert_msg(m[r].st == HOOP_ERR_MISMATCH, "rank %d: %s", r, m[r].msg);
        ck_assert_msg(strstr(m[r].msg, "rank 3 gave 8 bytes"), "rank %d: %s", r, m[r].msg);
    }
    /* Ranks 0 and 1 of 4: both time out naming ranks 2 and 3. */
    struct rank_arg t[2] = {0};
    for (int r = 0; r < 2; r++) t[r].bytes = 16;
    ASSERT_OK(hoop_store_delete(st, "hoop/allgather/ag/n", NULL));
    run_ranks(allgather_main, t, 2, 4, port, 500, 1);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(t[r].st == HOOP_ERR_TIMEOUT, "rank %d: %s", r, t[r].msg);
        ck_assert_msg(strstr(t[r].msg, "allgather 'ag': ranks 2,3 of 4 never arrived"),
                      "rank %d: %s", r, t[r].msg);
        ck_assert_msg(t[r].ms >= 450 && t[r].ms < 1500, "rank %d: %.0f ms", r, t[r].ms);
    }
    ASSERT_OK(hoop_store_destroy(st));
    ASSERT_OK(hoop_store_server_destroy(srv));
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

// ----- connecting: late server, nobody there, restart, port in use -------------------------

struct late_client {
    int port;
    hoop_status st;
    double ms;
    char msg[1024];
};

static void *late_client_main(void *arg)
{
    struct late_client *c = arg;
    hoop_store *st = NULL;
    int64_t t0 = hoop__now_ns();
    c->st = connect_as(&st, c->port, TOKEN, 1, 2, 5000);
    c->ms = ms_since(t0);
    if (c->st == HOOP_OK) c->st = hoop_store_set(st, "joined", "1", 1);
    snprintf(c->msg, sizeof(c->msg), "%s", hoop_last_error());
    hoop_status d = hoop_store_destroy(st);
    if (c->st == HOOP_OK) c->st = d;
    return NULL;
}

START_TEST(test_connect_retry)
{
    int fds0 = count_fds();
    int port = free_port();
    struct late_client c = {.port = port};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, late_client_main, &c), 0);
    msleep(300); /* the client is retrying with backoff meanwhile */
    hoop_store_config cfg = HOOP_STORE_CONFIG_INIT;
    cfg.host = "127.0.0.1";
    cfg.port = port;
    cfg.token = TOKEN;
    hoop_store_server *srv = NULL;
    ASSERT_OK(hoop_store_server_init(&srv, &cfg));
    pthread_join(th, NULL);
    ck_assert_msg(c.st == HOOP_OK, "late client: %s", c.msg);
    ck_assert_msg(c.ms >= 250 && c.ms < 3000, "connected after %.0f ms", c.ms);
    hoop_store *st = client(srv, 0, 2);
    char buf[4];
    size_t n;
    ASSERT_OK(hoop_store_get(st, "joined", buf, sizeof(buf), &n, 1000));
    ck_assert_uint_eq(n, 1);
    ASSERT_OK(hoop_store_destroy(st));
    ASSERT_OK(hoop_store_server_destroy(srv));
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

START_TEST(test_connect_timeout)
{
    int fds0 = count_fds();
    int port = free_port();
    hoop_store *st = NULL;
    int64_t t0 = hoop__now_ns();
    ck_assert_int_eq(connect_as(&st, port, TOKEN, 0, 1, 500), HOOP_ERR_TIMEOUT);
    double ms = ms_since(t0);
    ck_assert_ptr_null(st);
    ck_assert_msg(ms >= 450 && ms < 1500, "gave up after %.0f ms", ms);
    char where[64];
    snprintf(where, sizeof(where), "127.0.0.1:%d", port);
    ASSERT_MSG_HAS(where);
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

START_TEST(test_port_in_use_and_restart)
{
    int fds0 = count_fds();
    hoop_store_server *srv = start_server(TOKEN, 5000);
    int port = hoop_store_server_port(srv);
    hoop_store_config cfg = HOOP_STORE_CONFIG_INIT;
    cfg.host = "127.0.0.1";
    cfg.port = port;
    cfg.token = TOKEN;
    hoop_store_server *again = NULL;
    ck_assert_int_eq(hoop_store_server_init(&again, &cfg), HOOP_ERR_SYSTEM);
    ck_assert_ptr_null(again);
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.1:%d is already in use", port);
    ASSERT_MSG_HAS(want);
    /* The server closes first, so its side of the connection sits in TIME_WAIT; a new
     * server must still bind the port (SO_REUSEADDR). */
    hoop_store *st = client(srv, 0, 1);
    ASSERT_OK(hoop_store_set(st, "k", "v", 1));
    ASSERT_OK(hoop_store_server_destroy(srv));
    ck_assert_int_eq(hoop_store_set(st, "k", "v", 1), HOOP_ERR_REMOTE);
    ASSERT_OK(hoop_store_destroy(st));
    ASSERT_OK(hoop_store_server_init(&srv, &cfg));
    st = client(srv, 0, 1);
    int64_t count = -1;
    ASSERT_OK(hoop_store_num_keys(st, &count));
    ck_assert_int_eq(count, 0); /* a fresh store */
    ASSERT_OK(hoop_store_destroy(st));
    ASSERT_OK(hoop_store_server_destroy(srv));
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

// ----- errors: names that do not resolve, env, dying server ---------------------------------

START_TEST(test_unresolvable)
{
    int fds0 = count_fds();
    hoop_store *st = NULL;
    hoop_store_config cfg = HOOP_STORE_CONFIG_INIT;
    cfg.host = "no-such-master.invalid";
    cfg.port = 29500;
    cfg.timeout_ms = 30000;
    int64_t t0 = hoop__now_ns();
    ck_assert_int_eq(hoop_store_init(&st, &cfg), HOOP_ERR_INVALID);
    ck_assert_double_lt(ms_since(t0), 200);
    ASSERT_MSG_HAS("no-such-master.invalid");
    hoop_store_server *srv = NULL;
    ck_assert_int_eq(hoop_store_server_init(&srv, &cfg), HOOP_ERR_INVALID);
    ASSERT_MSG_HAS("no-such-master.invalid");
    /* Through the env contract, for rank 0 (server) and rank 1 (client). */
    setenv("MASTER_ADDR", "no-such-master.invalid", 1);
    setenv("MASTER_PORT", "29500", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("HOOP_TIMEOUT", "30", 1);
    for (int rank = 0; rank < 2; rank++) {
        setenv("RANK", rank ? "1" : "0", 1);
        t0 = hoop__now_ns();
        ck_assert_int_eq(hoop_store_init_env(&st), HOOP_ERR_INVALID);
        ck_assert_double_lt(ms_since(t0), 200);
        ASSERT_MSG_HAS("no-such-master.invalid");
    }
    setenv("MASTER_PORT", "abc", 1);
    ck_assert_int_eq(hoop_store_init_env(&st), HOOP_ERR_INVALID);
    ASSERT_MSG_HAS("MASTER_PORT='abc'");
    ck_assert_ptr_null(st);
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

struct waiter {
    int port;
    hoop_status st;
    int64_t done_ns;
    char msg[1024];
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    hoop_store *st = NULL;
    w->st = connect_as(&st, w->port, TOKEN, 0, 1, 5000);
    if (w->st == HOOP_OK) {
        char buf[8];
        size_t n;
        w->st = hoop_store_get(st, "never", buf, sizeof(buf), &n, 10000);
        w->done_ns = hoop__now_ns();
        snprintf(w->msg, sizeof(w->msg), "%s", hoop_last_error());
        /* Later calls fail at once too, and the socket is already closed. */
        if (hoop_store_set(st, "x", "y", 1) != HOOP_ERR_REMOTE || hoop__store_fd(st) != -1)
            w->st = HOOP_ERR_INTERNAL;
    }
    hoop_status d = hoop_store_destroy(st);
    if (d != HOOP_OK) w->st = d;
    return NULL;
}

START_TEST(test_server_dies)
{
    int fds0 = count_fds();
    hoop_store_server *srv = start_server(TOKEN, 5000);
    struct waiter w = {.port = hoop_store_server_port(srv)};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, waiter_main, &w), 0);
    msleep(300); /* the get is parked on the server by now */
    int64_t t0 = hoop__now_ns();
    ASSERT_OK(hoop_store_server_destroy(srv));
    pthread_join(th, NULL);
    ck_assert_msg(w.st == HOOP_ERR_REMOTE, "%s: %s", hoop_status_name(w.st), w.msg);
    double ms = (double)(w.done_ns - t0) / 1e6;
    ck_assert_msg(ms < 500, "the client noticed after %.0f ms", ms);
    ck_assert_msg(strstr(w.msg, "closed the connection"), "%s", w.msg);
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

START_TEST(test_init_env)
{
    int fds0 = count_fds();
    int port = free_port();
    char ports[16];
    snprintf(ports, sizeof(ports), "%d", port);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", ports, 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("HOOP_TOKEN", TOKEN, 1);
    setenv("HOOP_TIMEOUT", "10", 1);
    setenv("RANK", "0", 1);
    hoop_store *r0 = NULL, *r1 = NULL, *bad = NULL;
    ASSERT_OK(hoop_store_init_env(&r0)); /* rank 0 also serves */
    setenv("RANK", "1", 1);
    ASSERT_OK(hoop_store_init_env(&r1));
    ck_assert_int_eq(hoop_store_rank(r1), 1);
    ck_assert_int_eq(hoop_store_world_size(r1), 2);
    ASSERT_OK(hoop_store_set(r0, "from0", "abc", 3));
    char buf[8];
    size_t n;
    ASSERT_OK(hoop_store_get(r1, "from0", buf, sizeof(buf), &n, -1));
    ck_assert_uint_eq(n, 3);
    ck_assert_mem_eq(buf, "abc", 3);
    setenv("HOOP_TOKEN", "another token", 1);
    ck_assert_int_eq(hoop_store_init_env(&bad), HOOP_ERR_REMOTE);
    ASSERT_MSG_HAS("HOOP_TOKEN");
    setenv("RANK", "0", 1); /* a second rank 0 finds its port taken */
    ck_assert_int_eq(hoop_store_init_env(&bad), HOOP_ERR_SYSTEM);
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.1:%d is already in use", port);
    ASSERT_MSG_HAS(want);
    ck_assert_ptr_null(bad);
    ASSERT_OK(hoop_store_destroy(r1));
    ASSERT_OK(hoop_store_destroy(r0)); /* stops the server it owns */
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

// ----- errors: token --------------------------------------------------------------------------

START_TEST(test_bad_token)
{
    int fds0 = count_fds();
    hoop_log_set(capture_log, NULL);
    hoop_store_server *srv = start_server(TOKEN, 5000);
    int port = hoop_store_server_port(srv);
    hoop_store *good = client(srv, 0, 2), *st = NULL;
    ASSERT_OK(hoop_store_set(good, "secret", "42", 2));
    const char *tokens[] = {"wrong", NULL, "", TOKEN "x", "t0k3n-for-test"};
    for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
        int before = atomic_load(&warn_lines);
        int64_t t0 = hoop__now_ns();
        ck_assert_int_eq(connect_as(&st, port, tokens[i], 1, 2, 5000), HOOP_ERR_REMOTE);
        ck_assert_double_lt(ms_since(t0), 1000); /* refused, not retried until the timeout */
        ck_assert_ptr_null(st);
        ASSERT_MSG_HAS("refused this client: wrong or missing HOOP_TOKEN");
        for (int k = 0; k < 100 && atomic_load(&warn_lines) == before; k++) msleep(10);
        ck_assert_int_eq(atomic_load(&warn_lines), before + 1);
        pthread_mutex_lock(&warn_mu);
        ck_assert_msg(strstr(last_warn, "refused connection from 127.0.0.1:"), "%s", last_warn);
        ck_assert_msg(!strstr(last_warn, TOKEN), "the token leaked into the log: %s", last_warn);
        pthread_mutex_unlock(&warn_mu);
    }
    char buf[4];
    size_t n;
    ASSERT_OK(hoop_store_get(good, "secret", buf, sizeof(buf), &n, 1000)); /* still served */
    ck_assert_mem_eq(buf, "42", 2);
    for (int k = 0; k < 100 && hoop__store_server_nclients(srv) != 1; k++) msleep(10);
    ck_assert_int_eq(hoop__store_server_nclients(srv), 1); /* refused ones are gone */
    ASSERT_OK(hoop_store_destroy(good));
    ASSERT_OK(hoop_store_server_destroy(srv));
    hoop_log_set(NULL, NULL);
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

// ----- errors: raw sockets that break the protocol ------------------------------------------

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    struct timeval tv = {.tv_sec = 3};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void raw_send(int fd, const void *p, size_t n)
{
    ck_assert_int_eq(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static void put_hello(hoop__buf *b, const char *token)
{
    size_t at = hoop__frame_begin(b, HOOP__STORE_HELLO);
    hoop__put_u32(b, HOOP__STORE_MAGIC);
    hoop__put_bytes(b, (const uint8_t[]){0, HOOP__STORE_VERSION}, 2);
    hoop__put_u32(b, 7);
    hoop__put_str(b, token, strlen(token));
    hoop__frame_end(b, at);
}

/* Reads until the server closes; returns 1 when it did (EOF or reset), skipping the
 * HELLO's OK reply if any. */
static int raw_closed(int fd)
{
    char buf[256];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) return 1;
        if (n < 0) return 0; /* timed out: still open */
    }
}

/* Each case: what follows a good HELLO (or replaces it), as raw frame bytes. */
enum { AFTER_HELLO = 1, NO_HELLO = 0 };

static void bad_frame(hoop__buf *b, int c)
{
    size_t at;
    uint8_t nul_key[] = {'a', 0, 'b'};
    switch (c) {
    case 0: hoop__put_bytes(b, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27); break;
    case 1:
        hoop__put_u32(b, 0xFFFFFFF0u);
        hoop__put_u8(b, HOOP__STORE_SET);
        break;
    case 2: hoop__put_u32(b, HOOP_STORE_VALUE_MAX + 4097u); break; /* just over the limit */
    case 3: hoop__put_u32(b, 0); break;                            /* zero length */
    case 4:
        at = hoop__frame_begin(b, 99);
        hoop__frame_end(b, at);
        break;
    case 5: /* key of 513 bytes */
        at = hoop__frame_begin(b, HOOP__STORE_SET);
        hoop__put_u32(b, HOOP_STORE_KEY_MAX + 1);
        for (int i = 0; i <= HOOP_STORE_KEY_MAX; i++) hoop__put_u8(b, 'k');
        hoop__put_str(b, "v", 1);
        hoop__frame_end(b, at);
        break;
    case 6: /* key with a NUL */
        at = hoop__frame_begin(b, HOOP__STORE_SET);
        hoop__put_str(b, nul_key, 3);
        hoop__put_str(b, "v", 1);
        hoop__frame_end(b, at);
        break;
    case 7: /* value length runs past the frame */
        at = hoop__frame_begin(b, HOOP__STORE_SET);
        hoop__put_str(b, "k", 1);
        hoop__put_u32(b, 1000);
        hoop__put_bytes(b, "short", 5);
        hoop__frame_end(b, at);
        break;
    case 8: /* trailing bytes */
        at = hoop__frame_begin(b, HOOP__STORE_NUM_KEYS);
        hoop__put_u32(b, 0xDEADBEEF);
        hoop__frame_end(b, at);
        break;
    case 9: put_hello(b, TOKEN); break; /* a second HELLO */
    case 10:                            /* WAIT with no keys */
        at = hoop__frame_begin(b, HOOP__STORE_WAIT);
        hoop__put_u8(b, 0);
        hoop__put_i64(b, 100);
        hoop__put_u32(b, 0);
        hoop__frame_end(b, at);
        break;
    case 11: /* WAIT with a negative timeout */
        at = hoop__frame_begin(b, HOOP__STORE_WAIT);
        hoop__put_u8(b, 0);
        hoop__put_i64(b, -5);
        hoop__put_u32(b, 1);
        hoop__put_str(b, "k", 1);
        hoop__frame_end(b, at);
        break;
    case 12: /* WAIT announcing a million keys in a tiny frame */
        at = hoop__frame_begin(b, HOOP__STORE_WAIT);
        hoop__put_u8(b, 0);
        hoop__put_i64(b, 100);
        hoop__put_u32(b, 1000000);
        hoop__frame_end(b, at);
        break;
    }
}
#define N_BAD_AFTER_HELLO 13

static void bad_first_frame(hoop__buf *b, int c)
{
    size_t at;
    switch (c) {
    case 0: hoop__put_bytes(b, "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11); break;
    case 1: /* SET before HELLO */
        at = hoop__frame_begin(b, HOOP__STORE_SET);
        hoop__put_str(b, "k", 1);
        hoop__put_str(b, "v", 1);
        hoop__frame_end(b, at);
        break;
    case 2: /* wrong magic */
        at = hoop__frame_begin(b, HOOP__STORE_HELLO);
        hoop__put_u32(b, 0x12345678);
        hoop__put_bytes(b, (const uint8_t[]){0, 1, 0, 0, 0, 0, 0, 0, 0, 0}, 10);
        hoop__frame_end(b, at);
        break;
    case 3: /* a 1000-byte token in a HELLO frame (over the pre-handshake limit) */
        at = hoop__frame_begin(b, HOOP__STORE_HELLO);
        hoop__put_u32(b, HOOP__STORE_MAGIC);
        hoop__put_bytes(b, (const uint8_t[]){0, 1, 0, 0, 0, 0}, 6);
        hoop__put_u32(b, 1000);
        for (int i = 0; i < 1000; i++) hoop__put_u8(b, 'x');
        hoop__frame_end(b, at);
        break;
    case 4: /* token length past the frame */
        at = hoop__frame_begin(b, HOOP__STORE_HELLO);
        hoop__put_u32(b, HOOP__STORE_MAGIC);
        hoop__put_bytes(b, (const uint8_t[]){0, 1, 0, 0, 0, 0}, 6);
        hoop__put_u32(b, 200);
        hoop__frame_end(b, at);
        break;
    }
}
#define N_BAD_FIRST 5

static void check_still_served(hoop_store *good)
{
    char buf[8];
    size_t n = 0;
    ASSERT_OK(hoop_store_get(good, "k", buf, sizeof(buf), &n, 1000));
    ck_assert_uint_eq(n, 5);
    ck_assert_mem_eq(buf, "value", 5);
}

START_TEST(test_malformed)
{
    int fds0 = count_fds();
    hoop_log_set(capture_log, NULL);
    hoop_store_server *srv = start_server(TOKEN, 5000);
    int port = hoop_store_server_port(srv);
    hoop_store *good = client(srv, 0, 1);
    ASSERT_OK(hoop_store_set(good, "k", "value", 5));
    for (int pass = 0; pass < 2; pass++) {
        int ncases = pass == AFTER_HELLO ? N_BAD_AFTER_HELLO : N_BAD_FIRST;
        for (int c = 0; c < ncases; c++) {
            int before = atomic_load(&warn_lines);
            int fd = raw_connect(port);
            hoop__buf b = {0};
            if (pass == AFTER_HELLO) put_hello(&b, TOKEN);
            if (pass == AFTER_HELLO)
                bad_frame(&b, c);
            else
                bad_first_frame(&b, c);
            ck_assert(!b.oom);
            raw_send(fd, b.data, b.len);
            hoop__buf_free(&b);
            ck_assert_msg(raw_closed(fd), "pass %d case %d: the server kept the connection", pass,
                          c);
            close(fd);
            check_still_served(good);
            ck_assert_msg(atomic_load(&warn_lines) == before + 1, "pass %d case %d: %d warnings",
                          pass, c, atomic_load(&warn_lines) - before);
            pthread_mutex_lock(&warn_mu);
            ck_assert_msg(strstr(last_warn, "closing connection from 127.0.0.1:"), "%s", last_warn);
            pthread_mutex_unlock(&warn_mu);
        }
    }
    int64_t count = -1;
    ASSERT_OK(hoop_store_num_keys(good, &count));
    ck_assert_int_eq(count, 1); /* nothing malformed was stored */
    ASSERT_OK(hoop_store_destroy(good));
    ASSERT_OK(hoop_store_server_destroy(srv));
    hoop_log_set(NULL, NULL);
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

/* A client that sends half a frame and stalls (and one that never says HELLO) does not
 * block anyone; the server closes it once its timeout (here 500 ms) passes. */
START_TEST(test_stalled_client)
{
    int fds0 = count_fds();
    hoop_log_set(capture_log, NULL);
    hoop_store_server *srv = start_server(TOKEN, 500);
    int port = hoop_store_server_port(srv);
    hoop_store *good = client(srv, 0, 1);
    ASSERT_OK(hoop_store_set(good, "k", "value", 5));
    int silent = raw_connect(port), half = raw_connect(port);
    hoop__buf b = {0};
    put_hello(&b, TOKEN);
    size_t at = hoop__frame_begin(&b, HOOP__STORE_SET);
    hoop__put_str(&b, "k", 1);
    hoop__put_str(&b, "0123456789", 10);
    hoop__frame_end(&b, at);
    raw_send(half, b.data, b.len - 6); /* HELLO, then all but the end of SET */
    hoop__buf_free(&b);
    int64_t t0 = hoop__now_ns();
    for (int i = 0; i < 20; i++) { /* served meanwhile, without delay */
        int64_t t1 = hoop__now_ns();
        check_still_served(good);
        ck_assert_double_lt(ms_since(t1), 100);
    }
    ck_assert(raw_closed(half));
    double ms = ms_since(t0);
    ck_assert_msg(ms >= 300 && ms < 1500, "stalled client closed after %.0f ms", ms);
    ck_assert(raw_closed(silent));
    close(half);
    close(silent);
    check_still_served(good); /* the half-sent SET was not applied */
    ASSERT_OK(hoop_store_destroy(good));
    ASSERT_OK(hoop_store_server_destroy(srv));
    hoop_log_set(NULL, NULL);
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

// ----- limits: 1024 concurrent clients, latency ------------------------------------------------

struct crowd {
    int port;
    pthread_barrier_t *all_connected, *all_added;
    int64_t value;
    hoop_status st;
    char msg[256];
};

static void *crowd_main(void *arg)
{
    struct crowd *c = arg;
    hoop_store *st = NULL;
    c->st = connect_as(&st, c->port, TOKEN, -1, 0, 20000);
    pthread_barrier_wait(c->all_connected); /* every client holds a connection now */
    if (c->st == HOOP_OK) c->st = hoop_store_add(st, "crowd", 1, &c->value);
    if (c->st != HOOP_OK) snprintf(c->msg, sizeof(c->msg), "%s", hoop_last_error());
    pthread_barrier_wait(c->all_added);
    hoop_status d = hoop_store_destroy(st);
    if (c->st == HOOP_OK) c->st = d;
    return NULL;
}

START_TEST(test_1024_clients)
{
    int fds0 = count_fds();
    hoop_store_server *srv = start_server(TOKEN, 20000);
    static struct crowd cs[NCLIENTS];
    static pthread_t th[NCLIENTS];
    pthread_barrier_t b1, b2;
    pthread_barrier_init(&b1, NULL, NCLIENTS + 1);
    pthread_barrier_init(&b2, NULL, NCLIENTS + 1);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 << 10);
    int64_t t0 = hoop__now_ns();
    for (int i = 0; i < NCLIENTS; i++) {
        cs[i] = (struct crowd){
            .port = hoop_store_server_port(srv), .all_connected = &b1, .all_added = &b2};
        ck_assert_int_eq(pthread_create(&th[i], &attr, crowd_main, &cs[i]), 0);
    }
    pthread_barrier_wait(&b1);
    double connect_ms = ms_since(t0);
    int held = hoop__store_server_nclients(srv);
    pthread_barrier_wait(&b2);
    for (int i = 0; i < NCLIENTS; i++) pthread_join(th[i], NULL);
    double total_ms = ms_since(t0);
    pthread_attr_destroy(&attr);
    pthread_barrier_destroy(&b1);
    pthread_barrier_destroy(&b2);
    ck_assert_int_eq(held, NCLIENTS);
    /* Each add saw a distinct value: together exactly 1..1024. */
    static unsigned char seen[NCLIENTS + 1];
    memset(seen, 0, sizeof(seen));
    for (int i = 0; i < NCLIENTS; i++) {
        ck_assert_msg(cs[i].st == HOOP_OK, "client %d: %s", i, cs[i].msg);
        ck_assert(cs[i].value >= 1 && cs[i].value <= NCLIENTS);
        ck_assert_int_eq(seen[cs[i].value]++, 0);
    }
    hoop_store *st = client(srv, 0, 1);
    int64_t v = 0;
    ASSERT_OK(hoop_store_add(st, "crowd", 0, &v));
    ck_assert_int_eq(v, NCLIENTS);
    ASSERT_OK(hoop_store_destroy(st));
    fprintf(stderr, "store: %d clients connected in %.0f ms; connect + add + close: %.0f ms\n",
            NCLIENTS, connect_ms, total_ms);
    ASSERT_OK(hoop_store_server_destroy(srv));
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

/* Not a speed target (those live in bench/): reports the round-trip time per op. */
START_TEST(test_latency_report)
{
    hoop_store_server *srv = start_server(TOKEN, 5000);
    hoop_store *st = client(srv, 0, 1);
    char key[32], buf[32];
    size_t n;
    int64_t t0 = hoop__now_ns();
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "lat/%d", i % 16);
        ASSERT_OK(hoop_store_set(st, key, &i, sizeof(i)));
        ASSERT_OK(hoop_store_get(st, key, buf, sizeof(buf), &n, 1000));
        ck_assert_uint_eq(n, sizeof(i));
        ck_assert_mem_eq(buf, &i, sizeof(i));
    }
    double ms = ms_since(t0);
    fprintf(stderr, "store: 1000 x (set + get) in %.1f ms, %.1f us per op\n", ms,
            ms * 1000.0 / 2000.0);
    ASSERT_OK(hoop_store_destroy(st));
    ASSERT_OK(hoop_store_server_destroy(srv));
}
END_TEST

// ----- main ------------------------------------------------------------------------------------

/* 1024 clients and their 1024 server-side connections live in this one process. */
static int raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    rlim_t need = 2 * NCLIENTS + 64;
    if (rl.rlim_cur < need && rl.rlim_max >= need) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur >= need;
}

int main(void)
{
    int crowd_ok = raise_fd_limit();
    Suite *s = suite_create("store");
    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 30);
    tcase_add_test(core, test_ops);
    tcase_add_test(core, test_get_blocks);
    tcase_add_test(core, test_barrier);
    tcase_add_test(core, test_barrier_missing_rank);
    tcase_add_test(core, test_allgather);
    tcase_add_test(core, test_connect_retry);
    tcase_add_test(core, test_connect_timeout);
    tcase_add_test(core, test_port_in_use_and_restart);
    tcase_add_test(core, test_init_env);
    suite_add_tcase(s, core);
    TCase *errs = tcase_create("errors");
    tcase_set_timeout(errs, 30);
    tcase_add_test(errs, test_unresolvable);
    tcase_add_test(errs, test_server_dies);
    tcase_add_test(errs, test_bad_token);
    tcase_add_test(errs, test_malformed);
    tcase_add_test(errs, test_stalled_client);
    suite_add_tcase(s, errs);
    TCase *limits = tcase_create("limits");
    tcase_set_timeout(limits, 60);
    if (crowd_ok) tcase_add_test(limits, test_1024_clients);
    tcase_add_test(limits, test_latency_report);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (failed) return EXIT_FAILURE;
    if (!crowd_ok) {
        printf("SKIP: the 1024-client test needs RLIMIT_NOFILE >= %d (hard limit too low)\n",
               2 * NCLIENTS + 64);
        return 77;
    }
    return EXIT_SUCCESS;
}
