/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/bootstrap/store_proto.c -- helpers of the store's wire format shared by server and
 * client: the growable frame buffer, key validation, constant-time token comparison,
 * name resolution, socket set-up, and naming the protocol of a peer that is not ours.
 *
 * Owns nothing beyond what each call returns. Thread-safe (no shared state).
 */
#include <fcntl.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>

#include "bootstrap/store_proto.h"
#include "core/check.h"
#include "core/launch.h"
#include "core/resolve.h"

int hoop__buf_reserve(hoop__buf *b, size_t n)
{
    if (b->oom) return 0;
    if (b->cap - b->len >= n) return 1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) {
        if (cap > SIZE_MAX / 2) {
            b->oom = 1;
            return 0;
        }
        cap *= 2;
    }
    uint8_t *p = realloc(b->data, cap);
    if (p == NULL) {
        b->oom = 1;
        return 0;
    }
    b->data = p;
    b->cap = cap;
    return 1;
}

void hoop__buf_free(hoop__buf *b)
{
    free(b->data);
    *b = (hoop__buf){0};
}

int hoop__store_key_ok(const uint8_t *key, size_t n)
{
    return key != NULL && n >= 1 && n <= HOOP_STORE_KEY_MAX && memchr(key, 0, n) == NULL;
}

int hoop__store_token_eq(const char *a, const char *b)
{
    a = a ? a : "";
    b = b ? b : "";
    size_t la = strlen(a), lb = strlen(b);
    size_t n = la > lb ? la : lb;
    /* volatile keeps the compiler from turning the loop into an early-exit memcmp. */
    volatile unsigned diff = (unsigned)(la ^ lb);
    for (size_t i = 0; i < n; i++) {
        unsigned ca = i < la ? (unsigned char)a[i] : 0;
        unsigned cb = i < lb ? (unsigned char)b[i] : 0;
        diff |= ca ^ cb;
    }
    return diff == 0;
}

/* RFC 6761 section 6.4: "invalid" and names under it never resolve. */
static int reserved_invalid(const char *host)
{
    size_t n = strlen(host);
    while (n > 0 && host[n - 1] == '.') n--;
    if (n == 7 && strncasecmp(host, "invalid", 7) == 0) return 1;
    return n > 8 && strncasecmp(host + n - 8, ".invalid", 8) == 0;
}

/* Why getaddrinfo could not take host, when its form says more than "Name or service not
 * known": brackets, a zone on an address that has no zones, or a zone naming no interface
 * of this host. NULL when none of these. */
static const char *resolve_hint(const char *host, char *buf, size_t cap)
{
    if (host[0] == '[')
        return "write an IPv6 address without brackets (MASTER_ADDR=::1; brackets only in "
               "HOST:PORT forms such as --rdzv-endpoint [::1]:29500)";
    const char *zone = strchr(host, '%');
    if (!strchr(host, ':') || !zone) return NULL;
    char addr[INET6_ADDRSTRLEN + 1];
    struct in6_addr a6;
    size_t n = (size_t)(zone - host);
    if (n >= sizeof(addr)) return NULL;
    memcpy(addr, host, n);
    addr[n] = '\0';
    if (inet_pton(AF_INET6, addr, &a6) != 1) return NULL;
    if (!IN6_IS_ADDR_LINKLOCAL(&a6) && !IN6_IS_ADDR_MC_LINKLOCAL(&a6)) {
        snprintf(buf, cap,
                 "a zone ('%s') belongs only to a link-local address (fe80::/10); write '%s' "
                 "without it",
                 zone, addr);
        return buf;
    }
    if (if_nametoindex(zone + 1) == 0) {
        snprintf(buf, cap,
                 "this host has no interface '%s' (the zone names the interface the address is "
                 "reached through; 'ip -br link' lists them)",
                 zone + 1);
        return buf;
    }
    return NULL;
}

hoop_status hoop__store_resolve(const char *host, int port, int passive, struct addrinfo **res)
{
    *res = NULL;
    int any = host == NULL || *host == '\0';
    if (!passive && any)
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: no host to connect to (MASTER_ADDR is empty)");
    if (port < 0 || port > 65535)
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: port %d is not in 0..65535", port);
    if (!any && reserved_invalid(host))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "store: cannot resolve host '%s' (a reserved .invalid name)", host);
    char serv[16];
    snprintf(serv, sizeof(serv), "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_protocol = IPPROTO_TCP};
    hints.ai_family = any ? AF_INET : AF_UNSPEC;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    int rc = hoop__getaddrinfo(any ? NULL : host, serv, &hints, res);
    if (rc == EAI_AGAIN) {
        *res = NULL;
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "store: cannot resolve host '%s': %s (still after %d s)",
                          any ? "*" : host, gai_strerror(rc), HOOP__RESOLVE_RETRY_MS / 1000);
    }
    if (rc != 0) {
        *res = NULL;
        char buf[200];
        const char *hint = any ? NULL : resolve_hint(host, buf, sizeof(buf));
        if (hint)
            return HOOP_ERROR(HOOP_ERR_INVALID, "store: cannot resolve host '%s': %s", host, hint);
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: cannot resolve host '%s': %s", any ? "*" : host,
                          gai_strerror(rc));
    }
    /* connect() fails a link-local IPv6 address without its scope with EINVAL, on every
     * try: refuse it here rather than retry until the timeout. */
    for (const struct addrinfo *a = *res; !passive && a; a = a->ai_next) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)a->ai_addr;
        if (a->ai_family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr) &&
            in6->sin6_scope_id == 0) {
            freeaddrinfo(*res);
            *res = NULL;
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "store: '%s' is a link-local IPv6 address without its zone: add "
                              "the interface it is reached through (fe80::1%%eth0)",
                              host);
        }
    }
    return HOOP_OK;
}

void hoop__store_addr_str(const struct sockaddr *sa, socklen_t len, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
        hoop__hostport(out, cap, host, port);
    } else if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
        hoop__hostport(out, cap, host, port);
    } else {
        snprintf(out, cap, "(family %d)", sa->sa_family);
    }
}

hoop_status hoop__store_sock_setup(int fd)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags == -1 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) == -1)
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "store: fcntl(O_NONBLOCK) failed: %s",
                          hoop__strerror(errno));
    int one = 1;
    /* Requests are small and answered one at a time: Nagle would only add latency. */
    HOOP_SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)),
                  "store: setsockopt(TCP_NODELAY)");
    return HOOP_OK;
}

int hoop__store_self_connected(int fd)
{
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof(me), pl = sizeof(peer);
    if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0 ||
        getpeername(fd, (struct sockaddr *)&peer, &pl) != 0)
        return 0;
    return ml == pl && memcmp(&me, &peer, ml) == 0;
}

// ----- naming a peer that speaks another protocol ----------------------------------------

static int starts(const uint8_t *p, size_t n, const char *text)
{
    size_t k = strlen(text);
    return n >= k && memcmp(p, text, k) == 0;
}

const char *hoop__store_sniff(const uint8_t *p, size_t n)
{
    static const char *const http[] = {"HTTP/",   "GET ",     "POST ",  "PUT ",     "HEAD ",
                                       "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ", "PRI * HTTP/2"};
    for (size_t i = 0; i < sizeof(http) / sizeof(http[0]); i++)
        if (starts(p, n, http[i])) return "HTTP";
    /* Python's http.server answers a request line it cannot parse with a bare page. */
    if (starts(p, n, "<!DOCTYPE") || starts(p, n, "<html") || starts(p, n, "<HTML")) return "HTTP";
    if (starts(p, n, "SSH-")) return "SSH";
    /* A TLS record: content type 20..23 (handshake 22, alert 21), version 3.x. */
    if (n >= 2 && p[0] >= 20 && p[0] <= 23 && p[1] == 3) return "TLS";
    if (starts(p, n, "HOOP-STORE/")) return "a hoop store protocol of another version";
    /* A version 1 frame: u32 length, then HELLO (1) and "HOOP" for a client, or a
     * status byte and a short body for a server's reply. */
    if (n >= 9 && p[0] == 0 && p[4] == 1 && memcmp(p + 5, "HOOP", 4) == 0)
        return "hoop store protocol 1 (an older hoop)";
    return "unknown bytes";
}

void hoop__store_printable(const uint8_t *p, size_t n, char *out, size_t cap)
{
    size_t used = 0, shown = n < 48 ? n : 48;
    if (cap == 0) return;
    for (size_t i = 0; i < shown && used + 5 < cap; i++) {
        unsigned c = p[i];
        int k;
        if (c == '\r')
            k = snprintf(out + used, cap - used, "\\r");
        else if (c == '\n')
            k = snprintf(out + used, cap - used, "\\n");
        else if (c == '\t')
            k = snprintf(out + used, cap - used, "\\t");
        else if (c == '\\' || c == '"')
            k = snprintf(out + used, cap - used, "\\%c", (char)c);
        else if (c >= 0x20 && c < 0x7f)
            k = snprintf(out + used, cap - used, "%c", (char)c);
        else
            k = snprintf(out + used, cap - used, "\\x%02x", c);
        used += k > 0 ? (size_t)k : 0;
    }
    if (shown < n && used + 4 <= cap) used += (size_t)snprintf(out + used, cap - used, "...");
    out[used < cap ? used : cap - 1] = '\0';
}

void hoop__store_describe(const uint8_t *p, size_t n, char *out, size_t cap)
{
    char shown[200];
    hoop__store_printable(p, n, shown, sizeof(shown));
    const char *what = hoop__store_sniff(p, n);
    if (strcmp(what, "unknown bytes") == 0)
        snprintf(out, cap, "sent bytes of no protocol hoop knows (\"%s\")", shown);
    else
        snprintf(out, cap, "speaks %s (\"%s\")", what, shown);
}

int hoop__store_is_loopback(const struct addrinfo *a)
{
    if (a->ai_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)a->ai_addr;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (a->ai_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)a->ai_addr;
        return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return 0;
}
