/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/launch.c -- rank arithmetic of the launcher: which ids each worker gets, from
 * hooprun's geometry or from an srun step's variables.
 *
 * Owns nothing. Thread-safe (pure functions, and getenv).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/env.h"
#include "core/hostlist.h"
#include "core/launch.h"

/* "--node-rank 3" for a flag, "SLURM_NODEID=3" for a variable. */
static const char *named(char *buf, size_t cap, const char *from, int v)
{
    snprintf(buf, cap, from[0] == '-' ? "%s %d" : "%s=%d", from, v);
    return buf;
}

hoop_status hoop__launch_check_from(int nnodes, const char *nnodes_from, int node_rank,
                                    const char *node_rank_from, int nproc_per_node)
{
    char a[64], b[64];
    if (nnodes < 1 || nnodes > HOOP_LAUNCH_WORLD_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s is out of range [1, %d]",
                          named(a, sizeof(a), nnodes_from, nnodes), HOOP_LAUNCH_WORLD_MAX);
    if (nproc_per_node < 1 || nproc_per_node > HOOP_LAUNCH_WORLD_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "--nproc-per-node %d is out of range [1, %d]",
                          nproc_per_node, HOOP_LAUNCH_WORLD_MAX);
    if (node_rank < 0 || node_rank >= nnodes)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s is not in [0, %d] (%s)",
                          named(a, sizeof(a), node_rank_from, node_rank), nnodes - 1,
                          named(b, sizeof(b), nnodes_from, nnodes));
    if ((long long)nnodes * nproc_per_node > HOOP_LAUNCH_WORLD_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s x --nproc-per-node %d exceeds %d workers",
                          named(a, sizeof(a), nnodes_from, nnodes), nproc_per_node,
                          HOOP_LAUNCH_WORLD_MAX);
    return HOOP_OK;
}

hoop_status hoop__launch_check(int nnodes, int node_rank, int nproc_per_node)
{
    return hoop__launch_check_from(nnodes, "--nnodes", node_rank, "--node-rank", nproc_per_node);
}

hoop_status hoop__launch_ids_of(int nnodes, int node_rank, int nproc_per_node, int local_rank,
                                hoop_launch_ids *out)
{
    HOOP_CHECK(hoop__launch_check(nnodes, node_rank, nproc_per_node));
    if (local_rank < 0 || local_rank >= nproc_per_node)
        return HOOP_ERROR(HOOP_ERR_INVALID, "local rank %d is not in [0, %d]", local_rank,
                          nproc_per_node - 1);
    *out = (hoop_launch_ids){
        .rank = node_rank * nproc_per_node + local_rank,
        .local_rank = local_rank,
        .world_size = nnodes * nproc_per_node,
        .local_world_size = nproc_per_node,
        .node_rank = node_rank,
    };
    return HOOP_OK;
}

int hoop__launch_slurm_port(unsigned long job_id, unsigned long step_id)
{
    return 10000 + (int)(job_id % 1000) * 10 + (int)(step_id % 10);
}

/* The first of names that is set and not empty; NULL when none is. */
static const char *first_set(const char *const *names, const char **value)
{
    for (; *names; names++) {
        const char *v = getenv(*names);
        if (v && *v) {
            *value = v;
            return *names;
        }
    }
    return NULL;
}

static hoop_status slurm_int(const char *name, int64_t min, int64_t max, int64_t *out)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s is not set, though SLURM_STEP_ID is", name);
    return hoop__parse_int(name, v, min, max, out);
}

/* This node's task count: the step's tasks-per-node list, the job's, or the request. */
static hoop_status slurm_local_world(hoop_slurm_task *out)
{
    static const char *const lists[] = {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", NULL};
    static const char *const uniform[] = {"SLURM_NTASKS_PER_NODE", NULL};
    const char *v = NULL;
    int64_t node_id, n;
    if ((out->local_world_from = first_set(lists, &v)) != NULL) {
        HOOP_CHECK(slurm_int("SLURM_NODEID", 0, HOOP_LAUNCH_WORLD_MAX - 1, &node_id));
        return hoop__hostlist_tasks_on_node(out->local_world_from, v, (int)node_id,
                                            &out->local_world_size);
    }
    if ((out->local_world_from = first_set(uniform, &v)) == NULL)
        return HOOP_ERROR(HOOP_ERR_INVALID, "neither SLURM_STEP_TASKS_PER_NODE, "
                                            "SLURM_TASKS_PER_NODE nor SLURM_NTASKS_PER_NODE is "
                                            "set, though SLURM_STEP_ID is");
    HOOP_CHECK(hoop__parse_int(out->local_world_from, v, 1, HOOP_LAUNCH_WORLD_MAX, &n));
    out->local_world_size = (int)n;
    return HOOP_OK;
}

static hoop_status slurm_master(hoop_slurm_task *out)
{
    static const char *const lists[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                        "SLURM_NODELIST", NULL};
    const char *v = NULL;
    char **hosts = NULL;
    int count = 0;
    if ((out->master_from = first_set(lists, &v)) == NULL)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "SLURM_STEP_NODELIST and SLURM_JOB_NODELIST are not set, though "
                          "SLURM_STEP_ID is");
    hoop_status st = hoop__hostlist_expand(v, &hosts, &count);
    if (st != HOOP_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", hoop_last_error());
        return HOOP_ERROR(st, "%s: %s", out->master_from, why);
    }
    if (strlen(hosts[0]) >= sizeof(out->master_addr))
        st = HOOP_ERROR(HOOP_ERR_INVALID, "%s: host name '%.40s...' is too long", out->master_from,
                        hosts[0]);
    else
        snprintf(out->master_addr, sizeof(out->master_addr), "%s", hosts[0]);
    hoop__hostlist_free(hosts, count);
    return st;
}

hoop_status hoop__launch_slurm_task(hoop_slurm_task *out, int *found)
{
    static const char *const worlds[] = {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", NULL};
    const char *step = getenv("SLURM_STEP_ID"), *procid = getenv("SLURM_PROCID"), *v = NULL;
    int64_t rank, world, local, job, step_id;
    *found = 0;
    if (!step || !*step || !procid || !*procid) return HOOP_OK;
    hoop_slurm_task t = {.world_from = NULL};
    HOOP_CHECK(hoop__parse_int("SLURM_STEP_ID", step, 0, INT64_MAX, &step_id));
    HOOP_CHECK(slurm_int("SLURM_JOB_ID", 0, INT64_MAX, &job));
    HOOP_CHECK(hoop__parse_int("SLURM_PROCID", procid, 0, HOOP_LAUNCH_WORLD_MAX - 1, &rank));
    if ((t.world_from = first_set(worlds, &v)) == NULL)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "SLURM_STEP_NUM_TASKS and SLURM_NTASKS are not set, though "
                          "SLURM_STEP_ID is");
    HOOP_CHECK(hoop__parse_int(t.world_from, v, 1, HOOP_LAUNCH_WORLD_MAX, &world));
    HOOP_CHECK(slurm_int("SLURM_LOCALID", 0, HOOP_LAUNCH_WORLD_MAX - 1, &local));
    HOOP_CHECK(slurm_local_world(&t));
    HOOP_CHECK(slurm_master(&t));
    t.rank = (int)rank;
    t.world_size = (int)world;
    t.local_rank = (int)local;
    t.master_port = hoop__launch_slurm_port((unsigned long)job, (unsigned long)step_id);
    snprintf(t.token, sizeof(t.token), "slurm-%lld.%lld", (long long)job, (long long)step_id);
    *out = t;
    *found = 1;
    return HOOP_OK;
}

// ----- host names and addresses ------------------------------------------------------------

#define HOST_TAKES "letters, digits, '-', '_' and '.'; or an IPv4 or IPv6 address"

static hoop_status bad_host(const char *what, const char *host, const char *why)
{
    return HOOP_ERROR(HOOP_ERR_INVALID, "%s '%s' is not a host name or address: %s", what, host,
                      why);
}

/* An IPv6 address, with an optional %zone (an interface name or number). */
static hoop_status check_ipv6(const char *what, const char *host)
{
    char addr[INET6_ADDRSTRLEN + 1];
    struct in6_addr a6;
    const char *zone = strchr(host, '%');
    size_t n = zone ? (size_t)(zone - host) : strlen(host);
    int ok = n < sizeof(addr);
    if (ok) {
        memcpy(addr, host, n);
        addr[n] = '\0';
        ok = inet_pton(AF_INET6, addr, &a6) == 1;
    }
    if (ok && zone)
        ok =
            zone[1] != '\0' && strlen(zone + 1) < IF_NAMESIZE &&
            strspn(zone + 1, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") ==
                strlen(zone + 1);
    if (!ok) return bad_host(what, host, "it has ':' but is no IPv6 address");
    /* connect() refuses a link-local address without its scope (EINVAL): say so now, not
     * after HOOP_TIMEOUT of retries. */
    if (IN6_IS_ADDR_LINKLOCAL(&a6) && !zone)
        return bad_host(what, host,
                        "a link-local address needs its zone, the interface it is reached "
                        "through (fe80::1%eth0)");
    return HOOP_OK;
}

/* One label of a host name: p[0..n). */
static hoop_status check_label(const char *what, const char *host, const char *p, size_t n)
{
    char why[160];
    if (n == 0) return bad_host(what, host, "it has an empty label (a leading dot or '..')");
    if (n > 63) {
        snprintf(why, sizeof(why), "a label has %zu characters, over 63", n);
        return bad_host(what, host, why);
    }
    if (p[0] == '-' || p[n - 1] == '-')
        return bad_host(what, host, "a label starts or ends with '-'");
    return HOOP_OK;
}

char *hoop__hostport(char *out, size_t cap, const char *host, int port)
{
    snprintf(out, cap, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    return out;
}

hoop_status hoop__launch_check_host(const char *what, const char *host)
{
    char why[160];
    size_t len = host ? strlen(host) : 0;
    struct in_addr a4;
    if (len == 0) return bad_host(what, host ? host : "", "it is empty");
    if (len > HOOP_LAUNCH_HOST_MAX + (host[len - 1] == '.')) {
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s '%.32s...' (%zu characters) is not a host name or address: it is "
                          "longer than %d characters",
                          what, host, len, HOOP_LAUNCH_HOST_MAX);
    }
    if (host[0] == '[') return bad_host(what, host, "write an IPv6 address without brackets");
    if (strchr(host, ':')) return check_ipv6(what, host);
    if (strspn(host, "0123456789.") == len && strpbrk(host, "0123456789")) /* only IPv4 */
        return inet_aton(host, &a4) ? HOOP_OK : bad_host(what, host, "it is no IPv4 address");
    for (const char *p = host; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (isalnum(c) || c == '-' || c == '_' || c == '.') continue;
        if (isprint(c))
            snprintf(why, sizeof(why), "'%c' is not allowed in a host name (" HOST_TAKES ")", c);
        else
            snprintf(why, sizeof(why), "byte 0x%02x is not allowed in a host name (" HOST_TAKES ")",
                     c);
        return bad_host(what, host, why);
    }
    size_t end = host[len - 1] == '.' ? len - 1 : len; /* a trailing dot: the root */
    for (size_t i = 0; i <= end;) {
        size_t n = strcspn(host + i, ".");
        if (i + n > end) n = end - i;
        HOOP_CHECK(check_label(what, host, host + i, n));
        i += n + 1;
    }
    return HOOP_OK;
}
