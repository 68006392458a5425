/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/claims.c -- who waited for whom when a call ran out of time.
 *
 * A call that passes HOOP_TIMEOUT while waiting for a peer's data or vote names that
 * peer, but the peer may be blameless: alive, and waiting itself for a rank that stopped
 * (SIGSTOP, a hung device, a cut link). Every rank's deadline comes at about the same
 * time, so which rank fails first, and with whose name, was a race: in a ring where
 * rank 2 stopped, rank 0 (waiting for rank 3's data) could fail first and blame rank 3.
 *
 * So a timeout that names a peer is a claim ("origin waits for culprit"), sent at once
 * down the control ring (progress.c) and forwarded by every rank that receives it, once
 * per origin; a rank that times out, or receives a claim, gives the others a short grace
 * (TIMEOUT_GRACE_MS) for theirs, then follows the claims it holds from its own (or the
 * first it received): while the rank a claim waits for has made a claim of its own,
 * that one explains it. The claim at the end of the chain names a rank that said
 * nothing: the one that stopped. A claim cannot pass the stopped rank, but every rank
 * downstream of its successor (the one rank that waits for it directly) receives that
 * successor's claim; ranks whose deadlines differ by more than the grace may still
 * name an intermediate rank.
 *
 * Owns the comm's claim table (made at the first claim). Thread-safety: the progress
 * thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "collectives/comm.h"

int hoop__claims_follow(const int *culprit, int world_size, int start)
{
    int at = start;
    /* At most world_size hops: claims that wait for each other in a cycle end anywhere. */
    for (int hops = 0; hops < world_size; hops++) {
        int next = culprit[at];
        if (next < 0 || next >= world_size || culprit[next] < 0) break;
        at = next;
    }
    return at;
}

int hoop__claim_add(hoop_comm *comm, const hoop__hdr rec[3])
{
    int origin = rec[0].root, culprit = (int)(int64_t)rec[0].seq, n = comm->world_size;
    if (origin < 0 || origin >= n || culprit < 0 || culprit >= n) return 0;
    if (!comm->claims) {
        comm->claims = calloc((size_t)n, sizeof(*comm->claims));
        comm->claim_culprit = malloc((size_t)n * sizeof(int));
        if (!comm->claims || !comm->claim_culprit) { /* best effort: claims only add names */
            free(comm->claims);
            free(comm->claim_culprit);
            comm->claims = NULL;
            comm->claim_culprit = NULL;
            return 0;
        }
        for (int r = 0; r < n; r++) comm->claim_culprit[r] = -1;
        comm->first_claim = -1;
    }
    if (comm->claim_culprit[origin] >= 0) return 0;
    memcpy(comm->claims[origin], rec, 3 * sizeof(hoop__hdr));
    comm->claim_culprit[origin] = culprit;
    if (comm->first_claim < 0 && origin != comm->rank) comm->first_claim = origin;
    return 1;
}

const hoop__hdr *hoop__claim_final(const hoop_comm *comm)
{
    if (!comm->claims) return NULL;
    int start = comm->claim_culprit[comm->rank] >= 0 ? comm->rank : comm->first_claim;
    if (start < 0) return NULL;
    return comm->claims[hoop__claims_follow(comm->claim_culprit, comm->world_size, start)];
}

void hoop__claims_free(hoop_comm *comm)
{
    free(comm->claims);
    free(comm->claim_culprit);
    comm->claims = NULL;
    comm->claim_culprit = NULL;
}
