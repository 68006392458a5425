/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/launch.h -- rank arithmetic of the launcher (internal).
 *
 * hooprun starts nproc_per_node workers on each of nnodes nodes. This module turns
 * (nnodes, node_rank, nproc_per_node, local_rank) into the ids a worker receives in its
 * environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK), with the
 * layout torchrun uses: rank = node_rank * nproc_per_node + local_rank. It also reads
 * where a task of an srun step stands (srun-native start, each task a worker, no
 * hooprun). Thread-safe (pure functions, and getenv).
 */
#ifndef HOOP_CORE_LAUNCH_H
#define HOOP_CORE_LAUNCH_H

#include "hoop/status.h"

/* Largest world the launcher accepts (the same bound hoop__env_dist puts on WORLD_SIZE). */
#define HOOP_LAUNCH_WORLD_MAX (1 << 20)

typedef struct hoop_launch_ids {
    int rank;             /* global rank, 0..world_size-1 */
    int local_rank;       /* 0..nproc_per_node-1 */
    int world_size;       /* nnodes * nproc_per_node */
    int local_world_size; /* nproc_per_node */
    int node_rank;        /* 0..nnodes-1 */
} hoop_launch_ids;

/* Checks a launch geometry: nnodes >= 1, 0 <= node_rank < nnodes, nproc_per_node >= 1 and
 * nnodes * nproc_per_node <= HOOP_LAUNCH_WORLD_MAX. HOOP_ERR_INVALID names the rule
 * broken, using the flag names of hooprun ("--node-rank 3 is not below --nnodes 2"). */
hoop_status hoop__launch_check(int nnodes, int node_rank, int nproc_per_node);

/* hoop__launch_check naming where nnodes and node_rank came from: a flag ("--nnodes",
 * written "--nnodes 2") or a variable ("SLURM_NNODES", written "SLURM_NNODES=2"), so
 * that a value Slurm gave is not blamed on a flag nobody typed ("SLURM_NODEID=3 is not in
 * [0, 1] (SLURM_NNODES=2)"). Same errors. */
hoop_status hoop__launch_check_from(int nnodes, const char *nnodes_from, int node_rank,
                                    const char *node_rank_from, int nproc_per_node);

/* Fills *out for worker local_rank (0 <= local_rank < nproc_per_node) of node node_rank.
 * Errors: HOOP_ERR_INVALID as hoop__launch_check, or for a local_rank out of range. */
hoop_status hoop__launch_ids_of(int nnodes, int node_rank, int nproc_per_node, int local_rank,
                                hoop_launch_ids *out);

/* MASTER_PORT of an srun-native job: 10000 + (job_id mod 1000) * 10 + (step_id mod 10),
 * in 10000..19999: every task of a step computes the same port, jobs whose ids differ
 * by less than 1000 and the first 10 steps of a job never share one, and it stays below
 * Linux's ephemeral range (32768 up) and apart from hoop.sbatch's 20000..29999. */
int hoop__launch_slurm_port(unsigned long job_id, unsigned long step_id);

/* What an srun step tells one of its tasks. Each field says which variable it came
 * from (for messages: "RANK=5 (SLURM_PROCID)"). */
typedef struct hoop_slurm_task {
    int rank, world_size;             /* SLURM_PROCID; SLURM_STEP_NUM_TASKS or SLURM_NTASKS */
    int local_rank, local_world_size; /* SLURM_LOCALID; this node's entry of the
                                       * tasks-per-node list (see below) */
    char master_addr[256];            /* first host of the step's node list */
    int master_port;                  /* hoop__launch_slurm_port */
    char token[64];                   /* "slurm-JOB.STEP": not a secret (see env.c) */
    const char *world_from, *local_world_from, *master_from;
} hoop_slurm_task;

/* Fills *out when this process is a task of an srun step: SLURM_STEP_ID and
 * SLURM_PROCID are set (a batch script has SLURM_PROCID=0 but is not a step, so it is
 * never taken for rank 0 of a bigger job). Sources, first found wins:
 *   world_size        SLURM_STEP_NUM_TASKS, SLURM_NTASKS
 *   local_world_size  SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE (entry SLURM_NODEID),
 *                     SLURM_NTASKS_PER_NODE
 *   master_addr       first host of SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, SLURM_NODELIST
 *   master_port       from SLURM_JOB_ID and SLURM_STEP_ID
 * *found is 0 (and *out untouched) outside a step. Errors: HOOP_ERR_INVALID naming the
 * variable that is missing or malformed (a step without SLURM_JOB_ID, a tasks-per-node
 * list without this node). Rank 0 must run on the list's first host, which Slurm's
 * block and cyclic distributions both do. */
hoop_status hoop__launch_slurm_task(hoop_slurm_task *out, int *found);

/* Longest host name (RFC 1035 2.3.4: 253 characters without the trailing dot). */
#define HOOP_LAUNCH_HOST_MAX 253

/* Checks that host can be a host name or an address, by its form only (no lookup): an
 * IPv4 address as inet_aton reads it (getaddrinfo's rule: "10.0.0.2", "127.1"); an IPv6
 * address without brackets, with an optional "%zone" ("fe80::1%eth0"); or a host name of
 * 1..253 characters: dot-separated labels of 1..63 letters, digits, '-' and '_' (Docker's
 * and some DNS names have '_'), not starting or ending with '-', an optional trailing
 * dot. what names the source in the message ("--master-addr", "MASTER_ADDR").
 * HOOP_ERR_INVALID says what is wrong: "--master-addr 'a b' is not a host name or
 * address: ' ' is not allowed in a host name (...)". Thread-safe. */
hoop_status hoop__launch_check_host(const char *what, const char *host);

/* Writes "host:port" into out (cap bytes, truncated and terminated), with an IPv6
 * address in brackets as RFC 3986 writes one in a URI: "[::1]:29500",
 * "[fe80::1%eth0]:29500". Returns out, so that it can stand in a format's argument. */
char *hoop__hostport(char *out, size_t cap, const char *host, int port);

#endif /* HOOP_CORE_LAUNCH_H */
