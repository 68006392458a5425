/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/transport/registry.h -- the transports hoop is built with (internal).
 *
 * One table lists every transport's vtable; the communicator opens what HOOP_TRANSPORT
 * asks for from it (auto: all of them, each going without where its init says the host
 * lacks it) and gives each link the reaching transport with the lowest `preference`.
 * A new transport registers itself by adding its vtable to the table in registry.c;
 * nothing else in hoop names it. Constant data: thread-safe.
 */
#ifndef HOOP_TRANSPORT_REGISTRY_H
#define HOOP_TRANSPORT_REGISTRY_H

#include "transport/transport.h"

/* Every transport, terminated by NULL: at most HOOP__TP_MAX of them (registry.c
 * asserts it), each name shorter than HOOP__TP_NAME_MAX (a card holds one entry of a
 * name and a handle per transport; check_links tests the names). */
#define HOOP__TP_MAX 4
#define HOOP__TP_NAME_MAX 8
extern const struct hoop_transport *const hoop__transports[];

/* The registered transport called name (case-insensitive), or NULL. */
const struct hoop_transport *hoop__transport_find(const char *name);

/* tp's link cost on context ctx: its cost slot's figures, or, for a transport without
 * one, loopback TCP's (transport.h; the figures the cost model had before transports
 * stated their own). */
void hoop__transport_cost(const struct hoop_transport *tp, void *ctx, struct hoop_tp_cost *out);

#endif /* HOOP_TRANSPORT_REGISTRY_H */
