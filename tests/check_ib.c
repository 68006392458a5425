/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_ib.c -- the verbs transport on a real device (Soft-RoCE in the guest of
 * `make check-rdma`, or any HCA): sizes around every boundary of the protocol (0, 1, the
 * eager slot +-1, the port's max message size +-1 and beyond), many small messages so
 * the credits wrap, both directions at full depth, a consumer receive (straight from
 * the slots) for small and large messages, registered buffers, a wrong token refused,
 * a peer's death failing the link (HOOP_ERR_REMOTE naming it), a bad GID index and a
 * bogus HCA; and a communicator over ib whose user frees a buffer and maps other memory
 * at its address between calls (the registrations must not outlive the call).
 *
 * Devices: HOOP_TEST_IB_HCA_A and HOOP_TEST_IB_HCA_B name the two ends' devices (the
 * guest sets rxe0 and rxe1, joined by a veth pair); unset, both use the first device
 * (Soft-RoCE loops back inside the device). Skips (77) where no RDMA device exists.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coll_harness.h"
#include "core/clock.h"
#include "transport/transport.h"

static const struct hoop_transport *tp = &hoop__transport_ib;

#include "run_suite.h"
#include "tp_harness.h"

#define SLOT (64u << 10) /* ib.c's IB_SLOT_BYTES */

static struct hoop_tp_config ib_cfg(const char *which)
{
    struct hoop_tp_config cfg = {
        .ib = {.gid_index = -1, .timeout = 14, .retry_cnt = 7, .reg_cache = 1}};
    cfg.ib.hca = getenv(which);
    return cfg;
}

static void make(void **ctx, int rank, const char *token, const char *which)
{
    tp_make_ctx(ctx, rank, token, ib_cfg(which));
}

/* a (rank 0) sends to b (rank 1) over devices A and B, with the settings given. */
static hoop_status connect_ab_cfg(pair *p, const char *tok_a, struct hoop_tp_config cfg_a,
                                  const char *tok_b, struct hoop_tp_config cfg_b)
{
    hoop_status st = connect_pair_two(p, tok_a, cfg_a, tok_b, cfg_b, 20000);
    if (st == HOOP_OK) {
        ck_assert_ptr_nonnull(p->send);
        ck_assert_ptr_nonnull(p->recv);
        ck_assert_int_eq(p->recv->peer, 0);
        ck_assert_int_eq(p->recv->channel, 7);
        ck_assert_int_eq(p->send->peer, 1);
    }
    return st;
}

static hoop_status connect_ab(pair *p, const char *tok_a, const char *tok_b)
{
    return connect_ab_cfg(p, tok_a, ib_cfg("HOOP_TEST_IB_HCA_A"), tok_b,
                          ib_cfg("HOOP_TEST_IB_HCA_B"));
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i * 131u + seed * 7u + (i >> 12));
}

/* One message of n bytes a -> b, checked byte for byte. The registration cache keeps
 * user buffers registered, so memory freed here is first forgotten (as the communicator
 * does with its own buffers); test_cache_off shows the other way. */
static void one_message(pair *p, size_t n, unsigned seed)
{
    unsigned char *in = malloc(n + 1), *out = malloc(n + 1);
    void *sr, *rr;
    fill(in, n, seed);
    memset(out, 0xee, n + 1);
    ck_assert_int_eq(tp->irecv(p->recv, out, n, NULL, &rr), HOOP_OK);
    ck_assert_int_eq(tp->isend(p->send, in, n, NULL, &sr), HOOP_OK);
    ck_assert_msg(finish_bytes(sr, rr, n) == HOOP_OK, "%zu bytes: %s", n, hoop_last_error());
    ck_assert_msg(memcmp(in, out, n) == 0, "%zu bytes differ", n);
    ck_assert_int_eq(out[n], 0xee); /* nothing written past the end */
    tp->forget(p->ctx_a, in, n + 1);
    tp->forget(p->ctx_b, out, n + 1);
    free(in);
    free(out);
}

/* A buffer freed without telling the transport and allocated again at the same address
 * is stale in a registration cache; with HOOP_IB_REG_CACHE=0 every message registers
 * afresh, and freeing and reusing is safe. */
START_TEST(test_cache_off)
{
    pair p;
    struct hoop_tp_config cfg_a = ib_cfg("HOOP_TEST_IB_HCA_A"),
                          cfg_b = ib_cfg("HOOP_TEST_IB_HCA_B");
    cfg_a.ib.reg_cache = cfg_b.ib.reg_cache = 0;
    ck_assert_int_eq(connect_ab_cfg(&p, "t", cfg_a, "t", cfg_b), HOOP_OK);
    for (int round = 0; round < 4; round++) { /* the same sizes: malloc reuses the addresses */
        size_t n = (8u << 20) + 1;
        unsigned char *in = malloc(n), *out = malloc(n);
        void *sr, *rr;
        fill(in, n, (unsigned)round);
        ck_assert_int_eq(tp->irecv(p.recv, out, n, NULL, &rr), HOOP_OK);
        ck_assert_int_eq(tp->isend(p.send, in, n, NULL, &sr), HOOP_OK);
        ck_assert_int_eq(finish_bytes(sr, rr, n), HOOP_OK);
        ck_assert_msg(memcmp(in, out, n) == 0, "round %d differs", round);
        free(in);
        free(out);
    }
    close_pair(&p);
}
END_TEST

// ----- a communicator over ib: user buffers freed between calls ---------------------------

enum { REUSE_COUNT = 300000 }; /* f32: 1.2 MB, rendezvous pieces (above the 64 KiB slots) */

/* Fills p (REUSE_COUNT floats) with rank r's values for round k; the sum over n ranks of
 * (r + 1) x (i % 1000 + k) is exact in f32. */
static void reuse_fill(float *p, int r, int k)
{
    for (size_t i = 0; i < REUSE_COUNT; i++) p[i] = (float)((r + 1) * (int)(i % 1000 + k));
}

static int reuse_check(h_rank *h, const float *p, int k, const char *what)
{
    float ranks = (float)(h->n * (h->n + 1) / 2);
    for (size_t i = 0; i < REUSE_COUNT; i++)
        if (p[i] != ranks * (float)(i % 1000 + k)) {
            h_fail(h, "%s, round %d: element %zu is %g, want %g", what, k, i, p[i],
                   ranks * (float)(i % 1000 + k));
            return 0;
        }
    return 1;
}

/* In-place all-reduces on p, then p unmapped and other memory mapped at its address
 * (what malloc and free do with large blocks), three times: each call must reduce the
 * memory there now, not the pages a registration kept from the call before. */
static void reuse_rounds(h_rank *h, float *p, size_t bytes, const char *what)
{
    for (int k = 0; k < 3; k++) {
        reuse_fill(p, h->rank, k);
        hoop_status st =
            hoop_allreduce(h->comm, p, p, REUSE_COUNT, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
        if (st != HOOP_OK) {
            h_fail(h, "%s, round %d: hoop_allreduce: %s", what, k, hoop_last_error());
            return;
        }
        if (!reuse_check(h, p, k, what)) break;
        munmap(p, bytes);
        void *q =
            mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (q != p) {
            h_fail(h, "%s: mmap at %p: %s", what, (void *)p, strerror(errno));
            return;
        }
    }
    munmap(p, bytes);
}

static void reuse_private(h_rank *h)
{
    size_t bytes = REUSE_COUNT * sizeof(float);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        h_fail(h, "mmap: %s", strerror(errno));
    else
        reuse_rounds(h, p, bytes, "malloc'd memory");
}

/* Memory from hoop_comm_alloc_shared keeps its registration across calls (it is hoop's):
 * hoop_comm_free_shared must drop it, or the memory mapped at its address next is served
 * the freed pages. */
static void reuse_shared(h_rank *h)
{
    size_t bytes = REUSE_COUNT * sizeof(float);
    float *s;
    if (hoop_comm_alloc_shared(h->comm, bytes, (void **)&s) != HOOP_OK) {
        h_fail(h, "hoop_comm_alloc_shared: %s", hoop_last_error());
        return;
    }
    for (int k = 0; k < 2; k++) { /* the second call reuses the first one's registration */
        reuse_fill(s, h->rank, k);
        if (hoop_allreduce(h->comm, s, s, REUSE_COUNT, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL) !=
            HOOP_OK) {
            h_fail(h, "hoop_comm_alloc_shared memory: hoop_allreduce: %s", hoop_last_error());
            return;
        }
        if (!reuse_check(h, s, k, "hoop_comm_alloc_shared memory")) return;
    }
    if (hoop_comm_free_shared(h->comm, s) != HOOP_OK) {
        h_fail(h, "hoop_comm_free_shared: %s", hoop_last_error());
        return;
    }
    void *q = mmap(s, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (q != s) { /* the freed range is free: nothing else maps there */
        h_fail(h, "mmap at %p: %s", (void *)s, q == MAP_FAILED ? strerror(errno) : "elsewhere");
        return;
    }
    reuse_rounds(h, q, bytes, "memory mapped where hoop_comm_free_shared's was");
}

static void ib_comm_env(const char *reg_cache)
{
    const char *a = getenv("HOOP_TEST_IB_HCA_A"), *b = getenv("HOOP_TEST_IB_HCA_B");
    char hca[128];
    setenv("HOOP_TRANSPORT", "ib", 1);
    if (a && b && strcmp(a, b) != 0) { /* rank i takes the i-th port of the list */
        snprintf(hca, sizeof(hca), "%s,%s", a, b);
        setenv("HOOP_IB_HCA", hca, 1);
    } else if (a) {
        setenv("HOOP_IB_HCA", a, 1);
    }
    if (reg_cache)
        setenv("HOOP_IB_REG_CACHE", reg_cache, 1);
    else
        unsetenv("HOOP_IB_REG_CACHE");
}

/* The default, HOOP_IB_REG_CACHE=1: a call's registrations end with the call. */
START_TEST(test_comm_reuse)
{
    ib_comm_env(NULL);
    run_ranks_ms(2, 60000, reuse_private, NULL);
    run_ranks_ms(2, 60000, reuse_shared, NULL);
}
END_TEST

/* HOOP_IB_REG_CACHE=2 keeps the registration of a buffer the program frees: hoop's own
 * memory allocated at its address next must not be served it. */
static void keep_then_shared(h_rank *h)
{
    size_t bytes = (REUSE_COUNT * sizeof(float) + 4095) & ~(size_t)4095;
    float *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *s;
    if (p == MAP_FAILED) {
        h_fail(h, "mmap: %s", strerror(errno));
        return;
    }
    reuse_fill(p, h->rank, 0);
    if (hoop_allreduce(h->comm, p, p, REUSE_COUNT, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL) != HOOP_OK) {
        h_fail(h, "hoop_allreduce: %s", hoop_last_error());
        return;
    }
    if (!reuse_check(h, p, 0, "the program's buffer")) return;
    munmap(p, bytes); /* its registration stays (HOOP_IB_REG_CACHE=2) */
    if (hoop_comm_alloc_shared(h->comm, bytes, (void **)&s) != HOOP_OK) {
        h_fail(h, "hoop_comm_alloc_shared: %s", hoop_last_error());
        return;
    }
    if (s != p) /* the kernel put it elsewhere: nothing stale to meet (said, not failed) */
        printf("keep_then_shared: rank %d's shared memory is at %p, not at %p\n", h->rank,
               (void *)s, (void *)p);
    reuse_fill(s, h->rank, 1);
    if (hoop_allreduce(h->comm, s, s, REUSE_COUNT, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL) != HOOP_OK)
        h_fail(h, "hoop_allreduce on hoop_comm_alloc_shared memory: %s", hoop_last_error());
    else
        reuse_check(h, s, 1, "hoop_comm_alloc_shared memory where the program's buffer was");
    hoop_comm_free_shared(h->comm, s);
}

START_TEST(test_comm_reuse_keep)
{
    ib_comm_env("2");
    run_ranks_ms(2, 60000, keep_then_shared, NULL);
}
END_TEST

/* HOOP_IB_REG_CACHE=0: every message registers its own. */
START_TEST(test_comm_reuse_cache_off)
{
    ib_comm_env("0");
    run_ranks_ms(2, 60000, reuse_private, NULL);
}
END_TEST

START_TEST(test_sizes)
{
    /* rxe's max message is 8 MiB; hoop's chunks can be 64 MiB */
    static const size_t sizes[] = {0,        1,
                                   8,        63,
                                   64,       SLOT - 1,
                                   SLOT,     SLOT + 1,
                                   1000003,  (8u << 20) - 1,
                                   8u << 20, (8u << 20) + 1,
                                   20u << 20};
    pair p;
    ck_assert_int_eq(connect_ab(&p, "t", "t"), HOOP_OK);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        one_message(&p, sizes[i], (unsigned)i);
    close_pair(&p);
}
END_TEST

/* 2000 small messages, receives posted a few at a time behind the sends: the sender runs
 * out of slots and waits for credits many times over (they wrap 125 times). */
START_TEST(test_credits_wrap)
{
    enum { N = 2000, AHEAD = 40 };
    pair p;
    uint64_t out[N], in[N];
    void *sr[N], *rr[N];
    ck_assert_int_eq(connect_ab(&p, "t", "t"), HOOP_OK);
    for (int i = 0; i < N; i++) out[i] = 0x1000000ull * (uint64_t)i + 17;
    memset(in, 0, sizeof(in));
    int posted_r = 0, done_s = 0, done_r = 0;
    int sdone[N] = {0}, rdone[N] = {0};
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(tp->isend(p.send, &out[i], 8, NULL, &sr[i]), HOOP_OK);
    int64_t deadline = hoop__deadline_ns(60000);
    while ((done_s < N || done_r < N) && hoop__now_ns() < deadline) {
        while (posted_r < N && posted_r - done_r < AHEAD) {
            ck_assert_int_eq(tp->irecv(p.recv, &in[posted_r], 8, NULL, &rr[posted_r]), HOOP_OK);
            posted_r++;
        }
        for (int i = 0; i < N; i++) {
            if (!sdone[i]) {
                ck_assert_int_eq(tp->test(sr[i], &sdone[i], NULL), HOOP_OK);
                done_s += sdone[i];
            }
            if (i < posted_r && !rdone[i]) {
                ck_assert_int_eq(tp->test(rr[i], &rdone[i], NULL), HOOP_OK);
                done_r += rdone[i];
            }
        }
    }
    ck_assert_int_eq(done_s, N);
    ck_assert_int_eq(done_r, N);
    for (int i = 0; i < N; i++) ck_assert_uint_eq(in[i], out[i]);
    close_pair(&p);
}
END_TEST

/* Both directions at once, each with 40 messages in flight of mixed kinds (eager and
 * rendezvous), checked at the end. */
START_TEST(test_both_ways)
{
    enum { N = 40 };
    pair ab, ba;
    unsigned char handle[HOOP_TP_HANDLE_MAX];
    ck_assert_int_eq(connect_ab(&ab, "t", "t"), HOOP_OK);
    /* the reverse link between the same two contexts */
    ck_assert_int_eq(tp->listen(ab.ctx_a, handle, &ba.listen), HOOP_OK);
    ba.send = ba.recv = NULL;
    int64_t deadline = hoop__deadline_ns(20000);
    while ((!ba.send || !ba.recv) && hoop__now_ns() < deadline) {
        if (!ba.send) ck_assert_int_eq(tp->connect(ab.ctx_b, handle, 0, &ba.send), HOOP_OK);
        if (!ba.recv) ck_assert_int_eq(tp->accept(ba.listen, &ba.recv), HOOP_OK);
    }
    ck_assert_ptr_nonnull(ba.recv);
    size_t sz[N];
    unsigned char *o1[N], *i1[N], *o2[N], *i2[N];
    void *r[4][N];
    for (int k = 0; k < N; k++) {
        sz[k] = k % 3 == 0 ? 300000 + (size_t)k : k % 3 == 1 ? SLOT : 5 + (size_t)k;
        o1[k] = malloc(sz[k]), i1[k] = malloc(sz[k]), o2[k] = malloc(sz[k]), i2[k] = malloc(sz[k]);
        fill(o1[k], sz[k], (unsigned)k);
        fill(o2[k], sz[k], (unsigned)k + 1000);
        ck_assert_int_eq(tp->irecv(ab.recv, i1[k], sz[k], NULL, &r[1][k]), HOOP_OK);
        ck_assert_int_eq(tp->irecv(ba.recv, i2[k], sz[k], NULL, &r[3][k]), HOOP_OK);
        ck_assert_int_eq(tp->isend(ab.send, o1[k], sz[k], NULL, &r[0][k]), HOOP_OK);
        ck_assert_int_eq(tp->isend(ba.send, o2[k], sz[k], NULL, &r[2][k]), HOOP_OK);
    }
    int done[4][N] = {{0}}, left = 4 * N;
    deadline = hoop__deadline_ns(60000);
    while (left && hoop__now_ns() < deadline)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < N; k++)
                if (!done[j][k]) {
                    ck_assert_msg(tp->test(r[j][k], &done[j][k], NULL) == HOOP_OK, "%s",
                                  hoop_last_error());
                    left -= done[j][k];
                }
    ck_assert_int_eq(left, 0);
    for (int k = 0; k < N; k++) {
        ck_assert(memcmp(o1[k], i1[k], sz[k]) == 0);
        ck_assert(memcmp(o2[k], i2[k], sz[k]) == 0);
        free(o1[k]), free(i1[k]), free(o2[k]), free(i2[k]);
    }
    ck_assert_int_eq(tp->close(ba.send), HOOP_OK);
    ck_assert_int_eq(tp->close(ba.recv), HOOP_OK);
    ck_assert_int_eq(tp->close(ba.listen), HOOP_OK);
    close_pair(&ab);
}
END_TEST

/* A consumer receive sums uint32 pieces straight from the slots; its pieces arrive in
 * order, cover the message exactly and are whole elements. */
struct sum {
    uint64_t total;
    size_t next_at;
    int bad;
};

static void consume(void *arg, const void *piece, size_t at, size_t n)
{
    struct sum *s = arg;
    const uint32_t *v = piece;
    if (at != s->next_at || n % 4 || ((uintptr_t)piece % 4)) s->bad = 1;
    for (size_t i = 0; i < n / 4; i++) s->total += v[i];
    s->next_at = at + n;
}

START_TEST(test_consumer)
{
    static const size_t counts[] = {1, 100, SLOT / 4, SLOT / 4 + 1, 3000000};
    pair p;
    ck_assert_int_eq(connect_ab(&p, "t", "t"), HOOP_OK);
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        size_t n = counts[c];
        uint32_t *v = malloc(n * 4);
        uint64_t want = 0;
        for (size_t i = 0; i < n; i++) want += v[i] = (uint32_t)(i * 2654435761u);
        struct sum s = {0};
        void *sr, *rr;
        ck_assert_int_eq(tp->irecv_fn(p.recv, n * 4, 4, consume, &s, &rr), HOOP_OK);
        ck_assert_int_eq(tp->isend(p.send, v, n * 4, NULL, &sr), HOOP_OK);
        ck_assert_msg(finish_bytes(sr, rr, n * 4) == HOOP_OK, "%s", hoop_last_error());
        ck_assert_int_eq(s.bad, 0);
        ck_assert_uint_eq(s.next_at, n * 4);
        ck_assert_uint_eq(s.total, want);
        free(v);
    }
    close_pair(&p);
}
END_TEST

/* Buffers registered once (as the communicator's slots are) are used through their mr. */
START_TEST(test_registered)
{
    enum { N = 3u << 20 };
    pair p;
    void *mr_in, *mr_out, *sr, *rr;
    ck_assert_int_eq(connect_ab(&p, "t", "t"), HOOP_OK);
    unsigned char *in = malloc(N), *out = malloc(N);
    fill(in, N, 5);
    ck_assert_int_eq(tp->reg_mr(p.ctx_a, in, N, HOOP_TP_MEM_HOST, &mr_in), HOOP_OK);
    ck_assert_int_eq(tp->reg_mr(p.ctx_b, out, N, HOOP_TP_MEM_HOST, &mr_out), HOOP_OK);
    for (int round = 0; round < 3; round++) {
        memset(out, 0, N);
        ck_assert_int_eq(tp->irecv(p.recv, out, N, mr_out, &rr), HOOP_OK);
        ck_assert_int_eq(tp->isend(p.send, in, N, mr_in, &sr), HOOP_OK);
        ck_assert_int_eq(finish_bytes(sr, rr, N), HOOP_OK);
        ck_assert(memcmp(in, out, N) == 0);
    }
    ck_assert_int_eq(tp->dereg_mr(p.ctx_a, mr_in), HOOP_OK);
    ck_assert_int_eq(tp->dereg_mr(p.ctx_b, mr_out), HOOP_OK);
    close_pair(&p);
    free(in);
    free(out);
}
END_TEST

/* Both ends on one device (Soft-RoCE loops the packets back inside the device). */
START_TEST(test_one_device)
{
    pair p;
    ck_assert_int_eq(connect_pair_cfg(&p, "t", "t", ib_cfg("HOOP_TEST_IB_HCA_A")), HOOP_OK);
    one_message(&p, 8, 1);
    one_message(&p, 3u << 20, 2);
    close_pair(&p);
}
END_TEST

/* a message of another length than its receive fails that receive once (HOOP_ERR_INTERNAL, both
 * lengths), and the next message arrives intact: ib's messages are slots, so the link stays in
 * step. */
START_TEST(test_wrong_length)
{
    pair p;
    ck_assert_int_eq(connect_ab(&p, "t", "t"), HOOP_OK);
    check_wrong_length(&p, 1);
    close_pair(&p);
}
END_TEST

START_TEST(test_request_pool)
{
    pair p;
    ck_assert_int_eq(connect_ab(&p, "t", "t"), HOOP_OK);
    check_request_pool(&p);
}
END_TEST

START_TEST(test_abandoned_connect)
{
    check_abandoned_connect(ib_cfg("HOOP_TEST_IB_HCA_A"));
}
END_TEST

/* tp_harness.h's check_peer_gone_in_handshake. */
START_TEST(test_peer_gone_in_handshake)
{
    check_peer_gone_in_handshake(ib_cfg("HOOP_TEST_IB_HCA_A"));
}
END_TEST

START_TEST(test_wrong_token)
{
    pair p;
    hoop_status st = connect_ab(&p, "good", "other");
    ck_assert_int_eq(st, HOOP_ERR_REMOTE);
    assert_error_has("refused", "HOOP_TOKEN");
    ck_assert_ptr_null(p.recv);
    ck_assert_int_eq(tp->close(p.listen), HOOP_OK);
    ck_assert_int_eq(tp->finalize(p.ctx_a), HOOP_OK);
    ck_assert_int_eq(tp->finalize(p.ctx_b), HOOP_OK);
}
END_TEST

/* The receiving process is killed while a receive waits: the sender's pending send and
 * the link fail with HOOP_ERR_REMOTE naming the peer, within 2 s. */
START_TEST(test_peer_killed)
{
    pair p;
    ck_assert_int_eq(connect_ab(&p, "t", "t"), HOOP_OK);
    /* The receiving end closes (as a killed process's socket does): a waiting receive on
     * the other direction and a send that needs a grant both fail promptly. */
    enum { N = 1u << 20 };
    unsigned char *buf = calloc(1, N);
    void *sr;
    ck_assert_int_eq(tp->isend(p.send, buf, N, NULL, &sr), HOOP_OK); /* waits for a grant */
    ck_assert_int_eq(tp->close(p.recv), HOOP_OK);
    int done = 0;
    hoop_status st = HOOP_OK;
    int64_t t0 = hoop__now_ns(), deadline = hoop__deadline_ns(10000);
    while (!done && st == HOOP_OK && hoop__now_ns() < deadline) st = tp->test(sr, &done, NULL);
    double s = (double)(hoop__now_ns() - t0) / 1e9;
    ck_assert_int_eq(st, HOOP_ERR_REMOTE);
    assert_error_has("rank 1", NULL);
    ck_assert_msg(s < 2.0, "took %.2f s", s);
    ck_assert_int_eq(tp->close(p.send), HOOP_OK);
    ck_assert_int_eq(tp->close(p.listen), HOOP_OK);
    ck_assert_int_eq(tp->finalize(p.ctx_a), HOOP_OK);
    ck_assert_int_eq(tp->finalize(p.ctx_b), HOOP_OK);
    free(buf);
}
END_TEST

/* The same with a real SIGKILL of a child process holding the receiving end. */
START_TEST(test_fork_kill)
{
    unsigned char handle[HOOP_TP_HANDLE_MAX];
    void *a;
    struct hoop_tp_comm *send = NULL;
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) { /* the receiver: listens, accepts, then sleeps until killed */
        void *b;
        struct hoop_tp_comm *listen, *recv = NULL;
        close(fds[0]);
        make(&b, 1, "t", "HOOP_TEST_IB_HCA_B");
        if (tp->listen(b, handle, &listen) != HOOP_OK) _exit(3);
        if (write(fds[1], handle, sizeof(handle)) != (ssize_t)sizeof(handle)) _exit(4);
        while (!recv)
            if (tp->accept(listen, &recv) != HOOP_OK) _exit(5);
        pause();
        _exit(0);
    }
    close(fds[1]);
    ck_assert_int_eq(read(fds[0], handle, sizeof(handle)), (ssize_t)sizeof(handle));
    make(&a, 0, "t", "HOOP_TEST_IB_HCA_A");
    int64_t deadline = hoop__deadline_ns(20000);
    while (!send && hoop__now_ns() < deadline)
        ck_assert_int_eq(tp->connect(a, handle, 0, &send), HOOP_OK);
    ck_assert_ptr_nonnull(send);
    uint64_t x = 42;
    void *sr;
    /* eager messages fill the slots, then one more waits for credit */
    for (int i = 0; i < 16; i++) {
        int done = 0;
        ck_assert_int_eq(tp->isend(send, &x, 8, NULL, &sr), HOOP_OK);
        while (!done) ck_assert_int_eq(tp->test(sr, &done, NULL), HOOP_OK);
    }
    ck_assert_int_eq(tp->isend(send, &x, 8, NULL, &sr), HOOP_OK);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    int done = 0;
    hoop_status st = HOOP_OK;
    int64_t t0 = hoop__now_ns();
    deadline = hoop__deadline_ns(10000);
    while (!done && st == HOOP_OK && hoop__now_ns() < deadline) st = tp->test(sr, &done, NULL);
    double s = (double)(hoop__now_ns() - t0) / 1e9;
    ck_assert_int_eq(st, HOOP_ERR_REMOTE);
    assert_error_has("rank 1", "exited");
    ck_assert_msg(s < 2.0, "took %.2f s", s);
    ck_assert_int_eq(tp->close(send), HOOP_OK);
    ck_assert_int_eq(tp->finalize(a), HOOP_OK);
    close(fds[0]);
}
END_TEST

START_TEST(test_bad_gid_index)
{
    struct hoop_tp_config cfg = ib_cfg("HOOP_TEST_IB_HCA_A");
    void *ctx = NULL;
    cfg.ib.gid_index = 200; /* Soft-RoCE's table is mostly empty this far */
    hoop_status st = tp->init(&cfg, &ctx);
    ck_assert_int_ne(st, HOOP_OK);
    ck_assert_ptr_null(ctx);
    assert_error_has("200", NULL);
}
END_TEST

START_TEST(test_bogus_hca)
{
    struct hoop_tp_config cfg = ib_cfg("HOOP_TEST_IB_HCA_A");
    void *ctx = NULL;
    cfg.ib.hca = "=nosuchdev0";
    ck_assert_int_eq(tp->init(&cfg, &ctx), HOOP_ERR_UNSUPPORTED);
    assert_error_has("nosuchdev0", NULL);
    ck_assert_ptr_null(ctx);
}
END_TEST

START_TEST(test_vtable)
{
    const char *missing = NULL;
    ck_assert(hoop__transport_complete(tp, &missing));
    ck_assert_str_eq(tp->name, "ib");
    ck_assert_ptr_nonnull(tp->reg_mr);
    ck_assert_ptr_nonnull(tp->irecv_fn);
    ck_assert_ptr_nonnull(tp->pollfds);
    void *ctx;
    make(&ctx, 0, "t", "HOOP_TEST_IB_HCA_A");
    struct hoop_tp_cost cost;
    tp->cost(ctx, &cost);
    ck_assert(cost.alpha > 0 && cost.beta > 0);
    /* a peer's ib endpoint is reachable; a handle of another transport is not */
    void *other;
    struct hoop_tp_comm *listen;
    unsigned char handle[HOOP_TP_HANDLE_MAX], zero[HOOP_TP_HANDLE_MAX] = {0};
    make(&other, 1, "t", "HOOP_TEST_IB_HCA_B");
    ck_assert_int_eq(tp->listen(other, handle, &listen), HOOP_OK);
    ck_assert(tp->reachable(ctx, handle));
    ck_assert(!tp->reachable(ctx, zero));
    ck_assert_int_eq(tp->close(listen), HOOP_OK);
    ck_assert_int_eq(tp->finalize(other), HOOP_OK);
    ck_assert_int_eq(tp->finalize(ctx), HOOP_OK);
}
END_TEST

int main(void)
{
    struct hoop_tp_config cfg = ib_cfg("HOOP_TEST_IB_HCA_A");
    void *ctx;
    hoop_status st = tp->init(&cfg, &ctx);
    if (st == HOOP_ERR_UNSUPPORTED) {
        printf("SKIP: check_ib: no usable RDMA device here (%s); `make check-rdma` runs "
               "this test on Soft-RoCE in a qemu guest\n",
               hoop_last_error());
        return 77;
    }
    if (st != HOOP_OK) {
        printf("check_ib: the device is there but init failed: %s\n", hoop_last_error());
        return 1;
    }
    tp->finalize(ctx);
    Suite *s = suite_create("ib");
    TCase *tc = tcase_create("data");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_vtable);
    tcase_add_test(tc, test_sizes);
    tcase_add_test(tc, test_credits_wrap);
    tcase_add_test(tc, test_both_ways);
    tcase_add_test(tc, test_consumer);
    tcase_add_test(tc, test_registered);
    tcase_add_test(tc, test_one_device);
    tcase_add_test(tc, test_cache_off);
    tcase_add_test(tc, test_request_pool);
    tcase_add_test(tc, test_comm_reuse);
    tcase_add_test(tc, test_comm_reuse_cache_off);
    tcase_add_test(tc, test_comm_reuse_keep);
    suite_add_tcase(s, tc);
    TCase *err = tcase_create("errors");
    tcase_set_timeout(err, 120);
    tcase_add_test(err, test_wrong_token);
    tcase_add_test(err, test_wrong_length);
    tcase_add_test(err, test_peer_killed);
    tcase_add_test(err, test_fork_kill);
    tcase_add_test(err, test_bad_gid_index);
    tcase_add_test(err, test_bogus_hca);
    tcase_add_test(err, test_abandoned_connect);
    tcase_add_test(err, test_peer_gone_in_handshake);
    suite_add_tcase(s, err);
    return run_suite(s);
}
