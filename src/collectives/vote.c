/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/vote.c -- every rank learns that every rank called the same collective
 * before any rank completes it (the vote), and the token barrier built the same way.
 *
 * Each call's schedule starts with a vote: a recursive-doubling all-reduce, over the
 * rd partners every comm is connected to, of a 128-byte record holding this rank's
 * 32-byte call header (sequence number, collective, count, dtype, op, algorithm, root,
 * and for direct the shared segment and offset) and "the first pair of different calls
 * seen so far". Round j: send state S[j] to the partner, receive its state into I[j],
 * merge: S[j+1] = S[j], marked bad with (me, my call, partner, its call) when the
 * partner's header differs from mine, or with the partner's pair when it was already
 * bad. Equality is transitive, so after the last round S says whether all n headers
 * are equal (Thakur, Rabenseifner & Gropp 2005, recursive doubling; a non-power-of-two
 * world folds its first 2 x rem ranks in pairs, as rd.c does: the even rank of a pair
 * hands its record to the odd one and gets the final state back). Beside the call, the
 * record sums the ranks' message digests (hoop__sched_check) and counts the ranks the
 * sum covers: once it covers all n, a sum that is not 0 says that the ranks' schedules
 * do not pair every message sent with a receive (exec.c fails the call; the fold's
 * returned final state already covers its even rank, which takes it as it is). A rank that finds
 * its final state bad (or any merged state: it fails at once) fails the call, and the comm, with
 * HOOP_ERR_MISMATCH naming both calls; since every rank's final state covers every rank, no rank
 * can complete a call that another rank called differently.
 *
 * Where the records travel: vote steps come first in the schedule, so on every link they
 * precede the call's data; the pattern depends only on (rank, world_size), never on the
 * header, so even a mismatched call reads its peers' records exactly (data behind them
 * may then misalign, but the vote fails the call first). Completing the vote also proves
 * every rank has arrived at this call: the barrier is the vote alone, and the direct
 * algorithms read their peers' memory only after it. Cost: lg p rounds (+2 when folded)
 * of one 128-byte message, run alongside the data (only receives into user memory wait,
 * and only for the first round: exec.c).
 *
 * The token barrier (hoop__sched_rd_sync) is the same pattern with one-byte tokens and
 * no merge: a rank's round-j token leaves once it has passed its own `after` step and
 * received round j-1, so its last token in means every rank passed `after`.
 *
 * Owns nothing. Thread-safety: run by a comm's progress thread.
 */
#include <stdio.h>
#include <string.h>

#include "collectives/comm.h"
#include "core/check.h"

#define VOTE_MAGIC 0x564f5445u /* "VOTE" */

/* Offsets in the vote buffer: states S[0..HOOP__VOTE_ROUNDS], then inboxes I[j]. */
static size_t state_off(int j)
{
    return (size_t)j * sizeof(hoop__vote);
}
static size_t inbox_off(int j)
{
    return (size_t)(HOOP__VOTE_ROUNDS + 1 + j) * sizeof(hoop__vote);
}

static int32_t add(hoop__sched *s, hoop__step_kind kind, int buf, int peer, size_t off,
                   size_t src_off, size_t bytes, int32_t dep0, int32_t dep1)
{
    return hoop__sched_add(s, (hoop__step){.kind = (uint8_t)kind,
                                           .buf = (uint8_t)buf,
                                           .peer = peer,
                                           .dep = {dep0, dep1},
                                           .off = off,
                                           .src_off = src_off,
                                           .bytes = bytes});
}

/* One vote exchange with peer: send S[*j] (after dep), receive I[*j], merge into
 * S[*j + 1]; *j advances. Returns the merge (or dep when there is no receive). */
static int32_t vote_round(hoop__sched *s, int peer, int *j, int32_t dep, int send, int recv)
{
    size_t vb = sizeof(hoop__vote);
    if (send) add(s, HOOP__STEP_SEND, HOOP__BUF_VOTE, peer, state_off(*j), 0, vb, dep, -1);
    if (!recv) return dep;
    int32_t got = add(s, HOOP__STEP_RECV, HOOP__BUF_VOTE, peer, inbox_off(*j), 0, vb, -1, -1);
    /* The merge reads S[j] (written by the previous merge, dep) and I[j]. */
    int32_t merged =
        add(s, HOOP__STEP_VOTE, HOOP__BUF_VOTE, peer, inbox_off(*j), state_off(*j), vb, got, dep);
    ++*j;
    return merged;
}

/* The vote in the recursive-doubling pattern with fold: the merges form one chain, so
 * each merge (and each send, which follows the previous merge) carries everything this
 * rank has heard. Returns the last merge. */
static int32_t vote_pattern(hoop__sched *s, int r, int n)
{
    int p, rem, me, j = 0;
    if (n < 2) return -1;
    hoop__fold(r, n, &p, &rem, &me);
    if (me < 0) return vote_round(s, r + 1, &j, -1, 1, 1); /* hand in, get the result */
    int32_t cur = r < 2 * rem ? vote_round(s, r - 1, &j, -1, 0, 1) : -1;
    for (int mask = 1; mask < p; mask <<= 1)
        cur = vote_round(s, hoop__unfold(me ^ mask, rem), &j, cur, 1, 1);
    if (r < 2 * rem) vote_round(s, r - 1, &j, cur, 1, 0);
    return cur;
}

static int32_t token(hoop__sched *s, hoop__step_kind kind, int peer, int32_t dep0, int32_t dep1)
{
    /* Token bytes: receive into byte 1, send from byte 0, so the two never overlap. */
    return add(s, kind, HOOP__BUF_TOKEN, peer, kind == HOOP__STEP_RECV ? 1 : 0, 0, 1, dep0, dep1);
}

/* The token barrier in the same pattern. Tokens carry nothing to merge, so what this
 * rank has heard is the join of its receives: each send waits for the previous round's
 * receive and the previous send (which waited for everything before, the first for
 * `after`), and a final zero-byte local step joins the last receive and send. */
static int32_t sync_pattern(hoop__sched *s, int r, int n, int32_t after)
{
    int p, rem, me;
    if (n < 2) return after;
    hoop__fold(r, n, &p, &rem, &me);
    if (me < 0) {
        token(s, HOOP__STEP_SEND, r + 1, after, -1);
        return token(s, HOOP__STEP_RECV, r + 1, -1, -1);
    }
    int32_t got = r < 2 * rem ? token(s, HOOP__STEP_RECV, r - 1, -1, -1) : -1;
    int32_t sent = after;
    for (int mask = 1; mask < p; mask <<= 1) {
        int peer = hoop__unfold(me ^ mask, rem);
        sent = token(s, HOOP__STEP_SEND, peer, sent, got);
        got = token(s, HOOP__STEP_RECV, peer, -1, -1);
    }
    if (r < 2 * rem) sent = token(s, HOOP__STEP_SEND, r - 1, sent, got);
    return add(s, HOOP__STEP_COPY, HOOP__BUF_TOKEN, r, 0, 0, 0, got, sent);
}

int32_t hoop__sched_votes(hoop__sched *s, int rank, int world_size)
{
    s->voted = vote_pattern(s, rank, world_size);
    s->nvote = s->n;
    return s->voted;
}

int32_t hoop__sched_rd_sync(hoop__sched *s, int rank, int world_size, int32_t after)
{
    return sync_pattern(s, rank, world_size, after);
}

void hoop__vote_init(void *votes, const hoop__hdr *mine, int rank)
{
    hoop__vote *v = votes;
    v[0] = (hoop__vote){.magic = VOTE_MAGIC, .from = rank, .covers = 1, .hdr = *mine};
}

static int hdr_equal(const hoop__hdr *a, const hoop__hdr *b)
{
    return a->kind == b->kind && a->seq == b->seq && a->count == b->count && a->coll == b->coll &&
           a->dtype == b->dtype && a->op == b->op && a->algo == b->algo && a->root == b->root &&
           a->aux == b->aux && a->refused == b->refused;
}

hoop_status hoop__vote_merge(void *votes, const hoop__step *st, int rank, int world_size)
{
    const hoop__vote *in = (const hoop__vote *)((char *)votes + st->off);
    const hoop__vote *cur = (const hoop__vote *)((char *)votes + st->src_off);
    hoop__vote *next = (hoop__vote *)((char *)votes + st->src_off + sizeof(hoop__vote));
    *next = *cur;
    if (in->magic != VOTE_MAGIC || in->from != st->peer) {
        next->bad = 1;
        next->a_rank = rank;
        next->b_rank = st->peer;
        next->a = cur->hdr;
        memset(&next->b, 0, sizeof(next->b));
    } else if (!hdr_equal(&in->hdr, &cur->hdr)) {
        if (!next->bad)
            *next = (hoop__vote){.magic = VOTE_MAGIC,
                                 .from = rank,
                                 .bad = 1,
                                 .a_rank = rank,
                                 .b_rank = in->from,
                                 .hdr = cur->hdr,
                                 .a = cur->hdr,
                                 .b = in->hdr};
    } else if (in->bad && !next->bad) {
        next->bad = 1;
        next->a_rank = in->a_rank;
        next->b_rank = in->b_rank;
        next->a = in->a;
        next->b = in->b;
    } else if ((int64_t)cur->covers + in->covers > world_size) {
        /* The fold's even rank gets the final state back, which covers it already. */
        next->covers = in->covers;
        next->msgs = in->msgs;
    } else {
        next->covers = cur->covers + in->covers;
        next->msgs = cur->msgs + in->msgs;
    }
    if (!next->bad) return HOOP_OK;
    char a[160], b[160];
    hoop__hdr_describe(&next->a, a, sizeof(a));
    if (next->b.kind == 0)
        return HOOP_ERROR(HOOP_ERR_MISMATCH,
                          "collective mismatch: rank %d called %s but rank %d sent no valid "
                          "call record (is it running the same hoop?)",
                          next->a_rank, a, next->b_rank);
    hoop__hdr_describe(&next->b, b, sizeof(b));
    return HOOP_ERROR(
        HOOP_ERR_MISMATCH, "collective mismatch: rank %d called %s but rank %d called %s%s",
        next->a_rank, a, next->b_rank, b, hoop__hdr_mismatch_hint(&next->a, &next->b));
}

const hoop__vote *hoop__vote_after(const void *votes, const hoop__step *st)
{
    return (const hoop__vote *)((const char *)votes + st->src_off + sizeof(hoop__vote));
}

int hoop__vote_unpaired(const void *votes, const hoop__step *st, int world_size)
{
    const hoop__vote *v = hoop__vote_after(votes, st);
    return !v->bad && v->covers == (uint32_t)world_size && v->msgs != 0;
}

/* Appends " r" for each real rank behind newrank x (two for a folded pair) but me. */
static size_t list_newrank(char *buf, size_t cap, size_t len, int x, int rem, int me_real,
                           int *listed)
{
    int real[2] = {hoop__unfold(x, rem), x < rem ? 2 * x : -1};
    for (int k = 0; k < 2 && real[k] >= 0; k++) {
        if (real[k] == me_real) continue;
        if (*listed < 8 && len + 13 < cap)
            len += (size_t)snprintf(buf + len, cap - len, " %d", real[k]);
        else if (*listed == 8 && len + 8 < cap)
            len += (size_t)snprintf(buf + len, cap - len, " ...");
        ++*listed;
    }
    return len;
}

int hoop__vote_wait_info(const hoop__step *st, int rank, int n, char *buf, size_t cap)
{
    int p, rem, me, q = st->peer;
    int j = (int)(st->off / sizeof(hoop__vote)) - (HOOP__VOTE_ROUNDS + 1);
    hoop__fold(rank, n, &p, &rem, &me);
    int odd = rank < 2 * rem && me >= 0, k = j - odd, m = 1 << (k < 0 ? 0 : k), listed = 0;
    int precise = (odd && j == 0) || (me >= 0 && k >= 0 && m == 1 && (me ^ 1) >= rem);
    if (st->kind == HOOP__STEP_SEND) {
        snprintf(buf, cap, "for the link to rank %d to take this rank's vote", q);
        return 0;
    }
    if (precise) {
        snprintf(buf, cap, "for the call's vote from rank %d (has it called this collective?)", q);
        return 1;
    }
    size_t len =
        (size_t)snprintf(buf, cap, "for the call's vote from rank %d, which relays ranks", q);
    if (me < 0) { /* the fold's even rank hears from everyone else through its partner */
        for (int x = 0; x < p; x++) len = list_newrank(buf, cap, len, x, rem, rank, &listed);
    } else {
        int lo = (me ^ m) & ~(m - 1);
        for (int x = lo; x < lo + m; x++) len = list_newrank(buf, cap, len, x, rem, rank, &listed);
    }
    if (len < cap)
        snprintf(buf + len, cap - len,
                 " (one of them has not called this collective, or is stuck before it)");
    return 0;
}
