/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/transport/registry.c -- the table of transports (see registry.h).
 *
 * To add a transport: define its `const struct hoop_transport` (designated
 * initializers, a unique short name, a preference) and list it here. Order does not
 * matter for the choice (preference does); it is the order of logs and cards.
 *
 * Owns nothing. Thread-safe (constant data).
 */
#include <strings.h>

#include "transport/registry.h"

const struct hoop_transport *const hoop__transports[] = {
    &hoop__transport_shm, /* within a host */
    &hoop__transport_ib,  /* between hosts with an RDMA device */
    &hoop__transport_tcp, /* everywhere else */
    NULL,
};

_Static_assert(sizeof(hoop__transports) / sizeof(hoop__transports[0]) <= HOOP__TP_MAX + 1,
               "a card holds at most HOOP__TP_MAX transports");

/* Loopback TCP on a small machine (2 cores): a 25 us round per message, 2 GB/s. The
 * collectives' crossovers were tuned against these; tcp states no cost of its own. */
static const struct hoop_tp_cost loopback_tcp = {.alpha = 25e-6, .beta = 1.0 / 2.0e9};

void hoop__transport_cost(const struct hoop_transport *tp, void *ctx, struct hoop_tp_cost *out)
{
    *out = loopback_tcp;
    if (tp && tp->cost) tp->cost(ctx, out);
}

const struct hoop_transport *hoop__transport_find(const char *name)
{
    for (int k = 0; name && hoop__transports[k]; k++)
        if (strcasecmp(hoop__transports[k]->name, name) == 0) return hoop__transports[k];
    return NULL;
}
