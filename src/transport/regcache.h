/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/transport/regcache.h -- a memory registration cache (internal).
 *
 * Registering memory with an RDMA device pins its pages and costs tens of microseconds
 * or more, so a transport keeps the registrations of user buffers for reuse. The cache
 * is keyed by address range: a request for [addr, addr + len) hits any cached entry
 * that covers it, so the chunks of a buffer a collective sends one after another share
 * one registration. The cache knows nothing of verbs: the transport passes a
 * registration function and its inverse (ib.c wraps ibv_reg_mr / ibv_dereg_mr), and
 * the host test passes fakes.
 *
 * Thread-safety: none inside. A cache belongs to one transport context and is used by
 * one thread at a time (the progress thread of that context).
 *
 * Staleness: the cache cannot see the program free memory and map other memory at the
 * same address, after which a cached entry would name the old pages. The transport
 * calls hoop__regcache_invalidate where it is told of a release (its forget): the
 * communicator forgets each call's user buffers when the call ends (HOOP_IB_REG_CACHE=1,
 * the default; the buffer's chunks still share one registration), memory hoop allocated
 * when it frees it, and nothing else under HOOP_IB_REG_CACHE=2, for programs that never
 * free a buffer behind hoop's back. HOOP_IB_REG_CACHE=0 (enabled = 0) keeps nothing.
 */
#ifndef HOOP_TRANSPORT_REGCACHE_H
#define HOOP_TRANSPORT_REGCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/status.h"

HOOP_EXTERN_C_BEGIN

/* Registers [addr, addr + len) and sets *mr to the transport's handle for it; on failure
 * sets the thread's error message (HOOP_ERROR) and returns its status, e.g.
 * HOOP_ERR_NOMEM when the pinned-memory limit is reached. */
typedef hoop_status (*hoop__reg_fn)(void *arg, void *addr, size_t len, void **mr);
/* Releases a handle reg returned. */
typedef void (*hoop__dereg_fn)(void *arg, void *mr);

typedef struct hoop__regcache hoop__regcache;

/* A new cache in *out. enabled = 0: nothing is kept, every get registers and every put
 * deregisters (HOOP_IB_REG_CACHE=0). max_entries (>= 1): entries not held by a get are
 * evicted, least recently used first, while the cache has more than that many (held
 * entries are never evicted, so it can exceed the bound by those). reg and dereg are
 * called with arg. Errors: HOOP_ERR_INVALID (out, reg or dereg NULL, max_entries < 1),
 * HOOP_ERR_NOMEM. */
hoop_status hoop__regcache_new(hoop__regcache **out, int enabled, int max_entries, hoop__reg_fn reg,
                               hoop__dereg_fn dereg, void *arg);

/* An mr covering [addr, addr + len) in *mr and the entry holding it in *entry, held
 * until hoop__regcache_put(c, *entry). A cached entry covering the range is a hit.
 * Otherwise (a miss) the page-aligned range is registered, together with every cached
 * entry it overlaps, which the new entry replaces (so cached entries never overlap and
 * the chunks of one buffer grow one registration); a replaced entry still held stays
 * valid until its put. If registration fails while the cache has unheld entries, they
 * are all evicted and the registration (of the range and the held entries it overlaps)
 * is tried once more; a failure that remains returns reg's status and message. len 0: *mr = *entry
 * = NULL, no registration, HOOP_OK. Lookup is O(log n) in the number of entries (binary search of
 * an array sorted by address); a miss also moves O(n) pointers. Errors:
 * HOOP_ERR_INVALID (c, mr or entry NULL; addr NULL with len > 0; the range wraps the
 * address space), HOOP_ERR_NOMEM, or reg's error. */
hoop_status hoop__regcache_get(hoop__regcache *c, void *addr, size_t len, void **mr, void **entry);

/* Releases a hold from hoop__regcache_get (NULL: nothing). An entry no longer held
 * becomes the most recently used of the evictable ones (or is deregistered now when
 * caching is off, or when it was invalidated or replaced while held). */
void hoop__regcache_put(hoop__regcache *c, void *entry);

/* Drops every cached entry overlapping [addr, addr + len): unheld ones are deregistered
 * now, held ones leave the cache and are deregistered at their last put. */
void hoop__regcache_invalidate(hoop__regcache *c, void *addr, size_t len);

/* Counters since creation: gets that hit, gets that found no entry and registered
 * (whether the registration succeeded or not; len 0 counts as neither), and entries evicted (for
 * max_entries or to retry a failed registration; entries replaced by a larger one, invalidated or
 * freed are not evictions). Any pointer may be NULL. */
void hoop__regcache_stats(const hoop__regcache *c, uint64_t *hits, uint64_t *misses,
                          uint64_t *evictions);

/* Deregisters every entry, held or not, and frees c (NULL: nothing). Entries still
 * held must not be put afterwards. */
void hoop__regcache_free(hoop__regcache *c);

HOOP_EXTERN_C_END

#endif /* HOOP_TRANSPORT_REGCACHE_H */
