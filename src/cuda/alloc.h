/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/alloc.h -- the CUDA backend's caching allocators: device memory and pinned
 * (page-locked) host memory (internal; C and C++).
 *
 * cudaMalloc and cudaFree are slow (cudaFree synchronises the whole device), so a freed
 * block is kept and handed out again to a later request of its size class, across
 * training steps: in a step's steady state no cudaMalloc or cudaFree happens (a test
 * counts them). The classes (PyTorch's caching allocator, whose facts this follows):
 * a request of at most 1 MiB rounds up to a multiple of 512 bytes, a larger one to a
 * multiple of 2 MiB; each block is one cudaMalloc of its class's size, so it is at least
 * 256-byte aligned (cudaMalloc's guarantee), and a cached block serves only its own
 * class (no splitting; a block is never handed out larger than its class). When
 * cudaMalloc runs out of memory, the allocator gives every cached block back to CUDA and
 * tries once more before it fails, except on a thread that may not wait for the device
 * (hoop__device_sync_ok, src/core/backend.h: one running a communicator's progress, which
 * a stream's wait for a collective may be waiting for; cudaFree would synchronise the
 * device and never return): there it fails at once, its message saying so. Pinned host memory
 * (cudaMallocHost, which copies need to run asynchronously) is cached the same way, in a pool of
 * its own.
 *
 * Blocks belong to the compute stream: a block freed while kernels on the compute
 * stream may still use it can be handed out again at once, because its next user's work
 * is queued behind them. Memory that the copy stream (or the host, for pinned memory)
 * still uses must be waited for (hoop__cuda_stream_wait, an event) before it is freed.
 *
 * Under the host execution layer (make check) a handed-out block reads as 0xff bytes
 * (NaN) however it was used before, as the layer's cudaMalloc does, and under ASan the
 * bytes past the request and every cached block are poisoned, so a kernel's read out of
 * bounds still stops the test although the block is larger than asked.
 *
 * Thread-safety: every call is thread-safe (one mutex per pool).
 */
#ifndef HOOP_CUDA_ALLOC_H
#define HOOP_CUDA_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A pool's counters since the process started (both pools use this struct; for the
 * pinned pool, "device_mallocs" counts cudaMallocHost calls and "device_frees"
 * cudaFreeHost calls). Sizes are the blocks' class sizes, in bytes. */
struct hoop__cuda_mem_stats {
    uint64_t device_mallocs; /* successful cudaMalloc calls */
    uint64_t device_frees;   /* cudaFree calls (hoop__cuda_empty_cache, out-of-memory) */
    size_t bytes_in_use;     /* blocks handed out and not freed */
    size_t bytes_cached;     /* blocks freed and kept for reuse */
    size_t peak_bytes;       /* the largest bytes_in_use so far */
    size_t blocks_in_use;
    size_t blocks_cached;
    uint64_t cache_hits;    /* requests served from the cache */
    uint64_t cache_flushes; /* out-of-memory retries that gave the cache back to CUDA */
};

/* Device memory: *p = a block of at least bytes (0 allowed: a block no byte of which
 * may be used) on the context's device, made by hoop__cuda_init when needed; contents
 * undefined. Errors: HOOP_ERR_NOMEM "cuda: cannot allocate N bytes on cuda:D (in use X,
 * cached Y ..., device free Z of T)" when the device is full even after giving the cache
 * back (or with the cache kept, on a thread that may not wait for the device); HOOP_ERR_CUDA naming
 * the call for any other CUDA error; HOOP_ERR_INVALID for a NULL p; hoop__cuda_init's errors. *p is
 * NULL on failure. */
hoop_status hoop__cuda_malloc(void **p, size_t bytes);
/* Returns a block of hoop__cuda_malloc to the cache (NULL is a no-op). A pointer that is
 * no block in use (freed twice, or from elsewhere) is ignored with a warning. */
void hoop__cuda_free(void *p);

/* Pinned host memory, as hoop__cuda_malloc / hoop__cuda_free (cudaMallocHost; its
 * out-of-memory message names the pool instead of a device). */
hoop_status hoop__cuda_host_alloc(void **p, size_t bytes);
void hoop__cuda_host_free(void *p);

/* The device pool's and the pinned pool's counters (zero before any allocation). */
void hoop__cuda_mem_stats(struct hoop__cuda_mem_stats *st);
void hoop__cuda_host_mem_stats(struct hoop__cuda_mem_stats *st);

/* Gives every cached block of both pools back to CUDA (cudaFree / cudaFreeHost: not for
 * a training step, as cudaFree synchronises the device); blocks in use stay. Every block
 * is released even when one fails; the first failure is returned (HOOP_ERR_CUDA naming
 * the call). */
hoop_status hoop__cuda_empty_cache(void);

/* The class a request of bytes falls in (the block's size); 0 when it would overflow. */
size_t hoop__cuda_alloc_class(size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* HOOP_CUDA_ALLOC_H */
