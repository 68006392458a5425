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
 *   - WRITE_SEND, BIG_STEP, BARE_CODE, RESET, PARTIAL, VOTE_WRITE, HUGE_OFF: a receive
 *     into the send buffer, a message longer than a chunk, a bare error code, a reset
 *     schedule, a reduction of part of an element (its last bytes were left unreduced,
 *     or an error from inside shm), a receive into the vote records, a range whose end
 *     wraps past SIZE_MAX (named by its start and length), a schedule needing more
 *     scratch than hoop__coll_scratch_bytes says (a GPU call reserves that much before
 *     the schedule is built): refused as built;
 *   - EXTRA_SEND, EXTRA_SAME, EXTRA_RECV: rank 1 sends rank 0 one message more than
 *     rank 0 receives (of another size than the call's messages, or of the same size as
 *     its last), or receives one more than rank 0 sends. The call's vote sums the ranks'
 *     message digests and fails the call on every rank (2 and 3 ranks: the fold). The
 *     same-size one went unseen: the call succeeded, and the next one failed;
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
#include "collectives/comm.h"
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
    BUG_EXTRA_SAME, /* ... of the same size as its last message to rank 0 */
    BUG_EXTRA_RECV, /* rank 1 receives one message more than rank 0 sends it */
    BUG_NO_LINK,    /* of 6 ranks, rank 0 sends rank 2 a message (no link joins them) */
    BUG_PARTIAL,    /* the last message and its reduction are 2 bytes short of whole floats */
    BUG_VOTE_WRITE, /* rank 1 receives a message into the vote records */
    BUG_HUGE_OFF,   /* the last receive starts 3 bytes before SIZE_MAX (its end wraps) */
    BUG_CYCLE,      /* each rank ends with a receive and then a send waiting for it */
    BUG_SCRATCH     /* the schedule asks for scratch that hoop__coll_scratch_bytes does not */
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
    case BUG_EXTRA_SAME:
    case BUG_EXTRA_RECV:
        if (a->rank == 1)
            hoop__sched_add(
                s,
                (hoop__step){
                    .kind = atomic_load(&bug) == BUG_EXTRA_RECV ? HOOP__STEP_RECV : HOOP__STEP_SEND,
                    .buf = atomic_load(&bug) == BUG_EXTRA_RECV ? HOOP__BUF_RECV : HOOP__BUF_SEND,
                    .peer = 0,
                    .dep = {-1, -1},
                    .bytes = atomic_load(&bug) == BUG_EXTRA_SAME   ? send->bytes
                             : atomic_load(&bug) == BUG_EXTRA_RECV ? 128
                                                                   : 1024});
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
    case BUG_PARTIAL:
        send->bytes -= 2;
        recv->bytes -= 2;
        break;
    case BUG_VOTE_WRITE:
        if (a->rank == 1) recv->buf = HOOP__BUF_VOTE;
        break;
    case BUG_HUGE_OFF: recv->off = SIZE_MAX - 2; break;
    case BUG_SCRATCH: s->scratch_bytes = 64; break;
    case BUG_CYCLE: {
        int32_t got = hoop__sched_add(s, (hoop__step){.kind = HOOP__STEP_RECV,
                                                      .buf = HOOP__BUF_RECV,
                                                      .peer = 1 - a->rank,
                                                      .dep = {-1, -1},
                                                      .bytes = 64});
        hoop__sched_add(s, (hoop__step){.kind = HOOP__STEP_SEND,
                                        .buf = HOOP__BUF_SEND,
                                        .peer = 1 - a->rank,
                                        .dep = {got, -1},
                                        .bytes = 64});
        break;
    }
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

static void run_case_ms(int n, int which, size_t count, int64_t timeout_ms)
{
    bs_case c = {.bug = which, .count = count};
    memset(results, 0, sizeof(results));
    atomic_store(&bug, which);
    run_ranks_ms(n, timeout_ms, one_rank, &c);
    atomic_store(&bug, BUG_NONE);
}

static void run_case(int n, int which, size_t count)
{
    run_case_ms(n, which, count, 10000);
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
        size_t count; /* 0: 300001 */
    } cases[] = {
        {BUG_WRITE_SEND, "of the send buffer, which a call only reads", 0},
        {BUG_BIG_STEP, "bytes, more than one chunk (524288 bytes, HOOP_CHUNK_BYTES)", 0},
        {BUG_BARE_CODE, "its schedule function failed with HOOP_ERR_INVALID and no message", 0},
        {BUG_RESET, "its schedule function changed the ", 0},
        {BUG_PARTIAL,
         "reduces 3998 bytes at offset 0 (its other operand at offset 0), not whole elements of 4 "
         "bytes",
         1000},
        {BUG_VOTE_WRITE, "names the vote records (buffer 4), which only the call's vote", 1000},
        {BUG_HUGE_OFF, "writes 4000 bytes from byte 18446744073709551613 on of the receive", 1000},
        {BUG_SCRATCH,
         "its schedule needs 64 scratch bytes, more than hoop__coll_scratch_bytes "
         "gives (0; algo.c)",
         1000},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        run_case(2, cases[k].bug, cases[k].count ? cases[k].count : 300001);
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

/* A message sent and never received, or the reverse (rank 1 and rank 0), fails the
 * call itself on every rank, found by its vote. An extra send had made rank 0's next
 * call fail ("an earlier call's schedules disagreed"), and one of the size of the
 * call's messages had let the call succeed: placed before the real one, its bytes
 * would have been taken for them. No guard changed; the comm is failed. */
START_TEST(test_extra_send)
{
    static const int bugs[] = {BUG_EXTRA_SEND, BUG_EXTRA_SAME, BUG_EXTRA_RECV};
    for (int n = 2; n <= 3; n++)
        for (size_t k = 0; k < sizeof(bugs) / sizeof(bugs[0]); k++) {
            run_case(n, bugs[k], 1000);
            int named = 0;
            for (int r = 0; r < n; r++) {
                const bs_result *x = &results[r];
                ck_assert_msg(x->st == HOOP_ERR_INTERNAL,
                              "%d ranks, bug %d, rank %d: want HOOP_ERR_INTERNAL, got %s: %s", n,
                              bugs[k], r, hoop_status_name(x->st), x->msg);
                ck_assert_msg(x->later != HOOP_OK, "rank %d: the comm still works", r);
                ck_assert_msg(x->bad_guards == 0, "rank %d: %zu guard elements written", r,
                              x->bad_guards);
                if (strstr(x->msg, " failed: HOOP_ERR_INTERNAL during allreduce")) continue;
                assert_has(x->msg,
                           "allreduce algorithm rd: the ranks' schedules do not pair their "
                           "messages",
                           r);
                named++;
            }
            ck_assert_msg(named > 0, "%d ranks, bug %d: no rank named the cause: %s", n, bugs[k],
                          results[0].msg);
        }
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

/* Schedules that pair every message but wait on each other (each rank's last receive
 * waits for the other's last send, which waits for that receive) time out; the
 * message names the algorithm's step each rank was waiting on, so the researcher
 * sees the cycle (it said only "still waiting for data from rank 1"). */
START_TEST(test_cycle)
{
    run_case_ms(2, BUG_CYCLE, 1000, 1000);
    int named = 0;
    for (int r = 0; r < 2; r++) {
        const bs_result *x = &results[r];
        ck_assert_msg(x->st == HOOP_ERR_TIMEOUT, "rank %d: want HOOP_ERR_TIMEOUT, got %s: %s", r,
                      hoop_status_name(x->st), x->msg);
        named += strstr(x->msg, "'s step ") && strstr(x->msg, ", a recv of 64 bytes)");
    }
    ck_assert_msg(named > 0, "no rank named the step it waited on: %s | %s", results[0].msg,
                  results[1].msg);
}
END_TEST

/* The vote's sum of message digests, merge by merge: a merge adds the two states' sums
 * and coverage; the fold's even rank, handed back a final state that covers it already,
 * takes that state's sum as it is (adding its own again would leave a sum that is not 0
 * on a correct call, or never cover all ranks); the verdict comes only at full cover. */
START_TEST(test_vote_sums)
{
    static const struct {
        int world, in_covers;
        uint64_t mine, in;
        uint32_t covers;
        uint64_t sum;
        int unpaired;
    } cases[] = {
        {2, 1, 5, (uint64_t)-5, 2, 0, 0}, /* two ranks that pair */
        {2, 1, 5, 3, 2, 8, 1},            /* two that do not */
        {3, 3, 5, 0, 3, 0, 0},            /* the fold's even rank gets a final 0 back */
        {3, 3, 0, 9, 3, 9, 1},            /* ... a final 9 */
        {3, 2, 5, (uint64_t)-5, 3, 0, 0}, /* an odd rank's last merge */
        {4, 2, 0, 7, 3, 7, 0},            /* not every rank yet: no verdict */
    };
    static uint64_t votes[HOOP__VOTE_BYTES / 8], theirs[sizeof(hoop__vote) / 8];
    hoop__hdr call = {.kind = 1, .coll = 1, .count = 4};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        memset(votes, 0, sizeof(votes));
        hoop__vote_init(votes, &call, 0);
        hoop__vote_init(theirs, &call, 1);
        hoop__vote *mine = (hoop__vote *)votes, *in = (hoop__vote *)theirs;
        mine->msgs = cases[k].mine;
        in->msgs = cases[k].in;
        in->covers = (uint32_t)cases[k].in_covers;
        size_t inbox = (HOOP__VOTE_ROUNDS + 1) * sizeof(hoop__vote);
        memcpy((char *)votes + inbox, in, sizeof(hoop__vote));
        hoop__step st = {.kind = HOOP__STEP_VOTE,
                         .buf = HOOP__BUF_VOTE,
                         .peer = 1,
                         .off = inbox,
                         .src_off = 0,
                         .bytes = sizeof(hoop__vote)};
        ck_assert_int_eq(hoop__vote_merge(votes, &st, 0, cases[k].world), HOOP_OK);
        const hoop__vote *next = hoop__vote_after(votes, &st);
        ck_assert_msg(next->covers == cases[k].covers && next->msgs == cases[k].sum,
                      "case %zu: covers %u, sum %llu; want %u, %llu", k, next->covers,
                      (unsigned long long)next->msgs, cases[k].covers,
                      (unsigned long long)cases[k].sum);
        ck_assert_int_eq(hoop__vote_unpaired(votes, &st, cases[k].world), cases[k].unpaired);
    }
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
    tcase_add_test(tc, test_vote_sums);
    tcase_add_test(tc, test_cycle);
    tcase_add_test(tc, test_no_link);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    setenv("HOOP_SHM_BYTES", "64K", 0); /* a message larger than the ring, too */
    return h_four_paths(suite) ? EXIT_FAILURE : EXIT_SUCCESS;
}
