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
 *   - before attempt k every hooprun waits in barrier "hooprun.attempt.k", so that all
 *     nodes start attempt k together; the first one also compares what each node was
 *     told (--max-restarts, --nproc-per-node) and refuses a difference, naming the node;
 *   - a hooprun whose worker fails writes "hooprun.attempt.k.failed" (which node and
 *     why); every hooprun looks for that key every HOOPRUN_AGENT_PROBE_MS while its
 *     workers run, and stops its own workers when it appears, instead of leaving them
 *     to time out;
 *   - a hooprun that dies is named by the store at once (store protocol 4, "A rank
 *     lost"); one that exits with a failure too: node 0's through its store's GOODBYE,
 *     another through a "hooprun.exit" note and a hang-up without CLOSE (the store marks
 *     it lost), so no node waits HOOP_TIMEOUT at a meeting it will never join; node 0's
 *     hooprun ending after a noted failure first gives the others up to
 *     HOOPRUN_AGENT_LINGER_MS to read it (their probe), so that they name the failed
 *     worker, not only node 0's hooprun leaving; its GOODBYE names both.
 * Single-threaded, as hooprun is (the store server runs its own thread, all signals
 * blocked there).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/store_proto.h"
#include "core/check.h"
#include "core/env.h"
#include "core/launch.h"
#include "hooprun.h"

/* What the first barrier compares: every node must have been told the same. */
typedef struct agent_card {
    int32_t max_restarts, nproc_per_node;
    char host[64];
} agent_card;

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

int hooprun_agent_open(hooprun_plan *p)
{
    char token[160];
    int64_t timeout_ms;
    int port = hooprun_agent_port(p->master_port), rc = hooprun_agent_check(p);
    if (rc) return rc;
    if (hoop__env_ms("HOOP_TIMEOUT", &timeout_ms) != HOOP_OK) {
        fprintf(stderr, "hooprun: %s\n", hoop_last_error());
        return 2;
    }
    snprintf(token, sizeof(token), "%s-agents", p->token);
    hoop_store_config cfg = {.host = p->master_addr,
                             .port = port,
                             .token = token,
                             .rank = p->node_rank,
                             .world_size = p->nnodes,
                             .timeout_ms = timeout_ms};
    static const hoop__store_naming naming = {"node 0's hooprun", "MASTER_ADDR:MASTER_PORT + 1"};
    if (hoop__store_init_served(&p->agents, &cfg, &naming) != HOOP_OK) {
        p->agents = NULL;
        return say(p, "connecting");
    }
    /* Node 0's hooprun may stall (load, a debugger) without being gone: its replies may
     * come as late as HOOP_TIMEOUT before a node gives the meeting up. */
    hoop__store_set_reply_grace(p->agents, timeout_ms);
    return 0;
}

/* Another node's hooprun exited with a failure (hooprun_agent_close): 1 with its exit
 * code and note, else 0. */
static int peer_exited(const hooprun_plan *p, int *rc, char *why, size_t cap)
{
    char buf[600];
    size_t n = 0;
    if (hoop_store_get(p->agents, "hooprun.exit", buf, sizeof(buf) - 1, &n, 0) != HOOP_OK) return 0;
    buf[n] = '\0';
    char *text = strchr(buf, '\n');
    *rc = atoi(buf);
    snprintf(why, cap, "%s", text ? text + 1 : buf);
    return 1;
}

/* A node's hooprun that left on purpose: says so, naming it with its exit code, and
 * returns this node's exit code (the same when it is a signal's 128 + N, else 1);
 * returns 0 when none left. */
static int peer_left(const hooprun_plan *p)
{
    char why[600];
    int rc;
    if (!peer_exited(p, &rc, why, sizeof(why))) return 0;
    fprintf(stderr, "hooprun (node %d): %s; not starting another attempt\n", p->node_rank, why);
    return rc > 128 ? rc : 1;
}

/* A failed meeting: peer_left's account, else the store's message (say). */
static int meeting_failed(const hooprun_plan *p, const char *when)
{
    int rc = peer_left(p);
    return rc ? rc : say(p, when);
}

/* The first attempt's barrier is an all-gather of what each node was told. */
static int compare_cards(const hooprun_plan *p)
{
    agent_card mine = {.max_restarts = p->max_restarts, .nproc_per_node = p->nproc_per_node};
    agent_card *all = calloc((size_t)p->nnodes, sizeof(*all));
    snprintf(mine.host, sizeof(mine.host), "%.*s", (int)sizeof(mine.host) - 1, p->host);
    if (all == NULL) {
        fprintf(stderr, "hooprun: out of memory\n");
        return 1;
    }
    /* Every node reads every card before any node leaves (node 0 leaving ends the store). */
    if (hoop_store_allgather(p->agents, "hooprun.attempt.0", &mine, sizeof(mine), all, -1) !=
            HOOP_OK ||
        hoop_store_barrier(p->agents, "hooprun.attempt.0.read", -1) != HOOP_OK) {
        free(all);
        return meeting_failed(p, "before attempt 0");
    }
    for (int n = 0; n < p->nnodes; n++) {
        all[n].host[sizeof(all[n].host) - 1] = '\0';
        const char *what = all[n].max_restarts != mine.max_restarts       ? "--max-restarts"
                           : all[n].nproc_per_node != mine.nproc_per_node ? "--nproc-per-node"
                                                                          : NULL;
        if (!what) continue;
        fprintf(stderr,
                "hooprun (node %d): node %d (%s) runs %s %d but this node %d: give every node's "
                "hooprun the same %s\n",
                p->node_rank, n, all[n].host, what,
                what[2] == 'm' ? all[n].max_restarts : all[n].nproc_per_node,
                what[2] == 'm' ? mine.max_restarts : mine.nproc_per_node, what);
        free(all);
        return 2;
    }
    free(all);
    return 0;
}

int hooprun_agent_begin(const hooprun_plan *p, int k)
{
    char name[64], when[64];
    int rc;
    if (!p->agents) return 0;
    if (k == 0) return compare_cards(p);
    if ((rc = peer_left(p)) != 0) return rc; /* it will not come: say so now */
    snprintf(name, sizeof(name), "hooprun.attempt.%d", k);
    if (hoop_store_barrier(p->agents, name, -1) == HOOP_OK) return 0;
    snprintf(when, sizeof(when), "before restart %d", k);
    return meeting_failed(p, when);
}

void hooprun_agent_failed(const hooprun_plan *p, const char *why)
{
    char key[64], text[600];
    if (!p->agents || hooprun_agent_poll(p, text, sizeof(text)) != 0) return;
    snprintf(key, sizeof(key), "hooprun.attempt.%d.failed", p->restart);
    int n = snprintf(text, sizeof(text), "node %d (%s): %s", p->node_rank, p->host, why);
    (void)hoop_store_set(p->agents, key, text,
                         n < (int)sizeof(text) ? (size_t)n : sizeof(text) - 1);
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
    if (found) return 1;
    if (lost >= 0) return -1; /* why: the store's account of the hooprun that vanished */
    return 0;
}

void hooprun_agent_close(hooprun_plan *p, int rc)
{
    char why[1100], note[1120], failed[600];
    if (!p->agents) return;
    if (rc != 0) {
        /* This attempt's failure, when a node noted one: the reason node 0's GOODBYE
         * gives, and what node 0 waits (LINGER_MS) for the others to read first. */
        int noted = p->node_rank == 0 && hooprun_agent_poll(p, failed, sizeof(failed)) > 0;
        snprintf(why, sizeof(why), "node %d (%.64s)'s hooprun exited with %d%s%s%s", p->node_rank,
                 p->host, rc,
                 rc > 128  ? " (a signal: 128 + N)"
                 : rc == 2 ? " (bad flags or environment)"
                           : "",
                 noted ? " after the attempt failed on " : "", noted ? failed : "");
        /* Node 0's store tells everyone in its GOODBYE. Another node leaves its note for
         * the nodes still running (their probe, or their next meeting) and then hangs up
         * without a CLOSE, so that a meeting already waiting for it fails at once. */
        hoop__store_note_failure(p->agents, HOOP_ERR_REMOTE, why);
        /* Node 0 refusing a difference (exit 2), which every node finds at once: the
         * others may still be reading the meeting's last reply, which the GOODBYE must
         * not overtake. */
        if (p->node_rank == 0 && rc == 2) hoop__store_linger(p->agents, 2000);
        /* Node 0 ending after a worker failed (its own or another node's, with no restart
         * left): the other nodes learn of it from "hooprun.attempt.k.failed" at their
         * next probe, the failure named as it is, unless node 0's GOODBYE came first. */
        if (noted) hoop__store_linger(p->agents, HOOPRUN_AGENT_LINGER_MS);
        if (p->node_rank != 0) {
            int n = snprintf(note, sizeof(note), "%d\n%s", rc, why);
            (void)hoop_store_set(p->agents, "hooprun.exit", note, (size_t)n);
            hooprun_agent_failed(p, why);
            hoop__store_abandon(p->agents);
        }
    }
    hoop_store_destroy(p->agents);
    p->agents = NULL;
}
