/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/algo.c -- the all-reduce algorithm table, its cost model, and
 * schedule storage.
 *
 * Each algorithm is a row { name, id, schedule, cost and peers functions }. AUTO picks
 * the row with the smallest modelled time, using the alpha-beta-gamma model of Thakur,
 * Rabenseifner & Gropp 2005: alpha = latency per message, beta = seconds per byte on a
 * link, gamma = seconds per byte reduced. N = message bytes, n = world size,
 * p = largest power of two <= n; folding a non-power-of-two world costs rd and rhd
 * an extra 2 alpha + 2 N beta + N gamma.
 *   ring: 2(n-1) alpha + 2 (n-1)/n N beta + (n-1)/n N gamma + C beta
 *   rd:   lg p alpha + lg p N beta + lg p N gamma + lg p min(N, C) beta
 *   rhd:  2 lg p alpha + 2 (p-1)/p N beta + (p-1)/p N gamma + 2 lg p min(N/2, C) beta
 * The last term is pipeline fill (C = chunk bytes): a step that forwards what the
 * previous step received waits for a whole chunk first. Along a ring the steps overlap,
 * so the ring pays this once; rd and rhd change partner every step and pay it per step
 * (measured: 4 ranks on 1 Gbit/s links, 2 MiB, rhd 0.108 GB/s busbw, ring 0.119).
 * alpha and beta are the communicator's: the slowest of its links' transports (each
 * transport's cost slot; loopback TCP's figures for one without), agreed by every rank
 * at init so that all pick alike. gamma is a constant here; only the ratios matter for
 * the choice.
 *
 * Owns nothing. Thread-safe (constant data, pure functions).
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "collectives/coll.h"
#include "core/check.h"
#include "transport/transport.h"

static const hoop__cost_params default_cost = {
    .gamma = 1.0 / 4.0e9, /* s per byte reduced */
    .chunk = 512 << 10,   /* bytes, replaced by the comm's chunk */
};

static double lg(int p)
{
    double l = 0;
    while (p > 1) p >>= 1, l += 1;
    return l;
}

static double fill(double bytes, const hoop__cost_params *c)
{
    return (bytes < c->chunk ? bytes : c->chunk) * c->beta;
}

static double fold_cost(int n, double N, const hoop__cost_params *c)
{
    int p = 1;
    while (p * 2 <= n) p *= 2;
    return p == n ? 0 : 2 * c->alpha + 2 * N * c->beta + N * c->gamma;
}

static double cost_ring(int n, size_t bytes, const hoop__cost_params *c)
{
    double N = (double)bytes, f = (double)(n - 1) / n;
    return 2 * (n - 1) * c->alpha + 2 * f * N * c->beta + f * N * c->gamma + fill(N, c);
}

static double cost_rd(int n, size_t bytes, const hoop__cost_params *c)
{
    double N = (double)bytes, l = lg(n);
    return l * (c->alpha + N * c->beta + N * c->gamma + fill(N, c)) + fold_cost(n, N, c);
}

static double cost_rhd(int n, size_t bytes, const hoop__cost_params *c)
{
    double N = (double)bytes, l = lg(n), p = 1 << (int)l, f = (p - 1) / p;
    return 2 * l * (c->alpha + fill(N / 2, c)) + 2 * f * N * c->beta + f * N * c->gamma +
           fold_cost(n, N, c);
}

const hoop__algo_entry hoop__allreduce_algos[] = {
    /* Each exchanges with ring neighbours or rd partners only, which every comm links
     * (hoop__algo_peers_of): no peers function. */
    {"ring", HOOP_ALGO_RING, hoop__allreduce_ring, cost_ring, NULL},
    {"rd", HOOP_ALGO_RD, hoop__allreduce_rd, cost_rd, NULL},
    {"rhd", HOOP_ALGO_RHD, hoop__allreduce_rhd, cost_rhd, NULL},
    /* Only for buffers that every rank maps (collectives.c decides; no cost here). */
    {"direct", HOOP_ALGO_DIRECT, hoop__allreduce_direct, NULL, NULL},
    {NULL, HOOP_ALGO_AUTO, NULL, NULL, NULL},
};

hoop_algo hoop__algo_pick(hoop_algo requested, int world_size, size_t bytes, size_t chunk_bytes,
                          const struct hoop_tp_cost *link)
{
    if (requested == HOOP_ALGO_DIRECT) requested = HOOP_ALGO_AUTO; /* the buffer is not shared */
    if (requested != HOOP_ALGO_AUTO) return requested;
    hoop_algo best = HOOP_ALGO_RING;
    hoop__cost_params c = default_cost;
    double best_t = 0;
    c.alpha = link->alpha;
    c.beta = link->beta;
    if (chunk_bytes) c.chunk = (double)chunk_bytes;
    for (const hoop__algo_entry *e = hoop__allreduce_algos; e->name; e++) {
        if (!e->cost) continue;
        double t = e->cost(world_size, bytes, &c);
        /* A tie goes to the earlier row: on 2 ranks rhd's cost equals ring's below a
         * chunk, and rounding alone would otherwise flip between them. */
        if (e == hoop__allreduce_algos || t < best_t * (1 - 1e-9)) best = e->id, best_t = t;
    }
    return best;
}

void hoop__algo_peers_of(const hoop__algo_entry *rows, int rank, int n, unsigned char *need)
{
    int p, rem, me;
    memset(need, 0, (size_t)n);
    if (n == 1) return;
    need[(rank + 1) % n] = need[(rank + n - 1) % n] = 1;
    /* rd partners, for the vote and the token barrier of every call (vote.c): with the
     * fold, ranks below 2 rem pair off as rank ^ 1, then the survivors exchange across
     * each bit of their folded index. */
    hoop__fold(rank, n, &p, &rem, &me);
    if (rank < 2 * rem) need[rank ^ 1] = 1;
    if (me >= 0)
        for (int mask = 1; mask < p; mask <<= 1) need[hoop__unfold(me ^ mask, rem)] = 1;
    for (const hoop__algo_entry *e = rows; e->name; e++)
        if (e->peers) e->peers(rank, n, need);
    need[rank] = 0; /* never a link to itself, whatever a row marks */
}

void hoop__algo_peers(int rank, int n, unsigned char *need)
{
    hoop__algo_peers_of(hoop__allreduce_algos, rank, n, need);
}

hoop_status hoop__algo_peers_check(const hoop__algo_entry *rows, int rank, int n)
{
    unsigned char *mine = NULL, *theirs = NULL;
    hoop_status st = HOOP_OK;
    HOOP_CHECK_GOTO(hoop__calloc(&mine, (size_t)n), st, out);
    HOOP_CHECK_GOTO(hoop__calloc(&theirs, (size_t)n), st, out);
    for (const hoop__algo_entry *e = rows; e->name; e++) {
        if (!e->peers) continue;
        memset(mine, 0, (size_t)n);
        e->peers(rank, n, mine);
        for (int q = 0; q < n; q++) {
            if (q == rank || !mine[q]) continue;
            memset(theirs, 0, (size_t)n);
            e->peers(q, n, theirs);
            if (theirs[rank]) continue;
            st = HOOP_INTERNAL_ERROR(
                "the all-reduce algorithm %s's peers function is not symmetric: on %d ranks it "
                "marks rank %d for rank %d, but not rank %d for rank %d (a link has two ends: "
                "each must mark the other; src/collectives/coll.h)",
                e->name, n, q, rank, rank, q);
            goto out;
        }
    }
out:
    free(mine);
    free(theirs);
    return st;
}

/* Names by value, from the one list in hoop/comm.h. */
static const char *const algo_names[HOOP_ALGO_COUNT_] = {
#define NAME_(name, val, str) [val] = str,
    HOOP_ALGO_MAP(NAME_)
#undef NAME_
};

const char *hoop_algo_name(hoop_algo algo)
{
    return (unsigned)algo < HOOP_ALGO_COUNT_ && algo_names[algo] ? algo_names[algo] : "?";
}

hoop_status hoop_algo_from_name(const char *name, hoop_algo *out)
{
    if (!name || !out)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_algo_from_name: %s is NULL",
                          !name ? "name" : "out");
    for (int a = 0; a < HOOP_ALGO_COUNT_; a++)
        if (algo_names[a] && strcasecmp(algo_names[a], name) == 0) {
            *out = (hoop_algo)a;
            return HOOP_OK;
        }
    return HOOP_ERROR(HOOP_ERR_INVALID, "algorithm '%s' is not one of %s", name ? name : "(null)",
                      HOOP_ALGO_CHOICES);
}

hoop_status hoop__algo_check(const char *fn, hoop_algo algo)
{
    if ((unsigned)algo < HOOP_ALGO_COUNT_ && algo_names[algo]) return HOOP_OK;
    return HOOP_ERROR(HOOP_ERR_INVALID, "%s: algo=%d is not one of %s (0..%d)", fn, (int)algo,
                      HOOP_ALGO_CHOICES, HOOP_ALGO_COUNT_ - 1);
}

// ----------------------------------------------------------------- schedules

hoop_status hoop__coll_schedule(const hoop__coll_args *a, hoop__sched *s)
{
    int direct = a->algo == HOOP_ALGO_DIRECT;
    switch (a->coll) {
    case HOOP__COLL_ALLREDUCE:
        for (const hoop__algo_entry *e = hoop__allreduce_algos; e->name; e++)
            if (e->id == a->algo) return e->fn(a, s);
        break;
    case HOOP__COLL_BROADCAST: return hoop__broadcast_chain(a, s);
    case HOOP__COLL_REDUCE: return hoop__reduce_chain(a, s);
    case HOOP__COLL_ALLGATHER:
        return direct ? hoop__allgather_direct(a, s) : hoop__allgather_ring(a, s);
    case HOOP__COLL_REDUCE_SCATTER:
        return direct ? hoop__reduce_scatter_direct(a, s) : hoop__reduce_scatter_ring(a, s);
    case HOOP__COLL_BARRIER: return hoop__barrier_vote(a, s);
    }
    return HOOP_INTERNAL_ERROR("no schedule for collective %d with algo=%d (%s)", (int)a->coll,
                               (int)a->algo, hoop_algo_name(a->algo));
}

/* As the schedules set scratch_bytes: the chain reduce at positions 2 and on (chain.c),
 * the ring reduce-scatter for 3 ranks and more (ring.c); nothing else uses scratch.
 * check_collectives compares the two for every collective, algorithm and position. */
size_t hoop__coll_scratch_bytes(const hoop__coll_args *a)
{
    int n = a->world_size, pos = ((a->rank - a->root) % n + n) % n;
    size_t bytes = a->count * a->elem;
    if (a->coll == HOOP__COLL_REDUCE) return pos >= 2 ? bytes : 0;
    if (a->coll == HOOP__COLL_REDUCE_SCATTER && a->algo != HOOP_ALGO_DIRECT)
        return n > 2 ? bytes : 0;
    return 0;
}

int32_t hoop__sched_add(hoop__sched *s, hoop__step st)
{
    if (s->err != HOOP_OK) return -1;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        hoop_status rc = hoop__realloc(&s->steps, cap);
        if (rc != HOOP_OK) {
            s->err = rc;
            return -1;
        }
        s->cap = cap;
    }
    if (s->n >= INT32_MAX) {
        s->err = HOOP_ERROR(HOOP_ERR_INVALID, "collective needs more than 2^31 steps; raise "
                                              "HOOP_CHUNK_BYTES");
        return -1;
    }
    s->steps[s->n] = st;
    return (int32_t)s->n++;
}

hoop_status hoop__sched_copy(hoop__sched *s, const hoop__sched *from)
{
    if (s->cap < from->n) {
        HOOP_CHECK(hoop__realloc(&s->steps, from->n));
        s->cap = from->n;
    }
    if (from->n) memcpy(s->steps, from->steps, from->n * sizeof(*s->steps));
    s->n = from->n;
    s->voted = from->voted;
    s->nvote = from->nvote;
    s->scratch_bytes = from->scratch_bytes;
    s->err = HOOP_OK;
    return HOOP_OK;
}

void hoop__sched_reset(hoop__sched *s)
{
    s->n = 0;
    s->scratch_bytes = 0;
    s->err = HOOP_OK;
}

void hoop__sched_free(hoop__sched *s)
{
    free(s->steps);
    memset(s, 0, sizeof(*s));
}
