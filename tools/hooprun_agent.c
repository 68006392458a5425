/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/hooprun_agent.c -- the nodes' hoopruns agree on each attempt (every run with
 * --nnodes > 1), as torchelastic's agents do through their rendezvous store.
 *
 * Without it every node's hooprun restarted on its own: a worker failing during
 * start-up let its node use up its restarts in moments while another node still sat in
 * attempt 0, each side waiting HOOP_TIMEOUT for workers of an attempt the other had
 * left. With it:
 *   - node 0's hooprun serves a store at MASTER_ADDR:MASTER_PORT + 1 (the workers' rank 0
 *     keeps MASTER_PORT), every node's hooprun connects to it as rank NODE_RANK of
 *     nnodes, with HOOP_TOKEN + "-agents";
 *   - the nodes meet (meet()) before attempt 0, where each leaves its card (what it was
 *     told: --max-restarts and --nproc-per-node must agree, else exit 2 naming the
 *     node), before each restart, and at the end of each attempt: a node whose workers
 *     all exited 0 waits there for the others (node 0 serves the store), so that a
 *     later failure elsewhere restarts every node together. A meeting waits in
 *     HOOPRUN_AGENT_PROBE_MS slices, and between them looks for a node that left, a
 *     signal to this hooprun (blocked once connected) and, at the end, a failure;
 *   - a hooprun whose worker fails writes "hooprun.attempt.k.failed" (which node and
 *     why) by compare-and-set: the first note node 0's store takes stays, and a later
 *     one learns it in the same round trip (a look, then a set, let a second note
 *     replace the first one between them); every hooprun looks for that key every
 *     HOOPRUN_AGENT_PROBE_MS while its workers run, and stops its own workers when it
 *     appears, instead of leaving them to time out;
 *   - a hooprun that dies is named by the store at once (store_proto.h, "A rank
 *     lost"). One that exits with a failure leaves "hooprun.exit" (its code, mirrored
 *     by the others when it got SIGINT/SIGTERM/SIGHUP/SIGQUIT, and why) and the attempt's
 *     failure note; another node then hangs up without a CLOSE (the store marks it
 *     lost), so no node waits at a meeting it will never join, while node 0 first gives
 *     the others time to read the notes (HOOPRUN_AGENT_LINGER_MS; after a signal, the
 *     largest --grace + 2 s), and its GOODBYE then names both, also to nodes not yet
 *     connected. Workers stopped on SIGUSR1/2 as asked are no failure;
 *   - no look at the store waits for node 0's answer with the supervisor or a meeting
 *     held: the request goes out (hoop__store_wait_send) and its answer is read when it
 *     has come, signals and workers handled meanwhile, so a stalled node 0 (SIGSTOP, a
 *     debugger) holds no other hooprun; every other store call of a meeting gives up
 *     waiting on a stop signal (hoop__store_set_interrupt); a failure note waits for its
 *     answer, and the exit waits for it HOOPRUN_AGENT_QUIET_MS, then posts its notes
 *     (sent without waiting for replies: node 0's store applies them when it runs again)
 *     and leaves.
 * Single-threaded, as hooprun is (the store server runs its own thread, all signals
 * blocked there).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/store_proto.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/launch.h"
#include "hooprun.h"

/* What the first meeting compares: every node must have been told the same. */
typedef struct agent_card {
    int32_t max_restarts, nproc_per_node;
    int64_t grace_ms;      /* not compared: the largest bounds a restart's meeting */
    int64_t stop_grace_ms; /* not compared: the largest bounds node 0's wait after a signal */
    char host[64];
} agent_card;

static char refused_why[400];     /* hooprun_agent_refuse's message, for the exit note */
static char meeting_why[600];     /* a meeting this node gave up on, for the exit note */
static int mirrored;              /* a signal's 128 + N another node's hooprun left with */
static char mirrored_why[600];    /* its exit note's account */
static int64_t max_grace_ms;      /* the largest --grace of every node (the first meeting) */
static int64_t max_stop_grace_ms; /* ... and of their grace after a stop signal */
/* This attempt's failure note, kept while node 0's hooprun did not answer (stalled: a
 * debugger, SIGSTOP), for hooprun_agent_look to leave once it does. */
static char pending_key[64], pending_note[600];
/* A stop signal a meeting's store call read while it waited for node 0's answer
 * (interrupted, below), for the meeting to act on. */
static int caught;

/* The store's interrupt during the meetings (hoop__store_set_interrupt): a call waiting
 * for node 0's answer gives up when a stop signal comes, so that a stalled node 0 does
 * not hold this hooprun up to HOOP_TIMEOUT. */
static int interrupted(void *arg)
{
    (void)arg;
    if (!caught) caught = hooprun_stop_signal();
    return caught != 0;
}

/* "node 0's hooprun did not answer [when ]within HOOP_TIMEOUT (N ms; ...)" into buf: a
 * reply that never came in time (hoop__store_stalled). */
static void stalled_text(const hooprun_plan *p, const char *when, char *buf, size_t cap)
{
    if (p->node_rank == 0) { /* its own store, through MASTER_ADDR: the address is at fault */
        snprintf(buf, cap,
                 "this hooprun's own store did not answer it %s%sthrough MASTER_ADDR %s within "
                 "HOOP_TIMEOUT (%lld ms; the address gone from this host, its interface down, "
                 "or this hooprun stopped?)",
                 when, *when ? " " : "", p->master_addr,
                 (long long)hoop__store_timeout(p->agents, -1));
        return;
    }
    snprintf(buf, cap,
             "node 0's hooprun did not answer %s%swithin HOOP_TIMEOUT (%lld ms; stopped, in a "
             "debugger, or "
             "cut off by the network?)",
             when, *when ? " " : "", (long long)hoop__store_timeout(p->agents, -1));
}

/* The stop signal come to this hooprun (caught, or read now), taken; 0 when none. */
static int stop_signal(void)
{
    int sig = caught ? caught : hooprun_stop_signal();
    caught = 0;
    return sig;
}

/* The reply still owed (a look's, or an interrupted call's), read within ms: 1 when it
 * came (and is dropped) or none is owed, 0 when node 0's hooprun is still silent. */
static int answered(const hooprun_plan *p, int64_t ms)
{
    int done = 1;
    (void)hoop__store_settle_within(p->agents, ms, &done);
    return done;
}

/* Leaves note at key unless a note is there already, in one compare-and-set: the first
 * note node 0's store takes wins, also when the nodes only post theirs (node 0's hooprun
 * stalled). After a stall the store reads what waited connection by connection, so the
 * winner is then the first note of the first node read, not always the earliest
 * failure. Returns 1 with the note found into found (cap bytes) when another came first,
 * 0 when this one was left or posted, -1 when the store failed (its message set). */
static int leave_first(const hooprun_plan *p, const char *key, const char *note, char *found,
                       size_t cap)
{
    char buf[1200];
    size_t n = 0;
    int won = 0;
    if (hoop_store_compare_set(p->agents, key, NULL, 0, note, strlen(note), &won, buf,
                               sizeof(buf) - 1, &n) != HOOP_OK)
        return -1;
    if (won || hoop__store_posting(p->agents)) return 0;
    buf[n] = '\0';
    if (cap) snprintf(found, cap, "%s", buf);
    return 1;
}

/* Leaves the failure note kept by hooprun_agent_failed, unless another node's came
 * first; one that could not be left (node 0's hooprun silent past HOOP_TIMEOUT) stays
 * kept, for the exit to post. */
static void leave_pending(const hooprun_plan *p)
{
    if (pending_key[0] && leave_first(p, pending_key, pending_note, NULL, 0) >= 0)
        pending_key[0] = '\0';
}

/* Reads the reply to the WAIT just sent (answered at the server within timeout_ms):
 * until timeout_ms + HOOPRUN_AGENT_PROBE_MS, then in HOOPRUN_AGENT_PROBE_MS slices,
 * looking for a stop signal between them, so that a stalled node 0 does not hold this
 * hooprun: the WAIT's status and *res, or HOOP_OK with *sig set (the reply is left
 * owed). */
static hoop_status wait_reply(const hooprun_plan *p, int64_t timeout_ms,
                              hoop__store_wait_result *res, int *sig)
{
    int done = 0;
    int64_t ms = timeout_ms + HOOPRUN_AGENT_PROBE_MS;
    hoop_status s;
    *sig = 0;
    while ((s = hoop__store_wait_poll(p->agents, ms, &done, res)) == HOOP_OK && !done) {
        if ((*sig = stop_signal()) != 0) return HOOP_OK;
        ms = HOOPRUN_AGENT_PROBE_MS;
    }
    return s;
}

int hooprun_agent_port(int master_port)
{
    return master_port < 65535 ? master_port + 1 : -1;
}

static void where(const hooprun_plan *p, char *buf, size_t cap)
{
    char hp[300];
    snprintf(buf, cap,
             "the nodes' rendezvous at %s (MASTER_PORT + 1, served by node 0's hooprun; its "
             "ranks are node ranks)",
             hoop__hostport(hp, sizeof(hp), p->master_addr, hooprun_agent_port(p->master_port)));
}

/* One stderr line for a failed meeting: where, when (before attempt 0, restart k) and the
 * store's message. Returns 1. */
static int say(const hooprun_plan *p, const char *when)
{
    char at[400];
    where(p, at, sizeof(at));
    fprintf(stderr, "hooprun (node %d): %s, %s: %s\n", p->node_rank, at, when, hoop_last_error());
    return 1;
}

int hooprun_agent_check(const hooprun_plan *p)
{
    if (p->nnodes < 2 || hooprun_agent_port(p->master_port) > 0) return 0;
    fprintf(stderr,
            "hooprun: MASTER_PORT %d leaves no port above it for the nodes' rendezvous (%d "
            "nodes' hoopruns meet at MASTER_PORT + 1): pick a lower one\n",
            p->master_port, p->nnodes);
    return 2;
}

/* Connects to the nodes' store within timeout_ms (node 0's hooprun also serves it). */
static hoop_status connect_agents(hooprun_plan *p, int64_t timeout_ms)
{
    char token[160];
    snprintf(token, sizeof(token), "%s-agents", p->token);
    hoop_store_config cfg = {.host = p->master_addr,
                             .port = hooprun_agent_port(p->master_port),
                             .token = token,
                             .rank = p->node_rank,
                             .world_size = p->nnodes,
                             .timeout_ms = timeout_ms};
    static const hoop__store_naming naming = {"node 0's hooprun", "MASTER_ADDR:MASTER_PORT + 1",
                                              "--nnodes", 1};
    hoop_status s = hoop__store_init_served(&p->agents, &cfg, &naming);
    if (s != HOOP_OK) p->agents = NULL;
    return s;
}

int hooprun_agent_open(hooprun_plan *p)
{
    int64_t timeout_ms;
    int rc = hooprun_agent_check(p);
    if (rc) return rc;
    if (hoop__env_ms("HOOP_TIMEOUT", &timeout_ms) != HOOP_OK) {
        fprintf(stderr, "hooprun: %s\n", hoop_last_error());
        return 2;
    }
    hoop_status s = connect_agents(p, timeout_ms);
    if (s != HOOP_OK) {
        say(p, "connecting");
        /* Refused (a --node-rank taken, another --nnodes, HOOP_TOKEN), the store gave up
         * over such a node or over node 0's bad flags or environment (HOOP_ERR_INVALID,
         * hooprun_agent_close), or node 0 found its port taken (a second --node-rank 0, or
         * another job at MASTER_PORT + 1): how the nodes were started is wrong. */
        return hoop__store_last_refused() || s == HOOP_ERR_MISMATCH || s == HOOP_ERR_INVALID ||
                       (p->node_rank == 0 && hoop__store_last_in_use())
                   ? 2
                   : 1;
    }
    /* Node 0's hooprun may stall (load, a debugger) without being gone: its replies may
     * come as late as HOOP_TIMEOUT before a node gives the meeting up. */
    hoop__store_set_reply_grace(p->agents, timeout_ms);
    return 0;
}

void hooprun_agent_refuse(hooprun_plan *p, const char *why)
{
    int64_t timeout_ms = HOOPRUN_AGENT_REFUSE_MS, env_ms;
    if (p->nnodes < 2 || hooprun_agent_port(p->master_port) < 0) return;
    if (hoop__env_ms("HOOP_TIMEOUT", &env_ms) == HOOP_OK && env_ms < timeout_ms)
        timeout_ms = env_ms;
    if (connect_agents(p, timeout_ms) != HOOP_OK) return; /* unsaid: the refusal was said */
    snprintf(refused_why, sizeof(refused_why), "%s", why);
    hooprun_agent_close(p, 2);
}

/* Another node's hooprun exited with a failure (hooprun_agent_close): 1 with its exit
 * code and note, else 0. */
static int peer_exited(const hooprun_plan *p, int *rc, char *why, size_t cap)
{
    char buf[1200];
    size_t n = 0;
    if (hoop_store_get(p->agents, "hooprun.exit", buf, sizeof(buf) - 1, &n, 0) != HOOP_OK) return 0;
    buf[n] = '\0';
    char *text = strchr(buf, '\n');
    *rc = atoi(buf);
    snprintf(why, cap, "%s", text ? text + 1 : buf);
    if (*rc > 128 && !mirrored) {
        mirrored = *rc;
        snprintf(mirrored_why, sizeof(mirrored_why), "%s", why);
    }
    return 1;
}

int hooprun_agent_mirrored(const hooprun_plan *p)
{
    if (mirrored && p)
        fprintf(stderr, "hooprun (node %d): %s; not starting another attempt\n", p->node_rank,
                mirrored_why);
    return mirrored;
}

/* A node's hooprun that left on purpose: says so, naming it with its exit code and why,
 * and what this node does not do now (not_doing: "not starting the workers"), and
 * returns this node's exit code (the same when it is a signal's 128 + N or 2, bad flags
 * or environment there, else 1); returns 0 when none left. */
static int peer_left(const hooprun_plan *p, const char *not_doing)
{
    char why[1200];
    int rc;
    if (!peer_exited(p, &rc, why, sizeof(why))) return 0;
    fprintf(stderr, "hooprun (node %d): %s; %s\n", p->node_rank, why, not_doing);
    return rc > 128 || rc == 2 ? rc : 1;
}

/* A failed meeting (s: the store call's status, msg: its account): peer_left's account,
 * else msg, and 1, or 2 when node 0's store gave up over a node it refused (how the
 * nodes were started is wrong: HOOP_ERR_MISMATCH). A meeting that timed out is told as
 * such: the nodes that time out with this one leave notes that do not say why. */
static int meeting_failed(const hooprun_plan *p, hoop_status s, const char *when, const char *msg,
                          const char *not_doing)
{
    char at[400];
    int rc = s == HOOP_ERR_TIMEOUT ? 0 : peer_left(p, not_doing);
    if (rc) return rc;
    where(p, at, sizeof(at));
    fprintf(stderr, "hooprun (node %d): %s, %s: %s\n", p->node_rank, at, when, msg);
    return s == HOOP_ERR_MISMATCH ? 2 : 1;
}

/* What the last node in the first meeting leaves for all (summarize): the largest
 * graces, node 0's card and the first node whose card differs from it, so that each node
 * finds the first node that differs from its own without every node reading every card
 * (nnodes^2 cards through node 0's store). */
typedef struct cards_summary {
    int64_t max_grace_ms, max_stop_grace_ms;
    agent_card first; /* node 0's */
    int32_t odd, pad; /* the first node whose card differs from node 0's; -1: none */
    agent_card odd_card;
} cards_summary;

/* The setting in which a and b differ ("--max-restarts"), or NULL. */
static const char *card_differs(const agent_card *a, const agent_card *b)
{
    return a->max_restarts != b->max_restarts       ? "--max-restarts"
           : a->nproc_per_node != b->nproc_per_node ? "--nproc-per-node"
                                                    : NULL;
}

/* The last node in: every node's card, read once (keys[0..n)), into sum. */
static hoop_status summarize(const hooprun_plan *p, const char *const *keys, int n,
                             cards_summary *sum)
{
    hoop__store_wait_result res;
    memset(sum, 0, sizeof(*sum));
    sum->odd = -1;
    hoop_status s = hoop__store_wait_keys(p->agents, keys, n, HOOP__STORE_WAIT_VALUES,
                                          hoop__store_timeout(p->agents, -1), &res);
    for (int i = 0; s == HOOP_OK && i < n; i++) {
        agent_card c = {0};
        memcpy(&c, res.values[i], res.value_bytes[i] < sizeof(c) ? res.value_bytes[i] : sizeof(c));
        if (i == 0) sum->first = c;
        if (c.grace_ms > sum->max_grace_ms) sum->max_grace_ms = c.grace_ms;
        if (c.stop_grace_ms > sum->max_stop_grace_ms) sum->max_stop_grace_ms = c.stop_grace_ms;
        if (sum->odd < 0 && card_differs(&c, &sum->first)) sum->odd = i, sum->odd_card = c;
    }
    hoop__store_wait_result_free(&res);
    return s;
}

/* What every node was told must agree (mine; sum: the first meeting's summary). Returns
 * 0, or 2 after one line naming the first node whose card differs from this node's:
 * node 0 when this one differs from it, else the first that does. */
static int compare_cards(const hooprun_plan *p, const agent_card *mine, cards_summary *sum)
{
    max_grace_ms = sum->max_grace_ms;
    max_stop_grace_ms = sum->max_stop_grace_ms;
    agent_card *other = &sum->first;
    int n = 0;
    const char *what = card_differs(other, mine);
    if (!what && sum->odd >= 0) {
        other = &sum->odd_card;
        n = sum->odd;
        what = card_differs(other, mine);
    }
    if (!what) return 0;
    other->host[sizeof(other->host) - 1] = '\0'; /* another node's bytes */
    fprintf(stderr,
            "hooprun (node %d): node %d (%s) runs %s %d but this node runs %d: give every node's "
            "hooprun the same %s\n",
            p->node_rank, n, other->host, what,
            what[2] == 'm' ? other->max_restarts : other->nproc_per_node,
            what[2] == 'm' ? mine->max_restarts : mine->nproc_per_node, what);
    return 2;
}

/* Writes "node 1" or "nodes 1,3" (the indices of missing) into buf. */
static void node_list(const uint32_t *missing, uint32_t n, char *buf, size_t cap)
{
    size_t used = (size_t)snprintf(buf, cap, "%s ", n == 1 ? "node" : "nodes");
    for (uint32_t i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%u", i ? "," : "", missing[i]);
}

/* The meetings: before attempt 0 (CARDS: each node's card, compared after), before a
 * restart (START) and at the end of an attempt (END). Every node sets
 * "hooprun.attempt.K.WHAT.N" and counts itself in ("...WHAT.count"); the last node in
 * sets "...WHAT.done" (for CARDS: the cards' summary), which the others wait for,
 * HOOPRUN_AGENT_PROBE_MS at a time (a slice's WAIT names one key: waiting for every
 * node's key sent nnodes keys from every node five times a second, nnodes^2 lookups a
 * slice at node 0's store for as long as a node's workers ran past the others'),
 * looking between slices for a node that left (peer_left), a signal to this
 * hooprun (blocked from hooprun_agent_open on, read through hooprun_stop_signal) and, at
 * the end, another node's failure of the attempt. Returns 0 when all came (at the end:
 * also when node 0 closed its store without a failure, which it does only then; and at
 * once after a signal, when this node's workers exited 0 all the same), else as
 * hooprun_agent_begin / hooprun_agent_end say. */
enum meeting { CARDS, START, END };

/* What a meeting m that a signal ends does not do, for its line. */
static const char *not_next(enum meeting m)
{
    return m == END     ? "every worker here exited 0; leaving"
           : m == START ? "not starting another attempt"
                        : "not starting the workers";
}

/* A signal sig at meeting m (when), while node 0's hooprun did not answer: one line;
 * returns 128 + sig. */
static int stopped_silent(const hooprun_plan *p, int sig, const char *when, enum meeting m)
{
    fprintf(stderr, "hooprun (node %d): got %s %s, while node 0's hooprun did not answer; %s\n",
            p->node_rank, strsignal(sig), when, not_next(m));
    return 128 + sig;
}

/* Counts this node (its key set) into a meeting: the last one in marks it done (keys:
 * every node's, count and done its two keys), with "1", or for CARDS the summary of
 * every node's card (summarize: the only node that reads them all). */
static hoop_status count_in(const hooprun_plan *p, const char *const *keys, int n,
                            const char *count, const char *done, enum meeting m)
{
    int64_t in = 0;
    cards_summary sum;
    HOOP_CHECK(hoop_store_add(p->agents, count, 1, &in));
    if (in != n) return HOOP_OK;
    if (m != CARDS) return hoop_store_set(p->agents, done, "1", 1);
    HOOP_CHECK(summarize(p, keys, n, &sum));
    return hoop_store_set(p->agents, done, &sum, sizeof(sum));
}

/* The nodes whose keys are not there yet ("nodes 1,3"), at one look, for a message. */
static void look_missing(const hooprun_plan *p, const char *const *keys, int n, char *buf,
                         size_t cap)
{
    hoop__store_wait_result res;
    char before[1200];
    snprintf(before, sizeof(before), "%s", hoop_last_error());
    hoop_status s = hoop__store_wait_keys(p->agents, keys, n, 0, 0, &res);
    if (s == HOOP_ERR_TIMEOUT && !res.lost && res.nmissing > 0)
        node_list(res.missing, res.nmissing, buf, cap);
    else
        snprintf(buf, cap, "%s",
                 s == HOOP_OK ? "the last node in (every node came, but it did not mark the "
                                "meeting done)"
                              : "nodes not known (node 0's store did not say which)");
    hoop__store_wait_result_free(&res);
    hoop__error_restore(before);
}

static int meet(const hooprun_plan *p, int k, enum meeting m, const agent_card *mine,
                cards_summary *sum, int *failed)
{
    static const char *const what[] = {"card", "at", "ok"};
    char when[80], why[700], msg[1200];
    int n = p->nnodes, rc = 1;
    char(*names)[80] = calloc((size_t)n + 2, sizeof(*names));
    const char **keys = calloc((size_t)n + 2, sizeof(*keys));
    /* Before a restart, a node may still be stopping its workers: SETTLE (1 s) and
     * --grace past its failure, on top of HOOP_TIMEOUT. */
    int64_t timeout_ms =
        hoop__store_timeout(p->agents, -1) + (m == START ? max_grace_ms + 1000 : 0);
    int64_t deadline = hoop__deadline_ns(timeout_ms);
    if (m == END)
        snprintf(when, sizeof(when), "at the end of %s", k ? "the restart" : "the first attempt");
    else if (m == START)
        snprintf(when, sizeof(when), "before restart %d", k);
    else
        snprintf(when, sizeof(when), "before attempt 0");
    if (!names || !keys) {
        fprintf(stderr, "hooprun: out of memory\n");
        goto out;
    }
    for (int i = 0; i < n + 2; i++) {
        if (i < n)
            snprintf(names[i], sizeof(names[i]), "hooprun.attempt.%d.%s.%d", k, what[m], i);
        else
            snprintf(names[i], sizeof(names[i]), "hooprun.attempt.%d.%s.%s", k, what[m],
                     i == n ? "count" : "done");
        keys[i] = names[i];
    }
    /* At the end: node 0 closed its store without a failure (every node had ended, or
     * it waited HOOP_TIMEOUT for them): nothing is left to wait for. */
    if (m == END && hoop__store_goodbye_code(p->agents) == HOOP_OK) {
        rc = 0;
        goto out;
    }
    /* A reply still owed (the supervisor's look) first, then a failure note kept while
     * node 0's hooprun was silent: signals are read meanwhile. */
    const int was_stalled = hoop__store_stalled(p->agents); /* given up before this meeting */
    while (!answered(p, HOOPRUN_AGENT_PROBE_MS)) {
        int sig = stop_signal();
        if (sig) {
            rc = stopped_silent(p, sig, when, m);
            goto out;
        }
    }
    if (hoop__store_stalled(p->agents)) { /* the answer owed never came in time */
        stalled_text(p, when, msg, sizeof(msg));
        if (was_stalled && p->node_rank != 0) /* no wait here: given up before */
            snprintf(msg, sizeof(msg),
                     "node 0's hooprun had stopped answering before the meeting %s (an answer "
                     "did not come within HOOP_TIMEOUT, %lld ms: stopped, in a debugger, or cut "
                     "off by the network?)",
                     when, (long long)hoop__store_timeout(p->agents, -1));
        fprintf(stderr, "hooprun (node %d): %s; %s\n", p->node_rank, msg, not_next(m));
        rc = m == END ? 0 : 1; /* the exit barrier's rule (below): this node's work is done */
        goto out;
    }
    leave_pending(p);
    /* Before a restart: a node that left on purpose will not come (say so now). Each call
     * so far gave up waiting for node 0 on a signal (caught). */
    if (m == START && !caught && (rc = peer_left(p, not_next(m))) != 0) goto out;
    if (caught) {
        rc = stopped_silent(p, stop_signal(), when, m);
        goto out;
    }
    const void *blob = m == CARDS ? (const void *)mine : "1";
    hoop_status set =
        hoop_store_set(p->agents, keys[p->node_rank], blob, m == CARDS ? sizeof(agent_card) : 1);
    if (set == HOOP_OK) set = count_in(p, keys, n, keys[n], keys[n + 1], m);
    if (set != HOOP_OK) {
        if (caught) {
            rc = stopped_silent(p, stop_signal(), when, m);
            goto out;
        }
        snprintf(msg, sizeof(msg), "%s", hoop_last_error());
        rc = m == END && hoop__store_goodbye_code(p->agents) == HOOP_OK
                 ? 0
                 : meeting_failed(p, set == HOOP_ERR_MISMATCH ? set : HOOP_ERR_REMOTE, when, msg,
                                  not_next(m));
        goto out;
    }
    if (m == END && hooprun_stopped_by()) { /* interrupted, yet every worker exited 0 */
        rc = 0;
        goto out;
    }
    for (;;) {
        hoop__store_wait_result res = {0};
        int64_t left = hoop__ms_left(deadline);
        int64_t slice = left < HOOPRUN_AGENT_PROBE_MS ? left : HOOPRUN_AGENT_PROBE_MS;
        int sig = 0;
        hoop_status s = hoop__store_wait_send(
            p->agents, &keys[n + 1], 1,
            HOOP__STORE_WAIT_LOST | (m == CARDS ? HOOP__STORE_WAIT_VALUES : 0), slice);
        if (s == HOOP_OK)
            s = wait_reply(p, slice, &res, &sig);
        else
            res.lost = 1; /* the connection was gone: the message says why */
        if (sig) {
            rc = stopped_silent(p, sig, when, m);
            break;
        }
        int timed_out = s == HOOP_ERR_TIMEOUT && !res.lost && !res.rank_lost;
        int bye_ok = m == END && res.goodbye && hoop__store_goodbye_code(p->agents) == HOOP_OK;
        char missing[300] = "";
        if (res.rank_lost) /* its message is the result's, not the thread's */
            snprintf(msg, sizeof(msg), "node %d's hooprun is gone: %.*s", res.lost_rank,
                     (int)res.lost_why_bytes, (const char *)res.lost_why);
        else
            snprintf(msg, sizeof(msg), "%s", hoop_last_error());
        if (s == HOOP_OK && m == CARDS && res.value_bytes[0] != sizeof(*sum)) {
            snprintf(msg, sizeof(msg),
                     "the first meeting's summary has %zu bytes, not %zu (another version of "
                     "hooprun on a node?)",
                     res.value_bytes[0], sizeof(*sum));
            s = HOOP_ERR_MISMATCH;
        } else if (s == HOOP_OK && m == CARDS) {
            memcpy(sum, res.values[0], sizeof(*sum));
        }
        hoop__store_wait_result_free(&res);
        if (s == HOOP_OK || bye_ok) {
            rc = 0;
            break;
        }
        /* At the end, a node lost or the store gone after another node's worker failed:
         * the attempt failed all the same (its note says where), though this node's
         * workers exited 0, also when they did on the stop that failure caused here. A
         * node that read the note only now left this node with 0 and no word of it. */
        if (!timed_out && m == END && s != HOOP_ERR_MISMATCH &&
            hooprun_agent_poll(p, why, sizeof(why)) > 0) {
            char left[1200];
            int code; /* a node that left on purpose says so in its exit note */
            if (peer_exited(p, &code, left, sizeof(left))) snprintf(msg, sizeof(msg), "%s", left);
            fprintf(stderr,
                    "hooprun (node %d): attempt failed on %s (every worker here had exited "
                    "0); then %s\n",
                    p->node_rank, why, msg);
            *failed = 1;
            rc = 1;
            break;
        }
        if (!timed_out) { /* a node lost, or the store gone: a note may say why */
            rc = meeting_failed(p, s == HOOP_ERR_MISMATCH ? s : HOOP_ERR_REMOTE, when, msg,
                                not_next(m));
            /* At the end, a lost store or node is no failure of this node's, whose
             * workers all exited 0 (a note of a failure elsewhere was read first), as a
             * timeout there is not: torchelastic's exit barrier. */
            if (m == END && rc == 1) {
                fprintf(stderr, "hooprun (node %d): every worker here exited 0; leaving\n",
                        p->node_rank);
                rc = 0;
            }
            break;
        }
        /* At the end, the attempt's failure before a hooprun's exit it caused. */
        if (m == END && hooprun_agent_poll(p, why, sizeof(why)) > 0) {
            fprintf(stderr,
                    "hooprun (node %d): attempt failed on %s (every worker here had exited "
                    "0)\n",
                    p->node_rank, why);
            *failed = 1;
            rc = 1;
            break;
        }
        if (!caught && (rc = peer_left(p, not_next(m))) != 0) break;
        if ((sig = stop_signal()) != 0) {
            look_missing(p, keys, n, missing, sizeof(missing));
            fprintf(stderr, "hooprun (node %d): got %s %s, waiting for %s; %s\n", p->node_rank,
                    strsignal(sig), when, missing, not_next(m));
            rc = 128 + sig;
            break;
        }
        if (hoop__ms_left(deadline) > 0) continue;
        look_missing(p, keys, n, missing, sizeof(missing));
        if (m == END) {
            fprintf(stderr,
                    "hooprun (node %d): every worker here exited 0, but %s did not report its "
                    "end within HOOP_TIMEOUT (%lld ms: still running, or cut off from this "
                    "node); leaving without waiting further\n",
                    p->node_rank, missing, (long long)timeout_ms);
            rc = 0;
        } else {
            /* Node 0 names a client its store refused meanwhile (a node given another
             * HOOP_TOKEN, a stray job): the likely missing node. */
            char stranger[700] = "";
            int refused = hoop__store_stranger(p->agents, stranger, sizeof(stranger));
            snprintf(
                meeting_why, sizeof(meeting_why),
                "the nodes' meeting %s: %s never came within %s (%lld ms)%s%.300s", when, missing,
                m == START ? "HOOP_TIMEOUT + the largest --grace + 1 s" : "HOOP_TIMEOUT",
                (long long)timeout_ms, refused ? "; meanwhile its store refused " : "", stranger);
            fprintf(stderr, "hooprun (node %d): %s; %s\n", p->node_rank, meeting_why, not_next(m));
            rc = 1;
        }
        break;
    }
out:
    free(names);
    free(keys);
    return rc;
}

/* A meeting with the store's interrupt set (interrupted): its calls read signals while
 * node 0's hooprun does not answer. */
static int meet_interruptible(const hooprun_plan *p, int k, enum meeting m, const agent_card *mine,
                              cards_summary *sum, int *failed)
{
    hoop__store_set_interrupt(p->agents, interrupted, NULL);
    int rc = meet(p, k, m, mine, sum, failed);
    hoop__store_set_interrupt(p->agents, NULL, NULL);
    return rc;
}

int hooprun_agent_begin(const hooprun_plan *p, int k)
{
    char why[700];
    int rc, failed = 0;
    if (!p->agents) return 0;
    if (k == 0) {
        agent_card mine = {.max_restarts = p->max_restarts,
                           .nproc_per_node = p->nproc_per_node,
                           .grace_ms = p->grace_ms,
                           .stop_grace_ms = p->stop_grace_ms};
        cards_summary sum;
        snprintf(mine.host, sizeof(mine.host), "%.*s", (int)sizeof(mine.host) - 1, p->host);
        rc = meet_interruptible(p, 0, CARDS, &mine, &sum, &failed);
        if (rc == 0) rc = compare_cards(p, &mine, &sum);
        return rc;
    }
    if ((rc = meet_interruptible(p, k, START, NULL, NULL, &failed)) != 0) return rc;
    /* A node that came and then died must not let this attempt start without it. */
    if (hooprun_agent_poll(p, why, sizeof(why)) < 0) {
        fprintf(stderr,
                "hooprun (node %d): lost the nodes' rendezvous before restart %d: %s; not "
                "starting another attempt\n",
                p->node_rank, k, why);
        return 1;
    }
    return 0;
}

int hooprun_agent_end(const hooprun_plan *p, int *failed)
{
    *failed = 0;
    if (!p->agents) return 0;
    return meet_interruptible(p, p->restart, END, NULL, NULL, failed);
}

void hooprun_agent_failed(const hooprun_plan *p, const char *why, char *earlier, size_t cap)
{
    char key[64], note[600], text[1200];
    if (cap) earlier[0] = '\0';
    if (!p->agents) return;
    if (pending_key[0]) { /* this attempt's failure is kept already: leave it if node 0 answers */
        if (answered(p, HOOPRUN_AGENT_LOOK_MS)) leave_pending(p);
        return;
    }
    snprintf(key, sizeof(key), "hooprun.attempt.%d.failed", p->restart);
    snprintf(note, sizeof(note), "node %d (%s): %s", p->node_rank, p->host, why);
    if (!answered(p, HOOPRUN_AGENT_LOOK_MS)) { /* node 0 slow or stalled: a later look */
        snprintf(pending_key, sizeof(pending_key), "%s", key);
        snprintf(pending_note, sizeof(pending_note), "%s", note);
        return;
    }
    int r = leave_first(p, key, note, text, sizeof(text));
    if (r > 0) {
        int rc;
        if (cap) snprintf(earlier, cap, "the attempt had failed on %s", text);
        (void)peer_exited(p, &rc, text, sizeof(text)); /* a hooprun's exit: its code */
        return;
    }
    /* A node's hooprun that died (SIGKILL, the OOM killer) ends its workers at once, and
     * this node's fail on their links before the look that would have named it. */
    int lost = -1, found = 0;
    if (r < 0)
        snprintf(text, sizeof(text), "%s", hoop_last_error());
    else if (hoop__store_probe(p->agents, NULL, &lost, &found, text, sizeof(text)) != HOOP_OK)
        snprintf(text, sizeof(text), "%s", hoop_last_error());
    else if (lost < 0)
        return;
    if (cap)
        snprintf(earlier, cap, "lost the nodes' rendezvous (its ranks are node ranks): %s", text);
}

/* hooprun_agent_poll's answer from a probe's outcome (lost, found; why set). */
static int probe_answer(const hooprun_plan *p, int lost, int found)
{
    if (found) {
        char note[600];
        int rc;
        (void)peer_exited(p, &rc, note, sizeof(note)); /* a hooprun's exit: its code */
        return 1;
    }
    return lost >= 0 ? -1 : 0; /* -1: why is the store's account of the hooprun gone */
}

int hooprun_agent_poll(const hooprun_plan *p, char *why, size_t cap)
{
    char key[64];
    int lost = -1, found = 0;
    if (!p->agents) return 0;
    snprintf(key, sizeof(key), "hooprun.attempt.%d.failed", p->restart);
    if (hoop__store_probe(p->agents, key, &lost, &found, why, cap) != HOOP_OK) {
        snprintf(why, cap, "%s", hoop_last_error());
        return -1;
    }
    return probe_answer(p, lost, found);
}

int hooprun_agent_look(const hooprun_plan *p, char *why, size_t cap)
{
    static int looking; /* the reply owed is this function's probe's */
    char key[64];
    int lost = -1, found = 0, done = 0;
    if (cap) why[0] = '\0';
    if (!p->agents) return 0;
    if (!looking && !answered(p, 0)) return 0; /* another call's reply: dropped once it comes */
    snprintf(key, sizeof(key), "hooprun.attempt.%d.failed", p->restart);
    if (!hoop__store_owed(p->agents)) {
        looking = 0;
        if (hoop__store_probe_send(p->agents, key) != HOOP_OK) {
            snprintf(why, cap, "%s", hoop_last_error());
            return -1;
        }
        looking = hoop__store_owed(p->agents);
    }
    hoop_status s =
        hoop__store_probe_poll(p->agents, HOOPRUN_AGENT_LOOK_MS, &done, &lost, &found, why, cap);
    if (done) looking = 0;
    if (s != HOOP_OK) {
        if (hoop__store_stalled(p->agents))
            stalled_text(p, "", why, cap);
        else
            snprintf(why, cap, "%s", hoop_last_error());
        return -1;
    }
    if (!done) return 0;
    leave_pending(p);
    return probe_answer(p, lost, found);
}

void hooprun_agent_close(hooprun_plan *p, int rc)
{
    char why[1200], note[1220], failed[600], own[560], earlier[600], key[80];
    if (!p->agents) return;
    /* Node 0's hooprun stalled (an answer still owed, or one that never came in time):
     * the notes are posted. */
    int silent = !answered(p, HOOPRUN_AGENT_QUIET_MS);
    if ((silent || hoop__store_stalled(p->agents)) && p->node_rank == 0) {
        fprintf(stderr,
                "hooprun (node 0): this hooprun's own store has not answered it through "
                "MASTER_ADDR %s (the address gone from this host, or its interface down?); "
                "the other nodes will not hear how this node ended\n",
                p->master_addr);
        hoop__store_post_only(p->agents);
    } else if (silent || hoop__store_stalled(p->agents)) {
        char for_how_long[64];
        if (silent)
            snprintf(for_how_long, sizeof(for_how_long), "for %.1f s",
                     HOOPRUN_AGENT_QUIET_MS / 1000.0);
        else
            snprintf(for_how_long, sizeof(for_how_long), "within HOOP_TIMEOUT");
        fprintf(stderr,
                "hooprun (node %d): node 0's hooprun has not answered %s (stopped, in a debugger, "
                "or cut off by the network?); leaving this node's notes for it to read when it "
                "runs again\n",
                p->node_rank, for_how_long);
        hoop__store_post_only(p->agents);
    }
    /* Workers that stopped on SIGUSR1/2 as asked (a preemption's save) ended this node's
     * attempt without a failure: the other nodes' workers got the signal too (Slurm's
     * --signal), or finish their work; node 0 waits at the end for this node's key. */
    int asked = rc != 0 && rc == hooprun_stopped_as_asked();
    if (asked) {
        snprintf(key, sizeof(key), "hooprun.attempt.%d.ok.%d", p->restart, p->node_rank);
        (void)hoop_store_set(p->agents, key, "1", 1);
    }
    if (rc == 0 || asked) {
        /* Every node ended well (hooprun_agent_end), but the others may not have looked
         * yet: node 0's GOODBYE must not overtake that (they take a GOODBYE without a
         * failure there as the end, but a slow one might be asking something else). */
        if (p->node_rank == 0) hoop__store_linger(p->agents, HOOPRUN_AGENT_LINGER_MS);
    } else {
        /* This attempt's failure, when a node noted one: the exit note and node 0's
         * GOODBYE name it. */
        int noted = hooprun_agent_poll(p, failed, sizeof(failed)) > 0;
        /* Only a signal to a hooprun is mirrored (this one's, or mirrored here from
         * another); 128 + N from a worker's death is this node's failure code. */
        int sig = hooprun_stopped_by() && rc == 128 + hooprun_stopped_by() ? rc - 128 : 0;
        int copy = !sig && rc > 128 && rc == mirrored;
        char kind[480] = "";
        if (sig || copy)
            snprintf(kind, sizeof(kind), " (%s SIG%s: 128 + %d)", copy ? "mirroring" : "it got",
                     sigabbrev_np(rc - 128), rc - 128);
        else if (rc > 128)
            snprintf(kind, sizeof(kind), " (a worker's signal: 128 + %d)", rc - 128);
        else if (rc == 2)
            snprintf(kind, sizeof(kind), " (bad flags or environment%s%s)",
                     *refused_why ? ": " : "", refused_why);
        snprintf(own, sizeof(own), "its hooprun exited with %d%s", rc, kind);
        /* why: the attempt's failure, else the meeting this node gave up on (a node that
         * never came: the nodes that hear of this exit first must not blame this one) */
        snprintf(why, sizeof(why), "node %d (%.64s)'s hooprun exited with %d%s%s%.500s%s%.500s%s",
                 p->node_rank, p->host, rc, kind, noted ? " after the attempt failed on " : "",
                 noted ? failed : "", !noted && *meeting_why ? " (" : "", noted ? "" : meeting_why,
                 !noted && *meeting_why ? ")" : "");
        /* 2 (bad flags or environment): latecomers exit 2 too (hooprun_agent_open) */
        hoop__store_note_failure(p->agents, rc == 2 ? HOOP_ERR_INVALID : HOOP_ERR_REMOTE, why);
        /* The exit note (its code: a signal's is mirrored) for meetings, unless a node
         * left one first, and this attempt's failure note unless a node left one, for
         * nodes whose workers run: their next probe stops them. */
        snprintf(note, sizeof(note), "%d\n%s", sig || copy ? rc : rc > 128 ? 1 : rc, why);
        (void)leave_first(p, "hooprun.exit", note, NULL, 0);
        hooprun_agent_failed(p, own, earlier, sizeof(earlier));
        if (p->node_rank == 0) {
            /* The others read the notes at their next look (HOOPRUN_AGENT_PROBE_MS) and
             * hang up; node 0's GOODBYE must not overtake that, nor a meeting's last
             * reply (refusing a difference, exit 2, which every node finds at once).
             * After a signal, a node still stopping its workers (up to its grace after a
             * stop signal) reads the code to mirror at its next meeting. Nodes not connected yet
             * are told the GOODBYE's reason when they come. */
            int64_t ms = rc == 2 ? 2000 : HOOPRUN_AGENT_LINGER_MS;
            if (sig || copy) ms = max_stop_grace_ms + 2000;
            hoop__store_linger(p->agents, ms);
            hoop__store_tell_latecomers(p->agents, *refused_why ? HOOPRUN_AGENT_REFUSE_MS : 0);
        } else {
            /* No CLOSE: a meeting already waiting for this node fails at once. */
            hoop__store_abandon(p->agents);
        }
    }
    hoop_store_destroy(p->agents);
    p->agents = NULL;
}
