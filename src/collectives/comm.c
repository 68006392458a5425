/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/comm.c -- communicator set-up and tear-down.
 *
 * hoop_comm_init resolves the configuration (explicit fields, else HOOP_* variables),
 * opens the transports HOOP_TRANSPORT allows from the registry (auto: every one this host
 * has) and publishes a card listing them through the store or an in-process rendezvous,
 * reading back only the cards of the ranks it links to; picks each link's transport from
 * them (links.c), agrees with every rank on the cost model's link figures (the slowest
 * link of any rank, folded by rank 0: hoop__store_gather_fold), connects
 * the links its algorithms need (data links to the ring neighbours and
 * recursive-doubling partners, which also carry each call's vote, plus one control link
 * to the next rank for failure and goodbye records), registers the staging slots with
 * the transports that take registrations, then starts the progress thread (progress.c).
 *
 * Owns: the transport contexts, links, slots and their registrations, scratch, the progress thread
 * and, for hoop_comm_init_env, the store client. Thread-safety: init/destroy from one thread;
 * accessors, abort and bytes_sent from any thread.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "bootstrap/store_proto.h"
#include "collectives/comm.h"
#include "collectives/memops.h"
#include "collectives/rendezvous.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/fdlimit.h"
#include "core/fault.h"

#define COMM_DEPTH 8                /* chunks in flight per peer and direction */
#define COMM_SLOT_BUDGET (32 << 20) /* bytes of staging slots per comm, at most */
#define COMM_MAX_NSOCKS 16          /* config.nsocks: the tcp transport's limit */
#define COMM_MIN_CHUNK 64           /* config.chunk_bytes (HOOP_CHUNK_BYTES: from 4K) */
#define COMM_MAX_CHUNK (64 << 20)

/* Values from cfg, or from the environment where cfg leaves them unset. */
typedef struct comm_settings {
    int64_t timeout_ms, nsocks, chunk, shm_bytes, stage_slots;
    char chunk_from[40]; /* "config.chunk_bytes=N", "HOOP_CHUNK_BYTES=V" or "the default" */
    const char *token, *ifname;
    const char *memops; /* HOOP_MEMOPS */
    hoop_algo algo;
    const char *forced;          /* HOOP_TRANSPORT=tcp|shm|ib: the only transport; NULL = auto */
    struct hoop_tp_ib_config ib; /* HOOP_IB_* */
} comm_settings;

hoop_status hoop__comm_ib_config(struct hoop_tp_ib_config *ib)
{
    static const char *const names[] = {"HOOP_IB_GID_INDEX", "HOOP_IB_TIMEOUT",
                                        "HOOP_IB_RETRY_CNT", "HOOP_IB_TC",
                                        "HOOP_IB_SL",        "HOOP_IB_REG_CACHE"};
    int *const into[] = {&ib->gid_index, &ib->timeout, &ib->retry_cnt,
                         &ib->tc,        &ib->sl,      &ib->reg_cache};
    _Static_assert(HOOP_ARRAY_SIZE(names) == HOOP_ARRAY_SIZE(into), "one field per setting");
    for (size_t i = 0; i < HOOP_ARRAY_SIZE(names); i++) {
        int64_t v;
        HOOP_CHECK(hoop__env_int(names[i], &v));
        *into[i] = (int)v;
    }
    HOOP_CHECK(hoop__env_str("HOOP_IB_HCA", &ib->hca));
    return hoop__env_str("HOOP_IB_ADDR_RANGE", &ib->addr_range);
}

static hoop_status read_settings(const hoop_comm_config *cfg, comm_settings *s)
{
    const char *algo = NULL, *tp = NULL;
    HOOP_CHECK(hoop__env_str("HOOP_TRANSPORT", &tp)); /* one of the table's choices */
    s->forced = tp && strcasecmp(tp, "auto") != 0 ? tp : NULL;
    HOOP_CHECK(hoop__comm_ib_config(&s->ib));
    HOOP_CHECK(hoop__env_int("HOOP_SHM_BYTES", &s->shm_bytes)); /* a power of two */
    /* (HOOP_TIMEOUT, HOOP_TCP_NSOCKS and HOOP_CHUNK_BYTES have their ranges checked by
     * env.c; the config's fields are checked here, under their own names) */
    s->timeout_ms = cfg->timeout_ms;
    if (s->timeout_ms == 0) /* every wait would fail at once, naming ranks that came */
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_comm_init: config.timeout_ms=0: give a "
                                            "deadline > 0 ms, or < 0 for HOOP_TIMEOUT");
    if (s->timeout_ms < 0) HOOP_CHECK(hoop__env_ms("HOOP_TIMEOUT", &s->timeout_ms));
    s->nsocks = cfg->nsocks;
    if (s->nsocks < 0 || s->nsocks > COMM_MAX_NSOCKS)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_comm_init: config.nsocks=%d is out of range [1, %d] (0 for "
                          "HOOP_TCP_NSOCKS)",
                          cfg->nsocks, COMM_MAX_NSOCKS);
    if (s->nsocks == 0) HOOP_CHECK(hoop__env_int("HOOP_TCP_NSOCKS", &s->nsocks));
    snprintf(s->chunk_from, sizeof(s->chunk_from), "config.chunk_bytes=%zu", cfg->chunk_bytes);
    if (cfg->chunk_bytes != 0 &&
        (cfg->chunk_bytes < COMM_MIN_CHUNK || cfg->chunk_bytes > COMM_MAX_CHUNK))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_comm_init: config.chunk_bytes=%zu is out of range [%d, %d] (0 "
                          "for HOOP_CHUNK_BYTES)",
                          cfg->chunk_bytes, COMM_MIN_CHUNK, COMM_MAX_CHUNK);
    s->chunk = (int64_t)cfg->chunk_bytes;
    if (s->chunk == 0) {
        const char *v = getenv("HOOP_CHUNK_BYTES");
        HOOP_CHECK(hoop__env_int("HOOP_CHUNK_BYTES", &s->chunk));
        snprintf(s->chunk_from, sizeof(s->chunk_from), "%s%.20s",
                 v && *v ? "HOOP_CHUNK_BYTES=" : "the default", v && *v ? v : "");
    }
    s->chunk &= ~(int64_t)7; /* a multiple of every element size */
    s->token = cfg->token;
    if (!s->token) HOOP_CHECK(hoop__env_str("HOOP_TOKEN", &s->token));
    /* Checked here, on every rank and world size: the transports' hello, which holds it,
     * would refuse it on rank 0 only, while the others waited out HOOP_TIMEOUT for it. */
    _Static_assert(sizeof(((hoop_dist_env *)0)->token) == HOOP_TP_TOKEN_MAX,
                   "hoop_comm_init_env's token limit is the transports'");
    if (s->token && strlen(s->token) >= HOOP_TP_TOKEN_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s is longer than %d characters (%zu)",
                          cfg->token ? "config.token" : "HOOP_TOKEN", HOOP_TP_TOKEN_MAX - 1,
                          strlen(s->token));
    HOOP_CHECK(hoop__env_str("HOOP_SOCKET_IFNAME", &s->ifname));
    HOOP_CHECK(hoop__env_str("HOOP_MEMOPS", &s->memops));
    HOOP_CHECK(hoop__env_int("HOOP_STAGE_SLOTS", &s->stage_slots)); /* range: env.c */
    s->algo = cfg->algo;
    if (s->algo == HOOP_ALGO_AUTO) {
        HOOP_CHECK(hoop__env_str("HOOP_ALGO", &algo));
        if (algo) HOOP_CHECK(hoop_algo_from_name(algo, &s->algo));
    }
    return HOOP_OK;
}

static hoop_status check_config(const hoop_comm_config *cfg)
{
    if (!cfg || cfg->size != sizeof(hoop_comm_config) || cfg->version != HOOP_COMM_CONFIG_VERSION)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_comm_init: config is NULL or not from HOOP_COMM_CONFIG_INIT");
    if (cfg->world_size < 1)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_comm_init: world_size=%d must be >= 1",
                          cfg->world_size);
    if (cfg->rank < 0 || cfg->rank >= cfg->world_size)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_comm_init: rank=%d is not in [0, %d)", cfg->rank,
                          cfg->world_size);
    if (cfg->world_size > 1 && !cfg->store == !cfg->rendezvous)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_comm_init: set exactly one of config.store and config.rendezvous");
    if (cfg->rendezvous && hoop__rendezvous_world_size(cfg->rendezvous) != cfg->world_size)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_comm_init: the rendezvous is for %d ranks, world_size is %d",
                          hoop__rendezvous_world_size(cfg->rendezvous), cfg->world_size);
    return hoop__algo_check("hoop_comm_init", cfg->algo);
}

// ----------------------------------------------------------------- connecting

/* Every rank creates its communicators in the same order, so the n-th one of each process
 * meets under the same name in the store. */
static atomic_int generation;

/* The store name of a start-up round ("hoop.comm.<gen><round>"). */
static void round_name(char *name, size_t cap, int gen, const char *round)
{
    snprintf(name, cap, "hoop.comm.%d%s", gen, round);
}

/* The cards of the ranks this one links to (need[], and the control ring's next) into
 * cards[p], world_size slots. Through the store, only those: hoop__store_exchange, each
 * rank asking for about log2(world_size) + 2 cards (an all-gather of every card moved
 * world_size^2 cards through rank 0's store thread); *round_gen gets the round, whose
 * key this rank deletes once the verdict shows every rank has read it. The rendezvous
 * (ranks in one process) gives all. A failure names the start-up step before the
 * store's message (which names the ranks at fault). */
static hoop_status exchange_cards(const hoop_comm *comm, const hoop_comm_config *cfg, int gen,
                                  const unsigned char *need, const hoop__card *mine,
                                  hoop__card *cards, int64_t deadline, int64_t *round_gen)
{
    char name[64], why[1800];
    int *peers = NULL, n = 0;
    hoop__card *got = NULL;
    if (cfg->rendezvous)
        return hoop__rendezvous_allgather(cfg->rendezvous, comm->rank, mine, cards, deadline);
    HOOP_CHECK(hoop__calloc(&peers, (size_t)comm->world_size));
    for (int p = 0; p < comm->world_size; p++)
        if (p != comm->rank && (need[p] || p == comm->next)) peers[n++] = p;
    hoop_status st = hoop__calloc(&got, (size_t)(n ? n : 1));
    round_name(name, sizeof(name), gen, "");
    if (st == HOOP_OK)
        st = hoop__store_exchange(cfg->store, name, mine, HOOP__CARD_BYTES, peers, n, got,
                                  hoop__ms_left(deadline), round_gen);
    for (int i = 0; st == HOOP_OK && i < n; i++) cards[peers[i]] = got[i];
    free(peers);
    free(got);
    if (st == HOOP_OK) return HOOP_OK;
    snprintf(why, sizeof(why), "%s", hoop_last_error());
    return HOOP_ERROR(st, "rank %d's start-up, exchanging link cards: %s", comm->rank, why);
}

/* One agreement of the start-up: every rank's card-sized blob (mine) folded into answer
 * (answer_bytes), by rank 0 through the store (hoop__store_gather_fold, round name
 * "hoop.comm.<gen><round>") or, through the rendezvous, by every rank from its
 * all-gather (each folds the same blobs the same way). more: as there (a peeked blob is
 * a card's size; NULL: nothing more).
 * *decided = 1 when the fold failed (every rank returns its message); another failure
 * names the start-up step (step: "agreeing on the link cost model") before the store's
 * message. */
static hoop_status agree(const hoop_comm *comm, const hoop_comm_config *cfg, int gen,
                         const char *round, const char *step, const hoop__card *mine,
                         hoop__store_fold_fn fold, void *arg, void *answer, size_t answer_bytes,
                         const hoop__store_gather_more *more, int64_t deadline, int *decided)
{
    char name[64], why[1800];
    hoop_status st;
    *decided = 0;
    if (cfg->rendezvous) {
        hoop__card *all;
        HOOP_CHECK(hoop__calloc(&all, (size_t)comm->world_size));
        st = hoop__rendezvous_allgather(cfg->rendezvous, comm->rank, mine, all, deadline);
        if (st == HOOP_OK) {
            if (more && more->peek >= 0) memcpy(more->peeked, &all[more->peek], HOOP__CARD_BYTES);
            st = fold(arg, all, comm->world_size, answer);
            *decided = st != HOOP_OK;
        }
        free(all);
        return st;
    }
    round_name(name, sizeof(name), gen, round);
    st = hoop__store_gather_fold(cfg->store, name, mine, HOOP__CARD_BYTES, fold, arg, answer,
                                 answer_bytes, more, hoop__ms_left(deadline), decided);
    if (st == HOOP_OK || *decided) return st;
    snprintf(why, sizeof(why), "%s", hoop_last_error());
    return HOOP_ERROR(st, "rank %d's start-up, %s: %s", comm->rank, step, why);
}

/* Files one accepted link; anything unexpected is refused. */
static hoop_status file_accepted(hoop_comm *comm, const unsigned char *need, struct hoop_tp_comm *c)
{
    int p = c->peer;
    if (c->channel == 0 && p >= 0 && p < comm->world_size && need[p] && !comm->recv[p]) {
        comm->recv[p] = c;
        return HOOP_OK;
    }
    if (c->channel == 1 && p == comm->prev && !comm->ctl_recv) {
        comm->ctl_recv = c;
        return HOOP_OK;
    }
    c->tp->close(c);
    return HOOP_ERROR(HOOP_ERR_REMOTE, "rank %d: unexpected link from rank %d (channel %d)",
                      comm->rank, p, c->channel);
}

/* How many of the links this rank needs are not up yet, and which, for the timeout's
 * message: "links to rank 2", "links to ranks 2, 3 and the control link from rank 1". */
static int links_missing(hoop_comm *comm, const unsigned char *need, char *what, size_t cap)
{
    int ranks = 0;
    size_t len = 0;
    char list[160] = "";
    for (int p = 0; p < comm->world_size; p++) {
        if (!need[p] || (comm->send[p] && comm->recv[p])) continue;
        if (len + 14 < sizeof(list))
            len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%d", ranks ? ", " : "", p);
        ranks++;
    }
    len = 0;
    what[0] = '\0';
    if (ranks) len = (size_t)snprintf(what, cap, "links to rank%s %s", ranks > 1 ? "s" : "", list);
    if (!comm->ctl_send && len < cap)
        len += (size_t)snprintf(what + len, cap - len, "%sthe control link to rank %d",
                                len ? " and " : "", comm->next);
    if (!comm->ctl_recv && len < cap)
        snprintf(what + len, cap - len, "%sthe control link from rank %d", len ? " and " : "",
                 comm->prev);
    return ranks + !comm->ctl_send + !comm->ctl_recv;
}

/* INFO: one line naming every link's transport ("rank 1 shm, rank 3 tcp"). */
static void log_links(const hoop_comm *comm, const unsigned char *need)
{
    char list[400];
    size_t len = 0;
    list[0] = '\0';
    if (!hoop__log_on(HOOP_LOG_INFO, HOOP_LOG_INIT)) return;
    for (int p = 0; p < comm->world_size && len + 40 < sizeof(list); p++)
        if (need[p])
            len += (size_t)snprintf(list + len, sizeof(list) - len, "%s rank %d %s", len ? "," : "",
                                    p, comm->send[p]->tp->name);
    HOOP_INFO(INIT, "rank %d: links to%s; control ring over %s", comm->rank, list,
              comm->ctl_send->tp->name);
}

/* INFO: what HOOP_ALGO means for this world size: under auto, the cost model's choice
 * by message size ("rd from 8 B, ring from 65536 B"), probed at powers of two, and the
 * link cost it models (the transports it comes from). */
static void log_algo(const hoop_comm *comm, hoop_algo algo)
{
    char plan[300];
    size_t len = 0;
    hoop_algo last = HOOP_ALGO_COUNT_;
    if (!hoop__log_on(HOOP_LOG_INFO, HOOP_LOG_INIT) || comm->world_size < 2) return;
    if (algo != HOOP_ALGO_AUTO && algo != HOOP_ALGO_DIRECT) {
        HOOP_INFO(INIT, "rank %d: all-reduce algorithm %s (set)", comm->rank, hoop_algo_name(algo));
        return;
    }
    for (size_t b = 8; b <= ((size_t)1 << 30) && len + 40 < sizeof(plan); b *= 2) {
        hoop_algo a = hoop__comm_algo_pick(comm, HOOP_ALGO_AUTO, b);
        if (a == last) continue;
        len += (size_t)snprintf(plan + len, sizeof(plan) - len, "%s%s from %zu B", len ? ", " : "",
                                hoop_algo_name(a), b);
        last = a;
    }
    HOOP_INFO(INIT,
              "rank %d: all-reduce algorithm %s: %s; direct on in-place shared buffers from %d "
              "KiB%s; modelled links: %.2f us per message (%s), %.3f ns per byte (%s)",
              comm->rank, hoop_algo_name(algo), plan, DIRECT_MIN_BYTES(comm->world_size) >> 10,
              algo == HOOP_ALGO_DIRECT ? " (any size: HOOP_ALGO=direct)" : "",
              comm->link_cost.c.alpha * 1e6, comm->link_cost.alpha_from,
              comm->link_cost.c.beta * 1e9, comm->link_cost.beta_from);
}

/* A link's transport (an index in comm->tps) and the peer's handle for it. */
struct link_plan {
    int k;
    void *handle;
};

static hoop_status plan_link(const hoop_comm *comm, hoop__card *card, const char *forced, int peer,
                             struct link_plan *out)
{
    HOOP_CHECK(hoop__link_pick(comm->tps, comm->ntps, card, forced, comm->rank, peer, &out->k));
    out->handle = card->tp[hoop__card_find(card, comm->tps[out->k].tp->name)].handle;
    return HOOP_OK;
}

/* One round of connects (data links, then the control link) and accepts. */
static hoop_status connect_round(hoop_comm *comm, struct hoop_tp_comm **listen,
                                 const unsigned char *need, const struct link_plan *plan,
                                 const struct link_plan *ctl, int *bad)
{
    struct hoop_tp_comm *c;
    for (int p = 0; p < comm->world_size; p++) {
        if (!need[p] || comm->send[p]) continue;
        const hoop__tp_open *o = &comm->tps[plan[p].k];
        *bad = p;
        HOOP_CHECK(o->tp->connect(o->ctx, plan[p].handle, 0, &comm->send[p]));
    }
    if (!comm->ctl_send) {
        const hoop__tp_open *o = &comm->tps[ctl->k];
        *bad = comm->next;
        HOOP_CHECK(o->tp->connect(o->ctx, ctl->handle, 1, &comm->ctl_send));
    }
    *bad = -1; /* an accept's failure: the peer may not be known */
    for (int k = 0; k < comm->ntps; k++) {
        if (!listen[k]) continue;
        do {
            HOOP_CHECK(comm->tps[k].tp->accept(listen[k], &c));
            if (c) HOOP_CHECK(file_accepted(comm, need, c));
        } while (c);
    }
    return HOOP_OK;
}

/* Picks every needed link's transport (plan[p]) and the control link's (ctl, from its own
 * copy of the next rank's card: a transport keeps its connect progress in the caller's
 * copy of the handle). */
static hoop_status plan_links(const hoop_comm *comm, hoop__card *cards, hoop__card *ctl_card,
                              const unsigned char *need, const char *forced, struct link_plan *plan,
                              struct link_plan *ctl)
{
    HOOP_CHECK(plan_link(comm, ctl_card, forced, comm->next, ctl));
    for (int p = 0; p < comm->world_size; p++)
        if (need[p]) HOOP_CHECK(plan_link(comm, &cards[p], forced, p, &plan[p]));
    return HOOP_OK;
}

/* Checks, before any link is connected, that RLIMIT_NOFILE leaves room for the
 * descriptors this rank's links will hold: both ends of the link to every needed peer
 * and of the control ring, each holding its transport's link_fds, plus the progress
 * thread's eventfd. Raises the soft limit where that suffices (hoop__fd_reserve);
 * otherwise fails at once with HOOP_ERR_SYSTEM naming the need and the limit: run out of
 * descriptors halfway, a rank could only fail one accept or socket at a time while its
 * peers waited for it. */
static hoop_status reserve_fds(const hoop_comm *comm, const unsigned char *need,
                               const struct link_plan *plan, const struct link_plan *ctl)
{
    int64_t ends[HOOP__TP_MAX] = {0}, more = 1;
    int peers = 0;
    char what[400];
    for (int p = 0; p < comm->world_size; p++)
        if (need[p]) ends[plan[p].k] += 2, peers++;
    ends[ctl->k] += 2;
    size_t len =
        (size_t)snprintf(what, sizeof(what), "rank %d's links to %d peer%s and the control ring (",
                         comm->rank, peers, peers == 1 ? "" : "s");
    for (int k = 0, first = 1; k < comm->ntps && len < sizeof(what); k++) {
        const hoop__tp_open *o = &comm->tps[k];
        if (!ends[k]) continue;
        int fds = o->tp->link_fds ? o->tp->link_fds(o->ctx) : 1;
        more += ends[k] * fds;
        len += (size_t)snprintf(
            what + len, sizeof(what) - len, "%s%lld link ends over %s, %d descriptor%s each%s",
            first ? "" : "; ", (long long)ends[k], o->tp->name, fds, fds == 1 ? "" : "s",
            o->tp == &hoop__transport_tcp ? ", one per HOOP_TCP_NSOCKS stream" : "");
        first = 0;
    }
    if (len < sizeof(what)) snprintf(what + len, sizeof(what) - len, ")");
    return hoop__fd_reserve(more, what);
}

// ----------------------------------------------------------------- link cost

/* What each rank says for the cost model and the shared memory's reach. */
typedef union cost_card {
    hoop__card size;
    struct {
        hoop__link_cost cost; /* the slowest of its data links */
        int64_t chunk;        /* the chunk size: the schedules' message sizes depend on it */
        char from[40];        /* where it came from (s->chunk_from) */
        int32_t has_shm;      /* shm is open here, its handle in shm */
        _Alignas(8) unsigned char shm[HOOP_TP_HANDLE_MAX]; /* as a card keeps a handle */
    } c;
} cost_card;
_Static_assert(sizeof(((cost_card *)0)->c) <= sizeof(hoop__card), "the cost fits a card");

/* What every rank learns from the fold (fold_cost). */
typedef struct cost_answer {
    hoop__link_cost cost;
    int32_t all_local; /* every rank is reachable over shm (hoop_comm_alloc_shared) */
} cost_answer;

/* The fold of every rank's cost_card (arg: the folding rank's comm). Fails with
 * HOOP_ERR_MISMATCH naming the first rank whose chunk size differs from rank 0's, and
 * HOOP_ERR_REMOTE for a cost that is none (hoop__link_cost_max). all_local: shm is open
 * on the folding rank and reaches every rank's shm handle (shm's reach is one host's
 * boot, network namespace and user: the same for every pair when it is for the folder's). */
static hoop_status fold_cost(void *arg, const void *blobs, int n, void *answer)
{
    const hoop_comm *comm = arg;
    const cost_card *all = blobs;
    cost_answer *a = answer;
    const hoop__tp_open *shm = NULL;
    /* Every rank sees every chunk size, so each finds the same first rank that differs
     * from rank 0 and fails the same way: nobody waits. (Before, the ranks connected and
     * their first collective failed on a message size, as if hoop had a bug.) */
    for (int p = 1; p < n; p++)
        if (all[p].c.chunk != all[0].c.chunk)
            return HOOP_ERROR(HOOP_ERR_MISMATCH,
                              "rank 0 cuts messages into chunks of %lld bytes (%.*s), rank %d "
                              "into chunks of %lld bytes (%.*s): every rank must use the same "
                              "chunk size",
                              (long long)all[0].c.chunk, (int)sizeof(all[0].c.from) - 1,
                              all[0].c.from, p, (long long)all[p].c.chunk,
                              (int)sizeof(all[p].c.from) - 1, all[p].c.from);
    memset(a, 0, sizeof(*a));
    hoop__link_cost_init(&a->cost);
    for (int p = 0; p < n; p++) HOOP_CHECK(hoop__link_cost_max(&a->cost, &all[p].c.cost, p));
    for (int k = 0; k < comm->ntps; k++)
        if (comm->tps[k].tp == &hoop__transport_shm) shm = &comm->tps[k];
    a->all_local = shm != NULL;
    for (int p = 0; p < n && a->all_local; p++)
        a->all_local = all[p].c.has_shm && shm->tp->reachable(shm->ctx, all[p].c.shm);
    return HOOP_OK;
}

/* The cost model's alpha and beta: the slowest of every rank's data links. Each rank
 * folds its own links' transports, then rank 0 folds every rank's (agree: O(world_size)
 * through the store), so that every rank picks the same algorithm: a rank whose links
 * all stay on its host would otherwise model a faster comm than a rank with a link to
 * another host. The same round carries each rank's chunk size, which must be the same
 * everywhere (HOOP_ERR_MISMATCH, with *all_know set: every rank fails so), and its shm
 * handle, for comm->all_local. */
static hoop_status agree_cost(hoop_comm *comm, const hoop_comm_config *cfg, const comm_settings *s,
                              const hoop__card *card, int gen, int64_t card_round,
                              const unsigned char *need, const struct link_plan *plan,
                              int64_t deadline, int *all_know)
{
    char cards_name[64];
    cost_card mine;
    cost_answer a;
    /* A rank not linked to a missing one gets here: those that are, still waiting for its
     * card, are named apart from it when this round times out */
    round_name(cards_name, sizeof(cards_name), gen, "");
    hoop__store_gather_more more = {
        .peek = -1, .after = cards_name, .after_generation = card_round};
    memset(&mine, 0, sizeof(mine));
    hoop__link_cost_init(&mine.c.cost);
    mine.c.chunk = s->chunk;
    snprintf(mine.c.from, sizeof(mine.c.from), "%s", s->chunk_from);
    int e = hoop__card_find(card, hoop__transport_shm.name);
    if (e >= 0) {
        mine.c.has_shm = 1;
        memcpy(mine.c.shm, card->tp[e].handle, sizeof(mine.c.shm));
    }
    for (int p = 0; p < comm->world_size; p++) {
        if (!need[p]) continue;
        hoop__link_cost x;
        hoop__link_cost_of(&x, comm->tps[plan[p].k].tp, comm->tps[plan[p].k].ctx);
        HOOP_CHECK(hoop__link_cost_max(&mine.c.cost, &x, comm->rank));
    }
    HOOP_CHECK(agree(comm, cfg, gen, ".cost", "agreeing on the link cost model", &mine.size,
                     fold_cost, comm, &a, sizeof(a), &more, deadline, all_know));
    comm->link_cost = a.cost;
    comm->all_local = a.all_local;
    return HOOP_OK;
}

hoop_algo hoop__comm_algo_pick(const hoop_comm *comm, hoop_algo algo, size_t bytes)
{
    return hoop__algo_pick(algo, comm->world_size, bytes, comm->chunk_bytes, &comm->link_cost.c);
}

/* 1 when rank p is one whose links this rank still lacks (after links_missing). */
static int still_missing(const hoop_comm *comm, const unsigned char *need, int p)
{
    if (p < 0 || p >= comm->world_size) return 0;
    return (need[p] && !(comm->send[p] && comm->recv[p])) || (p == comm->next && !comm->ctl_send) ||
           (p == comm->prev && !comm->ctl_recv);
}

/* How often a rank whose links are not all up asks the store whether a rank was lost. */
#define LOST_PROBE_NS (200 * 1000000LL)

/* The store key where a rank whose start-up failed after the card exchange leaves its
 * rank number (agree_verdict), for the ranks still connecting to stop early. */
static void failed_key(char *key, size_t cap, int gen)
{
    snprintf(key, cap, "hoop.comm.%d.failed", gen);
}

/* Connects and accepts until every link is up, or the deadline. With a store, a rank
 * lost meanwhile (its process died: store_proto.h, "A rank lost") whose links this rank
 * still lacks, a rank whose start-up failed (its note under failed_key: *bad is set to
 * it), or rank 0 failing or dying (its store gone), fails the loop within LOST_PROBE_NS
 * instead of at the deadline. */
static hoop_status connect_loop(hoop_comm *comm, struct hoop_tp_comm **listen,
                                const unsigned char *need, const struct link_plan *plan,
                                const struct link_plan *ctl, hoop_store *store, int gen,
                                int64_t deadline, int *bad)
{
    char list[300], why[1200], key[64];
    int64_t next_probe = hoop__now_ns() + LOST_PROBE_NS;
    failed_key(key, sizeof(key), gen);
    for (int round = 0;; round++) {
        HOOP_CHECK(connect_round(comm, listen, need, plan, ctl, bad));
        if (round == 0 && hoop__fault_tick(HOOP__FAULT_CONNECT, comm->rank))
            hoop__fault_raise(comm->rank, "connecting its links (after the first round)");
        if (links_missing(comm, need, list, sizeof(list)) == 0) break;
        *bad = -1;
        int64_t now = hoop__now_ns();
        if (now > deadline)
            return HOOP_ERROR(HOOP_ERR_TIMEOUT, "rank %d: %s not up within HOOP_TIMEOUT (%lld ms)",
                              comm->rank, list, (long long)comm->timeout_ms);
        int lost = -1, found = 0;
        if (store && now >= next_probe) {
            next_probe = now + LOST_PROBE_NS;
            /* A late answer is not a lost store, up to this loop's own deadline: rank 0's
             * store thread may still be busy with the requests of a large world's start-up
             * (an answer later than the 1 s a probe's reply is given by default failed the
             * start-up). Rank 0's death is seen at once all the same: its connection
             * closes. */
            hoop__store_set_reply_grace(store, hoop__ms_left(deadline));
            hoop_status ps = hoop__store_probe(store, key, &lost, &found, why, sizeof(why));
            hoop__store_set_reply_grace(store, 0);
            if (ps != HOOP_OK) { /* rank 0 failed or died: its store said why */
                snprintf(why, sizeof(why), "%s", hoop_last_error());
                return HOOP_ERROR(ps, "rank %d's start-up, connecting links: %s not up: %s",
                                  comm->rank, list, why);
            }
        }
        if (found) { /* agree_verdict adds that rank's reason */
            *bad = atoi(why);
            return HOOP_ERROR(HOOP_ERR_REMOTE,
                              "rank %d's start-up, connecting links: %s not up, and rank %s's "
                              "start-up failed",
                              comm->rank, list, why);
        }
        if (still_missing(comm, need, lost))
            return HOOP_ERROR(HOOP_ERR_REMOTE,
                              "rank %d's start-up, connecting links: %s cannot come up: %s; "
                              "the job cannot start without rank %d: restart the whole job "
                              "(hooprun --max-restarts)",
                              comm->rank, list, why, lost);
        struct pollfd pfd[HOOP__TP_MAX];
        int n = 0;
        for (int k = 0; k < comm->ntps; k++)
            if (listen[k] && comm->tps[k].tp->pollfds)
                n += comm->tps[k].tp->pollfds(listen[k], pfd + n, 1);
        poll(pfd, (nfds_t)n, 1);
    }
    log_links(comm, need);
    return HOOP_OK;
}

/* What auto mode says when a transport's init finds the host lacks it. */
static void log_skipped(const hoop_comm *comm, const struct hoop_transport *tp, const char *why)
{
    if (strcmp(tp->name, "ib") == 0 && strncmp(why, "HOOP_IB_HCA=", 12) == 0)
        HOOP_WARN("rank %d: %s; tcp between hosts", comm->rank, why); /* a typo, most likely */
    else if (strcmp(tp->name, "ib") == 0)
        HOOP_INFO(INIT, "rank %d: no usable RDMA device (%s); tcp between hosts", comm->rank, why);
    else if (strcmp(tp->name, "shm") == 0)
        HOOP_INFO(INIT, "rank %d: no shared-memory transport (%s); using tcp", comm->rank, why);
    else
        HOOP_INFO(INIT, "rank %d: no %s transport (%s); going without it", comm->rank, tp->name,
                  why);
}

/* Opens one transport and lists it on this rank's card. In auto mode (forced NULL), a
 * transport this host lacks (init or listen: HOOP_ERR_UNSUPPORTED) is left out with an
 * INFO line; any other failure, and every failure of a forced one, fails the comm (a
 * forced one this host lacks says so, with the transport's own message). */
static hoop_status open_one(hoop_comm *comm, const struct hoop_transport *tp,
                            const struct hoop_tp_config *tcfg, const char *forced, hoop__card *mine,
                            struct hoop_tp_comm **listen)
{
    const char *missing;
    void *ctx = NULL, *handle = NULL;
    char why[400], before[1024];
    snprintf(before, sizeof(before), "%s", hoop_last_error()); /* kept if tp is skipped */
    hoop_status st = tp->init(tcfg, &ctx);
    if (st == HOOP_OK && !hoop__transport_complete(tp, &missing))
        st = HOOP_INTERNAL_ERROR("transport %s lacks slot %s", tp->name, missing);
    if (st == HOOP_OK) st = hoop__card_add(mine, tp->name, &handle);
    if (st == HOOP_OK) st = tp->listen(ctx, handle, listen);
    if (st == HOOP_OK) {
        comm->tps[comm->ntps++] = (hoop__tp_open){.tp = tp, .ctx = ctx};
        return HOOP_OK;
    }
    snprintf(why, sizeof(why), "%s", *hoop_last_error() ? hoop_last_error() : hoop_status_str(st));
    *listen = NULL;
    if (handle) mine->tp[--mine->n] = (hoop__card_entry){{0}, {0}};
    if (ctx) tp->finalize(ctx);
    if (forced && st == HOOP_ERR_UNSUPPORTED)
        return HOOP_ERROR(st, "HOOP_TRANSPORT=%s, but rank %d cannot use it: %s", forced,
                          comm->rank, why);
    if (st != HOOP_ERR_UNSUPPORTED) return HOOP_ERROR(st, "%s", why);
    log_skipped(comm, tp, why);
    hoop__error_restore(before);
    return HOOP_OK;
}

/* Opens this rank's endpoints: in auto mode every registered transport the host has,
 * else the one HOOP_TRANSPORT names. */
static hoop_status open_endpoints(hoop_comm *comm, const hoop_comm_config *cfg,
                                  const comm_settings *s, struct hoop_tp_comm **listen,
                                  hoop__card *mine)
{
    struct hoop_tp_config tcfg = {.rank = comm->rank,
                                  .token = s->token,
                                  .ifname = s->ifname,
                                  .master_addr = cfg->master_addr,
                                  .nsocks = (int)s->nsocks,
                                  .ring_bytes = (size_t)s->shm_bytes,
                                  .ib = s->ib};
    tcfg.ib.local_rank = comm->local_rank; /* picks among the ports HOOP_IB_HCA selects */
    hoop__card_init(mine);
    if (s->forced && !hoop__transport_find(s->forced))
        return HOOP_INTERNAL_ERROR("HOOP_TRANSPORT=%s is not a registered transport", s->forced);
    for (int i = 0; hoop__transports[i]; i++) {
        const struct hoop_transport *tp = hoop__transports[i];
        if (s->forced && strcasecmp(tp->name, s->forced) != 0) continue;
        HOOP_CHECK(open_one(comm, tp, &tcfg, s->forced, mine, &listen[comm->ntps]));
    }
    return HOOP_OK;
}

/* The last step of a start-up: every rank tells every other whether its links came up
 * (a card-sized blob through the rendezvous or the store: its status, the peer it blames,
 * its message), and each decides from all of them, so that a start-up succeeds on every
 * rank or fails on every rank naming where it went wrong. Without it, a rank whose links
 * were all up returned from hoop_comm_init while a peer's failed, and its first
 * collective blamed whichever peer closed a link first, not the rank at fault. A rank
 * that died meanwhile, so never answers, is named by the store at once (store_proto.h,
 * "A rank lost"). st and bad: this rank's outcome (bad: the peer a HOOP_ERR_REMOTE
 * blames, or -1), its message the thread's. The wait lasts until the connect deadline,
 * or VERDICT_GRACE_NS from now when that is later (ranks reach this step a moment apart).
 *
 * Returns HOOP_OK when every rank's links are up. The root is the first rank that failed
 * of its own accord (not HOOP_ERR_REMOTE), else the first that failed. A rank that failed
 * keeps its status and message; when it failed because of a peer (HOOP_ERR_REMOTE) it
 * adds the root's reason, else its blamed peer's when that peer failed too ("rank 2 had
 * failed first: ..."); when the step itself failed, the step's message ("; then ...").
 * A rank that did not fail returns the step's failure, or HOOP_ERR_REMOTE naming the
 * root and its reason. */
#define VERDICT_GRACE_NS (1000 * 1000000LL)
typedef union verdict {
    hoop__card size;
    struct {
        int32_t status, bad;
        char why[HOOP__CARD_BYTES - 8];
    } v;
} verdict;
_Static_assert(sizeof(verdict) == HOOP__CARD_BYTES, "a verdict is one card's size");

/* What every rank learns from the verdicts: the root and its verdict. */
typedef struct verdict_answer {
    int32_t root; /* -1: every rank's links are up */
    verdict v;    /* the root's */
} verdict_answer;

static hoop_status fold_verdict(void *arg, const void *blobs, int n, void *answer)
{
    const verdict *all = blobs;
    verdict_answer *a = answer;
    int root = -1;
    (void)arg;
    memset(a, 0, sizeof(*a));
    for (int p = 0; p < n; p++) {
        if (all[p].v.status == HOOP_OK) continue;
        if (root < 0 ||
            (all[root].v.status == HOOP_ERR_REMOTE && all[p].v.status != HOOP_ERR_REMOTE))
            root = p;
    }
    a->root = root;
    if (root >= 0) a->v = all[root];
    a->v.v.why[sizeof(a->v.v.why) - 1] = '\0'; /* another process's bytes */
    return HOOP_OK;
}

static hoop_status agree_verdict(hoop_comm *comm, const hoop_comm_config *cfg, int gen,
                                 hoop_status st, int bad, int64_t deadline, int *agreed)
{
    verdict mine, peeked = {.v.status = HOOP_OK};
    verdict_answer a;
    char why[1800], key[64];
    int n = comm->world_size, decided = 0;
    size_t len = 0;
    memset(&mine, 0, sizeof(mine));
    mine.v.status = st;
    mine.v.bad = bad;
    if (st != HOOP_OK) {
        snprintf(why, sizeof(why), "%s", hoop_last_error());
        len = strlen(why);
        snprintf(mine.v.why, sizeof(mine.v.why), "%.*s", (int)sizeof(mine.v.why) - 1, why);
        if (cfg->store) { /* the ranks still connecting stop at their next probe */
            char r[16];
            failed_key(key, sizeof(key), gen);
            snprintf(r, sizeof(r), "%d", comm->rank);
            (void)hoop_store_set(cfg->store, key, r, strlen(r));
        }
    }
    /* A rank that failed because of a peer may add that peer's reason (below) */
    int peek = st == HOOP_ERR_REMOTE && bad >= 0 && bad < n && bad != comm->rank ? bad : -1;
    hoop__store_gather_more more = {.peek = peek, .peeked = &peeked};
    int64_t now = hoop__now_ns();
    int64_t until = deadline > now + VERDICT_GRACE_NS ? deadline : now + VERDICT_GRACE_NS;
    hoop_status vs = agree(comm, cfg, gen, ".verdict", "agreeing that every rank's links are up",
                           &mine.size, fold_verdict, NULL, &a, sizeof(a), &more, until, &decided);
    *agreed = vs == HOOP_OK;
    if (vs != HOOP_OK) {
        if (st == HOOP_OK) return vs; /* its message names the step and the rank at fault */
        if (len < sizeof(why))
            snprintf(why + len, sizeof(why) - len, "; then %s", hoop_last_error());
        return HOOP_ERROR(st, "%s", why);
    }
    int root = a.root;
    if (st != HOOP_OK) {
        /* A failure caused by a peer's (a link that broke, or a note): the root's reason,
         * else the blamed peer's, when they failed too. */
        int first = root >= 0 && root != comm->rank && a.v.v.status != HOOP_ERR_REMOTE ? root : bad;
        const verdict *fv = NULL;
        if (first >= 0 && first == root) fv = &a.v;
        if (first >= 0 && first == peek) fv = &peeked;
        peeked.v.why[sizeof(peeked.v.why) - 1] = '\0'; /* another process's bytes */
        if (st == HOOP_ERR_REMOTE && fv && first != comm->rank && fv->v.status != HOOP_OK &&
            len < sizeof(why))
            snprintf(why + len, sizeof(why) - len, "; rank %d had failed first: %s", first,
                     fv->v.why);
        return HOOP_ERROR(st, "%s", why);
    }
    if (root < 0) return HOOP_OK;
    return HOOP_ERROR(HOOP_ERR_REMOTE,
                      "rank %d's start-up: its links are up, but rank %d's are not: %s", comm->rank,
                      root, a.v.v.why);
}

static void close_listeners(hoop_comm *comm, struct hoop_tp_comm **listen)
{
    for (int k = 0; k < comm->ntps; k++)
        if (listen[k]) {
            comm->tps[k].tp->close(listen[k]);
            listen[k] = NULL;
        }
}

static hoop_status connect_all(hoop_comm *comm, const hoop_comm_config *cfg, const comm_settings *s)
{
    struct hoop_tp_comm *listen[HOOP__TP_MAX] = {0};
    hoop__card mine, ctl_card, *cards = NULL;
    struct link_plan ctl, *plan = NULL;
    unsigned char *need = NULL;
    hoop_status st;
    int64_t deadline = hoop__deadline_ns(s->timeout_ms), card_round = -1;
    int gen = 0, verdict = 0, all_know = 0, agreed = 0;
    HOOP_CHECK_GOTO(open_endpoints(comm, cfg, s, listen, &mine), st, out);
    HOOP_CHECK_GOTO(hoop__calloc(&cards, (size_t)comm->world_size), st, out);
    HOOP_CHECK_GOTO(hoop__calloc(&need, (size_t)comm->world_size), st, out);
    HOOP_CHECK_GOTO(hoop__calloc(&plan, (size_t)comm->world_size), st, out);
    HOOP_CHECK_GOTO(hoop__calloc(&comm->send, (size_t)comm->world_size), st, out);
    HOOP_CHECK_GOTO(hoop__calloc(&comm->recv, (size_t)comm->world_size), st, out);
    HOOP_CHECK_GOTO(hoop__algo_peers_check(hoop__allreduce_algos, comm->rank, comm->world_size), st,
                    out);
    hoop__algo_peers(comm->rank, comm->world_size, need);
    if (!cfg->rendezvous) gen = atomic_fetch_add(&generation, 1);
    if (hoop__fault_tick(HOOP__FAULT_RENDEZVOUS, comm->rank))
        hoop__fault_raise(comm->rank, "the rendezvous (before publishing its card)");
    HOOP_CHECK_GOTO(exchange_cards(comm, cfg, gen, need, &mine, cards, deadline, &card_round), st,
                    out);
    for (int p = 0; p < comm->world_size; p++)
        if (need[p] || p == comm->next) HOOP_CHECK_GOTO(hoop__card_check(&cards[p], p), st, out);
    ctl_card = cards[comm->next];
    HOOP_CHECK_GOTO(plan_links(comm, cards, &ctl_card, need, s->forced, plan, &ctl), st, out);
    HOOP_CHECK_GOTO(
        agree_cost(comm, cfg, s, &mine, gen, card_round, need, plan, deadline, &all_know), st, out);
    int bad = -1;
    st = reserve_fds(comm, need, plan, &ctl);
    if (st == HOOP_OK)
        st = connect_loop(comm, listen, need, plan, &ctl, cfg->store, gen, deadline, &bad);
    if (st == HOOP_OK && hoop__fault_tick(HOOP__FAULT_VERDICT, comm->rank)) {
        hoop__fault_raise(comm->rank, "its start-up, its links up (before the verdict)");
        st = HOOP_ERROR(HOOP_ERR_SYSTEM, "rank %d: HOOP_TEST_FAULT failed its start-up here",
                        comm->rank);
    }
    /* A rank that failed closes its endpoints before it waits for the verdict: a peer
     * still connecting to it is refused at once instead of waiting in a backlog. */
    close_listeners(comm, listen);
    st = agree_verdict(comm, cfg, gen, st, bad, deadline, &agreed);
    verdict = 1;
    if (agreed && card_round >= 0) {
        /* Every rank has given its verdict, so every rank has read the cards it needed:
         * this rank's card can go (the store would keep world_size cards a comm). */
        char name[64], before[1800];
        snprintf(before, sizeof(before), "%s", hoop_last_error());
        round_name(name, sizeof(name), gen, "");
        (void)hoop__store_exchange_end(cfg->store, name, card_round);
        hoop__error_restore(before);
    }
out:
    /* A rank that failed on its own before the verdict (a setting its transport refused,
     * links it cannot plan) leaves the others waiting for its card or its cost: it tells
     * the store (an ABORT, store_proto.h), which fails every rank at once with its
     * reason. A failure that came from another rank (HOOP_ERR_REMOTE) or a time-out is
     * known to all already, as is one every rank found in what all exchanged; the
     * verdict shares whatever comes after it. */
    if (st != HOOP_OK && !verdict && !all_know && cfg->store && st != HOOP_ERR_REMOTE &&
        st != HOOP_ERR_TIMEOUT) {
        char why[1024];
        snprintf(why, sizeof(why), "%s", hoop_last_error());
        hoop__store_abort(cfg->store, st, why);
    }
    close_listeners(comm, listen);
    free(cards);
    free(need);
    free(plan);
    return st;
}

const char *hoop__comm_link_transport(const hoop_comm *comm, int peer)
{
    if (!comm || peer < 0 || peer >= comm->world_size || !comm->send || !comm->send[peer])
        return NULL;
    return comm->send[peer]->tp->name;
}

// ----------------------------------------------------------------- init / destroy

/* Registers the staging slots with every transport that takes registrations, once, before
 * the progress thread (and so any receive into a slot) starts. */
static hoop_status register_slots(hoop_comm *comm)
{
    size_t bytes = (size_t)comm->nslots * comm->slot_bytes;
    for (int k = 0; k < comm->ntps; k++) {
        hoop__tp_open *o = &comm->tps[k];
        if (!o->tp->reg_mr) continue;
        hoop_status st = o->tp->reg_mr(o->ctx, comm->slots, bytes, HOOP_TP_MEM_HOST, &o->slot_mr);
        if (st != HOOP_OK) {
            char why[400]; /* the message is rewritten below: copy it out first */
            snprintf(why, sizeof(why), "%s", hoop_last_error());
            o->slot_mr = NULL;
            return HOOP_ERROR(st, "rank %d: registering %zu bytes of staging slots with %s: %s",
                              comm->rank, bytes, o->tp->name, why);
        }
    }
    return HOOP_OK;
}

/* A memory operation finished (from the memops table's thread): wake the progress
 * thread if it sleeps. */
static void mem_wake(void *arg)
{
    hoop__comm_wake(arg);
}

static hoop_status comm_start(hoop_comm *comm, const comm_settings *s)
{
    comm->chunk_bytes = (size_t)s->chunk;
    comm->slot_bytes = (size_t)s->chunk;
    comm->depth = COMM_DEPTH;
    comm->stage_nslots = (int)s->stage_slots;
    comm->nslots = COMM_DEPTH;
    while (comm->nslots > 2 && (size_t)comm->nslots * comm->slot_bytes > COMM_SLOT_BUDGET)
        comm->nslots--;
    if (comm->world_size > 1) {
        HOOP_CHECK(hoop__calloc(&comm->slots, (size_t)comm->nslots * comm->slot_bytes));
        HOOP_CHECK(register_slots(comm));
    }
    comm->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (comm->wake_fd < 0) {
        int err = errno;
        char hint[160];
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "rank %d: eventfd for the progress thread: %s%s",
                          comm->rank, hoop__strerror(err), hoop__fd_hint(err, hint, sizeof(hint)));
    }
    /* staged: the async table, and every call staged as device buffers will be */
    comm->stage_all = s->memops && strcmp(s->memops, "staged") == 0;
    HOOP_CHECK(
        hoop__memops_open(comm->stage_all ? "async" : s->memops, mem_wake, comm, &comm->mem));
    HOOP_PTHREAD_CHECK(pthread_create(&comm->thread, NULL, hoop__progress_main, comm),
                       "pthread_create (progress thread)");
    comm->started = 1;
    return HOOP_OK;
}

hoop_status hoop_comm_init(hoop_comm **out, const hoop_comm_config *cfg)
{
    hoop_comm *comm;
    comm_settings s;
    hoop_status st;
    if (!out) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_comm_init: out is NULL");
    *out = NULL;
    HOOP_CHECK(check_config(cfg));
    HOOP_CHECK(read_settings(cfg, &s));
    HOOP_CHECK(hoop__calloc(&comm, 1));
    comm->rank = cfg->rank;
    comm->world_size = cfg->world_size;
    comm->local_rank = cfg->local_rank >= 0 ? cfg->local_rank : cfg->rank;
    comm->next = (cfg->rank + 1) % cfg->world_size;
    comm->prev = (cfg->rank + cfg->world_size - 1) % cfg->world_size;
    comm->timeout_ms = s.timeout_ms;
    comm->reg_scope = s.ib.reg_cache;
    comm->wake_fd = -1;
    atomic_store(&comm->algo, (int)s.algo);
    pthread_mutex_init(&comm->mu, NULL);
    pthread_mutex_init(&comm->engine, NULL);
    hoop__transport_cost(NULL, NULL, &comm->link_cost.c); /* no links: the default */
    if (comm->world_size > 1) HOOP_CHECK_GOTO(connect_all(comm, cfg, &s), st, fail);
    for (int i = 0; i < comm->ntps; i++) comm->caches |= comm->tps[i].tp->forget != NULL;
    HOOP_CHECK_GOTO(comm_start(comm, &s), st, fail);
    HOOP_INFO(INIT, "rank %d of %d: communicator ready (chunk %zu bytes, algo %s)", comm->rank,
              comm->world_size, comm->chunk_bytes, hoop_algo_name(s.algo));
    log_algo(comm, s.algo);
    *out = comm;
    return HOOP_OK;
fail:
    hoop_comm_destroy(comm);
    return st;
}

/* Communicators of this process whose store hoop_comm_init_env made while serving it
 * (rank 0) and that are not destroyed yet: another hoop_comm_init_env there cannot serve
 * MASTER_PORT again, and its error says why. */
static atomic_int env_servers;

hoop_status hoop_comm_init_env(hoop_comm **out)
{
    hoop_dist_env d;
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    hoop_store *store = NULL;
    hoop_status st;
    if (!out) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_comm_init_env: out is NULL");
    *out = NULL;
    if ((st = hoop__env_check_all()) != HOOP_OK) return hoop__store_env_refuse(st, NULL);
    /* LOCAL_RANK and LOCAL_WORLD_SIZE refused: the others are told too (they waited
     * HOOP_TIMEOUT for this rank) */
    if ((st = hoop__env_dist(&d)) != HOOP_OK) return hoop__store_env_refuse(st, NULL);
    cfg.rank = d.rank;
    cfg.world_size = d.world_size;
    cfg.local_rank = d.local_rank;
    cfg.master_addr = d.master_addr;
    cfg.token = d.token[0] ? d.token : NULL; /* HOOP_TOKEN, or an srun step's (env.h) */
    if (d.world_size > 1 && (st = hoop_store_init_env(&store)) != HOOP_OK) {
        if (st == HOOP_ERR_SYSTEM && d.rank == 0 && atomic_load(&env_servers) > 0)
            return HOOP_ERROR(st,
                              "%s (the store there is this process's own, served for an earlier "
                              "hoop_comm_init_env: call it once per process; for several "
                              "communicators make one store with hoop_store_init_env and pass "
                              "it as config.store to hoop_comm_init for each)",
                              hoop_last_error());
        return st;
    }
    cfg.store = store;
    st = hoop_comm_init(out, &cfg);
    if (st != HOOP_OK) {
        /* On rank 0 the store's GOODBYE then tells every rank still waiting in it why,
         * and, for up to 2 s, ranks started a moment later that have not connected yet
         * (else they would find no store and wait for it until HOOP_TIMEOUT); not after
         * a time-out, which gave every rank HOOP_TIMEOUT to come already. (Another rank
         * that failed on its own before the verdict has told the store: connect_all.) */
        if (store) {
            hoop__store_note_failure(store, st, hoop_last_error());
            if (st != HOOP_ERR_TIMEOUT) hoop__store_tell_latecomers(store, 0);
        }
        hoop_store_destroy(store);
        return st;
    }
    (*out)->owned_store = store;
    if (store && d.rank == 0) atomic_fetch_add(&env_servers, 1);
    return HOOP_OK;
}

hoop_store *hoop__comm_env_store(const hoop_comm *comm)
{
    return comm ? comm->owned_store : NULL;
}

/* Keeps the first failure of a destroy step and its message (later steps may set
 * messages of their own), so that destroy never returns an error without one. */
static void keep_first(hoop_status rc, hoop_status *st, char *msg, size_t cap)
{
    if (rc == HOOP_OK || *st != HOOP_OK) return;
    *st = rc;
    snprintf(msg, cap, "%s", *hoop_last_error() ? hoop_last_error() : hoop_status_str(rc));
}

hoop_status hoop_comm_destroy(hoop_comm *comm)
{
    hoop_status st = HOOP_OK;
    char msg[512] = "";
    if (!comm) return HOOP_OK;
    int users = atomic_load(&comm->users);
    if (users > 0) /* its buckets live in this comm's shared memory: refuse, lose nothing */
        return HOOP_ERROR(HOOP_ERR_USAGE,
                          "hoop_comm_destroy: %d hoop_ddp still use%s this communicator: call "
                          "hoop_ddp_destroy first (nothing was destroyed)",
                          users, users == 1 ? "s" : "");
    /* First: a graph's replay queues no call on a comm going away (capture.c). */
    hoop__capture_detach(comm);
    /* Device memory the ranks map goes first: its release needs a barrier, so the links. */
    if (comm->segs) keep_first(hoop__comm_free_segs_cuda(comm), &st, msg, sizeof(msg));
    if (comm->started) {
        atomic_store(&comm->stop, 1);
        uint64_t one = 1;
        /* An eventfd write fails only on a bad descriptor or a full counter; the thread
         * also sees `stop` within its longest sleep, so go on to the join either way. */
        if (write(comm->wake_fd, &one, sizeof(one)) < 0)
            keep_first(HOOP_ERROR(HOOP_ERR_SYSTEM,
                                  "hoop_comm_destroy: waking the progress thread: %s",
                                  hoop__strerror(errno)),
                       &st, msg, sizeof(msg));
        int rc = pthread_join(comm->thread, NULL);
        if (rc != 0)
            keep_first(HOOP_ERROR(HOOP_ERR_SYSTEM,
                                  "hoop_comm_destroy: joining the progress thread: %s",
                                  hoop__strerror(rc)),
                       &st, msg, sizeof(msg));
    }
    /* Teardown order: nothing may touch a buffer after it is freed. The progress thread
     * has stopped (its calls failed, their memory operations drained); the links close
     * next (a transport may use the memory of a receive or send still posted, a NIC until
     * its queue pair is gone); then the memory tables (each waits for its own work); then
     * the stage slots, device buffers and registrations they used. */
    hoop__comm_close_links(comm, 0);
    hoop__memops_close(comm->mem); /* the progress thread, its only user, has stopped */
    comm->mem = NULL;
    /* before the slots are freed: they may be registered */
    keep_first(hoop__comm_free_dev(comm), &st, msg, sizeof(msg));
    hoop__comm_free_segs(comm);
    for (int k = 0; k < comm->ntps; k++) {
        hoop__tp_open *o = &comm->tps[k];
        if (o->slot_mr) keep_first(o->tp->dereg_mr(o->ctx, o->slot_mr), &st, msg, sizeof(msg));
        o->slot_mr = NULL;
        keep_first(o->tp->finalize(o->ctx), &st, msg, sizeof(msg));
    }
    if (comm->wake_fd >= 0) close(comm->wake_fd);
    if (comm->owned_store && comm->rank == 0) atomic_fetch_sub(&env_servers, 1);
    keep_first(hoop_store_destroy(comm->owned_store), &st, msg, sizeof(msg));
    pthread_mutex_destroy(&comm->mu);
    pthread_mutex_destroy(&comm->engine);
    free(comm->send);
    free(comm->recv);
    free(comm->slots);
    free(comm->scratch);
    free(comm->pre);
    free(comm->stage);
    hoop__sched_free(&comm->sched);
    hoop__sched_free(&comm->vote_tpl);
    hoop__claims_free(comm);
    free(comm->exec_block);
    free(comm->forget);
    free(comm);
    return st == HOOP_OK ? HOOP_OK : HOOP_ERROR(st, "%s", msg);
}

/* Asks the progress thread to fail the comm (how = 1 abort, 2 kill) and waits for it. */
static hoop_status request_abort(hoop_comm *comm, int how)
{
    if (!comm) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_comm_abort: comm is NULL");
    if (!comm->started) return HOOP_OK;
    atomic_store(&comm->abort_req, how);
    uint64_t one = 1;
    if (write(comm->wake_fd, &one, sizeof(one)) < 0)
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "abort: cannot wake the progress thread");
    int64_t deadline = hoop__deadline_ns(2000);
    while (atomic_load(&comm->state) != HOOP__CS_FAILED && hoop__now_ns() < deadline) usleep(200);
    return HOOP_OK;
}

hoop_status hoop_comm_abort(hoop_comm *comm)
{
    return request_abort(comm, 1);
}
hoop_status hoop__comm_kill(hoop_comm *comm)
{
    return request_abort(comm, 2);
}
hoop_status hoop__comm_fail_misuse(hoop_comm *comm)
{
    return request_abort(comm, 3);
}

int hoop_comm_rank(const hoop_comm *comm)
{
    return comm ? comm->rank : -1;
}
int hoop_comm_world_size(const hoop_comm *comm)
{
    return comm ? comm->world_size : 0;
}
int hoop_comm_local_rank(const hoop_comm *comm)
{
    return comm ? comm->local_rank : -1;
}

uint64_t hoop_comm_bytes_sent(const hoop_comm *comm)
{
    return comm ? atomic_load(&((hoop_comm *)comm)->bytes_sent) : 0;
}

hoop_status hoop_comm_set_algo(hoop_comm *comm, hoop_algo algo)
{
    if (!comm) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_comm_set_algo: comm is NULL");
    HOOP_CHECK(hoop__algo_check("hoop_comm_set_algo", algo));
    /* INFO says the new choice, as at the start (it showed HOOP_ALGO's only) */
    if (atomic_exchange(&comm->algo, (int)algo) != (int)algo) log_algo(comm, algo);
    return HOOP_OK;
}
