/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_links.c -- src/collectives/links.c and the transport registry: which
 * transport a link uses, on made-up cards and fake transports (pure: nothing is
 * opened), the card's own checks, the registry's table, and what a communicator does
 * with HOOP_TRANSPORT=ib and in auto mode on a host without an RDMA device.
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/comm.h"
#include "collectives/links.h"
#include "hoop/comm.h"
#include "hoop/log.h"
#include "run_suite.h"

// ----- fake transports ----------------------------------------------------------------------

/* A fake context is the "host" it runs on; a fake handle starts with its rank's host. A
 * fake shm reaches the same host only; ib and tcp reach any (reachable NULL). */
static int fake_same_host(void *tctx, const void *handle)
{
    int host;
    memcpy(&host, handle, sizeof(host));
    return host == *(const int *)tctx;
}

static const struct hoop_transport fake_shm = {
    .name = "shm", .preference = 0, .reachable = fake_same_host};
static const struct hoop_transport fake_ib = {.name = "ib", .preference = 1};
static const struct hoop_transport fake_tcp = {.name = "tcp", .preference = 2};
/* A transport that never reaches anyone (for "no transport reaches"). */
static int never(void *tctx, const void *handle)
{
    (void)tctx, (void)handle;
    return 0;
}
static const struct hoop_transport fake_none = {
    .name = "none", .preference = 0, .reachable = never};

/* A rank's view: the transports it opened (on `host`) and the card it would publish. */
typedef struct fake_rank {
    int host;
    hoop__tp_open open[HOOP__TP_MAX];
    int nopen;
    hoop__card card;
} fake_rank;

/* Opens the transports named in list ("shm,ib,tcp") on host. */
static void fake_open(fake_rank *r, int host, const char *list)
{
    const struct hoop_transport *all[] = {&fake_shm, &fake_ib, &fake_tcp, &fake_none};
    char buf[64];
    r->host = host;
    r->nopen = 0;
    hoop__card_init(&r->card);
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save = NULL, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save))
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
            if (strcmp(all[i]->name, w) != 0) continue;
            void *h;
            ck_assert_int_eq(hoop__card_add(&r->card, w, &h), HOOP_OK);
            memcpy(h, &r->host, sizeof(r->host));
            r->open[r->nopen++] = (hoop__tp_open){.tp = all[i], .ctx = &r->host};
        }
}

/* The name of the transport `a` picks towards b (forced = HOOP_TRANSPORT or NULL), or
 * NULL when the pick fails (its status in *st). */
static const char *pick(const fake_rank *a, int ra, const fake_rank *b, int rb, const char *forced,
                        hoop_status *st)
{
    int k = -1;
    *st = hoop__link_pick(a->open, a->nopen, &b->card, forced, ra, rb, &k);
    return *st == HOOP_OK ? a->open[k].tp->name : NULL;
}

/* Both ends agree on the link's transport; returns it. */
static const char *pick_both(const fake_rank *a, const fake_rank *b, const char *forced)
{
    hoop_status st, st2;
    const char *x = pick(a, 0, b, 1, forced, &st);
    const char *y = pick(b, 1, a, 0, forced, &st2);
    ck_assert_int_eq(st, st2);
    ck_assert_msg((!x && !y) || (x && y && strcmp(x, y) == 0), "ends disagree: %s vs %s",
                  x ? x : "-", y ? y : "-");
    return x;
}

// ----- auto ---------------------------------------------------------------------------------

START_TEST(test_auto_same_host_shm)
{
    fake_rank a, b;
    fake_open(&a, 1, "shm,ib,tcp");
    fake_open(&b, 1, "shm,ib,tcp");
    ck_assert_str_eq(pick_both(&a, &b, NULL), "shm");
    fake_open(&b, 1, "shm,tcp"); /* no ib here: shm still */
    ck_assert_str_eq(pick_both(&a, &b, NULL), "shm");
    fake_open(&a, 1, "shm,tcp");
    ck_assert_str_eq(pick_both(&a, &b, NULL), "shm");
}
END_TEST

START_TEST(test_auto_hosts_ib)
{
    fake_rank a, b;
    fake_open(&a, 1, "shm,ib,tcp");
    fake_open(&b, 2, "shm,ib,tcp");
    ck_assert_str_eq(pick_both(&a, &b, NULL), "ib");
    fake_open(&a, 1, "ib,tcp"); /* no shm: ib within a host too */
    fake_open(&b, 1, "ib,tcp");
    ck_assert_str_eq(pick_both(&a, &b, NULL), "ib");
}
END_TEST

START_TEST(test_auto_peer_without_ib_tcp)
{
    fake_rank a, b;
    fake_open(&a, 1, "shm,ib,tcp");
    fake_open(&b, 2, "shm,tcp");
    ck_assert_str_eq(pick_both(&a, &b, NULL), "tcp");
    fake_open(&a, 1, "shm,tcp"); /* neither has ib */
    fake_open(&b, 2, "shm,ib,tcp");
    ck_assert_str_eq(pick_both(&a, &b, NULL), "tcp");
}
END_TEST

/* The choice follows preference, not the order transports were opened or listed in. */
START_TEST(test_auto_order_free)
{
    fake_rank a, b;
    fake_open(&a, 1, "tcp,ib,shm");
    fake_open(&b, 1, "shm,tcp,ib");
    ck_assert_str_eq(pick_both(&a, &b, NULL), "shm");
    fake_open(&b, 3, "tcp,ib,shm");
    ck_assert_str_eq(pick_both(&a, &b, NULL), "ib");
}
END_TEST

START_TEST(test_auto_nothing_reaches)
{
    fake_rank a, b;
    hoop_status st;
    fake_open(&a, 1, "shm");
    fake_open(&b, 2, "shm,tcp");
    ck_assert_ptr_null(pick(&a, 4, &b, 6, NULL, &st));
    ck_assert_int_eq(st, HOOP_ERR_UNSUPPORTED);
    assert_error_has("rank 4: no transport reaches rank 6", "rank 6 opened shm,tcp");
    fake_open(&a, 1, "none");
    fake_open(&b, 1, "none");
    ck_assert_ptr_null(pick(&a, 0, &b, 1, NULL, &st));
    ck_assert_int_eq(st, HOOP_ERR_UNSUPPORTED);
}
END_TEST

// ----- forced -------------------------------------------------------------------------------

START_TEST(test_forced_tcp_over_shm)
{
    fake_rank a, b;
    fake_open(&a, 1, "shm,ib,tcp");
    fake_open(&b, 1, "shm,ib,tcp");
    ck_assert_str_eq(pick_both(&a, &b, "tcp"), "tcp");
    ck_assert_str_eq(pick_both(&a, &b, "TCP"), "tcp"); /* HOOP_TRANSPORT is case-blind */
    ck_assert_str_eq(pick_both(&a, &b, "ib"), "ib");
}
END_TEST

START_TEST(test_forced_ib_peer_lacks_it)
{
    fake_rank a, b;
    hoop_status st;
    fake_open(&a, 1, "ib");
    fake_open(&b, 2, "tcp");
    ck_assert_ptr_null(pick(&a, 0, &b, 3, "ib", &st));
    ck_assert_int_eq(st, HOOP_ERR_INVALID);
    assert_error_has("HOOP_TRANSPORT=ib, but rank 3 has no ib transport", "it opened tcp");
}
END_TEST

START_TEST(test_forced_shm_remote_peer)
{
    fake_rank a, b;
    hoop_status st;
    fake_open(&a, 1, "shm");
    fake_open(&b, 2, "shm");
    ck_assert_ptr_null(pick(&a, 0, &b, 5, "shm", &st));
    ck_assert_int_eq(st, HOOP_ERR_INVALID);
    assert_error_has("HOOP_TRANSPORT=shm, but rank 5 is on another host", "than rank 0");
    fake_open(&b, 1, "shm");
    ck_assert_str_eq(pick_both(&a, &b, "shm"), "shm");
}
END_TEST

// ----- cards and the registry ---------------------------------------------------------------

START_TEST(test_card)
{
    hoop__card c;
    void *h;
    char names[64];
    hoop__card_init(&c);
    ck_assert_int_eq(hoop__card_check(&c, 0), HOOP_OK);
    hoop__card_names(&c, names, sizeof(names));
    ck_assert_str_eq(names, "none");
    ck_assert_int_eq(hoop__card_add(&c, "longname", &h), HOOP_ERR_INTERNAL); /* 8 chars */
    for (int i = 0; i < HOOP__TP_MAX; i++) {
        char n[8];
        snprintf(n, sizeof(n), "t%d", i);
        ck_assert_int_eq(hoop__card_add(&c, n, &h), HOOP_OK);
        ck_assert_ptr_eq(h, c.tp[i].handle);
        ck_assert_uint_eq((uintptr_t)h % 8, 0); /* transports cast their handle */
    }
    ck_assert_int_eq(hoop__card_add(&c, "t9", &h), HOOP_ERR_INTERNAL);
    ck_assert_int_eq(hoop__card_find(&c, "T2"), 2);
    ck_assert_int_eq(hoop__card_find(&c, "t9"), -1);
    hoop__card_names(&c, names, sizeof(names));
    ck_assert_str_eq(names, "t0,t1,t2,t3");
    ck_assert_int_eq(hoop__card_check(&c, 0), HOOP_OK);
    /* What another build (or garbage) publishes is refused, naming the rank. */
    hoop__card bad = c;
    bad.magic ^= 1;
    ck_assert_int_eq(hoop__card_check(&bad, 7), HOOP_ERR_REMOTE);
    assert_error_has("rank 7 published a malformed transport card", NULL);
    bad = c;
    bad.n = HOOP__TP_MAX + 1;
    ck_assert_int_eq(hoop__card_check(&bad, 2), HOOP_ERR_REMOTE);
    bad = c;
    memset(bad.tp[1].name, 'x', sizeof(bad.tp[1].name)); /* no NUL */
    ck_assert_int_eq(hoop__card_check(&bad, 2), HOOP_ERR_REMOTE);
    bad = c;
    bad.tp[3].name[0] = '\0'; /* a used entry without a name */
    ck_assert_int_eq(hoop__card_check(&bad, 2), HOOP_ERR_REMOTE);
}
END_TEST

START_TEST(test_registry)
{
    const char *want[] = {"shm", "ib", "tcp"};
    const int pref[] = {0, 1, 2};
    int n = 0;
    for (; hoop__transports[n]; n++) {
        ck_assert_int_lt(n, 3);
        ck_assert_str_eq(hoop__transports[n]->name, want[n]);
        ck_assert_int_eq(hoop__transports[n]->preference, pref[n]);
        ck_assert_int_lt((int)strlen(hoop__transports[n]->name), HOOP__TP_NAME_MAX);
        ck_assert_ptr_eq(hoop__transport_find(want[n]), hoop__transports[n]);
    }
    ck_assert_int_eq(n, 3);
    ck_assert_ptr_eq(hoop__transport_find("TCP"), &hoop__transport_tcp);
    ck_assert_ptr_null(hoop__transport_find("carrier-pigeon"));
    ck_assert_ptr_null(hoop__transport_find(NULL));
}
END_TEST

/* What hoop_comm_init hands the transports as cfg.ib: the HOOP_IB_* values, or their
 * defaults. */
START_TEST(test_ib_config)
{
    struct hoop_tp_ib_config ib;
    memset(&ib, 0x5a, sizeof(ib));
    ck_assert_int_eq(hoop__comm_ib_config(&ib), HOOP_OK);
    ck_assert_ptr_null(ib.hca);
    ck_assert_ptr_null(ib.addr_range);
    ck_assert_int_eq(ib.gid_index, -1);
    ck_assert_int_eq(ib.timeout, 20);
    ck_assert_int_eq(ib.retry_cnt, 7);
    ck_assert_int_eq(ib.tc, 0);
    ck_assert_int_eq(ib.sl, 0);
    ck_assert_int_eq(ib.reg_cache, 1);
    setenv("HOOP_IB_HCA", "^=mlx5_1:2", 1);
    setenv("HOOP_IB_ADDR_RANGE", "10.0.0.0/8", 1);
    setenv("HOOP_IB_GID_INDEX", "3", 1);
    setenv("HOOP_IB_TIMEOUT", "14", 1);
    setenv("HOOP_IB_RETRY_CNT", "2", 1);
    setenv("HOOP_IB_TC", "106", 1);
    setenv("HOOP_IB_SL", "5", 1);
    setenv("HOOP_IB_REG_CACHE", "0", 1);
    ck_assert_int_eq(hoop__comm_ib_config(&ib), HOOP_OK);
    ck_assert_str_eq(ib.hca, "^=mlx5_1:2");
    ck_assert_str_eq(ib.addr_range, "10.0.0.0/8");
    ck_assert_int_eq(ib.gid_index, 3);
    ck_assert_int_eq(ib.timeout, 14);
    ck_assert_int_eq(ib.retry_cnt, 2);
    ck_assert_int_eq(ib.tc, 106);
    ck_assert_int_eq(ib.sl, 5);
    ck_assert_int_eq(ib.reg_cache, 0);
    setenv("HOOP_IB_SL", "16", 1);
    ck_assert_int_eq(hoop__comm_ib_config(&ib), HOOP_ERR_INVALID);
    assert_error_has("HOOP_IB_SL=16", NULL);
    /* hoop_comm_init refuses it too, before opening anything. */
    hoop_comm *comm = NULL;
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.world_size = 1;
    cfg.rank = 0;
    ck_assert_int_eq(hoop_comm_init(&comm, &cfg), HOOP_ERR_INVALID);
    assert_error_has("HOOP_IB_SL=16", NULL);
}
END_TEST

/* The comm's link cost is the slowest figure of any rank's links, each with its name. */
START_TEST(test_link_cost_max)
{
    hoop__link_cost m, a = {{2e-6, 1e-10}, "shm", "shm"}, b = {{25e-6, 5e-10}, "tcp", "tcp"},
                       c = {{30e-6, 1e-10}, "ib", "ib"};
    hoop__link_cost_init(&m);
    ck_assert_int_eq(hoop__link_cost_max(&m, &a, 0), HOOP_OK);
    ck_assert(m.c.alpha == 2e-6 && m.c.beta == 1e-10);
    ck_assert_int_eq(hoop__link_cost_max(&m, &b, 1), HOOP_OK);
    ck_assert_int_eq(hoop__link_cost_max(&m, &c, 2), HOOP_OK);
    ck_assert_int_eq(hoop__link_cost_max(&m, &a, 3), HOOP_OK);
    ck_assert(m.c.alpha == 30e-6 && m.c.beta == 5e-10);
    ck_assert_str_eq(m.alpha_from, "ib");
    ck_assert_str_eq(m.beta_from, "tcp");
    /* What another build (or garbage) publishes is refused, naming the rank. */
    hoop__link_cost bad = b;
    bad.c.alpha = -1;
    ck_assert_int_eq(hoop__link_cost_max(&m, &bad, 5), HOOP_ERR_REMOTE);
    assert_error_has("rank 5 published a bad link cost", NULL);
    bad.c.alpha = NAN;
    ck_assert_int_eq(hoop__link_cost_max(&m, &bad, 5), HOOP_ERR_REMOTE);
    bad = b;
    bad.c.beta = 1e9;
    ck_assert_int_eq(hoop__link_cost_max(&m, &bad, 5), HOOP_ERR_REMOTE);
    memset(bad.alpha_from, 'x', sizeof(bad.alpha_from)); /* no NUL: still a string here */
    bad.c = (struct hoop_tp_cost){1, 1e-9};
    ck_assert_int_eq(hoop__link_cost_max(&m, &bad, 5), HOOP_OK);
    ck_assert_int_eq((int)strlen(m.alpha_from), HOOP__TP_NAME_MAX - 1);
    hoop__link_cost_of(&m, &hoop__transport_tcp, NULL); /* no cost slot: loopback TCP */
    ck_assert(m.c.alpha == 25e-6 && m.c.beta == 1 / 2e9);
    ck_assert_str_eq(m.alpha_from, "tcp");
}
END_TEST

// ----- a communicator on a host without an RDMA device --------------------------------------

static char logged[4096];
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static void keep_line(hoop_log_level level, const char *line, void *user)
{
    (void)level, (void)user;
    pthread_mutex_lock(&log_mu);
    size_t len = strlen(logged);
    snprintf(logged + len, sizeof(logged) - len, "%s\n", line);
    pthread_mutex_unlock(&log_mu);
}

/* The ib transport's init, here: HOOP_OK where this host has a usable device (then
 * there is nothing to check), else its status. */
static hoop_status ib_here(void)
{
    struct hoop_tp_config cfg = {.rank = 0};
    void *ctx = NULL;
    hoop_status st = hoop__transport_ib.init(&cfg, &ctx);
    if (st == HOOP_OK) hoop__transport_ib.finalize(ctx);
    return st;
}

/* HOOP_TRANSPORT=ib without a device: init fails at once (before any rendezvous),
 * naming HOOP_TRANSPORT, the rank and what the transport found missing. */
START_TEST(test_forced_ib_no_device)
{
    hoop_rendezvous *rv;
    hoop_comm *comm = NULL;
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    if (ib_here() == HOOP_OK) return; /* a real device: check_ib covers it */
    ck_assert_int_eq(hoop_rendezvous_new(&rv, 2), HOOP_OK);
    cfg.world_size = 2;
    cfg.rank = 1;
    cfg.rendezvous = rv;
    cfg.timeout_ms = 2000;
    setenv("HOOP_TRANSPORT", "ib", 1);
    ck_assert_int_eq(hoop_comm_init(&comm, &cfg), HOOP_ERR_UNSUPPORTED);
    assert_error_has("HOOP_TRANSPORT=ib, but rank 1 cannot use it: ", "ib");
    unsetenv("HOOP_TRANSPORT");
    ck_assert_ptr_null(comm);
    hoop_rendezvous_free(rv);
}
END_TEST

/* Thread-ranks of one process all link over what HOOP_TRANSPORT allows (auto: shm), so
 * the comm models that transport's cost, and the INFO line says so. */
struct cost_rank {
    hoop_rendezvous *rv;
    int rank, n;
    hoop_status st;
    struct hoop_tp_cost cost;
    hoop_algo at64k;
};

static void *cost_main(void *arg)
{
    struct cost_rank *r = arg;
    hoop_comm *comm = NULL;
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.world_size = r->n;
    cfg.rank = r->rank;
    cfg.rendezvous = r->rv;
    r->st = hoop_comm_init(&comm, &cfg);
    if (r->st != HOOP_OK) return NULL;
    r->cost = comm->link_cost.c;
    r->at64k = hoop__comm_algo_pick(comm, HOOP_ALGO_AUTO, 64 << 10);
    r->st = hoop_comm_destroy(comm);
    return NULL;
}

static void run_cost_ranks(int n, struct cost_rank *r)
{
    pthread_t th[4];
    hoop_rendezvous *rv;
    ck_assert_int_eq(hoop_rendezvous_new(&rv, n), HOOP_OK);
    for (int i = 0; i < n; i++) {
        r[i] = (struct cost_rank){.rv = rv, .rank = i, .n = n};
        ck_assert_int_eq(pthread_create(&th[i], NULL, cost_main, &r[i]), 0);
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    hoop_rendezvous_free(rv);
    for (int i = 0; i < n; i++) ck_assert_int_eq(r[i].st, HOOP_OK);
}

START_TEST(test_comm_link_cost)
{
    struct cost_rank r[4];
    struct hoop_tp_cost shm, tcp;
    hoop__transport_cost(&hoop__transport_shm, NULL, &shm);
    hoop__transport_cost(&hoop__transport_tcp, NULL, &tcp);
    ck_assert(shm.alpha != tcp.alpha); /* else this test tells nothing */
    logged[0] = '\0';
    hoop_log_set(keep_line, NULL);
    run_cost_ranks(4, r);
    hoop_log_set(NULL, NULL);
    for (int i = 0; i < 4; i++) {
        ck_assert(r[i].cost.alpha == shm.alpha && r[i].cost.beta == shm.beta);
        ck_assert_int_eq(r[i].at64k, hoop__algo_pick(HOOP_ALGO_AUTO, 4, 64 << 10, 512 << 10, &shm));
    }
    ck_assert_msg(strstr(logged, "modelled links: 8.00 us per message (shm), 0.250 ns per byte "
                                 "(shm)"),
                  "%s", logged);
    setenv("HOOP_TRANSPORT", "tcp", 1);
    run_cost_ranks(3, r);
    unsetenv("HOOP_TRANSPORT");
    for (int i = 0; i < 3; i++)
        ck_assert(r[i].cost.alpha == tcp.alpha && r[i].cost.beta == tcp.beta);
}
END_TEST

struct auto_rank {
    hoop_rendezvous *rv;
    int rank;
    hoop_status st;
    char link[8];
    char after_init[200]; /* hoop_last_error() after a successful hoop_comm_init */
};

static void *auto_main(void *arg)
{
    struct auto_rank *r = arg;
    hoop_comm *comm = NULL;
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.world_size = 2;
    cfg.rank = r->rank;
    cfg.rendezvous = r->rv;
    r->st = hoop_comm_init(&comm, &cfg);
    if (r->st != HOOP_OK) return NULL;
    /* the device this host lacks is said at INFO: no message of a failure stays behind */
    snprintf(r->after_init, sizeof(r->after_init), "%s", hoop_last_error());
    const char *t = hoop__comm_link_transport(comm, 1 - r->rank);
    snprintf(r->link, sizeof(r->link), "%s", t ? t : "-");
    r->st = hoop_comm_destroy(comm);
    return NULL;
}

/* Auto mode without a device: one INFO line per rank says so, the ranks (on one host)
 * link over shm. */
START_TEST(test_auto_no_device)
{
    struct auto_rank r[2];
    pthread_t th[2];
    hoop_rendezvous *rv;
    if (ib_here() == HOOP_OK) return;
    ck_assert_int_eq(hoop_rendezvous_new(&rv, 2), HOOP_OK);
    hoop_log_set(keep_line, NULL);
    for (int i = 0; i < 2; i++) {
        r[i] = (struct auto_rank){.rv = rv, .rank = i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, auto_main, &r[i]), 0);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    hoop_log_set(NULL, NULL);
    hoop_rendezvous_free(rv);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(r[i].st, HOOP_OK);
        ck_assert_str_eq(r[i].link, "shm");
        ck_assert_str_eq(r[i].after_init, "");
        char want[64];
        snprintf(want, sizeof(want), "rank %d: no usable RDMA device (", i);
        const char *at = strstr(logged, want);
        ck_assert_msg(at != NULL, "no '%s' in:\n%s", want, logged);
        ck_assert_msg(strstr(at + 1, want) == NULL, "'%s' twice in:\n%s", want, logged);
        ck_assert_ptr_nonnull(strstr(at, "); tcp between hosts"));
    }
}
END_TEST

/* claims.c: following "who waits for whom" from a rank's claim to a rank that made
 * none (the one that stopped), whatever the order the claims came in. */
START_TEST(test_claims_follow)
{
    /* ring 0 -> 1 -> 2 (stopped) -> 3: 0 waits for 3, 1 for 0, 3 for 2 */
    int c[4] = {3, 0, -1, 2};
    ck_assert_int_eq(hoop__claims_follow(c, 4, 1), 3);
    ck_assert_int_eq(hoop__claims_follow(c, 4, 0), 3);
    ck_assert_int_eq(hoop__claims_follow(c, 4, 3), 3);
    /* rank 3 never claimed: 1's chain ends at 0, whose claim names 3 */
    int d[4] = {3, 0, -1, -1};
    ck_assert_int_eq(hoop__claims_follow(d, 4, 1), 0);
    /* a cycle (a link cut both ways) ends, somewhere on it */
    int e[3] = {1, 2, 0};
    int end = hoop__claims_follow(e, 3, 0);
    ck_assert(end >= 0 && end < 3);
    /* a culprit out of range is the end */
    int f[2] = {7, -1};
    ck_assert_int_eq(hoop__claims_follow(f, 2, 0), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("links");
    TCase *tc = tcase_create("pick");
    tcase_add_test(tc, test_auto_same_host_shm);
    tcase_add_test(tc, test_auto_hosts_ib);
    tcase_add_test(tc, test_auto_peer_without_ib_tcp);
    tcase_add_test(tc, test_auto_order_free);
    tcase_add_test(tc, test_auto_nothing_reaches);
    tcase_add_test(tc, test_forced_tcp_over_shm);
    tcase_add_test(tc, test_forced_ib_peer_lacks_it);
    tcase_add_test(tc, test_forced_shm_remote_peer);
    tcase_add_test(tc, test_card);
    tcase_add_test(tc, test_registry);
    tcase_add_test(tc, test_ib_config);
    tcase_add_test(tc, test_link_cost_max);
    tcase_add_test(tc, test_claims_follow);
    suite_add_tcase(s, tc);
    TCase *comm = tcase_create("comm");
    tcase_set_timeout(comm, 30);
    tcase_add_test(comm, test_forced_ib_no_device);
    tcase_add_test(comm, test_auto_no_device);
    tcase_add_test(comm, test_comm_link_cost);
    suite_add_tcase(s, comm);
    return s;
}

int main(void)
{
    setenv("HOOP_DEBUG", "INFO", 1); /* before anything logs: the level is read once */
    setenv("HOOP_DEBUG_SUBSYS", "INIT", 1);
    unsetenv("HOOP_TRANSPORT");
    return run_suite(suite());
}
