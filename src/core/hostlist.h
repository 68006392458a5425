/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/hostlist.h -- Slurm node-list expansion (internal).
 *
 * Expands a compressed node list such as "gpu-node-[01-03],login1" into host names, in
 * the order `scontrol show hostnames` prints them, and reads Slurm's tasks-per-node
 * lists ("2(x3),1"). Owns nothing beyond the arrays it returns. Thread-safe (no shared
 * state).
 */
#ifndef HOOP_CORE_HOSTLIST_H
#define HOOP_CORE_HOSTLIST_H

#include "hoop/status.h"

/* Most hosts one list may expand to (Slurm caps one bracket range at 64K hosts too). */
#define HOOP_HOSTLIST_MAX 65536

/* Expands list into *hosts (an array of *count malloc'ed strings; free it with
 * hoop__hostlist_free). Grammar, after Slurm's hostlist.c:
 *   - tokens are separated by ',', ' ' or '\t' outside brackets; empty tokens are skipped;
 *   - a token is a literal host, or has bracket groups "[r,r,...]" where r is N or N-M
 *     (decimal, lo <= hi); the expanded number is zero-padded to the width of N as
 *     written ("[08-10]" gives 08 09 10, "[1-02]" gives 1 2);
 *   - the last bracket group must end the token ("rack[1-2]-node" is invalid, as in Slurm);
 *   - with several groups g1..gk the last group varies fastest, then g1, g2, ..., with
 *     g(k-1) slowest: "a[1-2]b[3-4]c[5-6]" gives a1b3c5 a1b3c6 a2b3c5 a2b3c6 a1b4c5 ...
 *     (this is what scontrol prints; for two groups it is plain row-major order);
 *   - duplicates are kept.
 * Errors: HOOP_ERR_INVALID naming the list for an empty list, unbalanced or nested
 * brackets, an empty, reversed or non-numeric range, a suffix after the last group, or
 * more than HOOP_HOSTLIST_MAX hosts; HOOP_ERR_NOMEM. On error *hosts is NULL, *count 0.
 * Deviation from Slurm: a stray ']' or an unclosed '[' is rejected (Slurm prints a
 * mangled name for them). */
hoop_status hoop__hostlist_expand(const char *list, char ***hosts, int *count);

/* The task count of node node_id (0-based, in node-list order) from a Slurm
 * tasks-per-node list such as SLURM_TASKS_PER_NODE's "2(x3),1" (nodes 0-2 run 2 tasks,
 * node 3 runs 1): comma-separated items, each a count N >= 1 or N(xM) for M nodes.
 * Errors: HOOP_ERR_INVALID naming what (the variable) for a malformed list or a node_id
 * past its end. */
hoop_status hoop__hostlist_tasks_on_node(const char *what, const char *spec, int node_id, int *out);

/* Frees what hoop__hostlist_expand returned. Accepts NULL. */
void hoop__hostlist_free(char **hosts, int count);

#endif /* HOOP_CORE_HOSTLIST_H */
