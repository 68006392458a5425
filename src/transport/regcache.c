/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/transport/regcache.c -- the registration cache (see regcache.h).
 *
 * Layout. The cached entries are page-aligned ranges [start, end) that never overlap,
 * kept in an array of pointers sorted by start. Because they are disjoint, sorting by
 * start also sorts by end, so the one entry that can cover [a, b) is the last one with
 * start <= a, found by binary search: O(log n) per lookup. A miss registers the union
 * of its page-aligned range and the entries it overlaps (a contiguous run of the array)
 * and puts the new entry in their place, which keeps the entries disjoint; that moves
 * O(n) pointers, cheap beside the registration it follows (a tree would make inserts
 * O(log n) too, at the price of a pointer chase per level on every lookup and more
 * code; the array is enough for the hundreds of buffers a training job uses).
 *
 * Lists. An entry no get holds (refs == 0) is on the LRU list, least recently used at
 * the head, which is what eviction takes first. An entry that left the array while
 * still held (replaced by a larger one, invalidated, or every entry when caching is
 * off) is on the detached list and is deregistered at its last put; the list lets
 * hoop__regcache_free find it.
 *
 * One thread at a time per cache (the progress thread of its transport context).
 */
#include "transport/regcache.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"

typedef struct rc_entry {
    uintptr_t start, end; /* page-aligned, start < end */
    void *mr;             /* from reg */
    int refs;             /* gets not yet put */
    int cached;           /* in the array (else detached or being built) */
    struct rc_entry *prev, *next;
} rc_entry;

typedef struct rc_list {
    rc_entry *head, *tail;
} rc_list;

struct hoop__regcache {
    int enabled, max_entries;
    hoop__reg_fn reg;
    hoop__dereg_fn dereg;
    void *arg;
    uintptr_t page;  /* bytes, a power of two */
    rc_entry **sort; /* n cached entries, sorted by start; room for cap */
    int n, cap;
    rc_list lru;      /* cached, refs == 0; head = least recently used */
    rc_list detached; /* not cached, refs > 0 */
    uint64_t hits, misses, evictions;
};

// ----------------------------------------------------------------- lists

static void list_push_tail(rc_list *l, rc_entry *e)
{
    e->next = NULL;
    e->prev = l->tail;
    if (l->tail)
        l->tail->next = e;
    else
        l->head = e;
    l->tail = e;
}

static void list_remove(rc_list *l, rc_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        l->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        l->tail = e->prev;
    e->prev = e->next = NULL;
}

// ----------------------------------------------------------------- sorted array

/* How many cached entries start at or below a (the position of the first one above). */
static int count_at_or_below(const hoop__regcache *c, uintptr_t a)
{
    int lo = 0, hi = c->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (c->sort[mid]->start <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The run [*first, *last) of cached entries overlapping [a, b), a < b. Only the entry
 * just before the first start above a can reach over a from the left. */
static void overlap_run(const hoop__regcache *c, uintptr_t a, uintptr_t b, int *first, int *last)
{
    int k = count_at_or_below(c, a) - 1;
    *first = (k >= 0 && c->sort[k]->end > a) ? k : k + 1;
    *last = count_at_or_below(c, b - 1);
}

/* Replaces the run [first, last) of the array by e (NULL: by nothing). The caller has
 * made room for one more entry. */
static void splice(hoop__regcache *c, int first, int last, rc_entry *e)
{
    int keep = e ? 1 : 0;
    memmove(c->sort + first + keep, c->sort + last, (size_t)(c->n - last) * sizeof(*c->sort));
    c->n += keep - (last - first);
    if (e) c->sort[first] = e;
}

// ----------------------------------------------------------------- entries

static void release(hoop__regcache *c, rc_entry *e)
{
    c->dereg(c->arg, e->mr);
    free(e);
}

/* Takes the cached entries [first, last) out of the array: unheld ones are deregistered,
 * held ones are detached until their last put. */
static void drop_run(hoop__regcache *c, int first, int last, rc_entry *replacement)
{
    for (int i = first; i < last; i++) {
        rc_entry *e = c->sort[i];
        e->cached = 0;
        if (e->refs == 0) {
            list_remove(&c->lru, e);
            release(c, e);
        } else {
            list_push_tail(&c->detached, e);
        }
    }
    splice(c, first, last, replacement);
}

/* Evicts the least recently used unheld entry. */
static void evict_lru(hoop__regcache *c)
{
    rc_entry *e = c->lru.head;
    int i = count_at_or_below(c, e->start) - 1;
    drop_run(c, i, i + 1, NULL);
    c->evictions++;
}

static void trim(hoop__regcache *c)
{
    while (c->n > c->max_entries && c->lru.head) evict_lru(c);
}

// ----------------------------------------------------------------- miss

/* Registers [s, e) joined with the cached entries it overlaps into ne (not yet in the
 * array); *first and *last say which run ne replaces. */
static hoop_status register_union(hoop__regcache *c, uintptr_t s, uintptr_t e, rc_entry *ne,
                                  int *first, int *last)
{
    overlap_run(c, s, e, first, last);
    if (*first < *last) {
        if (c->sort[*first]->start < s) s = c->sort[*first]->start;
        if (c->sort[*last - 1]->end > e) e = c->sort[*last - 1]->end;
    }
    ne->start = s;
    ne->end = e;
    return c->reg(c->arg, (void *)s, (size_t)(e - s), &ne->mr);
}

static hoop_status cache_miss(hoop__regcache *c, uintptr_t s, uintptr_t e, rc_entry **out)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        HOOP_CHECK(hoop__realloc(&c->sort, (size_t)cap));
        c->cap = cap;
    }
    rc_entry *ne;
    HOOP_CHECK(hoop__calloc(&ne, 1));
    int first, last;
    hoop_status st = register_union(c, s, e, ne, &first, &last);
    if (st != HOOP_OK && c->lru.head) {
        /* Perhaps the pinned-memory limit, or a stale entry over unmapped memory that
         * the union took in: let go of everything unused and try once more. */
        int n = 0;
        for (; c->lru.head; n++) evict_lru(c);
        HOOP_DEBUGF(
            IB,
            "registration of %zu bytes at %#lx failed (%s); evicted %d unused entries, retrying",
            (size_t)(ne->end - ne->start), (unsigned long)ne->start, hoop_status_str(st), n);
        st = register_union(c, s, e, ne, &first, &last);
    }
    if (st != HOOP_OK) {
        free(ne);
        return st;
    }
    ne->cached = 1;
    ne->refs = 1;
    drop_run(c, first, last, ne);
    trim(c);
    *out = ne;
    return HOOP_OK;
}

/* An entry of its own for [s, e), when caching is off. */
static hoop_status uncached_get(hoop__regcache *c, uintptr_t s, uintptr_t e, rc_entry **out)
{
    rc_entry *ne;
    HOOP_CHECK(hoop__calloc(&ne, 1));
    ne->start = s;
    ne->end = e;
    hoop_status st = c->reg(c->arg, (void *)s, (size_t)(e - s), &ne->mr);
    if (st != HOOP_OK) {
        free(ne);
        return st;
    }
    ne->refs = 1;
    list_push_tail(&c->detached, ne);
    *out = ne;
    return HOOP_OK;
}

// ----------------------------------------------------------------- API

hoop_status hoop__regcache_new(hoop__regcache **out, int enabled, int max_entries, hoop__reg_fn reg,
                               hoop__dereg_fn dereg, void *arg)
{
    if (!out || !reg || !dereg)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__regcache_new: out, reg or dereg is NULL");
    *out = NULL;
    if (max_entries < 1)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "registration cache: max_entries=%d (at least 1 entry is kept)",
                          max_entries);
    hoop__regcache *c;
    HOOP_CHECK(hoop__calloc(&c, 1));
    long page = sysconf(_SC_PAGESIZE);
    *c = (hoop__regcache){.enabled = enabled != 0,
                          .max_entries = max_entries,
                          .reg = reg,
                          .dereg = dereg,
                          .arg = arg,
                          .page = page > 0 ? (uintptr_t)page : 4096};
    *out = c;
    return HOOP_OK;
}

hoop_status hoop__regcache_get(hoop__regcache *c, void *addr, size_t len, void **mr, void **entry)
{
    if (!c || !mr || !entry)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__regcache_get: cache, mr or entry is NULL");
    *mr = *entry = NULL;
    if (len == 0) return HOOP_OK;
    uintptr_t a = (uintptr_t)addr;
    if (!addr || len > UINTPTR_MAX - a || a + len > UINTPTR_MAX - (c->page - 1))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "registration of %zu bytes at %p: not a valid address range", len, addr);
    uintptr_t b = a + len;
    rc_entry *e = NULL;
    if (c->enabled) {
        int k = count_at_or_below(c, a) - 1;
        if (k >= 0 && c->sort[k]->end >= b) e = c->sort[k];
    }
    if (e) {
        if (e->refs++ == 0) list_remove(&c->lru, e);
        c->hits++;
    } else {
        c->misses++;
        uintptr_t s = a & ~(c->page - 1), t = (b + c->page - 1) & ~(c->page - 1);
        HOOP_CHECK(c->enabled ? cache_miss(c, s, t, &e) : uncached_get(c, s, t, &e));
    }
    *mr = e->mr;
    *entry = e;
    return HOOP_OK;
}

void hoop__regcache_put(hoop__regcache *c, void *entry)
{
    rc_entry *e = entry;
    if (!c || !e || e->refs <= 0) return;
    if (--e->refs > 0) return;
    if (!e->cached) {
        list_remove(&c->detached, e);
        release(c, e);
        return;
    }
    list_push_tail(&c->lru, e);
    trim(c);
}

void hoop__regcache_invalidate(hoop__regcache *c, void *addr, size_t len)
{
    if (!c || len == 0) return;
    uintptr_t a = (uintptr_t)addr;
    uintptr_t b = len > UINTPTR_MAX - a ? UINTPTR_MAX : a + len;
    int first, last;
    overlap_run(c, a, b, &first, &last);
    if (first < last) drop_run(c, first, last, NULL);
}

void hoop__regcache_stats(const hoop__regcache *c, uint64_t *hits, uint64_t *misses,
                          uint64_t *evictions)
{
    if (hits) *hits = c ? c->hits : 0;
    if (misses) *misses = c ? c->misses : 0;
    if (evictions) *evictions = c ? c->evictions : 0;
}

void hoop__regcache_free(hoop__regcache *c)
{
    if (!c) return;
    for (int i = 0; i < c->n; i++) release(c, c->sort[i]);
    while (c->detached.head) {
        rc_entry *e = c->detached.head;
        list_remove(&c->detached, e);
        release(c, e);
    }
    free(c->sort);
    free(c);
}
