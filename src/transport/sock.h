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

/* One accept4 on the non-blocking listening socket lfd (flags SOCK_NONBLOCK |
 * SOCK_CLOEXEC): *fd = the new socket, or -1 when none is pending. Errors that concern
 * one pending connection only (ECONNABORTED, EPROTO, the network errors accept(2) passes
 * on) skip it. Anything else, above all EMFILE / ENFILE (out of descriptors: the
 * connection stays queued, so the listening socket stays readable and a caller that
 * polled it again would spin), fails with HOOP_ERR_SYSTEM "rank R: <who> cannot accept a
 * connection: <strerror> (<the descriptor limit>)" when a connection is pending (with
 * none pending, a full table is no error: *fd = -1). */
hoop_status hoop__sock_accept(int lfd, int rank, const char *who, int *fd);

/* 1 when the two HOOP_TP_TOKEN_MAX-byte tokens are equal, in time independent of where
 * they differ. */
int hoop__sock_token_equal(const char *a, const char *b);

#endif /* HOOP_TRANSPORT_SOCK_H */
