/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/transport/ib_util.c -- the verbs transport's device-independent helpers: the
 * HOOP_IB_HCA list, the GID choice, GIDs as text and completion messages (see
 * ib_util.h). No state; every function is safe to call from any thread.
 *
 * Facts taken from public sources: the HOOP_IB_HCA syntax is NCCL_IB_HCA's (NCCL's
 * environment documentation); the GID preference (RoCE v2 over v1, IPv4-mapped first,
 * never link-local, an optional address range) is what NCCL_IB_GID_INDEX=-1 and
 * NCCL_IB_ADDR_RANGE document; the GID types and completion statuses are libibverbs'
 * (ibv_query_gid_ex(3), ibv_poll_cq(3)).
 */
#include "transport/ib_util.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

#ifdef HOOP_HAVE_VERBS
#include <infiniband/verbs.h>
_Static_assert((int)HOOP__IB_GID_IB == (int)IBV_GID_TYPE_IB &&
                   (int)HOOP__IB_GID_ROCE_V1 == (int)IBV_GID_TYPE_ROCE_V1 &&
                   (int)HOOP__IB_GID_ROCE_V2 == (int)IBV_GID_TYPE_ROCE_V2,
               "hoop's GID types are verbs' values");
#endif

_Static_assert(HOOP__IB_GID_STR_MAX >= INET6_ADDRSTRLEN, "a GID's text fits");

// ----------------------------------------------------------------- HOOP_IB_HCA

static const char *skip_blank(const char *p)
{
    while (*p && isspace((unsigned char)*p)) p++;
    return p;
}

/* A port number in [p, end): 1-255, digits only; 0 when it is not one. */
static int parse_port(const char *p, const char *end)
{
    if (p == end || end - p > 3) return 0;
    int v = 0;
    for (; p < end; p++) {
        if (!isdigit((unsigned char)*p)) return 0;
        v = v * 10 + (*p - '0');
    }
    return v <= 255 ? v : 0;
}

/* Adds the entry [p, end) of the list text to out. */
static hoop_status parse_entry(const char *text, const char *p, const char *end,
                               hoop__ib_hca_spec *out)
{
    while (p < end && isspace((unsigned char)*p)) p++;
    while (end > p && isspace((unsigned char)end[-1])) end--;
    int len = (int)(end - p);
    if (len == 0)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "HOOP_IB_HCA='%s': entry %d is empty (expected device[:port], e.g. "
                          "mlx5_0:1,mlx5_1)",
                          text, out->n + 1);
    if (out->n == HOOP__IB_HCA_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "HOOP_IB_HCA='%s': more than %d entries ('%.*s' is one too many)", text,
                          HOOP__IB_HCA_MAX, len, p);
    const char *colon = memchr(p, ':', (size_t)len);
    const char *name_end = colon ? colon : end;
    int name_len = (int)(name_end - p);
    if (name_len == 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "HOOP_IB_HCA='%s': entry '%.*s' has no device name",
                          text, len, p);
    if (name_len >= HOOP__IB_HCA_NAME_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "HOOP_IB_HCA='%s': device name '%.*s' is longer than %d bytes", text,
                          name_len, p, HOOP__IB_HCA_NAME_MAX - 1);
    for (const char *q = p; q < name_end; q++)
        if (*q == '^' || *q == '=' || isspace((unsigned char)*q))
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "HOOP_IB_HCA='%s': device name '%.*s' contains '%c' ('^' and '=' "
                              "go once, at the start of the list)",
                              text, name_len, p, *q);
    int port = 0;
    if (colon) {
        port = parse_port(colon + 1, end);
        if (port == 0)
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "HOOP_IB_HCA='%s': entry '%.*s' has a bad port '%.*s' (a port is a "
                              "number 1-255)",
                              text, len, p, (int)(end - colon - 1), colon + 1);
    }
    memcpy(out->dev[out->n].name, p, (size_t)name_len);
    out->dev[out->n].name[name_len] = '\0';
    out->dev[out->n].port = port;
    out->n++;
    return HOOP_OK;
}

hoop_status hoop__ib_hca_parse(const char *text, hoop__ib_hca_spec *out)
{
    if (!out) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__ib_hca_parse: out is NULL");
    memset(out, 0, sizeof(*out));
    if (!text) return HOOP_OK;
    const char *p = skip_blank(text);
    if (!*p) return HOOP_OK;
    if (*p == '^') out->exclude = 1, p++;
    if (*p == '=') out->exact = 1, p++;
    hoop_status st = HOOP_OK;
    if (!*skip_blank(p))
        st = HOOP_ERROR(HOOP_ERR_INVALID, "HOOP_IB_HCA='%s' names no device after '%s'", text,
                        out->exact ? (out->exclude ? "^=" : "=") : "^");
    while (st == HOOP_OK) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        st = parse_entry(text, p, end, out);
        if (!*end) break;
        p = end + 1;
    }
    if (st != HOOP_OK) memset(out, 0, sizeof(*out)); /* never half a list */
    return st;
}

int hoop__ib_hca_match(const hoop__ib_hca_spec *s, const char *dev, int port)
{
    if (!dev) return 0;
    if (!s || s->n == 0) return 1;
    int hit = 0;
    for (int i = 0; i < s->n && !hit; i++) {
        const char *name = s->dev[i].name;
        int name_ok = s->exact ? strcmp(dev, name) == 0 : strncmp(dev, name, strlen(name)) == 0;
        hit = name_ok && (s->dev[i].port == 0 || s->dev[i].port == port);
    }
    return s->exclude ? !hit : hit;
}

// ----------------------------------------------------------------- GIDs

static int gid_empty(const uint8_t raw[16])
{
    for (int i = 0; i < 16; i++)
        if (raw[i]) return 0;
    return 1;
}

/* ::ffff:a.b.c.d */
static int gid_v4mapped(const uint8_t raw[16])
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(raw, prefix, sizeof(prefix)) == 0;
}

/* fe80::/10 */
static int gid_link_local(const uint8_t raw[16])
{
    return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80;
}

const char *hoop__ib_gid_str(const uint8_t raw[16], char *buf, size_t cap)
{
    char tmp[HOOP__IB_GID_STR_MAX];
    if (!buf || cap == 0) return buf;
    const char *s = NULL;
    if (raw && gid_v4mapped(raw))
        s = inet_ntop(AF_INET, raw + 12, tmp, sizeof(tmp));
    else if (raw)
        s = inet_ntop(AF_INET6, raw, tmp, sizeof(tmp));
    snprintf(buf, cap, "%s", s ? s : "?");
    return buf;
}

const char *hoop__ib_gid_type_str(int type)
{
    switch (type) {
    case HOOP__IB_GID_IB: return "IB";
    case HOOP__IB_GID_ROCE_V1: return "v1";
    case HOOP__IB_GID_ROCE_V2: return "v2";
    default: return "type?";
    }
}

/* HOOP_IB_ADDR_RANGE parsed: the network as a GID (IPv4 ranges as ::ffff:a.b.c.d) and
 * the number of leading bits that must match. */
typedef struct addr_range {
    int v4;
    uint8_t net[16];
    int bits;
} addr_range;

static hoop_status range_bad(const char *text)
{
    return HOOP_ERROR(HOOP_ERR_INVALID,
                      "HOOP_IB_ADDR_RANGE='%s' is not an address range in CIDR notation (e.g. "
                      "10.0.0.0/8 or fd00::/8)",
                      text);
}

static hoop_status range_parse(const char *text, addr_range *r)
{
    char addr[HOOP__IB_GID_STR_MAX];
    const char *slash = strchr(text, '/');
    if (!slash || slash == text || (size_t)(slash - text) >= sizeof(addr)) return range_bad(text);
    memcpy(addr, text, (size_t)(slash - text));
    addr[slash - text] = '\0';
    const char *b = slash + 1;
    if (!*b || strlen(b) > 3) return range_bad(text);
    int bits = 0;
    for (; *b; b++) {
        if (!isdigit((unsigned char)*b)) return range_bad(text);
        bits = bits * 10 + (*b - '0');
    }
    *r = (addr_range){0};
    if (inet_pton(AF_INET, addr, r->net + 12) == 1) {
        if (bits > 32) return range_bad(text);
        r->v4 = 1;
        r->net[10] = r->net[11] = 0xff;
        r->bits = 96 + bits;
    } else if (inet_pton(AF_INET6, addr, r->net) == 1) {
        if (bits > 128) return range_bad(text);
        r->bits = bits;
    } else {
        return range_bad(text);
    }
    return HOOP_OK;
}

int hoop__ib_port_pick(const int *link_eth, int n, int filtered, int want, int *ib_only)
{
    int ib = 0;
    *ib_only = 0;
    if (n < 1 || want < 0) return -1;
    for (int i = 0; i < n; i++) ib += !link_eth[i];
    *ib_only = !filtered && ib > 0 && ib < n;
    int kept = *ib_only ? ib : n, k = want % kept;
    for (int i = 0; i < n; i++) {
        if (*ib_only && link_eth[i]) continue;
        if (k-- == 0) return i;
    }
    return -1; /* not reached */
}

hoop_status hoop__ib_addr_range_check(const char *text)
{
    addr_range r;
    return text && *text ? range_parse(text, &r) : HOOP_OK;
}

static int range_has(const addr_range *r, const uint8_t raw[16])
{
    if (r->v4 != gid_v4mapped(raw)) return 0;
    int full = r->bits / 8, rest = r->bits % 8;
    if (memcmp(raw, r->net, (size_t)full) != 0) return 0;
    if (rest == 0) return 1;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (raw[full] & mask) == (r->net[full] & mask);
}

/* The class of a RoCE GID, 0 best: v2 IPv4-mapped, v2 IPv6, v1 IPv4-mapped, v1 IPv6;
 * -1 when it cannot be chosen (empty, link-local, outside the range, unknown type). */
static int roce_class(const hoop__ib_gid *g, const addr_range *r)
{
    if (gid_empty(g->raw) || gid_link_local(g->raw)) return -1;
    if (r && !range_has(r, g->raw)) return -1;
    int v1 = g->type == HOOP__IB_GID_ROCE_V1 || g->type == HOOP__IB_GID_IB;
    if (!v1 && g->type != HOOP__IB_GID_ROCE_V2) return -1;
    return (v1 ? 2 : 0) + (gid_v4mapped(g->raw) ? 0 : 1);
}

/* "0 fe80::1 v1, 1 10.0.0.1 v2" for the non-empty entries of tab, or "no GID", cut
 * short (", ... N more") to fit cap. */
static void gid_list(const hoop__ib_gid *tab, int n, char *buf, size_t cap)
{
    size_t used = 0;
    int shown = 0, total = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (gid_empty(tab[i].raw)) continue;
        total++;
        char a[HOOP__IB_GID_STR_MAX], item[96];
        int len = snprintf(item, sizeof(item), "%s%d %s %s", shown ? ", " : "", i,
                           hoop__ib_gid_str(tab[i].raw, a, sizeof(a)),
                           hoop__ib_gid_type_str(tab[i].type));
        /* Once one entry did not fit, the rest are only counted. */
        if (total != shown + 1 || used + (size_t)len + 24 > cap) continue;
        memcpy(buf + used, item, (size_t)len + 1);
        used += (size_t)len;
        shown++;
    }
    if (total == 0)
        snprintf(buf, cap, "no GID");
    else if (shown < total)
        snprintf(buf + used, cap - used, ", ... %d more", total - shown);
}

/* The index the caller asked for by HOOP_IB_GID_INDEX, checked against the table. */
static hoop_status pick_wanted(const hoop__ib_gid *tab, int n, int want, const char *dev, int port,
                               int *index)
{
    char found[640];
    if (want < n && !gid_empty(tab[want].raw)) {
        *index = want;
        return HOOP_OK;
    }
    gid_list(tab, n, found, sizeof(found));
    if (want >= n)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "HOOP_IB_GID_INDEX=%d is out of range: %s port %d has %d GID entries "
                          "(found: %s)",
                          want, dev, port, n, found);
    return HOOP_ERROR(HOOP_ERR_INVALID,
                      "HOOP_IB_GID_INDEX=%d: %s port %d has no GID at index %d (found: %s)", want,
                      dev, port, want, found);
}

hoop_status hoop__ib_gid_pick(const hoop__ib_gid *tab, int n, int link_eth, int want,
                              const char *addr_range_text, const char *dev, int port, int *index)
{
    if (!dev) dev = "?";
    if (!index || n < 0 || (!tab && n > 0))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s port %d: GID table of %d entries at %p, index at %p", dev, port, n,
                          (const void *)tab, (void *)index);
    if (want < -1)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "HOOP_IB_GID_INDEX=%d is not a GID index (-1 = automatic, or an index "
                          ">= 0)",
                          want);
    addr_range range, *r = NULL;
    if (addr_range_text && *addr_range_text) {
        HOOP_CHECK(range_parse(addr_range_text, &range));
        r = &range;
    }
    if (want >= 0) return pick_wanted(tab, n, want, dev, port, index);
    if (!link_eth) {
        *index = 0;
        return HOOP_OK;
    }
    int best = -1, best_class = 4;
    for (int i = 0; i < n; i++) {
        int c = roce_class(&tab[i], r);
        if (c >= 0 && c < best_class) best = i, best_class = c;
    }
    if (best >= 0) {
        *index = best;
        return HOOP_OK;
    }
    char found[640];
    gid_list(tab, n, found, sizeof(found));
    return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                      "%s port %d: no RoCE v2 or v1 GID with a global address%s%s (found: %s); "
                      "link-local fe80::/10 addresses are never chosen, HOOP_IB_GID_INDEX=N "
                      "forces one",
                      dev, port, r ? " in " : "", r ? addr_range_text : "", found);
}

// ----------------------------------------------------------------- completions

#ifdef HOOP_HAVE_VERBS
const char *hoop__ib_wc_message(int status, int peer, char *buf, size_t cap)
{
    char who[32], hint[192] = "";
    if (!buf || cap == 0) return buf;
    if (peer >= 0)
        snprintf(who, sizeof(who), "rank %d", peer);
    else
        snprintf(who, sizeof(who), "the peer");
    switch (status) {
    case IBV_WC_RETRY_EXC_ERR:
        snprintf(hint, sizeof(hint),
                 "no ACK from %s: check HOOP_IB_GID_INDEX, routing, or whether the peer died", who);
        break;
    case IBV_WC_RNR_RETRY_EXC_ERR:
        snprintf(hint, sizeof(hint),
                 "%s had no receive posted (receiver not ready): a bug in hoop, please report it",
                 who);
        break;
    case IBV_WC_REM_ACCESS_ERR:
        snprintf(hint, sizeof(hint),
                 "%s refused access to its memory: a registration bug in hoop, or memory freed "
                 "while in use",
                 who);
        break;
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
        snprintf(hint, sizeof(hint),
                 "a local buffer is not covered by its registration: a bug in hoop, or memory "
                 "freed while in use");
        break;
    case IBV_WC_REM_OP_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
        snprintf(hint, sizeof(hint),
                 "%s could not carry out the request: see that rank's own error; otherwise a bug "
                 "in hoop",
                 who);
        break;
    case IBV_WC_LOC_LEN_ERR:
        snprintf(hint, sizeof(hint),
                 "a message was longer than the receive posted for it: a bug in hoop");
        break;
    case IBV_WC_WR_FLUSH_ERR:
        snprintf(hint, sizeof(hint), "flushed after an earlier error on the link to %s", who);
        break;
    default: break;
    }
    snprintf(buf, cap, "%s (status %d)%s%s", ibv_wc_status_str((enum ibv_wc_status)status), status,
             hint[0] ? ": " : "", hint);
    return buf;
}

int hoop__ib_wc_is_flush(int status)
{
    return status == IBV_WC_WR_FLUSH_ERR;
}
#endif

int hoop__ib_credits_merge(hoop__ib_credits *c, uint64_t freed, int bits)
{
    uint64_t next = freed;
    if (bits < 64) {
        const uint64_t span = (uint64_t)1 << bits, mask = span - 1;
        uint64_t delta = (freed - c->credited) & mask;
        if (delta >= span / 2) return 0; /* behind what we know: an older count */
        next = c->credited + delta;
    }
    if (next <= c->credited) return 0;
    if (next > c->used) return -1;
    c->credited = next;
    return 0;
}
