/* SPDX-License-Identifier: BSD-3-Clause */
/* src/transport/sock.c -- socket helpers the transports share (see sock.h). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/check.h"
#include "core/fdlimit.h"
#include "transport/sock.h"

const char *hoop__sock_ip_str(struct in_addr a, char b[INET_ADDRSTRLEN])
{
    return inet_ntop(AF_INET, &a, b, INET_ADDRSTRLEN) ? b : "?";
}

static hoop_status addr_from_ifname(const char *prefix, struct in_addr *out)
{
    struct ifaddrs *ifs, *i;
    int exact = prefix[0] == '=';
    if (exact) prefix++;
    HOOP_SYSCHECK(getifaddrs(&ifs), "getifaddrs");
    for (i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        int match = exact ? strcmp(i->ifa_name, prefix) == 0
                          : strncmp(i->ifa_name, prefix, strlen(prefix)) == 0;
        if (match) break;
    }
    if (i) *out = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
    freeifaddrs(ifs);
    if (!i)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "HOOP_SOCKET_IFNAME=%s%s matches no interface with an IPv4 address",
                          exact ? "=" : "", prefix);
    return HOOP_OK;
}

/* The local address the kernel would use to reach host (UDP connect + getsockname). */
static hoop_status addr_routing_to(const char *host, struct in_addr *out)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *ai;
    int rc = getaddrinfo(host, "9", &hints, &ai);
    if (rc != 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "MASTER_ADDR=%s cannot be resolved: %s", host,
                          gai_strerror(rc));
    struct in_addr dst = ((struct sockaddr_in *)ai->ai_addr)->sin_addr;
    if ((ntohl(dst.s_addr) >> 24) == 127) {
        freeaddrinfo(ai);
        out->s_addr = htonl(INADDR_LOOPBACK);
        return HOOP_OK;
    }
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in me;
    socklen_t len = sizeof(me);
    int ok = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
             getsockname(fd, (struct sockaddr *)&me, &len) == 0;
    int err = errno;
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    if (!ok)
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "no route to MASTER_ADDR=%s: %s", host,
                          hoop__strerror(err));
    if ((ntohl(me.sin_addr.s_addr) >> 24) == 127)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "the route to MASTER_ADDR=%s leaves through loopback; set "
                          "HOOP_SOCKET_IFNAME",
                          host);
    *out = me.sin_addr;
    return HOOP_OK;
}

int hoop__sock_token_equal(const char *a, const char *b)
{
    unsigned char diff = 0;
    for (int i = 0; i < HOOP_TP_TOKEN_MAX; i++) diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

hoop_status hoop__sock_listen_addr(const char *ifname, const char *master_addr, struct in_addr *out)
{
    out->s_addr = htonl(INADDR_LOOPBACK);
    if (ifname && *ifname) return addr_from_ifname(ifname, out);
    if (master_addr && *master_addr) return addr_routing_to(master_addr, out);
    return HOOP_OK;
}

/* accept(2): Linux passes errors already pending on the new connection to accept; they
 * end that connection only, and the next one may be fine. */
static int accept_skips(int err)
{
    return err == EINTR || err == ECONNABORTED || err == EPROTO || err == ENETDOWN ||
           err == ENOPROTOOPT || err == EHOSTDOWN || err == ENONET || err == EHOSTUNREACH ||
           err == EOPNOTSUPP || err == ENETUNREACH;
}

hoop_status hoop__sock_accept(int lfd, int rank, const char *who, int *fd)
{
    char hint[160];
    for (;;) {
        *fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (*fd >= 0) return HOOP_OK;
        int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK) return HOOP_OK;
        if (accept_skips(err)) continue;
        /* accept(2) takes a descriptor slot before it looks for a connection: with the
         * table full it fails with EMFILE even when none is pending, which is no
         * failure (the rank may have every link it needs). */
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        if (poll(&p, 1, 0) == 0) return HOOP_OK;
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "rank %d: %s cannot accept a connection: %s%s", rank,
                          who, hoop__strerror(err), hoop__fd_hint(err, hint, sizeof(hint)));
    }
}
