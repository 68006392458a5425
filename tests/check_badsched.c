/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_badsched.c -- a deliberately buggy plug-in algorithm fails its call, at
 * once and by name, and writes nothing outside the call's buffers.
 *
 * The plug-in is the rd all-reduce with a bug put in: the link flag
 * -Wl,--wrap=hoop__allreduce_rd (local.mk) points the algorithm table's rd row at
 * __wrap_hoop__allreduce_rd below, which builds the real schedule and then breaks it
 * the way a researcher's new algorithm might:
 *   - PAST_END: on every rank, the last data chunk sent and the last one received are
 *     one element longer, so the pair still agrees but both steps reach past the user's
 *     buffers (count + 1 elements). The schedule check (sched_check.c) must fail the call
 *     on every rank with HOOP_ERR_INTERNAL naming the collective, the algorithm, the step,
 *     its peer, the buffer, the range and the buffer's size, before any byte moves.
 *   - SHORT_SEND: rank 0's last data chunk to rank 1 is one element short (count - 1),
 *     rank 1 expects the whole chunk. Every range is inside its buffer; the receiver must
 *     see that the message that arrived is not the size it posted (the transports' frame,
 *     transport/frame.h) and fail the call with HOOP_ERR_INTERNAL naming the algorithm,
 *     the step, the peer and both byte counts; the comm is failed, so a later call fails on both
 * ranks;
 *   - WRITE_SEND, BIG_STEP, BARE_CODE, RESET: a receive into the send buffer, a message
 *     longer than a chunk, a bare error code, a reset schedule: refused as built;
 *   - EXTRA_SEND: rank 1 sends rank 0 one message more than it receives; the next call's
 *     vote record comes as that message, and rank 0 names a stream out of step;
 *   - NO_LINK: of 6 ranks, rank 0 sends rank 2 a message, which no link carries (a
 *     comm links the peers hoop__algo_peers marks): refused before any byte moves,
 *     naming the algorithm, the step and the peer (it named only the peer, mid-call).
 * Every buffer sits between guard elements that must come back unchanged. Runs over tcp,
 * shm, shm with the async memory table, and tcp with staged sends and receives, as
 * check_collectives does.
 */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "coll_harness.h"
#include "run_suite.h"

enum {
    BUG_NONE,
    BUG_PAST_END,
    BUG_SHORT_SEND,
    BUG_WRITE_SEND, /* the last receive lands in the send buffer */
    BUG_BIG_STEP,   /* the last send and receive are one chunk and one element long */
    BUG_BARE_CODE,  /* the function fails with a bare code, no message */
    BUG_RESET,      /* the function resets the schedule: the vote's steps are gone */
    BUG_EXTRA_SEND, /* rank 1 sends rank 0 one message more than rank 0 receives */
    BUG_NO_LINK     /* of 6 ranks, rank 0 sends rank 2 a message (no link joins them) */
};
static _Atomic int bug;

hoop_status __real_hoop__allreduce_rd(const hoop__coll_args *a, hoop__sched *s);
hoop_status __wrap_hoop__allreduce_rd(const hoop__coll_args *a, hoop__sched *s);

/* The last step of kind k at or after from on a data buffer (not the vote's), or NULL. */
static hoop__step *last_of(hoop__sched *s, size_t from, int k)
{
    for (size_t i = s->n; i-- > from;)
        if ((s->steps[i].kind == k ||
             (k == HOOP__STEP_RECV && s->steps[i].kind == HOOP__STEP_RECV_REDUCE)) &&
            s->steps[i].buf != HOOP__BUF_VOTE)
            return &s->steps[i];
    return NULL;
}

hoop_status __wrap_hoop__allreduce_rd(const hoop__coll_args *a, hoop__sched *s)
{
    size_t from = s->n; /* the vote's steps come first */
    if (atomic_load(&bug) == BUG_BARE_CODE) return HOOP_ERR_INVALID;
    if (atomic_load(&bug) == BUG_RESET) hoop__sched_reset(s);
    hoop_status st = __real_hoop__allreduce_rd(a, s);
    hoop__step *send = last_of(s, from, HOOP__STEP_SEND), *recv = last_of(s, from, HOOP__STEP_RECV);
    if (st != HOOP_OK || !send || !recv) return st;
    switch (atomic_load(&bug)) {
    case BUG_PAST_END:
        send->bytes += a->elem;
        recv->bytes += a->elem;
        break;
    case BUG_SHORT_SEND:
        if (a->rank == 0) send->bytes -= a->elem;
        break;
    case BUG_WRITE_SEND: recv->buf = HOOP__BUF_SEND; break;
    case BUG_EXTRA_SEND:
        if (a->rank == 1)
            hoop__sched_add(s, (hoop__step){.kind = HOOP__STEP_SEND,
                                            .buf = HOOP__BUF_SEND,
                                            .peer = 0,
                                            .dep = {-1, -1},
                                            .bytes = 1024});
        break;
    case BUG_NO_LINK:
        if (a->rank == 0 || a->rank == 2)
            hoop__sched_add(s,
                            (hoop__step){.kind = a->rank == 0 ? HOOP__STEP_SEND : HOOP__STEP_RECV,
                                         .buf = a->rank == 0 ? HOOP__BUF_SEND : HOOP__BUF_RECV,
                                         .peer = a->rank == 0 ? 2 : 0,
                                         .dep = {-1, -1},
                                         .bytes = 64});
        break;
    case BUG_BIG_STEP:
        send->bytes = recv->bytes = a->chunk_bytes + a->elem;
        send->off = recv->off = 0;
        break;
    }
    return st;
}

#define GUARD 16         /* guard elements on each side of a buffer */
#define GUARD_VAL -777.f /* what they hold */

typedef struct bs_case {
    int bug;
    size_t count;
} bs_case;

typedef struct bs_result {
    hoop_status st, later;
    char msg[600], later_msg[600];
    size_t bad_guards;
} bs_result;

static bs_result results[H_MAX_RANKS];

/* count elements between GUARD guards on each side; returns the data's start. */
static float *guarded(size_t count, float fill)
{
    float *b = malloc((count + 2 * GUARD) * sizeof(float));
    for (size_t i = 0; i < count + 2 * GUARD; i++) b[i] = GUARD_VAL;
    for (size_t i = 0; i < count; i++) b[GUARD + i] = fill;
    return b + GUARD;
}

static size_t guards_changed(const float *data, size_t count)
{
    size_t bad = 0;
    for (size_t i = 1; i <= GUARD; i++) bad += data[-(ptrdiff_t)i] != GUARD_VAL;
    for (size_t i = 0; i < GUARD; i++) bad += data[count + i] != GUARD_VAL;
    return bad;
}

static void one_rank(h_rank *h)
{
    const bs_case *c = h->user;
    bs_result *r = &results[h->rank];
    float *in = guarded(c->count, (float)(h->rank + 1)), *out = guarded(c->count, 0);
    hoop_comm_set_algo(h->comm, HOOP_ALGO_RD);
    r->st = hoop_allreduce(h->comm, in, out, c->count, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    snprintf(r->msg, sizeof(r->msg), "%s", hoop_last_error());
    r->later = hoop_barrier(h->comm, NULL);
    snprintf(r->later_msg, sizeof(r->later_msg), "%s", hoop_last_error());
    r->bad_guards = guards_changed(in, c->count) + guards_changed(out, c->count);
    free(in - GUARD);
    free(out - GUARD);
}

static void run_case(int n, int which, size_t count)
{
    bs_case c = {.bug = which, .count = count};
    memset(results, 0, sizeof(results));
    atomic_store(&bug, which);
    run_ranks_ms(n, 10000, one_rank, &c);
    atomic_store(&bug, BUG_NONE);
}

static void assert_has(const char *msg, const char *want, int rank)
{
    ck_assert_msg(strstr(msg, want), "rank %d: the message does not say \"%s\": %s", rank, want,
                  msg);
}

/* Every rank fails with HOOP_ERR_INTERNAL, the first by name (the others may hear of
 * its failure before they start); no guard changed. Counts: one chunk, and several
 * (the last chunk of a striped TCP message). */
START_TEST(test_past_end)
{
    static const size_t counts[] = {100, 300001};
    static const int worlds[] = {2, 4};
    for (int w = 0; w < 2; w++)
        for (int k = 0; k < 2; k++) {
            size_t count = counts[k], bytes = count * sizeof(float);
            char holds[64];
            snprintf(holds, sizeof(holds), "which holds %zu bytes", bytes);
            run_case(worlds[w], BUG_PAST_END, count);
            int named = 0;
            for (int r = 0; r < worlds[w]; r++) {
                const bs_result *x = &results[r];
                ck_assert_msg(x->st == HOOP_ERR_INTERNAL,
                              "rank %d: want HOOP_ERR_INTERNAL, got %s: %s", r,
                              hoop_status_name(x->st), x->msg);
                ck_assert_msg(x->later != HOOP_OK, "rank %d: the comm still works", r);
                ck_assert_msg(x->bad_guards == 0, "rank %d: %zu guard elements written", r,
                              x->bad_guards);
                /* A rank that heard another's failure first says whose it was. */
                if (strstr(x->msg, " failed: HOOP_ERR_INTERNAL during allreduce")) continue;
                assert_has(x->msg, "allreduce algorithm rd", r);
                assert_has(x->msg, "step ", r);
                assert_has(x->msg, " rank ", r);
                assert_has(x->msg, holds, r);
                assert_has(x->msg, "buffer", r);
                named++;
            }
            ck_assert_msg(named > 0, "no rank named the bad step: %s", results[0].msg);
        }
}
END_TEST

/* The receiver (rank 1) fails naming the step, the peer and both sizes; the sender's
 * next call fails too; no guard changed. */
START_TEST(test_short_send)
{
    static const size_t counts[] = {100, 300001};
    for (int k = 0; k < 2; k++) {
        size_t count = counts[k];
        run_case(2, BUG_SHORT_SEND, count);
        const bs_result *x = &results[1];
        ck_assert_msg(x->st == HOOP_ERR_INTERNAL, "rank 1: want HOOP_ERR_INTERNAL, got %s: %s",
                      hoop_status_name(x->st), x->msg);
        assert_has(x->msg, "allreduce algorithm rd, rank 1, step ", 1);
        assert_has(x->msg, "from rank 0", 1);
        /* the last chunk: whatever its size, the sent one is 4 bytes shorter */
        ck_assert_msg(strstr(x->msg, " bytes") && strstr(x->msg, "posted"),
                      "rank 1: the message does not give both sizes: %s", x->msg);
        /* Rank 0 hears it through the comm, pointed at rank 1's message (for hooprun's
         * report, which names the rank the others point at); it read "rank 1 failed or
         * closed its links", as of a link that broke, which named the wrong rank. */
        const char *heard = results[0].st != HOOP_OK ? results[0].msg : results[0].later_msg;
        assert_has(heard, "rank 1 failed allreduce(", 0);
        assert_has(heard, "on its link with rank 0 (HOOP_ERR_INTERNAL; see rank 1's message)", 0);
        for (int r = 0; r < 2; r++) {
            ck_assert_msg(results[r].later != HOOP_OK, "rank %d: the comm still works", r);
            ck_assert_msg(results[r].bad_guards == 0, "rank %d: %zu guard elements written", r,
                          results[r].bad_guards);
        }
    }
}
END_TEST

/* Schedules refused as they are built, on every rank, by name: a receive into the
 * (const) send buffer, a message longer than one chunk (a stage slot holds one), a
 * schedule function's bare error code (it showed the message of an earlier failure),
 * a reset that dropped the vote (a mismatched call then hung until HOOP_TIMEOUT). */
START_TEST(test_refused)
{
    static const struct {
        int bug;
        const char *want;
    } cases[] = {
        {BUG_WRITE_SEND, "of the send buffer, which a call only reads"},
        {BUG_BIG_STEP, "bytes, more than one chunk (524288 bytes, HOOP_CHUNK_BYTES)"},
        {BUG_BARE_CODE, "its schedule function failed with HOOP_ERR_INVALID and no message"},
        {BUG_RESET, "its schedule function changed the "},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        run_case(2, cases[k].bug, 300001);
        for (int r = 0; r < 2; r++) {
            const bs_result *x = &results[r];
            ck_assert_msg(x->st == HOOP_ERR_INTERNAL,
                          "bug %d, rank %d: want HOOP_ERR_INTERNAL, got %s: %s", cases[k].bug, r,
                          hoop_status_name(x->st), x->msg);
            ck_assert_msg(x->bad_guards == 0, "rank %d: %zu guard elements written", r,
                          x->bad_guards);
            if (strstr(x->msg, " failed: HOOP_ERR_INTERNAL during allreduce")) continue;
            assert_has(x->msg, "allreduce algorithm rd", r);
            assert_has(x->msg, cases[k].want, r);
        }
    }
}
END_TEST

/* An extra send (rank 1 to rank 0) lands in the next call's vote record: rank 0's next
 * call fails naming a stream out of step since an earlier call (it said "collective
 * mismatch: rank 1 sent no valid call record (is it running the same hoop?)"). Rank 1's
 * barrier, whose vote got rank 0's record whole, may succeed: its next call fails. */
START_TEST(test_extra_send)
{
    run_case(2, BUG_EXTRA_SEND, 1000);
    const bs_result *x = &results[0];
    ck_assert_msg(x->later == HOOP_ERR_INTERNAL,
                  "rank 0's next call: want HOOP_ERR_INTERNAL, got %s: %s",
                  hoop_status_name(x->later), x->later_msg);
    assert_has(x->later_msg, "it was this call's vote record from rank 1", 0);
    assert_has(x->later_msg, "an earlier call's schedules disagreed", 0);
    ck_assert_msg(!strstr(x->later_msg, "no valid call record"), "%s", x->later_msg);
}
END_TEST

/* A message between ranks no link joins (0 and 2 of 6): refused on both before any byte
 * moves, naming the algorithm, the step and the peer. */
START_TEST(test_no_link)
{
    run_case(6, BUG_NO_LINK, 1000);
    static const char *const want[2] = {"(send to rank 2) has no link to rank 2",
                                        "(recv from rank 0) has no link to rank 0"};
    int named = 0;
    for (int k = 0; k < 2; k++) {
        const bs_result *x = &results[2 * k];
        ck_assert_msg(x->st == HOOP_ERR_INTERNAL, "rank %d: want HOOP_ERR_INTERNAL, got %s: %s",
                      2 * k, hoop_status_name(x->st), x->msg);
        ck_assert_msg(x->bad_guards == 0, "rank %d: %zu guard elements written", 2 * k,
                      x->bad_guards);
        if (strstr(x->msg, " failed: HOOP_ERR_INTERNAL during allreduce")) continue;
        assert_has(x->msg, "allreduce algorithm rd", 2 * k);
        assert_has(x->msg, want[k], 2 * k);
        assert_has(x->msg, "the schedule is wrong (nothing was moved)", 2 * k);
        named++;
    }
    ck_assert_msg(named > 0, "neither rank named the step: %s", results[0].msg);
}
END_TEST

/* The wrapper itself is harmless: with no bug the rd all-reduce is right. */
static void sane_rank(h_rank *h)
{
    size_t count = 1000;
    float *in = guarded(count, (float)(h->rank + 1)), *out = guarded(count, 0);
    hoop_comm_set_algo(h->comm, HOOP_ALGO_RD);
    hoop_status st = hoop_allreduce(h->comm, in, out, count, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++) wrong += out[i] != (float)(h->n * (h->n + 1) / 2);
    if (st != HOOP_OK || wrong || guards_changed(in, count) || guards_changed(out, count))
        h_fail(h, "no bug: %s, %zu wrong: %s", hoop_status_name(st), wrong, hoop_last_error());
    free(in - GUARD);
    free(out - GUARD);
}

START_TEST(test_no_bug)
{
    run_ranks_ms(2, 10000, sane_rank, NULL);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("badsched");
    TCase *tc = tcase_create("errors");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_no_bug);
    tcase_add_test(tc, test_past_end);
    tcase_add_test(tc, test_short_send);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_extra_send);
    tcase_add_test(tc, test_no_link);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    setenv("HOOP_SHM_BYTES", "64K", 0); /* a message larger than the ring, too */
    return h_four_paths(suite) ? EXIT_FAILURE : EXIT_SUCCESS;
}
