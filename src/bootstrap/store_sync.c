/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/bootstrap/store_sync.c -- barrier, all-gather and env:// start-up, built on the
 * store's primitives (add, set, wait, delete).
 *
 * Keys used (name is the caller's barrier / all-gather name, g its generation):
 *   hoop/<kind>/<name>/n          counter of entries; entry v belongs to g = (v-1)/world_size
 *   hoop/<kind>/<name>/<g>/r<R>   rank R arrived (barrier: "1"; all-gather: R's blob)
 *   hoop/barrier/<name>/<g>/done  set by the last rank to arrive
 *   hoop/<kind>/<name>/<g>/left   counter of ranks done with g; the last deletes g's keys
 * A waiting rank parks on the server (no polling); at its deadline it asks which
 * arrival keys are missing and names those ranks in its HOOP_ERR_TIMEOUT message.
 * A failure is noted on the handle, so that rank 0's store, when destroyed, tells the
 * ranks still waiting why rank 0 gave up (and when rank 0's store itself gave up because
 * it refused a misconfigured rank, rank 0's own message names that rank and why); a rank whose
 * store goes away while it waits says so with what it knew (how many ranks had arrived when it did,
 * how long it waited, and the ranks rank 0 reported missing).
 *
 * Owns nothing between calls. Thread-safety: that of the hoop_store handle used.
 */
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/store_proto.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/fault.h"
#include "core/fdlimit.h"
#include "core/launch.h"

/* Longest barrier / all-gather name: leaves room for the prefix and suffixes. */
#define NAME_MAX_BYTES (HOOP_STORE_KEY_MAX - 80)
#define RANK_LIST_MAX 32 /* ranks named in a timeout message before "..." */

/* world_size keys "<prefix>/r<R>" plus room for extra ones, in one allocation. */
typedef struct keyset {
    const char **keys;
    char *text;
    int n;
} keyset;

static void keyset_free(keyset *ks)
{
    free(ks->keys);
    free(ks->text);
    *ks = (keyset){0};
}

/* Builds prefix/r<R> for R in ranks[0..ws) (ranks NULL: R = 0 .. ws-1), then the extra
 * suffixes (e.g. "done"). */
static hoop_status keyset_init(keyset *ks, const char *prefix, const int *ranks, int ws,
                               const char *const *extra, int nextra)
{
    *ks = (keyset){0};
    size_t each = strlen(prefix) + 24;
    HOOP_CHECK(hoop__calloc(&ks->keys, (size_t)ws + (size_t)nextra));
    hoop_status s = hoop__calloc(&ks->text, ((size_t)ws + (size_t)nextra) * each);
    if (s != HOOP_OK) {
        keyset_free(ks);
        return s;
    }
    for (int i = 0; i < ws + nextra; i++) {
        char *k = ks->text + (size_t)i * each;
        if (i < ws)
            snprintf(k, each, "%s/r%d", prefix, ranks ? ranks[i] : i);
        else
            snprintf(k, each, "%s/%s", prefix, extra[i - ws]);
        ks->keys[i] = k;
    }
    ks->n = ws + nextra;
    return HOOP_OK;
}

static hoop_status check_group(const hoop_store *st, const char *what, const char *name)
{
    if (st == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "store: %s: handle is NULL", what);
    int ws = hoop_store_world_size(st), rank = hoop_store_rank(st);
    if (ws <= 0 || rank < 0 || rank >= ws)
        return HOOP_ERROR(HOOP_ERR_USAGE,
                          "store: %s needs this client's rank and world_size (got rank %d, "
                          "world_size %d)",
                          what, rank, ws);
    if (name == NULL || *name == '\0' || strlen(name) > NAME_MAX_BYTES)
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: %s name must have 1..%d bytes", what,
                          NAME_MAX_BYTES);
    return HOOP_OK;
}

/* Counts this rank into the next generation of kind/name; writes its key prefix. */
static hoop_status enter(hoop_store *st, const char *kind, const char *name, char *prefix,
                         size_t cap, int64_t *entry)
{
    char key[HOOP_STORE_KEY_MAX + 32];
    snprintf(key, sizeof(key), "hoop/%s/%s/n", kind, name);
    HOOP_CHECK(hoop_store_add(st, key, 1, entry));
    int64_t g = (*entry - 1) / hoop_store_world_size(st);
    snprintf(prefix, cap, "hoop/%s/%s/%" PRId64, kind, name, g);
    return HOOP_OK;
}

/* How long rank 0 waits for the ranks to read a sync's result before it says so. */
#define READERS_QUIET_MS 10000

/* Marks this rank done with a generation; the last one deletes its keys. Rank 0, whose
 * process serves an env:// job's store, then waits until every rank is done too (the
 * last one sets "<prefix>/gone"; until deadline_ns, or a rank lost): a rank 0 that
 * returned first and destroyed its store at once (hoop_comm_init's last step is such an
 * all-gather, and a program may destroy its comm right after) left a rank that had not
 * read the result yet to fail with "rank 0 is shutting its store down". The sync itself
 * has succeeded for rank 0: a wait that ends otherwise is not its failure. */
static hoop_status leave(hoop_store *st, const char *prefix, const char *const *extra, int nextra,
                         int64_t deadline_ns)
{
    char key[HOOP_STORE_KEY_MAX + 32], gone[HOOP_STORE_KEY_MAX + 32];
    snprintf(key, sizeof(key), "%s/left", prefix);
    snprintf(gone, sizeof(gone), "%s/gone", prefix);
    int64_t left;
    int ws = hoop_store_world_size(st), rank = hoop_store_rank(st);
    HOOP_CHECK(hoop_store_add(st, key, 1, &left));
    if (left != ws) {
        if (rank != 0) return HOOP_OK;
        const char *wait = gone;
        char before[1024]; /* the sync succeeded: no failure of this wait stays behind */
        snprintf(before, sizeof(before), "%s", hoop_last_error());
        hoop__store_wait_result res;
        int64_t first = hoop__ms_left(deadline_ns);
        first = first > READERS_QUIET_MS ? READERS_QUIET_MS : first;
        hoop_status s = hoop__store_wait_keys(st, &wait, 1, HOOP__STORE_WAIT_LOST, first, &res);
        hoop__store_wait_result_free(&res);
        if (s == HOOP_ERR_TIMEOUT && hoop__ms_left(deadline_ns) > 0) { /* a rank stopped? */
            HOOP_WARN("store %s: rank 0 has waited %d ms for %d rank(s) to read the result "
                      "(stopped, or starved of CPU?); waiting up to %lld ms more",
                      prefix, READERS_QUIET_MS, ws - (int)left,
                      (long long)hoop__ms_left(deadline_ns));
            s = hoop__store_wait_keys(st, &wait, 1, HOOP__STORE_WAIT_LOST,
                                      hoop__ms_left(deadline_ns), &res);
            hoop__store_wait_result_free(&res);
        }
        if (s == HOOP_OK) s = hoop__store_delete_keys(st, &wait, 1, NULL);
        hoop__error_restore(before);
        return HOOP_OK;
    }
    keyset ks;
    HOOP_CHECK(keyset_init(&ks, prefix, NULL, ws, extra, nextra));
    hoop_status s = hoop__store_delete_keys(st, ks.keys, ks.n, NULL);
    keyset_free(&ks);
    if (s == HOOP_OK && rank != 0) s = hoop_store_set(st, gone, "1", 1); /* rank 0 waits */
    return s;
}

/* Writes "rank 3" or "ranks 2,3" (at most RANK_LIST_MAX, then "...") into buf. */
static void rank_list(const uint32_t *idx, uint32_t n, int ws, char *buf, size_t cap)
{
    size_t used = (size_t)snprintf(buf, cap, "%s ", n == 1 ? "rank" : "ranks");
    uint32_t shown = 0;
    for (uint32_t i = 0; i < n && used < cap; i++) {
        if ((int)idx[i] >= ws) continue; /* an extra key, not a rank */
        if (shown == RANK_LIST_MAX) {
            snprintf(buf + used, cap - used, ",... (%u in all)", n);
            return;
        }
        int k = snprintf(buf + used, cap - used, "%s%u", shown ? "," : "", idx[i]);
        used += k > 0 ? (size_t)k : 0;
        shown++;
    }
}

static hoop_status never_arrived(const hoop_store *st, const char *what, const char *name,
                                 const uint32_t *idx, uint32_t n, int64_t timeout_ms)
{
    char ranks[256], stranger[700] = "";
    rank_list(idx, n, hoop_store_world_size(st), ranks, sizeof(ranks));
    int refused = hoop__store_stranger(st, stranger, sizeof(stranger)); /* rank 0 alone */
    return HOOP_ERROR(HOOP_ERR_TIMEOUT,
                      "%s '%s': %s of %d never arrived (waited %" PRId64 " ms, rank %d)%s%s", what,
                      name, ranks, hoop_store_world_size(st), timeout_ms, hoop_store_rank(st),
                      refused ? "; meanwhile its store refused " : "", stranger);
}

/* How many ranks (this one included) had entered generation g when this rank did. */
static int arrived_with(const hoop_store *st, int64_t entry)
{
    return (int)((entry - 1) % hoop_store_world_size(st)) + 1;
}

/* The store went away while this rank waited in what/name: rank 0 said GOODBYE
 * (res->goodbye; by_rank when the wait's keys were the ranks' arrival keys, so that its
 * missing keys name ranks) or vanished. */
static hoop_status store_gone(hoop_store *st, hoop_status s, const char *what, const char *name,
                              const hoop__store_wait_result *res, int by_rank, int arrived,
                              int64_t t0)
{
    char lost[1700], ranks[256];
    snprintf(lost, sizeof(lost), "%s", hoop_last_error());
    int ws = hoop_store_world_size(st), rank = hoop_store_rank(st);
    long long waited = (long long)((hoop__now_ns() - t0) / 1000000);
    hoop_status fault = hoop__store_fault(st, lost, sizeof(lost));
    if (fault != HOOP_OK) /* rank 0: its own store gave up (a rank refused or aborted) */
        return HOOP_ERROR(fault, "%s '%s': rank %d's store %s (rank %d waited %lld ms)", what, name,
                          rank, lost, rank, waited);
    if (res->goodbye && by_rank && res->nmissing > 0) {
        rank_list(res->missing, res->nmissing, ws, ranks, sizeof(ranks));
        return HOOP_ERROR(s, "%s '%s': %s of %d never arrived (rank %d waited %lld ms; then %s)",
                          what, name, ranks, ws, rank, waited, lost);
    }
    if (res->goodbye)
        return HOOP_ERROR(s,
                          "%s '%s': rank %d waited %lld ms (%d of %d ranks had arrived when it "
                          "did); then %s",
                          what, name, rank, waited, arrived, ws, lost);
    return HOOP_ERROR(s,
                      "%s '%s': rank %d lost the store while it waited (%d of %d ranks had "
                      "arrived when it did; it waited %lld ms): %s",
                      what, name, rank, arrived, ws, waited, lost);
}

/* The server lost a rank while this one waited in what/name, with keys still missing
 * (store_proto.h, "A rank lost"): the sync cannot finish, and its counters cannot take a
 * restarted rank back. Names the lost rank, the sync, and what to do. by_rank: the
 * wait's keys are the ranks' arrival keys, so that its missing keys name ranks. */
static hoop_status rank_gone(hoop_store *st, const char *what, const char *name,
                             const hoop__store_wait_result *res, int by_rank, int64_t t0)
{
    int ws = hoop_store_world_size(st), rank = hoop_store_rank(st);
    long long waited = (long long)((hoop__now_ns() - t0) / 1000000);
    int why_n = (int)res->lost_why_bytes;
    const char *why = (const char *)res->lost_why;
    if (res->lost_rank == rank)
        return HOOP_ERROR(HOOP_ERR_REMOTE,
                          "%s '%s': rank %d came back after an earlier connection as rank %d "
                          "was lost (%.*s); a start-up cannot take a rank back once it is lost: "
                          "restart the whole job (hooprun --max-restarts)",
                          what, name, rank, rank, why_n, why);
    char ranks[300] = "not every rank had arrived";
    if (by_rank && res->nmissing > 0) {
        rank_list(res->missing, res->nmissing, ws, ranks, sizeof(ranks));
        snprintf(ranks + strlen(ranks), sizeof(ranks) - strlen(ranks), " of %d had not arrived",
                 ws);
    }
    return HOOP_ERROR(HOOP_ERR_REMOTE,
                      "%s '%s': %.*s, and %s (rank %d waited %lld ms); the job cannot start "
                      "without rank %d: restart the whole job (hooprun --max-restarts)",
                      what, name, why_n, why, ranks, rank, waited, res->lost_rank);
}

/* What a wait for the ranks' arrival keys (res: its missing keys name ranks) that ended
 * with s means for the sync what/name: a rank lost, the store gone, ranks that never
 * arrived (timeout t), or s itself. */
static hoop_status arrivals_outcome(hoop_store *st, hoop_status s, const char *what,
                                    const char *name, const hoop__store_wait_result *res,
                                    int64_t entry, int64_t t, int64_t t0)
{
    if (res->rank_lost) return rank_gone(st, what, name, res, 1, t0);
    if (s != HOOP_OK && res->lost)
        return store_gone(st, s, what, name, res, 1, arrived_with(st, entry), t0);
    if (s == HOOP_ERR_TIMEOUT) return never_arrived(st, what, name, res->missing, res->nmissing, t);
    return s;
}

/* Notes a failure on the handle (for rank 0's GOODBYE) and returns it. */
static hoop_status noted(hoop_store *st, hoop_status s)
{
    if (s != HOOP_OK) hoop__store_note_failure(st, s, hoop_last_error());
    return s;
}

/* The test hook's point (HOOP_TEST_FAULT=R:store_sync:N:SIGNAL): this rank's arrival in
 * what/name is set, its wait not begun. */
static void arrived(const hoop_store *st, const char *what, const char *name)
{
    char where[HOOP_STORE_KEY_MAX + 64];
    if (!hoop__fault_tick(HOOP__FAULT_STORE_SYNC, hoop_store_rank(st))) return;
    snprintf(where, sizeof(where), "%s '%s' (its arrival set, before its wait)", what, name);
    hoop__fault_raise(hoop_store_rank(st), where);
}

/* Enters kind/name's next generation (its key prefix, *entry) and publishes this rank's
 * blob there (prefix/r<rank>). */
static hoop_status arrive(hoop_store *st, const char *kind, const char *name, const void *blob,
                          size_t bytes, char *prefix, size_t cap, int64_t *entry)
{
    char key[HOOP_STORE_KEY_MAX + 32];
    HOOP_CHECK(enter(st, kind, name, prefix, cap, entry));
    snprintf(key, sizeof(key), "%s/r%d", prefix, hoop_store_rank(st));
    HOOP_CHECK(hoop_store_set(st, key, blob, bytes));
    arrived(st, kind, name);
    return HOOP_OK;
}

/* Waits until deadline for the blobs of ranks[0..n) (NULL: ranks 0..n-1) under prefix,
 * with their values; res's missing keys are made ranks. res is always to be freed. */
static hoop_status wait_blobs(hoop_store *st, const char *prefix, const int *ranks, int n,
                              int64_t deadline, hoop__store_wait_result *res)
{
    keyset ks;
    *res = (hoop__store_wait_result){0};
    HOOP_CHECK(keyset_init(&ks, prefix, ranks, n, NULL, 0));
    hoop_status s =
        hoop__store_wait_keys(st, ks.keys, ks.n, HOOP__STORE_WAIT_VALUES | HOOP__STORE_WAIT_LOST,
                              hoop__ms_left(deadline), res);
    keyset_free(&ks);
    for (uint32_t i = 0; ranks && i < res->nmissing; i++)
        res->missing[i] = (uint32_t)ranks[res->missing[i]];
    return s;
}

// ----- barrier ---------------------------------------------------------------------------

/* After a barrier wait timed out: finds out which ranks are missing. Returns HOOP_OK
 * when, at this last look, the barrier did complete. */
static hoop_status barrier_diagnose(hoop_store *st, const char *name, const char *prefix,
                                    int64_t timeout_ms)
{
    const char *const extra[] = {"done"};
    int ws = hoop_store_world_size(st);
    keyset ks;
    HOOP_CHECK(keyset_init(&ks, prefix, NULL, ws, extra, 1));
    hoop__store_wait_result res;
    hoop_status s = hoop__store_wait_keys(st, ks.keys, ks.n, 0, 0, &res);
    keyset_free(&ks);
    if (s == HOOP_ERR_TIMEOUT && !res.lost && res.nmissing > 0) {
        int done_missing = res.missing[res.nmissing - 1] == (uint32_t)ws;
        uint32_t nranks = res.nmissing - (uint32_t)done_missing;
        if (!done_missing)
            s = HOOP_OK; /* completed at the last moment */
        else if (nranks > 0)
            s = never_arrived(st, "barrier", name, res.missing, nranks, timeout_ms);
        else
            s = HOOP_ERROR(HOOP_ERR_TIMEOUT,
                           "barrier '%s': every rank arrived, but only at the "
                           "deadline (%" PRId64 " ms)",
                           name, timeout_ms);
    }
    hoop__store_wait_result_free(&res);
    return s;
}

static hoop_status barrier(hoop_store *st, const char *name, int64_t timeout_ms)
{
    int64_t t = hoop__store_timeout(st, timeout_ms), entry, t0 = hoop__now_ns();
    int64_t deadline = hoop__deadline_ns(t);
    int ws = hoop_store_world_size(st);
    char prefix[HOOP_STORE_KEY_MAX], key[HOOP_STORE_KEY_MAX + 32];
    HOOP_CHECK(enter(st, "barrier", name, prefix, sizeof(prefix), &entry));
    snprintf(key, sizeof(key), "%s/r%d", prefix, hoop_store_rank(st));
    HOOP_CHECK(hoop_store_set(st, key, "1", 1));
    snprintf(key, sizeof(key), "%s/done", prefix);
    if (entry % ws == 0) HOOP_CHECK(hoop_store_set(st, key, "1", 1)); /* the last to arrive */
    arrived(st, "barrier", name);
    const char *done = key;
    hoop__store_wait_result res;
    hoop_status s =
        hoop__store_wait_keys(st, &done, 1, HOOP__STORE_WAIT_LOST, hoop__ms_left(deadline), &res);
    if (res.rank_lost)
        s = rank_gone(st, "barrier", name, &res, 0, t0);
    else if (s == HOOP_ERR_TIMEOUT && !res.lost)
        s = barrier_diagnose(st, name, prefix, t);
    else if (s != HOOP_OK && res.lost) /* the waiting key is no rank's */
        s = store_gone(st, s, "barrier", name, &res, 0, arrived_with(st, entry), t0);
    hoop__store_wait_result_free(&res);
    HOOP_CHECK(s);
    const char *const extra[] = {"done", "left"};
    return leave(st, prefix, extra, 2, deadline);
}

HOOP_API hoop_status hoop_store_barrier(hoop_store *st, const char *name, int64_t timeout_ms)
{
    HOOP_CHECK(check_group(st, "barrier", name));
    return noted(st, barrier(st, name, timeout_ms));
}

// ----- all-gather ------------------------------------------------------------------------

static hoop_status check_allgather(const hoop_store *st, const void *blob, size_t bytes,
                                   const void *out)
{
    if ((blob == NULL && bytes > 0) || (out == NULL && bytes > 0))
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: allgather: blob or out is NULL");
    uint64_t reply = (uint64_t)hoop_store_world_size(st) * (bytes + 4) + 1;
    if (bytes > HOOP_STORE_VALUE_MAX || reply > HOOP__STORE_FRAME_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "store: allgather of %zu bytes x %d ranks exceeds one reply (%u bytes)",
                          bytes, hoop_store_world_size(st), HOOP__STORE_FRAME_MAX);
    return HOOP_OK;
}

/* Copies the gathered blobs into out; HOOP_ERR_MISMATCH names a rank whose size differs. */
static hoop_status gather_copy(const hoop_store *st, const char *what, const char *name,
                               const hoop__store_wait_result *res, size_t bytes, void *out)
{
    int ws = hoop_store_world_size(st);
    for (int r = 0; r < ws; r++) {
        if (res->value_bytes[r] != bytes)
            return HOOP_ERROR(HOOP_ERR_MISMATCH,
                              "%s '%s': rank %d gave %zu bytes, rank %d gave %zu bytes", what, name,
                              r, res->value_bytes[r], hoop_store_rank(st), bytes);
    }
    for (int r = 0; r < ws && bytes > 0; r++)
        memcpy((char *)out + (size_t)r * bytes, res->values[r], bytes);
    return HOOP_OK;
}

static hoop_status allgather(hoop_store *st, const char *name, const void *blob, size_t bytes,
                             void *out, int64_t timeout_ms)
{
    int64_t t = hoop__store_timeout(st, timeout_ms), entry, t0 = hoop__now_ns();
    int64_t deadline = hoop__deadline_ns(t);
    int ws = hoop_store_world_size(st);
    char prefix[HOOP_STORE_KEY_MAX];
    HOOP_CHECK(arrive(st, "allgather", name, blob, bytes, prefix, sizeof(prefix), &entry));
    hoop__store_wait_result res;
    hoop_status s = wait_blobs(st, prefix, NULL, ws, deadline, &res);
    s = arrivals_outcome(st, s, "allgather", name, &res, entry, t, t0);
    if (s == HOOP_OK) s = gather_copy(st, "allgather", name, &res, bytes, out);
    hoop__store_wait_result_free(&res);
    if (s == HOOP_ERR_TIMEOUT || (s != HOOP_OK && s != HOOP_ERR_MISMATCH)) return s;
    const char *const extra[] = {"left"};
    hoop_status sl = leave(st, prefix, extra, 1, deadline);
    return s != HOOP_OK ? s : sl;
}

HOOP_API hoop_status hoop_store_allgather(hoop_store *st, const char *name, const void *blob,
                                          size_t bytes, void *out, int64_t timeout_ms)
{
    HOOP_CHECK(check_group(st, "allgather", name));
    HOOP_CHECK(check_allgather(st, blob, bytes, out));
    return noted(st, allgather(st, name, blob, bytes, out, timeout_ms));
}

// ----- exchange with chosen peers ---------------------------------------------------------

static hoop_status exchange(hoop_store *st, const char *name, const void *blob, size_t bytes,
                            const int *peers, int npeers, void *out, int64_t timeout_ms,
                            int64_t *generation)
{
    int64_t t = hoop__store_timeout(st, timeout_ms), entry, t0 = hoop__now_ns();
    int64_t deadline = hoop__deadline_ns(t);
    int rank = hoop_store_rank(st);
    char prefix[HOOP_STORE_KEY_MAX];
    HOOP_CHECK(arrive(st, "exchange", name, blob, bytes, prefix, sizeof(prefix), &entry));
    *generation = (entry - 1) / hoop_store_world_size(st);
    if (npeers == 0) return HOOP_OK;
    hoop__store_wait_result res;
    hoop_status s = wait_blobs(st, prefix, peers, npeers, deadline, &res);
    s = arrivals_outcome(st, s, "exchange", name, &res, entry, t, t0);
    for (int i = 0; s == HOOP_OK && i < npeers; i++) {
        if (res.value_bytes[i] != bytes)
            s = HOOP_ERROR(HOOP_ERR_MISMATCH,
                           "exchange '%s': rank %d gave %zu bytes, rank %d gave %zu bytes", name,
                           peers[i], res.value_bytes[i], rank, bytes);
        else if (bytes > 0)
            memcpy((char *)out + (size_t)i * bytes, res.values[i], bytes);
    }
    hoop__store_wait_result_free(&res);
    return s;
}

hoop_status hoop__store_exchange(hoop_store *st, const char *name, const void *blob, size_t bytes,
                                 const int *peers, int npeers, void *out, int64_t timeout_ms,
                                 int64_t *generation)
{
    HOOP_CHECK(check_group(st, "exchange", name));
    int ws = hoop_store_world_size(st);
    if ((blob == NULL && bytes > 0) || (out == NULL && bytes > 0 && npeers > 0) || !generation ||
        npeers < 0 || (npeers > 0 && !peers))
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: exchange '%s': a NULL argument", name);
    if (bytes > HOOP_STORE_VALUE_MAX || (uint64_t)npeers > HOOP__STORE_WAIT_KEYS_MAX ||
        (uint64_t)npeers * (bytes + 4) + 1 > HOOP__STORE_FRAME_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "store: exchange of %zu bytes from %d peers exceeds one reply (%u bytes)",
                          bytes, npeers, HOOP__STORE_FRAME_MAX);
    for (int i = 0; i < npeers; i++)
        if (peers[i] < 0 || peers[i] >= ws)
            return HOOP_ERROR(HOOP_ERR_INVALID, "store: exchange '%s': peer %d is not a rank of %d",
                              name, peers[i], ws);
    return noted(st, exchange(st, name, blob, bytes, peers, npeers, out, timeout_ms, generation));
}

hoop_status hoop__store_exchange_end(hoop_store *st, const char *name, int64_t generation)
{
    char key[HOOP_STORE_KEY_MAX + 64];
    HOOP_CHECK(check_group(st, "exchange", name));
    snprintf(key, sizeof(key), "hoop/exchange/%s/%" PRId64 "/r%d", name, generation,
             hoop_store_rank(st));
    return hoop_store_delete(st, key, NULL);
}

// ----- gather to rank 0, and its answer ----------------------------------------------------

/* The answer key's value: this head, then the fold's answer (status HOOP_OK) or rank 0's
 * message. */
typedef struct answer_head {
    int32_t status;
    int32_t decided; /* the fold's (or the blobs') failure: every rank's own */
} answer_head;

/* How much longer than rank 0 the others wait for its answer: rank 0's own wait may end
 * at the same deadline, and its answer then says why. */
#define ANSWER_GRACE_MS 2000

/* Rank 0: sets the answer key to s's outcome. The thread's message is kept. */
static hoop_status publish_answer(hoop_store *st, const char *akey, hoop_status s, int decided,
                                  const void *answer, size_t answer_bytes)
{
    char msg[1800];
    answer_head h = {.status = s, .decided = decided};
    size_t body = answer_bytes;
    if (s != HOOP_OK) {
        snprintf(msg, sizeof(msg), "%s", hoop_last_error());
        answer = msg;
        body = strlen(msg);
    }
    char *v;
    HOOP_CHECK(hoop__calloc(&v, sizeof(h) + body + 1));
    memcpy(v, &h, sizeof(h));
    if (body > 0) memcpy(v + sizeof(h), answer, body);
    hoop_status ps = hoop_store_set(st, akey, v, sizeof(h) + body);
    free(v);
    if (s != HOOP_OK) hoop__error_restore(msg);
    return ps;
}

/* One gather_fold call's state. */
typedef struct gather {
    hoop_store *st;
    const char *name;
    char prefix[HOOP_STORE_KEY_MAX];
    size_t bytes;
    hoop__store_fold_fn fold;
    void *arg, *answer;
    size_t answer_bytes;
    const hoop__store_gather_more *more; /* NULL: nothing more */
    int64_t t, deadline, entry, t0;      /* timeout (ms), its deadline, arrival, start (ns) */
    int *decided;
} gather;

/* The ranks missing from the gather (missing[0..n)) that never arrived, waited_ms; when
 * the gather follows an exchange (more->after), the ranks that did reach that exchange
 * are named apart, as still in it: they wait there for the ranks they link to (the
 * ones that never arrived, most often), and were not lost. */
static hoop_status gather_missing(const gather *g, const uint32_t *missing, uint32_t n,
                                  int64_t waited_ms)
{
    const hoop__store_gather_more *m = g->more;
    int ws = hoop_store_world_size(g->st), *ranks = NULL;
    char prefix[HOOP_STORE_KEY_MAX + 64], never[256], still[256], stranger[700] = "";
    uint32_t *list = NULL, nnever = 0, nstill = 0;
    unsigned char *absent = NULL; /* absent[i]: missing[i] never reached the exchange */
    hoop__store_wait_result res = {0};
    hoop_status s = HOOP_ERR_NOMEM;
    keyset ks;
    if (!m || !m->after || n == 0)
        return never_arrived(g->st, "gather", g->name, missing, n, waited_ms);
    if (hoop__calloc(&ranks, n) == HOOP_OK && hoop__calloc(&list, n) == HOOP_OK &&
        hoop__calloc(&absent, n) == HOOP_OK) {
        for (uint32_t i = 0; i < n; i++) ranks[i] = (int)missing[i];
        snprintf(prefix, sizeof(prefix), "hoop/exchange/%s/%" PRId64, m->after,
                 m->after_generation);
        if ((s = keyset_init(&ks, prefix, ranks, (int)n, NULL, 0)) == HOOP_OK) {
            s = hoop__store_wait_keys(g->st, ks.keys, ks.n, 0, 0, &res); /* a look, no wait */
            keyset_free(&ks);
        }
    }
    if (s == HOOP_ERR_TIMEOUT && !res.lost) {
        for (uint32_t i = 0; i < res.nmissing; i++) absent[res.missing[i]] = 1;
        s = HOOP_OK;
    }
    if (s == HOOP_OK) {
        for (uint32_t i = 0; i < n; i++)
            if (absent[i]) list[nnever++] = missing[i];
        rank_list(list, nnever, ws, never, sizeof(never));
        for (uint32_t i = 0; i < n; i++)
            if (!absent[i]) list[nstill++] = missing[i];
        rank_list(list, nstill, ws, still, sizeof(still));
    }
    hoop__store_wait_result_free(&res);
    free(ranks);
    free(list);
    free(absent);
    if (s != HOOP_OK || nstill == 0) /* the look failed, or found nobody in the exchange */
        return never_arrived(g->st, "gather", g->name, missing, n, waited_ms);
    int refused = hoop__store_stranger(g->st, stranger, sizeof(stranger));
    char first[300] = "";
    if (nnever > 0) snprintf(first, sizeof(first), "%s of %d never arrived; ", never, ws);
    return HOOP_ERROR(HOOP_ERR_TIMEOUT,
                      "gather '%s': %s%s of %d had not finished exchange '%s' before it, "
                      "waiting there for the ranks they link to (waited %" PRId64
                      " ms, rank %d)%s%s",
                      g->name, first, still, ws, m->after, waited_ms, hoop_store_rank(g->st),
                      refused ? "; meanwhile its store refused " : "", stranger);
}

/* Rank 0's part: waits for every blob, folds them, publishes the outcome. */
static hoop_status gather_root(const gather *g)
{
    int ws = hoop_store_world_size(g->st);
    char akey[HOOP_STORE_KEY_MAX + 32];
    hoop__store_wait_result res;
    hoop_status s = wait_blobs(g->st, g->prefix, NULL, ws, g->deadline, &res);
    int lost = res.lost;
    if (s == HOOP_ERR_TIMEOUT && !res.rank_lost && !res.lost)
        s = gather_missing(g, res.missing, res.nmissing, g->t);
    else
        s = arrivals_outcome(g->st, s, "gather", g->name, &res, g->entry, g->t, g->t0);
    if (s == HOOP_OK) {
        void *all = NULL;
        s = hoop__calloc_bytes(&all, (size_t)ws, g->bytes ? g->bytes : 1, __FILE__, __LINE__);
        if (s == HOOP_OK &&
            (s = gather_copy(g->st, "gather", g->name, &res, g->bytes, all)) != HOOP_OK)
            *g->decided = 1;
        if (s == HOOP_OK && (s = g->fold(g->arg, all, ws, g->answer)) != HOOP_OK) *g->decided = 1;
        free(all);
    }
    hoop__store_wait_result_free(&res);
    if (lost) return s;
    snprintf(akey, sizeof(akey), "%s/answer", g->prefix);
    hoop_status ps = publish_answer(g->st, akey, s, *g->decided, g->answer, g->answer_bytes);
    return s != HOOP_OK ? s : ps;
}

/* Another rank's wait for the answer timed out: names the ranks that never arrived, or
 * rank 0, which did not answer. */
static hoop_status gather_diagnose(const gather *g, int64_t waited_ms)
{
    int ws = hoop_store_world_size(g->st);
    keyset ks;
    HOOP_CHECK(keyset_init(&ks, g->prefix, NULL, ws, NULL, 0));
    hoop__store_wait_result res;
    hoop_status s = hoop__store_wait_keys(g->st, ks.keys, ks.n, 0, 0, &res);
    keyset_free(&ks);
    if (s == HOOP_ERR_TIMEOUT && !res.lost && res.nmissing > 0)
        s = gather_missing(g, res.missing, res.nmissing, waited_ms);
    else if (s == HOOP_OK)
        s = HOOP_ERROR(HOOP_ERR_TIMEOUT,
                       "gather '%s': every rank arrived, but rank 0 had not answered when rank "
                       "%d gave up after %" PRId64 " ms (rank 0 stopped, or starved of CPU?)",
                       g->name, hoop_store_rank(g->st), waited_ms);
    hoop__store_wait_result_free(&res);
    return s;
}

/* Another rank's part: waits for rank 0's answer and takes it. */
static hoop_status gather_leaf(const gather *g)
{
    char akey[HOOP_STORE_KEY_MAX + 32];
    const char *k = akey;
    snprintf(akey, sizeof(akey), "%s/answer", g->prefix);
    hoop__store_wait_result res;
    hoop_status s =
        hoop__store_wait_keys(g->st, &k, 1, HOOP__STORE_WAIT_VALUES | HOOP__STORE_WAIT_LOST,
                              hoop__ms_left(g->deadline) + ANSWER_GRACE_MS, &res);
    if (res.rank_lost)
        s = rank_gone(g->st, "gather", g->name, &res, 0, g->t0);
    else if (s != HOOP_OK && res.lost)
        s = store_gone(g->st, s, "gather", g->name, &res, 0, arrived_with(g->st, g->entry), g->t0);
    else if (s == HOOP_ERR_TIMEOUT)
        s = gather_diagnose(g, g->t + ANSWER_GRACE_MS);
    else if (s == HOOP_OK) {
        answer_head h = {0};
        size_t got = res.value_bytes[0];
        const char *body = "";
        if (got >= sizeof(h)) {
            memcpy(&h, res.values[0], sizeof(h));
            body = (const char *)res.values[0] + sizeof(h);
        }
        if (got < sizeof(h) || (h.status == HOOP_OK && got - sizeof(h) != g->answer_bytes))
            s = HOOP_ERROR(HOOP_ERR_REMOTE,
                           "gather '%s': rank 0's answer has %zu bytes, not %zu (another "
                           "version of hoop?)",
                           g->name, got, sizeof(h) + g->answer_bytes);
        else if (h.status == HOOP_OK) {
            if (g->answer_bytes > 0) memcpy(g->answer, body, g->answer_bytes);
        } else {
            int known = h.status > HOOP_OK && h.status <= HOOP_ERR_INTERNAL;
            *g->decided = h.decided != 0;
            s = HOOP_ERROR(known ? (hoop_status)h.status : HOOP_ERR_REMOTE, "%.*s",
                           (int)(got - sizeof(h) < 1800 ? got - sizeof(h) : 1800), body);
        }
    }
    hoop__store_wait_result_free(&res);
    return s;
}

static hoop_status gather_fold(gather *g, const void *blob)
{
    const hoop__store_gather_more *m = g->more;
    char key[HOOP_STORE_KEY_MAX + 32], before[1800];
    g->t = hoop__store_timeout(g->st, g->t);
    g->deadline = hoop__deadline_ns(g->t);
    g->t0 = hoop__now_ns();
    HOOP_CHECK(
        arrive(g->st, "gather", g->name, blob, g->bytes, g->prefix, sizeof(g->prefix), &g->entry));
    hoop_status s = hoop_store_rank(g->st) == 0 ? gather_root(g) : gather_leaf(g);
    if (s != HOOP_OK && !*g->decided) return s;
    snprintf(before, sizeof(before), "%s", hoop_last_error());
    if (m && m->peek >= 0 && g->bytes > 0) { /* every blob is there: rank 0 read them all */
        size_t got = 0;
        snprintf(key, sizeof(key), "%s/r%d", g->prefix, m->peek);
        if (hoop_store_get(g->st, key, m->peeked, g->bytes, &got, 0) != HOOP_OK || got != g->bytes)
            memset(m->peeked, 0, g->bytes);
    }
    const char *const extra[] = {"answer", "left"};
    hoop_status sl = leave(g->st, g->prefix, extra, 2, g->deadline);
    if (s == HOOP_OK) return sl;
    hoop__error_restore(before);
    return s;
}

hoop_status hoop__store_gather_fold(hoop_store *st, const char *name, const void *blob,
                                    size_t bytes, hoop__store_fold_fn fold, void *arg, void *answer,
                                    size_t answer_bytes, const hoop__store_gather_more *more,
                                    int64_t timeout_ms, int *decided)
{
    int dummy = 0;
    if (!decided) decided = &dummy;
    *decided = 0;
    HOOP_CHECK(check_group(st, "gather", name));
    HOOP_CHECK(check_allgather(st, blob, bytes, blob));
    if (!fold || (answer == NULL && answer_bytes > 0) ||
        (more && more->peek >= 0 &&
         (more->peeked == NULL || more->peek >= hoop_store_world_size(st))) ||
        answer_bytes + sizeof(answer_head) > HOOP_STORE_VALUE_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "store: gather '%s': bad fold, answer or peek", name);
    gather g = {.st = st,
                .name = name,
                .bytes = bytes,
                .fold = fold,
                .arg = arg,
                .answer = answer,
                .answer_bytes = answer_bytes,
                .more = more,
                .t = timeout_ms,
                .decided = decided};
    return noted(st, gather_fold(&g, blob));
}

// ----- env:// start-up ---------------------------------------------------------------------

/* Rank 0: serves the store. When MASTER_ADDR is a loopback address the server binds to
 * it (only this machine can reach it anyway); otherwise to every address of its
 * family, since a host name may resolve differently here than on the other nodes. */
static hoop_status start_rank0_server(const hoop_store_config *cfg, hoop_store_server **srv,
                                      const hoop__store_naming *naming)
{
    struct addrinfo *res;
    /* One connection per rank, its own client's end, the listener and the server's
     * epoll and wake descriptors: short of them, rank 0 would refuse ranks one accept at
     * a time and they would wait until HOOP_TIMEOUT; now it fails at once, saying so. */
    if (cfg->world_size > 0) {
        char what[200];
        snprintf(what, sizeof(what), "%s's store (one connection per rank of %s %d, and its own)",
                 naming->owner, naming->size, cfg->world_size);
        HOOP_CHECK(hoop__fd_reserve((int64_t)cfg->world_size + 4, what));
    }
    HOOP_CHECK(hoop__store_resolve(cfg->host, cfg->port, 0, &res));
    hoop_store_config sc = *cfg;
    if (!hoop__store_is_loopback(res)) sc.host = res->ai_family == AF_INET6 ? "::" : NULL;
    freeaddrinfo(res);
    hoop_status s =
        naming->nodes ? hoop__store_server_init_nodes(srv, &sc) : hoop_store_server_init(srv, &sc);
    if (s != HOOP_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", hoop_last_error());
        char hp[300];
        return HOOP_ERROR(s, "%s cannot serve the store (%s = %s): %s", naming->owner,
                          naming->place, hoop__hostport(hp, sizeof(hp), cfg->host, cfg->port), why);
    }
    return HOOP_OK;
}

/* The store config of an env:// job's rank (d), with timeout_ms. */
static hoop_store_config env_config(const hoop_dist_env *d, int64_t timeout_ms)
{
    hoop_store_config cfg = {.host = d->master_addr,
                             .port = d->master_port,
                             .token = d->token[0] ? d->token : NULL, /* HOOP_TOKEN, or srun's */
                             .rank = d->rank,
                             .world_size = d->world_size,
                             .timeout_ms = timeout_ms};
    return cfg;
}

/* How long a rank that refuses to start waits for rank 0's store, only to tell it why. */
#define REFUSE_TELL_MS 5000

static hoop_status env_refuse(hoop_status st, int *told, int said);

hoop_status hoop__store_env_refuse(hoop_status st, int *told)
{
    return env_refuse(st, told, 0);
}

hoop_status hoop__store_env_refuse_said(hoop_status st, int *told)
{
    return env_refuse(st, told, 1);
}

static hoop_status env_refuse(hoop_status st, int *told, int said)
{
    char why[1024];
    hoop_dist_env d;
    hoop_store *store = NULL;
    int64_t ms = REFUSE_TELL_MS, timeout_ms;
    if (told) *told = -1;
    snprintf(why, sizeof(why), "%s", hoop_last_error());
    if (!hoop__env_dist_wanted() || hoop__env_dist_store(&d) != HOOP_OK || d.world_size < 2)
        return HOOP_ERROR(st, "%s", why);
    /* HOOP_TIMEOUT when it is shorter and valid (it may be the setting refused). Rank 0
     * serves its store, and keeps it up to 2 s for ranks not connected yet (store_proto.h). */
    if (hoop__env_ms("HOOP_TIMEOUT", &timeout_ms) == HOOP_OK && timeout_ms < ms) ms = timeout_ms;
    hoop_store_config cfg = env_config(&d, ms);
    hoop_status s = hoop__store_init_served(&store, &cfg, NULL);
    if (s == HOOP_OK) {
        if (said) hoop__store_owner_said(store);
        int t = hoop__store_abort(store, st, why);
        if (told) *told = t;
        (void)hoop_store_destroy(store);
    } else if (told && s != HOOP_ERR_TIMEOUT && s != HOOP_ERR_SYSTEM) {
        *told = 0; /* the store answered: it had given up already, on another rank's word */
    }
    return HOOP_ERROR(st, "%s", why);
}

HOOP_API hoop_status hoop_store_init_env(hoop_store **out)
{
    if (out == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "store: out is NULL");
    *out = NULL;
    hoop_dist_env d;
    int64_t timeout_ms;
    HOOP_CHECK(hoop__env_dist(&d));
    hoop_status st = hoop__env_ms("HOOP_TIMEOUT", &timeout_ms);
    if (st != HOOP_OK) return hoop__store_env_refuse(st, NULL);
    hoop_store_config cfg = env_config(&d, timeout_ms);
    st = hoop__store_init_served(out, &cfg, NULL);
    if (st == HOOP_ERR_SYSTEM && d.port_from_slurm && hoop__store_last_in_use()) {
        /* Jobs whose ids agree mod 1000 get the same derived port on a shared node. */
        char why[700];
        snprintf(why, sizeof(why), "%s", hoop_last_error());
        return HOOP_ERROR(st,
                          "%s; this port was derived from SLURM_JOB_ID (10000 + (id mod "
                          "1000) x 10 + step mod 10), which another job's id can share: export "
                          "MASTER_PORT with a free port",
                          why);
    }
    return st;
}

hoop_status hoop__store_init_served(hoop_store **out, const hoop_store_config *cfg_in,
                                    const hoop__store_naming *naming)
{
    hoop_store_config cfg = *cfg_in;
    hoop_store_server *srv = NULL;
    *out = NULL;
    if (naming == NULL) naming = &hoop__store_workers;
    if (cfg.rank == 0) HOOP_CHECK(start_rank0_server(&cfg, &srv, naming));
    hoop_status s = hoop__store_init_rendezvous(out, &cfg, naming, srv != NULL);
    char fault[700];
    hoop_status gave_up = s != HOOP_OK ? hoop__store_server_fault(srv, fault, sizeof(fault)) : 0;
    if (gave_up != HOOP_OK)
        s = HOOP_ERROR(gave_up, "%s's store %s (before %s itself connected)", naming->owner, fault,
                       naming->owner); /* a bad rank came first */
    if (s != HOOP_OK) {
        hoop_store_server_destroy(srv);
        return s;
    }
    /* A rank whose WORLD_SIZE or HOOP_TOKEN differs from rank 0's is refused by rank 0's
     * store in the handshake, which then fails every rank at once (store_proto.h). */
    hoop__store_own_server(*out, srv);
    return HOOP_OK;
}
