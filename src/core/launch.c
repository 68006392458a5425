/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/launch.c -- rank arithmetic of the launcher: which ids each worker gets.
 *
 * Owns nothing. Thread-safe (pure functions).
 */
#include "core/check.h"
#include "core/launch.h"

hoop_status hoop__launch_check(int nnodes, int node_rank, int nproc_per_node)
{
    if (nnodes < 1 || nnodes > HOOP_LAUNCH_WORLD_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "--nnodes %d is out of range [1, %d]", nnodes,
                          HOOP_LAUNCH_WORLD_MAX);
    if (nproc_per_node < 1 || nproc_per_node > HOOP_LAUNCH_WORLD_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "--nproc-per-node %d is out of range [1, %d]",
                          nproc_per_node, HOOP_LAUNCH_WORLD_MAX);
    if (node_rank < 0 || node_rank >= nnodes)
        return HOOP_ERROR(HOOP_ERR_INVALID, "--node-rank %d is not in [0, %d] (--nnodes %d)",
                          node_rank, nnodes - 1, nnodes);
    if ((long long)nnodes * nproc_per_node > HOOP_LAUNCH_WORLD_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "--nnodes %d x --nproc-per-node %d exceeds %d workers",
                          nnodes, nproc_per_node, HOOP_LAUNCH_WORLD_MAX);
    return HOOP_OK;
}

hoop_status hoop__launch_ids_of(int nnodes, int node_rank, int nproc_per_node, int local_rank,
                                hoop_launch_ids *out)
{
    HOOP_CHECK(hoop__launch_check(nnodes, node_rank, nproc_per_node));
    if (local_rank < 0 || local_rank >= nproc_per_node)
        return HOOP_ERROR(HOOP_ERR_INVALID, "local rank %d is not in [0, %d]", local_rank,
                          nproc_per_node - 1);
    *out = (hoop_launch_ids){
        .rank = node_rank * nproc_per_node + local_rank,
        .local_rank = local_rank,
        .world_size = nnodes * nproc_per_node,
        .local_world_size = nproc_per_node,
        .node_rank = node_rank,
    };
    return HOOP_OK;
}
