/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/rendezvous.h -- in-process rendezvous (internal side; see rendezvous.c).
 */
#ifndef HOOP_COLLECTIVES_RENDEZVOUS_H
#define HOOP_COLLECTIVES_RENDEZVOUS_H

#include <stdint.h>

#include "hoop/comm.h"
#include "transport/transport.h"

/* All-gather of one HOOP_TP_HANDLE_MAX-byte blob per rank: out receives world_size
 * blobs, rank r's at r x HOOP_TP_HANDLE_MAX. HOOP_ERR_TIMEOUT lists missing ranks. */
hoop_status hoop__rendezvous_allgather(hoop_rendezvous *rv, int rank, const void *blob, void *out,
                                       int64_t deadline_ns);
int hoop__rendezvous_world_size(const hoop_rendezvous *rv);

#endif /* HOOP_COLLECTIVES_RENDEZVOUS_H */
