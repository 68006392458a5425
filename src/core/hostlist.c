/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/hostlist.c -- Slurm node-list expansion ("node[01-04],login1" -> host names).
 *
 * Written from Slurm's documented hostlist syntax and checked against what
 * `scontrol show hostnames` (Slurm 22.05) prints; tests/check_hostlist.c freezes those
 * outputs. Owns only the arrays it returns. Thread-safe (no shared state).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/hostlist.h"

#define NAME_MAX_LEN 1024 /* longest host name we build, bytes with the NUL */
#define GROUPS_MAX 16     /* bracket groups in one token */
#define RANGES_MAX 4096   /* comma-separated ranges in one group */

typedef struct range {
    unsigned long lo, hi;
    int width; /* digits of lo as written: the zero-padding width */
} range;

typedef struct group {
    const char *text; /* literal text before this group's '[' (not NUL-terminated) */
    size_t text_len;
    range *ranges;
    int nranges;
} group;

typedef struct expander {
    const char *list; /* the whole list, for messages */
    char **hosts;
    int count, cap;
    /* The token being expanded: groups, the order they vary in, the current values. */
    group groups[GROUPS_MAX];
    int ngroups;
    int order[GROUPS_MAX];
    unsigned long value[GROUPS_MAX];
    int width[GROUPS_MAX];
} expander;

static hoop_status bad(const expander *ex, const char *why)
{
    return HOOP_ERROR(HOOP_ERR_INVALID, "node list '%s' is malformed: %s", ex->list, why);
}

static hoop_status push_host(expander *ex, const char *name)
{
    if (ex->count >= HOOP_HOSTLIST_MAX) return bad(ex, "more than 65536 hosts");
    if (ex->count == ex->cap) {
        int cap = ex->cap ? ex->cap * 2 : 16;
        HOOP_CHECK(hoop__realloc(&ex->hosts, (size_t)cap));
        ex->cap = cap;
    }
    char *copy = strdup(name);
    if (copy == NULL) return HOOP_ERROR(HOOP_ERR_NOMEM, "strdup of a host name failed");
    ex->hosts[ex->count++] = copy;
    return HOOP_OK;
}

/* Parses "N" or "N-M" (decimal digits only, N <= M) of length len at s. */
static hoop_status parse_range(expander *ex, const char *s, size_t len, range *r)
{
    size_t dash = 0;
    while (dash < len && s[dash] != '-') dash++;
    if (dash == 0 || dash == len - 1) return bad(ex, "a range lacks a number");
    for (size_t i = 0; i < len; i++)
        if (i != dash && !isdigit((unsigned char)s[i]))
            return bad(ex, "a range holds something other than digits and one '-'");
    if (dash > 9 || (dash < len && len - dash - 1 > 9)) return bad(ex, "a number is too long");
    r->lo = strtoul(s, NULL, 10);
    r->hi = dash < len ? strtoul(s + dash + 1, NULL, 10) : r->lo;
    r->width = (int)dash;
    if (r->lo > r->hi) return bad(ex, "a range is reversed (lo > hi)");
    if (r->hi - r->lo >= HOOP_HOSTLIST_MAX) return bad(ex, "a range has more than 65536 hosts");
    return HOOP_OK;
}

/* Parses the inside of one bracket group ("1,3-4") into g->ranges. */
static hoop_status parse_group(expander *ex, const char *s, size_t len, group *g)
{
    if (len == 0) return bad(ex, "empty brackets");
    int n = 1;
    for (size_t i = 0; i < len; i++) n += s[i] == ',';
    if (n > RANGES_MAX) return bad(ex, "too many ranges in one bracket group");
    HOOP_CHECK(hoop__calloc(&g->ranges, (size_t)n));
    g->nranges = n;
    size_t start = 0;
    for (int k = 0; k < n; k++) {
        size_t end = start;
        while (end < len && s[end] != ',') end++;
        HOOP_CHECK(parse_range(ex, s + start, end - start, &g->ranges[k]));
        start = end + 1;
    }
    return HOOP_OK;
}

static unsigned long group_size(const group *g)
{
    unsigned long n = 0;
    for (int k = 0; k < g->nranges; k++) n += g->ranges[k].hi - g->ranges[k].lo + 1;
    return n;
}

/* Writes the host name for the current values into buf. */
static hoop_status format_name(expander *ex, const char *tail, size_t tail_len, char *buf)
{
    size_t used = 0;
    for (int i = 0; i <= ex->ngroups; i++) {
        const char *t = i < ex->ngroups ? ex->groups[i].text : tail;
        size_t tl = i < ex->ngroups ? ex->groups[i].text_len : tail_len;
        if (used + tl + 1 > NAME_MAX_LEN) return bad(ex, "a host name is too long");
        memcpy(buf + used, t, tl);
        used += tl;
        if (i == ex->ngroups) break;
        int n = snprintf(buf + used, NAME_MAX_LEN - used, "%0*lu", ex->width[i], ex->value[i]);
        if (n < 0 || used + (size_t)n + 1 > NAME_MAX_LEN) return bad(ex, "a host name is too long");
        used += (size_t)n;
    }
    buf[used] = '\0';
    return HOOP_OK;
}

/* Enumerates the groups in ex->order (outermost first), emitting one host per leaf. */
static hoop_status enumerate(expander *ex, int level, const char *tail, size_t tail_len)
{
    if (level == ex->ngroups) {
        char name[NAME_MAX_LEN];
        HOOP_CHECK(format_name(ex, tail, tail_len, name));
        return push_host(ex, name);
    }
    int gi = ex->order[level];
    const group *g = &ex->groups[gi];
    for (int k = 0; k < g->nranges; k++) {
        for (unsigned long v = g->ranges[k].lo; v <= g->ranges[k].hi; v++) {
            ex->value[gi] = v;
            ex->width[gi] = g->ranges[k].width;
            HOOP_CHECK(enumerate(ex, level + 1, tail, tail_len));
        }
    }
    return HOOP_OK;
}

/* Splits a token into literal texts and bracket groups. Brackets were checked to be
 * balanced and flat by the caller. Returns the text after the last group in *tail. */
static hoop_status split_token(expander *ex, const char *tok, size_t len, const char **tail,
                               size_t *tail_len)
{
    size_t pos = 0;
    for (;;) {
        const char *open = memchr(tok + pos, '[', len - pos);
        if (open == NULL) break;
        if (ex->ngroups == GROUPS_MAX) return bad(ex, "too many bracket groups in one name");
        const char *close = memchr(open, ']', len - (size_t)(open - tok));
        group *g = &ex->groups[ex->ngroups++];
        g->text = tok + pos;
        g->text_len = (size_t)(open - (tok + pos));
        HOOP_CHECK(parse_group(ex, open + 1, (size_t)(close - open - 1), g));
        pos = (size_t)(close - tok) + 1;
    }
    *tail = tok + pos;
    *tail_len = len - pos;
    if (ex->ngroups > 0 && *tail_len > 0)
        return bad(ex, "text follows the last bracket group (Slurm rejects this too)");
    return HOOP_OK;
}

static void clear_groups(expander *ex)
{
    for (int i = 0; i < ex->ngroups; i++) free(ex->groups[i].ranges);
    memset(ex->groups, 0, sizeof(ex->groups));
    ex->ngroups = 0;
}

/* Expands one token. Slurm peels the last group off first (it varies fastest), then
 * expands the remaining prefix from its last group inwards, which makes g(k-1) the
 * outermost loop and g1 the innermost before gk. */
static hoop_status expand_token(expander *ex, const char *tok, size_t len)
{
    const char *tail = NULL;
    size_t tail_len = 0;
    hoop_status st;
    HOOP_CHECK_GOTO(split_token(ex, tok, len, &tail, &tail_len), st, out);
    int k = ex->ngroups;
    unsigned long total = 1;
    for (int i = 0; i < k; i++) {
        total *= group_size(&ex->groups[i]);
        if (total > HOOP_HOSTLIST_MAX) {
            st = bad(ex, "more than 65536 hosts");
            goto out;
        }
    }
    for (int level = 0; level < k - 1; level++) ex->order[level] = k - 2 - level;
    if (k > 0) ex->order[k - 1] = k - 1;
    HOOP_CHECK_GOTO(enumerate(ex, 0, tail, tail_len), st, out);
out:
    clear_groups(ex);
    return st;
}

/* Walks the list, checking brackets and cutting tokens at separators outside them. */
static hoop_status expand_all(expander *ex)
{
    const char *s = ex->list;
    size_t start = 0, i = 0;
    int depth = 0;
    for (;; i++) {
        char c = s[i];
        if (c == '[') {
            if (depth) return bad(ex, "nested '['");
            depth = 1;
        } else if (c == ']') {
            if (!depth) return bad(ex, "']' without '['");
            depth = 0;
        } else if (c == '\0' || (!depth && (c == ',' || c == ' ' || c == '\t'))) {
            if (c == '\0' && depth) return bad(ex, "'[' without ']'");
            if (i > start) HOOP_CHECK(expand_token(ex, s + start, i - start));
            start = i + 1;
            if (c == '\0') break;
        }
    }
    if (ex->count == 0) return bad(ex, "no host in it");
    return HOOP_OK;
}

hoop_status hoop__hostlist_expand(const char *list, char ***hosts, int *count)
{
    *hosts = NULL;
    *count = 0;
    if (list == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "node list is NULL");
    expander ex = {.list = list};
    hoop_status st = expand_all(&ex);
    if (st != HOOP_OK) {
        hoop__hostlist_free(ex.hosts, ex.count);
        return st;
    }
    *hosts = ex.hosts;
    *count = ex.count;
    return HOOP_OK;
}

/* Reads a decimal count >= 1 at *p, advancing it; -1 when there is none or it is huge. */
static long tasks_count(const char **p)
{
    long v = 0;
    if (**p < '0' || **p > '9') return -1;
    while (**p >= '0' && **p <= '9') {
        v = v * 10 + (**p - '0');
        if (v > HOOP_HOSTLIST_MAX * 64L) return -1;
        (*p)++;
    }
    return v >= 1 ? v : -1;
}

hoop_status hoop__hostlist_tasks_on_node(const char *what, const char *spec, int node_id, int *out)
{
    const char *p = spec ? spec : "";
    long node = 0, found = -1;
    if (node_id < 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: node index %d is negative", what, node_id);
    for (;;) { /* the whole list is checked, not only up to node_id */
        long tasks = tasks_count(&p), repeat = 1;
        if (tasks > 0 && p[0] == '(' && p[1] == 'x') {
            p += 2;
            repeat = tasks_count(&p);
            if (repeat < 1 || *p++ != ')') tasks = -1;
        }
        if (tasks < 1 || (*p != ',' && *p != '\0'))
            return HOOP_ERROR(HOOP_ERR_INVALID, "%s='%s' is not a tasks-per-node list like 2(x3),1",
                              what, spec ? spec : "");
        if (found < 0 && node_id < node + repeat) found = tasks;
        node += repeat;
        if (*p == '\0') break;
        p++;
    }
    if (found < 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s='%s' lists %ld nodes; node %d is not among them",
                          what, spec, node, node_id);
    *out = (int)found;
    return HOOP_OK;
}

void hoop__hostlist_free(char **hosts, int count)
{
    if (hosts == NULL) return;
    for (int i = 0; i < count; i++) free(hosts[i]);
    free(hosts);
}
