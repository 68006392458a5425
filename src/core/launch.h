/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/launch.h -- rank arithmetic of the launcher (internal).
 *
 * hooprun starts nproc_per_node workers on each of nnodes nodes. This module turns
 * (nnodes, node_rank, nproc_per_node, local_rank) into the ids a worker receives in its
 * environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK), with the
 * layout of DESIGN.md: rank = node_rank * nproc_per_node + local_rank. Pure functions;
 * thread-safe.
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

/* Fills *out for worker local_rank (0 <= local_rank < nproc_per_node) of node node_rank.
 * Errors: HOOP_ERR_INVALID as hoop__launch_check, or for a local_rank out of range. */
hoop_status hoop__launch_ids_of(int nnodes, int node_rank, int nproc_per_node, int local_rank,
                                hoop_launch_ids *out);

#endif /* HOOP_CORE_LAUNCH_H */
