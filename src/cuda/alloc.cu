/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/alloc.cu -- the caching allocators of device memory and pinned host memory
 * (see alloc.h for the size classes and the rules of reuse).
 *
 * A pool keeps every block it made (in use or cached) in a hash table by address, so a
 * free finds its block; the cached blocks sit in one free list per class: an array of
 * lists for the 2048 classes up to 1 MiB, one list for the larger ones (few, searched
 * for an exact size). Lists are last-in first-out, so the block freed last, whose pages
 * are the warmest, is reused first.
 *
 * Owns: the two pools, their blocks' bookkeeping (host memory) and the memory CUDA gave
 * them, until hoop__cuda_empty_cache or the process's end. Thread-safety: each pool has
 * a mutex, held while it calls CUDA (cudaMalloc, cudaFree), so no two threads race to
 * fill the same class.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "cuda/ctx.h"

#define ALLOC_SMALL_MAX (1024 * 1024)      /* the largest request of a small class */
#define ALLOC_SMALL_STEP 512               /* small classes: multiples of this */
#define ALLOC_LARGE_STEP (2 * 1024 * 1024) /* large classes: multiples of this */
#define ALLOC_SMALL_CLASSES (ALLOC_SMALL_MAX / ALLOC_SMALL_STEP)

struct alloc_blk {
    void *ptr;
    size_t size;  /* the class */
    size_t asked; /* the request it serves while in use */
    int in_use;
    struct alloc_blk *hnext; /* the hash chain */
    struct alloc_blk *fnext; /* the free list, while cached */
};

/* What a pool allocates, and the names its messages use. */
struct alloc_kind {
    const char *what, *alloc_call, *free_call;
    int device; /* 1: device memory, 0: pinned host memory */
    cudaError_t (*raw_alloc)(void **p, size_t bytes);
    cudaError_t (*raw_free)(void *p);
};

struct alloc_pool {
    const struct alloc_kind *k;
    pthread_mutex_t mu;
    struct alloc_blk **tab; /* every block, by address; tab_len a power of 2 */
    size_t tab_len, nblk;
    struct alloc_blk *small[ALLOC_SMALL_CLASSES]; /* cached blocks by class */
    struct alloc_blk *large;
    struct hoop__cuda_mem_stats st;
};

static cudaError_t alloc_dev(void **p, size_t bytes)
{
    return cudaMalloc(p, bytes);
}
static cudaError_t free_dev(void *p)
{
    return cudaFree(p);
}
static cudaError_t alloc_host(void **p, size_t bytes)
{
    return cudaMallocHost(p, bytes);
}
static cudaError_t free_host(void *p)
{
    return cudaFreeHost(p);
}

static const struct alloc_kind dev_kind = {"device memory", "cudaMalloc", "cudaFree", 1,
                                           alloc_dev,       free_dev};
static const struct alloc_kind host_kind = {
    "pinned host memory", "cudaMallocHost", "cudaFreeHost", 0, alloc_host, free_host};
static struct alloc_pool dev_pool = {&dev_kind, PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, {}, NULL,
                                     {}};
static struct alloc_pool host_pool = {&host_kind, PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, {}, NULL,
                                      {}};

// ----------------------------------------------------------------- under the host layer
#ifndef __CUDACC__
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#else
#define ASAN_POISON_MEMORY_REGION(a, n) ((void)(a), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(a, n) ((void)(a), (void)(n))
#endif
/* Device memory is host memory here (src/cuda/hx.h): a block handed out reads as
 * garbage (0xff bytes, NaN) whatever it held, and ASan sees every access past the bytes
 * asked or into a cached block. For device blocks this happens in the compute stream's
 * order (hoop__hx_stream_op: at once, unless the layer's streams are lazy and the last
 * user's kernels are still queued), as a block's reuse is ordered on a GPU; pinned blocks
 * are the host's and change at once. */
static void alloc_in_order(int device, std::function<void()> op)
{
    if (device)
        hoop__hx_stream_op(hoop__cuda_stream(), std::move(op));
    else
        op();
}
static void alloc_handed(int device, const struct alloc_blk *b)
{
    char *p = (char *)b->ptr;
    const size_t asked = b->asked, size = b->size;
    alloc_in_order(device, [=]() {
        ASAN_UNPOISON_MEMORY_REGION(p, asked);
        memset(p, 0xff, asked);
        ASAN_POISON_MEMORY_REGION(p + asked, size - asked);
    });
}
static void alloc_cached(int device, const struct alloc_blk *b)
{
    char *p = (char *)b->ptr;
    const size_t size = b->size;
    alloc_in_order(device, [=]() { ASAN_POISON_MEMORY_REGION(p, size); });
}
static void alloc_released(int device, const struct alloc_blk *b)
{
    char *p = (char *)b->ptr;
    const size_t size = b->size;
    alloc_in_order(device, [=]() { ASAN_UNPOISON_MEMORY_REGION(p, size); });
}
#else
static void alloc_handed(int device, const struct alloc_blk *b)
{
    (void)device, (void)b;
}
static void alloc_cached(int device, const struct alloc_blk *b)
{
    (void)device, (void)b;
}
static void alloc_released(int device, const struct alloc_blk *b)
{
    (void)device, (void)b;
}
#endif

// ----------------------------------------------------------------- bookkeeping

extern "C" size_t hoop__cuda_alloc_class(size_t bytes)
{
    if (bytes <= ALLOC_SMALL_MAX) {
        size_t n = (bytes + ALLOC_SMALL_STEP - 1) / ALLOC_SMALL_STEP;
        return (n ? n : 1) * ALLOC_SMALL_STEP;
    }
    if (bytes > SIZE_MAX - ALLOC_LARGE_STEP) return 0;
    return (bytes + ALLOC_LARGE_STEP - 1) / ALLOC_LARGE_STEP * ALLOC_LARGE_STEP;
}

static size_t alloc_slot(const struct alloc_pool *P, const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p >> 8; /* blocks are 256-byte aligned at least */
    x *= 0x9e3779b97f4a7c15ull;
    return (size_t)(x >> 32) & (P->tab_len - 1);
}

static struct alloc_blk *alloc_find(const struct alloc_pool *P, const void *p)
{
    if (!P->tab) return NULL;
    struct alloc_blk *b = P->tab[alloc_slot(P, p)];
    while (b && b->ptr != p) b = b->hnext;
    return b;
}

/* Makes room in the table for one more block (doubling it at one block a slot). */
static hoop_status alloc_room(struct alloc_pool *P)
{
    if (P->tab && P->nblk < P->tab_len) return HOOP_OK;
    size_t len = P->tab ? P->tab_len * 2 : 256;
    struct alloc_blk **tab = (struct alloc_blk **)calloc(len, sizeof(*tab));
    if (!tab)
        return HOOP_ERROR(HOOP_ERR_NOMEM,
                          "cuda: no host memory for the %s pool's table (%zu "
                          "slots)",
                          P->k->what, len);
    struct alloc_blk **old = P->tab;
    size_t old_len = P->tab_len;
    P->tab = tab;
    P->tab_len = len;
    for (size_t i = 0; i < old_len; i++)
        for (struct alloc_blk *b = old[i], *next; b; b = next) {
            next = b->hnext;
            size_t s = alloc_slot(P, b->ptr);
            b->hnext = tab[s];
            tab[s] = b;
        }
    free(old);
    return HOOP_OK;
}

static void alloc_unlink(struct alloc_pool *P, struct alloc_blk *b)
{
    struct alloc_blk **pp = &P->tab[alloc_slot(P, b->ptr)];
    while (*pp != b) pp = &(*pp)->hnext;
    *pp = b->hnext;
    P->nblk--;
}

static struct alloc_blk **alloc_list(struct alloc_pool *P, size_t size)
{
    return size <= ALLOC_SMALL_MAX ? &P->small[size / ALLOC_SMALL_STEP - 1] : &P->large;
}

/* A cached block of exactly size, taken off its list, or NULL. */
static struct alloc_blk *alloc_take(struct alloc_pool *P, size_t size)
{
    for (struct alloc_blk **pp = alloc_list(P, size); *pp; pp = &(*pp)->fnext) {
        struct alloc_blk *b = *pp;
        if (b->size != size) continue;
        *pp = b->fnext;
        b->fnext = NULL;
        P->st.blocks_cached--;
        P->st.bytes_cached -= size;
        P->st.cache_hits++;
        return b;
    }
    return NULL;
}

/* Gives the cached blocks of list *pp back to CUDA; keeps the first failure in *st. */
static void alloc_release_list(struct alloc_pool *P, struct alloc_blk **pp, hoop_status *st)
{
    while (*pp) {
        struct alloc_blk *b = *pp;
        *pp = b->fnext;
        alloc_unlink(P, b);
        alloc_released(P->k->device, b);
        cudaError_t e = P->k->raw_free(b->ptr);
        if (e != cudaSuccess) {
            cudaGetLastError();
            if (*st == HOOP_OK)
                *st = HOOP_ERROR(HOOP_ERR_CUDA, "%s(%p, %zu bytes) failed: %s", P->k->free_call,
                                 b->ptr, b->size, cudaGetErrorString(e));
        } else {
            P->st.device_frees++;
        }
        P->st.blocks_cached--;
        P->st.bytes_cached -= b->size;
        free(b);
    }
}

static hoop_status alloc_release(struct alloc_pool *P)
{
    hoop_status st = HOOP_OK;
    for (size_t i = 0; i < ALLOC_SMALL_CLASSES; i++) alloc_release_list(P, &P->small[i], &st);
    alloc_release_list(P, &P->large, &st);
    return st;
}

// ----------------------------------------------------------------- allocation

/* "12.0 MiB", "512 B": bytes for a message. */
static const char *alloc_human(char *buf, size_t len, size_t bytes)
{
    if (bytes < 1024)
        snprintf(buf, len, "%zu B", bytes);
    else if (bytes < 1024 * 1024)
        snprintf(buf, len, "%.1f KiB", (double)bytes / 1024.0);
    else if (bytes < (size_t)1024 * 1024 * 1024)
        snprintf(buf, len, "%.1f MiB", (double)bytes / (1024.0 * 1024.0));
    else
        snprintf(buf, len, "%.1f GiB", (double)bytes / (1024.0 * 1024.0 * 1024.0));
    return buf;
}

/* kept: the cache was not given back (the thread may not wait for the device). */
static hoop_status alloc_oom(const struct alloc_pool *P, size_t bytes, size_t size, size_t released,
                             int kept)
{
    char use[32], cached[32], rel[32], fr[32], tot[32], after[160];
    alloc_human(use, sizeof(use), P->st.bytes_in_use);
    alloc_human(cached, sizeof(cached), P->st.bytes_cached);
    alloc_human(rel, sizeof(rel), released);
    if (kept)
        snprintf(after, sizeof(after),
                 "cached %s kept: this thread runs a communicator's progress and may not wait "
                 "for the device, as %s would",
                 cached, P->k->free_call);
    else
        snprintf(after, sizeof(after), "cached %s after giving %s back", cached, rel);
    if (!P->k->device)
        return HOOP_ERROR(HOOP_ERR_NOMEM,
                          "cuda: cannot allocate %zu bytes of %s (a %zu-byte block; in use %s, %s)",
                          bytes, P->k->what, size, use, after);
    int dev = -1;
    size_t free_b = 0, total_b = 0;
    hoop__cuda_device_info(&dev, NULL, 0, NULL);
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
    return HOOP_ERROR(HOOP_ERR_NOMEM,
                      "cuda: cannot allocate %zu bytes on cuda:%d (a %zu-byte block; in use %s, "
                      "%s, device free %s of %s)",
                      bytes, dev, size, use, after, alloc_human(fr, sizeof(fr), free_b),
                      alloc_human(tot, sizeof(tot), total_b));
}

/* A new block of size from CUDA: when CUDA is out of memory, the cache goes back to it
 * and the call is tried once more, unless the thread may not wait for the device
 * (hoop__device_sync_ok: giving a block back synchronises it). */
static hoop_status alloc_fresh(struct alloc_pool *P, size_t size, size_t bytes,
                               struct alloc_blk **out)
{
    HOOP_CHECK(alloc_room(P));
    struct alloc_blk *b = (struct alloc_blk *)calloc(1, sizeof(*b));
    if (!b) return HOOP_ERROR(HOOP_ERR_NOMEM, "cuda: no host memory for a block's record");
    void *p = NULL;
    cudaError_t e = P->k->raw_alloc(&p, size);
    size_t released = 0;
    int may_flush = hoop__device_sync_ok();
    if (e == cudaErrorMemoryAllocation && P->st.blocks_cached > 0 && may_flush) {
        cudaGetLastError();
        released = P->st.bytes_cached;
        hoop_status st = alloc_release(P);
        P->st.cache_flushes++;
        if (st != HOOP_OK) {
            free(b);
            return st;
        }
        e = P->k->raw_alloc(&p, size);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        free(b);
        if (e == cudaErrorMemoryAllocation)
            return alloc_oom(P, bytes, size, released, !may_flush && P->st.blocks_cached > 0);
        return HOOP_ERROR(HOOP_ERR_CUDA, "%s(%zu bytes) failed: %s", P->k->alloc_call, size,
                          cudaGetErrorString(e));
    }
    b->ptr = p;
    b->size = size;
    size_t s = alloc_slot(P, p);
    b->hnext = P->tab[s];
    P->tab[s] = b;
    P->nblk++;
    P->st.device_mallocs++;
    *out = b;
    return HOOP_OK;
}

static hoop_status alloc_get(struct alloc_pool *P, void **p, size_t bytes)
{
    if (!p) return HOOP_ERROR(HOOP_ERR_INVALID, "cuda: NULL pointer for a block of %s", P->k->what);
    *p = NULL;
    size_t size = hoop__cuda_alloc_class(bytes);
    if (size == 0)
        return HOOP_ERROR(HOOP_ERR_NOMEM,
                          "cuda: cannot allocate %zu bytes of %s: no class holds "
                          "that many",
                          bytes, P->k->what);
    HOOP_CHECK(hoop__cuda_init());
    pthread_mutex_lock(&P->mu);
    hoop_status st = HOOP_OK;
    struct alloc_blk *b = alloc_take(P, size);
    if (!b) st = alloc_fresh(P, size, bytes, &b);
    if (st == HOOP_OK) {
        b->in_use = 1;
        b->asked = bytes;
        P->st.blocks_in_use++;
        P->st.bytes_in_use += size;
        if (P->st.bytes_in_use > P->st.peak_bytes) P->st.peak_bytes = P->st.bytes_in_use;
        alloc_handed(P->k->device, b);
        *p = b->ptr;
    }
    pthread_mutex_unlock(&P->mu);
    return st;
}

static void alloc_put(struct alloc_pool *P, void *p, const char *fn)
{
    if (!p) return;
    pthread_mutex_lock(&P->mu);
    struct alloc_blk *b = alloc_find(P, p);
    int ours = b && b->in_use;
    if (ours) {
        b->in_use = 0;
        P->st.blocks_in_use--;
        P->st.bytes_in_use -= b->size;
        P->st.blocks_cached++;
        P->st.bytes_cached += b->size;
        struct alloc_blk **list = alloc_list(P, b->size);
        b->fnext = *list;
        *list = b;
        alloc_cached(P->k->device, b);
    }
    pthread_mutex_unlock(&P->mu);
    if (ours) return;
    HOOP_WARN("cuda: %s(%p): not a block of %s in use (freed twice, or not from this "
              "allocator); ignored",
              fn, p, P->k->what);
}

// ----------------------------------------------------------------- the calls

extern "C" hoop_status hoop__cuda_malloc(void **p, size_t bytes)
{
    return alloc_get(&dev_pool, p, bytes);
}

extern "C" void hoop__cuda_free(void *p)
{
    alloc_put(&dev_pool, p, "hoop__cuda_free");
}

extern "C" hoop_status hoop__cuda_host_alloc(void **p, size_t bytes)
{
    return alloc_get(&host_pool, p, bytes);
}

extern "C" void hoop__cuda_host_free(void *p)
{
    alloc_put(&host_pool, p, "hoop__cuda_host_free");
}

static void alloc_stats(struct alloc_pool *P, struct hoop__cuda_mem_stats *st)
{
    pthread_mutex_lock(&P->mu);
    *st = P->st;
    pthread_mutex_unlock(&P->mu);
}

extern "C" void hoop__cuda_mem_stats(struct hoop__cuda_mem_stats *st)
{
    alloc_stats(&dev_pool, st);
}

extern "C" void hoop__cuda_host_mem_stats(struct hoop__cuda_mem_stats *st)
{
    alloc_stats(&host_pool, st);
}

extern "C" hoop_status hoop__cuda_empty_cache(void)
{
    hoop_status st = HOOP_OK;
    struct alloc_pool *pools[2] = {&dev_pool, &host_pool};
    for (int i = 0; i < 2; i++) {
        pthread_mutex_lock(&pools[i]->mu);
        /* a pool with blocks has a context; bind this thread to its device first */
        hoop_status bound = pools[i]->st.blocks_cached ? hoop__cuda_init() : HOOP_OK;
        HOOP_CHECK_KEEP(bound, st);
        if (bound == HOOP_OK) HOOP_CHECK_KEEP(alloc_release(pools[i]), st);
        pthread_mutex_unlock(&pools[i]->mu);
    }
    return st;
}
