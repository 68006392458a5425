/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/transport/sock.h -- socket helpers the transports share (internal): the listen
 * address (IPv4 or IPv6) and its form in a handle, the token comparison, printing an
 * address. tcp.c carries data over them; shm.c and ib.c use a socket for the hello and
 * to hear a peer die.
 */
#ifndef HOOP_TRANSPORT_SOCK_H
#define HOOP_TRANSPORT_SOCK_H

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include "hoop/status.h"
#include "transport/transport.h"

/* A socket address of either family; the family says which member is valid. */
typedef union hoop_sockaddr {
    struct sockaddr sa;
    struct sockaddr_in in;   /* sa.sa_family == AF_INET */
    struct sockaddr_in6 in6; /* sa.sa_family == AF_INET6 */
} hoop_sockaddr;

/* An address as a transport's handle publishes it (24 bytes). family: AF_INET or
 * AF_INET6; port and addr in network order, an IPv4 address in addr's first 4 bytes;
 * scope_id: the publisher's interface index of an IPv6 link-local address, else 0. */
struct hoop_sock_wire {
    uint16_t family;
    uint16_t port;
    uint32_t scope_id;
    uint8_t addr[16];
};

/* Longest text of hoop__sock_addr_str: "[IPv6%zone]:65535" and its '\0'. */
#define HOOP_SOCK_ADDR_STRLEN (INET6_ADDRSTRLEN + IF_NAMESIZE + 10)

/* a as "10.0.0.2:41234", or "[fd00::2]:41234" ("[fe80::1%eth0]:41234" with the zone of a
 * link-local address; "%7" where this host has no interface of index 7), into b; "?"
 * for another family. Returns b. Thread-safe. */
const char *hoop__sock_addr_str(const hoop_sockaddr *a, char b[HOOP_SOCK_ADDR_STRLEN]);

/* 1 when a is a loopback address (127.0.0.0/8, ::1, or ::ffff:127.x.y.z), else 0. */
int hoop__sock_is_loopback(const hoop_sockaddr *a);

/* The length bind(2) and connect(2) take for a's family (0 for another family). */
socklen_t hoop__sock_len(const hoop_sockaddr *a);

/* Converts a (AF_INET or AF_INET6) to what a handle carries, and back. from_wire fails
 * with HOOP_ERR_INVALID "<who> published an address of unknown family N". */
void hoop__sock_to_wire(const hoop_sockaddr *a, struct hoop_sock_wire *w);
hoop_status hoop__sock_from_wire(const struct hoop_sock_wire *w, const char *who, hoop_sockaddr *a);

/* The address a connector dials for a peer that published peer, from a rank listening on
 * self: peer itself, except that a link-local IPv6 address takes self's interface index
 * when self is link-local too (the publisher's index names an interface of its own host;
 * both ranks are on that link, which self's interface reaches). Thread-safe. */
hoop_sockaddr hoop__sock_dial_addr(const hoop_sockaddr *peer, const hoop_sockaddr *self);

/* The address to listen on (port 0), IPv4 or IPv6:
 *   ifname set: an address of an interface that ifname names and that is up and running
 *     (IFF_UP, IFF_RUNNING); ifname is NCCL_SOCKET_IFNAME's form: comma-separated
 *     prefixes, '=' before an exact name, and a leading '^' that names the interfaces to
 *     leave out instead (loopback then only when nothing else is left); of MASTER_ADDR's
 *     family (IPv6 when
 * master_addr is an IPv6 address, that is has a ':'; else IPv4) if it has one, else of the other; a
 * global address before a link-local one (which gets the interface's index as its scope); else
 * master_addr set: the local address the kernel routes towards master_addr (its first address in
 * getaddrinfo's order, the one the store's client tries first), or loopback of master_addr's family
 * when master_addr is a loopback address; else 127.0.0.1. Errors: HOOP_ERR_INVALID (no such
 * interface, one without an address, or only ones that are down, named; an unresolvable
 * MASTER_ADDR; a route through loopback), HOOP_ERR_SYSTEM. */
hoop_status hoop__sock_listen_addr(const char *ifname, const char *master_addr, hoop_sockaddr *out);

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
