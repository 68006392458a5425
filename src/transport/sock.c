/* SPDX-License-Identifier: BSD-3-Clause */
/* src/transport/sock.c -- socket helpers the transports share (see sock.h). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/check.h"
#include "core/fdlimit.h"
#include "core/resolve.h"
#include "transport/sock.h"

// ----- addresses ---------------------------------------------------------------------------

int hoop__sock_is_loopback(const hoop_sockaddr *a)
{
    if (a->sa.sa_family == AF_INET) return (ntohl(a->in.sin_addr.s_addr) >> 24) == 127;
    if (a->sa.sa_family != AF_INET6) return 0;
    const struct in6_addr *v6 = &a->in6.sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(v6) || (IN6_IS_ADDR_V4MAPPED(v6) && v6->s6_addr[12] == 127);
}

socklen_t hoop__sock_len(const hoop_sockaddr *a)
{
    return a->sa.sa_family == AF_INET6  ? (socklen_t)sizeof(a->in6)
           : a->sa.sa_family == AF_INET ? (socklen_t)sizeof(a->in)
                                        : 0;
}

const char *hoop__sock_addr_str(const hoop_sockaddr *a, char b[HOOP_SOCK_ADDR_STRLEN])
{
    char ip[INET6_ADDRSTRLEN], zone[IF_NAMESIZE + 1] = "";
    if (a->sa.sa_family == AF_INET && inet_ntop(AF_INET, &a->in.sin_addr, ip, sizeof(ip))) {
        snprintf(b, HOOP_SOCK_ADDR_STRLEN, "%s:%d", ip, ntohs(a->in.sin_port));
    } else if (a->sa.sa_family == AF_INET6 &&
               inet_ntop(AF_INET6, &a->in6.sin6_addr, ip, sizeof(ip))) {
        char name[IF_NAMESIZE];
        /* An index of another host's interface has no name here: its number, then. */
        if (a->in6.sin6_scope_id != 0 && if_indextoname(a->in6.sin6_scope_id, name))
            snprintf(zone, sizeof(zone), "%%%s", name);
        else if (a->in6.sin6_scope_id != 0)
            snprintf(zone, sizeof(zone), "%%%u", (unsigned)a->in6.sin6_scope_id);
        snprintf(b, HOOP_SOCK_ADDR_STRLEN, "[%s%s]:%d", ip, zone, ntohs(a->in6.sin6_port));
    } else {
        snprintf(b, HOOP_SOCK_ADDR_STRLEN, "?");
    }
    return b;
}

void hoop__sock_to_wire(const hoop_sockaddr *a, struct hoop_sock_wire *w)
{
    memset(w, 0, sizeof(*w));
    w->family = a->sa.sa_family;
    if (a->sa.sa_family == AF_INET6) {
        w->port = a->in6.sin6_port;
        w->scope_id = a->in6.sin6_scope_id;
        memcpy(w->addr, &a->in6.sin6_addr, 16);
    } else {
        w->port = a->in.sin_port;
        memcpy(w->addr, &a->in.sin_addr, 4);
    }
}

hoop_status hoop__sock_from_wire(const struct hoop_sock_wire *w, const char *who, hoop_sockaddr *a)
{
    memset(a, 0, sizeof(*a));
    if (w->family == AF_INET) {
        a->in.sin_family = AF_INET;
        a->in.sin_port = w->port;
        memcpy(&a->in.sin_addr, w->addr, 4);
    } else if (w->family == AF_INET6) {
        a->in6.sin6_family = AF_INET6;
        a->in6.sin6_port = w->port;
        a->in6.sin6_scope_id = w->scope_id;
        memcpy(&a->in6.sin6_addr, w->addr, 16);
    } else {
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s published an address of unknown family %u", who,
                          (unsigned)w->family);
    }
    return HOOP_OK;
}

static int is_link_local(const hoop_sockaddr *a)
{
    return a->sa.sa_family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&a->in6.sin6_addr);
}

hoop_sockaddr hoop__sock_dial_addr(const hoop_sockaddr *peer, const hoop_sockaddr *self)
{
    hoop_sockaddr d = *peer;
    if (is_link_local(&d) && is_link_local(self)) d.in6.sin6_scope_id = self->in6.sin6_scope_id;
    return d;
}

static int is_loopback(const hoop_sockaddr *a)
{
    if (a->sa.sa_family == AF_INET) return (ntohl(a->in.sin_addr.s_addr) >> 24) == 127;
    return a->sa.sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&a->in6.sin6_addr);
}

static void set_loopback(int family, hoop_sockaddr *out)
{
    memset(out, 0, sizeof(*out));
    if (family == AF_INET6) {
        out->in6.sin6_family = AF_INET6;
        out->in6.sin6_addr = in6addr_loopback;
    } else {
        out->in.sin_family = AF_INET;
        out->in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
}

// ----- choosing the listen address -------------------------------------------------------

/* How well an interface address suits (lower is better; -1: not at all): the wanted
 * family first, then a global address before a link-local one. */
static int if_rank(const struct sockaddr *sa, int want)
{
    if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)) return -1;
    int ll = sa->sa_family == AF_INET6 &&
             IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return (sa->sa_family == want ? 0 : 2) + ll;
}

/* 1 when name is an item of list ("a, b, c"). */
static int in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

/* 1 when the interface called name matches list: comma-separated entries, each a prefix
 * or, after '=', an exact name (NCCL_SOCKET_IFNAME's form, without its leading '^'). */
static int ifname_listed(const char *list, const char *name)
{
    for (const char *e = list; *e;) {
        size_t len = strcspn(e, ",");
        int exact = e[0] == '=';
        size_t n = len - (size_t)exact;
        if (n > 0 && strncmp(name, e + exact, n) == 0 && (!exact || name[n] == '\0')) return 1;
        e += len + (e[len] == ',');
    }
    return 0;
}

static hoop_status addr_from_ifname(const char *spec, int want, hoop_sockaddr *out)
{
    struct ifaddrs *ifs, *best = NULL;
    int best_rank = 16, exclude = spec[0] == '^', ndown = 0;
    char down[128] = ""; /* the matching interfaces that are not up and running */
    HOOP_SYSCHECK(getifaddrs(&ifs), "getifaddrs");
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        int match = ifname_listed(spec + exclude, i->ifa_name) != exclude;
        int r = match ? if_rank(i->ifa_addr, want) : -1;
        /* '^' names what to leave out: loopback only when nothing else is left */
        if (r >= 0 && exclude && (i->ifa_flags & IFF_LOOPBACK)) r += 8;
        if (r >= 0 && (i->ifa_flags & (IFF_UP | IFF_RUNNING)) != (IFF_UP | IFF_RUNNING)) {
            /* A peer could not reach it: a prefix that also matches such an interface
             * (eth1 with its cable out beside eth0) must not pick it. */
            size_t len = strlen(down);
            if (!in_list(down, i->ifa_name) && len + strlen(i->ifa_name) + 3 < sizeof(down))
                snprintf(down + len, sizeof(down) - len, "%s%s", len ? ", " : "", i->ifa_name);
            ndown++;
            continue;
        }
        if (r >= 0 && r < best_rank) best = i, best_rank = r;
    }
    if (best) {
        memset(out, 0, sizeof(*out));
        memcpy(out, best->ifa_addr,
               best->ifa_addr->sa_family == AF_INET6 ? sizeof(out->in6) : sizeof(out->in));
        out->in.sin_port = 0; /* sin_port and sin6_port share their place */
        if (is_link_local(out)) out->in6.sin6_scope_id = if_nametoindex(best->ifa_name);
    }
    freeifaddrs(ifs);
    if (!best && ndown)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "HOOP_SOCKET_IFNAME=%s matches no interface that is up and running "
                          "(%s: down, or no carrier)",
                          spec, down);
    if (!best)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "HOOP_SOCKET_IFNAME=%s matches no interface with an IPv4 or IPv6 "
                          "address (the form: prefixes or =exact names, comma-separated, all "
                          "after a '^' to leave those out)",
                          spec);
    return HOOP_OK;
}

/* The local address the kernel would use to reach host (UDP connect + getsockname), of
 * the family of host's first address. */
static hoop_status addr_routing_to(const char *host, hoop_sockaddr *out)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM}, *ai;
    int rc = hoop__getaddrinfo(host, "9", &hints, &ai);
    if (rc != 0)
        return HOOP_ERROR(rc == EAI_AGAIN ? HOOP_ERR_SYSTEM : HOOP_ERR_INVALID,
                          "MASTER_ADDR=%s cannot be resolved: %s", host, gai_strerror(rc));
    hoop_sockaddr dst = {.sa.sa_family = AF_UNSPEC};
    if (ai->ai_addrlen <= sizeof(dst)) memcpy(&dst, ai->ai_addr, ai->ai_addrlen);
    if (is_loopback(&dst)) {
        freeaddrinfo(ai);
        set_loopback(dst.sa.sa_family, out);
        return HOOP_OK;
    }
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    hoop_sockaddr me;
    socklen_t len = sizeof(me);
    int ok = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
             getsockname(fd, &me.sa, &len) == 0;
    int err = errno;
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    if (!ok)
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "no route to MASTER_ADDR=%s: %s", host,
                          hoop__strerror(err));
    if (is_loopback(&me))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "the route to MASTER_ADDR=%s leaves through loopback; set "
                          "HOOP_SOCKET_IFNAME",
                          host);
    me.in.sin_port = 0;
    *out = me;
    return HOOP_OK;
}

int hoop__sock_token_equal(const char *a, const char *b)
{
    unsigned char diff = 0;
    for (int i = 0; i < HOOP_TP_TOKEN_MAX; i++) diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

hoop_status hoop__sock_listen_addr(const char *ifname, const char *master_addr, hoop_sockaddr *out)
{
    set_loopback(AF_INET, out);
    if (ifname && *ifname) {
        int want = master_addr && strchr(master_addr, ':') ? AF_INET6 : AF_INET;
        return addr_from_ifname(ifname, want, out);
    }
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
