/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/transport/sock.h -- socket helpers the transports share (internal): the listen
 * address, the token comparison, printing an IPv4 address. tcp.c carries data over
 * them; shm.c and ib.c use a socket for the hello and to hear a peer die.
 */
#ifndef HOOP_TRANSPORT_SOCK_H
#define HOOP_TRANSPORT_SOCK_H

#include <arpa/inet.h>
#include <netinet/in.h>

#include "hoop/status.h"
#include "transport/transport.h"

/* Dotted-quad text of a into b (inet_ntoa's buffer is shared by threads); "?" if none. */
const char *hoop__sock_ip_str(struct in_addr a, char b[INET_ADDRSTRLEN]);

/* The IPv4 address to listen on: the first address of the interface named (or prefixed,
 * '=' for an exact name) by ifname; else the local address routing towards master_addr
 * (loopback when that is a loopback address); else loopback. Errors: HOOP_ERR_INVALID
 * (no such interface, unresolvable MASTER_ADDR, a route through loopback),
 * HOOP_ERR_SYSTEM. */
hoop_status hoop__sock_listen_addr(const char *ifname, const char *master_addr,
                                   struct in_addr *out);

/* 1 when the two HOOP_TP_TOKEN_MAX-byte tokens are equal, in time independent of where
 * they differ. */
int hoop__sock_token_equal(const char *a, const char *b);

#endif /* HOOP_TRANSPORT_SOCK_H */
