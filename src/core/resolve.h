/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/resolve.h -- name resolution that rides out a resolver's transient failure
 * (internal; see resolve.c).
 */
#ifndef HOOP_CORE_RESOLVE_H
#define HOOP_CORE_RESOLVE_H

#include <netdb.h>

#include "hoop/status.h"

HOOP_EXTERN_C_BEGIN

/* How long hoop__getaddrinfo retries a temporary failure (milliseconds). */
#define HOOP__RESOLVE_RETRY_MS 20000

/* getaddrinfo(3), with EAI_AGAIN ("temporary failure in name resolution": a DNS server
 * that every rank of a large job asks for MASTER_ADDR at once may answer so) tried again,
 * after 100 ms doubling to 1 s, for up to HOOP__RESOLVE_RETRY_MS; any other result is
 * returned at once. Returns getaddrinfo's code (0 with *res set). Thread-safe (as
 * getaddrinfo). */
int hoop__getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                      struct addrinfo **res);

HOOP_EXTERN_C_END

#endif /* HOOP_CORE_RESOLVE_H */
