/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/transport/hello.h -- the judges of the handshakes the transports read from a
 * connecting stranger (internal): the hello of tcp.c and the hello of shm.c, each a pure
 * function of the bytes received and of what the listener expects, so that the
 * transports and their fuzz targets (tests/fuzz/fuzz_tcp.c, fuzz_shm.c) run the same
 * code. They keep no state and touch no descriptor: each is safe to call from any
 * thread, on its own arguments. The wire formats are the structs in tcp.c and shm.c;
 * HOOP__TCP_HELLO_BYTES and HOOP__SHM_HELLO_BYTES are their sizes (checked there).
 */
#ifndef HOOP_TRANSPORT_HELLO_H
#define HOOP_TRANSPORT_HELLO_H

#include <stddef.h>

#include "transport/transport.h"

/* sizeof(struct tcp_hello): magic, version, nsocks, rank, channel, idx, nonce, token. */
#define HOOP__TCP_HELLO_BYTES (24 + HOOP_TP_TOKEN_MAX)
/* sizeof(struct shm_hello): magic, version, pad, rank, channel, ring_bytes, token. */
#define HOOP__SHM_HELLO_BYTES (24 + HOOP_TP_TOKEN_MAX)

/* Judges the n bytes of a TCP hello as the listener received them: 1 to accept, 0 to
 * refuse. Accepted: exactly HOOP__TCP_HELLO_BYTES bytes with the magic and version of
 * this build, 1 <= nsocks <= the most streams a link has (16), 0 <= idx < nsocks, and
 * the token equal to `token` (HOOP_TP_TOKEN_MAX bytes, compared in constant time; only a
 * hello that passed the other checks is compared). The rank and channel are the
 * caller's to check against its world. On a refusal why (cap bytes, may be NULL when
 * cap is 0) receives the rest of "refused a connection ..." naming the reason: "that is
 * not a hoop peer (bad hello)", "claiming rank R: tcp protocol version V, this build speaks
 * W" (a rank of another hoop build: the magic is right, the version is not) or "claiming
 * rank R: wrong HOOP_TOKEN". */
int hoop__tcp_hello_check(const void *bytes, size_t n, const char *token, char *why, size_t cap);

/* Judges the n bytes of a shm hello as the listener received them with nfds descriptors
 * (SCM_RIGHTS; truncated = the control data did not fit, MSG_CTRUNC) from a peer whose
 * user is this process's (same_user = 1, from SO_PEERCRED): 1 to accept, 0 to refuse.
 * Accepted: exactly HOOP__SHM_HELLO_BYTES bytes with the magic and version of this
 * build, the three descriptors (segment, data bell, space bell) and no truncation, the
 * same user, the token equal to `token` (HOOP_TP_TOKEN_MAX bytes, constant time) and a
 * ring of a power of two bytes, at least 4096. The checks run in that order and the
 * first failure is the reason: on a refusal *why points to a static string ("not a hoop
 * shm hello", "another shm protocol version", "the segment and eventfds did not
 * arrive", "the peer runs as another user", "wrong token", "a bad ring size"); it is
 * NULL on acceptance. Mapping the segment (its size and header) is checked later, by
 * the caller. */
int hoop__shm_hello_check(const void *bytes, size_t n, int nfds, int truncated, int same_user,
                          const char *token, const char **why);

#endif /* HOOP_TRANSPORT_HELLO_H */
